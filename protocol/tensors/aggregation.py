"""Robust aggregation of accepted pseudo-gradients: the rules a run spec may choose.

Determinism matters more than speed here: every honest host aggregates independently and they
must agree bit for bit on the result (its hash is voted on chain). So:

* inputs are ordered by host address, never by arrival;
* each Δ is flattened in ascending tensor-name order into one float64 vector;
* every reduction runs in NumPy, whose reductions are single-threaded with a fixed (pairwise)
  summation order — unlike torch's CPU reductions, whose order may follow the thread count;
  sums across hosts are explicit left-to-right loops;
* the result is cast back to float32 tensors of the original shapes.

Rules (K accepted hosts):

``mean``              plain DiLoCo averaging; no robustness.
``median``            coordinate-wise median (mean of the two middle values when K is even).
``trimmed_mean``      per coordinate, drop the ``floor(trim_fraction · K)`` largest and smallest.
``centered_clip``     Karimireddy, He & Jaggi (2021): from the median, ``clip_iters`` steps of
                      ``v += mean_i (x_i − v) · min(1, ρ / ‖x_i − v‖)``; the radius ρ is
                      ``clip_radius`` times the median distance of the inputs to the start, so the
                      parameter does not depend on the scale of the pseudo-gradients.
``krum``              Blanchard et al. (2017): the input with the smallest sum of squared distances to
                      its ``K − f − 2`` nearest neighbours (``f = krum_f``).
``multi_krum``        the mean of the ``m`` best-scored inputs (``m = multi_krum_m``, or ``K − f`` if 0).
``geometric_median``  smoothed Weiszfeld iterations (Pillutla, Kakade & Harchaoui, RFA),
                      ``gm_iters`` steps, weights ``1 / max(gm_eps, ‖x_i − z‖)``.

Weights (partial epochs, issue 30): a host that committed ``s < S`` segments enters with weight
``s`` (its steps), the others with ``S``. Equal weights take exactly the rules above (bit for bit);
unequal ones their weighted forms, with ``a_i = w_i / Σ w``: the weighted mean ``Σ a_i x_i``; the
weighted median (the value where the sorted weights' running sum reaches half, the mean of two
values when it lands exactly on half — integer arithmetic); the trimmed mean dropping
``trim_fraction`` of the total weight at each end (boundary inputs partly); centered clipping from
the weighted median with ``v += Σ a_i (x_i − v) · min(1, ρ / ‖x_i − v‖)``; Krum picking by the
same scores, multi-Krum's weighted mean; Weiszfeld with weights ``a_i / max(gm_eps, ‖x_i − z‖)``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from protocol.errors import VerilocoError
from protocol.rules.spec import AggregationSpec

Deltas = Mapping[str, Mapping[str, torch.Tensor]]


class AggregationError(VerilocoError, ValueError):
    """The inputs cannot be aggregated (none, or of different names and shapes)."""


def _flatten(deltas: Deltas) -> tuple[list[str], np.ndarray, list[tuple[str, torch.Size]]]:
    if not deltas:
        raise AggregationError("no accepted pseudo-gradients to aggregate")
    hosts = sorted(deltas)
    first = deltas[hosts[0]]
    layout = [(name, first[name].shape) for name in sorted(first)]
    rows = []
    for host in hosts:
        delta = deltas[host]
        if sorted(delta) != [name for name, _ in layout]:
            raise AggregationError(f"Δ of {host} has different tensor names")
        parts = []
        for name, shape in layout:
            t = delta[name]
            if t.shape != shape:
                raise AggregationError(f"Δ of {host}: {name} has shape {tuple(t.shape)}, expected {tuple(shape)}")
            parts.append(t.detach().to("cpu", torch.float64).reshape(-1).numpy())
        row = np.concatenate(parts) if parts else np.zeros(0)
        if not np.isfinite(row).all():
            raise AggregationError(f"Δ of {host} contains NaN or Inf")
        rows.append(row)
    return hosts, np.stack(rows), layout


def _unflatten(vector: np.ndarray, layout: list[tuple[str, torch.Size]]) -> dict[str, torch.Tensor]:
    out, offset = {}, 0
    for name, shape in layout:
        n = int(np.prod(shape)) if len(shape) else 1
        out[name] = torch.from_numpy(vector[offset:offset + n].astype(np.float32)).reshape(shape)
        offset += n
    return out


def _sum_rows(x: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    # Left-to-right over hosts, elementwise: the order is fixed whatever the thread count.
    acc = np.zeros(x.shape[1])
    for i in range(x.shape[0]):
        acc = acc + (x[i] if weights is None else weights[i] * x[i])
    return acc


def _norm(v: np.ndarray) -> float:
    return float(np.sqrt(np.add.reduce(v * v)))


def _mean(x: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    return _sum_rows(x) / x.shape[0]


def _median(x: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    s = np.sort(x, axis=0, kind="stable")
    k = x.shape[0]
    return s[k // 2] if k % 2 else (s[k // 2 - 1] + s[k // 2]) / 2


def _trimmed_mean(x: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    k = x.shape[0]
    t = int(spec.trim_fraction * k)  # Decimal * int, floored
    if k - 2 * t < 1:
        return _median(x, spec)
    s = np.sort(x, axis=0, kind="stable")
    return _sum_rows(s[t:k - t]) / (k - 2 * t)


def _centered_clip(x: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    v = _median(x, spec)
    dists = np.array([_norm(row - v) for row in x])
    radius = float(spec.clip_radius) * float(np.median(dists))
    if radius == 0.0:
        return v
    for _ in range(spec.clip_iters):
        scales = np.array([min(1.0, radius / d) if d > 0 else 1.0 for d in (_norm(row - v) for row in x)])
        v = v + _sum_rows(x - v, scales) / x.shape[0]
    return v


def _krum_scores(x: np.ndarray, f: int) -> np.ndarray:
    k = x.shape[0]
    d2 = np.zeros((k, k))
    for i in range(k):
        for j in range(i + 1, k):
            d2[i, j] = d2[j, i] = float(np.add.reduce((x[i] - x[j]) ** 2))
    neighbours = max(1, k - f - 2)
    return np.array([np.sort(np.delete(d2[i], i), kind="stable")[:neighbours].sum() for i in range(k)])


def _krum(x: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    if x.shape[0] <= 2:
        return _mean(x, spec)
    scores = _krum_scores(x, spec.krum_f)
    return x[int(np.argmin(scores))].copy()  # argmin takes the first minimum: ties go to address order


def _multi_krum(x: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    k = x.shape[0]
    if k <= 2:
        return _mean(x, spec)
    m = spec.multi_krum_m or max(1, k - spec.krum_f)
    order = np.argsort(_krum_scores(x, spec.krum_f), kind="stable")[:min(m, k)]
    return _sum_rows(x[np.sort(order)]) / len(order)


def _geometric_median(x: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    z = _mean(x, spec)
    eps = float(spec.gm_eps)
    for _ in range(spec.gm_iters):
        w = np.array([1.0 / max(eps, _norm(row - z)) for row in x])
        z = _sum_rows(x, w) / float(np.add.reduce(w))
    return z


def _weighted_median(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    # Integer weights: "the running sum reaches half" is exact (2·cum vs the total).
    order = np.argsort(x, axis=0, kind="stable")
    s = np.take_along_axis(x, order, axis=0)
    cum = np.cumsum(w[order], axis=0)
    total = int(w.sum())
    lower = np.argmax(2 * cum >= total, axis=0)  # first index where the running sum reaches half
    cols = np.arange(x.shape[1])
    low = s[lower, cols]
    exact = 2 * cum[lower, cols] == total
    high = s[np.minimum(lower + 1, x.shape[0] - 1), cols]
    return np.where(exact, (low + high) / 2, low)


def _w_mean(x: np.ndarray, w: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    return _sum_rows(x, w / w.sum())


def _w_median(x: np.ndarray, w: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    return _weighted_median(x, w)


def _w_trimmed_mean(x: np.ndarray, w: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    order = np.argsort(x, axis=0, kind="stable")
    s = np.take_along_axis(x, order, axis=0)
    ws = w[order].astype(np.float64)
    total = float(w.sum())
    cut = float(spec.trim_fraction) * total
    cum = np.cumsum(ws, axis=0)
    # The weight of each sorted input inside [cut, total − cut] (boundary inputs partly).
    kept = np.clip(np.minimum(cum, total - cut) - np.maximum(cum - ws, cut), 0.0, None)
    mass = _sum_rows(kept)
    return np.where(mass > 0, _sum_rows(s * kept) / np.where(mass > 0, mass, 1.0), _weighted_median(x, w))


def _w_centered_clip(x: np.ndarray, w: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    a = w / w.sum()
    v = _weighted_median(x, w)
    dists = np.array([_norm(row - v) for row in x])
    radius = float(spec.clip_radius) * float(np.median(dists))
    if radius == 0.0:
        return v
    for _ in range(spec.clip_iters):
        scales = np.array([min(1.0, radius / d) if d > 0 else 1.0 for d in (_norm(row - v) for row in x)])
        v = v + _sum_rows(x - v, a * scales)
    return v


def _w_krum(x: np.ndarray, w: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    if x.shape[0] <= 2:
        return _w_mean(x, w, spec)
    return _krum(x, spec)  # one input is chosen: its weight changes nothing


def _w_multi_krum(x: np.ndarray, w: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    k = x.shape[0]
    if k <= 2:
        return _w_mean(x, w, spec)
    m = spec.multi_krum_m or max(1, k - spec.krum_f)
    chosen = np.sort(np.argsort(_krum_scores(x, spec.krum_f), kind="stable")[:min(m, k)])
    return _w_mean(x[chosen], w[chosen], spec)


def _w_geometric_median(x: np.ndarray, w: np.ndarray, spec: AggregationSpec) -> np.ndarray:
    a = w / w.sum()
    z = _sum_rows(x, a)
    eps = float(spec.gm_eps)
    for _ in range(spec.gm_iters):
        b = np.array([a[i] / max(eps, _norm(row - z)) for i, row in enumerate(x)])
        z = _sum_rows(x, b) / float(np.add.reduce(b))
    return z


WEIGHTED_RULES: dict[str, Callable[[np.ndarray, np.ndarray, AggregationSpec], np.ndarray]] = {
    "mean": _w_mean,
    "median": _w_median,
    "trimmed_mean": _w_trimmed_mean,
    "centered_clip": _w_centered_clip,
    "krum": _w_krum,
    "multi_krum": _w_multi_krum,
    "geometric_median": _w_geometric_median,
}


RULES: dict[str, Callable[[np.ndarray, AggregationSpec], np.ndarray]] = {
    "mean": _mean,
    "median": _median,
    "trimmed_mean": _trimmed_mean,
    "centered_clip": _centered_clip,
    "krum": _krum,
    "multi_krum": _multi_krum,
    "geometric_median": _geometric_median,
}


def aggregate(spec: AggregationSpec, deltas: Deltas, weights: Mapping[str, int] | None = None
              ) -> dict[str, torch.Tensor]:
    """Aggregate the accepted pseudo-gradients with the rule of ``spec``.

    Args:
        spec: the run spec's aggregation section (rule and parameters).
        deltas: host address -> (tensor name -> dequantized Δ). Only accepted hosts belong here.
        weights: host address -> its weight, a positive integer (the segments its Δ covers:
            fewer than S for a partial epoch); the same hosts as ``deltas``. None, or all equal:
            the unweighted rule, bit for bit.

    Returns:
        tensor name -> aggregated Δ (float32), bitwise identical for the same inputs on the same
        platform, whatever order ``deltas`` was built in and whatever torch's thread count.

    Raises:
        AggregationError: no inputs, mismatched names/shapes, non-finite values, or weights that
            are not a positive integer for each host.
    """
    hosts, x, layout = _flatten(deltas)
    if weights is None:
        return _unflatten(RULES[spec.rule](x, spec), layout)
    if sorted(weights) != hosts:
        raise AggregationError("the weights name other hosts than the Δs")
    if any(type(weights[h]) is not int or weights[h] < 1 for h in hosts):
        raise AggregationError("every weight must be a positive integer")
    w = np.array([weights[h] for h in hosts], dtype=np.int64)
    if (w == w[0]).all():
        return _unflatten(RULES[spec.rule](x, spec), layout)
    return _unflatten(WEIGHTED_RULES[spec.rule](x, w, spec), layout)
