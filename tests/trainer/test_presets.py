"""The presets are complete, valid run specs, and the tiny one learns."""

from __future__ import annotations

import math

import pytest
import torch
from suite_env import HOST

from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import RunSpec
from trainer.evaluate import validation_loss
from trainer.model import parameter_shapes
from trainer.presets import (
    PRESETS,
    TOPK2_ERROR_DECAY,
    TOPK2_OUTER_LR,
    TOPK2_PROBE_MARGIN,
    preset,
    replay_share,
    with_topk2_settings,
)
from trainer.step import Stepper


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_canonical_run_specs(name) -> None:
    spec = preset(name)
    assert RunSpec.from_canonical(spec.canonical()) == spec
    assert spec.model.architecture == "gpt" and spec.economics.denom == "inj"
    assert spec.train.inner_steps % spec.train.segment_steps == 0


def test_topk2_settings_are_written_only_into_a_run_that_reaches_topk2() -> None:
    from decimal import Decimal

    from protocol.rules.spec import parse_quant_schedule

    plain = preset("demo")
    assert with_topk2_settings(plain) == plain  # int8 throughout: the run id does not move
    for quant in ({"scheme": "topk2", "block_size": 1024},
                  parse_quant_schedule("int8@0,topk2/1024@10").model_dump(mode="json")):
        bare = plain.with_changes(quantization=quant)
        spec = with_topk2_settings(bare)
        assert spec.quantization.error_decay == TOPK2_ERROR_DECAY == Decimal("0.9")
        assert spec.aggregation.probe_margin_topk2 == TOPK2_PROBE_MARGIN == Decimal("0.03")
        assert b'"error_decay":"0.9"' in spec.canonical() and b'"probe_margin_topk2":"0.03"' in spec.canonical()
        # The measured topk2 outer step: SGD lr 1 without momentum, not the preset's Nesterov 0.7/0.9.
        assert (spec.outer.lr, spec.outer.momentum) == (TOPK2_OUTER_LR, 0) == (Decimal("1"), 0)
        assert spec.quantization.schedule == bare.quantization.schedule and spec.run_id() != bare.run_id()
        assert with_topk2_settings(spec) == spec
        # A run that already has no outer momentum keeps its own outer lr.
        own = bare.with_changes(outer={"lr": "1.5", "momentum": "0"})
        assert with_topk2_settings(own).outer == own.outer
    # The spec's own defaults stay: a topk2 spec that does not spell them out is β = 1, 3 × probe_margin.
    assert bare.quantization.error_decay == 1 and bare.aggregation.probe_margin_topk2 is None
    assert (bare.outer.lr, bare.outer.momentum) == (Decimal("0.7"), Decimal("0.9"))


def test_unknown_preset() -> None:
    with pytest.raises(ValueError, match="unknown preset"):
        preset("huge")


def test_tiny_preset_loss_goes_down(load_dataset) -> None:
    spec = preset("tiny")
    dataset = load_dataset(spec.data)
    stepper = Stepper(spec)
    before = validation_loss(stepper.model, dataset, windows=128)
    run_id = spec.run_id()
    losses = [stepper.step(*dataset.batch(run_id, genesis_seed(run_id), HOST, t, spec.train.batch_size))
              for t in range(80)]
    after = validation_loss(stepper.model, dataset, windows=128)
    assert before > 5.0 and after < 3.0  # below the 3.32 nats/byte of a unigram model
    assert sum(losses[-10:]) / 10 < 3.0 < sum(losses[:10]) / 10


def _parameters(spec: RunSpec) -> int:
    return sum(math.prod(shape) for shape in parameter_shapes(spec).values())


def test_small_preset_is_20_to_100_times_demo_and_a_picker_replays_under_2_percent() -> None:
    small, demo = preset("small"), preset("demo")
    assert 20 <= _parameters(small) / _parameters(demo) <= 100
    # One picker (two validators of equal stake) replays k + 1 = 3 of S segments.
    assert replay_share(small, 1) == 3 / 200
    assert replay_share(preset("gpt124m"), 1) == 3 / 160
    # Every picker replays its k picks and the last segment: the share grows with the committee.
    assert replay_share(small, 19) == 19 * 3 / 200
    assert replay_share(demo, 2) == 2 * 3 / 5
    # Picks are distinct among the first S - 1 segments: at S = 2 a picker replays both.
    assert replay_share(demo.with_changes(train={"inner_steps": 20, "segment_steps": 10}), 1) == 1.0
    assert replay_share(demo.with_changes(verification={"enabled": False, "validators_r": 0},
                                          phases={"min_validators": 0}), 19) == 0.0


def test_gpu_preset_has_gpt2_small_size_and_a_long_context() -> None:
    spec = preset("gpt124m")
    assert 115e6 <= _parameters(spec) <= 135e6
    assert spec.data.seq_len >= 512


@pytest.mark.slow
def test_gpu_preset_takes_one_step_on_cpu() -> None:
    """The 127 M-parameter model builds and trains one step on the CPU (1 row of 64 tokens: the
    point is that the preset's model and optimizer work, not its speed). About 2 GB of memory."""
    spec = preset("gpt124m")
    stepper = Stepper(spec)
    before = {n: p.detach().clone() for n, p in list(stepper.named.items())[:3]}
    x = torch.randint(0, 256, (1, 64), generator=torch.Generator().manual_seed(0))
    loss = stepper.step(x, torch.roll(x, -1, 1))
    assert math.isfinite(loss) and 5.0 < loss < 6.5  # ~ln 256 = 5.55 at θ_0
    assert stepper.step_count == 1
    assert all(not torch.equal(before[n], stepper.named[n]) for n in before)
