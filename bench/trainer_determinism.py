"""How replayable is the inner step? Bitwise checks and relative distances for docs/training.md.

For each preset (tiny, demo) and segment length c, from the same start leaf, replays c steps:

* twice in this process                          -> bitwise equal?
* in a fresh process (same thread count)          -> bitwise equal?
* after a safetensors save/load of the start leaf -> bitwise equal?
* with 1 thread vs 2 threads                      -> bitwise equal? relative L2 distance of the end parameters
* a 2-rank island (1 thread each) vs its one-process replay with accumulation (1 and 2 threads)
* in a fresh process with other CPU kernels (AVX2 on an AVX-512 machine: another compute profile)
                                                  -> relative L2 distance

Relative distance: ``‖θ' − θ‖₂ / ‖θ‖₂`` over all parameters; also reported relative to the size
of the segment's update, ``‖θ' − θ‖₂ / ‖θ − θ_start‖₂`` (the verifier's measure).

Run: ``.venv/bin/python bench/trainer_determinism.py [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from protocol.rules.beacon import genesis_seed
from trainer.checkpoint import Checkpoint, decode_checkpoint, load_checkpoint
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, replay_segment, start_checkpoint
from trainer.island import spawn_island
from trainer.outer import GlobalState
from trainer.presets import preset

HOST = "inj1benchhost"

CHILD = """
import sys
from protocol.rules.spec import RunSpec
from trainer.checkpoint import decode_checkpoint
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.inner import EpochContext, replay_segment
configure(threads=int(sys.argv[3]))
spec = RunSpec.from_canonical(open(sys.argv[1], "rb").read())
start = decode_checkpoint(open(sys.argv[2], "rb").read(), spec, 0)
ctx = EpochContext(spec.run_id(), 0, sys.argv[4], bytes.fromhex(sys.argv[5]))
end = replay_segment(spec, Dataset.load(spec.data), ctx, start)
if len(sys.argv) > 6:
    end.save(__import__("pathlib").Path(sys.argv[6]))
print(end.leaf_hash().hex())
"""


def distances(a: Checkpoint, b: Checkpoint, start: Checkpoint) -> tuple[float, float]:
    """(‖a − b‖ / ‖b‖, ‖a − b‖ / ‖b − start‖) over all parameters."""
    def norm2(f) -> float:
        return sum(float(f(n).double().pow(2).sum()) for n in b.state.params)
    diff = norm2(lambda n: a.state.params[n] - b.state.params[n])
    return (math.sqrt(diff / norm2(lambda n: b.state.params[n])),
            math.sqrt(diff / norm2(lambda n: b.state.params[n] - start.state.params[n])))


def measure(name: str, c: int, tmp: Path) -> dict:
    spec = preset(name).with_changes(train={"inner_steps": c, "segment_steps": c})
    dataset = Dataset.load(spec.data)
    run_id = spec.run_id()
    ctx = EpochContext(run_id, 0, HOST, genesis_seed(run_id))
    start = start_checkpoint(spec, GlobalState.initial(spec).params, 0)
    row: dict = {"preset": name, "c": c}

    configure(threads=2)
    t0 = time.perf_counter()
    two = replay_segment(spec, dataset, ctx, start)
    row["seconds_2_threads"] = round(time.perf_counter() - t0, 2)
    row["same_process_bitwise"] = replay_segment(spec, dataset, ctx, start).leaf_hash() == two.leaf_hash()

    path = tmp / f"{name}-{c}-start.safetensors"
    start.save(path)
    loaded = load_checkpoint(path, spec, 0)
    row["after_save_load_bitwise"] = replay_segment(spec, dataset, ctx, loaded).leaf_hash() == two.leaf_hash()

    spec_path = tmp / f"{name}-{c}.json"
    spec_path.write_bytes(spec.canonical())
    out = subprocess.run([sys.executable, "-c", CHILD, str(spec_path), str(path), "2", HOST,
                          ctx.prev_epoch_seed.hex()], capture_output=True, text=True, check=True)
    row["fresh_process_bitwise"] = out.stdout.strip() == two.leaf_hash().hex()

    import torch  # noqa: PLC0415 (loaded by the trainer already)

    best = torch.backends.cpu.get_cpu_capability().lower()
    if best != "default":
        other = "avx2" if best == "avx512" else "default"
        end_path = tmp / f"{name}-{c}-{other}.safetensors"
        subprocess.run([sys.executable, "-c", CHILD, str(spec_path), str(path), "2", HOST, ctx.prev_epoch_seed.hex(),
                        str(end_path)], capture_output=True, text=True, check=True,
                       env={**os.environ, "ATEN_CPU_CAPABILITY": other})
        row["other_kernels"] = other
        row["other_kernels_rel"], row["other_kernels_rel_update"] = distances(
            load_checkpoint(end_path, spec, 1), two, start)

    configure(threads=1)
    one = replay_segment(spec, dataset, ctx, start)
    row["threads_1_vs_2_bitwise"] = one.leaf_hash() == two.leaf_hash()
    row["threads_1_vs_2_rel"], row["threads_1_vs_2_rel_update"] = distances(one, two, start)
    pairs = zip(one.losses.tolist(), two.losses.tolist(), strict=True)
    row["threads_1_vs_2_max_loss_diff"] = max(abs(a - b) for a, b in pairs)

    root = tmp / f"island-{name}-{c}"
    record = spawn_island(2, spec, ctx, GlobalState.initial(spec), root, threads=1)
    island = EpochStore(root, ctx.run_id, ctx.host)
    island_start = island.read_leaf(spec, ctx.epoch, 0)
    island_end = decode_checkpoint(island.leaf_path(ctx.epoch, 1).read_bytes(), spec, 1)
    assert island_end.leaf_hash() == record.leaf_hashes[1]
    acc1 = replay_segment(spec, dataset, ctx, island_start)
    row["island_vs_accumulation_1_thread_bitwise"] = acc1.leaf_hash() == island_end.leaf_hash()
    configure(threads=2)
    acc2 = replay_segment(spec, dataset, ctx, island_start)
    row["island_vs_accumulation_2_threads_bitwise"] = acc2.leaf_hash() == island_end.leaf_hash()
    row["island_vs_accumulation_2_threads_rel"], row["island_vs_accumulation_2_threads_rel_update"] = \
        distances(acc2, island_end, island_start)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--segments", default="10,50,200", help="segment lengths c to measure")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("tiny", "demo"):
            for c in (int(x) for x in args.segments.split(",")):
                rows.append(measure(name, c, Path(tmp)))
                print(json.dumps(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
