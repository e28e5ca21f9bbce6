"""``veriloco keys`` as a user meets it: Injective's addresses by default, plain Cosmos keys on
request, hex import and export, delete, and a listing that catches an altered keyring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from protocol.keys import KeyType, PrivateKey
from veriloco.commands import keys as keys_cmd
from veriloco.errors import CommandError

ABANDON = "abandon " * 11 + "about"
# What `injectived keys add --recover` prints for ABANDON with its defaults (eth_secp256k1, coin
# type 60), and with `--key-type secp256k1 --coin-type 118` (tests/chain/test_keys_devnet.py asks
# injectived itself; tests/protocol/test_keys.py derives them from published vectors).
INJ_ETH = "inj1npvwllfr9dqr8erajqqr6s0vxnk2ak55re90dz"
INJ_PLAIN = "inj19rl4cm2hmr8afy4kldpxz3fka4jguq0akf6edd"


@pytest.fixture
def keys(tmp_path: Path):
    """``keys(*args, input=None, passphrase="pw")`` -> the CliRunner result, in a fresh home."""
    runner = CliRunner()
    home = tmp_path / "home"

    def invoke(*args: str, input: str | None = None, passphrase: str | None = "pw"):
        env = {"VERILOCO_HOME": str(home)}
        if passphrase is not None:
            env["VERILOCO_PASSPHRASE"] = passphrase
        return runner.invoke(keys_cmd.app, list(args), input=input, env=env)

    invoke.home = home  # type: ignore[attr-defined]
    return invoke


def ok_json(result) -> object:
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout)


def test_recover_gives_injectives_address_by_default_and_plain_cosmos_on_request(keys) -> None:
    alice = ok_json(keys("add", "alice", "--recover", "--json", input=ABANDON + "\n"))
    assert alice["address"] == INJ_ETH and alice["key_type"] == "eth_secp256k1"
    assert alice["hd_path"] == "m/44'/60'/0'/0/0" and "mnemonic" not in alice
    bob = ok_json(keys("add", "bob", "--recover", "--key-type", "secp256k1", "--json", input=ABANDON + "\n"))
    assert bob["address"] == INJ_PLAIN and bob["key_type"] == "secp256k1" and bob["hd_path"] == "m/44'/118'/0'/0/0"
    other = ok_json(keys("add", "carol", "--recover", "--index", "1", "--json", input=ABANDON + "\n"))
    assert other["hd_path"] == "m/44'/60'/0'/0/1" and other["address"] not in (INJ_ETH, INJ_PLAIN)
    listed = ok_json(keys("list", "--json"))["keys"]
    assert [(k["name"], k["key_type"], k["verified"]) for k in listed] == [
        ("alice", "eth_secp256k1", True), ("bob", "secp256k1", True), ("carol", "eth_secp256k1", True)]
    shown = keys("show", "alice", "-a")
    assert shown.exit_code == 0 and shown.stdout.strip() == INJ_ETH


def test_a_new_key_prints_its_mnemonic_once_and_the_mnemonic_recovers_it(keys) -> None:
    new = ok_json(keys("add", "dave", "--json"))
    assert new["key_type"] == "eth_secp256k1" and len(new["mnemonic"].split()) == 24
    again = ok_json(keys("add", "dave2", "--recover", "--json", input=new["mnemonic"] + "\n"))
    assert again["address"] == new["address"]
    assert "mnemonic" not in keys("list").stdout


def test_hex_import_and_export_round_trip(keys) -> None:
    secret = bytes(range(1, 33)).hex()
    imported = ok_json(keys("add", "erin", "--from-hex", "--json", input="0x" + secret + "\n"))
    assert imported["address"] == PrivateKey(bytes.fromhex(secret), KeyType.ETH_SECP256K1).address()
    plain = ok_json(keys("add", "frank", "--from-hex", "--key-type", "secp256k1", "--json", input=secret + "\n"))
    assert plain["address"] == PrivateKey(bytes.fromhex(secret)).address() != imported["address"]
    # Export needs the explicit flag and the passphrase; the secret goes to stdout only.
    refused = keys("export", "erin")
    assert refused.exit_code != 0 and "--unsafe" in str(refused.exception)
    wrong = keys("export", "erin", "--unsafe", passphrase="not it")
    assert wrong.exit_code != 0 and "wrong passphrase" in str(wrong.exception)
    assert secret not in wrong.output
    exported = keys("export", "erin", "--unsafe")
    assert exported.exit_code == 0 and exported.stdout.strip() == secret
    as_json = ok_json(keys("export", "frank", "--unsafe", "--json"))
    assert as_json["private_key_hex"] == secret and as_json["key_type"] == "secp256k1"
    # Nothing secret ever reaches the keyring file in the clear.
    assert secret not in (keys.home / "keyring.json").read_text()


@pytest.mark.parametrize("args, stdin, message", [
    (["add", "x", "--recover"], "abandon " * 12 + "\n", "BIP-39"),
    (["add", "x", "--from-hex"], "12345\n", "64 hex digits"),
    (["add", "x", "--from-hex"], "zz" * 32 + "\n", "not hex"),
    (["add", "x", "--from-hex", "--coin-type", "118"], "11" * 32 + "\n", "apply to mnemonics"),
    (["add", "x", "--recover", "--from-hex"], "", "exclude each other"),
])
def test_bad_key_material_is_one_clear_error(keys, args, stdin, message) -> None:
    result = keys(*args, input=stdin)
    assert result.exit_code != 0 and isinstance(result.exception, CommandError)
    assert message in str(result.exception)
    assert "zz" * 32 not in str(result.exception)
    assert not (keys.home / "keyring.json").exists()


def test_unknown_key_type_is_refused(keys) -> None:
    result = keys("add", "x", "--key-type", "ed25519")
    assert result.exit_code == 2 and "ed25519" in result.output


def _tamper(home: Path, name: str, **changes: object) -> None:
    path = home / "keyring.json"
    ring = json.loads(path.read_text())
    for entry in ring["keys"]:
        if entry["name"] == name:
            entry.update(changes)
    path.write_text(json.dumps(ring))


def test_an_altered_entry_is_flagged_refused_and_can_be_deleted(keys) -> None:
    ok_json(keys("add", "alice", "--recover", "--json", input=ABANDON + "\n"))
    ok_json(keys("add", "mallory", "--json"))
    mallory = ok_json(keys("show", "mallory", "--json"))
    # Someone edits alice's address to theirs: a reader of `keys show -a` would fund them.
    _tamper(keys.home, "alice", address=mallory["address"])
    listed = keys("list", "--json")
    assert listed.exit_code == 1
    rows = {r["name"]: r for r in json.loads(listed.stdout)["keys"]}
    assert rows["alice"]["verified"] is False and "altered" in rows["alice"]["problem"]
    assert rows["mallory"]["verified"] is True
    for args in (["show", "alice", "-a"], ["export", "alice", "--unsafe"]):
        refused = keys(*args)
        assert refused.exit_code != 0 and "altered" in str(refused.exception)
        assert mallory["address"] not in refused.stdout
    # The type flipped instead: flagged as well.
    _tamper(keys.home, "alice", address=INJ_ETH, key_type="secp256k1")
    assert keys("list").exit_code == 1
    # Delete asks first, and removes only the named key.
    kept = keys("delete", "alice", input="n\n")
    assert kept.exit_code != 0 and "not deleted" in str(kept.exception)
    assert keys("delete", "alice", input="").exit_code != 0  # no answer (a script without --yes): kept
    gone = keys("delete", "alice", input="y\n")
    assert gone.exit_code == 0 and f"deleted key alice ({INJ_ETH})" in gone.stdout
    assert [r["name"] for r in ok_json(keys("list", "--json"))["keys"]] == ["mallory"]
    deleted = ok_json(keys("delete", "mallory", "--yes", "--json"))
    assert deleted == {"deleted": "mallory", "address": mallory["address"], "schema_version": 2}
    missing = keys("delete", "alice", "--yes")
    assert missing.exit_code != 0 and "no key named 'alice'" in str(missing.exception)


def test_a_tampered_kdf_cost_is_refused_before_any_work(keys) -> None:
    ok_json(keys("add", "alice", "--json"))
    # 4 GiB and 16 passes of scrypt, which the old per-field limits allowed.
    _tamper(keys.home, "alice", n=2**20, r=32, p=16)
    listed = keys("list", "--json")
    assert listed.exit_code == 1 and "scrypt" in json.loads(listed.stdout)["keys"][0]["problem"]
    refused = keys("export", "alice", "--unsafe")
    assert refused.exit_code != 0 and "scrypt n=1048576" in str(refused.exception)


def test_without_a_terminal_secrets_come_from_stdin_and_the_environment(keys) -> None:
    """A script: the mnemonic on stdin, the passphrase in $VERILOCO_PASSPHRASE; missing either is one clear error."""
    recovered = ok_json(keys("add", "alice", "--recover", "--json", input=ABANDON + "\n"))
    assert recovered["address"] == INJ_ETH
    no_passphrase = keys("add", "bob", "--json", passphrase=None)
    assert no_passphrase.exit_code != 0 and "set VERILOCO_PASSPHRASE" in str(no_passphrase.exception)
    no_mnemonic = keys("add", "carol", "--recover", input="")
    assert no_mnemonic.exit_code != 0 and "no terminal to ask for the mnemonic" in str(no_mnemonic.exception)
    exists = keys("add", "alice", "--recover", input=ABANDON + "\n")
    assert exists.exit_code != 0 and "exists already" in str(exists.exception)
    assert [k["name"] for k in ok_json(keys("list", "--json"))["keys"]] == ["alice"]
