"""``veriloco devnet up|start|down|status|accounts``: a local single-validator injectived chain.

The node comes from the ``devnet`` extra (``pip install -e '.[devnet]'``). Its home defaults to
``<veriloco home>/devnet``; ``up`` wipes it and funds, at genesis, deterministic test accounts
(``--test-accounts``), keys of the keyring (``--keys NAME``) and any address (``--fund ADDR``).
Only the keyring's public entries are read, so no passphrase is needed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer

from chain.devnet import (
    DEFAULT_BLOCK_TIME,
    DEFAULT_CHAIN_ID,
    Devnet,
    DevnetError,
    DevnetPorts,
    GenesisAccount,
)
from chain.ledger import LedgerError
from protocol.coins import display, parse_amount
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import is_address
from veriloco.commands.common import AMOUNT_HELP, Home, Json
from veriloco.errors import CommandError
from veriloco.home import home_dir
from veriloco.keystore import Keystore
from veriloco.output import console, err_console, print_json, table

app = typer.Typer(help="Run a local injectived devnet (a real CosmWasm chain) for the cosmos backend.",
                  no_args_is_help=True)

NodeHome = Annotated[Path | None, typer.Option("--node-home", help="the node's directory (default <home>/devnet)")]


def _progress(text: str) -> None:
    err_console.print(f"devnet: {text}…", highlight=False)


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except (DevnetError, LedgerError) as exc:
        raise CommandError(str(exc)) from None


def _node_home(home: str | None, node_home: Path | None) -> Path:
    return node_home if node_home is not None else home_dir(home) / "devnet"


@app.command("up")
def up(
    keys: Annotated[list[str] | None, typer.Option("--keys", help="fund this keyring key (repeatable)")] = None,
    fund: Annotated[list[str] | None, typer.Option("--fund", help="fund this address (repeatable)")] = None,
    test_accounts: Annotated[int, typer.Option(help="deterministic test accounts test0..testN-1 (public keys!)")] = 4,
    amount: Annotated[str, typer.Option(help=f"per funded account: {AMOUNT_HELP}")] = display(GENESIS_BALANCE, DENOM),
    chain_id: Annotated[str, typer.Option(help="chain id")] = DEFAULT_CHAIN_ID,
    block_time: Annotated[str, typer.Option(help="block interval (CometBFT commit timeout)")] = DEFAULT_BLOCK_TIME,
    port_offset: Annotated[int, typer.Option(help="add this to every default port")] = 0,
    rpc_port: Annotated[int | None, typer.Option(help="CometBFT RPC port (default 26657)")] = None,
    p2p_port: Annotated[int | None, typer.Option(help="P2P port (default 26656)")] = None,
    grpc_port: Annotated[int | None, typer.Option(help="gRPC port (default 9900)")] = None,
    rest_port: Annotated[int | None, typer.Option(help="REST API port (default 10337)")] = None,
    timeout: Annotated[float, typer.Option(help="seconds to wait for the first block")] = 60.0,
    home: Home = None,
    node_home: NodeHome = None,
    json: Json = False,
) -> None:
    """Wipe the devnet's home, write a fresh genesis, start the node and wait for its first block."""
    coins = parse_amount(amount, DENOM)
    base = DevnetPorts().offset(port_offset)
    ports = DevnetPorts(rpc=rpc_port or base.rpc, p2p=p2p_port or base.p2p, grpc=grpc_port or base.grpc,
                        rest=rest_port or base.rest)
    accounts = [GenesisAccount.test(f"test{i}", coins) for i in range(test_accounts)]
    if keys:
        store = Keystore.in_home(home_dir(home))
        for name in keys:
            entry = store.entry(name)  # checked: its address is that of its public key, of either type
            accounts.append(GenesisAccount(name, entry.address, {DENOM: coins}, key_type=entry.key_type.value))
    for address in fund or []:
        if not is_address(address):
            raise CommandError(f"--fund {address}: not an inj1... address")
        accounts.append(GenesisAccount(address, address, {DENOM: coins}))
    with _errors():
        net = Devnet(_node_home(home, node_home), ports=ports, chain_id=chain_id, accounts=accounts,
                     block_time=block_time)
        # Untied: the operator's node must keep running after this command exits.
        status = net.up(timeout=timeout, progress=_progress, tied=False)
    if json:
        print_json({"devnet": status.to_json()})
        return
    console.print(f"devnet [bold]{status.chain_id}[/] up: pid {status.pid}, height {status.height}, home {status.home}")
    for name, url in status.endpoints.items():
        console.print(f"  {name:5} {url}")


