//! The per-epoch records, their types and their [`Map`]s.
//!
//! Gas on a real chain is dominated by storage (wasmd charges about 30 gas per byte written and
//! 3 per byte read, plus a flat cost per access), so an epoch is NOT one big value rewritten by
//! every message. Each message writes its own small record, plus the few-dozen-byte counters:
//!
//! | key | value | written by |
//! | --- | --- | --- |
//! | `ep/` e | [`EpochHeader`] (phase, deadline, hashes, seed, settlement totals) | phase changes |
//! | `en/` e | [`Counts`] (how many joined, committed, revealed, voted, proposed, were accepted or withdrawn) | every epoch message, finalize, exclusions |
//! | `pa/` e addr | [`Participant`] (role, stake at join, beacon commitment) | join |
//! | `po/` e addr | [`Payout`] (outcome, slashed, reward, catcher share) | sit_out, reveal close (absent, absent_excused, no_reveal), finalize |
//! | `cm/` e addr | [`Commitment`] | commit |
//! | `rv/` e addr | the 32-byte beacon secret | reveal |
//! | `js/` e role key | a joined member's seat, keyed `[mark] || hex32(stake) || hex(seat rank) || address` (mark: `-` for a host that missed one of the last W epochs, `-!` `hex2(255 − m)` for m > 1) so the smallest seat comes first | join (and eviction) |
//! | `vj/` e | the validators that joined, in address order, with their stake at join | close of join |
//! | `vs/` e | the epoch's validators V (joined and revealed), in address order | reveal close |
//! | `vw/` e | the stake at join of each member of V (same order) | reveal close |
//! | `st/` e | the members of V with a round-0 seat (indices into V, ascending) | reveal close |
//! | `cs/` e host | [`Assignment`]s: challenged segments of a host, their round-0 seats and objectors as indices into V, whether disputed, and the decision | reveal close, ready, objection close, final decision |
//! | `rd/` e validator | the objections of a validator's `ready`s, once its last was sent | ready |
//! | `rq/` e validator | the objections of its `ready`s so far, while more follow | ready |
//! | `vc/` e host 0x00 u32be(segment) validator | a verdict commitment (64 hex) | commit_verdict |
//! | `vo/` e host 0x00 u32be(segment) validator | [`Vote`]: the opened verdict | reveal_verdict |
//! | `vx/` e host 0x00 u32be(segment) validator | an objecting round-0 seat's re-vote commitment (64 hex) | commit_verdict (dispute) |
//! | `tr/` e host | the host's opened trap segments | reveal_traps |
//! | `pr/` e addr | [`Proposal`] | propose_model |
//! | `pt/` e model_hash | the stake behind a proposed hash | propose_model |
//! | `vt/` e validator | [`Standing`]: a validator's counts over the hosts settled so far, while finalize pages run | finalize (removed when the validator is settled) |
//! | `ss/` e validator | `crate::sittings` counts: a validator's seats, re-votes, commitments and openings, what `participant` reads | reveal close, commit_verdict, reveal_verdict, objection close, verdict_reveal close |
//! | `de/` e electorate | the disputed challenges whose final round an electorate (`*`: all of V, or a class) votes in | objection close, verdict_reveal close |
//! | `sk/` e "" | marker: the epoch's sittings are counted (absent: assigned by an older version) | reveal close |
//!
//! `e` is the epoch as 8 big-endian bytes, so keys sort by epoch, then by address: a prefix scan
//! of one epoch (`MAP.prefix(e)`) yields its records in address order (the order the seed and the
//! reports use). The often-written records use one- or two-letter field names (bytes written
//! cost gas); the header, written a few times per epoch, keeps readable ones.
//!
//! A new record type is a struct here and one `Map` line below; `docs/chain.md` lists the keys.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::deps::Storage;
use crate::error::ContractError;
use crate::state::Role;
use crate::storage::{Map, Raw};
use crate::types::{is_zero, Uint128};

