"""The veriloco contract on a real chain: a local injectived devnet through the cosmos backend.

    .venv/bin/python bench/chain_devnet.py [--hosts 4,16,64] [--epoch-hosts 8] [--epoch-validators 4]

Starts its own devnet (free ports, temporary home, 200 ms blocks, every account funded at
genesis), deploys the committed contract, and measures:

* gas used by each message type (store, instantiate, bond, unbond, fund_rewards, set_standby, join,
  commit, reveal, commit_verdict, reveal_verdict, reveal_traps, propose_model, advance), and the
  fee it cost;
* latency from send to inclusion (sequential ``fund_rewards``, each simulated then broadcast);
* throughput of one account pipelining ``fund_rewards`` (explicit gas, consecutive sequences);
* per host count (4/16/64, with 8 validators, k = 1, S = 2, pickers by stake): the gas of
  ``advance`` when it closes the last verdict round and finalizes the epoch (settlement:
  outcomes, slashes, rewards), and whether it fits the block gas limit read from the node's
  consensus params — once with every challenge decided in round 0, once with every challenge
  disputed (a seat of each fails it and objects in ``ready``; the ``ready`` that completes
  ``objection`` marks the disputes, every validator then votes on each in the final round, and
  the ``advance`` that closes ``dispute_reveal`` decides and finalizes with a wrong objector on
  every challenge);
* the wall time of one full epoch's chain traffic (no training) for 8 hosts + 4 validators,
  every phase closed early by its last message, each phase's messages sent in parallel.

Prints one JSON object (``--out`` also writes it to a file).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from chain.cosmos import CosmosBackend, CosmosChain
from chain.cosmos.errors import CODE_OUT_OF_GAS, CosmosTxError
from chain.devnet import Devnet, DevnetPorts, GenesisAccount
from chain.ledger import ContractBackend, Ledger, TxResult, instantiate_msg
from chain.wasm_artifact import load_contract_wasm
from protocol.injective import DENOM, GENESIS_BALANCE, MIN_GAS_PRICE
from protocol.keys import PrivateKey
from protocol.messages import (
    BeaconJoin,
    BeaconReveal,
    Commitment,
    ModelProposal,
    Objection,
    Ready,
    TrapOpening,
    VerdictCommit,
    VerdictOpening,
)
from protocol.rules.beacon import beacon_commit
from protocol.rules.spec import RunSpec

HOST_STAKE = 10_000_000
VALIDATOR_STAKE = 4_000_000
THETA0 = hashlib.sha256(b"theta_0").hexdigest()


def key(name: str) -> PrivateKey:
    return PrivateKey(hashlib.sha256(b"veriloco-bench:" + name.encode()).digest())


def digest(label: str) -> str:
    return hashlib.sha256(label.encode()).hexdigest()


def spec(*, max_hosts: int = 64, verify_blocks: int = 40, unbonding_epochs: int = 2) -> RunSpec:
    """The bench's run spec; ``verify_blocks`` is also each verdict-opening window."""
    return RunSpec.model_validate({
        "name": "bench-devnet", "model": {},
        "data": {"corpus": "bench", "dataset_hash": "0" * 64, "seq_len": 16},
        "train": {"inner_steps": 4, "segment_steps": 2, "batch_size": 2, "lr": "0.001"},
        "verification": {"enabled": True, "challenges_k": 1, "validators_r": 2},
        "economics": {"denom": DENOM, "min_host_stake": "2000000", "min_validator_stake": "1000000",
                      "unbonding_epochs": unbonding_epochs, "reward_per_epoch": "1000"},
        "phases": {"join_blocks": 60, "train_blocks": 60, "reveal_blocks": 60, "verify_blocks": verify_blocks,
                   "verdict_reveal_blocks": verify_blocks, "propose_blocks": 60, "min_hosts": 1,
                   "min_validators": 1, "max_hosts": max_hosts,
                   "max_validators": 32},
    })


