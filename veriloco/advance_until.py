"""Driving a run to a later epoch without hand-typing ``epoch advance`` (``epoch advance --until N``).

An idle run (nobody joins, or the members are done) still has to go through its phase deadlines
before, say, unbonded stake can be claimed. :func:`next_move` decides, from the epoch and the
height, whether the run is there, a phase can be closed now, or the chain must reach a deadline
first; :func:`advance_until` loops over it, sending ``advance`` (and every page of a paged close)
and waiting for blocks between (an embedded chain produces them, a real one is waited for).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from chain.ledger import ContractError, Ledger
from chain.types import TxResult
from protocol.keys import PrivateKey
from protocol.views import EpochInfo
from veriloco.errors import CommandError

Move = Literal["done", "advance", "wait"]

MAX_ADVANCES = 10_000
"""The most transactions one ``--until`` sends (a guard against a run that never reaches its epoch)."""


def next_move(info: EpochInfo, height: int, until: int) -> Move:
    """What to do to bring the run to epoch ``until``: ``done`` once it is there, ``advance`` when
    the current phase's deadline has passed (or a paged close is running), ``wait`` for blocks."""
    if info.epoch >= until:
        return "done"
    if info.closing is not None or height >= info.phase_deadline:
        return "advance"
    return "wait"


@dataclass
class Drive:
    """What :func:`advance_until` did: its transactions and the epoch and phase after each."""

    txs: list[TxResult] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)


def advance_until(ledger: Ledger, key: PrivateKey, until: int, *, wait_timeout: float,
                  progress: Callable[[str], None] = lambda _: None) -> Drive:
    """Advance phases until the run's current epoch is ``until`` (or later).

    Args:
        ledger: the run.
        key: who sends ``advance`` (any account with funds for fees).
        until: the epoch to reach.
        wait_timeout: seconds to wait for the chain to reach one deadline.
        progress: told each step in words (for stderr).

    Raises:
        CommandError: the chain did not reach a deadline within ``wait_timeout``, more than
            :data:`MAX_ADVANCES` transactions were needed, or an epoch waits for its delayed seed.
    """
    drive = Drive()
    waits_for_output = ledger.spec().verification.delay_blocks == 0  # else delay closes on its deadline
    while True:
        info, height = ledger.epoch(lists=False), ledger.height()
        move = next_move(info, height, until)
        if move == "done":
            return drive
        if len(drive.txs) >= MAX_ADVANCES:
            raise CommandError(f"still in epoch {info.epoch} after {MAX_ADVANCES} advances; stopping")
        if move == "advance" and info.phase == "delay" and info.closing is None and waits_for_output:
            # Only the VDF output closes it (docs/operators.md, "A stalled phase").
            raise CommandError(f"epoch {info.epoch} waits for its delayed seed (phase delay), which advance "
                               f"cannot close: `veriloco epoch delayed-seed` posts it")
        if move == "wait":
            progress(f"epoch {info.epoch} {info.phase}: waiting for height {info.phase_deadline} (now {height})")
            reached = ledger.wait_for_height(info.phase_deadline, timeout=wait_timeout)
            if reached < info.phase_deadline:
                raise CommandError(f"the chain is at height {reached}, not {info.phase_deadline}, after "
                                   f"{wait_timeout:.0f} s: is it producing blocks?")
            continue
        try:
            drive.txs.append(ledger.advance(key))
        except ContractError as exc:
            if "nothing is due" not in str(exc):
                raise CommandError(str(exc)) from None
            # The deadline's own block: a message there is late, but the close comes one block on.
            ledger.wait_for_height(height + 1, timeout=wait_timeout)
            continue
        after = ledger.epoch(lists=False)
        step = f"epoch {info.epoch} {info.phase} → epoch {after.epoch} {after.phase}"
        drive.steps.append(step)
        progress(f"{step} (height {drive.txs[-1].height})")
