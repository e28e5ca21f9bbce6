"""The epoch as the contract runs it: phases, windows counted from the block a phase opened, early
close, bounded join extension, the messages of each phase and their refusals (verdicts committed
then opened, trap openings), model agreement, verification disabled.

Backend-neutral (``ledger_env``): blocks are waited for, never assumed, so the same assertions
hold where blocks come by themselves. Settlement amounts are in ``test_contract_settlement.py``.

The devnet runs every phase change on real blocks (early close, a deadline's close, an idle chain's
overdue phases, a join extended and then abandoned), every message of an epoch with its
refusals, and ``sit_out``. Scenarios that only replay those messages to another outcome (the
majority rule's two cases, verification off, a partial commit, several epochs for the paged list
or a sat-out host's rank, a second join extension) run on the embedded chain only
(``ledger_env.EMBEDDED_ONLY``): the same contract code decides them on both backends.
"""

from __future__ import annotations

import pytest
from ledger_env import (
    EMBEDDED_ONLY,
    HOST_STAKE,
    INITIAL_MODEL_HASH,
    VALIDATOR_STAKE,
    LedgerEnv,
    digest,
    make_spec,
)

from chain.ledger import ContractError, TxResult
from protocol.messages import SitOut
from protocol.rules.beacon import beacon_commit, epoch_seed
from protocol.rules.limits import MAX_LOSS_MICRO
from protocol.rules.sampling import pickers

HOSTS = ["host1", "host2"]
VALIDATORS = ["validator1", "validator2"]


def ready(env: LedgerEnv, hosts=HOSTS, validators=VALIDATORS) -> None:
    env.bond_all([*hosts, *validators])


def phase(env: LedgerEnv, epoch: int | None = None) -> str:
    return env.epoch(epoch).phase


# -- the happy path ------------------------------------------------------------------------------


def test_an_epoch_moves_through_every_phase_and_opens_the_next(ledger_env) -> None:
    env, ph = ledger_env, ledger_env.spec.phases
    ready(env)
    total = env.total_funds()
    assert phase(env) == "join"
    env.join("host1")
    env.join("host2")
    env.join("validator1")
    assert phase(env) == "join"
    r = env.join("validator2")  # every eligible member joined: join closes early
    info = env.epoch()
    assert (info.phase, info.phase_deadline) == ("train", r.height + ph.train_blocks)
    assert info.hosts == sorted(env.addr(h) for h in HOSTS)
    assert info.validators == sorted(env.addr(v) for v in VALIDATORS)
    assert [e.get("phase") for e in r.events_of("wasm-phase")] == ["train"]

    env.commit("host1")
    assert env.epoch().committed == [env.addr("host1")]
    r = env.commit("host2")
    assert (phase(env), env.epoch().phase_deadline) == ("reveal", r.height + ph.reveal_blocks)

    for name in [*HOSTS, *VALIDATORS]:
        r = env.reveal(name)
    info = env.epoch()
    assert (info.phase, info.phase_deadline) == ("verify", r.height + ph.verify_blocks)
    reveals = {env.addr(n): env.secret(n, 0) for n in [*HOSTS, *VALIDATORS]}
    assert info.seed == epoch_seed(env.spec.run_id(), 0, reveals).hex()

    # Each host's pickers (drawn by stake over V without it, until they hold more than 1/3 of it)
    # pick k = 1 of the first S - 1 = 1 segments, plus the last: both segments of each host, each
    # seated by every picker of the host.
    joined = {env.addr(v): VALIDATOR_STAKE for v in VALIDATORS}
    want = {}
    for h in HOSTS:
        chosen = pickers(bytes.fromhex(info.prev_seed), env.addr(h), joined, env.spec.verification.seats_cap)
        assert chosen  # one validator of two holds more than 1/3 of the stake
        want.update({(env.addr(h), s): chosen for s in (0, 1)})
    seated = sorted({env.name_of(a) for seats in want.values() for a in seats})
    for v in VALIDATORS:
        challenges = env.challenges(v)
        assert {(c.host, c.segment) for c in challenges} == {k for k, seats in want.items() if env.addr(v) in seats}
        for c in challenges:
            assert c.validators == want[(c.host, c.segment)]
            committed = env.commitment(env.name_of(c.host), 0)
            assert c.checkpoint_root == committed.checkpoint_root
            assert (c.loss_digest, c.train_loss_micro) == (committed.loss_digest, committed.train_loss_micro)
            assert (c.segments, c.endpoint, c.round, c.committed, c.outcome, c.due) == (
                2, "http://127.0.0.1:8700", 0, False, "pending", True)
            r = env.commit_verdict(v, c.host, c.segment, "pass")
    # Every commitment in: verify closes into objection; the verdicts are still hidden.
    info = env.epoch()
    assert (info.phase, info.phase_deadline) == ("objection", r.height + ph.verdict_reveal_blocks)
    assert all(vote.outcome is None and vote.commitment for c in env.report().challenges for vote in c.votes)
    # Every seated validator sends its ready (no objection); the hosts open their traps.
    for v in seated:
        assert env.ledger.participant(env.addr(v)).ready_due
        env.ready(v)
    assert phase(env) == "objection", "the hosts have not opened their trap commitments yet"
    env.open_traps("host1")
    r = env.open_traps("host2")
    info = env.epoch()
    assert (info.phase, info.phase_deadline) == ("verdict_reveal", r.height + ph.verdict_reveal_blocks)
    assert not any(c.disputed for c in env.challenges(seated[0]))
    for v in seated:
        for c in env.challenges(v):
            r = env.reveal_verdict(v, c.host, c.segment)
    info = env.epoch()
    assert (info.phase, info.phase_deadline) == ("propose", r.height + ph.propose_blocks)
    assert info.accepted == sorted(env.addr(h) for h in HOSTS)
    assert all(c.committed and c.revealed and c.outcome == "pass" for c in env.challenges(seated[0]))
    assert [e.get("decided") for e in r.events_of("wasm-dispute")] == ["4"]

    theta1 = digest("theta 1")
    env.propose("host1", theta1)
    assert phase(env) == "propose"  # 1/2 of the stake is not more than 2/3
    r = env.propose("host2", theta1)
    closed, current = env.epoch(0), env.epoch()
    assert (closed.phase, closed.next_model_hash, closed.agreed) == ("closed", theta1, True)
    assert closed.phase_deadline == r.height
    assert (current.epoch, current.phase, current.model_hash) == (1, "join", theta1)
    assert (current.prev_seed, current.started_at) == (closed.seed, r.height)
    assert current.phase_deadline == r.height + ph.join_blocks
    assert [e.epoch for e in env.ledger.epochs()] == [0, 1]
    assert env.total_funds() == total
    env.assert_books()

    # The next epoch runs the same way from θ_1.
    assert env.play_epoch(HOSTS, VALIDATORS) == 1
    assert env.epoch(1).next_model_hash == digest("theta:2")
    assert env.epoch().model_hash == digest("theta:2")


