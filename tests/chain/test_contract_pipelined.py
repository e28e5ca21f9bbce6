"""Two epochs in flight (``phases.pipelined``; docs/contract.md, "Pipelined epochs"): epoch e + 1
opens from the optimistic start e's committed hosts agree on and trains while e's verdict rounds,
finalize and propose run; a cheater caught in e after e + 1 started is slashed, e + 1's own start
vote waits for e to settle, and every coin stays accounted for.

Backend-neutral (``make_ledger_env``): the embedded chain, and the session's devnet.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from ledger_env import HOST_STAKE, LedgerEnv, digest, make_spec

from chain.ledger import ContractError
from protocol.messages import StartProposal
from protocol.rules.sampling import challenge_seats, pickers
from protocol.rules.spec import RunSpec
from protocol.views import VERDICT_COMMIT_PHASES, VERDICT_REVEAL_PHASES, Challenge, validator_weights

HOSTS = ["host1", "host2", "host3"]
VALIDATORS = ["validator1", "validator2"]
CHEATER = "host3"


def pipelined_spec() -> RunSpec:
    # Epoch e + 1's reveal window runs while e's verdict rounds (re-votes included) take a block
    # per transaction: 80 blocks leave it open until the test reveals.
    return make_spec(phases={"pipelined": True, "reveal_blocks": 80}, unbonding_epochs=1)


@pytest.fixture
def env(make_ledger_env: Callable[[RunSpec], LedgerEnv]) -> LedgerEnv:
    """A pipelined run (:func:`pipelined_spec`) on each backend, every host and validator bonded."""
    env = make_ledger_env(pipelined_spec())
    env.bond_all([*HOSTS, *VALIDATORS])
    return env


def cheats(env: LedgerEnv) -> Callable[[str, Challenge], str]:
    """The validators' vote: ``fail`` on every segment of :data:`CHEATER`, ``pass`` on the rest."""
    cheater_address = env.addr(CHEATER)
    return lambda _, challenge: "fail" if challenge.host == cheater_address else "pass"


def propose_start(env: LedgerEnv, name: str, epoch: int, model_hash: str):
    return env.ledger.propose_start(env.key(name), StartProposal(epoch=epoch, model_hash=model_hash))


def play_verdicts(env: LedgerEnv, epoch: int, vote, validators: list[str] = VALIDATORS) -> None:
    """Every verdict round of ``epoch`` (which may be the settling one), to finalize."""
    while (phase := env.epoch(epoch).phase) in (*VERDICT_COMMIT_PHASES, "objection", *VERDICT_REVEAL_PHASES):
        if phase in VERDICT_COMMIT_PHASES:
            env.commit_round(validators, vote, epoch)
        elif phase == "objection":
            env.objection_round(validators, HOSTS, epoch)
        else:
            env.reveal_round(validators, None, HOSTS, epoch)
        env.settle()
        if env.epoch(epoch).phase == phase:
            env.wait_past_deadline(epoch)
            env.advance()
            env.settle()


def test_a_spec_at_the_synchronous_default_keeps_its_run_id() -> None:
    sync = make_spec()
    assert b"pipelined" not in sync.canonical()
    assert sync.run_id() == make_spec(phases={"pipelined": False}).run_id()
    assert b'"pipelined":true' in pipelined_spec().canonical()
    assert RunSpec.from_canonical(pipelined_spec().canonical()).phases.pipelined


