"""The probe: what a committed Δ does to the model, measured by the validators who already hold it.

The peer bound (:mod:`trainer.peer_bound`) limits how far a Δ moves, not which way: a host that
trains honestly and jumps in a segment nobody replays, along the validation gradient, passes every
bound at peer size and moved the agreed model +1.41 nats in one epoch at tiny under the default
centered clipping (docs/verification.md, "What no replay sees"). The probe looks at the effect.

The validators of a host's last segment hold θ_e and the host's committed, dequantized Δ̂ bitwise
(within its compute class). Each posts with its verdict the host's **probe gain**
``L(θ_e) − L(θ_e − scale · Δ̂)`` on validation windows drawn from the epoch's beacon
(:func:`probe_seed`, :func:`probe_starts`), which is revealed after the host committed, so the
host cannot tune its Δ to the probe batch. The chain records the decided gain as integer
micro-nats (:func:`gain_micro`); every proposer then leaves out of the aggregate an accepted Δ
whose gain is below its peers' by more than the run's margin (:func:`probe_outliers`), a pure
function of those integers.

Everything here is deterministic: windows from a SHA-256 stream, the model in eval mode, a fixed
batch of :data:`PROBE_BATCH` windows per forward pass and the sum in float64 in a fixed order, so
two validators of one compute class post the same integer; the outlier rule is exact rational
arithmetic on integers, the same in any arrival order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from protocol.rules.hashing import DIGEST_SIZE, Tag, tagged_hash, u64be
from protocol.rules.sampling import Stream, uniform
from protocol.rules.spec import RunSpec
from trainer.data import Dataset
from trainer.peer_bound import DELTA_PEER_MIN, PeerBound, within_peer_bound

PROBE_BATCH = 64
"""Windows per forward pass. Fixed, because the float sum of a batch depends on its size: every
validator must post the same integer for the same model."""

PROBE_SCALE = 0.25
"""How far along −Δ̂ the probe scores (``probe_gain``'s ``scale``): a quarter of the way to the
host's own end model, about where one of 4 Δs moves the agreed model (outer lr 0.7 × (1 + 0.9
Nesterov) / 4 = 0.33). At scale 1 the honest gains spread 2–10× more, and a forger mixed down to
sit inside the margin there did +0.04–0.047 nats (docs/verification.md, "The probe")."""

PROBE_RELATIVE_BPS = 500
"""Besides the run's absolute margin, :func:`probe_outliers` allows a gain this many basis points (5 %)
of a positive median below it. From θ_0 every gain is large (1.5–1.6 nats at scale 0.25) and honest
hosts spread by up to 1.6 % of it (0.026 nats at demo, above an absolute margin that later epochs,
with gains of 0.03–0.2, need); later it adds at most 0.01 nats."""

GAIN_MICRO_BOUND = 10**12
""":func:`gain_micro` clamps to ``[−GAIN_MICRO_BOUND, GAIN_MICRO_BOUND]`` micro-nats (±10⁶ nats per
byte, far beyond any model's loss; an i64 holds it and JSON numbers below 2⁵³ carry it exactly). A
gain that is not a number (the probed model's loss is NaN or infinite) counts as the lower bound:
such a Δ earns no credit."""


PROBE_MARGIN_TIMES_TOPK2 = 3
"""In a ``topk2`` epoch the allowance's absolute part is this many times ``aggregation.probe_margin``
(:func:`probe_rule`) unless the run sets ``aggregation.probe_margin_topk2``. Honest ``topk2`` gains
spread by an amount that hardly scales with the median: each host's Δ̂ carries the top of its own
error-feedback residual, mass from earlier epochs whose effect at θ_e differs from host to host (it
turns harmful as training moves on: down to −0.45 nats at scale 0.25 by epoch 7 at demo). Measured
at tiny and demo (8 epochs, 4 hosts, 3 seeds, both outer steps, 384 host-epochs;
``bench/topk2_probe.py``): the largest honest deficit 0.043 nats, 1.67× the int8 allowance; 0.66 of
this rule's (docs/verification.md, "The probe in topk2 epochs")."""

PROBE_RELATIVE_BPS_TOPK2 = PROBE_RELATIVE_BPS
"""The relative share of the allowance in a ``topk2`` epoch: the dense schemes' 5 % of a positive
median (with :data:`PROBE_MARGIN_TIMES_TOPK2`, :func:`probe_rule`). It was 20 % until 2026-11-28,
for θ_0's sparsity spread (gains of about 0.1 nats spread by up to 24 %), but the absolute part
already covers that (0.024 nats against 0.065), and every percent above what honest hosts need is
room a forger blends into: over the same 384 honest host-epochs the worst honest host is 0.66 of
0.06 + 5 % (0 exclusions) against 0.52 of 0.06 + 20 %."""


def probe_applies(spec: RunSpec, epoch: int) -> bool:
    """Whether epoch ``epoch``'s Δs are probed and the probe rule applies: ``verification.probe_windows``
    > 0, whatever the epoch's scheme (a ``topk2`` epoch with its own allowance, :func:`probe_rule`)."""
    return spec.verification.probe_windows > 0


def probe_rule(spec: RunSpec, epoch: int) -> tuple[int, int]:
    """``(margin_micro, relative_bps)`` of :func:`probe_allowance` for epoch ``epoch``'s scheme:
    ``aggregation.probe_margin`` and :data:`PROBE_RELATIVE_BPS`, or in a ``topk2`` epoch
    ``aggregation.probe_margin_topk2`` (when the run sets it, else :data:`PROBE_MARGIN_TIMES_TOPK2` ×
    ``probe_margin``) and :data:`PROBE_RELATIVE_BPS_TOPK2`."""
    agg = spec.aggregation
    if spec.quantization.at(epoch).scheme == "topk2":
        topk2 = agg.probe_margin_topk2_micro
        margin = PROBE_MARGIN_TIMES_TOPK2 * agg.probe_margin_micro if topk2 is None else topk2
        return margin, PROBE_RELATIVE_BPS_TOPK2
    return agg.probe_margin_micro, PROBE_RELATIVE_BPS


def probe_seed(beacon: bytes, epoch: int) -> bytes:
    """The probe's seed for ``epoch``: ``H("probe/seed", beacon || u64be(epoch))``.

    ``beacon`` is the epoch's beacon (the seed the challenges are drawn from, revealed after the
    hosts committed). The tag separates the probe's draw from every challenge draw made from the
    same beacon (``sample/segments``, ``sample/pickers``, ``sample/picks``).

    Raises:
        ValueError: ``beacon`` is not 32 bytes, or ``epoch`` is not in ``[0, 2⁶⁴)``.
    """
    if not isinstance(beacon, bytes) or len(beacon) != DIGEST_SIZE:
        raise ValueError(f"beacon must be {DIGEST_SIZE} bytes")
    if not isinstance(epoch, int) or isinstance(epoch, bool) or not 0 <= epoch < 1 << 64:
        raise ValueError("epoch must be an integer in [0, 2^64)")
    return tagged_hash(Tag.PROBE_SEED, beacon, u64be(epoch))


def probe_starts(dataset: Dataset, seed: bytes, windows: int) -> list[int]:
    """``windows`` distinct window starts in the validation split, drawn from ``seed``.

    Draws are ``uniform(Stream("sample/probe", seed), len(val) − seq_len)`` in order, a start that
    was already drawn is skipped; the starts are returned in the order drawn.

    Raises:
        ValueError: ``seed`` is not 32 bytes, ``windows`` < 1, or the split has fewer than
            ``windows`` distinct starts.
    """
    if not isinstance(seed, bytes) or len(seed) != DIGEST_SIZE:
        raise ValueError(f"seed must be {DIGEST_SIZE} bytes")
    span = len(dataset.val) - dataset.seq_len  # valid starts: 0 .. span - 1
    if not isinstance(windows, int) or isinstance(windows, bool) or not 1 <= windows <= span:
        raise ValueError(f"windows must be an integer in [1, {span}]")
    return _distinct_starts(seed, span, windows, set())


def _distinct_starts(seed: bytes, span: int, count: int, skip: set[int]) -> list[int]:
    """``count`` distinct starts in ``[0, span)`` drawn from ``seed``'s stream, none in ``skip``, in
    the order drawn (the caller has checked that enough exist)."""
    stream = Stream(Tag.SAMPLE_PROBE, seed)
    seen = set(skip)
    out: list[int] = []
    while len(out) < count:
        s = uniform(stream, span)
        if s not in seen:
            seen.add(s)
            out.append(s)
    return out


def check_probe_windows(dataset: Dataset, windows: int) -> None:
    """Refuse a run whose validation split cannot hold the probe's ``windows`` windows and, disjoint
    from them, a gain dispute's as many again (:func:`dispute_starts`): ``2 · windows`` distinct
    starts. ``windows`` 0 (the probe off) always passes.

    Raises:
        ValueError: it cannot, naming both numbers and the way out.
    """
    span = len(dataset.val) - dataset.seq_len
    if windows > 0 and 2 * windows > span:
        raise ValueError(f"verification.probe_windows = {windows} needs 2 × {windows} = {2 * windows} distinct "
                         f"validation windows (the probe's and a gain dispute's, disjoint), but this corpus's "
                         f"validation split has {max(span, 0)} window starts: lower probe_windows to at most "
                         f"{max(span, 0) // 2} or raise data.val_fraction")


def dispute_seed(beacon: bytes, epoch: int, host: str) -> bytes:
    """The seed of ``host``'s dispute windows in ``epoch``: ``H("probe/dispute", beacon || u64be(epoch)
    || host)``.

    A **gain dispute** (the round-0 ``pass``es on a host's last segment opened different gains) asks
    its final question on other windows than the probe's: those gains are public when the final round
    commits, so a gain on the same windows could be copied; nobody has opened one on these.

    Raises:
        ValueError: as :func:`probe_seed`, or an empty or non-ASCII ``host``.
    """
    if not isinstance(host, str) or not host or not host.isascii():
        raise ValueError("host must be a non-empty ASCII address")
    probe_seed(beacon, epoch)  # the same checks
    return tagged_hash(Tag.PROBE_DISPUTE, beacon, u64be(epoch), host.encode())


def dispute_starts(dataset: Dataset, beacon: bytes, epoch: int, host: str, windows: int) -> list[int]:
    """``host``'s ``windows`` dispute windows in ``epoch``: starts drawn as :func:`probe_starts` draws
    them, from :func:`dispute_seed`, skipping every start of the epoch's probe windows (so the two draws
    share no window) and repeats; in the order drawn.

    Raises:
        ValueError: as :func:`dispute_seed`, or the split has fewer than ``2 · windows`` distinct starts.
    """
    seed = dispute_seed(beacon, epoch, host)
    span = len(dataset.val) - dataset.seq_len
    if not isinstance(windows, int) or isinstance(windows, bool) or not 1 <= 2 * windows <= span:
        raise ValueError(f"windows must be an integer in [1, {span // 2}]")
    return _distinct_starts(seed, span, windows, set(probe_starts(dataset, probe_seed(beacon, epoch), windows)))


def _check_params(model: nn.Module, params: Mapping[str, torch.Tensor], what: str) -> None:
    named = dict(model.named_parameters())
    if set(params) != set(named):
        raise ValueError(f"{what} must name exactly the model's parameters")
    for name, value in params.items():
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != tuple(named[name].shape):
            raise ValueError(f"{what}[{name!r}] must be a tensor of shape {tuple(named[name].shape)}")


@torch.no_grad()
def probe_loss(model: nn.Module, dataset: Dataset, params: Mapping[str, torch.Tensor], starts: list[int]) -> float:
    """Mean cross-entropy (nats per byte) of ``model`` with ``params`` on the validation windows at
    ``starts``, in eval mode, :data:`PROBE_BATCH` windows per pass, summed in float64 in order.
    ``model``'s own parameters and mode are left as they were."""
    if not starts:
        raise ValueError("starts must not be empty")
    span = len(dataset.val) - dataset.seq_len
    if any(not isinstance(s, int) or isinstance(s, bool) or not 0 <= s < span for s in starts):
        raise ValueError(f"every start must be an integer in [0, {span})")
    _check_params(model, params, "params")
    device = next(model.parameters()).device
    on_device = {n: t.to(device, torch.float32) for n, t in params.items()}
    was_training = model.training
    model.eval()
    try:
        total = 0.0
        for i in range(0, len(starts), PROBE_BATCH):
            x, y = (t.to(device) for t in dataset.windows(starts[i:i + PROBE_BATCH], split="val"))
            logits = functional_call(model, on_device, (x,))
            total += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)).double(), y.reshape(-1),
                                           reduction="sum"))
    finally:
        model.train(was_training)
    return total / (len(starts) * dataset.seq_len)


