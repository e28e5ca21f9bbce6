"""Traps: segments a host deliberately perturbs a little and declares (issue 27, ``docs/contract.md``).

Every honest host traps: in each epoch, with the spec's ``verification.trap_probability``, it
perturbs one segment's end leaf, drawn by :func:`draw` from a secret only it holds (derived from
its chain key), the run and the epoch. Nobody else can predict a host's traps, so neither chain
history nor public reports tell which hosts will trap next. A trap moves the segment's largest
parameter tensor by :func:`trap_size` of its distance denominator (:func:`perturb`), so an honest
replay measures a distance inside the trap window ``[tau, trap_max_distance]``; training goes on
from the perturbed leaf.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import torch

from protocol.rules.spec import RunSpec
from trainer.step import TrainState

_DOMAIN = b"veriloco/trap-draw/1"


@dataclass(frozen=True)
class Traps:
    """What a host traps in an epoch: the segments whose end leaf it perturbs, and the seed of the
    perturbations' directions (both fixed by its secret, so a resumed epoch traps the same way)."""

    segments: tuple[int, ...] = ()
    seed: int = 0
    floor: float = 0.0
    """The least distance denominator of a parameter tensor over one segment (the verifier's
    ``max(param_floor, EPSILON)``, which the trainer cannot import)."""


def draw(secret: bytes, run_id: bytes, epoch: int, segments: int, probability: float, floor: float) -> Traps:
    """The host's traps of ``epoch``: with ``probability``, one segment among ``segments``; a
    deterministic function of the host-only ``secret``, the run and the epoch (``floor``: :attr:`Traps.floor`)."""
    digest = hashlib.sha256(_DOMAIN + secret + run_id + epoch.to_bytes(8, "big")).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    seed = int.from_bytes(digest[16:24], "big") >> 1
    if segments < 1 or u >= probability:
        return Traps((), seed, floor)
    return Traps((int.from_bytes(digest[8:16], "big") % segments,), seed, floor)


def trap_size(spec: RunSpec) -> float:
    """A trap's relative size: the geometric middle of the window ``[tau, trap_max_distance]``."""
    ver = spec.verification
    return math.sqrt(float(ver.tau) * float(ver.trap_max_distance))


def perturb(spec: RunSpec, start: TrainState, end: TrainState, seed: int, floor: float) -> TrainState:
    """``end`` with its largest parameter tensor moved, in a direction drawn from ``seed``, by
    :func:`trap_size` times that tensor's distance denominator (its update from ``start``, at least
    ``floor``, the verifier's): an honest replay of the segment lands inside the trap window."""
    params = {n: t.clone() for n, t in end.params.items()}
    name = max(params, key=lambda n: params[n].numel())
    update = float((params[name].double() - start.params[name].double()).norm())
    scale = max(update, floor)
    direction = torch.randn(params[name].shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    step = direction / direction.norm() * scale * trap_size(spec)
    params[name] = (params[name].double() + step).to(params[name].dtype)
    return TrainState(params, {n: t.clone() for n, t in end.exp_avg.items()},
                      {n: t.clone() for n, t in end.exp_avg_sq.items()}, end.step, end.rng_key)
