"""Forgeries within the tolerance: how far each can move the committed Δ while passing every replay,
and what that does to the agreed model over several epochs, under ``mean`` and the default rule.

The forgers (``verifier.adversaries.forgery``) train every step and then move each leaf as far as a
``fraction`` of every threshold allows, in a chosen direction; low-precision hosts compute some
steps of every segment in bfloat16 / float16. Everything goes through the real path: the host
behaviour commits its epoch to disk, :class:`trainer.artifacts.LocalArtifacts` serves it, and
:func:`verifier.replay.check_challenge` replays every segment (not just the challenged ones). The
replay a forger is measured against is exact (as every replay within its compute profile is), so it
gets the whole tolerance.

1. **Sizes** (θ_0 and θ after ``--warm-epochs`` honest epochs): for each forgery and fraction, whether
   every segment passed, ``‖Δ_forged‖ / ‖Δ_honest‖`` and ``‖Δ_forged − Δ_honest‖ / ‖Δ_honest‖``
   against the same host's honest epoch.
2. **Damage**: ``--hosts`` hosts of which one forges at the largest fraction (0.99) for
   ``--epochs`` epochs; θ moves by the run's outer step on the aggregate of the quantized Δs
   (``mean`` and ``centered_clip``). The validation loss after every epoch against the same run with
   the forger honest (same seeds, same data: the difference is the forgery's doing). The control
   run has host 0 honest at 2 threads (which computes bit for bit as at 1: its difference is 0).

With ``--inner muon`` the run trains Muon on the hidden matrices (``train.inner_optimizer``) and the
plan adds the Muon-momentum forgers (``muon_momentum``); ``--forgeries`` limits the plan to the named
families (e.g. ``poison,muon_momentum``).

Run: ``.venv/bin/python bench/verifier_forgery.py [--epochs 6] [--hosts 4] [--inner muon] [--json out.json]``
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import logging
import tempfile
import time
from pathlib import Path

from protocol.keys import encode_address
from protocol.rules.spec import RunSpec
from protocol.tensors.aggregation import aggregate
from protocol.views import Challenge
from trainer.artifacts import LocalArtifacts
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.delta import dequantize
from trainer.determinism import configure
from trainer.evaluate import validation_loss
from trainer.inner import EpochContext
from trainer.model import build_model, parameter_shapes
from trainer.outer import GlobalState, outer_step
from trainer.presets import tiny
from trainer.step import Stepper
from verifier.adversaries import make_adversary
from verifier.adversaries.forgery import delta_ratio
from verifier.replay import check_challenge

VALIDATOR = encode_address(bytes([250] * 20))
POISON = [f"poison:{d}" for d in ("undo", "amplify", "random", "ascent", "target")]
MOMENTS = [f"moments:{k}" for k in ("v_down", "v_down_top", "m_along", "m_against", "m_untouched")]
MUON = [f"muon_momentum:{k}" for k in ("along", "against", "ascent", "random")]
FRACTIONS = (0.5, 0.9, 0.99)
CONTROL = "control: honest at 2 threads"


class OtherThreads(HostBehaviour):
    """The control: an honest host that trains at 2 threads (everyone else at 1). Its Δ differs from
    the 1-thread one by rounding noise only, so the damage it does is the noise floor of the
    damage measure (training amplifies any difference)."""

    def train_epoch(self, spec, dataset, ctx, start_params, root, on_step=None):
        configure(2)
        try:
            return super().train_epoch(spec, dataset, ctx, start_params, root, on_step)
        finally:
            configure(1)


def make(text: str, fraction: float | None = None) -> HostBehaviour:
    return make_adversary(text if fraction is None else f"{text},{fraction}")


def address(i: int) -> str:
    return encode_address(i.to_bytes(20, "big"))


def prev_seed(e: int) -> bytes:
    return bytes([e % 256, 7]) * 16


def run_host(spec: RunSpec, dataset: Dataset, behaviour: HostBehaviour, host: str, e: int,
             theta: GlobalState, root: Path, check: bool, stepper: Stepper) -> tuple[dict, list[str]]:
    """One host's epoch: its dequantized Δ and (``check``) the outcome of every segment's replay."""
    ctx = EpochContext(spec.run_id(), e, host, prev_seed(e))
    result = behaviour.train_epoch(spec, dataset, ctx, theta.params, root)
    outcomes = []
    if check:
        source = LocalArtifacts(root, spec.run_id(), host)
        for g in range(spec.train.segments):
            report = check_challenge(spec, dataset, Challenge.of(result.commitment, host, g, "local", [VALIDATOR]),
                                     source, theta, ctx.prev_epoch_seed, stepper=stepper)
            outcomes.append(report.outcome if report.outcome == "pass" else f"{report.outcome}:{report.check}")
    return dequantize(result.payload, parameter_shapes(spec), spec.quantization), outcomes


def warm_theta(spec: RunSpec, dataset: Dataset, epochs: int, hosts: int, root: Path) -> GlobalState:
    theta = GlobalState.initial(spec)
    stepper = Stepper(spec)
    for e in range(epochs):
        deltas = {address(i): run_host(spec, dataset, HostBehaviour(), address(i), e, theta, root / f"w{e}-{i}",
                                       False, stepper)[0] for i in range(hosts)}
        theta = outer_step(theta, aggregate(spec.aggregation, deltas), spec.outer)
    return theta


def sizes(spec: RunSpec, dataset: Dataset, theta: GlobalState, stage: str, root: Path,
          forgeries: list[str], fractions: tuple[float, ...] = FRACTIONS) -> list[dict]:
    stepper = Stepper(spec)
    host, e = address(1), 50
    honest, outcomes = run_host(spec, dataset, HostBehaviour(), host, e, theta, root / "honest", True, stepper)
    assert all(o == "pass" for o in outcomes), outcomes
    c = spec.train.segment_steps
    plan: list[tuple[str, float | None]] = [(t, f) for t in forgeries for f in fractions]
    if any(t.startswith("low_precision") for t in forgeries):
        plan = [p for p in plan if not p[0].startswith("low_precision")]
        plan += [(f"low_precision:{d},{n},last", None) for d in ("bfloat16", "float16")
                 for n in sorted({1, 2, c // 2, c})]
        plan += [(f"low_precision:{d},1,first", None) for d in ("bfloat16", "float16")]
    rows = []
    for text, fraction in plan:
        t0 = time.perf_counter()
        forged, outcomes = run_host(spec, dataset, make(text, fraction), host, e, theta,
                                    root / f"{text}-{fraction}".replace(":", "_"), True, stepper)
        row = {"stage": stage, "forgery": text, "fraction": fraction, "passed": sum(o == "pass" for o in outcomes),
               "segments": len(outcomes), "verdicts": sorted(set(outcomes)), **delta_ratio(honest, forged),
               "seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def damage(spec: RunSpec, dataset: Dataset, forgery: str | None, rule: str, hosts: int, epochs: int,
           root: Path) -> dict:
    """Validation loss per epoch with host 0 forging (``None``: everyone honest)."""
    spec = spec.with_changes(aggregation={"rule": rule})
    theta = GlobalState.initial(spec)
    stepper = Stepper(spec)
    model = build_model(spec)
    losses, passed = [], True
    forger = (OtherThreads() if forgery == CONTROL else make(forgery, 0.99)) if forgery else HostBehaviour()
    for e in range(epochs):
        deltas = {}
        for i in range(hosts):
            behaviour = forger if i == 0 else HostBehaviour()
            delta, outcomes = run_host(spec, dataset, behaviour, address(i), e, theta, root / f"{e}-{i}",
                                       i == 0 and forgery not in (None, CONTROL), stepper)
            passed &= all(o == "pass" for o in outcomes)
            deltas[address(i)] = delta
        theta = outer_step(theta, aggregate(spec.aggregation, deltas), spec.outer)
        losses.append(validation_loss(model, dataset, params=theta.params))
    return {"forgery": forgery or "none (all honest)", "rule": rule, "val_loss": losses, "passed_every_replay": passed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6, help="epochs of the damage runs")
    parser.add_argument("--hosts", type=int, default=4, help="hosts (one of them forges)")
    parser.add_argument("--warm-epochs", type=int, default=4, help="honest epochs before the second size stage")
    parser.add_argument("--only", default="", help="comma-separated parts: sizes, damage, control")
    parser.add_argument("--fractions", default=",".join(map(str, FRACTIONS)),
                        help="comma-separated shares of every threshold the size stage forges at")
    parser.add_argument("--inner", default="adamw", choices=("adamw", "muon"), help="the inner optimizer")
    parser.add_argument("--forgeries", default="",
                        help="comma-separated families to run (poison, moments, muon_momentum, low_precision); "
                             "default: all that apply")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    logging.getLogger("veriloco.verifier").setLevel(logging.ERROR)
    configure(1)
    spec = tiny().with_changes(train={"inner_optimizer": args.inner})
    dataset = Dataset.load(spec.data)
    families = args.forgeries.split(",") if args.forgeries else (
        ["poison", "moments", "low_precision"] + ["muon_momentum"] * (args.inner == "muon"))
    forgeries = [t for t in POISON + MOMENTS + MUON + ["low_precision"] if t.split(":")[0] in families]
    parts = set(args.only.split(",")) if args.only else {"sizes", "damage", "control"}
    fractions = tuple(float(f) for f in args.fractions.split(","))
    out: dict = {"spec": {"preset": "tiny", "inner": args.inner, "H": spec.train.inner_steps,
                          "c": spec.train.segment_steps,
                          "tau": str(spec.verification.tau),
                          "moment_tolerance": str(spec.verification.moment_tolerance),
                          "hosts": args.hosts, "epochs": args.epochs}}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="veriloco-forgery-") as tmp:
        root = Path(tmp)
        if "sizes" in parts:
            out["sizes"] = sizes(spec, dataset, GlobalState.initial(spec), "θ_0", root / "s0", forgeries, fractions)
            trained = warm_theta(spec, dataset, args.warm_epochs, args.hosts, root / "warm")
            out["sizes"] += sizes(spec, dataset, trained, f"after {args.warm_epochs} epochs", root / "s1",
                                  forgeries, fractions)
        if parts & {"damage", "control"}:
            runs = []
            for rule in ("mean", "centered_clip"):
                base = damage(spec, dataset, None, rule, args.hosts, args.epochs, root / f"d-{rule}-base")
                print(json.dumps(base), flush=True)
                runs.append(base)
                steering = [t for t in forgeries if not t.startswith("low_precision")]
                plan = [CONTROL] * ("control" in parts) + steering * ("damage" in parts)
                for forgery in plan:
                    run = damage(spec, dataset, forgery, rule, args.hosts, args.epochs,
                                 root / f"d-{rule}-{forgery}".replace(":", "_"))
                    run["damage"] = [a - b for a, b in zip(run["val_loss"], base["val_loss"], strict=True)]
                    run["damage_per_epoch"] = run["damage"][-1] / args.epochs
                    print(json.dumps(run), flush=True)
                    runs.append(run)
            out["damage"] = runs
    out["seconds"] = round(time.perf_counter() - t0, 1)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
