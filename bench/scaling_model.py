"""The cost model of ``docs/scaling.md``: veriloco's per-epoch costs projected to 1 B, 10 B and 50 B
parameters over 1 Gbit/s links, from measured per-byte and per-parameter costs, for the protocol as
built (pipelined epochs, leaves moved once) and with named levers.

Inputs: measured on this repository's code (:class:`Measured`, each field naming its
``docs/benchmarks.md`` section; ``--costs`` overrides the per-byte ones with a fresh
``bench/scale_costs.py --json`` output) and stated assumptions about hardware and deployment at scale
(the command-line options and :class:`Lever`). Nothing at 1 B+ was run: every figure at those sizes
is this model's arithmetic.

A host-epoch, for a model of ``N`` parameters, ``H = S·c`` inner steps of ``B·T`` tokens, ``n`` hosts,
``V`` validators of equal stake, ``P`` pickers per host (the real draw, ``trainer.presets.mean_pickers``),
each picking ``k`` segments and seated on them and the last segment, so ``D`` challenges per host
(:func:`distinct_challenges`; ``k + 1`` with the ``common_seed`` lever), every ``K``-th leaf stored:

* compute ``C = H · 6·N·B·T / F`` (F: the host's sustained FLOP/s); a leaf is ``12·N`` bytes, θ
  (parameters and outer momentum) ``8·N``, a Δ ``δ·N``;
* **on the host's accelerator, besides training** (``A``): per leaf the snapshot copy (GPU→host at
  ``pcie``, on the training thread), plus whatever the background hash (SHA-256 × threads) and write
  (one leaf in K) exceed a segment; the recomputation of the challenged leaves that were not stored
  (each run of ``K`` segments replayed once, as far as its highest challenged leaf:
  :func:`recomputed_segments`);
  the validation loss of the settled proposal (forward only);
* **between two trainings** (``L``, pipelined scheme 3, docs/training.md): encode the Δ, the chain
  steps (commit, reveal close, start vote, join close: ``chain_blocks`` blocks), fetch every committed
  Δ of the epoch (all-to-all: ``(n − 1)·Δ`` through the link; reduce-scatter/all-gather:
  ``2·(n − 1)/n·Δ``), aggregate and apply the outer step, hash θ;
* the host's own period ``P_host = C + A + L``;
* **settlement of the epoch before** (``e + 1``'s start vote needs ``e − 1`` closed, so it must fit
  in one period): the host recomputes what it did not store, its uplink carries the ``D``
  challenged start leaves once (seats in turn), a later seat reads from a seat that committed, each
  validator's downlink carries a start leaf per seat (``m = P·n·(k+1)/V`` seats) and it replays
  ``c`` steps per seat on hardware like the host's; then the objection, verdict-reveal and propose
  phases (``settle_blocks``). A challenged trap sends its challenge to a dispute round (every
  validator reads the leaf from the host and the trap's seat, one after another, or in rounds that
  double the holders with ``dispute_tree``, and replays): in a share ``p_d`` of the epochs
  (``1 − (1 − trap_probability·D/S)^n``), which stalls that epoch's successor by what the settlement
  then exceeds the period;
* the uplink's whole upload per epoch (Δ exchange, challenged start leaves, θ to the validators: ``V·8N/n``)
  must fit in a period too;
* the period ``P = max(P_host, settlement, upload / link)`` plus the dispute stall's expectation;
  **utilisation = C / P**.

Run: ``.venv/bin/python bench/scaling_model.py [--costs costs.json] [--hosts 16] [--markdown]``
"""

from __future__ import annotations

import argparse
import functools
import json
import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from trainer.presets import mean_pickers

# Devnet gas of the artifact before the settlement game (4 validators, S = 2, k = 1, r = 2; finalize 509k /
# 1,029k / 3,110k in docs/benchmarks-archive.md#chain-embedded-before-the-settlement-game-and-paging).
FINALIZE_GAS = {4: 508_929, 16: 1_028_755, 64: 3_109_885}
MESSAGE_GAS = {"join": 152_000, "commit": 157_000, "reveal": 148_000, "propose_start": 163_000,
               "propose": 163_000, "verdict": 155_000}
BLOCK_GAS = 10_000_000
FEE_INJ_PER_GAS = 1.6e8  # the devnet's fee: gas limit × 1.6e8 inj (1 INJ = 1e18 inj)
TARGET = 0.95


