"""secp256k1 identities: keys, bech32 addresses and signatures, exactly as Cosmos accounts use them.

A participant's identity is its chain account. Two key types exist, as on Injective
(``injectived keys add --key-type``); both are ECDSA on secp256k1 with a 33-byte compressed public
key and 64-byte ``r || s`` signatures with low ``s`` (the SDK refuses high ``s``):

* ``eth_secp256k1`` (Injective's default, what ``injectived keys add`` and Keplr derive): HD path
  ``m/44'/60'/0'/0/0``; address ``bech32(prefix, keccak256(uncompressed_pubkey[1:])[-20:])``, i.e.
  the Ethereum address of the key; signatures over ``keccak256(message)``; on chain the public
  key is an ``/injective.crypto.v1beta1.ethsecp256k1.PubKey``.
* ``secp256k1`` (the Cosmos SDK's plain key, as cosmpy derives it): HD path
  ``m/44'/118'/0'/0/0``; address ``bech32(prefix, ripemd160(sha256(compressed_pubkey)))``;
  signatures over ``sha256(message)``; on chain a ``/cosmos.crypto.secp256k1.PubKey``.

Both addresses are 20 bytes, so nothing downstream of an address (the contract, the chains'
address codecs) needs to know which kind a key is; only deriving an address from a public key
and hashing a message before signing do. New keys from the CLI are ``eth_secp256k1``
(:data:`DEFAULT_KEY_TYPE`); a :class:`PrivateKey` built from raw bytes without a type is plain
``secp256k1``, which keeps the project's fixed test keys and vectors stable.

Private key material never appears in ``repr``/``str`` or in error messages.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

import bech32
from Crypto.Hash import RIPEMD160, keccak
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    Prehashed,
    decode_dss_signature,
    encode_dss_signature,
)
from mnemonic import Mnemonic

from protocol.errors import VerilocoError
from protocol.injective import PREFIX

DEFAULT_PREFIX = PREFIX  # addresses default to the reference chain's
# Order of the secp256k1 group.
_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
_HARDENED = 0x80000000
SCALAR_SIZE = 32
"""Bytes of a secp256k1 scalar: a private key, or either half ``r``, ``s`` of a signature."""
SIGNATURE_SIZE = 2 * SCALAR_SIZE
PUBKEY_HEX_PATTERN = rf"^0[23][0-9a-f]{{{2 * SCALAR_SIZE}}}$"
"""A compressed public key as lowercase hex: ``02`` or ``03`` and the x coordinate."""
# Both kinds sign a 32-byte digest that we compute ourselves (sha256 or keccak256); the
# ``Prehashed(SHA256())`` marker only tells ``cryptography`` the digest's length.
_PREHASHED = ec.ECDSA(Prehashed(hashes.SHA256()))


class KeyType(StrEnum):
    """How a key derives its address and hashes what it signs (the SDK's ``PubKeyType`` names)."""

    ETH_SECP256K1 = "eth_secp256k1"
    SECP256K1 = "secp256k1"


DEFAULT_KEY_TYPE = KeyType.ETH_SECP256K1
# BIP-44 coin types: 60 is Ethereum's (Injective's default), 118 the Cosmos Hub's.
DEFAULT_COIN_TYPE: dict[KeyType, int] = {KeyType.ETH_SECP256K1: 60, KeyType.SECP256K1: 118}


def hd_path(coin_type: int, account: int = 0, index: int = 0) -> str:
    """The BIP-44 path ``m/44'/coin_type'/account'/0/index`` (what ``injectived keys add
    --coin-type --account --index`` uses)."""
    return f"m/44'/{coin_type}'/{account}'/0/{index}"


def default_hd_path(key_type: KeyType) -> str:
    """The path a mnemonic is derived along for ``key_type`` unless told otherwise."""
    return hd_path(DEFAULT_COIN_TYPE[KeyType(key_type)])


def keccak256(data: bytes) -> bytes:
    """Keccak-256 as Ethereum uses it (the original Keccak padding, not NIST SHA3-256)."""
    return keccak.new(digest_bits=256, data=data).digest()


def message_digest(message: bytes, key_type: KeyType) -> bytes:
    """The 32 bytes a key of ``key_type`` signs for ``message``: keccak256 or sha256."""
    if key_type == KeyType.ETH_SECP256K1:
        return keccak256(message)
    return hashlib.sha256(message).digest()


class KeyFormatError(VerilocoError, ValueError):
    """Bad key material, address or signature encoding (never carries the secret itself)."""


def address_bytes(compressed_pubkey: bytes, key_type: KeyType) -> bytes:
    """The 20 bytes behind an account address of a ``key_type`` key.

    ``eth_secp256k1``: the last 20 bytes of ``keccak256`` of the uncompressed point without its
    ``04`` prefix (the Ethereum address). ``secp256k1``: ``ripemd160(sha256(compressed))``.

    Raises:
        KeyFormatError: ``compressed_pubkey`` is not a point on secp256k1 (eth keys only; the
            plain kind hashes the bytes as given, :class:`PublicKey` checks them).
    """
    if key_type == KeyType.ETH_SECP256K1:
        try:
            point = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256K1(), compressed_pubkey)
        except ValueError:
            raise KeyFormatError("public key is not a point on secp256k1") from None
        uncompressed = point.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
        return keccak256(uncompressed[1:])[-20:]
    h = RIPEMD160.new()
    h.update(hashlib.sha256(compressed_pubkey).digest())
    return h.digest()


