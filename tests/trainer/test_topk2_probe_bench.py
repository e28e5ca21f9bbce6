"""The pure parts of ``bench/topk2_probe.py``'s pipelined schedule and partial host.

``next_states``: which model the next epoch trains from and which one settles, synchronous and
pipelined (the optimistic start over every committed Δ within the peer bound, the settled model
over what the probe rule admits). ``parse_partial``: the segments per host of ``--partial H:s``.
``summarize``: the table row of a group of runs (``bench/topk2_probe_summary.py``).
No training: small made-up Δs of the tiny model's shapes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(_ROOT))  # the repository root, for bench/

from bench.probe_check import address  # noqa: E402
from bench.topk2_probe import next_states, parse_partial, topk2_spec  # noqa: E402
from bench.topk2_probe_summary import attack_table, summarize  # noqa: E402
from protocol.tensors.aggregation import aggregate  # noqa: E402
from trainer.model import parameter_shapes  # noqa: E402
from trainer.outer import GlobalState, outer_step  # noqa: E402

HOSTS = ["h0", "h1", "h2", "h3"]


def _deltas(spec) -> dict[str, dict[str, torch.Tensor]]:
    """Four Δs within the peer bound of each other: one direction, sizes 1.0–1.3."""
    g = torch.Generator().manual_seed(0)
    base = {n: 1e-3 * torch.randn(tuple(s), generator=g) for n, s in parameter_shapes(spec).items()}
    return {h: {n: (1 + 0.1 * i) * t for n, t in base.items()} for i, h in enumerate(HOSTS)}


def _equal(a: GlobalState, b: GlobalState) -> bool:
    return all(torch.equal(a.params[n], b.params[n]) for n in a.params)


@pytest.fixture(scope="module")
def spec():
    return topk2_spec("tiny", 1024, "1", "sgd")


def test_a_probe_outlier_is_in_the_pipelined_start_but_not_the_settled_model(spec) -> None:
    sent, settled = _deltas(spec), GlobalState.initial(spec)
    segments = dict.fromkeys(HOSTS, spec.train.segments)
    gains = {"h0": -500_000, "h1": 100_000, "h2": 100_000, "h3": 100_000}  # h0 far below: left out
    sync_settled, sync_start, kept = next_states(spec, 1, settled, sent, gains, segments, "synchronous")
    pipe_settled, pipe_start, _ = next_states(spec, 1, settled, sent, gains, segments, "pipelined")
    assert kept.excluded == {"h0"} and not kept.left_out
    admitted_only = {h: sent[h] for h in HOSTS if h != "h0"}
    expected_settled = outer_step(settled, aggregate(spec.aggregation, admitted_only), spec.outer)
    expected_start = outer_step(settled, aggregate(spec.aggregation, sent), spec.outer)
    assert _equal(sync_settled, expected_settled) and _equal(pipe_settled, expected_settled)
    assert _equal(sync_start, expected_settled)  # synchronous: the next epoch trains from the settled model
    assert _equal(pipe_start, expected_start)  # pipelined: from every committed Δ, the outlier's too
    assert not _equal(pipe_start, pipe_settled)


def test_without_an_outlier_both_schedules_start_from_the_settled_model(spec) -> None:
    sent, settled = _deltas(spec), GlobalState.initial(spec)
    segments = dict.fromkeys(HOSTS, spec.train.segments)
    gains = dict.fromkeys(HOSTS, 100_000)
    sync_settled, sync_start, _ = next_states(spec, 1, settled, sent, gains, segments, "synchronous")
    pipe_settled, pipe_start, _ = next_states(spec, 1, settled, sent, gains, segments, "pipelined")
    assert _equal(sync_start, sync_settled) and _equal(pipe_start, pipe_settled) and _equal(pipe_start, sync_start)


def test_a_partial_host_is_weighed_and_compared_by_its_segments(spec) -> None:
    sent, settled = _deltas(spec), GlobalState.initial(spec)
    whole = spec.train.segments
    segments = {**dict.fromkeys(HOSTS, whole), "h1": whole // 2}
    # h1's gain is half its peers': below their median by more than the allowance if compared as a
    # whole host, but not once their gains are scaled to its segments.
    gains = {"h0": 400_000, "h1": 200_000, "h2": 400_000, "h3": 400_000}
    new, _, kept = next_states(spec, 1, settled, sent, gains, segments, "synchronous")
    assert not kept.excluded
    weights = {**dict.fromkeys(HOSTS, whole), "h1": whole // 2}
    assert _equal(new, outer_step(settled, aggregate(spec.aggregation, sent, weights), spec.outer))
    _, _, as_whole = next_states(spec, 1, settled, sent, gains, dict.fromkeys(HOSTS, whole), "synchronous")
    assert as_whole.excluded == {"h1"}


def test_parse_partial() -> None:
    assert parse_partial(None, HOSTS, 8) == dict.fromkeys(HOSTS, 8)
    assert parse_partial("1:4", HOSTS, 8) == {"h0": 8, "h1": 4, "h2": 8, "h3": 8}
    assert parse_partial("3:8", HOSTS, 8)["h3"] == 8
    for bad in ("1", "1:", ":4", "a:4", "4:4", "1:0", "1:9", "-1:4"):
        with pytest.raises(ValueError):
            parse_partial(bad, HOSTS, 8)


def test_summarize_counts_the_partial_hosts_exclusions_and_ratios() -> None:
    # Rule 0.06 + 5 %: a host at median 1.0 nats may be 0.11 below it.
    def row(gains: list[int], deficits: list[int], left: list[int]) -> dict:
        return {"gains": {"sent": gains}, "deficits": deficits, "rule_left_out": [address(i) for i in left],
                "worst": {"sent": [max(deficits) / 50_000, 0, 0]}}  # the bench's own int8 figure, passed on

    run = {"spec": {"rule": [60_000, 500], "segments": [8, 4, 8, 8]}, "attacks": [],
           "rows": [row([1_000_000, 1_000_000, 945_000, 1_000_000], [0, -500_000, 55_000, 0], []),
                    row([1_000_000, 300_000, 1_000_000, 1_000_000], [0, 200_000, 0, 0], [1])]}
    found = summarize([run])
    assert found["host_epochs"] == 8 and found["excluded"] == 1
    assert found["worst_over_allowance"] == pytest.approx(200_000 / (60_000 + 0.05 * 500_000))
    assert found["largest_deficit"] == pytest.approx(0.2)
    assert found["worst_over_int8"] == pytest.approx(4.0)
    partial = found["partial"]
    assert (partial["host"], partial["segments"], partial["of"], partial["excluded"]) == (1, 4, 8, 1)
    assert partial["largest_deficit"] == pytest.approx(0.2)
    assert partial["gain_share"] == [0.3, 0.65]  # 1.0 / 1.0, then 0.3 / 1.0
    whole = summarize([{**run, "spec": {**run["spec"], "segments": [8] * 4}}])
    assert whole["partial"] is None
    assert summarize([{**run, "rows": run["rows"][:1]}])["worst_over_allowance"] == pytest.approx(0.5)


def test_attack_table_counts_exclusions_and_pairs_each_blend_with_its_attack() -> None:
    def row(epoch: int, attack: str, probe: bool, damage: float, peer_only: float, **more) -> dict:
        return {"epoch": epoch, "attack": attack, "gain_sent": -1, "floor": 5, "probe_left_out": probe,
                "peer_left_out": False, "damage_probe_centered_clip": damage, "damage_probe_mean": damage,
                "damage_peer_only_centered_clip": peer_only, "damage_peer_only_mean": peer_only, **more}

    run = {"attacks": [row(0, "jump:1", True, -0.01, 0.3), row(0, "jump:1+blend", False, 0.04, 0.04, **{"lambda": 0.2}),
                       row(1, "jump:1", False, 0.05, 0.05), row(1, "sign", True, 0.0, 0.1),
                       row(1, "sign+blend-own", True, -0.01, 0.02, **{"lambda": 0.5})]}
    jump, sign = attack_table(run)
    assert (jump["attack"], jump["epochs"], jump["probe_left_out"]) == ("jump:1", 2, 1)
    assert jump["worst_peer_only"] == [0.3, 0.3]
    assert jump["admitted"] == [{"epoch": 1, "damage": [0.05, 0.05]}]
    assert [b["lambda"] for b in jump["blends"]] == [0.2]
    assert (sign["epochs"], sign["probe_left_out"], sign["admitted"]) == (1, 1, [])
    assert sign["blends"][0]["left_out"] is True
    assert (jump["tuned"], sign["tuned"]) == ("oracle", "public windows")
