"""What a user sees when a command fails: one line on stderr, a non-zero exit status, no traceback.

In process with Typer's runner (the root command's error handling is where the runner sees it),
against a real embedded deployment of the contract; one subprocess run checks the entry point.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner, Result

from chain.embedded import EmbeddedChain
from chain.embedded.backend import deploy_embedded
from chain.ledger import ContractError
from protocol.injective import DENOM, GENESIS_BALANCE
from protocol.keys import PrivateKey
from trainer.presets import tiny
from veriloco import __version__
from veriloco.cli import app
from veriloco.connect import ChainSettings, NetworkFile
from veriloco.keystore import Keystore

PASSPHRASE = "pw"


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run deployed on an embedded chain saved to disk, and a home whose key ``outsider`` is no member."""
    root = tmp_path_factory.mktemp("deployed")
    operator = PrivateKey(hashlib.sha256(b"cli-errors-operator").digest())
    chain = EmbeddedChain(genesis_balances={operator.address(): {DENOM: GENESIS_BALANCE}})
    ledger = deploy_embedded(chain, operator, tiny("cli-errors"), hashlib.sha256(b"theta_0").hexdigest(),
                             treasury=operator.address())
    chain.save(root / "chain.json")
    network = NetworkFile(chain=ChainSettings(backend="embedded", state=str(root / "chain.json")),
                          contract=ledger.contract_address, run_id="00" * 32).save(root / "network.json")
    home = root / "home"
    Keystore.in_home(home).add("outsider", PrivateKey(hashlib.sha256(b"cli-errors-outsider").digest()), PASSPHRASE)
    return network, home


def invoke(*args: str, home: Path) -> Result:
    runner = CliRunner(env={"VERILOCO_HOME": str(home), "VERILOCO_PASSPHRASE": PASSPHRASE, "VERILOCO_DEBUG": None})
    return runner.invoke(app, list(args))


def assert_one_line(result: Result, message: str, exit_code: int = 1) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == exit_code, result.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.output


def test_a_contract_refusal_is_one_line(deployed) -> None:
    network, home = deployed
    result = invoke("host", "unbond", "5INJ", "--key", "outsider", "--network", str(network), home=home)
    assert_one_line(result, "is not a member")


def test_debug_shows_the_error_itself(deployed) -> None:
    network, home = deployed
    result = invoke("--debug", "host", "unbond", "5INJ", "--key", "outsider", "--network", str(network), home=home)
    assert result.exit_code == 1 and isinstance(result.exception, ContractError)
    assert "is not a member" in str(result.exception) and "error: " not in result.stderr


@pytest.mark.parametrize("args, message", [
    (["host", "bond", "1.5", "--key", "outsider"], "base units are whole numbers"),
    (["host", "bond", "20atom", "--key", "outsider"], "unknown unit 'atom'"),
    (["host", "bond", "5INJ", "--key", "nobody"], "no key named 'nobody'"),
    (["host", "status", "inj1notanaddress"], "invalid address"),
    (["validator", "status", "--key", "outsider"], "is not a member of this run"),
])
def test_errors_against_a_deployed_run_are_one_line(deployed, args, message) -> None:
    network, home = deployed
    assert_one_line(invoke(*args, "--network", str(network), home=home), message)


@pytest.mark.parametrize("args, message", [
    (["report", "0"], "no network file at"),
    (["report", "0", "--network", "/nonexistent/network.json"], "no network file at /nonexistent/network.json"),
    (["keys", "show", "nobody"], "no key named 'nobody'"),
    (["run", "deploy"], "give a spec file or --preset"),
    (["simulate", "--chain", "moon"], "--chain must be embedded or devnet"),
    (["simulate", "--adversary", "gremlin", "--epochs", "1"], "unknown adversary 'gremlin'"),
    (["simulate", "--rule", "mode"], "unknown rule 'mode'"),
])
def test_errors_without_a_run_are_one_line(args, message, tmp_path) -> None:
    assert_one_line(invoke(*args, home=tmp_path), message)


def test_a_damaged_network_file_is_one_line(tmp_path) -> None:
    bad = tmp_path / "network.json"
    bad.write_text('{"chain": {"backend": "moon"}}')
    assert_one_line(invoke("epoch", "show", "--network", str(bad), home=tmp_path), "is not a network file")


@pytest.mark.parametrize("args, message", [
    (["keys", "show"], "Missing argument 'name'"),
    (["keys", "show", "--bogus", "x"], "No such option: --bogus"),
    (["epoch", "show", "notanumber"], "Invalid value for 'epoch'"),
    (["nonsense"], "No such command 'nonsense'"),
])
def test_usage_errors_are_one_line_with_status_2(args, message, tmp_path) -> None:
    result = invoke(*args, home=tmp_path)
    assert_one_line(result, message, exit_code=2)
    assert "--help" in result.stderr


def test_bad_spec_files_are_refused_clearly(tmp_path) -> None:
    bad = tmp_path / "spec.toml"
    data = tiny().model_dump(mode="json")
    data["train"]["lr"] = 0.003  # a float: ambiguous, refused
    bad.write_text(tomli_w.dumps(data))
    result = invoke("run", "deploy", str(bad), "--grpc", "grpc+http://127.0.0.1:9", "--chain-id", "x", home=tmp_path)
    assert_one_line(result, "train.lr")
    assert "floats are ambiguous" in result.stderr
    bad.write_text("this is [not toml")
    assert_one_line(invoke("run", "deploy", str(bad), home=tmp_path), "not valid TOML")


def test_version(tmp_path) -> None:
    for args in (["--version"], ["version"]):
        result = invoke(*args, home=tmp_path)
        assert result.exit_code == 0 and result.stdout.strip() == __version__


def test_the_entry_point_prints_one_line_and_fails(tmp_path) -> None:
    """The real process: the exit status and stderr a shell sees."""
    env = {"VERILOCO_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "veriloco.cli", "report", "0"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: no network file at") and len(done.stderr.strip().splitlines()) == 1
