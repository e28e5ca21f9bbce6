"""Compute-profile classes on the contract (``docs/contract.md``, "Compute-profile classes"): a
host's pickers and the final vote on its disputes come from the validators of its own class, a host
of a class without enough validators is left unchecked and `excluded` (not slashed), and a host can
read its class's standing before it joins. The rules themselves are pinned by the shared vectors
(``tests/vectors/classes.json``, checked by Python and by the contract's Rust tests)."""

from __future__ import annotations

import pytest
from ledger_env import VALIDATOR_STAKE, LedgerEnv, make_spec

from chain.ledger import ContractError
from protocol.rules.classes import of_class
from protocol.rules.sampling import challenge_seats, pickers
from protocol.views import REVOTE_ROUND, Challenge, validator_weights

# Two compute profiles, as two machines' fingerprints would name them.
AVX512, AVX2 = "a5" * 32, "a2" * 32
CLASS_OF = {"host1": AVX512, "host2": AVX2, "host3": AVX512, "validator1": AVX512, "validator2": AVX512,
            "validator3": AVX512, "validator4": AVX2, "validator5": AVX2}
HOSTS = ["host1", "host2", "host3"]
VALIDATORS = ["validator1", "validator2", "validator3", "validator4", "validator5"]


def _spec(min_validators: int = 1):
    # Windows long enough for every vote on a devnet (one block every 100 ms).
    return make_spec(train={"inner_steps": 8, "segment_steps": 2}, verification={"challenges_k": 2},
                     phases={"verify_blocks": 150, "verdict_reveal_blocks": 150, "min_validators": min_validators})


def _bitwise_within_class(env: LedgerEnv):
    """An honest validator's vote in a mixed network: its replay of a host of its own profile is
    bitwise (pass); of another profile it differs beyond τ (fail) — what ``bench/mixed_profiles.py``
    measures on forced CPU profiles."""
    def vote(validator: str, challenge: Challenge) -> str:
        host = env.name_of(challenge.host)
        return "pass" if env.classes.get(host, "") == env.classes.get(validator, "") else "fail"
    return vote


def test_a_mixed_network_fails_no_honest_host_when_each_class_checks_its_own(make_ledger_env) -> None:
    env = make_ledger_env(_spec())
    env.classes.update(CLASS_OF)
    env.bond_all([*HOSTS, *VALIDATORS])
    vote = _bitwise_within_class(env)
    e = env.play_epoch(HOSTS, VALIDATORS, vote=vote)
    report = env.report(e)
    assert {env.name_of(h.address): h.outcome for h in report.hosts} == dict.fromkeys(HOSTS, "accepted")
    assert {v.outcome for v in report.validators} <= {"diligent", "idle"}
    assert report.slashed_total == "0"
    # The report shows the class each member declared.
    assert all(m.compute_class == env.classes[env.name_of(m.address)] for m in [*report.hosts, *report.validators])
    # Every seat of every challenge is of the host's class, as the Python rules draw them.
    info = env.epoch(e)
    joined = sorted(validator_weights(report.validators).items())
    classes = [env.classes[env.name_of(a)] for a, _ in joined]
    for host in HOSTS:
        address = env.addr(host)
        chosen = pickers(bytes.fromhex(info.prev_seed), address, of_class(joined, classes, env.classes[host]),
                         env.spec.verification.seats_cap)
        want = challenge_seats({p: env.secret(env.name_of(p), e) for p in chosen}, address,
                               env.spec.train.segments, env.spec.verification.challenges_k)
        got = {c.segment: [v.validator for v in c.votes if v.round == 0]
               for c in report.challenges if c.host == address}
        assert got == want
        assert all(env.classes[env.name_of(v)] == env.classes[host] for seats in got.values() for v in seats)


def test_the_same_network_without_classes_fails_honest_hosts(embedded_env_factory) -> None:
    """The control: every member in one class, the same votes (a replay across profiles fails)."""
    env = embedded_env_factory(_spec())
    declared = dict(CLASS_OF)  # the profiles the votes follow; nobody declares them
    env.bond_all([*HOSTS, *VALIDATORS])

    def vote(validator: str, challenge: Challenge) -> str:
        return "pass" if declared[env.name_of(challenge.host)] == declared[validator] else "fail"
    e = env.play_epoch(HOSTS, VALIDATORS, vote=vote)
    outcomes = {env.name_of(h.address): h.outcome for h in env.report(e).hosts}
    # The AVX2 host is checked by the AVX-512 majority of V's stake and convicted.
    assert outcomes["host2"] == "invalid"
    assert int(env.report(e).slashed_total) > 0


