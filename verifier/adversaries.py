"""The adversary catalogue: hosts that fake work or withhold it, and validators that lie.

Every host adversary is a :class:`trainer.behaviour.HostBehaviour`: it writes its epoch in exactly
the on-disk format of an honest host (leaves, ``delta.safetensors``, ``commitment.json``), so
:class:`trainer.artifacts.LocalArtifacts` serves it like any other, and it commits to what it
wrote. Segments it trains honestly go through the trainer's one step function from whatever leaf
it committed before (so they replay correctly); only the segments it fakes differ. After
:meth:`train_epoch` each adversary records which segments of the epoch it faked
(:attr:`Adversary.faked`), and :meth:`Adversary.expected_detection` states the probability that one
validator set catches it in one epoch, given ``k`` challenges plus the last segment and that each
faked segment fails when it is replayed.

Host adversaries (``ADVERSARIES``, parameters in the order ``name:a,b`` gives them):

==================  ==========================================================================
``honest``          the honest host (for comparisons)
``lazy:f,unit,how`` fakes each segment (``unit=segment``) or each step (``unit=step``) with
                    probability ``f``: a faked segment copies its start (``how=copy``) or
                    extrapolates the previous update (``how=extrapolate``); a skipped step
                    leaves the weights alone and repeats the last loss
``noise:scale``     honest leaves; commits a random Δ of ``scale`` × the honest Δ's norm
``scaled:factor``   honest leaves; commits ``factor`` × Δ
``sign_flip``       honest leaves; commits −Δ
``stale:mode``      reuses its previous epoch: ``all`` (leaves, losses and Δ, RNG keys rewritten
                    to this epoch) or ``delta`` (honest leaves, last epoch's Δ)
``copycat:mode``    copies another host (``victim`` source): ``all`` (leaves, losses, Δ) or
                    ``delta`` (honest leaves, the victim's Δ)
``wrong_data:f``    trains a fraction ``f`` of segments on another host's batches
``wrong_lr:factor,f``  trains a fraction ``f`` of segments with ``factor`` × the learning rate
``fake_losses:factor``  trains honestly, records and commits ``factor`` × every loss
``withhold:what``   trains honestly, commits, then serves nothing (``all``) or no
                    ``checkpoints`` / ``proofs`` / ``delta`` / ``losses``
``crafted:f``       Zhang et al. 2022 (adversarial examples for PoL): trains a fraction ``f`` of
                    segments on data of its own choosing (one batch it picked, repeated)
``blindfold:f``     Fang et al. 2023, top-Q blindfolding: fakes a fraction ``f`` of the
                    segments before the last with small updates (a verifier that checks only the
                    largest updates never looks at them)
``interpolate:scale``  Fang et al. 2023: leaves on the straight line from θ_e to a target model
                    (a stolen one, or θ_e plus a random direction of ``scale`` × a typical
                    epoch's update), losses computed by forward passes at those points
``infinitesimal``   forges AdamW's second moments (huge ``v``) at leaf 1 so that every later
                    replay makes vanishing updates, then "trains" segments 1… by weight decay
                    alone, at no gradient cost
``alie:z``          commits Δ = mean − z·std of its peers' Δs (``peers`` sources), honest leaves
``ipm:epsilon``     commits Δ = −ε × its honest Δ (inner-product manipulation), honest leaves
==================  ==========================================================================

ALIE and IPM as published assume a Byzantine worker can send any vector. Here Δ must be
``θ_e − θ_S`` of the committed last leaf, and the last segment is always replayed, so the free
form of both is caught like any forged Δ. What they can still do is reach the same Δ through
faked segments (detected at the rate of ``lazy``) or inside the replay tolerance τ (a relative
error of at most τ per segment): that residual is what robust aggregation must absorb
(``protocol.tensors.aggregation``, not here).

Validator behaviours (``VALIDATORS``): ``honest``, ``always_pass``, ``always_fail``, ``silent`` —
applied by the validator daemon to its verdict with :meth:`ValidatorBehaviour.decide`.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import random
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from protocol.rules.merkle import MerkleProof, merkle_root
from protocol.messages import Commitment, Verdict, evidence_hash
from protocol.rules.losses import loss_digest, loss_micro
from protocol.rules.spec import RunSpec
from protocol.views import Challenge

from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.behaviour import HostBehaviour
from trainer.checkpoint import Checkpoint, decode_checkpoint, load_checkpoint
from trainer.data import Dataset
from trainer.delta import decode_delta, delta_hash, dequantize, encode_delta, load_delta, pseudo_gradient, quantize
from trainer.inner import (EpochContext, EpochResult, StepCallback, epoch_dir, leaf_path, run_epoch, run_segment,
                           start_checkpoint, train_steps)
from trainer.model import parameter_shapes
from trainer.step import Stepper, TrainState, epoch_rng_key
from trainer.tensorfile import write_atomic

# --------------------------------------------------------------------------------------------------
# Writing an epoch in the honest host's format


def write_epoch(spec: RunSpec, ctx: EpochContext, leaves: Sequence[Checkpoint], root: Path,
                payload: Mapping[str, torch.Tensor] | None = None) -> EpochResult:
    """Write ``leaves`` (leaf 0 … S), a Δ payload and ``commitment.json`` as an honest host would.

    Args:
        spec: the run spec.
        ctx: whose epoch.
        leaves: ``S + 1`` checkpoints; their ``losses`` make up the committed per-step losses.
        root: the host's work root (:func:`trainer.inner.epoch_dir` below it).
        payload: the quantized Δ to commit; by default the honest one, quantize(θ_0 − θ_S) of the leaves.

    Returns:
        The :class:`~trainer.inner.EpochResult` of what was written and committed.
    """
    if len(leaves) != spec.train.segments + 1:
        raise ValueError(f"an epoch has {spec.train.segments + 1} leaves, got {len(leaves)}")
    directory = epoch_dir(root, ctx)
    directory.mkdir(parents=True, exist_ok=True)
    for i, leaf in enumerate(leaves):
        leaf.save(leaf_path(directory, i))
    if payload is None:
        payload = quantize(pseudo_gradient(leaves[0].state.params, leaves[-1].state.params), spec.quantization)
    payload = dict(payload)
    write_atomic(directory / "delta.safetensors", encode_delta(payload, spec.quantization))
    losses = [x for leaf in leaves[1:] for x in leaf.losses.tolist()]
    micro = [loss_micro(x) for x in losses]
    hashes = [leaf.leaf_hash() for leaf in leaves]
    last = losses[-spec.train.segment_steps:]
    commitment = Commitment(epoch=ctx.epoch, checkpoint_root=merkle_root(hashes).hex(),
                            delta_hash=delta_hash(payload).hex(), loss_digest=loss_digest(micro),
                            segments=spec.train.segments, train_loss_micro=max(0, loss_micro(sum(last) / len(last))))
    record = {"commitment": commitment.model_dump(mode="json"), "leaf_hashes": [h.hex() for h in hashes],
              "losses_micro": micro}
    write_atomic(directory / "commitment.json", json.dumps(record, sort_keys=True, indent=1).encode())
    return EpochResult(commitment, hashes, losses, payload, leaves[-1].state, directory)


def _read_leaves(spec: RunSpec, directory: Path) -> list[Checkpoint]:
    return [load_checkpoint(leaf_path(directory, i), spec, i) for i in range(spec.train.segments + 1)]


def _clone(state: TrainState, **changes: Any) -> TrainState:
    fields = {"params": {n: t.clone() for n, t in state.params.items()},
              "exp_avg": {n: t.clone() for n, t in state.exp_avg.items()},
              "exp_avg_sq": {n: t.clone() for n, t in state.exp_avg_sq.items()},
              "step": state.step, "rng_key": state.rng_key}
    fields.update(changes)
    return TrainState(**fields)


def _losses(values: Sequence[float]) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.float32)


# --------------------------------------------------------------------------------------------------
# Host adversaries


class Adversary(HostBehaviour):
    """A host behaviour that cheats. Subclasses set :attr:`name` and :attr:`PARAMS`.

    Attributes:
        faked: epoch -> the segments it faked in that epoch (after :meth:`train_epoch`).
        seed: mixes into the adversary's own random choices (which segments, which noise).
    """

    name = "adversary"
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


class SegmentFaker(Adversary):
    """Trains segment by segment from its own last leaf and fakes the segments :meth:`fakes` picks."""

    def fakes(self, spec: RunSpec, ctx: EpochContext, rng: random.Random) -> list[int]:
        """The segments to fake this epoch."""
        p = self.segment_fake_probability(spec)
        return [g for g in range(spec.train.segments) if rng.random() < p]

    def fake_segment(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, stepper: Stepper,
                     leaves: list[Checkpoint], rng: random.Random) -> Checkpoint:
        """Leaf ``len(leaves)`` without honest work, from ``leaves[-1]``."""
        raise NotImplementedError

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
        return write_epoch(spec, ctx, leaves, root)


class Lazy(SegmentFaker):
    """Skips work: each segment (``unit="segment"``) or step (``unit="step"``) with probability ``f``.

    A skipped segment is committed as its start with the step counter advanced (``how="copy"``)
    or as the start plus the previous segment's update (``how="extrapolate"``, a lazy host that
    tries to look busy); its losses repeat the last loss it knows. A skipped step leaves weights
    and moments alone (only the counter advances) and repeats the previous loss; a segment with
    at least one skipped step is faked, so per segment ``p = 1 − (1 − f)^c``.
    """

    name = "lazy"
    PARAMS = ("f", "unit", "how")

    def __init__(self, f: float = 0.5, unit: str = "segment", how: str = "copy", seed: int = 0) -> None:
        super().__init__(seed)
        if not 0 <= f <= 1:
            raise ValueError("f must be in [0, 1]")
        if unit not in ("segment", "step") or how not in ("copy", "extrapolate"):
            raise ValueError("unit is 'segment' or 'step'; how is 'copy' or 'extrapolate'")
        self.f, self.unit, self.how = float(f), unit, how

    def segment_fake_probability(self, spec: RunSpec) -> float:
        return self.f if self.unit == "segment" else 1.0 - (1.0 - self.f) ** spec.train.segment_steps

    def fakes(self, spec: RunSpec, ctx: EpochContext, rng: random.Random) -> list[int]:
        if self.unit == "segment":
            return super().fakes(spec, ctx, rng)
        c = spec.train.segment_steps
        self._skip = {t for t in range(spec.train.inner_steps) if rng.random() < self.f}
        return sorted({t // c for t in self._skip})

    @staticmethod
    def _last_loss(leaves: list[Checkpoint]) -> float:
        for leaf in reversed(leaves):
            if leaf.losses.numel():
                return float(leaf.losses[-1])
        return math.log(256.0)  # nothing trained yet: the loss of a uniform guess

    def fake_segment(self, spec, dataset, ctx, stepper, leaves, rng) -> Checkpoint:
        c = spec.train.segment_steps
        prev = leaves[-1]
        if self.unit == "step":
            stepper.load(prev.state)
            losses = []
            last = self._last_loss(leaves)
            for t in range(prev.state.step, prev.state.step + c):
                if t in self._skip:
                    state = stepper.export()
                    state.step += 1
                    stepper.load(state)
                else:
                    last = train_steps(stepper, dataset, spec, ctx, range(t, t + 1), 1)[0]
                losses.append(last)
            return Checkpoint(stepper.export(), _losses(losses), 1)
        params = {n: t.clone() for n, t in prev.state.params.items()}
        if self.how == "extrapolate" and len(leaves) >= 2:
            before = leaves[-2].state.params
            params = {n: 2 * prev.state.params[n] - before[n] for n in params}
        state = _clone(prev.state, params=params, step=prev.state.step + c)
        return Checkpoint(state, _losses([self._last_loss(leaves)] * c), 1)


class WrongData(SegmentFaker):
    """Trains a fraction ``f`` of segments on another host's batches (data it was not assigned)."""

    name = "wrong_data"
    PARAMS = ("f",)

    def __init__(self, f: float = 1.0, seed: int = 0) -> None:
        super().__init__(seed)
        self.f = float(f)

    def segment_fake_probability(self, spec: RunSpec) -> float:
        return self.f

    def fake_segment(self, spec, dataset, ctx, stepper, leaves, rng) -> Checkpoint:
        other = EpochContext(ctx.run_id, ctx.epoch, ctx.host + "-elsewhere", ctx.prev_epoch_seed)
        stepper.load(leaves[-1].state)
        return run_segment(stepper, dataset, spec, other, 1)


