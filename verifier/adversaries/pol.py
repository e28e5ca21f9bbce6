"""Published attacks on Proof-of-Learning, replayed against this protocol.

``crafted`` (Zhang et al. 2022, adversarial examples for PoL) trains on data of its own choosing;
``blindfold`` and ``interpolate`` (Fang et al. 2023) hide faked segments behind small updates or
lay checkpoints on a straight line to a target model. All three assume a verifier that takes
data from the host or picks what to check from the updates' sizes; here the data is drawn from the
content-addressed corpus by the chain's randomness and the challenges are uniform, so each faked
segment fails its replay when it is challenged.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from pathlib import Path

import torch
import torch.nn.functional as F

from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint
from trainer.data import Dataset
from trainer.inner import EpochContext, EpochResult, StepCallback, start_checkpoint
from trainer.step import Stepper
from verifier.adversaries.base import Adversary, FractionFaker, clone_state, commit_leaves, last_loss, loss_tensor


class Crafted(FractionFaker):
    """Zhang et al. 2022: trains on data it chose rather than the data it was assigned.

    The published attack crafts data points so that cheap updates reproduce the checkpoints.
    Here it trains a fraction ``f`` of segments on a batch of its own choosing (the first batch of
    the epoch, repeated: the cheapest data to "craft"). The verifier never takes data from the
    host: a replay draws the windows the chain's randomness assigned, from the content-addressed
    corpus, so crafted points have nowhere to enter.
    """

    name = "crafted"

    def fake_segment(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, stepper: Stepper,
                     leaves: list[Checkpoint], rng: random.Random) -> Checkpoint:
        x, y = dataset.batch(ctx.run_id, ctx.prev_epoch_seed, ctx.host, 0, spec.train.batch_size)
        stepper.load(leaves[-1].state)
        losses = [stepper.step(x, y, 1) for _ in range(spec.train.segment_steps)]
        return Checkpoint(stepper.export(), loss_tensor(losses), 1)


class Blindfold(FractionFaker):
    """Fang et al. 2023, top-Q blindfolding: fake segments hidden behind small updates.

    Against a verifier that replays only the Q steps with the largest updates, faked steps with
    small updates are never looked at. This host fakes ``m = round(f · (S − 1))`` of the segments
    before the last (it knows the last one is always checked): each faked leaf moves 1 % of the
    previous update's way. Here the challenged segments come from a seed revealed after the
    commitment, uniformly, so the update size hides nothing: each of the ``k`` challenges lands on
    a faked segment with probability ``m / (S − 1)`` (without replacement).
    """

    name = "blindfold"

    def __init__(self, f: float = 0.5, seed: int = 0) -> None:
        super().__init__(f, seed)

    def _count(self, spec: RunSpec) -> int:
        return min(spec.train.segments - 1, round(self.f * (spec.train.segments - 1)))

    def fakes(self, spec: RunSpec, ctx: EpochContext, rng: random.Random) -> list[int]:
        return sorted(rng.sample(range(spec.train.segments - 1), self._count(spec)))

    def expected_detection(self, spec: RunSpec, k: int) -> float:
        n, m = spec.train.segments - 1, self._count(spec)
        k = min(k, n)
        return 1.0 - math.comb(n - m, k) / math.comb(n, k) if n else 0.0

    def fake_segment(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, stepper: Stepper,
                     leaves: list[Checkpoint], rng: random.Random) -> Checkpoint:
        prev = leaves[-1]
        before = leaves[-2].state.params if len(leaves) >= 2 else prev.state.params
        params = {n: prev.state.params[n] + 0.01 * (prev.state.params[n] - before[n]) for n in prev.state.params}
        if len(leaves) < 2:  # nothing to extrapolate: a tiny step along a fixed random direction
            gen = self.torch_generator(ctx, "blindfold")
            params = {n: t + 1e-4 * float(spec.train.lr) * torch.randn(t.shape, generator=gen)
                      for n, t in prev.state.params.items()}
        state = clone_state(prev.state, params=params, step=prev.state.step + spec.train.segment_steps)
        return Checkpoint(state, loss_tensor([last_loss(leaves)] * spec.train.segment_steps), 1)


class Interpolate(Adversary):
    """Fang et al. 2023: checkpoints on the line from θ_e to a target model, in small steps.

    Leaf ``i`` is ``θ_e + (i / S)(θ* − θ_e)`` with zero moments; its losses are real forward
    losses at the interpolated weights on the assigned batches (cheap: no backward), so a
    verifier that checked losses alone would accept the first step of every segment. ``θ*`` is
    the ``target`` given (e.g. a stolen model), else θ_e plus a random direction whose norm is
    ``scale`` × ``lr · √(H · N)`` (the size of an epoch of updates).
    """

    name = "interpolate"
    PARAMS = ("scale",)

    def __init__(self, scale: float = 1.0, target: Mapping[str, torch.Tensor] | None = None, seed: int = 0) -> None:
        super().__init__(seed)
        self.scale, self.target = float(scale), target

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        start = start_checkpoint(spec, start_params, ctx.epoch)
        theta = start.state.params
        target = self.target
        if target is None:
            gen = self.torch_generator(ctx, "target")
            direction = {n: torch.randn(t.shape, generator=gen) for n, t in theta.items()}
            n_params = sum(t.numel() for t in theta.values())
            norm = math.sqrt(sum(float(d.pow(2).sum()) for d in direction.values()))
            size = self.scale * float(spec.train.lr) * math.sqrt(spec.train.inner_steps * n_params)
            target = {n: theta[n] + d * (size / norm) for n, d in direction.items()}
        stepper = Stepper(spec)
        S, c, H = spec.train.segments, spec.train.segment_steps, spec.train.inner_steps
        leaves = [start]
        for i in range(1, S + 1):
            losses = []
            for t in range((i - 1) * c, i * c):
                point = {n: theta[n] + (t / H) * (target[n] - theta[n]) for n in theta}
                losses.append(_forward_loss(stepper, dataset, spec, ctx, point, t))
            params = {n: theta[n] + (i / S) * (target[n] - theta[n]) for n in theta}
            state = clone_state(start.state, params=params, step=i * c)
            leaves.append(Checkpoint(state, loss_tensor(losses), 1))
        self.faked[ctx.epoch] = list(range(S))
        return commit_leaves(spec, ctx, leaves, root)


def _forward_loss(stepper: Stepper, dataset: Dataset, spec: RunSpec, ctx: EpochContext,
                  params: Mapping[str, torch.Tensor], step: int) -> float:
    # The loss at ``params`` on step ``step``'s assigned batch, by a forward pass only.
    x, y = dataset.batch(ctx.run_id, ctx.prev_epoch_seed, ctx.host, step, spec.train.batch_size)
    with torch.no_grad():
        for n, p in stepper.named.items():
            p.copy_(params[n])
        logits = stepper.model(x)
        return float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)))
