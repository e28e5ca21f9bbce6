"""Keyring sealing: right passphrase opens, wrong one or tampering fails, entries cannot be swapped."""

import pytest

from protocol import keyring
from protocol.keyring import KeyringError, KeyringFile, SealedKey, seal, unseal
from protocol.keys import KeyType, PrivateKey

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


@pytest.mark.parametrize("key_type", list(KeyType))
def test_both_key_types_round_trip_with_their_type(key_type) -> None:
    key = PrivateKey.generate(key_type)
    entry = seal("alice", key, "pw", n=FAST)
    assert entry.key_type == key_type and entry.address == key.address() and entry.problem() is None
    opened = unseal(SealedKey.model_validate_json(entry.model_dump_json()), "pw")
    assert opened.key_type == key_type and opened.address() == key.address()


def test_entries_from_before_key_types_are_plain_secp256k1() -> None:
    key = PrivateKey.generate(KeyType.SECP256K1)
    old = seal("alice", key, "pw", n=FAST).model_dump()
    del old["key_type"]  # what keyring files written before key types hold
    entry = SealedKey.model_validate(old)
    assert entry.key_type == KeyType.SECP256K1 and entry.problem() is None
    assert unseal(entry, "pw").address() == key.address()


def test_altered_type_address_or_pubkey_is_flagged_without_a_passphrase_and_refused() -> None:
    key = PrivateKey.generate(KeyType.ETH_SECP256K1)
    entry = seal("alice", key, "pw", n=FAST)
    mallory = PrivateKey.generate(KeyType.ETH_SECP256K1)
    altered = [
        # The other type: the stored address is no longer its public key's.
        entry.model_copy(update={"key_type": KeyType.SECP256K1}),
        # Someone else's address (where a `keys show -a` reader would send funds).
        entry.model_copy(update={"address": mallory.address()}),
        # Someone else's public key and address together: the sealed secret is not theirs.
        entry.model_copy(update={"address": mallory.address(), "pubkey": mallory.public_key.hex()}),
    ]
    for bad in altered[:2]:
        assert "altered" in (bad.problem() or "")
        with pytest.raises(KeyringError, match="altered"):
            unseal(bad, "pw")
    assert altered[2].problem() is None  # consistent on its face; the AEAD binds the real address
    with pytest.raises(KeyringError, match="wrong passphrase or tampered"):
        unseal(altered[2], "pw")


@pytest.mark.parametrize("params, message", [
    ({"n": 2**20}, "power of two in"),
    ({"n": 2**30}, "power of two in"),
    ({"n": 3 * 2**12}, "power of two"),
    ({"n": 2**9}, "power of two in"),
    ({"r": 32}, "outside"),
    ({"p": 16}, "outside"),
    ({"n": 2**18, "r": 16}, "MiB"),
])
def test_kdf_parameters_are_bounded_before_use(params, message, monkeypatch) -> None:
    # A tampered file asking for gigabytes and minutes still loads (so `keys list` can flag it and
    # `keys delete` remove it), but is refused at once, before any scrypt run.
    entry = seal("alice", PrivateKey.generate(), "pw", n=FAST)
    tampered = SealedKey.model_validate({**entry.model_dump(), **params})
    assert message in (tampered.problem() or "")
    calls = []
    monkeypatch.setattr(keyring.Scrypt, "derive", lambda self, data: calls.append(1) or b"\0" * 32)
    with pytest.raises(KeyringError, match=message):
        unseal(tampered, "pw")
    with pytest.raises(KeyringError, match=message):
        keyring.check_kdf(tampered.n, tampered.r, tampered.p)
    assert calls == []


def test_kdf_parameters_of_a_new_entry_are_bounded_too() -> None:
    with pytest.raises(KeyringError, match="power of two"):
        seal("alice", PrivateKey.generate(), "pw", n=2**20)
    with pytest.raises(ValueError):
        SealedKey.model_validate({**seal("a", PrivateKey.generate(), "pw", n=FAST).model_dump(), "p": 0})


def test_sane_kdf_parameters_are_accepted() -> None:
    for n, r, p in [(2**10, 1, 1), (2**15, 8, 1), (2**18, 8, 4), (2**17, 16, 1)]:
        keyring.check_kdf(n, r, p)


def test_remove() -> None:
    ring = KeyringFile()
    ring.add(seal("alice", PrivateKey.generate(), "pw", n=FAST))
    assert ring.remove("alice").name == "alice" and ring.keys == []
    with pytest.raises(KeyringError, match="no key named"):
        ring.remove("alice")
