//! The queries. Read-only: they show what is stored, so a phase whose deadline has passed shows
//! until the next transaction closes it (its `phase_deadline` tells the reader it is due).
//!
//! Run-wide: `config`, `accounting`, `member`, `standby`, `members`. Per epoch: `epoch`, `epochs`,
//! `challenges` (one validator's work), `participant` (one participant's part: what a node
//! polls), `aggregation_inputs` (the accepted hosts' endpoints and Δ hashes, paged), `report`
//! (everything, paged). A new query is a `QueryMsg` variant, its answer in `msg.rs`, a function here
//! and a line in `contract::query`.

use std::collections::BTreeMap;

use crate::classes;
use crate::deps::{Deps, Order, Storage};
use crate::epoch::tally::{self, votes_read, ChallengeTally, Tally, ValidatorStats};
use crate::error::{refuse, ContractError};
use crate::limits::{
    AGGREGATION_PAGE, AGGREGATION_PAGE_DEFAULT, CHALLENGES_PAGE, CHALLENGES_PAGE_DEFAULT,
    EPOCHS_PAGE, EPOCHS_PAGE_DEFAULT, MAX_ADDRESS_LEN, MEMBERS_PAGE, MEMBERS_PAGE_DEFAULT,
    REPORT_PAGE, REPORT_PAGE_DEFAULT,
};
use crate::msg::{
    AccountingResponse, AggregationInput, ChallengeInfo, ChallengeReport, CommitmentView,
    ComputeClassStatus, ConfigResponse, EpochCounts, EpochInfo, HostReport, ParticipantStatus,
    ProposalView, ReportPage, StandbyResponse, ValidatorCounts, ValidatorPart, VoteView,
};
use crate::records::{
    self, Assignment, EpochHeader, Outcome, Phase, Stage, ASSIGNMENTS, COMMITMENTS, HEADERS,
    PARTICIPANTS, PAYOUTS, PROPOSALS, READY, REVEALS, REVOTE, REVOTE_COMMITS, SEATED, TRAPS,
    VERDICT_COMMITS, VOTES,
};
use crate::sittings::{self, COUNTED};
use crate::state::{self, MemberView, Role, CONFIG, SPEC, TOTALS};
use crate::types::Uint128;

pub fn config(deps: Deps) -> Result<ConfigResponse, ContractError> {
    let config = CONFIG.load(deps.storage)?;
    Ok(ConfigResponse {
        run_id: config.run_id,
        spec_json: SPEC.load(deps.storage)?,
        initial_model_hash: config.initial_model_hash,
        denom: config.denom,
        treasury: config.treasury,
        admin: config.admin,
    })
}

pub fn accounting(deps: Deps) -> Result<AccountingResponse, ContractError> {
    let totals = TOTALS.load(deps.storage)?;
    Ok(AccountingResponse {
        bonded: totals.bonded,
        unbonding: totals.unbonding,
        reward_pool: totals.reward_pool,
    })
}

/// The member at `address`, or `null` if it never bonded.
pub fn member(deps: Deps, address: &str) -> Result<Option<MemberView>, ContractError> {
    deps.api
        .addr_validate(address)
        .map_err(|e| e.context("member"))?;
    state::member_view(deps.storage, address)
}

/// The standby revealer `member` named (`set_standby`), if any: one point read.
pub fn standby(deps: Deps, member: &str) -> Result<StandbyResponse, ContractError> {
    deps.api
        .addr_validate(member)
        .map_err(|e| e.context("standby"))?;
    Ok(StandbyResponse {
        member: member.to_string(),
        standby: state::STANDBYS.may_load(deps.storage, member)?,
    })
}

/// Members in address order after `start_after`, of `role` if given.
pub fn members(
    deps: Deps,
    role: Option<Role>,
    start_after: Option<&str>,
    limit: Option<u32>,
) -> Result<Vec<MemberView>, ContractError> {
    check_start_after("members", start_after)?;
    let limit = limit.unwrap_or(MEMBERS_PAGE_DEFAULT).min(MEMBERS_PAGE) as usize;
    state::members_page(deps.storage, start_after, limit, |m| {
        role.map_or(true, |r| m.role == r)
    })
}

fn check_start_after(action: &'static str, start_after: Option<&str>) -> Result<(), ContractError> {
    if start_after.map_or(false, |a| a.len() > MAX_ADDRESS_LEN) {
        refuse!(
            action,
            "start_after is longer than an address ({MAX_ADDRESS_LEN} bytes)"
        );
    }
    Ok(())
}

