"""A leaf's chunk digests: what a reader needs to fetch only the parts of a leaf it does not have.

A leaf hash (``protocol.tensors.digest``) reads each tensor's name, dtype, shape and the SHA-256
digests of its 1 MiB chunks. A host serves those (:class:`LeafDigests`, the ``…/digests`` routes of
``node.server``) and single chunks by tensor and chunk index (``…/chunks/{tensor}/{chunk}``, the
tensor counted in name order). A validator that replayed a segment holds its own end leaf; it
checks the served digests against the committed leaf hash (:func:`check_leaf_digests`, then the
Merkle proof in ``verifier.replay``) before trusting any of them, and fetches only the chunks
whose digests differ from its own, each checked against its digest (:func:`assemble`).

Files are read here by their safetensors header (:func:`file_leaf_digests`, :func:`file_chunk`):
a host's or holder's own files, written by ``trainer.tensorfile``; what a reader gets is checked
against the digests whatever the file held.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from protocol.rules.hashing import Tag
from protocol.tensors.digest import CHUNK_BYTES, DTYPE_NAMES, chunk_count, chunk_digests, digest_of_chunks, tensor_bytes
from trainer.tensorfile import Layout, tensors_header

MAX_TENSORS = 4096
"""Most tensors a digest list may name (a leaf of ``gpt124m`` has a few hundred)."""
MAX_CHUNKS = 4096
"""Most chunk digests a digest list may carry: 4 GiB of leaf (a ``gpt124m`` leaf is 1.5 GiB)."""
_DTYPES = {v: k for k, v in DTYPE_NAMES.items()}


class TensorChunks(BaseModel):
    """One tensor of a leaf as its hash reads it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = Field(min_length=1, max_length=256)
    dtype: str = Field(min_length=1, max_length=8)
    shape: list[int] = Field(max_length=8)
    chunks: list[str] = Field(max_length=MAX_CHUNKS)


