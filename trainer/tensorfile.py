"""Safetensors files that are checked before they are trusted, and written atomically.

Checkpoints, pseudo-gradients and global models all travel as safetensors (never pickle). What
arrives from another party, or from a disk after a crash, is validated against the layout the run
spec implies *before* any tensor is materialized: the exact set of names, each dtype and shape, a
data region that is exactly the sum of the tensor sizes (so a truncated or padded file is refused
by its size alone), and finally finite values in every floating-point tensor.

A safetensors file is ``u64le(n) || header (n bytes of JSON) || data``; the header maps each name
to ``{"dtype", "shape", "data_offsets": [begin, end]}`` plus an optional ``__metadata__`` object of
strings.

Files are written by :func:`save_tensors`, which streams the header and then each tensor's memory
straight into the file: no copy of the whole file is built in memory (``safetensors.torch.save``
builds two; measured: docs/benchmarks-archive.md#leaf-writes-without-a-whole-file-copy). The bytes are exactly those of
``safetensors.torch.save`` (same header JSON, tensor order and padding; tests compare them), so
files written before and after read the same and hash the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from protocol.errors import VerilocoError
from protocol.tensors.digest import DTYPE_NAMES, tensor_bytes

Layout = Mapping[str, tuple[torch.dtype, tuple[int, ...]]]
"""Expected tensors: name -> (dtype, shape)."""

_HEADER_BASE = 64 * 1024   # header bytes allowed besides a per-tensor allowance
_HEADER_PER_TENSOR = 512

# The safetensors library writes tensors in descending order of its ``Dtype`` enum (declared in
# increasing alignment: BOOL, …, U8, I8, …, I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64),
# then by name. Only the relative order matters; these are the enum's positions in safetensors 0.8.
_ST_DTYPE_RANK = {"BOOL": 0, "U8": 4, "I8": 5, "I16": 11, "U16": 12, "F16": 13, "BF16": 14,
                  "I32": 15, "U32": 16, "F32": 17, "F64": 19, "I64": 20}
_ST_MAX_HEADER = 100_000_000  # the library refuses larger headers; so do we, to write only what it reads


class TensorFileError(VerilocoError, ValueError):
    """A tensor file is malformed or does not have the layout the run spec requires."""


def layout_of(tensors: Mapping[str, torch.Tensor]) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """The layout (name -> dtype, shape) of a tensor dict."""
    return {name: (t.dtype, tuple(t.shape)) for name, t in tensors.items()}


def _nbytes(dtype: torch.dtype, shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * torch.empty((), dtype=dtype).element_size()


def expected_size(layout: Layout) -> int:
    """Bytes of the data region a file with ``layout`` must have."""
    return sum(_nbytes(dtype, shape) for dtype, shape in layout.values())


def encode_tensors(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> bytes:
    """Serialize ``tensors`` (made contiguous, on CPU) as safetensors bytes, for what needs them in
    memory (a body to send); files are written by :func:`save_tensors`, which never builds them."""
    return st_save({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, metadata=dict(metadata))


def write_atomic(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old file or the whole new one
    (``mode``: its permissions before the umask; 0o600 for a secret)."""
    with atomic_file(path, mode) as f:
        f.write(data)


@contextmanager
def atomic_file(path: Path, mode: int = 0o666, *, drop_cache: bool = False) -> Iterator[BinaryIO]:
    """A file to write in pieces that becomes ``path`` only when the block ends without an error
    (fsynced, then renamed, the rename made durable): a crash leaves the old file or the whole new
    one, and an error (a stream refused part-way) leaves nothing.

    ``drop_cache``: once the file is on disk, tell the kernel its pages will not be read soon
    (``POSIX_FADV_DONTNEED``), so they go back to the free list at once. For a stream of large
    files written and rarely read (a host's leaves): each write then takes freed pages instead of
    growing the page cache into reclaim (measured: ``bench/leaf_write.py --epoch``). A later read
    comes from the disk."""
    path = Path(path)
    # Per process and thread: two writers of one path in one process (a warm fetch and a tick's)
    # must not share a temporary file; the last rename wins, each file whole.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
            if drop_cache and hasattr(os, "posix_fadvise"):  # clean pages after the fsync: dropped
                with contextlib.suppress(OSError):  # a hint: a file system that refuses it loses nothing
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def remove_partial_writes(directory: Path) -> None:
    """Delete what :func:`write_atomic` left in ``directory`` when a crash came between write and rename.

    Such a file is never a committed one (the rename is what commits), so removing it loses nothing.
    """
    for tmp in Path(directory).glob(".*.tmp"):
        tmp.unlink(missing_ok=True)


