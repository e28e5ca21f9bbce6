"""Validator behaviours: the honest one and the liars, beside the catalogue's host behaviours.

The validator node (``node.validator``) checks a challenge when its behaviour :attr:`replays`, then
posts what :meth:`ValidatorBehaviour.decide` returns. A lying validator saves the replay and posts
a verdict of its own choosing (or nothing); the contract's tally and slashing are what make that
cost it.
"""

from __future__ import annotations

from decimal import Decimal

from protocol.messages import Outcome, Verdict, evidence_hash
from protocol.views import Challenge


class ValidatorBehaviour:
    """The honest validator: posts the verdict its replay reached. Subclasses lie."""

    name = "honest"
    replays = True
    """Whether the node must replay before :meth:`decide` (liars save the work)."""

    def decide(self, challenge: Challenge, verdict: Verdict | None) -> Verdict | None:
        """The verdict to post for ``challenge`` (``verdict`` is the replay's, or ``None`` without replay)."""
        return verdict

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def forced_verdict(challenge: Challenge, outcome: Outcome, who: str) -> Verdict:
    """A verdict on ``challenge`` reached without replaying (its evidence names who forced it)."""
    return Verdict(epoch=challenge.epoch, host=challenge.host, segment=challenge.segment, outcome=outcome,
                   distance=Decimal(0), evidence=evidence_hash(f"{who}|{challenge.host}|{challenge.segment}".encode()))


class AlwaysPass(ValidatorBehaviour):
    """Votes pass on everything without replaying (a lazy or colluding validator)."""

    name = "always_pass"
    replays = False

    def decide(self, challenge: Challenge, verdict: Verdict | None) -> Verdict | None:
        return forced_verdict(challenge, "pass", self.name)


class AlwaysFail(ValidatorBehaviour):
    """Votes fail on everything without replaying (a griefing validator)."""

    name = "always_fail"
    replays = False

    def decide(self, challenge: Challenge, verdict: Verdict | None) -> Verdict | None:
        return forced_verdict(challenge, "fail", self.name)


class Silent(ValidatorBehaviour):
    """Never votes."""

    name = "silent"
    replays = False

    def decide(self, challenge: Challenge, verdict: Verdict | None) -> Verdict | None:
        return None
