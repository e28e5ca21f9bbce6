"""The settlement game of issue 27 under attack, over hundreds of epochs, on the real contract (the
committed wasm on the embedded chain): every adversary ``veriloco simulate`` names, and a mixture,
at coalition stake 10 %, 20 % and 33 % − ε of the epoch's validator stake.

    .venv/bin/python bench/settlement_game.py [--epochs 200] [--jobs 2] [--deadline-s 0] [--out results.json]
        [--uncached-queries]

Hosts do not train and validators do not replay (the moves are the real messages: beacon
commit/reveal, commitments with trap commitments, verdict commits, ``ready`` with objections,
trap openings, openings, final-round votes, proposals, ``advance``). What an honest replay finds is
the *ground truth* of the host's behaviour: a faked or trapped segment fails with the honest
distance and evidence, any other passes with the honest evidence. A verdict reached without the
replay (a blind pass, a coalition's fail, a guess) has other evidence: it cannot know the honest
replay's digest. Whether a real replay finds the truth is measured by the verifier benchmarks
(``bench/verifier_detection.py``); the adversaries are played for real, with training and replays, by
``tests/e2e/test_settlement_game.py``.

Parties of every scenario: 3 honest hosts that each set one trap (a tiny perturbation within the
trap window) with probability ``P_TRAP`` per epoch, 1 cheating host that fakes ``FAKED`` of the
``S − 1`` segments before the last (the coalition's own cheater where the coalition has one), 4
honest validators of ``HONEST_STAKE`` each, and the coalition: identities of the attack's kind
holding ``β/(1 − β)`` of the honest stake, so a share β of the validators' stake at join:

==============  ====================================================================================
``colluder``    fails every challenge it sits on of a host outside the coalition (round 0: it objects;
                final round: ``fail``) and passes the coalition's cheater
``sybil``       3 identities per seat it can hold join with the coalition's stake split among them;
                ``max_validators`` leaves the coalition as many seats as it has ``colluder``
                identities: with seats by stake, honest (larger) validators always take their seats
``withholder``  the cheater's coalition: passes its cheater, votes the truth elsewhere, and withholds
                its beacon reveal whenever its own picks on the cheater would hit a faked segment
``trap_reader`` replays only hosts that opened a trap in the last ``TRAP_MEMORY`` epochs, passes the
                others blind
``copier``      replays its round-0 seats; in the final round it commits a guess (``fail``, since a
                challenge is disputed) without the replay: nothing is visible before its commit
``unavailable`` objects ``unavailable`` on every seat and votes ``unavailable`` in the final round
``mixture``     one identity of each of the five kinds above (colluder, withholder, trap reader,
                copier, unavailable), the coalition's stake split among them
==============  ====================================================================================

Per scenario and β: honest parties slashed (must be 0), the cheater caught per epoch against the
formula (each honest picker picks ``k`` of the ``S − 1`` segments: P ≥ 1 − (1 − f)^k per honest
picker; ``exact`` is the hypergeometric value with the epoch's count of honest pickers), the
coalition's net earnings (rewards and catcher shares minus slashes, its cheater included where it
is the coalition's; must be negative), θ agreed per epoch, honest validators seated (the sybil
scenario), disputes forced, and funds conserved after every epoch (asserted). A slashed party is
topped up to its bond after each epoch so that it keeps playing.

Prints one JSON object and a Markdown table (``--out`` also writes the JSON). ``--deadline-s``
stops each run at that wall time (0: none) and reports the epochs it played.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The contract suite's environment (a deployed contract behind a Ledger, the epoch's moves).
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "chain")]

from ledger_env import DEFAULT_NAMES, EmbeddedDriver, LedgerEnv, make_spec  # noqa: E402 (after its path)

from chain.ledger import ContractError  # noqa: E402
from protocol.rules.sampling import pickers, picks  # noqa: E402
from protocol.rules.spec import RunSpec  # noqa: E402
from protocol.views import Challenge, EpochReport, HostReport, ValidatorReport  # noqa: E402

SEGMENTS, K, SEATS_CAP = 8, 2, 19
HONEST_HOSTS, HONEST_VALIDATORS = 3, 4
HOST_STAKE, HONEST_STAKE = 10_000_000, 15_000_000
FAKED = 2  # segments the cheater fakes among the S − 1 before the last
P_TRAP = 0.25  # per honest host and epoch: one trap
TRAP_MEMORY = 1  # epochs a trap reader remembers a host's opened trap
REWARD = 2_000_000  # reward_per_epoch: 80 % to accepted hosts, 20 % to diligent validators
HONEST_DISTANCE, TRAP_DISTANCE, BLIND_DISTANCE = "0.001", "0.0001", "0"
BETAS = {"10%": 0.10, "20%": 0.20, "33%-eps": 0.33}
IDENTITIES = {"10%": 2, "20%": 4, "33%-eps": 6}
KINDS = ("colluder", "withholder", "trap_reader", "copier", "unavailable")
SCENARIOS = ("colluder", "sybil", "withholder", "trap_reader", "copier", "unavailable", "mixture")
SHIELDS = frozenset({"colluder", "sybil", "withholder"})  # strategies that pass the coalition's cheater


def bench_spec(max_validators: int = 64) -> RunSpec:
    """S = 8 segments, k = 2 picks per picker plus the last, pickers by stake up to 19 seats, windows
    for one transaction per block, a trap window of [tau, 100 tau] (the default)."""
    return make_spec(
        train={"inner_steps": 2 * SEGMENTS, "segment_steps": 2},
        verification={"challenges_k": K, "validators_r": 2, "seats_cap": SEATS_CAP},
        phases={"join_blocks": 80, "train_blocks": 60, "reveal_blocks": 80, "verify_blocks": 300,
                "verdict_reveal_blocks": 300, "propose_blocks": 60, "max_hosts": 64,
                "max_validators": max_validators},
        reward_per_epoch=str(REWARD))


class Env(LedgerEnv):
    """The contract suite's environment, with each verdict's distance chosen by its voter (a verdict
    reached without the replay cannot carry the honest evidence)."""

    def __init__(self, driver: Any) -> None:
        super().__init__(driver)
        self.distances: dict[tuple[str, str, int], str] = {}

    def commit_verdict(self, name: str, host: str, segment: int, outcome: str = "pass", *,
                       distance: str | None = None, epoch: int | None = None, revote: bool = False,
                       dispute: bool = False) -> Any:
        address = self.addr(host) if host in self.keys else host
        chosen = self.distances.pop((name, address, segment), HONEST_DISTANCE)
        return super().commit_verdict(name, host, segment, outcome, distance=distance or chosen, epoch=epoch,
                                      revote=revote, dispute=dispute)


class AttackGame:
    """One scenario at one coalition share on a fresh embedded chain."""

    def __init__(self, scenario: str, share: str, seed: int, cache_queries: bool = True) -> None:
        beta = BETAS[share]
        n = 5 if scenario == "mixture" else IDENTITIES[share]
        honest_total = HONEST_VALIDATORS * HONEST_STAKE
        coalition = int(honest_total * beta / (1 - beta))
        each = coalition // n
        self.scenario, self.share, self.rng = scenario, share, random.Random(seed)
        self.hosts = {f"host{i + 1}": "honest" for i in range(HONEST_HOSTS)}
        self.hosts["cheat1"] = "cheater"
        self.validators = {f"validator{i + 1}": "honest" for i in range(HONEST_VALIDATORS)}
        self.stakes: dict[str, int] = {**dict.fromkeys(self.hosts, HOST_STAKE),
                                       **dict.fromkeys(self.validators, HONEST_STAKE)}
        kinds = list(KINDS) if scenario == "mixture" else [scenario] * n
        count = 3 * n if scenario == "sybil" else n
        coalition_names = []
        for i in range(count):
            name = f"coal{i + 1}"
            self.validators[name] = kinds[i % len(kinds)]
            self.stakes[name] = each
            coalition_names.append(name)
        self.coalition = frozenset(coalition_names)
        # The cheater is the coalition's own where the coalition shields it.
        self.cheater_in_coalition = bool(set(kinds) & SHIELDS)
        cap = HONEST_VALIDATORS + n if scenario == "sybil" else 64
        self.spec = bench_spec(cap)
        names = [*DEFAULT_NAMES, *(x for x in [*self.hosts, *self.validators] if x not in DEFAULT_NAMES)]
        self.env = Env(EmbeddedDriver(self.spec, names))
        self.env.driver.chain.cache_queries = cache_queries
        # Sybils bond (and join) first.
        order = sorted(self.validators, key=lambda v: v not in self.coalition)
        for name in [*order, *self.hosts]:
            self.env.bond(name, self.stakes[name], role="host" if name in self.hosts else "validator")
        self.env.fund_rewards(10**12)
        self.initial_funds = self.env.total_funds()
        self.traps_seen: dict[str, int] = {}  # host -> last epoch it opened a trap (the trap reader's memory)
        self.rows: list[dict[str, Any]] = []

    # -- ground truth and strategies ----------------------------------------------------------

    def truth(self, host: str, segment: int) -> str:
        return "fail" if segment in self.fakes.get(host, ()) or segment in self.env.traps.get(host, ()) else "pass"

    def honest_distance(self, host: str, segment: int) -> str:
        return TRAP_DISTANCE if segment in self.env.traps.get(host, ()) else HONEST_DISTANCE

    def vote(self, validator: str, challenge: Challenge) -> str | None:
        host = self.env.name_of(challenge.host)
        kind = self.validators[validator]
        final = challenge.round > 0
        ours = host == "cheat1" and self.cheater_in_coalition
        honest = self.truth(host, challenge.segment)
        if kind == "honest" or (kind == "withholder" and not ours) or (kind == "copier" and not final):
            outcome, distance = honest, self.honest_distance(host, challenge.segment)
        elif kind == "trap_reader" and (self.env.current() - self.traps_seen.get(host, -10**9) <= TRAP_MEMORY
                                        or (final and challenge.segment in self.env.traps.get(host, ()))):
            # (a trap opened this epoch is public in the final round)
            outcome, distance = honest, self.honest_distance(host, challenge.segment)
            self.replayed += 1
        elif kind in ("colluder", "sybil", "withholder"):
            outcome, distance = ("pass" if ours else "fail"), BLIND_DISTANCE
        elif kind == "trap_reader":
            outcome, distance = "pass", BLIND_DISTANCE
            self.blind += 1
        elif kind == "copier":  # a guess: it was disputed, so somebody objected
            outcome, distance = "fail", BLIND_DISTANCE
        else:  # unavailable
            outcome, distance = "unavailable", BLIND_DISTANCE
        self.env.distances[validator, challenge.host, challenge.segment] = distance
        return outcome

    def _hits_fakes(self, name: str, epoch: int, joined: dict[str, int], prev_seed: bytes) -> bool:
        """Whether ``name`` picks a faked segment of the cheater (it knows its own secret and picks)."""
        cheater = self.env.addr("cheat1")
        if self.env.addr(name) not in pickers(prev_seed, cheater, joined, SEATS_CAP):
            return False
        return bool(set(picks(self.env.secret(name, epoch), cheater, SEGMENTS, K)) & self.fakes["cheat1"])

    # -- an epoch ------------------------------------------------------------------------------

    def _eligible(self, name: str, minimum: int) -> bool:
        member = self.env.ledger.member(self.env.addr(name))
        return member is not None and int(member.bonded) >= minimum

    def play_epoch(self) -> EpochReport:
        env, econ = self.env, self.spec.economics
        e = env.current()
        self.replayed = self.blind = 0
        self.predicted = False
        hosts = [h for h in self.hosts if self._eligible(h, int(econ.min_host_stake))]
        validators = [v for v in sorted(self.validators, key=lambda v: v not in self.coalition)
                      if self._eligible(v, int(econ.min_validator_stake))]
        self.fakes = {"cheat1": set(self.rng.sample(range(SEGMENTS - 1), FAKED))}
        env.traps = {h: [self.rng.randrange(SEGMENTS)] for h in hosts
                     if self.hosts[h] == "honest" and self.rng.random() < P_TRAP}
        for name in [*validators, *hosts]:  # the coalition first
            with contextlib.suppress(ContractError):  # an evicted sybil is refused
                env.join(name, e)
        if env.epoch(e).phase == "join":  # more eligible than seats: join runs to its deadline
            env._leave("join", e)
        env.play_epoch(hosts, validators, stop_after="train")
        info = env.epoch(e)
        joined_names = [env.name_of(a) for a in info.validators]
        withheld: list[str] = []
        honest_pickers = 0
        if info.phase == "reveal":
            report = env.report(e)
            joined = {v.address: int(v.stake) for v in report.validators}
            prev_seed = bytes.fromhex(info.prev_seed)
            chosen = set(pickers(prev_seed, env.addr("cheat1"), joined, SEATS_CAP))
            honest_pickers = sum(env.addr(v) in chosen for v in joined_names if self.validators[v] == "honest")
            # The formula's event: an honest picker's own picks hit a faked segment.
            self.predicted = any(set(picks(env.secret(v, e), env.addr("cheat1"), SEGMENTS, K)) & self.fakes["cheat1"]
                                 for v in joined_names if self.validators[v] == "honest" and env.addr(v) in chosen)
            for name in [*hosts, *joined_names]:
                if self.validators.get(name) == "withholder" and self._hits_fakes(name, e, joined, prev_seed):
                    withheld.append(name)
                    continue
                env.reveal(name, e)
        env.play_epoch(hosts, joined_names, reveal=[], vote=self.vote)
        report = env.report(e)
        assert env.total_funds() == self.initial_funds, "funds not conserved"
        env.assert_books()
        for h in report.hosts:
            if h.traps:
                self.traps_seen[env.name_of(h.address)] = e
        self._record(report, joined_names, withheld, honest_pickers)
        for name, stake in self.stakes.items():  # top up: bonding moves coins, the total stays
            member = env.ledger.member(env.addr(name))
            short = stake - (int(member.bonded) if member else 0)
            if short > 0:
                env.bond(name, short, role="host" if name in self.hosts else "validator")
        return report

    def _record(self, report: EpochReport, joined: Sequence[str], withheld: Sequence[str], honest_pickers: int) -> None:
        env = self.env
        parts: list[HostReport | ValidatorReport] = [*report.hosts, *report.validators]
        members = {env.name_of(m.address): m for m in parts}
        coalition = set(self.coalition) | ({"cheat1"} if self.cheater_in_coalition else set())

        def net(names: set[str]) -> int:
            return sum(int(m.reward) + int(m.catcher_reward) - int(m.slashed) for n, m in members.items() if n in names)

        honest = {n for n, s in {**self.hosts, **self.validators}.items() if s == "honest"}
        cheat = members.get("cheat1")
        self.rows.append({
            "epoch": report.epoch, "agreed": bool(report.agreed),
            "honest_slashed": sum(int(m.slashed) for n, m in members.items() if n in honest),
            "honest_validators_seated": sum(self.validators[n] == "honest" for n in joined),
            "coalition_seated_stake": sum(int(m.stake) for n, m in members.items() if n in self.coalition),
            "validator_stake": sum(int(v.stake) for v in report.validators),
            "coalition_net": net(coalition), "coalition_slashed": sum(int(members[n].slashed) for n in coalition
                                                                      if n in members),
            "coalition_paid": sum(int(members[n].reward) + int(members[n].catcher_reward) for n in coalition
                                  if n in members),
            "coalition_outcomes": [members[n].outcome for n in sorted(coalition) if n in members],
            "cheater": cheat.outcome if cheat else None, "honest_pickers": honest_pickers,
            "honest_pick_hit": self.predicted,
            "disputed": sum(c.rounds > 0 for c in report.challenges),
            "challenges": len(report.challenges), "traps": sum(bool(h.traps) for h in report.hosts),
            "withheld": len(withheld), "replayed": self.replayed, "blind": self.blind,
            "honest_host_outcomes": [m.outcome for n, m in members.items() if self.hosts.get(n) == "honest"],
        })


def p_miss(n: int, m: int, k: int) -> float:
    """One picker's chance to pick none of ``m`` faked among ``n`` segments with ``k`` distinct picks."""
    return math.comb(n - m, k) / math.comb(n, k)


