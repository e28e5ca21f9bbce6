"""How long a daemon takes to start and to stop: what the phase windows must leave room for.

On a devnet it starts itself, for each preset asked: deploy the preset, bond one host and one
validator, then start ``veriloco host run`` and ``veriloco validator run`` ``--repeats`` times each
and measure

* **ready**: from the process start to its first phase line (it has loaded torch and the dataset,
  read the chain and acts from the next tick on) — what a restart costs before the node can act;
* **stop**: from SIGINT to the process's exit.

Run it on the machine the windows are for, loaded as it will be (the daemons of the other members
beside it). It prints one JSON object; docs/operators.md ("Phase windows") has the table.

    .venv/bin/python bench/daemon_startup.py --presets demo,small --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VERILOCO = [sys.executable, "-m", "veriloco.cli"]
READY = re.compile(r"epoch \d+ phase \w+")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([*VERILOCO, *args], env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise SystemExit(f"veriloco {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def start_and_stop(env: dict[str, str], args: list[str], log: Path, limit_s: float = 300) -> tuple[float, float]:
    """(seconds to the first phase line, seconds from SIGINT to exit) of one daemon run."""
    with log.open("w") as out:
        began = time.monotonic()
        proc = subprocess.Popen([*VERILOCO, *args], env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            while not READY.search(log.read_text()):
                if proc.poll() is not None:
                    raise SystemExit(f"{' '.join(args)} exited early:\n{log.read_text()[-2000:]}")
                if time.monotonic() - began > limit_s:
                    raise SystemExit(f"{' '.join(args)} not ready after {limit_s} s")
                time.sleep(0.05)
            ready = time.monotonic() - began
            asked = time.monotonic()
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=limit_s)
            return ready, time.monotonic() - asked
        finally:
            if proc.poll() is None:
                proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="demo,small")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--block-time", default="200ms")
    args = parser.parse_args()
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "VERILOCO_HOME": str(work / "home"), "VERILOCO_PASSPHRASE": "bench",
               "OMP_NUM_THREADS": "1"}
        for name in ("operator", "host", "val"):
            cli(env, "keys", "add", name, "--json")
        ports = [a for name in ("rpc", "p2p", "grpc", "rest") for a in (f"--{name}-port", str(free_port()))]
        cli(env, "devnet", "up", "--test-accounts", "0", "--block-time", args.block_time,
            "--keys", "operator", "--keys", "host", "--keys", "val", *ports)
        try:
            for preset in args.presets.split(","):
                cli(env, "run", "deploy", "--preset", preset, "--devnet", "--key", "operator")
                host_port, val_port = free_port(), free_port()
                cli(env, "host", "bond", "20INJ", "--key", "host", "--endpoint", f"http://127.0.0.1:{host_port}")
                cli(env, "validator", "bond", "10INJ", "--key", "val", "--endpoint", f"http://127.0.0.1:{val_port}")
                row: dict[str, object] = {}
                for role in ("host", "validator"):
                    key = "host" if role == "host" else "val"
                    ready, stop = [], []
                    for i in range(args.repeats):
                        r, s = start_and_stop(env, [role, "run", "--key", key, "--threads", "1"],
                                              work / f"{preset}-{role}-{i}.log")
                        ready.append(round(r, 2))
                        stop.append(round(s, 2))
                    row[role] = {"ready_s": ready, "stop_s": stop, "ready_median_s": statistics.median(ready)}
                results[preset] = row
        finally:
            subprocess.run([*VERILOCO, "devnet", "down"], env=env, capture_output=True, timeout=60)
    load = os.getloadavg()
    print(json.dumps({"block_time": args.block_time, "repeats": args.repeats, "load_average": load,
                      "results": results}, indent=2))


if __name__ == "__main__":
    main()
