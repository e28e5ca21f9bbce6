"""Serving attacks: a host that commits honest work and then does not serve it.

A validator that cannot fetch what a challenge needs posts ``unavailable``, which the contract
settles like a failed replay: withholding saves the host nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Literal, get_args

import torch

from protocol.rules.merkle import MerkleProof
from protocol.rules.spec import RunSpec
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, UntrustedJson
from trainer.data import Dataset
from trainer.inner import EpochContext, EpochResult, StepCallback
from verifier.adversaries.base import Adversary

Withheld = Literal["all", "checkpoints", "proofs", "delta", "losses"]
"""What a withholding host refuses to serve."""


class WithheldSource(ArtifactSource):
    """Serves what ``inner`` serves, except ``what`` (everything for ``all``, global states included)."""

    def __init__(self, inner: ArtifactSource, what: Withheld) -> None:
        self.inner, self.what = inner, what

    def _refuse(self, kind: str) -> None:
        if self.what in ("all", kind):
            raise ArtifactUnavailable(f"withheld ({kind})")

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        self._refuse("checkpoints")
        return self.inner.checkpoint(epoch, leaf)

    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        self._refuse("proofs")
        return self.inner.proof(epoch, leaf)

    def delta(self, epoch: int) -> bytes:
        self._refuse("delta")
        return self.inner.delta(epoch)

    def losses(self, epoch: int) -> list[int] | UntrustedJson:
        self._refuse("losses")
        return self.inner.losses(epoch)

    def global_state(self, model_hash: str) -> bytes:
        self._refuse("global")
        return self.inner.global_state(model_hash)


class Withhold(Adversary):
    """Trains honestly and commits, then does not serve ``what``: ``all``, ``checkpoints``,
    ``proofs``, ``delta`` or ``losses``. The verdict is ``unavailable``."""

    name = "withhold"
    PARAMS = ("what",)

    def __init__(self, what: Withheld = "all", seed: int = 0) -> None:
        super().__init__(seed)
        if what not in get_args(Withheld):
            raise ValueError(f"what is one of {', '.join(get_args(Withheld))}")
        self.what = what

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        result = super().train_epoch(spec, dataset, ctx, start_params, root, on_step)
        self.faked[ctx.epoch] = ([spec.train.segments - 1] if self.what == "delta"
                                 else list(range(spec.train.segments)))
        return result

    def serve(self, source: ArtifactSource) -> ArtifactSource:
        return WithheldSource(source, self.what)
