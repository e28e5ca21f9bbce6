"""Deterministic sampling: data batches, and who picks which segments of a host are checked.

Nobody chooses: a host's batches are a function of (run id, previous epoch seed, host address,
step). Its challenges are picked by a committee of validators drawn by stake (:func:`pickers`,
from the previous seed, known when the epoch's joins close), each picker's picks a function of
the beacon secret it committed when it joined (:func:`picks`): they depend on nothing a host or a
withholder controls. The contract computes them with the same rules; ``docs/protocol.md`` specifies
them byte for byte and ``tests/vectors/sampling.json`` pins them. :func:`challenged_segments` (k
segments from one seed) is what the trainer's and benches' detection estimates still use.

The random source is a counter-mode stream of SHA-256 blocks (:class:`Stream`); a uniform integer
below ``n`` comes from rejection sampling on 64-bit draws (:func:`uniform`), so there is no modulo bias.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping
from itertools import accumulate
from typing import TypeVar

from protocol.rules.hashing import DIGEST_SIZE, Tag, tagged_hash, u32be, u64be

T = TypeVar("T")

_TWO64 = 1 << 64
_TWO128 = 1 << 128


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


def uniform128(stream: Stream, n: int) -> int:
    """A uniform integer in ``[0, n)`` for ``1 <= n < 2^128``: two stream values make one 128-bit
    draw (the first the high half); draw until it is below ``2^128 − (2^128 mod n)``."""
    if not 1 <= n < _TWO128:
        raise ValueError(f"uniform128 needs 1 <= n < 2^128, got {n}")
    limit = _TWO128 - (_TWO128 % n)
    while True:
        x = (stream.next_u64() << 64) | stream.next_u64()
        if x < limit:
            return x % n


def _candidates(candidates: Mapping[str, int] | Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    items = dict(candidates.items() if isinstance(candidates, Mapping) else candidates)
    if any(stake < 0 for stake in items.values()):
        raise ValueError("stakes must be >= 0")
    return sorted((a, s) for a, s in items.items() if s > 0)


def stake_seats(stream: Stream, candidates: Mapping[str, int] | Iterable[tuple[str, int]], m: int) -> list[str]:
    """``m`` seats drawn with replacement, each holder with probability proportional to its stake.

    Candidates are taken in address order (zero stakes dropped); a seat is ``uniform128(total)``
    and goes to the first candidate whose cumulative stake exceeds it. Returns the holders in draw
    order (repeats included); empty without stake.
    """
    pool = _candidates(candidates)
    total = sum(s for _, s in pool)
    if not pool or m <= 0:
        return []
    cumulative = list(accumulate(s for _, s in pool))
    return [pool[bisect_right(cumulative, uniform128(stream, total))][0] for _ in range(m)]


def stake_committee(tag: str, material: bytes, candidates: Mapping[str, int] | Iterable[tuple[str, int]],
                    cap: int) -> list[str]:
    """A committee drawn by stake: seats one at a time from ``Stream(tag, material)``
    (:func:`stake_seats`) until the distinct holders drawn hold MORE than 1/3 of the candidates'
    total stake, or ``cap`` seats were drawn. Returns the distinct holders, sorted.

    Splitting a stake across identities changes nothing about how much of that stake a committee
    holds (each seat lands on a unit of stake, whoever holds it); a coalition under 1/3 of the
    stake never stops the draw by itself, so the committee holds an honest member unless all
    ``cap`` seats landed on the coalition (probability below β^cap).
    """
    pool = _candidates(candidates)
    total = sum(s for _, s in pool)
    if not pool or cap <= 0:
        return []
    cumulative = list(accumulate(s for _, s in pool))
    stream = Stream(tag, material)
    held, chosen = 0, set()
    for _ in range(cap):
        address, stake = pool[bisect_right(cumulative, uniform128(stream, total))]
        if address not in chosen:
            chosen.add(address)
            held += stake
            if 3 * held > total:
                break
    return sorted(chosen)


def pickers(prev_seed: bytes, host: str, validators: Mapping[str, int] | Iterable[tuple[str, int]],
            cap: int) -> list[str]:
    """The validators whose secrets pick ``host``'s challenges: ``stake_committee`` over the epoch's
    joined validators (their stake at join) without ``host``, from
    ``Stream("sample/pickers", prev_seed || utf8(host))``. Known at the close of join, before any
    secret is revealed."""
    if len(prev_seed) != DIGEST_SIZE:
        raise ValueError(f"prev_seed must be {DIGEST_SIZE} bytes")
    pool = [(a, s) for a, s in _candidates(validators) if a != host]
    return stake_committee(Tag.SAMPLE_PICKERS, prev_seed + host.encode(), pool, cap)


def picks(secret: bytes, host: str, segments: int, k: int) -> list[int]:
    """The segments one picker's secret picks on ``host``: ``min(k, S − 1)`` distinct ones among the
    first ``S − 1``, from ``Stream("sample/picks", secret || utf8(host))`` (partial Fisher–Yates),
    sorted. The secret was committed when the picker joined, before any host committed."""
    if len(secret) != DIGEST_SIZE:
        raise ValueError(f"secret must be {DIGEST_SIZE} bytes")
    if segments < 1 or k < 0:
        raise ValueError("segments must be >= 1 and k >= 0")
    stream = Stream(Tag.SAMPLE_PICKS, secret + host.encode())
    return sorted(_partial_shuffle(stream, list(range(segments - 1)), min(k, segments - 1)))


def challenge_seats(secrets: Mapping[str, bytes], host: str, segments: int, k: int) -> dict[int, list[str]]:
    """The challenges of ``host`` and their round-0 seats, from the secrets its pickers revealed
    (``secrets``: picker -> secret; a picker that did not reveal is absent and has no picks):
    every picked segment seats the pickers that picked it; the last segment, always challenged,
    seats every picker that revealed. Returns segment -> sorted seats, in segment order."""
    if segments < 1:
        raise ValueError("segments must be >= 1")
    seats: dict[int, set[str]] = {}
    for picker, secret in secrets.items():
        for g in picks(secret, host, segments, k):
            seats.setdefault(g, set()).add(picker)
    seats[segments - 1] = set(secrets)
    return {g: sorted(seats[g]) for g in sorted(seats)}


def seat_rank(prev_seed: bytes, address: str) -> bytes:
    """``H("seat", prev_seed || utf8(address))``: between two members of equal stake at join, the
    larger rank keeps a seat of a full epoch (never the earlier arrival)."""
    if len(prev_seed) != DIGEST_SIZE:
        raise ValueError(f"prev_seed must be {DIGEST_SIZE} bytes")
    return tagged_hash(Tag.SEAT, prev_seed, address.encode())
