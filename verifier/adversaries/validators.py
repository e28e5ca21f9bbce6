"""Validator behaviours: the honest one and the liars, beside the catalogue's host behaviours.

The validator node (``node.validator``) checks a challenge when its behaviour :attr:`replays`, then
commits to what :meth:`ValidatorBehaviour.decide` returns and opens it after the commit window. A
lying validator saves the replay and commits a verdict of its own choosing (or nothing); one that
:attr:`~ValidatorBehaviour.copies` posts what it can see of another validator's verdict instead
(:meth:`~ValidatorBehaviour.copy_commitment`, :meth:`~ValidatorBehaviour.copy_opening`). The
contract's commit-reveal, disputes, traps and slashing are what make each of them cost it.
"""

from __future__ import annotations

from decimal import Decimal

from protocol.messages import Outcome, Verdict, VerdictOpening, evidence_hash
from protocol.views import Challenge, Vote


class ValidatorBehaviour:
    """The honest validator: posts the verdict its replay reached. Subclasses lie."""

    name = "honest"
    replays = True
    """Whether the node must replay before :meth:`decide` (liars save the work)."""
    copies = False
    """Whether it copies another validator's verdict rather than deciding one."""

    def decide(self, challenge: Challenge, verdict: Verdict | None) -> Verdict | None:
        """The verdict to commit to for ``challenge`` (``verdict`` is the replay's, or ``None``
        without replay); None stays silent."""
        return verdict

    def copy_commitment(self, challenge: Challenge, others: list[Vote]) -> str | None:
        """A copier's commitment for ``challenge`` given what ``others`` posted so far (None: wait)."""
        return None

    def copy_opening(self, challenge: Challenge, others: list[Vote]) -> VerdictOpening | None:
        """A copier's opening for ``challenge`` given what ``others`` opened so far (None: wait)."""
        return None

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


class CopycatValidator(ValidatorBehaviour):
    """Posts whatever another validator posted, without replaying: the first commitment it sees on
    the same challenge, then that validator's opening once it is opened. Commitments hide the
    verdict and bind the committer's address, so the copy never opens: it ends silent."""

    name = "copycat"
    replays = False
    copies = True

    def decide(self, challenge: Challenge, verdict: Verdict | None) -> Verdict | None:
        return None

    def copy_commitment(self, challenge: Challenge, others: list[Vote]) -> str | None:
        seen = [v.commitment for v in others if v.round == challenge.round and v.commitment]
        return seen[0] if seen else None

    def copy_opening(self, challenge: Challenge, others: list[Vote]) -> VerdictOpening | None:
        for v in others:
            if v.round == challenge.round and v.outcome is not None and v.evidence and v.salt:
                return VerdictOpening(epoch=challenge.epoch, host=challenge.host, segment=challenge.segment,
                                      outcome=v.outcome, distance=v.distance or Decimal(0), evidence=v.evidence,
                                      salt=v.salt)
        return None