class Crafted(SegmentFaker):
    """Zhang et al. 2022: trains on data it chose rather than the data it was assigned.

    The published attack crafts data points so that cheap updates reproduce the checkpoints.
    Here it trains a fraction ``f`` of segments on a batch of its own choosing (the first batch of
    the epoch, repeated: the cheapest data to "craft"). The verifier never takes data from the
    host: a replay draws the windows the chain's randomness assigned, from the content-addressed
    corpus, so crafted points have nowhere to enter.
    """

    name = "crafted"
    PARAMS = ("f",)

    def __init__(self, f: float = 1.0, seed: int = 0) -> None:
        super().__init__(seed)
        self.f = float(f)

    def segment_fake_probability(self, spec: RunSpec) -> float:
        return self.f

    def fake_segment(self, spec, dataset, ctx, stepper, leaves, rng) -> Checkpoint:
        x, y = dataset.batch(ctx.run_id, ctx.prev_epoch_seed, ctx.host, 0, spec.train.batch_size)
        stepper.load(leaves[-1].state)
        losses = [stepper.step(x, y, 1) for _ in range(spec.train.segment_steps)]
        return Checkpoint(stepper.export(), _losses(losses), 1)


class WrongLR(SegmentFaker):
    """Trains a fraction ``f`` of segments with ``factor`` × the spec's learning rate."""

    name = "wrong_lr"
    PARAMS = ("factor", "f")

    def __init__(self, factor: float = 2.0, f: float = 1.0, seed: int = 0) -> None:
        super().__init__(seed)
        self.factor, self.f = float(factor), float(f)

    def segment_fake_probability(self, spec: RunSpec) -> float:
        return self.f

    def fake_segment(self, spec, dataset, ctx, stepper, leaves, rng) -> Checkpoint:
        lr = Decimal(str(self.factor)) * spec.train.lr
        other = Stepper(spec.with_changes(train={"lr": str(lr)}))
        other.load(leaves[-1].state)
        return run_segment(other, dataset, spec, ctx, 1)


