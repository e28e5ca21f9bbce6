"""Operators stop daemons and start them again (issue 29): real processes, real signals, a real devnet.

Two hosts and two validators run two epochs of a tiny spec on a devnet the test starts. A
controller follows their logs and, at chosen phases, stops one with SIGINT (Ctrl-C), SIGTERM,
SIGKILL, or two SIGINTs in a row, then starts it again with the same command: a host while it
trains, in reveal and in propose; a validator in verify and in verdict_reveal; in the second
epoch both hosts while they train and both validators in verify, so every restart of the first
epoch is followed by a whole epoch and the second epoch survives losing everyone once. Nobody is
slashed, every host is accepted and every epoch agrees on θ; a graceful stop exits 0 after what
was due, a second signal exits at once (130), and no process prints ``terminate called``.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tomli_w
from test_devnet_network import VERILOCO, cli, cli_each, free_port
from test_devnet_network import network as _devnet  # noqa: F401 (the `network` fixture: a devnet, its keys funded)

from trainer.presets import tiny

pytestmark = [pytest.mark.slow, pytest.mark.devnet]

HOSTS = ["h0", "h1"]
VALIDATORS = ["v0", "v1"]
EPOCHS = 2

# (daemon, the log line that triggers the stop, the signals sent, what to expect in its log after).
PLAN = [
    ("h0", "epoch 0 training: step 8/", [signal.SIGINT], "training stopped"),
    ("h1", "epoch 0 phase reveal", [signal.SIGTERM], "stopped"),
    ("v0", "epoch 0 phase verify", [signal.SIGTERM], "stopped"),
    ("v1", "epoch 0 phase verdict_reveal", [signal.SIGINT], "stopped"),
    ("h0", "epoch 0 phase propose", [signal.SIGTERM], "stopped"),
    # Both hosts in training, both validators in verify (a third epoch held two of these before).
    ("h0", "epoch 1 training: step 8/", [signal.SIGINT, signal.SIGINT], "exiting now"),
    ("h1", "epoch 1 training: step 8/", [signal.SIGKILL], None),
    ("v0", "epoch 1 phase verify", [signal.SIGKILL], None),
    ("v1", "epoch 1 phase verify", [signal.SIGINT], "stopped"),
]


@dataclass
class Daemon:
    name: str
    args: list[str]
    log: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    offset: int = 0
    exits: list[int] = field(default_factory=list)

    def start(self) -> None:
        self.offset = self.log.stat().st_size if self.log.exists() else 0
        out = self.log.open("ab")
        self.proc = subprocess.Popen([*VERILOCO, *self.args], env=self.env, stdout=out, stderr=subprocess.STDOUT)

    def text(self) -> str:
        return self.log.read_text(errors="replace")[self.offset:]


def test_stopping_and_restarting_daemons_in_every_phase_slashes_nobody(_devnet) -> None:  # noqa: F811 (the fixture)
    env, tmp = _devnet  # its keys include h0, h1, v0 and v1
    # Windows with room for a restart on a loaded machine (they close early once everyone acted).
    spec = tiny("stop-restart").with_changes(
        phases={"join_blocks": 600, "train_blocks": 1500, "reveal_blocks": 600, "verify_blocks": 1500,
                "verdict_reveal_blocks": 600, "propose_blocks": 600, "min_hosts": len(HOSTS),
                "min_validators": len(VALIDATORS)})
    (tmp / "spec.toml").write_text(tomli_w.dumps(spec.model_dump(mode="json")))
    cli(env, "run", "deploy", str(tmp / "spec.toml"), "--devnet", "--key", "operator", "--fund", "10INJ")
    ports = {name: free_port() for name in [*HOSTS, *VALIDATORS]}
    cli_each(env, *[[role, "bond", stake, "--key", name, "--endpoint", f"http://127.0.0.1:{ports[name]}"]
                    for role, names, stake in (("host", HOSTS, "20INJ"), ("validator", VALIDATORS, "10INJ"))
                    for name in names])
    logs = tmp / "logs"
    logs.mkdir()
    common = ["--epochs", str(EPOCHS), "--threads", "1", "--poll", "0.2"]
    daemons = {name: Daemon(name, ["host", "run", "--key", name, "--listen", f"127.0.0.1:{ports[name]}", *common],
                            logs / f"{name}.log", env) for name in HOSTS}
    daemons.update({name: Daemon(name, ["validator", "run", "--key", name, *common], logs / f"{name}.log", env)
                    for name in VALIDATORS})
    for d in daemons.values():
        d.start()
    done: list[str] = []
    try:
        end = time.monotonic() + 900
        plan = list(PLAN)
        while plan and time.monotonic() < end:
            name, trigger, signals, expect = plan[0]
            d = daemons[name]
            assert d.proc is not None
            if d.proc.poll() is not None:
                raise AssertionError(f"{name} exited ({d.proc.returncode}) before {trigger!r}:\n{d.text()[-3000:]}")
            if trigger not in d.text():
                time.sleep(0.1)
                continue
            for i, sig in enumerate(signals):
                if i:
                    time.sleep(0.1)  # after the first was handled, before the stop is over
                d.proc.send_signal(sig)
            started = time.monotonic()
            code = d.proc.wait(timeout=60)
            took = time.monotonic() - started
            d.exits.append(code)
            tail = d.text()[-3000:]
            assert "terminate called" not in tail, tail
            if expect is not None:
                assert expect in tail, f"{name}: {expect!r} not in its log after {signals}:\n{tail}"
            expected_code = {signal.SIGKILL: -9}.get(signals[0], 130 if len(signals) > 1 else 0)
            assert code == expected_code, f"{name} exited {code} after {signals}:\n{tail}"
            done.append(f"{name} {'+'.join(s.name for s in signals)} at {trigger!r}: exit {code} in {took:.1f} s")
            plan.pop(0)
            d.start()
        assert not plan, f"never reached: {plan[0]}; done: {done}"
        for d in daemons.values():
            assert d.proc is not None
            code = d.proc.wait(timeout=max(1.0, end - time.monotonic()))
            assert code == 0, f"{d.name} exited {code}:\n{d.text()[-3000:]}"
    finally:
        for d in daemons.values():
            if d.proc is not None and d.proc.poll() is None:
                d.proc.kill()
    print("\n" + "\n".join(done))
    for d in daemons.values():
        assert "terminate called" not in d.log.read_text(errors="replace")
    for e, shown in enumerate(cli_each(env, *[["report", str(e), "--json"] for e in range(EPOCHS)])):
        report = json.loads(shown)["report"]
        assert report["agreed"] is True, (e, report.get("unchanged_reason"))
        assert all(h["outcome"] == "accepted" and int(h["slashed"]) == 0 for h in report["hosts"]), (e, report["hosts"])
        assert all(int(v["slashed"]) == 0 for v in report["validators"]), (e, report["validators"])
