"""Remote leaves and Δs are checked as they stream in over real HTTP: a validator's replay and a peer's
Δ read pull the body through the hardened client into the streaming decoder, never the whole body.

Every way a host can spoil a stream ends as it did when bodies were read whole — the artifact was not
served (``unavailable``), never a crash or a fail pinned on the wrong party: a body cut short, one
longer than the layout, an endless one (the reader stops pulling and the connection closes), one
with a byte changed mid-stream (the leaf is not under the committed root, the Δ does not hash to its
commitment), a drip past the deadline, a compressed answer. A connection that breaks part-way is
resumed, and the replay passes.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable

import pytest
from fastapi import FastAPI
from fastapi.responses import Response, StreamingResponse
from suite_env import named_key

from node.http import ClientLimits
from node.http_client import HttpArtifacts
from node.server import ServerThread, create_app
from trainer.artifacts import ArtifactUnavailable, LocalArtifacts, global_path
from trainer.delta import stream_delta
from trainer.outer import GlobalState, stream_global
from verifier.replay import check_challenge

READER = named_key("validator")
KiB = 1 << 10

Body = Callable[[str, bytes], AsyncIterator[bytes]]
"""(kind: "checkpoint" or "delta", the honest bytes) -> what the host streams instead."""


async def pieces(data: bytes, size: int = 64 * KiB) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


def streaming_app(honest, body: Body, headers: dict[str, str] | None = None, only: str | None = None) -> FastAPI:
    """A host's own server streaming its leaves and Δ through ``body`` (honest proofs and losses);
    with ``only``, the other kind is served honestly."""
    app = FastAPI()
    src = honest.source

    def send(kind: str, data: bytes) -> Response:
        stream = body(kind, data) if only in (None, kind) else pieces(data)
        return StreamingResponse(stream, media_type="application/octet-stream",
                                 headers=headers if only in (None, kind) else None)

    @app.get("/v1/epochs/{epoch}/checkpoints/{leaf}")
    def checkpoint(epoch: int, leaf: int) -> Response:
        return send("checkpoint", src.checkpoint(epoch, leaf))

    @app.get("/v1/epochs/{epoch}/proofs/{leaf}")
    def get_proof(epoch: int, leaf: int):
        return src.proof(epoch, leaf).model_dump()

    @app.get("/v1/epochs/{epoch}/losses")
    def get_losses(epoch: int):
        return {"losses_micro": src.losses(epoch)}

    @app.get("/v1/epochs/{epoch}/delta")
    def delta(epoch: int) -> Response:
        return send("delta", src.delta(epoch))

    return app


def replay_over(honest, dataset, app: FastAPI, *, deadline_s: float = 60.0, budget: float = 2.0):
    """The verdict on the last segment (both leaves and the Δ are read) served by ``app``."""
    last = honest.spec.train.segments - 1
    with ServerThread(app) as server:
        source = HttpArtifacts(server.url, READER, honest.spec, allow_private=True, retry_budget_s=budget,
                               limits=ClientLimits(connect_s=2, read_s=2, deadline_s=deadline_s))
        return check_challenge(honest.spec, dataset, honest.challenge(last), source,
                               honest.theta, honest.ctx.prev_epoch_seed)


def test_an_honest_stream_in_odd_pieces_passes(honest, dataset) -> None:
    report = replay_over(honest, dataset, streaming_app(honest, lambda kind, data: pieces(data, 7919)))
    assert report.outcome == "pass", report.reason
    assert report.measurements["delta_bytes"] == len(honest.source.delta(0))


def test_a_connection_broken_part_way_is_resumed_not_restarted(honest, dataset) -> None:
    attempts: dict[str, int] = {}

    async def breaks_once(kind: str, data: bytes) -> AsyncIterator[bytes]:
        attempts[kind] = attempts.get(kind, 0) + 1
        half = len(data) // 2
        yield data[:half]
        if attempts[kind] == 1:
            raise ConnectionResetError("the host's process died mid-answer")
        yield data[half:]

    report = replay_over(honest, dataset, streaming_app(honest, breaks_once), budget=10)
    assert report.outcome == "pass", report.reason
    assert attempts["delta"] == 2  # asked again once, and the reader saw one continuous body


def _cut(kind: str, data: bytes) -> AsyncIterator[bytes]:
    return pieces(data[:len(data) - 1000])


def _longer(kind: str, data: bytes) -> AsyncIterator[bytes]:
    return pieces(data + b"\x00" * 1000)  # within the HTTP cap: the decoder refuses it


def _flipped(kind: str, data: bytes) -> AsyncIterator[bytes]:
    spoiled = bytearray(data)
    spoiled[len(data) // 2] ^= 0x01  # mid-stream, inside a tensor: still decodes
    return pieces(bytes(spoiled))


@pytest.mark.parametrize("body, only, why", [
    (_cut, None, "truncated"),
    (_longer, None, "oversized"),
    (_flipped, "checkpoint", "not under the committed root"),
    (_flipped, "delta", "hashes to"),
])
def test_a_spoiled_stream_is_unserved_as_before(honest, dataset, body, only, why) -> None:
    report = replay_over(honest, dataset, streaming_app(honest, body, only=only))
    assert report.outcome == "unavailable" and why in report.reason, report.reason


def test_an_endless_stream_is_cut_and_the_connection_closed(honest, dataset) -> None:
    sent = [0]

    async def endless(kind: str, data: bytes) -> AsyncIterator[bytes]:
        async for piece in pieces(data):
            sent[0] += len(piece)
            yield piece
        while sent[0] < 1 << 30:  # a guard for the test itself: a reader that never stops fails it
            sent[0] += 64 * KiB
            yield bytes(64 * KiB)
            await asyncio.sleep(0)  # lets the server see the reader hang up (a real host awaits its disk)

    report = replay_over(honest, dataset, streaming_app(honest, endless, only="checkpoint"))
    # Whichever stops it first (the decoder at the layout's size or the HTTP cap just above it)
    # names it oversized.
    assert report.outcome == "unavailable" and "oversized" in report.reason, report.reason
    # The reader stopped pulling after the layout's size and hung up: the host could send the
    # leaf and what the socket buffers hold, not the gigabyte it meant to.
    assert sent[0] < len(honest.source.checkpoint(0, 0)) + (64 << 20)


def test_a_drip_past_the_deadline_is_unavailable(honest, dataset) -> None:
    async def drip(kind: str, data: bytes) -> AsyncIterator[bytes]:
        yield data[:100]
        for i in range(100, len(data), 512):
            await asyncio.sleep(0.05)
            yield data[i:i + 512]

    report = replay_over(honest, dataset, streaming_app(honest, drip, only="checkpoint"), deadline_s=1.5, budget=0)
    assert report.outcome == "unavailable" and "deadline" in report.reason, report.reason


def test_a_compressed_stream_is_refused_never_inflated(honest, dataset) -> None:
    report = replay_over(honest, dataset, streaming_app(honest, lambda kind, data: pieces(gzip.compress(data)),
                                                        headers={"Content-Encoding": "gzip"}))
    assert report.outcome == "unavailable" and "Content-Encoding" in report.reason, report.reason


def test_a_peer_reads_a_delta_and_a_global_state_as_they_stream(honest, tmp_path) -> None:
    # The aggregation path (a Δ by epoch and by hash) and the resync path (a global state by hash),
    # through the project's own server, decoded and hashed as the bytes arrive.
    spec = honest.spec
    state = GlobalState.initial(spec)
    model_hash = state.hash().hex()
    path = global_path(tmp_path, spec.run_id(), model_hash)  # where a holder keeps it
    path.parent.mkdir(parents=True)
    state.save(path)
    source = LocalArtifacts(tmp_path, spec.run_id(), honest.ctx.host)
    app = create_app(honest.source, spec.run_id().hex(), honest.ctx.host, authorize=lambda a: True)
    holder = create_app(source, spec.run_id().hex(), honest.ctx.host, authorize=lambda a: True)
    with ServerThread(app) as host, ServerThread(holder) as peer:
        reader = HttpArtifacts(host.url, READER, spec, allow_private=True, retry_budget_s=2)
        _, digest = stream_delta(reader.delta_chunks(0), spec)
        assert digest.hex() == honest.result.commitment.delta_hash
        by_peer = HttpArtifacts(peer.url, READER, spec, allow_private=True, retry_budget_s=2)
        got, state_hash = stream_global(by_peer.global_state_chunks(model_hash), spec)
        assert state_hash.hex() == model_hash == got.hash().hex()
        with pytest.raises(ArtifactUnavailable, match="404"):
            list(by_peer.delta_by_hash_chunks("ab" * 32))