def tensors_header(tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str] | None) -> tuple[bytes, list[str]]:
    """The first bytes of the safetensors file of ``tensors``, and the order their data follows in.

    Reproduces ``safetensors.torch.save`` byte for byte: tensors sorted by descending dtype rank,
    then by name; compact JSON with ``__metadata__`` first (when ``metadata`` is not None), then each
    tensor's ``dtype``, ``shape`` and ``data_offsets``; the JSON padded with spaces to a multiple of 8
    bytes; its length as ``u64le`` in front. The library writes metadata keys in a random order (a
    Rust ``HashMap``), so with two keys or more its bytes vary from call to call; here they are sorted,
    so the same tensors always give the same file.

    Args:
        tensors: name -> tensor (any device or layout: only dtype and shape are read here).
        metadata: string metadata, or None for no ``__metadata__`` entry.

    Returns:
        ``u64le(n) || header`` and the tensor names in file order.

    Raises:
        ValueError: a dtype safetensors has no name for here, a reserved name, non-string metadata,
            or a header larger than the library accepts.
    """
    for name, t in tensors.items():
        if name == "__metadata__":
            raise ValueError("'__metadata__' cannot name a tensor")
        if t.dtype not in DTYPE_NAMES:
            raise ValueError(f"tensor {name!r}: dtype {t.dtype} has no safetensors name here")
    order = sorted(tensors, key=lambda n: (-_ST_DTYPE_RANK[DTYPE_NAMES[tensors[n].dtype]], n.encode()))
    header: dict[str, object] = {}
    if metadata is not None:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ValueError("safetensors metadata maps strings to strings")
        header["__metadata__"] = {k: metadata[k] for k in sorted(metadata, key=str.encode)}
    offset = 0
    for name in order:
        t = tensors[name]
        n = t.numel() * t.element_size()
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    # serde_json's compact form: no spaces, non-ASCII kept as UTF-8, the same escapes as Python's json
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    if len(text) > _ST_MAX_HEADER:
        raise ValueError(f"safetensors header of {len(text)} bytes exceeds the library's {_ST_MAX_HEADER}")
    return struct.pack("<Q", len(text)) + text, order


def write_tensors(f: BinaryIO, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> int:
    """Write ``tensors`` to ``f`` as a safetensors file, with no copy of the file in memory.

    Each tensor already contiguous on CPU is written from its own memory (a view, no copy); any other
    is copied to CPU one at a time, so the extra memory is at most the largest such tensor. The
    tensors must not change while this runs (the bytes are read as they are written).

    Args:
        f: a binary file open for writing (e.g. from :func:`atomic_file`).
        tensors: name -> tensor.
        metadata: string metadata (an empty mapping still writes an empty ``__metadata__``, as
            ``encode_tensors`` does).

    Returns:
        Bytes written.
    """
    head, order = tensors_header(tensors, metadata)
    f.write(head)
    written = len(head)
    for name in order:
        data = tensor_bytes(tensors[name])
        f.write(data)  # a buffered file hands a large buffer straight to write(2): no copy
        written += data.nbytes
    return written


def save_tensors(path: Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str], *,
                 drop_cache: bool = False) -> None:
    """Atomically write ``tensors`` with string ``metadata`` as a safetensors file (tmp file, fsync,
    rename, directory fsync), streamed by :func:`write_tensors`: the same bytes as
    ``write_atomic(path, encode_tensors(tensors, metadata))`` without building them in memory.
    ``drop_cache``: as :func:`atomic_file`'s."""
    with atomic_file(path, drop_cache=drop_cache) as f:
        write_tensors(f, tensors, metadata)


def header_limit(layout: Layout) -> int:
    """The most header bytes a file with ``layout`` may have."""
    return _HEADER_BASE + _HEADER_PER_TENSOR * len(layout)