class Blindfold(SegmentFaker):
    """Fang et al. 2023, top-Q blindfolding: fake segments hidden behind small updates.

    Against a verifier that replays only the Q steps with the largest updates, faked steps with
    small updates are never looked at. This host fakes ``m = round(f · (S − 1))`` of the segments
    before the last (it knows the last one is always checked): each faked leaf moves 1 % of the
    previous update's way. Here the challenged segments come from a seed revealed after the
    commitment, uniformly, so the update size hides nothing: each of the ``k`` challenges lands on
    a faked segment with probability ``m / (S − 1)`` (without replacement).
    """

    name = "blindfold"
    PARAMS = ("f",)

    def __init__(self, f: float = 0.5, seed: int = 0) -> None:
        super().__init__(seed)
        self.f = float(f)

    def _count(self, spec: RunSpec) -> int:
        return min(spec.train.segments - 1, round(self.f * (spec.train.segments - 1)))

    def fakes(self, spec, ctx, rng) -> list[int]:
        return sorted(rng.sample(range(spec.train.segments - 1), self._count(spec)))

    def expected_detection(self, spec: RunSpec, k: int) -> float:
        n, m = spec.train.segments - 1, self._count(spec)
        k = min(k, n)
        return 1.0 - math.comb(n - m, k) / math.comb(n, k) if n else 0.0

    def fake_segment(self, spec, dataset, ctx, stepper, leaves, rng) -> Checkpoint:
        prev = leaves[-1]
        before = leaves[-2].state.params if len(leaves) >= 2 else prev.state.params
        params = {n: prev.state.params[n] + 0.01 * (prev.state.params[n] - before[n]) for n in prev.state.params}
        if len(leaves) < 2:  # nothing to extrapolate: a tiny step along a fixed random direction
            gen = self.torch_generator(ctx, "blindfold")
            params = {n: t + 1e-4 * float(spec.train.lr) * torch.randn(t.shape, generator=gen)
                      for n, t in prev.state.params.items()}
        last = float(prev.losses[-1]) if prev.losses.numel() else math.log(256.0)
        state = _clone(prev.state, params=params, step=prev.state.step + spec.train.segment_steps)
        return Checkpoint(state, _losses([last] * spec.train.segment_steps), 1)


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

    def train_epoch(self, spec, dataset, ctx, start_params, root, on_step=None) -> EpochResult:
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
            state = _clone(start.state, params=params, step=i * c)
            leaves.append(Checkpoint(state, _losses(losses), 1))
        self.faked[ctx.epoch] = list(range(S))
        return write_epoch(spec, ctx, leaves, root)


