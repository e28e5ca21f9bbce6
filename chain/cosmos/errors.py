"""Turning what a Cosmos node says about a failure into the Ledger's two error types.

A contract's refusal travels inside wasmd's error text, the same way on every wasmd-based chain::

    failed to execute message; message index: 0: bond: funds must be ...: execute wasm contract failed
    codespace: wasm, code: 5 ... (simulation, gRPC details; may carry a stack and "With gas wanted")
    bond: ...: query wasm contract failed (smart query)

:func:`contract_message` finds the contract's own sentence in it (a
:class:`chain.errors.ContractError`, with the node's full text in ``raw_log``); everything else is a
:class:`CosmosTxError` carrying the node's text.
"""

from __future__ import annotations

import re

from chain.errors import ContractError, LedgerError

_WASM_FAILURE = re.compile(r"(?s)^(?P<msg>.*?): (?:execute|instantiate|query|migrate|sudo|reply) wasm contract failed")
_PREFIXES = (
    re.compile(r"^.*?failed to execute message; message index: \d+: "),
    re.compile(r"^.*?rpc error: code = \w+ desc = "),
    re.compile(r"^codespace: \w+, code: \d+(?:, log)?: "),
)
_WRONG_SEQUENCE = re.compile(r"account sequence mismatch, expected (\d+), got (\d+)")

# Cosmos SDK error codes (codespace "sdk") the client reacts to.
CODE_WRONG_SEQUENCE = 32
CODE_TX_IN_MEMPOOL_CACHE = 19
CODE_INSUFFICIENT_FUNDS = 5
CODE_OUT_OF_GAS = 11
CODE_INSUFFICIENT_FEE = 13


class CosmosTxError(LedgerError):
    """A transaction was refused or failed for a reason other than the contract's.

    Args:
        message: one readable line.
        code, codespace: the SDK's error code, when known.
        tx_hash, fee, gas_used: see :class:`chain.errors.LedgerError`.
    """

    code: int
    codespace: str

    def __init__(self, message: str, *, code: int = 0, codespace: str = "", tx_hash: str = "", fee: int = 0,
                 gas_used: int = 0) -> None:
        super().__init__(message, tx_hash=tx_hash, fee=fee, gas_used=gas_used)
        self.code = code
        self.codespace = codespace


def contract_message(log: str) -> str | None:
    """The contract's own error message in a node's error text, or None if it is not a contract error."""
    first = log.strip()
    match = _WASM_FAILURE.search(first)
    if match is None:
        return None
    msg = match.group("msg")
    changed = True
    while changed:
        changed = False
        for prefix in _PREFIXES:
            stripped = prefix.sub("", msg, count=1)
            if stripped != msg:
                msg, changed = stripped, True
    return msg.strip()


def wrong_sequence(log: str) -> int | None:
    """The sequence the chain expected, if ``log`` is an account-sequence mismatch."""
    match = _WRONG_SEQUENCE.search(log)
    return int(match.group(1)) if match else None


def classify(log: str, *, code: int = 0, codespace: str = "", tx_hash: str = "", fee: int = 0,
             gas_used: int = 0) -> LedgerError:
    """The error to raise for a failed simulation, CheckTx or DeliverTx.

    Args:
        log: what the node said.
        code, codespace: the SDK's error code, when known.
        tx_hash, fee, gas_used: for a transaction that failed in a block: its hash, the fee its signer
            paid and the gas it used.
    """
    message = contract_message(log)
    if message is not None:
        return ContractError(message, raw_log=log, tx_hash=tx_hash, fee=fee, gas_used=gas_used)
    line = " ".join(log.split())
    if len(line) > 500:
        line = line[:500] + "…"
    where = f" (code {codespace}/{code})" if code else ""
    return CosmosTxError(f"transaction failed{where}: {line}", code=code, codespace=codespace, tx_hash=tx_hash,
                         fee=fee, gas_used=gas_used)
