"""What hosts and validators share: identity, the beacon secret journal, joining and revealing.

A participant is driven by :meth:`Participant.tick`: it reads its own status in the current epoch
(:meth:`chain.ledger.Ledger.participant`: the phase and what this participant has done, a few
point reads on chain, not the whole epoch report) and does whatever is due and not yet done. The
chain is the source of truth for what was done (joined, committed, revealed, voted, proposed); the
disk keeps only what the chain must not see yet — the beacon secret, a validator's verdict
openings and a host's trap set with their salts — each written (and fsynced) *before* the
transaction that commits to it, so a participant that crashes between committing and revealing
still reveals after a restart. Calling ``tick`` again after any crash therefore never repeats an
action and never loses one.

The contract closes a phase only with a transaction. A node whose phase is past its deadline
sends ``advance`` before anything else (:meth:`Participant.maybe_advance`): a message for the
next phase sent into a phase that is due would close it and then be refused, and a refused
transaction undoes everything it did, the phase change included.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from chain.block_clock import BlockClock as BlockClock  # re-exported: nodes import it from here
from chain.ledger import ContractError, Ledger
from node.events import EventKind, EventSink, NodeEvent
from protocol.keys import PrivateKey
from protocol.messages import BeaconJoin, BeaconReveal, Role, TrapOpening, VerdictOpening
from protocol.rules.beacon import SECRET_SIZE, beacon_commit
from protocol.rules.commitments import SALT_SIZE
from protocol.rules.spec import RunSpec
from protocol.views import ParticipantStatus
from trainer.tensorfile import write_atomic

log = logging.getLogger("veriloco.node")


def journal_dir(root: Path, run_id: bytes, address: str) -> Path:
    """Where a participant under the work directory ``root`` keeps its journal: one
    ``epoch-NNNNNN.json`` per epoch with its beacon secret (what a standby reads a copy of,
    :mod:`node.standby`), and a folder per epoch for verdict openings and trap sets."""
    return Path(root) / run_id.hex() / "node" / address


def secret_file(journal: Path, epoch: int) -> Path:
    """The journal entry holding a participant's beacon secret of ``epoch`` (written by
    :meth:`Participant.secret`, read from a copy by :func:`node.standby.read_secret`)."""
    return Path(journal) / f"epoch-{epoch:06d}.json"


def write_secret(journal: Path, epoch: int, secret: bytes) -> None:
    """Write the journal entry of ``epoch``'s beacon secret durably (fsynced, atomic): the one
    format :func:`node.standby.read_secret` reads, written by the primary
    (:meth:`Participant.secret`) and by a standby handed the secret (``node.standby_handover``)."""
    path = secret_file(journal, epoch)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # the journal itself: its owner's only
    write_atomic(path, json.dumps({"secret": secret.hex()}).encode(), mode=0o600)  # unreadable to others until revealed


class Participant:
    """A bonded member that takes part in epochs. Subclasses add their role's work to :meth:`tick`.

    Args:
        ledger: the chain.
        key: the participant's chain key.
        spec: the run spec (checked against the chain's by the caller).
        root: the participant's work directory.
        name: a label for events (defaults to the address).
        on_event: called with every :class:`~node.events.NodeEvent`.
    """

    role: Role

    def __init__(self, ledger: Ledger, key: PrivateKey, spec: RunSpec, root: Path,
                 name: str | None = None, on_event: EventSink | None = None) -> None:
        self.ledger = ledger
        self.key = key
        self.spec = spec
        self.run_id = spec.run_id()
        self.root = Path(root)
        self.address = key.address(ledger.prefix)
        self.name = name or self.address
        self._on_event = on_event
        self._journal = journal_dir(self.root, self.run_id, self.address)
        self._handed: ParticipantStatus | None = None  # a status :meth:`act_on` gives the tick
        self.compute_class = ""
        """The compute-profile class declared at every join (``protocol.rules.classes``): "" or this
        machine's compute fingerprint (the daemons set it; ``simulate`` runs in one process, one class)."""
        self.stopping = threading.Event()
        """Set when the node's daemon is asked to stop: long work (training, replays) stops at its
        next boundary and only what :meth:`due_now` names is still done."""
        # Pipelined runs: the (epoch, phase, deadline, settling epoch) whose advance the contract
        # refused (a phase held by the settling epoch keeps its old deadline): not asked again
        # until one of them changes (the settling one as last seen by `settling`).
        self._advance_refused: tuple[int, str, int, int | None] | None = None
        self._settling_seen: int | None = None

    # -- events --------------------------------------------------------------------------------

    def event(self, epoch: int, kind: EventKind, detail: str = "", outcome: str | None = None,
              refused: bool = False) -> None:
        """Log a :class:`~node.events.NodeEvent` and hand it to ``on_event``."""
        event = NodeEvent(epoch, self.name, kind, detail, outcome, refused)
        log.info("%s epoch %d %s%s", self.name, epoch, event.action, f" {detail}" if detail else "")
        if self._on_event is not None:
            self._on_event(event)

    def attempt(self, epoch: int, kind: EventKind, call: Callable[[], object], detail: str = "",
                outcome: str | None = None) -> bool:
        """Send one transaction; a refusal is an event, not a crash (the next tick re-reads the chain)."""
        try:
            call()
        except ContractError as exc:
            self.event(epoch, kind, str(exc), outcome, refused=True)
            return False
        self.event(epoch, kind, detail, outcome)
        return True

    # -- the beacon secret -----------------------------------------------------------------------

    def secret(self, epoch: int) -> bytes:
        """This participant's beacon secret for ``epoch``: created once, durable before it is used."""
        path = secret_file(self._journal, epoch)
        if path.exists():
            secret = bytes.fromhex(json.loads(path.read_text())["secret"])
            if len(secret) == SECRET_SIZE:
                return secret
        secret = os.urandom(SECRET_SIZE)
        write_secret(self._journal, epoch, secret)
        return secret

    # -- verdict openings and trap sets: durable before their commitments --------------------------

    def _epoch_dir(self, epoch: int) -> Path:
        return self._journal / f"epoch-{epoch:06d}"

    def _opening_path(self, epoch: int, host: str, segment: int, revote: bool) -> Path:
        return self._epoch_dir(epoch) / "verdicts" / f"{host}-{segment:04d}{'-revote' if revote else ''}.json"

    def keep_opening(self, opening: VerdictOpening, revote: bool = False) -> None:
        """Write a verdict opening (with its salt) durably, before its commitment is posted (a
        round-0 seat's re-vote apart from its round-0 verdict)."""
        path = self._opening_path(opening.epoch, opening.host, opening.segment, revote)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, opening.model_dump_json().encode())

    def opening(self, epoch: int, host: str, segment: int, revote: bool = False) -> VerdictOpening | None:
        """The verdict opening kept for (``host``, ``segment``) of ``epoch`` (its re-vote with
        ``revote``), if any (a damaged one is as good as none: the verdict cannot be opened)."""
        path = self._opening_path(epoch, host, segment, revote)
        try:
            return VerdictOpening.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            return None

    def trap_opening(self, epoch: int, segments: list[int]) -> TrapOpening:
        """This host's trap set for ``epoch`` with its salt: created once (for ``segments``), durable
        before its commitment is posted; a restart reuses what was kept."""
        path = self._epoch_dir(epoch) / "traps.json"
        try:
            return TrapOpening.model_validate_json(path.read_bytes())
        except (OSError, ValidationError):
            pass
        opening = TrapOpening(epoch=epoch, segments=sorted(set(segments)), salt=os.urandom(SALT_SIZE).hex())
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, opening.model_dump_json().encode())
        return opening

    # -- shared phases ---------------------------------------------------------------------------

    def maybe_advance(self, status: ParticipantStatus) -> bool:
        """Close the current phase if its deadline has passed (the contract closes it only with a
        transaction; nodes send it so that no run waits for an operator). Not ``delay`` while it
        waits without a fallback window (``verification.delay_blocks``): only its VDF output closes
        it (``node.delayed_seed``); once the output is posted the assignment runs under that name
        page by page, and those pages are advanced as any close."""
        if status.phase == "closed" or self.ledger.height() < status.phase_deadline:
            return False
        if (status.phase == "delay" and self.spec.verification.delay_blocks == 0
                and self.ledger.epoch(status.epoch, lists=False).closing is None):
            return False  # no fallback window: only the output ends it
        key = (status.epoch, status.phase, status.phase_deadline, self._settling_seen)
        if self.spec.phases.pipelined and key == self._advance_refused:
            return False  # held until the settling epoch closes (a held reveal keeps its deadline)
        sent = self.attempt(status.epoch, EventKind.ADVANCED, lambda: self.ledger.advance(self.key),
                            f"{status.phase} was due at height {status.phase_deadline}")
        self._advance_refused = None if sent else key
        return sent

    def settling(self) -> ParticipantStatus | None:
        """Pipelined runs: this participant's part in the older epoch still settling while a newer
        one trains (``EpochInfo.settling``), or None (none settles, or a synchronous run)."""
        if not self.spec.phases.pipelined:
            return None
        older = self._settling_seen = self.ledger.epoch(lists=False).settling
        return None if older is None else self.ledger.participant(self.address, older)

    def min_stake(self) -> int:
        econ = self.spec.economics
        return int(econ.min_host_stake if self.role == "host" else econ.min_validator_stake)

    def status(self) -> ParticipantStatus:
        """This participant's part in the current epoch, and the epoch's phase: read from the chain,
        or the one :meth:`act_on` hands over (read just before)."""
        status, self._handed = self._handed, None
        return status if status is not None else self.ledger.participant(self.address)

    def act_on(self, status: ParticipantStatus) -> bool:
        """:meth:`tick` on ``status``, just read by the caller (a daemon looks at the phase before the
        node acts): the tick's :meth:`status` returns it instead of reading the chain a second time."""
        self._handed = status
        try:
            return self.tick()
        finally:
            self._handed = None

    def maybe_join(self, status: ParticipantStatus) -> bool:
        if status.phase != "join" or status.joined or self.stopping.is_set():
            return False
        member = self.ledger.member(self.address)
        if member is None or member.role != self.role or int(member.bonded) < self.min_stake():
            return False
        commit = beacon_commit(self.address, status.epoch, self.secret(status.epoch)).hex()
        return self.attempt(status.epoch, EventKind.JOINED, lambda: self.ledger.join(
            self.key, BeaconJoin(epoch=status.epoch, beacon_commit=commit, compute_class=self.compute_class)))

    def maybe_reveal(self, status: ParticipantStatus) -> bool:
        if status.phase != "reveal" or not status.joined or status.revealed:
            return False
        secret = self.secret(status.epoch)
        return self.attempt(status.epoch, EventKind.REVEALED, lambda: self.ledger.reveal(
            self.key, BeaconReveal(epoch=status.epoch, secret=secret.hex())))

    def tick(self) -> bool:
        """Do what is due in the current phase. Returns whether a transaction was sent."""
        raise NotImplementedError

    # -- stopping --------------------------------------------------------------------------------

    def due_now(self, status: ParticipantStatus) -> str | None:
        """What is due in ``status``'s phase and quick — a transaction or two from what is already
        on disk, no training, no replay, no fetch — in words; None when nothing is.

        A daemon asked to stop does these before it exits (:class:`node.daemon.Daemon`): what is
        missed here costs stake (a host that does not reveal is ``no_reveal``, a validator that does
        not open its verdicts ``silent``), and each is one transaction. Long work is left to the
        restart, which the phase windows leave room for. The base: the beacon reveal of a joined
        participant (joining is not done while stopping: it would add a duty)."""
        if status.phase == "reveal" and status.joined and not status.revealed:
            return "its beacon reveal"
        return None

    def serves_now(self, status: ParticipantStatus) -> bool:
        """Whether others read this participant's artifacts in ``status``'s phase (a challenged host
        during verify): a stopping daemon keeps serving while the phase ends within its drain."""
        return False

    def close(self) -> None:
        """Release what the node runs beside its ticks (threads); called once, when its daemon exits."""
