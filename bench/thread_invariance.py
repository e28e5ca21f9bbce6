"""Does the thread count change the step's bits on this machine, and which matrix product does it?

The step is bitwise equal at any thread count on the development machine (``trainer.determinism``),
but a product's result can depend on how the BLAS library splits it over threads, and MKL chooses
by CPU. For each MKL setting in ``--cbwr`` (MKL's Conditional Numerical Reproducibility, read from
``MKL_CBWR`` at MKL's first call, so each setting runs in a process of its own; the trainer's own
is ``AUTO,STRICT``, :data:`trainer.MKL_CBWR`):

* **products**: the step's three products of each linear layer at the presets' shapes (forward
  ``x·Wᵀ``, input gradient ``g·W``, weight gradient ``gᵀ·x``, whose inner dimension is the batch's
  tokens) at 1, 2, 4 and 8 threads, bitwise against 1 thread;
* **segments**: one segment (8 steps from θ_0) of ``tiny`` and ``demo`` at the same thread counts,
  leaf hashes against 1 thread;
* **fingerprint**: :func:`trainer.fingerprint.compute_fingerprint` at 1 and 2 threads.

Run: ``python bench/thread_invariance.py [--cbwr "" AUTO,STRICT] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, os, sys, torch
import torch.nn.functional as F
from protocol.rules.beacon import genesis_seed
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.fingerprint import compute_fingerprint
from trainer.inner import EpochContext, replay_segment, start_checkpoint
from trainer.outer import GlobalState
from trainer.presets import preset

# The trainer's import set its own mode (trainer.MKL_CBWR); MKL reads the variable only at its
# first call, which is below, so the mode under test replaces it here.
os.environ.pop("MKL_CBWR", None)
if sys.argv[1]:
    os.environ["MKL_CBWR"] = sys.argv[1]
configure(threads=1)
threads = [1, 2, 4, 8]
out = {"products": [], "segments": {}}
gen = torch.Generator().manual_seed(0)
# (tokens, d_in, d_out): tiny and small's attention and MLP products, small's head
for tokens, d_in, d_out in [(512, 64, 192), (512, 64, 256), (1024, 256, 768), (1024, 256, 1024),
                            (1024, 1024, 256), (1024, 256, 256)]:
    x = torch.randn(tokens, d_in, generator=gen)
    w = torch.randn(d_out, d_in, generator=gen)
    g = torch.randn(tokens, d_out, generator=gen)
    ref = None
    diff = {"forward": [], "input_grad": [], "weight_grad": []}
    for t in threads:
        torch.set_num_threads(t)
        got = {"forward": F.linear(x, w), "input_grad": g @ w, "weight_grad": g.t() @ x}
        ref = ref or got
        for k in diff:
            if not torch.equal(got[k], ref[k]):
                diff[k].append(t)
    out["products"].append({"shape": [tokens, d_in, d_out], "threads_differing": diff})
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
fp = {}
for t in (1, 2):
    torch.set_num_threads(t)
    fp[t] = compute_fingerprint(preset("tiny"))
out["fingerprint_differs_1_vs_2"] = fp[1] != fp[2]
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cbwr", nargs="+", default=["", "AUTO,STRICT", "COMPATIBLE"],
                        help="MKL_CBWR settings to run under ('' leaves MKL to choose)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for cbwr in args.cbwr:
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE",
               "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))}
        res = subprocess.run([sys.executable, "-c", CHILD, cbwr], capture_output=True, text=True, env=env)
        if res.returncode:
            row = {"cbwr": cbwr or "(MKL's choice)", "error": res.stderr.strip().splitlines()[-1:]}
        else:
            row = {"cbwr": cbwr or "(MKL's choice)", **json.loads(res.stdout.strip().splitlines()[-1])}
        rows.append(row)
        products = [f"{p['shape']}: " + ", ".join(f"{k} at {v}" for k, v in p["threads_differing"].items() if v)
                    for p in row.get("products", []) if any(p["threads_differing"].values())]
        print(f"MKL_CBWR={row['cbwr']}: segments differing from 1 thread {row.get('segments', row.get('error'))}; "
              f"fingerprint differs 1 vs 2: {row.get('fingerprint_differs_1_vs_2')}; "
              f"products differing: {products or 'none'}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
