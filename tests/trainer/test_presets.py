"""The presets are complete, valid run specs, and the tiny one learns."""

from __future__ import annotations

import pytest
from suite_env import HOST

from protocol.rules.beacon import genesis_seed
from protocol.rules.spec import RunSpec
from trainer.evaluate import validation_loss
from trainer.presets import PRESETS, preset
from trainer.step import Stepper


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_canonical_run_specs(name) -> None:
    spec = preset(name)
    assert RunSpec.from_canonical(spec.canonical()) == spec
    assert spec.model.factory == "trainer.model:build_gpt" and spec.economics.denom == "inj"
    assert spec.train.inner_steps % spec.train.segment_steps == 0


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
