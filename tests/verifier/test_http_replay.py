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


def test_an_honest_end_leaf_travels_as_its_chunk_digests_over_http(honest, dataset) -> None:
    app = create_app(honest.source, honest.spec.run_id().hex(), honest.ctx.host, authorize=lambda a: True)
    report = verdict_over_http(honest, dataset, app, 1)
    assert report.outcome == "pass", report.reason
    assert report.transfer["end_leaf"] == "own"  # the replay reproduced it: no chunk read
    served = app.state.stats.served
    assert served["checkpoint"] == 1 and served["digests"] == 1 and served["chunk"] == 0


def digests_app(honest, digests) -> FastAPI:
    """:func:`lying_app` (honest leaves, proofs, losses, Δ) that serves ``digests`` as every leaf's digest list."""
    app = lying_app(honest)

    @app.get("/v1/epochs/{epoch}/checkpoints/{leaf}/digests")
    def get_digests(epoch: int, leaf: int) -> Response:
        return Response(digests, media_type="application/json")

    return app


@pytest.mark.parametrize("digests", [
    b'{"tensors": [{"name": "step", "dtype": "I64", "shape": [], "chunks": []}]}',  # not the leaf's layout
    b'{"tensors": [' + b'{"name": "x", "dtype": "F32", "shape": [1], "chunks": []},' * 40000 + b"{}]}",  # too large
    b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
])
def test_digests_that_are_not_the_leaf_s_are_never_used_over_http(honest, dataset, digests) -> None:
    report = verdict_over_http(honest, dataset, digests_app(honest, digests), 1)
    assert report.outcome == "pass", report.reason
    assert report.transfer["end_leaf"] == "whole"


def test_chunk_routes_refuse_what_the_leaf_does_not_have(honest) -> None:
    from node.http import HttpFailure, SafeClient
    from protocol.auth import sign_request
    from trainer.artifacts import ArtifactUnavailable

    app = create_app(honest.source, honest.spec.run_id().hex(), honest.ctx.host, authorize=lambda a: True)
    with ServerThread(app) as server:
        source = HttpArtifacts(server.url, READER, honest.spec, allow_private=True, retry_budget_s=0.5)
        digests = source.leaf_digests(0, 1)
        assert isinstance(digests, dict) and len(digests["tensors"]) > 3
        assert len(source.leaf_chunk(0, 1, 0, 0)) > 0
        for tensor, chunk in ((0, 1), (len(digests["tensors"]), 0)):  # past the tensor's chunks, no such tensor
            with pytest.raises(ArtifactUnavailable):
                source.leaf_chunk(0, 1, tensor, chunk)
        path = "/v1/epochs/0/checkpoints/1/chunks/-1/0"
        with pytest.raises(HttpFailure) as refused:
            SafeClient().get_bytes(server.url + path, sign_request(READER, "GET", path, honest.spec.run_id().hex()),
                                   1024)
        assert refused.value.status == 422