/// The header of `epoch`, which must have started.
fn header(
    storage: &dyn Storage,
    action: &'static str,
    epoch: u64,
) -> Result<EpochHeader, ContractError> {
    match HEADERS.may_load(storage, epoch)? {
        Some(h) => Ok(h),
        None => Err(ContractError::EpochNotStarted {
            action,
            epoch,
            current: state::current_epoch(storage)?,
        }),
    }
}

/// The four address lists of epoch `e`: participants by role, those that committed, the
/// accepted hosts. Scans of the epoch's participants and commitments (they grow with them).
type Lists = (Vec<String>, Vec<String>, Vec<String>, Vec<String>);

fn lists(storage: &dyn Storage, e: u64) -> Result<Lists, ContractError> {
    let mut hosts = Vec::new();
    let mut validators = Vec::new();
    let mut accepted = Vec::new();
    let payouts = records::payouts(storage, e)?;
    for (address, p) in PARTICIPANTS.prefix(e).all(storage)? {
        if payouts
            .get(&address)
            .map_or(false, |x| x.outcome == Outcome::Accepted)
        {
            accepted.push(address.clone());
        }
        match p.role {
            Role::Host => hosts.push(address),
            Role::Validator => validators.push(address),
        }
    }
    let committed = COMMITMENTS
        .prefix(e)
        .all(storage)?
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    Ok((hosts, validators, committed, accepted))
}

/// The lengths of the four lists of epoch `header`, from its counters (`en/`): join counts each
/// seat once (an eviction swaps one seat for another), commit each commitment, finalize each
/// accepted host and the exclusions stage each host it withdrew. Every version kept all but the
/// last (the phases wait on them); an epoch whose exclusions stage began on a contract before
/// 0.3.4 has no tally of its withdrawals, so its counts are None (the caller reads its paged
/// report): rare, and only a scan of the epoch's exclusions could rebuild it, which would make
/// `migrate` grow with the run. A few point reads either way.
fn counts(
    storage: &dyn Storage,
    header: &EpochHeader,
) -> Result<Option<EpochCounts>, ContractError> {
    let e = header.epoch;
    let c = records::load_counts(storage, e)?;
    if c.withdrawn.is_none() {
        let stage_ran = header.phase == Phase::Closed
            || header
                .closing
                .as_ref()
                .map_or(false, |c| c.stage == Stage::Exclusions);
        let excluded = match crate::epoch::agreed_hash(header, &c) {
            Some(hash) if stage_ran => crate::epoch::finalize::has_exclusions(storage, e, &hash)?,
            _ => false,
        };
        if excluded {
            return Ok(None);
        }
    }
    Ok(Some(EpochCounts {
        hosts: c.hosts,
        validators: c.validators,
        committed: c.committed,
        accepted: c.accepted - c.withdrawn.unwrap_or(0),
    }))
}

/// What an epoch's answer carries besides its header: the four address lists (grow with the
/// participants) and their lengths (one point read).
#[derive(Clone, Copy)]
struct Parts {
    lists: bool,
    counts: bool,
}

impl Parts {
    /// Lists unless `lists: false`; counts only with `counts: true`.
    fn of(lists: Option<bool>, counts: Option<bool>) -> Self {
        Parts {
            lists: lists.unwrap_or(true),
            counts: counts.unwrap_or(false),
        }
    }
}

/// An epoch's answer: its header and, when `parts.lists`, its four address lists (absent
/// otherwise, so the answer costs the same whatever the number of participants), and their
/// lengths when `parts.counts`.
fn info(
    storage: &dyn Storage,
    header: EpochHeader,
    parts: Parts,
) -> Result<EpochInfo, ContractError> {
    let e = header.epoch;
    let (hosts, validators, committed, accepted) = if parts.lists {
        let (h, v, c, a) = lists(storage, e)?;
        (Some(h), Some(v), Some(c), Some(a))
    } else {
        (None, None, None, None)
    };
    let counts = if parts.counts {
        counts(storage, &header)?
    } else {
        None
    };
    Ok(EpochInfo {
        epoch: e,
        phase: header.phase.as_str(),
        phase_deadline: header.phase_deadline,
        started_at: header.started_at,
        model_hash: header.model_hash,
        prev_seed: header.prev_seed,
        seed: header.seed,
        next_model_hash: header.next_model_hash,
        agreed: header.agreed,
        hosts,
        validators,
        committed,
        accepted,
        counts,
        round: header.round,
        abandoned: header.abandoned,
        closing: header.closing.as_ref().map(|c| c.stage.as_str()),
        start_model_hash: header.start_model_hash,
        settled_start: header.settled_start,
        settling: None,
        delayed_seed: header.delayed_seed,
    })
}

