"""The spectral norm of a matrix for the Muon update bound (``verifier.measure.muon_spectral_excess``).

``‖M‖₂² = λ_max(G)`` for the Gram matrix ``G`` of ``M``'s smaller side (``M Mᵀ`` or ``Mᵀ M``):
one float64 matrix product and a symmetric eigenvalue solve of ``r × r`` (``r = min(A, B)``),
instead of the singular values of ``M`` itself (LAPACK's bidiagonalization, memory-bound: 1.3× to
14× slower per shape at ``gpt124m``, 4.3× over the check's 52 matrices on this CPU;
docs/benchmarks.md, "The Muon spectral check").

Direction: the bound rejects an update whose spectral norm exceeds the limit, so a value that
comes out too low would let a forged update through and one too high could fail an honest host.
The result is exact up to float64 rounding and then rounded **up** by a first-order bound on that
rounding: forming ``G`` in float64 errs by at most ``n·ε·‖|M|‖₂² ≤ n·ε·r·‖M‖₂²`` (``n = max(A,
B)``), the backward-stable eigenvalue solve by a small multiple of ``r·ε·‖G‖₂``; the padding
``(n + 64)·r·2⁻⁵²`` (7.3·10⁻¹⁰ relative at ``gpt124m``) covers both, so the value is never below
``‖M‖₂`` and above it by far less than any honest host's margin (honest Muon uses at most 0.71 of
the limit). Not an iterative estimate: power iteration converges from below (a Rayleigh quotient
never exceeds ``‖M‖₂``), which is the unsafe side for this check.
"""

from __future__ import annotations

import math

import torch

ROUNDING_PAD = 64
"""The eigenvalue solve's share of :func:`spectral_norm`'s upward padding, in units of ``r·2⁻⁵²``."""


def spectral_norm(matrix: torch.Tensor) -> float:
    """``‖matrix‖₂`` (its largest singular value), never below the exact value (module docstring);
    ``inf`` for a matrix with a non-finite entry, 0.0 for an empty one.

    Raises:
        ValueError: ``matrix`` is not 2-D.
    """
    if matrix.dim() != 2:
        raise ValueError(f"a spectral norm needs a matrix, got a tensor of shape {tuple(matrix.shape)}")
    if matrix.numel() == 0:
        return 0.0
    m = matrix.detach().to(torch.float64)
    if not bool(torch.isfinite(m).all()):
        return math.inf
    rows, cols = m.shape
    gram = m @ m.T if rows <= cols else m.T @ m
    if not bool(torch.isfinite(gram).all()):  # entries beyond 1e150: no honest update has them
        return math.inf
    top = max(float(torch.linalg.eigvalsh(gram)[-1]), 0.0)
    short, long = min(rows, cols), max(rows, cols)
    return math.sqrt(top * (1.0 + (long + ROUNDING_PAD) * short * 2.0 ** -52))
