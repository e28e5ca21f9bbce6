"""What participants post to the chain in an epoch: beacon commit/reveal, commitments, verdicts, proposals.

These are the Ledger's inputs. Each is validated here before it is sent (and again by the contract).
Losses travel as fixed-point integers (micro-nats) so that no float is ever hashed or compared on chain.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Literal

from pydantic import Field, field_validator

from protocol.rules.hashing import HexDigest, Tag, tagged_hash
from protocol.rules.limits import MAX_LOSS_MICRO, MAX_SEGMENTS
from protocol.types import Address, Boundary, Count, Dec

Role = Literal["host", "validator"]
Outcome = Literal["pass", "fail", "unavailable"]

LossMicro = Annotated[int, Field(ge=0, le=MAX_LOSS_MICRO, strict=True)]
"""A loss in micro-nats as commitments and proposals carry it: ``0 … MAX_LOSS_MICRO`` (the contract's bound)."""


class BeaconJoin(Boundary):
    """Joining an epoch: the beacon commitment ``H("beacon/commit", address || 0 || epoch || secret)``."""

    epoch: Count
    beacon_commit: HexDigest


class BeaconReveal(Boundary):
    """Revealing the beacon secret (32 bytes, hex) after commitments are closed."""

    epoch: Count
    secret: HexDigest


class Commitment(Boundary):
    """A host's commitment to its epoch of work, posted before the commit deadline.

    ``checkpoint_root`` is the Merkle root over the ``segments + 1`` checkpoint leaf hashes
    (leaf 0 is the start state θ_e); ``delta_hash`` hashes the quantized pseudo-gradient exactly
    as it will be served; ``loss_digest`` commits to all per-step losses; ``train_loss_micro`` is
    :func:`protocol.rules.losses.train_loss_micro` of those losses (the mean of the last segment),
    which validators check against the losses the host serves.
    """

    epoch: Count
    checkpoint_root: HexDigest
    delta_hash: HexDigest
    loss_digest: HexDigest
    segments: int = Field(ge=1, le=MAX_SEGMENTS, strict=True)
    train_loss_micro: LossMicro


class Verdict(Boundary):
    """A validator's verdict on one challenged segment of one host."""

    epoch: Count
    host: Address
    segment: int = Field(ge=0, lt=MAX_SEGMENTS, strict=True)
    outcome: Outcome
    distance: Dec = Decimal(0)
    evidence: HexDigest

    @field_validator("distance")
    @classmethod
    def _distance(cls, v: Decimal) -> Decimal:
        if v < 0 or v > Decimal(10) ** 9:
            raise ValueError("distance must be in [0, 1e9]")
        # Keep the on-chain text short: 9 significant digits are plenty for a relative distance.
        return v if len(v.as_tuple().digits) <= 9 else Decimal(f"{v:.9g}")


class ModelProposal(Boundary):
    """An accepted host's proposal for the next global model, with its measured validation loss."""

    epoch: Count
    model_hash: HexDigest
    val_loss_micro: LossMicro


def evidence_hash(*parts: bytes) -> str:
    """Digest of a validator's evidence (the bytes it measured), posted with a verdict."""
    return tagged_hash(Tag.EVIDENCE, *parts).hex()
