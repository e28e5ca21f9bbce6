//! Finalize (`docs/contract.md`, "Finalize"), after the last verdict round (or at the close of
//! `reveal` when verification is disabled): every outcome, the slashes, catcher shares and the
//! treasury's part, the rewards, and the bank sends.
//!
//! It runs page by page (`super::closing`), each stage walking the participants in address order:
//!
//! * `outcomes` — each host's outcome from its own challenges (`Tally::of_host`); each
//!   validator's counts over those challenges are added to its standing (`vt/`);
//! * `slashes`  — each validator's outcome from its standing (then dropped); every slash, its
//!   catcher part (to the deciding group of the final vote that failed an invalid host; none to
//!   a validator wrong or silent in the epoch) and its treasury
//!   part, sent in the same transaction, so the books balance after every page (the
//!   transaction's sends are summed per recipient: `Epoch::pay`);
//! * `rewards`  — `min(reward_per_epoch, reward_pool)` taken when finalize began, split among the
//!   accepted hosts and the diligent validators; one `wasm-settle` per member paid or slashed;
//!   at the last page, `wasm-finalize`.
//!
//! Every page's work is linear in the page's participants (times k × (r + committees) for
//! hosts), never in the epoch's size.

use std::collections::{BTreeMap, BTreeSet};

use crate::deps::{Order, Storage};
use crate::error::ContractError;
use crate::limits::BPS_DENOMINATOR;
use crate::records::{
    self, Closing, HostCuts, Outcome, Payout, Stage, VoteOutcome, COMMITMENTS, EXCLUSIONS,
    HOST_CUTS, PARTICIPANTS, PAYOUTS, REVEALS, STANDINGS, VOTES, WEIGHT_CAPS,
};
use crate::staking::{slash, take};
use crate::state::{
    self, Config, Eligible, Member, MemberTotals, Role, Totals, ELIGIBLE, MEMBER_TOTALS, TOTALS,
};
use crate::types::{Event, Response, Uint128};

use super::disputes::{host_cost, walk};
use super::tally::{validator_outcome, votes_read, Tally, ValidatorStats};
use super::{end_page, split_page, Epoch, Page};

/// The slash of an outcome, in basis points of total stake. A host that neither committed nor
/// revealed pays both the absent and the no-reveal slash (capped at 100 %): withholding a reveal
/// must never be free. Excluded hosts are not slashed.
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
        Outcome::Unserved => econ.slash_validator_unserved_bps,
        _ => 0,
    }
}

/// Members touched by settlement, loaded once and saved once: the member record only where its
/// stake changed (slashes), the small lifetime-totals record wherever a total changed.
#[derive(Default)]
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

/// Finalize as it starts: the reward it pays is fixed now.
pub fn begin(storage: &dyn Storage, config: &Config) -> Result<Closing, ContractError> {
    let totals = TOTALS.load(storage)?;
    Ok(Closing {
        reward: config.economics.reward_per_epoch.min(totals.reward_pool),
        ..Closing::at(Stage::Outcomes)
    })
}

/// The next `limit` participants after the cursor, and whether they are the last.
type Participants = Vec<(String, records::Participant)>;

fn next_participants(
    storage: &dyn Storage,
    epoch: u64,
    after: Option<&str>,
    limit: usize,
) -> Result<(Participants, bool), ContractError> {
    let page = PARTICIPANTS.prefix(epoch).page(storage, after, limit + 1)?;
    Ok(split_page(page, limit))
}

