"""The settlement game played on the real contract with strategies instead of training.

Each party follows a strategy of the catalogue (``verifier/adversaries``: the same names as
``veriloco simulate``). Hosts do not train and validators do not replay: what an honest replay
would find is the *ground truth* of the host's behaviour — a faked or trapped segment fails, any
other passes, and a reader the host does not serve sees ``unavailable``. Whether a real replay
finds that truth is what the verifier's own tests and benchmarks measure (``bench/verifier``);
this driver measures the game on top of it, fast enough for hundreds of epochs and for property
tests. Everything else is the real thing: the same wasm on the embedded chain, the same
messages (beacon commit/reveal, commitments with trap commitments, verdict commit/open, trap
openings, proposals, ``advance``), the same windows and deadlines.

Used by ``tests/chain/test_game_properties.py`` (random strategy mixtures) and by
``bench/settlement_game.py`` (each strategy and mixtures over hundreds of epochs).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ledger_env import DEFAULT_NAMES, HOST_STAKE, VALIDATOR_STAKE, EmbeddedDriver, LedgerEnv, make_spec

from chain.ledger import ContractError
from protocol.rules.sampling import challenge_seats, pickers
from protocol.rules.spec import RunSpec
from protocol.views import Challenge, EpochReport, validator_weights

HOST_STRATEGIES = ("honest", "auditor", "lazy", "selective_serve", "selective_reveal", "withhold")
"""``honest`` and ``auditor`` (an honest host with one trap segment a round) are honest parties."""
VALIDATOR_STRATEGIES = ("honest", "always_pass", "always_fail", "silent", "copycat", "false_unavailable",
                        "colluder")
"""``copycat`` commits a copy of another validator's commitment, which never opens (the contract
binds a commitment to its committer; the e2e test plays the real copy): it commits and never opens.
``false_unavailable`` claims every host refused it. ``colluder``: one identity of a coalition that
fails every seat it holds without replaying (at :data:`BLIND_DISTANCE`), objects to every one of
them and fails every final vote it casts (the issue-27 attack: two colluders on one challenge used
to decide it at once)."""
HONEST = frozenset({"honest", "auditor"})
BLIND_DISTANCE = "0.5"
"""The distance a ``colluder`` opens with its fails: reached without the replay, it cannot be the
honest replay's (``ledger_env`` makes the evidence from the outcome and the distance), so its fail
is never in the deciding group of an honest fail and earns no catcher share."""


def game_spec(segments: int = 8, k: int = 2, r: int = 2, seats_cap: int = 19, **economics) -> RunSpec:
    """The game's spec: ``segments`` segments, ``k`` picks per picker plus the last, pickers drawn
    by stake up to ``seats_cap`` seats, windows long enough for every party on a chain that
    includes one transaction per block (every validator may vote on every disputed challenge)."""
    return make_spec(
        train={"inner_steps": 2 * segments, "segment_steps": 2},
        verification={"challenges_k": k, "validators_r": r, "seats_cap": seats_cap,
                      "trap_max_distance": "1"},
        phases={"join_blocks": 60, "train_blocks": 60, "reveal_blocks": 60, "verify_blocks": 300,
                "verdict_reveal_blocks": 300, "propose_blocks": 60, "max_hosts": 64, "max_validators": 64},
        reward_per_epoch="1000", **economics)


@dataclass
class Tally:
    """What one party's strategy earned over the epochs played."""

    epochs: int = 0
    slashed: int = 0
    slashed_epochs: int = 0
    paid: int = 0
    paid_epochs: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)


