"""Finalize: every slash path, the catcher share and the treasury, every reward path, slashing
of unbonding stake, claims across epochs, and a full epoch of 8 hosts and 4 validators.

Amounts are exact, in base units, checked three ways: the report, the members' records, and the
bank (``net_balance``: balances plus the fees the account paid, so the assertions hold on
fee-charging chains). After each scenario funds are conserved and the books balance.

Test spec (``ledger_env.make_spec``): hosts bond 5000, validators 2000; slash bps: invalid 5000,
unavailable 1000, absent 500, no_reveal 500, validator wrong 2000, silent 500; catcher share
5000; host reward share 8000.
"""

from __future__ import annotations

import pytest
from ledger_env import HOST_STAKE, VALIDATOR_STAKE, LedgerEnv, make_spec

from chain.ledger import ContractError

HOSTS = ["host1", "host2"]
VALIDATORS = ["validator1", "validator2"]
V3 = ["validator1", "validator2", "validator3"]


def setup(env: LedgerEnv, hosts=HOSTS, validators=VALIDATORS):
    env.bond_all([*hosts, *validators])
    names = ["treasury", *hosts, *validators]
    return env.total_funds(), {n: env.net_balance(n) for n in names}


def gained(env: LedgerEnv, before: dict[str, int]) -> dict[str, int]:
    return {n: env.net_balance(n) - b for n, b in before.items() if env.net_balance(n) != b}


def by_name(env: LedgerEnv, rows) -> dict:
    return {env.name_of(r.address): r for r in rows}


def fail_host(env: LedgerEnv, target: str, outcome: str = "fail"):
    return lambda validator, c: outcome if c.host == env.addr(target) else "pass"


def check_conserved(env: LedgerEnv, total: int) -> None:
    assert env.total_funds() == total
    env.assert_books()


# -- host slashes --------------------------------------------------------------------------------


def test_an_invalid_host_is_slashed_and_its_catchers_paid(make_ledger_env) -> None:
    env = make_ledger_env()
    total, before = setup(env, validators=V3)
    env.play_epoch(HOSTS, V3, vote=fail_host(env, "host1"))
    report = env.report(0)
    hosts, validators = by_name(env, report.hosts), by_name(env, report.validators)
    assert (hosts["host1"].outcome, hosts["host1"].slashed) == ("invalid", "2500")  # 50 % of 5000
    assert hosts["host2"].outcome == "accepted"
    assert env.epoch(0).accepted == [env.addr("host2")]
    # The catchers: everyone who voted fail on host1's (failed) challenges.
    catchers = sorted({env.name_of(v.validator) for c in report.challenges if c.host == env.addr("host1")
                       for v in c.votes})
    each = 2500 * 5000 // 10000 // len(catchers)
    to_catchers = each * len(catchers)
    assert {n: int(validators[n].catcher_reward) for n in catchers} == dict.fromkeys(catchers, each)
    assert (report.slashed_total, report.to_catchers, report.to_treasury) == (
        "2500", str(to_catchers), str(2500 - to_catchers))
    assert all(c.outcome == "fail" for c in report.challenges if c.host == env.addr("host1"))
    # The bank agrees: what host1 lost went to the catchers and the treasury, nowhere else.
    assert gained(env, before) == {"treasury": 2500 - to_catchers, **dict.fromkeys(catchers, each)}
    host1 = env.member("host1")
    assert (host1.bonded, host1.slashed_total) == ("2500", "2500")
    assert {n: env.member(n).rewarded_total for n in catchers} == {n: str(each) for n in catchers}
    assert env.accounting()["bonded"] == 2 * HOST_STAKE + 3 * VALIDATOR_STAKE - 2500
    check_conserved(env, total)


