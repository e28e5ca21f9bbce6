"""What a validator measures when it compares a replayed segment with the committed one.

All norms are L2 over every tensor of a group, accumulated in float64 in name order.

* :func:`relative_distances` — for each of the three state groups (parameters, AdamW first
  moments, AdamW second moments) ``‖X' − X‖ / max(‖X − X_start‖, ε)``: the replayed end state
  ``X'`` against the committed end state ``X``, relative to how far the committed segment moved
  that group. The verdict's distance is the largest of the three (``docs/verification.md``).
* :func:`expected_update` — the size of the update AdamW's learning rate allows over ``c`` steps,
  ``lr · √(c · N)`` (``N`` parameters): per step every coordinate moves by about ``lr`` (the
  normalized update ``m̂ / (√v̂ + ε)`` is of order one), and ``c`` steps whose directions are not
  aligned add up like a random walk. Honest segments land at 0.3–1.5 times this (measured).
* :func:`moment_bounds` — with gradient clipping at ``g_max`` every gradient has ``‖g‖ ≤ g_max``,
  so AdamW's moments obey ``‖m‖₂ ≤ g_max`` and ``Σ v ≤ g_max²`` (and ``v ≥ 0``) at every step, by
  induction over the EMA. A forged optimizer state (e.g. huge ``v`` to make replayed updates
  vanish) breaks these bounds.
* :func:`delta_check` — the committed Δ against ``θ_e − θ_end`` within the quantization bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from protocol.rules.spec import QuantizationSpec
from trainer.step import TrainState

EPSILON = 1e-12
"""Floor of a distance's denominator (an update of exactly zero makes any difference infinite)."""

MOMENT_SLACK = 1e-3
"""Relative slack on the moment bounds, for float32 rounding of the EMAs."""

_LEVELS = {"int8": 127, "int4": 7}
SCALE_SLACK = 2.0 ** -20
"""Relative slack on a block's scale against ``max|Δ| / L`` (both are one rounded division)."""
ERROR_SLACK = 1e-3
"""Relative slack on the half-step error bound of a quantized value."""

GROUPS = ("params", "exp_avg", "exp_avg_sq")


def _sq(tensors: Mapping[str, torch.Tensor]) -> float:
    return sum(float(tensors[n].double().pow(2).sum()) for n in sorted(tensors))


