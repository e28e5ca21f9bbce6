"""What the chain tells its readers: members, epochs, challenges, and the per-epoch report.

These models mirror the contract's query responses field for field; the Ledger validates every
response into them, so code above ``chain/`` never handles raw JSON. The contract is the single
source of these values; nothing here recomputes settlement.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import Field

from protocol.messages import Commitment, GainMicro, LossMicro, ModelProposal, Outcome, Role
from protocol.rules.classes import CLASS_PATTERN
from protocol.rules.hashing import HexDigest
from protocol.rules.limits import MAX_SEGMENTS
from protocol.types import Address, Amount, Boundary, Count, Dec

Phase = Literal["join", "train", "reveal", "delay", "verify", "objection", "verdict_reveal", "dispute",
                "dispute_reveal", "propose", "closed"]
"""``delay`` (``verification.delay_squarings`` > 0 only): the seed is fixed and the epoch waits for
the VDF output over it (``protocol.rules.vdf``), which picks every host's challenges."""
ClosingStage = Literal["seed", "assign", "objections", "decide", "outcomes", "slashes", "rewards", "exclusions"]
"""The stages of a close that runs over several transactions (closing ``reveal``: ``seed``,
``assign``; closing ``objection``: ``objections``; closing ``verdict_reveal`` and
``dispute_reveal``: ``decide``; finalize: ``outcomes``, ``slashes``, ``rewards``)."""
VERDICT_COMMIT_PHASES: tuple[Phase, ...] = ("verify", "dispute")
"""Phases in which validators commit to verdicts."""
VERDICT_REVEAL_PHASES: tuple[Phase, ...] = ("verdict_reveal", "dispute_reveal")
"""Phases in which validators open their verdicts."""
REVOTE_ROUND = 2
""":attr:`Challenge.round` of a round-0 seat's re-vote: a seat that objected commits again in ``dispute``
(after reading the leaves again, from the host or a holder) and opens it after its round-0 verdict in
``dispute_reveal``; it replaces a round-0 ``unavailable`` and must repeat a round-0 ``fail``."""
ChallengeOutcome = Literal["pending", "pass", "fail", "unavailable", "unresolved"]
HostOutcome = Literal["pending", "accepted", "invalid", "unavailable", "excluded", "absent", "absent_excused",
                      "sat_out", "no_reveal"]
"""``sat_out``: the host sent ``sit_out`` in ``train`` (it would finish no segment): not challenged,
paid or slashed in the epoch (``no_reveal`` instead when it then withheld its beacon reveal).
``absent_excused``: it sent nothing in ``train`` (a machine that was down), its first miss in the last
``economics.miss_window_epochs`` epochs: treated as a sit-out (``no_reveal`` when it did not reveal
either); ``absent`` is a repeated miss, slashed ``slash_absent_bps``."""
ValidatorOutcome = Literal["pending", "diligent", "unserved", "wrong", "silent", "no_reveal", "idle"]


class Unbonding(Boundary):
    amount: Amount
    release_epoch: Count


class Member(Boundary):
    """A bonded participant. Unbonding stake stays slashable until it is claimed."""

    address: Address
    role: Role
    endpoint: str
    bonded: Amount
    unbonding: list[Unbonding] = Field(default_factory=list)
    slashed_total: Amount = "0"
    rewarded_total: Amount = "0"


class Standby(Boundary):
    """Answer to ``standby {member}`` (contract 0.3.1 onwards): the standby revealer ``member``
    named with ``set_standby``, the one address other than its own that may send its ``reveal``
    (docs/contract.md, "A standby revealer"); None when it named none."""

    member: Address
    standby: Address | None = None


class Config(Boundary):
    """The contract's configuration: the run spec (canonical JSON) and where the run started."""

    run_id: HexDigest
    spec_json: str
    initial_model_hash: HexDigest
    denom: str
    treasury: Address
    admin: Address | None = None


class Accounting(Boundary):
    """Everything the contract holds, by purpose; their sum equals its bank balance."""

    bonded: Amount
    unbonding: Amount
    reward_pool: Amount


