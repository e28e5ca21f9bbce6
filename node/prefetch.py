"""A validator's challenge artifacts fetched ahead, one host per thread, under a time budget.

A validator replays on one thread (one stepper, the CPU), but what it replays comes from hosts,
and a host can be slow on purpose: answering ``200, Content-Length 60000`` and then a byte every
5 s holds each request until the client's deadline. Fetched inline, in challenge order, one such
host spent the whole verify window of every validator that sat on it (issue 29). So a patient
validator (``node.validator``) fetches each host's challenged artifacts in a bounded pool of
threads, one job per host (so a host serves it one request at a time), each under a budget,
into a :class:`Spool` — files on disk for leaves and Δ (a large model's leaf is never held in
memory), the small JSON answers in memory — and replays a challenge only once its spool is
complete. A slow host then holds one fetch thread, never the replay thread or another host.

The end leaf is not fetched ahead when its chunk digests are (``digests``): the list is checked
with the leaf's proof as the replay checks it, and the replay then needs only the chunks its own
end leaf does not reproduce (none when bitwise; ``trainer.leaf_digests``); a list not served or
not the committed leaf's is dropped and the leaf fetched whole ahead. Those chunks are known only
once the replay ran: it stops there (``verifier.replay.ChunksWanted``), a fetch thread fetches them
(:func:`fetch_end_chunks`, the same budget, to disk; the end leaf whole too if one of them does not
check, as the replay would read it next) into the spool (:attr:`Spool.end`), and the check goes on
from the same replay on a later tick. So nothing of a host is read on the replay's thread but
leaf 0, which the replay reads only when its proof does not check.

A :class:`Spool` is an :class:`~trainer.artifacts.ArtifactSource`: the replay
(``verifier.replay.check_challenge``) reads it exactly as it would read the host, in the same
order, with every failure kept where it happened (a body that broke after N bytes hands over
those N bytes and then raises), so its verdicts are the ones an inline read would reach.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from protocol.rules.merkle import MerkleProof
from protocol.views import Challenge
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, UntrustedJson
from trainer.leaf_digests import LeafDigests, check_chunk

CHUNK = 1 << 20


class BudgetSpent(ArtifactUnavailable):
    """A host did not deliver within the time the validator gave it (it is tried again later)."""


@dataclass
class _Item:
    """One answer of a host as it was fetched: bytes in ``path`` (streams) or ``value`` (JSON),
    then ``odd`` (a piece that was not bytes, handed on as served) and ``error`` (raised last)."""

    path: Path | None = None
    value: object = None
    odd: object | None = None
    error: Exception | None = None


@dataclass
class EndChunks:
    """The end leaf's chunks that a replay did not reproduce, as a host (or seat) served them
    (:func:`fetch_end_chunks`): each on disk (``chunks``, in the replay's order, up to the first one
    that did not check), and the leaf whole (``whole``) when one did not.

    Attributes:
        challenge: the challenge.
        leaf: the end leaf's index.
        seconds: how long fetching took.
        nbytes: bytes fetched.
    """

    challenge: Challenge
    leaf: int
    chunks: dict[tuple[int, int], _Item] = field(default_factory=dict)
    whole: _Item | None = None
    seconds: float = 0.0
    nbytes: int = 0
    missing: str = "not fetched"
    """Why a chunk not in ``chunks`` is not there."""

    @property
    def failure(self) -> str | None:
        """Why the leaf whole was not served, if it was needed and not."""
        return str(self.whole.error) if self.whole is not None and self.whole.error is not None else None

    @classmethod
    def cut(cls, challenge: Challenge, why: str) -> EndChunks:
        """Nothing fetched, with ``why`` (the validator gave up on the host before they arrived)."""
        return cls(challenge, challenge.segment + 1, missing=f"the end leaf's chunks {why}",
                   whole=_Item(error=BudgetSpent(f"leaf {challenge.segment + 1} {why}")))


@dataclass
class Spool(ArtifactSource):
    """One challenge's artifacts as a host served them (see the module docstring).

    Attributes:
        challenge: the challenge.
        directory: where its streamed answers are (removed by :meth:`discard`).
        seconds: how long fetching took.
        nbytes: bytes fetched.
    """

    challenge: Challenge
    directory: Path
    items: dict[tuple[str, int], _Item] = field(default_factory=dict)
    seconds: float = 0.0
    nbytes: int = 0
    fallback: ArtifactSource | None = None
    """Where an answer not fetched ahead is read from (the host itself): a replay that asks for
    something the plan did not foresee (leaf 0, read only when its proof does not check) still
    gets it, as it would inline."""
    origin: str = "host"
    """Who served it: ``host``, or the address of the seat whose kept leaves it holds
    (``node.leaf_holding``: seats in turn)."""
    digests_refused: str | None = None
    """Why the end leaf's chunk digests were not kept (not served, or not the committed leaf's):
    its leaf was fetched whole instead."""
    end: EndChunks | None = None
    """The end leaf's differing chunks, once fetched (:func:`fetch_end_chunks`): what the replay
    reads of the end leaf then (never the host)."""

    @property
    def failure(self) -> str | None:
        """Why a host's answer is missing or broke, if one is (the first such)."""
        for item in self.items.values():
            if item.error is not None:
                return str(item.error)
        return None

    @property
    def spent(self) -> bool:
        """Whether the fetch was cut by its budget."""
        return any(isinstance(item.error, BudgetSpent) for item in self.items.values())

    def discard(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)

    def _item(self, kind: str, index: int) -> _Item | None:
        item = self.items.get((kind, index))
        if item is None and kind == "checkpoint" and self.end is not None and index == self.end.leaf:
            item = self.end.whole  # read whole after a chunk that did not check: fetched with the chunks
            if item is None:
                raise ArtifactUnavailable(f"leaf {index} was not fetched whole (its chunks checked)")
        if item is None and self.fallback is None:
            raise ArtifactUnavailable(f"{kind} {index} was not fetched")
        return item

    def _live(self, kind: str, index: int) -> object:
        assert self.fallback is not None
        e = self.challenge.epoch
        calls: dict[str, Callable[[], object]] = {
            "checkpoint": lambda: self.fallback.checkpoint_chunks(e, index),  # type: ignore[union-attr]
            "proof": lambda: self.fallback.proof(e, index),  # type: ignore[union-attr]
            "losses": lambda: self.fallback.losses(e),  # type: ignore[union-attr]
            "delta": lambda: self.fallback.delta_chunks(e),  # type: ignore[union-attr]
        }
        return calls[kind]()

    def _stream(self, kind: str, index: int) -> Iterator[bytes | object]:
        item = self._item(kind, index)
        if item is None:
            yield from self._live(kind, index)  # type: ignore[misc]
            return
        if item.path is not None and item.path.exists():
            yield from _file_chunks(item.path)
        if item.odd is not None:
            yield item.odd
        if item.error is not None:
            raise item.error

    def _value(self, kind: str, index: int) -> object:
        item = self._item(kind, index)
        if item is None:
            return self._live(kind, index)
        if item.error is not None:
            raise item.error
        return item.value

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return b"".join(_bytes(self._stream("checkpoint", leaf)))

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes | object]:
        return self._stream("checkpoint", leaf)

    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        return self._value("proof", leaf)  # type: ignore[return-value]

    def leaf_digests(self, epoch: int, leaf: int) -> LeafDigests | UntrustedJson:
        # Only the digests fetched ahead and checked: never asked of the host on the replay's thread.
        item = self.items.get(("digests", leaf))
        if item is None:
            raise ArtifactUnavailable(self.digests_refused or f"no chunk digests of leaf {leaf} fetched ahead")
        return item.value  # type: ignore[return-value]

    def leaf_chunk(self, epoch: int, leaf: int, tensor: int, chunk: int) -> bytes:
        # Only the chunks fetched on a fetch thread (:attr:`end`): never asked of the host here.
        if self.end is None or leaf != self.end.leaf:
            raise ArtifactUnavailable(f"chunks of leaf {leaf} are not fetched ahead")
        item = self.end.chunks.get((tensor, chunk))
        if item is None:
            raise ArtifactUnavailable(f"chunk {chunk} of tensor {tensor}: {self.end.missing}")
        if item.error is not None:
            raise item.error
        if item.odd is not None:
            return item.odd  # type: ignore[return-value]  # handed on as served: the replay refuses it
        assert item.path is not None
        return item.path.read_bytes()

    def delta(self, epoch: int) -> bytes:
        return b"".join(_bytes(self._stream("delta", 0)))

    def delta_chunks(self, epoch: int) -> Iterable[bytes | object]:
        return self._stream("delta", 0)

    def losses(self, epoch: int) -> list[int] | UntrustedJson:
        return self._value("losses", 0)  # type: ignore[return-value]

    def global_state(self, model_hash: str) -> bytes:
        raise ArtifactUnavailable("a challenge's spool holds no global state")


