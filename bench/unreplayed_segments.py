"""What no replay sees: hosts that fake SOME segments (a jump in one segment, in several, spread over
all), their odds of passing an epoch, what they commit, and what they do to the agreed model — with
the aggregation's peer bound (``verifier.measure.peer_excess``) and its per-coordinate bound
(``verifier.measure.delta_excess``) applied as every honest proposer applies them, small tensors
clipped to the peer factor × their median (``verifier.measure.within_peer_bound``).

1. **Honest Δs** (``honest``): ``--hosts`` honest hosts for ``--epochs`` epochs (θ moved by the
   default rule): per epoch, the largest per-tensor ``‖Δ_n‖ / median_n`` (what the peer bound
   compares with :data:`~verifier.measure.DELTA_PEER_FACTOR`), per-tensor RMS and largest coordinate
   of Δ in units of ``lr · √H`` (what a bound scaling like √H would have to allow), and the largest
   coordinate against the per-coordinate bound of ``H`` AdamW steps (``delta_excess``).
2. **Segment movements** (``movements``): the same honest hosts' per-segment, per-tensor movements
   ``m_{s,n} = ‖θ_{s+1,n} − θ_{s,n}‖`` (``verifier.measure.segment_movements``): the triangle slack
   ``Σ_s m_{s,n} / ‖Δ_n‖`` per tensor (``triangle_slack``: how far a Δ could grow before a check
   ``‖Δ_n‖ ≤ Σ_s m_{s,n}`` over committed movements fails), the largest single segment's share
   ``max_s m_{s,n} / ‖Δ_n‖``, and how far the segment that moved most (``Σ_n m_{s,n}``, the first
   S − 1) stands above the median segment (what a top-Q challenge rule would sort by).
3. **Attacks** (``attacks``): host 0 of ``--hosts`` runs a ``jump`` (``verifier.adversaries.unseen``)
   in every epoch; the others are honest. Its direction: the sign of the validation-loss gradient
   (``ascent``, the default), the gradient itself per tensor (``gradient``), the gradient on the
   matrices only (``matrices``, sized just under the peer factor, e.g. ``jump:1,1.49,matrices``), or
   random; each epoch's own or the first epoch's every epoch (``…,first``: pushes that accumulate,
   seen in ``damage``, the whole run against the all-honest one). Per attack: the probability of
   passing an epoch from the challenge rule (``C(S − 1 − m, k) / C(S − 1, k)`` for ``m`` faked
   segments before the last and ``k`` uniform challenges, plus the last segment, always challenged;
   with several pickers each
   drawing ``k``, at least one of them honest, it is at most this), the verdicts of every segment's
   replay in epoch 0 (the faked ones must fail, the rest pass), the committed Δ's largest per-tensor
   norm against the host's own honest Δ and against the peers' median, whether the aggregation
   left it out, and the validation loss of the agreed model after every epoch against the all-honest
   run with the same seeds and data, under ``mean`` and the default ``centered_clip`` — if it is never
   caught (the damage given that it passes every epoch). Per epoch also the faked segments' rank by
   movement ``Σ_n m_{s,n}`` among the first S − 1 (1: moved most; a top-Q rule replays ranks ≤ Q if
   the host commits its true movements) and ``max_n ‖Δ_n‖ / Σ_s m_{s,n}`` with the faked segments'
   rows reported as their honest ones (above 1: a triangle check catches that under-report).
   The clip of small tensors (``verifier.measure.peer_clip``), side by side in the same run: the
   paired damage with and without it (from the same θ_e and peers), the forger's largest admitted
   small tensor after it against its own honest norm and the kept Δs' median, and in the all-honest
   run the small tensors it scaled, the paired loss it cost every epoch, and (``none (all honest),
   no clip``) the whole honest run without it.
   Direction (``verifier.measure.direction_cosines``, issue 28; no proposer applies it): every
   epoch, each Δ the norms' bounds kept against the coordinate-wise median of the others (cosine,
   whole Δ, from 4 Δs), and what a direction bound at ``--direction-min`` would do, paired: the
   honest Δs it would leave out and their cost, the forger's damage were its Δ left out, and the
   damage of the forger's best reply (its forged Δ mixed with its honest one until the cosine is
   just at the threshold, each tensor at the forged norm). ``--quantization topk2@0``: another scheme.

Run: ``.venv/bin/python bench/unreplayed_segments.py --preset tiny [--epochs 6] [--hosts 4] [--inner-steps H]
[--only honest,movements,attacks] [--rules mean,centered_clip] [--attacks 'jump:1;…'|none] [--no-unclipped]
[--direction-min 0.3] [--quantization topk2@0] [--json out.json]``
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import logging
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

from protocol.keys import encode_address
from protocol.rules.spec import RunSpec, parse_quant_schedule
from protocol.tensors.aggregation import aggregate
from protocol.views import Challenge
from trainer import presets
from trainer.artifacts import LocalArtifacts
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.delta import dequantize, quantize
from trainer.determinism import configure
from trainer.evaluate import validation_loss
from trainer.inner import EpochContext, EpochResult, start_checkpoint
from trainer.model import build_model, parameter_shapes
from trainer.outer import GlobalState, outer_step
from trainer.step import Stepper
from verifier.adversaries import Jump, make_adversary
from verifier.adversaries.base import commit_leaves
from verifier.adversaries.unseen import honest_epoch
from verifier.measure import (
    DELTA_PEER_FACTOR,
    SMALL_TENSORS,
    delta_excess,
    direction_cosines,
    peer_excess,
    segment_movements,
    tensor_norm,
    triangle_slack,
    within_peer_bound,
)
from verifier.replay import check_challenge

VALIDATOR = encode_address(bytes([250] * 20))
LARGE = 4096
"""Tensors of at least this many coordinates (the matrices) are reported apart from the small ones."""


def address(i: int) -> str:
    return encode_address(i.to_bytes(20, "big"))


def prev_seed(e: int) -> bytes:
    return bytes([e % 256, 11]) * 16


def attacks(spec: RunSpec) -> list[str]:
    s = spec.train.segments
    several = max(2, (s - 1) // 2)
    return ["jump:1", "jump:1,3", "jump:1,1.45", "jump:1,1.45,random", f"jump:{several},1.45",
            f"jump:{s - 1},1.45"]


def pass_probability(spec: RunSpec, faked: int) -> float:
    """P(no challenge draws a faked segment) with k uniform challenges among the S − 1 before the last."""
    n, k = spec.train.segments - 1, min(spec.verification.challenges_k, spec.train.segments - 1)
    return math.comb(n - faked, k) / math.comb(n, k) if n else 1.0


def train(spec: RunSpec, dataset: Dataset, behaviour: HostBehaviour, i: int, e: int, theta: GlobalState,
          root: Path) -> tuple[EpochContext, EpochResult]:
    ctx = EpochContext(spec.run_id(), e, address(i), prev_seed(e))
    return ctx, behaviour.train_epoch(spec, dataset, ctx, theta.params, root / f"{e}-{i}")


def replay_all(spec: RunSpec, dataset: Dataset, ctx: EpochContext, result: EpochResult, theta: GlobalState,
               root: Path) -> list[str]:
    source = LocalArtifacts(root / f"{ctx.epoch}-0", spec.run_id(), ctx.host)
    stepper = Stepper(spec)
    out = []
    for g in range(spec.train.segments):
        report = check_challenge(spec, dataset, Challenge.of(result.commitment, ctx.host, g, "local", [VALIDATOR]),
                                 source, theta, ctx.prev_epoch_seed, stepper=stepper)
        out.append("pass" if report.outcome == "pass" else f"{report.outcome}:{report.check}")
    return out


def within_bound(spec: RunSpec, theta: GlobalState, results: dict[str, EpochResult]) -> tuple[dict, dict]:
    """Every Δ dequantized, and those within the per-coordinate bound (``delta_excess``)."""
    shapes = parameter_shapes(spec)
    deltas, kept = {}, {}
    for host, result in results.items():
        deltas[host] = dequantize(result.payload, shapes, spec.quantization)
        excess, _ = delta_excess(theta.params, deltas[host], result.payload, shapes, spec.train, spec.quantization)
        if excess <= 1:
            kept[host] = deltas[host]
    return deltas, kept


def admitted(spec: RunSpec, theta: GlobalState, results: dict[str, EpochResult],
             clip: bool = True) -> tuple[dict, dict, dict]:
    """The Δs the aggregation takes (per-coordinate bound, then peer bound and clip), every Δ, and
    every peer excess."""
    deltas, kept = within_bound(spec, theta, results)
    return within_peer_bound(kept, clip).kept, deltas, peer_excess(kept)


def small_ratios(kept: dict, host: str, reference: dict[str, torch.Tensor]) -> tuple[float, float]:
    """``host``'s largest small tensor in ``kept``: against ``reference`` (its own honest Δ), and
    against the median of the kept Δs' norms of that tensor (what the clip allows 1.5× of)."""
    mine = kept[host]
    small = [n for n in mine if mine[n].numel() < LARGE]
    own = max(tensor_norm(mine[n]) / max(tensor_norm(reference[n]), 1e-30) for n in small)
    med = max(tensor_norm(mine[n]) / max(statistics.median(tensor_norm(d[n]) for d in kept.values()), 1e-30)
              for n in small)
    return round(own, 4), round(med, 4)


