"""The first outer rounds of DiLoCo under different outer optimizers (chain-free, 4 workers).

Why it exists: with DiLoCo's outer step (SGD, lr 0.7, Nesterov momentum 0.9) the ``tiny`` preset's
validation loss rises after the second round before falling steadily — momentum builds up before
the pseudo-gradients settle. This bench shows that behaviour next to plainer outer steps, so a
bump in an early epoch of ``simulate`` or a devnet run is recognised for what it is. Run:

    .venv/bin/python bench/outer_warmup.py --preset tiny --rounds 6
"""

from __future__ import annotations

import argparse
import time

import torch

from trainer.data import Dataset
from trainer.diloco import simulate
from trainer.presets import preset

OUTER = [("0.7", "0.9", True), ("0.7", "0.5", True), ("1.0", "0", False), ("0.4", "0.9", True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    spec = preset(args.preset)
    dataset = Dataset.load(spec.data)
    steps = spec.train.inner_steps * args.rounds
    print(f"| outer lr | momentum | Nesterov | inner AdamW state | validation loss after round 1…{args.rounds} |")
    print("| --- | --- | --- | --- | --- |")
    for lr, momentum, nesterov in OUTER:
        for state in (("fresh", "kept") if (lr, momentum) == ("0.7", "0.9") else ("fresh",)):
            s = spec.with_changes(outer={"lr": lr, "momentum": momentum, "nesterov": nesterov})
            t0 = time.perf_counter()
            result = simulate(s, dataset, "diloco", workers=args.workers, steps=steps, evals=args.rounds,
                              eval_windows=256, inner_state=state)
            curve = " → ".join(f"{v:.3f}" for _, v in result.curve)
            print(f"| {lr} | {momentum} | {nesterov} | {state} | {curve} |  <!-- {time.perf_counter() - t0:.0f} s -->",
                  flush=True)


if __name__ == "__main__":
    main()
