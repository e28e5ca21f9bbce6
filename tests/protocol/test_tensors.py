"""Tensor digests: equal for equal tensors whatever their layout; any change of name, dtype, shape or value
changes them; the chunked formula holds whatever the threads or the pieces the bytes arrive in."""

import pytest
import torch

from protocol.rules.hashing import Tag
from protocol.tensors.digest import CHUNK_BYTES, DTYPE_NAMES, DigestStream, tensor_bytes, tensors_digest


def test_layout_and_insertion_order_do_not_matter() -> None:
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    d1 = tensors_digest(Tag.CHECKPOINT, {"a": a, "b": torch.zeros(2)})
    d2 = tensors_digest(Tag.CHECKPOINT, {"b": torch.zeros(2), "a": a.t().contiguous().t()})
    assert d1 == d2


@pytest.mark.parametrize("other", [
    {"a": torch.arange(12, dtype=torch.float32).reshape(4, 3), "b": torch.zeros(2)},   # shape
    {"a": torch.arange(12, dtype=torch.float64).reshape(3, 4), "b": torch.zeros(2)},   # dtype
    {"c": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.zeros(2)},   # name
    {"a": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.tensor([0.0, -0.0])},  # bits
])
def test_any_change_changes_the_digest(other) -> None:
    base = {"a": torch.arange(12, dtype=torch.float32).reshape(3, 4), "b": torch.zeros(2)}
    assert tensors_digest(Tag.CHECKPOINT, base) != tensors_digest(Tag.CHECKPOINT, other)


def test_domain_separation_and_scalars() -> None:
    t = {"x": torch.tensor(1.5)}
    assert tensors_digest(Tag.MODEL, t) != tensors_digest(Tag.CHECKPOINT, t)
    with pytest.raises(ValueError, match="canonical name"):
        tensors_digest(Tag.MODEL, {"z": torch.zeros(1, dtype=torch.complex64)})


def _by_hand(tag: str, tensors: dict[str, torch.Tensor]) -> bytes:
    # The formula of protocol.tensors.digest, written out with hashlib alone.
    import hashlib

    from protocol.rules.hashing import tagged_hasher

    h = tagged_hasher(tag)
    h.update(len(tensors).to_bytes(4, "big"))
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        dtype = DTYPE_NAMES[t.dtype].encode()
        h.update(len(name).to_bytes(4, "big") + name.encode() + len(dtype).to_bytes(4, "big") + dtype)
        h.update(t.dim().to_bytes(4, "big") + b"".join(d.to_bytes(8, "big") for d in t.shape))
        h.update(len(data).to_bytes(8, "big"))
        for i in range(0, len(data), CHUNK_BYTES):
            h.update(hashlib.sha256(data[i:i + CHUNK_BYTES]).digest())
    return h.digest()


SETS = [
    {"x": torch.tensor(1.5)},
    {"w": torch.arange(CHUNK_BYTES // 4, dtype=torch.float32), "e": torch.zeros(0)},     # exactly one chunk
    {"w": torch.arange(CHUNK_BYTES // 4 + 1, dtype=torch.float32), "b": torch.ones(3, dtype=torch.int64)},
    {"big": torch.arange(700_000, dtype=torch.float64).reshape(7, 100_000), "m": torch.ones(2, 2, dtype=torch.bool)},
]


@pytest.mark.parametrize("tensors", SETS)
def test_the_digest_is_its_formula_on_any_threads_and_in_any_pieces(tensors) -> None:
    expected = _by_hand(Tag.CHECKPOINT, tensors)
    assert tensors_digest(Tag.CHECKPOINT, tensors) == expected
    assert tensors_digest(Tag.CHECKPOINT, tensors, threads=3) == expected
    for piece in (1, 4095, CHUNK_BYTES - 1, CHUNK_BYTES + 7):
        stream = DigestStream(Tag.CHECKPOINT, len(tensors))
        for name in sorted(tensors):
            data = bytes(tensor_bytes(tensors[name]))
            stream.begin(name, tensors[name].dtype, tuple(tensors[name].shape), len(data))
            step = piece if len(data) < 50_000 or piece > 1000 else 50_000  # 1-byte pieces only for small tensors
            for i in range(0, len(data), step):
                stream.update(data[i:i + step])
        assert stream.digest() == expected, piece


def test_a_digest_stream_refuses_what_does_not_fit() -> None:
    stream = DigestStream(Tag.DELTA, 1)
    with pytest.raises(ValueError, match="not complete"):
        stream.digest()
    stream.begin("a", torch.float32, (2,), 8)
    with pytest.raises(ValueError, match="remain"):
        stream.update(b"\x00" * 9)
    with pytest.raises(ValueError, match="still has"):
        stream.begin("b", torch.float32, (1,), 4)
    stream.update(b"\x00" * 8)
    with pytest.raises(ValueError, match="covers 1 tensors"):
        stream.begin("b", torch.float32, (1,), 4)
    assert stream.digest() == tensors_digest(Tag.DELTA, {"a": torch.zeros(2)})
