//! The second half of an epoch: the seed and the challenges at the close of `reveal`, the
//! validators' verdicts, and finalize (tally, outcomes, slashing, catcher shares, rewards).
//! `docs/contract.md`, "Challenges" and "Finalize".
//!
//! Finalize reads each participant, assignment and vote once (three prefix scans), decides
//! everything in memory, and writes each participant and each affected member once: its work is
//! linear in hosts × challenges × r.

use std::collections::{BTreeMap, BTreeSet};

use crate::api;
use crate::beacon;
use crate::epoch::{self, expect_phase, hex_field, Epoch};
use crate::error::{fail, ContractError};
use crate::funds::{bank_send, nonpayable};
use crate::hashing::hex;
use crate::records::{
    self, Assignment, ChallengeOutcome, Outcome, Participant, Payout, Phase, Vote, VoteOutcome,
};
use crate::sampling::{challenge_validators, challenged_segments};
use crate::spec::BPS_ONE;
use crate::staking::slash;
use crate::state::{self, Config, Member, MemberTotals, Role};
use crate::types::{Event, MessageInfo, Response, Uint128};

/// At the close of `reveal` (height `at`): the epoch seed from the valid reveals; `absent` for
/// hosts without a commitment, `no_reveal` for participants without a reveal; the challenges of
/// every committed and revealed host (when verification is enabled).
pub fn close_reveal(config: &Config, ep: &mut Epoch, at: u64, out: &mut Response) -> Result<(), ContractError> {
    let e = ep.number();
    let run_id = epoch::run_id_bytes(config)?;
    let reveals = records::reveals(e)?;
    let seed = beacon::epoch_seed(&run_id, e, &reveals);
    let revealed: BTreeSet<&str> = reveals.iter().map(|(a, _)| a.as_str()).collect();
    let committed: BTreeSet<String> = records::commitments(e)?.into_iter().map(|(a, _)| a).collect();
    let participants = records::participants(e)?;
    // The epoch's validators V: joined and revealed, in address order.
    let validators: Vec<String> = participants
        .iter()
        .filter(|(a, p)| p.role == Role::Validator && revealed.contains(a.as_str()))
        .map(|(a, _)| a.clone())
        .collect();
    let (k, r) = (config.verification.challenges_k, config.verification.validators_r);
    let mut expected: u32 = 0;
    let mut challenged: u32 = 0;
    for (address, participant) in participants.iter() {
        let outcome = if participant.role == Role::Host && !committed.contains(address) {
            Outcome::Absent
        } else if !revealed.contains(address.as_str()) {
            Outcome::NoReveal
        } else {
            if participant.role == Role::Host && config.verification.enabled {
                let mut assignments = Vec::new();
                for segment in challenged_segments(&seed, address, config.segments, k) {
                    let picked = challenge_validators(&seed, address, segment, &validators, r);
                    expected += picked.len() as u32;
                    // V is sorted: store each validator as its index in V.
                    let indices = picked
                        .iter()
                        .map(|v| validators.binary_search(v).map(|i| i as u16))
                        .collect::<Result<Vec<u16>, usize>>()
                        .map_err(|_| ContractError::new("a challenge validator is not in V"))?;
                    assignments.push(Assignment {
                        segment,
                        validators: indices,
                    });
                }
                challenged += 1;
                records::save_assignments(e, address, &assignments);
            }
            continue;
        };
        records::save_payout(
            e,
            address,
            &Payout {
                outcome,
                ..Payout::default()
            },
        );
    }
    if config.verification.enabled && !validators.is_empty() {
        records::save_validator_set(e, &validators);
    }
    let seed_hex = hex(&seed);
    out.events.push(
        Event::new("seed")
            .add_attribute("epoch", e)
            .add_attribute("seed", &seed_hex)
            .add_attribute("reveals", reveals.len())
            .add_attribute("challenged_hosts", challenged)
            .add_attribute("verdicts_expected", expected)
            .add_attribute("at", at),
    );
    ep.header_mut().seed = Some(seed_hex);
    ep.counts_mut().votes_expected = expected;
    Ok(())
}

