"""The verifier's measures and derived bounds: sound for honest training, tight where they claim to be,
and failing the forged states they exist for."""

from __future__ import annotations

import math

import pytest
import torch
from verifier_env import leaves_of

from trainer.step import TrainState
from verifier.measure import (
    MOMENT_ATOL,
    adam_step_bound,
    compare,
    delta_excess,
    leaf_moment_check,
    moment_errors,
    moment_ratio_bound,
    param_floor,
    tensor_distances,
    update_excess,
    update_limit,
)


def _adam(grads: torch.Tensor, b1: float, b2: float) -> list[tuple[float, float]]:
    """(m_t, v_t) of one coordinate after each gradient, float64."""
    m = v = 0.0
    out = []
    for g in grads.tolist():
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        out.append((m, v))
    return out


@pytest.mark.parametrize("b1, b2", [(0.9, 0.95), (0.9, 0.999), (0.5, 0.9), (0.95, 0.9)])
def test_the_moment_ratio_bound_holds_for_any_gradients_and_is_reached(b1, b2) -> None:
    gen = torch.Generator().manual_seed(0)
    for t in (1, 2, 5, 20, 64):
        for _ in range(50):  # random gradients of any sign and scale: never beyond B(t)
            grads = torch.randn(t, generator=gen, dtype=torch.float64) * torch.rand(t, generator=gen,
                                                                                      dtype=torch.float64) * 10
            m, v = _adam(grads, b1, b2)[-1]
            assert abs(m) <= moment_ratio_bound(b1, b2, t) * math.sqrt(v) * (1 + 1e-12)
        # Cauchy–Schwarz is tight: the gradient g_{t-k} ∝ (β₁/β₂)^k reaches it.
        worst = torch.tensor([(b1 / b2) ** (t - 1 - i) for i in range(t)], dtype=torch.float64)
        m, v = _adam(worst, b1, b2)[-1]
        assert abs(m) == pytest.approx(moment_ratio_bound(b1, b2, t) * math.sqrt(v), rel=1e-9)
    assert adam_step_bound(b1, b2, 1) == pytest.approx(1.0)  # the first step is at most the gradient's sign


def test_the_step_bound_at_the_default_betas() -> None:
    a = [adam_step_bound(0.9, 0.95, t) for t in range(1, 400)]
    limit = 0.1 / math.sqrt(0.05) / math.sqrt(1 - 0.81 / 0.95)  # t → ∞: (1 − β₁) / √((1 − β₂)(1 − β₁²/β₂))
    assert a[0] == pytest.approx(1.0) and a == sorted(a) and a[-1] == pytest.approx(limit) and limit < 1.17


def test_honest_segments_and_epochs_are_within_the_update_bound(spec, honest) -> None:
    leaves = leaves_of(honest)
    c, H = spec.train.segment_steps, spec.train.inner_steps
    for g in range(spec.train.segments):
        excess, _ = update_excess(leaves[g].state.params, leaves[g + 1].state.params, spec.train, g * c, c)
        assert 0 < excess <= 1
    excess, _ = update_excess(leaves[0].state.params, leaves[-1].state.params, spec.train, 0, H)
    assert 0 < excess <= 1
    # What c steps allow, per coordinate: lr · Σ A(t) (about c · lr).
    assert update_limit(spec.train, 0, c) == pytest.approx(float(spec.train.lr) * sum(
        adam_step_bound(0.9, 0.95, t) for t in range(1, c + 1)))


def test_the_delta_bound_allows_the_quantization_error(spec, honest) -> None:
    from trainer.delta import dequantize
    from trainer.model import parameter_shapes

    shapes = parameter_shapes(spec)
    delta = dequantize(honest.result.payload, shapes, spec.quantization)
    excess, _ = delta_excess(honest.theta.params, delta, honest.result.payload, shapes, spec.train, spec.quantization)
    assert excess <= 1
    pushed = {n: t * 40 for n, t in delta.items()}  # 40 × an honest Δ: more than H steps can move
    excess, where = delta_excess(honest.theta.params, pushed, honest.result.payload, shapes, spec.train,
                                 spec.quantization)
    assert excess > 1 and where


