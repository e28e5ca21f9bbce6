"""Compressed pseudo-gradients against data parallelism, one worker and DiLoCo int8, at equal compute.

All runs in ONE process, one after the other, on the same data assignment (``trainer/diloco.py``):
K workers × T steps × ``batch`` rows each. The model is the demo preset with a smaller per-worker
batch (default 4 rows of 64 bytes instead of 16), so that K = 4 workers' batches together are what
one worker's gradient noise needs at the preset's constant learning rate: data parallelism (16 rows
a step) then beats one worker taking 4× the steps on 4 rows, which the demo preset's own batch does
not show (docs/benchmarks.md, "Trainer"). Reported per run: final validation loss (512 windows) ÷
data parallelism's, and data parallelism's bytes ÷ the run's (float32 gradients every step against
the Δ payloads every round).

Run: ``.venv/bin/python bench/compression.py --json /tmp/compression.json`` (defaults: K = 4,
T = 2000, batch 4; DiLoCo int8 at H = 50; topk2 with block 1024 at H ∈ {10, 20, 50}; ``--inner
adamw,muon`` repeats every DiLoCo run with each inner optimizer; ``--schedule int8@0,topk2/1024@10``
adds a run whose scheme changes by epoch, ``quantization.schedule``). ``--int8-h 10,20 --int8-outer 1,0``
runs dense DiLoCo at topk2's H and outer step: what DiLoCo costs before any sparsification.
``--preset small --device cuda`` runs every mode on a GPU (the trainer's Stepper; the Δ codecs and the
outer step stay on the CPU).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from protocol.rules.spec import parse_quant_schedule
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.diloco import Mode, simulate
from trainer.presets import preset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo", help="model and data (default: demo, shaped by --batch and --lr)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2000, help="T, steps per worker")
    parser.add_argument("--batch", type=int, default=4, help="rows per worker-step")
    parser.add_argument("--lr", default=None, help="inner learning rate (default: the preset's)")
    parser.add_argument("--runs", default="ddp,single,int8,topk2", help="which runs, in order")
    parser.add_argument("--int8-h", default="50", help="H values of the DiLoCo int8 runs")
    parser.add_argument("--int8-outer", default=None,
                        help="outer 'lr,momentum' of the int8 runs (default: the preset's 0.7, 0.9 Nesterov): "
                             "what DiLoCo costs without sparsification, at topk2's outer step")
    parser.add_argument("--topk-h", default="10,20,50", help="H values of the topk2 runs")
    parser.add_argument("--block", type=int, default=1024, help="topk2 block size (keeps 1/64 of it)")
    parser.add_argument("--topk-outer", default=None,
                        help="outer 'lr,momentum' of the topk2 runs (default: the preset's 0.7, 0.9 Nesterov; "
                             "SparseLoCo's error feedback replaces the outer momentum: '1,0')")
    parser.add_argument("--schedule", default=None,
                        help="also a run on this quantization.schedule (SCHEME[/BLOCK]@FROM,...), at the first "
                             "--topk-h and the topk2 outer step, e.g. int8@0,topk2/1024@10")
    parser.add_argument("--inner", default="adamw", help="inner optimizers of the DiLoCo runs: adamw, muon or both")
    parser.add_argument("--baseline-inner", default="adamw",
                        help="inner optimizer of the data-parallel and one-worker runs (the reference row)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu", help="where every run computes: cpu or cuda (trainer Stepper)")
    parser.add_argument("--evals", type=int, default=10, help="validation measurements per run (the last at the end)")
    parser.add_argument("--eval-windows", type=int, default=512, help="validation windows per measurement")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure(args.threads, device=args.device)
    train = {"batch_size": args.batch} | ({"lr": args.lr} if args.lr else {})
    base = preset(args.preset).with_changes(train=train)
    wanted = args.runs.split(",")
    dataset = Dataset.load(base.data)
    inners = args.inner.split(",")
    baselines: tuple[Mode, ...] = ("ddp", "single")
    runs: list[tuple[Mode, int, str, str]] = [(m, 50, "int8", args.baseline_inner) for m in baselines if m in wanted]
    if "int8" in wanted:
        runs += [("diloco", int(h), "int8", i) for h in args.int8_h.split(",") for i in inners]
    if "topk2" in wanted:
        runs += [("diloco", int(h), "topk2", i) for h in args.topk_h.split(",") for i in inners]
    if args.schedule:
        runs += [("diloco", int(args.topk_h.split(",")[0]), "schedule", i) for i in inners]
    results: list[dict[str, object]] = []
    started = time.perf_counter()
    for mode, h, scheme, inner in runs:
        quant: dict[str, object] = {"scheme": scheme, "block_size": args.block if scheme == "topk2" else 64}
        if scheme == "schedule":
            quant = parse_quant_schedule(args.schedule).model_dump(mode="json")
        outer = {}
        chosen = args.int8_outer if scheme == "int8" else args.topk_outer
        if chosen:
            lr, momentum = chosen.split(",")
            outer = {"lr": lr, "momentum": momentum}
        spec = base.with_changes(train={"inner_steps": h, "segment_steps": h, "inner_optimizer": inner},
                                 quantization=quant,
                                 **({"outer": outer} if outer else {}))
        run = simulate(spec, dataset, mode, args.workers, args.steps,
                       evals=args.evals, eval_windows=args.eval_windows, device=args.device)
        row: dict[str, object] = {"mode": mode, "H": h if mode == "diloco" else None,
                                  "outer": f"{spec.outer.lr},{spec.outer.momentum}" if mode == "diloco" else None,
                                  "quant": (args.schedule if scheme == "schedule" else scheme)
                                  if mode == "diloco" else None, "inner": inner,
                                  "val_loss": run.val_loss,
                                  "bytes_sent": run.bytes_sent, "quant_error": run.quant_error,
                                  "wall_s": run.wall_s, "curve": run.curve}
        results.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
        if args.json:
            args.json.write_text(json.dumps({"config": vars(args) | {"json": str(args.json)}, "runs": results},
                                            indent=1))
    ddp = results[0]
    print(f"\n{time.perf_counter() - started:.0f} s on {args.device}; torch threads {torch.get_num_threads()}")
    print("| run | final val loss | × data-parallel | bytes sent | data-parallel bytes ÷ run's |")
    print("| --- | --- | --- | --- | --- |")
    names = {"ddp": f"data-parallel (every step), {args.baseline_inner}",
             "single": f"one worker, {args.workers * args.steps} steps, {args.baseline_inner}"}
    for row in results:
        name = names.get(str(row["mode"]),
                         f"DiLoCo H = {row['H']}, {row['quant']}, inner {row['inner']}, outer {row['outer']}")
        sent, loss = int(str(row["bytes_sent"])), float(str(row["val_loss"]))
        ratio = f"{int(str(ddp['bytes_sent'])) / sent:,.0f}×" if sent else "—"
        print(f"| {name} | {loss:.4f} | {loss / float(str(ddp['val_loss'])):.3f} | {sent / 1e6:,.2f} MB | {ratio} |")

if __name__ == "__main__":
    main()
