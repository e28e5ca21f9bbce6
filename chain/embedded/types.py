"""Value types of the embedded chain: coins, events, transaction results."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from chain.embedded.errors import ChainError

U128_MAX = 2**128 - 1
# The Cosmos SDK's default denom rule (sdk.DefaultCoinDenomRegex).
_DENOM = re.compile(r"^[a-zA-Z][a-zA-Z0-9/:._-]{2,127}$")


@dataclass(frozen=True, order=True)
class Coin:
    """An amount of one denom, in base units."""

    denom: str
    amount: int

    def __post_init__(self) -> None:
        if not _DENOM.match(self.denom):
            raise ChainError(f"invalid denom {self.denom!r}")
        if isinstance(self.amount, bool) or not isinstance(self.amount, int):
            raise ChainError(f"coin amount must be an int, got {self.amount!r}")
        if not 0 <= self.amount <= U128_MAX:
            raise ChainError(f"coin amount {self.amount} is outside [0, 2^128)")

    def to_json(self) -> dict[str, str]:
        """cosmwasm's Coin JSON: ``{"denom": "inj", "amount": "5"}``."""
        return {"denom": self.denom, "amount": str(self.amount)}

    def __str__(self) -> str:
        return f"{self.amount}{self.denom}"


CoinsLike = Mapping[str, int] | Iterable[Coin]


def normalize_coins(coins: CoinsLike | None) -> tuple[Coin, ...]:
    """Coins as the SDK requires them in a message: sorted by denom, no duplicates, all positive.

    Args:
        coins: ``{"inj": 5}`` or ``[Coin("inj", 5)]``; None or empty for no funds.

    Raises:
        ChainError: a zero amount or a repeated denom (``sdk.Coins.Validate`` refuses both).
    """
    if not coins:
        return ()
    if isinstance(coins, Mapping):
        items = [Coin(denom, amount) for denom, amount in coins.items()]
    else:
        items = list(coins)
    items.sort()
    for i, coin in enumerate(items):
        if coin.amount == 0:
            raise ChainError(f"invalid coins: {coin} amount is not positive")
        if i and items[i - 1].denom == coin.denom:
            raise ChainError(f"invalid coins: duplicate denom {coin.denom}")
    return tuple(items)


def format_coins(coins: Iterable[Coin]) -> str:
    """The SDK's spelling: ``5inj,3uatom``."""
    return ",".join(str(c) for c in coins)


@dataclass(frozen=True)
class Event:
    """An ABCI event: a type and ordered ``(key, value)`` attributes (keys may repeat)."""

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
    """A committed transaction.

    Attributes:
        height: the block it was included in.
        tx_hash: a deterministic hash naming it (hex).
        gas_used: wasmtime fuel the contract calls consumed plus host-call charges. It is NOT
            comparable with a real chain's gas.
        events: in the order the chain emitted them.
        data: the contract's response data, if any.
        contract_address: the new contract (instantiate only).
        code_id: the new code (store_code only).
    """

    height: int
    tx_hash: str
    gas_used: int
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