/// `epoch` or, when None, the current one.
fn epoch_or_current(storage: &dyn Storage, epoch: Option<u64>) -> Result<u64, ContractError> {
    match epoch {
        Some(e) => Ok(e),
        None => state::current_epoch(storage),
    }
}

pub fn epoch(
    deps: Deps,
    epoch: Option<u64>,
    lists: Option<bool>,
    counts: Option<bool>,
) -> Result<EpochInfo, ContractError> {
    let e = epoch_or_current(deps.storage, epoch)?;
    let parts = Parts::of(lists, counts);
    let mut answer = info(deps.storage, header(deps.storage, "epoch", e)?, parts)?;
    if epoch.is_none() {
        answer.settling = state::SETTLING.may_load(deps.storage)?;
    }
    Ok(answer)
}

pub fn epochs(
    deps: Deps,
    start_after: Option<u64>,
    limit: Option<u32>,
    lists: Option<bool>,
    counts: Option<bool>,
) -> Result<Vec<EpochInfo>, ContractError> {
    let limit = limit.unwrap_or(EPOCHS_PAGE_DEFAULT).min(EPOCHS_PAGE) as usize;
    let parts = Parts::of(lists, counts);
    HEADERS
        .page(deps.storage, start_after, limit)?
        .into_iter()
        .map(|(_, h)| info(deps.storage, h, parts))
        .collect()
}

/// The index of `validator` in V of `epoch`, if it is in V.
fn validator_index(
    storage: &dyn Storage,
    epoch: u64,
    validator: &str,
) -> Result<Option<u16>, ContractError> {
    let set = records::load_validator_set(storage, epoch)?;
    Ok(set.iter().position(|v| v == validator).map(|i| i as u16))
}

/// The challenges `validator` sits on in `epoch`, each in the round it was assigned (first
/// round or dispute committee), among the challenged hosts after `start_after` (address order),
/// scanning at most `limit` hosts; with the last host scanned when more may follow.
pub fn challenges(
    deps: Deps,
    epoch: u64,
    validator: &str,
    start_after: Option<&str>,
    limit: Option<u32>,
) -> Result<(Vec<ChallengeInfo>, Option<String>), ContractError> {
    const ACTION: &str = "challenges";
    let storage = deps.storage;
    deps.api
        .addr_validate(validator)
        .map_err(|e| e.context("challenges: validator"))?;
    check_start_after(ACTION, start_after)?;
    header(storage, ACTION, epoch)?;
    let limit = limit
        .unwrap_or(CHALLENGES_PAGE_DEFAULT)
        .clamp(1, CHALLENGES_PAGE) as usize;
    let mut out = Vec::new();
    let index = match validator_index(storage, epoch, validator)? {
        Some(i) => i,
        None => return Ok((out, None)),
    };
    let set = records::load_validator_set(storage, epoch)?;
    let phase = header(storage, ACTION, epoch)?.phase;
    let mut last: Option<String> = None;
    for (scanned, record) in ASSIGNMENTS
        .prefix(epoch)
        .range(storage, start_after, Order::Ascending)
        .enumerate()
    {
        if scanned == limit {
            return Ok((out, last));
        }
        let (host, assignments) = record?;
        last = Some(host.clone());
        let mine: Vec<_> = assignments
            .into_iter()
            .filter_map(|a| a.round_of(index).map(|round| (round, a)))
            .collect();
        if mine.is_empty() {
            continue;
        }
        let commitment = COMMITMENTS.load_or(storage, (epoch, &host), || {
            ContractError::Corrupt("corrupt state: a challenged host without a commitment".into())
        })?;
        let endpoint = state::load_member(storage, &host)?
            .map(|m| m.endpoint)
            .unwrap_or_default();
        for (round, a) in sittings(mine, index) {
            let key = (epoch, host.as_str(), a.segment, validator);
            let (committed, revealed) = done(storage, key, round)?;
            out.push(ChallengeInfo {
                epoch,
                host: host.clone(),
                segment: a.segment,
                segments: commitment.segments,
                checkpoint_root: commitment.checkpoint_root.clone(),
                delta_hash: commitment.delta_hash.clone(),
                loss_digest: commitment.loss_digest.clone(),
                train_loss_micro: commitment.train_loss_micro,
                endpoint: endpoint.clone(),
                round,
                validators: a.addresses(&set)?,
                committed,
                revealed,
                disputed: a.disputed,
                gain_dispute: a.gain_dispute,
                due: due(phase, &a, round, committed, revealed),
                outcome: a.outcome,
            });
        }
    }
    Ok((out, None))
}

