"""The gain-dispute gas benchmark (``bench/settle_paging.py --gain-hosts``, issue 28): its epoch
really is a gain dispute on every host's last segment, decided on the honest gain, and it reports
the gas of every deciding message beside an honest epoch of the same size.

The benchmark runs in its own process: it patches the embedded chain's store and wasm calls to
count them, which must not leak into the rest of the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HOSTS = 4
VALIDATORS = 8  # bench/settle_paging.py's shape

DECIDING = ["commit_verdict re-vote (gain dispute)", "commit_verdict final vote (gain dispute)",
            "reveal_verdict re-vote (gain dispute)", "reveal_verdict final vote (gain dispute)"]


def run_bench(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "gain.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'bench'}"}
    subprocess.run([sys.executable, str(ROOT / "bench" / "settle_paging.py"), "--one-shot-hosts", "",
                    "--devnet-hosts", "", "--disputed-hosts", "", *args, "--out", str(out)],
                   cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    return json.loads(out.read_text())


def test_the_gain_dispute_epoch_is_measured_beside_an_honest_one(tmp_path: Path) -> None:
    report = run_bench(tmp_path, "--hosts", str(HOSTS), "--gain-hosts", str(HOSTS))
    (honest,), (gain,) = report["embedded"], report["gain"]
    assert (honest["scenario"], gain["scenario"]) == ("honest", "gain")
    run = gain["messages"]
    # Every host's last segment became a gain dispute, and every validator voted on each once:
    # its round-0 seats by a re-vote, the others by a final vote.
    assert run["gain_disputes"] == HOSTS
    assert run["re_votes"] + run["final_votes"] == HOSTS * VALIDATORS
    assert 0 < run["re_votes"] < run["final_votes"]
    # The round-0 liars, and only they, lost: the benchmark's dispute is the one a lie forces.
    assert 1 <= run["wrong_validators"] <= HOSTS
    kinds = gain["estimated_sdk_gas"]["by_kind"]
    assert [kinds[k]["n"] for k in DECIDING[:2]] == [run["re_votes"], run["final_votes"]]
    # Each deciding opening carries the dispute windows' gain: it costs more than a round-0 opening
    # on the same segment, and the honest epoch has none of them.
    plain = kinds["reveal_verdict round 0, last segment"]["median"]
    assert all(kinds[k]["median"] > plain for k in DECIDING[2:])
    assert not set(DECIDING) & set(honest["estimated_sdk_gas"]["by_kind"])
    # The extra round has its own close and pages, and the largest message names its kind.
    s = gain["estimated_sdk_gas"]
    assert s["verdict_close"] > 0 and s["round_close"] > 0
    assert s["largest"]["gas"] >= max(k["max"] for k in kinds.values())
    # A validator's reads in `dispute` were measured, where it sits on every host's last segment.
    assert gain["queries"]["dispute"]["challenges"]["entries_one_validator"] >= HOSTS
    assert "dispute" not in honest["queries"]
