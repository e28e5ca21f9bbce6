"""Writing a leaf file: the old path (a whole safetensors file built in memory, then written) against
the streamed one (:func:`trainer.tensorfile.save_tensors`: header, then each tensor's own memory),
with ``safetensors.torch.save_file`` as a third point. Side by side in one process, interleaved.

Two states: a ``small``-preset leaf (:func:`trainer.inner.start_checkpoint` of the preset's θ_0, its
AdamW moments filled with random values so every page is real) and a synthetic 400 MB fp32 state
(three copies, "param", "exp_avg", "exp_avg_sq", of 33.6 M parameters in seven tensors).

``old``        ``write_atomic(path, encode_tensors(tensors, FORMAT))``: ``safetensors.torch.save``
               into ``bytes``, then tmp file, write, fsync, rename, directory fsync (the code before).
``save_file``  ``safetensors.torch.save_file`` into a tmp path (the library streams from the
               tensors' memory into a temporary file of its own, which it renames over that path),
               then fsync of the file found there, rename, directory fsync.
``streamed``   :func:`save_tensors` (what :meth:`Checkpoint.save` now calls): the same tmp file,
               fsync, rename and directory fsync as ``old``, the bytes written from the tensors.

Per write: CPU seconds of the writing thread (``time.thread_time``: encoding and the kernel's copy into
the page cache; the fsync's wait is not CPU), wall seconds, and the peak extra memory: the rise of the
process's peak RSS (``VmHWM``, reset before each write through ``/proc/self/clear_refs``) over its RSS
just before the write. The machine may be shared: compare the variants' ratios, not the absolute times.

Run: ``.venv/bin/python bench/leaf_write.py [--repeats 7] [--dir DIR] [--json out.json]``
(``--dir``: where the files go, default the system's temporary directory; use a real disk, not tmpfs)

``--epoch N`` measures instead what a host's epoch does: ``N`` *distinct* ``small`` leaves written
one after the other (the writes above replace one path, whose old pages the rename frees at once),
each either left in the page cache (``kept``, the write before 2026-11-29) or dropped from it once
on disk (``dropped``: ``save_tensors(..., drop_cache=True)``, what the leaf writer now does for
every leaf but the last segment's two). Each epoch is thinned to every fourth leaf after it (a
closed epoch at K = 4); the variants alternate in ``--repeats`` blocks of ``--epochs`` epochs, a
block's files deleted before the next. A steady host's page cache is full (its leaves alone are
8 GB an epoch at ``small``), which a block reaches only once the machine's memory (or its memory
cgroup's limit) is: say how full it was when you report. Per leaf: the writing
thread's CPU, wall, and the whole machine's busy CPU (``/proc/stat``, every core: it counts the
kernel's own threads, and also whatever else runs on a shared machine).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import gc
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from safetensors.torch import save_file

from trainer.checkpoint import FORMAT
from trainer.inner import start_checkpoint
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.tensorfile import encode_tensors, save_tensors, write_atomic

Writer = Callable[[Path, Mapping[str, torch.Tensor]], None]


def old(path: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    """The write before streaming: the whole file as ``bytes``, then written atomically."""
    write_atomic(path, encode_tensors(tensors, FORMAT))


def via_save_file(path: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    """``safetensors.torch.save_file`` into a tmp path, made durable and renamed as ``atomic_file`` does."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    save_file({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, str(tmp), metadata=dict(FORMAT))
    fd = os.open(tmp, os.O_RDONLY)  # the file the library left there (not one we opened before it wrote)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def streamed(path: Path, tensors: Mapping[str, torch.Tensor]) -> None:
    """The write now: :func:`save_tensors`."""
    save_tensors(path, tensors, FORMAT)


