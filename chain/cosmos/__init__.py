"""The ``cosmos`` backend: the veriloco contract on a real Cosmos SDK chain, through cosmpy over gRPC.

``config`` (chain quirks: :class:`ChainConfig`, :func:`injective`, :func:`wasmd`), ``client``
(cosmpy's LedgerClient, reconnecting, reading any account type through the config), ``chain``
(signing, sequences, pipelining, wasm upload/instantiate/execute/query, bank, blocks),
``backend`` (:class:`CosmosBackend`, the Ledger's transport), ``errors`` (node text ->
ContractError / LedgerError). See ``docs/devnet.md``.
"""

from chain.cosmos.backend import CosmosBackend
from chain.cosmos.chain import CosmosChain, PendingTx
from chain.cosmos.client import CosmosClient
from chain.cosmos.config import ChainConfig, injective, wasmd
from chain.cosmos.errors import CosmosTxError, contract_message
from chain.errors import NodeUnreachable

__all__ = [
    "ChainConfig",
    "CosmosBackend",
    "CosmosChain",
    "CosmosClient",
    "CosmosTxError",
    "NodeUnreachable",
    "PendingTx",
    "contract_message",
    "injective",
    "wasmd",
]
