"""Fixtures for the chain tests.

``contract`` is backend-neutral: a :class:`ContractHandle` on a freshly deployed veriloco contract
with funded accounts. It is parametrized by backend; only ``embedded`` exists so far. A ``devnet``
backend (a real injectived node through cosmpy) plugs in by adding a subclass of
:class:`ContractHandle` and a param, and every test written against the handle runs on both: the
embedded chain is trusted only as far as that parity holds. Refusals surface as
``chain.ledger.ContractError`` on every backend.

``probe_wasm`` is a tiny hand-written CosmWasm module (WAT) for testing the VM and the chain
directly: it exposes each import through a thin export and misbehaves on request.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import pytest
import wasmtime

from chain.embedded import EmbeddedChain, TxResult
from chain.wasm_artifact import load_contract_wasm
from protocol.keys import PrivateKey
from protocol.spec import RunSpec

DENOM = "inj"
OTHER_DENOM = "uatom"  # also in every test account, to test refusals of foreign coins
INITIAL_BALANCE = 10**24  # 1e6 INJ in base units (18 decimals)
INITIAL_MODEL_HASH = hashlib.sha256(b"theta_0").hexdigest()
ACCOUNT_NAMES = ("operator", "treasury", "host1", "host2", "host3", "validator1", "validator2",
                 "funder", "outsider")


def account_key(name: str) -> PrivateKey:
    """A deterministic test key per name (never use such keys outside tests)."""
    return PrivateKey(hashlib.sha256(b"veriloco-test-account:" + name.encode()).digest())


def make_spec(**economics: Any) -> RunSpec:
    """A small valid run spec; ``economics`` overrides fields of the economics section."""
    base = {
        "name": "chain-test",
        "model": {},
        "data": {"corpus": "test", "dataset_hash": "0" * 64, "seq_len": 16},
        "train": {"inner_steps": 4, "segment_steps": 2, "batch_size": 2, "lr": "0.001"},
        "economics": {"denom": DENOM, "min_host_stake": "1000", "min_validator_stake": "500",
                      "unbonding_epochs": 2, **economics},
    }
    return RunSpec.model_validate(base)


def instantiate_msg(spec: RunSpec, default_treasury: str, **overrides: Any) -> dict[str, Any]:
    """The instantiate message for ``spec``, with fields overridden."""
    msg = {
        "spec_json": spec.canonical().decode(),
        "initial_model_hash": INITIAL_MODEL_HASH,
        "denom": spec.economics.denom,
        "treasury": default_treasury,
        "admin": None,
    }
    msg.update(overrides)
    return msg


class ContractHandle(ABC):
    """A deployed veriloco contract and funded accounts, independent of the backend.

    Attributes:
        backend: ``embedded`` (later also ``devnet``).
        address: the contract's address.
        spec: the run spec it was deployed with.
        accounts: test account name -> address, each funded with INITIAL_BALANCE of DENOM and
            of OTHER_DENOM.
    """

    backend: str
    denom = DENOM
    other_denom = OTHER_DENOM
    initial_model_hash = INITIAL_MODEL_HASH

    def __init__(self, address: str, spec: RunSpec, accounts: dict[str, str]) -> None:
        self.address = address
        self.spec = spec
        self.accounts = accounts

    @abstractmethod
    def execute(self, sender: str, msg: Mapping[str, Any],
                funds: Mapping[str, int] | None = None) -> TxResult:
        """Execute as the account named ``sender``."""

    @abstractmethod
    def query(self, msg: Mapping[str, Any]) -> Any: ...

    @abstractmethod
    def balance(self, address: str) -> int:
        """Bank balance in the run's denom."""

    @abstractmethod
    def deploy(self, msg: Mapping[str, Any]) -> str:
        """Instantiate another contract from the same code; returns its address."""

    # Helpers every backend shares.

    def instantiate_msg(self, spec: RunSpec | None = None, **overrides: Any) -> dict[str, Any]:
        """An instantiate message for ``spec`` (default: this contract's) with the test treasury."""
        return instantiate_msg(spec or self.spec, self.accounts["treasury"], **overrides)

    def addr(self, name: str) -> str:
        return self.accounts[name]

    def member(self, name_or_address: str) -> dict[str, Any] | None:
        address = self.accounts.get(name_or_address, name_or_address)
        return self.query({"member": {"address": address}})

    def accounting(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.query({"accounting": {}}).items()}

    def holdings(self) -> int:
        """Sum of the contract's liabilities (what it should hold)."""
        return sum(self.accounting().values())

    def total_funds(self) -> int:
        """Balances of every test account plus the contract: constant unless coins leave the set."""
        return sum(self.balance(a) for a in self.accounts.values()) + self.balance(self.address)


