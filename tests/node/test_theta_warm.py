"""A validator fetches θ_e while e trains, off its tick thread (``GlobalStore.warm``): read at its
``verify`` instead, the fetch held the validator's tick — and so, in a pipelined run, its join of
the next epoch, which every host waits for — while the hosts' uplinks carried leaves."""

from __future__ import annotations

import hashlib
import time
from types import SimpleNamespace

import pytest
from http_network import HttpNetwork

from chain.embedded import EmbeddedChain, deploy_embedded
from node.global_store import GlobalStateBeingFetched, GlobalStateUnavailable
from node.validator import ValidatorNode
from protocol.injective import GENESIS_BALANCE
from protocol.keys import PrivateKey
from trainer.behaviour import HostBehaviour
from trainer.presets import tiny


def spec():
    return tiny("theta-warm").with_changes(
        train={"inner_steps": 4, "segment_steps": 2, "batch_size": 4},
        phases={"min_hosts": 1, "min_validators": 2, "join_blocks": 40, "train_blocks": 400, "reveal_blocks": 40,
                "verify_blocks": 120, "verdict_reveal_blocks": 40, "propose_blocks": 40},
    )


@pytest.fixture(scope="module")
def dataset(load_dataset):
    return load_dataset(spec().data)


def test_a_joined_validator_holds_theta_before_any_host_committed(tmp_path, dataset) -> None:
    net = HttpNetwork(spec(), tmp_path, dataset, [HostBehaviour()], validators=2)
    try:
        assert net.run_epoch().hosts[0].outcome == "accepted"
        validators = [n for n in net.nodes if isinstance(n, ValidatorNode)]
        for _ in range(50):  # epoch 1's join: the host and both validators join, then it trains
            info = net.ledger.epoch()
            if info.phase == "train" and all(v.status().joined for v in validators):
                break
            for node in validators:
                node.tick()
            net.members[0].node.maybe_join(net.members[0].node.status())
        theta = net.ledger.epoch().model_hash
        assert net.ledger.epoch().phase == "train" and theta != net.ledger.epoch(0).model_hash
        assert not any(v.globals.has(theta) for v in validators)
        for node in validators:  # one tick each in train: nothing to verify yet, θ_1 asked for
            node.tick()
        end = time.monotonic() + 30
        while not all(v.globals.has(theta) for v in validators) and time.monotonic() < end:
            time.sleep(0.05)
        assert all(v.globals.has(theta) for v in validators)
        assert net.ledger.epoch().phase == "train"  # before the host trained: no challenge yet
        assert net.run_epoch().hosts[0].outcome == "accepted"  # and the epoch verifies from it
    finally:
        net.close()


def test_a_verdict_waiting_for_theta_being_warmed_counts_as_acting(tmp_path, dataset) -> None:
    # An inline validator (simulate's) whose θ_e is still being warmed past its tick's wait: the tick
    # counts as acting, so a driver that jumps to the phase deadline when nobody acts (LocalNetwork)
    # gives it another tick instead of closing verify under it. θ_e that nobody serves does not.
    s = spec()
    key, operator = PrivateKey(b"\x61" * 32), PrivateKey(b"\x62" * 32)
    chain = EmbeddedChain(genesis_balances={k.address(): {s.economics.denom: GENESIS_BALANCE} for k in (key, operator)})
    ledger = deploy_embedded(chain, operator, s, hashlib.sha256(b"theta").hexdigest(), operator.address())
    node = ValidatorNode(ledger, key, s, dataset, tmp_path, peers=lambda endpoint: None)
    assert node.warm_theta  # on by default, for every validator
    due = SimpleNamespace(epoch=0, host=key.address(), segment=0, round=0)
    node._mine = lambda status, committed: [due]  # one challenge due

    def replay_raising(exc):
        def commit_verdict(status, challenge):
            raise exc
        return commit_verdict

    status = SimpleNamespace(epoch=0)
    node.commit_verdict = replay_raising(GlobalStateBeingFetched("still being fetched"))
    assert node._commit_verdicts(status) is True
    node.commit_verdict = replay_raising(GlobalStateUnavailable("nobody served it"))
    assert node._commit_verdicts(status) is False
