"""Losses as the protocol hashes and posts them: fixed-point micro-nats and their digest.

No float is ever hashed or compared on chain: a loss becomes an integer number of micro-nats
(:func:`loss_micro`), and a host commits to all ``H`` per-step losses of an epoch with one digest
(:func:`loss_digest`), which the contract's vectors (``tests/vectors/losses.json``) pin.
"""

from __future__ import annotations

from protocol.rules.hashing import Tag, tagged_hash_hex, u64be

MICRO = 1_000_000


def loss_micro(loss: float) -> int:
    """A loss in micro-nats, rounded half to even: the only form a loss is hashed or posted in."""
    if loss != loss or loss in (float("inf"), float("-inf")):
        raise ValueError("loss is not finite")
    return round(loss * MICRO)


def loss_digest(losses_micro: list[int]) -> str:
    """``H("losses", u64be(count) || i64be(l_0) || i64be(l_1) || ...)`` over all H per-step losses."""
    parts = [u64be(len(losses_micro))]
    parts += [int(x).to_bytes(8, "big", signed=True) for x in losses_micro]
    return tagged_hash_hex(Tag.LOSSES, *parts)
