"""How a host behaves in an epoch: the honest way, or one of the adversaries that tests and benches use.

A host node (``node.host``) does the protocol's bookkeeping — joining, committing, revealing,
proposing — and asks its :class:`HostBehaviour` for the two things an adversary can fake: the
epoch of work it commits to, and what it serves. The honest behaviour trains with
:func:`trainer.inner.run_epoch` and serves everything; the adversary catalogue
(``verifier.adversaries``) fakes work or withholds artifacts through the same two methods, so an
adversary runs through exactly the code an honest host runs, except where it cheats.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from protocol.rules.spec import RunSpec
from trainer.artifacts import ArtifactSource
from trainer.data import Dataset
from trainer.inner import EpochContext, EpochResult, StepCallback, run_epoch
from trainer.snapshot import SnapshotStats
from trainer.step import Stepper


class HostBehaviour:
    """The honest host. Subclasses override :meth:`train_epoch` and/or :meth:`serve` to cheat.

    Attributes:
        name: a short label for reports (``honest``, ``lazy``, ``noise`` …).
        device: where the honest training computes (``cpu``, ``cuda``…); the host node sets it.
            Adversaries that build their own stepper compute on the CPU.
        full_leaf_every: ``K``: the honest training stores leaf 0, every ``K``-th leaf and the last
            in full, the others are recomputed when challenged (``trainer.recompute``); the host
            node sets it where :attr:`sparse_leaves` allows.
        sparse_leaves: whether this behaviour may store leaves sparsely (the adversary catalogue
            rewrites leaves after training and keeps every one).
    """

    name = "honest"
    device = "cpu"
    full_leaf_every = 1
    sparse_leaves = True
    snapshot: SnapshotStats | None = None
    """What the background leaf writer did in the last epoch trained (benchmarks read it)."""

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        """Produce the epoch's work in the host's epoch store under ``root`` (leaves, Δ, record) and its commitment.

        Must be resumable like :func:`run_epoch`: called again after a crash, it ends with the same
        commitment.
        """
        self.snapshot = SnapshotStats()
        result = run_epoch(spec, dataset, ctx, start_params, root, on_step=on_step,
                           stepper=Stepper(spec, device=self.device), full_leaf_every=self.full_leaf_every,
                           stats=self.snapshot)
        assert result is not None  # one process: always rank 0
        return result

    def serve(self, source: ArtifactSource) -> ArtifactSource:
        """What peers may read: the honest host serves its work directory as it is."""
        return source

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