pub const HEADERS: Map<u64, EpochHeader> = Map::new(b"ep/");
pub const COUNTS: Map<u64, Counts> = Map::new(b"en/");
pub const PARTICIPANTS: Map<(u64, &str), Participant> = Map::new(b"pa/");
pub const PAYOUTS: Map<(u64, &str), Payout> = Map::new(b"po/");
pub const COMMITMENTS: Map<(u64, &str), Commitment> = Map::new(b"cm/");
/// The 32 bytes of each valid reveal, as they are.
pub const REVEALS: Map<(u64, &str), [u8; 32], Raw> = Map::new(b"rv/");
/// V: the validators that joined and revealed, in address order (assignments index into it).
pub const VALIDATOR_SETS: Map<u64, Vec<String>> = Map::new(b"vs/");
/// The weight of each member of V, in V's order: its stake at join, or less when a slash of the
/// epoch before landed after it joined (`WEIGHT_CAPS`).
pub const VALIDATOR_STAKES: Map<u64, Vec<Uint128>> = Map::new(b"vw/");
/// A validator of epoch e that a slash of epoch e − 1 reached after it joined e (pipelined runs;
/// e's reveal close waits for e − 1 to close, so before it): the stake it still had at risk, bonded plus unbonding,
/// after that slash. That close makes the smaller of this and its stake at join its weight in e
/// (`Participant::weight`, `VALIDATOR_STAKES`, the picker draw's `JOINED_VALIDATORS`;
/// `docs/contract.md`, "A slash of e lands after e + 1's join"). Kept as the record of the cap.
pub const WEIGHT_CAPS: Map<(u64, &str), Uint128> = Map::new(b"wk/");
/// The validators that joined (V_joined), in address order, with their stake at join: who may
/// pick challenges (written when the join phase closes).
pub const JOINED_VALIDATORS: Map<u64, Vec<(String, Uint128)>> = Map::new(b"vj/");
/// The compute-profile class each of `JOINED_VALIDATORS` declared at join, in the same order
/// (`crate::classes`; absent in epochs joined before classes existed: all "").
pub const JOINED_CLASSES: Map<u64, Vec<String>> = Map::new(b"vk/");
/// The seats of a joined epoch by role (`h`, `v`), keyed so that the smallest stake (then the
/// smallest seat rank) comes first: who a newcomer of a full epoch evicts.
pub const SEATS: Map<(u64, &str, &str), u8> = Map::new(b"js/");
/// The members of V that hold a round-0 seat (indices into V, ascending): who owes a `ready`.
pub const SEATED: Map<u64, Vec<u16>> = Map::new(b"st/");
/// A validator's `ready`: the challenges (host, segment) it objected to (written by its last
/// `ready`, the one with fewer than `MAX_OBJECTIONS_PER_READY` objections).
pub const READY: Map<(u64, &str), Vec<(String, u32)>> = Map::new(b"rd/");
/// The objections of a validator's `ready`s so far while more follow (each of those carried
/// exactly `MAX_OBJECTIONS_PER_READY`); moved to `READY` by its last.
pub const READY_SO_FAR: Map<(u64, &str), Vec<(String, u32)>> = Map::new(b"rq/");
/// The challenged segments of each committed, revealed host.
pub const ASSIGNMENTS: Map<(u64, &str), Vec<Assignment>> = Map::new(b"cs/");
/// Verdict commitments, keyed by (epoch, host, segment, validator).
pub const VERDICT_COMMITS: Map<(u64, &str, u32, &str), String> = Map::new(b"vc/");
/// Re-vote commitments of objecting round-0 seats in `dispute` (their verdict after reading the
/// leaves again), keyed by (epoch, host, segment, validator).
pub const REVOTE_COMMITS: Map<(u64, &str, u32, &str), String> = Map::new(b"vx/");
/// Opened verdicts, keyed by (epoch, host, segment, validator).
pub const VOTES: Map<(u64, &str, u32, &str), Vote> = Map::new(b"vo/");
/// The trap segments a host opened (an empty list for an honest host that opened the empty set).
pub const TRAPS: Map<(u64, &str), Vec<u32>> = Map::new(b"tr/");
pub const PROPOSALS: Map<(u64, &str), Proposal> = Map::new(b"pr/");
/// The accepted stake behind each proposed model hash.
pub const BACKING: Map<(u64, &str), Uint128> = Map::new(b"pt/");
/// Pipelined runs: each committed host's proposed optimistic start θ_{e+1}, and the committed
/// stake behind each start hash (`epoch::pipeline`).
pub const START_PROPOSALS: Map<(u64, &str), String> = Map::new(b"sp/");
pub const START_BACKING: Map<(u64, &str), Uint128> = Map::new(b"sb/");
/// The accepted stake of the proposals of a model hash that excluded a host's Δ, keyed by
/// (epoch, model hash, excluded host): settled at the close of `propose` for the agreed hash.
pub const EXCLUSIONS: Map<(u64, &str, &str), Uint128> = Map::new(b"xb/");
/// A validator's counts gathered from the hosts finalize has settled so far (kept only while
/// finalize runs page by page).
pub const STANDINGS: Map<(u64, &str), Standing> = Map::new(b"vt/");
/// Pipelined runs: what the slashes of epoch e − 1 took off the host vote totals of epoch e
/// after they had counted a host at its stake at join (`HostCuts`); e − 1's finalize writes it,
/// e takes it off its totals when e − 1 closes, before any host of e votes.
pub const HOST_CUTS: Map<u64, HostCuts> = Map::new(b"hc/");

