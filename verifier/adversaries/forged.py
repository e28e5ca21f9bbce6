"""Forged pseudo-gradients and borrowed work: hosts whose committed Δ, leaves or losses are not what
their own training produced.

``noise``, ``scaled`` and ``sign_flip`` train honestly and commit another Δ (caught by the Δ check
of the always-replayed last segment); ``stale`` reuses its previous epoch and ``copycat`` another
host's; ``fake_losses`` trains honestly and commits better-looking losses (caught by the loss check).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import torch

from protocol.rules.spec import RunSpec
from trainer.artifacts import ArtifactSource
from trainer.checkpoint import Checkpoint, decode_checkpoint
from trainer.data import Dataset
from trainer.delta import decode_delta, pseudo_gradient, quantize
from trainer.inner import EpochContext, EpochResult, StepCallback, start_checkpoint
from trainer.step import epoch_rng_key
from verifier.adversaries.base import Adversary, clone_state, commit_leaves, epoch_store, recommit


class HonestThenRecommit(Adversary, ABC):
    """Trains honestly, then commits another Δ (the Δ-level attacks). Subclasses define :meth:`forge`."""

    @abstractmethod
    def forge(self, spec: RunSpec, ctx: EpochContext, honest: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The float Δ to commit instead of ``honest``."""

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        result = super().train_epoch(spec, dataset, ctx, start_params, root, on_step)
        start = start_checkpoint(spec, start_params, ctx.epoch)  # leaf 0, as committed
        honest = pseudo_gradient(start.state.params, result.end.params)
        self.faked[ctx.epoch] = [spec.train.segments - 1]
        return recommit(spec, ctx, root, result, quantize(self.forge(spec, ctx, honest), spec.quantization))


class NoiseDelta(HonestThenRecommit):
    """Commits Gaussian noise with ``scale`` × the honest Δ's norm."""

    name = "noise"
    PARAMS = ("scale",)

    def __init__(self, scale: float = 1.0, seed: int = 0) -> None:
        super().__init__(seed)
        self.scale = float(scale)

    def forge(self, spec: RunSpec, ctx: EpochContext, honest: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        gen = self.torch_generator(ctx, "noise")
        noise = {n: torch.randn(t.shape, generator=gen) for n, t in honest.items()}
        norm = math.sqrt(sum(float(t.double().pow(2).sum()) for t in honest.values()))
        nnorm = math.sqrt(sum(float(t.double().pow(2).sum()) for t in noise.values()))
        return {n: t * (self.scale * norm / nnorm) for n, t in noise.items()}


class ScaledDelta(HonestThenRecommit):
    """Commits ``factor`` × the honest Δ."""

    name = "scaled"
    PARAMS = ("factor",)

    def __init__(self, factor: float = 10.0, seed: int = 0) -> None:
        super().__init__(seed)
        self.factor = float(factor)

    def forge(self, spec: RunSpec, ctx: EpochContext, honest: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: t * self.factor for n, t in honest.items()}


class SignFlipDelta(HonestThenRecommit):
    """Commits −Δ."""

    name = "sign_flip"

    def forge(self, spec: RunSpec, ctx: EpochContext, honest: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: -t for n, t in honest.items()}


class StaleDelta(Adversary):
    """Reuses its own previous epoch.

    ``mode="all"``: no training; commits epoch ``e − 1``'s leaves (RNG keys rewritten to epoch
    ``e``'s, so leaves look current), losses and Δ. ``mode="delta"``: honest leaves, last epoch's
    Δ. In epoch 0, or without a previous epoch in ``root``, it has nothing stale and trains honestly.
    """

    name = "stale"
    PARAMS = ("mode",)

    def __init__(self, mode: Literal["all", "delta"] = "all", seed: int = 0) -> None:
        super().__init__(seed)
        if mode not in ("all", "delta"):
            raise ValueError("mode is 'all' or 'delta'")
        self.mode = mode

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        store = epoch_store(root, ctx)
        if ctx.epoch == 0 or not store.committed(ctx.epoch - 1):
            self.faked[ctx.epoch] = []
            return super().train_epoch(spec, dataset, ctx, start_params, root, on_step)
        old_payload = store.read_delta(spec, ctx.epoch - 1)
        if self.mode == "delta":
            result = super().train_epoch(spec, dataset, ctx, start_params, root, on_step)
            self.faked[ctx.epoch] = [spec.train.segments - 1]
            return recommit(spec, ctx, root, result, old_payload)
        key = epoch_rng_key(spec.train.seed, ctx.epoch)
        leaves = [Checkpoint(clone_state(leaf.state, rng_key=key), leaf.losses, leaf.micro_batches)
                  for leaf in store.read_leaves(spec, ctx.epoch - 1)]
        self.faked[ctx.epoch] = list(range(spec.train.segments))
        return commit_leaves(spec, ctx, leaves, root, old_payload)


class Copycat(Adversary):
    """Copies another host (``victim``, its artifact source).

    ``mode="all"``: the victim's leaves, losses and Δ (a free ride: no training at all).
    ``mode="delta"``: honest leaves, the victim's Δ. The victim must have committed first.
    """

    name = "copycat"
    PARAMS = ("mode",)

    def __init__(self, victim: ArtifactSource | None = None, mode: Literal["all", "delta"] = "all",
                 seed: int = 0) -> None:
        super().__init__(seed)
        if victim is None:
            raise ValueError("copycat needs the victim's artifact source (victim=...)")
        if mode not in ("all", "delta"):
            raise ValueError("mode is 'all' or 'delta'")
        self.victim, self.mode = victim, mode

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        payload = decode_delta(self.victim.delta(ctx.epoch), spec)
        if self.mode == "delta":
            result = super().train_epoch(spec, dataset, ctx, start_params, root, on_step)
            self.faked[ctx.epoch] = [spec.train.segments - 1]
            return recommit(spec, ctx, root, result, payload)
        leaves = [decode_checkpoint(self.victim.checkpoint(ctx.epoch, i), spec, i)
                  for i in range(spec.train.segments + 1)]
        self.faked[ctx.epoch] = list(range(spec.train.segments))
        return commit_leaves(spec, ctx, leaves, root, payload)


class FakeLosses(Adversary):
    """Trains honestly but records and commits ``factor`` × every loss (to look better).

    The leaves themselves carry the scaled losses, so the committed losses agree with the leaves
    and only a replay's own losses give the lie away.
    """

    name = "fake_losses"
    PARAMS = ("factor",)

    def __init__(self, factor: float = 0.9, seed: int = 0) -> None:
        super().__init__(seed)
        self.factor = float(factor)

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        super().train_epoch(spec, dataset, ctx, start_params, root, on_step)
        leaves = epoch_store(root, ctx).read_leaves(spec, ctx.epoch)
        leaves = [leaves[0]] + [Checkpoint(leaf.state, leaf.losses * self.factor, leaf.micro_batches)
                                for leaf in leaves[1:]]
        self.faked[ctx.epoch] = list(range(spec.train.segments))
        return commit_leaves(spec, ctx, leaves, root)
