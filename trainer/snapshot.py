"""Leaf snapshots that do not stall training: copy on the training thread, hash and write behind it.

The training thread hands each finished segment's :class:`~trainer.checkpoint.Checkpoint` (already
a copy: :meth:`trainer.step.Stepper.export_async` copies parameters and moments to fresh CPU
tensors; on CUDA the device-to-host part of that copy overlaps the next segment and the writer
waits for it) to a :class:`LeafWriter` and goes on with the next segment. One background thread, in leaf order, hashes
the leaf (``hashlib`` releases the GIL on large buffers, so hashing runs beside the training
thread's torch kernels), writes it atomically when it is one of the leaves stored in full, and only
then appends its hash to the epoch's progress file, so after a crash every hash on record belongs
to a leaf that was either stored or can be recomputed from one that was. A stored leaf leaves the
page cache once on disk unless the host reads it again this epoch (the last segment's two,
:meth:`~trainer.epoch_store.EpochStore.read_soon`, a partial epoch's last leaf, a trap's end
leaf): the other leaves are read only when challenged, and an epoch's worth of them (8 GB at
``small``) would otherwise push the page cache into reclaim, which each later write pays for on
the writer's core.

At most ``max_pending`` snapshots wait (each is a full copy of the training state): when the writer
falls behind, :meth:`LeafWriter.submit` blocks, so memory stays bounded at ``max_pending + 1``
copies of the state whatever the disk does.

The leaf hash (``protocol.tensors.digest``) commits to the SHA-256 digests of 1 MiB chunks of each
tensor, which are independent: the writer hashes a leaf on ``hash_threads`` threads (by default
half the machine's cores, at most 8: on a GPU host the CPU cores are idle; on this 2-core CPU host
one, since the other core trains).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint
from trainer.epoch_store import EpochStore


def default_hash_threads() -> int:
    """Threads a leaf is hashed on: half the machine's cores, at least 1 and at most 8."""
    return max(1, min(8, (os.cpu_count() or 1) // 2))


@dataclass
class SnapshotStats:
    """What the background writer did (seconds are the writer thread's wall time).

    Attributes:
        leaves: leaves hashed.
        stored: leaves written in full.
        bytes_hashed: bytes of leaf data hashed.
        bytes_written: bytes of leaf files written.
        hash_seconds: time spent hashing.
        write_seconds: time spent encoding, writing and fsyncing.
        wait_seconds: time the training thread waited (a full queue, or the final drain).
        transfer_seconds: time the writer waited for a leaf's device-to-host copy to land (on
            CUDA, where the copy overlaps the next segment; 0 on CPU, where it is made first).
        cpu_seconds: CPU time of the writer thread (what it took from training on a machine
            without a spare core; wall seconds above include waiting for the CPU and the disk);
            with ``hash_threads`` > 1 the hashing threads' CPU is not in it.
    """

    leaves: int = 0
    stored: int = 0
    bytes_hashed: int = 0
    bytes_written: int = 0
    hash_seconds: float = 0.0
    write_seconds: float = 0.0
    wait_seconds: float = 0.0
    transfer_seconds: float = 0.0
    cpu_seconds: float = 0.0


@dataclass
class _Job:
    index: int
    checkpoint: Checkpoint | None  # dropped once processed: only the queue's snapshots stay alive
    store: bool
    read_soon: bool = False  # the host reads it back in this epoch: its pages stay in the page cache
    ready: Callable[[], None] | None = None
    digest: bytes = b""


class LeafWriter:
    """Hash, store and record an epoch's leaves in a background thread, in order.

    Args:
        store: the host's epoch store.
        spec: the run spec.
        epoch: the epoch.
        full_leaf_every: ``K``: leaf ``i`` is written in full when ``EpochStore.stored`` says so.
        max_pending: snapshots that may wait for the writer before :meth:`submit` blocks.
        hash_threads: threads each leaf is hashed on (:func:`default_hash_threads` when omitted).
        keep: leaves written in full whatever ``K`` says (a trap's end leaf).
    """

    def __init__(self, store: EpochStore, spec: RunSpec, epoch: int, full_leaf_every: int,
                 max_pending: int = 2, hash_threads: int | None = None, keep: Collection[int] = ()) -> None:
        self.store, self.spec, self.epoch, self.k = store, spec, epoch, full_leaf_every
        self.keep = frozenset(keep)
        self.hash_threads = hash_threads or default_hash_threads()
        self.stats = SnapshotStats()
        self._queue: queue.Queue[_Job | None] = queue.Queue(maxsize=max_pending)
        self._jobs: list[_Job] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"leaf-writer-{epoch}", daemon=True)
        self._thread.start()

    def submit(self, index: int, checkpoint: Checkpoint, ready: Callable[[], None] | None = None,
               keep: bool = False) -> None:
        """Queue leaf ``index``; blocks while the queue is full.

        Args:
            index: the leaf's index in the epoch.
            checkpoint: the leaf; its tensors must not change afterwards.
            ready: blocks until the checkpoint's tensors hold their values (a copy from a GPU
                still in flight: :meth:`trainer.step.Stepper.export_async`); called on the
                writer's thread before the leaf is hashed.
            keep: write it in full whatever ``K`` says (a partial epoch's last leaf).
        """
        self._raise()
        kept = keep or index in self.keep  # a partial epoch's last leaf, a trap's end leaf: challenged
        stored = kept or EpochStore.stored(self.spec, index, self.k)
        job = _Job(index, checkpoint, stored, kept or EpochStore.read_soon(self.spec, index), ready)
        self._jobs.append(job)
        t0 = time.perf_counter()
        self._queue.put(job)
        self.stats.wait_seconds += time.perf_counter() - t0

    def finish(self) -> list[bytes]:
        """Wait for every queued leaf; their hashes, in submission order.

        Raises:
            Exception: what the writer thread raised (a full disk, …).
        """
        t0 = time.perf_counter()
        self._queue.put(None)
        self._thread.join()
        self.stats.wait_seconds += time.perf_counter() - t0
        self._raise()
        return [job.digest for job in self._jobs]

    def close(self) -> None:
        """Stop the thread without waiting for an answer (after an error on the training side)."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            try:
                if self._error is None:  # after a failure the rest is drained, nothing recorded
                    self._process(job)
            except BaseException as exc:  # noqa: BLE001 - handed to the training thread
                self._error = exc
            finally:
                job.checkpoint = None  # a whole training state: memory stays at the queue's bound

    def _process(self, job: _Job) -> None:
        assert job.checkpoint is not None
        if job.ready is not None:
            t = time.perf_counter()
            job.ready()
            self.stats.transfer_seconds += time.perf_counter() - t
        cpu0 = time.thread_time()
        t0 = time.perf_counter()
        job.digest = job.checkpoint.leaf_hash(self.hash_threads)
        t1 = time.perf_counter()
        nbytes = sum(t.numel() * t.element_size() for t in job.checkpoint.tensors().values())
        self.stats.leaves += 1
        self.stats.bytes_hashed += nbytes
        self.stats.hash_seconds += t1 - t0
        if job.store:
            self.store.write_leaf(self.epoch, job.index, job.checkpoint, drop_cache=not job.read_soon)
            self.stats.stored += 1
            self.stats.bytes_written += self.store.leaf_path(self.epoch, job.index).stat().st_size
        # The leaf is on disk (or recomputable from one that is) before its hash is on record.
        self.store.append_progress(self.epoch, job.index, job.digest, job.checkpoint.losses.tolist())
        self.stats.write_seconds += time.perf_counter() - t1
        self.stats.cpu_seconds += time.thread_time() - cpu0
