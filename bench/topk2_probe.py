"""Why honest ``topk2`` probe gains spread, and what each candidate probe quantity does (issue 28).

Chain-free. ``--hosts`` honest hosts train ``--epochs`` epochs of ``--preset`` from θ_0 under the
``topk2`` scheme (block ``--block``, error feedback β = ``--decay``), each host carrying its own
residual from epoch to epoch as the protocol does; the agreed model moves by the run's rule over what
the peer bound and the epoch's probe rule admit (``trainer.probe.admitted`` on the Δ̂ gains below,
:func:`next_states`: the proposers' path). ``--outer sgd``
uses the outer step the compression runs recommend for topk2 (SGD lr 1, no momentum); ``preset`` keeps
the preset's Nesterov (0.7, 0.9). Every epoch, on the probe's windows (``probe_starts`` of the epoch's
beacon, ``--windows``, scale ``PROBE_SCALE``) each host's gain ``L(θ_e) − L(θ_e − s·x)`` of:

* ``sent``: x = Δ̂, the decompressed payload (what the aggregate adds; what the probe scored before);
* ``dense``: x = Δ = θ_e − θ_S, the training itself (what an int8 probe effectively scores);
* ``sent_noef``: x = compress(Δ, 0), the same Δ compressed without the carried residual (sparsity and
  2-bit values alone);
* ``intended``: x = Δ + β·r, what the host would send without compression (the carried residual in);
* ``carried``: x = β·r alone; ``next``: x = r', what stays behind;
* ``sent_other``: x = Δ̂ on the host's dispute windows (another window draw: the windows' share).

and per quantity the largest *deficit* (how far a host's gain is below its peers' median, as
``trainer.probe.probe_deficits`` compares them) over the int8 rule's allowance (``probe_allowance``,
``--margin`` + 5 % of a positive median): above 1, that honest host would be left out; and
``sent_under_rule``, the same for Δ̂ under the allowance the rule applies in a ``topk2`` epoch
(``trainer.probe.probe_rule``).

``--attacks``: host 0 forges every epoch from the honest trajectory's θ_e (a ``jump`` adversary of
``verifier.adversaries.unseen``, compressed with its own carried residual as its validators recompute
it), and is judged by the shipped rule (``probe_rule``): its Δ̂'s gain, its dense Δ's, whether the
probe and the peer bound leave it out, and the **paired damage** per ``--rules`` (validation loss on
512 evenly spread windows after this epoch's outer step with the forged Δ̂, minus with its own
honest Δ̂ in its place), with the probe and with the peer bound alone. Where the probe left it out,
``…+blend`` is the **oracle** forger: ``Δ_own + λ(Δ_forged − Δ_own)`` compressed likewise, λ the
largest (bisection) whose Δ̂'s gain on the probe's own windows is at the floor its peers' actual
gains set (a real host knows neither before it commits). ``--blend own`` (``…+blend-own``): λ tuned
instead on what a host knows before it commits, its Δ̂'s gain on the 512 public evenly spread
validation windows against its own honest Δ̂'s gain there, aimed exactly at the allowance.

``--seed`` moves every draw (the hosts' data, the beacons): several seeds are several honest runs.

``--schedule pipelined``: the protocol's pipelined run (docs/training.md, "Pipelined epochs"): each
host carries its residual from two epochs back (``trainer.delta.carried_from`` of the spec with
``phases.pipelined``, the run id kept), and epoch e + 1 trains from the optimistic start, e's outer
step from the settled θ^s_e over every committed Δ within the peer bound, while θ^s_{e+1} takes the
Δs the probe rule admits (:func:`next_states`, as ``trainer.diloco.simulate(schedule="optimistic")``);
the probe scores at the start each epoch trained from. ``synchronous`` (the default): both are
θ^s_{e+1}. ``--partial H:s``: host H trains only the first s of the S segments every epoch, its Δ
θ_e − θ_s compressed with its residual, compared per segments by the probe rule and the peer bound
and weighed by s in the aggregate, as the proposers treat a partial epoch (a hypothetical in
``topk2`` epochs: a host trains those whole, its residual rides on leaf S, docs/training.md).

Run: ``PYTHONPATH=. .venv/bin/python bench/topk2_probe.py --preset demo --epochs 8 [--seed 0]
[--outer preset|sgd] [--decay 0.9] [--probe-margin-topk2 0.03] [--schedule synchronous|pipelined] [--partial H:s]
[--attacks 'jump:1,1.45,gradient;…'] [--rules centered_clip,mean] [--json out.json]``; tables from the JSON
files: ``bench/topk2_probe_summary.py`` (per configuration, partial hosts and attacks) and
``bench/topk2_decay_summary.py`` (per run, early and late epochs, another allowance re-read).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import logging
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench.*

# The probe benchmark's.
from bench.probe_check import address, blend_attack, paired_damage, rule_loss
from protocol.rules.hashing import tagged_hash
from protocol.rules.spec import RunSpec
from protocol.tensors.aggregation import aggregate
from trainer import compress, presets
from trainer.data import Dataset
from trainer.delta import carried_from, pseudo_gradient
from trainer.determinism import configure
from trainer.evaluate import validation_starts
from trainer.inner import EpochContext, start_checkpoint, train_steps
from trainer.model import build_model, parameter_shapes
from trainer.outer import GlobalState, outer_step
from trainer.peer_bound import PeerBound
from trainer.probe import (
    PROBE_SCALE,
    admitted,
    dispute_starts,
    gain_micro,
    probe_allowance,
    probe_deficits,
    probe_gain,
    probe_loss,
    probe_rule,
    probe_seed,
    probe_starts,
)
from trainer.step import Stepper
from verifier.adversaries import make_adversary

Tensors = dict[str, torch.Tensor]
QUANTITIES = ("sent", "dense", "sent_noef", "intended", "carried", "next", "sent_other")


def prev_seed(seed: int, e: int) -> bytes:
    return tagged_hash("bench/topk2-probe-prev", seed.to_bytes(8, "big"), e.to_bytes(8, "big"))


def beacon(seed: int, e: int) -> bytes:
    return tagged_hash("bench/topk2-probe-beacon", seed.to_bytes(8, "big"), e.to_bytes(8, "big"))


def topk2_spec(preset: str, block: int, decay: str, outer: str) -> RunSpec:
    spec = getattr(presets, preset)()
    changes: dict = {"quantization": {"scheme": "topk2", "block_size": block, "error_decay": decay}}
    if outer == "sgd":
        changes["outer"] = {"lr": "1", "momentum": "0", "nesterov": False}
    return spec.with_changes(**changes)


def worst_over_allowance(gains: dict[str, int], margin: int, bps: int = 500,
                         segments: dict[str, int] | None = None) -> tuple[float, int, int]:
    """(largest deficit / its allowance, that deficit, the median it was measured from), µnats;
    hosts compared per ``segments`` as the rule compares them (``None``: all whole)."""
    deficits = probe_deficits(gains, segments)
    worst = max(deficits, key=lambda a: deficits[a] / probe_allowance(gains[a] + deficits[a], margin, bps))
    d = deficits[worst]
    m = gains[worst] + d
    return float(d / probe_allowance(m, margin, bps)), int(d), int(m)


def parse_partial(text: str | None, hosts: list[str], whole: int) -> dict[str, int]:
    """Every host's segments: ``whole`` (S), but ``text`` ``"H:s"`` gives host index H only s.

    Raises:
        ValueError: not ``H:s`` with H a host index and 1 <= s <= S.
    """
    segments = dict.fromkeys(hosts, whole)
    if text is None:
        return segments
    index, sep, count = text.partition(":")
    if not sep or not index.isdigit() or not count.isdigit():
        raise ValueError(f"--partial must be H:s (host index : segments), not {text!r}")
    h, s = int(index), int(count)
    if not 0 <= h < len(hosts) or not 1 <= s <= whole:
        raise ValueError(f"--partial {text}: the host must be in [0, {len(hosts)}) and s in [1, {whole}]")
    segments[hosts[h]] = s
    return segments


def weights(kept: dict[str, Tensors], segments: dict[str, int]) -> dict[str, int]:
    """The aggregate's weights of the Δs ``kept``: their segments (all S: the unweighted rule)."""
    return {a: segments[a] for a in kept}


