"""Segment checkpoints: the committed leaves of an epoch, as safetensors.

Leaf ``i`` (``0 <= i <= S``) is the state after ``i · c`` inner steps: leaf 0 is the start state
θ_e with a fresh optimizer at step 0, leaf ``S`` the end of the epoch. A checkpoint holds, all as
tensors (so its leaf hash commits to every one of them):

====================  =====  ==========================================================
name                  dtype  meaning
====================  =====  ==========================================================
``param/<p>``         F32    model parameter ``p``
``adam.exp_avg/<p>``  F32    AdamW first moment of ``p``
``adam.exp_avg_sq/<p>`` F32  AdamW second moment of ``p``
``step``              I64    inner steps taken, ``i · c``
``rng_key``           I64    the epoch's RNG key (:func:`trainer.step.micro_seed`)
``micro_batches``     I64    ``M``: micro-batches per step (the island's split of each batch)
``losses``            F32    the ``c`` per-step losses since leaf ``i − 1`` (empty for leaf 0)
``ef/<p>``            F32    leaf ``S`` of a ``topk2`` run only: the error-feedback residual the
                             epoch started from (:mod:`trainer.compress`), which its Δ is computed
                             with; the last segment's validators check it and the Δ from this leaf
====================  =====  ==========================================================

The leaf hash is ``tensors_digest("checkpoint", tensors)``. The file's only metadata is
``format = veriloco/checkpoint-1``; nothing in it is trusted beyond that check.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from protocol.rules.hashing import Tag
from protocol.rules.spec import RunSpec
from protocol.tensors.digest import tensors_digest
from trainer.delta import carries_residual
from trainer.model import parameter_shapes
from trainer.step import TrainState
from trainer.tensorfile import Layout, TensorFileError, decode_tensors, encode_tensors, load_tensors, save_tensors
from trainer.tensorstream import TensorStream

FORMAT = {"format": "veriloco/checkpoint-1"}


class CheckpointError(TensorFileError):
    """A checkpoint is malformed, or inconsistent with the run spec or its position."""


@dataclass
class Checkpoint:
    """One leaf: a training state, the losses that led to it, and the island's micro-batch split."""

    state: TrainState
    losses: torch.Tensor  # float32 [c], or [0] for leaf 0
    micro_batches: int
    residual: dict[str, torch.Tensor] | None = None  # leaf S of a topk2 run: the residual carried in

    def tensors(self) -> dict[str, torch.Tensor]:
        """All named tensors of the checkpoint: what is saved and what the leaf hash covers."""
        carried = {f"ef/{n}": t for n, t in (self.residual or {}).items()}
        return {**self.state.tensors(), "losses": self.losses.to(torch.float32),
                "micro_batches": torch.tensor(self.micro_batches, dtype=torch.int64), **carried}

    def leaf_hash(self, threads: int = 1) -> bytes:
        """``tensors_digest("checkpoint", ...)``: the Merkle leaf of this checkpoint, hashed on ``threads``."""
        return tensors_digest(Tag.CHECKPOINT, self.tensors(), threads)

    def encode(self) -> bytes:
        """The safetensors bytes (what is stored and served)."""
        return encode_tensors(self.tensors(), FORMAT)

    def save(self, path: Path, *, drop_cache: bool = False) -> None:
        """Write atomically (temporary file, fsync, rename): the bytes of :meth:`encode`, streamed
        from the tensors without building them in memory (``drop_cache``: as
        :func:`trainer.tensorfile.atomic_file`'s)."""
        save_tensors(Path(path), self.tensors(), FORMAT, drop_cache=drop_cache)


