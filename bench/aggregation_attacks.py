"""Robust-aggregation attacks that slip past sampling: ALIE and IPM reached through ONE faked segment.

The catalogue's ``alie`` and ``ipm`` (``verifier.adversaries``) commit a forged Δ next to honest
leaves; the last segment is always replayed and its Δ check catches them every epoch, like
``sign_flip`` and ``scaled``. An attacker that wants to pass verification must instead make its
committed leaves *produce* the Δ it wants. This module does that with a single faked segment:

1. train segments ``0 … g`` honestly (leaves ``0 … g`` are real);
2. fake segment ``g``: leaf ``g + 1`` is the honest leaf ``g + 1`` with its parameters moved by an
   offset ``o`` (AdamW moments, step, RNG key and losses untouched, so every plausibility check on
   the leaf holds);
3. train segments ``g + 1 … S − 1`` honestly from the faked leaf, so they replay exactly, and
   commit ``Δ = θ_e − θ_S`` of the last leaf, so the Δ check of the always-challenged last segment
   holds too;
4. pick ``o`` so that the committed Δ is the target Δ*: start from ``o = θ_e − θ_{g+1} − Δ*``
   (as if the tail did not move), then correct ``o += Δ − Δ*`` and train the tail again
   (``iters`` tail runs; the best one is kept).

Only segment ``g`` fails when replayed, so the attacker is caught exactly when ``g`` is among the
``k`` challenged segments drawn from the first ``S − 1``: probability ``min(k, S−1) / (S − 1)`` per
epoch (:func:`caught`, :meth:`Steered.expected_detection`), not 1. The default ``g = S − 2`` (the
segment before the last) leaves one honest segment to drift from the target; any ``g < S − 1`` has
the same detection probability.

Targets (Δs of honest peers, dequantized as served; sums in float64, left to right in address order):

``alie``  Baruch et al. 2019, "a little is enough": coordinate-wise ``mean − z · std`` (population std).
``ipm``   Xie et al. 2020, inner-product manipulation: ``−ε · mean``.

The attacker commits after its honest peers (it waits until they serve their Δ), so it knows their
Δs exactly: the omniscient form of both attacks. Colluding attackers all aim at the same Δ*.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import torch

from node.events import EventKind
from node.host import HostNode
from protocol.rules.sampling import challenged_segments
from protocol.rules.spec import RunSpec
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.checkpoint import Checkpoint
from trainer.data import Dataset
from trainer.delta import decode_delta, dequantize, pseudo_gradient
from trainer.inner import EpochContext, EpochResult, StepCallback, run_segment, start_checkpoint
from trainer.model import parameter_shapes
from trainer.step import Stepper, TrainState
from verifier.adversaries import Adversary, commit_leaves

Delta = dict[str, torch.Tensor]

TARGETS = ("alie", "ipm")


def target_delta(kind: str, honest: Mapping[str, Mapping[str, torch.Tensor]], param: float) -> Delta:
    """The Δ* an attacker aims at, from the honest hosts' Δs (address -> tensors).

    ``alie``: ``mean − param · std``; ``ipm``: ``−param · mean``. Deterministic: float64, hosts in
    address order, each reduction an explicit left-to-right sum.
    """
    if kind not in TARGETS:
        raise ValueError(f"unknown target {kind!r} (known: {', '.join(TARGETS)})")
    if not honest:
        raise ValueError("the attack needs at least one honest Δ")
    hosts = sorted(honest)
    n = len(hosts)
    out: Delta = {}
    for name in sorted(honest[hosts[0]]):
        total = torch.zeros_like(honest[hosts[0]][name], dtype=torch.float64)
        for h in hosts:
            total = total + honest[h][name].to(torch.float64)
        mean = total / n
        if kind == "ipm":
            out[name] = (-param * mean).to(torch.float32)
            continue
        sq = torch.zeros_like(mean)
        for h in hosts:
            sq = sq + (honest[h][name].to(torch.float64) - mean) ** 2
        out[name] = (mean - param * torch.sqrt(sq / n)).to(torch.float32)
    return out


def _norm(d: Mapping[str, torch.Tensor]) -> float:
    return float(sum(float(t.double().pow(2).sum()) for t in d.values())) ** 0.5


def relative_gap(delta: Mapping[str, torch.Tensor], target: Mapping[str, torch.Tensor]) -> float:
    """``‖Δ − Δ*‖ / ‖Δ*‖``."""
    return _norm({n: delta[n].double() - target[n].double() for n in target}) / max(_norm(target), 1e-30)


def default_segment(spec: RunSpec) -> int:
    """The segment a steering attacker fakes by default: ``S − 2``, the one before the always-checked last."""
    if spec.train.segments < 2:
        raise ValueError("steering needs at least two segments (the last one is always checked)")
    return spec.train.segments - 2


def steer_epoch(spec: RunSpec, dataset: Dataset, ctx: EpochContext, start_params: Mapping[str, torch.Tensor],
                target: Mapping[str, torch.Tensor], segment: int | None = None, iters: int = 3,
                stepper: Stepper | None = None, on_step: StepCallback | None = None) -> tuple[list[Checkpoint], float]:
    """An epoch whose only faked segment is ``segment`` and whose Δ is as close to ``target`` as it gets.

    Returns:
        The ``S + 1`` leaves to commit, and ``‖Δ − Δ*‖ / ‖Δ*‖`` of the committed Δ (before quantization).
    """
    S = spec.train.segments
    g = default_segment(spec) if segment is None else segment
    if not 0 <= g < S - 1:
        raise ValueError(f"the faked segment must be in [0, {S - 2}] (segment {S - 1} is always checked)")
    stepper = stepper if stepper is not None else Stepper(spec)
    start = start_checkpoint(spec, start_params, ctx.epoch)
    stepper.load(start.state)
    leaves = [start]
    for _ in range(g + 1):  # honest up to leaf g + 1 (the leaf that gets moved)
        leaves.append(run_segment(stepper, dataset, spec, ctx, 1, on_step))
    base = leaves[g + 1]
    theta0 = {n: t.to(torch.float32) for n, t in start_params.items()}
    offset = {n: theta0[n] - base.state.params[n] - target[n] for n in target}
    best: tuple[float, list[Checkpoint]] | None = None
    for _ in range(iters):
        state = TrainState({n: base.state.params[n] + offset[n] for n in base.state.params},
                           {n: t.clone() for n, t in base.state.exp_avg.items()},
                           {n: t.clone() for n, t in base.state.exp_avg_sq.items()},
                           base.state.step, base.state.rng_key)
        faked = Checkpoint(state, base.losses.clone(), base.micro_batches)
        stepper.load(state)
        tail = [run_segment(stepper, dataset, spec, ctx, 1) for _ in range(g + 1, S)]
        delta = pseudo_gradient(theta0, tail[-1].state.params)
        gap = relative_gap(delta, target)
        if best is None or gap < best[0]:
            best = (gap, [*leaves[:g + 1], faked, *tail])
        offset = {n: offset[n] + (delta[n] - target[n]) for n in offset}
    assert best is not None
    return best[1], best[0]


def caught(epoch_seed: bytes, host: str, spec: RunSpec, faked: Sequence[int]) -> bool:
    """Whether the protocol catches a host that faked ``faked`` this epoch: one of them is challenged.

    A faked segment fails its replay (shown with real replays in ``tests/protocol/test_aggregation_attacks.py``),
    every other segment passes; the challenged ones are ``k`` among the first ``S − 1`` plus the last.
    """
    if not spec.verification.enabled:
        return False
    chosen = challenged_segments(epoch_seed, host, spec.train.segments, spec.verification.challenges_k)
    return any(g in chosen for g in faked)


def served_delta(spec: RunSpec, source: ArtifactSource, epoch: int) -> Delta:
    """A peer's Δ as it serves it, dequantized."""
    return dequantize(decode_delta(source.delta(epoch), spec), parameter_shapes(spec), spec.quantization)


