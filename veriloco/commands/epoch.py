"""``veriloco epoch list|show`` and ``veriloco report EPOCH``: what happened, from the contract."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from veriloco.commands.common import Home, Json, Network
from veriloco.connect import load_network, open_ledger
from veriloco.output import console, print_json, table
from veriloco.report import best_val_loss, plot_reports, report_tables

app = typer.Typer(help="Inspect epochs.", no_args_is_help=True)


@app.command("list")
def list_(network: Network = None, home: Home = None, json: Json = False,
          limit: Annotated[int | None, typer.Option(help="at most this many (default: all)")] = None) -> None:
    """Every epoch: phase, model hashes, participants."""
    with open_ledger(load_network(network, home)) as ledger:
        epochs = ledger.epochs(limit=limit)
    if json:
        print_json(epochs)
        return
    console.print(table("epochs", ["epoch", "phase", "hosts", "validators", "committed", "accepted",
                                   "θ_e", "θ_e+1", "agreed"],
                        [[e.epoch, e.phase, len(e.hosts), len(e.validators), len(e.committed), len(e.accepted),
                          e.model_hash[:12], (e.next_model_hash or "")[:12], e.agreed] for e in epochs]))


@app.command("show")
def show(epoch: Annotated[int | None, typer.Argument(help="epoch (default: the current one)")] = None,
         network: Network = None, home: Home = None, json: Json = False) -> None:
    """One epoch's state: phase, deadline, seeds, participants."""
    with open_ledger(load_network(network, home)) as ledger:
        info = ledger.epoch(epoch)
    if json:
        print_json(info)
        return
    console.print(f"[bold]epoch {info.epoch}[/] phase {info.phase} (deadline height {info.phase_deadline}, "
                  f"started at {info.started_at})\nθ_e {info.model_hash}\nθ_e+1 {info.next_model_hash or '—'} "
                  f"agreed {info.agreed}\nprevious seed {info.prev_seed}\nseed {info.seed or '—'}\n"
                  f"hosts {', '.join(info.hosts) or '—'}\nvalidators {', '.join(info.validators) or '—'}\n"
                  f"committed {len(info.committed)}, accepted {len(info.accepted)}")


def report(epoch: Annotated[int, typer.Argument(help="the epoch")],
           plot: Annotated[Path | None, typer.Option("--plot", help="also draw epochs 0..EPOCH to this PNG")] = None,
           network: Network = None, home: Home = None, json: Json = False) -> None:
    """Hosts, commitments, challenges, verdicts, slashes, rewards and losses of one epoch."""
    with open_ledger(load_network(network, home)) as ledger:
        result = ledger.report(epoch)
        history = [ledger.report(e) for e in range(epoch + 1)] if plot else []
        denom = ledger.denom
    if plot:
        plot_reports(history, plot)
    if json:
        print_json(result)
        return
    console.print(report_tables(result, denom))
    val = best_val_loss(result)
    if val is not None:
        console.print(f"validation loss of θ_e+1: {val:.4f} nats/byte")
    if plot:
        console.print(f"plot written to {plot}")
