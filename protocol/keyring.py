"""Sealing private keys under a passphrase (the pure part of the keyring; file I/O lives in ``veriloco``).

Each key is sealed on its own: ``scrypt(passphrase, salt)`` gives a 256-bit key for AES-256-GCM,
whose associated data binds the entry's name and address, so sealed entries cannot be swapped
between names or tampered with unnoticed. A wrong passphrase and a tampered entry both fail the
GCM tag check and raise :class:`KeyringError` without saying anything about the secret.
"""

from __future__ import annotations

import base64
import os
import re

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from pydantic import BaseModel, ConfigDict, Field, field_validator

from protocol.keys import DEFAULT_PREFIX, PrivateKey, PublicKey, is_address

KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# scrypt cost: ~50 ms here, the usual interactive setting (2^15, 8, 1).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1


class KeyringError(ValueError):
    """A key cannot be sealed or opened (wrong passphrase, tampered entry, bad name)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


class SealedKey(BaseModel):
    """One keyring entry as stored on disk. Holds no secret in the clear."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    address: str
    pubkey: str = Field(pattern=r"^0[23][0-9a-f]{64}$")
    kdf: str = "scrypt"
    n: int = Field(default=SCRYPT_N, ge=2**10, le=2**20)
    r: int = Field(default=SCRYPT_R, ge=1, le=32)
    p: int = Field(default=SCRYPT_P, ge=1, le=16)
    salt: str
    nonce: str
    ciphertext: str

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not KEY_NAME.match(v):
            raise ValueError("key names are 1-64 characters of letters, digits, '_', '.', '-'")
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        if not is_address(v, prefix=None):
            raise ValueError("not a bech32 address")
        return v

    @property
    def public_key(self) -> PublicKey:
        return PublicKey(bytes.fromhex(self.pubkey))


def _derive(passphrase: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(passphrase.encode())


def _aad(name: str, address: str) -> bytes:
    return f"veriloco-keyring/v1\x00{name}\x00{address}".encode()


def seal(name: str, key: PrivateKey, passphrase: str, prefix: str = DEFAULT_PREFIX,
         n: int = SCRYPT_N) -> SealedKey:
    """Seal ``key`` under ``passphrase`` as entry ``name``.

    Args:
        name: the entry's name (letters, digits, ``_.-``).
        key: the private key.
        passphrase: must be non-empty.
        prefix: bech32 prefix of the stored address.
        n: scrypt cost (tests lower it).
    """
    if not passphrase:
        raise KeyringError("the passphrase must not be empty")
    if not KEY_NAME.match(name):
        raise KeyringError(f"bad key name {name!r}: use 1-64 letters, digits, '_', '.', '-'")
    address = key.address(prefix)
    salt, nonce = os.urandom(16), os.urandom(12)
    aead = AESGCM(_derive(passphrase, salt, n, SCRYPT_R, SCRYPT_P))
    ciphertext = aead.encrypt(nonce, key.secret_bytes(), _aad(name, address))
    return SealedKey(name=name, address=address, pubkey=key.public_key.hex(), n=n,
                     salt=_b64(salt), nonce=_b64(nonce), ciphertext=_b64(ciphertext))


def unseal(entry: SealedKey, passphrase: str) -> PrivateKey:
    """Open ``entry`` with ``passphrase``.

    Raises:
        KeyringError: wrong passphrase or tampered entry (indistinguishable by design).
    """
    try:
        salt, nonce, ct = _unb64(entry.salt), _unb64(entry.nonce), _unb64(entry.ciphertext)
    except ValueError:
        raise KeyringError(f"key {entry.name!r}: entry is corrupt (bad base64)") from None
    try:
        secret = AESGCM(_derive(passphrase, salt, entry.n, entry.r, entry.p)).decrypt(
            nonce, ct, _aad(entry.name, entry.address))
    except (InvalidTag, ValueError):
        raise KeyringError(f"key {entry.name!r}: wrong passphrase or tampered entry") from None
    key = PrivateKey(secret)
    if key.public_key.hex() != entry.pubkey:
        raise KeyringError(f"key {entry.name!r}: stored public key does not match the sealed secret")
    return key


class KeyringFile(BaseModel):
    """The whole keyring file: a version and its entries."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(default=1, ge=1, le=1)
    keys: list[SealedKey] = Field(default_factory=list)

    def get(self, name: str) -> SealedKey:
        for entry in self.keys:
            if entry.name == name:
                return entry
        raise KeyringError(f"no key named {name!r} (have: {', '.join(k.name for k in self.keys) or 'none'})")

    def add(self, entry: SealedKey) -> None:
        if any(k.name == entry.name for k in self.keys):
            raise KeyringError(f"a key named {entry.name!r} already exists")
        self.keys.append(entry)
