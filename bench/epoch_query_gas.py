"""The gas of the ``epoch {epoch}`` query at the largest epoch a run spec allows: ``max_hosts`` and
``max_validators`` at ``MAX_PARTICIPANTS`` (1,024 each), every host committed and accepted.

    PYTHONPATH=. .venv/bin/python bench/epoch_query_gas.py [--hosts 1024] [--validators 1024]
        [--page 64] [--commands [--save DIR] [--no-measure] | --disputed] [--out FILE]

``epoch`` lists the epoch's hosts, validators, committed hosts and accepted hosts, so it grows with
the participants and is at its largest after finalize of an epoch where every host is accepted.
One honest epoch is played on the embedded chain with ``bench/settle_paging.py``'s shape (S = 2,
k = 1, r = 2, every seat passes, every phase closed by its last message) but with ``--validators``
validators (all of them join, and ``max_validators`` is raised to that), and ``epoch {epoch}`` is
measured in ``verify`` (no host accepted yet) and after finalize, with ``settle_paging.query_cost``:
the Cosmos SDK gas estimated from the wasm fuel and the storage traffic with the model of
``bench/embedded_chain.py``, against the 3,000,000 a node allows a smart query by default
(wasmd's ``query_gas_limit``). It also records whether each of a node's reads answered after finalize
(``settle_paging.reads``). Each measure also gives the header-only form (``lists: false``, contract
0.3.2 onwards: ``header_only``), which reads no list and so does not grow with the participants.
After finalize the operator commands are measured too (``commands_after_finalize``: as with
``--commands`` below, on that epoch).

``--commands`` (issue 27's operator reads) measures instead what the operator commands ask of the
contract at this size: a run whose epoch 0 is small (two hosts and two validators, played to its
end), epochs 1 to 8 empty (nobody joins: abandoned), and epoch 9 with ``--hosts`` hosts and
``--validators`` validators, every one joined and revealed and every host committed, the reveal
closed (``verify``: the challenges are drawn). Each command (``epoch list``, ``epoch show``,
``run show``, ``report``, ``host status``, one frame of ``epoch watch`` and the dashboard's state
read) runs in this process on the saved network, and every smart query it sends is measured with
``query_cost`` (uncached): the largest per command, the number of queries and their total.
Beside them: the header-only ``epochs`` page of 10 (``lists: false``: epochs 0 to 9), the full
``epochs`` page and ``epoch`` for comparison, and a validator's ``participant`` and ``challenges``
pages. ``--save DIR`` keeps that network (``DIR/network.json``, ``DIR/chain.json``),
``--no-measure`` only builds it (what ``tests/veriloco/test_reads_at_scale.py`` reads).

``--disputed`` measures the ``report`` pages of a fully disputed epoch (``settle_paging.play``'s
"disputed": every challenge goes to the final vote of every validator) with ``--hosts`` hosts and
``--validators`` validators: a page holds at least one participant or challenge, and a host costs
one unit per 16 votes its challenges hold; a host whose challenges bound more than a page is split
over pages a challenge at a time (contract 0.3.3). ``--before WASM`` plays on an older contract,
reads its report, migrates to the committed one and compares (``same_report``).

Prints one JSON object (``--out`` also writes it to a file).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench.*

import chain.embedded.vm as embedded_vm
from bench.chain_devnet import digest, key, secret, trap_opening
from bench.embedded_chain import INSTANCE_COST, INSTRUCTIONS_PER_SDK_GAS, ITER_FLAT, READ_BYTE, Cost, cost_of, measured
from bench.settle_paging import _FUEL, HOST_STAKE, VALIDATOR_STAKE, bench_spec, play, query_cost
from chain.block_clock import BlockClock
from chain.embedded import EmbeddedChain, deploy_embedded
from chain.embedded.backend import EmbeddedBackend
from chain.ledger import Ledger, TxResult
from chain.wasm_artifact import load_contract_wasm
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.messages import BeaconJoin, BeaconReveal, Commitment
from protocol.rules.beacon import beacon_commit
from protocol.rules.limits import CHALLENGES_PAGE, MAX_PARTICIPANTS, REPORT_PAGE
from protocol.rules.spec import RunSpec
from veriloco.connect import ChainSettings, NetworkFile, load_network

REWARD = 10**9
"""The epoch's reward (``settle_paging``'s default ``--reward``)."""
QUERY_GAS_LIMIT = 3_000_000
"""wasmd's default smart-query gas limit (``[wasm] query_gas_limit``)."""