@app.command("start")
def start(
    timeout: Annotated[float, typer.Option(help="seconds to wait for the next block")] = 60.0,
    home: Home = None,
    node_home: NodeHome = None,
    json: Json = False,
) -> None:
    """Start a stopped devnet again on its home, keeping its chain (``up`` starts a fresh one)."""
    with _errors():
        status = Devnet.open(_node_home(home, node_home)).start(timeout=timeout, progress=_progress, tied=False)
    if json:
        print_json({"devnet": status.to_json()})
    else:
        console.print(f"devnet [bold]{status.chain_id}[/] running again: pid {status.pid}, height {status.height}")


@app.command("down")
def down(
    timeout: Annotated[float, typer.Option(help="seconds before SIGTERM turns into SIGKILL")] = 15.0,
    home: Home = None,
    node_home: NodeHome = None,
    json: Json = False,
) -> None:
    """Stop the devnet's node (its home and chain state stay, until the next `up`)."""
    with _errors():
        net = Devnet.open(_node_home(home, node_home))
        stopped = net.stop(timeout=timeout)
    if json:
        print_json({"stopped": stopped, "home": str(net.home)})
    else:
        console.print("devnet stopped" if stopped else "devnet was not running")


@app.command("status")
def status(home: Home = None, node_home: NodeHome = None, json: Json = False) -> None:
    """Whether the node runs; its height, chain id, pid and endpoints. Exit status 0 when it runs,
    3 when it does not (as `systemctl status`), so scripts can wait on it."""
    with _errors():
        st = Devnet.open(_node_home(home, node_home)).status()
    if json:
        print_json({"devnet": st.to_json()})
    elif not st.running:
        console.print(f"devnet {st.chain_id} is not running (home {st.home})")
    if not st.running:
        raise typer.Exit(EXIT_NOT_RUNNING)
    if json:
        return
    console.print(f"devnet [bold]{st.chain_id}[/] running: pid {st.pid}, height {st.height}, "
                  f"block time {st.block_time}, home {st.home}")
    for name, url in st.endpoints.items():
        console.print(f"  {name:5} {url}")


EXIT_NOT_RUNNING = 3
"""``devnet status``'s exit status when the node is down (as ``systemctl status``)."""


@app.command("accounts")
def accounts(
    mnemonics: Annotated[bool, typer.Option(help="also print the test accounts' (public) mnemonics")] = False,
    home: Home = None,
    node_home: NodeHome = None,
    json: Json = False,
) -> None:
    """The funded accounts: names, addresses and balances (live when the node runs, else genesis)."""
    with _errors():
        net = Devnet.open(_node_home(home, node_home))
        running = net.pid() is not None
    balances: dict[str, dict[str, int]] = {}
    if running:
        with _errors(), net.connect(reconnect_timeout=5.0) as chain:
            balances = {a.address: chain.balances(a.address) for a in net.accounts}
    rows: list[dict[str, Any]] = []
    for a in net.accounts:
        coins = balances.get(a.address, dict(a.coins))
        row = {"name": a.name, "address": a.address, "balances": {d: str(v) for d, v in sorted(coins.items())}}
        if a.key_type:
            row["key_type"] = a.key_type
        if mnemonics and a.mnemonic:
            row["mnemonic"] = a.mnemonic
        rows.append(row)
    if json:
        print_json({"live": running, "accounts": rows})
        return
    columns = ["name", "type", "address", "balances"] + (["mnemonic"] if mnemonics else [])
    title = "devnet accounts" + ("" if running else " (genesis; the node is not running)")
    console.print(table(title, columns, [[r["name"], r.get("key_type", ""), r["address"],
                                          ", ".join(display(v, d) for d, v in r["balances"].items()),
                                          *([r.get("mnemonic", "")] if mnemonics else [])] for r in rows]))
