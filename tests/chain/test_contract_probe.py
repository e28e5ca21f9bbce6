"""The probe gain on chain (issue 28): a verdict on a host's last segment carries the host's probe
gain (``gain_micro``, part of its commitment); the decided gain is recorded for the host and shown by
the report, the challenge and vote views and the aggregation inputs proposers read; two gains are two
verdicts (disagreement is a gain dispute: every seat re-votes and every final voter votes with the
main gain and, blind, the gain on the host's dispute windows; the main gain is decided, a seat whose
round-0 gain was another is ``wrong``, a copier without the dispute windows' gain too); a gain is
required where it belongs and refused elsewhere. The contract's own tests are in ``contracts/veriloco/src/tests``.
"""

from __future__ import annotations

import pytest
from ledger_env import DISPUTE_GAIN_MICRO, GAIN_MICRO, LedgerEnv, make_spec

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


def test_a_gain_liar_that_re_votes_honestly_is_wrong_and_loses_stake(make_ledger_env) -> None:
    env = make_ledger_env()
    env.bond_all([*HOSTS, *VALIDATORS])
    e = env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    liar = env.name_of(last_segment(env, "host1", e).votes[0].validator)  # a round-0 seat of it
    env.gains[liar] = GAIN_MICRO - 7  # its round-0 lie; its re-vote (both gains) is honest
    before = env.total_funds()
    env.play_epoch(HOSTS, VALIDATORS, stop_after="verify")
    report = env.report(e)
    for host in HOSTS:
        c = last_segment(env, host, e)
        seated = env.addr(liar) in {v.validator for v in c.votes if v.round == 0}
        # Every seat passed, so nobody objected: the opened gains disagreed, and the blind votes (every
        # seat's re-vote included, each with the dispute windows' gain) decided the main gain.
        assert (c.outcome, c.rounds, c.gain_micro) == ("pass", int(seated), GAIN_MICRO)
        if seated:
            assert {(v.gain_micro, v.dispute_gain_micro) for v in c.votes} == {(GAIN_MICRO, DISPUTE_GAIN_MICRO)}
            # The liar's round-0 opening is kept beside its re-vote (the lie stays on record).
            assert {env.name_of(v.validator): v.round0_gain_micro for v in c.votes if v.round == 0} == {
                env.name_of(v.validator): GAIN_MICRO - 7 if env.name_of(v.validator) == liar else GAIN_MICRO
                for v in c.votes if v.round == 0}
    assert {(h.outcome, h.slashed) for h in report.hosts} == {("accepted", "0")}
    assert len({int(h.reward) for h in report.hosts}) == 1  # paid as before
    seen = {env.name_of(v.address): (v.outcome, int(v.slashed) > 0) for v in report.validators}
    assert seen.pop(liar) == ("wrong", True)
    assert set(seen.values()) == {("diligent", False)}
    assert env.total_funds() == before


def test_a_final_voter_that_copies_an_opened_gain_is_wrong(embedded_env_factory) -> None:
    env = embedded_env_factory(make_spec())
    env.bond_all([*HOSTS, *VALIDATORS])
    e = env.play_epoch(HOSTS, VALIDATORS, stop_after="reveal")
    c = last_segment(env, "host1", e)
    seats = {env.name_of(v.validator) for v in c.votes if v.round == 0}
    liar = env.name_of(c.votes[0].validator)
    env.gains[liar] = GAIN_MICRO - 7  # a gain dispute; its re-vote is honest
    # The copier's vote carries the honest main gain it saw opened, and, having computed no probe, that
    # number again for the dispute windows.
    copier = next(v for v in VALIDATORS if v not in seats)
    env.dispute_gains[copier] = GAIN_MICRO
    env.play_epoch(HOSTS, VALIDATORS, stop_after="verify")
    report = env.report(e)
    assert last_segment(env, "host1", e).gain_micro == GAIN_MICRO
    seen = {env.name_of(v.address): v.outcome for v in report.validators}
    assert seen.pop(copier) == "wrong"
    assert seen.pop(liar) == "wrong"  # its round-0 lie costs it, honest re-vote or not
    assert set(seen.values()) == {"diligent"}
    assert {h.outcome for h in report.hosts} == {"accepted"}


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
    # A dispute-window gain belongs only on a vote deciding a gain dispute, never on a round-0 opening.
    with pytest.raises(ContractError, match="dispute_gain_micro belongs only"):
        env.ledger.reveal_verdict(env.key(v), kept.model_copy(update={"dispute_gain_micro": 1}))
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


def test_a_host_without_a_decided_gain_is_left_out_of_the_aggregate_but_accepted_and_paid(
        embedded_env_factory) -> None:
    # Every seat of host4's last segment commits its `pass` and never opens it: the challenge passes
    # (undisputed) with no gain, so the chain decides none for host4. Proposers count it at the
    # lowest gain (trainer.probe.decided_gains), and the probe rule leaves it out of their aggregate
    # only: it stays accepted, unslashed and paid like its peers.
    import torch

    from trainer.probe import GAIN_MICRO_BOUND, admitted, decided_gains

    hosts = ["host1", "host2", "host3", "host4"]
    env = embedded_env_factory(make_spec())
    env.bond_all([*hosts, *VALIDATORS])
    last = env.spec.train.segments - 1
    silent = env.addr("host4")
    e = env.play_epoch(hosts, VALIDATORS, open_verdict=lambda _, c: not (c.host == silent and c.segment == last))
    report = env.report(e)
    assert last_segment(env, "host4", e).outcome == "pass"
    assert {(env.name_of(h.address), h.outcome, h.gain_micro, h.slashed) for h in report.hosts} == {
        *((h, "accepted", GAIN_MICRO, "0") for h in hosts[:3]), ("host4", "accepted", None, "0")}
    assert len({int(h.reward) for h in report.hosts}) == 1  # paid as its peers are
    inputs = env.ledger.aggregation_inputs(e)
    decided = decided_gains({i.address: i.gain_micro for i in inputs})
    assert decided[silent] == -GAIN_MICRO_BOUND
    g = torch.Generator().manual_seed(3)
    deltas = {i.address: {"w": 1e-2 * torch.randn(32, 32, generator=g)} for i in inputs}
    bound = admitted(deltas, decided, env.spec.aggregation.probe_margin_micro)
    assert bound.excluded == {silent} and set(bound.kept) == set(deltas) - {silent}
