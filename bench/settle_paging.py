"""Gas per message of the closes that run page by page (closing ``reveal``, closing a verdict
round, finalize) at 64, 256 and 1,024 hosts.

    PYTHONPATH=. .venv/bin/python bench/settle_paging.py [--hosts 64,256,1024] [--page 64]
        [--one-shot-hosts 64,256] [--disputed-hosts 64,1024] [--gain-hosts 64] [--devnet-hosts 64]
        [--devnet-pages 64,16] [--devnet-query-gas 3000000] [--out FILE]

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
* **disputed and gain-disputed epochs** (``--disputed-hosts``, ``--gain-hosts``; :func:`play`'s
  ``scenario``): every challenge objected to and decided by the final vote of all validators; or
  every host's last segment a gain dispute (a round-0 seat opens another probe gain, every seat
  re-votes and every other validator votes with the dispute windows' gain too). Every epoch also
  records each verdict message's gas by kind (round 0, re-vote, final vote; ``by_kind``), and on
  the embedded chain a validator's query gas (``challenges`` pages, ``participant``, ``epoch``) in
  ``verify`` and ``dispute``;
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
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench.*

import chain.embedded.vm as embedded_vm
from bench.chain_devnet import Capture, Run, digest, key, opening, secret, trap_opening
from bench.embedded_chain import INSTANCE_COST, INSTRUCTIONS_PER_SDK_GAS, Cost, cost_of, measured
from chain.cosmos import CosmosBackend, CosmosChain
from chain.devnet import Devnet, DevnetPorts, GenesisAccount
from chain.embedded import EmbeddedChain, deploy_embedded
from chain.embedded.backend import EmbeddedBackend
from chain.embedded.errors import VmError
from chain.ledger import Ledger, LedgerError, TxResult, instantiate_msg
from chain.wasm_artifact import load_contract_wasm
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import PrivateKey
from protocol.messages import BeaconJoin, BeaconReveal, Commitment, Objection, Ready, VerdictCommit, VerdictOpening
from protocol.rules.beacon import beacon_commit
from protocol.rules.limits import CHALLENGES_PAGE, REPORT_PAGE
from protocol.rules.spec import RunSpec
from protocol.views import REVOTE_ROUND

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


Scenario = Literal["honest", "disputed", "gain"]
# What a plan of Ledger calls is, and how it is sent: ``send(plan)``, or ``send(plan, kind)`` to record
# each of its transactions' gas under ``kind`` (a list per kind, in the order the plan made them).
Plan = Callable[[Ledger], object]
Send = Callable[..., None]
Measure = Callable[[Callable[[], TxResult]], dict[str, Any]]

PROBE_GAIN = 25_000
"""The probe gain every honest vote on a host's last segment carries (``chain_devnet.opening``)."""
LIED_GAIN = PROBE_GAIN - 7
"""A gain liar's round-0 gain (``scenario`` "gain"): another number, so the opened gains differ."""
DISPUTE_GAIN = 24_310
"""The gain on the host's dispute windows that every vote deciding a gain dispute carries."""


def verdict_opening(v: str, c: Any, outcome: str, scenario: Scenario) -> VerdictOpening:
    """``v``'s verdict on challenge ``c`` (``chain_devnet.opening``); in a gain dispute's deciding
    votes (re-votes and final votes) with the dispute windows' gain too; with ``scenario`` "gain"
    the lowest-sorted round-0 seat of a host's last segment lies about the main gain."""
    o = opening(v, c, outcome)
    if o.gain_micro is None:
        return o
    if c.gain_dispute and c.round != 0:
        return o.model_copy(update={"dispute_gain_micro": DISPUTE_GAIN})
    if scenario == "gain" and c.round == 0 and key(v).address() == min(c.validators):
        return o.model_copy(update={"gain_micro": LIED_GAIN})
    return o


def kind_of(c: Any, what: str) -> str:
    """The kind a verdict message on challenge ``c`` is recorded under: ``what`` (commit_verdict,
    reveal_verdict), its round (a round-0 seat, a re-vote, a final vote) and, in round 0, whether
    it is on the host's last segment (with the probe on, that one carries the gain)."""
    if c.round == REVOTE_ROUND:
        return f"{what} re-vote" + (" (gain dispute)" if c.gain_dispute else "")
    if c.round != 0:
        return f"{what} final vote" + (" (gain dispute)" if c.gain_dispute else "")
    return f"{what} round 0, " + ("last segment" if c.segment == c.segments - 1 else "other segment")


