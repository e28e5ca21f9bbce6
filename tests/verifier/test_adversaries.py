"""Every adversary in the catalogue is caught on exactly the segments it faked, and the detection
formula it states is the probability that the chain's challenge sampling lands on one of them."""

from __future__ import annotations

import math
import random

import pytest
from suite_env import VICTIM, named_address
from verifier_env import serve_epoch

from protocol.messages import Verdict
from protocol.rules.losses import loss_digest, loss_micro
from protocol.rules.merkle import verify_proof
from protocol.rules.sampling import challenged_segments
from protocol.views import Vote
from trainer.checkpoint import decode_checkpoint
from trainer.delta import decode_delta, delta_hash, dequantize
from trainer.inner import EpochContext
from trainer.model import parameter_shapes
from trainer.outer import outer_step
from verifier.adversaries import (
    ADVERSARIES,
    VALIDATORS,
    Adversary,
    Blindfold,
    Copycat,
    CopycatValidator,
    Honest,
    Lazy,
    StaleDelta,
    make_adversary,
    make_validator_behaviour,
)
from verifier.replay import check_challenge

# name -> (constructor text, the check that must catch it on a faked segment)
CATALOGUE = {
    "lazy": ("lazy:1", {"distance"}),
    "lazy steps": ("lazy:0.25,step", {"distance"}),
    "lazy extrapolating": ("lazy:1,segment,extrapolate", {"distance"}),
    "noise": ("noise", {"delta"}),
    "scaled": ("scaled:1.5", {"delta"}),
    "sign_flip": ("sign_flip", {"delta"}),
    "copycat": ("copycat", {"distance"}),
    "copycat delta": ("copycat:delta", {"delta"}),
    "wrong_data": ("wrong_data:1", {"distance"}),
    "wrong_lr": ("wrong_lr:1.5", {"distance", "bound"}),  # 1.5 × lr moves coordinates further than lr can
    "fake_losses": ("fake_losses:0.99", {"loss"}),
    "crafted": ("crafted:1", {"distance"}),
    "blindfold": ("blindfold:0.67", {"distance"}),
    "interpolate": ("interpolate:1", {"distance", "bound"}),  # random direction: some coordinates too far
    "interpolate tiny steps": ("interpolate:0.01", {"distance"}),
    "infinitesimal": ("infinitesimal", {"leaf"}),
    "alie": ("alie:1", {"delta"}),
    "ipm": ("ipm:0.5", {"delta"}),
}


@pytest.fixture(scope="module")
def victim(spec, dataset, tmp_path_factory):
    return serve_epoch(spec, dataset, Honest(), tmp_path_factory.mktemp("victim"), host=VICTIM)


def assert_serves_what_it_committed(spec, served) -> None:
    """A cheater's files are a consistent epoch: every lie is in what was computed, none between the
    commitment and what is served (so only a replay can tell)."""
    c, source, e, n = served.result.commitment, served.source, served.ctx.epoch, spec.train.segments + 1
    served_delta = delta_hash(decode_delta(source.delta(e), spec)).hex()
    assert served_delta == c.delta_hash == delta_hash(served.result.payload).hex()
    assert loss_digest(source.losses(e)) == c.loss_digest
    assert source.losses(e) == [loss_micro(x) for x in served.result.losses]
    root = bytes.fromhex(c.checkpoint_root)
    for leaf in range(n):
        digest = decode_checkpoint(source.checkpoint(e, leaf), spec, leaf).leaf_hash()
        assert digest == served.result.leaf_hashes[leaf] and verify_proof(digest, source.proof(e, leaf), root, n)


def verdicts(spec, dataset, served):
    return {g: check_challenge(spec, dataset, served.challenge(g), served.source, served.theta,
                               served.ctx.prev_epoch_seed) for g in range(spec.train.segments)}


@pytest.mark.parametrize("case", sorted(CATALOGUE))
def test_caught_exactly_on_the_segments_it_faked(spec, dataset, victim, tmp_path, case) -> None:
    text, checks = CATALOGUE[case]
    adversary = make_adversary(text, victim=victim.source, peers=[victim.source], seed=3)
    served = serve_epoch(spec, dataset, adversary, tmp_path)
    assert_serves_what_it_committed(spec, served)
    faked = adversary.faked[0]
    assert faked, f"{case} faked nothing this epoch (pick another seed)"
    for g, report in verdicts(spec, dataset, served).items():
        Verdict.model_validate(report.verdict.model_dump(mode="json"))
        if g in faked:
            assert report.outcome == "fail", f"{case}: faked segment {g} passed: {report.reason}"
            assert report.check in checks, report.reason
            assert report.verdict.distance > 0 or report.check == "loss"  # faked losses, exact weights
        else:
            assert report.outcome == "pass", f"{case}: honest segment {g} failed: {report.reason}"


