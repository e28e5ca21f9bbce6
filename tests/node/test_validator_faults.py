"""A validator's own fault is never a verdict about a host (issue 28): it posts nothing, says so, and
tries again; only evidence about the host's artifacts may fail a host."""

from __future__ import annotations

import pytest

import verifier.replay as replay
from node.events import EventKind, NodeEvent
from trainer.presets import tiny
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("fault", [RuntimeError("a bug in the replay"), MemoryError()])
def test_a_validator_whose_replay_breaks_posts_no_verdict_and_slashes_nobody(tmp_path, load_dataset, monkeypatch,
                                                                               fault) -> None:
    spec = simulation_spec(tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4}),
                           validators=2, hosts=2)
    events: list[NodeEvent] = []
    net = LocalNetwork(spec, tmp_path / "net", Roster(hosts=[host_behaviour(None), host_behaviour(None)],
                                                      validators=[validator_behaviour("honest")] * 2),
                       load_dataset(spec.data), on_event=events.append)

    def broken(*args, **kwargs):
        raise fault

    monkeypatch.setattr(replay, "replay_segment", broken)
    report = net.run_epoch(max_rounds=400)
    assert any(e.kind is EventKind.REPLAY_FAULT for e in events)
    assert not [e for e in events if e.kind is EventKind.VERDICT]  # no verdict was reached, none posted
    assert all(h.slashed == "0" and h.outcome != "invalid" for h in report.hosts)
    assert net.total_funds() == net.initial_funds
    # Mended, the same validators check the next epoch as usual and every honest host is accepted.
    monkeypatch.undo()
    nxt = net.run_epoch(max_rounds=400)
    assert {h.outcome for h in nxt.hosts} == {"accepted"}