def probed_params(start: Mapping[str, torch.Tensor], delta: Mapping[str, torch.Tensor],
                  scale: float = 1.0) -> dict[str, torch.Tensor]:
    """``start − scale · delta`` per parameter in float32 (the model the probe scores)."""
    if set(start) != set(delta):
        raise ValueError("start and delta must name the same parameters")
    return {n: start[n].to(torch.float32) - scale * delta[n].to(torch.float32) for n in sorted(start)}


def probe_gain(model: nn.Module, dataset: Dataset, start: Mapping[str, torch.Tensor],
               delta: Mapping[str, torch.Tensor], starts: list[int], scale: float = 1.0,
               base: float | None = None) -> float:
    """``L(start) − L(start − scale · delta)`` on the validation windows at ``starts`` (mean nats per
    byte, :func:`probe_loss`): how much the committed Δ improves the agreed model, from where the
    epoch started. Δ = θ_e − θ_S, so at ``scale`` 1 it scores the host's own end model.

    Args:
        model: the run's model (its parameters are not read or changed).
        dataset: the run's dataset.
        start: θ_e, the epoch's agreed model.
        delta: the host's committed Δ, dequantized.
        starts: the probe's windows (:func:`probe_starts`).
        scale: how far along −Δ to probe (> 0, finite).
        base: ``L(start)`` on ``starts`` when already computed (a validator probes several hosts
            from one θ_e); ``None``: computed here.

    Raises:
        ValueError: names or shapes that are not the model's, an empty or out-of-range ``starts``,
            or a ``scale`` that is not positive and finite.
    """
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not (math.isfinite(scale) and scale > 0):
        raise ValueError("scale must be a positive finite number")
    _check_params(model, delta, "delta")
    l0 = probe_loss(model, dataset, start, starts) if base is None else base
    return l0 - probe_loss(model, dataset, probed_params(start, delta, scale), starts)


