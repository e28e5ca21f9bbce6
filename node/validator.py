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
  checked it. The leaves, proofs and losses a replay checked are kept the same way
  (``node.leaf_holding``), and a validator the host refuses reads them from those holders (the
  challenge's round-0 seats first, then other validators) before it ever votes ``unavailable``.
  A round-0 seat that objected commits a **re-vote** in ``dispute`` (``Challenge.round`` =
  ``REVOTE_ROUND``): a ``fail`` repeated, or, after an ``unavailable``, a fresh replay that reads
  the host and then every holder (the final voters read and keep the leaves meanwhile), so a seat
  refused alone votes with the final round and is paid like it.

A host that does not deliver is not judged ``unavailable`` at the first failure when the validator
has :class:`Patience` (the daemons do): the challenge stays pending and is tried again on later
ticks (each fetch itself retried with backoff, ``node.http_client``; the holders asked again each
time) until the phase deadline is near, so a host restarting, a network hiccup or a holder still
replaying costs nobody anything, and only a host that nobody serves to the end is reported.
Without patience (``simulate``, whose artifacts are local) a refused challenge waits one tick (so
that the seats ticking after it in the same round have read and kept it), then the answer is final.

Commitments and openings already on chain are never posted again (the chain's ``committed`` and
``revealed`` flags), so a validator restarted mid-phase only does what is left, and one that
crashed between committing and opening still opens. Its
:class:`~verifier.adversaries.ValidatorBehaviour` decides what is committed — honest by default,
a liar in tests, which saves the replay. A validator that posts others' verdicts instead
(``copycat``) wraps the commit and open duties (``node.adversaries``).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from chain.ledger import Ledger
from node.content import Read, WrongContent, fetch, holders
from node.delayed_seed import DelayedSeedPoster
from node.events import EventKind, EventSink
from node.global_store import GlobalStateBeingFetched, GlobalStateUnavailable, GlobalStore, PeerResolver
from node.http import ClientLimits
from node.leaf_holding import (
    HOLDER_WAIT_SHARE,
    HOLDERS_FIRST,
    MAX_OTHER_HOLDERS,
    FromHolder,
    Keeping,
    dispute_tree,
    holder_addresses,
    holder_wait_end,
    prune_held,
)
from node.participant import BlockClock, Participant
from node.prefetch import EndChunks, Reusing, Spool, Unreachable, fetch_challenge, fetch_end_chunks
from protocol.keys import PrivateKey
from protocol.messages import Objection, Ready, Verdict, VerdictCommit, VerdictOpening
from protocol.rules.commitments import SALT_SIZE
from protocol.rules.merkle import MerkleProof
from protocol.rules.spec import RunSpec
from protocol.views import (
    REVOTE_ROUND,
    VERDICT_COMMIT_PHASES,
    VERDICT_REVEAL_PHASES,
    Challenge,
    ParticipantStatus,
)
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, UntrustedJson, held_delta_path
from trainer.data import Dataset
from trainer.delta import carried_from, dequantize, load_delta, stream_delta
from trainer.fingerprint import check_fingerprint
from trainer.leaf_digests import LeafDigests
from trainer.model import parameter_shapes
from trainer.outer import GlobalState
from trainer.probe import (
    PROBE_SCALE,
    check_probe_windows,
    dispute_starts,
    gain_micro,
    probe_gain,
    probe_loss,
    probe_seed,
    probe_starts,
)
from trainer.step import Stepper
from verifier.adversaries import ValidatorBehaviour
from verifier.replay import (
    ChunksWanted,
    Replayed,
    ReplayFault,
    SpilledReplay,
    VerdictReport,
    check_challenge,
    trusted_end_digests,
)


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

    def margin(self, window: int, pending: int = 1) -> int:
        """Blocks before the deadline at which a host that has not delivered is reported."""
        return max(self.margin_blocks, int(window * self.margin_fraction)) + pending

    def give_up(self, height: int, deadline: int, window: int, pending: int = 1) -> bool:
        """Whether the deadline is near enough to report the host unavailable now."""
        return deadline - height <= self.margin(window, pending)

    def request_deadline_s(self, window: int, challenges: int, block_s: float | None,
                           base: ClientLimits) -> float:
        """The fixed part of each request's deadline (``ClientLimits.deadline_s``) for a validator
        with ``challenges`` to work in a ``window``-block phase of ``block_s``-second blocks: half
        the give-up margin (:meth:`margin` with every challenge still to post), so a request
        started just before the validator gives up ends well before the phase does, at least
        :data:`MIN_REQUEST_S` (connect, head and a slow start of an honest host) and at most
        ``base.deadline_s``; ``base.deadline_s`` while the block time is not known yet. With 1 s
        blocks, a 100-block window and 9 challenges: 19 blocks of margin, 9.5 s (60 s before)."""
        if block_s is None:
            return base.deadline_s
        half = self.margin(window, max(1, challenges)) * block_s / 2
        return float(min(base.deadline_s, max(MIN_REQUEST_S, math.floor(half))))


MIN_REQUEST_S = 5.0
"""The shortest fixed part of a request's deadline a validator sets (:meth:`Patience.request_deadline_s`)."""

FETCH_THREADS = 4
"""Hosts a patient validator fetches from at once (one job per host)."""

SETTLING_TICK_WAIT_S = 0.2
"""Seconds a tick waits for a fetch under way while two epochs are in flight (a pipelined run): the
newer epoch's join, which every host waits for, is taken at the next tick."""

INLINE_BUDGET_S = 5.0
"""Seconds a validator without patience (``simulate``: artifacts in-process) gives a host for one
challenge, on top of the challenge's bytes at ``ClientLimits.min_rate``: a host that drips is cut."""


SLOW_HOLDER_S = 1.0
"""A holder read inline that took this long and served nothing stalled (one that does not hold the
leaves answers at once): it is asked after the others next time (``ValidatorNode._from_holders``)."""


class _NotFetched(Exception):
    """A challenge whose host's artifacts are not in a spool yet (a patient validator fetches first)."""


@dataclass(frozen=True)
class _SeatsFirst:
    """A round-0 challenge to fetch from the seats before this one, not the host, for now
    (``node.leaf_holding``: seats in turn).

    Args:
        seats: (address, endpoint) of the seats before this one, in the chain's order.
        until: ``time.monotonic()`` at which the wait ends (no holder read goes on past it).
        settled: every one of them has committed its verdict: if none serves, none will.
        previous_delta: the Δ hash of the host's epoch its residual carries from (``topk2``), for
            the holder's view, and that epoch (``trainer.delta.carried_from``).
    """

    seats: list[tuple[str, str]]
    until: float
    settled: bool
    previous_delta: str | None
    previous_epoch: int | None


@dataclass
class _EndWanted:
    """A replay stopped for its end leaf's differing chunks (``verifier.replay.ChunksWanted``): its
    spool (back in ``_spools`` once :attr:`Spool.end` is in), its replay on disk, the chunks."""

    spool: Spool
    replay: SpilledReplay
    wanted: list[tuple[int, int]]
    digests: LeafDigests


log = logging.getLogger("veriloco.node")


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
            answer is final). A patient validator fetches each host's challenges ahead in a pool
            of ``fetch_threads`` threads, one host per thread, each under a budget
            (:meth:`ValidatorNode.fetch_budget_s`), and replays a challenge once its artifacts
            are in (``node.prefetch``): a slow host holds one fetch thread, no other host's
            verdicts. Without patience a host gets :data:`INLINE_BUDGET_S` per challenge.
        keep_epochs: delete the global states no epoch can need any more, keeping those of this
            many epochs before the current one (``GlobalStore.prune``); None keeps all.
        fetch_threads: hosts fetched from at once by a patient validator (0: inline, as without
            patience).
        tick_wait_s: how long a tick waits for a fetch under way before it returns (at most
            :data:`SETTLING_TICK_WAIT_S` while an older epoch settles).
    """

    role = "validator"

    def __init__(self, ledger: Ledger, key: PrivateKey, spec: RunSpec, dataset: Dataset, root: Path,
                 peers: PeerResolver, behaviour: ValidatorBehaviour | None = None, name: str | None = None,
                 on_event: EventSink | None = None, device: str = "cpu", patience: Patience | None = None,
                 keep_epochs: int | None = None, fetch_threads: int = FETCH_THREADS,
                 tick_wait_s: float = 1.0) -> None:
        super().__init__(ledger, key, spec, root, name, on_event)
        self.device = device
        check_fingerprint(spec, device)  # a run that pins a compute profile admits no other
        # A gain dispute draws as many windows again, disjoint from the probe's: refuse a run whose
        # validation split cannot, before any vote (else every honest dispute vote would fail).
        check_probe_windows(dataset, spec.verification.probe_windows)
        self.patience = patience
        self.dataset = dataset
        self.peers = peers
        self.behaviour = behaviour or ValidatorBehaviour()
        self.globals = GlobalStore(self.root, spec, ledger, peers, self.address, keep_epochs=keep_epochs)
        self._stepper: Stepper | None = None
        self._lost: set[tuple[int, str, int]] = set()  # verdicts it cannot open (said once)
        self.clock = BlockClock()
        self.base_limits = ClientLimits()
        self._threads = fetch_threads if patience is not None else 0
        self._tick_wait = tick_wait_s
        self._wait_s = tick_wait_s  # this tick's wait for a fetch (shorter while two epochs are in flight)
        self._pool: ThreadPoolExecutor | None = None
        self._spool_root = self.root / self.run_id.hex() / "spool" / self.address
        shutil.rmtree(self._spool_root, ignore_errors=True)  # what a previous process left
        self._fetching: dict[str, Future[list[Spool | EndChunks]]] = {}  # host -> its fetch job under way
        self._spools: dict[tuple[int, str, int, int], Spool] = {}  # (epoch, host, segment, round) -> fetched
        self._ends: dict[tuple[int, str, int, int], _EndWanted] = {}  # replays waiting for end-leaf chunks
        self._seconds: dict[str, float] = {}  # host -> seconds its last fetch took per challenge (inf: failed)
        self._why: dict[str, str] = {}  # host -> why its last fetch did not deliver
        self._assigned = 0  # challenges of the current round, for the request deadlines
        self._leaf_bytes: int | None = None
        # The probe (trainer.probe): per (epoch, θ_e, draw) its windows and L(θ_e) on them; the
        # draw is "" for the probe's windows, the host's address for its dispute windows.
        self._probe_bases: dict[tuple[int, str, str], tuple[list[int], float]] = {}
        self.probe_only = 0  # gain-dispute final votes answered with the probe alone (no replay)
        self._waited: set[tuple[int, str, int, int]] = set()  # refused challenges given one tick for holders
        self._validators: dict[int, list[str]] = {}  # the epoch's validators (V), the dispute tree's order
        self._holders_asked: set[tuple[int, str, int, int]] = set()  # challenges whose holders were asked first
        self._declined: set[tuple[int, str, int, int]] = set()  # round-0 challenges the seats before did not serve
        self._whole_end: set[tuple[int, str]] = set()  # (epoch, host) whose end-leaf chunks did not arrive
        self._slow_holders: dict[tuple[int, str, int, int], set[str]] = {}  # challenge -> holders that stalled
        self._refused: set[tuple[int, str, int, int]] = set()  # round-0 challenges its host did not deliver to it
        self._seen: dict[tuple[int, str, str], dict[tuple[str, int], object]] = {}  # (epoch, root, seat) -> JSON read
        # Fetch threads add to _seen and _declined while the tick prunes them: a dict or set iterated
        # while another thread inserts raises "changed size during iteration".
        self._seen_lock = threading.Lock()
        self.holders_first = True  # ask holders before the host (node.leaf_holding); off: the host first
        self.dispute_tree = True  # a dispute voter reads in the dispute tree; off: the round-0 seats first
        self.end_by_digests = True  # prefetch the end leaf's digest list, not the leaf; off: whole (as before)
        # A refused challenge waits for holders, or θ_e for its warm fetch, this tick (counts as acting).
        self._deferred = False
        # Fetch θ_e once joined e, on a thread of its own (GlobalStore.warm); every chain client
        # answers from any thread (the embedded chain under one lock, the gRPC client under its own).
        self.warm_theta = True
        # Phase `delay` (verification.delay_squarings > 0): the VDF over the seed, on its own thread.
        self.delayed_seed = DelayedSeedPoster(self)

    def tick(self) -> bool:
        status = self.status()
        self.globals.prune(status.epoch)
        prune_held(self.root, self.run_id, status.epoch)
        # Pipelined runs: the older epoch's verdict rounds go on while the newer one trains.
        older = self.settling()
        # Two epochs in flight: a tick waits for fetches only briefly, so e + 1's join (which every
        # host waits for) is not held behind e's fetches.
        self._wait_s = self._tick_wait if older is None else min(self._tick_wait, SETTLING_TICK_WAIT_S)
        if older is not None:
            return self._act(older) | self._act(status)  # both: e + 1's join must not wait for e
        return self._act(status)

    def _act(self, status: ParticipantStatus) -> bool:
        """Do what ``status``'s epoch asks of this validator now; whether a transaction was sent."""
        if self.warm_theta and status.joined and status.phase not in ("join", "closed"):
            # θ_e while e trains, on a thread of its own: read here at its verify it would hold this
            # tick (and so its next join, in a pipelined run) while the hosts' uplinks carry leaves.
            self.globals.warm(status.model_hash, status.epoch)
        if self.maybe_advance(status):
            return True
        if status.phase == "join":
            return self.maybe_join(status)
        if status.phase == "reveal":
            return self.maybe_reveal(status)
        if status.phase == "delay":
            return self.delayed_seed.tick(status)
        if status.phase in VERDICT_COMMIT_PHASES and status.to_commit:
            return self._commit_verdicts(status)
        if status.phase in VERDICT_REVEAL_PHASES and status.to_reveal:
            return self._open_verdicts(status)
        if status.phase == "objection" and status.ready_due:
            return self._send_ready(status)
        return False

    def _mine(self, status: ParticipantStatus, committed: bool) -> list[Challenge]:
        """The challenges the current phase waits for this validator on (the contract's ``due``:
        its commitment in ``verify``/``dispute``, its opening in ``verdict_reveal``/
        ``dispute_reveal``), committed to or not."""
        return [c for c in self.ledger.challenges(status.epoch, self.address)
                if c.due and c.committed == committed]

    def _send_ready(self, status: ParticipantStatus) -> bool:
        """``objection``: its ``ready`` naming the round-0 seats it committed to whose kept verdict is
        not ``pass`` (a seat whose opening is lost objects too: it cannot open a ``pass``), in
        pages of at most ``MAX_OBJECTIONS_PER_READY`` (``Ready.pages``). A page refused stops the
        tick; the next sends them all again (the contract skips objections it already has)."""
        objections = []
        for c in self.ledger.challenges(status.epoch, self.address):
            if c.round != 0 or not c.committed:
                continue
            kept = self.opening(status.epoch, c.host, c.segment)
            if kept is None or kept.outcome != "pass":
                objections.append(Objection(host=c.host, segment=c.segment))
        pages = Ready.pages(status.epoch, objections)
        for i, msg in enumerate(pages):
            part = f" (ready {i + 1} of {len(pages)})" if len(pages) > 1 else ""
            if not self.attempt(status.epoch, EventKind.READY, partial(self.ledger.ready, self.key, msg),
                                f"{len(msg.objections)} objection(s){part}"):
                return False
        return True

    # -- commit: replay → decide → post --------------------------------------------------------

    def _commit_verdicts(self, status: ParticipantStatus) -> bool:
        """Commit a verdict on every challenge of the round that is ready: one kept on disk (a
        restart after deciding), or one whose replay can run now — at once without patience, else
        once its host's artifacts are fetched (:meth:`_fetch_ahead`). A stopping validator only
        commits what it kept (no replay starts)."""
        mine = self._mine(status, committed=False)
        self._assigned = len(mine)
        self._forget(status, mine)
        self._deferred = False
        acted, waiting = self._commit_ready(status, mine)
        if waiting and not self.stopping.is_set():
            self._fetch_ahead(status, waiting)
            if not acted and self._fetching:
                # Nothing to post yet: wait a little for a fetch to land instead of spinning.
                wait(list(self._fetching.values()), timeout=self._wait_s, return_when=FIRST_COMPLETED)
                acted, _ = self._commit_ready(status, waiting)
        return acted or self._deferred

    def _commit_ready(self, status: ParticipantStatus, challenges: list[Challenge]) -> tuple[bool, list[Challenge]]:
        """Commit what can be committed now; the challenges still waiting for their host's artifacts."""
        acted, waiting = False, []
        self._harvest()
        for challenge in challenges:
            if self.stopping.is_set() and self._kept(status, challenge) is None:
                continue  # replays are left to the restart; kept verdicts are still committed
            try:
                acted |= self.commit_verdict(status, challenge)
            except _NotFetched:
                waiting.append(challenge)
            except GlobalStateUnavailable as exc:
                self.event(status.epoch, EventKind.WAITING_FOR_THETA, str(exc))
                # θ_e being warmed (GlobalStore.warm) past this tick's wait: it counts as acting, so
                # a driver that jumps to the deadline when nobody acts (simulate) waits for it.
                self._deferred |= isinstance(exc, GlobalStateBeingFetched)
                break
            except ReplayFault as exc:  # our own fault: no verdict; tried again next tick
                self.event(status.epoch, EventKind.REPLAY_FAULT, str(exc))
        return acted, waiting

    # -- fetching ahead ------------------------------------------------------------------------

    def _fetch_ahead(self, status: ParticipantStatus, waiting: list[Challenge]) -> None:
        """Start a fetch job for every host with challenges waiting and none under way: hosts that
        delivered fast first, hosts not heard from next, hosts that did not deliver last (they
        matter only when more hosts wait than there are threads)."""
        hosts: dict[str, list[Challenge]] = {}
        for challenge in waiting:
            hosts.setdefault(challenge.host, []).append(challenge)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix=f"fetch-{self.name}")
        budget = self.fetch_budget_s(status, len(hosts))
        order = sorted(hosts, key=lambda h: (self._seconds.get(h, 1e6), h))
        committed: dict[str, set[tuple[str, int, int]]] = {}  # holder -> (host, segment, round) committed to
        for host in order:
            if host in self._fetching:
                continue
            deadline = None if budget is None else time.monotonic() + budget
            # Replays waiting for their end leaf's differing chunks: fetched first, from who served the
            # spool (its fallback, read here: the tick may wrap it later), under the same deadline.
            ends = [(w.spool.challenge, w.spool.fallback, w.spool.directory / "end", w.wanted, w.digests)
                    for c in hosts[host] if (w := self._ends.get(_key(c))) is not None]
            jobs = [(c, self._prefetch_plan(status, c, committed, deadline)) for c in hosts[host]
                    if _key(c) not in self._ends]
            jobs.sort(key=lambda job: job[1] is not None)  # the host's own fetches first
            self._fetching[host] = self._pool.submit(self._fetch_host, jobs, deadline, ends)

    def _prefetch_plan(self, status: ParticipantStatus, challenge: Challenge,
                       committed: dict[str, set[tuple[str, int, int]]], deadline: float | None) -> _SeatsFirst | None:
        """How to fetch ``challenge`` ahead now (``node.leaf_holding``: seats in turn): None from its
        host; else from the round-0 seats before this one that committed their verdict (a seat
        holds the leaves whole from its commitment on, or not at all), while the chain is below
        :func:`node.leaf_holding.holder_wait_end` and not all of them committed without serving
        it; a challenge its host did not deliver to this seat, from every other seat that
        committed. ``committed`` caches the chain's answers for one tick."""
        key = _key(challenge)
        if not self.holders_first or self.patience is None:
            return None
        tree = self._tree(status, challenge) if challenge.round == 1 and self.dispute_tree else None
        if challenge.round != 0 and tree is None:
            return self._holders_first_plan(challenge, key, deadline)
        if tree is not None:  # a dispute voter: the dispute tree (node.leaf_holding.dispute_tree)
            (position, ordered), chain = tree
        elif self.address in challenge.validators:
            chain = challenge.validators
            position = chain.index(self.address)
            ordered = chain[:position]
        else:
            return None
        refused = key in self._refused
        asked = [a for a in chain if a != self.address] if refused else ordered
        seated = set(challenge.validators)
        for address in asked:
            if address not in committed:
                committed[address] = {(c.host, c.segment, c.round)
                                      for c in self.ledger.challenges(status.epoch, address) if c.committed}
        done = [a for a in asked if (challenge.host, challenge.segment, 0 if a in seated else 1) in committed[a]]
        if refused:
            if not done:
                return None  # nobody holds it yet: the host again (retried until the give-up height)
            until = deadline if deadline is not None else time.monotonic() + MIN_REQUEST_S
        else:
            if key in self._declined:
                return None
            window = self.spec.phases.verify_blocks  # the dispute round's too
            end = holder_wait_end(position, len(chain), status.phase_deadline, window,
                                  window - self.patience.margin(window, status.to_commit))
            height = self.clock_height()
            if end is None or height >= end:
                return None
            left = self.clock.seconds(end - height)
            until = time.monotonic() + (left if left is not None else MIN_REQUEST_S)  # block time unknown: re-planned
            if tree is not None and ordered[0] not in done:
                done = []  # the tree: its first holder, once it committed (the others after it), or the host
        seats = [(a, m.endpoint) for a in done if (m := self.ledger.member(a)) is not None]
        return _SeatsFirst(seats, until, not refused and len(done) == len(asked), self._previous_delta(challenge),
                           carried_from(self.spec, challenge.epoch))

    def _tree(self, status: ParticipantStatus,
              challenge: Challenge) -> tuple[tuple[int, list[str]], list[str]] | None:
        """This voter's place in ``challenge``'s dispute tree and the tree's chain (round-0 seats,
        then the validators of the epoch without one, in the chain's order); None: not in it. V is
        read once per epoch through the paged report, as every read whose answer grows with the
        participants (the full ``epoch`` answer nears a node's query gas limit at 2,048 of them)."""
        if status.epoch not in self._validators:
            self._validators = {status.epoch: list(self.ledger.epoch_paged(status.epoch).validators)}
        voters = [a for a in self._validators[status.epoch] if a not in challenge.validators]
        place = dispute_tree(self.address, challenge.validators, voters)
        return None if place is None else (place, challenge.validators + voters)

    def _holders_first_plan(self, challenge: Challenge, key: tuple[int, str, int, int],
                            deadline: float | None) -> _SeatsFirst | None:
        """A dispute round's (or re-vote's) challenge: its holders first, once (the round-0 seats,
        then :data:`HOLDERS_FIRST` other validators, ``node.leaf_holding``), on a fetch thread, for
        at most :data:`~node.leaf_holding.HOLDER_WAIT_SHARE` of the host's fetch budget (at least
        one request's fixed deadline); None: from the host (asked already, or none served)."""
        if key in self._holders_asked or key in self._declined:
            return None
        self._holders_asked.add(key)
        holders = list(holder_addresses(self.ledger, challenge, self.address, HOLDERS_FIRST))
        if not holders:
            return None
        now = time.monotonic()
        share = HOLDER_WAIT_SHARE * (deadline - now) if deadline is not None else 0.0
        return _SeatsFirst(holders, now + max(MIN_REQUEST_S, share), True, self._previous_delta(challenge),
                           carried_from(self.spec, challenge.epoch))

    def fetch_budget_s(self, status: ParticipantStatus, hosts: int) -> float | None:
        """Seconds one host's fetch job may take now: the time left before this validator gives up
        on a host (:class:`Patience`), shared by the ``hosts`` waiting over the fetch threads, so
        each gets its turn before then (``ceil(hosts / threads)`` turns); at least one request's
        fixed deadline. None while the block time is not known (the client's deadlines bound it)."""
        if self.patience is None:
            return None
        window = self.spec.phases.verify_blocks
        left = status.phase_deadline - self.clock_height() - self.patience.margin(window, status.to_commit)
        seconds = self.clock.seconds(left)
        if seconds is None:
            return None
        turns = max(1, math.ceil(hosts / max(1, self._threads)))
        return max(self.client_limits().deadline_s, seconds / turns)

    def clock_height(self) -> int:
        height = self.ledger.height()
        self.clock.observe(height)
        return height

    def client_limits(self) -> ClientLimits:
        """The bounds of this validator's requests now: :attr:`base_limits` with the fixed part of
        each deadline from :meth:`Patience.request_deadline_s` (the verify window, the challenges
        of the round, the observed block time)."""
        if self.patience is None:
            return self.base_limits
        fixed = self.patience.request_deadline_s(self.spec.phases.verify_blocks, self._assigned,
                                                 self.clock.seconds_per_block(), self.base_limits)
        if fixed == self.base_limits.deadline_s:
            return self.base_limits
        base = self.base_limits
        return replace(base, connect_s=min(base.connect_s, fixed), read_s=min(base.read_s, fixed), deadline_s=fixed)

    def _fetch_host(self, jobs: list[tuple[Challenge, _SeatsFirst | None]], deadline: float | None,
                    ends: Iterable[tuple[Challenge, ArtifactSource | None, Path, list[tuple[int, int]], LeafDigests]]
                    = ()) -> list[Spool | EndChunks]:
        """One host's challenges, fetched in turn into spools (a fetch thread's job): from the host,
        or from the seats before this one (none when they do not serve it yet); first the end-leaf
        chunks of the replays waiting for them (``ends``: challenge, source, directory, chunks, digests)."""
        spools: list[Spool | EndChunks] = []
        for challenge, source, directory, wanted, digests in ends:
            try:
                spools.append(fetch_end_chunks(source or Unreachable("nothing to read the chunks from"), challenge,
                                               digests, wanted, directory, deadline, self.stopping.is_set))
            except OSError:
                if directory.parent.exists():
                    raise  # this validator's disk: the job breaks and the chunks are asked again next tick
                # else its spool was discarded meanwhile (decided at the give-up height): nothing to keep
        files: dict[str, dict[int, Path]] = {}  # seat -> the leaves this job already fetched of it
        for challenge, first in jobs:
            directory = self._spool_root / f"{challenge.epoch}-{challenge.host}-{challenge.segment}-r{challenge.round}"
            if first is None:
                # The end leaf by its chunk digests (checked here as the replay checks them), unless
                # its chunks did not arrive this epoch: then whole, ahead, as before.
                by_digests = self.end_by_digests and (challenge.epoch, challenge.host) not in self._whole_end
                check = partial(self._trusted_digests, challenge) if by_digests else None
                spools.append(fetch_challenge(self._peer(challenge), challenge, directory, deadline,
                                              self.stopping.is_set, digests=check))
                continue
            spool = self._fetch_from_seats(challenge, first, directory, files)
            if spool is not None:
                spools.append(spool)
            elif first.settled:  # they all voted and none serves it: a definite "not held"
                with self._seen_lock:
                    self._declined.add(_key(challenge))
        return spools

    def _trusted_digests(self, challenge: Challenge, served: object, proof: MerkleProof | UntrustedJson) -> object:
        """The replay's check of an end leaf's digest list, for the prefetch (raises ``ValueError``)."""
        return trusted_end_digests(self.spec.for_epoch(challenge.epoch), challenge, served, proof)

    def _fetch_from_seats(self, challenge: Challenge, first: _SeatsFirst, directory: Path,
                          files: dict[str, dict[int, Path]]) -> Spool | None:
        """``challenge``'s kept leaves (the end leaf by its digest list, as from a host) fetched from
        the first of ``first.seats`` that serves them all before ``first.until``, or None; what was
        read of a seat before (its proofs and losses this epoch, the leaves in ``files`` this job)
        is not asked for again."""
        for address, endpoint in first.seats:
            if self.stopping.is_set() or time.monotonic() >= first.until:
                return None
            try:
                holder = self.peers(endpoint)
            except ArtifactUnavailable:
                continue
            with self._seen_lock:
                seen = self._seen.setdefault((challenge.epoch, challenge.checkpoint_root, address), {})
            view = Reusing(FromHolder(holder, challenge, first.previous_delta, first.previous_epoch), seen,
                           files.setdefault(address, {}))
            check = partial(self._trusted_digests, challenge) if self.end_by_digests else None
            spool = fetch_challenge(view, challenge, directory, first.until, self.stopping.is_set, whole=True,
                                    digests=check)
            if spool.failure is None and all(item.odd is None for item in spool.items.values()):
                spool.origin = address
                view.remember(spool)
                return spool
            spool.discard()
        return None

    def _harvest(self) -> None:
        """Take in the fetch jobs that ended: their spools, and how fast (or not) each host delivered."""
        for host, job in list(self._fetching.items()):
            if not job.done():
                continue
            del self._fetching[host]
            try:
                spools = job.result()
            except Exception as exc:  # a bug in a fetch thread: tried again next tick
                log.exception("%s fetch from %s broke", self.name, host)
                self._why[host] = f"fetch broke: {type(exc).__name__}: {exc}"
                continue
            # How fast the host delivered (not a seat); end-leaf chunks count only when they failed.
            hosted = [s for s in spools if isinstance(s, Spool) and s.origin == "host"]
            failed = next((s.failure for s in hosted if s.failure is not None), None)
            if hosted:
                self._seconds[host] = math.inf if failed else sum(s.seconds for s in hosted) / len(hosted)
            if failed:
                self._why[host] = failed
            for spool in spools:
                c = spool.challenge
                if isinstance(spool, EndChunks):
                    waiting = self._ends.get(_key(c))
                    if waiting is None or waiting.spool.end is not None:
                        continue  # decided meanwhile (the give-up height): its spool is gone
                    waiting.spool.end = spool
                    if spool.failure is not None and waiting.spool.origin == "host":
                        self._seconds[host], self._why[host] = math.inf, spool.failure
                    self._spools[_key(c)] = waiting.spool  # its check goes on from its replay
                    continue
                old = self._spools.pop(_key(c), None)
                if old is not None:
                    old.discard()
                self._spools[_key(c)] = spool

    def _forget(self, status: ParticipantStatus, mine: list[Challenge]) -> None:
        """Drop spools of challenges no longer waiting (committed, decided, another round)."""
        live = {_key(c) for c in mine}
        # Only this epoch's: in a pipelined run another epoch's round may be running too.
        for k in [k for k in self._spools if k[0] == status.epoch and k not in live]:
            self._spools.pop(k).discard()
        for k in [k for k in self._ends if k[0] == status.epoch and k not in live]:
            self._ends.pop(k).spool.discard()
        with self._seen_lock:
            for seen in [k for k in self._seen if k[0] < status.epoch - 1]:
                del self._seen[seen]
            self._declined = {k for k in self._declined if k[0] >= status.epoch - 1}
        # The tick thread's own memories of challenges, pruned alike.
        self._refused = {k for k in self._refused if k[0] >= status.epoch - 1}
        self._waited = {k for k in self._waited if k[0] >= status.epoch - 1}
        self._holders_asked = {k for k in self._holders_asked if k[0] >= status.epoch - 1}
        self._whole_end = {k for k in self._whole_end if k[0] >= status.epoch - 1}
        self._slow_holders = {k: v for k, v in self._slow_holders.items() if k[0] >= status.epoch - 1}

    def _kept(self, status: ParticipantStatus, challenge: Challenge) -> VerdictOpening | None:
        """The opening kept for ``challenge`` in its round (a re-vote's apart), if any."""
        return self.opening(status.epoch, challenge.host, challenge.segment,
                            revote=challenge.round == REVOTE_ROUND)

    def commit_verdict(self, status: ParticipantStatus, challenge: Challenge) -> bool:
        """Commit to a verdict on ``challenge``: the one kept on disk (a restart after the
        commitment reuses it), else the one :meth:`decide` reaches, kept (fsynced) first. A re-vote
        (an objecting round-0 seat in ``dispute``) repeats a round-0 ``fail`` with a fresh salt
        (the contract keeps a ``fail``); after a round-0 ``unavailable`` it replays again, reading
        the host, then every holder (the final voters read the leaves meanwhile)."""
        revote = challenge.round == REVOTE_ROUND
        opening = self._kept(status, challenge)
        first = self.opening(status.epoch, challenge.host, challenge.segment) if revote else None
        if opening is None and first is not None and first.outcome == "fail":
            opening = first.model_copy(update={"salt": os.urandom(SALT_SIZE).hex()})
            self.keep_opening(opening, revote=True)
        if opening is None and first is not None and first.outcome == "pass" and challenge.gain_dispute:
            # A gain dispute's re-vote: its round-0 pass (the replay already done) with both gains,
            # the main windows' and the dispute windows', which nobody has opened.
            gain, dispute_gain = self._dispute_gains(status, challenge)
            opening = first.model_copy(update={"salt": os.urandom(SALT_SIZE).hex(), "gain_micro": gain,
                                               "dispute_gain_micro": dispute_gain})
            self.keep_opening(opening, revote=True)
            self.event(status.epoch, EventKind.VERDICT, f"{_about(challenge)} re-vote in a gain dispute: gain "
                       f"{gain} µnats, dispute-window gain {dispute_gain} µnats", "pass")
        if opening is None:
            decided = self.decide(status, challenge)
            if decided is None:
                return False
            verdict, reason = decided
            opening = VerdictOpening.of(verdict, os.urandom(SALT_SIZE))
            self.keep_opening(opening, revote=revote)
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
            agreed = self._pure_gain_dispute(status, challenge)
            if agreed is not None:
                reason = "a gain dispute whose round-0 passes differ only in their gains: the probe alone, no replay"
                return agreed
            verdict, reason = self._verdict_for(status, challenge)
            return verdict

        verdict = self.behaviour.decide(challenge, replay)
        if verdict is None:
            return None
        if (challenge.gain_dispute and challenge.round != 0 and verdict.outcome == "pass"
                and verdict.gain_micro is None and self._probed(challenge)):
            main, dispute_gain = self._dispute_gains(status, challenge)
            verdict = verdict.model_copy(update={"gain_micro": main, "dispute_gain_micro": dispute_gain})
            return verdict, f"{reason}; probe gain {main} µnats, dispute-window gain {dispute_gain} µnats"
        gain = self._probe_gain(status, challenge, verdict)
        if gain is not None:
            if challenge.round == 0:
                gain = self.behaviour.round0_gain(challenge, gain)
            verdict = verdict.model_copy(update={"gain_micro": gain})
            reason = f"{reason}; probe gain {gain} µnats"
        return verdict, reason

    def _probed(self, challenge: Challenge) -> bool:
        """Whether a ``pass`` on ``challenge`` carries a probe gain: the host's last segment, probe on."""
        return self.spec.verification.probe_windows > 0 and challenge.segment == challenge.segments - 1

    def _pure_gain_dispute(self, status: ParticipantStatus, challenge: Challenge) -> Verdict | None:
        """A final vote on a gain dispute whose opened round-0 votes are all ``pass``es with one
        distance and evidence: the pass itself is not in question, so this validator answers it
        without a replay (docs/contract.md, "Why dispute windows"), fetching only the host's Δ (by
        its committed hash, from the host or any validator that kept it) for the probe. None:
        anything else, or no Δ to be had (then it replays)."""
        if not (challenge.gain_dispute and challenge.round == 1 and self._probed(challenge)):
            return None
        opened = [v for c in self.ledger.report(challenge.epoch).challenges
                  if c.host == challenge.host and c.segment == challenge.segment
                  for v in c.votes if v.round == 0 and v.outcome is not None]
        agreed = {(v.outcome, v.distance, v.evidence) for v in opened}
        if len(agreed) != 1:
            return None
        outcome, distance, evidence = agreed.pop()
        if outcome != "pass" or distance is None or evidence is None:
            return None
        try:
            self._fetch_delta(challenge)
        except ArtifactUnavailable as exc:
            log.info("%s: %s's Δ for the probe not to be had (%s): replaying", self.name, challenge.host, exc)
            return None
        self.probe_only += 1
        return Verdict(epoch=challenge.epoch, host=challenge.host, segment=challenge.segment, outcome="pass",
                       distance=distance, evidence=evidence)

    def _fetch_delta(self, challenge: Challenge) -> None:
        """Keep ``challenge``'s Δ at its content address (``held_delta_path``): from the host, then
        from any validator that kept it (checked against the committed hash as it streams).

        Raises:
            ArtifactUnavailable: nobody served it.
        """
        spec = self.spec.for_epoch(challenge.epoch)

        def verify(chunks: Iterable[object], who: str) -> object:
            payload, digest = stream_delta(chunks, spec, what=f"Δ of {challenge.host}")
            if digest.hex() != challenge.delta_hash:
                raise WrongContent(f"{who} served a Δ that does not match the commitment of {challenge.host}")
            return payload

        def answers() -> Iterator[tuple[str, Read]]:
            yield challenge.host, lambda: self.peers(challenge.endpoint).delta_chunks(challenge.epoch)
            for address, endpoint in holders(self.ledger, {self.address, challenge.host}, (), ("validator",)):
                yield address, partial(self._held_delta_chunks, endpoint, challenge)

        fetch(held_delta_path(self.root, self.run_id, challenge.delta_hash), answers(), verify,
              f"the Δ of {challenge.host}")

    def _held_delta_chunks(self, endpoint: str, challenge: Challenge) -> Iterable[bytes | object]:
        return self.peers(endpoint).delta_by_hash_chunks(challenge.delta_hash, challenge.epoch)

    def _dispute_gains(self, status: ParticipantStatus, challenge: Challenge) -> tuple[int, int]:
        """A gain dispute's deciding vote's gains: (main windows, the host's dispute windows), from
        θ_e and the host's Δ kept here; the behaviour may answer instead (a copier's). Without a Δ
        kept (a pass reached without replay) both are guessed 0."""
        copied = self.behaviour.dispute_gains(challenge, partial(self._opened_gains, challenge))
        if copied is not None:
            return copied
        return self._gain_on(status, challenge, dispute=False), self._gain_on(status, challenge, dispute=True)

    def _probe_gain(self, status: ParticipantStatus, challenge: Challenge, verdict: Verdict) -> int | None:
        """The host's probe gain in micro-nats (``trainer.probe``, at ``PROBE_SCALE``) that ``verdict``
        carries: on the host's last segment when the run's probe is on, from θ_e and the host's Δ̂ this validator
        checked and kept (``held_delta_path``), on the windows the epoch's beacon draws. Only a
        ``pass`` carries one: whether a ``fail`` could be measured depends on what this validator
        happens to hold (the held Δ is keyed by content, so a host that recommits an old Δ would find
        some honest validators holding it and others not), and two honest ``fail``s must be the same
        verdict. A ``pass`` with no Δ kept was reached without a replay (a lying behaviour's): it must
        carry a gain and has none to measure, so it carries 0, a guess that is another verdict than
        the honest gain's (the final vote decides, and the guesser is ``wrong``).

        In a gain dispute (``challenge.gain_dispute``) the final round's votes and the round-0 seats'
        re-votes carry the gain on the host's dispute windows (:func:`trainer.probe.dispute_starts`)
        too: :meth:`_dispute_gains`."""
        if verdict.gain_micro is not None or verdict.outcome != "pass" or not self._probed(challenge):
            return verdict.gain_micro
        return self._gain_on(status, challenge, dispute=False)

    def _gain_on(self, status: ParticipantStatus, challenge: Challenge, *, dispute: bool) -> int:
        """The host's probe gain on the epoch's probe windows, or (``dispute``) on its dispute windows;
        0 without its Δ kept here."""
        windows = self.spec.verification.probe_windows
        path = held_delta_path(self.root, self.run_id, challenge.delta_hash)
        if not path.exists():
            return 0
        spec = self.spec.for_epoch(challenge.epoch)
        delta = dequantize(load_delta(path, spec), parameter_shapes(spec), spec.quantization)
        theta = self.globals.get(status.model_hash, status.epoch, wait_s=self._wait_s)
        beacon = self.ledger.epoch(challenge.epoch, lists=False).seed
        if beacon is None:  # never at a verdict: the seed is fixed when reveal closes
            raise GlobalStateUnavailable(f"epoch {challenge.epoch} has no beacon yet")
        if self._stepper is None:
            self._stepper = Stepper(self.spec, device=self.device)
        # The replay's own model: the probe reads neither its parameters nor leaves its mode changed.
        model = self._stepper.model
        key = (challenge.epoch, status.model_hash, challenge.host if dispute else "")
        if key not in self._probe_bases:
            # Only this epoch's and the one before (a pipelined run) are kept.
            self._probe_bases = {k: v for k, v in self._probe_bases.items() if k[0] >= challenge.epoch - 1}
            seed = bytes.fromhex(beacon)
            starts = (dispute_starts(self.dataset, seed, challenge.epoch, challenge.host, windows) if dispute
                      else probe_starts(self.dataset, probe_seed(seed, challenge.epoch), windows))
            self._probe_bases[key] = (starts, probe_loss(model, self.dataset, theta.params, starts))
        starts, base = self._probe_bases[key]
        return gain_micro(probe_gain(model, self.dataset, theta.params, delta, starts, PROBE_SCALE, base=base))

    def _opened_gains(self, challenge: Challenge) -> list[int]:
        """The probe gains the round-0 seats of ``challenge`` opened (public once ``verdict_reveal``
        closed): what a copier of a gain dispute reads (:meth:`ValidatorBehaviour.dispute_gains`)."""
        for c in self.ledger.report(challenge.epoch).challenges:
            if c.host == challenge.host and c.segment == challenge.segment:
                return [v.gain_micro for v in c.votes if v.round == 0 and v.gain_micro is not None]
        return []

    def _verdict_for(self, status: ParticipantStatus, challenge: Challenge) -> tuple[Verdict | None, str]:
        """Replay ``challenge`` (:func:`verifier.replay.check_challenge`): its verdict and why, or
        no verdict while a host that did not deliver is still retried (:class:`Patience`).

        What the replay checked is kept (``node.leaf_holding``): the leaves, proofs and losses for
        validators the host refuses, the Δ by hash once the replay passed, so peers can aggregate
        it whatever its host serves them. When the host does not deliver, the holders are read
        instead (:meth:`_from_holders`); only when none serves is the verdict ``unavailable``.

        Raises:
            GlobalStateUnavailable: θ_e is not to be had yet.
        """
        theta = self.globals.get(status.model_hash, status.epoch, wait_s=self._wait_s)
        if self._stepper is None:
            self._stepper = Stepper(self.spec, device=self.device)
        key = _key(challenge)
        # With fetch threads every round asks its holders there (round 0: seats in turn; later
        # rounds: holders first, _prefetch_plan), never on this thread: a holder that does not
        # answer would hold the tick a request deadline and its retries per holder asked.
        inline_first = self._threads == 0
        if self.holders_first and inline_first and key not in self._spools and key not in self._holders_asked:
            # Holders first: a validator that already checked these leaves serves them, so the
            # host uploads them about once (asked once per challenge, a few holders at most).
            self._holders_asked.add(key)
            held = self._from_holders(status, challenge, theta, others=HOLDERS_FIRST, refused=False)
            if held is not None:
                return held.verdict, held.reason
        source = self._source(challenge, status)
        # A spool of a seat's kept leaves: the Δ before (topk2) is read from that seat too.
        before = source.fallback if isinstance(source, Spool) and source.origin != "host" else None
        kept = False
        try:
            # A spool's end leaf: its differing chunks are fetched on a fetch thread, never here
            # (_await_end); the check then goes on from the same replay.
            resumed = self._resumed(key, source)
            report = self._check(status, challenge, source, theta, previous_source=before, replayed=resumed,
                                 defer_chunks=isinstance(source, Spool) and resumed is None)
        except ChunksWanted as wanted:
            assert isinstance(source, Spool)
            self._await_end(challenge, source, wanted)
            kept = True
            raise _NotFetched from None
        finally:
            if isinstance(source, Spool) and not kept:
                source.discard()
        if report.verdict.outcome == "unavailable" and isinstance(source, Spool) and source.origin == "host":
            self._refused.add(key)  # with fetch threads: read from the seats that committed (_prefetch_plan)
            if str(report.transfer.get("end_leaf_chunks", "")).startswith("failed"):
                self._whole_end.add((challenge.epoch, challenge.host))  # its next fetch: the end leaf whole
        in_turn = self.holders_first and self._threads > 0 and challenge.round == 0
        if report.verdict.outcome == "unavailable" and (not in_turn or self._give_up(status)):
            held = self._from_holders(status, challenge, theta)
            if held is not None:
                return held.verdict, held.reason
        if report.verdict.outcome == "unavailable" and not self._give_up(status):
            self.event(status.epoch, EventKind.HOST_RETRIED, f"{_about(challenge)}: {report.reason}")
            return None, report.reason
        if report.verdict.outcome == "unavailable" and self.patience is None and key not in self._waited:
            self._waited.add(key)  # one tick for the seats after it in this round to read and keep it
            self._deferred = True
            self.event(status.epoch, EventKind.HOST_RETRIED, f"{_about(challenge)}: {report.reason}; "
                                                             "asking its holders again next tick")
            return None, report.reason
        return report.verdict, report.reason

    def _check(self, status: ParticipantStatus, challenge: Challenge, source: ArtifactSource,
               theta: GlobalState, previous_source: ArtifactSource | None = None, replayed: Replayed | None = None,
               defer_chunks: bool = False) -> VerdictReport:
        """One replay of ``challenge`` reading ``source``, what it checked kept (:class:`Keeping`);
        the Δ of the epoch before (``topk2``) from ``previous_source``, by default the host; with
        ``replayed``, from that replay; ``defer_chunks``: see ``verifier.replay.check_challenge``."""
        with Keeping(source, challenge, self.root, self.run_id) as keeping:
            report = check_challenge(self.spec, self.dataset, challenge, keeping, theta,
                                     bytes.fromhex(status.prev_seed), stepper=self._stepper,
                                     previous_delta=self._previous_delta(challenge),
                                     previous_source=previous_source or self._peer(challenge),
                                     replayed=replayed, defer_chunks=defer_chunks)
            keeping.settle(report)
        return report

    def _await_end(self, challenge: Challenge, spool: Spool, wanted: ChunksWanted) -> None:
        """Keep ``spool`` and its replay (on disk: no leaf waits in memory) until a fetch thread has
        fetched the end leaf's differing chunks (:meth:`_fetch_ahead`, the host's next job, under its
        budget); the check goes on from that replay on a later tick (:meth:`_resumed`).

        Raises:
            ReplayFault: the replay could not be kept (this validator's disk): tried again next tick.
        """
        try:
            replay = wanted.replayed.spill(spool.directory / "replayed.pt")
        except (OSError, RuntimeError) as exc:
            raise ReplayFault(f"{_about(challenge)}: its replay could not be kept while the end leaf's chunks "
                              f"are fetched: {type(exc).__name__}: {exc}") from exc
        if isinstance(spool.fallback, _Budgeted):
            spool.fallback = spool.fallback.inner  # the fetch thread reads it under its own budget
        self._ends[_key(challenge)] = _EndWanted(spool, replay, wanted.wanted, wanted.digests)
        log.info("%s %s: %d end-leaf chunks differ from its replay; fetching them on a fetch thread",
                 self.name, _about(challenge), len(wanted.wanted))

    def _resumed(self, key: tuple[int, str, int, int], source: ArtifactSource) -> Replayed | None:
        """The replay ``source`` (a spool whose end-leaf chunks are in) was stopped with, if any.

        Raises:
            ReplayFault: it could not be read back (this validator's disk).
        """
        waiting = self._ends.get(key)
        if waiting is None or waiting.spool is not source or not isinstance(source, Spool) or source.end is None:
            return None
        del self._ends[key]
        try:
            return waiting.replay.load()
        except Exception as exc:  # our own file: no verdict, replayed again next tick
            raise ReplayFault(f"the replay kept for {key[1]} segment {key[2]} could not be read back: "
                              f"{type(exc).__name__}: {exc}") from exc

    def _from_holders(self, status: ParticipantStatus, challenge: Challenge, theta: GlobalState,
                      others: int = MAX_OTHER_HOLDERS, refused: bool = True) -> VerdictReport | None:
        """The replay of ``challenge`` from the first holder whose kept artifacts decide it (a
        ``pass`` or ``fail``: they are the host's committed bytes, checked against its root), or
        None when no holder serves them (``node.leaf_holding.holder_addresses``: the round-0
        seats, then at most ``others`` other validators). ``refused``: the host refused it (asked
        after the host), else asked before the host."""
        why = "the host refused" if refused else "holders first"
        # This runs on the tick thread (without fetch threads; with them, only once the host did not
        # deliver). A holder that does not hold it answers at once, one that stalls holds the tick
        # up to a request deadline and its retries: the holders that did not serve may take at most
        # one request's fixed deadline in all; the next are asked on a later tick, a holder that
        # stalled after the others (_slow_holders).
        key = _key(challenge)
        slow = self._slow_holders.setdefault(key, set())
        lost, bound = 0.0, math.inf if self.patience is None else self.client_limits().deadline_s
        listed = list(holder_addresses(self.ledger, challenge, self.address, others))
        for address, endpoint in sorted(listed, key=lambda holder: holder[0] in slow):  # stable: chain order kept
            if self.stopping.is_set() or lost >= bound:
                return None
            try:
                holder = self.peers(endpoint)
            except ArtifactUnavailable:
                continue
            view = FromHolder(holder, challenge, self._previous_delta(challenge),
                              carried_from(self.spec, challenge.epoch))
            started = time.monotonic()
            report = self._check(status, challenge, view, theta, previous_source=view)
            if report.verdict.outcome == "unavailable":
                took = time.monotonic() - started
                lost += took
                if took >= SLOW_HOLDER_S:
                    slow.add(address)
            else:
                self.event(status.epoch, EventKind.READ_FROM_HOLDER,
                           f"{_about(challenge)}: {why}; read from {address[:12]}…")
                return replace(report, reason=f"{report.reason} ({why}; read from holder {address})")
        return None

    def _previous_delta(self, challenge: Challenge) -> str | None:
        """``topk2`` runs, a last segment: the Δ hash the challenged host committed in the epoch its
        residual carries from (``trainer.delta.carried_from``: the one before; two before in a
        pipelined run, settled when this one trained) if it was accepted then, else None."""
        source = carried_from(self.spec, challenge.epoch)
        if source is None:  # also: topk2 right after a dense epoch
            return None
        if challenge.segment != challenge.segments - 1:
            return None
        before = self.ledger.aggregation_inputs(source)
        return next((a.delta_hash for a in before if a.address == challenge.host), None)

    def _source(self, challenge: Challenge, status: ParticipantStatus) -> ArtifactSource:
        """What the replay of ``challenge`` reads: its fetched spool; without fetch threads the host
        itself, under :data:`INLINE_BUDGET_S`; a host still not delivered when this validator
        gives up: :class:`~node.prefetch.Unreachable` with why.

        Raises:
            _NotFetched: the host's artifacts are not in yet (a fetch job is started or under way).
        """
        key = _key(challenge)
        spool = self._spools.pop(key, None)
        waiting = self._ends.get(key)
        if spool is None and waiting is not None:  # a replay waiting for its end leaf's differing chunks
            if not self._give_up(status):
                raise _NotFetched
            # Never arrived (a fetch may still be under way): decided as a leaf not served.
            spool = waiting.spool
            spool.end = EndChunks.cut(challenge, "were not delivered before the give-up height")
        if spool is not None:
            if spool.origin != "host":
                with self._seen_lock:
                    self._declined.add(key)  # a seat's leaves are read once: if they do not decide, the host
            if spool.fallback is not None and not isinstance(spool.fallback, _Budgeted):
                # What the replay still reads of the host (or seat) itself on this thread, leaf 0
                # when its proof does not check, gets the inline budget.
                spool.fallback = _Budgeted(spool.fallback, self._inline_budget_s())
            return spool
        if self._threads == 0:
            return _Budgeted(self._peer(challenge), self._inline_budget_s())
        if self._give_up(status):
            why = self._why.get(challenge.host, "its artifacts did not arrive")
            under_way = " (a fetch still under way)" if challenge.host in self._fetching else ""
            return Unreachable(f"not delivered before the give-up height: {why}{under_way}")
        raise _NotFetched

    def _peer(self, challenge: Challenge) -> ArtifactSource:
        try:
            return self.peers(challenge.endpoint)
        except ArtifactUnavailable as exc:
            return Unreachable(str(exc))

    def _inline_budget_s(self) -> float:
        # Two leaves of parameters and both AdamW moments (fp32), at the rate an honest host sustains.
        if self._leaf_bytes is None:
            self._leaf_bytes = 12 * sum(math.prod(shape) for shape in parameter_shapes(self.spec).values())
        return INLINE_BUDGET_S + 2 * self._leaf_bytes / self.base_limits.min_rate

    def _give_up(self, info: ParticipantStatus) -> bool:
        if self.patience is None:
            return True
        return self.patience.give_up(self.clock_height(), info.phase_deadline, self.spec.phases.verify_blocks,
                                     info.to_commit)

    # -- stopping ------------------------------------------------------------------------------

    def due_now(self, status: ParticipantStatus) -> str | None:
        """:meth:`Participant.due_now`, and the verdicts of the round: openings (one transaction
        each, from disk; a validator that does not open is slashed ``silent``) and the commitments
        of verdicts already decided and kept. Replays not yet done are left to the restart."""
        if status.phase in VERDICT_REVEAL_PHASES and status.to_reveal:
            return f"{status.to_reveal} verdict opening(s)"
        if status.phase == "objection" and status.ready_due:
            return "its ready (objections from the verdicts it kept)"
        if status.phase in VERDICT_COMMIT_PHASES and status.to_commit:
            kept = sum(1 for c in self._mine(status, committed=False) if self._kept(status, c) is not None)
            if kept:
                return f"{kept} commitment(s) of verdicts already reached"
        return super().due_now(status)

    def close(self) -> None:
        """Stop the fetch threads without waiting for them (a fetch under way ends at its next
        chunk, or, retrying a host that does not answer, within the client's retry budget; the
        daemon's process does not wait for it: ``veriloco.commands.member.leave_without_threads``)
        and drop what they fetched."""
        self.stopping.set()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
        self._fetching.clear()
        for spool in [*self._spools.values(), *(w.spool for w in self._ends.values())]:
            spool.discard()
        self._spools.clear()
        self._ends.clear()

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
        opening = self._kept(status, challenge)
        if opening is None:
            if (status.epoch, challenge.host, challenge.segment) not in self._lost:
                self._lost.add((status.epoch, challenge.host, challenge.segment))
                self.event(status.epoch, EventKind.CANNOT_OPEN, f"{_about(challenge)}: nothing kept on disk")
            return False
        return self._post(status, challenge, EventKind.VERDICT_OPENED,
                          partial(self.ledger.reveal_verdict, self.key, opening), opening.outcome)


