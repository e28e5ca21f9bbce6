"""One host's epochs on disk: checkpoint leaves, the served Δ, the per-step losses and the commitment.

This module is the only one that knows the epoch artifact format. The host's inner loop
(:func:`trainer.inner.run_epoch`) writes through it, a host's artifact source
(:class:`trainer.artifacts.LocalArtifacts`) reads through it, and every adversary of the catalogue
(``verifier.adversaries``) writes its faked epoch through it, so a cheater's files are an honest
host's files with other contents.

Layout under a host's work root (``<root>/<run id hex>/epoch-<e:06d>/<host>/``):

* ``leaf-0000.safetensors`` … ``leaf-<S>.safetensors`` — the checkpoint leaves
  (:mod:`trainer.checkpoint`; leaf 0 is the start state θ_e);
* ``delta.safetensors`` — the quantized Δ exactly as served (:mod:`trainer.delta`);
* ``residual.safetensors`` — ``topk2`` runs only: the error-feedback residual the epoch's Δ leaves
  (:mod:`trainer.compress`), which the host carries into its next epoch if this one is accepted;
  its digest is the Δ payload's ``ef/next``, checked when it is read;
* ``commitment.json`` — the :class:`~protocol.messages.Commitment`, the ``S + 1`` leaf hashes
  and the ``H`` per-step losses in micro-nats (:class:`EpochRecord`);
* ``leaves.jsonl`` — the training progress: a header (``full_leaf_every``, ``micro_batches``,
  ``prev_epoch_seed``) and one line per finished leaf (its hash and the losses since the previous
  leaf), appended as each leaf is hashed.

**Sparse leaves.** A host stores only every ``full_leaf_every``-th leaf in full (:meth:`stored`:
leaf 0, the multiples of ``K`` and the last two leaves, since the last segment is always
challenged); every leaf's hash is still committed. A
challenged leaf that is not on disk is recomputed from the nearest stored leaf below it
(:class:`trainer.recompute.LeafRecomputer`: at most ``K − 1`` segments) and checked against the
committed hash before it is served. ``K = 1`` stores every leaf.

Every file is written atomically (temporary file, fsync, rename), so after a crash each file is
either absent or complete (``leaves.jsonl`` is appended line by line, not fsynced; a torn or lost
tail only sends :meth:`EpochStore.resume` back to an earlier stored leaf). The record is written
after the Δ it names, so an epoch whose record exists is committed; :meth:`EpochStore.resume` picks
an interrupted epoch up from its last stored leaf whose predecessors' hashes are all known.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, model_validator

from protocol.messages import Commitment
from protocol.rules.hashing import HexDigest
from protocol.rules.losses import loss_digest, loss_micro, train_loss_micro
from protocol.rules.merkle import merkle_root
from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint, CheckpointError, load_checkpoint
from trainer.compress import NEXT, residual_digest
from trainer.delta import delta_hash, load_delta, save_delta
from trainer.leaf_budget import stored_in_full
from trainer.model import parameter_shapes
from trainer.tensorfile import load_tensors, remove_partial_writes, save_tensors, write_atomic

RESIDUAL_FORMAT = {"format": "veriloco/residual-1"}

MAX_RECORD_BYTES = 64 * 1024**2
"""Bound on ``commitment.json`` (a million losses and 1025 leaf hashes take about 15 MB)."""


@dataclass(frozen=True)
class EpochRecord:
    """What ``commitment.json`` of a committed epoch holds.

    Attributes:
        commitment: what the host posts.
        leaf_hashes: the ``S + 1`` checkpoint leaf hashes (leaf 0 is the start state).
        losses_micro: the ``H`` per-step losses in micro-nats (they hash to the loss digest).
    """

    commitment: Commitment
    leaf_hashes: list[bytes]
    losses_micro: list[int]


@dataclass
class Progress:
    """Where an epoch's training stands: what :meth:`EpochStore.resume` returns.

    Attributes:
        last: the stored leaf training continues from (leaf 0 on a fresh start).
        index: its index.
        hashes: the hashes of leaves ``0 … index``.
        losses: the per-step losses of steps ``0 … index · c − 1``.
        full_leaf_every: ``K`` of this epoch (the one it started with, whatever a restart asks).
    """

    last: Checkpoint
    index: int
    hashes: list[bytes]
    losses: list[float]
    full_leaf_every: int


class ProgressHeader(BaseModel):
    """The first line of ``leaves.jsonl``: what recomputing a leaf of this epoch needs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    full_leaf_every: int
    micro_batches: int
    prev_epoch_seed: HexDigest


