"""The inner loop of one epoch: H steps from θ_e, a committed checkpoint every c steps, resumable.

A host trains segment after segment with :func:`run_segment`; a validator replays one challenged
segment with :func:`replay_segment`, which is :func:`run_segment` after loading the start leaf.
Both draw their batches with :func:`train_steps`, so there is one way to get from leaf ``i`` to
leaf ``i + 1``.

Work directory of an epoch (``epoch_dir``): ``<root>/<run id hex>/epoch-<e:06d>/<host>/`` with
``leaf-0000.safetensors … leaf-<S>.safetensors``, ``delta.safetensors`` (the quantized Δ as
served) and ``commitment.json``. Every file is written atomically (temporary file, fsync, rename),
so after a crash each file is either absent or complete; :func:`run_epoch` resumes from the
last complete leaf and, because the step is deterministic, ends with the same commitment as an
uninterrupted run on the same thread count.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from protocol.rules.merkle import merkle_root
from protocol.messages import Commitment
from protocol.rules.losses import loss_digest, loss_micro
from protocol.rules.spec import RunSpec

from trainer.checkpoint import Checkpoint, CheckpointError, load_checkpoint
from trainer.data import Dataset
from trainer.delta import delta_hash, encode_delta, pseudo_gradient, quantize
from trainer.step import Stepper, TrainState, epoch_rng_key, rank_rows
from trainer.tensorfile import write_atomic

StepCallback = Callable[[int, float], None]
"""Called after every inner step with (steps done in the epoch, loss)."""


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
        end: the state after ``H`` steps.
        directory: the epoch's work directory.
    """

    commitment: Commitment
    leaf_hashes: list[bytes]
    losses: list[float]
    payload: dict[str, torch.Tensor]
    end: TrainState
    directory: Path


@dataclass(frozen=True)
class EpochRecord:
    """What ``commitment.json`` of a finished epoch holds (for an artifact server or a parent process)."""

    commitment: Commitment
    leaf_hashes: list[bytes]
    losses_micro: list[int]


def read_epoch_record(directory: Path) -> EpochRecord:
    """Read ``commitment.json`` from an epoch's work directory."""
    record = json.loads((Path(directory) / "commitment.json").read_text())
    return EpochRecord(Commitment.model_validate(record["commitment"]),
                       [bytes.fromhex(h) for h in record["leaf_hashes"]], list(record["losses_micro"]))


def epoch_dir(root: Path, ctx: EpochContext) -> Path:
    """``<root>/<run id hex>/epoch-<e:06d>/<host>``."""
    return Path(root) / ctx.run_id.hex() / f"epoch-{ctx.epoch:06d}" / ctx.host


def leaf_path(directory: Path, leaf: int) -> Path:
    """The file of checkpoint leaf ``leaf``."""
    return Path(directory) / f"leaf-{leaf:04d}.safetensors"


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
    rows = rank_rows(spec.train.batch_size, stepper.rank, stepper.world)
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
    first = stepper.step_count
    losses = train_steps(stepper, dataset, spec, ctx, range(first, first + spec.train.segment_steps),
                         micro_batches, on_step)
    return Checkpoint(stepper.export(), torch.tensor(losses, dtype=torch.float32), micro_batches)


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


def _resume(directory: Path, spec: RunSpec, start: Checkpoint) -> list[Checkpoint]:
    """The contiguous leaves already on disk, leaf 0 first (just ``[start]`` on a fresh start)."""
    for tmp in directory.glob(".*.tmp"):
        tmp.unlink()  # left by a crash between write and rename; never a committed file
    leaves = [start]
    path = leaf_path(directory, 0)
    if path.exists():
        if load_checkpoint(path, spec, 0).leaf_hash() != start.leaf_hash():
            raise CheckpointError(f"{path} is not the start state of this epoch "
                                  f"(another θ_e or island layout used this directory)")
    else:
        start.save(path)
    for leaf in range(1, spec.train.segments + 1):
        path = leaf_path(directory, leaf)
        if not path.exists():
            break
        ckpt = load_checkpoint(path, spec, leaf)
        if ckpt.micro_batches != start.micro_batches or ckpt.state.rng_key != start.state.rng_key:
            raise CheckpointError(f"{path} belongs to another island layout or epoch")
        leaves.append(ckpt)
    return leaves


