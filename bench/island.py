"""An island's cost on CPU ranks beside one process, and its replay across island sizes.

For each island size N (default 1, 2, 4) the bench starts N local processes (gloo; N = 1 is a plain
process), builds the preset's model (FSDP2-sharded when N > 1), takes ``--steps`` inner steps on the
protocol's batches with M = A·N micro-batches (``--accumulate A`` a rank, 1 by default) after one
untimed step, then hashes and
writes the leaf they end in from the shards (``trainer.island_leaf.ShardedLeafWriter``; N = 1:
``LeafWriter``). Each rank reports its median step time, the leaf write time and its peak resident
memory (``ru_maxrss``). Then one process replays the same steps with the same M and the bench
reports whether its leaf hash equals the island's: the replay across island sizes. With
``--inner-optimizer adamw,muon`` every size runs with each optimizer (an island steps Muon on each
matrix gathered whole: its cost is the Muon row's island ÷ one process against AdamW's).

The batch is cut to ``--batch`` rows (and ``--seq-len`` tokens) so a CPU step of ``gpt124m`` stays
affordable; the model is the preset's. On a machine with fewer cores than N · threads the ranks
are oversubscribed: step times then measure the contention as much as the island.

    .venv/bin/python bench/island.py --preset small --ranks 1,2,4 --steps 3
    .venv/bin/python bench/island.py --preset small --ranks 1,2 --steps 3 --inner-optimizer adamw,muon
    .venv/bin/python bench/island.py --preset small --ranks 1,2 --steps 3 --accumulate 2
    .venv/bin/python bench/island.py --preset gpt124m --ranks 1,2,4 --steps 2 --batch 4 --seq-len 256
    python bench/island.py --preset gpt124m --ranks 1,2,4,8 --device cuda     # a host with 8 GPUs: NCCL
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.epoch_store import EpochStore
from trainer.island_leaf import ShardedLeafWriter, side_group
from trainer.outer import GlobalState
from trainer.presets import PRESETS
from trainer.snapshot import LeafWriter
from trainer.step import Stepper, TrainState, epoch_rng_key, rank_rows

HOST = "inj1islandbench"


@dataclass(frozen=True)
class Job:
    spec_json: bytes
    world: int
    micro_batches: int
    steps: int
    root: Path
    out: Path
    init_file: Path
    threads: int
    device: str


def rss_now_mib() -> float:
    """This process's resident memory now (Linux), in MiB, once glibc has handed its freed heap back
    (``malloc_trim``: the whole-state temporaries of the start are then not counted)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rank_main(rank: int, job: Job) -> None:
    device = torch.device(f"cuda:{rank}") if job.device == "cuda" else torch.device("cpu")
    configure(job.threads, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if job.world > 1:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, init_method=f"file://{job.init_file}", rank=rank, world_size=job.world,
                                device_id=device if device.type == "cuda" else None)
    spec = RunSpec.from_canonical(job.spec_json)
    dataset = Dataset.load(spec.data)
    run_id = spec.run_id()
    group = dist.group.WORLD if job.world > 1 else None
    stepper = Stepper(spec, group=group, device=device)
    stepper.load(TrainState.fresh(GlobalState.initial(spec).params, epoch_rng_key(spec.train.seed, 0)))
    rows = rank_rows(spec.train.batch_size, rank, job.world, job.micro_batches)
    times, losses = [], []
    for t in range(job.steps + 1):  # step 0 warms up (allocations, FSDP's first all-gathers)
        x, y = dataset.batch(run_id, genesis_seed(run_id), HOST, t, spec.train.batch_size)
        if group is not None:
            dist.barrier(group)
        t0 = time.perf_counter()
        losses.append(stepper.step(x[rows], y[rows], job.micro_batches))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if t:
            times.append(time.perf_counter() - t0)
    rss_training = rss_now_mib()
    store = EpochStore(job.root, run_id, HOST)
    if group is not None:
        side = side_group(tuple(range(job.world)))
        dist.barrier(group)
        t0 = time.perf_counter()
        writer: LeafWriter = ShardedLeafWriter(store, spec, 0, 1, side)
        leaf = Checkpoint(stepper.export_local(), torch.tensor(losses), job.micro_batches)
    else:
        t0 = time.perf_counter()
        writer = LeafWriter(store, spec, 0, 1)
        leaf = Checkpoint(stepper.export(), torch.tensor(losses), job.micro_batches)
    writer.submit(1, leaf)
    hashes = writer.finish()
    leaf_seconds = time.perf_counter() - t0
    result = {"rank": rank, "step_s": statistics.median(times), "leaf_s": leaf_seconds,
              "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "training_rss_mib": rss_training,
              "peak_device_mib": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
              "leaf_hash": hashes[0].hex() if hashes else None}
    (job.out / f"rank-{rank}.json").write_text(json.dumps(result))
    if group is not None:
        dist.destroy_process_group()


