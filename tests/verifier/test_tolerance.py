"""The cross-hardware tolerance harness, CPU part: honest epochs trained at one thread count (or as a
2-process island) and replayed at another stay at least 30× inside every threshold, and equal
setups replay bit for bit. (CPU↔GPU needs a GPU: ``bench/verifier_calibrate.py --device cuda``.)"""

from __future__ import annotations

import math

import pytest
from suite_env import HOST

from protocol.rules.beacon import genesis_seed
from trainer.delta import dequantize, pseudo_gradient, quantize
from trainer.inner import EpochContext
from trainer.model import parameter_shapes
from trainer.outer import GlobalState, outer_step
from trainer.presets import preset
from verifier.tolerance import Setup, margins, measure_pairs, train_honest

MARGIN = 30
"""What docs/verification.md claims: every threshold at least 30× the largest honest error measured."""


def _ctx(spec) -> EpochContext:
    return EpochContext(spec.run_id(), 0, HOST, genesis_seed(spec.run_id()))


def _check(results, spec) -> None:
    for r in results:
        if r.host == r.validator:
            assert r.bitwise, r.summary()  # same setup: exact
        else:
            assert not r.bitwise or r.host.ranks > 1, r.summary()  # 1 vs 2 threads do differ
    found = margins(results, spec)
    assert all(m >= MARGIN for m in found.values()), (found, [r.summary() for r in results])


def test_one_and_two_threads_replay_each_other_well_inside_the_thresholds(spec, dataset, honest, threads) -> None:
    setups = [Setup(threads=1), Setup(threads=2)]
    results = measure_pairs(spec, dataset, _ctx(spec), honest.theta.params, setups, setups)
    assert len(results) == 4 and all(len(r.segments) == spec.train.segments for r in results)
    _check(results, spec)


@pytest.mark.slow
def test_a_two_process_island_and_a_trained_model(spec, dataset, cache_dir, honest, threads) -> None:
    # From θ after 3 honest epochs (the replay error of a trained model is larger), an island of two
    # 1-thread processes, replayed in one process: bitwise at 1 thread, within the margin at 2.
    theta = honest.theta
    for e in range(3):
        ctx = EpochContext(spec.run_id(), e, HOST, bytes([e]) * 32)
        leaves = train_honest(spec, dataset, ctx, theta.params, Setup())
        payload = quantize(pseudo_gradient(leaves[0].state.params, leaves[-1].state.params), spec.quantization)
        theta = outer_step(theta, dequantize(payload, parameter_shapes(spec), spec.quantization), spec.outer)
    hosts = [Setup(threads=1), Setup(threads=2), Setup(threads=1, ranks=2)]
    results = measure_pairs(spec, dataset, _ctx(spec), theta.params, hosts, [Setup(threads=1), Setup(threads=2)],
                            cache_dir=cache_dir)
    island = {r.validator.threads: r for r in results if r.host.ranks == 2}
    assert island[1].bitwise and not island[2].bitwise
    _check(results, spec)


def test_setups_are_validated(spec) -> None:
    assert Setup(threads=2).label == "cpu/2t" and Setup(ranks=2).label == "cpu/island 2×1t"
    for bad in ({"threads": 0}, {"ranks": 0}, {"device": "meta"}):
        with pytest.raises(ValueError):
            Setup(**bad)
    assert math.isinf(margins([], spec)["tau"])  # nothing measured: no honest error to compare with


@pytest.mark.slow
def test_small_preset_at_theta0_replays_across_thread_counts_30x_inside_tau(load_dataset, threads) -> None:
    # Two segments of `small` (3.3 M parameters, c = 6) from θ_0, 1 thread against 2: 30× inside
    # the default τ here. NOT the whole story: from θ trained over tens of outer steps the
    # false-positive benchmark measured cross-thread replays far outside every threshold at this
    # preset (docs/verification.md, "Known limits"); this test guards the θ_0 end only.
    spec = preset("small")
    spec = spec.with_changes(train={"inner_steps": 2 * spec.train.segment_steps})
    theta = GlobalState.initial(spec).params
    setups = [Setup(threads=1), Setup(threads=2)]
    results = measure_pairs(spec, load_dataset(spec.data), _ctx(spec), theta, setups, setups)
    _check(results, spec)
