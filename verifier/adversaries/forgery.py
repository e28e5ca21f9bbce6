"""Forgeries within the tolerance: hosts that do all the work but steer what they commit.

The rest of the adversary catalogue holds cheats that save work or forge what is checked exactly;
each fails the replay or check of what it fakes. The hosts here train every step and then change their
leaves by as much as the verifier lets them: each forged leaf is the honest end of its segment
moved along a chosen direction, by the largest amount that keeps every replay check within a
``fraction`` of its threshold (found by bisection with the verifier's own measures,
:func:`verifier.measure.compare`, :func:`~verifier.measure.leaf_moment_check` and
:func:`~verifier.measure.update_excess`). The next segment is trained honestly from the forged
leaf, so it replays exactly; every segment passes. What such a host achieves is bounded by the
thresholds, and ``bench/verifier_forgery.py`` measures it: the committed Δ against the honest one,
and the damage to the agreed model over several epochs.

==============================  =================================================================
``poison:direction,fraction``   parameters of every leaf moved along ``direction``: ``undo`` (back
                                along the segment's update), ``amplify`` (further along it),
                                ``random``, ``ascent`` (up the loss gradient of its own batch),
                                ``target`` (towards a fixed other model)
``moments:kind,fraction``       AdamW moments of every leaf before the last: ``v_down`` (all second
                                moments shrunk, so every later step is larger), ``v_down_top``
                                (the 1 % coordinates with the largest steps), ``m_along`` /
                                ``m_against`` (first moments pushed along / against themselves),
                                ``m_untouched`` (first moments of coordinates no gradient reached)
``muon_momentum:kind,fraction``  Muon momenta of every leaf before the last (runs with
                                ``inner_optimizer = "muon"``): moved ``along`` / ``against``
                                themselves, towards ``ascent`` (against the loss gradient of the
                                leaf's next batch: the next steps turn uphill) or ``random``
``low_precision:dtype,steps,where``  ``steps`` of every segment's ``c`` steps computed in
                                ``bfloat16`` / ``float16`` (autocast), the ``last`` or ``first`` ones
``fake_train_loss:factor``      trains honestly, reports ``factor`` × its train loss in the commitment
==============================  =================================================================

``fraction`` is the share of every threshold a forged leaf may use (0.5–0.99 in the benchmark).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F

from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint
from trainer.data import Dataset
from trainer.inner import EpochContext, EpochResult, StepCallback, run_segment, start_checkpoint, train_steps
from trainer.step import Stepper, TrainState, uses_muon
from verifier.adversaries.base import Adversary, clone_state, commit_leaves, epoch_store, loss_tensor
from verifier.measure import compare, leaf_moment_check, update_excess

Tensors = dict[str, torch.Tensor]

BISECTION_STEPS = 14
"""Halvings of the search interval ``[α, 2α]`` for the largest admissible forgery (to 0.01 %)."""


def within(spec: RunSpec, start: Checkpoint, honest: Checkpoint, forged: TrainState, fraction: float) -> bool:
    """Whether ``forged`` passes every check of the segment from ``start`` with ``fraction`` of each
    threshold to spare, when the validator's replay gives ``honest``.

    The replay checks (tensor distances ≤ ``fraction · tau``, moment errors ≤ ``fraction ·
    moment_tolerance``), the leaf's moment bounds and the segment's update bound (both derived,
    no margin to take).
    """
    ver, train = spec.verification, spec.train
    found = compare(honest.state, forged, start.state, train, honest.losses, honest.losses)
    if not (found.distance <= fraction * float(ver.tau)
            and found.moment_error <= fraction * float(ver.moment_tolerance)):
        return False
    if leaf_moment_check(forged, train)[1] is not None:
        return False
    excess, _ = update_excess(start.state.params, forged.params, train, start.state.step, train.segment_steps)
    return excess <= 1


def largest(make: Callable[[float], TrainState], ok: Callable[[TrainState], bool], high: float = 1.0) -> float:
    """The largest ``α ≥ 0`` with ``ok(make(α))``, by bisection (0 when even a tiny one fails).

    From ``high`` the search doubles while the forgery passes (or halves while it fails, down to
    2⁻¹⁰⁰ of ``high``) to bracket the limit within a factor 2, then halves the bracket
    :data:`BISECTION_STEPS` times; the checks are monotone along a fixed direction.
    """
    if ok(make(high)):
        low = high
        for _ in range(100):
            high = 2 * low
            if not ok(make(high)):
                break
            low = high
        else:
            return low
    else:
        for _ in range(100):
            low = high / 2
            if ok(make(low)):
                break
            high = low
        else:
            return 0.0
    for _ in range(BISECTION_STEPS):
        mid = (low + high) / 2
        if ok(make(mid)):
            low = mid
        else:
            high = mid
    return low


class _LeafForger(Adversary):
    """Trains every segment honestly from its own last (forged) leaf, then forges the segment's end.

    Subclasses define :meth:`forge`; :attr:`alphas` records the forgery's size per epoch and leaf.
    """

    PARAMS: tuple[str, ...] = ()
    KINDS: tuple[str, ...] = ()
    """The ``kind`` values a forger with a ``kind`` parameter takes (:meth:`checked_kind`)."""
    forge_last = True
    """Whether the last leaf is forged too (its moments do not matter: the next epoch starts fresh)."""

    def __init__(self, fraction: float = 0.9, seed: int = 0) -> None:
        super().__init__(seed)
        if not 0 < fraction < 1:
            raise ValueError("fraction must be in (0, 1): at 1 a forgery sits on the threshold")
        self.fraction = float(fraction)
        self.alphas: dict[int, list[float]] = {}

    def first_guess(self, spec: RunSpec) -> float:
        """Where the search for the largest forgery starts (it doubles from here until one fails)."""
        ver = spec.verification
        return self.fraction * min(float(ver.tau), float(ver.moment_tolerance)) / 4

    def checked_kind(self, kind: str) -> str:
        """``kind`` if it is one of :attr:`KINDS`; a clear error otherwise."""
        if kind not in self.KINDS:
            raise ValueError(f"kind is one of {', '.join(self.KINDS)}")
        return kind

    def forge(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, start: Checkpoint,
              honest: Checkpoint) -> tuple[TrainState, float]:
        """The committed end of the segment from ``start`` whose honest end is ``honest``, and its size."""
        raise NotImplementedError

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        stepper = Stepper(spec)
        leaves = [start_checkpoint(spec, start_params, ctx.epoch)]
        alphas = []
        for g in range(spec.train.segments):
            stepper.load(leaves[-1].state)
            honest = run_segment(stepper, dataset, spec, ctx, 1, on_step)
            if g < spec.train.segments - 1 or self.forge_last:
                state, alpha = self.forge(spec, dataset, ctx, leaves[-1], honest)
                honest = Checkpoint(state, honest.losses, honest.micro_batches)
                alphas.append(alpha)
            leaves.append(honest)
        self.alphas[ctx.epoch] = alphas
        self.faked[ctx.epoch] = []  # every segment passes its replay: nothing a validator can fail
        return commit_leaves(spec, ctx, leaves, root)

    def expected_detection(self, spec: RunSpec, k: int) -> float:
        return 0.0


def _per_tensor_unit(direction: Mapping[str, torch.Tensor], scale: Mapping[str, torch.Tensor]) -> Tensors:
    # Each tensor of `direction` rescaled to the norm of the same tensor of `scale` (zero stays zero),
    # so that α is directly each tensor's share of its own update.
    out = {}
    for n, d in direction.items():
        dn, sn = float(d.double().norm()), float(scale[n].double().norm())
        out[n] = d * (sn / dn) if dn > 0 else torch.zeros_like(d)
    return out


class Poison(_LeafForger):
    """Parameter poisoning: every leaf's parameters moved along ``direction`` by up to ``fraction`` τ."""

    name = "poison"
    PARAMS = ("direction", "fraction")
    DIRECTIONS = ("undo", "amplify", "random", "ascent", "target")

    def __init__(self, direction: Literal["undo", "amplify", "random", "ascent", "target"] = "ascent",
                 fraction: float = 0.9, seed: int = 0) -> None:
        super().__init__(fraction, seed)
        if direction not in self.DIRECTIONS:
            raise ValueError(f"direction is one of {', '.join(self.DIRECTIONS)}")
        self.direction = direction

    def _direction(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, start: Checkpoint,
                   honest: Checkpoint) -> Tensors:
        update = {n: honest.state.params[n] - start.state.params[n] for n in honest.state.params}
        if self.direction == "undo":
            return {n: -u for n, u in update.items()}
        if self.direction == "amplify":
            return update
        if self.direction in ("random", "target"):
            # "target": one fixed direction for the whole run (a model the host steers towards);
            # "random": a fresh one for every leaf of every epoch.
            what = "target" if self.direction == "target" else f"random|{honest.state.step}"
            run = EpochContext(ctx.run_id, 0, ctx.host, ctx.prev_epoch_seed) if self.direction == "target" else ctx
            gen = self.torch_generator(run, what)
            return {n: torch.randn(u.shape, generator=gen) for n, u in update.items()}
        return _loss_gradient(spec, dataset, ctx, honest)

    def forge(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, start: Checkpoint,
              honest: Checkpoint) -> tuple[TrainState, float]:
        direction = _per_tensor_unit(self._direction(spec, dataset, ctx, start, honest),
                                     {n: honest.state.params[n] - start.state.params[n] for n in honest.state.params})

        def make(alpha: float) -> TrainState:
            moved = {n: honest.state.params[n] + alpha * d for n, d in direction.items()}
            return clone_state(honest.state, params=moved)

        alpha = largest(make, lambda s: within(spec, start, honest, s, self.fraction), high=self.first_guess(spec))
        return make(alpha), alpha


