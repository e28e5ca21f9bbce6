"""Amounts in Cosmos coin notation, read and written the same way everywhere.

Cosmos writes a coin as a whole number of base units followed by the base denom, with no space:
``20000000000000000000inj`` is 20 INJ, since a whole INJ is 10^18 ``inj``. That is what the chain,
``injectived`` and the contract's own messages print, and what the CLI reads. For people, a known
denom also has a display form: the display denom (``INJ``) after a decimal number of whole tokens,
``20INJ`` or ``0.5INJ``. The CLI reads both and prints the display form where a person reads, and
base units wherever a program reads (``--json``, and every amount the contract writes).

A bare number (``20``) is refused: it was read as base units by older versions and as whole tokens
by habit, and nothing about it says which.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from protocol.errors import VerilocoError
from protocol.injective import DECIMALS, DENOM, DISPLAY_DENOM


class CoinError(VerilocoError, ValueError):
    """Text that is not an amount of the expected denom."""


@dataclass(frozen=True)
class Denom:
    """A base denom and, when known, its display denom and decimals (``inj``, ``INJ``, 18)."""

    base: str
    display: str | None = None
    decimals: int = 0


KNOWN: dict[str, Denom] = {DENOM: Denom(DENOM, DISPLAY_DENOM, DECIMALS)}
"""Base denoms with a display form. Others are written in base units only."""

# A number (no sign, no exponent) and a denom, optionally separated by spaces.
_COIN = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z][A-Za-z0-9/:._-]*)?\s*$")


def denom_of(base: str) -> Denom:
    """The :class:`Denom` of base denom ``base`` (with no display form if it is not known)."""
    return KNOWN.get(base, Denom(base))


def parse_amount(text: str, denom: str) -> int:
    """An amount of ``denom`` in base units, from Cosmos notation or the display form.

    ``20000000000000000000inj`` is base units; ``20INJ`` and ``0.5 INJ`` are whole tokens of the
    display denom.

    Args:
        text: what the user typed.
        denom: the base denom expected (the run's).

    Raises:
        CoinError: not an amount, a bare number, another denom, a fraction of a base unit, or
            more decimals than the denom has.
    """
    d = denom_of(denom)
    example = example_forms(d)
    m = _COIN.match(text)
    if not m:
        raise CoinError(f"{text!r} is not an amount (write {example})")
    number, unit = m.groups()
    if unit is None:
        raise CoinError(f"{text!r} has no denom: write {example}")
    if unit == d.base:
        if "." in number:
            raise CoinError(f"{text!r}: {d.base} is the base unit and has no fractions; "
                            f"write {example}")
        return int(number)
    if d.display is not None and unit == d.display:
        # Integer arithmetic: Decimal's default context would round past 28 digits.
        whole, _, fraction = number.partition(".")
        fraction = fraction.rstrip("0")
        if len(fraction) > d.decimals:
            raise CoinError(f"{text!r} has more than {d.decimals} decimals")
        scale: int = 10**d.decimals
        return int(whole) * scale + int(fraction.ljust(d.decimals, "0") or "0")
    known = d.base if d.display is None else f"{d.base} or {d.display}"
    raise CoinError(f"{text!r}: unknown denom {unit!r} (this run pays in {known}; write {example})")


def example_forms(d: Denom) -> str:
    """How to write 20 tokens of ``d``, for error messages."""
    if d.display is None:
        return f"e.g. 1500{d.base}"
    return f"20{d.display} or {20 * 10**d.decimals}{d.base}"


def base_units(value: int | str, denom: str) -> str:
    """Cosmos notation: ``20000000000000000000inj``."""
    return f"{int(value)}{denom}"


def display(value: int | str, denom: str) -> str:
    """The display form, exact: ``20INJ``, ``0.4INJ``, ``0.000000000000000001INJ``; base units for
    a denom without one (``1500stake``)."""
    d = denom_of(denom)
    amount = int(value)
    if d.display is None:
        return base_units(amount, denom)
    if amount < 0:
        return "-" + display(-amount, denom)
    whole, fraction = divmod(amount, 10**d.decimals)
    digits = f"{fraction:0{d.decimals}d}".rstrip("0") if d.decimals else ""
    return f"{whole}{'.' + digits if digits else ''}{d.display}"


def annotate(text: str, denom: str) -> str:
    """``text`` with the display form after every amount in base units of ``denom``:
    ``cannot unbond 25000000000000000000inj`` -> ``cannot unbond 25000000000000000000inj (25INJ)``.

    For messages written in base units (the contract's), shown to a person.
    """
    d = denom_of(denom)
    if d.display is None:
        return text
    pattern = re.compile(rf"(?<![0-9A-Za-z])([0-9]+){re.escape(d.base)}(?![0-9A-Za-z])")
    return pattern.sub(lambda m: f"{m.group(0)} ({display(m.group(1), denom)})", text)
