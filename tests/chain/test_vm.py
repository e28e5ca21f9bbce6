"""The CosmWasm host (chain/embedded/vm.py), through the probe contract (conftest.probe_wat).

The probe exports a thin wrapper per import, so each test prepares Regions in the instance's
memory and calls one import exactly as a contract would.
"""

from __future__ import annotations

import struct

import pytest

from chain.embedded import AddressCodec, InvalidWasmError, OutOfGasError, VmError
from chain.embedded.state import ContractStore, Journal, JournaledDict
from chain.embedded.vm import CallContext, WasmCode, WasmInstance, compile_code
from protocol.keys import encode_address

CODEC = AddressCodec("inj")
ACCOUNT = encode_address(bytes(range(20)), "inj")
CONTRACT = encode_address(bytes(range(32)), "inj")


def _instance(probe, *, readonly: bool = False, gas_limit: int = 10**8,
              store: JournaledDict[bytes, bytes] | None = None) -> WasmInstance:
    data = store if store is not None else JournaledDict(Journal())
    context = CallContext(storage=ContractStore(data), api=CODEC, readonly=readonly)
    return WasmCode(probe.wasm).instantiate(context, gas_limit=gas_limit)


def _call(inst: WasmInstance, name: str, *args: int):
    with inst.running():
        return inst.call(name, *args)


def _message(inst: WasmInstance, ptr: int) -> str:
    assert ptr != 0, "expected an error Region"
    return inst.read_region(ptr, 1024).decode()


