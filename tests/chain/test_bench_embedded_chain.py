"""The embedded chain benchmark (``bench/embedded_chain.py``) runs against today's contract at its
smallest useful size: an epoch large enough that closing ``reveal``, ``objection`` and finalize run
page by page (more hosts than the contract's default ``settle_page``), which the benchmark once did
not follow (it expected the phase after the closing message at once), and a cost epoch small enough
to close each in one message.

The benchmark runs in its own process: it patches the embedded chain's store to count its
traffic, which must not leak into the rest of the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
THROUGHPUT_HOSTS = 65  # one more than the default settle_page: every close takes more than one message
COST_HOSTS = 4  # with its 4 validators: both closes fit in one


def run_bench(*args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "embedded_chain.py"), *args],
                          cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=600)
    return json.loads(done.stdout)


def test_the_benchmark_follows_paged_closes_and_prices_every_message() -> None:
    out = run_bench("--n", "20", "--members", "5", "--hosts", str(THROUGHPUT_HOSTS),
                    "--cost-hosts", str(COST_HOSTS), "--full-epochs", "1")
    assert out["wasm_bytes"] > 0
    assert out["bond_executes_per_s"] > 0 and out["member_queries_per_s"] > 0
    paged = out["throughput_epoch"]
    assert (paged["hosts"], paged["validators"]) == (THROUGHPUT_HOSTS, 16)
    assert paged["commit_executes_per_s"] > 0 and paged["verdict_executes_per_s"] > 0
    assert paged["objection_close_pages"] >= 1
    for close in ("reveal_that_closes_the_phase", "reveal_verdict_that_finalizes"):
        assert paged[close]["pages_after"] >= 1, close
        page = paged[close]["largest_page_after"]
        assert page["fuel"] > 0 and page["writes"] > 0, close  # a page of the close did work
    # Finalize pays every accepted host and diligent validator: bank sends, in its pages here.
    finalize = paged["reveal_verdict_that_finalizes"]
    assert finalize["bank_sends"] + finalize["largest_page_after"]["bank_sends"] > 0

    one_shot = out["cost_epochs"][str(COST_HOSTS)]
    assert one_shot["objection_close_pages"] == 0
    for close in ("reveal_that_closes_the_phase", "reveal_verdict_that_finalizes"):
        assert (one_shot[close]["pages_after"], one_shot[close]["largest_page_after"]) == (0, None), close
    assert one_shot["reveal_verdict_that_finalizes"]["bank_sends"] > 0
    # Every message measured ran the contract and read its storage.
    for message in ("commit", "commit_verdict", "reveal_verdict", "reveal_verdict_last_segment"):
        assert one_shot[message]["fuel"] > 0 and one_shot[message]["reads"] > 0, message
    assert one_shot["reveal_verdict_that_finalizes"]["sdk_gas_estimate"] > one_shot["commit"]["sdk_gas_estimate"]
    timings = out["epoch_8_hosts_4_validators_s"]
    assert timings["early_close_median"] > 0 and timings["deadlines_and_advance_median"] > 0