def _broadcast_state(state: TrainState, group: dist.ProcessGroup | None) -> TrainState:
    # Rank 0 read the disk; the other ranks receive its state (tensors filled in place), so an
    # island spread over machines without a shared file system resumes in step.
    tensors = state.tensors()
    for name in sorted(tensors):
        dist.broadcast(tensors[name], src=0, group=group)
    return TrainState.from_tensors(tensors)


def run_epoch(spec: RunSpec, dataset: Dataset, ctx: EpochContext, start_params: Mapping[str, torch.Tensor],
              root: Path, micro_batches: int = 1, stepper: Stepper | None = None,
              on_step: StepCallback | None = None) -> EpochResult | None:
    """Train an epoch (or finish an interrupted one) and produce the host's commitment.

    Args:
        spec: the run spec.
        dataset: the run's dataset (checked against ``spec.data.dataset_hash``).
        ctx: run id, epoch, host address, previous epoch seed.
        start_params: θ_e, the agreed global parameters.
        root: work-directory root (see :func:`epoch_dir`).
        micro_batches: ``M``; an island of ``W`` ranks needs a multiple of ``W``.
        stepper: the stepper to train with (one rank of an island passes one with its process
            group); a single-process one is built when omitted.
        on_step: progress callback.

    Returns:
        The :class:`EpochResult` on rank 0; ``None`` on the other ranks of an island.
    """
    stepper = stepper if stepper is not None else Stepper(spec)
    start = start_checkpoint(spec, start_params, ctx.epoch, micro_batches)
    directory = epoch_dir(root, ctx)
    leaves = [start]
    if stepper.rank == 0:
        directory.mkdir(parents=True, exist_ok=True)
        leaves = _resume(directory, spec, start)
    state = leaves[-1].state
    if stepper.world > 1:
        state = _broadcast_state(state, stepper.group)
    stepper.load(state)
    hashes = [leaf.leaf_hash() for leaf in leaves]
    losses = [x for leaf in leaves[1:] for x in leaf.losses.tolist()]
    last = leaves[-1]
    while stepper.step_count < spec.train.inner_steps:
        last = run_segment(stepper, dataset, spec, ctx, micro_batches, on_step)
        if stepper.rank == 0:
            last.save(leaf_path(directory, len(hashes)))
            hashes.append(last.leaf_hash())
            losses.extend(last.losses.tolist())
    if stepper.rank != 0:
        return None
    return _commit(spec, ctx, start, last, hashes, losses, directory)


def _commit(spec: RunSpec, ctx: EpochContext, start: Checkpoint, end: Checkpoint, hashes: list[bytes],
            losses: list[float], directory: Path) -> EpochResult:
    payload = quantize(pseudo_gradient(start.state.params, end.state.params), spec.quantization)
    write_atomic(directory / "delta.safetensors", encode_delta(payload, spec.quantization))
    micro = [loss_micro(x) for x in losses]
    last_segment = losses[-spec.train.segment_steps:]
    commitment = Commitment(
        epoch=ctx.epoch,
        checkpoint_root=merkle_root(hashes).hex(),
        delta_hash=delta_hash(payload).hex(),
        loss_digest=loss_digest(micro),
        segments=spec.train.segments,
        train_loss_micro=loss_micro(sum(last_segment) / len(last_segment)),
    )
    record = {"commitment": commitment.model_dump(mode="json"), "leaf_hashes": [h.hex() for h in hashes],
              "losses_micro": micro}
    write_atomic(directory / "commitment.json", json.dumps(record, sort_keys=True, indent=1).encode())
    return EpochResult(commitment, hashes, losses, payload, end.state, directory)
