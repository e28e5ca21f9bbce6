"""The probe: deterministic windows from the beacon, a Δ's gain on a real model, the outlier rule."""

from __future__ import annotations

import random

import pytest
import torch

from protocol.rules.hashing import Tag, tagged_hash
from trainer.data import Dataset
from trainer.delta import pseudo_gradient
from trainer.inner import EpochContext, start_checkpoint, train_steps
from trainer.model import build_model
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.probe import (
    GAIN_MICRO_BOUND,
    PROBE_SCALE,
    check_probe_windows,
    decided_gains,
    dispute_seed,
    dispute_starts,
    gain_micro,
    probe_allowance,
    probe_gain,
    probe_loss,
    probe_outliers,
    probe_seed,
    probe_starts,
)
from trainer.step import Stepper

BEACON = bytes(range(32))


def test_probe_seed_is_per_epoch_and_apart_from_the_challenge_draw() -> None:
    seeds = {probe_seed(BEACON, e) for e in range(5)} | {probe_seed(bytes(32), 0)}
    assert len(seeds) == 6 and all(len(s) == 32 for s in seeds)
    assert probe_seed(BEACON, 3) == probe_seed(BEACON, 3)
    assert probe_seed(BEACON, 0) not in {tagged_hash(t, BEACON) for t in (Tag.SAMPLE_SEGMENTS, Tag.SAMPLE_PICKERS)}
    for beacon, epoch in ((b"short", 0), (BEACON, -1), (BEACON, 1 << 64), (BEACON, True)):
        with pytest.raises(ValueError):
            probe_seed(beacon, epoch)  # type: ignore[arg-type]


def test_probe_starts_are_distinct_in_range_and_follow_the_seed(dataset: Dataset) -> None:
    span = len(dataset.val) - dataset.seq_len
    a = probe_starts(dataset, probe_seed(BEACON, 0), 64)
    assert a == probe_starts(dataset, probe_seed(BEACON, 0), 64)
    assert len(set(a)) == 64 and all(0 <= s < span for s in a)
    assert a[:8] == probe_starts(dataset, probe_seed(BEACON, 0), 8)  # a prefix: more windows draw on
    assert a != probe_starts(dataset, probe_seed(BEACON, 1), 64)
    for seed, n in ((b"x" * 31, 4), (BEACON, 0), (BEACON, span + 1)):
        with pytest.raises(ValueError):
            probe_starts(dataset, seed, n)


def test_probe_starts_draw_every_start_of_a_short_split_once(dataset: Dataset) -> None:
    short = Dataset(dataset.train, dataset.val[: dataset.seq_len + 7], dataset.seq_len, dataset.hash)
    assert sorted(probe_starts(short, BEACON, 7)) == list(range(7))  # duplicates drawn are skipped


def test_dispute_windows_are_per_host_and_share_none_with_the_probes(dataset: Dataset) -> None:
    # A gain dispute's question is asked on windows nobody opened a gain on: per host, per epoch,
    # disjoint from the epoch's probe windows (whose gains are public by then).
    main = set(probe_starts(dataset, probe_seed(BEACON, 2), 64))
    a = dispute_starts(dataset, BEACON, 2, "inj1host", 64)
    assert a == dispute_starts(dataset, BEACON, 2, "inj1host", 64) and len(set(a)) == 64
    assert not main & set(a)
    assert a != dispute_starts(dataset, BEACON, 2, "inj1other", 64)
    assert a != dispute_starts(dataset, BEACON, 3, "inj1host", 64)
    assert dispute_seed(BEACON, 2, "inj1host") == tagged_hash(Tag.PROBE_DISPUTE, BEACON, (2).to_bytes(8, "big"),
                                                              b"inj1host")
    short = Dataset(dataset.train, dataset.val[: dataset.seq_len + 8], dataset.seq_len, dataset.hash)
    assert sorted(dispute_starts(short, BEACON, 0, "h", 4) + probe_starts(short, probe_seed(BEACON, 0), 4)) == \
        list(range(8))
    for host, n in (("", 4), ("h", 5), ("h", 0)):
        with pytest.raises(ValueError):
            dispute_starts(short, BEACON, 0, host, n)
    # A run whose split cannot hold both draws is refused up front (ValidatorNode checks at start).
    check_probe_windows(short, 4)
    check_probe_windows(short, 0)  # the probe off
    with pytest.raises(ValueError, match=r"probe_windows = 5 needs 2 × 5 = 10 distinct validation windows.*"
                                         r"has 8 window starts: lower probe_windows to at most 4"):
        check_probe_windows(short, 5)


