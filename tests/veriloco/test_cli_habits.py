"""What Cosmos operators expect of a CLI: exit codes scripts can test, whole transaction hashes,
shell completion (issue 33)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from chain.devnet import STATE_FILE, DevnetPorts
from chain.types import TxResult
from veriloco.output import tx_line

VERILOCO = [sys.executable, "-m", "veriloco.cli"]


def run(*args: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*VERILOCO, *args], env={"VERILOCO_HOME": str(home), "PATH": os.environ["PATH"], **env},
                          capture_output=True, text=True, timeout=120)


def test_devnet_status_exits_non_zero_when_the_devnet_is_down(tmp_path) -> None:
    node = tmp_path / "home" / "devnet"
    node.mkdir(parents=True)
    state = {"chain_id": "veriloco-devnet-1", "ports": asdict(DevnetPorts.free()), "block_time": "200ms",
             "accounts": []}  # what `devnet up` leaves, with nothing running
    (node / STATE_FILE).write_text(json.dumps(state))
    done = run("devnet", "status", home=tmp_path / "home")
    assert done.returncode == 3 and "is not running" in done.stdout
    as_json = run("devnet", "status", "--json", home=tmp_path / "home")
    assert as_json.returncode == 3 and json.loads(as_json.stdout)["devnet"]["running"] is False
    nothing = run("devnet", "status", home=tmp_path / "elsewhere")
    assert nothing.returncode == 1 and nothing.stderr.startswith("error: no devnet in")


def test_text_output_shows_whole_transaction_hashes() -> None:
    tx = TxResult(tx_hash="AB" * 32, height=133, gas_used=1, fee=2, events=[])
    assert tx_line(tx) == f"tx {'AB' * 32} at height 133"


def test_shell_completion_completes_commands_and_subcommands(tmp_path) -> None:
    # `--show-completion` takes no value: it prints the script of the shell it detects, which
    # under make is sh (unsupported), so the bash script is asked for by name, as Click does.
    script = run(home=tmp_path, _VERILOCO_COMPLETE="source_bash")
    assert script.returncode == 0 and "_veriloco_completion" in script.stdout
    done = run(home=tmp_path, _VERILOCO_COMPLETE="complete_bash", COMP_WORDS="veriloco epoch adv", COMP_CWORD="2")
    assert done.returncode == 0 and done.stdout.split() == ["advance"]


def test_transaction_options_reach_the_chain_client(monkeypatch) -> None:
    """--node, --gas-adjustment, --gas-prices and --fees as the chain client gets them (the devnet
    test shows the node charging them: tests/chain/test_cli_devnet.py)."""
    from decimal import Decimal

    from veriloco.connect import TX, ChainSettings, cosmos_chain
    from veriloco.errors import CommandError

    settings = ChainSettings(backend="cosmos", grpc="grpc+http://127.0.0.1:9", chain_id="veriloco-devnet-1")
    monkeypatch.setattr(TX, "node", "grpc+http://127.0.0.1:19")
    monkeypatch.setattr(TX, "gas_adjustment", 2.0)
    monkeypatch.setattr(TX, "gas_prices", "500000000inj")
    monkeypatch.setattr(TX, "fees", "0.001INJ")
    with cosmos_chain(settings) as chain:  # nothing is dialed until a request
        assert chain.url.endswith("127.0.0.1:19")
        assert (chain.config.gas_multiplier, chain.config.gas_price) == (Decimal(2), Decimal(500000000))
        assert chain.config.fee(123) == 10**15
    monkeypatch.setattr(TX, "gas_prices", "cheap")
    with pytest.raises(CommandError, match="expected a price in inj"):
        cosmos_chain(settings)
    monkeypatch.setattr(TX, "gas", "-5")
    with pytest.raises(CommandError, match="expected auto or a positive number"):
        TX.gas_limit()


def test_a_key_exported_by_injectived_must_derive_the_address_it_showed() -> None:
    from protocol.keys import KeyType, PrivateKey
    from veriloco.injectived_keyring import KeyringError, key_from_export

    key = PrivateKey.from_hex("11" * 32, KeyType.ETH_SECP256K1)
    pubkey = json.dumps({"@type": "/injective.crypto.v1beta1.ethsecp256k1.PubKey", "key": "x"})
    shown = {"address": key.address("inj"), "pubkey": pubkey}
    assert key_from_export(shown, "11" * 32 + "\n").address("inj") == key.address("inj")
    other = {**shown, "address": PrivateKey.from_hex("22" * 32, KeyType.ETH_SECP256K1).address("inj")}
    with pytest.raises(KeyringError, match="derives"):
        key_from_export(other, "11" * 32)
    with pytest.raises(KeyringError, match="no private key"):
        key_from_export(shown, "Error: invalid passphrase")
    with pytest.raises(KeyringError, match="cannot be imported"):
        key_from_export({**shown, "pubkey": json.dumps({"@type": "/cosmos.crypto.multisig.LegacyAminoPubKey"})}, "")
