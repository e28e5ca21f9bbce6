"""The per-byte and per-parameter costs the scaling model (``docs/scaling.md``) is fed with, measured
at a preset (default ``small``), and the detection probability at its defaults.

Measured in one process, on this machine:

* **limits**: single-thread SHA-256 (``hashlib``, 256 MiB) and memory bandwidth (a 512 MiB float32
  ``copy_``: bytes copied per second; each byte is read once and written once);
* **snapshot**: :meth:`Stepper.export` (the copy taken on the training thread), the leaf hash
  (:meth:`Checkpoint.leaf_hash`, on one thread and on two), the (streamed) write + fsync of the
  leaf file, and the background writer's whole path, each per byte of leaf;
* **readers**: a leaf and a Δ read back through the streaming reader (:func:`stream_checkpoint` /
  :func:`stream_delta`: check, hash, decode) against reading the whole file and decoding it, each
  from its file (:func:`trainer.tensorstream.file_chunks`) and from the project's HTTP server in
  another process (``HttpArtifacts.checkpoint_chunks`` / ``delta_chunks``, through the hardened
  client), with the peak memory of each (in a fresh subprocess: the rise of the peak RSS over the
  process's state before the read), against the layout's largest tensor;
* **host memory**: the peak rise of a fresh process's resident set while it trains an epoch of
  ``--memory-segments`` segments of one step each through :func:`trainer.inner.run_epoch` (leaves
  copied, hashed and written behind training, every 4th stored), in leaves: what the snapshot
  queue holds, whatever the epoch's length;
* **compute**: a training step and a replayed step (seconds, and per parameter);
* **Δ**: bytes of the quantized pseudo-gradient per parameter;
* **detection**: the probability that the challenged segments (``protocol.rules.sampling``:
  ``k`` of the first ``S − 1`` plus the last) hit at least one of ``m = ⌈f · (S − 1)⌉`` faked
  segments, exactly (hypergeometric) and by sampling the protocol's own function over 20,000
  seeds; a cheater fakes only segments before the last (the last is always replayed).

Run: ``.venv/bin/python bench/scale_costs.py [--preset small] [--threads 2] [--json out.json]``
(``--readers-only``: only the readers' memory, local and remote; ``--host-memory-only``: only the
host's memory over an epoch)
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
from trainer.delta import delta_hash, encode_delta, payload_layout, quantize
from trainer.determinism import configure
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, replay_segment, start_checkpoint, train_steps
from trainer.model import parameter_shapes
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


PEAK_RSS = """
import os, threading, time
_page = os.sysconf("SC_PAGE_SIZE")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _page
def peak_rise(fn):
    # fn()'s result and the peak rise of the resident set while it ran, sampled every 0.2 ms by a
    # thread (ru_maxrss would include the imports' peak), started before the baseline so that its
    # stack and arena are not fn's.
    top, go, done = [0], threading.Event(), threading.Event()
    def sample():
        go.wait()
        while not done.is_set():
            top[0] = max(top[0], rss())
            time.sleep(0.0002)
    sampler = threading.Thread(target=sample)
    sampler.start()
    time.sleep(0.05)
    before = rss()
    go.set()
    try:
        out = fn()
    finally:
        done.set()
        sampler.join()
    return out, max(top[0], rss()) - before
"""


def child_env() -> dict[str, str]:
    """The environment of a measuring subprocess: this checkout importable, and a fixed mmap
    threshold, so that every buffer of 128 KiB or more is mapped and unmapped on its own and the
    resident set shows what the code holds (glibc's adaptive threshold would keep freed buffers in
    the heap, hiding or inflating the figure)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent),
                                                         os.environ.get("PYTHONPATH", "")]),
            "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