def next_states(spec: RunSpec, epoch: int, settled: GlobalState, sent: dict[str, Tensors], gains: dict[str, int],
                segments: dict[str, int], schedule: str) -> tuple[GlobalState, GlobalState, PeerBound]:
    """(θ^s_{e+1}, the start epoch e + 1 trains from, what the proposers admitted of epoch e's Δs).

    θ^s_{e+1}: the outer step from θ^s_e over the Δs the peer bound and the probe rule of epoch
    ``epoch``'s scheme admit (``gains``: the decided probe gains), weighed by segments, as a
    proposer takes it. Synchronous: e + 1 trains from it. ``pipelined``: from the optimistic start,
    the outer step from θ^s_e over every committed Δ within the peer bound (no gains are posted yet);
    only a Δ the probe left out makes the two differ, and the next start builds on θ^s_{e+1} again."""
    margin, bps = probe_rule(spec, epoch)
    kept = admitted(sent, gains, margin, segments, relative_bps=bps)
    settled_next = outer_step(settled, aggregate(spec.aggregation, kept.kept, weights(kept.kept, segments)), spec.outer)
    if schedule == "synchronous":
        return settled_next, settled_next, kept
    every = admitted(sent, None, 0, segments).kept
    return settled_next, outer_step(settled, aggregate(spec.aggregation, every, weights(every, segments)),
                                    spec.outer), kept


