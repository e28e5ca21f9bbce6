"""Pseudo-gradients: quantization error bounds, exact formats, the hash covers the payload sent."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from suite_env import small_spec

from protocol.rules.hashing import Tag
from protocol.rules.spec import QuantizationSpec
from protocol.tensors.digest import tensors_digest
from trainer.delta import (
    decode_delta,
    delta_hash,
    dequantize,
    encode_delta,
    load_delta,
    payload_bytes,
    payload_layout,
    pseudo_gradient,
    quantize,
    relative_error,
)
from trainer.model import parameter_shapes
from trainer.outer import GlobalState
from trainer.tensorfile import TensorFileError, layout_of

INT8, INT4, NONE = (QuantizationSpec(scheme=s, block_size=64) for s in ("int8", "int4", "none"))


@settings(max_examples=40, deadline=None)
@given(numel=st.integers(1, 300), block=st.sampled_from([8, 9, 64, 100]), scheme=st.sampled_from(["int8", "int4"]),
       seed=st.integers(0, 2**31), scale=st.floats(1e-6, 1e3))
def test_error_is_at_most_half_a_step_per_block(numel, block, scheme, seed, scale) -> None:
    quant = QuantizationSpec(scheme=scheme, block_size=block)
    x = torch.randn(numel, generator=torch.Generator().manual_seed(seed)) * scale
    payload = quantize({"w": x}, quant)
    assert layout_of(payload) == payload_layout({"w": x.shape}, quant)
    back = dequantize(payload, {"w": x.shape}, quant)["w"]
    levels = 127 if scheme == "int8" else 7
    padded = torch.cat([x, x.new_zeros(-numel % block)]).view(-1, block)
    step = padded.abs().amax(dim=1, keepdim=True) / levels
    err = (torch.cat([back, back.new_zeros(-numel % block)]).view(-1, block) - padded).abs()
    assert bool((err <= step / 2 * (1 + 1e-5) + 1e-30).all())


def test_relative_error_on_gaussian_tensors_and_exactness_of_none() -> None:
    g = torch.Generator().manual_seed(0)
    delta = {"a": torch.randn(64, 130, generator=g), "b": torch.randn(7, generator=g) * 1e-3}
    shapes = {n: t.shape for n, t in delta.items()}
    e8 = relative_error(delta, dequantize(quantize(delta, INT8), shapes, INT8))
    e4 = relative_error(delta, dequantize(quantize(delta, INT4), shapes, INT4))
    assert 0 < e8 < 0.01 and e8 < e4 < 0.15
    assert relative_error(delta, dequantize(quantize(delta, NONE), shapes, NONE)) == 0.0
    sizes = [payload_bytes(quantize(delta, q)) for q in (NONE, INT8, INT4)]
    assert sizes[0] > 3.7 * sizes[1] and sizes[1] > 1.7 * sizes[2]


def test_zero_blocks_and_int4_packing() -> None:
    x = torch.tensor([0.0] * 8 + [7.0, -7.0, 1.0])  # 11 values: one zero block, one odd nibble
    quant = QuantizationSpec(scheme="int4", block_size=8)
    payload = quantize({"w": x}, quant)
    assert payload["scale/w"].tolist() == [0.0, 1.0]
    assert payload["q/w"].dtype == torch.uint8 and payload["q/w"].numel() == 8
    assert payload["q/w"][4].item() == (7 + 8) | ((-7 + 8) << 4)  # elements 8 and 9 share byte 4
    assert torch.equal(dequantize(payload, {"w": x.shape}, quant)["w"], x)


def test_quantization_is_independent_of_the_thread_count(threads) -> None:
    delta = {"w": torch.randn(1 << 20, generator=torch.Generator().manual_seed(1))}
    threads(1)
    one = delta_hash(quantize(delta, INT8))
    threads(2)
    assert delta_hash(quantize(delta, INT8)) == one


def test_hash_covers_exactly_the_payload_served(tmp_path) -> None:
    spec = small_spec()
    start = GlobalState.initial(spec).params
    end = {n: p + 0.01 * torch.randn_like(p) for n, p in start.items()}
    delta = pseudo_gradient(start, end)
    assert torch.allclose(delta["tok.weight"], start["tok.weight"] - end["tok.weight"])
    payload = quantize(delta, spec.quantization)
    data = encode_delta(payload, spec.quantization)
    path = tmp_path / "delta.safetensors"
    path.write_bytes(data)
    received = load_delta(path, spec)
    assert delta_hash(received) == delta_hash(payload) == tensors_digest(Tag.DELTA, payload)
    tampered = dict(received)
    tampered["q/head.weight"] = received["q/head.weight"].clone()
    tampered["q/head.weight"][0, 0] += 1
    assert delta_hash(tampered) != delta_hash(payload)
    shapes = parameter_shapes(spec)
    assert relative_error(delta, dequantize(received, shapes, spec.quantization)) < 0.01


def test_payload_of_another_scheme_or_with_bad_scales_is_refused() -> None:
    spec = small_spec()
    delta = {n: torch.randn(s) for n, s in parameter_shapes(spec).items()}
    int4 = QuantizationSpec(scheme="int4", block_size=64)
    with pytest.raises(TensorFileError, match="expected I8"):
        decode_delta(encode_delta(quantize(delta, int4), int4), spec)  # the spec says int8
    payload = quantize(delta, spec.quantization)
    bad_meta = encode_delta(payload, QuantizationSpec(scheme="int8", block_size=128))
    with pytest.raises(TensorFileError, match="metadata block_size='128'"):
        decode_delta(bad_meta, spec)
    payload["scale/head.weight"] = -payload["scale/head.weight"]
    with pytest.raises(TensorFileError, match="negative scale"):
        decode_delta(encode_delta(payload, spec.quantization), spec)
    payload["scale/head.weight"] = torch.full_like(payload["scale/head.weight"], float("nan"))
    with pytest.raises(TensorFileError, match="NaN or Inf"):
        decode_delta(encode_delta(payload, spec.quantization), spec)
