"""Domain-separated SHA-256.

Every hash in veriloco is ``sha256(b"veriloco:" + tag + b"\\x00" + data)``. The tag names what is
hashed (``run-spec``, ``merkle/leaf``, ``checkpoint``, ...), so a digest of one kind can never be
passed off as another: a Merkle node is not a leaf, a checkpoint is not a model. Tags are ASCII
without NUL; the full list is in ``docs/protocol.md``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

from pydantic import AfterValidator

DIGEST_SIZE = 32
_PREFIX = b"veriloco:"
HEX_DIGEST_PATTERN = rf"^[0-9a-f]{{{2 * DIGEST_SIZE}}}$"
"""A digest as lowercase hex (what :data:`HexDigest` accepts), for validators that take a pattern."""
_HEX64 = re.compile(HEX_DIGEST_PATTERN)


class Tag:
    """The hash domains. One constant per kind of object, so call sites cannot misspell a tag."""

    RUN_SPEC = "run-spec"
    MERKLE_LEAF = "merkle/leaf"
    MERKLE_NODE = "merkle/node"
    CHECKPOINT = "checkpoint"
    MODEL = "model"
    DELTA = "delta"
    RESIDUAL = "residual"
    DATASET = "dataset"
    LOSSES = "losses"
    BEACON_COMMIT = "beacon/commit"
    BEACON_SEED = "beacon/seed"
    BEACON_GENESIS = "beacon/genesis"
    SAMPLE_BATCH = "sample/batch"
    SAMPLE_SEGMENTS = "sample/segments"
    SAMPLE_PICKERS = "sample/pickers"
    SAMPLE_PICKS = "sample/picks"
    PROBE_SEED = "probe/seed"
    PROBE_DISPUTE = "probe/dispute"
    SAMPLE_PROBE = "sample/probe"
    SEAT = "seat"
    VERDICT = "verdict"
    TRAPS = "traps"
    EVIDENCE = "evidence"
    MESSAGE = "message"
    STANDBY_RECEIPT = "standby/receipt"
    VDF_INPUT = "vdf/input"
    VDF_PRIME = "vdf/prime"
    VDF_SEED = "vdf/seed"


def tagged_hasher(tag: str) -> hashlib._Hash:
    """A sha256 object already fed ``"veriloco:" || tag || 0x00``, for streaming large data."""
    if "\x00" in tag or not tag.isascii():
        raise ValueError(f"hash tag {tag!r} must be ASCII without NUL")
    return hashlib.sha256(_PREFIX + tag.encode() + b"\x00")


def tagged_hash(tag: str, *parts: bytes) -> bytes:
    """``sha256("veriloco:" || tag || 0x00 || part_0 || part_1 || ...)``.

    Args:
        tag: the domain, ASCII without NUL.
        parts: the data, concatenated as given (callers fix widths or add separators).
    """
    h = tagged_hasher(tag)
    for part in parts:
        h.update(part)
    return h.digest()


def tagged_hash_hex(tag: str, *parts: bytes) -> str:
    """:func:`tagged_hash` as 64 lowercase hex characters."""
    return tagged_hash(tag, *parts).hex()


def _check_hex64(value: str) -> str:
    if not _HEX64.match(value):
        raise ValueError("must be 64 lowercase hex characters (a sha256 digest)")
    return value


HexDigest = Annotated[str, AfterValidator(_check_hex64)]
"""A sha256 digest as 64 lowercase hex characters, validated in pydantic models."""


def digest_from_hex(value: str) -> bytes:
    """Decode a :data:`HexDigest`, refusing anything but 64 lowercase hex characters."""
    return bytes.fromhex(_check_hex64(value))


def u32be(n: int) -> bytes:
    """Big-endian unsigned 32-bit."""
    return n.to_bytes(4, "big")


def u64be(n: int) -> bytes:
    """Big-endian unsigned 64-bit."""
    return n.to_bytes(8, "big")
