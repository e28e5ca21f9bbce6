"""Calibrate the verifier's thresholds: honest replay error against the nearest cheats.

For each preset and training stage, an honest host trains one epoch (at 1 and at 2 threads) and a
validator replays every segment (at 1 and at 2 threads) with the verifier's measures
(``verifier.measure``): the relative distance of parameters, AdamW first and second moments, the
largest per-step loss difference, and the update ratio ``‖θ_end − θ_start‖ / (lr · √(c · N))``.
Also: a replay from the leaf after a safetensors save/load (bitwise?), and a 2-process island
(gloo, 1 thread per rank) replayed in one process at 1 and 2 threads.

Then the nearest cheats, replayed honestly from the same leaves: skip one step of the segment,
train one step on another host's batch, train the segment with the learning rate × 1.01 / × 1.1.

Stages: ``θ_0`` and θ after ``--warm`` honest steps (a model that has learned something: the
replay error of a trained model is larger, see docs/verification.md).

CPU only: no GPU is lent to this task, so CPU-vs-GPU replay error is not measured.

Run: ``.venv/bin/python bench/verifier_calibrate.py [--quick] [--json out.json]``
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import torch

from protocol.keys import encode_address
from protocol.rules.beacon import genesis_seed
from trainer.checkpoint import Checkpoint, decode_checkpoint
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, replay_segment, run_segment, start_checkpoint, train_steps
from trainer.island import spawn_island
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.step import Stepper
from verifier.measure import expected_update, parameter_count, relative_distances, update_norm

HOST = encode_address(bytes([7] * 20))


def compare(replayed: Checkpoint, committed: Checkpoint, start: Checkpoint, spec) -> dict:
    dist = relative_distances(replayed.state, committed.state, start.state)
    diffs = (replayed.losses.double() - committed.losses.double()).abs()
    return {"distance": max(dist.values()), **{f"d_{k}": v for k, v in dist.items()},
            "loss_diff": float(diffs.max()) if diffs.numel() else 0.0,
            "bitwise": replayed.leaf_hash() == committed.leaf_hash()}


def update_ratio(start: Checkpoint, end: Checkpoint, spec) -> float:
    scale = expected_update(float(spec.train.lr), spec.train.segment_steps, parameter_count(start.state))
    return update_norm(end.state, start.state) / scale


def host_epoch(spec, dataset, ctx, theta: dict, threads: int) -> list[Checkpoint]:
    configure(threads)
    stepper = Stepper(spec)
    leaves = [start_checkpoint(spec, theta, ctx.epoch)]
    stepper.load(leaves[0].state)
    for _ in range(spec.train.segments):
        leaves.append(run_segment(stepper, dataset, spec, ctx, 1))
    return leaves


def warm(spec, dataset, ctx, steps: int) -> dict:
    """θ after ``steps`` honest steps from θ_0 (1 thread), as a new epoch's start."""
    theta = GlobalState.initial(spec).params
    if steps == 0:
        return theta
    configure(1)
    stepper = Stepper(spec)
    stepper.load(start_checkpoint(spec, theta, 0).state)
    long = spec.with_changes(train={"inner_steps": steps, "segment_steps": steps})
    train_steps(stepper, dataset, long, EpochContext(ctx.run_id, 99, ctx.host, ctx.prev_epoch_seed),
                range(steps), 1)
    return {n: t.clone() for n, t in stepper.export().params.items()}