def gain_micro(gain: float) -> int:
    """``gain`` in integer micro-nats, rounded half to even, clamped to ±:data:`GAIN_MICRO_BOUND`
    (NaN counts as the lower bound)."""
    if gain != gain:
        return -GAIN_MICRO_BOUND
    scaled = gain * 1_000_000
    if not -GAIN_MICRO_BOUND < scaled < GAIN_MICRO_BOUND:  # ±inf too
        return GAIN_MICRO_BOUND if scaled > 0 else -GAIN_MICRO_BOUND
    return round(scaled)  # half to even


def _median(values: list[Fraction]) -> Fraction:
    """The lower median: of an even count, the lower of the two middle values, never their mean.
    With the mean, half the hosts posting high gains (a Δ tuned down the public validation loss)
    would lift the reference above every honest gain and leave all the honest Δs out."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def _references(gains: Mapping[str, int], segments: Mapping[str, int] | None) -> dict[str, Fraction]:
    """Per host, the median of its peers' gains as it is compared with them (:func:`probe_outliers`)."""
    hosts = sorted(gains)
    out: dict[str, Fraction] = {}
    for h in hosts:
        if segments is None:
            ref = [Fraction(gains[p]) for p in hosts]
        else:
            mine = segments[h]
            ref = [min(Fraction(gains[p]), Fraction(gains[p] * mine, segments[p])) if segments[p] > mine
                   else Fraction(gains[p]) for p in hosts]
        out[h] = _median(ref)
    return out


