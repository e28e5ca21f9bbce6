"""Sealing private keys under a passphrase (the pure part of the keyring; file I/O lives in ``veriloco``).

Each key is sealed on its own: ``scrypt(passphrase, salt)`` gives a 256-bit key for AES-256-GCM,
whose associated data binds the entry's name and address, so sealed entries cannot be swapped
between names or tampered with unnoticed. A wrong passphrase and a tampered entry both fail the
GCM tag check and raise :class:`KeyringError` without saying anything about the secret.

An entry records its key's type (``eth_secp256k1`` or ``secp256k1``; entries written before key
types existed are plain ``secp256k1``). The type is not in the associated data, and need not be:
the address is, and the secret together with the type determines the address, so :func:`unseal`
(and :meth:`SealedKey.problem`, without a passphrase) re-derive the address and refuse an entry
whose type, public key or address was changed.

The scrypt parameters are read from the file, so a tampered file could ask for gigabytes and
minutes before the passphrase is even checked; they are bounded (:func:`check_kdf`) before any
key derivation, with a one-line error naming the entry.
"""

from __future__ import annotations

import base64
import os
import re
from typing import Literal

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from pydantic import BaseModel, ConfigDict, Field, field_validator

from protocol.errors import VerilocoError
from protocol.keys import (
    DEFAULT_PREFIX,
    PUBKEY_HEX_PATTERN,
    KeyFormatError,
    KeyType,
    PrivateKey,
    PublicKey,
    decode_address,
    is_address,
)

KEY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
# scrypt cost: ~50 ms here, the usual interactive setting (2^15, 8, 1), 32 MiB.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
# What an entry may ask for. scrypt needs 128·n·r bytes and p times the work of one pass:
# the bounds allow 8x the default's memory (256 MiB) and 4 passes, about a second or two, and
# nothing like the 4 GiB × 16 passes that the old per-field limits (n <= 2^20, r <= 32,
# p <= 16) let a tampered file demand. 2^10 is the floor the tests use.
SCRYPT_N_MIN, SCRYPT_N_MAX = 2**10, 2**18
SCRYPT_R_MAX, SCRYPT_P_MAX = 16, 4
SCRYPT_MAX_MEMORY = 256 * 2**20


class KeyringError(VerilocoError, ValueError):
    """A key cannot be sealed or opened (wrong passphrase, tampered entry, bad name)."""


def check_kdf(n: int, r: int, p: int) -> None:
    """Refuse scrypt parameters outside the bounds above (before they are used).

    Raises:
        KeyringError: ``n`` not a power of two in [2^10, 2^18], ``r`` not in [1, 16], ``p`` not in
            [1, 4], or ``128·n·r`` over 256 MiB.
    """
    if not (SCRYPT_N_MIN <= n <= SCRYPT_N_MAX and n & (n - 1) == 0):
        raise KeyringError(f"scrypt n={n} is not a power of two in [2^10, 2^18]")
    if not (1 <= r <= SCRYPT_R_MAX and 1 <= p <= SCRYPT_P_MAX):
        raise KeyringError(f"scrypt r={r}, p={p} outside r in [1, {SCRYPT_R_MAX}], p in [1, {SCRYPT_P_MAX}]")
    if 128 * n * r > SCRYPT_MAX_MEMORY:
        raise KeyringError(f"scrypt n={n}, r={r} needs {128 * n * r // 2**20} MiB, over "
                           f"{SCRYPT_MAX_MEMORY // 2**20} MiB")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


class SealedKey(BaseModel):
    """One keyring entry as stored on disk. Holds no secret in the clear."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    address: str
    pubkey: str = Field(pattern=PUBKEY_HEX_PATTERN)
    # Entries from before key types existed hold plain secp256k1 keys.
    key_type: KeyType = KeyType.SECP256K1
    kdf: Literal["scrypt"] = "scrypt"
    # Loose shape limits only, so that a listing still shows (and flags) a tampered entry;
    # the real bounds are check_kdf's, applied before any derivation.
    n: int = Field(default=SCRYPT_N, ge=1, le=2**40)
    r: int = Field(default=SCRYPT_R, ge=1, le=2**20)
    p: int = Field(default=SCRYPT_P, ge=1, le=2**20)
    salt: str = Field(max_length=64)
    nonce: str = Field(max_length=64)
    ciphertext: str = Field(max_length=256)

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
        return PublicKey(bytes.fromhex(self.pubkey), self.key_type)

    def problem(self) -> str | None:
        """What is wrong with this entry as stored, or None: the address re-derived from the
        public key and type (under the address's own prefix) must equal the stored one, and the
        scrypt parameters must be within bounds. Needs no passphrase."""
        try:
            decode_address(self.address, prefix=None)
            derived = self.public_key.address(self.address.rsplit("1", 1)[0])
        except KeyFormatError as exc:
            return f"bad public key or address: {exc}"
        if derived != self.address:
            return (f"stored address {self.address} is not the address of its {self.key_type.value} "
                    f"public key ({derived}); the entry was altered")
        try:
            check_kdf(self.n, self.r, self.p)
        except KeyringError as exc:
            return str(exc)
        return None


def _derive(passphrase: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    check_kdf(n, r, p)
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
        n: scrypt cost (tests lower it; within :func:`check_kdf`'s bounds).
    """
    if not passphrase:
        raise KeyringError("the passphrase must not be empty")
    if not KEY_NAME.match(name):
        raise KeyringError(f"bad key name {name!r}: use 1-64 letters, digits, '_', '.', '-'")
    address = key.address(prefix)
    salt, nonce = os.urandom(16), os.urandom(12)
    aead = AESGCM(_derive(passphrase, salt, n, SCRYPT_R, SCRYPT_P))
    ciphertext = aead.encrypt(nonce, key.secret_bytes(), _aad(name, address))
    return SealedKey(name=name, address=address, pubkey=key.public_key.hex(), key_type=key.key_type, n=n,
                     salt=_b64(salt), nonce=_b64(nonce), ciphertext=_b64(ciphertext))


def unseal(entry: SealedKey, passphrase: str) -> PrivateKey:
    """Open ``entry`` with ``passphrase``.

    Raises:
        KeyringError: scrypt parameters out of bounds (checked first, so a tampered entry cannot
            make this slow), the stored address not that of the stored public key, a wrong
            passphrase or tampered ciphertext (indistinguishable by design).
    """
    problem = entry.problem()
    if problem is not None:
        raise KeyringError(f"key {entry.name!r}: {problem}")
    try:
        salt, nonce, ct = _unb64(entry.salt), _unb64(entry.nonce), _unb64(entry.ciphertext)
    except ValueError:
        raise KeyringError(f"key {entry.name!r}: entry is corrupt (bad base64)") from None
    try:
        secret = AESGCM(_derive(passphrase, salt, entry.n, entry.r, entry.p)).decrypt(
            nonce, ct, _aad(entry.name, entry.address))
    except (InvalidTag, ValueError):
        raise KeyringError(f"key {entry.name!r}: wrong passphrase or tampered entry") from None
    key = PrivateKey(secret, entry.key_type)
    # The address (authenticated above) and the public key were checked to match; the secret
    # must be that public key's.
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

    def remove(self, name: str) -> SealedKey:
        """Drop entry ``name`` and return it.

        Raises:
            KeyringError: there is no such entry.
        """
        entry = self.get(name)
        self.keys.remove(entry)
        return entry
