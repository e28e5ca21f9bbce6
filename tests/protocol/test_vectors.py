"""The shared vectors (also read by the contract's Rust tests) match the Python implementation."""

import importlib.util
import json
from decimal import Decimal
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import TypeAdapter, ValidationError

from protocol.rules import limits, vdf
from protocol.rules.beacon import beacon_commit, epoch_seed, genesis_seed
from protocol.rules.commitments import trap_commitment, verdict_commitment
from protocol.rules.encoding import EncodingError, canonical_decimal
from protocol.rules.hashing import tagged_hash
from protocol.rules.losses import loss_digest, train_loss_micro
from protocol.rules.merkle import MerkleProof, merkle_proof, merkle_root, verify_proof
from protocol.rules.models import ARCHITECTURES
from protocol.rules.sampling import (
    Stream,
    batch_indices,
    challenged_segments,
    pickers,
    picks,
    seat_rank,
    stake_committee,
    stake_seats,
    uniform,
    uniform128,
)
from protocol.rules.spec import RunSpec
from protocol.types import Amount, Dec

VECTORS = Path(__file__).parents[1] / "vectors"


def load(name: str) -> dict:
    return json.loads((VECTORS / f"{name}.json").read_text())


def make_vectors() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_vectors", VECTORS / "make_vectors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


VECTOR_NAMES = sorted(make_vectors().VECTORS)


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
    def stakes(pairs: list) -> list[tuple[str, int]]:
        return [(a, int(st)) for a, st in pairs]

    for c in v["uniform128"]:
        stream = Stream(c["tag"], bytes.fromhex(c["material_hex"]))
        assert [str(uniform128(stream, int(c["n"]))) for _ in c["uniform128"]] == c["uniform128"]
    for c in v["stake_seats"]:
        stream = Stream(c["tag"], bytes.fromhex(c["material_hex"]))
        assert stake_seats(stream, stakes(c["candidates"]), c["m"]) == c["seats"]
    for c in v["stake_committees"]:
        got = stake_committee(c["tag"], bytes.fromhex(c["material_hex"]), stakes(c["candidates"]), c["cap"])
        assert got == c["committee"]
    for c in v["pickers"]:
        got = pickers(bytes.fromhex(c["prev_seed"]), c["host"], stakes(c["validators"]), c["cap"])
        assert got == c["pickers"] and c["host"] not in got
    for c in v["picks"]:
        assert picks(bytes.fromhex(c["secret"]), c["host"], c["segments"], c["k"]) == c["picks"]
    for c in v["seat_ranks"]:
        assert seat_rank(bytes.fromhex(c["prev_seed"]), c["address"]).hex() == c["rank"]


def test_commitments() -> None:
    v = load("commitments")
    for c in v["verdicts"]:
        gain, dispute = c.get("gain_micro"), c.get("dispute_gain_micro")
        got = verdict_commitment(c["validator"], c["epoch"], c["host"], c["segment"], c["outcome"], c["distance"],
                                 bytes.fromhex(c["evidence"]), bytes.fromhex(c["salt"]), gain, dispute)
        assert got.hex() == c["commitment"]
        # Bound to the validator: the same opening under another address is another commitment.
        other = verdict_commitment(c["host"], c["epoch"], c["host"], c["segment"], c["outcome"], c["distance"],
                                   bytes.fromhex(c["evidence"]), bytes.fromhex(c["salt"]), gain, dispute)
        assert other.hex() != c["commitment"]
        if gain is not None:
            # The probe gains are bound too: another gain, or none, is another commitment.
            for changed, changed_dispute in ((gain + 1, dispute), (None, None), (gain, None if dispute else 5),
                                             (gain, None if dispute is None else dispute + 1)):
                if (changed, changed_dispute) == (gain, dispute):
                    continue
                assert verdict_commitment(c["validator"], c["epoch"], c["host"], c["segment"], c["outcome"],
                                          c["distance"], bytes.fromhex(c["evidence"]), bytes.fromhex(c["salt"]),
                                          changed, changed_dispute).hex() != c["commitment"]
    assert sum("dispute_gain_micro" in c for c in v["verdicts"]) == 2
    with pytest.raises(ValueError, match="only with a gain"):
        verdict_commitment("v", 0, "h", 0, "pass", "0", bytes(32), bytes(32), None, 1)
    for c in v["traps"]:
        assert trap_commitment(c["host"], c["epoch"], c["segments"], bytes.fromhex(c["salt"])).hex() == c["commitment"]