def test_an_unavailable_host_is_slashed_at_its_own_rate_and_nobody_is_a_catcher(ledger_env) -> None:
    env = ledger_env
    total, before = setup(env)
    env.play_epoch(HOSTS, VALIDATORS, vote=fail_host(env, "host1", "unavailable"))
    report = env.report(0)
    host1 = by_name(env, report.hosts)["host1"]
    assert (host1.outcome, host1.slashed) == ("unavailable", "500")  # 10 %
    assert (report.to_treasury, report.to_catchers) == ("500", "0")
    assert {v.outcome for v in report.validators} == {"diligent"}
    assert gained(env, before)["treasury"] == 500
    check_conserved(env, total)


def test_absent_hosts_are_slashed_more_when_they_did_not_reveal_either(ledger_env) -> None:
    env = ledger_env
    hosts = ["host1", "host2", "host3"]
    total, before = setup(env, hosts=hosts)
    # host2 joins but never commits (reveals); host3 neither commits nor reveals.
    env.play_epoch(hosts, VALIDATORS, commit=["host1"], reveal=["host1", "host2", *VALIDATORS])
    report = env.report(0)
    rows = by_name(env, report.hosts)
    assert (rows["host2"].outcome, rows["host2"].slashed, rows["host2"].revealed) == ("absent", "250", True)
    assert (rows["host3"].outcome, rows["host3"].slashed, rows["host3"].revealed) == ("absent", "500", False)
    assert rows["host1"].outcome == "accepted"
    assert {c.host for c in report.challenges} == {env.addr("host1")}  # the absent are not challenged
    assert gained(env, before)["treasury"] == 750
    check_conserved(env, total)


def test_a_host_that_does_not_reveal_is_slashed_and_not_challenged(ledger_env) -> None:
    env = ledger_env
    total, _ = setup(env)
    env.play_epoch(HOSTS, VALIDATORS, reveal=["host1", *VALIDATORS])
    report = env.report(0)
    host2 = by_name(env, report.hosts)["host2"]
    assert (host2.outcome, host2.slashed, host2.revealed) == ("no_reveal", "250", False)
    assert host2.commitment is not None
    assert {c.host for c in report.challenges} == {env.addr("host1")}
    assert env.epoch(0).accepted == [env.addr("host1")]
    check_conserved(env, total)


# -- validator slashes ---------------------------------------------------------------------------


def test_a_validator_that_does_not_reveal_is_slashed_and_never_assigned(make_ledger_env) -> None:
    env = make_ledger_env()
    total, before = setup(env, validators=V3)
    env.play_epoch(HOSTS, V3, reveal=[*HOSTS, "validator1", "validator2"])
    report = env.report(0)
    v3 = by_name(env, report.validators)["validator3"]
    assert (v3.outcome, v3.slashed, v3.assigned, v3.revealed) == ("no_reveal", "100", 0, False)  # 5 % of 2000
    assert all(env.addr("validator3") not in [v.validator for v in c.votes] for c in report.challenges)
    assert gained(env, before)["treasury"] == 100
    check_conserved(env, total)


def test_a_validator_voting_against_the_majority_is_slashed(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(verification={"validators_r": 3}))
    total, before = setup(env, validators=V3)
    liar = lambda v, c: "fail" if v == "validator3" else "pass"  # noqa: E731 (a one-line stand-in, named where it is used)
    env.play_epoch(HOSTS, V3, vote=liar)
    report = env.report(0)
    validators = by_name(env, report.validators)
    v3 = validators["validator3"]
    assert (v3.outcome, v3.slashed, v3.assigned, v3.voted, v3.against_majority) == ("wrong", "400", 4, 4, 4)
    assert (v3.catcher_reward, validators["validator1"].outcome) == ("0", "diligent")
    assert {h.outcome for h in report.hosts} == {"accepted"}  # 2 of 3 said pass
    assert gained(env, before)["treasury"] == 400
    check_conserved(env, total)