def honest_stats(spec: RunSpec, dataset: Dataset, hosts: int, epochs: int, root: Path) -> list[dict]:
    theta = GlobalState.initial(spec)
    lr, h = float(spec.train.lr), spec.train.inner_steps
    unit = lr * math.sqrt(h)
    rows = []
    for e in range(epochs):
        results = {address(i): train(spec, dataset, HostBehaviour(), i, e, theta, root)[1] for i in range(hosts)}
        kept, deltas, peers = admitted(spec, theta, results)
        names = sorted(theta.params)
        rms = [tensor_norm(d[n]) / math.sqrt(d[n].numel()) / unit for d in deltas.values() for n in names]
        top = [float(d[n].abs().max()) / unit for d in deltas.values() for n in names]
        shapes = parameter_shapes(spec)
        excess = [delta_excess(theta.params, deltas[a], results[a].payload, shapes, spec.train,
                               spec.quantization)[0] for a in deltas]
        top_host = max(peers, key=lambda a: peers[a][0])
        row = {"epoch": e, "hosts": hosts, "peer_ratio_max": peers[top_host][0] * DELTA_PEER_FACTOR,
               "peer_ratio_tensor": peers[top_host][1],
               "peer_ratio_max_large": max(tensor_norm(deltas[a][n]) / statistics.median(
                   tensor_norm(deltas[b][n]) for b in deltas) for a in deltas for n in names
                   if deltas[a][n].numel() >= LARGE),
               "left_out": hosts - len(kept), "rms_over_lr_sqrt_h": [min(rms), statistics.median(rms), max(rms)],
               "max_coordinate_over_lr_sqrt_h": max(top), "delta_excess_max": max(excess)}
        print(json.dumps(row), flush=True)
        rows.append(row)
        theta = outer_step(theta, aggregate(spec.aggregation, kept), spec.outer)
    return rows


