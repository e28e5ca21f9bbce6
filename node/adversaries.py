"""Adversaries that act on the chain: wrappers around an honest node's duties, for tests and ``simulate``.

The adversary catalogue (``verifier.adversaries``) is compute: faked training, artifact sources
that withhold, verdicts decided without replaying; the honest nodes run it through their
behaviour. What an adversary does on chain beyond that lives here, as a node class that overrides
one duty of the honest one and leaves the rest to it:

==========================  ======================================================================
:class:`SelectiveRevealHost`  the ``selective_reveal`` host: before revealing its beacon secret it
                            reads its pickers' reveals from public contract storage, computes its
                            challenges (their picks plus the last segment) and lets its behaviour
                            withhold the reveal (:meth:`~verifier.adversaries.SelectiveReveal.reveal_choice`).
                            Since issue 27 its own reveal changes none of its challenges, so
                            withholding only costs it the no-reveal slash
:class:`CopycatValidatorNode`  the ``copycat`` validator: commits and opens what it can see of
                            another validator's vote on the same challenge and round in the
                            epoch's public report (:class:`~verifier.adversaries.CopycatValidator`)
                            instead of deciding. Before its own commitment nothing but other
                            commitments is visible, in either round (round-0 verdicts of a
                            disputed challenge stay closed until the final vote is committed), and
                            a copied commitment binds its author: the copy never opens, it objects
                            to nothing (its ``ready`` is empty) and it ends ``silent``
==========================  ======================================================================

:func:`host_node` and :func:`validator_node` build the node a behaviour needs (the honest class for
every other one).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from chain.errors import LedgerError
from chain.ledger import Ledger
from node.events import EventKind
from node.host import HostNode
from node.validator import ValidatorNode
from protocol.messages import Ready, Verdict, VerdictCommit
from protocol.rules.beacon import SECRET_SIZE
from protocol.rules.hashing import u64be
from protocol.rules.sampling import challenge_seats, pickers, picks
from protocol.views import Challenge, ParticipantStatus, Vote, validator_weights
from verifier.adversaries import CopycatValidator, SelectiveReveal
from verifier.adversaries.validators import SybilWithholder, TrapReader


def stored_reveal(ledger: Ledger, epoch: int, address: str) -> bytes | None:
    """The beacon secret ``address`` revealed in ``epoch`` if it did: public contract storage
    (``rv/`` e address), which anyone can read before the reveal phase closes. Honest nodes never
    need it; it is what a participant that reveals last can know (``docs/contract.md``)."""
    value = ledger.backend.raw(b"rv/" + u64be(epoch) + address.encode())
    if value is not None and len(value) != SECRET_SIZE:
        raise LedgerError(f"a stored reveal of {len(value)} bytes")
    return value


class SelectiveRevealHost(HostNode):
    """A host that reveals its beacon secret once its pickers revealed, and not at all when its
    challenges hit a segment it faked (its behaviour decides, from the challenges it computes).
    Its challenges come from its pickers' secrets alone: withholding cannot move them."""

    behaviour: SelectiveReveal

    def maybe_reveal(self, status: ParticipantStatus) -> bool:
        if status.phase != "reveal" or not status.joined or status.revealed:
            return False
        choice = self.behaviour.reveal_choice(status.epoch, self.challenged_if_last(status.epoch))
        if choice == "withhold":
            self.event(status.epoch, EventKind.WITHHOLDING_REVEAL, "its challenges would hit what it faked")
        return choice == "reveal" and super().maybe_reveal(status)

    def challenged_if_last(self, epoch: int) -> list[int] | None:
        """Its challenged segments, from its pickers' reveals (``protocol.rules.sampling``: the
        union of their picks plus the last segment; its own reveal is no part of them); None while
        any of its pickers has not revealed. The draw uses the report's weights, which during
        ``reveal`` are the stakes at join: a validator whose weight the settling epoch capped
        (``wk/``, applied when the reveal close begins: docs/contract.md, "Pipelined epochs") is
        drawn by its cap on chain, so with one the prediction can differ from the contract's."""
        info = self.ledger.epoch(epoch, lists=False)  # the previous seed: the header's
        joined = validator_weights(self.ledger.report(epoch).validators)
        chosen = pickers(bytes.fromhex(info.prev_seed), self.address, joined, self.spec.verification.seats_cap)
        secrets = {}
        for address in chosen:
            secret = stored_reveal(self.ledger, epoch, address)
            if secret is None:
                return None
            secrets[address] = secret
        return sorted(challenge_seats(secrets, self.address, self.spec.train.segments,
                                      self.spec.verification.challenges_k))


