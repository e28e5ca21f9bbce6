"""The cross-hardware tolerance harness: honest epochs trained in one setup, replayed in another.

A validator's replay agrees with an honest host's leaves bit for bit only when both compute the
same way; otherwise the difference is rounding noise that training amplifies, and the verifier's
thresholds (``spec.verification``) must sit well above it. This module measures that noise for
pairs of setups — a device (``cpu``, ``cuda``), a thread count, and an island of several
processes — with the verifier's own measures (:func:`verifier.measure.compare`), and reports
each threshold's margin over the largest honest value. ``bench/verifier_calibrate.py`` writes the
table that τ is calibrated from (``docs/verification.md``); ``tests/verifier/test_tolerance.py``
runs a small CPU form in CI.

Each host setup trains the epoch once; each validator setup replays every segment from the host's
own leaves (as a validator would), so every pair is measured on all ``S`` segments.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, replay_segment, run_segment, start_checkpoint
from trainer.island import spawn_island
from trainer.outer import GlobalState
from trainer.step import Stepper, resolve_device
from verifier.measure import Comparison, compare


@dataclass(frozen=True)
class Setup:
    """How a segment is computed.

    Attributes:
        device: ``cpu`` or ``cuda[:N]``.
        threads: torch intra-op threads (per process).
        ranks: processes of an island (gloo, CPU only); 1 for a single process. Validators always
            replay in one process.
    """

    device: str = "cpu"
    threads: int = 1
    ranks: int = 1

    def __post_init__(self) -> None:
        resolve_device(self.device)
        if self.threads < 1 or self.ranks < 1:
            raise ValueError("threads and ranks must be >= 1")
        if self.ranks > 1 and torch.device(self.device).type != "cpu":
            raise ValueError("islands run on CPU only")

    @property
    def label(self) -> str:
        """``cpu/1t``, ``cpu/2t``, ``cpu/island 2×1t``, ``cuda/1t`` …"""
        where = f"{self.device}/"
        return where + (f"island {self.ranks}×{self.threads}t" if self.ranks > 1 else f"{self.threads}t")


@dataclass(frozen=True)
class PairResult:
    """An honest epoch trained in ``host`` and every segment replayed in ``validator``.

    Attributes:
        host: the host's setup.
        validator: the validator's setup.
        segments: the comparison of every segment.
    """

    host: Setup
    validator: Setup
    segments: list[Comparison] = field(default_factory=list)

    @property
    def bitwise(self) -> bool:
        """Whether every replay reproduced the committed leaf exactly."""
        return all(c.distance == 0 and c.moment_error == 0 and c.loss_diff == 0 for c in self.segments)

    def summary(self) -> dict[str, float | str | bool]:
        """The largest value of every measure over the epoch's segments."""
        worst = max(self.segments, key=lambda c: c.distance)
        return {"host": self.host.label, "validator": self.validator.label, "segments": len(self.segments),
                "bitwise": self.bitwise,
                "distance": worst.distance, "distance_worst": worst.worst_tensor[0],
                **{f"distance_{g}": max(c.groups[g] for c in self.segments) for g in worst.groups},
                "moment_error": max(c.moment_error for c in self.segments),
                "loss_diff": max(c.loss_diff for c in self.segments)}


def train_honest(spec: RunSpec, dataset: Dataset, ctx: EpochContext, theta: Mapping[str, torch.Tensor],
                 setup: Setup, root: Path | None = None, cache_dir: Path | None = None) -> list[Checkpoint]:
    """The ``S + 1`` leaves of an honest epoch from ``theta``, computed in ``setup``.

    Args:
        spec: the run spec.
        dataset: the run's dataset.
        ctx: whose epoch (the batches depend on it).
        theta: θ_e.
        setup: where to train.
        root: work directory for an island (a temporary one when omitted).
        cache_dir: dataset cache for an island's processes.
    """
    if setup.ranks > 1:
        with tempfile.TemporaryDirectory(prefix="veriloco-tolerance-") as tmp:
            base = Path(root) if root is not None else Path(tmp)
            zeros = {n: torch.zeros_like(t) for n, t in theta.items()}
            spawn_island(setup.ranks, spec, ctx, GlobalState(dict(theta), zeros), base, threads=setup.threads,
                         cache_dir=cache_dir)
            return EpochStore(base, ctx.run_id, ctx.host).read_leaves(spec, ctx.epoch)
    configure(setup.threads, setup.device)
    stepper = Stepper(spec, device=setup.device)
    leaves = [start_checkpoint(spec, theta, ctx.epoch)]
    stepper.load(leaves[0].state)
    for _ in range(spec.train.segments):
        leaves.append(run_segment(stepper, dataset, spec, ctx, 1))
    return leaves


def replay_all(spec: RunSpec, dataset: Dataset, ctx: EpochContext, leaves: Sequence[Checkpoint],
               setup: Setup) -> list[Comparison]:
    """Replay every segment of ``leaves`` in ``setup`` (one process) and compare with the next leaf."""
    if setup.ranks != 1:
        raise ValueError("a validator replays in one process")
    configure(setup.threads, setup.device)
    stepper = Stepper(spec, device=setup.device)
    out = []
    for g in range(len(leaves) - 1):
        replayed = replay_segment(spec, dataset, ctx, leaves[g], stepper)
        out.append(compare(replayed.state, leaves[g + 1].state, leaves[g].state, spec.train,
                           replayed.losses, leaves[g + 1].losses))
    return out


def measure_pairs(spec: RunSpec, dataset: Dataset, ctx: EpochContext, theta: Mapping[str, torch.Tensor],
                  hosts: Sequence[Setup], validators: Sequence[Setup],
                  cache_dir: Path | None = None) -> list[PairResult]:
    """Every host setup trains one honest epoch; every validator setup replays all its segments."""
    results = []
    for host in hosts:
        leaves = train_honest(spec, dataset, ctx, theta, host, cache_dir=cache_dir)
        for validator in validators:
            results.append(PairResult(host, validator, replay_all(spec, dataset, ctx, leaves, validator)))
    return results


def margins(results: Sequence[PairResult], spec: RunSpec, *, same_setup: bool = False) -> dict[str, float]:
    """Each threshold divided by the largest honest value measured (``inf`` when that was 0).

    Args:
        results: measured pairs.
        spec: whose thresholds (``verification.tau``, ``moment_tolerance``, ``loss_tolerance``).
        same_setup: include pairs whose host and validator compute the same way (bitwise, so they
            say nothing about margins); left out by default.
    """
    rows = [r.summary() for r in results if same_setup or r.host != r.validator]
    ver = spec.verification

    def margin(threshold: float, key: str) -> float:
        worst = max((float(r[key]) for r in rows), default=0.0)
        return threshold / worst if worst > 0 else math.inf

    return {"tau": margin(float(ver.tau), "distance"),
            "moment_tolerance": margin(float(ver.moment_tolerance), "moment_error"),
            "loss_tolerance": margin(float(ver.loss_tolerance), "loss_diff")}