class EpochCounts(Boundary):
    """How many hosts and validators joined an epoch, how many hosts committed and how many were
    accepted: the lengths of :class:`EpochInfo`'s four lists, from the epoch's counters
    (``counts: true``, contract 0.3.4 onwards; docs/contract.md, "Queries")."""

    hosts: Count
    validators: Count
    committed: Count
    accepted: Count

    @classmethod
    def of(cls, info: EpochInfo) -> EpochCounts:
        """The lengths of ``info``'s lists (an answer with them)."""
        return cls(hosts=len(info.hosts), validators=len(info.validators), committed=len(info.committed),
                   accepted=len(info.accepted))


class EpochInfo(Boundary):
    """The state of one epoch as participants need it to act.

    ``phase_deadline`` is the height at which the phase closes (a message at that height is
    already late); for a closed epoch it is the height it closed at. The stored phase changes only
    with a transaction, so a phase past its deadline shows until someone's transaction (any
    ``advance``) closes it. ``agreed`` is set when the epoch closes: whether θ_{e+1}
    (``next_model_hash``) was backed by more than 2/3 of the accepted hosts' stake; when it is
    false, θ_{e+1} = θ_e. ``closing`` names the stage of a close that runs page by page (closing
    ``reveal``, closing a verdict round, finalize): the phase then shows as due (its deadline is
    the height the close began), its own messages are refused, and every transaction
    (``advance``) processes the next page.
    """

    epoch: Count
    phase: Phase
    phase_deadline: Count
    started_at: Count
    model_hash: HexDigest
    prev_seed: HexDigest
    seed: HexDigest | None = None
    next_model_hash: HexDigest | None = None
    agreed: bool | None = None
    # Absent from a header-only answer (``lists: false``, contract 0.3.2 onwards): read as empty.
    hosts: list[Address] = Field(default_factory=list)
    validators: list[Address] = Field(default_factory=list)
    committed: list[Address] = Field(default_factory=list)
    accepted: list[Address] = Field(default_factory=list)
    # The lists' lengths (``counts: true``, contract 0.3.4 onwards); None when not asked for, from
    # an older contract, or for an epoch whose exclusions were settled by one (read the report).
    counts: EpochCounts | None = None
    round: Count = 0
    abandoned: bool = False
    closing: ClosingStage | None = None
    # Pipelined runs (docs/contract.md, "Pipelined epochs"): the optimistic θ_{e+1} epoch e + 1
    # opened from while this one settles; for an epoch opened from such a start, the settled θ_e
    # once its predecessor closed (what θ_{e+1} falls back to when no model is agreed); and, in
    # the answer about the current epoch, the older epoch still settling.
    start_model_hash: HexDigest | None = None
    settled_start: HexDigest | None = None
    settling: Count | None = None
    # With ``verification.delay_squarings`` > 0: ``H("vdf/seed", y)`` once the VDF output ``y`` over
    # ``seed`` was posted (phase ``delay``); the challenges are drawn from it.
    delayed_seed: HexDigest | None = None


class ComputeClassStatus(Boundary):
    """A compute-profile class in one epoch (the contract's ``compute_class`` query): its validators
    that joined so far with their stake at join, how many must join for it to be ``served``
    (``protocol.rules.classes.served``), and its validators in the previous epoch's V. What a host
    reads before it joins: a host of a class that is not served when ``reveal`` closes is not checked
    and ends ``excluded`` (``docs/contract.md``, "Compute-profile classes")."""

    epoch: Count
    phase: Phase
    class_: str = Field(alias="class", pattern=CLASS_PATTERN)
    validators: Count
    stake: Amount
    needed: Count
    served: bool
    previous_validators: Count
    previous_stake: Amount


