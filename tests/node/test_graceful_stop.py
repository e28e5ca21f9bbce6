"""A daemon asked to stop (issue 29): training stops at a step boundary and resumes where it
stopped, a validator starts no new replay, and what is due and quick — a reveal, verdict openings —
is done before the daemon exits. On the embedded chain in-process, through ``Daemon.stop`` and the
node's ``stopping`` flag; tests/e2e/test_stop_restart.py sends real signals to real processes."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from node.daemon import Daemon
from node.events import EventKind, NodeEvent
from node.host import HostNode
from node.validator import ValidatorNode
from protocol.rules.beacon import genesis_seed
from protocol.views import EpochInfo
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, run_epoch
from trainer.outer import GlobalState
from trainer.presets import tiny
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster, sim_key

pytestmark = pytest.mark.slow


def small_net(tmp_path, load_dataset, events: list[NodeEvent], validators: int = 2,
              trap_probability: str = "0.2") -> LocalNetwork:
    spec = simulation_spec(tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4},
                                               verification={"trap_probability": trap_probability}),
                           validators=validators, hosts=2)
    return LocalNetwork(spec, tmp_path / "net", Roster(hosts=[host_behaviour(None), host_behaviour(None)],
                                                       validators=[validator_behaviour("honest")] * validators),
                        load_dataset(spec.data), on_event=events.append)


def drive(net: LocalNetwork, until: Callable[[EpochInfo], bool], skip: object = None, rounds: int = 400) -> None:
    """Tick every node but ``skip`` (one block per round) until ``until(epoch info)``."""
    for _ in range(rounds):
        info = net.ledger.epoch()
        if until(info):
            return
        acted = [node.tick() for node in net.nodes if node is not skip]
        net.ledger.end_block()
        if not any(acted) and net.ledger.height() < info.phase_deadline:
            net.ledger.wait_for_height(info.phase_deadline)
    raise AssertionError("the condition was not reached")


def test_a_host_stopped_while_training_stops_at_a_step_and_its_restart_commits_the_same(tmp_path, load_dataset,
                                                                                       caplog) -> None:
    events: list[NodeEvent] = []
    net = small_net(tmp_path, load_dataset, events)
    host = net.hosts[0]
    drive(net, lambda info: info.phase == "train" and host.address in info.hosts)
    daemon = Daemon(host, net.ledger, poll=0.01, drain_s=5)
    steps: list[int] = []

    def signal_at_step_5(done: int, _loss: float) -> None:
        steps.append(done)
        if done == 5:
            daemon.stop()  # what the SIGINT handler does

    host._on_step = signal_at_step_5
    with caplog.at_level(logging.INFO):
        daemon.run()
    assert steps == [1, 2, 3, 4, 5]  # step 6 was refused at its boundary
    assert "training stopped: at step 6/8" in caplog.text and "stopped; nothing was due" in caplog.text
    status = net.ledger.participant(host.address)
    assert status.phase == "train" and not status.committed
    # The segments finished before the stop are on record: a restart trains from there.
    _, done = EpochStore(host.root, net.spec.run_id(), host.address).read_progress(0)
    assert len(done) == 2
    # The restart: a new node on the same work directory, which the run drives to the end.
    restarted = HostNode(net.ledger, sim_key("host-0"), net.spec, host.dataset, host.root, host.peers, name="host-0")
    net.hosts[0] = restarted
    report = net.run_epoch()
    assert all(h.outcome == "accepted" and h.slashed == "0" for h in report.hosts)
    assert all(v.slashed == "0" for v in report.validators)
    ours = next(h for h in report.hosts if h.address == host.address)
    ctx = EpochContext(net.spec.run_id(), 0, host.address, genesis_seed(net.spec.run_id()))
    twin = run_epoch(net.spec, host.dataset, ctx, GlobalState.initial(net.spec).params, tmp_path / "twin")
    assert twin is not None and ours.commitment is not None
    assert ours.commitment.checkpoint_root == twin.commitment.checkpoint_root  # as if never stopped
    assert net.total_funds() == net.initial_funds


def test_a_daemon_stopped_in_reveal_reveals_before_it_exits(tmp_path, load_dataset, caplog) -> None:
    events: list[NodeEvent] = []
    net = small_net(tmp_path, load_dataset, events)
    host = net.hosts[1]
    drive(net, lambda info: host.address in info.committed)
    drive(net, lambda info: info.phase == "reveal", skip=host)  # host 1 committed, then went quiet
    assert not net.ledger.participant(host.address).revealed
    daemon = Daemon(host, net.ledger, poll=0.01, drain_s=5)
    daemon.stop()
    with caplog.at_level(logging.INFO):
        daemon.run()
    assert "stopping: waiting for its beacon reveal" in caplog.text
    assert net.ledger.participant(host.address).revealed
    report = net.run_epoch()
    assert all(h.outcome == "accepted" and h.slashed == "0" for h in report.hosts)


def test_a_validator_stops_between_replays_opens_what_it_committed_and_its_restart_finishes(
        tmp_path, load_dataset, caplog) -> None:
    events: list[NodeEvent] = []
    # One validator: it holds all the stake, so it picks for, and sits on, every host's challenges.
    # No traps: a disputed trap would open its verdict in dispute_reveal, not in verdict_reveal.
    net = small_net(tmp_path, load_dataset, events, validators=1, trap_probability="0")
    validator = net.validators[0]
    assert isinstance(validator, ValidatorNode)
    daemon = Daemon(validator, net.ledger, poll=0.01, drain_s=5)

    def stop_after_first(event: NodeEvent) -> None:
        events.append(event)
        mine = event.who == validator.name and event.kind is EventKind.VERDICT_COMMITTED
        if mine and not validator.stopping.is_set():
            daemon.stop()

    validator._on_event = stop_after_first
    drive(net, lambda _: net.ledger.participant(validator.address).revealed)
    drive(net, lambda info: info.phase == "verify", skip=validator)
    assigned = net.ledger.participant(validator.address).to_commit
    assert assigned > 1
    daemon.run()  # replays one challenge, commits, is asked to stop: no further replay starts
    mine = [e for e in events if e.who == validator.name and e.kind is EventKind.VERDICT]
    assert len(mine) == 1
    assert net.ledger.participant(validator.address).to_commit == assigned - 1
    # Restarted: it replays the rest, commits and opens; stopped again in verdict_reveal it opens
    # every verdict before it exits.
    validator._on_event = events.append
    validator.stopping.clear()
    drive(net, lambda _: net.ledger.participant(validator.address).to_commit == 0)
    drive(net, lambda info: info.phase == "verdict_reveal", skip=validator)
    assert net.ledger.participant(validator.address).to_reveal == assigned
    again = Daemon(validator, net.ledger, poll=0.01, drain_s=5)
    again.stop()
    with caplog.at_level(logging.INFO):
        again.run()
    assert "verdict opening(s)" in caplog.text
    assert net.ledger.participant(validator.address).to_reveal == 0
    report = net.run_epoch()
    assert all(h.outcome == "accepted" and h.slashed == "0" for h in report.hosts)
    assert all(v.slashed == "0" for v in report.validators)
    assert net.total_funds() == net.initial_funds
