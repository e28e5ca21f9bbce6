"""What a user sees when a command fails: one line on stderr, a non-zero exit status, no traceback.

In process with Typer's runner (the root command's error handling is where the runner sees it),
against a real embedded deployment of the contract; one subprocess run checks the entry point.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner, Result

from chain.embedded import EmbeddedChain
from chain.embedded.backend import deploy_embedded
from chain.ledger import ContractError
from protocol.injective import DENOM, GENESIS_BALANCE, ONE_INJ
from protocol.keys import PrivateKey
from trainer.presets import tiny
from veriloco import __version__
from veriloco.cli import app
from veriloco.commands.member import listen_for
from veriloco.connect import ChainSettings, NetworkFile
from veriloco.keystore import Keystore

PASSPHRASE = "pw"
STANDBY_PUBKEY = PrivateKey(bytes([5]) * 32).public_key.hex()


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A run deployed on an embedded chain saved to disk, and a home with two keys: ``outsider`` is
    no member (funded, so it may bond), ``member`` is a host with 20 INJ bonded and nothing unbonding."""
    root = tmp_path_factory.mktemp("deployed")
    operator = PrivateKey(hashlib.sha256(b"cli-errors-operator").digest())
    member = PrivateKey(hashlib.sha256(b"cli-errors-member").digest())
    outsider = PrivateKey(hashlib.sha256(b"cli-errors-outsider").digest())
    chain = EmbeddedChain(genesis_balances={k.address(): {DENOM: GENESIS_BALANCE}
                                            for k in (operator, member, outsider)})
    ledger = deploy_embedded(chain, operator, tiny("cli-errors"), hashlib.sha256(b"theta_0").hexdigest(),
                             treasury=operator.address())
    ledger.bond(member, "host", "http://127.0.0.1:8101", 20 * ONE_INJ)
    chain.save(root / "chain.json")
    network = NetworkFile(chain=ChainSettings(backend="embedded", state=str(root / "chain.json")),
                          contract=ledger.contract_address, run_id="00" * 32).save(root / "network.json")
    home = root / "home"
    Keystore.in_home(home).add("outsider", outsider, PASSPHRASE)
    Keystore.in_home(home).add("member", member, PASSPHRASE)
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
    (["host", "bond", "20", "--key", "outsider"], "'20' has no denom: write 20INJ or 20000000000000000000inj"),
    (["host", "bond", "1.5inj", "--key", "outsider"], "inj is the base unit and has no fractions"),
    (["host", "bond", "20atom", "--key", "outsider"], "unknown denom 'atom'"),
    (["host", "bond", "5INJ", "--key", "nobody"], "no key named 'nobody'"),
    # A bond that leaves the member below the role's minimum: every amount in both notations.
    (["host", "bond", "20inj", "--key", "outsider"],
     "bond: 0.00000000000000002INJ = 20inj is below the run's minimum host stake of "
     "10INJ = 10000000000000000000inj, so this host could not join an epoch; bond at least "
     "10INJ = 10000000000000000000inj, or pass --below-minimum"),
    (["validator", "bond", "1INJ", "--key", "outsider"],
     "minimum validator stake of 5INJ = 5000000000000000000inj"),
    (["host", "status", "inj1notanaddress"], "invalid address"),
    (["validator", "status", "--key", "outsider"], "is not a member of this run"),
    (["host", "claim", "--key", "member"], "claim: nothing to claim;"),
    (["host", "claim", "--key", "outsider"], "is not a member"),
    # The contract writes base units; the CLI adds the display form.
    (["host", "unbond", "25INJ", "--key", "member"],
     "unbond: cannot unbond 25000000000000000000inj (25INJ), only 20000000000000000000inj (20INJ) is bonded"),
    (["report", "7"], "epoch 7 has not started: the run is in epoch 0"),
    (["model", "export", "out", "--epoch", "3"], "θ_3 does not exist yet: the run is in epoch 0"),
    (["standby", "run", "--key", "member", "--journal", "."], "a standby needs a real chain"),
    (["host", "set-standby", "inj1notanaddress", "--key", "member"], "invalid address 'inj1notanaddress'"),
    (["host", "set-standby", "--key", "outsider", "--clear"], "set_standby: inj1"),
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
    (["simulate", "--device", "meta"], "device 'meta': only cpu and cuda are supported"),
    (["run", "template", "--set", "phases.min_hosts=0"], "--set: phases.min_hosts: Input should be greater than"),
    (["validator", "run", "--key", "v", "--nproc-per-node", "2"], "--nproc-per-node is for hosts"),
    (["host", "run", "--key", "h", "--nproc-per-node", "2", "--adversary", "lazy"], "adversaries train in one process"),
    (["host", "run", "--key", "h", "--accumulate", "2"], "--accumulate is for an island"),
    (["host", "run", "--key", "h", "--upload-rate", "0"], "--upload-rate 0.0: upload rate must be a positive"),
    (["validator", "run", "--key", "v", "--upload-rate", "inf"], "--upload-rate inf: upload rate must be a positive"),
    (["host", "run", "--key", "h", "--nnodes", "2"], "needs --master-addr"),
    (["host", "run", "--key", "h", "--live-leaf-every", "3"],
     "--live-leaf-every must be auto or a divisor of --full-leaf-every (4), not '3'"),
    (["simulate", "--full-leaf-every", "2", "--live-leaf-every", "many"],
     "--live-leaf-every must be auto or a divisor of --full-leaf-every (2), not 'many'"),
    (["host", "run", "--key", "h", "--nnodes", "2", "--node-rank", "2", "--master-addr", "10.0.0.1"],
     "node rank 2 of 2 nodes"),
    (["standby", "run", "--journal", "/nonexistent"], "--journal /nonexistent is not a folder"),
    (["host", "set-standby", "--key", "h"], "give the standby's address, or --clear (not both)"),
    (["standby", "run", "--journal", ".", "--grace", "1"], "--grace 1.0: grace must be at least 0 and below 1"),
    (["standby", "run", "--journal", ".", "--grace", "-0.5"], "--grace -0.5: grace must be at least 0 and below 1"),
    (["standby", "run", "--journal", ".", "--listen", "nowhere"], "--listen 'nowhere': expected HOST:PORT"),
    (["host", "run", "--key", "h", "--standby-url", "http://127.0.0.1:8501"],
     "--standby-url and --standby-pubkey go together"),
    (["host", "run", "--key", "h", "--standby-url", "http://127.0.0.1:8501", "--standby-pubkey", "02" + "ab" * 31],
     "--standby-pubkey '02abab"),
    (["validator", "run", "--key", "v", "--standby-url", "ftp://10.0.0.2", "--standby-pubkey", STANDBY_PUBKEY],
     "--standby-url 'ftp://10.0.0.2':"),
])
def test_errors_without_a_run_are_one_line(args, message, tmp_path) -> None:
    assert_one_line(invoke(*args, home=tmp_path), message)


