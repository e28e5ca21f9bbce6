"""The topk2 codec: format, round trip, determinism, error-feedback bookkeeping, refusal of bad payloads."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal

import numpy as np
import pytest
import torch

from protocol.rules.spec import QuantizationSpec
from trainer import compress
from trainer.delta import (
    decode_delta,
    delta_hash,
    dequantize,
    encode_delta,
    encode_pseudo_gradient,
    payload_bytes,
    payload_layout,
)
from trainer.model import parameter_shapes
from trainer.presets import preset
from trainer.tensorfile import TensorFileError, layout_of

BLOCK = 256
QUANT = QuantizationSpec(scheme="topk2", block_size=BLOCK)


def _delta(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"a.weight": torch.randn(40, 30, generator=g), "b.bias": torch.randn(7, generator=g) * 3,
            "c.weight": torch.randn(600, generator=g) * 1e-3}


def _zeros(delta: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return compress.zero_residual({n: t.shape for n, t in delta.items()})


def test_payload_keeps_the_largest_values_of_each_block_at_two_bits() -> None:
    delta = _delta()
    payload, _ = compress.compress(delta, _zeros(delta), BLOCK)
    shapes = {n: t.shape for n, t in delta.items()}
    assert layout_of(payload) == dict(compress.sparse_layout(shapes, BLOCK))
    k = compress.kept_per_block(BLOCK)
    flat = delta["a.weight"].reshape(-1)
    for b in range(payload["idx/a.weight"].shape[0]):
        block = flat[b * BLOCK:(b + 1) * BLOCK]
        kept = payload["idx/a.weight"][b].to(torch.int64)
        chosen = block[kept[kept < block.numel()]].abs()
        others = torch.ones(block.numel(), dtype=torch.bool)
        others[kept[kept < block.numel()]] = False
        # every kept magnitude is at least every dropped one
        assert float(chosen.min()) >= (float(block[others].abs().max()) if bool(others.any()) else 0.0)
        assert len(kept) == k and bool((kept[1:] > kept[:-1]).all())
    dense = compress.decompress(payload, shapes, BLOCK)
    values = dense["a.weight"].reshape(-1)[:BLOCK][payload["idx/a.weight"][0].to(torch.int64)]
    scale = float(payload["scale/a.weight"][0])
    levels = {round(x / scale, 4) for x in values.tolist()}
    assert levels <= {-1.5, -0.5, 0.5, 1.5}
    assert scale == pytest.approx(float(flat[:BLOCK].abs().max()) / 1.5)


def test_error_feedback_loses_nothing_it_only_delays() -> None:
    # What was sent plus what is kept is exactly what had to be sent: a = Δ + r = Δ̂ + r'.
    delta = _delta(1)
    shapes = {n: t.shape for n, t in delta.items()}
    residual = _zeros(delta)
    sent_total = {n: torch.zeros_like(t, dtype=torch.float64) for n, t in delta.items()}
    for epoch in range(6):
        payload, nxt = compress.compress(delta, residual, BLOCK)
        sent = compress.decompress(payload, shapes, BLOCK)
        for n in delta:
            assert torch.equal(sent[n] + nxt[n], delta[n] + residual[n]) or torch.allclose(
                (sent[n] + nxt[n]).double(), (delta[n] + residual[n]).double(), rtol=0, atol=1e-6)
            sent_total[n] += sent[n].double()
        assert bytes(payload[compress.NEXT].tolist()) == compress.residual_digest(nxt)
        residual = nxt
        # over the epochs, Σ sent = (epochs) · Δ − residual
        for n in delta:
            assert torch.allclose(sent_total[n] + residual[n].double(), (epoch + 1) * delta[n].double(), atol=1e-4)


def test_the_residual_is_what_the_payload_left_out() -> None:
    delta = _delta(2)
    payload, nxt = compress.compress(delta, _zeros(delta), BLOCK)
    idx = payload["idx/a.weight"][0].to(torch.int64)
    dropped = torch.ones(BLOCK, dtype=torch.bool)
    dropped[idx] = False
    assert torch.equal(nxt["a.weight"].reshape(-1)[:BLOCK][dropped], delta["a.weight"].reshape(-1)[:BLOCK][dropped])


def test_payload_is_a_pure_function_of_its_inputs_at_any_thread_count() -> None:
    delta = {"w": torch.randn(1000, 700, generator=torch.Generator().manual_seed(3))}
    residual = {"w": torch.randn(1000, 700, generator=torch.Generator().manual_seed(4)) * 0.1}
    code = (
        "import torch,sys; from trainer import compress; from trainer.delta import delta_hash;"
        "torch.set_num_threads(int(sys.argv[1]));"
        "d={'w':torch.randn(1000,700,generator=torch.Generator().manual_seed(3))};"
        "r={'w':torch.randn(1000,700,generator=torch.Generator().manual_seed(4))*0.1};"
        "from decimal import Decimal; q,m=compress.compress(d,r,4096,Decimal('0.95'));"
        "p,n=compress.compress(d,r,4096); print(delta_hash(p).hex(), compress.residual_digest(n).hex(),"
        "delta_hash(q).hex(), compress.residual_digest(m).hex())"
    )
    here = compress.compress(delta, residual, 4096)
    decayed = compress.compress(delta, residual, 4096, Decimal("0.95"))
    expected = (f"{delta_hash(here[0]).hex()} {compress.residual_digest(here[1]).hex()} "
                f"{delta_hash(decayed[0]).hex()} {compress.residual_digest(decayed[1]).hex()}")
    for threads in (1, 2):
        out = subprocess.run([sys.executable, "-c", code, str(threads)], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected


def test_ties_go_to_the_lower_offset() -> None:
    delta = {"w": torch.ones(BLOCK)}
    payload, _ = compress.compress(delta, _zeros(delta), BLOCK)
    assert payload["idx/w"][0].tolist() == list(range(compress.kept_per_block(BLOCK)))


def test_round_trip_through_the_wire_format() -> None:
    spec = preset("tiny").with_changes(quantization={"scheme": "topk2", "block_size": 1024})
    shapes = parameter_shapes(spec)
    delta = {n: torch.randn(tuple(s), generator=torch.Generator().manual_seed(5)) for n, s in shapes.items()}
    payload, _ = encode_pseudo_gradient(delta, spec.quantization, None)
    back = decode_delta(encode_delta(payload, spec.quantization), spec)
    assert delta_hash(back) == delta_hash(payload)
    assert layout_of(back) == dict(payload_layout(shapes, spec.quantization))
    dense = dequantize(back, shapes, spec.quantization)
    assert set(dense) == set(shapes)
    # 1/64 of the values at 2 bits + int16 offsets, and a float32 scale per block of 1024
    n = sum(t.numel() for t in delta.values())
    assert payload_bytes(payload) / n < 0.045


def _tampered(spec_quant: QuantizationSpec, edit: str) -> bytes:
    spec = preset("tiny").with_changes(quantization=spec_quant.model_dump())
    shapes = parameter_shapes(spec)
    delta = {n: torch.randn(tuple(s), generator=torch.Generator().manual_seed(6)) for n, s in shapes.items()}
    payload, _ = encode_pseudo_gradient(delta, spec.quantization)
    name = next(n for n in sorted(payload) if n.startswith("idx/") and payload[n].shape[1] > 1)
    if edit == "duplicate":
        payload[name][0, 1] = payload[name][0, 0]
    elif edit == "outside":
        payload[name][0, -1] = spec.quantization.block_size
    else:
        payload[name.replace("idx/", "scale/")][0] = -1.0
    return encode_delta(payload, spec.quantization)


@pytest.mark.parametrize("edit", ["duplicate", "outside", "negative_scale"])
def test_a_malformed_payload_is_refused(edit: str) -> None:
    quant = QuantizationSpec(scheme="topk2", block_size=1024)
    spec = preset("tiny").with_changes(quantization=quant.model_dump())
    with pytest.raises(TensorFileError):
        decode_delta(_tampered(quant, edit), spec)


@pytest.mark.parametrize("block", [100, 128, 65_536])
def test_block_sizes_the_format_cannot_carry_are_refused(block: int) -> None:
    with pytest.raises(ValueError, match="topk2"):
        QuantizationSpec(scheme="topk2", block_size=block)


def test_a_residual_of_other_shapes_is_refused() -> None:
    delta = _delta()
    with pytest.raises(ValueError, match="residual"):
        compress.compress(delta, {"a.weight": torch.zeros(40, 30)}, BLOCK)


def _residual(delta: dict[str, torch.Tensor], seed: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(t.shape, generator=g) * 0.5 for n, t in delta.items()}


def test_no_decay_keeps_the_bits_from_before_the_field() -> None:
    # Digests of the payload and next residual from the codec before quantization.error_decay
    # existed (commit af1d5cd, a = Δ + r): β = 1, default or explicit, must reproduce them.
    delta = _delta()
    for payload, nxt in (compress.compress(delta, _residual(delta), BLOCK),
                         compress.compress(delta, _residual(delta), BLOCK, Decimal(1))):
        assert delta_hash(payload).hex() == "f726b83d24e65101c5fa43b8c1687b9871c4e18f94fbde924e93e4bf0023e4c1"
        assert compress.residual_digest(nxt).hex() == \
            "5128950b95f53c2c648defac0cb7aea65662c68541a12c9faeb0f625b8df06c0"


@pytest.mark.parametrize("beta", ["0.95", "0.9", "0.8", "0.3333333"])
def test_the_decay_is_one_float32_multiply_before_the_sum(beta: str) -> None:
    # The spec'd arithmetic, computed independently in numpy: β to float64 to float32, one float32
    # product per coordinate, then Δ + β·r in float32; the residual kept is a − decompress(payload).
    delta, residual = _delta(), _residual(_delta())
    shapes = {n: t.shape for n, t in delta.items()}
    beta32 = np.float32(float(beta))
    decayed = compress.decay_residual(residual, Decimal(beta))
    for n in residual:
        want = residual[n].numpy() * beta32
        assert want.dtype == np.float32 and np.array_equal(decayed[n].numpy().view(np.uint32), want.view(np.uint32))
    payload, nxt = compress.compress(delta, residual, BLOCK, Decimal(beta))
    a = {n: torch.from_numpy(delta[n].numpy() + residual[n].numpy() * beta32) for n in delta}
    reference, _ = compress.compress(a, _zeros(delta), BLOCK)  # a compressed from a zero residual
    assert all(torch.equal(payload[n], reference[n]) for n in payload if n != compress.NEXT)
    sent = compress.decompress(payload, shapes, BLOCK)
    assert all(torch.equal(nxt[n], a[n] - sent[n]) for n in delta)
    assert bytes(payload[compress.NEXT].tolist()) == compress.residual_digest(nxt)
    plain, _ = compress.compress(delta, residual, BLOCK)
    assert delta_hash(payload) != delta_hash(plain)  # another β is another Δ hash


def test_the_run_spec_decays_the_residual_through_the_one_encoder() -> None:
    delta, residual = _delta(), _residual(_delta())
    quant = QuantizationSpec(scheme="topk2", block_size=BLOCK, error_decay=Decimal("0.9"))
    payload, nxt = encode_pseudo_gradient(delta, quant, residual)
    direct, left = compress.compress(delta, residual, BLOCK, Decimal("0.9"))
    assert delta_hash(payload) == delta_hash(direct) and compress.residual_digest(nxt) == compress.residual_digest(left)
    # β = 0: no error feedback at all, the residual is ignored (the Δ of a zero residual)
    none = QuantizationSpec(scheme="topk2", block_size=BLOCK, error_decay=Decimal(0))
    assert delta_hash(encode_pseudo_gradient(delta, none, residual)[0]) == \
        delta_hash(compress.compress(delta, _zeros(delta), BLOCK)[0])


@pytest.mark.parametrize("beta", ["1.5", "-0.5"])
def test_a_decay_outside_zero_to_one_is_refused_by_the_codec(beta: str) -> None:
    delta = _delta()
    with pytest.raises(ValueError, match="error decay"):
        compress.compress(delta, _zeros(delta), BLOCK, Decimal(beta))
