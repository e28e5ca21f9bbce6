"""Recompute a leaf that was not stored in full, from the nearest stored leaf below it.

A host stores only every ``K``-th leaf (:meth:`trainer.epoch_store.EpochStore.stored`) but commits
the hash of every one. When a validator asks for leaf ``i`` that is not on disk, the host replays
segments ``j … i − 1`` from the stored leaf ``j = ⌊i/K⌋·K`` (or from a leaf recomputed earlier, if
one is nearer) with the trainer's one step function — at most ``K − 1`` segments — checks that
every leaf it passes hashes to the leaf hash it committed, and keeps each of them on disk. So the
order in which validators ask does not matter: whatever leaves of a run of ``K`` segments are
challenged, the host replays that run once, as far as its highest challenged leaf (asking for leaf
7 then 5 costs 3 segments from leaf 4, as 5 then 7 does; keeping only the leaf asked for, 3 + 1).
A member that asks for unchallenged leaves to make the host compute can make it replay each
segment of an epoch at most once. A kept leaf costs one write (12 bytes per parameter) beside
the replay of its segment (``c`` training steps).

Recomputation reproduces the leaf bit for bit only where training ran: same device kind and thread
count (``docs/training.md``, determinism). A result that does not hash to the committed leaf is
not served (the host answers "unavailable" rather than serve a leaf that fails its proof).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from protocol.errors import VerilocoError
from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint
from trainer.data import Dataset
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, replay_segment
from trainer.step import Stepper

log = logging.getLogger("veriloco.trainer")


class RecomputeError(VerilocoError):
    """A leaf cannot be recomputed: the epoch is not committed, nothing to start from, or a mismatch."""


@dataclass
class RecomputeStats:
    """The cost of recomputing leaves, counted (a host's extra compute when challenged).

    Attributes:
        leaves: leaves recomputed (each kept on disk: the one asked for and those on the way).
        segments: segments replayed for them.
        steps: inner steps replayed.
        seconds: wall time.
        cpu_seconds: process CPU time meanwhile (every thread of the process: torch's included).
    """

    leaves: int = 0
    segments: int = 0
    steps: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0


def replayed_segments(spec: RunSpec, challenged: Iterable[int], full_leaf_every: int) -> int:
    """The segments :class:`LeafRecomputer` replays to serve the challenges of ``challenged``
    segments (each reads its start and end leaf), in any order, a host storing the leaves
    :meth:`~trainer.epoch_store.EpochStore.stored` names: each run of ``K`` segments once, from its
    stored leaf to its highest leaf asked for."""
    kk = full_leaf_every
    highest: dict[int, int] = {}
    for g in challenged:
        for leaf in (g, g + 1):
            if not EpochStore.stored(spec, leaf, kk):
                run = leaf // kk
                highest[run] = max(highest.get(run, 0), leaf - run * kk)
    return sum(highest.values())


class LeafRecomputer:
    """Materializes missing leaves of a host's committed epochs.

    Args:
        spec: the run spec.
        dataset: the run's dataset.
        store: the host's epoch store.
        device: where to replay (the device training ran on).
    """

    def __init__(self, spec: RunSpec, dataset: Dataset, store: EpochStore, device: str = "cpu") -> None:
        self.spec, self.dataset, self.store, self.device = spec, dataset, store, device
        self.stats = RecomputeStats()
        self._stepper: Stepper | None = None
        # Two validators may ask for the same leaf at once: one recomputation, the other waits.
        self._lock = threading.Lock()

    def materialize(self, epoch: int, leaf: int) -> Checkpoint:
        """Leaf ``leaf`` of committed ``epoch``, recomputed and stored if it is not on disk.

        Raises:
            RecomputeError: the epoch is not committed, has no progress file, no stored leaf to
                start from, or the recomputed leaf does not hash to the committed one.
        """
        spec, store = self.spec.for_epoch(epoch), self.store  # leaf S's layout follows the epoch's scheme
        with self._lock:
            if store.leaf_path(epoch, leaf).exists():
                return store.read_leaf(spec, epoch, leaf)
            if not store.committed(epoch):
                raise RecomputeError(f"epoch {epoch} is not committed")
            record = store.read_record(epoch)
            if not 0 < leaf < len(record.leaf_hashes):
                raise RecomputeError(f"no leaf {leaf} in epoch {epoch}")
            header, _ = store.read_progress(epoch)
            if header is None:
                raise RecomputeError(f"epoch {epoch} has no progress file to recompute from")
            base = max((i for i in store.leaves_on_disk(epoch) if i < leaf), default=None)
            if base is None:
                raise RecomputeError(f"epoch {epoch} has no stored leaf below {leaf}")
            current = store.read_leaf(spec, epoch, base)
            if current.leaf_hash() != record.leaf_hashes[base]:
                raise RecomputeError(f"stored leaf {base} of epoch {epoch} does not match the commitment")
            ctx = EpochContext(store.run_id, epoch, store.host, bytes.fromhex(header.prev_epoch_seed))
            if self._stepper is None:
                self._stepper = Stepper(spec, device=self.device)
            t0, c0 = time.perf_counter(), time.process_time()
            for i in range(base, leaf):
                current = replay_segment(spec, self.dataset, ctx, current, self._stepper)
                if current.leaf_hash() != record.leaf_hashes[i + 1]:
                    raise RecomputeError(f"recomputed leaf {i + 1} of epoch {epoch} does not hash to the "
                                         f"committed leaf (another device or kind of CPU than training?)")
                store.write_leaf(epoch, i + 1, current)  # every leaf passed: asked for later, it costs nothing
            seconds = time.perf_counter() - t0
            self.stats.leaves += leaf - base
            self.stats.segments += leaf - base
            self.stats.steps += (leaf - base) * spec.train.segment_steps
            self.stats.seconds += seconds
            self.stats.cpu_seconds += time.process_time() - c0
            log.info("recomputed leaf %d of epoch %d from leaf %d: %d segments in %.2f s",
                     leaf, epoch, base, leaf - base, seconds)
            return current
