"""A network on the embedded chain with topk2 pseudo-gradients: honest hosts carry their error-feedback
residuals from epoch to epoch, the validators check the chain of residuals, and every epoch agrees;
and a run whose ``quantization.schedule`` switches from int8 to topk2 between epochs."""

from __future__ import annotations

import pytest
import torch

from node.validator import ValidatorNode
from protocol.tensors.aggregation import aggregate
from trainer.checkpoint import load_checkpoint
from trainer.compress import NEXT, residual_digest
from trainer.delta import delta_hash, dequantize, load_delta
from trainer.epoch_store import EpochStore
from trainer.model import parameter_shapes
from trainer.outer import outer_step
from trainer.presets import tiny
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("keep_epochs", [None, 0])
def test_topk2_epochs_chain_their_residuals_and_agree(tmp_path, load_dataset, keep_epochs) -> None:
    # keep_epochs 0: a topk2 host still keeps the epoch before (its residual and Δ are needed)
    spec = simulation_spec(tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4},
                                               quantization={"scheme": "topk2", "block_size": 1024}),
                           validators=2)
    dataset = load_dataset(spec.data)
    roster = Roster(hosts=[host_behaviour(None), host_behaviour(None)],
                    validators=[validator_behaviour("honest"), validator_behaviour("honest")])
    net = LocalNetwork(spec, tmp_path / "net", roster, dataset, validator_factory=ValidatorNode,
                       keep_epochs=keep_epochs)
    reports = [net.run_epoch(max_rounds=200) for _ in range(2)]
    for report in reports:
        assert {h.outcome for h in report.hosts} == {"accepted"} and report.agreed
    if keep_epochs is not None:
        return
    s = spec.train.segments
    for host in net.hosts:
        store = EpochStore(host.root, spec.run_id(), host.address)
        first, second = store.read_delta(spec, 0), store.read_delta(spec, 1)
        carried = load_checkpoint(store.leaf_path(1, s), spec, s).residual
        assert carried is not None and any(bool(t.abs().sum() > 0) for t in carried.values())
        # epoch 1 started from what epoch 0's committed Δ left, and committed to what it leaves
        assert residual_digest(carried) == bytes(first[NEXT].tolist())
        assert residual_digest(store.read_residual(spec, 1)) == bytes(second[NEXT].tolist())
        assert not torch.equal(first[NEXT], second[NEXT])
    # what the validators keep by hash (and serve to peers) is the Δ of that hash, not another epoch's
    kept = [path for v in net.validators for path in (v.root / spec.run_id().hex() / "deltas").glob("*.safetensors")]
    assert kept
    for path in kept:
        assert delta_hash(load_delta(path, spec)).hex() == path.stem
    assert net.total_funds() == net.initial_funds


def test_a_scheduled_run_switches_scheme_on_chain_and_settles_the_recomputed_models(tmp_path, load_dataset) -> None:
    # int8 in epoch 0, topk2 from epoch 1 (quantization.schedule): the hosts encode, the validators
    # replay and the proposers dequantize each epoch in its own scheme; epoch 1's residual starts at
    # zero (int8 left none), epoch 2's from what epoch 1's Δ left.
    spec = simulation_spec(tiny().with_changes(
        train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4},
        quantization={"scheme": "int8", "block_size": 64,
                      "schedule": [{"from_epoch": 1, "scheme": "topk2", "block_size": 1024}]}), validators=2)
    dataset = load_dataset(spec.data)
    roster = Roster(hosts=[host_behaviour(None), host_behaviour(None)],
                    validators=[validator_behaviour("honest"), validator_behaviour("honest")])
    net = LocalNetwork(spec, tmp_path / "net", roster, dataset, validator_factory=ValidatorNode)
    reports = [net.run_epoch(max_rounds=300) for _ in range(3)]
    for report in reports:
        assert {h.outcome for h in report.hosts} == {"accepted"} and report.agreed
        assert report.challenges  # the validators replayed something of every epoch
    s, shapes = spec.train.segments, parameter_shapes(spec)
    for host in net.hosts:
        store = EpochStore(host.root, spec.run_id(), host.address)
        sizes = [store.delta_path(e).stat().st_size for e in range(3)]
        assert sizes[0] > 10 * sizes[1] and sizes[1] == sizes[2]  # int8, then topk2's few bytes
        started = load_checkpoint(store.leaf_path(1, s), spec.for_epoch(1), s).residual
        assert started is not None and all(not t.any() for t in started.values())
        carried = load_checkpoint(store.leaf_path(2, s), spec.for_epoch(2), s).residual
        assert carried is not None and any(bool(t.any()) for t in carried.values())
        assert residual_digest(carried) == bytes(store.read_delta(spec.for_epoch(1), 1)[NEXT].tolist())
    # Every settled θ_{e+1}: the outer step from θ_e over the committed Δs, each dequantized in its
    # epoch's scheme and weighted by its segments, recomputed here from the hosts' files.
    globals_ = net.hosts[0].globals
    for e, report in enumerate(reports):
        deltas, weights = {}, {}
        for host in net.hosts:
            commitment = next(h.commitment for h in report.hosts if h.address == host.address)
            assert commitment is not None
            payload = EpochStore(host.root, spec.run_id(), host.address).read_delta(spec.for_epoch(e), e)
            assert delta_hash(payload).hex() == commitment.delta_hash
            deltas[host.address] = dequantize(payload, shapes, spec.quantization.at(e))
            weights[host.address] = commitment.segments
        theta = globals_.get(report.model_hash)
        new = outer_step(theta, aggregate(spec.aggregation, deltas, weights), spec.outer)
        assert new.hash().hex() == report.next_model_hash
    assert reports[1].model_hash != reports[2].model_hash
    assert net.total_funds() == net.initial_funds