def test_a_dispute_is_decided_by_the_hosts_class_alone(embedded_env_factory) -> None:
    """A lying validator of host1's class fails its last segment; the final vote is the class's (3
    AVX-512 validators of equal stake): the two honest ones decide `pass` and the liar is `wrong`,
    while the other class's validators — whose replays of host1 would fail — neither sit on it nor
    owe a vote."""
    env = embedded_env_factory(_spec())
    env.classes.update(CLASS_OF)
    env.bond_all([*HOSTS, *VALIDATORS])
    honest = _bitwise_within_class(env)
    e = env.play_epoch(HOSTS, VALIDATORS, vote=honest, stop_after="reveal")
    host1, last = env.addr("host1"), env.spec.train.segments - 1
    seats = next(c.votes for c in env.report(e).challenges if c.host == host1 and c.segment == last)
    liar = env.name_of(seats[0].validator)
    assert env.classes[liar] == AVX512
    for v in ("validator4", "validator5"):
        assert all(env.name_of(c.host) == "host2" for c in env.challenges(v, e))

    def vote(validator: str, challenge: Challenge) -> str:
        if validator == liar and challenge.host == host1:
            return "fail"
        return honest(validator, challenge)
    env.play_epoch(HOSTS, VALIDATORS, vote=vote)
    report = env.report(e)
    assert {env.name_of(h.address): h.outcome for h in report.hosts} == dict.fromkeys(HOSTS, "accepted")
    disputed = next(c for c in report.challenges if c.host == host1 and c.segment == last)
    assert disputed.rounds > 0 and disputed.outcome == "pass"
    assert {env.name_of(v.validator) for v in disputed.votes} == {"validator1", "validator2", "validator3"}
    outcomes = {env.name_of(v.address): v.outcome for v in report.validators}
    assert outcomes[liar] == "wrong"
    assert all(outcomes[v] in ("diligent", "idle") for v in VALIDATORS if v != liar)
    # Each validator's `participant` counts (the contract's per-validator counters) agree with the
    # sittings its `challenges` list: the final round of host1's dispute is its class's alone.
    for v in VALIDATORS:
        sittings = [c for c in env.challenges(v, e) if c.round != REVOTE_ROUND]
        part = env.ledger.participant(env.addr(v), e)
        assert (part.assigned, part.voted) == (len(sittings), sum(c.revealed for c in sittings)), v
        if env.classes[v] != AVX512:
            assert all(c.round == 0 for c in sittings), v
    assert any(c.round == 1 for v in VALIDATORS for c in env.challenges(v, e))


def test_a_host_of_a_class_without_validators_is_excluded_not_slashed(embedded_env_factory) -> None:
    env = embedded_env_factory(_spec())
    env.classes.update(CLASS_OF)
    env.classes["host3"] = "c0" * 32  # a profile no validator has
    env.bond_all([*HOSTS, *VALIDATORS])
    before = env.compute_class("host3")
    assert (before.validators, before.needed, before.served) == (0, 1, False)
    e = env.play_epoch(HOSTS, VALIDATORS, vote=_bitwise_within_class(env))
    report = env.report(e)
    host3 = next(h for h in report.hosts if h.address == env.addr("host3"))
    assert host3.outcome == "excluded" and host3.slashed == "0" and host3.reward == "0"
    assert [c.votes for c in report.challenges if c.host == env.addr("host3")] == [[]]
    assert env.addr("host3") not in env.epoch(e).accepted
    assert {env.name_of(h.address): h.outcome for h in report.hosts if h.address != env.addr("host3")} \
        == {"host1": "accepted", "host2": "accepted"}
    env.assert_books()


def test_a_class_is_served_from_the_runs_minimum_of_validators(embedded_env_factory) -> None:
    """min_validators = 2: the AVX2 class (2 validators) is served, then not once one of its
    validators stays out; its host is then excluded, while the AVX-512 class plays on."""
    env = embedded_env_factory(_spec(min_validators=2))
    env.classes.update(CLASS_OF)
    env.bond_all([*HOSTS, *VALIDATORS])
    for v in VALIDATORS:
        env.join(v)
    status = env.compute_class("host2")
    assert (status.validators, status.stake, status.needed, status.served) == (2, str(2 * VALIDATOR_STAKE), 2, True)
    for h in HOSTS:  # the last join closes the phase (every eligible member joined)
        env.join(h)
    e = env.play_epoch(HOSTS, VALIDATORS, vote=_bitwise_within_class(env))
    assert set(env.epoch(e).accepted) == {env.addr(h) for h in HOSTS}
    without = [v for v in VALIDATORS if v != "validator5"]
    nxt = env.compute_class("host2")
    assert (nxt.epoch, nxt.validators, nxt.previous_validators, nxt.previous_stake) \
        == (e + 1, 0, 2, str(2 * VALIDATOR_STAKE))
    e = env.play_epoch(HOSTS, without, vote=_bitwise_within_class(env))
    outcomes = {env.name_of(h.address): h.outcome for h in env.report(e).hosts}
    assert outcomes == {"host1": "accepted", "host2": "excluded", "host3": "accepted"}


def test_join_refuses_a_class_that_is_not_a_fingerprint(embedded_env_factory) -> None:
    env = embedded_env_factory(_spec())
    env.bond_all(["host1"])
    for bad in ["A5" * 32, "a5" * 31, "a5" * 33, "profile-1"]:
        with pytest.raises(ContractError, match="compute_class must be empty or 64 lowercase hex"):
            env.raw("host1", {"join": {"epoch": 0, "beacon_commit": "0" * 64, "compute_class": bad}})
    env.classes["host1"] = AVX512
    env.join("host1")
    with pytest.raises(ContractError, match="compute_class must be empty"):
        env.ledger.compute_class("bogus")