def test_a_cheater_caught_in_e_after_e_plus_1_started_is_slashed_and_e_plus_2_waits(env: LedgerEnv) -> None:
    total = env.total_funds()
    cheater_address = env.addr(CHEATER)

    # Epoch 0 trains, reveals; then its committed hosts agree on the optimistic start of epoch 1.
    env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    assert env.epoch(0).phase == "verify"
    start_1 = digest("optimistic theta 1")
    for name in HOSTS[:2]:
        propose_start(env, name, 0, start_1)
    assert env.current() == 0, "2 of 3 equal stakes are not more than 2/3"
    r = propose_start(env, HOSTS[2], 0, start_1)
    assert [(e.get("settling"), e.get("training")) for e in r.events_of("wasm-pipeline")] == [("0", "1")]
    info = env.epoch()
    assert (info.epoch, info.phase, info.settling, info.model_hash) == (1, "join", 0, start_1)
    assert info.prev_seed == env.epoch(0).seed
    assert env.epoch(0).start_model_hash == start_1

    # Epoch 1 joins and trains while epoch 0 is verified; the cheater's Δ is caught in epoch 0.
    env.play_epoch(HOSTS, VALIDATORS, stop_after="train")
    assert env.epoch(1).phase == "reveal"
    play_verdicts(env, 0, cheats(env))
    assert env.epoch(0).phase == "propose"
    report = {h.address: h for h in env.report(0).hosts}
    assert report[cheater_address].outcome == "invalid"
    assert int(report[cheater_address].slashed) == HOST_STAKE // 2
    assert [report[env.addr(h)].outcome for h in HOSTS[:2]] == ["accepted", "accepted"]
    # Epoch 1's reveal closes (its seed and weights fixed) only once epoch 0 has settled, so its
    # start vote for epoch 2 waits too (contract 0.3.7).
    for name in [*HOSTS, *VALIDATORS]:
        env.reveal(name, 1)
    env.settle()
    assert env.epoch(1).phase == "reveal"
    with pytest.raises(ContractError, match=r"^propose_start: epoch 1 is in reveal: the start vote opens when"):
        propose_start(env, "host1", 1, digest("optimistic theta 2"))

    # Epoch 0 settles on the accepted Δs alone: θ^s_1, which epoch 2's start must build on.
    settled_1 = digest("settled theta 1")
    for name in HOSTS[:2]:
        env.propose(name, settled_1, 0)
    closed = env.epoch(0)
    assert (closed.phase, closed.next_model_hash, closed.agreed) == ("closed", settled_1, True)
    info = env.epoch()
    assert (info.epoch, info.settling, info.settled_start) == (1, None, settled_1)
    env.settle()
    assert env.epoch(1).phase == "verify", "epoch 1's reveal closed with epoch 0"

    # Epoch 1 is verified; its hosts agree on epoch 2's start. The cheater weighs there the half it
    # kept (contract 0.3.6), so the honest two, 2 of 2.5 stakes, are enough.
    play_verdicts(env, 1, None)
    start_2 = digest("optimistic theta 2")
    for name in HOSTS[:2]:
        propose_start(env, name, 1, start_2)
    info = env.epoch()
    assert (info.epoch, info.settling, info.model_hash) == (2, 1, start_2)
    assert env.total_funds() == total
    env.assert_books()


