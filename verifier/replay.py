"""Replay one challenged segment of a host's epoch and decide the verdict.

The validator daemon calls :func:`verify_challenge` (the :class:`~protocol.messages.Verdict` to
post) or :func:`check_challenge` (the same, as a :class:`VerdictReport` with the reason and every
measurement). For challenge ``(epoch e, host h, segment g)`` with ``S = challenge.segments``:

1. **Fetch and authenticate.** Leaf ``g`` and leaf ``g + 1`` with their Merkle proofs from the
   host's :class:`~trainer.artifacts.ArtifactSource`. Each leaf is decoded with the trainer's
   validated loader (names, dtypes, shapes and sizes from the spec, finite values, its step), its
   hash checked against ``challenge.checkpoint_root`` with ``S + 1`` leaves (the count from the
   chain, never from the proof) at exactly index ``g`` / ``g + 1``. Both must carry the epoch's RNG
   key and the same micro-batch split, and AdamW moments that AdamW with clipped gradients can
   produce (:func:`verifier.measure.leaf_moment_check`).
2. **Losses.** The ``S · c`` per-step losses the host serves (``S`` fewer than the spec's in a
   partial epoch: its challenges lie among its own segments) must hash to ``challenge.loss_digest``,
   contain, at the right places, the losses recorded in both leaves, and give the train loss the
   commitment reports (:func:`protocol.rules.losses.train_loss_micro`).
3. **Start state.** For ``g = 0``, leaf 0 must be ``start_checkpoint(θ_e)`` bit for bit. For the
   last segment (challenged in every epoch) leaf 0's proof is fetched too and must verify the hash
   of ``start_checkpoint(θ_e)`` under the root; only if it does not is leaf 0 itself fetched to decide
   (:meth:`_Run.chain_start`). So every host's leaf chain is checked to start at θ_e every epoch.
4. **Bounds.** Every coordinate of the segment's committed update (and, for the last segment, of
   ``θ_S − θ_e``) within what that many AdamW steps can move it (:func:`verifier.measure.update_excess`).
5. **Δ** (last segment only). The served Δ must hash to ``challenge.delta_hash`` exactly and, once
   dequantized, equal ``θ_e − θ_S`` of the committed leaf ``S`` within the quantization bound. For
   ``topk2`` (error feedback) it must be, byte for byte, the compression of ``θ_e − θ_S + β·r`` where
   ``r`` is the residual leaf ``S`` carries and β the spec's ``quantization.error_decay``
   (``trainer.compress.decay_residual``), and ``r`` must be the one the host's accepted Δ of
   epoch ``e − 1`` (``e − 2`` in a pipelined run: ``trainer.delta.carried_from``) committed to (its
   ``ef/next``; zeros if the host was not accepted then).
6. **Replay.** ``c`` steps from leaf ``g`` on the protocol's batches with the trainer's one step
   function (:func:`trainer.inner.replay_segment`), then (:func:`verifier.measure.compare`): the
   relative distance of every tensor of the parameters and of both AdamW moments ``≤ tau``, every
   moment coordinate within ``moment_tolerance``; every
   replayed per-step loss within ``loss_tolerance`` of the recorded one; and the committed update
   at least ``min_update_ratio`` times ``lr · √(c · N)``.

Evidence: a verdict's evidence hash covers the challenge, the outcome, the deciding check and the
exact measurements — the leaf hashes and, once the replay ran, the replayed leaf's hash and the
**replay witness** (:func:`replay_segment`: a digest of the parameters after every step inside the
segment, which no leaf commits), so a pass cannot be posted with the honest validators' evidence
without replaying.

Outcomes: ``unavailable`` when the host did not serve what it committed — the source raised, or
what it served is not the committed artifact (malformed bytes, a proof that does not verify under
the committed root, losses or a Δ that do not hash to the committed digest); ``fail`` when the
committed artifacts themselves do not hold up (a leaf under the root with another epoch's RNG key
or implausible moments, leaves inconsistent with the committed losses or with each other, a Δ that
is not θ_e − θ_S, a replay beyond the tolerances); ``pass`` otherwise. The split matters to the
game (``docs/contract.md``): every honest validator that is served sees the same committed bytes,
so honest ``fail`` and ``pass`` votes always agree, while what one reader was served instead is
only the host's refusal to serve it, which never slashes the reader.
Nothing the host serves can raise out of :func:`check_challenge`: every failure is a verdict with
a reason. What the validator supplies itself (spec, dataset, θ_e, seed, stepper) is checked first
and a mismatch raises ``ValueError`` — then no verdict should be posted at all.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import torch
from pydantic import ValidationError

from protocol.errors import VerilocoError
from protocol.messages import Outcome, Verdict, evidence_hash
from protocol.rules.encoding import canonical_json
from protocol.rules.hashing import tagged_hasher, u64be
from protocol.rules.losses import loss_digest, loss_micro, train_loss_micro
from protocol.rules.merkle import MerkleProof, verify_proof
from protocol.rules.spec import RunSpec
from protocol.tensors.digest import tensors_digest
from protocol.views import Challenge
from trainer.artifacts import ArtifactSource, ArtifactUnavailable, UntrustedJson
from trainer.checkpoint import FORMAT as CHECKPOINT_FORMAT
from trainer.checkpoint import Checkpoint, checkpoint_layout, stream_checkpoint
from trainer.compress import NEXT, residual_digest, zero_residual
from trainer.data import Dataset
from trainer.delta import (
    carried_from,
    carries_residual,
    delta_hash,
    dequantize,
    encode_pseudo_gradient,
    pseudo_gradient,
    stream_delta,
)
from trainer.inner import EpochContext, run_segment, start_checkpoint
from trainer.leaf_digests import LeafDigests, assemble, check_leaf_digests, differing, encoded_chunks
from trainer.model import parameter_shapes
from trainer.outer import GlobalState
from trainer.step import Stepper, TrainState, epoch_rng_key
from trainer.tensorfile import TensorFileError
from verifier.measure import (
    compare,
    delta_check,
    expected_update,
    leaf_moment_check,
    parameter_count,
    update_excess,
    update_norm,
)

log = logging.getLogger("veriloco.verifier")

MAX_DISTANCE = 10 ** 9
"""The largest distance a verdict can carry (``protocol.messages.Verdict``); larger ones are clipped."""

REPLAY_CHECKS = ("distance", "moments", "loss", "update")
"""The checks decided by comparing a replay (a fail by any other check carries distance 10⁹)."""

_I64 = 1 << 63
T = TypeVar("T")

Measurement = float | int | str | bool


@dataclass(frozen=True)
class VerdictReport:
    """A verdict with why it was reached and what was measured.

    Attributes:
        verdict: what to post.
        reason: one human-readable line (``"pass: distance 1.8e-04 ≤ τ 0.01, …"``).
        check: the check that decided: ``ok`` for a pass; ``fetch`` (unavailable); ``leaf``
            (decode, proof, consistency or moment bounds of a leaf), ``losses``, ``train_loss``,
            ``start``, ``bound``, ``delta``, ``residual``, ``replay``, ``distance``, ``moments``, ``loss``,
            ``update`` or ``error`` for a fail.
        measurements: every figure measured on the way (distances, loss difference, update
            ratio, moment norms, Δ error, leaf hashes, seconds); what was not reached is absent.
    """

    verdict: Verdict
    reason: str
    check: str
    measurements: dict[str, Measurement] = field(default_factory=dict)
    transfer: dict[str, Measurement] = field(default_factory=dict)
    """How the end leaf was read (``end_leaf``: ``whole``, ``own`` — the replay reproduced it bit for
    bit, nothing read — or ``chunks``, with ``end_leaf_chunks_fetched`` and
    ``end_leaf_bytes_fetched``; why chunk digests were not used). Not evidence."""

    @property
    def outcome(self) -> Outcome:
        return self.verdict.outcome


class ReplayFault(VerilocoError):
    """The validator's own check broke (out of memory, a bug, an interrupted replay): nothing about
    the host's artifacts was learned, so no verdict may be posted; the node tries again later or
    lets the window pass."""


class _Decided(Exception):
    """Raised inside the checks to end them with an outcome."""

    def __init__(self, outcome: Outcome, check: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome, self.check, self.reason = outcome, check, reason


def _fail(check: str, reason: str) -> _Decided:
    return _Decided("fail", check, reason)


def _unserved(check: str, reason: str) -> _Decided:
    # What was served is not what the host committed: it did not serve the artifact.
    return _Decided("unavailable", check, reason)


def _fetch(what: str, call: Callable[[], T]) -> T:
    # A source reports a refusal (missing, timed out, too large) as ArtifactUnavailable. Any other
    # exception out of a source is a transport problem the validator cannot pin on the host either:
    # it is reported the same way (unavailable, slashed less than a fail), never as a crash.
    try:
        return call()
    except ArtifactUnavailable as exc:
        raise _Decided("unavailable", "fetch", f"{what} not served: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - see above
        raise _Decided("unavailable", "fetch", f"{what}: source error {type(exc).__name__}: {exc}") from None


def _bytes(data: object, what: str) -> bytes:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise _unserved("leaf", f"{what} is a {type(data).__name__}, not bytes")


def _proof(value: MerkleProof | UntrustedJson, what: str) -> MerkleProof:
    if isinstance(value, MerkleProof):
        return value
    try:
        return MerkleProof.model_validate(value)
    except (ValidationError, TypeError, ValueError) as exc:
        raise _unserved("leaf", f"{what}: malformed Merkle proof ({str(exc).splitlines()[0]})") from None


_SHAPES: dict[bytes, dict[str, Any]] = {}


def _parameter_shapes(spec: RunSpec) -> dict[str, Any]:
    # Building the model on the meta device takes ~0.1 s; a validator asks for every challenge.
    key = spec.canonical()
    if key not in _SHAPES:
        if len(_SHAPES) > 16:
            _SHAPES.clear()
        _SHAPES[key] = parameter_shapes(spec)
    return _SHAPES[key]


def distance_decimal(distance: float) -> Decimal:
    """A measured distance as a verdict carries it: 6 significant digits, in ``[0, 1e9]``."""
    if not math.isfinite(distance) or distance >= MAX_DISTANCE:
        return Decimal(MAX_DISTANCE)
    if distance < 1e-15:
        return Decimal(0)
    return Decimal(f"{distance:.6g}")


@dataclass(frozen=True)
class Replayed:
    """A replay of the segment: the replayed end leaf and witness, or why it could not run."""

    leaf: Checkpoint | None
    witness: str
    seconds: float
    error: str | None

    def spill(self, path: Path) -> SpilledReplay:
        """This replay with its leaf written to ``path`` (``torch.save``: every bit, in its tensors'
        order), so that a check waiting for chunks holds no leaf in memory."""
        if self.leaf is not None:
            torch.save(self.leaf.tensors(), path)
        return SpilledReplay(path if self.leaf is not None else None, self.witness, self.seconds, self.error)


@dataclass(frozen=True)
class SpilledReplay:
    """A :class:`Replayed` whose leaf is on disk (:meth:`Replayed.spill`)."""

    path: Path | None
    witness: str
    seconds: float
    error: str | None

    def load(self) -> Replayed:
        """The replay as it was spilled (raises ``OSError`` or a ``torch`` error if the file is gone)."""
        if self.path is None:
            return Replayed(None, self.witness, self.seconds, self.error)
        tensors = torch.load(self.path, weights_only=True)
        residual = {k[3:]: v for k, v in tensors.items() if k.startswith("ef/")}
        state = TrainState.from_tensors({k: v for k, v in tensors.items()
                                         if k not in ("losses", "micro_batches") and not k.startswith("ef/")})
        leaf = Checkpoint(state, tensors["losses"], int(tensors["micro_batches"]), residual or None)
        return Replayed(leaf, self.witness, self.seconds, self.error)


class ChunksWanted(Exception):  # a request to the caller, not an error
    """Out of :func:`check_challenge` with ``defer_chunks``: the replay did not reproduce the committed
    end leaf bit for bit, and the chunks that differ are to be fetched before the check goes on (off
    the replay's thread: ``node.validator``). Call it again with ``replayed`` and a source that serves
    them: the verdict is the one a check reading them inline reaches.

    Attributes:
        replayed: the replay (its leaf is what the chunks are compared with).
        wanted: (tensor, chunk) of every chunk of the end leaf that differs, in the order the check
            reads them (``trainer.leaf_digests.assemble``).
        digests: the end leaf's chunk digests, checked against the committed root.
    """

    def __init__(self, replayed: Replayed, wanted: list[tuple[int, int]], digests: LeafDigests) -> None:
        super().__init__(f"{len(wanted)} chunks of the end leaf differ from the replay's")
        self.replayed, self.wanted, self.digests = replayed, wanted, digests


def trusted_end_digests(epoch_spec: RunSpec, challenge: Challenge, served: object,
                        served_proof: MerkleProof | UntrustedJson) -> LeafDigests:
    """The end leaf's served chunk digests (leaf ``segment + 1``), once they are the committed leaf's:
    of its exact layout under ``epoch_spec`` (the run spec resolved for the challenge's epoch), and
    hashing to a leaf under the challenge's committed root by the served proof. The one check of a
    digest list, for the replay and for the daemons' prefetch (``node.prefetch``).

    Raises:
        ValueError: why they are not to be used (the leaf is then read whole).
    """
    leaf, leaves = challenge.segment + 1, challenge.segments + 1
    try:
        found, leaf_hash = check_leaf_digests(served, checkpoint_layout(epoch_spec, leaf))
        proof = served_proof if isinstance(served_proof, MerkleProof) else MerkleProof.model_validate(served_proof)
    except (ValidationError, TypeError) as exc:
        raise ValueError(str(exc).splitlines()[0]) from None
    if (proof.index, proof.leaf_count) != (leaf, leaves) or not verify_proof(
            leaf_hash, proof, bytes.fromhex(challenge.checkpoint_root), leaves):
        raise ValueError("they do not hash to a leaf under the committed root")
    return found


class _Run:
    """The checks of one challenge, accumulating measurements."""

    def __init__(self, spec: RunSpec, dataset: Dataset, challenge: Challenge, source: ArtifactSource,
                 theta: GlobalState, prev_epoch_seed: bytes, stepper: Stepper | None,
                 previous_delta: str | None = None, previous_source: ArtifactSource | None = None,
                 replayed: Replayed | None = None, defer_chunks: bool = False) -> None:
        # The epoch's quantization (quantization.schedule resolved); the run id is the deployed spec's.
        self.spec, self.run_id = spec.for_epoch(challenge.epoch), spec.run_id()
        self.dataset, self.challenge, self.source = dataset, challenge, source
        # The epoch whose residual the host goes on from (e − 1; e − 2 pipelined; None: zeros)
        # and its scheme: the one rule, trainer.delta.carried_from.
        self.source_epoch = carried_from(spec, challenge.epoch)
        self.carries = self.source_epoch is not None
        self.previous_spec = spec.for_epoch(self.source_epoch if self.source_epoch is not None
                                            else max(challenge.epoch - 1, 0))
        self.previous_delta = previous_delta
        self.previous_source = previous_source if previous_source is not None else source
        self.previous_raw: Iterable[object] | None = None
        self.theta, self.prev_epoch_seed, self.stepper = theta, prev_epoch_seed, stepper
        self.m: dict[str, Measurement] = {}
        self.distance = 0.0
        self.epoch, self.g, self.host = challenge.epoch, challenge.segment, challenge.host
        self.root = bytes.fromhex(challenge.checkpoint_root)
        self.leaves = challenge.segments + 1
        self.c = spec.train.segment_steps
        self.last = self.g == challenge.segments - 1
        self.proof0: MerkleProof | UntrustedJson | None = None
        # How the end leaf travelled: never part of the evidence (the verdict does not depend on it).
        self.transfer: dict[str, Measurement] = {}
        self.end_digests: object = None
        self.end_checked: LeafDigests | None = None
        self.replayed, self.defer_chunks = replayed, defer_chunks

    # -- fetching -------------------------------------------------------------------------------

    def fetch(self) -> tuple[Iterable[object], MerkleProof | UntrustedJson, Iterable[object] | None,
                             MerkleProof | UntrustedJson, list[int] | UntrustedJson, Iterable[object] | None]:
        # Leaves and Δ come as chunk streams, decoded and hashed as their bytes arrive (one pass,
        # never the whole file and its decoded copy at once).
        e, g = self.epoch, self.g
        raw_start = _fetch(f"leaf {g}", lambda: self.source.checkpoint_chunks(e, g))
        proof_start = _fetch(f"proof of leaf {g}", lambda: self.source.proof(e, g))
        # The end leaf: its chunk digests when the source serves them (checked below against the
        # committed root, then only the chunks the replay does not reproduce are read), else whole.
        raw_end: Iterable[object] | None = None
        try:
            self.end_digests = self.source.leaf_digests(e, g + 1)
        except Exception as exc:  # noqa: BLE001 - any refusal: the leaf is read whole, as it always was
            self.transfer["end_leaf_digests"] = f"not served: {str(exc)[:200]}"
            raw_end = _fetch(f"leaf {g + 1}", lambda: self.source.checkpoint_chunks(e, g + 1))
        proof_end = _fetch(f"proof of leaf {g + 1}", lambda: self.source.proof(e, g + 1))
        if raw_end is None and not self.trusted_digests(proof_end):
            raw_end = _fetch(f"leaf {g + 1}", lambda: self.source.checkpoint_chunks(e, g + 1))
        losses = _fetch("losses", lambda: self.source.losses(e))
        delta = _fetch("Δ", lambda: self.source.delta_chunks(e)) if self.last else None
        self.proof0 = _fetch("proof of leaf 0", lambda: self.source.proof(e, 0)) if self.last and g else None
        source = self.source_epoch
        if self.last and self.previous_delta is not None and source is not None:
            self.previous_raw = _fetch(f"Δ of epoch {source}", lambda: self.previous_source.delta_chunks(source))
        return raw_start, proof_start, raw_end, proof_end, losses, delta

    def trusted_digests(self, served_proof: MerkleProof | UntrustedJson) -> bool:
        """Whether the served chunk digests of the end leaf are the committed leaf's: of its exact
        layout, and hashing to a leaf under the committed root at index ``g + 1`` by the served
        proof. Otherwise they are never used (the leaf is read whole)."""
        try:
            self.end_checked = trusted_end_digests(self.spec, self.challenge, self.end_digests, served_proof)
        except ValueError as exc:
            self.transfer["end_leaf_digests"] = f"refused: {str(exc).splitlines()[0][:200]}"
            return False
        return True

    def end_leaf(self, replayed: Checkpoint | None, wanted: list[tuple[int, int]] | None = None) -> Iterable[object]:
        """The end leaf's bytes from the replayed leaf and the chunks of the host's that differ
        (fetched by index, each checked against its trusted digest), encoded as the host stores it,
        for :meth:`leaf` to check exactly as a leaf read whole. A chunk not served, or not the one
        its digest names, sends the reader to the whole leaf."""
        assert self.end_checked is not None
        e, leaf = self.epoch, self.g + 1
        own = replayed.tensors() if replayed is not None else {}
        try:
            tensors, count, nbytes = assemble(own, self.end_checked,
                                              lambda t, c: self.source.leaf_chunk(e, leaf, t, c), wanted)
        except Exception as exc:  # noqa: BLE001 - a refused or wrong chunk: the leaf is read whole
            self.transfer.update({"end_leaf": "whole", "end_leaf_chunks": f"failed: {str(exc)[:200]}"})
            return _fetch(f"leaf {leaf}", lambda: self.source.checkpoint_chunks(e, leaf))
        self.transfer.update({"end_leaf": "own" if count == 0 else "chunks", "end_leaf_chunks_fetched": count,
                              "end_leaf_bytes_fetched": nbytes})
        encoded = encoded_chunks(tensors, CHECKPOINT_FORMAT)  # the bytes a whole read gets from an honest host
        return _fetch(f"leaf {leaf}", lambda: self.source.assembled(e, leaf, encoded))

    def chunks(self, raw: Iterable[object] | None, what: str, counter: str) -> Iterator[bytes]:
        """The served chunks, counted; a source failing mid-stream, or a piece that is not bytes, is
        unavailable (not the committed artifact)."""
        if raw is None:
            raise _unserved("leaf", f"{what} is a NoneType, not bytes")
        it = iter(raw)
        total = 0
        end = object()
        try:
            while True:
                piece = _fetch(what, lambda: next(it, end))
                if piece is end:
                    break
                data = _bytes(piece, what)
                total += len(data)
                self.m[counter] = total
                yield data
        finally:
            close = getattr(it, "close", None)
            if callable(close):  # a remote body refused part-way: its connection closes now
                close()

    # -- authentication and consistency ---------------------------------------------------------

    def leaf(self, raw: Iterable[object], served_proof: MerkleProof | UntrustedJson, leaf: int) -> Checkpoint:
        what = f"leaf {leaf}"
        self.m[f"leaf{leaf}_bytes"] = 0
        try:
            ckpt, leaf_hash = stream_checkpoint(self.chunks(raw, what, f"leaf{leaf}_bytes"), self.spec, leaf,
                                                what=f"{self.host} epoch {self.epoch} {what}")
        except (TensorFileError, ValueError) as exc:
            raise _unserved("leaf", f"{what} is malformed: {exc}") from None
        proof = _proof(served_proof, what)
        self.m[f"leaf{leaf}_hash"] = leaf_hash.hex()
        if proof.index != leaf:
            raise _unserved("leaf", f"the proof served for {what} is the proof of leaf {proof.index}")
        if proof.leaf_count != self.leaves:
            raise _unserved("leaf", f"the proof of {what} is for {proof.leaf_count} leaves; "
                                f"the commitment has {self.leaves}")
        if not verify_proof(leaf_hash, proof, self.root, self.leaves):
            raise _unserved("leaf", f"{what} (hash {leaf_hash.hex()[:16]}…) is not under the committed root")
        key = epoch_rng_key(self.spec.train.seed, self.epoch)
        if ckpt.state.rng_key != key:
            raise _fail("leaf", f"{what} carries RNG key {ckpt.state.rng_key}, not epoch {self.epoch}'s {key}")
        found, problem = leaf_moment_check(ckpt.state, self.spec.train)
        self.m.update({f"leaf{leaf}_{k}": v for k, v in found.items()})
        if problem:
            raise _fail("leaf", f"{what}: {problem}")
        return ckpt

    def losses(self, served: list[int] | UntrustedJson, start: Checkpoint, end: Checkpoint) -> None:
        h = self.challenge.segments * self.c  # H, or s · c for a partial epoch
        if not isinstance(served, (list, tuple)):
            raise _unserved("losses", f"the served losses are not {h} 64-bit integers ({type(served).__name__})")
        values = [x for x in served if type(x) is int and -_I64 <= x < _I64]
        if len(served) != h or len(values) != h:
            raise _unserved("losses", f"the served losses are not {h} 64-bit integers ({len(served)} values)")
        if loss_digest(values) != self.challenge.loss_digest:
            raise _unserved("losses", "the served losses do not hash to the committed loss digest")
        # What the host reported about its training must follow from what it committed.
        reported, derived = self.challenge.train_loss_micro, train_loss_micro(values, self.c)
        self.m["train_loss_micro"] = derived
        if reported != derived:
            raise _fail("train_loss", f"the commitment reports a train loss of {reported} µnats, but the committed "
                                      f"losses of the last segment average {derived} µnats")
        for leaf, ckpt in ((self.g, start), (self.g + 1, end)):
            if leaf == 0:
                continue
            recorded = [loss_micro(x) for x in ckpt.losses.tolist()]
            committed = values[(leaf - 1) * self.c:leaf * self.c]
            if recorded != committed:
                raise _fail("losses", f"leaf {leaf} records losses {recorded[:3]}… but the committed losses of "
                                      f"steps {(leaf - 1) * self.c}–{leaf * self.c - 1} are {committed[:3]}…")

    def consistent(self, start: Checkpoint, end: Checkpoint) -> None:
        if start.micro_batches != end.micro_batches:
            raise _fail("leaf", f"leaf {self.g} splits batches into {start.micro_batches} micro-batches, "
                                f"leaf {self.g + 1} into {end.micro_batches}")
        if self.g == 0:
            expected = start_checkpoint(self.spec, self.theta.params, self.epoch, start.micro_batches)
            if expected.leaf_hash() != start.leaf_hash():
                raise _fail("start", "leaf 0 is not the agreed θ_e with a fresh optimizer at step 0")

    def chain_start(self, served_proof: MerkleProof | UntrustedJson | None, end: Checkpoint) -> None:
        """The last segment's validators check leaf 0 of every epoch: its hash, computed from θ_e (a fresh
        optimizer at step 0, the epoch's key, the host's micro-batch split), must be under the root at
        index 0. Only when the served proof does not verify with it is leaf 0 itself fetched: then it
        decides — a leaf under the root that is not θ_e's fails (``start``), anything else was not
        served."""
        if self.g == 0 or served_proof is None:
            return  # segment 0's own check compares the whole leaf (consistent)
        expected = start_checkpoint(self.spec, self.theta.params, self.epoch, end.micro_batches).leaf_hash()
        self.m["leaf0_expected_hash"] = expected.hex()
        proof = _proof(served_proof, "leaf 0")
        if (proof.index, proof.leaf_count) == (0, self.leaves) and verify_proof(expected, proof, self.root,
                                                                                  self.leaves):
            self.m["leaf0_checked"] = True
            return
        raw = _fetch("leaf 0", lambda: self.source.checkpoint_chunks(self.epoch, 0))
        leaf0 = self.leaf(raw, served_proof, 0)
        again = start_checkpoint(self.spec, self.theta.params, self.epoch, leaf0.micro_batches)
        if again.leaf_hash() != leaf0.leaf_hash():
            raise _fail("start", "leaf 0 is not the agreed θ_e with a fresh optimizer at step 0: the epoch's "
                                 "leaves do not start where its Δ is measured from")
        self.m["leaf0_checked"] = True

    def bounds(self, start: Checkpoint, end: Checkpoint) -> None:
        # No replay needed: what c AdamW steps (and, for the last leaf, the whole epoch) can move
        # each coordinate, from lr and the betas.
        train = self.spec.train
        # What the bound is in the reason: AdamW's per-coordinate bound, or for a Muon run also each
        # matrix's spectral norm (verifier.measure.update_excess).
        kind = "AdamW" if train.inner_optimizer == "adamw" else "Muon (AdamW off the matrices)"
        excess, where = update_excess(start.state.params, end.state.params, train, start.state.step, self.c)
        self.m["update_bound_excess"] = excess
        if not excess <= 1:
            raise _fail("bound", f"the committed update of segment {self.g} moves a coordinate of {where} "
                                 f"{excess:.4g}× as far as {self.c} {kind} steps can")
        if self.last:
            steps = self.challenge.segments * self.c  # the epoch's steps (fewer when partial)
            excess, where = update_excess(self.theta.params, end.state.params, train, 0, steps)
            self.m["delta_bound_excess"] = excess
            if not excess <= 1:
                raise _fail("bound", f"θ_e − θ_S moves a coordinate of {where} {excess:.4g}× as far as "
                                     f"{steps} {kind} steps can")

    def delta(self, raw: Iterable[object] | None, end: Checkpoint) -> None:
        try:
            payload, digest = stream_delta(self.chunks(raw, "Δ", "delta_bytes"), self.spec,
                                           what=f"{self.host} epoch {self.epoch} Δ")
        except (TensorFileError, ValueError) as exc:
            raise _unserved("delta", f"Δ is malformed: {exc}") from None
        served_hash = digest.hex()
        if served_hash != self.challenge.delta_hash:
            raise _unserved("delta", f"the served Δ hashes to {served_hash[:16]}…, the committed Δ hash is "
                                 f"{self.challenge.delta_hash[:16]}…")
        if carries_residual(self.spec.quantization):
            self.sparse_delta(payload, end)
            return
        truth = pseudo_gradient(self.theta.params, end.state.params)
        dq = dequantize(payload, _parameter_shapes(self.spec), self.spec.quantization)
        found = delta_check(dq, payload, truth, self.spec.quantization)
        self.m.update({f"delta_{k}": v for k, v in found.items()})
        if found["violations"]:
            raise _fail("delta", f"Δ is not θ_e − θ_S of the committed last leaf: {int(found['violations'])} "
                                 "values or scales outside the quantization bound "
                                 f"(worst ×{found['worst_excess']:.3g}, relative error {found['relative_error']:.3g})")

    def carried_digest(self) -> bytes:
        """The digest of the residual the host must start epoch e from: ``ef/next`` of its accepted Δ
        of the epoch it carries from (e − 1, e − 2 pipelined; read from the host and checked against
        that epoch's committed hash), or of zeros when it was not accepted then or there is no such
        epoch (the first ones, or a scheme that leaves no residual)."""
        if self.previous_delta is None or self.source_epoch is None:
            return residual_digest(zero_residual(_parameter_shapes(self.spec)))
        what = f"Δ of epoch {self.source_epoch}"
        try:
            previous, digest = stream_delta(self.chunks(self.previous_raw, what, "previous_delta_bytes"),
                                            self.previous_spec,
                                            what=f"{self.host} epoch {self.source_epoch} Δ")
        except (TensorFileError, ValueError) as exc:
            raise _unserved("delta", f"{what} is malformed: {exc}") from None
        if digest.hex() != self.previous_delta:
            raise _unserved("delta", f"the served {what} hashes to {digest.hex()[:16]}…, the committed hash is "
                                     f"{self.previous_delta[:16]}…")
        return bytes(previous[NEXT].tolist())

    def sparse_delta(self, payload: dict[str, Any], end: Checkpoint) -> None:
        """``topk2``: the residual leaf S carries is the chained one, and the payload is exactly the
        compression of θ_e − θ_S plus it decayed by β (the coordinates, codes, scales and next residual)."""
        if end.residual is None:  # the leaf layout of a topk2 run has it: not reached
            raise _fail("delta", f"leaf {self.g + 1} carries no residual")
        carried, expected = residual_digest(end.residual), self.carried_digest()
        self.m["residual_hash"], self.m["expected_residual_hash"] = carried.hex(), expected.hex()
        if carried != expected:
            source = (f"the one its accepted Δ of epoch {self.source_epoch} committed to"
                      if self.previous_delta is not None and self.source_epoch is not None
                      else f"zero (epoch {self.epoch} carries no residual from an earlier epoch)"
                      if self.source_epoch is None
                      else f"zero (it was not accepted in epoch {self.source_epoch})")
            raise _fail("residual", f"leaf {self.g + 1} computes its Δ from an error-feedback residual that is not "
                                    f"{source}")
        # The host's own encoder: Δ + β·r (quantization.error_decay) compressed, from the undecayed r
        # leaf S carries, so a host that skips the decay or applies another β sends other bytes.
        recomputed, _ = encode_pseudo_gradient(pseudo_gradient(self.theta.params, end.state.params),
                                               self.spec.quantization, end.residual)
        self.m["recomputed_delta_hash"] = delta_hash(recomputed).hex()
        if self.m["recomputed_delta_hash"] != self.challenge.delta_hash:
            differ = sorted(n for n in recomputed if not torch.equal(recomputed[n], payload[n]))
            raise _fail("delta", f"Δ is not the compression of θ_e − θ_S plus the carried residual × β "
                                 f"{self.spec.quantization.error_decay}: "
                                 f"{len(differ)} tensors differ ({', '.join(differ[:3])}…)")
        self.m["delta_relative_error"] = 0.0

    # -- replay ---------------------------------------------------------------------------------

    def replay_start(self, start: Checkpoint) -> Replayed:
        """Replay the segment from ``start``; its measurements enter the verdict only in
        :meth:`replay`, so a replay run early (to compare the end leaf by chunks) leaves the
        checks before it as they were."""
        ctx = EpochContext(self.run_id, self.epoch, self.host, self.prev_epoch_seed)
        t0 = time.perf_counter()
        try:
            replayed, witness = replay_segment(self.spec, self.dataset, ctx, start, self.stepper)
        except ValueError as exc:  # a non-finite loss: leaf g diverges under honest training
            return Replayed(None, "", 0.0, f"replaying segment {self.g} failed: {exc}")
        return Replayed(replayed, witness, round(time.perf_counter() - t0, 4), None)

    def replay(self, start: Checkpoint, end: Checkpoint, done: Replayed | None = None) -> None:
        ver = self.spec.verification
        done = done if done is not None else self.replay_start(start)
        if done.error is not None or done.leaf is None:
            raise _fail("replay", done.error or "no replay")
        replayed, self.m["replay_witness"], self.m["seconds_replay"] = done.leaf, done.witness, done.seconds
        if end.residual is not None:  # carried unchanged through the epoch: no step touches it
            replayed = replace(replayed, residual=end.residual)
        self.m["replayed_hash"] = replayed.leaf_hash().hex()
        self.m["bitwise"] = self.m["replayed_hash"] == self.m[f"leaf{self.g + 1}_hash"]

        found = compare(replayed.state, end.state, start.state, self.spec.train, replayed.losses, end.losses)
        tensor, self.distance = found.worst_tensor
        self.m.update({"distance": self.distance, "distance_worst": tensor,
                       **{f"distance_{k}": v for k, v in found.groups.items()},
                       "moment_error_exp_avg": float(found.moments["exp_avg"]),
                       "moment_error_exp_avg_sq": float(found.moments["exp_avg_sq"]),
                       "moment_worst": str(found.moments["worst"]), "loss_max_diff": found.loss_diff})
        norm = update_norm(end.state, start.state)
        scale = expected_update(float(self.spec.train.lr), self.c, parameter_count(start.state))
        self.m.update({"update_norm": norm, "expected_update": scale, "update_ratio": norm / scale})

        tau, tol, ratio = float(ver.tau), float(ver.loss_tolerance), float(ver.min_update_ratio)
        if not self.distance <= tau:
            g = found.groups
            raise _fail("distance", f"replay distance {self.distance:.4g} > τ {tau:g} in {tensor} (over all "
                                    f"tensors: params {g['params']:.3g}, exp_avg {g['exp_avg']:.3g}, "
                                    f"exp_avg_sq {g['exp_avg_sq']:.3g})")
        if not found.moment_error <= float(ver.moment_tolerance):
            raise _fail("moments", f"a coordinate of {found.moments['worst']} differs from the replay by "
                                   f"{found.moment_error:.4g} of √v + ε > tolerance {float(ver.moment_tolerance):g}")
        if not found.loss_diff <= tol:
            diffs = (replayed.losses.double() - end.losses.double()).abs()
            step = int(diffs.argmax()) + self.g * self.c
            raise _fail("loss", f"replayed loss of step {step} differs by {found.loss_diff:.4g} > tolerance {tol:g}")
        if not norm / scale >= ratio:
            raise _fail("update", f"the committed update {norm:.4g} is {norm / scale:.3g}× lr·√(c·N) = "
                                  f"{scale:.4g}, below the minimum ratio {ratio:g}")

    def run(self) -> str:
        raw_start, proof_start, raw_end, proof_end, served_losses, raw_delta = self.fetch()
        start = self.leaf(raw_start, proof_start, self.g)
        done: Replayed | None = None
        if raw_end is None:  # trusted chunk digests: replay first, then read only what differs
            done = self.replayed if self.replayed is not None else self.replay_start(start)
            wanted = None
            if self.defer_chunks:
                assert self.end_checked is not None
                wanted = differing(done.leaf.tensors() if done.leaf is not None else {}, self.end_checked)
                if wanted:
                    raise ChunksWanted(done, wanted, self.end_checked)
            raw_end = self.end_leaf(done.leaf, wanted)
        else:
            self.transfer["end_leaf"] = "whole"
        end = self.leaf(raw_end, proof_end, self.g + 1)
        self.consistent(start, end)
        self.chain_start(self.proof0, end)
        self.losses(served_losses, start, end)
        self.bounds(start, end)
        if self.last:
            self.delta(raw_delta, end)
        self.replay(start, end, done)
        ver = self.spec.verification
        moments = max(self.m["moment_error_exp_avg"], self.m["moment_error_exp_avg_sq"])
        return (f"distance {self.distance:.3g} ≤ τ {float(ver.tau):g}, moments {moments:.3g} ≤ "
                f"{float(ver.moment_tolerance):g}, loss diff "
                f"{self.m['loss_max_diff']:.3g} ≤ {float(ver.loss_tolerance):g}, update "
                f"{self.m['update_ratio']:.3g}× lr·√(c·N) ≥ {float(ver.min_update_ratio):g}"
                + (f", Δ within the quantization bound (rel. error {self.m['delta_relative_error']:.3g})"
                   if self.last else ""))


def _check_inputs(spec: RunSpec, dataset: Dataset, challenge: Challenge, theta: GlobalState,
                  prev_epoch_seed: bytes, stepper: Stepper | None) -> None:
    if not 1 <= challenge.segments <= spec.train.segments:  # fewer than S: a partial epoch
        raise ValueError(f"the challenge says {challenge.segments} segments but the run spec has "
                         f"{spec.train.segments} per epoch: this is not the run's spec")
    if not 0 <= challenge.segment < challenge.segments:
        raise ValueError(f"segment {challenge.segment} is outside 0..{challenge.segments - 1}")
    if len(prev_epoch_seed) != 32:
        raise ValueError("prev_epoch_seed must be 32 bytes")
    if dataset.hash != spec.data.dataset_hash:
        raise ValueError("the dataset is not the run's dataset")
    shapes = _parameter_shapes(spec)
    if set(theta.params) != set(shapes) or any(tuple(theta.params[n].shape) != tuple(s) for n, s in shapes.items()):
        raise ValueError("θ_e does not have the run's parameter names and shapes")
    if stepper is not None and stepper.world != 1:
        raise ValueError("replay needs a single-process stepper")


WITNESS_TAG = "verifier/replay-witness"
"""Hash domain of the replay witness (:func:`replay_segment`)."""


def replay_segment(spec: RunSpec, dataset: Dataset, ctx: EpochContext, start: Checkpoint,
                     stepper: Stepper | None = None) -> tuple[Checkpoint, str]:
    """:func:`trainer.inner.replay_segment` (the trainer's :func:`~trainer.inner.run_segment` from the
    start leaf), and a digest of the states no leaf commits: the replay witness.

    The witness is SHA-256 (domain :data:`WITNESS_TAG`) over, for every step ``t`` strictly inside
    the segment, ``u64be(t)`` and the :func:`~protocol.tensors.digest.tensors_digest` of the
    parameters after it. Leaves commit only the segment's ends, so nobody computes it without
    replaying: forward it takes the segment's first ``c − 1`` steps, backward from leaf ``g + 1``
    one gradient per step and a bit-exact inversion of AdamW. Within one compute profile every
    honest replay computes the same bits (at any thread count), so the same witness; other data, lr
    or start give another. With ``c = 1`` no state is inside the segment and the witness is
    constant (no preset has ``c < 8``).

    Returns:
        The replayed leaf ``g + 1`` and the witness as 64 hex characters.
    """
    stepper = stepper if stepper is not None else Stepper(spec)
    end_step = start.state.step + spec.train.segment_steps
    if end_step > spec.train.inner_steps:
        raise ValueError(f"a checkpoint at step {start.state.step} starts no segment (H = {spec.train.inner_steps})")
    witness = tagged_hasher(WITNESS_TAG)

    def inside(done: int, _loss: float) -> None:
        if done < end_step:
            witness.update(u64be(done) + tensors_digest(WITNESS_TAG, {n: p.detach() for n, p in stepper.named.items()}))

    stepper.load(start.state)
    replayed = run_segment(stepper, dataset, spec, ctx, start.micro_batches, inside)
    return replayed, witness.hexdigest()


EXACT_MEASUREMENTS = ("_hash", "replay_witness")
"""Measurement names (suffixes) whose values are digests: what a verdict's evidence is made of."""


TRANSPORT_MEASUREMENTS = ("_bytes",)
"""Measurement names (suffixes) counting bytes read: left out of a ``pass``/``fail``'s evidence, which
read every committed byte however it travelled (a leaf read whole, or assembled from the replay and
fetched chunks, whose header bytes a host may format its own way)."""


def _evidence(challenge: Challenge, outcome: str, check: str, measurements: dict[str, Measurement]) -> str:
    """The evidence hash of a verdict: the challenge, the outcome, the deciding check and what was
    measured exactly — the digests (leaf hashes, the replayed leaf's hash, the replay witness), the
    integers (the train loss in µnats; not the bytes read, :data:`TRANSPORT_MEASUREMENTS`) and the
    booleans. Floats are left out: they are
    reductions over the same bytes whose last bits may follow the thread count, while the digests
    they come from do not. A pass or a replay fail therefore carries the witness, which only a
    replay produces; a fail decided before the replay carries the hashes of what was judged.
    ``unavailable`` keeps every measurement but the timings (what was read before the refusal)."""
    if outcome == "unavailable":
        kept = {k: v if isinstance(v, str) else repr(v) for k, v in measurements.items() if not k.startswith("seconds")}
    else:
        kept = {k: v if isinstance(v, str) else repr(v) for k, v in measurements.items()
                if (isinstance(v, (bool, int)) and not k.endswith(TRANSPORT_MEASUREMENTS))
                or k.endswith(EXACT_MEASUREMENTS)}
    # Canonical JSON admits no floats; the integers and booleans are written as their repr.
    record = {"epoch": challenge.epoch, "host": challenge.host, "segment": challenge.segment,
              "checkpoint_root": challenge.checkpoint_root, "outcome": outcome, "check": check,
              "measurements": dict(sorted(kept.items()))}
    return evidence_hash(canonical_json(record))


def check_challenge(spec: RunSpec, dataset: Dataset, challenge: Challenge, source: ArtifactSource,
                    theta: GlobalState, prev_epoch_seed: bytes, *,
                    stepper: Stepper | None = None, previous_delta: str | None = None,
                    previous_source: ArtifactSource | None = None, replayed: Replayed | None = None,
                    defer_chunks: bool = False) -> VerdictReport:
    """Check one challenge and explain the verdict (see the module docstring for the checks).

    Args:
        spec: the run spec (its ``verification`` section holds τ, the loss tolerance and the
            minimum update ratio).
        dataset: the run's dataset.
        challenge: the challenge, as the chain lists it for this validator.
        source: the host's artifacts (untrusted).
        theta: the agreed global state θ_e of the challenge's epoch.
        prev_epoch_seed: the seed of epoch ``e − 1`` (the genesis seed for ``e = 0``).
        stepper: a single-process :class:`~trainer.step.Stepper` to reuse across challenges.
        previous_delta: ``topk2`` runs: the Δ hash the host committed in the epoch ``e`` carries
            from (``trainer.delta.carried_from``: ``e − 1``, ``e − 2`` pipelined) if it was
            accepted then (``Ledger.aggregation_inputs``), else None: its error-feedback residual
            chains from that Δ or starts from zero.
        previous_source: where that Δ is read from (``delta(source)``; untrusted, checked against
            ``previous_delta``): the host itself when ``source`` is a view of one challenge only
            (a validator's spool or tee); ``source`` when omitted.
        replayed: the replay of this challenge a check before stopped with (:class:`ChunksWanted`):
            not run again.
        defer_chunks: when the replay does not reproduce the end leaf bit for bit, raise
            :class:`ChunksWanted` instead of reading the chunks that differ from ``source``.

    Returns:
        The verdict with its reason, deciding check and measurements.

    Raises:
        ValueError: the validator's own inputs do not fit together (see :func:`_check_inputs`).
        ChunksWanted: with ``defer_chunks``, the end leaf's differing chunks are to be fetched first.
    """
    _check_inputs(spec, dataset, challenge, theta, prev_epoch_seed, stepper)
    t0 = time.perf_counter()
    run = _Run(spec, dataset, challenge, source, theta, prev_epoch_seed, stepper, previous_delta, previous_source,
               replayed, defer_chunks)
    outcome: Outcome
    try:
        reason = run.run()
        outcome, check = "pass", "ok"
    except _Decided as decided:
        outcome, check, reason = decided.outcome, decided.check, decided.reason
    except ChunksWanted:
        raise
    except Exception as exc:
        # The validator's own fault is never a verdict about the host: only evidence about the
        # host's artifacts (a _Decided above) may fail it.
        log.exception("unexpected error while checking %s segment %d of epoch %d",
                      challenge.host, challenge.segment, challenge.epoch)
        raise ReplayFault(f"checking host {challenge.host} segment {challenge.segment} of epoch {challenge.epoch} "
                          f"broke here: {type(exc).__name__}: {exc}") from exc
    run.m["seconds"] = round(time.perf_counter() - t0, 4)
    distance = run.distance if outcome != "unavailable" else 0.0
    if outcome == "fail" and check not in REPLAY_CHECKS:
        distance = float(MAX_DISTANCE) if "distance" not in run.m else run.distance
    verdict = Verdict(epoch=challenge.epoch, host=challenge.host, segment=challenge.segment, outcome=outcome,
                      distance=distance_decimal(distance),
                      evidence=_evidence(challenge, outcome, check, run.m))
    line = f"{outcome}: {reason}"
    level = logging.INFO if outcome == "pass" else logging.WARNING
    log.log(level, "host %s epoch %d segment %d: %s", challenge.host, challenge.epoch, challenge.segment, line)
    return VerdictReport(verdict, line, check, run.m, run.transfer)


def verify_challenge(spec: RunSpec, dataset: Dataset, challenge: Challenge, source: ArtifactSource,
                     theta: GlobalState, prev_epoch_seed: bytes, *,
                     stepper: Stepper | None = None, previous_delta: str | None = None,
                     previous_source: ArtifactSource | None = None) -> Verdict:
    """The verdict on one challenge: :func:`check_challenge` without the explanation.

    The reason is logged (logger ``veriloco.verifier``); call :func:`check_challenge` to get it.
    """
    return check_challenge(spec, dataset, challenge, source, theta, prev_epoch_seed, stepper=stepper,
                           previous_delta=previous_delta, previous_source=previous_source).verdict
