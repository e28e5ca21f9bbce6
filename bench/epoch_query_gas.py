"""The gas of the ``epoch {epoch}`` query at the largest epoch a run spec allows: ``max_hosts`` and
``max_validators`` at ``MAX_PARTICIPANTS`` (1,024 each), every host committed and accepted.

    PYTHONPATH=. .venv/bin/python bench/epoch_query_gas.py [--hosts 1024] [--validators 1024]
        [--page 64] [--out FILE]

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

Prints one JSON object (``--out`` also writes it to a file).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chain_devnet import key
from embedded_chain import cost_of
from settle_paging import bench_spec, play, query_cost

from chain.embedded import EmbeddedChain, deploy_embedded
from chain.ledger import Ledger, TxResult
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.rules.limits import MAX_PARTICIPANTS
from protocol.rules.spec import RunSpec

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


def run(hosts: int, validators: int, page: int | None) -> dict[str, Any]:
    host_names = [f"host{i}" for i in range(hosts)]
    validator_names = [f"validator{i}" for i in range(validators)]
    accounts = [key(n).address() for n in ["operator", "funder", *host_names, *validator_names]]
    chain = EmbeddedChain(genesis_balances={a: {DENOM: GENESIS_BALANCE} for a in accounts}, block_txs=1_000_000)
    operator = key("operator")
    ledger = deploy_embedded(chain, operator, spec_for(hosts, validators, REWARD), "00" * 32, operator.address(),
                             settle_page=page)

    def send(plan: Any, kind: str | None = None, sink: dict[str, list[int]] | None = None) -> None:
        plan(ledger)

    def measure(action: Callable[[], TxResult]) -> dict[str, Any]:
        return cost_of(None, action).estimate()  # cost_of does not use its env

    in_verify: dict[str, Any] = {}

    def query_gas(phase: str) -> dict[str, Any]:
        in_verify[phase] = epoch_gas(ledger, ledger.epoch().epoch)
        return in_verify[phase]

    t0 = time.perf_counter()
    played = play(ledger, send, measure, host_names, validator_names, "honest", query_gas)
    after = epoch_gas(ledger, 0)
    assert after["accepted"] == after["committed"] == after["hosts"] == hosts, after
    assert after["validators"] == validators, after
    return {"hosts": hosts, "validators": validators, "settle_page": page, "query_gas_limit": QUERY_GAS_LIMIT,
            "epoch_in_verify": in_verify.get("verify"), "epoch_after_finalize": after,
            "reads_after_finalize": played["reads_after_finalize"],
            "wall_s": round(time.perf_counter() - t0, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=MAX_PARTICIPANTS)
    parser.add_argument("--validators", type=int, default=MAX_PARTICIPANTS)
    parser.add_argument("--page", type=int, default=None, help="settle_page (default: the contract's, 64)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = run(args.hosts, args.validators, args.page)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
