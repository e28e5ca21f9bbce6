"""Options and helpers shared by the command groups: network, keys, amounts, secrets, spec files."""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import ValidationError

from protocol.rules.spec import RunSpec
from veriloco.errors import CommandError
from veriloco.home import home_dir
from veriloco.keystore import PASSPHRASE_ENV, Keystore

if TYPE_CHECKING:
    from protocol.keys import PrivateKey

Home = Annotated[str | None, typer.Option("--home", help="veriloco home (default $VERILOCO_HOME or ~/.veriloco)")]
Network = Annotated[Path | None, typer.Option("--network", "-n", help="network file (default <home>/network.json)")]
Json = Annotated[bool, typer.Option("--json", help="print one JSON object on stdout (nothing else)")]
KeyName = Annotated[str, typer.Option("--key", "-k", help="name of the key in the keyring")]
Device = Annotated[str, typer.Option("--device", help="where to compute: cpu (default), cuda or cuda:N")]
FullLeafEvery = Annotated[int, typer.Option(
    "--full-leaf-every", min=1, help="hosts store every Nth checkpoint leaf in full and recompute the others "
                                     "when challenged (1: store all); restart with the same --device")]
LiveLeafEvery = Annotated[str, typer.Option(
    "--live-leaf-every", help="hosts store an epoch that can still be challenged this densely: a divisor of "
                              "--full-leaf-every, or auto (every leaf where half the free disk holds the epoch, "
                              "so no challenge costs a recomputation); once the epoch closes it is thinned to "
                              "--full-leaf-every")]
KeepEpochs = Annotated[int | None, typer.Option(
    "--keep-epochs", min=0, help="hosts delete epochs older than N once the chain has closed them, and "
                                 "hosts and validators the global states no open epoch needs (default: keep all)")]
LiveMetrics = Annotated[Path | None, typer.Option(
    "--metrics", help="write each epoch's metrics as it closes to this folder: epochs.csv, members.csv and "
                      "TensorBoard events in tensorboard/ (default: WORKDIR/metrics)")]
AMOUNT_HELP = "a coin: 20INJ (whole INJ) or 20000000000000000000inj (base units)"


def ask_secret(prompt: str, what: str, *, confirm: bool = False) -> str:
    """A secret typed at a terminal (hidden), or one line of stdin when stdin is not a terminal.

    Args:
        prompt: the prompt shown at a terminal (on stderr, so stdout keeps only the result).
        what: names the secret in the error when there is neither a terminal nor a line.
        confirm: at a terminal, ask twice.

    Raises:
        CommandError: no terminal and nothing on stdin.
    """
    if sys.stdin.isatty():
        return str(typer.prompt(prompt, hide_input=True, confirmation_prompt=confirm, err=True))
    line = sys.stdin.readline()
    if not line.strip():
        raise CommandError(f"no terminal to ask for the {what}: pipe it on stdin")
    return line.rstrip("\r\n")


def passphrase(name: str | None = None, *, confirm: bool = False) -> str:
    """The keyring passphrase: ``$VERILOCO_PASSPHRASE``, or asked at the terminal.

    Raises:
        CommandError: neither the variable nor a terminal (a script must set the variable).
    """
    env = os.environ.get(PASSPHRASE_ENV)
    if env is not None:
        return env
    if not sys.stdin.isatty():
        raise CommandError(f"no terminal to ask for the passphrase{f' of key {name!r}' if name else ''}: "
                           f"set {PASSPHRASE_ENV}")
    label = f"Passphrase for key {name!r}" if name else "Passphrase"
    return str(typer.prompt(label, hide_input=True, confirmation_prompt=confirm, err=True))


def open_key(name: str, home: str | None) -> PrivateKey:
    """Unseal a keyring key (passphrase from ``$VERILOCO_PASSPHRASE`` or a prompt)."""
    store = Keystore.in_home(home_dir(home))
    store.entry(name)  # a missing or altered key is refused before any prompt
    return store.open(name, passphrase(name))


def check_device(device: str) -> None:
    """Refuse a ``--device`` this machine cannot compute on, before any work (loads torch).

    Raises:
        CommandError: not cpu/cuda/cuda:N, or CUDA asked for where there is none.
    """
    from trainer.step import resolve_device  # noqa: PLC0415 (torch loads only for commands that compute)

    try:
        resolve_device(device)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def live_leaves(value: str, full_leaf_every: int) -> int | None:
    """``--live-leaf-every``: None for ``auto``, else a divisor of ``--full-leaf-every``.

    Raises:
        CommandError: neither ``auto`` nor a positive divisor of ``full_leaf_every``.
    """
    if value == "auto":
        return None
    if not value.isdigit() or int(value) < 1 or full_leaf_every % int(value):
        raise CommandError(f"--live-leaf-every must be auto or a divisor of --full-leaf-every ({full_leaf_every}), "
                           f"not {value!r}")
    return int(value)


def key_names(home: str | None) -> dict[str, str]:
    """Address -> key name for every (verified) key of the local keyring; no passphrase needed."""
    return Keystore.in_home(home_dir(home)).names()


def read_spec_file(path: Path) -> RunSpec:
    """A run spec from TOML (or canonical JSON). Fractions are strings in TOML: ``lr = "3e-3"``."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}") from None
    if path.suffix == ".json":
        return RunSpec.from_canonical(raw)
    try:
        data: dict[str, Any] = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CommandError(f"{path} is not valid TOML: {exc}") from None
    try:
        return RunSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CommandError(f"{path}: {where}: {first['msg']}") from None
