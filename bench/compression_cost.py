"""What topk2 with error feedback costs per epoch at a preset's size, host and validator, against int8.

Per scheme, on a Δ and a residual of the preset's parameter shapes (Gaussian: the codec's work does
not depend on the values), timed side by side in one process, median of ``--repeats``:

* host: the payload (and for topk2 the next residual and its digest), then the Δ hash;
* validator (last segment): for topk2 the digest of the carried residual, the payload recomputed
  from θ_e − θ_S plus it, and its hash (what ``verifier.replay`` does besides the replay); for
  int8 the dequantization and the per-block check (``verifier.measure.delta_check``);
* bytes of the payload, per parameter, and data parallelism's float32 bytes per epoch ÷ them.

Every repeat runs every scheme's host and validator work in turn, so load lands on all alike.

Run: ``.venv/bin/python bench/compression_cost.py --preset small``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

from protocol.rules.spec import QuantizationSpec
from trainer.compress import compress, residual_digest
from trainer.delta import delta_hash, dequantize, encode_pseudo_gradient, payload_bytes
from trainer.determinism import configure
from trainer.model import parameter_shapes
from trainer.presets import preset
from verifier.measure import delta_check


def _host(delta: dict[str, torch.Tensor], residual: dict[str, torch.Tensor], quant: QuantizationSpec) -> bytes:
    return delta_hash(encode_pseudo_gradient(delta, quant, residual)[0])


def _validator(delta: dict[str, torch.Tensor], residual: dict[str, torch.Tensor], block: int) -> bytes:
    residual_digest(residual)  # the carried residual against the previous Δ's ef/next
    return delta_hash(compress(delta, residual, block)[0])


def _medians_s(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds of each function, the functions called in turn within every repeat (so the
    machine's load lands on all of them alike)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--blocks", default="1024,4096", help="topk2 block sizes")
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    configure(args.threads)
    spec = preset(args.preset)
    shapes = parameter_shapes(spec)
    n = sum(torch.Size(s).numel() for s in shapes.values())
    g = torch.Generator().manual_seed(0)
    delta = {k: torch.randn(tuple(s), generator=g) * 1e-3 for k, s in shapes.items()}
    residual = {k: torch.randn(tuple(s), generator=g) * 1e-4 for k, s in shapes.items()}
    h = spec.train.inner_steps
    int8 = QuantizationSpec(scheme="int8", block_size=64)
    payload8, _ = encode_pseudo_gradient(delta, int8)
    fns: dict[str, Callable[[], object]] = {
        "int8, block 64/host": lambda: delta_hash(encode_pseudo_gradient(delta, int8)[0]),
        "int8, block 64/validator": lambda: delta_check(dequantize(payload8, shapes, int8), payload8, delta, int8),
    }
    sizes = {"int8, block 64": payload_bytes(payload8)}
    for block in (int(b) for b in args.blocks.split(",")):
        quant = QuantizationSpec(scheme="topk2", block_size=block)
        name = f"topk2, block {block}"
        sizes[name] = payload_bytes(encode_pseudo_gradient(delta, quant, residual)[0])
        fns[f"{name}/host"] = partial(_host, delta, residual, quant)
        fns[f"{name}/validator"] = partial(_validator, delta, residual, block)
    seconds = _medians_s(fns, args.repeats)
    rows: list[dict[str, float | str]] = []
    for name, size in sizes.items():
        rows.append({"scheme": name, "host_s": seconds[f"{name}/host"],
                     "validator_s": seconds[f"{name}/validator"], "bytes": size})
    print(f"{args.preset}: {n:,} parameters, H = {h}; torch threads {torch.get_num_threads()}")
    print("| scheme | host s per epoch | validator s per last-segment check | bytes per epoch | bytes per parameter"
          " | data-parallel bytes per epoch ÷ these |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        nbytes = float(r["bytes"])
        r["bytes_per_parameter"] = nbytes / n
        r["vs_data_parallel"] = 4 * n * h / nbytes
        print(f"| {r['scheme']} | {r['host_s']:.3f} | {r['validator_s']:.3f} | {int(r['bytes']):,} | "
              f"{r['bytes_per_parameter']:.4f} | {r['vs_data_parallel']:,.0f}× |")
    if args.json:
        args.json.write_text(json.dumps({"config": vars(args) | {"json": str(args.json)}, "parameters": n,
                                         "inner_steps": h, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
