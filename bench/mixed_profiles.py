"""A network of mixed CPU profiles verified by compute-profile classes: 0 honest fails within a class.

Each compute profile this machine can force is one class (``protocol.rules.classes``): this CPU's
own kernels (AVX-512, MKL strict), torch's AVX2 kernels (``ATEN_CPU_CAPABILITY=avx2``, what an
AVX2-only CPU runs), MKL limited to AVX2 (``MKL_ENABLE_INSTRUCTIONS=AVX2``, strict) and generic
kernels with MKL's generic branch (``ATEN_CPU_CAPABILITY=default``, ``MKL_CBWR=COMPATIBLE``).
``--classes`` keeps some of them. For each preset, from θ after ``--warm`` honest steps (2,048 by default),
an honest host of every class trains one epoch at 1 thread and a validator of every class replays
every segment at 2 threads (``verifier.tolerance``: the verifier's own measures). With classes, a
host is checked only by validators of its own class (the contract draws its pickers and its dispute
voters there), so what matters is the within-class pairs: an honest fail is a segment whose replay
breaks τ, the moment tolerance or the loss tolerance. The cross-class pairs are what one class for
everyone would have checked too; they are reported for contrast.

With ``--device cuda`` the GPU is one more class (host and validator on the device; the thread count
is the CPU side's) and the warm-up steps run there. The class each setup declares is its compute
fingerprint (``trainer.fingerprint``), computed in a process started with the setup's environment,
at 1 and 2 threads, for every class this machine has (``--classes`` narrows the pairs only), the
processes side by side.

Run: ``.venv/bin/python bench/mixed_profiles.py [--presets tiny demo small] [--warm 2048] [--json out.json]``;
on a GPU: ``python3 bench/mixed_profiles.py --device cuda --classes cuda "native (avx512)"``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench.*

from bench.verifier_calibrate import HOST, warm
from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import RunSpec
from trainer.data import Dataset
from trainer.inner import EpochContext
from trainer.presets import preset
from verifier.tolerance import PairResult, Setup, measure_pairs

SEGMENTS = {"tiny": (8, 32), "demo": (10, 30), "small": (12, 24)}
"""(c, H) of the measured epoch per preset: each preset's own segment length, a few segments."""


def profiles(device: str | None = None) -> dict[str, tuple[Setup, Setup]]:
    """Class name -> (host setup at 1 thread, validator setup at 2 threads), for the profiles this CPU
    can compute in, and ``device`` (a GPU, named ``cuda``) when given."""
    best = torch.backends.cpu.get_cpu_capability().lower()
    out = {f"native ({best})": (Setup(threads=1), Setup(threads=2))}
    if device is not None:
        out[torch.device(device).type] = (Setup(device=device, threads=1), Setup(device=device, threads=2))
    if best == "avx512":
        out["avx2"] = (Setup(threads=1, isa="avx2"), Setup(threads=2, isa="avx2"))
        out["MKL limited to AVX2"] = (Setup(threads=1, mkl_instructions="avx2"),
                                      Setup(threads=2, mkl_instructions="avx2"))
    if best != "default":
        out["generic, MKL compatible"] = (Setup(threads=1, isa="default", mkl="compatible"),
                                          Setup(threads=2, isa="default", mkl="compatible"))
    return out


def fingerprint(spec: RunSpec, setup: Setup) -> str:
    """``compute_fingerprint`` in a fresh process with ``setup``'s kernels, threads and device."""
    code = ("import sys; from trainer.determinism import configure; from protocol.rules.spec import RunSpec; "
            "from trainer.fingerprint import compute_fingerprint; "
            f"configure({setup.threads}, {setup.device!r}); "
            f"print(compute_fingerprint(RunSpec.from_canonical(sys.stdin.buffer.read()), {setup.device!r}))")
    env = {**os.environ, **setup.environment()}
    done = subprocess.run([sys.executable, "-c", code], input=spec.canonical(), env=env, capture_output=True,
                          check=True)
    return done.stdout.decode().strip()