/// A canonical decimal string (`protocol.types.Dec` as serialized): no sign, no exponent, no
/// leading zeros, no trailing fractional zeros, at most 40 characters.
fn is_canonical_decimal(text: &str) -> bool {
    if text.is_empty() || text.len() > 40 {
        return false;
    }
    let (int, frac) = match text.find('.') {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let int_ok = !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && (int == "0" || !int.starts_with('0'));
    let frac_ok = match frac {
        None => true,
        Some(f) => !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) && !f.ends_with('0'),
    };
    int_ok && frac_ok
}

#[allow(clippy::too_many_arguments)]
pub fn verdict(
    ep: &mut Epoch,
    info: &MessageInfo,
    epoch: u64,
    host: String,
    segment: u32,
    outcome: VoteOutcome,
    distance: String,
    evidence: String,
) -> Result<Response, ContractError> {
    const ACTION: &str = "verdict";
    nonpayable(info, ACTION)?;
    expect_phase(ep, ACTION, epoch, Phase::Verify)?;
    api::addr_validate(&host).map_err(|e| e.context("verdict: host"))?;
    let sender = &info.sender;
    let assigned = match records::load_assignments(epoch, &host)?
        .and_then(|list| list.into_iter().find(|a| a.segment == segment))
    {
        Some(a) => a.addresses(&records::load_validator_set(epoch)?)?.iter().any(|v| v == sender),
        None => false,
    };
    if !assigned {
        fail!("{ACTION}: {sender} is not assigned to host {host} segment {segment} of epoch {epoch}");
    }
    if records::has_vote(epoch, &host, segment, sender) {
        fail!("{ACTION}: {sender} already voted on host {host} segment {segment} of epoch {epoch}");
    }
    if !is_canonical_decimal(&distance) {
        fail!("{ACTION}: distance must be a canonical decimal string like \"0.0123\", got {distance:?}");
    }
    hex_field(ACTION, "evidence", &evidence)?;
    records::save_vote(
        epoch,
        &host,
        segment,
        sender,
        &Vote {
            outcome,
            distance,
            evidence,
        },
    );
    ep.counts_mut().votes_posted += 1;
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("validator", sender)
        .add_attribute("host", &host)
        .add_attribute("segment", segment)
        .add_attribute("outcome", outcome.as_str()))
}

/// How a validator did on its assignments.
#[derive(Default, Clone, Copy)]
pub struct ValidatorStats {
    pub assigned: u32,
    pub voted: u32,
    pub against: u32,
}

/// Per-challenge tallies, derived from the assignments and votes of an epoch; shared by finalize
/// and the report so both always agree.
pub struct Tally {
    /// (host, segment) -> assigned validators, their votes, and the outcome.
    pub challenges: BTreeMap<(String, u32), ChallengeTally>,
    pub validators: BTreeMap<String, ValidatorStats>,
}

pub struct ChallengeTally {
    pub validators: Vec<String>,
    pub votes: BTreeMap<String, Vote>,
    pub outcome: ChallengeOutcome,
}

impl Tally {
    pub fn of_epoch(epoch: u64, decided: bool) -> Result<Tally, ContractError> {
        let mut challenges: BTreeMap<(String, u32), ChallengeTally> = BTreeMap::new();
        let assignments = records::all_assignments(epoch)?;
        let set = if assignments.is_empty() {
            Vec::new()
        } else {
            records::load_validator_set(epoch)?
        };
        for (host, list) in assignments {
            for a in list {
                challenges.insert(
                    (host.clone(), a.segment),
                    ChallengeTally {
                        validators: a.addresses(&set)?,
                        votes: BTreeMap::new(),
                        outcome: ChallengeOutcome::Pending,
                    },
                );
            }
        }
        for cast in records::votes(epoch)? {
            if let Some(c) = challenges.get_mut(&(cast.host, cast.segment)) {
                c.votes.insert(cast.validator, cast.vote);
            }
        }
        let mut validators: BTreeMap<String, ValidatorStats> = BTreeMap::new();
        for c in challenges.values_mut() {
            if decided {
                let outcomes: Vec<VoteOutcome> = c.votes.values().map(|v| v.outcome).collect();
                c.outcome = ChallengeOutcome::tally(&outcomes);
            }
            for v in c.validators.iter() {
                let stats = validators.entry(v.clone()).or_default();
                stats.assigned += 1;
                if let Some(vote) = c.votes.get(v) {
                    stats.voted += 1;
                    if let Some(majority) = c.outcome.decided() {
                        if vote.outcome != majority {
                            stats.against += 1;
                        }
                    }
                }
            }
        }
        Ok(Tally {
            challenges,
            validators,
        })
    }

