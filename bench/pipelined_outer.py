"""What pipelined epochs cost in loss: delayed and optimistic outer updates against synchronous DiLoCo.

Pipelined epochs (docs/training.md, "Pipelined epochs") let a host train epoch e + 1 while epoch e
settles. Two schedules are measured against the synchronous one, side by side in one process
(``trainer.diloco.simulate``, ``schedule=``), with the same K workers, H, windows, number of outer
steps and Δ bytes:

* ``delayed``: epoch e's accepted Δs enter the model of epoch e + 2 (the run applies its last
  aggregate when the pipeline drains);
* ``optimistic``: epoch e + 1 trains from the outer step of every committed Δ of e, the settled
  model takes the accepted ones only. With no cheater it is synchronous DiLoCo bit for bit
  (``tests/trainer/test_diloco.py``), so it is measured with ``--cheaters`` workers that commit a
  sign-flipped Δ every round, which settlement rejects: against the synchronous run that never
  lets them in.

Each comparison can be repeated over training seeds (``--seeds 0,1``; each seed is another θ_0,
data order and dropout): differences of a few percent are within DiLoCo's run-to-run spread here.

Model: the ``demo`` preset (2 layers, d = 64, 137 k parameters) at K = 4, H = 50 — the
configuration of the DiLoCo row in docs/benchmarks.md ("Trainer") — over T = 1000 steps per worker
(20 outer rounds). The delay matters most when the model changes fast from one round to the next and
there are few rounds to recover, which is this regime: the loss still falls steeply at the end.

Run: ``.venv/bin/python bench/pipelined_outer.py --json /tmp/pipelined.json`` (defaults: seed 0,
T = 1000, H = 50, K = 4; four delayed runs and one synchronous run, then the optimistic run with one
cheater and its synchronous run; 3–5 minutes a run on 2 cores). ``--delayed-outer`` names the outer
learning rate and momentum of each delayed run (a delayed update is stale by one round, which acts
as extra momentum, so the synchronous settings need not suit it); ``--delayed-outer ''`` skips them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from trainer.data import Dataset
from trainer.determinism import configure
from trainer.diloco import SimResult, simulate
from trainer.presets import preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1000, help="T, steps per worker")
    parser.add_argument("--inner-steps", type=int, default=50, help="H")
    parser.add_argument("--seeds", default="0", help="train.seed of each synchronous run and its pipelined runs")
    parser.add_argument("--delayed-outer", default="0.7:0.9,0.35:0.9,0.7:0.5,0.7:0",
                        help="outer lr:momentum of each delayed run (comma-separated, '' for none); the "
                             "synchronous run keeps the preset's (0.7:0.9)")
    parser.add_argument("--cheaters", type=int, default=1,
                        help="workers committing a sign-flipped Δ in the optimistic comparison (0: skip it)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure(args.threads)
    base = preset(args.preset)
    dataset = Dataset.load(base.data)
    rows: list[dict[str, Any]] = []

    def record(seed: int, schedule: str, outer: str, cheaters: int, sync: SimResult, r: SimResult) -> None:
        print(json.dumps({"seed": seed, "schedule": schedule, "outer": outer, "cheaters": cheaters,
                          "val_loss": r.val_loss, "wall_s": r.wall_s}), flush=True)
        rows.append({"seed": seed, "schedule": schedule, "outer": outer, "cheaters": cheaters, "sync": sync.val_loss,
                     "pipelined": r.val_loss, "ratio": r.val_loss / sync.val_loss,
                     "bytes_equal": sync.bytes_sent == r.bytes_sent, "sync_curve": sync.curve,
                     "pipelined_curve": r.curve})
        if args.json:
            args.json.write_text(json.dumps({"config": vars(args) | {"json": str(args.json)}, "runs": rows},
                                            indent=1))

    for seed in (int(s) for s in args.seeds.split(",")):
        spec = base.with_changes(train={"seed": seed, "inner_steps": args.inner_steps,
                                        "segment_steps": args.inner_steps})
        # Side by side: a seed's synchronous run, then its pipelined runs, back to back.
        variants = [v for v in args.delayed_outer.split(",") if v]
        if variants:
            sync = simulate(spec, dataset, "diloco", args.workers, args.steps)
            print(json.dumps({"seed": seed, "schedule": "synchronous", "val_loss": sync.val_loss}), flush=True)
            for variant in variants:
                lr, momentum = variant.split(":")
                delayed = spec.with_changes(outer={"lr": lr, "momentum": momentum})
                r = simulate(delayed, dataset, "diloco", args.workers, args.steps, schedule="delayed")
                record(seed, "delayed", variant, 0, sync, r)
        if args.cheaters:
            sync = simulate(spec, dataset, "diloco", args.workers, args.steps, cheaters=args.cheaters)
            print(json.dumps({"seed": seed, "schedule": "synchronous", "cheaters": args.cheaters,
                              "val_loss": sync.val_loss}), flush=True)
            r = simulate(spec, dataset, "diloco", args.workers, args.steps, schedule="optimistic",
                         cheaters=args.cheaters)
            record(seed, "optimistic", "0.7:0.9", args.cheaters, sync, r)
    print(f"\n{args.preset}, K = {args.workers}, H = {args.inner_steps}, T = {args.steps} "
          f"({args.steps // args.inner_steps} outer rounds)\n")
    print("| seed | schedule | outer lr:momentum | cheaters | synchronous val loss | pipelined val loss | "
          "pipelined ÷ synchronous | same bytes |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['seed']} | {row['schedule']} | {row['outer']} | {row['cheaters']} | {row['sync']:.4f} | "
              f"{row['pipelined']:.4f} | {row['ratio']:.4f} | {row['bytes_equal']} |")


if __name__ == "__main__":
    main()