/// Stage `outcomes`: the outcome of every host of the page (accepted ones counted with their
/// stake), and each validator's counts over the page's challenges added to its standing.
pub fn outcomes_page(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    limit: usize,
) -> Result<Page, ContractError> {
    let e = ep.number();
    let closing = ep.closing()?;
    let (page, last) = next_participants(storage, e, closing.after.as_deref(), limit)?;
    let set = records::load_validator_set(storage, e)?;
    let mut deltas: BTreeMap<String, ValidatorStats> = BTreeMap::new();
    let (mut accepted, mut accepted_segments, mut accepted_stake) = (0u32, 0u32, Uint128::zero());
    let (processed, spent, done) = walk(&page, last, limit as u32, |address, p| {
        if p.role != Role::Host {
            return Ok(1);
        }
        let mut pay = records::load_payout(storage, e, address)?;
        if pay.outcome != Outcome::Pending {
            return Ok(1);
        }
        let mut read = 0;
        pay.outcome = match Tally::of_host(storage, e, address, &set)? {
            Some(tally) => {
                read = votes_read(&tally);
                for (v, stats) in tally.validators.iter() {
                    deltas.entry(v.clone()).or_default().add(stats);
                }
                tally
                    .host_outcome(address, &config.verification)
                    .unwrap_or(Outcome::Excluded)
            }
            None if !config.verification.enabled => Outcome::Accepted,
            None => Outcome::Excluded,
        };
        if pay.outcome == Outcome::Accepted {
            accepted += 1;
            accepted_segments += super::challenges::committed_segments(storage, e, address)?;
            accepted_stake = accepted_stake.checked_add(p.weight())?;
        }
        PAYOUTS.save(storage, (e, address), &pay);
        Ok(host_cost(read))
    })?;
    add_to_standings(storage, e, deltas)?;
    ep.counts_mut().accepted += accepted;
    ep.counts_mut().accepted_segments += accepted_segments;
    let header = ep.header_mut();
    header.accepted_stake = header.accepted_stake.checked_add(accepted_stake)?;
    let mut page = page;
    page.truncate(processed);
    let mut result = end_page(ep, closing, &page, done, Some(Stage::Slashes));
    result.records = spent;
    Ok(result)
}

/// Add a page's counts to the validators' standings.
fn add_to_standings(
    storage: &mut dyn Storage,
    e: u64,
    deltas: BTreeMap<String, ValidatorStats>,
) -> Result<(), ContractError> {
    for (v, stats) in deltas {
        let mut standing = STANDINGS.may_load(storage, (e, &v))?.unwrap_or_default();
        stats.add_to(&mut standing);
        STANDINGS.save(storage, (e, &v), &standing);
    }
    Ok(())
}

/// What a slashing page (slashes, exclusions) reads at its start and writes at its end: the
/// page's payouts and members, the contract's totals and the eligible counts.
struct Books {
    payouts: PayoutCache,
    members: MemberCache,
    totals: Totals,
    eligible: Eligible,
    /// Whether a slash moved a member across its role's minimum (only then is ELIGIBLE written).
    eligible_changed: bool,
}

impl Books {
    fn load(storage: &dyn Storage) -> Result<Self, ContractError> {
        Ok(Books {
            payouts: PayoutCache::default(),
            members: MemberCache::default(),
            totals: TOTALS.load(storage)?,
            eligible: state::load_eligible(storage)?,
            eligible_changed: false,
        })
    }

    fn save(&self, storage: &mut dyn Storage, epoch: u64) -> Result<(), ContractError> {
        self.payouts.save(storage, epoch);
        self.members.save(storage);
        cap_later_weights(storage, epoch, self.members.members.values())?;
        TOTALS.save(storage, &self.totals);
        if self.eligible_changed {
            ELIGIBLE.save(storage, &self.eligible);
        }
        Ok(())
    }

    /// Slash `address` `bps` of its stake (its member record, the totals, the eligible counts);
    /// when something was taken, its lifetime total and its payout's `slashed` show it.
    fn slash(
        &mut self,
        storage: &dyn Storage,
        config: &Config,
        epoch: u64,
        address: &str,
        bps: u16,
    ) -> Result<Uint128, ContractError> {
        if bps == 0 {
            return Ok(Uint128::zero());
        }
        let member = self.members.member(storage, address)?;
        let before = member.bonded;
        let amount = slash(member, bps, &mut self.totals)?;
        self.eligible_changed |= state::track_eligibility(
            config,
            &mut self.eligible,
            member.role,
            before,
            member.bonded,
        );
        if amount.is_zero() {
            return Ok(amount);
        }
        let lifetime = self.members.totals(storage, address)?;
        // Lifetime totals are statistics: they saturate rather than refuse a finalize.
        lifetime.slashed = Uint128(lifetime.slashed.0.saturating_add(amount.0));
        self.payouts.get(storage, epoch, address)?.slashed = amount;
        Ok(amount)
    }

