"""The peer bound: what every proposer does to the accepted Δs before aggregating them.

A Δ that passed its verification may still be far larger than its peers' in some tensor (a segment
nobody replayed moved it). Proposers leave out a Δ beyond :data:`DELTA_PEER_FACTOR` × the median of
the accepted Δs' norms in some tensor (or in the pool of small tensors) and clip every small tensor
of the rest to that factor × its median (:func:`within_peer_bound`). It is an aggregation rule, so it
lives beside the outer step: the chain-free simulation (:mod:`trainer.diloco`) and the proposers
(``node.host``) call this one implementation. ``verifier.measure`` re-exports it with the checks.
Pure functions of the Δs' bytes, in float64 and a fixed order: every honest proposer computes the
same bits at any thread count and in any arrival order.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

DELTA_PEER_FACTOR = 1.5
"""An accepted Δ whose norm in some tensor exceeds this many times the median of the accepted Δs'
norms of that tensor is left out of the aggregate (:func:`peer_excess`)."""

DELTA_PEER_MIN = 3
"""The peer bound applies from this many accepted Δs: with two, the median is their mean, which a
single outlier drags along (it passes up to 3 × the other's norm at factor 1.5); with one, there is
no peer. Below it only the per-coordinate bound (:func:`delta_excess`) holds."""


PEER_POOL_COORDINATES = 4096
"""The verifier's split of small and large tensors (``verifier.measure.PARAM_FLOOR_COORDINATES``, a
test keeps them equal). Tensors of fewer coordinates (biases, LayerNorms) are compared as one
pool, :data:`SMALL_TENSORS`: alone, their honest norms spread up to 1.67× the median at ``demo``
(64 coordinates each), against at most 1.13× for the matrices (docs/verification.md). Each is then
clipped on its own to the peer factor × its median (:func:`peer_clip`) rather than leaving a Δ out for it."""

SMALL_TENSORS = "small tensors"
"""The name :func:`peer_excess` gives the pool of tensors under :data:`PEER_POOL_COORDINATES` coordinates."""


def tensor_norm(t: torch.Tensor) -> float:
    """``‖t‖₂`` in float64, summed by numpy's single-threaded pairwise reduction: the same bits at
    any torch thread count (torch's own reductions of more than ~10⁶ elements split by thread)."""
    x = t.detach().to("cpu", torch.float64).reshape(-1).numpy()
    return math.sqrt(float(np.add.reduce(x * x))) if x.size else 0.0


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _peer_median(norms: Mapping[str, float], host: str, segments: Mapping[str, int] | None) -> float:
    """The median of the peers' ``norms`` (``host``'s own among them) as ``host``'s norm is compared
    with it: a peer that trained fewer segments than ``host`` counts at its norm × ``segments[host] /
    segments[peer]`` (honest movement grows at most about linearly with the steps: every AdamW step
    moves a coordinate by at most ``lr · A(t)``); a peer that trained as many or more counts as it is
    (never scaled down, so a partial Δ is never compared with less than what whole epochs moved).
    Equal segments (or ``None``) give the plain median, bit for bit."""
    if segments is None:
        return _median(list(norms.values()))
    mine = segments[host]
    return _median([x * (mine / segments[p]) if mine > segments[p] else x for p, x in norms.items()])


def _check_segments(hosts: Sequence[str], segments: Mapping[str, int] | None) -> None:
    if segments is not None and any(not isinstance(segments.get(h), int) or segments[h] < 1 for h in hosts):
        raise ValueError("segments must give every Δ's host at least 1 segment")


def peer_excess(deltas: Mapping[str, Mapping[str, torch.Tensor]], factor: float = DELTA_PEER_FACTOR,
                min_peers: int = DELTA_PEER_MIN, segments: Mapping[str, int] | None = None
                ) -> dict[str, tuple[float, str]]:
    """How far each accepted Δ is beyond ``factor`` × the median of all accepted Δs' norms, per tensor
    (tensors under :data:`PEER_POOL_COORDINATES` coordinates pooled into one, :data:`SMALL_TENSORS`).

    What no replay saw (the segments nobody challenged) can move a Δ anywhere the per-coordinate
    bound of ``H`` AdamW steps allows, which grows like ``H · lr`` while honest movement grows like
    ``√H · lr``. The honest Δs of one epoch have norms of one size per tensor (measured:
    docs/verification.md), so a Δ far larger than its peers' in any tensor is left out. A pure
    function of the Δs' bytes, in address order: every honest proposer computes the same exclusions
    and still agrees on θ_{e+1}.

    Partial epochs: a host that trained ``s`` of ``S`` segments has a smaller Δ, so when most
    accepted hosts are partial the median falls below what a whole epoch moves (measured at tiny:
    an honest whole Δ 2.07× the median of three half-epoch Δs in one tensor). With ``segments``,
    each host is compared with the median of its peers' norms scaled up by its segments over
    theirs, where it trained more (:func:`_peer_median`).

    Args:
        deltas: address -> dequantized Δ (the accepted Δs within the per-coordinate bound).
        factor: the allowed multiple of the median norm (:data:`DELTA_PEER_FACTOR`).
        min_peers: fewer Δs than this: nothing is compared (every excess is 0).
        segments: address -> the segments its Δ covers (``None``: all the same).

    Returns:
        address -> (the largest ``‖Δ_n‖ / (factor · median_n)`` over tensors (or the pool) ``n``, its name); a
        Δ with excess above 1 is to be left out (``inf`` for a non-zero tensor whose median is 0).

    Raises:
        ValueError: ``segments`` lacks a host of ``deltas`` or gives one fewer than 1 segment.
    """
    hosts = sorted(deltas)
    _check_segments(hosts, segments)
    if len(hosts) < max(min_peers, 1):
        return dict.fromkeys(hosts, (0.0, ""))
    groups: dict[str, list[str]] = {}
    for name in sorted(deltas[hosts[0]]):
        large = deltas[hosts[0]][name].numel() >= PEER_POOL_COORDINATES
        groups.setdefault(name if large else SMALL_TENSORS, []).append(name)
    norms = {h: {g: math.sqrt(sum(tensor_norm(deltas[h][n]) ** 2 for n in members)) for g, members in groups.items()}
             for h in hosts}
    out = dict.fromkeys(hosts, (0.0, ""))
    for n in sorted(groups):
        group = {h: norms[h][n] for h in hosts}
        for h in hosts:
            allowed = factor * _peer_median(group, h, segments)
            x = norms[h][n]
            excess = x / allowed if allowed > 0 else (0.0 if x == 0 else math.inf)
            excess = excess if excess == excess else math.inf  # a NaN norm is never within a bound
            if excess > out[h][0]:
                out[h] = (excess, n)
    return out


def peer_clip(deltas: Mapping[str, Mapping[str, torch.Tensor]], factor: float = DELTA_PEER_FACTOR,
              min_peers: int = DELTA_PEER_MIN, segments: Mapping[str, int] | None = None
              ) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, dict[str, float]]]:
    """Every tensor under :data:`PEER_POOL_COORDINATES` coordinates of every Δ scaled down to at most
    ``factor`` × the median over ``deltas`` of that tensor's norms.

    :func:`peer_excess` compares small tensors as one pool (alone, honest ones spread too much to
    leave a Δ out for one), so a single small tensor inside the pool can exceed its own median by
    more than ``factor`` (measured: 2.47×). Clipping it instead of leaving the Δ out bounds what
    enters the aggregate per tensor, and an honest tensor beyond the factor loses only its excess.
    Norms are :func:`tensor_norm` (float64, thread-independent); a tensor beyond ``allowed`` is
    multiplied in float64 by ``allowed / norm`` and rounded back to its dtype, elementwise, so every
    proposer gets the same bits. After rounding, a clipped norm is ``allowed`` within float32 rounding.

    Args:
        deltas: address -> dequantized Δ (those kept by :func:`peer_excess`).
        factor: the allowed multiple of the median norm (:data:`DELTA_PEER_FACTOR`).
        min_peers: fewer Δs than this: nothing is clipped (the median of 1–2 is no peer bound).
        segments: address -> the segments its Δ covers: each host's median as in
            :func:`peer_excess` (``None``: all the same).

    Returns:
        The Δs (clipped tensors new, the rest the same objects) by address in address order, and
        address -> {tensor: the scale applied} for every tensor clipped (a median of 0 scales by 0).

    Raises:
        ValueError: a small tensor's norm is not finite (callers leave such Δs out first), or
            ``segments`` as :func:`peer_excess` refuses it.
    """
    hosts = sorted(deltas)
    _check_segments(hosts, segments)
    out = {h: dict(deltas[h]) for h in hosts}
    scales: dict[str, dict[str, float]] = {}
    if len(hosts) < max(min_peers, 1):
        return out, scales
    first = deltas[hosts[0]]
    for name in sorted(n for n in first if first[n].numel() < PEER_POOL_COORDINATES):
        norms = {h: tensor_norm(deltas[h][name]) for h in hosts}
        if not all(math.isfinite(x) for x in norms.values()):
            raise ValueError(f"a Δ of {name} is not finite")
        for h in hosts:
            allowed = factor * _peer_median(norms, h, segments)
            if norms[h] > allowed:
                scale = allowed / norms[h]
                t = deltas[h][name]
                out[h][name] = (t.double() * scale).to(t.dtype)
                scales.setdefault(h, {})[name] = scale
    return out, scales


