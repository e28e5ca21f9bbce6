"""The network `veriloco simulate` runs, with verification on: a cheater is slashed until its stake
falls below the minimum, and the epochs go on without it."""

import pytest

from node.validator import ValidatorNode
from trainer.presets import tiny
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster
from veriloco.report import slashed_over_run

pytestmark = pytest.mark.slow


def test_a_cheater_slashed_below_the_minimum_stake_drops_out_and_the_run_goes_on(tmp_path, load_dataset) -> None:
    spec = simulation_spec(tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4}),
                           validators=2)
    dataset = load_dataset(spec.data)
    roster = Roster(hosts=[host_behaviour(None), host_behaviour(None), host_behaviour("noise")],
                    # Two validators: one validator's fail alone never decides a challenge. Stakes:
                    # twice the minimum, as simulate bonds.
                    validators=[validator_behaviour("honest"), validator_behaviour("honest")])
    net = LocalNetwork(spec, tmp_path / "net", roster, dataset, validator_factory=ValidatorNode)
    cheater = net.hosts[2].address
    # Two invalid slashes of 50 % leave the cheater a quarter of its bond: half the minimum.
    reports = [net.run_epoch(max_rounds=200) for _ in range(3)]
    for report in reports[:2]:
        outcomes = {h.address: h.outcome for h in report.hosts}
        assert outcomes.pop(cheater) == "invalid"
        assert set(outcomes.values()) == {"accepted"} and report.agreed
    last = reports[2]
    assert cheater not in {h.address for h in last.hosts}
    assert {h.outcome for h in last.hosts} == {"accepted"} and last.agreed
    assert net.total_funds() == net.initial_funds
    # What simulate prints at the end: 50 % of twice the minimum, then 50 % of what is left.
    slashed = 3 * int(spec.economics.min_host_stake) // 2
    assert slashed_over_run(reports, "utest", net.names) == f"host-2 (noise) {slashed}utest in 2 epochs"
