"""``veriloco simulate``: a whole network on one machine, epoch after epoch, with a report at the end.

By default: the ``demo`` model, 4 honest hosts, 1 cheating host (``noise``: it commits a random Δ),
2 honest validators, 3 epochs, on the embedded chain, pipelined (``phases.pipelined``: epoch
e + 1 trains from the optimistic start while e settles; each epoch's line says which epoch trained
while it settled; ``--synchronous``: each epoch settles before the next starts, for comparison).
``--adversary`` picks what the cheaters do
(the host catalogue, ``selective_serve``, ``selective_reveal`` and ``slow_drip`` included), ``--liars`` and
``--liar`` add lying validators (``always_pass``, ``always_fail``, ``silent``, ``copycat``, and issue 27's
coalitions: ``colluder``, ``sybil``, ``withholder``, ``trap_reader``, ``dispute_copier``,
``unavailable``, and issue 28's ``gain_copier`` and ``gain_liar``; colluders, sybils and withholders
shield the cheating hosts, their coalition), and
``--auditors`` adds auditor hosts: honest hosts that set a trap in half their epochs (every honest
host already traps with the spec's ``verification.trap_probability``, 0.2 by default), which
catches validators that pass without replaying. Each
epoch prints as it happens; the run ends with the last epoch's report, the validation loss per
epoch, who was slashed, and the funds audit.
Each epoch is one summary line (``-v``: also what stands out; ``-vv``: every event), and its
metrics are appended as it closes (CSV and TensorBoard, ``--metrics``). The work folder (a
temporary one unless ``--workdir``) is removed at the end unless ``--keep``; a kept one holds the
chain state and a network file, so ``veriloco report EPOCH --network WORKDIR/network.json`` works
afterwards.

Progress (each epoch's line, failed verdicts, the bar) goes to stderr; the result (the last
report, the losses, the slashes, the funds audit) to stdout, or with ``--json`` one JSON object.
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from protocol.coins import display
from protocol.rules.spec import AggregationRule, RunSpec
from trainer.presets import PRESETS, preset
from veriloco.commands.common import Device, FullLeafEvery, KeepEpochs, LiveLeafEvery, check_device, live_leaves
from veriloco.connect import ChainSettings, NetworkFile
from veriloco.errors import CommandError
from veriloco.output import console, err_console, print_json
from veriloco.report import best_val_loss, plot_reports, report_tables, slashed_over_run, summary_line

if TYPE_CHECKING:
    from node.events import NodeEvent
    from veriloco.network import LocalNetwork

def simulate(
    hosts: Annotated[int, typer.Option(help="honest hosts")] = 4,
    cheaters: Annotated[int, typer.Option(help="cheating hosts")] = 1,
    adversary: Annotated[str, typer.Option(help="what the cheaters do, e.g. noise, lazy:0.5, withhold, "
                                                "sign_flip, selective_serve, selective_reveal, slow_drip")] = "noise",
    auditors: Annotated[int, typer.Option(help="auditor hosts: honest hosts that trap in half their epochs "
                                               "(every honest host traps with the spec's trap_probability)")] = 0,
    validators: Annotated[int, typer.Option(help="honest validators")] = 2,
    liars: Annotated[int, typer.Option(help="validators that lie")] = 0,
    liar: Annotated[str, typer.Option(help="what lying validators do: always_pass, always_fail, silent, copycat; "
                                           "a coalition with the cheaters: colluder (fails everyone else, passes "
                                           "the cheaters), sybil (colluders of minimum stake that join first), "
                                           "withholder (withholds its reveal when its picks hit the cheaters' "
                                           "fakes); trap_reader (replays only recent trappers), dispute_copier "
                                           "(guesses in the final round), unavailable (objects unavailable on "
                                           "every seat), gain_copier (copies the most common opened probe "
                                           "gain in a gain dispute), gain_liar (opens a false probe gain in "
                                           "round 0, re-votes honestly)")] = "always_fail",
    epochs: Annotated[int, typer.Option(help="epochs to run")] = 3,
    preset_name: Annotated[str, typer.Option("--preset",
                                             help=f"model and run parameters: {', '.join(PRESETS)}")] = "demo",
    rule: Annotated[str | None, typer.Option(help="aggregation rule (default: the preset's)")] = None,
    chain: Annotated[str, typer.Option(help="embedded (in-process wasmtime) or devnet (a real injectived "
                                            "node)")] = "embedded",
    workdir: Annotated[Path | None, typer.Option(help="work here and keep it (default: a temporary folder, "
                                                      "removed at the end unless --keep)")] = None,
    keep: Annotated[bool, typer.Option("--keep", help="keep the temporary work folder (chain state, network "
                                                      "file, metrics, every node's files) for report, metrics, "
                                                      "model export")] = False,
    plot: Annotated[Path | None, typer.Option(help="draw the loss curve and host outcomes to this PNG")] = None,
    device: Device = "cpu",
    full_leaf_every: FullLeafEvery = 4,
    live_leaf_every: LiveLeafEvery = "auto",
    keep_epochs: KeepEpochs = None,
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads (default: torch's choice)")] = None,
    json: Annotated[bool, typer.Option("--json", help="print the result as one JSON object (progress stays on "
                                                      "stderr)")] = False,
    metrics: Annotated[Path | None, typer.Option(
        help="write each epoch's metrics as it closes here: CSV and TensorBoard events (default: "
             "WORKDIR/metrics)")] = None,
    pipelined: Annotated[bool, typer.Option(
        "--pipelined/--synchronous",
        help="pipelined epochs (phases.pipelined): epoch e + 1 trains from the optimistic start while "
             "e is verified and settled (the default); --synchronous: each epoch settles before the next "
             "starts")] = True,
    delay_squarings: Annotated[int, typer.Option(
        min=0, max=1 << 40,
        help="the delayed seed (verification.delay_squarings): > 0, a VDF of this many squarings over each "
             "epoch's seed picks every host's challenges, the same for all its pickers (phase delay); 0: "
             "each picker's own secret picks (the default)")] = 0,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True,
                                         help="-v: what stands out (refusals, failed verdicts, waits, what "
                                              "adversaries do); -vv: every event")] = 0,
) -> None:
    """Run a whole veriloco network on this machine: stake, train, verify, slash, aggregate, agree."""
    from trainer.data import Dataset  # noqa: PLC0415 (torch loads only when a simulation runs)
    from trainer.determinism import configure  # noqa: PLC0415 (as above)
    from veriloco.behaviours import host_behaviour, validator_behaviour  # noqa: PLC0415 (as above)
    from veriloco.network import (  # noqa: PLC0415 (as above)
        DevnetChainFactory,
        EmbeddedChainFactory,
        LocalNetwork,
        Roster,
    )

    if hosts + cheaters + auditors < 1 or epochs < 1:
        raise CommandError("need at least one host and one epoch")
    if min(hosts, cheaters, auditors, validators, liars) < 0:
        raise CommandError("counts of participants cannot be negative")
    check_device(device)
    live_every = live_leaves(live_leaf_every, full_leaf_every)
    configure(threads, device)
    if chain not in ("embedded", "devnet"):
        raise CommandError(f"--chain must be embedded or devnet, not {chain!r}")
    try:
        spec = preset(preset_name)
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    if rule:
        if rule not in AggregationRule.__args__:  # type: ignore[attr-defined]
            raise CommandError(f"unknown rule {rule!r} (known: {', '.join(AggregationRule.__args__)})")  # type: ignore[attr-defined]
        spec = spec.with_changes(aggregation={"rule": rule})
    spec = simulation_spec(spec, validators=validators + liars, hosts=hosts + cheaters + auditors)
    spec = spec.with_changes(phases={"pipelined": pipelined})
    if delay_squarings:
        spec = spec.with_changes(verification={"delay_squarings": delay_squarings})
    if liar == "sybil" and liars:  # the sybils outnumber the seats the honest validators leave
        spec = spec.with_changes(phases={"max_validators": validators + max(1, liars // 2)})
    honest_validators = [validator_behaviour("honest") for _ in range(validators)]
    roster = Roster(hosts=[host_behaviour(None) for _ in range(hosts)] +
                    [host_behaviour(adversary) for _ in range(cheaters)] +
                    [host_behaviour("auditor:1,0.5") for _ in range(auditors)],
                    validators=honest_validators + [validator_behaviour(liar) for _ in range(liars)])
    if workdir and workdir.exists() and any(workdir.iterdir()):
        raise CommandError(f"{workdir} is not empty; simulations start from scratch")
    root = workdir or Path(tempfile.mkdtemp(prefix="veriloco-sim-"))
    root.mkdir(parents=True, exist_ok=True)
    kept = keep or workdir is not None
    metrics_dir = metrics or root / "metrics"

    factory = EmbeddedChainFactory() if chain == "embedded" else DevnetChainFactory(root / "devnet")
    counts: dict[tuple[int, str], int] = {}  # (epoch, action) -> events; a node may act on e+1 before e is reported
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                        TimeElapsedColumn(), console=err_console, transient=True)

    names: dict[str, str] = {}  # address -> participant name, once the network exists

    def on_event(event: NodeEvent) -> None:
        if verbose >= 2 or (verbose and event.notable):  # otherwise counted, in the epoch's summary line
            detail = event.detail
            for address, name in names.items():  # events shorten addresses to 12 characters and "…"
                detail = detail.replace(f"{address[:12]}…", name)
            progress.console.print(f"  [dim]epoch {event.epoch}[/] {event.who}: {event.action} {detail}",
                                   highlight=False)
        else:
            counts[event.epoch, event.action] = counts.get((event.epoch, event.action), 0) + 1

    if not verbose:  # a failed replay is already an event line; the verifier's own log would repeat it
        logging.getLogger("veriloco.verifier").setLevel(logging.ERROR)
    mode = "pipelined (epoch e + 1 trains while e settles)" if pipelined else "synchronous"
    err_console.print(f"[bold]veriloco simulate[/]: {hosts} honest + {cheaters} {adversary} hosts"
                      f"{f' + {auditors} auditors' if auditors else ''}, {validators} "
                      f"validators{f' + {liars} {liar}' if liars else ''}, {epochs} epochs of {spec.name} "
                      f"(H={spec.train.inner_steps}, S={spec.train.segments}, rule {spec.aggregation.rule}) "
                      f"on the {chain} chain, {mode}"
                      f"{f', challenges from a VDF of {delay_squarings:,} squarings' if delay_squarings else ''}; "
                      f"work in {root}{'' if kept else ' (removed at the end; --keep keeps it)'}")
    err_console.print(f"live metrics: {metrics_dir} (tensorboard --logdir {metrics_dir / 'tensorboard'})",
                      highlight=False)
    started = time.monotonic()
    dataset = Dataset.load(spec.data)
    try:
        from veriloco.metrics_files import MetricsWriter  # noqa: PLC0415 (loaded by simulate)

        net = LocalNetwork(spec, root, roster, dataset, on_event=on_event, chain=factory, device=device,
                           full_leaf_every=full_leaf_every, keep_epochs=keep_epochs, live_leaf_every=live_every)
        names.update(net.names)
        live = MetricsWriter(metrics_dir, spec.economics.denom, net.names)
        arm_coalition(net, cheaters)
        _save(net, factory, root, spec)  # `veriloco dashboard --network ROOT/network.json` follows the run
        reports = []
        with progress:
            task = progress.add_task("epochs", total=epochs)
            for _ in range(epochs):
                report = net.run_epoch()
                reports.append(report)
                live.write([report])
                _save(net, factory, root, spec)
                progress.advance(task)
                quiet = sorted((k, v) for (e, k), v in counts.items() if e == report.epoch)
                overlap = net.overlaps.get(report.epoch)
                during = (f" — settled while epoch {overlap[0]} trained from its optimistic start "
                          f"(epoch {overlap[0]} now in its {overlap[1]} phase)" if overlap is not None else "")
                progress.console.print(f"[bold]{summary_line(report, net.names)}[/]{during}  "
                                       f"[dim]({', '.join(f'{v} {k}' for k, v in quiet)})[/]", highlight=False)
        conserved = net.total_funds() == net.initial_funds
    finally:
        if isinstance(factory, DevnetChainFactory):
            factory.stop()
        if not kept:
            shutil.rmtree(root, ignore_errors=True)
    elapsed = time.monotonic() - started
    losses = [best_val_loss(r) for r in reports]
    if plot:
        plot_reports(reports, plot, net.names)
        err_console.print(f"plot written to {plot}", highlight=False)
    if json:
        print_json({"reports": reports, "names": net.names, "denom": spec.economics.denom,
                    "val_loss_next": losses, "funds_conserved": conserved,
                    "pipelined": pipelined,
                    # settled epoch -> the epoch that trained from its optimistic start meanwhile
                    "trained_while_settling": {str(e): n for e, (n, _) in net.overlaps.items()},
                    "funds": str(net.initial_funds),
                    "network_file": str(root / "network.json") if kept else None,
                    "metrics": str(metrics_dir) if kept or metrics else None,
                    "elapsed_s": round(elapsed, 1)})
        if not conserved:
            raise CommandError("funds were not conserved: this is a bug, please report it")
        return
    console.print(report_tables(reports[-1], spec.economics.denom, net.names))
    console.print("validation loss of the agreed model θ_1 … θ_" + str(len(reports)) + ": "
                  + " → ".join("—" if v is None else f"{v:.4f}" for v in losses), highlight=False)
    console.print(f"slashed over the run: {slashed_over_run(reports, spec.economics.denom, net.names)}")
    denom = spec.economics.denom
    console.print(f"funds conserved: {'yes' if conserved else '[red]NO[/]'} ({display(net.initial_funds, denom)} = "
                  f"{net.initial_funds}{denom} before and after, fees included)", highlight=False)
    if kept:
        console.print(f"finished in {elapsed:.0f} s; inspect with: veriloco report {len(reports) - 1} "
                      f"--network {root / 'network.json'}", highlight=False)
    else:
        console.print(f"finished in {elapsed:.0f} s (work folder removed; --keep keeps it for report, metrics "
                      "and model export)", highlight=False)
    if not conserved:
        raise CommandError("funds were not conserved: this is a bug, please report it")


def arm_coalition(net: LocalNetwork, cheaters: int) -> None:
    """Issue 27's coalitions: every ``colluder``/``sybil``/``withholder`` validator knows the cheating
    hosts (the roster's hosts after the honest ones, before the auditors: ``cheaters`` of them
    counted from the first non-honest host) as its coalition, a withholder also their behaviours
    (whose faked segments it reads); a ``sybil`` keeps only the spec's minimum validator stake
    bonded (the rest unbonds), so that the sybils are the smallest seats."""
    from verifier.adversaries.validators import Colluder, SybilSeatGrabber, SybilWithholder  # noqa: PLC0415

    bad = [n for n in net.hosts if n.behaviour.name not in ("honest", "auditor")][:cheaters]
    coalition = {n.address for n in bad}
    minimum = int(net.spec.economics.min_validator_stake)
    for node in net.validators:
        behaviour = getattr(node, "behaviour", None)
        if isinstance(behaviour, Colluder):
            behaviour.coalition = set(coalition)
        if isinstance(behaviour, SybilWithholder):
            behaviour.fakers = {n.address: n.behaviour for n in bad}
        if isinstance(behaviour, SybilSeatGrabber):
            member = net.ledger.member(node.address)
            if member is not None and int(member.bonded) > minimum:
                net.ledger.unbond(node.key, int(member.bonded) - minimum)


def simulation_spec(spec: RunSpec, *, validators: int, hosts: int = 1, block_txs: int | None = None) -> RunSpec:
    """The run spec of a simulation: the preset's, with minimums every epoch can meet and phase
    windows sized to its participants.

    The join phase closes early once every *eligible* member joined, so the minimums need not
    count everyone; they must not count the cheaters, whose stake falls below the minimum after
    a slash or two (a minimum they cannot meet would extend the join phase forever).

    Each round of the simulation's nodes is one block of at most ``block_txs`` transactions, so a
    phase must last at least as many blocks as its messages fill, with room to spare: each window
    is the preset's or, when longer, ``2 × ceil(messages / block_txs) + 4`` blocks, where a
    phase's messages are one per member (join, reveal), per host (train, propose) or per verdict
    of the round (verify, verdict_reveal: ``hosts × (k + 1) × P``, ``P`` a host's pickers, at most
    ``min(V, seats_cap)`` whatever the stakes; a dispute round adds a vote per validator).

    Args:
        spec: the preset's run spec.
        validators: validators in the simulation (honest and lying); none turns verification off.
        hosts: hosts in the simulation (honest, cheating, auditors).
        block_txs: transactions per block (``veriloco.network.SIM_BLOCK_TXS`` by default).
    """
    if block_txs is None:
        from veriloco.network import SIM_BLOCK_TXS  # noqa: PLC0415 (torch loads only when a simulation runs)

        block_txs = SIM_BLOCK_TXS
    ver = spec.verification
    pickers = min(max(validators, 1), ver.seats_cap)  # the most a host's committee can hold
    verdicts = hosts * (ver.challenges_k + 1) * pickers

    def window(preset: int, messages: int) -> int:
        return max(preset, 2 * math.ceil(messages / block_txs) + 4)

    ph = spec.phases
    members = hosts + validators
    phases = {"min_hosts": 1, "min_validators": min(1, validators),
              "max_hosts": max(ph.max_hosts, hosts), "max_validators": max(ph.max_validators, validators),
              "join_blocks": window(ph.join_blocks, members), "train_blocks": window(ph.train_blocks, hosts),
              "reveal_blocks": window(ph.reveal_blocks, members),
              "verify_blocks": window(ph.verify_blocks, verdicts),
              "verdict_reveal_blocks": window(ph.verdict_reveal_blocks, verdicts + hosts),
              "propose_blocks": window(ph.propose_blocks, hosts)}
    return spec.with_changes(phases=phases, verification={"enabled": validators > 0})


def _save(net: LocalNetwork, factory: object, root: Path, spec: RunSpec) -> None:
    """Write the chain state and a network file (atomically), at the start and after every epoch, so
    the dashboard follows the run and the report commands read it afterwards."""
    from veriloco.network import DevnetChainFactory, EmbeddedChainFactory  # noqa: PLC0415 (loaded by simulate)

    if isinstance(factory, EmbeddedChainFactory) and factory.chain is not None:
        state = root / "chain.json"
        factory.chain.save(state)
        settings = ChainSettings(backend="embedded", state=str(state))
    elif isinstance(factory, DevnetChainFactory) and factory.devnet is not None:
        # The devnet stops with the simulation; its data stays in the workdir (`veriloco devnet start`).
        node = factory.devnet
        settings = ChainSettings(backend="cosmos", grpc=node.grpc_url, rpc=node.rpc_url, chain_id=node.chain_id)
    else:
        return
    NetworkFile(chain=settings, contract=net.ledger.contract_address, run_id=spec.run_id().hex(),
                names=net.names).save(root / "network.json")
