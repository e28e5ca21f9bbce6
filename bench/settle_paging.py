"""Gas per message of the closes that run page by page (closing ``reveal``, closing a verdict
round, finalize) at 64, 256 and 1,024 hosts.

    PYTHONPATH=. .venv/bin/python bench/settle_paging.py [--hosts 64,256,1024] [--page 64]
        [--one-shot-hosts 64,256] [--devnet-hosts 64] [--devnet-pages 64,16] [--out FILE]

One epoch per host count, with the devnet benchmark's shape (``bench/chain_devnet.py``: 8
validators, S = 2, k = 1, r = 2, every host and validator honest, every phase closed by its last
message), on a contract instantiated with ``settle_page`` = ``--page``:

* **embedded chain** (every host count): each message that does settlement work — the reveal
  that completes ``reveal`` (it starts the close and runs its first page), every ``advance`` that
  runs a later page (seed, assign), the verdict opening that completes ``verdict_reveal`` (it
  starts the round's close and runs its first page), and every later page (salts, decide, then
  finalize's outcomes, slashes, rewards; each labelled with the stage it began in, a page may
  run on into the next stage) — with its wasm fuel and storage traffic,
  and the Cosmos SDK gas estimated from them with the model of ``bench/embedded_chain.py``
  (wasmd's KV and wasm constants, transaction overhead and bank sends calibrated on the devnet);
  ``--one-shot-hosts`` repeats the epoch with one page holding everything (the close in one
  transaction, as before paging) for comparison;
* **report pages** (embedded chain, every host count): after finalize, the operator's ``report``
  read in pages of ``REPORT_PAGE`` units, the largest page's estimated SDK gas and bytes
  (``report_pages``);
* **devnet** (``--devnet-hosts``, each with every page size of ``--devnet-pages``): the same
  epoch on a local injectived node, the gas each of those messages used, against the estimate of
  the same message on the embedded chain (the calibration check), and whether the largest fits
  the block gas limit read from the node. ``--devnet-hosts ''`` skips the devnet.

Prints one JSON object (``--out`` also writes it to a file).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from chain_devnet import Capture, Run, digest, key, opening, secret, trap_opening
from embedded_chain import INSTANCE_COST, INSTRUCTIONS_PER_SDK_GAS, Cost, cost_of, measured

import chain.embedded.vm as embedded_vm
from chain.cosmos import CosmosBackend, CosmosChain
from chain.devnet import Devnet, DevnetPorts, GenesisAccount
from chain.embedded import EmbeddedChain, deploy_embedded
from chain.embedded.backend import EmbeddedBackend
from chain.embedded.errors import VmError
from chain.ledger import Ledger, LedgerError, TxResult, instantiate_msg
from chain.wasm_artifact import load_contract_wasm
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.messages import BeaconJoin, BeaconReveal, Commitment, Objection, Ready, VerdictCommit
from protocol.rules.beacon import beacon_commit
from protocol.rules.limits import REPORT_PAGE
from protocol.rules.spec import RunSpec

# The minimum stakes below are at least each role's part of the default --reward (the spec rule).
HOST_STAKE = 5 * 10**9
VALIDATOR_STAKE = 2 * 10**9
THETA0 = hashlib.sha256(b"theta_0").hexdigest()
VALIDATORS = 8


def bench_spec(hosts: int, blocks: int, reward: int) -> RunSpec:
    """``bench/chain_devnet.py``'s shape with room for ``hosts`` hosts and ``blocks``-long phases."""
    return RunSpec.model_validate({
        "name": "bench-settle-paging", "model": {},
        "data": {"corpus": "bench", "dataset_hash": "0" * 64, "seq_len": 16},
        "train": {"inner_steps": 4, "segment_steps": 2, "batch_size": 2, "lr": "0.001"},
        "verification": {"enabled": True, "challenges_k": 1, "validators_r": 2},
        "economics": {"denom": DENOM, "min_host_stake": str(10**9), "min_validator_stake": str(5 * 10**8),
                      "unbonding_epochs": 2, "reward_per_epoch": str(reward)},
        "phases": {"join_blocks": blocks, "train_blocks": blocks, "reveal_blocks": blocks, "verify_blocks": blocks,
                   "verdict_reveal_blocks": blocks, "propose_blocks": blocks, "min_hosts": 1, "min_validators": 1,
                   "max_hosts": max(hosts, 1), "max_validators": 32},
    })