def check_header(header_bytes: bytes, layout: Layout, what: str) -> tuple[dict[str, str], list[tuple[int, int, str]]]:
    """Validate a safetensors JSON header against ``layout``.

    Returns:
        The ``__metadata__`` strings and the tensors' spans ``(begin, end, name)`` in file order,
        which tile ``[0, expected_size(layout))`` exactly.

    Raises:
        TensorFileError: not JSON, other names, dtypes or shapes, or spans that do not tile.
    """
    try:
        header = json.loads(header_bytes)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TensorFileError(f"{what}: header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise TensorFileError(f"{what}: header is not a JSON object")
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise TensorFileError(f"{what}: __metadata__ must map names to strings")
    if set(header) != set(layout):
        missing, extra = sorted(set(layout) - set(header)), sorted(set(header) - set(layout))
        raise TensorFileError(f"{what}: tensor names differ from the run's layout "
                              f"(missing {missing[:5]}, unexpected {extra[:5]})")
    spans = []
    for name, (dtype, shape) in layout.items():
        entry = header[name]
        if not isinstance(entry, dict):
            raise TensorFileError(f"{what}: header entry {name!r} is not an object")
        if entry.get("dtype") != DTYPE_NAMES[dtype]:
            raise TensorFileError(f"{what}: {name} has dtype {entry.get('dtype')}, expected {DTYPE_NAMES[dtype]}")
        if entry.get("shape") != list(shape):
            raise TensorFileError(f"{what}: {name} has shape {entry.get('shape')}, expected {list(shape)}")
        offsets = entry.get("data_offsets")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
            raise TensorFileError(f"{what}: {name} has malformed data_offsets")
        begin, end = offsets
        if end - begin != _nbytes(dtype, shape):
            raise TensorFileError(f"{what}: {name} spans {end - begin} bytes, expected {_nbytes(dtype, shape)}")
        spans.append((begin, end, name))
    spans.sort()
    position = 0
    for begin, end, name in spans:
        if begin != position:
            raise TensorFileError(f"{what}: {name} does not start where the previous tensor ends")
        position = end
    return metadata, spans


def _check_header(data: bytes, layout: Layout, what: str) -> dict[str, str]:
    if len(data) < 8:
        raise TensorFileError(f"{what}: truncated ({len(data)} bytes, no header)")
    n = int.from_bytes(data[:8], "little")
    limit = header_limit(layout)
    if n > limit:
        raise TensorFileError(f"{what}: header of {n} bytes exceeds the {limit} allowed")
    if len(data) < 8 + n:
        raise TensorFileError(f"{what}: truncated inside the header")
    metadata, spans = check_header(data[8:8 + n], layout, what)
    position = spans[-1][1] if spans else 0
    available = len(data) - 8 - n
    if available < position:
        raise TensorFileError(f"{what}: truncated ({available} data bytes, expected {position})")
    if available > position:
        raise TensorFileError(f"{what}: oversized ({available - position} bytes after the last tensor)")
    return metadata


def decode_tensors(data: bytes, layout: Layout, what: str = "tensor file",
                   metadata: Mapping[str, str] | None = None) -> dict[str, torch.Tensor]:
    """Parse and validate safetensors bytes.

    Args:
        data: the file's bytes.
        layout: the exact names, dtypes and shapes required.
        what: how to name the file in error messages.
        metadata: string metadata the file must carry (other keys are allowed).

    Returns:
        name -> tensor, in the dtypes and shapes of ``layout``.

    Raises:
        TensorFileError: with a message that says what is wrong.
    """
    found = _check_header(data, layout, what)
    for key, value in (metadata or {}).items():
        if found.get(key) != value:
            raise TensorFileError(f"{what}: metadata {key}={found.get(key)!r}, expected {value!r}")
    try:
        tensors = st_load(data)
    except Exception as exc:  # noqa: BLE001 - the header passed our checks; anything left is the file's fault
        raise TensorFileError(f"{what}: unreadable ({exc})") from None
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise TensorFileError(f"{what}: {name} contains NaN or Inf")
    return tensors


def load_tensors(path: Path, layout: Layout, metadata: Mapping[str, str] | None = None) -> dict[str, torch.Tensor]:
    """Read ``path`` and :func:`decode_tensors` it; the size is checked before the file is read."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TensorFileError(f"{path}: cannot read ({exc.strerror})") from None
    limit = 8 + _HEADER_BASE + _HEADER_PER_TENSOR * len(layout) + expected_size(layout)
    if size > limit:
        raise TensorFileError(f"{path}: oversized ({size} bytes, at most {limit} for the run's layout)")
    return decode_tensors(path.read_bytes(), layout, str(path), metadata)