def summarize(rows: list[dict], key: str) -> dict:
    values = [r[key] for r in rows]
    return {"max": max(values), "median": sorted(values)[len(values) // 2], "n": len(values)}


def honest_rows(spec, dataset, ctx, theta, island_root: Path | None, cache_dir) -> dict:
    out: dict = {}
    leaves = {t: host_epoch(spec, dataset, ctx, theta, t) for t in (1, 2)}
    for host_t in (1, 2):
        for val_t in (1, 2):
            configure(val_t)
            rows = []
            for g in range(spec.train.segments):
                replayed = replay_segment(spec, dataset, ctx, leaves[host_t][g])
                rows.append({"segment": g, **compare(replayed, leaves[host_t][g + 1], leaves[host_t][g], spec)})
            out[f"host{host_t}_val{val_t}"] = rows
    out["update_ratio"] = [update_ratio(leaves[1][g], leaves[1][g + 1], spec) for g in range(spec.train.segments)]
    # save/load round trip: every leaf through safetensors bytes, replayed at 1 thread
    configure(1)
    rows = []
    for g in range(spec.train.segments):
        loaded = decode_checkpoint(leaves[1][g].encode(), spec, g)
        rows.append(compare(replay_segment(spec, dataset, ctx, loaded), leaves[1][g + 1], leaves[1][g], spec))
    out["save_load"] = rows
    if island_root is not None:
        island_ctx = EpochContext(ctx.run_id, ctx.epoch, ctx.host, ctx.prev_epoch_seed)
        start = GlobalState(theta, {n: torch.zeros_like(t) for n, t in theta.items()})
        spawn_island(2, spec, island_ctx, start, island_root, threads=1, cache_dir=cache_dir)
        isl = EpochStore(island_root, island_ctx.run_id, island_ctx.host).read_leaves(spec, island_ctx.epoch)
        for val_t in (1, 2):
            configure(val_t)
            out[f"island_val{val_t}"] = [compare(replay_segment(spec, dataset, ctx, isl[g]), isl[g + 1], isl[g], spec)
                                         for g in range(spec.train.segments)]
    return out


def cheats(spec, dataset, ctx, leaves: list[Checkpoint], segments: list[int]) -> dict:
    """Distances of the smallest cheats from the honest replay, on ``segments`` (1 thread)."""
    configure(1)
    c = spec.train.segment_steps
    out: dict = {}
    other = EpochContext(ctx.run_id, ctx.epoch, ctx.host + "-elsewhere", ctx.prev_epoch_seed)

    def run(g, name, stepper, mode=""):
        start = leaves[g]
        stepper.load(start.state)
        losses = []
        for t in range(start.state.step, start.state.step + c):
            middle = t == start.state.step + c // 2
            if mode == "skip" and middle:
                state = stepper.export()
                state.step += 1
                stepper.load(state)
                losses.append(losses[-1] if losses else float("nan"))
            else:
                use = other if mode == "data" and middle else ctx
                losses += train_steps(stepper, dataset, spec, use, range(t, t + 1), 1)
        cheat = Checkpoint(stepper.export(), torch.tensor(losses, dtype=torch.float32), 1)
        honest = replay_segment(spec, dataset, ctx, start)
        out.setdefault(name, []).append({"segment": g, **compare(honest, cheat, start, spec)})

    for g in segments:
        run(g, "skip one step", Stepper(spec), "skip")
        run(g, "other data for one step", Stepper(spec), "data")
        for factor in ("1.01", "1.1"):
            lr = Decimal(factor) * spec.train.lr
            run(g, f"lr x{factor}", Stepper(spec.with_changes(train={"lr": str(lr)})))
    return out


def measure(name: str, c: int, h: int, stages: list[int], island: bool, tmp: Path, cache_dir) -> list[dict]:
    spec = preset(name).with_changes(train={"inner_steps": h, "segment_steps": c})
    dataset = Dataset.load(spec.data, cache_dir)
    run_id = spec.run_id()
    ctx = EpochContext(run_id, 0, HOST, genesis_seed(run_id))
    results = []
    for stage in stages:
        t0 = time.perf_counter()
        theta = warm(spec, dataset, ctx, stage)
        root = tmp / f"{name}-{c}-{stage}" if island else None
        honest = honest_rows(spec, dataset, ctx, theta, root, cache_dir)
        leaves = host_epoch(spec, dataset, ctx, theta, 1)
        segs = sorted({0, spec.train.segments // 2})
        row = {"preset": name, "c": c, "H": h, "stage": stage, "honest": honest,
               "cheats": cheats(spec, dataset, ctx, leaves, segs), "seconds": 0.0}
        row["seconds"] = round(time.perf_counter() - t0, 1)
        print(json.dumps(digest(row)), flush=True)
        results.append(row)
    return results


def digest(row: dict) -> dict:
    """The figures docs/verification.md reports, from one (preset, c, stage) measurement."""
    h = row["honest"]
    out = {"preset": row["preset"], "c": row["c"], "stage": row["stage"]}
    for key in ("host1_val1", "host2_val2", "host1_val2", "host2_val1", "save_load", "island_val1", "island_val2"):
        if key in h:
            out[key] = {"max_distance": max(r["distance"] for r in h[key]),
                        "max_loss_diff": max(r["loss_diff"] for r in h[key]),
                        "bitwise": all(r["bitwise"] for r in h[key]),
                        "worst_group": max(("d_params", "d_exp_avg", "d_exp_avg_sq"),
                                           key=lambda k: max(r[k] for r in h[key]))}
    out["update_ratio"] = {"min": min(h["update_ratio"]), "max": max(h["update_ratio"])}
    out["cheats"] = {k: {"min_distance": min(r["distance"] for r in v),
                         "min_loss_diff": min(r["loss_diff"] for r in v)} for k, v in row["cheats"].items()}
    out["seconds"] = row["seconds"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer stages, no island, no long segments")
    parser.add_argument("--warm", type=int, default=512, help="steps of honest training for the later stage")
    parser.add_argument("--json", type=Path, help="write every row here")
    args = parser.parse_args()
    cache = None
    stages = [0] if args.quick else [0, args.warm]
    plan = [("tiny", 8, 64, stages, not args.quick), ("demo", 10, 50, stages, not args.quick)]
    if not args.quick:
        plan += [("tiny", 50, 100, [args.warm], False), ("tiny", 2, 16, [0, args.warm], False)]
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="veriloco-calibrate-") as tmp:
        for name, c, h, st, island in plan:
            rows += measure(name, c, h, st, island, Path(tmp), cache)
    summary = [digest(r) for r in rows]
    honest_max = max(v["max_distance"] for s in summary for k, v in s.items() if isinstance(v, dict)
                     and "max_distance" in v)
    cheat_min = min(v["min_distance"] for s in summary for v in s["cheats"].values())
    print(json.dumps({"honest_max_distance": honest_max, "nearest_cheat_distance": cheat_min,
                      "honest_max_loss_diff": max(v["max_loss_diff"] for s in summary for v in s.values()
                                                  if isinstance(v, dict) and "max_loss_diff" in v),
                      "update_ratio_min": min(s["update_ratio"]["min"] for s in summary),
                      "seconds": round(time.perf_counter() - t0, 1),
                      "threads": torch.get_num_threads()}))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": summary}, indent=1, default=str))


if __name__ == "__main__":
    main()