    /// A host's outcome from its challenges: any fail → invalid; else any unavailable →
    /// unavailable; else any inconclusive → inconclusive; else accepted.
    pub fn host_outcome(&self, host: &str) -> Option<Outcome> {
        let mut found = false;
        let mut worst = Outcome::Accepted;
        let rank = |o: Outcome| match o {
            Outcome::Invalid => 3,
            Outcome::Unavailable => 2,
            Outcome::Inconclusive => 1,
            _ => 0,
        };
        let start = (host.to_string(), 0u32);
        for ((h, _), c) in self.challenges.range(start..) {
            if h != host {
                break;
            }
            found = true;
            let o = match c.outcome {
                ChallengeOutcome::Fail => Outcome::Invalid,
                ChallengeOutcome::Unavailable => Outcome::Unavailable,
                ChallengeOutcome::Pass => Outcome::Accepted,
                _ => Outcome::Inconclusive,
            };
            if rank(o) > rank(worst) {
                worst = o;
            }
        }
        if found {
            Some(worst)
        } else {
            None
        }
    }

    /// The validators who voted `fail` on `host`'s failed challenges.
    pub fn catchers(&self, host: &str) -> BTreeSet<String> {
        let start = (host.to_string(), 0u32);
        let mut out = BTreeSet::new();
        for ((h, _), c) in self.challenges.range(start..) {
            if h != host {
                break;
            }
            if c.outcome == ChallengeOutcome::Fail {
                for (v, vote) in c.votes.iter() {
                    if vote.outcome == VoteOutcome::Fail {
                        out.insert(v.clone());
                    }
                }
            }
        }
        out
    }
}

/// A validator's outcome: voted against a decided outcome → wrong; else missed a vote →
/// silent; else assigned → diligent; else idle.
pub fn validator_outcome(stats: ValidatorStats) -> Outcome {
    if stats.against > 0 {
        Outcome::Wrong
    } else if stats.voted < stats.assigned {
        Outcome::Silent
    } else if stats.assigned > 0 {
        Outcome::Diligent
    } else {
        Outcome::Idle
    }
}

/// The slash of an outcome, in basis points of total stake. A host that neither committed nor
/// revealed pays both the absent and the no-reveal slash (capped at 100 %): withholding a reveal
/// must never be free, or a participant could choose between two seeds.
fn slash_bps(config: &Config, outcome: Outcome, revealed: bool) -> u16 {
    let econ = &config.economics;
    match outcome {
        Outcome::Invalid => econ.slash_invalid_bps,
        Outcome::Unavailable => econ.slash_unavailable_bps,
        Outcome::Absent if revealed => econ.slash_absent_bps,
        Outcome::Absent => econ
            .slash_absent_bps
            .saturating_add(econ.slash_no_reveal_bps)
            .min(BPS_ONE),
        Outcome::NoReveal => econ.slash_no_reveal_bps,
        Outcome::Wrong => econ.slash_validator_wrong_bps,
        Outcome::Silent => econ.slash_validator_silent_bps,
        _ => 0,
    }
}

/// Members touched by settlement, loaded once and saved once: the member record only where its
/// stake changed (slashes), the small lifetime-totals record wherever a total changed.
struct MemberCache {
    members: BTreeMap<String, Member>,
    totals: BTreeMap<String, MemberTotals>,
}

impl MemberCache {
    fn member(&mut self, address: &str) -> Result<&mut Member, ContractError> {
        if !self.members.contains_key(address) {
            let member = state::load_member(address)?
                .ok_or_else(|| ContractError::new(format!("corrupt state: participant {address} is not a member")))?;
            self.members.insert(address.to_string(), member);
        }
        Ok(self.members.get_mut(address).expect("just inserted"))
    }

    fn totals(&mut self, address: &str) -> Result<&mut MemberTotals, ContractError> {
        if !self.totals.contains_key(address) {
            let totals = state::load_member_totals(address)?;
            self.totals.insert(address.to_string(), totals);
        }
        Ok(self.totals.get_mut(address).expect("just inserted"))
    }

