"""A tied devnet dies with the process that started it, however that process dies; an untied one
(``veriloco devnet up``) outlives it.

Each test starts its own node from a separate process (``_CHILD`` or the real CLI), kills or lets
that process end, and watches the node's pid. Every node a test starts is killed in its ``finally``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from devnet_backend import _require_extra

from chain.devnet import Devnet, DevnetPorts

ROOT = Path(__file__).resolve().parents[2]  # this tree, put first on the children's path
BLOCK_TIME = os.environ.get("VERILOCO_DEVNET_BLOCK_TIME", "200ms")

# Starts a devnet (tied or not, argv[2]) in argv[1] on free ports, prints the node's pid, sleeps.
_CHILD = textwrap.dedent("""
    import sys, time
    from chain.devnet import Devnet, DevnetPorts, GenesisAccount
    net = Devnet(sys.argv[1], ports=DevnetPorts.free(), accounts=[GenesisAccount.test("alice")],
                 block_time=sys.argv[3])
    status = net.up(tied=sys.argv[2] == "tied")
    print(status.pid, flush=True)
    time.sleep(3600)
""")


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(ROOT) + (os.pathsep + path if path else "")}


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _kill(pid: int | None) -> None:
    if pid is not None and _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _wait_dead(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _keeps_running(net: Devnet, pid: int, seconds: float = 4.0) -> None:
    """The node ``pid`` still runs and makes blocks ``seconds`` after its starter died.

    A tied node gets SIGTERM the moment its starter dies and stops within about 2 s, so this
    fails for one.
    """
    h0 = net.height()
    time.sleep(seconds)
    assert _alive(pid) and net.pid() == pid, f"the node (pid {pid}) died with the process that started it"
    h1 = net.height()
    assert h0 is not None and h1 is not None and h1 > h0, (h0, h1)


@pytest.fixture
def child_devnet(tmp_path: Path) -> Iterator[Callable[[bool], tuple[subprocess.Popen[str], int, Devnet]]]:
    """``start(tied)``: a child process starts a devnet; returns (child, node pid, Devnet)."""
    _require_extra()
    started: list[tuple[subprocess.Popen[str], int | None]] = []

    def start(tied: bool) -> tuple[subprocess.Popen[str], int, Devnet]:
        home = tmp_path / "net"
        child = subprocess.Popen([sys.executable, "-c", _CHILD, str(home), "tied" if tied else "untied", BLOCK_TIME],
                                 stdout=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path)
        started.append((child, None))
        assert child.stdout is not None
        line = child.stdout.readline()  # the child prints after block 1, or exits on an error
        assert line.strip().isdigit(), f"the child did not start a devnet (exit {child.poll()}): {line!r}"
        pid = int(line)
        started[-1] = (child, pid)
        return child, pid, Devnet.open(home)

    yield start
    for child, pid in started:
        _kill(child.pid)
        child.wait(10)
        _kill(pid)
        if pid is not None:
            _wait_dead(pid, 10)


@pytest.mark.devnet
def test_tied_node_dies_when_its_starter_is_sigkilled(child_devnet):
    child, pid, net = child_devnet(True)
    # setpriv exec'd the node: the pid the child got from Popen is injectived itself, its child.
    argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    assert Path(os.fsdecode(argv0)).name == "injectived" and _parent(pid) == child.pid
    assert net.pid() == pid and net.status().running  # what `veriloco devnet status` sees
    child.send_signal(signal.SIGKILL)  # no finally, no atexit: only the kernel can stop the node
    child.wait(10)
    assert _wait_dead(pid, 20), f"the tied node (pid {pid}) outlived its starter"
    assert net.pid() is None and not net.status().running


@pytest.mark.devnet
def test_untied_node_outlives_its_starter(child_devnet):
    child, pid, net = child_devnet(False)
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    _keeps_running(net, pid)
    assert net.stop() is True and not _alive(pid)  # stop() by pid file, from another process


@pytest.mark.devnet
def test_tied_restart_stays_tied_and_stops(tmp_path):
    """start() after stop() repeats tied; stop() and pid() work on a node started through setpriv."""
    _require_extra()
    with Devnet(tmp_path / "net", ports=DevnetPorts.free(), block_time=BLOCK_TIME) as net:
        assert net.tied
        first = net.pid()
        assert first is not None and _parent(first) == os.getpid()
        assert net.stop() is True and not _alive(first) and net.pid() is None
        net.start()
        again = net.pid()
        assert net.tied and again is not None and again != first and _parent(again) == os.getpid()
    assert not _alive(again) and net.pid() is None


@pytest.mark.devnet
def test_cli_devnet_up_is_untied(tmp_path):
    """`veriloco devnet up` returns and exits; the node it started goes on (an operator's node)."""
    _require_extra()
    home = tmp_path / "vhome"
    home.mkdir()
    ports = DevnetPorts.free()
    env = {**_env(), "VERILOCO_HOME": str(home)}
    pid = None
    try:
        proc = subprocess.run([sys.executable, "-m", "veriloco.cli", "devnet", "up", "--test-accounts", "1",
                               "--block-time", BLOCK_TIME, "--rpc-port", str(ports.rpc), "--p2p-port", str(ports.p2p),
                               "--grpc-port", str(ports.grpc), "--rest-port", str(ports.rest), "--json"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        pid = json.loads(proc.stdout)["devnet"]["pid"]
        _keeps_running(Devnet.open(home / "devnet"), pid)
        down = subprocess.run([sys.executable, "-m", "veriloco.cli", "devnet", "down", "--json"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert down.returncode == 0 and json.loads(down.stdout)["stopped"] is True, down.stderr
        assert _wait_dead(pid, 5)
    finally:
        _kill(pid)