class LeafDigests(BaseModel):
    """A leaf's tensors in name order, each with the SHA-256 digests (hex) of its 1 MiB chunks."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    tensors: list[TensorChunks] = Field(max_length=MAX_TENSORS)


def digests_json_bytes(layout: Layout) -> int:
    """The most bytes a :class:`LeafDigests` of ``layout`` takes as JSON (a reader's cap)."""
    chunks = sum(chunk_count(_nbytes(dtype, shape)) for dtype, shape in layout.values())
    return 1024 + 70 * chunks + sum(96 + len(n) + 24 * len(s) for n, (_, s) in layout.items())


def _nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    count = 1
    for d in shape:
        count *= d
    return count * torch.empty((), dtype=dtype).element_size()


def leaf_digests(tensors: Mapping[str, torch.Tensor]) -> LeafDigests:
    """The digest list of a leaf's tensors (``Checkpoint.tensors()``)."""
    digests = chunk_digests(tensors)
    return LeafDigests(tensors=[TensorChunks(name=n, dtype=DTYPE_NAMES[tensors[n].dtype],
                                             shape=list(tensors[n].shape), chunks=[d.hex() for d in digests[n]])
                                for n in sorted(tensors)])


def check_leaf_digests(served: object, layout: Layout) -> tuple[LeafDigests, bytes]:
    """Validate a served digest list against the leaf's exact layout and compute the leaf hash it
    implies (to be checked against the committed one before any digest is trusted).

    Raises:
        ValueError: not a digest list, not of ``layout`` (names, order, dtypes, shapes), or a
            tensor with the wrong number of digests or a digest that is not 64 hex characters.
    """
    try:
        found = served if isinstance(served, LeafDigests) else LeafDigests.model_validate(served)
    except (ValidationError, TypeError) as exc:
        raise ValueError(f"not a digest list ({str(exc).splitlines()[0]})") from None
    names = [t.name for t in found.tensors]
    if names != sorted(layout):
        raise ValueError(f"the digest list names {len(names)} tensors, not the leaf's {len(layout)} in name order")
    entries = {}
    for t in found.tensors:
        dtype, shape = layout[t.name]
        if _DTYPES.get(t.dtype) != dtype or tuple(t.shape) != tuple(shape):
            raise ValueError(f"tensor {t.name!r} is listed as {t.dtype} {t.shape}, the leaf has "
                             f"{DTYPE_NAMES[dtype]} {list(shape)}")
        nbytes = _nbytes(dtype, shape)
        if len(t.chunks) != chunk_count(nbytes):
            raise ValueError(f"tensor {t.name!r} has {len(t.chunks)} chunk digests, its {nbytes} bytes "
                             f"have {chunk_count(nbytes)}")
        if any(len(c) != 64 or any(x not in "0123456789abcdef" for x in c) for c in t.chunks):
            raise ValueError(f"tensor {t.name!r}: a chunk digest is not 64 lowercase hex characters")
        entries[t.name] = (dtype, shape, nbytes, [bytes.fromhex(c) for c in t.chunks])
    return found, digest_of_chunks(Tag.CHECKPOINT, entries)


def differing(own: Mapping[str, torch.Tensor], digests: LeafDigests) -> list[tuple[int, int]]:
    """(tensor index, chunk index) of every chunk of the listed leaf that ``own`` does not have
    bit for bit: all of a tensor ``own`` lacks or has with another dtype or shape."""
    mine = chunk_digests({t.name: own[t.name] for t in digests.tensors if _same(own, t)})
    wanted = []
    for i, t in enumerate(digests.tensors):
        have = [d.hex() for d in mine.get(t.name, [])]
        wanted += [(i, j) for j, d in enumerate(t.chunks) if j >= len(have) or have[j] != d]
    return wanted


def _same(own: Mapping[str, torch.Tensor], t: TensorChunks) -> bool:
    x = own.get(t.name)
    return x is not None and DTYPE_NAMES.get(x.dtype) == t.dtype and list(x.shape) == t.shape


def assemble(own: Mapping[str, torch.Tensor], digests: LeafDigests, fetch: Callable[[int, int], object],
             wanted: list[tuple[int, int]] | None = None) -> tuple[dict[str, torch.Tensor], int, int]:
    """The listed leaf's tensors from ``own``'s bytes and, where they differ, chunks from ``fetch``
    (``(tensor index, chunk index) -> bytes``), each checked against its digest; ``wanted``: those
    chunks, when the caller already computed them (:func:`differing`).

    Returns:
        the tensors, how many chunks were fetched, and their bytes.

    Raises:
        ValueError: a fetched chunk that is not bytes of the chunk's length with its digest.
    """
    wanted = differing(own, digests) if wanted is None else wanted
    buffers: dict[str, bytearray] = {}  # the tensors with a chunk to fetch; the others are own's as they are
    for i in sorted({i for i, _ in wanted}):
        t = digests.tensors[i]
        nbytes = _nbytes(_DTYPES[t.dtype], tuple(t.shape))
        buffers[t.name] = bytearray(tensor_bytes(own[t.name])) if _same(own, t) else bytearray(nbytes)
    fetched = 0
    for i, j in wanted:
        t = digests.tensors[i]
        buf = buffers[t.name]
        lo = j * CHUNK_BYTES
        piece = check_chunk(digests, i, j, fetch(i, j))
        buf[lo:lo + len(piece)] = piece
        fetched += len(piece)
    tensors = {}
    for t in digests.tensors:
        if t.name not in buffers:
            tensors[t.name] = own[t.name].detach().to("cpu").contiguous() if _same(own, t) else \
                torch.empty(t.shape, dtype=_DTYPES[t.dtype])  # a tensor of no bytes: nothing to fetch
        else:
            tensors[t.name] = torch.frombuffer(buffers[t.name], dtype=_DTYPES[t.dtype]).reshape(t.shape)
    return tensors, len(wanted), fetched


def check_chunk(digests: LeafDigests, tensor: int, chunk: int, piece: object) -> bytes | bytearray | memoryview:
    """``piece`` if it is chunk ``chunk`` of the ``tensor``-th listed tensor: bytes of the chunk's
    length with its digest (what :func:`assemble` takes; a fetch ahead checks with it too).

    Raises:
        ValueError: it is not.
    """
    t = digests.tensors[tensor]
    size = min(CHUNK_BYTES, _nbytes(_DTYPES[t.dtype], tuple(t.shape)) - chunk * CHUNK_BYTES)
    if not isinstance(piece, (bytes, bytearray, memoryview)) or len(piece) != size:
        got = len(piece) if isinstance(piece, (bytes, bytearray, memoryview)) else type(piece).__name__
        raise ValueError(f"chunk {chunk} of {t.name!r} is not {size} bytes ({got})")
    if hashlib.sha256(piece).hexdigest() != t.chunks[chunk]:
        raise ValueError(f"chunk {chunk} of {t.name!r} does not hash to its digest")
    return piece


def encoded_chunks(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> Iterator[bytes]:
    """The bytes of ``trainer.tensorfile.encode_tensors(tensors, metadata)`` in pieces of at most
    :data:`CHUNK_BYTES`, read from the tensors as they are handed over (never the whole file at once)."""
    head, order = tensors_header(tensors, metadata)
    yield head
    for name in order:
        data = tensor_bytes(tensors[name])
        for lo in range(0, data.nbytes, CHUNK_BYTES):
            yield bytes(data[lo:lo + CHUNK_BYTES])


# -- a host's or holder's own files -------------------------------------------------------------

_CACHE: OrderedDict[tuple[str, int, int], LeafDigests] = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 16


def _header(path: Path) -> tuple[int, list[tuple[str, str, list[int], int, int]]]:
    """The data offset and (name, dtype, shape, begin, end) of each tensor of a safetensors file,
    in name order."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise ValueError(f"{path.name} is not a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > 100_000_000:
            raise ValueError(f"{path.name}: header of {n} bytes")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    spans = sorted((name, e["dtype"], list(e["shape"]), *e["data_offsets"]) for name, e in header.items())
    return 8 + n, spans


def file_leaf_digests(path: Path) -> LeafDigests:
    """The digest list of a leaf stored as a safetensors file (computed once per file version)."""
    st = path.stat()
    key = (str(path), st.st_mtime_ns, st.st_size)
    with _CACHE_LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    start, spans = _header(path)
    tensors = []
    with open(path, "rb") as f:
        for name, dtype, shape, begin, end in spans:
            f.seek(start + begin)
            left, chunks = end - begin, []
            while left > 0:
                piece = f.read(min(CHUNK_BYTES, left))
                if not piece:
                    raise ValueError(f"{path.name} is truncated in {name!r}")
                chunks.append(hashlib.sha256(piece).hexdigest())
                left -= len(piece)
            tensors.append(TensorChunks(name=name, dtype=dtype, shape=shape, chunks=chunks))
    found = LeafDigests(tensors=tensors)
    with _CACHE_LOCK:
        _CACHE[key] = found
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return found


def file_chunk(path: Path, tensor: int, chunk: int) -> bytes:
    """Chunk ``chunk`` of the ``tensor``-th tensor (name order) of a safetensors file.

    Raises:
        IndexError: no such tensor or chunk.
    """
    start, spans = _header(path)
    if not 0 <= tensor < len(spans):
        raise IndexError(f"{path.name} has {len(spans)} tensors")
    _, _, _, begin, end = spans[tensor]
    if not 0 <= chunk < chunk_count(end - begin):
        raise IndexError(f"tensor {tensor} of {path.name} has {chunk_count(end - begin)} chunks")
    lo = begin + chunk * CHUNK_BYTES
    with open(path, "rb") as f:
        f.seek(start + lo)
        return f.read(min(CHUNK_BYTES, end - lo))

