"""The cost model of ``docs/scaling.md``: veriloco's per-epoch costs projected to 1 B, 10 B and 50 B
parameters over 1 Gbit/s links, from measured per-byte and per-parameter costs.

Inputs measured on this repository's code (``bench/scale_costs.py --json``, ``bench/protocol_overhead.py``,
and the devnet's finalize gas in ``docs/benchmarks.md``) and stated assumptions about the hardware
at scale (``--node-tflops``, ``--link-gbps``, ``--disk-gbps``, ``--pcie-gbps``; 8 hashing threads per host).
Nothing at 1 B+ was run: every figure at those sizes is this model's arithmetic, and says so.

A host-epoch, for a model of ``N`` parameters, ``H = S·c`` inner steps of ``B·T`` tokens, ``n`` hosts, ``k``
challenges plus the last segment, ``r`` validators each, and every ``K``-th leaf stored:

* compute: ``H · 6·N·B·T / F`` (F: the host's sustained FLOP/s);
* a leaf is ``12·N`` bytes (float32 parameters and both AdamW moments); per leaf the training thread
  copies it (GPU→host at ``pcie``), the background hashes it (SHA-256 at the measured single-thread
  rate × 8 threads: the leaf digest is over 1 MiB chunks, and a host's writer uses half its cores,
  at most 8) and writes every
  ``K``-th (at ``disk``); hidden while ``hash + write ≤ c · t_step``;
* storage: ``(S/K + 2) · 12N`` plus Δ (``δ·N`` bytes, δ measured: int8 with a float scale per 64);
* recomputation for challenges: on average ``(K+1)/2 − 1/K`` segments per random challenge (the last
  segment's two leaves are stored), ``k`` of them;
* validators: ``r·(k+1)`` challenges, each fetching two leaves (``2·12N`` bytes) and replaying ``c``
  steps; their compute share is ``r·(k+1)/S``;
* bandwidth: the host uploads ``Δ`` to each of ``n − 1`` peers (every host aggregates every accepted
  Δ: all-to-all) and ``2·12N`` per challenge to validators; it downloads ``(n − 1)·Δ``;
* the epoch's wall time: the host trains, then waits for the slowest of: its challenges' leaves
  reaching validators (one link) plus a replay of ``c`` steps, and the Δ exchange; utilisation is
  compute over that total (phases do not overlap in the protocol as built);
* chain: per host-epoch join + commit + reveal + propose + ``r·(k+1)`` verdicts + the host's share
  of finalize (linear fit of the devnet's measurements at 16 and 64 hosts), at the devnet's fee of
  1.6e8 inj per gas.

Run: ``.venv/bin/python bench/scaling_model.py --costs costs.json [--hosts 16] [--sha256-gbps 1.34] [--markdown]``
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

# Devnet gas of the artifact before the settlement game (4 validators, S = 2, k = 1, r = 2; finalize 509k /
# 1,029k / 3,110k in docs/benchmarks-archive.md#chain-embedded-before-the-settlement-game-and-paging).
FINALIZE_GAS = {4: 508_929, 16: 1_028_755, 64: 3_109_885}
MESSAGE_GAS = {"join": 152_000, "commit": 157_000, "reveal": 148_000, "propose": 163_000, "verdict": 155_000}
BLOCK_GAS = 10_000_000
FEE_INJ_PER_GAS = 1.6e8  # the devnet's fee: gas limit × 1.6e8 inj (1 INJ = 1e18 inj)


def finalize_fit() -> tuple[float, float]:
    """Slope and intercept of finalize gas against hosts, through the 16- and 64-host measurements."""
    slope = (FINALIZE_GAS[64] - FINALIZE_GAS[16]) / 48
    return slope, FINALIZE_GAS[16] - 16 * slope


def finalize_gas(hosts: int) -> float:
    slope, intercept = finalize_fit()
    return intercept + slope * hosts


@dataclass
class Size:
    name: str
    params: float
    batch_tokens: int  # tokens per inner step per host
    gpus: int  # GPUs per host
    segment_steps: int
    segments: int
    full_leaf_every: int


def project(size: Size, costs: dict, hosts: int, gpu_tflops: float, link_gbps: float, disk_gbps: float,
            pcie_gbps: float, changed: bool) -> dict:
    """One size's host-epoch. ``changed``: the protocol with the changes docs/scaling.md names (one
    upload per challenge to a store its r validators share with the end leaf checked by sketches
    instead of fetched, Δ exchanged by a reduce-scatter/all-gather instead of all-to-all); otherwise
    the protocol as built. Both hash a leaf on 8 threads (chunked digests, built)."""
    n, k, r = size.params, costs["k"], costs["r"]
    c, s, kk = size.segment_steps, size.segments, size.full_leaf_every
    h = c * s
    leaf = 12 * n
    delta = costs["delta_bytes_per_param"] * n
    link = link_gbps * 1e9 / 8
    hash_threads = 8
    t_step = 6 * n * size.batch_tokens / (gpu_tflops * 1e12 * size.gpus)
    compute = h * t_step
    sha = costs["limits"]["sha256_GBps"] * 1e9 * hash_threads
    copy_s = leaf / (pcie_gbps * 1e9 * size.gpus)  # each GPU copies its shard
    hash_s = leaf / sha
    write_s = leaf / (disk_gbps * 1e9) / kk  # amortized: one leaf in K is written
    segment_s = c * t_step
    background = hash_s + write_s
    stall_per_leaf = copy_s + max(0.0, background - segment_s)  # the copy, and what the background cannot hide
    snapshot_exposed = s * stall_per_leaf
    mean_recompute_segments = ((kk + 1) / 2 - 1 / kk) if kk > 1 else 0.0
    recompute = k * mean_recompute_segments * segment_s
    storage = (s / kk + 2) * leaf + delta
    challenges = r * (k + 1)
    leaf_uploads = (k + 1) * leaf if changed else challenges * 2 * leaf
    delta_traffic = 2 * delta if changed else (hosts - 1) * delta
    upload = delta_traffic + leaf_uploads
    download = delta_traffic
    # The verify phase: the host recomputes what it did not store, its uplink carries every
    # challenged leaf, then a validator replays c steps (on hardware like the host's).
    verify_s = recompute + leaf_uploads / link + segment_s
    exchange_s = delta_traffic / link
    epoch_s = compute + snapshot_exposed + verify_s + exchange_s
    gas = (MESSAGE_GAS["join"] + MESSAGE_GAS["commit"] + MESSAGE_GAS["reveal"] + MESSAGE_GAS["propose"]
           + challenges * MESSAGE_GAS["verdict"] + finalize_gas(hosts) / hosts)
    return {
        **asdict(size), "hosts": hosts, "inner_steps": h, "step_s": t_step, "compute_s": compute,
        "leaf_GB": leaf / 1e9, "delta_GB": delta / 1e9,
        "copy_s_per_leaf": copy_s, "hash_s_per_leaf": hash_s, "write_s_per_leaf_amortized": write_s,
        "segment_s": segment_s, "background_hidden": background <= segment_s,
        "variant": "changed" if changed else "as built", "hash_threads": hash_threads,
        "snapshot_exposed_s": snapshot_exposed, "recompute_s": recompute,
        "validator_share": challenges / s, "verify_phase_s": verify_s,
        "storage_GB_per_host_epoch": storage / 1e9,
        "upload_GB_per_host_epoch": upload / 1e9, "download_GB_per_host_epoch": download / 1e9,
        "exchange_s": exchange_s, "epoch_s": epoch_s, "utilisation": compute / epoch_s,
        "gas_per_host_epoch": gas, "inj_per_host_epoch": gas * FEE_INJ_PER_GAS / 1e18,
        "finalize_gas": finalize_gas(hosts), "finalize_fits_block": finalize_gas(hosts) * 1.3 + 50_000 <= BLOCK_GAS,
    }


SIZES = [
    # H = 640 (S = 160 segments of c = 4) at every size (small has 1200 = 200 × 6: at 1,024 tokens a step its
    # fixed costs need the longer epoch): S ≥ 120 is what keeps the
    # validators' replays under 5 % at k = r = 2. Hosts of 8 GPUs (INTELLECT-1's nodes) up to 10 B,
    # 32 at 50 B; tokens per step grow with the model.
    Size("1B", 1e9, 524_288, 8, 4, 160, 8),
    Size("10B", 1e10, 1_048_576, 8, 4, 160, 16),
    Size("50B", 5e10, 2_097_152, 32, 4, 160, 32),
]


def markdown(rows: list[dict]) -> str:
    """The projection as the table of docs/scaling.md (one column per variant and size)."""
    head = [f"{r['name']} {r['variant']}" for r in rows]
    lines = ["| | " + " | ".join(head) + " |", "| --- |" + " --- |" * len(rows)]

    def row(label: str, fmt) -> None:
        lines.append(f"| {label} | " + " | ".join(fmt(r) for r in rows) + " |")

    row("GPUs per host, tokens per step", lambda r: f"{r['gpus']}, {r['batch_tokens'] / 1e6:.2g} M")
    row("inner step (s)", lambda r: f"{r['step_s']:.2f}")
    row("host compute per epoch (h)", lambda r: f"{r['compute_s'] / 3600:.2f}")
    row("leaf (GB)", lambda r: f"{r['leaf_GB']:,.0f}")
    row("leaf hash (s, threads) / segment (s)",
        lambda r: f"{r['hash_s_per_leaf']:.0f} ({r['hash_threads']}) / {r['segment_s']:.0f}")
    row("snapshot stall per epoch (s)", lambda r: f"{r['snapshot_exposed_s']:,.0f}")
    row("stored K, storage per host-epoch (GB)",
        lambda r: f"{r['full_leaf_every']}, {r['storage_GB_per_host_epoch']:,.0f}")
    row("recomputation for challenges (s)", lambda r: f"{r['recompute_s']:,.0f}")
    row("verify phase (h)", lambda r: f"{r['verify_phase_s'] / 3600:.2f}")
    row("Δ (GB), exchange (h)", lambda r: f"{r['delta_GB']:.1f}, {r['exchange_s'] / 3600:.2f}")
    row("upload / download per host-epoch (GB)",
        lambda r: f"{r['upload_GB_per_host_epoch']:,.0f} / {r['download_GB_per_host_epoch']:,.0f}")
    row("epoch (h)", lambda r: f"{r['epoch_s'] / 3600:.2f}")
    row("**host utilisation**", lambda r: f"**{r['utilisation']:.0%}**")
    row("validators' compute / host's", lambda r: f"{r['validator_share']:.2%}")
    row("gas per host-epoch (INJ at 1.6e8 inj/gas)",
        lambda r: f"{r['gas_per_host_epoch'] / 1e6:.2f} M ({r['inj_per_host_epoch']:.5f})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", type=Path, required=True, help="bench/scale_costs.py --json output")
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--gpu-tflops", type=float, default=400.0,
                        help="a GPU's sustained TFLOP/s (default: the H100 class at 40 %% of its dense bf16 peak)")
    parser.add_argument("--link-gbps", type=float, default=1.0)
    parser.add_argument("--disk-gbps", type=float, default=2.0, help="GB/s a host writes to local NVMe")
    parser.add_argument("--pcie-gbps", type=float, default=25.0, help="GB/s of a GPU→host copy (PCIe 5 x16, "
                                                                      "one direction, overlapped per GPU)")
    parser.add_argument("--sha256-gbps", type=float, help="SHA-256 GB/s to use instead of the costs file's "
                                                          "(which a loaded machine measures low)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", action="store_true", help="print the table of docs/scaling.md")
    args = parser.parse_args()
    costs = json.loads(args.costs.read_text())
    if args.sha256_gbps:
        costs["limits"]["sha256_GBps"] = args.sha256_gbps
    rows = [project(size, costs, args.hosts, args.gpu_tflops, args.link_gbps, args.disk_gbps, args.pcie_gbps,
                    changed) for changed in (False, True) for size in SIZES]
    slope, intercept = finalize_fit()
    out = {"assumptions": {k: v for k, v in vars(args).items() if k not in ("costs", "json", "markdown")},
           "measured": {k: costs[k] for k in ("preset", "parameters", "delta_bytes_per_param", "limits",
                                              "leaf_hash_GBps", "leaf_write_GBps", "export_GBps")},
           "finalize_fit": {"gas_per_host": slope, "intercept": intercept,
                            **{str(h): finalize_gas(h) for h in (64, 256, 1024)}},
           "rows": rows}
    for row in rows:
        print(f"{row['variant']:>8} {row['name']:>4}: step {row['step_s']:.2f} s, "
              f"epoch {row['epoch_s'] / 3600:.2f} h, utilisation "
              f"{row['utilisation']:.0%}, validators {row['validator_share']:.2%}, storage "
              f"{row['storage_GB_per_host_epoch']:,.0f} GB, up {row['upload_GB_per_host_epoch']:,.0f} GB, "
              f"down {row['download_GB_per_host_epoch']:,.0f} GB, hash {row['hash_s_per_leaf']:.0f} s/leaf vs "
              f"segment {row['segment_s']:.0f} s, gas {row['gas_per_host_epoch'] / 1e6:.2f} M "
              f"({row['inj_per_host_epoch']:.5f} INJ)")
    print(json.dumps(out["finalize_fit"]))
    if args.markdown:
        print(markdown(rows))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
