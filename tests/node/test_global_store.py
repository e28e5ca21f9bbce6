"""Global states by hash: fetched from peers over HTTP as they stream, and which ones a participant
may delete (``node.global_store.prunable_states``): never θ of an epoch whose windows are open or of
the kept epochs, never a proposal the chain has not decided, and everything else once its epoch
closed."""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator

from chain.embedded import EmbeddedChain
from chain.embedded.backend import EmbeddedBackend, deploy_embedded
from chain.ledger import ContractError, Ledger
from node.daemon import http_peers
from node.global_store import GlobalStore
from node.server import ServerThread, create_app
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import PrivateKey
from protocol.views import EpochInfo
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.outer import GlobalState
from trainer.presets import tiny

SPEC = tiny("global-store")

SEED = "00" * 32


def h(n: int) -> str:
    return f"{n:064x}"


def epoch(e: int, phase: str = "closed", agreed: bool = True) -> EpochInfo:
    # θ_e is h(e); an agreed close sets θ_{e+1} = h(e + 1), a failed one keeps θ_e.
    return EpochInfo(epoch=e, phase=phase, phase_deadline=0, started_at=0, model_hash=h(e), prev_seed=SEED,
                     next_model_hash=(h(e + 1) if agreed else h(e)) if phase == "closed" else None)


def prunable(held, epochs, current, keep=1):
    from node.global_store import prunable_states

    return prunable_states(held, epochs, current, keep)


def test_states_of_closed_old_epochs_go_and_the_current_and_previous_stay() -> None:
    epochs = [epoch(e) for e in range(5)] + [epoch(5, "train")]
    held = {h(e): e for e in range(6)}
    assert prunable(held, epochs, 5) == {h(0), h(1), h(2), h(3)}
    assert prunable(held, epochs, 5, keep=0) == {h(0), h(1), h(2), h(3)}  # the previous θ is always kept
    assert prunable(held, epochs, 5, keep=3) == {h(0), h(1)}


def test_an_epoch_with_open_windows_keeps_its_state_whatever_its_age() -> None:
    # Epoch 2 is still in its dispute round while epoch 5 trains: a validator may still check leaf
    # 0 of its challenges against θ_2.
    epochs = [epoch(0), epoch(1), epoch(2, "dispute"), epoch(3), epoch(4), epoch(5, "train")]
    held = {h(e): e for e in range(6)}
    assert prunable(held, epochs, 5) == {h(0), h(1)}


def test_a_proposal_the_chain_has_not_decided_stays_and_a_losing_one_goes_after_its_close() -> None:
    lost = "ee" * 32  # a host's proposal for θ_4 that lost the vote
    held = {h(3): 3, h(4): 4, lost: 3}
    # Epoch 3 proposing: nobody knows yet which θ_4 wins.
    assert prunable(held, [epoch(2), epoch(3, "propose")], 3) == set()
    # Epoch 3 closed on h(4), epoch 4 current: the lost proposal is kept with the previous epoch…
    assert prunable(held, [epoch(3), epoch(4, "train")], 4) == set()
    # … and goes once its epoch is older than the kept ones.
    assert prunable({**held, h(5): 5}, [epoch(3), epoch(4), epoch(5, "train")], 5) == {lost, h(3)}


def test_a_failed_vote_keeps_the_state_it_carried_over() -> None:
    # Epoch 3 closed without agreement: θ_4 = θ_3, which is needed by epoch 4 however old it is.
    epochs = [epoch(2), epoch(3, agreed=False), EpochInfo(epoch=4, phase="train", phase_deadline=0, started_at=0,
                                                           model_hash=h(3), prev_seed=SEED)]
    assert prunable({h(2): 2, h(3): 3}, epochs, 4, keep=0) == {h(2)}


class _Holder(ArtifactSource):
    """A peer's server side that holds global states only: each one answers with ``served``.
    ``gate``: what the holders below that hold answers back wait for (set when their server stops)."""

    def __init__(self, served: bytes) -> None:
        self.served, self.asked = served, 0
        self.gate = threading.Event()
        self.reading = threading.Event()  # set once a held-back read is under way (at the gate)

    def checkpoint(self, epoch, leaf):
        raise ArtifactUnavailable("global states only")

    proof = delta = losses = checkpoint

    def global_state(self, model_hash):
        self.asked += 1
        return self.served


