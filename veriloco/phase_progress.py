"""Where an epoch stands: its phase, how far through the phase's window, how long until the
deadline. One picture for ``epoch watch`` (a terminal) and the dashboard (a web page).

A window counts from the block at which the phase actually opened, which the chain does not
report; the deadline does, so progress is ``1 − blocks_left / window`` with the spec's window,
clamped to [0, 1]. Seconds come from the block time an observer measured
(:class:`chain.block_clock.BlockClock`), None until it has seen two heights.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from protocol.rules.spec import PhaseSpec
from protocol.views import EpochInfo

PHASE_ORDER: tuple[str, ...] = ("join", "train", "reveal", "delay", "verify", "objection", "verdict_reveal",
                                "dispute", "dispute_reveal", "propose")
"""An epoch's phases in order (``delay`` only with ``verification.delay_squarings`` > 0; ``dispute`` and
``dispute_reveal`` only when a challenge is disputed)."""


class PhaseProgress(BaseModel):
    """One epoch's phase as a progress bar."""

    model_config = ConfigDict(extra="forbid")

    epoch: int
    phase: str
    height: int
    deadline: int
    blocks_left: int
    window: int | None
    fraction: float | None
    """How much of the phase's window has passed (0 to 1); None for a phase without a window in the spec."""
    seconds_left: float | None
    step: int
    """The phase's place in :data:`PHASE_ORDER`, from 1 (0: closed)."""
    closing: str | None = None


def phase_window(phase: str, phases: PhaseSpec, delay_blocks: int = 0) -> int | None:
    """The spec's window for ``phase`` in blocks (None: ``objection``, ``closed``). ``delay`` waits
    ``verification.delay_blocks`` when the run sets them, else its deadline is only when the VDF
    output is expected (``reveal_blocks``), as the contract opens it."""
    windows = {"join": phases.join_blocks, "train": phases.train_blocks, "reveal": phases.reveal_blocks,
               "delay": delay_blocks or phases.reveal_blocks, "verify": phases.verify_blocks,
               "dispute": phases.verify_blocks,
               "verdict_reveal": phases.verdict_reveal_blocks, "dispute_reveal": phases.verdict_reveal_blocks,
               "propose": phases.propose_blocks}
    return windows.get(phase)


def phase_progress(info: EpochInfo, height: int, phases: PhaseSpec, seconds_per_block: float | None,
                   delay_blocks: int = 0) -> PhaseProgress:
    """The progress of ``info``'s phase at ``height`` (``delay_blocks``: the run's
    ``verification.delay_blocks``)."""
    left = max(0, info.phase_deadline - height)
    window = phase_window(info.phase, phases, delay_blocks)
    fraction = None if not window else min(1.0, max(0.0, 1 - left / window))
    step = PHASE_ORDER.index(info.phase) + 1 if info.phase in PHASE_ORDER else 0
    return PhaseProgress(epoch=info.epoch, phase=info.phase, height=height, deadline=info.phase_deadline,
                         blocks_left=left, window=window, fraction=fraction,
                         seconds_left=None if seconds_per_block is None else round(left * seconds_per_block, 1),
                         step=step, closing=info.closing)