WRITERS: dict[str, Writer] = {"old": old, "save_file": via_save_file, "streamed": streamed}


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def measure(writer: Writer, path: Path, tensors: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """One write: CPU s of this thread, wall s, and the peak RSS it added (MB)."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # peak RSS := current RSS
    rss0 = _status_kib("VmRSS")
    c0, w0 = time.thread_time(), time.perf_counter()
    writer(path, tensors)
    c1, w1 = time.thread_time(), time.perf_counter()
    return {"cpu_s": c1 - c0, "wall_s": w1 - w0, "peak_extra_MB": (_status_kib("VmHWM") - rss0) * 1024 / 1e6}


def small_leaf() -> dict[str, torch.Tensor]:
    """The tensors of a ``small``-preset leaf, every float filled with random values."""
    spec = preset("small")
    leaf = start_checkpoint(spec, GlobalState.initial(spec).params, 0)
    gen = torch.Generator().manual_seed(0)
    for name, t in leaf.state.tensors().items():
        if t.is_floating_point() and name != "losses":
            t.copy_(torch.randn(t.shape, generator=gen).abs_() * 1e-3)  # in place: the leaf's own storage
    return leaf.tensors()


def synthetic_400mb() -> dict[str, torch.Tensor]:
    """33.6 M parameters in seven fp32 tensors, three times over: 403 MB."""
    gen = torch.Generator().manual_seed(1)
    shapes = {"wte": (8192, 1024), **{f"h.{i}.w": (1024, 4096) for i in range(6)}}
    return {f"{prefix}/{n}": torch.randn(s, generator=gen)
            for prefix in ("param", "adam.exp_avg", "adam.exp_avg_sq") for n, s in shapes.items()}


def run(name: str, tensors: Mapping[str, torch.Tensor], directory: Path, repeats: int) -> dict:
    """Each writer ``repeats`` times, interleaved; the files must be identical."""
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    rows: dict[str, list[dict[str, float]]] = {w: [] for w in WRITERS}
    for w, fn in WRITERS.items():  # one untimed write each: imports, first-touch of the page cache
        fn(directory / f"{w}.safetensors", tensors)
    files = {w: (directory / f"{w}.safetensors").read_bytes() for w in WRITERS}
    assert len(set(files.values())) == 1, "the writers' files differ"
    del files
    for _ in range(repeats):
        for w, fn in WRITERS.items():
            rows[w].append(measure(fn, directory / f"{w}.safetensors", tensors))
    out: dict = {"state": name, "tensor_MB": nbytes / 1e6, "tensors": len(tensors), "repeats": repeats}
    for w, r in rows.items():
        out[w] = {k: statistics.median(x[k] for x in r) for k in r[0]}
        out[w]["peak_extra_MB_max"] = max(x["peak_extra_MB"] for x in r)
    for w in ("save_file", "streamed"):
        out[f"{w}_cpu_of_old"] = out[w]["cpu_s"] / out["old"]["cpu_s"]
    return out


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine so far (every core; ``/proc/stat``, idle and iowait out)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def epoch_run(tensors: Mapping[str, torch.Tensor], directory: Path, leaves: int, epochs: int,
              blocks: int) -> dict:
    """Per variant, ``blocks`` blocks of ``epochs`` epochs of ``leaves`` distinct leaf files, the
    variants' blocks alternating; after each epoch its leaves are thinned to every fourth (as a
    host's closed epoch, K = 4), and a block's files are deleted before the next block."""
    rows: dict[str, list[dict[str, float]]] = {"kept": [], "dropped": []}
    for _ in range(blocks):
        for variant in rows:
            for e in range(epochs):
                gc.collect()
                c0, w0, m0 = time.thread_time(), time.perf_counter(), machine_busy_s()
                for i in range(leaves):
                    save_tensors(directory / f"e{e}-leaf-{i:04d}.safetensors", tensors, FORMAT,
                                 drop_cache=variant == "dropped")
                c1, w1, m1 = time.thread_time(), time.perf_counter(), machine_busy_s()
                rows[variant].append({"cpu_s": (c1 - c0) / leaves, "wall_s": (w1 - w0) / leaves,
                                      "machine_s": (m1 - m0) / leaves})
                for i in range(leaves):
                    if i % 4:
                        (directory / f"e{e}-leaf-{i:04d}.safetensors").unlink()
            for f in directory.iterdir():
                f.unlink()
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    out: dict = {"state": "small leaf", "leaf_MB": nbytes / 1e6, "leaves": leaves, "epochs": epochs,
                 "blocks": blocks}
    for variant, r in rows.items():
        out[variant] = {k: statistics.median(x[k] for x in r) for k in r[0]}
        out[variant]["runs"] = r
    out["dropped_cpu_of_kept"] = out["dropped"]["cpu_s"] / out["kept"]["cpu_s"]
    out["dropped_machine_of_kept"] = out["dropped"]["machine_s"] / out["kept"]["machine_s"]
    return out


def main_epoch(args: argparse.Namespace) -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        result = epoch_run(small_leaf(), Path(tmp), args.epoch, args.epochs, args.repeats)
    print(json.dumps(result, indent=1), flush=True)
    print(f"| {result['leaves']} distinct {result['leaf_MB']:.0f} MB leaves an epoch, {result['blocks']} blocks of "
          f"{result['epochs']} epochs each | writer CPU s per leaf (median epoch) | wall s per leaf | "
          "machine busy CPU s per leaf |")
    print("| --- | --- | --- | --- |")
    for variant in ("kept", "dropped"):
        m = result[variant]
        print(f"| {variant} | {m['cpu_s']:.4f} | {m['wall_s']:.3f} | {m['machine_s']:.3f} |")
    print(f"dropped / kept: writer CPU {result['dropped_cpu_of_kept']:.2f}×, "
          f"machine {result['dropped_machine_of_kept']:.2f}×")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--epoch", type=int, default=0,
                        help="N: write N distinct small leaves per epoch, kept in or dropped from the page cache")
    parser.add_argument("--epochs", type=int, default=2, help="with --epoch: epochs per block (repeats: blocks)")
    args = parser.parse_args()
    if args.epoch:
        main_epoch(args)
        return
    torch.set_num_threads(1)  # a write is one thread's work; keep torch from spreading the fills
    results = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for name, make in (("small leaf", small_leaf), ("synthetic 400 MB", synthetic_400mb)):
            tensors = make()
            results.append(run(name, tensors, Path(tmp), args.repeats))
            del tensors
            for f in Path(tmp).iterdir():
                f.unlink()
            print(json.dumps(results[-1], indent=1), flush=True)
    print("| state | writer | CPU s per write (median) | × old | wall s (median) | peak extra MB (median / max) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        for w in WRITERS:
            m = r[w]
            print(f"| {r['state']} ({r['tensor_MB']:.0f} MB) | {w} | {m['cpu_s']:.4f} | "
                  f"{m['cpu_s'] / r['old']['cpu_s']:.2f} | {m['wall_s']:.3f} | "
                  f"{m['peak_extra_MB']:.1f} / {m['peak_extra_MB_max']:.1f} |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
