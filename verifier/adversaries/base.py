"""What every host behaviour of the catalogue shares: the faked-segment bookkeeping, the detection
formula, seeded random choices, and committing a faked epoch through the host's epoch store.

An adversary never writes a file itself: it commits through :class:`trainer.epoch_store.EpochStore`
(:func:`commit_leaves` for a whole epoch of leaves it made, :func:`recommit` for another Δ on top of
an honestly trained epoch), so its files are an honest host's files with other contents.
"""

from __future__ import annotations

import hashlib
import math
import random
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from protocol.rules.spec import RunSpec
from trainer.behaviour import HostBehaviour
from trainer.checkpoint import Checkpoint
from trainer.data import Dataset
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, EpochResult, StepCallback, epoch_delta, run_segment, start_checkpoint
from trainer.step import Stepper, TrainState

UNIFORM_LOSS = math.log(256.0)
"""The loss of a uniform guess over the byte vocabulary: what a host that trained nothing yet repeats."""


def epoch_store(root: Path, ctx: EpochContext) -> EpochStore:
    """The store of ``ctx.host``'s epochs under ``root``."""
    return EpochStore(root, ctx.run_id, ctx.host)


def commit_leaves(spec: RunSpec, ctx: EpochContext, leaves: Sequence[Checkpoint], root: Path,
                  payload: Mapping[str, torch.Tensor] | None = None) -> EpochResult:
    """Write ``leaves`` (leaf 0 … S) and commit to them, their recorded losses and a Δ.

    Args:
        spec: the run spec.
        ctx: whose epoch.
        leaves: ``S + 1`` checkpoints; their ``losses`` make up the committed per-step losses.
        root: the host's work root.
        payload: the quantized Δ to commit; by default the honest one of the leaves,
            quantize(θ_0 − θ_S).

    Returns:
        What was written and committed.
    """
    payload = dict(payload) if payload is not None else epoch_delta(spec, leaves[0].state, leaves[-1].state)
    record = epoch_store(root, ctx).write_epoch(spec, ctx.epoch, leaves, payload)
    losses = [x for leaf in leaves[1:] for x in leaf.losses.tolist()]
    return EpochResult(record.commitment, record.leaf_hashes, losses, payload, leaves[-1].state)


def recommit(spec: RunSpec, ctx: EpochContext, root: Path, result: EpochResult,
             payload: Mapping[str, torch.Tensor]) -> EpochResult:
    """Commit another quantized Δ on top of the committed epoch ``result`` (its leaves and losses stay)."""
    record = epoch_store(root, ctx).recommit(spec, ctx.epoch, payload=payload)
    return replace(result, commitment=record.commitment, payload=dict(payload))


def clone_state(state: TrainState, *, params: dict[str, torch.Tensor] | None = None,
                exp_avg: dict[str, torch.Tensor] | None = None, exp_avg_sq: dict[str, torch.Tensor] | None = None,
                step: int | None = None, rng_key: int | None = None) -> TrainState:
    """A copy of ``state`` that shares no tensor with it, with the given fields replaced (as given)."""
    def copy(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: t.clone() for n, t in tensors.items()}

    return TrainState(params if params is not None else copy(state.params),
                      exp_avg if exp_avg is not None else copy(state.exp_avg),
                      exp_avg_sq if exp_avg_sq is not None else copy(state.exp_avg_sq),
                      state.step if step is None else step, state.rng_key if rng_key is None else rng_key)


def loss_tensor(values: Sequence[float]) -> torch.Tensor:
    """Per-step losses as a checkpoint records them."""
    return torch.tensor(list(values), dtype=torch.float32)


def last_loss(leaves: Sequence[Checkpoint]) -> float:
    """The last per-step loss the leaves record (:data:`UNIFORM_LOSS` before any step)."""
    for leaf in reversed(leaves):
        if leaf.losses.numel():
            return float(leaf.losses[-1])
    return UNIFORM_LOSS