def _forward_loss(stepper: Stepper, dataset: Dataset, spec: RunSpec, ctx: EpochContext,
                  params: Mapping[str, torch.Tensor], step: int) -> float:
    x, y = dataset.batch(ctx.run_id, ctx.prev_epoch_seed, ctx.host, step, spec.train.batch_size)
    with torch.no_grad():
        for n, p in stepper.named.items():
            p.copy_(params[n])
        logits = stepper.model(x)
        return float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)))


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

    def train_epoch(self, spec, dataset, ctx, start_params, root, on_step=None) -> EpochResult:
        stepper = Stepper(spec)
        start = start_checkpoint(spec, start_params, ctx.epoch)
        stepper.load(start.state)
        honest = run_segment(stepper, dataset, spec, ctx, 1, on_step)
        forged = _clone(honest.state, exp_avg={n: torch.zeros_like(t) for n, t in honest.state.exp_avg.items()},
                        exp_avg_sq={n: torch.full_like(t, 1e6) for n, t in honest.state.exp_avg_sq.items()})
        leaves = [start, Checkpoint(forged, honest.losses.clone(), 1)]
        c, lr, wd = spec.train.segment_steps, float(spec.train.lr), float(spec.train.weight_decay)
        decay = (1.0 - lr * wd) ** c
        last = float(honest.losses[-1])
        for i in range(2, spec.train.segments + 1):
            prev = leaves[-1].state
            params = {n: (t * decay if t.dim() >= 2 else t.clone()) for n, t in prev.params.items()}
            leaves.append(Checkpoint(_clone(prev, params=params, step=i * c), _losses([last] * c), 1))
        self.faked[ctx.epoch] = list(range(spec.train.segments))
        return write_epoch(spec, ctx, leaves, root)


