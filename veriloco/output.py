"""Printing for the CLI: Rich tables for people on stdout, ``--json`` for programs, progress on stderr.

The rules every command follows (and ``docs/operators.md`` states for scripts):

* stdout carries the result only: a table or a few lines for a person, or, with ``--json``, exactly
  one JSON object and nothing else;
* every JSON object carries ``schema_version`` (:data:`SCHEMA_VERSION`), bumped when a field
  changes meaning or goes away (adding a field does not bump it);
* amounts in JSON are strings of base units (Cosmos' convention, as the contract writes them),
  with the denom beside them where a document has amounts; people see the display form (``20INJ``);
* a transaction is ``{"hash", "height", "gas_used", "fee"}`` (:func:`tx_json`);
* progress, prompts, warnings and logs go to stderr (:data:`err_console`, ``logging``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from chain.types import TxResult

SCHEMA_VERSION = 2
"""The version of every ``--json`` document's layout (2: ``epoch list`` prints each epoch's
``counts`` instead of its four address lists)."""

# Logs, CI and docs are not terminals; Rich would squeeze tables into 80 columns there. Text lines
# are never wrapped (soft_wrap): a mnemonic or a path must stay on one line to be copied.
console = Console(width=None if sys.stdout.isatty() else 140, soft_wrap=True)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 140, soft_wrap=True)


def to_jsonable(value: Any) -> Any:
    """Pydantic models, lists and dicts of them -> plain JSON values."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    return value


def json_document(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` as a JSON document: plain values plus ``schema_version``."""
    return {"schema_version": SCHEMA_VERSION, **to_jsonable(fields)}


def print_json(fields: dict[str, Any]) -> None:
    """Machine-readable output: one JSON object on stdout (with ``schema_version``), nothing else."""
    print(json.dumps(json_document(fields), indent=1, sort_keys=True), flush=True)


def tx_json(result: TxResult) -> dict[str, Any]:
    """A transaction for ``--json``: hash, block height, gas used and fee (base units, a string)."""
    return {"hash": result.tx_hash, "height": result.height, "gas_used": result.gas_used, "fee": str(result.fee)}


def tx_line(result: TxResult) -> str:
    """A transaction for people, its whole hash (to paste into an explorer or ``injectived q tx``):
    ``tx 1A2B…(64 hex digits) at height 133``."""
    return f"tx {result.tx_hash} at height {result.height}"


def table(title: str, columns: list[str], rows: list[list[Any]]) -> Table:
    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c)
    for row in rows:
        t.add_row(*[("" if v is None else str(v)) for v in row])
    return t