def run(spec: RunSpec, world: int, micro_batches: int, steps: int, threads: int, device: str) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="veriloco-island-bench-") as tmp:
        job = Job(spec.canonical(), world, micro_batches, steps, Path(tmp) / "root", Path(tmp), Path(tmp) / "rdv",
                  threads, device)
        mp.spawn(rank_main, args=(job,), nprocs=world, join=True)
        return [json.loads((Path(tmp) / f"rank-{r}.json").read_text()) for r in range(world)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small")
    parser.add_argument("--ranks", default="1,2,4", help="island sizes, comma-separated")
    parser.add_argument("--steps", type=int, default=3, help="timed steps (after one untimed)")
    parser.add_argument("--batch", type=int, default=None, help="rows a step (default: the preset's)")
    parser.add_argument("--seq-len", type=int, default=None, help="tokens a row (default: the preset's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--accumulate", type=int, default=1, help="micro-batches a rank accumulates a step (M = A·N)")
    parser.add_argument("--inner-optimizer", default="adamw", help="adamw, muon or both (comma-separated)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: one GPU a rank, NCCL (N may not exceed the GPUs); the replay on cuda:0")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    spec = PRESETS[args.preset]()
    train = {"inner_steps": args.steps + 1, "segment_steps": args.steps + 1}
    if args.batch:
        train["batch_size"] = args.batch
    spec = spec.with_changes(train=train, **({"data": {"seq_len": args.seq_len}} if args.seq_len else {}))
    worlds = [int(n) for n in args.ranks.split(",")]
    optimizers = args.inner_optimizer.split(",")
    rows = []
    for optimizer, world in ((o, w) for o in optimizers for w in worlds):
        run_spec = spec.with_changes(train={"inner_optimizer": optimizer}) if optimizer != "adamw" else spec
        m = args.accumulate * world
        island = run(run_spec, world, m, args.steps, args.threads, args.device)
        replay = island if world == 1 else run(run_spec, 1, m, args.steps, args.threads, args.device)
        rows.append({"optimizer": optimizer, "ranks": world, "micro_batches": m,
                     "step_s": max(r["step_s"] for r in island), "leaf_s": max(r["leaf_s"] for r in island),
                     "peak_rss_mib": [round(r["peak_rss_mib"]) for r in island],
                     "training_rss_mib": [round(r["training_rss_mib"]) for r in island],
                     "peak_device_mib": [r["peak_device_mib"] and round(r["peak_device_mib"]) for r in island],
                     "replay_step_s": replay[0]["step_s"],
                     "replay_bitwise": island[0]["leaf_hash"] == replay[0]["leaf_hash"]})
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.preset} on {args.device}: batch {spec.train.batch_size} x {spec.data.seq_len} tokens, "
          f"{args.threads} thread(s) a rank, {args.accumulate} micro-batch(es) a rank, torch {torch.__version__}")
    print("| optimizer | ranks N | M | step s (ratio to N=1) | one process, same M: step s (island ÷ it) | "
          "leaf write s (ratio) | RSS per rank after the steps, MiB | peak RSS per rank MiB | "
          "one-process replay's leaf = island's |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        base = next(b for b in rows if b["optimizer"] == r["optimizer"])
        print(f"| {r['optimizer']} | {r['ranks']} | {r['micro_batches']} | "
              f"{r['step_s']:.3f} ({r['step_s'] / base['step_s']:.2f}x) | "
              f"{r['replay_step_s']:.3f} ({r['step_s'] / r['replay_step_s']:.2f}x) | "
              f"{r['leaf_s']:.2f} ({r['leaf_s'] / base['leaf_s']:.2f}x) | "
              f"{', '.join(map(str, r['training_rss_mib']))} | "
              f"{', '.join(map(str, r['peak_rss_mib']))}"
              f"{' (GPU ' + ', '.join(map(str, r['peak_device_mib'])) + ')' if args.device == 'cuda' else ''} | "
              f"{'bitwise' if r['replay_bitwise'] else 'DIFFERS'} |")
    if args.json:
        args.json.write_text(json.dumps({"preset": args.preset, "spec": spec.model_dump(mode="json"), "rows": rows}))


if __name__ == "__main__":
    main()
