"""``veriloco epoch list|show|advance|delayed-seed``, ``veriloco report EPOCH`` and ``veriloco
metrics``: what happened, from the contract; closing a phase whose deadline has passed, and
posting the delayed seed an epoch waits for."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from chain.ledger import ContractError
from protocol.views import EpochCounts
from veriloco.commands import tx_flags
from veriloco.commands.common import Home, Json, KeyName, Network, key_names, open_key
from veriloco.connect import load_network, open_ledger
from veriloco.errors import CommandError
from veriloco.metrics_files import EPOCHS_CSV, MEMBERS_CSV, MetricsWriter
from veriloco.output import console, err_console, print_json, table, tx_json
from veriloco.report import (
    agreement,
    best_val_loss,
    label,
    plot_reports,
    report_tables,
    unchanged_reason,
)

app = typer.Typer(help="Inspect epochs.", no_args_is_help=True)

# An epoch's address lists; `epoch list` prints their lengths (`EpochInfo.counts`), not them.
LISTS = ("hosts", "validators", "committed", "accepted")


@app.command("list")
@tx_flags.reads
def list_(network: Network = None, home: Home = None, json: Json = False,
          limit: Annotated[int | None, typer.Option(help="at most this many (default: all)")] = None) -> None:
    """Every epoch: phase, model hashes, how many participants (--json: the headers with their counts)."""
    with open_ledger(load_network(network, home)) as ledger:
        # Headers with their counts in pages: no query grows with the participants (the full
        # `epochs` page is past a node's query gas at 2,048 of them). Only an epoch without
        # counts (contract before 0.3.4, or exclusions settled by one) reads its paged report.
        epochs = [e if e.counts is not None
                  else e.model_copy(update={"counts": EpochCounts.of(ledger.epoch_paged(e.epoch))})
                  for e in ledger.epochs(limit=limit, lists=False, counts=True)]
    if json:
        print_json({"epochs": [e.model_dump(mode="json", exclude=set(LISTS)) for e in epochs]})
        return
    console.print(table("epochs", ["epoch", "phase", *LISTS, "θ_e", "θ_e+1", "θ_e+1 vote"],
                        [[e.epoch, e.phase, *(getattr(e.counts, name) for name in LISTS),
                          e.model_hash[:12], (e.next_model_hash or "")[:12],
                          agreement(e.agreed) if e.next_model_hash or e.agreed is not None else ""]
                         for e in epochs]))


@app.command("show")
@tx_flags.reads
def show(epoch: Annotated[int | None, typer.Argument(help="epoch (default: the current one)")] = None,
         network: Network = None, home: Home = None, json: Json = False) -> None:
    """One epoch's state: phase, deadline, seeds, participants (named when they are your keys)."""
    with open_ledger(load_network(network, home)) as ledger:
        info = ledger.epoch_paged(epoch)
    names = key_names(home)
    if json:
        print_json({"epoch": info, "names": {a: n for a, n in names.items() if a in {*info.hosts, *info.validators}}})
        return

    def members(addresses: list[str]) -> str:
        return ", ".join(label(a, names) for a in addresses) or "—"

    console.print(f"[bold]epoch {info.epoch}[/] phase {info.phase} (deadline height {info.phase_deadline}, "
                  f"started at {info.started_at})\nθ_e   {info.model_hash}\nθ_e+1 {info.next_model_hash or '—'} "
                  f"({agreement(info.agreed)})\nprevious seed {info.prev_seed}\nseed {info.seed or '—'}\n"
                  f"hosts {members(info.hosts)}\nvalidators {members(info.validators)}\n"
                  f"committed {len(info.committed)}, accepted {len(info.accepted)}"
                  + (f"\nclosing page by page: stage {info.closing} (send advance)" if info.closing else ""),
                  highlight=False)


@app.command("advance")
@tx_flags.sends
def advance(key: KeyName = "operator",
            until: Annotated[int | None, typer.Option(
                "--until", min=0, help="keep advancing, waiting for each deadline, until the run is in epoch "
                                       "UNTIL (e.g. the epoch an unbonding is released)")] = None,
            wait: Annotated[float, typer.Option(
                "--wait", min=1, help="with --until: seconds to wait for the chain to reach one deadline")] = 600,
            network: Network = None, home: Home = None, json: Json = False) -> None:
    """Close the current phase if its deadline has passed (any account may; nodes do it too); a
    close that runs page by page (closing reveal, a verdict round, finalize) is run to its end.
    With --until N: close phase after phase, waiting for their deadlines, until epoch N."""
    signer = open_key(key, home)
    with open_ledger(load_network(network, home), save=True) as ledger:
        before = ledger.epoch(lists=False)
        if until is not None:
            from veriloco.advance_until import advance_until  # noqa: PLC0415 (only --until needs it)

            drive = advance_until(ledger, signer, until, wait_timeout=wait,
                                  progress=lambda text: err_console.print(f"advance: {text}", highlight=False))
            txs = drive.txs
        else:
            try:
                txs = [ledger.advance(signer)]
                txs += ledger.settle(signer)
            except ContractError as exc:
                raise CommandError(str(exc)) from None
        after = ledger.epoch(lists=False)
    if json:
        print_json({"tx": tx_json(txs[0]) if txs else None, "pages": [tx_json(p) for p in txs[1:]],
                    "before": before, "after": after, "key": key})
        return
    if not txs:
        console.print(f"nothing to do: the run is in epoch {after.epoch} ({after.phase})")
        return
    more = f" and {len(txs) - 1} more transaction(s)" if len(txs) > 1 else ""
    console.print(f"advanced at height {txs[0].height}{more} (last at {txs[-1].height}): epoch {before.epoch} "
                  f"{before.phase} → epoch {after.epoch} {after.phase} (deadline height {after.phase_deadline})")


