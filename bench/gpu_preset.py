"""A preset trained where it is meant to run: step time, memory, snapshot overlap and replay on a GPU.

Measured in one process, on one device (default ``gpt124m`` on ``cuda``):

* **limits**: a device-to-device copy (bytes read plus written per second), pinned device-to-host
  and pageable device-to-host copies, and single-thread SHA-256 on this machine's CPU;
* **steps**: seconds per inner step and the device's peak memory for each micro-batch count ``M``
  in ``--micro-batches`` (an ``M`` that runs out of memory is reported as such, not as a crash);
* **epoch side by side**: ``--segments`` segments of the preset's ``c`` steps trained plainly
  (loading θ_e, then the steps and nothing else) and through :func:`trainer.inner.run_epoch`
  (leaves copied with :meth:`~trainer.step.Stepper.export_async`, hashed and written behind
  training, every ``K``-th stored), ``--repeats`` pairs with the order swapped in every other
  pair, with the background writer's figures (hash, write, transfer, the training thread's waits);
* **replay**: segment 0 replayed from leaf 0 in a fresh :class:`~trainer.step.Stepper`, against
  the host's committed leaf hash: whether replays on this device are bitwise, and what one costs;
* **snapshot on the training thread**: :meth:`Stepper.export` (a blocking copy to pageable
  memory) against the return of :meth:`Stepper.export_async`, a training step taken while its copy
  may still run, and the wait for the copy after that step; the leaf hash on 1 and 8 threads.

Run: ``python bench/gpu_preset.py [--preset gpt124m] [--device cuda] [--json out.json]``; on a CPU
``--preset tiny --device cpu`` checks the script itself.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import hashlib
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from protocol.rules.beacon import genesis_seed
from trainer.checkpoint import Checkpoint
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.fingerprint import compute_fingerprint
from trainer.inner import EpochContext, replay_segment, run_epoch, start_checkpoint, train_steps
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.snapshot import SnapshotStats
from trainer.step import Stepper

HOST = "inj1gpupresetbenchhost"


def context(spec) -> EpochContext:
    run_id = spec.run_id()
    return EpochContext(run_id, 0, HOST, genesis_seed(run_id))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, repeats: int = 3) -> float:
    """The fastest of ``repeats`` runs of ``fn`` in seconds, the device drained around each."""
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def limits(device: torch.device) -> dict:
    buf = os.urandom(256 << 20)
    out = {"sha256_GBps": len(buf) / timed(lambda: hashlib.sha256(buf).digest(), torch.device("cpu")) / 1e9}
    src = torch.empty(256 << 20, dtype=torch.float32, device=device).uniform_()  # 1 GiB
    dst = torch.empty_like(src)
    out["d2d_GBps"] = 2 * src.numel() * 4 / timed(lambda: dst.copy_(src), device) / 1e9
    if device.type == "cuda":
        pinned = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
        pageable = torch.empty(src.shape, dtype=src.dtype)
        out["d2h_pinned_GBps"] = src.numel() * 4 / timed(lambda: pinned.copy_(src, non_blocking=True), device) / 1e9
        out["d2h_pageable_GBps"] = src.numel() * 4 / timed(lambda: pageable.copy_(src), device) / 1e9
    return out


def peak_memory(device: torch.device) -> int | None:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def reserved_memory(device: torch.device) -> int | None:
    """What the caching allocator held at its peak: what the card must actually have free."""
    return torch.cuda.max_memory_reserved(device) if device.type == "cuda" else None


def reset_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def steps_per_m(spec, dataset, ctx, theta, device, counts: list[int], steps: int) -> list[dict]:
    rows = []
    for m in counts:
        reset_memory(device)
        row: dict = {"micro_batches": m}
        stepper: Stepper | None = None
        try:
            stepper = Stepper(spec, device=device)
            stepper.load(start_checkpoint(spec, theta, 0, m).state)
            train_steps(stepper, dataset, spec, ctx, range(1), m)  # warm-up: kernels, autograd buffers, AdamW state
            times = []
            for t in range(1, 1 + steps):
                sync(device)
                t0 = time.perf_counter()
                train_steps(stepper, dataset, spec, ctx, range(t, t + 1), m)
                sync(device)
                times.append(time.perf_counter() - t0)
            row.update(step_s=statistics.median(times), step_s_all=times, peak_bytes=peak_memory(device),
                       reserved_bytes=reserved_memory(device))
        except (torch.OutOfMemoryError, RuntimeError) as exc:
            # cuBLAS reports a failed workspace allocation as a RuntimeError, not as torch's OOM;
            # any other error (an illegal memory access poisons the context) is not a size result.
            if not isinstance(exc, torch.OutOfMemoryError) and "CUBLAS_STATUS_ALLOC_FAILED" not in str(exc):
                raise
            row.update(out_of_memory=str(exc).splitlines()[0], peak_bytes=peak_memory(device))
        finally:
            stepper = None  # drop the model before the next M allocates its own
            reset_memory(device)
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def epoch_side_by_side(spec, dataset, ctx, theta, device, m: int, repeats: int, keep: int) -> dict:
    """Plain steps against run_epoch over the same steps, ``repeats`` pairs, the order swapped in
    every other pair (drift lands on both); both timings include loading θ_e. Returns the
    figures and the protocol's last result."""
    h = spec.train.inner_steps
    plain_s, protocol_s, stats_all, peaks = [], [], [], []
    result = None
    stepper = Stepper(spec, device=device)

    def plain() -> None:
        sync(device)
        t0 = time.perf_counter()
        stepper.load(start_checkpoint(spec, theta, ctx.epoch, m).state)
        train_steps(stepper, dataset, spec, ctx, range(h), m)
        sync(device)
        plain_s.append(time.perf_counter() - t0)

    def protocol() -> None:
        nonlocal result
        reset_memory(device)
        stats = SnapshotStats()
        with tempfile.TemporaryDirectory() as tmp:
            sync(device)
            t0 = time.perf_counter()
            result = run_epoch(spec, dataset, ctx, theta, Path(tmp), m, stepper, full_leaf_every=keep, stats=stats)
            sync(device)
            protocol_s.append(time.perf_counter() - t0)
        stats_all.append(stats.__dict__.copy())
        peaks.append(peak_memory(device))

    for i in range(repeats):
        for part in (plain, protocol) if i % 2 == 0 else (protocol, plain):
            part()
        print(json.dumps({"plain_s": plain_s[-1], "protocol_s": protocol_s[-1], "stats": stats_all[-1]}), flush=True)
    return {"steps": h, "segments": spec.train.segments, "micro_batches": m, "full_leaf_every": keep,
            "plain_s": plain_s, "protocol_s": protocol_s,
            "ratio_each": [p / q for p, q in zip(protocol_s, plain_s, strict=True)],
            "ratio_pooled": sum(protocol_s) / sum(plain_s), "writer": stats_all, "protocol_peak_bytes": peaks,
            "_result": result}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpt124m")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--micro-batches", type=int, nargs="+", default=[4, 2, 1])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per micro-batch count")
    parser.add_argument("--segments", type=int, default=4, help="segments of the side-by-side epoch")
    parser.add_argument("--repeats", type=int, default=2, help="plain/protocol pairs, alternated")
    parser.add_argument("--full-leaf-every", type=int, default=4)
    parser.add_argument("--budget-s", type=float, default=150,
                        help="seconds of training the side-by-side epochs may take (fewer segments, then pairs)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    device = torch.device(args.device)
    configure(threads=min(8, os.cpu_count() or 1), device=device)
    t_start = time.perf_counter()
    full = preset(args.preset)
    dataset = Dataset.load(full.data)
    ctx = context(full)
    theta = GlobalState.initial(full).params
    out: dict = {"preset": args.preset, "device": str(device), "torch": torch.__version__,
                 "parameters": sum(t.numel() for t in theta.values()), "cpu_count": os.cpu_count()}
    if device.type == "cuda":
        out.update(gpu=torch.cuda.get_device_name(device), cuda=torch.version.cuda)
    out["fingerprint"] = compute_fingerprint(full, device)
    print(json.dumps(out), flush=True)
    out["limits"] = limits(device)
    print(json.dumps(out["limits"]), flush=True)

    out["steps"] = steps_per_m(full, dataset, ctx, theta, device, args.micro_batches, args.steps)
    fits = [r for r in out["steps"] if "step_s" in r]
    if not fits:
        raise SystemExit("no micro-batch count fits this device")
    fastest = min(fits, key=lambda r: r["step_s"])
    m = fastest["micro_batches"]
    # Fit the side-by-side epochs into --budget-s: fewer segments (at least 2), then fewer pairs.
    segments, repeats = args.segments, args.repeats
    cost = lambda: 2 * repeats * segments * full.train.segment_steps * fastest["step_s"]  # noqa: E731
    while cost() > args.budget_s and segments > 2:
        segments -= 1
    while cost() > args.budget_s and repeats > 1:
        repeats -= 1
    spec = full.with_changes(train={"inner_steps": segments * full.train.segment_steps})
    ctx = context(spec)
    side = epoch_side_by_side(spec, dataset, ctx, theta, device, m, repeats, args.full_leaf_every)
    result = side.pop("_result")
    out["epoch"] = side

    # Replay: segment 0 from leaf 0 in a fresh stepper, as a validator on this device would.
    replayer = Stepper(spec, device=device)
    start = start_checkpoint(spec, theta, ctx.epoch, m)
    t0 = time.perf_counter()
    replayed = replay_segment(spec, dataset, ctx, start, replayer)
    replay_s = time.perf_counter() - t0
    out["replay"] = {"segment_s": replay_s, "bitwise": replayed.leaf_hash() == result.leaf_hashes[1]}
    print(json.dumps(out["replay"]), flush=True)

    # The snapshot on the training thread, and the leaf hash on the CPU.
    leaf = Checkpoint(replayer.export(), replayed.losses, m)
    leaf_bytes = sum(t.numel() * t.element_size() for t in leaf.tensors().values())
    snap: dict[str, Any] = {"leaf_bytes": leaf_bytes, "export_blocking_s": timed(replayer.export, device)}
    # export_async, then one training step, then the wait for the copy: whether the transfer
    # overlaps the step (the wait is then ~0 and the step no slower than without a copy in flight).
    returns, steps_during, waits = [], [], []
    for _ in range(3):
        sync(device)
        t0 = time.perf_counter()
        _, ready = replayer.export_async()
        t1 = time.perf_counter()
        t = replayer.step_count
        train_steps(replayer, dataset, spec, ctx, range(t, t + 1), m)
        t2 = time.perf_counter()
        ready()
        returns.append(t1 - t0)
        steps_during.append(t2 - t1)
        waits.append(time.perf_counter() - t2)
    snap.update(export_async_return_s=returns, step_during_copy_s=steps_during, export_async_wait_s=waits,
                step_alone_s=fastest["step_s"])
    for threads in (1, 8):
        snap[f"leaf_hash_{threads}t_GBps"] = leaf_bytes / timed(lambda t=threads: leaf.leaf_hash(t),
                                                                torch.device("cpu"), 2) / 1e9
    out["snapshot"] = snap
    print(json.dumps(snap), flush=True)
    out["seconds"] = round(time.perf_counter() - t_start, 1)

    e = out["epoch"]
    print(f"\n{out.get('gpu', 'cpu')} · {args.preset} ({out['parameters']:,} parameters) · torch {out['torch']}")
    for r in out["steps"]:
        peak = f"{r['peak_bytes'] / 2**30:.1f} GiB" if r.get("peak_bytes") else "-"
        cell = f"{r['step_s']:.3f} s/step" if "step_s" in r else "out of memory"
        print(f"  M={r['micro_batches']}: {cell}, peak {peak}")
    print(f"  epoch of {e['steps']} steps at M={m}: protocol/plain {', '.join(f'{x:.3f}' for x in e['ratio_each'])}"
          f" (pooled {e['ratio_pooled']:.3f})")
    print(f"  replay of segment 0: {out['replay']['segment_s']:.2f} s, bitwise: {out['replay']['bitwise']}")
    print(f"  snapshot: blocking export {snap['export_blocking_s']:.3f} s, async returns in "
          f"{min(snap['export_async_return_s']) * 1e3:.1f} ms, a step meanwhile "
          f"{min(snap['step_during_copy_s']):.3f} s (alone {fastest['step_s']:.3f} s), then waited "
          f"{max(snap['export_async_wait_s']) * 1e3:.2f} ms for the copy;"
          f" leaf hash {snap['leaf_hash_1t_GBps']:.2f} / {snap['leaf_hash_8t_GBps']:.2f} GB/s on 1 / 8 threads")
    print(f"  {out['seconds']} s in all")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
