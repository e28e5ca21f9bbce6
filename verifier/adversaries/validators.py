"""Validator behaviours: the honest one and the liars, beside the catalogue's host behaviours.

The validator node (``node.validator``) commits to what :meth:`ValidatorBehaviour.decide` returns
and opens it after the commit window; ``decide`` gets the replay as a call, so the honest validator
replays and a lying one saves the work and commits a verdict of its own choosing (or nothing). A
copying validator (:class:`CopycatValidator`) decides nothing: what it would post, given the others'
public votes (:meth:`~CopycatValidator.copy_commitment`, :meth:`~CopycatValidator.copy_opening`),
is posted by the node's wrapper in ``node.adversaries``. The contract's commit-reveal, disputes,
traps and slashing are what make each of them cost it.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from protocol.messages import Outcome, Verdict, VerdictOpening, evidence_hash
from protocol.views import Challenge, Vote

Replay = Callable[[], Verdict | None]
"""Replays a challenge and returns the replay's verdict (None: no final answer yet, try again later)."""


class ValidatorBehaviour:
    """The honest validator: posts the verdict its replay reached. Subclasses lie."""

    name = "honest"

    def decide(self, challenge: Challenge, replay: Replay) -> Verdict | None:
        """The verdict to commit to for ``challenge``; ``replay()`` replays it. None commits nothing
        (for now)."""
        return replay()

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def forced_verdict(challenge: Challenge, outcome: Outcome, who: str) -> Verdict:
    """A verdict on ``challenge`` reached without replaying (its evidence names who forced it)."""
    return Verdict(epoch=challenge.epoch, host=challenge.host, segment=challenge.segment, outcome=outcome,
                   distance=Decimal(0), evidence=evidence_hash(f"{who}|{challenge.host}|{challenge.segment}".encode()))


class AlwaysPass(ValidatorBehaviour):
    """Votes pass on everything without replaying (a lazy or colluding validator)."""

    name = "always_pass"

    def decide(self, challenge: Challenge, replay: Replay) -> Verdict | None:
        return forced_verdict(challenge, "pass", self.name)


class AlwaysFail(ValidatorBehaviour):
    """Votes fail on everything without replaying (a griefing validator)."""

    name = "always_fail"

    def decide(self, challenge: Challenge, replay: Replay) -> Verdict | None:
        return forced_verdict(challenge, "fail", self.name)


class Silent(ValidatorBehaviour):
    """Never votes."""

    name = "silent"

    def decide(self, challenge: Challenge, replay: Replay) -> Verdict | None:
        return None


class CopycatValidator(ValidatorBehaviour):
    """Posts whatever another validator posted, without replaying: the first commitment it sees on
    the same challenge, then that validator's opening once it is opened (``node.adversaries``
    posts them). Commitments hide the verdict and bind the committer's address, so the copy never
    opens: it ends silent. It decides nothing itself."""

    name = "copycat"

    def decide(self, challenge: Challenge, replay: Replay) -> Verdict | None:
        return None

    def copy_commitment(self, challenge: Challenge, others: list[Vote]) -> str | None:
        """Its commitment for ``challenge`` given what ``others`` posted so far (None: wait)."""
        seen = [v.commitment for v in others if v.round == challenge.round and v.commitment]
        return seen[0] if seen else None

    def copy_opening(self, challenge: Challenge, others: list[Vote]) -> VerdictOpening | None:
        """Its opening for ``challenge`` given what ``others`` opened so far (None: wait)."""
        for v in others:
            if v.round == challenge.round and v.outcome is not None and v.evidence and v.salt:
                return VerdictOpening(epoch=challenge.epoch, host=challenge.host, segment=challenge.segment,
                                      outcome=v.outcome, distance=v.distance or Decimal(0), evidence=v.evidence,
                                      salt=v.salt)
        return None
