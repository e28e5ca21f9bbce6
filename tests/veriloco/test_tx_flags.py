"""Cosmos-style transaction flags after the command (``veriloco host bond 10INJ --fees 0.001INJ``) as
well as before it, merged into one set of options (``veriloco.commands.tx_flags``). The devnet test
(tests/chain/test_cli_devnet.py) shows the node charging what these flags set."""

from __future__ import annotations

import hashlib
from decimal import Decimal
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from protocol.keys import PrivateKey
from veriloco.cli import app
from veriloco.connect import TX, ChainSettings, NetworkFile, open_ledger
from veriloco.keystore import Keystore

DEAD = "grpc+http://127.0.0.1:9"  # nothing listens: a command that dials it fails after --timeout
OTHER_DEAD = "grpc+http://127.0.0.1:7"
CONTRACT = PrivateKey(hashlib.sha256(b"tx-flags-contract").digest()).address("inj")  # any address


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    Keystore.in_home(home).add("host", PrivateKey(hashlib.sha256(b"tx-flags").digest()), "pw", scrypt_n=2**10)
    NetworkFile(chain=ChainSettings(backend="cosmos", grpc=DEAD, chain_id="veriloco-devnet-1"),
                contract=CONTRACT, run_id="00" * 32).save(home / "network.json")
    return home


def invoke(home: Path, *args: str, **env: str) -> Result:
    runner = CliRunner(env={"VERILOCO_HOME": str(home), "VERILOCO_PASSPHRASE": "pw", "VERILOCO_DEBUG": None,
                            "VERILOCO_GAS": None, "VERILOCO_NODE": None, "VERILOCO_FEES": None, **env})
    return runner.invoke(app, ["--timeout", "0.2", *args])


BOND = ("host", "bond", "10INJ", "--key", "host", "--below-minimum")


def test_flags_after_the_command_reach_the_transaction(home: Path) -> None:
    done = invoke(home, *BOND, "--node", OTHER_DEAD, "--gas", "900000", "--fees", "0.001INJ",
                  "--gas-adjustment", "2", "--gas-prices", "500000000inj")
    # The bond got as far as asking the node the flag named (not the network file's), which is down.
    assert done.exit_code == 1 and "127.0.0.1:7" in done.stderr and "127.0.0.1:9" not in done.stderr, done.output
    assert (TX.node, TX.gas, TX.gas_adjustment, TX.gas_prices, TX.fees) == (OTHER_DEAD, "900000", 2.0,
                                                                           "500000000inj", "0.001INJ")
    with open_ledger(NetworkFile.model_validate_json((home / "network.json").read_text())) as ledger:
        chain = ledger.backend.chain  # type: ignore[attr-defined]
        assert ledger.backend.gas_limit == 900000  # type: ignore[attr-defined]  # signed with it, not simulated
        assert chain.url.endswith("127.0.0.1:7") and chain.config.fee(900000) == 10**15
        assert (chain.config.gas_multiplier, chain.config.gas_price) == (Decimal(2), Decimal(500000000))


def test_flags_before_the_command_still_work_and_may_repeat_the_same_value(home: Path) -> None:
    done = invoke(home, "--gas", "900000", "--fees", "0.001INJ", *BOND, "--fees", "0.001INJ")
    assert done.exit_code == 1 and "127.0.0.1:9" in done.stderr, done.output  # reached the network file's node
    assert (TX.node, TX.gas, TX.fees) == (None, "900000", "0.001INJ")


def test_a_flag_after_the_command_overrides_the_environment(home: Path) -> None:
    done = invoke(home, *BOND, "--gas", "900000", VERILOCO_GAS="auto", VERILOCO_FEES="0.001INJ")
    assert done.exit_code == 1 and "127.0.0.1:9" in done.stderr, done.output
    assert (TX.gas, TX.fees) == ("900000", "0.001INJ")


def test_a_flag_given_twice_with_different_values_is_refused(home: Path) -> None:
    done = invoke(home, "--fees", "0.001INJ", *BOND, "--fees", "0.002INJ")
    assert done.exit_code == 2, done.output
    assert done.stderr.startswith("error: Invalid value for '--fees': 0.002INJ after the command, but 0.001INJ "
                                  "before the command: give it once")
    assert len(done.stderr.strip().splitlines()) == 1
    node = invoke(home, "--node", DEAD, "run", "join", "--node", OTHER_DEAD, "--contract", CONTRACT)
    assert node.exit_code == 2 and "'--node'" in node.stderr and "give it once" in node.stderr, node.output


@pytest.mark.parametrize("gas", ["lots", "0", "-5", "1.5"])
def test_a_bad_gas_is_a_usage_error_after_the_command_and_before_it(home: Path, gas: str) -> None:
    for args in ((*BOND, "--gas", gas), ("--gas", gas, *BOND)):
        done = invoke(home, *args)
        assert done.exit_code == 2, done.output
        assert "Invalid value for '--gas'" in done.stderr and "expected auto or a positive number" in done.stderr


def test_read_commands_take_node_only(home: Path) -> None:
    shown = invoke(home, "run", "show", "--node", OTHER_DEAD)
    assert shown.exit_code == 1 and "127.0.0.1:7" in shown.stderr, shown.output
    for command in (("run", "show"), ("epoch", "list"), ("host", "status")):
        refused = invoke(home, *command, "--fees", "0.001INJ")
        assert refused.exit_code == 2 and "No such option: --fees" in refused.stderr, refused.output
    alone = invoke(home, "dashboard", "--contract", CONTRACT)
    assert alone.exit_code == 1 and "--contract needs --node" in alone.stderr, alone.output


def test_every_command_that_sends_a_transaction_takes_the_flags() -> None:
    from typer.main import get_command

    root = get_command(app)
    sending = [("host", "bond"), ("host", "unbond"), ("host", "claim"), ("host", "run"), ("validator", "bond"),
               ("validator", "claim"), ("validator", "run"), ("epoch", "advance"), ("run", "deploy"),
               ("run", "migrate")]
    for group, name in sending:
        command = root.commands[group].commands[name]  # type: ignore[attr-defined]
        flags = {opt for p in command.params for opt in p.opts}
        assert {"--node", "--gas", "--gas-adjustment", "--gas-prices", "--fees"} <= flags, (group, name)