class Measured(BaseModel):
    """The measured inputs, at ``small`` on the 2-core development machine unless said otherwise."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    k: int = 2  # the presets' picks per picker (plus the last segment)
    # SHA-256 on one thread, otherwise idle machine (benchmarks.md, "Scale: the small preset").
    sha256_GBps: float = 1.98
    # int8 Δ with a float32 scale per 64 (benchmarks.md, "Scale: the small preset").
    delta_bytes_per_param: float = 1.066
    # topk2 at block 1024 (benchmarks.md, "Compression"), shown for the alternative in docs/scaling.md.
    topk2_bytes_per_param: float = 0.0394
    # int8 encode and hash of a small Δ on the CPU, 0.028 s for 3,322,368 parameters at load 15–24
    # (benchmarks.md, "Compression"): an upper bound for a GPU host, which encodes on the GPU.
    int8_encode_s_per_param: float = 0.028 / 3_322_368
    # The snapshot copy on an H100 at gpt124m: export_async held training 61–83 ms per 1.52 GB leaf,
    # 18–25 GB/s (benchmarks.md, "GPU (one H100)"): the model's 25 GB/s per GPU is the fast end.
    export_GBps_per_gpu: float = 25.0
    # A node's delayed seed against a plain evaluation of its T squarings: the evaluation keeping a
    # power every 16 squarings and the proof from them, CPython on this machine at T = 10^6 (9.5 and
    # 1.67 µs per squaring against 9.2; benchmarks.md, "The delayed seed").
    vdf_node_over_evaluate: float = 1.214

    @classmethod
    def from_costs(cls, costs: dict) -> Measured:
        """Override the per-byte figures with a ``bench/scale_costs.py --json`` output."""
        return cls(k=costs["k"], sha256_GBps=costs["limits"]["sha256_GBps"],
                   delta_bytes_per_param=costs["delta_bytes_per_param"])


@dataclass(frozen=True)
class Size:
    name: str
    params: float
    batch_tokens: int  # tokens per inner step per host
    gpus: int  # GPUs per host
    segment_steps: int
    segments: int
    full_leaf_every: int  # K as the table has it (as built)


SIZES = [
    # H = 640 (S = 160 segments of c = 4) at every size: S ≥ 120 keeps the validators' replays under 5 %
    # at k = r = 2. Hosts of 8 GPUs (INTELLECT-1's nodes) up to 10 B, 32 at 50 B; tokens per step grow.
    Size("1B", 1e9, 524_288, 8, 4, 160, 8),
    Size("10B", 1e10, 1_048_576, 8, 4, 160, 16),
    Size("50B", 5e10, 2_097_152, 32, 4, 160, 32),
]


@dataclass(frozen=True)
class Lever:
    """One configuration of the protocol and the deployment (all assumptions, named in the table)."""

    name: str
    every_leaf_stored: bool = False  # the smallest K whose write the background hides (K = 1: nothing recomputed)
    reduce_scatter: bool = False  # Δ exchanged by reduce-scatter/all-gather (not built) instead of all-to-all
    snapshot_overlapped: bool = False  # the GPU→host copy off the training thread (export_async's intent)
    per_node_io: bool = False  # a multi-node host hashes and writes its shards on each node (8 GPUs a node)
    delta_on_gpu: bool = False  # the Δ encoded on the accelerator (memory-bound) instead of at the CPU rate
    longer_segments: int = 1  # c × this (H with it, S unchanged: validators' share unchanged); convergence unmeasured
    # One seed no withholder can choose picks k segments for every picker: the delayed seed
    # (verification.delay_squarings, built; its VDF's delay is added to the settlement).
    common_seed: bool = False
    # A dispute's readers serve each other once they checked the leaf: holders double each round (not built).
    dispute_tree: bool = False


AS_BUILT = Lever("as built")
_COMMON = Lever("with levers", every_leaf_stored=True, reduce_scatter=True, common_seed=True, dispute_tree=True)
# The levers judged necessary at each size (docs/scaling.md says why); 10 B needs no longer epoch. The
# others (snapshot_overlapped, per_node_io, delta_on_gpu) add at most 0.7 points each and are left out.
LEVERS = {"1B": replace(_COMMON, longer_segments=2), "10B": _COMMON, "50B": replace(_COMMON, longer_segments=2)}
LEVER_FIELDS = ("every_leaf_stored", "reduce_scatter", "snapshot_overlapped", "per_node_io", "delta_on_gpu",
                "longer_segments", "common_seed", "dispute_tree")


def applied(lever: Lever) -> list[str]:
    """The levers ``lever`` pulls (a flag set, or segments made longer)."""
    return [f for f in LEVER_FIELDS
            if getattr(lever, f) is True or (f == "longer_segments" and lever.longer_segments > 1)]


@dataclass(frozen=True)
class Deployment:
    """Assumptions about the hardware and the network at scale (command-line options)."""

    hosts: int = 16
    # V, of equal stake: a host's pickers P = mean_pickers(V, seats_cap) ≈ 17.3 at 96, and each validator
    # sits on P·n·(k+1)/V seats an epoch (8.7 at 96; 18 at V = n = 16, more start leaves than a
    # 1 Gbit/s downlink carries in a 1 B period).
    validators: int = 96
    seats_cap: int = 19  # the spec's default (an all-coalition committee below (1/3)^19)
    gpu_tflops: float = 400.0  # a GPU's sustained TFLOP/s: H100 class at 40 % of dense bf16
    link_gbps: float = 1.0  # every member's up- and downlink
    disk_GBps: float = 2.0  # NVMe write per node
    hash_threads: int = 8  # per node
    block_s: float = 0.7  # Injective's block time (the devnet's: 0.2 s)
    chain_blocks: int = 10  # commit, reveal close, start vote, join close: 6–10 blocks (measured at small)
    settle_blocks: int = 8  # objection, verdict reveal, finalize, propose
    dispute_blocks: int = 6  # a dispute round's commit and reveal closes
    trap_probability: float = 0.2  # the spec's default
    val_tokens: int = 65_536  # the settled proposal's validation loss
    aggregate_GBps: float = 100.0  # reading n float32 Δs for the aggregate, on the host (assumed)
    # The delayed seed (common_seed): T squarings must outlast the reveal window W at the fastest
    # squarer's speed, `vdf_speedup` times the evaluator's, so the evaluator needs speedup · W, and
    # with its proof Measured.vdf_node_over_evaluate times that. W: reveal_blocks of a run that delays its seed
    # (30 blocks; a standby revealer covers a restarting member), at block_s.
    reveal_blocks: int = 30
    vdf_speedup: float = 10.0


@functools.cache
def pickers_of(validators: int, seats_cap: int) -> float:
    """A host's mean distinct pickers among ``validators`` of equal stake (the real draw)."""
    return mean_pickers([1] * validators, seats_cap, hosts=256) if validators > 0 else 0.0


