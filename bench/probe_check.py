"""The probe (``trainer.probe``): honest spread of probe gains, and what forged Δs gain and do.

Chain-free, with the proposers' own path (``trainer.probe.admitted``: the peer bound and the probe
rule, a Δ either leaves out is left out, small tensors of the rest clipped). ``--hosts`` hosts train
``--epochs`` epochs from θ_0 of ``--preset``; the agreed model moves by the run's rule over what
``admitted`` keeps at ``--margin`` (nats) on the gains at the first of ``--scales``. Every epoch, on
``--windows`` validation windows drawn from that epoch's beacon (``probe_seed``, ``probe_starts``):

1. **Honest spread.** Each host's gain ``L(θ_e) − L(θ_e − s·Δ̂)`` at every scale ``s``, and its
   *deficit*, how far below the median of its peers' gains it is (``trainer.probe.probe_deficits``,
   the quantity the rule compares with the margin; partial hosts compared per segments).
   ``--partial``: the last host trains only half the segments (a half-speed host).
   ``--quantization topk2@0``: another scheme (error feedback carried across epochs).
2. **Attacks** (``--attacks``; host 0 forges, the others are honest, every epoch from the honest
   trajectory's θ_e): the ``jump`` adversaries of ``verifier.adversaries.unseen`` (they retrain the
   last segment after the jump, as the attack does), the forger's gain and deficit at each scale,
   whether the peer bound and the probe leave it out, and the **paired damage** under every rule of
   ``--rules`` (``mean``, ``centered_clip``): the validation loss (512 evenly spread windows, what
   proposals report) of the agreed model after this epoch's outer step with the forged Δ, minus with
   the host's own honest Δ in its place (the same θ_e, outer momentum and peers): with the probe rule
   at ``--margin`` and with the peer bound alone. Two attacks an attacker who knows the rule adds:

   * ``…+blend``: ``Δ̂_own + λ(Δ̂_forged − Δ̂_own)``, λ the largest (bisection) whose gain on the
     probe's OWN windows is at least the peers' median − the allowance (``probe_allowance``): an
     oracle that knows the windows and the peers' gains before committing (a real host knows
     neither; it is the upper bound of what sitting just inside the margin can do). With
     ``--blend own`` (``…+blend-own``), λ is tuned instead on what the host knows before it
     commits: its gain on the 512 public, evenly spread validation windows against its own honest
     Δ's gain there.
   * ``orthogonal``: a constructed Δ (no retraining): the host's honest Δ̂ moved, per tensor, along
     the validation gradient at θ_e with its component along the gradient at the host's own end
     point ``θ_e − Δ̂_own`` removed, to 1.45× the honest norm (less where that would leave the
     per-coordinate bound of H steps: 1.3, 1.15, 1.05): first-order invisible to a probe at
     scale 1 (which scores the end point) but uphill where the aggregate lands (near θ_e). Its
     ``+blend`` likewise. It is what a second, small scale is for.

Run: ``.venv/bin/python bench/probe_check.py --preset tiny [--epochs 3] [--hosts 4] [--windows 64]
[--scales 1,0.25] [--margin 0.05] [--partial] [--quantization topk2@0] [--attacks 'jump:1,1.45,gradient;…'|none]
[--rules centered_clip,mean] [--blend oracle|own] [--dispute] [--json out.json]``; ``--dispute`` adds, per
host, its gain on its gain-dispute windows (``trainer.probe.dispute_starts``) at the first scale, how far
that moves it, its deficit when that one gain stands among its peers' probe-window gains, and whether
the rule then leaves it out; ``--cost [--windows 64]``: only the
seconds of one host's probe on one validator at tiny, demo and small (one forward pass per 64 windows).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from protocol.keys import encode_address
from protocol.rules.hashing import tagged_hash
from protocol.rules.spec import RunSpec, parse_quant_schedule
from protocol.tensors.aggregation import aggregate
from trainer import presets
from trainer.data import Dataset
from trainer.delta import carried_from, dequantize, encode_pseudo_gradient, pseudo_gradient, quantize
from trainer.determinism import configure
from trainer.evaluate import validation_loss, validation_starts
from trainer.inner import EpochContext, start_checkpoint, train_steps
from trainer.model import build_model, parameter_shapes
from trainer.outer import GlobalState, outer_step
from trainer.peer_bound import PeerBound
from trainer.probe import (
    admitted,
    dispute_starts,
    gain_micro,
    probe_allowance,
    probe_deficits,
    probe_gain,
    probe_loss,
    probe_outliers,
    probe_seed,
    probe_starts,
)
from trainer.step import Stepper
from verifier.adversaries import Jump, make_adversary
from verifier.adversaries.unseen import jump_size, validation_gradient
from verifier.measure import delta_excess, tensor_norm

Tensors = dict[str, torch.Tensor]
DEFAULT_ATTACKS = ("jump:1,1.45,gradient;jump:1,1.49,matrices;jump:1,1.49,matrices,first;jump:1,1.45;"
                   "jump:1,1.45,random;orthogonal")


def address(i: int) -> str:
    return encode_address(i.to_bytes(20, "big"))


def prev_seed(e: int) -> bytes:
    return bytes([e % 256, 11]) * 16


def beacon(e: int) -> bytes:
    """Epoch ``e``'s beacon in this simulation (revealed after the hosts committed)."""
    return tagged_hash("bench/probe-beacon", e.to_bytes(8, "big"))