def _bytes(pieces: Iterable[object]) -> Iterator[bytes]:
    for piece in pieces:
        if not isinstance(piece, (bytes, bytearray, memoryview)):
            raise ArtifactUnavailable(f"served a {type(piece).__name__}, not bytes")
        yield bytes(piece)


def fetch_challenge(source: ArtifactSource, challenge: Challenge, directory: Path, deadline: float | None,
                    stop: Callable[[], bool] = lambda: False, whole: bool = False,
                    digests: Callable[[object, MerkleProof | UntrustedJson], object] | None = None) -> Spool:
    """Fetch what replaying ``challenge`` reads, in the order it reads it, into a :class:`Spool`.

    With ``digests``, the end leaf is not fetched: its chunk digest list is, checked with its proof
    by ``digests`` (``verifier.replay.trusted_end_digests``: of the leaf's layout and under the
    committed root, else it raises), and the replay reads from the host only the chunks it does not
    reproduce (none when bitwise), as a replay without the spool does. A list not served, or not
    the committed leaf's, is dropped and the end leaf fetched whole, as without ``digests``.

    Args:
        source: the host's artifacts.
        challenge: the challenge.
        directory: where to write the streamed answers (created; emptied first).
        deadline: ``time.monotonic()`` by which the host must have delivered (None: the client's
            own deadlines only). Checked between chunks, so a drip is cut within one read of it;
            once it passed, what is left is not asked for (:class:`BudgetSpent`).
        stop: returns True to abandon the fetch (the daemon is stopping).
        whole: stop at the first answer missing (a holder's kept leaves are of use only whole).
        digests: check a served digest list and proof of the end leaf (raises ``ValueError``);
            None: the end leaf is fetched whole.
    """
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    spool = Spool(challenge, directory, fallback=source)
    e, g = challenge.epoch, challenge.segment
    last = g == challenge.segments - 1
    plan: list[tuple[str, int, Callable[[], object]]] = [
        ("checkpoint", g, lambda: source.checkpoint_chunks(e, g)),
        ("proof", g, lambda: source.proof(e, g)),
        *([("digests", g + 1, lambda: source.leaf_digests(e, g + 1))] if digests is not None else
          [("checkpoint", g + 1, lambda: source.checkpoint_chunks(e, g + 1))]),
        ("proof", g + 1, lambda: source.proof(e, g + 1)),
        *([("end", g + 1, lambda: source.checkpoint_chunks(e, g + 1))] if digests is not None else []),
        ("losses", 0, lambda: source.losses(e)),
        *([("delta", 0, lambda: source.delta_chunks(e))] if last else []),
        *([("proof", 0, lambda: source.proof(e, 0))] if last and g else []),
    ]
    t0 = time.monotonic()

    def out_of_time() -> str | None:
        if stop():
            return "the validator is stopping"
        if deadline is not None and time.monotonic() >= deadline:
            return f"its budget of {deadline - t0:.1f} s was spent after {spool.nbytes} bytes"
        return None

    for kind, index, call in plan:
        if kind == "end":  # the end leaf whole only when its digest list is not to be used
            if digests is not None and _trusted(spool, index, digests):
                continue
            kind = "checkpoint"
        item = spool.items[kind, index] = _Item()
        why = out_of_time()
        if why is not None:
            item.error = BudgetSpent(f"{kind} {index} not fetched: {why}")
            continue
        try:
            answer = call()
        except Exception as exc:  # noqa: BLE001 - kept, raised where the replay asks for it
            item.error = exc
        else:
            if kind in ("proof", "losses", "digests"):
                item.value = answer
            else:
                item.path = directory / f"{kind}-{index}"
                _drain(answer, item, spool, out_of_time)
        if whole and kind != "digests" and (item.error is not None or item.odd is not None):
            break  # (a digest list missing: the end leaf is fetched whole instead)
    spool.seconds = time.monotonic() - t0
    return spool