def play(ledger: Ledger, send: Send, measure: Measure, hosts: Sequence[str], validators: Sequence[str],
         scenario: Scenario = "honest", query_gas: Callable[[str], dict[str, Any]] | None = None) -> dict:
    """One epoch; every message that does settlement work is measured. Returns them by kind:
    ``reveal_close`` (the reveal that completes the phase), ``reveal_pages``, ``objection_close``
    (the ``ready`` that completes ``objection``) and ``objection_pages``, ``round_close`` (the
    opening that completes the last verdict round) and ``finalize_pages`` (the round's close and
    finalize), each page with the stage it began in; ``by_kind``: every verdict message's gas by
    kind (:func:`kind_of`) and every ``ready``'s.

    ``scenario`` "honest": every seat passes, nothing is disputed. "disputed": the escalation at
    its largest — every seat fails every challenge and objects, so every challenge goes to the
    final vote of all validators (``dispute``, ``dispute_reveal``), every host is invalid and
    finalize pays the catcher shares of every validator. "gain": every seat passes, but on every
    host's last segment one round-0 seat (the lowest-sorted) opens another probe gain, so every
    host's last segment is a gain dispute: the opening that completes ``verdict_reveal`` and its
    close (``verdict_close`` and ``verdict_pages``), then in ``dispute`` every round-0 seat commits
    a re-vote and every other validator a final vote, each with both gains, opened in
    ``dispute_reveal``, whose last opening (``round_close``) and close decide the gains and
    finalize. ``query_gas`` (embedded chain only): called with the phase name where a validator's
    reads are largest (``verify``, and ``dispute`` when there is one), its answer kept under
    ``queries``."""
    disputed = scenario == "disputed"
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
    out["queries"] = {"verify": query_gas("verify")} if query_gas is not None else {}
    verdict = "fail" if disputed else "pass"
    votes = [(v, c) for v in validators for c in ledger.challenges(e, key(v).address())]
    out["by_kind"] = {}

    def commit_all(chosen: list[tuple[str, Any]]) -> None:
        """Commit the verdicts of ``chosen``, each kind in one plan (its gas recorded apart)."""
        for kind in sorted({kind_of(c, "commit_verdict") for _, c in chosen}):
            mine = [(v, c) for v, c in chosen if kind_of(c, "commit_verdict") == kind]
            send(lambda L, mine=mine: [L.commit_verdict(key(v), VerdictCommit(
                epoch=e, host=c.host, segment=c.segment,
                commitment=verdict_opening(v, c, verdict, scenario).commitment(key(v).address()))) for v, c in mine],
                kind, out["by_kind"])

    def open_round(chosen: list[tuple[str, Any]]) -> dict[str, Any]:
        """Open the verdicts of ``chosen``: round-0 openings first, then final votes, then re-votes
        (a seat opens its round-0 commitment before its re-vote), each kind in one plan; the last
        one is measured apart (it completes the round and starts its close)."""
        ordered = sorted(chosen, key=lambda vc: 0 if vc[1].round == 0 else 2 if vc[1].round == REVOTE_ROUND else 1)
        *rest, (v, c) = ordered
        for kind in dict.fromkeys(kind_of(c, "reveal_verdict") for _, c in rest):
            mine = [(v, c) for v, c in rest if kind_of(c, "reveal_verdict") == kind]
            send(lambda L, mine=mine: [L.reveal_verdict(key(v), verdict_opening(v, c, verdict, scenario))
                                       for v, c in mine], kind, out["by_kind"])
        return measure(lambda: ledger.reveal_verdict(key(v), verdict_opening(v, c, verdict, scenario)))

    commit_all(votes)
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
        send(lambda L, i=i: [L.ready(key(v), p[i]) for v, p in pages_of.items() if i < len(p)], "ready",
             out["by_kind"])
    *full, last_page = ready(seated[-1])
    # A full page (MAX_OBJECTIONS_PER_READY objections) is the largest `ready`; the last page,
    # with fewer, completes the phase.
    out["ready_full"] = [measure(partial(ledger.ready, key(seated[-1]), msg)) for msg in full[:1]]
    for msg in full[1:]:
        send(lambda L, msg=msg: [L.ready(key(seated[-1]), msg)])
    out["objection_close"] = measure(lambda: ledger.ready(key(seated[-1]), last_page))
    out["objection_pages"] = pages(ledger, measure)

    def final_round() -> list[tuple[str, Any]]:
        """``dispute``: every vote due (final votes, re-votes) committed and returned; ``dispute_reveal`` follows."""
        assert ledger.epoch(e).phase == "dispute", ledger.epoch(e)
        out["reads_in_dispute"] = reads(ledger, e, hosts[0], validators[0])
        if query_gas is not None:
            out["queries"]["dispute"] = query_gas("dispute")
        final = [(v, c) for v in validators for c in ledger.challenges(e, key(v).address()) if c.due]
        out["final_votes"] = sum(1 for _, c in final if c.round != REVOTE_ROUND)
        out["re_votes"] = len(final) - out["final_votes"]
        commit_all(final)
        assert ledger.epoch(e).phase == "dispute_reveal", ledger.epoch(e)
        return final

    if disputed:
        votes = votes + final_round()  # the round-0 seats open their verify commitments too
    else:
        assert ledger.epoch(e).phase == "verdict_reveal", ledger.epoch(e)
    round0 = votes
    if scenario == "gain":
        # Every round-0 pass opened; the last one's close finds the gain disputes and opens `dispute`.
        out["verdict_close"] = open_round(votes)
        out["verdict_pages"] = pages(ledger, measure)
        disputes = [c for c in ledger.challenges(e, key(validators[0]).address()) if c.gain_dispute]
        out["gain_disputes"] = len({c.host for c in disputes})
        votes = final_round()
    out["round_close"] = open_round(votes)
    out["finalize_pages"] = pages(ledger, measure)
    info = ledger.epoch(e)
    if disputed:
        assert info.accepted == [] and info.phase in ("closed", "propose"), info
    else:
        assert info.phase == "propose" and len(info.accepted) == len(hosts), info
    if scenario == "gain":
        report = ledger.report(e)
        segments = round0[0][1].segments
        decided = {(c.outcome, c.gain_micro) for c in report.challenges if c.segment == segments - 1}
        # Every host's last segment was a gain dispute, decided on the honest gains; the liars (and
        # only they) are `wrong`.
        assert out["gain_disputes"] == len(hosts) and decided == {("pass", PROBE_GAIN)}, (out["gain_disputes"], decided)
        liars = {min(c.validators) for _, c in round0 if c.segment == segments - 1}
        wrong = {v.address for v in report.validators if v.outcome == "wrong"}
        assert wrong == liars, (wrong, liars)
        out["wrong_validators"] = len(wrong)
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


