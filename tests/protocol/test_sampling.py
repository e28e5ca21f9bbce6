"""Sampling: deterministic, in range, distinct where promised, never the host, not biased, and by stake:
splitting a stake across identities changes nothing about how much of it a committee holds."""

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.rules.hashing import tagged_hash
from protocol.rules.sampling import (
    Stream,
    batch_indices,
    challenge_seats,
    challenged_segments,
    pickers,
    picks,
    stake_committee,
    stake_seats,
    uniform,
    uniform128,
)

seeds = st.binary(min_size=32, max_size=32)
addresses = st.sampled_from([f"inj1host{i}" for i in range(10)])


@given(seeds, addresses, st.integers(1, 200), st.integers(0, 20))
def test_challenged_segments_are_distinct_in_range_and_include_the_last(seed, host, s, k) -> None:
    got = challenged_segments(seed, host, s, k)
    assert got == sorted(set(got))
    assert got[-1] == s - 1
    assert len(got) == min(k, s - 1) + 1
    assert all(0 <= x < s for x in got)
    assert got == challenged_segments(seed, host, s, k)


@given(seeds, addresses, st.dictionaries(addresses, st.integers(0, 10**20), max_size=10), st.integers(1, 25))
def test_pickers_never_include_the_host_and_hold_more_than_a_third_or_fill_the_cap(seed, host, stakes, cap) -> None:
    got = pickers(seed, host, stakes, cap)
    assert host not in got and got == sorted(set(got)) and len(got) <= cap
    pool = {a: s for a, s in stakes.items() if a != host and s > 0}
    held = sum(pool[a] for a in got)
    assert set(got) <= set(pool)
    # Stopped past a third, or drew cap seats (at most cap distinct holders, and fewer than a
    # third held only when the cap ran out).
    assert 3 * held > sum(pool.values()) or len(got) <= cap or not pool


def test_validator_order_given_does_not_matter() -> None:
    seed = tagged_hash("t", b"x")
    vals = {f"inj1v{i}": (i + 1) * 10**6 for i in range(7)}
    assert pickers(seed, "inj1h", vals, 19) == pickers(seed, "inj1h", dict(reversed(list(vals.items()))), 19)


def test_seats_land_in_proportion_to_stake() -> None:
    stream = Stream("t", b"seats")
    pool = {"a": 1, "b": 3, "c": 6}
    counts = Counter(stake_seats(stream, pool, 20_000))
    for address, stake in pool.items():
        assert abs(counts[address] / 20_000 - stake / 10) < 0.02


