"""The peer bound with mostly partial hosts (issue 30): Δs of hosts that trained different numbers
of segments, from real training at a shrunk tiny preset (H = 16 in S = 4 segments of 4 steps, 4
hosts from θ_0: a few seconds).

An honest host that trained all S segments moves about twice as far as one that stopped after S/2
(measured here: its ``head.weight`` 2.07× the median of three S/2 Δs, 4.37× of three S/4 ones),
so compared with raw norms it is left out when most accepted hosts are partial. With the segments
each Δ covers (``segments``), a host is compared with its peers' norms scaled up by its segments
over theirs."""

from __future__ import annotations

import math

import pytest
import torch

from protocol.rules.beacon import genesis_seed
from trainer.delta import pseudo_gradient
from trainer.outer import GlobalState
from trainer.presets import tiny
from trainer.step import Stepper, TrainState, epoch_rng_key

HOSTS = [f"host{i}" for i in range(4)]
SEGMENTS = 4


@pytest.fixture(scope="module")
def trained(load_dataset) -> dict[int, dict[str, dict[str, torch.Tensor]]]:
    """segments s -> host -> the honest Δ after its first s segments (a partial epoch stops there)."""
    spec = tiny("peer-partial").with_changes(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8})
    dataset = load_dataset(spec.data)
    theta = GlobalState.initial(spec)
    stepper, run = Stepper(spec), spec.run_id()
    c = spec.train.segment_steps
    out: dict[int, dict[str, dict[str, torch.Tensor]]] = {s: {} for s in range(1, SEGMENTS + 1)}
    for host in HOSTS:
        stepper.load(TrainState.fresh(dict(theta.params), epoch_rng_key(spec.train.seed, 0)))
        for t in range(spec.train.inner_steps):
            x, y = dataset.batch(run, genesis_seed(run), host, t, spec.train.batch_size)
            stepper.step(x, y)
            if (t + 1) % c == 0:
                out[(t + 1) // c][host] = pseudo_gradient(theta.params, stepper.export().params)
    return out


def _mix(trained, segments: list[int]) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, int]]:
    return {h: trained[s][h] for h, s in zip(HOSTS, segments, strict=True)}, dict(zip(HOSTS, segments, strict=True))


@pytest.mark.parametrize("partial", [1, 2])
def test_an_honest_whole_epoch_among_partial_ones_is_kept_when_segments_count(trained, partial) -> None:
    from verifier.measure import peer_excess, within_peer_bound

    deltas, segments = _mix(trained, [partial, partial, partial, SEGMENTS])
    # Raw norms: the whole epoch's Δ is beyond 1.5× the partial hosts' median, an honest host left out.
    raw = peer_excess(deltas)
    assert raw["host3"][0] > 1 and all(raw[h][0] <= 1 for h in HOSTS[:3])
    assert set(within_peer_bound(deltas).left_out) == {"host3"}
    # Per segments trained: every honest Δ within the bound, and none of its tensors clipped.
    fair = peer_excess(deltas, segments=segments)
    assert all(fair[h][0] <= 1 for h in HOSTS), fair
    bound = within_peer_bound(deltas, segments=segments)
    assert list(bound.kept) == HOSTS and not bound.left_out
    assert "host3" not in bound.clipped
    # The partial hosts are compared as before: their peers trained as many segments or more.
    assert {h: fair[h] for h in HOSTS[:3]} == {h: raw[h] for h in HOSTS[:3]}


def test_a_partial_host_among_whole_ones_is_compared_as_before(trained) -> None:
    from verifier.measure import peer_excess

    deltas, segments = _mix(trained, [SEGMENTS // 2, SEGMENTS, SEGMENTS, SEGMENTS])
    fair = peer_excess(deltas, segments=segments)
    # Its smaller Δ against the whole epochs' median, never scaled down: as before, within by a
    # margin; the whole hosts count its norm × 2 in their medians, and stay within too.
    assert fair["host0"] == peer_excess(deltas)["host0"] and fair["host0"][0] < 0.9
    assert all(fair[h][0] <= 1 for h in HOSTS)


def test_a_forged_whole_epoch_among_partial_ones_is_still_left_out(trained) -> None:
    from verifier.measure import peer_excess

    deltas, segments = _mix(trained, [SEGMENTS // 2] * 3 + [SEGMENTS])
    # What the rule admits: factor × (S / s) × the partial hosts' median, per tensor.
    forged = dict(deltas)
    forged["host3"] = {n: t * 2.5 for n, t in deltas["host3"].items()}
    found = peer_excess(forged, segments=segments)
    assert found["host3"][0] > 1 and all(found[h][0] <= 1 for h in HOSTS[:3])
    honest = peer_excess(deltas, segments=segments)["host3"][0]
    assert honest <= 1 and found["host3"][0] == pytest.approx(2.5 * honest, rel=1e-9)


def test_the_scaled_bound_is_deterministic_and_refuses_bad_segments(trained) -> None:
    from verifier.measure import peer_excess, within_peer_bound

    deltas, segments = _mix(trained, [1, 2, 3, SEGMENTS])
    found = peer_excess(deltas, segments=segments)
    shuffled = dict(reversed(list(deltas.items())))
    assert peer_excess(shuffled, segments=dict(reversed(list(segments.items())))) == found
    # Equal segments: the raw rule, bit for bit.
    whole = trained[SEGMENTS]
    assert peer_excess(whole, segments=dict.fromkeys(HOSTS, SEGMENTS)) == peer_excess(whole)
    kept = within_peer_bound(whole, segments=dict.fromkeys(HOSTS, 2)).kept
    plain = within_peer_bound(whole).kept
    assert all(torch.equal(kept[h][n], plain[h][n]) for h in HOSTS for n in plain[h])
    for bad in ({**segments, "host0": 0}, {h: s for h, s in segments.items() if h != "host1"}):
        with pytest.raises(ValueError, match="at least 1 segment"):
            peer_excess(deltas, segments=bad)
        with pytest.raises(ValueError, match="at least 1 segment"):
            within_peer_bound(deltas, segments=bad)
    assert math.isfinite(found["host3"][0])
