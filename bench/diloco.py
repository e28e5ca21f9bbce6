"""DiLoCo vs synchronous data parallelism vs one worker, at equal compute, on the demo preset.

All runs in ONE process, one after the other, on the same data assignment (see
:mod:`trainer.diloco`): K workers × T steps × ``batch_size`` rows each. Reported per run: final
validation loss (nats/byte, 512 evenly spread validation windows), bytes sent by all workers
(float32 gradients every step for data parallelism; the quantized Δ payload every round for
DiLoCo), and the loss curve. Then the quantization error of real pseudo-gradients under each scheme
and block size.

Run: ``.venv/bin/python bench/diloco.py --json /tmp/diloco.json`` (defaults: K=4, T=2000,
H ∈ {10, 50, 100} with int8 Δs, plus H=50 with float32 and int4 Δs, and H=50 with each worker's
AdamW state kept across rounds instead of the protocol's fresh state per epoch; the DiLoCo runs
aggregate with the demo preset's rule, centered clipping, unless ``--rule mean``).
Plain averaging at H=50 only: ``--rule mean --inner-steps 50 --quant-h 0 --no-baselines``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Literal

import torch

from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import QuantizationSpec
from trainer.data import Dataset
from trainer.delta import dequantize, payload_bytes, pseudo_gradient, quantize, relative_error
from trainer.determinism import configure
from trainer.diloco import Mode, simulate
from trainer.inner import EpochContext, start_checkpoint, train_steps
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.step import Stepper


def quantization_errors(spec, dataset: Dataset, warm_steps: int, h: int) -> list[dict]:
    """Relative L2 error of real Δs (H inner steps from θ_0 and from a model trained warm_steps)."""
    stepper = Stepper(spec)
    run_id = spec.run_id()
    ctx = EpochContext(run_id, 0, "worker-0", genesis_seed(run_id))
    rows = []
    theta = GlobalState.initial(spec).params
    for label, warm in (("from θ_0", 0), (f"after {warm_steps} steps", warm_steps)):
        stepper.load(start_checkpoint(spec, theta, 0).state)
        train_steps(stepper, dataset, spec, ctx, range(warm), 1)
        start = stepper.export().params
        stepper.load(start_checkpoint(spec, start, 1).state)
        train_steps(stepper, dataset, spec, EpochContext(run_id, 1, "worker-0", ctx.prev_epoch_seed), range(h), 1)
        delta = pseudo_gradient(start, stepper.export().params)
        shapes = {n: t.shape for n, t in delta.items()}
        fp32 = payload_bytes(delta)
        for scheme in ("int8", "int4"):
            for block in (32, 64, 128, 256):
                quant = QuantizationSpec(scheme=scheme, block_size=block)
                started = time.perf_counter()
                payload = quantize(delta, quant)
                seconds = time.perf_counter() - started
                rows.append({"delta": label, "scheme": scheme, "block": block,
                             "rel_error": relative_error(delta, dequantize(payload, shapes, quant)),
                             "compression_vs_fp32": fp32 / payload_bytes(payload),
                             "quantize_ms": 1000 * seconds})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--steps", type=int, default=2000, help="T, steps per worker")
    parser.add_argument("--inner-steps", default="10,50,100", help="H values for DiLoCo (int8 Δs)")
    parser.add_argument("--quant-h", type=int, default=50,
                        help="H at which float32 and int4 Δs, and AdamW state kept across rounds, are also run")
    parser.add_argument("--rule", help="aggregation rule of the DiLoCo runs (default: the demo preset's)")
    parser.add_argument("--no-baselines", action="store_true", help="skip the data-parallel and single-worker runs")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure(args.threads)
    base = preset("demo")
    dataset = Dataset.load(base.data)
    if args.rule:
        base = base.with_changes(aggregation={"rule": args.rule})
    # (mode, H, Δ scheme, inner AdamW state across rounds)
    runs: list[tuple[Mode, int, str, Literal["fresh", "kept"]]] = (
        [] if args.no_baselines else [("ddp", 50, "int8", "fresh"), ("single", 50, "int8", "fresh")])
    runs += [("diloco", int(h), "int8", "fresh") for h in args.inner_steps.split(",")]
    if args.quant_h:
        runs += [("diloco", args.quant_h, "none", "fresh"), ("diloco", args.quant_h, "int4", "fresh"),
                 ("diloco", args.quant_h, "int8", "kept")]
    results: list[dict[str, Any]] = []  # one row per run (JSON)
    for mode, h, scheme, inner_state in runs:
        spec = base.with_changes(train={"inner_steps": h, "segment_steps": h}, quantization={"scheme": scheme})
        r = simulate(spec, dataset, mode, args.workers, args.steps, inner_state=inner_state)
        diloco = mode == "diloco"
        row = {"mode": mode, "rule": spec.aggregation.rule if diloco else None, "H": h if diloco else None,
               "quant": scheme if diloco else None,
               "inner_state": inner_state if diloco else None, "val_loss": r.val_loss, "bytes_sent": r.bytes_sent,
               "quant_error": r.quant_error, "wall_s": r.wall_s, "curve": r.curve}
        results.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "curve"}), flush=True)
        if args.json:
            config = vars(args) | {"json": str(args.json)}
            args.json.write_text(json.dumps({"config": config, "runs": results}, indent=1))
    quant_rows = quantization_errors(base, dataset, warm_steps=500, h=args.quant_h) if args.quant_h else []
    for q in quant_rows:
        print(json.dumps(q), flush=True)

    ddp = next((r for r in results if r["mode"] == "ddp"), None)
    if ddp is None:
        return
    print("\n| run | final val loss | × data-parallel | bytes sent | ddp bytes ÷ run bytes | wall s |")
    print("|---|---|---|---|---|---|")
    for done in results:
        name = (done["mode"] if done["mode"] != "diloco"
                else f"DiLoCo H={done['H']} ({done['quant']}, {done['inner_state']} AdamW)")
        ratio = f"{ddp['bytes_sent'] / done['bytes_sent']:.0f}×" if done["bytes_sent"] else "—"
        print(f"| {name} | {done['val_loss']:.4f} | {done['val_loss'] / ddp['val_loss']:.4f} | "
              f"{done['bytes_sent'] / 1e6:.1f} MB | {ratio} | {done['wall_s']:.0f} |")
    if args.json:
        args.json.write_text(json.dumps({"config": vars(args) | {"json": str(args.json)}, "runs": results,
                                         "quantization": quant_rows, "torch_threads": torch.get_num_threads()},
                                        indent=1))


if __name__ == "__main__":
    main()
