"""A fully disputed epoch with many validators: every challenge holds a vote of every validator, so
one host's challenges bound more than a ``report`` page and the contract (0.3.3 onwards) splits that
host over pages a challenge at a time (``next_segment`` / ``start_segment``). ``Ledger.report``
follows the cursor inside the host and assembles the same :class:`EpochReport` as the older
contract's report, which held each host whole on one page; and no page nears a node's query gas.

The epoch is ``bench/epoch_query_gas.py --disputed``'s, run in its own process (the benchmark
patches the embedded chain's store and wasm calls to count them): it plays the epoch on the 0.3.2
wasm (from git), reads that contract's report, migrates to the committed wasm and reads it again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.rules.limits import REPORT_PAGE

ROOT = Path(__file__).resolve().parents[2]
BEFORE = "ede2270"
"""The commit whose ``contracts/artifacts/veriloco.wasm`` is contract 0.3.2 (no split host)."""
QUERY_GAS = 3_000_000


def older_wasm(tmp_path: Path) -> Path:
    out = tmp_path / "veriloco-0.3.2.wasm"
    shown = subprocess.run(["git", "show", f"{BEFORE}:contracts/artifacts/veriloco.wasm"], cwd=ROOT,
                           capture_output=True, timeout=60)
    if shown.returncode != 0 or not shown.stdout.startswith(b"\0asm"):
        pytest.skip(f"the 0.3.2 wasm of {BEFORE} is not in this checkout's history")
    out.write_bytes(shown.stdout)
    return out


@pytest.mark.slow
def test_a_host_split_over_pages_reads_as_the_older_contracts_whole_host_report(tmp_path: Path) -> None:
    validators = 300  # a challenge bounds 1 + 300 // 16 = 19 units, a host of two 39 > REPORT_PAGE
    out = tmp_path / "disputed.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'bench'}"}
    subprocess.run([sys.executable, str(ROOT / "bench" / "epoch_query_gas.py"), "--disputed", "--hosts", "2",
                    "--validators", str(validators), "--before", str(older_wasm(tmp_path)), "--out", str(out)],
                   cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    result = json.loads(out.read_text())
    assert result["same_report"] is True
    report = result["report"]
    assert (report["hosts"], report["validators"]) == (2, validators)
    assert report["challenges"] == 4 and report["votes"] == 4 * validators
    # Each host's two challenges on two pages: its line and first challenge, then its second.
    assert result["pages_stopping_inside_a_host"] == 2
    assert 1 + 2 * (1 + validators // 16) > REPORT_PAGE
    top = result["largest_page"]
    assert top["challenges"] == 1 and top["votes"] == validators
    assert result["pages_over_limit"] == 0 and top["sdk_gas"] < QUERY_GAS / 2
