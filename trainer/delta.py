"""Pseudo-gradients: Δ = θ_e − θ_H, quantized blockwise for the wire, hashed over what is sent.

Quantization (``spec.quantization``), per parameter tensor, flattened in row-major order and
zero-padded to whole blocks of ``block_size`` values; each block has one float32 scale
``s = max|x| / L`` (0 for an all-zero block) and values ``q = clamp(round_half_even(x / s), −L, L)``:

=========  ====  ===========================================================================
scheme     L     payload tensors for parameter ``p``
=========  ====  ===========================================================================
``none``   —     ``delta/<p>`` F32, the parameter's shape (no quantization)
``int8``   127   ``q/<p>`` I8 ``[blocks, block_size]``; ``scale/<p>`` F32 ``[blocks]``
``int4``   7     ``q/<p>`` U8 ``[ceil(blocks · block_size / 2)]``: ``q + 8`` as nibbles, element
                 ``2i`` in the low nibble of byte ``i``, ``2i + 1`` in the high one (a missing
                 last element is 8, i.e. zero); ``scale/<p>`` F32 ``[blocks]``
``topk2``  —     the largest 1/64 of every block at 2 bits, with error feedback: :mod:`trainer.compress`
=========  ====  ===========================================================================

Dequantization is ``q · s`` (then the padding is dropped). The Δ hash is
``tensors_digest("delta", payload)``: it commits to exactly the quantized tensors that are served,
not to the float Δ they came from. Every operation here is elementwise or an exact maximum, so
the payload is bitwise independent of the thread count.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from protocol.rules.hashing import Tag
from protocol.rules.spec import QuantizationSpec, RunSpec
from protocol.tensors.digest import tensors_digest
from trainer import compress
from trainer.model import parameter_shapes
from trainer.tensorfile import (
    Layout,
    TensorFileError,
    decode_tensors,
    encode_tensors,
    expected_size,
    load_tensors,
    save_tensors,
)
from trainer.tensorstream import TensorStream

FORMAT = "veriloco/delta-1"
_LEVELS = {"int8": 127, "int4": 7}


def pseudo_gradient(start: Mapping[str, torch.Tensor], end: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Δ = θ_e − θ_H, per parameter, float32."""
    if set(start) != set(end):
        raise ValueError("start and end parameters have different names")
    return {name: (start[name].to(torch.float32) - end[name].to(torch.float32)) for name in sorted(start)}


def _blocks(numel: int, block_size: int) -> int:
    return -(-numel // block_size)


def carries_residual(quant: QuantizationSpec) -> bool:
    """Whether the scheme keeps an error-feedback residual across epochs (``topk2``)."""
    return quant.scheme == compress.SCHEME


def residual_lag(spec: RunSpec) -> int:
    """How many epochs back a ``topk2`` host's error-feedback residual comes from: 1 in a synchronous
    run; 2 in a pipelined one (``phases.pipelined``), whose epoch ``e`` trains and commits while
    ``e − 1`` still settles, so only ``e − 2``'s outcome is known then (docs/training.md, "Pipelined
    runs with topk2"): its epochs form two residual chains, the even and the odd ones."""
    return 2 if spec.phases.pipelined else 1


def residual_epochs_kept(spec: RunSpec) -> int:
    """How many epochs before the current one a host of a run that reaches ``topk2`` must keep
    whatever its ``keep_epochs``: the epoch its next residual comes from, whose Δ its validators
    chain from. Synchronous: 1. Pipelined: 3, since epoch e's validators check e (and read e − 2's
    Δ) while e + 1 is already current. 0 for a run without ``topk2``."""
    if residual_from(spec.quantization) is None:
        return 0
    return residual_lag(spec) + (1 if spec.phases.pipelined else 0)


def carried_from(spec: RunSpec, epoch: int) -> int | None:
    """The epoch whose residual epoch ``epoch`` goes on from when the host was accepted in it, or
    None when ``epoch`` starts from zeros whatever happened before. The one rule the host
    (``trainer.inner``), its validators' replay (``verifier.replay``) and the nodes that find the
    Δ to chain from (``node.validator``, ``node.host``) apply.

    ``spec`` is the run's (its ``quantization.schedule`` unresolved). The source is
    ``epoch − residual_lag(spec)`` when both it and ``epoch`` use ``topk2``; before it, and in the
    first ``topk2`` epochs after a switch from a dense scheme (which leaves none), zeros. A schedule
    never steps from ``topk2`` back to a dense scheme, so every epoch in between is ``topk2`` too."""
    source = epoch - residual_lag(spec)
    quant = spec.quantization
    if source < 0 or not carries_residual(quant.at(source)) or not carries_residual(quant.at(epoch)):
        return None
    return source


def residual_from(quant: QuantizationSpec) -> int | None:
    """The first epoch whose scheme carries an error-feedback residual (``topk2``), following
    ``quantization.schedule``; None when no epoch of the run does."""
    if carries_residual(quant):
        return 0
    return next((step.from_epoch for step in quant.schedule if step.scheme == compress.SCHEME), None)


def encode_pseudo_gradient(delta: Mapping[str, torch.Tensor], quant: QuantizationSpec,
                           residual: Mapping[str, torch.Tensor] | None = None,
                           ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor] | None]:
    """The wire payload of an epoch's Δ, and the residual it leaves (error-feedback schemes only).

    Args:
        delta: θ_e − θ_H.
        quant: the run's scheme.
        residual: the residual carried into the epoch, as the previous Δ left it (the spec's
            ``error_decay`` is applied here, in :func:`trainer.compress.compress`); ``None`` for a
            scheme without one (zeros are assumed for ``topk2`` when it is omitted).

    Returns:
        ``(payload, next residual)``; the residual is ``None`` for ``none``/``int8``/``int4``.
    """
    if carries_residual(quant):
        carried = residual if residual is not None else compress.zero_residual({n: t.shape for n, t in delta.items()})
        return compress.compress(delta, carried, quant.block_size, quant.error_decay)
    if residual is not None:
        raise ValueError(f"scheme {quant.scheme} carries no residual")
    return quantize(delta, quant), None


