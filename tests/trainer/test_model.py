"""The model resolver: deterministic θ_0 from the seed, user factories, clear errors."""

from __future__ import annotations

import pytest
import torch
from suite_env import small_spec

from trainer.model import GPT, build_model, parameter_shapes
from trainer.step import Stepper


def _params(model) -> dict[str, torch.Tensor]:
    return {n: p.detach() for n, p in model.named_parameters()}


def test_initialization_is_a_function_of_the_seed() -> None:
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a, b = _params(build_model(small_spec())), _params(build_model(small_spec()))
    assert torch.equal(torch.get_rng_state(), before)  # the caller's RNG is untouched
    assert all(torch.equal(a[n], b[n]) for n in a)
    c = _params(build_model(small_spec(train={"seed": 1})))
    assert not torch.equal(a["tok.weight"], c["tok.weight"])


def test_gpt_shapes_and_causality() -> None:
    spec = small_spec()
    model = build_model(spec)
    assert isinstance(model, GPT)
    assert {n: p.shape for n, p in model.named_parameters()} == parameter_shapes(spec)
    x = torch.randint(0, 256, (2, 64))
    logits = model(x)
    assert logits.shape == (2, 64, 256)
    x2 = x.clone()
    x2[:, 40:] = (x2[:, 40:] + 1) % 256  # changing the future must not change the past
    assert torch.equal(model(x2)[:, :40], logits[:, :40])
    with pytest.raises(ValueError, match="exceeds the model's block_size"):
        model(torch.zeros(1, 65, dtype=torch.int64))


def test_attention_has_no_key_bias(dataset, ctx) -> None:
    # A key bias has an exactly-zero gradient (softmax ignores a constant added to all scores of a
    # query); its rounding noise was most of the honest replay error. Queries and values keep theirs.
    model = build_model(small_spec())
    names = set(dict(model.named_parameters()))
    assert "blocks.0.attn.qkv.bias" not in names and model.blocks[0].attn.qkv.bias is None
    assert {"blocks.0.attn.q_bias", "blocks.0.attn.v_bias"} <= names
    x, y = dataset.batch(ctx.run_id, ctx.prev_epoch_seed, ctx.host, 0, 8)
    logits = model(x)
    torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y.reshape(-1)).backward()
    attn = model.blocks[0].attn
    assert attn.q_bias.grad.abs().max() > 0 and attn.v_bias.grad.abs().max() > 0


def test_a_user_factory_is_resolved_and_trains(dataset, ctx) -> None:
    spec = small_spec(model={"factory": "custom_models:bigram", "params": {"vocab": 256}})
    stepper = Stepper(spec)
    assert list(stepper.named) == ["table.weight"]
    x, y = dataset.batch(ctx.run_id, ctx.prev_epoch_seed, ctx.host, 0, 8)
    first = stepper.step(x, y)
    for _ in range(5):
        last = stepper.step(x, y)
    assert last < first


@pytest.mark.parametrize("model, message", [
    ({"factory": "custom_models:missing"}, "cannot be imported"),
    ({"factory": "no_such_module:build"}, "cannot be imported"),
    ({"factory": "custom_models:not_a_module", "params": {}}, "not an nn.Module"),
    ({"params": {"n_layer": 1, "n_head": 3, "d_model": 64, "block_size": 64}}, "multiple of n_head"),
    ({"params": {"n_layer": 1, "n_head": 4, "d_model": 64, "block_size": 32}}, "exceeds the model's block_size"),
    ({"params": {"n_layer": 1, "n_head": 4, "d_model": 64, "block_size": 64, "dropout": "1.5"}}, "dropout"),
])
def test_bad_models_are_refused_clearly(model, message) -> None:
    with pytest.raises(ValueError, match=message):
        build_model(small_spec(model=model))
