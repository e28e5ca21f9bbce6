"""Canonical JSON: one byte string for one value, shared by Python and the Rust contract.

Rules (see ``docs/protocol.md``, "Canonical JSON"):

* objects with keys sorted by code point, no whitespace (``{"a":1,"b":[true,null]}``);
* strings UTF-8, not ASCII-escaped; the escapes are exactly those of ``json.dumps`` and
  ``serde_json`` (which agree);
* integers only, in the signed 64-bit range; floats, NaN and infinities are refused. Fractional
  quantities travel as canonical decimal strings (:func:`canonical_decimal`), money as integer
  strings of base units (the CosmWasm ``Uint128`` convention).

These are exactly the bytes ``serde_json::to_string(&serde_json::Value)`` produces for the same
value, which is how the contract checks that a run spec it receives is canonical.
"""

from __future__ import annotations

import json
from decimal import Decimal, InvalidOperation
from typing import Any

from protocol.errors import VerilocoError

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1


class EncodingError(VerilocoError, ValueError):
    """A value cannot be encoded canonically, or bytes are not the canonical encoding."""


def _check(value: Any, path: str) -> None:
    # Walk the value once so the error names where the offending item is.
    if value is None or isinstance(value, (bool, str)):
        return
    if isinstance(value, int):
        if not I64_MIN <= value <= I64_MAX:
            raise EncodingError(f"{path}: integer {value} is outside the signed 64-bit range")
        return
    if isinstance(value, float):
        raise EncodingError(f"{path}: floats are not canonical; use a decimal string")
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise EncodingError(f"{path}: object key {key!r} is not a string")
            _check(item, f"{path}.{key}")
        return
    raise EncodingError(f"{path}: {type(value).__name__} is not a JSON value")


def canonical_json(value: Any) -> bytes:
    """Encode a JSON value (dicts, lists, str, int, bool, None) canonically.

    Args:
        value: the value; floats and out-of-range integers are refused.

    Returns:
        The canonical UTF-8 bytes.
    """
    _check(value, "$")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def parse_canonical(data: bytes | str) -> Any:
    """Parse JSON and insist that it was canonically encoded.

    Args:
        data: the bytes (or text) received.

    Raises:
        EncodingError: invalid JSON, a float, or any difference from the canonical bytes.
    """
    raw = data.encode() if isinstance(data, str) else data
    try:
        value = json.loads(raw, parse_float=_refuse_float, parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, EncodingError):
            raise
        raise EncodingError(f"not valid JSON: {exc}") from None
    if canonical_json(value) != raw:
        raise EncodingError("JSON is valid but not canonical (key order, whitespace or escapes)")
    return value


def _refuse_float(text: str) -> float:
    raise EncodingError(f"float {text} is not canonical; use a decimal string")


def _refuse_constant(text: str) -> float:
    raise EncodingError(f"{text} is not a JSON value")


def canonical_decimal(value: Decimal | str | int) -> str:
    """The canonical text of a finite decimal: no exponent, no trailing zeros, no ``+``, ``0`` for zero.

    ``canonical_decimal("1e-3") == "0.001"``, ``canonical_decimal("2.50") == "2.5"``.

    Args:
        value: a Decimal, int, or decimal string.

    Raises:
        EncodingError: not a finite decimal number.
    """
    if isinstance(value, float):
        raise EncodingError("floats are not canonical; pass a decimal string")
    try:
        d = Decimal(value) if not isinstance(value, Decimal) else value
    except (InvalidOperation, ValueError):
        raise EncodingError(f"{value!r} is not a decimal number") from None
    if not d.is_finite():
        raise EncodingError(f"{value!r} is not a finite decimal number")
    if d == 0:
        return "0"
    text = format(d.normalize(), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text