def encode_address(raw: bytes, prefix: str = DEFAULT_PREFIX) -> str:
    """bech32-encode raw address bytes with ``prefix``."""
    five = bech32.convertbits(raw, 8, 5, True)
    if five is None:
        raise KeyFormatError("cannot convert address bytes to bech32")
    return bech32.bech32_encode(prefix, five)


@lru_cache(maxsize=65536)  # pure, and validated on every read of a contract's answer (pydantic)
def decode_address(address: str, prefix: str | None = DEFAULT_PREFIX) -> bytes:
    """Decode and validate a bech32 account address.

    Args:
        address: the bech32 text; must be lowercase with a valid checksum.
        prefix: the required human-readable part, or None to accept any.

    Raises:
        KeyFormatError: malformed, wrong prefix, or not 20/32 bytes.
    """
    if address != address.lower():
        raise KeyFormatError(f"address {address!r} is not lowercase")
    hrp, five = bech32.bech32_decode(address)
    if hrp is None or five is None:
        raise KeyFormatError(f"address {address!r} is not valid bech32")
    if prefix is not None and hrp != prefix:
        raise KeyFormatError(f"address {address!r} has prefix {hrp!r}, expected {prefix!r}")
    raw = bech32.convertbits(five, 5, 8, False)
    if raw is None or len(raw) not in (20, 32):
        raise KeyFormatError(f"address {address!r} does not hold 20 or 32 bytes")
    return bytes(raw)


def is_address(address: str, prefix: str | None = DEFAULT_PREFIX) -> bool:
    """True when ``address`` decodes under :func:`decode_address`."""
    try:
        decode_address(address, prefix)
    except KeyFormatError:
        return False
    return True


