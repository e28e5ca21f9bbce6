"""Robust aggregation: exact on hand examples, robust to outliers where promised, bitwise deterministic."""

import random

import pytest
import torch

from protocol.rules.spec import AggregationSpec
from protocol.tensors.aggregation import RULES, AggregationError, aggregate
from protocol.tensors.digest import tensors_digest

HOSTS = [f"inj1host{i}" for i in range(7)]


def deltas_from(values: list[list[float]]) -> dict[str, dict[str, torch.Tensor]]:
    return {HOSTS[i]: {"w": torch.tensor(v, dtype=torch.float32)} for i, v in enumerate(values)}


def run(rule: str, values: list[list[float]], **params) -> list[float]:
    return aggregate(AggregationSpec(rule=rule, **params), deltas_from(values))["w"].tolist()


def test_hand_examples() -> None:
    vals = [[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [100.0, -50.0]]
    assert run("mean", vals) == [26.5, 2.5]
    assert run("median", vals) == [2.5, 15.0]
    assert run("median", vals[:3]) == [2.0, 20.0]
    assert run("trimmed_mean", vals, trim_fraction="0.25") == [2.5, 15.0]
    # Krum with f=1: scores use K-f-2 = 1 nearest neighbour; inputs 0,1,2 tie on distance^2 = 101,
    # and the tie goes to the first in address order.
    assert run("krum", vals, krum_f=1) == [1.0, 10.0]
    assert run("multi_krum", vals, krum_f=1) == pytest.approx([2.0, 20.0])
    assert run("geometric_median", [[0.0], [0.0], [0.0], [9.0]], gm_iters=50) == pytest.approx([0.0], abs=1e-3)


@pytest.mark.parametrize("rule", sorted(set(RULES) - {"mean"}))
def test_outliers_do_not_drag_robust_rules(rule) -> None:
    g = torch.Generator().manual_seed(0)
    honest = [(torch.ones(50) + 0.1 * torch.randn(50, generator=g)).tolist() for _ in range(5)]
    attack = [(-100 * torch.ones(50)).tolist() for _ in range(2)]
    out = torch.tensor(run(rule, honest + attack, krum_f=2, trim_fraction="0.3"))
    assert (out - torch.ones(50)).norm() < 0.5 * torch.ones(50).norm()
    mean = torch.tensor(run("mean", honest + attack))
    assert (mean - torch.ones(50)).norm() > 10 * torch.ones(50).norm()


@pytest.mark.parametrize("rule", sorted(RULES))
def test_bitwise_independent_of_arrival_order_and_threads(rule, threads) -> None:
    g = torch.Generator().manual_seed(1)
    base = {h: {"a": torch.randn(33, 7, generator=g), "b": torch.randn(5, generator=g)} for h in HOSTS[:6]}
    spec = AggregationSpec(rule=rule)
    threads(2)
    reference = tensors_digest("model", aggregate(spec, base))
    items = list(base.items())
    random.Random(3).shuffle(items)
    threads(1)
    assert tensors_digest("model", aggregate(spec, dict(items))) == reference


def test_single_input_and_shapes_preserved() -> None:
    d = {HOSTS[0]: {"x": torch.arange(6.0).reshape(2, 3), "s": torch.tensor(2.0)}}
    for rule in RULES:
        out = aggregate(AggregationSpec(rule=rule), d)
        assert torch.equal(out["x"], d[HOSTS[0]]["x"]) and out["s"].shape == () and out["x"].dtype == torch.float32


def test_bad_inputs_rejected() -> None:
    spec = AggregationSpec()
    with pytest.raises(AggregationError, match="no accepted"):
        aggregate(spec, {})
    with pytest.raises(AggregationError, match="shape"):
        aggregate(spec, {"a": {"w": torch.zeros(2)}, "b": {"w": torch.zeros(3)}})
    with pytest.raises(AggregationError, match="names"):
        aggregate(spec, {"a": {"w": torch.zeros(2)}, "b": {"v": torch.zeros(2)}})
    with pytest.raises(AggregationError, match="NaN"):
        aggregate(spec, {"a": {"w": torch.zeros(2)}, "b": {"w": torch.tensor([0.0, float("nan")])}})


# -- weights: a partial epoch's Δ counts by the segments it covers (issue 30) ------------------------

def run_weighted(rule: str, values: list[list[float]], weights: list[int], **params) -> list[float]:
    w = {HOSTS[i]: weights[i] for i in range(len(values))}
    return aggregate(AggregationSpec(rule=rule, **params), deltas_from(values), w)["w"].tolist()


@pytest.mark.parametrize("rule", sorted(RULES))
def test_equal_weights_are_the_unweighted_rule_bit_for_bit(rule) -> None:
    g = torch.Generator().manual_seed(1)
    values = [torch.randn(40, generator=g).tolist() for _ in range(5)]
    assert run_weighted(rule, values, [8] * 5) == run(rule, values)


def test_weighted_hand_examples() -> None:
    vals = [[0.0, 3.0], [10.0, 6.0], [20.0, 9.0]]
    assert run_weighted("mean", vals, [2, 1, 1]) == pytest.approx([7.5, 5.25])
    # Host 0 holds 3 of 5 units of weight: the running sum passes half at its value.
    assert run_weighted("median", vals, [3, 1, 1]) == [0.0, 3.0]
    # Exactly half: the mean of the two values around it.
    assert run_weighted("median", vals, [2, 1, 1]) == [5.0, 4.5]
    # Trimming 25 % of the weight (1 of 4) at each end drops host 2, and half of host 0.
    assert run_weighted("trimmed_mean", vals, [2, 1, 1], trim_fraction="0.25") == pytest.approx([5.0, 4.5])


@pytest.mark.parametrize("rule", ["mean", "trimmed_mean", "centered_clip", "geometric_median", "multi_krum"])
def test_a_half_weight_delta_pulls_the_aggregate_less(rule) -> None:
    # Host 3 did half the steps: the aggregate moves away from its Δ compared with equal weights.
    vals = [[1.0, 1.0], [1.2, 0.9], [0.9, 1.1], [3.0, 3.0]]
    equal = torch.tensor(run(rule, vals, krum_f=0))
    halved = torch.tensor(run_weighted(rule, vals, [4, 4, 4, 2], krum_f=0))
    straggler = torch.tensor(vals[3])
    assert torch.dist(halved, straggler) > torch.dist(equal, straggler)


def test_bad_weights_rejected() -> None:
    vals = deltas_from([[1.0], [2.0]])
    spec = AggregationSpec(rule="mean")
    with pytest.raises(AggregationError, match="other hosts"):
        aggregate(spec, vals, {HOSTS[0]: 1})
    for bad in (0, -2, 1.5, True):
        with pytest.raises(AggregationError, match="positive integer"):
            aggregate(spec, vals, {HOSTS[0]: 1, HOSTS[1]: bad})
