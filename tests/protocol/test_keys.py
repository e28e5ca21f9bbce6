"""Keys of both types: plain secp256k1 addresses and signatures equal cosmpy's; eth_secp256k1 ones
equal Ethereum's and Injective's (published vectors, an independent ECDSA implementation);
signatures verify only for the right key, type and message; secrets stay secret."""

import hashlib

import ecdsa
import pytest
from cosmpy.crypto.address import Address as CosmpyAddress
from cosmpy.crypto.keypairs import PrivateKey as CosmpyKey
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.keys import (
    DEFAULT_KEY_TYPE,
    KeyFormatError,
    KeyType,
    PrivateKey,
    PublicKey,
    address_bytes,
    decode_address,
    encode_address,
    hd_path,
    is_address,
    keccak256,
    new_mnemonic,
)

secrets = st.integers(1, 2**255).map(lambda n: n.to_bytes(32, "big"))
ABANDON = "abandon " * 11 + "about"
N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141


@settings(max_examples=25, deadline=None)
@given(secrets, st.sampled_from(["inj", "cosmos", "wasm"]))
def test_address_equals_cosmpy(secret, prefix) -> None:
    ours = PrivateKey(secret, KeyType.SECP256K1)
    theirs = CosmpyKey(secret)
    assert ours.public_key.compressed == theirs.public_key.public_key_bytes
    assert ours.address(prefix) == str(CosmpyAddress(theirs.public_key, prefix=prefix))


@settings(max_examples=10, deadline=None)
@given(secrets, st.binary(max_size=200))
def test_signatures_interoperate_with_cosmpy(secret, message) -> None:
    ours, theirs = PrivateKey(secret), CosmpyKey(secret)
    assert theirs.public_key.verify(message, ours.sign(message))
    assert ours.public_key.verify(message, theirs.sign(message))


@pytest.mark.parametrize("key_type", list(KeyType))
def test_wrong_key_wrong_message_and_high_s_are_rejected(key_type) -> None:
    a, b = PrivateKey.generate(key_type), PrivateKey.generate(key_type)
    sig = a.sign(b"epoch 3")
    assert a.public_key.verify(b"epoch 3", sig)
    assert not a.public_key.verify(b"epoch 4", sig)
    assert not b.public_key.verify(b"epoch 3", sig)
    assert not a.public_key.verify(b"epoch 3", sig[:63])
    high_s = sig[:32] + (N - int.from_bytes(sig[32:], "big")).to_bytes(32, "big")
    assert not a.public_key.verify(b"epoch 3", high_s)


def test_mnemonic_known_vectors() -> None:
    # The widely published Cosmos test vector for the "abandon ... about" mnemonic (coin type 118).
    assert PrivateKey.from_mnemonic(ABANDON, KeyType.SECP256K1).address("cosmos") == \
        "cosmos19rl4cm2hmr8afy4kldpxz3fka4jguq0auqdal4"
    # The same mnemonic on Ethereum's path m/44'/60'/0'/0/0 is the widely published Ethereum account
    # 0x9858EfFD232B4033E47d90003D41EC34EcaEda94 (BIP-39/BIP-44 test wallets); Injective's address
    # is those 20 bytes in bech32, which is what `injectived keys add --recover` prints (compared
    # live in tests/chain/test_keys_devnet.py).
    eth = PrivateKey.from_mnemonic(ABANDON)
    assert eth.key_type == KeyType.ETH_SECP256K1 == DEFAULT_KEY_TYPE
    # Its private key, as Ethereum wallets export it for this mnemonic (also published).
    assert eth.secret_bytes().hex() == "1ab42cc412b618bdea3a599e3c9bae199ebf030895b039e9db1e30dafb12b727"
    assert decode_address(eth.address()).hex() == "9858effd232b4033e47d90003d41ec34ecaeda94"
    assert eth.address() == "inj1npvwllfr9dqr8erajqqr6s0vxnk2ak55re90dz"
    # Injective's secp256k1 option with coin type 118 is the plain Cosmos key (same 20 bytes).
    cosmos = PrivateKey.from_mnemonic(ABANDON, KeyType.SECP256K1)
    assert cosmos.address() == "inj19rl4cm2hmr8afy4kldpxz3fka4jguq0akf6edd"
    # The path follows --coin-type / --account / --index.
    other = PrivateKey.from_mnemonic(ABANDON, KeyType.ETH_SECP256K1, hd_path(60, 0, 1))
    assert other.address() != eth.address()
    fresh = new_mnemonic()
    assert len(fresh.split()) == 24 and PrivateKey.from_mnemonic(fresh).address()


