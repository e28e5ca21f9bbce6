"""Hosts on the embedded chain with verification off: they train, agree on θ, resync, and resume after a crash."""

import shutil

import pytest

from node.host import HostNode
from protocol.rules.spec import RunSpec
from trainer.behaviour import HostBehaviour
from trainer.presets import tiny
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow


def unverified_spec() -> RunSpec:
    return tiny("unverified").with_changes(
        train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8},
        verification={"enabled": False},
        phases={"min_hosts": 2, "min_validators": 0},
    )


def test_hosts_agree_and_the_model_improves(tmp_path, dataset) -> None:
    net = LocalNetwork(unverified_spec(), tmp_path, Roster(hosts=[HostBehaviour(), HostBehaviour(), HostBehaviour()]),
                       dataset)
    reports = [net.run_epoch() for _ in range(3)]
    for report in reports:
        assert report.agreed and report.next_model_hash
        assert {h.outcome for h in report.hosts} == {"accepted"}
        assert len({h.proposal.model_hash for h in report.hosts}) == 1
    losses = [min(h.proposal.val_loss_micro for h in r.hosts) for r in reports]
    assert losses[-1] < losses[0]
    assert net.total_funds() == net.initial_funds
    assert net.ledger.epoch().model_hash == reports[-1].next_model_hash


def test_restarted_host_resumes_without_double_commit_and_resyncs(tmp_path, dataset) -> None:
    spec = unverified_spec()
    net = LocalNetwork(spec, tmp_path, Roster(hosts=[HostBehaviour(), HostBehaviour()]), dataset)
    net.run_epoch()
    # Host 1 loses its whole disk between epochs: a fresh node must fetch θ_1 from host 0 by hash.
    lost = net.hosts[1]
    shutil.rmtree(lost.root)
    fresh = HostNode(net.ledger, lost.key, spec, dataset, lost.root, net.resolve, name="host-1 (restarted)")
    net.hosts[1] = fresh
    info = net.ledger.epoch()
    assert not fresh.globals.has(info.model_hash)
    # Run the epoch's join and train phases; then replace the node again mid-epoch (a crash after committing).
    while net.ledger.epoch().phase in ("join", "train"):
        if not any([n.tick() for n in net.nodes]):  # noqa: C419 (every node ticks: no short-circuit)
            net.ledger.advance(net.operator)
    assert fresh.address in net.ledger.epoch().committed
    again = HostNode(net.ledger, lost.key, spec, dataset, lost.root, net.resolve, name="host-1 (again)")
    net.hosts[1] = again
    report = net.run_epoch()
    assert report.agreed
    mine = next(h for h in report.hosts if h.address == again.address)
    assert mine.outcome == "accepted" and mine.revealed
