"""Forgeries within the tolerance pass every replay, and what they can do is bounded by the
thresholds; low precision on one step per segment and a false train loss are caught."""

from __future__ import annotations

import pytest
from verifier_env import serve_epoch

from trainer.delta import dequantize
from trainer.model import parameter_shapes
from verifier.adversaries import FakeTrainLoss, LowPrecision, Moments, Poison, make_adversary
from verifier.adversaries.forgery import delta_ratio, largest
from verifier.replay import check_challenge


def verdicts(spec, dataset, served):
    return [check_challenge(spec, dataset, served.challenge(g), served.source, served.theta,
                            served.ctx.prev_epoch_seed) for g in range(spec.train.segments)]


def _deltas(spec, honest, served):
    shapes = parameter_shapes(spec)
    return (dequantize(honest.result.payload, shapes, spec.quantization),
            dequantize(served.result.payload, shapes, spec.quantization))


FAST = ["poison:ascent,0.9", "moments:v_down,0.9"]
SLOW = ["poison:undo,0.99", "poison:amplify,0.99", "poison:random,0.5", "poison:target,0.9",
        "moments:v_down_top,0.99", "moments:m_along,0.99", "moments:m_against,0.9", "moments:m_untouched,0.99"]


@pytest.mark.parametrize("text", FAST + [pytest.param(t, marks=pytest.mark.slow) for t in SLOW])
def test_a_forgery_within_the_tolerance_passes_every_segment_and_moves_delta_little(spec, dataset, honest,
                                                                                    tmp_path, text) -> None:
    forger = make_adversary(text)
    served = serve_epoch(spec, dataset, forger, tmp_path)
    reports = verdicts(spec, dataset, served)
    assert all(r.outcome == "pass" for r in reports), [r.reason for r in reports if r.outcome != "pass"]
    ver = spec.verification
    assert max(r.measurements["distance"] for r in reports) <= forger.fraction * float(ver.tau) * 1.0001
    alphas = forger.alphas[0]
    assert len(alphas) == spec.train.segments - (not forger.forge_last)
    if not text.startswith("moments:m_untouched"):
        assert all(a > 0 for a in alphas)  # it did forge something on every leaf
    # What it bought: a Δ that differs from the honest one by a few τ at most (S leaves, each ≤ τ).
    ratio = delta_ratio(*_deltas(spec, honest, served))
    assert ratio["deviation"] <= 2 * spec.train.segments * float(ver.tau) + 0.01  # + int8 quantization
    assert abs(ratio["norm_ratio"] - 1) <= ratio["deviation"]


def test_the_search_finds_the_largest_admissible_size() -> None:
    assert largest(lambda a: a, lambda a: a <= 0.3, high=1.0) == pytest.approx(0.3, rel=1e-3)
    assert largest(lambda a: a, lambda a: a <= 3e-9, high=1.0) == pytest.approx(3e-9, rel=1e-3)
    assert largest(lambda a: a, lambda a: a <= 50.0, high=1.0) == pytest.approx(50.0, rel=1e-3)
    assert largest(lambda a: a, lambda a: a <= 0, high=1.0) == 0.0


def test_low_precision_on_one_step_of_every_segment_is_caught(spec, dataset, tmp_path) -> None:
    # One step per segment in bfloat16 or float16 (autocast) is the nearest cheat measured; τ sits
    # 30× below it (docs/verification.md), which this checks on the machine that runs the suite.
    tau = float(spec.verification.tau)
    for dtype in ("bfloat16", "float16"):
        served = serve_epoch(spec, dataset, LowPrecision(dtype, 1, "last"), tmp_path / dtype)
        for report in verdicts(spec, dataset, served):
            assert report.outcome == "fail" and report.check in ("distance", "moments", "loss"), (dtype, report.reason)
            assert report.measurements["distance"] >= 30 * tau, (dtype, report.reason)


def test_a_false_train_loss_is_caught_on_every_challenge(spec, dataset, honest, tmp_path) -> None:
    served = serve_epoch(spec, dataset, FakeTrainLoss(0.9), tmp_path)
    assert served.result.commitment.train_loss_micro == round(0.9 * honest.result.commitment.train_loss_micro)
    for report in verdicts(spec, dataset, served):
        assert (report.outcome, report.check) == ("fail", "train_loss"), report.reason
        assert str(honest.result.commitment.train_loss_micro) in report.reason


def test_parameters_are_checked() -> None:
    for bad in (lambda: Poison("sideways"), lambda: Poison("undo", 1.0), lambda: Moments("v_up"),
                lambda: Moments("v_down", 0.0), lambda: LowPrecision("int8"), lambda: LowPrecision(steps=0)):
        with pytest.raises(ValueError):
            bad()
