"""The nodes follow a run's ``quantization.schedule`` epoch by epoch (the network runs that switch
from int8 to topk2 are in ``tests/e2e/test_compressed_network.py`` and, pipelined,
``tests/e2e/test_pipelined_topk2_network.py``); here the residual rule a pipelined run follows, and
the paths that refuse: a Δ in another scheme than its epoch's, and one larger than its epoch's
scheme (refused at its ``Content-Length``, before its body is read)."""

from collections.abc import Iterable, Iterator

import pytest
import torch
from fastapi import FastAPI
from fastapi.responses import Response, StreamingResponse
from http_network import HttpNetwork

from chain.embedded import EmbeddedChain
from chain.embedded.backend import deploy_embedded
from node.host import HostNode
from node.http_client import HEADER_ALLOWANCE, HttpArtifacts, artifact_limits
from node.leaf_holding import FromHolder
from node.server import ServerThread
from node.validator import ValidatorNode
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import PrivateKey
from protocol.views import AggregationInput, Challenge
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.behaviour import HostBehaviour
from trainer.checkpoint import checkpoint_layout, load_checkpoint
from trainer.compress import NEXT, residual_digest
from trainer.delta import carried_from, delta_hash, encode_delta, payload_layout, quantize
from trainer.epoch_store import EpochStore
from trainer.model import parameter_shapes
from trainer.outer import GlobalState
from trainer.presets import tiny
from trainer.tensorfile import expected_size

SCHEDULE = {"scheme": "int8", "block_size": 64, "schedule": [{"from_epoch": 1, "scheme": "topk2", "block_size": 1024}]}


def no_peers(endpoint: str) -> ArtifactSource:
    raise ArtifactUnavailable(f"no peers here: {endpoint}")


