"""What a validator measures when it checks a segment: pure functions of tensors and the run spec.

Norms are L2, accumulated in float64 in name order. ``docs/verification.md`` says why each check
is sound and how its threshold was calibrated.

Replay (a replayed end state ``X'`` against the committed one ``X``, from the start state ``X_s``,
for ``X`` in the parameters, AdamW's first moments ``m`` and second moments ``v``):

* :func:`tensor_distances` — for every tensor ``n`` of every group, ``‖X'_n − X_n‖ / max(‖X_n −
  X_s,n‖, ε)``: the error relative to how far the committed segment moved that tensor (threshold
  ``tau``), so that no tensor can be forged under the average of the others. For the parameters
  the denominator is at least ``lr · √(c · PARAM_FLOOR_COORDINATES)`` (:data:`PARAM_FLOOR_COORDINATES`).
  :func:`relative_distances` is the same over all tensors of a group (reported; it is never larger
  than the largest tensor's).
* :func:`moment_errors` — every coordinate of the moments against the replay, relative to the scale
  at which it acts on the update, ``√v + ε``: ``|m' − m|`` and ``|√v' − √v|`` (threshold
  ``moment_tolerance``), so that no subset of coordinates can be forged under a tensor's norm.

Bounds that need no replay, derived from the run spec (no thresholds to calibrate):

* :func:`adam_step_bound` — AdamW's normalized step ``|m̂_t| / √v̂_t`` is at most ``A(t)`` for any
  gradients (Cauchy–Schwarz over the two EMAs, :func:`moment_ratio_bound`), so a coordinate moves
  by at most ``lr · A(t)`` per step besides weight decay; :func:`update_excess` checks a segment's
  or a whole epoch's committed change against the sum (the per-segment and the Δ bound).
* :func:`leaf_moment_check` — with gradient clipping at ``g_max``: ``‖m_t‖ ≤ (1 − β₁ᵗ) g_max``,
  ``Σ v_t ≤ (1 − β₂ᵗ) g_max²``, ``v ≥ 0``; and elementwise for any gradients
  ``|m_t| ≤ B(t) √v_t``. Forged optimizer state (huge ``v`` to make replays vanish, first moments
  of coordinates the data never touched) breaks them.
* :func:`expected_update` — the size ``lr · √(c · N)`` an honest segment's update has (the lower
  bound, ``min_update_ratio``).
* :func:`delta_check` — the committed Δ against ``θ_e − θ_end`` within the quantization bound.

Aggregation (every honest proposer alike, on the accepted Δs' bytes):

* :func:`delta_excess` — a Δ within the per-coordinate bound of ``H`` AdamW steps;
* :func:`peer_excess` — no tensor of a Δ more than :data:`DELTA_PEER_FACTOR` × the median of the
  accepted Δs' norms of that tensor (what no replay saw is bounded by what honest training moved);
* :func:`peer_clip` — every small tensor of a kept Δ scaled down to at most that factor × its own
  median (the pool of :func:`peer_excess` compares them together);
* :func:`within_peer_bound` — both, as every proposer applies them before aggregating.

Direction (measured, not a check): :func:`direction_cosines` — each Δ's cosine with the other Δs'
coordinate-wise median (the norms bound how far a Δ moves, not which way).

Segment movements (what a commitment of per-segment movements could bound; measured, not a check):

* :func:`segment_movements` — ``‖θ_{s+1,n} − θ_{s,n}‖`` per segment and tensor;
* :func:`triangle_slack` — ``Σ_s m_{s,n} / ‖Δ_n‖`` per tensor: how much farther than Δ the leaves
  travelled, the room a triangle-inequality check would leave.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from protocol.rules.spec import QuantizationSpec, TrainSpec
from trainer.peer_bound import (  # an aggregation rule (the proposers'), re-exported with the checks
    DELTA_PEER_FACTOR,  # noqa: F401
    DELTA_PEER_MIN,  # noqa: F401
    DIRECTION_MIN_PEERS,  # noqa: F401
    PEER_POOL_COORDINATES,
    SMALL_TENSORS,
    PeerBound,  # noqa: F401
    direction_cosines,  # noqa: F401
    peer_clip,  # noqa: F401
    peer_excess,  # noqa: F401
    tensor_norm,
    within_peer_bound,  # noqa: F401
)
from trainer.step import TrainState, decays, uses_muon
from verifier.spectral import spectral_norm

EPSILON = 1e-12
"""Floor of a distance's denominator (an update of exactly zero makes any difference infinite)."""