def _key(challenge: Challenge) -> tuple[int, str, int, int]:
    return challenge.epoch, challenge.host, challenge.segment, challenge.round


def _about(challenge: Challenge) -> str:
    return f"host {challenge.host[:12]}… segment {challenge.segment}"


class _Budgeted(ArtifactSource):
    """A host's artifacts with a time budget per challenge, counted from the first read: a stream
    that is still arriving when it is spent is cut between two chunks (unavailable). For readers
    without fetch threads (``simulate``), so a host that drips costs each of them the budget."""

    def __init__(self, inner: ArtifactSource, budget_s: float) -> None:
        self._inner, self._budget = inner, budget_s
        self._end: float | None = None

    @property
    def inner(self) -> ArtifactSource:
        return self._inner

    def _check(self, what: str, got: int = 0) -> None:
        now = time.monotonic()
        if self._end is None:
            self._end = now + self._budget
        elif now > self._end:
            raise ArtifactUnavailable(f"{what}: the reader's budget of {self._budget:.1f} s was spent"
                                      f"{f' after {got} bytes' if got else ''}")

    def _cut(self, chunks: Iterable[bytes | object], what: str) -> Iterable[bytes | object]:
        it = iter(chunks)
        got = 0
        try:
            while True:
                self._check(what, got)
                try:
                    piece = next(it)
                except StopIteration:
                    return
                got += len(piece) if isinstance(piece, (bytes, bytearray, memoryview)) else 0
                yield piece
        finally:
            close = getattr(it, "close", None)
            if callable(close):
                close()

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        self._check(f"leaf {leaf}")
        return self._inner.checkpoint(epoch, leaf)

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes | object]:
        return self._cut(self._inner.checkpoint_chunks(epoch, leaf), f"leaf {leaf}")

    def leaf_digests(self, epoch: int, leaf: int) -> LeafDigests | UntrustedJson:
        self._check(f"digests of leaf {leaf}")
        return self._inner.leaf_digests(epoch, leaf)

    def leaf_chunk(self, epoch: int, leaf: int, tensor: int, chunk: int) -> bytes:
        self._check(f"a chunk of leaf {leaf}")
        return self._inner.leaf_chunk(epoch, leaf, tensor, chunk)

    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        self._check(f"proof of leaf {leaf}")
        return self._inner.proof(epoch, leaf)

    def delta(self, epoch: int) -> bytes:
        self._check("Δ")
        return self._inner.delta(epoch)

    def delta_chunks(self, epoch: int) -> Iterable[bytes | object]:
        return self._cut(self._inner.delta_chunks(epoch), "Δ")

    def losses(self, epoch: int) -> list[int] | UntrustedJson:
        self._check("losses")
        return self._inner.losses(epoch)

    def global_state(self, model_hash: str) -> bytes:
        return self._inner.global_state(model_hash)
