"""Nothing the peers agree on can crash a host: a model whose validation loss is beyond the
protocol's bound is not proposed (a logged reason), and a θ_e that training cannot continue from is
not trained on (the host sits the epoch out: not slashed); the epoch ends without agreement and
the chain and every fund are unaffected.

On the embedded chain, two honest hosts and no verification; the run's learning rate is absurd, so
honest training itself produces such models (with lr 20 a DiLoCo round of the tiny model ends at a
validation loss of ~17,000 nats; an honest host once crashed on a proposal like that)."""

from __future__ import annotations

import pytest

from node.events import EventKind
from node.host import proposal_problem
from protocol.rules.limits import MAX_LOSS_MICRO
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.presets import tiny
from veriloco.network import LocalNetwork, Roster


def test_proposal_problems() -> None:
    assert proposal_problem(2.5) is None and proposal_problem(MAX_LOSS_MICRO / 1e6 - 1e-3) is None
    assert "outside the protocol's bound" in proposal_problem(17_449.9)
    assert "outside" in proposal_problem(-1.0)
    assert "nan" in proposal_problem(float("nan")) and "inf" in proposal_problem(float("inf"))


@pytest.mark.slow
@pytest.mark.parametrize("lr, event", [("20", EventKind.PROPOSAL_WITHHELD), ("1000", EventKind.SAT_OUT)])
def test_a_diverged_model_is_an_event_not_a_crash(tmp_path, lr, event) -> None:
    spec = tiny("broken").with_changes(train={"inner_steps": 8, "segment_steps": 4, "batch_size": 8, "lr": lr},
                                       verification={"enabled": False}, phases={"min_hosts": 2, "min_validators": 0})
    dataset = Dataset.load(spec.data, tmp_path / "cache")
    events = []
    net = LocalNetwork(spec, tmp_path / "net", Roster(hosts=[HostBehaviour(), HostBehaviour()]), dataset,
                       on_event=events.append)
    start = net.ledger.epoch().model_hash
    report = net.run_epoch(max_rounds=200)
    mine = [e for e in events if e.kind is event]
    assert {e.who for e in mine} == {h.name for h in net.hosts}, events  # each host, once
    if event is EventKind.PROPOSAL_WITHHELD:
        assert all("outside the protocol's bound" in e.detail for e in mine)
        assert all(h.outcome == "accepted" and h.proposal is None for h in report.hosts)
    else:
        assert all("not finite" in e.detail for e in mine)
        assert all(h.commitment is None and (h.outcome, h.slashed) == ("sat_out", "0") for h in report.hosts)
    assert not report.agreed and net.ledger.epoch().model_hash == start  # θ stays what it was
    assert net.total_funds() == net.initial_funds
    net.run_epoch(max_rounds=200)  # and the next epoch runs the same way: nothing is stuck
