"""Random sequences of messages from random participants with random block advances: after every
step funds are conserved to the last unit and the books balance, and no sequence traps the
contract (a refusal is a ``ContractError``; a ``VmError`` or any other exception is a bug).

Runs on the embedded chain, where the whole bank can be summed: total supply is constant and the
contract's balance equals bonded + unbonding + reward pool. Short phases (a few blocks, and every
transaction is a block) make random walks cross epochs, finalize, slash and pay.
"""

from __future__ import annotations

import contextlib
import hashlib
import json

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from ledger_env import DENOM, EmbeddedDriver, LedgerEnv, digest, make_spec

from chain.ledger import ContractError
from protocol.views import (
    VERDICT_COMMIT_PHASES,
    VERDICT_REVEAL_PHASES,
    EpochInfo,
    EpochReport,
    HostReport,
    Member,
    ValidatorReport,
)

HOSTS = ["host1", "host2", "host3"]
VALIDATORS = ["validator1", "validator2", "validator3"]
MEMBERS = [*HOSTS, *VALIDATORS]
NAMES = ["operator", "treasury", "funder", "outsider", *MEMBERS]
SPEC = make_spec(
    reward_per_epoch="700", unbonding_epochs=1, min_host_stake="2000000", min_validator_stake="1000000",
    phases={"join_blocks": 12, "train_blocks": 10, "reveal_blocks": 10, "verify_blocks": 20,
            "verdict_reveal_blocks": 10, "propose_blocks": 10, "min_hosts": 1, "min_validators": 1, "max_hosts": 3,
            "max_validators": 3, "max_join_extensions": 3},
)
MODELS = [digest("model-a"), digest("model-b")]

names = st.sampled_from(MEMBERS)
anyone = st.sampled_from(NAMES)
amounts = st.integers(min_value=1, max_value=14_000_000)
epoch_offsets = st.sampled_from([0, 0, 0, -1, 1])


class ContractMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.env = LedgerEnv(EmbeddedDriver(SPEC, NAMES))
        self.chain = self.env.driver.chain
        self.supply = self.chain.total_supply(DENOM)
        self.steps = 0

    def attempt(self, action) -> None:
        """Run one message; a refusal is fine, anything else (a trap) is a bug."""
        self.steps += 1
        with contextlib.suppress(ContractError):
            action()

    def epoch_of(self, offset: int) -> int:
        return max(0, self.env.current() + offset)

    @initialize(stakes=st.lists(st.sampled_from([0, 800_000, 1_999_999, 2_000_000, 4_000_000, 10_000_000,
                                                 10_000_000, 10_000_000]), min_size=6,
                                max_size=6),
                pool=st.sampled_from([0, 300, 5_000]))
    def start(self, stakes: list[int], pool: int) -> None:
        for name, stake in zip(MEMBERS, stakes, strict=True):
            if stake:
                self.attempt(lambda name=name, stake=stake: self.env.bond(name, stake))
        if pool:
            self.attempt(lambda: self.env.fund_rewards(pool))

    # -- honest moves, so that random walks cross phases and epochs ---------------------------------

    @rule(who=st.lists(names, min_size=1, max_size=6, unique=True),
          outcomes=st.lists(st.sampled_from(["pass"] * 12 + ["fail", "unavailable", None]),
                            min_size=8, max_size=8),
          model=st.sampled_from(MODELS))
    def act(self, who: list[str], outcomes: list[str | None], model: str) -> None:
        """Each of ``who`` does what the current phase expects of it (verdicts drawn from
        ``outcomes``, None = stays silent)."""
        self._act(who, outcomes, model)

    @rule(outcomes=st.lists(st.sampled_from(["pass"] * 12 + ["fail", "unavailable", None]),
                            min_size=8, max_size=8),
          model=st.sampled_from(MODELS))
    def everyone_acts(self, outcomes: list[str | None], model: str) -> None:
        self._act(MEMBERS, outcomes, model)

    def _act(self, who: list[str], outcomes: list[str | None], model: str) -> None:
        for name in who:
            info = self.env.epoch()
            e = info.epoch
            if info.phase == "join":
                self.attempt(lambda name=name, e=e: self.env.join(name, e))
            elif info.phase == "train":
                self.attempt(lambda name=name, e=e: self.env.commit(name, e))
            elif info.phase == "reveal":
                self.attempt(lambda name=name, e=e: self.env.reveal(name, e))
            elif info.phase in VERDICT_COMMIT_PHASES and name in VALIDATORS:
                for i, c in enumerate(self.env.round_challenges(name, e)):
                    outcome = outcomes[i % len(outcomes)]
                    if outcome is not None and not c.committed:
                        self.attempt(lambda name=name, c=c, outcome=outcome, e=e:
                                     self.env.commit_verdict(name, c.host, c.segment, outcome, epoch=e))
            elif info.phase in VERDICT_REVEAL_PHASES and name in VALIDATORS:
                for c in self.env.round_challenges(name, e):
                    if c.committed and not c.revealed:
                        self.attempt(lambda name=name, c=c, e=e:
                                     self.env.reveal_verdict(name, c.host, c.segment, epoch=e))
            elif info.phase == "verdict_reveal" and name in HOSTS:
                self.attempt(lambda name=name, e=e: self.env.open_traps(name, e))
            elif info.phase == "propose":
                self.attempt(lambda name=name, e=e: self.env.propose(name, model, e))

    # -- stake -------------------------------------------------------------------------------------

    @rule(name=names, amount=amounts)
    def bond(self, name: str, amount: int) -> None:
        self.attempt(lambda: self.env.bond(name, amount))

    @rule(name=names, amount=amounts)
    def unbond(self, name: str, amount: int) -> None:
        self.attempt(lambda: self.env.unbond(name, amount))

    @rule(name=names)
    def claim(self, name: str) -> None:
        self.attempt(lambda: self.env.claim(name))

    @rule(amount=st.integers(min_value=1, max_value=3_000))
    def fund_rewards(self, amount: int) -> None:
        self.attempt(lambda: self.env.fund_rewards(amount))

    # -- the epoch ---------------------------------------------------------------------------------

    @rule(name=anyone, offset=epoch_offsets, honest=st.booleans())
    def join(self, name: str, offset: int, honest: bool) -> None:
        epoch = self.epoch_of(offset)
        beacon = None if honest else digest(f"garbage:{name}:{epoch}")
        self.attempt(lambda: self.env.join(name, epoch, beacon=beacon))

    @rule(name=anyone, offset=epoch_offsets, segments=st.sampled_from([2, 2, 2, 1, 3]))
    def commit(self, name: str, offset: int, segments: int) -> None:
        self.attempt(lambda: self.env.commit(name, self.epoch_of(offset), segments=segments))

    @rule(name=anyone, offset=epoch_offsets, honest=st.booleans())
    def reveal(self, name: str, offset: int, honest: bool) -> None:
        epoch = self.epoch_of(offset)
        secret = None if honest else hashlib.sha256(f"wrong:{name}".encode()).digest()
        self.attempt(lambda: self.env.reveal(name, epoch, secret=secret))

    @rule(name=st.sampled_from([*VALIDATORS, "host1", "outsider"]), pick=st.integers(0, 7),
          outcome=st.sampled_from(["pass", "pass", "fail", "unavailable"]), assigned=st.booleans(),
          open_it=st.booleans())
    def verdict(self, name: str, pick: int, outcome: str, assigned: bool, open_it: bool) -> None:
        epoch = self.env.current()
        mine = self.env.challenges(name, epoch) if name in VALIDATORS else []
        if assigned and mine:
            c = mine[pick % len(mine)]
            host, segment = c.host, c.segment
        else:
            host, segment = self.env.addr(HOSTS[pick % len(HOSTS)]), pick % 3
        if open_it and (name, host, segment, epoch) in self.env.openings:
            self.attempt(lambda: self.env.reveal_verdict(name, host, segment, epoch=epoch))
        else:
            self.attempt(lambda: self.env.commit_verdict(name, host, segment, outcome, epoch=epoch))

    @rule(name=st.sampled_from([*HOSTS, "validator1", "outsider"]), honest=st.booleans())
    def open_traps(self, name: str, honest: bool) -> None:
        self.attempt(lambda: self.env.open_traps(name, segments=None if honest else [0]))

    @rule(name=anyone, model=st.sampled_from(MODELS), offset=epoch_offsets)
    def propose(self, name: str, model: str, offset: int) -> None:
        self.attempt(lambda: self.env.propose(name, model, self.epoch_of(offset)))

    @rule(name=anyone)
    def advance(self, name: str) -> None:
        self.attempt(lambda: self.env.advance(name))

    @rule(blocks=st.integers(min_value=1, max_value=12))
    def mine(self, blocks: int) -> None:
        self.env.mine(blocks)

    @rule(name=anyone, msg=st.sampled_from([
        {"join": {"epoch": -1, "beacon_commit": "00" * 32}},
        {"commit": {"epoch": 0}},
        {"commit_verdict": {"epoch": 0, "host": "inj1" + "q" * 38, "segment": 4294967295,
                            "commitment": "00" * 32}},
        {"commit_verdict": {"epoch": 0, "host": "x" * 300, "segment": 0, "commitment": "00" * 32}},
        {"reveal_verdict": {"epoch": 0, "host": "inj1" + "q" * 38, "segment": 0, "outcome": "fail",
                            "distance": "0", "evidence": "00" * 32, "salt": "00" * 32}},
        {"reveal_traps": {"epoch": 0, "segments": [4294967295, 0], "salt": "00" * 32}},
        {"reveal_traps": {"epoch": 0, "segments": list(range(3000)), "salt": "zz"}},
        {"propose_model": {"epoch": 18446744073709551615, "model_hash": "00" * 32, "val_loss_micro": 0}},
        {"reveal": {"epoch": 0, "secret": "zz"}},
        {"advance": {"now": True}},
        {"unbond": {"amount": "340282366920938463463374607431768211455"}},
    ]), funds=st.sampled_from([0, 0, 1]))
    def malformed(self, name: str, msg: dict, funds: int) -> None:
        self.attempt(lambda: self.env.raw(name, msg, funds))

    # -- invariants ---------------------------------------------------------------------------------

    @invariant()
    def funds_are_conserved(self) -> None:
        assert self.chain.total_supply(DENOM) == self.supply

    # Queries take most of this property's time (the invariants run after every step), so the
    # invariants that read the same answers share one query of each: the member list, the epoch and
    # its report. Nothing moves between them.

    @invariant()
    def the_books_balance(self) -> None:
        accounting = self.env.accounting()
        assert self.env.balance(self.env.address) == sum(accounting.values())
        members = self.env.ledger.members()
        assert accounting["bonded"] == sum(int(m.bonded) for m in members)
        assert accounting["unbonding"] == sum(int(u.amount) for m in members for u in m.unbonding)
        self.eligibility_counts_are_exact(members)

    def eligibility_counts_are_exact(self, members: list[Member]) -> None:
        stored = json.loads(self.chain.raw_storage(self.env.address, b"eligible") or b"{}")
        minimum = {"host": 2_000_000, "validator": 1_000_000}
        counts = {"hosts": 0, "validators": 0}
        for m in members:
            if int(m.bonded) >= minimum[m.role] and int(m.bonded) > 0:
                counts[m.role + "s"] += 1
        assert {"hosts": stored.get("hosts", 0), "validators": stored.get("validators", 0)} == counts

    @invariant()
    def queries_answer_in_shape(self) -> None:
        info = self.env.epoch()  # the Ledger validates every answer against protocol.views
        assert info.phase != "closed"
        report = self.env.report(info.epoch)
        if info.epoch > 0:
            previous = self.env.epoch(info.epoch - 1)
            assert previous.phase == "closed"
            assert info.prev_seed == previous.seed and info.model_hash == previous.next_model_hash
            done = self.env.report(info.epoch - 1)
            paid = sum(int(h.reward) for h in done.hosts) + sum(
                int(v.reward) for v in done.validators)
            assert str(paid) == done.rewards_total
            assert int(done.to_treasury) + int(done.to_catchers) == int(done.slashed_total)
        assert len(report.hosts) <= 3 and len(report.validators) <= 3
        self.node_queries_agree_with_the_report(info, report)

    def node_queries_agree_with_the_report(self, info: EpochInfo, report: EpochReport) -> None:
        # What the nodes poll (participant status, aggregation inputs) says what the report says,
        # one query per participant.
        rows: list[HostReport | ValidatorReport] = [*report.hosts, *report.validators]
        statuses = {row.address: self.env.ledger.participant(row.address) for row in rows}
        for row in rows:
            status = statuses[row.address]
            assert (status.epoch, status.phase, status.joined) == (info.epoch, info.phase, True)
            assert (status.stake, status.revealed, status.outcome) == (row.stake, row.revealed, row.outcome)
        for host in report.hosts:
            status = statuses[host.address]
            assert status.committed == (host.commitment is not None)
            assert status.proposed == (host.proposal is not None)
        for validator in report.validators:
            status = statuses[validator.address]
            assert (status.assigned, status.voted) == (validator.assigned, validator.voted)
            assert status.to_commit + status.to_reveal <= status.assigned
        inputs = self.env.ledger.aggregation_inputs(info.epoch)
        accepted = [h for h in report.hosts if h.outcome == "accepted"]
        assert [(i.address, i.delta_hash) for i in inputs] == [
            (h.address, h.commitment.delta_hash) for h in accepted if h.commitment is not None]
        assert len(inputs) == len(accepted)


def test_random_sequences_conserve_funds_and_never_trap() -> None:
    """As many runs, as long, as the hypothesis profile says (tests/conftest.py): 5 runs of 40 steps
    in the default ``dev`` profile, 25 runs of 80 steps in ``ci`` (``make test``)."""
    profile = settings.default  # the loaded profile
    # Each example is a whole contract run of up to stateful_step_count transactions (about 0.6 s at
    # 40 on 2 cores), so the machine runs fewer examples than a plain property: 1/4 of the profile's.
    # Every CI run draws fresh ones (no example database in a fresh clone), so runs add up.
    ContractMachine.TestCase.settings = settings(
        profile, max_examples=max(1, profile.max_examples // 4),
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    ContractMachine.TestCase().runTest()