/// Each (round, challenge) a validator sits on, and, for a round-0 seat that objected to a
/// disputed challenge or sits on a gain dispute, its re-vote too (round [`REVOTE`], right after its round-0 seat).
fn sittings(mine: Vec<(u32, Assignment)>, index: u16) -> Vec<(u32, Assignment)> {
    let mut out = Vec::with_capacity(mine.len());
    for (round, a) in mine {
        let revotes = round == 0 && a.revotes(index);
        let copy = if revotes { Some(a.clone()) } else { None };
        out.push((round, a));
        if let Some(a) = copy {
            out.push((REVOTE, a));
        }
    }
    out
}

/// Whether a validator sitting in `round` on the challenge at `key` committed and opened its
/// verdict of that round (a re-vote: its `dispute` commitment, and its opening after the
/// round-0 one).
fn done(
    storage: &dyn Storage,
    key: (u64, &str, u32, &str),
    round: u32,
) -> Result<(bool, bool), ContractError> {
    Ok(if round == REVOTE {
        let opened = VOTES
            .may_load(storage, key)?
            .map_or(false, |v| v.round == REVOTE);
        (REVOTE_COMMITS.has(storage, key), opened)
    } else {
        (VERDICT_COMMITS.has(storage, key), VOTES.has(storage, key))
    })
}

/// Whether `phase` waits for a validator sitting in `round` on `a`: its commitment (verify: a
/// round-0 seat; dispute: the final round of a disputed challenge, or an objecting seat's
/// re-vote) or its opening (verdict_reveal: a round-0 seat of an undisputed challenge;
/// dispute_reveal: anyone on a disputed challenge).
fn due(phase: Phase, a: &Assignment, round: u32, committed: bool, revealed: bool) -> bool {
    a.outcome.is_pending()
        && match phase {
            Phase::Verify => round == 0 && !committed,
            Phase::Dispute => a.disputed && round != 0 && !committed,
            Phase::VerdictReveal => round == 0 && !a.disputed && committed && !revealed,
            Phase::DisputeReveal => a.disputed && committed && !revealed,
            _ => false,
        }
}

/// A validator's (assigned, voted, to_commit, to_reveal) in epoch `e` by a walk of every host's
/// assignments: what `participant` answered before sittings were counted (`crate::sittings`),
/// kept as the counters' reference in tests (its reads grow with the hosts and the validator's
/// sittings; not in the wasm, whose size is capped).
#[cfg(test)]
pub fn walk_sittings(
    storage: &dyn Storage,
    h: &EpochHeader,
    e: u64,
    address: &str,
    index: u16,
) -> Result<(u32, u32, u32, u32), ContractError> {
    let (mut assigned, mut voted, mut to_commit, mut to_reveal) = (0u32, 0u32, 0u32, 0u32);
    for record in ASSIGNMENTS.prefix(e).range(storage, None, Order::Ascending) {
        let (host, list) = record?;
        let mine: Vec<(u32, Assignment)> = list
            .into_iter()
            .filter_map(|a| a.round_of(index).map(|round| (round, a)))
            .collect();
        for (round, a) in sittings(mine, index).iter() {
            let key = (e, host.as_str(), a.segment, address);
            let (committed, opened) = done(storage, key, *round)?;
            if *round != REVOTE {
                assigned += 1;
                voted += u32::from(opened);
            }
            if due(h.phase, a, *round, committed, opened) {
                if committed {
                    to_reveal += 1;
                } else {
                    to_commit += 1;
                }
            }
        }
    }
    Ok((assigned, voted, to_commit, to_reveal))
}

