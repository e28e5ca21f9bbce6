"""The model registry: deterministic θ_0 from the seed, only shipped architectures, clear errors."""

from __future__ import annotations

import math

import pytest
import torch
from suite_env import small_spec

from protocol.rules.models import ARCHITECTURES, check_model
from trainer.model import BUILDERS, GPT, build_model, parameter_shapes


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


def test_no_string_from_a_spec_is_ever_imported(tmp_path, monkeypatch) -> None:
    # The attack of issue 15: a spec naming a module and a function ran it on every node. Plant a
    # module that would leave a mark if imported, and name it every way a spec could.
    marker = tmp_path / "imported"
    (tmp_path / "planted.py").write_text(f"open({str(marker)!r}, 'w').write('x')\ndef build(**_): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for model in ({"architecture": "planted:build"}, {"architecture": "subprocess:run"},
                  {"factory": "planted:build"}, {"architecture": "gpt", "params": {"factory": "planted:build"}}):
        with pytest.raises(ValueError):
            build_model(small_spec(model=model))
    assert not marker.exists()


def test_every_architecture_has_a_builder_and_the_reverse() -> None:
    assert set(BUILDERS) == set(ARCHITECTURES) == {"gpt"}
    assert all(isinstance(check_model(name, {}), ARCHITECTURES[name]) for name in ARCHITECTURES)


def test_the_parameter_count_bounds_the_model() -> None:
    spec = small_spec()
    counted = check_model("gpt", dict(spec.model.params)).parameter_count()
    real = sum(math.prod(shape) for shape in parameter_shapes(spec).values())
    assert real <= counted <= real * 1.01
    # A spec that would make every reader allocate billions of parameters is refused on parsing.
    with pytest.raises(ValueError, match="parameters, more than"):
        small_spec(model={"params": {"n_layer": 256, "n_head": 4, "d_model": 16_384, "block_size": 64}})


@pytest.mark.parametrize("model, message", [
    ({"architecture": "custom_models:bigram"}, "unknown model architecture"),
    ({"architecture": "GPT"}, "unknown model architecture"),
    ({"params": {"n_layer": 1, "n_head": 4, "d_model": 64, "block_size": 64, "bias": 1}}, "Extra inputs"),
    ({"params": {"n_layer": True}}, "valid integer"),
    ({"params": {"n_layer": 0}}, "greater than or equal to 1"),
    ({"params": {"n_layer": 1, "n_head": 3, "d_model": 64, "block_size": 64}}, "multiple of n_head"),
    ({"params": {"n_layer": 1, "n_head": 4, "d_model": 64, "block_size": 32}}, "exceeds the model's block_size"),
    ({"params": {"n_layer": 1, "n_head": 4, "d_model": 64, "block_size": 64, "dropout": "1.5"}}, "dropout"),
])
def test_bad_models_are_refused_clearly(model, message) -> None:
    with pytest.raises(ValueError, match=message):
        build_model(small_spec(model=model))
