"""``veriloco standby run``: reveal a participant's beacon secret when its primary machine is down
(``node/standby.py``; the design and what sharing the key costs: docs/contract.md, "A standby
revealer")."""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer

from protocol.keys import is_address
from veriloco.commands import tx_flags
from veriloco.commands.common import Home, KeyName, Network, open_key
from veriloco.commands.member import check_listen, configure_logging
from veriloco.connect import be_brief, be_patient, load_network, open_ledger
from veriloco.errors import CommandError
from veriloco.output import err_console

app = typer.Typer(help="a second machine that reveals a participant's beacon secret for a dead primary",
                  no_args_is_help=True)


def check_journal(journal: Path, listening: bool = False) -> None:
    if listening and not journal.exists():  # its own folder: the primary hands it the secrets
        try:
            journal.mkdir(parents=True)
        except OSError as exc:
            raise CommandError(f"--journal {journal}: cannot create it: {exc.strerror or exc}") from None
    if not journal.is_dir():
        raise CommandError(f"--journal {journal} is not a folder: give the copy of the primary's journal "
                           "(<workdir>/<run id>/node/<address> on the primary)")


@app.command("run")
def run(journal: Annotated[Path, typer.Option(
            help="where the standby keeps each beacon secret (epoch-NNNNNN.json): with --listen its own folder, "
                 "which the primary fills over HTTP; without, a copy of the primary's journal folder "
                 "(<workdir>/<run id>/node/<address>) kept current by a shared or synced folder")],
        listen: Annotated[str | None, typer.Option(
            help="host:port where the primary hands over each epoch's secret (sealed to this standby's key, "
                 "signed by the member: `host run --standby-url … --standby-pubkey …`)")] = None,
        key: KeyName = "host",
        for_: Annotated[str | None, typer.Option(
            "--for", help="the participant's address, when --key is the standby's own key that the "
                          "participant named (`veriloco host set-standby`); without it --key is the "
                          "participant's own")] = None,
        grace: Annotated[float, typer.Option(
            help="the share of the reveal window left to the primary before the standby reveals")] = 0.5,
        poll: Annotated[float, typer.Option(min=0.05, help="seconds between chain polls")] = 2.0,
        epochs: Annotated[int | None, typer.Option(min=0, help="stop when the run reaches this epoch")] = None,
        verbose: Annotated[bool, typer.Option("--verbose", "-v", help="debug logs")] = False,
        network: Network = None, home: Home = None) -> None:
    """Watch the chain and reveal the participant's beacon secret where its primary has not, once
    --grace of the reveal window has passed (restart-safe: a reveal already on chain is done)."""
    configure_logging(verbose)
    from node.standby import Standby, check_grace  # noqa: PLC0415 (the node package loads only for the daemon)

    try:
        check_grace(grace)  # before the chain is asked
    except ValueError as exc:
        raise CommandError(f"--grace {grace}: {exc}") from None
    if listen is not None:
        check_listen(listen)  # before the chain is asked
    check_journal(journal, listening=listen is not None)
    net = load_network(network, home)
    if net.chain.backend != "cosmos":
        raise CommandError("a standby needs a real chain (a cosmos network)")
    signer = open_key(key, home)

    with contextlib.ExitStack() as stack:
        ledger = stack.enter_context(open_ledger(net))
        if for_ is not None and not is_address(for_, ledger.prefix):
            raise CommandError(f"--for {for_!r} is not an address of this chain ({ledger.prefix}1…)")
        address = for_ if for_ is not None else signer.address(ledger.prefix)
        if ledger.member(address) is None:
            raise CommandError(f"{address} is not a member of this run: a standby reveals for a member")
        be_patient(ledger)
        spec = ledger.spec()
        standby = Standby(ledger, signer, spec, journal, grace, participant=for_, name=key)
        server = None
        if listen is not None:
            from node.standby_handover import CHAIN_WAIT_S, create_standby_app, standby_server  # noqa: PLC0415

            # The server reads the chain on a client of its own with short timeouts, not the
            # reveal loop's patient one: a slow node then costs a hand-over a quick 503 (retried
            # by the primary), never a server worker held for a minute or the reveal loop's channel.
            reads = stack.enter_context(open_ledger(net))
            be_brief(reads, CHAIN_WAIT_S)
            app = create_standby_app(signer, address, spec.run_id().hex(), journal,
                                     lambda: reads.participant(address).epoch, ledger.prefix)
            server = standby_server(app, listen)
            err_console.print(f"standby {key}: receiving {address}'s sealed secrets on {server.url}; its primary "
                              f"runs with --standby-url <this machine's URL> --standby-pubkey "
                              f"{signer.public_key.hex()}", highlight=False)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        err_console.print(f"standby {key}: revealing for {address} from {journal} after {grace:.0%} of "
                          "each reveal window", highlight=False)
        try:
            while not stop.is_set():
                standby.tick()
                if epochs is not None and ledger.epoch(lists=False).epoch >= epochs:
                    break
                stop.wait(poll)
        finally:
            if server is not None:
                server.stop()


tx_flags.on_group(app)  # --node, --gas, … after the command
