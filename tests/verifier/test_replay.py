"""An honest host's every segment passes, with a verdict the chain accepts and a report that says why."""

from __future__ import annotations

import logging
from decimal import Decimal

import pytest
from suite_env import VALIDATOR

from protocol.messages import Verdict
from trainer.outer import GlobalState
from trainer.step import Stepper
from verifier.replay import MAX_DISTANCE, check_challenge, distance_decimal, verify_challenge


def test_every_honest_segment_passes(spec, dataset, honest, caplog) -> None:
    stepper = Stepper(spec)  # reused across challenges, as a validator daemon would
    caplog.set_level(logging.INFO, logger="veriloco.verifier")
    for g in range(spec.train.segments):
        report = check_challenge(spec, dataset, honest.challenge(g), honest.source, honest.theta,
                                 honest.ctx.prev_epoch_seed, stepper=stepper)
        assert report.outcome == "pass", report.reason
        assert report.check == "ok"
        m = report.measurements
        assert m["bitwise"] is True and m["distance"] == 0.0  # same machine, same threads: exact
        assert m["loss_max_diff"] == 0.0
        assert 0.3 < m["update_ratio"] < 3
        assert m[f"leaf{g}_hash"] == honest.result.leaf_hashes[g].hex()
        assert ("delta_relative_error" in m) == (g == spec.train.segments - 1)
        v = report.verdict
        assert (v.epoch, v.host, v.segment, v.distance) == (0, honest.ctx.host, g, Decimal(0))
        assert Verdict.model_validate(v.model_dump(mode="json")) == v  # survives the wire
    assert "pass: distance 0" in caplog.text


def test_verify_challenge_is_the_reports_verdict(spec, dataset, honest) -> None:
    args = (spec, dataset, honest.challenge(1), honest.source, honest.theta, honest.ctx.prev_epoch_seed)
    assert verify_challenge(*args) == check_challenge(*args).verdict  # deterministic, evidence included


def test_the_validators_own_inputs_are_checked(spec, dataset, honest) -> None:
    seed, theta = honest.ctx.prev_epoch_seed, honest.theta
    other = spec.with_changes(train={"inner_steps": 8})  # S = 2: fewer than the 4 committed
    with pytest.raises(ValueError, match="not the run's spec"):
        check_challenge(other, dataset, honest.challenge(0), honest.source, theta, seed)
    with pytest.raises(ValueError, match="32 bytes"):
        check_challenge(spec, dataset, honest.challenge(0), honest.source, theta, seed[:8])
    bad = GlobalState({**theta.params, "extra": theta.params["head.weight"]}, theta.momentum)
    with pytest.raises(ValueError, match="θ_e"):
        check_challenge(spec, dataset, honest.challenge(0), honest.source, bad, seed)
    wrong_segment = honest.challenge(0).model_copy(update={"segment": 7})
    with pytest.raises(ValueError, match="outside"):
        check_challenge(spec, dataset, wrong_segment, honest.source, theta, seed)


def test_another_validators_theta_or_seed_fails_the_host_not_the_validator(spec, dataset, honest) -> None:
    # A validator with the wrong θ_e or seed disagrees with the majority; nothing crashes.
    shifted = GlobalState({n: t + 0.01 for n, t in honest.theta.params.items()}, honest.theta.momentum)
    report = check_challenge(spec, dataset, honest.challenge(0), honest.source, shifted, honest.ctx.prev_epoch_seed)
    assert (report.outcome, report.check) == ("fail", "start")
    report = check_challenge(spec, dataset, honest.challenge(1), honest.source, honest.theta, bytes(32))
    assert (report.outcome, report.check) == ("fail", "distance")  # other batches


@pytest.mark.parametrize("value, text", [(0.0, "0"), (1e-20, "0"), (1.8e-4, "0.00018"), (0.123456789, "0.123457"),
                                         (float("inf"), str(MAX_DISTANCE)), (float("nan"), str(MAX_DISTANCE)),
                                         (5e12, str(MAX_DISTANCE))])
def test_distances_fit_the_verdict(value, text) -> None:
    d = distance_decimal(value)
    assert d == Decimal(text)
    Verdict(epoch=0, host=VALIDATOR, segment=0, outcome="fail", distance=d, evidence="ab" * 32)


def test_a_partial_epoch_is_verified_the_same_way(spec, dataset, tmp_path) -> None:
    # A straggler commits the 2 of S = 4 segments it finished (issue 30): each of them passes, its
    # last one with the Δ and leaf 0 checks; a Δ of the whole epoch served for it fails.
    from verifier_env import serve_epoch

    from protocol.views import Challenge
    from trainer.artifacts import LocalArtifacts
    from trainer.inner import run_epoch
    from verifier.adversaries import Honest

    served = serve_epoch(spec, dataset, Honest(), tmp_path / "whole")
    theta = served.theta
    part = run_epoch(spec, dataset, served.ctx, theta.params, tmp_path / "part", stop=lambda done: done == 2)
    assert part is not None and part.commitment.segments == 2
    assert part.leaf_hashes == served.result.leaf_hashes[:3]  # the same leaves, fewer of them
    source = LocalArtifacts(tmp_path / "part", spec.run_id(), served.ctx.host)
    for g in (0, 1):
        challenge = Challenge.of(part.commitment, served.ctx.host, g, "local", [VALIDATOR])
        report = check_challenge(spec, dataset, challenge, source, theta, served.ctx.prev_epoch_seed)
        assert report.outcome == "pass", report.reason
        assert ("delta_relative_error" in report.measurements) == (g == 1)
        assert report.measurements.get("leaf0_checked", g == 0) is True  # its chain starts at θ_e
    outside = Challenge.of(part.commitment, served.ctx.host, 2, "local", [VALIDATOR])
    with pytest.raises(ValueError, match="outside"):
        check_challenge(spec, dataset, outside, source, theta, served.ctx.prev_epoch_seed)
    # The whole epoch's Δ under the partial commitment: not θ_e − θ_2.
    swapped = part.commitment.model_copy(update={"delta_hash": served.result.commitment.delta_hash})
    whole_delta = LocalArtifacts(tmp_path / "whole", spec.run_id(), served.ctx.host)

    class PartialLeavesWholeDelta(LocalArtifacts):
        def delta_chunks(self, epoch):
            return whole_delta.delta_chunks(epoch)

    report = check_challenge(spec, dataset, Challenge.of(swapped, served.ctx.host, 1, "local", [VALIDATOR]),
                             PartialLeavesWholeDelta(tmp_path / "part", spec.run_id(), served.ctx.host), theta,
                             served.ctx.prev_epoch_seed)
    assert report.outcome == "fail" and report.check == "delta", report.reason
