"""A host's busy fraction over pipelined epochs at ``small``, on its own core, with paced links (issue 30).

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python bench/host_utilisation.py --json /tmp/hu.json

One host and two validators, each the daemons' node (:class:`node.host.HostNode`, the validators'
``veriloco.behaviours.validator_node``) in its own thread, driven by the daemons' loop
(:meth:`node.daemon.Daemon.step`, polling every ``--poll`` s), every member behind its real artifact
server with its uplink paced by the HTTP layer's token bucket (``ServerLimits.upload_rate``), on the
embedded chain with **blocks on a wall clock**: a block every ``--block-time`` s (the devnet's
200 ms), a transaction answered once its block is sealed (as a node's broadcast-and-commit), and the
preset's phase windows (sized for 0.2 s blocks). The run goes synchronously until the host starts
training epoch ``--sync-epochs + 1``, then pipelined (``phases.pipelined``) until it starts epoch
``--epochs + 1``.

**Cores.** The process is pinned to one core and the host's training thread, for the length of
each epoch's training, to the other (``os.sched_setaffinity`` on the thread; the leaf writer it
starts follows it): the validators' replays, the chain, the servers and the host's own ticks
(aggregation, validation loss, serving and recomputing leaves) share the second core, so the
host's training is not stretched by them (the GIL is still shared: its seconds per epoch in both
runs are printed, and their ratio is the stretch that remains).

**The link.** A 1 Gbit/s link at a projected size P (``--project-params``, 1 B) scaled to this
host: a transfer of b bytes at ``small`` takes what its counterpart, b × P / N bytes (every
artifact is a fixed number of bytes per parameter: a leaf 12, a Δ 1.0625), takes over 1 Gbit/s
at P, times ``small``'s training time per epoch over P's (``--project-epoch-s``: docs/scaling.md's
1 B epoch, 640 inner steps of 0.98 s). So ``rate = 1 Gbit/s × (N / P) × (T_P / T_small)``, with
T_small = H × the step time measured here first, on the host's core. Every time the readers
allow a transfer scales the same way: the validators' ``ClientLimits.min_rate`` (12.5 MB/s, a tenth
of 1 Gbit/s) becomes a tenth of the scaled link, else a leaf that takes minutes over a real link
would be cut at its unscaled deadline.

**A griefer** (``--griefer unavailable``, with ``--validators 4``): the last validator runs that
behaviour, e.g. a free `unavailable` on each of its seats, so each of its challenges goes to a
dispute round that every validator replays. Every validator shares one core here (in a network
each has its own machine), so the dispute round's replays run one after another: an upper bound.

**Busy fraction** = Σ training ÷ wall over epochs 1 … ``--epochs`` (epoch 0, the warm-up, left
out): from the start of epoch 1's training to the start of epoch ``--epochs + 1``'s, training as
the host's own clock keeps it (:attr:`HostNode.trainings`). Each stall between two trainings is
split by what the chain's current epoch was doing and, apart, by the phase of the older epoch still
settling meanwhile (sampled every 0.1 s), with the host's own transactions timed from the end of the
training before (epochs named relative to the one whose training just ended, ``e``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from chain.embedded import EmbeddedChain
from chain.embedded.backend import deploy_embedded
from chain.ledger import ContractBackend, Ledger, TxResult
from node.daemon import Daemon, holder_server, host_daemon
from node.events import NodeEvent
from node.host import HostNode
from node.server import ServerThread
from node.validator import ValidatorNode
from protocol.injective import GENESIS_BALANCE
from protocol.keys import PrivateKey
from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import RunSpec
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.inner import EpochContext, EpochResult, StepCallback, start_checkpoint, train_steps
from trainer.model import parameter_shapes
from trainer.outer import GlobalState
from trainer.presets import preset
from trainer.step import Stepper
from veriloco.behaviours import validator_node

LINK_BYTES_S = 1e9 / 8


def key(name: str) -> PrivateKey:
    return PrivateKey(hashlib.sha256(b"host-utilisation:" + name.encode()).digest())


class RealTimeBlocks(ContractBackend):
    """The embedded chain with a block every ``block_time`` seconds of wall time: a thread seals
    the open block (or, when no transaction opened one, produces an empty block) each period, and
    a transaction returns once its block is sealed. One lock serialises every access."""

    def __init__(self, inner: Any, chain: EmbeddedChain, block_time: float) -> None:
        self.inner, self.chain, self.block_time = inner, chain, block_time
        self.lock = threading.RLock()
        self._sealed = threading.Condition(self.lock)
        self._seals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="blocks", daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        seen = self.chain.height
        while not self._stop.wait(self.block_time):
            with self.lock:
                if self.chain.height > seen:  # a transaction opened a block this period: seal it
                    self.chain.seal_block()
                else:
                    self.chain.advance_blocks(1)
                seen = self.chain.height
                self._seals += 1
                self._sealed.notify_all()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def denom(self) -> str:
        return str(self.inner.denom)

    @property
    def contract_address(self) -> str:
        return str(self.inner.contract_address)

    def execute(self, key: PrivateKey, msg: dict[str, Any], funds: int = 0) -> TxResult:
        with self.lock:
            result: TxResult = self.inner.execute(key, msg, funds)
            mine = self._seals
            while self._seals == mine and not self._stop.is_set():
                self._sealed.wait(1.0)
            return result

    def query(self, msg: dict[str, Any]) -> Any:
        with self.lock:
            return self.inner.query(msg)

    def height(self) -> int:
        with self.lock:
            return int(self.inner.height())

    def balance(self, address: str) -> int:
        with self.lock:
            return int(self.inner.balance(address))

    def wait_for_height(self, height: int, timeout: float = 60.0) -> int:
        end = time.monotonic() + timeout
        while self.height() < height and time.monotonic() < end:
            time.sleep(self.block_time / 2)
        return self.height()

    def raw(self, key: bytes) -> bytes | None:
        with self.lock:
            value: bytes | None = self.inner.raw(key)
            return value

    def end_block(self) -> None:
        pass  # the clock seals blocks


class PinnedHost(HostBehaviour):
    """The honest host, its training thread on ``core`` while it trains (back on ``rest`` after);
    ``starts`` keeps when each epoch's training began."""

    def __init__(self, core: set[int], rest: set[int]) -> None:
        self.core, self.rest = core, rest
        self.starts: dict[int, float] = {}

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        self.starts.setdefault(ctx.epoch, time.monotonic())
        os.sched_setaffinity(0, self.core)  # this thread only (Linux: 0 is the calling thread)
        try:
            return super().train_epoch(spec, dataset, ctx, start_params, root, on_step=on_step)
        finally:
            os.sched_setaffinity(0, self.rest)


