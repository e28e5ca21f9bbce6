"""Honest Muon against its update bounds: how much of the per-coordinate and of the spectral bound an
honest Muon host uses, per segment, over the first S − 1 segments and over the whole epoch.

For every matrix Muon steps (``trainer.step.uses_muon``), the change ``θ_end − (1 − λ)ˢ θ_start``
over ``s`` steps against :func:`verifier.measure.muon_update_limit`: its largest coordinate and its
spectral norm (:func:`verifier.measure.muon_spectral_excess`). The largest over the matrices is
reported. Two epochs from θ_0 per preset (the second from the first's end), one host, 1 thread.

Run: ``.venv/bin/python bench/muon_bounds.py [--presets tiny,demo] [--epochs 2]``
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
from collections.abc import Mapping

import torch

from protocol.rules.spec import TrainSpec
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.inner import EpochContext, run_segment, start_checkpoint
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.step import Stepper, decays, uses_muon
from verifier.measure import muon_spectral_excess, muon_update_limit


def ratios(train: TrainSpec, start: Mapping[str, torch.Tensor], end: Mapping[str, torch.Tensor],
           steps: int) -> dict[str, float]:
    """The largest spectral and per-coordinate share of the Muon bound over the Muon matrices."""
    decay = 1.0 - float(train.lr) * float(train.weight_decay)
    spectral = coordinate = 0.0
    for name, s in start.items():
        if not uses_muon(name, s, train):
            continue
        moved = end[name].double() - (decay ** steps if decays(s) else 1.0) * s.double()
        limit = muon_update_limit(train, s.shape, steps)
        spectral = max(spectral, muon_spectral_excess(moved, limit))
        coordinate = max(coordinate, float(moved.abs().max()) / limit)
    return {"spectral": round(spectral, 3), "coordinate": round(coordinate, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,demo")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    configure(1)
    for name in args.presets.split(","):
        spec = preset(name).with_changes(train={"inner_optimizer": "muon"})
        dataset, train = Dataset.load(spec.data), spec.train
        theta = GlobalState.initial(spec).params
        c, stepper = train.segment_steps, Stepper(spec)
        for e in range(args.epochs):
            ctx = EpochContext(spec.run_id(), e, "host", bytes([e, 7]) * 16)
            leaves = [start_checkpoint(spec, theta, e)]
            for _ in range(train.segments):
                stepper.load(leaves[-1].state)
                leaves.append(run_segment(stepper, dataset, spec, ctx, 1))
            params = [leaf.state.params for leaf in leaves]
            row = {"preset": name, "epoch": e,
                   "segments": [ratios(train, params[g], params[g + 1], c) for g in range(train.segments)],
                   "first_S-1": ratios(train, params[0], params[-2], (train.segments - 1) * c),
                   "epoch_total": ratios(train, params[0], params[-1], train.inner_steps)}
            print(json.dumps(row), flush=True)
            theta = params[-1]


if __name__ == "__main__":
    main()
