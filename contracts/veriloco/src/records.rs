//! The per-epoch records, their types and their [`Map`]s.
//!
//! Gas on a real chain is dominated by storage (wasmd charges about 30 gas per byte written and
//! 3 per byte read, plus a flat cost per access), so an epoch is NOT one big value rewritten by
//! every message. Each message writes its own small record, plus the few-dozen-byte counters:
//!
//! | key | value | written by |
//! | --- | --- | --- |
//! | `ep/` e | [`EpochHeader`] (phase, deadline, hashes, seed, settlement totals) | phase changes |
//! | `en/` e | [`Counts`] (how many joined, committed, revealed, voted, proposed) | every epoch message |
//! | `pa/` e addr | [`Participant`] (role, stake at join, beacon commitment) | join |
//! | `po/` e addr | [`Payout`] (outcome, slashed, reward, catcher share) | reveal close (absent, no_reveal), finalize |
//! | `cm/` e addr | [`Commitment`] | commit |
//! | `rv/` e addr | the 32-byte beacon secret | reveal |
//! | `vs/` e | the epoch's validators V (joined and revealed), in address order | reveal close |
//! | `cs/` e host | [`Assignment`]s: challenged segments of a host, validators as indices into V | reveal close |
//! | `vo/` e host 0x00 u32be(segment) validator | [`Vote`] | verdict |
//! | `pr/` e addr | [`Proposal`] | propose_model |
//! | `pt/` e model_hash | the stake behind a proposed hash | propose_model |
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
/// The challenged segments of each committed, revealed host.
pub const ASSIGNMENTS: Map<(u64, &str), Vec<Assignment>> = Map::new(b"cs/");
/// Keyed by (epoch, host, segment, validator).
pub const VOTES: Map<(u64, &str, u32, &str), Vote> = Map::new(b"vo/");
pub const PROPOSALS: Map<(u64, &str), Proposal> = Map::new(b"pr/");
/// The accepted stake behind each proposed model hash.
pub const BACKING: Map<(u64, &str), Uint128> = Map::new(b"pt/");

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Join,
    Train,
    Reveal,
    Verify,
    Propose,
    Closed,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Join => "join",
            Phase::Train => "train",
            Phase::Reveal => "reveal",
            Phase::Verify => "verify",
            Phase::Propose => "propose",
            Phase::Closed => "closed",
        }
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
    Inconclusive,
    Absent,
    // both
    NoReveal,
    // validators
    Diligent,
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
            Outcome::Inconclusive => "inconclusive",
            Outcome::Absent => "absent",
            Outcome::NoReveal => "no_reveal",
            Outcome::Diligent => "diligent",
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
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
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
    #[serde(rename = "ve", default, skip_serializing_if = "is_zero_u32")]
    pub votes_expected: u32,
    #[serde(rename = "vp", default, skip_serializing_if = "is_zero_u32")]
    pub votes_posted: u32,
    #[serde(rename = "a", default, skip_serializing_if = "is_zero_u32")]
    pub accepted: u32,
    #[serde(rename = "p", default, skip_serializing_if = "is_zero_u32")]
    pub proposed: u32,
    /// The stake behind the most backed proposed hash, and that hash.
    #[serde(rename = "bs", default, skip_serializing_if = "is_zero")]
    pub best_stake: Uint128,
    #[serde(rename = "bh", default, skip_serializing_if = "Option::is_none")]
    pub best_hash: Option<String>,
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
}

/// An accepted host's proposal for θ_{e+1}.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Proposal {
    #[serde(rename = "m")]
    pub model_hash: String,
    #[serde(rename = "v")]
    pub val_loss_micro: u64,
}

/// One challenged segment of a host and the validators assigned to replay it, as indices into
/// the epoch's validator set V (`vs/` e).
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Assignment {
    #[serde(rename = "g")]
    pub segment: u32,
    #[serde(rename = "v")]
    pub validators: Vec<u16>,
}

impl Assignment {
    /// The assigned validators' addresses.
    pub fn addresses(&self, set: &[String]) -> Result<Vec<String>, ContractError> {
        self.validators
            .iter()
            .map(|i| {
                set.get(*i as usize).cloned().ok_or_else(|| {
                    ContractError::Corrupt("corrupt challenge record: validator index".into())
                })
            })
            .collect()
    }
}

/// One validator's verdict on one challenged segment.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Vote {
    #[serde(rename = "o")]
    pub outcome: VoteOutcome,
    /// Canonical decimal string (`protocol.types.Dec`).
    #[serde(rename = "d")]
    pub distance: String,
    #[serde(rename = "e")]
    pub evidence: String,
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

/// V of `epoch` (empty before the close of reveal, or without validators).
pub fn load_validator_set(storage: &dyn Storage, epoch: u64) -> Result<Vec<String>, ContractError> {
    Ok(VALIDATOR_SETS.may_load(storage, epoch)?.unwrap_or_default())
}