# -- regions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"x", bytes(range(256)) * 40])
def test_region_round_trip(probe, data: bytes) -> None:
    inst = _instance(probe)
    ptr = inst.allocate(data)
    assert inst.read_region(ptr, len(data)) == data
    inst.write_region(ptr, data[: len(data) // 2])
    assert inst.read_region(ptr, len(data)) == data[: len(data) // 2]


def test_region_bounds_are_checked(probe) -> None:
    inst = _instance(probe)
    ptr = inst.allocate(b"abcd")
    with pytest.raises(VmError, match="Region length too big"):
        inst.read_region(ptr, 3)
    with pytest.raises(VmError, match="Region too small"):
        inst.write_region(ptr, b"abcde")
    size = inst.memory.data_len(inst.store)
    with pytest.raises(VmError, match="Could not dereference"):
        inst.read_region(size - 4, 10)
    with pytest.raises(VmError, match="Could not dereference"):
        inst.read_region(0, 10)

    def forge(offset: int, capacity: int, length: int) -> int:
        inst.memory.write(inst.store, struct.pack("<III", offset, capacity, length), ptr)
        return ptr

    with pytest.raises(VmError, match="zero Wasm address"):
        inst.read_region(forge(0, 4, 4), 10)
    with pytest.raises(VmError, match="length 5 exceeds capacity 4"):
        inst.read_region(forge(100, 4, 5), 10)
    with pytest.raises(VmError, match="exceeds u32"):
        inst.read_region(forge(0xFFFFFFF0, 0x20, 1), 10)
    with pytest.raises(VmError, match="outside wasm memory"):
        inst.read_region(forge(size - 2, 8, 8), 10)


# -- storage imports -----------------------------------------------------------------------------


def test_db_read_write_remove(probe) -> None:
    store: JournaledDict[bytes, bytes] = JournaledDict(Journal())
    inst = _instance(probe, store=store)
    key, value = inst.allocate(b"k1"), inst.allocate(b"value-1")
    assert _call(inst, "t_db_read", key) == 0  # missing
    _call(inst, "t_db_write", key, value)
    assert store.get(b"k1") == b"value-1"
    out = _call(inst, "t_db_read", key)
    assert inst.read_region(out, 100) == b"value-1"
    _call(inst, "t_db_remove", key)
    assert b"k1" not in store
    assert _call(inst, "t_db_read", key) == 0
    _call(inst, "t_db_remove", key)  # removing a missing key is fine


def test_db_value_and_key_limits(probe) -> None:
    inst = _instance(probe)
    with pytest.raises(VmError, match="Region length too big"):
        _call(inst, "t_db_write", inst.allocate(b"k"), inst.allocate(b"v" * (128 * 1024 + 1)))
    with pytest.raises(VmError, match="Region length too big"):
        _call(inst, "t_db_read", inst.allocate(b"k" * (64 * 1024 + 1)))


def test_queries_cannot_write(probe) -> None:
    inst = _instance(probe, readonly=True)
    with pytest.raises(VmError, match="Write access denied"):
        _call(inst, "t_db_write", inst.allocate(b"k"), inst.allocate(b"v"))
    with pytest.raises(VmError, match="Write access denied"):
        _call(inst, "t_db_remove", inst.allocate(b"k"))


def _decode_pair(data: bytes) -> tuple[bytes, bytes]:
    value_len = int.from_bytes(data[-4:], "big")
    value = data[-4 - value_len:-4]
    rest = data[: -4 - value_len]
    key_len = int.from_bytes(rest[-4:], "big")
    return rest[-4 - key_len:-4], value


def test_db_scan_and_next(probe) -> None:
    store: JournaledDict[bytes, bytes] = JournaledDict(Journal())
    for k in [b"a", b"m/2", b"m/1", b"m/3", b"z"]:
        store[k] = k.upper()
    inst = _instance(probe, store=store)

    def scan(start: bytes | None, end: bytes | None, order: int) -> list[tuple[bytes, bytes]]:
        start_ptr = inst.allocate(start) if start is not None else 0
        end_ptr = inst.allocate(end) if end is not None else 0
        it = _call(inst, "t_db_scan", start_ptr, end_ptr, order)
        items = []
        while True:
            key, value = _decode_pair(inst.read_region(_call(inst, "t_db_next", it), 1 << 20))
            if not key:
                return items
            items.append((key, value))

    assert scan(b"m/", b"m0", 1) == [(b"m/1", b"M/1"), (b"m/2", b"M/2"), (b"m/3", b"M/3")]
    assert [k for k, _ in scan(b"m/2", None, 1)] == [b"m/2", b"m/3", b"z"]
    assert [k for k, _ in scan(None, b"m/2", 2)] == [b"m/1", b"a"]
    assert [k for k, _ in scan(None, None, 2)] == [b"z", b"m/3", b"m/2", b"m/1", b"a"]
    with pytest.raises(VmError, match="Invalid order"):
        _call(inst, "t_db_scan", 0, 0, 3)
    with pytest.raises(VmError, match="Iterator 99 does not exist"):
        _call(inst, "t_db_next", 99)


# -- address imports -----------------------------------------------------------------------------


def test_addr_validate(probe) -> None:
    inst = _instance(probe)
    validate = lambda text: _call(inst, "t_addr_validate", inst.allocate(text))  # noqa: E731 (a one-line stand-in, named where it is used)
    assert validate(ACCOUNT.encode()) == 0
    assert validate(CONTRACT.encode()) == 0
    assert "invalid Bech32 prefix; expected inj, got cosmos" in _message(
        inst, validate(encode_address(bytes(20), "cosmos").encode()))
    broken = ACCOUNT[:-1] + ("q" if ACCOUNT[-1] != "q" else "p")
    assert "not valid bech32" in _message(inst, validate(broken.encode()))
    assert "not lowercase" in _message(inst, validate(ACCOUNT.upper().encode()))
    mixed = ACCOUNT[:10] + ACCOUNT[10:].upper()
    assert "not lowercase" in _message(inst, validate(mixed.encode()))
    assert "20 or 32 bytes" in _message(inst, validate(encode_address(bytes(10), "inj").encode()))
    assert _message(inst, validate(b"")) == "Input is empty"
    assert _message(inst, validate(b"\xff\xfe")) == "Input is not valid UTF-8"
    with pytest.raises(VmError, match="Region length too big"):
        validate(b"i" * 257)


def test_addr_canonicalize_and_humanize_round_trip(probe) -> None:
    inst = _instance(probe)
    for address, raw in [(ACCOUNT, bytes(range(20))), (CONTRACT, bytes(range(32)))]:
        dest = inst.allocate(bytes(64))
        assert _call(inst, "t_addr_canonicalize", inst.allocate(address.encode()), dest) == 0
        assert inst.read_region(dest, 64) == raw
        human = inst.allocate(bytes(90))
        assert _call(inst, "t_addr_humanize", dest, human) == 0
        assert inst.read_region(human, 90).decode() == address
    err = _call(inst, "t_addr_canonicalize", inst.allocate(b"inj1nothing"), inst.allocate(bytes(64)))
    assert "not valid bech32" in _message(inst, err)
    err = _call(inst, "t_addr_humanize", inst.allocate(bytes(7)), inst.allocate(bytes(90)))
    assert "must be 20 or 32 bytes, got 7" in _message(inst, err)
    # A destination too small for the answer is a VM fault, as in cosmwasm-vm.
    with pytest.raises(VmError, match="Region too small"):
        _call(inst, "t_addr_canonicalize", inst.allocate(ACCOUNT.encode()), inst.allocate(bytes(4)))


# -- faults --------------------------------------------------------------------------------------


def _execute(probe, msg: bytes, **limits) -> tuple[JournaledDict[bytes, bytes], object]:
    store: JournaledDict[bytes, bytes] = JournaledDict(Journal())
    context = CallContext(storage=ContractStore(store), api=CODEC)
    env = b'{"block":{"height":1,"time":"1","chain_id":"t"},"transaction":null,"contract":{"address":"x"}}'
    info = b'{"sender":"x","funds":[]}'
    result = WasmCode(probe.wasm).call_entry("execute", [env, info, msg], context, **limits)
    return store, result


def test_entry_point_call_passes_arguments_in_regions(probe) -> None:
    store, (result, gas) = _execute(probe, b"hello")
    assert store.get(b"msg") == b"hello"
    assert store.get(b"info") == b'{"sender":"x","funds":[]}'
    assert result.startswith(b'{"ok":')
    assert gas > 0


def test_abort_carries_the_message(probe) -> None:
    with pytest.raises(VmError, match=f"^Aborted: {probe.abort_message}$"):
        _execute(probe, b"abort")


def test_trap_is_a_vm_error(probe) -> None:
    with pytest.raises(VmError, match=r"wasm trap \(unreachable\)"):
        _execute(probe, b"trap")


def test_zero_offset_result_region_is_refused(probe) -> None:
    with pytest.raises(VmError, match="Got a zero Wasm address in the offset"):
        _execute(probe, b"zero")


def test_out_of_fuel_is_an_error_not_a_hang(probe) -> None:
    # The loop never ends by itself: the raise is the fuel limit stopping it.
    with pytest.raises(OutOfGasError):
        _execute(probe, b"loop", gas_limit=5_000_000)


def test_wall_clock_limit_stops_a_runaway(probe) -> None:
    with pytest.raises(VmError, match="time limit"):
        _execute(probe, b"loop", gas_limit=10**15, time_limit_s=0.3)


def test_memory_is_limited(probe) -> None:
    # The probe grows memory by 64 MiB; the default 32 MiB limit refuses and it traps.
    with pytest.raises(VmError, match="unreachable"):
        _execute(probe, b"memory")


def test_unsupported_imports_fail_clearly(probe) -> None:
    inst = _instance(probe)
    with pytest.raises(VmError, match="does not support the query_chain import"):
        _call(inst, "t_query_chain", inst.allocate(b"{}"))


def test_debug_messages_are_collected(probe) -> None:
    inst = _instance(probe)
    _call(inst, "t_debug", inst.allocate("héllo".encode()))
    assert inst.context.debug_log == ["héllo"]


# -- static validation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ({"memory_max": True}, "maximum must be unset"),
        ({"interface": "interface_version_7"}, "unknown interface_version"),
        ({"with_allocate": False}, 'required export: "allocate"'),
        ({"extra_import": '(import "env" "socket" (func (param i32)))'}, 'unsupported import: "env.socket"'),
        ({"extra_import": '(import "wasi" "fd_write" (func (param i32)))'},
         'unsupported import: "wasi.fd_write"'),
        ({"bulk_memory": True}, "bulk memory"),
    ],
    ids=["memory-max", "interface-version", "no-allocate", "unknown-import", "other-module", "bulk-memory"],
)
def test_static_validation_refuses_what_wasmd_refuses(probe, breakage, message: str) -> None:
    with pytest.raises(InvalidWasmError, match=message):
        compile_code(probe.build(**breakage))


def test_the_contract_passes_static_validation() -> None:
    from chain.wasm_artifact import load_contract_wasm

    compile_code(load_contract_wasm())
