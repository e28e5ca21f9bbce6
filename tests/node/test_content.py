"""The one content-addressed fetch (``node.content``): the copy on disk first, then holders in turn,
likeliest first and each once; bytes verified as they arrive and kept only once verified; θ_0 built
only for the run's initial model hash on chain (``node.global_store``)."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest

from node.content import WrongContent, fetch, holders, intake
from node.global_store import GlobalStateUnavailable, GlobalStore
from trainer.artifacts import ArtifactUnavailable
from trainer.outer import GlobalState
from trainer.presets import tiny
from trainer.tensorfile import TensorFileError


def verify_sha(digest: str):
    def verify(chunks, who):
        data = b"".join(bytes(c) for c in chunks)  # a test's blob is small
        if data.startswith(b"bad"):
            raise TensorFileError("malformed")
        if hashlib.sha256(data).hexdigest() != digest:
            raise WrongContent("served another blob")
        return data
    return verify


def test_fetch_keeps_the_first_verified_answer_and_reads_the_kept_copy_first(tmp_path) -> None:
    blob = b"the blob" * 1000
    digest = hashlib.sha256(blob).hexdigest()
    path = tmp_path / "blobs" / digest
    asked = []

    def answer(who, data):
        def read():
            asked.append(who)
            if data is None:
                raise ArtifactUnavailable("refused")
            return [data[:100], data[100:]]
        return who, read

    answers = [answer("a", None), answer("b", b"bad bytes"), answer("c", b"other"),
               answer("d", blob), answer("e", blob)]
    assert fetch(path, answers, verify_sha(digest), "the blob") == blob
    assert asked == ["a", "b", "c", "d"] and path.read_bytes() == blob  # later holders are never asked
    assert [p.name for p in path.parent.iterdir()] == [digest]  # no partial file of a refused answer
    assert fetch(path, [answer("f", blob)], verify_sha(digest), "the blob") == blob and asked[-1] == "d"
    path.write_bytes(b"damaged")  # a damaged copy on disk is fetched again
    assert fetch(path, [answer("g", blob)], verify_sha(digest), "the blob") == blob and asked[-1] == "g"
    path.unlink()
    with pytest.raises(ArtifactUnavailable, match=r"no holder served the blob \(a: refused; c: served another"):
        fetch(path, [answer("a", None), answer("c", b"other")], verify_sha(digest), "the blob")
    assert not path.exists()


def test_an_intake_keeps_only_a_stream_read_to_its_end_and_kept(tmp_path) -> None:
    path = tmp_path / "x"
    with intake(path) as box:
        assert list(box.tee([b"ab", b"cd"])) == [b"ab", b"cd"]
    assert not path.exists()  # never kept
    with intake(path) as box:
        next(box.tee([b"ab", b"cd"]))
        box.keep()
    assert not path.exists()  # kept, but read part-way only
    with pytest.raises(RuntimeError), intake(path) as box:
        list(box.tee([b"ab"]))
        box.keep()
        raise RuntimeError
    assert not path.exists() and not any(tmp_path.iterdir())
    with intake(path) as box:
        list(box.tee([b"ab", b"cd"]))
        box.keep()
    assert path.read_bytes() == b"abcd"


class _Members:
    def __init__(self) -> None:
        self.read: list[str] = []

    def members(self, role):
        self.read.append(role)
        return [SimpleNamespace(address=f"{role}-{i}", endpoint=f"http://{role}-{i}") for i in range(2)]


def test_holders_come_likeliest_first_each_once_and_members_only_when_reached() -> None:
    ledger = _Members()
    found = holders(ledger, {"host-0"}, [("host-1", "http://host-1"), ("x", "http://x"), ("x", "http://x")])
    assert [next(found), next(found)] == [("host-1", "http://host-1"), ("x", "http://x")]
    assert ledger.read == []  # the chain is read only once the likeliest holders are exhausted
    assert [a for a, _ in found] == ["validator-0", "validator-1"]
    assert ledger.read == ["host", "validator"]
    assert [a for a, _ in holders(_Members(), (), [], ("validator",))] == ["validator-0", "validator-1"]


class _Chain(_Members):
    def __init__(self, initial: str) -> None:
        super().__init__()
        self.initial = initial

    def config(self):
        return SimpleNamespace(initial_model_hash=self.initial)

    def aggregation_inputs(self, epoch):
        return []


def test_theta_0_is_built_only_for_the_initial_hash_on_chain(tmp_path) -> None:
    spec = tiny("content")
    theta0 = GlobalState.initial(spec).hash().hex()
    store = GlobalStore(tmp_path / "a", spec, _Chain(theta0), lambda e: pytest.fail("no peer is asked"), "me")
    assert store.get(theta0).hash().hex() == theta0 and store.path(theta0).exists()
    # Another run's initial model: θ_0 of this spec is not what the chain names, so it is fetched.
    other = _Chain("ab" * 32)
    store = GlobalStore(tmp_path / "b", spec, other, lambda e: ArtifactUnavailableSource(), "me")
    with pytest.raises(GlobalStateUnavailable, match="no holder served global state"):
        store.get(theta0)
    assert other.read == ["host", "validator"] and not store.path(theta0).exists()


class ArtifactUnavailableSource:
    def global_state_chunks(self, model_hash):
        raise ArtifactUnavailable("not held")
