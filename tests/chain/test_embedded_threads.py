"""The embedded chain called from several threads at once: every call is atomic.

``veriloco simulate`` runs its hosts and validators as threads of one process, and their fetch and
θ-warm threads read the chain while a tick sends transactions. The wasmtime VM under the chain is
not thread-safe (host functions find the running instance on a stack per code, and wasmtime-py
releases the GIL inside wasm), so :class:`chain.embedded.EmbeddedChain` serialises every call under
one lock. Without it this test fails: a VM error ("Could not dereference this pointer to a Region"),
or a lost block.
"""

from __future__ import annotations

import hashlib
import threading

from ledger_env import account_key

from chain.embedded import EmbeddedChain, deploy_embedded
from chain.embedded.backend import EmbeddedBackend
from protocol.injective import GENESIS_BALANCE
from trainer.presets import tiny

SPEC = tiny("embedded-threads")
DENOM = SPEC.economics.denom
WRITERS, READERS, TXS = 3, 3, 30


def test_queries_executes_and_blocks_from_several_threads_at_once_are_each_atomic() -> None:
    operator = account_key("operator")
    writers = [account_key(f"writer-{i}") for i in range(WRITERS)]
    # No query cache: every query runs the contract, so reads enter the VM as often as writes do.
    chain = EmbeddedChain(genesis_balances={k.address(): {DENOM: GENESIS_BALANCE} for k in (operator, *writers)},
                          cache_queries=False)
    ledger = deploy_embedded(chain, operator, SPEC, hashlib.sha256(b"theta").hexdigest(), operator.address())
    backend = ledger.backend
    assert isinstance(backend, EmbeddedBackend)
    pool, height = int(ledger.accounting().reward_pool), ledger.height()
    errors: list[BaseException] = []
    start = threading.Barrier(WRITERS + READERS)
    writing = threading.Event()
    writing.set()
    reads = [0] * READERS

    def write(i: int) -> None:
        try:
            start.wait()
            for n in range(TXS):
                ledger.fund_rewards(writers[i], 1)  # a transaction: one block each (block_txs=1)
                ledger.epoch(lists=False)
                if n % 3 == 0:
                    backend.mine(1)  # and an empty block
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    def read(i: int) -> None:
        try:
            start.wait()
            while True:  # at least once, however late this thread runs
                ledger.config()
                ledger.accounting()
                backend.raw(b"config")
                ledger.balance(writers[i % WRITERS].address())
                backend.wait_for_height(ledger.height())  # reached: no block made
                reads[i] += 1
                if not writing.is_set():
                    break
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(WRITERS)]
    readers = [threading.Thread(target=read, args=(i,)) for i in range(READERS)]
    for t in threads + readers:
        t.start()
    for t in threads:
        t.join(120)
    writing.clear()
    for t in readers:
        t.join(120)
    assert not errors, errors
    assert all(reads), reads
    mined = WRITERS * len(range(0, TXS, 3))
    assert ledger.height() == height + WRITERS * TXS + mined  # no block lost to a race
    assert int(ledger.accounting().reward_pool) == pool + WRITERS * TXS
    assert ledger.balance(ledger.contract_address) == sum(int(v) for v in ledger.accounting().model_dump().values())
    for w in writers:
        assert ledger.balance(w.address()) == GENESIS_BALANCE - TXS


def test_a_caller_holds_the_chain_across_several_calls() -> None:
    # chain.lock is re-entrant: a caller that needs two calls to see one state (read the height,
    # then act on it) holds it around both; the chain's own calls inside take it again.
    chain = EmbeddedChain()
    backend = EmbeddedBackend(chain, "inj1unused", DENOM)
    with chain.lock:
        before = backend.height()
        backend.mine(2)
        assert backend.wait_for_height(before + 3) == before + 3 == chain.height
    got: list[int] = []
    with chain.lock:
        other = threading.Thread(target=lambda: got.append(chain.advance_blocks(1)))
        other.start()
        other.join(0.2)
        assert other.is_alive() and not got  # another thread waits for the holder
    other.join(10)
    assert got == [before + 4]

