"""The CLI as a user meets it: commands on a real (embedded) run, JSON output. (Errors: test_cli_errors.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chain.embedded import EmbeddedChain
from trainer.behaviour import HostBehaviour
from trainer.data import Dataset
from trainer.presets import tiny
from veriloco.commands.common import parse_amount
from veriloco.connect import ChainSettings, NetworkFile
from veriloco.errors import CommandError
from veriloco.network import EmbeddedChainFactory, LocalNetwork, Roster

VERILOCO = [sys.executable, "-m", "veriloco.cli"]


def cli(*args: str, home: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {"VERILOCO_HOME": str(home), "VERILOCO_PASSPHRASE": "pw", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([*VERILOCO, *args], env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory) -> Path:
    """Two epochs of a small run with verification off, saved as an embedded network file."""
    root = tmp_path_factory.mktemp("run")
    spec = tiny("cli").with_changes(train={"inner_steps": 16, "segment_steps": 4, "batch_size": 8},
                                    verification={"enabled": False}, phases={"min_hosts": 2, "min_validators": 0})
    factory = EmbeddedChainFactory()
    net = LocalNetwork(spec, root, Roster(hosts=[HostBehaviour(), HostBehaviour()]),
                       Dataset.load(spec.data, root / "cache"), chain=factory)
    net.run_epoch()
    net.run_epoch()
    assert isinstance(factory.chain, EmbeddedChain)
    factory.chain.save(root / "chain.json")
    return NetworkFile(chain=ChainSettings(backend="embedded", state=str(root / "chain.json")),
                       contract=net.ledger.contract_address, run_id=spec.run_id().hex()).save(root / "network.json")


@pytest.mark.slow
def test_operator_commands_read_a_saved_run(saved_run, tmp_path) -> None:
    home = tmp_path / "home"
    epochs = json.loads(cli("epoch", "list", "--json", "--network", str(saved_run), home=home).stdout)
    assert [e["epoch"] for e in epochs] == [0, 1, 2] and [e["agreed"] for e in epochs[:2]] == [True, True]
    report = json.loads(cli("report", "1", "--json", "--network", str(saved_run), home=home).stdout)
    assert {h["outcome"] for h in report["hosts"]} == {"accepted"} and report["next_model_hash"]
    text = cli("report", "1", "--plot", str(tmp_path / "loss.png"), "--network", str(saved_run), home=home).stdout
    assert "accepted" in text and "validation loss of θ_e+1" in text
    assert (tmp_path / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    show = cli("run", "show", "--network", str(saved_run), home=home).stdout
    assert "tiny" not in show.splitlines()[0] and "cli" in show.splitlines()[0]
    current = json.loads(cli("epoch", "show", "--json", "--network", str(saved_run), home=home).stdout)
    assert current["epoch"] == 2 and current["phase"] == "join"


def test_template_round_trips_through_deploy_parsing(tmp_path) -> None:
    from veriloco.commands.common import read_spec_file

    out = tmp_path / "spec.toml"
    cli("run", "template", "--preset", "tiny", "--out", str(out), home=tmp_path)
    assert read_spec_file(out) == tiny()


@pytest.mark.parametrize("text, expected", [("1500", 1500), ("20INJ", 20 * 10**18), ("0.5 inj", 5 * 10**17)])
def test_amounts(text, expected) -> None:
    assert parse_amount(text, "inj") == expected


@pytest.mark.parametrize("text", ["1.5", "20atom", "-3", "1e5", "0.0000000000000000001inj"])
def test_bad_amounts(text) -> None:
    with pytest.raises(CommandError):
        parse_amount(text, "inj")