DIRECTION_MIN_PEERS = 4
""":func:`direction_cosines` compares from this many Δs: each with the median of at least 3 others,
which one forged Δ among them cannot turn. With 3, the others' median is the mean of 2, and a
sign-flipped Δ of honest size cancels an honest one in it."""


def direction_cosines(deltas: Mapping[str, Mapping[str, torch.Tensor]], min_peers: int = DIRECTION_MIN_PEERS
                      ) -> dict[str, float]:
    """Each Δ's cosine with the coordinate-wise median of the OTHER Δs, over the whole Δ: a
    measurement (``bench/unreplayed_segments.py``), not a check any proposer applies.

    The peer bound limits how far a Δ moves, not which way: what no replay saw can point a Δ of
    honest size anywhere (measured: a jump along the validation gradient, admitted, +1.41 nats in
    one epoch at tiny; docs/verification.md). The others' median is the direction honest training
    took this epoch, robust to one forger among them; a cosine is scale-free, so a partial epoch
    would not score lower for its size. Measured, no threshold on it separates honest Δs from that
    jump (at tiny, honest Δs score down to 0.60 under int8 and 0.25 under ``topk2``; admitted
    gradient jumps scored 0.34 (+1.41 nats) and 0.71 (+0.18 nats under ``mean``);
    docs/benchmarks.md), so no direction bound is built on it.

    The same bits at any thread count and arrival order: tensors in name order, each in float64 on
    the CPU; each coordinate's median from the others' values sorted (odd: the middle one; even:
    the mean of the two middle ones); dot products and squared norms summed by numpy's
    single-threaded pairwise reduction per tensor, then over the tensors in name order.

    Args:
        deltas: address -> dequantized Δ (finite).
        min_peers: fewer Δs than this: nothing is compared (every cosine is 1).

    Returns:
        address -> cosine in [-1, 1]; 1 for a Δ of zero norm or an others' median of zero norm
        (no direction to compare).

    Raises:
        ValueError: a Δ is not finite.
    """
    hosts = sorted(deltas)
    if len(hosts) < max(min_peers, 2):
        return dict.fromkeys(hosts, 1.0)
    dot = dict.fromkeys(hosts, 0.0)
    own = dict.fromkeys(hosts, 0.0)
    ref = dict.fromkeys(hosts, 0.0)
    for name in sorted(deltas[hosts[0]]):
        rows = np.stack([deltas[h][name].detach().to("cpu", torch.float64).reshape(-1).numpy() for h in hosts])
        if not np.isfinite(rows).all():
            raise ValueError(f"a Δ of {name} is not finite")
        for i, h in enumerate(hosts):
            others = np.sort(np.delete(rows, i, axis=0), axis=0)
            mid = others.shape[0] // 2
            median = others[mid] if others.shape[0] % 2 else (others[mid - 1] + others[mid]) / 2
            x = rows[i]
            dot[h] += float(np.add.reduce(x * median))
            own[h] += float(np.add.reduce(x * x))
            ref[h] += float(np.add.reduce(median * median))
    return {h: dot[h] / math.sqrt(own[h] * ref[h]) if own[h] > 0 and ref[h] > 0 else 1.0 for h in hosts}


