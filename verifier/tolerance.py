"""The cross-hardware tolerance harness: honest epochs trained in one setup, replayed in another.

A validator's replay agrees with an honest host's leaves bit for bit only when both compute the
same way; otherwise the difference is rounding noise that training amplifies, and the verifier's
thresholds (``spec.verification``) must sit well above it. This module measures that noise for
pairs of setups — a device (``cpu``, ``cuda``), a thread count, an island of several processes,
and on a CPU the kernels torch and MKL dispatch to (forcing AVX2 or generic kernels on an AVX-512
machine computes as another kind of CPU would) — with the verifier's own measures
(:func:`verifier.measure.compare`), and reports each threshold's margin over the largest honest
value. ``bench/verifier_calibrate.py`` writes the tables that τ is calibrated from
(``docs/verification.md``); ``tests/verifier/test_tolerance.py`` runs a small CPU form in CI.

Each host setup trains the epoch once; each validator setup replays every segment from the host's
own leaves (as a validator would), so every pair is measured on all ``S`` segments. A setup with
forced kernels runs in a process of its own, started with the environment that selects them (torch
and MKL read it once, before their first operation).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.multiprocessing as mp

from protocol.rules.spec import RunSpec
from trainer.checkpoint import Checkpoint, load_checkpoint
from trainer.data import Dataset
from trainer.determinism import configure
from trainer.epoch_store import EpochStore
from trainer.inner import EpochContext, replay_segment, run_segment, start_checkpoint
from trainer.island import spawn_island
from trainer.outer import GlobalState
from trainer.step import Stepper, resolve_device
from verifier.measure import Comparison, compare

ISAS = ("default", "avx2", "avx512")
"""The CPU kernels torch can be made to dispatch to (``ATEN_CPU_CAPABILITY``)."""

MKL_BRANCHES = ("compatible",)
"""The MKL code branches that can be forced (``MKL_CBWR``; torch's MKL build supports this one)."""

MKL_INSTRUCTIONS = ("avx2",)
"""The instruction sets MKL can be limited to (``MKL_ENABLE_INSTRUCTIONS``), below AVX-512."""


@dataclass(frozen=True)
class Setup:
    """How a segment is computed.

    Attributes:
        device: ``cpu`` or ``cuda[:N]``.
        threads: torch intra-op threads (per process).
        ranks: processes of an island (gloo, CPU only); 1 for a single process. Validators always
            replay in one process.
        isa: the CPU kernels torch dispatches to, one of :data:`ISAS` (``avx2`` on an AVX-512
            machine computes as an AVX2-only CPU would); ``None`` for this machine's own.
        mkl: MKL's code branch, one of :data:`MKL_BRANCHES`; ``None`` for the trainer's mode
            (:data:`trainer.MKL_CBWR`: this CPU's own branch, strict).
        mkl_instructions: the instruction set MKL is limited to, one of :data:`MKL_INSTRUCTIONS`
            (``MKL_ENABLE_INSTRUCTIONS``; its mode stays strict); ``None`` for all the CPU has.
    """

    device: str = "cpu"
    threads: int = 1
    ranks: int = 1
    isa: str | None = None
    mkl: str | None = None
    mkl_instructions: str | None = None

    def __post_init__(self) -> None:
        resolve_device(self.device)
        if self.threads < 1 or self.ranks < 1:
            raise ValueError("threads and ranks must be >= 1")
        if self.ranks > 1 and torch.device(self.device).type != "cpu":
            raise ValueError("islands run on CPU only")
        if self.isa is not None and self.isa not in ISAS:
            raise ValueError(f"isa must be one of {', '.join(ISAS)}, not {self.isa!r}")
        if self.mkl is not None and self.mkl not in MKL_BRANCHES:
            raise ValueError(f"mkl must be one of {', '.join(MKL_BRANCHES)}, not {self.mkl!r}")
        if self.mkl_instructions is not None and self.mkl_instructions not in MKL_INSTRUCTIONS:
            raise ValueError(f"mkl_instructions must be one of {', '.join(MKL_INSTRUCTIONS)}, "
                             f"not {self.mkl_instructions!r}")
        if not self.native and torch.device(self.device).type != "cpu":
            raise ValueError("isa and mkl select CPU kernels")
        best = torch.backends.cpu.get_cpu_capability().lower()
        if self.isa is not None and ISAS.index(self.isa) > ISAS.index(best if best in ISAS else "default"):
            # torch would silently fall back to the kernels the CPU has, and the label would lie.
            raise ValueError(f"this CPU runs at most {best} kernels, not {self.isa}")

    @property
    def profile(self) -> tuple[str, str | None, str | None, str | None]:
        """What decides the bits of a step: the device type and the CPU kernels (not the threads or ranks)."""
        return torch.device(self.device).type, self.isa, self.mkl, self.mkl_instructions

    @property
    def native(self) -> bool:
        """Whether this setup computes with the kernels this process already uses."""
        return self.isa is None and self.mkl is None and self.mkl_instructions is None

    def environment(self) -> dict[str, str]:
        """The variables that select this setup's kernels in a new process."""
        env = {}
        if self.isa is not None:
            env["ATEN_CPU_CAPABILITY"] = self.isa
        if self.mkl is not None:
            env["MKL_CBWR"] = self.mkl.upper()
        if self.mkl_instructions is not None:
            env["MKL_ENABLE_INSTRUCTIONS"] = self.mkl_instructions.upper()
        return env

    @property
    def label(self) -> str:
        """``cpu/1t``, ``cpu/2t``, ``cpu/island 2×1t``, ``cpu[avx2]/1t``, ``cuda/1t`` …"""
        kernels = ",".join(k for k in (self.isa, self.mkl and f"mkl {self.mkl}",
                                        self.mkl_instructions and f"mkl isa {self.mkl_instructions}") if k)
        where = f"{self.device}{f'[{kernels}]' if kernels else ''}/"
        return where + (f"island {self.ranks}×{self.threads}t" if self.ranks > 1 else f"{self.threads}t")


@contextmanager
def _environment(env: Mapping[str, str]) -> Iterator[None]:
    # Processes started inside the block inherit `env`; this process's torch has already chosen.
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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

    @property
    def same_profile(self) -> bool:
        """Whether host and validator compute in one compute profile (they may differ in threads and ranks)."""
        return self.host.profile == self.validator.profile

    def summary(self) -> dict[str, float | str | bool]:
        """The largest value of every measure over the epoch's segments."""
        worst = max(self.segments, key=lambda c: c.distance)
        return {"host": self.host.label, "validator": self.validator.label, "segments": len(self.segments),
                "bitwise": self.bitwise, "same_profile": self.same_profile,
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
    if setup.ranks > 1 or not setup.native:
        # An island, or one process with other kernels: spawned, so it starts with the setup's
        # environment (a 1-rank island is a plain process training through the same loop).
        with tempfile.TemporaryDirectory(prefix="veriloco-tolerance-") as tmp, _environment(setup.environment()):
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
               setup: Setup, cache_dir: Path | None = None) -> list[Comparison]:
    """Replay every segment of ``leaves`` in ``setup`` (one process) and compare with the next leaf.

    ``cache_dir`` is the dataset cache a process started for forced kernels loads the dataset from.
    """
    if setup.ranks != 1:
        raise ValueError("a validator replays in one process")
    if not setup.native:
        with tempfile.TemporaryDirectory(prefix="veriloco-tolerance-") as tmp, _environment(setup.environment()):
            paths = []
            for i, leaf in enumerate(leaves):
                paths.append(Path(tmp) / f"{i}.safetensors")
                leaf.save(paths[-1])
            with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
                return pool.submit(_replay_in_child, spec.canonical(), cache_dir, ctx, paths, setup).result()
    configure(setup.threads, setup.device)
    stepper = Stepper(spec, device=setup.device)
    out = []
    for g in range(len(leaves) - 1):
        replayed = replay_segment(spec, dataset, ctx, leaves[g], stepper)
        out.append(compare(replayed.state, leaves[g + 1].state, leaves[g].state, spec.train,
                           replayed.losses, leaves[g + 1].losses))
    return out


def _replay_in_child(spec_json: bytes, cache_dir: Path | None, ctx: EpochContext, paths: list[Path],
                     setup: Setup) -> list[Comparison]:
    # The body of replay_all in a process started with the setup's kernels.
    spec = RunSpec.from_canonical(spec_json)
    leaves = [load_checkpoint(p, spec, i) for i, p in enumerate(paths)]
    native = Setup(setup.device, setup.threads)
    return replay_all(spec, Dataset.load(spec.data, cache_dir), ctx, leaves, native)


def measure_pairs(spec: RunSpec, dataset: Dataset, ctx: EpochContext, theta: Mapping[str, torch.Tensor],
                  hosts: Sequence[Setup], validators: Sequence[Setup],
                  cache_dir: Path | None = None) -> list[PairResult]:
    """Every host setup trains one honest epoch; every validator setup replays all its segments."""
    results = []
    for host in hosts:
        leaves = train_honest(spec, dataset, ctx, theta, host, cache_dir=cache_dir)
        for validator in validators:
            results.append(PairResult(host, validator, replay_all(spec, dataset, ctx, leaves, validator, cache_dir)))
    return results


def margins(results: Sequence[PairResult], spec: RunSpec, *, same_setup: bool = False,
            across_profiles: bool = False) -> dict[str, float]:
    """Each threshold divided by the largest honest value measured (``inf`` when that was 0).

    Args:
        results: measured pairs.
        spec: whose thresholds (``verification.tau``, ``moment_tolerance``, ``loss_tolerance``).
        same_setup: include pairs whose host and validator compute the same way (bitwise, so they
            say nothing about margins); left out by default.
        across_profiles: the margins over pairs of different compute profiles (what a run mixing
            kinds of CPU or devices would need) instead of those within one profile (what the
            run's thresholds are set for).
    """
    rows = [r.summary() for r in results
            if (same_setup or r.host != r.validator) and r.same_profile != across_profiles]
    ver = spec.verification

    def margin(threshold: float, key: str) -> float:
        worst = max((float(r[key]) for r in rows), default=0.0)
        return threshold / worst if worst > 0 else math.inf

    return {"tau": margin(float(ver.tau), "distance"),
            "moment_tolerance": margin(float(ver.moment_tolerance), "moment_error"),
            "loss_tolerance": margin(float(ver.loss_tolerance), "loss_diff")}
