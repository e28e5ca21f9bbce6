"""Global states by hash: kept on disk, fetched from peers when missing, always checked against the hash.

The chain agrees on the hash of θ_e (with its outer momentum); the bytes live with the hosts. A
participant that did not compute θ_e itself — a host whose proposal lost the vote, a validator, a
host that restarted on a fresh disk — gets it by hash through the one content-addressed fetch
(:func:`node.content.fetch`): the copy on disk, else the first answer that decodes under the
spec's layout and hashes right, read as a chunk stream and written to disk as it arrives. Holders
are asked in turn (:func:`node.content.holders`): first the hosts accepted in epoch e − 1 (they
built θ_e, or trained from it when the vote kept θ_{e−1}; the chain's aggregation inputs), then
every other host, then every validator (validators hold the states they replayed from and serve
them by hash). θ_0 is built from the spec, only when the hash asked for is the run's initial
model hash on chain.

**Warming.** :meth:`GlobalStore.warm` fetches a state on a thread of its own, so a participant can
ask for θ_e as soon as the chain names it (a validator, once it joined e) and find it on disk when
it replays, instead of reading it on its tick thread while its peers' uplinks carry leaves. One
fetch of a state runs at a time: a ``get`` of it meanwhile waits for it and then reads the copy it
stored; a ``get`` of another state does not wait.

With a retention setting (``keep_epochs``, a host's ``--keep-epochs``) the store deletes the states
no one can need any more (:meth:`GlobalStore.prune`, deciding with :func:`prunable_states`):
θ of the epochs the chain has closed, older than the kept ones, and states it never agreed on
(proposals that lost) once their epoch closed; never θ of an epoch whose challenge or dispute
windows are open, so a validator can still check leaf 0 against it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path

from chain.errors import LedgerError
from chain.ledger import Ledger
from node.content import WrongContent, fetch, holders
from protocol.errors import VerilocoError
from protocol.rules.spec import RunSpec
from protocol.views import EpochInfo
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, global_path
from trainer.outer import GlobalState, stream_global

log = logging.getLogger("veriloco.global_store")

PeerResolver = Callable[[str], ArtifactSource]
"""Endpoint URL -> that host's :class:`ArtifactSource` (HTTP across processes, local in simulate)."""


WARM_RETRY_S = 5.0
"""Seconds before :meth:`GlobalStore.warm` tries again a state that no holder served."""


class GlobalStateUnavailable(VerilocoError):
    """No local copy and no peer served a global state with the wanted hash."""


class GlobalStateBeingFetched(GlobalStateUnavailable):
    """Another fetch of the state (a warm one) is still under way after the caller's wait: it may
    land any moment, so the caller waits again (a validator's tick counts it as acting)."""


def prunable_states(held: Mapping[str, int], epochs: Sequence[EpochInfo], current: int, keep_epochs: int) -> set[str]:
    """The global states a participant may delete: nothing it or anyone reading from it can still need.

    Args:
        held: hash -> the epoch in which the state was first stored or seen on disk.
        epochs: the chain's view of every epoch from the oldest one not known closed (or
            ``current − keep_epochs``, whichever is older) to ``current``.
        current: the chain's current epoch.
        keep_epochs: how many epochs before ``current`` keep their states whatever their phase
            (at least one: the previous epoch's θ is always kept).

    Returns:
        The hashes of ``held`` to delete. Kept: θ_e and the agreed θ_{e+1} of every epoch ``e`` from
        ``current − keep_epochs`` on and of every epoch not closed (its challenges, verdicts,
        disputes or proposals may still need them), and every state first seen in an epoch that is
        not closed or from ``current − keep_epochs`` on (a proposal the chain has not decided yet).
    """
    horizon = current - max(1, keep_epochs)
    needed: set[str] = set()
    for info in epochs:
        if info.epoch >= horizon or info.phase != "closed":
            needed.add(info.model_hash)
            # Pipelined runs: the optimistic start e + 1 trains from, and the settled θ_e.
            needed.update(h for h in (info.next_model_hash, info.start_model_hash, info.settled_start)
                          if h is not None)
    open_epochs = [info.epoch for info in epochs if info.phase != "closed"]
    settled_before = min([horizon, *open_epochs])  # every epoch before it is closed and old
    return {h for h, seen in held.items() if h not in needed and seen < settled_before}