MOMENT_SLACK = 1e-3
"""Relative slack on the moment and update bounds, for float32 rounding of the EMAs and steps."""

MOMENT_ATOL = 1e-18
"""Absolute slack on ``|m| ≤ B √v``: below ~1e-19 a squared gradient underflows float32, so a
first moment may be non-zero where ``v`` is 0. A forged ``m`` this small moves a coordinate by at
most ``lr · 1e-18 / ε`` per step (``ε`` = AdamW's epsilon, 1e-8 or more)."""

MOMENT_FLOOR = 1e-3
"""The scale of the elementwise moment check is at least this fraction of the tensor's RMS of
``√v``. Without a floor a coordinate whose gradient happens to be near zero (a cancellation: its
rounding noise is large relative to itself) dominates the check; with it, such coordinates are
held to an error of ``moment_tolerance · MOMENT_FLOOR`` of their tensor's typical scale, and
:func:`leaf_moment_check` still bounds what they can do (``|m| ≤ B √v``)."""

PARAM_FLOOR_COORDINATES = 4096
"""A parameter tensor's distance is relative to at least the update of a block of this many
coordinates moving by ``lr`` a step (``lr · √(c · 4096)``, a d × d matrix of the presets). A
tensor of 64 coordinates (a LayerNorm gain or bias) otherwise answers for one coordinate's rounding
noise with a relative precision a large tensor averages away: measured, such tensors carried the
largest honest distances by up to 10× (docs/verification.md). What the floor lets a host do: move a
small tensor by ``tau · lr · √(c · 4096)`` in L2, about ``tau · lr · √c`` per coordinate."""

_LEVELS = {"int8": 127, "int4": 7}
SCALE_SLACK = 2.0 ** -20
"""Relative slack on a block's scale against ``max|Δ| / L`` (both are one rounded division)."""
ERROR_SLACK = 1e-3
"""Relative slack on the half-step error bound of a quantized value."""

NS_SPECTRAL_BOUND = 1.5
"""The largest singular value of Muon's Newton–Schulz output (five quintic iterations from an input
of Frobenius norm ≤ 1): ``sup p⁵ = 1.2024`` over ``[0, 1]`` in exact arithmetic for
``p(s) = 3.4445 s − 4.775 s³ + 2.0315 s⁵`` (measured in bfloat16: 1.2035); 1.5 leaves room for the
bfloat16 rounding. Every coordinate of a matrix is at most its spectral norm."""

GROUPS = ("params", "exp_avg", "exp_avg_sq")


def _sq(tensors: Mapping[str, torch.Tensor]) -> float:
    return sum(float(tensors[n].double().pow(2).sum()) for n in sorted(tensors))


