"""``epoch advance --until``'s decisions, from the epochs in flight and the height (the pure part of
:mod:`veriloco.advance_until`; the CLI tests drive real runs)."""

from __future__ import annotations

from protocol.views import EpochInfo
from veriloco.advance_until import after_held, next_deadline, next_move, waiting_for_output

ZERO = "00" * 32


def epoch(number: int, phase: str, deadline: int, *, closing: str | None = None,
          settling: int | None = None) -> EpochInfo:
    return EpochInfo(epoch=number, phase=phase, phase_deadline=deadline, started_at=0, model_hash=ZERO,
                     prev_seed=ZERO, closing=closing, settling=settling)


def test_a_synchronous_run_waits_for_its_deadline_then_advances() -> None:
    train = epoch(3, "train", 50)
    assert next_move(train, 40, until=5) == "wait" and next_deadline(train, 40) == 50
    assert next_move(train, 50, until=5) == "advance"
    assert next_move(train, 10, until=3) == "done"


def test_the_settling_epochs_deadline_counts_and_is_waited_for_first() -> None:
    """Epoch 4 trains until 200 while epoch 3 settles in verify until 120: the drive wakes at 120."""
    current, older = epoch(4, "train", 200, settling=3), epoch(3, "verify", 120)
    assert next_move(current, 100, 5, older) == "wait" and next_deadline(current, 100, older) == 120
    assert next_move(current, 120, 5, older) == "advance"


def test_a_held_phase_waits_for_the_older_epochs_next_deadline() -> None:
    """Epoch 4's reveal is past its deadline but held by epoch 3 (verify until 150): after the
    contract's "held" refusal the drive waits for 150, not for the next block over and over."""
    current, older = epoch(4, "reveal", 90, settling=3), epoch(3, "verify", 150)
    assert next_move(current, 100, 5, older) == "advance"  # tried: the contract decides what is held
    assert next_deadline(current, 100, older) == 150
    assert next_deadline(current, 160, epoch(3, "verify", 150)) == 161  # nothing ahead: the next block


def test_only_a_waiting_delay_stops_the_drive() -> None:
    delay = epoch(3, "delay", 60)
    assert waiting_for_output(delay, None, 70, delay_blocks=0) == 3
    assert waiting_for_output(delay, None, 70, delay_blocks=20) is None  # its window's deadline closes it
    assert waiting_for_output(epoch(3, "delay", 60, closing="assign"), None, 70, delay_blocks=0) is None
    # The older epoch waits in delay, but the newer one's train close is due: advance that first.
    current = epoch(4, "train", 65, settling=3)
    assert waiting_for_output(current, delay, 70, delay_blocks=0) is None
    assert waiting_for_output(epoch(4, "train", 90, settling=3), delay, 70, delay_blocks=0) == 3


def test_a_phase_held_by_an_epoch_in_delay_waits_for_the_output_until_its_deadline() -> None:
    """Epoch 4's reveal is held by epoch 3, in delay until 150: a validator's node may still post
    the output, so the drive waits for 150; past it, only the output moves epoch 3 (None: say so)."""
    current, older = epoch(4, "reveal", 90, settling=3), epoch(3, "delay", 150)
    assert after_held(current, older, 100, delay_blocks=0) == 150
    assert after_held(current, older, 150, delay_blocks=0) is None
    assert after_held(current, older, 150, delay_blocks=60) == 151  # its window closes it: keep going
    assert after_held(current, epoch(3, "verify", 150), 100, delay_blocks=0) == 150