class Capture(ContractBackend):
    """A backend that records what a Ledger would send, so Ledger calls can be pipelined."""

    def __init__(self, real: ContractBackend) -> None:
        self.real = real
        self.calls: list[tuple[PrivateKey, dict[str, Any], int]] = []

    denom = property(lambda self: self.real.denom)
    contract_address = property(lambda self: self.real.contract_address)

    def execute(self, key: PrivateKey, msg: dict[str, Any], funds: int = 0) -> TxResult:
        self.calls.append((key, msg, funds))
        return TxResult(height=0, tx_hash="", gas_used=0)

    def query(self, msg: dict[str, Any]) -> Any:
        return self.real.query(msg)

    def height(self) -> int:
        return self.real.height()

    def balance(self, address: str) -> int:
        return self.real.balance(address)

    def wait_for_height(self, height: int, timeout: float = 60.0) -> int:
        return self.real.wait_for_height(height, timeout)

    def raw(self, key: bytes) -> bytes | None:
        return self.real.raw(key)


class Run:
    """One deployed contract and helpers to send Ledger calls in parallel."""

    def __init__(self, chain: CosmosChain, code_id: int, operator: PrivateKey, s: RunSpec) -> None:
        self.chain = chain
        self.backend = CosmosBackend.deploy(chain, operator, instantiate_msg(s, THETA0, operator.address()),
                                            code_id=code_id)
        self.ledger = Ledger(self.backend)
        self.capture = Capture(self.backend)
        self.planned = Ledger(self.capture)
        self.spec = s

    def parallel(self, plan: Callable[[Ledger], object], chunk: int = 0) -> tuple[list[TxResult], int]:
        """Send every call ``plan`` makes without waiting in between (simulated gas each), then
        wait for all; with ``chunk`` > 0, at most that many before waiting for them (thousands in
        flight at once lost account sequences on a loaded node). The one that completes a phase
        also closes it, which its simulation (on the previous block) did not see: if it runs out of
        gas it is simulated and sent again. Returns the results (in the order of the calls) and
        how many were sent again."""
        self.capture.calls.clear()
        plan(self.planned)
        calls = list(self.capture.calls)
        step = chunk if chunk > 0 else max(1, len(calls))
        results: list[TxResult] = []
        retries = 0
        for start in range(0, len(calls), step):
            batch = calls[start:start + step]
            pending = [self.backend.submit(k, msg, funds) for k, msg, funds in batch]
            for (k, msg, funds), p in zip(batch, pending, strict=True):
                try:
                    results.append(self.backend.wait(p))
                except CosmosTxError as exc:
                    if exc.code != CODE_OUT_OF_GAS:
                        raise
                    retries += 1
                    results.append(self.backend.execute(k, msg, funds))
        return results, retries

    def phase(self, epoch: int) -> str:
        return self.ledger.epoch(epoch).phase


def secret(name: str, epoch: int) -> bytes:
    return hashlib.sha256(f"secret:{name}:{epoch}".encode()).digest()


def trap_opening(name: str, epoch: int) -> TrapOpening:
    """Every host commits to the empty trap set (an honest host's)."""
    return TrapOpening(epoch=epoch, segments=[], salt=digest(f"trap-salt:{name}:{epoch}"))


def opening(v: str, c: Any, outcome: str) -> VerdictOpening:
    """``v``'s verdict on challenge ``c``: the evidence depends only on what was found (honest
    replays are bitwise equal, so the final vote groups equal verdicts), the salt on the voter; on
    the host's last segment (the spec's probe is on by default) the host's probe gain."""
    last = c.segment == c.segments - 1 and outcome != "unavailable"
    return VerdictOpening.model_validate({  # the outcome a plain string, validated as a message
        "epoch": c.epoch, "host": c.host, "segment": c.segment, "outcome": outcome, "distance": "0.001",
        "evidence": digest(f"ev:{c.host}:{c.segment}:{outcome}"),
        "salt": digest(f"salt:{v}:{c.host}:{c.segment}:{c.round}"), "gain_micro": 25_000 if last else None})