@dataclass(frozen=True)
class PublicKey:
    """A compressed secp256k1 public key (33 bytes) and the type that says how it is used.

    Attributes:
        compressed: SEC1 compressed point, ``02``/``03`` then x.
        key_type: how the address is derived and messages are hashed (default plain
            ``secp256k1``; see the module docstring).
    """

    compressed: bytes
    key_type: KeyType = KeyType.SECP256K1

    def __post_init__(self) -> None:
        if len(self.compressed) != 33 or self.compressed[0] not in (2, 3):
            raise KeyFormatError("a compressed secp256k1 public key is 33 bytes starting with 02 or 03")
        try:
            ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256K1(), self.compressed)
        except ValueError:
            raise KeyFormatError("public key is not a point on secp256k1") from None
        try:
            object.__setattr__(self, "key_type", KeyType(self.key_type))
        except ValueError:
            raise KeyFormatError(f"unknown key type {self.key_type!r} (known: "
                                 f"{', '.join(t.value for t in KeyType)})") from None

    @classmethod
    def for_address(cls, compressed: bytes, address: str) -> PublicKey:
        """The public key whose address (under ``address``'s own prefix) is ``address``, trying
        each key type: an address fixes its key's type, since the two derivations hash differently.

        Raises:
            KeyFormatError: a malformed key or address, or no key type derives ``address``.
        """
        cls(compressed)  # a point on the curve, before any hashing
        raw = decode_address(address, prefix=None)
        for key_type in KeyType:
            if address_bytes(compressed, key_type) == raw:
                return cls(compressed, key_type)
        raise KeyFormatError(f"the public key derives {address} neither as "
                             f"{' nor as '.join(t.value for t in KeyType)}")

    def address(self, prefix: str = DEFAULT_PREFIX) -> str:
        """The bech32 account address of this key."""
        return encode_address(address_bytes(self.compressed, self.key_type), prefix)

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Check a 64-byte low-s ``r || s`` signature over this key type's digest of ``message``."""
        if len(signature) != SIGNATURE_SIZE:
            return False
        r, s = int.from_bytes(signature[:SCALAR_SIZE], "big"), int.from_bytes(signature[SCALAR_SIZE:], "big")
        # The Cosmos SDK (and go-ethereum's VerifySignature, for eth keys) refuse high-s
        # signatures (malleability); so do we.
        if not (0 < r < _N and 0 < s <= _N // 2):
            return False
        key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256K1(), self.compressed)
        try:
            key.verify(encode_dss_signature(r, s), message_digest(message, self.key_type), _PREHASHED)
        except InvalidSignature:
            return False
        return True

    def hex(self) -> str:
        return self.compressed.hex()


class PrivateKey:
    """A secp256k1 private key of one :class:`KeyType`. Its secret never shows in ``repr``,
    ``str`` or exceptions."""

    __slots__ = ("_key", "_type")

    def __init__(self, secret: bytes, key_type: KeyType = KeyType.SECP256K1) -> None:
        """Args:
        secret: 32 bytes, a scalar in [1, n).
        key_type: how the key derives its address and signs; plain ``secp256k1`` unless given
            (fixed test keys rely on that; new keys come from :meth:`generate` or
            :meth:`from_mnemonic`, which default to :data:`DEFAULT_KEY_TYPE`).
        """
        if len(secret) != SCALAR_SIZE:
            raise KeyFormatError(f"a secp256k1 private key is {SCALAR_SIZE} bytes")
        scalar = int.from_bytes(secret, "big")
        if not 0 < scalar < _N:
            raise KeyFormatError("private key scalar out of range")
        try:
            self._type = KeyType(key_type)
        except ValueError:
            raise KeyFormatError(f"unknown key type {key_type!r} (known: "
                                 f"{', '.join(t.value for t in KeyType)})") from None
        self._key = ec.derive_private_key(scalar, ec.SECP256K1())

    @classmethod
    def generate(cls, key_type: KeyType = DEFAULT_KEY_TYPE) -> PrivateKey:
        """A fresh random key (the OS random source, through ``cryptography``)."""
        key = ec.generate_private_key(ec.SECP256K1())
        return cls(key.private_numbers().private_value.to_bytes(SCALAR_SIZE, "big"), key_type)

    @classmethod
    def from_hex(cls, text: str, key_type: KeyType = DEFAULT_KEY_TYPE) -> PrivateKey:
        """A key from 64 hex digits (an optional ``0x`` prefix and surrounding blanks are
        ignored), as ``injectived keys export --unarmored-hex`` and Ethereum wallets print it.

        Raises:
            KeyFormatError: not 32 bytes of hex, or out of range (the text is never echoed).
        """
        text = text.strip()
        if text[:2].lower() == "0x":
            text = text[2:]
        if len(text) != 2 * SCALAR_SIZE:
            raise KeyFormatError(f"a private key in hex is {2 * SCALAR_SIZE} hex digits, got {len(text)} characters")
        try:
            secret = bytes.fromhex(text)
        except ValueError:
            raise KeyFormatError("the private key is not hex") from None
        return cls(secret, key_type)

    @classmethod
    def from_mnemonic(cls, words: str, key_type: KeyType = DEFAULT_KEY_TYPE, path: str | None = None,
                      passphrase: str = "") -> PrivateKey:
        """Derive a key from a BIP-39 mnemonic along a BIP-32 path.

        Args:
            words: the mnemonic (blanks are normalized).
            key_type: the key's type; Injective's ``eth_secp256k1`` by default.
            path: the HD path; default :func:`default_hd_path` of ``key_type``
                (``m/44'/60'/0'/0/0`` for eth keys, ``m/44'/118'/0'/0/0`` for plain ones).
            passphrase: the optional BIP-39 passphrase (the "25th word"), not the keyring's.

        Raises:
            KeyFormatError: the mnemonic's words or checksum are invalid, or the path is malformed.
        """
        normalized = " ".join(words.split())
        if not Mnemonic("english").check(normalized):
            raise KeyFormatError("mnemonic is not a valid BIP-39 English phrase (words or checksum)")
        seed = Mnemonic.to_seed(normalized, passphrase)
        return cls(_bip32_derive(seed, path if path is not None else default_hd_path(key_type)), key_type)

    @property
    def key_type(self) -> KeyType:
        return self._type

    @property
    def public_key(self) -> PublicKey:
        return PublicKey(
            self._key.public_key().public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
            ),
            self._type,
        )

    def address(self, prefix: str = DEFAULT_PREFIX) -> str:
        return self.public_key.address(prefix)

    def sign(self, message: bytes) -> bytes:
        """ECDSA over this key type's digest of ``message`` (sha256, or keccak256 for eth keys),
        returned as 64 bytes ``r || s`` with low ``s``.

        Injective's eth keys sign 65 bytes (a recovery id appended); its verifier drops that byte,
        so the 64-byte form verifies there too and is the one form for both kinds here.
        """
        der = self._key.sign(message_digest(message, self._type), _PREHASHED)
        r, s = decode_dss_signature(der)
        if s > _N // 2:
            s = _N - s
        return r.to_bytes(SCALAR_SIZE, "big") + s.to_bytes(SCALAR_SIZE, "big")

    def exchange(self, peer: PublicKey) -> bytes:
        """ECDH on secp256k1 with ``peer``: the 32-byte x coordinate of the shared point (what
        :mod:`protocol.sealing` derives its keys from; never used as a key as it is)."""
        point = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256K1(), peer.compressed)
        return self._key.exchange(ec.ECDH(), point)

    def secret_bytes(self) -> bytes:
        """The 32 secret bytes. Only the keyring (to seal or export them) and chain clients should call this."""
        return self._key.private_numbers().private_value.to_bytes(SCALAR_SIZE, "big")

    def __repr__(self) -> str:
        return f"PrivateKey({self._type.value}, address={self.address()})"

    __str__ = __repr__