def probe_deficits(gains: Mapping[str, int], segments: Mapping[str, int] | None = None) -> dict[str, Fraction]:
    """How far each host's gain is below the median of its peers' gains as :func:`probe_outliers`
    compares them (negative: above it), exactly. No checks: :func:`probe_outliers` validates."""
    return {h: median - gains[h] for h, median in _references(gains, segments).items()}


def probe_allowance(median: Fraction | int, margin_micro: int, relative_bps: int = PROBE_RELATIVE_BPS) -> Fraction:
    """How far below ``median`` a gain may be: ``margin_micro`` plus ``relative_bps`` basis points of a
    positive median (:data:`PROBE_RELATIVE_BPS` for a dense scheme; an epoch's own:
    :func:`probe_rule`)."""
    return margin_micro + max(Fraction(median), Fraction(0)) * relative_bps / 10_000


def probe_outliers(gains: Mapping[str, int], margin_micro: int, segments: Mapping[str, int] | None = None,
                   min_peers: int = DELTA_PEER_MIN, relative_bps: int = PROBE_RELATIVE_BPS) -> set[str]:
    """The hosts whose probe gain is below the median of all gains by more than the allowance:
    ``margin_micro`` plus :data:`PROBE_RELATIVE_BPS` of the median when it is positive
    (:func:`probe_allowance`).

    Host ``h`` is left out when ``gains[h] < m_h − allowance(m_h)``, ``m_h`` the median over every
    host of ``gains`` (``h`` among them) of its peers' gains as ``h`` is compared with them: a peer
    ``p`` that trained more segments than ``h`` counts at ``min(g_p, g_p · s_h / s_p)``, every other
    peer at ``g_p``. So a partial host is never left out for training less: a positive gain is
    scaled down by the share of segments (the gain of a shorter run of the same training, at most
    proportional where loss falls fastest first), and a negative one is never raised. A whole host
    among partial peers is compared with their smaller gains as they are, which only favours it.
    Equal segments (or ``None``) give the plain median (:func:`probe_deficits`). Of an even count
    the median is the lower middle gain (:func:`_median`), so hosts that are no majority cannot lift
    it above every honest gain.

    Exact: integers and :class:`fractions.Fraction`, so every proposer leaves out the same hosts in
    any order of ``gains``. Fewer than ``min_peers`` gains: nobody is left out (with two, each is the
    other's only peer).

    Raises:
        ValueError: a gain or ``margin_micro`` that is not an integer, a negative margin, a gain
            beyond ±:data:`GAIN_MICRO_BOUND`, or ``segments`` without every host at >= 1.
    """
    if not isinstance(margin_micro, int) or isinstance(margin_micro, bool) or margin_micro < 0:
        raise ValueError("margin_micro must be a non-negative integer")
    for h, g in gains.items():
        if not isinstance(g, int) or isinstance(g, bool) or abs(g) > GAIN_MICRO_BOUND:
            raise ValueError(f"the gain of {h!r} must be an integer within ±{GAIN_MICRO_BOUND}")
    if segments is not None and any(not isinstance(segments.get(h), int) or isinstance(segments.get(h), bool)
                                    or segments[h] < 1 for h in gains):
        raise ValueError("segments must give every host at least 1 segment")
    if not isinstance(relative_bps, int) or isinstance(relative_bps, bool) or not 0 <= relative_bps <= 10_000:
        raise ValueError("relative_bps must be an integer in [0, 10000]")
    if len(gains) < max(min_peers, 1):
        return set()
    return {h for h, m in _references(gains, segments).items()
            if m - gains[h] > probe_allowance(m, margin_micro, relative_bps)}


