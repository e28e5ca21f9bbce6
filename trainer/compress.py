"""Sparse 2-bit pseudo-gradients with error feedback (scheme ``topk2``): the codec and its bookkeeping.

A host does not send Δ itself but ``a = Δ + β·r`` compressed, where ``r`` is its **error-feedback
residual**: what earlier compressions left out, and β the spec's ``quantization.error_decay``. What
it did not send this epoch becomes the next residual, ``r' = a − decompress(payload)``, so at β = 1
nothing is lost, only delayed (SparseLoCo's scheme; β < 1 lets old unsent mass fade).

The decay is one exactly specified float32 operation (:func:`decay_residual`): β is rounded to the
nearest float64, then to the nearest float32 (ties to even both times), and every coordinate is
``fl32(β₃₂ · r)``, a single IEEE multiplication rounded to nearest even, before the (separate,
unfused) float32 addition to Δ. At β = 1 it is skipped: ``1 · r`` is ``r`` bit for bit anyway, so
payloads and residuals are today's.

Format, per parameter tensor, flattened in row-major order and zero-padded to whole blocks of
``B = quantization.block_size`` values (a multiple of 256, at most 32,768); each block keeps its
``k = B / 64`` largest magnitudes (1.56 %):

==================  =========================  ==================================================
tensor              dtype, shape               what
==================  =========================  ==================================================
``idx/<p>``         I16 ``[blocks, k]``        the kept offsets in the block, strictly increasing
``q/<p>``           U8 ``[blocks, k / 4]``     2-bit codes, value ``j`` of a row in bits
                                               ``2(j mod 4)…`` of byte ``j div 4``
``scale/<p>``       F32 ``[blocks]``           ``s = max|kept| / 1.5`` (0 for an all-zero block)
``ef/next``         U8 ``[32]``                :func:`residual_digest` of the next residual ``r'``
==================  =========================  ==================================================

A code ``c ∈ {0, 1, 2, 3}`` stands for ``(c − 1.5) · s``, i.e. ``±0.5 s`` or ``±1.5 s``; the
encoder takes ``c = clamp(⌊v / s⌋ + 2, 0, 3)``, the nearest level. The kept offsets are the first
``k`` of the block's magnitudes sorted in descending order by a stable sort (so ties go to the
lower offset) and are written in ascending order. Every step is an exact comparison, a maximum or
an elementwise float32 operation: a payload is a pure function of ``a``, bitwise at any thread
count, so a validator recomputes it from the replayed end state, θ_e and the previous residual
and compares the bytes (``docs/verification.md``, "Δ").

``ef/next`` is inside the payload, so the Δ hash a host commits to covers the residual it keeps:
the next epoch's validators check that the residual the host starts from is that one.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

import torch

from protocol.rules.hashing import Tag
from protocol.rules.spec import TOPK_KEEP_DIVISOR, TOPK_MAX_BLOCK
from protocol.tensors.digest import tensors_digest
from trainer.tensorfile import Layout, TensorFileError

SCHEME = "topk2"
KEEP_DIVISOR = TOPK_KEEP_DIVISOR
MAX_BLOCK = TOPK_MAX_BLOCK
NEXT = "ef/next"
"""The payload entry holding the next residual's digest."""
_HALF_LEVELS = 1.5  # the largest level, in units of the scale


def kept_per_block(block_size: int) -> int:
    """``k``: values a block of ``block_size`` keeps."""
    return block_size // KEEP_DIVISOR


def check_block_size(block_size: int) -> None:
    """Refuse a block size the format cannot carry.

    Raises:
        ValueError: not a multiple of 256 (``k`` a multiple of 4) or above :data:`MAX_BLOCK`.
    """
    if block_size % (4 * KEEP_DIVISOR) or not 0 < block_size <= MAX_BLOCK:
        raise ValueError(f"topk2 needs a block_size that is a multiple of {4 * KEEP_DIVISOR} and at most "
                         f"{MAX_BLOCK} (got {block_size})")


