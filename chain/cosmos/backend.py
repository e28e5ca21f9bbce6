"""The ``cosmos`` :class:`~chain.ledger.ContractBackend`: the veriloco contract on a real CosmWasm chain.

    from chain.cosmos import CosmosChain, CosmosBackend, injective
    from chain.ledger import Ledger, instantiate_msg

    chain = CosmosChain("grpc+http://127.0.0.1:9900", injective("veriloco-devnet-1"))
    backend = CosmosBackend.deploy(chain, operator_key, instantiate_msg(spec, theta0, treasury))
    ledger = Ledger(backend)                 # typed calls, exactly as on the embedded chain
    # later, another process:
    ledger = Ledger(CosmosBackend(chain, backend.contract_address))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chain.cosmos.chain import CosmosChain, Funds, PendingTx
from chain.ledger import ContractBackend
from chain.types import TxResult
from chain.wasm_artifact import load_contract_wasm
from protocol.keys import PrivateKey


class CosmosBackend(ContractBackend):
    """A deployed contract on a :class:`CosmosChain`.

    Args:
        chain: the connection.
        contract_address: the contract.
        gas_limit: sign every execute with this gas limit instead of simulating first (None:
            simulate; see :class:`CosmosChain`).
    """

    def __init__(self, chain: CosmosChain, contract_address: str, *, gas_limit: int | None = None) -> None:
        self.chain = chain
        self._contract = contract_address
        self.gas_limit = gas_limit
        self.deploy_txs: dict[str, TxResult] = {}
        """The transactions :meth:`deploy` sent (``store_code`` unless a code was reused, ``instantiate``)."""

    @classmethod
    def deploy(cls, chain: CosmosChain, key: PrivateKey, instantiate_msg: Mapping[str, Any], *,
               wasm: bytes | None = None, label: str = "veriloco", admin: str | None = None,
               code_id: int | None = None, progress: Callable[[str], None] | None = None,
               gas_limit: int | None = None) -> CosmosBackend:
        """Store the contract's code (or reuse a code with the same sha256) and instantiate it.

        Args:
            wasm: the contract (default: the committed ``contracts/artifacts/veriloco.wasm``).
            code_id: instantiate this code instead of storing ``wasm``.
            admin: the chain's admin of the contract, who may migrate it (default: the instantiate
                message's ``admin``, which the contract records; they must agree). None: an
                immutable run.
            progress: told each step as it starts, in words.
            gas_limit: sign the upload, the instantiation and the backend's executes with this
                limit instead of simulating.
        """
        declared = instantiate_msg.get("admin")
        if admin is None:
            admin = declared
        elif declared is not None and declared != admin:
            raise ValueError(f"admin {admin} differs from the instantiate message's admin {declared}")
        say = progress or (lambda _: None)
        txs: dict[str, TxResult] = {}
        if code_id is None:
            code = wasm if wasm is not None else load_contract_wasm()
            say(f"storing the contract's code ({len(code) // 1024} KiB) or reusing a stored copy")
            code_id, stored = chain.store_code(key, code, gas_limit=gas_limit)
            if stored is not None:
                txs["store_code"] = stored
        say(f"instantiating code {code_id}")
        address, txs["instantiate"] = chain.instantiate(key, code_id, instantiate_msg, label=label, admin=admin,
                                                        gas_limit=gas_limit)
        backend = cls(chain, address, gas_limit=gas_limit)
        backend.deploy_txs = txs
        return backend

    @property
    def denom(self) -> str:
        return self.chain.config.denom

    @property
    def contract_address(self) -> str:
        return self._contract

    def execute(self, key: PrivateKey, msg: dict[str, Any], funds: Funds = 0) -> TxResult:
        return self.chain.execute_contract(key, self._contract, msg, funds or None, gas_limit=self.gas_limit)

    def submit(self, key: PrivateKey, msg: dict[str, Any], funds: Funds = 0, *,
               gas_limit: int | None = None) -> PendingTx:
        """Broadcast without waiting for the block; pair with :meth:`wait` (pipelining)."""
        return self.chain.submit_execute(key, self._contract, msg, funds or None,
                                         gas_limit=gas_limit if gas_limit is not None else self.gas_limit)

    def wait(self, pending: PendingTx, timeout: float | None = None) -> TxResult:
        return self.chain.wait(pending, timeout)

    def query(self, msg: dict[str, Any]) -> Any:
        return self.chain.query_contract(self._contract, msg)

    def height(self) -> int:
        return self.chain.height()

    def balance(self, address: str) -> int:
        return self.chain.balance(address, self.denom)

    def wait_for_height(self, height: int, timeout: float = 60.0) -> int:
        return self.chain.wait_for_height(height, timeout)

    def raw(self, key: bytes) -> bytes | None:
        return self.chain.raw_query(self._contract, key)

    def store_code(self, key: PrivateKey, wasm: bytes) -> int:
        """Upload ``wasm`` as a new code (never reusing a stored copy); its code id."""
        code_id, _ = self.chain.store_code(key, wasm, reuse=False, gas_limit=self.gas_limit)
        return code_id

    def migrate(self, key: PrivateKey, code_id: int, msg: dict[str, Any]) -> TxResult:
        """Migrate the contract to ``code_id`` as ``key`` (the chain admits only the admin)."""
        return self.chain.migrate(key, self._contract, code_id, msg, gas_limit=self.gas_limit)
