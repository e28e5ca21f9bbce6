"""The delayed seed in a running network (docs/contract.md, "The delayed seed"): with
``verification.delay_squarings`` > 0 a validator evaluates the VDF over each epoch's seed on a
thread of its own and posts it; each host is then challenged on ``k + 1`` segments, every picker
seated on all of them, and the epoch settles as any other: a cheater is caught, the honest are
accepted, funds are conserved. A node asked to stop ends its evaluation and posts nothing.
"""

from __future__ import annotations

import threading

from node.delayed_seed import DelayedSeedPoster
from node.events import EventKind, NodeEvent
from node.validator import ValidatorNode
from trainer.behaviour import HostBehaviour
from trainer.presets import tiny
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

SQUARINGS = 5_000


def test_a_network_draws_every_hosts_challenges_from_the_delayed_seed(tmp_path, load_dataset) -> None:
    spec = simulation_spec(tiny("delayed-seed").with_changes(
        train={"inner_steps": 16, "segment_steps": 2, "batch_size": 4},
        verification={"delay_squarings": SQUARINGS}), validators=4, hosts=3)
    events: list[NodeEvent] = []
    roster = Roster(hosts=[HostBehaviour(), HostBehaviour(), host_behaviour("noise")],
                    validators=[validator_behaviour("honest") for _ in range(4)])
    net = LocalNetwork(spec, tmp_path, roster, load_dataset(spec.data), on_event=events.append,
                       validator_factory=ValidatorNode)
    k = spec.verification.challenges_k
    for epoch in range(2):
        report = net.run_epoch()
        assert report.epoch == epoch
        assert net.ledger.epoch(epoch).delayed_seed is not None
        outcomes = [h.outcome for h in report.hosts]
        assert sorted(outcomes) == ["accepted", "accepted", "invalid"], outcomes
        for host in report.hosts:
            mine = [c for c in report.challenges if c.host == host.address]
            assert len(mine) == k + 1, (host.address, [c.segment for c in mine])
            seats = [sorted(v.validator for v in c.votes if v.round == 0) for c in mine]
            assert len(seats[0]) >= 2 and all(s == seats[0] for s in seats), seats
        posted = [e for e in events if e.kind == EventKind.DELAYED_SEED and e.epoch == epoch and not e.refused]
        assert len(posted) == 1, posted
    assert net.total_funds() == net.initial_funds


def _waiting_in_delay(tmp_path, load_dataset) -> tuple[LocalNetwork, ValidatorNode]:
    """A run whose epoch 0 waits in delay with its validator evaluating 2^30 squarings (hours)."""
    spec = simulation_spec(tiny("delayed-seed-stop").with_changes(
        train={"inner_steps": 16, "segment_steps": 2, "batch_size": 4},
        verification={"delay_squarings": 1 << 30}), validators=1)
    roster = Roster(hosts=[HostBehaviour()], validators=[validator_behaviour("honest")])
    net = LocalNetwork(spec, tmp_path, roster, load_dataset(spec.data), validator_factory=ValidatorNode)
    validator = net.validators[0]
    assert isinstance(validator, ValidatorNode)
    for _ in range(200):  # join, train, reveal: until the epoch waits for its delayed seed
        for node in net.nodes:
            node.tick()
        net.ledger.end_block()
        if net.ledger.epoch(0, lists=False).phase == "delay" and validator.delayed_seed.running:
            break
    assert net.ledger.epoch(0, lists=False).phase == "delay"
    return net, validator


def _ended(job) -> bool:
    done = threading.Event()
    job.add_done_callback(lambda _: done.set())
    return done.wait(timeout=30)


def test_a_stopping_node_ends_its_evaluation_and_posts_nothing(tmp_path, load_dataset) -> None:
    net, validator = _waiting_in_delay(tmp_path, load_dataset)
    poster: DelayedSeedPoster = validator.delayed_seed
    (job,) = poster.running  # 2^30 squarings: hours, so still running
    validator.stopping.set()
    assert _ended(job), "the evaluation did not stop"
    assert isinstance(job.exception(), InterruptedError)
    assert not poster.tick(validator.status())  # nothing posted; the job is dropped
    assert poster.running == [] and net.ledger.epoch(0, lists=False).delayed_seed is None


def test_an_evaluation_whose_epoch_no_longer_waits_is_stopped(tmp_path, load_dataset) -> None:
    # As when another node posted first: the next tick sees the epoch past delay and stops the job.
    _net, validator = _waiting_in_delay(tmp_path, load_dataset)
    poster: DelayedSeedPoster = validator.delayed_seed
    (job,) = poster.running
    moved_on = validator.status().model_copy(update={"phase": "verify"})
    assert not poster.tick(moved_on)
    assert _ended(job) and isinstance(job.exception(), InterruptedError)
    assert poster.running == [] and not validator.stopping.is_set()
