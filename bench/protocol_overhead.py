"""Host-side protocol overhead: a host's wall time per epoch in veriloco vs the same training as plain DiLoCo.

Plain DiLoCo here is exactly the work a DiLoCo worker does: ``H`` inner steps of the trainer's one
step function on the same batches from θ_e, then Δ = θ_e − θ_H, the mean over workers and the outer
Nesterov step. The veriloco host does the same training plus everything the protocol adds:
checkpoints every ``c`` steps (safetensors, fsync), leaf hashes and the Merkle root, quantizing and
hashing Δ, the loss digest, beacon secrets, transactions on the embedded chain (join, commit,
reveal, propose), serving its artifacts to validators, fetching and checking every accepted Δ,
robust aggregation, the validation loss it posts with its proposal. Validators run on other
machines in a real network, so their time is excluded from the host's and reported separately as
a fraction of the hosts' compute.

The two are measured side by side, epoch by epoch (plain epoch, then protocol epoch), so the noise
of this shared machine lands on both. Run:

    .venv/bin/python bench/protocol_overhead.py --preset demo --hosts 4 --validators 2 --epochs 3
    .venv/bin/python bench/protocol_overhead.py --preset demo --inner-steps 500 --segment-steps 50 --epochs 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

from node.validator import ValidatorNode
from protocol.rules.beacon import genesis_seed
from protocol.tensors.aggregation import aggregate
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.delta import pseudo_gradient
from trainer.determinism import configure
from trainer.outer import GlobalState, outer_step
from trainer.presets import preset
from trainer.step import Stepper, TrainState, epoch_rng_key
from verifier.adversaries import ValidatorBehaviour
from veriloco.network import LocalNetwork, Roster, sim_key


def plain_epoch(spec, dataset, theta: GlobalState, hosts: list[str], epoch: int, prev_seed: bytes,
                stepper: Stepper) -> tuple[GlobalState, list[float]]:
    """One DiLoCo outer step with no protocol: each worker's H steps, then mean and outer step."""
    run_id = spec.run_id()
    deltas, seconds = {}, []
    for host in hosts:
        t0 = time.perf_counter()
        stepper.load(TrainState.fresh(dict(theta.params), epoch_rng_key(spec.train.seed, epoch)))
        for t in range(spec.train.inner_steps):
            x, y = dataset.batch(run_id, prev_seed, host, t, spec.train.batch_size)
            stepper.step(x, y)
        deltas[host] = pseudo_gradient(theta.params, stepper.export().params)
        seconds.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    new = outer_step(theta, aggregate(spec.aggregation, deltas), spec.outer)
    shared = time.perf_counter() - t0  # every worker does this once
    return new, [s + shared for s in seconds]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--validators", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--inner-steps", type=int, help="H (default: the preset's)")
    parser.add_argument("--segment-steps", type=int, help="c (default: the preset's)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    configure(args.threads)

    spec = preset(args.preset).with_changes(phases={"min_hosts": args.hosts, "min_validators": 1})
    if args.inner_steps or args.segment_steps:  # longer epochs amortize the protocol's per-epoch costs
        h = args.inner_steps or spec.train.inner_steps
        segment_steps = args.segment_steps or h // spec.train.segments
        spec = spec.with_changes(train={"inner_steps": h, "segment_steps": segment_steps})
    dataset = Dataset.load(spec.data)
    busy: dict[str, float] = defaultdict(float)

    def timed(node):
        tick = node.tick

        def wrapper() -> bool:
            t0 = time.perf_counter()
            try:
                return tick()
            finally:
                busy[node.name] += time.perf_counter() - t0

        node.tick = wrapper
        return node

    with tempfile.TemporaryDirectory() as tmp:
        roster = Roster(hosts=[HostBehaviour() for _ in range(args.hosts)],
                        validators=[ValidatorBehaviour() for _ in range(args.validators)])
        net = LocalNetwork(spec, Path(tmp), roster, dataset, validator_factory=ValidatorNode)
        for node in net.nodes:
            timed(node)
        plain_theta = GlobalState.initial(spec)
        plain_hosts = [sim_key(f"host-{i}").address() for i in range(args.hosts)]
        stepper = Stepper(spec)
        rows = []
        for e in range(args.epochs):
            prev = genesis_seed(spec.run_id()) if e == 0 else bytes.fromhex(net.ledger.epoch().prev_seed)
            plain_theta, plain_s = plain_epoch(spec, dataset, plain_theta, plain_hosts, e, prev, stepper)
            busy.clear()
            t0 = time.perf_counter()
            report = net.run_epoch()
            wall = time.perf_counter() - t0
            host_s = [busy[h.name] for h in net.hosts]
            val_s = [busy[v.name] for v in net.validators]
            rows.append({"epoch": e, "plain_host_s": statistics.mean(plain_s),
                         "protocol_host_s": statistics.mean(host_s),
                         "ratio": statistics.mean(host_s) / statistics.mean(plain_s),
                         "validators_s": sum(val_s), "hosts_s": sum(host_s),
                         "validator_fraction": sum(val_s) / sum(host_s), "network_wall_s": wall,
                         "agreed": report.agreed})
            print(json.dumps(rows[-1]))
    ratio = statistics.median(r["ratio"] for r in rows)
    frac = statistics.median(r["validator_fraction"] for r in rows)
    s = spec.train
    print(f"\npreset {args.preset}: H={s.inner_steps}, c={s.segment_steps} (S={s.segments}), "
          f"k={spec.verification.challenges_k}, r={spec.verification.validators_r}, {args.hosts} hosts, "
          f"{args.validators} validators, {args.epochs} epochs, {torch.get_num_threads()} threads")
    print(f"host wall time per epoch, protocol / plain DiLoCo: median {ratio:.3f}× "
          f"(per epoch: {', '.join(format(r['ratio'], '.3f') for r in rows)})")
    print(f"validators' compute / hosts' compute: median {frac:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "rows": rows,
                                         "median_ratio": ratio, "median_validator_fraction": frac}, indent=1))


if __name__ == "__main__":
    main()
