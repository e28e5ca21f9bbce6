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
from verifier.measure import (
    NS_SPECTRAL_BOUND,
    leaf_moment_check,
    moment_errors,
    muon_spectral_excess,
    muon_update_limit,
    update_excess,
)
from verifier.replay import check_challenge

MATRIX = "blocks.0.mlp.fc.weight"  # a hidden matrix: Muon steps it
NS_EXACT = 1.2035  # the largest singular value of Newton–Schulz's output, measured in bfloat16


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


def test_a_dense_muon_update_within_every_coordinate_but_beyond_the_spectral_bound_is_caught(muon_spec,
                                                                                             muon_honest) -> None:
    leaves = leaves_of(muon_honest)
    c, train = muon_spec.train.segment_steps, muon_spec.train
    limit = muon_update_limit(train, leaves[0].state.params[MATRIX].shape, c)
    for g in range(muon_spec.train.segments):  # honest segments sit well inside the spectral bound
        start, end = leaves[g].state.params[MATRIX], leaves[g + 1].state.params[MATRIX]
        assert 0.3 < muon_spectral_excess(end - start * (1 - float(train.lr) * float(train.weight_decay)) ** c,
                                          limit) <= NS_EXACT / NS_SPECTRAL_BOUND
    # Every coordinate moved by half the bound, in a rank-one sign pattern: each entry is within the
    # per-coordinate bound, but no sum of c Newton–Schulz steps has that spectral norm.
    start = leaves[0].state.params
    end = {n: t.clone() for n, t in leaves[1].state.params.items()}
    rows, cols = end[MATRIX].shape
    signs = torch.outer(torch.randn(rows).sign(), torch.randn(cols).sign())
    end[MATRIX] = start[MATRIX] * (1 - float(train.lr) * float(train.weight_decay)) ** c + 0.5 * limit * signs
    excess, where = update_excess(start, end, train, 0, c)
    assert where == MATRIX and excess > 0.5 * (rows * cols) ** 0.5 * 0.99  # ‖signs‖₂ = √(rows·cols)
    assert update_excess(start, end, small_spec().train, 0, c)[0] < excess / 10  # AdamW: per coordinate only


@pytest.mark.parametrize("kind", ["ascent", pytest.param("along", marks=pytest.mark.slow)])
def test_a_muon_momentum_forgery_within_the_tolerance_passes_and_twice_it_is_caught(muon_spec, dataset, muon_honest,
                                                                                   tmp_path, kind) -> None:
    from trainer.delta import dequantize
    from trainer.model import parameter_shapes
    from verifier.adversaries import MuonMomentum
    from verifier.adversaries.forgery import delta_ratio

    forger = MuonMomentum(kind, 0.9)
    served = serve_epoch(muon_spec, dataset, forger, tmp_path / "forged")
    reports = [check_challenge(muon_spec, dataset, served.challenge(g), served.source, served.theta,
                               served.ctx.prev_epoch_seed) for g in range(muon_spec.train.segments)]
    assert all(r.outcome == "pass" for r in reports), [r.reason for r in reports]
    assert all(a > 0 for a in forger.alphas[0]) and len(forger.alphas[0]) == muon_spec.train.segments - 1
    leaves = leaves_of(served)
    assert not torch.equal(leaves[1].state.exp_avg[MATRIX], leaves_of(muon_honest)[1].state.exp_avg[MATRIX])
    shapes = parameter_shapes(muon_spec)
    moved = delta_ratio(*(dequantize(s.result.payload, shapes, muon_spec.quantization) for s in (muon_honest, served)))
    assert moved["deviation"] < 0.05  # a few τ per leaf, and int8 quantization
    # The forged momentum of leaf 1 pushed twice as far from what the replay of segment 0 gives.
    replayed = replay_segment(muon_spec, dataset, served.ctx, leaves[0]).state
    doubled = _copy(leaves[1].state)
    for n in doubled.exp_avg:
        doubled.exp_avg[n] = replayed.exp_avg[n] + 2.2 * (leaves[1].state.exp_avg[n] - replayed.exp_avg[n])
    forged = [leaves[0], dataclasses.replace(leaves[1], state=doubled), *leaves[2:]]
    again = commit_leaves(served, forged, tmp_path / "doubled")
    report = check_challenge(muon_spec, dataset, again.challenge(0), again.source, again.theta,
                             again.ctx.prev_epoch_seed)
    assert report.outcome == "fail" and report.check in ("distance", "moments"), report.reason


def test_a_muon_jump_to_the_edge_fails_only_its_segment_and_stays_within_the_spectral_bound(
        muon_spec, dataset, muon_honest, tmp_path) -> None:
    from verifier.adversaries import Jump

    jump = Jump(1, 0.0, "random")  # as far as the bounds of the first S − 1 segments allow
    served = serve_epoch(muon_spec, dataset, jump, tmp_path)
    segments = muon_spec.train.segments
    for g in range(segments):
        report = check_challenge(muon_spec, dataset, served.challenge(g), served.source, served.theta,
                                 served.ctx.prev_epoch_seed)
        if g in jump.faked[0]:
            assert report.outcome == "fail", report.reason
        else:  # the last segment checks θ_S − θ_e against both Muon bounds
            assert report.outcome == "pass", (g, report.reason)
    leaves, honest = leaves_of(served), leaves_of(muon_honest)
    train, steps = muon_spec.train, (segments - 1) * muon_spec.train.segment_steps
    moved = leaves[-2].state.params[MATRIX] - honest[-2].state.params[MATRIX]
    # Beyond the honest change of those segments, yet one that a sum of Newton–Schulz steps could make.
    assert float(moved.norm()) > 1.3 * float((honest[-2].state.params[MATRIX] - honest[0].state.params[MATRIX]).norm())
    decayed = honest[0].state.params[MATRIX] * (1 - float(train.lr) * float(train.weight_decay)) ** steps
    limit = muon_update_limit(train, moved.shape, steps)
    assert 0.9 < muon_spectral_excess(leaves[-2].state.params[MATRIX] - decayed, limit) <= 1


def test_a_muon_momentum_forger_needs_a_muon_run(dataset, tmp_path) -> None:
    from verifier.adversaries import MuonMomentum, make_adversary

    assert make_adversary("muon_momentum:random,0.5").kind == "random"
    with pytest.raises(ValueError, match="kind is one of"):
        MuonMomentum("sideways")
    with pytest.raises(ValueError, match="needs a run whose inner optimizer is muon"):
        serve_epoch(small_spec(), dataset, MuonMomentum("ascent", 0.9), tmp_path)
