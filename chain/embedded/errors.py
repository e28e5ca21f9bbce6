"""Errors of the embedded chain.

Three kinds, kept apart because callers react differently:

* :class:`ContractError`: the contract ran and refused (``{"error": "..."}``); ``str(err)`` is the
  contract's own message. It is a :class:`chain.ledger.ContractError`, so code written against the
  Ledger catches it unchanged.
* :class:`VmError`: the wasm did not complete: a trap, ``abort`` (a panic), running out of gas or
  time, or a malformed Region. A correct contract never causes one.
* :class:`ChainError` (the base): the chain itself refused the request: insufficient funds,
  unknown contract, invalid coins or addresses, invalid wasm, unsupported messages.

A failed transaction changes nothing, whatever the error.
"""

from __future__ import annotations

from chain.ledger import ContractError as LedgerContractError
from chain.ledger import LedgerError


class ChainError(LedgerError):
    """The embedded chain refused a request."""


class InsufficientFundsError(ChainError):
    """An account (or the contract) does not hold what a transfer needs."""


class InvalidWasmError(ChainError):
    """``store_code`` refused a module that wasmd would refuse too (static validation)."""


class ContractError(ChainError, LedgerContractError):
    """The contract returned ``{"error": message}``.

    Attributes:
        message: the contract's message, verbatim.
        contract: the contract's address.
        entry_point: ``instantiate``, ``execute`` or ``query``.
    """

    def __init__(self, message: str, *, contract: str = "", entry_point: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.contract = contract
        self.entry_point = entry_point


class VmError(ChainError):
    """The wasm execution failed: trap, abort, bad Region, unsupported import."""


class OutOfGasError(VmError):
    """The call used up its fuel (the embedded chain's gas)."""