def test_beacon() -> None:
    v = load("beacon")
    for c in v["commits"]:
        assert beacon_commit(c["address"], c["epoch"], bytes.fromhex(c["secret"])).hex() == c["commit"]
    for c in v["epoch_seeds"]:
        reveals = {r["address"]: bytes.fromhex(r["secret"]) for r in c["reveals"]}
        assert epoch_seed(bytes.fromhex(c["run_id"]), c["epoch"], reveals).hex() == c["seed"]
    assert genesis_seed(bytes.fromhex(v["genesis"]["run_id"])).hex() == v["genesis"]["seed"]


def test_vdf() -> None:
    v = load("vdf")
    assert int(v["modulus"]) == vdf.MODULUS
    for c in v["cases"]:
        x = vdf.input_element(bytes.fromhex(c["seed"]))
        assert vdf.encode(x) == c["x"]
        y, proof = vdf.decode(c["y"]), vdf.decode(c["proof"])
        assert vdf.evaluate(x, c["squarings"]) == y and vdf.prove(x, y, c["squarings"]) == proof
        assert str(vdf.challenge_prime(x, y, c["squarings"])) == c["ell"]
        assert vdf.verify(x, c["squarings"], y, proof)
        assert vdf.delayed_seed(y).hex() == c["delayed_seed"]
        for bad in c["refused"]:
            y_bad = int(bad["y"], 16)
            assert not vdf.verify(x, bad["squarings"], y_bad, int(bad["proof"], 16)), bad["why"]
    for c in v["primes"]:
        assert vdf.is_probable_prime(int(c["n"])) == c["prime"]


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
    for c in load("losses")["train_loss"]:
        assert train_loss_micro(c["losses_micro"], c["segment_steps"]) == c["train_loss_micro"]


def _is_canonical(text: str) -> bool:
    try:
        return canonical_decimal(text) == text
    except EncodingError:
        return False


def test_decimals() -> None:
    v = load("decimals")
    dec = TypeAdapter(Dec)
    for text in v["canonical"]:
        assert _is_canonical(text) and Decimal(text) >= 0 and len(text) <= limits.MAX_DECIMAL_LEN, text
        assert dec.dump_python(dec.validate_python(text), mode="json") == text
    for text in v["not_canonical"]:
        assert not _is_canonical(text), text
    for text in v["negative"]:  # canonical, but a distance has no sign
        assert _is_canonical(text) and Decimal(text) < 0, text
    for text in v["too_long"]:  # canonical, but longer than the contract takes
        assert _is_canonical(text) and len(text) > limits.MAX_DECIMAL_LEN, text
    for case in v["normalized"]:
        assert canonical_decimal(case["input"]) == case["canonical"]
        assert dec.dump_python(dec.validate_python(case["input"]), mode="json") == case["canonical"]


def test_amounts() -> None:
    v = load("amounts")
    amount = TypeAdapter(Amount)
    for text in v["valid"]:
        assert amount.validate_python(text) == text
    for text in v["invalid"]:
        with pytest.raises(ValidationError):
            amount.validate_python(text)


def test_spec() -> None:
    v = load("spec")
    spec = RunSpec.from_canonical(v["spec_json"])
    assert spec.canonical().decode() == v["spec_json"]
    assert spec.run_id().hex() == v["run_id"]
    assert spec.train.segments == v["segments"]
    for text in v["not_canonical"] + v["invalid"]:
        with pytest.raises((EncodingError, ValidationError, ValueError)):
            RunSpec.from_canonical(text)


def test_limits() -> None:
    assert load("limits") == limits.all_limits()
    assert limits.all_limits()["MAX_SEGMENTS"] == 1024


def test_architectures() -> None:
    names = load("architectures")["names"]
    assert names == sorted(ARCHITECTURES) == ["gpt"]


def test_every_vector_file_is_generated() -> None:
    # The Rust suite reads every file it finds here; a file nobody writes would go stale unseen.
    assert sorted(p.stem for p in VECTORS.glob("*.json")) == VECTOR_NAMES


@pytest.mark.parametrize("name", VECTOR_NAMES)
def test_vectors_are_up_to_date(name, tmp_path, monkeypatch) -> None:
    # Regenerating must reproduce the committed files byte for byte.
    module = make_vectors()
    monkeypatch.setattr(module, "HERE", tmp_path)
    module.main()
    assert (tmp_path / f"{name}.json").read_text() == (VECTORS / f"{name}.json").read_text()
