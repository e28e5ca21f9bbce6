//! The per-epoch records and their keys.
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
//! of one epoch yields its records in address order (the order the seed and the reports use).
//! The often-written records use one- or two-letter field names (bytes written cost gas); the
//! header, written a few times per epoch, keeps readable ones.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::error::ContractError;
use crate::state::Role;
use crate::storage::{self, Order};
use crate::types::{is_zero, Uint128};

const HEADER: &[u8] = b"ep/";
const COUNTS: &[u8] = b"en/";
const PARTICIPANT: &[u8] = b"pa/";
const PAYOUT: &[u8] = b"po/";
const VALIDATOR_SET: &[u8] = b"vs/";
const COMMITMENT: &[u8] = b"cm/";
const REVEAL: &[u8] = b"rv/";
const CHALLENGES: &[u8] = b"cs/";
const VOTE: &[u8] = b"vo/";
const PROPOSAL: &[u8] = b"pr/";
const TALLY: &[u8] = b"pt/";

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

/// The decided outcome of a challenge (`protocol.views.ChallengeOutcome`).
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ChallengeOutcome {
    Pending,
    Pass,
    Fail,
    Unavailable,
    Inconclusive,
}

impl ChallengeOutcome {
    /// The outcome cast by a strict majority of the votes posted; no votes or no majority →
    /// inconclusive.
    pub fn tally(votes: &[VoteOutcome]) -> ChallengeOutcome {
        let count = |o: VoteOutcome| votes.iter().filter(|v| **v == o).count();
        for o in [VoteOutcome::Pass, VoteOutcome::Fail, VoteOutcome::Unavailable] {
            if count(o) * 2 > votes.len() {
                return match o {
                    VoteOutcome::Pass => ChallengeOutcome::Pass,
                    VoteOutcome::Fail => ChallengeOutcome::Fail,
                    VoteOutcome::Unavailable => ChallengeOutcome::Unavailable,
                };
            }
        }
        ChallengeOutcome::Inconclusive
    }

