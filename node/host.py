"""The host node: joins, trains, commits, serves, reveals, aggregates and proposes, epoch after epoch.

Each :meth:`HostNode.tick` reads this host's status on chain (the phase and what it has done) and
does what the current phase asks of it:

* any phase past its deadline — ``advance`` first;
* ``join``    — post the beacon commitment (the secret is on disk first);
* ``train``   — run the epoch's inner loop from θ_e (resumable), setting the traps it drew from its
  own secret (:mod:`trainer.trap`: one segment with the spec's ``trap_probability``), and post the
  commitment with the trap commitment (its trap set and salt on disk first); a host
  that another segment would take past the commit deadline ends the epoch after the segments it
  finished and commits those (a partial epoch, :mod:`node.partial_epoch`); a host that would
  finish no segment (its first would end past the deadline, θ_e is not at hand in time, or it
  cannot train from θ_e at all) sends ``sit_out`` instead: not checked, paid or slashed;
* ``reveal``  — reveal the beacon secret;
* ``verify``  — nothing to send; validators read the host's artifacts meanwhile;
* ``objection`` — open the trap commitment (so the phase can close early; declared traps count
  only once opened);
* ``dispute`` — nothing to send; the committees read the host's artifacts;
* ``propose`` — if accepted: fetch every accepted Δ (the chain's aggregation inputs: each accepted
  host's endpoint and committed Δ hash) from any holder, check each against its hash and against what H AdamW
  steps can do (a Δ beyond it is left out of the aggregate, the same way by every honest host),
  aggregate with the run's robust rule (each Δ weighted by the segments its host committed),
  apply the outer Nesterov step, store θ_{e+1} and propose
  its hash with the validation loss. An accepted Δ that no holder serves is waited for until the
  exclusion height (halfway through the phase, ``protocol.rules.exclusion``), then left out and
  its host named in the proposal's ``excluded`` list (the contract slashes it when the agreed
  model's proposers past 2/3 of the accepted stake excluded it). A model whose validation loss is
  not a finite number within the protocol's bound (``MAX_LOSS_MICRO``) is not proposed: the host
  logs why and the epoch ends without it.

Pipelined runs (``phases.pipelined``; docs/training.md, "Pipelined epochs", scheme 3): once epoch
e revealed and no older epoch settles, the host proposes the optimistic start of e + 1
(``propose_start``: the outer step from e's settled start over every committed Δ of e within its
per-coordinate and peer bounds). While e settles each tick does e's duties (trap opening, the
settled proposal: the accepted Δs alone, from e's ``settled_start``) and then e + 1's; e + 1's
training runs on a thread beside the ticks, and :attr:`HostNode.trainings` keeps when it ran.

Nothing the peers agree on or serve can stop the node: a θ_e that training cannot continue from
(a non-finite loss) and a model that cannot be proposed are events with a reason, once per epoch.

Δs are content-addressed (:func:`node.content.fetch`): a host keeps every Δ it aggregated and
serves it by hash, and validators keep the Δ they checked. A Δ is read from the copy on disk, else
asked of its host, then by hash of the other accepted hosts, then of the validators, so one honest
holder is enough and a host that serves its Δ to validators but not to peers cannot stall
aggregation. Each Δ is verified and checked against the update bound once per epoch and
remembered; while the host waits, later ticks ask only for the Δs still missing.

θ_e for training comes from :class:`~node.global_store.GlobalStore`: the host's own result when
its proposal won, otherwise fetched from peers by the canonical hash — that is how a host whose
hash lost the vote resynchronizes. What the host trains and serves goes through its
:class:`~trainer.behaviour.HostBehaviour` (its compute settings go with the epoch it asks for,
:class:`~trainer.behaviour.HostEpoch`); adversaries that act on chain wrap the node's duties
(``node.adversaries``).
"""

from __future__ import annotations

import hashlib
import logging
import math
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from chain.errors import LedgerError
from chain.ledger import Ledger
from node.content import Read, WrongContent, fetch, holders
from node.events import EventKind, EventSink
from node.global_store import GlobalStateUnavailable, GlobalStore, PeerResolver
from node.partial_epoch import another_segment_fits, first_segment_fits
from node.participant import Participant
from protocol.keys import PrivateKey
from protocol.messages import ModelProposal, SitOut, StartProposal
from protocol.rules.exclusion import excluded_list, exclusion_height
from protocol.rules.limits import MAX_LOSS_MICRO
from protocol.rules.losses import MICRO, loss_micro
from protocol.rules.spec import RunSpec
from protocol.tensors.aggregation import aggregate
from protocol.views import AggregationInput, ParticipantStatus
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, LocalArtifacts, held_delta_path
from trainer.behaviour import HostBehaviour, HostEpoch
from trainer.data import Dataset
from trainer.delta import carried_from, carries_residual, dequantize, residual_epochs_kept, stream_delta
from trainer.epoch_store import EpochStore
from trainer.evaluate import validation_loss
from trainer.fingerprint import check_fingerprint
from trainer.inner import EpochResult, Interrupted, ResidualUnavailable, SegmentsDone, StepCallback
from trainer.leaf_budget import leaf_bytes, live_leaf_every
from trainer.model import build_model, parameter_shapes
from trainer.outer import GlobalState, outer_step
from trainer.probe import admitted, decided_gains, probe_allowance, probe_applies, probe_deficits, probe_rule
from trainer.recompute import LeafRecomputer
from trainer.tensorfile import TensorFileError
from trainer.trap import Traps, draw
from verifier.measure import DELTA_PEER_FACTOR, EPSILON, delta_excess, param_floor

