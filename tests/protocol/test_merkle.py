"""Merkle tree: proofs verify for every leaf, and any tampering fails."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.rules.hashing import Tag, tagged_hash
from protocol.rules.merkle import MerkleError, MerkleProof, merkle_proof, merkle_root, root_from_proof, verify_proof

leaf_lists = st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=40)


@given(leaf_lists, st.data())
def test_every_leaf_proves_into_the_root(leaves, data) -> None:
    root = merkle_root(leaves)
    i = data.draw(st.integers(0, len(leaves) - 1))
    assert verify_proof(leaves[i], merkle_proof(leaves, i), root, len(leaves))


@given(leaf_lists, st.data())
def test_a_proof_for_another_leaf_fails(leaves, data) -> None:
    i = data.draw(st.integers(0, len(leaves) - 1))
    other = data.draw(st.binary(min_size=32, max_size=32).filter(lambda b: b != leaves[i]))
    assert not verify_proof(other, merkle_proof(leaves, i), merkle_root(leaves), len(leaves))


@given(leaf_lists.filter(lambda xs: len(xs) >= 2), st.data())
def test_tampered_sibling_or_index_fails(leaves, data) -> None:
    root = merkle_root(leaves)
    i = data.draw(st.integers(0, len(leaves) - 1))
    proof = merkle_proof(leaves, i)
    if proof.siblings:
        j = data.draw(st.integers(0, len(proof.siblings) - 1))
        forged = list(proof.siblings)
        forged[j] = ("0" if forged[j][0] != "0" else "1") + forged[j][1:]
        assert not verify_proof(leaves[i], proof.model_copy(update={"siblings": forged}), root, len(leaves))
    others = st.integers(0, len(leaves) - 1).filter(lambda k: leaves[k] != leaves[i])
    k = data.draw(others if len(set(leaves)) > 1 else st.just(i))
    if k != i:
        assert not verify_proof(leaves[i], proof.model_copy(update={"index": k}), root, len(leaves))


def test_odd_levels_promote_instead_of_duplicating() -> None:
    a, b, c = (tagged_hash("t", bytes([i])) for i in range(3))
    la, lb, lc = (tagged_hash(Tag.MERKLE_LEAF, x) for x in (a, b, c))
    assert merkle_root([a, b, c]) == tagged_hash(Tag.MERKLE_NODE, tagged_hash(Tag.MERKLE_NODE, la, lb), lc)
    # Duplicating the last leaf (Bitcoin's CVE-2012-2459 shape) must change the root.
    assert merkle_root([a, b, c]) != merkle_root([a, b, c, c])
    assert merkle_root([a]) == la


def test_leaf_count_is_bound_to_the_chain_value() -> None:
    leaves = [bytes([i]) * 32 for i in range(4)]
    proof = merkle_proof(leaves, 1)
    assert not verify_proof(leaves[1], proof, merkle_root(leaves), leaf_count=5)


def test_malformed_inputs_are_errors() -> None:
    with pytest.raises(MerkleError):
        merkle_root([])
    with pytest.raises(MerkleError):
        merkle_root([b"short"])
    with pytest.raises(MerkleError):
        merkle_proof([bytes(32)], 1)
    leaves = [bytes([i]) * 32 for i in range(5)]
    proof = merkle_proof(leaves, 4)
    with pytest.raises(MerkleError, match="more siblings"):
        root_from_proof(leaves[4], proof.model_copy(update={"siblings": [*proof.siblings, "00" * 32]}))
    with pytest.raises(MerkleError, match="too few"):
        root_from_proof(leaves[0], MerkleProof(index=0, leaf_count=5, siblings=[]))
    with pytest.raises(ValueError):
        MerkleProof(index=0, leaf_count=2, siblings=["XYZ"])