# mypy forbids assigning to a method; this monkeypatch is the point (every wasm call counted).
embedded_vm.WasmCode.call_entry = _counted_call_entry  # type: ignore[method-assign]


def query_cost(ledger: Ledger, msg: dict[str, Any]) -> tuple[dict[str, int], Any]:
    """One smart query on the embedded chain, run by the contract (no cache): its Cosmos SDK gas
    estimated with ``bench/embedded_chain.py``'s model (wasm fuel, storage traffic and the
    instance; a query pays no transaction overhead), to hold against the 3,000,000 a node allows a
    smart query by default, its answer's bytes and the records it read; and the answer."""
    assert isinstance(ledger.backend, EmbeddedBackend)
    chain = ledger.backend.chain
    cache, chain.cache_queries = chain.cache_queries, False
    try:
        cost = Cost()
        _FUEL.clear()
        with measured(cost):
            raw = chain.query_raw(ledger.backend.contract_address, msg)
        (fuel,) = _FUEL
    finally:
        chain.cache_queries = cache
    return ({"sdk_gas": INSTANCE_COST + round(fuel / INSTRUCTIONS_PER_SDK_GAS) + cost.traffic.kv_gas(),
             "bytes": len(raw), "records_read": cost.traffic.reads + cost.traffic.iterated}, json.loads(raw))


