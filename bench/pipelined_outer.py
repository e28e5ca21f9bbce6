"""What pipelined epochs cost in loss: the one-round-delayed outer update against synchronous DiLoCo.

Pipelined epochs (docs/training.md, "Pipelined epochs: the delayed outer update") let a host train
epoch e + 1 while epoch e settles, so epoch e's accepted Δs can only enter the model of epoch
e + 2. This bench trains both schedules side by side in one process (``trainer.diloco.simulate``
with ``outer_delay`` 0 and 1): the same K workers, the same H, the same windows, the same number of
outer steps and the same Δ bytes — the delayed run applies its last aggregate when the pipeline
drains. It repeats the pair over several training seeds (each seed is another θ_0, data order and
dropout) when asked (``--seeds 0,1``): differences of a few percent are within the run-to-run
spread of DiLoCo on this model.

Model: the ``demo`` preset (2 layers, d = 64, 137 k parameters) at K = 4, H = 50 — the
configuration of the DiLoCo row in docs/benchmarks.md ("Trainer") — over T = 1000 steps per worker
(20 outer rounds). The delay matters most when the model changes fast from one round to the next and
there are few rounds to recover, which is this regime: the loss still falls steeply at the end.

Run: ``.venv/bin/python bench/pipelined_outer.py --json /tmp/pipelined.json`` (defaults: seed 0,
T = 1000, H = 50, K = 4, four pipelined runs; 3–5 minutes a run on 2 cores, 5 runs).
``--delayed-outer`` names the outer learning rate and momentum of each pipelined run (a delayed
update is stale by one round, which acts as extra momentum, so the synchronous settings need not
suit it).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from trainer.data import Dataset
from trainer.determinism import configure
from trainer.diloco import simulate
from trainer.presets import preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1000, help="T, steps per worker")
    parser.add_argument("--inner-steps", type=int, default=50, help="H")
    parser.add_argument("--seeds", default="0", help="train.seed of each synchronous run and its pipelined runs")
    parser.add_argument("--delayed-outer", default="0.7:0.9,0.35:0.9,0.7:0.5,0.7:0",
                        help="outer lr:momentum of each pipelined run (comma-separated); the synchronous "
                             "run keeps the preset's (0.7:0.9)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure(args.threads)
    base = preset(args.preset)
    dataset = Dataset.load(base.data)
    rows = []
    for seed in (int(s) for s in args.seeds.split(",")):
        spec = base.with_changes(train={"seed": seed, "inner_steps": args.inner_steps,
                                        "segment_steps": args.inner_steps})
        # Side by side: a seed's synchronous run, then its pipelined runs, back to back.
        sync = simulate(spec, dataset, "diloco", args.workers, args.steps)
        print(json.dumps({"seed": seed, "outer_delay": 0, "val_loss": sync.val_loss, "wall_s": sync.wall_s}),
              flush=True)
        for variant in args.delayed_outer.split(","):
            lr, momentum = variant.split(":")
            delayed = spec.with_changes(outer={"lr": lr, "momentum": momentum})
            r = simulate(delayed, dataset, "diloco", args.workers, args.steps, outer_delay=1)
            print(json.dumps({"seed": seed, "outer_delay": 1, "outer": variant, "val_loss": r.val_loss,
                              "wall_s": r.wall_s}), flush=True)
            rows.append({"seed": seed, "outer": variant, "sync": sync.val_loss, "pipelined": r.val_loss,
                         "ratio": r.val_loss / sync.val_loss, "bytes_equal": sync.bytes_sent == r.bytes_sent,
                         "sync_curve": sync.curve, "pipelined_curve": r.curve})
        if args.json:
            args.json.write_text(json.dumps({"config": vars(args) | {"json": str(args.json)}, "runs": rows},
                                            indent=1))
    print(f"\n{args.preset}, K = {args.workers}, H = {args.inner_steps}, T = {args.steps} "
          f"({args.steps // args.inner_steps} outer rounds)\n")
    print("| seed | pipelined outer lr:momentum | synchronous val loss (0.7:0.9) | pipelined val loss | "
          "pipelined ÷ synchronous | same bytes |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['outer']} | {r['sync']:.4f} | {r['pipelined']:.4f} | {r['ratio']:.4f} | "
              f"{r['bytes_equal']} |")
    for variant in args.delayed_outer.split(","):
        mine = [r for r in rows if r["outer"] == variant]
        print(f"| mean | {variant} | {statistics.fmean(r['sync'] for r in mine):.4f} | "
              f"{statistics.fmean(r['pipelined'] for r in mine):.4f} | "
              f"{statistics.fmean(r['ratio'] for r in mine):.4f} | |")


if __name__ == "__main__":
    main()