class Forger:
    """Host 0's view of one epoch: θ_e, its carried residual, its honest Δ, the honest peers' Δ̂s and
    gains on the probe's windows, and the rule (margin, relative share) the proposers apply."""

    def __init__(self, spec: RunSpec, dataset: Dataset, model: torch.nn.Module, theta: GlobalState,
                 starts: list[int], base: float, residual: Tensors, own: Tensors, peers: dict[str, Tensors],
                 peer_gains: dict[str, int], margin: int, bps: int, rules: list[str],
                 segments: dict[str, int] | None = None, settled: GlobalState | None = None) -> None:
        self.spec, self.dataset, self.model, self.theta = spec, dataset, model, theta
        # Per host (host 0 whole); the damage is the outer step from the settled model (θ_e when synchronous).
        self.segments, self.settled = segments, settled if settled is not None else theta
        self.starts, self.base, self.residual, self.own = starts, base, residual, own
        self.peers, self.peer_gains, self.margin, self.bps, self.rules = peers, peer_gains, margin, bps, rules
        self.shapes = parameter_shapes(spec)
        self.quant = spec.quantization

    def sent(self, dense: Tensors) -> Tensors:
        """Δ̂ of a dense Δ, compressed with the forger's carried residual as its validators recompute it."""
        payload, _ = compress.compress(dense, self.residual, self.quant.block_size, self.quant.error_decay)
        return compress.decompress(payload, self.shapes, self.quant.block_size)

    def gain(self, x: Tensors) -> int:
        return gain_micro(probe_gain(self.model, self.dataset, self.theta.params, x, self.starts, PROBE_SCALE,
                                     base=self.base))

    def sent_gain(self, dense: Tensors) -> int:
        """The gain of a dense Δ as sent (:meth:`sent`)."""
        return self.gain(self.sent(dense))

    def floor(self) -> int:
        """The lowest gain the rule admits for host 0 against its peers' gains (its peers' lower median
        less the allowance), rounded up to a whole µnat."""
        a0 = address(0)
        probe = {**self.peer_gains, a0: GAIN_MICRO_FLOOR}
        m = probe_deficits(probe, self.segments)[a0] + GAIN_MICRO_FLOOR
        return int(-((-(m - probe_allowance(m, self.margin, self.bps))) // 1))

    def loss(self, rule: str, kept: dict[str, Tensors]) -> float:
        w = weights(kept, self.segments) if self.segments is not None else None
        return rule_loss(self.spec, self.model, self.dataset, self.settled, rule, kept, w)

    def judge(self, dense: Tensors, name: str, epoch: int) -> dict:
        a0 = address(0)
        sent = self.sent(dense)
        g, gd = self.gain(sent), self.gain(dense)
        own_sent = self.sent(self.own)
        gains = {**self.peer_gains, a0: g}
        seg = self.segments
        both = admitted({**self.peers, a0: sent}, gains, self.margin, seg, relative_bps=self.bps)
        alone = admitted({**self.peers, a0: sent}, None, 0, seg)
        base = admitted({**self.peers, a0: own_sent}, {**self.peer_gains, a0: self.gain(own_sent)}, self.margin, seg,
                        relative_bps=self.bps)
        out: dict = {"epoch": epoch, "attack": name, "gain_sent": g, "gain_dense": gd,
                     "deficit": int(probe_deficits(gains, seg)[a0]), "floor": self.floor(),
                     "peers_left_out": sorted(both.excluded - {a0}),
                     "peer_left_out": a0 in alone.left_out, "probe_left_out": a0 in both.excluded}
        return {**out, **paired_damage(self.loss, self.rules, base, both, alone)}

    def blend(self, forged: Tensors, lam: float) -> Tensors:
        return {n: self.own[n] + lam * (forged[n] - self.own[n]) for n in self.own}


GAIN_MICRO_FLOOR = -(10**12)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", choices=["tiny", "demo", "small"])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--windows", type=int, default=64)
    parser.add_argument("--margin", type=float, default=0.02)
    parser.add_argument("--block", type=int, default=1024)
    parser.add_argument("--decay", default="1")
    parser.add_argument("--outer", default="preset", choices=["preset", "sgd"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--probe-margin", default=None,
                        help="the run spec's aggregation.probe_margin in nats (a topk2 epoch's rule is 3 x it + 5 %% "
                             "unless --probe-margin-topk2 is given)")
    parser.add_argument("--probe-margin-topk2", default=None,
                        help="the run spec's aggregation.probe_margin_topk2 in nats (a topk2 epoch's rule: it + 5 %%)")
    parser.add_argument("--attacks", default="none",
                        help="';'-separated jump adversaries host 0 runs every epoch (e.g. 'jump:1,1.45,gradient'), "
                             "or none; each followed by its oracle blend where the probe left it out")
    parser.add_argument("--rules", default="centered_clip,mean")
    parser.add_argument("--blend", default="oracle", choices=["oracle", "own"],
                        help="how a blend is tuned: on the probe's windows against the peers' gains (oracle), or "
                             "on the 512 public evenly spread windows against its own honest Δ̂'s gain there (own)")
    parser.add_argument("--json", type=Path)
    # The pipelined schedule and a partial host (next_states, parse_partial).
    parser.add_argument("--schedule", default="synchronous", choices=["synchronous", "pipelined"])
    parser.add_argument("--partial", default=None, metavar="H:s", help="host H trains only s of the S segments")
    args = parser.parse_args()
    logging.getLogger("veriloco.verifier").setLevel(logging.ERROR)
    configure(1)
    torch.manual_seed(args.seed)
    spec = topk2_spec(args.preset, args.block, args.decay, args.outer)
    margins = {"probe_margin": args.probe_margin, "probe_margin_topk2": args.probe_margin_topk2}
    if any(v is not None for v in margins.values()):
        spec = spec.with_changes(aggregation={k: v for k, v in margins.items() if v is not None})
    dataset = Dataset.load(spec.data)
    margin = gain_micro(args.margin)
    quant = spec.quantization
    decay = Decimal(args.decay)
    run_id, shapes = spec.run_id(), parameter_shapes(spec)
    c, s_all = spec.train.segment_steps, spec.train.segments
    hosts = [address(i) for i in range(args.hosts)]
    segments = parse_partial(args.partial, hosts, s_all)
    # Whose residual lag: a pipelined run's (e − 2); the run id stays the spec's.
    lag = spec.with_changes(phases={"pipelined": args.schedule == "pipelined"})
    model = build_model(spec)
    stepper = Stepper(spec)
    settled = theta = GlobalState.initial(spec)  # θ^s_e and the start θ_e the epoch trains from
    left: dict[tuple[str, int], Tensors] = {}  # (host, epoch) -> the residual r' that epoch left
    plan = [] if args.attacks == "none" else args.attacks.split(";")
    forgers = {a: make_adversary(a) for a in plan}
    rules = args.rules.split(",")
    tmp = tempfile.TemporaryDirectory(prefix="veriloco-topk2-probe-")
    rows, attack_rows = [], []
    t0 = time.perf_counter()
    for e in range(args.epochs):
        xs: dict[str, dict[str, Tensors]] = {q: {} for q in QUANTITIES if q != "sent_other"}
        for a in hosts:
            ctx = EpochContext(run_id, e, a, prev_seed(args.seed, e))
            stepper.load(start_checkpoint(spec, theta.params, e).state)
            train_steps(stepper, dataset, spec, ctx, range(segments[a] * c), 1)
            delta = pseudo_gradient(theta.params, stepper.export().params)
            source = carried_from(lag, e)
            residual = left.pop((a, source)) if source is not None else compress.zero_residual(shapes)
            carried = compress.decay_residual(residual, decay)
            payload, nxt = compress.compress(delta, residual, quant.block_size, decay)
            noef, _ = compress.compress(delta, compress.zero_residual(shapes), quant.block_size, decay)
            xs["sent"][a] = compress.decompress(payload, shapes, quant.block_size)
            xs["dense"][a] = delta
            xs["sent_noef"][a] = compress.decompress(noef, shapes, quant.block_size)
            xs["intended"][a] = {n: delta[n] + carried[n] for n in delta}
            xs["carried"][a] = carried
            xs["next"][a] = nxt
            if a == hosts[0]:
                carried0 = residual
            left[(a, e)] = nxt
        starts = probe_starts(dataset, probe_seed(beacon(args.seed, e), e), args.windows)
        base = probe_loss(model, dataset, theta.params, starts)
        gains = {q: {a: gain_micro(probe_gain(model, dataset, theta.params, x[a], starts, PROBE_SCALE, base=base))
                     for a in hosts} for q, x in xs.items()}
        other = {}
        for a in hosts:
            ds = dispute_starts(dataset, beacon(args.seed, e), e, a, args.windows)
            other[a] = gain_micro(probe_gain(model, dataset, theta.params, xs["sent"][a], ds, PROBE_SCALE))
        gains["sent_other"] = other
        # The window draw's share: each host's Δ̂ gain on its dispute windows among its peers' probe-window gains.
        mixed = max(float(probe_deficits({**gains["sent"], a: other[a]}, segments)[a]) for a in hosts)
        norms = {q: [round(float(sum(float(t.double().norm()) ** 2 for t in x[a].values()) ** 0.5), 5)
                     for a in hosts] for q, x in xs.items()}
        row = {"epoch": e, "base_loss": round(base, 4), "gains": {q: [g[a] for a in hosts] for q, g in gains.items()},
               "worst": {q: [round(w, 3), d, m] for q, (w, d, m) in
                         ((q, worst_over_allowance(g, margin, segments=segments)) for q, g in gains.items()
                          if q != "sent_other")},
               "mixed_window_deficit": round(mixed), "norms": norms,
               "sent_under_rule": [round(w, 3) for w in
                                   worst_over_allowance(gains["sent"], *probe_rule(spec, e), segments)[:1]],
               "deficits": [int(probe_deficits(gains["sent"], segments)[a]) for a in hosts]}
        settled_next, theta_next, kept = next_states(spec, e, settled, xs["sent"], gains["sent"], segments,
                                                     args.schedule)
        row["peer_left_out"] = sorted(kept.left_out)
        row["rule_left_out"] = sorted(kept.excluded)
        a0 = hosts[0]
        for attack in plan:
            f = Forger(spec, dataset, model, theta, starts, base, carried0, xs["dense"][a0],
                       {a: x for a, x in xs["sent"].items() if a != a0},
                       {a: g for a, g in gains["sent"].items() if a != a0}, *probe_rule(spec, e), rules,
                       segments, settled)
            ctx = EpochContext(run_id, e, a0, prev_seed(args.seed, e))
            result = forgers[attack].train_epoch(spec, dataset, ctx, theta.params, Path(tmp.name) / f"{attack}-{e}")
            forged = pseudo_gradient(theta.params, result.end.params)
            found = f.judge(forged, attack, e)
            attack_rows.append(found)
            print(json.dumps(found), flush=True)
            if found["probe_left_out"]:  # the blend: the largest λ whose Δ̂ sits at the floor
                if args.blend == "oracle":  # on the probe's windows against the peers' actual gains
                    tuner, floor = f, found["floor"]
                else:  # on what the host knows before it commits: public windows, its own honest Δ̂
                    public = validation_starts(dataset, 512)
                    public_base = probe_loss(model, dataset, theta.params, public)
                    tuner = Forger(spec, dataset, model, theta, public, public_base, carried0, xs["dense"][a0], {}, {},
                                   f.margin, f.bps, rules)
                    mine = tuner.sent_gain(xs["dense"][a0])
                    floor = int(mine - probe_allowance(mine, f.margin, f.bps))
                blended = blend_attack(f.judge, f.blend, tuner.sent_gain, floor, forged, attack, args.blend, e)
                attack_rows.append(blended)
                print(json.dumps(blended), flush=True)
        settled, theta = settled_next, theta_next
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = {"spec": {"preset": args.preset, "epochs": args.epochs, "hosts": args.hosts, "windows": args.windows,
                    "margin": args.margin, "block": args.block, "decay": args.decay, "outer": args.outer,
                    "seed": args.seed, "scale": PROBE_SCALE, "rule": probe_rule(spec, 0),
                    "schedule": args.schedule, "segments": [segments[a] for a in hosts]},
           "rows": rows, "attacks": attack_rows, "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps({"seconds": out["seconds"]}))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
