"""``veriloco host …`` and ``veriloco validator …``: stake, run the daemon, unbond, claim, status.

Both roles share their one-shot commands; only ``run`` differs (a host trains and serves, a
validator replays). :func:`make_app` builds the group for a role.
"""


import logging
from pathlib import Path
from typing import Annotated

import typer

from node.daemon import Daemon, host_daemon
from node.participant import Participant
from protocol.messages import Role
from trainer.determinism import configure
from veriloco.behaviours import host_behaviour, validator_node
from veriloco.commands.common import Home, Json, KeyName, Network, open_key, parse_amount
from veriloco.connect import load_network, open_ledger
from veriloco.errors import CommandError
from veriloco.home import home_dir
from veriloco.keystore import Keystore
from veriloco.output import console, print_json, table
from veriloco.report import amount

Adversary = Annotated[str | None, typer.Option(
    "--adversary", help="misbehave on purpose, for tests and demos (see `veriloco simulate --help`)", hidden=True)]


def make_app(role: Role) -> typer.Typer:
    """The command group of ``role``."""
    app = typer.Typer(help=f"Take part in a run as a {role}.", no_args_is_help=True)

    @app.command("bond")
    def bond(stake: Annotated[str, typer.Argument(help="amount, e.g. 20INJ or base units")],
             endpoint: Annotated[str, typer.Option(help="URL where peers reach this participant's artifact server")]
             = "http://127.0.0.1:8101",
             key: KeyName = role, network: Network = None, home: Home = None) -> None:
        """Stake (or add stake) as a participant of the run."""
        participant = open_key(key, home)
        with open_ledger(load_network(network, home), save=True) as ledger:
            result = ledger.bond(participant, role, endpoint, parse_amount(stake, ledger.denom))
            member = ledger.member(participant.address(ledger.prefix))
        assert member is not None
        console.print(f"bonded {amount(member.bonded, ledger.denom)} as {role} at height {result.height}")

    @app.command("unbond")
    def unbond(stake: Annotated[str, typer.Argument(help="amount to unbond")], key: KeyName = role,
               network: Network = None, home: Home = None) -> None:
        """Start unbonding stake (it stays slashable until it can be claimed)."""
        participant = open_key(key, home)
        with open_ledger(load_network(network, home), save=True) as ledger:
            ledger.unbond(participant, parse_amount(stake, ledger.denom))
            member = ledger.member(participant.address(ledger.prefix))
        assert member is not None
        for entry in member.unbonding:
            console.print(f"unbonding {amount(entry.amount, ledger.denom)}, claimable from epoch {entry.release_epoch}")

    @app.command("claim")
    def claim(key: KeyName = role, network: Network = None, home: Home = None) -> None:
        """Withdraw unbonded stake whose unbonding period is over."""
        participant = open_key(key, home)
        with open_ledger(load_network(network, home), save=True) as ledger:
            before = ledger.balance(participant.address(ledger.prefix))
            result = ledger.claim(participant)
            paid = ledger.balance(participant.address(ledger.prefix)) - before + result.fee
        console.print(f"claimed {amount(paid, ledger.denom)}")

    @app.command("status")
    def status(address: Annotated[str | None, typer.Argument(help="address (default: the key's)")] = None,
               key: KeyName = role, network: Network = None, home: Home = None, json: Json = False) -> None:
        """Stake, unbonding entries, lifetime slashes and rewards, and the current epoch's view of it."""
        with open_ledger(load_network(network, home)) as ledger:
            who = address or Keystore.in_home(home_dir(home)).entry(key).public_key.address(ledger.prefix)
            member, info = ledger.member(who), ledger.epoch()
            denom = ledger.denom
        if member is None:
            raise CommandError(f"{who} is not a member of this run (bond first: veriloco {role} bond)")
        joined = who in (info.hosts if role == "host" else info.validators)
        state = {"member": member, "epoch": info.epoch, "phase": info.phase, "joined": joined,
                 "committed": who in info.committed, "accepted": who in info.accepted}
        if json:
            print_json(state)
            return
        console.print(table(f"{role} {who}", ["bonded", "unbonding", "slashed", "rewarded", "endpoint",
                                              "epoch", "phase", "joined", "committed", "accepted"],
                            [[amount(member.bonded, denom),
                              ", ".join(f"{amount(u.amount, denom)}@{u.release_epoch}" for u in member.unbonding),
                              amount(member.slashed_total, denom), amount(member.rewarded_total, denom),
                              member.endpoint, info.epoch, info.phase, joined,
                              state["committed"] if role == "host" else "",
                              state["accepted"] if role == "host" else ""]]))

    @app.command("run")
    def run(key: KeyName = role,
            workdir: Annotated[Path | None, typer.Option(help=f"work directory (default <home>/{role}-<key>)")] = None,
            listen: Annotated[str, typer.Option(help="host:port of the artifact server (hosts)")] = "127.0.0.1:8101",
            poll: Annotated[float, typer.Option(help="seconds between chain polls")] = 0.5,
            epochs: Annotated[int | None, typer.Option(help="stop when the run reaches this epoch")] = None,
            threads: Annotated[int | None, typer.Option(help="torch threads (default: torch's choice)")] = None,
            adversary: Adversary = None,
            network: Network = None, home: Home = None) -> None:
        """Run the daemon: follow the chain's phases epoch after epoch (restart-safe)."""
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        configure(threads)
        participant = open_key(key, home)
        root = workdir or home_dir(home) / f"{role}-{key}"
        net = load_network(network, home)
        with open_ledger(net) as ledger:
            if net.chain.backend != "cosmos":
                raise CommandError("daemons need a real chain (a cosmos network); "
                                    "the embedded chain lives inside `veriloco simulate`")
            if ledger.member(participant.address(ledger.prefix)) is None:
                raise CommandError(f"bond first: veriloco {role} bond AMOUNT --key {key}")
            node: Participant
            if role == "host":
                node, server = host_daemon(ledger, participant, root, listen, behaviour=host_behaviour(adversary))
                console.print(f"host {node.address} serving on {server.url}")
            else:
                node = validator_node(ledger, participant, root, adversary)
                console.print(f"validator {node.address} polling its challenges")
            Daemon(node, ledger, poll=poll, max_epochs=epochs).run()

    return app


host_app = make_app("host")
validator_app = make_app("validator")
