"""topk2 with error feedback, verified: the last segment's validators recompute the compressed Δ and
check the residual it starts from, so a host can neither choose its coordinates nor hide poison in
its residual."""

from __future__ import annotations

import shutil
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
import torch
from suite_env import HOST
from verifier_env import Served, Tampered, commit_leaves, leaves_of

from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import RunSpec
from trainer.artifacts import ArtifactUnavailable, LocalArtifacts
from trainer.compress import NEXT, compress, decay_residual, residual_digest, zero_residual
from trainer.data import Dataset
from trainer.delta import delta_hash, dequantize, pseudo_gradient
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, ResidualUnavailable, run_epoch
from trainer.model import parameter_shapes
from trainer.outer import GlobalState, outer_step
from verifier.adversaries import Honest
from verifier.replay import check_challenge


@pytest.fixture(scope="module")
def sparse(spec: RunSpec) -> RunSpec:
    return spec.with_changes(quantization={"scheme": "topk2", "block_size": 1024})


def _epoch(spec: RunSpec, dataset: Dataset, root: Path, epoch: int, theta: GlobalState, carry: bool) -> Served:
    run_id = spec.run_id()
    ctx = EpochContext(run_id, epoch, HOST, genesis_seed(run_id))
    result = run_epoch(spec, dataset, ctx, theta.params, root, carry_residual=carry)
    assert result is not None
    return Served(spec, ctx, theta, result, LocalArtifacts(root, run_id, HOST), Honest())


