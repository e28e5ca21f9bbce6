"""Hosts that play the settlement game rather than the work: ``selective_reveal`` and ``auditor``.

``selective_reveal`` fakes some segments and reveals its beacon secret last: its node
(``node.adversaries``) reads every other reveal from public contract storage and computes the seed
and its challenges, and :meth:`SelectiveReveal.reveal_choice` withholds its reveal when a faked
segment would be checked. Withholding costs the no-reveal slash, at least the invalid slash
by rule, and excludes the Δ, so choosing the seed loses money for one identity
(``docs/contract.md``, "Withholding a reveal").

``auditor`` is an honest host run to catch lazy validators: it deliberately corrupts the end leaf of
``n`` segments (its traps; the segment's update doubled, a replay distance of 0.5, far above any
τ), commits to the trap set with its work, and opens it after the verdicts are committed. A
validator cannot tell a trap from any other challenge; a ``pass`` on one is provably wrong and
forces a dispute, the passer pays, and the auditor takes the catcher share. An auditor is never
accepted (its Δ is excluded), so claiming traps never helps a cheater.
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
from verifier.adversaries.base import SegmentFaker, clone_state
from verifier.adversaries.work import Lazy


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
    """Trains honestly except ``n`` trap segments (drawn among all ``S``), whose end leaf carries the
    segment's update doubled; declares them as its traps."""

    name = "auditor"
    PARAMS = ("n",)

    def __init__(self, n: int = 1, seed: int = 0) -> None:
        super().__init__(seed)
        if n < 1:
            raise ValueError("n must be at least 1")
        self.n = int(n)

    def fakes(self, spec: RunSpec, ctx: EpochContext, rng: random.Random) -> list[int]:
        return sorted(rng.sample(range(spec.train.segments), min(self.n, spec.train.segments)))

    def segment_fake_probability(self, spec: RunSpec) -> float:
        return min(self.n, spec.train.segments) / spec.train.segments

    def fake_segment(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext, stepper: Stepper,
                     leaves: list[Checkpoint], rng: random.Random) -> Checkpoint:
        start = leaves[-1].state
        stepper.load(start)
        honest = run_segment(stepper, dataset, spec, ctx, 1)
        params = {n: 2 * t - start.params[n] for n, t in honest.state.params.items()}
        return Checkpoint(clone_state(honest.state, params=params), honest.losses.clone(), honest.micro_batches)

    def traps(self, epoch: int) -> list[int]:
        return list(self.faked.get(epoch, []))
