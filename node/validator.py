"""The validator node: joins epochs, reveals, replays its challenges and posts verdicts.

Each :meth:`ValidatorNode.tick` reads this validator's status on chain (the phase, what it has
done, how many of its challenges still wait for its verdict) and does what the phase asks:

* ``join``   — post the beacon commitment (the secret is on disk first);
* ``reveal`` — reveal the beacon secret;
* ``verify`` — for every challenge assigned to it and not yet voted on: fetch the host's segment
  through its artifact source, replay it with the trainer's step (:func:`verifier.replay.check_challenge`)
  and post the verdict before the deadline.

Verdicts already on chain are never posted again (the chain's ``voted`` flag), so a validator
restarted mid-phase only does what is left. Its :class:`~verifier.adversaries.ValidatorBehaviour`
decides what is finally posted — honest by default, a liar in tests.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import NoReturn

from chain.ledger import Ledger
from node.global_store import GlobalStateUnavailable, GlobalStore, PeerResolver
from node.participant import EventSink, Participant
from protocol.keys import PrivateKey
from protocol.rules.spec import RunSpec
from protocol.views import ParticipantStatus
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.data import Dataset
from trainer.step import Stepper
from verifier.adversaries import ValidatorBehaviour
from verifier.replay import check_challenge


class ValidatorNode(Participant):
    """One validator of a run.

    Args:
        ledger: the chain.
        key: the validator's chain key.
        spec: the run spec.
        dataset: the run's dataset (to recompute every batch).
        root: the validator's work directory (beacon secrets, global states).
        peers: how to reach a host's artifacts from its advertised endpoint.
        behaviour: honest by default.
        name: a label for events.
        on_event: called with every event.
        device: where replays compute (``cpu``, ``cuda``, ``cuda:N``); a replay on another device
            than the host's agrees only within the calibrated tolerance.
    """

    role = "validator"

    def __init__(self, ledger: Ledger, key: PrivateKey, spec: RunSpec, dataset: Dataset, root: Path,
                 peers: PeerResolver, behaviour: ValidatorBehaviour | None = None, name: str | None = None,
                 on_event: EventSink | None = None, device: str = "cpu") -> None:
        super().__init__(ledger, key, spec, root, name, on_event)
        self.device = device
        self.dataset = dataset
        self.peers = peers
        self.behaviour = behaviour or ValidatorBehaviour()
        self.globals = GlobalStore(self.root, spec, ledger, peers, self.address)
        self._stepper: Stepper | None = None

    def tick(self) -> bool:
        status = self.status()
        if status.phase == "join":
            return self.maybe_join(status)
        if status.phase == "reveal":
            return self.maybe_reveal(status)
        if status.phase == "verify":
            return self._maybe_verify(status)
        return False

    def _maybe_verify(self, info: ParticipantStatus) -> bool:
        if info.pending_verdicts == 0:
            return False
        pending = [c for c in self.ledger.challenges(info.epoch, self.address) if not c.voted]
        acted = False
        for challenge in pending:
            verdict, reason = None, "without replaying"
            if self.behaviour.replays:
                try:
                    theta = self.globals.get(info.model_hash, info.epoch)
                except GlobalStateUnavailable as exc:
                    self.event(info.epoch, "waiting for θ", str(exc))
                    return acted
                try:
                    source = self.peers(challenge.endpoint)
                except ArtifactUnavailable as exc:
                    source = _Unreachable(str(exc))
                if self._stepper is None:
                    self._stepper = Stepper(self.spec, device=self.device)
                report = check_challenge(self.spec, self.dataset, challenge, source, theta,
                                         bytes.fromhex(info.prev_seed), stepper=self._stepper)
                verdict, reason = report.verdict, report.reason
            final = self.behaviour.decide(challenge, verdict)
            if final is None:
                continue
            acted |= self.attempt(info.epoch, f"verdict {final.outcome}",
                                  partial(self.ledger.verdict, self.key, final),
                                  f"host {challenge.host[:12]}… segment {challenge.segment}: {reason}")
        return acted


class _Unreachable(ArtifactSource):
    """A host whose endpoint cannot even be resolved: every artifact is unavailable."""

    def __init__(self, reason: str) -> None:
        self._reason = reason

    def _refuse(self, *_: object) -> NoReturn:
        raise ArtifactUnavailable(self._reason)

    checkpoint = proof = delta = losses = global_state = _refuse  # type: ignore[assignment]