@pytest.fixture(scope="module")
def two_epochs(sparse: RunSpec, dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> tuple[Served, Served]:
    """An honest topk2 host's epoch 0, then epoch 1 (accepted before, so it carries its residual)."""
    root = tmp_path_factory.mktemp("topk2")
    first = _epoch(sparse, dataset, root, 0, GlobalState.initial(sparse), carry=False)
    shapes = parameter_shapes(sparse)
    theta1 = outer_step(first.theta, dequantize(first.result.payload, shapes, sparse.quantization), sparse.outer)
    return first, _epoch(sparse, dataset, root, 1, theta1, carry=True)


def _check(served: Served, dataset: Dataset, previous: str | None, source=None):
    last = served.spec.train.segments - 1
    return check_challenge(served.spec, dataset, served.challenge(last), source or served.source, served.theta,
                           served.ctx.prev_epoch_seed, previous_delta=previous)


def test_honest_epochs_pass_and_the_residual_chains(two_epochs, dataset) -> None:
    first, second = two_epochs
    report = _check(first, dataset, None)
    assert report.outcome == "pass", report.reason
    carried = leaves_of(second)[-1].residual
    assert carried is not None and any(bool(t.abs().sum() > 0) for t in carried.values())
    # what epoch 1 starts from is what epoch 0's committed Δ said it left
    assert residual_digest(carried) == bytes(first.result.payload[NEXT].tolist())
    report = _check(second, dataset, first.result.commitment.delta_hash)
    assert report.outcome == "pass", report.reason
    assert report.measurements["residual_hash"] == report.measurements["expected_residual_hash"]
    assert report.measurements["bitwise"] is True


def test_a_residual_the_chain_does_not_back_fails(two_epochs, dataset) -> None:
    # Validators who see the host was not accepted in epoch 0 expect a zero residual.
    _, second = two_epochs
    report = _check(second, dataset, None)
    assert (report.outcome, report.check) == ("fail", "residual")


def test_poison_hidden_in_the_residual_fails(two_epochs, dataset, tmp_path) -> None:
    first, second = two_epochs
    leaves = leaves_of(second)
    end = leaves[-1]
    assert end.residual is not None
    poison = {n: t + 0.05 * torch.sign(torch.randn_like(t)) for n, t in end.residual.items()}
    payload, _ = compress(pseudo_gradient(second.theta.params, end.state.params), poison,
                          second.spec.quantization.block_size)
    leaves[-1] = replace(end, residual=poison)
    run_id = second.spec.run_id()
    shutil.copytree(EpochStore(first.source.root, run_id, HOST).directory(0),  # type: ignore[attr-defined]
                    EpochStore(tmp_path, run_id, HOST).directory(0))  # the cheater's own epoch 0
    forged = commit_leaves(second, leaves, tmp_path, payload)  # a consistent Δ for the forged residual
    report = _check(replace(forged, theta=second.theta), dataset, first.result.commitment.delta_hash)
    assert (report.outcome, report.check) == ("fail", "residual"), report.reason


def test_a_host_that_sends_other_coordinates_fails(two_epochs, dataset, tmp_path) -> None:
    first, _ = two_epochs
    payload = {n: t.clone() for n, t in first.result.payload.items()}
    name = next(n for n in sorted(payload) if n.startswith("idx/") and payload[n].shape[1] > 2)
    row = payload[name][0]
    kept = set(row.tolist())
    other = next(i for i in range(int(row[-2]) + 1, int(row[-1])) if i not in kept) if int(row[-1]) - int(row[-2]) > 1 \
        else None
    if other is None:  # swap in the first offset not kept, keeping the row sorted
        other = next(i for i in range(1024) if i not in kept)
        payload[name][0] = torch.tensor(sorted((kept - {int(row[-1])}) | {other}), dtype=torch.int16)
    else:
        payload[name][0, -2] = other
    forged = commit_leaves(first, leaves_of(first), tmp_path, payload)
    report = _check(replace(forged, theta=first.theta), dataset, None)
    assert (report.outcome, report.check) == ("fail", "delta"), report.reason


def test_a_host_that_withholds_its_previous_delta_is_unavailable(two_epochs, dataset) -> None:
    first, second = two_epochs

    def refuse(epoch, _leaf, value):
        if epoch == 0:
            raise ArtifactUnavailable("not serving epoch 0")
        return value

    report = _check(second, dataset, first.result.commitment.delta_hash, Tampered(second.source, delta=refuse))
    assert report.outcome == "unavailable", report.reason


def test_a_host_without_the_residual_it_committed_to_cannot_train(sparse, dataset, two_epochs, tmp_path) -> None:
    first, _ = two_epochs
    store = EpochStore(tmp_path, sparse.run_id(), HOST)
    with pytest.raises(ResidualUnavailable):  # a fresh work root: epoch 0's residual is not there
        _epoch(sparse, dataset, tmp_path, 1, first.theta, carry=True)
    assert not store.residual_path(0).exists()


# quantization.schedule: int8 in epoch 0, topk2 from epoch 1 (DiLoCoX's adaptive compression, by epoch).
@pytest.fixture(scope="module")
def scheduled(spec: RunSpec) -> RunSpec:
    return spec.with_changes(quantization={"scheme": "int8", "block_size": 64,
                                           "schedule": [{"from_epoch": 1, "scheme": "topk2", "block_size": 1024}]})


@pytest.fixture(scope="module")
def switched(scheduled: RunSpec, dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> tuple[Served, Served]:
    """An honest host across the switch: epoch 0 int8, epoch 1 topk2 (accepted in epoch 0)."""
    root = tmp_path_factory.mktemp("switch")
    first = _epoch(scheduled, dataset, root, 0, GlobalState.initial(scheduled), carry=False)
    shapes = parameter_shapes(scheduled)
    theta1 = outer_step(first.theta, dequantize(first.result.payload, shapes, scheduled.quantization.at(0)),
                        scheduled.outer)
    return first, _epoch(scheduled, dataset, root, 1, theta1, carry=True)


def test_an_honest_host_passes_across_a_scheme_switch(switched, scheduled, dataset) -> None:
    first, second = switched
    assert {n.split("/")[0] for n in first.result.payload} == {"q", "scale"}  # int8 in epoch 0
    assert NEXT in second.result.payload  # topk2 in epoch 1
    assert _check(first, dataset, None).outcome == "pass"
    # int8 leaves no residual: epoch 1 starts from zeros although its host was accepted in epoch 0.
    carried = leaves_of(replace(second, spec=scheduled.for_epoch(1)))[-1].residual
    assert carried is not None and all(bool((t == 0).all()) for t in carried.values())
    report = _check(second, dataset, first.result.commitment.delta_hash)
    assert report.outcome == "pass", report.reason
    assert report.measurements["residual_hash"] == residual_digest(zero_residual(parameter_shapes(scheduled))).hex()
    assert report.measurements["bitwise"] is True


def test_a_host_on_the_wrong_epochs_scheme_fails(switched, scheduled, dataset, tmp_path) -> None:
    first, second = switched
    # Epoch 1 trained and sent as epoch 0's int8, under the scheduled run's id.
    stale = scheduled.with_changes(quantization={"scheme": "int8", "block_size": 64, "schedule": []})
    ctx = second.ctx
    result = run_epoch(stale, dataset, ctx, second.theta.params, tmp_path)
    assert result is not None
    served = Served(scheduled, ctx, second.theta, result, LocalArtifacts(tmp_path, ctx.run_id, HOST), Honest())
    report = _check(served, dataset, first.result.commitment.delta_hash)
    # Its leaf S lacks the residual a topk2 epoch's leaf holds: not the artifact the run defines.
    assert (report.outcome, report.check) == ("unavailable", "leaf"), report.reason
    assert "ef/" in report.reason


def test_a_topk2_block_size_change_carries_the_residual_and_passes(spec, dataset, tmp_path) -> None:
    # topk2/1024 in epoch 0, topk2/2048 from epoch 1: the residual goes on (it is dense per parameter)
    # although the two epochs' Δs have different layouts; epoch 0's Δ is read in its own scheme.
    regrouped = spec.with_changes(quantization={"scheme": "topk2", "block_size": 1024,
                                                "schedule": [{"from_epoch": 1, "scheme": "topk2", "block_size": 2048}]})
    first = _epoch(regrouped, dataset, tmp_path, 0, GlobalState.initial(regrouped), carry=False)
    theta1 = outer_step(first.theta, dequantize(first.result.payload, parameter_shapes(regrouped),
                                                regrouped.quantization.at(0)), regrouped.outer)
    second = _epoch(regrouped, dataset, tmp_path, 1, theta1, carry=True)
    carried = leaves_of(replace(second, spec=regrouped.for_epoch(1)))[-1].residual
    assert carried is not None and any(bool(t.any()) for t in carried.values())
    assert residual_digest(carried) == bytes(first.result.payload[NEXT].tolist())
    report = _check(second, dataset, first.result.commitment.delta_hash)
    assert report.outcome == "pass", report.reason


# quantization.error_decay (β): epoch e compresses Δ + β·r from the undecayed r leaf S carries.
@pytest.fixture(scope="module")
def decayed(spec: RunSpec, dataset: Dataset, tmp_path_factory: pytest.TempPathFactory) -> tuple[Served, Served]:
    """An honest topk2 host with β = 0.9: epoch 0, then epoch 1 carrying epoch 0's residual."""
    beta = spec.with_changes(quantization={"scheme": "topk2", "block_size": 1024, "error_decay": "0.9"})
    root = tmp_path_factory.mktemp("decayed")
    first = _epoch(beta, dataset, root, 0, GlobalState.initial(beta), carry=False)
    theta1 = outer_step(first.theta, dequantize(first.result.payload, parameter_shapes(beta), beta.quantization),
                        beta.outer)
    return first, _epoch(beta, dataset, root, 1, theta1, carry=True)


def test_an_honest_host_with_a_decayed_residual_passes(decayed, dataset) -> None:
    first, second = decayed
    carried = leaves_of(second)[-1].residual
    assert carried is not None and residual_digest(carried) == bytes(first.result.payload[NEXT].tolist())
    report = _check(second, dataset, first.result.commitment.delta_hash)
    assert report.outcome == "pass", report.reason
    assert report.measurements["bitwise"] is True
    # the same leaves compressed without the decay are another Δ: β is part of what is checked
    end = leaves_of(second)[-1]
    plain, _ = compress(pseudo_gradient(second.theta.params, end.state.params), carried, 1024)
    assert report.measurements["recomputed_delta_hash"] == second.result.commitment.delta_hash != \
        delta_hash(plain).hex()


@pytest.mark.parametrize("cheat", ["no decay", "beta 0.8", "decayed leaf"])
def test_a_host_that_skips_or_changes_the_decay_fails(decayed, dataset, tmp_path, cheat) -> None:
    first, second = decayed
    leaves = leaves_of(second)
    end = leaves[-1]
    assert end.residual is not None
    delta = pseudo_gradient(second.theta.params, end.state.params)
    if cheat == "no decay":  # Δ + r: the residual at full weight
        payload, _ = compress(delta, end.residual, 1024)
    elif cheat == "beta 0.8":
        payload, _ = compress(delta, end.residual, 1024, Decimal("0.8"))
    else:  # leaf S holds β·r itself, and Δ + β·r sent: the honest bytes from a residual nobody committed
        leaves[-1] = replace(end, residual=decay_residual(end.residual, Decimal("0.9")))
        payload, _ = compress(delta, leaves[-1].residual, 1024)
    run_id = second.spec.run_id()
    shutil.copytree(EpochStore(first.source.root, run_id, HOST).directory(0),  # type: ignore[attr-defined]
                    EpochStore(tmp_path, run_id, HOST).directory(0))  # the cheater's own epoch 0
    forged = commit_leaves(second, leaves, tmp_path, payload)
    report = _check(replace(forged, theta=second.theta), dataset, first.result.commitment.delta_hash)
    expected = "residual" if cheat == "decayed leaf" else "delta"
    assert (report.outcome, report.check) == ("fail", expected), report.reason
