"""The contract derives the epoch seed and the challenges exactly as ``protocol.rules.beacon`` and
``protocol.rules.sampling`` do (the Rust unit tests check the shared vectors; this checks a live epoch,
with a validator that did not reveal and so must not be assigned)."""

from __future__ import annotations

from ledger_env import make_spec

from protocol.rules.beacon import epoch_seed
from protocol.rules.sampling import challenge_validators, challenged_segments

HOSTS = ["host1", "host2", "host3"]
VALIDATORS = ["validator1", "validator2", "validator3"]


def test_seed_and_challenges_match_the_python_protocol(make_ledger_env) -> None:
    # 16 openings a round: windows long enough for them on a devnet (one block every 100 ms).
    spec = make_spec(train={"inner_steps": 16, "segment_steps": 2}, verification={"challenges_k": 3},
                     phases={"verify_blocks": 150, "verdict_reveal_blocks": 150})
    env = make_ledger_env(spec)
    env.bond_all([*HOSTS, *VALIDATORS])
    revealing = [*HOSTS, "validator1", "validator2"]  # validator3 keeps its secret
    for epoch in range(2):
        env.play_epoch(HOSTS, VALIDATORS, reveal=revealing, stop_after="reveal")
        info = env.epoch(epoch)
        seed = epoch_seed(spec.run_id(), epoch, {env.addr(n): env.secret(n, epoch) for n in revealing})
        assert info.seed == seed.hex()
        candidates = [env.addr(v) for v in ["validator1", "validator2"]]
        want = {}
        for host in HOSTS:
            address = env.addr(host)
            for segment in challenged_segments(seed, address, spec.train.segments, spec.verification.challenges_k):
                want[(address, segment)] = challenge_validators(seed, address, segment, candidates,
                                                                spec.verification.validators_r)
        got = {(c.host, c.segment): [v.validator for v in c.votes] for c in env.report(epoch).challenges}
        assert got == want
        assert len(got) == len(HOSTS) * (spec.verification.challenges_k + 1)
        # Each validator's own view lists exactly its assignments.
        for v in VALIDATORS:
            mine = {(c.host, c.segment) for c in env.challenges(v, epoch)}
            assert mine == {key for key, vs in want.items() if env.addr(v) in vs}
        env.play_epoch(HOSTS, VALIDATORS, reveal=revealing)
        assert env.epoch().prev_seed == seed.hex()