class GlobalStore:
    """Global states of one run under ``root``.

    Args:
        root: the participant's work root.
        spec: the run spec (layout of a global state).
        ledger: where to find the run's hosts and their endpoints.
        peers: how to reach a host's artifacts.
        own_address: skipped when asking peers.
        keep: how many states to hold in memory.
        keep_epochs: delete the states on disk no one can need any more, keeping those of this
            many epochs before the current one whatever their phase (:meth:`prune`); None keeps
            every state.
    """

    def __init__(self, root: Path, spec: RunSpec, ledger: Ledger, peers: PeerResolver,
                 own_address: str, keep: int = 3, keep_epochs: int | None = None) -> None:
        if keep_epochs is not None and keep_epochs < 0:
            raise ValueError("keep_epochs must be >= 0")
        self.root = Path(root)
        self.spec = spec
        self.run_id = spec.run_id()
        self._ledger = ledger
        self._peers = peers
        self._own = own_address
        self._keep = keep
        self._cache: dict[str, GlobalState] = {}
        self.keep_epochs = keep_epochs
        self._epoch: int | None = None  # the current epoch at the last prune
        self._seen: dict[str, int] = {}  # hash -> the epoch it was first stored or seen in
        self._open_from = 0  # every epoch before it is known closed
        self._initial: str | None = None
        # warm() fetches on its own thread: one fetch of a hash at a time (its lock in _fetching, so a
        # slow holder of one state never holds a read of another), the dicts under _mutex.
        self._fetching: dict[str, threading.Lock] = {}
        self._mutex = threading.RLock()
        self._warm_running: set[str] = set()  # hashes a warm thread is fetching now
        self._warm_failed: dict[str, float] = {}  # hash -> when its last warm fetch ended without it

    def held(self) -> list[str]:
        """The hashes of the states on disk."""
        directory = self.path("0" * 64).parent
        return sorted(p.name[:-len(".safetensors")] for p in directory.glob("*.safetensors"))

    def prune(self, current: int) -> list[str]:
        """Delete the states on disk that no one can need any more (:func:`prunable_states`); at
        most once per ``current`` epoch, and only with ``keep_epochs`` set. A chain that cannot
        answer deletes nothing.

        Returns:
            The hashes deleted.
        """
        if self.keep_epochs is None or (self._epoch is not None and current <= self._epoch):
            return []
        self._epoch = current
        held = self.held()
        for model_hash in held:
            self._seen.setdefault(model_hash, current)  # found on disk: as if stored now
        start = max(0, min(self._open_from, current - max(1, self.keep_epochs)))
        try:
            epochs = self._ledger.epochs(start_after=start - 1 if start > 0 else None, limit=current - start + 1,
                                          lists=False)
        except Exception as exc:  # noqa: BLE001 - an unreachable chain must not delete anything
            log.debug("not pruning global states: %s", exc)
            self._epoch = None
            return []
        epochs = [info for info in epochs if info.epoch <= current]
        self._open_from = min([current, *(info.epoch for info in epochs if info.phase != "closed")])
        with self._mutex:
            doomed = prunable_states({h: self._seen.get(h, current) for h in held}, epochs, current,
                                     self.keep_epochs) - self._warm_running - set(self._warm_failed)
            for model_hash in sorted(doomed):
                self.path(model_hash).unlink(missing_ok=True)
                self._cache.pop(model_hash, None)
                self._seen.pop(model_hash, None)
            # Failed warm fetches are forgotten once an epoch (tried again at the next warm), and
            # the locks of fetches that are over (a get that took one from the dict but holds it
            # only after this finds it gone, and takes the dict's: get).
            self._warm_failed.clear()
            self._fetching = {h: lock for h, lock in self._fetching.items() if lock.locked()}
        return sorted(doomed)

    def path(self, model_hash: str) -> Path:
        return global_path(self.root, self.run_id, model_hash)

    def put(self, state: GlobalState) -> str:
        """Store ``state``; return its hash."""
        model_hash = state.hash().hex()
        path = self.path(model_hash)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            state.save(path)
        self._stored(model_hash, state)
        return model_hash

    def _stored(self, model_hash: str, state: GlobalState) -> GlobalState:
        with self._mutex:
            if self._epoch is not None:
                self._seen.setdefault(model_hash, self._epoch)
            return self._remember(model_hash, state)

    def has(self, model_hash: str) -> bool:
        return model_hash in self._cache or self.path(model_hash).exists()

    def get(self, model_hash: str, epoch: int | None = None, wait_s: float | None = None) -> GlobalState:
        """The global state with ``model_hash``: from memory, disk, θ_0, or a peer — verified.

        Args:
            model_hash: the state's hash (θ_e as the chain holds it).
            epoch: the epoch that starts from it, if known: the hosts accepted in the epoch before
                are asked first.
            wait_s: how long to wait for a fetch of it already under way (a warm one) before
                giving up for now; None waits for it to end. A tick passes its own short wait, so
                a holder that keeps a warm fetch's answer back cannot hold the tick.

        Raises:
            GlobalStateUnavailable: nobody has it (yet), or (:class:`GlobalStateBeingFetched`) it is
                still being fetched after ``wait_s``.
        """
        cached = self._cache.get(model_hash)
        if cached is not None:
            return cached
        if model_hash == self._initial_hash() and not self.path(model_hash).exists():
            initial = GlobalState.initial(self.spec)
            if initial.hash().hex() == model_hash:
                self.put(initial)
                return initial
        fetching = self._hold_fetch(model_hash, wait_s)
        try:
            cached = self._cache.get(model_hash)
            if cached is not None:
                return cached
            try:
                state = fetch(self.path(model_hash), self._answers(model_hash, epoch),
                              partial(self._verify, model_hash), f"global state {model_hash[:12]}…")
            except ArtifactUnavailable as exc:
                raise GlobalStateUnavailable(str(exc)) from None
            return self._stored(model_hash, state)
        finally:
            fetching.release()

    def _hold_fetch(self, model_hash: str, wait_s: float | None) -> threading.Lock:
        """Hold the one fetch lock of ``model_hash``: a fetch of it under way (a warm one) is
        waited for (at most ``wait_s``; None: until it ends).

        Raises:
            GlobalStateBeingFetched: still being fetched after ``wait_s``.
        """
        end = None if wait_s is None else time.monotonic() + wait_s
        while True:
            with self._mutex:
                fetching = self._fetching.setdefault(model_hash, threading.Lock())
            left = -1.0 if end is None else max(0.0, end - time.monotonic())
            if not fetching.acquire(timeout=left):
                raise GlobalStateBeingFetched(f"global state {model_hash[:12]}… is still being fetched")
            with self._mutex:
                if self._fetching.get(model_hash) is fetching:
                    return fetching
            # prune dropped this lock while nobody held it (before this acquire): another get may
            # hold the dict's lock now, so this one must not fetch beside it. Take the dict's.
            fetching.release()

    def warm(self, model_hash: str, epoch: int | None = None, retry_s: float = WARM_RETRY_S) -> bool:
        """Fetch ``model_hash`` on a thread of its own unless it is held or being fetched, so a
        later :meth:`get` finds it; a fetch that found no holder is tried again after ``retry_s``.
        Failures are only logged: the ``get`` that needs the state reports them.

        Returns:
            Whether a fetch was started.
        """
        now = time.monotonic()
        with self._mutex:
            failed = self._warm_failed.get(model_hash)
            if (self.has(model_hash) or model_hash in self._warm_running
                    or (failed is not None and now - failed < retry_s)):
                return False
            self._warm_running.add(model_hash)
        try:
            threading.Thread(target=self._warm, args=(model_hash, epoch), name=f"warm-{model_hash[:8]}",
                             daemon=True).start()
        except RuntimeError as exc:  # no thread to be had: as a failed fetch (the get will read it)
            log.warning("warming global state %s…: no thread: %s", model_hash[:12], exc)
            self._warmed(model_hash)
            return False
        return True

    def _warm(self, model_hash: str, epoch: int | None) -> None:
        try:
            self.get(model_hash, epoch)
        except GlobalStateUnavailable as exc:
            log.debug("warming global state %s…: %s", model_hash[:12], exc)
        except LedgerError as exc:  # the chain did not answer who holds it: tried again later
            log.info("warming global state %s…: the chain did not answer: %s", model_hash[:12], exc)
        except Exception:  # a bug here must not end the thread's owner; its get will raise it
            log.exception("warming global state %s… broke", model_hash[:12])
        finally:
            self._warmed(model_hash)

    def _warmed(self, model_hash: str) -> None:
        """A warm fetch of ``model_hash`` is over: without the state, it counts as failed now."""
        with self._mutex:
            self._warm_running.discard(model_hash)
            if self.has(model_hash):
                self._warm_failed.pop(model_hash, None)
            else:
                self._warm_failed[model_hash] = time.monotonic()

    def _initial_hash(self) -> str:
        """θ_0's hash as the chain holds it (read once)."""
        if self._initial is None:
            self._initial = self._ledger.config().initial_model_hash
        return self._initial

    def _answers(self, model_hash: str, epoch: int | None) -> Iterator[tuple[str, Callable[[], Iterable[object]]]]:
        builders = ((h.address, h.endpoint) for h in (self._ledger.aggregation_inputs(epoch - 1) if epoch else []))
        for address, endpoint in holders(self._ledger, {self._own}, builders):
            yield address, partial(self._read, endpoint, model_hash)

    def _read(self, endpoint: str, model_hash: str) -> Iterable[object]:
        return self._peers(endpoint).global_state_chunks(model_hash)

    def _verify(self, model_hash: str, chunks: Iterable[object], who: str) -> GlobalState:
        state, digest = stream_global(chunks, self.spec, what=f"global state from {who}")
        if digest.hex() != model_hash:
            raise WrongContent("served a state with another hash")
        return state

    def _remember(self, model_hash: str, state: GlobalState) -> GlobalState:
        with self._mutex:
            self._cache[model_hash] = state
            while len(self._cache) > self._keep:
                self._cache.pop(next(iter(self._cache)))
        return state