def spec_for(hosts: int, validators: int, reward: int) -> RunSpec:
    """``settle_paging.bench_spec`` with room for ``validators`` validators."""
    body = bench_spec(hosts, 50, reward).model_dump(mode="json")
    body["phases"]["max_validators"] = validators
    return RunSpec.model_validate(body)


def epoch_gas(ledger: Ledger, e: int) -> dict[str, Any]:
    """``epoch {epoch: e}``'s estimated SDK gas, answer bytes and records read, with the lengths of
    the lists it answers; and the same of ``epoch {epoch: e, lists: false}`` (checked to be the
    answer without its lists)."""
    cost, answer = query_cost(ledger, {"epoch": {"epoch": e}})
    lists = {name: len(answer[name]) for name in ("hosts", "validators", "committed", "accepted")}
    header_cost, header = query_cost(ledger, {"epoch": {"epoch": e, "lists": False}})
    assert header == {k: v for k, v in answer.items() if k not in lists}, "the header form is not the answer's header"
    return {**cost, **lists, "phase": answer["phase"], "of_limit": round(cost["sdk_gas"] / QUERY_GAS_LIMIT, 3),
            "header_only": {**header_cost, "of_limit": round(header_cost["sdk_gas"] / QUERY_GAS_LIMIT, 4)}}


def participant_names(hosts: int, validators: int) -> tuple[list[str], list[str]]:
    """The key names of the run's hosts and validators (:func:`chain_devnet.key` of each)."""
    return [f"host{i}" for i in range(hosts)], [f"validator{i}" for i in range(validators)]


def deployed(hosts: int, validators: int, page: int | None,
             wasm: bytes | None = None) -> tuple[EmbeddedChain, Any, Ledger]:
    """A fresh embedded chain funding ``hosts`` hosts and ``validators`` validators, with the contract
    deployed (``wasm``, an older code, with the operator as admin so it can be migrated; else the
    committed one): (chain, operator key, ledger)."""
    host_names, validator_names = participant_names(hosts, validators)
    accounts = [key(n).address() for n in ["operator", "funder", *host_names, *validator_names]]
    chain = EmbeddedChain(genesis_balances={a: {DENOM: GENESIS_BALANCE} for a in accounts}, block_txs=1_000_000)
    operator = key("operator")
    ledger = deploy_embedded(chain, operator, spec_for(hosts, validators, REWARD), "00" * 32, operator.address(),
                             operator.address() if wasm is not None else None, wasm=wasm, settle_page=page)
    return chain, operator, ledger


def run(hosts: int, validators: int, page: int | None) -> dict[str, Any]:
    chain, _, ledger = deployed(hosts, validators, page)
    host_names, validator_names = participant_names(hosts, validators)

    def send(plan: Any, kind: str | None = None, sink: dict[str, list[int]] | None = None) -> None:
        plan(ledger)

    def measure(action: Callable[[], TxResult]) -> dict[str, Any]:
        return cost_of(action).estimate()

    in_verify: dict[str, Any] = {}

    def query_gas(phase: str) -> dict[str, Any]:
        in_verify[phase] = epoch_gas(ledger, ledger.epoch().epoch)
        return in_verify[phase]

    t0 = time.perf_counter()
    played = play(ledger, send, measure, host_names, validator_names, "honest", query_gas)
    after = epoch_gas(ledger, 0)
    assert after["accepted"] == after["committed"] == after["hosts"] == hosts, after
    assert after["validators"] == validators, after
    with tempfile.TemporaryDirectory() as scratch:
        t1 = time.perf_counter()
        network = save_network(chain, ledger, Path(scratch) / "run")
        commands = commands_gas(network, key(host_names[-1]).address(), Path(scratch) / "home", 0)
        commands_s = round(time.perf_counter() - t1, 1)
    return {"hosts": hosts, "validators": validators, "settle_page": page, "query_gas_limit": QUERY_GAS_LIMIT,
            "epoch_in_verify": in_verify.get("verify"), "epoch_after_finalize": after,
            "reads_after_finalize": played["reads_after_finalize"],
            "commands_after_finalize": commands, "commands_s": commands_s,
            "wall_s": round(time.perf_counter() - t0, 1)}


