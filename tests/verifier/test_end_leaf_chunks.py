"""The end leaf compared by chunk digests (issue 30): a replay reads none of it when it reproduces it
bit for bit, only the differing chunks otherwise, and reaches the verdict, distance and evidence it
reaches reading the whole leaf; served digests that are not the committed leaf's are never used."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from verifier_env import Served, commit_leaves, leaves_of

from node.prefetch import EndChunks, Spool, fetch_challenge, fetch_end_chunks
from trainer.artifacts import ArtifactSource, ArtifactUnavailable
from trainer.checkpoint import FORMAT, checkpoint_layout
from trainer.leaf_digests import (
    LeafDigests,
    assemble,
    check_leaf_digests,
    digests_json_bytes,
    encoded_chunks,
    file_chunk,
    file_leaf_digests,
    leaf_digests,
)
from trainer.tensorfile import encode_tensors
from verifier.adversaries.base import clone_state
from verifier.replay import ChunksWanted, VerdictReport, check_challenge, trusted_end_digests

DATA: list = []  # the session's dataset (set by the module's fixture)


@pytest.fixture(scope="module", autouse=True)
def _data(dataset) -> None:
    DATA[:] = [dataset]


class Via(ArtifactSource):
    """``inner`` with its chunk digests and chunks rewritten or refused (``None``: refused)."""

    def __init__(self, inner: ArtifactSource, digests: Callable[[LeafDigests], object] | None = lambda d: d,
                 chunk: Callable[[bytes], object] = lambda b: b, checkpoint: bool = True) -> None:
        self.inner, self.rewrite, self.rechunk, self.serves_leaf = inner, digests, chunk, checkpoint
        self.chunks_read = 0
        self.leaves_read: list[int] = []

    def leaf_digests(self, epoch, leaf):
        if self.rewrite is None:
            raise ArtifactUnavailable("no digests")
        return self.rewrite(self.inner.leaf_digests(epoch, leaf))

    def leaf_chunk(self, epoch, leaf, tensor, chunk):
        self.chunks_read += 1
        return self.rechunk(self.inner.leaf_chunk(epoch, leaf, tensor, chunk))

    def checkpoint(self, epoch, leaf):
        self.leaves_read.append(leaf)
        if not self.serves_leaf and leaf > 0:
            raise ArtifactUnavailable("withheld")
        return self.inner.checkpoint(epoch, leaf)

    def proof(self, epoch, leaf):
        return self.inner.proof(epoch, leaf)

    def delta(self, epoch):
        return self.inner.delta(epoch)

    def losses(self, epoch):
        return self.inner.losses(epoch)

    def global_state(self, model_hash):
        return self.inner.global_state(model_hash)


def _check(served: Served, segment: int, source: ArtifactSource) -> VerdictReport:
    return check_challenge(served.spec, DATA[0], served.challenge(segment), source, served.theta,
                           served.ctx.prev_epoch_seed)


def _same(a: VerdictReport, b: VerdictReport) -> None:
    assert a.verdict == b.verdict  # outcome, distance and evidence
    assert a.check == b.check


@pytest.fixture(scope="module")
def perturbed(honest, tmp_path_factory) -> dict[str, Served]:
    """The honest epoch with leaf 1 changed: in one coordinate of three tensors (far within τ), and
    a whole tensor 1 % off (beyond τ), each committed as the host's."""
    leaves = leaves_of(honest)
    names = sorted(leaves[1].state.params)
    out = {}
    for kind in ("within", "beyond"):
        params = {n: t.clone() for n, t in leaves[1].state.params.items()}
        if kind == "within":
            for n in names[:3]:
                params[n].view(-1)[0] += params[n].view(-1)[0].abs() * 1e-6 + 1e-9
        else:
            params[names[0]] *= 1.01
        changed = list(leaves)
        changed[1] = type(leaves[1])(clone_state(leaves[1].state, params=params), leaves[1].losses,
                                     leaves[1].micro_batches, leaves[1].residual)
        out[kind] = commit_leaves(honest, changed, tmp_path_factory.mktemp(kind))
    return out


