"""Running a participant as a long-lived process: ``veriloco host run`` and ``veriloco validator run``.

A daemon is a node (``HostNode`` or ``ValidatorNode``) plus a loop that calls its ``tick`` every
``poll`` seconds, and — for hosts — the FastAPI artifact server in a background thread. All state
lives on the chain and in the work directory, so a daemon killed at any point (SIGKILL included)
carries on where it stopped when started again: the node re-reads the chain and its disk.

Peers are reached over HTTP (:class:`node.http_client.HttpArtifacts`), with requests signed by the
daemon's key; the server admits only bonded members of the run (asked of the chain, cached briefly
in a bounded LRU, with chain lookups for unknown signers rate-limited so a flood of distinct
signers costs the chain nothing more than a few queries a second).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TypeVar

from chain.ledger import Ledger, LedgerError
from node.adversaries import host_node
from node.events import NodeEvent
from node.host import HostNode
from node.http import ClientLimits, ServerLimits, TokenBucket
from node.http_client import RETRY_BUDGET_S, HttpArtifacts
from node.participant import BlockClock, Participant
from node.server import MAX_REQUEST_BYTES, ServerThread, create_app
from protocol.coins import base_units, display
from protocol.keys import PrivateKey
from protocol.rules.spec import RunSpec
from protocol.views import EpochInfo, Member, ParticipantStatus
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, LocalArtifacts
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset

log = logging.getLogger("node.daemon")

T = TypeVar("T")

TRACE_EVERY_S = 60.0
"""The same failure of a tick is logged with its traceback at most this often."""

WAIT_REPORT_S = 20.0
"""A daemon stuck in one phase says what it waits for this often."""


NAMED_AT_MOST = 5
"""Members a waiting line names at most (then a count of the rest)."""


def role_minimum(spec: RunSpec, role: str) -> int:
    """The least stake a member of ``role`` must have bonded to join an epoch."""
    econ = spec.economics
    return int(econ.min_host_stake if role == "host" else econ.min_validator_stake)


def join_wait(info: EpochInfo, spec: RunSpec, members: Sequence[Member] | None = None,
              me: tuple[str, str] | None = None) -> str:
    """What a join phase still needs, in words: ``1 of 1 hosts joined, 0 of 1 validators — start a validator``.

    The phase ends once the spec's minimums have joined (at its deadline, or earlier when every
    eligible member joined); until the minimums are met it is extended, block after block.

    Args:
        info: the epoch.
        spec: the run spec (the minimums).
        members: the bonded members, as the chain tells (``Ledger.members``); None: unknown, and
            only counts are given.
        me: the daemon's own (address, role). When the role still lacks members and its own stake
            is below the role's minimum (slashed, unbonded), the line says so first: the member
            the epoch waits for is itself.
    """
    phases = spec.phases
    hosts, validators = len(info.hosts), len(info.validators)
    text = f"{hosts} of {phases.min_hosts} hosts joined, {validators} of {phases.min_validators} validators"
    short = {"host": phases.min_hosts - hosts, "validator": phases.min_validators - validators}
    joined = set(info.hosts) | set(info.validators)
    missing = []
    for role, n in short.items():
        if n <= 0:
            continue
        what = f"{n} more {role}{'s' * (n > 1)}"
        how = f"veriloco {role} bond, then {role} run"
        if members is not None:
            minimum = role_minimum(spec, role)
            idle = [m.address for m in members
                    if m.role == role and int(m.bonded) >= minimum and m.address not in joined]
            if me is not None and me[1] == role:
                own = next((m for m in members if m.address == me[0]), None)
                bonded = int(own.bonded) if own is not None and own.role == role else 0
                if bonded < minimum:
                    missing.append(f"{what}: this {role} ({me[0]}) cannot join, "
                                   + _below_minimum(own, role, bonded, minimum, spec))
                    continue
            if idle:
                names = ", ".join(idle[:NAMED_AT_MOST]) + (f" and {len(idle) - NAMED_AT_MOST} more"
                                                         if len(idle) > NAMED_AT_MOST else "")
                how = f"bonded but not joined: {names} ({role} run)"
            else:
                how = f"no other {role} has the minimum bonded: {how}"
        missing.append(f"{what} ({how})")
    if missing:
        return f"{text} — the epoch cannot start without {' and '.join(missing)}"
    return (f"{text} — minimums met; the phase closes at height {info.phase_deadline} or when every eligible "
            "member joined")


def _below_minimum(own: Member | None, role: str, bonded: int, minimum: int, spec: RunSpec) -> str:
    denom = spec.economics.denom

    def amount(value: int) -> str:
        shown, base = display(value, denom), base_units(value, denom)
        return shown if shown == base else f"{shown} ({base})"

    lack = minimum - bonded
    endpoint = f" --endpoint {own.endpoint}" if own is not None and own.role == role else ""
    return (f"it has {amount(bonded)} bonded, below the {role} minimum of {amount(minimum)} — bond "
            f"{amount(lack)} more: veriloco {role} bond {display(lack, denom)}{endpoint}")


class PhaseWatch:
    """Logs what a daemon sees on chain: each phase as it begins, and — when the daemon has waited
    in one phase for :data:`WAIT_REPORT_S` — what the phase is waiting for.

    It watches the status the node's tick reads anyway (``Ledger.participant``: epoch, phase,
    deadline), so following the phases costs no read of its own; the whole epoch (who joined,
    who committed) is read only for a "waiting" line that is due and counts them (join, train),
    and the height only for one that says how far the deadline is.

    Args:
        spec: the run spec (the join phase's minimums).
        name: the daemon's name, first on each line.
        every: seconds between two "waiting" lines.
        me: the daemon's own (address, role), so a join line can say when the member missing is
            the daemon itself (see :func:`join_wait`).
    """

    def __init__(self, spec: RunSpec, name: str, every: float = WAIT_REPORT_S,
                 me: tuple[str, str] | None = None) -> None:
        self.spec = spec
        self.name = name
        self.me = me
        self.every = every
        self._phase: tuple[int, str] | None = None
        self._since = self._said = time.monotonic()

    def observe(self, seen: ParticipantStatus | EpochInfo, epoch: Callable[[int], EpochInfo] | None = None,
                height: Callable[[], int] | None = None,
                members: Callable[[], list[Member]] | None = None) -> str | None:
        """Log ``seen``'s phase if it is new, or a waiting line if one is due; return what was logged.

        Args:
            seen: the epoch's phase and deadline, as the node read them (or the whole epoch).
            epoch: reads an epoch by number, called only for a due waiting line that counts
                members (when ``seen`` is not already the whole epoch); None: no counts.
            height: reads the chain's height, called only for a due waiting line that says how
                far the deadline is; None: the line leaves the height out.
            members: reads the bonded members, called only for a due join line whose minimums are
                not met (to name who is missing); None: the line gives counts.
        """
        now = time.monotonic()
        key = (seen.epoch, seen.phase)
        if key != self._phase:
            self._phase, self._since, self._said = key, now, now
            line = f"{self.name} epoch {seen.epoch} phase {seen.phase} (deadline height {seen.phase_deadline})"
        elif now - self._said >= self.every:
            self._said = now
            waited = f"{self.name} waiting in {seen.phase} of epoch {seen.epoch} for {now - self._since:.0f} s"
            info: EpochInfo | None = None
            if seen.phase in ("join", "train"):
                info = seen if isinstance(seen, EpochInfo) else self._read(epoch, seen.epoch)
            if info is not None and seen.phase == "join":
                phases = self.spec.phases
                short = len(info.hosts) < phases.min_hosts or len(info.validators) < phases.min_validators
                bonded = self._read(members) if short else None
                line = f"{waited}: {join_wait(info, self.spec, bonded, self.me)}"
            elif info is not None:
                line = f"{waited}: {len(info.committed)} of {len(info.hosts)} hosts committed"
            else:
                now_at = self._read(height)
                line = f"{waited}: it closes at height {seen.phase_deadline}" + (
                    f" (now {now_at})" if now_at is not None else "")
        else:
            return None
        log.info("%s", line)
        return line

    @staticmethod
    def _read(read: Callable[..., T] | None, *args: int) -> T | None:
        # A waiting line is worth no failed tick: a chain that does not answer leaves its detail out.
        if read is None:
            return None
        try:
            return read(*args)
        except LedgerError as exc:
            log.debug("waiting line without details: %s", exc)
            return None


class MembershipCache:
    """May an address read? A member of the run with at least its role's minimum stake bonded (what
    it takes to join an epoch), so reading costs a real bond: a sybil of one base unit is refused.
    Asked of the chain, remembered for ``ttl`` seconds.

    Bounded: at most ``max_entries`` answers are kept (least recently used dropped first), and at
    most ``lookups_per_s`` chain lookups are made for addresses not in the cache (beyond that an
    unknown signer is refused for now, and asks again later). Members already cached are answered
    from the cache whatever the flood.

    Args:
        ledger: the chain.
        min_stakes: role -> the least bonded stake that may read (default: the run spec's minimums).
        ttl: seconds an answer is trusted.
        max_entries: answers kept at most.
        lookups_per_s: chain lookups for unknown addresses per second (a token bucket of that size).
    """

    def __init__(self, ledger: Ledger, min_stakes: dict[str, int] | None = None, ttl: float = 10.0,
                 max_entries: int = 4096, lookups_per_s: float = 20.0) -> None:
        self._ledger = ledger
        if min_stakes is None:
            spec = ledger.spec()
            min_stakes = {role: role_minimum(spec, role) for role in ("host", "validator")}
        self._min = {role: max(1, stake) for role, stake in min_stakes.items()}
        self._ttl = ttl
        self._max = max_entries
        self._lookups = TokenBucket(lookups_per_s, lookups_per_s, what="lookup", unit="lookups")
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, tuple[float, bool]] = OrderedDict()
        self.lookups = 0

    def __len__(self) -> int:
        return len(self._seen)

    def __call__(self, address: str) -> bool:
        now = time.monotonic()
        with self._lock:
            cached = self._seen.get(address)
            if cached and now - cached[0] < self._ttl:
                self._seen.move_to_end(address)
                return cached[1]
            if not self._lookups.take(1, now):
                return bool(cached and cached[1])  # a member whose answer just expired stays in
            self.lookups += 1
        try:
            member = self._ledger.member(address)
        except LedgerError:
            return False
        ok = member is not None and int(member.bonded) >= self._min.get(member.role, 1)
        with self._lock:
            self._seen[address] = (now, ok)
            self._seen.move_to_end(address)
            while len(self._seen) > self._max:
                self._seen.popitem(last=False)
        return ok


def http_peers(key: PrivateKey, spec: RunSpec, prefix: str, allow_private: bool = False,
               max_clients: int = 256, limits: ClientLimits | Callable[[], ClientLimits] | None = None,
               retry_budget_s: float = RETRY_BUDGET_S) -> Callable[[str], ArtifactSource]:
    """Endpoint -> an HTTP client on that host (at most ``max_clients`` kept, least recently used
    closed first). A malformed or forbidden endpoint raises
    :class:`~trainer.artifacts.ArtifactUnavailable` (logged once as a warning): readers skip it.

    Args:
        allow_private: endpoints on loopback and private networks may be dialed (local runs).
        max_clients: clients kept at most.
        limits: time bounds of one request; or a function that says them now (a validator's
            shrink with its window, ``ValidatorNode.client_limits``): a client made under other
            bounds is then replaced (and left to its requests under way).
        retry_budget_s: how long one artifact is retried while its failures may heal, on top of
            the time its kind's largest answer takes at ``limits.min_rate`` (``HttpArtifacts``).
    """
    clients: OrderedDict[str, tuple[ClientLimits | None, HttpArtifacts]] = OrderedDict()
    warned: OrderedDict[str, None] = OrderedDict()
    lock = threading.Lock()

    def resolve(endpoint: str) -> ArtifactSource:
        now = limits() if callable(limits) else limits
        with lock:
            if endpoint in clients and clients[endpoint][0] == now:
                clients.move_to_end(endpoint)
                return clients[endpoint][1]
        try:
            client = HttpArtifacts(endpoint, key, spec, limits=now, prefix=prefix, allow_private=allow_private,
                                   retry_budget_s=retry_budget_s)
        except ArtifactUnavailable as exc:
            with lock:
                if endpoint not in warned:
                    log.warning("skipping a peer: %s", exc)
                    warned[endpoint] = None
                    while len(warned) > max_clients:
                        warned.popitem(last=False)
            raise
        with lock:
            clients[endpoint] = (now, client)
            clients.move_to_end(endpoint)
            while len(clients) > max_clients:
                clients.popitem(last=False)[1][1].close()
        return client

    return resolve


DRAIN_S = 30.0
"""The longest a daemon asked to stop spends finishing what is due before it exits."""


def exit_now(code: int) -> None:
    """Leave the process at once (logs flushed), without Python's shutdown: no thread is waited
    for and none runs on while the interpreter is torn down (where a thread inside torch's C++
    ends in ``terminate called without an active exception``). Everything a node writes is
    atomic and the chain holds the rest, so this is as safe as SIGKILL and faster to restart."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


class Daemon:
    """A node's main loop. Stops on SIGINT/SIGTERM, after ``max_epochs`` epochs, or by :meth:`stop`.

    Args:
        node: the participant to drive.
        ledger: its chain.
        poll: seconds between ticks when nothing happened.
        max_epochs: stop once the chain's current epoch reaches this number (None: run forever).
        drain_s: the longest :meth:`drain` takes.
        on_status: called with the status each tick reads (after the node's work), e.g. to write
            the metrics of an epoch once the run is past it; it must not raise.

    A tick reads the chain once for the loop (the node's ``Ledger.participant`` status, which the
    phase log and the node's work share); what the node's duties in the phase read comes on top.

    **Stopping.** The first SIGINT or SIGTERM (or :meth:`stop`) sets the node's ``stopping`` flag:
    training stops at its next step boundary (the restart resumes from the last stored leaf), a
    validator starts no new replay, no epoch is joined and no proposal is started. The loop then
    drains (:meth:`drain`): it does what is due now and quick (:meth:`Participant.due_now`: a beacon
    reveal, verdict openings, commitments of verdicts already reached, a trap opening; a pipelined
    run's settling epoch's too) and, for a host whose artifacts validators read now (in either
    epoch), keeps serving when the phase ends within the drain;
    at most ``drain_s`` seconds, logging what it waits for. Everything else is left to the restart,
    which the phase windows leave room for. A second signal exits at once (:func:`exit_now`), and
    so does a drain whose tick outlives ``drain_s`` by :data:`DRAIN_GRACE_S`.
    """

    def __init__(self, node: Participant, ledger: Ledger, poll: float = 0.5, max_epochs: int | None = None,
                 drain_s: float = DRAIN_S, on_status: Callable[[ParticipantStatus], object] | None = None) -> None:
        self.node = node
        self.on_status = on_status
        self.ledger = ledger
        self.poll = poll
        self.max_epochs = max_epochs
        self.drain_s = drain_s
        self._stop = threading.Event()
        self._signalled = False
        self._watchdog: threading.Timer | None = None
        self._traced: dict[str, float] = {}
        self.watch = PhaseWatch(node.spec, node.name, me=(node.address, node.role))

    def stop(self, signum: int | None = None, _frame: object = None) -> None:
        """Stop after what is due now (see the class docstring); a second signal exits at once."""
        name = self.node.name
        if signum is not None:
            what = signal.Signals(signum).name
            if self._signalled:
                log.warning("%s: second %s: exiting now", name, what)
                exit_now(128 + signum)
            self._signalled = True
            log.info("%s: %s: stopping — finishing what is due now, at most %.0f s (%s again exits at once)",
                     name, what, self.drain_s, "Ctrl-C" if signum == signal.SIGINT else what)
            self._watchdog = threading.Timer(self.drain_s + DRAIN_GRACE_S, self._overdue)
            self._watchdog.daemon = True
            self._watchdog.start()
        self.node.stopping.set()
        self._stop.set()

    def _overdue(self) -> None:
        log.warning("%s: still busy %.0f s after the stop; exiting now (a restart resumes)", self.node.name,
                    self.drain_s + DRAIN_GRACE_S)
        exit_now(1)

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        try:
            while not self._stop.is_set():
                if not self.step():
                    self._stop.wait(self.poll)
            self.drain()
        finally:
            self.node.close()
            if self._watchdog is not None:
                self._watchdog.cancel()

    def drain(self) -> None:
        """Do what is due now and quick, then return (at most ``drain_s`` seconds): see the class
        docstring. Logs what it waits for, and why it stops waiting."""
        name = self.node.name
        end = time.monotonic() + self.drain_s
        clock = BlockClock()
        said: str | None = None
        while True:
            status: ParticipantStatus | None = None
            try:
                status = self.node.status()
                due = self.node.due_now(status)
                older = self.node.settling() if due is None else None
                if older is not None:
                    # Pipelined: the settling epoch's quick duties count too (its tick does them).
                    due = None if (late := self.node.due_now(older)) is None else f"{late} of epoch {older.epoch}"
                # Validators may be reading the settling epoch's artifacts while the current one trains.
                for read in (status, older):
                    if due is None and read is not None and self.node.serves_now(read):
                        due = self._serving(read, clock, end)
            except LedgerError as exc:
                due = f"the chain to answer ({exc})"
            if due is None:
                log.info("%s stopped%s", name, "; nothing was due" if said is None else "")
                return
            if time.monotonic() >= end:
                log.warning("%s: stopping without %s after %.0f s; a restart does it if its window is still open",
                            name, due, self.drain_s)
                return
            if due != said:
                log.info("%s stopping: waiting for %s (at most %.0f s more)", name, due, end - time.monotonic())
                said = due
            if status is None or not self._guarded(partial(self.node.act_on, status)):
                time.sleep(self.poll)

    def _serving(self, status: ParticipantStatus, clock: BlockClock, end: float) -> str | None:
        """While validators read this node's artifacts: whether to keep serving (the phase ends
        within the drain) and how long, in words; None to exit now (they retry a host that does
        not answer until their deadline is near, and the restart serves them)."""
        height = self.ledger.height()
        clock.observe(height)
        learn = time.monotonic() + min(5.0, max(0.0, end - time.monotonic()))
        while clock.seconds_per_block() is None and time.monotonic() < learn:  # the block time, first
            time.sleep(0.1)
            height = self.ledger.height()
            clock.observe(height)
        left = clock.seconds(status.phase_deadline - height)
        if left is not None and left > end - time.monotonic():
            log.info("%s: %s of epoch %d closes in ~%.0f s, past the drain; exiting (validators retry until "
                     "near their deadline)", self.node.name, status.phase, status.epoch, left)
            return None
        about = f"~{left:.0f} s" if left is not None else f"at height {status.phase_deadline}, now {height}"
        return f"the end of {status.phase} of epoch {status.epoch} while serving the validators ({about})"

    def step(self) -> bool:
        """One tick: read the node's status (one chain read), stop if ``max_epochs`` is reached, log
        the phase, and let the node act on that same status. Returns whether the node acted."""

        def tick() -> bool:
            status = self.node.status()
            # In a pipelined run epoch N opens before N − 1 settled: stop once nothing settles.
            if self.max_epochs is not None and status.epoch >= self.max_epochs and self.node.settling() is None:
                log.info("%s reached epoch %d; stopping", self.node.name, self.max_epochs)
                self.stop()
                return False
            self.watch.observe(status, epoch=self.ledger.epoch, height=self.ledger.height, members=self.ledger.members)
            acted = self.node.act_on(status)
            if self.on_status is not None:
                self.on_status(status)
            return acted

        return self._guarded(tick)

    def _guarded(self, tick: Callable[[], bool]) -> bool:
        try:
            return tick()
        except LedgerError as exc:
            # The node is down or slow: keep going; the chain holds the truth.
            log.warning("chain unavailable: %s", exc)
        except Exception as exc:
            # A refusal the node did not anticipate, or a bug: logged with its traceback (the
            # same failure at most once a minute, so a peer cannot flood the log), and the next
            # tick re-reads the chain (every action is idempotent, so nothing repeats).
            what = f"{type(exc).__name__}: {str(exc)[:200]}"
            now = time.monotonic()
            if now - self._traced.get(what, -TRACE_EVERY_S) >= TRACE_EVERY_S:
                self._traced[what] = now
                while len(self._traced) > 64:
                    self._traced.pop(next(iter(self._traced)))
                log.exception("tick failed; carrying on")
            else:
                log.debug("tick failed again: %s", what)
        return False


DRAIN_GRACE_S = 15.0
"""How long past ``drain_s`` a tick under way may still run before a stopping daemon exits at once."""


def host_daemon(ledger: Ledger, key: PrivateKey, root: Path, listen: str, behaviour: HostBehaviour | None = None,
                on_event: Callable[[NodeEvent], None] | None = None,
                name: str | None = None, device: str = "cpu", full_leaf_every: int = 1,
                keep_epochs: int | None = None, allow_private: bool = False,
                upload_rate: float | None = None, live_leaf_every: int | None = None) -> tuple[HostNode, ServerThread]:
    """A host node on ``ledger`` and its artifact server, started on ``listen`` (``host:port``);
    ``name`` labels its logs (default: its address), ``device`` is where it trains;
    ``full_leaf_every``, ``live_leaf_every`` and ``keep_epochs`` are :class:`~node.host.HostNode`'s
    storage settings;
    ``allow_private``: peers' endpoints on loopback and private networks may be dialed (local runs);
    ``upload_rate``: bytes per second the server sends at most (``ServerLimits.upload_rate``)."""
    spec = ledger.spec()
    dataset = Dataset.load(spec.data)
    node = host_node(ledger, key, spec, dataset, root, http_peers(key, spec, ledger.prefix, allow_private),
                    behaviour=behaviour, name=name, on_event=on_event, device=device,
                    full_leaf_every=full_leaf_every, keep_epochs=keep_epochs, live_leaf_every=live_leaf_every)
    host, _, port = listen.rpartition(":")
    app = create_app(node.source, spec.run_id().hex(), node.address,
                     authorize=MembershipCache(ledger), prefix=ledger.prefix, source_for=node.source_for)
    server = ServerThread(app, host or "127.0.0.1", int(port), limits=serving_limits(upload_rate)).start()
    return node, server


def serving_limits(upload_rate: float | None = None) -> ServerLimits:
    """A daemon's server bounds: the defaults for signed, bodiless requests, with its uplink paced
    at ``upload_rate`` bytes per second when given (ValueError: not a positive finite number)."""
    return ServerLimits(max_body_bytes=MAX_REQUEST_BYTES, upload_rate=upload_rate)



def holder_server(ledger: Ledger, address: str, root: Path, listen: str,
                  upload_rate: float | None = None) -> ServerThread:
    """The server of a participant that only holds content-addressed artifacts (a validator): the
    global states and the Δs it keeps, by hash, to signed requests of members (paced at
    ``upload_rate`` bytes per second when given)."""
    spec = ledger.spec()
    host, _, port = listen.rpartition(":")
    app = create_app(LocalArtifacts(root, spec.run_id(), address), spec.run_id().hex(), address,
                     authorize=MembershipCache(ledger), prefix=ledger.prefix)
    return ServerThread(app, host or "127.0.0.1", int(port), limits=serving_limits(upload_rate)).start()
