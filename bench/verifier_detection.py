"""Detection rate per adversary against its formula, and the false-positive rate of honest replays.

Run spec: a preset (``--preset``, default ``tiny``) with its own thresholds and ``k`` (challenges
besides the last segment); ``--steps`` H, ``--segment`` c and ``--batch`` change its epoch shape (for
``tiny`` the defaults are short segments: 16, 2 and 8, so S = 8; for another preset, its own
shape). Everything goes through the real path: the host behaviour writes its epoch to disk,
:class:`trainer.artifacts.LocalArtifacts` serves it, :func:`verifier.replay.check_challenge` decides.

* **False positives.** Honest hosts (a new address each epoch, training at 1 thread, at 2 threads
  and as a 2-process gloo island in turn, θ moving by the outer step so the model trains) and a
  validator that replays *every* segment at 1 and at 2 threads. Goal: 0 fails (and, within this
  machine's compute profile, every replay bitwise).
* **Detection.** For each adversary and epoch: a fresh previous-epoch seed (new batches) and a
  fresh epoch seed; the challenged segments are the chain's rule
  (``protocol.rules.sampling.challenged_segments``, k plus the last); the epoch counts as caught when
  any challenged verdict is not ``pass``. Compared with the adversary's formula
  (``expected_detection``: ``1 − (1 − p)^(min(k, S−1)+1)`` for a per-segment fake probability p).

Run: ``.venv/bin/python bench/verifier_detection.py [--fp-epochs N] [--epochs N] [--json out.json]``
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import logging
import math
import random
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from protocol.keys import encode_address
from protocol.rules.sampling import challenged_segments
from protocol.views import Challenge
from trainer.artifacts import LocalArtifacts
from trainer.data import Dataset
from trainer.delta import dequantize
from trainer.determinism import configure
from trainer.epoch_store import EpochRecord, EpochStore
from trainer.inner import EpochContext, EpochResult
from trainer.island import spawn_island
from trainer.model import parameter_shapes
from trainer.outer import GlobalState, outer_step
from trainer.presets import PRESETS, preset
from trainer.step import Stepper
from verifier.adversaries import Honest, make_adversary
from verifier.replay import check_challenge

VALIDATOR = encode_address(bytes([250] * 20))

HOST_SETUPS = [(1, 0), (2, 0), (1, 2)]
"""The false-positive hosts in turn: (threads, island ranks; 0 for one process)."""

# Adversaries that fake a fraction of segments get --epochs epochs; those that always fake, --whole-epochs.
FRACTIONAL = ["lazy:0.1", "lazy:0.25", "lazy:0.5", "lazy:0.05,step", "wrong_data:0.25", "wrong_lr:1.5,0.25",
              "crafted:0.25", "blindfold:0.29", "blindfold:0.57"]
WHOLE = ["lazy:1", "lazy:1,segment,extrapolate", "noise", "scaled:1.5", "sign_flip", "stale", "stale:delta",
         "copycat", "copycat:delta", "wrong_data:1", "wrong_lr:1.5", "fake_losses:0.99", "crafted:1",
         "interpolate", "interpolate:0.01", "infinitesimal", "alie:1", "ipm:0.5", "withhold",
         "low_precision:bfloat16,1", "fake_train_loss:0.99",
         # Forgeries within the tolerance: they pass every replay (formula 0); what they can do is
         # bench/verifier_forgery.py's subject.
         "poison:ascent,0.99", "moments:v_down,0.99"]


def address(i: int) -> str:
    return encode_address(i.to_bytes(20, "big"))


def challenge(result: EpochRecord | EpochResult, ctx: EpochContext, segment: int) -> Challenge:
    return Challenge.of(result.commitment, ctx.host, segment, "local", [VALIDATOR])


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def false_positives(spec, dataset, epochs: int, root: Path) -> dict:
    theta = GlobalState.initial(spec)
    steppers: dict[int, Stepper] = {}
    replays: Counter[int] = Counter()
    fails: list[dict[str, Any]] = []
    worst = {1: 0.0, 2: 0.0}
    rows: list[dict] = []  # every replay (for --json): which setups, the verdict, the distances
    worst_loss = worst_moments = 0.0
    t0 = time.perf_counter()
    for e in range(epochs):
        host_threads, island = HOST_SETUPS[e % len(HOST_SETUPS)]
        ctx = EpochContext(spec.run_id(), e, address(1000 + e), bytes([e % 256, e // 256]) * 16)
        result: EpochRecord | EpochResult
        if island:
            result = spawn_island(island, spec, ctx, theta, root, threads=host_threads)
        else:
            configure(host_threads)
            result = Honest().train_epoch(spec, dataset, ctx, theta.params, root)
        host_label = f"island {island}×{host_threads}t" if island else f"{host_threads}t"
        source = LocalArtifacts(root, spec.run_id(), ctx.host)
        for val_threads in (1, 2):
            configure(val_threads)
            stepper = steppers.setdefault(val_threads, Stepper(spec))
            for g in range(spec.train.segments):
                report = check_challenge(spec, dataset, challenge(result, ctx, g), source, theta, ctx.prev_epoch_seed,
                                         stepper=stepper)
                replays[val_threads] += 1
                m = report.measurements
                rows.append({"epoch": e, "segment": g, "host": host_label, "host_threads": host_threads,
                             "threads": val_threads, "outcome": report.outcome, "bitwise": m.get("bitwise"),
                             "distance": m.get("distance"),
                             "tensor": m.get("distance_worst"), "moment_error": max(
                                 m.get("moment_error_exp_avg", 0.0), m.get("moment_error_exp_avg_sq", 0.0))})
                if report.outcome != "pass":
                    fails.append({"epoch": e, "segment": g, "host": host_label, "threads": val_threads,
                                  "reason": report.reason})
                # The largest honest values over every replay, passed or not: they are what any
                # threshold is calibrated against (a replay fails only on a value above its threshold).
                if "distance" in m:
                    worst[val_threads] = max(worst[val_threads], float(m["distance"]))
                    worst_loss = max(worst_loss, float(m["loss_max_diff"]))
                    worst_moments = max(worst_moments, float(m["moment_error_exp_avg"]),
                                        float(m["moment_error_exp_avg_sq"]))
        store = EpochStore(root, spec.run_id(), ctx.host)
        delta = dequantize(store.read_delta(spec, e), parameter_shapes(spec), spec.quantization)
        theta = outer_step(theta, delta, spec.outer)
        shutil.rmtree(store.directory(e))  # bounded disk at larger presets
    n = sum(replays.values())
    cross = [r for r in rows if r["host"] != f"{r['threads']}t"]
    return {"replays": dict(replays), "total": n, "fails": len(fails), "fail_examples": fails[:5],
            "bitwise": sum(r["bitwise"] is True for r in rows),
            "by_host": dict(Counter(r["host"] for r in rows)),
            "fails_cross_setup": sum(r["outcome"] != "pass" for r in cross), "replays_cross_setup": len(cross),
            "fp_rate_95_upper": wilson(len(fails), n)[1],
            "max_distance_by_validator_threads": worst, "max_loss_diff": worst_loss,
            "max_moment_error": worst_moments,
            "seconds": round(time.perf_counter() - t0, 1), "every_replay": rows}


def detection(spec, dataset, text: str, epochs: int, root: Path, k: int) -> dict:
    configure(1)
    stepper = Stepper(spec)
    theta = GlobalState.initial(spec)
    rng = random.Random(f"detection:{text}")
    host = address(7)
    caught, faked_epochs = 0, 0
    checks: Counter[str] = Counter()
    # Challenges of faked segments, how many of those passed (a cheat the replay missed), and
    # challenges of honestly trained segments that did not pass (what the cheat cost its honest work).
    faked_challenges, faked_passed, honest_not_passed = 0, 0, 0
    adversary = None
    t0 = time.perf_counter()
    for e in range(epochs):
        prev_seed = rng.randbytes(32)
        ctx = EpochContext(spec.run_id(), e, host, prev_seed)
        victim: LocalArtifacts | None = None
        if text.startswith(("copycat", "alie")):
            victim_ctx = EpochContext(spec.run_id(), e, address(8), prev_seed)
            Honest().train_epoch(spec, dataset, victim_ctx, theta.params, root)
            victim = LocalArtifacts(root, spec.run_id(), victim_ctx.host)
        if adversary is None or victim is not None:
            adversary = make_adversary(text, seed=11, victim=victim, peers=[victim] if victim is not None else [])
        result = adversary.train_epoch(spec, dataset, ctx, theta.params, root)
        source = adversary.serve(LocalArtifacts(root, spec.run_id(), host))
        faked = set(adversary.faked.get(e, []))
        faked_epochs += bool(faked)
        detected = False
        for g in challenged_segments(rng.randbytes(32), host, spec.train.segments, k):
            report = check_challenge(spec, dataset, challenge(result, ctx, g), source, theta, prev_seed,
                                     stepper=stepper)
            faked_challenges += g in faked
            faked_passed += g in faked and report.outcome == "pass"
            honest_not_passed += g not in faked and report.outcome != "pass"
            if report.outcome != "pass":
                detected = True
                checks[f"{report.outcome}:{report.check}"] += 1
        caught += detected
    assert adversary is not None, "no epoch was played"
    expected = adversary.expected_detection(spec, k) if hasattr(adversary, "expected_detection") else float("nan")
    if text.startswith("stale"):
        expected *= (epochs - 1) / epochs  # epoch 0 has nothing stale to reuse
    low, high = wilson(caught, epochs)
    return {"adversary": text, "epochs": epochs, "caught": caught, "rate": caught / epochs, "ci95": [low, high],
            "formula": expected, "epochs_with_fakes": faked_epochs, "checks": dict(checks),
            "faked_challenges": faked_challenges, "faked_passed": faked_passed,
            "honest_not_passed": honest_not_passed,
            "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=sorted(PRESETS), help="the run spec and its thresholds")
    parser.add_argument("--steps", type=int, help="H (tiny: 16; another preset: its own)")
    parser.add_argument("--segment", type=int, help="c (tiny: 2; another preset: its own)")
    parser.add_argument("--batch", type=int, help="batch size (tiny: 8, where the preset's is 16; another: its own)")
    parser.add_argument("--eps", help="AdamW's epsilon (default: the preset's)")
    parser.add_argument("--fp-epochs", type=int, default=63, help="honest epochs (2·S replays each)")
    parser.add_argument("--epochs", type=int, default=200, help="epochs per fractional adversary")
    parser.add_argument("--whole-epochs", type=int, default=10, help="epochs per always-faking adversary")
    parser.add_argument("--only", default="", help="comma-separated parts: fp, detection")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.getLogger("veriloco.verifier").setLevel(logging.ERROR)  # a fail per caught epoch is the point here
    base = preset(args.preset)
    # tiny's defaults here are its short-segment shape (H 16, c 2, batch 8); another preset keeps its own.
    own = (16, 2, 8) if args.preset == "tiny" else (base.train.inner_steps, base.train.segment_steps,
                                                      base.train.batch_size)
    args.steps = own[0] if args.steps is None else args.steps
    args.segment = own[1] if args.segment is None else args.segment
    args.batch = own[2] if args.batch is None else args.batch
    train = {"inner_steps": args.steps, "segment_steps": args.segment, "batch_size": args.batch}
    if args.eps is not None:
        train["eps"] = args.eps
    spec = base.with_changes(train=train)
    dataset = Dataset.load(spec.data)
    k = spec.verification.challenges_k
    parts = set(args.only.split(",")) if args.only else {"fp", "detection"}
    out: dict = {"spec": {"preset": args.preset, "eps": str(spec.train.eps), "H": args.steps, "c": args.segment,
                          "batch": args.batch,
                          "S": spec.train.segments, "k": k,
                          "tau": str(spec.verification.tau),
                          "moment_tolerance": str(spec.verification.moment_tolerance),
                          "loss_tolerance": str(spec.verification.loss_tolerance),
                          "min_update_ratio": str(spec.verification.min_update_ratio)},
                 "torch_threads_default": torch.get_num_threads()}
    with tempfile.TemporaryDirectory(prefix="veriloco-detection-") as tmp:
        if "fp" in parts:
            out["false_positives"] = false_positives(spec, dataset, args.fp_epochs, Path(tmp) / "fp")
            brief = {k: v for k, v in out["false_positives"].items() if k != "every_replay"}
            print(json.dumps({"false_positives": brief}), flush=True)
        if "detection" in parts:
            rows = []
            for text in FRACTIONAL + WHOLE:
                epochs = args.epochs if text in FRACTIONAL else args.whole_epochs
                rows.append(detection(spec, dataset, text, epochs, Path(tmp) / text.replace(":", "_"), k))
                print(json.dumps(rows[-1]), flush=True)
            out["detection"] = rows
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
