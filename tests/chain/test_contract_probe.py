"""The probe gain on chain (issue 28): a verdict on a host's last segment carries the host's probe
gain (``gain_micro``, part of its commitment); the decided gain is recorded for the host and shown by
the report, the challenge and vote views and the aggregation inputs proposers read; two gains are two
verdicts (disagreement goes to the final vote, the minority is ``wrong``); a gain is required where
it belongs and refused elsewhere. The contract's own tests are in ``contracts/veriloco/src/tests``.
"""

from __future__ import annotations

import pytest
from ledger_env import GAIN_MICRO, LedgerEnv, make_spec

from chain.ledger import ContractError
from protocol.rules.limits import MAX_GAIN_MICRO

HOSTS = ["host1", "host2"]
VALIDATORS = ["validator1", "validator2", "validator3"]


def last_segment(env: LedgerEnv, host: str, epoch: int = 0):
    segments = env.spec.train.segments
    return next(c for c in env.report(epoch).challenges if c.host == env.addr(host) and c.segment == segments - 1)


def test_a_last_segment_verdict_carries_the_hosts_probe_gain_to_every_view(make_ledger_env) -> None:
    env = make_ledger_env()
    assert env.spec.verification.probe_windows > 0  # the default spec probes
    env.bond_all([*HOSTS, *VALIDATORS])
    e = env.play_epoch(HOSTS, VALIDATORS, stop_after="verify")
    report = env.report(e)
    last = env.spec.train.segments - 1
    for c in report.challenges:
        want = GAIN_MICRO if c.segment == last else None
        assert (c.outcome, c.rounds, c.gain_micro) == ("pass", 0, want)
        assert {v.gain_micro for v in c.votes} == {want}
    assert {(h.outcome, h.gain_micro) for h in report.hosts} == {("accepted", GAIN_MICRO)}
    assert [i.gain_micro for i in env.ledger.aggregation_inputs(e)] == [GAIN_MICRO] * len(HOSTS)


def test_different_gains_are_different_verdicts_and_the_minority_is_wrong(embedded_env_factory) -> None:
    env = embedded_env_factory(make_spec())
    env.bond_all([*HOSTS, *VALIDATORS])
    e = env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    liar = env.name_of(last_segment(env, "host1", e).votes[0].validator)  # a round-0 seat of it
    env.gains[liar] = GAIN_MICRO - 7
    env.play_epoch(HOSTS, VALIDATORS, stop_after="verify")
    report = env.report(e)
    for host in HOSTS:
        c = last_segment(env, host, e)
        seated = env.addr(liar) in {v.validator for v in c.votes if v.round == 0}
        # Every seat passed, so nobody objected: the opened gains disagreed, and the final vote decided.
        assert (c.outcome, c.rounds, c.gain_micro) == ("pass", int(seated), GAIN_MICRO)
    assert {(h.outcome, h.gain_micro, h.slashed) for h in report.hosts} == {("accepted", GAIN_MICRO, "0")}
    seen = {env.name_of(v.address): (v.outcome, int(v.slashed) > 0) for v in report.validators}
    assert seen.pop(liar) == ("wrong", True)
    assert set(seen.values()) == {("diligent", False)}


def to_verdict_reveal(env: LedgerEnv) -> int:
    env.bond_all([*HOSTS, *VALIDATORS])
    e = env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    env.commit_round(VALIDATORS, None, e)
    env.objection_round(VALIDATORS, HOSTS, e)
    assert env.epoch(e).phase == "verdict_reveal"
    return e


def test_a_gain_is_required_on_the_last_segment_and_refused_elsewhere(embedded_env_factory) -> None:
    env = embedded_env_factory(make_spec())
    e = to_verdict_reveal(env)
    v = env.name_of(last_segment(env, "host1", e).votes[0].validator)
    kept = env.openings[v, env.addr("host1"), env.spec.train.segments - 1, e]
    with pytest.raises(ContractError, match="must carry the host's probe gain"):
        env.ledger.reveal_verdict(env.key(v), kept.model_copy(update={"gain_micro": None}))
    with pytest.raises(ContractError, match=f"gain_micro must be within ±{MAX_GAIN_MICRO}"):
        env.raw(v, {"reveal_verdict": {**kept.model_dump(mode="json"), "gain_micro": MAX_GAIN_MICRO + 1}})
    first = next(c for c in env.report(e).challenges if c.segment == 0)
    seat = env.name_of(first.votes[0].validator)
    opening = env.openings[seat, first.host, 0, e]
    with pytest.raises(ContractError, match="belongs only on a verdict on a host's last segment"):
        env.ledger.reveal_verdict(env.key(seat), opening.model_copy(update={"gain_micro": GAIN_MICRO}))
    env.ledger.reveal_verdict(env.key(v), kept)  # the opening as committed


def test_without_the_probe_a_verdict_carries_no_gain(embedded_env_factory) -> None:
    env = embedded_env_factory(make_spec(verification={"probe_windows": 0}))
    e = to_verdict_reveal(env)
    c = last_segment(env, "host1", e)
    v = env.name_of(c.votes[0].validator)
    kept = env.openings[v, c.host, c.segment, e]
    assert kept.gain_micro is None
    with pytest.raises(ContractError, match=r"probe_windows > 0"):
        env.ledger.reveal_verdict(env.key(v), kept.model_copy(update={"gain_micro": 5}))
    env.ledger.reveal_verdict(env.key(v), kept)