/// A host of epoch e that a slash of epoch e − 1 reached after it joined e weighs in e's votes
/// only what it still has at risk (`Participant::weight`). The start vote's total counted it
/// already if it committed before the slash: the difference to take off it. (The model vote's
/// total, the accepted stake, never counted it: e's outcomes come after e's reveal close, which
/// waits for e − 1 to close. Contract 0.3.6 stored a second field `a` for it, ignored now.)
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostCuts {
    /// Off `Counts::committed_stake`.
    #[serde(rename = "c", default, skip_serializing_if = "is_zero")]
    pub committed: Uint128,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Join,
    Train,
    Reveal,
    /// With `verification.delay_squarings` > 0: the seed is fixed; anyone posts the VDF output
    /// over it (`delayed_seed`), which picks the challenges. Closes on a valid output, or, with
    /// `verification.delay_blocks` > 0, once that window passed (each picker's own picks then).
    Delay,
    /// Round-0 seats commit to their verdicts.
    Verify,
    /// Seated validators send `ready` with their objections; hosts open their trap commitments.
    Objection,
    /// Seats of undisputed challenges open their `pass` verdicts.
    VerdictReveal,
    /// Every validator of V without a round-0 seat on a disputed challenge commits a verdict.
    Dispute,
    /// Everyone who sat on a disputed challenge opens its verdict.
    DisputeReveal,
    Propose,
    Closed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Join => "join",
            Phase::Train => "train",
            Phase::Reveal => "reveal",
            Phase::Delay => "delay",
            Phase::Verify => "verify",
            Phase::Objection => "objection",
            Phase::VerdictReveal => "verdict_reveal",
            Phase::Dispute => "dispute",
            Phase::DisputeReveal => "dispute_reveal",
            Phase::Propose => "propose",
            Phase::Closed => "closed",
        }
    }

    /// A phase in which validators commit to verdicts.
    pub fn commits_verdicts(self) -> bool {
        matches!(self, Phase::Verify | Phase::Dispute)
    }

    /// A phase in which validators open verdicts.
    pub fn reveals_verdicts(self) -> bool {
        matches!(self, Phase::VerdictReveal | Phase::DisputeReveal)
    }
}

/// The outcome of a participant in an epoch (hosts and validators share one enum; the
/// reports split them into `protocol.views.HostOutcome` / `ValidatorOutcome`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pending,
    // hosts
    Accepted,
    Invalid,
    Unavailable,
    /// A host with a challenge no dispute could decide: its Δ is excluded, it is not slashed.
    Excluded,
    /// Joined and sent nothing in `train` (no commitment, no `sit_out`) and missed another
    /// epoch of the last `miss_window_epochs`: slashed `slash_absent_bps`.
    Absent,
    /// Absent, but its first miss in `miss_window_epochs` epochs (a machine that fails now and
    /// then), and it revealed: treated as a sit-out, neither paid nor slashed.
    AbsentExcused,
    /// Sent `sit_out` in `train` (it would finish no segment): committed nothing, not
    /// challenged, not paid, not slashed (as long as it reveals its beacon secret).
    SatOut,
    // both
    NoReveal,
    // validators
    Diligent,
    /// Said `unavailable` where the final vote decided `pass` or `fail` (the host served the
    /// others): slashed `slash_validator_unserved_bps`.
    Unserved,
    Wrong,
    Silent,
    Idle,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pending => "pending",
            Outcome::Accepted => "accepted",
            Outcome::Invalid => "invalid",
            Outcome::Unavailable => "unavailable",
            Outcome::Excluded => "excluded",
            Outcome::Absent => "absent",
            Outcome::AbsentExcused => "absent_excused",
            Outcome::SatOut => "sat_out",
            Outcome::NoReveal => "no_reveal",
            Outcome::Diligent => "diligent",
            Outcome::Unserved => "unserved",
            Outcome::Wrong => "wrong",
            Outcome::Silent => "silent",
            Outcome::Idle => "idle",
        }
    }
}

impl Default for Outcome {
    fn default() -> Self {
        Outcome::Pending
    }
}

fn is_pending(outcome: &Outcome) -> bool {
    *outcome == Outcome::Pending
}

/// What a validator reports about one challenged segment.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum VoteOutcome {
    Pass,
    Fail,
    Unavailable,
}