def test_lazy_fraction_fakes_only_some_segments(spec, dataset, tmp_path) -> None:
    adversary = Lazy(0.5, seed=1)
    served = serve_epoch(spec, dataset, adversary, tmp_path)
    faked = adversary.faked[0]
    assert 0 < len(faked) < spec.train.segments
    outcomes = {g: r.outcome for g, r in verdicts(spec, dataset, served).items()}
    assert outcomes == {g: "fail" if g in faked else "pass" for g in range(spec.train.segments)}


def test_stale_reuses_the_previous_epoch_and_fails(spec, dataset, tmp_path) -> None:
    for mode, checks in (("all", {"start", "distance", "delta"}), ("delta", {"delta"})):
        root = tmp_path / mode
        adversary = StaleDelta(mode)
        first = serve_epoch(spec, dataset, adversary, root)  # epoch 0: nothing stale yet, honest
        assert adversary.faked[0] == [] and all(r.outcome == "pass" for r in verdicts(spec, dataset, first).values())
        delta = dequantize(first.result.payload, parameter_shapes(spec), spec.quantization)
        theta1 = outer_step(first.theta, delta, spec.outer)
        second = serve_epoch(spec, dataset, adversary, root, epoch=1, theta=theta1, prev_seed=bytes(range(32)))
        assert_serves_what_it_committed(spec, second)
        faked = adversary.faked[1]
        for g, report in verdicts(spec, dataset, second).items():
            assert report.outcome == ("fail" if g in faked else "pass"), (mode, g, report.reason)
            if g in faked:
                assert report.check in checks, report.reason


def test_an_honest_second_epoch_passes(spec, dataset, tmp_path) -> None:
    first = serve_epoch(spec, dataset, Honest(), tmp_path)
    theta1 = outer_step(first.theta, dequantize(first.result.payload, parameter_shapes(spec), spec.quantization),
                        spec.outer)
    second = serve_epoch(spec, dataset, Honest(), tmp_path, epoch=1, theta=theta1, prev_seed=bytes(range(32)))
    assert all(r.outcome == "pass" for r in verdicts(spec, dataset, second).values())


def _simulated_detection(adversary: Adversary, spec, k: int, epochs: int) -> float:
    """Fake patterns from the adversary's own choices, challenges from the chain's sampling rule."""
    caught = 0
    rng = random.Random(7)
    for e in range(epochs):
        ctx = EpochContext(spec.run_id(), e, named_address("host5"), bytes(32))
        fakes = set(adversary.fakes(spec, ctx, adversary.rng(ctx, "segments")))
        seed = rng.randbytes(32)
        caught += bool(fakes & set(challenged_segments(seed, ctx.host, spec.train.segments, k)))
    return caught / epochs


@pytest.mark.parametrize("adversary", [Lazy(0.1), Lazy(0.3), Lazy(0.05, unit="step"), Blindfold(0.34),
                                       Blindfold(0.67)], ids=repr)
@pytest.mark.parametrize("k", [1, 2])
def test_detection_formula_matches_the_sampling(spec, adversary, k) -> None:
    epochs = 4000
    measured = _simulated_detection(adversary, spec, k, epochs)
    p = adversary.expected_detection(spec, k)
    sigma = math.sqrt(p * (1 - p) / epochs)
    assert abs(measured - p) <= 4 * sigma + 1e-9, (measured, p)


def test_formula_values(spec) -> None:
    # S = 4: k = 2 challenges among the first 3 segments plus the last, 3 of 4 replayed.
    assert Lazy(0.5).expected_detection(spec, 2) == pytest.approx(1 - 0.5 ** 3)
    assert Lazy(0.1, unit="step").expected_detection(spec, 2) == pytest.approx(1 - 0.9 ** 12)
    assert Blindfold(0.34).expected_detection(spec, 2) == pytest.approx(2 / 3)  # 1 of 3 faked, 2 of 3 checked
    assert Honest().expected_detection(spec, 2) == 0


