"""Validator compute as a fraction of host training compute, and the detection it buys.

For a run spec (the ``tiny`` and ``demo`` presets, and ``tiny`` with long epochs of S = 64 and 128
segments), at the spec's ``k`` (challenges besides the last segment) and ``r`` (validators per
challenge):

* host: one honest epoch of H steps with everything a host writes (S + 1 leaves, Δ, commitment),
  through :class:`trainer.behaviour.HostBehaviour`;
* validator: :func:`verifier.replay.check_challenge` on the ``k + 1`` challenged segments (fetch,
  decode, proofs, losses, Δ check on the last, replay of c steps each).

Both at 1 thread, median of ``--repeats`` runs. The fraction per validator is
``t_validator / t_host``; the network spends ``r`` times that per host. The analytic figure is
``(k + 1) · c / H = (k + 1) / S``. Detection bought: a host faking a fraction ``f`` of its segments
is caught by one challenge set with probability ``1 − (1 − f)^(k+1)`` (the r validators of a
challenge replay the same segment: r buys robustness against lying validators, not detection).

Run: ``.venv/bin/python bench/verifier_cost.py [--repeats N] [--json out.json]``
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from protocol.keys import encode_address
from protocol.rules.sampling import challenged_segments
from protocol.views import Challenge
from trainer.artifacts import LocalArtifacts
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.inner import EpochContext
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.step import Stepper
from verifier.replay import check_challenge

VALIDATOR = encode_address(bytes([250] * 20))


def measure(name: str, spec, repeats: int, tmp: Path) -> dict:
    dataset = Dataset.load(spec.data)
    theta = GlobalState.initial(spec)
    k, r = spec.verification.challenges_k, spec.verification.validators_r
    rng = random.Random(name)
    host_times, val_times, outcomes = [], [], []
    stepper = Stepper(spec)
    for i in range(repeats):
        host = encode_address(bytes([i + 1] * 20))
        ctx = EpochContext(spec.run_id(), i, host, rng.randbytes(32))
        root = tmp / f"{name}-{i}"
        t0 = time.perf_counter()
        result = HostBehaviour().train_epoch(spec, dataset, ctx, theta.params, root)
        host_times.append(time.perf_counter() - t0)
        source = LocalArtifacts(root, spec.run_id(), host)
        c = result.commitment
        t0 = time.perf_counter()
        for g in challenged_segments(rng.randbytes(32), host, c.segments, k):
            ch = Challenge.of(c, host, g, "local", [VALIDATOR])
            outcomes.append(check_challenge(spec, dataset, ch, source, theta, ctx.prev_epoch_seed,
                                            stepper=stepper).outcome)
        val_times.append(time.perf_counter() - t0)
    t_host, t_val = statistics.median(host_times), statistics.median(val_times)
    S, H = spec.train.segments, spec.train.inner_steps
    challenged = min(k, S - 1) + 1
    return {"config": name, "H": H, "c": spec.train.segment_steps, "S": S, "k": k, "r": r,
            "host_seconds": round(t_host, 3), "validator_seconds": round(t_val, 3),
            "fraction_per_validator": t_val / t_host, "fraction_all_validators": r * t_val / t_host,
            "analytic_per_validator": challenged / S,
            "detection": {str(f): 1 - (1 - f) ** challenged for f in (0.1, 0.25, 0.5)},
            "all_passed": all(o == "pass" for o in outcomes), "repeats": repeats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure(1)
    configs = [("tiny (S=8)", preset("tiny")), ("demo (S=5)", preset("demo")),
               ("tiny, H=512 (S=64)", preset("tiny").with_changes(train={"inner_steps": 512})),
               ("tiny, H=1024 (S=128)", preset("tiny").with_changes(train={"inner_steps": 1024}))]
    rows = []
    with tempfile.TemporaryDirectory(prefix="veriloco-cost-") as tmp:
        for name, spec in configs:
            rows.append(measure(name, spec, args.repeats, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