impl VoteOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            VoteOutcome::Pass => "pass",
            VoteOutcome::Fail => "fail",
            VoteOutcome::Unavailable => "unavailable",
        }
    }

    /// The byte a verdict commitment hashes for this outcome (`docs/protocol.md`).
    pub fn code(self) -> u8 {
        match self {
            VoteOutcome::Pass => 0,
            VoteOutcome::Fail => 1,
            VoteOutcome::Unavailable => 2,
        }
    }
}

/// The state of one challenge (`protocol.views.ChallengeOutcome`): pending until a round decides
/// it, then `pass`, `fail` (the segment does not replay), `unavailable` (the host did not serve a
/// majority) or `unresolved` (no round could decide: the host's Δ is excluded, nobody is wrong).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ChallengeOutcome {
    Pending,
    Pass,
    Fail,
    Unavailable,
    Unresolved,
}

impl Default for ChallengeOutcome {
    fn default() -> Self {
        ChallengeOutcome::Pending
    }
}

impl ChallengeOutcome {
    /// The vote that agrees with a pass/fail decision (None otherwise: nobody can be wrong).
    pub fn decided_vote(self) -> Option<VoteOutcome> {
        match self {
            ChallengeOutcome::Pass => Some(VoteOutcome::Pass),
            ChallengeOutcome::Fail => Some(VoteOutcome::Fail),
            _ => None,
        }
    }

    pub fn is_pending(&self) -> bool {
        *self == ChallengeOutcome::Pending
    }
}

/// The small, rarely written part of an epoch.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct EpochHeader {
    pub epoch: u64,
    pub phase: Phase,
    /// The height at which the phase closes (for a closed epoch: the height it closed at).
    pub phase_deadline: u64,
    pub started_at: u64,
    /// θ_e.
    pub model_hash: String,
    /// The seed of epoch e − 1 (the genesis seed for epoch 0).
    pub prev_seed: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
    /// θ_{e+1}, once the epoch closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_model_hash: Option<String>,
    /// Whether θ_{e+1} was agreed by more than 2/3 of the accepted stake (set at close).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agreed: Option<bool>,
    /// The dispute round in progress (0 before any dispute).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub round: u32,
    /// How many times the join phase was extended for want of its minimums.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub extensions: u32,
    /// Closed without playing: the join phase ran out of extensions.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abandoned: bool,
    /// Sum of the accepted hosts' stake at join (the weight of the model vote).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub accepted_stake: Uint128,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slashed_total: Uint128,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub to_treasury: Uint128,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub to_catchers: Uint128,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rewards_total: Uint128,
    /// A close in progress (several transactions), None otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closing: Option<Closing>,
    /// Pipelined runs: the optimistic θ_{e+1} this epoch's committed hosts agreed on, from which
    /// epoch e + 1 opened while this one settles (`epoch::pipeline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_model_hash: Option<String>,
    /// Pipelined runs, an epoch that opened from an optimistic start: the settled θ_e (its
    /// predecessor's `next_model_hash`) once that predecessor closed. What θ_{e+1} falls back
    /// to when this epoch's own model is not agreed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_start: Option<String>,
    /// With `verification.delay_squarings` > 0: `H("vdf/seed", y)` for the VDF output `y` over
    /// `seed`, once posted (phase `delay`); every host's challenges are drawn from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delayed_seed: Option<String>,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

/// A phase close that takes several transactions (`docs/contract.md`, "Limits"): closing
/// `reveal` (the seed, then the outcomes and challenges) and finalize (host outcomes, slashes,
/// rewards) each walk the epoch's records in address order, a bounded page per transaction.
/// While it runs the phase keeps its name, its deadline is the height the close began (so it
/// reads as due, and nodes send `advance`), and the phase's own messages are refused.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Closing {
    pub stage: Stage,
    /// The last address (reveal or participant) the stage processed; None: from the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// The epoch seed's hash over the reveals read so far (stage `seed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_hash: Option<crate::hashing::StreamHash>,
    /// Valid reveals read (stage `seed`).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub reveals: u32,
    /// Finalize: what the epoch pays in rewards, `min(reward_per_epoch, reward_pool)` when
    /// finalize began.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reward: Uint128,
    /// Finalize: diligent validators (counted by stage `slashes`).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub diligent: u32,
    /// A verdict round's close: the next round's seed (stage `decide`), hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round_seed: Option<String>,
    /// A verdict round's close: challenges decided, ended unresolved, sent to a committee, and
    /// the committees' members, so far.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub decided: u32,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub unresolved: u32,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub disputes: u32,
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub members: u32,
}

