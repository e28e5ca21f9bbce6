"""Serving attacks: a host that commits work and then does not serve it, serves it to one reader only,
or serves it too slowly to be read in time (``slow_drip``).

A validator that cannot fetch what a challenge needs votes ``unavailable``. That vote never
slashes anyone by itself: it sends the challenge to a dispute committee, and a host unavailable
to a majority of the committee is slashed as unavailable (``docs/contract.md``). So withholding
saves the host nothing, and serving one validator while refusing the others (``selective_serve``)
does not turn a failed replay into a tie.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Literal, TypeVar, get_args

import torch

from protocol.rules.merkle import MerkleProof
from protocol.rules.spec import RunSpec
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, UntrustedJson
from trainer.data import Dataset
from trainer.inner import EpochContext, EpochResult, StepCallback
from verifier.adversaries.base import Adversary
from verifier.adversaries.work import Lazy

T = TypeVar("T")

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


class DripSource(ArtifactSource):
    """Serves what ``inner`` serves, ``chunk_bytes`` at a time, ``every_s`` seconds per chunk (a JSON
    answer costs one chunk): a slow-drip host, whose each answer arrives in the end but slower
    than any reader can wait for. Over HTTP the same host answers ``200, Content-Length N`` and then
    one byte every few seconds; without HTTP (``simulate``) the time is spent per chunk here, and
    the reader's budget cuts it as the HTTP client's deadline would."""

    def __init__(self, inner: ArtifactSource, every_s: float, chunk_bytes: int = 4096) -> None:
        self.inner, self.every, self.chunk = inner, every_s, chunk_bytes

    def _drip(self, chunks: Iterable[bytes | object]) -> Iterator[bytes | object]:
        for piece in chunks:
            if not isinstance(piece, (bytes, bytearray, memoryview)):
                yield piece
                continue
            for i in range(0, len(piece), self.chunk):
                time.sleep(self.every)
                yield bytes(piece[i:i + self.chunk])

    def _one(self, value: T) -> T:
        time.sleep(self.every)
        return value

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return b"".join(bytes(p) for p in self._drip(self.inner.checkpoint_chunks(epoch, leaf)))  # type: ignore[arg-type]

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes | object]:
        return self._drip(self.inner.checkpoint_chunks(epoch, leaf))

    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        return self._one(self.inner.proof(epoch, leaf))

    def delta(self, epoch: int) -> bytes:
        return b"".join(bytes(p) for p in self._drip(self.inner.delta_chunks(epoch)))  # type: ignore[arg-type]

    def delta_chunks(self, epoch: int) -> Iterable[bytes | object]:
        return self._drip(self.inner.delta_chunks(epoch))

    def losses(self, epoch: int) -> list[int] | UntrustedJson:
        return self._one(self.inner.losses(epoch))

    def global_state(self, model_hash: str) -> bytes:
        return self.inner.global_state(model_hash)


class SlowDrip(Adversary):
    """Trains honestly and commits, then serves its epochs one 4 KiB chunk every ``every`` seconds
    (:class:`DripSource`): it hopes to hold its validators until their window ends. Each reader
    gives a host a time budget and fetches hosts in parallel (``node.validator``), so the drip is
    cut, judged ``unavailable`` by the first round and the dispute committee, and slashed."""

    name = "slow_drip"
    PARAMS = ("every",)

    def __init__(self, every: float = 0.05, seed: int = 0) -> None:
        super().__init__(seed)
        if not every > 0:
            raise ValueError("every must be positive (seconds per chunk)")
        self.every = float(every)

    def train_epoch(self, spec: RunSpec, dataset: Dataset, ctx: EpochContext,
                    start_params: Mapping[str, torch.Tensor], root: Path,
                    on_step: StepCallback | None = None) -> EpochResult:
        result = super().train_epoch(spec, dataset, ctx, start_params, root, on_step)
        self.faked[ctx.epoch] = list(range(spec.train.segments))  # nothing served in time
        return result

    def serve(self, source: ArtifactSource) -> ArtifactSource:
        return DripSource(source, self.every)
