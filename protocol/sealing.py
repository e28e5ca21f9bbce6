"""Sealing a beacon secret to a standby revealer (issue 30): encrypted to the standby's key, bound
to one run, epoch, member and standby.

A primary hands its standby (``node.standby``) each epoch's beacon secret before the reveal, so
the secret must not travel in the clear: whoever knows it early can predict the seed. It is sealed
with ECIES on secp256k1, the curve of the chain keys both machines already have:

* a fresh ephemeral key pair per sealing; ECDH of its private key with the standby's public key;
* HKDF-SHA256 over the shared x coordinate, salted with the ephemeral and the recipient public
  keys, expanded to a 32-byte ChaCha20-Poly1305 key and its 12-byte nonce (one key per sealing,
  so the nonce is never reused);
* ChaCha20-Poly1305 over the 32-byte secret, with :func:`associated_data` (run id, epoch, member
  and standby addresses) as associated data: a sealed secret opens only for the run, epoch,
  member and standby it was sealed for, so it cannot be replayed to another epoch or run.

Wire form: ``VERSION (1 byte) || ephemeral compressed public key (33) || ciphertext and tag (48)``,
82 bytes, hex in messages.

The standby acknowledges with a **receipt**: its signature over :func:`receipt_digest` (the context
and a hash of the secret it opened, in the ``standby/receipt`` hash domain), so a party in between
cannot fake an acknowledgement of a secret the standby does not hold. Pure functions; no I/O.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from protocol.errors import VerilocoError
from protocol.keys import KeyFormatError, PrivateKey, PublicKey, is_address
from protocol.rules.beacon import SECRET_SIZE
from protocol.rules.encoding import canonical_json
from protocol.rules.hashing import Tag, tagged_hash

VERSION = 1
_PUBKEY_SIZE = 33
_TAG_SIZE = 16
SEALED_SIZE = 1 + _PUBKEY_SIZE + SECRET_SIZE + _TAG_SIZE
"""Bytes of a sealed beacon secret."""
_INFO = b"veriloco:standby-secret/v1"


class SealError(VerilocoError, ValueError):
    """A sealed secret that does not open: malformed, tampered with, or sealed for another key,
    run, epoch, member or standby (one message for all but the malformed, by design)."""


@dataclass(frozen=True)
class SealContext:
    """What a sealed secret is bound to.

    Attributes:
        run_id: the run id (hex).
        epoch: the epoch whose beacon secret it is.
        member: the address of the member whose secret it is.
        standby: the address of the standby it is sealed to (the member's own for a standby that
            signs with the member's key).
    """

    run_id: str
    epoch: int
    member: str
    standby: str

    def __post_init__(self) -> None:
        if not 0 <= self.epoch < 2**64:
            raise ValueError(f"epoch must be a u64, not {self.epoch}")
        if not self.run_id or len(self.run_id) % 2 or not all(c in "0123456789abcdef" for c in self.run_id):
            raise ValueError("run_id must be lowercase hex")
        for name, address in (("member", self.member), ("standby", self.standby)):
            if not is_address(address, None):
                raise ValueError(f"{name} {address!r} is not an address")


def associated_data(context: SealContext) -> bytes:
    """The bytes a sealing authenticates besides the secret (canonical JSON of the context)."""
    return _INFO + b"\x00" + canonical_json({"epoch": context.epoch, "member": context.member,
                                             "run_id": context.run_id, "standby": context.standby})


def _cipher(shared: bytes, ephemeral: bytes, recipient: bytes) -> tuple[ChaCha20Poly1305, bytes]:
    okm = HKDF(algorithm=hashes.SHA256(), length=32 + 12, salt=ephemeral + recipient, info=_INFO).derive(shared)
    return ChaCha20Poly1305(okm[:32]), okm[32:]


def seal(secret: bytes, recipient: PublicKey, context: SealContext) -> bytes:
    """``secret`` (32 bytes) sealed to ``recipient`` for ``context`` (see the module docstring).

    Raises:
        ValueError: the secret is not 32 bytes.
    """
    if len(secret) != SECRET_SIZE:
        raise ValueError(f"a beacon secret is {SECRET_SIZE} bytes, not {len(secret)}")
    ephemeral = PrivateKey.generate()
    epk = ephemeral.public_key.compressed
    cipher, nonce = _cipher(ephemeral.exchange(recipient), epk, recipient.compressed)
    return bytes([VERSION]) + epk + cipher.encrypt(nonce, secret, associated_data(context))


def open_sealed(sealed: bytes, key: PrivateKey, context: SealContext) -> bytes:
    """The 32-byte secret of ``sealed``, opened with the recipient's ``key``, for ``context``.

    Raises:
        SealError: malformed, tampered with, or sealed for another key or context.
    """
    if len(sealed) != SEALED_SIZE:
        raise SealError(f"a sealed secret is {SEALED_SIZE} bytes, not {len(sealed)}")
    if sealed[0] != VERSION:
        raise SealError(f"unknown sealing version {sealed[0]}")
    epk = sealed[1:1 + _PUBKEY_SIZE]
    try:
        ephemeral = PublicKey(epk)
    except KeyFormatError:
        raise SealError("the sealed secret's ephemeral key is not a secp256k1 point") from None
    cipher, nonce = _cipher(key.exchange(ephemeral), epk, key.public_key.compressed)
    try:
        return cipher.decrypt(nonce, sealed[1 + _PUBKEY_SIZE:], associated_data(context))
    except InvalidTag:
        raise SealError("the sealed secret does not open: tampered with, or sealed for another key, "
                        "run, epoch, member or standby") from None


def receipt_digest(context: SealContext, secret: bytes) -> bytes:
    """What a standby signs to acknowledge that it opened and holds ``secret`` for ``context``:
    ``H("standby/receipt", associated_data(context) || sha256(secret))``, in its own hash domain
    (``protocol.rules.hashing``) so a receipt can never pass for another signed object, such as a
    request signature (``H("message", …)``). The secret enters hashed (the chain's beacon
    commitment publishes a hash of it anyway), as the last 32 bytes, after the variable-length
    context, so the parts cannot be regrouped."""
    return tagged_hash(Tag.STANDBY_RECEIPT, associated_data(context), hashlib.sha256(secret).digest())