class Steered(Adversary):
    """ALIE or IPM through one faked segment (see the module docstring).

    Args:
        attack: ``alie`` or ``ipm``.
        param: ``z`` for ALIE, ``ε`` for IPM.
        peers: address -> artifact source (or a callable returning one) of the honest hosts whose
            Δs define the target; they must have committed before this host trains.
        segment: the segment to fake (default ``S − 2``).
        iters: tail runs to correct the offset.

    Attributes:
        gaps: epoch -> ``‖Δ − Δ*‖ / ‖Δ*‖`` of the committed Δ.
        targets: epoch -> Δ* (float32).
    """

    name = "steered"
    PARAMS = ("attack", "param")

    def __init__(self, attack: str = "alie", param: float = 1.0,
                 peers: Mapping[str, ArtifactSource | Callable[[], ArtifactSource]] | None = None,
                 segment: int | None = None, iters: int = 3, seed: int = 0) -> None:
        super().__init__(seed)
        if attack not in TARGETS:
            raise ValueError(f"attack is one of {', '.join(TARGETS)}")
        if not peers:
            raise ValueError("a steering attacker needs its honest peers' artifact sources (peers=...)")
        self.attack, self.param = attack, float(param)
        self.peers = dict(peers)
        self.segment, self.iters = segment, iters
        self.gaps: dict[int, float] = {}
        self.targets: dict[int, Delta] = {}

    def _source(self, host: str) -> ArtifactSource:
        source = self.peers[host]
        return source if isinstance(source, ArtifactSource) else source()

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        honest = {h: served_delta(spec, self._source(h), ctx.epoch) for h in sorted(self.peers)}
        target = target_delta(self.attack, honest, self.param)
        g = default_segment(spec) if self.segment is None else self.segment
        leaves, gap = steer_epoch(spec, dataset, ctx, start_params, target, g, self.iters, on_step=on_step)
        self.faked[ctx.epoch] = [g]
        self.gaps[ctx.epoch] = gap
        self.targets[ctx.epoch] = target
        return commit_leaves(spec, ctx, leaves, root)

    def expected_detection(self, spec: RunSpec, k: int) -> float:
        n = spec.train.segments - 1
        return min(k, n) / n if n else 0.0


