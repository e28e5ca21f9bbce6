"""A network on the embedded chain with Muon as the inner optimizer: honest hosts are accepted, the
validators' replays pass, and every epoch agrees on the next model."""

from __future__ import annotations

import pytest

from node.validator import ValidatorNode
from trainer.presets import tiny
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow


def test_muon_hosts_are_accepted_and_epochs_agree(tmp_path, load_dataset) -> None:
    spec = simulation_spec(tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4,
                                                      "inner_optimizer": "muon"}), validators=2)
    dataset = load_dataset(spec.data)
    roster = Roster(hosts=[host_behaviour(None), host_behaviour(None)],
                    validators=[validator_behaviour("honest"), validator_behaviour("honest")])
    net = LocalNetwork(spec, tmp_path / "net", roster, dataset, validator_factory=ValidatorNode)
    reports = [net.run_epoch(max_rounds=200) for _ in range(2)]
    for report in reports:
        assert {h.outcome for h in report.hosts} == {"accepted"} and report.agreed
        real = [c for c in report.challenges if not c.trap]
        assert real and all(v.outcome == "pass" for c in real for v in c.votes if v.outcome is not None)
        assert any(v.outcome == "pass" for c in real for v in c.votes)  # validators replayed Muon segments
    assert net.total_funds() == net.initial_funds