def test_registry_parses_names_and_parameters(victim) -> None:
    assert set(ADVERSARIES) >= {"honest", "lazy", "noise", "scaled", "sign_flip", "stale", "copycat", "wrong_data",
                                "wrong_lr", "withhold", "crafted", "blindfold", "interpolate", "alie", "ipm"}
    lazy = make_adversary("lazy:0.5")
    assert isinstance(lazy, Lazy) and (lazy.f, lazy.unit, lazy.how) == (0.5, "segment", "copy")
    lazy = make_adversary("lazy:0.2,how=extrapolate,unit=step", seed=4)
    assert (lazy.f, lazy.unit, lazy.how, lazy.seed) == (0.2, "step", "extrapolate", 4)
    assert make_adversary("wrong_lr:1.5,0.25").factor == 1.5
    assert isinstance(make_adversary("copycat", victim=victim.source), Copycat)
    assert ADVERSARIES["lazy"](f=0.3).f == 0.3
    for bad in ("nope", "lazy:2", "lazy:0.5,x,y,z", "lazy:zz=1", "lazy:abc", "copycat", "alie", "withhold:some",
                "stale:later"):
        with pytest.raises(ValueError):
            make_adversary(bad)
    for name, cls in ADVERSARIES.items():
        assert cls.name == name and "victim" not in getattr(cls, "PARAMS", ())


def test_validator_behaviours(honest) -> None:
    challenge = honest.challenge(2)
    real = Verdict(epoch=0, host=challenge.host, segment=2, outcome="pass", distance="0", evidence="cd" * 32)

    def no_replay():
        raise AssertionError("a liar does not replay")

    assert make_validator_behaviour("honest").decide(challenge, lambda: real) == real
    assert make_validator_behaviour("honest").decide(challenge, lambda: None) is None  # no answer yet
    for name, outcome in (("always_pass", "pass"), ("always_fail", "fail")):
        forced = make_validator_behaviour(name).decide(challenge, no_replay)
        assert (forced.outcome, forced.host, forced.segment, forced.epoch) == (outcome, challenge.host, 2, 0)
    assert make_validator_behaviour("silent").decide(challenge, no_replay) is None
    assert set(VALIDATORS) == {"honest", "always_pass", "always_fail", "silent", "copycat", "colluder", "sybil",
                               "withholder", "trap_reader", "dispute_copier", "unavailable", "gain_copier",
                               "gain_liar"}
    # Only the gain copier answers a gain dispute's gains itself: the most common opened one, twice.
    assert make_validator_behaviour("honest").dispute_gains(challenge, no_replay) is None
    gain_copier = make_validator_behaviour("gain_copier")
    assert gain_copier.dispute_gains(challenge, lambda: [7, 5, 5, 7, 9]) == (5, 5)  # a tie: the smaller
    assert gain_copier.dispute_gains(challenge, lambda: [3, 8, 8]) == (8, 8)
    assert gain_copier.dispute_gains(challenge, list) is None  # nothing opened: it computes
    # Only the gain liar opens another round-0 gain than it computed; it re-votes honestly.
    assert make_validator_behaviour("honest").round0_gain(challenge, 41) == 41
    gain_liar = make_validator_behaviour("gain_liar")
    assert gain_liar.round0_gain(challenge, 41) == 41 + 1_000 and gain_liar.dispute_gains(challenge, no_replay) is None
    # A copycat decides nothing itself: it takes the first commitment of its round it can see, then
    # that validator's opening (which the contract refuses: a commitment binds its committer).
    copycat = make_validator_behaviour("copycat")
    assert isinstance(copycat, CopycatValidator) and copycat.decide(challenge, no_replay) is None
    assert copycat.copy_commitment(challenge, []) is None
    other = Vote(validator=VICTIM, round=challenge.round, commitment="ab" * 32)
    assert copycat.copy_commitment(challenge, [other]) == "ab" * 32
    assert copycat.copy_opening(challenge, [other]) is None  # nothing opened yet
    opened = other.model_copy(update={"outcome": "pass", "distance": "0", "evidence": "cd" * 32, "salt": "ef" * 32})
    copied = copycat.copy_opening(challenge, [opened])
    assert (copied.outcome, copied.evidence, copied.salt) == ("pass", "cd" * 32, "ef" * 32)
    with pytest.raises(ValueError):
        make_validator_behaviour("sometimes")
