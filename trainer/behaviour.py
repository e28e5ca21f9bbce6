"""How a host behaves in an epoch: the honest way, or one of the adversaries that tests and benches use.

A host node (``node.host``) does the protocol's bookkeeping — joining, committing, revealing,
proposing — and asks its :class:`HostBehaviour` for what a host can choose: the epoch of work it
commits to, which of its segments it declares traps (an auditor), whether to reveal its beacon
secret, and what it serves to whom. The honest behaviour trains with
:func:`trainer.inner.run_epoch`, declares no trap, always reveals and serves everything to
everyone; the adversary catalogue (``verifier.adversaries``) fakes work, withholds or steers
through the same methods, so an adversary runs through exactly the code an honest host runs,
except where it cheats.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

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

    def serve_to(self, source: ArtifactSource, requester: str) -> ArtifactSource:
        """What ``requester`` (a signed reader's address) may read; the same for everyone by default."""
        return self.serve(source)

    def traps(self, epoch: int) -> list[int]:
        """The segments of ``epoch`` it deliberately corrupted and declares as traps, once
        :meth:`train_epoch` ran (its trap commitment hides them until the verdicts are in). The
        honest host declares none."""
        return []

    def reveal_choice(self, epoch: int,
                      challenged_if_last: Callable[[], list[int] | None]) -> Literal["reveal", "wait", "withhold"]:
        """Whether to reveal the beacon secret now. ``challenged_if_last()`` is what a host could
        know by reading the others' reveals: its challenged segments if it revealed last now, or
        None while others have not revealed. The honest host reveals at once."""
        return "reveal"

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