/// One participant's part in `epoch` (the current one when None), from point reads: a
/// validator's sittings from its counters (`crate::sittings`), a constant number of reads
/// whatever the number of hosts or of its sittings.
/// `compute_class {class, epoch}`: the class's validators that joined `epoch` so far (a scan of
/// the epoch's participants, at most `max_hosts + max_validators`), whether they serve it, and
/// its validators in the previous epoch's V.
pub fn compute_class(
    deps: Deps,
    class: &str,
    epoch: Option<u64>,
) -> Result<ComputeClassStatus, ContractError> {
    const ACTION: &str = "compute_class";
    let storage = deps.storage;
    classes::validate(ACTION, class)?;
    let e = epoch_or_current(storage, epoch)?;
    let h = header(storage, ACTION, e)?;
    let config = CONFIG.load(storage)?;
    let (mut validators, mut stake) = (0u32, 0u128);
    for record in PARTICIPANTS
        .prefix(e)
        .range(storage, None, Order::Ascending)
    {
        let (_, p) = record?;
        if p.role == Role::Validator && p.class == class {
            validators += 1;
            stake += p.stake.0;
        }
    }
    let (mut previous_validators, mut previous_stake) = (0u32, 0u128);
    if e > 0 {
        let set = records::load_validator_set(storage, e - 1)?;
        let stakes = records::load_validator_stakes(storage, e - 1)?;
        for (v, s) in set.iter().zip(stakes.iter()) {
            let p = PARTICIPANTS.may_load(storage, (e - 1, v.as_str()))?;
            if p.map_or(false, |p| p.class == class) {
                previous_validators += 1;
                previous_stake += s.0;
            }
        }
    }
    let needed = config.phases.min_validators.max(1);
    Ok(ComputeClassStatus {
        epoch: e,
        phase: h.phase.as_str(),
        class: class.to_string(),
        validators,
        stake: Uint128(stake),
        needed,
        served: classes::served(validators as usize, config.phases.min_validators),
        previous_validators,
        previous_stake: Uint128(previous_stake),
    })
}

pub fn participant(
    deps: Deps,
    address: &str,
    epoch: Option<u64>,
) -> Result<ParticipantStatus, ContractError> {
    let storage = deps.storage;
    deps.api
        .addr_validate(address)
        .map_err(|e| e.context("participant"))?;
    let e = epoch_or_current(storage, epoch)?;
    let h = header(storage, "participant", e)?;
    let joined = PARTICIPANTS.may_load(storage, (e, address))?;
    let (mut assigned, mut voted, mut to_commit, mut to_reveal) = (0u32, 0u32, 0u32, 0u32);
    let mut ready_due = false;
    if let Some(p) = joined.as_ref().filter(|p| p.role == Role::Validator) {
        if let Some(index) = validator_index(storage, e, address)? {
            // Constant reads: the validator's counts and its electorates' disputes (an epoch
            // assigned by a version without them shows none: `docs/contract.md`, "Upgrades").
            if COUNTED.has(storage, (e, "")) {
                let s = sittings::load(storage, e, address)?;
                let finals = sittings::finals(storage, e, &p.class, &s)?;
                (assigned, voted, to_commit, to_reveal) =
                    sittings::status(&s, finals, h.phase, h.closing.is_some());
            }
            ready_due = h.phase == Phase::Objection
                && h.closing.is_none()
                && SEATED
                    .may_load(storage, e)?
                    .unwrap_or_default()
                    .binary_search(&index)
                    .is_ok()
                && !READY.has(storage, (e, address));
        }
    }
    let is_joined = joined.is_some();
    let is_host = joined.as_ref().map(|p| p.role) == Some(Role::Host);
    Ok(ParticipantStatus {
        epoch: e,
        phase: h.phase.as_str(),
        phase_deadline: h.phase_deadline,
        model_hash: h.model_hash,
        prev_seed: h.prev_seed,
        address: address.to_string(),
        joined: is_joined,
        role: joined.as_ref().map(|p| p.role),
        stake: joined.map(|p| p.stake).unwrap_or_default(),
        committed: is_joined && COMMITMENTS.has(storage, (e, address)),
        revealed: is_joined && REVEALS.has(storage, (e, address)),
        round: h.round,
        assigned,
        voted,
        to_commit,
        to_reveal,
        ready_due,
        challenged: is_host && ASSIGNMENTS.has(storage, (e, address)),
        traps_opened: is_host && TRAPS.has(storage, (e, address)),
        outcome: records::load_payout(storage, e, address)?.outcome.as_str(),
        proposed: is_joined && PROPOSALS.has(storage, (e, address)),
    })
}