def report_pages(ledger: Ledger, e: int) -> dict[str, Any]:
    """The operator's paged ``report`` of epoch ``e`` on the embedded chain, in pages of
    ``REPORT_PAGE`` units: how many, and the largest page's Cosmos SDK gas (:func:`query_cost`)
    and bytes; and that ``Ledger.report`` assembles them to every participant."""
    out: list[dict[str, int]] = []
    start: str | None = None
    segment: int | None = None
    while True:
        msg: dict[str, Any] = {"epoch": e, "start_after": start, "limit": REPORT_PAGE}
        if segment is not None:
            msg["start_segment"] = segment  # a host split over pages (contract 0.3.3)
        cost, answer = query_cost(ledger, {"report": msg})
        out.append(cost)
        start, segment = answer.get("next"), answer.get("next_segment")
        if start is None:
            break
    whole = ledger.report(e)
    return {"pages": len(out), "participants": len(whole.hosts) + len(whole.validators),
            "challenges": len(whole.challenges), "votes": sum(len(c.votes) for c in whole.challenges),
            "max_page_sdk_gas": max(p["sdk_gas"] for p in out), "max_page_bytes": max(p["bytes"] for p in out),
            "max_page_records_read": max(p["records_read"] for p in out),
            "all_pages_sdk_gas": sum(p["sdk_gas"] for p in out), "all_pages_bytes": sum(p["bytes"] for p in out)}


def participant_gas(ledger: Ledger, e: int, validator: str) -> dict[str, int]:
    """A validator's ``participant`` query on the embedded chain (:func:`query_cost`)."""
    cost, _ = query_cost(ledger, {"participant": {"address": key(validator).address(), "epoch": e}})
    return {"sdk_gas": cost["sdk_gas"], "records_read": cost["records_read"]}


def challenges_gas(ledger: Ledger, e: int, validators: Sequence[str]) -> dict[str, int]:
    """Every page of every validator's ``challenges`` query (pages of ``CHALLENGES_PAGE`` hosts,
    as ``Ledger.challenges`` reads them) on the embedded chain, now: the largest page's SDK gas
    (:func:`query_cost`), bytes and entries, and the most entries one validator reads."""
    top = {"sdk_gas": 0, "bytes": 0, "entries": 0, "pages": 0, "entries_one_validator": 0}
    for v in validators:
        start: str | None = None
        entries = 0
        while True:
            cost, answer = query_cost(ledger, {"challenges": {"epoch": e, "validator": key(v).address(),
                                                              "start_after": start, "limit": CHALLENGES_PAGE}})
            n = len(answer["challenges"])
            entries += n
            top = {"sdk_gas": max(top["sdk_gas"], cost["sdk_gas"]), "bytes": max(top["bytes"], cost["bytes"]),
                   "entries": max(top["entries"], n), "pages": top["pages"] + 1,
                   "entries_one_validator": max(top["entries_one_validator"], entries)}
            start = answer.get("next")
            if start is None:
                break
    return top


def pages(ledger: Ledger, measure: Measure) -> list[dict[str, Any]]:
    """``advance`` until the close in progress is done, each measured with the stage it ran in."""
    out = []
    operator = key("operator")
    while (stage := ledger.epoch().closing) is not None:
        out.append({"stage": stage, **measure(lambda: ledger.advance(operator))})
        assert len(out) < 10_000
    return out


