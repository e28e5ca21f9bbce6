"""The canonical digest of a named set of tensors (checkpoints, global models, pseudo-gradients).

Independent of any file format: two files with the same tensors hash the same, and the digest
covers names, dtypes, shapes and the raw little-endian bytes::

    H(tag, u32be(count) || for each name in ascending order:
                u32be(len(name)) || name || u32be(len(dtype)) || dtype ||
                u32be(ndim) || u64be(dim_0) || ... || u64be(len(data)) ||
                sha256(data[0:C]) || sha256(data[C:2C]) || ...)

where ``dtype`` is the safetensors dtype name (``F32``, ``I8``, ``U8``, ``I64``, ...) and ``C`` is
:data:`CHUNK_BYTES`: a tensor's data enters as the SHA-256 digests of its consecutive 1 MiB chunks
(the last one shorter; an empty tensor has none). The chunks are independent of each other, so a
large state is hashed on as many threads as :func:`tensors_digest` is given — SHA-256 itself is a
sequential stream, one thread's speed at most (measured: docs/benchmarks.md#scale-the-small-preset)
— while a reader still hashes the
bytes in the order they arrive (:class:`DigestStream`). The framing fixes each tensor's length
before its chunk digests, so no two sets of tensors share the sequence the outer hash reads.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import torch

from protocol.rules.hashing import tagged_hasher, u32be, u64be

CHUNK_BYTES = 1 << 20
"""Bytes of data per chunk digest (the last chunk of a tensor may be shorter)."""

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


def framing(name: str, dtype: torch.dtype, shape: Sequence[int], nbytes: int) -> bytes:
    """A tensor's entry in the digest before its chunk digests: name, dtype, shape and data length.

    Raises:
        ValueError: a dtype without a canonical name.
    """
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"tensor {name!r}: dtype {dtype} has no canonical name")
    name_b, dtype_b = name.encode(), DTYPE_NAMES[dtype].encode()
    return (u32be(len(name_b)) + name_b + u32be(len(dtype_b)) + dtype_b + u32be(len(shape))
            + b"".join(u64be(d) for d in shape) + u64be(nbytes))


def _chunk_digest(data: memoryview) -> bytes:
    return hashlib.sha256(data).digest()  # hashlib releases the GIL on buffers this large


def chunk_count(nbytes: int) -> int:
    """How many chunk digests a tensor of ``nbytes`` bytes enters the digest with."""
    return -(-nbytes // CHUNK_BYTES)


def chunk_digests(tensors: Mapping[str, torch.Tensor], threads: int = 1) -> dict[str, list[bytes]]:
    """The SHA-256 digest of every :data:`CHUNK_BYTES` chunk of each tensor's bytes, by name: what
    :func:`tensors_digest` reads besides the names, dtypes and shapes."""
    spans: list[tuple[str, int, int]] = []
    chunks: list[memoryview] = []
    for name in sorted(tensors):
        data = tensor_bytes(tensors[name])
        first = len(chunks)
        chunks += [data[i:i + CHUNK_BYTES] for i in range(0, data.nbytes, CHUNK_BYTES)]
        spans.append((name, first, len(chunks)))
    if threads > 1 and len(chunks) > 1:
        with ThreadPoolExecutor(min(threads, len(chunks)), thread_name_prefix="tensor-digest") as pool:
            digests = list(pool.map(_chunk_digest, chunks))
    else:
        digests = [_chunk_digest(c) for c in chunks]
    return {name: digests[first:end] for name, first, end in spans}


ChunkEntry = tuple[torch.dtype, Sequence[int], int, Sequence[bytes]]
"""One tensor as :func:`digest_of_chunks` reads it: dtype, shape, data length and chunk digests."""


def digest_of_chunks(tag: str, entries: Mapping[str, ChunkEntry]) -> bytes:
    """:func:`tensors_digest` from each tensor's dtype, shape, byte length and chunk digests (no
    tensor data needed): how a reader checks a served list of chunk digests against a leaf hash.

    Raises:
        ValueError: a dtype without a canonical name, or a tensor with the wrong number of digests.
    """
    h = tagged_hasher(tag)
    h.update(u32be(len(entries)))
    for name in sorted(entries):
        dtype, shape, nbytes, digests = entries[name]
        if len(digests) != chunk_count(nbytes) or any(len(d) != 32 for d in digests):
            raise ValueError(f"tensor {name!r}: {nbytes} bytes have {chunk_count(nbytes)} chunk digests of 32 bytes")
        h.update(framing(name, dtype, shape, nbytes))
        h.update(b"".join(digests))
    return h.digest()


def tensors_digest(tag: str, tensors: Mapping[str, torch.Tensor], threads: int = 1) -> bytes:
    """The canonical digest of ``tensors`` under hash domain ``tag``.

    Args:
        tag: e.g. ``Tag.CHECKPOINT``, ``Tag.MODEL``, ``Tag.DELTA``.
        tensors: name -> tensor (any device; moved to CPU to hash).
        threads: threads hashing chunks at once (the digest does not depend on it).

    Raises:
        ValueError: a dtype without a canonical name.
    """
    for name, t in tensors.items():
        if t.dtype not in DTYPE_NAMES:
            raise ValueError(f"tensor {name!r}: dtype {t.dtype} has no canonical name")
    digests = chunk_digests(tensors, threads)
    return digest_of_chunks(tag, {n: (t.dtype, tuple(t.shape), t.numel() * t.element_size(), digests[n])
                                  for n, t in tensors.items()})


class DigestStream:
    """:func:`tensors_digest` computed as the bytes arrive, tensor after tensor in name order.

    For each tensor, :meth:`begin` with its name, dtype, shape and byte length, then :meth:`update`
    with its bytes in pieces of any size; :meth:`digest` once every tensor is in.

    Args:
        tag: the hash domain.
        count: how many tensors the digest covers.
    """

    def __init__(self, tag: str, count: int) -> None:
        self._outer = tagged_hasher(tag)
        self._outer.update(u32be(count))
        self._count, self._begun = count, 0
        self._left = 0  # bytes of the current tensor still to come
        self._chunk: hashlib._Hash | None = None
        self._filled = 0  # bytes in the current chunk

    def begin(self, name: str, dtype: torch.dtype, shape: Sequence[int], nbytes: int) -> None:
        """Start the next tensor (the previous one must be complete)."""
        if self._left:
            raise ValueError(f"the previous tensor still has {self._left} bytes to come")
        if self._begun == self._count:
            raise ValueError(f"the digest covers {self._count} tensors")
        self._outer.update(framing(name, dtype, shape, nbytes))
        self._begun += 1
        self._left = nbytes

    def update(self, data: bytes | bytearray | memoryview) -> None:
        """The current tensor's next bytes."""
        view = memoryview(data).cast("B")
        if len(view) > self._left:
            raise ValueError(f"{len(view)} bytes given where {self._left} remain of the tensor")
        while len(view):
            if self._chunk is None:
                self._chunk, self._filled = hashlib.sha256(), 0
            take = min(len(view), CHUNK_BYTES - self._filled)
            self._chunk.update(view[:take])
            self._filled += take
            self._left -= take
            view = view[take:]
            if self._filled == CHUNK_BYTES or self._left == 0:
                self._outer.update(self._chunk.digest())
                self._chunk = None

    def digest(self) -> bytes:
        """The digest, once every tensor has begun and received all its bytes."""
        if self._left or self._begun != self._count:
            raise ValueError("the digest is not complete")
        return self._outer.digest()
