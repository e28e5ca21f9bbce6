"""Muon as the inner optimizer (MuLoCo): selectable in the spec, bitwise at any thread count, an
honest Muon host passes every replay, and a forged Muon momentum or update is caught by the checks."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from suite_env import small_spec
from verifier_env import commit_leaves, leaves_of, serve_epoch

from protocol.rules.encoding import EncodingError
from protocol.rules.spec import RunSpec
from trainer.inner import replay_segment, start_checkpoint
from trainer.outer import GlobalState
from trainer.step import Stepper, TrainState, uses_muon
from verifier.measure import leaf_moment_check, moment_errors, muon_update_limit, update_excess
from verifier.replay import check_challenge

MATRIX = "blocks.0.mlp.fc.weight"  # a hidden matrix: Muon steps it


@pytest.fixture(scope="module")
def muon_spec() -> RunSpec:
    return small_spec(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8, "inner_optimizer": "muon"})


@pytest.fixture(scope="module")
def muon_honest(muon_spec, dataset, tmp_path_factory):
    from verifier.adversaries import Honest

    old = torch.get_num_threads()
    torch.set_num_threads(1)  # the host trains on one thread; the validators replay on two
    try:
        return serve_epoch(muon_spec, dataset, Honest(), tmp_path_factory.mktemp("muon-honest"))
    finally:
        torch.set_num_threads(old)


def _copy(state: TrainState) -> TrainState:
    return TrainState(*({n: t.clone() for n, t in g.items()} for g in (state.params, state.exp_avg, state.exp_avg_sq)),
                      state.step, state.rng_key)


def test_the_spec_selects_muon_and_keeps_adamw_run_ids() -> None:
    adamw = small_spec()
    assert b"inner_optimizer" not in adamw.canonical()  # omitted at its default: run ids unchanged
    muon = small_spec(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8, "inner_optimizer": "muon"})
    assert b'"inner_optimizer":"muon"' in muon.canonical() and muon.run_id() != adamw.run_id()
    assert RunSpec.from_canonical(muon.canonical()) == muon
    spelled = adamw.canonical().replace(b'"inner_steps"', b'"inner_optimizer":"adamw","inner_steps"')
    with pytest.raises(EncodingError, match="not in canonical form"):
        RunSpec.from_canonical(spelled)  # one spec, one run id
    data = adamw.model_dump(mode="json")
    data["train"]["inner_optimizer"] = "sgd"
    with pytest.raises(ValueError, match="inner_optimizer\n  Input should be 'adamw' or 'muon'"):
        RunSpec.model_validate(data)


def test_muon_steps_the_hidden_matrices_and_adamw_the_rest(muon_spec) -> None:
    stepper = Stepper(muon_spec)
    assert MATRIX in stepper.muon_names
    assert {"tok.weight", "pos.weight", "head.weight"}.isdisjoint(stepper.muon_names)
    assert all(p.dim() == 2 and n.startswith("blocks.") for n, p in stepper.named.items() if n in stepper.muon_names)
    assert not any(uses_muon(n, p, small_spec().train) for n, p in stepper.named.items())  # AdamW runs: none


def test_a_muon_segment_is_bitwise_at_one_and_two_threads_and_differs_from_adamw(muon_spec, dataset, threads) -> None:
    from protocol.rules.beacon import genesis_seed
    from trainer.inner import EpochContext

    ctx = EpochContext(muon_spec.run_id(), 0, "host", genesis_seed(muon_spec.run_id()))
    start = start_checkpoint(muon_spec, GlobalState.initial(muon_spec).params, 0)
    threads(1)
    one = replay_segment(muon_spec, dataset, ctx, start)
    threads(2)
    two = replay_segment(muon_spec, dataset, ctx, start)
    assert one.leaf_hash() == two.leaf_hash()
    assert bool(one.state.exp_avg[MATRIX].abs().sum() > 0) and bool((one.state.exp_avg_sq[MATRIX] == 0).all())
    adamw = replay_segment(small_spec(), dataset, ctx, start)
    assert not torch.equal(adamw.state.params[MATRIX], one.state.params[MATRIX])


def test_an_honest_muon_host_passes_every_replay_bitwise(muon_spec, dataset, muon_honest, threads) -> None:
    threads(2)
    for g in range(muon_spec.train.segments):
        report = check_challenge(muon_spec, dataset, muon_honest.challenge(g), muon_honest.source,
                                 muon_honest.theta, muon_honest.ctx.prev_epoch_seed)
        assert report.outcome == "pass", report.reason
        assert report.measurements["bitwise"] is True and report.measurements["distance"] == 0.0
    leaves = leaves_of(muon_honest)
    c = muon_spec.train.segment_steps
    for g in range(muon_spec.train.segments):  # honest Muon steps stay within the per-coordinate bound
        excess, _ = update_excess(leaves[g].state.params, leaves[g + 1].state.params, muon_spec.train, g * c, c)
        assert 0 < excess <= 1


def test_a_forged_muon_momentum_is_caught(muon_spec, dataset, muon_honest, tmp_path) -> None:
    leaves = leaves_of(muon_honest)
    leaf = leaves[2]
    # Beyond what clipped gradients accumulate: ‖m‖ ≤ (1 − β₁ᵗ)·g_max over all tensors.
    scaled = _copy(leaf.state)
    scaled.exp_avg[MATRIX] *= 50
    assert "exceeds (1 − β₁ᵗ)·g_max" in str(leaf_moment_check(scaled, muon_spec.train)[1])
    # A second moment where Muon keeps none.
    with_v = _copy(leaf.state)
    with_v.exp_avg_sq[MATRIX].view(-1)[0] = 1e-6
    assert "Muon steps it" in str(leaf_moment_check(with_v, muon_spec.train)[1])
    # Within the norm bound (its direction turned, its norm kept), the leaf check passes: the replay of
    # the segment that ends at the leaf catches it, coordinate by coordinate.
    turned = _copy(leaf.state)
    turned.exp_avg[MATRIX] = turned.exp_avg[MATRIX].flip(0).contiguous()
    assert leaf_moment_check(turned, muon_spec.train)[1] is None
    assert float(moment_errors(leaf.state, turned, 1e-6, muon_spec.train)["exp_avg"]) > 1
    forged = [*leaves[:2], dataclasses.replace(leaf, state=turned), *leaves[3:]]
    served = commit_leaves(muon_honest, forged, tmp_path)
    report = check_challenge(muon_spec, dataset, served.challenge(1), served.source, served.theta,
                             served.ctx.prev_epoch_seed)
    assert report.outcome == "fail" and report.check == "distance", report.reason
    assert f"exp_avg/{MATRIX}" in report.reason


def test_a_muon_update_beyond_newton_schulz_is_caught(muon_spec, muon_honest) -> None:
    leaves = leaves_of(muon_honest)
    c = muon_spec.train.segment_steps
    end = {n: t.clone() for n, t in leaves[1].state.params.items()}
    end[MATRIX].view(-1)[0] += 2 * muon_update_limit(muon_spec.train, end[MATRIX].shape, c)
    excess, where = update_excess(leaves[0].state.params, end, muon_spec.train, 0, c)
    assert excess > 1 and where == MATRIX
