"""``veriloco host …`` and ``veriloco validator …``: stake, run the daemon, unbond, claim, status.

Both roles share their one-shot commands; only ``run`` differs (a host trains and serves, a
validator replays). :func:`make_app` builds the group for a role. The daemon's modules (torch,
FastAPI) load only in ``run``.
"""

# No `from __future__ import annotations`: the options' help texts name the role, a local of make_app,
# and Typer evaluates annotations where the function is defined.
import ipaddress
import logging
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from protocol.coins import base_units, display, parse_amount
from protocol.keys import KeyFormatError, PublicKey, decode_address
from protocol.messages import Role
from protocol.rules.endpoints import EndpointError, endpoint_syntax
from protocol.rules.spec import RunSpec
from veriloco.commands import tx_flags
from veriloco.commands.common import (
    AMOUNT_HELP,
    Device,
    FullLeafEvery,
    Home,
    Json,
    KeepEpochs,
    KeyName,
    LiveLeafEvery,
    LiveMetrics,
    Network,
    check_device,
    key_names,
    live_leaves,
    open_key,
)
from veriloco.connect import be_patient, load_network, open_ledger
from veriloco.errors import CommandError
from veriloco.home import home_dir
from veriloco.keystore import Keystore
from veriloco.output import console, err_console, print_json, table, tx_json, tx_line

if TYPE_CHECKING:  # the daemon's modules load only in `run`
    from chain.ledger import Ledger
    from protocol.views import ParticipantStatus

DEFAULT_ENDPOINT: dict[str, str] = {"host": "http://127.0.0.1:8101", "validator": "http://127.0.0.1:8301"}
"""The bonded endpoint when ``bond`` is given none: a host and a validator on one machine do not collide."""

Adversary = Annotated[str | None, typer.Option(
    "--adversary", help="misbehave on purpose, for tests and demos (see `veriloco simulate --help`)", hidden=True)]


def check_listen(listen: str) -> tuple[str, int]:
    """``host:port`` of ``--listen``, checked free before anything starts.

    Raises:
        CommandError: not ``HOST:PORT``, or nothing can listen there (the port is taken, the
            address is not this machine's).
    """
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise CommandError(f"--listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:8101")
    host = host or "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
            # As uvicorn binds: a port in TIME_WAIT is free, one with a listener is not.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host.strip("[]"), int(port)))
    except OSError as exc:
        raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc} "
                           "(is another daemon serving there? choose another --listen)") from None
    return host, int(port)


def check_upload_rate(upload_rate: float | None) -> None:
    """``--upload-rate``, checked before anything starts (the token bucket's own checks).

    Raises:
        CommandError: not a positive finite number of bytes per second.
    """
    if upload_rate is None:
        return
    from node.http import TokenBucket  # noqa: PLC0415 (FastAPI's stack loads only for a daemon)

    try:
        TokenBucket(upload_rate, 1)
    except ValueError as exc:
        raise CommandError(f"--upload-rate {upload_rate!r}: {exc}") from None


def check_standby_options(url: str | None, pubkey: str | None) -> None:
    """``--standby-url`` and ``--standby-pubkey``, checked before anything starts (the key against
    the chain later: ``node.standby_handover.standby_key``).

    Raises:
        CommandError: one given without the other, a malformed URL, or not a public key.
    """
    if url is None and pubkey is None:
        return
    if url is None or pubkey is None:
        raise CommandError("--standby-url and --standby-pubkey go together: the standby's address and its key")
    try:
        endpoint_syntax(url)
    except EndpointError as exc:
        raise CommandError(f"--standby-url {url!r}: {exc}") from None
    try:
        PublicKey(bytes.fromhex(pubkey))
    except (ValueError, KeyFormatError) as exc:
        raise CommandError(f"--standby-pubkey {pubkey!r}: not a compressed secp256k1 public key in hex "
                           f"(66 digits, 02… or 03…, as `veriloco standby run` prints it): {exc}") from None


def below_minimum_message(role: Role, amount: int, bonded: int, minimum: int, denom: str) -> str:
    """Why a bond of ``amount`` is refused: with ``bonded`` already, it stays below the role's
    ``minimum``, so the member could not join an epoch. Every amount in both notations, since a
    mistaken unit (``20inj`` for ``20INJ``) is the usual cause."""
    def both(value: int) -> str:
        return f"{display(value, denom)} = {base_units(value, denom)}"
    have = f" on top of {both(bonded)} already bonded" if bonded else ""
    return (f"bond: {both(amount)}{have} is below the run's minimum {role} stake of {both(minimum)}, so this "
            f"{role} could not join an epoch; bond at least {both(minimum - bonded)}, or pass --below-minimum "
            "to add stake in parts")