    /// Pay `pool` in equal shares (rounded down) to `catchers`: their payouts, lifetime totals and
    /// `sends`. Returns what they got in all (zero when a share rounds to nothing).
    fn pay_catchers(
        &mut self,
        storage: &dyn Storage,
        epoch: u64,
        pool: Uint128,
        catchers: &[String],
        sends: &mut BTreeMap<String, Uint128>,
    ) -> Result<Uint128, ContractError> {
        let each = pool.div_floor(catchers.len() as u128);
        if each.is_zero() {
            return Ok(each);
        }
        for c in catchers.iter() {
            let pay = self.payouts.get(storage, epoch, c)?;
            pay.catcher = pay.catcher.checked_add(each)?;
            let lifetime = self.members.totals(storage, c)?;
            lifetime.rewarded = Uint128(lifetime.rewarded.0.saturating_add(each.0));
            add_to(sends, c, each)?;
        }
        each.checked_mul(catchers.len() as u128)
    }

    /// An excluded host or one of its passers (`docs/contract.md`, "A Δ that no holder serves"):
    /// its outcome set, its finalize reward taken back into the pool, then slashed. Returns its
    /// role, the slash and the reward reclaimed.
    fn exclude(
        &mut self,
        storage: &dyn Storage,
        config: &Config,
        epoch: u64,
        address: &str,
        outcome: Outcome,
    ) -> Result<(Role, Uint128, Uint128), ContractError> {
        let bps = slash_bps(config, outcome, false);
        let pay = self.payouts.get(storage, epoch, address)?;
        pay.outcome = outcome;
        let reward = std::mem::take(&mut pay.reward);
        let member = self.members.member(storage, address)?;
        let role = member.role;
        let before = member.bonded;
        // The reward paid at finalize for a Δ nobody could get goes back to the pool.
        let reclaimed = take(member, reward, &mut self.totals)?;
        self.totals.reward_pool = self.totals.reward_pool.checked_add(reclaimed)?;
        let amount = slash(member, bps, &mut self.totals)?;
        self.eligible_changed |= state::track_eligibility(
            config,
            &mut self.eligible,
            member.role,
            before,
            member.bonded,
        );
        let pay = self.payouts.get(storage, epoch, address)?;
        pay.slashed = pay.slashed.checked_add(amount)?;
        let lifetime = self.members.totals(storage, address)?;
        lifetime.slashed = Uint128(lifetime.slashed.0.saturating_add(amount.0));
        lifetime.rewarded = Uint128(lifetime.rewarded.0.saturating_sub(reclaimed.0));
        Ok((role, amount, reclaimed))
    }
}

