"""A Δ that no holder serves (docs/network.md): proposers exclude its host in their proposals; at
the close of propose, an exclusion carried by the agreed hash's proposers past 2/3 of the accepted
stake slashes the host as ``unavailable`` and the validators that passed its last segment as
``wrong``, and takes back the reward each was paid at finalize. Anything less does nothing.

Test spec (``ledger_env.make_spec``): S = 2 segments (segment 1 is the last, always challenged),
r = 2; slash bps unavailable 6000, validator wrong 2000 (the spec default). Runs on every ledger
backend (the embedded chain; the devnet, where the message travels as JSON), except the three
proposal sets short of the majority (``EMBEDDED_ONLY``): their ``propose_model`` messages, excluded
hosts included, are the majority tests' own, and only the contract's count of them differs.
"""

from __future__ import annotations

import pytest
from ledger_env import EMBEDDED_ONLY, HOST_STAKE, VALIDATOR_STAKE, LedgerEnv, digest, make_spec

from chain.ledger import ContractError
from protocol.messages import ModelProposal

HOSTS = ["host1", "host2", "host3", "host4"]
VALIDATORS = ["validator1", "validator2", "validator3"]
# Windows wide enough for every verdict and the one-record pages of every close on a loaded devnet.
SPEC = make_spec(reward_per_epoch="1000",
                 phases={"join_blocks": 150, "train_blocks": 60, "reveal_blocks": 80, "verify_blocks": 150,
                         "verdict_reveal_blocks": 150, "propose_blocks": 60})


def to_propose(env: LedgerEnv) -> tuple[int, dict[str, int]]:
    """Bond everyone, fund the pool and play epoch 0 to its propose phase (every verdict honest);
    returns the funds in play and every member's net balance then."""
    env.bond_all([*HOSTS, *VALIDATORS])
    env.fund_rewards(10_000)
    env.play_epoch(HOSTS, VALIDATORS, stop_after="verify")
    assert env.epoch(0).phase == "propose"
    return env.total_funds(), {n: env.net_balance(n) for n in ["treasury", *HOSTS, *VALIDATORS]}


def passers_of_last_segment(env: LedgerEnv, host: str) -> set[str]:
    (c,) = [c for c in env.report(0).challenges if c.host == env.addr(host) and c.segment == 1]
    return {env.name_of(v.validator) for v in c.votes if v.outcome == "pass"}


@pytest.mark.parametrize("settle_page", [None, 1])
def test_the_majority_exclusion_slashes_the_withholder_and_its_passers(make_ledger_env, settle_page) -> None:
    env = make_ledger_env(SPEC, settle_page=settle_page)
    total, before = to_propose(env)
    passers = passers_of_last_segment(env, "host4")
    assert len(passers) == 2
    paid_at_finalize = {n: int(r.reward) for n, r in
                        [(env.name_of(x.address), x) for x in [*env.report(0).hosts, *env.report(0).validators]]}
    model = digest("without host4")
    for h in HOSTS[:3]:  # 3/4 of the accepted stake: agreed, and the exclusion settles
        env.propose(h, model, excluded=["host4"])
    env.settle()
    report = env.report(0)
    assert report.agreed and report.next_model_hash == model and env.epoch().model_hash == model
    rows = {env.name_of(r.address): r for r in [*report.hosts, *report.validators]}
    reward4 = paid_at_finalize["host4"]
    assert reward4 > 0
    assert (rows["host4"].outcome, rows["host4"].reward) == ("unavailable", "0")
    assert int(rows["host4"].slashed) == (HOST_STAKE - reward4) * 6_000 // 10_000
    assert int(env.member("host4").bonded) == HOST_STAKE - reward4 - int(rows["host4"].slashed)
    for v in VALIDATORS:
        if v in passers:
            r = paid_at_finalize[v]
            assert (rows[v].outcome, rows[v].reward) == ("wrong", "0")
            assert int(rows[v].slashed) == (VALIDATOR_STAKE - r) * 2_000 // 10_000
            assert int(env.member(v).bonded) == VALIDATOR_STAKE - r - int(rows[v].slashed)
        else:
            assert rows[v].slashed == "0"
    for h in HOSTS[:3]:
        assert (rows[h].outcome, rows[h].slashed) == ("accepted", "0") and int(rows[h].reward) > 0
        assert rows[h].proposal is not None and rows[h].proposal.excluded == [env.addr("host4")]
    # The bank: the treasury got every slash; nobody's balance moved at the close of propose
    # except the treasury's (the rewards taken back came out of stake, into the pool).
    slashed = sum(int(r.slashed) for r in rows.values())
    assert int(report.slashed_total) == slashed and int(report.to_treasury) == slashed
    assert env.net_balance("treasury") - before["treasury"] == slashed
    assert all(env.net_balance(n) == before[n] for n in [*HOSTS, *VALIDATORS])
    assert int(report.rewards_total) == sum(int(r.reward) for r in rows.values())
    assert env.total_funds() == total
    env.assert_books()


