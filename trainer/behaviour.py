"""How a host behaves in an epoch: the honest way, or one of the adversaries that tests and benches use.

A host node (``node.host``) does the protocol's bookkeeping — joining, committing, revealing,
proposing — and asks its :class:`HostBehaviour` for the compute a host can choose: the epoch of
work it commits to, which of its segments it declares traps, and what it serves to whom. The
honest behaviour trains with :func:`trainer.inner.run_epoch`, sets the traps its node drew
(:mod:`trainer.trap`: with the spec's ``trap_probability``, from the host's own secret) and
declares them, and serves everything to everyone; the adversary catalogue (``verifier.adversaries``) fakes work,
withholds or steers through the same methods, so an adversary runs through exactly the code an
honest host runs, except where it cheats. What a host does on chain is the node's
(``node.adversaries`` wraps it for the adversaries that play the settlement game).

The host's own compute settings travel with the epoch it asks for (:class:`HostEpoch`: where the
steps run, how densely leaves are stored); they change no bit of what is committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from protocol.rules.spec import RunSpec
from trainer.artifacts import ArtifactSource
from trainer.data import Dataset
from trainer.inner import EpochContext, EpochResult, SegmentsDone, StepCallback, run_epoch
from trainer.snapshot import SnapshotStats
from trainer.step import Stepper
from trainer.trap import Traps


@dataclass(frozen=True)
class HostEpoch(EpochContext):
    """Whose epoch (:class:`~trainer.inner.EpochContext`) with the host node's compute settings.

    Attributes:
        device: where the honest training computes (``cpu``, ``cuda``…). Adversaries that build
            their own stepper compute on the CPU.
        full_leaf_every: ``K``: the honest training stores leaf 0, every ``K``-th leaf and the last
            in full, the others are recomputed when challenged (``trainer.recompute``), where the
            behaviour's :attr:`HostBehaviour.sparse_leaves` allows.
        carry_residual: ``topk2`` runs: the host's previous epoch was accepted, so it carries that
            epoch's error-feedback residual (:func:`trainer.inner.run_epoch`).
        stop: asked after each segment; True ends the epoch there, a partial epoch (the honest
            training only; see :func:`~trainer.inner.run_epoch`). It changes what is committed:
            fewer segments, never other bits.
        traps: the traps the host's node drew for this epoch (:func:`trainer.trap.draw`); the
            honest training sets them.
    """

    device: str = "cpu"
    full_leaf_every: int = 1
    carry_residual: bool = False
    stop: SegmentsDone | None = None
    traps: Traps = field(default_factory=Traps)


class HostBehaviour:
    """The honest host. Subclasses override :meth:`train_epoch` and/or :meth:`serve` to cheat.

    Attributes:
        name: a short label for reports (``honest``, ``lazy``, ``noise`` …).
        sparse_leaves: whether this behaviour may store leaves sparsely (the adversary catalogue
            rewrites leaves after training and keeps every one).
    """

    name = "honest"
    sparse_leaves = True
    snapshot: SnapshotStats | None = None
    """What the background leaf writer did in the last epoch trained (benchmarks read it)."""

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        """Produce the epoch's work in the host's epoch store under ``root`` (leaves, Δ, record) and its commitment.

        ``ctx`` may be a :class:`HostEpoch`, which says where to compute and how densely to store
        leaves (a plain context: on the CPU, every leaf). Must be resumable like :func:`run_epoch`:
        called again after a crash, it ends with the same commitment.
        """
        setup = ctx if isinstance(ctx, HostEpoch) else HostEpoch(ctx.run_id, ctx.epoch, ctx.host, ctx.prev_epoch_seed)
        self.snapshot = SnapshotStats()
        result = run_epoch(spec, dataset, ctx, start_params, root, on_step=on_step,
                           stepper=Stepper(spec, device=setup.device),
                           full_leaf_every=setup.full_leaf_every if self.sparse_leaves else 1, stats=self.snapshot,
                           carry_residual=setup.carry_residual, stop=setup.stop, traps=setup.traps)
        assert result is not None  # one process: always rank 0
        # A partial epoch declares only the traps among the segments it committed.
        self._trapped()[ctx.epoch] = [g for g in setup.traps.segments if g < result.commitment.segments]
        return result

    def _trapped(self) -> dict[int, list[int]]:
        # epoch -> the traps the honest training set (subclasses need not call an __init__)
        return self.__dict__.setdefault("_trapped_segments", {})

    def serve(self, source: ArtifactSource) -> ArtifactSource:
        """What peers may read: the honest host serves its work directory as it is."""
        return source

    def serve_to(self, source: ArtifactSource, requester: str) -> ArtifactSource:
        """What ``requester`` (a signed reader's address) may read; the same for everyone by default."""
        return self.serve(source)

    def traps(self, epoch: int) -> list[int]:
        """The segments of ``epoch`` it deliberately corrupted and declares as traps, once
        :meth:`train_epoch` ran (its trap commitment hides them until the verdicts are in): the
        ones the honest training set."""
        return list(self._trapped().get(epoch, []))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