def fetch_end_chunks(source: ArtifactSource, challenge: Challenge, digests: LeafDigests,
                     wanted: list[tuple[int, int]], directory: Path, deadline: float | None,
                     stop: Callable[[], bool] = lambda: False) -> EndChunks:
    """Fetch the end leaf's chunks in ``wanted`` (``verifier.replay.ChunksWanted``: in the order the
    replay reads them) from ``source``, each to a file under ``directory``, checked against
    ``digests`` as the replay checks it (``trainer.leaf_digests.check_chunk``). At the first one
    refused, cut by the deadline or not the chunk its digest names, the rest are not asked for and
    the leaf is fetched whole instead, under the same deadline (the replay reads it whole then).
    What is kept is what was served, so the replay reaches the verdict it reaches reading inline;
    it holds at most one chunk in memory.

    Args:
        deadline: ``time.monotonic()`` by which the host must have delivered (as
            :func:`fetch_challenge`: checked between chunks).
        stop: returns True to abandon the fetch (the daemon is stopping).

    Raises:
        OSError: ``directory`` could not be written (this validator's disk, never the host's fault).
    """
    end = EndChunks(challenge, challenge.segment + 1)
    t0 = time.monotonic()
    directory.mkdir(exist_ok=True)  # in the spool's directory (none if the spool was discarded meanwhile)
    _fetch_end(source, end, digests, wanted, directory, deadline, stop, t0)
    end.seconds = time.monotonic() - t0
    return end


