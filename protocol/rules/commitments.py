"""The settlement game's commitments: verdicts and trap sets.

A validator commits to its verdict before any verdict is visible and opens it after the commit
window closed, so a verdict cannot be copied: the commitment binds the validator's address, so a
copied commitment never opens for the copier. A host commits to the set of its segments it
deliberately corrupted (its traps; an honest host commits to the empty set) with its work, and
opens it after the verdicts are committed: a validator cannot tell a trap from a real challenge.
``docs/protocol.md`` ("Verdicts, traps and disputes") specifies each byte for byte; the
contract computes the same (``contracts/veriloco/src/commitments.rs``) and
``tests/vectors/commitments.json`` pins both.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from protocol.rules.hashing import DIGEST_SIZE, Tag, tagged_hash, u32be, u64be

SALT_SIZE = DIGEST_SIZE
"""Bytes of a commitment's salt (revealed as 64 hex characters, like a digest)."""

OUTCOME_CODES = {"pass": 0, "fail": 1, "unavailable": 2}
"""The byte a verdict commitment hashes for each outcome."""


def _check(name: str, value: bytes) -> None:
    if len(value) != DIGEST_SIZE:
        raise ValueError(f"{name} must be {DIGEST_SIZE} bytes")


def verdict_commitment(validator: str, epoch: int, host: str, segment: int, outcome: str, distance: str,
                       evidence: bytes, salt: bytes, gain_micro: int | None = None,
                       dispute_gain_micro: int | None = None) -> bytes:
    """``H("verdict", validator || 0 || u64be(epoch) || host || 0 || u32be(segment) || u8(outcome)
    || distance || 0 || evidence || salt [|| 0x01 || u64be(gain_micro mod 2^64)
    [|| 0x02 || u64be(dispute_gain_micro mod 2^64)]])``.

    The bracketed tail is there only for a verdict that carries the host's probe gain (its last
    segment, the run's probe on); without one the preimage is exactly the older format. The inner
    one only for a vote that decides a gain dispute (a re-vote or a final vote), which also carries
    the host's gain on its dispute windows.

    Args:
        validator: the committing validator's address.
        epoch: the epoch.
        host: the challenged host's address.
        segment: the challenged segment.
        outcome: ``pass``, ``fail`` or ``unavailable``.
        distance: the measured distance as its canonical decimal string (as posted).
        evidence: the 32-byte evidence digest.
        salt: 32 random bytes, kept secret until the opening.
        gain_micro: the host's probe gain in micro-nats (signed, two's complement), or None.
        dispute_gain_micro: its gain on the host's dispute windows, or None (only with a gain).

    Raises:
        ValueError: an unknown outcome, a digest not 32 bytes, a dispute gain without a gain.
    """
    if outcome not in OUTCOME_CODES:
        raise ValueError(f"unknown outcome {outcome!r}")
    _check("evidence", evidence)
    _check("salt", salt)
    if dispute_gain_micro is not None and gain_micro is None:
        raise ValueError("a dispute-window gain comes only with a gain")
    gain = b"" if gain_micro is None else b"\x01" + u64be(gain_micro % 2**64)
    if dispute_gain_micro is not None:
        gain += b"\x02" + u64be(dispute_gain_micro % 2**64)
    return tagged_hash(Tag.VERDICT, validator.encode(), b"\x00", u64be(epoch), host.encode(), b"\x00",
                       u32be(segment), bytes([OUTCOME_CODES[outcome]]), distance.encode(), b"\x00",
                       evidence, salt, gain)


def trap_commitment(host: str, epoch: int, segments: Sequence[int], salt: bytes) -> bytes:
    """``H("traps", host || 0 || u64be(epoch) || u32be(n) || u32be(t_1) … || salt)``, traps ascending.

    Raises:
        ValueError: the segments are not distinct and ascending, or the salt is not 32 bytes.
    """
    _check("salt", salt)
    items = list(segments)
    if any(a >= b for a, b in pairwise(items)) or any(t < 0 for t in items):
        raise ValueError("trap segments must be distinct, non-negative and in ascending order")
    body = u32be(len(items)) + b"".join(u32be(t) for t in items)
    return tagged_hash(Tag.TRAPS, host.encode(), b"\x00", u64be(epoch), body, salt)