def quantize(delta: Mapping[str, torch.Tensor], quant: QuantizationSpec) -> dict[str, torch.Tensor]:
    """The wire payload of ``delta`` under ``quant`` (see the module docstring for the format);
    for ``topk2`` with a zero residual (:func:`encode_pseudo_gradient` carries one)."""
    if carries_residual(quant):
        return encode_pseudo_gradient(delta, quant)[0]
    if quant.scheme == "none":
        return {f"delta/{n}": t.detach().to(torch.float32).clone() for n, t in delta.items()}
    levels, bs = _LEVELS[quant.scheme], quant.block_size
    payload: dict[str, torch.Tensor] = {}
    for name, t in delta.items():
        flat = t.detach().to(torch.float32).reshape(-1)
        nb = _blocks(flat.numel(), bs)
        blocks = torch.cat([flat, flat.new_zeros(nb * bs - flat.numel())]).view(nb, bs)
        scale = blocks.abs().amax(dim=1) / levels
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # all-zero blocks quantize to 0
        q = torch.round(blocks / safe.unsqueeze(1)).clamp_(-levels, levels)
        if quant.scheme == "int8":
            payload[f"q/{name}"] = q.to(torch.int8)
        else:
            nibbles = (q.reshape(-1) + 8).to(torch.uint8)
            if nibbles.numel() % 2:
                nibbles = torch.cat([nibbles, nibbles.new_full((1,), 8)])
            payload[f"q/{name}"] = nibbles[0::2] | (nibbles[1::2] << 4)
        payload[f"scale/{name}"] = scale
    return payload


def dequantize(payload: Mapping[str, torch.Tensor], shapes: Mapping[str, torch.Size],
               quant: QuantizationSpec) -> dict[str, torch.Tensor]:
    """Float32 Δ from a payload whose layout was checked (:func:`payload_layout`)."""
    if carries_residual(quant):
        return compress.decompress(payload, shapes, quant.block_size)
    if quant.scheme == "none":
        return {name: payload[f"delta/{name}"].clone() for name in sorted(shapes)}
    bs = quant.block_size
    out: dict[str, torch.Tensor] = {}
    for name in sorted(shapes):
        shape, scale = torch.Size(shapes[name]), payload[f"scale/{name}"]
        q = payload[f"q/{name}"]
        if quant.scheme == "int4":
            q = torch.stack([q & 0x0F, q >> 4], dim=1).reshape(-1)[:scale.numel() * bs].to(torch.int16) - 8
        values = q.reshape(-1, bs).to(torch.float32) * scale.unsqueeze(1)
        out[name] = values.reshape(-1)[:shape.numel()].reshape(shape)
    return out


