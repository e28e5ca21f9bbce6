"""The validator node: joins epochs, reveals, replays its challenges and commits then opens verdicts.

Each :meth:`ValidatorNode.tick` reads this validator's status on chain (the phase, the dispute
round, what it has done, how many of its challenges of the round still wait for its commitment or
its opening) and does what the phase asks:

* any phase past its deadline — ``advance`` first;
* ``join``   — post the beacon commitment (the secret is on disk first);
* ``reveal`` — reveal the beacon secret;
* ``verify`` and each ``dispute`` round — for every challenge it sits on in the round and has not
  committed to (:meth:`ValidatorNode.commit_verdict`): replay → decide → post. The replay
  (:meth:`ValidatorNode._verdict_for`) fetches the host's segment through its artifact source and
  replays it with the trainer's step (:func:`verifier.replay.check_challenge`); the decision
  (:meth:`ValidatorNode.decide`) is the behaviour's, which the honest one takes from the replay;
  the verdict is kept with a random salt on disk (fsynced) and its commitment posted — nothing
  about the verdict is visible yet;
* ``verdict_reveal`` and each ``dispute_reveal`` — open every verdict it committed to in the
  round, from what it kept on disk (:meth:`ValidatorNode.open_verdict`).
  The Δ a last segment's replay reads is written to disk as it arrives (``node.content.intake``)
  and kept by hash once the replay passed; it is served by hash (``veriloco validator run``
  serves what it holds), so an accepted host's Δ is always held by the validator that
  checked it.

A host that does not deliver is not judged ``unavailable`` at the first failure when the validator
has :class:`Patience` (the daemons do): the challenge stays pending and is tried again on later
ticks (each fetch itself retried with backoff, ``node.http_client``) until the phase deadline is
near, so a host restarting or a network hiccup costs nobody anything, and only a host that stays
silent to the end is reported. Without patience (``simulate``, whose artifacts are local) the first
answer is final.

Commitments and openings already on chain are never posted again (the chain's ``committed`` and
``revealed`` flags), so a validator restarted mid-phase only does what is left, and one that
crashed between committing and opening still opens. Its
:class:`~verifier.adversaries.ValidatorBehaviour` decides what is committed — honest by default,
a liar in tests, which saves the replay. A validator that posts others' verdicts instead
(``copycat``) wraps the commit and open duties (``node.adversaries``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NoReturn

from chain.ledger import Ledger
from node.content import Intake, intake
from node.events import EventKind, EventSink
from node.global_store import GlobalStateUnavailable, GlobalStore, PeerResolver
from node.participant import Participant
from protocol.keys import PrivateKey
from protocol.messages import Verdict, VerdictCommit, VerdictOpening
from protocol.rules.commitments import SALT_SIZE
from protocol.rules.merkle import MerkleProof
from protocol.rules.spec import RunSpec
from protocol.views import VERDICT_COMMIT_PHASES, VERDICT_REVEAL_PHASES, Challenge, ParticipantStatus
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, UntrustedJson, held_delta_path
from trainer.data import Dataset
from trainer.fingerprint import check_fingerprint
from trainer.step import Stepper
from verifier.adversaries import ValidatorBehaviour
from verifier.replay import ReplayFault, check_challenge


@dataclass(frozen=True)
class Patience:
    """When a validator stops retrying a host that does not deliver and reports it unavailable.

    Args:
        margin_blocks: give up once at most this many blocks of the phase are left …
        margin_fraction: … or at most this fraction of the phase's window, whichever is more,
            plus one block per verdict still to post (time to post them all, with a margin for
            slow blocks).
    """

    margin_blocks: int = 5
    margin_fraction: float = 0.1

    def give_up(self, height: int, deadline: int, window: int, pending: int = 1) -> bool:
        """Whether the deadline is near enough to report the host unavailable now."""
        return deadline - height <= max(self.margin_blocks, int(window * self.margin_fraction)) + pending


class ValidatorNode(Participant):
    """One validator of a run.

    Args:
        ledger: the chain.
        key: the validator's chain key.
        spec: the run spec.
        dataset: the run's dataset (to recompute every batch).
        root: the validator's work directory (beacon secrets, verdict openings, global states).
        peers: how to reach a host's artifacts from its advertised endpoint.
        behaviour: honest by default.
        name: a label for events.
        on_event: called with every event.
        device: where replays compute (``cpu``, ``cuda``, ``cuda:N``); a replay on another device
            than the host's agrees only within the calibrated tolerance.
        patience: retry a host that does not deliver until the deadline is near (None: the first
            answer is final).
        keep_epochs: delete the global states no epoch can need any more, keeping those of this
            many epochs before the current one (``GlobalStore.prune``); None keeps all.
    """

    role = "validator"

    def __init__(self, ledger: Ledger, key: PrivateKey, spec: RunSpec, dataset: Dataset, root: Path,
                 peers: PeerResolver, behaviour: ValidatorBehaviour | None = None, name: str | None = None,
                 on_event: EventSink | None = None, device: str = "cpu", patience: Patience | None = None,
                 keep_epochs: int | None = None) -> None:
        super().__init__(ledger, key, spec, root, name, on_event)
        self.device = device
        check_fingerprint(spec, device)  # a run that pins a compute profile admits no other
        self.patience = patience
        self.dataset = dataset
        self.peers = peers
        self.behaviour = behaviour or ValidatorBehaviour()
        self.globals = GlobalStore(self.root, spec, ledger, peers, self.address, keep_epochs=keep_epochs)
        self._stepper: Stepper | None = None
        self._lost: set[tuple[int, str, int]] = set()  # verdicts it cannot open (said once)

    def tick(self) -> bool:
        status = self.status()
        self.globals.prune(status.epoch)
        if self.maybe_advance(status):
            return True
        if status.phase == "join":
            return self.maybe_join(status)
        if status.phase == "reveal":
            return self.maybe_reveal(status)
        if status.phase in VERDICT_COMMIT_PHASES and status.to_commit:
            return self._commit_verdicts(status)
        if status.phase in VERDICT_REVEAL_PHASES and status.to_reveal:
            return self._open_verdicts(status)
        return False

    def _mine(self, status: ParticipantStatus, committed: bool) -> list[Challenge]:
        """The undecided challenges of the current round this validator sits on, committed to or not."""
        return [c for c in self.ledger.challenges(status.epoch, self.address)
                if c.round == status.round and c.outcome == "pending" and c.committed == committed]

    # -- commit: replay → decide → post --------------------------------------------------------

    def _commit_verdicts(self, status: ParticipantStatus) -> bool:
        acted = False
        for challenge in self._mine(status, committed=False):
            try:
                acted |= self.commit_verdict(status, challenge)
            except GlobalStateUnavailable as exc:
                self.event(status.epoch, EventKind.WAITING_FOR_THETA, str(exc))
                break
            except ReplayFault as exc:  # our own fault: no verdict; tried again next tick
                self.event(status.epoch, EventKind.REPLAY_FAULT, str(exc))
        return acted

    def commit_verdict(self, status: ParticipantStatus, challenge: Challenge) -> bool:
        """Commit to a verdict on ``challenge``: the one kept on disk (a restart after the
        commitment reuses it), else the one :meth:`decide` reaches, kept (fsynced) first."""
        opening = self.opening(status.epoch, challenge.host, challenge.segment)
        if opening is None:
            decided = self.decide(status, challenge)
            if decided is None:
                return False
            verdict, reason = decided
            opening = VerdictOpening.of(verdict, os.urandom(SALT_SIZE))
            self.keep_opening(opening)
            self.event(status.epoch, EventKind.VERDICT, f"{_about(challenge)} round {challenge.round}: {reason}",
                       verdict.outcome)
        msg = VerdictCommit(epoch=status.epoch, host=challenge.host, segment=challenge.segment,
                            commitment=opening.commitment(self.address))
        return self._post(status, challenge, EventKind.VERDICT_COMMITTED,
                          partial(self.ledger.commit_verdict, self.key, msg))

    def decide(self, status: ParticipantStatus, challenge: Challenge) -> tuple[Verdict, str] | None:
        """The verdict to commit to on ``challenge`` and why, or None (nothing to commit now): the
        behaviour's decision (:meth:`ValidatorBehaviour.decide`), which the honest one takes from
        the replay (:meth:`_verdict_for`)."""
        reason = "without replaying"

        def replay() -> Verdict | None:
            nonlocal reason
            verdict, reason = self._verdict_for(status, challenge)
            return verdict

        verdict = self.behaviour.decide(challenge, replay)
        return None if verdict is None else (verdict, reason)

    def _verdict_for(self, status: ParticipantStatus, challenge: Challenge) -> tuple[Verdict | None, str]:
        """Replay ``challenge`` (:func:`verifier.replay.check_challenge`): its verdict and why, or
        no verdict while a host that did not deliver is still retried (:class:`Patience`).

        The Δ a last segment's replay reads is written to disk as it arrives and kept by hash once
        the replay passed (it checked the Δ against the committed hash), so peers can aggregate it
        whatever its host serves them.

        Raises:
            GlobalStateUnavailable: θ_e is not to be had yet.
        """
        theta = self.globals.get(status.model_hash, status.epoch)
        if self._stepper is None:
            self._stepper = Stepper(self.spec, device=self.device)
        with intake(held_delta_path(self.root, self.run_id, challenge.delta_hash)) as delta:
            report = check_challenge(self.spec, self.dataset, challenge, _DeltaTee(self._source(challenge), delta),
                                     theta, bytes.fromhex(status.prev_seed), stepper=self._stepper)
            if report.verdict.outcome == "pass":
                delta.keep()
        if report.verdict.outcome == "unavailable" and not self._give_up(status):
            self.event(status.epoch, EventKind.HOST_RETRIED, f"{_about(challenge)}: {report.reason}")
            return None, report.reason
        return report.verdict, report.reason

    def _source(self, challenge: Challenge) -> ArtifactSource:
        try:
            return self.peers(challenge.endpoint)
        except ArtifactUnavailable as exc:
            return _Unreachable(str(exc))

    def _give_up(self, info: ParticipantStatus) -> bool:
        if self.patience is None:
            return True
        return self.patience.give_up(self.ledger.height(), info.phase_deadline, self.spec.phases.verify_blocks,
                                     info.to_commit)

    def _post(self, status: ParticipantStatus, challenge: Challenge, kind: EventKind, send: Callable[[], object],
              outcome: str | None = None) -> bool:
        return self.attempt(status.epoch, kind, send, _about(challenge), outcome)

    # -- open ----------------------------------------------------------------------------------

    def _open_verdicts(self, status: ParticipantStatus) -> bool:
        acted = False
        for challenge in self._mine(status, committed=True):
            if not challenge.revealed:
                acted |= self.open_verdict(status, challenge)
        return acted

    def open_verdict(self, status: ParticipantStatus, challenge: Challenge) -> bool:
        """Open the verdict committed to on ``challenge``, from what was kept on disk."""
        opening = self.opening(status.epoch, challenge.host, challenge.segment)
        if opening is None:
            if (status.epoch, challenge.host, challenge.segment) not in self._lost:
                self._lost.add((status.epoch, challenge.host, challenge.segment))
                self.event(status.epoch, EventKind.CANNOT_OPEN, f"{_about(challenge)}: nothing kept on disk")
            return False
        return self._post(status, challenge, EventKind.VERDICT_OPENED,
                          partial(self.ledger.reveal_verdict, self.key, opening), opening.outcome)


def _about(challenge: Challenge) -> str:
    return f"host {challenge.host[:12]}… segment {challenge.segment}"


class _DeltaTee(ArtifactSource):
    """A host's artifacts, the Δ read through it also written to an :class:`~node.content.Intake`
    as it arrives (to disk, not memory: a large model's Δ is never held whole)."""

    def __init__(self, inner: ArtifactSource, intake: Intake) -> None:
        self._inner, self._intake = inner, intake

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return self._inner.checkpoint(epoch, leaf)

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes | object]:
        return self._inner.checkpoint_chunks(epoch, leaf)  # the inner source's streaming, kept

    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        return self._inner.proof(epoch, leaf)

    def delta(self, epoch: int) -> bytes:
        return self._inner.delta(epoch)

    def delta_chunks(self, epoch: int) -> Iterable[bytes | object]:
        return self._intake.tee(self._inner.delta_chunks(epoch))

    def losses(self, epoch: int) -> list[int] | UntrustedJson:
        return self._inner.losses(epoch)

    def global_state(self, model_hash: str) -> bytes:
        return self._inner.global_state(model_hash)


class _Unreachable(ArtifactSource):
    """A host whose endpoint cannot even be resolved: every artifact is unavailable."""

    def __init__(self, reason: str) -> None:
        self._reason = reason

    def _refuse(self, *_: object) -> NoReturn:
        raise ArtifactUnavailable(self._reason)

    checkpoint = proof = delta = losses = global_state = _refuse  # type: ignore[assignment]
