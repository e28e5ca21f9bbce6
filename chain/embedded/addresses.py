"""Bech32 addresses as wasmd handles them: validation, canonical bytes, contract addresses.

Account addresses are 20 bytes, ``ripemd160(sha256(pubkey))`` for plain secp256k1 keys and the
keccak (Ethereum) address for Injective's eth_secp256k1 keys (``protocol.keys``); the chain only
ever sees the address, so both kinds transact alike. Contract
addresses are 32 bytes derived from (code id, instance id) exactly as wasmd's
``BuildContractAddressClassic`` does. Encoding and decoding reuse ``protocol.keys`` so there is one
bech32 rule in the project.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

from protocol.errors import VerilocoError
from protocol.keys import KeyFormatError, decode_address, encode_address

# wasmd: types.ModuleName.
WASM_MODULE = "wasm"


class AddressError(VerilocoError, ValueError):
    """An address the chain does not accept; the message is what the contract sees."""


class AddressCodec:
    """The ``addr_*`` API of one chain (one bech32 prefix).

    Matches wasmd's ``cosmwasmAPI`` (``x/wasm/keeper/api.go``) where it matters to a contract:
    ``validate`` accepts only the normalized (lowercase) form with this chain's prefix and a valid
    checksum; ``canonicalize``/``humanize`` round-trip. Stricter than wasmd in one place: only
    20- and 32-byte addresses exist here (wasmd's VerifyAddressFormat allows 1 to 255 bytes, and its
    canonicalize also accepts an all-uppercase address).

    Args:
        prefix: the bech32 human-readable part, e.g. ``inj``.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def canonicalize(self, human: str) -> bytes:
        """The address bytes behind ``human``.

        Raises:
            AddressError: empty, not lowercase bech32, wrong prefix, bad checksum, wrong length.
        """
        if not human:
            raise AddressError("empty address string is not allowed")
        return _decode(human, self.prefix)

    def validate(self, human: str) -> None:
        """Accept ``human`` only if it is this chain's normalized form of some address.

        Decoding already refuses every non-normalized spelling (upper or mixed case, nonzero
        padding bits), so a successful decode is wasmd's "canonicalize, humanize, compare".

        Raises:
            AddressError: as :meth:`canonicalize`.
        """
        self.canonicalize(human)

    def humanize(self, canonical: bytes) -> str:
        """The bech32 form of 20- or 32-byte ``canonical``.

        Raises:
            AddressError: any other length.
        """
        if len(canonical) not in (20, 32):
            raise AddressError(f"canonical address must be 20 or 32 bytes, got {len(canonical)}")
        return encode_address(bytes(canonical), self.prefix)


@lru_cache(maxsize=4096)
def _decode(human: str, prefix: str) -> bytes:
    # bech32 checksums in pure Python dominate a transaction's host-side cost; a simulation
    # uses few distinct addresses, so remember the answers (errors are not cached).
    # Like the SDK's GetFromBech32: the bech32 checksum first, then the prefix, worded as wasmd
    # reports it to the contract.
    try:
        raw = decode_address(human, None)
    except KeyFormatError as exc:
        raise AddressError(str(exc)) from None
    hrp = human.rsplit("1", 1)[0]
    if hrp != prefix:
        raise AddressError(f"invalid Bech32 prefix; expected {prefix}, got {hrp}")
    return raw


def module_address(module: str, key: bytes) -> bytes:
    """Cosmos SDK ``address.Module(module, key)`` with one derivation key (``types/address``).

    ``Hash("module", module || 0x00 || key)`` where ``Hash(typ, data) = sha256(sha256(typ) || data)``.
    """
    typ = hashlib.sha256(b"module").digest()
    return hashlib.sha256(typ + module.encode() + b"\x00" + key).digest()


def contract_address(code_id: int, instance_id: int, prefix: str) -> str:
    """wasmd's classic contract address: ``address.Module("wasm", code_id_be64 || instance_id_be64)``.

    Code 1, instance 1 with prefix ``cosmos`` gives the address every wasmd chain's first contract
    has: ``cosmos14hj2tavq8fpesdwxxcu44rty3hh90vhujrvcmstl4zr3txmfvw9s4hmalr``.
    """
    key = code_id.to_bytes(8, "big") + instance_id.to_bytes(8, "big")
    return encode_address(module_address(WASM_MODULE, key), prefix)