def payload_layout(shapes: Mapping[str, torch.Size], quant: QuantizationSpec) -> Layout:
    """Names, dtypes and shapes of the payload for parameters of ``shapes``."""
    if carries_residual(quant):
        return compress.sparse_layout(shapes, quant.block_size)
    layout: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {}
    for name, shape in shapes.items():
        numel = torch.Size(shape).numel()
        if quant.scheme == "none":
            layout[f"delta/{name}"] = (torch.float32, tuple(shape))
            continue
        nb = _blocks(numel, quant.block_size)
        if quant.scheme == "int8":
            layout[f"q/{name}"] = (torch.int8, (nb, quant.block_size))
        else:
            layout[f"q/{name}"] = (torch.uint8, (-(-nb * quant.block_size // 2),))
        layout[f"scale/{name}"] = (torch.float32, (nb,))
    return layout


def delta_hash(payload: Mapping[str, torch.Tensor]) -> bytes:
    """``tensors_digest("delta", payload)``: the Δ hash a host commits to."""
    return tensors_digest(Tag.DELTA, payload)


def payload_bytes(payload: Mapping[str, torch.Tensor]) -> int:
    """Bytes of tensor data in a payload (what the wire carries, besides a small header)."""
    return expected_size({n: (t.dtype, tuple(t.shape)) for n, t in payload.items()})


def _metadata(quant: QuantizationSpec) -> dict[str, str]:
    return {"format": FORMAT, "scheme": quant.scheme, "block_size": str(quant.block_size)}


def encode_delta(payload: Mapping[str, torch.Tensor], quant: QuantizationSpec) -> bytes:
    """Safetensors bytes of a payload, as stored and served."""
    return encode_tensors(payload, _metadata(quant))


def save_delta(path: Path, payload: Mapping[str, torch.Tensor], quant: QuantizationSpec) -> None:
    """Write a payload atomically as a safetensors file, streamed from its tensors (no whole-file copy
    in memory). Its header lists the metadata keys sorted, where :func:`encode_delta`'s order is the
    library's (random); the tensors, and so :func:`delta_hash`, are the same."""
    save_tensors(path, payload, _metadata(quant))


def _check_scales(payload: dict[str, torch.Tensor], what: str,
                  quant: QuantizationSpec | None = None) -> dict[str, torch.Tensor]:
    if quant is not None and carries_residual(quant):
        compress.check_payload(payload, quant.block_size, what)
        return payload
    for name, t in payload.items():
        if name.startswith("scale/") and bool((t < 0).any()):
            raise TensorFileError(f"{what}: {name} has a negative scale")
    return payload


def decode_delta(data: bytes, spec: RunSpec, what: str = "delta") -> dict[str, torch.Tensor]:
    """Validate and parse a payload received from elsewhere against the run's model and scheme."""
    layout = payload_layout(parameter_shapes(spec), spec.quantization)
    return _check_scales(decode_tensors(data, layout, what, _metadata(spec.quantization)), what, spec.quantization)


def stream_delta(chunks: Iterable[object], spec: RunSpec, what: str = "delta") -> tuple[dict[str, torch.Tensor], bytes]:
    """:func:`decode_delta` for a payload arriving in chunks, hashed as it arrives.

    Returns:
        The payload and its :func:`delta_hash`, computed from the bytes as they came (one pass).
    """
    layout = payload_layout(parameter_shapes(spec), spec.quantization)
    stream = TensorStream(chunks, layout, Tag.DELTA, what, _metadata(spec.quantization))
    payload = _check_scales(stream.read_all(), what, spec.quantization)
    assert stream.digest is not None  # set by the finished iteration
    return payload, stream.digest


def load_delta(path: Path, spec: RunSpec) -> dict[str, torch.Tensor]:
    """:func:`decode_delta` for a file."""
    layout = payload_layout(parameter_shapes(spec), spec.quantization)
    return _check_scales(load_tensors(path, layout, _metadata(spec.quantization)), str(path), spec.quantization)


def relative_error(delta: Mapping[str, torch.Tensor], approx: Mapping[str, torch.Tensor]) -> float:
    """``‖approx − delta‖₂ / ‖delta‖₂`` over all tensors (float64 accumulation)."""
    num = sum(float(((approx[n].double() - delta[n].double()) ** 2).sum()) for n in sorted(delta))
    den = sum(float((delta[n].double() ** 2).sum()) for n in sorted(delta))
    return (num / den) ** 0.5 if den > 0 else 0.0