class HonestThenRecommit(Adversary):
    """Trains honestly, then commits another Δ (the Δ-level attacks). Subclasses define :meth:`forge`."""

    def forge(self, spec: RunSpec, ctx: EpochContext, honest: dict[str, torch.Tensor],
              root: Path) -> dict[str, torch.Tensor]:
        """The float Δ to commit instead of ``honest``."""
        raise NotImplementedError

    def train_epoch(self, spec, dataset, ctx, start_params, root, on_step=None) -> EpochResult:
        result = run_epoch(spec, dataset, ctx, start_params, root, on_step=on_step)
        assert result is not None
        leaves = _read_leaves(spec, result.directory)
        honest = pseudo_gradient(leaves[0].state.params, leaves[-1].state.params)
        payload = quantize(self.forge(spec, ctx, honest, root), spec.quantization)
        self.faked[ctx.epoch] = [spec.train.segments - 1]
        return write_epoch(spec, ctx, leaves, root, payload)


class NoiseDelta(HonestThenRecommit):
    """Commits Gaussian noise with ``scale`` × the honest Δ's norm."""

    name = "noise"
    PARAMS = ("scale",)

    def __init__(self, scale: float = 1.0, seed: int = 0) -> None:
        super().__init__(seed)
        self.scale = float(scale)

    def forge(self, spec, ctx, honest, root):
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

    def forge(self, spec, ctx, honest, root):
        return {n: t * self.factor for n, t in honest.items()}


class SignFlipDelta(HonestThenRecommit):
    """Commits −Δ."""

    name = "sign_flip"

    def forge(self, spec, ctx, honest, root):
        return {n: -t for n, t in honest.items()}


class IPM(HonestThenRecommit):
    """Inner-product manipulation (Xie et al. 2020): commits −ε × its honest Δ (a proxy for the mean)."""

    name = "ipm"
    PARAMS = ("epsilon",)

    def __init__(self, epsilon: float = 0.5, seed: int = 0) -> None:
        super().__init__(seed)
        self.epsilon = float(epsilon)

    def forge(self, spec, ctx, honest, root):
        return {n: -self.epsilon * t for n, t in honest.items()}