def spread(values: list[float]) -> list[float]:
    return [round(min(values), 3), round(statistics.median(values), 3), round(max(values), 3)]


def movement_stats(spec: RunSpec, dataset: Dataset, hosts: int, epochs: int, root: Path) -> list[dict]:
    """Honest hosts' per-segment movements, epoch by epoch (θ moved by the default rule): min / median
    / max over hosts and tensors of the triangle slack (matrices, small tensors alone, their pool) and of
    the largest segment's share of ``‖Δ_n‖``; over hosts, the top segment's ``Σ_n m`` over the median's."""
    theta = GlobalState.initial(spec)
    sizes = {n: t.numel() for n, t in theta.params.items()}
    rows = []
    for e in range(epochs):
        results: dict[str, EpochResult] = {}
        large: list[float] = []
        small: list[float] = []
        pool: list[float] = []
        share: list[float] = []
        top: list[float] = []
        for i in range(hosts):
            ctx = EpochContext(spec.run_id(), e, address(i), prev_seed(e))
            leaves = honest_epoch(spec, dataset, ctx, start_checkpoint(spec, theta.params, e), None)
            results[address(i)] = commit_leaves(spec, ctx, leaves, root / f"{e}-{i}")
            params = [leaf.state.params for leaf in leaves]
            table = segment_movements(params)
            delta = {n: params[0][n] - params[-1][n] for n in params[0]}
            for n, x in triangle_slack(table, delta, sizes).items():
                (pool if n == SMALL_TENSORS else large if sizes[n] >= LARGE else small).append(x)
            share += [max(row[n] for row in table) / tensor_norm(delta[n]) for n in delta]
            scalars = [sum(row.values()) for row in table[:-1]]
            top.append(max(scalars) / statistics.median(scalars))
        row = {"epoch": e, "hosts": hosts, "slack_large": spread(large), "slack_small": spread(small),
               "slack_pool": spread(pool), "top_share": spread(share), "top_over_median_segment": spread(top)}
        print(json.dumps(row), flush=True)
        rows.append(row)
        kept = admitted(spec, theta, results)[0]
        theta = outer_step(theta, aggregate(spec.aggregation, kept), spec.outer)
    return rows


