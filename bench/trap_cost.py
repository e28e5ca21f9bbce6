"""What an honest host's trap costs in training quality (issue 27, ``trainer.trap``).

A short DiLoCo run of one host on the tiny preset (64 inner steps, 8 segments, the spec's outer
Nesterov step on its own Δ), trained three ways from the same θ_0 and the same batches:

* ``honest``: no trap;
* ``trapped``: a trap in *every* epoch (``trap_probability`` 1; the segment drawn from a fixed
  secret), five times the default rate of 0.2, so an upper bound on the default's cost;
* ``other batches``: no trap, but another host address, which draws other batches: the noise any
  host's Δ carries anyway, for scale.

Per epoch it prints the relative difference of the trapped and the other-batches Δ from the honest
Δ (‖Δ' − Δ‖ / ‖Δ‖, dequantized) and the validation loss of each θ_{e+1}.

Run::

    .venv/bin/python bench/trap_cost.py --epochs 4
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
from pathlib import Path

import torch

from protocol.rules.beacon import genesis_seed
from trainer.data import Dataset
from trainer.delta import dequantize
from trainer.determinism import configure
from trainer.evaluate import validation_loss
from trainer.inner import EpochContext, run_epoch
from trainer.model import build_model, parameter_shapes
from trainer.outer import GlobalState, outer_step
from trainer.presets import tiny
from trainer.trap import Traps, draw
from verifier.measure import EPSILON, param_floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=4)
    args = parser.parse_args()
    configure(1)
    spec = tiny()
    run_id = spec.run_id()
    floor = max(param_floor(spec.train, spec.train.segment_steps), EPSILON)
    shapes = parameter_shapes(spec)
    model = build_model(spec)
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Dataset.load(spec.data, Path(tmp) / "cache")
        runs = {"honest": "host-a", "trapped": "host-a", "other batches": "host-b"}
        states = {name: GlobalState.initial(spec) for name in runs}
        loss0 = validation_loss(model, dataset, spec.data.val_windows, params=states["honest"].params)
        print(f"tiny preset: S = {spec.train.segments}, tau {spec.verification.tau}, "
              f"trap window up to {spec.verification.trap_max_distance}; θ_0 loss {loss0:.5f}")
        for epoch in range(args.epochs):
            seed = genesis_seed(run_id) if epoch == 0 else hashlib.sha256(b"bench-seed" + bytes([epoch])).digest()
            deltas: dict[str, dict[str, torch.Tensor]] = {}
            trap = draw(b"bench-secret", run_id, epoch, spec.train.segments, 1.0, floor)
            for name, host in runs.items():
                ctx = EpochContext(run_id, epoch, host, seed)
                result = run_epoch(spec, dataset, ctx, states[name].params, Path(tmp) / name,
                                   traps=trap if name == "trapped" else Traps())
                assert result is not None
                deltas[name] = dequantize(result.payload, shapes, spec.quantization)
                states[name] = outer_step(states[name], deltas[name], spec.outer)
            base = torch.cat([t.flatten() for t in deltas["honest"].values()])
            diff = {n: float((torch.cat([t.flatten() for t in deltas[n].values()]) - base).norm() / base.norm())
                    for n in ("trapped", "other batches")}
            losses = {n: validation_loss(model, dataset, spec.data.val_windows, params=states[n].params) for n in runs}
            print(f"epoch {epoch} (trap on segment {trap.segments[0]}): ‖Δ' − Δ‖/‖Δ‖ trapped {diff['trapped']:.2e}, "
                  f"other batches {diff['other batches']:.2e}; loss honest {losses['honest']:.5f}, "
                  f"trapped {losses['trapped']:.5f} ({losses['trapped'] - losses['honest']:+.1e}), "
                  f"other batches {losses['other batches']:.5f} ({losses['other batches'] - losses['honest']:+.1e})")


if __name__ == "__main__":
    main()