    fn save(&self) {
        for member in self.members.values() {
            state::save_member(member);
        }
        for (address, totals) in self.totals.iter() {
            state::save_member_totals(address, totals);
        }
    }
}

/// Finalize epoch `e` at height `at` (the close of `verify`, or of `reveal` when verification is
/// disabled): decide every outcome, slash, pay catchers, the treasury and the rewards.
pub fn finalize(config: &Config, ep: &mut Epoch, at: u64, out: &mut Response) -> Result<(), ContractError> {
    let e = ep.number();
    let econ = &config.economics;
    let tally = Tally::of_epoch(e, true)?;
    let revealed: BTreeSet<String> = records::reveals(e)?.into_iter().map(|(a, _)| a).collect();
    let mut stored = records::payouts(e)?;
    // (address, participant, payout) in address order; `changed` marks payouts to write.
    let mut participants: Vec<(String, Participant, Payout)> = records::participants(e)?
        .into_iter()
        .map(|(a, p)| {
            let payout = stored.remove(&a).unwrap_or_default();
            (a, p, payout)
        })
        .collect();

    // 1. Outcomes.
    let mut changed = vec![false; participants.len()];
    for (i, (address, p, pay)) in participants.iter_mut().enumerate() {
        if pay.outcome != Outcome::Pending {
            continue;
        }
        pay.outcome = match p.role {
            Role::Host => match tally.host_outcome(address) {
                Some(o) => o,
                None if !config.verification.enabled => Outcome::Accepted,
                None => Outcome::Inconclusive,
            },
            Role::Validator => {
                validator_outcome(tally.validators.get(address).copied().unwrap_or_default())
            }
        };
        changed[i] = true;
    }

    // 2. Slashes, catcher shares, the treasury.
    let mut totals = state::load_totals()?;
    let mut eligible = state::load_eligible()?;
    let mut eligible_changed = false;
    let mut members = MemberCache {
        members: BTreeMap::new(),
        totals: BTreeMap::new(),
    };
    let mut payouts: BTreeMap<String, Uint128> = BTreeMap::new();
    let mut slashed_total = Uint128::zero();
    let mut to_treasury = Uint128::zero();
    let mut to_catchers = Uint128::zero();
    let mut catcher_shares: BTreeMap<String, Uint128> = BTreeMap::new();
    for (i, (address, _, pay)) in participants.iter_mut().enumerate() {
        let bps = slash_bps(config, pay.outcome, revealed.contains(address.as_str()));
        if bps == 0 {
            continue;
        }
        let member = members.member(address)?;
        let before = member.bonded;
        let amount = slash(member, bps, &mut totals)?;
        eligible_changed |= state::track_eligibility(config, &mut eligible, member.role, before, member.bonded);
        if amount.is_zero() {
            continue;
        }
        let lifetime = members.totals(address)?;
        lifetime.slashed = lifetime.slashed.checked_add(amount)?;
        pay.slashed = amount;
        changed[i] = true;
        slashed_total = slashed_total.checked_add(amount)?;
        let mut treasury_part = amount;
        if pay.outcome == Outcome::Invalid {
            let catchers = tally.catchers(address);
            let pool = amount.mul_bps(econ.catcher_share_bps);
            let each = pool.div_floor(catchers.len() as u128);
            if !each.is_zero() {
                for c in catchers.iter() {
                    let share = catcher_shares.entry(c.clone()).or_default();
                    *share = share.checked_add(each)?;
                }
                let paid = each.checked_mul(catchers.len() as u128)?;
                to_catchers = to_catchers.checked_add(paid)?;
                treasury_part = amount.checked_sub(paid)?;
            }
        }
        to_treasury = to_treasury.checked_add(treasury_part)?;
    }
    for (i, (address, _, pay)) in participants.iter_mut().enumerate() {
        if let Some(share) = catcher_shares.get(address) {
            pay.catcher = *share;
            changed[i] = true;
        }
    }

    // 3. Rewards from the pool.
    let accepted: Vec<usize> = (0..participants.len())
        .filter(|i| participants[*i].2.outcome == Outcome::Accepted)
        .collect();
    let diligent: Vec<usize> = (0..participants.len())
        .filter(|i| participants[*i].2.outcome == Outcome::Diligent)
        .collect();
    let paid = econ.reward_per_epoch.min(totals.reward_pool);
    let host_share = paid.mul_bps(econ.host_reward_share_bps);
    let per_host = host_share.div_floor(accepted.len() as u128);
    let per_validator = paid.checked_sub(host_share)?.div_floor(diligent.len() as u128);
    let mut rewards_total = Uint128::zero();
    for (group, each) in [(&accepted, per_host), (&diligent, per_validator)] {
        if each.is_zero() {
            continue;
        }
        for i in group.iter() {
            participants[*i].2.reward = each;
            changed[*i] = true;
            rewards_total = rewards_total.checked_add(each)?;
        }
    }
    totals.reward_pool = totals.reward_pool.checked_sub(rewards_total)?;

    // 4. Payouts (one bank send per recipient), lifetime totals, participants' payouts.
    let mut accepted_stake = Uint128::zero();
    for i in accepted.iter() {
        accepted_stake = accepted_stake.checked_add(participants[*i].1.stake)?;
    }
    for (address, _, pay) in participants.iter() {
        let earned = pay.reward.checked_add(pay.catcher)?;
        if earned.is_zero() {
            continue;
        }
        let lifetime = members.totals(address)?;
        lifetime.rewarded = lifetime.rewarded.checked_add(earned)?;
        let due = payouts.entry(address.clone()).or_default();
        *due = due.checked_add(earned)?;
    }
    if !to_treasury.is_zero() {
        let due = payouts.entry(config.treasury.clone()).or_default();
        *due = due.checked_add(to_treasury)?;
    }
    for (i, (address, p, pay)) in participants.iter().enumerate() {
        if !changed[i] {
            continue;
        }
        records::save_payout(e, address, pay);
        if !(pay.slashed.is_zero() && pay.reward.is_zero() && pay.catcher.is_zero()) {
            out.events.push(
                Event::new("settle")
                    .add_attribute("epoch", e)
                    .add_attribute("member", address)
                    .add_attribute("role", p.role.as_str())
                    .add_attribute("outcome", pay.outcome.as_str())
                    .add_attribute("slashed", pay.slashed)
                    .add_attribute("reward", pay.reward)
                    .add_attribute("catcher_reward", pay.catcher),
            );
        }
    }
    members.save();
    state::save_totals(&totals);
    if eligible_changed {
        state::save_eligible(&eligible);
    }
    for (recipient, amount) in payouts.iter() {
        if !amount.is_zero() {
            out.messages.push(crate::types::SubMsg::never(bank_send(recipient, &config.denom, *amount)));
        }
    }
    {
        let header = ep.header_mut();
        header.accepted_stake = accepted_stake;
        header.slashed_total = slashed_total;
        header.to_treasury = to_treasury;
        header.to_catchers = to_catchers;
        header.rewards_total = rewards_total;
    }
    ep.counts_mut().accepted = accepted.len() as u32;
    out.events.push(
        Event::new("finalize")
            .add_attribute("epoch", e)
            .add_attribute("at", at)
            .add_attribute("accepted", accepted.len())
            .add_attribute("accepted_stake", accepted_stake)
            .add_attribute("slashed_total", slashed_total)
            .add_attribute("to_treasury", to_treasury)
            .add_attribute("to_catchers", to_catchers)
            .add_attribute("rewards_total", rewards_total)
            .add_attribute("reward_pool", totals.reward_pool),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals() {
        for ok in ["0", "1", "0.5", "12.0001", "1000000000"] {
            assert!(is_canonical_decimal(ok), "{ok}");
        }
        for bad in ["", "-1", "01", "1.", ".5", "1.50", "1e3", "+1", "0.0", "1,5"] {
            assert!(!is_canonical_decimal(bad), "{bad}");
        }
    }

    #[test]
    fn validator_outcomes() {
        let s = |assigned, voted, against| ValidatorStats {
            assigned,
            voted,
            against,
        };
        assert_eq!(validator_outcome(s(2, 2, 1)), Outcome::Wrong);
        assert_eq!(validator_outcome(s(2, 1, 1)), Outcome::Wrong);
        assert_eq!(validator_outcome(s(2, 1, 0)), Outcome::Silent);
        assert_eq!(validator_outcome(s(2, 2, 0)), Outcome::Diligent);
        assert_eq!(validator_outcome(s(0, 0, 0)), Outcome::Idle);
    }
}
