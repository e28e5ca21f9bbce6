"""Checkpoints: round trip, stable leaf hashes that commit to every tensor, malformed files refused."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save as st_save
from suite_env import small_spec

from protocol.rules.hashing import Tag
from protocol.tensors.digest import tensors_digest
from trainer.checkpoint import Checkpoint, CheckpointError, decode_checkpoint, load_checkpoint
from trainer.inner import replay_segment, start_checkpoint
from trainer.outer import GlobalState
from trainer.tensorfile import TensorFileError


@pytest.fixture
def leaf1(spec, dataset, ctx) -> Checkpoint:
    return replay_segment(spec, dataset, ctx, start_checkpoint(spec, GlobalState.initial(spec).params, 0))


def _tensors(ckpt: Checkpoint) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in ckpt.tensors().items()}


def test_round_trip_and_hash_stability(spec, leaf1, tmp_path) -> None:
    path = tmp_path / "leaf.safetensors"
    leaf1.save(path)
    back = load_checkpoint(path, spec, 1)
    assert back.leaf_hash() == leaf1.leaf_hash() == tensors_digest(Tag.CHECKPOINT, leaf1.tensors())
    assert back.state.step == 4 and back.micro_batches == 1 and torch.equal(back.losses, leaf1.losses)
    assert back.encode() == leaf1.encode()
    assert decode_checkpoint(path.read_bytes(), spec, 1).leaf_hash() == leaf1.leaf_hash()
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left no temporary file


@pytest.mark.parametrize("field", ["losses", "rng_key", "micro_batches", "step", "adam.exp_avg_sq/head.weight"])
def test_leaf_hash_commits_to_every_tensor(leaf1, field) -> None:
    t = _tensors(leaf1)
    t[field] = t[field] + 1 if t[field].dtype == torch.int64 else t[field] * 1.5 + 1e-3
    assert tensors_digest(Tag.CHECKPOINT, t) != leaf1.leaf_hash()


def _bytes(tensors, metadata=None) -> bytes:
    return st_save(tensors, metadata=metadata if metadata is not None else {"format": "veriloco/checkpoint-1"})


def _header_len(data: bytes) -> int:
    return int.from_bytes(data[:8], "little")


def test_malformed_files_are_refused_with_clear_errors(spec, leaf1) -> None:
    good = leaf1.encode()
    cases: list[tuple[bytes, str]] = [
        (good[:-10], "truncated"),
        (good[:5], "truncated"),
        (good[:200], "truncated inside the header"),
        (good + b"\0" * 16, "oversized"),
        ((10**9).to_bytes(8, "little") + good[8:], "header of 1000000000 bytes"),
        (good[:8] + b"{" * _header_len(good) + good[8 + _header_len(good):], "not JSON"),
    ]
    t = _tensors(leaf1)
    wrong_shape = dict(t, **{"param/head.weight": torch.zeros(256, 32)})
    cases.append((_bytes(wrong_shape), "has shape"))
    wrong_dtype = dict(t, **{"param/head.weight": t["param/head.weight"].double()})
    cases.append((_bytes(wrong_dtype), "dtype F64, expected F32"))
    poisoned = t["param/head.weight"].clone().index_fill_(0, torch.tensor([3]), float("nan"))
    nan = dict(t, **{"param/head.weight": poisoned})
    cases.append((_bytes(nan), "NaN or Inf"))
    inf = dict(t, **{"adam.exp_avg/tok.weight": torch.full_like(t["adam.exp_avg/tok.weight"], float("inf"))})
    cases.append((_bytes(inf), "NaN or Inf"))
    cases.append((_bytes({k: v for k, v in t.items() if k != "rng_key"}), "missing \\['rng_key'\\]"))
    cases.append((_bytes(dict(t, extra=torch.zeros(1))), "unexpected \\['extra'\\]"))
    cases.append((_bytes(dict(t, step=torch.tensor(8))), "leaf 1 must be at step 4"))
    cases.append((_bytes(dict(t, micro_batches=torch.tensor(3))), "does not divide batch_size"))
    cases.append((_bytes(dict(t, losses=torch.zeros(3))), "losses has shape \\[3\\]"))
    cases.append((_bytes(t, metadata={}), "metadata format"))
    for data, message in cases:
        with pytest.raises(TensorFileError, match=message):
            decode_checkpoint(data, spec, 1)
    with pytest.raises(CheckpointError, match=r"outside 0..4"):
        decode_checkpoint(good, spec, 5)


def test_overlapping_offsets_are_refused(spec, leaf1) -> None:
    good = leaf1.encode()
    n = _header_len(good)
    header = json.loads(good[8:8 + n])
    a, b = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"][0])[:2]
    header[b]["data_offsets"] = [header[a]["data_offsets"][0], header[a]["data_offsets"][0] + (
        header[b]["data_offsets"][1] - header[b]["data_offsets"][0])]
    text = json.dumps(header).encode()
    with pytest.raises(TensorFileError, match="does not start where the previous tensor ends"):
        decode_checkpoint(len(text).to_bytes(8, "little") + text + good[8 + n:], spec, 1)


def test_a_file_too_large_for_the_layout_is_refused_before_reading(spec, tmp_path) -> None:
    path = tmp_path / "huge.safetensors"
    with open(path, "wb") as f:
        f.truncate(1 << 30)  # sparse: costs no disk
    with pytest.raises(TensorFileError, match="oversized"):
        load_checkpoint(path, spec, 1)
    with pytest.raises(TensorFileError, match="cannot read"):
        load_checkpoint(tmp_path / "absent.safetensors", spec, 1)


def test_a_checkpoint_of_another_model_is_refused(leaf1) -> None:
    other = small_spec(model={"params": {"n_layer": 2, "n_head": 4, "d_model": 64, "block_size": 64}})
    with pytest.raises(TensorFileError, match="tensor names differ"):
        decode_checkpoint(leaf1.encode(), other, 1)