def test_a_host_without_a_decided_gain_counts_at_the_lowest() -> None:
    assert decided_gains({"a": 5, "b": None, "c": -GAIN_MICRO_BOUND}) == {
        "a": 5, "b": -GAIN_MICRO_BOUND, "c": -GAIN_MICRO_BOUND}
    # With peers that have gains it is left out; the rule needs DELTA_PEER_MIN gains to leave anyone out.
    assert probe_outliers(decided_gains({"a": 50_000, "b": 51_000, "c": None}), 10_000) == {"c"}


def test_gain_micro_rounds_half_to_even_and_clamps() -> None:
    assert [gain_micro(g) for g in (2.5e-6, 3.5e-6, 0.5e-6, -1.5e-6)] == [2, 4, 0, -2]
    assert gain_micro(0.0123456789) == 12346 and gain_micro(-1.41) == -1_410_000
    assert gain_micro(2e6) == GAIN_MICRO_BOUND and gain_micro(float("inf")) == GAIN_MICRO_BOUND
    assert gain_micro(-float("inf")) == -GAIN_MICRO_BOUND == gain_micro(float("nan"))


def test_outliers_leave_out_the_low_gain_only_beyond_the_margin() -> None:
    gains = {"a": 50_000, "b": 52_000, "c": 48_000, "d": 20_000}  # lower median 48,000: 5 % is 2,400
    assert probe_outliers(gains, 10_000) == {"d"}
    assert probe_outliers(gains, 25_600) == set()  # exactly at the allowance (28,000 below): kept
    assert probe_outliers(gains, 25_599) == {"d"}
    assert probe_allowance(48_000, 25_600) == 28_000 and probe_allowance(-49_000, 7) == 7
    # lower median 50,000, allowance 2,500 + 1: c (10,000 below) is left out; a high gain never is
    assert probe_outliers({**gains, "c": 40_000, "d": 90_000}, 1) == {"c"}
    assert probe_outliers({"a": 50_000, "d": -10**9}, 0) == set()  # fewer than 3: no peers
    assert probe_outliers({"a": 50_000, "b": 50_000, "d": -10**9}, 0) == {"d"}


def test_half_the_hosts_posting_high_gains_leave_no_honest_host_out() -> None:
    # Two of four hosts tune their Δs down the public validation loss and post far higher gains. With
    # the mean of the two middle gains as the median, (60,000 + 1,000,000) / 2, every honest host would
    # be 470,000 or more below it and left out; the lower median is the higher honest gain.
    gains = {"honest-a": 50_000, "honest-b": 60_000, "tuned-a": 1_000_000, "tuned-b": 1_000_000}
    assert probe_outliers(gains, 20_000) == set()
    assert probe_outliers({**gains, "honest-a": 10_000}, 20_000) == {"honest-a"}  # the rule still bites


def test_outliers_do_not_depend_on_arrival_order() -> None:
    rng = random.Random(7)
    for _ in range(50):
        n = rng.randint(3, 9)
        gains = {f"h{i}": rng.randint(-100_000, 100_000) for i in range(n)}
        segs = {h: rng.randint(1, 8) for h in gains}
        want = probe_outliers(gains, 5_000, segs)
        items = list(gains.items())
        rng.shuffle(items)
        assert probe_outliers(dict(items), 5_000, dict(reversed(list(segs.items())))) == want


def test_a_partial_host_is_not_left_out_for_training_less() -> None:
    whole = {"a": 60_000, "b": 62_000, "c": 58_000}
    # Half the segments, half the gain: without segments it is an outlier, with them it is not.
    assert probe_outliers({**whole, "p": 30_000}, 10_000) == {"p"}
    segs = {"a": 8, "b": 8, "c": 8, "p": 4}
    assert probe_outliers({**whole, "p": 30_000}, 10_000, segs) == set()
    # ... but a partial host whose gain is far below what its share predicts still is.
    assert probe_outliers({**whole, "p": 5_000}, 10_000, segs) == {"p"}
    # Negative peer gains are never raised by the scaling (which would be harsher on the partial host).
    assert probe_outliers({"a": -40_000, "b": -40_000, "c": -40_000, "p": -45_000}, 10_000, segs) == set()
    # A whole host among partial ones is compared with their smaller gains as they are.
    assert probe_outliers({"p1": 30_000, "p2": 31_000, "p3": 27_000, "w": 60_000}, 0,
                          {"p1": 4, "p2": 4, "p3": 4, "w": 8}) == {"p3"}


