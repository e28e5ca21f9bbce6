"""``veriloco dashboard``: the document it serves, the app's routes, and the page in a real browser
(Debian's Chromium, headless) following a running ``simulate`` as its epochs close."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from rich.console import Console

from chain.block_clock import BlockClock
from chain.ledger import Ledger
from protocol.rules.spec import PhaseSpec
from protocol.views import Accounting, EpochInfo, EpochReport, HostReport, Member, ValidatorReport
from trainer.presets import tiny
from veriloco.connect import ChainSettings, NetworkFile
from veriloco.dashboard.app import make_app
from veriloco.dashboard.source import RunSource
from veriloco.dashboard.state import build_state
from veriloco.phase_progress import phase_progress

VERILOCO = [sys.executable, "-m", "veriloco.cli"]
ADDRESS = "inj1npvwllfr9dqr8erajqqr6s0vxnk2ak55re90dz"
OTHER = "inj1r8n7xah8cgfm0el8u3kvwzja6zrd4le2krtp7d"  # PrivateKey.from_hex("11" * 32)


def epoch_info(**fields: object) -> EpochInfo:
    base: dict[str, object] = {"epoch": 3, "phase": "train", "phase_deadline": 300, "started_at": 100,
                               "model_hash": "ab" * 32, "prev_seed": "cd" * 32}
    return EpochInfo.model_validate({**base, **fields})


def test_phase_progress_counts_down_to_the_deadline() -> None:
    phases = PhaseSpec(train_blocks=200)
    now = phase_progress(epoch_info(), 250, phases, seconds_per_block=0.5)
    assert (now.blocks_left, now.window, now.fraction, now.seconds_left, now.step) == (50, 200, 0.75, 25.0, 2)
    late = phase_progress(epoch_info(), 320, phases, seconds_per_block=None)
    assert (late.blocks_left, late.fraction, late.seconds_left) == (0, 1.0, None)
    objection = phase_progress(epoch_info(phase="objection"), 250, phases, seconds_per_block=None)
    assert (objection.window, objection.fraction) == (None, None)


def test_the_delay_phase_is_a_step_of_its_own_shown_only_while_it_runs() -> None:
    # verification.delay_squarings > 0: after reveal, the epoch waits for the VDF output.
    from veriloco.commands.watch import watch_view

    phases = PhaseSpec(reveal_blocks=30)
    delay = phase_progress(epoch_info(phase="delay"), 290, phases, seconds_per_block=1.0)
    verify = phase_progress(epoch_info(phase="verify"), 290, phases, seconds_per_block=1.0)
    assert (delay.step, delay.window, delay.blocks_left) == (4, 30, 10)
    # With a fallback window (verification.delay_blocks) that is the phase's window.
    assert phase_progress(epoch_info(phase="delay"), 290, phases, 1.0, delay_blocks=40).window == 40
    assert verify.step == 5
    console = Console(width=200, record=True)
    console.print(watch_view("run", delay, [], {}))
    assert " delay " in console.export_text()
    console = Console(width=200, record=True)
    console.print(watch_view("run", verify, [], {}))
    text = console.export_text()
    assert " delay " not in text and " verify " in text


def test_the_funds_audit_says_when_the_accounts_do_not_add_up() -> None:
    member = Member(address=ADDRESS, role="host", endpoint="http://127.0.0.1:8101", bonded="20")
    accounting = Accounting(bonded="20", unbonding="5", reward_pool="3")

    def state(balance: int):
        return build_state(spec=tiny(), contract=ADDRESS, chain="c", current=epoch_info(), height=250,
                           seconds_per_block=None, reports=[], members=[member], accounting=accounting,
                           contract_balance=balance, names={ADDRESS: "alice"}, updated=0.0)

    assert state(28).funds.balanced and state(28).funds.held.base == "28"
    assert not state(27).funds.balanced
    assert state(28).members[0].name == "alice" and state(28).outcomes_epoch is None


def test_an_outcome_shows_what_a_member_weighed_when_a_slash_capped_it() -> None:
    """Issue 27, pipelined runs: the latest decided epoch's outcomes carry a host's and a
    validator's weight where the report has one (what ``veriloco report`` prints as "weighs")."""
    host = HostReport(address=ADDRESS, stake="20", weight="10", revealed=True, outcome="accepted")
    validator = ValidatorReport(address=OTHER, stake="8", revealed=True, outcome="diligent")
    report = EpochReport(run_id="ab" * 32, epoch=2, phase="closed", started_at=1, model_hash="ab" * 32,
                         agreed=True, hosts=[host], validators=[validator], challenges=[])
    state = build_state(spec=tiny(), contract=ADDRESS, chain="c", current=epoch_info(), height=250,
                        seconds_per_block=None, reports=[report], members=[],
                        accounting=Accounting(bonded="0", unbonding="0", reward_pool="0"), contract_balance=0,
                        names={}, updated=0.0)
    weights = {o.role: (o.stake.base, None if o.weight is None else o.weight.base) for o in state.outcomes}
    assert weights == {"host": ("20", "10"), "validator": ("8", None)}