def _sq_diff(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    return sum(float((a[n].double() - b[n].double()).pow(2).sum()) for n in sorted(b))


def _safe(x: float) -> float:
    return x if math.isfinite(x) else float("inf")


def relative_distances(replayed: TrainState, committed: TrainState, start: TrainState) -> dict[str, float]:
    """``‖X' − X‖ / max(‖X − X_start‖, ε)`` for ``X`` in params, exp_avg, exp_avg_sq.

    Returns:
        ``{"params": …, "exp_avg": …, "exp_avg_sq": …}`` (``inf`` when anything is non-finite).
    """
    out = {}
    for group in GROUPS:
        x_replay, x, x_start = (getattr(s, group) for s in (replayed, committed, start))
        num = math.sqrt(_sq_diff(x_replay, x))
        den = max(math.sqrt(_sq_diff(x, x_start)), EPSILON)
        out[group] = _safe(num / den)
    return out


def update_norm(end: TrainState, start: TrainState) -> float:
    """``‖θ_end − θ_start‖₂``."""
    return math.sqrt(_sq_diff(end.params, start.params))


def parameter_count(state: TrainState) -> int:
    """``N``: the number of model parameters."""
    return sum(t.numel() for t in state.params.values())


def expected_update(lr: float, steps: int, n_params: int) -> float:
    """``lr · √(steps · N)``: the update size AdamW's learning rate implies for a segment."""
    return lr * math.sqrt(steps * n_params)


def moment_bounds(state: TrainState) -> dict[str, float]:
    """``‖m‖₂``, ``Σ v`` and ``min v`` of an AdamW state (compare with ``g_max`` and ``g_max²``)."""
    m_norm = math.sqrt(_sq(state.exp_avg))
    v_sum = sum(float(state.exp_avg_sq[n].double().sum()) for n in sorted(state.exp_avg_sq))
    v_min = min((float(t.min()) for t in state.exp_avg_sq.values() if t.numel()), default=0.0)
    return {"exp_avg_norm": _safe(m_norm), "exp_avg_sq_sum": _safe(v_sum), "exp_avg_sq_min": v_min}


def moments_plausible(bounds: Mapping[str, float], grad_clip: float) -> str | None:
    """``None`` when the moments satisfy the clipping bounds; otherwise why not."""
    if bounds["exp_avg_sq_min"] < 0:
        return f"a second moment is negative ({bounds['exp_avg_sq_min']:.3g})"
    if grad_clip <= 0:
        return None  # no clipping, no bound
    if not bounds["exp_avg_norm"] <= grad_clip * (1 + MOMENT_SLACK):
        return (f"‖exp_avg‖ = {bounds['exp_avg_norm']:.6g} exceeds the gradient clip {grad_clip:g} "
                f"(impossible for clipped gradients)")
    if not bounds["exp_avg_sq_sum"] <= grad_clip ** 2 * (1 + MOMENT_SLACK):
        return (f"Σ exp_avg_sq = {bounds['exp_avg_sq_sum']:.6g} exceeds the clip² {grad_clip ** 2:g} "
                f"(impossible for clipped gradients)")
    return None


def delta_check(dequantized: Mapping[str, torch.Tensor], payload: Mapping[str, torch.Tensor],
                truth: Mapping[str, torch.Tensor], quant: QuantizationSpec) -> dict[str, float]:
    """Compare a committed Δ with ``θ_e − θ_end``, block by block.

    For ``int8``/``int4`` every block's scale must be ``max|Δ_block| / L`` (within
    :data:`SCALE_SLACK`), and every dequantized value within half a quantization step of the true
    value (within :data:`ERROR_SLACK`): exactly what an honest quantizer guarantees. A loose scale
    (which would make any value "within half a step") or a value off by more is a violation.
    For ``none`` the values must agree to 2⁻²⁰ of the tensor's largest magnitude.

    Returns:
        ``relative_error`` (‖Δ̂ − Δ‖ / ‖Δ‖), ``violations`` (elements or scales outside their
        bound) and ``worst_excess`` (largest error divided by its allowed bound; ≤ 1 is honest).
    """
    violations = 0
    worst = 0.0
    num = den = 0.0
    for name in sorted(truth):
        x = truth[name].to(torch.float32).reshape(-1)
        dq = dequantized[name].to(torch.float32).reshape(-1)
        diff = (dq.double() - x.double()).abs()
        num += float(diff.pow(2).sum())
        den += float(x.double().pow(2).sum())
        if quant.scheme == "none":
            allowed = torch.full_like(diff, max(float(x.abs().max()) if x.numel() else 0.0, 1e-30) * 2.0 ** -20)
        else:
            bs, levels = quant.block_size, _LEVELS[quant.scheme]
            nb = -(-x.numel() // bs)
            blocks = torch.cat([x, x.new_zeros(nb * bs - x.numel())]).view(nb, bs)
            true_scale = blocks.abs().amax(dim=1).double() / levels
            scale = payload[f"scale/{name}"].double()
            bad = ~((scale - true_scale).abs() <= SCALE_SLACK * true_scale + 1e-38)
            violations += int(bad.sum())
            if bool(bad.any()):
                worst = max(worst, float(((scale - true_scale).abs() / (SCALE_SLACK * true_scale + 1e-38)).max()))
            allowed = (true_scale * (0.5 + ERROR_SLACK)).repeat_interleave(bs)[:x.numel()] + 1e-38
        ratio = diff / allowed
        violations += int((~(ratio <= 1)).sum())  # NaN counts as a violation
        if ratio.numel():
            worst = max(worst, float(ratio.max()))
    return {"relative_error": _safe(math.sqrt(num / den)) if den > 0 else (0.0 if num == 0 else float("inf")),
            "violations": float(violations), "worst_excess": _safe(worst)}