READER = PEAK_RSS + """
import gc, sys, pathlib
from protocol.rules.spec import RunSpec
from protocol.keys import PrivateKey
from trainer.checkpoint import stream_checkpoint, decode_checkpoint, checkpoint_layout
from trainer.delta import stream_delta, decode_delta, delta_hash, payload_layout
from trainer.model import parameter_shapes
from trainer.tensorstream import file_chunks, TensorStream
from trainer.checkpoint import FORMAT
from protocol.rules.hashing import Tag
from node.http_client import HttpArtifacts
spec = RunSpec.from_canonical(pathlib.Path(sys.argv[1]).read_text())
where, mode, kind, leaf = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
remote = where.startswith("http")
if kind == "leaf":
    layout, tag, meta = checkpoint_layout(spec, leaf), Tag.CHECKPOINT, FORMAT
else:
    layout, tag = payload_layout(parameter_shapes(spec), spec.quantization), Tag.DELTA
    meta = {}
def chunks():
    if not remote:
        return file_chunks(pathlib.Path(where))
    # A fresh client each read, through the hardened HTTP layer (deadline, caps, identity only).
    source = HttpArtifacts(where, PrivateKey(b"\\x07" * 32), spec, allow_private=True)
    return source.checkpoint_chunks(0, leaf) if kind == "leaf" else source.delta_chunks(0)
def whole():
    if not remote:
        return pathlib.Path(where).read_bytes()
    source = HttpArtifacts(where, PrivateKey(b"\\x07" * 32), spec, allow_private=True)
    return source.checkpoint(0, leaf) if kind == "leaf" else source.delta(0)
def read():
    if mode == "stream-keep-nothing":
        s = TensorStream(chunks(), layout, tag, where, meta)
        for name, t in s: pass
        return s.digest
    if mode == "stream-decode":
        if kind == "leaf":
            return stream_checkpoint(chunks(), spec, leaf)[1]
        return stream_delta(chunks(), spec)[1]
    if kind == "leaf":
        return decode_checkpoint(whole(), spec, leaf).leaf_hash()
    return delta_hash(decode_delta(whole(), spec))
read()  # warm up: the code paths' pages and allocator arenas are then part of the baseline
gc.collect()
digest, rise = peak_rise(read)
print(rise, digest.hex())
"""

SERVER = """
import pathlib, sys, time
from protocol.rules.spec import RunSpec
from node.server import ServerThread, create_app
from trainer.artifacts import LocalArtifacts
spec = RunSpec.from_canonical(pathlib.Path(sys.argv[1]).read_text())
source = LocalArtifacts(pathlib.Path(sys.argv[2]), spec.run_id(), sys.argv[3])
server = ServerThread(create_app(source, spec.run_id().hex(), sys.argv[3], authorize=lambda a: True)).start()
print(server.url, flush=True)
sys.stdin.read()  # serve until the benchmark closes our stdin
server.stop()
"""

MODES = ("stream-keep-nothing", "stream-decode", "whole-file")

HOST_EPOCH = PEAK_RSS + """
import pathlib, sys, tempfile
from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import RunSpec
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.inner import EpochContext, run_epoch, start_checkpoint, train_steps
from trainer.outer import GlobalState
from trainer.step import Stepper
configure(int(sys.argv[2]))
spec = RunSpec.from_canonical(pathlib.Path(sys.argv[1]).read_text())
dataset = Dataset.load(spec.data)
run_id = spec.run_id()
ctx = EpochContext(run_id, 0, "inj1scalecostsbenchhost", genesis_seed(run_id))
theta = GlobalState.initial(spec).params
stepper = Stepper(spec)
stepper.load(start_checkpoint(spec, theta, 0).state)
train_steps(stepper, dataset, spec, ctx, range(1), 1)  # warm: autograd buffers and AdamW state exist
def epoch():
    t0, c0 = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        run_epoch(spec, dataset, ctx, theta, pathlib.Path(tmp), stepper=stepper, full_leaf_every=4)
    return time.perf_counter() - t0, time.process_time() - c0
(wall, cpu), rise = peak_rise(epoch)
print(rise, wall, cpu)
"""


def host_memory(spec, segments: int, threads: int) -> dict:
    """Peak RSS rise of a fresh process training an epoch of ``segments`` one-step segments of
    ``spec``'s model (:data:`HOST_EPOCH`), against the size of one leaf."""
    short = spec.with_changes(train={"inner_steps": segments, "segment_steps": 1})
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(short.canonical().decode())
    try:
        res = subprocess.run([sys.executable, "-c", HOST_EPOCH, f.name, str(threads)],
                             capture_output=True, text=True, check=True, env=child_env())
    finally:
        os.unlink(f.name)
    rise, wall, cpu = res.stdout.split()[-3:]
    leaf = sum(expected_size({n: v}) for n, v in checkpoint_layout(short, 1).items())
    return {"segments": segments, "peak_rise_bytes": int(rise), "leaf_bytes": leaf,
            "times_leaf": int(rise) / leaf, "all_leaves_bytes": (segments + 1) * leaf,
            "epoch_wall_s": float(wall), "epoch_cpu_s": float(cpu)}


