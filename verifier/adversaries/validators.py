"""Validator behaviours: the honest one and the liars, beside the catalogue's host behaviours.

The validator node (``node.validator``) commits to what :meth:`ValidatorBehaviour.decide` returns
and opens it after the commit window; ``decide`` gets the replay as a call, so the honest validator
replays and a lying one saves the work and commits a verdict of its own choosing (or nothing). A
copying validator (:class:`CopycatValidator`) decides nothing: what it would post, given the others'
public votes (:meth:`~CopycatValidator.copy_commitment`, :meth:`~CopycatValidator.copy_opening`),
is posted by the node's wrapper in ``node.adversaries``. The contract's commit-reveal, disputes,
traps and slashing are what make each of them cost it.

Issue 27's coalitions and sybils (``docs/contract.md``, "Trust assumption"): :class:`Colluder`,
:class:`SybilSeatGrabber`, :class:`SybilWithholder` (its node withholds reveals:
``node.adversaries.WithholderValidatorNode``), :class:`TrapReader` (its node feeds it the opened
trap sets: ``node.adversaries.TrapReaderNode``), :class:`DisputeCopier`, :class:`GainCopier` and
:class:`GainLiar` (issue 28's gain disputes) and :class:`UnavailableSpammer`. ``simulate`` arms a
coalition with its cheating hosts (``veriloco.commands.simulate.arm_coalition``);
``bench/settlement_game.py`` plays each at coalition stake 10 %, 20 % and 33 % − ε.
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

    def dispute_gains(self, challenge: Challenge, opened: Callable[[], list[int]]) -> tuple[int, int] | None:
        """The (main-window, dispute-window) probe gains to post on ``challenge``, a gain dispute,
        instead of computing them; ``opened()`` reads the gains its round-0 seats opened. None:
        compute them (the honest answer)."""
        return None

    def round0_gain(self, challenge: Challenge, gain: int) -> int:
        """The probe gain to open in round 0 on ``challenge`` (a host's last segment) when this
        validator computed ``gain``: the computed one (honest)."""
        return gain

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


# -- issue 27: coalitions and sybils (docs/contract.md, "Trust assumption") -------------------------


class Colluder(ValidatorBehaviour):
    """A validator of a coalition: fails every challenge it sits on of a host outside the coalition
    (in round 0 that is an objection, in the final round a ``fail``) and passes the coalition's own
    hosts, all without replaying. ``coalition`` holds the coalition's host addresses (``simulate``
    puts its cheaters there). Its stake share is the coalition's identities' stakes over the
    epoch's validator stake: below 1/3 the honest stake always decides the final vote, so every
    fail it posts on an honest host is ``wrong`` and every pass it opens on a failed segment too."""

    name = "colluder"

    def __init__(self, coalition: set[str] | None = None) -> None:
        self.coalition: set[str] = set(coalition or ())

    def decide(self, challenge: Challenge, replay: Replay) -> Verdict | None:
        return forced_verdict(challenge, "pass" if challenge.host in self.coalition else "fail", self.name)


class SybilSeatGrabber(Colluder):
    """A colluder on one of many minimum-stake identities that join first (``simulate`` bonds it only
    the minimum validator stake and caps the seats). Seats go by stake at join, not by arrival: a
    larger validator always takes the smallest seat, so the sybils only hold what is left."""

    name = "sybil"
    minimum_stake = True
    """It bonds the spec's minimum validator stake (``simulate``)."""


class SybilWithholder(Colluder):
    """An identity of a cheating host's coalition that withholds its beacon reveal whenever its own
    picks on a coalition host would hit a segment that host faked (its node computes them:
    ``node.adversaries.WithholderValidatorNode``); otherwise it passes the coalition and replays the
    rest honestly. A picker's picks come from its own secret only, so withholding removes nothing
    but its own picks and seats: every honest picker still picks what it picked, and the
    withholder pays the no-reveal slash (``docs/contract.md``, "Withholding")."""

    name = "withholder"

    def __init__(self, coalition: set[str] | None = None) -> None:
        super().__init__(coalition)
        self.fakers: dict[str, object] = {}
        """Coalition host address -> its behaviour (whose ``faked[epoch]`` it reads)."""

    def decide(self, challenge: Challenge, replay: Replay) -> Verdict | None:
        if challenge.host in self.coalition:
            return forced_verdict(challenge, "pass", self.name)
        return replay()

    def faked(self, host: str, epoch: int) -> set[int]:
        """The segments coalition host ``host`` faked in ``epoch`` (empty if it is no faker)."""
        behaviour = self.fakers.get(host)
        return set(getattr(behaviour, "faked", {}).get(epoch, [])) if behaviour is not None else set()

    def reveal_choice(self, epoch: int, own_picks: dict[str, list[int]]) -> str:
        """``withhold`` if its own picks (coalition host -> segments its secret picks there, for the
        hosts it is a picker of) hit a faked segment, else ``reveal``."""
        hit = any(set(segments) & self.faked(host, epoch) for host, segments in own_picks.items())
        return "withhold" if hit else "reveal"