def test_a_silent_validator_is_slashed_and_the_verify_phase_waits_for_its_deadline(ledger_env) -> None:
    env = ledger_env
    total, _ = setup(env)
    silent = lambda v, c: None if v == "validator2" else "pass"  # noqa: E731 (a one-line stand-in, named where it is used)
    env.play_epoch(HOSTS, VALIDATORS, vote=silent, stop_after="reveal")
    verify_deadline = env.epoch().phase_deadline
    env.play_epoch(HOSTS, VALIDATORS, vote=silent)
    report = env.report(0)
    validators = by_name(env, report.validators)
    assert (validators["validator2"].outcome, validators["validator2"].slashed) == ("silent", "100")
    assert (validators["validator2"].assigned, validators["validator2"].voted) == (4, 0)
    assert validators["validator1"].outcome == "diligent"
    # One vote of one is a strict majority: the hosts are accepted.
    assert {h.outcome for h in report.hosts} == {"accepted"}
    assert all(v.outcome is None for c in report.challenges for v in c.votes
               if v.validator == env.addr("validator2"))
    # Verify was closed by its deadline (the propose phase counts from it).
    assert env.epoch(0).phase_deadline >= verify_deadline
    check_conserved(env, total)


def test_a_split_challenge_is_inconclusive_nobody_is_slashed(ledger_env) -> None:
    env = ledger_env
    total, _ = setup(env)
    split = lambda v, c: "fail" if v == "validator2" and c.host == env.addr("host1") else "pass"  # noqa: E731 (a one-line stand-in, named where it is used)
    env.play_epoch(HOSTS, VALIDATORS, vote=split)
    report = env.report(0)
    rows = by_name(env, report.hosts)
    assert (rows["host1"].outcome, rows["host1"].slashed, rows["host1"].reward) == ("inconclusive", "0", "0")
    assert {c.outcome for c in report.challenges if c.host == env.addr("host1")} == {"inconclusive"}
    # Nobody voted against a decided outcome.
    assert {(v.outcome, v.against_majority) for v in report.validators} == {("diligent", 0)}
    assert (report.slashed_total, env.epoch(0).accepted) == ("0", [env.addr("host2")])
    check_conserved(env, total)


# -- rewards ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "hosts", "host_each", "validator_each", "left"),
    [
        (10_000, ["host1", "host2"], 400, 100, 9_000),   # 800 to hosts, 200 to validators
        (10_000, ["host1", "host2", "host3"], 266, 100, 9_002),  # remainders stay in the pool
        (500, ["host1", "host2"], 200, 50, 0),  # the pool pays what it has
        (0, ["host1", "host2"], 0, 0, 0),  # empty pool: nothing paid, no transfer
    ],
    ids=["pool-covers", "remainder", "pool-smaller", "empty-pool"],
)
def test_rewards_go_to_accepted_hosts_and_diligent_validators(make_ledger_env, pool, hosts, host_each,
                                                              validator_each, left) -> None:
    env = make_ledger_env(make_spec(reward_per_epoch="1000"))
    total, before = setup(env, hosts=hosts)
    if pool:
        env.fund_rewards(pool)
    env.play_epoch(hosts, VALIDATORS)
    report = env.report(0)
    assert {h.reward for h in report.hosts} == {str(host_each)}
    assert {v.reward for v in report.validators} == {str(validator_each)}
    assert report.rewards_total == str(host_each * len(hosts) + validator_each * 2)
    assert env.accounting()["reward_pool"] == left
    paid = gained(env, before)
    for h in hosts:
        assert paid.get(h, 0) == host_each
        assert env.member(h).rewarded_total == str(host_each)
    for v in VALIDATORS:
        assert paid.get(v, 0) == validator_each
    check_conserved(env, total)


