"""When a host ends its epoch early: a partial epoch instead of missing the commit deadline (issue 30).

A host that cannot train all ``S`` segments before the train phase's deadline commits the ``s``
it finished (a shorter leaf chain, verified the same way; its Δ weighs ``s`` in the aggregate and
its reward is its share of the segments). After each segment it asks whether one more segment,
at the pace it has kept so far (in blocks), still ends :data:`COMMIT_MARGIN_BLOCKS` before the
deadline, leaving room for the commitment's transaction to land.
"""

from __future__ import annotations

COMMIT_MARGIN_BLOCKS = 2
"""Blocks kept free before the train deadline for the commitment to land."""


def another_segment_fits(done: int, started: int, now: int, deadline: int,
                         margin: int = COMMIT_MARGIN_BLOCKS) -> bool:
    """Whether a segment begun now is expected to end, with ``margin`` blocks to spare, by ``deadline``.

    Args:
        done: segments finished this epoch (at least 1: the pace is measured on them).
        started: the height when training began.
        now: the height now.
        deadline: the train phase's deadline (its last block for a commitment).
        margin: blocks kept free for the commitment.
    """
    if done < 1:
        raise ValueError("the pace is measured on at least one finished segment")
    per_segment = (now - started) / done
    return now + per_segment + margin <= deadline


def first_segment_fits(steps_done: int, segment_steps: int, started: int, now: int, deadline: int,
                       margin: int = COMMIT_MARGIN_BLOCKS) -> bool:
    """Whether the epoch's first segment, at the pace of its steps so far, ends with ``margin`` blocks
    to spare by ``deadline``. When it does not, the host would finish no segment: it sits the epoch
    out (``sit_out``) instead of committing nothing and being ``absent``.

    Args:
        steps_done: steps of the first segment done so far (0 before training: the pace is unknown,
            so it fits while more than ``margin`` blocks are left; a segment takes some time).
        segment_steps: steps of a segment.
        started: the height when training began.
        now: the height now.
        deadline: the train phase's deadline.
        margin: blocks kept free for the transaction.
    """
    if not 0 <= steps_done < segment_steps:
        raise ValueError(f"steps_done {steps_done} is not within the first segment of {segment_steps} steps")
    if steps_done == 0:
        return now + margin < deadline
    per_step = (now - started) / steps_done
    return now + per_step * (segment_steps - steps_done) + margin <= deadline