def listen_for(endpoint: str) -> str:
    """Where a daemon serves by default: the port of its bonded ``endpoint`` (what peers dial), on
    that address when it is an IP literal or ``localhost`` (a local run), else on every interface
    (a name that resolves to this machine from outside).

    Raises:
        CommandError: the bonded endpoint does not parse (the contract checked it at bond time).
    """
    try:
        _, host, port, _ = endpoint_syntax(endpoint)
    except EndpointError as exc:
        raise CommandError(f"the bonded endpoint {endpoint!r} is not usable ({exc}); bond again with --endpoint "
                           "or pass --listen") from None
    try:
        ipaddress.ip_address(host.strip("[]"))
        literal = True
    except ValueError:
        literal = host == "localhost"
    return f"{host if literal else '0.0.0.0'}:{port}"


def make_app(role: Role) -> typer.Typer:
    """The command group of ``role``."""
    app = typer.Typer(help=f"Take part in a run as a {role}.", no_args_is_help=True)

    @app.command("bond")
    def bond(stake: Annotated[str, typer.Argument(help=AMOUNT_HELP)],
             endpoint: Annotated[str, typer.Option(help="URL where peers reach this participant's artifact server "
                                                        "(`run` serves on its port)")]
             = DEFAULT_ENDPOINT[role],
             below_minimum: Annotated[bool, typer.Option(
                 "--below-minimum", help="bond even if the total stays below the run's minimum for the role "
                                         "(stake added in parts); without it such a bond is refused")] = False,
             key: KeyName = role, network: Network = None, home: Home = None, json: Json = False) -> None:
        """Stake (or add stake) as a participant of the run."""
        net = load_network(network, home)
        with open_ledger(net, save=True) as ledger:
            amount = parse_amount(stake, ledger.denom)  # refused before the passphrase is asked for
            participant = open_key(key, home)
            already = ledger.member(participant.address(ledger.prefix))
            bonded = int(already.bonded) if already is not None and already.role == role else 0
            econ = ledger.spec().economics
            minimum = int(econ.min_host_stake if role == "host" else econ.min_validator_stake)
            if bonded + amount < minimum and not below_minimum:
                raise CommandError(below_minimum_message(role, amount, bonded, minimum, ledger.denom))
            result = ledger.bond(participant, role, endpoint, amount)
            member = ledger.member(participant.address(ledger.prefix))
            denom = ledger.denom
        if member is None:
            raise CommandError("the bond went through but the contract does not list the member: a bug")
        if json:
            print_json({"tx": tx_json(result), "member": member, "key": key, "denom": denom})
            return
        console.print(f"bonded {display(member.bonded, denom)} as {role} ({key} {member.address}); "
                      f"{tx_line(result)}", highlight=False)

    @app.command("unbond")
    def unbond(stake: Annotated[str, typer.Argument(help=f"amount to unbond: {AMOUNT_HELP}")], key: KeyName = role,
               network: Network = None, home: Home = None, json: Json = False) -> None:
        """Start unbonding stake (it stays slashable until it can be claimed)."""
        net = load_network(network, home)
        with open_ledger(net, save=True) as ledger:
            amount = parse_amount(stake, ledger.denom)
            participant = open_key(key, home)
            result = ledger.unbond(participant, amount)
            member = ledger.member(participant.address(ledger.prefix))
            denom = ledger.denom
        if member is None:
            raise CommandError("the unbond went through but the contract does not list the member: a bug")
        if json:
            print_json({"tx": tx_json(result), "member": member, "key": key, "denom": denom})
            return
        for entry in member.unbonding:
            console.print(f"unbonding {display(entry.amount, denom)}, claimable from epoch {entry.release_epoch}",
                          highlight=False)
        console.print(f"still bonded {display(member.bonded, denom)}; {tx_line(result)}", highlight=False)

    @app.command("claim")
    def claim(key: KeyName = role, network: Network = None, home: Home = None, json: Json = False) -> None:
        """Withdraw unbonded stake whose unbonding period is over."""
        net = load_network(network, home)
        participant = open_key(key, home)
        with open_ledger(net, save=True) as ledger:
            address = participant.address(ledger.prefix)
            before = ledger.balance(address)
            result = ledger.claim(participant)
            paid = ledger.balance(address) - before + result.fee
            denom = ledger.denom
        if json:
            print_json({"tx": tx_json(result), "claimed": str(paid), "key": key, "address": address, "denom": denom})
            return
        console.print(f"claimed {display(paid, denom)} to {key} {address}; {tx_line(result)}", highlight=False)

    @app.command("set-standby")
    def set_standby(standby: Annotated[str | None, typer.Argument(
                        help="the standby's address (its own key, no stake; omit with --clear)")] = None,
                    clear: Annotated[bool, typer.Option("--clear", help="name no standby any more")] = False,
                    key: KeyName = role, network: Network = None, home: Home = None, json: Json = False) -> None:
        """Name the standby revealer that may reveal this member's beacon secret, and nothing else
        (`veriloco standby run --key STANDBY --for ADDRESS` on the second machine)."""
        if (standby is None) == (not clear):
            raise CommandError("give the standby's address, or --clear (not both)")
        net = load_network(network, home)
        participant = open_key(key, home)
        with open_ledger(net, save=True) as ledger:
            if standby is not None:
                try:
                    decode_address(standby, ledger.prefix)
                except KeyFormatError as exc:
                    raise CommandError(f"invalid address {standby!r}: {exc}") from exc
            address = participant.address(ledger.prefix)
            result = ledger.set_standby(participant, standby)
        if json:
            print_json({"tx": tx_json(result), "key": key, "address": address, "standby": standby})
            return
        named = f"standby {standby}" if standby is not None else "no standby"
        console.print(f"{key} {address} names {named}; {tx_line(result)}", highlight=False)

    @app.command("status")
    def status(address: Annotated[str | None, typer.Argument(help="address (default: the key's)")] = None,
               key: KeyName = role, network: Network = None, home: Home = None, json: Json = False) -> None:
        """Stake, unbonding entries, lifetime slashes and rewards, and the current epoch's view of it."""
        net = load_network(network, home)
        with open_ledger(net) as ledger:
            who = address or Keystore.in_home(home_dir(home)).entry(key).public_key.address(ledger.prefix)
            # Its part in the current epoch from point reads (`participant`), not the epoch's lists.
            member, part = ledger.member(who), ledger.participant(who)
            denom = ledger.denom
        if member is None:
            raise CommandError(f"{who} is not a member of this run (bond first: veriloco {role} bond AMOUNT)")
        joined = part.joined and part.role == role
        name = key_names(home).get(who)
        state = {"member": member, "name": name, "denom": denom, "epoch": part.epoch, "phase": part.phase,
                 "joined": joined, "committed": joined and part.committed,
                 "accepted": joined and part.outcome == "accepted"}
        if json:
            print_json(state)
            return
        console.print(table(f"{role} {name + ' ' if name else ''}{who}",
                            ["bonded", "unbonding", "slashed", "rewarded", "endpoint", "epoch", "phase", "joined",
                             *(["committed", "accepted"] if role == "host" else [])],
                            [[display(member.bonded, denom),
                              ", ".join(f"{display(u.amount, denom)} from epoch {u.release_epoch}"
                                        for u in member.unbonding),
                              display(member.slashed_total, denom), display(member.rewarded_total, denom),
                              member.endpoint, part.epoch, part.phase, joined,
                              *([state["committed"], state["accepted"]] if role == "host" else [])]]))

    @app.command("run")
    def run(key: KeyName = role,
            workdir: Annotated[Path | None, typer.Option(help=f"work directory (default <home>/{role}-<key>)")] = None,
            listen: Annotated[str | None, typer.Option(
                help="host:port of the artifact server (default: the port of the bonded endpoint); a host "
                     "serves its epochs there, a validator the Δs and states it holds")] = None,
            serve: Annotated[bool, typer.Option(
                "--serve/--no-serve", help="validators: serve what they hold (a duty: a validator that passed "
                                           "a Δ its host then withholds is slashed `wrong` if it serves nothing)",
                hidden=role == "host")] = True,
            poll: Annotated[float, typer.Option(help="seconds between chain polls")] = 0.5,
            epochs: Annotated[int | None, typer.Option(help="stop when the run reaches this epoch")] = None,
            threads: Annotated[int | None, typer.Option(help="torch threads (default: torch's choice)")] = None,
            device: Device = "cpu",
            nproc_per_node: Annotated[int, typer.Option(
                "--nproc-per-node", min=1, hidden=role != "host",
                help="hosts: train as an island of N processes on this machine (torchrun; FSDP2 over "
                     "gloo on cpu, NCCL with one GPU per process on cuda); rank 0 talks to the chain")] = 1,
            accumulate: Annotated[int, typer.Option(
                min=1, hidden=role != "host",
                help="hosts in an island: micro-batches each process accumulates a step (M = this × the "
                     "island's processes; more than 1 needs a power-of-two island)")] = 1,
            nnodes: Annotated[int, typer.Option(
                min=1, hidden=role != "host",
                help="hosts: the island spans this many machines, each running `host run` with the same "
                     "--nproc-per-node and its own --node-rank (torchrun's static rendezvous)")] = 1,
            node_rank: Annotated[int, typer.Option(
                min=0, hidden=role != "host", help="hosts: this machine's place in the island (0 talks to "
                                                   "the chain and serves; the others only train)")] = 0,
            master_addr: Annotated[str | None, typer.Option(
                hidden=role != "host", help="hosts: node 0's address, which every node of the island "
                                            "reaches (needed with --nnodes > 1)")] = None,
            master_port: Annotated[int, typer.Option(
                min=1, max=65535, hidden=role != "host", help="hosts: node 0's rendezvous port")] = 29500,
            full_leaf_every: FullLeafEvery = 4,
            live_leaf_every: LiveLeafEvery = "auto",
            keep_epochs: KeepEpochs = None,
            upload_rate: Annotated[float | None, typer.Option(
                help="bytes per second the artifact server sends at most, over all its readers together "
                     "(a token bucket: a link to model or share; default: unpaced)")] = None,
            metrics: LiveMetrics = None,
            standby_url: Annotated[str | None, typer.Option(
                help="this member's standby revealer (`veriloco standby run --listen`, e.g. http://10.0.0.2:8501): "
                     "each epoch's beacon secret is handed to it, sealed to --standby-pubkey")] = None,
            standby_pubkey: Annotated[str | None, typer.Option(
                help="the standby's public key in hex (`veriloco standby run` prints it): the key of the standby "
                     "this member named (`set-standby`), or this member's own if it named none")] = None,
            verbose: Annotated[bool, typer.Option("--verbose", "-v", help="debug logs (every HTTP request)")]
            = False,
            adversary: Adversary = None,
            allow_private_endpoints: Annotated[bool | None, typer.Option(
                "--allow-private-endpoints/--public-endpoints-only",
                help="dial peers on loopback/private networks (default: only in local runs)")] = None,
            network: Network = None, home: Home = None) -> None:
        """Run the daemon: follow the chain's phases epoch after epoch (restart-safe). Logs go to stderr."""
        configure_logging(verbose)
        check_upload_rate(upload_rate)  # before anything loads or starts
        check_standby_options(standby_url, standby_pubkey)
        live_every = live_leaves(live_leaf_every, full_leaf_every)
        islanded = nproc_per_node * nnodes > 1
        if not islanded and accumulate > 1:
            raise CommandError("--accumulate is for an island (--nproc-per-node or --nnodes above 1)")
        if islanded:
            if role != "host":
                raise CommandError("--nproc-per-node is for hosts; a validator replays in one process")
            from veriloco import island_launch  # noqa: PLC0415 (only an island needs it)

            nodes = island_launch.IslandNodes.of(nnodes, node_rank, master_addr, master_port)
            island_launch.check_island(nproc_per_node, adversary, nnodes)
            if island_launch.island_world() is None:  # not under torchrun yet: start the island
                raise typer.Exit(island_launch.relaunch(nproc_per_node, nodes))
            if island_launch.island_rank() > 0:  # neither the chain nor the network: rank 0's orders
                island_launch.follow(workdir or home_dir(home) / f"{role}-{key}", device, threads)
                return
        net = load_network(network, home)
        if net.chain.backend != "cosmos":
            raise CommandError("daemons need a real chain (a cosmos network); "
                               "the embedded chain lives inside `veriloco simulate`")
        serving = role == "host" or serve
        if serving and listen is not None:
            check_listen(listen)  # a mistake on the command line is said before anything starts
        participant = open_key(key, home)
        standby_of: tuple[PublicKey, str] | None = None
        with open_ledger(net) as ledger:
            address = participant.address(ledger.prefix)
            member = ledger.member(address)
            if member is not None and standby_pubkey is not None:
                standby_of = check_standby_key(ledger, address, standby_pubkey)
        if member is None:
            raise CommandError(f"{key} ({address}) is not a member of this run: "
                               f"bond first (veriloco {role} bond AMOUNT --key {key})")
        if serving and listen is None:
            listen = listen_for(member.endpoint)
            check_listen(listen)
        elif not serving:
            listen = None
            err_console.print(f"validator {key}: --no-serve: the Δs it checks are not served, so when a host "
                              "withholds its Δ from peers this validator is slashed `wrong` with it "
                              "(docs/network.md)", highlight=False)
        root = workdir or home_dir(home) / f"{role}-{key}"
        err_console.print(f"{role} {key}: loading (torch, the run's dataset)…", highlight=False)
        from node.daemon import Daemon, holder_server, host_daemon  # noqa: PLC0415 (torch and FastAPI load only for a daemon)
        from node.participant import Participant  # noqa: PLC0415 (as above)
        from node.server import ServerThread  # noqa: PLC0415 (as above)
        from node.standby_handover import SecretCourier  # noqa: PLC0415 (as above)
        from trainer.determinism import configure  # noqa: PLC0415 (as above)
        from veriloco.behaviours import host_behaviour, validator_node  # noqa: PLC0415 (as above)

        check_device(device)
        configure(threads, device)
        servers: list[ServerThread] = []
        courier: SecretCourier | None = None
        island = None  # rank 0's island behaviour: the other ranks leave when it stops
        host_node = None  # rank 0's host: its pipelined training ends before the island stops
        try:
            with open_ledger(net) as ledger:
                compute_class = report_profile(ledger.spec(), device, f"{role} {key}")
                be_patient(ledger)  # from here on, a node restart is waited out
                node: Participant
                private = (net.chain.private_endpoints_allowed() if allow_private_endpoints is None
                           else allow_private_endpoints)
                if role == "host":
                    assert listen is not None
                    behaviour = host_behaviour(adversary)
                    if islanded:  # rank 0 of the island
                        from veriloco import island_launch  # noqa: PLC0415 (as above)

                        island = island_launch.lead(ledger.spec().canonical(), device, threads, accumulate)
                        behaviour = island
                        on = f" on {nnodes} machines" if nnodes > 1 else ""
                        err_console.print(f"host {key}: an island of {nproc_per_node * nnodes} processes{on}, "
                                          f"FSDP2 over {island.backend}; this is rank 0", highlight=False)
                    node, server = host_daemon(ledger, participant, root, listen,
                                               behaviour=behaviour, name=key, device=device,
                                               full_leaf_every=full_leaf_every, keep_epochs=keep_epochs,
                                               allow_private=private, upload_rate=upload_rate,
                                               live_leaf_every=live_every)
                    host_node = node
                    servers.append(server)
                    err_console.print(f"host {key} {node.address} serving on {server.url}", highlight=False)
                else:
                    node = validator_node(ledger, participant, root, adversary, name=key, device=device,
                                          allow_private=private, keep_epochs=keep_epochs)
                    err_console.print(f"validator {key} {node.address} following the run", highlight=False)
                    if listen is not None:
                        holder = holder_server(ledger, node.address, root, listen, upload_rate)
                        servers.append(holder)
                        err_console.print(f"validator {key} serving the Δs and states it holds on {holder.url}",
                                          highlight=False)
                node.compute_class = compute_class  # declared at every join (docs/contract.md)
                from veriloco.metrics_files import MetricsFollower  # noqa: PLC0415 (as above)

                follower = MetricsFollower.to(metrics or root / "metrics", ledger.denom, key_names(home), key)
                if standby_url is not None and standby_of is not None:
                    courier = SecretCourier.of(node, standby_url, *standby_of)
                    err_console.print(f"{role} {key}: handing each epoch's beacon secret to the standby "
                                      f"{standby_of[1]} at {standby_url}", highlight=False)

                def on_status(status: "ParticipantStatus") -> None:
                    follower.observe(ledger, status.epoch)
                    if courier is not None:
                        courier.offer(status)  # records it: the courier's own thread sends

                Daemon(node, ledger, poll=poll, max_epochs=epochs, on_status=on_status).run()
        finally:
            if courier is not None:
                courier.close()
            for running in servers:  # after the drain: a host serves until it stops
                running.stop()
            if island is not None:  # the daemon closed its node: training stops at its next step
                from veriloco import island_launch  # noqa: PLC0415 (as above)

                training = host_node.training if host_node is not None else None
                if not island_launch.stop(island, training):
                    err_console.print(f"host {key}: the island's training did not stop within "
                                      f"{island_launch.STOP_WAIT_S:.0f} s; leaving without it", highlight=False)
        leave_without_threads()

    return tx_flags.on_group(app, read_only={"status"})  # --node, --gas, … after the command