@pytest.mark.parametrize("bad", [
    ({"a": 1.5, "b": 0, "c": 0}, 0, None),
    ({"a": True, "b": 0, "c": 0}, 0, None),
    ({"a": GAIN_MICRO_BOUND + 1, "b": 0, "c": 0}, 0, None),
    ({"a": 0, "b": 0, "c": 0}, -1, None),
    ({"a": 0, "b": 0, "c": 0}, 0, {"a": 1, "b": 1}),
    ({"a": 0, "b": 0, "c": 0}, 0, {"a": 1, "b": 1, "c": 0}),
])
def test_outliers_refuse_malformed_input(bad) -> None:
    with pytest.raises(ValueError):
        probe_outliers(*bad)


@pytest.fixture(scope="module")
def trained(spec, dataset):
    """θ_0 and the honest Δ of 4 inner steps of the small spec, and the stepper's model."""
    theta = GlobalState.initial(spec).params
    stepper = Stepper(spec)
    stepper.load(start_checkpoint(spec, theta, 0).state)
    run_id = spec.run_id()
    train_steps(stepper, dataset, spec, EpochContext(run_id, 0, "worker-0", run_id), range(4), 1)
    return stepper.model, theta, pseudo_gradient(theta, stepper.export().params)


def test_an_honest_delta_gains_and_its_reverse_loses(trained, dataset) -> None:
    model, theta, delta = trained
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    starts = probe_starts(dataset, probe_seed(BEACON, 0), 16)
    gain = probe_gain(model, dataset, theta, delta, starts)
    assert gain > 0.01  # four AdamW steps from θ_0 lower the validation loss
    assert probe_gain(model, dataset, theta, {n: -t for n, t in delta.items()}, starts) < 0
    assert probe_gain(model, dataset, theta, delta, starts) == gain  # deterministic
    base = probe_loss(model, dataset, theta, starts)
    assert probe_gain(model, dataset, theta, delta, starts, base=base) == gain
    assert 0 < probe_gain(model, dataset, theta, delta, starts, scale=0.25) < gain
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # the model is untouched
    assert model.training


def test_probe_gain_refuses_what_is_not_the_models(trained, dataset) -> None:
    model, theta, delta = trained
    starts = probe_starts(dataset, BEACON, 4)
    name = next(iter(delta))
    for kwargs in ({"delta": {n: t for n, t in delta.items() if n != name}},
                   {"delta": {**delta, name: delta[name].reshape(-1)[:1]}},
                   {"starts": []}, {"starts": [len(dataset.val)]}, {"scale": 0.0}, {"scale": float("nan")}):
        args = {"delta": delta, "starts": starts, **kwargs}
        with pytest.raises(ValueError):
            probe_gain(model, dataset, theta, args.pop("delta"), **args)


def test_the_probe_fields_are_omitted_at_their_defaults_and_validated() -> None:
    from decimal import Decimal

    from pydantic import ValidationError
    from suite_env import small_spec

    from protocol.rules.encoding import EncodingError
    from protocol.rules.spec import RunSpec

    plain = small_spec()
    assert plain.verification.probe_windows == 64 and plain.aggregation.probe_margin == Decimal("0.02")
    assert b"probe_windows" not in plain.canonical() and b"probe_margin" not in plain.canonical()
    assert plain.aggregation.probe_margin_micro == 20_000
    off = small_spec(verification={"probe_windows": 0}, aggregation={"probe_margin": "0.125"})
    assert b'"probe_windows":0' in off.canonical() and b'"probe_margin":"0.125"' in off.canonical()
    assert off.run_id() != plain.run_id() and RunSpec.from_canonical(off.canonical()) == off
    assert off.aggregation.probe_margin_micro == 125_000
    spelled = plain.canonical().replace(b'"rule":', b'"probe_margin":"0.02","rule":')
    with pytest.raises(EncodingError, match="default-omitted"):
        RunSpec.from_canonical(spelled)
    for bad in ({"verification": {"probe_windows": -1}}, {"verification": {"probe_windows": 4097}},
                {"verification": {"probe_windows": 1.0}}, {"aggregation": {"probe_margin": "-0.01"}},
                {"aggregation": {"probe_margin": "0.0000001"}}, {"aggregation": {"probe_margin": "1001"}}):
        with pytest.raises(ValidationError, match="probe_"):
            small_spec(**bad)


