"""Keyring sealing: right passphrase opens, wrong one or tampering fails, entries cannot be swapped."""

import pytest

from protocol.keyring import KeyringError, KeyringFile, SealedKey, seal, unseal
from protocol.keys import PrivateKey

FAST = 2**10  # scrypt cost lowered for tests


def test_round_trip() -> None:
    key = PrivateKey.generate()
    entry = seal("alice", key, "pw", n=FAST)
    assert entry.address == key.address()
    assert key.secret_bytes().hex() not in entry.model_dump_json()
    assert unseal(entry, "pw").secret_bytes() == key.secret_bytes()


def test_wrong_passphrase() -> None:
    entry = seal("alice", PrivateKey.generate(), "pw", n=FAST)
    with pytest.raises(KeyringError, match="wrong passphrase"):
        unseal(entry, "pW")


def test_tampered_or_swapped_entries_fail() -> None:
    a = seal("alice", PrivateKey.generate(), "pw", n=FAST)
    b = seal("bob", PrivateKey.generate(), "pw", n=FAST)
    # Bob's ciphertext under Alice's name and address: the associated data no longer matches.
    swapped = a.model_copy(update={"ciphertext": b.ciphertext, "salt": b.salt, "nonce": b.nonce})
    with pytest.raises(KeyringError):
        unseal(swapped, "pw")
    renamed = a.model_copy(update={"name": "mallory"})
    with pytest.raises(KeyringError):
        unseal(renamed, "pw")
    with pytest.raises(KeyringError, match="corrupt"):
        unseal(a.model_copy(update={"salt": "!!"}), "pw")


def test_bad_names_and_empty_passphrase() -> None:
    with pytest.raises(KeyringError):
        seal("bad name", PrivateKey.generate(), "pw", n=FAST)
    with pytest.raises(KeyringError, match="empty"):
        seal("ok", PrivateKey.generate(), "", n=FAST)


def test_keyring_file_model() -> None:
    ring = KeyringFile()
    ring.add(seal("alice", PrivateKey.generate(), "pw", n=FAST))
    with pytest.raises(KeyringError, match="already exists"):
        ring.add(seal("alice", PrivateKey.generate(), "pw", n=FAST))
    with pytest.raises(KeyringError, match="no key named 'bob'"):
        ring.get("bob")
    assert KeyringFile.model_validate_json(ring.model_dump_json()) == ring
    with pytest.raises(ValueError):
        SealedKey.model_validate({**ring.keys[0].model_dump(), "extra": 1})
