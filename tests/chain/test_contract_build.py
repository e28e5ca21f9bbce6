"""The committed contract artifact: what a CosmWasm chain requires of it, and that it is reproducible.

The wasm is read with a small parser written here (sections, imports, exports, memories, and
every instruction of every function body), independent of the embedded chain's own checks, and
cross-checked with wasmtime's validator with bulk memory turned off.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import wasmtime

from chain.wasm_artifact import contract_wasm_path, load_contract_wasm

REPO = Path(__file__).resolve().parents[2]

# cosmwasm-vm 2.1 compatibility.rs SUPPORTED_IMPORTS (with the iterator feature).
ALLOWED_IMPORTS = {
    "abort", "db_read", "db_write", "db_remove", "addr_validate", "addr_canonicalize",
    "addr_humanize", "bls12_381_aggregate_g1", "bls12_381_aggregate_g2",
    "bls12_381_pairing_equality", "bls12_381_hash_to_g1", "bls12_381_hash_to_g2",
    "secp256k1_verify", "secp256k1_recover_pubkey", "secp256r1_verify", "secp256r1_recover_pubkey",
    "ed25519_verify", "ed25519_batch_verify", "debug", "query_chain", "db_scan", "db_next",
    "db_next_key", "db_next_value",
}
# 0xFC sub-opcodes 8..17: memory.init, data.drop, memory.copy, memory.fill, table.init, elem.drop,
# table.copy, table.grow, table.size, table.fill (the bulk-memory / reference-types proposal).
BULK_MEMORY_SUBOPS = set(range(8, 18))
# Reference-types opcodes (typed select, table.get/set, ref.null/is_null/func): CosmWasm's
# validator has the proposal off, and the embedded chain cannot turn it off in wasmtime.
REFERENCE_TYPES_OPS = {0x1C, 0x25, 0x26, 0xD0, 0xD1, 0xD2}


class Reader:
    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data, self.pos = data, pos

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def u32(self) -> int:
        result, shift = 0, 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return result

    def skip_leb(self) -> None:
        while self.byte() & 0x80:
            pass

    def name(self) -> str:
        n = self.u32()
        self.pos += n
        return self.data[self.pos - n:self.pos].decode()

    def limits(self) -> tuple[int, int | None]:
        flag = self.byte()
        minimum = self.u32()
        return minimum, (self.u32() if flag & 1 else None)


@dataclass
class Module:
    imports: list[tuple[str, str, int]] = field(default_factory=list)  # module, name, kind
    exports: dict[str, int] = field(default_factory=dict)  # name -> kind (0 func, 2 memory)
    memories: list[tuple[int, int | None]] = field(default_factory=list)
    section_ids: list[int] = field(default_factory=list)
    opcodes: set[int] = field(default_factory=set)
    fc_subops: set[int] = field(default_factory=set)
    instructions: int = 0


def parse(wasm: bytes) -> Module:
    assert wasm[:8] == b"\x00asm\x01\x00\x00\x00", "not a wasm 1.0 module"
    module, r = Module(), Reader(wasm, 8)
    while r.pos < len(wasm):
        section_id, size = r.byte(), r.u32()
        start, end = r.pos, r.pos + size
        module.section_ids.append(section_id)
        if section_id == 2:  # imports
            for _ in range(r.u32()):
                mod, name, kind = r.name(), r.name(), r.byte()
                module.imports.append((mod, name, kind))
                if kind == 0:
                    r.u32()
                elif kind == 1:
                    r.byte()
                    r.limits()
                elif kind == 2:
                    module.memories.append(r.limits())
                else:
                    r.pos += 2
        elif section_id == 5:  # memories
            for _ in range(r.u32()):
                module.memories.append(r.limits())
        elif section_id == 7:  # exports
            for _ in range(r.u32()):
                name, kind = r.name(), r.byte()
                r.u32()
                module.exports[name] = kind
        elif section_id == 10:  # code
            for _ in range(r.u32()):
                body_size = r.u32()
                _walk_body(Reader(wasm[r.pos:r.pos + body_size]), module)
                r.pos += body_size
        r.pos = end
        assert r.pos == start + size
    return module


def _walk_body(r: Reader, module: Module) -> None:
    """Decode every instruction of one function body (so no immediate is mistaken for an opcode)."""
    for _ in range(r.u32()):  # local declarations
        r.u32()
        r.byte()
    depth = 1
    while depth:
        op = r.byte()
        module.opcodes.add(op)
        module.instructions += 1
        if op in (0x02, 0x03, 0x04):  # block, loop, if: a block type
            depth += 1
            if r.data[r.pos] in (0x40, 0x7F, 0x7E, 0x7D, 0x7C, 0x7B, 0x70, 0x6F):
                r.pos += 1
            else:
                r.skip_leb()
        elif op == 0x0B:  # end
            depth -= 1
        elif op in (0x0C, 0x0D, 0x10, 0xD2, 0x25, 0x26) or 0x20 <= op <= 0x24:
            r.skip_leb()
        elif op == 0x0E:  # br_table
            for _ in range(r.u32() + 1):
                r.skip_leb()
        elif op == 0x11:  # call_indirect
            r.skip_leb()
            r.skip_leb()
        elif op == 0x1C:  # typed select
            r.pos += r.u32()
        elif 0x28 <= op <= 0x3E:  # loads and stores: align, offset
            r.skip_leb()
            r.skip_leb()
        elif op in (0x3F, 0x40, 0x41, 0x42):  # memory.size/grow, i32/i64.const
            r.skip_leb()
        elif op == 0x43:
            r.pos += 4
        elif op == 0x44:
            r.pos += 8
        elif op == 0xD0:
            r.pos += 1
        elif op == 0xFC:
            sub = r.u32()
            module.fc_subops.add(sub)
            immediates = {8: 2, 9: 1, 10: 2, 11: 1, 12: 2, 13: 1, 14: 2, 15: 1, 16: 1, 17: 1}
            for _ in range(immediates.get(sub, 0)):
                r.skip_leb()
        elif op in (0xFD, 0xFE):
            raise AssertionError(f"SIMD or atomics prefix 0x{op:02X}: not allowed on CosmWasm")
    assert r.pos == len(r.data), "function body not fully decoded"


@pytest.fixture(scope="module")
def wasm() -> bytes:
    return load_contract_wasm()


@pytest.fixture(scope="module")
def module(wasm: bytes) -> Module:
    return parse(wasm)


def test_artifact_checksum_file_matches(wasm: bytes) -> None:
    recorded = contract_wasm_path().with_suffix(".wasm.sha256").read_text().split()
    assert recorded == [hashlib.sha256(wasm).hexdigest(), "veriloco.wasm"]


def test_parser_decoded_every_function(module: Module) -> None:
    assert 10 in module.section_ids
    assert module.instructions > 10_000  # a real contract, fully walked


def test_parser_finds_bulk_memory_where_there_is_some() -> None:
    # The check below must be able to fail: a module with memory.fill and memory.copy.
    sample = parse(wasmtime.wat2wasm(
        "(module (memory 1) (func (memory.fill (i32.const 1) (i32.const 0) (i32.const 1))"
        " (memory.copy (i32.const 1) (i32.const 2) (i32.const 3)) (drop (i32.const 0xFC))))"))
    assert sample.fc_subops == {10, 11}


def test_no_bulk_memory_reference_types_simd_or_threads(module: Module) -> None:
    assert not module.fc_subops & BULK_MEMORY_SUBOPS, f"bulk-memory instructions: {module.fc_subops}"
    assert 12 not in module.section_ids, "a DataCount section (bulk memory)"
    assert not module.opcodes & REFERENCE_TYPES_OPS, "reference-types instructions"


def test_wasmtime_validates_it_without_bulk_memory(wasm: bytes) -> None:
    config = wasmtime.Config()
    config.wasm_bulk_memory = False
    config.wasm_simd = False
    config.wasm_relaxed_simd = False
    config.wasm_threads = False
    engine = wasmtime.Engine(config)
    wasmtime.Module.validate(engine, wasm)
    with pytest.raises(wasmtime.WasmtimeError, match="bulk memory"):
        wasmtime.Module.validate(engine, wasmtime.wat2wasm(
            "(module (memory 1) (func (memory.fill (i32.const 1) (i32.const 0) (i32.const 1))))"))


def test_exports(module: Module) -> None:
    functions = {name for name, kind in module.exports.items() if kind == 0}
    assert {"allocate", "deallocate", "interface_version_8", "instantiate", "execute", "query"} <= functions
    assert [n for n in module.exports if n.startswith("interface_version_")] == ["interface_version_8"]
    assert module.exports.get("memory") == 2


def test_memory_has_no_maximum(module: Module) -> None:
    assert len(module.memories) == 1
    initial, maximum = module.memories[0]
    assert maximum is None
    assert initial <= 512


def test_imports_only_from_env_and_the_cosmwasm_set(module: Module) -> None:
    assert module.imports, "expected env imports"
    for mod, name, kind in module.imports:
        assert (mod, kind) == ("env", 0), (mod, name, kind)
        assert name in ALLOWED_IMPORTS, name
    names = {name for _, name, _ in module.imports}
    assert {"db_read", "db_write", "db_scan", "db_next", "addr_validate", "abort"} <= names


def test_size_is_within_wasmd_upload_limit(wasm: bytes) -> None:
    assert len(wasm) < 800 * 1024


@pytest.mark.slow
def test_rebuild_reproduces_the_committed_bytes() -> None:
    """contracts/build.sh --check: a build from a copy of the sources elsewhere is byte-identical."""
    proc = subprocess.run([str(REPO / "contracts" / "build.sh"), "--check"], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "reproducible" in proc.stdout
