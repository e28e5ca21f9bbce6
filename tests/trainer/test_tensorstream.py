"""Streaming reads: the digest of what arrives equals the committed hash whatever the chunking, and a
stream that is too long, too short, malformed, out of order beyond the cap or not bytes is refused
without reading more than the layout allows."""

from __future__ import annotations

import itertools
import json
import struct

import pytest
import torch

from protocol.rules.hashing import Tag
from protocol.tensors.digest import tensors_digest
from trainer.checkpoint import FORMAT, CheckpointError, checkpoint_layout, stream_checkpoint
from trainer.delta import delta_hash, encode_delta, quantize, stream_delta
from trainer.inner import start_checkpoint
from trainer.outer import GlobalState
from trainer.tensorfile import TensorFileError, encode_tensors, expected_size, header_limit
from trainer.tensorstream import TensorStream, bytes_chunks


def _leaf(spec):
    state = GlobalState.initial(spec).params
    ckpt = start_checkpoint(spec, state, 3)
    return ckpt, ckpt.encode()


@pytest.mark.parametrize("chunk", [1, 7, 4096, 1 << 22])
def test_checkpoint_hash_as_bytes_arrive_equals_the_leaf_hash(spec, chunk) -> None:
    ckpt, data = _leaf(spec)
    decoded, digest = stream_checkpoint(bytes_chunks(data, chunk), spec, 0)
    assert digest == ckpt.leaf_hash()
    got, want = decoded.tensors(), ckpt.tensors()
    assert set(got) == set(want) and all(torch.equal(got[n], want[n]) for n in want)


@pytest.mark.parametrize("scheme", ["none", "int8", "int4"])
def test_delta_hash_as_bytes_arrive_equals_the_committed_hash(spec, scheme) -> None:
    spec = spec.with_changes(quantization={"scheme": scheme})
    gen = torch.Generator().manual_seed(1)
    delta = {n: torch.randn(p.shape, generator=gen) * 1e-3 for n, p in GlobalState.initial(spec).params.items()}
    payload = quantize(delta, spec.quantization)
    data = encode_delta(payload, spec.quantization)
    decoded, digest = stream_delta(bytes_chunks(data, 999), spec)
    assert digest == delta_hash(payload)
    assert all(torch.equal(decoded[n], payload[n]) for n in payload)


def test_an_endless_stream_is_refused_after_the_layout_s_bytes(spec) -> None:
    _, data = _leaf(spec)
    pulled = 0

    def endless():
        nonlocal pulled
        for piece in itertools.chain(bytes_chunks(data, 4096), itertools.repeat(b"\0" * 4096)):
            pulled += len(piece)
            yield piece

    with pytest.raises(CheckpointError, match="oversized"):
        stream_checkpoint(endless(), spec, 0)
    layout = checkpoint_layout(spec, 0)
    assert pulled <= 8 + header_limit(layout) + expected_size(layout) + 4096


@pytest.mark.parametrize("cut", [4, 100, -1])
def test_a_short_stream_is_truncated(spec, cut) -> None:
    _, data = _leaf(spec)
    with pytest.raises(CheckpointError, match="truncated"):
        stream_checkpoint(bytes_chunks(data[:cut], 64), spec, 0)


def test_malformed_pieces_and_values_are_refused(spec) -> None:
    ckpt, data = _leaf(spec)
    with pytest.raises(CheckpointError, match="not bytes"):
        stream_checkpoint(iter([data[:10], "text"]), spec, 0)
    with pytest.raises(CheckpointError, match="exceeds"):
        stream_checkpoint(iter([struct.pack("<Q", 10**9)]), spec, 0)
    with pytest.raises(CheckpointError, match="losses has shape"):
        stream_checkpoint(bytes_chunks(data), spec, 1)  # leaf 1 has losses [c], leaf 0 [0]
    bad = ckpt.tensors()
    name = next(n for n in bad if n.startswith("param/"))
    bad[name] = bad[name].clone()
    bad[name].view(-1)[0] = float("nan")
    with pytest.raises(CheckpointError, match="NaN"):
        stream_checkpoint(bytes_chunks(encode_tensors(bad, FORMAT)), spec, 0)


def _file(tensors: list[tuple[str, torch.Tensor]]) -> bytes:
    # A safetensors file with the tensors' data in exactly the given order.
    header, offset, body = {}, 0, b""
    for name, t in tensors:
        raw = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        body += raw
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def test_out_of_order_tensors_are_buffered_up_to_the_cap() -> None:
    big = [(f"b{i}", torch.full((70_000,), float(i))) for i in range(5)]
    small = ("a", torch.ones(3))
    layout = {n: (torch.float32, tuple(t.shape)) for n, t in [small, *big]}
    in_order = TensorStream(bytes_chunks(_file([small, *big])), layout, Tag.MODEL)
    in_order.read_all()
    assert in_order.peak_pending == 0 and in_order.digest == tensors_digest(Tag.MODEL, dict([small, *big]))
    one_late = TensorStream(bytes_chunks(_file([*big[:1], small, *big[1:]])), layout, Tag.MODEL)
    one_late.read_all()  # b0 waits for a: one tensor buffered, same digest
    assert one_late.peak_pending == 280_000 and one_late.digest == in_order.digest
    # The small tensor last: all five large ones wait, more than 4× the largest tensor.
    with pytest.raises(TensorFileError, match="out of the digest's order"):
        TensorStream(bytes_chunks(_file([*big, small])), layout, Tag.MODEL).read_all()
