"""Islands: one host made of several processes that train one model together (gloo on CPU).

Inside an island every rank holds the same model and takes its rows of each step's batch
(:func:`trainer.step.rank_rows`); the step all-reduces the gradients, so the ranks stay identical
and the island commits one set of checkpoints, written by rank 0. A validator replays a segment in
one process with gradient accumulation over the same ``M`` micro-batches (the island records ``M``
in every checkpoint), through the same :meth:`trainer.step.Stepper.step`.

Two ways in:

* under ``torchrun`` (any launcher that sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
  ``MASTER_PORT``): call :func:`join_island`, build ``Stepper(spec, group=...)`` and call
  :func:`trainer.inner.run_epoch` on every rank;
* from Python: :func:`spawn_island` starts ``W`` local processes and returns the epoch's record.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from protocol.rules.spec import RunSpec
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.epoch_store import EpochRecord, EpochStore
from trainer.inner import EpochContext, run_epoch
from trainer.outer import GlobalState, load_global
from trainer.step import Stepper


def join_island(threads: int | None = None) -> dist.ProcessGroup:
    """Join the island this process was launched into (``torchrun``'s environment), over gloo.

    Args:
        threads: torch intra-op threads for this rank (see :mod:`trainer.determinism`).
    """
    dist.init_process_group("gloo")
    configure(threads)
    group = dist.group.WORLD
    if group is None:  # init_process_group sets it; None would mean torch.distributed is broken
        raise RuntimeError("torch.distributed has no world group after init_process_group")
    return group


@dataclass(frozen=True)
class _Job:
    # What each spawned rank needs, as plain values: the spec travels as its canonical JSON and
    # θ_e as a safetensors file, so no tensor is pickled between processes.
    spec_json: bytes
    ctx: EpochContext
    global_path: Path
    root: Path
    micro_batches: int
    threads: int
    cache_dir: Path | None
    init_file: Path
    world: int


def _rank_main(rank: int, job: _Job) -> None:
    dist.init_process_group("gloo", init_method=f"file://{job.init_file}", rank=rank, world_size=job.world)
    try:
        configure(job.threads)
        spec = RunSpec.from_canonical(job.spec_json)
        start = load_global(job.global_path, spec)
        dataset = Dataset.load(spec.data, job.cache_dir)
        stepper = Stepper(spec, group=dist.group.WORLD)
        run_epoch(spec, dataset, job.ctx, start.params, job.root, job.micro_batches, stepper)
    finally:
        dist.destroy_process_group()


def spawn_island(world: int, spec: RunSpec, ctx: EpochContext, start: GlobalState, root: Path,
                 micro_batches: int | None = None, threads: int = 1,
                 cache_dir: Path | None = None) -> EpochRecord:
    """Train one epoch as an island of ``world`` local processes.

    Args:
        world: ranks W.
        spec: the run spec (``batch_size`` must be divisible by W).
        ctx: run id, epoch, host, previous epoch seed.
        start: the global state θ_e.
        root: the host's work root; rank 0 writes the epoch in its :class:`~trainer.epoch_store.EpochStore`.
        micro_batches: M, a multiple of W (default W: one micro-batch per rank).
        threads: torch threads per rank.
        cache_dir: dataset cache directory.

    Returns:
        The epoch's commitment, leaf hashes and losses, as rank 0 recorded them.
    """
    with tempfile.TemporaryDirectory(prefix="veriloco-island-") as tmp:
        global_path = Path(tmp) / "global.safetensors"
        start.save(global_path)
        job = _Job(spec.canonical(), ctx, global_path, Path(root), micro_batches or world, threads,
                   cache_dir, Path(tmp) / "rendezvous", world)
        mp.spawn(_rank_main, args=(job,), nprocs=world, join=True)
    return EpochStore(root, ctx.run_id, ctx.host).read_record(ctx.epoch)