/// Epoch `epoch`'s slashes reach members that already joined `epoch + 1` (a pipelined run).
/// Each one whose stake at risk (bonded plus unbonding) is now below what it weighs there weighs
/// there no more than it can still lose (`docs/contract.md`, "A slash of e lands after e + 1's
/// join"). `epoch + 1`'s reveal close waits for `epoch` to close (`super::pipeline::held`), so
/// none of `epoch + 1`'s weights has been used yet. O(1) per slashed member:
/// * a **validator**: the stake is noted in `WEIGHT_CAPS`, and that close makes the smaller its
///   weight (`super::challenges::seed_page`, `cap_joined_weights`), the same on every page;
/// * a **host**: its participant record's `weight` at once (its votes in `epoch + 1`, start and
///   model, come after that close), and what the start vote's total already counted of it (its
///   commitment) in `HOST_CUTS`, taken off when `epoch` closes (`super::pipeline`).
fn cap_later_weights<'a>(
    storage: &mut dyn Storage,
    epoch: u64,
    members: impl Iterator<Item = &'a Member>,
) -> Result<(), ContractError> {
    let next = epoch + 1;
    let mut cuts: Option<HostCuts> = None;
    for member in members {
        let address = member.address.as_str();
        let mut p = match PARTICIPANTS.may_load(storage, (next, address))? {
            Some(p) => p,
            None => continue,
        };
        let (at_risk, weight) = (member.at_risk()?, p.weight());
        if at_risk >= weight {
            continue;
        }
        if p.role == Role::Host {
            let cut = weight.checked_sub(at_risk)?;
            p.weight = Some(at_risk);
            PARTICIPANTS.save(storage, (next, address), &p);
            let c = match cuts.as_mut() {
                Some(c) => c,
                None => cuts.insert(HOST_CUTS.may_load(storage, next)?.unwrap_or_default()),
            };
            if COMMITMENTS.has(storage, (next, address)) {
                c.committed = c.committed.checked_add(cut)?;
            }
            continue;
        }
        let key = (next, address);
        let cap = WEIGHT_CAPS
            .may_load(storage, key)?
            .map_or(at_risk, |c| c.min(at_risk));
        WEIGHT_CAPS.save(storage, key, &cap);
    }
    if let Some(c) = cuts {
        HOST_CUTS.save(storage, next, &c);
    }
    Ok(())
}

/// Payouts of one page, loaded once and saved once if changed (catcher shares land on members
/// of other pages too).
#[derive(Default)]
struct PayoutCache {
    /// Address -> (payout as loaded, payout now).
    payouts: BTreeMap<String, (Payout, Payout)>,
}

impl PayoutCache {
    fn get(
        &mut self,
        storage: &dyn Storage,
        epoch: u64,
        address: &str,
    ) -> Result<&mut Payout, ContractError> {
        if !self.payouts.contains_key(address) {
            let payout = records::load_payout(storage, epoch, address)?;
            self.payouts
                .insert(address.to_string(), (payout.clone(), payout));
        }
        Ok(&mut self.payouts.get_mut(address).expect("just inserted").1)
    }

    fn save(&self, storage: &mut dyn Storage, epoch: u64) {
        for (address, (loaded, payout)) in self.payouts.iter() {
            if loaded != payout {
                PAYOUTS.save(storage, (epoch, address), payout);
            }
        }
    }
}

fn add_to(
    sends: &mut BTreeMap<String, Uint128>,
    to: &str,
    amount: Uint128,
) -> Result<(), ContractError> {
    let due = sends.entry(to.to_string()).or_default();
    *due = due.checked_add(amount)?;
    Ok(())
}

/// Stage `slashes`: the outcome of every validator of the page (from its standing), then every
/// slash of the page with its catcher and treasury parts, paid at once.
pub fn slashes_page(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    limit: usize,
) -> Result<Page, ContractError> {
    let e = ep.number();
    let mut closing = ep.closing()?;
    let (page, last) = next_participants(storage, e, closing.after.as_deref(), limit)?;
    let set = records::load_validator_set(storage, e)?;
    let mut books = Books::load(storage)?;
    let mut sends: BTreeMap<String, Uint128> = BTreeMap::new();
    let (mut slashed_total, mut to_treasury, mut to_catchers) =
        (Uint128::zero(), Uint128::zero(), Uint128::zero());
    let mut diligent = 0u32;
    let (processed, spent, done) = walk(&page, last, limit as u32, |address, p| {
        let (outcome, validator, excused) =
            settle_outcome(storage, &mut books.payouts, e, address, p.role)?;
        if validator && outcome == Outcome::Diligent {
            diligent += 1;
        }
        // Only an absent host's slash depends on whether it revealed; an `unserved` validator
        // whose every contradicted `unavailable` had no holder to read from is not slashed.
        let revealed = outcome == Outcome::Absent && REVEALS.has(storage, (e, address));
        let bps = if excused {
            0
        } else {
            slash_bps(config, outcome, revealed)
        };
        let amount = books.slash(storage, config, e, address, bps)?;
        if amount.is_zero() {
            return Ok(1);
        }
        slashed_total = slashed_total.checked_add(amount)?;
        let (catchers, read) = paid_catchers(
            storage,
            config,
            &mut books.payouts,
            e,
            &set,
            address,
            outcome,
        )?;
        let pool = amount.mul_bps(config.economics.catcher_share_bps);
        let paid = books.pay_catchers(storage, e, pool, &catchers, &mut sends)?;
        to_catchers = to_catchers.checked_add(paid)?;
        to_treasury = to_treasury.checked_add(amount.checked_sub(paid)?)?;
        Ok(host_cost(read))
    })?;
    closing.diligent += diligent;
    if !to_treasury.is_zero() {
        add_to(&mut sends, &config.treasury, to_treasury)?;
    }
    books.save(storage, e)?;
    ep.pay(&sends)?;
    let header = ep.header_mut();
    header.slashed_total = header.slashed_total.checked_add(slashed_total)?;
    header.to_treasury = header.to_treasury.checked_add(to_treasury)?;
    header.to_catchers = header.to_catchers.checked_add(to_catchers)?;
    let mut page = page;
    page.truncate(processed);
    let mut result = end_page(ep, closing, &page, done, Some(Stage::Rewards));
    result.records = spent;
    Ok(result)
}

