"""The keyring file on disk: load, add, delete, and open keys sealed by :mod:`protocol.keyring`.

The file is JSON (``<home>/keyring.json``, mode 0600) holding only sealed entries; writes go to a
temporary file that replaces the old one, so a crash never leaves a half-written keyring.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from pydantic import ValidationError

from protocol.keyring import KeyringError, KeyringFile, SealedKey, seal, unseal
from protocol.keys import DEFAULT_PREFIX, PrivateKey
from veriloco.errors import CommandError

PASSPHRASE_ENV = "VERILOCO_PASSPHRASE"


class Keystore:
    """A keyring file. Keys are unsealed only on demand, with a passphrase, and never written in the clear."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def in_home(cls, home: Path) -> Keystore:
        return cls(home / "keyring.json")

    def load(self) -> KeyringFile:
        if not self.path.exists():
            return KeyringFile()
        try:
            return KeyringFile.model_validate_json(self.path.read_bytes())
        except ValidationError as exc:
            raise CommandError(f"keyring {self.path} is corrupt: {exc.errors()[0]['msg']}") from None

    def _save(self, ring: KeyringFile) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".keyring.")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(ring.model_dump_json(indent=1))
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def add(self, name: str, key: PrivateKey, passphrase: str, prefix: str = DEFAULT_PREFIX,
            scrypt_n: int | None = None) -> SealedKey:
        """Seal ``key`` as ``name`` and persist it.

        Raises:
            CommandError: the name exists, is malformed, or the passphrase is empty.
        """
        ring = self.load()
        try:
            entry = seal(name, key, passphrase, prefix=prefix, **({"n": scrypt_n} if scrypt_n else {}))
            ring.add(entry)
        except KeyringError as exc:
            raise CommandError(str(exc)) from None
        self._save(ring)
        return entry

    def entry(self, name: str) -> SealedKey:
        """The public entry of key ``name``, checked (its stored address is that of its public key).

        Raises:
            CommandError: no such key, or the entry was altered (an address that its public key
                does not derive could send funds or a stake to someone else's account).
        """
        try:
            entry = self.load().get(name)
        except KeyringError as exc:
            raise CommandError(str(exc)) from None
        problem = entry.problem()
        if problem is not None:
            raise CommandError(f"key {name!r} in {self.path}: {problem}")
        return entry

    def names(self) -> dict[str, str]:
        """Address -> name of every entry whose address follows from its public key (for reports;
        an altered entry is left out, so it can never label someone else's address as yours)."""
        return {k.address: k.name for k in self.load().keys if k.problem() is None}

    def delete(self, name: str) -> SealedKey:
        """Remove key ``name`` from the file (its secret is gone unless you kept the mnemonic or
        an export) and return the removed entry.

        Raises:
            CommandError: no such key.
        """
        ring = self.load()
        try:
            entry = ring.remove(name)
        except KeyringError as exc:
            raise CommandError(str(exc)) from None
        self._save(ring)
        return entry

    def open(self, name: str, passphrase: str | None = None) -> PrivateKey:
        """Unseal key ``name`` with ``passphrase`` (default: ``$VERILOCO_PASSPHRASE``)."""
        passphrase = passphrase if passphrase is not None else os.environ.get(PASSPHRASE_ENV)
        if passphrase is None:
            raise CommandError(f"key {name!r} is sealed: give a passphrase or set {PASSPHRASE_ENV}")
        try:
            return unseal(self.entry(name), passphrase)
        except KeyringError as exc:
            raise CommandError(str(exc)) from None
