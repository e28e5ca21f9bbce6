"""Throughput and cost of the committed veriloco contract on the embedded chain.

    .venv/bin/python bench/embedded_chain.py [--n 2000] [--hosts 256] [--cost-hosts 4,16,64] [--wasm PATH] [--quick]
        [--full-epochs 5]

Measures, on one core, and prints one JSON object:

* ``bond`` executes per second and ``member`` queries per second (each execute a full
  transaction: a new block, funds moved, a fresh wasm instance, storage read and written, events);
* ``commit`` and verdict executes (commitments, trap openings, openings) per second, in an epoch
  of ``--hosts`` hosts (S = 4 segments, k = 2, r = 2, 16 validators);
* per message, in epochs of ``--cost-hosts`` hosts with the devnet benchmark's shape
  (``bench/chain_devnet.py``: 4 validators, S = 2, k = 1, r = 2): wasm fuel, contract storage
  traffic, and an *estimate* of the Cosmos SDK gas on wasmd, for ``commit``, ``commit_verdict``,
  ``reveal_verdict`` (on a host's last segment apart: with the probe on it carries the probe
  gain), the reveal that closes its phase (seed and challenges) and the verdict opening that
  finalizes (``--probe-windows`` sets the cost epochs' probe; 0 measures a wasm from before it).
  Those two run only the first page of a close that runs page by page (the contract's default
  ``settle_page``); the ``advance`` messages that run the rest are counted (``pages_after``) and the
  largest is estimated (``largest_page_after``; ``bench/settle_paging.py`` measures every page),
  and so are the ``advance`` messages after the last ``ready`` (``objection_close_pages``);
* the wall time of a full epoch of 8 hosts and 4 validators, once with every phase closing early
  and once with every phase waited out and closed by ``advance`` (median of ``--full-epochs``);
* the wasm size.

The gas estimate uses wasmd's published constants: KV reads 1000 + 3/byte (key and value),
writes 2000 + 30/byte, 30 + 3/byte per iterated item; 150 CosmWasm gas per wasm operation at
140,000 CosmWasm gas per SDK gas (about 933 instructions per SDK gas; wasmtime fuel counts about
one unit per instruction); 60,000 per contract instance. Two constants are calibrated against
the devnet benchmark (``bench/chain_devnet.py``, ``docs/benchmarks.md``) on the same artifact
(488,172 bytes): 73,000 of transaction overhead (signature, bytes, ante handlers: commit and
verdict measured 159k/157k against 86k/85k estimated) and 30,000 per bank send the contract
dispatches (the finalize gap grows by 15k per send over a 15k first guess, at 4, 16 and 64 hosts).
With them the estimate reproduces the devnet's finalize at 4/16/64 hosts within a few percent.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

# The contract tests' drivers (tests/chain/ledger_env.py), which import the suite's shared names (tests/suite_env.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "chain"))

from ledger_env import EmbeddedDriver, LedgerEnv, make_spec

import chain.embedded.chain as embedded_chain_module
from chain.embedded import EmbeddedChain
from chain.embedded.state import ContractStore
from chain.types import TxResult
from chain.wasm_artifact import contract_wasm_path, load_contract_wasm
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import PrivateKey
from protocol.rules.spec import RunSpec

# wasmd / Cosmos SDK gas constants (see the module docstring).
READ_FLAT, READ_BYTE, WRITE_FLAT, WRITE_BYTE, ITER_FLAT = 1000, 3, 2000, 30, 30
INSTRUCTIONS_PER_SDK_GAS = 140_000 / 150
INSTANCE_COST = 60_000
TX_OVERHEAD = 73_000  # calibrated (see the module docstring)
BANK_SEND_COST = 30_000  # calibrated


# -- storage traffic -----------------------------------------------------------------------------


@dataclass
class Traffic:
    reads: int = 0
    read_bytes: int = 0
    writes: int = 0
    written_bytes: int = 0
    iterated: int = 0
    iterated_bytes: int = 0

    def kv_gas(self) -> int:
        return (self.reads * READ_FLAT + self.read_bytes * READ_BYTE + self.writes * WRITE_FLAT
                + self.written_bytes * WRITE_BYTE + self.iterated * ITER_FLAT + self.iterated_bytes * READ_BYTE)


class CountingStore(ContractStore):
    """ContractStore that adds every access to the current :class:`Traffic`."""

    traffic: Traffic | None = None

    def get(self, key: bytes) -> bytes | None:
        value = super().get(key)
        if CountingStore.traffic is not None:
            CountingStore.traffic.reads += 1
            CountingStore.traffic.read_bytes += len(key) + len(value or b"")
        return value

    def set(self, key: bytes, value: bytes) -> None:
        super().set(key, value)
        if CountingStore.traffic is not None:
            CountingStore.traffic.writes += 1
            CountingStore.traffic.written_bytes += len(key) + len(value)

    def scan(self, start, end, descending):
        items = super().scan(start, end, descending)
        if CountingStore.traffic is not None:
            CountingStore.traffic.iterated += len(items)
            CountingStore.traffic.iterated_bytes += sum(len(k) + len(v) for k, v in items)
        return items


# Every contract store of the embedded chain counted from here on (a monkeypatch of its class: the
# name is the module's own import, not re-exported, hence attr-defined).
embedded_chain_module.ContractStore = CountingStore  # type: ignore[attr-defined]


@dataclass
class Cost:
    fuel: int = 0
    traffic: Traffic = field(default_factory=Traffic)
    bank_sends: int = 0

    def estimate(self) -> dict[str, Any]:
        wasm = round(self.fuel / INSTRUCTIONS_PER_SDK_GAS)
        kv = self.traffic.kv_gas()
        total = TX_OVERHEAD + INSTANCE_COST + wasm + kv + self.bank_sends * BANK_SEND_COST
        return {"fuel": self.fuel, "reads": self.traffic.reads, "writes": self.traffic.writes,
                "bytes_written": self.traffic.written_bytes, "items_iterated": self.traffic.iterated,
                "bank_sends": self.bank_sends, "sdk_gas_wasm": wasm, "sdk_gas_kv": kv,
                "sdk_gas_estimate": total}


@contextmanager
def measured(cost: Cost):
    CountingStore.traffic = cost.traffic
    try:
        yield
    finally:
        CountingStore.traffic = None


def run_costed(action: Callable[[], TxResult]) -> tuple[TxResult, Cost]:
    """Run ``action`` (one transaction): its result, and what it cost (wasm fuel, storage
    traffic and bank sends)."""
    cost = Cost()
    with measured(cost):
        result = action()
    cost.fuel = result.gas_used
    cost.bank_sends = sum(1 for e in result.events if e.type == "transfer")
    return result, cost


def cost_of(action: Callable[[], TxResult]) -> Cost:
    """What ``action`` (one transaction) cost: its wasm fuel, storage traffic and bank sends."""
    return run_costed(action)[1]


def run_pages(env: LedgerEnv) -> list[Cost]:
    """Run a close in progress to its end with ``advance``; what each page cost."""
    pages: list[Cost] = []
    while env.ledger.closing():
        assert len(pages) < 10_000, f"the close does not end: {env.epoch()}"
        pages.append(cost_of(env.advance))
    return pages


def close_cost(env: LedgerEnv, action: Callable[[], TxResult]) -> dict[str, Any]:
    """What a message that completes a phase costs, and the close it starts: since paged
    settlement (``settle_page``) it runs the close's first page, and ``advance`` runs the rest
    (``pages_after`` of them; the largest one's estimate, None when the close fit in one)."""
    first = cost_of(action)
    pages = run_pages(env)
    largest = max(pages, key=lambda c: c.estimate()["sdk_gas_estimate"]) if pages else None
    return {**first.estimate(), "pages_after": len(pages),
            "largest_page_after": largest.estimate() if largest else None}


# -- scenarios -----------------------------------------------------------------------------------


def _key(name: str) -> PrivateKey:
    return PrivateKey(hashlib.sha256(b"bench:" + name.encode()).digest())


def bond_and_query(n: int, members: int) -> dict[str, Any]:
    accounts = [_key(f"m{i}").address() for i in range(members)]
    operator = _key("operator").address()
    # Without the query cache: the same few members are queried again and again.
    chain = EmbeddedChain(genesis_balances={a: {DENOM: GENESIS_BALANCE} for a in [operator, *accounts]},
                          cache_queries=False)
    t0 = time.perf_counter()
    code_id = chain.store_code(operator, load_contract_wasm()).code_id
    assert code_id is not None
    store_s = time.perf_counter() - t0
    spec = make_spec()
    contract = chain.instantiate(operator, code_id, {
        "spec_json": spec.canonical().decode(), "initial_model_hash": "0" * 64, "denom": DENOM,
        "treasury": operator, "admin": None}).contract_address
    assert contract is not None
    msg = {"bond": {"role": "host", "endpoint": "http://127.0.0.1:8700"}}
    fuel = []
    t0 = time.perf_counter()
    for i in range(n):
        fuel.append(chain.execute(accounts[i % members], contract, msg, funds={DENOM: 1000}).gas_used)
    execute_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(n):
        chain.query(contract, {"member": {"address": accounts[i % members]}})
    query_s = time.perf_counter() - t0
    return {"store_code_s": round(store_s, 3), "bond_executes_per_s": round(n / execute_s, 1),
            "member_queries_per_s": round(n / query_s, 1), "bond_fuel_median": sorted(fuel)[n // 2]}


LONG_PHASES = {"join_blocks": 100_000, "train_blocks": 100_000, "reveal_blocks": 100_000,
               "verify_blocks": 100_000, "verdict_reveal_blocks": 100_000, "propose_blocks": 100_000}


def throughput_spec(hosts: int) -> RunSpec:
    return make_spec(train={"inner_steps": 8, "segment_steps": 2}, verification={"challenges_k": 2},
                     reward_per_epoch="1000000",
                     phases={"max_hosts": max(hosts, 1), "max_validators": 32, **LONG_PHASES})


def cost_spec(hosts: int, probe_windows: int | None = None) -> RunSpec:
    """bench/chain_devnet.py's shape: S = 2, k = 1, r = 2 (``probe_windows``: the spec's probe, its
    default when None; 0 turns it off, so a wasm from before the probe can be measured)."""
    probe = {} if probe_windows is None else {"probe_windows": probe_windows}
    return make_spec(reward_per_epoch="1000000", phases={"max_hosts": max(hosts, 1), **LONG_PHASES},
                     verification=probe)


def epoch_at_scale(spec: RunSpec, hosts: int, validators: int, wasm: bytes | None = None) -> dict[str, Any]:
    """An epoch of ``hosts`` hosts, everyone honest: commit and verdict throughput, and what the
    messages that close reveal and verify (finalize) cost."""
    host_names = [f"host{i}" for i in range(hosts)]
    validator_names = [f"validator{i}" for i in range(validators)]
    env = LedgerEnv(EmbeddedDriver(spec, ["operator", "treasury", "funder", *host_names, *validator_names],
                                   wasm=wasm))
    env.fund_rewards(10**9)
    env.bond_all([*host_names, *validator_names])
    for name in [*host_names, *validator_names]:
        env.join(name, 0)
    assert env.epoch().phase == "train"

    commits = [env.commitment(h, 0) for h in host_names]
    t0 = time.perf_counter()
    commit_costs: list[Cost] = []
    for name, commitment in zip(host_names, commits, strict=True):
        if len(commit_costs) < 5:
            commit_costs.append(cost_of(partial(env.ledger.commit, env.key(name), commitment,
                                                env.trap_opening(name, 0).commitment(env.addr(name)))))
        else:
            env.ledger.commit(env.key(name), commitment, env.trap_opening(name, 0).commitment(env.addr(name)))
    commit_s = time.perf_counter() - t0
    assert env.epoch().phase == "reveal"

    everyone = [*host_names, *validator_names]
    for name in everyone[:-1]:
        env.reveal(name, 0)
    reveal_close = close_cost(env, lambda: env.reveal(everyone[-1], 0))
    assert env.epoch().phase == "verify", env.epoch()

    work = [(v, c) for v in validator_names for c in env.challenges(v, 0)]
    verdict_costs: list[Cost] = []
    t0 = time.perf_counter()
    for v, c in work:  # commitments (the last one closes verify)
        if len(verdict_costs) < 5:
            verdict_costs.append(cost_of(partial(env.commit_verdict, v, c.host, c.segment, "pass", epoch=0)))
        else:
            env.commit_verdict(v, c.host, c.segment, "pass", epoch=0)
    # objection (issue 27): every seated validator says it is done (no objection), every host opens
    # its (empty) trap set; the phase closes early into verdict_reveal.
    assert env.epoch(0).phase == "objection", env.epoch(0)
    env.objection_round(validator_names, host_names, 0)
    objection_pages = run_pages(env)  # closing `objection` pages too (beyond `settle_page` hosts)
    assert env.epoch(0).phase == "verdict_reveal", env.epoch(0)
    # Openings on a host's last segment (with the probe on they carry its probe gain) and on the others.
    opening_costs: list[Cost] = []
    last_costs: list[Cost] = []
    for v, c in work[:-1]:
        costs = last_costs if c.segment == c.segments - 1 else opening_costs
        if len(costs) < 5:
            costs.append(cost_of(partial(env.reveal_verdict, v, c.host, c.segment, epoch=0)))
        else:
            env.reveal_verdict(v, c.host, c.segment, epoch=0)
    verdict_s = time.perf_counter() - t0
    v, c = work[-1]
    t0 = time.perf_counter()
    finalize = close_cost(env, lambda: env.reveal_verdict(v, c.host, c.segment, epoch=0))  # wall_s: with its pages
    finalize_s = time.perf_counter() - t0
    assert env.epoch(0).phase == "propose", env.epoch(0)
    median = lambda costs: sorted(costs, key=lambda x: x.fuel)[len(costs) // 2]  # noqa: E731 (a one-line helper, named where it is used)
    return {
        "hosts": hosts, "validators": validators, "challenges": len(env.report(0).challenges),
        "verdicts": len(work),
        "commit_executes_per_s": round(hosts / commit_s, 1),
        "verdict_executes_per_s": round((2 * len(work) - 1 + hosts) / verdict_s, 1),  # commits, traps, openings
        "commit": median(commit_costs).estimate(),
        "commit_verdict": median(verdict_costs).estimate(),
        "reveal_verdict": median(opening_costs).estimate(),
        "reveal_verdict_last_segment": median(last_costs).estimate(),
        "objection_close_pages": len(objection_pages),
        "reveal_that_closes_the_phase": reveal_close,
        "reveal_verdict_that_finalizes": {**finalize, "wall_s": round(finalize_s, 3)},
    }


def full_epoch(by_deadline: bool) -> float:
    """Wall time of one epoch of 8 hosts and 4 validators, from the first join to the next epoch
    (early close, or every phase waited out and closed by ``advance``)."""
    hosts = [f"host{i}" for i in range(1, 9)]
    validators = [f"validator{i}" for i in range(1, 5)]
    # Every embedded transaction is a block: the phases must outlast 48 verdicts.
    spec = make_spec(train={"inner_steps": 8, "segment_steps": 2}, verification={"challenges_k": 2},
                     reward_per_epoch="1000",
                     phases={"join_blocks": 200, "train_blocks": 200, "reveal_blocks": 200,
                             "verify_blocks": 200, "verdict_reveal_blocks": 200, "propose_blocks": 200})
    env = LedgerEnv(EmbeddedDriver(spec, ["operator", "treasury", "funder", *hosts, *validators]))
    env.fund_rewards(100_000)
    env.bond_all([*hosts, *validators])
    t0 = time.perf_counter()
    if by_deadline:
        # One host stays silent in every phase so nothing closes early; `advance` closes it.
        env.play_epoch(hosts, validators, commit=hosts[:-1], reveal=[*hosts[:-1], *validators],
                       vote=lambda v, c: None if v == "validator4" else "pass",
                       propose=lambda h: None if h == "host1" else "0" * 64)
    else:
        env.play_epoch(hosts, validators)
    elapsed = time.perf_counter() - t0
    assert env.current() == 1
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="bond executes (and member queries) to time")
    parser.add_argument("--members", type=int, default=50, help="distinct bonding accounts")
    parser.add_argument("--hosts", type=int, default=256, help="hosts in the commit/verdict throughput epoch")
    parser.add_argument("--cost-hosts", default="4,16,64", help="host counts of the cost epochs")
    parser.add_argument("--wasm", type=Path, help="estimate costs for this wasm instead of the committed one")
    parser.add_argument("--full-epochs", type=int, default=5, help="full epochs timed each way (the median)")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--probe-windows", type=int, help="verification.probe_windows of the cost epochs "
                                                          "(default: the spec's; 0: the probe off)")
    args = parser.parse_args()
    if args.quick:
        args.n, args.hosts, args.cost_hosts = 200, 32, "4,16"
    wasm = args.wasm.read_bytes() if args.wasm else None
    out: dict[str, Any] = {"wasm_bytes": len(wasm) if wasm else contract_wasm_path().stat().st_size}
    if wasm is None:
        out.update(bond_and_query(args.n, args.members))
        out["throughput_epoch"] = epoch_at_scale(throughput_spec(args.hosts), args.hosts, 16)
    out["cost_epochs"] = {n: epoch_at_scale(cost_spec(n, args.probe_windows), n, 4, wasm)
                          for n in (int(x) for x in args.cost_hosts.split(","))}
    if wasm is not None:
        print(json.dumps(out, indent=2))
        return
    early = [full_epoch(by_deadline=False) for _ in range(args.full_epochs)]
    waited = [full_epoch(by_deadline=True) for _ in range(args.full_epochs)]
    out["epoch_8_hosts_4_validators_s"] = {"early_close_median": round(statistics.median(early), 3),
                                           "deadlines_and_advance_median": round(statistics.median(waited), 3)}
    out.update({"python": platform.python_version(), "machine": platform.processor() or platform.machine()})
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
