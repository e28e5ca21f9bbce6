"""Endpoint rules: the syntax the contract shares (vectors), and what a reader refuses to dial."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.rules.endpoints import EndpointError, check_endpoint, endpoint_syntax

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "endpoints.json").read_text())


def public(host: str) -> list[str]:
    return {"example.com": ["93.184.215.14"], "inside.example": ["10.1.2.3"]}.get(host, [])


@pytest.mark.parametrize("endpoint", VECTORS["valid"])
def test_valid_endpoints_parse(endpoint: str) -> None:
    scheme, host, port, _ = endpoint_syntax(endpoint)
    assert scheme in ("http", "https") and host and 1 <= port <= 65535


@pytest.mark.parametrize("endpoint", VECTORS["invalid"])
def test_invalid_endpoints_are_refused(endpoint: str) -> None:
    with pytest.raises(EndpointError):
        endpoint_syntax(endpoint)


def test_a_reader_dials_private_addresses_only_when_allowed() -> None:
    assert check_endpoint("https://example.com/", False, public) == "https://example.com"
    for endpoint, reason in [("http://127.0.0.1:8101", "loopback or private"), ("http://[::1]", "loopback or private"),
                             ("http://inside.example", "loopback or private"), ("http://localhost", "this machine"),
                             ("http://nowhere.example", "does not resolve"), ("http://0.0.0.0", "private"),
                             ("http://224.0.0.1", "private"), ("http://[::ffff:10.0.0.1]", "private")]:
        with pytest.raises(EndpointError, match=reason):
            check_endpoint(endpoint, False, public)
        if reason != "does not resolve":
            assert check_endpoint(endpoint, True, public) == endpoint
