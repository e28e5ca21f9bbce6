"""Hosts that move their Δ through what no replay sees: the segments that are not challenged, and
the start of the leaf chain.

==================================  ===============================================================
``shifted_start:scale``             trains every step honestly, but from θ_e plus a shift of
                                    ``scale`` × lr per coordinate (random signs); commits
                                    Δ = θ_e − θ_S against the agreed θ_e. Every segment but 0
                                    replays exactly; leaf 0 is not θ_e's, which the last segment's
                                    validators check every epoch (``verifier.replay``)
``jump:segments,ratio,direction,aim`` trains honestly, except that ``segments`` segments before the
                                    last end displaced along ``direction`` (``ascent``: the sign of
                                    the validation-loss gradient at θ_e; ``gradient``: the gradient
                                    itself, per tensor; ``matrices``: the gradient on the tensors of
                                    at least 4,096 coordinates only, small tensors left honest;
                                    ``random``), together by the per-tensor shift that makes the
                                    committed Δ ``ratio`` × its honest norm (0: as far as the
                                    epoch's per-coordinate bound allows); honest moments and losses,
                                    and the last segment trained honestly from there. ``aim``:
                                    ``each`` epoch's own direction, or the ``first`` epoch's reused
                                    every epoch (pushes that accumulate). Each faked segment fails
                                    its replay; the others, the last one and the Δ pass
==================================  ===============================================================

``jump`` is the issue-28 attack: a host caught only when a faked segment is drawn, with probability
``1 − C(S − 1 − m, k) / C(S − 1, k)`` per epoch (``m`` = ``segments``), and whose committed Δ
aggregation must bound (``verifier.measure.within_peer_bound``: the peer bound, small tensors
clipped; ``bench/unreplayed_segments.py``). Under a per-tensor L2 bound the gradient itself is the
first-order strongest direction (its sign spreads the same norm over coordinates that matter less);
``matrices`` puts it where the peer bound leaves room (each matrix just under 1.5× the median) and
the clip would take it back (small tensors, clipped to 1.5× their median, pooled for exclusion).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F

from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint
from trainer.data import Dataset
from trainer.evaluate import validation_starts
from trainer.inner import EpochContext, EpochResult, StepCallback, epoch_delta, run_segment, start_checkpoint
from trainer.model import build_model
from trainer.step import Stepper, decays, uses_muon
from verifier.adversaries.base import Adversary, clone_state, commit_leaves
from verifier.measure import (
    MOMENT_SLACK,
    PEER_POOL_COORDINATES,
    muon_spectral_excess,
    muon_update_limit,
    segment_movements,
    update_limit,
)

Tensors = dict[str, torch.Tensor]

CORRECTIONS = 3
"""Epochs a ratio-sized ``jump`` retrains (a bisection of the shift's scale) to bring its committed Δ
to at most its ratio × the honest norm in every tensor."""

EDGE = 0.95
"""Share of the per-coordinate bound an edge-sized jump uses (the rest is room for the honest
training after it)."""


def validation_gradient(spec: RunSpec, dataset: Dataset, params: Mapping[str, torch.Tensor],
                        windows: int = 64) -> Tensors:
    """∇ of the validation loss at ``params`` on ``windows`` evenly spread validation windows:
    the direction that hurts the agreed model most per unit moved."""
    model = build_model(spec)
    named = dict(model.named_parameters())
    with torch.no_grad():
        for n, p in named.items():
            p.copy_(params[n])
    model.eval()
    x, y = dataset.windows(validation_starts(dataset, windows), split="val")
    logits = model(x)
    F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).backward()
    return {n: p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p.detach())
            for n, p in named.items()}


def honest_epoch(spec: RunSpec, dataset: Dataset, ctx: EpochContext, start: Checkpoint,
                 on_step: StepCallback | None) -> list[Checkpoint]:
    """Leaves ``0 … S`` of an honest epoch from ``start`` (the trainer's one step, segment by segment)."""
    stepper = Stepper(spec)
    leaves = [start]
    for _ in range(spec.train.segments):
        stepper.load(leaves[-1].state)
        leaves.append(run_segment(stepper, dataset, spec, ctx, 1, on_step))
    return leaves


class ShiftedStart(Adversary):
    """Trains honestly from θ_e + a shift of its choosing and commits its Δ against θ_e.

    Each segment after the first replays exactly from the leaf before it; the Δ is θ_e − θ_S of
    the last leaf; only leaf 0 is wrong. Before issue 28 only a challenge of segment 0 compared it
    (probability ``k / (S − 1)``); now the last segment's validators check leaf 0's hash every epoch.
    """

    name = "shifted_start"
    PARAMS = ("scale",)

    def __init__(self, scale: float = 1.0, seed: int = 0) -> None:
        super().__init__(seed)
        if not scale > 0:
            raise ValueError("scale must be positive")
        self.scale = float(scale)

    def expected_detection(self, spec: RunSpec, k: int) -> float:
        return 1.0  # the last segment is always challenged, and its validators check leaf 0

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        gen = self.torch_generator(ctx, "shift")
        step = self.scale * float(spec.train.lr)
        shifted = {n: t + step * torch.randint(0, 2, t.shape, generator=gen).to(t.dtype).mul(2).sub(1)
                   for n, t in start_params.items()}
        leaves = honest_epoch(spec, dataset, ctx, start_checkpoint(spec, shifted, ctx.epoch), on_step)
        self.faked[ctx.epoch] = [0]
        honest_start = start_checkpoint(spec, start_params, ctx.epoch)
        return commit_leaves(spec, ctx, leaves, root, epoch_delta(spec, honest_start.state, leaves[-1].state))


def _norm(t: torch.Tensor) -> float:
    return float(t.double().norm())


def jump_size(honest_delta: torch.Tensor, unit: torch.Tensor, ratio: float) -> float:
    """The ``α ≥ 0`` with ``‖Δ_h − α·u‖ = ratio · ‖Δ_h‖`` (``u`` of norm 1): how far to move θ along
    ``u`` so that the committed Δ = θ_e − θ_S has ``ratio`` × its honest norm."""
    d2, du = _norm(honest_delta) ** 2, float((honest_delta.double() * unit.double()).sum())
    return max(0.0, du + math.sqrt(max(du * du + (ratio * ratio - 1) * d2, 0.0)))


def _within_edge(spec: RunSpec, theta: Mapping[str, torch.Tensor], before_last: Mapping[str, torch.Tensor],
                 shift: Tensors) -> Tensors:
    """``shift`` of the leaf before the last, limited so that every coordinate stays within
    :data:`EDGE` of the per-coordinate bound of ``(S − 1)·c`` AdamW steps from θ_e (which the last
    segment's validators and every proposer check on the whole epoch). A matrix Muon steps has its
    own bound (:func:`~verifier.measure.muon_update_limit`), on every coordinate and on the
    spectral norm of its change: the clamped change is scaled down to :data:`EDGE` of the latter."""
    train = spec.train
    steps = (train.segments - 1) * train.segment_steps
    adam_limit = EDGE * update_limit(train, 0, steps) / (1 + MOMENT_SLACK)
    decay = 1.0 - float(train.lr) * float(train.weight_decay)
    out = {}
    for n, s in shift.items():
        base = theta[n] * (decay ** steps if decays(theta[n]) else 1.0)
        muon = uses_muon(n, theta[n], train)
        limit = EDGE * muon_update_limit(train, theta[n].shape, steps) if muon else adam_limit
        out[n] = torch.clamp(before_last[n] + s, base - limit, base + limit) - before_last[n]
        if muon:
            moved = before_last[n] + out[n] - base
            shrink = min(1.0, 1 / max(muon_spectral_excess(moved, limit), 1e-30))
            out[n] = base + moved * shrink - before_last[n]
    return out


class Jump(Adversary):
    """Fakes ``segments`` segments before the last by displacing their end leaves (see the module)."""

    name = "jump"
    PARAMS = ("segments", "ratio", "direction", "aim")

    def __init__(self, segments: int = 1, ratio: float = 0.0,
                 direction: Literal["ascent", "gradient", "matrices", "random"] = "ascent",
                 aim: Literal["each", "first"] = "each", seed: int = 0) -> None:
        super().__init__(seed)
        if segments < 1:
            raise ValueError("segments must be at least 1")
        if ratio != 0 and not ratio >= 1:
            raise ValueError("ratio is 0 (the edge of the bound) or at least 1")
        if direction not in ("ascent", "gradient", "matrices", "random"):
            raise ValueError("direction is ascent, gradient, matrices or random")
        if aim not in ("each", "first"):
            raise ValueError("aim is each or first")
        self.segments, self.ratio, self.direction, self.aim = int(segments), float(ratio), direction, aim
        self._first: Tensors | None = None  # aim "first": the direction of the first epoch it forged
        self.honest_delta: dict[int, Tensors] = {}
        """epoch -> the unquantized Δ this host would have committed honestly (for the benchmark)."""
        self.movements: dict[int, tuple[list[dict[str, float]], list[dict[str, float]]]] = {}
        """epoch -> per-segment, per-tensor movements (``verifier.measure.segment_movements``) of the
        honest leaves and of the committed ones (for the benchmark)."""

    def _count(self, spec: RunSpec) -> int:
        return min(self.segments, spec.train.segments - 1)

    def expected_detection(self, spec: RunSpec, k: int) -> float:
        n, m = spec.train.segments - 1, self._count(spec)
        k = min(k, n)
        return 1.0 - math.comb(n - m, k) / math.comb(n, k) if n else 0.0

    def _direction(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                   theta: Mapping[str, torch.Tensor]) -> Tensors:
        """Per tensor, the way to move θ (its sign for ``ascent``; zero where θ is to stay honest)."""
        if self.aim == "first" and self._first is not None:
            return self._first
        if self.direction == "random":
            gen = self.torch_generator(ctx, "direction")
            out = {n: torch.randn(t.shape, generator=gen) for n, t in theta.items()}
        else:
            grad = validation_gradient(spec, dataset, theta)
            if self.direction == "ascent":
                out = {n: torch.sign(g) for n, g in grad.items()}
            elif self.direction == "gradient":
                out = grad
            else:  # matrices: the small tensors are pooled and clipped, so leave them honest
                out = {n: g if g.numel() >= PEER_POOL_COORDINATES else torch.zeros_like(g) for n, g in grad.items()}
        if self.aim == "first":
            self._first = out
        return out

    def _shift(self, spec: RunSpec, theta: Mapping[str, torch.Tensor], honest: list[Checkpoint],
               direction: Tensors) -> Tensors:
        """The total displacement of θ: per tensor, along ``direction``, sized by ``ratio`` (or to
        :data:`EDGE` of the bound of ``(S − 1)·c`` steps from θ_e, measured from the honest leaf
        ``S − 1``). A tensor whose direction is 0 is not moved."""
        before_last = honest[-2].state.params
        out = {}
        for n, d in direction.items():
            top = float(d.abs().max()) if d.numel() else 0.0
            if top == 0:
                out[n] = torch.zeros_like(d)
            elif self.ratio == 0:
                out[n] = d / top * 1e30  # clamped to the edge below (0 where the direction is 0)
            else:
                unit = d / max(_norm(d), 1e-30)
                out[n] = unit * jump_size(theta[n] - honest[-1].state.params[n], unit, self.ratio)
        return _within_edge(spec, theta, before_last, out)

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        start = start_checkpoint(spec, start_params, ctx.epoch)
        honest = honest_epoch(spec, dataset, ctx, start, None)
        self.honest_delta[ctx.epoch] = {n: start_params[n] - honest[-1].state.params[n] for n in start_params}
        shift = self._shift(spec, start_params, honest, self._direction(spec, dataset, ctx, start_params))
        # The m segments right before the last: challenges are uniform, so which ones does not change
        # the odds, and an edge-sized jump then has only the last segment's honest steps after it.
        fakes = list(range(spec.train.segments - 1 - self._count(spec), spec.train.segments - 1))
        leaves = self._displaced(spec, dataset, ctx, start, fakes, shift, on_step)
        if self.ratio:
            # The honest steps after the jump respond to it, so the committed Δ is not exactly the
            # aimed one: scale the whole shift by the largest λ that keeps every tensor within the ratio.
            honest_delta = self.honest_delta[ctx.epoch]

            def worst(candidate: list[Checkpoint]) -> float:
                end = candidate[-1].state.params
                return max(_norm(start_params[n] - end[n]) / max(_norm(d), 1e-30) for n, d in honest_delta.items())

            low, high, best = 0.0, 1.5, None
            for _ in range(CORRECTIONS):
                mid = (low + high) / 2
                scaled = _within_edge(spec, start_params, honest[-2].state.params,
                                      {n: t * mid for n, t in shift.items()})
                candidate = self._displaced(spec, dataset, ctx, start, fakes, scaled, None)
                if worst(candidate) <= self.ratio:
                    low, best = mid, candidate
                else:
                    high = mid
            leaves = best if best is not None and worst(leaves) > self.ratio else leaves
        self.faked[ctx.epoch] = fakes
        self.movements[ctx.epoch] = (segment_movements([leaf.state.params for leaf in honest]),
                                     segment_movements([leaf.state.params for leaf in leaves]))
        return commit_leaves(spec, ctx, leaves, root)

    @staticmethod
    def _displaced(spec: RunSpec, dataset: Dataset, ctx: EpochContext, start: Checkpoint, fakes: list[int],
                   shift: Tensors, on_step: StepCallback | None) -> list[Checkpoint]:
        stepper = Stepper(spec)
        leaves = [start]
        for g in range(spec.train.segments):
            stepper.load(leaves[-1].state)
            leaf = run_segment(stepper, dataset, spec, ctx, 1, on_step)
            if g in fakes:  # the same honest-looking moments and losses, displaced parameters
                params = {n: p + shift[n] / len(fakes) for n, p in leaf.state.params.items()}
                leaf = Checkpoint(clone_state(leaf.state, params=params), leaf.losses, leaf.micro_batches)
            leaves.append(leaf)
        return leaves
