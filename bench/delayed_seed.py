"""What the delayed seed changes and what it costs (issue 30; docs/contract.md, "The delayed seed").

    PYTHONPATH=. .venv/bin/python bench/delayed_seed.py [--validators 8,16] [--squarings 200000]
        [--hosts 16] [--no-uploads] [--json out.json]

Three measurements, side by side in one run:

* **A host's challenges and uploads.** One epoch of ``simulate``'s network on the tiny preset
  (H = 32 in S = 16 segments, k = 2; 2 honest hosts; V validators of equal stake), once with each
  picker's own picks (the default) and once with ``verification.delay_squarings`` set, for each V:
  the challenges per host, the distinct round-0 seats per challenge, the bytes each host served
  (every leaf, proof and chunk it handed a reader: ``bench/leaf_uploads.py``'s counting) and the
  replays the validators ran. Honest hosts only, so every byte is an honest host's cost.
* **The VDF's speed here** (CPython integers, one thread): evaluation and proof per squaring, and
  the check, at ``--squarings``.
* **The contract's check**: the ``delayed_seed`` message on the embedded chain (wasm fuel, storage
  and the SDK-gas estimate of ``bench/embedded_chain.py``), which also runs the first page of the
  assignment, against the ``reveal`` that closes the phase with per-picker picks (the same work
  without the check), both at 16 hosts and 8 validators.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "chain"))

from ledger_env import EmbeddedDriver, LedgerEnv, make_spec

from bench.embedded_chain import run_costed
from bench.leaf_uploads import counted
from protocol.rules import vdf
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.presets import tiny
from verifier.adversaries import ValidatorBehaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

SEGMENTS = 16
NETWORK_SQUARINGS = 20_000


def uploads(root: Path, validators: int, delayed: bool) -> dict[str, object]:
    """One epoch with ``validators`` of equal stake: each host's challenges, seats and bytes served."""
    spec = simulation_spec(tiny("delayed-seed-bench").with_changes(
        train={"inner_steps": 2 * SEGMENTS, "segment_steps": 2, "batch_size": 4},
        verification={"challenges_k": 2, "delay_squarings": NETWORK_SQUARINGS if delayed else 0}),
        validators=validators, hosts=2)
    roster = Roster(hosts=[HostBehaviour(), HostBehaviour()], validators=[ValidatorBehaviour()
                                                                         for _ in range(validators)])
    net = LocalNetwork(spec, root, roster, Dataset.load(spec.data))
    sent: Counter[str] = Counter()
    for endpoint, serve in list(net._sources.items()):
        net._sources[endpoint] = counted(serve, endpoint.removeprefix("http://").removesuffix(".sim"), sent)
    started = time.perf_counter()
    report = net.run_epoch(max_rounds=2_000)
    wall = time.perf_counter() - started
    hosts = {}
    for i, h in enumerate(report.hosts):
        mine = [c for c in report.challenges if c.host == h.address]
        seats = [len([v for v in c.votes if v.round == 0]) for c in mine]
        hosts[f"host-{i}"] = {"outcome": h.outcome, "challenges": len(mine), "seats": seats,
                              "replays": sum(seats), "bytes_served": sent[f"host-{i}"]}
    return {"validators": validators, "delayed": delayed, "hosts": hosts, "wall_s": round(wall, 1),
            "validators_served": sum(v for w, v in sent.items() if w.startswith("validator"))}


