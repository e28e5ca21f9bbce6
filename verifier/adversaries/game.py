"""Hosts that play the settlement game rather than the work: ``selective_reveal`` and ``auditor``.

``selective_reveal`` fakes some segments and reveals its beacon secret last: its node
(``node.adversaries``) reads every other reveal from public contract storage and computes the seed
and its challenges, and :meth:`SelectiveReveal.reveal_choice` withholds its reveal when a faked
segment would be checked. Withholding costs the no-reveal slash, at least the invalid slash
by rule, and excludes the Δ, so choosing the seed loses money for one identity
(``docs/contract.md``, "Withholding a reveal").

``auditor`` is an honest host that sets more traps than the spec's ``trap_probability`` (issue 27;
every honest host traps at that rate, ``trainer.trap``): with probability ``p`` per epoch it
perturbs the end leaf of ``n`` segments by a tiny amount (its traps: one
parameter tensor moved by ``sqrt(tau × trap_max_distance)`` of its update, so the honest replay's
distance lies inside the trap window ``[tau, trap_max_distance]``), trains on from the perturbed
leaf, commits to the trap set with its work, and opens it in ``objection``, after every round-0
verdict was committed. A trap is disputed and decided by the stake of every validator, a lazy
``pass`` on it is ``wrong``, and a valid trap leaves the host ``accepted`` (its Δ, trained on from a
perturbation below the model's noise, is aggregated): nobody is marked ``audit``, so a host that
traps looks like one that does not. Since honest hosts trap now and then, a past trap says nothing
about this epoch's (what ``trap_reader`` bets on).
"""

from __future__ import annotations

import math
import random
from typing import Literal

from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint
from trainer.data import Dataset
from trainer.inner import EpochContext, run_segment
from trainer.step import Stepper
from trainer.trap import perturb, trap_size
from verifier.adversaries.base import SegmentFaker
from verifier.adversaries.work import Lazy
from verifier.measure import EPSILON, param_floor


class SelectiveReveal(Lazy):
    """Fakes ``n`` of its segments before the last (``lazy``'s copy) and reveals last: withholds its
    beacon secret whenever its challenges, computed from everyone else's reveals, would hit one."""

    name = "selective_reveal"
    PARAMS: tuple[str, ...] = ("n",)

    def __init__(self, n: int = 1, seed: int = 0) -> None:
        super().__init__(1.0, "segment", "copy", seed)
        if n < 1:
            raise ValueError("n must be at least 1")
        self.n = int(n)

    def _count(self, spec: RunSpec) -> int:
        return min(self.n, spec.train.segments - 1)

    def fakes(self, spec: RunSpec, ctx: EpochContext, rng: random.Random) -> list[int]:
        return sorted(rng.sample(range(spec.train.segments - 1), self._count(spec)))

    def segment_fake_probability(self, spec: RunSpec) -> float:
        return self._count(spec) / max(1, spec.train.segments - 1)

    def expected_detection(self, spec: RunSpec, k: int) -> float:
        """Probability that the challenges hit a faked segment (it withholds then, and pays)."""
        n, m = spec.train.segments - 1, self._count(spec)
        k = min(k, n)
        return 1.0 - math.comb(n - m, k) / math.comb(n, k) if n else 0.0

    def reveal_choice(self, epoch: int, challenged: list[int] | None) -> Literal["reveal", "wait", "withhold"]:
        """Whether to reveal now, given its challenged segments of ``epoch`` if it revealed now as
        the last one (None while others have not revealed: it waits)."""
        if challenged is None:
            return "wait"
        return "withhold" if set(challenged) & set(self.faked.get(epoch, [])) else "reveal"


class Auditor(SegmentFaker):
    """An honest host that, with probability ``p`` per epoch, sets ``n`` trap segments (drawn among
    all ``S``): each trap's end leaf is the honest one with its largest parameter tensor moved by
    ``sqrt(tau × trap_max_distance)`` times that tensor's distance denominator (its update's norm,
    at least the verifier's floor), so an honest replay measures a distance in the middle (on a log
    scale) of the trap window; the next segment trains on from the perturbed leaf. Declares them
    as its traps."""

    name = "auditor"
    PARAMS = ("n", "p")

    def __init__(self, n: int = 1, p: float = 1.0, seed: int = 0) -> None:
        super().__init__(seed)
        if n < 1:
            raise ValueError("n must be at least 1")
        if not 0 <= p <= 1:
            raise ValueError("p must be in [0, 1]")
        self.n, self.p = int(n), float(p)

    def fakes(self, spec: RunSpec, ctx: EpochContext, rng: random.Random) -> list[int]:
        if rng.random() >= self.p:
            return []
        return sorted(rng.sample(range(spec.train.segments), min(self.n, spec.train.segments)))

    def segment_fake_probability(self, spec: RunSpec) -> float:
        return self.p * min(self.n, spec.train.segments) / spec.train.segments

    @staticmethod
    def trap_size(spec: RunSpec) -> float:
        """The relative size of a trap's perturbation: the geometric middle of the trap window."""
        return trap_size(spec)

    def fake_segment(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, stepper: Stepper,
                     leaves: list[Checkpoint], rng: random.Random) -> Checkpoint:
        start = leaves[-1].state
        stepper.load(start)
        honest = run_segment(stepper, dataset, spec, ctx, 1)
        floor = max(param_floor(spec.train, honest.state.step - start.step), EPSILON)
        return Checkpoint(perturb(spec, start, honest.state, rng.getrandbits(63), floor), honest.losses.clone(),
                          honest.micro_batches)

    def traps(self, epoch: int) -> list[int]:
        return list(self.faked.get(epoch, []))