def _blocks(numel: int, block_size: int) -> int:
    return -(-numel // block_size)


def sparse_layout(shapes: Mapping[str, torch.Size], block_size: int) -> Layout:
    """Names, dtypes and shapes of a ``topk2`` payload for parameters of ``shapes``."""
    k = kept_per_block(block_size)
    layout: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {}
    for name, shape in shapes.items():
        nb = _blocks(torch.Size(shape).numel(), block_size)
        layout[f"idx/{name}"] = (torch.int16, (nb, k))
        layout[f"q/{name}"] = (torch.uint8, (nb, k // 4))
        layout[f"scale/{name}"] = (torch.float32, (nb,))
    layout[NEXT] = (torch.uint8, (32,))
    return layout


def _encode(flat: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    k = kept_per_block(block_size)
    nb = _blocks(flat.numel(), block_size)
    blocks = torch.cat([flat, flat.new_zeros(nb * block_size - flat.numel())]).view(nb, block_size)
    order = torch.sort(blocks.abs(), dim=1, descending=True, stable=True).indices[:, :k]
    idx = torch.sort(order, dim=1).values
    kept = torch.gather(blocks, 1, idx)
    scale = kept.abs().amax(dim=1) / _HALF_LEVELS
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = (torch.floor(kept / safe.unsqueeze(1)) + 2).clamp_(0, 3).to(torch.uint8).view(nb, k // 4, 4)
    packed = codes[..., 0] | (codes[..., 1] << 2) | (codes[..., 2] << 4) | (codes[..., 3] << 6)
    return idx.to(torch.int16), packed, scale


def _decode(idx: torch.Tensor, packed: torch.Tensor, scale: torch.Tensor, numel: int,
            block_size: int) -> torch.Tensor:
    nb, k = idx.shape
    codes = torch.stack([(packed >> s) & 3 for s in (0, 2, 4, 6)], dim=2).reshape(nb, k)
    values = (codes.to(torch.float32) - _HALF_LEVELS) * scale.unsqueeze(1)
    dense = torch.zeros(nb, block_size, dtype=torch.float32)
    dense.scatter_(1, idx.to(torch.int64), values)
    return dense.reshape(-1)[:numel]


def residual_digest(residual: Mapping[str, torch.Tensor]) -> bytes:
    """``tensors_digest("residual", {"ef/<p>": r_p})``: what a payload's ``ef/next`` holds."""
    return tensors_digest(Tag.RESIDUAL, {f"ef/{n}": t for n, t in residual.items()})


def zero_residual(shapes: Mapping[str, torch.Size]) -> dict[str, torch.Tensor]:
    """The residual of a host with nothing carried over (its first epoch, or after one not accepted)."""
    return {n: torch.zeros(tuple(s), dtype=torch.float32) for n, s in sorted(shapes.items())}


def decay_factor(decay: Decimal) -> torch.Tensor:
    """β as the 0-dimensional float32 tensor every party multiplies by: the float32 nearest the
    float64 nearest ``decay`` (``float(Decimal)`` is correctly rounded; so is the float32 cast).

    Raises:
        ValueError: ``decay`` outside ``[0, 1]`` (the spec refuses it first).
    """
    if not 0 <= decay <= 1:
        raise ValueError(f"error decay must be in [0, 1] (got {decay})")
    return torch.tensor(float(decay), dtype=torch.float64).to(torch.float32)


def decay_residual(residual: Mapping[str, torch.Tensor], decay: Decimal) -> dict[str, torch.Tensor]:
    """β·r, the residual an epoch adds to its Δ: ``fl32(β₃₂ · r)`` per coordinate (module docstring),
    ``r`` itself at β = 1. The one definition the host, the validators' replay and the simulation
    reach through :func:`compress`."""
    if decay == 1:
        return {n: t.detach().to(torch.float32) for n, t in residual.items()}
    beta = decay_factor(decay)
    return {n: t.detach().to(torch.float32) * beta for n, t in residual.items()}


def compress(delta: Mapping[str, torch.Tensor], residual: Mapping[str, torch.Tensor],
             block_size: int, decay: Decimal = Decimal(1),
             ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Compress ``a = Δ + β·r`` and keep what was not sent.

    Args:
        delta: Δ = θ_e − θ_H per parameter (float32).
        residual: the residual ``r`` carried into this epoch (the one the previous Δ's ``ef/next``
            commits to, undecayed), same names and shapes.
        block_size: the scheme's block size (:func:`check_block_size`).
        decay: β, ``quantization.error_decay`` (:func:`decay_residual`); 1 leaves ``r`` as it is.

    Returns:
        The payload (module docstring; ``ef/next`` included) and the next residual
        ``r' = a − decompress(payload)``.

    Raises:
        ValueError: names or shapes of ``delta`` and ``residual`` differ, or a bad block size.
    """
    check_block_size(block_size)
    if set(delta) != set(residual) or any(delta[n].shape != residual[n].shape for n in delta):
        raise ValueError("the residual does not have Δ's parameter names and shapes")
    carried = decay_residual(residual, decay)
    payload: dict[str, torch.Tensor] = {}
    nxt: dict[str, torch.Tensor] = {}
    for name in sorted(delta):
        a = delta[name].detach().to(torch.float32) + carried[name]
        flat = a.reshape(-1)
        idx, packed, scale = _encode(flat, block_size)
        payload[f"idx/{name}"], payload[f"q/{name}"], payload[f"scale/{name}"] = idx, packed, scale
        nxt[name] = (flat - _decode(idx, packed, scale, flat.numel(), block_size)).reshape(a.shape)
    payload[NEXT] = torch.frombuffer(bytearray(residual_digest(nxt)), dtype=torch.uint8).clone()
    return payload, nxt


def decompress(payload: Mapping[str, torch.Tensor], shapes: Mapping[str, torch.Size],
               block_size: int) -> dict[str, torch.Tensor]:
    """Dense float32 Δ̂ from a payload whose layout and offsets were checked (:func:`check_payload`)."""
    out: dict[str, torch.Tensor] = {}
    for name in sorted(shapes):
        shape = torch.Size(shapes[name])
        out[name] = _decode(payload[f"idx/{name}"], payload[f"q/{name}"], payload[f"scale/{name}"],
                            shape.numel(), block_size).reshape(shape)
    return out


def check_payload(payload: Mapping[str, torch.Tensor], block_size: int, what: str) -> None:
    """What a received payload must satisfy before :func:`decompress` (layout already checked):
    offsets in the block and strictly increasing in every row (no coordinate twice), scales
    finite and non-negative.

    Raises:
        TensorFileError: naming the tensor.
    """
    for name, t in payload.items():
        if name.startswith("idx/"):
            if t.numel() and (bool((t < 0).any()) or bool((t.to(torch.int32) >= block_size).any())):
                raise TensorFileError(f"{what}: {name} has an offset outside its block of {block_size}")
            if t.shape[1] > 1 and not bool((t[:, 1:] > t[:, :-1]).all()):
                raise TensorFileError(f"{what}: {name} has offsets that are not strictly increasing")
        elif name.startswith("scale/") and not bool(torch.isfinite(t).all() & (t >= 0).all()):
            raise TensorFileError(f"{what}: {name} has a negative or non-finite scale")
