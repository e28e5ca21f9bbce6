"""The nodes follow a run's ``quantization.schedule`` epoch by epoch (the network run that switches
from int8 to topk2 is in ``tests/e2e/test_compressed_network.py``); here the paths that refuse:
a pipelined run whose schedule reaches topk2, a Δ in another scheme than its epoch's, and one larger
than its epoch's scheme (refused at its ``Content-Length``, before its body is read)."""

from collections.abc import Iterable, Iterator

import pytest
import torch
from fastapi import FastAPI
from fastapi.responses import Response, StreamingResponse

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
from trainer.checkpoint import checkpoint_layout
from trainer.delta import delta_hash, encode_delta, payload_layout, quantize
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


def test_a_pipelined_run_whose_schedule_reaches_topk2_is_refused_with_the_epoch(tmp_path, dataset) -> None:
    host, validator = PrivateKey(bytes([0x42]) * 32), PrivateKey(bytes([0x43]) * 32)
    pipelined = tiny().with_changes(quantization=SCHEDULE, phases={"pipelined": True})
    ledger = deployed(pipelined, host, validator)
    with pytest.raises(ValueError, match=r"pipelined run cannot use topk2 .*reaches topk2 at epoch 1.*pipelined false"):
        HostNode(ledger, host, pipelined, dataset, tmp_path, no_peers)
    # the same schedule runs synchronously, and a pipelined schedule that stays dense is fine
    synchronous = tiny().with_changes(quantization=SCHEDULE)
    HostNode(deployed(synchronous, host), host, synchronous, dataset, tmp_path / "sync", no_peers)
    ValidatorNode(deployed(synchronous, validator), validator, synchronous, dataset, tmp_path / "v", no_peers)
    dense = tiny().with_changes(quantization={"scheme": "int8", "block_size": 64, "schedule": [
        {"from_epoch": 2, "scheme": "int4", "block_size": 64}]}, phases={"pipelined": True})
    HostNode(deployed(dense, host), host, dense, dataset, tmp_path / "dense", no_peers)


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
