"""An island's leaves, hashed and written from the sharded state without assembling it on one rank.

Each rank of an island holds dim-0 chunks of every parameter and AdamW moment
(:mod:`trainer.sharding`). At the end of a segment every rank copies its chunks
(:meth:`trainer.step.Stepper.export_local`) and hands them to its :class:`ShardedLeafWriter`; the
writers of all ranks then gather the tensors to rank 0 **one at a time**, over a gloo group of their
own (so they run beside the training collectives, on the writer threads), and rank 0 feeds each
whole tensor to the leaf digest (:class:`protocol.tensors.digest.DigestStream`, name order) and,
for a stored leaf, into its place in the safetensors file, before it gathers the next. Rank 0 never
holds more than one whole tensor of the leaf (the largest: ``gpt124m``'s embedding, 154 MB, against
a 1.5 GB leaf), and the file and hash are exactly those of the same leaf written by one process:
the leaf format does not depend on the island's layout, so a validator of any layout checks it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from datetime import timedelta
from functools import cache

import torch
import torch.distributed as dist

from protocol.rules.hashing import Tag
from protocol.rules.spec import RunSpec
from protocol.tensors.digest import DigestStream, tensor_bytes
from trainer.checkpoint import FORMAT, checkpoint_layout
from trainer.epoch_store import EpochStore
from trainer.snapshot import LeafWriter, _Job
from trainer.tensorfile import Layout, atomic_file, tensors_header

_SIDE_TIMEOUT = timedelta(days=7)
_SHARDED = ("param/", "adam.exp_avg/", "adam.exp_avg_sq/")  # the names whose tensors ranks hold in chunks


@cache
def side_group(ranks: tuple[int, ...]) -> dist.ProcessGroup:
    """A gloo group over ``ranks`` for what an island moves besides training: the leaf writers'
    gathers, the resume broadcast and rank 0's orders (made once per island: every rank of the
    world must call this at the same point the first time). Its timeout is long: a rank waits
    there for rank 0's next order through a whole settlement."""
    group = dist.new_group(list(ranks), backend="gloo", timeout=_SIDE_TIMEOUT)
    if group is None:  # only for a rank outside `ranks`, which never asks
        raise RuntimeError(f"this rank is not in the island {ranks}")
    return group


def gather_whole(chunk: torch.Tensor, shape: tuple[int, ...], group: dist.ProcessGroup) -> torch.Tensor | None:
    """The whole tensor of ``shape`` on the group's first rank from every rank's dim-0 chunk
    (:func:`trainer.sharding.chunk_of` layout); ``None`` on the others. A collective of ``group``.

    Chunks are padded to ``⌈shape[0] / W⌉`` rows for the gather (gloo gathers equal sizes).
    """
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    rows = -(-shape[0] // world) if shape else 0
    padded = chunk.new_zeros((rows, *shape[1:]))
    padded[:chunk.shape[0]] = chunk
    pieces = [torch.empty_like(padded) for _ in range(world)] if rank == 0 else None
    dist.gather(padded, pieces, dst=dist.get_global_rank(group, 0), group=group)
    if pieces is None:
        return None
    return torch.cat(pieces)[:shape[0]]


class ShardedLeafWriter(LeafWriter):
    """:class:`~trainer.snapshot.LeafWriter` for one rank of an island: every rank's writer takes part
    in gathering each sharded tensor; rank 0 hashes, stores and records the leaf.

    Checkpoints submitted hold this rank's chunks (:meth:`trainer.step.Stepper.export_local`).
    :meth:`finish` returns the leaf hashes on rank 0 and an empty list on the others.

    Args:
        store: the host's epoch store (written by rank 0 only).
        spec: the run spec.
        epoch: the epoch.
        full_leaf_every: ``K``.
        group: the island's writer group (:func:`side_group`).
        keep: leaves written in full whatever ``K`` says (a trap's end leaf).
    """

    def __init__(self, store: EpochStore, spec: RunSpec, epoch: int, full_leaf_every: int,
                 group: dist.ProcessGroup, keep: Collection[int] = ()) -> None:
        self.group = group
        self.first = dist.get_rank(group) == 0
        super().__init__(store, spec, epoch, full_leaf_every, hash_threads=1, keep=keep)

    def finish(self) -> list[bytes]:
        hashes = super().finish()
        return hashes if self.first else []

    def _process(self, job: _Job) -> None:
        assert job.checkpoint is not None
        cpu0 = time.thread_time()
        t0 = time.perf_counter()
        layout = checkpoint_layout(self.spec, job.index)
        mine = job.checkpoint.tensors()
        digest = DigestStream(Tag.CHECKPOINT, len(layout))
        if self.first and job.store:
            path = self.store.leaf_path(self.epoch, job.index)
            path.parent.mkdir(parents=True, exist_ok=True)
            meta = {n: torch.empty(shape, dtype=dtype, device="meta") for n, (dtype, shape) in layout.items()}
            head, order = tensors_header(meta, FORMAT)
            offsets, at = {}, len(head)
            for name in order:
                offsets[name] = at
                at += meta[name].numel() * meta[name].element_size()
            with atomic_file(path, drop_cache=not job.read_soon) as f:
                f.write(head)
                self._stream(layout, mine, digest, lambda name, data: (f.seek(offsets[name]), f.write(data)))
            self.stats.stored += 1
            self.stats.bytes_written += path.stat().st_size
        else:
            self._stream(layout, mine, digest, None)
        self.stats.leaves += 1
        self.stats.write_seconds += time.perf_counter() - t0
        self.stats.cpu_seconds += time.thread_time() - cpu0
        if self.first:
            job.digest = digest.digest()
            self.store.append_progress(self.epoch, job.index, job.digest, job.checkpoint.losses.tolist())

    def _stream(self, layout: Layout, mine: dict[str, torch.Tensor],
                digest: DigestStream, write: Callable[[str, memoryview], object] | None) -> None:
        # Name order (the digest's): gather one tensor, hash it, write it at its offset, drop it.
        # The unsharded tensors (step, key, losses, a topk2 leaf S's residual) are rank 0's own.
        for name in sorted(layout):
            dtype, shape = layout[name]
            t: torch.Tensor | None = None
            if name.startswith(_SHARDED):
                t = gather_whole(mine[name], shape, self.group)
            if not self.first:
                continue
            if t is None:
                t = mine.get(name)
                if t is None:
                    raise ValueError(f"leaf {name!r} is missing on rank 0 of the island")
            assert t is not None and t.dtype == dtype and tuple(t.shape) == shape, name
            data = tensor_bytes(t)
            h = time.perf_counter()
            digest.begin(name, dtype, shape, data.nbytes)
            digest.update(data)
            self.stats.hash_seconds += time.perf_counter() - h
            self.stats.bytes_hashed += data.nbytes
            if write is not None:
                write(name, data)
