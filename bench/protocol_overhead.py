"""Host-side protocol overhead: a host's wall time per epoch in veriloco vs the same training as plain DiLoCo.

Plain DiLoCo here is exactly the work a DiLoCo worker does: ``H`` inner steps of the trainer's one
step function on the same batches from θ_e, then Δ = θ_e − θ_H, the mean over workers and the outer
Nesterov step. The veriloco host does the same training plus everything the protocol adds:
checkpoints every ``c`` steps (safetensors, fsync), leaf hashes and the Merkle root, quantizing and
hashing Δ, the loss digest, beacon secrets, transactions on the embedded chain (join, commit,
reveal, propose), serving its artifacts to validators, fetching and checking every accepted Δ,
robust aggregation, the validation loss it posts with its proposal. Validators run on other
machines in a real network, so their time is excluded from the host's and reported separately as
a fraction of the hosts' compute, split into what goes where: the segment replays
(``verifier.replay.replay_segment``), the probe (``trainer.probe``'s losses on the beacon windows)
the embedded chain's own execution of the validators' transactions and queries (in this one-process
network it runs inside their ticks; on a real network the chain's nodes run it, and a validator only
signs and sends), and the rest (fetching, hashing and decoding leaves, the bounds, the Δ check,
building and signing transactions).

The two are measured side by side, epoch by epoch (plain epoch first in even epochs, protocol epoch
first in odd ones), so the noise and drift of this shared machine land on both. Run:

    .venv/bin/python bench/protocol_overhead.py --preset demo --hosts 4 --validators 2 --epochs 3
    .venv/bin/python bench/protocol_overhead.py --preset demo --inner-steps 500 --segment-steps 50 --epochs 2
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP: no spinning on a busy machine

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import node.validator as validator_module
import verifier.replay
from chain.embedded import EmbeddedChain
from node.validator import ValidatorNode
from protocol.rules.beacon import genesis_seed
from protocol.tensors.aggregation import aggregate
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.delta import pseudo_gradient
from trainer.determinism import configure
from trainer.epoch_store import EpochStore
from trainer.outer import GlobalState, outer_step
from trainer.presets import preset
from trainer.step import Stepper, TrainState, epoch_rng_key
from verifier.adversaries import ValidatorBehaviour
from veriloco.network import LocalNetwork, Roster, sim_key


def plain_epoch(spec, dataset, theta: GlobalState, hosts: list[str], epoch: int, prev_seed: bytes,
                stepper: Stepper, cpu: list[float] | None = None) -> tuple[GlobalState, list[float]]:
    """One DiLoCo outer step with no protocol: each worker's H steps, then mean and outer step
    (``cpu`` receives each worker's process CPU seconds)."""
    run_id = spec.run_id()
    deltas, seconds = {}, []
    for host in hosts:
        t0, c0 = time.perf_counter(), time.process_time()
        stepper.load(TrainState.fresh(dict(theta.params), epoch_rng_key(spec.train.seed, epoch)))
        for t in range(spec.train.inner_steps):
            x, y = dataset.batch(run_id, prev_seed, host, t, spec.train.batch_size)
            stepper.step(x, y)
        deltas[host] = pseudo_gradient(theta.params, stepper.export().params)
        seconds.append(time.perf_counter() - t0)
        if cpu is not None:
            cpu.append(time.process_time() - c0)
    t0 = time.perf_counter()
    new = outer_step(theta, aggregate(spec.aggregation, deltas), spec.outer)
    shared = time.perf_counter() - t0  # every worker does this once
    return new, [s + shared for s in seconds]


def count_cpu(module: Any, name: str, into: dict[str, float], key: str,
              only: Callable[[], bool] = lambda: True) -> None:
    """Wrap ``module.name`` so the process CPU seconds (and calls) it takes add up in ``into[key]``
    (when ``only()`` says so at the call: whose tick it runs in)."""
    inner = getattr(module, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        if not only():
            return inner(*args, **kwargs)
        c0 = time.process_time()
        try:
            return inner(*args, **kwargs)
        finally:
            into[key] += time.process_time() - c0
            into[f"{key}_calls"] += 1

    setattr(module, name, counted)


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def live_every(store: EpochStore, epoch: int, k: int) -> int:
    """The interval a host stored ``epoch`` at while it was open (its progress header), else ``k``."""
    header, _ = store.read_progress(epoch)
    return header.full_leaf_every if header is not None else k


def _trained_bytes(store: EpochStore, spec, epoch: int, k: int) -> int:
    """A host's epoch directory as training left it: without the leaves recomputed for validators."""
    k = live_every(store, epoch, k)
    total = 0
    for path in store.directory(epoch).iterdir():
        if path.name.startswith("leaf-") and not EpochStore.stored(spec, int(path.name[5:9]), k):
            continue
        total += path.stat().st_size
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="demo")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--validators", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--inner-steps", type=int, help="H (default: the preset's)")
    parser.add_argument("--segment-steps", type=int, help="c (default: the preset's)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--full-leaf-every", type=int, default=4, help="K: hosts store every K-th leaf in full")
    parser.add_argument("--live-leaf-every", default="auto",
                        help="how densely hosts store an epoch still open: auto (the free disk's choice) "
                             "or a divisor of K")
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
    cpu: dict[str, float] = defaultdict(float)  # process CPU time: every thread (torch's, the leaf writer)

    acting: list[str] = []  # the node whose tick runs now (ticks run one at a time, on this thread)

    def timed(node):
        tick = node.tick

        def wrapper() -> bool:
            t0, c0 = time.perf_counter(), time.process_time()
            acting.append(node.name)
            try:
                return tick()
            finally:
                acting.pop()
                busy[node.name] += time.perf_counter() - t0
                cpu[node.name] += time.process_time() - c0

        node.tick = wrapper
        return node

    # Where the validators' CPU goes (the recomputation of a host's leaves calls trainer.inner's
    # replay, not verifier.replay's, so it is not counted here).
    parts: dict[str, float] = defaultdict(float)
    count_cpu(verifier.replay, "replay_segment", parts, "replay")
    for fn in ("probe_loss", "probe_gain"):
        count_cpu(validator_module, fn, parts, "probe")
    validator_names: set[str] = set()
    for fn in ("execute", "query"):  # the contract's wasm, run for a validator's tick
        count_cpu(EmbeddedChain, fn, parts, "chain", lambda: bool(acting) and acting[-1] in validator_names)
    with tempfile.TemporaryDirectory() as tmp:
        roster = Roster(hosts=[HostBehaviour() for _ in range(args.hosts)],
                        validators=[ValidatorBehaviour() for _ in range(args.validators)])
        net = LocalNetwork(spec, Path(tmp), roster, dataset, validator_factory=ValidatorNode,
                           full_leaf_every=args.full_leaf_every,
                           live_leaf_every=None if args.live_leaf_every == "auto" else int(args.live_leaf_every))
        for node in net.nodes:
            timed(node)
        validator_names.update(v.name for v in net.validators)
        plain_theta = GlobalState.initial(spec)
        plain_hosts = [sim_key(f"host-{i}").address() for i in range(args.hosts)]
        stepper = Stepper(spec)
        rows: list[dict[str, Any]] = []  # one per epoch (JSON)
        for e in range(args.epochs):
            prev = genesis_seed(spec.run_id()) if e == 0 else bytes.fromhex(net.ledger.epoch().prev_seed)
            plain_cpu: list[float] = []
            plain_s: list[float] = []

            def plain(e=e, prev=prev, plain_cpu=plain_cpu, plain_s=plain_s) -> None:
                nonlocal plain_theta
                plain_theta, seconds = plain_epoch(spec, dataset, plain_theta, plain_hosts, e, prev, stepper,
                                                   plain_cpu)
                plain_s.extend(seconds)

            # Plain first in even epochs, after the protocol's in odd ones: a drift of the machine's
            # speed over the run lands on both sides.
            if e % 2 == 0:
                plain()
            busy.clear()
            cpu.clear()
            parts.clear()
            recomputed = [h.recomputer.stats.seconds for h in net.hosts]
            recomputed_cpu = [h.recomputer.stats.cpu_seconds for h in net.hosts]
            t0 = time.perf_counter()
            report = net.run_epoch()
            wall = time.perf_counter() - t0
            if e % 2 == 1:
                plain()
            # A host recomputes the leaves it did not store while a validator reads them (in this
            # one-process network, inside the validator's tick): that time is the host's.
            extra = [h.recomputer.stats.seconds - r for h, r in zip(net.hosts, recomputed, strict=True)]
            host_s = [busy[h.name] + x for h, x in zip(net.hosts, extra, strict=True)]
            val_s = [busy[v.name] for v in net.validators]
            val_s[0] -= sum(extra)  # which validator's tick it fell in does not matter for the sum
            cpu_extra = [h.recomputer.stats.cpu_seconds - r for h, r in zip(net.hosts, recomputed_cpu, strict=True)]
            val_cpu = sum(cpu[v.name] for v in net.validators) - sum(cpu_extra)
            snaps = [h.behaviour.snapshot for h in net.hosts]
            host_cpu = [cpu[h.name] + x for h, x in zip(net.hosts, cpu_extra, strict=True)]
            rows.append({"epoch": e, "plain_host_cpu_s": statistics.mean(plain_cpu),
                         "protocol_host_cpu_s": statistics.mean(host_cpu),
                         "cpu_ratio": statistics.mean(host_cpu) / statistics.mean(plain_cpu),
                         "plain_host_s": statistics.mean(plain_s),
                         "protocol_host_s": statistics.mean(host_s),
                         "ratio": statistics.mean(host_s) / statistics.mean(plain_s),
                         "validators_s": sum(val_s), "hosts_s": sum(host_s),
                         "validator_fraction": sum(val_s) / sum(host_s), "network_wall_s": wall,
                         "validator_cpu_fraction": val_cpu / sum(host_cpu),
                         "validator_replay_cpu_fraction": parts["replay"] / sum(host_cpu),
                         "validator_probe_cpu_fraction": parts["probe"] / sum(host_cpu),
                         "validator_chain_cpu_fraction": parts["chain"] / sum(host_cpu),
                         "validator_rest_cpu_fraction": (val_cpu - parts["replay"] - parts["probe"] - parts["chain"])
                         / sum(host_cpu),
                         "chain_calls": parts["chain_calls"],
                         "replays": parts["replay_calls"], "probe_calls": parts["probe_calls"],
                         "agreed": report.agreed, "recompute_s": sum(extra), "recompute_cpu_s": sum(cpu_extra),
                         "live_leaf_every": live_every(net.hosts[0].epochs, e, args.full_leaf_every),
                         "storage_after_training_bytes": statistics.mean(
                             _trained_bytes(h.epochs, spec, e, args.full_leaf_every) for h in net.hosts),
                         "epoch_dir_bytes_after_verify": statistics.mean(
                             _bytes(h.epochs.directory(e)) for h in net.hosts),
                         "snapshot_hash_s": statistics.mean(s.hash_seconds for s in snaps if s),
                         "snapshot_write_s": statistics.mean(s.write_seconds for s in snaps if s),
                         "snapshot_wait_s": statistics.mean(s.wait_seconds for s in snaps if s),
                         "snapshot_cpu_s": statistics.mean(s.cpu_seconds for s in snaps if s),
                         "snapshot_bytes_hashed": statistics.mean(s.bytes_hashed for s in snaps if s)})
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
    for r in rows:
        print(f"epoch {r['epoch']}: validators' CPU / hosts' {r['validator_cpu_fraction']:.2%}: replays "
              f"{r['validator_replay_cpu_fraction']:.2%} ({r['replays']:.0f} segments), probe "
              f"{r['validator_probe_cpu_fraction']:.2%} ({r['probe_calls']:.0f} calls), the embedded chain's "
              f"execution {r['validator_chain_cpu_fraction']:.2%} ({r['chain_calls']:.0f} calls: a real "
              f"network's nodes run it), the rest {r['validator_rest_cpu_fraction']:.2%}")
    cpu_ratio = statistics.median(r["cpu_ratio"] for r in rows)
    print(f"host CPU time per epoch, protocol / plain DiLoCo: median {cpu_ratio:.3f}× "
          f"(per epoch: {', '.join(format(r['cpu_ratio'], '.3f') for r in rows)})")
    last = rows[-1]
    print(f"host-epoch storage after training {last['storage_after_training_bytes'] / 1e6:.1f} MB "
          f"(stored every {last['live_leaf_every']}-th leaf while open, K = {args.full_leaf_every} kept once "
          f"closed), after verification {last['epoch_dir_bytes_after_verify'] / 1e6:.1f} MB; "
          f"leaf snapshots hashed {last['snapshot_bytes_hashed'] / 1e6:.0f} MB in {last['snapshot_hash_s']:.2f} s, "
          f"written in {last['snapshot_write_s']:.2f} s (background, {last['snapshot_cpu_s']:.2f} s of CPU), "
          f"training waited {last['snapshot_wait_s']:.2f} s; "
          f"recomputation for challenges {last['recompute_s']:.2f} s")
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, "rows": rows,
                                         "median_ratio": ratio, "median_validator_fraction": frac}, indent=1))


if __name__ == "__main__":
    main()
