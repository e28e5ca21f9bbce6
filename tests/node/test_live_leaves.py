"""A host stores an epoch that can still be challenged as densely as its disk allows, and keeps
only every K-th leaf once the chain closed it.

With more validators a host has more challenges, and each leaf it did not store costs a
recomputation on the cores that train the next epoch (7–8 % of a `small` epoch at eight
validators with K = 4). So the node stores every leaf while the epoch is open when half the free
disk holds it (``trainer.leaf_budget``), and thins the epoch to K when it closes: the challenges
cost nothing and what stays on disk is what K always kept.
"""

from __future__ import annotations

import pytest

from node import host as host_module
from node.validator import ValidatorNode
from trainer.behaviour import HostBehaviour
from trainer.epoch_store import EpochStore
from trainer.presets import tiny
from veriloco.behaviours import validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster


def _network(tmp_path, load_dataset, **storage) -> LocalNetwork:
    spec = simulation_spec(tiny("live-leaves").with_changes(
        train={"inner_steps": 16, "segment_steps": 2, "batch_size": 4}), validators=1)
    roster = Roster(hosts=[HostBehaviour()], validators=[validator_behaviour("honest")])
    return LocalNetwork(spec, tmp_path, roster, load_dataset(spec.data), validator_factory=ValidatorNode,
                        full_leaf_every=4, **storage)


def _k(store: EpochStore, epoch: int) -> int:
    header, _ = store.read_progress(epoch)
    assert header is not None
    return header.full_leaf_every


def test_an_open_epoch_has_every_leaf_no_challenge_recomputes_and_a_closed_one_keeps_k(tmp_path,
                                                                                      load_dataset) -> None:
    net = _network(tmp_path, load_dataset)
    host = net.hosts[0]
    report = net.run_epoch()
    assert report.hosts[0].outcome == "accepted"
    assert any(c.host == host.address for c in report.challenges)
    assert _k(host.epochs, 0) == 1 and host.epochs.leaves_on_disk(0) == list(range(9))
    assert host.recomputer.stats.leaves == 0  # every challenged leaf was on disk
    net.run_epoch()  # epoch 0 is closed: the first tick of epoch 1 thins it
    assert host.epochs.leaves_on_disk(0) == [0, 4, 7, 8]
    assert _k(host.epochs, 1) == 1  # the next epoch is stored whole again while open
    assert net.total_funds() == net.initial_funds


def test_a_disk_too_small_for_every_leaf_stores_at_k(tmp_path, load_dataset, monkeypatch) -> None:
    class Full:
        free = 0

    monkeypatch.setattr(host_module.shutil, "disk_usage", lambda _path: Full())
    net = _network(tmp_path, load_dataset)
    net.run_epoch()
    assert _k(net.hosts[0].epochs, 0) == 4


def test_an_explicit_live_interval_must_divide_k(tmp_path, load_dataset) -> None:
    with pytest.raises(ValueError, match="must divide full_leaf_every"):
        _network(tmp_path, load_dataset, live_leaf_every=3)


def test_leaves_thinned_while_still_challenged_are_recomputed_and_nobody_pays(tmp_path, load_dataset,
                                                                              monkeypatch) -> None:
    """A chain read that says "closed" too early (a lagging or lying node) thins an open epoch: what
    a validator then asks for is recomputed from K's leaves, so it costs the host CPU, never a verdict."""
    net = _network(tmp_path, load_dataset)
    host = net.hosts[0]
    while net.ledger.epoch(0, lists=False).phase in ("join", "train"):
        for node in net.nodes:
            node.tick()
        net.ledger.end_block()
    assert host.epochs.leaves_on_disk(0) == list(range(9))
    monkeypatch.setattr(host, "_windows_closed", lambda _epoch: True)
    host._thin(1)  # as if epoch 1 were open: epoch 0 is thinned before its validators read it
    assert host.epochs.leaves_on_disk(0) == [0, 4, 7, 8]
    report = net.run_epoch()
    assert report.hosts[0].outcome == "accepted" and report.agreed
    assert host.recomputer.stats.leaves > 0  # the challenged leaves came back by replay
    assert all(v.outcome not in ("wrong", "unserved", "silent") for v in report.validators)
    assert net.total_funds() == net.initial_funds