def _loss_gradient(spec: RunSpec, dataset: Dataset, ctx: EpochContext, leaf: Checkpoint) -> Tensors:
    """∇ of the loss at ``leaf``'s parameters on the batch of its next step (the way up)."""
    stepper = Stepper(spec)
    stepper.load(leaf.state)
    x, y = dataset.batch(ctx.run_id, ctx.prev_epoch_seed, ctx.host, leaf.state.step, spec.train.batch_size)
    logits = stepper.model(x)
    F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).backward()
    # A parameter the loss does not reach has no gradient: no way up along it.
    return {n: p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p.detach())
            for n, p in stepper.named.items()}


class Moments(_LeafForger):
    """Optimizer-state forging: every leaf but the last carries moments changed by ``kind``."""

    name = "moments"
    PARAMS = ("kind", "fraction")
    KINDS = ("v_down", "v_down_top", "m_along", "m_against", "m_untouched")
    forge_last = False

    def __init__(self, kind: Literal["v_down", "v_down_top", "m_along", "m_against", "m_untouched"] = "v_down",
                 fraction: float = 0.9, seed: int = 0) -> None:
        super().__init__(fraction, seed)
        self.kind = self.checked_kind(kind)

    def forge(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, start: Checkpoint,
              honest: Checkpoint) -> tuple[TrainState, float]:
        m, v, eps = honest.state.exp_avg, honest.state.exp_avg_sq, float(spec.train.eps)
        if self.kind == "v_down_top":
            # The 1 % of coordinates with the largest normalized steps |m| / (√v + ε).
            ratio = torch.cat([(m[n].abs() / (v[n].sqrt() + eps)).reshape(-1) for n in sorted(m)])
            k = max(1, ratio.numel() // 100)
            cut = float(ratio.topk(k).values.min())
            mask = {n: (m[n].abs() / (v[n].sqrt() + eps)) >= cut for n in m}
        else:
            mask = {n: torch.ones_like(t, dtype=torch.bool) for n, t in m.items()}

        def make(alpha: float) -> TrainState:
            if self.kind in ("v_down", "v_down_top"):
                shrink = max(0.0, 1.0 - alpha) ** 2
                shrunk = {n: torch.where(mask[n], t * shrink, t) for n, t in v.items()}
                return clone_state(honest.state, exp_avg_sq=shrunk)
            scale = {n: v[n].sqrt() + eps for n in v}
            if self.kind == "m_untouched":
                # Coordinates no gradient reached (v = 0): pushed to grow their parameter's magnitude.
                step = {n: torch.where(v[n] == 0, alpha * scale[n] * honest.state.params[n].sign(),
                                       torch.zeros_like(t)) for n, t in m.items()}
            else:
                sign = 1.0 if self.kind == "m_along" else -1.0
                step = {n: sign * alpha * scale[n] * t.sign() for n, t in m.items()}
            return clone_state(honest.state, exp_avg={n: m[n] + step[n] for n in m})

        alpha = largest(make, lambda s: within(spec, start, honest, s, self.fraction), high=self.first_guess(spec))
        return make(alpha), alpha


class MuonMomentum(_LeafForger):
    """Muon-momentum forging: every leaf but the last carries the Muon momentum of its hidden
    matrices (``exp_avg`` of the tensors :func:`trainer.step.uses_muon` picks) moved by ``kind``.

    Newton–Schulz normalizes the momentum, so a forged one turns the next segment's steps rather than
    growing them; the replay of the segment that ends at the leaf holds it to ``moment_tolerance`` of
    the tensor's RMS per coordinate and ``tau`` per tensor, and the leaf check to the norm cap.
    """

    name = "muon_momentum"
    PARAMS = ("kind", "fraction")
    KINDS = ("along", "against", "ascent", "random")
    forge_last = False

    def __init__(self, kind: Literal["along", "against", "ascent", "random"] = "ascent",
                 fraction: float = 0.9, seed: int = 0) -> None:
        super().__init__(fraction, seed)
        self.kind = self.checked_kind(kind)

    def forge(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, start: Checkpoint,
              honest: Checkpoint) -> tuple[TrainState, float]:
        m = honest.state.exp_avg
        muon = [n for n in sorted(m) if uses_muon(n, m[n], spec.train)]
        if not muon:
            raise ValueError("muon_momentum needs a run whose inner optimizer is muon")
        if self.kind == "along":
            direction = {n: m[n] for n in muon}
        elif self.kind == "against":
            direction = {n: -m[n] for n in muon}
        elif self.kind == "ascent":
            # Muon steps along −NS(m): a momentum moved against the loss gradient turns the next
            # steps uphill.
            gradient = _loss_gradient(spec, dataset, ctx, honest)
            direction = {n: -gradient[n] for n in muon}
        else:
            gen = self.torch_generator(ctx, f"random|{honest.state.step}")
            direction = {n: torch.randn(m[n].shape, generator=gen) for n in muon}
        unit = _per_tensor_unit(direction, {n: m[n] for n in muon})  # α: each tensor's share of ‖m‖

        def make(alpha: float) -> TrainState:
            return clone_state(honest.state, exp_avg={n: m[n] + alpha * unit[n] if n in unit else m[n] for n in m})

        alpha = largest(make, lambda s: within(spec, start, honest, s, self.fraction), high=self.first_guess(spec))
        return make(alpha), alpha


class LowPrecision(Adversary):
    """Computes ``steps`` of every segment's ``c`` steps in low precision (autocast).

    What it saves is arithmetic on those steps; its leaves are honest otherwise. Whether a segment
    passes depends on how far one low-precision step moves the state relative to τ.
    """

    name = "low_precision"
    PARAMS = ("dtype", "steps", "where")
    DTYPES: ClassVar[dict[str, torch.dtype]] = {"bfloat16": torch.bfloat16, "float16": torch.float16}

    def __init__(self, dtype: Literal["bfloat16", "float16"] = "bfloat16", steps: int = 1,
                 where: Literal["last", "first"] = "last", seed: int = 0) -> None:
        super().__init__(seed)
        if dtype not in self.DTYPES or where not in ("last", "first") or steps < 1:
            raise ValueError("dtype is bfloat16 or float16, where is last or first, steps >= 1")
        self.dtype, self.steps, self.where = dtype, int(steps), where

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        c = spec.train.segment_steps
        n = min(self.steps, c)
        low = set(range(c - n, c)) if self.where == "last" else set(range(n))
        stepper = Stepper(spec)
        leaves = [start_checkpoint(spec, start_params, ctx.epoch)]
        stepper.load(leaves[0].state)
        for g in range(spec.train.segments):
            losses = []
            for i in range(c):
                t = g * c + i
                if i in low:
                    with torch.autocast("cpu", dtype=self.DTYPES[self.dtype]):
                        losses += train_steps(stepper, dataset, spec, ctx, range(t, t + 1), 1, on_step)
                else:
                    losses += train_steps(stepper, dataset, spec, ctx, range(t, t + 1), 1, on_step)
            leaves.append(Checkpoint(stepper.export(), loss_tensor(losses), 1))
        self.faked[ctx.epoch] = list(range(spec.train.segments))
        return commit_leaves(spec, ctx, leaves, root)


class FakeTrainLoss(Adversary):
    """Trains honestly but reports ``factor`` × its train loss in the commitment (to look better)."""

    name = "fake_train_loss"
    PARAMS = ("factor",)

    def __init__(self, factor: float = 0.9, seed: int = 0) -> None:
        super().__init__(seed)
        self.factor = float(factor)

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        result = super().train_epoch(spec, dataset, ctx, start_params, root, on_step)
        reported = max(0, round(result.commitment.train_loss_micro * self.factor))
        record = epoch_store(root, ctx).recommit(spec, ctx.epoch, reported_loss=reported)
        self.faked[ctx.epoch] = list(range(spec.train.segments))  # every challenge reads the losses
        return replace(result, commitment=record.commitment)


FORGERIES: tuple[type[Adversary], ...] = (Poison, Moments, MuonMomentum, LowPrecision, FakeTrainLoss)
"""The classes of this family (registered in :mod:`verifier.adversaries.registry`)."""


def delta_ratio(honest: Mapping[str, torch.Tensor], forged: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """``‖Δ_forged‖ / ‖Δ_honest‖`` and ``‖Δ_forged − Δ_honest‖ / ‖Δ_honest‖``."""
    hn = math.sqrt(sum(float(t.double().pow(2).sum()) for t in honest.values()))
    fn = math.sqrt(sum(float(t.double().pow(2).sum()) for t in forged.values()))
    dn = math.sqrt(sum(float((forged[n].double() - honest[n].double()).pow(2).sum()) for n in honest))
    return {"norm_ratio": fn / hn if hn else math.inf, "deviation": dn / hn if hn else math.inf}