def test_leaf_moments_that_no_gradients_produce_are_found(spec, honest) -> None:
    leaf = leaves_of(honest)[2]
    found, problem = leaf_moment_check(leaf.state, spec.train)
    assert problem is None and 0 < found["exp_avg_ratio"] <= 1
    name = "blocks.0.mlp.fc.weight"

    def forged(**changes) -> TrainState:
        state = TrainState({n: t.clone() for n, t in leaf.state.params.items()},
                           {n: t.clone() for n, t in leaf.state.exp_avg.items()},
                           {n: t.clone() for n, t in leaf.state.exp_avg_sq.items()}, leaf.state.step,
                           leaf.state.rng_key)
        for group, (index, value) in changes.items():
            getattr(state, group)[name].view(-1)[index] = value
        return state

    v0 = float(leaf.state.exp_avg_sq[name].view(-1)[0])
    bound = moment_ratio_bound(0.9, 0.95, leaf.state.step)
    cases = {
        "a first moment where no gradient ever was": forged(exp_avg_sq=(0, 0.0), exp_avg=(0, 1e-6)),
        "a first moment beyond B(t)·√v": forged(exp_avg=(0, 1.01 * bound * math.sqrt(v0))),
        "a negative second moment": forged(exp_avg_sq=(0, -1e-9)),
        "second moments beyond the clip": forged(exp_avg_sq=(0, 10.0)),
    }
    for what, state in cases.items():
        assert leaf_moment_check(state, spec.train)[1] is not None, what
    # Float32 underflow: a first moment of 1e-19 where v underflowed to 0 is possible and allowed.
    assert leaf_moment_check(forged(exp_avg_sq=(0, 0.0), exp_avg=(0, MOMENT_ATOL / 2)), spec.train)[1] is None
    zero = leaves_of(honest)[0]
    assert leaf_moment_check(zero.state, spec.train)[1] is None  # leaf 0: step 0, zero moments


def test_distances_are_per_tensor_and_moments_per_coordinate(spec, honest) -> None:
    leaves = leaves_of(honest)
    start, end = leaves[1], leaves[2]
    assert compare(end.state, end.state, start.state, spec.train, end.losses, end.losses).distance == 0
    # One tensor moved by 1 % of its own update: 1 % in that tensor, whatever the others did.
    name = "blocks.0.ln1.bias"
    moved = {n: t.clone() for n, t in end.state.params.items()}
    moved[name] += 0.01 * (end.state.params[name] - start.state.params[name])
    state = TrainState(moved, end.state.exp_avg, end.state.exp_avg_sq, end.state.step, end.state.rng_key)
    distances = tensor_distances(end.state, state, start.state)
    assert distances[f"params/{name}"] == pytest.approx(0.01 / 1.01, rel=1e-3)
    assert max(v for k, v in distances.items() if k != f"params/{name}") == 0
    found = compare(end.state, state, start.state, spec.train, end.losses, end.losses)
    assert found.worst_tensor[0] == f"params/{name}" and found.groups["params"] < 0.001  # diluted over all
    # A 64-coordinate tensor answers relative to at least the update of a 4096-coordinate block.
    update = float((end.state.params[name] - start.state.params[name]).double().norm())
    floor = param_floor(spec.train, spec.train.segment_steps)
    assert floor > update and found.worst_tensor[1] == pytest.approx(0.01 * update / floor, rel=1e-3)
    # One second moment shrunk by 19 %: a 10 % error of √v in that coordinate.
    v = {n: t.clone() for n, t in end.state.exp_avg_sq.items()}
    flat = v["head.weight"].view(-1)
    i = int(flat.argmax())
    flat[i] *= 0.81
    forged = TrainState(end.state.params, end.state.exp_avg, v, end.state.step, end.state.rng_key)
    errors = moment_errors(end.state, forged, 1e-6)
    assert errors["exp_avg_sq"] == pytest.approx(0.1, rel=0.01) and errors["worst"] == "exp_avg_sq/head.weight"
    nan = {n: t.clone() for n, t in end.state.exp_avg.items()}
    nan["head.weight"].view(-1)[0] = float("nan")
    assert moment_errors(end.state, TrainState(end.state.params, nan, end.state.exp_avg_sq, end.state.step,
                                               end.state.rng_key), 1e-6)["exp_avg"] == math.inf