class TrapReader(ValidatorBehaviour):
    """A lazy validator that reads traps off the chain: it replays only hosts that opened a trap in
    the last ``memory`` epochs (and, in the final round, a segment opened as a trap this epoch) and
    passes everything else blind. Every honest host traps with the spec's ``trap_probability``, drawn
    from its own secret (``trainer.trap``), so a past trap says nothing about this epoch's, and a
    blind pass carries no replay evidence: it is ``wrong`` on any
    challenge that ends in the final vote. Its node feeds it the opened trap sets
    (:meth:`observe`)."""

    name = "trap_reader"

    def __init__(self, memory: int = 1) -> None:
        self.memory = int(memory)
        self.trapped: dict[str, int] = {}
        """Host address -> the last epoch it opened a trap set."""
        self.opened: dict[tuple[int, str], set[int]] = {}
        """(epoch, host) -> the trap segments it opened."""
        self.replayed = 0
        self.blind = 0

    def observe(self, epoch: int, host: str, traps: list[int] | None) -> None:
        """Host ``host`` opened ``traps`` in ``epoch`` (None or empty: no trap)."""
        if traps:
            self.trapped[host] = max(epoch, self.trapped.get(host, epoch))
            self.opened[epoch, host] = set(traps)

    def replays(self, challenge: Challenge) -> bool:
        recent = challenge.epoch - self.trapped.get(challenge.host, -10**9) <= self.memory
        opened = challenge.round > 0 and challenge.segment in self.opened.get((challenge.epoch, challenge.host), ())
        return recent or opened

    def decide(self, challenge: Challenge, replay: Replay) -> Verdict | None:
        if self.replays(challenge):
            self.replayed += 1
            return replay()
        self.blind += 1
        return forced_verdict(challenge, "pass", self.name)


class DisputeCopier(ValidatorBehaviour):
    """Replays its round-0 seats; in the final round it would copy, but nothing about any vote on a
    disputed challenge is visible before its own commitment (round-0 verdicts of disputed challenges
    open only in ``dispute_reveal``; an objection says only that a seat did not pass), so it commits
    a guess without the replay: ``fail`` (somebody objected), with evidence it cannot know. Its
    re-vote after a round-0 ``unavailable`` (a host that refused it) is that same blind ``fail``: a
    re-vote is not round 0, so it guesses there too and is ``wrong`` unless the host cheated with
    exactly that evidence."""

    name = "dispute_copier"

    def decide(self, challenge: Challenge, replay: Replay) -> Verdict | None:
        if challenge.round == 0:
            return replay()
        return forced_verdict(challenge, "fail", self.name)


class GainCopier(ValidatorBehaviour):
    """Replays honestly, but in a gain dispute (the round-0 ``pass``es on a host's last segment
    opened different probe gains, public when the final round commits) computes no probe: it posts
    the gain most of them opened (the smallest of a tie) as the main-window gain, and, having no
    other number, the same as the dispute-window gain, as a final voter and in its re-vote as a
    round-0 seat. Nobody opened a gain on the host's dispute windows, so its vote is another than the
    honest one and the copier is ``wrong``."""

    name = "gain_copier"

    def __init__(self) -> None:
        self.copied = 0

    def dispute_gains(self, challenge: Challenge, opened: Callable[[], list[int]]) -> tuple[int, int] | None:
        gains = opened()
        if not gains:
            return None
        self.copied += 1
        copied = min(gains, key=lambda g: (-gains.count(g), g))
        return copied, copied


class GainLiar(ValidatorBehaviour):
    """Replays honestly and passes, but opens a false probe gain in round 0 (the computed one plus
    :attr:`LIE` µnats), which makes a gain dispute; there it re-votes honestly (both gains computed).
    Its round-0 gain is judged against the decided one at finalize, so it is ``wrong`` and slashed
    (issue 28: the lie costs), and its honest peers' passes agree in everything but the gain, so
    the final voters answer with the probe alone, without a replay."""

    name = "gain_liar"
    LIE = 1_000

    def __init__(self) -> None:
        self.lied = 0

    def round0_gain(self, challenge: Challenge, gain: int) -> int:
        self.lied += 1
        return gain + self.LIE


class UnavailableSpammer(ValidatorBehaviour):
    """Claims every host refused it: commits ``unavailable`` on every seat (so it objects to each,
    forcing a dispute) and in every final vote, without fetching anything. The hosts served everyone
    else, so the final vote decides ``pass`` and each of its ``unavailable`` is ``unserved``."""

    name = "unavailable"

    def decide(self, challenge: Challenge, replay: Replay) -> Verdict | None:
        return forced_verdict(challenge, "unavailable", self.name)
