"""The per-byte and per-parameter costs the scaling model (``docs/scaling.md``) is fed with, measured
at a preset (default ``small``), and the detection probability at its defaults.

Measured in one process, on this machine:

* **limits**: single-thread SHA-256 (``hashlib``, 256 MiB) and memory bandwidth (a 512 MiB float32
  ``copy_``: bytes copied per second; each byte is read once and written once);
* **snapshot**: :meth:`Stepper.export` (the copy taken on the training thread), the leaf hash
  (:meth:`Checkpoint.leaf_hash`), encode + write + fsync of the leaf file, and the background
  writer's whole path, each per byte of leaf;
* **readers**: a leaf read back through the streaming reader (:func:`stream_checkpoint` from
  :func:`trainer.tensorstream.file_chunks`: check, hash, decode) against reading the whole file and
  decoding it, with the peak memory of each (in a fresh subprocess: the rise of the peak RSS
  over the process's state before the read), against the layout's largest tensor;
* **compute**: a training step and a replayed step (seconds, and per parameter);
* **Δ**: bytes of the quantized pseudo-gradient per parameter;
* **detection**: the probability that the challenged segments (``protocol.rules.sampling``:
  ``k`` of the first ``S − 1`` plus the last) hit at least one of ``m = ⌈f · (S − 1)⌉`` faked
  segments, exactly (hypergeometric) and by sampling the protocol's own function over 20,000
  seeds; a cheater fakes only segments before the last (the last is always replayed).

Run: ``.venv/bin/python bench/scale_costs.py [--preset small] [--threads 2] [--json out.json]``
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import hashlib
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from protocol.rules.beacon import genesis_seed
from protocol.rules.sampling import challenged_segments
from trainer.checkpoint import Checkpoint, checkpoint_layout
from trainer.data import Dataset
from trainer.delta import encode_delta, quantize
from trainer.determinism import configure
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, replay_segment, start_checkpoint, train_steps
from trainer.outer import GlobalState
from trainer.presets import preset, replay_share
from trainer.snapshot import LeafWriter
from trainer.step import Stepper
from trainer.tensorfile import expected_size

HOST = "inj1scalecostsbenchhost"


def best(fn, repeats: int = 3) -> float:
    """The fastest of ``repeats`` timings (the least disturbed by other work on a shared machine)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def limits() -> dict:
    buf = os.urandom(256 << 20)
    sha = best(lambda: hashlib.sha256(buf).digest())
    src = torch.empty(128 << 20, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    copy = best(lambda: dst.copy_(src))
    return {"sha256_GBps": len(buf) / sha / 1e9, "memcpy_GBps": src.numel() * 4 / copy / 1e9}


READER = """
import gc, os, sys, pathlib, threading, time
from protocol.rules.spec import RunSpec
from trainer.checkpoint import stream_checkpoint, decode_checkpoint, checkpoint_layout
from trainer.tensorstream import file_chunks, TensorStream
from trainer.checkpoint import FORMAT
from protocol.rules.hashing import Tag
spec = RunSpec.from_canonical(pathlib.Path(sys.argv[1]).read_text())
path, mode, leaf = pathlib.Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
layout = checkpoint_layout(spec, leaf)
page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * page
# The peak of the resident set while reading, sampled every 0.2 ms by a thread (ru_maxrss would
# include the imports' peak).
def read():
    if mode == "stream-keep-nothing":
        s = TensorStream(file_chunks(path), layout, Tag.CHECKPOINT, str(path), FORMAT)
        for name, t in s: pass
        return s.digest
    if mode == "stream-decode":
        ckpt, digest = stream_checkpoint(file_chunks(path), spec, leaf)
        return digest
    return decode_checkpoint(path.read_bytes(), spec, leaf).leaf_hash()
read()  # warm up: the code paths' pages and allocator arenas are then part of the baseline
gc.collect()
top, go, done = [0], threading.Event(), threading.Event()
def sample():
    go.wait()
    while not done.is_set():
        top[0] = max(top[0], rss())
        time.sleep(0.0002)
sampler = threading.Thread(target=sample)
sampler.start()  # before the baseline: its stack and arena are not the read's
time.sleep(0.05)
before = rss()
go.set()
digest = read()
done.set()
sampler.join()
print(max(top[0], rss()) - before, digest.hex())
"""


def reader_memory(spec, path: Path, leaf: int) -> dict:
    out = {}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(spec.canonical().decode())
    try:
        for mode in ("stream-keep-nothing", "stream-decode", "whole-file"):
            # A fixed mmap threshold: every buffer of 128 KiB or more is mapped and unmapped on its own,
            # so the resident set shows what the read holds (glibc's adaptive threshold would keep
            # freed buffers in the heap, hiding or inflating the figure).
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent),
                                                                os.environ.get("PYTHONPATH", "")]),
                   "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}
            res = subprocess.run([sys.executable, "-c", READER, f.name, str(path), mode, str(leaf)],
                                 capture_output=True, text=True, check=True, env=env)
            rise, digest = res.stdout.split()
            out[mode] = {"peak_rise_bytes": int(rise), "digest": digest}
    finally:
        os.unlink(f.name)
    return out