class PatientHost(HostNode):
    """A host node that waits (instead of failing) while a peer whose Δ its behaviour reads has not served it yet.

    The steering attacker must commit after its honest peers; in a one-process network the nodes
    tick in turn, so it may reach its train phase first.
    """

    def _maybe_train(self, info) -> bool:
        try:
            return super()._maybe_train(info)
        except ArtifactUnavailable as exc:
            self.event(info.epoch, EventKind.WAITING_TO_AGGREGATE, f"waiting for peers' Δs: {exc}")
            return False


def make_patient(net, index: int) -> PatientHost:
    """Replace host ``index`` of a :class:`veriloco.network.LocalNetwork` by a :class:`PatientHost`
    with the same key, behaviour, work directory and endpoint (before the network has run). The
    network keeps serving through the old node's source: the same directory and behaviour."""
    old = net.hosts[index]
    node = PatientHost(net.ledger, old.key, net.spec, old.dataset, old.root, net.resolve, behaviour=old.behaviour,
                       name=old.name, on_event=old._on_event)
    net.hosts[index] = node
    return node


def bench_secret(salt: str, epoch: int, address: str) -> bytes:
    """A beacon secret for a simulated participant (the simulation's stand-in for a reveal)."""
    return hashlib.sha256(f"veriloco-bench-aggregation|{salt}|{epoch}|{address}".encode()).digest()
