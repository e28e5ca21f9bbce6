"""Read a safetensors file from a stream of byte chunks: checked, hashed and decoded tensor by tensor.

A validator or a peer reads checkpoints and Δs from another host. Holding the whole file and then a
decoded copy costs twice its size; reading it as it arrives costs the tensor being decoded. The
one interface to the transport is an iterable of byte chunks (``Iterable[bytes]``): a local file
read in pieces (:func:`file_chunks`), a byte string cut up (:func:`bytes_chunks`), or an HTTP body
as it arrives (:meth:`node.http_client.HttpArtifacts.chunks`). Everything else is here, whoever
transports the bytes:

* **caps** — the header may be at most :func:`trainer.tensorfile.header_limit` bytes and the data
  region exactly :func:`~trainer.tensorfile.expected_size` of the layout; a stream that goes on past
  that is refused as soon as one byte too many arrives, one that ends early as truncated;
* **checks** — the header against the run's layout before any tensor byte is read (names, dtypes,
  shapes, spans that tile the data region), metadata, finite floats per tensor;
* **hash as bytes arrive** — :attr:`TensorStream.digest` is ``tensors_digest(tag, tensors)``
  (``protocol.tensors.digest``), computed as each tensor's bytes arrive. The digest takes tensors
  in name order and safetensors stores them by dtype, then name, so a tensor that arrives before
  its turn (a checkpoint's three I64 scalars, a Δ's float scales) waits in a buffer capped at
  :data:`PENDING_FACTOR` times the largest tensor of the layout;
* **decode tensor by tensor** — iterating yields ``(name, tensor)`` in file order; each tensor
  shares the buffer its bytes arrived in (no second copy), and what the consumer drops is freed;
* **let go at once** — when the iteration ends, fails or is abandoned, the chunk iterator is
  closed (an HTTP body's connection, a file), so a refused stream stops reading there.

Peak memory of a reader that keeps nothing is about the largest tensor plus the pending buffer
and one chunk (measured: docs/benchmarks.md#scale-the-small-preset, "Readers' memory").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import torch

from protocol.tensors.digest import DigestStream
from trainer.tensorfile import Layout, TensorFileError, check_header, expected_size, header_limit

CHUNK_BYTES = 1 << 20
"""Chunk size of :func:`file_chunks` and :func:`bytes_chunks`."""

PENDING_FACTOR = 4
"""Out-of-order tensors may hold at most this many times the layout's largest tensor (plus 64 KiB)."""


def file_chunks(path: Path, chunk: int = CHUNK_BYTES) -> Iterator[bytes]:
    """The bytes of ``path`` in pieces of ``chunk`` bytes."""
    with open(path, "rb") as f:
        while piece := f.read(chunk):
            yield piece


def bytes_chunks(data: bytes, chunk: int = CHUNK_BYTES) -> Iterator[bytes]:
    """``data`` in pieces of ``chunk`` bytes (a whole blob through the streaming interface)."""
    view = memoryview(data)
    for i in range(0, len(view), chunk):
        yield bytes(view[i:i + chunk])


class _Pull:
    """Exact reads from a chunk iterator, never more than ``cap`` bytes in all."""

    def __init__(self, chunks: Iterable[object], cap: int, what: str) -> None:
        self._it = iter(chunks)
        self._left = b""
        self.cap, self.taken, self.what = cap, 0, what

    def _next(self) -> bytes:
        while True:
            piece = next(self._it, None)
            if piece is None:
                return b""
            if not isinstance(piece, (bytes, bytearray, memoryview)):
                raise TensorFileError(f"{self.what}: the stream yielded {type(piece).__name__}, not bytes")
            if len(piece):
                self.taken += len(piece)
                if self.taken > self.cap:
                    raise TensorFileError(f"{self.what}: oversized (more than {self.cap} bytes)")
                return bytes(piece)

    def read_into(self, buffer: bytearray | memoryview, on_piece=None) -> None:
        view, filled = memoryview(buffer), 0
        while filled < len(view):
            if not self._left:
                self._left = self._next()
                if not self._left:
                    raise TensorFileError(f"{self.what}: truncated ({filled} of {len(view)} bytes of a part)")
            take = min(len(self._left), len(view) - filled)
            view[filled:filled + take] = self._left[:take]
            if on_piece is not None:
                on_piece(view[filled:filled + take])
            self._left = self._left[take:]
            filled += take

    def read(self, n: int) -> bytes:
        buffer = bytearray(n)
        self.read_into(buffer)
        return bytes(buffer)

    def finish(self) -> None:
        if self._left or self._next():
            raise TensorFileError(f"{self.what}: oversized (bytes after the last tensor)")

    def close(self) -> None:
        # A transport that holds something open (an HTTP body, a file) lets it go now, not when
        # the iterator is collected: a stream refused part-way stops reading at once.
        close = getattr(self._it, "close", None)
        if callable(close):
            close()


