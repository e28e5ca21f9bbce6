"""The embedded backend of the Ledger: :class:`EmbeddedBackend` moves a Ledger's bytes to the
contract on an in-process :class:`~chain.embedded.EmbeddedChain`.

::

    chain = EmbeddedChain(genesis_balances={operator.address(): {"inj": 10**24}})
    ledger = deploy_embedded(chain, operator, spec, initial_model_hash, treasury=treasury)
    ledger.bond(host_key, "host", "http://127.0.0.1:8700", 5_000)

Signing keys are used only for their address: the embedded chain checks no signatures and
charges no fees (``TxResult.fee`` is 0). Blocks: every transaction opens one block;
:meth:`EmbeddedBackend.wait_for_height` produces empty blocks until the height is reached, so
code written for a real chain (where blocks come by themselves) runs unchanged and instantly.

It may be called from several threads at once, as a node's RPC can: each call is atomic under the
chain's lock (:mod:`chain.embedded.chain`, "Threads").
"""

from __future__ import annotations

from typing import Any

from chain.embedded.chain import EmbeddedChain
from chain.ledger import ContractBackend, Ledger, instantiate_msg
from chain.types import TxResult
from chain.wasm_artifact import load_contract_wasm
from protocol.keys import PrivateKey
from protocol.rules.spec import RunSpec


class EmbeddedBackend(ContractBackend):
    """A deployed contract on an :class:`EmbeddedChain`.

    Args:
        chain: the chain the contract lives on.
        contract_address: the contract.
        denom: the run's denom (funds attached to executes, balances).
    """

    def __init__(self, chain: EmbeddedChain, contract_address: str, denom: str) -> None:
        self.chain = chain
        self._contract = contract_address
        self._denom = denom

    @property
    def denom(self) -> str:
        return self._denom

    @property
    def contract_address(self) -> str:
        return self._contract

    def execute(self, key: PrivateKey, msg: dict[str, Any], funds: int = 0) -> TxResult:
        coins = {self._denom: funds} if funds else None
        return self.chain.execute(key.address(self.chain.prefix), self._contract, msg, funds=coins)

    def query(self, msg: dict[str, Any]) -> Any:
        return self.chain.query(self._contract, msg)

    def height(self) -> int:
        return self.chain.height

    def balance(self, address: str) -> int:
        return self.chain.balance(address, self._denom)

    def wait_for_height(self, height: int, timeout: float = 60.0) -> int:
        """Produce empty blocks until ``height`` (returns at once if it is already reached)."""
        with self.chain.lock:  # the height read and the blocks made: one step, whoever else calls
            if height > self.chain.height:
                self.chain.advance_blocks(height - self.chain.height)
            return self.chain.height

    def raw(self, key: bytes) -> bytes | None:
        return self.chain.raw_storage(self._contract, key)

    def store_code(self, key: PrivateKey, wasm: bytes) -> int:
        """Upload ``wasm`` (a new code id even for bytes already stored, as on wasmd)."""
        code_id = self.chain.store_code(key.address(self.chain.prefix), wasm).code_id
        assert code_id is not None
        return code_id

    def migrate(self, key: PrivateKey, code_id: int, msg: dict[str, Any]) -> TxResult:
        """Migrate the contract to ``code_id`` as ``key`` (the chain admits only the admin)."""
        return self.chain.migrate(key.address(self.chain.prefix), self._contract, code_id, msg)

    def end_block(self) -> None:
        self.chain.seal_block()

    def mine(self, blocks: int = 1) -> int:
        """Produce ``blocks`` empty blocks; returns the new height."""
        return self.chain.advance_blocks(blocks)


def deploy_embedded(
    chain: EmbeddedChain,
    key: PrivateKey,
    spec: RunSpec,
    initial_model_hash: str,
    treasury: str,
    admin: str | None = None,
    *,
    wasm: bytes | None = None,
    label: str = "veriloco",
    settle_page: int | None = None,
) -> Ledger:
    """Store the contract (the committed ``.wasm`` unless ``wasm`` is given), instantiate it for
    ``spec`` as ``key`` (with ``settle_page``, see :func:`chain.ledger.instantiate_msg`), and
    return a Ledger on it.

    ``admin`` becomes the chain's admin of the contract (who may migrate it) and the ``admin``
    the contract records; None (the default) deploys an immutable run.

    Raises:
        ContractError: the contract refused the instantiate message (e.g. a non-canonical spec).
    """
    sender = key.address(chain.prefix)
    code_id = chain.store_code(sender, wasm if wasm is not None else load_contract_wasm()).code_id
    assert code_id is not None
    msg = instantiate_msg(spec, initial_model_hash, treasury, admin, settle_page)
    address = chain.instantiate(sender, code_id, msg, label=label, admin=admin).contract_address
    assert address is not None
    return Ledger(EmbeddedBackend(chain, address, spec.economics.denom))