def distinct_challenges(segments: int, k: int, pickers: float) -> float:
    """A host's expected challenges: the last segment, and each earlier one that any of ``pickers``
    independent pickers of ``k`` distinct segments picks."""
    if segments == 1:
        return 1.0
    return 1 + (segments - 1) * (1 - (1 - min(k, segments - 1) / (segments - 1)) ** pickers)


def recomputed_segments(segments: int, full_leaf_every: int, challenged: float) -> float:
    """The segments a host replays to recompute its challenged leaves (``trainer.recompute``: every
    leaf it passes is kept, so each run of ``K`` segments is replayed once, from its stored leaf to
    its highest leaf asked for), each of the first ``S − 1`` segments challenged independently with
    probability ``challenged``. A challenge of segment ``g`` reads leaves ``g`` and ``g + 1``, so a
    run's leaves at offset ``m`` or above are asked for when any of its segments from offset
    ``m − 1`` on is challenged: ``E[highest offset] = Σ_{m=1}^{K−1} 1 − (1 − q)^{K − m + 1}``."""
    kk = full_leaf_every
    if kk <= 1:
        return 0.0
    per_run = sum(1 - (1 - challenged) ** (kk - m + 1) for m in range(1, kk))
    return segments / kk * per_run


def finalize_fit() -> tuple[float, float]:
    """Slope and intercept of finalize gas against hosts, through the 16- and 64-host measurements."""
    slope = (FINALIZE_GAS[64] - FINALIZE_GAS[16]) / 48
    return slope, FINALIZE_GAS[16] - 16 * slope


def finalize_gas(hosts: int) -> float:
    slope, intercept = finalize_fit()
    return intercept + slope * hosts