Send = Callable[[Callable[[Ledger], object]], None]
Measure = Callable[[Callable[[], TxResult]], dict[str, Any]]


def play(ledger: Ledger, send: Send, measure: Measure, hosts: Sequence[str], validators: Sequence[str],
         disputed: bool = False) -> dict:
    """One epoch; every message that does settlement work is measured. Returns them by kind:
    ``reveal_close`` (the reveal that completes the phase), ``reveal_pages``, ``objection_close``
    (the ``ready`` that completes ``objection``) and ``objection_pages``, ``round_close`` (the
    opening that completes the last verdict round) and ``finalize_pages`` (the round's close and
    finalize), each page with the stage it began in.

    Honest (``disputed`` False): every seat passes, nothing is disputed. ``disputed``: the new
    escalation at its largest — every seat fails every challenge and objects, so every challenge
    goes to the final vote of all validators (``dispute``, ``dispute_reveal``), every host is
    invalid and finalize pays the catcher shares of every validator."""
    e = ledger.epoch().epoch
    names = [*hosts, *validators]
    send(lambda L: [L.bond(key(n), "host", "http://127.0.0.1:8700", HOST_STAKE) for n in hosts]
         + [L.bond(key(n), "validator", "http://127.0.0.1:8701", VALIDATOR_STAKE) for n in validators])
    send(lambda L: [L.fund_rewards(key("funder"), 10**13)])
    send(lambda L: [L.join(key(n), BeaconJoin(epoch=e, beacon_commit=beacon_commit(
        key(n).address(), e, secret(n, e)).hex())) for n in names])
    assert ledger.epoch(e).phase == "train", ledger.epoch(e)
    send(lambda L: [L.commit(key(n), Commitment(
        epoch=e, checkpoint_root=digest(f"root:{n}"), delta_hash=digest(f"delta:{n}"), loss_digest=digest(f"loss:{n}"),
        segments=2, train_loss_micro=2_500_000), trap_opening(n, e).commitment(key(n).address())) for n in hosts])
    assert ledger.epoch(e).phase == "reveal", ledger.epoch(e)
    send(lambda L: [L.reveal(key(n), BeaconReveal(epoch=e, secret=secret(n, e).hex())) for n in names[:-1]])
    last = names[-1]
    out: dict[str, Any] = {"reveal_close": measure(lambda: ledger.reveal(key(last), BeaconReveal(
        epoch=e, secret=secret(last, e).hex())))}
    out["reveal_pages"] = pages(ledger, measure)
    assert ledger.epoch(e).phase == "verify", ledger.epoch(e)
    out["reads_in_verify"] = reads(ledger, e, hosts[0], validators[0])
    verdict = "fail" if disputed else "pass"
    votes = [(v, c) for v in validators for c in ledger.challenges(e, key(v).address())]
    send(lambda L: [L.commit_verdict(key(v), VerdictCommit(epoch=e, host=c.host, segment=c.segment, commitment=opening(
        v, c, verdict).commitment(key(v).address()))) for v, c in votes])
    assert ledger.epoch(e).phase == "objection", ledger.epoch(e)
    send(lambda L: [L.reveal_traps(key(n), trap_opening(n, e)) for n in hosts])
    seated = sorted({v for v, _ in votes})

    def ready(v: str) -> list[Ready]:
        mine = sorted((c.host, c.segment) for w, c in votes if w == v) if disputed else []
        return Ready.pages(e, [Objection(host=h, segment=g) for h, g in mine])

    # A validator's pages one after another (each is simulated on the state its predecessor left):
    # the i-th pages of all validators at once.
    pages_of = {v: ready(v) for v in seated[:-1]}
    for i in range(max((len(p) for p in pages_of.values()), default=0)):
        send(lambda L, i=i: [L.ready(key(v), p[i]) for v, p in pages_of.items() if i < len(p)])
    *full, last_page = ready(seated[-1])
    # A full page (MAX_OBJECTIONS_PER_READY objections) is the largest `ready`; the last page,
    # with fewer, completes the phase.
    out["ready_full"] = [measure(lambda msg=msg: ledger.ready(key(seated[-1]), msg)) for msg in full[:1]]
    for msg in full[1:]:
        send(lambda L, msg=msg: [L.ready(key(seated[-1]), msg)])
    out["objection_close"] = measure(lambda: ledger.ready(key(seated[-1]), last_page))
    out["objection_pages"] = pages(ledger, measure)
    if disputed:
        assert ledger.epoch(e).phase == "dispute", ledger.epoch(e)
        final = [(v, c) for v in validators for c in ledger.challenges(e, key(v).address()) if c.due]
        out["final_votes"] = len(final)
        send(lambda L: [L.commit_verdict(key(v), VerdictCommit(epoch=e, host=c.host, segment=c.segment,
                                                               commitment=opening(v, c, verdict).commitment(
                                                                   key(v).address()))) for v, c in final])
        assert ledger.epoch(e).phase == "dispute_reveal", ledger.epoch(e)
        votes = votes + final
    else:
        assert ledger.epoch(e).phase == "verdict_reveal", ledger.epoch(e)
    send(lambda L: [L.reveal_verdict(key(v), opening(v, c, verdict)) for v, c in votes[:-1]])
    v, c = votes[-1]
    out["round_close"] = measure(lambda: ledger.reveal_verdict(key(v), opening(v, c, verdict)))
    out["finalize_pages"] = pages(ledger, measure)
    info = ledger.epoch(e)
    if disputed:
        assert info.accepted == [] and info.phase in ("closed", "propose"), info
    else:
        assert info.phase == "propose" and len(info.accepted) == len(hosts), info
    out["reads_after_finalize"] = reads(ledger, e, hosts[0], validators[0])
    return out


