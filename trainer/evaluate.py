"""Validation loss on a fixed, evenly spread set of windows of the validation split.

Deterministic (no sampling, no dropout), so two hosts that hold the same model report the same
number; hosts post it with their model proposal (``ModelProposal.val_loss_micro``).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from trainer.data import Dataset


def validation_starts(dataset: Dataset, windows: int) -> list[int]:
    """``windows`` start positions spread evenly over the validation split (fewer if it is short)."""
    span = len(dataset.val) - dataset.seq_len  # valid starts: 0 .. span - 1
    n = max(1, min(windows, span))
    return [i * span // n for i in range(n)]


@torch.no_grad()
def validation_loss(model: nn.Module, dataset: Dataset, windows: int = 512, batch_size: int = 64,
                    params: Mapping[str, torch.Tensor] | None = None) -> float:
    """Mean cross-entropy (nats per byte) of ``model`` over :func:`validation_starts`.

    Args:
        model: the model (put in eval mode for the measurement, restored afterwards).
        dataset: the run's dataset.
        windows: how many windows of ``seq_len`` bytes to score.
        batch_size: windows per forward pass (does not change the result beyond float rounding).
        params: parameters to load into ``model`` first (e.g. a global state's θ).
    """
    if params is not None:
        named = dict(model.named_parameters())
        for name, value in params.items():
            named[name].copy_(value)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    starts = validation_starts(dataset, windows)
    total = 0.0
    for i in range(0, len(starts), batch_size):
        x, y = (t.to(device) for t in dataset.windows(starts[i:i + batch_size], split="val"))
        logits = model(x)
        total += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum"))
    model.train(was_training)
    return total / (len(starts) * dataset.seq_len)