/// A participant's outcome at stage `slashes`: a validator's is decided now from its standing
/// (then dropped; true: it was a validator's; and whether it is an `unserved` that is excused
/// from its slash); a host's is known.
fn settle_outcome(
    storage: &mut dyn Storage,
    payouts: &mut PayoutCache,
    e: u64,
    address: &str,
    role: Role,
) -> Result<(Outcome, bool, bool), ContractError> {
    let pay = payouts.get(storage, e, address)?;
    if role != Role::Validator || pay.outcome != Outcome::Pending {
        return Ok((pay.outcome, false, false));
    }
    let standing = STANDINGS
        .may_load(storage, (e, address))?
        .unwrap_or_default();
    pay.outcome = validator_outcome(ValidatorStats::of_standing(&standing));
    STANDINGS.remove(storage, (e, address));
    let excused = pay.outcome == Outcome::Unserved && standing.unserved == 0;
    Ok((pay.outcome, true, excused))
}

/// Who caught a slashed participant and is paid for it: the voters of the deciding group of an
/// invalid host's convicting challenges that the final vote decided `fail` (paid only now, after
/// the final decision). Every other slash goes to the treasury. A validator wrong or silent in
/// the epoch earns no catcher share: a liar must not profit from the cheaters it sat on.
#[allow(clippy::too_many_arguments)]
fn paid_catchers(
    storage: &dyn Storage,
    config: &Config,
    payouts: &mut PayoutCache,
    e: u64,
    set: &[String],
    address: &str,
    outcome: Outcome,
) -> Result<(Vec<String>, usize), ContractError> {
    let mut read = 0;
    let catchers: BTreeSet<String> = match outcome {
        Outcome::Invalid => match Tally::of_host(storage, e, address, set)? {
            Some(tally) => {
                read = votes_read(&tally);
                tally.catchers(address, &config.verification)
            }
            None => BTreeSet::new(),
        },
        _ => BTreeSet::new(),
    };
    let mut paid = Vec::new();
    for c in catchers {
        let known = payouts.get(storage, e, &c)?.outcome;
        let outcome = if known == Outcome::Pending {
            let standing = STANDINGS.may_load(storage, (e, &c))?.unwrap_or_default();
            validator_outcome(ValidatorStats::of_standing(&standing))
        } else {
            known
        };
        if !matches!(outcome, Outcome::Wrong | Outcome::Silent) {
            paid.push(c);
        }
    }
    Ok((paid, read))
}

