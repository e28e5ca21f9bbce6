"""The outer Nesterov step: equal to a hand computation, bitwise deterministic, and the global state file."""

from __future__ import annotations

import pytest
import torch
from suite_env import small_spec

from protocol.rules.hashing import Tag
from protocol.rules.spec import OuterSpec
from protocol.tensors.digest import tensors_digest
from trainer.outer import GlobalState, decode_global, load_global, outer_step
from trainer.tensorfile import TensorFileError


def test_two_steps_by_hand() -> None:
    state = GlobalState({"w": torch.tensor([1.0, -2.0])}, {"w": torch.zeros(2)})
    outer = OuterSpec()  # lr 0.7, momentum 0.9, Nesterov
    s1 = outer_step(state, {"w": torch.tensor([0.5, 0.25])}, outer)
    # b1 = 0.9·0 + Δ = Δ; u = Δ + 0.9·b1 = 1.9·Δ; θ1 = θ − 0.7·1.9·Δ
    assert torch.allclose(s1.momentum["w"], torch.tensor([0.5, 0.25]))
    assert torch.allclose(s1.params["w"], torch.tensor([1.0 - 1.33 * 0.5, -2.0 - 1.33 * 0.25]))
    s2 = outer_step(s1, {"w": torch.tensor([-1.0, 0.0])}, outer)
    b2 = [0.9 * 0.5 - 1.0, 0.9 * 0.25]
    u2 = [-1.0 + 0.9 * b2[0], 0.0 + 0.9 * b2[1]]
    assert torch.allclose(s2.momentum["w"], torch.tensor(b2))
    assert torch.allclose(s2.params["w"], s1.params["w"] - 0.7 * torch.tensor(u2))
    plain = outer_step(s1, {"w": torch.tensor([-1.0, 0.0])}, OuterSpec(nesterov=False))
    assert torch.allclose(plain.params["w"], s1.params["w"] - 0.7 * torch.tensor(b2))
    assert torch.equal(state.params["w"], torch.tensor([1.0, -2.0]))  # inputs are not modified


def test_matches_torch_sgd_nesterov() -> None:
    g = torch.Generator().manual_seed(0)
    theta, deltas = torch.randn(1000, generator=g), [torch.randn(1000, generator=g) for _ in range(3)]
    p = torch.nn.Parameter(theta.clone())
    sgd = torch.optim.SGD([p], lr=0.7, momentum=0.9, nesterov=True)
    state = GlobalState({"w": theta.clone()}, {"w": torch.zeros(1000)})
    for d in deltas:
        p.grad = d.clone()
        sgd.step()
        state = outer_step(state, {"w": d}, OuterSpec())
    assert torch.allclose(state.params["w"], p.detach(), rtol=0, atol=1e-6)


def test_bitwise_deterministic_across_thread_counts(threads) -> None:
    g = torch.Generator().manual_seed(1)
    state = GlobalState({"a": torch.randn(1 << 20, generator=g), "b": torch.randn(33, 7, generator=g)},
                        {"a": torch.randn(1 << 20, generator=g), "b": torch.randn(33, 7, generator=g)})
    delta = {"a": torch.randn(1 << 20, generator=g), "b": torch.randn(33, 7, generator=g)}
    threads(1)
    one = outer_step(state, delta, OuterSpec()).hash()
    threads(2)
    assert outer_step(state, delta, OuterSpec()).hash() == one
    assert outer_step(state, delta, OuterSpec()).hash() == one


def test_mismatched_delta_is_refused() -> None:
    state = GlobalState({"w": torch.zeros(2)}, {"w": torch.zeros(2)})
    with pytest.raises(ValueError, match="parameter names"):
        outer_step(state, {"v": torch.zeros(2)}, OuterSpec())
    with pytest.raises(ValueError, match="has shape"):
        outer_step(state, {"w": torch.zeros(3)}, OuterSpec())


def test_global_state_file_and_hash(tmp_path) -> None:
    spec = small_spec()
    state = GlobalState.initial(spec)
    assert state.hash() == GlobalState.initial(spec).hash() == tensors_digest(Tag.MODEL, state.tensors())
    assert all(bool((m == 0).all()) for m in state.momentum.values())
    path = tmp_path / "global.safetensors"
    state.save(path)
    assert load_global(path, spec).hash() == state.hash()
    moved = outer_step(state, {n: torch.ones_like(p) for n, p in state.params.items()}, spec.outer)
    assert moved.hash() != state.hash()
    assert decode_global(moved.encode(), spec).hash() == moved.hash()
    with pytest.raises(TensorFileError, match="truncated"):
        decode_global(moved.encode()[:-1], spec)
