"""A network on the embedded chain with topk2 pseudo-gradients: honest hosts carry their error-feedback
residuals from epoch to epoch, the validators check the chain of residuals, and every epoch agrees."""

from __future__ import annotations

import pytest
import torch

from node.validator import ValidatorNode
from trainer.checkpoint import load_checkpoint
from trainer.compress import NEXT, residual_digest
from trainer.delta import delta_hash, load_delta
from trainer.epoch_store import EpochStore
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
