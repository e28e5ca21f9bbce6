"""docs/scaling.md's pipelined cost model (bench/scaling_model.py): the terms behave as the doc says."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench/

from bench.scaling_model import AS_BUILT, LEVERS, SIZES, TARGET, Deployment, Measured, ablation, project, rows_for

SIZE = {s.name: s for s in SIZES}


def test_the_doc_s_verdicts_as_built_below_the_target_with_levers_above_but_at_1b() -> None:
    rows = rows_for(Measured(), Deployment())
    built = [r for r in rows if r["variant"] == "as built"]
    levers = {r["name"]: r for r in rows if r["variant"] == "with levers"}
    assert [r["name"] for r in built] == list(levers) == ["1B", "10B", "50B"]
    assert all(r["utilisation"] < TARGET and not r["meets_target"] for r in built)
    assert levers["10B"]["meets_target"] and levers["50B"]["meets_target"]
    # At 1 B the delayed seed's delay (A = 10 over a 21 s reveal window) lengthens the dispute stall
    # past the target; against a squarer at most 5 times the evaluator's speed it is met.
    assert not levers["1B"]["meets_target"] and levers["1B"]["delay_s"] > 0
    assert project(SIZE["1B"], Measured(), Deployment(vdf_speedup=5), LEVERS["1B"])["meets_target"]
    for r in rows:
        assert r["utilisation"] == pytest.approx(r["compute_s"] / r["period_s"])
        assert r["period_s"] >= max(r["period_host_s"], r["settlement_s"], r["upload_s"])


def test_every_lever_of_a_size_is_needed_for_the_target() -> None:
    # 1 B with a squarer at most 5 times the evaluator's speed, where its levers reach the target.
    for dep in (Deployment(), Deployment(vdf_speedup=5)):
        for name, by_lever in ablation(Measured(), dep).items():
            if by_lever["all"] < TARGET:
                assert name == "1B" and dep.vdf_speedup == 10
                continue
            assert len(by_lever) > 1
            assert all(u < TARGET for lever, u in by_lever.items() if lever != "all"), (name, by_lever)


def test_the_delayed_seed_adds_its_delay_to_the_settlement_only() -> None:
    measured, dep = Measured(), Deployment()
    with_seed = project(SIZE["10B"], measured, dep, LEVERS["10B"])
    without = project(SIZE["10B"], measured, dep, replace(LEVERS["10B"], common_seed=False))
    delay = dep.vdf_speedup * dep.reveal_blocks * dep.block_s * measured.vdf_node_over_evaluate
    assert with_seed["delay_s"] == pytest.approx(delay) and without["delay_s"] == 0
    assert with_seed["challenges"] == 3 and without["challenges"] > 30
    # Twice the squarer's speed, twice the delay.
    faster = project(SIZE["10B"], measured, replace(dep, vdf_speedup=20), LEVERS["10B"])
    assert faster["delay_s"] == pytest.approx(2 * delay)
    assert faster["settlement_s"] - with_seed["settlement_s"] == pytest.approx(delay)


def test_all_to_all_grows_with_the_hosts_and_reduce_scatter_does_not() -> None:
    size = SIZE["10B"]
    few, many = Deployment(hosts=8, validators=8), Deployment(hosts=64, validators=64)
    a2a = [project(size, Measured(), d, AS_BUILT)["exchange_s"] for d in (few, many)]
    rs = [project(size, Measured(), d, LEVERS["10B"])["exchange_s"] for d in (few, many)]
    assert a2a[1] == pytest.approx(a2a[0] * 63 / 7)
    assert rs[1] < 1.15 * rs[0] and rs[1] < a2a[0] / 3


def test_slow_validators_make_the_settlement_the_bound() -> None:
    size = SIZE["1B"]
    one = project(size, Measured(), Deployment(validators=1), LEVERS["1B"])
    assert one["bound"] == "settlement"
    assert one["pickers"] == 1 and one["seats_per_validator"] == 1 * 16 * 3
    assert one["utilisation"] < 0.3


def test_pickers_grow_with_the_validators_and_so_do_the_host_s_challenges() -> None:
    size = SIZE["10B"]
    rows = {v: project(size, Measured(), Deployment(validators=v), AS_BUILT) for v in (2, 16, 96)}
    # Equal stakes: the fewest validators holding more than 1/3, then towards the 19-seat cap.
    assert rows[2]["pickers"] == 1 and rows[16]["pickers"] == 6
    assert 16 < rows[96]["pickers"] < 19
    for r in rows.values():
        assert r["validator_share"] == pytest.approx(r["pickers"] * 3 / size.segments)
    # Every picker picks k = 2 of its own: the host recomputes and uploads about P·k + 1 start leaves.
    assert rows[2]["challenges"] == pytest.approx(3, abs=0.05)
    assert 2 * 6 < rows[16]["challenges"] < 2 * 6 + 1 and rows[96]["challenges"] > 30
    assert rows[96]["upload_s"] > 8 * rows[2]["upload_s"] > 0
    # One common seed would bring them back to k + 1 whatever P; the validators' share stays P·(k+1)/S.
    common = project(size, Measured(), Deployment(validators=96), replace(AS_BUILT, common_seed=True))
    assert common["challenges"] == 3 and common["validator_share"] == rows[96]["validator_share"]
    # 3 challenges against 32 (each run of K = 16 segments replayed once, as far as its highest
    # challenged leaf: ~17 segments against ~118).
    assert common["recompute_s"] < rows[96]["recompute_s"] / 5


def test_a_dispute_tree_reads_in_rounds_that_double_the_holders() -> None:
    size = SIZE["10B"]
    line = project(size, Measured(), Deployment(validators=128), AS_BUILT)
    tree = project(size, Measured(), Deployment(validators=128), replace(AS_BUILT, dispute_tree=True))
    assert line["dispute_round_s"] > 60 * line["leaf_transfer_s"]  # 64 leaf times, one after another
    assert tree["dispute_round_s"] < 7 * (tree["leaf_transfer_s"] + tree["segment_s"]) + 10


def test_stored_leaves_fall_back_to_the_smallest_k_whose_write_is_hidden() -> None:
    short = replace(LEVERS["1B"], longer_segments=1)  # 3.9 s segments: a 12 GB write at 2 GB/s is 6 s
    assert project(SIZE["1B"], Measured(), Deployment(), short)["full_leaf_every"] == 2
    assert project(SIZE["1B"], Measured(), Deployment(disk_GBps=4.0), short)["full_leaf_every"] == 1
    stored = project(SIZE["1B"], Measured(), Deployment(), LEVERS["1B"])
    assert stored["full_leaf_every"] == 1 and stored["recompute_s"] == 0


def test_measured_inputs_are_checked_and_a_costs_file_overrides_them() -> None:
    with pytest.raises(ValidationError):
        Measured(sha256_gbps=2.0)  # a misspelt input is refused, not ignored
    costs = {"k": 3, "r": 2, "limits": {"sha256_GBps": 1.0}, "delta_bytes_per_param": 1.0625}
    measured = Measured.from_costs(costs)
    assert (measured.k, measured.sha256_GBps) == (3, 1.0)
    slower = project(SIZE["10B"], measured, Deployment(), AS_BUILT)
    assert slower["recompute_s"] > project(SIZE["10B"], Measured(), Deployment(), AS_BUILT)["recompute_s"]