def coordinate_peak(deltas: dict, host: str) -> tuple[float, str]:
    """``host``'s largest ``|Δ_i|`` in a tensor over the largest the other Δs have there, at its
    tensor of most excess (how concentrated a forgery is, which no L2 bound per tensor sees)."""
    others = [d for h, d in deltas.items() if h != host]
    ratios = {n: float(t.abs().max()) / max(max(float(d[n].abs().max()) for d in others), 1e-30)
              for n, t in deltas[host].items() if t.numel()}
    top = max(ratios, key=lambda n: ratios[n])
    return round(ratios[top], 3), top


def movement_rule(forger: Jump, epoch: int, forged: dict[str, torch.Tensor]) -> tuple[int, float]:
    """The faked segments' best rank by committed movement ``Σ_n m_{s,n}`` among the first S − 1 (1:
    moved most), and ``max_n ‖Δ_n‖ / Σ_s m_{s,n}`` with the faked rows reported as the honest ones."""
    honest, committed = forger.movements[epoch]
    faked = forger.faked[epoch]
    scalars = [sum(row.values()) for row in committed[:-1]]
    order = sorted(range(len(scalars)), key=lambda s: (-scalars[s], s))
    reported = [honest[s] if s in faked else row for s, row in enumerate(committed)]
    return (min(order.index(f) for f in faked) + 1,
            max(tensor_norm(forged[n]) / max(sum(row[n] for row in reported), 1e-30) for n in forged))


def blend_at(bounded: dict, host: str, forged: dict[str, torch.Tensor], own: dict[str, torch.Tensor],
             threshold: float) -> tuple[dict[str, torch.Tensor], float, float]:
    """The forger's best reply to a direction bound at ``threshold``: its forged Δ mixed with its own
    honest Δ, ``α · forged + (1 − α) · own``, each tensor rescaled to the forged tensor's norm (the
    peer bound admitted those), with the largest ``α`` (bisection, 20 steps) whose cosine with the
    others' median (``direction_cosines``) is at least ``threshold``. Returns it, ``α``, its cosine."""
    def mix(a: float) -> dict[str, torch.Tensor]:
        out = {}
        for n in forged:
            b = a * forged[n].double() + (1 - a) * own[n].double()
            nb = tensor_norm(b)
            out[n] = (b * (tensor_norm(forged[n]) / nb) if nb > 0 else b).to(forged[n].dtype)
        return out

    def cos(a: float) -> float:
        return direction_cosines({**bounded, host: mix(a)})[host]
    lo, hi = 0.0, 1.0
    if cos(hi) >= threshold:
        lo = hi
    else:
        for _ in range(20):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if cos(mid) >= threshold else (lo, mid)
    return mix(lo), lo, cos(lo)