def test_the_app_is_read_only_and_says_when_the_chain_cannot_be_read(tmp_path) -> None:
    missing = NetworkFile(chain=ChainSettings(backend="embedded", state=str(tmp_path / "gone.json")),
                          contract=ADDRESS, run_id="00" * 32)
    client = TestClient(make_app(RunSource(missing), refresh_s=3))
    page = client.get("/")
    assert page.status_code == 200 and 'data-refresh="3000"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert client.get("/page.js").headers["content-type"].startswith("text/javascript")
    state = client.get("/api/state")
    assert state.status_code == 503 and "not found" in state.json()["error"]
    assert client.post("/api/state").status_code == 405 and client.put("/").status_code == 405


class ReportsLedger:
    """A ledger for the live views' caches: epoch 2 is current, epoch 1 still settles (a pipelined
    run), epoch 0 is closed; it records which reports were read."""

    contract_address = ADDRESS
    kept_report = Ledger.kept_report  # the rule under test, over this ledger's reports

    def __init__(self) -> None:
        self.read: list[int] = []

    def spec(self):
        return tiny()

    def epoch(self, epoch=None, lists=True) -> EpochInfo:
        assert lists is False, "the live views read the header only"
        return epoch_info(epoch=2, phase="train", settling=1)

    def height(self) -> int:
        return 150

    def report(self, epoch: int) -> EpochReport:
        self.read.append(epoch)
        return EpochReport(run_id="00" * 32, epoch=epoch, phase="closed" if epoch == 0 else "verify", started_at=0,
                           model_hash="ab" * 32, hosts=[], validators=[], challenges=[])

    def members(self) -> list[Member]:
        return []

    def accounting(self) -> Accounting:
        return Accounting(bonded="0", unbonding="0", reward_pool="0")

    def balance(self, address: str) -> int:
        return 0


def test_the_live_views_keep_only_closed_epochs_reports(monkeypatch) -> None:
    """The dashboard and ``epoch watch`` keep the report of a closed epoch and read the others
    again: in a pipelined run the epoch before the current one may still be settling."""
    from veriloco.commands import watch
    from veriloco.dashboard import source

    ledger = ReportsLedger()
    net = NetworkFile(chain=ChainSettings(backend="embedded", state="unused.json"), contract=ADDRESS, run_id="00" * 32)
    monkeypatch.setattr(source, "open_ledger", lambda _: contextlib.nullcontext(ledger))
    monkeypatch.setattr(watch, "open_ledger", lambda _: contextlib.nullcontext(ledger))
    dashboard = RunSource(net, min_interval=0)
    dashboard.state()
    dashboard.state()
    assert ledger.read == [0, 1, 2, 1, 2]
    ledger.read.clear()
    closed: dict[int, EpochReport] = {}
    for _ in range(2):
        watch._frame(net, BlockClock(), {}, 3, closed)
    assert ledger.read == [0, 1, 1] and list(closed) == [0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_the_page_follows_a_running_simulation_in_a_real_browser(tmp_path) -> None:
    from headless_chromium import HeadlessChromium, chromium_binary

    if chromium_binary() is None:
        if os.environ.get("VERILOCO_REQUIRE_BROWSER"):
            pytest.fail("chromium is not installed (make test installs it)")
        pytest.skip("chromium is not installed")
    env = {**os.environ, "VERILOCO_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
    work = tmp_path / "sim"
    sim = subprocess.Popen([*VERILOCO, "simulate", "--preset", "tiny", "--epochs", "3", "--hosts", "1", "--cheaters",
                            "1", "--validators", "2", "--workdir", str(work)], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port = free_port()
    dashboard = browser = None
    try:
        deadline = time.monotonic() + 120
        while not (work / "network.json").exists():
            assert sim.poll() is None and time.monotonic() < deadline, "simulate wrote no network file"
            time.sleep(0.2)
        dashboard = subprocess.Popen([*VERILOCO, "dashboard", "--network", str(work / "network.json"), "--listen",
                                      f"127.0.0.1:{port}", "--refresh", "1"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while True:  # the dashboard reads the run once before it listens
            assert dashboard.poll() is None, dashboard.stderr.read() if dashboard.stderr else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/state", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        browser = HeadlessChromium(f"http://127.0.0.1:{port}/", tmp_path / "profile")
        closed = "document.querySelectorAll('#epochs tbody tr[data-phase=closed]').length"
        browser.wait_for("document.querySelectorAll('#epochs tbody tr').length", timeout=120)
        first = browser.evaluate(closed)
        assert sim.poll() is None and first < 3  # the run is still going: later epochs must close while we look
        assert browser.evaluate("document.getElementById('run-name').textContent") == "tiny"
        assert "host-0" in browser.evaluate("document.querySelector('#members tbody').textContent")
        browser.wait_for(f"{closed} > {first}", timeout=300)  # the same page, not reloaded, shows the close
        reads = int(browser.evaluate("document.getElementById('status').dataset.reads"))
        assert reads >= 2
        assert browser.evaluate("document.querySelectorAll('#loss circle.val').length") >= 1
        assert "yes" in browser.evaluate("document.getElementById('funds-rows').textContent")
        assert "invalid" in browser.evaluate("document.querySelector('#outcomes tbody').textContent")
        assert sim.wait(timeout=600) == 0
        browser.wait_for(f"{closed} == 3", timeout=60)
        shot = os.environ.get("VERILOCO_DASHBOARD_SCREENSHOT")  # how docs/operators-dashboard.png was taken
        if shot:
            browser.screenshot(Path(shot))
    finally:
        if browser is not None:
            browser.close()
        for proc in (dashboard, sim):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
