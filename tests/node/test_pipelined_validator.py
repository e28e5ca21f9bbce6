"""A validator in a pipelined run (docs/contract.md, "Pipelined epochs") asked to stop (Ctrl-C)
while the settling epoch waits for its verdict openings and the next epoch trains: it opens the
settling epoch's verdicts from disk before it exits, so nobody is slashed for the stop."""

import logging
from concurrent.futures import FIRST_COMPLETED, wait

import pytest

from node.daemon import Daemon
from trainer.presets import tiny
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow


def test_a_validator_stopped_while_e_awaits_its_openings_and_e_plus_1_trains_opens_them(
        tmp_path, load_dataset, caplog) -> None:
    # No traps: a disputed trap opens in dispute_reveal, not in verdict_reveal.
    spec = simulation_spec(tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4},
                                               verification={"trap_probability": "0"}),
                           validators=2, hosts=2).with_changes(phases={"pipelined": True})
    net = LocalNetwork(spec, tmp_path / "net", Roster(hosts=[host_behaviour(None), host_behaviour(None)],
                                                      validators=[validator_behaviour("honest")] * 2),
                       load_dataset(spec.data))
    validator = net.validators[1]

    def awaits_its_openings() -> bool:
        info = net.ledger.epoch(0)
        return (info.phase == "verdict_reveal" and net.ledger.epoch().settling == 0
                and net.ledger.participant(validator.address, 0).to_reveal > 0)

    # Every node acts until epoch 0 waits in verdict_reveal for this validator's openings while
    # epoch 1 (opened from the start vote) runs: then the validator is stopped before it acts.
    for _ in range(400):
        acted = []
        for node in net.nodes:
            if node is validator and awaits_its_openings():
                break
            acted.append(node.tick())
        else:
            net.ledger.end_block()
            busy = [job for h in net.hosts if (job := h.training) is not None]
            if busy:
                wait(busy, timeout=60, return_when=FIRST_COMPLETED)
            elif not any(acted) and net.ledger.height() < (deadline := net.ledger.epoch(0).phase_deadline):
                net.ledger.wait_for_height(deadline)
            continue
        break
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