impl Closing {
    /// A close at its first stage, nothing counted yet.
    pub fn at(stage: Stage) -> Closing {
        Closing {
            stage,
            after: None,
            seed_hash: None,
            reveals: 0,
            reward: Uint128::zero(),
            diligent: 0,
            round_seed: None,
            decided: 0,
            unresolved: 0,
            disputes: 0,
            members: 0,
        }
    }
}

/// The stages of a paged close, in order.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Closing `reveal`: hash every valid reveal into the seed; gather V.
    Seed,
    /// Closing `reveal`: absent / no-reveal outcomes, the challenges of every other host.
    Assign,
    /// Closing `objection`: which challenges are disputed; the undisputed ones pass.
    Objections,
    /// Closing `dispute_reveal`: every disputed challenge decided by the stake of V.
    Decide,
    /// Finalize: every host's outcome from its challenges; validators' counts into `vt/`.
    Outcomes,
    /// Finalize: validators' outcomes; every slash with its catcher and treasury parts.
    Slashes,
    /// Finalize: rewards, lifetime totals, one `wasm-settle` per member paid or slashed.
    Rewards,
    /// Closing `propose`: the exclusions the agreed model's backers carry past 2/3 of the
    /// accepted stake (slashes of the excluded hosts and of their last segment's passers).
    Exclusions,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Seed => "seed",
            Stage::Assign => "assign",
            Stage::Objections => "objections",
            Stage::Decide => "decide",
            Stage::Outcomes => "outcomes",
            Stage::Slashes => "slashes",
            Stage::Rewards => "rewards",
            Stage::Exclusions => "exclusions",
        }
    }
}

/// A validator's counts over the hosts finalize settled so far, and the auditors whose failed
/// trap it passed (they share the catcher part of its slash).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Standing {
    #[serde(rename = "n", default, skip_serializing_if = "is_zero_u32")]
    pub assigned: u32,
    #[serde(rename = "c", default, skip_serializing_if = "is_zero_u32")]
    pub committed: u32,
    #[serde(rename = "v", default, skip_serializing_if = "is_zero_u32")]
    pub voted: u32,
    #[serde(rename = "a", default, skip_serializing_if = "is_zero_u32")]
    pub against: u32,
    #[serde(rename = "u", default, skip_serializing_if = "is_zero_u32")]
    pub unavailable: u32,
    /// `unavailable` votes against a pass/fail decision that a holder contradicts.
    #[serde(rename = "w", default, skip_serializing_if = "is_zero_u32")]
    pub unserved: u32,
    /// `unavailable` votes against a pass/fail decision with no holder yet (not slashed).
    #[serde(rename = "x", default, skip_serializing_if = "is_zero_u32")]
    pub excused: u32,
    /// Ascending, without repeats (no longer written: auditors earn no share of a slash).
    #[serde(rename = "t", default, skip_serializing_if = "Vec::is_empty")]
    pub victims: Vec<String>,
}