def play_epoch(run: Run, hosts: Sequence[str], validators: Sequence[str], *,
               finalize_by_advance: bool = False, dispute: bool = False) -> dict[str, Any]:
    """One epoch, each phase's messages sent in parallel, every phase closed early by its last
    message. With ``finalize_by_advance``: the last verdict round is closed by ``advance`` after
    its deadline (one validator withholds one opening), so that ``advance`` carries the finalize;
    with ``dispute`` a seat of every challenge fails it and objects, and every validator votes on
    it in the final round. Returns per-phase results, retries and timing."""
    s = run.spec
    e = run.ledger.epoch().epoch
    names = [*hosts, *validators]
    out: dict[str, Any] = {"hosts": len(hosts), "validators": len(validators), "retries": 0}
    t0 = time.perf_counter()
    h0 = run.ledger.height()

    def phase(name: str, plan: Callable[[Ledger], object], expect: str | None) -> None:
        results, retries = run.parallel(plan)
        out[name] = out.get(name, []) + results
        out["retries"] += retries
        if expect is not None:
            assert run.phase(e) == expect, (name, run.ledger.epoch(e))

    def closing_advance(name: str, expect: str) -> None:
        """Wait out the phase, then measure the ``advance`` that closes it."""
        run.ledger.wait_for_height(run.ledger.epoch(e).phase_deadline)
        sender = key(hosts[0])
        sim = run.chain.simulate(sender, [run.chain.execute_msg(sender, run.backend.contract_address, {"advance": {}})])
        limit = run.chain.config.gas_limit(sim)
        block_gas = run.chain.block_max_gas()
        out[name] = {"simulated": sim, "gas_limit": limit, "block_max_gas": block_gas,
                     "fits_block": block_gas < 0 or limit <= block_gas}
        if out[name]["fits_block"]:
            out[name]["gas_used"] = run.backend.execute(sender, {"advance": {}}).gas_used
            assert run.phase(e) == expect, run.ledger.epoch(e)

    phase("join", lambda L: [L.join(key(n), BeaconJoin(epoch=e, beacon_commit=beacon_commit(
        key(n).address(), e, secret(n, e)).hex())) for n in names], "train")
    phase("commit", lambda L: [L.commit(key(n), Commitment(
        epoch=e, checkpoint_root=digest(f"root:{n}"), delta_hash=digest(f"delta:{n}"), loss_digest=digest(f"loss:{n}"),
        segments=s.train.segments, train_loss_micro=2_500_000), trap_opening(n, e).commitment(key(n).address()))
        for n in hosts], "reveal")
    phase("reveal", lambda L: [L.reveal(key(n), BeaconReveal(epoch=e, secret=secret(n, e).hex())) for n in names],
          "verify")

    def due_votes() -> list[tuple[str, Any]]:
        """The (validator, challenge) pairs the current phase waits for (the contract's ``due``)."""
        return [(v, c) for v in validators for c in run.ledger.challenges(e, key(v).address()) if c.due]

    def decide(v: str, c: Any) -> str:
        # Disputing: the lowest-sorted seat of each challenge fails it (and objects), so every
        # challenge goes to the final vote of all validators, which passes it; that seat's re-vote
        # in the final round repeats its fail (the contract refuses a retracted accusation).
        if dispute and key(v).address() == min(c.validators):
            return "fail"
        return "pass"

    def commit_all(L: Ledger, chosen: list) -> None:
        for v, c in chosen:
            L.commit_verdict(key(v), VerdictCommit(epoch=e, host=c.host, segment=c.segment,
                                                   commitment=opening(v, c, decide(v, c)).commitment(key(v).address())))

    def open_all(L: Ledger, chosen: list) -> None:
        for v, c in chosen:
            L.reveal_verdict(key(v), opening(v, c, decide(v, c)))

    def ready_all(L: Ledger, chosen: list) -> None:
        for v in sorted({v for v, _ in chosen}):
            mine = [Objection(host=c.host, segment=c.segment) for w, c in chosen if w == v and decide(v, c) != "pass"]
            for msg in Ready.pages(e, mine):
                L.ready(key(v), msg)

    votes = due_votes()
    phase("commit_verdict", lambda L: commit_all(L, votes), "objection")
    phase("reveal_traps", lambda L: [L.reveal_traps(key(n), trap_opening(n, e)) for n in hosts], "objection")
    # The ready that completes objection closes it (the objections stage, page by page).
    phase("ready", lambda L: ready_all(L, votes), "dispute" if dispute else "verdict_reveal")
    if dispute:
        final = due_votes()
        out["final_votes"] = len(final)
        phase("commit_verdict", lambda L: commit_all(L, final), "dispute_reveal")
        votes = votes + final
        expect = "dispute_reveal"
    else:
        expect = "verdict_reveal"
    if finalize_by_advance:
        # One opening withheld: the last round waits for its deadline and `advance` closes it.
        phase("reveal_verdict", lambda L: open_all(L, votes[:-1]), expect)
        closing_advance("advance_finalize", "propose")
        if not out["advance_finalize"]["fits_block"]:
            return out
    else:
        phase("reveal_verdict", lambda L: open_all(L, votes), "propose")
    accepted = run.ledger.epoch(e).accepted
    needed = math.floor(2 * len(accepted) / 3) + 1  # equal stakes: more than 2/3 of them
    by_address = {key(n).address(): n for n in hosts}
    proposers = [by_address[a] for a in accepted[:needed]]
    results, retries = run.parallel(lambda L: [L.propose_model(key(n), ModelProposal(
        epoch=e, model_hash=digest(f"theta:{e + 1}"), val_loss_micro=2_000_000)) for n in proposers])
    out["propose"] = results
    out["retries"] += retries
    info = run.ledger.epoch(e)
    assert info.agreed and run.ledger.epoch().epoch == e + 1, info
    out["wall_s"] = time.perf_counter() - t0
    out["blocks"] = run.ledger.height() - h0
    return out


