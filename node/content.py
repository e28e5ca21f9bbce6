"""Content-addressed artifacts: global states and pseudo-gradients by hash, from any holder, verified once.

θ_e and every accepted Δ are named by a hash on chain, so whoever holds the bytes can serve them and
the hash decides. :func:`fetch` is the one way to get such a blob: the copy kept on disk first,
then each holder in turn (:func:`holders`: the likeliest first, then the run's members, each once,
never the reader itself). Every answer is a chunk stream that the caller's ``verify`` checks,
decodes and hashes as the bytes arrive (``trainer.outer.stream_global``,
``trainer.delta.stream_delta``: byte caps and shape checks included) while :class:`Intake` writes
the same bytes to a file beside the blob's path, which becomes the blob's
(``trainer.tensorfile.atomic_file``) only once ``verify`` accepted the whole stream. A blob is
thus never held as bytes and decoded at once, and a wrong or broken answer leaves nothing.

:func:`intake` is the writing half on its own: a validator passes the Δ its replay reads through
it and keeps the Δ only once the replay passed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from itertools import chain
from pathlib import Path
from typing import BinaryIO, TypeVar

from chain.ledger import Ledger
from protocol.messages import Role
from trainer.artifacts import ArtifactUnavailable, file_chunks
from trainer.tensorfile import TensorFileError, atomic_file

T = TypeVar("T")

Read = Callable[[], Iterable[bytes | object]]
"""Opens one holder's answer as a chunk stream (raising :class:`ArtifactUnavailable` when it cannot)."""


class WrongContent(ArtifactUnavailable):
    """A holder's answer decoded but hashed to something else than the blob's hash."""


class _Discard(Exception):
    """Ends an intake without keeping what it wrote."""


class Intake:
    """One blob arriving at ``path``: the bytes of the stream passed through :meth:`tee` go to a
    file beside ``path`` as they arrive, which becomes ``path`` when the intake ends only if
    :meth:`keep` was called and the stream was read to its end (see :func:`intake`)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = ExitStack()
        self._sink: BinaryIO | None = None
        self._whole = False
        self._keep = False

    def tee(self, chunks: Iterable[bytes | object]) -> Iterator[bytes | object]:
        """``chunks`` passed on as they are, their bytes also written (a stream read again starts over)."""
        if self._sink is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._sink = self._file.enter_context(atomic_file(self.path))
        self._sink.seek(0)
        self._sink.truncate()
        self._whole = False
        it = iter(chunks)
        try:
            for piece in it:
                if isinstance(piece, (bytes, bytearray, memoryview)):
                    self._sink.write(piece)
                yield piece
        finally:
            close = getattr(it, "close", None)
            if callable(close):  # a body refused part-way: its connection closes now
                close()
        self._whole = True

    def keep(self) -> None:
        """Make what was written the blob's when the intake ends (once its bytes were verified)."""
        self._keep = True

    def _end(self, error: BaseException | None) -> None:
        if error is None and self._keep and self._whole:
            self._file.close()  # fsynced and renamed into place
        else:
            error = error or _Discard()
            self._file.__exit__(type(error), error, error.__traceback__)  # the partial file goes


@contextmanager
def intake(path: Path) -> Iterator[Intake]:
    """An :class:`Intake` for ``path``, settled when the block ends (an error keeps nothing)."""
    box = Intake(Path(path))
    try:
        yield box
    except BaseException as exc:
        box._end(exc)
        raise
    box._end(None)


def fetch(path: Path, answers: Iterable[tuple[str, Read]], verify: Callable[[Iterable[object], str], T],
          what: str) -> T:
    """The blob kept at ``path``, else the first holder's answer that ``verify`` accepts (then kept there).

    Args:
        path: where the blob is kept (its content address on disk).
        answers: (who, how to read its answer), likeliest first; read lazily, so later holders cost
            nothing once one served.
        verify: ``(chunks, who) -> value``: checks, decodes and hashes the stream as it arrives;
            raises :class:`trainer.tensorfile.TensorFileError` or :class:`WrongContent`.
        what: names the blob in the error.

    Raises:
        ArtifactUnavailable: no holder served it (the last few reasons are named).
    """
    path = Path(path)
    if path.exists():
        try:
            return verify(file_chunks(path), "held here")
        except (ArtifactUnavailable, TensorFileError):
            path.unlink(missing_ok=True)  # damaged on disk: fetch it again
    reasons = []
    for who, read in answers:
        try:
            with intake(path) as box:
                value = verify(box.tee(read()), who)
                box.keep()
            return value
        except (ArtifactUnavailable, TensorFileError) as exc:
            reasons.append(f"{who}: {exc}")
    raise ArtifactUnavailable(f"no holder served {what} ({'; '.join(reasons[-5:]) or 'nobody else to ask'})")


def holders(ledger: Ledger, skip: Collection[str], likeliest: Iterable[tuple[str, str]],
            roles: Sequence[Role] = ("host", "validator")) -> Iterator[tuple[str, str]]:
    """(address, endpoint) of who may hold a blob: ``likeliest`` first, then the members of each of
    ``roles`` in turn (read from the chain only when reached), each once, none of ``skip``."""
    asked = set(skip)
    members = ((m.address, m.endpoint) for role in roles for m in ledger.members(role=role))
    for address, endpoint in chain(likeliest, members):
        if address not in asked:
            asked.add(address)
            yield address, endpoint