@pytest.mark.parametrize("model", [{"architecture": "subprocess:run"}, {"factory": "subprocess:run"}])
def test_deploy_refuses_a_spec_naming_an_unknown_architecture(model, tmp_path) -> None:
    # Refused while the spec is read, before any chain is asked (no --grpc is given either).
    spec = tiny("cli-model").model_dump(mode="json")
    spec["model"] = model
    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    message = "unknown model architecture" if "architecture" in model else "Extra inputs are not permitted"
    assert_one_line(invoke("run", "deploy", str(path), home=tmp_path), message)


@pytest.mark.parametrize(("economics", "message"), [
    ({"min_host_stake": "1"}, "economics: Value error, min_host_stake (1) must be at least 1000000 base units"),
    ({"min_validator_stake": "1000000", "reward_per_epoch": str(10**19)},
     "min_validator_stake (1000000) must be at least the validators' part of reward_per_epoch"),
])
def test_deploy_refuses_minimum_stakes_that_make_sybils_cheap(economics, message, tmp_path) -> None:
    # Refused while the spec is read, before any chain is asked (no --grpc is given either).
    spec = tiny("cli-stakes").model_dump(mode="json")
    spec["economics"].update(economics)
    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(spec))
    assert_one_line(invoke("run", "deploy", str(path), home=tmp_path), message)