def test_a_phase_closed_by_its_deadline_gives_the_next_one_its_whole_window(ledger_env) -> None:
    env, ph = ledger_env, ledger_env.spec.phases
    ready(env, hosts=["host1", "host2", "host3"])
    for name in ["host1", "host2", *VALIDATORS]:
        env.join(name)  # host3 is eligible but does not join: no early close
    env.wait_past_deadline()
    r = env.advance()
    assert r.attribute("transitions") == "1"
    # The train phase counts from the transaction that closed join, however late it came.
    assert (phase(env), env.epoch().phase_deadline) == ("train", r.height + ph.train_blocks)
    assert env.epoch().hosts == sorted(env.addr(h) for h in ["host1", "host2"])

    env.commit("host1")  # host2 never commits
    r = env.close_phase()
    assert (phase(env), env.epoch().phase_deadline) == ("reveal", r.height + ph.reveal_blocks)


# Windows of 15 blocks after join for the tests that idle through several of them: each such phase
# holds at most four transactions there, and an idle window costs 1.5 s on the devnet instead of
# 3-4 s. Join keeps room for the bonds and joins sent in it (it closes once everyone joined).
SHORT = make_spec(phases={"join_blocks": 40, "train_blocks": 15, "reveal_blocks": 15, "verify_blocks": 15,
                          "verdict_reveal_blocks": 15, "propose_blocks": 15})


def test_an_idle_chain_closes_one_overdue_phase_per_transaction(make_ledger_env) -> None:
    env = make_ledger_env(SHORT)
    ph = env.spec.phases
    ready(env)
    for name in [*HOSTS, *VALIDATORS]:
        env.join(name)
    r = env.commit("host1")
    train_deadline = r.height + ph.train_blocks - 1  # (host1 committed in train's first blocks)
    # host2's node is down; the chain idles far past the train deadline and what would have been
    # the reveal deadline. The first transaction closes train now and opens reveal with its whole
    # window: nobody who could reveal is recorded as not revealing. host2, back in time to reveal,
    # is absent for the first time in the window: excused.
    env.wait_until(env.epoch().phase_deadline + ph.reveal_blocks + ph.verify_blocks)
    r = env.advance()
    assert int(r.attribute("transitions")) == 1
    info = env.epoch()
    assert (info.phase, info.phase_deadline) == ("reveal", r.height + ph.reveal_blocks)
    assert r.height > train_deadline + ph.reveal_blocks
    for name in [*HOSTS, *VALIDATORS]:
        env.reveal(name)
    report = env.report(0)
    outcomes = {env.name_of(h.address): h.outcome for h in report.hosts}
    assert outcomes == {"host1": "pending", "host2": "absent_excused"}
    assert {v.outcome for v in report.validators} == {"pending"}


def test_phases_with_nobody_to_wait_for_close_behind_the_one_a_transaction_closed(make_ledger_env) -> None:
    env = make_ledger_env(SHORT)
    ph = env.spec.phases
    ready(env)
    for name in [*HOSTS, *VALIDATORS]:
        env.join(name)
    env.commit("host1")
    env.commit("host2")
    # Nobody reveals; the chain idles past the reveal deadline (by three windows).
    env.wait_until(env.epoch().phase_deadline + 3 * ph.reveal_blocks)
    r = env.advance()
    # reveal closed now; verify, objection and verdict_reveal had nothing to wait for (no reveal,
    # no challenge) and closed behind it; no host was accepted: θ unchanged, epoch 1 opened at
    # that height with its whole join window.
    assert int(r.attribute("transitions")) == 4
    closed = env.epoch(0)
    assert (closed.phase, closed.agreed, closed.next_model_hash) == ("closed", False, INITIAL_MODEL_HASH)
    assert closed.phase_deadline == r.height
    current = env.epoch()
    assert (current.epoch, current.phase, current.started_at) == (1, "join", r.height)
    assert current.phase_deadline == r.height + ph.join_blocks
    report = env.report(0)
    assert {h.outcome for h in report.hosts} == {"no_reveal"}
    assert {v.outcome for v in report.validators} == {"no_reveal"}