class _ProgressLine(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    leaf: int
    hash: HexDigest
    losses: list[float] = []


class _RecordFile(BaseModel):
    # The file's schema, checked on every read: a record that the store did not write (damaged,
    # edited) is refused rather than served.
    model_config = ConfigDict(extra="forbid", frozen=True)

    commitment: Commitment
    leaf_hashes: list[HexDigest]
    losses_micro: list[int]

    @model_validator(mode="after")
    def _consistent(self) -> _RecordFile:
        if len(self.leaf_hashes) != self.commitment.segments + 1:
            raise ValueError(f"{len(self.leaf_hashes)} leaf hashes for {self.commitment.segments} segments")
        if loss_digest(self.losses_micro) != self.commitment.loss_digest:
            raise ValueError("the losses do not hash to the committed loss digest")
        return self


class EpochStore:
    """The epochs of one host of one run, under the host's work root.

    Args:
        root: the host's work root.
        run_id: the run (32 bytes).
        host: the host's address (its epochs live under its name).

    Raises:
        ValueError: ``host`` is not a plain directory name.
    """

    def __init__(self, root: Path, run_id: bytes, host: str) -> None:
        if not host or host in (".", "..") or "/" in host or "\\" in host or "\0" in host:
            raise ValueError(f"{host!r} cannot name an epoch directory")
        self.root = Path(root)
        self.run_id = run_id
        self.host = host

    def __repr__(self) -> str:
        return f"EpochStore({str(self.root)!r}, {self.run_id.hex()[:12]}…, {self.host!r})"

    # ------------------------------------------------------------------------------------------
    # Where things are (for streaming and for tests that simulate crashes)

    def directory(self, epoch: int) -> Path:
        """``<root>/<run id hex>/epoch-<e:06d>/<host>``."""
        if epoch < 0:
            raise ValueError(f"no epoch {epoch}")
        return self.root / self.run_id.hex() / f"epoch-{epoch:06d}" / self.host

    def leaf_path(self, epoch: int, leaf: int) -> Path:
        """The file of checkpoint leaf ``leaf`` of ``epoch``."""
        if leaf < 0:
            raise ValueError(f"no leaf {leaf}")
        return self.directory(epoch) / f"leaf-{leaf:04d}.safetensors"

    def delta_path(self, epoch: int) -> Path:
        """The file of the quantized Δ of ``epoch``, exactly as served."""
        return self.directory(epoch) / "delta.safetensors"

    def residual_path(self, epoch: int) -> Path:
        """The file of the error-feedback residual ``epoch``'s Δ leaves (``topk2`` runs)."""
        return self.directory(epoch) / "residual.safetensors"

    def record_path(self, epoch: int) -> Path:
        """The file of the :class:`EpochRecord` of ``epoch``; it exists once the epoch is committed."""
        return self.directory(epoch) / "commitment.json"

    def progress_path(self, epoch: int) -> Path:
        """The file of the epoch's training progress (``leaves.jsonl``)."""
        return self.directory(epoch) / "leaves.jsonl"

    def committed(self, epoch: int) -> bool:
        """Whether ``epoch`` has a record (its Δ and leaves are then on disk too)."""
        return self.record_path(epoch).exists()

    # ------------------------------------------------------------------------------------------
    # Leaves

    def write_leaf(self, epoch: int, leaf: int, checkpoint: Checkpoint, *, drop_cache: bool = False) -> None:
        """Write leaf ``leaf`` of ``epoch`` atomically (the epoch's directory is created);
        ``drop_cache`` for a leaf not expected to be read soon (:meth:`read_soon`)."""
        path = self.leaf_path(epoch, leaf)
        path.parent.mkdir(parents=True, exist_ok=True)
        checkpoint.save(path, drop_cache=drop_cache)

    def read_leaf(self, spec: RunSpec, epoch: int, leaf: int) -> Checkpoint:
        """Leaf ``leaf`` of ``epoch``, validated against the spec's layout.

        Raises:
            FileNotFoundError: not written (yet).
            CheckpointError: malformed or not leaf ``leaf`` of this run.
        """
        return load_checkpoint(self.leaf_path(epoch, leaf), spec, leaf)

    def read_leaves(self, spec: RunSpec, epoch: int) -> list[Checkpoint]:
        """All ``S + 1`` leaves of ``epoch``, leaf 0 first."""
        return [self.read_leaf(spec, epoch, i) for i in range(spec.train.segments + 1)]

    @staticmethod
    def stored(spec: RunSpec, leaf: int, full_leaf_every: int) -> bool:
        """Whether leaf ``leaf`` is kept in full on disk (:func:`trainer.leaf_budget.stored_in_full`)."""
        return stored_in_full(spec.train.segments, leaf, full_leaf_every)

    @staticmethod
    def read_soon(spec: RunSpec, leaf: int) -> bool:
        """Whether the host will read leaf ``leaf`` back soon after writing it: the last segment's
        start and end leaves (the last segment is challenged in every epoch); any other leaf is
        read only if challenged, so its pages are dropped from the page cache once on disk."""
        return leaf >= spec.train.segments - 1

    def read_progress(self, epoch: int) -> tuple[ProgressHeader | None, dict[int, tuple[bytes, list[float]]]]:
        """The header and the leaf lines of ``leaves.jsonl`` (empty when absent).

        Lines after the first malformed one are ignored (a crash can tear only the last line).
        """
        path = self.progress_path(epoch)
        if not path.exists():
            return None, {}
        if path.stat().st_size > MAX_RECORD_BYTES:
            raise ValueError(f"{path} is larger than {MAX_RECORD_BYTES} bytes")
        lines = path.read_bytes().split(b"\n")
        try:
            header = ProgressHeader.model_validate_json(lines[0])
        except ValueError:
            return None, {}
        entries: dict[int, tuple[bytes, list[float]]] = {}
        for raw in lines[1:]:
            try:
                line = _ProgressLine.model_validate_json(raw)
            except ValueError:
                break
            entries.setdefault(line.leaf, (bytes.fromhex(line.hash), list(line.losses)))
        return header, entries

    def append_progress(self, epoch: int, leaf: int, leaf_hash: bytes, losses: Sequence[float]) -> None:
        """Append leaf ``leaf``'s hash and losses to ``leaves.jsonl``.

        Not fsynced: a line lost with the page cache (a power cut, not a killed process) only makes
        :meth:`resume` start from an earlier stored leaf and train the lost segments again; the
        commitment is written (and fsynced) only after every leaf hash is known.
        """
        line = json.dumps({"leaf": leaf, "hash": leaf_hash.hex(), "losses": [float(x) for x in losses]})
        with open(self.progress_path(epoch), "ab") as f:
            f.write(line.encode() + b"\n")

    def resume(self, spec: RunSpec, epoch: int, start: Checkpoint, prev_epoch_seed: bytes = b"",
               full_leaf_every: int = 1) -> Progress:
        """Prepare ``epoch`` for training from ``start``: where an interrupted run left off.

        Creates the directory, removes what a crash left half-written, writes leaf 0 when it is
        missing, and walks the leaves in order: a stored leaf must be on disk (it is loaded and
        checked), any other one must have its hash in ``leaves.jsonl``. Training resumes from the
        last stored leaf reached (just leaf 0 on a fresh start); ``leaves.jsonl`` is rewritten to
        end there.

        Args:
            spec: the run spec.
            epoch: the epoch.
            start: leaf 0 (θ_e, fresh optimizer).
            prev_epoch_seed: the previous epoch's seed (kept so a leaf can be recomputed later).
            full_leaf_every: ``K``; an epoch already begun keeps the ``K`` it began with.

        Raises:
            CheckpointError: the leaves on disk belong to another start state, island layout or
                epoch, or one of them is damaged.
        """
        if full_leaf_every < 1:
            raise ValueError("full_leaf_every must be >= 1")
        directory = self.directory(epoch)
        directory.mkdir(parents=True, exist_ok=True)
        remove_partial_writes(directory)
        path = self.leaf_path(epoch, 0)
        start_hash = start.leaf_hash()
        if path.exists():
            if load_checkpoint(path, spec, 0).leaf_hash() != start_hash:
                raise CheckpointError(f"{path} is not the start state of this epoch "
                                      f"(another θ_e or island layout used this directory)")
        else:
            start.save(path)
        header, entries = self.read_progress(epoch)
        if header is not None and header.micro_batches != start.micro_batches:
            raise CheckpointError(f"{self.progress_path(epoch)} belongs to another island layout")
        k = header.full_leaf_every if header is not None else full_leaf_every
        progress = Progress(start, 0, [start_hash], [], k)
        hashes, losses = [start_hash], []
        for leaf in range(1, spec.train.segments + 1):
            if self.stored(spec, leaf, k):
                path = self.leaf_path(epoch, leaf)
                if not path.exists():
                    break
                ckpt = load_checkpoint(path, spec, leaf)
                if ckpt.micro_batches != start.micro_batches or ckpt.state.rng_key != start.state.rng_key:
                    raise CheckpointError(f"{path} belongs to another island layout or epoch")
                digest = ckpt.leaf_hash()
                if leaf in entries and entries[leaf][0] != digest:
                    raise CheckpointError(f"{path} does not hash to the hash recorded while training")
                hashes.append(digest)
                losses.extend(ckpt.losses.tolist())
                progress = Progress(ckpt, leaf, list(hashes), list(losses), k)
            elif leaf in entries:
                hashes.append(entries[leaf][0])
                losses.extend(entries[leaf][1])
            else:
                break
        lines = [ProgressHeader(full_leaf_every=k, micro_batches=start.micro_batches,
                                prev_epoch_seed=prev_epoch_seed.hex() if prev_epoch_seed else "0" * 64
                                ).model_dump_json().encode()]
        steps = spec.train.segment_steps
        for leaf in range(1, progress.index + 1):
            lines.append(json.dumps({"leaf": leaf, "hash": progress.hashes[leaf].hex(),
                                     "losses": progress.losses[(leaf - 1) * steps:leaf * steps]}).encode())
        write_atomic(self.progress_path(epoch), b"\n".join(lines) + b"\n")
        return progress

    def leaves_on_disk(self, epoch: int) -> list[int]:
        """The indices of the leaves of ``epoch`` stored in full, ascending."""
        found = []
        for path in self.directory(epoch).glob("leaf-*.safetensors"):
            try:
                found.append(int(path.name[5:9]))
            except ValueError:
                continue
        return sorted(found)

    # ------------------------------------------------------------------------------------------
    # Retention

    def epochs_on_disk(self) -> list[int]:
        """The epochs this host has a directory for, ascending."""
        found = []
        for directory in (self.root / self.run_id.hex()).glob("epoch-*"):
            if (directory / self.host).is_dir() and directory.name[6:].isdigit():
                found.append(int(directory.name[6:]))
        return sorted(found)

    def thin(self, spec: RunSpec, epoch: int, full_leaf_every: int, keep: Collection[int] = ()) -> list[int]:
        """Delete the leaves of ``epoch`` that interval ``K`` does not store (``trainer.leaf_budget``:
        an epoch stored densely while it could be challenged, kept at ``K`` once closed). The last
        committed leaf stays too (a partial epoch's), and so do the leaves of ``keep`` (a trap's end
        leaf: no honest replay reaches it). Any deleted leaf can still be recomputed.

        Returns:
            The leaves deleted, ascending.
        """
        if full_leaf_every < 1:
            raise ValueError("full_leaf_every must be >= 1")
        last = self.read_record(epoch).commitment.segments if self.committed(epoch) else None
        deleted = []
        for leaf in self.leaves_on_disk(epoch):
            if leaf == last or leaf in keep or self.stored(spec, leaf, full_leaf_every):
                continue
            self.leaf_path(epoch, leaf).unlink(missing_ok=True)
            deleted.append(leaf)
        return deleted

    def prune(self, keep_epochs: int, current: int, closed: Callable[[int], bool]) -> list[int]:
        """Delete this host's epochs older than the ``keep_epochs`` before ``current`` whose
        challenge windows have closed.

        Args:
            keep_epochs: how many epochs before ``current`` to keep whatever their state.
            current: the chain's current epoch (never deleted, nor anything after it).
            closed: whether no challenge of an epoch can come any more (the chain says so); an epoch
                for which it answers false is kept.

        Returns:
            The epochs deleted.
        """
        if keep_epochs < 0:
            raise ValueError("keep_epochs must be >= 0")
        deleted = []
        for epoch in self.epochs_on_disk():
            if epoch >= current - keep_epochs:
                break
            if not closed(epoch):
                continue
            directory = self.directory(epoch)
            # Rename first: a crash mid-delete leaves a trash directory, never a half epoch that
            # resume or a server could mistake for a live one.
            trash = directory.with_name(f".{self.host}.pruned")
            shutil.rmtree(trash, ignore_errors=True)
            os.replace(directory, trash)
            shutil.rmtree(trash, ignore_errors=True)
            parent = directory.parent
            if parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()
            deleted.append(epoch)
        return deleted

    # ------------------------------------------------------------------------------------------
    # Δ and record

    def read_delta(self, spec: RunSpec, epoch: int) -> dict[str, torch.Tensor]:
        """The committed quantized Δ of ``epoch``, validated against the spec's layout."""
        return load_delta(self.delta_path(epoch), spec)

    def read_record(self, epoch: int) -> EpochRecord:
        """The record of a committed epoch.

        Raises:
            FileNotFoundError: ``epoch`` is not committed.
            ValueError: the record is larger than :data:`MAX_RECORD_BYTES`, not JSON, or not a
                consistent record (leaf count, loss digest).
        """
        path = self.record_path(epoch)
        if path.stat().st_size > MAX_RECORD_BYTES:
            raise ValueError(f"{path.name} is larger than {MAX_RECORD_BYTES} bytes")
        parsed = _RecordFile.model_validate_json(path.read_bytes())
        return EpochRecord(parsed.commitment, [bytes.fromhex(h) for h in parsed.leaf_hashes],
                           list(parsed.losses_micro))

    def read_residual(self, spec: RunSpec, epoch: int) -> dict[str, torch.Tensor]:
        """The residual committed ``epoch``'s Δ left (``topk2``), checked against the payload's ``ef/next``.

        Raises:
            FileNotFoundError: the epoch has no residual (not committed, or not a ``topk2`` epoch).
            TensorFileError / ValueError: malformed, or not the residual the Δ committed to.
        """
        layout = {f"ef/{n}": (torch.float32, tuple(s)) for n, s in parameter_shapes(spec).items()}
        path = self.residual_path(epoch)
        if not path.exists():
            raise FileNotFoundError(f"{path} does not exist")
        residual = {k[3:]: v for k, v in load_tensors(path, layout, RESIDUAL_FORMAT).items()}
        if residual_digest(residual) != bytes(self.read_delta(spec, epoch)[NEXT].tolist()):
            raise ValueError(f"{path.name} of epoch {epoch} is not the residual its Δ committed to")
        return residual

    def commit(self, spec: RunSpec, epoch: int, leaf_hashes: Sequence[bytes], losses: Sequence[float],
               payload: Mapping[str, torch.Tensor],
               residual: Mapping[str, torch.Tensor] | None = None) -> EpochRecord:
        """Write the Δ ``payload`` and the record that commits to the leaves, the losses and it.

        Args:
            spec: the run spec.
            epoch: the epoch.
            leaf_hashes: the ``s + 1`` leaf hashes (of leaves already written): ``s = S``, or
                ``1 ≤ s < S`` for a partial epoch.
            losses: the ``s · c`` per-step losses.
            payload: the quantized Δ to serve and commit to.
            residual: the residual the Δ leaves (``topk2``), written before the record.

        Returns:
            What was committed.
        """
        segments = len(leaf_hashes) - 1
        if not 1 <= segments <= spec.train.segments:
            raise ValueError(f"an epoch has 2 to {spec.train.segments + 1} leaves, got {len(leaf_hashes)}")
        if len(losses) != segments * spec.train.segment_steps:
            raise ValueError(f"{segments} segments have {segments * spec.train.segment_steps} losses, "
                             f"got {len(losses)}")
        self._write_delta(spec, epoch, payload)
        if residual is not None:
            save_tensors(self.residual_path(epoch), {f"ef/{n}": t for n, t in sorted(residual.items())},
                         RESIDUAL_FORMAT)
        micro = [loss_micro(x) for x in losses]
        return self._write_record(spec, epoch, list(leaf_hashes), micro,
                                  train_loss_micro(micro, spec.train.segment_steps), delta_hash(payload).hex())

    def write_epoch(self, spec: RunSpec, epoch: int, leaves: Sequence[Checkpoint],
                    payload: Mapping[str, torch.Tensor]) -> EpochRecord:
        """Write all ``S + 1`` leaves, then commit to them, their recorded losses and ``payload``.

        This is how a whole epoch made elsewhere (e.g. faked by an adversary) is committed; it ends
        in the same files and record as an honest host's :func:`trainer.inner.run_epoch` would
        write for the same leaves and Δ.
        """
        if len(leaves) != spec.train.segments + 1:
            raise ValueError(f"an epoch has {spec.train.segments + 1} leaves, got {len(leaves)}")
        directory = self.directory(epoch)
        directory.mkdir(parents=True, exist_ok=True)
        remove_partial_writes(directory)
        for i, leaf in enumerate(leaves):
            self.write_leaf(epoch, i, leaf)
        losses = [x for leaf in leaves[1:] for x in leaf.losses.tolist()]
        return self.commit(spec, epoch, [leaf.leaf_hash() for leaf in leaves], losses, payload)

    def recommit(self, spec: RunSpec, epoch: int, *, payload: Mapping[str, torch.Tensor] | None = None,
                 losses: Sequence[float] | None = None, reported_loss: int | None = None) -> EpochRecord:
        """Rewrite the commitment of a committed epoch with another Δ, other losses and/or another
        reported train loss.

        The leaves stay as they are; what is not given stays as committed. This is what an
        adversary that trains honestly and then commits something else does.

        Args:
            spec: the run spec.
            epoch: a committed epoch.
            payload: the quantized Δ to serve and commit to instead.
            losses: the ``H`` per-step losses to commit to instead (the leaves keep theirs).
            reported_loss: the ``train_loss_micro`` to report instead of the one that follows from
                the committed losses (a lie that validators catch).
        """
        old = self.read_record(epoch)
        digest = old.commitment.delta_hash
        if payload is not None:
            self._write_delta(spec, epoch, payload)
            digest = delta_hash(payload).hex()
        micro, train = old.losses_micro, old.commitment.train_loss_micro
        if losses is not None:
            if len(losses) != len(old.losses_micro):
                raise ValueError(f"the epoch has {len(old.losses_micro)} losses, got {len(losses)}")
            micro = [loss_micro(x) for x in losses]
            train = train_loss_micro(micro, spec.train.segment_steps)
        if reported_loss is not None:
            train = reported_loss
        return self._write_record(spec, epoch, old.leaf_hashes, micro, train, digest)

    def _write_delta(self, spec: RunSpec, epoch: int, payload: Mapping[str, torch.Tensor]) -> None:
        path = self.delta_path(epoch)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_delta(path, payload, spec.quantization)

    def _write_record(self, spec: RunSpec, epoch: int, leaf_hashes: list[bytes], losses_micro: list[int],
                      train_loss_micro: int, delta_digest: str) -> EpochRecord:
        commitment = Commitment(epoch=epoch, checkpoint_root=merkle_root(leaf_hashes).hex(), delta_hash=delta_digest,
                                loss_digest=loss_digest(losses_micro), segments=len(leaf_hashes) - 1,
                                train_loss_micro=train_loss_micro)
        record = {"commitment": commitment.model_dump(mode="json"), "leaf_hashes": [h.hex() for h in leaf_hashes],
                  "losses_micro": losses_micro}
        write_atomic(self.record_path(epoch), json.dumps(record, sort_keys=True, indent=1).encode())
        return EpochRecord(commitment, leaf_hashes, losses_micro)