def test_a_host_convicted_in_e_after_joining_e_plus_1_votes_there_with_what_it_kept(env: LedgerEnv) -> None:
    # Issue 27, contract 0.3.6: the cheater joins and commits in epoch 1 while epoch 0 settles,
    # then epoch 0 convicts it (`invalid`, half its stake). In epoch 1 its start and model votes
    # weigh what it kept: the two honest hosts' 2 stakes are more than 2/3 of 2.5, so they open
    # epoch 2 and agree on θ^s_2 without it (at its stake at join, 2 of 3 would not pass). (Rust:
    # the same in contracts/veriloco/src/tests/phases/pipelined_attacks.rs.)
    total = env.total_funds()
    cheater_address = env.addr(CHEATER)
    env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    for name in HOSTS:
        propose_start(env, name, 0, digest("optimistic theta 1"))
    env.play_epoch(HOSTS, VALIDATORS, stop_after="train")
    play_verdicts(env, 0, cheats(env))
    row = {h.address: h for h in env.report(0).hosts}[cheater_address]
    assert (row.outcome, int(row.slashed)) == ("invalid", HOST_STAKE // 2)
    for name in HOSTS[:2]:
        env.propose(name, digest("settled theta 1"), 0)
    assert env.epoch(0).phase == "closed"

    env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    for name in HOSTS[:2]:
        propose_start(env, name, 1, digest("optimistic theta 2"))
    info = env.epoch()
    assert (info.epoch, info.settling) == (2, 1), "2 of 2.5 stakes is more than 2/3"
    play_verdicts(env, 1, None)
    hosts = {h.address: h for h in env.report(1).hosts}
    assert {a: (h.outcome, int(h.stake), h.weight) for a, h in hosts.items()} == {
        env.addr(h): ("accepted", HOST_STAKE, str(HOST_STAKE // 2) if h == CHEATER else None) for h in HOSTS}
    env.propose(CHEATER, digest("forged theta 2"), 1)
    for name in HOSTS[:2]:
        env.propose(name, digest("settled theta 2"), 1)
    closed = env.epoch(1)
    assert (closed.phase, closed.next_model_hash, closed.agreed) == ("closed", digest("settled theta 2"), True)
    assert env.total_funds() == total
    env.assert_books()


def test_a_stake_unbonded_in_e_plus_1_while_e_settles_is_slashed_by_both_and_claimed_after_both(
        env: LedgerEnv) -> None:
    # Issue 30 review: the cheater joins epoch 1 while epoch 0 settles, then unbonds everything
    # (released at epoch 2) and cheats in both epochs. Each epoch's slash reaches the unbonding
    # entry (epoch 1's takes its share of what epoch 0 left), and the claim waits for epoch 1 to
    # settle although epoch 2, the release epoch, is current. (Rust: the same in
    # contracts/veriloco/src/tests/phases/pipelined_attacks.rs.)
    total = env.total_funds()
    cheater_address = env.addr(CHEATER)

    def unbonding() -> list[tuple[int, int]]:
        return [(int(u.amount), u.release_epoch) for u in env.member(CHEATER).unbonding]

    env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    for name in HOSTS:
        propose_start(env, name, 0, digest("optimistic theta 1"))
    assert (env.current(), env.epoch().settling) == (1, 0)
    env.play_epoch(HOSTS, VALIDATORS, stop_after="join")  # the cheater joins epoch 1 too
    env.unbond(CHEATER, HOST_STAKE)
    assert unbonding() == [(HOST_STAKE, 2)]
    env.play_epoch(HOSTS, VALIDATORS, stop_after="train")

    play_verdicts(env, 0, cheats(env))
    row = {h.address: h for h in env.report(0).hosts}[cheater_address]
    assert (row.outcome, int(row.slashed)) == ("invalid", HOST_STAKE // 2)
    assert unbonding() == [(HOST_STAKE // 2, 2)]
    for name in HOSTS[:2]:
        env.propose(name, digest("settled theta 1"), 0)
    assert env.epoch(0).phase == "closed"

    env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    for name in HOSTS[:2]:  # 2 of the 2.5 stakes the committed hosts weigh: the cheater kept half
        propose_start(env, name, 1, digest("optimistic theta 2"))
    info = env.epoch()
    assert (info.epoch, info.settling) == (2, 1)
    with pytest.raises(ContractError, match=r"^claim: nothing to claim at epoch 1; the next release is at epoch 2"):
        env.claim(CHEATER)

    play_verdicts(env, 1, cheats(env))
    row = {h.address: h for h in env.report(1).hosts}[cheater_address]
    assert (row.outcome, int(row.stake), row.weight, int(row.slashed)) == (
        "invalid", HOST_STAKE, str(HOST_STAKE // 2), HOST_STAKE // 4)
    for name in HOSTS[:2]:
        env.propose(name, digest("settled theta 2"), 1)
    assert env.epoch().settling is None
    before = env.net_balance(CHEATER)
    env.claim(CHEATER)
    assert env.net_balance(CHEATER) - before == HOST_STAKE // 4
    assert unbonding() == []
    assert env.total_funds() == total
    env.assert_books()


def test_a_validator_convicted_in_e_after_joining_e_plus_1_weighs_there_what_it_kept(
        make_ledger_env: Callable[[RunSpec], LedgerEnv]) -> None:
    # Issue 27, two epochs in flight: a validator joins epoch 1 while epoch 0 settles, then lies in
    # epoch 0 (`fail` on every seat) and is convicted `wrong`. In epoch 1 it weighs what it still
    # has at risk, not its stake at join: in the picker draw (the seats the Python rules draw
    # from the report's weights are the contract's) and in the report an operator reads.
    validators = ["validator1", "validator2", "validator3", "validator4"]
    env = make_ledger_env(pipelined_spec())
    env.bond_all([*HOSTS, *validators])
    total = env.total_funds()
    env.play_epoch(HOSTS, validators, stop_after="reveal")
    liar = next(v for v in validators if env.challenges(v, 0))
    for name in HOSTS:
        propose_start(env, name, 0, digest("optimistic theta 1"))
    assert env.current() == 1
    env.play_epoch(HOSTS, validators, stop_after="train")
    stake_at_join = int(next(v.stake for v in env.report(1).validators if v.address == env.addr(liar)))

    play_verdicts(env, 0, lambda name, _: "fail" if name == liar else "pass", validators)
    settled = {v.address: v for v in env.report(0).validators}
    assert settled[env.addr(liar)].outcome == "wrong" and int(settled[env.addr(liar)].slashed) > 0
    member = env.member(liar)
    at_risk = int(member.bonded) + sum(int(u.amount) for u in member.unbonding)
    assert at_risk < stake_at_join

    # Everyone reveals in epoch 1, but its reveal close (the draw) waits for epoch 0 to close
    # (contract 0.3.7): a slash of epoch 0's last pages would land before it too.
    for name in [*HOSTS, *validators]:
        env.reveal(name, 1)
    env.settle()
    assert env.epoch(1).phase == "reveal"
    for name in HOSTS:
        env.propose(name, digest("settled theta 1"), 0)
    env.settle()
    assert (env.epoch(0).phase, env.epoch(1).phase) == ("closed", "verify")
    report = env.report(1)
    weights = validator_weights(report.validators)
    assert {v.address: v.weight for v in report.validators} == {
        env.addr(v): (str(at_risk) if v == liar else None) for v in validators}
    assert weights[env.addr(liar)] == at_risk
    info = env.epoch(1)
    want = {}
    for host in HOSTS:
        address = env.addr(host)
        chosen = pickers(bytes.fromhex(info.prev_seed), address, weights, env.spec.verification.seats_cap)
        secrets = {p: env.secret(env.name_of(p), 1) for p in chosen}
        for segment, seats in challenge_seats(secrets, address, env.spec.train.segments,
                                              env.spec.verification.challenges_k).items():
            want[(address, segment)] = seats
    assert {(c.host, c.segment): [v.validator for v in c.votes if v.round == 0] for c in report.challenges} == want
    assert env.total_funds() == total
    env.assert_books()
