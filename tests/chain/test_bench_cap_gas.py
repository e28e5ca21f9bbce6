"""The weight caps' gas benchmark (``bench/cap_gas.py``, issue 27): its pipelined epoch really
convicts every host after each joined and committed in the next epoch, where each then weighs what
it kept, and it measures the finalize beside the same epoch run synchronously.

The benchmark runs in its own process: it patches the embedded chain's store to count storage
traffic, which must not leak into the rest of the suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_capping_finalize_is_measured_beside_a_synchronous_one(tmp_path: Path) -> None:
    out = tmp_path / "cap.json"
    subprocess.run([sys.executable, str(ROOT / "bench" / "cap_gas.py"), "--hosts", "8", "--validators", "4",
                    "--json", str(out)], cwd=ROOT, check=True, capture_output=True, timeout=600)
    (row,) = json.loads(out.read_text())["rows"]
    sync, piped = row["synchronous"], row["pipelined"]
    # Every host convicted in both runs (the bench asserts each capped in epoch 1 when pipelined).
    assert (sync["pipelined"], piped["pipelined"]) == (False, True)
    assert sync["invalid"] == piped["invalid"] == 8
    # The caps are work the synchronous finalize does not do: more writes, more gas.
    sync_top, piped_top = (r["by_stage"][r["largest"]["stage"]] for r in (sync, piped))
    assert piped_top["writes"] > sync_top["writes"]
    assert piped["largest"]["sdk_gas_estimate"] > sync["largest"]["sdk_gas_estimate"]
    assert row["largest_pipelined_over_synchronous"] > 1
