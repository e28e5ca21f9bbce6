"""Islands: one host made of several processes that train one model together, on PyTorch's engine.

An island is a ``torchrun`` group (``veriloco host run --nproc-per-node N`` launches one; gloo on
CPU, NCCL on CUDA, one GPU per rank). Its model is sharded by FSDP2 (:mod:`trainer.sharding`):
each rank holds dim-0 chunks of the parameters and AdamW moments and takes ``A`` micro-batches of
each step's batch (:func:`trainer.step.rank_rows`), so ``M = A · W`` (``A = 1`` by default; more
needs a power-of-two island). The gradients are reduce-scattered in the protocol's fixed order,
and the leaves are hashed and written from the chunks (:mod:`trainer.island_leaf`), so the island
commits exactly the leaves, hashes and Δ that one process training the same ``M`` micro-batches
would: a validator replays a segment in one process with gradient accumulation over the ``M``
recorded in the leaf (measured bitwise at W = 1, 2, 4: ``tests/trainer/test_island.py``,
``bench/island.py``; M = 2·W: ``tests/trainer/test_island_duties.py``).

Rank 0 does every duty of a one-process host: it sets the traps its node drew (each rank learns
the segments and seed in the order, never the host's secret), ends a partial epoch after the same
segment on every rank (:func:`agreed_stop`), and reads and writes a ``topk2`` residual.

Three ways in:

* a host daemon under ``torchrun``: rank 0 runs the node (chain, artifact server) with an
  :class:`IslandBehaviour`, which sends each epoch's order (:class:`IslandOrder`) to the other
  ranks before they all train it; the other ranks run :func:`follow_island` until rank 0 says stop;
* any code under ``torchrun`` (a launcher that sets ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
  ``MASTER_PORT``, ``LOCAL_RANK``): :func:`join_island`, ``Stepper(spec, group=..., device=...)``,
  :func:`trainer.inner.run_epoch` on every rank;
* from Python: :func:`spawn_island` starts ``W`` local CPU processes and returns the epoch's record.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from pydantic import Field, ValidationError

from protocol.rules.spec import RunSpec
from protocol.types import Boundary
from trainer.behaviour import HostBehaviour, HostEpoch
from trainer.data import Dataset
from trainer.delta import carried_from, carries_residual
from trainer.determinism import configure
from trainer.epoch_store import EpochRecord, EpochStore
from trainer.inner import (
    EpochContext,
    EpochResult,
    Interrupted,
    SegmentsDone,
    StepCallback,
    carried_residual,
    run_epoch,
)
from trainer.island_leaf import side_group
from trainer.outer import GlobalState, load_global
from trainer.snapshot import SnapshotStats
from trainer.step import Stepper, rank_rows, resolve_device
from trainer.trap import Traps

log = logging.getLogger(__name__)

_ORDER_BYTES = 4096  # an order is a few hundred bytes of JSON

# The tensors of this process's latest small broadcasts (orders, per-step and per-segment flags),
# kept referenced. A gloo worker thread drops its reference to a collective's tensors after the
# caller's wait has returned; when that is the last reference to the tensor's Python object, the
# drop takes the GIL, and a process already exiting ends that thread inside a C++ destructor: the
# process aborts ("terminate called without an active exception"). A follower leaving on rank 0's
# stop order did so about one run in twenty. Held here, the Python objects outlive the workers'
# references (16 covers two worker threads on each of an island's groups, a few kB in all).
_HELD: deque[torch.Tensor] = deque(maxlen=16)


def _broadcast_held(tensor: torch.Tensor, group: dist.ProcessGroup) -> None:
    """Broadcast ``tensor`` in place from the group's first rank, and keep it referenced (``_HELD``)."""
    dist.broadcast(tensor, src=dist.get_global_rank(group, 0), group=group)
    _HELD.append(tensor)


def island_device(device: str) -> torch.device:
    """The device this rank computes on: on CUDA the local rank's GPU (``LOCAL_RANK`` from the
    launcher; ``cuda:N`` given explicitly is refused in an island, each rank takes its own).

    Raises:
        ValueError: an explicit GPU index in an island, or a device this machine lacks.
    """
    resolved = resolve_device(device)
    if resolved.type != "cuda":
        return resolved
    if resolved.index is not None:
        raise ValueError(f"device {device!r}: in an island each rank takes the GPU of its local rank; say 'cuda'")
    return resolve_device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}")