def fails(pair: PairResult, spec: RunSpec) -> int:
    """Segments of ``pair`` whose replay breaks a threshold of the run (an honest fail)."""
    ver = spec.verification
    return sum(c.distance > float(ver.tau) or c.moment_error > float(ver.moment_tolerance)
               or c.loss_diff > float(ver.loss_tolerance) for c in pair.segments)


def measure(name: str, steps: int, keep: list[str] | None, cache_dir: Path | None, device: str | None = None) -> dict:
    c, h = SEGMENTS[name]
    spec = preset(name).with_changes(train={"inner_steps": h, "segment_steps": c})
    dataset = Dataset.load(spec.data, cache_dir)
    ctx = EpochContext(spec.run_id(), 0, HOST, genesis_seed(spec.run_id()))
    t0 = time.perf_counter()
    every = profiles(device)
    unknown = set(keep or ()) - set(every)
    if unknown:
        raise SystemExit(f"no class {sorted(unknown)} on this machine; it has {list(every)}")
    classes = {k: v for k, v in every.items() if keep is None or k in keep}
    jobs = [(cls, t, replace(hs, threads=t)) for cls, (hs, _) in every.items() for t in (1, 2)]
    with ThreadPoolExecutor(max(1, min(len(jobs), (os.cpu_count() or 1) // 2))) as pool:
        found = list(pool.map(lambda job: fingerprint(spec, job[2]), jobs))
    prints: dict[str, dict[int, str]] = {}
    for (cls, t, _), fp in zip(jobs, found, strict=True):
        prints.setdefault(cls, {})[t] = fp
    theta = warm(spec, dataset, ctx, steps, device or "cpu")
    pairs = measure_pairs(spec, dataset, ctx, theta, [hs for hs, _ in classes.values()],
                          [vs for _, vs in classes.values()], cache_dir=cache_dir)
    label = {setup.profile: cls for cls, (setup, _) in classes.items()}
    rows: list[dict[str, Any]] = [{"host_class": label[p.host.profile], "validator_class": label[p.validator.profile],
             "same_class": p.same_profile, "segments": len(p.segments), "bitwise": p.bitwise,
             "fails": fails(p, spec), "distance": max(x.distance for x in p.segments),
             "moment_error": max(x.moment_error for x in p.segments)} for p in pairs]
    within = [r for r in rows if r["same_class"]]
    across = [r for r in rows if not r["same_class"]]
    return {"preset": name, "c": c, "H": h, "warm": steps, "warm_device": device or "cpu", "classes": list(classes),
            "fingerprints": {cls: {str(t): fp[:16] for t, fp in fps.items()} for cls, fps in prints.items()},
            "one_class_per_profile": all(len(set(fps.values())) == 1 for fps in prints.values())
            and len({fps[1] for fps in prints.values()}) == len(prints),
            "within": {"pairs": len(within), "segments": sum(r["segments"] for r in within),
                       "honest_fails": sum(r["fails"] for r in within), "bitwise": all(r["bitwise"] for r in within)},
            "across": {"pairs": len(across), "segments": sum(r["segments"] for r in across),
                       "honest_fails": sum(r["fails"] for r in across),
                       "max_distance": max((r["distance"] for r in across), default=0.0)},
            "rows": rows, "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "demo", "small"], choices=sorted(SEGMENTS))
    parser.add_argument("--warm", type=int, default=2048, help="honest steps from θ_0 before the measured epoch")
    parser.add_argument("--classes", nargs="+", help="pairs of these classes only (names as printed)")
    parser.add_argument("--device", help="a GPU as one more class (cuda or cuda:N); the warm-up runs there")
    parser.add_argument("--json", type=Path, help="write every result here")
    args = parser.parse_args()
    results = []
    for name in args.presets:
        result = measure(name, args.warm, args.classes, None, args.device)
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "rows"}), flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
