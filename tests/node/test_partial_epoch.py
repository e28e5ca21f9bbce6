"""Partial epochs (issue 30): a host at half speed commits the segments it finished, and its work counts.

Block time stands in for wall time: the train window is sized for hosts whose steps take one block
each (the honest hosts here train within it), and the straggler's every step takes two blocks (it
mines them as it trains): half the speed the window was sized for. It ends its epoch after the
segment past which another would miss the commit deadline, and commits that shorter leaf chain.
Validators check it the same way (challenges among its segments, leaf 0 against θ_e, its Δ
against its last leaf); it is accepted and nobody is slashed; its Δ enters the aggregate weighted
by its steps and it is paid its share of the segments; training advances, and it trains the next
epoch whole when it is not slowed any more. A host too slow for even one segment sits the epoch
out (``sit_out``) instead of committing nothing, and trains the next one.
"""

from __future__ import annotations

import pytest
from http_network import HttpNetwork

from node.partial_epoch import COMMIT_MARGIN_BLOCKS, another_segment_fits, first_segment_fits
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.presets import tiny


def partial_spec():
    return tiny("partial-epoch").with_changes(
        train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8},
        verification={"challenges_k": 1, "validators_r": 1},
        phases={"min_hosts": 3, "min_validators": 2, "join_blocks": 40, "train_blocks": 24, "reveal_blocks": 40,
                "verify_blocks": 80, "verdict_reveal_blocks": 40, "propose_blocks": 40},
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return Dataset.load(partial_spec().data, tmp_path_factory.mktemp("cache"))


def test_another_segment_fits_at_the_pace_kept() -> None:
    # 2 segments in 16 blocks: 8 a segment; from height 116 the next ends at 124, + the margin.
    assert another_segment_fits(2, 100, 116, 124 + COMMIT_MARGIN_BLOCKS)
    assert not another_segment_fits(2, 100, 116, 123 + COMMIT_MARGIN_BLOCKS)
    assert another_segment_fits(4, 100, 100, 102)  # no block passed: the next one costs nothing
    with pytest.raises(ValueError, match="at least one finished segment"):
        another_segment_fits(0, 100, 116, 200)


def test_the_first_segment_fits_at_the_pace_of_its_steps() -> None:
    # 1 of 4 steps in 10 blocks: the other 3 end at 140, + the margin.
    assert first_segment_fits(1, 4, 100, 110, 140 + COMMIT_MARGIN_BLOCKS)
    assert not first_segment_fits(1, 4, 100, 110, 139 + COMMIT_MARGIN_BLOCKS)
    # Before the first step (the pace is not known yet) more than the margin must be left: sent
    # then, the sit_out still lands before the deadline.
    assert first_segment_fits(0, 4, 100, 100, 101 + COMMIT_MARGIN_BLOCKS)
    assert not first_segment_fits(0, 4, 100, 100, 100 + COMMIT_MARGIN_BLOCKS)
    with pytest.raises(ValueError, match="not within the first segment"):
        first_segment_fits(4, 4, 100, 110, 200)


@pytest.mark.slow
def test_a_host_at_half_speed_commits_a_partial_epoch_that_counts(tmp_path, dataset) -> None:
    spec = partial_spec()
    slowed = {"on": True}

    def half_speed(_done: int, _loss: float) -> None:
        if slowed["on"]:
            net.ledger.wait_for_height(net.ledger.height() + 2)

    net = HttpNetwork(spec, tmp_path, dataset, [HostBehaviour() for _ in range(3)], validators=2,
                      on_step={2: half_speed})
    try:
        straggler = net.host(2).node.address
        report = net.run_epoch()
        by_address = {h.address: h for h in report.hosts}
        slow = by_address[straggler]
        assert slow.commitment is not None and 1 <= slow.commitment.segments < spec.train.segments
        assert {h.outcome for h in report.hosts} == {"accepted"}
        assert all(h.slashed == "0" for h in report.hosts) and all(v.slashed == "0" for v in report.validators)
        mine = [c for c in report.challenges if c.host == straggler]
        assert mine and all(c.segment < slow.commitment.segments and c.outcome == "pass" for c in mine)
        assert slow.commitment.segments - 1 in {c.segment for c in mine}  # its own last segment
        # Its Δ weighs its segments; it is paid by them.
        inputs = {i.address: i.segments for i in net.ledger.aggregation_inputs(report.epoch)}
        assert inputs[straggler] == slow.commitment.segments
        whole = by_address[net.host(0).node.address]
        assert int(slow.reward) * spec.train.segments == pytest.approx(
            int(whole.reward) * slow.commitment.segments, abs=spec.train.segments)
        assert report.agreed and report.next_model_hash
        assert net.total_funds() == net.initial_funds
        # At full speed again, it trains the next epoch whole: nothing of the partial one is lost.
        slowed["on"] = False
        nxt = net.run_epoch()
        assert {h.address: h.commitment.segments for h in nxt.hosts if h.commitment} == {
            m.node.address: spec.train.segments for m in net.members[:3]}
        assert {h.outcome for h in nxt.hosts} == {"accepted"}
    finally:
        net.close()


@pytest.mark.slow
def test_a_host_too_slow_for_one_segment_sits_out_and_trains_the_next_epoch(tmp_path, dataset) -> None:
    # Each of its steps takes 10 blocks: its first segment (4 steps) would end after the 24-block
    # train window. It sits out instead of committing nothing: not challenged, paid or slashed;
    # the others settle the epoch without it, and at full speed it trains the next one whole.
    spec = partial_spec()
    slowed, steps = {"on": True}, []

    def crawl(done: int, _loss: float) -> None:
        if slowed["on"]:
            steps.append(done)
            net.ledger.wait_for_height(net.ledger.height() + 10)

    net = HttpNetwork(spec, tmp_path, dataset, [HostBehaviour() for _ in range(3)], validators=2,
                      on_step={2: crawl})
    try:
        slow = net.host(2).node.address
        report = net.run_epoch()
        by_address = {h.address: h for h in report.hosts}
        assert by_address[slow].commitment is None
        assert (by_address[slow].outcome, by_address[slow].slashed, by_address[slow].reward) == ("sat_out", "0", "0")
        assert not [c for c in report.challenges if c.host == slow]
        # It trained until the pace of its first steps showed that segment would miss the deadline.
        assert steps and max(steps) < spec.train.segment_steps
        assert {h.outcome for a, h in by_address.items() if a != slow} == {"accepted"}
        assert report.slashed_total == "0" and report.agreed
        assert net.total_funds() == net.initial_funds
        slowed["on"] = False
        nxt = net.run_epoch()
        assert {h.address: h.outcome for h in nxt.hosts}[slow] == "accepted"
    finally:
        net.close()