def check_standby_key(ledger: "Ledger", member: str, pubkey: str) -> tuple[PublicKey, str]:
    """``--standby-pubkey`` against the chain: the named standby's key, or the member's own.

    Raises:
        CommandError: neither (that standby could not reveal for the member).
    """
    from node.standby_handover import standby_key  # noqa: PLC0415 (FastAPI loads only for a daemon)

    try:
        return standby_key(ledger, member, pubkey)
    except ValueError as exc:
        raise CommandError(f"--standby-pubkey: {exc}") from None


def leave_without_threads(grace_s: float = 5.0) -> None:
    """End a daemon's process once its own threads are done: wait up to ``grace_s`` for any still
    running (an HTTP request ending at its deadline), then leave at once (``node.daemon.exit_now``)
    if one still is — Python's shutdown with a thread inside torch's C++ ends in ``terminate
    called without an active exception``."""
    import threading  # noqa: PLC0415 (only a daemon's exit needs it)
    import time  # noqa: PLC0415 (as above)

    end = time.monotonic() + grace_s
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and thread.is_alive():
            thread.join(max(0.0, end - time.monotonic()))
    if any(t.is_alive() for t in threading.enumerate() if t is not threading.current_thread()):
        from node.daemon import exit_now  # noqa: PLC0415 (loaded with the daemon)

        exit_now(0)


