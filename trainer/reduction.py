"""The one order in which a step's micro-batch gradients are summed, whoever sums them.

Floating-point addition is not associative, so a sum of ``M`` gradients has a value only once its
order is fixed. The step fixes it as a pairwise tree over the micro-batch indices ``0 … M−1``: a
range of ``n > 1`` leaves splits at ``p``, the largest power of two below ``n``, into ``[0, p)``
and ``[p, n)``, each summed the same way, then ``left + right``. Every aligned block of ``A``
consecutive leaves with ``A`` a power of two dividing ``M`` is a subtree, so:

* one process accumulating all ``M`` micro-batches (a validator's replay, a host with gradient
  accumulation) sums them with :class:`TreeSum`;
* an island of ``W = M / A`` ranks, rank ``r`` owning micro-batches ``[r·A, (r+1)·A)``, sums its
  own block locally and then the ``W`` block sums across ranks with :func:`tree_sum`, which is the
  same tree's upper part.

Both give the same bits (``tests/trainer/test_reduction.py``), which is what lets a validator with
another island size replay a host's segment exactly. A collective's own reduction (NCCL's ring,
gloo's) orders its additions by rank and chunk, so the island never uses one for gradients
(:mod:`trainer.sharding`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def tree_split(n: int) -> int:
    """Where a range of ``n ≥ 2`` leaves splits: the largest power of two below ``n``."""
    if n < 2:
        raise ValueError(f"a range of {n} leaves does not split")
    return 1 << ((n - 1).bit_length() - 1)


def tree_sum(parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """``parts`` summed in the canonical tree order (a new tensor; the parts are left unchanged)."""
    if not parts:
        raise ValueError("nothing to sum")
    if len(parts) == 1:
        return parts[0].clone()
    p = tree_split(len(parts))
    return tree_sum(parts[:p]) + tree_sum(parts[p:])


class TreeSum:
    """:func:`tree_sum` of lists of tensors that arrive one at a time, holding at most
    ``⌈log2 M⌉ + 1`` of them.

    A binary counter: a new part merges with the pending partial sums of equal size (always
    ``older + newer``); :meth:`result` then folds what is pending from the right. For ``M`` a power
    of two this is the balanced tree; otherwise the pending sums are the power-of-two subtrees of
    :func:`tree_split`, largest first, and the right fold is that split applied recursively.
    """

    def __init__(self) -> None:
        self._pending: list[tuple[int, list[torch.Tensor]]] = []  # (leaves summed, tensors)

    def add(self, part: list[torch.Tensor]) -> None:
        """The next micro-batch's tensors (taken over: they may be summed into in place)."""
        size, acc = 1, part
        while self._pending and self._pending[-1][0] == size:
            _, older = self._pending.pop()
            for o, a in zip(older, acc, strict=True):
                o.add_(a)  # older + newer, in place in the older (same bits as a new tensor)
            size, acc = 2 * size, older
        self._pending.append((size, acc))

    def result(self) -> list[torch.Tensor]:
        """The sum of every part added."""
        if not self._pending:
            raise ValueError("nothing to sum")
        _, acc = self._pending.pop()
        while self._pending:
            _, older = self._pending.pop()
            for o, a in zip(older, acc, strict=True):
                o.add_(a)
            acc = older
        return acc
