"""The validator node: joins epochs, reveals, replays its challenges and commits then opens verdicts.

Each :meth:`ValidatorNode.tick` reads this validator's status on chain (the phase, the dispute
round, what it has done, how many of its challenges of the round still wait for its commitment or
its opening) and does what the phase asks:

* any phase past its deadline — ``advance`` first;
* ``join``   — post the beacon commitment (the secret is on disk first);
* ``reveal`` — reveal the beacon secret;
* ``verify`` and each ``dispute`` round — for every challenge it sits on in the round and has not
  committed to: fetch the host's segment through its artifact source, replay it with the
  trainer's step (:func:`verifier.replay.check_challenge`), keep the verdict with a random salt on
  disk (fsynced) and post its commitment — nothing about the verdict is visible yet;
* ``verdict_reveal`` and each ``dispute_reveal`` — open every verdict it committed to in the
  round, from what it kept on disk.
  The Δ of a last segment whose replay passed is kept (``trainer.artifacts.keep_delta``) and
  served by hash (``veriloco validator run --listen`` serves what it holds), so an accepted host's
  Δ is always held by the validator that checked it.

A host that does not deliver is not judged ``unavailable`` at the first failure when the validator
has :class:`Patience` (the daemons do): the challenge stays pending and is tried again on later
ticks (each fetch itself retried with backoff, ``node.http_client``) until the phase deadline is
near, so a host restarting or a network hiccup costs nobody anything, and only a host that stays
silent to the end is reported. Without patience (``simulate``, whose artifacts are local) the first
answer is final.

Commitments and openings already on chain are never posted again (the chain's ``committed`` and
``revealed`` flags), so a validator restarted mid-phase only does what is left, and one that
crashed between committing and opening still opens. Its
:class:`~verifier.adversaries.ValidatorBehaviour` decides what is finally committed — honest by
default, a liar in tests — and a copying one (``copycat``) posts what it can see of another
validator's verdict instead, which the commitment binding the validator's address defeats.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, NoReturn

from chain.ledger import Ledger
from node.global_store import GlobalStateUnavailable, GlobalStore, PeerResolver
from node.participant import EventSink, Participant
from protocol.keys import PrivateKey
from protocol.messages import VerdictCommit, VerdictOpening
from protocol.rules.commitments import SALT_SIZE
from protocol.rules.merkle import MerkleProof
from protocol.rules.spec import RunSpec
from protocol.views import VERDICT_COMMIT_PHASES, VERDICT_REVEAL_PHASES, Challenge, ParticipantStatus, Vote
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, UntrustedJson, keep_delta
from trainer.data import Dataset
from trainer.fingerprint import check_fingerprint
from trainer.step import Stepper
from verifier.adversaries import ValidatorBehaviour
from verifier.replay import check_challenge


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
        self._tried: set[tuple[int, str, int, str]] = set()  # copies already refused: not sent again

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

    def _mine(self, status: ParticipantStatus) -> list[Challenge]:
        """The challenges of the current round this validator sits on and that are undecided."""
        return [c for c in self.ledger.challenges(status.epoch, self.address)
                if c.round == status.round and c.outcome == "pending"]

    # -- commit --------------------------------------------------------------------------------

    def _commit_verdicts(self, status: ParticipantStatus) -> bool:
        acted = False
        for challenge in [c for c in self._mine(status) if not c.committed]:
            if self.behaviour.copies:
                acted |= self._commit_copy(status, challenge)
                continue
            opening = self.opening(status.epoch, challenge.host, challenge.segment)
            if opening is None:  # not decided before (a restart after the commitment reuses it)
                verdict, reason = None, "without replaying"
                if self.behaviour.replays:
                    try:
                        theta = self.globals.get(status.model_hash, status.epoch)
                    except GlobalStateUnavailable as exc:
                        self.event(status.epoch, "waiting for θ", str(exc))
                        return acted
                    try:
                        source: ArtifactSource = _Keeping(self.peers(challenge.endpoint))
                    except ArtifactUnavailable as exc:
                        source = _Unreachable(str(exc))
                    if self._stepper is None:
                        self._stepper = Stepper(self.spec, device=self.device)
                    report = check_challenge(self.spec, self.dataset, challenge, source, theta,
                                             bytes.fromhex(status.prev_seed), stepper=self._stepper)
                    verdict, reason = report.verdict, report.reason
                    if verdict.outcome == "pass" and isinstance(source, _Keeping) and source.kept is not None:
                        # The replay checked this Δ against the committed hash: keep it and serve it by
                        # hash, so peers can aggregate it whatever its host serves them.
                        keep_delta(self.root, self.run_id, challenge.delta_hash, source.kept)
                    if isinstance(source, _Keeping):
                        source.release()
                    if verdict.outcome == "unavailable" and not self._give_up(status):
                        self.event(status.epoch, "host did not deliver; retrying",
                                   f"host {challenge.host[:12]}… segment {challenge.segment}: {reason}")
                        continue
                final = self.behaviour.decide(challenge, verdict)
                if final is None:
                    continue
                opening = VerdictOpening.of(final, os.urandom(SALT_SIZE))
                self.keep_opening(opening)
                self.event(status.epoch, f"verdict {final.outcome}",
                           f"host {challenge.host[:12]}… segment {challenge.segment} round {challenge.round}: "
                           f"{reason}")
            msg = VerdictCommit(epoch=status.epoch, host=challenge.host, segment=challenge.segment,
                                commitment=opening.commitment(self.address))
            acted |= self.attempt(status.epoch, "committed verdict",
                                  partial(self.ledger.commit_verdict, self.key, msg),
                                  f"host {challenge.host[:12]}… segment {challenge.segment}")
        return acted

    # -- open ----------------------------------------------------------------------------------

    def _open_verdicts(self, status: ParticipantStatus) -> bool:
        acted = False
        for challenge in [c for c in self._mine(status) if c.committed and not c.revealed]:
            if self.behaviour.copies:
                acted |= self._open_copy(status, challenge)
                continue
            opening = self.opening(status.epoch, challenge.host, challenge.segment)
            if opening is None:
                key = (status.epoch, challenge.host, challenge.segment, "lost")
                if key not in self._tried:
                    self._tried.add(key)
                    self.event(status.epoch, "cannot open verdict",
                               f"host {challenge.host[:12]}… segment {challenge.segment}: nothing kept on disk")
                continue
            acted |= self.attempt(status.epoch, f"opened verdict {opening.outcome}",
                                  partial(self.ledger.reveal_verdict, self.key, opening),
                                  f"host {challenge.host[:12]}… segment {challenge.segment}")
        return acted

    # -- a copying validator: what it can see of others' verdicts ------------------------------

    def _others(self, challenge: Challenge) -> list[Vote]:
        report = self.ledger.report(challenge.epoch)
        for c in report.challenges:
            if (c.host, c.segment) == (challenge.host, challenge.segment):
                return [v for v in c.votes if v.validator != self.address]
        return []

    def _commit_copy(self, status: ParticipantStatus, challenge: Challenge) -> bool:
        commitment = self.behaviour.copy_commitment(challenge, self._others(challenge))
        if commitment is None:
            return False  # nothing visible to copy yet
        msg = VerdictCommit(epoch=status.epoch, host=challenge.host, segment=challenge.segment, commitment=commitment)
        return self.attempt(status.epoch, "committed a copied verdict",
                            lambda: self.ledger.commit_verdict(self.key, msg),
                            f"host {challenge.host[:12]}… segment {challenge.segment}")

    def _open_copy(self, status: ParticipantStatus, challenge: Challenge) -> bool:
        key = (status.epoch, challenge.host, challenge.segment, "copy")
        if key in self._tried:
            return False
        opening = self.behaviour.copy_opening(challenge, self._others(challenge))
        if opening is None:
            return False
        self._tried.add(key)
        return self.attempt(status.epoch, "opened a copied verdict",
                            lambda: self.ledger.reveal_verdict(self.key, opening),
                            f"host {challenge.host[:12]}… segment {challenge.segment}")


    def _give_up(self, info: ParticipantStatus) -> bool:
        if self.patience is None:
            return True
        return self.patience.give_up(self.ledger.height(), info.phase_deadline, self.spec.phases.verify_blocks,
                                     info.to_commit)


class _Keeping(ArtifactSource):
    """A host's artifacts, remembering the Δ read through it (to keep it once the replay passed).

    The Δ's bytes go to a spooled file as they pass (in memory up to :data:`SPOOL_BYTES`, on disk
    beyond), so checking a large model's Δ holds a few MiB of it in memory, not the whole of it.
    """

    SPOOL_BYTES = 8 << 20

    def __init__(self, inner: ArtifactSource) -> None:
        self._inner = inner
        self.kept: IO[bytes] | None = None

    def _spool(self) -> IO[bytes]:
        self.release()
        return tempfile.SpooledTemporaryFile(max_size=self.SPOOL_BYTES)

    def release(self) -> None:
        """Drop what was kept (its memory or its temporary file)."""
        if self.kept is not None:
            self.kept.close()
            self.kept = None

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return self._inner.checkpoint(epoch, leaf)

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes | object]:
        return self._inner.checkpoint_chunks(epoch, leaf)  # the inner source's streaming, kept

    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        return self._inner.proof(epoch, leaf)

    def delta(self, epoch: int) -> bytes:
        data = self._inner.delta(epoch)
        spool = self._spool()
        spool.write(data)
        self.kept = spool
        return data

    def delta_chunks(self, epoch: int) -> Iterator[bytes | object]:
        spool = self._spool()
        chunks = iter(self._inner.delta_chunks(epoch))
        try:
            for chunk in chunks:
                if isinstance(chunk, (bytes, bytearray, memoryview)):
                    spool.write(chunk)
                yield chunk
        except BaseException:
            spool.close()
            raise
        finally:
            close = getattr(chunks, "close", None)
            if callable(close):  # a remote body refused part-way: its connection closes now
                close()
        self.kept = spool  # only a stream read to its end is kept

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
