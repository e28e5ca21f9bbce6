"""How much the validation loss of the end-to-end networks varies with the beacon draw.

Epoch 0 trains on batches drawn from the genesis seed; every later epoch's batches come from the
previous epoch's beacon seed, which the participants' fresh random secrets decide. So θ_1 is the
same in every run and θ_2, θ_3 vary. This runs the networks of the end-to-end tests several times
(fresh secrets each time) and reports, per epoch, the validation loss each host proposes
(``val_loss_micro`` / 1e6, the best of the hosts' proposals as the tests read it), and the drop
below θ_0's loss, which does not depend on any draw. The margins of the tests' loss assertions come
from these figures (``tests/e2e/test_host_network.py``, ``tests/e2e/test_devnet_network.py``).

* ``host``: ``test_host_network``'s network, 3 honest hosts, verification off, 16 steps of batch 8.
* ``devnet``: ``test_devnet_network``'s run spec (the tiny preset: 64 steps of batch 16) with its
  roster, 3 honest hosts, one ``noise`` cheater and 2 validators, on the embedded chain in one
  process instead of 6 processes on a devnet: the same nodes, so the same losses. That test's
  participants have fresh random keys (``veriloco keys add``), and a host's address picks its
  batches too, so there θ_1 varies as well: ``--fresh-keys`` gives every run new keys.

Run::

    .venv/bin/python bench/e2e_loss_spread.py host --runs 10
    .venv/bin/python bench/e2e_loss_spread.py devnet --runs 6 --fresh-keys
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from node.validator import ValidatorNode
from protocol.injective import ONE_INJ
from protocol.keys import PrivateKey
from protocol.rules.spec import RunSpec
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.evaluate import validation_loss
from trainer.model import build_model
from trainer.outer import GlobalState
from trainer.presets import tiny
from veriloco import network
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.network import LocalNetwork, Roster

EPOCHS = 3


def host_network() -> tuple[RunSpec, Roster]:
    spec = tiny("unverified").with_changes(
        train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8},
        verification={"enabled": False},
        phases={"min_hosts": 2, "min_validators": 0},
    )
    return spec, Roster(hosts=[HostBehaviour() for _ in range(3)])


def devnet_network() -> tuple[RunSpec, Roster]:
    spec = tiny("e2e").with_changes(
        phases={"join_blocks": 300, "train_blocks": 3000, "reveal_blocks": 300, "verify_blocks": 3000,
                "propose_blocks": 3000, "min_hosts": 4, "min_validators": 2})
    # The test's stakes: 40 INJ keeps the cheater above the 10 INJ minimum through 3 epochs of
    # 50 % slashes (min_hosts = 4 would otherwise hold epoch 2 in join).
    roster = Roster(hosts=[host_behaviour(None) for _ in range(3)] + [host_behaviour("noise")],
                    validators=[validator_behaviour("honest") for _ in range(2)],
                    host_stake=40 * ONE_INJ, validator_stake=10 * ONE_INJ, reward_pool=10 * ONE_INJ)
    return spec, roster


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("network", choices=["host", "devnet"])
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--fresh-keys", action="store_true", help="new participant keys in every run")
    args = parser.parse_args()
    configure(1)  # the nodes of the tests run one thread each
    spec, _ = host_network() if args.network == "host" else devnet_network()
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Dataset.load(spec.data, Path(tmp) / "cache")
        theta0 = validation_loss(build_model(spec), dataset, params=GlobalState.initial(spec).params)
        print(f"theta_0 validation loss {theta0:.4f}")
        losses: list[list[float]] = []
        for run in range(args.runs):
            spec, roster = host_network() if args.network == "host" else devnet_network()
            if args.fresh_keys:  # LocalNetwork derives its keys by name; a fresh salt per run
                salt = os.urandom(8).hex()

                def salted_key(name: str, salt: str = salt) -> PrivateKey:
                    return PrivateKey(hashlib.sha256(f"{salt}:{name}".encode()).digest())
                network.sim_key = salted_key
            net = LocalNetwork(spec, Path(tmp) / f"run-{run}", roster, dataset, validator_factory=ValidatorNode)
            reports = [net.run_epoch() for _ in range(EPOCHS)]
            row = [min(h.proposal.val_loss_micro for h in r.hosts if h.proposal) / 1e6 for r in reports]
            losses.append(row)
            print(f"run {run}: " + "  ".join(f"θ_{e + 1} {v:.4f}" for e, v in enumerate(row)), flush=True)
    summary: dict[str, Any] = {}
    for e in range(EPOCHS):
        col = [row[e] for row in losses]
        drops = [theta0 - v for v in col]
        summary[f"theta_{e + 1}"] = {"min": min(col), "max": max(col), "mean": statistics.mean(col),
                                     "stdev": statistics.pstdev(col), "min_drop_below_theta_0": min(drops)}
    summary["last_below_first"] = sum(row[-1] < row[0] for row in losses)
    print(json.dumps({"network": args.network, "runs": args.runs, "theta_0": theta0, **summary}, indent=2))


if __name__ == "__main__":
    main()