def _fetch_end(source: ArtifactSource, end: EndChunks, digests: LeafDigests, wanted: list[tuple[int, int]],
               directory: Path, deadline: float | None, stop: Callable[[], bool], t0: float) -> None:
    leaf, e = end.leaf, end.challenge.epoch

    def out_of_time() -> str | None:
        if stop():
            return "the validator is stopping"
        if deadline is not None and time.monotonic() >= deadline:
            return f"its budget of {deadline - t0:.1f} s was spent after {end.nbytes} bytes"
        return None

    for tensor, chunk in wanted:
        item = end.chunks[tensor, chunk] = _Item()
        why = out_of_time()
        if why is not None:
            item.error = BudgetSpent(f"chunk {chunk} of tensor {tensor} not fetched: {why}")
            break
        try:
            piece = source.leaf_chunk(e, leaf, tensor, chunk)
        except Exception as exc:  # noqa: BLE001 - kept, raised where the replay asks for it
            item.error = exc
            break
        if not isinstance(piece, (bytes, bytearray, memoryview)):
            item.odd = piece
            break
        item.path = directory / f"chunk-{tensor}-{chunk}"
        item.path.write_bytes(piece)
        end.nbytes += len(piece)
        try:
            check_chunk(digests, tensor, chunk, piece)
        except ValueError:
            break
    else:
        return
    # A chunk the replay will refuse: it reads the leaf whole next, so that is fetched too.
    whole = end.whole = _Item()
    why = out_of_time()
    if why is not None:
        whole.error = BudgetSpent(f"leaf {leaf} not fetched whole: {why}")
    else:
        try:
            answer = source.checkpoint_chunks(e, leaf)
        except Exception as exc:  # noqa: BLE001 - kept, raised where the replay asks for it
            whole.error = exc
        else:
            whole.path = directory / f"checkpoint-{leaf}"
            _drain(answer, whole, end, out_of_time)


def _trusted(spool: Spool, leaf: int, check: Callable[[object, MerkleProof | UntrustedJson], object]) -> bool:
    """Whether the spool's digest list of ``leaf`` passes ``check`` with the leaf's proof; if not,
    the list is dropped from the spool (the replay then reads the leaf whole) with why."""
    listed, proof = spool.items.get(("digests", leaf)), spool.items.get(("proof", leaf))
    why = None
    if listed is None or listed.error is not None:
        why = f"not served: {listed.error if listed is not None else 'not asked'}"
    elif proof is None or proof.error is not None:
        why = "its proof was not served"
    else:
        try:
            check(listed.value, proof.value)  # type: ignore[arg-type]
        except ValueError as exc:
            why = f"refused: {str(exc).splitlines()[0][:200]}"
    if why is None:
        return True
    spool.items.pop(("digests", leaf), None)
    spool.digests_refused = f"chunk digests of leaf {leaf} {why}"
    return False


