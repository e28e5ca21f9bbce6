"""What a host serves to its peers, behind one interface: checkpoints, proofs, Δ, losses, global states.

A validator or a peer host reads another host's artifacts through :class:`ArtifactSource`. In one
process (``veriloco simulate``) that is :class:`LocalArtifacts`, straight from the host's work
directory; across processes it is the HTTP client in ``node.http_client``. Either way the bytes
are untrusted: the reader checks every one against on-chain hashes (Merkle root, Δ hash, model
hash) before use, so a host can lie only by refusing — which the reader reports as
:class:`ArtifactUnavailable`. Tensor files (leaves, Δs, global states) are read as chunk streams
(the ``*_chunks`` methods: a file read in pieces, an HTTP body as it arrives), which the readers
check, hash and decode as the bytes arrive (``trainer.tensorstream``).

On disk (``root`` is the host's work root): the host's epochs in its
:class:`~trainer.epoch_store.EpochStore` (written by :func:`trainer.inner.run_epoch`, or by an
adversary's behaviour), the global states it holds at :func:`global_path`
(``<root>/<run id>/global/<model hash>.safetensors``), and the pseudo-gradients it holds by hash at
:func:`held_delta_path` (``<root>/<run id>/deltas/<Δ hash>.safetensors``): every accepted Δ a host
aggregated and every Δ a validator checked (written there by ``node.content``), so that any
holder can serve it (:meth:`ArtifactSource.delta_by_hash`, content-addressed: the reader checks
the hash).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Literal, TypeAlias

from protocol.errors import VerilocoError
from protocol.rules.merkle import MerkleProof, merkle_proof
from trainer.epoch_store import EpochRecord, EpochStore
from trainer.leaf_digests import LeafDigests, file_chunk, file_leaf_digests
from trainer.tensorstream import CHUNK_BYTES, bytes_chunks

# Generous bounds for what one request may return; a reader also checks exact sizes from the spec.
MAX_ARTIFACT_BYTES = 2 * 1024**3


BlobKind = Literal["checkpoint", "delta", "model", "held_delta"]

HELD_EPOCHS = 2
"""A holder serves leaves of challenges of its newest held epoch and the one before, no older."""

UntrustedJson: TypeAlias = dict[str, object] | list[object] | str | int | float | bool | bytes | None
"""What a remote host served where a JSON document was expected: decoded no further than JSON (what
lies inside an object or array is unknown), or the raw bytes when it was not even JSON. A reader
validates it (``MerkleProof.model_validate``, the loss checks of ``verifier.replay``) before use."""


class ArtifactUnavailable(VerilocoError):
    """The host did not serve an artifact (missing, refused, timed out, or too large)."""


class ArtifactSource(ABC):
    """One host's artifacts for one run.

    What a source returns is untrusted: a remote source hands over what the host sent, which may
    be malformed (a "proof" that is no proof). Readers validate everything before use.
    """

    @abstractmethod
    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        """The safetensors bytes of checkpoint leaf ``leaf`` (0 … S) of ``epoch``."""

    @abstractmethod
    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        """The Merkle proof of that leaf under the host's committed root (a remote source: what was served)."""

    @abstractmethod
    def delta(self, epoch: int) -> bytes:
        """The quantized pseudo-gradient of ``epoch``, exactly as committed."""

    @abstractmethod
    def losses(self, epoch: int) -> list[int] | UntrustedJson:
        """The ``H`` per-step losses of ``epoch`` in micro-nats (they hash to the loss digest; a remote
        source: what was served)."""

    @abstractmethod
    def global_state(self, model_hash: str) -> bytes:
        """A global state the host holds, by its hash."""

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes | object]:
        """:meth:`checkpoint` as an iterable of byte chunks, for readers that check and decode as the
        bytes arrive (``trainer.tensorstream``). The default cuts up what :meth:`checkpoint` returns
        (passing anything that is not bytes through, for the reader to refuse); a source that can
        stream (a file, an HTTP body) overrides it. Raises :class:`ArtifactUnavailable` like
        :meth:`checkpoint`, at the call or while iterating."""
        return _chunks_of(self.checkpoint(epoch, leaf))

    def delta_chunks(self, epoch: int) -> Iterable[bytes | object]:
        """:meth:`delta` as an iterable of byte chunks (see :meth:`checkpoint_chunks`)."""
        return _chunks_of(self.delta(epoch))

    def global_state_chunks(self, model_hash: str) -> Iterable[bytes | object]:
        """:meth:`global_state` as an iterable of byte chunks (see :meth:`checkpoint_chunks`)."""
        return _chunks_of(self.global_state(model_hash))

    def delta_by_hash(self, delta_hash: str) -> bytes:
        """A pseudo-gradient this participant holds, by its hash (any epoch, any host's): what makes
        a Δ content-addressed, so that one honest holder is enough. None held by default."""
        raise ArtifactUnavailable(f"no Δ {delta_hash[:12]}… held here")

    def delta_by_hash_chunks(self, delta_hash: str, epoch: int | None = None) -> Iterable[bytes | object]:
        """:meth:`delta_by_hash` as an iterable of byte chunks (see :meth:`checkpoint_chunks`).
        ``epoch``: the epoch whose Δ the caller expects, when it knows it; a remote reader caps the
        body by that epoch's scheme (``node.http_client``) instead of the largest of the run's."""
        return _chunks_of(self.delta_by_hash(delta_hash))

    def held(self, epoch: int, checkpoint_root: str) -> ArtifactSource:
        """The challenge artifacts of one host's ``epoch`` that this participant read, checked and
        kept (leaves, their proofs, the losses), named by the host's committed ``checkpoint_root``:
        what a validator the host refused reads instead (its replay checks them against the root
        exactly as it checks the host's answer). None held by default."""
        raise ArtifactUnavailable(f"no leaves under root {checkpoint_root[:12]}… held here")

    def leaf_digests(self, epoch: int, leaf: int) -> LeafDigests | UntrustedJson:
        """Leaf ``leaf``'s chunk digests (``trainer.leaf_digests``): what its hash reads besides the
        data, so a reader that holds most of the leaf fetches only the chunks it lacks. A remote
        source: what was served. None served by default (the reader then reads the leaf whole)."""
        raise ArtifactUnavailable("no chunk digests served here")

    def leaf_chunk(self, epoch: int, leaf: int, tensor: int, chunk: int) -> bytes:
        """Chunk ``chunk`` (1 MiB) of the ``tensor``-th tensor, in name order, of leaf ``leaf``."""
        raise ArtifactUnavailable("no leaf chunks served here")

    def assembled(self, epoch: int, leaf: int, chunks: Iterable[bytes]) -> Iterable[bytes]:
        """The bytes of leaf ``leaf`` that a reader assembled from its own copy and the chunks it
        fetched (:meth:`leaf_digests`), passed through here on their way to its checks, so that a
        wrapper keeping what is read (``node.leaf_holding.Keeping``) keeps them too."""
        return chunks

    def file(self, kind: BlobKind, key: int | str, leaf: int = 0) -> Path | None:
        """The file holding a blob, so that a server can stream it rather than read it whole.

        Args:
            kind: ``checkpoint`` (key = epoch, ``leaf``), ``delta`` (key = epoch) or ``model``
                (key = model hash).

        Returns:
            the path, or None where the blob is not one file on disk. None is the default: a source
            that transforms what it serves must not be bypassed by a server reading the file.
        """
        return None


