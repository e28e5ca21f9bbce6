"""The Ledger: the one API through which everything above ``chain/`` talks to the contract.

It speaks the protocol's pydantic models (``protocol.messages`` in, ``protocol.views`` out) and
hides wasm, JSON, gas and transactions. Two backends implement it: ``chain.embedded`` (the same
``.wasm`` in-process under wasmtime) and ``chain.cosmos`` (a real node through cosmpy). Code that
holds a ``Ledger`` cannot tell which one it has.

Every write takes the signer's :class:`~protocol.keys.PrivateKey`: one ledger serves many
participants (``simulate`` runs a whole network in one process), and a key is only used to sign.
Writes raise :class:`ContractError` with the contract's own message when the contract refuses.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from protocol.keys import PrivateKey
from protocol.messages import BeaconJoin, BeaconReveal, Commitment, ModelProposal, Role, Verdict
from protocol.spec import RunSpec
from protocol.views import Accounting, Challenge, Config, EpochInfo, EpochReport, Member


class LedgerError(Exception):
    """The ledger could not carry out a request (connection, timeout, malformed response)."""


class ContractError(LedgerError):
    """The contract refused a message; ``str(err)`` is the contract's readable reason."""


class Event(BaseModel):
    """One event of a transaction, as wasmd reports it (``wasm``, ``wasm-<name>``, ``transfer``, ...)."""

    model_config = ConfigDict(frozen=True)

    type: str
    attributes: dict[str, str] = Field(default_factory=dict)


class TxResult(BaseModel):
    """What a successful write returns."""

    model_config = ConfigDict(frozen=True)

    height: int
    tx_hash: str
    gas_used: int
    events: list[Event] = Field(default_factory=list)

    def attribute(self, key: str, event_type: str = "wasm") -> str | None:
        """The first attribute ``key`` of an event of ``event_type``, if any."""
        for event in self.events:
            if event.type == event_type and key in event.attributes:
                return event.attributes[key]
        return None


class Ledger(ABC):
    """A veriloco contract on some chain, with typed reads and signed writes."""

    # -- the chain -----------------------------------------------------------------------------

    @property
    @abstractmethod
    def denom(self) -> str:
        """The staking and reward denomination."""

    @property
    @abstractmethod
    def contract_address(self) -> str:
        """The address of the deployed contract."""

    @abstractmethod
    def height(self) -> int:
        """The latest block height."""

    @abstractmethod
    def balance(self, address: str) -> int:
        """The bank balance of ``address`` in :attr:`denom`."""

    @abstractmethod
    def wait_for_height(self, height: int, timeout: float = 60.0) -> int:
        """Return once the chain has reached ``height`` (the embedded chain produces the blocks)."""

    # -- members -------------------------------------------------------------------------------

    @abstractmethod
    def bond(self, key: PrivateKey, role: Role, endpoint: str, amount: int) -> TxResult:
        """Stake ``amount`` as ``role``, advertising the artifact server at ``endpoint``."""

    @abstractmethod
    def unbond(self, key: PrivateKey, amount: int) -> TxResult:
        """Start unbonding ``amount`` (stays slashable until claimed)."""

    @abstractmethod
    def claim(self, key: PrivateKey) -> TxResult:
        """Withdraw matured unbonding entries."""

    @abstractmethod
    def fund_rewards(self, key: PrivateKey, amount: int) -> TxResult:
        """Add ``amount`` to the reward pool."""

    # -- the epoch -----------------------------------------------------------------------------

    @abstractmethod
    def join(self, key: PrivateKey, msg: BeaconJoin) -> TxResult: ...

    @abstractmethod
    def commit(self, key: PrivateKey, msg: Commitment) -> TxResult: ...

    @abstractmethod
    def reveal(self, key: PrivateKey, msg: BeaconReveal) -> TxResult: ...

    @abstractmethod
    def verdict(self, key: PrivateKey, msg: Verdict) -> TxResult: ...

    @abstractmethod
    def propose_model(self, key: PrivateKey, msg: ModelProposal) -> TxResult: ...

    @abstractmethod
    def advance(self, key: PrivateKey) -> TxResult:
        """Close every phase whose deadline has passed (anyone may call it)."""

    # -- reads ---------------------------------------------------------------------------------

    @abstractmethod
    def config(self) -> Config: ...

    @abstractmethod
    def accounting(self) -> Accounting: ...

    @abstractmethod
    def member(self, address: str) -> Member | None: ...

    @abstractmethod
    def members(self, role: Role | None = None, start_after: str | None = None,
                limit: int = 100) -> list[Member]: ...

    @abstractmethod
    def epoch(self, epoch: int | None = None) -> EpochInfo:
        """One epoch (the current one when ``epoch`` is None)."""

    @abstractmethod
    def epochs(self, start_after: int | None = None, limit: int = 100) -> list[EpochInfo]: ...

    @abstractmethod
    def challenges(self, epoch: int, validator: str) -> list[Challenge]:
        """The challenges ``validator`` must replay in ``epoch``."""

    @abstractmethod
    def report(self, epoch: int) -> EpochReport: ...

    # -- helpers shared by all backends --------------------------------------------------------

    def spec(self) -> RunSpec:
        """The run spec the contract was deployed with."""
        return RunSpec.from_canonical(self.config().spec_json)

    @staticmethod
    def _to_json(model: BaseModel) -> dict[str, Any]:
        return model.model_dump(mode="json")
