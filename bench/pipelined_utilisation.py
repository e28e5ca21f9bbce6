"""How busy pipelined epochs keep a host: training time ÷ wall time, pipelined against synchronous.

The real nodes (``veriloco.network.LocalNetwork``: hosts, validators, the contract on the embedded
chain) run ``--epochs`` epochs synchronously, then the same roster on the same spec with
``phases.pipelined`` (docs/training.md, "Pipelined epochs", scheme 3), side by side in one process.
A host's busy fraction is the time it spent training (``HostNode.trainings``: its own clock around
each epoch's inner loop) over the wall time of the run; a pipelined host trains e + 1 on a thread
while e is verified and settled, so its busy fraction can rise while a synchronous host waits for
the replays, verdicts and proposals of every epoch. Also reported: epochs settled per minute.

Everything runs in one process on the machine's cores: a pipelined host's training competes with
the validators' replays for the CPU (on a machine per participant it would not), so the measured
gain is a lower bound of what separate machines give. In the pipelined run the epoch after the last
settled one also trains (while the last settles): its training counts, since it falls inside the
wall time. A host's training of one epoch is stretched by that contention (the table gives the
seconds per host-epoch of each run), which raises its busy fraction too: read the two together.

Run: ``OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/pipelined_utilisation.py --epochs 5``
(tiny preset, H = 16 in 4 segments, 3 hosts, 2 validators; a few minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from node.validator import ValidatorNode
from protocol.rules.spec import RunSpec
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.presets import preset
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster


def run(spec: RunSpec, dataset: Dataset, root: Path, hosts: int, validators: int, epochs: int) -> dict[str, float]:
    roster = Roster(hosts=[host_behaviour(None) for _ in range(hosts)],
                    validators=[validator_behaviour("honest") for _ in range(validators)])
    net = LocalNetwork(spec, root, roster, dataset, validator_factory=ValidatorNode)
    started = time.monotonic()
    reports = [net.run_epoch(max_rounds=1000) for _ in range(epochs)]
    ended = time.monotonic()
    for node in net.hosts:
        node.close()
    wall = ended - started
    assert all(r.agreed for r in reports) and net.total_funds() == net.initial_funds
    busy = [sum(min(t.ended, ended) - max(t.started, started) for t in node.trainings if t.started < ended) / wall
            for node in net.hosts]
    trained = max(len(node.trainings) for node in net.hosts)
    per_epoch = [t.ended - t.started for node in net.hosts for t in node.trainings]
    return {"wall_s": wall, "train_s_per_epoch": sum(per_epoch) / len(per_epoch),
            "busy": sum(busy) / len(busy), "busy_min": min(busy), "busy_max": max(busy),
            "epochs_trained": trained, "epochs_per_min": epochs / wall * 60}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--validators", type=int, default=2)
    parser.add_argument("--inner-steps", type=int, default=16, help="H")
    parser.add_argument("--segment-steps", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (each host's and validator's)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure(args.threads)
    base = preset(args.preset).with_changes(train={"inner_steps": args.inner_steps,
                                                   "segment_steps": args.segment_steps})
    spec = simulation_spec(base, validators=args.validators, hosts=args.hosts)
    dataset = Dataset.load(spec.data)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="veriloco-util-") as tmp:
        for mode, mode_spec in (("synchronous", spec), ("pipelined", spec.with_changes(phases={"pipelined": True}))):
            rows[mode] = run(mode_spec, dataset, Path(tmp) / mode, args.hosts, args.validators, args.epochs)
            print(json.dumps({"mode": mode, **rows[mode]}), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"config": vars(args) | {"json": str(args.json)}, "runs": rows}, indent=1))
    sync = rows["synchronous"]
    print(f"\n{args.preset}, H = {args.inner_steps} ({args.inner_steps // args.segment_steps} segments), "
          f"{args.hosts} hosts, {args.validators} validators, {args.epochs} epochs settled\n")
    print("| schedule | wall s | epochs trained | training s per host-epoch | host busy fraction (mean, min–max) "
          "| ÷ synchronous | epochs settled per minute | ÷ synchronous |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, r in rows.items():
        print(f"| {mode} | {r['wall_s']:.1f} | {r['epochs_trained']} | {r['train_s_per_epoch']:.2f} | "
              f"{r['busy']:.3f} ({r['busy_min']:.3f}–"
              f"{r['busy_max']:.3f}) | {r['busy'] / sync['busy']:.2f}× | {r['epochs_per_min']:.2f} | "
              f"{r['epochs_per_min'] / sync['epochs_per_min']:.2f}× |")


if __name__ == "__main__":
    main()