class Game:
    """Parties with strategies on a fresh embedded chain.

    Args:
        hosts: host name -> strategy (:data:`HOST_STRATEGIES`).
        validators: validator name -> strategy (:data:`VALIDATOR_STRATEGIES`).
        spec: the run spec (:func:`game_spec` by default).
        seed: the seed of every random choice (which segments are faked, trapped; beacon secrets).
        top_up: whether a party slashed below its bond is topped up after each epoch (so a
            strategy keeps playing: its cost per epoch is then measured over every epoch).
        settle_page: the contract's page for closes that run over several transactions (None:
            its default, which settles these small games in one transaction).
        stakes: party name -> its bond (default: ``HOST_STAKE`` / ``VALIDATOR_STAKE``); the top-up
            restores these.
    """

    def __init__(self, hosts: Mapping[str, str], validators: Mapping[str, str], *, spec: RunSpec | None = None,
                 seed: int = 0, top_up: bool = True, settle_page: int | None = None,
                 stakes: Mapping[str, int] | None = None) -> None:
        for name, s in hosts.items():
            assert s in HOST_STRATEGIES, (name, s)
        for name, s in validators.items():
            assert s in VALIDATOR_STRATEGIES, (name, s)
        self.hosts, self.validators = dict(hosts), dict(validators)
        self.spec = spec or game_spec()
        names = [*DEFAULT_NAMES, *(n for n in [*hosts, *validators] if n not in DEFAULT_NAMES)]
        self.env = LedgerEnv(EmbeddedDriver(self.spec, names, settle_page=settle_page))
        self.env.revote = self.vote  # an objecting seat re-votes what it finds now (a refused one reads holders)
        self.rng = random.Random(seed)
        self.top_up = top_up
        self.stakes = {**dict.fromkeys(hosts, HOST_STAKE), **dict.fromkeys(validators, VALIDATOR_STAKE),
                       **(stakes or {})}
        for name in [*hosts, *validators]:
            self.env.bond(name, self.stakes[name], role=self.role(name))
        self.env.fund_rewards(10**12)
        self.initial_funds = self.env.total_funds()
        self.tallies = {name: Tally() for name in [*hosts, *validators]}
        self.reports: list[EpochReport] = []
        self.segments = self.spec.train.segments
        self._salt = self.rng.getrandbits(64)

    def role(self, name: str) -> str:
        return "host" if name in self.hosts else "validator"

    # -- ground truth ----------------------------------------------------------------------------

    def _faked(self, strategy: str) -> set[int]:
        s = self.segments
        if strategy in ("lazy", "selective_serve"):
            return set(range(s))  # no training at all
        if strategy == "selective_reveal":
            return {self.rng.randrange(s - 1)}  # one segment before the last (lazy:1 of them)
        return set()

    def truth(self, host: str, segment: int, reader: str, challenge: Challenge | None = None) -> str:
        """What an honest replay by ``reader`` finds on ``host``'s ``segment`` this epoch.

        A ``selective_serve`` host serves the first reader that asks and refuses everyone else; a
        refused honest reader reads the leaves from a holder (``node.leaf_holding``): the served
        reader holds them once it read them, which it does for every challenge it sits on — a
        round-0 seat of ``challenge``, or any challenge in the final round, where every member of
        V votes. Only where the served reader never read them (a round-0 seat it does not hold) is
        the refused reader left with ``unavailable``."""
        strategy = self.hosts[host]
        if strategy == "withhold":
            return "unavailable"
        if strategy == "selective_serve":
            served = self._served.setdefault(host, reader)  # the first reader that asks
            held = challenge is not None and (challenge.round >= 1 or self.env.addr(served) in challenge.validators)
            if served != reader and not held:
                return "unavailable"
        bad = segment in self._fakes.get(host, set()) or segment in self.env.traps.get(host, [])
        return "fail" if bad else "pass"

    def vote(self, validator: str, challenge: Challenge) -> str | tuple[str, str] | None:
        strategy = self.validators[validator]
        host = self.env.name_of(challenge.host)
        if strategy == "honest":
            return self.truth(host, challenge.segment, validator, challenge)
        if strategy == "colluder":  # a fail decided without the replay: not the honest distance
            return "fail", BLIND_DISTANCE
        return {"always_pass": "pass", "always_fail": "fail", "silent": None, "copycat": "pass",
                "false_unavailable": "unavailable"}[strategy]

    def opens(self, validator: str, challenge: Challenge) -> bool:
        return self.validators[validator] != "copycat"

    # -- an epoch --------------------------------------------------------------------------------

    def _eligible(self, name: str, minimum: int) -> bool:
        member = self.env.ledger.member(self.env.addr(name))
        return member is not None and int(member.bonded) >= minimum

    def _would_be_hit(self, host: str, e: int, revealers: Sequence[str]) -> bool:
        """``selective_reveal``: read every other reveal and compute its challenges. They come from
        its pickers' secrets alone, so its own reveal changes nothing: withholding only costs it."""
        info = self.env.epoch(e)
        report = self.env.report(e)
        joined = validator_weights(report.validators)
        chosen = pickers(bytes.fromhex(info.prev_seed), self.env.addr(host), joined,
                         self.spec.verification.seats_cap)
        revealed = {self.env.addr(n): self.env.secret(n, e) for n in revealers}
        secrets = {p: revealed[p] for p in chosen if p in revealed}
        seats = challenge_seats(secrets, self.env.addr(host), self.segments, self.spec.verification.challenges_k)
        return bool(set(seats) & self._fakes[host])

    def play_epoch(self) -> EpochReport:
        env, econ = self.env, self.spec.economics
        e = env.current()
        self._served: dict[str, str] = {}
        hosts = [h for h in self.hosts if self._eligible(h, int(econ.min_host_stake))]
        validators = [v for v in self.validators if self._eligible(v, int(econ.min_validator_stake))]
        self._fakes = {h: self._faked(self.hosts[h]) for h in hosts}
        env.traps = {h: [self.rng.randrange(self.segments)] for h in hosts if self.hosts[h] == "auditor"}
        for name in [*hosts, *validators]:
            with contextlib.suppress(ContractError):
                env.join(name, e)
        env.play_epoch(hosts, validators, stop_after="train")  # everyone commits (with its trap commitment)
        if env.epoch(e).phase == "reveal":
            plain = [n for n in [*hosts, *validators] if self.hosts.get(n) != "selective_reveal"]
            for name in plain:
                env.reveal(name, e)
            for host in (h for h in hosts if self.hosts[h] == "selective_reveal"):
                if not self._would_be_hit(host, e, plain):
                    env.reveal(host, e)
        # Nobody reveals twice; a withheld reveal is waited out to the deadline.
        env.play_epoch(hosts, validators, reveal=[], vote=self.vote, open_verdict=self.opens)
        report = env.report(e)
        self._account(report)
        return report

    def _account(self, report: EpochReport) -> None:
        env = self.env
        assert env.total_funds() == self.initial_funds, "funds not conserved"
        env.assert_books()
        self.reports.append(report)
        for member in [*report.hosts, *report.validators]:
            name = env.name_of(member.address)
            t = self.tallies[name]
            t.epochs += 1
            t.outcomes[member.outcome] = t.outcomes.get(member.outcome, 0) + 1
            slashed, paid = int(member.slashed), int(member.reward) + int(member.catcher_reward)
            t.slashed += slashed
            t.slashed_epochs += slashed > 0
            t.paid += paid
            t.paid_epochs += paid > 0
        if self.top_up:  # bonding moves coins from an account to the contract: the total stays
            for name, stake in self.stakes.items():
                member = env.ledger.member(env.addr(name))
                short = stake - (int(member.bonded) if member else 0)
                if short > 0:
                    env.bond(name, short, role=self.role(name))

    def play(self, epochs: int) -> list[EpochReport]:
        return [self.play_epoch() for _ in range(epochs)]

    def honest_slashed(self) -> int:
        """Everything any honest party was slashed (must be 0)."""
        return sum(t.slashed for n, t in self.tallies.items()
                   if (self.hosts.get(n) or self.validators.get(n)) in HONEST)
