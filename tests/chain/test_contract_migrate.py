"""Upgrades (``docs/chain.md``, "Upgrades"), on every backend: the chain's admin migrates a run to
new code, which keeps the run's stakes, balances, spec and epoch and records its version; anyone
else, and anyone at all on a run deployed without an admin, is refused by the chain; the contract
itself refuses a downgrade and another contract's state.

"New" code is the committed wasm stored again (the same version: a migration that only rewrites
the version record) and the same wasm with its version string patched (a newer or an older build,
byte for byte the same code otherwise).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import wasmtime

from chain.embedded import EmbeddedChain
from chain.ledger import ContractError, Ledger, LedgerError
from chain.wasm_artifact import load_contract_wasm
from veriloco.connect import ChainSettings, NetworkFile
from veriloco.keystore import Keystore

CARGO_TOML = Path(__file__).resolve().parents[2] / "contracts" / "veriloco" / "Cargo.toml"
VERSION = re.search(r'(?m)^version = "([0-9.]+)"', CARGO_TOML.read_text()).group(1)  # type: ignore[union-attr]
NAME = "veriloco"
FOREIGN = {"contract": "crates.io:cw20-base", "version": "1.1.0"}


def with_version(version: str) -> bytes:
    """The committed wasm claiming to be ``version`` (same length as this build's)."""
    wasm = load_contract_wasm()
    old = VERSION.encode()
    assert len(version) == len(old), (version, VERSION)
    assert wasm.count(old) == 1, f"the version string {VERSION} is not unique in the wasm; patch another way"
    return wasm.replace(old, version.encode())


def newer() -> str:
    major, minor, patch = (int(p) for p in VERSION.split("."))
    version = f"{major}.{minor}.{patch + 1}"
    if len(version) != len(VERSION):
        version = f"{major}.{minor + 1}.0" if len(f"{major}.{minor + 1}.0") == len(VERSION) else f"{major + 1}.0.0"
    assert len(version) == len(VERSION)
    return version


def _wat_bytes(data: bytes) -> str:
    return "".join(f"\\{b:02x}" for b in data)


def foreign_wasm() -> bytes:
    """Another contract: at instantiation it writes cw2's record with its own name (:data:`FOREIGN`)."""
    key, value = b"contract_info", json.dumps(FOREIGN, separators=(",", ":")).encode()
    ok = b'{"ok":{"messages":[],"attributes":[],"events":[],"data":null}}'
    statics = [(1024, key), (1280, value), (1536, ok), (1792, b'{"ok":"e30="}')]
    data = " ".join(f'(data (i32.const {p}) "{_wat_bytes(b)}")' for p, b in statics)

    def region(i: int) -> str:
        ptr, blob = statics[i]
        return f"(call $static (i32.const {ptr}) (i32.const {len(blob)}))"

    return bytes(wasmtime.wat2wasm(f"""
(module
  (import "env" "db_write" (func $db_write (param i32 i32)))
  (memory (export "memory") 2)
  {data}
  (global $heap (mut i32) (i32.const 4096))
  (func $allocate (export "allocate") (param $size i32) (result i32)
    (local $r i32)
    (if (i32.gt_u (i32.add (global.get $heap) (i32.add (local.get $size) (i32.const 32)))
                  (i32.mul (memory.size) (i32.const 65536)))
      (then (drop (memory.grow (i32.add (i32.shr_u (local.get $size) (i32.const 16)) (i32.const 1))))))
    (local.set $r (global.get $heap))
    (i32.store (local.get $r) (i32.add (local.get $r) (i32.const 12)))
    (i32.store offset=4 (local.get $r) (local.get $size))
    (i32.store offset=8 (local.get $r) (i32.const 0))
    (global.set $heap (i32.and (i32.add (i32.add (local.get $r) (local.get $size)) (i32.const 19))
                               (i32.const -4)))
    (local.get $r))
  (func (export "deallocate") (param i32))
  (func (export "interface_version_8"))
  (func $static (param $ptr i32) (param $len i32) (result i32)
    (local $r i32)
    (local.set $r (call $allocate (i32.const 0)))
    (i32.store (local.get $r) (local.get $ptr))
    (i32.store offset=4 (local.get $r) (local.get $len))
    (i32.store offset=8 (local.get $r) (local.get $len))
    (local.get $r))
  (func (export "instantiate") (param i32 i32 i32) (result i32)
    (call $db_write {region(0)} {region(1)})
    {region(2)})
  (func (export "execute") (param i32 i32 i32) (result i32) {region(2)})
  (func (export "query") (param i32 i32) (result i32) {region(3)})
)
"""))


def version_record(ledger: Ledger) -> dict[str, Any]:
    raw = ledger.backend.raw(b"contract_info")
    assert raw is not None
    record: dict[str, Any] = json.loads(raw)
    return record


def snapshot(env) -> dict[str, Any]:
    """Everything a migration must leave as it is: spec and its hash, books, members, epochs, and
    the bank balances of the contract and of every account."""
    ledger = env.driver.ledger
    return {
        "config": ledger.config(),
        "spec": ledger.backend.raw(b"spec"),
        "accounting": ledger.accounting(),
        "members": ledger.members(),
        "epochs": ledger.epochs(),
        "balances": {name: ledger.balance(env.addr(name)) for name in env.keys if name != "operator"},
        "contract": ledger.balance(env.address),
    }


def play_some(env) -> None:
    """Stake, a reward pool, an unbonding entry and an epoch under way."""
    for name in ("host1", "validator1", "validator2"):
        env.bond(name)
    env.fund_rewards(3_000)
    env.unbond("validator2", 1_000)
    env.join("host1")
    env.join("validator1")


def migrated_code(result) -> str | None:
    return result.attribute("code_id", "migrate")


def test_the_admin_migrates_and_the_run_is_unchanged(make_ledger_env) -> None:
    env = make_ledger_env(admin="operator")
    admin = env.key("operator")
    ledger = env.driver.ledger
    assert ledger.config().admin == env.addr("operator")
    assert version_record(ledger) == {"contract": NAME, "version": VERSION}
    play_some(env)
    before = snapshot(env)

    # The same code stored again: the same version, a migration that only rewrites the record.
    result = ledger.migrate(admin, load_contract_wasm())
    assert migrated_code(result) is not None and int(migrated_code(result) or 0) != env.driver.code_id
    assert (result.attribute("from_version"), result.attribute("to_version")) == (VERSION, VERSION)
    assert version_record(ledger) == {"contract": NAME, "version": VERSION}
    assert snapshot(env) == before

    # A newer build: the version is bumped, nothing else changes.
    later = newer()
    result = ledger.migrate(admin, with_version(later))
    assert (result.attribute("action"), result.attribute("from_version"), result.attribute("to_version")) == (
        "migrate", VERSION, later)
    assert version_record(ledger) == {"contract": NAME, "version": later}
    assert snapshot(env) == before

    # Back to the older code: a downgrade, refused by the contract; nothing changes.
    with pytest.raises(ContractError, match=f"migrate: cannot downgrade veriloco from version {later} to {VERSION}"):
        ledger.migrate(admin, env.driver.code_id)
    assert version_record(ledger) == {"contract": NAME, "version": later}
    assert snapshot(env) == before

    # The migrated run goes on: the new code executes.
    env.bond("host2")
    assert ledger.member(env.addr("host2")) is not None


def test_only_the_admin_may_migrate(make_ledger_env) -> None:
    env = make_ledger_env(admin="operator")
    play_some(env)
    before = snapshot(env)
    for name in ("host1", "outsider"):
        with pytest.raises(LedgerError, match="can not migrate") as refused:
            env.driver.ledger.migrate(env.key(name), env.driver.code_id)
        assert not isinstance(refused.value, ContractError)  # the chain refused, not the contract
    assert snapshot(env) == before
    assert version_record(env.driver.ledger) == {"contract": NAME, "version": VERSION}


def test_a_run_without_an_admin_is_immutable(make_ledger_env) -> None:
    env = make_ledger_env()
    assert env.ledger.config().admin is None
    play_some(env)
    before = snapshot(env)
    for name in ("operator", "host1"):  # the deployer too
        with pytest.raises(LedgerError, match="can not migrate") as refused:
            env.driver.ledger.migrate(env.key(name), env.driver.code_id)
        assert not isinstance(refused.value, ContractError)
    assert snapshot(env) == before


def test_another_contract_is_not_migrated_to_veriloco(make_ledger_env) -> None:
    env = make_ledger_env(admin="operator")
    other = env.driver.instantiate_code(foreign_wasm(), {}, admin="operator")
    assert version_record(other) == FOREIGN
    with pytest.raises(ContractError, match=re.escape('migrate: cannot migrate contract "crates.io:cw20-base"')):
        other.migrate(env.key("operator"), env.driver.code_id)
    assert version_record(other) == FOREIGN


# -- the embedded chain only ------------------------------------------------------------------


def test_a_run_stored_before_the_version_record_migrates(embedded_ledger_driver, make_spec) -> None:
    """A run whose code predates cw2's record (none stored) migrates as version 0.1.0."""
    driver = embedded_ledger_driver(make_spec(), ("operator", "treasury", "host1"), admin="operator")
    del driver.chain._stores[driver.address][b"contract_info"]  # the state such code left
    result = driver.ledger.migrate(driver.keys["operator"], driver.code_id)
    assert (result.attribute("from_version"), result.attribute("to_version")) == ("0.1.0", VERSION)
    assert version_record(driver.ledger) == {"contract": NAME, "version": VERSION}


def test_a_migrated_contract_survives_save_and_load(embedded_ledger_driver, make_spec, tmp_path) -> None:
    driver = embedded_ledger_driver(make_spec(), ("operator", "treasury", "host1"), admin="operator")
    result = driver.ledger.migrate(driver.keys["operator"], with_version(newer()))
    code_id = int(migrated_code(result) or 0)
    assert driver.chain.contract_info(driver.address).code_id == code_id != driver.code_id
    driver.chain.save(tmp_path / "chain.json")
    loaded = EmbeddedChain.load(tmp_path / "chain.json")
    assert loaded.contract_info(driver.address) == driver.chain.contract_info(driver.address)
    assert json.loads(loaded.raw_storage(driver.address, b"contract_info") or b"")["version"] == newer()
    assert loaded.query(driver.address, {"config": {}})["admin"] == driver.admin
    # The loaded chain runs the migrated code, and its admin can migrate it again.
    loaded.migrate(driver.admin, driver.address, code_id, {})
    with pytest.raises(ContractError, match="invalid migrate message"):
        loaded.migrate(driver.admin, driver.address, code_id, {"extra": 1})


def test_the_cli_migrates_a_run_as_its_admin(embedded_ledger_driver, make_spec, tmp_path) -> None:
    """``veriloco run migrate``: the admin's key migrates; another key is refused by the chain."""
    driver = embedded_ledger_driver(make_spec(), ("operator", "treasury", "host1"), admin="operator")
    driver.chain.save(tmp_path / "chain.json")
    network = NetworkFile(chain=ChainSettings(backend="embedded", state=str(tmp_path / "chain.json")),
                          contract=driver.address, run_id=driver.spec.run_id().hex()).save(tmp_path / "network.json")
    home = tmp_path / "home"
    for name in ("operator", "host1"):
        Keystore.in_home(home).add(name, driver.keys[name], "pw", scrypt_n=2**10)
    env = {"VERILOCO_HOME": str(home), "VERILOCO_PASSPHRASE": "pw", "PATH": "/usr/bin:/bin"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "veriloco.cli", "run", "migrate", "--network", str(network),
                               *args], env=env, capture_output=True, text=True, timeout=300)

    refused = cli("--key", "host1")
    assert refused.returncode != 0 and "can not migrate" in refused.stderr
    (tmp_path / "newer.wasm").write_bytes(with_version(newer()))
    done = cli("--key", "operator", "--wasm", str(tmp_path / "newer.wasm"), "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert (answer["from_version"], answer["to_version"]) == (VERSION, newer())
    saved = EmbeddedChain.load(tmp_path / "chain.json")
    assert saved.contract_info(driver.address).code_id == answer["code_id"] != driver.code_id
    assert json.loads(saved.raw_storage(driver.address, b"contract_info") or b"")["version"] == newer()
