"""A pipelined run whose ``quantization.schedule`` reaches topk2, with the real nodes on the embedded
chain (docs/training.md, "Pipelined runs with topk2"): epoch e + 1 trains while e settles, so a
host's residual carries from e − 1 (``trainer.delta.carried_from``), the last epoch settled when it
trains; the validators chain it from that epoch's committed Δ, and a host that hides poison in the
residual it claims to carry is caught.

Schedule ``int8@0,topk2/1024@1``: epochs 1 and 2 start from zeros (nothing topk2 two epochs back),
epoch 3 from what epoch 1's Δ left — so four epochs, the fewest in which a residual carries."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from node.events import EventKind, NodeEvent
from node.validator import ValidatorNode
from protocol.rules.spec import RunSpec
from protocol.tensors.aggregation import aggregate
from trainer.behaviour import HostBehaviour
from trainer.checkpoint import load_checkpoint
from trainer.compress import NEXT, compress, residual_digest
from trainer.data import Dataset
from trainer.delta import carried_from, delta_hash, dequantize, pseudo_gradient
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, EpochResult, StepCallback
from trainer.model import parameter_shapes
from trainer.outer import outer_step
from trainer.presets import tiny
from trainer.probe import admitted, decided_gains, probe_rule
from verifier.adversaries import commit_leaves
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow

POISONED_EPOCH = 3


class PoisonsItsResidual(HostBehaviour):
    """Trains honestly, but in :data:`POISONED_EPOCH` adds ±0.05 to every coordinate of the residual
    leaf S carries and commits the Δ that is exactly the compression of θ_e − θ_S plus it: a Δ
    consistent with its leaf, steered by mass no epoch of its own left behind."""

    name = "poison_residual"
    sparse_leaves = False  # every leaf stored whole: leaf S is read back and rewritten

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        result = super().train_epoch(spec, dataset, ctx, start_params, root, on_step)
        if ctx.epoch != POISONED_EPOCH:
            return result
        epoch_spec, s = spec.for_epoch(ctx.epoch), spec.train.segments
        store = EpochStore(root, ctx.run_id, ctx.host)
        leaves = [load_checkpoint(store.leaf_path(ctx.epoch, g), epoch_spec, g) for g in range(s + 1)]
        end = leaves[-1]
        assert end.residual is not None
        noise = torch.Generator().manual_seed(7)
        poison = {n: t + 0.05 * torch.sign(torch.randn(t.shape, generator=noise)) for n, t in end.residual.items()}
        payload, _ = compress(pseudo_gradient(start_params, end.state.params), poison,
                              epoch_spec.quantization.block_size)
        leaves[-1] = replace(end, residual=poison)
        return commit_leaves(epoch_spec, ctx, leaves, root, payload)


def test_a_pipelined_schedule_to_topk2_carries_from_two_back_settles_and_catches_a_poisoned_residual(
        tmp_path, load_dataset) -> None:
    spec = simulation_spec(tiny().with_changes(
        train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4},
        quantization={"scheme": "int8", "block_size": 64,
                      "schedule": [{"from_epoch": 1, "scheme": "topk2", "block_size": 1024}]}),
        validators=2, hosts=3).with_changes(phases={"pipelined": True})
    assert [carried_from(spec, e) for e in range(5)] == [None, None, None, 1, 2]
    dataset = load_dataset(spec.data)
    roster = Roster(hosts=[host_behaviour(None), host_behaviour(None), PoisonsItsResidual()],
                    validators=[validator_behaviour("honest"), validator_behaviour("honest")])
    events: list[NodeEvent] = []
    net = LocalNetwork(spec, tmp_path / "net", roster, dataset, on_event=events.append,
                       validator_factory=ValidatorNode)
    honest, cheater = net.hosts[:2], net.hosts[2].address
    reports = [net.run_epoch(max_rounds=400) for _ in range(4)]

    for report in reports:
        outcomes = {h.address: h.outcome for h in report.hosts}
        expected = "invalid" if report.epoch == POISONED_EPOCH else "accepted"
        assert outcomes == {**{h.address: "accepted" for h in honest}, cheater: expected}, (report.epoch, outcomes)
        assert report.agreed, f"epoch {report.epoch}: θ not agreed"
    # Caught by the residual check of its last segment: not the one its accepted Δ of epoch 1 left.
    fails = [ev for ev in events if ev.kind == EventKind.VERDICT and ev.outcome == "fail"]
    assert fails and all(ev.epoch == POISONED_EPOCH and cheater[:12] in ev.detail for ev in fails), fails
    assert any("error-feedback residual that is not the one its accepted Δ of epoch 1 committed to" in ev.detail
               for ev in fails), [ev.detail for ev in fails]
    assert net.ledger.epoch(POISONED_EPOCH - 1).start_model_hash is not None  # pipelined: 3 opened early

    s, shapes = spec.train.segments, parameter_shapes(spec)
    for host in honest:
        store = EpochStore(host.root, spec.run_id(), host.address)
        started = {e: load_checkpoint(store.leaf_path(e, s), spec.for_epoch(e), s).residual for e in (1, 2, 3)}
        # epochs 1 and 2 start from zeros (nothing topk2 two back); 3 from what epoch 1's Δ left
        assert all(r is not None and not any(t.any() for t in r.values()) for r in (started[1], started[2]))
        assert started[3] is not None and any(bool(t.any()) for t in started[3].values())
        assert residual_digest(started[3]) == bytes(store.read_delta(spec.for_epoch(1), 1)[NEXT].tolist())
        assert residual_digest(started[3]) != bytes(store.read_delta(spec.for_epoch(2), 2)[NEXT].tolist())

    # Every settled θ^s_{e+1}: the outer step from e's settled start over the accepted Δs (each in
    # its epoch's scheme, bounded by the peers and probed on the chain's gains as every proposer
    # does, topk2 epochs with their own allowance), recomputed from the files.
    globals_ = net.hosts[0].globals
    for report in reports:
        e, info = report.epoch, net.ledger.epoch(report.epoch)
        deltas, weights = {}, {}
        accepted = {h.address for h in report.hosts if h.outcome == "accepted"}
        for host in (h for h in net.hosts if h.address in accepted):
            commitment = next(h.commitment for h in report.hosts if h.address == host.address)
            assert commitment is not None
            payload = EpochStore(host.root, spec.run_id(), host.address).read_delta(spec.for_epoch(e), e)
            assert delta_hash(payload).hex() == commitment.delta_hash
            deltas[host.address] = dequantize(payload, shapes, spec.quantization.at(e))
            weights[host.address] = commitment.segments
        gains = decided_gains({h.address: h.gain_micro for h in report.hosts if h.address in accepted})
        margin, relative = probe_rule(spec, e)
        bound = admitted(deltas, gains, margin, weights, relative_bps=relative)
        assert not bound.excluded, (e, gains)  # no honest host left out by the probe
        kept = bound.kept
        start = globals_.get(info.settled_start or info.model_hash)
        settled = outer_step(start, aggregate(spec.aggregation, kept, {a: weights[a] for a in kept}), spec.outer)
        assert settled.hash().hex() == info.next_model_hash, e
        if e > 0:  # e trained from the optimistic start, agreed before e − 1 settled
            assert net.overlaps[e - 1][0] == e
    assert net.total_funds() == net.initial_funds
