"""The contract derives the epoch seed, each host's pickers and their challenges exactly as
``protocol.rules.beacon`` and ``protocol.rules.sampling`` do (the Rust unit tests check the shared
vectors; this checks live epochs): seats are held by stake, not by arrival, and a picker that
withholds its reveal changes no other picker's picks.

The first test runs on both backends (the devnet's fresh addresses of both key types through the
same derivations); the withholder and the 32 sybils run on the embedded chain only
(``ledger_env.EMBEDDED_ONLY``): the same contract code, messages the first test sends."""

from __future__ import annotations

from ledger_env import EMBEDDED_ONLY, VALIDATOR_STAKE, make_spec

from chain.ledger import ContractError
from protocol.rules.beacon import epoch_seed
from protocol.rules.sampling import challenge_seats, pickers
from protocol.views import validator_weights

HOSTS = ["host1", "host2", "host3"]
VALIDATORS = ["validator1", "validator2", "validator3"]


def expected_seats(env, spec, epoch: int, revealing: list[str]) -> dict[tuple[str, int], list[str]]:
    """(host, segment) -> round-0 seats, from the Python rules."""
    info = env.epoch(epoch)
    joined = validator_weights(env.report(epoch).validators)
    revealed = {env.addr(n): env.secret(n, epoch) for n in revealing}
    want = {}
    for host in HOSTS:
        address = env.addr(host)
        chosen = pickers(bytes.fromhex(info.prev_seed), address, joined, spec.verification.seats_cap)
        secrets = {p: revealed[p] for p in chosen if p in revealed}
        for segment, seats in challenge_seats(secrets, address, spec.train.segments,
                                              spec.verification.challenges_k).items():
            want[(address, segment)] = seats
    return want


def test_seed_pickers_and_challenges_match_the_python_protocol(make_ledger_env) -> None:
    # Windows long enough for every vote on a devnet (one block every 100 ms).
    spec = make_spec(train={"inner_steps": 16, "segment_steps": 2}, verification={"challenges_k": 3},
                     phases={"verify_blocks": 150, "verdict_reveal_blocks": 150})
    env = make_ledger_env(spec)
    env.bond_all(HOSTS)
    for i, v in enumerate(VALIDATORS):  # unequal stakes: the draw is by stake
        env.bond(v, VALIDATOR_STAKE * (i + 1))
    revealing = [*HOSTS, "validator1", "validator2"]  # validator3 keeps its secret
    for epoch in range(2):
        env.play_epoch(HOSTS, VALIDATORS, reveal=revealing, stop_after="reveal")
        info = env.epoch(epoch)
        seed = epoch_seed(spec.run_id(), epoch, {env.addr(n): env.secret(n, epoch) for n in revealing})
        assert info.seed == seed.hex()  # the epoch seed: the next epoch's data
        want = expected_seats(env, spec, epoch, revealing)
        got = {(c.host, c.segment): [v.validator for v in c.votes if v.round == 0]
               for c in env.report(epoch).challenges}
        assert got == want
        assert all(env.addr("validator3") not in seats for seats in got.values())
        # Each validator's own view lists exactly its round-0 seats.
        for v in VALIDATORS:
            mine = {(c.host, c.segment) for c in env.challenges(v, epoch)}
            assert mine == {key for key, vs in want.items() if env.addr(v) in vs}
        env.play_epoch(HOSTS, VALIDATORS, reveal=revealing)
        assert env.epoch().prev_seed == seed.hex()


@EMBEDDED_ONLY
def test_a_withholding_picker_changes_no_honest_pick(make_ledger_env) -> None:
    """The epoch as the chain closed it with a picker withholding, against the same epoch had it
    revealed (the Python rules on the same joined set and secrets, which the contract follows:
    test above): every challenge another picker's secret picks is there, with the same seats, in
    both. (One env: a devnet gives every contract fresh keys, so two runs differ in addresses.)"""
    spec = make_spec(train={"inner_steps": 16, "segment_steps": 2}, verification={"challenges_k": 2},
                     phases={"verify_blocks": 150, "verdict_reveal_blocks": 150})
    env = make_ledger_env(spec)
    env.bond_all([*HOSTS, *VALIDATORS])
    revealing = [*HOSTS, *VALIDATORS[:2]]
    env.play_epoch(HOSTS, VALIDATORS, reveal=revealing, stop_after="reveal")
    without = {(c.host, c.segment): [v.validator for v in c.votes if v.round == 0] for c in env.report(0).challenges}
    assert without == expected_seats(env, spec, 0, revealing)
    full = expected_seats(env, spec, 0, [*revealing, "validator3"])
    withholder = env.addr("validator3")
    for key, seats in full.items():
        others = [s for s in seats if s != withholder]
        if others:
            assert key in without and without[key] == others
    assert all(withholder not in seats for seats in without.values())


@EMBEDDED_ONLY
def test_seats_go_by_stake_32_sybils_cannot_keep_a_large_validator_out(make_ledger_env) -> None:
    """A full epoch admits a newcomer only in place of its smallest seat, which it must out-stake:
    32 sybil validators with the minimum stake fill every seat first, and an honest validator with
    a large stake still joins; a sybil evicted cannot come back without out-staking; one that does
    not out-stake is refused with the smallest seat's stake."""
    names = [f"sybil{i:02d}" for i in range(32)]
    spec = make_spec(phases={"max_validators": 32, "join_blocks": 200})
    env = make_ledger_env(spec, names=[*env_names(), *names])
    minimum = int(spec.economics.min_validator_stake)
    for name in names:
        env.bond(name, minimum, role="validator")
    env.bond("validator1", 50 * minimum)
    env.bond("host1")
    for name in names:
        env.join(name, 0)
    assert len(env.epoch(0).validators) == 32
    env.join("validator1", 0)
    validators = env.epoch(0).validators
    assert len(validators) == 32 and env.addr("validator1") in validators
    evicted = next(n for n in names if env.addr(n) not in validators)
    try:
        env.join(evicted, 0)
        raise AssertionError("an evicted sybil rejoined without out-staking")
    except ContractError as exc:
        assert "is full" in str(exc) and f"{minimum}{env.denom}" in str(exc), exc
    # Out-staking the smallest seat takes it (the tie-breaker is the seat rank, never arrival).
    env.bond(evicted, minimum, role="validator")
    env.join(evicted, 0)
    assert env.addr(evicted) in env.epoch(0).validators
    assert len(env.epoch(0).validators) == 32


def env_names() -> list[str]:
    from ledger_env import DEFAULT_NAMES

    return list(DEFAULT_NAMES)