def _peer_delta(spec: RunSpec, source: ArtifactSource, epoch: int) -> dict[str, torch.Tensor]:
    payload = decode_delta(source.delta(epoch), spec)
    return dequantize(payload, parameter_shapes(spec), spec.quantization)


class ALIE(HonestThenRecommit):
    """A little is enough (Baruch et al. 2019): commits mean − z·std of its peers' Δs."""

    name = "alie"
    PARAMS = ("z",)

    def __init__(self, z: float = 1.0, peers: Sequence[ArtifactSource] = (), seed: int = 0) -> None:
        super().__init__(seed)
        if not peers:
            raise ValueError("alie needs the artifact sources of its peers (peers=...)")
        self.z, self.peers = float(z), list(peers)

    def forge(self, spec, ctx, honest, root):
        deltas = [_peer_delta(spec, p, ctx.epoch) for p in self.peers] + [honest]
        out = {}
        for n in honest:
            stack = torch.stack([d[n] for d in deltas])
            out[n] = stack.mean(0) - self.z * stack.std(0, unbiased=False)
        return out


class StaleDelta(Adversary):
    """Reuses its own previous epoch.

    ``mode="all"``: no training; commits epoch ``e − 1``'s leaves (RNG keys rewritten to epoch
    ``e``'s, so leaves look current), losses and Δ. ``mode="delta"``: honest leaves, last epoch's
    Δ. In epoch 0, or without a previous epoch in ``root``, it has nothing stale and trains honestly.
    """

    name = "stale"
    PARAMS = ("mode",)

    def __init__(self, mode: str = "all", seed: int = 0) -> None:
        super().__init__(seed)
        if mode not in ("all", "delta"):
            raise ValueError("mode is 'all' or 'delta'")
        self.mode = mode

    def train_epoch(self, spec, dataset, ctx, start_params, root, on_step=None) -> EpochResult:
        prev_ctx = EpochContext(ctx.run_id, ctx.epoch - 1, ctx.host, ctx.prev_epoch_seed)
        prev_dir = epoch_dir(root, prev_ctx) if ctx.epoch > 0 else None
        if prev_dir is None or not (prev_dir / "commitment.json").exists():
            self.faked[ctx.epoch] = []
            return super().train_epoch(spec, dataset, ctx, start_params, root, on_step)
        old_payload = load_delta(prev_dir / "delta.safetensors", spec)
        if self.mode == "delta":
            result = run_epoch(spec, dataset, ctx, start_params, root, on_step=on_step)
            assert result is not None
            self.faked[ctx.epoch] = [spec.train.segments - 1]
            return write_epoch(spec, ctx, _read_leaves(spec, result.directory), root, old_payload)
        key = epoch_rng_key(spec.train.seed, ctx.epoch)
        leaves = [Checkpoint(_clone(leaf.state, rng_key=key), leaf.losses, leaf.micro_batches)
                  for leaf in _read_leaves(spec, prev_dir)]
        self.faked[ctx.epoch] = list(range(spec.train.segments))
        return write_epoch(spec, ctx, leaves, root, old_payload)


class Copycat(Adversary):
    """Copies another host (``victim``, its artifact source).

    ``mode="all"``: the victim's leaves, losses and Δ (a free ride: no training at all).
    ``mode="delta"``: honest leaves, the victim's Δ. The victim must have committed first.
    """

    name = "copycat"
    PARAMS = ("mode",)

    def __init__(self, victim: ArtifactSource | None = None, mode: str = "all", seed: int = 0) -> None:
        super().__init__(seed)
        if victim is None:
            raise ValueError("copycat needs the victim's artifact source (victim=...)")
        if mode not in ("all", "delta"):
            raise ValueError("mode is 'all' or 'delta'")
        self.victim, self.mode = victim, mode

    def train_epoch(self, spec, dataset, ctx, start_params, root, on_step=None) -> EpochResult:
        payload = decode_delta(self.victim.delta(ctx.epoch), spec)
        if self.mode == "delta":
            result = run_epoch(spec, dataset, ctx, start_params, root, on_step=on_step)
            assert result is not None
            self.faked[ctx.epoch] = [spec.train.segments - 1]
            return write_epoch(spec, ctx, _read_leaves(spec, result.directory), root, payload)
        leaves = [decode_checkpoint(self.victim.checkpoint(ctx.epoch, i), spec, i)
                  for i in range(spec.train.segments + 1)]
        self.faked[ctx.epoch] = list(range(spec.train.segments))
        return write_epoch(spec, ctx, leaves, root, payload)