def run(spec: RunSpec, dataset: Dataset, attack: str | None, hosts: int, epochs: int, root: Path,
        clip: bool = True, direction_min: float = 0.0) -> dict:
    theta = GlobalState.initial(spec)
    model = build_model(spec)
    forger = make_adversary(attack) if attack else HostBehaviour()
    losses, verdicts, ratios, medians, left_out, diverged = [], [], [], [], [], []
    peaks: list[tuple[float, str]] = []
    ranks: list[int] = []
    under: list[float] = []
    paired: list[float] = []
    paired_unclipped: list[float] = []
    small_in: list[tuple[float, float]] = []
    small_unclipped: list[tuple[float, float]] = []
    clip_cost: list[float] = []
    clipped: list[int] = []
    clip_scale: list[float] = []
    cosines: list[list[float]] = []  # per epoch, every peer-kept Δ's direction_cosines, address order
    paired_excluded: list[float] = []
    direction_left: list[int] = []  # all honest: Δs the direction bound leaves out, per epoch
    direction_cost: list[float] = []
    forger_cos: list[float | None] = []  # None: left out by the peer bound before
    blend: list[tuple[float, float, float]] = []  # (α, cosine, paired damage) at direction_min

    def loss_of(kept: dict) -> float:
        return validation_loss(model, dataset, params=outer_step(theta, aggregate(spec.aggregation, kept),
                                                                 spec.outer).params)
    for e in range(epochs):
        results, ctxs = {}, {}
        for i in range(hosts):
            try:
                ctxs[i], results[address(i)] = train(spec, dataset, forger if i == 0 else HostBehaviour(), i, e,
                                                     theta, root)
            except ValueError:  # a jump so far that the steps after it diverge: nothing to commit
                diverged.append(e)
        deltas, bounded = within_bound(spec, theta, results)
        peers = peer_excess(bounded)
        with_clip, without = within_peer_bound(bounded), within_peer_bound(bounded, clip=False)
        kept = with_clip.kept if clip else without.kept
        found = direction_cosines(without.kept)
        cosines.append([round(found[h], 4) for h in sorted(found)])
        if isinstance(forger, Jump) and address(0) in results:
            if e == 0:
                verdicts = replay_all(spec, dataset, ctxs[0], results[address(0)], theta, root)
            honest = forger.honest_delta[e]
            forged = deltas[address(0)]
            ratios.append(max(tensor_norm(forged[n]) / max(tensor_norm(honest[n]), 1e-30) for n in honest))
            medians.append(peers.get(address(0), (math.inf, ""))[0] * DELTA_PEER_FACTOR)  # inf: beyond H steps
            peaks.append(coordinate_peak(deltas, address(0)))
            left_out.append(address(0) not in kept)
            if address(0) in kept:
                small_in.append(small_ratios(with_clip.kept, address(0), honest))
                small_unclipped.append(small_ratios(without.kept, address(0), honest))
            rank, excess = movement_rule(forger, e, forged)
            ranks.append(rank)
            under.append(round(excess, 4))
        after = outer_step(theta, aggregate(spec.aggregation, kept), spec.outer)
        losses.append(validation_loss(model, dataset, params=after.params))
        if isinstance(forger, Jump) and address(0) in results:
            # Paired damage: the same θ_e and peers, the host's own honest Δ in place of the forged one
            # (admitted, as an honest Δ is): what this epoch's forgery alone did to the agreed model —
            # with the clip and without it, each against its own counterfactual.
            shapes = parameter_shapes(spec)
            own = dequantize(quantize(forger.honest_delta[e], spec.quantization), shapes, spec.quantization)
            honest_set = {**{h: d for h, d in bounded.items() if h != address(0)}, address(0): own}
            for out_list, on in ((paired, True), (paired_unclipped, False)):
                forged_loss = loss_of(with_clip.kept if on else without.kept)
                out_list.append(round(forged_loss - loss_of(within_peer_bound(honest_set, on).kept), 5))
            # A direction bound's two outcomes, paired the same way: the forged Δ left out, and the
            # forger's best reply at direction_min admitted in its place (peer bound and clip as above).
            honest_loss = loss_of(within_peer_bound(honest_set).kept)
            forger_cos.append(round(found[address(0)], 4) if address(0) in found else None)
            others = {h: d for h, d in bounded.items() if h != address(0)}
            paired_excluded.append(round(loss_of(within_peer_bound(others).kept) - honest_loss, 5))
            if address(0) in without.kept:
                mixed, alpha, c = blend_at(dict(without.kept), address(0), forged, own, direction_min)
                kept_mixed = within_peer_bound({**others, address(0): mixed}).kept
                blend.append((round(alpha, 4), round(c, 4), round(loss_of(kept_mixed) - honest_loss, 5)))
        elif attack is None and clip:
            # The clip's cost to honest training, paired: the same θ_e and Δs without it.
            clip_cost.append(round(losses[-1] - loss_of(without.kept), 6))
            clipped.append(sum(len(v) for v in with_clip.clipped.values()))
            clip_scale.append(round(min((x for v in with_clip.clipped.values() for x in v.values()), default=1.0), 4))
            # What a direction bound at direction_min would cost honest training: the Δs it would
            # leave out (of 4 or more), and the loss without them against the loss with them, paired.
            directed = {h: d for h, d in without.kept.items() if not found[h] < direction_min}
            direction_left.append(len(without.kept) - len(directed))
            direction_cost.append(round(loss_of(within_peer_bound(directed).kept) - losses[-1], 6)
                                  if len(directed) < len(without.kept) else 0.0)
        theta = after
    out: dict = {"attack": (attack or "none (all honest)") + ("" if clip else ", no clip"),
                 "rule": spec.aggregation.rule, "val_loss": losses, "diverged": diverged,
                 "direction_cosines": cosines}
    if attack is None and clip:
        out.update({"clip_paired_cost": clip_cost, "clipped_small_tensors": clipped, "clip_scale_min": clip_scale,
                    "direction_left_out": direction_left, "direction_paired_cost": direction_cost})
    if isinstance(forger, Jump):
        faked = min(forger.segments, spec.train.segments - 1)
        out.update({"faked": faked, "pass_probability": pass_probability(spec, faked),
                    "epoch0_verdicts": verdicts, "norm_ratio_to_honest_max": ratios,
                    "norm_ratio_to_peer_median_max": medians, "left_out": left_out,
                    "largest_coordinate_over_peers": peaks,
                    "faked_movement_rank": ranks, "under_report_triangle": under,
                    "paired_damage": paired, "paired_damage_max": max(paired, default=0.0),
                    "paired_damage_unclipped": paired_unclipped,
                    "paired_damage_unclipped_max": max(paired_unclipped, default=0.0),
                    "small_admitted_own_median": small_in, "small_unclipped_own_median": small_unclipped,
                    "forger_cosine": forger_cos,
                    "paired_damage_excluded": paired_excluded,
                    # under a direction bound at direction_min: left out below it, else admitted
                    "paired_damage_direction": [
                        x if c is not None and c < direction_min else y
                        for c, x, y in zip(forger_cos, paired_excluded, paired, strict=True)],
                    "direction_min": direction_min, "blend_alpha_cosine_damage": blend})
    return out


