"""Sampling: deterministic, in range, distinct where promised, never the host, and not biased."""

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.rules.hashing import tagged_hash
from protocol.rules.sampling import Stream, batch_indices, challenge_validators, challenged_segments, uniform

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


@given(seeds, addresses, st.integers(0, 100), st.lists(addresses, max_size=10), st.integers(0, 12))
def test_validators_never_include_the_host(seed, host, segment, validators, r) -> None:
    got = challenge_validators(seed, host, segment, validators, r)
    assert host not in got
    assert got == sorted(set(got))
    assert len(got) == min(r, len(set(validators) - {host}))
    assert set(got) <= set(validators)


def test_validator_order_given_does_not_matter() -> None:
    seed = tagged_hash("t", b"x")
    vals = [f"inj1v{i}" for i in range(7)]
    assert challenge_validators(seed, "inj1h", 3, vals, 3) == challenge_validators(seed, "inj1h", 3, vals[::-1], 3)


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
