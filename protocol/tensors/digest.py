"""The canonical digest of a named set of tensors (checkpoints, global models, pseudo-gradients).

Independent of any file format: two files with the same tensors hash the same, and the digest
covers names, dtypes, shapes and the raw little-endian bytes::

    H(tag, u32be(count) || for each name in ascending order:
                u32be(len(name)) || name || u32be(len(dtype)) || dtype ||
                u32be(ndim) || u64be(dim_0) || ... || u64be(len(data)) || data)

where ``dtype`` is the safetensors dtype name (``F32``, ``I8``, ``U8``, ``I64``, ...).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

import torch

from protocol.rules.hashing import tagged_hasher, u32be, u64be

DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int8: "I8", torch.uint8: "U8", torch.int16: "I16", torch.int32: "I32", torch.int64: "I64",
    torch.bool: "BOOL",
}

if sys.byteorder != "little":  # pragma: no cover - every platform torch ships for is little-endian
    raise ImportError("veriloco hashes tensors as little-endian bytes; big-endian hosts are unsupported")


def tensor_bytes(t: torch.Tensor) -> memoryview:
    """The raw little-endian bytes of a tensor, without copying when it is already contiguous on CPU."""
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().data


def tensors_digest(tag: str, tensors: Mapping[str, torch.Tensor]) -> bytes:
    """The canonical digest of ``tensors`` under hash domain ``tag``.

    Args:
        tag: e.g. ``Tag.CHECKPOINT``, ``Tag.MODEL``, ``Tag.DELTA``.
        tensors: name -> tensor (any device; moved to CPU to hash).

    Raises:
        ValueError: a dtype without a canonical name.
    """
    h = tagged_hasher(tag)
    h.update(u32be(len(tensors)))
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in DTYPE_NAMES:
            raise ValueError(f"tensor {name!r}: dtype {t.dtype} has no canonical name")
        data = tensor_bytes(t)
        name_b, dtype_b = name.encode(), DTYPE_NAMES[t.dtype].encode()
        h.update(u32be(len(name_b)) + name_b + u32be(len(dtype_b)) + dtype_b + u32be(t.dim()))
        h.update(b"".join(u64be(d) for d in t.shape))
        h.update(u64be(data.nbytes))
        h.update(data)
    return h.digest()