/// The accepted hosts of `epoch` after `start_after`, in address order, with the endpoint they
/// advertise now and the Δ hash they committed. Empty until the epoch is finalized.
pub fn aggregation_inputs(
    deps: Deps,
    epoch: u64,
    start_after: Option<&str>,
    limit: Option<u32>,
) -> Result<Vec<AggregationInput>, ContractError> {
    const ACTION: &str = "aggregation_inputs";
    let storage = deps.storage;
    check_start_after(ACTION, start_after)?;
    header(storage, ACTION, epoch)?;
    let limit = limit
        .unwrap_or(AGGREGATION_PAGE_DEFAULT)
        .min(AGGREGATION_PAGE) as usize;
    let mut out = Vec::new();
    for record in PAYOUTS
        .prefix(epoch)
        .range(storage, start_after, Order::Ascending)
    {
        if out.len() == limit {
            break;
        }
        let (address, payout) = record?;
        if payout.outcome != Outcome::Accepted {
            continue;
        }
        let commitment = COMMITMENTS.load_or(storage, (epoch, &address), || {
            ContractError::Corrupt(format!(
                "corrupt state: accepted host {address} without a commitment"
            ))
        })?;
        let endpoint = state::load_member(storage, &address)?
            .map(|m| m.endpoint)
            .unwrap_or_default();
        let gain_micro = host_gain(storage, epoch, &address, commitment.segments)?;
        out.push(AggregationInput {
            address,
            endpoint,
            delta_hash: commitment.delta_hash,
            segments: commitment.segments,
            gain_micro,
        });
    }
    Ok(out)
}

/// The probe gain decided on `host`'s last segment (of `segments`) in `epoch`, if any.
fn host_gain(
    storage: &dyn Storage,
    epoch: u64,
    host: &str,
    segments: u32,
) -> Result<Option<i64>, ContractError> {
    Ok(ASSIGNMENTS
        .may_load(storage, (epoch, host))?
        .and_then(|list| list.into_iter().find(|a| a.segment + 1 == segments))
        .and_then(|a| a.gain_micro))
}

/// Votes one unit of a `report` page pays for: each is read with its commitment (and a re-vote's),
/// and answered with its salt, evidence and distance.
pub const REPORT_VOTES_PER_UNIT: usize = 16;

/// What a host costs a `report` page: 1, plus one unit per [`REPORT_VOTES_PER_UNIT`] votes read.
pub fn report_cost(votes_read: usize) -> u32 {
    1 + (votes_read / REPORT_VOTES_PER_UNIT) as u32
}

/// What a challenge of `seats` members may cost a `report` page, known before it is read: 1, plus
/// one unit per [`REPORT_VOTES_PER_UNIT`] members (each may have committed, re-committed and
/// voted). A host whose line and challenges bound more than a page's `limit` is split over pages.
pub fn challenge_bound(seats: usize) -> u32 {
    1 + (seats / REPORT_VOTES_PER_UNIT) as u32
}

/// A `report` page as it fills.
struct ReportFill<'a> {
    storage: &'a dyn Storage,
    epoch: u64,
    set: Option<Vec<String>>, // V, read once a challenged host needs it
    hosts: Vec<HostReport>,
    validators: Vec<ValidatorPart>,
    challenges: Vec<ChallengeReport>,
    counts: BTreeMap<String, ValidatorStats>,
    spent: u32,
}

impl<'a> ReportFill<'a> {
    fn set(&mut self) -> Result<&[String], ContractError> {
        if self.set.is_none() {
            self.set = Some(records::load_validator_set(self.storage, self.epoch)?);
        }
        Ok(self.set.as_deref().unwrap_or_default())
    }

    fn is_empty(&self) -> bool {
        self.hosts.is_empty() && self.validators.is_empty() && self.challenges.is_empty()
    }

    /// Add a tally's challenges and the counts they give.
    fn add(&mut self, t: Tally) {
        for (v, stats) in t.validators.iter() {
            self.counts.entry(v.clone()).or_default().add(stats);
        }
        self.challenges
            .extend(t.challenges.into_iter().map(challenge_report));
    }

    /// Add `host`'s challenges (`list`) from segment `from` on, in segment order, while their
    /// bounds fit `limit` (at least one, the page's first challenge). Returns the segment of the
    /// first challenge left for the next page, if any.
    fn split_host(
        &mut self,
        host: &str,
        list: &[Assignment],
        from: u32,
        limit: u32,
    ) -> Result<Option<u32>, ContractError> {
        let storage = self.storage;
        let traps = TRAPS.may_load(storage, (self.epoch, host))?;
        let mut order: Vec<&Assignment> = list.iter().filter(|a| a.segment >= from).collect();
        order.sort_by_key(|a| a.segment);
        self.set()?;
        let set = self.set.take().unwrap_or_default();
        let mut stopped = None;
        for a in order {
            let bound = challenge_bound(a.members(&set)?.len());
            if !self.challenges.is_empty() && self.spent.saturating_add(bound) > limit {
                stopped = Some(a.segment);
                break;
            }
            let c = tally::challenge_tally(storage, self.epoch, host, a, &set, traps.as_ref())?;
            self.spent = self.spent.saturating_add(bound);
            let one = BTreeMap::from([((host.to_string(), a.segment), c)]);
            self.add(Tally::of_challenges(one, BTreeMap::new()));
        }
        self.set = Some(set);
        Ok(stopped)
    }
}