def reads(ledger: Ledger, e: int, host: str, validator: str) -> dict[str, str]:
    """Whether each read a node or an operator makes answers at this size ("ok", or the refusal:
    a node bounds a smart query's gas, 3,000,000 on injectived by default)."""
    calls: dict[str, Callable[[], object]] = {
        "participant (validator)": lambda: ledger.participant(key(validator).address(), e),
        "participant (host)": lambda: ledger.participant(key(host).address(), e),
        "challenges (validator, paged)": lambda: ledger.challenges(e, key(validator).address()),
        "epoch": lambda: ledger.epoch(e),
        "report": lambda: ledger.report(e),
        "aggregation_inputs (paged)": lambda: ledger.aggregation_inputs(e),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = "ok"
        except LedgerError as exc:
            out[name] = str(exc)[:160]
    return out


_FUEL: list[int] = []  # the fuel of every wasm call while report_pages() listens
_call_entry = embedded_vm.WasmCode.call_entry


def _counted_call_entry(self: embedded_vm.WasmCode, *args: Any, **kwargs: Any) -> tuple[bytes, int]:
    result, gas = _call_entry(self, *args, **kwargs)
    _FUEL.append(gas)
    return result, gas


embedded_vm.WasmCode.call_entry = _counted_call_entry  # type: ignore[method-assign]


def report_pages(ledger: Ledger, e: int) -> dict[str, Any]:
    """The operator's paged ``report`` of epoch ``e`` on the embedded chain, in pages of
    ``REPORT_PAGE`` units: how many, and the largest page's Cosmos SDK gas estimated with
    ``bench/embedded_chain.py``'s model (wasm fuel, storage traffic and the instance; a query pays
    no transaction overhead) against the 3,000,000 a node allows a smart query by default, and its
    answer's bytes; and that ``Ledger.report`` assembles them to every participant."""
    assert isinstance(ledger.backend, EmbeddedBackend)
    chain = ledger.backend.chain
    cache, chain.cache_queries = chain.cache_queries, False  # every page runs the contract
    out: list[dict[str, int]] = []
    start: str | None = None
    try:
        while True:
            cost = Cost()
            _FUEL.clear()
            with measured(cost):
                raw = chain.query_raw(ledger.backend.contract_address,
                                      {"report": {"epoch": e, "start_after": start, "limit": REPORT_PAGE}})
            (fuel,) = _FUEL
            out.append({"sdk_gas": INSTANCE_COST + round(fuel / INSTRUCTIONS_PER_SDK_GAS) + cost.traffic.kv_gas(),
                        "bytes": len(raw), "records_read": cost.traffic.reads + cost.traffic.iterated})
            start = json.loads(raw).get("next")
            if start is None:
                break
    finally:
        chain.cache_queries = cache
    whole = ledger.report(e)
    return {"pages": len(out), "participants": len(whole.hosts) + len(whole.validators),
            "challenges": len(whole.challenges), "votes": sum(len(c.votes) for c in whole.challenges),
            "max_page_sdk_gas": max(p["sdk_gas"] for p in out), "max_page_bytes": max(p["bytes"] for p in out),
            "max_page_records_read": max(p["records_read"] for p in out),
            "all_pages_sdk_gas": sum(p["sdk_gas"] for p in out), "all_pages_bytes": sum(p["bytes"] for p in out)}


def participant_gas(ledger: Ledger, e: int, validator: str) -> dict[str, int]:
    """A validator's ``participant`` query on the embedded chain: its Cosmos SDK gas estimated as
    ``report_pages`` does (against a node's default 3,000,000), and the records it read."""
    assert isinstance(ledger.backend, EmbeddedBackend)
    chain = ledger.backend.chain
    cache, chain.cache_queries = chain.cache_queries, False  # the query runs the contract
    try:
        cost = Cost()
        _FUEL.clear()
        with measured(cost):
            chain.query_raw(ledger.backend.contract_address,
                            {"participant": {"address": key(validator).address(), "epoch": e}})
        (fuel,) = _FUEL
    finally:
        chain.cache_queries = cache
    return {"sdk_gas": INSTANCE_COST + round(fuel / INSTRUCTIONS_PER_SDK_GAS) + cost.traffic.kv_gas(),
            "records_read": cost.traffic.reads + cost.traffic.iterated}


def pages(ledger: Ledger, measure: Measure) -> list[dict[str, Any]]:
    """``advance`` until the close in progress is done, each measured with the stage it ran in."""
    out = []
    operator = key("operator")
    while (stage := ledger.epoch().closing) is not None:
        out.append({"stage": stage, **measure(lambda: ledger.advance(operator))})
        assert len(out) < 10_000
    return out


def summary(run: dict[str, Any], gas_key: str) -> dict[str, Any]:
    """The largest gas of each kind of message, and how many pages each close took."""
    def top(items: list[dict[str, Any]]) -> int:
        return max((int(i[gas_key]) for i in items), default=0)

    by_stage: dict[str, int] = {}
    for p in [*run["reveal_pages"], *run["objection_pages"], *run["finalize_pages"]]:
        by_stage[p["stage"]] = max(by_stage.get(p["stage"], 0), int(p[gas_key]))
    every = [run["reveal_close"], run["objection_close"], run["round_close"], *run["reveal_pages"],
             *run["objection_pages"], *run["finalize_pages"], *run.get("ready_full", [])]
    return {"reveal_close": int(run["reveal_close"][gas_key]), "reveal_pages": len(run["reveal_pages"]),
            "objection_close": int(run["objection_close"][gas_key]), "objection_pages": len(run["objection_pages"]),
            "ready_full": top(run.get("ready_full", [])),
            "round_close": int(run["round_close"][gas_key]), "finalize_pages": len(run["finalize_pages"]),
            "max_page_by_stage": by_stage, "max_message": top(every)}


def embedded(hosts: int, page: int | None, reward: int, disputed: bool = False) -> dict[str, Any]:
    host_names = [f"host{i}" for i in range(hosts)]
    validator_names = [f"validator{i}" for i in range(VALIDATORS)]
    accounts = [key(n).address() for n in ["operator", "funder", *host_names, *validator_names]]
    chain = EmbeddedChain(genesis_balances={a: {DENOM: GENESIS_BALANCE} for a in accounts}, block_txs=1_000_000)
    operator = key("operator")
    ledger = deploy_embedded(chain, operator, bench_spec(hosts, 50, reward), THETA0, operator.address(),
                             settle_page=page)

    def send(plan: Callable[[Ledger], object]) -> None:
        plan(ledger)

    def measure(action: Callable[[], TxResult]) -> dict[str, Any]:
        return cost_of(None, action).estimate()  # cost_of does not use its env

    t0 = time.perf_counter()
    run = play(ledger, send, measure, host_names, validator_names, disputed)
    wall_s = round(time.perf_counter() - t0, 1)
    return {"hosts": hosts, "validators": VALIDATORS, "settle_page": page, "disputed": disputed,
            "wall_s": wall_s, "estimated_sdk_gas": summary(run, "sdk_gas_estimate"),
            "report_pages": report_pages(ledger, 0),
            "participant_validator": participant_gas(ledger, 0, validator_names[0]), "messages": run}


def devnet(chain: CosmosChain, code_id: int, hosts: int, page: int, reward: int,
           disputed: bool = False, blocks_per_host: int = 4, chunk: int = 0) -> dict[str, Any]:
    host_names = [f"host{i}" for i in range(hosts)]
    validator_names = [f"validator{i}" for i in range(VALIDATORS)]
    operator = key("operator")
    # Windows long enough for every message of a phase on a loaded 2-core machine (4 verdicts a
    # host; a disputed epoch's final round with the re-votes needs more under load: raise
    # blocks_per_host); a phase closes early once everyone acted.
    window = max(400, blocks_per_host * hosts)
    msg = instantiate_msg(bench_spec(hosts, window, reward), THETA0, operator.address(), settle_page=page)
    backend = CosmosBackend.deploy(chain, operator, msg, code_id=code_id)
    run = Run.__new__(Run)  # Run's pipelining over this deployment (its own constructor deploys)
    run.chain, run.backend, run.ledger = chain, backend, Ledger(backend)
    run.capture = Capture(backend)
    run.planned = Ledger(run.capture)
    retries = [0]

    def send(plan: Callable[[Ledger], object]) -> None:
        def calls(ledger: Ledger) -> None:
            plan(ledger)

        retries[0] += run.parallel(calls, chunk)[1]

    def measure(action: Callable[[], TxResult]) -> dict[str, Any]:
        return {"gas_used": action().gas_used}

    t0 = time.perf_counter()
    result = play(run.ledger, send, measure, host_names, validator_names, disputed)
    block = chain.block_max_gas()
    s = summary(result, "gas_used")
    return {"hosts": hosts, "validators": VALIDATORS, "settle_page": page, "disputed": disputed,
            "phase_blocks": window, "wall_s": round(time.perf_counter() - t0, 1),
            "out_of_gas_resends": retries[0], "gas_used": s, "block_max_gas": block,
            "fits_block": block < 0 or s["max_message"] <= block,
            "reads": {"verify": result["reads_in_verify"], "after_finalize": result["reads_after_finalize"]},
            "messages": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="64,256,1024")
    parser.add_argument("--page", type=int, default=64)
    parser.add_argument("--one-shot-hosts", default="64,256", help="host counts also settled in one transaction")
    parser.add_argument("--devnet-hosts", default="64")
    parser.add_argument("--devnet-pages", default="64,16")
    parser.add_argument("--disputed-hosts", default="64,1024",
                        help="host counts also played with every challenge disputed (the final vote of all "
                             "validators on each; embedded, and on the devnet for --devnet-hosts among them)")
    parser.add_argument("--devnet-disputed-hosts", default=None,
                        help="host counts played disputed on the devnet (default: those of --disputed-hosts)")
    parser.add_argument("--devnet-no-honest", action="store_true",
                        help="skip the honest epoch on the devnet where the disputed one is played")
    parser.add_argument("--devnet-blocks-per-host", type=int, default=4,
                        help="each phase's window on the devnet: this many blocks a host, at least 400")
    parser.add_argument("--devnet-chunk", type=int, default=0,
                        help="send at most this many transactions before waiting for them (0: a whole phase)")
    parser.add_argument("--block-time", default="100ms")
    parser.add_argument("--devnet-query-gas", type=int, default=None,
                        help="the devnet node's [wasm] query_gas_limit (default: the launcher's raised "
                             "limit; 3000000 is wasmd's own default, what an unraised node answers within)")
    parser.add_argument("--reward", type=int, default=10**9,
                        help="reward_per_epoch: large enough that every accepted host is paid (one bank send each)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    ints = lambda text: [int(x) for x in text.split(",") if x]  # noqa: E731 (a one-line parser)
    report: dict[str, Any] = {"machine": platform.processor() or platform.machine(), "validators": VALIDATORS,
                              "embedded": [], "disputed": [], "one_shot": [], "devnet": []}
    for h in ints(args.hosts):
        report["embedded"].append(embedded(h, args.page, args.reward))
        print(json.dumps({k: v for k, v in report["embedded"][-1].items() if k != "messages"}), flush=True)
    for h in ints(args.disputed_hosts):
        report["disputed"].append(embedded(h, args.page, args.reward, disputed=True))
        print(json.dumps({k: v for k, v in report["disputed"][-1].items() if k != "messages"}), flush=True)
    for h in ints(args.one_shot_hosts):
        try:
            report["one_shot"].append(embedded(h, 1_000_000, args.reward))
        except VmError as exc:  # the whole close in one wasm call can exceed the VM's limits
            report["one_shot"].append({"hosts": h, "settle_page": 1_000_000, "error": str(exc)})
        print(json.dumps({k: v for k, v in report["one_shot"][-1].items() if k != "messages"}), flush=True)
    devnet_hosts = ints(args.devnet_hosts)
    devnet_disputed = ints(args.disputed_hosts if args.devnet_disputed_hosts is None else args.devnet_disputed_hosts)
    if devnet_hosts:
        names = ["operator", "funder", *(f"host{i}" for i in range(max(devnet_hosts))),
                 *(f"validator{i}" for i in range(VALIDATORS))]
        accounts = [GenesisAccount.of_key(n, key(n), GENESIS_BALANCE) for n in names]
        with tempfile.TemporaryDirectory(prefix="veriloco-bench-paging-") as home:
            limit = {} if args.devnet_query_gas is None else {"query_gas_limit": args.devnet_query_gas}
            net = Devnet(Path(home) / "node", ports=DevnetPorts.free(), accounts=accounts, block_time=args.block_time,
                         **limit)
            net.up(tied=True)  # a killed benchmark takes its node with it
            try:
                with net.connect() as chain:
                    code_id, _ = chain.store_code(key("operator"), load_contract_wasm(), reuse=False)
                    for h in devnet_hosts:
                        for page in ints(args.devnet_pages):
                            modes = ((True,) if args.devnet_no_honest else (False, True)) if h in devnet_disputed \
                                else (False,)
                            for disputed in modes:
                                report["devnet"].append(devnet(chain, code_id, h, page, args.reward, disputed,
                                                              args.devnet_blocks_per_host, args.devnet_chunk))
                                print(json.dumps({k: v for k, v in report["devnet"][-1].items()
                                                  if k != "messages"}), flush=True)
            finally:
                net.stop()
    text = json.dumps(report, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(json.dumps({k: [{x: y for x, y in r.items() if x != "messages"} for r in v] if isinstance(v, list) else v
                      for k, v in report.items()}, indent=1))


if __name__ == "__main__":
    main()