class ParticipantStatus(Boundary):
    """One participant's part in one epoch, with the epoch's phase: what a node polls each tick to
    know what it has done and what is due (the contract's ``participant`` query, a few reads).

    ``joined`` is false (and ``role`` None, ``stake`` 0) for an address that did not join the
    epoch. ``assigned`` and ``voted`` count a validator's seats in every round and the verdicts it
    opened on them (0 before the close of reveal, and for hosts); ``to_commit`` and ``to_reveal``
    count the challenges the current phase still waits for its commitment or its opening on;
    ``ready_due`` says it holds round-0 seats and owes its ``ready`` (in ``objection``).
    ``challenged`` says a host has challenges (so it opens its trap commitment in ``objection``),
    ``traps_opened`` that it did. ``outcome`` is ``pending`` until the
    contract decides it (at ``sit_out`` for a host that sat out, at the close of reveal for absent (or
    absent_excused) and non-revealing participants, at finalize for everyone else).
    """

    epoch: Count
    phase: Phase
    phase_deadline: Count
    model_hash: HexDigest
    prev_seed: HexDigest
    address: Address
    joined: bool
    role: Role | None = None
    stake: Amount = "0"
    committed: bool = False
    revealed: bool = False
    round: Count = 0
    assigned: Count = 0
    voted: Count = 0
    to_commit: Count = 0
    to_reveal: Count = 0
    ready_due: bool = False
    challenged: bool = False
    traps_opened: bool = False
    outcome: HostOutcome | ValidatorOutcome = "pending"
    proposed: bool = False

    @property
    def accepted(self) -> bool:
        """An accepted host: its Δ enters aggregation and it may propose θ_{e+1}."""
        return self.outcome == "accepted"


class AggregationInput(Boundary):
    """An accepted host of an epoch: where it serves its Δ, the hash the Δ must have, and the
    segments it covers (S, or fewer for a partial epoch: its weight in the aggregate)."""

    address: Address
    endpoint: str
    delta_hash: HexDigest
    segments: int = Field(ge=1, le=MAX_SEGMENTS, strict=True)
    gain_micro: GainMicro | None = None
    """Its probe gain as decided on its last segment (None: the run's probe is off)."""


class Challenge(Boundary):
    """One challenged segment as a validator sees it: what to replay and against which commitment,
    the round it sits on it in (0: a round-0 seat; 1: the final vote of a disputed challenge;
    :data:`REVOTE_ROUND`: an objecting round-0 seat's re-vote, listed right after its seat), the
    challenge's round-0 seats, whether it committed and opened its verdict, whether the challenge is
    disputed, whether the current phase waits for it on it (``due``: its commitment in ``verify``
    and ``dispute``, its opening in ``verdict_reveal`` and ``dispute_reveal``), and the outcome so
    far."""

    epoch: Count
    host: Address
    segment: Count
    segments: Count
    checkpoint_root: HexDigest
    delta_hash: HexDigest
    loss_digest: HexDigest
    train_loss_micro: LossMicro
    endpoint: str
    round: Count = 0
    validators: list[Address]
    committed: bool = False
    revealed: bool = False
    disputed: bool = False
    gain_dispute: bool = False
    """A gain dispute (its round-0 ``pass``es opened different probe gains): every round-0 seat
    re-votes, and every deciding vote carries the host's gain on its dispute windows too
    (:func:`trainer.probe.dispute_starts`; docs/contract.md, "The probe gain"). Optional: a
    contract before 0.3.0 never sends it (nodes upgrade first, docs/chain.md "Upgrades")."""
    due: bool = False
    outcome: ChallengeOutcome = "pending"

    @classmethod
    def of(cls, commitment: Commitment, host: str, segment: int, endpoint: str,
           validators: list[str]) -> Challenge:
        """The challenge of ``segment`` of ``host``'s ``commitment`` (as the contract lists it)."""
        return cls(epoch=commitment.epoch, host=host, segment=segment, segments=commitment.segments,
                   checkpoint_root=commitment.checkpoint_root, delta_hash=commitment.delta_hash,
                   loss_digest=commitment.loss_digest, train_loss_micro=commitment.train_loss_micro,
                   endpoint=endpoint, validators=validators)


class Vote(Boundary):
    """One member's part in a challenge: its round, its verdict commitment (public once posted;
    it reveals nothing) and its opened verdict."""

    validator: Address
    round: Count = 0
    commitment: HexDigest | None = None
    outcome: Outcome | None = None
    distance: Dec | None = None
    evidence: HexDigest | None = None
    salt: HexDigest | None = None
    gain_micro: GainMicro | None = None
    """The host's probe gain its opened verdict carries (the host's last segment, probe on)."""
    dispute_gain_micro: GainMicro | None = None
    """In a gain dispute: the opened vote's gain on the host's dispute windows."""
    round0_gain_micro: GainMicro | None = None
    """In a gain dispute: the main-window gain the seat's round-0 ``pass`` opened, which its re-vote
    (the other fields) followed; judged against the decided gain at finalize."""