_NEXT: list[int] = []  # [items, bytes] the iterators handed the contract, while a query is measured
_next_item = embedded_vm.WasmInstance.next_item


def _counted_next_item(self: embedded_vm.WasmInstance, iterator_id: int) -> tuple[bytes, bytes] | None:
    item = _next_item(self, iterator_id)
    if item is not None and _NEXT:
        _NEXT[0] += 1
        _NEXT[1] += len(item[0]) + len(item[1])
    return item


# mypy forbids assigning to a method; this monkeypatch is the point (every iterator step counted).
embedded_vm.WasmInstance.next_item = _counted_next_item  # type: ignore[method-assign]


def query_gas(ledger: Ledger, msg: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """``settle_paging.query_cost`` (``sdk_gas``: every record of an iterated range charged, a
    bound) and beside it ``sdk_gas_next``: the same with only the records the contract's iterators
    handed it charged (wasmd charges an iterator per ``Next``), with their counts; and the answer."""
    assert isinstance(ledger.backend, EmbeddedBackend)
    chain = ledger.backend.chain
    cache, chain.cache_queries = chain.cache_queries, False
    cost = Cost()
    _FUEL.clear()
    _NEXT[:] = [0, 0]
    try:
        with measured(cost):
            raw = chain.query_raw(ledger.backend.contract_address, msg)
        (fuel,) = _FUEL
        nexts, next_bytes = _NEXT
    finally:
        chain.cache_queries = cache
        _NEXT.clear()
    t = cost.traffic
    base = INSTANCE_COST + round(fuel / INSTRUCTIONS_PER_SDK_GAS) + t.kv_gas()
    iterated = t.iterated * ITER_FLAT + t.iterated_bytes * READ_BYTE
    return ({"sdk_gas": base, "sdk_gas_next": base - iterated + nexts * ITER_FLAT + next_bytes * READ_BYTE,
             "bytes": len(raw), "records_read": t.reads + t.iterated, "records_next": t.reads + nexts},
            json.loads(raw))


SMALL = 2
"""Hosts, and validators, of ``--commands``' epoch 0 (played to its end: some hosts accepted)."""
EPOCHS_PAGE_MEASURED = 10
"""The ``epochs`` page measured (the contract's default page)."""


def build_for_commands(hosts: int, validators: int, page: int | None
                       ) -> tuple[EmbeddedChain, Ledger, dict[str, Any]]:
    """``--commands``' run: epoch 0 with ``SMALL`` hosts and validators played to its end (every
    host accepted), empty epochs (nobody joins: abandoned at their join deadline) up to epoch
    ``EPOCHS_PAGE_MEASURED - 1``, and that last epoch with ``hosts`` hosts and ``validators``
    validators, all joined and revealed, every host committed, the reveal closed: in ``verify``.
    Returns the chain, the ledger and what each epoch holds (``expected``: epoch -> counts)."""
    host_names = [f"host{i}" for i in range(hosts)]
    validator_names = [f"validator{i}" for i in range(validators)]
    keys = {n: key(n) for n in ["operator", "funder", *host_names, *validator_names]}
    chain = EmbeddedChain(genesis_balances={k.address(): {DENOM: GENESIS_BALANCE} for k in keys.values()},
                          block_txs=1_000_000)
    operator = keys["operator"]
    body = spec_for(hosts, validators, REWARD).model_dump(mode="json")
    body["phases"]["max_join_extensions"] = 0  # an epoch nobody joins is abandoned at its deadline
    ledger = deploy_embedded(chain, operator, RunSpec.model_validate(body), "00" * 32, operator.address(),
                             settle_page=page)

    def send(plan: Any, kind: str | None = None, sink: dict[str, list[int]] | None = None) -> None:
        plan(ledger)

    def measure(action: Callable[[], TxResult]) -> dict[str, Any]:
        action()
        return {}

    def close_phase() -> None:
        """Let the current phase's deadline pass and close it (its own block is still late)."""
        ledger.wait_for_height(ledger.epoch(lists=False).phase_deadline + 1)
        ledger.advance(operator)
        ledger.settle(operator)

    played = play(ledger, send, measure, host_names[:SMALL], validator_names[:SMALL], "honest")
    assert all(v == "ok" for v in played["reads_after_finalize"].values()), played["reads_after_finalize"]
    close_phase()  # propose: nobody proposes, θ_1 = θ_0
    expected = {0: {"hosts": SMALL, "validators": SMALL, "committed": SMALL, "accepted": SMALL}}
    while (e := ledger.epoch(lists=False).epoch) < EPOCHS_PAGE_MEASURED - 1:
        close_phase()  # join with nobody: abandoned
        assert ledger.epoch(e, lists=False).abandoned, ledger.epoch(e, lists=False)
        expected[e] = {"hosts": 0, "validators": 0, "committed": 0, "accepted": 0}
    e = ledger.epoch(lists=False).epoch
    fresh_hosts, fresh_validators = host_names[SMALL:], validator_names[SMALL:]
    for n in fresh_hosts:
        ledger.bond(keys[n], "host", "http://127.0.0.1:8700", HOST_STAKE)
    for n in fresh_validators:
        ledger.bond(keys[n], "validator", "http://127.0.0.1:8701", VALIDATOR_STAKE)
    names = [*host_names, *validator_names]
    for n in names:
        ledger.join(keys[n], BeaconJoin(epoch=e, beacon_commit=beacon_commit(keys[n].address(), e, secret(n, e)).hex()))
    assert ledger.epoch(e, lists=False).phase == "train", ledger.epoch(e, lists=False)
    for n in host_names:
        ledger.commit(keys[n], Commitment(
            epoch=e, checkpoint_root=digest(f"root:{n}"), delta_hash=digest(f"delta:{n}"),
            loss_digest=digest(f"loss:{n}"), segments=2, train_loss_micro=2_500_000),
            trap_opening(n, e).commitment(keys[n].address()))
    for n in names:
        ledger.reveal(keys[n], BeaconReveal(epoch=e, secret=secret(n, e).hex()))
    ledger.settle(operator)
    assert ledger.epoch(e, lists=False).phase == "verify", ledger.epoch(e, lists=False)
    expected[e] = {"hosts": hosts, "validators": validators, "committed": hosts, "accepted": 0}
    return chain, ledger, {"expected": expected, "host": keys[host_names[-1]].address(),
                           "validator": keys[validator_names[-1]].address()}


def save_network(chain: EmbeddedChain, ledger: Ledger, folder: Path) -> Path:
    """The run as an embedded network file (``folder/network.json``, its state ``folder/chain.json``)."""
    folder.mkdir(parents=True, exist_ok=True)
    chain.save(folder / "chain.json")
    return NetworkFile(chain=ChainSettings(backend="embedded", state=str(folder / "chain.json")),
                       contract=ledger.contract_address, run_id=ledger.config().run_id).save(folder / "network.json")


class QueryLog:
    """While :meth:`listening`: every smart query an :class:`EmbeddedBackend` sends, measured
    (``query_cost``, uncached) before it is answered as usual."""

    def __init__(self) -> None:
        self.queries: list[dict[str, Any]] = []

    @contextmanager
    def listening(self) -> Iterator[QueryLog]:
        original = EmbeddedBackend.query
        log = self

        def query(backend: EmbeddedBackend, msg: dict[str, Any]) -> Any:
            cost, _ = query_gas(Ledger(backend), msg)
            (name,) = msg
            log.queries.append({"query": name, "lists": msg[name].get("lists", True) if name in ("epoch", "epochs")
                                else None, **cost})
            return original(backend, msg)

        # The method replaced while listening, restored below: a monkeypatch mypy cannot type.
        EmbeddedBackend.query = query  # type: ignore[method-assign,assignment]
        try:
            yield self
        finally:
            EmbeddedBackend.query = original  # type: ignore[method-assign]

    def summary(self) -> dict[str, Any]:
        """The largest query (its name and cost), how many were sent and their total gas."""
        top = max(self.queries, key=lambda q: q["sdk_gas"])
        top_next = max(self.queries, key=lambda q: q["sdk_gas_next"])
        return {"largest": top["query"], "sdk_gas": top["sdk_gas"], "bytes": top["bytes"],
                "records_read": top["records_read"], "of_limit": round(top["sdk_gas"] / QUERY_GAS_LIMIT, 4),
                "largest_next": top_next["query"], "sdk_gas_next": top_next["sdk_gas_next"],
                "records_next": top_next["records_next"], "largest_bytes": max(q["bytes"] for q in self.queries),
                "queries": len(self.queries), "all_sdk_gas": sum(q["sdk_gas"] for q in self.queries),
                "full_epoch_reads": sum(1 for q in self.queries if q["lists"] is True)}


def commands_gas(network: Path, host: str, home: Path, epoch: int) -> dict[str, Any]:
    """Each operator command run here on ``network`` (``report`` of ``epoch``, ``host status`` of
    ``host``), its smart queries measured (:class:`QueryLog`)."""
    from typer.testing import CliRunner  # noqa: PLC0415 (only --commands runs the CLI)

    from veriloco.cli import app  # noqa: PLC0415
    from veriloco.commands.watch import _frame  # noqa: PLC0415
    from veriloco.dashboard.source import RunSource  # noqa: PLC0415

    net = load_network(network)
    runner = CliRunner(env={"VERILOCO_HOME": str(home), "VERILOCO_PASSPHRASE": "pw", "VERILOCO_DEBUG": None})

    def cli(*args: str) -> Callable[[], object]:
        def run() -> object:
            done = runner.invoke(app, [*args, "--network", str(network)])
            assert done.exit_code == 0, done.output
            return done
        return run

    commands: dict[str, Callable[[], object]] = {
        "epoch list": cli("epoch", "list", "--json"),
        "epoch show": cli("epoch", "show", "--json"),
        "run show": cli("run", "show", "--json"),
        "report": cli("report", str(epoch), "--json"),
        "host status": cli("host", "status", host, "--json"),
        "epoch watch (one frame)": lambda: _frame(net, BlockClock(), {}, 3),
        "dashboard state": lambda: RunSource(net, min_interval=0).state(),
    }
    out: dict[str, Any] = {}
    for name, command in commands.items():
        t0 = time.perf_counter()
        with QueryLog().listening() as log:
            command()
        out[name] = {**log.summary(), "wall_s": round(time.perf_counter() - t0, 1)}
    return out


def commands_run(hosts: int, validators: int, page: int | None, save: Path | None, measure: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    chain, ledger, built = build_for_commands(hosts, validators, page)
    e = EPOCHS_PAGE_MEASURED - 1
    result: dict[str, Any] = {"hosts": hosts, "validators": validators, "settle_page": page,
                              "query_gas_limit": QUERY_GAS_LIMIT, "epoch": e,
                              "phase": ledger.epoch(e, lists=False).phase, "expected": built["expected"],
                              "build_s": round(time.perf_counter() - t0, 1)}
    with tempfile.TemporaryDirectory() as scratch:
        folder = save if save is not None else Path(scratch) / "run"
        network = save_network(chain, ledger, folder)
        result["network"] = str(network) if save is not None else None
        if not measure:
            return result

        def of(msg: dict[str, Any]) -> dict[str, Any]:
            cost, _ = query_gas(ledger, msg)
            return {**cost, "of_limit": round(cost["sdk_gas"] / QUERY_GAS_LIMIT, 4)}

        result["queries"] = {
            "epochs page of 10, header only": of({"epochs": {"limit": EPOCHS_PAGE_MEASURED, "lists": False}}),
            "epochs page of 10, full": of({"epochs": {"limit": EPOCHS_PAGE_MEASURED}}),
            "epoch, header only": of({"epoch": {"epoch": e, "lists": False}}),
            "epoch, full": of({"epoch": {"epoch": e}}),
            "participant (validator)": of({"participant": {"address": built["validator"], "epoch": e}}),
            "participant (host)": of({"participant": {"address": built["host"], "epoch": e}}),
            "challenges (validator, largest page)": max(
                (of({"challenges": {"epoch": e, "validator": built["validator"], "start_after": after,
                                    "limit": CHALLENGES_PAGE}})
                 for after in [None, *challenge_cursors(ledger, e, built["validator"])]),
                key=lambda c: c["sdk_gas"]),
        }
        t1 = time.perf_counter()
        result["commands"] = commands_gas(network, built["host"], folder / "home", e)
        result["commands_s"] = round(time.perf_counter() - t1, 1)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    return result


def challenge_cursors(ledger: Ledger, e: int, validator: str) -> list[str]:
    """The ``start_after`` of every page of ``validator``'s ``challenges`` after the first."""
    cursors: list[str] = []
    start: str | None = None
    while True:
        answer = ledger.backend.query({"challenges": {"epoch": e, "validator": validator, "start_after": start,
                                                      "limit": CHALLENGES_PAGE}})
        start = answer.get("next")
        if start is None:
            return cursors
        cursors.append(start)


def disputed_run(hosts: int, validators: int, page: int | None, before: bytes | None = None) -> dict[str, Any]:
    """``--disputed``: every ``report`` page of a fully disputed epoch, measured (:func:`query_gas`),
    following the cursor inside a host split over pages (``next_segment``, contract 0.3.3). With
    ``before`` (``--before WASM``: an older contract), the run is deployed on that code with the
    operator as admin and its report read (``Ledger.report``) before the measured pages, then
    migrated to the committed contract: ``same_report`` says whether the report read there equals
    the older code's."""
    t0 = time.perf_counter()
    _, operator, ledger = deployed(hosts, validators, page, before)
    host_names, validator_names = participant_names(hosts, validators)

    def send(plan: Any, kind: str | None = None, sink: dict[str, list[int]] | None = None) -> None:
        plan(ledger)

    def measure(action: Callable[[], TxResult]) -> dict[str, Any]:
        action()
        return {}

    play(ledger, send, measure, host_names, validator_names, "disputed")
    earlier = None
    if before is not None:
        earlier = ledger.report(0)
        ledger.migrate(operator, load_contract_wasm())
    pages: list[dict[str, Any]] = []
    start: str | None = None
    segment: int | None = None
    while True:
        msg: dict[str, Any] = {"epoch": 0, "start_after": start, "limit": REPORT_PAGE}
        if segment is not None:
            msg["start_segment"] = segment
        cost, answer = query_gas(ledger, {"report": msg})
        pages.append({**cost, "hosts": len(answer["hosts"]), "validators": len(answer["validators"]),
                      "challenges": len(answer["challenges"]),
                      "votes": sum(len(c["votes"]) for c in answer["challenges"]),
                      "stops_inside": answer.get("next_segment") is not None})
        start, segment = answer.get("next"), answer.get("next_segment")
        if start is None:
            break
    report = ledger.report(0)
    top = max(pages, key=lambda c: c["sdk_gas"])
    return {"hosts": hosts, "validators": validators, "scenario": "disputed", "query_gas_limit": QUERY_GAS_LIMIT,
            "pages": len(pages), "pages_stopping_inside_a_host": sum(1 for c in pages if c["stops_inside"]),
            "largest_page": {**top, "of_limit": round(top["sdk_gas"] / QUERY_GAS_LIMIT, 3)},
            "largest_page_next": max(pages, key=lambda c: c["sdk_gas_next"]),
            "pages_over_limit": sum(1 for c in pages if c["sdk_gas_next"] > QUERY_GAS_LIMIT),
            "report": {"hosts": len(report.hosts), "validators": len(report.validators),
                       "challenges": len(report.challenges), "votes": sum(len(c.votes) for c in report.challenges)},
            "same_report": None if earlier is None else earlier == report,
            "wall_s": round(time.perf_counter() - t0, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=MAX_PARTICIPANTS)
    parser.add_argument("--validators", type=int, default=MAX_PARTICIPANTS)
    parser.add_argument("--page", type=int, default=None, help="settle_page (default: the contract's, 64)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--commands", action="store_true", help="measure the operator commands' queries instead")
    parser.add_argument("--save", type=Path, default=None, help="with --commands: keep the run in this folder")
    parser.add_argument("--no-measure", action="store_true", help="with --commands: only build (and --save) the run")
    parser.add_argument("--disputed", action="store_true", help="the report pages of a fully disputed epoch instead")
    parser.add_argument("--before", type=Path, default=None,
                        help="with --disputed: play on this older wasm, read its report, migrate, compare")
    args = parser.parse_args()
    if args.disputed:
        before = args.before.read_bytes() if args.before is not None else None
        result = disputed_run(args.hosts, args.validators, args.page, before)
    elif args.commands:
        result = commands_run(args.hosts, args.validators, args.page, args.save, not args.no_measure)
    else:
        result = run(args.hosts, args.validators, args.page)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