def summary(run: dict[str, Any], gas_key: str) -> dict[str, Any]:
    """The largest gas of each kind of message, and how many pages each close took; ``by_kind``:
    every verdict message and ``ready`` of the epoch by kind (:func:`kind_of`: count, median, max);
    ``max_message``: the largest settlement message (a close or a page), ``largest``: the largest
    message of the epoch, whatever its kind, and its kind."""
    def top(items: list[dict[str, Any]]) -> int:
        return max((int(i[gas_key]) for i in items), default=0)

    closes = {k: run[k] for k in ("reveal_close", "objection_close", "verdict_close", "round_close") if k in run}
    page_lists = [run[k] for k in ("reveal_pages", "objection_pages", "verdict_pages", "finalize_pages") if k in run]
    by_stage: dict[str, int] = {}
    for p in [q for pages_ in page_lists for q in pages_]:
        by_stage[p["stage"]] = max(by_stage.get(p["stage"], 0), int(p[gas_key]))
    every = [*closes.values(), *(q for pages_ in page_lists for q in pages_), *run.get("ready_full", [])]
    by_kind = {kind: {"n": len(gas), "median": int(statistics.median(gas)), "max": max(gas)}
               for kind, gas in sorted(run.get("by_kind", {}).items()) if gas}
    candidates = {**{k: int(v[gas_key]) for k, v in closes.items()},
                  **{f"advance ({stage} page)": g for stage, g in by_stage.items()},
                  **{k: v["max"] for k, v in by_kind.items()}, "ready (a full page)": top(run.get("ready_full", []))}
    largest = max(candidates, key=lambda k: candidates[k])
    return {"reveal_close": int(run["reveal_close"][gas_key]), "reveal_pages": len(run["reveal_pages"]),
            "objection_close": int(run["objection_close"][gas_key]), "objection_pages": len(run["objection_pages"]),
            "ready_full": top(run.get("ready_full", [])),
            **({"verdict_close": int(run["verdict_close"][gas_key]), "verdict_pages": len(run["verdict_pages"])}
               if "verdict_close" in run else {}),
            "round_close": int(run["round_close"][gas_key]), "finalize_pages": len(run["finalize_pages"]),
            "max_page_by_stage": by_stage, "by_kind": by_kind, "max_message": top(every),
            "largest": {"message": largest, "gas": candidates[largest]}}


class Metered(Capture):
    """A backend that sends every call to the embedded chain and keeps each one's estimated gas
    (``bench/embedded_chain.py``'s model) in ``sink``."""

    def __init__(self, real: EmbeddedBackend, sink: list[int]) -> None:
        super().__init__(real)
        self.sink = sink

    def execute(self, key: PrivateKey, msg: dict[str, Any], funds: int = 0) -> TxResult:
        cost = Cost()
        with measured(cost):
            result = self.real.execute(key, msg, funds)
        cost.fuel = result.gas_used
        cost.bank_sends = sum(1 for event in result.events if event.type == "transfer")
        self.sink.append(int(cost.estimate()["sdk_gas_estimate"]))
        return result


def embedded(hosts: int, page: int | None, reward: int, scenario: Scenario = "honest") -> dict[str, Any]:
    host_names = [f"host{i}" for i in range(hosts)]
    validator_names = [f"validator{i}" for i in range(VALIDATORS)]
    accounts = [key(n).address() for n in ["operator", "funder", *host_names, *validator_names]]
    chain = EmbeddedChain(genesis_balances={a: {DENOM: GENESIS_BALANCE} for a in accounts}, block_txs=1_000_000)
    operator = key("operator")
    ledger = deploy_embedded(chain, operator, bench_spec(hosts, 50, reward), THETA0, operator.address(),
                             settle_page=page)
    assert isinstance(ledger.backend, EmbeddedBackend)
    backend = ledger.backend

    def send(plan: Plan, kind: str | None = None, sink: dict[str, list[int]] | None = None) -> None:
        if kind is None or sink is None:
            plan(ledger)
            return
        plan(Ledger(Metered(backend, sink.setdefault(kind, []))))

    def measure(action: Callable[[], TxResult]) -> dict[str, Any]:
        return cost_of(action).estimate()

    def query_gas(phase: str) -> dict[str, Any]:
        e = ledger.epoch().epoch
        return {"challenges": challenges_gas(ledger, e, validator_names),
                "participant_validator": participant_gas(ledger, e, validator_names[0]),
                "epoch": query_cost(ledger, {"epoch": {"epoch": e}})[0]["sdk_gas"]}

    t0 = time.perf_counter()
    run = play(ledger, send, measure, host_names, validator_names, scenario, query_gas)
    wall_s = round(time.perf_counter() - t0, 1)
    return {"hosts": hosts, "validators": VALIDATORS, "settle_page": page, "scenario": scenario,
            "disputed": scenario == "disputed", "wall_s": wall_s,
            "estimated_sdk_gas": summary(run, "sdk_gas_estimate"), "queries": run["queries"],
            "report_pages": report_pages(ledger, 0),
            "participant_validator": participant_gas(ledger, 0, validator_names[0]), "messages": run}


