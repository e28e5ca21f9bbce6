"""The probe in a network of real nodes (issue 28): the validators of each host's last segment post
its probe gain with their verdict (``trainer.probe``), the chain records the decided gain, and every
proposer leaves out of the aggregate a Δ whose gain is far below its peers' (``probe_outliers``) —
here a host that jumps along the validation-loss ascent in a segment nobody replays, with a Δ of
honest size that the peer bound keeps — while the honest hosts stay in and nobody is slashed.

Tiny preset, one epoch of 4 segments, ``challenges_k`` 0 (only the last segment is replayed, so the
jump is never caught by a replay and the probe is what leaves it out)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from node.events import EventKind, NodeEvent
from protocol.rules.limits import MAX_GAIN_MICRO
from trainer.presets import tiny
from trainer.probe import GAIN_MICRO_BOUND
from veriloco.behaviours import host_behaviour, validator_behaviour
from veriloco.commands.simulate import simulation_spec
from veriloco.network import LocalNetwork, Roster

pytestmark = pytest.mark.slow


def test_the_chain_bound_on_a_gain_is_the_probes_clamp() -> None:
    assert MAX_GAIN_MICRO == GAIN_MICRO_BOUND


def test_a_host_whose_delta_makes_the_model_worse_is_left_out_and_nobody_is_slashed(
        tmp_path: Path, load_dataset: Any) -> None:
    base = tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4},
                               verification={"challenges_k": 0, "trap_probability": "0"})
    behaviours = [None, None, None, "jump:1,1,ascent,each"]
    spec = simulation_spec(base, validators=2, hosts=len(behaviours))
    assert spec.verification.probe_windows > 0 and spec.aggregation.probe_margin_micro > 0
    events: list[NodeEvent] = []
    roster = Roster(hosts=[host_behaviour(b) for b in behaviours],
                    validators=[validator_behaviour("honest") for _ in range(2)])
    net = LocalNetwork(spec, tmp_path / "net", roster, load_dataset(spec.data), on_event=events.append)
    report = net.run_epoch(max_rounds=300)
    assert net.total_funds() == net.initial_funds
    jumper = net.hosts[3].address
    assert report.agreed
    assert {h.outcome for h in report.hosts} == {"accepted"}  # no replay failed it: only the probe sees it
    assert all(int(m.slashed) == 0 for m in [*report.hosts, *report.validators])
    gains = {h.address: h.gain_micro for h in report.hosts if h.gain_micro is not None}
    assert len(gains) == len(report.hosts), report.hosts
    honest = [gains[h.address] for h in net.hosts[:3]]
    assert gains[jumper] < min(honest) - spec.aggregation.probe_margin_micro, gains
    print(f"probe gains (µnats): honest {sorted(honest)}, jump {gains[jumper]}")
    # Every proposer left the jumper out for its probe gain, and no honest host out for anything.
    left_out = [e for e in events if e.kind == EventKind.DELTA_LEFT_OUT]
    assert left_out and all(e.detail.startswith(f"{jumper}: its probe gain") for e in left_out), left_out
    assert {e.who for e in left_out} >= {net.names[h.address] for h in net.hosts[:3]}
    # The proposals name nobody as unserved: a probe outlier is paid like any accepted host.
    assert all(r.proposal is not None and r.proposal.excluded == [] for r in report.hosts if r.address != jumper)
    assert len({int(h.reward) for h in report.hosts}) == 1


def test_honest_fails_carry_no_gain_whatever_delta_each_validator_holds(tmp_path: Path, load_dataset: Any) -> None:
    # A `wrong_lr` host trains with another learning rate: its last segment's leaf fails, before any
    # Δ is read whole. One honest validator already holds that host's Δ by its hash (put there as the
    # host commits: Δs are held by content, so a host that recommits an old Δ finds some validators
    # holding it and others not), the other does not. A gain measured wherever a Δ happens to be held
    # splits their `fail`s into two verdicts of half the stake each (run with gains on fails, this
    # network ends the challenge `unresolved`, one fail at 0.757 nats); carrying none, they are one
    # group that decides.
    from trainer.artifacts import held_delta_path

    base = tiny().with_changes(train={"inner_steps": 8, "segment_steps": 2, "batch_size": 4},
                               verification={"challenges_k": 0, "trap_probability": "0"})
    behaviours = [None, None, "wrong_lr:1.5"]
    spec = simulation_spec(base, validators=2, hosts=len(behaviours))
    roster = Roster(hosts=[host_behaviour(b) for b in behaviours],
                    validators=[validator_behaviour("honest") for _ in range(2)])
    placed: list[str] = []

    def hold_the_cheaters_delta(event: NodeEvent) -> None:
        if event.kind != EventKind.COMMITTED or not event.who.startswith("host-2") or placed:
            return
        cheater = net.hosts[2]
        commitment = net.ledger.report(event.epoch).hosts
        delta_hash = next(h.commitment.delta_hash for h in commitment if h.address == cheater.address and h.commitment)
        path = held_delta_path(net.validators[0].root, spec.run_id(), delta_hash)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(net.resolve("http://host-2.sim").delta(event.epoch))
        placed.append(delta_hash)

    net = LocalNetwork(spec, tmp_path / "net", roster, load_dataset(spec.data), on_event=hold_the_cheaters_delta)
    report = net.run_epoch(max_rounds=300)
    assert placed and net.total_funds() == net.initial_funds
    last = max((c for c in report.challenges if c.host == net.hosts[2].address), key=lambda c: c.segment)
    votes = [v for v in last.votes if v.outcome is not None]
    assert last.outcome == "fail" and len(votes) == 2, last
    assert {(v.outcome, v.gain_micro) for v in votes} == {("fail", None)}
    seen = {net.names[m.address]: m.outcome for m in [*report.hosts, *report.validators]}
    assert seen["host-2 (wrong_lr)"] == "invalid"
    assert {seen["validator-0"], seen["validator-1"]} == {"diligent"}
    assert all(int(v.slashed) == 0 for v in report.validators)
