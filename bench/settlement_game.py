"""The settlement game over hundreds of epochs: each strategy of the catalogue, and mixtures, on the
real contract (the committed wasm on the embedded chain).

    .venv/bin/python bench/settlement_game.py [--epochs 200] [--jobs 2] [--out results.json]

Parties follow strategies (``tests/chain/game_env.py``, the driver the property tests use): hosts
do not train and validators do not replay; an honest replay's finding is the ground truth of the
host's behaviour (a faked or trapped segment fails, any other passes, a reader the host does not
serve sees ``unavailable``). Whether a real replay finds that truth is measured by the verifier
benchmarks (``bench/verifier_detection.py``, "Verifier" in ``docs/benchmarks.md``); every
strategy is also played for real, with training and replays, by ``tests/e2e/test_settlement_game.py``.

Per scenario (3 honest hosts and 3 honest validators plus the strategy; a slashed party is topped
up to its bond after each epoch so that it keeps playing): for each strategy, the epochs in which
it was slashed and paid and the amounts, its outcomes; the epochs in which θ was agreed; what
honest parties were slashed (must be 0); funds conserved after every epoch (asserted). For the
auditor scenario, the per-epoch probability that an always-``pass`` validator is caught, measured
and from its formula ``1 − (1 − (k+1)/S · r/V)^A`` (A auditors with one trap each, V validators).

Prints one JSON object and a Markdown table (``--out`` also writes the JSON).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "chain")]  # the game driver beside the contract suite

from game_env import HONEST, Game, game_spec  # noqa: E402 (after the path it lives on)

BASE_HOSTS = {f"host{i}": "honest" for i in range(1, 4)}
BASE_VALIDATORS = {f"validator{i}": "honest" for i in range(1, 4)}

SCENARIOS: dict[str, tuple[dict[str, str], dict[str, str]]] = {
    "auditors + always_pass": ({"audit1": "auditor", "audit2": "auditor"}, {"liar1": "always_pass"}),
    "mixture": ({"cheat1": "lazy", "cheat2": "selective_serve", "cheat3": "selective_reveal", "audit1": "auditor"},
                {"liar1": "always_pass", "liar2": "always_fail", "liar3": "silent", "liar4": "copycat"}),
    "all honest": ({}, {}),
    "always_fail": ({}, {"liar1": "always_fail"}),
    "always_pass": ({}, {"liar1": "always_pass"}),
    "lazy + always_pass": ({"cheat1": "lazy"}, {"liar1": "always_pass"}),
    "silent + copycat": ({}, {"liar1": "silent", "liar2": "copycat"}),
    "false_unavailable": ({}, {"liar1": "false_unavailable"}),
    "selective_serve": ({"cheat1": "selective_serve"}, {}),
    "selective_reveal": ({"cheat1": "selective_reveal"}, {}),
    "withhold": ({"cheat1": "withhold"}, {}),
}


def run(name: str, epochs: int, seed: int) -> dict[str, Any]:
    extra_hosts, extra_validators = SCENARIOS[name]
    hosts, validators = {**BASE_HOSTS, **extra_hosts}, {**BASE_VALIDATORS, **extra_validators}
    started = time.perf_counter()
    game = Game(hosts, validators, seed=seed)
    reports = game.play(epochs)  # asserts conservation and the books after every epoch
    strategies: dict[str, dict[str, Any]] = {}
    for party, tally in game.tallies.items():
        kind = hosts.get(party) or validators[party]
        role = "host" if party in hosts else "validator"
        s = strategies.setdefault(f"{role} {kind}", {"parties": 0, "party_epochs": 0, "slashed_epochs": 0,
                                                     "slashed": 0, "paid_epochs": 0, "paid": 0, "outcomes": {}})
        s["parties"] += 1
        s["party_epochs"] += tally.epochs
        s["slashed_epochs"] += tally.slashed_epochs
        s["slashed"] += tally.slashed
        s["paid_epochs"] += tally.paid_epochs
        s["paid"] += tally.paid
        for outcome, n in tally.outcomes.items():
            s["outcomes"][outcome] = s["outcomes"].get(outcome, 0) + n
    out: dict[str, Any] = {
        "scenario": name, "epochs": len(reports), "agreed_epochs": sum(bool(r.agreed) for r in reports),
        "honest_slashed": game.honest_slashed(), "funds_conserved": game.env.total_funds() == game.initial_funds,
        "strategies": strategies, "seconds": round(time.perf_counter() - started, 1),
    }
    if name == "auditors + always_pass":
        ver, spec = game.spec.verification, game.spec
        liar = game.env.addr("liar1")
        caught = sum(any(v.address == liar and v.outcome == "wrong" for v in r.validators) for r in reports)
        v_count = len(validators)
        per_trap = (ver.challenges_k + 1) / spec.train.segments * ver.validators_r / v_count
        formula = 1 - (1 - per_trap) ** len(extra_hosts)
        p = caught / len(reports)
        out["always_pass_caught"] = {"caught_epochs": caught, "measured": round(p, 4), "formula": round(formula, 4),
                                     "stderr": round(math.sqrt(formula * (1 - formula) / len(reports)), 4)}
    print(f"{name}: {len(reports)} epochs in {out['seconds']} s", file=sys.stderr, flush=True)
    return out


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| scenario | strategy | parties × epochs | slashed (epochs) | slashed total | paid (epochs) | "
             "paid total | outcomes | θ agreed | honest slashed | funds conserved |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        first = True
        for kind, s in sorted(r["strategies"].items()):
            outcomes = ", ".join(f"{o} {n}" for o, n in sorted(s["outcomes"].items()))
            head = (f"| {r['scenario']} |" if first else "| |")
            tail = (f" {r['agreed_epochs']}/{r['epochs']} | {r['honest_slashed']} | "
                    f"{'yes' if r['funds_conserved'] else 'NO'} |") if first else " | | |"
            lines.append(f"{head} {kind} | {s['party_epochs']} | {s['slashed_epochs']} | {s['slashed']} | "
                         f"{s['paid_epochs']} | {s['paid']} | {outcomes} |{tail}")
            first = False
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    names = [n for n in SCENARIOS if not args.only or n in args.only.split(",")]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(run, names, [args.epochs] * len(names), [args.seed] * len(names)))
    spec = game_spec()
    summary = {"spec": {"segments": spec.train.segments, "challenges_k": spec.verification.challenges_k,
                        "validators_r": spec.verification.validators_r,
                        "dispute_committee": spec.verification.dispute_committee,
                        "dispute_rounds": spec.verification.dispute_rounds,
                        "honest": sorted(HONEST)},
               "results": results}
    print(json.dumps(summary, indent=1))
    print(table(results))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
