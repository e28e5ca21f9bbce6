"""A validator in a pipelined run (docs/contract.md, "Pipelined epochs") asked to stop (Ctrl-C)
while the settling epoch waits for its verdict openings and the next epoch trains: it opens the
settling epoch's verdicts from disk before it exits, so nobody is slashed for the stop."""

import logging

import pytest
from pipelined_network import pipelined_network, tick_until

from node.daemon import Daemon
from trainer.behaviour import HostBehaviour

pytestmark = pytest.mark.slow


def test_a_validator_stopped_while_e_awaits_its_openings_and_e_plus_1_trains_opens_them(
        tmp_path, load_dataset, caplog) -> None:
    # No traps: a disputed trap opens in dispute_reveal, not in verdict_reveal.
    net = pipelined_network(tmp_path / "net", load_dataset, [HostBehaviour(), HostBehaviour()], validators=2,
                            verification={"trap_probability": "0"})
    validator = net.validators[1]

    def awaits_its_openings() -> bool:
        info = net.ledger.epoch(0)
        return (info.phase == "verdict_reveal" and net.ledger.epoch().settling == 0
                and net.ledger.participant(validator.address, 0).to_reveal > 0)

    # Every node acts until epoch 0 waits in verdict_reveal for this validator's openings while
    # epoch 1 (opened from the start vote) runs: then the validator is stopped before it acts.
    tick_until(net, lambda node: node is validator and awaits_its_openings())
    assert awaits_its_openings(), "epoch 0 waits for the validator's openings while epoch 1 runs"
    assert net.ledger.epoch().epoch == 1
    daemon = Daemon(validator, net.ledger, poll=0.01, drain_s=5)
    daemon.stop()
    with caplog.at_level(logging.INFO):
        daemon.run()
    assert "verdict opening(s) of epoch 0" in caplog.text
    assert net.ledger.participant(validator.address, 0).to_reveal == 0
    report = net.run_epoch()
    assert report.epoch == 0
    assert all(h.outcome == "accepted" and h.slashed == "0" for h in report.hosts)
    assert all(v.slashed == "0" for v in report.validators)
    for node in net.nodes:
        node.close()
