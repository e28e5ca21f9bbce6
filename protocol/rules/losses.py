"""Losses as the protocol hashes and posts them: fixed-point micro-nats and their digest.

No float is ever hashed or compared on chain: a loss becomes an integer number of micro-nats
(:func:`loss_micro`), and a host commits to all ``H`` per-step losses of an epoch with one digest
(:func:`loss_digest`), which the contract's vectors (``tests/vectors/losses.json``) pin.
"""

from __future__ import annotations

from protocol.rules.hashing import Tag, tagged_hash_hex, u64be
from protocol.rules.limits import MAX_LOSS_MICRO

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


def train_loss_micro(losses_micro: list[int], segment_steps: int) -> int:
    """The training loss a commitment reports: the mean of the last segment's committed losses.

    Computed from the committed integers alone (rounded half to even, in exact integer arithmetic),
    so anyone holding the losses that hash to the commitment's ``loss_digest`` can check the
    reported value; clamped to ``[0, MAX_LOSS_MICRO]`` so that a diverged epoch still has a
    postable, checkable value.

    Args:
        losses_micro: the epoch's ``H`` per-step losses in micro-nats.
        segment_steps: ``c``, the length of the last segment.

    Raises:
        ValueError: fewer losses than one segment, or a non-positive ``segment_steps``.
    """
    if segment_steps < 1 or len(losses_micro) < segment_steps:
        raise ValueError(f"need at least one segment of {segment_steps} losses, got {len(losses_micro)}")
    total = sum(int(x) for x in losses_micro[-segment_steps:])
    q, r = divmod(total, segment_steps)
    if 2 * r > segment_steps or (2 * r == segment_steps and q % 2):  # half to even
        q += 1
    return min(max(q, 0), MAX_LOSS_MICRO)
