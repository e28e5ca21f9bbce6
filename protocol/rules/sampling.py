"""Deterministic sampling from public seeds: data batches, challenged segments, validators, committees.

Nobody chooses: a host's batches are a function of (run id, previous epoch seed, host address,
step); which of its segments are checked, and by whom, is a function of the epoch seed, which is
revealed only after the host committed. The contract computes the challenges with the same rules;
``docs/protocol.md`` specifies them byte for byte and ``tests/vectors/sampling.json`` pins them.

The random source is a counter-mode stream of SHA-256 blocks (:class:`Stream`); a uniform integer
below ``n`` comes from rejection sampling on 64-bit draws (:func:`uniform`), so there is no modulo bias.
"""

from __future__ import annotations

from typing import TypeVar

from protocol.rules.hashing import DIGEST_SIZE, Tag, tagged_hash, u32be, u64be

T = TypeVar("T")

_TWO64 = 1 << 64


class Stream:
    """Draw ``u64`` values: value ``i`` is the first 8 bytes, big-endian, of ``H(tag, material || u32be(i))``."""

    def __init__(self, tag: str, material: bytes) -> None:
        self._tag = tag
        self._material = material
        self._counter = 0

    def next_u64(self) -> int:
        block = tagged_hash(self._tag, self._material, u32be(self._counter))
        self._counter += 1
        return int.from_bytes(block[:8], "big")


def uniform(stream: Stream, n: int) -> int:
    """A uniform integer in ``[0, n)``: draw until the value is below the largest multiple of ``n``."""
    if not 1 <= n < _TWO64:
        raise ValueError(f"uniform needs 1 <= n < 2^64, got {n}")
    limit = _TWO64 - (_TWO64 % n)
    while True:
        x = stream.next_u64()
        if x < limit:
            return x % n


def _partial_shuffle(stream: Stream, pool: list[T], m: int) -> list[T]:
    # Fisher-Yates for the first m positions: each draw picks among the not-yet-chosen tail.
    pool = list(pool)
    for i in range(m):
        j = i + uniform(stream, len(pool) - i)
        pool[i], pool[j] = pool[j], pool[i]
    return pool[:m]


def batch_indices(run_id: bytes, prev_epoch_seed: bytes, host: str, step: int,
                  batch_size: int, n_windows: int) -> list[int]:
    """The start positions of the training windows of one inner step of one host.

    Args:
        run_id: 32-byte run id (hash of the run spec).
        prev_epoch_seed: 32-byte seed of the previous epoch (the genesis seed for epoch 0).
        host: the host's bech32 address.
        step: the inner step within the epoch, ``0 <= step < H``.
        batch_size: sequences per step (the whole island's batch, before any split across ranks).
        n_windows: number of valid window starts in the training split.

    Returns:
        ``batch_size`` indices in ``[0, n_windows)``, drawn with replacement, in order.
    """
    if len(run_id) != DIGEST_SIZE or len(prev_epoch_seed) != DIGEST_SIZE:
        raise ValueError(f"run_id and prev_epoch_seed must be {DIGEST_SIZE} bytes")
    if step < 0 or batch_size < 1:
        raise ValueError("step must be >= 0 and batch_size >= 1")
    stream = Stream(Tag.SAMPLE_BATCH, run_id + prev_epoch_seed + host.encode() + b"\x00" + u64be(step))
    return [uniform(stream, n_windows) for _ in range(batch_size)]


def challenged_segments(epoch_seed: bytes, host: str, segments: int, k: int) -> list[int]:
    """The segments of ``host`` that validators replay: ``k`` distinct ones among the first ``S - 1``, plus the last.

    Args:
        epoch_seed: 32-byte seed of this epoch (from the beacon reveals).
        host: the host's bech32 address.
        segments: ``S``, the number of segments the host committed (``S >= 1``).
        k: challenges besides the last segment.

    Returns:
        Sorted segment numbers; always contains ``S - 1``; ``min(k, S - 1) + 1`` entries.
    """
    if len(epoch_seed) != DIGEST_SIZE:
        raise ValueError(f"epoch_seed must be {DIGEST_SIZE} bytes")
    if segments < 1 or k < 0:
        raise ValueError("segments must be >= 1 and k >= 0")
    stream = Stream(Tag.SAMPLE_SEGMENTS, epoch_seed + host.encode())
    chosen = _partial_shuffle(stream, list(range(segments - 1)), min(k, segments - 1))
    return [*sorted(chosen), segments - 1]


def challenge_validators(epoch_seed: bytes, host: str, segment: int,
                         validators: list[str], r: int) -> list[str]:
    """The validators assigned to replay one challenged segment; never the host itself.

    Args:
        epoch_seed: 32-byte seed of this epoch.
        host: the challenged host's address.
        segment: the challenged segment.
        validators: the epoch's participating validators (any order; duplicates ignored).
        r: validators per challenge.

    Returns:
        ``min(r, candidates)`` addresses, sorted.
    """
    if len(epoch_seed) != DIGEST_SIZE:
        raise ValueError(f"epoch_seed must be {DIGEST_SIZE} bytes")
    candidates = sorted(set(validators) - {host})
    stream = Stream(Tag.SAMPLE_VALIDATORS, epoch_seed + host.encode() + b"\x00" + u32be(segment))
    return sorted(_partial_shuffle(stream, candidates, min(r, len(candidates))))


def committee_size(first: int, round_: int) -> int:
    """The size dispute round ``round_`` (from 1) draws: ``first``, then ``2m + 1`` each round."""
    if first < 1 or round_ < 1:
        raise ValueError("the first committee size and the round are at least 1")
    size = first
    for _ in range(1, round_):
        size = 2 * size + 1
    return size


def quorum(first: int, round_: int) -> int:
    """The votes a decision of dispute round ``round_`` needs: more than half the size it drew for."""
    return committee_size(first, round_) // 2 + 1


def dispute_committee(dispute_seed: bytes, host: str, segment: int, validators: list[str],
                      excluded: list[str], m: int) -> list[str]:
    """A dispute committee for (``host``, ``segment``): never the host, never a validator already on the challenge.

    Args:
        dispute_seed: 32-byte seed of the round (:func:`protocol.rules.commitments.dispute_seed`).
        host: the challenged host.
        segment: the challenged segment.
        validators: the epoch's validators V (any order; duplicates ignored).
        excluded: validators already assigned to this challenge (first round, earlier committees).
        m: the committee size of the round (:func:`committee_size`).

    Returns:
        ``min(m, candidates)`` addresses, sorted.
    """
    if len(dispute_seed) != DIGEST_SIZE:
        raise ValueError(f"dispute_seed must be {DIGEST_SIZE} bytes")
    candidates = sorted(set(validators) - {host} - set(excluded))
    stream = Stream(Tag.SAMPLE_DISPUTE, dispute_seed + host.encode() + b"\x00" + u32be(segment))
    return sorted(_partial_shuffle(stream, candidates, min(m, len(candidates))))