class FakeLosses(Adversary):
    """Trains honestly but records and commits ``factor`` × every loss (to look better)."""

    name = "fake_losses"
    PARAMS = ("factor",)

    def __init__(self, factor: float = 0.9, seed: int = 0) -> None:
        super().__init__(seed)
        self.factor = float(factor)

    def train_epoch(self, spec, dataset, ctx, start_params, root, on_step=None) -> EpochResult:
        result = run_epoch(spec, dataset, ctx, start_params, root, on_step=on_step)
        assert result is not None
        leaves = _read_leaves(spec, result.directory)
        leaves = [leaves[0]] + [Checkpoint(leaf.state, leaf.losses * self.factor, leaf.micro_batches)
                                for leaf in leaves[1:]]
        self.faked[ctx.epoch] = list(range(spec.train.segments))
        return write_epoch(spec, ctx, leaves, root)


class _Withheld(ArtifactSource):
    def __init__(self, inner: ArtifactSource, what: str) -> None:
        self.inner, self.what = inner, what

    def _refuse(self, kind: str) -> None:
        if self.what in ("all", kind):
            raise ArtifactUnavailable(f"withheld ({kind})")

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        self._refuse("checkpoints")
        return self.inner.checkpoint(epoch, leaf)

    def proof(self, epoch: int, leaf: int) -> MerkleProof:
        self._refuse("proofs")
        return self.inner.proof(epoch, leaf)

    def delta(self, epoch: int) -> bytes:
        self._refuse("delta")
        return self.inner.delta(epoch)

    def losses(self, epoch: int) -> list[int]:
        self._refuse("losses")
        return self.inner.losses(epoch)

    def global_state(self, model_hash: str) -> bytes:
        self._refuse("global")
        return self.inner.global_state(model_hash)


class Withhold(Adversary):
    """Trains honestly and commits, then does not serve ``what``: ``all``, ``checkpoints``,
    ``proofs``, ``delta`` or ``losses``. The verdict is ``unavailable``."""

    name = "withhold"
    PARAMS = ("what",)
    _WHAT = ("all", "checkpoints", "proofs", "delta", "losses")

    def __init__(self, what: str = "all", seed: int = 0) -> None:
        super().__init__(seed)
        if what not in self._WHAT:
            raise ValueError(f"what is one of {', '.join(self._WHAT)}")
        self.what = what

    def train_epoch(self, spec, dataset, ctx, start_params, root, on_step=None) -> EpochResult:
        result = super().train_epoch(spec, dataset, ctx, start_params, root, on_step)
        self.faked[ctx.epoch] = ([spec.train.segments - 1] if self.what == "delta"
                                 else list(range(spec.train.segments)))
        return result

    def serve(self, source: ArtifactSource) -> ArtifactSource:
        return _Withheld(source, self.what)


# --------------------------------------------------------------------------------------------------
# Registry


class Honest(HostBehaviour):
    """The honest host under the catalogue's interface (nothing faked)."""

    name = "honest"
    PARAMS: tuple[str, ...] = ()

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self.faked: dict[int, list[int]] = {}

    def train_epoch(self, spec, dataset, ctx, start_params, root, on_step=None) -> EpochResult:
        self.faked[ctx.epoch] = []
        return super().train_epoch(spec, dataset, ctx, start_params, root, on_step)

    def expected_detection(self, spec: RunSpec, k: int) -> float:
        return 0.0


ADVERSARIES: dict[str, type[HostBehaviour]] = {cls.name: cls for cls in (
    Honest, Lazy, NoiseDelta, ScaledDelta, SignFlipDelta, StaleDelta, Copycat, WrongData, WrongLR,
    FakeLosses, Withhold, Crafted, Blindfold, Interpolate, Infinitesimal, ALIE, IPM)}
