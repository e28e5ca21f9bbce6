"""Keys: addresses equal cosmpy's, signatures verify only for the right key and message, secrets stay secret."""

import pytest
from cosmpy.crypto.address import Address as CosmpyAddress
from cosmpy.crypto.keypairs import PrivateKey as CosmpyKey
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.keys import (
    KeyFormatError,
    PrivateKey,
    PublicKey,
    decode_address,
    encode_address,
    is_address,
    new_mnemonic,
)

secrets = st.integers(1, 2**255).map(lambda n: n.to_bytes(32, "big"))


@settings(max_examples=25, deadline=None)
@given(secrets, st.sampled_from(["inj", "cosmos", "wasm"]))
def test_address_equals_cosmpy(secret, prefix) -> None:
    ours = PrivateKey(secret)
    theirs = CosmpyKey(secret)
    assert ours.public_key.compressed == theirs.public_key.public_key_bytes
    assert ours.address(prefix) == str(CosmpyAddress(theirs.public_key, prefix=prefix))


@settings(max_examples=10, deadline=None)
@given(secrets, st.binary(max_size=200))
def test_signatures_interoperate_with_cosmpy(secret, message) -> None:
    ours, theirs = PrivateKey(secret), CosmpyKey(secret)
    assert theirs.public_key.verify(message, ours.sign(message))
    assert ours.public_key.verify(message, theirs.sign(message))


def test_wrong_key_wrong_message_and_high_s_are_rejected() -> None:
    a, b = PrivateKey.generate(), PrivateKey.generate()
    sig = a.sign(b"epoch 3")
    assert a.public_key.verify(b"epoch 3", sig)
    assert not a.public_key.verify(b"epoch 4", sig)
    assert not b.public_key.verify(b"epoch 3", sig)
    assert not a.public_key.verify(b"epoch 3", sig[:63])
    n = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
    high_s = sig[:32] + (n - int.from_bytes(sig[32:], "big")).to_bytes(32, "big")
    assert not a.public_key.verify(b"epoch 3", high_s)


def test_mnemonic_known_vector() -> None:
    # The widely published Cosmos test vector for the "abandon ... about" mnemonic.
    words = "abandon " * 11 + "about"
    assert PrivateKey.from_mnemonic(words).address("cosmos") == "cosmos19rl4cm2hmr8afy4kldpxz3fka4jguq0auqdal4"
    fresh = new_mnemonic()
    assert len(fresh.split()) == 24 and PrivateKey.from_mnemonic(fresh).address()


@pytest.mark.parametrize("words", ["abandon " * 12, "not a mnemonic at all", ""])
def test_bad_mnemonic_rejected(words) -> None:
    with pytest.raises(KeyFormatError, match="BIP-39"):
        PrivateKey.from_mnemonic(words)


def test_secret_never_printed() -> None:
    key = PrivateKey(bytes(range(1, 33)))
    text = repr(key) + str(key)
    assert bytes(range(1, 33)).hex() not in text and key.address() in text
    with pytest.raises(KeyFormatError) as err:
        PrivateKey(bytes(31))
    assert "00" * 31 not in str(err.value)


def test_address_decoding_rejects_bad_input() -> None:
    good = PrivateKey.generate().address()
    assert decode_address(good) and is_address(good)
    bad_checksum = good[:-1] + ("q" if good[-1] != "q" else "p")
    for bad in [good.upper(), bad_checksum, "inj1", "", good.replace("inj", "cosmos", 1)]:
        assert not is_address(bad)
    with pytest.raises(KeyFormatError, match="prefix"):
        decode_address(encode_address(bytes(20), "cosmos"), "inj")
    assert is_address(encode_address(bytes(32), "inj"))  # contract addresses are 32 bytes


def test_public_key_validation() -> None:
    with pytest.raises(KeyFormatError):
        PublicKey(b"\x04" + bytes(32))
    with pytest.raises(KeyFormatError, match="not a point"):
        PublicKey(b"\x02" + b"\xff" * 32)