class Adversary(HostBehaviour):
    """A host behaviour of the catalogue. Subclasses set :attr:`name` and :attr:`PARAMS`.

    It trains honestly unless a subclass overrides :meth:`train_epoch` or :meth:`serve`.

    Attributes:
        faked: epoch -> the segments it faked in that epoch (after :meth:`train_epoch`).
        seed: mixes into the adversary's own random choices (which segments, which noise).
    """

    name = "adversary"
    sparse_leaves = False  # forgeries read and rewrite the leaves an honest epoch wrote: keep them all
    PARAMS: tuple[str, ...] = ()
    """Parameter names in the order ``name:a,b`` passes them."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.faked: dict[int, list[int]] = {}

    def rng(self, ctx: EpochContext, what: str = "") -> random.Random:
        """A random stream fixed by (adversary, seed, run, epoch, host): a rerun makes the same choices."""
        material = f"{self.name}|{self.seed}|{what}|{ctx.run_id.hex()}|{ctx.epoch}|{ctx.host}".encode()
        return random.Random(int.from_bytes(hashlib.sha256(material).digest()[:8], "big"))

    def torch_generator(self, ctx: EpochContext, what: str = "") -> torch.Generator:
        """A torch generator seeded from :meth:`rng`."""
        return torch.Generator().manual_seed(self.rng(ctx, what).getrandbits(63))

    def segment_fake_probability(self, spec: RunSpec) -> float:
        """Probability that any given segment is faked (for the per-segment adversaries)."""
        return 1.0

    def expected_detection(self, spec: RunSpec, k: int) -> float:
        """Probability that one validator set catches this adversary in one epoch.

        Default: every segment (including the last, which is always checked) is faked
        independently with :meth:`segment_fake_probability` ``p``, and ``min(k, S − 1) + 1``
        distinct segments are replayed: ``1 − (1 − p)^(min(k, S−1) + 1)``.
        """
        p = self.segment_fake_probability(spec)
        return 1.0 - (1.0 - p) ** (min(k, spec.train.segments - 1) + 1)

    def __repr__(self) -> str:
        args = ", ".join(f"{p}={getattr(self, p)!r}" for p in self.PARAMS)
        return f"{type(self).__name__}({args})"


class Honest(Adversary):
    """The honest host under the catalogue's interface: fakes nothing, so nothing can be detected."""

    name = "honest"

    def segment_fake_probability(self, spec: RunSpec) -> float:
        return 0.0

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        self.faked[ctx.epoch] = []
        return super().train_epoch(spec, dataset, ctx, start_params, root, on_step)


class SegmentFaker(Adversary, ABC):
    """Trains segment by segment from its own last leaf and fakes the segments :meth:`fakes` picks."""

    def fakes(self, spec: RunSpec, ctx: EpochContext, rng: random.Random) -> list[int]:
        """The segments to fake this epoch."""
        p = self.segment_fake_probability(spec)
        return [g for g in range(spec.train.segments) if rng.random() < p]

    @abstractmethod
    def fake_segment(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, stepper: Stepper,
                     leaves: list[Checkpoint], rng: random.Random) -> Checkpoint:
        """Leaf ``len(leaves)`` without honest work, from ``leaves[-1]``."""

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        rng = self.rng(ctx, "segments")
        fake = set(self.fakes(spec, ctx, rng))
        stepper = Stepper(spec)
        leaves = [start_checkpoint(spec, start_params, ctx.epoch)]
        faked = []
        for g in range(spec.train.segments):
            if g in fake:
                leaf = self.fake_segment(spec, dataset, ctx, stepper, leaves, rng)
                faked.append(g)
            else:
                stepper.load(leaves[-1].state)
                leaf = run_segment(stepper, dataset, spec, ctx, 1, on_step)
            leaves.append(leaf)
        self.faked[ctx.epoch] = faked
        return commit_leaves(spec, ctx, leaves, root)


class FractionFaker(SegmentFaker, ABC):
    """Fakes each segment independently with probability ``f`` (its :meth:`fake_segment` says how)."""

    PARAMS: tuple[str, ...] = ("f",)

    def __init__(self, f: float = 1.0, seed: int = 0) -> None:
        super().__init__(seed)
        if not 0 <= f <= 1:
            raise ValueError("f must be in [0, 1]")
        self.f = float(f)

    def segment_fake_probability(self, spec: RunSpec) -> float:
        return self.f
