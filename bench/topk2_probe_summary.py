"""One table row per configuration from ``bench/topk2_probe.py``'s honest runs (their ``--json``).

Per group of runs (the same preset, schedule and segments, several seeds): the host-epochs, the
honest exclusions under the ``topk2`` rule the runs applied (``rule_left_out``), the worst deficit
over its allowance (``trainer.probe.probe_allowance``) and the largest deficit in nats, the same for
the partial host alone, and whether the partial host was ever left out. Runs with ``--attacks``: one
row per run and attack (:func:`attack_table`).

Run: ``PYTHONPATH=. .venv/bin/python bench/topk2_probe_summary.py /tmp/s11pp/*.json``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench.*

# The bench's host addresses.
from bench.probe_check import address
from trainer.probe import probe_allowance, probe_deficits


def deficits(row: dict[str, Any]) -> list[Fraction]:
    """Per host (in the run's order), how far its Δ̂'s gain is below the median it was compared with:
    as the run recorded it, or, for a run from before the bench recorded deficits (every host whole),
    from its gains (``trainer.probe.probe_deficits``)."""
    if "deficits" in row:
        return [Fraction(d) for d in row["deficits"]]
    gains = {address(i): int(g) for i, g in enumerate(row["gains"]["sent"])}
    computed = probe_deficits(gains)
    return [computed[address(i)] for i in range(len(gains))]


def host_ratios(row: dict[str, Any], margin: int, bps: int) -> list[Fraction]:
    """Per host (in the run's order), its Δ̂'s deficit over the allowance at the median it was compared
    with (the gain plus the deficit)."""
    return [d / probe_allowance(g + d, margin, bps) for g, d in zip(row["gains"]["sent"], deficits(row), strict=True)]


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of one group of runs (see the module's docstring); ``partial`` None when every
    host trained whole."""
    margin, bps = runs[0]["spec"]["rule"]
    segments = runs[0]["spec"]["segments"]
    part = next((i for i, s in enumerate(segments) if s < max(segments)), None)
    ratios: list[Fraction] = []
    largest: list[Fraction] = []
    part_ratios: list[Fraction] = []
    part_deficits: list[Fraction] = []
    shares: list[float] = []
    left, part_left = 0, 0
    host_epochs, int8 = 0, 0.0
    for run in runs:
        for row in run["rows"]:
            r, d = host_ratios(row, margin, bps), deficits(row)
            host_epochs += len(r)
            ratios += r
            largest += d
            left += len(row["rule_left_out"])
            int8 = max(int8, row["worst"]["sent"][0])  # over the bench's --margin + 5 % (int8's rule)
            if part is not None:
                part_ratios.append(r[part])
                part_deficits.append(d[part])
                part_left += int(address(part) in row["rule_left_out"])
                whole = sorted(g for i, g in enumerate(row["gains"]["sent"]) if i != part)
                if whole[(len(whole) - 1) // 2] > 0:  # its gain over its whole peers' lower median
                    shares.append(row["gains"]["sent"][part] / whole[(len(whole) - 1) // 2])
    out: dict[str, Any] = {"host_epochs": host_epochs, "excluded": left, "worst_over_allowance": float(max(ratios)),
                           "largest_deficit": float(max(largest)) / 1e6, "worst_over_int8": int8, "partial": None}
    if part is not None:
        out["partial"] = {"host": part, "segments": segments[part], "of": max(segments),
                          "worst_over_allowance": float(max(part_ratios)),
                          "largest_deficit": float(max(part_deficits)) / 1e6, "excluded": part_left,
                          "gain_share": [round(min(shares), 2), round(statistics.median(shares), 2)]}
    return out


def attack_table(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Per attack of one ``--attacks`` run, in the order first met: the epochs, how many the probe
    and the peer bound left out, the forger's Δ̂ gain and floor per epoch (µnats), the worst damage
    with the peer bound alone (in a pipelined run, what the optimistic start takes) and, where the
    probe admitted it, with the probe, and the blends' damage and λ per epoch (damage: nats,
    ``centered_clip`` and ``mean``)."""
    out: dict[str, dict[str, Any]] = {}
    for row in run["attacks"]:
        name, blend = row["attack"], ""
        for suffix in ("+blend-own", "+blend"):
            if name.endswith(suffix):
                name, blend = name[: -len(suffix)], suffix
                break
        a = out.setdefault(name, {"attack": name, "epochs": 0, "probe_left_out": 0, "peer_left_out": 0, "gains": [],
                                  "worst_peer_only": [-1e9, -1e9], "admitted": [], "blends": [], "tuned": "—"})
        damage = [row["damage_probe_centered_clip"], row["damage_probe_mean"]]
        if blend:
            a["tuned"] = "public windows" if blend == "+blend-own" else "oracle"
            a["blends"].append({"epoch": row["epoch"], "lambda": row["lambda"], "damage": damage,
                                "left_out": row["probe_left_out"], "gain": row["gain_sent"], "floor": row["floor"]})
            continue
        a["epochs"] += 1
        a["probe_left_out"] += int(row["probe_left_out"])
        a["peer_left_out"] += int(row["peer_left_out"])
        a["gains"].append([row["gain_sent"], row["floor"]])
        peer = [row["damage_peer_only_centered_clip"], row["damage_peer_only_mean"]]
        a["worst_peer_only"] = [max(x, y) for x, y in zip(a["worst_peer_only"], peer, strict=True)]
        if not row["probe_left_out"] and not row["peer_left_out"]:
            a["admitted"].append({"epoch": row["epoch"], "damage": damage})
    return list(out.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    groups: dict[tuple[str, str, tuple[int, ...]], list[dict[str, Any]]] = {}
    attacked: list[dict[str, Any]] = []
    for path in args.runs:
        run = json.loads(path.read_text())
        if run["attacks"]:
            attacked.append(run)
            continue
        spec = run["spec"]
        key = (spec["preset"], spec.get("schedule", "synchronous"), tuple(spec["segments"]))
        groups.setdefault(key, []).append(run)
    if groups:
        print("| preset | schedule | partial host | seeds | host-epochs | honest exclusions | worst / topk2 allowance "
              "| worst / int8 allowance "
              "| largest deficit, nats | partial host: worst / allowance, largest deficit, left out "
              "| partial host's gain ÷ its whole peers' median: lowest, median |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (preset, schedule, _), runs in sorted(groups.items()):
        s = summarize(runs)
        seeds = ",".join(str(r["spec"]["seed"]) for r in sorted(runs, key=lambda r: r["spec"]["seed"]))
        p = s["partial"]
        who = f"host {p['host']} at {p['segments']} of {p['of']}" if p else "none"
        mine = (f"{p['worst_over_allowance']:.2f}, {p['largest_deficit']:.4f}, {p['excluded']} "
                f"| {p['gain_share'][0]:.2f}, {p['gain_share'][1]:.2f}") if p else "— | —"
        print(f"| {preset} | {schedule} | {who} | {seeds} | {s['host_epochs']} | {s['excluded']} "
              f"| {s['worst_over_allowance']:.2f} | {s['worst_over_int8']:.2f} | {s['largest_deficit']:.4f} | {mine} |")

    if attacked:
        print("| preset | schedule | segments | attack | blend tuned on | left out by the probe (by the peer bound) "
              "| Δ̂ gain per epoch, µnats (floor) | without the probe, worst (pipelined: the optimistic start) "
              "| admitted: damage | blend (λ): damage |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for run in attacked:
        spec = run["spec"]
        for a in attack_table(run):
            gains = ", ".join(f"{g:,} ({f:,})" for g, f in a["gains"])
            admitted = ", ".join(f"epoch {x['epoch']}: {x['damage'][0]:+.3f} / {x['damage'][1]:+.3f}"
                                 for x in a["admitted"]) or "—"
            blends = ", ".join(f"{b['damage'][0]:+.3f} / {b['damage'][1]:+.3f} ({b['lambda']:.2f}"
                               f"{', left out' if b['left_out'] else ''})" for b in a["blends"]) or "—"
            print(f"| {spec['preset']} | {spec.get('schedule', 'synchronous')} | {spec['segments']} | `{a['attack']}` "
                  f"| {a['tuned']} "
                  f"| {a['probe_left_out']} of {a['epochs']} ({a['peer_left_out']}) | {gains} "
                  f"| {a['worst_peer_only'][0]:+.3f} / {a['worst_peer_only'][1]:+.3f} | {admitted} | {blends} |")


if __name__ == "__main__":
    main()
