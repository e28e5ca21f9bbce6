"""THE inner training step: the one function hosts train with and validators replay with.

``(model parameters, AdamW state, step counter, RNG state, batch) -> (next state, loss)``.

A :class:`Stepper` holds a model and its AdamW optimizer; :meth:`Stepper.load` puts a
:class:`TrainState` into them, :meth:`Stepper.step` performs one inner step on a batch, and
:meth:`Stepper.export` reads the state back out. There is no other code path that updates
weights during an epoch: the host's inner loop, the island ranks, the single-process replay of an
island (gradient accumulation) and the DiLoCo simulation all call :meth:`Stepper.step`.

One step, for the island-wide batch of ``B`` rows split into ``M`` micro-batches
(``micro_batches``; micro-batch ``m`` is rows ``[m·B/M, (m+1)·B/M)``; an island of ``W`` ranks has
``M = W · A``, rank ``r`` taking micro-batches ``r, W + r, …, (A−1)·W + r``: :func:`rank_rows`):

1. for each micro-batch ``j`` (global index), with the RNG seeded by :func:`micro_seed`
   ``(rng_key, step, j)``: forward, mean cross-entropy ``ℓ_j`` over its tokens, backward of ``ℓ_j / M``;
2. the gradients and the ``ℓ_j`` summed over the micro-batches in the tree order (across ranks:
   FSDP2's reduce-scatter with an ordered sum after each of a rank's micro-batches, which sums the
   aligned block ``[a·W, (a+1)·W)``, a subtree when ``W`` is a power of two; then each rank sums its
   ``A`` sharded block sums in the tree order, the tree's upper part);
3. clip the global gradient norm to ``grad_clip`` (0 turns clipping off);
4. AdamW (``lr``, ``beta1``, ``beta2``, ``eps``; ``weight_decay`` on matrices only); with
   ``inner_optimizer = "muon"``, Muon (``torch.optim.Muon``: momentum ``beta1``, Nesterov, five
   Newton–Schulz iterations in bfloat16, lr adjusted to AdamW's RMS) on :func:`uses_muon`'s matrices;
5. the step's loss is ``(Σ_j ℓ_j) / M`` in float32.

The ``M`` micro-batch gradients (and losses) are summed in one fixed order, a pairwise tree over
the micro-batch indices (:mod:`trainer.reduction`), by one process accumulating them and by an
island (FSDP2-sharded, :mod:`trainer.sharding`) alike, so a one-process replay reproduces an
island of any size bit for bit, and since no operation of the step depends on the thread count
(``trainer.model.LayerNorm``, and MKL in its strict mode: ``trainer.MKL_CBWR``), at any thread
count (measured: docs/training.md#determinism-measured).

RNG state: a 63-bit key fixed for the epoch plus the step counter. A counter-based scheme (rather
than a stateful generator advanced by every draw) gives each micro-batch its own stream, so an
island's ranks and a one-process replay draw the same dropout masks for the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from protocol.rules.spec import RunSpec, TrainSpec
from trainer.determinism import ADAMW_IMPL
from trainer.model import build_model, drawing_from
from trainer.reduction import TreeSum, tree_sum
from trainer.sharding import chunk_of, clip_gradients, local, shard_model, whole

_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def epoch_rng_key(seed: int, epoch: int) -> int:
    """The RNG key of an epoch's inner loop: ``splitmix64(seed ^ splitmix64(epoch))`` in 63 bits."""
    return _splitmix64(seed ^ _splitmix64(epoch)) >> 1


def micro_seed(rng_key: int, step: int, micro: int) -> int:
    """The torch seed of micro-batch ``micro`` of inner step ``step``.

    ``splitmix64(splitmix64(splitmix64(rng_key) ^ step) ^ micro)``: a pure function of the
    committed key and the counters, so any process can draw the randomness of any micro-batch.
    """
    return _splitmix64(_splitmix64(_splitmix64(rng_key) ^ step) ^ micro)


@contextmanager
def _seeded(seed: int, device: torch.device) -> Iterator[None]:
    # The micro-batch's dropout masks come from a generator of its own on `device` (where the
    # activations live), seeded here: never torch's process-wide generator, which a thread training
    # beside another (a pipelined host recomputing a challenged leaf, a simulation replaying beside
    # its hosts) would re-seed under the other's feet.
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    with drawing_from(generator):
        yield