/// The counters every epoch message bumps; what "everyone the phase waits for has acted" is
/// decided from.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct Counts {
    #[serde(rename = "h", default, skip_serializing_if = "is_zero_u32")]
    pub hosts: u32,
    #[serde(rename = "v", default, skip_serializing_if = "is_zero_u32")]
    pub validators: u32,
    #[serde(rename = "c", default, skip_serializing_if = "is_zero_u32")]
    pub committed: u32,
    #[serde(rename = "r", default, skip_serializing_if = "is_zero_u32")]
    pub revealed: u32,
    /// Hosts that sent `sit_out` (the train phase waits for them no more than for a commitment).
    #[serde(rename = "so", default, skip_serializing_if = "is_zero_u32")]
    pub sat_out: u32,
    /// Verdict commitments expected in the current round (first round or dispute round).
    #[serde(rename = "ve", default, skip_serializing_if = "is_zero_u32")]
    pub votes_expected: u32,
    /// Verdict commitments posted in the current round.
    #[serde(rename = "vp", default, skip_serializing_if = "is_zero_u32")]
    pub votes_posted: u32,
    /// Verdicts opened in the current round.
    #[serde(rename = "vr", default, skip_serializing_if = "is_zero_u32")]
    pub votes_revealed: u32,
    /// Hosts with challenges (each may open its trap commitment once).
    #[serde(rename = "ch", default, skip_serializing_if = "is_zero_u32")]
    pub challenged: u32,
    /// Hosts that opened their trap commitment.
    #[serde(rename = "to", default, skip_serializing_if = "is_zero_u32")]
    pub traps_opened: u32,
    /// Members of V with a round-0 seat (each owes one `ready`), and the `ready`s sent.
    #[serde(rename = "se", default, skip_serializing_if = "is_zero_u32")]
    pub seated: u32,
    #[serde(rename = "rd", default, skip_serializing_if = "is_zero_u32")]
    pub ready: u32,
    /// Disputed challenges, and the round-0 commitments on them (opened in `dispute_reveal`).
    #[serde(rename = "dc", default, skip_serializing_if = "is_zero_u32")]
    pub disputed: u32,
    #[serde(rename = "cr", default, skip_serializing_if = "is_zero_u32")]
    pub carried: u32,
    /// Final-round commitments the disputed challenges expect.
    #[serde(rename = "fe", default, skip_serializing_if = "is_zero_u32")]
    pub final_expected: u32,
    /// Hosts finalize accepted (never lowered: `propose` waits for their proposals).
    #[serde(rename = "a", default, skip_serializing_if = "is_zero_u32")]
    pub accepted: u32,
    /// Of those, the hosts the exclusions stage slashed (no longer accepted): Some from the
    /// stage's start on a 0.3.4+ contract, None when no such stage began there.
    #[serde(rename = "xw", default, skip_serializing_if = "Option::is_none")]
    pub withdrawn: Option<u32>,
    /// The segments the accepted hosts committed (S each, fewer for a partial epoch).
    #[serde(rename = "as", default, skip_serializing_if = "is_zero_u32")]
    pub accepted_segments: u32,
    #[serde(rename = "p", default, skip_serializing_if = "is_zero_u32")]
    pub proposed: u32,
    /// The stake behind the most backed proposed hash, and that hash.
    #[serde(rename = "bs", default, skip_serializing_if = "is_zero")]
    pub best_stake: Uint128,
    #[serde(rename = "bh", default, skip_serializing_if = "Option::is_none")]
    pub best_hash: Option<String>,
    /// Pipelined runs: the committed hosts' stake at join (the weight of the start vote), the
    /// start proposals sent, and the most backed optimistic start with its stake.
    #[serde(rename = "cs", default, skip_serializing_if = "is_zero")]
    pub committed_stake: Uint128,
    #[serde(rename = "sp", default, skip_serializing_if = "is_zero_u32")]
    pub start_proposed: u32,
    #[serde(rename = "ss", default, skip_serializing_if = "is_zero")]
    pub start_best_stake: Uint128,
    #[serde(rename = "sh", default, skip_serializing_if = "Option::is_none")]
    pub start_best_hash: Option<String>,
}

/// A member's part in one epoch, written once when it joins.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Participant {
    #[serde(rename = "r")]
    pub role: Role,
    /// Bonded stake when it joined.
    #[serde(rename = "s")]
    pub stake: Uint128,
    /// `H("beacon/commit", address || 0 || u64be(e) || secret)`, hex.
    #[serde(rename = "b")]
    pub beacon: String,
    /// The compute-profile class it declared at join ("" if none; `crate::classes`).
    #[serde(rename = "c", default, skip_serializing_if = "String::is_empty")]
    pub class: String,
    /// Its weight in the epoch's draws and votes when a slash of the epoch before left it less
    /// at risk than its stake at join (a validator: `WEIGHT_CAPS`; a host: its model and start
    /// votes, `HOST_CUTS`); none: its stake at join.
    #[serde(rename = "w", default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<Uint128>,
}

impl Participant {
    /// What it weighs in the epoch's picker draw, seats and votes.
    pub fn weight(&self) -> Uint128 {
        self.weight.unwrap_or(self.stake)
    }
}

/// How a participant's epoch ended: its outcome and what it was slashed and paid.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Payout {
    #[serde(rename = "o", default, skip_serializing_if = "is_pending")]
    pub outcome: Outcome,
    #[serde(rename = "s", default, skip_serializing_if = "is_zero")]
    pub slashed: Uint128,
    #[serde(rename = "r", default, skip_serializing_if = "is_zero")]
    pub reward: Uint128,
    /// A validator's share of what the invalid hosts it caught were slashed.
    #[serde(rename = "c", default, skip_serializing_if = "is_zero")]
    pub catcher: Uint128,
}

/// A host's commitment to its epoch of work.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Commitment {
    #[serde(rename = "c")]
    pub checkpoint_root: String,
    #[serde(rename = "d")]
    pub delta_hash: String,
    #[serde(rename = "l")]
    pub loss_digest: String,
    #[serde(rename = "n")]
    pub segments: u32,
    #[serde(rename = "t")]
    pub train_loss_micro: u64,
    /// `H("traps", host || 0 || u64be(e) || u32be(n) || u32be(t_1) … || salt)`, hex.
    #[serde(rename = "x")]
    pub trap_commit: String,
}

