"""A validator fetches θ_e while e trains, off its tick thread (``GlobalStore.warm``): read at its
``verify`` instead, the fetch held the validator's tick — and so, in a pipelined run, its join of
the next epoch, which every host waits for — while the hosts' uplinks carried leaves."""

from __future__ import annotations

import time

import pytest
from http_network import HttpNetwork

from node.validator import ValidatorNode
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
