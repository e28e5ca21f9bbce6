"""Work-saving cheats: hosts that commit leaves they did not (fully, or correctly) compute.

``lazy`` skips segments or steps, ``wrong_data`` and ``wrong_lr`` train on cheaper or other terms
than the spec's, ``infinitesimal`` forges an optimizer state under which an honest replay moves
nothing. Each faked segment fails its replay (or, for ``infinitesimal``, the leaf check).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Literal

import torch

from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint
from trainer.data import Dataset
from trainer.inner import EpochContext, EpochResult, StepCallback, run_segment, start_checkpoint, train_steps
from trainer.step import Stepper
from verifier.adversaries.base import Adversary, FractionFaker, clone_state, commit_leaves, last_loss, loss_tensor


class Lazy(FractionFaker):
    """Skips work: each segment (``unit="segment"``) or step (``unit="step"``) with probability ``f``.

    A skipped segment is committed as its start with the step counter advanced (``how="copy"``)
    or as the start plus the previous segment's update (``how="extrapolate"``, a lazy host that
    tries to look busy); its losses repeat the last loss it knows. A skipped step leaves weights
    and moments alone (only the counter advances) and repeats the previous loss; a segment with
    at least one skipped step is faked, so per segment ``p = 1 − (1 − f)^c``.
    """

    name = "lazy"
    PARAMS: tuple[str, ...] = ("f", "unit", "how")

    def __init__(self, f: float = 0.5, unit: Literal["segment", "step"] = "segment",
                 how: Literal["copy", "extrapolate"] = "copy", seed: int = 0) -> None:
        super().__init__(f, seed)
        if unit not in ("segment", "step") or how not in ("copy", "extrapolate"):
            raise ValueError("unit is 'segment' or 'step'; how is 'copy' or 'extrapolate'")
        self.unit, self.how = unit, how
        self._skip: set[int] = set()  # the steps skipped this epoch (unit="step"), chosen by fakes()

    def segment_fake_probability(self, spec: RunSpec) -> float:
        return self.f if self.unit == "segment" else 1.0 - (1.0 - self.f) ** spec.train.segment_steps

    def fakes(self, spec: RunSpec, ctx: EpochContext, rng: random.Random) -> list[int]:
        if self.unit == "segment":
            return super().fakes(spec, ctx, rng)
        c = spec.train.segment_steps
        self._skip = {t for t in range(spec.train.inner_steps) if rng.random() < self.f}
        return sorted({t // c for t in self._skip})

    def fake_segment(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, stepper: Stepper,
                     leaves: list[Checkpoint], rng: random.Random) -> Checkpoint:
        c = spec.train.segment_steps
        prev = leaves[-1]
        if self.unit == "step":
            stepper.load(prev.state)
            losses = []
            last = last_loss(leaves)
            for t in range(prev.state.step, prev.state.step + c):
                if t in self._skip:
                    state = stepper.export()
                    state.step += 1
                    stepper.load(state)
                else:
                    last = train_steps(stepper, dataset, spec, ctx, range(t, t + 1), 1)[0]
                losses.append(last)
            return Checkpoint(stepper.export(), loss_tensor(losses), 1)
        params = {n: t.clone() for n, t in prev.state.params.items()}
        if self.how == "extrapolate" and len(leaves) >= 2:
            before = leaves[-2].state.params
            params = {n: 2 * prev.state.params[n] - before[n] for n in params}
        state = clone_state(prev.state, params=params, step=prev.state.step + c)
        return Checkpoint(state, loss_tensor([last_loss(leaves)] * c), 1)


class WrongData(FractionFaker):
    """Trains a fraction ``f`` of segments on another host's batches (data it was not assigned)."""

    name = "wrong_data"

    def fake_segment(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, stepper: Stepper,
                     leaves: list[Checkpoint], rng: random.Random) -> Checkpoint:
        other = EpochContext(ctx.run_id, ctx.epoch, ctx.host + "-elsewhere", ctx.prev_epoch_seed)
        stepper.load(leaves[-1].state)
        return run_segment(stepper, dataset, spec, other, 1)


class WrongLR(FractionFaker):
    """Trains a fraction ``f`` of segments with ``factor`` × the spec's learning rate."""

    name = "wrong_lr"
    PARAMS = ("factor", "f")

    def __init__(self, factor: float = 2.0, f: float = 1.0, seed: int = 0) -> None:
        super().__init__(f, seed)
        self.factor = float(factor)

    def fake_segment(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, stepper: Stepper,
                     leaves: list[Checkpoint], rng: random.Random) -> Checkpoint:
        lr = Decimal(str(self.factor)) * spec.train.lr
        other = Stepper(spec.with_changes(train={"lr": str(lr)}))
        other.load(leaves[-1].state)
        return run_segment(other, dataset, spec, ctx, 1)


class Infinitesimal(Adversary):
    """Forged optimizer state that makes honest replays vanish (the infinitesimal-update attack).

    Segment 0 is trained honestly, but leaf 1 carries second moments ``v = 10⁶`` and first moments
    0. From such a state AdamW's step ``lr · m̂ / (√v̂ + ε)`` is negligible, so an honest replay of
    any later segment reproduces "training" by weight decay alone — which the host computes for
    free as ``θ · (1 − lr · wd)^c`` on the decayed (matrix) parameters. The forged moments are
    impossible for clipped gradients (``Σ v ≤ g_max²``), which the verifier checks on every leaf it
    fetches, so every segment fails: segment 0 by its replay distance too.
    """

    name = "infinitesimal"

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        stepper = Stepper(spec)
        start = start_checkpoint(spec, start_params, ctx.epoch)
        stepper.load(start.state)
        honest = run_segment(stepper, dataset, spec, ctx, 1, on_step)
        forged = clone_state(honest.state,
                             exp_avg={n: torch.zeros_like(t) for n, t in honest.state.exp_avg.items()},
                             exp_avg_sq={n: torch.full_like(t, 1e6) for n, t in honest.state.exp_avg_sq.items()})
        leaves = [start, Checkpoint(forged, honest.losses.clone(), 1)]
        c, lr, wd = spec.train.segment_steps, float(spec.train.lr), float(spec.train.weight_decay)
        decay = (1.0 - lr * wd) ** c
        last = float(honest.losses[-1])
        for i in range(2, spec.train.segments + 1):
            prev = leaves[-1].state
            params = {n: (t * decay if t.dim() >= 2 else t.clone()) for n, t in prev.params.items()}
            leaves.append(Checkpoint(clone_state(prev, params=params, step=i * c), loss_tensor([last] * c), 1))
        self.faked[ctx.epoch] = list(range(spec.train.segments))
        return commit_leaves(spec, ctx, leaves, root)
