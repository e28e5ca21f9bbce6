"""Does the thread count change the step's bits on this machine, and which matrix product does it?

The step is bitwise equal at any thread count on the development machine (``trainer.determinism``),
but a product's result can depend on how the BLAS library splits it over threads, and MKL chooses
by CPU. For each MKL setting in ``--cbwr`` (MKL's Conditional Numerical Reproducibility, read from
``MKL_CBWR`` at MKL's first call, so each setting runs in a process of its own; the trainer's own
is ``AUTO,STRICT``, :data:`trainer.MKL_CBWR`):

* **products**: every matrix product of the step at ``tiny``'s, ``demo``'s and ``small``'s shapes on
  random operands (each linear layer's forward ``x·Wᵀ``, input gradient ``g·W`` and weight gradient
  ``gᵀ·x``, whose inner dimension is the batch's tokens; the attention's two batched products and
  their four gradients) at 1, 2, 4 and 8 threads, bitwise against 1 thread;
* **segments**: one segment (8 steps from θ_0) of ``tiny`` and ``demo`` at the same thread counts,
  leaf hashes against 1 thread;
* **fingerprint**: :func:`trainer.fingerprint.compute_fingerprint` at 1 and 2 threads;
* **cost** (``--time-steps N``): the CPU time of ``N`` ``small`` steps at 2 threads in each mode.

Run: ``python bench/thread_invariance.py [--cbwr "" AUTO,STRICT] [--time-steps 30] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

CHILD = r"""
import json, os, sys, time, torch
import torch.nn.functional as F
from protocol.rules.beacon import genesis_seed
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.fingerprint import compute_fingerprint
from trainer.inner import EpochContext, replay_segment, start_checkpoint, train_steps
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.step import Stepper

# The trainer's import set its own mode (trainer.MKL_CBWR); MKL reads the variable only at its
# first call, which is below, so the mode under test replaces it here.
os.environ.pop("MKL_CBWR", None)
if sys.argv[1]:
    os.environ["MKL_CBWR"] = sys.argv[1]
time_steps = int(sys.argv[2])
configure(threads=1)
threads = [1, 2, 4, 8]
out = {"products": [], "segments": {}}
gen = torch.Generator().manual_seed(0)


def products(name):
    # Every matrix product of the preset's step, forward and backward, on random operands.
    spec = preset(name)
    p = spec.model.params
    d, heads, t, b = p["d_model"], p["n_head"], spec.data.seq_len, spec.train.batch_size
    rows = b * t
    found = {}
    for label, d_in, d_out in [("qkv", d, 3 * d), ("attn proj", d, d), ("mlp fc", d, 4 * d),
                               ("mlp proj", 4 * d, d), ("head", d, 256)]:
        x, w, g = (torch.randn(*shape, generator=gen) for shape in [(rows, d_in), (d_out, d_in), (rows, d_out)])
        found[f"{label} forward"] = lambda x=x, w=w: F.linear(x, w)
        found[f"{label} input grad"] = lambda g=g, w=w: g @ w
        found[f"{label} weight grad"] = lambda g=g, x=x: g.t() @ x
    q, k, v, dy = (torch.randn(b, heads, t, d // heads, generator=gen) for _ in range(4))
    att = torch.randn(b, heads, t, t, generator=gen)
    found["scores q.kT"] = lambda: q @ k.transpose(-2, -1)
    found["att.v"] = lambda: att @ v
    found["grad att (dy.vT)"] = lambda: dy @ v.transpose(-2, -1)
    found["grad v (attT.dy)"] = lambda: att.transpose(-2, -1) @ dy
    found["grad q (att.k)"] = lambda: att @ k
    found["grad k (attT.q)"] = lambda: att.transpose(-2, -1) @ q
    return found


for name in ("tiny", "demo", "small"):
    for label, fn in products(name).items():
        torch.set_num_threads(1)
        ref = fn()
        differing = []
        for t in threads[1:]:
            torch.set_num_threads(t)
            if not torch.equal(fn(), ref):
                differing.append(t)
        out["products"].append({"preset": name, "product": label, "threads_differing": differing})
for name in ("tiny", "demo"):
    spec = preset(name).with_changes(train={"inner_steps": 8, "segment_steps": 8})
    data = Dataset.load(spec.data)
    ctx = EpochContext(spec.run_id(), 0, "inj1threadbench", genesis_seed(spec.run_id()))
    start = start_checkpoint(spec, GlobalState.initial(spec).params, 0)
    hashes = {}
    for t in threads:
        torch.set_num_threads(t)
        hashes[t] = replay_segment(spec, data, ctx, start).leaf_hash().hex()
    out["segments"][name] = [t for t in threads if hashes[t] != hashes[1]]
    out["segments"][name + "_hash_1_thread"] = hashes[1][:16]
fp = {}
for t in (1, 2):
    torch.set_num_threads(t)
    fp[t] = compute_fingerprint(preset("tiny"))
out["fingerprint_differs_1_vs_2"] = fp[1] != fp[2]
if time_steps:
    # CPU time of `time_steps` small steps at 2 threads, after 2 warm-up steps.
    spec = preset("small")
    data = Dataset.load(spec.data)
    ctx = EpochContext(spec.run_id(), 0, "inj1threadbench", genesis_seed(spec.run_id()))
    torch.set_num_threads(2)
    stepper = Stepper(spec)
    stepper.load(start_checkpoint(spec, GlobalState.initial(spec).params, 0).state)
    train_steps(stepper, data, spec, ctx, range(2), 1)
    c0 = time.process_time()
    train_steps(stepper, data, spec, ctx, range(2, 2 + time_steps), 1)
    out["small_steps_cpu_s"] = time.process_time() - c0
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cbwr", nargs="+", default=["", "AUTO,STRICT", "COMPATIBLE"],
                        help="MKL_CBWR settings to run under ('' leaves MKL to choose)")
    parser.add_argument("--time-steps", type=int, default=0,
                        help="also time this many `small` steps at 2 threads per mode (CPU seconds)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []  # a child's JSON, or its error
    for cbwr in args.cbwr:
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE",
               "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
        res = subprocess.run([sys.executable, "-c", CHILD, cbwr, str(args.time_steps)], capture_output=True,
                             text=True, env=env)
        row: dict[str, Any]
        if res.returncode:
            row = {"cbwr": cbwr or "(MKL's choice)", "error": res.stderr.strip().splitlines()[-1:]}
        else:
            row = {"cbwr": cbwr or "(MKL's choice)", **json.loads(res.stdout.strip().splitlines()[-1])}
        rows.append(row)
        products = [f"{p['preset']} {p['product']} at {p['threads_differing']}"
                    for p in row.get("products", []) if p["threads_differing"]]
        timing = (f"; {args.time_steps} small steps: {row['small_steps_cpu_s']:.2f} s CPU"
                  if "small_steps_cpu_s" in row else "")
        print(f"MKL_CBWR={row['cbwr']}: segments differing from 1 thread {row.get('segments', row.get('error'))}; "
              f"fingerprint differs 1 vs 2: {row.get('fingerprint_differs_1_vs_2')}; "
              f"products differing: {products or 'none'}{timing}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
