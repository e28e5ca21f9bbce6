"""Per-run summary of ``bench/topk2_probe.py --json`` outputs (issue 28): honest exclusions, worst deficit.

For each file, over epochs 0–7 and 8 on: host-epochs, how many an allowance would leave out (the run's
own ``topk2`` rule, the ``spec.rule`` it recorded, or ``--margin-topk2`` to re-read the same honest
gains under another absolute part; and int8's 0.02 + 5 %), the worst deficit over that allowance (and
its epoch), the largest deficit in nats; and ‖β·r‖ ÷ ‖Δ‖ (the carried residual over the Δ trained) at
the last epoch and its peak. Deficits and allowances are ``trainer.probe``'s (``probe_deficits``,
``probe_allowance``) on the recorded ``sent`` gains, the Δ̂s the probe scores, computed as
``bench/topk2_probe_summary.py`` computes them (``host_ratios``, ``deficits``).

Run: ``PYTHONPATH=. .venv/bin/python bench/topk2_decay_summary.py run.json… [--margin-topk2 0.03]``
"""

from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for bench.*

# The per-configuration summary's deficits and ratios.
from bench.topk2_probe_summary import deficits, host_ratios
from trainer.probe import PROBE_RELATIVE_BPS, PROBE_RELATIVE_BPS_TOPK2

INT8_MARGIN = 20_000
"""int8's allowance in µnats at the default ``aggregation.probe_margin`` (0.02 nats)."""
LATE = 8
"""The first epoch of the late range (where β = 1's residual-driven spread grew in the 24-epoch runs)."""


def summarise(rows: list[dict[str, Any]], margin: int) -> dict[str, Any]:
    """Exclusions and worst deficit over ``rows`` under ``margin`` µnats + 5 %, and under int8's."""
    out: dict[str, Any] = {"host_epochs": 0, "left_out": 0, "left_out_int8": 0, "worst": 0.0, "worst_epoch": None,
                           "worst_int8": 0.0, "largest_deficit_nats": 0.0}
    for row in rows:
        for topk2, int8, deficit in zip(host_ratios(row, margin, PROBE_RELATIVE_BPS_TOPK2),
                                        host_ratios(row, INT8_MARGIN, PROBE_RELATIVE_BPS), deficits(row), strict=True):
            ratio, ratio8 = float(topk2), float(int8)
            out["host_epochs"] += 1
            out["left_out"] += ratio > 1
            out["left_out_int8"] += ratio8 > 1
            if ratio > out["worst"]:
                out["worst"], out["worst_epoch"] = round(ratio, 3), row["epoch"]
            out["worst_int8"] = max(out["worst_int8"], round(ratio8, 3))
            out["largest_deficit_nats"] = max(out["largest_deficit_nats"], round(float(deficit) / 1e6, 4))
    return out


def residual_ratios(row: dict[str, Any]) -> list[float]:
    """‖β·r‖ ÷ ‖Δ‖ per host in one epoch's row."""
    return [c / d for c, d in zip(row["norms"]["carried"], row["norms"]["dense"], strict=True)]


def summary(path: Path, margin_topk2: Decimal | None) -> dict[str, Any]:
    data = json.loads(path.read_text())
    rows = data["rows"]
    margin = data["spec"]["rule"][0] if margin_topk2 is None else int(margin_topk2 * 1_000_000)
    out: dict[str, Any] = {"file": path.name, "decay": data["spec"]["decay"], "seed": data["spec"]["seed"],
                           "margin_micro": margin, "seconds": data["seconds"]}
    for name, part in ((f"epochs 0-{LATE - 1}", rows[:LATE]), (f"epochs {LATE}-", rows[LATE:])):
        if part:
            out[name] = summarise(part, margin)
    last = residual_ratios(rows[-1])
    out["residual_last"] = [round(min(last), 1), round(max(last), 1), rows[-1]["epoch"]]
    out["residual_peak"] = round(max(max(residual_ratios(r)) for r in rows), 1)
    out["loss_last"] = rows[-1]["base_loss"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--margin-topk2", type=Decimal, default=None,
                        help="re-read the honest gains under this absolute part (nats) + 5 %% instead of the run's")
    args = parser.parse_args()
    for path in args.files:
        print(json.dumps(summary(path, args.margin_topk2)))


if __name__ == "__main__":
    main()
