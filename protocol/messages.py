"""What participants post to the chain in an epoch: beacon commit/reveal, commitments, verdicts, traps, proposals.

These are the Ledger's inputs. Each is validated here before it is sent (and again by the contract).
Losses travel as fixed-point integers (micro-nats) so that no float is ever hashed or compared on chain.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal
from itertools import pairwise
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from protocol.rules.classes import CLASS_PATTERN
from protocol.rules.commitments import trap_commitment, verdict_commitment
from protocol.rules.encoding import canonical_decimal
from protocol.rules.hashing import HexDigest, Tag, tagged_hash
from protocol.rules.limits import (
    MAX_GAIN_MICRO,
    MAX_LOSS_MICRO,
    MAX_OBJECTIONS_PER_READY,
    MAX_PARTICIPANTS,
    MAX_SEGMENTS,
)
from protocol.rules.vdf import ELEMENT_BYTES
from protocol.types import Address, Boundary, Count, Dec

VDF_ELEMENT_PATTERN = rf"^[0-9a-f]{{{2 * ELEMENT_BYTES}}}$"
"""A VDF element as the contract takes it: 512 lowercase hex characters (``protocol.rules.vdf.encode``)."""

Role = Literal["host", "validator"]
Outcome = Literal["pass", "fail", "unavailable"]

LossMicro = Annotated[int, Field(ge=0, le=MAX_LOSS_MICRO, strict=True)]
"""A loss in micro-nats as commitments and proposals carry it: ``0 … MAX_LOSS_MICRO`` (the contract's bound)."""

GainMicro = Annotated[int, Field(ge=-MAX_GAIN_MICRO, le=MAX_GAIN_MICRO, strict=True)]
"""A host's probe gain in micro-nats (``trainer.probe``): what its Δ̂ lowers the validation loss by,
signed, within ``±MAX_GAIN_MICRO`` (the contract's bound)."""


class BeaconJoin(Boundary):
    """Joining an epoch: the beacon commitment ``H("beacon/commit", address || 0 || epoch || secret)``,
    and the member's compute-profile class (``protocol.rules.classes``: "" or its 64-hex compute
    fingerprint)."""

    epoch: Count
    beacon_commit: HexDigest
    compute_class: str = Field(default="", pattern=CLASS_PATTERN)


class BeaconReveal(Boundary):
    """Revealing the beacon secret (32 bytes, hex) after commitments are closed."""

    epoch: Count
    secret: HexDigest


class Commitment(Boundary):
    """A host's commitment to its epoch of work, posted before the commit deadline.

    ``checkpoint_root`` is the Merkle root over the ``segments + 1`` checkpoint leaf hashes
    (leaf 0 is the start state θ_e; ``segments`` is the spec's S, or fewer for a partial epoch);
    ``delta_hash`` hashes the quantized pseudo-gradient exactly as it will be served;
    ``loss_digest`` commits to all per-step losses; ``train_loss_micro`` is
    :func:`protocol.rules.losses.train_loss_micro` of those losses (the mean of the last segment),
    which validators check against the losses the host serves. On chain the host posts it with its trap
    commitment (``chain.ledger.Ledger.commit``); the chain's answers show it as ``trap_commit``
    (None in what a host's epoch store records).
    """

    epoch: Count
    checkpoint_root: HexDigest
    delta_hash: HexDigest
    loss_digest: HexDigest
    segments: int = Field(ge=1, le=MAX_SEGMENTS, strict=True)
    train_loss_micro: LossMicro
    trap_commit: HexDigest | None = None


class Verdict(Boundary):
    """A validator's verdict on one challenged segment of one host.

    ``gain_micro``: on the host's last segment when the run's probe is on
    (``verification.probe_windows > 0``), the host's probe gain the validator computed from the
    θ_e and Δ̂ it holds (required with ``pass``, with ``fail`` where it computed it); None
    elsewhere. It is part of the commitment and of the verdict: another gain is another verdict.

    ``dispute_gain_micro``: on a vote that decides a gain dispute (a round-0 seat's re-vote, a final
    vote; ``Challenge.gain_dispute``), the host's gain on its dispute windows
    (:func:`trainer.probe.dispute_starts`), beside ``gain_micro``; None elsewhere.
    """

    epoch: Count
    host: Address
    segment: int = Field(ge=0, lt=MAX_SEGMENTS, strict=True)
    outcome: Outcome
    distance: Dec = Decimal(0)
    evidence: HexDigest
    gain_micro: GainMicro | None = None
    dispute_gain_micro: GainMicro | None = None

    @field_validator("distance")
    @classmethod
    def _distance(cls, v: Decimal) -> Decimal:
        if v < 0 or v > Decimal(10) ** 9:
            raise ValueError("distance must be in [0, 1e9]")
        # Keep the on-chain text short: 9 significant digits are plenty for a relative distance.
        return v if len(v.as_tuple().digits) <= 9 else Decimal(f"{v:.9g}")


class VerdictOpening(Boundary):
    """A validator's verdict with the salt that hides it until it is opened.

    The validator posts :meth:`commitment` (``commit_verdict``) in ``verify`` (a round-0 seat) or
    ``dispute`` (the final vote), and the opening itself (``reveal_verdict``) in
    ``verdict_reveal`` (only a ``pass`` on an undisputed challenge) or ``dispute_reveal``.
    """

    epoch: Count
    host: Address
    segment: int = Field(ge=0, lt=MAX_SEGMENTS, strict=True)
    outcome: Outcome
    distance: Dec = Decimal(0)
    evidence: HexDigest
    salt: HexDigest
    gain_micro: GainMicro | None = None
    dispute_gain_micro: GainMicro | None = None

    @model_validator(mode="after")
    def _dispute_gain_with_gain(self) -> VerdictOpening:
        if self.dispute_gain_micro is not None and self.gain_micro is None:
            raise ValueError("a dispute-window gain comes only with a gain (gain_micro)")
        return self

    @classmethod
    def of(cls, verdict: Verdict, salt: bytes) -> VerdictOpening:
        """``verdict`` hidden by ``salt`` (32 random bytes)."""
        return cls(epoch=verdict.epoch, host=verdict.host, segment=verdict.segment, outcome=verdict.outcome,
                   distance=verdict.distance, evidence=verdict.evidence, salt=salt.hex(),
                   gain_micro=verdict.gain_micro, dispute_gain_micro=verdict.dispute_gain_micro)

    def commitment(self, validator: str) -> str:
        """The commitment ``validator`` posts for this opening (hex)."""
        return verdict_commitment(validator, self.epoch, self.host, self.segment, self.outcome,
                                  canonical_decimal(self.distance), bytes.fromhex(self.evidence),
                                  bytes.fromhex(self.salt), self.gain_micro, self.dispute_gain_micro).hex()


class VerdictCommit(Boundary):
    """A validator's commitment to its verdict on one challenged segment."""

    epoch: Count
    host: Address
    segment: int = Field(ge=0, lt=MAX_SEGMENTS, strict=True)
    commitment: HexDigest


class Objection(Boundary):
    """One challenge a validator objects to in its ``ready``: it sits on it in round 0 and its
    committed verdict is not ``pass``."""

    host: Address
    segment: int = Field(ge=0, lt=MAX_SEGMENTS, strict=True)


class Ready(Boundary):
    """A validator with round-0 seats is done with them (phase ``objection``): the challenges it
    objects to, strictly ascending by (host, segment). An objection disputes the challenge: the
    whole validator set decides it by stake. One message carries at most
    :data:`~protocol.rules.limits.MAX_OBJECTIONS_PER_READY`; a validator with more sends
    :meth:`pages`, and the first with fewer is its last."""

    epoch: Count
    objections: list[Objection] = Field(default_factory=list, max_length=MAX_OBJECTIONS_PER_READY)

    @classmethod
    def pages(cls, epoch: int, objections: Iterable[Objection]) -> list[Ready]:
        """Every ``ready`` a validator sends for these objections, in order: full pages of
        :data:`~protocol.rules.limits.MAX_OBJECTIONS_PER_READY`, then one with fewer (empty when
        the count is a multiple of it, which is what tells the contract it is the last)."""
        ordered = sorted(objections, key=lambda o: (o.host, o.segment))
        size = MAX_OBJECTIONS_PER_READY
        return [cls(epoch=epoch, objections=ordered[i:i + size]) for i in range(0, len(ordered) + 1, size)]

    @field_validator("objections")
    @classmethod
    def _ascending(cls, v: list[Objection]) -> list[Objection]:
        keys = [(o.host, o.segment) for o in v]
        if any(a >= b for a, b in pairwise(keys)):
            raise ValueError("objections must be distinct and in ascending order of (host, segment)")
        return v


class TrapOpening(Boundary):
    """A host's trap set (the segments it deliberately corrupted, ascending; empty for an honest
    host) with the salt of its trap commitment."""

    epoch: Count
    segments: list[int] = Field(default_factory=list, max_length=MAX_SEGMENTS)
    salt: HexDigest

    @field_validator("segments")
    @classmethod
    def _ascending(cls, v: list[int]) -> list[int]:
        if any(t < 0 for t in v) or any(a >= b for a, b in pairwise(v)):
            raise ValueError("trap segments must be distinct, non-negative and ascending")
        return v

    def commitment(self, host: str) -> str:
        """The trap commitment ``host`` posts with its work (hex)."""
        return trap_commitment(host, self.epoch, self.segments, bytes.fromhex(self.salt)).hex()


class SitOut(Boundary):
    """A joined host that will finish no segment by the train deadline sits ``epoch`` out instead of
    committing nothing (issue 30): sent in ``train`` before any commitment of its own, it is
    ``sat_out`` — not challenged, paid or slashed (it still owes its beacon reveal) — and joins the
    next epoch as usual (``docs/contract.md``, "Partial epochs")."""

    epoch: Count


class StartProposal(Boundary):
    """Pipelined runs: a committed host's proposal for the optimistic start of epoch ``epoch + 1``
    (every committed Δ of ``epoch`` aggregated onto its settled start), sent once ``epoch``'s
    reveal closed and no older epoch settles. Epoch ``epoch + 1`` opens from the hash backed by
    more than 2/3 of the committed hosts' stake (``docs/contract.md``, "Pipelined epochs")."""

    epoch: Count
    model_hash: HexDigest


class DelayedSeedOutput(Boundary):
    """Phase ``delay`` (``verification.delay_squarings`` > 0): the VDF output ``y`` over the epoch seed
    and Wesolowski's proof (``protocol.rules.vdf``), each 512 lowercase hex characters. Anyone may
    send it; the contract checks it and draws every host's challenges from ``H("vdf/seed", y)``."""

    epoch: Count
    output: str = Field(pattern=VDF_ELEMENT_PATTERN)
    proof: str = Field(pattern=VDF_ELEMENT_PATTERN)


class ModelProposal(Boundary):
    """An accepted host's proposal for the next global model, with its measured validation loss.

    ``excluded`` names the accepted hosts whose Δ no holder served the proposer before the
    exclusion height of the propose phase (``protocol.rules.exclusion``), left out of the model:
    distinct, in ascending order, at most ``MAX_PARTICIPANTS`` (the contract also checks each is
    another accepted host of the epoch). Empty (the default) when every accepted Δ was served.
    """

    epoch: Count
    model_hash: HexDigest
    val_loss_micro: LossMicro
    excluded: list[Address] = Field(default_factory=list, max_length=MAX_PARTICIPANTS)

    @field_validator("excluded")
    @classmethod
    def _sorted(cls, v: list[str]) -> list[str]:
        if any(a >= b for a, b in pairwise(v)):
            raise ValueError("excluded hosts must be distinct and in ascending order")
        return v


def evidence_hash(*parts: bytes) -> str:
    """Digest of a validator's evidence (the bytes it measured), posted with a verdict."""
    return tagged_hash(Tag.EVIDENCE, *parts).hex()