def reader_memory(spec, store: EpochStore, leaf: int) -> dict:
    """Peak RSS rise of a fresh process reading leaf ``leaf`` and the Δ of epoch 0 of ``store``, from
    its files and from a real HTTP server (the project's, in another process) serving them."""
    out: dict = {}
    env = child_env()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(spec.canonical().decode())
    server = subprocess.Popen([sys.executable, "-c", SERVER, f.name, str(store.root), store.host],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        files = {"leaf": store.leaf_path(0, leaf), "delta": store.delta_path(0)}
        for kind, path in files.items():
            for where, place in (("local", str(path)), ("remote", url)):
                for mode in MODES:
                    res = subprocess.run([sys.executable, "-c", READER, f.name, place, mode, kind, str(leaf)],
                                         capture_output=True, text=True, check=True, env=env)
                    rise, digest = res.stdout.split()
                    out[f"{kind} {where} {mode}"] = {"peak_rise_bytes": int(rise), "digest": digest}
    finally:
        assert server.stdin is not None
        server.stdin.close()
        server.wait(timeout=30)
        os.unlink(f.name)
    return out


def readers(spec) -> dict:
    """:func:`reader_memory` of a valid leaf 1 and a Δ of ``spec``, each figure against the largest
    tensor and the whole file of what was read (all reads must give the committed hash)."""
    theta = GlobalState.initial(spec).params
    stepper = Stepper(spec)
    stepper.load(start_checkpoint(spec, theta, 0).state)
    leaf = Checkpoint(stepper.export(), torch.zeros(spec.train.segment_steps), 1)
    leaf.state.step = spec.train.segment_steps  # a valid leaf 1 to write and read back
    payload = quantize({n: torch.randn(p.shape) * 1e-3 for n, p in theta.items()}, spec.quantization)
    with tempfile.TemporaryDirectory() as tmp:
        store = EpochStore(Path(tmp), spec.run_id(), HOST)
        store.directory(0).mkdir(parents=True)
        store.write_leaf(0, 1, leaf)
        store.delta_path(0).write_bytes(encode_delta(payload, spec.quantization))
        sizes = {"leaf": store.leaf_path(0, 1).stat().st_size, "delta": store.delta_path(0).stat().st_size}
        measured = reader_memory(spec, store, 1)
    want = {"leaf": leaf.leaf_hash().hex(), "delta": delta_hash(payload).hex()}
    layouts = {"leaf": checkpoint_layout(spec, 1),
               "delta": payload_layout(parameter_shapes(spec), spec.quantization)}
    out = {}
    for name, r in measured.items():
        kind = name.split()[0]
        assert r["digest"] == want[kind], name
        largest = max(expected_size({n: v}) for n, v in layouts[kind].items())
        out[name] = {**r, "largest_tensor_bytes": largest, "file_bytes": sizes[kind],
                     "times_largest_tensor": r["peak_rise_bytes"] / largest,
                     "times_file": r["peak_rise_bytes"] / sizes[kind]}
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
    parser.add_argument("--readers-only", action="store_true",
                        help="measure only the readers' memory (local and remote), a few minutes")
    parser.add_argument("--host-memory-only", action="store_true",
                        help="measure only the host's memory over an epoch")
    parser.add_argument("--memory-segments", type=int, default=48,
                        help="segments (of one step) of the epoch the host's memory is measured over")
    args = parser.parse_args()
    configure(args.threads)
    spec = preset(args.preset)
    n_params = sum(p.numel() for p in GlobalState.initial(spec).params.values())
    result: dict = {"preset": args.preset, "parameters": n_params, "threads": torch.get_num_threads(),
                    "H": spec.train.inner_steps, "c": spec.train.segment_steps, "S": spec.train.segments,
                    "k": spec.verification.challenges_k, "r": spec.verification.validators_r,
                    "replay_share_steps_per_picker": replay_share(spec, 1)}
    if args.host_memory_only:
        result["host_memory"] = host_memory(spec, args.memory_segments, args.threads)
        print(json.dumps(result, indent=1, default=str))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1, default=str))
        return
    if args.readers_only:
        result["readers"] = readers(spec)
        print(json.dumps(result, indent=1, default=str))
        if args.json:
            args.json.write_text(json.dumps(result, indent=1, default=str))
        return
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
    hash2_s = best(lambda: leaf.leaf_hash(threads=2))  # chunk digests on two threads (the writer's
    # default on a host with four or more cores; here both cores, so read it on an idle machine)
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
        file_bytes = path.stat().st_size
    from trainer.evaluate import validation_loss  # noqa: PLC0415 - only here
    val_s = best(lambda: validation_loss(stepper.model, dataset, spec.data.val_windows), repeats=2)
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
        "leaf_hash_2_threads_s": hash2_s, "leaf_hash_2_threads_GBps": nbytes / hash2_s / 1e9,
        "leaf_write_s": write_s, "leaf_write_GBps": file_bytes / write_s / 1e9,
        "background_leaf_s": pipeline_s, "background_leaf_GBps": nbytes / pipeline_s / 1e9,
        "delta_bytes": delta_bytes, "delta_bytes_per_param": delta_bytes / n_params,
        "readers": readers(spec),
        "host_memory": host_memory(spec, args.memory_segments, args.threads),
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
