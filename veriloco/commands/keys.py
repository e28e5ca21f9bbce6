"""``veriloco keys add|list|show|export|delete``: the participant's identity, sealed under a passphrase.

New keys are Injective's own kind by default (``eth_secp256k1``, coin type 60): the address equals
what ``injectived keys add --recover`` and Keplr show for the same mnemonic. ``--key-type
secp256k1`` gives a plain Cosmos SDK key (coin type 118 unless ``--coin-type`` says otherwise).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from protocol.keyring import KeyringError, SealedKey
from protocol.keys import (
    DEFAULT_COIN_TYPE,
    DEFAULT_KEY_TYPE,
    DEFAULT_PREFIX,
    KeyFormatError,
    KeyType,
    PrivateKey,
    hd_path,
    new_mnemonic,
)
from veriloco.commands.common import Home, Json, ask_secret, passphrase
from veriloco.errors import CommandError
from veriloco.home import home_dir
from veriloco.keystore import Keystore
from veriloco.output import console, err_console, print_json, table

app = typer.Typer(help="Manage keys: a participant's identity is its chain account.", no_args_is_help=True)

# BIP-32 indices below the hardened offset, as injectived accepts them.
_MAX_INDEX = 2**31 - 1


def _public(entry: SealedKey) -> dict[str, Any]:
    return {"name": entry.name, "key_type": entry.key_type.value, "address": entry.address, "pubkey": entry.pubkey}


@app.command("add")
def add(
    name: str,
    recover: Annotated[bool, typer.Option(
        "--recover", help="derive the key from a BIP-39 mnemonic (prompted, hidden)")] = False,
    from_hex: Annotated[bool, typer.Option(
        "--from-hex", help="import a raw private key given as 64 hex digits (prompted, hidden)")] = False,
    key_type: Annotated[KeyType, typer.Option(
        "--key-type", help="eth_secp256k1 (Injective, Keplr) or secp256k1 (plain Cosmos SDK)")] = DEFAULT_KEY_TYPE,
    coin_type: Annotated[int | None, typer.Option(
        "--coin-type", min=0, max=_MAX_INDEX,
        help="BIP-44 coin type (default 60 for eth_secp256k1, 118 for secp256k1)")] = None,
    account: Annotated[int, typer.Option("--account", min=0, max=_MAX_INDEX, help="BIP-44 account")] = 0,
    index: Annotated[int, typer.Option("--index", min=0, max=_MAX_INDEX, help="BIP-44 address index")] = 0,
    prefix: Annotated[str, typer.Option(help="bech32 address prefix")] = DEFAULT_PREFIX,
    home: Home = None,
    json: Json = False,
) -> None:
    """Create a key (or recover one from a mnemonic, or import a hex private key) and seal it.

    The path is m/44'/COIN'/ACCOUNT'/0/INDEX, as in `injectived keys add`. Without a terminal the
    mnemonic or hex key is read as one line of stdin and the passphrase from $VERILOCO_PASSPHRASE.
    """
    if recover and from_hex:
        raise CommandError("--recover and --from-hex exclude each other")
    if from_hex and (coin_type is not None or account or index):
        raise CommandError("--coin-type, --account and --index apply to mnemonics, not to --from-hex")
    store = Keystore.in_home(home_dir(home))
    if any(k.name == name for k in store.load().keys):
        raise CommandError(f"a key named {name!r} exists already (keys delete {name} first, or choose another name)")
    path = hd_path(DEFAULT_COIN_TYPE[key_type] if coin_type is None else coin_type, account, index)
    mnemonic: str | None = None
    try:
        if recover:
            key = PrivateKey.from_mnemonic(ask_secret("Mnemonic", "mnemonic"), key_type, path)
        elif from_hex:
            key = PrivateKey.from_hex(ask_secret("Private key (hex)", "private key"), key_type)
        else:
            mnemonic = new_mnemonic()
            key = PrivateKey.from_mnemonic(mnemonic, key_type, path)
    except KeyFormatError as exc:
        raise CommandError(str(exc)) from None
    entry = store.add(name, key, passphrase(confirm=True), prefix=prefix)
    if json:
        print_json({**_public(entry), **({"hd_path": path} if not from_hex else {}),
                    **({"mnemonic": mnemonic} if mnemonic else {})})
        return
    console.print(f"[bold]{entry.name}[/]  {entry.address}  ({entry.key_type.value}"
                  f"{'' if from_hex else ', ' + path})", highlight=False)
    if mnemonic:
        console.print("Write down this mnemonic; it is the only way to recover the key:")
        console.print(f"  {mnemonic}")


@app.command("list")
def list_(home: Home = None, json: Json = False) -> None:
    """List keys (names, types, addresses, public keys; never secrets).

    Each stored address is derived again from its public key and type; an entry where they
    differ (or whose scrypt parameters are out of bounds) was altered and is flagged.
    """
    store = Keystore.in_home(home_dir(home))
    ring = store.load()
    rows = [{**_public(k), "problem": k.problem()} for k in ring.keys]
    bad = [r["name"] for r in rows if r["problem"]]
    if json:
        print_json({"keys": [{**r, "verified": r["problem"] is None} for r in rows]})
    else:
        console.print(table("keys", ["name", "type", "address", "pubkey", "check"],
                            [[r["name"], r["key_type"], r["address"], r["pubkey"],
                              "ok" if r["problem"] is None else "ALTERED"] for r in rows]))
    for r in rows:
        if r["problem"]:
            err_console.print(f"[red]warning:[/] key {r['name']!r}: {r['problem']}", highlight=False, soft_wrap=True)
    if bad:
        raise typer.Exit(1)


@app.command("show")
def show(
    name: str,
    address: Annotated[bool, typer.Option("--address", "-a", help="print only the address")] = False,
    home: Home = None,
    json: Json = False,
) -> None:
    """Show one key's type, address and public key (refused if the entry was altered)."""
    entry = Keystore.in_home(home_dir(home)).entry(name)
    if address:
        print(entry.address)
    elif json:
        print_json(_public(entry))
    else:
        console.print(f"[bold]{entry.name}[/]\n  type    {entry.key_type.value}\n  address {entry.address}\n"
                      f"  pubkey  {entry.pubkey}", highlight=False)