def _file_digests(path: Path) -> LeafDigests:
    try:
        return file_leaf_digests(path)
    except FileNotFoundError:
        raise ArtifactUnavailable(f"no {path.name}") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ArtifactUnavailable(f"{path.name} is unreadable: {exc}") from None


def _file_chunk(path: Path, tensor: int, chunk: int) -> bytes:
    try:
        return file_chunk(path, tensor, chunk)
    except FileNotFoundError:
        raise ArtifactUnavailable(f"no {path.name}") from None
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        raise ArtifactUnavailable(f"no such chunk of {path.name}: {exc}") from None


def _chunks_of(data: object) -> Iterable[bytes | object]:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes_chunks(bytes(data))
    return iter([data])
def _digest(value: str, what: str) -> str:
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError(f"a {what} is 64 lowercase hex characters")
    return value


def global_path(root: Path, run_id: bytes, model_hash: str) -> Path:
    """Where a host keeps the global state with ``model_hash``."""
    return Path(root) / run_id.hex() / "global" / f"{_digest(model_hash, 'model hash')}.safetensors"


def file_chunks(path: Path) -> Iterator[bytes]:
    """A file's bytes in pieces, opened now (so a missing file raises ``FileNotFoundError`` at the
    call) and closed when the pieces are read or dropped; one larger than
    :data:`MAX_ARTIFACT_BYTES` is refused (:class:`ArtifactUnavailable`)."""
    if path.stat().st_size > MAX_ARTIFACT_BYTES:
        raise ArtifactUnavailable(f"{path.name} is larger than {MAX_ARTIFACT_BYTES} bytes")
    handle = open(path, "rb")  # noqa: SIM115 - closed by the generator

    def pieces() -> Iterator[bytes]:
        with handle:
            while piece := handle.read(CHUNK_BYTES):
                yield piece

    return pieces()