def checkpoint_layout(spec: RunSpec, leaf: int) -> Layout:
    """The exact names, dtypes and shapes of leaf ``leaf`` of a run."""
    layout: dict[str, tuple[torch.dtype, tuple[int, ...]]] = {}
    for name, shape in parameter_shapes(spec).items():
        for prefix in ("param/", "adam.exp_avg/", "adam.exp_avg_sq/"):
            layout[prefix + name] = (torch.float32, tuple(shape))
    layout["step"] = (torch.int64, ())
    layout["rng_key"] = (torch.int64, ())
    layout["micro_batches"] = (torch.int64, ())
    layout["losses"] = (torch.float32, (spec.train.segment_steps if leaf > 0 else 0,))
    if carries_residual(spec.quantization) and leaf == spec.train.segments:
        for name, shape in parameter_shapes(spec).items():
            layout[f"ef/{name}"] = (torch.float32, tuple(shape))
    return layout


def _from_tensors(tensors: dict[str, torch.Tensor], spec: RunSpec, leaf: int, what: str) -> Checkpoint:
    step, key, micro = (int(tensors[n]) for n in ("step", "rng_key", "micro_batches"))
    if step != leaf * spec.train.segment_steps:
        raise CheckpointError(f"{what}: step {step}, but leaf {leaf} must be at step "
                              f"{leaf * spec.train.segment_steps}")
    if key < 0:
        raise CheckpointError(f"{what}: rng_key must be non-negative")
    if micro < 1 or spec.train.batch_size % micro:
        raise CheckpointError(f"{what}: micro_batches {micro} does not divide batch_size {spec.train.batch_size}")
    state = TrainState.from_tensors({k: v for k, v in tensors.items()
                                     if k not in ("losses", "micro_batches") and not k.startswith("ef/")})
    residual = {k[3:]: v for k, v in tensors.items() if k.startswith("ef/")}
    return Checkpoint(state, tensors["losses"], micro, residual or None)


def _check_leaf(spec: RunSpec, leaf: int) -> None:
    if not 0 <= leaf <= spec.train.segments:
        raise CheckpointError(f"leaf {leaf} is outside 0..{spec.train.segments}")


def decode_checkpoint(data: bytes, spec: RunSpec, leaf: int, what: str = "checkpoint") -> Checkpoint:
    """Validate and parse checkpoint bytes received from elsewhere (e.g. a host's artifact server).

    Args:
        data: safetensors bytes.
        spec: the run spec: the model's parameter shapes and ``segment_steps`` fix the layout.
        leaf: which leaf this must be (its step is ``leaf · c``).
        what: how to name it in errors.

    Raises:
        CheckpointError / TensorFileError: malformed, wrong layout, non-finite, or inconsistent.
    """
    _check_leaf(spec, leaf)
    try:
        tensors = decode_tensors(data, checkpoint_layout(spec, leaf), what, FORMAT)
    except CheckpointError:
        raise
    except TensorFileError as exc:
        raise CheckpointError(str(exc)) from None
    return _from_tensors(tensors, spec, leaf, what)


def stream_checkpoint(chunks: Iterable[object], spec: RunSpec, leaf: int,
                      what: str = "checkpoint") -> tuple[Checkpoint, bytes]:
    """:func:`decode_checkpoint` for bytes arriving in chunks, hashed as they arrive.

    Returns:
        The checkpoint and its leaf hash, computed from the bytes as they came (one pass, no copy
        of the whole file).

    Raises:
        CheckpointError: malformed, wrong layout, oversized, truncated, non-finite, or inconsistent.
    """
    _check_leaf(spec, leaf)
    stream = TensorStream(chunks, checkpoint_layout(spec, leaf), Tag.CHECKPOINT, what, FORMAT)
    try:
        tensors = stream.read_all()
    except CheckpointError:
        raise
    except TensorFileError as exc:
        raise CheckpointError(str(exc)) from None
    assert stream.digest is not None  # set by the finished iteration
    return _from_tensors(tensors, spec, leaf, what), stream.digest


def load_checkpoint(path: Path, spec: RunSpec, leaf: int) -> Checkpoint:
    """:func:`decode_checkpoint` for a file (its size is checked before it is read)."""
    _check_leaf(spec, leaf)
    try:
        tensors = load_tensors(path, checkpoint_layout(spec, leaf), FORMAT)
    except TensorFileError as exc:
        raise CheckpointError(str(exc)) from None
    return _from_tensors(tensors, spec, leaf, str(path))