/// A page of the report of `epoch`: its participants after `start_after` in address order, each
/// host with its challenges (every vote) and the counts they give the validators that sat on
/// them, until the page's `limit` units are spent (a host costs [`report_cost`] of the votes it
/// reads, a validator 1; a page holds at least one participant or challenge), so no page grows
/// with the epoch. A host whose line and challenges bound more than `limit` units
/// ([`challenge_bound`]: a fully disputed host at many validators) starts a page and is split
/// over pages a challenge at a time: such a page ends with `next` that host and `next_segment`
/// the challenge it stopped before, and the next page resumes there (`start_after` the host,
/// `start_segment` the segment), listing the host's line on its first page only.
pub fn report(
    deps: Deps,
    epoch: u64,
    start_after: Option<&str>,
    start_segment: Option<u32>,
    limit: Option<u32>,
) -> Result<ReportPage, ContractError> {
    const ACTION: &str = "report";
    let storage = deps.storage;
    check_start_after(ACTION, start_after)?;
    let limit = limit.unwrap_or(REPORT_PAGE_DEFAULT);
    if limit == 0 || limit > REPORT_PAGE {
        refuse!(
            ACTION,
            "limit must be between 1 and {REPORT_PAGE}, got {limit}"
        );
    }
    let h = header(storage, ACTION, epoch)?;
    let config = CONFIG.load(storage)?;
    let mut fill = ReportFill {
        storage,
        epoch,
        set: None,
        hosts: Vec::new(),
        validators: Vec::new(),
        challenges: Vec::new(),
        counts: BTreeMap::new(),
        spent: 0,
    };
    let (mut last, mut next, mut next_segment) = (None::<String>, None, None);
    let mut resumed = None;
    if let Some(from) = start_segment {
        // The page resumes inside a split host, at its challenge of segment `from`.
        let host = match start_after {
            Some(host) => host,
            None => refuse!(ACTION, "start_segment needs start_after, the host it is in"),
        };
        let list = match PARTICIPANTS.may_load(storage, (epoch, host))? {
            Some(p) if p.role == Role::Host => ASSIGNMENTS.may_load(storage, (epoch, host))?,
            _ => None,
        };
        let list = match list {
            Some(list) => list,
            None => refuse!(
                ACTION,
                "start_segment: {host} is not a challenged host of epoch {epoch}"
            ),
        };
        resumed = fill.split_host(host, &list, from, limit)?;
        last = Some(host.to_string());
    }
    if let Some(segment) = resumed {
        next = last.take();
        next_segment = Some(segment);
    } else {
        for record in PARTICIPANTS
            .prefix(epoch)
            .range(storage, start_after, Order::Ascending)
        {
            let (address, p) = record?;
            if fill.spent >= limit {
                next = last; // a participant follows the page
                break;
            }
            let revealed = REVEALS.has(storage, (epoch, &address));
            let pay = records::load_payout(storage, epoch, &address)?;
            match p.role {
                Role::Host => {
                    let list = ASSIGNMENTS.may_load(storage, (epoch, &address))?;
                    let bound = match list.as_ref() {
                        Some(list) => {
                            let set = fill.set()?;
                            let mut bound = 1u32;
                            for a in list {
                                bound =
                                    bound.saturating_add(challenge_bound(a.members(set)?.len()));
                            }
                            bound
                        }
                        None => 1,
                    };
                    let line =
                        |p, pay| host_report(storage, epoch, address.clone(), p, revealed, pay);
                    match list {
                        Some(list) if bound > limit => {
                            if !fill.is_empty() {
                                next = last; // a host split over pages starts one
                                break;
                            }
                            fill.hosts.push(line(p, pay)?);
                            fill.spent = 1;
                            if let Some(segment) = fill.split_host(&address, &list, 0, limit)? {
                                next = Some(address);
                                next_segment = Some(segment);
                                break;
                            }
                        }
                        Some(list) => {
                            let set = fill.set()?;
                            let t = Tally::of_assignments(storage, epoch, &address, &list, set)?;
                            fill.spent = fill.spent.saturating_add(report_cost(votes_read(&t)));
                            fill.add(t);
                            fill.hosts.push(line(p, pay)?);
                        }
                        None => {
                            fill.spent += 1;
                            fill.hosts.push(line(p, pay)?);
                        }
                    }
                }
                Role::Validator => {
                    fill.spent += 1;
                    fill.validators.push(ValidatorPart {
                        address: address.clone(),
                        compute_class: p.class,
                        stake: p.stake,
                        weight: p.weight,
                        revealed,
                        outcome: pay.outcome.as_str(),
                        slashed: pay.slashed,
                        reward: pay.reward,
                        catcher_reward: pay.catcher,
                    });
                }
            }
            last = Some(address);
        }
    }
    Ok(ReportPage {
        run_id: config.run_id,
        epoch,
        phase: h.phase.as_str(),
        phase_deadline: h.phase_deadline,
        started_at: h.started_at,
        model_hash: h.model_hash,
        next_model_hash: h.next_model_hash,
        agreed: h.agreed,
        seed: h.seed,
        round: h.round,
        abandoned: h.abandoned,
        slashed_total: h.slashed_total,
        to_treasury: h.to_treasury,
        to_catchers: h.to_catchers,
        rewards_total: h.rewards_total,
        hosts: fill.hosts,
        validators: fill.validators,
        challenges: fill.challenges,
        counts: fill
            .counts
            .into_iter()
            .map(|(validator, c)| ValidatorCounts {
                validator,
                assigned: c.assigned,
                committed: c.committed,
                voted: c.voted,
                against: c.against,
                unavailable: c.unavailable,
                unserved: c.unserved,
            })
            .collect(),
        next,
        next_segment,
    })
}