/// An accepted host's proposal for θ_{e+1}.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Proposal {
    #[serde(rename = "m")]
    pub model_hash: String,
    #[serde(rename = "v")]
    pub val_loss_micro: u64,
    /// The accepted hosts whose Δ no holder served it, left out of its aggregate (sorted).
    #[serde(rename = "x", default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<String>,
}

/// One challenged segment of a host: its round-0 seats (the pickers that picked it; every picker
/// for the last segment) and the seats that objected, as indices into the epoch's validator set
/// V (`vs/` e); whether it is disputed (then every other member of V sits on it in the final
/// round); its outcome so far and, for a `pass`/`fail` decided by the final vote, the deciding
/// group's distance and evidence.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Assignment {
    #[serde(rename = "g")]
    pub segment: u32,
    /// The round-0 seats.
    #[serde(rename = "v")]
    pub validators: Vec<u16>,
    /// Seats whose `ready` objected to it (ascending).
    #[serde(rename = "x", default, skip_serializing_if = "Vec::is_empty")]
    pub objectors: Vec<u16>,
    /// Decided by the final vote of V (set at the close of `objection`).
    #[serde(rename = "p", default, skip_serializing_if = "std::ops::Not::not")]
    pub disputed: bool,
    #[serde(
        rename = "o",
        default,
        skip_serializing_if = "ChallengeOutcome::is_pending"
    )]
    pub outcome: ChallengeOutcome,
    /// The deciding group's (distance, evidence) of a disputed challenge decided pass or fail.
    #[serde(rename = "w", default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<(String, String)>,
    /// Who votes in the final round of a disputed challenge: the indices into V of the members
    /// of the host's compute-profile class (`crate::classes::electorate`); None: all of V.
    #[serde(rename = "c", default, skip_serializing_if = "Option::is_none")]
    pub electorate: Option<Vec<u16>>,
    /// The host's probe gain in micro-nats that the decision carries (the host's last segment,
    /// probe on): the deciding group's, or that of every `pass` opened on an undisputed one.
    #[serde(rename = "q", default, skip_serializing_if = "Option::is_none")]
    pub gain_micro: Option<i64>,
    /// A **gain dispute**: its round-0 seats all opened `pass`es, with different probe gains
    /// (set at the close of `verdict_reveal`). The question stays the main-window gain, but
    /// those are public now, so every vote that decides (each round-0 seat's re-vote and the
    /// final votes) also carries the gain on the host's dispute windows
    /// (`trainer.probe.dispute_starts`), which nobody opened: a voter that copies the main gain
    /// still computes a probe blind. A round-0 seat whose opened main gain is not the decided
    /// one is `wrong` whatever its re-vote (a lie costs).
    #[serde(rename = "gd", default, skip_serializing_if = "std::ops::Not::not")]
    pub gain_dispute: bool,
    /// The dispute-window gain of the group that decided a gain dispute (with `gain_micro`, the
    /// main-window gain, which is the host's decided gain).
    #[serde(rename = "qx", default, skip_serializing_if = "Option::is_none")]
    pub dispute_gain_micro: Option<i64>,
}

pub fn index_addresses(indices: &[u16], set: &[String]) -> Result<Vec<String>, ContractError> {
    indices
        .iter()
        .map(|i| {
            set.get(*i as usize).cloned().ok_or_else(|| {
                ContractError::Corrupt("corrupt challenge record: validator index".into())
            })
        })
        .collect()
}

impl Assignment {
    /// The round-0 seats' addresses.
    pub fn addresses(&self, set: &[String]) -> Result<Vec<String>, ContractError> {
        index_addresses(&self.validators, set)
    }

    /// The round member `index` of V sits in: 0 for a round-0 seat, 1 for every other member
    /// of V on a disputed challenge; None: it does not sit on it.
    pub fn round_of(&self, index: u16) -> Option<u32> {
        if self.validators.contains(&index) {
            Some(0)
        } else if self.disputed && self.elects(index) {
            Some(1)
        } else {
            None
        }
    }

    /// Whether member `index` of V votes in the final round (its electorate; all of V if None).
    pub fn elects(&self, index: u16) -> bool {
        self.electorate
            .as_ref()
            .map_or(true, |e| e.binary_search(&index).is_ok())
    }

    /// How many members of V (of `v_len`) vote in the final round.
    pub fn electorate_len(&self, v_len: u32) -> u32 {
        self.electorate.as_ref().map_or(v_len, |e| e.len() as u32)
    }

