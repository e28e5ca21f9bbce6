"""The delayed seed's benchmark (``bench/delayed_seed.py``, issue 30): its contract measurement
really closes the phase both ways and the delayed one pays the VDF check on top of the assignment.

It runs in its own process: the benchmark patches the embedded chain's store to count storage
traffic, which must not leak into the rest of the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_check_is_measured_beside_the_per_picker_close(tmp_path: Path) -> None:
    out = tmp_path / "delayed.json"
    subprocess.run([sys.executable, str(ROOT / "bench" / "delayed_seed.py"), "--no-uploads", "--hosts", "4",
                    "--squarings", "2000", "--json", str(out)], cwd=ROOT, check=True, capture_output=True,
                   timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    result = json.loads(out.read_text())
    assert result["rates"]["squarings"] == 2000 and result["rates"]["prove_over_evaluate"] > 0
    contract = result["contract"]
    per_picker, delayed = contract["per_picker"], contract["delayed"]
    assert per_picker["phase_after"] == delayed["phase_after"] == "verify"
    # The delayed close stops at the seed; the output's message runs the check and the assignment.
    assert delayed["reveal_that_closes"]["fuel"] < per_picker["reveal_that_closes"]["fuel"]
    assert delayed["delayed_seed"]["fuel"] > per_picker["reveal_that_closes"]["fuel"]
    assert result["uploads"] == []
