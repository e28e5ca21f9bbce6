"""How precise a proposal's validation loss is on n evenly spread windows (``spec.data.val_windows``).

Trains the preset's model with the trainer's step function on the protocol's batches for
``--steps`` steps (model A), then ``--steps`` more (model B), and scores both on n = 128, 256 and
512 windows (``trainer.evaluate.validation_loss``, what a host posts) and on every non-overlapping
window of the validation split. Reports each n-window estimate's error against the whole split,
the spread of per-window losses, and from it the standard error of an n-window estimate and of the
difference between two models on the same windows (what an epoch-to-epoch comparison sees).

Run: ``.venv/bin/python bench/val_windows.py [--preset small] [--steps 300] [--json FILE]``
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from protocol.keys import encode_address
from protocol.rules.beacon import genesis_seed
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.evaluate import validation_loss
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.step import Stepper, TrainState, epoch_rng_key

HOST = encode_address(bytes([7] * 20))
SIZES = (128, 256, 512)


@torch.no_grad()
def per_window(model: torch.nn.Module, dataset: Dataset, starts: list[int]) -> list[float]:
    """Mean cross-entropy (nats per byte) of each validation window at ``starts``."""
    model.eval()
    out: list[float] = []
    for i in range(0, len(starts), 64):
        x, y = dataset.windows(starts[i:i + 64], split="val")
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="none")
        out += loss.reshape(len(x), -1).mean(1).tolist()
    model.train()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--steps", type=int, default=300, help="steps before each of the two models is scored")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure(args.threads)
    spec = preset(args.preset)
    dataset = Dataset.load(spec.data)
    run_id, seed = spec.run_id(), genesis_seed(spec.run_id())
    stepper = Stepper(spec)
    stepper.load(TrainState.fresh(dict(GlobalState.initial(spec).params), epoch_rng_key(spec.train.seed, 0)))
    length = dataset.seq_len
    grid = list(range(0, len(dataset.val) - length, length))  # every non-overlapping window
    scored: dict[str, dict] = {}
    t0, step = time.perf_counter(), 0
    for name in ("A", "B"):
        for _ in range(args.steps):
            stepper.step(*dataset.batch(run_id, seed, HOST, step, spec.train.batch_size))
            step += 1
        losses = per_window(stepper.model, dataset, grid)
        scored[name] = {"steps": step, "whole_split": statistics.fmean(losses), "sd_window": statistics.stdev(losses),
                        "per_window": losses,
                        **{str(n): validation_loss(stepper.model, dataset, n) for n in SIZES}}
        print(json.dumps({k: v for k, v in scored[name].items() if k != "per_window"}
                         | {"seconds": round(time.perf_counter() - t0)}), flush=True)
    a, b = scored["A"], scored["B"]
    sd_diff = statistics.stdev(y - x for x, y in zip(a["per_window"], b["per_window"], strict=True))
    result: dict = {"preset": args.preset, "windows_in_split": len(grid), "sd_diff": sd_diff,
                    "diff_whole_split": b["whole_split"] - a["whole_split"],
                    "models": {k: {n: v for n, v in m.items() if n != "per_window"} for k, m in scored.items()}}
    for n in SIZES:
        shrink = math.sqrt(max(0.0, 1 - n / len(grid)))  # finite population: n of the split's windows
        result[str(n)] = {"error_A": a[str(n)] - a["whole_split"], "error_B": b[str(n)] - b["whole_split"],
                          "se": max(a["sd_window"], b["sd_window"]) / math.sqrt(n) * shrink,
                          "diff": b[str(n)] - a[str(n)], "se_diff": sd_diff / math.sqrt(n) * shrink}
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