def _sq_diff(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    return sum(float((a[n].double() - b[n].double()).pow(2).sum()) for n in sorted(b))


def _safe(x: float) -> float:
    return x if math.isfinite(x) else float("inf")


# -- replay distances ------------------------------------------------------------------------------


def relative_distances(replayed: TrainState, committed: TrainState, start: TrainState) -> dict[str, float]:
    """``‖X' − X‖ / max(‖X − X_start‖, ε)`` over all tensors, for ``X`` in params, exp_avg, exp_avg_sq.

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


def tensor_distances(replayed: TrainState, committed: TrainState, start: TrainState,
                     param_floor: float = 0.0) -> dict[str, float]:
    """The distance of :func:`relative_distances` for every tensor on its own.

    Args:
        replayed: the replayed end state.
        committed: the committed end state.
        start: the start state.
        param_floor: the least denominator of a parameter tensor (``lr · √(c · 4096)``, see
            :data:`PARAM_FLOOR_COORDINATES`; 0 for none).

    Returns:
        ``"<group>/<parameter name>"`` -> ``‖X'_n − X_n‖ / max(‖X_n − X_start,n‖, floor, ε)``.
    """
    out = {}
    for group in GROUPS:
        x_replay, x, x_start = (getattr(s, group) for s in (replayed, committed, start))
        floor = max(param_floor if group == "params" else 0.0, EPSILON)
        for name in sorted(x):
            num = float((x_replay[name].double() - x[name].double()).norm())
            den = max(float((x[name].double() - x_start[name].double()).norm()), floor)
            out[f"{group}/{name}"] = _safe(num / den)
    return out


def moment_errors(replayed: TrainState, committed: TrainState, eps: float,
                  train: TrainSpec | None = None) -> dict[str, float | str]:
    """Every coordinate of the replayed AdamW moments against the committed ones.

    The error of a coordinate is ``|m' − m| / s`` and ``|√v' − √v| / s`` with the scale
    ``s = max(√max(v, v'), MOMENT_FLOOR · RMS_n(√v)) + eps``: AdamW's step is ``m̂ / (√v̂ + eps)``,
    so these are the relative errors of the step's numerator and denominator. For a tensor Muon
    steps (``train`` given, :func:`trainer.step.uses_muon`), ``m`` is Muon's momentum and ``s`` the
    tensor's RMS of ``max(|m|, |m'|)``.

    Args:
        replayed: the replayed end state.
        committed: the committed end state.
        eps: AdamW's epsilon (the run spec's ``train.eps``).
        train: the run's training section (which tensors Muon steps); ``None``: all AdamW.

    Returns:
        ``exp_avg`` and ``exp_avg_sq``: the largest error of each; ``worst``: the tensor of the
        largest (``"<group>/<name>"``). ``inf`` when anything is non-finite.
    """
    worst = {"exp_avg": 0.0, "exp_avg_sq": 0.0}
    where = {"exp_avg": "", "exp_avg_sq": ""}
    for name in sorted(committed.exp_avg):
        v_c, v_r = committed.exp_avg_sq[name].double(), replayed.exp_avg_sq[name].double()
        if not bool(torch.isfinite(v_r).all()) or not bool(torch.isfinite(v_c).all()) or bool((v_r < 0).any()):
            return {"exp_avg": float("inf"), "exp_avg_sq": float("inf"), "worst": f"exp_avg_sq/{name}"}
        if train is not None and uses_muon(name, committed.exp_avg[name], train):
            # Muon's momentum reaches the update through Newton–Schulz, which normalizes the
            # tensor: its scale is the tensor's RMS (``v`` is zero here).
            m_c, m_r = committed.exp_avg[name].double(), replayed.exp_avg[name].double()
            rms = float(torch.maximum(m_c.abs(), m_r.abs()).pow(2).mean().sqrt()) if m_c.numel() else 0.0
            scale = torch.full_like(m_c, rms + EPSILON)
        else:
            root = torch.maximum(v_c, v_r).sqrt()
            rms = float(root.pow(2).mean().sqrt()) if root.numel() else 0.0
            scale = root.clamp(min=MOMENT_FLOOR * rms) + eps
        errors = {"exp_avg": (replayed.exp_avg[name].double() - committed.exp_avg[name].double()).abs() / scale,
                  "exp_avg_sq": (v_r.sqrt() - v_c.sqrt()).abs() / scale}
        for group, err in errors.items():
            value = _safe(float(err.max())) if err.numel() else 0.0
            if value != value:  # NaN in m
                value = float("inf")
            if value > worst[group]:
                worst[group], where[group] = value, f"{group}/{name}"
    top = max(worst, key=lambda g: worst[g])
    return {**worst, "worst": where[top]}


# -- bounds that need no replay --------------------------------------------------------------------


def moment_ratio_bound(beta1: float, beta2: float, t: int) -> float:
    """``B(t)``: the largest ``|m_t| / √v_t`` AdamW's EMAs allow after ``t`` steps from zero.

    ``m_t = (1 − β₁) Σ_{k<t} β₁ᵏ g_{t−k}`` and ``v_t = (1 − β₂) Σ_{k<t} β₂ᵏ g²_{t−k}`` per coordinate;
    by Cauchy–Schwarz ``|Σ β₁ᵏ g| ≤ √(Σ (β₁²/β₂)ᵏ) · √(Σ β₂ᵏ g²)``, so
    ``|m_t| ≤ (1 − β₁) / √(1 − β₂) · √(Σ_{k<t} (β₁²/β₂)ᵏ) · √v_t`` whatever the gradients were.
    """
    if t <= 0:
        return 0.0
    rho = beta1 * beta1 / beta2 if beta2 > 0 else math.inf
    series = float(t) if rho == 1 else (rho ** t - 1) / (rho - 1) if math.isfinite(rho) else math.inf
    return (1 - beta1) / math.sqrt(1 - beta2) * math.sqrt(series)


def adam_step_bound(beta1: float, beta2: float, t: int) -> float:
    """``A(t)``: the largest normalized step ``|m̂_t| / (√v̂_t + ε)`` of AdamW at step ``t ≥ 1``.

    ``m̂ = m / (1 − β₁ᵗ)``, ``v̂ = v / (1 − β₂ᵗ)``, so ``A(t) = B(t) · √(1 − β₂ᵗ) / (1 − β₁ᵗ)``
    (1 at ``t = 1``: the first step is at most the sign of the gradient; 1.17 for large ``t`` at
    β = 0.9 / 0.95).
    """
    return moment_ratio_bound(beta1, beta2, t) * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)


def update_limit(train: TrainSpec, first_step: int, steps: int) -> float:
    """``lr · Σ A(t)`` over AdamW steps ``first_step + 1 … first_step + steps``: the most a
    coordinate can move in those steps besides weight decay."""
    b1, b2, lr = float(train.beta1), float(train.beta2), float(train.lr)
    return lr * sum(adam_step_bound(b1, b2, t) for t in range(first_step + 1, first_step + steps + 1))


def muon_update_limit(train: TrainSpec, shape: torch.Size, steps: int) -> float:
    """The most ``steps`` Muon steps move one coordinate of an ``A × B`` matrix besides weight decay:
    ``steps · 0.2 · lr · √max(A, B) · NS_SPECTRAL_BOUND`` (the adjusted lr of
    :data:`trainer.step.MUON_ADJUST_LR` times the update's spectral norm, which bounds every entry),
    whatever the momentum: Newton–Schulz normalizes it, so a forged momentum steers the direction
    of a step but cannot make it larger."""
    return steps * 0.2 * float(train.lr) * math.sqrt(max(shape[0], shape[1])) * NS_SPECTRAL_BOUND


def muon_spectral_excess(moved: torch.Tensor, limit: float, slack: float = 0.0) -> float:
    """``‖moved‖₂ / (limit + slack)``: a Muon matrix's change against the spectral bound of its steps.

    The per-coordinate bound lets every entry of an ``A × B`` matrix move by the whole spectral
    limit at once, a change of spectral norm up to ``√(A · B)`` × the limit; Newton–Schulz's steps
    cannot make one (their sum has spectral norm at most the limit). Honest Muon segments and
    epochs reach 0.46–0.71 of it at ``tiny`` and ``demo`` (the per-coordinate bound: 0.09–0.23;
    docs/verification.md). ``inf`` when non-finite. The norm is :func:`verifier.spectral.spectral_norm`:
    exact up to float64 rounding and rounded up, never below ``‖moved‖₂`` (a value below would let
    a forged update through), from the Gram matrix's largest eigenvalue (4.3× cheaper at
    ``gpt124m`` than the singular values: docs/benchmarks.md, "The Muon spectral check").
    """
    if moved.numel() == 0:
        return 0.0
    norm = spectral_norm(moved)
    return _safe(norm / (limit + slack + 1e-30)) if norm == norm else float("inf")


def update_excess(start: Mapping[str, torch.Tensor], end: Mapping[str, torch.Tensor], train: TrainSpec,
                  first_step: int, steps: int,
                  slack: Mapping[str, torch.Tensor] | None = None) -> tuple[float, str]:
    """How far ``end`` is from what ``steps`` AdamW steps can reach from ``start``, per coordinate.

    AdamW with decoupled weight decay ``λ = lr · wd`` (matrices only, as the trainer's step
    applies it) does ``θ ← (1 − λ) θ − lr · u`` with ``|u| ≤ A(t)``, so after the steps
    ``|θ_end − (1 − λ)^steps θ_start| ≤ lr · Σ A(t)``; for a matrix Muon steps, the limit is
    :func:`muon_update_limit` (same decay), and it bounds the matrix's **spectral norm** too
    (:func:`muon_spectral_excess`): every Muon step has spectral norm at most that step's share of
    the limit, so their decayed sum does. Slack: :data:`MOMENT_SLACK` relative, and float32
    rounding of the repeated decay (``steps · 2⁻²³ · |θ_start|``; its Frobenius norm for the
    spectral bound, as is the quantization ``slack``'s).

    Args:
        start: the parameters at the start.
        end: the parameters claimed after the steps.
        train: the run's training section (lr, betas, weight decay).
        first_step: AdamW's step count at ``start`` (the steps are ``first_step + 1 …``).
        steps: how many steps.
        slack: an extra allowance per coordinate (the quantization error of a Δ), if any.

    Returns:
        The largest ``|θ_end − (1 − λ)^steps θ_start| / allowed`` over all coordinates (≤ 1 for any
        honest segment; ``inf`` when non-finite) and the tensor where it is.
    """
    adam_limit = update_limit(train, first_step, steps) * (1 + MOMENT_SLACK)
    decay = 1.0 - float(train.lr) * float(train.weight_decay)
    worst, where = 0.0, ""
    for name in sorted(start):
        s, e = start[name].double(), end[name].double()
        factor = decay ** steps if decays(start[name]) else 1.0
        limit = (muon_update_limit(train, start[name].shape, steps) * (1 + MOMENT_SLACK)
                 if uses_muon(name, start[name], train) else adam_limit)
        allowed = limit + steps * 2.0 ** -23 * s.abs() + 1e-30
        if slack is not None:
            allowed = allowed + slack[name].double()
        ratio = ((e - factor * s).abs() / allowed)
        value = float(ratio.max()) if ratio.numel() else 0.0
        if uses_muon(name, start[name], train) and math.isfinite(value):
            room = steps * 2.0 ** -23 * float(s.norm()) + (float(slack[name].double().norm()) if slack else 0.0)
            value = max(value, muon_spectral_excess(e - factor * s, limit, room))
        if not math.isfinite(value) or value != value:
            return float("inf"), name
        if value > worst:
            worst, where = value, name
    return worst, where


def quantization_slack(payload: Mapping[str, torch.Tensor], shapes: Mapping[str, torch.Size],
                       quant: QuantizationSpec) -> dict[str, torch.Tensor]:
    """Per coordinate, how far a dequantized Δ may be from the true one: half a quantization step
    of its block (and :data:`ERROR_SLACK`), or 2⁻²⁰ of the tensor's largest value unquantized."""
    out = {}
    for name in sorted(shapes):
        numel = torch.Size(shapes[name]).numel()
        if quant.scheme == "none":
            values = payload[f"delta/{name}"]
            top = float(values.abs().max()) if values.numel() else 0.0
            out[name] = torch.full(tuple(shapes[name]), top * 2.0 ** -20, dtype=torch.float64)
            continue
        half = payload[f"scale/{name}"].double() * (0.5 + ERROR_SLACK)
        out[name] = half.repeat_interleave(quant.block_size)[:numel].reshape(tuple(shapes[name]))
    return out


def delta_excess(theta: Mapping[str, torch.Tensor], delta: Mapping[str, torch.Tensor],
                 payload: Mapping[str, torch.Tensor], shapes: Mapping[str, torch.Size], spec_train: TrainSpec,
                 quant: QuantizationSpec, steps: int | None = None) -> tuple[float, str]:
    """:func:`update_excess` of a whole epoch for a dequantized Δ: ``θ_e − Δ̂`` against ``θ_e``
    over ``steps`` steps (``H``, or the ``s · c`` of a partial epoch), allowing each coordinate its
    quantization error (what a host can check of a peer's Δ before aggregating it, with nothing
    but the Δ and θ_e)."""
    end = {n: theta[n] - delta[n] for n in theta}
    return update_excess(theta, end, spec_train, 0, spec_train.inner_steps if steps is None else steps,
                         slack=quantization_slack(payload, shapes, quant))


def leaf_moment_check(state: TrainState, train: TrainSpec) -> tuple[dict[str, float], str | None]:
    """Whether a leaf's AdamW moments are ones that ``state.step`` AdamW steps can produce.

    Always: ``v ≥ 0`` and ``|m_i| ≤ B(t) √v_i`` for every coordinate (:func:`moment_ratio_bound`;
    slack :data:`MOMENT_SLACK` and :data:`MOMENT_ATOL`). With clipping at ``g_max``:
    ``‖m‖₂ ≤ (1 − β₁ᵗ) g_max`` and ``Σ v ≤ (1 − β₂ᵗ) g_max²`` (by induction over the EMAs, every
    gradient having ``‖g‖ ≤ g_max``). A tensor Muon steps has ``v = 0`` and Muon's momentum
    ``m ← β₁ m + (1 − β₁) g`` in ``exp_avg``: the same EMA of the same clipped gradients, so it
    counts in the ``‖m‖₂`` bound, and the elementwise bound (which needs ``v``) does not apply.

    Returns:
        The measurements (``exp_avg_norm``, ``exp_avg_sq_sum``, ``exp_avg_sq_min``,
        ``exp_avg_ratio``: the largest ``|m_i| / (B(t) √v_i)``) and ``None``, or why not.
    """
    t, b1, b2 = state.step, float(train.beta1), float(train.beta2)
    m_norm = math.sqrt(_sq(state.exp_avg))
    v_sum = sum(float(state.exp_avg_sq[n].double().sum()) for n in sorted(state.exp_avg_sq))
    v_min = min((float(x.min()) for x in state.exp_avg_sq.values() if x.numel()), default=0.0)
    bound = moment_ratio_bound(b1, b2, t)
    ratio, muon_with_v = 0.0, ""
    for name in sorted(state.exp_avg):
        m, v = state.exp_avg[name].double().abs(), state.exp_avg_sq[name].double().clamp(min=0)
        if uses_muon(name, state.exp_avg[name], train):
            if bool((state.exp_avg_sq[name] != 0).any()):
                muon_with_v = name
            continue  # Muon's momentum has no v: only the norm bound below applies
        if m.numel():
            excess = (m - MOMENT_ATOL) / (bound * (1 + MOMENT_SLACK) * v.sqrt())
            ratio = max(ratio, float(torch.where(m <= MOMENT_ATOL, torch.zeros_like(m), excess).max()))
    found = {"exp_avg_norm": _safe(m_norm), "exp_avg_sq_sum": _safe(v_sum), "exp_avg_sq_min": v_min,
             "exp_avg_ratio": _safe(ratio) if ratio == ratio else float("inf")}
    if not v_min >= 0:
        return found, f"a second moment is negative ({v_min:.3g})"
    if muon_with_v:
        return found, f"a second moment of {muon_with_v} is non-zero, but Muon steps it (it has none)"
    if not found["exp_avg_ratio"] <= 1:
        return found, (f"a first moment is {found['exp_avg_ratio']:.4g}× the most |m| / √v that {t} AdamW "
                       f"steps allow (B = {bound:.4g}): no gradients produce it")
    g_max = float(train.grad_clip)
    if g_max > 0:
        m_cap, v_cap = (1 - b1 ** t) * g_max, (1 - b2 ** t) * g_max ** 2
        if not found["exp_avg_norm"] <= m_cap * (1 + MOMENT_SLACK) + MOMENT_ATOL:
            return found, (f"‖exp_avg‖ = {m_norm:.6g} exceeds (1 − β₁ᵗ)·g_max = {m_cap:.6g} "
                           f"(impossible for gradients clipped at {g_max:g})")
        if not found["exp_avg_sq_sum"] <= v_cap * (1 + MOMENT_SLACK) + MOMENT_ATOL:
            return found, (f"Σ exp_avg_sq = {v_sum:.6g} exceeds (1 − β₂ᵗ)·g_max² = {v_cap:.6g} "
                           f"(impossible for gradients clipped at {g_max:g})")
    return found, None


def update_norm(end: TrainState, start: TrainState) -> float:
    """``‖θ_end − θ_start‖₂``."""
    return math.sqrt(_sq_diff(end.params, start.params))


def parameter_count(state: TrainState) -> int:
    """``N``: the number of model parameters."""
    return sum(t.numel() for t in state.params.values())


def expected_update(lr: float, steps: int, n_params: int) -> float:
    """``lr · √(steps · N)``: the update size AdamW's learning rate implies for a segment."""
    return lr * math.sqrt(steps * n_params)


@dataclass(frozen=True)
class Comparison:
    """Everything :func:`compare` measures between a replayed and a committed end state.

    Attributes:
        groups: :func:`relative_distances`.
        tensors: :func:`tensor_distances`.
        moments: :func:`moment_errors`.
        loss_diff: the largest per-step loss difference.
    """

    groups: dict[str, float]
    tensors: dict[str, float]
    moments: dict[str, float | str]
    loss_diff: float

    @property
    def worst_tensor(self) -> tuple[str, float]:
        """The tensor with the largest distance and that distance (what ``tau`` bounds)."""
        name = max(self.tensors, key=lambda k: self.tensors[k])
        return name, self.tensors[name]

    @property
    def distance(self) -> float:
        """The largest tensor distance (what ``tau`` bounds)."""
        return self.worst_tensor[1]

    @property
    def moment_error(self) -> float:
        """The largest elementwise moment error (what ``moment_tolerance`` bounds)."""
        return max(float(self.moments["exp_avg"]), float(self.moments["exp_avg_sq"]))


def param_floor(train: TrainSpec, steps: int) -> float:
    """``lr · √(steps · PARAM_FLOOR_COORDINATES)``: the least denominator of a parameter tensor's distance."""
    return float(train.lr) * math.sqrt(max(steps, 1) * PARAM_FLOOR_COORDINATES)


def compare(replayed: TrainState, committed: TrainState, start: TrainState, train: TrainSpec,
            replayed_losses: torch.Tensor, committed_losses: torch.Tensor) -> Comparison:
    """Every replay measure of one segment (see the module docstring), for the run's ``train`` section."""
    diffs = (replayed_losses.double() - committed_losses.double()).abs()
    loss = float(diffs.max()) if diffs.numel() else 0.0
    floor = param_floor(train, committed.step - start.step)
    return Comparison(relative_distances(replayed, committed, start),
                      tensor_distances(replayed, committed, start, floor),
                      moment_errors(replayed, committed, float(train.eps), train),
                      loss if math.isfinite(loss) else float("inf"))


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


def segment_movements(leaves: Sequence[Mapping[str, torch.Tensor]]) -> list[dict[str, float]]:
    """Per segment ``s`` (leaf ``s`` to leaf ``s + 1``), per tensor ``n``: ``‖θ_{s+1,n} − θ_{s,n}‖``.

    Args:
        leaves: the parameters of leaves ``0 … S`` (every leaf with the same names and shapes).

    Returns:
        ``S`` rows, tensor name -> movement (:func:`tensor_norm`).
    """
    if len(leaves) < 2:
        raise ValueError("movements need at least two leaves")
    names = sorted(leaves[0])
    for leaf in leaves[1:]:
        if sorted(leaf) != names or any(leaf[n].shape != leaves[0][n].shape for n in names):
            raise ValueError("leaves of different layouts")
    return [{n: tensor_norm(b[n] - a[n]) for n in names} for a, b in itertools.pairwise(leaves)]


def triangle_slack(movements: Sequence[Mapping[str, float]], delta: Mapping[str, torch.Tensor],
                   sizes: Mapping[str, int]) -> dict[str, float]:
    """Per tensor ``n`` — and the pool of tensors under :data:`PEER_POOL_COORDINATES` coordinates,
    :data:`SMALL_TENSORS`, as :func:`peer_excess` groups them — ``Σ_s m_{s,n} / ‖Δ_n‖``.

    At least 1 for true movements (the triangle inequality); a check ``‖Δ_n‖ ≤ Σ_s m_{s,n}`` over
    committed movements lets a Δ grow by this factor before it fails, so it bounds a jump no better
    than the honest slack. ``inf`` for a tensor whose Δ is 0 and that moved.

    Args:
        movements: :func:`segment_movements` rows.
        delta: the epoch's Δ (``θ_0 − θ_S``) per tensor.
        sizes: tensor name -> number of coordinates (for the pool).
    """
    out: dict[str, float] = {}
    pool_moves = [0.0] * len(movements)
    pool_delta = 0.0
    for n in sorted(delta):
        moved = sum(row[n] for row in movements)
        norm = tensor_norm(delta[n])
        out[n] = moved / norm if norm > 0 else (1.0 if moved == 0 else math.inf)
        if sizes[n] < PEER_POOL_COORDINATES:
            pool_delta += norm * norm
            for s, row in enumerate(movements):
                pool_moves[s] += row[n] * row[n]
    if pool_delta > 0:
        out[SMALL_TENSORS] = sum(math.sqrt(x) for x in pool_moves) / math.sqrt(pool_delta)
    return out
