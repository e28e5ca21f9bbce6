"""Leaves moved once: a validator keeps the challenge artifacts it checked and reads refused ones from holders.

Like Δs and θ, a host's challenged leaves are content-addressed: the Merkle root the host committed
on chain names every leaf of its epoch, and a reader checks each leaf against it with its proof
(``verifier.replay``), whoever served it. So a host can refuse one validator but cannot keep its
leaves from it: any validator that read and checked them holds them.

* **Keeping.** :class:`Keeping` wraps the source a replay reads (the host, a spool, a holder): the
  leaves and the Δ pass through to the replay and are written to disk as they arrive
  (``node.content.Intake``), the proofs and losses are noted; an end leaf the replay assembled from
  its own replayed leaf and the differing chunks it fetched (``trainer.leaf_digests``) is written
  as it is checked (:meth:`~trainer.artifacts.ArtifactSource.assembled`): the validator's own leaf
  when it was bitwise the host's, and a holder serves it like a leaf read whole. :meth:`Keeping.settle` keeps, once
  the replay decided ``pass`` or ``fail``, exactly what it checked — every leaf read whole whose
  hash the replay measured and whose proof verifies under the committed root, those proofs, the
  losses once they hashed to the committed digest — at :func:`trainer.artifacts.held_leaves_dir`,
  and the Δ by its hash (``held_delta_path``, as before: what aggregation fetches). An
  ``unavailable`` keeps nothing. The validator's server (``veriloco validator run`` serves by
  default) serves them to members (``node.server``: its newest held epoch and the one before,
  each leaf at most :data:`node.server.HELD_READS_PER_MEMBER` times per member).
* **Reading from holders.** When the host refuses a validator, :func:`holder_views` names who may
  hold the challenge's artifacts: the challenge's round-0 seats first (they read the same
  leaves), then every validator of the run, never the reader. :class:`FromHolder` reads one
  holder's kept leaves, proofs and losses and the Δ by its hash, so the replay runs unchanged on
  them and reaches the verdict, with the evidence, that the holder reached.
* **Holders first.** Before it reads the host at all, a validator asks the challenge's round-0
  seats and :data:`HOLDERS_FIRST` other validators (once per challenge; a holder that does not
  hold it answers at once), so a leaf that one validator checked is not uploaded by the host
  again for the next (``ValidatorNode.holders_first``; ``bench/leaf_uploads.py``).
* **Seats in turn (the daemons' prefetch).** A validator with fetch threads (``veriloco validator
  run``) fetches its round-0 challenges ahead (``node.prefetch``) in the chain's seat order
  (``Challenge.validators``): the first seat fetches from the host at once; seat ``p`` (``p ≥ 1``
  of the challenge's seats) fetches from the seats before it that have committed their verdict (a replay settles
  before its commitment is posted, so from then on a seat holds the leaves whole, or nothing), and
  from the host once the chain reaches :func:`holder_wait_end` (the phase's start plus
  ``p / (r − 1)`` of :data:`HOLDER_WAIT_SHARE` of the blocks it has before it gives up on a host)
  or once every seat before it committed and none served them (a definite "not held"). A seat
  before it that never answers, or serves bytes that do not verify, costs it that share of the
  window and one request deadline, never its verdict: the rest is the host fetch's budget
  (``ValidatorNode._prefetch_plan``). A seat the host did not deliver to reads any seat that
  committed, on its fetch threads; the proofs and losses read of a seat are reused across the
  host's challenges (``node.prefetch.Reusing``), so a reader stays within the holder's
  :data:`node.server.HELD_READS_PER_MEMBER` (a read that finds nothing held costs none).
* **The dispute tree (the same prefetch, issue 30).** A voter of a dispute round with fetch threads
  stands in the chain of the challenge's round-0 seats followed by the epoch's validators without
  a seat (:func:`dispute_tree`): voter ``i`` asks first the holder at ``i // 2`` of those before
  it that committed (round-0 seats, then earlier voters), then the rest, under the same
  :func:`holder_wait_end` and fallbacks as a round-0 seat, so the holders double each step and
  the round-0 seats serve each leaf about twice. A re-vote, and a validator without fetch
  threads, read the round-0 seats inline (holders first).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, suppress
from pathlib import Path

from chain.ledger import Ledger
from node.content import Intake, holders, intake
from protocol.rules.merkle import MerkleProof, verify_proof
from protocol.views import Challenge
from trainer.artifacts import (
    HELD_EPOCHS,
    ArtifactSource,
    ArtifactUnavailable,
    UntrustedJson,
    held_delta_path,
    held_epochs,
    held_leaves_dir,
)
from trainer.leaf_digests import LeafDigests
from trainer.tensorfile import write_atomic
from verifier.replay import VerdictReport

MAX_OTHER_HOLDERS = 16
"""Validators beyond the challenge's round-0 seats asked for a refused challenge, per attempt."""