def test_a_state_is_fetched_over_http_while_streaming_and_only_the_right_one_reaches_the_disk(tmp_path) -> None:
    # Three peers in the order a store asks them: one cuts its answer short, one serves a state that
    # decodes but hashes otherwise, the last the right one. Each answer is decoded, hashed and
    # written as it streams; only the right one becomes the file, and nothing else is left behind.
    spec = SPEC
    wanted = GlobalState.initial(spec)
    wanted = GlobalState({n: t * 0.5 for n, t in wanted.params.items()}, wanted.momentum)
    model_hash = wanted.hash().hex()
    good = wanted.encode()
    keys = sorted((PrivateKey(bytes([0x40 + i]) * 32) for i in range(3)), key=lambda k: k.address())
    reader = PrivateKey(b"\x50" * 32)
    operator = PrivateKey(b"\x51" * 32)
    chain = EmbeddedChain(genesis_balances={k.address(): {DENOM: GENESIS_BALANCE} for k in (*keys, reader, operator)})
    ledger = deploy_embedded(chain, operator, spec, hashlib.sha256(b"theta").hexdigest(), operator.address())
    answers = [good[:len(good) // 2], GlobalState.initial(spec).encode(), good]
    holders = [_Holder(a) for a in answers]
    servers = [ServerThread(create_app(h, spec.run_id().hex(), k.address(), authorize=lambda a: True))
               for h, k in zip(holders, keys, strict=True)]
    for server in servers:
        server.start()
    try:
        for key, server in zip(keys, servers, strict=True):
            ledger.bond(key, "host", server.url, int(spec.economics.min_host_stake))
        store = GlobalStore(tmp_path, spec, ledger, http_peers(reader, spec, ledger.prefix, allow_private=True,
                                                              retry_budget_s=0.5), reader.address())
        got = store.get(model_hash)
    finally:
        for server in servers:
            server.stop()
    assert got.hash().hex() == model_hash and [h.asked for h in holders] == [1, 1, 1]
    assert store.path(model_hash).read_bytes() == good
    assert [p.name for p in store.path(model_hash).parent.iterdir()] == [f"{model_hash}.safetensors"]


class _Gated(_Holder):
    """A holder whose answers wait until ``gate`` is set."""

    def global_state(self, model_hash):
        self.reading.set()
        self.gate.wait(10)
        return super().global_state(model_hash)


@contextlib.contextmanager
def _one_holder_store(tmp_path, holder: _Holder) -> Iterator[GlobalStore]:
    """A store whose run has one host, ``holder``, behind a real server; on leaving, the holder's
    gate is opened (no answer left held back) and the server stopped."""
    spec = SPEC
    key, reader, operator = (PrivateKey(bytes([b]) * 32) for b in (0x40, 0x50, 0x51))
    chain = EmbeddedChain(genesis_balances={k.address(): {DENOM: GENESIS_BALANCE} for k in (key, reader, operator)})
    # The warm thread and the caller both read the chain (its lock makes each call atomic).
    ledger = deploy_embedded(chain, operator, spec, hashlib.sha256(b"theta").hexdigest(), operator.address())
    server = ServerThread(create_app(holder, spec.run_id().hex(), key.address(), authorize=lambda a: True))
    server.start()
    try:
        ledger.bond(key, "host", server.url, int(spec.economics.min_host_stake))
        yield GlobalStore(tmp_path, spec, ledger, http_peers(reader, spec, ledger.prefix, allow_private=True,
                                                             retry_budget_s=0.5), reader.address())
    finally:
        holder.gate.set()
        server.stop()


@contextlib.contextmanager
def _warming(tmp_path) -> Iterator[tuple[GlobalStore, _Gated, str]]:
    """A store warming θ = :func:`_halved` from its one holder, which holds its answer back until its
    gate is set: (store, holder, θ's hash), the warm fetch started (as :func:`_one_holder_store`)."""
    wanted = _halved()
    holder = _Gated(wanted.encode())
    with _one_holder_store(tmp_path, holder) as store:
        model_hash = wanted.hash().hex()
        assert store.warm(model_hash) is True
        yield store, holder, model_hash


def _halved() -> GlobalState:
    state = GlobalState.initial(SPEC)
    return GlobalState({n: t * 0.5 for n, t in state.params.items()}, state.momentum)


def _until(check, timeout: float = 20.0) -> bool:
    import time

    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_a_warmed_state_is_fetched_once_off_the_callers_thread_and_a_get_then_reads_it(tmp_path) -> None:
    # A validator warms θ_e while e trains: the fetch runs on its own thread (warm returns while the
    # holder still holds the answer back), and the get at its verify reads the copy, not the peer.
    with _warming(tmp_path) as (store, holder, model_hash):
        assert not store.has(model_hash) and store.warm(model_hash) is False  # one fetch under way, not two
        got: list[GlobalState] = []
        waiting = threading.Thread(target=lambda: got.append(store.get(model_hash)))
        waiting.start()  # a get meanwhile waits for the warm fetch instead of starting its own
        holder.gate.set()
        waiting.join(20)
        assert _until(lambda: store.has(model_hash))
        assert store.get(model_hash).hash().hex() == model_hash
    assert got and got[0].hash().hex() == model_hash
    assert holder.asked == 1
    assert store.warm(model_hash) is False  # held: nothing to do


def test_warming_a_state_nobody_serves_raises_nothing_and_is_tried_again_later(tmp_path) -> None:
    import pytest

    from node.global_store import GlobalStateUnavailable

    holder = _Holder(GlobalState.initial(SPEC).encode())  # serves another state than the one asked
    model_hash = _halved().hash().hex()
    with _one_holder_store(tmp_path, holder) as store:
        assert store.warm(model_hash, retry_s=60) is True
        assert _until(lambda: holder.asked == 1)
        assert store.warm(model_hash, retry_s=60) is False  # under way, or failed within the retry time
        assert not store.has(model_hash)
        assert _until(lambda: store.warm(model_hash, retry_s=0))  # once it gave up: asked again
        assert _until(lambda: holder.asked == 2)
        with pytest.raises(GlobalStateUnavailable):
            store.get(model_hash)  # the caller that needs it hears why


class _Shelf(_Holder):
    """A holder of several states by hash; reads of the ``gated`` ones wait until ``gate`` is set."""

    def __init__(self, states: dict[str, bytes], gated: set[str]) -> None:
        super().__init__(b"")
        self.states, self.gated = states, gated

    def global_state(self, model_hash):
        if model_hash in self.gated:
            self.reading.set()
            self.gate.wait(20)
        self.asked += 1
        if model_hash not in self.states:
            raise ArtifactUnavailable("not held")
        return self.states[model_hash]


def test_a_slow_warm_fetch_of_one_state_does_not_hold_a_read_of_another(tmp_path) -> None:
    # A validator warms θ_{e+1} from a holder that drips it, while its tick needs θ_e: that read must
    # not wait for the other state's fetch.
    slow, needed = _halved(), GlobalState({n: t * 0.25 for n, t in GlobalState.initial(SPEC).params.items()},
                                          GlobalState.initial(SPEC).momentum)
    slow_hash, needed_hash = slow.hash().hex(), needed.hash().hex()
    holder = _Shelf({slow_hash: slow.encode(), needed_hash: needed.encode()}, gated={slow_hash})
    with _one_holder_store(tmp_path, holder) as store:
        assert store.warm(slow_hash) is True
        assert holder.reading.wait(10)  # the slow fetch is under way
        got: list[GlobalState] = []
        reader = threading.Thread(target=lambda: got.append(store.get(needed_hash)))
        reader.start()
        reader.join(10)
        assert got and got[0].hash().hex() == needed_hash  # read while the other fetch still waits
        assert not store.has(slow_hash)
        holder.gate.set()
        assert _until(lambda: store.has(slow_hash))


class _Counted(_Holder):
    """A holder that counts the reads begun (``entered``) and holds each until ``gate`` is set."""

    def __init__(self, served: bytes) -> None:
        super().__init__(served)
        import threading

        self.entered, self.gate, self.reading = 0, threading.Event(), threading.Event()

    def global_state(self, model_hash):
        self.entered += 1
        self.reading.set()
        self.gate.wait(20)
        return super().global_state(model_hash)


class _PrunedBeforeHeld:
    """A state's fetch lock that ``store.prune`` drops between a get taking it from the store and
    holding it: the first ``acquire`` runs a prune (the lock is not held, so it goes) first."""

    def __init__(self, store: GlobalStore) -> None:
        import threading

        self.store, self.lock, self.pruned = store, threading.Lock(), False

    def acquire(self, timeout: float = -1) -> bool:
        if not self.pruned:
            self.pruned = True
            self.store.prune(0)
            assert not any(lock is self for lock in self.store._fetching.values())
        return self.lock.acquire(timeout=timeout)

    def release(self) -> None:
        self.lock.release()

    def locked(self) -> bool:
        return self.lock.locked()


def test_a_fetch_lock_pruned_before_its_get_held_it_never_lets_two_fetches_of_one_state_run(tmp_path) -> None:
    # prune drops the fetch locks nobody holds. A get that took one from the store just before, and
    # holds it just after, holds a lock nobody else will take: a second get of the same state must
    # still wait for the first, not fetch beside it.
    import threading

    wanted = _halved()
    holder = _Counted(wanted.encode())
    got: list[GlobalState] = []
    with _one_holder_store(tmp_path, holder) as store:
        store.keep_epochs = 1  # prune runs (it deletes nothing here: no state is held)
        model_hash = wanted.hash().hex()
        store._fetching[model_hash] = _PrunedBeforeHeld(store)  # type: ignore[assignment]
        first = threading.Thread(target=lambda: got.append(store.get(model_hash)))
        first.start()
        assert holder.reading.wait(10)  # the first get is fetching
        second = threading.Thread(target=lambda: got.append(store.get(model_hash)))
        second.start()
        assert not _until(lambda: holder.entered > 1, timeout=1.0)  # the second waits, asks nobody
        holder.gate.set()
        first.join(20)
        second.join(20)
    assert [g.hash().hex() for g in got] == [model_hash, model_hash]
    assert holder.entered == 1


def test_a_warm_that_gets_no_thread_is_a_failed_fetch_tried_again_later(tmp_path, monkeypatch) -> None:
    # A process out of threads: warm reports no fetch started (the get that needs the state reads it
    # itself) and does not mark the state as under way for ever.
    import threading

    wanted = _halved()
    holder = _Holder(wanted.encode())
    start = threading.Thread.start

    def no_warm_thread(thread: threading.Thread) -> None:
        if thread.name.startswith("warm-"):
            raise RuntimeError("can't start new thread")
        start(thread)

    with _one_holder_store(tmp_path, holder) as store:
        model_hash = wanted.hash().hex()
        monkeypatch.setattr(threading.Thread, "start", no_warm_thread)
        assert store.warm(model_hash, retry_s=60) is False
        monkeypatch.setattr(threading.Thread, "start", start)
        assert store.warm(model_hash, retry_s=60) is False  # failed within the retry time
        assert store.warm(model_hash, retry_s=0) is True  # tried again
        assert _until(lambda: store.has(model_hash))
    assert holder.asked == 1


CONTRACT_0_3_1_REFUSAL = ("invalid query message: unknown field `lists`, expected `start_after` or `limit` at line 1 "
                          "column 48")
"""What contract 0.3.1 (the wasm before ``lists``, sha256 d71e66c8…) answered ``epochs {…, lists: false}``
on the embedded chain, verbatim; ``tests/chain/test_contract_queries.py`` checks on both backends that the
contract's refusal of an unknown field has this form."""


class _Contract031(EmbeddedBackend):
    """The contract as 0.3.1 answers: the ``lists`` field refused with ``refusal`` (every other query,
    message and record the real contract's); records the queries it answers."""

    def __init__(self, chain: EmbeddedChain, contract_address: str, denom: str,
                 refusal: str | None = CONTRACT_0_3_1_REFUSAL) -> None:
        super().__init__(chain, contract_address, denom)
        self.refusal = refusal
        self.asked: list[dict] = []

    def query(self, msg):
        self.asked.append(msg)
        if self.refusal is not None and any("lists" in args for args in msg.values()):
            raise ContractError(self.refusal, contract=self.contract_address, entry_point="query")
        return super().query(msg)


def _closed_epochs_store(tmp_path, refusal: str | None):
    """A store (keeping 1 epoch) on a run whose epochs 0-2 closed unplayed (nobody joined) and 3 is in
    join, holding a stray state first seen in epoch 0; and its backend."""
    operator = PrivateKey(b"\x51" * 32)
    chain = EmbeddedChain(genesis_balances={operator.address(): {DENOM: GENESIS_BALANCE}})
    deployed = deploy_embedded(chain, operator, SPEC, hashlib.sha256(b"theta").hexdigest(), operator.address())
    backend = _Contract031(chain, deployed.backend.contract_address, DENOM, refusal)
    ledger = Ledger(backend)
    store = GlobalStore(tmp_path, SPEC, ledger, http_peers(operator, SPEC, ledger.prefix, allow_private=True,
                                                          retry_budget_s=0.5), operator.address(), keep_epochs=1)
    stray = store.put(_halved())
    assert store.prune(0) == []  # seen in epoch 0
    while deployed.epoch().epoch < 3:  # the real contract's answers
        deployed.wait_for_height(deployed.epoch().phase_deadline)
        deployed.advance(operator)
    assert [(e.epoch, e.phase) for e in deployed.epochs()] == [(0, "closed"), (1, "closed"), (2, "closed"), (3, "join")]
    backend.asked.clear()
    return store, backend, stray


def test_prune_reads_epoch_headers_only_and_deletes_a_state_no_open_or_recent_epoch_needs(tmp_path) -> None:
    store, backend, stray = _closed_epochs_store(tmp_path, refusal=None)
    assert store.held() == [stray]
    assert store.prune(3) == [stray]
    assert store.held() == []
    # One `epochs` page, header-only: its cost does not grow with the participants of the epochs.
    assert backend.asked == [{"epochs": {"start_after": None, "limit": 4, "lists": False}}]


def test_prune_on_a_contract_before_the_header_form_reads_the_full_epochs_and_still_prunes(tmp_path) -> None:
    store, backend, stray = _closed_epochs_store(tmp_path, refusal=CONTRACT_0_3_1_REFUSAL)
    assert store.prune(3) == [stray]
    assert store.held() == []
    assert backend.asked == [{"epochs": {"start_after": None, "limit": 4, "lists": False}},
                             {"epochs": {"start_after": None, "limit": 4}}]


def test_prune_after_any_other_refusal_of_the_header_form_deletes_nothing(tmp_path) -> None:
    for refusal in ["invalid query message: unknown field `limit`, expected `start_after` or `lists`",
                    "invalid query message: unknown variant `epochs`, expected one of `config`",
                    "out of gas in query"]:
        store, backend, stray = _closed_epochs_store(tmp_path / str(len(refusal)), refusal=refusal)
        assert store.prune(3) == []
        assert store.held() == [stray]
        assert len(backend.asked) == 1  # not retried as the full query


def test_a_tick_get_hears_not_yet_while_a_warm_fetch_is_held_back(tmp_path) -> None:
    # The validator warms θ_e in train and its only holder holds the answer back. At verify the tick's
    # get (ValidatorNode._verdict_for, with its short wait) hears "still being fetched" within about
    # that wait and tries again next tick, instead of sitting on the fetch until the holder's request
    # deadline, which in a pipelined run held e + 1's join (review s9, H7). Once the answer comes, a
    # get reads the copy.
    import time

    import pytest

    from node.global_store import GlobalStateBeingFetched

    with _warming(tmp_path) as (store, holder, model_hash):
        assert holder.reading.wait(10)  # the warm fetch is under way, held at the holder
        started = time.monotonic()
        with pytest.raises(GlobalStateBeingFetched, match="still being fetched"):
            store.get(model_hash, wait_s=0.2)
        assert time.monotonic() - started < 2.0
        holder.gate.set()
        assert _until(lambda: store.has(model_hash))
        assert store.get(model_hash, wait_s=0.2).hash().hex() == model_hash
    assert holder.asked == 1
