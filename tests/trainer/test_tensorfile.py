"""Streamed safetensors writes: the very bytes ``safetensors.torch.save`` gives, read back by every reader,
written atomically, and with no copy of the file in memory."""

from __future__ import annotations

import json
import tracemalloc

import pytest
import torch
from safetensors.torch import save as st_save

from protocol.tensors.digest import DTYPE_NAMES
from trainer.checkpoint import FORMAT, checkpoint_layout, load_checkpoint, stream_checkpoint
from trainer.delta import delta_hash, load_delta, quantize, save_delta, stream_delta
from trainer.inner import start_checkpoint
from trainer.outer import GlobalState, load_global, stream_global
from trainer.tensorfile import check_header, encode_tensors, save_tensors, tensors_header
from trainer.tensorstream import file_chunks


def _saved(tmp_path, tensors, metadata) -> bytes:
    path = tmp_path / "t.safetensors"
    save_tensors(path, tensors, metadata)
    assert not list(tmp_path.glob(".*.tmp"))
    return path.read_bytes()


def _every_dtype(gen: torch.Generator) -> dict[str, torch.Tensor]:
    """One tensor of each dtype the project names, of odd sizes, plus 0-d and empty ones."""
    out = {}
    shapes = [(3,), (7, 5), (1, 1, 13), (), (0,), (2, 0, 3), (11,)]
    for i, dtype in enumerate(DTYPE_NAMES):
        shape = shapes[i % len(shapes)]
        if dtype == torch.bool:
            t = torch.rand(shape, generator=gen) > 0.5
        elif dtype.is_floating_point:
            t = torch.randn(shape, generator=gen).to(dtype)
        else:
            t = torch.randint(-100 if dtype != torch.uint8 else 0, 100, shape, generator=gen).to(dtype)
        out[f"t{i}/{str(dtype).split('.')[-1]}"] = t
    return out


def _many(gen: torch.Generator) -> dict[str, torch.Tensor]:
    """300 tensors of mixed dtypes whose names sort differently as text, by case, and by prefix."""
    dtypes = [torch.float32, torch.int64, torch.int8, torch.bfloat16, torch.float16, torch.uint8]
    names = [f"{p}{i}" for i in range(50) for p in ("a.", "B/", "a", "é", "z_", "A")]
    return {n: torch.randn(1 + i % 17, generator=gen).to(dtypes[i % len(dtypes)]) for i, n in enumerate(names)}


def _odd_names() -> dict[str, torch.Tensor]:
    """Names JSON must escape, and non-ASCII ones (kept as UTF-8 by both writers)."""
    names = ['q"uote', "back\\slash", "tab\there", "ctl\x01\x1f", "new\nline", "ünï/ç∂", "emoji😀", "slash/", "del\x7f"]
    return {n: torch.full((i + 1,), float(i)) for i, n in enumerate(names)}


LAYOUTS = {"every_dtype": _every_dtype, "many": _many, "odd_names": lambda gen: _odd_names(),
           "single_scalar": lambda gen: {"step": torch.tensor(7, dtype=torch.int64)}}
# No layout without tensors: safetensors 0.8 writes invalid JSON for it with metadata ('{},"__metadata__":{}}'),
# and no file of the project has none.
METADATA = {"none_written": {}, "format": FORMAT, "escaped": {"k\n\"é": "v\\\t😀"}}


@pytest.mark.parametrize("metadata", list(METADATA), ids=list(METADATA))
@pytest.mark.parametrize("layout", list(LAYOUTS), ids=list(LAYOUTS))
def test_streamed_file_is_byte_identical_to_safetensors_save(tmp_path, layout, metadata) -> None:
    tensors = LAYOUTS[layout](torch.Generator().manual_seed(3))
    meta = METADATA[metadata]
    assert _saved(tmp_path, tensors, meta) == st_save(tensors, metadata=dict(meta)) == encode_tensors(tensors, meta)


def test_header_without_metadata_matches_the_library(tmp_path) -> None:
    tensors = _every_dtype(torch.Generator().manual_seed(4))
    head, _ = tensors_header(tensors, None)
    lib = st_save(tensors)
    assert lib.startswith(head) and b"__metadata__" not in head


def test_non_contiguous_and_grad_tensors_are_written_as_encode_tensors_writes_them(tmp_path) -> None:
    base = torch.arange(60, dtype=torch.float32).reshape(6, 10)
    tensors = {"t": base.t(), "slice": base[:, 3], "grad": torch.ones(4, requires_grad=True),
               "expanded": torch.tensor([1, 2], dtype=torch.int16).expand(3, 2)}
    assert _saved(tmp_path, tensors, FORMAT) == encode_tensors(tensors, FORMAT)