def test_admitted_leaves_out_what_either_rule_does() -> None:
    from trainer.probe import admitted

    g = torch.Generator().manual_seed(1)
    deltas = {h: {"w": torch.randn(64, 64, generator=g), "b": torch.randn(8, generator=g)} for h in "abcd"}
    deltas["e"] = {"w": 3 * torch.randn(64, 64, generator=g), "b": torch.randn(8, generator=g)}  # beyond 1.5×
    gains = {"a": 50_000, "b": 51_000, "c": 49_000, "d": 1_000, "e": 50_000}
    both = admitted(deltas, gains, 10_000)
    assert set(both.kept) == {"a", "b", "c"} and set(both.left_out) == {"e"} and both.excluded == {"d"}
    assert set(admitted(deltas, None).kept) == {"a", "b", "c", "d"}  # the probe off: the peer bound alone
    assert set(admitted(deltas, gains, 50_000).kept) == {"a", "b", "c", "d"}  # within a wide margin
    with pytest.raises(ValueError, match="gains"):
        admitted(deltas, {h: gains[h] for h in "abcd"}, 10_000)


def test_the_simulation_aggregates_through_the_probe_rule(dataset, monkeypatch) -> None:
    # trainer.diloco.proposers_aggregate: a Δ whose decided gain is below the median by more than
    # the run's margin is left out, as node/host.py leaves it out; probe_windows 0 ignores gains.
    from suite_env import small_spec

    from protocol.tensors.aggregation import aggregate
    from trainer.diloco import proposers_aggregate, simulate

    spec = small_spec(aggregation={"rule": "mean"})
    g = torch.Generator().manual_seed(5)
    deltas = {f"worker-{k}": {n: 1e-2 * torch.randn(t.shape, generator=g) for n, t in
                              GlobalState.initial(spec).params.items()} for k in range(4)}
    gains = {"worker-0": -200_000, "worker-1": 40_000, "worker-2": 42_000, "worker-3": 41_000}
    got = proposers_aggregate(spec, deltas, gains)
    want = aggregate(spec.aggregation, {h: d for h, d in deltas.items() if h != "worker-0"})
    assert all(torch.equal(got[n], want[n]) for n in want)
    off = proposers_aggregate(spec.with_changes(verification={"probe_windows": 0}), deltas, gains)
    plain = aggregate(spec.aggregation, deltas)
    assert all(torch.equal(off[n], plain[n]) for n in plain)
    # Honest workers are not left out: the run is the same with no gains posted (the same spec, so
    # the same run id and batches).
    import trainer.diloco

    short = small_spec(train={"inner_steps": 8, "segment_steps": 8})
    posted: list[dict[str, int] | None] = []

    real = trainer.diloco.epoch_gains

    def record(*args, **kwargs):
        posted.append(real(*args, **kwargs))
        return posted[-1]
    monkeypatch.setattr(trainer.diloco, "epoch_gains", record)
    probed = simulate(short, dataset, "diloco", workers=3, steps=16, evals=1, eval_windows=64).val_loss
    assert len(posted) == 2 and all(len(p or {}) == 3 and min((p or {}).values()) > 0 for p in posted)
    monkeypatch.setattr(trainer.diloco, "epoch_gains", lambda *args, **kwargs: None)
    assert simulate(short, dataset, "diloco", workers=3, steps=16, evals=1, eval_windows=64).val_loss == probed


def test_topk2_epochs_are_probed_with_their_own_allowance() -> None:
    from suite_env import small_spec

    from trainer.probe import (
        PROBE_MARGIN_TIMES_TOPK2,
        PROBE_RELATIVE_BPS,
        PROBE_RELATIVE_BPS_TOPK2,
        probe_applies,
        probe_rule,
    )

    assert probe_applies(small_spec(), 0) and not probe_applies(small_spec(verification={"probe_windows": 0}), 0)
    scheduled = small_spec(quantization={"scheme": "int8", "block_size": 64,
                                         "schedule": [{"from_epoch": 2, "scheme": "topk2", "block_size": 1024}]})
    assert [probe_applies(scheduled, e) for e in range(4)] == [True] * 4
    margin = scheduled.aggregation.probe_margin_micro
    topk2 = (PROBE_MARGIN_TIMES_TOPK2 * margin, PROBE_RELATIVE_BPS_TOPK2)
    assert [probe_rule(scheduled, e) for e in range(4)] == [(margin, PROBE_RELATIVE_BPS)] * 2 + [topk2] * 2
    # topk2 widens only the absolute part: a wider relative share was room for a forger's blend
    assert PROBE_MARGIN_TIMES_TOPK2 > 1 and PROBE_RELATIVE_BPS_TOPK2 == PROBE_RELATIVE_BPS == 500
    # A gain 40,000 µnats below a median of 150,000: left out of an int8 epoch (allowance 27,500), kept
    # in a topk2 one (90,000); a Δ̂ that makes the model worse is left out of either.
    gains = {"a": 150_000, "b": 151_000, "c": 152_000, "d": 110_000}
    assert probe_outliers(gains, margin) == {"d"}
    assert probe_outliers(gains, topk2[0], relative_bps=topk2[1]) == set()
    assert probe_outliers({**gains, "d": -1}, topk2[0], relative_bps=topk2[1]) == {"d"}
    assert probe_allowance(150_000, *topk2) == PROBE_MARGIN_TIMES_TOPK2 * margin + 15 * PROBE_RELATIVE_BPS_TOPK2
    for bad in (-1, 10_001, True):
        with pytest.raises(ValueError, match="relative_bps"):
            probe_outliers(gains, 0, relative_bps=bad)