def rule_loss(spec: RunSpec, model: torch.nn.Module, dataset: Dataset, theta: GlobalState, rule: str,
              kept: dict[str, Tensors], weights: dict[str, int] | None = None) -> float:
    """The validation loss (512 evenly spread windows) of the agreed model after θ_e's outer step
    over the Δs ``kept``, aggregated by ``rule``."""
    ruled = spec.with_changes(aggregation={"rule": rule}).aggregation
    return validation_loss(model, dataset, params=outer_step(theta, aggregate(ruled, kept, weights), spec.outer).params)


def paired_damage(loss: Callable[[str, dict[str, Tensors]], float], rules: list[str], honest: PeerBound,
                  with_probe: PeerBound, peer_only: PeerBound) -> dict[str, float]:
    """Per rule, the loss after the forged Δ's epoch minus after the host's honest one in its place,
    with the probe rule and with the peer bound alone (``damage_probe_…``, ``damage_peer_only_…``)."""
    out = {}
    for rule in rules:
        ref = loss(rule, honest.kept)
        out[f"damage_probe_{rule}"] = round(loss(rule, with_probe.kept) - ref, 5)
        out[f"damage_peer_only_{rule}"] = round(loss(rule, peer_only.kept) - ref, 5)
    return out


def blend_attack(judge: Callable[[Tensors, str, int], dict], blend: Callable[[Tensors, float], Tensors],
                 gain: Callable[[Tensors], int], floor: int, forged: Tensors, attack: str, mode: str,
                 epoch: int) -> dict:
    """The blend of a forgery the probe left out: the largest λ (bisection, 10 steps) whose blended
    Δ's ``gain`` is at least ``floor``, judged as ``{attack}+blend`` (``mode`` oracle) or
    ``{attack}+blend-own``, with its λ."""
    lo, hi = 0.0, 1.0
    for _ in range(10):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gain(blend(forged, mid)) >= floor else (lo, mid)
    suffix = "+blend" if mode == "oracle" else "+blend-own"
    row = judge(blend(forged, lo), f"{attack}{suffix}", epoch)
    row["lambda"] = round(lo, 4)
    return row


class Probe:
    """The gains of one epoch: every scale on the epoch's windows, ``L(θ_e)`` computed once per scale."""

    def __init__(self, model: torch.nn.Module, dataset: Dataset, theta: Tensors, starts: list[int],
                 scales: list[float]) -> None:
        self.model, self.dataset, self.theta, self.starts, self.scales = model, dataset, theta, starts, scales
        self.base = probe_loss(model, dataset, theta, starts)

    def gains(self, delta: Tensors) -> list[int]:
        return [self.gain(delta, s) for s in self.scales]

    def gain(self, delta: Tensors, scale: float | None = None) -> int:
        """The gain at ``scale`` (the first scale, the one the rule uses, by default)."""
        s = self.scales[0] if scale is None else scale
        return gain_micro(probe_gain(self.model, self.dataset, self.theta, delta, self.starts, s, base=self.base))