def probe_gains(model: nn.Module, dataset: Dataset, start: Mapping[str, torch.Tensor],
                deltas: Mapping[str, Mapping[str, torch.Tensor]], starts: list[int], scale: float = 1.0
                ) -> dict[str, int]:
    """Every host's :func:`probe_gain` of its Δ from ``start``, in micro-nats (:func:`gain_micro`),
    ``L(start)`` computed once: what the validators of each host's last segment post."""
    base = probe_loss(model, dataset, start, starts)
    return {h: gain_micro(probe_gain(model, dataset, start, deltas[h], starts, scale, base=base))
            for h in sorted(deltas)}


def decided_gains(gains: Mapping[str, int | None]) -> dict[str, int]:
    """The gains the probe rule compares, from the chain's decided ones (``aggregation_inputs``): a
    host the chain decided no gain for counts at the lowest gain, −:data:`GAIN_MICRO_BOUND`, so it is
    left out whenever its peers have gains. Otherwise a host could skip the rule by keeping its last
    segment from an opened ``pass`` (all its seats silent after committing, or a trap there, which
    an honest host draws in 1 epoch in 5·S: it is then only left out of that aggregate, still
    accepted and paid)."""
    return {h: -GAIN_MICRO_BOUND if g is None else g for h, g in gains.items()}


def admitted(deltas: Mapping[str, Mapping[str, torch.Tensor]], gains: Mapping[str, int] | None = None,
             margin_micro: int = 0, segments: Mapping[str, int] | None = None, clip: bool = True,
             relative_bps: int = PROBE_RELATIVE_BPS) -> PeerBound:
    """What every proposer aggregates of the accepted Δs: the peer bound (how far a Δ moves,
    :func:`trainer.peer_bound.within_peer_bound`) and the probe (what it does to the model,
    :func:`probe_outliers` on the decided gains); a Δ either rule leaves out is left out, the
    small tensors of the rest clipped. ``gains`` ``None``: the probe is off (the peer bound alone).

    Raises:
        ValueError: ``gains`` lacks a host of ``deltas``, or as :func:`probe_outliers`.
    """
    out: set[str] = set()
    if gains is not None:
        if any(h not in gains for h in deltas):
            raise ValueError("gains must hold every accepted Δ's host")
        out = probe_outliers({h: gains[h] for h in deltas}, margin_micro, segments, relative_bps=relative_bps)
    return within_peer_bound(deltas, clip, segments, exclude=out)