def test_exclusions_settle_page_by_page_and_nodes_read_the_close(make_ledger_env) -> None:
    # 7 hosts: the five that propose hold 5/7 > 2/3 of the accepted stake and exclude host6 and
    # host7; one record per page, so the close of propose is visible between transactions.
    hosts = [f"host{i}" for i in range(1, 8)]
    names = ("operator", "treasury", "funder", *hosts, *VALIDATORS)
    env = make_ledger_env(SPEC, names=names, settle_page=1)
    env.bond_all([*hosts, *VALIDATORS])
    env.fund_rewards(10_000)
    env.play_epoch(hosts, VALIDATORS, stop_after="verify")
    total = env.total_funds()
    model = digest("without host6 and host7")
    for h in hosts[:5]:
        env.propose(h, model, excluded=["host6", "host7"])
    info = env.epoch(0)
    assert (info.phase, info.closing) == ("propose", "exclusions")
    # A late proposal is refused (the page its transaction runs first ends the epoch) and reverted.
    with pytest.raises(ContractError, match="propose_model: epoch 0 is closed"):
        env.propose("host6", model)
    assert env.epoch(0).closing == "exclusions"
    assert len(env.settle()) == 1
    report = env.report(0)
    outcomes = {env.name_of(h.address): h.outcome for h in report.hosts}
    assert outcomes == {**dict.fromkeys(hosts[:5], "accepted"), "host6": "unavailable", "host7": "unavailable"}
    assert report.next_model_hash == model == env.epoch().model_hash
    assert all(v.outcome == "wrong" for v in report.validators if int(v.slashed) > 0)
    assert env.total_funds() == total
    env.assert_books()


@pytest.mark.parametrize("proposals", [
    # One of the agreed hash's three backers excludes host4: a minority, nothing happens.
    {"host1": ("A", ["host4"]), "host2": ("A", []), "host3": ("A", [])},
    # Two of four: still not past 2/3 of the accepted stake.
    {"host1": ("A", ["host4"]), "host2": ("A", ["host4"]), "host3": ("A", []), "host4": ("A", [])},
    # Exclusions attached to a hash nobody agreed on.
    {"host1": ("B", ["host4"]), "host2": ("A", []), "host3": ("A", []), "host4": ("A", [])},
])
@EMBEDDED_ONLY
def test_an_exclusion_without_the_majority_does_nothing(make_ledger_env, proposals) -> None:
    env = make_ledger_env(SPEC)
    total, before = to_propose(env)
    for name, (model, excluded) in proposals.items():
        if env.current() == 0:
            env.propose(name, digest(model), excluded=excluded)
    if env.current() == 0:
        env.wait_past_deadline(0)
        env.advance()
        env.settle()
    report = env.report(0)
    assert report.next_model_hash == digest("A")
    assert all(r.slashed == "0" for r in [*report.hosts, *report.validators])
    assert {h.outcome for h in report.hosts} == {"accepted"}
    assert env.net_balance("treasury") == before["treasury"]
    assert env.total_funds() == total
    env.assert_books()


def test_bad_exclusions_are_refused_and_cost_nothing(make_ledger_env) -> None:
    env = make_ledger_env(SPEC)
    total, _ = to_propose(env)
    a = sorted([env.addr("host2"), env.addr("host3")])
    model = digest("A")
    cases = [
        (list(reversed(a)), "distinct and in ascending order"),
        ([env.addr("host1")], "cannot exclude its own"),
        ([env.addr("validator1")], "is not an accepted host of epoch 0"),
        ([env.addr("outsider")], "is not an accepted host of epoch 0"),
    ]
    for excluded, why in cases:
        msg = {"propose_model": {"epoch": 0, "model_hash": model, "val_loss_micro": 1, "excluded": excluded}}
        with pytest.raises(ContractError, match=why):
            env.raw("host1", msg)
    # The Python message refuses an unsorted list before anything is sent.
    with pytest.raises(ValueError, match="ascending order"):
        ModelProposal(epoch=0, model_hash=model, val_loss_micro=1, excluded=list(reversed(a)))
    # Nothing was recorded: host1 may still propose.
    env.propose("host1", model)
    (row,) = [h for h in env.report(0).hosts if h.address == env.addr("host1")]
    assert row.proposal is not None and row.proposal.excluded == []
    assert env.total_funds() == total
