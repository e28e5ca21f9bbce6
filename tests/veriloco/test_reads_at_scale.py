"""The operator's reads at the largest epoch a run spec allows (issue 27): 1,024 hosts and 1,024
validators, all joined and revealed, every host committed, the challenges drawn (``verify``).

The full ``epoch`` query nears a node's default query gas at this size and a full ``epochs`` page
of 10 epochs like it is far past it, so the commands read the headers (``lists: false``) and take
the lists from the paged ``report``. Here ``epoch list``, ``epoch show``, ``run show``,
``report``, ``host status``, one frame of ``epoch watch`` and the dashboard's state read run
against such a run on the embedded chain; each must answer with the right counts, and none may
send ``epoch`` or ``epochs`` with its lists. (Their gas at this size: ``bench/epoch_query_gas.py
--commands``, docs/benchmarks.md.)

The run is built by that benchmark (``--no-measure --save``) in its own process: it patches the
embedded chain's store and wasm calls to count them, which must not leak into the rest of the
suite. About 20 s to build, 15 s for the reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from chain.embedded.backend import EmbeddedBackend
from protocol.rules.limits import MAX_PARTICIPANTS
from veriloco.cli import app
from veriloco.connect import load_network
from veriloco.dashboard.source import RunSource

ROOT = Path(__file__).resolve().parents[2]
HOSTS = VALIDATORS = MAX_PARTICIPANTS
LAST = 9  # the benchmark's large epoch: epoch 0 small and played out, 1 to 8 abandoned


@pytest.fixture(scope="module")
def large_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The benchmark's run, saved: the network file and what each epoch holds."""
    folder = tmp_path_factory.mktemp("large")
    out = folder / "built.json"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'bench'}"}
    subprocess.run([sys.executable, str(ROOT / "bench" / "epoch_query_gas.py"), "--commands", "--no-measure",
                    "--hosts", str(HOSTS), "--validators", str(VALIDATORS), "--save", str(folder / "run"),
                    "--out", str(out)], cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    built = json.loads(out.read_text())
    assert (built["epoch"], built["phase"]) == (LAST, "verify"), built
    return Path(built["network"]), {int(e): counts for e, counts in built["expected"].items()}


@pytest.fixture
def queries(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every smart query the embedded backend answers during the test."""
    sent: list[dict[str, Any]] = []
    original = EmbeddedBackend.query

    def query(backend: EmbeddedBackend, msg: dict[str, Any]) -> Any:
        sent.append(msg)
        return original(backend, msg)

    monkeypatch.setattr(EmbeddedBackend, "query", query)
    return sent


def full_epoch_reads(sent: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``epoch`` and ``epochs`` queries among ``sent`` that ask for the lists."""
    return [m for m in sent if ("epoch" in m or "epochs" in m) and next(iter(m.values())).get("lists", True)]


def counts(epoch: dict[str, Any]) -> dict[str, int]:
    return {name: len(epoch[name]) for name in ("hosts", "validators", "committed", "accepted")}


@pytest.mark.slow
def test_operator_commands_answer_at_2048_participants(large_run, queries, tmp_path) -> None:
    network, expected = large_run
    runner = CliRunner(env={"VERILOCO_HOME": str(tmp_path / "home"), "VERILOCO_PASSPHRASE": "pw",
                            "VERILOCO_DEBUG": None})

    def cli(*args: str) -> str:
        done = runner.invoke(app, [*args, "--network", str(network)])
        assert done.exit_code == 0, done.output
        return done.stdout

    # `epoch list` prints from the headers' counts (contract 0.3.4): not one `report` page.
    listed = json.loads(cli("epoch", "list", "--json"))["epochs"]
    assert [e["epoch"] for e in listed] == list(range(LAST + 1))
    assert {e["epoch"]: e["counts"] for e in listed} == expected
    assert not any(name in e for e in listed for name in ("hosts", "validators", "committed", "accepted"))
    assert expected[LAST] == {"hosts": HOSTS, "validators": VALIDATORS, "committed": HOSTS, "accepted": 0}
    assert expected[0]["accepted"] == 2  # the small epoch played out: its hosts accepted
    table = cli("epoch", "list")
    assert f"│ {HOSTS}" in table and "verify" in table
    assert not [m for m in queries if "report" in m], "epoch list read a report page"

    shown = json.loads(cli("epoch", "show", "--json"))["epoch"]
    assert (shown["epoch"], shown["phase"]) == (LAST, "verify") and counts(shown) == expected[LAST]
    assert shown["hosts"] == sorted(shown["hosts"]) and set(shown["committed"]) == set(shown["hosts"])
    assert counts(json.loads(cli("epoch", "show", "0", "--json"))["epoch"]) == expected[0]
    text = cli("epoch", "show")
    assert f"epoch {LAST}" in text and f"committed {HOSTS}, accepted 0" in text

    run = json.loads(cli("run", "show", "--json"))
    assert (run["epoch"]["epoch"], run["epoch"]["phase"]) == (LAST, "verify")
    assert len(run["members"]) == HOSTS + VALIDATORS

    report = json.loads(cli("report", str(LAST), "--json"))["report"]
    assert (len(report["hosts"]), len(report["validators"])) == (HOSTS, VALIDATORS)

    host = shown["hosts"][-1]
    status = json.loads(cli("host", "status", host, "--json"))
    assert (status["epoch"], status["joined"], status["committed"], status["accepted"]) == (LAST, True, True, False)
    validator = shown["validators"][0]
    status = json.loads(cli("validator", "status", validator, "--json"))
    assert (status["joined"], status["committed"]) == (True, False)

    # One frame of `epoch watch`: --until the current epoch stops after the first.
    frame = cli("epoch", "watch", "--until", str(LAST), "--history", "1")
    assert f"epoch {LAST} · verify" in frame

    state = RunSource(load_network(network), min_interval=0).state()
    rows = {row.epoch: row for row in state.epochs}
    assert (rows[LAST].hosts, rows[LAST].validators, rows[LAST].accepted) == (HOSTS, VALIDATORS, 0)
    assert (rows[0].hosts, rows[0].accepted) == (2, 2)
    assert state.now.epoch == LAST and state.now.phase == "verify"

    assert queries and full_epoch_reads(queries) == [], full_epoch_reads(queries)[:3]