def held_leaves_dir(root: Path, run_id: bytes, epoch: int, checkpoint_root: str) -> Path:
    """Where a validator keeps the leaves, proofs and losses it checked of the host epoch whose
    committed Merkle root is ``checkpoint_root``."""
    if epoch < 0:
        raise ValueError("an epoch is not negative")
    return Path(root) / run_id.hex() / "held" / str(int(epoch)) / _digest(checkpoint_root, "checkpoint root")


def held_epochs(root: Path, run_id: bytes) -> list[int]:
    """The epochs of which ``root`` holds leaves, ascending."""
    try:
        return sorted(int(p.name) for p in (Path(root) / run_id.hex() / "held").iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return []


class HeldLeaves(ArtifactSource):
    """One host epoch's challenge artifacts as a holder kept them (:func:`held_leaves_dir`): leaf
    ``i`` in ``leaf-<i>.safetensors``, its proof in ``proof-<i>.json``, the losses in
    ``losses.json``. Only what the holder checked is there; anything else is unavailable."""

    def __init__(self, directory: Path, epoch: int) -> None:
        self.directory, self.epoch = Path(directory), epoch

    def _path(self, epoch: int, name: str) -> Path:
        if epoch != self.epoch:
            raise ArtifactUnavailable(f"these held leaves are of epoch {self.epoch}, not {epoch}")
        path = self.directory / name
        if not path.is_file():
            raise ArtifactUnavailable(f"{name} of epoch {epoch} is not held here")
        return path

    def _json(self, epoch: int, name: str) -> UntrustedJson:
        try:
            value: UntrustedJson = json.loads(self._path(epoch, name).read_bytes())
        except (OSError, ValueError):
            raise ArtifactUnavailable(f"{name} of epoch {epoch} is unreadable here") from None
        return value

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return self._path(epoch, f"leaf-{leaf}.safetensors").read_bytes()

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes]:
        return file_chunks(self._path(epoch, f"leaf-{leaf}.safetensors"))

    def leaf_digests(self, epoch: int, leaf: int) -> LeafDigests:
        return _file_digests(self._path(epoch, f"leaf-{leaf}.safetensors"))

    def leaf_chunk(self, epoch: int, leaf: int, tensor: int, chunk: int) -> bytes:
        return _file_chunk(self._path(epoch, f"leaf-{leaf}.safetensors"), tensor, chunk)

    def proof(self, epoch: int, leaf: int) -> UntrustedJson:
        return self._json(epoch, f"proof-{leaf}.json")

    def losses(self, epoch: int) -> UntrustedJson:
        return self._json(epoch, "losses.json")

    def delta(self, epoch: int) -> bytes:
        raise ArtifactUnavailable("a held Δ is read by its hash (delta_by_hash)")

    def global_state(self, model_hash: str) -> bytes:
        raise ArtifactUnavailable("held leaves hold no global state")

    def file(self, kind: BlobKind, key: int | str, leaf: int = 0) -> Path | None:
        if kind != "checkpoint":
            return None
        try:
            path = self._path(int(key), f"leaf-{leaf}.safetensors")
        except ArtifactUnavailable:
            return None
        return path if path.stat().st_size <= MAX_ARTIFACT_BYTES else None


def held_delta_path(root: Path, run_id: bytes, delta_hash: str) -> Path:
    """Where a participant keeps a Δ it holds by hash (checked before it was kept)."""
    return Path(root) / run_id.hex() / "deltas" / f"{_digest(delta_hash, 'Δ hash')}.safetensors"


