"""secp256k1 identities: keys, bech32 addresses and signatures, exactly as Cosmos accounts use them.

A participant's identity is its chain account. The address is derived as cosmpy (and the Cosmos
SDK's ``secp256k1`` key type) derives it: ``bech32(prefix, ripemd160(sha256(compressed_pubkey)))``.
Signatures are ECDSA over ``sha256(message)``, 64 bytes ``r || s`` with low ``s`` (the form the
SDK accepts and cosmpy produces), so a key in the veriloco keyring is a valid chain key.

Private key material never appears in ``repr``/``str`` or in error messages.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

import bech32
from Crypto.Hash import RIPEMD160
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from mnemonic import Mnemonic

DEFAULT_PREFIX = "inj"
COSMOS_HD_PATH = "m/44'/118'/0'/0/0"
# Order of the secp256k1 group.
_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
_HARDENED = 0x80000000


class KeyFormatError(ValueError):
    """Bad key material, address or signature encoding (never carries the secret itself)."""


def address_bytes(compressed_pubkey: bytes) -> bytes:
    """``ripemd160(sha256(pubkey))``: the 20 bytes behind a Cosmos account address."""
    h = RIPEMD160.new()
    h.update(hashlib.sha256(compressed_pubkey).digest())
    return h.digest()


def encode_address(raw: bytes, prefix: str = DEFAULT_PREFIX) -> str:
    """bech32-encode raw address bytes with ``prefix``."""
    five = bech32.convertbits(raw, 8, 5, True)
    if five is None:
        raise KeyFormatError("cannot convert address bytes to bech32")
    return bech32.bech32_encode(prefix, five)


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
    """A compressed secp256k1 public key (33 bytes)."""

    compressed: bytes

    def __post_init__(self) -> None:
        if len(self.compressed) != 33 or self.compressed[0] not in (2, 3):
            raise KeyFormatError("a compressed secp256k1 public key is 33 bytes starting with 02 or 03")
        try:
            ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256K1(), self.compressed)
        except ValueError:
            raise KeyFormatError("public key is not a point on secp256k1") from None

    def address(self, prefix: str = DEFAULT_PREFIX) -> str:
        """The bech32 account address of this key."""
        return encode_address(address_bytes(self.compressed), prefix)

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Check a 64-byte low-s ``r || s`` signature over ``sha256(message)``."""
        if len(signature) != 64:
            return False
        r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
        # The Cosmos SDK refuses high-s signatures (malleability); so do we.
        if not (0 < r < _N and 0 < s <= _N // 2):
            return False
        key = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256K1(), self.compressed)
        try:
            key.verify(encode_dss_signature(r, s), message, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return False
        return True

    def hex(self) -> str:
        return self.compressed.hex()


class PrivateKey:
    """A secp256k1 private key. Its secret never shows in ``repr``, ``str`` or exceptions."""

    __slots__ = ("_key",)

    def __init__(self, secret: bytes) -> None:
        """Args:
        secret: 32 bytes, a scalar in [1, n).
        """
        if len(secret) != 32:
            raise KeyFormatError("a secp256k1 private key is 32 bytes")
        scalar = int.from_bytes(secret, "big")
        if not 0 < scalar < _N:
            raise KeyFormatError("private key scalar out of range")
        self._key = ec.derive_private_key(scalar, ec.SECP256K1())

    @classmethod
    def generate(cls) -> PrivateKey:
        """A fresh random key (the OS random source, through ``cryptography``)."""
        key = ec.generate_private_key(ec.SECP256K1())
        return cls(key.private_numbers().private_value.to_bytes(32, "big"))

    @classmethod
    def from_mnemonic(cls, words: str, path: str = COSMOS_HD_PATH, passphrase: str = "") -> PrivateKey:
        """Derive a key from a BIP-39 mnemonic along a BIP-32 path (Cosmos default ``m/44'/118'/0'/0/0``).

        Raises:
            KeyFormatError: the mnemonic's words or checksum are invalid, or the path is malformed.
        """
        normalized = " ".join(words.split())
        if not Mnemonic("english").check(normalized):
            raise KeyFormatError("mnemonic is not a valid BIP-39 English phrase (words or checksum)")
        seed = Mnemonic.to_seed(normalized, passphrase)
        return cls(_bip32_derive(seed, path))

    @property
    def public_key(self) -> PublicKey:
        return PublicKey(
            self._key.public_key().public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
            )
        )

    def address(self, prefix: str = DEFAULT_PREFIX) -> str:
        return self.public_key.address(prefix)

    def sign(self, message: bytes) -> bytes:
        """ECDSA over ``sha256(message)``, returned as 64 bytes ``r || s`` with low ``s``."""
        der = self._key.sign(message, ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        if s > _N // 2:
            s = _N - s
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")

    def secret_bytes(self) -> bytes:
        """The 32 secret bytes. Only the keyring (to seal them) and chain clients should call this."""
        return self._key.private_numbers().private_value.to_bytes(32, "big")

    def __repr__(self) -> str:
        return f"PrivateKey(address={self.address()})"

    __str__ = __repr__


def _bip32_derive(seed: bytes, path: str) -> bytes:
    # BIP-32 private derivation; only the steps a Cosmos HD path needs.
    parts = path.split("/")
    if not parts or parts[0] != "m":
        raise KeyFormatError(f"HD path {path!r} must start with 'm/'")
    digest = hmac.new(b"Bitcoin seed", seed, hashlib.sha512).digest()
    key, chain = int.from_bytes(digest[:32], "big"), digest[32:]
    for part in parts[1:]:
        hardened = part.endswith("'")
        try:
            index = int(part[:-1] if hardened else part)
        except ValueError:
            raise KeyFormatError(f"HD path {path!r} has a bad component {part!r}") from None
        if not 0 <= index < _HARDENED:
            raise KeyFormatError(f"HD path component {part!r} out of range")
        if hardened:
            data = b"\x00" + key.to_bytes(32, "big") + (index + _HARDENED).to_bytes(4, "big")
        else:
            point = ec.derive_private_key(key, ec.SECP256K1()).public_key().public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.CompressedPoint
            )
            data = point + index.to_bytes(4, "big")
        digest = hmac.new(chain, data, hashlib.sha512).digest()
        tweak = int.from_bytes(digest[:32], "big")
        if tweak >= _N:
            raise KeyFormatError("invalid BIP-32 child (probability 2^-127); use the next index")
        key, chain = (tweak + key) % _N, digest[32:]
        if key == 0:
            raise KeyFormatError("invalid BIP-32 child key; use the next index")
    return key.to_bytes(32, "big")


def new_mnemonic() -> str:
    """A fresh 24-word BIP-39 English mnemonic."""
    return Mnemonic("english").generate(strength=256)
