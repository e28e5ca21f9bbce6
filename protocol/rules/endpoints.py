"""Which endpoints a member may advertise and a reader may dial.

An endpoint is what a member registered at bond, so it is attacker-chosen. The contract checks its
syntax at bond (``contracts/veriloco/src/staking.rs``, the same rules as :func:`endpoint_syntax`);
every reader checks it again before dialing (:func:`check_endpoint`) and skips a bad one with a
warning, so nothing a peer registers can crash a daemon.

Syntax (both sides): ``http://`` or ``https://``, then a host and an optional ``:port`` (1-65535),
then an optional path; at most ``MAX_ENDPOINT_LEN`` bytes of printable ASCII; no user info (``@``),
no query or fragment, no backslash. A host is a DNS name (labels of letters, digits and ``-``, not
starting or ending with ``-``, at most 63 each), an IPv4 address in dotted decimal, or an IPv6
address in brackets.

Reachability (readers only, since it depends on where the reader runs): a host that is or resolves
to a loopback, private, link-local, multicast, reserved or unspecified address is refused unless
the run is local (embedded chain, devnet) or the operator allows private endpoints
(``allow_private``), so an endpoint cannot point a reader at services on its own machine or
network.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable

from protocol.errors import VerilocoError
from protocol.rules.limits import MAX_ENDPOINT_LEN

_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_IPV4 = re.compile(r"^[0-9]{1,3}(\.[0-9]{1,3}){3}$")
_PORT = re.compile(r"^[0-9]{1,5}$")
_PATH = re.compile(r"^(/[A-Za-z0-9._~!$&'()*+,;=:%-]*)*$")


class EndpointError(VerilocoError, ValueError):
    """An endpoint that is malformed, or points where the reader must not go."""


def _ipv4(host: str) -> bool:
    """Dotted decimal, four parts of 0-255 without leading zeros (the contract's exact rule)."""
    parts = host.split(".")
    return len(parts) == 4 and all(p.isascii() and p.isdigit() and len(p) <= 3 and int(p) <= 255
                                   and (p == "0" or not p.startswith("0")) for p in parts)


def _host(host: str) -> str:
    """Check a host (without port); return it as written."""
    if host.startswith("["):
        inner = host[1:-1]
        if not host.endswith("]") or "%" in inner or not inner:
            raise EndpointError("an IPv6 host is an address in brackets, without a zone")
        try:
            ipaddress.IPv6Address(inner)
        except ValueError:
            raise EndpointError(f"{host[:80]!r} is not an IPv6 address") from None
        return host
    if _IPV4.match(host):
        if not _ipv4(host):
            raise EndpointError(f"{host!r} is not an IPv4 address")
        return host
    labels = host.split(".")
    if not host or len(host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise EndpointError(f"{host[:80]!r} is not a host name")
    if labels[-1].isdigit():
        raise EndpointError(f"{host[:80]!r} is not a host name (numeric last label)")
    return host


def endpoint_syntax(endpoint: object) -> tuple[str, str, int, str]:
    """Parse an endpoint by the rules the contract shares; return (scheme, host, port, path).

    Raises:
        EndpointError: the first rule it breaks.
    """
    if not isinstance(endpoint, str):
        raise EndpointError("an endpoint is a string")
    if len(endpoint.encode()) > MAX_ENDPOINT_LEN:
        raise EndpointError(f"endpoint is longer than {MAX_ENDPOINT_LEN} bytes")
    if not endpoint.isascii() or not all(0x21 <= ord(c) <= 0x7E for c in endpoint):
        raise EndpointError("an endpoint is printable ASCII without spaces")
    scheme, sep, rest = endpoint.partition("://")
    if not sep or scheme not in ("http", "https"):
        raise EndpointError("an endpoint is an http:// or https:// URL")
    if any(c in rest for c in "@?#\\"):
        raise EndpointError("an endpoint has no user info, query, fragment or backslash")
    authority, slash, path = rest.partition("/")
    path = slash + path
    if not _PATH.match(path):
        raise EndpointError("the endpoint's path has characters a URL path cannot have")
    if authority.startswith("["):
        close = authority.find("]")
        host, port_text = (authority[: close + 1], authority[close + 1:]) if close > 0 else (authority, "")
    else:
        host, _, port_text = authority.partition(":")
        port_text = ":" + port_text if _ else ""
    if port_text:
        if not port_text.startswith(":") or not _PORT.match(port_text[1:]) or not 1 <= int(port_text[1:]) <= 65535:
            raise EndpointError("the endpoint's port must be 1-65535")
        port = int(port_text[1:])
    else:
        port = 443 if scheme == "https" else 80
    return scheme, _host(host), port, path


def _public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


Resolver = Callable[[str], list[str]]
"""Host name -> the addresses it resolves to."""


def check_endpoint(endpoint: object, allow_private: bool, resolver: Resolver) -> str:
    """An endpoint a reader may dial, without its trailing slash.

    Args:
        endpoint: what the member registered.
        allow_private: a local run (embedded chain, devnet) or an operator who allows endpoints on
            loopback and private networks.
        resolver: host name -> addresses, empty when it does not resolve (the DNS lookup is the
            caller's: ``node.http.resolve``).

    Raises:
        EndpointError: malformed, or (unless ``allow_private``) on a non-public address.
    """
    _, host, _, _ = endpoint_syntax(endpoint)
    assert isinstance(endpoint, str)
    if not allow_private:
        bare = host[1:-1] if host.startswith("[") else host
        try:
            addresses = [bare] if ipaddress.ip_address(bare) else []
        except ValueError:
            if bare.lower() == "localhost" or bare.lower().endswith(".localhost"):
                raise EndpointError(f"{bare} is this machine: private endpoints are not allowed in this run") from None
            addresses = resolver(bare)
            if not addresses:
                raise EndpointError(f"{bare[:80]} does not resolve") from None
        for address in addresses:
            if not _public(ipaddress.ip_address(address.split("%")[0])):
                raise EndpointError(f"{bare[:80]} is a loopback or private address ({address}): "
                                    "private endpoints are not allowed in this run")
    return endpoint.rstrip("/")
