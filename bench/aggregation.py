"""Robust outer aggregation under Byzantine hosts, with and without verification; the cost of each rule.

One command (defaults in brackets):

    .venv/bin/python bench/aggregation.py [--workers 2] [--epochs 5] [--json /tmp/aggregation.json]

Three parts, printed as Markdown tables (and written to ``--json``):

1. **Validation of the simulation against the full protocol** (``--validate-epochs``, 4). A real
   :class:`veriloco.network.LocalNetwork` on the embedded chain (host and validator nodes, commit,
   reveal, replayed challenges, slashing, proposals, agreement) with 3 honest hosts, one host that
   steers its Δ to IPM through one faked segment (:class:`bench.aggregation_attacks.Steered`) and one
   sign flipper; then the chain-free simulation below, given the chain's epoch seeds. Per epoch the
   simulation must predict exactly which hosts the chain excluded and reach the same global-state
   hash (bit for bit: it runs the same step, quantization, rule and outer step).
2. **Cost of each rule** (``--cost-hosts``, 8 and 32): wall time of
   :func:`protocol.tensors.aggregation.aggregate` for K random inputs of the demo model's size (137 k
   parameters), all rules side by side in one process, median of ``--cost-reps``.
3. **Final validation loss after E epochs** for every rule × attack × Byzantine fraction, with and
   without verification, next to the honest-only run of the same rule.

The simulation (:class:`Simulator`), per epoch ``e``:

* K hosts (the addresses :class:`~veriloco.network.LocalNetwork` gives ``host-0 … host-K−1``), the
  first B Byzantine. Honest hosts train H inner steps from θ_e with the trainer's step
  (:func:`trainer.inner.train_steps`) on the protocol's batches (seed of epoch ``e − 1``);
  Δ = θ_e − θ_H is quantized as the spec says (int8 block-64) and dequantized.
* Byzantine hosts (``--alie-z`` 1, ``--ipm-eps`` 0.5, ``--scale`` 10, the catalogue's defaults):
  ``alie`` and ``ipm`` aim at ``mean − z·std`` and ``−ε·mean`` of the honest Δs (they commit last
  and read them). Without verification they commit that Δ*. With verification they must steer
  to it through one faked segment (``--steering exact``: the real :func:`steer_epoch`, so the
  committed Δ is what the attack can really reach; ``ideal``: Δ* itself).
  ``sign_flip`` and ``scaled`` commit −Δ and 10·Δ of their own honest Δ next to honest leaves.
* **Verification, as the protocol decides it.** The epoch seed is the beacon's
  (:func:`protocol.rules.beacon.epoch_seed` over one secret per host), fresh each epoch and the same in
  every cell. A steering host is excluded exactly when its faked segment is among
  :func:`protocol.rules.sampling.challenged_segments` (probability k/(S−1) = 2/7 here); ``sign_flip`` and
  ``scaled`` are excluded every epoch (the always-replayed last segment's Δ check fails). Honest
  hosts always pass (their replays are bitwise at any thread count: ``docs/verification.md``). That a
  faked segment fails its replay and the others pass, and that a forged Δ fails the last segment,
  is checked with real replays in ``tests/protocol/test_aggregation_attacks.py``. A caught host is
  back the next epoch (worst case for the defence: on chain it would lose half its stake each time).
* The accepted Δs go through :func:`protocol.tensors.aggregation.aggregate` with the cell's rule (the
  spec's default parameters) and :func:`trainer.outer.outer_step` (Nesterov, 0.7 / 0.9).
* The final θ_E is scored with :func:`trainer.evaluate.validation_loss` (``--eval-windows``).
* The honest-only mean run is repeated with other ``train.seed`` values (``--noise-seeds``: another
  θ_0, data assignment and epoch seeds): its spread is what a difference between two cells must
  exceed to mean anything.

Run spec: the ``tiny`` preset with a short epoch, H = 16 inner steps in S = 8 segments of 2
(``--inner-steps``, ``--segment-steps``), k = 2 challenges, K = 8 hosts (``--hosts``; 1, 2, 3
Byzantine are 12.5 %, 25 %, 37.5 %, the nearest to 10/25/40 % for 8 hosts). Every cell uses the
same data assignment and epoch seeds (common random numbers), so cells differ only by rule and
attack. Cells run in ``--workers`` processes with one torch thread each; the numbers do not
depend on how many workers there are.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from multiprocessing import get_context
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench.*

import torch

from bench.aggregation_attacks import bench_secret, caught, default_segment, steer_epoch, target_delta
from protocol.rules.beacon import epoch_seed, genesis_seed
from protocol.rules.losses import MICRO
from protocol.rules.spec import AggregationSpec, RunSpec
from protocol.tensors.aggregation import RULES, aggregate
from trainer.data import Dataset
from trainer.delta import dequantize, pseudo_gradient, quantize
from trainer.evaluate import validation_loss
from trainer.inner import EpochContext, start_checkpoint, train_steps
from trainer.model import build_model, parameter_shapes
from trainer.outer import GlobalState, outer_step
from trainer.presets import preset
from trainer.step import Stepper

RULE_ORDER = ("mean", "median", "trimmed_mean", "centered_clip", "krum", "multi_krum", "geometric_median")
ATTACKS = ("alie", "ipm", "sign_flip", "scaled")
FORGED = ("sign_flip", "scaled")  # a forged Δ next to honest leaves: the last segment's Δ check catches it
STEERED = ("alie", "ipm")  # one faked segment: caught when that segment is challenged

Delta = dict[str, torch.Tensor]


def bench_spec(name: str = "tiny", inner_steps: int = 16, segment_steps: int = 2) -> RunSpec:
    """The preset with a short epoch (verification on, the spec's default k, quantization and outer step)."""
    return preset(name).with_changes(train={"inner_steps": inner_steps, "segment_steps": segment_steps})


def host_addresses(n: int) -> list[str]:
    """The addresses :class:`veriloco.network.LocalNetwork` gives ``host-0 … host-(n−1)``."""
    from veriloco.network import sim_key  # noqa: PLC0415 (the network stack loads only for --validate-epochs)

    return [sim_key(f"host-{i}").address() for i in range(n)]


def bench_seeds(run_id: bytes, hosts: Sequence[str], epochs: int, salt: str = "0") -> list[bytes]:
    """Epoch seeds from the beacon, one secret per host (the simulation's reveals)."""
    return [epoch_seed(run_id, e, {h: bench_secret(salt, e, h) for h in hosts}) for e in range(epochs)]


@dataclass(frozen=True)
class AttackParams:
    alie_z: float = 1.0
    ipm_eps: float = 0.5
    scale: float = 10.0
    steering: str = "exact"  # "exact": real steering through one faked segment; "ideal": Δ* itself


@dataclass
class SimEpoch:
    epoch: int
    excluded: list[str]
    accepted: int
    model_hash: str
    steer_gaps: list[float] = field(default_factory=list)


@dataclass
class SimRun:
    val_loss: float
    epochs: list[SimEpoch]
    trained_host_epochs: int


class Simulator:
    """DiLoCo epochs without the chain; verification decided by the protocol's challenge sampling.

    Args:
        spec: the run spec (model, H, c, k, quantization, outer step; its run id names the data
            assignment). Its aggregation section is the default rule; :meth:`run` may override it.
        dataset: the run's dataset.
        hosts: every host's address.
    """

    def __init__(self, spec: RunSpec, dataset: Dataset, hosts: Sequence[str]) -> None:
        self.spec, self.dataset, self.hosts = spec, dataset, list(hosts)
        self.run_id = spec.run_id()
        self.stepper = Stepper(spec)
        self.shapes = parameter_shapes(spec)
        self.theta0 = GlobalState.initial(spec)
        self._first: dict[str, tuple[Delta, Delta]] = {}  # epoch-0 Δs: the same θ_0 in every cell
        self._eval_model = build_model(spec)

    def _ctx(self, e: int, host: str, prev_seed: bytes) -> EpochContext:
        return EpochContext(self.run_id, e, host, prev_seed)

    def train(self, theta: GlobalState, e: int, host: str, prev_seed: bytes) -> tuple[Delta, Delta]:
        """An honest host's epoch: (float Δ, the Δ as served: quantized and dequantized)."""
        if e == 0 and host in self._first:
            return self._first[host]
        self.stepper.load(start_checkpoint(self.spec, theta.params, e).state)
        train_steps(self.stepper, self.dataset, self.spec, self._ctx(e, host, prev_seed),
                    range(self.spec.train.inner_steps), 1)
        delta = pseudo_gradient(theta.params, self.stepper.export().params)
        out = (delta, self.wire(delta))
        if e == 0:
            self._first[host] = out
        return out

    def wire(self, delta: Mapping[str, torch.Tensor]) -> Delta:
        q = self.spec.quantization
        return dequantize(quantize(delta, q), self.shapes, q)

    def run(self, byzantine: Mapping[str, str], verify: bool, epochs: int, seeds: Sequence[bytes],
            agg: AggregationSpec | None = None, params: AttackParams = AttackParams(),
            eval_windows: int = 1024) -> SimRun:
        """E epochs; ``byzantine`` maps a host to its attack (``alie``, ``ipm``, ``sign_flip``, ``scaled``)."""
        agg = agg or self.spec.aggregation
        spec = self.spec
        theta = self.theta0
        trained = 0
        history = []
        g = default_segment(spec)
        for e in range(epochs):
            prev_seed = genesis_seed(self.run_id) if e == 0 else seeds[e - 1]
            honest = {}
            for h in self.hosts:
                if h not in byzantine:
                    trained += e > 0 or h not in self._first
                    honest[h] = self.train(theta, e, h, prev_seed)[1]
            accepted = dict(honest)
            excluded, gaps = [], []
            targets: dict[str, Delta] = {}
            for h in sorted(byzantine):
                attack = byzantine[h]
                if attack in FORGED:
                    if verify:
                        excluded.append(h)
                        continue
                    trained += e > 0 or h not in self._first
                    own = self.train(theta, e, h, prev_seed)[0]
                    factor = -1.0 if attack == "sign_flip" else params.scale
                    accepted[h] = self.wire({n: factor * t for n, t in own.items()})
                    continue
                if attack not in targets:
                    strength = params.alie_z if attack == "alie" else params.ipm_eps
                    targets[attack] = target_delta(attack, honest, strength)
                target = targets[attack]
                if verify and caught(seeds[e], h, spec, [g]):
                    excluded.append(h)
                    continue
                if verify and params.steering == "exact":
                    trained += 1
                    leaves, gap = steer_epoch(spec, self.dataset, self._ctx(e, h, prev_seed), theta.params, target, g,
                                              stepper=self.stepper)
                    gaps.append(gap)
                    accepted[h] = self.wire(pseudo_gradient(theta.params, leaves[-1].state.params))
                else:
                    accepted[h] = self.wire(target)
            theta = outer_step(theta, aggregate(agg, accepted), spec.outer)
            history.append(SimEpoch(e, excluded, len(accepted), theta.hash().hex(), gaps))
        loss = validation_loss(self._eval_model, self.dataset, eval_windows, params=theta.params)
        return SimRun(loss, history, trained)


# --------------------------------------------------------------------------------------------------
# The grid of cells, run in worker processes


@dataclass(frozen=True)
class Cell:
    rule: str
    attack: str  # "none" (honest only), one of ATTACKS, or "excluded" (forged Δs with verification)
    byzantine: int
    verify: bool
    seed: int | None = None  # another train.seed: model init, data and epoch seeds (the noise estimate)

    def cost(self, hosts: int) -> int:
        if self.attack in ("none",) or (self.attack in FORGED and not self.verify):
            return hosts
        return hosts - self.byzantine + (self.byzantine if self.verify and self.attack in STEERED else 0)


def grid(rules: Sequence[str], attacks: Sequence[str], counts: Sequence[int],
         noise_seeds: Sequence[int] = ()) -> list[Cell]:
    cells = [Cell("mean", "none", 0, False, seed) for seed in noise_seeds]
    for rule in rules:
        cells.append(Cell(rule, "none", 0, False))
        for b in counts:
            for attack in attacks:
                cells.append(Cell(rule, attack, b, False))
                if attack in STEERED:
                    cells.append(Cell(rule, attack, b, True))
            if any(a in FORGED for a in attacks):
                cells.append(Cell(rule, "excluded", b, True))
    return cells


_WORKER: dict = {}


def _init_worker(config: dict) -> None:
    torch.set_num_threads(1)
    spec = bench_spec(config["preset"], config["inner_steps"], config["segment_steps"])
    dataset = Dataset.load(spec.data)
    hosts = host_addresses(config["hosts"])
    _WORKER.update(config=config, spec=spec, dataset=dataset, sims={None: Simulator(spec, dataset, hosts)}, hosts=hosts)


def run_cell(cell: Cell) -> dict:
    w = _WORKER
    cfg, spec, hosts = w["config"], w["spec"], w["hosts"]
    if cell.seed not in w["sims"]:
        w["sims"][cell.seed] = Simulator(spec.with_changes(train={"seed": cell.seed}), w["dataset"], hosts)
    sim = w["sims"][cell.seed]
    spec = sim.spec
    attack = "sign_flip" if cell.attack == "excluded" else cell.attack  # always excluded: any forged attack
    byz = {} if cell.attack == "none" else dict.fromkeys(hosts[:cell.byzantine], attack)
    agg = spec.aggregation.model_copy(update={"rule": cell.rule})
    t0, c0 = time.perf_counter(), time.process_time()
    seeds = bench_seeds(spec.run_id(), hosts, cfg["epochs"], cfg["salt"])
    result = sim.run(byz, cell.verify, cfg["epochs"], seeds, agg, AttackParams(**cfg["attack"]),
                          cfg["eval_windows"])
    gaps = [x for ep in result.epochs for x in ep.steer_gaps]
    return {"cell": asdict(cell), "val_loss": result.val_loss, "wall_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0,
            "trained_host_epochs": result.trained_host_epochs,
            "byzantine_accepted": (sum(ep.accepted for ep in result.epochs)
                                   - cfg["epochs"] * (cfg["hosts"] - cell.byzantine)),
            "excluded_per_epoch": [len(ep.excluded) for ep in result.epochs],
            "mean_steer_gap": statistics.fmean(gaps) if gaps else None,
            "final_hash": result.epochs[-1].model_hash}


# --------------------------------------------------------------------------------------------------
# Cost of each rule


def rule_costs(hosts: Sequence[int], reps: int, rules: Sequence[str]) -> list[dict]:
    """Seconds per :func:`aggregate` call for K demo-sized inputs, every rule in this one process."""
    shapes = parameter_shapes(preset("demo"))
    n_params = sum(int(torch.Size(s).numel()) for s in shapes.values())
    rows = []
    for k in hosts:
        gen = torch.Generator().manual_seed(k)
        deltas = {f"host-{i:03d}": {n: 1e-2 * torch.randn(tuple(s), generator=gen) for n, s in shapes.items()}
                  for i in range(k)}
        for rule in rules:
            spec = AggregationSpec.model_validate({"rule": rule})  # a name from the command line
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                aggregate(spec, deltas)
                times.append(time.perf_counter() - t0)
            rows.append({"hosts": k, "rule": rule, "params": n_params, "median_s": statistics.median(times),
                         "min_s": min(times)})
    return rows


# --------------------------------------------------------------------------------------------------
# Validation against the full protocol


def validate_against_network(spec: RunSpec, dataset: Dataset, epochs: int, root: Path,
                             eps: float = 0.5, z: float = 1.0) -> dict:
    """A LocalNetwork run (3 honest hosts, steering IPM and ALIE hosts, a sign flipper, 2 validators) and
    the simulation of the same epochs given the chain's seeds: excluded hosts and θ hashes must match."""
    # The network stack loads only for this validation, not in the simulation's worker processes.
    from bench.aggregation_attacks import Steered, make_patient  # noqa: PLC0415 (see above)
    from node.validator import ValidatorNode  # noqa: PLC0415 (see above)
    from trainer.behaviour import HostBehaviour  # noqa: PLC0415 (see above)
    from verifier.adversaries import SignFlipDelta  # noqa: PLC0415 (see above)
    from veriloco.network import LocalNetwork, Roster  # noqa: PLC0415 (see above)

    hosts = host_addresses(6)
    holder: dict = {}
    peers = {hosts[i]: (lambda i=i: holder["net"].resolve(f"http://host-{i}.sim")) for i in range(3)}
    ipm, alie = Steered("ipm", eps, peers=peers), Steered("alie", z, peers=peers)
    roster = Roster(hosts=[HostBehaviour(), HostBehaviour(), HostBehaviour(), ipm, alie, SignFlipDelta()],
                    validators=[None, None], host_stake=100 * int(spec.economics.min_host_stake))
    t0 = time.perf_counter()
    net = LocalNetwork(spec, root, roster, dataset, validator_factory=ValidatorNode)
    holder["net"] = net
    make_patient(net, 3)
    make_patient(net, 4)
    reports = [net.run_epoch() for _ in range(epochs)]
    network_s = time.perf_counter() - t0
    seeds = []
    for r in reports:
        assert r.seed is not None, f"epoch {r.epoch} closed without a seed"
        seeds.append(bytes.fromhex(r.seed))
    sim = Simulator(spec, dataset, hosts)
    t0 = time.perf_counter()
    run = sim.run({hosts[3]: "ipm", hosts[4]: "alie", hosts[5]: "sign_flip"}, True, epochs, seeds,
                  params=AttackParams(alie_z=z, ipm_eps=eps))
    sim_s = time.perf_counter() - t0
    rows = []
    for report, ep in zip(reports, run.epochs, strict=True):
        chain_excluded = sorted(h.address for h in report.hosts if h.outcome != "accepted")
        rows.append({"epoch": report.epoch, "chain_excluded": [hosts.index(a) for a in chain_excluded],
                     "sim_excluded": [hosts.index(a) for a in sorted(ep.excluded)],
                     "chain_hash": report.next_model_hash, "sim_hash": ep.model_hash, "agreed": report.agreed,
                     "chain_val_loss": min(h.proposal.val_loss_micro for h in report.hosts if h.proposal) / MICRO,
                     "steer_gap_ipm": ipm.gaps.get(report.epoch), "steer_gap_alie": alie.gaps.get(report.epoch),
                     "sim_steer_gaps": ep.steer_gaps})
    same = all(r["chain_excluded"] == r["sim_excluded"] and r["chain_hash"] == r["sim_hash"] for r in rows)
    return {"epochs": rows, "identical": same, "network_s": network_s, "sim_s": sim_s,
            "funds_conserved": net.total_funds() == net.initial_funds}


# --------------------------------------------------------------------------------------------------
# Tables


def _pct(b: int, k: int) -> str:
    return f"{100 * b / k:.1f}".rstrip("0").rstrip(".") + " %"


def loss_tables(results: list[dict], hosts: int, counts: Sequence[int], attacks: Sequence[str],
                rules: Sequence[str]) -> str:
    by = {(r["cell"]["rule"], r["cell"]["attack"], r["cell"]["byzantine"], r["cell"]["verify"]): r["val_loss"]
          for r in results if r["cell"]["seed"] is None}
    out = []
    for attack in attacks:
        head = ["rule", "0 % (honest)"]
        for b in counts:
            head += [f"{_pct(b, hosts)} off", f"{_pct(b, hosts)} on"]
        out.append(f"\n**{attack}** — final validation loss (nats/byte); off/on = verification\n")
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        for rule in rules:
            row = [rule, f"{by[(rule, 'none', 0, False)]:.4f}"]
            for b in counts:
                off = by.get((rule, attack, b, False))
                on = by.get((rule, "excluded" if attack in FORGED else attack, b, True))
                row += [f"{off:.4f}" if off is not None else "—", f"{on:.4f}" if on is not None else "—"]
            out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


def summary_table(results: list[dict], counts: Sequence[int], attacks: Sequence[str], rules: Sequence[str],
                  hosts: int) -> str:
    by = {(r["cell"]["rule"], r["cell"]["attack"], r["cell"]["byzantine"], r["cell"]["verify"]): r["val_loss"]
          for r in results if r["cell"]["seed"] is None}
    mean_honest = by.get(("mean", "none", 0, False))
    b25 = min(counts, key=lambda b: abs(b / hosts - 0.25))
    head = ["rule", "honest", "× mean honest", f"ALIE/IPM {_pct(b25, hosts)} on, worst", "× own honest",
            "worst with verification", "worst without verification"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rule in rules:
        honest = by[(rule, "none", 0, False)]
        steer = [by[(rule, a, b25, True)] for a in attacks if a in STEERED and (rule, a, b25, True) in by]
        on = [by[(rule, "excluded" if a in FORGED else a, b, True)] for a in attacks for b in counts
              if (rule, "excluded" if a in FORGED else a, b, True) in by]
        off = [by[(rule, a, b, False)] for a in attacks for b in counts if (rule, a, b, False) in by]
        row = [rule, f"{honest:.4f}", f"{honest / mean_honest:.3f}" if mean_honest else "—",
               f"{max(steer):.4f}" if steer else "—", f"{max(steer) / honest:.3f}" if steer else "—",
               f"{max(on):.4f}" if on else "—", f"{max(off):.4f}" if off else "—"]
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--inner-steps", type=int, default=16)
    parser.add_argument("--segment-steps", type=int, default=2)
    parser.add_argument("--hosts", type=int, default=8)
    parser.add_argument("--byzantine", default="1,2,3", help="Byzantine host counts")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--rules", default=",".join(RULE_ORDER))
    parser.add_argument("--attacks", default=",".join(ATTACKS))
    parser.add_argument("--alie-z", type=float, default=1.0)
    parser.add_argument("--ipm-eps", type=float, default=0.5)
    parser.add_argument("--scale", type=float, default=10.0)
    parser.add_argument("--steering", choices=("exact", "ideal"), default="exact")
    parser.add_argument("--eval-windows", type=int, default=1024)
    parser.add_argument("--salt", default="0", help="varies the epoch seeds (challenges and data)")
    parser.add_argument("--noise-seeds", default="1,2",
                        help="extra honest-only mean runs with other train.seed values (model init, data, epoch "
                             "seeds): the spread to read differences against")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--validate-epochs", type=int, default=4, help="0 skips the full-protocol validation")
    parser.add_argument("--cost-hosts", default="8,32")
    parser.add_argument("--cost-reps", type=int, default=3)
    parser.add_argument("--skip-grid", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    started = time.perf_counter()
    torch.set_num_threads(1)
    logging.getLogger("veriloco.verifier").setLevel(logging.ERROR)  # the validation's failed replays are expected
    rules = [r for r in args.rules.split(",") if r]
    attacks = [a for a in args.attacks.split(",") if a]
    counts = [int(b) for b in args.byzantine.split(",") if b]
    unknown = set(rules) - set(RULES) | set(attacks) - set(ATTACKS)
    if unknown:
        parser.error(f"unknown rules or attacks: {sorted(unknown)}")
    spec = bench_spec(args.preset, args.inner_steps, args.segment_steps)
    out: dict = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                 "spec_default_rule": spec.aggregation.rule, "torch": torch.__version__}

    def save() -> None:
        if args.json:
            args.json.write_text(json.dumps(out, indent=1))

    print(f"run spec: {args.preset}, H={spec.train.inner_steps}, c={spec.train.segment_steps}, "
          f"S={spec.train.segments}, k={spec.verification.challenges_k}, {spec.quantization.scheme} Δs, "
          f"outer lr {spec.outer.lr} momentum {spec.outer.momentum}; K={args.hosts}, E={args.epochs}", flush=True)

    if args.validate_epochs:
        dataset = Dataset.load(spec.data)
        with tempfile.TemporaryDirectory() as tmp:
            v = validate_against_network(spec, dataset, args.validate_epochs, Path(tmp), args.ipm_eps, args.alie_z)
        out["validation"] = v
        save()
        print("\n## Simulation vs full protocol (LocalNetwork on the embedded chain; hosts 0-2 honest, "
              "3 steered IPM, 4 steered ALIE, 5 sign flip)\n")
        print("| epoch | excluded on chain | excluded in simulation | θ hash on chain | θ hash in simulation | "
              "val loss (chain) | steering gap IPM / ALIE |")
        print("|---|---|---|---|---|---|---|")

        def gap(x: float | None) -> str:
            return f"{x:.3f}" if x is not None else "—"

        for r in v["epochs"]:
            print(f"| {r['epoch']} | {r['chain_excluded']} | {r['sim_excluded']} | {r['chain_hash'][:16]}… | "
                  f"{r['sim_hash'][:16]}… | {r['chain_val_loss']:.4f} | "
                  f"{gap(r['steer_gap_ipm'])} / {gap(r['steer_gap_alie'])} |")
        print(f"\nidentical: {v['identical']}; funds conserved: {v['funds_conserved']}; "
              f"network {v['network_s']:.0f} s, simulation {v['sim_s']:.0f} s", flush=True)

    cost_hosts = [int(k) for k in args.cost_hosts.split(",") if k]
    if cost_hosts:
        costs = rule_costs(cost_hosts, args.cost_reps, rules)
        out["costs"] = costs
        save()
        print(f"\n## Cost of each rule: one aggregate() of K demo-sized Δs ({costs[0]['params']:,} parameters), "
              f"median of {args.cost_reps}, 1 torch thread\n")
        print("| rule | " + " | ".join(f"K = {k}" for k in cost_hosts) + " |")
        print("|---|" + "---|" * len(cost_hosts))
        for rule in rules:
            row = [next(c for c in costs if c["rule"] == rule and c["hosts"] == k) for k in cost_hosts]
            print(f"| {rule} | " + " | ".join(f"{1000 * c['median_s']:.0f} ms" for c in row) + " |", flush=True)

    if not args.skip_grid:
        noise = [int(x) for x in args.noise_seeds.split(",") if x]
        cells = sorted(grid(rules, attacks, counts, noise), key=lambda c: -c.cost(args.hosts))
        config = {"preset": args.preset, "inner_steps": args.inner_steps, "segment_steps": args.segment_steps,
                  "hosts": args.hosts, "epochs": args.epochs, "salt": args.salt, "eval_windows": args.eval_windows,
                  "attack": asdict(AttackParams(args.alie_z, args.ipm_eps, args.scale, args.steering))}
        results = []
        t0 = time.perf_counter()
        print(f"\n{len(cells)} cells in {args.workers} worker processes", flush=True)
        with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn"), initializer=_init_worker,
                                 initargs=(config,)) as pool:
            futures = [pool.submit(run_cell, c) for c in cells]
            for i, fut in enumerate(as_completed(futures), 1):
                r = fut.result()
                results.append(r)
                c = r["cell"]
                seed = f" train.seed {c['seed']}" if c["seed"] is not None else ""
                print(f"[{i}/{len(cells)} {time.perf_counter() - t0:.0f} s] {c['rule']} {c['attack']} "
                      f"B={c['byzantine']} {'on' if c['verify'] else 'off'}{seed}: {r['val_loss']:.4f}", flush=True)
                out["cells"] = results
                save()
        print(f"\n## Final validation loss after {args.epochs} epochs, K = {args.hosts}\n")
        print(loss_tables(results, args.hosts, counts, attacks, rules))
        print("\n## Summary\n")
        print(summary_table(results, counts, attacks, rules, args.hosts))
        spread = [r["val_loss"] for r in results if r["cell"]["rule"] == "mean" and r["cell"]["attack"] == "none"]
        if len(spread) > 1:
            out["noise"] = {"mean_honest_losses": spread, "range": max(spread) - min(spread)}
            print(f"\nnoise: honest-only mean with {len(spread)} seeds: "
                  f"{', '.join(f'{x:.4f}' for x in spread)} (range {max(spread) - min(spread):.4f})")
        out["grid_wall_s"] = time.perf_counter() - t0
        out["grid_cpu_s"] = sum(r["cpu_s"] for r in results)
        print(f"\ngrid: {out['grid_wall_s']:.0f} s wall, {out['grid_cpu_s']:.0f} s of worker CPU time")
    out["wall_s"] = time.perf_counter() - started
    save()
    print(f"\ntotal {out['wall_s']:.0f} s", flush=True)


if __name__ == "__main__":
    main()