class ServesOneDelta(ArtifactSource):
    """A peer that serves ``data`` as its Δ of any epoch and nothing else."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        raise ArtifactUnavailable("no leaves here")

    def proof(self, epoch: int, leaf: int) -> bytes:
        raise ArtifactUnavailable("no proofs here")

    def delta(self, epoch: int) -> bytes:
        return self.data

    def delta_chunks(self, epoch: int) -> Iterable[bytes]:
        return iter([self.data])

    def losses(self, epoch: int) -> bytes:
        raise ArtifactUnavailable("no losses here")

    def global_state(self, model_hash: str) -> bytes:
        raise ArtifactUnavailable("no models here")


def deployed(spec, *keys):
    operator = PrivateKey(bytes([0x41]) * 32)
    chain = EmbeddedChain(genesis_balances={k.address(): {DENOM: GENESIS_BALANCE} for k in (operator, *keys)})
    return deploy_embedded(chain, operator, spec, "00" * 32, operator.address())


def test_a_pipelined_run_carries_each_residual_from_two_epochs_back(tmp_path, dataset) -> None:
    # Synchronous: from e − 1 once both are topk2. Pipelined: from e − 2, the last epoch settled
    # when e trains; the first topk2 epochs after a dense one (or epoch 0 and 1) start from zeros.
    synchronous = tiny().with_changes(quantization=SCHEDULE)
    pipelined = synchronous.with_changes(phases={"pipelined": True})
    assert [carried_from(synchronous, e) for e in range(5)] == [None, None, 1, 2, 3]
    assert [carried_from(pipelined, e) for e in range(5)] == [None, None, None, 1, 2]
    topk2 = tiny().with_changes(quantization={"scheme": "topk2", "block_size": 1024}, phases={"pipelined": True})
    assert [carried_from(topk2, e) for e in range(4)] == [None, None, 0, 1]
    dense = tiny().with_changes(phases={"pipelined": True})
    assert [carried_from(dense, e) for e in range(4)] == [None] * 4
    # Hosts and validators of such a run start (a pipelined topk2 run was refused before).
    host, validator = PrivateKey(bytes([0x42]) * 32), PrivateKey(bytes([0x43]) * 32)
    ledger = deployed(pipelined, host, validator)
    node = HostNode(ledger, host, pipelined, dataset, tmp_path, no_peers)
    ValidatorNode(ledger, validator, pipelined, dataset, tmp_path / "v", no_peers)
    assert not node._accepted_before(2)  # epoch 0 was int8: epoch 2 starts from zeros, no chain read
    # Kept whatever keep_epochs: the Δ e's validators chain from, e − 2 pipelined, read while e + 1
    # is current (3 before it); synchronous: e − 1 while e is current.
    for spec, kept in ((synchronous, [4]), (pipelined, [2, 3, 4])):
        ledger = deployed(spec, host)
        node = HostNode(ledger, host, spec, dataset, tmp_path / str(len(kept)), no_peers, keep_epochs=0)
        for e in range(5):
            node.epochs.directory(e).mkdir(parents=True)
        node._windows_closed = lambda epoch: True  # type: ignore[method-assign]
        node._prune(5)
        assert node.epochs.epochs_on_disk() == kept


def test_a_delta_in_another_scheme_than_its_epoch_is_refused_by_the_proposer(tmp_path, dataset) -> None:
    host, peer = PrivateKey(bytes([0x42]) * 32), PrivateKey(bytes([0x44]) * 32)
    spec = tiny().with_changes(quantization=SCHEDULE)
    theta = GlobalState.initial(spec)
    shapes = parameter_shapes(spec)
    delta = {n: torch.full(s, 1e-4) for n, s in shapes.items()}
    int8 = encode_delta(quantize(delta, spec.quantization.at(0)), spec.quantization.at(0))
    committed = AggregationInput(address=peer.address(), endpoint="http://peer.invalid",
                                 delta_hash=delta_hash(quantize(delta, spec.quantization.at(0))).hex(), segments=1)
    node = HostNode(deployed(spec, host, peer), host, spec, dataset, tmp_path, lambda endpoint: ServesOneDelta(int8))
    # epoch 0 is int8: the peer's Δ is read and dequantized
    assert node._checked_delta(0, theta, committed, [committed]) is not None
    # epoch 1 is topk2: the same int8 bytes (hash and all) are no Δ of it
    with pytest.raises(ArtifactUnavailable, match=r"epoch 1's Δs are topk2, block 1024"):
        node._checked_delta(1, theta, committed, [committed])


def test_served_size_caps_cover_every_scheme_of_the_schedule() -> None:
    spec = tiny().with_changes(quantization=SCHEDULE)
    limits, shapes, s = artifact_limits(spec), parameter_shapes(spec), spec.train.segments
    # int8's Δ (epoch 0) is the larger one; topk2's leaf S (epoch 1, with its residual) the larger leaf
    assert limits["delta"] >= expected_size(payload_layout(shapes, spec.quantization.at(0)))
    assert limits["checkpoint"] >= expected_size(checkpoint_layout(spec.for_epoch(1), s))
    assert expected_size(checkpoint_layout(spec.for_epoch(1), s)) > artifact_limits(tiny())["checkpoint"]


def oversized(size: int) -> FastAPI:
    """A host's server that answers every Δ request, by epoch or by hash, with ``size`` zero bytes
    and a ``Content-Length`` saying so."""
    app = FastAPI()

    def body() -> Iterator[bytes]:
        for start in range(0, size, 4096):
            yield bytes(min(4096, size - start))

    def send() -> Response:
        return StreamingResponse(body(), media_type="application/octet-stream", headers={"content-length": str(size)})

    app.get("/v1/epochs/{epoch}/delta")(lambda epoch: send())
    app.get("/v1/deltas/{delta_hash}")(lambda delta_hash: send())
    return app


def test_a_delta_larger_than_its_epochs_scheme_is_refused_before_its_body(tmp_path, dataset) -> None:
    spec = tiny().with_changes(quantization=SCHEDULE)
    host, peer = PrivateKey(bytes([0x42]) * 32), PrivateKey(bytes([0x44]) * 32)
    shapes = parameter_shapes(spec)
    int8_bytes = expected_size(payload_layout(shapes, spec.quantization.at(0)))
    topk2_bytes = expected_size(payload_layout(shapes, spec.quantization.at(1)))
    # epoch 1's cap is topk2's size; unnamed, the schedule's largest (int8's)
    assert artifact_limits(spec, 1)["delta"] == topk2_bytes + HEADER_ALLOWANCE < artifact_limits(spec)["delta"]
    assert artifact_limits(spec, 0)["delta"] == artifact_limits(spec)["delta"] == int8_bytes + HEADER_ALLOWANCE
    # A host serving an int8-sized body for topk2's epoch 1 (24× its Δ at tiny): under the
    # largest cap, over epoch 1's, so refused at its header wherever the reader names the epoch.
    size = int8_bytes
    assert artifact_limits(spec, 1)["delta"] < size < artifact_limits(spec)["delta"]
    with ServerThread(oversized(size)) as server:
        reader = HttpArtifacts(server.url, host, spec, allow_private=True, retry_budget_s=0.5)
        # validators read the host's Δ by epoch, and a holder's by hash with the epoch named
        with pytest.raises(ArtifactUnavailable, match=r"Content-Length \d+ exceeds the limit"):
            list(reader.delta_chunks(1))
        challenge = Challenge(epoch=1, host=peer.address(), segment=1, segments=2, checkpoint_root="00" * 32,
                              delta_hash="ab" * 32, loss_digest="00" * 32, train_loss_micro=0, endpoint=server.url,
                              validators=[])
        with pytest.raises(ArtifactUnavailable, match=r"Content-Length \d+ exceeds the limit"):
            list(FromHolder(reader, challenge).delta_chunks(1))
        # the proposer's read of a peer's Δ of epoch 1 (by epoch, then by hash from holders)
        node = HostNode(deployed(spec, host, peer), host, spec, dataset, tmp_path,
                        lambda endpoint: HttpArtifacts(endpoint, host, spec, allow_private=True, retry_budget_s=0.5))
        committed = AggregationInput(address=peer.address(), endpoint=server.url, delta_hash="ab" * 32, segments=2)
        with pytest.raises(ArtifactUnavailable, match=r"exceeds the limit"):
            node._checked_delta(1, GlobalState.initial(spec), committed, [committed])
        # the same body by hash with no epoch named is under the run's largest cap: it is read
        assert sum(len(chunk) for chunk in reader.delta_by_hash_chunks("ab" * 32)) == size


@pytest.mark.slow
def test_a_scheduled_run_over_real_http_accepts_every_host(tmp_path, dataset) -> None:
    # Every read between the nodes goes through their real servers and the hardened client, capped
    # by the epoch's scheme: int8 in epoch 0, topk2 from epoch 1, epoch 2 chaining epoch 1's residual
    # (its validators read the host's epoch-1 Δ over HTTP to check it).
    spec = tiny("quant-schedule-http").with_changes(
        train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4}, quantization=SCHEDULE,
        verification={"challenges_k": 1, "validators_r": 1},
        phases={"min_hosts": 2, "min_validators": 2, "join_blocks": 20, "train_blocks": 60, "reveal_blocks": 20,
                "verify_blocks": 60, "verdict_reveal_blocks": 30, "propose_blocks": 30})
    net = HttpNetwork(spec, tmp_path, dataset, [HostBehaviour(), HostBehaviour()], validators=2)
    try:
        reports = [net.run_epoch() for _ in range(3)]
    finally:
        net.close()
    for report in reports:
        assert {h.outcome for h in report.hosts} == {"accepted"} and len(report.hosts) == 2, report.epoch
        last = [c for c in report.challenges if c.segment == spec.train.segments - 1]
        assert len(last) == 2 and {c.outcome for c in last} == {"pass"}  # each host's Δ checked
        assert report.next_model_hash is not None
    s = spec.train.segments
    for i in range(2):
        node = net.host(i).node
        store = EpochStore(node.root, spec.run_id(), node.address)
        sizes = [store.delta_path(e).stat().st_size for e in range(3)]
        assert sizes[0] > 10 * sizes[1] and sizes[1] == sizes[2]
        carried = load_checkpoint(store.leaf_path(2, s), spec.for_epoch(2), s).residual
        assert carried is not None and any(bool(t.any()) for t in carried.values())
        assert residual_digest(carried) == bytes(store.read_delta(spec.for_epoch(1), 1)[NEXT].tolist())
    assert net.total_funds() == net.initial_funds
