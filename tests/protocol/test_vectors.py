"""The shared vectors (also read by the contract's Rust tests) match the Python implementation."""

import json
from pathlib import Path

import pytest

from protocol.rules.beacon import beacon_commit, epoch_seed, genesis_seed
from protocol.rules.hashing import tagged_hash
from protocol.rules.losses import loss_digest
from protocol.rules.merkle import MerkleProof, merkle_proof, merkle_root, verify_proof
from protocol.rules.sampling import Stream, batch_indices, challenge_validators, challenged_segments, uniform

VECTORS = Path(__file__).parents[1] / "vectors"


def load(name: str) -> dict:
    return json.loads((VECTORS / f"{name}.json").read_text())


def test_hashing() -> None:
    import hashlib

    for case in load("hashing")["cases"]:
        data = bytes.fromhex(case["data_hex"])
        assert tagged_hash(case["tag"], data).hex() == case["digest"]
        # The construction, spelled out independently of the implementation:
        assert hashlib.sha256(b"veriloco:" + case["tag"].encode() + b"\x00" + data).hexdigest() == case["digest"]


def test_stream_and_uniform() -> None:
    for case in load("stream")["cases"]:
        material = bytes.fromhex(case["material_hex"])
        s = Stream(case["tag"], material)
        assert [str(s.next_u64()) for _ in range(4)] == case["first_u64"]
        s = Stream(case["tag"], material)
        assert [str(uniform(s, int(case["n"]))) for _ in case["uniform"]] == case["uniform"]


def test_sampling() -> None:
    v = load("sampling")
    for c in v["batch_indices"]:
        assert batch_indices(bytes.fromhex(c["run_id"]), bytes.fromhex(c["prev_epoch_seed"]), c["host"],
                             c["step"], c["batch_size"], c["n_windows"]) == c["indices"]
    for c in v["challenged_segments"]:
        assert challenged_segments(bytes.fromhex(c["epoch_seed"]), c["host"], c["segments"], c["k"]) == c["challenged"]
    for c in v["challenge_validators"]:
        got = challenge_validators(bytes.fromhex(c["epoch_seed"]), c["host"], c["segment"], c["validators"], c["r"])
        assert got == c["assigned"]
        assert c["host"] not in got


def test_beacon() -> None:
    v = load("beacon")
    for c in v["commits"]:
        assert beacon_commit(c["address"], c["epoch"], bytes.fromhex(c["secret"])).hex() == c["commit"]
    for c in v["epoch_seeds"]:
        reveals = {r["address"]: bytes.fromhex(r["secret"]) for r in c["reveals"]}
        assert epoch_seed(bytes.fromhex(c["run_id"]), c["epoch"], reveals).hex() == c["seed"]
    assert genesis_seed(bytes.fromhex(v["genesis"]["run_id"])).hex() == v["genesis"]["seed"]


def test_merkle() -> None:
    for c in load("merkle")["cases"]:
        leaves = [bytes.fromhex(x) for x in c["leaves"]]
        assert merkle_root(leaves).hex() == c["root"]
        for i, p in enumerate(c["proofs"]):
            assert merkle_proof(leaves, i).model_dump() == p
            assert verify_proof(leaves[i], MerkleProof.model_validate(p), bytes.fromhex(c["root"]), len(leaves))


def test_losses() -> None:
    for c in load("losses")["cases"]:
        assert loss_digest(c["losses_micro"]) == c["digest"]


@pytest.mark.parametrize("name", ["hashing", "stream", "sampling", "beacon", "merkle", "losses"])
def test_vectors_are_up_to_date(name, tmp_path, monkeypatch) -> None:
    # Regenerating must reproduce the committed files byte for byte.
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_vectors", VECTORS / "make_vectors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "HERE", tmp_path)
    module.main()
    assert (tmp_path / f"{name}.json").read_text() == (VECTORS / f"{name}.json").read_text()