def test_uniform128_stays_below_and_spreads() -> None:
    stream = Stream("t", b"u")
    n = 3 * 2**100 + 1
    draws = [uniform128(stream, n) for _ in range(2_000)]
    assert all(0 <= x < n for x in draws)
    assert abs(sum(x < n // 2 for x in draws) / 2_000 - 0.5) < 0.05


def _coalition_share(stakes: dict[str, int], coalition: set[str], trials: int, cap: int) -> tuple[float, float]:
    """Over ``trials`` committees: the mean share of the candidates' stake the coalition holds in a
    committee, and how often the committee is all coalition."""
    total = sum(stakes.values())
    share, captured = 0.0, 0
    for t in range(trials):
        chosen = stake_committee("t", t.to_bytes(4, "big"), stakes, cap)
        held = sum(stakes[a] for a in chosen if a in coalition)
        share += held / total
        captured += all(a in coalition for a in chosen)
    return share / trials, captured / trials


def test_splitting_a_stake_across_identities_gains_nothing() -> None:
    """A coalition with 30 % of the stake, as one identity or as 30 sybils of 1 % each: the stake it
    holds in a committee and the chance that a committee is all its own stay the same (up to
    sampling noise). Each seat lands on a unit of stake, whoever holds it."""
    honest = {f"inj1honest{i}": 10 for i in range(7)}  # 70 units
    whole = {**honest, "inj1coalition": 30}
    split = {**honest, **{f"inj1sybil{i:02d}": 1 for i in range(30)}}
    trials = 3_000
    share_whole, captured_whole = _coalition_share(whole, {"inj1coalition"}, trials, cap=19)
    share_split, captured_split = _coalition_share(split, {a for a in split if "sybil" in a}, trials, cap=19)
    # Stake is what counts: as one identity the coalition sits on a committee whenever its one
    # seat is drawn (30 units of ~40 drawn); split, it holds the stake of the sybils drawn. Either
    # way it never holds a committee by itself (under a third, the draw stops on honest stake).
    assert captured_whole == 0 and captured_split == 0
    # Splitting does not raise the coalition's expected stake in a committee.
    assert share_split <= share_whole + 0.02


@given(st.dictionaries(st.sampled_from([bytes([i]) * 32 for i in range(6)]), st.booleans(), min_size=1),
       addresses, st.integers(2, 40), st.integers(0, 5))
def test_a_withholding_picker_changes_no_other_pickers_picks(revealed, host, s, k) -> None:
    """The challenge set is the union of the picks of the pickers that revealed: withholding a reveal
    removes only the withholder's own picks (and its seats), never changes another's."""
    secrets = {f"inj1p{i}": secret for i, secret in enumerate(revealed)}
    full = challenge_seats(secrets, host, s, k)
    for withholder in secrets:
        rest = {p: x for p, x in secrets.items() if p != withholder}
        without = challenge_seats(rest, host, s, k)
        for picker, secret in rest.items():
            for g in picks(secret, host, s, k):
                assert picker in without[g] and picker in full[g]
        assert set(without) <= set(full)
        assert without[s - 1] == sorted(rest)


@given(seeds, seeds, addresses, st.integers(0, 10_000), st.integers(1, 16), st.integers(1, 10**9))
def test_batch_indices_in_range_and_reproducible(run, prev, host, step, bs, n) -> None:
    got = batch_indices(run, prev, host, step, bs, n)
    assert len(got) == bs and all(0 <= i < n for i in got)
    assert got == batch_indices(run, prev, host, step, bs, n)


def test_batches_differ_between_hosts_steps_and_epochs() -> None:
    run, prev, other = (tagged_hash("t", bytes([i])) for i in range(3))
    base = batch_indices(run, prev, "inj1a", 0, 16, 10**6)
    assert base != batch_indices(run, prev, "inj1b", 0, 16, 10**6)
    assert base != batch_indices(run, prev, "inj1a", 1, 16, 10**6)
    assert base != batch_indices(run, other, "inj1a", 0, 16, 10**6)


def test_uniform_is_unbiased_enough() -> None:
    # 30k draws over 6 values: each count within 5 sigma of 5000.
    s = Stream("t", b"m")
    counts = Counter(uniform(s, 6) for _ in range(30_000))
    assert set(counts) == set(range(6))
    assert all(abs(c - 5000) < 5 * (30_000 * (1 / 6) * (5 / 6)) ** 0.5 for c in counts.values())


def test_segment_choice_is_uniform_across_hosts() -> None:
    # Every non-final segment is challenged about k/(S-1) of the time.
    seed = tagged_hash("t", b"seed")
    counts = Counter()
    for i in range(3000):
        counts.update(challenged_segments(seed, f"inj1h{i}", 9, 2)[:-1])
    assert all(abs(counts[x] - 750) < 5 * (3000 * 0.25 * 0.75) ** 0.5 for x in range(8))


@pytest.mark.parametrize("call", [
    lambda: uniform(Stream("t", b""), 0),
    lambda: challenged_segments(b"short", "h", 4, 1),
    lambda: challenged_segments(bytes(32), "h", 0, 1),
    lambda: batch_indices(bytes(32), bytes(31), "h", 0, 1, 10),
    lambda: batch_indices(bytes(32), bytes(32), "h", -1, 1, 10),
])
def test_bad_arguments_raise(call) -> None:
    with pytest.raises(ValueError):
        call()