log = logging.getLogger("veriloco.node")

TRAINING_STOP_S = 300.0
"""How long :meth:`HostNode.close` waits for a pipelined training thread to stop at its next step
(``veriloco.island_launch.STOP_WAIT_S`` alike: a step of a large model on a CPU takes minutes)."""


@dataclass(frozen=True)
class Training:
    """One epoch's training by a host: when it began and ended (``time.monotonic``) and, in a
    pipelined run, the older epoch the chain said was settling when it began."""

    epoch: int
    started: float
    ended: float
    settling: int | None = None


class HostNode(Participant):
    """One host of a run.

    Args:
        ledger: the chain.
        key: the host's chain key.
        spec: the run spec.
        dataset: the run's dataset (verified against the spec's hash).
        root: the host's work directory (checkpoints, Δs, global states, beacon secrets).
        peers: how to reach another host's artifacts from its advertised endpoint.
        behaviour: honest by default; an adversary in tests and simulations.
        name: a label for events.
        on_event: called with every event.
        on_step: inner-loop progress callback.
        device: where training and the validation loss compute (``cpu``, ``cuda``, ``cuda:N``);
            checkpoints and hashes are the same wherever a step ran.
        full_leaf_every: ``K``: store leaf 0, every ``K``-th leaf and the last in full; a challenged
            leaf in between is recomputed from the nearest stored one when a validator asks for it
            (at most ``K − 1`` segments, counted in :attr:`recomputer`'s stats). 1 stores all.
            That is what the host *keeps* of a closed epoch; see ``live_leaf_every``.
        live_leaf_every: how densely an epoch is stored while it can still be challenged, a
            divisor of ``K``; None (the default) chooses per epoch from the free disk
            (:func:`trainer.leaf_budget.live_leaf_every`: every leaf where it fits, so a challenge
            costs no recomputation). Once the chain has closed the epoch it is thinned to ``K``.
        keep_epochs: keep this many epochs before the current one; older epochs are deleted once
            the chain has closed them (no challenge or verdict can come any more), and so are the
            global states no epoch can need any more (``GlobalStore.prune``). None keeps all.
    """

    role = "host"

    def __init__(self, ledger: Ledger, key: PrivateKey, spec: RunSpec, dataset: Dataset, root: Path,
                 peers: PeerResolver, behaviour: HostBehaviour | None = None, name: str | None = None,
                 on_event: EventSink | None = None, on_step: StepCallback | None = None,
                 device: str = "cpu", full_leaf_every: int = 1, keep_epochs: int | None = None,
                 live_leaf_every: int | None = None) -> None:
        super().__init__(ledger, key, spec, root, name, on_event)
        if full_leaf_every < 1 or (keep_epochs is not None and keep_epochs < 0):
            raise ValueError("full_leaf_every must be >= 1 and keep_epochs >= 0")
        if live_leaf_every is not None and (live_leaf_every < 1 or full_leaf_every % live_leaf_every):
            raise ValueError(f"live_leaf_every must divide full_leaf_every ({full_leaf_every}), "
                             f"not {live_leaf_every}")
        self.dataset = dataset
        self.behaviour = behaviour or HostBehaviour()
        self.device = device
        self.full_leaf_every = full_leaf_every
        self.live_leaf_every = live_leaf_every
        check_fingerprint(spec, device)  # a run that pins a compute profile admits no other
        self.keep_epochs = keep_epochs
        self.epochs = EpochStore(self.root, self.run_id, self.address)
        self.recomputer = LeafRecomputer(spec, dataset, self.epochs, device)
        self._pruned_before = -1
        self._thinned_below = 0  # every epoch below it is closed and kept at K (or was never denser)
        self.peers = peers
        self.globals = GlobalStore(self.root, spec, ledger, peers, self.address, keep_epochs=keep_epochs)
        self._on_step = on_step
        self._shapes = parameter_shapes(spec)
        self._eval_model: torch.nn.Module | None = None
        self._gave_up: dict[int, str] = {}  # epoch -> why this host neither trains nor proposes in it
        self._late: dict[int, str] = {}  # epoch -> why its first segment stopped: it would miss the deadline
        # The accepted Δs of the epoch being aggregated, each verified once: (epoch, Δ hash) -> the
        # dequantized Δ, or None when it is beyond the update bound and left out.
        self._checked: dict[tuple[int, str], dict[str, torch.Tensor] | None] = {}
        self._decided_gains: dict[str, int | None] = {}  # accepted host -> its probe gain on chain
        self._started: set[int] = set()  # pipelined: epochs whose optimistic start this host handled
        self._start_waits: set[int] = set()  # pipelined: epochs whose start vote waits for a Δ (said once)
        self._start_inputs: dict[int, list[AggregationInput]] = {}  # pipelined: the committed Δs, read once
        self._trainer: ThreadPoolExecutor | None = None  # pipelined: trains beside the ticks
        self._training: dict[int, Future[EpochResult]] = {}
        self.trainings: list[Training] = []
        """When this host trained each epoch, by its own clock (what the overlap is measured from)."""

    @property
    def source(self) -> ArtifactSource:
        """What this host serves to peers (through its behaviour, which may withhold)."""
        return self.behaviour.serve(self._local())

    def source_for(self, requester: str) -> ArtifactSource:
        """What this host serves to ``requester`` (its behaviour may serve some and not others)."""
        return self.behaviour.serve_to(self._local(), requester)

    def _local(self) -> LocalArtifacts:
        # Every way of serving recomputes a challenged leaf that was not stored in full.
        return LocalArtifacts(self.root, self.run_id, self.address, recompute=self.recomputer.materialize)

    # -- the loop ------------------------------------------------------------------------------

    def tick(self) -> bool:
        status = self.status()
        self._prune(status.epoch)
        # Pipelined runs: the older epoch's duties first (its trap opening and settled proposal),
        # then the newer one's (join, train, reveal) — training e + 1 while e settles.
        older = self.settling()
        self._thin(status.epoch if older is None else older.epoch)
        if older is not None:
            return self._settle(older) | self._act(status, older)
        return self._act(status, None)

    def _settle(self, older: ParticipantStatus) -> bool:
        """Pipelined runs: this host's duties in the older epoch still settling."""
        if self.maybe_advance(older):
            return True
        if older.phase == "objection":
            return self._maybe_open_traps(older)
        if older.phase == "propose":
            return self._maybe_propose(older)
        return False

    def _act(self, status: ParticipantStatus, older: ParticipantStatus | None) -> bool:
        """This host's duties in the current epoch (``older``: the one still settling, if any)."""
        if self.maybe_advance(status):
            return True
        if self.spec.phases.pipelined and older is None and self._maybe_propose_start(status):
            return True
        if status.phase == "join":
            return self.maybe_join(status)
        if status.phase == "train":
            return self._maybe_train(status)
        if status.phase == "reveal":
            return self.maybe_reveal(status)
        if status.phase == "objection":
            return self._maybe_open_traps(status)
        if status.phase == "propose" and older is None:  # held while an older epoch settles
            return self._maybe_propose(status)
        return False

    # -- retention -----------------------------------------------------------------------------

    def _prune(self, current: int) -> None:
        """Delete epochs older than ``keep_epochs`` whose challenge windows the chain has closed,
        and the global states no one can need any more (once per current epoch: a few chain reads)."""
        if self.keep_epochs is None:
            return
        states = self.globals.prune(current)
        if states:
            log.info("%s pruned %d global states no epoch can need any more", self.name, len(states))
        if current <= self._pruned_before:
            return
        # topk2: the residual of e − 1 (e − 2 pipelined) starts epoch e, and its Δ is what e's
        # validators chain from (trainer.delta.carried_from), pipelined while e + 1 is current.
        keep = max(self.keep_epochs, residual_epochs_kept(self.spec))
        deleted = self.epochs.prune(keep, current, self._windows_closed)
        self._pruned_before = current
        if deleted:
            log.info("%s pruned epochs %s (keeping %d before %d)", self.name, deleted, self.keep_epochs, current)

    def _live_leaf_every(self) -> int:
        """How densely the epoch about to train is stored (``live_leaf_every``, or the free disk's choice)."""
        if self.live_leaf_every is not None:
            return self.live_leaf_every
        try:
            free = shutil.disk_usage(self.root).free
        except OSError:
            return self.full_leaf_every
        return live_leaf_every(self.spec.train.segments, self.full_leaf_every, leaf_bytes(self._shapes), free)

    def _thin(self, open_from: int) -> None:
        """Thin every closed epoch below ``open_from`` (the oldest epoch still open) to ``K``: its
        leaves serve no one any more, and ``K`` is what the host keeps. One chain read per epoch
        that has leaves to delete, when an epoch closes."""
        if open_from <= self._thinned_below:
            return
        k = self.full_leaf_every
        for epoch in self.epochs.epochs_on_disk():
            if epoch < self._thinned_below:
                continue
            if epoch >= open_from:
                break
            extra = [leaf for leaf in self.epochs.leaves_on_disk(epoch) if not EpochStore.stored(self.spec, leaf, k)]
            if extra:  # committed or not (an epoch trained but never committed is served to no one)
                if not self._windows_closed(epoch):
                    self._thinned_below = epoch  # ask again on a later tick
                    return
                traps = self.trap_draw(epoch).segments  # a trap's end leaf is kept: no replay reaches it
                deleted = self.epochs.thin(self.spec, epoch, k, keep={g + 1 for g in traps})
                log.info("%s thinned closed epoch %d to every %d-th leaf: %d leaves deleted",
                         self.name, epoch, k, len(deleted))
        self._thinned_below = open_from

    def _windows_closed(self, epoch: int) -> bool:
        # An epoch is closed on chain after its verify (challenges, verdicts) and propose phases:
        # nothing can ask for its artifacts any more. Anything else (or a chain that cannot say) keeps it.
        try:
            return self.ledger.epoch(epoch, lists=False).phase == "closed"
        except Exception:  # noqa: BLE001 - an unreachable chain must not delete anything
            return False

    # -- train and commit ----------------------------------------------------------------------

    def _give_up(self, epoch: int, kind: EventKind, reason: str) -> bool:
        self._gave_up[epoch] = reason
        self.event(epoch, kind, reason)
        return False

    def _sit_out(self, epoch: int, reason: str) -> bool:
        """Send ``sit_out``: this host will finish no segment of ``epoch`` by the commit deadline."""
        self._gave_up[epoch] = reason
        return self.attempt(epoch, EventKind.SAT_OUT, lambda: self.ledger.sit_out(self.key, SitOut(epoch=epoch)),
                            reason)

    def _no_segment_in_time(self, deadline: int, started: int | None = None, steps: int = 0) -> str | None:
        """Why not even the first segment can end before the commit deadline (None: it still can)."""
        try:
            now = self.ledger.height()
        except LedgerError:  # a node that does not answer now must not end the epoch
            return None
        seg = self.spec.train.segment_steps
        if first_segment_fits(steps, seg, now if started is None else started, now, deadline):
            return None
        return (f"its first segment would end after the commit deadline (height {now}, step {steps}/{seg}, "
                f"deadline {deadline}): it finishes no segment")

    def _maybe_train(self, info: ParticipantStatus) -> bool:
        if (not info.joined or info.committed or info.outcome == "sat_out" or info.epoch in self._gave_up
                or self.stopping.is_set()):
            return False
        job = self._training.get(info.epoch)
        if job is None:
            try:
                theta = self.globals.get(info.model_hash, info.epoch)
            except GlobalStateUnavailable as exc:
                late = self._no_segment_in_time(info.phase_deadline)
                if late is not None:
                    return self._sit_out(info.epoch, f"θ {info.model_hash[:12]}… is not at hand and {late}")
                self.event(info.epoch, EventKind.WAITING_FOR_THETA, str(exc))
                return False
            late = self._no_segment_in_time(info.phase_deadline)
            if late is not None:
                return self._sit_out(info.epoch, late)
            ctx = HostEpoch(self.run_id, info.epoch, self.address, bytes.fromhex(info.prev_seed),
                            device=self.device, full_leaf_every=self._live_leaf_every(),
                            carry_residual=self._accepted_before(info.epoch),
                            # A topk2 residual rides on leaf S: such an epoch is whole or not committed.
                            stop=None if carries_residual(self.spec.quantization.at(info.epoch))
                            else self._deadline_stop(info.phase_deadline), traps=self.trap_draw(info.epoch))
            # Read here, on the tick's thread. The training thread asks the chain for its height only
            # (the deadline checks, _first_segment_watch and _deadline_stop): an attribute of the
            # embedded chain, one gRPC/REST query of a node, which either client answers from any thread.
            settling = self.ledger.epoch(lists=False).settling if self.spec.phases.pipelined else None
            train = partial(self._timed, info.epoch, settling, torch.get_num_threads(), partial(
                self.behaviour.train_epoch, self.spec, self.dataset, ctx, theta.params, self.root,
                on_step=self._progress(info.epoch, self._first_segment_watch(info.epoch, info.phase_deadline))))
            if not self.spec.phases.pipelined:
                return self._commit_trained(info, train)
            # Pipelined: train on a thread; the ticks meanwhile serve the settling epoch's duties.
            if self._trainer is None:
                self._trainer = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{self.name}-train")
            self._training[info.epoch] = self._trainer.submit(train)
            return False
        if not job.done():
            return False
        del self._training[info.epoch]
        return self._commit_trained(info, job.result)

    def _timed(self, epoch: int, settling: int | None, threads: int,
               train: Callable[[], EpochResult]) -> EpochResult:
        """Run ``train`` and keep when it ran in :attr:`trainings` (this host's own clock)."""
        # torch's intra-op thread count is per thread, and a CPU reduction splits by it: a new
        # thread would sum in another order than the validators replaying with the caller's count.
        if threads != torch.get_num_threads():
            torch.set_num_threads(threads)
        started = time.monotonic()
        try:
            return train()
        finally:
            self.trainings.append(Training(epoch, started, time.monotonic(), settling))

    @property
    def training(self) -> Future[EpochResult] | None:
        """Pipelined runs: the epoch's training under way on its thread, if any."""
        return next((job for job in self._training.values() if not job.done()), None)

    def _commit_trained(self, info: ParticipantStatus, train: Callable[[], EpochResult]) -> bool:
        """Post the commitment of the epoch ``train`` trains (or returns, from a thread)."""
        try:
            result = train()
        except Interrupted as exc:
            late = self._late.pop(info.epoch, None)
            if late is not None:  # its first segment would miss the deadline: it sits out
                return self._sit_out(info.epoch, late)
            # Asked to stop: the restart resumes from the last stored leaf.
            log.info("%s epoch %d training stopped: %s", self.name, info.epoch, exc)
            return False
        except ResidualUnavailable as exc:  # its validators would expect that residual: it sits out
            return self._sit_out(info.epoch, str(exc))
        except ValueError as exc:  # a non-finite loss: θ_e cannot be trained from
            return self._sit_out(info.epoch, f"θ {info.model_hash[:12]}…: {exc}")
        traps = self.trap_opening(info.epoch, self.behaviour.traps(info.epoch))
        loss = result.commitment.train_loss_micro / MICRO
        done, total = result.commitment.segments, self.spec.train.segments
        partial_note = f", a partial epoch of {done} of {total} segments" if done < total else ""
        return self.attempt(info.epoch, EventKind.COMMITTED,
                            lambda: self.ledger.commit(self.key, result.commitment, traps.commitment(self.address)),
                            f"root {result.commitment.checkpoint_root[:12]}… train loss {loss:.4f}{partial_note}")

    def close(self, wait_s: float = TRAINING_STOP_S) -> None:
        """Stop a pipelined training thread at its next step (the restart resumes from its last leaf)
        and wait up to ``wait_s`` for it to end; one still running then is left behind, said in the
        log (the daemon's process then leaves without it: ``leave_without_threads``)."""
        self.stopping.set()
        if self._trainer is not None:
            _, running = wait([job for job in self._training.values() if not job.done()], timeout=wait_s)
            if running:
                log.warning("%s: its training did not stop within %.0f s; leaving without it", self.name, wait_s)
            self._trainer.shutdown(wait=not running, cancel_futures=True)  # its worker exits once idle
            self._trainer = None
        super().close()

    def trap_draw(self, epoch: int) -> Traps:
        """This host's traps of ``epoch``: drawn from a secret only it holds (a hash of its chain
        key), the run and the epoch, with the spec's ``trap_probability`` (none without verification)."""
        ver = self.spec.verification
        secret = hashlib.sha256(b"veriloco/trap-secret/1" + self.key.secret_bytes()).digest()
        return draw(secret, self.run_id, epoch, self.spec.train.segments,
                    float(ver.trap_probability) if ver.enabled else 0.0,
                    max(param_floor(self.spec.train, self.spec.train.segment_steps), EPSILON))

    def _deadline_stop(self, deadline: int) -> SegmentsDone:
        """Ends the epoch after the segment past which another would miss the commit deadline (a
        partial epoch, :mod:`node.partial_epoch`)."""
        started = self.ledger.height()

        def stop(done: int) -> bool:
            try:
                now = self.ledger.height()
            except LedgerError as exc:  # a node that does not answer now must not end the epoch
                log.warning("%s could not read the height after segment %d (%s); training on", self.name, done, exc)
                return False
            if another_segment_fits(done, started, now, deadline):
                return False
            log.info("%s ends its epoch after %d of %d segments: another would end after the commit "
                     "deadline (height %d, deadline %d)", self.name, done, self.spec.train.segments, now, deadline)
            return True

        return stop

    def _accepted_before(self, epoch: int) -> bool:
        """``topk2`` epochs: whether this host was accepted in the epoch ``epoch`` carries from
        (``trainer.delta.carried_from``: ``epoch − 1``; ``epoch − 2`` in a pipelined run, the last
        one settled when ``epoch`` trains), so that its error-feedback residual carries over (the
        rule its validators apply: ``verifier.replay``, the Δ check); never into the first epochs,
        nor the first ``topk2`` ones after a dense one."""
        source = carried_from(self.spec, epoch)
        if source is None:
            return False
        return any(a.address == self.address for a in self.ledger.aggregation_inputs(source))

    def _first_segment_watch(self, epoch: int, deadline: int) -> Callable[[int], None]:
        """A step check while the first segment trains: when it would end after the commit deadline
        at the pace of its steps so far, the host would finish no segment, so training stops (an
        :class:`Interrupted`, which an island's ranks agree on) and the host sits out. The reason
        is kept in :attr:`_late` so that :meth:`_commit_trained` tells it from a stop request."""
        started = self.ledger.height()

        def check(done: int) -> None:
            if done >= self.spec.train.segment_steps:
                return
            late = self._no_segment_in_time(deadline, started, done)
            if late is not None:
                self._late[epoch] = late
                raise Interrupted(late)

        return check

    def _progress(self, epoch: int, watch: Callable[[int], None] | None = None) -> StepCallback:
        """The step callback: a log line at every segment boundary (steps done, the segment's mean
        loss), ``watch`` (the first segment's deadline check), then the caller's ``on_step``."""
        total, every = self.spec.train.inner_steps, self.spec.train.segment_steps
        losses: list[float] = []

        def on_step(done: int, loss: float) -> None:
            if self.stopping.is_set():  # at a step boundary; the finished segments are kept
                raise Interrupted(f"at step {done}/{total}; a restart resumes from the last stored leaf")
            losses.append(loss)
            if done % every == 0 or done == total:
                log.info("%s epoch %d training: step %d/%d, loss %.4f", self.name, epoch, done, total,
                         sum(losses) / len(losses))
                losses.clear()
            if watch is not None:
                watch(done)
            if self._on_step is not None:
                self._on_step(done, loss)

        return on_step

    # -- open the traps ------------------------------------------------------------------------

    def _maybe_open_traps(self, status: ParticipantStatus) -> bool:
        if not status.challenged or status.traps_opened:
            return False
        opening = self.trap_opening(status.epoch, [])
        detail = f"traps {opening.segments}" if opening.segments else "no traps"
        return self.attempt(status.epoch, EventKind.TRAPS_OPENED, lambda: self.ledger.reveal_traps(self.key, opening),
                            detail)

    # -- stopping ------------------------------------------------------------------------------

    def due_now(self, status: ParticipantStatus) -> str | None:
        """:meth:`Participant.due_now`, and the trap opening of a challenged host (one transaction
        from what is on disk; a host that does not open its trap commitment is slashed)."""
        if status.phase == "objection" and status.challenged and not status.traps_opened:
            return "its trap opening"
        return super().due_now(status)

    def serves_now(self, status: ParticipantStatus) -> bool:
        """Whether validators are reading this host's artifacts now (it is challenged in a verify or
        dispute phase): a stopping daemon keeps serving while such a phase ends soon."""
        return status.phase in ("verify", "dispute") and status.challenged

    # -- aggregate and propose -----------------------------------------------------------------

    def _maybe_propose(self, info: ParticipantStatus) -> bool:
        if not info.accepted or info.proposed or info.epoch in self._gave_up or self.stopping.is_set():
            return False
        try:
            theta = self.globals.get(info.model_hash, info.epoch)
            base = self._settled_start(info.epoch, theta)
            deltas, unserved, segments = self._accepted_deltas(info.epoch, theta)
        except (GlobalStateUnavailable, ArtifactUnavailable) as exc:
            self.event(info.epoch, EventKind.WAITING_TO_AGGREGATE, str(exc))
            return False
        if unserved:
            # Wait for every holder until the exclusion height (the same for every honest
            # proposer), then leave the unserved Δs out and name their hosts in the proposal.
            cutoff = exclusion_height(info.phase_deadline, self.spec.phases.propose_blocks)
            height = self.ledger.height()
            why = "; ".join(unserved.values())
            if height < cutoff:
                self.event(info.epoch, EventKind.WAITING_TO_AGGREGATE,
                           f"{why} (excluding from height {cutoff}, now {height})")
                return False
            self.event(info.epoch, EventKind.DELTA_EXCLUDED, f"no holder served it by height {cutoff}: {why}")
        self._checked.clear()  # aggregated now (a retry reads the kept files again)
        deltas = self._within_peer_bound(info.epoch, deltas, segments, self._decided_gains)
        if not deltas:
            return self._give_up(info.epoch, EventKind.PROPOSAL_WITHHELD, "no accepted Δ is within the update bound")
        # Each Δ weighs the segments it covers: a partial epoch counts by the steps it did.
        weights = {address: segments[address] for address in deltas}
        # From the settled θ_e: in a pipelined run this corrects the optimistic start θ_e (θ and
        # outer momentum) to what the accepted Δs alone give; otherwise base is θ_e itself.
        new = outer_step(base, aggregate(self.spec.aggregation, deltas, weights), self.spec.outer)
        model_hash = self.globals.put(new)
        val = self._validation_loss(new)
        problem = proposal_problem(val)
        if problem is not None:
            return self._give_up(info.epoch, EventKind.PROPOSAL_WITHHELD, f"θ {model_hash[:12]}…: {problem}")
        proposal = ModelProposal(epoch=info.epoch, model_hash=model_hash, val_loss_micro=loss_micro(val),
                                 excluded=excluded_list(unserved))
        excluded = f", {len(unserved)} excluded" if unserved else ""
        return self.attempt(info.epoch, EventKind.PROPOSED, lambda: self.ledger.propose_model(self.key, proposal),
                            f"θ {model_hash[:12]}… from {len(deltas)} Δ{excluded}, val loss {val:.4f}")

    # -- pipelined runs: the optimistic start -------------------------------------------------

    def _settled_start(self, epoch: int, theta: GlobalState) -> GlobalState:
        """The settled θ_e the outer step of ``epoch`` applies to: the chain's ``settled_start``
        when ``epoch`` opened from an optimistic start (and its predecessor closed), else θ_e
        (``theta``) — the rule of ``trainer.diloco.simulate(schedule="optimistic")``."""
        if not self.spec.phases.pipelined:
            return theta
        settled = self.ledger.epoch(epoch, lists=False).settled_start
        return theta if settled is None else self.globals.get(settled, epoch)

    def _maybe_propose_start(self, status: ParticipantStatus) -> bool:
        """Pipelined runs: once ``status``'s epoch e revealed (its seed is fixed) and no older epoch
        settles, a host that committed in e proposes θ_{e+1}'s optimistic start: the outer step from
        e's settled start over every committed Δ of e within this host's per-coordinate and peer
        bounds, weighted by its segments (docs/training.md, scheme 3). Once per epoch; a Δ that no
        holder serves yet is asked for again on later ticks, until e + 1 opens or e closes."""
        if (not status.committed or status.phase in ("join", "train", "reveal", "closed")
                or status.epoch in self._started or status.epoch in self._gave_up or self.stopping.is_set()):
            return False
        info = self.ledger.epoch(status.epoch, lists=False)
        if info.closing is not None or info.start_model_hash is not None:
            return False
        try:
            theta = self.globals.get(status.model_hash, status.epoch)
            base = self._settled_start(status.epoch, theta)
            if status.epoch not in self._start_inputs:  # the commitments are final once reveal closed
                self._start_inputs = {status.epoch: self._committed_inputs(status.epoch)}
            inputs = self._start_inputs[status.epoch]
            deltas: dict[str, dict[str, torch.Tensor]] = {}
            for committed in inputs:
                delta = self._checked.get((status.epoch, committed.delta_hash))
                if (status.epoch, committed.delta_hash) not in self._checked:
                    delta = self._checked_delta(status.epoch, theta, committed, inputs)
                    self._checked[status.epoch, committed.delta_hash] = delta
                if delta is not None:
                    deltas[committed.address] = delta
        except (GlobalStateUnavailable, ArtifactUnavailable) as exc:
            # Not yet: right after reveal only a Δ's host holds it (validators keep it once they
            # passed its last segment), so a host that refuses its peers would, were this the
            # epoch's one try, keep every honest host out of the vote at no cost to itself.
            if status.epoch not in self._start_waits:
                self._start_waits.add(status.epoch)
                self.event(status.epoch, EventKind.WAITING_TO_AGGREGATE,
                           f"optimistic start: {exc}; asking again on later ticks")
            return False
        self._started.add(status.epoch)
        deltas = self._within_peer_bound(status.epoch, deltas, {i.address: i.segments for i in inputs})
        if not deltas:
            self.event(status.epoch, EventKind.PROPOSAL_WITHHELD, "optimistic start: no committed Δ within the bounds")
            return False
        weights = {i.address: i.segments for i in inputs if i.address in deltas}
        start = outer_step(base, aggregate(self.spec.aggregation, deltas, weights), self.spec.outer)
        model_hash = self.globals.put(start)
        return self.attempt(status.epoch, EventKind.PROPOSED_START,
                            lambda: self.ledger.propose_start(self.key, StartProposal(epoch=status.epoch,
                                                                                       model_hash=model_hash)),
                            f"θ {model_hash[:12]}… for epoch {status.epoch + 1} from {len(deltas)} committed Δ")

    def _committed_inputs(self, epoch: int) -> list[AggregationInput]:
        """Every host that committed in ``epoch`` as an aggregation input (its committed Δ hash and
        segments from the epoch's report, its endpoint from its membership), in address order."""
        endpoints = {m.address: m.endpoint for m in self.ledger.members(role="host")}
        return sorted((AggregationInput(address=h.address, endpoint=endpoints[h.address],
                                        delta_hash=h.commitment.delta_hash, segments=h.commitment.segments)
                       for h in self.ledger.report(epoch).hosts
                       if h.commitment is not None and h.address in endpoints), key=lambda i: i.address)

    def _accepted_deltas(self, epoch: int, theta: GlobalState) -> tuple[dict[str, dict[str, torch.Tensor]],
                                                                         dict[str, str], dict[str, int]]:
        """Every accepted host's dequantized Δ within the update bound (one paged query for all of
        them: address, endpoint, Δ hash, segments), each verified once in the epoch (:meth:`_checked_delta`).

        Returns the Δs by host, the hosts whose Δ no holder served now, with why, and the segments
        each accepted host's Δ covers."""
        inputs = self.ledger.aggregation_inputs(epoch)
        self._decided_gains = {i.address: i.gain_micro for i in inputs}
        self._checked = {k: v for k, v in self._checked.items() if k[0] == epoch}
        deltas, unserved = {}, {}
        for accepted in inputs:
            key = (epoch, accepted.delta_hash)
            if key not in self._checked:
                try:
                    self._checked[key] = self._checked_delta(epoch, theta, accepted, inputs)
                except ArtifactUnavailable as exc:
                    if accepted.address == self.address:
                        raise  # its own Δ: nothing to exclude, a local fault to wait out
                    unserved[accepted.address] = str(exc)
                    continue
            if (delta := self._checked[key]) is not None:
                deltas[accepted.address] = delta
        return deltas, unserved, {i.address: i.segments for i in inputs}

    def _within_peer_bound(self, epoch: int, deltas: dict[str, dict[str, torch.Tensor]],
                           segments: Mapping[str, int], gains: Mapping[str, int | None] | None = None
                           ) -> dict[str, dict[str, torch.Tensor]]:
        """``deltas`` without those beyond :data:`~verifier.measure.DELTA_PEER_FACTOR` × the median
        of the others per tensor, and every small tensor of the rest clipped to that factor × its
        median: what no replay saw is bounded by what the peers' training moved. With ``gains``
        (the probe gains the chain decided, run's probe on) also without the Δs whose gain is below
        its peers' median by more than ``aggregation.probe_margin`` (``probe_margin_topk2`` in a
        ``topk2`` epoch, ``trainer.probe.probe_rule``) and a share of a positive median
        (``trainer.probe.probe_outliers``,
        from :data:`~trainer.peer_bound.DELTA_PEER_MIN` Δs up): what a Δ does to the model. Applied
        once, to the set that is aggregated (the same pure function of the same bytes and chain
        integers at every honest proposer), not on every tick of the wait. Like the peer bound, a
        probe outlier is only left out of this aggregate: it stays accepted, paid and unslashed."""
        # Each Δ against its peers per segments trained: a whole epoch among partial ones is
        # compared with their norms scaled up to its segments (``verifier.measure.peer_excess``).
        kept_segments = {a: segments[a] for a in deltas}
        decided: dict[str, int] | None = None
        # A topk2 epoch is probed with its own allowance (trainer.probe.probe_rule): the
        # contract does not know the epoch's scheme, it records the gains; the rule is applied here.
        if gains is not None and probe_applies(self.spec, epoch):
            # A host the chain decided no gain for counts at the lowest gain (trainer.probe.decided_gains).
            decided = decided_gains({a: gains.get(a) for a in deltas})
        margin, relative = probe_rule(self.spec, epoch)
        # The one rule the chain-free simulation applies too (trainer.diloco.proposers_aggregate).
        bound = admitted(deltas, decided, margin, kept_segments, relative_bps=relative)
        if decided is not None and bound.excluded:
            deficits = probe_deficits(decided, kept_segments)
            for address in sorted(bound.excluded):
                allowed = probe_allowance(decided[address] + deficits[address], margin, relative)
                self.event(epoch, EventKind.DELTA_LEFT_OUT,
                           f"{address}: its probe gain {decided[address] / MICRO:+.6f} nats is "
                           f"{float(deficits[address]) / MICRO:.6f} below its peers' median (at most "
                           f"{float(allowed) / MICRO:.6f}: the epoch's margin, aggregation.probe_margin or "
                           f"probe_margin_topk2, and a share of the median)")
        for address, (excess, where) in bound.left_out.items():
            if address in bound.excluded:
                continue  # said above
            self.event(epoch, EventKind.DELTA_LEFT_OUT,
                       f"{address}: its Δ of {where} is {excess * DELTA_PEER_FACTOR:.3g}× the median norm "
                       f"of the {len(deltas)} accepted Δs per segments trained (at most {DELTA_PEER_FACTOR:g}×)")
        for address, scales in bound.clipped.items():
            names = ", ".join(f"{n} ×{s:.3g}" for n, s in scales.items())
            self.event(epoch, EventKind.DELTA_CLIPPED,
                       f"{address}: small tensors scaled to {DELTA_PEER_FACTOR:g}× their median norm over "
                       f"the {len(bound.kept)} kept Δs: {names}")
        return bound.kept

    def _checked_delta(self, epoch: int, theta: GlobalState, accepted: AggregationInput,
                       inputs: list[AggregationInput]) -> dict[str, torch.Tensor] | None:
        """``accepted``'s Δ from any holder, checked against its committed hash and dequantized;
        None (logged) when it moves a coordinate further than H AdamW steps can.

        Validators check this bound on the last segment; checking it again here costs one pass over
        Δ, is the same computation on the same bytes for every honest host (so they still agree),
        and keeps a Δ that passed colluding validators out of the aggregate."""
        payload = fetch(held_delta_path(self.root, self.run_id, accepted.delta_hash),
                        self._delta_answers(epoch, accepted, inputs), partial(self._verify_delta, epoch, accepted),
                        f"the Δ of {accepted.address}")
        quant = self.spec.quantization.at(epoch)  # the scheme of this epoch (quantization.schedule)
        delta = dequantize(payload, self._shapes, quant)
        if carries_residual(quant):
            # An error-feedback Δ also sends what earlier epochs left out, so no per-epoch bound on
            # H steps holds for it; its validators checked it byte for byte (docs/verification.md).
            return delta
        steps = accepted.segments * self.spec.train.segment_steps  # H, or fewer for a partial epoch
        excess, where = delta_excess(theta.params, delta, payload, self._shapes, self.spec.train, quant, steps)
        if not excess <= 1:
            self.event(epoch, EventKind.DELTA_LEFT_OUT, f"{accepted.address}: moves a coordinate of {where} "
                       f"{excess:.3g}× as far as {steps} AdamW steps can")
            return None
        return delta

    def _delta_answers(self, epoch: int, accepted: AggregationInput,
                       inputs: list[AggregationInput]) -> Iterator[tuple[str, Read]]:
        """(who, how to read) for every participant that may hold ``accepted``'s Δ, likeliest first."""
        if accepted.address == self.address:
            yield "own epoch", lambda: self.source.delta_chunks(epoch)
            return
        yield accepted.address, lambda: self.peers(accepted.endpoint).delta_chunks(epoch)
        others = ((h.address, h.endpoint) for h in inputs)
        for address, endpoint in holders(self.ledger, {self.address, accepted.address}, others, ("validator",)):
            yield address, partial(self._by_hash, endpoint, accepted.delta_hash, epoch)

    def _by_hash(self, endpoint: str, delta_hash: str, epoch: int) -> Iterable[bytes | object]:
        # The epoch is known here: the body is capped by its scheme's size, not the schedule's largest.
        return self.peers(endpoint).delta_by_hash_chunks(delta_hash, epoch)

    def _verify_delta(self, epoch: int, accepted: AggregationInput, chunks: Iterable[object],
                      who: str) -> dict[str, torch.Tensor]:
        # Checked and hashed as the bytes arrive: never the whole file and its decoded copy. The
        # layout is the epoch's scheme's (quantization.schedule): a Δ in another scheme is refused.
        spec = self.spec.for_epoch(epoch)
        try:
            payload, digest = stream_delta(chunks, spec, what=f"Δ of {accepted.address}")
        except TensorFileError as exc:
            quant = spec.quantization
            raise TensorFileError(f"{exc} (epoch {epoch}'s Δs are {quant.scheme}, block {quant.block_size})") from None
        if digest.hex() != accepted.delta_hash:
            raise WrongContent(f"served a Δ that does not match the commitment of {accepted.address}")
        return payload

    def _validation_loss(self, state: GlobalState) -> float:
        if self._eval_model is None:
            self._eval_model = build_model(self.spec).to(self.device)
        return validation_loss(self._eval_model, self.dataset, self.spec.data.val_windows, params=state.params)


def proposal_problem(val_loss: float) -> str | None:
    """Why a model with validation loss ``val_loss`` (nats) cannot be proposed, or ``None``.

    A proposal carries the loss in micro-nats within ``[0, MAX_LOSS_MICRO]`` (the contract refuses
    anything else); a model whose loss is not finite or beyond that is broken, and proposing it
    would only make the transaction fail.
    """
    if not math.isfinite(val_loss):
        return f"its validation loss is {val_loss}"
    if not 0 <= val_loss * MICRO <= MAX_LOSS_MICRO:
        return (f"its validation loss {val_loss:.6g} nats is outside the protocol's bound "
                f"[0, {MAX_LOSS_MICRO / MICRO:g}] nats")
    return None