/// Stage `rewards`: the page's accepted hosts and diligent validators paid from the reward fixed
/// when finalize began; one `wasm-settle` per member of the page paid or slashed; after the last
/// page, `wasm-finalize`.
pub fn rewards_page(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    limit: usize,
    at: u64,
    out: &mut Response,
) -> Result<Page, ContractError> {
    let e = ep.number();
    let econ = &config.economics;
    let closing = ep.closing()?;
    let (page, done) = next_participants(storage, e, closing.after.as_deref(), limit)?;
    let host_share = closing.reward.mul_bps(econ.host_reward_share_bps);
    let per_host = host_share.div_floor(u128::from(ep.counts.accepted));
    // Hosts are paid by the segments they committed once a partial epoch is among them (each
    // host's share of the accepted segments); with every host whole, equal shares as before.
    let whole = u64::from(ep.counts.accepted) * u64::from(config.segments);
    let by_segments =
        u64::from(ep.counts.accepted_segments) != whole && ep.counts.accepted_segments > 0;
    let per_validator = closing
        .reward
        .checked_sub(host_share)?
        .div_floor(u128::from(closing.diligent));
    let mut totals = TOTALS.load(storage)?;
    let mut members = MemberCache::default();
    let mut sends: BTreeMap<String, Uint128> = BTreeMap::new();
    let mut rewards = Uint128::zero();
    for (address, p) in page.iter() {
        let mut pay = records::load_payout(storage, e, address)?;
        let each = match pay.outcome {
            Outcome::Accepted if by_segments => {
                let segments = super::challenges::committed_segments(storage, e, address)?;
                host_share
                    .checked_mul(u128::from(segments))?
                    .div_floor(u128::from(ep.counts.accepted_segments))
            }
            Outcome::Accepted => per_host,
            Outcome::Diligent => per_validator,
            _ => Uint128::zero(),
        };
        if !each.is_zero() {
            pay.reward = each;
            PAYOUTS.save(storage, (e, address), &pay);
            let lifetime = members.totals(storage, address)?;
            lifetime.rewarded = Uint128(lifetime.rewarded.0.saturating_add(each.0));
            rewards = rewards.checked_add(each)?;
            add_to(&mut sends, address, each)?;
        }
        if !(pay.slashed.is_zero() && pay.reward.is_zero() && pay.catcher.is_zero()) {
            out.events.push(settle_event(e, address, p.role, &pay));
        }
    }
    totals.reward_pool = totals.reward_pool.checked_sub(rewards)?;
    members.save(storage);
    TOTALS.save(storage, &totals);
    ep.pay(&sends)?;
    let header = ep.header_mut();
    header.rewards_total = header.rewards_total.checked_add(rewards)?;
    if done {
        out.events.push(finalize_event(ep, at, totals.reward_pool));
    }
    Ok(end_page(ep, closing, &page, done, None))
}

/// `wasm-settle` for a member paid or slashed at finalize, with its final figures.
fn settle_event(epoch: u64, address: &str, role: Role, pay: &Payout) -> Event {
    Event::new("settle")
        .add_attribute("epoch", epoch)
        .add_attribute("member", address)
        .add_attribute("role", role.as_str())
        .add_attribute("outcome", pay.outcome.as_str())
        .add_attribute("slashed", pay.slashed)
        .add_attribute("reward", pay.reward)
        .add_attribute("catcher_reward", pay.catcher)
}

/// `wasm-finalize`, after finalize's last page.
fn finalize_event(ep: &Epoch, at: u64, reward_pool: Uint128) -> Event {
    let h = &ep.header;
    Event::new("finalize")
        .add_attribute("epoch", ep.number())
        .add_attribute("at", at)
        .add_attribute("accepted", ep.counts.accepted)
        .add_attribute("accepted_stake", h.accepted_stake)
        .add_attribute("slashed_total", h.slashed_total)
        .add_attribute("to_treasury", h.to_treasury)
        .add_attribute("to_catchers", h.to_catchers)
        .add_attribute("rewards_total", h.rewards_total)
        .add_attribute("reward_pool", reward_pool)
}

/// Whether any proposal of `model_hash` in `epoch` excluded a host.
pub fn has_exclusions(
    storage: &dyn Storage,
    epoch: u64,
    model_hash: &str,
) -> Result<bool, ContractError> {
    Ok(!EXCLUSIONS
        .prefix2(epoch, model_hash)
        .page(storage, None, 1)?
        .is_empty())
}

