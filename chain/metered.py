"""A transparent backend that adds up the fees paid, for funds audits on fee-charging chains.

Every transaction sent through it is charged to its signer: the fee of a successful one
(``TxResult.fee``) and of a refused one that was included in a block, when the backend reports it
(``ContractError.fee``: a real chain charges for a failed transaction too). On the embedded
chain every fee is 0. The sum of the audited balances plus :attr:`MeteredBackend.fees_paid` then
stays constant.
"""

from __future__ import annotations

from typing import Any

from chain.errors import ContractError
from chain.ledger import ContractBackend
from chain.types import TxResult
from protocol.keys import PrivateKey


class MeteredBackend(ContractBackend):
    """Wraps a backend and records the fees of every transaction sent through it.

    Args:
        inner: the backend that sends the transactions.
    """

    def __init__(self, inner: ContractBackend) -> None:
        self.inner = inner
        self.fees_paid = 0
        self.fees_by: dict[str, int] = {}  # signer address -> fees it paid

    def _charge(self, key: PrivateKey, fee: int) -> None:
        if fee:
            self.fees_paid += fee
            address = key.address()
            self.fees_by[address] = self.fees_by.get(address, 0) + fee

    @property
    def denom(self) -> str:
        return self.inner.denom

    @property
    def contract_address(self) -> str:
        return self.inner.contract_address

    def execute(self, key: PrivateKey, msg: dict[str, Any], funds: int = 0) -> TxResult:
        try:
            result = self.inner.execute(key, msg, funds)
        except ContractError as exc:
            self._charge(key, exc.fee)
            raise
        self._charge(key, result.fee)
        return result

    def query(self, msg: dict[str, Any]) -> Any:
        return self.inner.query(msg)

    def height(self) -> int:
        return self.inner.height()

    def balance(self, address: str) -> int:
        return self.inner.balance(address)

    def wait_for_height(self, height: int, timeout: float = 60.0) -> int:
        return self.inner.wait_for_height(height, timeout)

    def raw(self, key: bytes) -> bytes | None:
        return self.inner.raw(key)

    def end_block(self) -> None:
        self.inner.end_block()