def test_an_honest_end_leaf_is_not_read_at_all(honest) -> None:
    for segment in (0, honest.spec.train.segments - 1):
        chunked, whole = Via(honest.source), Via(honest.source, digests=None)
        a, b = _check(honest, segment, chunked), _check(honest, segment, whole)
        _same(a, b)
        assert a.outcome == "pass"
        assert a.transfer["end_leaf"] == "own" and chunked.chunks_read == 0
        assert segment + 1 not in chunked.leaves_read and segment + 1 in whole.leaves_read
        assert b.transfer["end_leaf"] == "whole"


@pytest.mark.parametrize("kind, outcome", [("within", "pass"), ("beyond", "fail")])
def test_differing_chunks_are_fetched_and_judged_as_the_whole_leaf(perturbed, kind, outcome) -> None:
    served = perturbed[kind]
    chunked, whole = Via(served.source), Via(served.source, digests=None)
    a, b = _check(served, 0, chunked), _check(served, 0, whole)
    _same(a, b)
    assert a.outcome == outcome
    assert a.measurements["distance"] == b.measurements["distance"]
    assert a.transfer["end_leaf"] == "chunks" and 1 not in chunked.leaves_read
    assert a.transfer["end_leaf_chunks_fetched"] == chunked.chunks_read == (3 if kind == "within" else 1)


def _flip_one(d: LeafDigests) -> dict:
    doc = d.model_dump()
    first = doc["tensors"][0]["chunks"]
    first[0] = ("0" if first[0][0] != "0" else "1") + first[0][1:]
    return doc


def _short(d: LeafDigests) -> dict:
    doc = d.model_dump()
    doc["tensors"][-1]["chunks"].append("00" * 32)
    return doc


def _reshaped(d: LeafDigests) -> dict:
    doc = d.model_dump()
    doc["tensors"][-1]["shape"] = [*doc["tensors"][-1]["shape"], 1]
    return doc


@pytest.mark.parametrize("lie", [_flip_one, _short, _reshaped, lambda d: b"not json", lambda d: {"tensors": 7}])
@pytest.mark.parametrize("leaf_served", [True, False])
def test_a_lying_digest_list_is_refused_and_the_leaf_judged_as_today(perturbed, lie, leaf_served) -> None:
    served = perturbed["within"]
    lying, whole = Via(served.source, digests=lie, checkpoint=leaf_served), Via(served.source, digests=None,
                                                                                  checkpoint=leaf_served)
    a, b = _check(served, 0, lying), _check(served, 0, whole)
    _same(a, b)
    assert a.outcome == ("pass" if leaf_served else "unavailable")
    assert lying.chunks_read == 0 and str(a.transfer["end_leaf_digests"]).startswith("refused")


def test_a_wrong_chunk_sends_the_reader_to_the_whole_leaf(perturbed) -> None:
    served = perturbed["within"]
    wrong = Via(served.source, chunk=lambda b: bytes(len(b)))
    a, b = _check(served, 0, wrong), _check(served, 0, Via(served.source, digests=None))
    _same(a, b)
    assert a.outcome == "pass" and a.transfer["end_leaf"] == "whole" and 1 in wrong.leaves_read


