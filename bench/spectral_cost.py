"""The Muon spectral check's cost at ``gpt124m``: the spectral norm of every Muon matrix, as
``verifier.measure.update_excess`` takes it once per checked segment or Δ, by the singular values
(``torch.linalg.matrix_norm(ord=2)`` in float64, the method before) and by the Gram matrix's largest
eigenvalue (:func:`verifier.spectral.spectral_norm`), beside the per-coordinate part of the check
(``update_excess`` without Muon) and one training step, all in one run on this CPU.

The matrices are random (normal entries scaled to 1e-4, the shapes of ``gpt124m``'s Muon matrices:
``trainer.step.uses_muon``): a cost figure, not a bound figure (LAPACK's work depends on the shape,
barely on the values). The step is ``gpt124m``'s model at ``--batch`` rows of ``--seq-len`` tokens
(the preset's 32 × 1024 does not fit minutes on this CPU); the preset's step is estimated from it
by tokens (×(32·1024)/(batch·seq_len), a lower bound: attention grows faster than the tokens).

With ``--device cuda`` the Gram-matrix norms and ``update_excess`` are timed on the GPU too (the
matrices already there; each norm is read back, so its time includes the wait), their norms are
compared with the CPU's, and the step runs on the GPU (``--batch 32 --seq-len 1024`` is the
preset's own step; ``--step-optimizer muon`` times a Muon step). ``--no-svd`` leaves out the
singular-value method.

Run: ``.venv/bin/python bench/spectral_cost.py [--threads 1] [--repeats 2] [--batch 4 --seq-len 256]``;
on a GPU: ``python3 bench/spectral_cost.py --threads 16 --no-svd --device cuda --batch 32 --seq-len 1024
--step-optimizer muon --steps 3``
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import time

import torch

from protocol.rules.beacon import genesis_seed
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.inner import EpochContext, start_checkpoint, train_steps
from trainer.model import parameter_shapes
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.step import Stepper, uses_muon
from verifier.measure import update_excess
from verifier.spectral import spectral_norm


def best_of(repeats: int, fn, device: str = "cpu") -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--no-step", action="store_true")
    parser.add_argument("--no-svd", action="store_true", help="leave out the singular-value method")
    parser.add_argument("--device", help="also time the check on this GPU (cuda or cuda:N), and step there")
    parser.add_argument("--step-optimizer", choices=["adamw", "muon"], default="adamw")
    parser.add_argument("--steps", type=int, default=1, help="timed steps after one warm-up step")
    args = parser.parse_args()
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be >= 1")
    configure(threads=args.threads, device=args.device or "cpu")
    full = preset("gpt124m").with_changes(train={"inner_optimizer": "muon"})
    shapes = parameter_shapes(full)
    gen = torch.Generator().manual_seed(0)
    muon = {n: torch.randn(tuple(s), generator=gen) * 1e-4 for n, s in shapes.items()
            if uses_muon(n, torch.empty(tuple(s), device="meta"), full.train)}
    out: dict = {"threads": args.threads, "load_avg_start": os.getloadavg()[0], "muon_matrices": len(muon),
                 "shapes": sorted({tuple(t.shape) for t in muon.values()}), "device": args.device,
                 "gpu": torch.cuda.get_device_name(args.device) if (args.device or "").startswith("cuda") else None}
    norms: dict[str, float] = {}
    per_shape: dict[str, dict[str, float]] = {}
    worst_gap = 0.0
    for n, t in muon.items():
        key = "x".join(map(str, t.shape))
        row = per_shape.setdefault(key, {"count": 0, "gram_s": 0.0, **({} if args.no_svd else {"svd_s": 0.0})})
        svd = eig = 0.0

        def by_svd(m: torch.Tensor = t) -> None:
            nonlocal svd
            svd = float(torch.linalg.matrix_norm(m.double(), ord=2))

        def by_gram(m: torch.Tensor = t) -> None:
            nonlocal eig
            eig = spectral_norm(m)

        row["count"] += 1
        row["gram_s"] += best_of(args.repeats, by_gram)
        norms[n] = eig
        if not args.no_svd:
            row["svd_s"] += best_of(args.repeats, by_svd)
            assert eig >= svd * (1 - 1e-12), (n, eig, svd)  # never below the singular-value method's
            worst_gap = max(worst_gap, abs(eig - svd) / svd)
    out["per_shape"] = per_shape
    out["check_gram_s"] = sum(r["gram_s"] for r in per_shape.values())
    if not args.no_svd:
        out["check_svd_s"] = sum(r["svd_s"] for r in per_shape.values())
        out["svd_over_gram"] = out["check_svd_s"] / out["check_gram_s"]
        out["max_relative_difference"] = worst_gap
    if args.device:
        # The same norms on the GPU, the matrices already there (a validator replaying on the GPU has them).
        on_gpu = {n: t.to(args.device) for n, t in muon.items()}
        spectral_norm(next(iter(on_gpu.values())))  # warm-up: cuSOLVER's handles and workspaces
        gpu_s, gpu_gap = 0.0, 0.0
        for n, t in on_gpu.items():
            value = 0.0

            def by_gram_gpu(m: torch.Tensor = t) -> None:
                nonlocal value
                value = spectral_norm(m)

            gpu_s += best_of(args.repeats, by_gram_gpu, args.device)
            gpu_gap = max(gpu_gap, abs(value - norms[n]) / norms[n])
        out["check_gram_gpu_s"] = gpu_s
        out["cpu_over_gpu"] = out["check_gram_s"] / gpu_s
        out["gpu_cpu_max_relative_difference"] = gpu_gap
    print(json.dumps(out), flush=True)

    # The per-coordinate part: update_excess over every parameter with AdamW (no spectral norm).
    start = {n: torch.randn(tuple(s), generator=gen) * 0.02 for n, s in shapes.items()}
    end = {n: t + torch.randn(t.shape, generator=gen) * 1e-5 for n, t in start.items()}
    adamw = full.train.model_copy(update={"inner_optimizer": "adamw"})
    out["per_coordinate_s"] = best_of(1, lambda: update_excess(start, end, adamw, 0, full.train.segment_steps))
    out["update_excess_muon_s"] = best_of(1, lambda: update_excess(start, end, full.train, 0, full.train.segment_steps))
    keys = ["per_coordinate_s", "update_excess_muon_s"]
    if args.device:
        start_gpu = {n: t.to(args.device) for n, t in start.items()}
        end_gpu = {n: t.to(args.device) for n, t in end.items()}
        update_excess(start_gpu, end_gpu, adamw, 0, full.train.segment_steps)  # warm-up
        out["per_coordinate_gpu_s"] = best_of(
            args.repeats, lambda: update_excess(start_gpu, end_gpu, adamw, 0, full.train.segment_steps), args.device)
        out["update_excess_muon_gpu_s"] = best_of(
            args.repeats, lambda: update_excess(start_gpu, end_gpu, full.train, 0, full.train.segment_steps),
            args.device)
        keys += ["per_coordinate_gpu_s", "update_excess_muon_gpu_s"]
        del start_gpu, end_gpu
        torch.cuda.empty_cache()
    print(json.dumps({k: out[k] for k in keys}), flush=True)

    if not args.no_step:
        spec = full.with_changes(train={"batch_size": args.batch, "inner_optimizer": args.step_optimizer},
                                 data={"seq_len": args.seq_len})
        dataset = Dataset.load(spec.data)
        run_id = spec.run_id()
        ctx = EpochContext(run_id, 0, "inj1spectralcostbench", genesis_seed(run_id))
        where = args.device or "cpu"
        stepper = Stepper(spec, device=where)
        stepper.load(start_checkpoint(spec, GlobalState.initial(spec).params, 0, 1).state)
        train_steps(stepper, dataset, spec, ctx, range(1), 1)  # warm-up: optimizer state, autograd buffers
        step = best_of(1, lambda: train_steps(stepper, dataset, spec, ctx, range(1, 1 + args.steps), 1),
                       where) / args.steps
        scale = full.train.batch_size * full.data.seq_len / (args.batch * args.seq_len)
        out["step"] = {"device": where, "optimizer": args.step_optimizer, "steps": args.steps,
                       "batch": args.batch, "seq_len": args.seq_len, "step_s": step,
                       "preset_step_s_estimate": step * scale, "scale": scale,
                       "segment_s_estimate": step * scale * full.train.segment_steps}
        print(json.dumps(out["step"]), flush=True)
    out["load_avg_end"] = os.getloadavg()[0]
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
