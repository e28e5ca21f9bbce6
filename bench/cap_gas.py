"""What the weight caps of two epochs in flight cost in gas (issue 27, contracts 0.3.5 to 0.3.7).

    PYTHONPATH=. .venv/bin/python bench/cap_gas.py [--hosts 64,256] [--validators 8] [--json FILE]

In a pipelined run every member of epoch e + 1 joined it while epoch e settles, so each finalize
page of e that slashes one of them also caps what it weighs in e + 1 (a host: its participant
record, and the part of e + 1's vote totals that counted it: `hc/`; a validator: `wk/`). The worst
case is a page that slashes nothing but such members: here every host of epoch 0 cheats, every
validator votes `fail` on every challenge (so every challenge goes to the final vote of all
validators and every host is convicted `invalid`), and every host and validator has joined
epoch 1 and every host committed there. The same epoch is played side by side without epoch 1
(a synchronous run: nothing to cap). Measured on the embedded chain with the gas model of
``bench/embedded_chain.py`` (its estimate of the Cosmos SDK gas, calibrated against the devnet);
the contract's default ``settle_page`` (64 records a page).

Prints, per run, the largest message of epoch 0's finalize (the stage it began in and its estimated
gas) and each stage's largest page (a finalize that fits one message is listed under `outcomes`),
and the pipelined / synchronous ratio of the largest. One JSON object (``--json`` also writes it
to a file).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench.*
# The contract tests' drivers (tests/chain/ledger_env.py), which import the suite's shared names.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "chain"))

from ledger_env import EmbeddedDriver, LedgerEnv, make_spec

from bench.embedded_chain import LONG_PHASES, Cost, run_costed
from chain.types import TxResult
from protocol.messages import StartProposal
from protocol.views import VERDICT_COMMIT_PHASES, VERDICT_REVEAL_PHASES, Challenge


def convicting_epoch(hosts: int, validators: int, pipelined: bool) -> dict[str, Any]:
    """Epoch 0 with every host convicted in its final votes; with ``pipelined``, after every member
    joined epoch 1 and every host committed there. Returns epoch 0's finalize costs."""
    host_names = [f"host{i}" for i in range(hosts)]
    validator_names = [f"validator{i}" for i in range(validators)]
    spec = make_spec(reward_per_epoch="1000000",
                     phases={"max_hosts": hosts, "max_validators": max(validators, 32), "pipelined": pipelined,
                             **LONG_PHASES})
    env = LedgerEnv(EmbeddedDriver(spec, ["operator", "treasury", "funder", *host_names, *validator_names]))
    env.fund_rewards(10**9)
    env.bond_all([*host_names, *validator_names])
    env.play_epoch(host_names, validator_names, stop_after="reveal")
    assert env.epoch(0).phase == "verify", env.epoch(0)
    if pipelined:
        for name in host_names:
            if env.current() == 0:
                env.ledger.propose_start(env.key(name), StartProposal(epoch=0, model_hash="ab" * 32))
        assert env.current() == 1, env.epoch()
        env.play_epoch(host_names, validator_names, stop_after="train")
        assert env.epoch(1).phase == "reveal", env.epoch(1)

    # Every transaction from the start of epoch 0's finalize on, with the stage it began in.
    costs: list[tuple[str, Cost]] = []
    advance, reveal_verdict = env.advance, env.reveal_verdict

    def header() -> Any:  # epoch 0 without its member lists: a read that does not grow with them
        return env.ledger.epoch(0, lists=False)

    def metered(send: Any, *args: Any, **kwargs: Any) -> TxResult:
        stage = header().closing
        result, cost = run_costed(lambda: send(*args, **kwargs))
        # A finalize page, or the message whose close ran all of finalize (listed as `outcomes`).
        if stage in ("outcomes", "slashes", "rewards") or header().phase in ("propose", "closed"):
            costs.append((stage or "outcomes", cost))
        return result

    env.advance = lambda *a, **k: metered(advance, *a, **k)  # type: ignore[method-assign]  # a bench's meter
    env.reveal_verdict = lambda *a, **k: metered(reveal_verdict, *a, **k)  # type: ignore[method-assign]

    def fail(_: str, __: Challenge) -> str:
        return "fail"

    t0 = time.perf_counter()
    while (phase := env.epoch(0).phase) in (*VERDICT_COMMIT_PHASES, "objection", *VERDICT_REVEAL_PHASES):
        if phase in VERDICT_COMMIT_PHASES:
            env.commit_round(validator_names, fail, 0)
        elif phase == "objection":
            env.objection_round(validator_names, host_names, 0)
        else:
            env.reveal_round(validator_names, None, host_names, 0)
        env.settle()
        if env.epoch(0).phase == phase:
            env.wait_past_deadline(0)
            env.advance()
            env.settle()
    seconds = time.perf_counter() - t0
    report = env.report(0)
    invalid = sum(h.outcome == "invalid" for h in report.hosts)
    assert invalid == hosts, [h.outcome for h in report.hosts]
    if pipelined:
        capped = sum(h.weight is not None for h in env.report(1).hosts)
        assert capped == hosts, capped
    env.assert_books()
    by_stage: dict[str, dict[str, Any]] = {}
    for stage, cost in costs:
        estimate = cost.estimate()
        top = by_stage.get(stage)
        if top is None or estimate["sdk_gas_estimate"] > top["sdk_gas_estimate"]:
            by_stage[stage] = {**estimate, "pages": (top or {}).get("pages", 0) + 1}
        else:
            top["pages"] += 1
    largest_stage = max(by_stage, key=lambda s: by_stage[s]["sdk_gas_estimate"])
    return {"hosts": hosts, "validators": validators, "pipelined": pipelined, "invalid": invalid,
            "largest": {"stage": largest_stage, "sdk_gas_estimate": by_stage[largest_stage]["sdk_gas_estimate"]},
            "by_stage": by_stage, "verdict_rounds_s": round(seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="64,256", help="comma-separated host counts")
    parser.add_argument("--validators", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for hosts in [int(h) for h in args.hosts.split(",") if h]:
        pair = {p: convicting_epoch(hosts, args.validators, p) for p in (False, True)}
        sync, piped = (pair[p]["largest"]["sdk_gas_estimate"] for p in (False, True))
        rows.append({"hosts": hosts, "synchronous": pair[False], "pipelined": pair[True],
                     "largest_pipelined_over_synchronous": round(piped / sync, 3)})
        print(f"{hosts} hosts: the largest finalize message {pair[False]['largest']} -> {pair[True]['largest']} "
              f"({piped / sync:.3f}x)", file=sys.stderr)
    out = {"bench": "cap_gas", "validators": args.validators, "rows": rows}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)


if __name__ == "__main__":
    main()
