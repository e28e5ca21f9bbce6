"""The devnet launcher: up, status, restart, stop, clear errors; and ``veriloco devnet``."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest
from suite_env import named_key
from typer.testing import CliRunner

from chain.devnet import (
    DEVNET_QUERY_GAS_LIMIT,
    Devnet,
    DevnetError,
    DevnetNotInstalled,
    DevnetPorts,
    GenesisAccount,
    dev_key,
    dev_mnemonic,
    injectived_binary,
)
from protocol.keys import KeyType, PrivateKey

pytest_plugins = ["devnet_backend"]


# -- without a node -------------------------------------------------------------------------------


def test_test_accounts_are_deterministic_and_recoverable_from_their_mnemonic():
    assert dev_mnemonic("alice") == dev_mnemonic("alice") != dev_mnemonic("bob")
    # Injective's kind: recovering the printed mnemonic with the defaults of `veriloco keys add
    # --recover` (and of injectived and Keplr, tests/chain/test_keys_devnet.py) finds the account.
    assert dev_key("alice").key_type == KeyType.ETH_SECP256K1
    assert dev_key("alice").address() == PrivateKey.from_mnemonic(dev_mnemonic("alice")).address()
    account = GenesisAccount.test("alice", 5, uatom=7)
    assert account.address == dev_key("alice").address() and account.key_type == "eth_secp256k1"
    assert account.address.startswith("inj1") and dict(account.coins) == {"inj": 5, "uatom": 7}
    assert GenesisAccount.from_json(account.to_json()) == account
    # devnet.json files written before key types were recorded still load.
    old = {k: v for k, v in account.to_json().items() if k != "key_type"}
    assert GenesisAccount.from_json(old).key_type is None


def test_missing_extra_is_one_clear_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "injective_core", None)  # import fails
    with pytest.raises(DevnetNotInstalled, match=r"devnet extra .* pip install -e '\.\[devnet\]'"):
        injectived_binary()
    with pytest.raises(DevnetNotInstalled):
        Devnet(tmp_path / "net", ports=DevnetPorts.free()).up()


def test_ports_must_be_distinct(tmp_path):
    with pytest.raises(DevnetError, match="distinct"):
        DevnetPorts(1, 1, 2, 3).taken()


def test_open_without_a_devnet_says_so(tmp_path):
    with pytest.raises(DevnetError, match="no devnet in"):
        Devnet.open(tmp_path)


def test_the_query_gas_limit_is_checked_and_kept_in_the_devnets_state(tmp_path):
    for bad in (0, -1, 2.5, True, "3000000"):
        with pytest.raises(DevnetError, match="query_gas_limit must be a positive integer"):
            Devnet(tmp_path, query_gas_limit=bad)
    assert Devnet(tmp_path).query_gas_limit == DEVNET_QUERY_GAS_LIMIT
    state = {"chain_id": "c-1", "ports": {"rpc": 1, "p2p": 2, "grpc": 3, "rest": 4}, "block_time": "100ms",
             "accounts": [GenesisAccount.test("alice").to_json()], "query_gas_limit": 3_000_000}
    (tmp_path / "devnet.json").write_text(json.dumps(state))
    assert Devnet.open(tmp_path).query_gas_limit == 3_000_000  # what `up` wrote is what a later open uses
    del state["query_gas_limit"]  # a devnet.json written before the setting: the raised default
    (tmp_path / "devnet.json").write_text(json.dumps(state))
    assert Devnet.open(tmp_path).query_gas_limit == DEVNET_QUERY_GAS_LIMIT


def test_up_refuses_to_wipe_a_foreign_directory(tmp_path):
    pytest.importorskip("injective_core")
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(DevnetError, match="refusing to wipe"):
        Devnet(tmp_path, ports=DevnetPorts.free()).up()
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_taken_port_is_a_clear_error_before_anything_is_wiped(tmp_path):
    pytest.importorskip("injective_core")
    ports = DevnetPorts.free()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports.grpc))
        holder.listen()
        net = Devnet(tmp_path / "net", ports=ports)
        with pytest.raises(DevnetError, match=rf"already in use on 127\.0\.0\.1: grpc {ports.grpc}"):
            net.up()
    assert not (tmp_path / "net").exists()


# -- the session's node ---------------------------------------------------------------------------


@pytest.mark.devnet
def test_status_of_a_running_devnet(devnet):
    st = devnet.status()
    assert st.running and st.pid == devnet.pid() and st.chain_id == devnet.chain_id
    assert st.height is not None and st.height >= 1
    assert st.endpoints["grpc"] == f"grpc+http://127.0.0.1:{devnet.ports.grpc}"
    again = Devnet.open(devnet.home)  # what another process (the CLI) sees
    assert again.ports == devnet.ports and again.pid() == devnet.pid()
    assert [a.address for a in again.accounts] == [a.address for a in devnet.accounts]


@pytest.mark.devnet
def test_blocks_come_at_the_configured_pace(devnet):
    h0 = devnet.height()
    t0 = time.monotonic()
    while devnet.height() < h0 + 5:
        time.sleep(0.02)
    per_block = (time.monotonic() - t0) / 5
    assert 0.05 < per_block < 0.5, per_block  # 200 ms by default (0.21 s measured)


@pytest.mark.devnet
def test_listens_only_on_loopback(devnet):
    # Every listening TCP socket of the node's process is on 127.0.0.1, and there are exactly four.
    pid = devnet.pid()
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                listening.append((table, fields[1]))
    ports = {int(local.split(":")[1], 16) for _, local in listening}
    assert ports == set(dict(devnet.ports.items()).values())
    assert all(t == "/proc/net/tcp" and local.startswith("0100007F:") for t, local in listening), listening


@pytest.mark.devnet
def test_second_up_while_running_is_refused(devnet):
    with pytest.raises(DevnetError, match="already running"):
        Devnet(devnet.home, ports=devnet.ports).up()


@pytest.mark.devnet
def test_restart_keeps_the_chain(devnet):
    before = devnet.height()
    assert devnet.stop() is True
    st = devnet.status()
    assert not st.running and st.height is None
    assert devnet.stop() is False  # already stopped
    after = devnet.start()
    assert after.running and after.height is not None and after.height > before


# -- the CLI --------------------------------------------------------------------------------------


@pytest.mark.devnet
def test_cli_up_status_accounts_down(tmp_path, monkeypatch):
    pytest.importorskip("injective_core")
    from veriloco.commands import devnet as devnet_cmd
    from veriloco.keystore import Keystore

    home = tmp_path / "vhome"
    monkeypatch.setenv("VERILOCO_HOME", str(home))
    home.mkdir()
    key = named_key("alice")  # plain secp256k1
    eth_key = named_key("bob", KeyType.ETH_SECP256K1)  # Injective's kind
    Keystore.in_home(home).add("alice", key, "pass phrase", scrypt_n=2**10)
    Keystore.in_home(home).add("bob", eth_key, "pass phrase", scrypt_n=2**10)
    ports = DevnetPorts.free()
    runner = CliRunner()
    args = ["--rpc-port", ports.rpc, "--p2p-port", ports.p2p, "--grpc-port", ports.grpc, "--rest-port", ports.rest]
    res = runner.invoke(devnet_cmd.app, ["up", "--keys", "alice", "--keys", "bob", "--test-accounts", "1",
                                         "--amount", "1000inj",
                                         *map(str, args), "--json"])
    assert res.exit_code == 0, res.output
    try:
        up = json.loads(res.stdout)["devnet"]
        assert "waiting up to" in res.stderr  # progress, on stderr
        assert up["running"] and up["height"] >= 1 and up["home"] == str(home / "devnet")

        res = runner.invoke(devnet_cmd.app, ["status", "--json"])
        assert res.exit_code == 0 and json.loads(res.output)["devnet"]["pid"] == up["pid"]

        res = runner.invoke(devnet_cmd.app, ["accounts", "--json"])
        listed = json.loads(res.output)
        assert listed["live"] is True
        by_name = {a["name"]: a for a in listed["accounts"]}
        assert by_name["alice"]["address"] == key.address()
        assert by_name["alice"]["balances"] == {"inj": "1000"}
        assert by_name["alice"]["key_type"] == "secp256k1"
        assert by_name["bob"]["address"] == eth_key.address() and by_name["bob"]["key_type"] == "eth_secp256k1"
        assert by_name["bob"]["balances"] == {"inj": "1000"}
        assert set(by_name) == {"alice", "bob", "test0"}

        res = runner.invoke(devnet_cmd.app, ["up", *map(str, args)])
        assert res.exit_code != 0 and "already running" in str(res.exception)
        res = runner.invoke(devnet_cmd.app, ["down"])
        assert res.exit_code == 0, res.output
        res = runner.invoke(devnet_cmd.app, ["start", "--json"])  # same chain, higher height
        assert res.exit_code == 0 and json.loads(res.stdout)["devnet"]["height"] > up["height"]
    finally:
        res = runner.invoke(devnet_cmd.app, ["down", "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["stopped"] is True
    res = runner.invoke(devnet_cmd.app, ["status", "--json"])
    assert json.loads(res.output)["devnet"]["running"] is False
    res = runner.invoke(devnet_cmd.app, ["accounts", "--json"])
    assert json.loads(res.output)["live"] is False  # genesis balances from devnet.json



def test_unpacking_injectived_waits_for_another_process_unpacking_it(tmp_path):
    """injective-core unpacks its binary on first use without a lock; two workers of a fresh install
    once ran or rewrote each other's half-written file ("Text file busy"). ``injectived_binary``
    serialises the unpacking with a lock file beside the binary: while another process holds it,
    a caller waits; once released, it unpacks the whole binary (a fresh copy of the package)."""
    import fcntl
    import filecmp
    import shutil
    import subprocess

    import injective_core

    package = Path(injective_core.__file__).resolve().parent
    fresh = tmp_path / "site" / "injective_core"
    (fresh / "bin").mkdir(parents=True)
    shutil.copy(package / "__init__.py", fresh)
    shutil.copy(package / "bin" / "injectived.tar.zst", fresh / "bin")  # packed, as a fresh install has it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.getcwd()])}
    ask = ("import injective_core, sys; from chain.devnet import injectived_binary; "
           "assert injective_core.__file__.startswith(sys.argv[1]); print(injectived_binary().resolve())")
    with open(fresh / "bin" / ".unpack.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process is unpacking
        waiting = subprocess.Popen([sys.executable, "-c", ask, str(fresh)], env=env, stdout=subprocess.PIPE,
                                   text=True)
        time.sleep(3)
        assert waiting.poll() is None, "injectived_binary did not wait for the unpacking under way"
        assert not (fresh / "bin" / "injectived-linux-x64").exists()
    path = waiting.communicate(timeout=300)[0].strip()
    assert waiting.returncode == 0
    unpacked = fresh / "bin" / "injectived-linux-x64"
    assert path == str(unpacked)
    assert filecmp.cmp(unpacked, package / "bin" / "injectived-linux-x64", shallow=False)
