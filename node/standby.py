"""A standby revealer: a second, cheap machine that reveals a participant's beacon secret when its
primary is down through ``reveal`` (issue 30).

A joined participant that does not reveal is ``no_reveal`` and slashed (docs/contract.md, "Absences"),
even when its machine is simply down. The standby watches the chain with **its own key, which the
participant named on chain** (``set_standby``: the contract lets that address send ``reveal`` for
the participant and nothing else), or else with the participant's own key, and reads the secrets
from a journal folder (``epoch-NNNNNN.json``, written and fsynced by
:meth:`node.participant.Participant.secret` before the join that commits to it): its own, which
the primary fills over HTTP, sealed and signed (``node.standby_handover``), or a copy of the
primary's that the operator keeps current (a shared or synced folder). Once ``grace`` of the reveal window has
passed and the chain still shows no reveal, it reveals the secret it holds. The beacon is not
weakened: the chain checks the secret against the commitment, so a standby without the secret (the
copy never arrived) cannot reveal and the no-reveal slash applies as before; and a reveal the
primary sent first makes the standby's a refused no-op. The choice between the participant's own
key and a standby address, and what each costs: docs/contract.md ("A standby
revealer").

Restart-safe: the chain is the source of truth. A standby sends nothing for a participant the
chain shows as revealed, and a refusal ``already revealed`` (the primary or an earlier standby run
won the race) counts as done.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from chain.ledger import ContractError, Ledger
from node.events import EventKind, EventSink, NodeEvent
from node.participant import secret_file
from protocol.keys import PrivateKey, is_address
from protocol.messages import BeaconReveal
from protocol.rules.spec import RunSpec
from protocol.views import ParticipantStatus

log = logging.getLogger("veriloco.standby")

DEFAULT_GRACE = 0.5
"""The share of the reveal window a standby leaves the primary before revealing for it."""


class JournalSecret(BaseModel):
    """A journal entry as :meth:`node.participant.Participant.secret` writes it (validated: the
    copy comes from another machine)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    secret: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


def read_secret(journal: Path, epoch: int) -> bytes | None:
    """The beacon secret of ``epoch`` in the journal copy ``journal``; None if it is missing or not
    a well-formed entry (either way the standby cannot reveal)."""
    if epoch < 0:
        raise ValueError(f"epoch must be non-negative, not {epoch}")
    path = secret_file(journal, epoch)
    try:
        return bytes.fromhex(JournalSecret.model_validate(json.loads(path.read_bytes())).secret)
    except (OSError, ValueError, ValidationError):  # ValueError: not JSON
        return None


def check_grace(grace: float) -> None:
    """Refuse a ``grace`` that is not a share of the reveal window in [0, 1)."""
    if not 0 <= grace < 1:
        raise ValueError(f"grace must be at least 0 and below 1 (a share of the reveal window), not {grace}")


def reveal_from(status: ParticipantStatus, spec: RunSpec, grace: float) -> int:
    """The first height at which a standby reveals in ``status``'s reveal phase: ``grace`` of the
    window after it opened (the phase opens ``reveal_blocks`` before its deadline)."""
    blocks = spec.phases.reveal_blocks
    return status.phase_deadline - blocks + math.ceil(grace * blocks)


class Standby:
    """Reveals the beacon secret of the participant ``key`` signs for, when its primary has not.

    Args:
        ledger: the chain.
        key: the key the standby signs with: its own, which ``participant`` named with
            ``set_standby``, or (``participant`` None) the participant's own. It sends only ``reveal``.
        spec: the run spec (its reveal window; checked against the chain's by the caller).
        journal: the folder holding the secrets: the standby's own, filled by
            ``node.standby_handover``, or a copy of the primary's (:func:`node.participant.journal_dir`).
        grace: the share of the reveal window left to the primary, in [0, 1).
        participant: the address it reveals for, when ``key`` is the standby's own.
        name: a label for events and logs (defaults to the participant's address).
        on_event: called with every :class:`~node.events.NodeEvent`.
    """

    def __init__(self, ledger: Ledger, key: PrivateKey, spec: RunSpec, journal: Path,
                 grace: float = DEFAULT_GRACE, participant: str | None = None, name: str | None = None,
                 on_event: EventSink | None = None) -> None:
        check_grace(grace)
        if participant is not None and not is_address(participant, ledger.prefix):
            raise ValueError(f"participant {participant!r} is not an address of this chain ({ledger.prefix}1…)")
        self.ledger = ledger
        self.key = key
        self.spec = spec
        self.journal = Path(journal)
        self.grace = grace
        self.signer = key.address(ledger.prefix)
        self.participant = participant
        self.address = participant if participant is not None else self.signer
        """The participant it reveals for (whose status it watches and whose secret it holds)."""
        self.name = name or self.address
        self._on_event = on_event
        self._missing: set[int] = set()  # epochs whose missing secret was already reported

    def event(self, epoch: int, detail: str, refused: bool = False) -> None:
        event = NodeEvent(epoch, self.name, EventKind.REVEALED, detail, None, refused)
        log.info("%s epoch %d standby %s%s", self.name, epoch, event.action, f" {detail}" if detail else "")
        if self._on_event is not None:
            self._on_event(event)

    def tick(self) -> bool:
        """Reveal in the current epoch if it is due and the primary has not (in a pipelined run the
        epoch still settling is past its ``reveal``: the next one opens only after it closed).
        Returns whether a reveal was accepted."""
        return self.maybe_reveal(self.ledger.participant(self.address))

    def maybe_reveal(self, status: ParticipantStatus) -> bool:
        if status.phase != "reveal" or not status.joined or status.revealed:
            return False
        height = self.ledger.height()
        if height < reveal_from(status, self.spec, self.grace) or height >= status.phase_deadline:
            return False  # the primary's share of the window, or too late (a late message is refused)
        secret = read_secret(self.journal, status.epoch)
        if secret is None:
            if status.epoch not in self._missing:
                self._missing.add(status.epoch)
                log.warning("%s epoch %d: no beacon secret in %s; the standby cannot reveal",
                            self.name, status.epoch, self.journal)
            return False
        try:
            self.ledger.reveal(self.key, BeaconReveal(epoch=status.epoch, secret=secret.hex()), self.participant)
        except ContractError as exc:
            # "already revealed": the primary (or this standby before a restart) was first: done.
            self.event(status.epoch, str(exc), refused=True)
            return False
        self.event(status.epoch, "for the primary")
        return True