class CopycatValidatorNode(ValidatorNode):
    """A validator that posts another validator's commitment, then its opening, on each of its
    challenges; it never replays. Each copied opening is sent once (the contract refuses it)."""

    behaviour: CopycatValidator

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._copied: set[tuple[int, str, int]] = set()

    def _others(self, challenge: Challenge) -> list[Vote]:
        for c in self.ledger.report(challenge.epoch).challenges:
            if (c.host, c.segment) == (challenge.host, challenge.segment):
                return [v for v in c.votes if v.validator != self.address]
        return []

    def commit_verdict(self, status: ParticipantStatus, challenge: Challenge) -> bool:
        commitment = self.behaviour.copy_commitment(challenge, self._others(challenge))
        if commitment is None:
            return False  # nothing visible to copy yet
        msg = VerdictCommit(epoch=status.epoch, host=challenge.host, segment=challenge.segment, commitment=commitment)
        return self._post(status, challenge, EventKind.COPIED_VERDICT_COMMITTED,
                          partial(self.ledger.commit_verdict, self.key, msg))

    def _send_ready(self, status: ParticipantStatus) -> bool:
        """``objection``: it objects to nothing (it has no verdict of its own, and the crowd it
        copies passes); a seat it holds stays undisputed, its copied commitment never opens in
        ``verdict_reveal``, and it ends ``silent``."""
        msg = Ready(epoch=status.epoch, objections=[])
        return self.attempt(status.epoch, EventKind.READY, partial(self.ledger.ready, self.key, msg),
                            "ready, copying the crowd: no objection")

    def open_verdict(self, status: ParticipantStatus, challenge: Challenge) -> bool:
        key = (status.epoch, challenge.host, challenge.segment)
        if key in self._copied:
            return False
        opening = self.behaviour.copy_opening(challenge, self._others(challenge))
        if opening is None:
            return False
        self._copied.add(key)
        return self._post(status, challenge, EventKind.COPIED_VERDICT_OPENED,
                          partial(self.ledger.reveal_verdict, self.key, opening))


def host_node(*args: Any, **kwargs: Any) -> HostNode:
    """The host node its ``behaviour`` keyword needs (arguments as :class:`~node.host.HostNode`'s)."""
    cls = SelectiveRevealHost if isinstance(kwargs.get("behaviour"), SelectiveReveal) else HostNode
    return cls(*args, **kwargs)


class WithholderValidatorNode(ValidatorNode):
    """The ``withholder`` (issue 27): before revealing its beacon secret it computes its own picks on
    each coalition host it is a picker of (public pickers, its own secret) and withholds the reveal
    when they would hit a segment that host faked. Only its own picks and seats go: no honest
    picker's picks depend on its reveal."""

    behaviour: SybilWithholder

    def maybe_reveal(self, status: ParticipantStatus) -> bool:
        if status.phase != "reveal" or not status.joined or status.revealed:
            return False
        if self.behaviour.reveal_choice(status.epoch, self.own_picks(status.epoch)) == "withhold":
            if (status.epoch, "withheld") not in self._withheld:
                self._withheld.add((status.epoch, "withheld"))
                self.event(status.epoch, EventKind.WITHHOLDING_REVEAL,
                           "its own picks would hit what its coalition faked")
            return False
        return super().maybe_reveal(status)

    def own_picks(self, epoch: int) -> dict[str, list[int]]:
        """Coalition host -> the segments its secret picks there, for the hosts it is a picker of
        (the draw predicted from the report's weights, as in ``challenged_if_last``)."""
        info = self.ledger.epoch(epoch, lists=False)  # the previous seed: the header's
        report = self.ledger.report(epoch)  # the hosts and validators, paged
        joined = validator_weights(report.validators)
        out: dict[str, list[int]] = {}
        for host in sorted(self.behaviour.coalition & {h.address for h in report.hosts}):
            ver = self.spec.verification
            if self.address in pickers(bytes.fromhex(info.prev_seed), host, joined, ver.seats_cap):
                out[host] = picks(self.secret(epoch), host, self.spec.train.segments, ver.challenges_k)
        return out

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._withheld: set[tuple[int, str]] = set()


class TrapReaderNode(ValidatorNode):
    """The ``trap_reader`` (issue 27): before deciding, it reads the trap sets hosts opened in the
    epochs it has not read yet and in the current one (public once opened) and tells its behaviour
    (:meth:`~verifier.adversaries.validators.TrapReader.observe`), which replays only recent
    trappers."""

    behaviour: TrapReader

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_up_to = -1  # every epoch before this one has been read

    def decide(self, status: ParticipantStatus, challenge: Challenge) -> tuple[Verdict, str] | None:
        for epoch in range(max(0, self._read_up_to + 1, status.epoch - self.behaviour.memory), status.epoch + 1):
            for host in self.ledger.report(epoch).hosts:
                self.behaviour.observe(epoch, host.address, host.traps)
            if epoch < status.epoch:
                self._read_up_to = epoch
        return super().decide(status, challenge)


def validator_node(*args: Any, **kwargs: Any) -> ValidatorNode:
    """The validator node its ``behaviour`` keyword needs (arguments as
    :class:`~node.validator.ValidatorNode`'s)."""
    behaviour = kwargs.get("behaviour")
    cls = CopycatValidatorNode if isinstance(behaviour, CopycatValidator) else ValidatorNode
    if isinstance(behaviour, SybilWithholder):
        cls = WithholderValidatorNode
    elif isinstance(behaviour, TrapReader):
        cls = TrapReaderNode
    return cls(*args, **kwargs)
