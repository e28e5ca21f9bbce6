"""Field types shared by every boundary model: amounts, decimals, basis points, addresses.

No float ever crosses a boundary: fractional quantities are :data:`Dec` (a ``Decimal`` that
serializes as its canonical decimal string) and money is :data:`Amount` (an integer string of base
units, at most ``2^128 - 1``, the CosmWasm ``Uint128`` convention).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer

from protocol.keys import is_address
from protocol.rules.encoding import EncodingError, canonical_decimal
from protocol.rules.limits import BPS_DENOMINATOR, MAX_BLOCKS

U128_MAX = 2**128 - 1
_AMOUNT = re.compile(r"^(0|[1-9][0-9]{0,38})$")
_DECIMAL = re.compile(r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?$")


class Boundary(BaseModel):
    """Base for every model that crosses a boundary: unknown fields are errors, values immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def _amount(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError("an amount is an integer string of base units, e.g. \"1000000\"")
    text = str(value)
    if not _AMOUNT.match(text) or int(text) > U128_MAX:
        raise ValueError(f"amount {text!r} is not an integer in [0, 2^128)")
    return text


Amount = Annotated[str, BeforeValidator(_amount)]
"""Base units as a canonical integer string (``"0"``, ``"1500"``), at most ``2^128 - 1``."""


def _decimal(value: Any) -> Decimal:
    if isinstance(value, float):
        raise ValueError("floats are ambiguous here; write the number as a string, e.g. \"0.001\"")
    if isinstance(value, bool):
        raise ValueError("expected a decimal number, got a boolean")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError("decimal must be finite")
        return value
    if isinstance(value, str) and _DECIMAL.match(value):
        return Decimal(value)
    raise ValueError(f"{value!r} is not a decimal string like \"0.7\" or \"1e-3\"")


def _serialize_decimal(value: Decimal) -> str:
    try:
        return canonical_decimal(value)
    except EncodingError as exc:  # pragma: no cover - validated on the way in
        raise ValueError(str(exc)) from None


Dec = Annotated[Decimal, BeforeValidator(_decimal), PlainSerializer(_serialize_decimal, return_type=str)]
"""A finite decimal, given as a string (or int) and serialized as its canonical decimal string."""

Bps = Annotated[int, Field(ge=0, le=BPS_DENOMINATOR, strict=True)]
"""A fraction in basis points (1/10000)."""

COUNT_MAX = 2**31 - 1
"""The largest count or epoch number: fits a u32 in the contract and an i32 anywhere else."""

Count = Annotated[int, Field(ge=0, le=COUNT_MAX, strict=True)]
"""A non-negative count that fits everywhere (u32 in the contract)."""

Blocks = Annotated[int, Field(ge=1, le=MAX_BLOCKS, strict=True)]
"""A duration in blocks."""


def _address(value: str) -> str:
    if not is_address(value, prefix=None):
        raise ValueError(f"{value!r} is not a lowercase bech32 address")
    return value


Address = Annotated[str, AfterValidator(_address)]
"""A bech32 account or contract address (any prefix; the chain checks its own)."""
