"""topk2's error feedback: the residual lag of pipelined runs, and the decay β, against the baselines.

A pipelined run's hosts carry their error-feedback residual from epoch e − 2, the last one settled
when e trains (``trainer.delta.carried_from``; docs/training.md, "Pipelined runs with topk2"); a
synchronous run's from e − 1. Each topk2 row here is ``trainer.diloco.simulate`` of one spec with
no cheater, under the ``synchronous`` schedule or the ``optimistic`` one — synchronous DiLoCo bit
for bit without a cheater, except that its workers carry their residual as a pipelined run's hosts
do — and one error-feedback decay β (``quantization.error_decay``: epoch e compresses Δ + β·r).
Beside them, in the same process on the same seed (θ_0, windows): data parallelism and dense DiLoCo
(int8, block 64) at the same H and outer step. Every row is one run; ``--seed`` moves θ_0 and every
window, so two processes with two seeds measure the run-to-run noise.

Configuration: the best ``topk2`` row of docs/benchmarks.md ("Compression"): the demo preset with 4
rows per worker-step and inner lr 0.01, K = 4, H = 10, outer SGD lr 1 without momentum, block 1024,
AdamW inner.

Run: ``.venv/bin/python bench/pipelined_topk2.py --steps 1000 --json /tmp/pipelined_topk2.json``
(β = 1, the lag alone); the decay sweep, one process per seed (both at once on two cores), then one
table from their JSON files (``--merge`` also takes a seed's rows split over several processes)::

    .venv/bin/python bench/pipelined_topk2.py --decays 1,0.95,0.9,0.8 --baselines ddp,int8 --seed 0 \\
        --threads 1 --json /tmp/decay0.json
    (the same with --seed 1 --json /tmp/decay1.json)
    .venv/bin/python bench/pipelined_topk2.py --merge /tmp/decay0.json /tmp/decay1.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from trainer.data import Dataset
from trainer.determinism import configure
from trainer.diloco import Mode, Schedule, simulate
from trainer.presets import preset

_LAG: dict[Schedule, int] = {"synchronous": 1, "optimistic": 2}


def _name(row: dict[str, Any]) -> str:
    if row["mode"] == "ddp":
        return "data-parallel (every step, 16 rows)"
    if row["quant"] == "int8":
        return "DiLoCo, int8 (dense)"
    return f"topk2, residual from e − {row['lag']}, β = {row['decay']}"


def merge(paths: list[Path]) -> None:
    """One table over several processes' JSON (one or more per seed): each row's loss × its own
    seed's data parallelism, their mean over the seeds, and the spread between the seeds."""
    rows = [row for p in paths for row in json.loads(p.read_text())["runs"]]
    seeds = sorted({int(row["seed"]) for row in rows})
    ddp = {int(row["seed"]): float(row["val_loss"]) for row in rows if row["mode"] == "ddp"}
    by_name: dict[str, dict[int, dict[str, Any]]] = {}
    for row in rows:
        by_name.setdefault(_name(row), {})[int(row["seed"])] = row
    print(f"seeds {', '.join(map(str, seeds))}")
    print("| run | " + " | ".join(f"val loss, seed {s}" for s in seeds) + " | × data-parallel, mean over seeds "
          "| spread between seeds (× data-parallel) | bytes sent |")
    print("| --- | " + " | ".join("---" for _ in seeds) + " | --- | --- | --- |")
    for name, found in by_name.items():
        losses = " | ".join(f"{found[s]['val_loss']:.4f}" if s in found else "—" for s in seeds)
        ratios = [found[s]["val_loss"] / ddp[s] for s in seeds if s in found and s in ddp]
        mean = f"{statistics.mean(ratios):.4f}" if ratios else "—"
        spread = f"{max(ratios) - min(ratios):.4f}" if len(ratios) > 1 else "—"
        sent = next(iter(found.values()))["bytes_sent"]
        print(f"| {name} | {losses} | {mean} | {spread} | {sent / 1e6:,.2f} MB |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1000, help="T, steps per worker")
    parser.add_argument("--inner-steps", type=int, default=10, help="H")
    parser.add_argument("--batch", type=int, default=4, help="rows per worker-step")
    parser.add_argument("--lr", default="0.01", help="inner learning rate")
    parser.add_argument("--outer", default="1,0", help="outer 'lr,momentum'")
    parser.add_argument("--block", type=int, default=1024)
    parser.add_argument("--decays", default="1", help="β values of the topk2 runs (quantization.error_decay)")
    parser.add_argument("--schedules", default="synchronous,optimistic",
                        help="residual from e − 1 (synchronous), from e − 2 (optimistic: a pipelined run's)")
    parser.add_argument("--baselines", default="", help="also: ddp (data parallelism), int8 (dense DiLoCo)")
    parser.add_argument("--seed", type=int, default=0, help="train.seed: θ_0 and every window")
    parser.add_argument("--evals", type=int, default=10, help="validation measurements per run (the last at the end)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--merge", type=Path, nargs="+", help="only print one table from these runs' JSON files")
    args = parser.parse_args()
    if args.merge:
        merge(args.merge)
        return
    configure(args.threads)
    lr, momentum = args.outer.split(",")
    h = args.inner_steps
    base = preset(args.preset).with_changes(
        train={"batch_size": args.batch, "lr": args.lr, "inner_steps": h, "segment_steps": h, "seed": args.seed},
        quantization={"scheme": "topk2", "block_size": args.block}, outer={"lr": lr, "momentum": momentum})
    dataset = Dataset.load(base.data)
    by_name: dict[str, Schedule] = {s: s for s in _LAG}  # the schedules this table has a lag for
    if unknown := [s for s in args.schedules.split(",") if s not in by_name]:
        parser.error(f"--schedules: unknown {', '.join(unknown)}; one of {', '.join(by_name)}")
    schedules = [by_name[s] for s in args.schedules.split(",")]
    plan: list[tuple[Mode, str, Schedule, str]] = []  # (mode, scheme, schedule, β)
    baselines = [b for b in args.baselines.split(",") if b]
    if "ddp" in baselines:
        plan.append(("ddp", "int8", "synchronous", "1"))
    plan += [("diloco", "topk2", schedule, decay) for decay in args.decays.split(",")
             for schedule in schedules]
    if "int8" in baselines:  # no residual: the optimistic schedule is the synchronous one bit for bit
        plan.append(("diloco", "int8", "synchronous", "1"))
    rows: list[dict[str, object]] = []
    started = time.perf_counter()
    for mode, scheme, schedule, decay in plan:
        quant: dict[str, object] = {"scheme": scheme, "block_size": args.block if scheme == "topk2" else 64}
        if scheme == "topk2":
            quant["error_decay"] = decay
        spec = base.with_changes(quantization=quant)
        run = simulate(spec, dataset, mode, args.workers, args.steps, evals=args.evals, schedule=schedule)
        rows.append({"mode": mode, "quant": scheme, "schedule": schedule, "lag": _LAG[schedule], "decay": decay,
                     "seed": args.seed, "val_loss": run.val_loss, "bytes_sent": run.bytes_sent,
                     "wall_s": run.wall_s, "curve": run.curve})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "curve"}), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"config": vars(args) | {"json": str(args.json)}, "runs": rows}, indent=1))
    print(f"\n{time.perf_counter() - started:.0f} s")
    first = next((row for row in rows if row["mode"] == "ddp"), rows[0])
    print(f"| run | final val loss | × {_name(first)} | bytes sent |")
    print("| --- | --- | --- | --- |")
    for row in rows:
        loss = float(str(row["val_loss"]))
        print(f"| {_name(row)} | {loss:.4f} | {loss / float(str(first['val_loss'])):.3f} | "
              f"{int(str(row['bytes_sent'])) / 1e6:.2f} MB |")


if __name__ == "__main__":
    main()
