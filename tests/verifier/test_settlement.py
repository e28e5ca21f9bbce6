"""On the embedded chain: an honest and a lazy host, five validators of which one always votes fail.
The replayed verdicts settle as they should: the lazy host is invalid and slashed, the honest host
accepted (every challenge the liar sat on went to a dispute the two validators left decided), the
liar marked wrong."""

from __future__ import annotations

import sys
from pathlib import Path

from suite_env import small_spec

from trainer.artifacts import LocalArtifacts
from trainer.inner import EpochContext
from trainer.outer import GlobalState
from trainer.step import Stepper
from verifier.adversaries import Honest, Lazy, make_validator_behaviour
from verifier.replay import check_challenge

sys.path.append(str(Path(__file__).resolve().parents[1] / "chain"))  # tests/chain/ledger_env.py
from ledger_env import EmbeddedDriver, LedgerEnv


def test_verdicts_from_replays_settle_on_chain(dataset, tmp_path) -> None:
    # The test stakes of ledger_env (HOST_STAKE, VALIDATOR_STAKE) and a reward they may earn.
    spec = small_spec(economics={"min_host_stake": "2000000", "min_validator_stake": "1000000",
                                 "reward_per_epoch": "1000"},
                      verification={"challenges_k": 2, "validators_r": 3},
                      phases={"verdict_reveal_blocks": 100})  # one transaction per block here
    env = LedgerEnv(EmbeddedDriver(spec))
    hosts = {"host1": Honest(), "host2": Lazy(1.0)}
    validators = {"validator1": "honest", "validator2": "honest", "validator3": "always_fail",
                  "validator4": "honest", "validator5": "honest"}
    for name in [*hosts, *validators]:
        env.bond(name)
    for name in [*hosts, *validators]:
        env.join(name)
    info = env.epoch()
    assert info.phase == "train"

    theta = GlobalState.initial(spec)
    sources = {}
    for name, behaviour in hosts.items():
        ctx = EpochContext(spec.run_id(), info.epoch, env.addr(name), bytes.fromhex(info.prev_seed))
        result = behaviour.train_epoch(spec, dataset, ctx, theta.params, tmp_path / name)
        traps = env.trap_opening(name, info.epoch).commitment(env.addr(name))  # no traps
        env.ledger.commit(env.key(name), result.commitment, traps)
        sources[env.addr(name)] = behaviour.serve(LocalArtifacts(tmp_path / name, spec.run_id(), env.addr(name)))

    stepper = Stepper(spec)
    rounds = set()

    def vote(name: str, challenge) -> str | None:
        rounds.add(challenge.round)
        final = make_validator_behaviour(validators[name]).decide(
            challenge, lambda: check_challenge(spec, dataset, challenge, sources[challenge.host], theta,
                                               bytes.fromhex(info.prev_seed), stepper=stepper).verdict)
        return None if final is None else final.outcome

    env.play_epoch(list(hosts), list(validators), vote=vote, stop_after="verify")
    assert rounds == {0, 1}  # the liar's fails on the honest host went to disputes

    report = env.report(info.epoch)
    outcomes = {env.name_of(h.address): h.outcome for h in report.hosts}
    assert outcomes == {"host1": "accepted", "host2": "invalid"}
    slashed = {env.name_of(h.address): int(h.slashed) for h in report.hosts}
    assert slashed["host2"] > 0 and slashed["host1"] == 0
    validator_outcomes = {env.name_of(v.address): v.outcome for v in report.validators}
    assert validator_outcomes["validator3"] == "wrong"
    assert {o for n, o in validator_outcomes.items() if n != "validator3"} <= {"diligent", "idle"}
    challenged = {(env.name_of(c.host), c.segment): c.outcome for c in report.challenges}
    assert all(o == ("pass" if h == "host1" else "fail") for (h, _), o in challenged.items())
    assert len(challenged) == 2 * (spec.verification.challenges_k + 1)