    /// The vote that agrees with a decided outcome (None: pending or inconclusive).
    pub fn decided(self) -> Option<VoteOutcome> {
        match self {
            ChallengeOutcome::Pass => Some(VoteOutcome::Pass),
            ChallengeOutcome::Fail => Some(VoteOutcome::Fail),
            ChallengeOutcome::Unavailable => Some(VoteOutcome::Unavailable),
            _ => None,
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
                set.get(*i as usize)
                    .cloned()
                    .ok_or_else(|| ContractError::new("corrupt challenge record: validator index"))
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

fn key(prefix: &[u8], epoch: u64, tail: &[&[u8]]) -> Vec<u8> {
    let mut key = Vec::with_capacity(prefix.len() + 8 + 48);
    key.extend_from_slice(prefix);
    key.extend_from_slice(&epoch.to_be_bytes());
    for part in tail {
        key.extend_from_slice(part);
    }
    key
}

fn vote_key(epoch: u64, host: &str, segment: u32, validator: &str) -> Vec<u8> {
    key(
        VOTE,
        epoch,
        &[
            host.as_bytes(),
            &[0u8],
            &segment.to_be_bytes(),
            validator.as_bytes(),
        ],
    )
}

fn corrupt(what: &str, e: serde_json::Error) -> ContractError {
    ContractError::new(format!("corrupt {what} record: {e}"))
}

/// Every record under `prefix || e`, with the rest of its key as text (an address), in key order.
fn scan<T: DeserializeOwned>(
    prefix: &[u8],
    epoch: u64,
    what: &str,
) -> Result<Vec<(String, T)>, ContractError> {
    let start = key(prefix, epoch, &[]);
    let skip = start.len();
    // Collect before anyone writes (see storage::Range).
    let raw: Vec<(Vec<u8>, Vec<u8>)> = storage::prefix_range(&start, None, Order::Ascending).collect();
    raw.into_iter()
        .map(|(k, v)| {
            let tail = String::from_utf8(k[skip..].to_vec())
                .map_err(|_| ContractError::new(format!("corrupt {what} key")))?;
            let value = serde_json::from_slice(&v).map_err(|e| corrupt(what, e))?;
            Ok((tail, value))
        })
        .collect()
}

pub fn load_header(epoch: u64) -> Result<Option<EpochHeader>, ContractError> {
    storage::load(&key(HEADER, epoch, &[]))
}

pub fn save_header(header: &EpochHeader) {
    storage::save(&key(HEADER, header.epoch, &[]), header);
}

/// Headers of epochs after `start_after` (all from 0 when None), at most `limit`.
pub fn headers_page(start_after: Option<u64>, limit: usize) -> Result<Vec<EpochHeader>, ContractError> {
    let start = match start_after {
        Some(e) => match e.checked_add(1) {
            Some(next) => key(HEADER, next, &[]),
            None => return Ok(Vec::new()),
        },
        None => HEADER.to_vec(),
    };
    let mut end = HEADER.to_vec();
    *end.last_mut().unwrap() += 1; // "ep/" -> "ep0": just past every header key
    storage::range(Some(&start), Some(&end), Order::Ascending)
        .take(limit)
        .map(|(_, v)| serde_json::from_slice(&v).map_err(|e| corrupt("epoch", e)))
        .collect()
}

pub fn load_counts(epoch: u64) -> Result<Counts, ContractError> {
    Ok(storage::load(&key(COUNTS, epoch, &[]))?.unwrap_or_default())
}

pub fn save_counts(epoch: u64, counts: &Counts) {
    storage::save(&key(COUNTS, epoch, &[]), counts);
}

pub fn load_participant(epoch: u64, address: &str) -> Result<Option<Participant>, ContractError> {
    storage::load(&key(PARTICIPANT, epoch, &[address.as_bytes()]))
}

pub fn save_participant(epoch: u64, address: &str, participant: &Participant) {
    storage::save(&key(PARTICIPANT, epoch, &[address.as_bytes()]), participant);
}

/// Every participant of `epoch`, in address order.
pub fn participants(epoch: u64) -> Result<Vec<(String, Participant)>, ContractError> {
    scan(PARTICIPANT, epoch, "participant")
}

pub fn load_payout(epoch: u64, address: &str) -> Result<Payout, ContractError> {
    Ok(storage::load(&key(PAYOUT, epoch, &[address.as_bytes()]))?.unwrap_or_default())
}

pub fn save_payout(epoch: u64, address: &str, payout: &Payout) {
    storage::save(&key(PAYOUT, epoch, &[address.as_bytes()]), payout);
}

/// Every recorded payout of `epoch` (participants without one are still pending).
pub fn payouts(epoch: u64) -> Result<std::collections::BTreeMap<String, Payout>, ContractError> {
    Ok(scan(PAYOUT, epoch, "payout")?.into_iter().collect())
}

pub fn load_validator_set(epoch: u64) -> Result<Vec<String>, ContractError> {
    Ok(storage::load(&key(VALIDATOR_SET, epoch, &[]))?.unwrap_or_default())
}

pub fn save_validator_set(epoch: u64, validators: &[String]) {
    storage::save(&key(VALIDATOR_SET, epoch, &[]), &validators);
}

pub fn load_commitment(epoch: u64, host: &str) -> Result<Option<Commitment>, ContractError> {
    storage::load(&key(COMMITMENT, epoch, &[host.as_bytes()]))
}

pub fn save_commitment(epoch: u64, host: &str, commitment: &Commitment) {
    storage::save(&key(COMMITMENT, epoch, &[host.as_bytes()]), commitment);
}

pub fn commitments(epoch: u64) -> Result<Vec<(String, Commitment)>, ContractError> {
    scan(COMMITMENT, epoch, "commitment")
}

pub fn has_revealed(epoch: u64, address: &str) -> bool {
    storage::get(&key(REVEAL, epoch, &[address.as_bytes()])).is_some()
}

pub fn save_reveal(epoch: u64, address: &str, secret: &[u8; 32]) {
    storage::set(&key(REVEAL, epoch, &[address.as_bytes()]), secret);
}

/// Every valid reveal of `epoch`, in address order.
pub fn reveals(epoch: u64) -> Result<Vec<(String, [u8; 32])>, ContractError> {
    let start = key(REVEAL, epoch, &[]);
    let skip = start.len();
    let raw: Vec<(Vec<u8>, Vec<u8>)> = storage::prefix_range(&start, None, Order::Ascending).collect();
    raw.into_iter()
        .map(|(k, v)| {
            let address = String::from_utf8(k[skip..].to_vec())
                .map_err(|_| ContractError::new("corrupt reveal key"))?;
            if v.len() != 32 {
                return Err(ContractError::new("corrupt reveal record"));
            }
            let mut secret = [0u8; 32];
            secret.copy_from_slice(&v);
            Ok((address, secret))
        })
        .collect()
}

pub fn load_assignments(epoch: u64, host: &str) -> Result<Option<Vec<Assignment>>, ContractError> {
    storage::load(&key(CHALLENGES, epoch, &[host.as_bytes()]))
}

pub fn save_assignments(epoch: u64, host: &str, assignments: &[Assignment]) {
    storage::save(&key(CHALLENGES, epoch, &[host.as_bytes()]), &assignments);
}

/// Every challenged host of `epoch` with its assignments, in host order.
pub fn all_assignments(epoch: u64) -> Result<Vec<(String, Vec<Assignment>)>, ContractError> {
    scan(CHALLENGES, epoch, "challenge")
}

pub fn has_vote(epoch: u64, host: &str, segment: u32, validator: &str) -> bool {
    storage::get(&vote_key(epoch, host, segment, validator)).is_some()
}

pub fn save_vote(epoch: u64, host: &str, segment: u32, validator: &str, vote: &Vote) {
    storage::save(&vote_key(epoch, host, segment, validator), vote);
}

/// A vote with where it was cast.
pub struct CastVote {
    pub host: String,
    pub segment: u32,
    pub validator: String,
    pub vote: Vote,
}

/// Every vote of `epoch`, ordered by host, segment, validator.
pub fn votes(epoch: u64) -> Result<Vec<CastVote>, ContractError> {
    let start = key(VOTE, epoch, &[]);
    let skip = start.len();
    let raw: Vec<(Vec<u8>, Vec<u8>)> = storage::prefix_range(&start, None, Order::Ascending).collect();
    let bad = || ContractError::new("corrupt vote key");
    raw.into_iter()
        .map(|(k, v)| {
            let tail = &k[skip..];
            let sep = tail.iter().position(|b| *b == 0).ok_or_else(bad)?;
            if tail.len() < sep + 5 {
                return Err(bad());
            }
            let host = String::from_utf8(tail[..sep].to_vec()).map_err(|_| bad())?;
            let mut seg = [0u8; 4];
            seg.copy_from_slice(&tail[sep + 1..sep + 5]);
            let validator = String::from_utf8(tail[sep + 5..].to_vec()).map_err(|_| bad())?;
            let vote = serde_json::from_slice(&v).map_err(|e| corrupt("vote", e))?;
            Ok(CastVote {
                host,
                segment: u32::from_be_bytes(seg),
                validator,
                vote,
            })
        })
        .collect()
}

pub fn load_proposal(epoch: u64, host: &str) -> Result<Option<Proposal>, ContractError> {
    storage::load(&key(PROPOSAL, epoch, &[host.as_bytes()]))
}

pub fn save_proposal(epoch: u64, host: &str, proposal: &Proposal) {
    storage::save(&key(PROPOSAL, epoch, &[host.as_bytes()]), proposal);
}

pub fn proposals(epoch: u64) -> Result<Vec<(String, Proposal)>, ContractError> {
    scan(PROPOSAL, epoch, "proposal")
}

pub fn load_tally(epoch: u64, model_hash: &str) -> Result<Uint128, ContractError> {
    Ok(storage::load(&key(TALLY, epoch, &[model_hash.as_bytes()]))?.unwrap_or_default())
}

pub fn save_tally(epoch: u64, model_hash: &str, stake: Uint128) {
    storage::save(&key(TALLY, epoch, &[model_hash.as_bytes()]), &stake);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_is_strict() {
        use VoteOutcome::*;
        assert_eq!(ChallengeOutcome::tally(&[]), ChallengeOutcome::Inconclusive);
        assert_eq!(ChallengeOutcome::tally(&[Pass]), ChallengeOutcome::Pass);
        assert_eq!(ChallengeOutcome::tally(&[Pass, Fail]), ChallengeOutcome::Inconclusive);
        assert_eq!(ChallengeOutcome::tally(&[Fail, Fail, Pass]), ChallengeOutcome::Fail);
        assert_eq!(
            ChallengeOutcome::tally(&[Fail, Unavailable, Pass]),
            ChallengeOutcome::Inconclusive
        );
        assert_eq!(
            ChallengeOutcome::tally(&[Unavailable, Unavailable, Pass, Fail]),
            ChallengeOutcome::Inconclusive
        );
    }

    #[test]
    fn vote_keys_round_trip() {
        storage::reset();
        let vote = Vote {
            outcome: VoteOutcome::Fail,
            distance: "0.5".into(),
            evidence: "a".repeat(64),
        };
        save_vote(3, "inj1host", 7, "inj1val", &vote);
        save_vote(3, "inj1host", 2, "inj1val", &vote);
        save_vote(4, "inj1other", 0, "inj1val", &vote);
        let got = votes(3).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].host.as_str(), got[0].segment), ("inj1host", 2));
        assert_eq!((got[1].segment, got[1].validator.as_str()), (7, "inj1val"));
        assert!(has_vote(4, "inj1other", 0, "inj1val"));
        assert!(!has_vote(4, "inj1other", 1, "inj1val"));
    }
}