def run(scenario: str, share: str, epochs: int, seed: int, deadline_s: float,
        cache_queries: bool = True) -> dict[str, Any]:
    started = time.perf_counter()
    game = AttackGame(scenario, share, seed, cache_queries)
    for _ in range(epochs):
        game.play_epoch()
        if deadline_s and time.perf_counter() - started > deadline_s:
            break
    rows = game.rows
    played = len(rows)
    caught = sum(r["cheater"] == "invalid" for r in rows)
    judged = [r for r in rows if r["cheater"] in ("invalid", "accepted")]
    n = SEGMENTS - 1
    miss = p_miss(n, FAKED, K)
    exact = sum(1 - miss ** r["honest_pickers"] for r in judged) / max(1, len(judged))
    outcomes: dict[str, int] = {}
    for r in rows:
        for o in r["coalition_outcomes"]:
            outcomes[o] = outcomes.get(o, 0) + 1
    seated = [r["coalition_seated_stake"] / max(1, r["validator_stake"]) for r in rows]
    out = {
        "scenario": scenario, "coalition_share": share, "identities": len(game.coalition),
        "coalition_share_measured": round(sum(seated) / max(1, played), 4),
        "epochs": played, "agreed_epochs": sum(r["agreed"] for r in rows),
        "honest_slashed": sum(r["honest_slashed"] for r in rows),
        "honest_hosts_not_accepted": sum(o != "accepted" for r in rows for o in r["honest_host_outcomes"]),
        "honest_validators_seated_min": min((r["honest_validators_seated"] for r in rows), default=0),
        "cheater_in_coalition": game.cheater_in_coalition,
        "cheater": {"epochs": len(judged), "caught": caught, "measured": round(caught / max(1, len(judged)), 4),
                    "bound_one_honest_picker": round(1 - (1 - FAKED / n) ** K, 4), "exact": round(exact, 4),
                    "honest_pick_hit": sum(r["honest_pick_hit"] for r in judged),
                    "caught_without_honest_hit": sum(r["cheater"] == "invalid" and not r["honest_pick_hit"]
                                                     for r in judged),
                    "missed_with_honest_hit": sum(r["cheater"] != "invalid" and r["honest_pick_hit"] for r in judged),
                    "stderr": round(math.sqrt(exact * (1 - exact) / max(1, len(judged))), 4),
                    "honest_pickers_mean": round(sum(r["honest_pickers"] for r in rows) / max(1, played), 2)},
        "coalition": {"net": sum(r["coalition_net"] for r in rows), "paid": sum(r["coalition_paid"] for r in rows),
                      "slashed": sum(r["coalition_slashed"] for r in rows), "outcomes": outcomes},
        "disputed": sum(r["disputed"] for r in rows), "challenges": sum(r["challenges"] for r in rows),
        "traps": sum(r["traps"] for r in rows), "withheld": sum(r["withheld"] for r in rows),
        "trap_reader_replayed": sum(r["replayed"] for r in rows), "trap_reader_blind": sum(r["blind"] for r in rows),
        "funds_conserved": game.env.total_funds() == game.initial_funds,
        "seconds": round(time.perf_counter() - started, 1),
    }
    print(f"{scenario} @ {share}: {played} epochs in {out['seconds']} s", file=sys.stderr, flush=True)
    return out


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| attack | β | ids | epochs | θ agreed | honest slashed | cheater caught (bound / exact) | "
             "coalition net (paid − slashed) | coalition outcomes | disputed / challenges | funds |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        c, co = r["cheater"], r["coalition"]
        outcomes = ", ".join(f"{o} {n}" for o, n in sorted(co["outcomes"].items()))
        who = "" if r["cheater_in_coalition"] else " (not the coalition's)"
        lines.append(
            f"| {r['scenario']} | {r['coalition_share']} ({r['coalition_share_measured']:.3f}) | {r['identities']} | "
            f"{r['epochs']} | {r['agreed_epochs']} | {r['honest_slashed']} | {c['caught']}/{c['epochs']} = "
            f"{c['measured']:.3f} ({c['bound_one_honest_picker']:.3f} / {c['exact']:.3f}){who} | "
            f"{co['net']} ({co['paid']} − {co['slashed']}) | {outcomes} | {r['disputed']} / {r['challenges']} | "
            f"{'yes' if r['funds_conserved'] else 'NO'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--deadline-s", type=float, default=0.0, help="stop each run after this wall time (0: none)")
    parser.add_argument("--only", default="", help="comma-separated scenarios (default: all)")
    parser.add_argument("--shares", default=",".join(BETAS), help="comma-separated coalition shares")
    parser.add_argument("--uncached-queries", action="store_true",
                        help="run the contract for every query (the embedded chain's cache off: to time it)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    jobs = [(s, b) for s in SCENARIOS if not args.only or s in args.only.split(",")
            for b in args.shares.split(",")]
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(run, s, b, args.epochs, args.seed, args.deadline_s, not args.uncached_queries)
                   for s, b in jobs]
        results = [f.result() for f in futures]
    summary = {"spec": {"segments": SEGMENTS, "challenges_k": K, "seats_cap": SEATS_CAP, "faked": FAKED,
                        "p_trap": P_TRAP, "trap_memory": TRAP_MEMORY, "honest_hosts": HONEST_HOSTS,
                        "honest_validators": HONEST_VALIDATORS, "honest_stake": HONEST_STAKE,
                        "host_stake": HOST_STAKE, "reward_per_epoch": REWARD},
               "results": results}
    print(json.dumps(summary, indent=1))
    print(table(results))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1))
    bad = [r for r in results if r["honest_slashed"] or not r["funds_conserved"]]
    if bad:
        where = [(r["scenario"], r["coalition_share"]) for r in bad]
        raise SystemExit(f"honest parties slashed or funds not conserved in {where}")


if __name__ == "__main__":
    main()