HOLDERS_FIRST = 2
"""Validators beyond the challenge's round-0 seats asked before the host, once per challenge: a
holder that does not hold it answers at once, so a reader spends at most this many and the seats'
requests before it reads the host."""

HOLDER_WAIT_SHARE = 0.25
"""The share of the blocks a round-0 seat has before it gives up on a host that the last seat
spends waiting for the seats before it (:func:`holder_wait_end`)."""


def holder_wait_end(position: int, seats: int, phase_deadline: int, window: int, usable: int) -> int | None:
    """The height from which the round-0 seat at ``position`` (of ``seats``, the chain's order)
    fetches a challenge from the host instead of waiting for the seats before it to hold it; None:
    from the host at once (the first seat, or a validator not seated).

    Args:
        phase_deadline: the verdict-commit phase's deadline height.
        window: the phase's length in blocks (it began at ``phase_deadline − window``).
        usable: the blocks of it before the seat gives up on a host (``Patience.margin``).
    """
    if position <= 0 or seats <= 1 or position >= seats:
        return None
    start = phase_deadline - window
    return start + int(max(0, usable) * HOLDER_WAIT_SHARE * position / (seats - 1))


def dispute_tree(reader: str, seats: list[str], voters: list[str]) -> tuple[int, list[str]] | None:
    """Where ``reader``, a voter of a disputed challenge's later round, stands in the dispute tree
    and whom it asks, likeliest first; None: not a voter there (or nobody before it: the host).

    The chain of holders is the challenge's round-0 ``seats`` then the round's ``voters`` (both in
    the chain's order); the reader at ``i`` of the voters stands at ``len(seats) + i`` of it (its
    position for :func:`holder_wait_end`) and asks first the holder at ``i // 2`` of those before
    it, then the rest of them from there on: each holder is the first choice of at most two
    readers, so the holders double each step and the round-0 seats serve each leaf about twice.
    """
    if reader not in voters:
        return None
    i = voters.index(reader)
    before = seats + voters[:i]
    if not before:
        return None
    first = (i // 2) % len(before)
    return len(seats) + i, before[first:] + before[:first]


class Keeping(ArtifactSource):
    """The artifacts of ``challenge`` as ``inner`` serves them, what the replay reads also kept on
    disk for :meth:`settle` (see the module docstring). Use it as a context manager: leaving it
    settles what was not kept (partial files go)."""

    def __init__(self, inner: ArtifactSource, challenge: Challenge, root: Path, run_id: bytes) -> None:
        self.inner, self.challenge = inner, challenge
        self.directory = held_leaves_dir(root, run_id, challenge.epoch, challenge.checkpoint_root)
        self._delta_path = held_delta_path(root, run_id, challenge.delta_hash)
        self._stack = ExitStack()
        self._leaves: dict[int, Intake] = {}
        self._delta: Intake | None = None
        self._proofs: dict[int, MerkleProof] = {}
        self._losses: list[int] | None = None

    def __enter__(self) -> Keeping:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return b"".join(p for p in self.checkpoint_chunks(epoch, leaf) if isinstance(p, bytes))

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes | object]:
        box = self._leaves.get(leaf)
        if box is None:
            box = self._leaves[leaf] = self._stack.enter_context(intake(self.directory / f"leaf-{leaf}.safetensors"))
        return box.tee(self.inner.checkpoint_chunks(epoch, leaf))

    def leaf_digests(self, epoch: int, leaf: int) -> LeafDigests | UntrustedJson:
        return self.inner.leaf_digests(epoch, leaf)

    def leaf_chunk(self, epoch: int, leaf: int, tensor: int, chunk: int) -> bytes:
        return self.inner.leaf_chunk(epoch, leaf, tensor, chunk)

    def assembled(self, epoch: int, leaf: int, chunks: Iterable[bytes]) -> Iterable[bytes]:
        # The replay's own end leaf, or it with the host's differing chunks: kept like a leaf read whole.
        box = self._leaves.get(leaf)
        if box is None:
            box = self._leaves[leaf] = self._stack.enter_context(intake(self.directory / f"leaf-{leaf}.safetensors"))
        return (p for p in box.tee(self.inner.assembled(epoch, leaf, chunks)) if isinstance(p, bytes))

    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        answer = self.inner.proof(epoch, leaf)
        with suppress(ValueError):  # not a proof: the replay says so; nothing of it is kept
            self._proofs[leaf] = MerkleProof.model_validate(answer)
        return answer

    def losses(self, epoch: int) -> list[int] | UntrustedJson:
        answer = self.inner.losses(epoch)
        if isinstance(answer, list):
            values = [x for x in answer if type(x) is int]
            if len(values) == len(answer):
                self._losses = values
        return answer

    def delta(self, epoch: int) -> bytes:
        return self.inner.delta(epoch)

    def delta_chunks(self, epoch: int) -> Iterable[bytes | object]:
        if epoch != self.challenge.epoch:  # another epoch's Δ is not this challenge's: passed through
            return self.inner.delta_chunks(epoch)
        if self._delta is None:
            self._delta = self._stack.enter_context(intake(self._delta_path))
        return self._delta.tee(self.inner.delta_chunks(epoch))

    def global_state(self, model_hash: str) -> bytes:
        return self.inner.global_state(model_hash)

    def settle(self, report: VerdictReport) -> list[str]:
        """Keep what the replay behind ``report`` checked (nothing for ``unavailable``); the names
        of what was kept. The Δ is kept by its hash only when the replay passed (it is what
        aggregation reads), or read whole by a replay that failed (a refused reader needs it to
        reach the same fail)."""
        outcome, m = report.verdict.outcome, report.measurements
        if outcome == "unavailable":
            return []
        c = self.challenge
        root, count = bytes.fromhex(c.checkpoint_root), c.segments + 1
        kept: list[str] = []
        self.directory.mkdir(parents=True, exist_ok=True)
        for leaf, proof in sorted(self._proofs.items()):
            measured = m.get(f"leaf{leaf}_hash")
            if measured is None and leaf == 0 and m.get("leaf0_checked"):
                measured = m.get("leaf0_expected_hash")  # leaf 0 of a last segment: checked by its proof alone
            if not isinstance(measured, str) or not verify_proof(bytes.fromhex(measured), proof, root, count):
                continue
            write_atomic(self.directory / f"proof-{leaf}.json", proof.model_dump_json().encode())
            kept.append(f"proof {leaf}")
            box = self._leaves.get(leaf)
            if box is not None and f"leaf{leaf}_hash" in m:
                box.keep()
                kept.append(f"leaf {leaf}")
        if self._losses is not None and "train_loss_micro" in m:  # set once they hashed to the digest
            write_atomic(self.directory / "losses.json", json.dumps(self._losses).encode())
            kept.append("losses")
        if self._delta is not None and "delta_bytes" in m:  # a pass/fail read it whole only if it hashed right
            self._delta.keep()
            kept.append("Δ")
        return kept


