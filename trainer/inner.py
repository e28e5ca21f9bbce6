"""The inner loop of one epoch: H steps from θ_e, a committed checkpoint every c steps, resumable.

A host trains segment after segment with :func:`run_segment`; a validator replays one challenged
segment with :func:`replay_segment`, which is :func:`run_segment` after loading the start leaf.
Both draw their batches with :func:`train_steps`, so there is one way to get from leaf ``i`` to
leaf ``i + 1``.

:func:`run_epoch` keeps the epoch's files in the host's :class:`~trainer.epoch_store.EpochStore`
(leaves, Δ, commitment record, each written atomically), so after a crash it resumes from the
last stored leaf and, because the step is deterministic, ends with the same commitment as an
uninterrupted run (at any thread count: the step is thread-invariant).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.distributed as dist

from protocol.errors import VerilocoError
from protocol.messages import Commitment
from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint
from trainer.compress import zero_residual
from trainer.data import Dataset
from trainer.delta import carried_from, carries_residual, encode_pseudo_gradient, pseudo_gradient
from trainer.epoch_store import EpochStore, Progress
from trainer.island_leaf import ShardedLeafWriter, gather_whole, side_group
from trainer.model import parameter_shapes
from trainer.snapshot import LeafWriter, SnapshotStats
from trainer.step import Stepper, TrainState, epoch_rng_key, rank_rows
from trainer.trap import Traps, perturb

StepCallback = Callable[[int, float], None]
SegmentsDone = Callable[[int], bool]
"""Asked after each segment with the segments done: whether to end the epoch there (partial)."""
"""Called after every inner step with (steps done in the epoch, loss). It may raise
:class:`Interrupted` to stop the epoch at that step boundary."""


class ResidualUnavailable(VerilocoError):
    """A ``topk2`` host whose previous epoch was accepted does not have (or has a damaged copy of)
    the residual that epoch committed to: it cannot compute its next Δ honestly."""


class Interrupted(VerilocoError):
    """Raised by an ``on_step`` callback to stop training at a step boundary (a daemon asked to
    stop). :func:`run_epoch` lets it through after the leaf writer has recorded every leaf already
    finished; a later :func:`run_epoch` of the same epoch resumes from the last stored leaf and
    ends with the same commitment."""


@dataclass(frozen=True)
class EpochContext:
    """Whose epoch this is: everything the data assignment of its inner steps depends on.

    Attributes:
        run_id: the run id (32 bytes).
        epoch: the epoch number ``e``.
        host: the host's address.
        prev_epoch_seed: the seed of epoch ``e − 1`` (``protocol.rules.beacon.genesis_seed`` for ``e = 0``).
    """

    run_id: bytes
    epoch: int
    host: str
    prev_epoch_seed: bytes


@dataclass
class EpochResult:
    """What an epoch of inner training produced (on the island's rank 0).

    Attributes:
        commitment: what the host posts.
        leaf_hashes: the ``S + 1`` checkpoint leaf hashes (leaf 0 is the start state).
        losses: the ``H`` per-step losses.
        payload: the quantized Δ exactly as served (its hash is ``commitment.delta_hash``).
        end: the state after ``H`` steps (after an island's epoch: its parameters only, whole; the
            moments stay sharded).
    """

    commitment: Commitment
    leaf_hashes: list[bytes]
    losses: list[float]
    payload: dict[str, torch.Tensor]
    end: TrainState


def start_checkpoint(spec: RunSpec, params: Mapping[str, torch.Tensor], epoch: int,
                     micro_batches: int = 1) -> Checkpoint:
    """Leaf 0: θ_e with fresh AdamW state at step 0 and the epoch's RNG key.

    A validator recomputes it from the agreed θ_e to check a host's leaf 0.
    """
    state = TrainState.fresh(dict(params), epoch_rng_key(spec.train.seed, epoch))
    return Checkpoint(state, torch.zeros(0, dtype=torch.float32), micro_batches)


def train_steps(stepper: Stepper, dataset: Dataset, spec: RunSpec, ctx: EpochContext,
                steps: range, micro_batches: int, on_step: StepCallback | None = None) -> list[float]:
    """Inner steps ``steps`` on the protocol's batches; each rank takes its rows of each batch.

    Returns:
        The per-step losses.
    """
    rows = rank_rows(spec.train.batch_size, stepper.rank, stepper.world, micro_batches)
    losses = []
    for t in steps:
        x, y = dataset.batch(ctx.run_id, ctx.prev_epoch_seed, ctx.host, t, spec.train.batch_size)
        losses.append(stepper.step(x[rows], y[rows], micro_batches))
        if on_step is not None:
            on_step(t + 1, losses[-1])
    return losses


def run_segment(stepper: Stepper, dataset: Dataset, spec: RunSpec, ctx: EpochContext,
                micro_batches: int, on_step: StepCallback | None = None) -> Checkpoint:
    """The next ``c`` steps from the stepper's current state, as the checkpoint they end in."""
    checkpoint, ready = train_segment(stepper, dataset, spec, ctx, micro_batches, on_step)
    ready()
    return checkpoint


def train_segment(stepper: Stepper, dataset: Dataset, spec: RunSpec, ctx: EpochContext,
                  micro_batches: int, on_step: StepCallback | None = None) -> tuple[Checkpoint, Callable[[], None]]:
    """:func:`run_segment` without waiting for the checkpoint's copy to reach host memory.

    On CUDA the copy overlaps the next segment's steps (:meth:`Stepper.export_async`). A rank of an
    island copies only the chunks it holds (:meth:`Stepper.export_local`; the checkpoint then
    holds chunks, for :class:`trainer.island_leaf.ShardedLeafWriter`).

    Returns:
        The checkpoint and the function to call before reading its tensors.
    """
    first = stepper.step_count
    losses = train_steps(stepper, dataset, spec, ctx, range(first, first + spec.train.segment_steps),
                         micro_batches, on_step)
    if stepper.world > 1:
        return Checkpoint(stepper.export_local(), torch.tensor(losses, dtype=torch.float32), micro_batches), _copied
    state, ready = stepper.export_async()
    return Checkpoint(state, torch.tensor(losses, dtype=torch.float32), micro_batches), ready


def replay_segment(spec: RunSpec, dataset: Dataset, ctx: EpochContext, start: Checkpoint,
                   stepper: Stepper | None = None) -> Checkpoint:
    """Replay one segment from its start leaf, in this process (the validator's entry point).

    An island's segment is replayed with gradient accumulation over the same ``M`` micro-batches
    it recorded (``start.micro_batches``).

    Args:
        spec: the run spec.
        dataset: the run's dataset.
        ctx: the epoch and host whose batches to draw.
        start: leaf ``i`` (validated, e.g. by :func:`trainer.checkpoint.decode_checkpoint`).
        stepper: a single-process stepper to reuse (built from ``spec`` when omitted).

    Returns:
        The replayed leaf ``i + 1``, to compare with the host's.
    """
    stepper = stepper if stepper is not None else Stepper(spec)
    if stepper.world != 1:
        raise ValueError("replay_segment runs in one process; use a stepper without a process group")
    if start.state.step >= spec.train.inner_steps:
        raise ValueError(f"a checkpoint at step {start.state.step} starts no segment (H = {spec.train.inner_steps})")
    stepper.load(start.state)
    return run_segment(stepper, dataset, spec, ctx, start.micro_batches)


def _copied() -> None:
    """What :func:`train_segment` returns to wait on when its copy is already made."""


def _broadcast_resume(state: TrainState, index: int, group: dist.ProcessGroup) -> tuple[TrainState, int]:
    # Rank 0 read the disk; the other ranks receive its state (tensors filled in place) and leaf
    # index, so an island spread over machines without a shared file system resumes in step.
    # Over the island's gloo side group: the tensors are on the CPU whatever the device.
    tensors = state.tensors()
    for name in sorted(tensors):
        dist.broadcast(tensors[name], src=dist.get_global_rank(group, 0), group=group)
    where = torch.tensor(index, dtype=torch.int64)
    dist.broadcast(where, src=dist.get_global_rank(group, 0), group=group)
    return TrainState.from_tensors(tensors), int(where)


def run_epoch(spec: RunSpec, dataset: Dataset, ctx: EpochContext, start_params: Mapping[str, torch.Tensor],
              root: Path, micro_batches: int = 1, stepper: Stepper | None = None,
              on_step: StepCallback | None = None, full_leaf_every: int = 1,
              stats: SnapshotStats | None = None, carry_residual: bool = False,
              stop: SegmentsDone | None = None, traps: Traps | None = None) -> EpochResult | None:
    """Train an epoch (or finish an interrupted one) and produce the host's commitment.

    Each segment's leaf is copied on this thread and hashed and written behind it
    (:class:`~trainer.snapshot.LeafWriter`); only the leaves :meth:`EpochStore.stored` names are
    written in full, the others are recomputed if a validator asks for them
    (:class:`trainer.recompute.LeafRecomputer`).

    Args:
        spec: the run spec.
        dataset: the run's dataset (checked against ``spec.data.dataset_hash``).
        ctx: run id, epoch, host address, previous epoch seed.
        start_params: θ_e, the agreed global parameters.
        root: the host's work root (its :class:`~trainer.epoch_store.EpochStore`).
        micro_batches: ``M``; an island of ``W`` ranks needs a multiple of ``W``.
        stepper: the stepper to train with (one rank of an island passes one with its process
            group); a single-process one is built when omitted.
        on_step: progress callback.
        full_leaf_every: ``K``: store leaf 0, every ``K``-th leaf and the last in full (1: all).
        stats: filled with what the background writer did (hash and write seconds, bytes).
        carry_residual: ``topk2`` runs: the host was accepted in the epoch this one carries from
            (``trainer.delta.carried_from``: the one before, two before in a pipelined run), so
            this epoch starts from the residual that epoch committed to (in this store); otherwise
            from zeros. Leaf ``S`` carries it and the Δ is computed with it.
        stop: asked after each segment with the segments done; True ends the epoch there, a
            partial epoch of ``s < S`` segments (its last leaf is stored in full). Not with
            ``topk2``, whose residual rides on leaf ``S``. Every rank of an island passes one, and
            they must answer alike (:func:`trainer.island.agreed_stop` broadcasts rank 0's answer).
        traps: the segments whose end leaf is perturbed (:func:`trainer.trap.perturb`) before
            training goes on from it; each such leaf is stored in full (a recomputation would
            miss the perturbation). Every rank of an island passes the same traps: each gathers
            the segment's start and end state whole, perturbs it the same way and keeps its chunks.

    An island (a stepper with a process group) writes its leaves from the sharded state
    (:class:`trainer.island_leaf.ShardedLeafWriter`): the same files and hashes as one process.
    Only rank 0 reads a ``topk2`` residual and computes the Δ (from θ_H gathered whole on it).

    Returns:
        The :class:`EpochResult` on rank 0; ``None`` on the other ranks of an island.

    Raises:
        Interrupted: ``on_step`` asked to stop; the leaves finished before it are recorded (the
            writer is joined first), and a later call resumes from the last stored one.
        ResidualUnavailable: ``carry_residual`` but the previous epoch's residual is missing or damaged.
    """
    # quantization.schedule: the epoch's scheme, and whether it goes on from an earlier residual.
    carry_residual = carry_residual and carried_from(spec, ctx.epoch) is not None
    run_spec, spec = spec, spec.for_epoch(ctx.epoch)
    stepper = stepper if stepper is not None else Stepper(spec)
    trapped = set(traps.segments) if traps is not None else set()
    if carries_residual(spec.quantization) and stop is not None:
        raise ValueError("a topk2 epoch is never partial: its residual rides on leaf S")
    start = start_checkpoint(spec, start_params, ctx.epoch, micro_batches)
    store = EpochStore(root, ctx.run_id, ctx.host)
    # Rank 0 alone writes leaf S and computes the Δ, so it alone needs the residual.
    residual = carried_residual(run_spec, store, ctx.epoch, carry_residual) if stepper.rank == 0 else None
    if stepper.rank == 0:
        progress = store.resume(spec, ctx.epoch, start, ctx.prev_epoch_seed, full_leaf_every)
    else:  # the other ranks of an island receive rank 0's resume point below; they hash nothing
        progress = Progress(start, 0, [], [], full_leaf_every)
    state, index = progress.last.state, progress.index
    side = None
    writer: LeafWriter
    if stepper.world > 1:
        assert stepper.group is not None
        side = side_group(tuple(dist.get_process_group_ranks(stepper.group)))
        state, index = _broadcast_resume(state, index, side)
        writer = ShardedLeafWriter(store, spec, ctx.epoch, progress.full_leaf_every, side,
                                   keep={g + 1 for g in trapped})
    else:
        writer = LeafWriter(store, spec, ctx.epoch, progress.full_leaf_every, keep={g + 1 for g in trapped})
    stepper.load(state)
    losses = list(progress.losses)
    last = progress.last
    try:
        while stepper.step_count < spec.train.inner_steps:
            trap = index in trapped  # segment `index` ends in leaf `index + 1`
            before = stepper.export() if trap else None  # whole (an island's ranks gather it alike)
            last, ready = train_segment(stepper, dataset, spec, ctx, micro_batches, on_step)
            index += 1
            if before is not None and traps is not None:  # perturb, and train on from the perturbed leaf
                ready()
                after = stepper.export() if stepper.world > 1 else last.state
                perturbed = perturb(spec, before, after, traps.seed + index, traps.floor)
                stepper.load(perturbed)  # in an island each rank keeps its chunks of it
                last = replace(last, state=stepper.export_local() if stepper.world > 1 else perturbed)
            if index == spec.train.segments and residual is not None:
                last = replace(last, residual=residual)  # leaf S carries what its Δ starts from
            # Asked before the leaf is queued: a partial epoch's last leaf is stored in full
            # (challenged every epoch), and in an island only the writer can write it.
            ending = stop is not None and stepper.step_count < spec.train.inner_steps and stop(index)
            # The writer waits for the copy (on CUDA still in flight) before it hashes the leaf;
            # finish() below has waited for every one, the last included, before `last` is read.
            writer.submit(index, last, ready, keep=ending)
            losses.extend(last.losses.tolist())
            if ending:
                break
        hashes = progress.hashes + writer.finish()
    finally:
        writer.close()
        if stats is not None:
            stats.__dict__.update(writer.stats.__dict__)
    end = last.state
    if side is not None and last is not progress.last:  # θ_H whole on rank 0, a parameter at a time, for Δ
        shapes = {n: tuple(t.shape) for n, t in start.state.params.items()}
        whole = {n: gather_whole(end.params[n], shapes[n], side) for n in sorted(end.params)}
        end = TrainState({n: t for n, t in whole.items() if t is not None}, {}, {}, end.step, end.rng_key)
    if stepper.rank != 0:
        return None
    # A resumed epoch's leaf S was read back from disk, its residual with it.
    payload, left = epoch_payload(spec, start.state, end, last.residual)
    record = store.commit(spec, ctx.epoch, hashes, losses, payload, left)
    return EpochResult(record.commitment, hashes, losses, payload, end)


def carried_residual(spec: RunSpec, store: EpochStore, epoch: int, carry: bool) -> dict[str, torch.Tensor] | None:
    """The residual a ``topk2`` epoch starts from: what the Δ of the epoch it carries from left
    (``trainer.delta.carried_from``: e − 1, or e − 2 in a pipelined run) when ``carry`` (the host
    was accepted in that epoch), zeros otherwise; ``None`` for a scheme without one.

    ``spec`` is the run's (its ``quantization.schedule`` unresolved): the earlier Δ, whose ``ef/next``
    the residual must match, is read in that epoch's scheme (a schedule may change ``topk2``'s
    block size, and with it the Δ's layout).

    Raises:
        ResidualUnavailable: ``carry`` but that epoch's residual is missing or damaged.
    """
    if not carries_residual(spec.quantization.at(epoch)):
        return None
    source = carried_from(spec, epoch)
    if not carry or source is None:
        return zero_residual(parameter_shapes(spec))
    try:
        return store.read_residual(spec.for_epoch(source), source)
    except (OSError, ValueError) as exc:
        raise ResidualUnavailable(f"epoch {source} was accepted but its residual cannot be read: {exc}") from None


def epoch_payload(spec: RunSpec, start: TrainState, end: TrainState, residual: dict[str, torch.Tensor] | None
                  ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor] | None]:
    """The Δ payload an epoch from ``start`` to ``end`` commits to, and the residual it leaves:
    ``encode_pseudo_gradient(θ_0 − θ_S, residual)`` (a residual only for ``topk2``)."""
    return encode_pseudo_gradient(pseudo_gradient(start.params, end.params), spec.quantization, residual)


def epoch_delta(spec: RunSpec, start: TrainState, end: TrainState) -> dict[str, torch.Tensor]:
    """The quantized Δ an epoch from ``start`` to ``end`` commits to, from a zero residual."""
    return epoch_payload(spec, start, end, None)[0]