def test_digest_lists_of_files_and_tensors_agree_and_are_checked(spec, honest) -> None:
    leaf = leaves_of(honest)[2]
    path = honest.source.file("checkpoint", 0, 2)
    assert path is not None
    digests = file_leaf_digests(path)
    assert digests == leaf_digests(leaf.tensors())
    layout = checkpoint_layout(spec, 2)
    _, leaf_hash = check_leaf_digests(digests.model_dump(), layout)
    assert leaf_hash == leaf.leaf_hash() == honest.result.leaf_hashes[2]
    assert len(digests.model_dump_json()) <= digests_json_bytes(layout)
    with pytest.raises(ValueError, match="losses"):
        check_leaf_digests(digests.model_dump(), checkpoint_layout(spec, 0))  # leaf 0 records no losses
    names = [t.name for t in digests.tensors]
    i = names.index("step")
    assert file_chunk(path, i, 0) == torch.tensor(8, dtype=torch.int64).numpy().tobytes()
    with pytest.raises(IndexError):
        file_chunk(path, i, 1)
    # Assembled from nothing, every chunk is fetched and checked against its digest.
    tensors, count, nbytes = assemble({}, digests, lambda t, c: file_chunk(path, t, c))
    assert count == sum(len(t.chunks) for t in digests.tensors)
    assert nbytes == sum(x.numel() * x.element_size() for x in tensors.values())
    assert all(torch.equal(tensors[n], leaf.tensors()[n]) for n in tensors)
    with pytest.raises(ValueError, match="digest"):
        assemble({}, digests, lambda t, c: bytes(len(file_chunk(path, t, c))))
    # What the replay checks is encoded as the host stores it: the same bytes, in 1 MiB pieces.
    assert b"".join(encoded_chunks(tensors, FORMAT)) == encode_tensors(tensors, FORMAT) == path.read_bytes()


# -- the daemons' prefetch (node.prefetch): the digest list ahead, the differing chunks on a fetch --
# -- thread once the replay named them, then the check from the same replay                      --


def _ahead(served: Served, source: ArtifactSource, directory) -> Spool:
    challenge = served.challenge(0)
    return fetch_challenge(source, challenge, directory, None,
                           digests=lambda d, p: trusted_end_digests(served.spec.for_epoch(0), challenge, d, p))


def _deferred(served: Served, spool: Spool, counted: Via | None = None) -> VerdictReport:
    """A spool checked as a daemon checks it: the replay stops at the end leaf's differing chunks
    (reading none), they are fetched (``fetch_end_chunks``, a fetch thread's job), and the check goes
    on from the same replay, spilled to disk and read back."""
    args = (served.spec, DATA[0], spool.challenge, spool, served.theta, served.ctx.prev_epoch_seed)
    try:
        return check_challenge(*args, defer_chunks=True)
    except ChunksWanted as wanted:
        assert counted is None or counted.chunks_read == 0  # the replay's thread read none of them
        assert spool.fallback is not None
        spool.end = fetch_end_chunks(spool.fallback, spool.challenge, wanted.digests, wanted.wanted,
                                     spool.directory / "end", None)
        replay = wanted.replayed.spill(spool.directory / "replayed.pt").load()
        spool.fallback = None  # the replay asks the host for nothing more
        return check_challenge(*args, replayed=replay)


@pytest.mark.parametrize("kind", ["honest", "within"])
def test_the_prefetch_fetches_the_digest_list_not_the_end_leaf(honest, perturbed, kind, tmp_path) -> None:
    served = honest if kind == "honest" else perturbed[kind]
    via = Via(served.source)
    spool = _ahead(served, via, tmp_path)
    assert ("checkpoint", 1) not in spool.items and ("digests", 1) in spool.items and spool.failure is None
    assert via.leaves_read == [0] and via.chunks_read == 0
    a, b = _deferred(served, spool, via), _check(served, 0, Via(served.source, digests=None))
    _same(a, b)
    assert a.outcome == "pass" and 1 not in via.leaves_read  # the differing chunks only, read after the replay
    assert a.transfer["end_leaf"] == ("own" if kind == "honest" else "chunks")
    assert via.chunks_read == (0 if kind == "honest" else 3)


