"""What differs between CosmWasm chains, in one object: :class:`ChainConfig`.

The backend code (``chain.cosmos.backend``) is chain-neutral. Everything a particular chain does
its own way lives here: chain id, bech32 prefix, denominations, the minimum gas price, how far its
gas simulation under-reports (multiplier and offset), and how to read its account type. Injective,
for one, returns ``/injective.types.v1beta1.EthAccount`` from x/auth (field 1 is the plain
BaseAccount) where cosmpy expects a BaseAccount; :func:`injective` registers the decoder for it.
A wasmd, Neutron or Osmosis node needs only another ``ChainConfig`` (see :func:`wasmd`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from types import MappingProxyType

from cosmpy.protos.cosmos.auth.v1beta1.auth_pb2 import BaseAccount

from protocol.injective import DENOM, MIN_GAS_PRICE, PREFIX

BASE_ACCOUNT_TYPE = "/cosmos.auth.v1beta1.BaseAccount"
ETH_ACCOUNT_TYPE = "/injective.types.v1beta1.EthAccount"
# Public key types by key type (protocol.keys.KeyType values). Every SDK chain knows the plain
# one; Injective (and other Ethermint-derived chains, under their own names) the eth one.
SECP256K1_PUBKEY_TYPE = "/cosmos.crypto.secp256k1.PubKey"
INJECTIVE_ETH_PUBKEY_TYPE = "/injective.crypto.v1beta1.ethsecp256k1.PubKey"

AccountDecoder = Callable[[bytes], BaseAccount]
"""Turns the ``value`` bytes of an account ``Any`` into its BaseAccount."""


def _base_account(value: bytes) -> BaseAccount:
    return BaseAccount.FromString(value)


def embedded_base_account(field_number: int = 1) -> AccountDecoder:
    """A decoder for account types that wrap a BaseAccount as message field ``field_number``
    (Injective's EthAccount, the SDK's vesting accounts' BaseVestingAccount chain, ...)."""

    def decode(value: bytes) -> BaseAccount:
        found = _length_delimited_field(value, field_number)
        if found is None:
            raise ValueError(f"account has no field {field_number}")
        return BaseAccount.FromString(found)

    return decode


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def _length_delimited_field(data: bytes, number: int) -> bytes | None:
    """The first length-delimited field ``number`` of a serialized protobuf message."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        wire = key & 7
        if wire == 0:
            _, pos = _varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            length, pos = _varint(data, pos)
            if key >> 3 == number:
                return data[pos:pos + length]
            pos += length
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return None


@dataclass(frozen=True)
class ChainConfig:
    """A CosmWasm chain's quirks.

    Attributes:
        chain_id: signed into every transaction.
        prefix: bech32 prefix of account addresses.
        denom: the contract's staking and reward denomination (what ``Ledger.balance`` reports).
        fee_denom: the denomination fees are paid in.
        gas_price: fee per unit of gas, in ``fee_denom`` base units (the chain's minimum or more).
        gas_multiplier, gas_offset: gas limit = ``ceil(simulated × multiplier) + offset``.
            Injective's simulation under-reports by ~30k constantly, so an offset is needed.
        max_gas_per_tx: a cap on the computed limit (the block gas limit), or None.
        fixed_fee: pay exactly this fee (``fee_denom`` base units) whatever the gas limit, as
            ``--fees`` does in Cosmos CLIs; None: ``gas_limit × gas_price``.
        account_decoders: account ``Any`` type URL -> decoder to its BaseAccount.
        pubkey_types: key type (``secp256k1``, ``eth_secp256k1``) -> the type URL of such a
            signer's public key on this chain; a key of a type not listed cannot sign here.
    """

    chain_id: str
    prefix: str = PREFIX
    denom: str = DENOM
    fee_denom: str = DENOM
    gas_price: Decimal = Decimal(MIN_GAS_PRICE)
    gas_multiplier: Decimal = Decimal("1.3")
    gas_offset: int = 50_000
    max_gas_per_tx: int | None = None
    fixed_fee: int | None = None
    account_decoders: Mapping[str, AccountDecoder] = field(
        default_factory=lambda: MappingProxyType({BASE_ACCOUNT_TYPE: _base_account}))
    pubkey_types: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({"secp256k1": SECP256K1_PUBKEY_TYPE}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "gas_price", Decimal(str(self.gas_price)))
        object.__setattr__(self, "gas_multiplier", Decimal(str(self.gas_multiplier)))
        if self.gas_price < 0 or self.gas_multiplier < 1 or self.gas_offset < 0:
            raise ValueError("gas price must be >= 0, multiplier >= 1, offset >= 0")
        if self.fixed_fee is not None and self.fixed_fee < 0:
            raise ValueError("a fixed fee must be >= 0")

    def gas_limit(self, simulated: int) -> int:
        """The limit to sign for a transaction whose simulation used ``simulated`` gas."""
        limit = math.ceil(Decimal(simulated) * self.gas_multiplier) + self.gas_offset
        return min(limit, self.max_gas_per_tx) if self.max_gas_per_tx else limit

    def fee(self, gas_limit: int) -> int:
        """The fee for ``gas_limit``, in ``fee_denom`` base units (rounded up), or :attr:`fixed_fee`."""
        if self.fixed_fee is not None:
            return self.fixed_fee
        return math.ceil(Decimal(gas_limit) * self.gas_price)

    def decode_account(self, type_url: str, value: bytes) -> BaseAccount:
        """The BaseAccount in an x/auth account answer.

        Raises:
            ValueError: an account type this chain config does not know.
        """
        decoder = self.account_decoders.get(type_url)
        if decoder is None:
            raise ValueError(f"unknown account type {type_url} for chain {self.chain_id}; "
                             "add a decoder to ChainConfig.account_decoders")
        return decoder(value)

    def pubkey_type(self, key_type: str) -> str:
        """The type URL of a ``key_type`` signer's public key.

        Raises:
            ValueError: this chain does not accept keys of that type.
        """
        url = self.pubkey_types.get(str(key_type))
        if url is None:
            raise ValueError(f"chain {self.chain_id} takes no {key_type} keys (it takes "
                             f"{', '.join(sorted(self.pubkey_types))}); use a key of another type")
        return url

    def with_(self, **changes: object) -> ChainConfig:
        return replace(self, **changes)  # type: ignore[arg-type]


def injective(chain_id: str, *, gas_price: Decimal | int = MIN_GAS_PRICE, **changes: object) -> ChainConfig:
    """Injective (and its local devnet): prefix/denom ``inj``, minimum gas price 1.6e8 inj/gas,
    EthAccount accounts, simulation under-reporting ~30k gas, signers of both key types
    (``eth_secp256k1``, Injective's default, and plain ``secp256k1``)."""
    decoders = MappingProxyType({BASE_ACCOUNT_TYPE: _base_account, ETH_ACCOUNT_TYPE: embedded_base_account(1)})
    pubkeys = MappingProxyType({"secp256k1": SECP256K1_PUBKEY_TYPE, "eth_secp256k1": INJECTIVE_ETH_PUBKEY_TYPE})
    return ChainConfig(chain_id=chain_id, prefix=PREFIX, denom=DENOM, fee_denom=DENOM, gas_price=Decimal(gas_price),
                       gas_multiplier=Decimal("1.3"), gas_offset=50_000, account_decoders=decoders,
                       pubkey_types=pubkeys, **changes)  # type: ignore[arg-type]


def wasmd(chain_id: str, *, prefix: str = "wasm", denom: str = "stake", gas_price: Decimal | str = "0.025",
          **changes: object) -> ChainConfig:
    """A plain wasmd chain (BaseAccount, cosmpy-style 1.3× margin)."""
    return ChainConfig(chain_id=chain_id, prefix=prefix, denom=denom, fee_denom=denom, gas_price=Decimal(gas_price),
                       gas_multiplier=Decimal("1.3"), gas_offset=20_000, **changes)  # type: ignore[arg-type]
