"""The canonical micro-batch sum: one tree, however the micro-batches are split among processes."""

from __future__ import annotations

import pytest
import torch

from trainer.reduction import TreeSum, tree_split, tree_sum


def _parts(n: int) -> list[torch.Tensor]:
    # Values of very different magnitudes, so that a different order of additions changes bits.
    g = torch.Generator().manual_seed(n)
    return [torch.randn(257, generator=g) * 10.0 ** float(torch.randint(-6, 7, (1,), generator=g)) for _ in range(n)]


def test_split_is_the_largest_power_of_two_below() -> None:
    assert [tree_split(n) for n in (2, 3, 4, 5, 7, 8, 9, 12)] == [1, 2, 2, 4, 4, 4, 8, 8]
    with pytest.raises(ValueError):
        tree_split(1)
    with pytest.raises(ValueError, match="nothing"):
        tree_sum([])


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 6, 7, 8, 12, 16])
def test_streamed_sum_is_the_tree_sum(m: int) -> None:
    parts = _parts(m)
    acc = TreeSum()
    for p in parts:
        acc.add([p.clone()])
    assert torch.equal(acc.result()[0], tree_sum(parts))


@pytest.mark.parametrize(("world", "per_rank"), [(2, 1), (4, 1), (2, 2), (2, 4), (4, 2), (3, 4), (6, 2)])
def test_rank_blocks_then_ranks_give_the_one_process_bits(world: int, per_rank: int) -> None:
    # An island of `world` ranks each summing its aligned block of `per_rank` (a power of two)
    # micro-batches, then the block sums across ranks, adds exactly what one process does.
    parts = _parts(world * per_rank)
    blocks = [tree_sum(parts[r * per_rank:(r + 1) * per_rank]) for r in range(world)]
    assert torch.equal(tree_sum(blocks), tree_sum(parts))


def test_the_order_matters() -> None:
    # Why the order is fixed: a left-to-right sum of the same parts differs in its bits.
    parts = _parts(8)
    sequential = parts[0].clone()
    for p in parts[1:]:
        sequential += p
    assert not torch.equal(sequential, tree_sum(parts))