def test_a_run_may_set_the_topk2_allowance() -> None:
    # aggregation.probe_margin_topk2: the absolute part of a topk2 epoch's allowance, in place of
    # PROBE_MARGIN_TIMES_TOPK2 × probe_margin; int8 epochs keep probe_margin. Unset, it is not in the
    # canonical JSON, so run ids from before the field do not move.
    from decimal import Decimal

    from pydantic import ValidationError
    from suite_env import small_spec

    from protocol.rules.encoding import EncodingError
    from protocol.rules.spec import RunSpec
    from trainer.probe import PROBE_MARGIN_TIMES_TOPK2, PROBE_RELATIVE_BPS, PROBE_RELATIVE_BPS_TOPK2, probe_rule

    quant = {"scheme": "int8", "block_size": 64,
             "schedule": [{"from_epoch": 1, "scheme": "topk2", "block_size": 1024}]}
    unset = small_spec(quantization=quant)
    assert unset.aggregation.probe_margin_topk2 is None and unset.aggregation.probe_margin_topk2_micro is None
    assert b"probe_margin_topk2" not in unset.canonical()
    assert unset.run_id() == RunSpec.from_canonical(unset.canonical()).run_id()
    assert probe_rule(unset, 1) == (PROBE_MARGIN_TIMES_TOPK2 * 20_000, PROBE_RELATIVE_BPS_TOPK2)
    spelled = unset.canonical().replace(b'"rule":', b'"probe_margin_topk2":null,"rule":')
    with pytest.raises(EncodingError, match="default-omitted"):
        RunSpec.from_canonical(spelled)

    tight = small_spec(quantization=quant, aggregation={"probe_margin_topk2": "0.03"})
    assert tight.aggregation.probe_margin_topk2 == Decimal("0.03")
    assert tight.aggregation.probe_margin_topk2_micro == 30_000
    assert b'"probe_margin_topk2":"0.03"' in tight.canonical() and tight.run_id() != unset.run_id()
    assert RunSpec.from_canonical(tight.canonical()) == tight
    assert [probe_rule(tight, e) for e in range(3)] == [(20_000, PROBE_RELATIVE_BPS)] + [(30_000, 500)] * 2
    # Set, it does not follow probe_margin; 0 is a rule too (5 % of a positive median alone).
    wide = small_spec(quantization=quant, aggregation={"probe_margin": "0.05", "probe_margin_topk2": "0"})
    assert [probe_rule(wide, e) for e in range(2)] == [(50_000, PROBE_RELATIVE_BPS), (0, PROBE_RELATIVE_BPS_TOPK2)]
    for bad in ("-0.01", "0.0000001", "1001"):
        with pytest.raises(ValidationError, match="probe_margin_topk2"):
            small_spec(quantization=quant, aggregation={"probe_margin_topk2": bad})


@pytest.mark.parametrize("preset_name", ["tiny", "demo"])
def test_the_gain_is_the_same_bits_at_any_thread_count(preset_name, dataset, threads) -> None:
    """Honest validators of one compute class may run different thread counts. A gain that differed
    between them would be another verdict: the pair would go to the final vote and one be `wrong`."""
    spec = preset(preset_name)
    model = build_model(spec)
    theta = {n: p.detach().clone() for n, p in model.named_parameters()}
    noise = torch.Generator().manual_seed(7)
    delta = {n: 1e-2 * torch.randn(p.shape, generator=noise) for n, p in theta.items()}
    starts = probe_starts(dataset, probe_seed(BEACON, 3), 64)
    gains = []
    for n in (1, 2, 3):
        threads(n)
        gains.append(probe_gain(model, dataset, theta, delta, starts, scale=PROBE_SCALE))
    assert gains[0] != 0
    assert gains[0] == gains[1] == gains[2]
