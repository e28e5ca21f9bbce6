"""The spectral norm the Muon bound checks (``verifier.spectral``): the exact largest singular value
rounded up, never below it (an estimate below would let a forged update through), in both
orientations, and no number at all for what is not a finite matrix."""

from __future__ import annotations

import math

import pytest
import torch

from verifier.spectral import spectral_norm


@pytest.mark.parametrize("shape", [(64, 256), (256, 64), (96, 96), (1, 40), (40, 1)])
def test_the_spectral_norm_is_the_largest_singular_value_rounded_up(shape) -> None:
    gen = torch.Generator().manual_seed(sum(shape))
    for scale in (1e-6, 1.0, 1e6):
        m = torch.randn(shape, generator=gen) * scale
        exact = float(torch.linalg.matrix_norm(m.double(), ord=2))
        value = spectral_norm(m)
        assert exact <= value <= exact * (1 + 1e-9)


def test_a_known_spectrum_is_recovered() -> None:
    # U diag(s) Vᵀ with orthonormal U, V: the norm is s's largest, however the others lie
    gen = torch.Generator().manual_seed(1)
    u, _ = torch.linalg.qr(torch.randn(128, 32, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(48, 32, generator=gen, dtype=torch.float64))
    s = torch.linspace(0.5, 3.0, 32, dtype=torch.float64)
    assert spectral_norm(u @ torch.diag(s) @ v.T) == pytest.approx(3.0, rel=1e-9, abs=0)
    # a rank-one update: every coordinate may be small while the spectral norm is large
    ones = torch.full((64, 256), 0.01, dtype=torch.float64)
    assert spectral_norm(ones) == pytest.approx(0.01 * math.sqrt(64 * 256), rel=1e-9)


def test_what_is_not_a_finite_matrix_gets_no_finite_norm() -> None:
    assert spectral_norm(torch.zeros(8, 16)) == 0.0
    assert spectral_norm(torch.zeros(0, 16)) == 0.0
    bad = torch.ones(8, 16)
    bad[3, 4] = float("nan")
    assert spectral_norm(bad) == math.inf
    bad[3, 4] = float("inf")
    assert spectral_norm(bad) == math.inf
    assert spectral_norm(torch.full((4, 4), 1e200, dtype=torch.float64)) == math.inf
    with pytest.raises(ValueError, match="needs a matrix"):
        spectral_norm(torch.ones(16))
