"""Value types of the embedded chain: coins. (Events and transaction results: ``chain.types``.)"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from chain.embedded.errors import ChainError
from protocol.types import U128_MAX

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
    items = [Coin(denom, amount) for denom, amount in coins.items()] if isinstance(coins, Mapping) else list(coins)
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