def project(size: Size, measured: Measured, dep: Deployment, lever: Lever) -> dict:
    """One size's pipelined host-epoch under ``lever``: the period's terms, the period, utilisation."""
    n_par, k = size.params, measured.k
    n, v = dep.hosts, dep.validators
    p = pickers_of(v, dep.seats_cap)
    c, s = size.segment_steps * lever.longer_segments, size.segments
    h = c * s
    leaf, theta, delta = 12 * n_par, 8 * n_par, measured.delta_bytes_per_param * n_par
    link = dep.link_gbps * 1e9 / 8
    nodes = max(1, size.gpus // 8) if lever.per_node_io else 1
    t_step = 6 * n_par * size.batch_tokens / (dep.gpu_tflops * 1e12 * size.gpus)
    compute = h * t_step
    segment_s = c * t_step
    hash_s = leaf / (measured.sha256_GBps * 1e9 * dep.hash_threads * nodes)
    kk = size.full_leaf_every
    if lever.every_leaf_stored:  # the smallest K whose amortized write the background hides
        kk = next((K for K in range(1, size.full_leaf_every)
                   if hash_s + leaf / (dep.disk_GBps * 1e9 * nodes) / K <= segment_s), size.full_leaf_every)

    # On the accelerator, besides training.
    copy_s = 0.0 if lever.snapshot_overlapped else leaf / (measured.export_GBps_per_gpu * 1e9 * size.gpus)
    write_s = leaf / (dep.disk_GBps * 1e9 * nodes) / kk  # amortized: one leaf in K is written
    snapshot_s = s * (copy_s + max(0.0, hash_s + write_s - segment_s))
    # The host's challenges: every picker's k picks and the last segment (as built), or k + 1 that
    # every picker sits on (one common seed).
    d = float(min(k + 1, s)) if lever.common_seed else distinct_challenges(s, k, p)
    recompute_segments = recomputed_segments(s, kk, (d - 1) / (s - 1) if s > 1 else 0.0)
    recompute_s = recompute_segments * segment_s
    val_s = dep.val_tokens * 2 * n_par / (dep.gpu_tflops * 1e12 * size.gpus)
    accelerator = snapshot_s + recompute_s + val_s

    # Between two trainings.
    encode_s = (leaf / (measured.export_GBps_per_gpu * 1e9 * size.gpus) if lever.delta_on_gpu
                else measured.int8_encode_s_per_param * n_par)
    chain_s = dep.chain_blocks * dep.block_s
    exchange_bytes = 2 * (n - 1) / n * delta if lever.reduce_scatter else (n - 1) * delta
    exchange_s = exchange_bytes / link
    aggregate_s = n * 4 * n_par / (dep.aggregate_GBps * 1e9) + theta / (measured.sha256_GBps * 1e9
                                                                         * dep.hash_threads * nodes)
    between = encode_s + chain_s + exchange_s + aggregate_s
    period_host = compute + accelerator + between

    # Settlement of the epoch before, which must fit in one period.
    leaf_s = leaf / link
    seats_per_validator = p * n * (k + 1) / v
    replay_s = segment_s
    # The host's uplink sends each challenged start leaf once, then a later seat reads from a seat
    # that committed (one more leaf time); a validator's downlink carries a leaf per seat and it
    # replays its seats one after the other, overlapping the reads.
    reads = max((d + 1) * leaf_s, seats_per_validator * leaf_s, seats_per_validator * replay_s)
    # The delayed seed: its VDF (speedup · W, and the proof) runs before any challenge is known.
    delay_s = (dep.vdf_speedup * dep.reveal_blocks * dep.block_s * measured.vdf_node_over_evaluate
               if lever.common_seed else 0.0)
    settle_s = (delay_s + recompute_s + reads + 2 * replay_s + dep.settle_blocks * dep.block_s)
    # A challenged trap (a pick, mostly seated by one picker) is read by every other validator from
    # the host and that seat, then replayed.
    if lever.dispute_tree:
        dispute_s = math.ceil(math.log2(max(v, 2) / 2)) * (leaf_s + replay_s) + dep.dispute_blocks * dep.block_s
    else:
        dispute_s = math.ceil((v - 1) / 2) * leaf_s + replay_s + dep.dispute_blocks * dep.block_s
    p_dispute = 1 - (1 - dep.trap_probability * d / s) ** n

    upload = exchange_bytes + d * leaf + v * theta / n
    upload_s = upload / link
    period = max(period_host, settle_s, upload_s)
    dispute_stall = p_dispute * max(0.0, settle_s + dispute_s - period)
    period += dispute_stall
    bound = max(("host", period_host), ("settlement", settle_s), ("uplink", upload_s), key=lambda t: t[1])[0]
    storage = (s / kk + 2) * leaf + delta
    gas = (MESSAGE_GAS["join"] + MESSAGE_GAS["commit"] + MESSAGE_GAS["reveal"] + MESSAGE_GAS["propose_start"]
           + MESSAGE_GAS["propose"] + p * (k + 1) * MESSAGE_GAS["verdict"] + finalize_gas(n) / n)
    return {
        **asdict(size), "segment_steps": c, "full_leaf_every": kk,
        "levers": applied(lever), "variant": lever.name, "hosts": n, "validators": v,
        "inner_steps": h, "step_s": t_step, "compute_s": compute, "segment_s": segment_s,
        "leaf_GB": leaf / 1e9, "delta_GB": delta / 1e9,
        "snapshot_s": snapshot_s, "recompute_s": recompute_s, "validation_s": val_s, "accelerator_s": accelerator,
        "encode_s": encode_s, "chain_s": chain_s, "exchange_s": exchange_s, "aggregate_s": aggregate_s,
        "between_s": between, "period_host_s": period_host,
        "leaf_transfer_s": leaf_s, "seats_per_validator": seats_per_validator, "settlement_s": settle_s,
        "delay_s": delay_s,
        "dispute_round_s": dispute_s, "p_dispute": p_dispute, "dispute_stall_s": dispute_stall,
        "upload_GB": upload / 1e9, "upload_s": upload_s, "period_s": period, "bound": bound,
        "utilisation": compute / period, "meets_target": compute / period >= TARGET,
        "storage_GB_per_host_epoch": storage / 1e9, "validator_share": p * (k + 1) / s,
        "pickers": p, "challenges": d,
        "gas_per_host_epoch": gas, "inj_per_host_epoch": gas * FEE_INJ_PER_GAS / 1e18,
        "finalize_gas": finalize_gas(n), "finalize_fits_block": finalize_gas(n) * 1.3 + 50_000 <= BLOCK_GAS,
    }


def rows_for(measured: Measured, dep: Deployment) -> list[dict]:
    """As built at every size, then with each size's levers."""
    return ([project(size, measured, dep, AS_BUILT) for size in SIZES]
            + [project(size, measured, dep, LEVERS[size.name]) for size in SIZES])


def ablation(measured: Measured, dep: Deployment) -> dict[str, dict[str, float]]:
    """Per size, the utilisation with its levers and with each lever switched off in turn."""
    out: dict[str, dict[str, float]] = {}
    for size in SIZES:
        lever = LEVERS[size.name]
        out[size.name] = {"all": project(size, measured, dep, lever)["utilisation"]}
        for field in applied(lever):
            # A flag named at run time: mypy cannot tell it from `name`, the one str field.
            off = (replace(lever, longer_segments=1) if field == "longer_segments"
                   else replace(lever, **{field: False}))  # type: ignore[arg-type]
            out[size.name][field] = project(size, measured, dep, off)["utilisation"]
    return out


def sweep(measured: Measured, dep: Deployment, validators: list[int]) -> list[dict]:
    """Per number of validators: the pickers and their costs, and each size's utilisation as built,
    with its levers, and with its levers but the pickers' own picks (no common seed)."""
    out = []
    for v in validators:
        d = replace(dep, validators=v)
        first = project(SIZES[0], measured, d, AS_BUILT)
        out.append({"validators": v, "pickers": first["pickers"], "challenges": first["challenges"],
                    "seats_per_validator": first["seats_per_validator"], "validator_share": first["validator_share"],
                    "utilisation": [(project(s, measured, d, AS_BUILT)["utilisation"],
                                     project(s, measured, d, LEVERS[s.name])["utilisation"],
                                     project(s, measured, d, replace(LEVERS[s.name], common_seed=False))["utilisation"])
                                    for s in SIZES]})
    return out


def markdown(rows: list[dict]) -> str:
    """The projection as the table of docs/scaling.md (one column per variant and size)."""
    head = [f"{r['name']} {r['variant']}" for r in rows]
    lines = ["| | " + " | ".join(head) + " |", "| --- |" + " --- |" * len(rows)]

    def row(label: str, fmt) -> None:
        lines.append(f"| {label} | " + " | ".join(fmt(r) for r in rows) + " |")

    row("inner step (s); c, H; compute C per epoch (s)",
        lambda r: f"{r['step_s']:.2f}; {r['segment_steps']}, {r['inner_steps']:,}; {r['compute_s']:,.0f}")
    row("leaf (GB); stored every K-th; storage per host-epoch (GB)",
        lambda r: f"{r['leaf_GB']:,.0f}; {r['full_leaf_every']}; {r['storage_GB_per_host_epoch']:,.0f}")
    row("accelerator: snapshot + recomputation + val. loss (s)",
        lambda r: f"{r['snapshot_s']:,.0f} + {r['recompute_s']:,.0f} + {r['validation_s']:.1f}")
    row("between trainings: Δ encode + chain + Δ exchange + aggregate (s)",
        lambda r: f"{r['encode_s']:,.1f} + {r['chain_s']:.0f} + {r['exchange_s']:,.0f} + {r['aggregate_s']:,.1f}")
    row("host's own period C + A + L (s)", lambda r: f"{r['period_host_s']:,.0f}")
    row("settlement of the epoch before (s), of it the delayed seed; seats per validator",
        lambda r: f"{r['settlement_s']:,.0f}, {r['delay_s']:,.0f}; {r['seats_per_validator']:.0f}")
    row("uplink: upload per epoch (GB, s)", lambda r: f"{r['upload_GB']:,.0f}, {r['upload_s']:,.0f}")
    row("dispute round (s) × P(per epoch) → stall (s)",
        lambda r: f"{r['dispute_round_s']:,.0f} × {r['p_dispute']:.1%} → {r['dispute_stall_s']:,.0f}")
    row("period (s), bound by", lambda r: f"{r['period_s']:,.0f}, {r['bound']}")
    row("**host utilisation**", lambda r: f"**{r['utilisation']:.1%}**")
    row("≥ 95 %", lambda r: "yes" if r["meets_target"] else "**no**")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", type=Path, help="a bench/scale_costs.py --json output (default: the "
                                                   "figures of docs/benchmarks.md, in Measured)")
    defaults = Deployment()
    for field, value in asdict(defaults).items():
        parser.add_argument(f"--{field.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--sha256-gbps", type=float, help="SHA-256 GB/s instead of the measured figure")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--markdown", action="store_true", help="print the table of docs/scaling.md")
    parser.add_argument("--sweep-validators", type=str, metavar="V,V,...",
                        help="print, per number of validators, each size's pickers, seats per validator and "
                             "utilisation as built, with its levers, and with them but without common_seed")
    args = parser.parse_args()
    measured = Measured.from_costs(json.loads(args.costs.read_text())) if args.costs else Measured()
    if args.sha256_gbps:
        measured = measured.model_copy(update={"sha256_GBps": args.sha256_gbps})
    dep = replace(defaults, **{f: getattr(args, f) for f in asdict(defaults)})
    rows = rows_for(measured, dep)
    for row in rows:
        print(f"{row['variant']:>11} {row['name']:>4}: period {row['period_s']:,.0f} s ({row['bound']}), "
              f"compute {row['compute_s']:,.0f} s, utilisation {row['utilisation']:.1%}"
              f"{'' if row['meets_target'] else ' (below 95 %)'}")
    ablate = ablation(measured, dep)
    out: dict[str, Any] = {"measured": measured.model_dump(), "deployment": asdict(dep),
           "levers": {name: asdict(lever) for name, lever in LEVERS.items()}, "ablation": ablate, "rows": rows}
    if args.markdown:
        print(markdown(rows))
        print()
        print("| without | " + " | ".join(ablate) + " |")
        print("| --- |" + " --- |" * len(ablate))
        for field in ("all", *LEVER_FIELDS):
            print(f"| {field} | " + " | ".join(f"{a[field]:.1%}" if field in a else "—" for a in ablate.values())
                  + " |")
    if args.sweep_validators:
        out["sweep"] = sweep(measured, dep, [int(v) for v in args.sweep_validators.split(",")])
        print("| V | pickers P | challenges per host (as built) | seats per validator | validators' compute / hosts' "
              "| " + " | ".join(f"{s.name}: as built / levers / levers but per-picker picks" for s in SIZES) + " |")
        print("| --- " * (5 + len(SIZES)) + "|")
        for row in out["sweep"]:
            print(f"| {row['validators']} | {row['pickers']:.1f} | {row['challenges']:.1f} "
                  f"| {row['seats_per_validator']:.1f} | {row['validator_share']:.1%} | "
                  + " | ".join(f"{a:.1%} / {b:.1%} / {c:.1%}" for a, b, c in row["utilisation"]) + " |")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
