//! Finalize (`docs/contract.md`, "Finalize"), after the last verdict round (or at the close of
//! `reveal` when verification is disabled): every outcome, the slashes, catcher shares and the
//! treasury's part, the rewards, and one bank send per recipient.
//!
//! It reads each participant, assignment and vote once (a few prefix scans), decides everything
//! in memory, and writes each participant's payout and each affected member once: its work is
//! linear in hosts × challenges × r.

use std::collections::{BTreeMap, BTreeSet};

use crate::deps::Storage;
use crate::error::ContractError;
use crate::funds::bank_send;
use crate::limits::BPS_DENOMINATOR;
use crate::records::{self, Outcome, Participant, Payout, PARTICIPANTS, PAYOUTS, REVEALS};
use crate::staking::slash;
use crate::state::{self, Config, Member, MemberTotals, Role, ELIGIBLE, MEMBER_TOTALS, TOTALS};
use crate::types::{Event, Response, SubMsg, Uint128};

use super::tally::{validator_outcome, Tally};
use super::Epoch;

/// The slash of an outcome, in basis points of total stake. A host that neither committed nor
/// revealed pays both the absent and the no-reveal slash (capped at 100 %): withholding a reveal
/// must never be free, or a participant could choose between two seeds. Audit, excluded and
/// unserved participants are not slashed.
fn slash_bps(config: &Config, outcome: Outcome, revealed: bool) -> u16 {
    let econ = &config.economics;
    match outcome {
        Outcome::Invalid => econ.slash_invalid_bps,
        Outcome::Unavailable => econ.slash_unavailable_bps,
        Outcome::Absent if revealed => econ.slash_absent_bps,
        Outcome::Absent => econ
            .slash_absent_bps
            .saturating_add(econ.slash_no_reveal_bps)
            .min(BPS_DENOMINATOR),
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
    fn member(
        &mut self,
        storage: &dyn Storage,
        address: &str,
    ) -> Result<&mut Member, ContractError> {
        if !self.members.contains_key(address) {
            let member = state::load_member(storage, address)?.ok_or_else(|| {
                ContractError::Corrupt(format!(
                    "corrupt state: participant {address} is not a member"
                ))
            })?;
            self.members.insert(address.to_string(), member);
        }
        Ok(self.members.get_mut(address).expect("just inserted"))
    }

    fn totals(
        &mut self,
        storage: &dyn Storage,
        address: &str,
    ) -> Result<&mut MemberTotals, ContractError> {
        if !self.totals.contains_key(address) {
            let totals = state::load_member_totals(storage, address)?;
            self.totals.insert(address.to_string(), totals);
        }
        Ok(self.totals.get_mut(address).expect("just inserted"))
    }

    fn save(&self, storage: &mut dyn Storage) {
        for member in self.members.values() {
            state::save_member(storage, member);
        }
        for (address, totals) in self.totals.iter() {
            MEMBER_TOTALS.save(storage, address, totals);
        }
    }
}

/// Finalize epoch `e` at height `at` (the close of `verify`, or of `reveal` when verification is
/// disabled): decide every outcome, slash, pay catchers, the treasury and the rewards.
pub fn finalize(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    at: u64,
    out: &mut Response,
) -> Result<(), ContractError> {
    let e = ep.number();
    let econ = &config.economics;
    // Every scan is collected before anything is written.
    let tally = Tally::of_epoch(storage, e)?;
    let trap_victims = tally.trap_victims();
    let revealed: BTreeSet<String> = REVEALS
        .prefix(e)
        .all(storage)?
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    let mut stored = records::payouts(storage, e)?;
    // (address, participant, payout) in address order; `changed` marks payouts to write.
    let mut participants: Vec<(String, Participant, Payout)> = PARTICIPANTS
        .prefix(e)
        .all(storage)?
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
                None => Outcome::Excluded,
            },
            Role::Validator => {
                validator_outcome(tally.validators.get(address).copied().unwrap_or_default())
            }
        };
        changed[i] = true;
    }

    // A validator that was wrong or silent on any challenge earns no catcher share: a liar that
    // fails everything must not profit from the cheaters it happened to sit on.
    let forfeit: BTreeSet<String> = participants
        .iter()
        .filter(|(_, _, pay)| matches!(pay.outcome, Outcome::Wrong | Outcome::Silent))
        .map(|(a, _, _)| a.clone())
        .collect();

    // 2. Slashes, catcher shares, the treasury.
    let mut totals = TOTALS.load(storage)?;
    let mut eligible = state::load_eligible(storage)?;
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
        let member = members.member(storage, address)?;
        let before = member.bonded;
        let amount = slash(member, bps, &mut totals)?;
        eligible_changed |=
            state::track_eligibility(config, &mut eligible, member.role, before, member.bonded);
        if amount.is_zero() {
            continue;
        }
        let lifetime = members.totals(storage, address)?;
        lifetime.slashed = lifetime.slashed.checked_add(amount)?;
        pay.slashed = amount;
        changed[i] = true;
        slashed_total = slashed_total.checked_add(amount)?;
        // Who caught it: the validators who convicted an invalid host; the auditors whose trap a
        // wrong validator passed. They share the catcher part; the rest goes to the treasury.
        let mut catchers = match pay.outcome {
            Outcome::Invalid => tally.catchers(address),
            Outcome::Wrong => trap_victims.get(address).cloned().unwrap_or_default(),
            _ => BTreeSet::new(),
        };
        catchers.retain(|c| !forfeit.contains(c));
        let mut treasury_part = amount;
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
    let per_validator = paid
        .checked_sub(host_share)?
        .div_floor(diligent.len() as u128);
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
        let lifetime = members.totals(storage, address)?;
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
        PAYOUTS.save(storage, (e, address), pay);
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
    members.save(storage);
    TOTALS.save(storage, &totals);
    if eligible_changed {
        ELIGIBLE.save(storage, &eligible);
    }
    for (recipient, amount) in payouts.iter() {
        if !amount.is_zero() {
            out.messages
                .push(SubMsg::never(bank_send(recipient, &config.denom, *amount)));
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
