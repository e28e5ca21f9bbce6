"""Safetensors files that are checked before they are trusted, and written atomically.

Checkpoints, pseudo-gradients and global models all travel as safetensors (never pickle). What
arrives from another party, or from a disk after a crash, is validated against the layout the run
spec implies *before* any tensor is materialized: the exact set of names, each dtype and shape, a
data region that is exactly the sum of the tensor sizes (so a truncated or padded file is refused
by its size alone), and finally finite values in every floating-point tensor.

A safetensors file is ``u64le(n) || header (n bytes of JSON) || data``; the header maps each name
to ``{"dtype", "shape", "data_offsets": [begin, end]}`` plus an optional ``__metadata__`` object of
strings.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from protocol.errors import VerilocoError
from protocol.tensors.digest import DTYPE_NAMES

Layout = Mapping[str, tuple[torch.dtype, tuple[int, ...]]]
"""Expected tensors: name -> (dtype, shape)."""

_HEADER_BASE = 64 * 1024   # header bytes allowed besides a per-tensor allowance
_HEADER_PER_TENSOR = 512


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
    """Serialize ``tensors`` (made contiguous, on CPU) as safetensors bytes."""
    return st_save({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, metadata=dict(metadata))


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves either the old file or the whole new one."""
    with atomic_file(path) as f:
        f.write(data)


@contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A file to write in pieces that becomes ``path`` only when the block ends without an error
    (fsynced, then renamed, the rename made durable): a crash leaves the old file or the whole new
    one, and an error (a stream refused part-way) leaves nothing."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
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


def save_tensors(path: Path, tensors: Mapping[str, torch.Tensor], metadata: Mapping[str, str]) -> None:
    """Atomically write ``tensors`` with string ``metadata`` as a safetensors file."""
    write_atomic(path, encode_tensors(tensors, metadata))


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
