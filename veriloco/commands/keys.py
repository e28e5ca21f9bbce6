"""``veriloco keys add|list|show``: the participant's identity, sealed under a passphrase."""

from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from protocol.keys import DEFAULT_PREFIX, KeyFormatError, PrivateKey, new_mnemonic
from veriloco.errors import VerilocoError
from veriloco.home import home_dir
from veriloco.keystore import PASSPHRASE_ENV, Keystore
from veriloco.output import console, print_json, table

app = typer.Typer(help="Manage keys: a participant's identity is its chain account.", no_args_is_help=True)

Home = Annotated[Optional[str], typer.Option("--home", help="veriloco home (default $VERILOCO_HOME or ~/.veriloco)")]
Json = Annotated[bool, typer.Option("--json", help="print JSON")]


def _passphrase(confirm: bool) -> str:
    env = os.environ.get(PASSPHRASE_ENV)
    if env is not None:
        return env
    return typer.prompt("Passphrase", hide_input=True, confirmation_prompt=confirm)


@app.command("add")
def add(
    name: str,
    recover: Annotated[bool, typer.Option("--recover", help="derive the key from a BIP-39 mnemonic read from stdin/prompt")] = False,
    prefix: Annotated[str, typer.Option(help="bech32 address prefix")] = DEFAULT_PREFIX,
    home: Home = None,
    json: Json = False,
) -> None:
    """Create a key (or recover one from a mnemonic) and seal it in the keyring."""
    store = Keystore.in_home(home_dir(home))
    mnemonic: str | None = None
    if recover:
        words = typer.prompt("Mnemonic", hide_input=True)
        try:
            key = PrivateKey.from_mnemonic(words)
        except KeyFormatError as exc:
            raise VerilocoError(str(exc)) from None
    else:
        mnemonic = new_mnemonic()
        key = PrivateKey.from_mnemonic(mnemonic)
    entry = store.add(name, key, _passphrase(confirm=True), prefix=prefix)
    if json:
        print_json({"name": entry.name, "address": entry.address, "pubkey": entry.pubkey,
                    **({"mnemonic": mnemonic} if mnemonic else {})})
        return
    console.print(f"[bold]{entry.name}[/]  {entry.address}")
    if mnemonic:
        console.print("Write down this mnemonic; it is the only way to recover the key:")
        console.print(f"  {mnemonic}")


@app.command("list")
def list_(home: Home = None, json: Json = False) -> None:
    """List keys (names, addresses, public keys; never secrets)."""
    ring = Keystore.in_home(home_dir(home)).load()
    rows = [{"name": k.name, "address": k.address, "pubkey": k.pubkey} for k in ring.keys]
    if json:
        print_json(rows)
    else:
        console.print(table("keys", ["name", "address", "pubkey"], [list(r.values()) for r in rows]))


@app.command("show")
def show(
    name: str,
    address: Annotated[bool, typer.Option("--address", "-a", help="print only the address")] = False,
    home: Home = None,
    json: Json = False,
) -> None:
    """Show one key's address and public key."""
    entry = Keystore.in_home(home_dir(home)).entry(name)
    if address:
        print(entry.address)
    elif json:
        print_json({"name": entry.name, "address": entry.address, "pubkey": entry.pubkey})
    else:
        console.print(f"[bold]{entry.name}[/]\n  address {entry.address}\n  pubkey  {entry.pubkey}")