def rates(squarings: int) -> dict[str, float]:
    """CPython's evaluation and proof per squaring (the proof from ``x`` and from the powers the
    evaluation kept, which is what a node does), and one check."""
    x = vdf.input_element(b"\x01" * 32)
    t0 = time.perf_counter()
    y = vdf.evaluate(x, squarings)
    t1 = time.perf_counter()
    proof = vdf.prove(x, y, squarings)
    t2 = time.perf_counter()
    assert vdf.verify(x, squarings, y, proof)
    t3 = time.perf_counter()
    y_kept, checkpoints = vdf.evaluate_with_checkpoints(x, squarings)
    t4 = time.perf_counter()
    assert y_kept == y and vdf.prove(x, y, squarings, checkpoints=checkpoints) == proof
    t5 = time.perf_counter()
    return {"squarings": squarings, "evaluate_us_per_squaring": round((t1 - t0) / squarings * 1e6, 2),
            "prove_us_per_squaring": round((t2 - t1) / squarings * 1e6, 2),
            "prove_over_evaluate": round((t2 - t1) / (t1 - t0), 3), "verify_ms": round((t3 - t2) * 1e3, 2),
            "evaluate_keeping_us_per_squaring": round((t4 - t3) / squarings * 1e6, 2),
            "checkpoint_every": checkpoints.every,
            "prove_from_kept_us_per_squaring": round((t5 - t4) / squarings * 1e6, 2),
            "prove_from_kept_over_evaluate": round((t5 - t4) / (t1 - t0), 3),
            "node_over_evaluate": round((t5 - t3) / (t1 - t0), 3)}


def contract_cost(hosts: int = 16, validators: int = 8, squarings: int = 10_000) -> dict[str, object]:
    """The phase-closing message with and without the delayed seed, on the embedded chain."""
    out: dict[str, object] = {"hosts": hosts, "validators": validators}
    host_names = [f"host{i}" for i in range(hosts)]
    validator_names = [f"validator{i}" for i in range(validators)]
    for delayed in (False, True):
        spec = make_spec(train={"inner_steps": 32, "segment_steps": 2},
                         verification={"challenges_k": 2, "delay_squarings": squarings if delayed else 0},
                         phases={"verify_blocks": 150, "verdict_reveal_blocks": 150})
        env = LedgerEnv(EmbeddedDriver(spec, [*host_names, *validator_names, "operator", "treasury", "funder"]))
        env.bond_all([*host_names, *validator_names])
        env.play_epoch(host_names, validator_names, stop_after="train")
        for name in [*host_names, *validator_names[:-1]]:
            env.reveal(name, 0)
        _, closing = run_costed(partial(env.reveal, validator_names[-1], 0))
        row: dict[str, object] = {"reveal_that_closes": closing.estimate()}
        if delayed:
            env.settle()
            output = env.delayed_seed_output(0)
            _, posted = run_costed(partial(env.ledger.delayed_seed, env.key("funder"), output))
            row["delayed_seed"] = posted.estimate()
        pages = 0
        while env.ledger.closing():
            env.advance()
            pages += 1
        row["pages_after"] = pages
        row["phase_after"] = env.epoch(0).phase
        out["delayed" if delayed else "per_picker"] = row
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--validators", default="8,16")
    parser.add_argument("--squarings", type=int, default=200_000)
    parser.add_argument("--hosts", type=int, default=16, help="hosts of the contract's measurement")
    parser.add_argument("--no-uploads", action="store_true", help="only the VDF's speed and the contract's check")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result: dict[str, object] = {"rates": rates(args.squarings), "contract": contract_cost(hosts=args.hosts)}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for v in () if args.no_uploads else (int(x) for x in args.validators.split(",")):
            for delayed in (False, True):
                runs.append(uploads(Path(tmp) / f"net-{v}-{delayed}", v, delayed))
    result["uploads"] = runs
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    print(text)
    print("\n| V | challenges from | challenges per host | round-0 seats per challenge | replays per host-epoch "
          "| bytes a host served | validators served |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in runs:
        hosts = r["hosts"]
        assert isinstance(hosts, dict)
        h = list(hosts.values())
        print(f"| {r['validators']} | {'delayed seed' if r['delayed'] else 'each picker'} | "
              f"{', '.join(str(x['challenges']) for x in h)} | "
              f"{', '.join('/'.join(map(str, x['seats'])) for x in h)} | "
              f"{', '.join(str(x['replays']) for x in h)} | "
              f"{', '.join(format(x['bytes_served'], ',') for x in h)} | {r['validators_served']:,} |")


if __name__ == "__main__":
    main()