class TensorStream:
    """One safetensors file read from a chunk stream; iterate it for ``(name, tensor)`` in file order.

    Args:
        chunks: the file's bytes, in pieces of any size (anything that is not bytes is refused).
        layout: the exact names, dtypes and shapes required.
        tag: the digest's hash domain (``Tag.CHECKPOINT``, ``Tag.DELTA``…).
        what: how to name the file in errors.
        metadata: string metadata the file must carry (other keys are allowed).

    Raises (while iterating):
        TensorFileError: malformed, oversized, truncated, other layout or metadata, non-finite.

    Attributes:
        digest: ``tensors_digest(tag, tensors)``, set once the iteration has ended.
        peak_pending: the most bytes out-of-order tensors held at once.
    """

    def __init__(self, chunks: Iterable[object], layout: Layout, tag: str, what: str = "tensor file",
                 metadata: Mapping[str, str] | None = None) -> None:
        self.layout, self.what, self.metadata = layout, what, dict(metadata or {})
        self._pull = _Pull(chunks, 8 + header_limit(layout) + expected_size(layout), what)
        self._hasher = DigestStream(tag, len(layout))
        self.digest: bytes | None = None
        self.peak_pending = 0
        largest = max((expected_size({n: v}) for n, v in layout.items()), default=0)
        self._pending_cap = PENDING_FACTOR * largest + 64 * 1024

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        try:
            yield from self._tensors()
        finally:
            self._pull.close()

    def _tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        pull, what = self._pull, self.what
        n = int.from_bytes(pull.read(8), "little")
        if n > header_limit(self.layout):
            raise TensorFileError(f"{what}: header of {n} bytes exceeds the {header_limit(self.layout)} allowed")
        found, spans = check_header(pull.read(n), self.layout, what)
        for key, value in self.metadata.items():
            if found.get(key) != value:
                raise TensorFileError(f"{what}: metadata {key}={found.get(key)!r}, expected {value!r}")
        order = sorted(self.layout)  # the digest's order
        turn = 0
        pending: dict[str, bytearray] = {}
        pending_bytes = 0
        for _begin, end_, name in spans:
            dtype, shape = self.layout[name]
            buffer = bytearray(end_ - _begin)
            in_turn = order[turn] == name
            if in_turn:
                self._hasher.begin(name, dtype, shape, len(buffer))
                pull.read_into(buffer, self._hasher.update)
                turn += 1
            else:
                pending_bytes += len(buffer)
                if pending_bytes > self._pending_cap:
                    raise TensorFileError(f"{what}: tensors out of the digest's order exceed "
                                          f"{self._pending_cap} bytes")
                self.peak_pending = max(self.peak_pending, pending_bytes)
                pull.read_into(buffer)
                pending[name] = buffer
            # Tensors that waited for their turn: hash them now, in name order.
            while turn < len(order) and order[turn] in pending:
                waiting = pending.pop(order[turn])
                wd, ws = self.layout[order[turn]]
                self._hasher.begin(order[turn], wd, ws, len(waiting))
                self._hasher.update(waiting)
                pending_bytes -= len(waiting)
                turn += 1
            tensor = (torch.frombuffer(buffer, dtype=dtype) if len(buffer) else torch.empty(0, dtype=dtype)
                      ).reshape(shape)
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise TensorFileError(f"{what}: {name} contains NaN or Inf")
            yield name, tensor
        pull.finish()
        if turn != len(order):  # pragma: no cover - spans cover the layout exactly
            raise TensorFileError(f"{what}: not every tensor was hashed")
        self.digest = self._hasher.digest()

    def read_all(self) -> dict[str, torch.Tensor]:
        """Every tensor (the iteration run to its end; :attr:`digest` is set afterwards)."""
        return dict(iter(self))
