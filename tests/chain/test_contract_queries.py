"""The participant-shaped queries the nodes poll: one participant's status in an epoch
(``Ledger.participant``) and the aggregation inputs of an epoch (``Ledger.aggregation_inputs``).

Backend-neutral (``ledger_env``).
"""

from __future__ import annotations

import pytest
from ledger_env import ENDPOINT, HOST_STAKE, LedgerEnv
from test_contract_epoch import HOSTS, VALIDATORS, ready

from chain.ledger import ContractError, is_unknown_field


def status(env: LedgerEnv, name: str, epoch: int | None = None):
    return env.ledger.participant(env.addr(name), epoch)


def test_participant_status_follows_one_host_and_one_validator(ledger_env) -> None:
    env = ledger_env
    ready(env)
    before = status(env, "host1")
    assert (before.epoch, before.phase, before.joined, before.role) == (0, "join", False, None)
    assert before.model_hash == env.epoch().model_hash and before.prev_seed == env.epoch().prev_seed
    env.play_epoch(HOSTS, VALIDATORS, stop_after="join")
    s = status(env, "host1")
    assert (s.phase, s.joined, s.role, int(s.stake), s.committed) == ("train", True, "host", HOST_STAKE, False)
    env.commit("host1")
    assert status(env, "host1").committed and not status(env, "host2").committed
    env.play_epoch(HOSTS, VALIDATORS, commit=["host2"], stop_after="train")
    assert not status(env, "validator1").revealed
    env.reveal("validator1")
    assert status(env, "validator1").revealed
    env.play_epoch(HOSTS, VALIDATORS, reveal=["host1", "host2", "validator2"], stop_after="reveal")
    # Each host's pickers (one of two equal stakes already holds more than 1/3) sit on both of its
    # challenges (k + 1 = 2): a seated validator holds two per host it picks for.
    seat = next(v for v in VALIDATORS if env.challenges(v))
    n = len(env.challenges(seat))
    assert n in (2, 4)
    v = status(env, seat)
    assert (v.phase, v.round, v.assigned, v.voted, v.to_commit, v.to_reveal, v.outcome, v.ready_due) == (
        "verify", 0, n, 0, n, 0, "pending", False)
    first = env.challenges(seat)[0]
    env.commit_verdict(seat, first.host, first.segment, "pass")
    v = status(env, seat)
    assert (v.to_commit, v.to_reveal, v.voted) == (n - 1, 0, 0)
    assert status(env, "host1").assigned == 0  # hosts are not assigned challenges
    h = status(env, "host1")
    assert (h.challenged, h.traps_opened) == (True, False)
    for name in VALIDATORS:
        for c in env.challenges(name):
            if (name, c.host, c.segment) != (seat, first.host, first.segment):
                env.commit_verdict(name, c.host, c.segment, "pass")
    # objection: nothing to commit or open; the seat owes its ready.
    v = status(env, seat)
    assert (v.phase, v.to_commit, v.to_reveal, v.ready_due) == ("objection", 0, 0, True)
    env.open_traps("host1")
    assert status(env, "host1").traps_opened and not status(env, "host2").traps_opened
    env.ready(seat)
    assert not status(env, seat).ready_due
    env.objection_round(VALIDATORS, HOSTS, 0)
    v = status(env, seat)
    assert (v.phase, v.to_commit, v.to_reveal, v.ready_due) == ("verdict_reveal", 0, n, False)
    env.reveal_verdict(seat, first.host, first.segment)
    assert (status(env, seat).voted, status(env, seat).to_reveal) == (1, n - 1)
    env.play_epoch(HOSTS, VALIDATORS, stop_after="verify")
    h = status(env, "host1")
    assert (h.phase, h.outcome, h.accepted, h.proposed) == ("propose", "accepted", True, False)
    assert status(env, seat).outcome == "diligent"
    env.propose("host1", "ab" * 32)
    assert status(env, "host1").proposed and not status(env, "host2").proposed
    env.play_epoch(HOSTS, VALIDATORS)
    # The current epoch by default, a past one by number.
    assert status(env, "host1").epoch == 1 and not status(env, "host1").joined
    assert status(env, "host1", 0).phase == "closed" and status(env, "host1", 0).proposed