def detection(spec, fractions: list[float], samples: int = 20_000) -> list[dict]:
    s, k = spec.train.segments, spec.verification.challenges_k
    rows = []
    for f in fractions:
        m = min(s - 1, math.ceil(f * (s - 1)))
        exact = 1 - math.comb(s - 1 - m, k) / math.comb(s - 1, k)
        faked = set(range(m))  # which ones does not matter: the sampler is uniform
        hits = sum(bool(faked & set(challenged_segments(i.to_bytes(32, "big"), HOST, s, k)))
                   for i in range(samples))
        rows.append({"f": f, "faked_segments": m, "p_detect_exact": exact, "p_detect_sampled": hits / samples,
                     "epochs_to_99pct": math.ceil(math.log(0.01) / math.log(1 - exact)) if exact < 1 else 1})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure(args.threads)
    spec = preset(args.preset)
    n_params = sum(p.numel() for p in GlobalState.initial(spec).params.values())
    result: dict = {"preset": args.preset, "parameters": n_params, "threads": torch.get_num_threads(),
                    "H": spec.train.inner_steps, "c": spec.train.segment_steps, "S": spec.train.segments,
                    "k": spec.verification.challenges_k, "r": spec.verification.validators_r,
                    "replay_share_steps": replay_share(spec)}
    result["limits"] = limits()
    print(json.dumps(result["limits"]), flush=True)

    dataset = Dataset.load(spec.data)
    run_id = spec.run_id()
    ctx = EpochContext(run_id, 0, HOST, genesis_seed(run_id))
    theta = GlobalState.initial(spec).params
    stepper = Stepper(spec)
    start = start_checkpoint(spec, theta, 0)
    stepper.load(start.state)
    step_s = best(lambda: train_steps(stepper, dataset, spec, ctx,
                                      range(stepper.step_count, stepper.step_count + 1), 1))
    leaf = Checkpoint(stepper.export(), torch.zeros(spec.train.segment_steps), 1)
    leaf.state.step = spec.train.segment_steps  # a valid leaf 1 to write and read back
    nbytes = sum(t.numel() * t.element_size() for t in leaf.tensors().values())
    export_s = best(stepper.export)
    hash_s = best(leaf.leaf_hash)
    with tempfile.TemporaryDirectory() as tmp:
        store = EpochStore(Path(tmp), run_id, HOST)
        store.directory(0).mkdir(parents=True)
        write_s = best(lambda: store.write_leaf(0, 1, leaf))
        path = store.leaf_path(0, 1)

        def background() -> None:
            writer = LeafWriter(store, spec, 0, 1)
            writer.submit(1, leaf)
            writer.finish()

        pipeline_s = best(background)
        readers = reader_memory(spec, path, 1)
        assert all(r["digest"] == leaf.leaf_hash().hex() for r in readers.values())
        file_bytes = path.stat().st_size
    from trainer.evaluate import validation_loss  # noqa: PLC0415 - only here
    val_s = best(lambda: validation_loss(stepper.model, dataset), repeats=2)
    start_replay = start_checkpoint(spec, theta, 0)
    replay_s = best(lambda: replay_segment(spec, dataset, ctx, start_replay, stepper), repeats=2)
    payload = quantize({n: torch.randn(p.shape) * 1e-3 for n, p in theta.items()}, spec.quantization)
    delta_bytes = len(encode_delta(payload, spec.quantization))
    largest = max(expected_size({n: v}) for n, v in checkpoint_layout(spec, 1).items())
    result.update({
        "leaf_bytes": nbytes, "leaf_file_bytes": file_bytes, "largest_tensor_bytes": largest,
        "train_step_s": step_s, "replay_step_s": replay_s / spec.train.segment_steps,
        "validation_loss_s": val_s, "validation_loss_of_epoch": val_s / (step_s * spec.train.inner_steps),
        "export_s": export_s, "export_GBps": nbytes / export_s / 1e9,
        "leaf_hash_s": hash_s, "leaf_hash_GBps": nbytes / hash_s / 1e9,
        "leaf_write_s": write_s, "leaf_write_GBps": file_bytes / write_s / 1e9,
        "background_leaf_s": pipeline_s, "background_leaf_GBps": nbytes / pipeline_s / 1e9,
        "delta_bytes": delta_bytes, "delta_bytes_per_param": delta_bytes / n_params,
        "readers": {mode: {**r, "times_largest_tensor": r["peak_rise_bytes"] / largest,
                           "times_leaf": r["peak_rise_bytes"] / nbytes} for mode, r in readers.items()},
        "detection": detection(spec, [0.01, 0.02, 0.05, 0.1, 0.2, 0.5]),
    })
    lim = result["limits"]
    result["hash_of_sha256_limit"] = result["leaf_hash_GBps"] / lim["sha256_GBps"]
    result["export_of_memcpy_limit"] = result["export_GBps"] / lim["memcpy_GBps"]
    result["per_step_snapshot_share"] = {
        "copy_on_training_thread": export_s / (step_s * spec.train.segment_steps),
        "background_work": pipeline_s / (step_s * spec.train.segment_steps)}
    print(json.dumps(result, indent=1, default=str))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
