"""Keys against the real Injective node: our derivation equals ``injectived keys add --recover`` for
both key types, and a key imported through ``veriloco keys`` signs bank and contract transactions
that the node accepts (its eth_secp256k1 signatures over keccak256 of the SignDoc)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import httpx
import pytest
from devnet_backend import _require_extra, faucet_key
from ledger_env import make_spec
from typer.testing import CliRunner

from chain.cosmos.config import INJECTIVE_ETH_PUBKEY_TYPE, SECP256K1_PUBKEY_TYPE
from chain.devnet import _node_env, dev_mnemonic, injectived_binary
from protocol.keys import KeyType, PrivateKey, new_mnemonic
from veriloco.commands import keys as keys_cmd
from veriloco.keystore import Keystore

pytest_plugins = ["devnet_backend"]

ABANDON = "abandon " * 11 + "about"


def injectived_recover(home: Path, name: str, mnemonic: str, *options: str) -> dict:
    """``injectived keys add NAME --recover --keyring-backend test [options]``: its JSON answer."""
    binary = injectived_binary()
    done = subprocess.run([str(binary), "keys", "add", name, "--recover", "--keyring-backend", "test",
                           "--home", str(home), "--output", "json", *options],
                          input=(mnemonic + "\n").encode(), capture_output=True, env=_node_env(binary), timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr.decode()
    # Recent SDKs print the JSON on stdout, older ones on stderr.
    text = (done.stdout or done.stderr).decode()
    return json.loads(text[text.index("{"):])


# (our key type, our path or None for the default, injectived's options)
DERIVATIONS = [
    (KeyType.ETH_SECP256K1, None, ()),                                           # both sides' defaults
    (KeyType.SECP256K1, None, ("--key-type", "secp256k1", "--coin-type", "118")),
    (KeyType.ETH_SECP256K1, "m/44'/60'/1'/0/3", ("--account", "1", "--index", "3")),
    (KeyType.SECP256K1, "m/44'/60'/0'/0/0", ("--key-type", "secp256k1")),        # injectived's coin type stays 60
]


@pytest.mark.devnet
@pytest.mark.parametrize("mnemonic", [ABANDON, dev_mnemonic("test0"), new_mnemonic()],
                         ids=["abandon", "devnet-test0", "fresh"])
def test_addresses_and_public_keys_equal_injectiveds_own_derivation(tmp_path, mnemonic) -> None:
    _require_extra()  # the node's binary only; no devnet needs to run
    for i, (key_type, path, options) in enumerate(DERIVATIONS):
        theirs = injectived_recover(tmp_path / "node", f"k{i}", mnemonic, *options)
        ours = PrivateKey.from_mnemonic(mnemonic, key_type, path)
        assert ours.address() == theirs["address"], (key_type, path, options)
        pubkey = json.loads(theirs["pubkey"])
        assert pubkey["@type"] == (INJECTIVE_ETH_PUBKEY_TYPE if key_type == KeyType.ETH_SECP256K1
                                   else SECP256K1_PUBKEY_TYPE)
        assert base64.b64decode(pubkey["key"]) == ours.public_key.compressed


def _account_pubkey(devnet, address: str) -> dict:
    r = httpx.get(f"http://127.0.0.1:{devnet.ports.rest}/cosmos/auth/v1beta1/accounts/{address}", timeout=10)
    r.raise_for_status()
    account = r.json()["account"]
    return (account.get("base_account") or account)["pub_key"]


@pytest.mark.devnet
@pytest.mark.slow
@pytest.mark.parametrize("key_type", list(KeyType))
def test_a_key_imported_through_the_cli_transacts_on_the_devnet(tmp_path, devnet, devnet_chain, devnet_deploy,
                                                               key_type) -> None:
    # Import a fresh mnemonic the way a user would (Injective's kind by default).
    mnemonic = new_mnemonic()
    home = tmp_path / "home"
    res = CliRunner().invoke(keys_cmd.app, ["add", "imported", "--recover", "--key-type", key_type.value, "--json"],
                             input=mnemonic + "\n", env={"VERILOCO_HOME": str(home), "VERILOCO_PASSPHRASE": "pw"})
    assert res.exit_code == 0, res.output
    key = Keystore.in_home(home).open("imported", "pw")
    assert key.key_type == key_type and key.address() == json.loads(res.stdout)["address"]
    # The same address as injectived's keyring derives for this mnemonic and type.
    options = () if key_type == KeyType.ETH_SECP256K1 else ("--key-type", "secp256k1", "--coin-type", "118")
    assert injectived_recover(tmp_path / "node", "imported", mnemonic, *options)["address"] == key.address()

    # Funded by the faucet; then it signs a bank send of its own.
    devnet_chain.send(faucet_key(), key.address(), {"inj": 10**21})
    receiver = PrivateKey.generate().address()
    sent = devnet_chain.send(key, receiver, {"inj": 12_345})
    assert devnet_chain.balance(receiver) == 12_345
    assert devnet_chain.balance(key.address()) == 10**21 - 12_345 - sent.fee
    # The chain recorded the public key under the type the signature was checked with.
    recorded = _account_pubkey(devnet, key.address())
    assert recorded["@type"] == (INJECTIVE_ETH_PUBKEY_TYPE if key_type == KeyType.ETH_SECP256K1
                                 else SECP256K1_PUBKEY_TYPE)
    assert base64.b64decode(recorded["key"]) == key.public_key.compressed

    # And a contract execute: it bonds as a host on a fresh veriloco contract.
    env = devnet_deploy(make_spec(), names=("operator", "treasury"))
    env.ledger.bond(key, "host", "http://127.0.0.1:8700", 5_000)
    member = env.ledger.member(key.address())
    assert member is not None and member.role == "host" and int(member.bonded) == 5_000


@pytest.mark.devnet
@pytest.mark.parametrize("key_type", ["eth_secp256k1", "secp256k1"])
def test_a_key_from_an_injectived_file_keyring_imports_with_its_address(tmp_path, key_type) -> None:
    """`veriloco keys import-injectived` reads a key from injectived's file-backend keyring (its
    passphrase on stdin) and seals the same account; a wrong keyring passphrase is one line."""
    _require_extra()
    binary = injectived_binary()
    keyring = tmp_path / "injectived"
    made = subprocess.run([str(binary), "keys", "add", "carol", "--keyring-backend", "file", "--keyring-dir",
                           str(keyring), "--key-type", key_type, "--output", "json"],
                          input=b"keyring-pw\nkeyring-pw\n", capture_output=True, env=_node_env(binary), timeout=60,
                          check=False)
    assert made.returncode == 0, made.stderr.decode()
    shown = json.loads(made.stdout.decode()[made.stdout.decode().index("{"):])
    home = tmp_path / "home"
    runner = CliRunner(env={"VERILOCO_HOME": str(home), "VERILOCO_PASSPHRASE": "ours"})
    from veriloco.cli import app

    done = runner.invoke(app, ["keys", "import-injectived", "carol", "--keyring-dir", str(keyring), "--json"],
                         input="keyring-pw\n")
    assert done.exit_code == 0, done.output
    imported = json.loads(done.stdout)
    assert (imported["address"], imported["key_type"]) == (shown["address"], key_type)
    assert Keystore.in_home(home).open("carol", "ours").address() == shown["address"]
    wrong = runner.invoke(app, ["keys", "import-injectived", "carol2", "--from", "carol", "--keyring-dir",
                                str(keyring)], input="not-the-passphrase\n")
    assert wrong.exit_code == 1 and wrong.stderr.startswith("error: injectived keys")
    assert "carol2" not in {k.name for k in Keystore.in_home(home).load().keys}