@app.command("delayed-seed")
@tx_flags.sends
def delayed_seed(epoch: Annotated[int | None, typer.Argument(
                     help="the epoch in phase delay (default: the current one, or the one settling)")] = None,
                 key: KeyName = "operator", network: Network = None, home: Home = None, json: Json = False) -> None:
    """Evaluate the VDF over an epoch's seed and post its output (phase delay of a run with
    verification.delay_squarings; any account may, validators' nodes do it too). On one core it
    takes about 11 us per squaring with CPython here, the evaluation and its proof together."""
    from node.delayed_seed import delayed_seed_output  # noqa: PLC0415 (only this command evaluates)

    signer = open_key(key, home)
    settings = load_network(network, home)
    with open_ledger(settings) as ledger:  # read, then let go of the chain while evaluating
        squarings = ledger.spec().verification.delay_squarings
        if squarings == 0:
            raise CommandError("this run does not delay its seed (verification.delay_squarings is 0)")
        if epoch is None:
            current = ledger.epoch(lists=False)
            epoch = current.settling if current.phase != "delay" and current.settling is not None else current.epoch
        info = ledger.epoch(epoch, lists=False)
    if info.phase != "delay" or info.seed is None or info.delayed_seed is not None:
        raise CommandError(f"epoch {epoch} is in phase {info.phase}, not waiting in delay: nothing to post")
    err_console.print(f"delayed-seed: {squarings:,} squarings over epoch {epoch}'s seed, then the proof",
                      highlight=False)
    output = delayed_seed_output(epoch, bytes.fromhex(info.seed), squarings)
    with open_ledger(settings, save=True) as ledger:
        try:
            tx = ledger.delayed_seed(signer, output)
        except ContractError as exc:
            raise CommandError(str(exc)) from None
        after = ledger.epoch(epoch, lists=False)
    if json:
        print_json({"tx": tx_json(tx), "epoch": after, "key": key})
        return
    console.print(f"posted at height {tx.height}: epoch {epoch} delayed seed {after.delayed_seed}, now in phase "
                  f"{after.phase}", highlight=False)


@tx_flags.reads
def report(epoch: Annotated[int, typer.Argument(help="the epoch")],
           plot: Annotated[Path | None, typer.Option("--plot", help="also draw epochs 0..EPOCH to this PNG")] = None,
           network: Network = None, home: Home = None, json: Json = False) -> None:
    """Hosts, commitments, challenges, verdicts, slashes, rewards and losses of one epoch."""
    with open_ledger(load_network(network, home)) as ledger:
        current = ledger.epoch(lists=False).epoch
        if epoch > current:
            raise CommandError(f"epoch {epoch} has not started: the run is in epoch {current}")
        result = ledger.report(epoch)
        history = [ledger.report(e) for e in range(epoch + 1)] if plot else []
        denom = ledger.denom
        phases = ledger.spec().phases
    names = key_names(home)
    if plot:
        plot_reports(history, plot, names)
        err_console.print(f"plot written to {plot}", highlight=False)
    if json:
        members = {h.address for h in result.hosts} | {v.address for v in result.validators}
        print_json({"report": result, "denom": denom, "unchanged_reason": unchanged_reason(result, phases),
                    "names": {a: n for a, n in names.items() if a in members}})
        return
    console.print(report_tables(result, denom, names, phases))
    val = best_val_loss(result)
    if val is not None:
        console.print(f"validation loss of θ_{epoch + 1} (θ_e+1): {val:.4f} nats/byte", highlight=False)


@tx_flags.reads
def metrics(
    out: Annotated[Path, typer.Argument(help="folder to write epochs.csv and members.csv to")],
    tensorboard: Annotated[bool, typer.Option(
        "--tensorboard", help="also write TensorBoard event files to OUT/tensorboard")] = False,
    network: Network = None, home: Home = None, json: Json = False,
) -> None:
    """Export every epoch's metrics: CSV (one row per epoch, one per member and epoch), optionally TensorBoard.

    Amounts are in base units; val_loss_next of epoch e is the validation loss of θ_{e+1}. The CSV
    files are written afresh; daemons and simulate write the same files live (--metrics).
    """
    with open_ledger(load_network(network, home)) as ledger:
        reports = [ledger.report(e.epoch) for e in ledger.epochs(lists=False)]
        denom = ledger.denom
    for name in (EPOCHS_CSV, MEMBERS_CSV):
        (out / name).unlink(missing_ok=True)
    writer = MetricsWriter(out, denom, key_names(home), tensorboard=tensorboard)
    epochs, members = writer.write(reports)
    files = writer.files
    if json:
        print_json({"files": [str(f) for f in files], "epochs": len(epochs), "rows": len(members)})
    else:
        console.print(f"{len(epochs)} epochs, {len(members)} member rows → " + ", ".join(str(f) for f in files),
                      highlight=False)