/// A host's line of the report: its stake, commitment, traps, proposal and payout.
fn host_report(
    storage: &dyn Storage,
    epoch: u64,
    address: String,
    p: records::Participant,
    revealed: bool,
    pay: records::Payout,
) -> Result<HostReport, ContractError> {
    let commitment = COMMITMENTS.may_load(storage, (epoch, &address))?;
    let proposal = PROPOSALS.may_load(storage, (epoch, &address))?;
    let gain_micro = match commitment.as_ref() {
        Some(c) => host_gain(storage, epoch, &address, c.segments)?,
        None => None,
    };
    Ok(HostReport {
        gain_micro,
        compute_class: p.class,
        stake: p.stake,
        weight: p.weight,
        revealed,
        commitment: commitment.map(|c| CommitmentView {
            epoch,
            checkpoint_root: c.checkpoint_root,
            delta_hash: c.delta_hash,
            loss_digest: c.loss_digest,
            segments: c.segments,
            train_loss_micro: c.train_loss_micro,
            trap_commit: c.trap_commit,
        }),
        outcome: pay.outcome.as_str(),
        slashed: pay.slashed,
        reward: pay.reward,
        catcher_reward: pay.catcher,
        traps: TRAPS.may_load(storage, (epoch, &address))?,
        proposal: proposal.map(|m| ProposalView {
            epoch,
            model_hash: m.model_hash,
            val_loss_micro: m.val_loss_micro,
            excluded: m.excluded,
        }),
        address,
    })
}

/// A challenge of the report: its seats and final voters with their commitments and votes.
fn challenge_report(((host, segment), c): ((String, u32), ChallengeTally)) -> ChallengeReport {
    let mut votes = c.votes;
    let mut commitments = c.committed;
    ChallengeReport {
        host,
        segment,
        trap: c.trap,
        rounds: u32::from(c.disputed),
        objectors: c.objectors.into_iter().collect(),
        votes: c
            .members
            .into_iter()
            .map(|(round, v)| {
                let vote = votes.remove(&v);
                VoteView {
                    round,
                    commitment: commitments.remove(&v),
                    outcome: vote.as_ref().map(|x| x.outcome),
                    distance: vote.as_ref().map(|x| x.distance.clone()),
                    evidence: vote.as_ref().map(|x| x.evidence.clone()),
                    gain_micro: vote.as_ref().and_then(|x| x.gain_micro),
                    dispute_gain_micro: vote.as_ref().and_then(|x| x.dispute_gain_micro),
                    round0_gain_micro: vote.as_ref().and_then(|x| x.first_gain_micro),
                    salt: vote.map(|x| x.salt),
                    validator: v,
                }
            })
            .collect(),
        outcome: c.outcome,
        gain_micro: c.decided_gain,
    }
}
