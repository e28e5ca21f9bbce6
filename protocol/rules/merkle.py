"""A Merkle tree over checkpoint leaf hashes, with inclusion proofs.

Construction (``docs/protocol.md``, "Merkle tree"):

* each leaf hash ``L_i`` (32 bytes) becomes the node ``H("merkle/leaf", L_i)``;
* a parent is ``H("merkle/node", left || right)``;
* on a level with an odd number of nodes the last one is promoted unchanged to the next level
  (never paired with itself, so no two different leaf lists share a root);
* the root of one leaf is that leaf's node; an empty tree has no root.

A proof is the list of sibling nodes from the leaf up, plus the leaf's index and the number of
leaves: the verifier recomputes the path from those two numbers, so sides are never taken on trust.
The number of leaves is on chain (the committed segment count S gives S + 1 leaves).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from protocol.errors import VerilocoError
from protocol.rules.hashing import DIGEST_SIZE, HexDigest, Tag, digest_from_hex, tagged_hash

MAX_LEAVES = 1 << 20


class MerkleError(VerilocoError, ValueError):
    """A tree cannot be built from the input, or a proof is malformed."""


def _leaf_node(leaf: bytes) -> bytes:
    if len(leaf) != DIGEST_SIZE:
        raise MerkleError(f"a leaf must be a {DIGEST_SIZE}-byte digest, got {len(leaf)} bytes")
    return tagged_hash(Tag.MERKLE_LEAF, leaf)


def _parent(left: bytes, right: bytes) -> bytes:
    return tagged_hash(Tag.MERKLE_NODE, left, right)


def _levels(leaves: list[bytes]) -> list[list[bytes]]:
    if not leaves:
        raise MerkleError("a Merkle tree needs at least one leaf")
    if len(leaves) > MAX_LEAVES:
        raise MerkleError(f"too many leaves ({len(leaves)} > {MAX_LEAVES})")
    level = [_leaf_node(leaf) for leaf in leaves]
    levels = [level]
    while len(level) > 1:
        nxt = [_parent(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        levels.append(nxt)
        level = nxt
    return levels


def merkle_root(leaves: list[bytes]) -> bytes:
    """The root over ``leaves`` (each a 32-byte digest)."""
    return _levels(leaves)[-1][0]


class MerkleProof(BaseModel):
    """An inclusion proof, as it travels between hosts and validators."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: int = Field(ge=0, lt=MAX_LEAVES)
    leaf_count: int = Field(ge=1, le=MAX_LEAVES)
    siblings: list[HexDigest] = Field(max_length=64)


def merkle_proof(leaves: list[bytes], index: int) -> MerkleProof:
    """The proof that ``leaves[index]`` is under :func:`merkle_root` of ``leaves``."""
    if not 0 <= index < len(leaves):
        raise MerkleError(f"leaf index {index} out of range for {len(leaves)} leaves")
    siblings: list[str] = []
    i = index
    for level in _levels(leaves)[:-1]:
        if i % 2 == 1:
            siblings.append(level[i - 1].hex())
        elif i + 1 < len(level):
            siblings.append(level[i + 1].hex())
        # else: the last node of an odd level is promoted, no sibling.
        i //= 2
    return MerkleProof(index=index, leaf_count=len(leaves), siblings=siblings)


def root_from_proof(leaf: bytes, proof: MerkleProof) -> bytes:
    """Recompute the root implied by ``leaf`` and ``proof``.

    Raises:
        MerkleError: the proof's shape does not fit its index and leaf count.
    """
    if proof.index >= proof.leaf_count:
        raise MerkleError(f"proof index {proof.index} is not below its leaf count {proof.leaf_count}")
    node = _leaf_node(leaf)
    siblings = [digest_from_hex(s) for s in proof.siblings]
    i, width, used = proof.index, proof.leaf_count, 0
    while width > 1:
        if i % 2 == 1 or i + 1 < width:
            if used == len(siblings):
                raise MerkleError("proof has too few siblings for its index and leaf count")
            sibling = siblings[used]
            used += 1
            node = _parent(sibling, node) if i % 2 == 1 else _parent(node, sibling)
        i //= 2
        width = (width + 1) // 2
    if used != len(siblings):
        raise MerkleError("proof has more siblings than its index and leaf count allow")
    return node


def verify_proof(leaf: bytes, proof: MerkleProof, root: bytes, leaf_count: int) -> bool:
    """True when ``leaf`` is leaf number ``proof.index`` of the tree with ``root`` and ``leaf_count`` leaves.

    ``leaf_count`` comes from the chain, not from the proof, so a proof for a tree of another size fails.
    """
    if proof.leaf_count != leaf_count:
        return False
    try:
        return root_from_proof(leaf, proof) == root
    except MerkleError:
        return False