def test_a_damaged_network_file_is_one_line(tmp_path) -> None:
    bad = tmp_path / "network.json"
    bad.write_text('{"chain": {"backend": "moon"}}')
    assert_one_line(invoke("epoch", "show", "--network", str(bad), home=tmp_path), "is not a network file")


@pytest.mark.parametrize("args, message", [
    (["keys", "show"], "Missing argument 'name'"),
    (["host", "bond", "20", "INJ"], "unexpected extra argument(s) (INJ); write an amount as one word, e.g. 20INJ"),
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


def test_a_node_that_is_down_is_one_line_within_the_timeout(tmp_path) -> None:
    """Nothing listens on the node's port: the error names the node, the timeout and what to check."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # free once closed: nothing listens there
    down = NetworkFile(chain=ChainSettings(backend="cosmos", grpc=f"grpc+http://127.0.0.1:{port}", chain_id="x"),
                       contract="inj1npvwllfr9dqr8erajqqr6s0vxnk2ak55re90dz", run_id="00" * 32)
    network = down.save(tmp_path / "network.json")
    result = invoke("--timeout", "0.5", "epoch", "list", "--network", str(network), home=tmp_path)
    assert_one_line(result, f"the node at grpc+http://127.0.0.1:{port} did not answer within 0.5 s")
    assert "is the node running?" in result.stderr


def test_a_busy_listen_port_is_one_line_before_anything_starts(tmp_path) -> None:
    down = NetworkFile(chain=ChainSettings(backend="cosmos", grpc="grpc+http://127.0.0.1:9", chain_id="x"),
                       contract="inj1npvwllfr9dqr8erajqqr6s0vxnk2ak55re90dz", run_id="00" * 32)
    network = down.save(tmp_path / "network.json")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = invoke("host", "run", "--listen", f"127.0.0.1:{port}", "--network", str(network), home=tmp_path)
    assert_one_line(result, f"cannot listen on 127.0.0.1:{port}")
    assert_one_line(invoke("host", "run", "--listen", "8101", "--network", str(network), home=tmp_path),
                    "expected HOST:PORT")


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


def test_stake_can_reach_the_minimum_in_parts(deployed, tmp_path) -> None:
    """A bond below the minimum goes through when asked for, and the part that reaches it needs no flag."""
    network, home = deployed
    copy = tmp_path / "chain.json"
    shutil.copy(Path(json.loads(network.read_text())["chain"]["state"]), copy)
    data = json.loads(network.read_text())
    data["chain"]["state"] = str(copy)
    mine = tmp_path / "network.json"
    mine.write_text(json.dumps(data))
    first = invoke("validator", "bond", "2INJ", "--below-minimum", "--key", "outsider", "--network", str(mine),
                   home=home)
    assert first.exit_code == 0, first.stderr
    assert_one_line(invoke("validator", "bond", "2INJ", "--key", "outsider", "--network", str(mine), home=home),
                    "on top of 2INJ = 2000000000000000000inj already bonded")
    last = invoke("validator", "bond", "3INJ", "--key", "outsider", "--network", str(mine), home=home)
    assert last.exit_code == 0 and "bonded 5INJ as validator" in last.stdout, last.stderr


@pytest.mark.parametrize("endpoint, listen", [
    ("http://127.0.0.1:8301", "127.0.0.1:8301"),
    ("http://localhost:8101/", "localhost:8101"),
    ("http://[::1]:8102", "[::1]:8102"),
    ("https://validator.example.org", "0.0.0.0:443"),
    ("http://203.0.113.7:9000/artifacts", "203.0.113.7:9000"),
])
def test_a_daemon_serves_on_the_port_of_its_bonded_endpoint(endpoint, listen) -> None:
    assert listen_for(endpoint) == listen