class ChallengeReport(Boundary):
    host: Address
    segment: Count
    trap: bool = False
    rounds: Count = 0
    objectors: list[Address] = Field(default_factory=list)
    votes: list[Vote]
    outcome: ChallengeOutcome
    gain_micro: GainMicro | None = None
    """The probe gain the decision carries (the host's last segment, probe on)."""


class HostReport(Boundary):
    address: Address
    stake: Amount
    weight: Amount | None = None
    """Its weight in the epoch's start and model votes when below ``stake`` (a slash of the epoch
    before landed after it joined: docs/contract.md, "A slash of e lands after e + 1's join";
    contract 0.3.6 onwards); None: its stake at join."""
    revealed: bool
    commitment: Commitment | None = None
    outcome: HostOutcome
    slashed: Amount = "0"
    reward: Amount = "0"
    catcher_reward: Amount = "0"
    traps: list[Count] | None = None
    proposal: ModelProposal | None = None
    compute_class: str = Field(default="", pattern=CLASS_PATTERN)
    gain_micro: GainMicro | None = None
    """Its probe gain in micro-nats as decided on its last segment (None: probe off, not decided)."""


class ValidatorReport(Boundary):
    address: Address
    stake: Amount
    weight: Amount | None = None
    """Its weight in the epoch's picker draw, seats and final votes when below ``stake`` (a slash
    of the epoch before landed after it joined: docs/contract.md, "A slash of e lands after
    e + 1's join"; contract 0.3.5 onwards); None: its stake at join."""
    revealed: bool
    assigned: Count = 0
    committed: Count = 0
    voted: Count = 0
    against: Count = 0
    unavailable: Count = 0
    unserved: Count = 0
    outcome: ValidatorOutcome
    slashed: Amount = "0"
    reward: Amount = "0"
    catcher_reward: Amount = "0"
    compute_class: str = Field(default="", pattern=CLASS_PATTERN)


class ValidatorPart(Boundary):
    """An item of a :class:`ReportPage`'s ``validators``: a :class:`ValidatorReport` without the
    counts, which each page gives for its own challenges (:class:`ValidatorCounts`)."""

    address: Address
    stake: Amount
    weight: Amount | None = None
    revealed: bool
    outcome: ValidatorOutcome
    slashed: Amount = "0"
    reward: Amount = "0"
    catcher_reward: Amount = "0"
    compute_class: str = Field(default="", pattern=CLASS_PATTERN)


def weight(member: HostReport | ValidatorReport | ValidatorPart) -> int:
    """What a participant weighs in its epoch's votes (a validator: also the picker draw and
    seats): its ``weight`` when the report gives one, else its stake at join."""
    return int(member.weight if member.weight is not None else member.stake)


def validator_weights(validators: Iterable[ValidatorReport | ValidatorPart]) -> dict[str, int]:
    """Address -> what each validator weighs in its epoch's picker draw, seats and final votes
    (``protocol.rules.sampling.pickers``'s stakes): its ``weight`` when the report gives one,
    else its stake at join."""
    return {v.address: weight(v) for v in validators}


class ValidatorCounts(Boundary):
    """How a validator did on the challenges of one :class:`ReportPage`'s hosts; summed over every
    page they are its :class:`ValidatorReport` counts (a challenge is on its host's page only)."""

    validator: Address
    assigned: Count = 0
    committed: Count = 0
    voted: Count = 0
    against: Count = 0
    unavailable: Count = 0
    unserved: Count = 0


COUNT_FIELDS = ("assigned", "committed", "voted", "against", "unavailable", "unserved")
"""The fields of :class:`ValidatorCounts` that :func:`assemble_report` sums."""

REPORT_HEADER = ("run_id", "epoch", "phase", "phase_deadline", "started_at", "model_hash", "next_model_hash",
                 "agreed", "seed", "round", "abandoned", "slashed_total", "to_treasury", "to_catchers",
                 "rewards_total")