@app.command("export")
def export(
    name: str,
    unsafe: Annotated[bool, typer.Option(
        "--unsafe", help="confirm that the private key may be printed in the clear")] = False,
    home: Home = None,
    json: Json = False,
) -> None:
    """Print key NAME's private key as 64 hex digits, after its passphrase (needs --unsafe).

    Anyone who sees the output controls the account. The hex imports into `veriloco keys add
    --from-hex` (with the same --key-type), `injectived keys unsafe-import-eth-key` (eth_secp256k1)
    and Ethereum wallets.
    """
    if not unsafe:
        raise CommandError("export prints the private key in the clear; add --unsafe to confirm")
    store = Keystore.in_home(home_dir(home))
    entry = store.entry(name)
    key = store.open(name, passphrase(name))
    secret = key.secret_bytes().hex()
    if json:
        print_json({**_public(entry), "private_key_hex": secret})
    else:
        err_console.print(f"private key of {entry.name!r} ({entry.key_type.value}, {entry.address}); keep it secret:",
                          highlight=False)
        print(secret)


@app.command("delete")
def delete(
    name: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    home: Home = None,
    json: Json = False,
) -> None:
    """Remove key NAME from the keyring. Without its mnemonic or an export, the key is gone for good."""
    store = Keystore.in_home(home_dir(home))
    try:
        entry = store.load().get(name)  # a flagged (altered) entry can be deleted too
    except KeyringError as exc:
        raise CommandError(str(exc)) from None
    if not yes:
        if sys.stdin.isatty():
            sure = typer.confirm(f"Delete key {name!r} ({entry.address})? Without its mnemonic or an "
                                 "export it cannot be recovered", default=False, err=True)
        else:  # a script: one line of stdin answers
            sure = sys.stdin.readline().strip().lower() in ("y", "yes")
        if not sure:
            raise CommandError("not deleted (confirm, or add --yes)")
    store.delete(name)
    if json:
        print_json({"deleted": name, "address": entry.address})
    else:
        console.print(f"deleted key [bold]{name}[/] ({entry.address})", highlight=False)
