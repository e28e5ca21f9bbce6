"""``veriloco epoch watch``: a live terminal view of a run (Rich Live): the current epoch, each
phase done, current or to come, the current phase's progress to its deadline, and the last epochs."""

from __future__ import annotations

import time
from typing import Annotated

import typer
from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from chain.block_clock import BlockClock
from protocol.views import EpochReport
from veriloco.commands import tx_flags
from veriloco.commands.common import Home, Network, key_names
from veriloco.connect import NetworkFile, load_network, open_ledger
from veriloco.output import console
from veriloco.phase_progress import PHASE_ORDER, PhaseProgress, phase_progress
from veriloco.report import summary_line


def watch_view(run: str, now: PhaseProgress, recent: list[EpochReport], names: dict[str, str]) -> RenderableType:
    """One frame: the phases of the current epoch as a row of steps, the current one's bar and
    countdown, and a line per recent epoch."""
    steps = Text()
    for i, phase in enumerate(PHASE_ORDER, start=1):
        if phase.startswith("dispute") and not now.phase.startswith("dispute"):
            continue
        if phase == "delay" and now.phase != "delay":  # only a run that delays its seed, while it waits
            continue
        style = "green" if i < now.step else "bold reverse blue" if i == now.step else "dim"
        steps.append(f" {'✓ ' if i < now.step else ''}{phase} ", style=style)
        steps.append(" ")
    when = f", ~{now.seconds_left:.0f} s" if now.seconds_left is not None else ""
    closing = f" (closing: {now.closing})" if now.closing else ""
    bar = Table.grid(padding=(0, 1))
    bar.add_row(ProgressBar(total=1.0, completed=now.fraction or 0.0, width=40),
                Text(f"{now.blocks_left} blocks to height {now.deadline}{when} (now {now.height})"))
    lines: list[RenderableType] = [Text(f"run {run} · epoch {now.epoch} · {now.phase}{closing}", style="bold"),
                                   steps, bar]
    lines += [Text(summary_line(r, names), style="dim", overflow="fold") for r in recent]
    return Group(*lines)


def _frame(net: NetworkFile, clock: BlockClock, names: dict[str, str], history: int,
           closed: dict[int, EpochReport] | None = None) -> tuple[RenderableType, PhaseProgress]:
    """One frame read from the chain; ``closed`` keeps the reports of closed epochs between frames
    (they never change: at 2,048 participants a report is some 65 queries)."""
    closed = {} if closed is None else closed
    with open_ledger(net) as ledger:
        spec, info, height = ledger.spec(), ledger.epoch(lists=False), ledger.height()
        if net.chain.backend == "cosmos":  # an embedded chain's blocks come with transactions, not time
            clock.observe(height)
        recent = [ledger.kept_report(e, closed) for e in range(max(0, info.epoch - history), info.epoch)]
    now = phase_progress(info, height, spec.phases, clock.seconds_per_block(), spec.verification.delay_blocks)
    return watch_view(spec.name, now, list(reversed(recent)), names), now


@tx_flags.reads
def watch(
    interval: Annotated[float, typer.Option(min=0.2, help="seconds between reads of the chain")] = 2.0,
    until: Annotated[int | None, typer.Option(help="stop once the run reaches this epoch")] = None,
    history: Annotated[int, typer.Option(min=0, help="closed epochs to show")] = 3,
    network: Network = None, home: Home = None,
) -> None:
    """Follow the run live: the current epoch's phases, the current one's progress and countdown,
    the last epochs' outcomes. Ctrl-C (or --until EPOCH) stops. Read-only."""
    from rich.live import Live  # noqa: PLC0415 (0.1 s of imports only this command needs)

    net = load_network(network, home)
    names = {**net.names, **key_names(home)}
    clock = BlockClock()
    closed: dict[int, EpochReport] = {}
    frame, now = _frame(net, clock, names, history, closed)
    with Live(frame, console=console, refresh_per_second=4, transient=False) as live:
        try:
            while until is None or now.epoch < until:
                time.sleep(interval)
                frame, now = _frame(net, clock, names, history, closed)
                live.update(frame)
        except KeyboardInterrupt:  # the usual way to stop watching: not an error
            pass
