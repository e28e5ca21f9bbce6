"""Options and helpers shared by the command groups: network, keys, amounts, spec files."""

from __future__ import annotations

import os
import re
import tomllib
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from protocol.injective import DENOM_DECIMALS
from protocol.keys import PrivateKey
from protocol.rules.spec import RunSpec
from veriloco.errors import CommandError
from veriloco.home import home_dir
from veriloco.keystore import PASSPHRASE_ENV, Keystore

Home = Annotated[str | None, typer.Option("--home", help="veriloco home (default $VERILOCO_HOME or ~/.veriloco)")]
Network = Annotated[Path | None, typer.Option("--network", "-n", help="network file (default <home>/network.json)")]
Json = Annotated[bool, typer.Option("--json", help="print JSON")]
KeyName = Annotated[str, typer.Option("--key", "-k", help="name of the key in the keyring")]

_AMOUNT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")


def open_key(name: str, home: str | None) -> PrivateKey:
    """Unseal a keyring key (passphrase from ``$VERILOCO_PASSPHRASE`` or a prompt)."""
    store = Keystore.in_home(home_dir(home))
    passphrase = os.environ.get(PASSPHRASE_ENV)
    if passphrase is None:
        passphrase = typer.prompt(f"Passphrase for key {name!r}", hide_input=True)
    return store.open(name, passphrase)


def parse_amount(text: str, denom: str) -> int:
    """``"1500"`` (base units), ``"20INJ"`` or ``"0.5 inj"`` (whole tokens) -> base units.

    Raises:
        CommandError: not an amount, or a unit other than the run's.
    """
    m = _AMOUNT.match(text)
    if not m:
        raise CommandError(f"{text!r} is not an amount (e.g. 1500 or 20{denom.upper()})")
    number, unit = m.groups()
    if not unit:
        if "." in number:
            raise CommandError(f"{text!r}: base units are whole numbers; add the unit for tokens (20{denom.upper()})")
        return int(number)
    if unit.lower() != denom.lower() or denom not in DENOM_DECIMALS:
        raise CommandError(f"{text!r}: unknown unit {unit!r} (this run pays in {denom})")
    try:
        value = Decimal(number) * Decimal(10) ** DENOM_DECIMALS[denom]
    except InvalidOperation:
        raise CommandError(f"{text!r} is not an amount") from None
    if value != value.to_integral_value():
        raise CommandError(f"{text!r} has more decimals than {denom} allows")
    return int(value)


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