"""The fields of :class:`EpochReport` that every :class:`ReportPage` repeats."""


class ReportPage(Boundary):
    """One page of the contract's ``report`` query: the epoch's header, and the participants after
    the page's cursor in address order (each host with its challenges, each validator without its
    counts, and the counts the page's challenges give their validators). ``next``: the last
    participant the page covered, when more follow; with ``next_segment``, the host whose
    challenges the page stopped inside (a host too large for one page: its line is on its first
    page, its challenges on as many as they need). :func:`assemble_report` builds the
    :class:`EpochReport` from every page."""

    run_id: HexDigest
    epoch: Count
    phase: Phase
    phase_deadline: Count = 0
    started_at: Count
    model_hash: HexDigest
    next_model_hash: HexDigest | None = None
    agreed: bool | None = None
    seed: HexDigest | None = None
    round: Count = 0
    abandoned: bool = False
    slashed_total: Amount = "0"
    to_treasury: Amount = "0"
    to_catchers: Amount = "0"
    rewards_total: Amount = "0"
    hosts: list[HostReport]
    validators: list[ValidatorPart]
    challenges: list[ChallengeReport]
    counts: list[ValidatorCounts]
    next: Address | None = None
    # A host split over pages (contract 0.3.3 onwards): the page stopped inside host ``next``, and
    # the next page resumes at its challenge of this segment (``start_segment``).
    next_segment: Count | None = None

    def header(self) -> dict[str, object]:
        """The epoch's fields this page repeats (:data:`REPORT_HEADER`)."""
        return {name: getattr(self, name) for name in REPORT_HEADER}


def assemble_report(pages: list[ReportPage]) -> EpochReport:
    """The whole report of an epoch from its pages, read in order from the first (no cursor) to the
    last (no ``next``): the header they all carry, the hosts, validators and challenges in page
    order, and each validator's counts summed over the pages.

    Raises:
        ValueError: no pages, pages of different epochs or headers (the epoch moved between two
            reads), a page that is not the last without ``next``, or a participant listed twice.
    """
    if not pages:
        raise ValueError("a report needs at least one page")
    header = pages[0].header()
    for i, page in enumerate(pages):
        if page.header() != header:
            raise ValueError(f"report page {i} shows another state of epoch {header['epoch']} than page 0")
        if (page.next is None) != (i == len(pages) - 1):
            raise ValueError(f"report page {i} of {len(pages)} {'ends' if page.next is None else 'goes on'}")
    hosts = [h for p in pages for h in p.hosts]
    parts = [v for p in pages for v in p.validators]
    addresses = [h.address for h in hosts] + [v.address for v in parts]
    if len(set(addresses)) != len(addresses):
        raise ValueError("a participant is listed twice in the report's pages")
    sums: dict[str, dict[str, int]] = {}
    for page in pages:
        for c in page.counts:
            total = sums.setdefault(c.validator, dict.fromkeys(COUNT_FIELDS, 0))
            for name in COUNT_FIELDS:
                total[name] += getattr(c, name)
    # Counts of an address that is not among the validators are dropped, as the whole-epoch
    # report dropped them (only a participant has a line).
    validators = [ValidatorReport.model_validate({**v.model_dump(), **sums.get(v.address, {})}) for v in parts]
    return EpochReport.model_validate({**header, "hosts": hosts, "validators": validators,
                                       "challenges": [c for p in pages for c in p.challenges]})


class EpochReport(Boundary):
    """Everything an operator wants to see about one epoch, straight from the contract (the
    ``report`` query's pages, assembled by :func:`assemble_report`)."""

    run_id: HexDigest
    epoch: Count
    phase: Phase
    phase_deadline: Count = 0
    started_at: Count
    model_hash: HexDigest
    next_model_hash: HexDigest | None = None
    agreed: bool | None = None
    seed: HexDigest | None = None
    round: Count = 0
    abandoned: bool = False
    hosts: list[HostReport]
    validators: list[ValidatorReport]
    challenges: list[ChallengeReport]
    slashed_total: Amount = "0"
    to_treasury: Amount = "0"
    to_catchers: Amount = "0"
    rewards_total: Amount = "0"
