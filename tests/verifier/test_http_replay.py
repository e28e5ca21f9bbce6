"""Replays over real HTTP: an honest host passes, a host serving garbage fails, a silent one is unavailable."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from suite_env import named_key

from node.http_client import HttpArtifacts
from node.server import ServerThread, create_app
from verifier.replay import check_challenge

READER = named_key("validator")


def verdict_over_http(served, dataset, app: FastAPI, segment: int):
    with ServerThread(app) as server:
        source = HttpArtifacts(server.url, READER, served.spec, allow_private=True, retry_budget_s=2)
        return check_challenge(served.spec, dataset, served.challenge(segment), source,
                               served.theta, served.ctx.prev_epoch_seed)


def test_honest_host_passes_over_http(honest, dataset) -> None:
    app = create_app(honest.source, honest.spec.run_id().hex(), honest.ctx.host, authorize=lambda a: True)
    last = honest.spec.train.segments - 1
    for segment in (0, last):
        report = verdict_over_http(honest, dataset, app, segment)
        assert report.outcome == "pass", report.reason


def lying_app(honest, *, proof=None, losses=None, status: int | None = None) -> FastAPI:
    """A host running its own server code: honest checkpoints and Δ, but lies where told."""
    app = FastAPI()
    src = honest.source

    @app.get("/v1/epochs/{epoch}/checkpoints/{leaf}")
    def checkpoint(epoch: int, leaf: int) -> Response:
        if status:
            return Response(status_code=status)
        return Response(src.checkpoint(epoch, leaf), media_type="application/octet-stream")

    @app.get("/v1/epochs/{epoch}/proofs/{leaf}")
    def get_proof(epoch: int, leaf: int):
        return JSONResponse(proof) if proof is not None else src.proof(epoch, leaf).model_dump()

    @app.get("/v1/epochs/{epoch}/losses")
    def get_losses(epoch: int):
        if losses is not None:
            return Response(losses, media_type="application/json")
        return {"losses_micro": src.losses(epoch)}

    @app.get("/v1/epochs/{epoch}/delta")
    def delta(epoch: int) -> Response:
        return Response(src.delta(epoch), media_type="application/octet-stream")

    return app


@pytest.mark.parametrize("lie", [
    {"proof": {"index": 0, "leaf_count": 5, "siblings": ["zz"]}},
    {"proof": {"garbage": True}},
    {"proof": [1, 2, 3]},
    {"losses": b"not json at all"},
    {"losses": b'{"losses_micro": "many"}'},
])
def test_garbage_from_the_host_is_unserved_never_a_crash(honest, dataset, lie) -> None:
    # Garbage is not the committed artifact: that reader was not served (docs/contract.md: an
    # unavailable vote slashes neither the host nor the voter; a dispute committee decides).
    report = verdict_over_http(honest, dataset, lying_app(honest, **lie), 1)
    assert report.outcome == "unavailable", report.reason


def test_a_host_that_refuses_is_unavailable(honest, dataset) -> None:
    report = verdict_over_http(honest, dataset, lying_app(honest, status=404), 1)
    assert report.outcome == "unavailable", report.reason
