"""The embedded backend: an in-process CosmWasm chain running the contract's ``.wasm`` on wasmtime.

Modules, one concept each: ``addresses`` (bech32, contract addresses), ``state`` (journaled
storage for atomic transactions), ``bank`` (balances and transfers), ``vm`` (the CosmWasm
interface_version_8 host: static checks, Regions, imports, gas), ``chain`` (blocks, transactions,
events, save/load), ``backend`` (the Ledger's transport over it: ``EmbeddedBackend``,
``deploy_embedded``). See ``docs/chain.md`` for how it maps to wasmd.
"""

from chain.embedded.addresses import AddressCodec, AddressError, contract_address
from chain.embedded.backend import EmbeddedBackend, deploy_embedded
from chain.embedded.chain import CodeInfo, ContractInfo, EmbeddedChain
from chain.embedded.errors import (
    ChainError,
    InsufficientFundsError,
    InvalidWasmError,
    OutOfGasError,
    VmError,
)
from chain.embedded.types import Coin
from chain.errors import ContractError
from chain.types import Event, TxResult

__all__ = [
    "AddressCodec",
    "AddressError",
    "ChainError",
    "CodeInfo",
    "Coin",
    "ContractError",
    "ContractInfo",
    "EmbeddedBackend",
    "EmbeddedChain",
    "Event",
    "InsufficientFundsError",
    "InvalidWasmError",
    "OutOfGasError",
    "TxResult",
    "VmError",
    "contract_address",
    "deploy_embedded",
]