def orthogonal(spec: RunSpec, dataset: Dataset, theta: Tensors, own: Tensors, ratio: float = 1.45) -> Tensors:
    """The ``orthogonal`` forgery (module docstring), float32, before quantization."""
    g0 = validation_gradient(spec, dataset, theta)
    g1 = validation_gradient(spec, dataset, {n: theta[n] - own[n] for n in theta})
    out = {}
    for n, d in own.items():
        a, b = g0[n].double(), g1[n].double()
        bb = float((b * b).sum())
        u = a - (float((a * b).sum()) / bb) * b if bb > 0 else a
        nu = float(u.norm())
        if nu == 0 or float(d.double().norm()) == 0:
            out[n] = d.clone()
            continue
        unit = (u / nu).to(d.dtype)
        # The end point θ_e − Δ moves along +u (uphill at θ_e): Δ − α·u, sized to ratio × ‖Δ‖.
        out[n] = d - jump_size(d, unit, ratio) * unit
    return out


@dataclass
class Epoch:
    """One epoch as the forger meets it: θ_e, the honest peers, their gains, the rule's settings."""

    spec: RunSpec
    dataset: Dataset
    model: torch.nn.Module
    theta: GlobalState
    probe: Probe
    peers: dict[str, Tensors]
    peer_gains: dict[str, list[int]]
    forger: str
    own: Tensors
    margin: int
    segments: dict[str, int] | None
    rules: list[str]

    def loss(self, rule: str, kept: dict[str, Tensors]) -> float:
        weights = {a: self.segments[a] for a in kept} if self.segments else None
        return rule_loss(self.spec, self.model, self.dataset, self.theta, rule, kept, weights)

    def judge(self, delta: Tensors, name: str, epoch: int) -> dict:
        """The forger's gains and deficits, what leaves it out, and the paired damage per rule."""
        a0, scales = self.forger, self.probe.scales
        g = self.probe.gains(delta)
        all_gains = {**self.peer_gains, a0: g}
        defs = [int(probe_deficits({a: x[j] for a, x in all_gains.items()}, self.segments)[a0])
                for j in range(len(scales))]
        both = admitted({**self.peers, a0: delta}, {a: x[0] for a, x in all_gains.items()}, self.margin, self.segments)
        alone = admitted({**self.peers, a0: delta}, None, 0, self.segments)
        base = admitted({**self.peers, a0: self.own}, {**{a: x[0] for a, x in self.peer_gains.items()},
                                                        a0: self.probe.gains(self.own)[0]}, self.margin, self.segments)
        out: dict = {"epoch": epoch, "attack": name, "gain": g, "deficit": defs,
                     "ratio_to_own": round(max(tensor_norm(delta[n]) / max(tensor_norm(self.own[n]), 1e-30)
                                               for n in self.own), 3),
                     "peer_left_out": a0 in alone.left_out, "probe_left_out": a0 in both.excluded}
        return {**out, **paired_damage(self.loss, self.rules, base, both, alone)}

    def blend(self, forged: Tensors, lam: float) -> Tensors:
        """``Δ̂_own + λ(Δ̂_forged − Δ̂_own)``, quantized as committed."""
        quant = self.spec.quantization.at(0)
        mixed = {n: self.own[n] + lam * (forged[n] - self.own[n]) for n in self.own}
        return dequantize(quantize(mixed, quant), parameter_shapes(self.spec), quant)


