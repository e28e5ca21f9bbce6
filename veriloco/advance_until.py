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
"""The most ``advance``s one ``--until`` sends, refused ones included (a guard against a run that
never reaches its epoch)."""


def next_move(info: EpochInfo, height: int, until: int, settling: EpochInfo | None = None) -> Move:
    """What to do to bring the run to epoch ``until``: ``done`` once it is there, ``advance`` when
    a phase's deadline has passed (or a paged close is running) in the current epoch or in the
    older one a pipelined run still settles (``settling``), ``wait`` for blocks."""
    if info.epoch >= until:
        return "done"
    if any(_due(e, height) for e in _in_flight(info, settling)):
        return "advance"
    return "wait"


def next_deadline(info: EpochInfo, height: int, settling: EpochInfo | None = None) -> int:
    """The height to wait for: the nearest deadline ahead of either epoch in flight, else the next
    block (a phase held by the settling epoch keeps its old deadline until that one closes)."""
    ahead = [e.phase_deadline for e in _in_flight(info, settling) if e.phase_deadline > height]
    return min(ahead, default=height + 1)


def waiting_for_output(info: EpochInfo, settling: EpochInfo | None, height: int, delay_blocks: int) -> int | None:
    """The epoch that nothing but its delayed seed can move on, when that is all that is due: in
    phase ``delay`` of a run without a fallback window (``verification.delay_blocks`` = 0), with
    no other epoch's phase due. ``None`` when an ``advance`` may still close something."""
    due = [e for e in _in_flight(info, settling) if _due(e, height)]
    stuck = [e for e in due if _waits_for_output(e, delay_blocks)]
    return stuck[0].epoch if stuck and len(stuck) == len(due) else None


def after_held(info: EpochInfo, settling: EpochInfo | None, height: int, delay_blocks: int) -> int | None:
    """The height to wait for after the contract refused an ``advance`` because the newer epoch's
    phase is held until the settling one closes: that epoch's next deadline (or the next block).
    ``None`` when the settling epoch waits in ``delay`` past its deadline without a fallback window:
    only its delayed seed moves it (before that deadline a validator's node may still post it)."""
    if settling is not None and _waits_for_output(settling, delay_blocks) and height >= settling.phase_deadline:
        return None
    return next_deadline(info, height, settling)


def _in_flight(info: EpochInfo, settling: EpochInfo | None) -> list[EpochInfo]:
    return [info] if settling is None else [settling, info]


def _due(e: EpochInfo, height: int) -> bool:
    """Its phase's deadline has passed, or a paged close runs: an ``advance`` may close something."""
    return e.closing is not None or height >= e.phase_deadline


def _waits_for_output(e: EpochInfo, delay_blocks: int) -> bool:
    """In ``delay`` with no fallback window (``delay_blocks`` = 0, whose deadline would close it like
    any other): only its delayed seed moves it."""
    return not delay_blocks and e.phase == "delay" and e.closing is None


def _read_in_flight(ledger: Ledger) -> tuple[EpochInfo, EpochInfo | None]:
    """The current epoch and, in a pipelined run, the older one still settling."""
    info = ledger.epoch(lists=False)
    return info, ledger.epoch(info.settling, lists=False) if info.settling is not None else None


def _delay_error(epoch: int) -> CommandError:
    # Only the VDF output closes it (docs/operators.md, "A stalled phase").
    return CommandError(f"epoch {epoch} waits for its delayed seed (phase delay), which advance cannot close: "
                        f"`veriloco epoch delayed-seed {epoch}` posts it")


@dataclass
class Drive:
    """What :func:`advance_until` did: its transactions and the epoch and phase after each."""

    txs: list[TxResult] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)


def advance_until(ledger: Ledger, key: PrivateKey, until: int, *, wait_timeout: float,
                  progress: Callable[[str], None] = lambda _: None) -> Drive:
    """Advance phases until the run's current epoch is ``until`` (or later).

    In a pipelined run the current epoch's later phases wait for the older epoch to settle
    ("held"): then it waits for the older epoch's deadlines and closes them too.

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
    delay_blocks = ledger.spec().verification.delay_blocks
    tries = 0  # advances sent or refused: a run that never gets there stops
    while True:
        (info, settling), height = _read_in_flight(ledger), ledger.height()
        move = next_move(info, height, until, settling)
        if move == "done":
            return drive
        if tries >= MAX_ADVANCES:
            raise CommandError(f"still in epoch {info.epoch} after {MAX_ADVANCES} advances; stopping")
        if move == "advance" and (stuck := waiting_for_output(info, settling, height, delay_blocks)) is not None:
            raise _delay_error(stuck)
        if move == "wait":
            _wait(ledger, info, settling, next_deadline(info, height, settling), wait_timeout, progress)
            continue
        tries += 1
        try:
            drive.txs.append(ledger.advance(key))
        except ContractError as exc:
            held = "held until epoch" in str(exc)
            if "nothing is due" not in str(exc):
                raise CommandError(str(exc)) from None
            # The deadline's own block (a message there is late, but the close comes one block on),
            # or a phase held by the settling epoch: wait for what is due next.
            target = after_held(info, settling, height, delay_blocks) if held else height + 1
            if target is None:
                assert settling is not None
                raise _delay_error(settling.epoch) from None
            _wait(ledger, info, settling, target, wait_timeout, progress)
            continue
        step = f"{_where(info, settling)} → {_where(*_read_in_flight(ledger))}"
        drive.steps.append(step)
        progress(f"{step} (height {drive.txs[-1].height})")


def _where(info: EpochInfo, settling: EpochInfo | None) -> str:
    here = f"epoch {info.epoch} {info.phase}"
    return here if settling is None else f"{here} (epoch {settling.epoch} {settling.phase} settling)"


def _wait(ledger: Ledger, info: EpochInfo, settling: EpochInfo | None, target: int, wait_timeout: float,
          progress: Callable[[str], None]) -> None:
    owner = settling if settling is not None and settling.phase_deadline == target else info  # whose deadline
    progress(f"epoch {owner.epoch} {owner.phase}: waiting for height {target} (now {ledger.height()})")
    reached = ledger.wait_for_height(target, timeout=wait_timeout)
    if reached < target:
        raise CommandError(f"the chain is at height {reached}, not {target}, after "
                           f"{wait_timeout:.0f} s: is it producing blocks?")