def test_shares_nobody_earns_stay_in_the_pool(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(reward_per_epoch="1000"))
    total, _ = setup(env)
    env.fund_rewards(5_000)
    # Everyone fails host1 and host2: no accepted host, every validator diligent.
    env.play_epoch(HOSTS, VALIDATORS, vote=lambda v, c: "fail")
    report = env.report(0)
    assert {v.reward for v in report.validators} == {"100"}
    assert {h.reward for h in report.hosts} == {"0"}
    # The hosts' 800 stays; the validators' 200 is paid.
    assert env.accounting()["reward_pool"] == 5_000 - 200
    check_conserved(env, total)


# -- unbonding stake stays slashable; claims across epochs ----------------------------------------


def test_unbonding_stake_is_slashed_and_the_rest_claimed_after_the_unbonding_period(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(unbonding_epochs=1))
    total, _ = setup(env)
    env.play_epoch(HOSTS, VALIDATORS, stop_after="join")
    env.unbond("host2", HOST_STAKE)  # all of it, while joined: release at epoch 0 + 1
    assert env.member("host2").unbonding[0].release_epoch == 1
    # host2 never commits: absent, 5 % of its total stake (all unbonding) is slashed.
    env.play_epoch(HOSTS, VALIDATORS, commit=["host1"])
    host2 = env.member("host2")
    assert (host2.bonded, host2.slashed_total) == ("0", "250")
    assert [(u.amount, u.release_epoch) for u in host2.unbonding] == [("4750", 1)]
    assert env.accounting()["unbonding"] == 4_750
    check_conserved(env, total)
    # Epoch 1 is current: the entry has matured.
    assert env.current() == 1
    balance = env.net_balance("host2")
    r = env.claim("host2")
    assert env.net_balance("host2") == balance + 4_750
    assert any(e.get("amount") == "4750inj" for e in r.events_of("transfer"))
    assert env.member("host2").unbonding == []
    check_conserved(env, total)


def test_claim_waits_for_the_epoch_of_release(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(unbonding_epochs=2))
    total, _ = setup(env)
    env.unbond("host1", 1_000)  # release at epoch 2
    env.play_epoch(HOSTS, VALIDATORS)
    with pytest.raises(ContractError, match=r"^claim: nothing to claim at epoch 1; the next release is at epoch 2$"):
        env.claim("host1")
    env.play_epoch(HOSTS, VALIDATORS)
    assert env.current() == 2
    env.claim("host1")
    assert env.member("host1").unbonding == []
    check_conserved(env, total)


def test_a_host_slashed_below_the_minimum_cannot_join_and_is_not_waited_for(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(min_host_stake="3000"))
    total, _ = setup(env)
    env.play_epoch(HOSTS, VALIDATORS, vote=fail_host(env, "host1"))  # host1: 5000 -> 2500
    assert env.member("host1").bonded == "2500"
    env.join("host2")
    env.join("validator1")
    env.join("validator2")
    assert env.epoch().phase == "train"  # host1 is no longer eligible: not waited for
    with pytest.raises(ContractError, match=r"^join: epoch 1 is in phase train"):
        env.join("host1")
    check_conserved(env, total)


# -- a full epoch --------------------------------------------------------------------------------

EIGHT = [f"host{i}" for i in range(1, 9)]
FOUR = [f"validator{i}" for i in range(1, 5)]