def _peers(norms: list[float], size: int = 4096) -> dict[str, dict[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    out = {}
    for i, x in enumerate(norms):
        a, b = torch.randn(size, generator=gen), torch.randn(4, generator=gen)
        out[f"host{i}"] = {"a": a * (x / float(a.norm())), "b": b * (1 / float(b.norm()))}
    return out


def test_the_peer_bound_leaves_out_a_tensor_beyond_its_peers_median() -> None:
    from verifier.measure import DELTA_PEER_FACTOR, peer_excess

    found = peer_excess(_peers([1.0, 1.1, 0.9, 1.6]))
    # median of "a" = (1.0 + 1.1) / 2; 1.6 / (1.5 · 1.05) > 1, the others within; "b" all equal
    assert found["host3"][1] == "a" and found["host3"][0] == pytest.approx(1.6 / (DELTA_PEER_FACTOR * 1.05))
    assert found["host3"][0] > 1 and all(found[h][0] <= 1 for h in ("host0", "host1", "host2"))
    assert peer_excess(_peers([1.0, 1.1, 0.9, 1.5]))["host3"][0] <= 1
    # an order of the hosts or a permutation of the dict does not matter
    shuffled = dict(reversed(list(_peers([1.0, 1.1, 0.9, 1.6]).items())))
    assert peer_excess(shuffled) == found


def test_the_peer_bound_needs_three_peers_and_refuses_a_tensor_no_peer_moved() -> None:
    from verifier.measure import peer_excess

    assert peer_excess(_peers([1.0, 100.0])) == {"host0": (0.0, ""), "host1": (0.0, "")}
    assert peer_excess({}) == {}
    zeros = _peers([0.0, 0.0, 0.0, 1.0])
    found = peer_excess(zeros)
    assert found["host3"] == (math.inf, "a") and found["host0"][0] <= 1


def test_the_peer_bound_measures_the_same_bits_at_every_thread_count(threads) -> None:
    from verifier.measure import tensor_norm

    x = torch.randn(3_000_000, generator=torch.Generator().manual_seed(1))
    found = set()
    for n in (1, 2, 3):
        threads(n)
        found.add(tensor_norm(x))
    assert len(found) == 1 and found.pop() == pytest.approx(float(x.double().norm()))


def test_small_tensors_are_compared_as_one_pool() -> None:
    from verifier.measure import SMALL_TENSORS, peer_excess

    gen = torch.Generator().manual_seed(2)
    deltas = {f"host{i}": {"bias1": torch.randn(64, generator=gen), "bias2": torch.randn(64, generator=gen)}
              for i in range(4)}
    deltas["host3"]["bias1"] = deltas["host3"]["bias1"] * (1.7 / float(deltas["host3"]["bias1"].norm())) * float(
        deltas["host0"]["bias1"].norm())  # 1.7× in one small tensor: within the pool's 1.5×
    found = peer_excess(deltas)
    assert {name for _, name in found.values()} == {SMALL_TENSORS} and found["host3"][0] <= 1



def _small_peers(big: dict[str, float], small: int = 6) -> dict[str, dict[str, torch.Tensor]]:
    """4 hosts, a 4,096-coordinate tensor and ``small`` 64-coordinate ones, every norm 1 except
    ``big``: ``"host/tensor"`` -> its norm."""
    gen = torch.Generator().manual_seed(5)
    out = {}
    for i in range(4):
        tensors = {"a": torch.randn(4096, generator=gen), **{f"b{j}": torch.randn(64, generator=gen)
                                                             for j in range(small)}}
        out[f"host{i}"] = {n: t * (big.get(f"host{i}/{n}", 1.0) / float(t.norm())) for n, t in tensors.items()}
    return out


def test_a_forged_small_tensor_inside_the_pool_enters_the_aggregate_at_the_peer_factor() -> None:
    from verifier.measure import DELTA_PEER_FACTOR, peer_excess, tensor_norm, within_peer_bound

    deltas = _small_peers({"host3/b0": 2.5})
    # The pool hides it: √(5 + 2.5²) / √6 = 1.37 < 1.5, so the Δ is kept ...
    assert peer_excess(deltas)["host3"][0] <= 1
    bound = within_peer_bound(deltas)
    assert list(bound.kept) == ["host0", "host1", "host2", "host3"] and not bound.left_out
    # ... but its b0 enters at 1.5 × the median (1), the same direction, nothing else touched.
    clipped = bound.kept["host3"]["b0"]
    assert tensor_norm(clipped) == pytest.approx(DELTA_PEER_FACTOR, rel=1e-6)
    assert bound.clipped == {"host3": {"b0": pytest.approx(DELTA_PEER_FACTOR / 2.5, rel=1e-6)}}
    assert torch.allclose(clipped, deltas["host3"]["b0"] * (DELTA_PEER_FACTOR / 2.5), rtol=1e-6, atol=0)
    for h in deltas:
        for n, t in deltas[h].items():
            if (h, n) != ("host3", "b0"):
                assert bound.kept[h][n] is t
    # Without the clip (what the pool alone admitted) it would enter at 2.5×.
    assert tensor_norm(within_peer_bound(deltas, clip=False).kept["host3"]["b0"]) == pytest.approx(2.5)


def test_an_honest_small_tensor_loses_only_its_excess_and_one_within_is_untouched() -> None:
    from verifier.measure import DELTA_PEER_FACTOR, tensor_norm, within_peer_bound

    deltas = _small_peers({"host0/b1": 1.4, "host1/b2": 1.67, "host2/a": 1.45})
    bound = within_peer_bound(deltas)
    assert set(bound.clipped) == {"host1"} and set(bound.clipped["host1"]) == {"b2"}
    assert bound.kept["host0"]["b1"] is deltas["host0"]["b1"] and bound.kept["host2"]["a"] is deltas["host2"]["a"]
    # the median of b2's norms is 1: 1.67 becomes 1.5, not less
    assert tensor_norm(bound.kept["host1"]["b2"]) == pytest.approx(DELTA_PEER_FACTOR, rel=1e-6)


def test_the_clip_is_the_same_bits_at_any_thread_count_and_arrival_order(threads) -> None:
    from verifier.measure import within_peer_bound

    deltas = _small_peers({"host3/b0": 2.5, "host2/b4": 1.9})
    runs = []
    for n, order in ((1, list(deltas)), (2, list(reversed(deltas))), (3, ["host2", "host0", "host3", "host1"])):
        threads(n)
        runs.append(within_peer_bound({h: deltas[h] for h in order}))
    first = runs[0]
    assert set(first.clipped) == {"host2", "host3"}
    for other in runs[1:]:
        assert list(other.kept) == list(first.kept) and other.clipped == first.clipped
        assert all(torch.equal(other.kept[h][n], first.kept[h][n]) for h in first.kept for n in first.kept[h])


def test_the_clip_needs_three_peers_zeroes_what_no_peer_moved_and_refuses_non_finite() -> None:
    from verifier.measure import peer_clip

    deltas = _small_peers({"host3/b0": 2.5})
    two = {h: deltas[h] for h in ("host0", "host3")}
    kept, scales = peer_clip(two)
    assert not scales and kept["host3"]["b0"] is two["host3"]["b0"]
    still = {h: {**d, "b5": torch.zeros(64)} for h, d in deltas.items()}
    still["host1"]["b5"] = torch.ones(64)
    kept, scales = peer_clip(still)
    assert scales["host1"]["b5"] == 0.0 and not bool(kept["host1"]["b5"].any())
    deltas["host2"]["b1"] = torch.full((64,), float("inf"))
    with pytest.raises(ValueError, match="b1"):
        peer_clip(deltas)

def test_segment_movements_and_the_triangle_slack_of_a_path() -> None:
    from verifier.measure import SMALL_TENSORS, segment_movements, triangle_slack

    gen = torch.Generator().manual_seed(3)
    sizes = {"w": 4096, "b": 8}
    step = {n: torch.randn(k, generator=gen) for n, k in sizes.items()}
    line = [{n: i * step[n] for n in sizes} for i in range(5)]  # four equal steps along one line
    moves = segment_movements(line)
    assert len(moves) == 4 and all(row["w"] == pytest.approx(float(step["w"].norm())) for row in moves)
    delta = {n: line[0][n] - line[-1][n] for n in sizes}
    straight = triangle_slack(moves, delta, sizes)
    assert straight["w"] == pytest.approx(1.0) and straight[SMALL_TENSORS] == pytest.approx(1.0)
    # a path that turns back travels farther than its Δ: the room a triangle check leaves a jump
    wander = [line[0], line[2], line[1], line[3], line[4]]
    assert triangle_slack(segment_movements(wander), delta, sizes)["w"] == pytest.approx(1.5)  # 6 steps, Δ 4
    # a jump whose movement is reported as a small one breaks ‖Δ‖ ≤ Σ m
    jumped = [*line[:-1], {n: line[-1][n] * 3 for n in sizes}]
    under = segment_movements(line)  # the rows an under-reporting host would commit
    jump_delta = {n: jumped[0][n] - jumped[-1][n] for n in sizes}
    assert triangle_slack(under, jump_delta, sizes)["w"] == pytest.approx(1 / 3)
    assert triangle_slack(segment_movements(jumped), jump_delta, sizes)["w"] >= 1 - 1e-6  # float32 leaves


def test_segment_movements_refuse_leaves_of_different_layouts() -> None:
    from verifier.measure import segment_movements

    with pytest.raises(ValueError, match="two leaves"):
        segment_movements([{"w": torch.zeros(2)}])
    with pytest.raises(ValueError, match="layouts"):
        segment_movements([{"w": torch.zeros(2)}, {"w": torch.zeros(3)}])
    with pytest.raises(ValueError, match="layouts"):
        segment_movements([{"w": torch.zeros(2)}, {"v": torch.zeros(2)}])



def _aimed(signs: list[float], scales: list[float] | None = None) -> dict[str, dict[str, torch.Tensor]]:
    """Δs of one common direction (a matrix and a bias) plus their own noise, each times its sign and scale."""
    gen = torch.Generator().manual_seed(5)
    common = {"a": torch.randn(4096, generator=gen), "b": torch.randn(8, generator=gen)}
    scales = scales or [1.0] * len(signs)
    return {f"host{i}": {n: s * x * (t + 0.6 * torch.randn(t.shape, generator=gen)) for n, t in common.items()}
            for i, (s, x) in enumerate(zip(signs, scales, strict=True))}


def test_direction_cosines_score_a_delta_pointing_against_its_peers_below_honest_ones() -> None:
    from verifier.measure import direction_cosines, peer_excess

    deltas = _aimed([1, 1, 1, 1, -1])
    found = direction_cosines(deltas)
    assert found["host4"] < -0.5 and min(found[f"host{i}"] for i in range(4)) > 0.5
    # Its norm is an honest one: the peer bound does not see it.
    assert all(x <= 1 for x, _ in peer_excess(deltas).values())
    # Scale-free: half the movement the same way (a partial epoch) scores as the whole one.
    half = direction_cosines(_aimed([1, 1, 1, 1, -1], [0.5, 1, 1, 1, 1]))
    assert half["host0"] == pytest.approx(found["host0"], rel=1e-12)


def test_direction_cosines_are_the_same_bits_in_any_order_and_at_any_thread_count(threads) -> None:
    from verifier.measure import direction_cosines

    deltas = _aimed([1, 1, -1, 1, 1, 1])
    seen = set()
    for n, order in ((1, deltas), (2, dict(reversed(list(deltas.items())))), (3, dict(sorted(deltas.items())))):
        threads(n)
        seen.add(tuple(sorted(direction_cosines(order).items())))
    assert len(seen) == 1


def test_direction_cosines_need_four_deltas_and_refuse_non_finite_ones() -> None:
    from verifier.measure import direction_cosines

    # Three: a flipped Δ would cancel an honest one in the others' median (the mean of two).
    assert direction_cosines(_aimed([1, 1, -1])) == dict.fromkeys(["host0", "host1", "host2"], 1.0)
    bad = _aimed([1, 1, 1, 1])
    bad["host0"]["a"][0] = math.nan
    with pytest.raises(ValueError, match="not finite"):
        direction_cosines(bad)


def test_the_peer_bound_splits_small_tensors_where_the_checks_floor_them() -> None:
    """One split of small and large tensors: the peer bound's pool (an aggregation rule, in
    ``trainer``) and the checks' parameter floor (``verifier``) name the same size."""
    from trainer.peer_bound import PEER_POOL_COORDINATES
    from verifier.measure import PARAM_FLOOR_COORDINATES

    assert PEER_POOL_COORDINATES == PARAM_FLOOR_COORDINATES
