"""Inner-loop throughput: the protocol's epoch (checkpoints + hashing) vs a bare torch loop.

Two loops over the same model and AdamW settings, run side by side *step by step*: the protocol
loop calls back after each of its steps, and the callback runs one step of the bare loop, timed
on its own. Whatever the shared machine does to one loop it does to the other within
milliseconds, so the ratio is robust to noise that would swamp two runs measured one after the
other.

``bare``      a plain nanoGPT-style loop: random windows from ``torch.randint``, forward,
              backward, clip, AdamW. No sampling protocol, no RNG forking, no checkpoints.
``stepper``   :func:`trainer.inner.train_steps`: :meth:`trainer.step.Stepper.step` on the
              protocol's batches (SHA-256 sampling, a seeded RNG per micro-batch), no checkpoints.
``epoch``     :func:`trainer.inner.run_epoch`: everything a host does in an epoch: the steps, a
              checkpoint every ``c`` steps (state copy, leaf hash, safetensors, fsync, rename), the
              Merkle root, the quantized Δ and its hash, the commitment file.

Overhead = (protocol loop time) / (bare loop time) − 1, per repetition; the median is reported.

Run: ``.venv/bin/python bench/inner_overhead.py [--preset demo] [--steps 400] [--segments 8] [--repeats 5]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from protocol.rules.beacon import genesis_seed
from trainer.data import Dataset
from trainer.determinism import ADAMW_IMPL, configure
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, run_epoch, start_checkpoint, train_steps
from trainer.model import build_model
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.step import Stepper

HOST = "inj1benchhost"


class BareLoop:
    """A plain training loop over the same model, stepped one step at a time."""

    def __init__(self, spec, dataset: Dataset) -> None:
        t = spec.train
        self.model, self.dataset, self.batch, self.clip = build_model(spec), dataset, t.batch_size, float(t.grad_clip)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=float(t.lr), betas=(float(t.beta1), float(t.beta2)),
                                     eps=float(t.eps), weight_decay=float(t.weight_decay), **ADAMW_IMPL)
        self.generator = torch.Generator().manual_seed(0)
        self.seconds = 0.0
        self.bare_steps: list[float] = []
        self.protocol_steps: list[float] = []  # time from the end of one bare step to the next callback
        self.last_end: float | None = None

    def step(self) -> None:
        started = time.perf_counter()
        if self.last_end is not None:
            self.protocol_steps.append(started - self.last_end)
        x, y = self.dataset.windows(torch.randint(self.dataset.n_windows, (self.batch,), generator=self.generator))
        logits = self.model(x)
        F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1)).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip, foreach=False)
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        self.last_end = time.perf_counter()
        self.bare_steps.append(self.last_end - started)
        self.seconds += self.last_end - started


def side_by_side(spec, dataset: Dataset, ctx: EpochContext, kind: str, root: Path) -> tuple[float, float, BareLoop]:
    """(protocol loop seconds, bare loop seconds, the bare loop's timings) for H interleaved steps."""
    bare = BareLoop(spec, dataset)
    stepper = Stepper(spec)
    theta = GlobalState.initial(spec).params
    started = time.perf_counter()
    if kind == "epoch":
        run_epoch(spec, dataset, ctx, theta, root, stepper=stepper, on_step=lambda _t, _l: bare.step())
    else:
        stepper.load(start_checkpoint(spec, theta, 0).state)
        train_steps(stepper, dataset, spec, ctx, range(spec.train.inner_steps), 1,
                    on_step=lambda _t, _l: bare.step())
    total = time.perf_counter() - started
    return total - bare.seconds, bare.seconds, bare


def checkpoint_costs(spec, dataset: Dataset, ctx: EpochContext, root: Path) -> dict[str, float]:
    """Seconds for one checkpoint (copy, leaf hash, encode, atomic write) and for the commit, best of N."""
    stepper = Stepper(spec)
    theta = GlobalState.initial(spec).params
    ckpt = start_checkpoint(spec, theta, 0)
    stepper.load(ckpt.state)
    store = EpochStore(root / "checkpoints", ctx.run_id, ctx.host)
    best = float("inf")
    for i in range(20):
        started = time.perf_counter()
        leaf = type(ckpt)(stepper.export(), ckpt.losses, 1)
        leaf.leaf_hash()
        store.write_leaf(ctx.epoch, i, leaf)
        best = min(best, time.perf_counter() - started)
    one_segment = spec.with_changes(train={"inner_steps": spec.train.segment_steps})
    run_epoch(one_segment, dataset, ctx, theta, root / "warm")
    commit = float("inf")
    for _ in range(5):  # a finished epoch re-commits: resume (load + hash leaves), Δ, commitment
        started = time.perf_counter()
        run_epoch(one_segment, dataset, ctx, theta, root / "warm")
        commit = min(commit, time.perf_counter() - started)
    return {"checkpoint_s": best, "finished_epoch_recommit_s": commit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--steps", type=int, default=400, help="H")
    parser.add_argument("--segments", type=int, default=8, help="S = H / c")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure(args.threads)
    spec = preset(args.preset).with_changes(
        train={"inner_steps": args.steps, "segment_steps": args.steps // args.segments})
    dataset = Dataset.load(spec.data)
    run_id = spec.run_id()
    ctx = EpochContext(run_id, 0, HOST, genesis_seed(run_id))
    tokens = args.steps * spec.train.batch_size * spec.data.seq_len
    summary: dict = {"preset": args.preset, "H": args.steps, "c": args.steps // args.segments,
                     "threads": args.threads, "repeats": args.repeats}
    for kind in ("stepper", "epoch"):
        overheads, protocol_s, bare_s, step_ratio = [], [], [], []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                p, b, bare = side_by_side(spec, dataset, ctx, kind, Path(tmp))
            step_ratio.append(statistics.median(bare.protocol_steps) / statistics.median(bare.bare_steps) - 1)
            overheads.append(p / b - 1)
            protocol_s.append(p)
            bare_s.append(b)
            print(json.dumps({"kind": kind, "protocol_s": round(p, 3), "bare_s": round(b, 3),
                              "overhead": round(p / b - 1, 4)}), flush=True)
        summary[kind] = {
            "overhead_median": round(statistics.median(overheads), 4),
            "overheads": [round(o, 4) for o in overheads],
            "median_step_time_ratio_minus_1": round(statistics.median(step_ratio), 4),
            "tokens_per_s_median": {"protocol": round(tokens / statistics.median(protocol_s)),
                                    "bare": round(tokens / statistics.median(bare_s))},
        }
    with tempfile.TemporaryDirectory() as tmp:
        costs = checkpoint_costs(spec, dataset, ctx, Path(tmp))
    bare_step = tokens / summary["epoch"]["tokens_per_s_median"]["bare"] / args.steps
    summary["costs"] = {k: round(v, 4) for k, v in costs.items()}
    # S + 1 checkpoints and one commit, against H bare steps: the epoch's checkpointing overhead
    # estimated from short, individually timed operations (insensitive to slow phases of the machine).
    summary["checkpoint_overhead_estimate"] = round(
        ((args.segments + 1) * costs["checkpoint_s"]) / (args.steps * bare_step), 4)
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
