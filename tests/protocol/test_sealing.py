"""Sealing a beacon secret to a standby (``protocol/sealing.py``): it opens only with the standby's
key and only for the run, epoch, member and standby it was sealed for."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

from protocol.keys import KeyType, PrivateKey
from protocol.rules.encoding import canonical_json
from protocol.rules.hashing import Tag, tagged_hash
from protocol.sealing import SEALED_SIZE, SealContext, SealError, open_sealed, receipt_digest, seal

MEMBER = PrivateKey(bytes([3]) * 32)
STANDBY = PrivateKey(bytes([5]) * 32, KeyType.ETH_SECP256K1)
SECRET = bytes(range(32))
CONTEXT = SealContext(run_id="ab" * 32, epoch=7, member=MEMBER.address(), standby=STANDBY.address())


def test_a_sealed_secret_opens_with_the_standbys_key_and_does_not_show_the_secret() -> None:
    sealed = seal(SECRET, STANDBY.public_key, CONTEXT)
    assert len(sealed) == SEALED_SIZE and SECRET not in sealed
    assert open_sealed(sealed, STANDBY, CONTEXT) == SECRET
    assert seal(SECRET, STANDBY.public_key, CONTEXT) != sealed  # a fresh ephemeral key each time


@pytest.mark.parametrize("other", [
    {"epoch": 8}, {"run_id": "cd" * 32}, {"member": STANDBY.address()}, {"standby": MEMBER.address()},
])
def test_a_sealed_secret_does_not_open_for_another_epoch_run_member_or_standby(other) -> None:
    sealed = seal(SECRET, STANDBY.public_key, CONTEXT)
    with pytest.raises(SealError, match="does not open"):
        open_sealed(sealed, STANDBY, dataclasses.replace(CONTEXT, **other))


def test_a_sealed_secret_does_not_open_with_another_key_nor_tampered_with() -> None:
    sealed = seal(SECRET, STANDBY.public_key, CONTEXT)
    with pytest.raises(SealError, match="does not open"):
        open_sealed(sealed, MEMBER, CONTEXT)
    for at in (1 + 33, len(sealed) - 1):  # the ciphertext, the tag
        tampered = bytearray(sealed)
        tampered[at] ^= 1
        with pytest.raises(SealError, match="does not open"):
            open_sealed(bytes(tampered), STANDBY, CONTEXT)
    with pytest.raises(SealError, match="bytes"):
        open_sealed(sealed[:-1], STANDBY, CONTEXT)
    with pytest.raises(SealError, match="version"):
        open_sealed(b"\x02" + sealed[1:], STANDBY, CONTEXT)
    with pytest.raises(SealError, match="not a secp256k1 point"):
        open_sealed(sealed[:1] + b"\x05" + sealed[2:], STANDBY, CONTEXT)


def test_sealing_validates_its_inputs() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        seal(SECRET[:31], STANDBY.public_key, CONTEXT)
    with pytest.raises(ValueError, match="epoch"):
        dataclasses.replace(CONTEXT, epoch=-1)
    with pytest.raises(ValueError, match="run_id"):
        dataclasses.replace(CONTEXT, run_id="AB")
    with pytest.raises(ValueError, match="standby"):
        dataclasses.replace(CONTEXT, standby="inj1nope")


def test_a_receipt_binds_the_secret_and_its_context() -> None:
    digest = receipt_digest(CONTEXT, SECRET)
    receipt = STANDBY.sign(digest)
    assert STANDBY.public_key.verify(digest, receipt)
    assert not STANDBY.public_key.verify(receipt_digest(CONTEXT, bytes(32)), receipt)  # another secret
    assert not STANDBY.public_key.verify(receipt_digest(dataclasses.replace(CONTEXT, epoch=8), SECRET), receipt)
    assert not MEMBER.public_key.verify(digest, receipt)  # signed by the standby, no one else


def test_a_receipt_is_signed_in_its_own_hash_domain() -> None:
    # Written out with hashlib alone: H("standby/receipt", context || sha256(secret)), so a receipt
    # signature can never be taken for a signature over another kind of object (docs/protocol.md).
    context = (b"veriloco:standby-secret/v1\x00" + canonical_json(
        {"epoch": 7, "member": MEMBER.address(), "run_id": "ab" * 32, "standby": STANDBY.address()}))
    by_hand = hashlib.sha256(b"veriloco:standby/receipt\x00" + context + hashlib.sha256(SECRET).digest()).digest()
    assert receipt_digest(CONTEXT, SECRET) == by_hand
    # The untagged digest of the same parts is another digest: a signature over it is no receipt.
    untagged = hashlib.sha256(context + b"\x00receipt\x00" + hashlib.sha256(SECRET).digest()).digest()
    assert not STANDBY.public_key.verify(receipt_digest(CONTEXT, SECRET), STANDBY.sign(untagged))
    # Nor is a request signature (the "message" domain) over the same bytes.
    message = tagged_hash(Tag.MESSAGE, context, hashlib.sha256(SECRET).digest())
    assert not STANDBY.public_key.verify(receipt_digest(CONTEXT, SECRET), STANDBY.sign(message))