def step_seconds(spec: RunSpec, dataset: Dataset, core: set[int], rest: set[int], steps: int = 12) -> float:
    """Seconds per inner step on ``core`` (one warm-up step, then ``steps``)."""
    os.sched_setaffinity(0, core)
    try:
        stepper = Stepper(spec)
        run_id = spec.run_id()
        ctx = EpochContext(run_id, 0, key("calibration").address(), genesis_seed(run_id))
        stepper.load(start_checkpoint(spec, GlobalState.initial(spec).params, 0).state)
        train_steps(stepper, dataset, spec, ctx, range(1), 1)
        started = time.perf_counter()
        train_steps(stepper, dataset, spec, ctx, range(1, 1 + steps), 1)
        return (time.perf_counter() - started) / steps
    finally:
        os.sched_setaffinity(0, rest)


def run(spec: RunSpec, dataset: Dataset, root: Path, args: argparse.Namespace, rate: float,
        core: set[int], rest: set[int]) -> dict[str, Any]:
    operator, treasury = key("operator"), key("treasury").address()
    host_key, val_keys = key("host"), [key(f"validator-{i}") for i in range(args.validators)]
    funded = [operator, host_key, *val_keys]
    chain = EmbeddedChain(genesis_balances={k.address(): {spec.economics.denom: GENESIS_BALANCE} for k in funded},
                          block_txs=10_000, block_time_s=args.block_time)
    deployed = deploy_embedded(chain, operator, spec, GlobalState.initial(spec).hash().hex(), treasury)
    backend = RealTimeBlocks(deployed.backend, chain, args.block_time)
    ledger = Ledger(backend)
    ledger.fund_rewards(operator, 20 * int(spec.economics.reward_per_epoch))
    events: list[NodeEvent] = []
    behaviour = PinnedHost(core, rest)
    host, host_server = host_daemon(ledger, host_key, root / "host", "127.0.0.1:0", behaviour=behaviour,
                                    name="host", on_event=events.append, full_leaf_every=args.full_leaf_every,
                                    keep_epochs=1, allow_private=True, upload_rate=rate)
    ledger.bond(host_key, "host", host_server.url, 2 * int(spec.economics.min_host_stake))
    servers: list[ServerThread] = [host_server]
    nodes: list[HostNode | ValidatorNode] = [host]
    for i, k in enumerate(val_keys):
        griefer = args.griefer if i == args.validators - 1 else None
        node = validator_node(ledger, k, root / f"validator-{i}", griefer, name=f"validator-{i}",
                              allow_private=True, keep_epochs=1)
        # The slowest rate a reader accepts is a time too: scaled with the link (see the module docstring).
        node.base_limits = replace(node.base_limits, min_rate=node.base_limits.min_rate * rate / LINK_BYTES_S)
        if args.trace:
            node._on_event = events.append
        server = holder_server(ledger, node.address, root / f"validator-{i}", "127.0.0.1:0", rate)
        ledger.bond(k, "validator", server.url, 2 * int(spec.economics.min_validator_stake))
        servers.append(server)
        nodes.append(node)
    target = (args.epochs if spec.phases.pipelined else args.sync_epochs) + 1
    done = threading.Event()
    samples: list[tuple[float, int, str, int | None, str | None]] = []

    def loop(node: HostNode | ValidatorNode) -> None:
        torch.set_num_threads(args.threads)
        daemon = Daemon(node, ledger, poll=args.poll)
        while not done.is_set():
            if not daemon.step():
                done.wait(args.poll)

    def sample() -> None:
        while not done.is_set():
            info = ledger.epoch()
            older = None if info.settling is None else ledger.epoch(info.settling).phase
            samples.append((time.monotonic(), info.epoch, info.phase, info.settling, older))
            if target in behaviour.starts:
                done.set()
            done.wait(0.1)

    threads = [threading.Thread(target=loop, args=(n,), name=n.name, daemon=True) for n in nodes]
    threads.append(threading.Thread(target=sample, name="sampler", daemon=True))
    started = time.monotonic()
    for th in threads:
        th.start()
    done.wait(args.timeout)
    wall_all = time.monotonic() - started
    done.set()
    for member in nodes:
        member.stopping.set()
    for th in threads:
        th.join(timeout=120)
    for member in nodes:
        member.close(wait_s=60) if isinstance(member, HostNode) else member.close()
    for s in servers:
        s.stop()
    backend.stop()
    trained = {t.epoch: t for t in host.trainings}
    if target not in behaviour.starts:  # what it did do, for the record
        return {"pipelined": spec.phases.pipelined, "reached": False, "timeout_s": args.timeout,
                "starts_s": {e: round(t - started, 2) for e, t in sorted(behaviour.starts.items())},
                "train_s": {e: round(t.ended - t.started, 2) for e, t in sorted(trained.items())},
                "events": [(round(ev.at - started, 2), ev.epoch, ev.action) for ev in events],
                "run_s": wall_all, "load_end": os.getloadavg()}
    first, last = behaviour.starts[1], behaviour.starts[target]
    wall = last - first
    measured = [trained[e] for e in range(1, target)]
    busy = sum(t.ended - t.started for t in measured) / wall
    # Each stall: from the end of epoch e's training to the start of e + 1's, split by the chain's
    # current epoch (e or e + 1) and phase; the host's transactions timed from the end of training.
    split: defaultdict[str, float] = defaultdict(float)
    settling: defaultdict[str, float] = defaultdict(float)
    acts: defaultdict[str, list[float]] = defaultdict(list)
    stalls = []

    def rel(ep: int, e: int) -> str:
        return "e" if ep == e else f"e{ep - e:+d}"

    for e in range(1, target):
        end, nxt = trained[e].ended, behaviour.starts[e + 1]
        stalls.append(nxt - end)
        window = [x for x in samples if end <= x[0] < nxt]
        # Each sample holds until the next one (the last until epoch e + 1 starts).
        until = [x[0] for x in window[1:]] + [nxt]
        for (t, ep, ph, old, old_ph), after in zip(window, until, strict=True):
            split[f"{rel(ep, e)} {ph}"] += after - t
            if old is not None:  # the older epoch still settling meanwhile, and its phase
                settling[f"{rel(old, e)} {old_ph}"] += after - t
        for ev in events:
            if end <= ev.at < nxt and not ev.refused:
                acts[f"{ev.kind.value} ({rel(ev.epoch, e)})"].append(ev.at - end)
    n = target - 1
    return {"pipelined": spec.phases.pipelined, "wall_s": wall, "epochs_measured": n,
            "train_s": [round(t.ended - t.started, 2) for t in measured],
            "train_s_epoch0": round(trained[0].ended - trained[0].started, 2),
            "busy": busy, "stall_s": [round(s, 2) for s in stalls], "stall_mean_s": statistics.mean(stalls),
            "stall_by_phase_mean_s": {k: round(v / n, 2) for k, v in sorted(split.items(), key=lambda kv: -kv[1])},
            "stall_while_settling_mean_s": {k: round(v / n, 2)
                                            for k, v in sorted(settling.items(), key=lambda kv: -kv[1])},
            "host_acts_after_training_s": {k: round(statistics.mean(v), 2) for k, v in acts.items()},
            **({"trace": [(round(ev.at - started, 2), ev.who, ev.epoch, ev.action, ev.detail[:80]) for ev in events],
                "phases": [(round(x[0] - started, 2), *x[1:]) for i, x in enumerate(samples)
                           if i == 0 or x[1:] != samples[i - 1][1:]],
                "starts_s": {e: round(t - started, 2) for e, t in sorted(behaviour.starts.items())}}
               if args.trace else {}),
            "run_s": wall_all, "load_end": os.getloadavg()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--inner-steps", type=int, default=240, help="H (the preset's segments of c steps)")
    parser.add_argument("--epochs", type=int, default=5, help="pipelined epochs measured, after the warm-up epoch 0")
    parser.add_argument("--sync-epochs", type=int, default=2, help="synchronous epochs measured, after epoch 0")
    parser.add_argument("--validators", type=int, default=2)
    parser.add_argument("--block-time", type=float, default=0.2)
    parser.add_argument("--poll", type=float, default=0.2, help="seconds between a daemon's ticks when idle")
    parser.add_argument("--full-leaf-every", type=int, default=1, help="K (1: no leaf recomputed)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads of every node")
    parser.add_argument("--host-core", type=int, default=0)
    parser.add_argument("--project-params", type=float, default=1e9, help="P")
    parser.add_argument("--project-epoch-s", type=float, default=640 * 0.98, help="P's training per epoch")
    parser.add_argument("--modes", default="synchronous,pipelined")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a run may take at most")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--trace", action="store_true", help="every node's events, timed, in the JSON")
    parser.add_argument("--griefer", default=None,
                        help="the last validator's behaviour (e.g. unavailable: a free dispute on each of its seats)")
    args = parser.parse_args()
    cores = os.sched_getaffinity(0)
    core = {args.host_core}
    rest = (cores - core) or core
    os.sched_setaffinity(0, rest)  # every thread started from here on: the other core
    configure(args.threads)
    base = preset(args.preset)
    spec = base.with_changes(train={"inner_steps": args.inner_steps})
    dataset = Dataset.load(spec.data)
    params = sum(int(torch.Size(s).numel()) for s in parameter_shapes(spec).values())
    step_s = step_seconds(spec, dataset, core, rest)
    t_small = args.inner_steps * step_s
    rate = LINK_BYTES_S * params / args.project_params * args.project_epoch_s / t_small
    inputs = {"params": params, "step_s": round(step_s, 4), "t_small_s": round(t_small, 1), "rate_bytes_s": round(rate),
              "leaf_bytes": 12 * params, "leaf_s": round(12 * params / rate, 2),
              "load_start": os.getloadavg(), "config": {k: str(v) for k, v in vars(args).items()}}
    print(json.dumps({"inputs": inputs}), flush=True)
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="veriloco-hu-") as tmp:
        for mode in args.modes.split(","):
            mode_spec = spec.with_changes(phases={"pipelined": mode == "pipelined"})
            rows[mode] = run(mode_spec, dataset, Path(tmp) / mode, args, rate, core, rest)
            print(json.dumps({"mode": mode, **rows[mode]}), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"inputs": inputs, "runs": rows}, indent=1))
    print(f"\n{args.preset}, H = {args.inner_steps}, 1 host, {args.validators} validators, "
          f"uplinks {rate / 1e6:.2f} MB/s\n")
    print("| schedule | epochs | wall s | training s per epoch (mean) | stall s per epoch (mean) | busy |")
    print("|---|---|---|---|---|---|")
    for mode, r in rows.items():
        if r.get("reached") is False:
            print(f"| {mode} | did not start epoch {args.epochs + 1} within {args.timeout:.0f} s | | | | |")
            continue
        print(f"| {mode} | {r['epochs_measured']} | {r['wall_s']:.1f} | {statistics.mean(r['train_s']):.1f} | "
              f"{r['stall_mean_s']:.2f} | {r['busy']:.3f} |")


if __name__ == "__main__":
    main()