@dataclass(frozen=True)
class PeerBound:
    """What :func:`within_peer_bound` does to the accepted Δs.

    Attributes:
        kept: address -> Δ to aggregate (small tensors clipped), in address order.
        left_out: address -> (its :func:`peer_excess`, the tensor or pool) for every Δ left out.
        clipped: address -> {small tensor: scale} for every kept Δ :func:`peer_clip` scaled.
    """

    kept: dict[str, dict[str, torch.Tensor]]
    left_out: dict[str, tuple[float, str]]
    clipped: dict[str, dict[str, float]]
    excluded: frozenset[str] = frozenset()
    """Hosts another rule left out before the clip (``exclude``: the probe, :mod:`trainer.probe`),
    whether or not the peer bound would have too."""


def within_peer_bound(deltas: Mapping[str, Mapping[str, torch.Tensor]], clip: bool = True,
                      segments: Mapping[str, int] | None = None, exclude: Collection[str] = ()) -> PeerBound:
    """The peer bound as every proposer applies it to the accepted Δs (each within the per-coordinate
    bound): leave out a Δ beyond :data:`DELTA_PEER_FACTOR` × the median in some tensor or in the pool
    of small ones (:func:`peer_excess`), then clip every small tensor of the rest to that factor × its
    own median over the kept Δs (:func:`peer_clip`; ``clip=False``: not, for measuring what it does).
    A pure function of the Δs' bytes (and of ``segments``, the segments each Δ covers, from the
    chain: partial epochs compared fairly, :func:`peer_excess`): every honest proposer aggregates
    the same tensors. ``exclude``: hosts another rule leaves out (``trainer.probe.admitted``); the
    peer excess is still measured over every accepted Δ (each rule on the same peers), the clip over
    what both rules keep."""
    excess = peer_excess(deltas, segments=segments)
    left_out = {h: found for h, found in excess.items() if not found[0] <= 1}
    excluded = frozenset(h for h in exclude if h in deltas)
    kept = {h: deltas[h] for h in sorted(deltas) if h not in left_out and h not in excluded}
    if not clip:
        return PeerBound({h: dict(d) for h, d in kept.items()}, left_out, {}, excluded)
    clipped, scales = peer_clip(kept, segments=segments)
    return PeerBound(clipped, left_out, scales, excluded)