def gas_summary(results: list[TxResult]) -> dict[str, int]:
    """Median (a typical message) and max (the one that closed the phase) of a phase's gas."""
    gas = sorted(r.gas_used for r in results)
    return {"n": len(gas), "median": int(statistics.median(gas)), "max": gas[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", default="4,16,64", help="host counts for the finalize gas")
    parser.add_argument("--validators", type=int, default=8, help="validators in the finalize runs")
    parser.add_argument("--epoch-hosts", type=int, default=8)
    parser.add_argument("--epoch-validators", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3, help="epochs timed for the wall-time figure")
    parser.add_argument("--latency-n", type=int, default=40)
    parser.add_argument("--pipeline-n", type=int, default=300)
    parser.add_argument("--block-time", default="200ms")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    host_counts = [int(h) for h in args.hosts.split(",") if h]  # "": skip the finalize runs
    max_hosts = max([*host_counts, args.epoch_hosts])
    n_validators = max(args.validators, args.epoch_validators)
    hosts = [f"host{i}" for i in range(max_hosts)]
    validators = [f"validator{i}" for i in range(n_validators)]
    names = ["operator", "funder", *hosts, *validators]
    accounts = [GenesisAccount.of_key(n, key(n), GENESIS_BALANCE) for n in names]
    report: dict[str, Any] = {"machine": platform.processor() or platform.machine(), "block_time": args.block_time}

    with tempfile.TemporaryDirectory(prefix="veriloco-bench-devnet-") as home:
        t0 = time.perf_counter()
        net = Devnet(Path(home) / "node", ports=DevnetPorts.free(), accounts=accounts, block_time=args.block_time)
        net.up(tied=True)  # a killed benchmark takes its node with it
        report["devnet_up_s"] = round(time.perf_counter() - t0, 2)
        try:
            with net.connect() as chain:
                report["block_max_gas"] = chain.block_max_gas()
                measure(chain, args, report, host_counts, hosts, validators)
        finally:
            t0 = time.perf_counter()
            net.stop()
            report["devnet_down_s"] = round(time.perf_counter() - t0, 2)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


def measure(chain: CosmosChain, args: argparse.Namespace, report: dict[str, Any], host_counts: list[int],
            hosts: list[str], validators: list[str]) -> None:
    operator, funder = key("operator"), key("funder")
    gas: dict[str, Any] = {}

    code_id, stored = chain.store_code(operator, load_contract_wasm(), reuse=False)
    assert stored is not None
    gas["store_code"] = stored.gas_used
    t0 = time.perf_counter()
    run = Run(chain, code_id, operator, spec(unbonding_epochs=1))
    report["deploy_instantiate_s"] = round(time.perf_counter() - t0, 3)
    _, inst = chain.instantiate(operator, code_id, instantiate_msg(run.spec, THETA0, operator.address()))
    gas["instantiate"] = inst.gas_used

    L = run.ledger
    gas["bond"] = L.bond(key(hosts[0]), "host", "http://127.0.0.1:8700", HOST_STAKE).gas_used
    gas["bond_again"] = L.bond(key(hosts[0]), "host", "http://127.0.0.1:8700", HOST_STAKE).gas_used
    gas["unbond"] = L.unbond(key(hosts[0]), 1_000).gas_used
    gas["fund_rewards"] = L.fund_rewards(funder, 1_000_000).gas_used
    # A member names its standby revealer (docs/contract.md, "A standby revealer"): the funder,
    # which holds no stake.
    gas["set_standby"] = L.set_standby(key(hosts[0]), funder.address()).gas_used

    # Latency: send -> inclusion, one transaction at a time (simulate + broadcast + poll).
    lat = []
    for _ in range(args.latency_n):
        t0 = time.perf_counter()
        L.fund_rewards(funder, 1)
        lat.append(time.perf_counter() - t0)
    lat.sort()
    report["latency_s"] = {"n": len(lat), "median": round(statistics.median(lat), 3),
                           "p90": round(lat[int(0.9 * (len(lat) - 1))], 3), "max": round(lat[-1], 3)}
    report["sequential_tx_per_s"] = round(len(lat) / sum(lat), 1)

    # Pipelining from one account: explicit gas, consecutive sequences, then wait for all.
    limit = chain.config.gas_limit(gas["fund_rewards"])
    t0 = time.perf_counter()
    pending = [run.backend.submit(funder, {"fund_rewards": {}}, 1, gas_limit=limit) for _ in range(args.pipeline_n)]
    t_submit = time.perf_counter() - t0
    results = [run.backend.wait(p) for p in pending]
    t_all = time.perf_counter() - t0
    heights = sorted({r.height for r in results})
    report["pipelined"] = {"n": args.pipeline_n, "gas_limit": limit, "submit_s": round(t_submit, 2),
                           "submit_tx_per_s": round(args.pipeline_n / t_submit, 1),
                           "included_s": round(t_all, 2), "tx_per_s": round(args.pipeline_n / t_all, 1),
                           "blocks": len(heights)}

    # Epoch messages and finalize at several host counts (fresh contract each), without and with
    # every challenge in dispute.
    phases = ("join", "commit", "reveal", "commit_verdict", "reveal_traps", "ready", "reveal_verdict", "propose")
    per_hosts: dict[str, Any] = {}
    for h in host_counts:
        for dispute in (False, True):
            r = Run(chain, code_id, operator, spec(verify_blocks=80))  # room for 512 parallel submits
            hs, vs = hosts[:h], validators[:args.validators]
            def bond_all(Lp: Ledger, hs: list[str] = hs, vs: list[str] = vs) -> None:
                for n in hs:
                    Lp.bond(key(n), "host", "http://127.0.0.1:8700", HOST_STAKE)
                for n in vs:
                    Lp.bond(key(n), "validator", "http://127.0.0.1:8701", VALIDATOR_STAKE)
            r.parallel(bond_all)
            r.ledger.fund_rewards(funder, 1_000_000)
            out = play_epoch(r, hs, vs, finalize_by_advance=True, dispute=dispute)
            row: dict[str, Any] = {p: gas_summary(out[p]) for p in phases if p in out}
            for k in ("advance_finalize", "final_votes"):
                if k in out:
                    row[k] = out[k]
            per_hosts[f"{h}{' dispute' if dispute else ''}"] = row
    report["epoch_gas_by_hosts"] = per_hosts
    # `advance` that only extends an empty join phase (nobody joined by the deadline):
    r = Run(chain, code_id, operator, spec(verify_blocks=15))
    r.ledger.wait_for_height(r.ledger.epoch().phase_deadline)
    gas["advance_extend_join"] = r.ledger.advance(operator).gas_used
    report["gas"] = gas
    report["fee_inj_per_gas"] = MIN_GAS_PRICE

    # Wall time of a whole epoch's traffic: 8 hosts + 4 validators, phases closed early.
    r = Run(chain, code_id, operator, spec())
    hs, vs = hosts[:args.epoch_hosts], validators[:args.epoch_validators]
    r.parallel(lambda Lp: [Lp.bond(key(n), "host", "http://127.0.0.1:8700", HOST_STAKE) for n in hs]
               + [Lp.bond(key(n), "validator", "http://127.0.0.1:8701", VALIDATOR_STAKE) for n in vs])
    r.ledger.fund_rewards(funder, 1_000_000)
    walls, blocks, retries = [], [], []
    for _ in range(args.epochs):
        out = play_epoch(r, hs, vs)
        walls.append(round(out["wall_s"], 2))
        blocks.append(out["blocks"])
        retries.append(out["retries"])
    transactions = sum(len(out[p]) for p in phases)
    report["epoch_wall"] = {"hosts": len(hs), "validators": len(vs), "transactions": transactions,
                            "wall_s": walls, "median_s": round(statistics.median(walls), 2), "blocks": blocks,
                            "out_of_gas_resends": retries}


if __name__ == "__main__":
    main()
