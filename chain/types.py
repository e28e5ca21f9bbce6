"""What a transaction returns, the same on every backend: :class:`TxResult` and its :class:`Event`\\ s."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    """An ABCI event: a type (``wasm``, ``wasm-<name>``, ``transfer``, ...) and its attributes.

    Attributes:
        type: the event's type.
        attributes: ``(key, value)`` pairs in the order the chain emitted them; a key may repeat
            (wasmd allows it), so they are pairs and not a dict.
    """

    type: str
    attributes: tuple[tuple[str, str], ...] = ()

    def get(self, key: str) -> str | None:
        """The first value of ``key``, if any."""
        for k, v in self.attributes:
            if k == key:
                return v
        return None

    def to_dict(self) -> dict[str, str]:
        """Attributes as a dict (the last value wins where a key repeats)."""
        return dict(self.attributes)


@dataclass(frozen=True)
class TxResult:
    """A committed, successful transaction.

    Attributes:
        height: the block it was included in.
        tx_hash: the hash naming it (hex).
        gas_used: gas it used. The embedded chain counts wasmtime fuel plus host-call charges,
            which is NOT comparable with a real chain's gas.
        fee: paid by the signer in the ledger's denom; 0 on the embedded chain.
        events: in the order the chain emitted them.
        data: the contract's response data, if any (embedded chain only).
        contract_address: the new contract (instantiate on the embedded chain only).
        code_id: the new code (store_code on the embedded chain only).
    """

    height: int
    tx_hash: str
    gas_used: int
    fee: int = 0
    events: tuple[Event, ...] = ()
    data: bytes | None = None
    contract_address: str | None = None
    code_id: int | None = None

    def events_of(self, event_type: str) -> list[Event]:
        """Every event of ``event_type``, in order."""
        return [e for e in self.events if e.type == event_type]

    def attribute(self, key: str, event_type: str = "wasm") -> str | None:
        """The first attribute ``key`` of an event of ``event_type``, if any."""
        for event in self.events_of(event_type):
            value = event.get(key)
            if value is not None:
                return value
        return None