def test_several_metadata_keys_are_written_sorted_and_otherwise_as_the_library_does(tmp_path) -> None:
    # The library writes __metadata__ keys in a random order (a Rust HashMap); ours are sorted.
    tensors = _many(torch.Generator().manual_seed(5))
    meta = {"format": "veriloco/delta-1", "scheme": "int8", "block_size": "64"}
    ours, lib = _saved(tmp_path, tensors, meta), st_save(tensors, metadata=meta)
    n = int.from_bytes(ours[:8], "little")
    assert ours[:8] == lib[:8] and ours[8 + n:] == lib[8 + n:]
    ours_h, lib_h = json.loads(ours[8:8 + n]), json.loads(lib[8:8 + n])
    assert ours_h == lib_h and list(ours_h) == list(lib_h)  # same tensor entries, in the same order
    assert list(ours_h["__metadata__"]) == ["block_size", "format", "scheme"]
    assert _saved(tmp_path, tensors, dict(reversed(meta.items()))) == ours  # the same file, whatever the dict order


def test_project_files_are_identical_and_read_by_every_reader(spec, tmp_path) -> None:
    leaf = start_checkpoint(spec, GlobalState.initial(spec).params, 3)
    path = tmp_path / "leaf.safetensors"
    leaf.save(path)
    data = path.read_bytes()
    assert data == leaf.encode()
    n = int.from_bytes(data[:8], "little")
    assert check_header(data[8:8 + n], checkpoint_layout(spec, 0), "leaf")[0] == FORMAT
    assert load_checkpoint(path, spec, 0).leaf_hash() == leaf.leaf_hash()
    assert stream_checkpoint(file_chunks(path, 777), spec, 0)[1] == leaf.leaf_hash()

    state = GlobalState.initial(spec)
    gpath = tmp_path / "global.safetensors"
    state.save(gpath)
    assert gpath.read_bytes() == state.encode()
    assert load_global(gpath, spec).hash() == state.hash() == stream_global(file_chunks(gpath, 4096), spec)[1]

    gen = torch.Generator().manual_seed(1)
    payload = quantize({n: torch.randn(p.shape, generator=gen) * 1e-3 for n, p in state.params.items()},
                       spec.quantization)
    dpath = tmp_path / "delta.safetensors"
    save_delta(dpath, payload, spec.quantization)
    assert all(torch.equal(load_delta(dpath, spec)[k], payload[k]) for k in payload)
    assert stream_delta(file_chunks(dpath, 1000), spec)[1] == delta_hash(payload)


def test_a_write_that_fails_part_way_leaves_the_old_file_and_no_temporary(tmp_path) -> None:
    path = tmp_path / "t.safetensors"
    save_tensors(path, {"a": torch.ones(3)}, FORMAT)
    old = path.read_bytes()
    # A meta tensor has a dtype and shape (so the header is written) but no data to copy out.
    with pytest.raises(NotImplementedError):
        save_tensors(path, {"a": torch.ones(3), "b": torch.empty(1000, device="meta")}, FORMAT)
    assert path.read_bytes() == old and not list(tmp_path.glob(".*.tmp"))


def test_unsupported_tensors_are_refused_before_anything_is_written(tmp_path) -> None:
    path = tmp_path / "t.safetensors"
    with pytest.raises(ValueError, match="no safetensors name"):
        save_tensors(path, {"c": torch.zeros(2, dtype=torch.complex64)}, FORMAT)
    with pytest.raises(ValueError, match="__metadata__"):
        save_tensors(path, {"__metadata__": torch.zeros(2)}, FORMAT)
    assert not path.exists() and not list(tmp_path.glob(".*.tmp"))


def test_writing_builds_no_copy_of_the_file_in_python_memory(tmp_path) -> None:
    tensors = {f"w{i}": torch.randn(1 << 20) for i in range(16)}  # 64 MiB of float32
    save_tensors(tmp_path / "warm.safetensors", {"x": torch.ones(1)}, FORMAT)  # imports and first-call costs
    tracemalloc.start()
    try:
        save_tensors(tmp_path / "t.safetensors", tensors, FORMAT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated while writing 64 MiB"  # encode_tensors peaks above 64 MiB
    assert (tmp_path / "t.safetensors").read_bytes() == encode_tensors(tensors, FORMAT)


def test_two_threads_writing_one_path_each_leave_a_whole_file(tmp_path) -> None:
    # A warm fetch and a tick's fetch of the same state may write one path at once: each writes its
    # own temporary file, so neither fails on the other's rename and the file ends whole.
    import threading

    from trainer.tensorfile import atomic_file

    path = tmp_path / "state.bin"
    inside = threading.Barrier(2, timeout=10)
    errors: list[BaseException] = []

    def write(byte: bytes) -> None:
        try:
            with atomic_file(path) as f:
                f.write(byte * 1000)
                inside.wait()  # both are between open and rename
                f.write(byte * 1000)
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(b,)) for b in (b"a", b"b")]
    for w in writers:
        w.start()
    for w in writers:
        w.join(20)
    assert not errors
    assert path.read_bytes() in (b"a" * 2000, b"b" * 2000)
    assert not list(tmp_path.glob(".*.tmp"))
