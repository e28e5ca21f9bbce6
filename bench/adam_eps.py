"""AdamW's ε: 1e-8 (the usual default) against 1e-6 (the run spec's default), side by side.

For each ε on the same data: the validation loss of one worker after ``--steps`` steps of the
preset's model (``trainer.diloco.simulate``, mode ``single``), and the honest replay error across
thread counts — an epoch of the preset trained at 1 and at 2 threads from θ_0 and from θ after
``--warm`` steps, every segment replayed at the other thread count (``verifier.tolerance``): the
largest per-tensor distance and elementwise moment error. ε bounds how much AdamW amplifies the
rounding noise of a near-zero gradient into a step (``docs/verification.md``).

Run: ``.venv/bin/python bench/adam_eps.py [--preset demo] [--steps 1500] [--warm 512] [--json FILE]``
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import time
from pathlib import Path

from protocol.keys import encode_address
from protocol.rules.beacon import genesis_seed
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.diloco import simulate
from trainer.inner import EpochContext, start_checkpoint, train_steps
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.step import Stepper
from verifier.tolerance import Setup, measure_pairs

HOST = encode_address(bytes([7] * 20))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--steps", type=int, default=1500, help="training steps for the validation loss")
    parser.add_argument("--warm", type=int, default=512, help="steps before the second replay stage")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for eps in ("0.00000001", "0.000001"):
        t0 = time.perf_counter()
        spec = preset(args.preset).with_changes(train={"eps": eps})
        dataset = Dataset.load(spec.data)
        configure(1)
        one = spec.with_changes(train={"inner_steps": 50, "segment_steps": 50})
        val = simulate(one, dataset, "single", 1, args.steps, evals=1).val_loss
        ctx = EpochContext(spec.run_id(), 0, HOST, genesis_seed(spec.run_id()))
        worst = {"distance": 0.0, "moment_error": 0.0}
        for stage in (0, args.warm):
            theta = GlobalState.initial(spec).params
            if stage:
                stepper = Stepper(spec)
                stepper.load(start_checkpoint(spec, theta, 0).state)
                long = spec.with_changes(train={"inner_steps": stage, "segment_steps": stage})
                train_steps(stepper, dataset, long, EpochContext(ctx.run_id, 99, HOST, ctx.prev_epoch_seed),
                            range(stage), 1)
                theta = stepper.export().params
            setups = [Setup(threads=1), Setup(threads=2)]
            for pair in measure_pairs(spec, dataset, ctx, theta, setups, setups):
                if pair.host != pair.validator:
                    found = pair.summary()
                    worst = {k: max(worst[k], float(found[k])) for k in worst}
        row = {"preset": args.preset, "eps": eps, "val_loss": val, "steps": args.steps,
               "honest_max_distance": worst["distance"], "honest_max_moment_error": worst["moment_error"],
               "seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