def test_advance_refuses_when_nothing_is_due(ledger_env) -> None:
    info = ledger_env.epoch()
    with pytest.raises(ContractError, match=rf"^advance: nothing is due: epoch 0 is in phase join until height "
                                            rf"{info.phase_deadline} \(now \d+\)$"):
        ledger_env.advance()


# -- join -----------------------------------------------------------------------------------------


@EMBEDDED_ONLY
def test_join_is_extended_while_the_minimums_are_not_met(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(phases={"min_hosts": 2}))
    ph = env.spec.phases
    env.bond_all(["host1", "validator1"])
    env.join("host1")
    env.join("validator1")  # every eligible member joined, but min_hosts = 2
    assert phase(env) == "join"
    env.wait_past_deadline()
    r = env.advance()
    extended = [e.to_dict() for e in r.events_of("wasm-phase")]
    assert extended and extended[0]["extended"] == "true" and extended[0]["hosts"] == "1"
    assert extended[0]["extensions"] == "1"
    assert (phase(env), env.epoch().phase_deadline) == ("join", r.height + ph.join_blocks)
    # Idle for several periods: one new window, from the transaction that extended it.
    env.wait_until(env.epoch().phase_deadline + 2 * ph.join_blocks)
    r = env.advance()
    assert env.epoch().phase_deadline == r.height + ph.join_blocks
    # A second host arrives: the minimums are met and everyone joined.
    env.bond("host2")
    env.join("host2")
    assert phase(env) == "train"
    assert env.epoch().hosts == sorted(env.addr(h) for h in ["host1", "host2"])


def test_a_join_short_of_its_minimums_is_abandoned_after_its_extensions(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(phases={"min_hosts": 2, "max_join_extensions": 1}, unbonding_epochs=1))
    env.bond_all(["host1", "host2", "validator1"])
    env.unbond("host2", HOST_STAKE)  # leaving: release at epoch 1
    env.join("host1")
    env.join("validator1")
    total = env.total_funds()
    env.close_phase()  # extension 1
    assert (phase(env), env.current()) == ("join", 0)
    r = env.close_phase()  # no extension left: the epoch is closed unplayed, epochs go on
    assert [e.get("abandoned") for e in r.events_of("wasm-epoch")] == ["true"]
    closed = env.epoch(0)
    assert (closed.phase, closed.abandoned, closed.agreed) == ("closed", True, False)
    assert closed.next_model_hash == closed.model_hash and closed.seed is not None
    assert (env.current(), phase(env), env.epoch().prev_seed) == (1, "join", closed.seed)
    assert env.report(0).slashed_total == "0"
    env.claim("host2")  # the unbonding matured: the stuck run did not lock it
    assert env.member("host2").unbonding == []
    assert env.total_funds() == total


def test_join_does_not_wait_for_members_below_the_minimum(ledger_env) -> None:
    env = ledger_env
    env.bond("host1")
    env.bond("host2", 1_999_999)  # below min_host_stake 2·10^6: cannot join, not waited for
    env.bond("validator1")
    with pytest.raises(ContractError,
                       match=r"^join: bonded stake 1999999inj is below the minimum 2000000inj for a host$"):
        env.join("host2")
    env.join("host1")
    env.join("validator1")
    assert phase(env) == "train"