def test_a_full_epoch_with_eight_hosts_and_four_validators(make_ledger_env) -> None:
    names = ["operator", "treasury", "funder", *EIGHT, *FOUR]
    # S = 4 segments, k = 2 (plus the last: 3 challenges per host), r = 2.
    # Phases twice the default: twelve sequential joins and the commits must fit on a loaded devnet
    # at 100 ms blocks (join closes early once everyone joined; the others are waited out anyway).
    spec = make_spec(train={"inner_steps": 8, "segment_steps": 2}, verification={"challenges_k": 2},
                     phases={"join_blocks": 100, "train_blocks": 60, "reveal_blocks": 60, "verify_blocks": 80},
                     reward_per_epoch="10000")
    env = make_ledger_env(spec, names=names)
    total, _ = setup(env, hosts=EIGHT, validators=FOUR)
    env.fund_rewards(100_000)

    def vote(validator: str, c) -> str | None:
        host = env.name_of(c.host)
        if validator == "validator4":
            return None  # silent
        return {"host1": "fail", "host2": "unavailable"}.get(host, "pass")

    env.play_epoch(EIGHT, FOUR, commit=[h for h in EIGHT if h != "host3"],
                   reveal=[n for n in [*EIGHT, *FOUR] if n != "host4"], vote=vote)
    report = env.report(0)
    hosts, validators = by_name(env, report.hosts), by_name(env, report.validators)
    assert {n: r.outcome for n, r in hosts.items()} == {
        "host1": "invalid", "host2": "unavailable", "host3": "absent", "host4": "no_reveal",
        **{f"host{i}": "accepted" for i in range(5, 9)}}
    assert len(report.challenges) == 3 * 6  # every committed, revealed host: k + 1 challenges
    assert all(len(c.votes) == 2 for c in report.challenges)
    v4 = validators["validator4"]
    assert v4.outcome == ("silent" if v4.assigned else "idle")
    for name in FOUR[:3]:
        v = validators[name]
        assert v.voted == v.assigned and v.against_majority == 0
        assert v.outcome == ("diligent" if v.assigned else "idle")
    # Slashes: 2500 + 500 + 250 + 250, and 5 % of 2000 if validator4 was assigned at all.
    slashed = 2500 + 500 + 250 + 250 + (100 if v4.assigned else 0)
    assert report.slashed_total == str(slashed)
    assert int(report.to_treasury) + int(report.to_catchers) == slashed
    # Rewards: 8000 over 4 accepted hosts, 2000 over the diligent validators.
    diligent = [n for n in FOUR if validators[n].outcome == "diligent"]
    assert {hosts[f"host{i}"].reward for i in range(5, 9)} == {"2000"}
    assert {validators[n].reward for n in diligent} == {str(2000 // len(diligent))}
    assert env.epoch(0).agreed is True
    assert env.epoch().epoch == 1
    check_conserved(env, total)
    # Every member's record agrees with the report.
    for name, row in {**hosts, **validators}.items():
        m = env.member(name)
        earned = int(row.reward) + int(getattr(row, "catcher_reward", "0"))
        assert (m.slashed_total, m.rewarded_total) == (row.slashed, str(earned))


def test_a_catcher_can_also_be_wrong_and_each_recipient_gets_one_transfer(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(verification={"validators_r": 3}, reward_per_epoch="1000"))
    total, before = setup(env, validators=V3)
    env.fund_rewards(10_000)
    env.play_epoch(HOSTS, V3, stop_after="reveal")
    # host1: everyone says fail (all three catch it); host2: validator3 alone says fail (wrong).
    work = [(v, c) for v in V3 for c in env.challenges(v)]
    results = []
    for v, c in work:
        outcome = "fail" if c.host == env.addr("host1") or v == "validator3" else "pass"
        results.append(env.verdict(v, c.host, c.segment, outcome))
    finalizing = results[-1]
    report = env.report(0)
    validators = by_name(env, report.validators)
    v3 = validators["validator3"]
    assert (v3.outcome, v3.slashed) == ("wrong", "400")
    assert v3.catcher_reward == validators["validator1"].catcher_reward == str(2500 * 5000 // 10000 // 3)
    # One bank send per recipient in the finalizing transaction: rewards, catcher shares and the
    # treasury's part summed per address.
    sends = [e.get("recipient") for e in finalizing.events_of("transfer") if e.get("sender") == env.address]
    assert len(sends) == len(set(sends))
    assert env.addr("treasury") in sends and env.addr("validator3") in sends
    paid = gained(env, before)
    assert paid["validator3"] == int(v3.catcher_reward) + int(v3.reward)
    check_conserved(env, total)