def resolve_device(device: str | torch.device) -> torch.device:
    """``device`` as a :class:`torch.device`, refused when this machine cannot compute on it.

    Raises:
        ValueError: an unknown device string, or a CUDA device on a machine without one.
    """
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"unknown device {device!r}: {exc}") from None
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: this torch build or machine has no CUDA device")
        if resolved.index is not None and resolved.index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: only {torch.cuda.device_count()} CUDA devices")
    elif resolved.type != "cpu":
        raise ValueError(f"device {device!r}: only cpu and cuda are supported")
    return resolved


def _ready() -> None:
    """What :meth:`Stepper.export_async` returns to wait on when its copy is already made."""


def decays(param: torch.Tensor) -> bool:
    """Whether weight decay applies to a parameter: matrices (``dim ≥ 2``) only."""
    return param.dim() >= 2


def uses_muon(name: str, param: torch.Tensor, train: TrainSpec) -> bool:
    """Whether Muon steps a parameter: with ``inner_optimizer = "muon"``, the hidden matrices of the
    transformer blocks (2-D, under ``blocks.``). Embeddings, the output head, LayerNorm gains and
    biases stay on AdamW, as in Muon's reference use."""
    return train.inner_optimizer == "muon" and param.dim() == 2 and name.startswith("blocks.")


MUON_ADJUST_LR = "match_rms_adamw"
"""Muon's lr for an ``A × B`` matrix is ``0.2 · lr · √max(A, B)``: its update's RMS matches AdamW's,
so the run spec's one ``lr`` (and weight decay) serves both optimizers."""


def rank_rows(batch_size: int, rank: int, world: int, micro_batches: int | None = None) -> slice | torch.Tensor:
    """The rows of the island-wide batch that rank ``rank`` of ``world`` trains on, in the order
    :meth:`Stepper.step` cuts them into its micro-batches: ``r, W + r, …`` of the ``M``
    (``micro_batches``, ``W`` by default: one a rank, a slice; else the rows' indices).

    Raises:
        ValueError: ``M`` is not a multiple of ``W``, the batch does not split into ``M``, or a rank
            accumulates several micro-batches in an island whose size is not a power of two.
    """
    m = world if micro_batches is None else micro_batches
    if m < 1 or m % world:
        raise ValueError(f"micro_batches {m} is not a positive multiple of the island's {world} ranks")
    if batch_size % m:
        raise ValueError(f"batch_size {batch_size} is not divisible into {m} micro-batches")
    if m > world > 1 and world & (world - 1):
        raise ValueError(f"an island of {world} ranks accumulates micro-batches only with a power-of-two "
                         "size (each reduce-scatter must sum a subtree of the gradient tree)")
    per = batch_size // m
    if m == world:
        return slice(rank * per, (rank + 1) * per)
    return torch.cat([torch.arange(j * per, (j + 1) * per) for j in range(rank, m, world)])


@dataclass
class TrainState:
    """What an inner step reads and writes besides the batch.

    Attributes:
        params: parameter name -> float32 tensor.
        exp_avg: AdamW first moments, same names and shapes (zeros at a fresh start); for a
            parameter Muon steps (:func:`uses_muon`), Muon's momentum buffer.
        exp_avg_sq: AdamW second moments, same names and shapes (zeros where Muon steps).
        step: inner steps taken since the optimizer was fresh (AdamW's bias-correction count).
        rng_key: the epoch's RNG key (see :func:`micro_seed`), in ``[0, 2^63)``.
    """

    params: dict[str, torch.Tensor]
    exp_avg: dict[str, torch.Tensor]
    exp_avg_sq: dict[str, torch.Tensor]
    step: int
    rng_key: int

    @classmethod
    def fresh(cls, params: dict[str, torch.Tensor], rng_key: int) -> TrainState:
        """The start of an epoch: ``params`` with zeroed AdamW moments at step 0."""
        params = {n: p.detach().to(torch.float32).clone() for n, p in params.items()}
        zeros = {n: torch.zeros_like(p) for n, p in params.items()}
        return cls(params, zeros, {n: z.clone() for n, z in zeros.items()}, 0, rng_key)

    def tensors(self) -> dict[str, torch.Tensor]:
        """The state as named tensors: ``param/*``, ``adam.exp_avg/*``, ``adam.exp_avg_sq/*``, ``step``, ``rng_key``."""
        out: dict[str, torch.Tensor] = {}
        for name in self.params:
            out[f"param/{name}"] = self.params[name]
            out[f"adam.exp_avg/{name}"] = self.exp_avg[name]
            out[f"adam.exp_avg_sq/{name}"] = self.exp_avg_sq[name]
        out["step"] = torch.tensor(self.step, dtype=torch.int64)
        out["rng_key"] = torch.tensor(self.rng_key, dtype=torch.int64)
        return out

    @classmethod
    def from_tensors(cls, tensors: dict[str, torch.Tensor]) -> TrainState:
        """Inverse of :meth:`tensors` (names and shapes are checked by the loader, not here)."""
        def group(prefix: str) -> dict[str, torch.Tensor]:
            return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}

        return cls(group("param/"), group("adam.exp_avg/"), group("adam.exp_avg_sq/"),
                   int(tensors["step"]), int(tensors["rng_key"]))