def devnet(chain: CosmosChain, code_id: int, hosts: int, page: int, reward: int,
           scenario: Scenario = "honest", blocks_per_host: int = 4, chunk: int = 0) -> dict[str, Any]:
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

    def send(plan: Plan, kind: str | None = None, sink: dict[str, list[int]] | None = None) -> None:
        def calls(ledger: Ledger) -> None:
            plan(ledger)

        results, resent = run.parallel(calls, chunk)
        retries[0] += resent
        if kind is not None and sink is not None:
            sink.setdefault(kind, []).extend(r.gas_used for r in results)

    def measure(action: Callable[[], TxResult]) -> dict[str, Any]:
        return {"gas_used": action().gas_used}

    t0 = time.perf_counter()
    result = play(run.ledger, send, measure, host_names, validator_names, scenario)
    block = chain.block_max_gas()
    s = summary(result, "gas_used")
    reads_ = {"verify": result["reads_in_verify"], "after_finalize": result["reads_after_finalize"]}
    if "reads_in_dispute" in result:
        reads_["dispute"] = result["reads_in_dispute"]
    return {"hosts": hosts, "validators": VALIDATORS, "settle_page": page, "scenario": scenario,
            "disputed": scenario == "disputed", "phase_blocks": window, "wall_s": round(time.perf_counter() - t0, 1),
            "out_of_gas_resends": retries[0], "gas_used": s, "block_max_gas": block,
            "fits_block": block < 0 or s["largest"]["gas"] <= block, "reads": reads_, "messages": result}


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
    parser.add_argument("--gain-hosts", default="64",
                        help="host counts also played with a gain dispute on every host's last segment (a "
                             "round-0 seat opens another probe gain; every seat re-votes and every other "
                             "validator votes with both gains; embedded, and on the devnet for --devnet-hosts "
                             "among them)")
    parser.add_argument("--devnet-gain-hosts", default=None,
                        help="host counts played with gain disputes on the devnet (default: those of --gain-hosts)")
    parser.add_argument("--devnet-no-honest", action="store_true",
                        help="skip the honest epoch on the devnet where the disputed or gain one is played")
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
                              "embedded": [], "disputed": [], "gain": [], "one_shot": [], "devnet": []}
    for h in ints(args.hosts):
        report["embedded"].append(embedded(h, args.page, args.reward))
        print(json.dumps({k: v for k, v in report["embedded"][-1].items() if k != "messages"}), flush=True)
    for h in ints(args.disputed_hosts):
        report["disputed"].append(embedded(h, args.page, args.reward, "disputed"))
        print(json.dumps({k: v for k, v in report["disputed"][-1].items() if k != "messages"}), flush=True)
    for h in ints(args.gain_hosts):
        report["gain"].append(embedded(h, args.page, args.reward, "gain"))
        print(json.dumps({k: v for k, v in report["gain"][-1].items() if k != "messages"}), flush=True)
    for h in ints(args.one_shot_hosts):
        try:
            report["one_shot"].append(embedded(h, 1_000_000, args.reward))
        except VmError as exc:  # the whole close in one wasm call can exceed the VM's limits
            report["one_shot"].append({"hosts": h, "settle_page": 1_000_000, "error": str(exc)})
        print(json.dumps({k: v for k, v in report["one_shot"][-1].items() if k != "messages"}), flush=True)
    devnet_hosts = ints(args.devnet_hosts)
    devnet_disputed = ints(args.disputed_hosts if args.devnet_disputed_hosts is None else args.devnet_disputed_hosts)
    devnet_gain = ints(args.gain_hosts if args.devnet_gain_hosts is None else args.devnet_gain_hosts)
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
                            others: list[Scenario] = []
                            if h in devnet_disputed:
                                others.append("disputed")
                            if h in devnet_gain:
                                others.append("gain")
                            modes: list[Scenario] = others if others and args.devnet_no_honest \
                                else ["honest", *others]
                            for scenario in modes:
                                report["devnet"].append(devnet(chain, code_id, h, page, args.reward, scenario,
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
