"""The chain's errors, shared by the Ledger and both backends.

Two kinds, because callers react differently:

* :class:`ContractError`: the contract ran and refused; ``str(err)`` is the contract's own
  message, the same text on the embedded chain and on a real node.
* :class:`LedgerError` (the base): the request could not be carried out for another reason
  (connection, timeout, malformed answer, a transaction the chain itself refused).

A transaction that failed inside a block still cost its signer a fee on a real chain; the error
says how much in :attr:`LedgerError.fee`, so funds audits (``chain.metered``) can count it.
Backend-specific subclasses live beside their backend (``chain.embedded.errors``,
``chain.cosmos.errors``).
"""

from __future__ import annotations

from protocol.errors import VerilocoError


class LedgerError(VerilocoError):
    """The ledger could not carry out a request (connection, timeout, malformed response, failed tx).

    Args:
        message: one readable line.
        tx_hash: the transaction, when it reached a block ("" otherwise).
        fee: what the signer paid for the failed transaction, in the ledger's denom (0 when it never
            reached a block, and always on the embedded chain).
        gas_used: gas the failed transaction used in its block (0 when it never reached one).
    """

    message: str
    tx_hash: str
    fee: int
    gas_used: int

    def __init__(self, message: str, *, tx_hash: str = "", fee: int = 0, gas_used: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.tx_hash = tx_hash
        self.fee = fee
        self.gas_used = gas_used


class ContractError(LedgerError):
    """The contract refused a message or query; ``str(err)`` is the contract's readable reason.

    Args:
        message: the contract's message, verbatim.
        contract: the contract's address, when the backend knows it.
        entry_point: ``instantiate``, ``execute`` or ``query``, when the backend knows it.
        raw_log: what a real node said, in full ("" on the embedded chain).
        tx_hash, fee, gas_used: see :class:`LedgerError`.
    """

    contract: str
    entry_point: str
    raw_log: str

    def __init__(self, message: str, *, contract: str = "", entry_point: str = "", raw_log: str = "",
                 tx_hash: str = "", fee: int = 0, gas_used: int = 0) -> None:
        super().__init__(message, tx_hash=tx_hash, fee=fee, gas_used=gas_used)
        self.contract = contract
        self.entry_point = entry_point
        self.raw_log = raw_log


class NodeUnreachable(LedgerError):
    """The chain's node did not answer within the reconnect timeout (it is down, or unreachable).

    Args:
        message: one readable line.
        url: the node's address.
    """

    url: str

    def __init__(self, message: str, *, url: str = "") -> None:
        super().__init__(message)
        self.url = url