class Stepper:
    """A model and its AdamW optimizer, stepped only by :meth:`step`.

    The model, its gradients and AdamW's moments live on ``device``; :meth:`load` takes and
    :meth:`export` returns CPU tensors, so checkpoints, hashes and comparisons never depend on
    where a step ran. Replays are bitwise equal within one compute profile (the same torch build,
    CPU kernels or GPU model) at any thread count; on another device or kind of CPU they differ by
    rounding noise (``docs/verification.md``, "Compute profiles").

    Args:
        spec: the run spec (model and ``train`` hyperparameters).
        model: a model built by :func:`trainer.model.build_model` for ``spec`` (built when omitted).
        group: the island's process group when this process is one rank of several (gloo on
            CPU, NCCL on CUDA); the model is then sharded across it (:func:`trainer.sharding.
            shard_model`). ``None`` for a single process.
        device: where the step computes (``"cpu"``, ``"cuda"``, ``"cuda:1"`` …).
    """

    def __init__(self, spec: RunSpec, model: nn.Module | None = None,
                 group: dist.ProcessGroup | None = None, device: str | torch.device = "cpu") -> None:
        self.device = resolve_device(device)
        self.model = (model if model is not None else build_model(spec)).to(self.device)
        self.group = group
        self.rank = dist.get_rank(group) if group is not None else 0
        self.world = dist.get_world_size(group) if group is not None else 1
        t = spec.train
        self.muon_names = {n for n, p in self.model.named_parameters() if uses_muon(n, p, t)}
        if group is not None and self.world > 1:
            shard_model(self.model, group, self.device)
        self.named = dict(self.model.named_parameters())
        # Decimals become floats here, at the boundary to torch, and nowhere earlier.
        adam_params = [p for n, p in self.named.items() if n not in self.muon_names]
        decay = [p for p in adam_params if decays(p)]
        no_decay = [p for p in adam_params if not decays(p)]
        self.muon_args: dict[str, Any] = {"lr": float(t.lr), "weight_decay": float(t.weight_decay),
                                          "momentum": float(t.beta1), "nesterov": True,
                                          "adjust_lr_fn": MUON_ADJUST_LR}
        # One process: one Muon over the matrices. An island: Newton–Schulz needs a whole matrix, so
        # each step gathers one matrix at a time (_gathered_muon_step); the momenta stay sharded here.
        self.muon = (torch.optim.Muon([self.named[n] for n in sorted(self.muon_names)], **self.muon_args)
                     if self.muon_names and self.world == 1 else None)
        self.muon_momentum: dict[str, torch.Tensor] = (
            {n: torch.zeros_like(self.named[n]) for n in self.muon_names} if self.world > 1 else {})
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": float(t.weight_decay)},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=float(t.lr), betas=(float(t.beta1), float(t.beta2)), eps=float(t.eps), **ADAMW_IMPL)
        self.grad_clip = float(t.grad_clip)
        self.step_count = 0
        self.rng_key = 0
        self._copy_stream: torch.cuda.Stream | None = None  # export_async's device-to-host copies

    def load(self, state: TrainState) -> None:
        """Make ``state`` the current parameters, optimizer moments, step and RNG key."""
        if set(state.params) != set(self.named):
            missing = sorted(set(self.named) - set(state.params))
            extra = sorted(set(state.params) - set(self.named))
            raise ValueError(f"state does not fit the model (missing {missing[:3]}, unexpected {extra[:3]})")
        self.optimizer.state.clear()
        if self.muon is not None:
            self.muon.state.clear()
        with torch.no_grad():
            for name, p in self.named.items():
                local(p).copy_(self._mine(state.params[name]))
                if name in self.muon_names:
                    momentum = self._placed_like(p, state.exp_avg[name])
                    if self.muon is not None:
                        self.muon.state[p] = {"momentum_buffer": momentum}
                    else:
                        self.muon_momentum[name] = momentum
                    continue
                self.optimizer.state[p] = {
                    # AdamW's non-capturable kernel keeps its step count on the CPU.
                    "step": torch.tensor(float(state.step), dtype=torch.float32),
                    "exp_avg": self._placed_like(p, state.exp_avg[name]),
                    "exp_avg_sq": self._placed_like(p, state.exp_avg_sq[name]),
                }
        self.step_count = state.step
        self.rng_key = state.rng_key

    def _mine(self, full: torch.Tensor) -> torch.Tensor:
        # The part of a whole (CPU) tensor this rank holds: all of it in one process.
        return chunk_of(full, self.rank, self.world) if self.world > 1 else full

    def _placed_like(self, p: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
        # A copy of `full` laid out as parameter `p` is (sharded or not, on the stepper's device).
        out = torch.empty_like(p)
        local(out).copy_(self._mine(full))
        return out

    def _live(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """The current parameters and AdamW moments where they live (not copies; zero moments before
        the optimizer's first step)."""
        params, m, v = {}, {}, {}
        for name, p in self.named.items():
            params[name] = p.detach()
            if name in self.muon_names:
                buf = (self.muon.state.get(p, {}).get("momentum_buffer") if self.muon is not None
                       else self.muon_momentum.get(name))
                m[name] = buf if buf is not None else torch.zeros_like(p)
                v[name] = torch.zeros_like(p)
                continue
            s = self.optimizer.state.get(p, {})
            m[name] = s["exp_avg"] if s else torch.zeros_like(p)
            v[name] = s["exp_avg_sq"] if s else torch.zeros_like(p)
        return params, m, v

    def export(self) -> TrainState:
        """A copy of the current state, whole (in an island every rank must call it: sharded
        tensors are all-gathered one at a time)."""
        cpu = torch.device("cpu")
        params, m, v = ({n: whole(t).to(cpu, copy=True) for n, t in group.items()} for group in self._live())
        return TrainState(params, m, v, self.step_count, self.rng_key)

    def export_local(self) -> TrainState:
        """A CPU copy of the tensors this rank holds: its dim-0 chunks of every parameter and
        moment in an island (:func:`trainer.sharding.chunk_of`), the whole state in one process."""
        cpu = torch.device("cpu")
        params, m, v = ({n: local(t).to(cpu, copy=True) for n, t in group.items()} for group in self._live())
        return TrainState(params, m, v, self.step_count, self.rng_key)

    def export_async(self) -> tuple[TrainState, Callable[[], None]]:
        """A copy of the current state whose transfer to host memory may still be running.

        On CUDA the state is first copied on the device, on the training stream (the next step's
        in-place updates are ordered after it), then to pinned host memory on a side stream while
        the next steps compute; on CPU the copy is :meth:`export`'s, made now. The intent is that
        training waits for the device copy only (measured on an H100, with what that run did not
        show: docs/benchmarks.md#gpu-one-h100).

        Returns:
            The state and a function that blocks until its tensors hold the copy: call it before
            reading them (:class:`trainer.snapshot.LeafWriter` does, on its own thread).
        """
        if self.device.type != "cuda" or self.world > 1:
            return self.export(), _ready
        training = torch.cuda.current_stream(self.device)
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(self.device)
        copier = self._copy_stream
        on_device = [{n: t.clone() for n, t in group.items()} for group in self._live()]
        copier.wait_stream(training)  # the device copies above are complete before the transfer

        def to_host(t: torch.Tensor) -> torch.Tensor:
            pinned = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            pinned.copy_(t, non_blocking=True)
            # The caching allocator may hand t's memory to the training stream once t is dropped
            # here; record_stream makes it wait for the copier's use of it.
            t.record_stream(copier)
            return pinned

        with torch.cuda.stream(copier):
            params, m, v = ({n: to_host(t) for n, t in group.items()} for group in on_device)
        done = torch.cuda.Event(blocking=True)  # the waiting writer thread sleeps instead of spinning
        done.record(copier)
        return TrainState(params, m, v, self.step_count, self.rng_key), done.synchronize

    def step(self, x: torch.Tensor, y: torch.Tensor, micro_batches: int = 1) -> float:
        """One inner step on this process's rows of the island-wide batch.

        Args:
            x: int64 inputs ``[rows, seq_len]``: the whole batch in a single process, the rank's
                slice (:func:`rank_rows`) in an island.
            y: int64 targets, same shape.
            micro_batches: ``M``, micro-batches of the island-wide batch (a multiple of the
                island's ranks; each rank accumulates ``M / W`` of them).

        Returns:
            The step's loss (mean over the micro-batches), identical on every rank.

        Raises:
            ValueError: the rows do not split evenly, or the loss is not finite.
        """
        if micro_batches < 1 or micro_batches % self.world:
            raise ValueError(f"micro_batches {micro_batches} must be a positive multiple of the "
                             f"island's {self.world} ranks")
        mine = micro_batches // self.world
        if mine > 1 and self.world & (self.world - 1):
            raise ValueError(f"an island of {self.world} ranks accumulates micro-batches only with a "
                             "power-of-two size")
        if len(x) % mine or len(x) != len(y):
            raise ValueError(f"{len(x)} rows do not split into {mine} equal micro-batches")
        rows = len(x) // mine
        x, y = x.to(self.device), y.to(self.device)
        self.model.train()
        params = list(self.named.values())
        grads = TreeSum() if mine > 1 else None
        losses: list[torch.Tensor] = []
        for j in range(mine):
            xs, ys = x[j * rows:(j + 1) * rows], y[j * rows:(j + 1) * rows]
            # This rank's j-th micro-batch is the island's (j·W + r)-th (rank_rows).
            with _seeded(micro_seed(self.rng_key, self.step_count, j * self.world + self.rank), self.device):
                logits = self.model(xs)
                loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), ys.reshape(-1))
                # In an island FSDP2 reduce-scatters here: the block sum over ranks, in tree order.
                (loss / micro_batches).backward()
            losses.append(loss.detach())
            if grads is not None:  # several micro-batches (or blocks): each gradient kept apart
                part = [p.grad for p in params]
                if any(g is None for g in part):
                    raise ValueError("a parameter got no gradient; accumulation needs every one")
                grads.add([g for g in part if g is not None])
                for p in params:
                    p.grad = None
        if grads is not None:
            for p, g in zip(params, grads.result(), strict=True):
                p.grad = g
        loss_sum = tree_sum(self._island_losses(losses))
        if not math.isfinite(loss_sum.item()):
            raise ValueError(f"loss is not finite at inner step {self.step_count}")
        if self.grad_clip > 0:
            clip_gradients([p.grad for p in params if p.grad is not None], self.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.muon is not None:
            self.muon.step()
            self.muon.zero_grad(set_to_none=True)
        elif self.muon_momentum:
            self._gathered_muon_step()
        self.step_count += 1
        return (loss_sum / micro_batches).item()

    def _gathered_muon_step(self) -> None:
        """Muon in an island: for each matrix in name order, every rank all-gathers it, its
        gradient and its momentum whole, runs ``torch.optim.Muon``'s step on them (the update of
        one process: Muon steps each matrix on its own) and keeps its chunks. Every rank computes
        Newton–Schulz for every matrix (W-fold redundant), holding three whole matrices at a time."""
        with torch.no_grad():
            for name in sorted(self.muon_names):
                p = self.named[name]
                if p.grad is None:
                    raise ValueError(f"{name} got no gradient")
                proxy = nn.Parameter(whole(p.detach()).clone())
                proxy.grad = whole(p.grad).clone()
                momentum = self.muon_momentum[name]
                muon = torch.optim.Muon([proxy], **self.muon_args)
                muon.state[proxy] = {"momentum_buffer": whole(momentum).clone()}
                muon.step()
                local(p.detach()).copy_(self._mine(proxy.detach()))
                local(momentum).copy_(self._mine(muon.state[proxy]["momentum_buffer"]))
                p.grad = None

    def _island_losses(self, losses: list[torch.Tensor]) -> list[torch.Tensor]:
        # Every micro-batch's loss, in micro-batch order: in an island, each rank's losses
        # all-gathered (a few bytes), so every rank sums them in the same tree order.
        if self.world == 1:
            return losses
        mine = torch.stack(losses)
        gathered = [torch.empty_like(mine) for _ in range(self.world)]
        dist.all_gather(gathered, mine, group=self.group)
        # gathered[r][j] is micro-batch j·W + r
        return [gathered[r][j] for j in range(len(losses)) for r in range(self.world)]
