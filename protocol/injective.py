"""The chain the reference deployment runs on (Injective), in one place.

Its bech32 prefix, its native denom and how many decimals a whole INJ has, the minimum gas price
of its default node configuration, and how much a simulated or devnet test account is given at
genesis. The protocol itself names its denom in the run spec; these are the defaults every layer
(keys, chain backends, devnet, presets, CLI amounts, benchmarks, tests) takes from here.
"""

from __future__ import annotations

PREFIX = "inj"
"""Bech32 prefix of Injective account addresses (``inj1…``)."""

DENOM = "inj"
"""Injective's native (base) denom; amounts are in base units (10^-18 INJ), written ``20000000000000000000inj``."""

DECIMALS = 18
"""Decimals of a whole INJ: ``1 INJ = 10**18 inj``."""

ONE_INJ = 10**DECIMALS
"""One whole INJ in base units."""

DISPLAY_DENOM = "INJ"
"""The display denom: ``20INJ`` is ``20 * 10**18`` inj (``protocol.coins`` reads and writes both)."""

MIN_GAS_PRICE = 160_000_000
"""inj per unit of gas: ``injectived``'s default ``minimum-gas-prices`` (and txfees ``min_gas_price``)."""

GENESIS_BALANCE = 1_000_000 * ONE_INJ
"""What a simulated or devnet test account holds at genesis: 10^6 INJ (``10**24`` base units)."""