"""Host behaviour name -> class; construct with keyword parameters, or parse ``name:a,b`` with :func:`make_adversary`."""


def _convert(value: str, default: Any) -> Any:
    # Parameters given in text take the type of their default (float, int or str).
    if isinstance(default, bool) or not isinstance(default, (int, float)):
        return value
    return float(value) if isinstance(default, float) else int(value)


def make_adversary(text: str, **context: Any) -> HostBehaviour:
    """Build a host behaviour from ``name`` or ``name:a,b,key=value`` (e.g. ``lazy:0.5``, ``wrong_lr:1.5,0.25``).

    Positional values fill the class's ``PARAMS`` in order; ``key=value`` sets any parameter.
    ``context`` supplies what a string cannot: ``victim=`` (copycat), ``peers=`` (alie),
    ``target=`` (interpolate), ``seed=``. Context keys a class does not take are ignored.

    Raises:
        ValueError: unknown name, too many or unknown parameters, or a bad value.
    """
    name, _, rest = text.partition(":")
    if name not in ADVERSARIES:
        raise ValueError(f"unknown adversary {name!r} (known: {', '.join(sorted(ADVERSARIES))})")
    cls = ADVERSARIES[name]
    signature = inspect.signature(cls.__init__)
    params = {k: p for k, p in signature.parameters.items() if k != "self"}
    kwargs: dict[str, Any] = {k: v for k, v in context.items() if k in params}
    positional = list(getattr(cls, "PARAMS", ()))
    for i, item in enumerate(x for x in rest.split(",") if x) if rest else []:
        key, eq, value = item.partition("=")
        if not eq:
            if i >= len(positional):
                raise ValueError(f"{name} takes at most {len(positional)} positional parameters ({', '.join(positional)})")
            key, value = positional[i], item
        if key not in params:
            raise ValueError(f"{name} has no parameter {key!r}")
        kwargs[key] = _convert(value, params[key].default)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ValueError(f"{name}: {exc}") from None


# --------------------------------------------------------------------------------------------------
# Validator behaviours


class ValidatorBehaviour:
    """What a validator does with the verdict its replay reached.

    The validator daemon checks a challenge (when :attr:`replays`), then posts
    ``decide(challenge, verdict)`` — or nothing when that is ``None``.
    """

    name = "honest"
    replays = True
    """Whether the daemon must replay before :meth:`decide` (liars save the work)."""

    def decide(self, challenge: Challenge, verdict: Verdict | None) -> Verdict | None:
        """The verdict to post for ``challenge`` (``verdict`` is the replay's, or ``None`` without replay)."""
        return verdict

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _forced(challenge: Challenge, outcome: str, who: str) -> Verdict:
    return Verdict(epoch=challenge.epoch, host=challenge.host, segment=challenge.segment, outcome=outcome,
                   distance=Decimal(0), evidence=evidence_hash(f"{who}|{challenge.host}|{challenge.segment}".encode()))


class AlwaysPass(ValidatorBehaviour):
    """Votes pass on everything without replaying (a lazy or colluding validator)."""

    name = "always_pass"
    replays = False

    def decide(self, challenge, verdict):
        return _forced(challenge, "pass", self.name)


class AlwaysFail(ValidatorBehaviour):
    """Votes fail on everything without replaying (a griefing validator)."""

    name = "always_fail"
    replays = False

    def decide(self, challenge, verdict):
        return _forced(challenge, "fail", self.name)


class Silent(ValidatorBehaviour):
    """Never votes."""

    name = "silent"
    replays = False

    def decide(self, challenge, verdict):
        return None


VALIDATORS: dict[str, type[ValidatorBehaviour]] = {cls.name: cls for cls in (
    ValidatorBehaviour, AlwaysPass, AlwaysFail, Silent)}
"""Validator behaviour name -> class."""


def make_validator_behaviour(name: str) -> ValidatorBehaviour:
    """The validator behaviour called ``name`` (``honest``, ``always_pass``, ``always_fail``, ``silent``)."""
    if name not in VALIDATORS:
        raise ValueError(f"unknown validator behaviour {name!r} (known: {', '.join(sorted(VALIDATORS))})")
    return VALIDATORS[name]()