def join_island(device: str = "cpu", threads: int | None = None) -> tuple[dist.ProcessGroup, torch.device]:
    """Join the island this process was launched into (``torchrun``'s environment): NCCL when the
    island computes on CUDA, gloo on the CPU.

    Args:
        device: ``cpu`` or ``cuda`` (each rank then takes the GPU of its ``LOCAL_RANK``).
        threads: torch intra-op threads for this rank (see :mod:`trainer.determinism`).

    Returns:
        The island's process group and this rank's device.
    """
    where = island_device(device)
    configure(threads, str(where))  # before CUDA starts: cuBLAS reads its workspace setting once
    if where.type == "cuda":
        torch.cuda.set_device(where)
        dist.init_process_group("nccl", device_id=where)
    else:
        dist.init_process_group("gloo")
    group = dist.group.WORLD
    if group is None:  # init_process_group sets it; None would mean torch.distributed is broken
        raise RuntimeError("torch.distributed has no world group after init_process_group")
    return group, where


@dataclass(frozen=True)
class _Job:
    # What each spawned rank needs, as plain values: the spec travels as its canonical JSON and
    # θ_e as a safetensors file, so no tensor is pickled between processes.
    spec_json: bytes
    ctx: EpochContext
    global_path: Path
    root: Path
    threads: int
    cache_dir: Path | None
    init_file: Path
    world: int
    full_leaf_every: int


def _rank_main(rank: int, job: _Job) -> None:
    dist.init_process_group("gloo", init_method=f"file://{job.init_file}", rank=rank, world_size=job.world)
    try:
        configure(job.threads)
        spec = RunSpec.from_canonical(job.spec_json)
        start = load_global(job.global_path, spec)
        dataset = Dataset.load(spec.data, job.cache_dir)
        stepper = Stepper(spec, group=dist.group.WORLD)
        run_epoch(spec, dataset, job.ctx, start.params, job.root, job.world, stepper,
                  full_leaf_every=job.full_leaf_every)
        # Every rank waits (the GIL released) until rank 0 has committed: gloo's workers free the
        # last gathers' tensors meanwhile, not while this process exits (_HELD says why).
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawn_island(world: int, spec: RunSpec, ctx: EpochContext, start: GlobalState, root: Path,
                 threads: int = 1, cache_dir: Path | None = None, full_leaf_every: int = 1) -> EpochRecord:
    """Train one epoch as an island of ``world`` local CPU processes (gloo).

    Args:
        world: ranks W (``M = W`` micro-batches a step).
        spec: the run spec (``batch_size`` must be divisible by W).
        ctx: run id, epoch, host, previous epoch seed.
        start: the global state θ_e.
        root: the host's work root; rank 0 writes the epoch in its :class:`~trainer.epoch_store.EpochStore`.
        threads: torch threads per rank.
        cache_dir: dataset cache directory.
        full_leaf_every: ``K`` (1: every leaf stored).

    Returns:
        The epoch's commitment, leaf hashes and losses, as rank 0 recorded them.
    """
    with tempfile.TemporaryDirectory(prefix="veriloco-island-") as tmp:
        global_path = Path(tmp) / "global.safetensors"
        start.save(global_path)
        job = _Job(spec.canonical(), ctx, global_path, Path(root), threads, cache_dir,
                   Path(tmp) / "rendezvous", world, full_leaf_every)
        mp.spawn(_rank_main, args=(job,), nprocs=world, join=True)
    return EpochStore(root, ctx.run_id, ctx.host).read_record(ctx.epoch)


class IslandOrder(Boundary):
    """What rank 0 of a host's island tells the other ranks to do next.

    Attributes:
        kind: ``epoch`` (train the epoch below together) or ``stop`` (leave).
        run_id: the run id, hex (an epoch order).
        epoch: the epoch.
        host: the host's address.
        prev_epoch_seed: the seed of epoch ``e − 1``, hex.
        full_leaf_every: ``K`` of the host.
        micro_batches: ``M`` of each step (``A`` per rank: ``M = A · W``).
        partial: rank 0 may end the epoch early (a commit deadline): every rank then asks it after
            each segment (:func:`agreed_stop`).
        trap_segments: the segments the host traps (:class:`trainer.trap.Traps`, drawn by rank 0
            from the host's secret; the other ranks learn them here, never the secret).
        trap_seed: the perturbations' seed.
        trap_floor: the least distance denominator (:attr:`trainer.trap.Traps.floor`).
    """

    kind: Literal["epoch", "stop"]
    run_id: str = Field(default="", pattern=r"^([0-9a-f]{64})?$")
    epoch: int = Field(default=0, ge=0)
    host: str = Field(default="", max_length=128)
    prev_epoch_seed: str = Field(default="", pattern=r"^([0-9a-f]{64})?$")
    full_leaf_every: int = Field(default=1, ge=1)
    micro_batches: int = Field(default=1, ge=1, le=1 << 16)
    partial: bool = False
    trap_segments: list[int] = Field(default_factory=list, max_length=64)
    trap_seed: int = Field(default=0, ge=0, lt=2**63)
    trap_floor: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)

    def context(self) -> EpochContext:
        """The epoch's context."""
        return EpochContext(bytes.fromhex(self.run_id), self.epoch, self.host, bytes.fromhex(self.prev_epoch_seed))

    def traps(self) -> Traps:
        """The epoch's traps."""
        return Traps(tuple(self.trap_segments), self.trap_seed, self.trap_floor)


