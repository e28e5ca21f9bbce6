"""A CosmWasm VM (interface_version_8) on wasmtime: static checks, Regions, imports, gas.

This is the host side of the ABI the contract implements in ``contracts/veriloco/src/abi.rs``,
following cosmwasm-vm 2.1 (``packages/vm/src/{compatibility,memory,imports,calls}.rs``):

* ``store_code`` runs the same static checks the chain runs (:func:`compile_code`): valid wasm
  without bulk memory, SIMD or threads; exactly one memory, initial at most 512 pages, no maximum;
  exactly one ``interface_version_8`` marker; ``allocate``/``deallocate`` exported; only function
  imports from the CosmWasm ``env`` set.
* Every entry-point call gets a fresh instance (as in CosmWasm: no memory survives a call). The
  host writes each argument into a Region it gets from the contract's ``allocate``, calls the
  export, reads the result Region and frees it with ``deallocate``.
* Regions are bounds-checked exactly as the VM does (zero offset, ``length > capacity``, overflow,
  out of memory, per-import maximum lengths).
* Gas is wasmtime fuel (about one unit per wasm instruction) plus fixed charges for host calls.
  It bounds a runaway contract and gives a deterministic cost figure, but it is NOT comparable
  with a real chain's gas. A wall-clock limit (wasmtime epoch interruption) and a memory limit
  (32 MiB, as wasmd's default) back it up.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import wasmtime

from chain.embedded.addresses import AddressCodec, AddressError
from chain.embedded.errors import InvalidWasmError, OutOfGasError, VmError
from chain.errors import ContractError

KI = 1024
MI = 1024 * 1024

# Limits from cosmwasm-vm 2.1 packages/vm/src/imports.rs and calls.rs.
MAX_LENGTH_DB_KEY = 64 * KI
MAX_LENGTH_DB_VALUE = 128 * KI
MAX_LENGTH_CANONICAL_ADDRESS = 64
MAX_LENGTH_HUMAN_ADDRESS = 256
MAX_LENGTH_DEBUG = 2 * MI
MAX_LENGTH_ABORT = 2 * MI
MAX_LENGTH_RESULT = 64 * MI
# compatibility.rs
MAX_INITIAL_MEMORY_PAGES = 512
MAX_IMPORTS = 100
# wasmd's default MaxWasmSize for an upload.
MAX_WASM_SIZE = 800 * KI
# wasmd's default per-instance memory limit (ContractMemoryLimit, 32 MiB).
DEFAULT_MEMORY_LIMIT = 32 * MI
# Default fuel per call and wall-clock limit per call.
DEFAULT_GAS_LIMIT = 1_000_000_000
DEFAULT_TIME_LIMIT_S = 10.0

SUPPORTED_IMPORTS: frozenset[str] = frozenset(
    {
        "abort", "db_read", "db_write", "db_remove", "addr_validate", "addr_canonicalize",
        "addr_humanize", "bls12_381_aggregate_g1", "bls12_381_aggregate_g2",
        "bls12_381_pairing_equality", "bls12_381_hash_to_g1", "bls12_381_hash_to_g2",
        "secp256k1_verify", "secp256k1_recover_pubkey", "secp256r1_verify",
        "secp256r1_recover_pubkey", "ed25519_verify", "ed25519_batch_verify", "debug",
        "query_chain", "db_scan", "db_next", "db_next_key", "db_next_value",
    }
)
REQUIRED_EXPORTS = ("allocate", "deallocate")
INTERFACE_VERSION = "interface_version_8"

# Fuel charged for host calls, on top of the fuel wasm instructions consume. Only relative sizes
# matter: storage writes cost most, then reads, then address conversions.
FUEL_DB_READ = 2_000
FUEL_DB_WRITE = 5_000
FUEL_DB_SCAN = 2_000
FUEL_DB_NEXT = 1_000
FUEL_ADDR = 1_000
FUEL_PER_BYTE_READ = 3
FUEL_PER_BYTE_WRITE = 30

_I32 = wasmtime.ValType.i32()
_I64 = wasmtime.ValType.i64()


class Storage(Protocol):
    """What the ``db_*`` imports need (``chain.embedded.state.ContractStore`` provides it)."""

    def get(self, key: bytes) -> bytes | None: ...

    def set(self, key: bytes, value: bytes) -> None: ...

    def remove(self, key: bytes) -> None: ...

    def scan(self, start: bytes | None, end: bytes | None,
             descending: bool) -> list[tuple[bytes, bytes]]: ...


@dataclass
class CallContext:
    """Everything an import may touch during one entry-point call.

    Attributes:
        storage: the contract's storage.
        api: address validation and conversion for the chain's prefix.
        readonly: True for queries (``db_write``/``db_remove`` fail).
        debug_log: receives each ``debug`` message.
    """

    storage: Storage
    api: AddressCodec
    readonly: bool = False
    debug_log: list[str] = field(default_factory=list)


def _make_engine() -> wasmtime.Engine:
    config = wasmtime.Config()
    config.consume_fuel = True
    config.epoch_interruption = True
    # Explicit checks instead of signal handlers for traps: a signal handler installed after ours
    # (Python's faulthandler, which pytest enables) would otherwise turn a wasm trap into a crash
    # of the whole process.
    config.signals_based_traps = False
    # What CosmWasm's validator refuses (cosmwasm-vm parsed_wasm.rs WasmFeatures). Reference types
    # cannot be turned off in this wasmtime build (component-model-async needs them).
    config.wasm_bulk_memory = False
    config.wasm_simd = False
    config.wasm_relaxed_simd = False
    config.wasm_threads = False
    config.wasm_multi_memory = False
    config.wasm_memory64 = False
    config.wasm_tail_call = False
    config.wasm_gc = False
    config.wasm_function_references = False
    config.wasm_exceptions = False
    # Compiled code is cached on disk by wasmtime itself (~/.cache/wasmtime, keyed by its version,
    # this configuration and the module's bytes; about 1 MB for the contract), so a process that
    # opens a saved embedded chain (`veriloco report` on a simulation) starts in milliseconds
    # instead of compiling the contract for 1-2 s. VERILOCO_WASM_CACHE=0 turns it off; a cache
    # directory that cannot be used costs only the compile.
    if os.environ.get("VERILOCO_WASM_CACHE", "1") != "0":
        with contextlib.suppress(wasmtime.WasmtimeError):
            config.cache = True
    return wasmtime.Engine(config)


class _Clock:
    """One engine shared by all codes, and a daemon thread that ticks its epoch every
    ``TICK_S`` seconds so a call can be interrupted after a wall-clock deadline."""

    TICK_S = 0.05

    def __init__(self) -> None:
        self.engine = _make_engine()
        self._started = False
        self._lock = threading.Lock()

    def deadline_ticks(self, seconds: float) -> int:
        """Start the ticker if needed; the epoch deadline for a call allowed ``seconds``."""
        with self._lock:
            if not self._started:
                threading.Thread(target=self._tick, name="wasm-epoch-ticker", daemon=True).start()
                self._started = True
        return max(1, int(seconds / self.TICK_S) + 1)

    def _tick(self) -> None:
        while True:
            time.sleep(self.TICK_S)
            self.engine.increment_epoch()


_CLOCK = _Clock()
# Compiled modules by checksum: compiling takes ~0.1-0.3 s, so each code is compiled once per
# process however many chains load it.
_MODULES: dict[bytes, wasmtime.Module] = {}


def compile_code(wasm: bytes) -> wasmtime.Module:
    """Validate ``wasm`` as wasmd does at upload and compile it.

    Raises:
        InvalidWasmError: with the reason, worded like cosmwasm-vm's static validation errors.
    """
    if len(wasm) > MAX_WASM_SIZE:
        raise InvalidWasmError(f"wasm is {len(wasm)} bytes, more than the {MAX_WASM_SIZE} allowed")
    checksum = hashlib.sha256(wasm).digest()
    module = _MODULES.get(checksum)
    if module is None:
        try:
            module = wasmtime.Module(_CLOCK.engine, wasm)
        except wasmtime.WasmtimeError as exc:
            raise InvalidWasmError(f"invalid wasm (or it uses a feature CosmWasm forbids): {exc}") from None
        _check_interface(module)
        _MODULES[checksum] = module
    return module


def _check_interface(module: wasmtime.Module) -> None:
    imports = module.imports
    if len(imports) > MAX_IMPORTS:
        raise InvalidWasmError(f"Import count exceeds limit. Imports: {len(imports)}. Limit: {MAX_IMPORTS}.")
    for imp in imports:
        full = f"{imp.module}.{imp.name}"
        if imp.module != "env" or imp.name not in SUPPORTED_IMPORTS:
            raise InvalidWasmError(f'Wasm contract requires unsupported import: "{full}"')
        if not isinstance(imp.type, wasmtime.FuncType):
            raise InvalidWasmError(f'Wasm contract requires non-function import: "{full}"')
    exports = {exp.name: exp.type for exp in module.exports}
    markers = [name for name in exports if name.startswith("interface_version_")]
    if not markers:
        raise InvalidWasmError("Wasm contract missing a required marker export: interface_version_*")
    if len(markers) > 1:
        raise InvalidWasmError("Wasm contract contains more than one marker export: interface_version_*")
    if markers[0] != INTERFACE_VERSION:
        raise InvalidWasmError(f"Wasm contract has unknown interface_version_* marker export {markers[0]}")
    for name in REQUIRED_EXPORTS:
        if not isinstance(exports.get(name), wasmtime.FuncType):
            raise InvalidWasmError(f'Wasm contract doesn\'t have required export: "{name}"')
    memories = [t for t in exports.values() if isinstance(t, wasmtime.MemoryType)]
    if len(memories) != 1 or not isinstance(exports.get("memory"), wasmtime.MemoryType):
        raise InvalidWasmError("Wasm contract must contain exactly one memory, exported as \"memory\"")
    limits = memories[0].limits
    if limits.min > MAX_INITIAL_MEMORY_PAGES:
        raise InvalidWasmError(
            f"Wasm contract memory's minimum must not exceed {MAX_INITIAL_MEMORY_PAGES} pages."
        )
    if limits.max is not None:
        raise InvalidWasmError(
            "Wasm contract memory's maximum must be unset. The host will set it for you."
        )


class WasmCode:
    """One stored code: the compiled module and a linker that provides the ``env`` imports.

    Args:
        wasm: the module bytes (checked by :func:`compile_code`).
    """

    def __init__(self, wasm: bytes) -> None:
        self.wasm = wasm
        self.checksum = hashlib.sha256(wasm).digest()
        self.module = compile_code(wasm)
        self._instances: list[WasmInstance] = []  # the calls in progress, innermost last
        linker = wasmtime.Linker(_CLOCK.engine)
        for name, params, results, impl in _IMPORTS:
            linker.define_func("env", name, wasmtime.FuncType(params, results), self._bind(impl))
        self._pre = linker.instantiate_pre(self.module)

    def _bind(self, impl: Callable[..., Any]) -> Callable[..., Any]:
        # Host functions cannot carry per-call state, so they find the instance being run at the
        # top of the stack (calls nest only if a contract queries another, which is unsupported).
        # One stack per code: one call at a time, which EmbeddedChain's lock ensures (two threads
        # in here at once read each other's Regions and iterators).
        instances = self._instances

        def host_function(*args: int) -> Any:
            return impl(instances[-1], *args)

        return host_function

    def instantiate(self, context: CallContext, *, gas_limit: int = DEFAULT_GAS_LIMIT,
                    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
                    memory_limit: int = DEFAULT_MEMORY_LIMIT) -> WasmInstance:
        """A fresh instance for one call, with its own fuel, deadline and memory limit."""
        store = wasmtime.Store(_CLOCK.engine)
        store.set_fuel(gas_limit)
        store.set_epoch_deadline(_CLOCK.deadline_ticks(time_limit_s))
        store.set_limits(memory_size=memory_limit)
        return WasmInstance(self, store, context, gas_limit)

    def call_entry(self, entry_point: str, args: Sequence[bytes], context: CallContext, *,
                   gas_limit: int = DEFAULT_GAS_LIMIT,
                   time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> tuple[bytes, int]:
        """Call an entry point (``instantiate``, ``execute``, ``query``) with JSON arguments.

        Returns:
            The raw result JSON and the gas (fuel) used.

        Raises:
            VmError: trap, abort, out of gas/time, bad Region, unknown entry point.
        """
        instance = self.instantiate(context, gas_limit=gas_limit, time_limit_s=time_limit_s)
        with instance.running():
            result = instance.call_raw(entry_point, args)
        return result, instance.gas_used


class WasmInstance:
    """One instantiation of a code, for one call: its store, memory and open iterators."""

    def __init__(self, code: WasmCode, store: wasmtime.Store, context: CallContext,
                 gas_limit: int) -> None:
        self.code = code
        self.store = store
        self.context = context
        self.gas_limit = gas_limit
        self._iterators: dict[int, list[tuple[bytes, bytes]]] = {}
        try:
            instance = code._pre.instantiate(store)
        except wasmtime.Trap as trap:
            raise _vm_error_from_trap(trap) from None
        self._exports = instance.exports(store)
        memory = self._exports["memory"]
        if not isinstance(memory, wasmtime.Memory):  # compile_code checked it; the type needs saying
            raise VmError("the export \"memory\" is not a memory")
        self.memory = memory

    # -- running ---------------------------------------------------------------------------------

    @contextmanager
    def running(self) -> Iterator[WasmInstance]:
        """While open, host functions act on this instance."""
        self.code._instances.append(self)
        try:
            yield self
        finally:
            self.code._instances.pop()

    @property
    def gas_used(self) -> int:
        return self.gas_limit - self.store.get_fuel()

    def consume_gas(self, amount: int) -> None:
        """Charge a host call; raises OutOfGasError when the fuel does not cover it."""
        left = self.store.get_fuel()
        if amount > left:
            self.store.set_fuel(0)
            raise OutOfGasError(f"out of gas: a host call needs {amount}, {left} left")
        self.store.set_fuel(left - amount)

    def call(self, name: str, *args: int) -> Any:
        """Call an exported function with integer arguments; traps become VmErrors."""
        func = self._exports.get(name)
        if not isinstance(func, wasmtime.Func):
            raise VmError(f"the contract has no exported function {name!r}")
        try:
            return func(self.store, *args)
        except wasmtime.Trap as trap:
            raise _vm_error_from_trap(trap) from None
        except wasmtime.WasmtimeError as exc:
            raise VmError(f"wasm call {name} failed: {exc}") from None

    def call_raw(self, name: str, args: Sequence[bytes]) -> bytes:
        """cosmwasm-vm's ``call_raw``: pass each argument in a Region from ``allocate``, call
        ``name``, read the result Region (at most 64 MiB) and ``deallocate`` it."""
        pointers = [self.allocate(arg) for arg in args]
        result_ptr = self.call(name, *pointers)
        if not isinstance(result_ptr, int):
            raise VmError(f"{name} returned {result_ptr!r}, expected a Region pointer")
        data = self.read_region(result_ptr, MAX_LENGTH_RESULT)
        # The arguments were freed by the contract; the result is ours to free.
        self.call("deallocate", result_ptr)
        return data

    # -- regions ---------------------------------------------------------------------------------

    def allocate(self, data: bytes) -> int:
        """Copy ``data`` into a new Region from the contract's ``allocate``; returns its pointer.

        Used for entry-point arguments and for data an import returns (the contract then owns
        the Region and frees it)."""
        ptr: int = self.call("allocate", len(data))
        if not ptr:
            raise VmError("allocate returned a zero Region pointer")
        self.write_region(ptr, data)
        return ptr

    def _region(self, ptr: int) -> tuple[int, int, int]:
        size = self.memory.data_len(self.store)
        if ptr <= 0 or ptr + 12 > size:
            raise VmError(f"Could not dereference this pointer to a Region: {ptr}")
        offset, capacity, length = struct.unpack("<III", self.memory.read(self.store, ptr, ptr + 12))
        if offset == 0:
            raise VmError("Region validation error: Got a zero Wasm address in the offset")
        if length > capacity:
            raise VmError(
                f"Region validation error: length {length} exceeds capacity {capacity}"
            )
        if capacity > 0xFFFFFFFF - offset:
            raise VmError(
                f"Region validation error: offset {offset} + capacity {capacity} exceeds u32"
            )
        return offset, capacity, length

    def read_region(self, ptr: int, max_length: int) -> bytes:
        """The bytes a Region describes, refusing more than ``max_length``."""
        offset, _, length = self._region(ptr)
        if length > max_length:
            raise VmError(f"Region length too big. Got {length}, limit {max_length}")
        if offset + length > self.memory.data_len(self.store):
            raise VmError(f"Region at {offset} with length {length} is outside wasm memory")
        return bytes(self.memory.read(self.store, offset, offset + length))

    def write_region(self, ptr: int, data: bytes) -> None:
        """Write ``data`` into the Region at ``ptr`` (its capacity must suffice); sets its length."""
        offset, capacity, _ = self._region(ptr)
        if len(data) > capacity:
            raise VmError(f"Region too small. Got {capacity}, required {len(data)}")
        if offset + len(data) > self.memory.data_len(self.store):
            raise VmError(f"Region at {offset} with length {len(data)} is outside wasm memory")
        self.memory.write(self.store, data, offset)
        self.memory.write(self.store, struct.pack("<I", len(data)), ptr + 8)

    # -- iterators -------------------------------------------------------------------------------

    def open_iterator(self, items: list[tuple[bytes, bytes]]) -> int:
        iterator_id = len(self._iterators) + 1
        # Reversed so next() pops from the end in O(1).
        self._iterators[iterator_id] = items[::-1]
        return iterator_id

    def next_item(self, iterator_id: int) -> tuple[bytes, bytes] | None:
        items = self._iterators.get(iterator_id)
        if items is None:
            raise VmError(f"Iterator {iterator_id} does not exist")
        return items.pop() if items else None


def _vm_error_from_trap(trap: wasmtime.Trap) -> VmError:
    code = trap.trap_code
    if code == wasmtime.TrapCode.OUT_OF_FUEL:
        return OutOfGasError("out of gas: the contract used up its fuel")
    if code == wasmtime.TrapCode.INTERRUPT:
        return VmError("execution time limit exceeded (wall clock)")
    first_line = trap.message.splitlines()[0] if trap.message else str(code)
    return VmError(f"wasm trap ({code.name.lower() if code is not None else 'unknown'}): {first_line}")


# -- the env imports ----------------------------------------------------------------------------


def _db_read(inst: WasmInstance, key_ptr: int) -> int:
    key = inst.read_region(key_ptr, MAX_LENGTH_DB_KEY)
    value = inst.context.storage.get(key)
    inst.consume_gas(FUEL_DB_READ + FUEL_PER_BYTE_READ * (len(key) + len(value or b"")))
    if value is None:
        return 0
    return inst.allocate(value)


def _db_write(inst: WasmInstance, key_ptr: int, value_ptr: int) -> None:
    if inst.context.readonly:
        raise VmError("Write access denied: storage is read-only in queries")
    key = inst.read_region(key_ptr, MAX_LENGTH_DB_KEY)
    value = inst.read_region(value_ptr, MAX_LENGTH_DB_VALUE)
    inst.consume_gas(FUEL_DB_WRITE + FUEL_PER_BYTE_WRITE * (len(key) + len(value)))
    inst.context.storage.set(key, value)


def _db_remove(inst: WasmInstance, key_ptr: int) -> None:
    if inst.context.readonly:
        raise VmError("Write access denied: storage is read-only in queries")
    key = inst.read_region(key_ptr, MAX_LENGTH_DB_KEY)
    inst.consume_gas(FUEL_DB_WRITE + FUEL_PER_BYTE_WRITE * len(key))
    inst.context.storage.remove(key)


def _db_scan(inst: WasmInstance, start_ptr: int, end_ptr: int, order: int) -> int:
    start = inst.read_region(start_ptr, MAX_LENGTH_DB_KEY) if start_ptr else None
    end = inst.read_region(end_ptr, MAX_LENGTH_DB_KEY) if end_ptr else None
    if order not in (1, 2):
        raise VmError(f"Invalid order value {order}")
    inst.consume_gas(FUEL_DB_SCAN)
    return inst.open_iterator(inst.context.storage.scan(start, end, descending=order == 2))


def _encode_sections(*sections: bytes) -> bytes:
    # cosmwasm's sections encoding: each section followed by its length as u32 big endian.
    return b"".join(s + len(s).to_bytes(4, "big") for s in sections)


def _next(inst: WasmInstance, iterator_id: int, pick: Callable[[bytes, bytes], bytes] | None) -> int:
    item = inst.next_item(iterator_id)
    key, value = item if item is not None else (b"", b"")
    inst.consume_gas(FUEL_DB_NEXT + FUEL_PER_BYTE_READ * (len(key) + len(value)))
    if pick is None:
        return inst.allocate(_encode_sections(key, value))
    if item is None:
        return 0
    return inst.allocate(pick(key, value))


def _db_next(inst: WasmInstance, iterator_id: int) -> int:
    return _next(inst, iterator_id, None)


def _db_next_key(inst: WasmInstance, iterator_id: int) -> int:
    return _next(inst, iterator_id, lambda k, v: k)


def _db_next_value(inst: WasmInstance, iterator_id: int) -> int:
    return _next(inst, iterator_id, lambda k, v: v)


def _read_human(inst: WasmInstance, source_ptr: int) -> str | int:
    """The address string, or the pointer to an error message for the contract."""
    data = inst.read_region(source_ptr, MAX_LENGTH_HUMAN_ADDRESS)
    if not data:
        return inst.allocate(b"Input is empty")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return inst.allocate(b"Input is not valid UTF-8")


def _addr_validate(inst: WasmInstance, source_ptr: int) -> int:
    human = _read_human(inst, source_ptr)
    if isinstance(human, int):
        return human
    inst.consume_gas(FUEL_ADDR)
    try:
        inst.context.api.validate(human)
    except AddressError as exc:
        return inst.allocate(str(exc).encode())
    return 0


def _addr_canonicalize(inst: WasmInstance, source_ptr: int, destination_ptr: int) -> int:
    human = _read_human(inst, source_ptr)
    if isinstance(human, int):
        return human
    inst.consume_gas(FUEL_ADDR)
    try:
        canonical = inst.context.api.canonicalize(human)
    except AddressError as exc:
        return inst.allocate(str(exc).encode())
    inst.write_region(destination_ptr, canonical)
    return 0


def _addr_humanize(inst: WasmInstance, source_ptr: int, destination_ptr: int) -> int:
    canonical = inst.read_region(source_ptr, MAX_LENGTH_CANONICAL_ADDRESS)
    inst.consume_gas(FUEL_ADDR)
    try:
        human = inst.context.api.humanize(canonical)
    except AddressError as exc:
        return inst.allocate(str(exc).encode())
    inst.write_region(destination_ptr, human.encode())
    return 0


def _debug(inst: WasmInstance, message_ptr: int) -> None:
    message = inst.read_region(message_ptr, MAX_LENGTH_DEBUG)
    inst.context.debug_log.append(message.decode("utf-8", errors="replace"))


def _abort(inst: WasmInstance, message_ptr: int) -> None:
    message = inst.read_region(message_ptr, MAX_LENGTH_ABORT)
    raise VmError(f"Aborted: {message.decode('utf-8', errors='replace')}")


def _unsupported(name: str) -> Callable[..., Any]:
    def call(inst: WasmInstance, *args: int) -> Any:
        raise VmError(f"the embedded chain does not support the {name} import")

    return call


_IMPORTS: list[tuple[str, list[wasmtime.ValType], list[wasmtime.ValType], Callable[..., Any]]] = [
    ("db_read", [_I32], [_I32], _db_read),
    ("db_write", [_I32, _I32], [], _db_write),
    ("db_remove", [_I32], [], _db_remove),
    ("db_scan", [_I32, _I32, _I32], [_I32], _db_scan),
    ("db_next", [_I32], [_I32], _db_next),
    ("db_next_key", [_I32], [_I32], _db_next_key),
    ("db_next_value", [_I32], [_I32], _db_next_value),
    ("addr_validate", [_I32], [_I32], _addr_validate),
    ("addr_canonicalize", [_I32, _I32], [_I32], _addr_canonicalize),
    ("addr_humanize", [_I32, _I32], [_I32], _addr_humanize),
    ("debug", [_I32], [], _debug),
    ("abort", [_I32], [], _abort),
    # Cryptography and chain queries: present so any CosmWasm contract links, but refused when
    # called (the veriloco contract uses none of them).
    ("query_chain", [_I32], [_I32], _unsupported("query_chain")),
    ("secp256k1_verify", [_I32] * 3, [_I32], _unsupported("secp256k1_verify")),
    ("secp256k1_recover_pubkey", [_I32] * 3, [_I64], _unsupported("secp256k1_recover_pubkey")),
    ("secp256r1_verify", [_I32] * 3, [_I32], _unsupported("secp256r1_verify")),
    ("secp256r1_recover_pubkey", [_I32] * 3, [_I64], _unsupported("secp256r1_recover_pubkey")),
    ("ed25519_verify", [_I32] * 3, [_I32], _unsupported("ed25519_verify")),
    ("ed25519_batch_verify", [_I32] * 3, [_I32], _unsupported("ed25519_batch_verify")),
    ("bls12_381_aggregate_g1", [_I32] * 2, [_I32], _unsupported("bls12_381_aggregate_g1")),
    ("bls12_381_aggregate_g2", [_I32] * 2, [_I32], _unsupported("bls12_381_aggregate_g2")),
    ("bls12_381_pairing_equality", [_I32] * 4, [_I32], _unsupported("bls12_381_pairing_equality")),
    ("bls12_381_hash_to_g1", [_I32] * 4, [_I32], _unsupported("bls12_381_hash_to_g1")),
    ("bls12_381_hash_to_g2", [_I32] * 4, [_I32], _unsupported("bls12_381_hash_to_g2")),
]
assert {name for name, *_ in _IMPORTS} == SUPPORTED_IMPORTS


# -- results ------------------------------------------------------------------------------------


def parse_contract_result(raw: bytes, *, contract: str, entry_point: str) -> Any:
    """The ``ok`` payload of a ContractResult; ``{"error": msg}`` raises ContractError(msg).

    Raises:
        ContractError: the contract refused.
        VmError: the result is not a ContractResult.
    """
    try:
        result = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise VmError(f"{entry_point} returned invalid JSON: {exc}") from None
    if isinstance(result, dict) and len(result) == 1:
        if "ok" in result:
            return result["ok"]
        if "error" in result and isinstance(result["error"], str):
            raise ContractError(result["error"], contract=contract, entry_point=entry_point)
    raise VmError(f"{entry_point} returned {raw[:200]!r}, not a ContractResult")
