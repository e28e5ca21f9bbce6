"""Errors of the embedded chain.

Three kinds, kept apart because callers react differently:

* :class:`chain.errors.ContractError` (the one every backend raises): the contract ran and refused
  (``{"error": "..."}``); ``str(err)`` is the contract's own message.
* :class:`VmError`: the wasm did not complete: a trap, ``abort`` (a panic), running out of gas or
  time, or a malformed Region. A correct contract never causes one.
* :class:`ChainError` (the base): the chain itself refused the request: insufficient funds,
  unknown contract, invalid coins or addresses, invalid wasm, unsupported messages.

A failed transaction changes nothing, whatever the error.
"""

from __future__ import annotations

from chain.errors import LedgerError


class ChainError(LedgerError):
    """The embedded chain refused a request."""


class InsufficientFundsError(ChainError):
    """An account (or the contract) does not hold what a transfer needs."""


class InvalidWasmError(ChainError):
    """``store_code`` refused a module that wasmd would refuse too (static validation)."""


class VmError(ChainError):
    """The wasm execution failed: trap, abort, bad Region, unsupported import."""


class OutOfGasError(VmError):
    """The call used up its fuel (the embedded chain's gas)."""
