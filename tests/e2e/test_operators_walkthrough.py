"""docs/operators.md, run: every command of its walkthrough, in order, on a devnet the test starts.

The walkthrough cannot drift from the CLI: this test reads the doc and runs what it shows.

* Every ``$ …`` line of a ```` ```console ```` block is a command, run by bash in one working
  directory with one veriloco home (``veriloco`` on the PATH, the passphrase in
  ``$VERILOCO_PASSPHRASE``). It must exit 0, unless the doc shows it failing (its output starts
  with ``error:``), then it must fail with one line.
* ``veriloco host run`` and ``veriloco validator run`` are daemons (the doc runs each in its own
  terminal): they start in the background; ``<!-- walkthrough: wait for the daemons -->`` waits
  until every daemon has exited, with status 0.
* Every ```` ```python ```` block runs with this interpreter in the same directory.
* ```` ```bash ```` blocks are examples and are not run.

The smoke form changes only what must differ on a shared machine: the devnet and the artifact
servers get free ports instead of the doc's fixed ones (``--port-offset``/``127.0.0.1:82xx``),
and blocks come as fast as the suite's other devnets (``$VERILOCO_DEVNET_BLOCK_TIME``).

``VERILOCO_WALKTHROUGH_RECORD=FILE`` writes every command with its output to FILE and the plot
beside it (how the doc's output and figure were captured).
"""

from __future__ import annotations

import csv
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from doc_steps import DAEMON, DOC, walkthrough

pytestmark = [pytest.mark.slow, pytest.mark.devnet]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def smoke_form(command: str, ports: dict[str, int]) -> str:
    """The doc's command with free ports (and the suite's block time) instead of the doc's fixed ones."""
    command = re.sub(r"127\.0\.0\.1:(82\d\d)", lambda m: f"127.0.0.1:{ports.setdefault(m.group(1), free_port())}",
                     command)
    if command.startswith("veriloco devnet up"):
        command = re.sub(r"\s--port-offset\s+\d+", "", command)
        command += "".join(f" --{name}-port {free_port()}" for name in ("rpc", "p2p", "grpc", "rest"))
        command += f" --block-time {os.environ.get('VERILOCO_DEVNET_BLOCK_TIME', '200ms')}"
    return command


def test_the_docs_steps_run_as_written(tmp_path: Path) -> None:
    try:
        import injective_core  # noqa: F401 (only whether it is installed)
    except ImportError:
        if os.environ.get("VERILOCO_REQUIRE_DEVNET"):
            pytest.fail("the devnet extra is not installed (make test installs it)")
        pytest.skip("the devnet extra is not installed")
    steps = walkthrough(DOC.read_text())
    commands = [s.text for s in steps if s.kind == "command"]
    assert any(DAEMON.match(c) for c in commands) and any(s.kind == "wait" for s in steps)
    assert any(s.kind == "python" for s in steps)

    work, bin_dir, logs = tmp_path / "work", tmp_path / "bin", tmp_path / "logs"
    for d in (work, bin_dir, logs):
        d.mkdir()
    (bin_dir / "veriloco").write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m veriloco.cli \"$@\"\n")
    (bin_dir / "veriloco").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "VERILOCO_HOME": str(tmp_path / "home"),
           "VERILOCO_PASSPHRASE": "walkthrough", "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
    env.pop("VERILOCO_DEBUG", None)
    record = os.environ.get("VERILOCO_WALKTHROUGH_RECORD")
    transcript: list[str] = []
    ports: dict[str, int] = {}
    daemons: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    try:
        for step in steps:
            if step.kind == "wait":
                for command, proc, log in daemons:
                    code = proc.wait(timeout=900)
                    transcript.append(f"$ {command}\n{log.read_text()}")
                    assert code == 0, f"{command} exited with {code}:\n{log.read_text()[-3000:]}"
                daemons = []
                continue
            if step.kind == "python":
                done = subprocess.run([sys.executable, "-c", step.text], cwd=work, env=env, capture_output=True,
                                      text=True, timeout=300)
                transcript.append(f">>> python\n{done.stdout}{done.stderr}")
                assert done.returncode == 0, f"the doc's Python failed:\n{done.stderr[-3000:]}"
                continue
            command = smoke_form(step.text, ports)
            if DAEMON.match(command):
                log = logs / f"daemon-{len(daemons)}.log"
                with log.open("wb") as out:
                    proc = subprocess.Popen(["bash", "-c", command], cwd=work, env=env, stdout=out,
                                            stderr=subprocess.STDOUT)
                daemons.append((command, proc, log))
                continue
            done = subprocess.run(["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True,
                                  timeout=600)
            transcript.append(f"$ {command}\n{done.stdout}{done.stderr}")
            if step.shown and step.shown[0].startswith("error:"):
                errors = [line for line in done.stderr.splitlines() if line.strip()]
                assert done.returncode == 1 and len(errors) == 1 and errors[0].startswith("error:"), \
                    f"{command}: the doc shows it failing with one line, it said:\n{done.stderr}"
            else:
                assert done.returncode == 0, f"{command} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        assert not daemons, "the doc starts daemons it never waits for"
    finally:
        for _, proc, _ in daemons:
            proc.kill()
        subprocess.run([sys.executable, "-m", "veriloco.cli", "devnet", "down"], env=env, capture_output=True,
                       timeout=60)
        if record:
            Path(record).write_text("\n".join(transcript))
            if (work / "loss.png").exists():
                shutil.copy(work / "loss.png", Path(record).with_suffix(".png"))
    # What the doc says happened: the cheater (carol) was caught in both epochs, alice was accepted
    # and paid, and the files it writes are there.
    rows = list(csv.DictReader((work / "metrics" / "members.csv").open()))
    outcomes = {(r["name"], r["epoch"]): r["outcome"] for r in rows}
    assert [outcomes["carol", e] for e in ("0", "1")] == ["invalid", "invalid"]
    assert [outcomes["alice", e] for e in ("0", "1")] == ["accepted", "accepted"]
    assert (work / "loss.png").stat().st_size > 10_000
    assert (work / "exported" / "model.safetensors").is_file()
