"""What a pipelined run's residual lag costs in loss: topk2 carried from two rounds back against one.

A pipelined run's hosts carry their error-feedback residual from epoch e − 2, the last one settled
when e trains (``trainer.delta.carried_from``; docs/training.md, "Pipelined runs with topk2"); a
synchronous run's from e − 1. Both runs here are ``trainer.diloco.simulate`` of one spec (one run
id: the same θ_0, windows and bytes) with no cheater, side by side in one process: the
``synchronous`` schedule, and the ``optimistic`` one — synchronous DiLoCo bit for bit without a
cheater, except that its workers carry their residual as a pipelined run's hosts do. The only
difference is the lag.

Configuration: the best ``topk2`` row of docs/benchmarks.md ("Compression"): the demo preset with 4
rows per worker-step and inner lr 0.01, K = 4, H = 10, outer SGD lr 1 without momentum, block 1024.

Run: ``.venv/bin/python bench/pipelined_topk2.py --steps 1000 --json /tmp/pipelined_topk2.json``.
"""

from __future__ import annotations

import argparse
import json
import time
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
    parser.add_argument("--inner-steps", type=int, default=10, help="H")
    parser.add_argument("--batch", type=int, default=4, help="rows per worker-step")
    parser.add_argument("--lr", default="0.01", help="inner learning rate")
    parser.add_argument("--outer", default="1,0", help="outer 'lr,momentum'")
    parser.add_argument("--block", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure(args.threads)
    lr, momentum = args.outer.split(",")
    h = args.inner_steps
    base = preset(args.preset).with_changes(
        train={"batch_size": args.batch, "lr": args.lr, "inner_steps": h, "segment_steps": h},
        quantization={"scheme": "topk2", "block_size": args.block}, outer={"lr": lr, "momentum": momentum})
    dataset = Dataset.load(base.data)
    rows: list[dict[str, object]] = []
    started = time.perf_counter()
    for schedule in ("synchronous", "optimistic"):
        run = simulate(base, dataset, "diloco", args.workers, args.steps, schedule=schedule)
        rows.append({"schedule": schedule, "lag": 1 if schedule == "synchronous" else 2, "val_loss": run.val_loss,
                     "bytes_sent": run.bytes_sent, "wall_s": run.wall_s, "curve": run.curve})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "curve"}), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"config": vars(args) | {"json": str(args.json)}, "runs": rows}, indent=1))
    print(f"\n{time.perf_counter() - started:.0f} s")
    print("| residual carried from | final val loss | × synchronous lag | bytes sent |")
    print("| --- | --- | --- | --- |")
    first = float(str(rows[0]["val_loss"]))
    for row in rows:
        loss = float(str(row["val_loss"]))
        print(f"| e − {row['lag']} | {loss:.4f} | {loss / first:.3f} | {int(str(row['bytes_sent'])) / 1e6:.2f} MB |")


if __name__ == "__main__":
    main()