def cost(windows: int, repeats: int = 3) -> list[dict]:
    """Seconds of one host's probe on one validator (``L(θ_e − s·Δ̂)``: ``L(θ_e)`` is shared by the
    hosts it validates) at every preset from tiny to small, θ_0 and a random Δ, 1 thread, beside one
    inner step of the same preset (median of ``repeats`` each)."""
    rows = []
    for name in ("tiny", "demo", "small"):
        spec = getattr(presets, name)()
        dataset = Dataset.load(spec.data)
        model = build_model(spec)
        theta = GlobalState.initial(spec).params
        gen = torch.Generator().manual_seed(0)
        delta = {n: 1e-3 * torch.randn(t.shape, generator=gen) for n, t in theta.items()}
        starts = probe_starts(dataset, probe_seed(beacon(0), 0), windows)
        base = probe_loss(model, dataset, theta, starts)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            probe_gain(model, dataset, theta, delta, starts, 0.25, base=base)
            times.append(time.perf_counter() - t)
        # Side by side: one inner step of the same preset (what a replay of one segment takes c of).
        stepper = Stepper(spec)
        stepper.load(start_checkpoint(spec, theta, 0).state)
        batch = dataset.batch(spec.run_id(), prev_seed(0), address(0), 0, spec.train.batch_size)
        steps = []
        for _ in range(repeats):
            t = time.perf_counter()
            stepper.step(*batch)
            steps.append(time.perf_counter() - t)
        probe_s, step_s = sorted(times)[len(times) // 2], sorted(steps)[len(steps) // 2]
        rows.append({"preset": name, "params": sum(t.numel() for t in theta.values()), "windows": windows,
                     "seq_len": spec.data.seq_len, "seconds_per_host": round(probe_s, 3),
                     "seconds_per_step": round(step_s, 3), "probe_over_step": round(probe_s / step_s, 2),
                     "probe_over_segment_replay": round(probe_s / (step_s * spec.train.segment_steps), 3)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=["tiny", "demo", "small"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--windows", type=int, default=64)
    parser.add_argument("--scales", default="1,0.25", help="comma-separated probe scales; the rule uses the first")
    parser.add_argument("--margin", type=float, default=0.05, help="the probe rule's margin (nats)")
    parser.add_argument("--partial", action="store_true", help="the last host trains half the segments")
    parser.add_argument("--quantization", default="", help="a schedule in place of the preset's, e.g. topk2@0")
    parser.add_argument("--attacks", default=DEFAULT_ATTACKS, help="';'-separated (jump texts, orthogonal) or none")
    parser.add_argument("--rules", default="centered_clip,mean")
    parser.add_argument("--blend", default="oracle", choices=["oracle", "own"],
                        help="how a blend is tuned: on the probe's windows and peers (oracle) or on its own estimate")
    parser.add_argument("--cost", action="store_true", help="only time one host's probe at tiny, demo, small")
    parser.add_argument("--dispute", action="store_true",
                        help="also each host's gain on its gain-dispute windows (dispute_starts), at the first "
                             "scale, and the rule with that one gain mixed among its peers' probe-window gains")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.getLogger("veriloco.verifier").setLevel(logging.ERROR)
    configure(1)
    torch.manual_seed(0)
    if args.cost:
        timed = cost(args.windows)
        if args.json:
            args.json.write_text(json.dumps({"cost": timed}, indent=1))
        return
    spec = getattr(presets, args.preset)()
    if args.quantization:
        spec = spec.with_changes(quantization=parse_quant_schedule(args.quantization).model_dump())
    dataset = Dataset.load(spec.data)
    scales = [float(x) for x in args.scales.split(",")]
    rules = args.rules.split(",")
    margin = gain_micro(args.margin)
    plan = [] if args.attacks == "none" else args.attacks.split(";")
    forgers = {a: make_adversary(a) for a in plan if a != "orthogonal"}
    run_id, shapes = spec.run_id(), parameter_shapes(spec)
    h, c, s_all = spec.train.inner_steps, spec.train.segment_steps, spec.train.segments
    segments = {address(i): s_all for i in range(args.hosts)}
    if args.partial:
        segments[address(args.hosts - 1)] = s_all // 2
    model = build_model(spec)
    stepper = Stepper(spec)
    theta = GlobalState.initial(spec)
    residuals: dict[str, Tensors | None] = {}
    honest_rows, attack_rows = [], []
    t0 = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="veriloco-probe-") as tmp:
        for e in range(args.epochs):
            quant = spec.quantization.at(e)
            honest: dict[str, Tensors] = {}
            for i in range(args.hosts):
                a = address(i)
                ctx = EpochContext(run_id, e, a, prev_seed(e))
                stepper.load(start_checkpoint(spec, theta.params, e).state)
                train_steps(stepper, dataset, spec, ctx, range(segments[a] * c), 1)
                delta = pseudo_gradient(theta.params, stepper.export().params)
                source = carried_from(spec, e)
                carried = residuals.pop(a, None) if source is not None else None
                payload, residuals[a] = encode_pseudo_gradient(delta, quant, carried)
                honest[a] = dequantize(payload, shapes, quant)
            starts = probe_starts(dataset, probe_seed(beacon(e), e), args.windows)
            probe = Probe(model, dataset, theta.params, starts, scales)
            gains = {a: probe.gains(d) for a, d in honest.items()}
            seg = segments if args.partial else None
            deficits = [probe_deficits({a: g[j] for a, g in gains.items()}, seg) for j in range(len(scales))]
            kept = admitted(honest, {a: g[0] for a, g in gains.items()}, margin, seg)
            row = {"epoch": e, "base_loss": round(probe.base, 4),
                   "gains": {f"{s:g}": [gains[a][j] for a in sorted(gains)] for j, s in enumerate(scales)},
                   "deficit_max": {f"{s:g}": max(int(x) for x in deficits[j].values()) for j, s in enumerate(scales)},
                   "probe_left_out": sorted(kept.excluded), "peer_left_out": sorted(kept.left_out)}
            if args.dispute:
                # A gain dispute decides a host's gain on its own dispute windows while its peers'
                # stand on the probe's: the rule then compares gains of two window draws.
                mixed_deficit, moved, left = [], [], set()
                for a, d in honest.items():
                    other = Probe(model, dataset, theta.params, dispute_starts(dataset, beacon(e), e, a,
                                                                               args.windows), scales[:1])
                    dg = other.gains(d)[0]
                    moved.append(dg - gains[a][0])
                    mixed = {**{p: g[0] for p, g in gains.items()}, a: dg}
                    mixed_deficit.append(int(probe_deficits(mixed, seg)[a]))
                    left |= probe_outliers(mixed, margin, seg) & {a}
                row["dispute"] = {"gain_moved": moved, "mixed_deficit": mixed_deficit,
                                  "mixed_left_out": sorted(left)}
            honest_rows.append(row)
            print(json.dumps(row), flush=True)
            for attack in plan:
                a0 = address(0)
                if attack == "orthogonal":  # the largest ratio within the per-coordinate bound
                    for ratio in (1.45, 1.3, 1.15, 1.05):
                        forged = dequantize(quantize(orthogonal(spec, dataset, theta.params, honest[a0], ratio),
                                                     quant), shapes, quant)
                        if delta_excess(theta.params, forged, quantize(forged, quant), shapes, spec.train,
                                        quant)[0] <= 1:
                            break
                    own = honest[a0]
                else:
                    forger = forgers[attack]
                    ctx = EpochContext(run_id, e, a0, prev_seed(e))
                    result = forger.train_epoch(spec, dataset, ctx, theta.params, Path(tmp) / f"{attack}-{e}")
                    forged = dequantize(result.payload, shapes, quant)
                    assert isinstance(forger, Jump)
                    own = dequantize(quantize(forger.honest_delta[e], quant), shapes, quant)
                payload = quantize(forged, quant)
                if delta_excess(theta.params, forged, payload, shapes, spec.train, quant)[0] > 1:
                    attack_rows.append({"epoch": e, "attack": attack, "beyond_h_steps": True})
                    print(json.dumps(attack_rows[-1]), flush=True)
                    continue
                ep = Epoch(spec, dataset, model, theta, probe, {a: d for a, d in honest.items() if a != a0},
                           {a: g for a, g in gains.items() if a != a0}, a0, own, margin, seg, rules)
                found = ep.judge(forged, attack, e)
                attack_rows.append(found)
                print(json.dumps(found), flush=True)
                # The blend: the largest λ whose gain sits at the allowance — on the probe's own windows
                # against the peers' median (oracle), or on the public evenly spread windows against
                # its own honest gain there (own: what a host can compute before it commits).
                if args.blend == "oracle":
                    tuner, med_ref = probe, found["gain"][0] + found["deficit"][0]
                else:
                    tuner = Probe(model, dataset, theta.params, validation_starts(dataset, 512), scales[:1])
                    med_ref = tuner.gains(own)[0]
                floor = med_ref - probe_allowance(med_ref, margin)
                if found["probe_left_out"]:
                    mixed = blend_attack(ep.judge, ep.blend, tuner.gain, floor, forged, attack, args.blend, e)
                    attack_rows.append(mixed)
                    print(json.dumps(mixed), flush=True)
            rule0 = spec.aggregation
            weights = {a: segments[a] for a in kept.kept} if args.partial else None
            theta = outer_step(theta, aggregate(rule0, kept.kept, weights), spec.outer)
    out = {"spec": {"preset": args.preset, "H": h, "S": s_all, "hosts": args.hosts, "epochs": args.epochs,
                    "windows": args.windows, "scales": scales, "margin": args.margin, "partial": args.partial,
                    "quantization": args.quantization or spec.quantization.scheme, "rule": spec.aggregation.rule},
           "honest": honest_rows, "attacks": attack_rows, "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps({"seconds": out["seconds"]}))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