class FromHolder(ArtifactSource):
    """``challenge``'s artifacts read from a holder instead of its host: the leaves, proofs and
    losses it kept under the host's root (:meth:`ArtifactSource.held`), the Δ by its hash, and the
    host's Δ of epoch ``previous_epoch`` by ``previous_delta`` when given (``topk2`` runs chain
    their error-feedback residual from it: ``trainer.delta.carried_from``). Every Δ is asked for
    with its epoch, so a remote holder caps it by that epoch's scheme."""

    def __init__(self, holder: ArtifactSource, challenge: Challenge, previous_delta: str | None = None,
                 previous_epoch: int | None = None) -> None:
        self.holder, self.challenge = holder, challenge
        self.previous_delta, self.previous_epoch = previous_delta, previous_epoch
        self._held: ArtifactSource | None = None

    def _kept(self) -> ArtifactSource:
        if self._held is None:
            self._held = self.holder.held(self.challenge.epoch, self.challenge.checkpoint_root)
        return self._held

    def checkpoint(self, epoch: int, leaf: int) -> bytes:
        return self._kept().checkpoint(epoch, leaf)

    def checkpoint_chunks(self, epoch: int, leaf: int) -> Iterable[bytes | object]:
        return self._kept().checkpoint_chunks(epoch, leaf)

    def leaf_digests(self, epoch: int, leaf: int) -> LeafDigests | UntrustedJson:
        return self._kept().leaf_digests(epoch, leaf)

    def leaf_chunk(self, epoch: int, leaf: int, tensor: int, chunk: int) -> bytes:
        return self._kept().leaf_chunk(epoch, leaf, tensor, chunk)

    def proof(self, epoch: int, leaf: int) -> MerkleProof | UntrustedJson:
        return self._kept().proof(epoch, leaf)

    def losses(self, epoch: int) -> list[int] | UntrustedJson:
        return self._kept().losses(epoch)

    def _delta_hash(self, epoch: int) -> str:
        if epoch == self.challenge.epoch:
            return self.challenge.delta_hash
        if self.previous_delta is not None and epoch == self.previous_epoch:
            return self.previous_delta
        raise ArtifactUnavailable(f"a holder's view of epoch {self.challenge.epoch} has no Δ of epoch {epoch}")

    def delta(self, epoch: int) -> bytes:
        return self.holder.delta_by_hash(self._delta_hash(epoch))

    def delta_chunks(self, epoch: int) -> Iterable[bytes | object]:
        return self.holder.delta_by_hash_chunks(self._delta_hash(epoch), epoch)

    def global_state(self, model_hash: str) -> bytes:
        raise ArtifactUnavailable("a holder's view of a challenge holds no global state")


def holder_addresses(ledger: Ledger, challenge: Challenge, reader: str,
                     others: int = MAX_OTHER_HOLDERS) -> Iterator[tuple[str, str]]:
    """(address, endpoint) of who may hold ``challenge``'s artifacts, likeliest first: its round-0
    seats, then at most ``others`` more validators of the run; never ``reader`` or the host."""
    def seats() -> Iterator[tuple[str, str]]:
        for address in challenge.validators:
            member = ledger.member(address) if address != reader else None
            if member is not None:
                yield address, member.endpoint

    seated = set(challenge.validators)
    extra = 0
    for address, endpoint in holders(ledger, {reader, challenge.host}, seats(), roles=("validator",)):
        if address not in seated:
            extra += 1
            if extra > others:
                return
        yield address, endpoint


def prune_held(root: Path, run_id: bytes, current: int) -> list[int]:
    """Delete the held leaves of epochs a holder no longer serves (before ``current − 1``)."""
    gone = [e for e in held_epochs(root, run_id) if e <= current - HELD_EPOCHS]
    for epoch in gone:
        shutil.rmtree(Path(root) / run_id.hex() / "held" / str(epoch), ignore_errors=True)
    return gone