class LocalArtifacts(ArtifactSource):
    """A host's artifacts read from its own work directory.

    Args:
        root: the host's work root.
        run_id: the run.
        host: the host's address (its epochs live under its name).
        recompute: ``(epoch, leaf) -> None``: puts a committed leaf that was not stored in full on
            disk (:meth:`trainer.recompute.LeafRecomputer.materialize`); raises when it cannot.
            Without it such a leaf is unavailable.
    """

    def __init__(self, root: Path, run_id: bytes, host: str,
                 recompute: Callable[[int, int], object] | None = None) -> None:
        self.root = Path(root)
        self.run_id = run_id
        self.host = host
        self.epochs = EpochStore(root, run_id, host)
        self.recompute = recompute

    def _read(self, path: Path) -> bytes:
        try:
            if path.stat().st_size > MAX_ARTIFACT_BYTES:
                raise ArtifactUnavailable(f"{path.name} is larger than {MAX_ARTIFACT_BYTES} bytes")
            return path.read_bytes()
        except FileNotFoundError:
            raise ArtifactUnavailable(f"{self.host} has no {path.name}") from None

    def _record(self, epoch: int) -> EpochRecord:
        try:
            return self.epochs.read_record(epoch)
        except FileNotFoundError:
            raise ArtifactUnavailable(f"{self.host} has no committed work for epoch {epoch}") from None
        except ValueError as exc:
            raise ArtifactUnavailable(f"{self.host}'s record of epoch {epoch} is unreadable: {exc}") from None

    def _path(self, kind: BlobKind, key: int | str, leaf: int = 0) -> Path:
        try:
            if kind == "checkpoint":
                return self.epochs.leaf_path(int(key), leaf)
            if kind == "delta":
                return self.epochs.delta_path(int(key))
            if kind == "held_delta":
                return held_delta_path(self.root, self.run_id, str(key))
            return global_path(self.root, self.run_id, str(key))
        except ValueError as exc:  # a negative epoch or leaf, a malformed model hash
            raise ArtifactUnavailable(str(exc)) from None

    def file(self, kind: BlobKind, key: int | str, leaf: int = 0) -> Path | None:
        try:
            path = self._path(kind, key, leaf)
            # The same bound as _read: an oversized file is left to it, to be refused.
            return path if path.is_file() and path.stat().st_size <= MAX_ARTIFACT_BYTES else None
        except (ArtifactUnavailable, OSError):
            return None

    def _leaf(self, epoch: int, leaf: int) -> Path:
        path = self._path("checkpoint", epoch, leaf)
        if self.recompute is not None and not path.exists() and self.epochs.committed(epoch):
            try:
                self.recompute(epoch, leaf)
            except (VerilocoError, ValueError, OSError) as exc:
                raise ArtifactUnavailable(f"{self.host} cannot recompute leaf {leaf} of epoch {epoch}: {exc}") from None
        return path

    def _stream(self, path: Path) -> Iterable[bytes]:
        try:
            return file_chunks(path)
        except FileNotFoundError:
            raise ArtifactUnavailable(f"{self.host} has no {path.name}") from None

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return self._read(self._leaf(epoch, leaf))

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes]:
        return self._stream(self._leaf(epoch, leaf))

    def delta_chunks(self, epoch: int) -> Iterable[bytes]:
        return self._stream(self._path("delta", epoch))

    def leaf_digests(self, epoch: int, leaf: int) -> LeafDigests:
        return _file_digests(self._leaf(epoch, leaf))

    def leaf_chunk(self, epoch: int, leaf: int, tensor: int, chunk: int) -> bytes:
        return _file_chunk(self._leaf(epoch, leaf), tensor, chunk)

    def proof(self, epoch: int, leaf: int) -> MerkleProof:
        hashes = self._record(epoch).leaf_hashes
        if not 0 <= leaf < len(hashes):
            raise ArtifactUnavailable(f"no leaf {leaf} in epoch {epoch} ({len(hashes)} leaves)")
        return merkle_proof(hashes, leaf)

    def delta(self, epoch: int) -> bytes:
        return self._read(self._path("delta", epoch))

    def losses(self, epoch: int) -> list[int]:
        return list(self._record(epoch).losses_micro)

    def global_state(self, model_hash: str) -> bytes:
        return self._read(self._path("model", model_hash))

    def global_state_chunks(self, model_hash: str) -> Iterable[bytes]:
        return self._stream(self._path("model", model_hash))

    def delta_by_hash(self, delta_hash: str) -> bytes:
        return self._read(self._path("held_delta", delta_hash))

    def held(self, epoch: int, checkpoint_root: str) -> HeldLeaves:
        """What this participant holds of a host epoch (:class:`HeldLeaves`), only for its newest
        held epoch and the one before (:data:`HELD_EPOCHS`)."""
        try:
            directory = held_leaves_dir(self.root, self.run_id, epoch, checkpoint_root)
        except ValueError as exc:
            raise ArtifactUnavailable(str(exc)) from None
        epochs = held_epochs(self.root, self.run_id)
        if not epochs or epoch <= epochs[-1] - HELD_EPOCHS or not directory.is_dir():
            raise ArtifactUnavailable(f"no leaves of epoch {epoch} under root {checkpoint_root[:12]}… held here")
        return HeldLeaves(directory, epoch)

    def delta_by_hash_chunks(self, delta_hash: str, epoch: int | None = None) -> Iterable[bytes]:
        return self._stream(self._path("held_delta", delta_hash))