def broadcast_bytes(data: bytes | None, group: dist.ProcessGroup, cap: int) -> bytes:
    """Send ``data`` from the group's first rank (which passes it) to the others (which pass
    ``None``); every rank returns the bytes. At most ``cap`` bytes travel (a fixed-size buffer).

    Raises:
        ValueError: more than ``cap`` bytes to send, or a received length above ``cap``.
    """
    buf = torch.zeros(cap + 8, dtype=torch.uint8)
    if data is not None:
        if len(data) > cap:
            raise ValueError(f"{len(data)} bytes exceed the {cap} an island message may carry")
        buf[:8] = torch.tensor(list(len(data).to_bytes(8, "little")), dtype=torch.uint8)
        if data:
            buf[8:8 + len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    _broadcast_held(buf, group)
    raw = buf.numpy().tobytes()
    n = int.from_bytes(raw[:8], "little")
    if n > cap:
        raise ValueError(f"an island message claims {n} bytes (at most {cap})")
    return raw[8:8 + n]


def send_order(order: IslandOrder, group: dist.ProcessGroup) -> None:
    """Broadcast ``order`` from the group's first rank (the others call :func:`receive_order`)."""
    broadcast_bytes(order.model_dump_json().encode(), group, _ORDER_BYTES)


def receive_order(group: dist.ProcessGroup) -> IslandOrder:
    """The next order from the group's first rank (blocks until it is sent).

    Raises:
        ValueError: a malformed order (too long, or JSON that is not an :class:`IslandOrder`).
    """
    raw = broadcast_bytes(None, group, _ORDER_BYTES)
    try:
        return IslandOrder.model_validate_json(raw)
    except ValidationError as exc:
        raise ValueError(f"a malformed island order: {exc}") from None


def _agreed(on_step: StepCallback | None, rank: int, group: dist.ProcessGroup,
            device: torch.device) -> StepCallback:
    # Every rank stops at the same step boundary: rank 0's callback decides (a daemon asked to
    # stop raises Interrupted there) and broadcasts its decision, one byte a step.
    def agreed(done: int, loss: float) -> None:
        reason = ""
        if rank == 0 and on_step is not None:
            try:
                on_step(done, loss)
            except Interrupted as exc:
                reason = str(exc)
        flag = torch.tensor([1 if reason else 0], dtype=torch.uint8, device=device)
        _broadcast_held(flag, group)
        if int(flag.item()):
            raise Interrupted(reason or f"rank 0 of the island stopped at step {done}")

    return agreed


def agreed_stop(stop: SegmentsDone | None, rank: int, group: dist.ProcessGroup,
                device: torch.device) -> SegmentsDone:
    """A partial epoch's ``stop`` (:func:`trainer.inner.run_epoch`) that every rank of the island
    answers alike: rank 0 asks ``stop`` (the host's commit deadline) and broadcasts its answer, one
    byte a segment, over the training group (the side group is the leaf writer's meanwhile). A
    ``stop`` that raises trains on (the island must not split on it), as a deadline that cannot be
    read does on one process."""
    def agreed(done: int) -> bool:
        end = False
        if rank == 0 and stop is not None:
            try:
                end = bool(stop(done))
            except Exception as exc:  # noqa: BLE001 - the other ranks wait for an answer: give one
                log.warning("island: the partial-epoch check after segment %d failed (%s); training on", done, exc)
        flag = torch.tensor([1 if end else 0], dtype=torch.uint8, device=device)
        _broadcast_held(flag, group)
        return bool(flag.item())

    return agreed


class IslandBehaviour(HostBehaviour):
    """The honest host whose epochs an island trains (on rank 0 of a ``torchrun`` group).

    It builds the sharded stepper once; each :meth:`train_epoch` first sends the epoch's order to
    the other ranks (:func:`follow_island`), then trains it with them.

    Args:
        spec: the run spec.
        group: the island (from :func:`join_island`).
        device: this rank's device.
        accumulate: ``A``, micro-batches each rank accumulates a step (``M = A · W``; ``A > 1``
            needs a power-of-two island, :func:`trainer.step.rank_rows`).
    """

    name = "honest"

    def __init__(self, spec: RunSpec, group: dist.ProcessGroup, device: torch.device, accumulate: int = 1) -> None:
        self.group, self.device = group, device
        self.world = dist.get_world_size(group)
        self.micro_batches = accumulate * self.world
        rank_rows(spec.train.batch_size, 0, self.world, self.micro_batches)  # refused here, before any order
        self.backend = str(dist.get_backend(group))
        self.orders = side_group(tuple(dist.get_process_group_ranks(group)))
        self.stepper = Stepper(spec, group=group, device=device)

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        setup = ctx if isinstance(ctx, HostEpoch) else HostEpoch(ctx.run_id, ctx.epoch, ctx.host, ctx.prev_epoch_seed)
        if setup.stop is not None and carries_residual(spec.quantization.at(ctx.epoch)):
            raise ValueError("a topk2 epoch is never partial: its residual rides on leaf S")
        # Read before the order goes out: a missing residual must fail here, not in the middle of
        # the collectives the other ranks are already waiting in (the epoch's scheme, as run_epoch).
        carried_residual(spec, EpochStore(root, ctx.run_id, ctx.host), ctx.epoch,
                         setup.carry_residual and carried_from(spec, ctx.epoch) is not None)
        traps = setup.traps
        send_order(IslandOrder(kind="epoch", run_id=ctx.run_id.hex(), epoch=ctx.epoch, host=ctx.host,
                               prev_epoch_seed=ctx.prev_epoch_seed.hex(), full_leaf_every=setup.full_leaf_every,
                               micro_batches=self.micro_batches, partial=setup.stop is not None,
                               trap_segments=list(traps.segments), trap_seed=traps.seed, trap_floor=traps.floor),
                   self.orders)
        self.snapshot = SnapshotStats()
        stop = agreed_stop(setup.stop, 0, self.group, self.device) if setup.stop is not None else None
        result = run_epoch(spec, dataset, ctx, start_params, root, self.micro_batches, self.stepper,
                           on_step=_agreed(on_step, 0, self.group, self.device), full_leaf_every=setup.full_leaf_every,
                           stats=self.snapshot, carry_residual=setup.carry_residual, stop=stop, traps=traps)
        assert result is not None  # rank 0
        # A partial epoch declares only the traps among the segments it committed (as one process does).
        self._trapped()[ctx.epoch] = [g for g in traps.segments if g < result.commitment.segments]
        return result

    def stop(self) -> None:
        """Tell the other ranks to leave (call once, when the daemon ends)."""
        send_order(IslandOrder(kind="stop"), self.orders)


def follow_island(spec: RunSpec, dataset: Dataset, root: Path, group: dist.ProcessGroup,
                  device: torch.device) -> int:
    """A rank other than 0 of a host's island: train each epoch rank 0 orders, until it says stop.

    Returns:
        The epochs trained to the end.
    """
    rank = dist.get_rank(group)
    orders = side_group(tuple(dist.get_process_group_ranks(group)))
    stepper = Stepper(spec, group=group, device=device)
    # θ_e travels in the resume broadcast of run_epoch; here it only gives the shapes.
    shapes = {n: torch.zeros(p.shape) for n, p in stepper.named.items()}
    done = 0
    while True:
        order = receive_order(orders)
        if order.kind == "stop":
            return done
        ctx = order.context()
        stop = agreed_stop(None, rank, group, device) if order.partial else None
        try:
            run_epoch(spec, dataset, ctx, shapes, root, order.micro_batches, stepper,
                      on_step=_agreed(None, rank, group, device), full_leaf_every=order.full_leaf_every,
                      stop=stop, traps=order.traps())
            done += 1
        except Interrupted as exc:
            log.info("island rank %d: epoch %d stopped: %s", rank, ctx.epoch, exc)
        except ValueError as exc:  # a non-finite loss: every rank raises it at the same step
            log.warning("island rank %d: epoch %d not trained: %s", rank, ctx.epoch, exc)
