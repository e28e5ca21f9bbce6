"""Calibrate the verifier's thresholds: honest replay error across setups against the nearest cheats.

Honest part — the cross-hardware tolerance harness (``verifier.tolerance``): for each preset,
segment length c and training stage, an honest host trains one epoch in each host setup (1 and 2
CPU threads, a 2-process gloo island, ``--device cuda`` when given, and — another compute profile
on this machine — AVX2 kernels) and a validator replays every segment in each validator setup (1
and 2 threads, the device, AVX2 kernels, and MKL's generic branch with generic torch kernels), with
the verifier's own measures (``verifier.measure.compare``): the largest per-tensor relative distance
(what ``tau`` bounds), the largest elementwise moment error (``moment_tolerance``), the largest
per-step loss difference (``loss_tolerance``), and the update ratio ``‖θ_end − θ_start‖ / (lr · √(c · N))``.
Pairs within one compute profile (threads and islands) and across profiles are summarised apart:
the run's thresholds are set for the first, the second says what a run mixing kinds of CPU (or a
CPU and a GPU) would need.

Cheats, replayed honestly from the same leaves (segment 0 and a middle one, the smaller value
kept): one step of the segment skipped, one step on another host's batch, the learning rate
× 1.01 and × 1.001, one step (first or last) computed in bfloat16 or float16 (autocast), and the
forgeries that passed the old global tolerance: second moments of 10 % of the coordinates × 0.25,
first moments of coordinates no gradient reached set to 0.1 of their tensor's RMS √v, and the
parameters moved along the loss gradient by 0.9 of the old τ (0.009 of the segment's update).

Stages: ``θ_0`` and θ after ``--warm`` honest steps (single-thread training from θ_0).

Run: ``.venv/bin/python bench/verifier_calibrate.py [--quick] [--device cuda] [--json out.json]``;
one preset at its own segment length: ``--preset small --segment-steps 4 --inner-steps 16 --warm 256``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import math
import time
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from protocol.keys import encode_address
from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.inner import EpochContext, replay_segment, start_checkpoint, train_steps
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.step import Stepper, TrainState
from verifier.measure import compare, expected_update, leaf_moment_check, parameter_count, update_excess, update_norm
from verifier.tolerance import Setup, measure_pairs, train_honest

HOST = encode_address(bytes([7] * 20))


def warm(spec: RunSpec, dataset: Dataset, ctx: EpochContext, steps: int,
         device: str = "cpu") -> dict[str, torch.Tensor]:
    """θ after ``steps`` honest single-thread steps from θ_0 on ``device``, as a new epoch's start
    (CPU tensors)."""
    theta = GlobalState.initial(spec).params
    if steps == 0:
        return theta
    configure(1, device)
    stepper = Stepper(spec, device=device)
    stepper.load(start_checkpoint(spec, theta, 0).state)
    long = spec.with_changes(train={"inner_steps": steps, "segment_steps": steps})
    train_steps(stepper, dataset, long, EpochContext(ctx.run_id, 99, ctx.host, ctx.prev_epoch_seed), range(steps), 1)
    return {n: t.clone() for n, t in stepper.export().params.items()}


def _clone(state: TrainState, **changes: Any) -> TrainState:
    copy = TrainState(params={n: t.clone() for n, t in state.params.items()},
                      exp_avg={n: t.clone() for n, t in state.exp_avg.items()},
                      exp_avg_sq={n: t.clone() for n, t in state.exp_avg_sq.items()},
                      step=state.step, rng_key=state.rng_key)
    return replace(copy, **changes)


def cheat_segment(spec: RunSpec, dataset: Dataset, ctx: EpochContext, start: Checkpoint, kind: str) -> Checkpoint:
    """The segment from ``start`` with one cheat (see the module docstring)."""
    configure(1)
    c = spec.train.segment_steps
    if kind.startswith("lr x"):
        lr = Decimal(kind[4:]) * spec.train.lr
        stepper = Stepper(spec.with_changes(train={"lr": str(lr)}))
    else:
        stepper = Stepper(spec)
    stepper.load(start.state)
    other = EpochContext(ctx.run_id, ctx.epoch, ctx.host + "-elsewhere", ctx.prev_epoch_seed)
    losses: list[float] = []
    first = start.state.step
    for t in range(first, first + c):
        i = t - first
        if kind == "skip one step" and i == c // 2:
            state = stepper.export()
            state.step += 1
            stepper.load(state)
            losses.append(losses[-1] if losses else float(math.log(256)))
            continue
        use = other if kind == "other data for one step" and i == c // 2 else ctx
        low = None
        for dtype in ("bfloat16", "float16"):
            at = {f"{dtype} last step": c - 1, f"{dtype} first step": 0}
            if at.get(kind) == i:
                low = getattr(torch, dtype)
        if low is not None:
            with torch.autocast("cpu", dtype=low):
                losses += train_steps(stepper, dataset, spec, use, range(t, t + 1), 1)
        else:
            losses += train_steps(stepper, dataset, spec, use, range(t, t + 1), 1)
    return Checkpoint(stepper.export(), torch.tensor(losses, dtype=torch.float32), 1)


def forged_segment(spec: RunSpec, dataset: Dataset, ctx: EpochContext, start: Checkpoint, honest: Checkpoint,
                   kind: str) -> Checkpoint:
    """The honest end ``honest`` of the segment from ``start`` with one of the forgeries the old
    global τ let through."""
    s = honest.state
    if kind == "v x0.25 on 10% of coordinates":
        gen = torch.Generator().manual_seed(1)
        v = {n: torch.where(torch.rand(t.shape, generator=gen) < 0.1, t * 0.25, t) for n, t in s.exp_avg_sq.items()}
        return Checkpoint(_clone(s, exp_avg_sq=v), honest.losses, 1)
    if kind == "m on untouched coordinates":
        m = {}
        for n, t in s.exp_avg.items():
            rms = float(s.exp_avg_sq[n].double().sqrt().pow(2).mean().sqrt())
            m[n] = torch.where(s.exp_avg_sq[n] == 0, torch.full_like(t, 0.1 * rms), t)
        return Checkpoint(_clone(s, exp_avg=m), honest.losses, 1)
    # parameters 0.9 × the old τ (0.01) along the loss gradient, relative to the segment's update
    stepper = Stepper(spec)
    stepper.load(s)
    x, y = dataset.batch(ctx.run_id, ctx.prev_epoch_seed, ctx.host, s.step, spec.train.batch_size)
    logits = stepper.model(x)
    F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).backward()
    grad = {}
    for n, p in stepper.named.items():
        assert p.grad is not None, n  # every parameter takes part in the loss
        grad[n] = p.grad.detach()
    gnorm = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grad.values()))
    size = 0.009 * update_norm(s, start.state)
    return Checkpoint(_clone(s, params={n: s.params[n] + grad[n] * (size / gnorm) for n in s.params}),
                      honest.losses, 1)


CHEATS = ["skip one step", "other data for one step", "lr x1.01", "lr x1.001", "bfloat16 last step",
          "bfloat16 first step", "float16 last step", "float16 first step"]
FORGERIES = ["v x0.25 on 10% of coordinates", "m on untouched coordinates", "params 0.9 old τ along the gradient"]


def judge(spec: RunSpec, start: Checkpoint, replayed: Checkpoint, committed: Checkpoint) -> dict:
    """Every measure of a committed segment against the honest replay, and which checks it fails."""
    found = compare(replayed.state, committed.state, start.state, spec.train, replayed.losses, committed.losses)
    ver = spec.verification
    leaf_ok = leaf_moment_check(committed.state, spec.train)[1] is None
    excess, _ = update_excess(start.state.params, committed.state.params, spec.train, start.state.step,
                              spec.train.segment_steps)
    return {"distance": found.distance, "distance_worst": found.worst_tensor[0],
            "distance_global": max(found.groups.values()), "moment_error": found.moment_error,
            "loss_diff": found.loss_diff, "leaf_bounds_ok": leaf_ok, "update_excess": excess,
            "fails": [name for name, bad in (("distance", found.distance > float(ver.tau)),
                                             ("moments", found.moment_error > float(ver.moment_tolerance)),
                                             ("loss", found.loss_diff > float(ver.loss_tolerance)),
                                             ("leaf", not leaf_ok), ("bound", excess > 1)) if bad]}


def measure(name: str, c: int, h: int, stages: list[int], hosts: list[Setup], validators: list[Setup],
            cache_dir: Path | None) -> list[dict]:
    spec = preset(name).with_changes(train={"inner_steps": h, "segment_steps": c})
    dataset = Dataset.load(spec.data, cache_dir)
    run_id = spec.run_id()
    ctx = EpochContext(run_id, 0, HOST, genesis_seed(run_id))
    rows = []
    for stage in stages:
        t0 = time.perf_counter()
        theta = warm(spec, dataset, ctx, stage)
        pairs = measure_pairs(spec, dataset, ctx, theta, hosts, validators, cache_dir=cache_dir)
        honest = [p.summary() for p in pairs]
        # Cheats: from the 1-thread host's leaves (trained again here: the harness does not keep them).
        leaves = train_honest(spec, dataset, ctx, theta, Setup())
        ratios = [update_norm(leaves[g + 1].state, leaves[g].state)
                  / expected_update(float(spec.train.lr), c, parameter_count(leaves[g].state))
                  for g in range(spec.train.segments)]
        cheats: dict[str, dict] = {}
        for g in sorted({0, spec.train.segments // 2}):
            configure(1)
            replayed = replay_segment(spec, dataset, ctx, leaves[g])
            found = {kind: judge(spec, leaves[g], replayed, cheat_segment(spec, dataset, ctx, leaves[g], kind))
                     for kind in CHEATS}
            found.update({kind: judge(spec, leaves[g], replayed,
                                      forged_segment(spec, dataset, ctx, leaves[g], replayed, kind))
                          for kind in FORGERIES})
            for kind, row in found.items():
                keep = cheats.get(kind)
                if keep is None or row["distance"] < keep["distance"]:
                    cheats[kind] = {**row, "segment": g}
        row = {"preset": name, "c": c, "H": h, "stage": stage, "honest": honest,
               "update_ratio": {"min": min(ratios), "max": max(ratios)}, "cheats": cheats,
               "seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny and demo at θ_0 only, no island")
    parser.add_argument("--warm", type=int, nargs="+", default=[512, 2048], help="honest steps of the later stages")
    parser.add_argument("--device", help="also train and replay on this device (e.g. cuda)")
    parser.add_argument("--json", type=Path, help="write every row here")
    parser.add_argument("--no-other-kernels", action="store_true",
                        help="leave out the setups with forced CPU kernels (other compute profiles)")
    parser.add_argument("--preset", help="calibrate this preset only (e.g. small), at --segment-steps and "
                                         "--inner-steps, θ_0 and the first --warm stage")
    parser.add_argument("--segment-steps", type=int, default=4, help="c with --preset")
    parser.add_argument("--inner-steps", type=int, default=16, help="H with --preset (a few segments suffice)")
    args = parser.parse_args()
    stages = [0] if args.quick else [0, *args.warm]
    hosts = [Setup(threads=1), Setup(threads=2)]
    validators = [Setup(threads=1), Setup(threads=2)]
    if not args.quick and not args.no_other_kernels:
        best = torch.backends.cpu.get_cpu_capability().lower()
        if best != "default":  # another kind of CPU, simulated on this one
            hosts.append(Setup(isa="avx2" if best == "avx512" else "default"))
            validators += [Setup(isa="avx2" if best == "avx512" else "default"), Setup(isa="default", mkl="compatible")]
    if args.device:
        hosts.append(Setup(device=args.device))
        validators.append(Setup(device=args.device))
    island = [Setup(threads=1, ranks=2)]
    plan = [("tiny", 8, 64, stages, hosts + ([] if args.quick else island)),
            ("demo", 10, 50, stages, hosts + ([] if args.quick else island))]
    if args.preset:
        plan = [(args.preset, args.segment_steps, args.inner_steps, [0, args.warm[0]], hosts + island)]
    elif not args.quick:
        plan += [("tiny", 2, 16, [0, args.warm[0]], hosts), ("tiny", 50, 100, [args.warm[0]], hosts)]
    rows = []
    t0 = time.perf_counter()
    for name, c, h, st, host_setups in plan:
        rows += measure(name, c, h, st, host_setups, validators, None)
    honest = [p for r in rows for p in r["honest"] if p["host"] != p["validator"] and p["same_profile"]]
    other = [p for r in rows for p in r["honest"] if not p["same_profile"]]
    summary = {"honest_max_distance": max(p["distance"] for p in honest),
               "honest_max_moment_error": max(p["moment_error"] for p in honest),
               "honest_max_loss_diff": max(p["loss_diff"] for p in honest),
               "honest_bitwise": all(p["bitwise"] for p in honest),
               "other_profile_max_distance": max((p["distance"] for p in other), default=None),
               "other_profile_max_moment_error": max((p["moment_error"] for p in other), default=None),
               "other_profile_max_loss_diff": max((p["loss_diff"] for p in other), default=None),
               "nearest_cheat": {k: min(r["cheats"][k]["distance"] for r in rows) for k in CHEATS + FORGERIES},
               "update_ratio_min": min(r["update_ratio"]["min"] for r in rows),
               "seconds": round(time.perf_counter() - t0, 1), "device": args.device or "cpu"}
    ver = preset(plan[0][0]).verification
    nearest = min(summary["nearest_cheat"].values())
    summary["tau"], summary["nearest_cheat_over_tau"] = str(ver.tau), nearest / float(ver.tau)
    if summary["other_profile_max_distance"]:
        summary["tau_over_other_profile"] = float(ver.tau) / summary["other_profile_max_distance"]
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1, default=str))


if __name__ == "__main__":
    main()
