"""The live leaf interval: a host stores an open epoch as densely as half its free disk allows,
never less densely than the K it keeps, and only at divisors of K."""

from __future__ import annotations

import pytest

from trainer.leaf_budget import leaf_bytes, live_leaf_every, stored_leaves


def test_stored_leaves_counts_leaf_0_the_multiples_of_k_and_the_last_two() -> None:
    assert stored_leaves(8, 1) == 9
    assert stored_leaves(8, 4) == 4  # 0, 4, 7, 8
    assert stored_leaves(200, 4) == 52  # small: 0, 4, …, 196 (50), 199, 200
    with pytest.raises(ValueError):
        stored_leaves(0, 4)


def test_every_leaf_where_half_the_free_disk_holds_the_epoch() -> None:
    leaf = 40 * 10**6  # a `small` leaf
    assert live_leaf_every(200, 4, leaf, free_bytes=2 * 201 * leaf) == 1
    # Less free disk: the next divisor of K that fits, then K itself however little is free.
    assert live_leaf_every(200, 4, leaf, free_bytes=2 * 201 * leaf - 1) == 2
    assert live_leaf_every(200, 4, leaf, free_bytes=2 * stored_leaves(200, 2) * leaf - 1) == 4
    assert live_leaf_every(200, 4, leaf, free_bytes=0) == 4
    # Only divisors: at K = 6 the candidates are 1, 2 and 3, never 4 or 5.
    assert live_leaf_every(200, 6, leaf, free_bytes=2 * stored_leaves(200, 3) * leaf) == 3
    assert live_leaf_every(200, 6, leaf, free_bytes=2 * stored_leaves(200, 3) * leaf - 1) == 6
    assert live_leaf_every(200, 1, leaf, free_bytes=0) == 1  # K = 1 stores every leaf anyway
    with pytest.raises(ValueError):
        live_leaf_every(200, 4, -1, 0)


def test_a_leaf_is_three_float32_tensors_per_parameter() -> None:
    assert leaf_bytes({"w": (3, 4), "b": (4,)}) == 3 * 4 * 16