class EmbeddedHandle(ContractHandle):
    """:class:`ContractHandle` on :class:`chain.embedded.EmbeddedChain`."""

    backend = "embedded"

    def __init__(self, spec: RunSpec) -> None:
        accounts = {name: account_key(name).address() for name in ACCOUNT_NAMES}
        self.chain = EmbeddedChain(
            genesis_balances={a: {DENOM: INITIAL_BALANCE, OTHER_DENOM: INITIAL_BALANCE}
                              for a in accounts.values()}
        )
        code_id = self.chain.store_code(accounts["operator"], load_contract_wasm()).code_id
        assert code_id is not None
        self.code_id = code_id
        result = self.chain.instantiate(accounts["operator"], code_id,
                                        instantiate_msg(spec, accounts["treasury"]), label="veriloco")
        assert result.contract_address is not None
        super().__init__(result.contract_address, spec, accounts)

    def execute(self, sender: str, msg: Mapping[str, Any],
                funds: Mapping[str, int] | None = None) -> TxResult:
        return self.chain.execute(self.accounts[sender], self.address, msg, funds=funds)

    def query(self, msg: Mapping[str, Any]) -> Any:
        return self.chain.query(self.address, msg)

    def balance(self, address: str) -> int:
        return self.chain.balance(address, DENOM)

    def deploy(self, msg: Mapping[str, Any]) -> str:
        result = self.chain.instantiate(self.accounts["operator"], self.code_id, msg, label="other")
        assert result.contract_address is not None
        return result.contract_address


BACKENDS = {"embedded": EmbeddedHandle}


@pytest.fixture(name="make_spec")
def make_spec_fixture():
    """:func:`make_spec`, for tests (they import nothing from conftest)."""
    return make_spec


@pytest.fixture(params=sorted(BACKENDS))
def deploy_contract(request: pytest.FixtureRequest):
    """A factory: ``deploy_contract(spec=None)`` -> ContractHandle on the parametrized backend."""

    def deploy(spec: RunSpec | None = None) -> ContractHandle:
        return BACKENDS[request.param](spec or make_spec())

    return deploy


@pytest.fixture
def contract(deploy_contract) -> ContractHandle:
    """The veriloco contract deployed with :func:`make_spec` (unbonding_epochs = 2)."""
    return deploy_contract()


@pytest.fixture
def embedded(contract: ContractHandle) -> EmbeddedHandle:
    """The contract handle, for tests that look inside the embedded chain (skipped elsewhere)."""
    if not isinstance(contract, EmbeddedHandle):
        pytest.skip("looks inside the embedded chain")
    return contract


# -- the probe contract ----------------------------------------------------------------------

PROBE_BANK_RECIPIENT = account_key("outsider").address()
PROBE_BANK_AMOUNT = 777

_OK = b'{"ok":{"messages":[],"attributes":[],"events":[],"data":null}}'
_ERROR = b'{"error":"probe refused"}'
_BANK = json.dumps(
    {"ok": {"messages": [{"id": 0, "payload": "", "msg": {"bank": {"send": {
        "to_address": PROBE_BANK_RECIPIENT,
        "amount": [{"denom": DENOM, "amount": str(PROBE_BANK_AMOUNT)}]}}},
        "gas_limit": None, "reply_on": "never"}],
        "attributes": [{"key": "action", "value": "probe"}], "events": [], "data": None}},
    separators=(",", ":")).encode()