def report_profile(spec: RunSpec, device: str, who: str) -> str:
    """Say which compute profile this node computes in, and return its compute-profile class: the
    fingerprint it declares when it joins (its pickers and dispute voters are then of its own profile:
    ``docs/contract.md``, "Compute-profile classes"). A run that pins one is checked by the node
    itself (``trainer.fingerprint.check_fingerprint``), which refuses another machine. An MKL mode
    that is not strict (the operator's ``MKL_CBWR``; the trainer sets ``AUTO,STRICT`` otherwise) is
    warned about: on some CPUs the thread count then changes the bits, which no fingerprint shows."""
    mode = os.environ.get("MKL_CBWR", "")
    if "STRICT" not in mode.upper():
        err_console.print(f"{who}: MKL_CBWR={mode or '(unset)'} is not a strict mode: on some CPUs this node's "
                          "bits then depend on its thread count, and its replays can differ from other nodes' "
                          "(docs/verification.md, 'Compute profiles and calibration')", highlight=False)
    pinned = spec.verification.compute_fingerprint
    if pinned:
        err_console.print(f"{who}: the run pins compute profile {pinned[:16]}…; checking this machine's",
                          highlight=False)
        return pinned
    from trainer.fingerprint import compute_fingerprint  # noqa: PLC0415 (torch loads only for a daemon)

    local = compute_fingerprint(spec, device)
    err_console.print(f"{who}: compute fingerprint {local[:16]}… on {device}; the run pins none, so this node "
                      "joins in that compute-profile class: its challenges are picked and disputes decided by "
                      "validators of the same profile (docs/contract.md, 'Compute-profile classes')",
                      highlight=False)
    return local


def configure_logging(verbose: bool) -> None:
    """Daemon logs on stderr: the node's events and phases at INFO; HTTP requests and each replay's
    measurements only with ``--verbose`` (and the logger names, to tell them apart)."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(message)s" if verbose else "%(asctime)s %(message)s")
    # httpx logs every request at INFO, which is debug detail for a daemon; httpcore's debug is wire chatter.
    logging.getLogger("httpx").setLevel(logging.INFO if verbose else logging.WARNING)
    # The verifier logs each replay's result, which the node's verdict line repeats.
    logging.getLogger("veriloco.verifier").setLevel(logging.INFO if verbose else logging.ERROR)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    for noisy in ("grpc", "urllib3", "matplotlib", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


host_app = make_app("host")
validator_app = make_app("validator")