def _bip32_derive(seed: bytes, path: str) -> bytes:
    # BIP-32 private derivation; only the steps a Cosmos HD path needs.
    parts = path.split("/")
    if not parts or parts[0] != "m":
        raise KeyFormatError(f"HD path {path!r} must start with 'm/'")
    digest = hmac.new(b"Bitcoin seed", seed, hashlib.sha512).digest()
    key, chain = int.from_bytes(digest[:SCALAR_SIZE], "big"), digest[SCALAR_SIZE:]
    for part in parts[1:]:
        hardened = part.endswith("'")
        try:
            index = int(part[:-1] if hardened else part)
        except ValueError:
            raise KeyFormatError(f"HD path {path!r} has a bad component {part!r}") from None
        if not 0 <= index < _HARDENED:
            raise KeyFormatError(f"HD path component {part!r} out of range")
        if hardened:
            data = b"\x00" + key.to_bytes(SCALAR_SIZE, "big") + (index + _HARDENED).to_bytes(4, "big")
        else:
            point = ec.derive_private_key(key, ec.SECP256K1()).public_key().public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
            )
            data = point + index.to_bytes(4, "big")
        digest = hmac.new(chain, data, hashlib.sha512).digest()
        tweak = int.from_bytes(digest[:SCALAR_SIZE], "big")
        if tweak >= _N:
            raise KeyFormatError("invalid BIP-32 child (probability 2^-127); use the next index")
        key, chain = (tweak + key) % _N, digest[SCALAR_SIZE:]
        if key == 0:
            raise KeyFormatError("invalid BIP-32 child key; use the next index")
    return key.to_bytes(SCALAR_SIZE, "big")


def new_mnemonic() -> str:
    """A fresh 24-word BIP-39 English mnemonic."""
    return Mnemonic("english").generate(strength=256)