@pytest.mark.parametrize("secret, ethereum_address", [
    # Private keys 1 and 2: the Ethereum addresses of the generator G and 2G, widely published.
    (1, "7e5f4552091a69125d5dfcb7b8c2659029395bdf"),
    (2, "2b5ad5c4795c026514f8317c7a215e218dccd6cf"),
])
def test_eth_address_is_the_ethereum_address(secret, ethereum_address) -> None:
    key = PrivateKey(secret.to_bytes(32, "big"), KeyType.ETH_SECP256K1)
    assert address_bytes(key.public_key.compressed, KeyType.ETH_SECP256K1).hex() == ethereum_address
    assert key.address("inj") == encode_address(bytes.fromhex(ethereum_address), "inj")
    # The plain type of the same secret is another account.
    assert PrivateKey(secret.to_bytes(32, "big")).address() != key.address()


def test_keccak_is_ethereums_not_sha3() -> None:
    assert keccak256(b"").hex() == "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"
    assert keccak256(b"").hex() != hashlib.sha3_256(b"").hexdigest()


@settings(max_examples=10, deadline=None)
@given(secrets.filter(lambda b: int.from_bytes(b, "big") < N), st.binary(max_size=200))
def test_eth_signatures_are_over_keccak_and_verify_independently(secret, message) -> None:
    # The python-ecdsa package (another implementation) checks our signature over keccak256.
    key = PrivateKey(secret, KeyType.ETH_SECP256K1)
    sig = key.sign(message)
    theirs = ecdsa.VerifyingKey.from_string(key.public_key.compressed, curve=ecdsa.SECP256k1)
    assert theirs.verify_digest(sig, keccak256(message))
    with pytest.raises(ecdsa.BadSignatureError):
        theirs.verify_digest(sig, hashlib.sha256(message).digest())
    # And ours accepts theirs (a low-s form of it, as the chain demands).
    r, s = ecdsa.util.sigdecode_string(
        ecdsa.SigningKey.from_string(secret, curve=ecdsa.SECP256k1).sign_digest(keccak256(message)), N)
    assert key.public_key.verify(message, r.to_bytes(32, "big") + min(s, N - s).to_bytes(32, "big"))


def test_a_signature_binds_its_key_type() -> None:
    # The same secret as the other type: another address, and the other hash, so the signature
    # of one type never verifies as the other.
    secret = bytes(range(1, 33))
    plain, eth = PrivateKey(secret, KeyType.SECP256K1), PrivateKey(secret, KeyType.ETH_SECP256K1)
    assert plain.public_key.compressed == eth.public_key.compressed
    assert not eth.public_key.verify(b"m", plain.sign(b"m"))
    assert not plain.public_key.verify(b"m", eth.sign(b"m"))


def test_public_key_for_address_finds_the_type() -> None:
    for key_type in KeyType:
        key = PrivateKey.generate(key_type)
        found = PublicKey.for_address(key.public_key.compressed, key.address("cosmos"))
        assert found == key.public_key
    other = PrivateKey.generate()
    with pytest.raises(KeyFormatError, match="neither"):
        PublicKey.for_address(other.public_key.compressed, PrivateKey.generate().address())
    with pytest.raises(KeyFormatError):
        PublicKey.for_address(other.public_key.compressed, "inj1notanaddress")


def test_hex_import() -> None:
    secret = bytes(range(1, 33))
    for text in (secret.hex(), "0x" + secret.hex(), "  " + secret.hex().upper() + "\n"):
        key = PrivateKey.from_hex(text)
        assert key.secret_bytes() == secret and key.key_type == KeyType.ETH_SECP256K1
    assert PrivateKey.from_hex(secret.hex(), KeyType.SECP256K1).address() == PrivateKey(secret).address()
    for bad in ("12" * 31, "zz" * 32, "00" * 32, "ff" * 32, ""):
        with pytest.raises(KeyFormatError) as err:
            PrivateKey.from_hex(bad)
        assert bad not in str(err.value) or not bad


@pytest.mark.parametrize("words", ["abandon " * 12, "not a mnemonic at all", ""])
def test_bad_mnemonic_rejected(words) -> None:
    with pytest.raises(KeyFormatError, match="BIP-39"):
        PrivateKey.from_mnemonic(words)


@pytest.mark.parametrize("key_type", list(KeyType))
def test_secret_never_printed(key_type) -> None:
    key = PrivateKey(bytes(range(1, 33)), key_type)
    text = repr(key) + str(key)
    assert bytes(range(1, 33)).hex() not in text and key.address() in text and key_type.value in text
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
    with pytest.raises(KeyFormatError, match="unknown key type"):
        PublicKey(PrivateKey.generate().public_key.compressed, "ed25519")  # type: ignore[arg-type]
    with pytest.raises(KeyFormatError, match="unknown key type"):
        PrivateKey(bytes(range(1, 33)), "ed25519")  # type: ignore[arg-type]
