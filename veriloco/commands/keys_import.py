"""``veriloco keys import-injectived``: a key from an injectived keyring, sealed in veriloco's
(``veriloco.injectived_keyring``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from veriloco.commands.common import Home, Json, ask_secret, passphrase
from veriloco.errors import CommandError
from veriloco.home import home_dir
from veriloco.keystore import Keystore
from veriloco.output import console, print_json

KEYRING_PASSPHRASE_ENV = "VERILOCO_INJECTIVED_PASSPHRASE"


def _binary(given: Path | None) -> tuple[Path, dict[str, str]]:
    """The injectived to ask, and its environment: ``--injectived``, else one on PATH, else the
    pinned one of the devnet extra."""
    if given is not None or shutil.which("injectived"):
        return Path(given or str(shutil.which("injectived"))), dict(os.environ)
    from chain.devnet import _node_env, injectived_binary  # noqa: PLC0415 (only without an injectived on PATH)

    binary = injectived_binary()
    return binary, _node_env(binary)


def import_injectived(
    name: Annotated[str, typer.Argument(help="the name in veriloco's keyring")],
    from_key: Annotated[str | None, typer.Option("--from", help="the key's name in injectived's keyring "
                                                               "(default: NAME)")] = None,
    keyring_dir: Annotated[Path, typer.Option(help="injectived's keyring folder (its --keyring-dir / --home)")]
    = Path("~/.injectived"),
    keyring_backend: Annotated[str, typer.Option(help="file (asks its passphrase) or test")] = "file",
    injectived: Annotated[Path | None, typer.Option(help="the injectived program (default: on PATH, else the "
                                                         "devnet extra's)")] = None,
    home: Home = None,
    json: Json = False,
) -> None:
    """Import a key from an injectived keyring (file backend: its passphrase is asked, or read from
    $VERILOCO_INJECTIVED_PASSPHRASE / one line of stdin) and seal it under veriloco's passphrase.
    The key must derive the address injectived shows for it."""
    from veriloco.injectived_keyring import read_injectived_key  # noqa: PLC0415 (only this command)

    if keyring_backend not in ("file", "test"):
        raise CommandError(f"--keyring-backend {keyring_backend!r}: file or test")
    store = Keystore.in_home(home_dir(home))
    if any(k.name == name for k in store.load().keys):
        raise CommandError(f"a key named {name!r} exists already (keys delete {name} first, or choose another name)")
    binary, env = _binary(injectived)
    unlock = ""
    if keyring_backend == "file":
        unlock = os.environ.get(KEYRING_PASSPHRASE_ENV) or ask_secret("injectived keyring passphrase",
                                                                       "injectived keyring passphrase")

    def run(argv: list[str], stdin: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, env=env, timeout=60, check=False)

    key = read_injectived_key(binary, from_key or name, keyring_dir.expanduser(), "file" if keyring_backend == "file"
                              else "test", unlock, run)
    entry = store.add(name, key, passphrase(name, confirm=True))
    if json:
        print_json({"name": entry.name, "key_type": entry.key_type.value, "address": entry.address,
                    "pubkey": entry.pubkey, "from": from_key or name})
        return
    console.print(f"[bold]{entry.name}[/]  {entry.address}  ({entry.key_type.value}, from injectived's "
                  f"{keyring_backend} keyring in {keyring_dir})", highlight=False)
