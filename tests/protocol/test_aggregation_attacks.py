"""Attacks on the aggregation that slip past sampling, checked with real replays.

* ALIE and IPM steered through ONE faked segment (``bench/aggregation_attacks.py``): the faked
  segment fails its replay, every other segment passes (the last one too: the Δ is θ_e − θ_S of
  the committed leaf), so the host is caught exactly when the faked segment is challenged —
  probability k/(S − 1) per epoch — and the committed Δ points where the attack wants.
* A forged Δ next to honest leaves (sign flip, scaled) fails the always-challenged last segment.
* The benchmark's verification model (:func:`caught`) agrees with these verdicts for every
  challenge draw, which is what lets ``bench/aggregation.py`` decide exclusion without replaying.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from suite_env import VALIDATOR

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root, for bench/

from bench.aggregation_attacks import Steered, caught, relative_gap, served_delta, steer_epoch, target_delta
from protocol.keys import encode_address
from protocol.rules.beacon import genesis_seed
from protocol.rules.sampling import challenged_segments
from protocol.views import Challenge
from trainer.artifacts import LocalArtifacts
from trainer.behaviour import HostBehaviour
from trainer.inner import EpochContext
from trainer.outer import GlobalState
from verifier.adversaries import ScaledDelta, SignFlipDelta
from verifier.replay import check_challenge

# The tests run on the suite's small spec (tests/conftest.py): 16 steps in S = 4 segments of 4,
# batch 8; k = 2, so a steering host is caught w.p. 2/3. The hosts keep addresses of their own: the
# address picks a host's batches, and the steering gaps asserted below were measured on these
# hosts' data (with the suite's named hosts the IPM gap is 0.53, above the 0.5 asserted).
HONEST = [encode_address(bytes([i] * 20)) for i in (1, 2, 3)]
ATTACKER = encode_address(bytes([9] * 20))


@pytest.fixture(scope="module")
def epoch(spec):
    run_id = spec.run_id()
    return GlobalState.initial(spec), genesis_seed(run_id)


@pytest.fixture(scope="module")
def peers(spec, dataset, epoch, tmp_path_factory):
    """Three honest hosts that committed epoch 0: address -> artifact source."""
    theta, prev = epoch
    out = {}
    for host in HONEST:
        root = tmp_path_factory.mktemp("honest")
        HostBehaviour().train_epoch(spec, dataset, EpochContext(spec.run_id(), 0, host, prev), theta.params, root)
        out[host] = LocalArtifacts(root, spec.run_id(), host)
    return out


def serve(spec, dataset, epoch, behaviour, root, host=ATTACKER):
    theta, prev = epoch
    ctx = EpochContext(spec.run_id(), 0, host, prev)
    result = behaviour.train_epoch(spec, dataset, ctx, theta.params, root)
    return result, behaviour.serve(LocalArtifacts(root, spec.run_id(), host))


def verdicts(spec, dataset, epoch, result, source, host=ATTACKER):
    theta, prev = epoch
    c = result.commitment
    out = {}
    for g in range(spec.train.segments):
        challenge = Challenge.of(c, host, g, "local", [VALIDATOR])
        out[g] = check_challenge(spec, dataset, challenge, source, theta, prev)
    return out


def _cosine(a, b) -> float:
    dot = sum(float((a[n].double() * b[n].double()).sum()) for n in a)
    na = math.sqrt(sum(float(a[n].double().pow(2).sum()) for n in a))
    nb = math.sqrt(sum(float(b[n].double().pow(2).sum()) for n in b))
    return dot / (na * nb)


@pytest.mark.parametrize("attack,param", [("alie", 1.0), ("ipm", 0.5)])
def test_steered_attack_fails_only_on_its_faked_segment(spec, dataset, epoch, peers, tmp_path, attack, param) -> None:
    steered = Steered(attack, param, peers=peers)
    result, source = serve(spec, dataset, epoch, steered, tmp_path)
    faked = steered.faked[0]
    assert faked == [spec.train.segments - 2]
    reports = verdicts(spec, dataset, epoch, result, source)
    for g, report in reports.items():
        if g in faked:
            # Steering a Δ in one segment moves coordinates further than c AdamW steps can: the
            # update bound catches it before the replay (the replay would too).
            assert report.outcome == "fail" and report.check in ("bound", "distance"), report.reason
        elif g == spec.train.segments - 1 and report.check == "bound":
            # θ_e − θ_S beyond what H AdamW steps can reach: the epoch's Δ bound, checked on the
            # always-challenged last segment, can catch the steered Δ itself (ALIE here).
            assert "AdamW steps can" in report.reason
        else:
            assert report.outcome == "pass", f"segment {g}: {report.reason}"
    # The last segment passed its Δ check, so the Δ that enters aggregation is the committed one,
    # and it is close to the target the attack aimed at.
    committed = served_delta(spec, source, 0)
    target = steered.targets[0]
    assert relative_gap(committed, target) < 0.5
    assert _cosine(committed, target) > 0.85
    honest_mean = target_delta("ipm", {h: served_delta(spec, s, 0) for h, s in peers.items()}, -1.0)
    if attack == "ipm":
        assert _cosine(committed, honest_mean) < -0.5  # it pulls against the honest direction


def test_detection_probability_is_k_over_s_minus_1_and_matches_the_verdicts(spec, dataset, epoch, peers,
                                                                            tmp_path) -> None:
    steered = Steered("ipm", 0.5, peers=peers)
    result, source = serve(spec, dataset, epoch, steered, tmp_path)
    failing = {g for g, r in verdicts(spec, dataset, epoch, result, source).items() if r.outcome != "pass"}
    k, S = spec.verification.challenges_k, spec.train.segments
    assert steered.expected_detection(spec, k) == pytest.approx(k / (S - 1))
    hits, trials = 0, 3000
    for i in range(trials):
        seed = i.to_bytes(32, "big")
        real = bool(failing & set(challenged_segments(seed, ATTACKER, S, k)))  # what validators would find
        modelled = caught(seed, ATTACKER, spec, steered.faked[0])  # what the benchmark assumes
        assert real == modelled
        hits += real
    p = k / (S - 1)
    assert abs(hits / trials - p) < 4 * math.sqrt(p * (1 - p) / trials)
    assert not caught(bytes(32), ATTACKER, spec.with_changes(verification={"enabled": False}), [0, 1, 2])


@pytest.mark.parametrize("behaviour", [SignFlipDelta(), ScaledDelta(10.0)], ids=["sign_flip", "scaled"])
def test_forged_delta_fails_the_always_challenged_last_segment(spec, dataset, epoch, tmp_path, behaviour) -> None:
    result, source = serve(spec, dataset, epoch, behaviour, tmp_path)
    reports = verdicts(spec, dataset, epoch, result, source)
    last = spec.train.segments - 1
    assert reports[last].outcome == "fail" and reports[last].check == "delta", reports[last].reason
    assert all(r.outcome == "pass" for g, r in reports.items() if g != last)
    for i in range(50):  # the last segment is in every challenge draw: caught every epoch
        assert caught(i.to_bytes(32, "big"), ATTACKER, spec, [last])


def test_steering_reaches_its_target_from_a_trained_model(spec, dataset, peers) -> None:
    # From θ_0 the tail segment moves a lot; what the steering reaches is reported by the bench.
    # Here: the same function, any target, the returned gap is the committed leaves' gap.
    honest = {h: served_delta(spec, s, 0) for h, s in peers.items()}
    target = target_delta("alie", honest, 1.0)
    theta = GlobalState.initial(spec)
    ctx = EpochContext(spec.run_id(), 0, ATTACKER, genesis_seed(spec.run_id()))
    leaves, gap = steer_epoch(spec, dataset, ctx, theta.params, target, iters=2)
    assert len(leaves) == spec.train.segments + 1
    delta = {n: theta.params[n] - leaves[-1].state.params[n] for n in target}
    assert relative_gap(delta, target) == pytest.approx(gap)
    with pytest.raises(ValueError, match="always checked"):
        steer_epoch(spec, dataset, ctx, theta.params, target, segment=spec.train.segments - 1)


def test_targets_by_hand_and_independent_of_order() -> None:
    a = {"w": torch.tensor([1.0, 2.0])}
    b = {"w": torch.tensor([3.0, 2.0])}
    assert target_delta("ipm", {"x": a, "y": b}, 0.5)["w"].tolist() == [-1.0, -1.0]
    assert target_delta("alie", {"x": a, "y": b}, 1.0)["w"].tolist() == [1.0, 2.0]  # mean 2,2; std 1,0
    assert torch.equal(target_delta("alie", {"y": b, "x": a}, 2.0)["w"],
                       target_delta("alie", {"x": a, "y": b}, 2.0)["w"])
    with pytest.raises(ValueError):
        target_delta("nope", {"x": a}, 1.0)
    with pytest.raises(ValueError, match="peers"):
        Steered("alie", 1.0, peers={})
