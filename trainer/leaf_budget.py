"""How densely a host stores the leaves of an epoch that can still be challenged.

A host keeps leaf 0, every ``K``-th leaf and the last two in full (:func:`stored_in_full`, what
:meth:`~trainer.epoch_store.EpochStore.stored` asks); a challenged leaf in between is recomputed
from the nearest stored one (:mod:`trainer.recompute`), on the cores that train the next epoch. With
more validators a host has more pickers and so more challenges (docs/scaling.md, "What the stake
guarantee costs in replays"): at eight validators of equal stake and ``K`` = 4 the recomputation
took 7–8 % of a `small` host's epoch.

So a host stores its epoch *in flight* denser than it keeps it: every leaf while the disk allows
(the *live* interval, a divisor of ``K``), and once the chain has closed the epoch (nothing can ask
for its leaves any more) it thins the epoch to ``K``. What stays on disk over many epochs is what
``K`` always kept; what an epoch in flight costs is its ``S + 1`` leaves for as long as it is open.

Pure functions: the node reads the free space and the leaf size and asks :func:`live_leaf_every`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from math import prod

DISK_SHARE = 0.5
"""The share of the free disk one epoch's live leaves may take: what a host stores beyond ``K``
must leave the other half free (for the epoch settling beside it, Δs, global states and the rest)."""

LEAF_TENSORS = 3
"""Tensors per parameter in a leaf: the parameter and AdamW's two moments (Muon keeps fewer, so
the estimate errs on the side of storing less)."""


def stored_in_full(segments: int, leaf: int, full_leaf_every: int) -> bool:
    """Whether leaf ``leaf`` is kept in full at interval ``K``: leaf 0, every multiple of ``K`` and
    the last two (the last segment is challenged in every epoch: serving it costs no recomputation)."""
    return leaf % full_leaf_every == 0 or leaf >= segments - 1


def stored_leaves(segments: int, full_leaf_every: int) -> int:
    """How many of an epoch's ``segments + 1`` leaves are stored in full at interval ``K``."""
    if segments < 1 or full_leaf_every < 1:
        raise ValueError("segments and full_leaf_every must be >= 1")
    return sum(stored_in_full(segments, leaf, full_leaf_every) for leaf in range(segments + 1))


def leaf_bytes(shapes: Mapping[str, Iterable[int]], bytes_per_value: int = 4) -> int:
    """An estimate of one leaf's size on disk: ``LEAF_TENSORS`` float32 tensors per parameter."""
    return LEAF_TENSORS * bytes_per_value * sum(prod(shape) for shape in shapes.values())


def live_leaf_every(segments: int, full_leaf_every: int, leaf_size: int, free_bytes: int,
                    share: float = DISK_SHARE) -> int:
    """The live interval for an epoch about to train: the smallest divisor ``d`` of ``K`` whose
    ``stored_leaves(S, d)`` leaves take at most ``share`` of the free disk, else ``K`` itself (a
    disk too small for even that stores no less than the operator asked).

    A divisor, so that every leaf ``K`` keeps is among the leaves stored live: thinning to ``K``
    after the epoch closed deletes leaves and never needs one recomputed.
    """
    if leaf_size < 0 or free_bytes < 0 or not 0 < share <= 1:
        raise ValueError("leaf_size and free_bytes must be >= 0 and share in (0, 1]")
    budget = share * free_bytes
    for d in range(1, full_leaf_every):
        if full_leaf_every % d == 0 and stored_leaves(segments, d) * leaf_size <= budget:
            return d
    return full_leaf_every