    /// Every member as (round, address), in V's order (round-0 seats and, when disputed, every
    /// other member of its electorate).
    pub fn members(&self, set: &[String]) -> Result<Vec<(u32, String)>, ContractError> {
        let seats = self.addresses(set)?;
        if !self.disputed {
            return Ok(seats.into_iter().map(|a| (0, a)).collect());
        }
        Ok(set
            .iter()
            .enumerate()
            .filter_map(|(i, a)| self.round_of(i as u16).map(|r| (r, a.clone())))
            .collect())
    }

    /// Whether round-0 seat `index` commits a re-vote in `dispute`: it objected, or this is a
    /// gain dispute (every seat re-votes).
    pub fn revotes(&self, index: u16) -> bool {
        self.disputed && (self.gain_dispute || self.objectors.contains(&index))
    }

    /// Whether validator `index` sits on it in any round.
    pub fn involves(&self, index: u16) -> bool {
        self.round_of(index).is_some()
    }
}

/// One validator's opened verdict on one challenged segment.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Vote {
    #[serde(rename = "o")]
    pub outcome: VoteOutcome,
    /// Canonical decimal string (`protocol.types.Dec`).
    #[serde(rename = "d")]
    pub distance: String,
    #[serde(rename = "e")]
    pub evidence: String,
    /// The commitment's salt, hex (it seeds the next dispute committee).
    #[serde(rename = "s")]
    pub salt: String,
    /// The round the verdict was committed in (0: a round-0 seat; 1: the final round;
    /// [`REVOTE`]: a round-0 seat's re-vote in the final round).
    #[serde(rename = "r", default, skip_serializing_if = "is_zero_u32")]
    pub round: u32,
    /// For a re-vote: the outcome of the round-0 opening it follows (`unavailable`, which the
    /// re-vote replaces, or `fail`, which it repeats).
    #[serde(rename = "f", default, skip_serializing_if = "Option::is_none")]
    pub first: Option<VoteOutcome>,
    /// The host's probe gain in micro-nats (a verdict on its last segment, probe on): part of
    /// the commitment and of the vote's group.
    #[serde(rename = "q", default, skip_serializing_if = "Option::is_none")]
    pub gain_micro: Option<i64>,
    /// The host's gain on its dispute windows (a vote that decides a gain dispute: a re-vote or
    /// a final vote): part of the commitment and of the vote's group, the blind proof that the
    /// voter computed a probe (`Assignment::gain_dispute`).
    #[serde(rename = "x", default, skip_serializing_if = "Option::is_none")]
    pub dispute_gain_micro: Option<i64>,
    /// For a re-vote in a gain dispute: the main-window gain the seat's round-0 `pass` opened
    /// (the re-vote repeats its outcome, distance and evidence), kept so the round-0 answer is
    /// judged and shown after the re-vote replaced the record.
    #[serde(rename = "g", default, skip_serializing_if = "Option::is_none")]
    pub first_gain_micro: Option<i64>,
}

/// [`Vote::round`] of a round-0 seat's re-vote.
pub const REVOTE: u32 = 2;

impl Vote {
    /// Whether this is a re-vote that replaced a round-0 `unavailable`.
    pub fn replaced_unavailable(&self) -> bool {
        self.round == REVOTE && self.first == Some(VoteOutcome::Unavailable)
    }
}

/// The counters of `epoch` (zero before the first message).
pub fn load_counts(storage: &dyn Storage, epoch: u64) -> Result<Counts, ContractError> {
    Ok(COUNTS.may_load(storage, epoch)?.unwrap_or_default())
}

/// How `address`'s part in `epoch` ended so far (pending when nothing is recorded).
pub fn load_payout(
    storage: &dyn Storage,
    epoch: u64,
    address: &str,
) -> Result<Payout, ContractError> {
    Ok(PAYOUTS
        .may_load(storage, (epoch, address))?
        .unwrap_or_default())
}

/// Every recorded payout of `epoch` (participants without one are still pending).
pub fn payouts(
    storage: &dyn Storage,
    epoch: u64,
) -> Result<BTreeMap<String, Payout>, ContractError> {
    Ok(PAYOUTS.prefix(epoch).all(storage)?.into_iter().collect())
}

/// The stakes of V of `epoch`, in V's order (empty before the close of reveal).
pub fn load_validator_stakes(
    storage: &dyn Storage,
    epoch: u64,
) -> Result<Vec<Uint128>, ContractError> {
    Ok(VALIDATOR_STAKES
        .may_load(storage, epoch)?
        .unwrap_or_default())
}

/// V of `epoch` (empty before the close of reveal, or without validators).
pub fn load_validator_set(storage: &dyn Storage, epoch: u64) -> Result<Vec<String>, ContractError> {
    Ok(VALIDATOR_SETS.may_load(storage, epoch)?.unwrap_or_default())
}