def test_join_refusals(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(phases={"max_hosts": 2}))
    ready(env, hosts=["host1", "host2"], validators=["validator1"])
    env.bond("host3", HOST_STAKE // 2)  # eligible, but a smaller stake than every seat
    with pytest.raises(ContractError, match=r"^join: .* is not a member; bond first$"):
        env.join("outsider")
    with pytest.raises(ContractError, match=r"^join: epoch 1 has not started; the current epoch is 0$"):
        env.join("host1", epoch=1)
    with pytest.raises(ContractError, match=r"^join: beacon_commit must be 64 lowercase hex characters"):
        env.raw("host1", {"join": {"epoch": 0, "beacon_commit": "AB" * 32}})
    with pytest.raises(ContractError, match=r"^join: does not accept funds, got 5inj$"):
        env.raw("host1", {"join": {"epoch": 0, "beacon_commit": "ab" * 32}}, funds=5)
    with pytest.raises(ContractError, match="missing field `beacon_commit`"):
        env.raw("host1", {"join": {"epoch": 0}})
    env.join("host1")
    with pytest.raises(ContractError, match=f"^join: {env.addr('host1')} already joined epoch 0$"):
        env.join("host1")
    env.join("host2")
    # A full role admits a newcomer only in place of its smallest seat, which it must out-stake.
    with pytest.raises(ContractError, match=rf"^join: epoch 0 is full: its 2 host seats are held by stakes of at "
                                            rf"least {HOST_STAKE}inj; a larger stake at join takes the smallest "
                                            r"seat$"):
        env.join("host3")
    # Unbonding below the minimum makes a member ineligible for the next join.
    env.unbond("host3", HOST_STAKE // 2 - 1_999_999)
    env.join("validator1")  # host3 is no longer eligible: everyone eligible joined
    assert phase(env) == "train"
    with pytest.raises(ContractError, match=r"^join: epoch 0 is in phase train; join is accepted in phase join only$"):
        env.join("host3")


# -- commit, reveal --------------------------------------------------------------------------------


def test_commit_refusals(ledger_env) -> None:
    env = ledger_env
    ready(env, hosts=["host1", "host2", "host3"])
    for name in ["host1", "host2", *VALIDATORS]:
        env.join(name)
    with pytest.raises(ContractError,
                       match=r"^commit: epoch 0 is in phase join; commit is accepted in phase train only$"):
        env.commit("host1")
    env.join("host3")
    assert phase(env) == "train"
    with pytest.raises(ContractError, match=f"^commit: {env.addr('validator1')} joined epoch 0 as a validator; "
                                            "only hosts may commit$"):
        env.commit("validator1")
    with pytest.raises(ContractError, match=f"^commit: {env.addr('outsider')} did not join epoch 0$"):
        env.commit("outsider")
    with pytest.raises(ContractError, match=r"^commit: segments is 3, but the run has 1 to 2 segments per epoch$"):
        env.commit("host1", segments=3)
    good = {**env.commitment("host1", 0).model_dump(mode="json"),
            "trap_commit": env.trap_opening("host1", 0).commitment(env.addr("host1"))}
    with pytest.raises(ContractError, match=r"^commit: segments is 0, but the run has 1 to 2 segments per epoch$"):
        env.raw("host1", {"commit": {**good, "segments": 0}})
    with pytest.raises(ContractError, match=r'^commit: delta_hash must be 64 lowercase hex characters, got "XY"$'):
        env.raw("host1", {"commit": {**good, "delta_hash": "XY"}})
    with pytest.raises(ContractError, match=r'^commit: trap_commit must be 64 lowercase hex characters, got "XY"$'):
        env.raw("host1", {"commit": {**good, "trap_commit": "XY"}})
    with pytest.raises(ContractError, match="missing field `trap_commit`"):
        env.raw("host1", {"commit": {k: v for k, v in good.items() if k != "trap_commit"}})
    with pytest.raises(ContractError, match="unknown field `extra`"):
        env.raw("host1", {"commit": {**good, "extra": 1}})
    with pytest.raises(ContractError, match=r"^commit: does not accept funds"):
        env.raw("host1", {"commit": good}, funds=1)
    # A loss beyond what every reader can hold (Python's bound, MAX_LOSS_MICRO) never reaches the chain.
    with pytest.raises(ContractError, match=f"^commit: train_loss_micro {MAX_LOSS_MICRO + 1} exceeds the bound "
                                            f"{MAX_LOSS_MICRO}$"):
        env.raw("host1", {"commit": {**good, "train_loss_micro": MAX_LOSS_MICRO + 1}})
    env.commit("host1")
    with pytest.raises(ContractError, match=f"^commit: {env.addr('host1')} already committed in epoch 0$"):
        env.commit("host1", checkpoint_root=digest("another root"))
    assert env.report().hosts[[h.address for h in env.report().hosts].index(env.addr("host1"))] \
        .commitment.checkpoint_root == env.commitment("host1", 0).checkpoint_root


def test_a_late_message_is_refused_and_changes_nothing(ledger_env) -> None:
    env = ledger_env
    ready(env)
    for name in [*HOSTS, *VALIDATORS]:
        env.join(name)
    env.commit("host1")
    env.wait_past_deadline()
    with pytest.raises(ContractError,
                       match=r"^commit: epoch 0 is in phase reveal; commit is accepted in phase train only$"):
        env.commit("host2")
    # The refused transaction reverted its own auto-advance: nothing changed until a valid one.
    assert phase(env) == "train"
    assert env.epoch().committed == [env.addr("host1")]
    env.advance()
    assert phase(env) == "reveal"


def test_reveal_checks_the_commitment_and_refuses_replays(ledger_env) -> None:
    env = ledger_env
    ready(env)
    env.play_epoch(HOSTS, VALIDATORS, stop_after="train")
    with pytest.raises(ContractError, match="^reveal: the secret does not match the beacon commitment "
                                            f"{env.addr('host1')} made when joining epoch 0$"):
        env.reveal("host1", secret=env.secret("host1", 1))  # another epoch's secret
    with pytest.raises(ContractError, match="does not match the beacon commitment"):
        env.reveal("host1", secret=env.secret("host2", 0))  # another participant's secret
    with pytest.raises(ContractError, match=r"^reveal: secret must be 64 lowercase hex characters"):
        env.raw("host1", {"reveal": {"epoch": 0, "secret": "00"}})
    with pytest.raises(ContractError, match=f"^reveal: {env.addr('outsider')} did not join epoch 0$"):
        env.reveal("outsider")
    with pytest.raises(ContractError, match=r"^reveal: epoch 1 has not started"):
        env.reveal("host1", epoch=1)
    env.reveal("host1")
    with pytest.raises(ContractError, match=f"^reveal: {env.addr('host1')} already revealed for epoch 0$"):
        env.reveal("host1")
    for name in ["host2", *VALIDATORS]:
        env.reveal(name)
    assert phase(env) == "verify"
    # Epoch 0's reveal replayed in epoch 1 (after epoch 0 closed) is refused by epoch.
    env.play_epoch(HOSTS, VALIDATORS)  # finishes epoch 0 from verify
    assert env.current() == 1
    with pytest.raises(ContractError, match=r"^reveal: epoch 0 is closed; the current epoch is 1$"):
        env.reveal("host1", epoch=0)


def test_a_copied_beacon_commitment_cannot_be_revealed(ledger_env) -> None:
    # Binding the address into the commitment: host2 copying host1's commitment cannot open it.
    env = ledger_env
    ready(env)
    env.join("host1")
    env.join("host2", beacon=beacon_commit(env.addr("host1"), 0, env.secret("host1", 0)).hex())
    for name in VALIDATORS:
        env.join(name)
    for name in HOSTS:
        env.commit(name)
    with pytest.raises(ContractError, match="does not match the beacon commitment"):
        env.reveal("host2", secret=env.secret("host1", 0))


# -- verdicts -----------------------------------------------------------------------------------


def test_verdict_refusals(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(verification={"validators_r": 1}))
    ready(env)
    env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    # r = 1: each challenge has one validator; find one and a validator not assigned to it.
    first = env.report().challenges[0]
    (assigned,) = [env.name_of(v.validator) for v in first.votes]
    idle = next(v for v in VALIDATORS if v != assigned)
    c = next(x for x in env.challenges(assigned) if (x.host, x.segment) == (first.host, first.segment))
    not_assigned = f"is not assigned to host {c.host} segment {c.segment} of epoch 0 in this round$"
    with pytest.raises(ContractError, match=f"^commit_verdict: {env.addr(idle)} {not_assigned}"):
        env.commit_verdict(idle, c.host, c.segment)
    with pytest.raises(ContractError, match=f"^commit_verdict: {env.addr(assigned)} is not assigned to host "
                                            f"{c.host} segment 7 of epoch 0"):
        env.commit_verdict(assigned, c.host, 7)
    with pytest.raises(ContractError, match="is not assigned to host"):
        env.commit_verdict("host1", c.host, c.segment)  # a host never judges
    with pytest.raises(ContractError, match="is not assigned to host"):
        env.commit_verdict("outsider", c.host, c.segment)
    with pytest.raises(ContractError, match=r"^commit_verdict: host: invalid address"):
        env.raw(assigned, {"commit_verdict": {"epoch": 0, "host": "inj1nope", "segment": 0,
                                              "commitment": "ab" * 32}})
    with pytest.raises(ContractError, match=r"^commit_verdict: commitment must be 64 lowercase hex"):
        env.raw(assigned, {"commit_verdict": {"epoch": 0, "host": c.host, "segment": c.segment,
                                              "commitment": "AB" * 32}})
    with pytest.raises(ContractError, match=r"^reveal_verdict: epoch 0 is in phase verify; reveal_verdict is "
                                            r"accepted in phase verdict_reveal or dispute_reveal only$"):
        env.ledger.reveal_verdict(env.key(assigned), env.opening(assigned, c.host, c.segment))
    with pytest.raises(ContractError,
                       match=r"^commit: epoch 0 is in phase verify; commit is accepted in phase train only$"):
        env.commit("host1")
    env.commit_verdict(assigned, c.host, c.segment, "fail", distance="0.25")
    with pytest.raises(ContractError, match=f"^commit_verdict: {env.addr(assigned)} already committed a verdict "
                                            f"on host {c.host} segment {c.segment} of epoch 0$"):
        env.commit_verdict(assigned, c.host, c.segment, "pass")
    # Nothing about the verdict is visible before it is opened.
    vote = next(ch for ch in env.report().challenges if (ch.host, ch.segment) == (c.host, c.segment)).votes[0]
    assert (vote.outcome, vote.distance, vote.commitment is not None) == (None, None, True)


def test_an_opening_must_match_the_commitment(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(verification={"validators_r": 1}))
    ready(env)
    env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    for v in VALIDATORS:
        for c in env.challenges(v):
            env.commit_verdict(v, c.host, c.segment, "fail", distance="0.25")
    assert phase(env) == "objection"
    env.objection_round(VALIDATORS, HOSTS, 0)  # every seat objects: every challenge goes to the final vote
    assert phase(env) == "dispute"
    env.commit_round(VALIDATORS, lambda v, c: "fail", 0)
    assert phase(env) == "dispute_reveal"  # round-0 seats open their verify commitments now
    v = next(x for x in VALIDATORS if any(c.round == 0 for c in env.challenges(x)))
    c = next(x for x in env.challenges(v) if x.round == 0)
    committed = env.openings[v, c.host, c.segment, 0]
    for change in ({"outcome": "pass"}, {"distance": "0.26"}, {"salt": "00" * 32}, {"evidence": "11" * 32}):
        with pytest.raises(ContractError, match=f"^reveal_verdict: the opening does not match the verdict "
                                                f"commitment {env.addr(v)} made on host {c.host} segment "
                                                f"{c.segment} of epoch 0$"):
            env.ledger.reveal_verdict(env.key(v), committed.model_copy(update=change))
    with pytest.raises(ContractError, match=r'^reveal_verdict: distance must be a canonical decimal string like '
                                            r'"0.0123", got "1e-3"$'):
        env.raw(v, {"reveal_verdict": {**committed.model_dump(mode="json"), "distance": "1e-3"}})
    with pytest.raises(ContractError, match="unknown variant `maybe`"):
        env.raw(v, {"reveal_verdict": {**committed.model_dump(mode="json"), "outcome": "maybe"}})
    # Another validator's opening never opens a commitment (it binds the committer's address).
    other = next(x for x in VALIDATORS if x != v)
    with pytest.raises(ContractError, match=r"is not assigned to host|does not match"):
        env.ledger.reveal_verdict(env.key(other), committed)
    env.reveal_verdict(v, c.host, c.segment)
    # Its re-vote (every objecting seat commits one in `dispute`; after a fail, the same fail) opens
    # next, and then nothing more does.
    env.reveal_verdict(v, c.host, c.segment, revote=True)
    with pytest.raises(ContractError, match=f"^reveal_verdict: {env.addr(v)} already opened its verdict"):
        env.reveal_verdict(v, c.host, c.segment)
    votes = next(ch for ch in env.report().challenges if (ch.host, ch.segment) == (c.host, c.segment)).votes
    vote = next(x for x in votes if x.validator == env.addr(v))
    assert (vote.outcome, str(vote.distance), vote.salt, vote.round) == ("fail", "0.25", committed.salt, 0)


def test_trap_openings(ledger_env) -> None:
    env = ledger_env
    ready(env)
    env.traps["host1"] = [1]
    env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    with pytest.raises(ContractError, match=r"^reveal_traps: epoch 0 is in phase verify"):
        env.open_traps("host1")
    for v in VALIDATORS:
        for c in env.challenges(v):
            env.commit_verdict(v, c.host, c.segment, "pass")
    assert phase(env) == "objection"  # traps open after every round-0 verdict was committed
    with pytest.raises(ContractError, match=r"^reveal_traps: the opening does not match the trap commitment"):
        env.open_traps("host1", segments=[])  # not what it committed to
    with pytest.raises(ContractError, match=r"^reveal_traps: trap segments must be distinct and in ascending"):
        env.raw("host1", {"reveal_traps": {"epoch": 0, "segments": [1, 1], "salt": "00" * 32}})
    with pytest.raises(ContractError, match=r"^reveal_traps: trap segment 2 is not a segment"):
        env.raw("host1", {"reveal_traps": {"epoch": 0, "segments": [2], "salt": "00" * 32}})
    with pytest.raises(ContractError, match=r"^reveal_traps: .* joined epoch 0 as a validator; only hosts may"):
        env.raw("validator1", {"reveal_traps": {"epoch": 0, "segments": [], "salt": "00" * 32}})
    env.open_traps("host1")
    with pytest.raises(ContractError, match=f"^reveal_traps: {env.addr('host1')} already opened its traps"):
        env.open_traps("host1")
    assert env.ledger.participant(env.addr("host1")).traps_opened
    rows = {env.name_of(h.address): h for h in env.report().hosts}
    assert (rows["host1"].traps, rows["host2"].traps) == ([1], None)


def test_verdicts_before_verify_are_refused(ledger_env) -> None:
    env = ledger_env
    ready(env)
    env.play_epoch(HOSTS, VALIDATORS, stop_after="train")
    with pytest.raises(ContractError, match=r"^commit_verdict: epoch 0 is in phase reveal; commit_verdict is "
                                            r"accepted in phase verify or dispute only$"):
        env.commit_verdict("validator1", "host1", 0)
    with pytest.raises(ContractError, match=r"^propose_model: epoch 0 is in phase reveal"):
        env.propose("host1", digest("x"))


# -- model agreement ----------------------------------------------------------------------------


def _to_propose(env: LedgerEnv, stakes: dict[str, int]) -> None:
    for name, stake in stakes.items():
        env.bond(name, stake)
    env.bond("validator1")
    env.play_epoch(list(stakes), ["validator1"], stop_after="verify")
    assert phase(env) == "propose"


@EMBEDDED_ONLY
def test_a_hash_with_more_than_two_thirds_of_the_accepted_stake_wins_at_once(ledger_env) -> None:
    env = ledger_env
    _to_propose(env, {"host1": 10_000_000, "host2": 10_000_000, "host3": 2_000_000})
    a, b = digest("a"), digest("b")
    env.propose("host3", b)
    env.propose("host1", a)
    assert phase(env, 0) == "propose"  # 10^7 of 2.2·10^7
    env.propose("host2", a)  # 2·10^7 > 2/3 of 2.2·10^7
    closed = env.epoch(0)
    assert (closed.phase, closed.next_model_hash, closed.agreed) == ("closed", a, True)
    assert env.epoch().model_hash == a
    proposals = {h.address: h.proposal.model_hash for h in env.report(0).hosts}
    assert proposals == {env.addr("host1"): a, env.addr("host2"): a, env.addr("host3"): b}


@EMBEDDED_ONLY
def test_a_split_vote_closes_the_epoch_with_theta_unchanged(ledger_env) -> None:
    env = ledger_env
    _to_propose(env, {"host1": 10_000_000, "host2": 10_000_000, "host3": 10_000_000})
    a, b = digest("a"), digest("b")
    env.propose("host1", a)
    env.propose("host2", a)  # exactly 2/3: not more
    assert phase(env, 0) == "propose"
    env.propose("host3", b)  # everyone proposed, no hash won: close at once
    closed = env.epoch(0)
    assert (closed.phase, closed.next_model_hash, closed.agreed) == ("closed", INITIAL_MODEL_HASH, False)
    assert env.epoch().model_hash == INITIAL_MODEL_HASH


def test_without_enough_proposals_the_epoch_closes_at_the_deadline(ledger_env) -> None:
    env = ledger_env
    _to_propose(env, {"host1": 10_000_000, "host2": 10_000_000})
    env.propose("host1", digest("a"))
    with pytest.raises(ContractError,
                       match=f"^propose_model: {env.addr('host1')} already proposed a model for epoch 0$"):
        env.propose("host1", digest("b"))
    with pytest.raises(ContractError,
                       match=f"^propose_model: {env.addr('validator1')} is not an accepted host of epoch 0$"):
        env.propose("validator1", digest("a"))
    with pytest.raises(ContractError, match=r"^propose_model: model_hash must be 64 lowercase hex"):
        env.raw("host2", {"propose_model": {"epoch": 0, "model_hash": "x", "val_loss_micro": 1}})
    # A validation loss above the bound (an honest host once computed one for a diverged model) is
    # refused, so no reader of the report ever meets a value it cannot hold.
    for too_big in (MAX_LOSS_MICRO + 1, 2**64 - 1):
        with pytest.raises(ContractError, match=f"^propose_model: val_loss_micro {too_big} exceeds the bound"):
            env.raw("host2", {"propose_model": {"epoch": 0, "model_hash": digest("b"), "val_loss_micro": too_big}})
    assert [h.proposal for h in env.report().hosts if h.address == env.addr("host2")] == [None]
    deadline = env.epoch().phase_deadline
    r = env.close_phase()
    closed = env.epoch(0)
    assert (closed.phase, closed.agreed, closed.next_model_hash) == ("closed", False, INITIAL_MODEL_HASH)
    # Closed by the first transaction at or after its deadline, at that transaction's height.
    assert closed.phase_deadline == r.height >= deadline
    assert env.epoch().started_at == r.height


def test_without_accepted_hosts_the_epoch_closes_after_verify(ledger_env) -> None:
    env = ledger_env
    ready(env)
    env.play_epoch(HOSTS, VALIDATORS, vote=lambda v, c: "fail")
    closed = env.epoch(0)
    assert (closed.phase, closed.accepted, closed.agreed) == ("closed", [], False)
    assert closed.next_model_hash == INITIAL_MODEL_HASH
    assert env.epoch().model_hash == INITIAL_MODEL_HASH
    assert env.epoch().prev_seed == closed.seed


# -- verification disabled ----------------------------------------------------------------------


@EMBEDDED_ONLY
def test_with_verification_disabled_every_committed_revealed_host_is_accepted(make_ledger_env) -> None:
    env = make_ledger_env(make_spec(verification={"enabled": False}, reward_per_epoch="1000"))
    ready(env, hosts=["host1", "host2", "host3"])
    env.fund_rewards(10_000)
    env.play_epoch(["host1", "host2", "host3"], VALIDATORS, commit=["host1", "host2", "host3"],
                   reveal=["host1", "host2", "validator1", "validator2"], stop_after="reveal")
    info = env.epoch(0)
    # Finalized at the close of reveal: no challenges, straight to propose.
    assert info.phase == "propose"
    assert info.accepted == sorted(env.addr(h) for h in ["host1", "host2"])
    report = env.report(0)
    assert report.challenges == []
    outcomes = {h.address: h.outcome for h in report.hosts}
    assert outcomes[env.addr("host3")] == "no_reveal"
    assert {v.outcome for v in report.validators} == {"idle"}
    assert env.challenges("validator1", 0) == []
    # Hosts share 80 % of the reward; the validators' 20 % stays in the pool.
    assert [h.reward for h in report.hosts if h.outcome == "accepted"] == ["400", "400"]
    assert env.accounting()["reward_pool"] == 10_000 - 800
    env.propose("host1", digest("m"))
    env.propose("host2", digest("m"))
    assert env.epoch(0).agreed is True and env.epoch().model_hash == digest("m")
    env.assert_books()


# -- rules decided where the first spec was silent -------------------------------------------------


def test_a_member_with_nothing_bonded_cannot_join(ledger_env) -> None:
    # A zero minimum stake is refused at instantiation (the spec rule on minimum stakes), so a
    # member that unbonded everything is below any minimum a run can have.
    env = ledger_env
    env.bond("host1", HOST_STAKE)
    env.unbond("host1", HOST_STAKE)
    with pytest.raises(ContractError, match=r"^join: bonded stake 0inj is below the minimum 2000000inj for a host$"):
        env.join("host1")


def test_a_message_at_the_deadline_height_is_late(embedded_env) -> None:
    # Exact heights: the embedded chain makes one block per transaction.
    env = embedded_env
    ready(env, hosts=["host1", "host2", "host3"])
    for name in ["host1", "host2", "host3", *VALIDATORS]:
        env.join(name)
    deadline = env.epoch().phase_deadline
    env.wait_until(deadline - 2)
    assert env.commit("host1").height == deadline - 1  # the last height of the phase
    with pytest.raises(ContractError, match=r"^commit: epoch 0 is in phase reveal"):
        env.commit("host2")  # would land at the deadline


def test_a_member_that_becomes_eligible_during_join_is_waited_for(ledger_env) -> None:
    env = ledger_env
    ready(env, hosts=["host1"], validators=["validator1"])
    env.join("host1")
    env.bond("host2")  # eligible now: the phase waits for it too
    env.join("validator1")
    assert phase(env) == "join"
    env.join("host2")
    assert phase(env) == "train"


@EMBEDDED_ONLY
def test_epochs_are_listed_in_order_with_paging(ledger_env) -> None:
    env = ledger_env
    ready(env)
    for _ in range(3):
        env.play_epoch(HOSTS, VALIDATORS)
    assert [e.epoch for e in env.ledger.epochs()] == [0, 1, 2, 3]
    assert [e.epoch for e in env.ledger.epochs(limit=2)] == [0, 1]
    assert [e.epoch for e in env.ledger.epochs(start_after=1, limit=2)] == [2, 3]
    assert env.ledger.epochs(start_after=3) == []
    assert [e.phase for e in env.ledger.epochs()] == ["closed", "closed", "closed", "join"]
    with pytest.raises(ContractError, match=r"^epoch: epoch 9 has not started; the current epoch is 3$"):
        env.epoch(9)


@EMBEDDED_ONLY
def test_a_partial_epoch_is_checked_among_its_segments_accepted_and_paid_by_them(make_ledger_env) -> None:
    # S = 4; host2 straggles and commits the 2 segments it finished (issue 30): its challenges lie
    # among those 2 (its own last one always), it is accepted, nobody is slashed, its Δ enters the
    # aggregation with its segments and the hosts' 80 % of the reward is split 4 : 2.
    env = make_ledger_env(make_spec(train={"inner_steps": 8, "segment_steps": 2}, reward_per_epoch="6000"))
    ready(env, hosts=["host1", "host2"])
    env.fund_rewards(6_000)
    total = env.total_funds()
    env.play_epoch(["host1", "host2"], VALIDATORS, stop_after="join")
    env.commit("host1", segments=4)
    env.commit("host2", segments=2)
    env.play_epoch(["host1", "host2"], VALIDATORS, commit=[])
    report = env.report(0)
    challenged = {h: sorted(c.segment for c in report.challenges if c.host == env.addr(h)) for h in ("host1", "host2")}
    assert challenged["host1"][-1] == 3 and challenged["host2"][-1] == 1
    assert all(g < 2 for g in challenged["host2"])
    assert {h.outcome for h in report.hosts} == {"accepted"} and all(h.slashed == "0" for h in report.hosts)
    assert {i.address: i.segments for i in env.ledger.aggregation_inputs(0)} == {
        env.addr("host1"): 4, env.addr("host2"): 2}
    assert {h.address: h.reward for h in report.hosts} == {env.addr("host1"): "3200", env.addr("host2"): "1600"}
    assert env.total_funds() == total
    assert env.epoch().epoch == 1  # training advances


def test_a_host_that_sits_out_is_not_checked_paid_or_slashed_and_trains_the_next_epoch(make_ledger_env) -> None:
    # Issue 30: a host that would finish no segment sends sit_out instead of committing nothing
    # (absent, slashed). Train closes as soon as everyone committed or sat out; the host is not
    # challenged, paid or slashed, and joins the next epoch with its whole stake.
    env = make_ledger_env(make_spec(reward_per_epoch="6000"))
    ready(env, hosts=["host1", "host2"])
    env.fund_rewards(6_000)
    total = env.total_funds()
    env.play_epoch(HOSTS, VALIDATORS, stop_after="join")

    def sit_out(name: str, epoch: int = 0) -> TxResult:
        return env.ledger.sit_out(env.key(name), SitOut(epoch=epoch))

    with pytest.raises(ContractError, match=f"^sit_out: {env.addr('validator1')} joined epoch 0 as a validator"):
        sit_out("validator1")
    with pytest.raises(ContractError, match=f"^sit_out: {env.addr('outsider')} did not join epoch 0$"):
        sit_out("outsider")
    env.commit("host1")
    with pytest.raises(ContractError, match=f"^sit_out: {env.addr('host1')} already committed in epoch 0; "
                                            "a committed host cannot sit out$"):
        sit_out("host1")
    sit_out("host2")
    assert phase(env) == "reveal", "train waits for a sit-out no more than for a commitment"
    assert env.ledger.participant(env.addr("host2")).outcome == "sat_out"
    with pytest.raises(ContractError, match=r"^sit_out: epoch 0 is in phase reveal; sit_out is accepted in phase "
                                            r"train only$"):
        sit_out("host2")
    env.play_epoch(HOSTS, VALIDATORS, commit=[])
    report = env.report(0)
    assert not any(c.host == env.addr("host2") for c in report.challenges)
    rows = {env.name_of(h.address): h for h in report.hosts}
    assert (rows["host2"].outcome, rows["host2"].slashed, rows["host2"].reward) == ("sat_out", "0", "0")
    assert (rows["host1"].outcome, rows["host1"].reward) == ("accepted", "4800")  # the whole host part
    assert report.slashed_total == "0"
    assert env.total_funds() == total
    # The next epoch: it joins with its whole stake, commits and is accepted like anyone else.
    assert env.ledger.member(env.addr("host2")).bonded == str(HOST_STAKE)
    env.play_epoch(HOSTS, VALIDATORS)
    assert {h.outcome for h in env.report(1).hosts} == {"accepted"}


@EMBEDDED_ONLY
def test_a_host_that_sat_out_ranks_last_for_a_seat_for_the_window_of_w_epochs(make_ledger_env) -> None:
    # Issue 30: at max_hosts, sitting out must not hold a seat for free. For W epochs after a miss
    # (economics.miss_window_epochs, 8), the host that sat out ranks below every host that missed
    # fewer: a smaller newcomer evicts it, and it cannot win the seat back with its larger stake
    # (which stays whole) in the epoch after, nor the one after that.
    env = make_ledger_env(make_spec(phases={"max_hosts": 2}))
    ready(env)
    total = env.total_funds()
    env.play_epoch(HOSTS, VALIDATORS, stop_after="join")
    env.commit("host1")
    env.ledger.sit_out(env.key("host2"), SitOut(epoch=0))
    env.play_epoch(HOSTS, VALIDATORS, commit=[])
    env.bond("host3", HOST_STAKE // 2)  # a smaller stake than either seat
    for epoch in (1, 2):
        for name in [*(["host2"] if epoch == 1 else []), "host1", "host3", *VALIDATORS]:
            env.join(name)
        assert set(env.epoch(epoch).hosts) == {env.addr("host1"), env.addr("host3")}, "host3 holds host2's seat"
        with pytest.raises(ContractError, match=f"^join: epoch {epoch} is full and {env.addr('host2')} missed 1 of "
                                                "the last 8 epochs \\(the last: epoch 0\\): a host ranks below every "
                                                "host that missed fewer$"):
            env.join("host2")
        env.close_phase()  # host2 is eligible: join runs to its deadline
        env.play_epoch(["host1", "host3"], VALIDATORS)
    assert env.ledger.member(env.addr("host2")).bonded == str(HOST_STAKE)
    assert env.total_funds() == total
