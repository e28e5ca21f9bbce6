"""Serving attacks: a host that commits work and then does not serve it, or serves it to one reader only.

A validator that cannot fetch what a challenge needs votes ``unavailable``. That vote never
slashes anyone by itself: it sends the challenge to a dispute committee, and a host unavailable
to a majority of the committee is slashed as unavailable (``docs/contract.md``). So withholding
saves the host nothing, and serving one validator while refusing the others (``selective_serve``)
does not turn a failed replay into a tie.
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
from verifier.adversaries.work import Lazy

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


class FirstReaderSource(ArtifactSource):
    """Serves each epoch's artifacts to the first reader that asks for any of them and to nobody
    else (global states to everyone).

    Args:
        inner: the host's artifacts.
        reader: who is asking now.
        served: epoch -> its one reader, shared across readers (kept for the last few epochs).
    """

    KEEP = 8

    def __init__(self, inner: ArtifactSource, reader: str, served: dict[int, str]) -> None:
        self.inner, self.reader, self.served = inner, reader, served

    def _check(self, epoch: int) -> None:
        if epoch not in self.served:
            self.served[epoch] = self.reader
            for old in sorted(self.served)[:-self.KEEP]:
                del self.served[old]
        if self.served[epoch] != self.reader:
            raise ArtifactUnavailable(f"epoch {epoch} is served to another reader only")

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        self._check(epoch)
        return self.inner.checkpoint(epoch, leaf)

    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        self._check(epoch)
        return self.inner.proof(epoch, leaf)

    def delta(self, epoch: int) -> bytes:
        self._check(epoch)
        return self.inner.delta(epoch)

    def losses(self, epoch: int) -> list[int] | UntrustedJson:
        self._check(epoch)
        return self.inner.losses(epoch)

    def global_state(self, model_hash: str) -> bytes:
        return self.inner.global_state(model_hash)


class SelectiveServe(Lazy):
    """Does no training on a fraction ``f`` of its segments (``lazy``'s copy; by default all of
    them) and serves each epoch's challenges to one validator only (the first that asks): that
    one votes ``fail``, every other one ``unavailable`` — the split that used to end a challenge
    in a tie. The dispute committee is refused too, so the host is slashed as unavailable."""

    name = "selective_serve"
    PARAMS: tuple[str, ...] = ("f",)

    def __init__(self, f: float = 1.0, seed: int = 0) -> None:
        super().__init__(f, "segment", "copy", seed)
        self._served: dict[int, str] = {}

    def serve(self, source: ArtifactSource) -> ArtifactSource:
        # A reader whose identity is not known is refused everything of an epoch already served.
        return FirstReaderSource(source, "", self._served)

    def serve_to(self, source: ArtifactSource, requester: str) -> ArtifactSource:
        return FirstReaderSource(source, requester, self._served)