@pytest.mark.parametrize("lie", [_flip_one, _reshaped, None])
def test_a_digest_list_refused_ahead_fetches_the_end_leaf_whole_ahead(perturbed, lie, tmp_path) -> None:
    served = perturbed["within"]
    spool = _ahead(served, Via(served.source, digests=lie), tmp_path)
    assert ("checkpoint", 1) in spool.items and ("digests", 1) not in spool.items and spool.failure is None
    assert spool.digests_refused is not None
    assert ("refused" if lie else "not served") in spool.digests_refused
    spool.fallback = None  # the replay asks the host for nothing: all it reads was fetched ahead
    a, b = _check(served, 0, spool), _check(served, 0, Via(served.source, digests=None))
    _same(a, b)
    assert a.outcome == "pass" and a.transfer["end_leaf_digests"].startswith("not served")


def test_a_wrong_chunk_at_replay_reads_the_end_leaf_whole_from_the_host(perturbed, tmp_path) -> None:
    served = perturbed["within"]
    wrong = Via(served.source, chunk=lambda b: bytes(len(b)))
    spool = _ahead(served, wrong, tmp_path)
    a, b = _deferred(served, spool), _check(served, 0, Via(served.source, digests=None))
    _same(a, b)
    assert a.outcome == "pass" and a.transfer["end_leaf"] == "whole" and wrong.leaves_read == [0, 1]
    assert wrong.chunks_read == 1  # the first one did not check: the rest were never asked for
    spool = _ahead(served, Via(served.source, chunk=lambda b: bytes(len(b)), checkpoint=False), tmp_path)
    assert _deferred(served, spool).outcome == "unavailable"  # nor the leaf whole: as inline


@pytest.mark.parametrize("kind", ["within", "beyond"])
def test_chunks_fetched_after_the_replay_give_the_inline_verdict(perturbed, kind, tmp_path) -> None:
    served = perturbed[kind]
    via = Via(served.source)
    spool = _ahead(served, via, tmp_path)
    a, b = _deferred(served, spool, via), _check(served, 0, Via(served.source))
    _same(a, b)
    def timeless(m: dict) -> dict:
        return {k: v for k, v in m.items() if not k.startswith("seconds")}

    assert a.reason == b.reason and timeless(a.measurements) == timeless(b.measurements)
    assert a.transfer == b.transfer and a.outcome == ("pass" if kind == "within" else "fail")
    cut = _ahead(served, Via(served.source), tmp_path)  # chunks never delivered (EndChunks.cut): unserved
    with pytest.raises(ChunksWanted) as stopped:
        check_challenge(served.spec, DATA[0], cut.challenge, cut, served.theta, served.ctx.prev_epoch_seed,
                        defer_chunks=True)
    cut.end = EndChunks.cut(cut.challenge, "were not delivered before the give-up height")
    late = check_challenge(served.spec, DATA[0], cut.challenge, cut, served.theta, served.ctx.prev_epoch_seed,
                           replayed=stopped.value.replayed)
    assert late.outcome == "unavailable" and "give-up height" in late.reason


def test_chunks_past_their_deadline_are_not_asked_for_and_the_leaf_is_unserved(perturbed, tmp_path) -> None:
    served = perturbed["within"]
    via = Via(served.source)
    spool = _ahead(served, via, tmp_path)
    with pytest.raises(ChunksWanted) as stopped:
        check_challenge(served.spec, DATA[0], spool.challenge, spool, served.theta, served.ctx.prev_epoch_seed,
                        defer_chunks=True)
    wanted = stopped.value
    assert len(wanted.wanted) == 3 and via.chunks_read == 0  # the replay named them, read none
    spool.end = fetch_end_chunks(via, spool.challenge, wanted.digests, wanted.wanted, tmp_path / "end",
                                 deadline=0.0)  # long passed: nothing is asked, not even the leaf whole
    assert via.chunks_read == 0 and via.leaves_read == [0] and spool.end.failure is not None
    late = check_challenge(served.spec, DATA[0], spool.challenge, spool, served.theta, served.ctx.prev_epoch_seed,
                           replayed=wanted.replayed)
    assert late.outcome == "unavailable" and "budget" in late.reason
