"""The bank: balances per (address, denom), transfers, and genesis minting."""

from __future__ import annotations

from collections.abc import Iterable

from chain.embedded.errors import InsufficientFundsError
from chain.embedded.state import Journal, JournaledDict
from chain.embedded.types import Coin, format_coins
from chain.types import Event


class Bank:
    """Balances of every account, with the SDK bank module's transfer semantics.

    Args:
        journal: the chain's journal (transfers are undone with a failed transaction).
        balances: initial balances ``{(address, denom): amount}``.
    """

    def __init__(self, journal: Journal, balances: dict[tuple[str, str], int] | None = None) -> None:
        # Zero balances are not stored, as in x/bank.
        self._balances: JournaledDict[tuple[str, str], int] = JournaledDict(
            journal, {k: v for k, v in (balances or {}).items() if v}
        )

    def balance(self, address: str, denom: str) -> int:
        """The balance of ``address`` in ``denom`` (0 if none)."""
        return self._balances.get((address, denom), 0)

    def balances(self, address: str) -> dict[str, int]:
        """Every nonzero balance of ``address``, by denom."""
        # Keys are (address, denom) tuples; every denom sorts after "" and before "\uffff".
        keys = self._balances.key_range((address, ""), (address, "\uffff"))
        return {denom: self._balances[(addr, denom)] for addr, denom in keys}

    def supply(self, denom: str) -> int:
        """Sum of all balances in ``denom``."""
        return sum(v for (_, d), v in self._balances.items() if d == denom)

    def all_balances(self) -> dict[tuple[str, str], int]:
        """A copy of every balance."""
        return self._balances.snapshot()

    def mint(self, address: str, coins: Iterable[Coin]) -> None:
        """Credit ``coins`` to ``address`` out of nothing (genesis and test funding; transfers use
        it for the receiving side)."""
        for coin in coins:
            self._balances[(address, coin.denom)] = self.balance(address, coin.denom) + coin.amount

    def _debit(self, address: str, coins: list[Coin]) -> None:
        # Check every coin before touching any, so a failure leaves balances as they were even
        # outside a transaction.
        for coin in coins:
            have = self.balance(address, coin.denom)
            if have < coin.amount:
                raise InsufficientFundsError(
                    f"spendable balance {have}{coin.denom} of {address} is smaller than {coin}: "
                    "insufficient funds"
                )
        for coin in coins:
            left = self.balance(address, coin.denom) - coin.amount
            if left:
                self._balances[(address, coin.denom)] = left
            else:
                self._balances.pop((address, coin.denom))

    def send(self, sender: str, recipient: str, coins: Iterable[Coin]) -> list[Event]:
        """Move ``coins`` from ``sender`` to ``recipient``.

        Returns:
            The events x/bank emits: ``coin_spent``, ``coin_received``, ``transfer``.

        Raises:
            InsufficientFundsError: ``sender`` lacks one of the coins (nothing moves).
        """
        coins = [c for c in coins if c.amount]
        if not coins:
            return []
        self._debit(sender, coins)
        self.mint(recipient, coins)
        amount = format_coins(coins)
        return [
            Event("coin_spent", (("spender", sender), ("amount", amount))),
            Event("coin_received", (("receiver", recipient), ("amount", amount))),
            Event("transfer", (("recipient", recipient), ("sender", sender), ("amount", amount))),
        ]

    def burn(self, address: str, coins: Iterable[Coin]) -> list[Event]:
        """Destroy ``coins`` held by ``address``.

        Raises:
            InsufficientFundsError: ``address`` lacks one of the coins (nothing is burned).
        """
        coins = [c for c in coins if c.amount]
        if not coins:
            return []
        self._debit(address, coins)
        return [Event("burn", (("burner", address), ("amount", format_coins(coins))))]
