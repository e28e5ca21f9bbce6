"""Tensor digests: equal for equal tensors whatever their layout; any change of name, dtype, shape or value
changes them."""

import pytest
import torch

from protocol.rules.hashing import Tag
from protocol.tensors.digest import tensors_digest


def test_layout_and_insertion_order_do_not_matter() -> None:
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    d1 = tensors_digest(Tag.CHECKPOINT, {"a": a, "b": torch.zeros(2)})
    d2 = tensors_digest(Tag.CHECKPOINT, {"b": torch.zeros(2), "a": a.t().contiguous().t()})
    assert d1 == d2


@pytest.mark.parametrize("other", [
    {"a": torch.arange(12, dtype=torch.float32).reshape(4, 3), "b": torch.zeros(2)},   # shape
    {"a": torch.arange(12, dtype=torch.float64).reshape(3, 4), "b": torch.zeros(2)},   # dtype
    {"c": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.zeros(2)},   # name
    {"a": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.tensor([0.0, -0.0])},  # bits
])
def test_any_change_changes_the_digest(other) -> None:
    base = {"a": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.zeros(2)}
    assert tensors_digest(Tag.CHECKPOINT, base) != tensors_digest(Tag.CHECKPOINT, other)


def test_domain_separation_and_scalars() -> None:
    t = {"x": torch.tensor(1.5)}
    assert tensors_digest(Tag.MODEL, t) != tensors_digest(Tag.CHECKPOINT, t)
    with pytest.raises(ValueError, match="canonical name"):
        tensors_digest(Tag.MODEL, {"z": torch.zeros(1, dtype=torch.complex64)})
