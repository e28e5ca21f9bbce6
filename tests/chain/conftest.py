"""Fixtures for the chain tests.

``ledger_env`` is backend-neutral: a :class:`ledger_env.LedgerEnv` on a freshly deployed veriloco
contract, with named funded keys, a Ledger, block progress (``mine``, ``wait_past_deadline``)
and the moves of an epoch. It is parametrized by the backends in :data:`LEDGER_BACKENDS`; every
test written against it runs on each. ``make_ledger_env(spec=None, names=DEFAULT_NAMES)`` makes
more (other specs, other participants). Refusals surface as ``chain.ledger.ContractError``.

Adding a backend is one entry in :data:`LEDGER_BACKENDS`: the name of a fixture that returns a
factory ``(spec, names) -> driver`` (see ``ledger_env.py`` for the driver's shape) and the marks
its tests carry; the devnet's fixtures come from ``devnet_backend.py``.

``probe_wasm`` is a tiny hand-written CosmWasm module (WAT) for testing the VM and the chain
directly: it exposes each import through a thin export and misbehaves on request.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import wasmtime

pytest.register_assert_rewrite("devnet_backend", "ledger_env")

from devnet_backend import (  # noqa: E402, F401 (rewritten asserts need this order; fixtures by name)
    devnet,
    devnet_chain,
    devnet_code_id,
    devnet_deploy,
    devnet_ledger_driver,
)
from ledger_env import (  # noqa: E402 (after register_assert_rewrite)
    DEFAULT_NAMES,
    DENOM,
    EmbeddedDriver,
    LedgerEnv,
    account_key,
    make_spec,
)

from protocol.rules.spec import RunSpec  # noqa: E402 (after register_assert_rewrite)


@dataclass(frozen=True)
class LedgerBackend:
    """A backend of ``ledger_env``: the fixture that returns its driver factory, and marks."""

    fixture: str
    marks: tuple[Any, ...] = ()


LEDGER_BACKENDS: dict[str, LedgerBackend] = {
    "embedded": LedgerBackend("embedded_ledger_driver"),
    # The same tests on a real injectived node (one devnet per session, a contract per test).
    "devnet": LedgerBackend("devnet_ledger_driver", (pytest.mark.devnet, pytest.mark.slow)),
}


@pytest.fixture
def embedded_ledger_driver() -> Callable[[RunSpec, Sequence[str]], EmbeddedDriver]:
    return lambda spec, names, **instantiate: EmbeddedDriver(spec, names, **instantiate)


@pytest.fixture(params=[pytest.param(name, marks=b.marks) for name, b in LEDGER_BACKENDS.items()])
def make_ledger_env(request: pytest.FixtureRequest) -> Callable[..., LedgerEnv]:
    """A factory: ``make_ledger_env(spec=None, names=DEFAULT_NAMES, settle_page=None, admin=None)``
    -> LedgerEnv on the parametrized backend (``spec`` defaults to :func:`ledger_env.make_spec`;
    ``settle_page`` goes into the instantiate message when given; ``admin`` names the account that
    is the contract's chain admin, recorded in its config too; None: an immutable run)."""
    factory = request.getfixturevalue(LEDGER_BACKENDS[request.param].fixture)

    def make(spec: RunSpec | None = None, names: Sequence[str] = DEFAULT_NAMES,
             settle_page: int | None = None, admin: str | None = None) -> LedgerEnv:
        extra: dict[str, Any] = {} if settle_page is None else {"settle_page": settle_page}
        if admin is not None:
            extra["admin"] = admin
        return LedgerEnv(factory(spec or make_spec(), tuple(names), **extra))

    return make


@pytest.fixture
def ledger_env(make_ledger_env) -> LedgerEnv:
    """The contract deployed with :func:`ledger_env.make_spec`, on each backend."""
    return make_ledger_env()


@pytest.fixture
def embedded_env(embedded_ledger_driver) -> LedgerEnv:
    """A LedgerEnv on the embedded chain only, for tests that look inside it (``env.driver.chain``)
    or that would take minutes of real blocks."""
    return LedgerEnv(embedded_ledger_driver(make_spec(), DEFAULT_NAMES))


@pytest.fixture
def embedded_env_factory(embedded_ledger_driver) -> Callable[[RunSpec], LedgerEnv]:
    """``embedded_env_factory(spec)`` -> a LedgerEnv with ``spec`` on the embedded chain only."""
    return lambda spec: LedgerEnv(embedded_ledger_driver(spec, DEFAULT_NAMES))


@pytest.fixture(name="make_spec")
def make_spec_fixture():
    """:func:`ledger_env.make_spec`, for tests that build their own chain."""
    return make_spec


@pytest.fixture
def account():
    """``account(name)`` -> the deterministic test address for ``name``."""
    return lambda name: account_key(name).address()


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