def _drain(answer: object, item: _Item, spool: Spool | EndChunks, out_of_time: Callable[[], str | None]) -> None:
    """Write a streamed answer to ``item.path`` chunk by chunk, checking the budget between chunks."""
    assert item.path is not None
    if not isinstance(answer, Iterable) or isinstance(answer, (bytes, bytearray, memoryview)):
        item.odd = answer
        return
    it = iter(answer)
    try:
        with item.path.open("wb") as f:
            while True:
                why = out_of_time()
                if why is not None:
                    item.error = BudgetSpent(why)
                    return
                try:
                    piece = next(it)
                except StopIteration:
                    return
                except Exception as exc:  # noqa: BLE001 - kept, raised after the bytes before it
                    item.error = exc
                    return
                if not isinstance(piece, (bytes, bytearray, memoryview)):
                    item.odd = piece
                    return
                f.write(piece)
                spool.nbytes += len(piece)
    finally:
        close = getattr(it, "close", None)
        if callable(close):  # a remote body cut part-way: its connection closes now
            with contextlib.suppress(Exception):
                close()


class Reusing(ArtifactSource):
    """``inner`` (a holder's view), with what was read of it before handed over instead of asked
    for again: the proofs and losses in ``seen`` (kept by the caller for the epoch), the leaves in
    ``files`` (earlier spools of the same fetch job, whose files still exist). A host's challenges
    share its losses and their boundary leaves, and a holder serves each kept artifact to a member
    at most twice (``node.server.HELD_READS_PER_MEMBER``). :meth:`remember` a spool once complete."""

    def __init__(self, inner: ArtifactSource, seen: dict[tuple[str, int], object],
                 files: dict[int, Path] | None = None) -> None:
        self.inner, self.seen = inner, seen
        self.files: dict[int, Path] = {} if files is None else files

    def remember(self, spool: Spool) -> None:
        for (kind, index), item in spool.items.items():
            if item.error is not None or item.odd is not None:
                continue
            if kind == "checkpoint" and item.path is not None:
                self.files[index] = item.path
            elif kind in ("proof", "losses"):
                self.seen[kind, index] = item.value

    def _memo(self, kind: str, index: int, ask: Callable[[], object]) -> object:
        if (kind, index) in self.seen:
            return self.seen[kind, index]
        return ask()

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return b"".join(_bytes(self.checkpoint_chunks(epoch, leaf)))

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes | object]:
        path = self.files.get(leaf)
        if path is not None and path.exists():
            return _file_chunks(path)
        return self.inner.checkpoint_chunks(epoch, leaf)

    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        return self._memo("proof", leaf, lambda: self.inner.proof(epoch, leaf))  # type: ignore[return-value]

    def leaf_digests(self, epoch: int, leaf: int) -> LeafDigests | UntrustedJson:
        return self.inner.leaf_digests(epoch, leaf)

    def leaf_chunk(self, epoch: int, leaf: int, tensor: int, chunk: int) -> bytes:
        return self.inner.leaf_chunk(epoch, leaf, tensor, chunk)

    def losses(self, epoch: int) -> list[int] | UntrustedJson:
        return self._memo("losses", 0, lambda: self.inner.losses(epoch))  # type: ignore[return-value]

    def delta(self, epoch: int) -> bytes:
        return self.inner.delta(epoch)

    def delta_chunks(self, epoch: int) -> Iterable[bytes | object]:
        return self.inner.delta_chunks(epoch)

    def global_state(self, model_hash: str) -> bytes:
        return self.inner.global_state(model_hash)


def _file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            yield chunk


class Unreachable(ArtifactSource):
    """A host whose artifacts cannot be had (its endpoint is refused, or it did not deliver in time):
    every artifact is unavailable, with ``reason``."""

    def __init__(self, reason: str) -> None:
        self._reason = reason

    def _refuse(self, *_: object) -> NoReturn:
        raise ArtifactUnavailable(self._reason)

    checkpoint = proof = delta = losses = global_state = _refuse  # type: ignore[assignment]