def with_damage(found: dict, base: dict) -> dict:
    """``found`` with its validation loss against the all-honest run's: after every epoch, per epoch
    over the run, and the largest rise in one epoch."""
    damage = [a - b for a, b in zip(found["val_loss"], base["val_loss"], strict=True)]
    rises = [b - a for a, b in zip([0.0, *damage], damage, strict=False)]
    return {**found, "damage": damage, "damage_per_epoch": damage[-1] / len(damage), "damage_step_max": max(rises)}


def attack_runs(spec: RunSpec, dataset: Dataset, plan: list[str], hosts: int, epochs: int, root: Path,
                rules: tuple[str, ...] = ("mean", "centered_clip"), unclipped: bool = True,
                direction_min: float = 0.0) -> list[dict]:
    """The all-honest run (``unclipped``: also without the clip) and every attack of ``plan``, under
    each of ``rules``."""
    runs = []
    for rule in rules:
        ruled = spec.with_changes(aggregation={"rule": rule})
        runs.append(base := run(ruled, dataset, None, hosts, epochs, root / f"{rule}-base",
                                direction_min=direction_min))
        print(json.dumps(base), flush=True)
        if unclipped:
            runs.append(with_damage(run(ruled, dataset, None, hosts, epochs, root / f"{rule}-noclip", clip=False),
                                    base))
            print(json.dumps(runs[-1]), flush=True)
        for attack in plan:
            where = root / f"{rule}-{attack}".replace(":", "_").replace(",", "_")
            runs.append(with_damage(run(ruled, dataset, attack, hosts, epochs, where,
                                        direction_min=direction_min), base))
            print(json.dumps(runs[-1]), flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=["tiny", "demo", "small"])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--inner-steps", type=int, default=0, help="H (0: the preset's), a multiple of its c")
    parser.add_argument("--only", default="", help="comma-separated parts: honest, movements, attacks")
    parser.add_argument("--rules", default="mean,centered_clip", help="comma-separated aggregation rules")
    parser.add_argument("--attacks", default="",
                        help="';'-separated adversary texts (default: the catalogue's jumps; none: honest runs only)")
    parser.add_argument("--no-unclipped", action="store_true", help="skip the all-honest run without the clip")
    parser.add_argument("--direction-min", type=float, default=0.3,
                        help="the threshold of a direction bound (not built) measured in the same run")
    parser.add_argument("--quantization", default="", help="a quantization schedule (SCHEME[/BLOCK]@0,...) "
                        "in place of the preset's, e.g. topk2@0")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.getLogger("veriloco.verifier").setLevel(logging.ERROR)
    configure(1)
    torch.manual_seed(0)
    spec = getattr(presets, args.preset)()
    if args.inner_steps:
        spec = spec.with_changes(train={"inner_steps": args.inner_steps})
    if args.quantization:
        spec = spec.with_changes(quantization=parse_quant_schedule(args.quantization).model_dump())
    dataset = Dataset.load(spec.data)
    parts = set(args.only.split(",")) if args.only else {"honest", "movements", "attacks"}
    out: dict = {"spec": {"preset": args.preset, "H": spec.train.inner_steps, "c": spec.train.segment_steps,
                          "S": spec.train.segments, "k": spec.verification.challenges_k, "lr": str(spec.train.lr),
                          "hosts": args.hosts, "epochs": args.epochs, "peer_factor": DELTA_PEER_FACTOR}}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="veriloco-unreplayed-") as tmp:
        root = Path(tmp)
        if "honest" in parts:
            out["honest"] = honest_stats(spec, dataset, args.hosts, args.epochs, root / "honest")
        if "movements" in parts:
            out["movements"] = movement_stats(spec, dataset, args.hosts, args.epochs, root / "movements")
        if "attacks" in parts:
            plan = [] if args.attacks == "none" else args.attacks.split(";") if args.attacks else attacks(spec)
            out["attacks"] = attack_runs(spec, dataset, plan, args.hosts, args.epochs, root,
                                         tuple(args.rules.split(",")), not args.no_unclipped, args.direction_min)
    if args.json:
        args.json.write_text(json.dumps({**out, "seconds": round(time.perf_counter() - t0, 1)}, indent=1))


if __name__ == "__main__":
    main()
