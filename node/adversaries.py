"""Adversaries that act on the chain: wrappers around an honest node's duties, for tests and ``simulate``.

The adversary catalogue (``verifier.adversaries``) is compute: faked training, artifact sources
that withhold, verdicts decided without replaying; the honest nodes run it through their
behaviour. What an adversary does on chain beyond that lives here, as a node class that overrides
one duty of the honest one and leaves the rest to it:

==========================  ======================================================================
:class:`SelectiveRevealHost`  the ``selective_reveal`` host: before revealing its beacon secret it
                            reads every other reveal from public contract storage, computes the
                            seed and its challenges as if it revealed last, and lets its behaviour
                            withhold the reveal (:meth:`~verifier.adversaries.SelectiveReveal.reveal_choice`)
:class:`CopycatValidatorNode`  the ``copycat`` validator: commits and opens what it can see of
                            another validator's vote in the epoch's public report
                            (:class:`~verifier.adversaries.CopycatValidator`) instead of deciding
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
from protocol.messages import VerdictCommit
from protocol.rules.beacon import SECRET_SIZE, epoch_seed
from protocol.rules.hashing import u64be
from protocol.rules.sampling import challenged_segments
from protocol.views import Challenge, ParticipantStatus, Vote
from verifier.adversaries import CopycatValidator, SelectiveReveal


def stored_reveal(ledger: Ledger, epoch: int, address: str) -> bytes | None:
    """The beacon secret ``address`` revealed in ``epoch`` if it did: public contract storage
    (``rv/`` e address), which anyone can read before the reveal phase closes. Honest nodes never
    need it; it is what a participant that reveals last can know (``docs/contract.md``)."""
    value = ledger.backend.raw(b"rv/" + u64be(epoch) + address.encode())
    if value is not None and len(value) != SECRET_SIZE:
        raise LedgerError(f"a stored reveal of {len(value)} bytes")
    return value


class SelectiveRevealHost(HostNode):
    """A host that reveals its beacon secret last, and not at all when its challenges would hit a
    segment it faked (its behaviour decides, from the challenges it computes)."""

    behaviour: SelectiveReveal

    def maybe_reveal(self, status: ParticipantStatus) -> bool:
        if status.phase != "reveal" or not status.joined or status.revealed:
            return False
        choice = self.behaviour.reveal_choice(status.epoch, self.challenged_if_last(status.epoch))
        if choice == "withhold":
            self.event(status.epoch, EventKind.WITHHOLDING_REVEAL, "its challenges would hit what it faked")
        return choice == "reveal" and super().maybe_reveal(status)

    def challenged_if_last(self, epoch: int) -> list[int] | None:
        """Its challenged segments if it revealed now as the last one, from the others' reveals;
        None while any other participant has not revealed."""
        info = self.ledger.epoch(epoch)
        reveals = {self.address: self.secret(epoch)}
        for address in [*info.hosts, *info.validators]:
            if address != self.address:
                secret = stored_reveal(self.ledger, epoch, address)
                if secret is None:
                    return None
                reveals[address] = secret
        return challenged_segments(epoch_seed(self.run_id, epoch, reveals), self.address, self.spec.train.segments,
                                   self.spec.verification.challenges_k)


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


def validator_node(*args: Any, **kwargs: Any) -> ValidatorNode:
    """The validator node its ``behaviour`` keyword needs (arguments as
    :class:`~node.validator.ValidatorNode`'s)."""
    cls = CopycatValidatorNode if isinstance(kwargs.get("behaviour"), CopycatValidator) else ValidatorNode
    return cls(*args, **kwargs)