/// The validators whose opened vote passed `host`'s last segment (any round): they claimed to
/// have fetched and checked the Δ, and keep it to serve it.
fn last_segment_passers(
    storage: &dyn Storage,
    epoch: u64,
    host: &str,
) -> Result<Vec<String>, ContractError> {
    let last = super::challenges::committed_segments(storage, epoch, host)?.saturating_sub(1);
    let mut out = Vec::new();
    for record in VOTES
        .prefix2(epoch, host)
        .range(storage, None, Order::Ascending)
    {
        let ((segment, validator), vote) = record?;
        if segment == last && vote.outcome == VoteOutcome::Pass {
            out.push(validator);
        }
    }
    Ok(out)
}

/// Stage `exclusions` (the close of `propose`, when the agreed hash's proposals excluded
/// hosts): each host excluded by proposals of the agreed hash whose accepted stake is more than
/// 2/3 of the epoch's accepted stake — the same bar as the agreed hash — is slashed as
/// `unavailable`, and every validator that passed its last segment as `wrong`; the reward each
/// of them was paid at finalize is taken back from its stake into the reward pool. Exclusions
/// with less backing do nothing. The slashes go to the treasury (nobody caught them but the
/// proposers as a whole). One page walks `limit` excluded hosts in address order.
pub fn exclusions_page(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    limit: usize,
    out: &mut Response,
) -> Result<Page, ContractError> {
    let e = ep.number();
    let closing = ep.closing()?;
    let agreed = super::agreed_hash(&ep.header, &ep.counts).ok_or_else(|| {
        ContractError::Corrupt("corrupt state: settling exclusions without an agreed model".into())
    })?;
    let accepted_stake = ep.header.accepted_stake;
    let (page, done) = split_page(
        EXCLUSIONS
            .prefix2(e, &agreed)
            .page(storage, closing.after.as_deref(), limit + 1)?,
        limit,
    );
    let mut books = Books::load(storage)?;
    let (mut slashed_total, mut reclaimed_total) = (Uint128::zero(), Uint128::zero());
    for (host, backing) in page.iter() {
        if !super::over_two_thirds(*backing, accepted_stake) {
            continue;
        }
        if books.payouts.get(storage, e, host)?.outcome != Outcome::Accepted {
            continue;
        }
        let withdrawn = &mut ep.counts_mut().withdrawn;
        *withdrawn = Some(withdrawn.unwrap_or(0) + 1);
        let passers = last_segment_passers(storage, e, host)?;
        let mut offenders = vec![(host.clone(), Outcome::Unavailable)];
        offenders.extend(passers.iter().map(|v| (v.clone(), Outcome::Wrong)));
        for (address, outcome) in offenders {
            let (role, amount, reclaimed) = books.exclude(storage, config, e, &address, outcome)?;
            slashed_total = slashed_total.checked_add(amount)?;
            reclaimed_total = reclaimed_total.checked_add(reclaimed)?;
            out.events.push(
                Event::new("settle")
                    .add_attribute("epoch", e)
                    .add_attribute("member", &address)
                    .add_attribute("role", role.as_str())
                    .add_attribute("outcome", outcome.as_str())
                    .add_attribute("slashed", amount)
                    .add_attribute("reclaimed", reclaimed)
                    .add_attribute("excluded_host", host),
            );
        }
        out.events.push(
            Event::new("exclude")
                .add_attribute("epoch", e)
                .add_attribute("host", host)
                .add_attribute("backing", *backing)
                .add_attribute("passers", passers.join(",")),
        );
    }
    books.save(storage, e)?;
    let mut sends = BTreeMap::new();
    if !slashed_total.is_zero() {
        add_to(&mut sends, &config.treasury, slashed_total)?;
    }
    ep.pay(&sends)?;
    let header = ep.header_mut();
    header.slashed_total = header.slashed_total.checked_add(slashed_total)?;
    header.to_treasury = header.to_treasury.checked_add(slashed_total)?;
    header.rewards_total = header.rewards_total.checked_sub(reclaimed_total)?;
    Ok(end_page(ep, closing, &page, done, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Participant;
    use crate::state::UnbondingEntry;
    use crate::testing::MemoryStorage;

    fn validator(address: &str, bonded: u128, unbonding: u128) -> Member {
        member(Role::Validator, address, bonded, unbonding)
    }

    fn member(role: Role, address: &str, bonded: u128, unbonding: u128) -> Member {
        Member {
            address: address.to_string(),
            role,
            endpoint: "http://v".to_string(),
            bonded: Uint128(bonded),
            unbonding: vec![UnbondingEntry {
                amount: Uint128(unbonding),
                release_epoch: 5,
            }],
            last_miss: None,
            earlier_misses: 0,
        }
    }

    /// Epoch 0's finalize slashed `member`, a validator of epoch 1 that joined with 100 (epoch
    /// 1's reveal close waits for epoch 0): the cap it notes for epoch 1, if any.
    fn noted(member: &Member) -> Option<Uint128> {
        let mut storage = MemoryStorage::default();
        let joined = Participant {
            role: Role::Validator,
            stake: Uint128(100),
            beacon: String::new(),
            class: String::new(),
            weight: None,
        };
        PARTICIPANTS.save(&mut storage, (1, member.address.as_str()), &joined);
        cap_later_weights(&mut storage, 0, [member].into_iter()).unwrap();
        WEIGHT_CAPS
            .may_load(&storage, (1, member.address.as_str()))
            .unwrap()
    }

    /// Epoch 0's finalize slashed `host` to 60 at risk (50 bonded, 10 unbonding), a host that
    /// joined epoch 1 with 100 (its weight so far `weight`), and committed there as given: its
    /// weight in epoch 1 and what comes off epoch 1's start vote total.
    fn host_capped(committed: bool, weight: Option<u128>) -> (Option<Uint128>, HostCuts) {
        let mut storage = MemoryStorage::default();
        let host = member(Role::Host, "h", 50, 10);
        let joined = Participant {
            role: Role::Host,
            stake: Uint128(100),
            beacon: String::new(),
            class: String::new(),
            weight: weight.map(Uint128),
        };
        PARTICIPANTS.save(&mut storage, (1, "h"), &joined);
        if committed {
            let c = records::Commitment {
                checkpoint_root: "00".into(),
                delta_hash: "00".into(),
                loss_digest: "00".into(),
                segments: 2,
                train_loss_micro: 0,
                trap_commit: "00".into(),
            };
            COMMITMENTS.save(&mut storage, (1, "h"), &c);
        }
        cap_later_weights(&mut storage, 0, [&host].into_iter()).unwrap();
        let p = PARTICIPANTS.may_load(&storage, (1, "h")).unwrap().unwrap();
        let cuts = HOST_CUTS.may_load(&storage, 1).unwrap().unwrap_or_default();
        (p.weight, cuts)
    }

    #[test]
    fn a_slash_takes_a_host_of_the_next_epoch_off_what_its_votes_counted_of_it() {
        let cut = |c: u128| HostCuts {
            committed: Uint128(c),
        };
        let capped = Some(Uint128(60));
        // Not committed yet: the total will count 60.
        assert_eq!(host_capped(false, None), (capped, cut(0)));
        // Counted at 100 when it committed.
        assert_eq!(host_capped(true, None), (capped, cut(40)));
        // A second slash of the same epoch takes only what the first left (70 -> 60).
        assert_eq!(host_capped(true, Some(70)), (capped, cut(10)));
        // Still weighing no more than it has at risk: nothing changes.
        assert_eq!(host_capped(true, Some(60)), (capped, HostCuts::default()));
    }

    #[test]
    fn a_slash_caps_the_next_epochs_weight_of_a_validator_below_what_it_joined_with() {
        // 60 at risk of the 100 it joined epoch 1 with.
        assert_eq!(noted(&validator("v", 50, 10)), Some(Uint128(60)));
        // Still 100 at risk, unbonding included: no cap.
        assert_eq!(noted(&validator("v", 40, 60)), None);
    }
}
