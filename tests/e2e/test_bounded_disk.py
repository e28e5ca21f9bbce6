"""A long run with sparse leaves and retention: every honest host's challenged leaves are recomputed
and pass, and each host's disk use stays bounded (old epochs are deleted once the chain closed them,
a closed epoch keeps only every K-th leaf, and the global states no open epoch needs are deleted,
on hosts and validators alike)."""

import pytest

from node.validator import ValidatorNode
from trainer.presets import tiny
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow


def _bytes(path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_disk_use_stays_bounded_over_a_long_run(tmp_path, load_dataset) -> None:
    spec = simulation_spec(tiny().with_changes(train={"inner_steps": 16, "segment_steps": 2, "batch_size": 4}),
                           validators=1)
    dataset = load_dataset(spec.data)
    roster = Roster(hosts=[host_behaviour(None), host_behaviour(None)], validators=[validator_behaviour("honest")])
    net = LocalNetwork(spec, tmp_path / "net", roster, dataset, validator_factory=ValidatorNode,
                       full_leaf_every=4, keep_epochs=1, live_leaf_every=4)  # open epochs at K too
    host, validator = net.hosts[0], net.validators[0]
    epochs_dir = host.root / spec.run_id().hex()
    sizes, kept, states = [], [], []
    challenged: dict[int, set[int]] = {}
    for _ in range(7):
        report = net.run_epoch(max_rounds=300)
        assert {h.outcome for h in report.hosts} == {"accepted"} and report.agreed
        challenged[report.epoch] = {c.segment for c in report.challenges if c.host == host.address}
        sizes.append(_bytes(epochs_dir) - _bytes(epochs_dir / "global"))
        kept.append(host.epochs.epochs_on_disk())
        states.append((len(host.globals.held()), len(validator.globals.held())))
    # Global states: θ of the current epoch, the previous one and the open ones, and the proposal
    # not yet decided — a handful whatever the number of epochs, and the current θ among them.
    current = net.ledger.epoch()
    assert max(max(s) for s in states) <= 4, states
    assert current.model_hash in host.globals.held() and len(host.globals.held()) < 7
    # Leaves 0, 4 and the last two of 9 stored, plus what challenges made the host recompute: each
    # run of 4 segments from its stored leaf up to its highest leaf a challenge reads (a challenge
    # of segment g reads leaves g and g + 1), every leaf on the way kept — until the epoch closed and
    # the host's next tick thinned it to K (the last epoch reported has had no tick since).
    segments = spec.train.segments
    at_k = {i for i in range(segments + 1) if i % 4 == 0 or i >= segments - 1}
    for e in kept[-1]:
        on_disk = set(at_k)
        for run in range(0, segments, 4):
            read = [i for g in challenged[e] for i in (g, g + 1) if run < i < run + 4 and i < segments - 1]
            on_disk |= set(range(run + 1, max(read, default=run) + 1))
        expected = on_disk if e >= report.epoch else at_k
        assert host.epochs.leaves_on_disk(e) == sorted(expected), (e, challenged[e])
    assert host.recomputer.stats.leaves > 0 and host.recomputer.stats.steps > 0
    # The epochs a host keeps: the current one's predecessor and older ones until their close is seen.
    assert max(len(k) for k in kept) <= 3 and kept[-1][0] >= 4
    assert max(sizes[3:]) <= 1.5 * max(sizes[:3])  # no growth with the number of epochs
    assert net.total_funds() == net.initial_funds