def test_participant_status_of_a_stranger_and_refusals(ledger_env) -> None:
    env = ledger_env
    s = status(env, "outsider")
    assert (s.joined, s.role, s.stake, s.outcome) == (False, None, "0", "pending")
    with pytest.raises(ContractError, match="participant: invalid address"):
        env.ledger.participant("inj1invalid")
    with pytest.raises(ContractError, match="participant: epoch 7 has not started; the current epoch is 0"):
        env.ledger.participant(env.addr("host1"), 7)


def test_aggregation_inputs_are_the_accepted_hosts_with_endpoint_and_delta_hash(ledger_env) -> None:
    env = ledger_env
    hosts = ["host1", "host2", "host3"]
    ready(env, hosts)
    env.play_epoch(hosts, VALIDATORS, stop_after="reveal")
    assert env.ledger.aggregation_inputs(0) == []  # nothing before finalize
    # host2 fails its challenges: it is not an input.
    env.play_epoch(hosts, VALIDATORS, vote=lambda _v, c: "fail" if c.host == env.addr("host2") else "pass",
                   stop_after="verify")
    inputs = env.ledger.aggregation_inputs(0)
    accepted = sorted(env.addr(h) for h in ["host1", "host3"])
    assert [i.address for i in inputs] == accepted == env.epoch(0).accepted
    committed = {h.address: h.commitment for h in env.report(0).hosts}
    for i in inputs:
        assert i.endpoint == ENDPOINT
        assert i.delta_hash == committed[i.address].delta_hash
        assert i.segments == committed[i.address].segments
    with pytest.raises(ContractError, match="aggregation_inputs: epoch 5 has not started"):
        env.ledger.aggregation_inputs(5)
    with pytest.raises(ContractError, match="aggregation_inputs: start_after is longer than an address"):
        env.ledger.backend.query({"aggregation_inputs": {"epoch": 0, "start_after": "x" * 300}})


def test_the_header_form_of_epoch_and_epochs_is_the_answer_without_its_four_lists(ledger_env) -> None:
    env = ledger_env
    hosts = ["host1", "host2", "host3"]
    ready(env, hosts)
    env.play_epoch(hosts, VALIDATORS, stop_after="verify")  # finalized: every list filled
    full = env.ledger.epoch(0)
    assert (len(full.hosts), len(full.validators), len(full.committed), len(full.accepted)) == (
        3, len(VALIDATORS), 3, 3)
    lists = {"hosts": [], "validators": [], "committed": [], "accepted": []}
    header = env.ledger.epoch(0, lists=False)
    assert header == full.model_copy(update=lists)
    assert env.ledger.epochs(lists=False) == [header]
    assert env.ledger.epochs() == [full]
    current = env.ledger.epoch()
    assert env.ledger.epoch(lists=False) == current.model_copy(update=lists)
    # On the wire the lists are absent, not empty; `lists: true` is the answer without the field.
    answer = env.ledger.backend.query({"epoch": {"epoch": 0, "lists": False}})
    assert not set(lists) & set(answer) and answer["model_hash"] == full.model_hash
    assert env.ledger.backend.query({"epoch": {"epoch": 0, "lists": True}}) == env.ledger.backend.query(
        {"epoch": {"epoch": 0}})
    page = env.ledger.backend.query({"epochs": {"lists": False}})
    assert [set(lists) & set(e) for e in page["epochs"]] == [set()] * len(page["epochs"])
    # A contract refuses a field it does not know in the one form the fallback to the full answer
    # recognizes (a code id from before `lists`: tests/node/test_global_store.py).
    with pytest.raises(ContractError, match=r"^invalid query message: unknown field `list`, expected one of "
                                            r"`epoch`, `lists`, `counts`") as unknown:
        env.ledger.backend.query({"epoch": {"epoch": 0, "list": False}})
    assert is_unknown_field(unknown.value, "list") and not is_unknown_field(unknown.value, "lists")
    with pytest.raises(ContractError, match=r"^invalid query message: invalid type: string"):
        env.ledger.backend.query({"epochs": {"lists": "no"}})
