"""The commit-reveal randomness beacon that seeds each epoch's challenges.

Each participant joins epoch ``e`` with ``commit = H("beacon/commit", address || 0x00 || u64be(e) ||
secret)`` and later reveals the 32-byte ``secret``. The epoch seed hashes every valid reveal in
address order. It did not exist when hosts committed their work, so no host can know which of its
segments will be checked. Binding address and epoch into the commitment stops anyone from reusing
another participant's (or another epoch's) commitment.
"""

from __future__ import annotations

from protocol.rules.hashing import DIGEST_SIZE, Tag, tagged_hash, u64be

SECRET_SIZE = DIGEST_SIZE
"""Bytes of a beacon secret; the contract reads a revealed secret like a digest (64 hex characters)."""


def beacon_commit(address: str, epoch: int, secret: bytes) -> bytes:
    """The commitment a participant posts when it joins ``epoch``."""
    if len(secret) != SECRET_SIZE:
        raise ValueError(f"a beacon secret is {SECRET_SIZE} bytes")
    return tagged_hash(Tag.BEACON_COMMIT, address.encode(), b"\x00", u64be(epoch), secret)


def epoch_seed(run_id: bytes, epoch: int, reveals: dict[str, bytes]) -> bytes:
    """The seed of ``epoch`` from the valid reveals (address -> secret).

    With no reveals at all the seed is still defined (``H(run_id || epoch)``): everybody who could
    have revealed is then penalised, and the epoch can close.
    """
    parts: list[bytes] = [run_id, u64be(epoch)]
    for address in sorted(reveals):
        secret = reveals[address]
        if len(secret) != SECRET_SIZE:
            raise ValueError(f"a beacon secret is {SECRET_SIZE} bytes")
        parts += [address.encode(), b"\x00", secret]
    return tagged_hash(Tag.BEACON_SEED, *parts)


def genesis_seed(run_id: bytes) -> bytes:
    """The "previous epoch seed" used for the data assignment of epoch 0."""
    return tagged_hash(Tag.BEACON_GENESIS, run_id)