_RESERVED = (b'{"ok":{"messages":[],"attributes":[{"key":"_contract_address","value":"forged"}],'
             b'"events":[],"data":null}}')
_REPLY = (b'{"ok":{"messages":[{"id":7,"payload":"","msg":{"bank":{"burn":{"amount":[]}}},'
          b'"gas_limit":null,"reply_on":"success"}],"attributes":[],"events":[],"data":null}}')
_EVENTS = (b'{"ok":{"messages":[],"attributes":[{"key":" spaced ","value":" v "}],'
           b'"events":[{"type":"probe","attributes":[{"key":"k","value":"v"}]}],"data":"aGk="}}')
_QUERY = b'{"ok":"e30="}'  # base64 of "{}"
_ABORT = b"probe panicked"


def _wat_string(data: bytes) -> str:
    return "".join(f"\\{b:02x}" for b in data)


def probe_wat(*, memory_max: bool = False, interface: str = "interface_version_8",
              extra_import: str = "", bulk_memory: bool = False, with_allocate: bool = True) -> str:
    """WAT of the probe contract; the keyword arguments break it in the ways wasmd refuses."""
    statics = {"env": b"env", "info": b"info", "msg": b"msg", "ok": _OK, "error": _ERROR,
               "bank": _BANK, "reserved": _RESERVED, "reply": _REPLY, "events": _EVENTS,
               "query": _QUERY, "abort": _ABORT}
    data, offsets, pos = [], {}, 1024
    for name, blob in statics.items():
        offsets[name] = (pos, len(blob))
        data.append(f'(data (i32.const {pos}) "{_wat_string(blob)}")')
        pos += len(blob) + 16

    def static(name: str) -> str:
        ptr, length = offsets[name]
        return f"(call $static (i32.const {ptr}) (i32.const {length}))"

    memory = "(memory (export \"memory\") 4 64)" if memory_max else "(memory (export \"memory\") 4)"
    allocate = "allocate" if with_allocate else "allocate_missing"
    bulk = "(memory.fill (i32.const 0) (i32.const 0) (i32.const 0))" if bulk_memory else ""
    return f"""
(module
  (import "env" "db_read" (func $db_read (param i32) (result i32)))
  (import "env" "db_write" (func $db_write (param i32 i32)))
  (import "env" "db_remove" (func $db_remove (param i32)))
  (import "env" "db_scan" (func $db_scan (param i32 i32 i32) (result i32)))
  (import "env" "db_next" (func $db_next (param i32) (result i32)))
  (import "env" "addr_validate" (func $addr_validate (param i32) (result i32)))
  (import "env" "addr_canonicalize" (func $addr_canonicalize (param i32 i32) (result i32)))
  (import "env" "addr_humanize" (func $addr_humanize (param i32 i32) (result i32)))
  (import "env" "debug" (func $debug (param i32)))
  (import "env" "abort" (func $abort (param i32)))
  (import "env" "query_chain" (func $query_chain (param i32) (result i32)))
  {extra_import}
  {memory}
  {' '.join(data)}
  (global $heap (mut i32) (i32.const 65536))

  ;; A bump allocator: the Region header (12 bytes) followed by its data; nothing is ever freed.
  ;; Memory grows when the heap would run past its end.
  (func $allocate (export "{allocate}") (param $size i32) (result i32)
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
  (func (export "{interface}"))

  ;; A Region over static data.
  (func $static (param $ptr i32) (param $len i32) (result i32)
    (local $r i32)
    (local.set $r (call $allocate (i32.const 0)))
    (i32.store (local.get $r) (local.get $ptr))
    (i32.store offset=4 (local.get $r) (local.get $len))
    (i32.store offset=8 (local.get $r) (local.get $len))
    (local.get $r))

  ;; Thin wrappers so tests can call each import with Regions they prepared.
  (func (export "t_db_read") (param i32) (result i32) (call $db_read (local.get 0)))
  (func (export "t_db_write") (param i32 i32) (call $db_write (local.get 0) (local.get 1)))
  (func (export "t_db_remove") (param i32) (call $db_remove (local.get 0)))
  (func (export "t_db_scan") (param i32 i32 i32) (result i32)
    (call $db_scan (local.get 0) (local.get 1) (local.get 2)))
  (func (export "t_db_next") (param i32) (result i32) (call $db_next (local.get 0)))
  (func (export "t_addr_validate") (param i32) (result i32) (call $addr_validate (local.get 0)))
  (func (export "t_addr_canonicalize") (param i32 i32) (result i32)
    (call $addr_canonicalize (local.get 0) (local.get 1)))
  (func (export "t_addr_humanize") (param i32 i32) (result i32)
    (call $addr_humanize (local.get 0) (local.get 1)))
  (func (export "t_debug") (param i32) (call $debug (local.get 0)))
  (func (export "t_query_chain") (param i32) (result i32) (call $query_chain (local.get 0)))

  (func (export "instantiate") (param $env i32) (param $info i32) (param $msg i32) (result i32)
    (call $db_write {static("env")} (local.get $env))
    (call $db_write {static("info")} (local.get $info))
    (call $db_write {static("msg")} (local.get $msg))
    {static("ok")})

  ;; execute records env, info and msg in storage, then acts on the message's first byte:
  ;; t = trap, l = loop forever, a = abort, e = error result, b = bank send, m = grow memory
  ;; by 64 MiB, z = return a Region with offset 0, r = a reserved attribute key, s = a submessage
  ;; with a reply, v = attributes, a custom event and data; anything else = ok.
  (func (export "execute") (param $env i32) (param $info i32) (param $msg i32) (result i32)
    (local $op i32)
    {bulk}
    (call $db_write {static("env")} (local.get $env))
    (call $db_write {static("info")} (local.get $info))
    (call $db_write {static("msg")} (local.get $msg))
    (local.set $op (i32.load8_u (i32.load (local.get $msg))))
    (if (i32.eq (local.get $op) (i32.const 116)) (then unreachable))
    (if (i32.eq (local.get $op) (i32.const 108)) (then (loop $forever (br $forever))))
    (if (i32.eq (local.get $op) (i32.const 97)) (then (call $abort {static("abort")})))
    (if (i32.eq (local.get $op) (i32.const 101)) (then (return {static("error")})))
    (if (i32.eq (local.get $op) (i32.const 98)) (then (return {static("bank")})))
    (if (i32.eq (local.get $op) (i32.const 109))
      (then (if (i32.eq (memory.grow (i32.const 1024)) (i32.const -1)) (then unreachable))))
    (if (i32.eq (local.get $op) (i32.const 122)) (then (return (call $static (i32.const 0) (i32.const 4)))))
    (if (i32.eq (local.get $op) (i32.const 114)) (then (return {static("reserved")})))
    (if (i32.eq (local.get $op) (i32.const 115)) (then (return {static("reply")})))
    (if (i32.eq (local.get $op) (i32.const 118)) (then (return {static("events")})))
    {static("ok")})

  (func (export "query") (param $env i32) (param $msg i32) (result i32)
    {static("query")})
)
"""


@dataclass(frozen=True)
class Probe:
    """The probe contract and what tests need to know about it."""

    wasm: bytes
    bank_recipient: str = PROBE_BANK_RECIPIENT
    bank_amount: int = PROBE_BANK_AMOUNT
    denom: str = DENOM
    abort_message: str = _ABORT.decode()

    @staticmethod
    def build(**breakage: Any) -> bytes:
        """A broken variant (see :func:`probe_wat`) as wasm bytes."""
        return bytes(wasmtime.wat2wasm(probe_wat(**breakage)))


@pytest.fixture(scope="session")
def probe() -> Probe:
    """The probe contract, compiled from :func:`probe_wat`."""
    return Probe(Probe.build())


@pytest.fixture
def account():
    """``account(name)`` -> the deterministic test address for ``name``."""
    return lambda name: account_key(name).address()
