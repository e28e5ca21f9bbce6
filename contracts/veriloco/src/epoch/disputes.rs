//! Which challenges are disputed, and their decisions (`docs/contract.md`, "Objections and the
//! final vote").
//!
//! * The close of `objection` (stage `objections`): a challenge is **disputed** when a seat
//!   objected (its `ready` named it), a seat did not commit, it has no seat at all (every picker
//!   withheld its reveal), or it is a segment of its host's opened trap set. The counts of the
//!   phases that follow are set here: the `pass` openings `verdict_reveal` waits for (the seats
//!   of undisputed challenges), the final-round commitments `dispute` waits for (every member of
//!   V without a round-0 seat, and the re-vote of every seat that objected, on each disputed
//!   challenge) and the round-0 commitments on disputed challenges that `dispute_reveal` opens.
//! * The close of `verdict_reveal` (stage `decide`, round 0): every undisputed challenge is
//!   decided `pass` (a seat that did not open its `pass` is silent at finalize), with the probe
//!   gain its opened `pass`es carry (a host's last segment, probe on) — unless they carry
//!   different gains: then it is a **gain dispute**, disputed now. Its question stays the
//!   main-window gain, but every vote that decides it (each round-0 seat's re-vote, its `pass`
//!   repeated, and each final vote) also carries the gain on the host's dispute windows
//!   (`trainer.probe.dispute_starts`), which nobody has opened, and only those votes decide, by
//!   (outcome, distance, evidence, both gains). Its round-0 commitments not yet opened are
//!   carried to `dispute_reveal`, which waits for them.
//! * The close of `dispute_reveal` (stage `decide`, round 1): every disputed challenge is decided
//!   by the stake of V. The opened votes of everyone who sat on it are grouped — `pass` and
//!   `fail` by (outcome, distance, evidence, probe gains), `unavailable` by outcome — and the group whose
//!   voters hold MORE than 1/2 of V's stake (each validator once, its stake at join) decides;
//!   with none, the challenge is `unresolved`. Honest stake (more than 2/3, live, with bitwise
//!   equal replays) always decides; a coalition under 1/3 never does.
//!
//! Both stages walk the challenged hosts in address order, page by page; a host's work is charged
//! to the page's budget by the votes it reads ([`host_cost`]), so a page of hosts with disputed
//! challenges (each read with every vote of V) stays within a block.

use std::collections::{BTreeMap, BTreeSet};

use crate::deps::{Order, Storage};
use crate::error::ContractError;
use crate::records::{
    self, Assignment, ChallengeOutcome, Vote, VoteOutcome, ASSIGNMENTS, TRAPS, VERDICT_COMMITS,
    VOTES,
};
use crate::sittings::{self, Changes};
use crate::state::Config;
use crate::types::{Event, Response, Uint128};

use super::{end_page, split_page, Epoch, Page};

/// Votes one unit of a page's budget pays for (a host reading more is charged more units).
pub const VOTES_PER_UNIT: u32 = 64;

/// What a host's work costs a page: 1, plus one unit per [`VOTES_PER_UNIT`] votes read.
pub fn host_cost(votes_read: usize) -> u32 {
    1 + (votes_read as u32) / VOTES_PER_UNIT
}

/// The next hosts after the cursor (address order) with their challenges, at most `limit + 1`
/// read: at most `limit` of them, and whether they are the last.
type Hosts = Vec<(String, Vec<Assignment>)>;

fn next_hosts(
    storage: &dyn Storage,
    epoch: u64,
    after: Option<&str>,
    limit: usize,
) -> Result<(Hosts, bool), ContractError> {
    let page = ASSIGNMENTS.prefix(epoch).page(storage, after, limit + 1)?;
    Ok(split_page(page, limit))
}

/// Process `hosts` one by one with `work` (which returns the host's cost) until the budget
/// `limit` is spent; returns how many were processed, the units spent, and whether the stage is
/// done (every host of a last page processed). At least one host is processed.
pub(crate) fn walk<T>(
    hosts: &[(String, T)],
    last_page: bool,
    limit: u32,
    mut work: impl FnMut(&str, &T) -> Result<u32, ContractError>,
) -> Result<(usize, u32, bool), ContractError> {
    let mut spent = 0u32;
    let mut processed = 0usize;
    for (address, value) in hosts.iter() {
        if processed > 0 && spent >= limit {
            break;
        }
        spent = spent.saturating_add(work(address, value)?);
        processed += 1;
    }
    let done = last_page && processed == hosts.len();
    Ok((processed, spent.max(1), done))
}

/// Stage `objections` (the close of `objection`): mark each challenge of the next hosts
/// disputed or not, and count what the next phases wait for.
pub fn objections_page(
    storage: &mut dyn Storage,
    ep: &mut Epoch,
    limit: usize,
) -> Result<Page, ContractError> {
    let e = ep.number();
    let closing = ep.closing()?;
    let (page, last) = next_hosts(storage, e, closing.after.as_deref(), limit)?;
    let set = records::load_validator_set(storage, e)?;
    let v_len = set.len() as u32;
    let (mut opens, mut disputed, mut carried, mut final_expected) = (0u32, 0u32, 0u32, 0u32);
    let mut changes = Changes::default();
    let (processed, spent, done) = walk(&page, last, limit as u32, |host, list| {
        let mut list = list.clone();
        let traps = TRAPS.may_load(storage, (e, host))?.unwrap_or_default();
        let mut committed: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        let mut read = 0usize;
        for record in VERDICT_COMMITS
            .prefix2(e, host)
            .range(storage, None, Order::Ascending)
        {
            let ((segment, validator), _) = record?;
            committed.entry(segment).or_default().push(validator);
            read += 1;
        }
        for a in list.iter_mut() {
            let seats = a.addresses(&set)?;
            let by = committed.get(&a.segment);
            let all_committed = seats.iter().all(|v| by.map_or(false, |c| c.contains(v)));
            a.disputed = !a.objectors.is_empty()
                || a.validators.is_empty()
                || !all_committed
                || traps.contains(&a.segment);
            if a.disputed {
                let electorate = sittings::electorate_key(storage, e, &set, a)?;
                let committed = |v: &str| by.map_or(false, |c| c.iter().any(|x| x == v));
                sittings::disputed(&mut changes, electorate, a, &set, &committed, &|_| false)?;
                disputed += 1;
                carried += by.map_or(0, |c| c.len() as u32);
                // Every final voter, and every objecting seat's re-vote.
                final_expected += a
                    .electorate_len(v_len)
                    .saturating_sub(a.validators.len() as u32)
                    + a.objectors.len() as u32;
            } else {
                opens += a.validators.len() as u32;
            }
        }
        ASSIGNMENTS.save(storage, (e, host), &list);
        Ok(host_cost(read))
    })?;
    changes.write(storage, e)?;
    let counts = ep.counts_mut();
    counts.votes_expected += opens;
    counts.disputed += disputed;
    counts.carried += carried;
    counts.final_expected += final_expected;
    let mut page = page;
    page.truncate(processed);
    let mut result = end_page(ep, closing, &page, done, None);
    result.records = spent;
    Ok(result)
}

/// Stage `decide`: at the close of `verdict_reveal` (round 0), every undisputed challenge of the
/// next hosts passes; at the close of `dispute_reveal` (round 1), every disputed one is decided
/// by the stake of V. At the last host, the `wasm-dispute` event.
pub fn decide_page(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    limit: usize,
    at: u64,
    out: &mut Response,
) -> Result<Page, ContractError> {
    let e = ep.number();
    let round = ep.header.round;
    let mut closing = ep.closing()?;
    let (page, last) = next_hosts(storage, e, closing.after.as_deref(), limit)?;
    let vote = if round == 0 {
        None
    } else {
        Some(FinalVote::load(storage, e)?)
    };
    let (mut decided, mut unresolved) = (0u32, 0u32);
    let (mut disputed, mut final_expected, mut carried) = (0u32, 0u32, 0u32);
    let probe = config.verification.probe_windows > 0;
    let set = if round == 0 && probe {
        records::load_validator_set(storage, e)?
    } else {
        Vec::new()
    };
    let v_len = set.len() as u32;
    let mut changes = Changes::default();
    let (processed, spent, done) = walk(&page, last, limit as u32, |host, list| {
        let mut list = list.clone();
        let mut read = 0usize;
        match vote.as_ref() {
            None => {
                // Only a run with the probe on has gains to compare.
                let votes = if probe {
                    host_votes(storage, e, host, &mut read)?
                } else {
                    BTreeMap::new()
                };
                for a in list.iter_mut() {
                    if !a.outcome.is_pending() || a.disputed {
                        continue;
                    }
                    let gains: BTreeSet<Option<i64>> = votes
                        .get(&a.segment)
                        .into_iter()
                        .flat_map(|v| v.values().map(|x| x.gain_micro))
                        .collect();
                    if gains.len() > 1 {
                        // Different gains: a gain dispute. The main gains are public now, so
                        // every deciding vote (each seat's re-vote, each final vote) also
                        // carries the gain on the dispute windows, which nobody opened.
                        a.disputed = true;
                        a.gain_dispute = true;
                        let electorate = sittings::electorate_key(storage, e, &set, a)?;
                        let on = votes.get(&a.segment);
                        let opened = |v: &str| on.map_or(false, |o| o.contains_key(v));
                        // Every seat committed (else it was disputed at `objection`).
                        sittings::disputed(&mut changes, electorate, a, &set, &|_| true, &opened)?;
                        disputed += 1;
                        final_expected += a
                            .electorate_len(v_len)
                            .saturating_sub(a.validators.len() as u32)
                            + a.validators.len() as u32;
                        // Every seat committed (else it was disputed at `objection`); those
                        // that did not open yet open in `dispute_reveal`, which waits for them.
                        let opened = votes.get(&a.segment).map_or(0, |v| v.len()) as u32;
                        carried += (a.validators.len() as u32).saturating_sub(opened);
                        continue;
                    }
                    a.outcome = ChallengeOutcome::Pass;
                    a.gain_micro = gains.into_iter().next().flatten();
                    decided += 1;
                }
            }
            Some(vote) => {
                let votes = host_votes(storage, e, host, &mut read)?;
                for a in list.iter_mut() {
                    if !(a.outcome.is_pending() && a.disputed) {
                        continue;
                    }
                    let mut on = votes.get(&a.segment).cloned();
                    if a.gain_dispute {
                        // Only the blind votes decide: the re-votes and the final votes.
                        if let Some(on) = on.as_mut() {
                            on.retain(|_, v| v.round != 0);
                        }
                    }
                    let (outcome, by, gain) =
                        vote.decide_among(a.electorate.as_deref(), on.as_ref());
                    a.outcome = outcome;
                    a.decided_by = by;
                    // A gain dispute's decided gain is the main windows' (every host compared on
                    // one draw); the dispute windows' only proves the deciders computed blind.
                    (a.gain_micro, a.dispute_gain_micro) = gain;
                    if outcome == ChallengeOutcome::Unresolved {
                        unresolved += 1;
                    } else {
                        decided += 1;
                    }
                }
            }
        }
        ASSIGNMENTS.save(storage, (e, host), &list);
        Ok(host_cost(read))
    })?;
    changes.write(storage, e)?;
    closing.decided += decided;
    closing.unresolved += unresolved;
    if disputed > 0 {
        let counts = ep.counts_mut();
        counts.disputed += disputed;
        counts.final_expected += final_expected;
        counts.carried += carried;
    }
    if done {
        out.events.push(
            Event::new("dispute")
                .add_attribute("epoch", e)
                .add_attribute("round", round)
                .add_attribute("decided", closing.decided)
                .add_attribute("unresolved", closing.unresolved)
                .add_attribute("disputes", ep.counts.disputed)
                .add_attribute("at", at),
        );
    }
    let mut page = page;
    page.truncate(processed);
    let mut result = end_page(ep, closing, &page, done, None);
    result.records = spent;
    Ok(result)
}

/// The opened votes on `host`'s challenges: segment -> validator -> vote (`read` counts them).
pub fn host_votes(
    storage: &dyn Storage,
    epoch: u64,
    host: &str,
    read: &mut usize,
) -> Result<BTreeMap<u32, BTreeMap<String, Vote>>, ContractError> {
    let mut out: BTreeMap<u32, BTreeMap<String, Vote>> = BTreeMap::new();
    for record in VOTES
        .prefix2(epoch, host)
        .range(storage, None, Order::Ascending)
    {
        let ((segment, validator), vote) = record?;
        out.entry(segment).or_default().insert(validator, vote);
        *read += 1;
    }
    Ok(out)
}

/// V with the stake each member joined with: what the final vote weighs.
pub struct FinalVote {
    set: Vec<String>,
    stakes: Vec<Uint128>,
    total: u128,
}

/// A group of votes: (outcome, distance, evidence, probe gain); `unavailable` votes form one
/// group whatever their distance and evidence.
type Group = (VoteOutcome, String, String, Gains);

/// A vote's probe gains: (main windows, dispute windows; the latter only in a gain dispute).
pub type Gains = (Option<i64>, Option<i64>);

/// A final decision: the outcome, and for `pass`/`fail` the deciding group's (distance,
/// evidence) and probe gains.
pub type Decision = (ChallengeOutcome, Option<(String, String)>, Gains);

impl FinalVote {
    pub fn load(storage: &dyn Storage, epoch: u64) -> Result<FinalVote, ContractError> {
        let set = records::load_validator_set(storage, epoch)?;
        let stakes = records::load_validator_stakes(storage, epoch)?;
        if stakes.len() != set.len() {
            return Err(ContractError::Corrupt(
                "corrupt state: V and its stakes differ in length".into(),
            ));
        }
        let total = stakes.iter().map(|s| s.0).sum();
        Ok(FinalVote { set, stakes, total })
    }

    fn stake_of(&self, validator: &str) -> u128 {
        self.set
            .binary_search_by(|v| v.as_str().cmp(validator))
            .map_or(0, |i| self.stakes[i].0)
    }

    /// The group a vote belongs to.
    pub fn group(vote: &Vote) -> Group {
        match vote.outcome {
            VoteOutcome::Unavailable => (vote.outcome, String::new(), String::new(), (None, None)),
            o => (
                o,
                vote.distance.clone(),
                vote.evidence.clone(),
                (vote.gain_micro, vote.dispute_gain_micro),
            ),
        }
    }

    /// The decision of a disputed challenge from its opened votes: the group with MORE than half
    /// of V's stake, with its (distance, evidence) for `pass`/`fail`; none: `unresolved`.
    pub fn decide(&self, votes: Option<&BTreeMap<String, Vote>>) -> Decision {
        self.decide_among(None, votes)
    }

    /// [`FinalVote::decide`] by the stake of an electorate (indices into V: the members of the
    /// host's compute-profile class, `crate::classes`); None: all of V. Only its members' votes
    /// count, and a group decides with MORE than half of the electorate's stake (an empty
    /// electorate decides nothing: `unresolved`).
    pub fn decide_among(
        &self,
        electorate: Option<&[u16]>,
        votes: Option<&BTreeMap<String, Vote>>,
    ) -> Decision {
        let elects = |validator: &str| match electorate {
            None => true,
            Some(e) => self
                .set
                .binary_search_by(|v| v.as_str().cmp(validator))
                .map_or(false, |i| e.binary_search(&(i as u16)).is_ok()),
        };
        let total: u128 = match electorate {
            None => self.total,
            Some(e) => e
                .iter()
                .filter_map(|&i| self.stakes.get(i as usize))
                .map(|s| s.0)
                .sum(),
        };
        let mut groups: BTreeMap<Group, u128> = BTreeMap::new();
        for (validator, vote) in votes.into_iter().flatten() {
            if elects(validator) {
                *groups.entry(FinalVote::group(vote)).or_default() += self.stake_of(validator);
            }
        }
        for ((outcome, distance, evidence, gain), stake) in groups {
            if total > 0 && stake > total / 2 {
                return match outcome {
                    VoteOutcome::Pass => (ChallengeOutcome::Pass, Some((distance, evidence)), gain),
                    VoteOutcome::Fail => (ChallengeOutcome::Fail, Some((distance, evidence)), gain),
                    VoteOutcome::Unavailable => (ChallengeOutcome::Unavailable, None, (None, None)),
                };
            }
        }
        (ChallengeOutcome::Unresolved, None, (None, None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vote(outcome: VoteOutcome, evidence: &str) -> Vote {
        Vote {
            outcome,
            distance: "0.5".into(),
            evidence: evidence.into(),
            salt: "0".repeat(64),
            round: 1,
            first: None,
            gain_micro: None,
            dispute_gain_micro: None,
            first_gain_micro: None,
        }
    }

    fn fv(stakes: &[(&str, u128)]) -> FinalVote {
        FinalVote {
            set: stakes.iter().map(|(a, _)| a.to_string()).collect(),
            stakes: stakes.iter().map(|(_, s)| Uint128(*s)).collect(),
            total: stakes.iter().map(|(_, s)| s).sum(),
        }
    }

    #[test]
    fn more_than_half_of_the_stake_decides_and_evidence_splits_groups() {
        use VoteOutcome::*;
        let v = fv(&[("a", 40), ("b", 30), ("c", 20), ("d", 10)]);
        let mut votes = BTreeMap::new();
        votes.insert("a".to_string(), vote(Fail, "e1"));
        votes.insert("b".to_string(), vote(Fail, "e1"));
        votes.insert("c".to_string(), vote(Pass, "e2"));
        let (o, by, _) = v.decide(Some(&votes));
        assert_eq!(o, ChallengeOutcome::Fail);
        assert_eq!(by, Some(("0.5".to_string(), "e1".to_string())));
        // The same outcome with another evidence is another group: 40 of 100 is not a majority.
        votes.insert("b".to_string(), vote(Fail, "copied-badly"));
        assert_eq!(v.decide(Some(&votes)).0, ChallengeOutcome::Unresolved);
        // Exactly half is not more than half.
        let mut half = BTreeMap::new();
        half.insert("a".to_string(), vote(Unavailable, "x"));
        half.insert("d".to_string(), vote(Unavailable, "y"));
        assert_eq!(v.decide(Some(&half)).0, ChallengeOutcome::Unresolved);
        half.insert("c".to_string(), vote(Unavailable, "z"));
        assert_eq!(v.decide(Some(&half)).0, ChallengeOutcome::Unavailable);
        assert_eq!(v.decide(None).0, ChallengeOutcome::Unresolved);
    }

    #[test]
    fn an_electorate_decides_by_its_own_stake_alone() {
        // V = a (class 1, 10), b (class 2, 100), c (class 1, 10); electorate of class 1: a, c.
        let f = fv(&[("a", 10), ("b", 100), ("c", 10)]);
        let mut votes = BTreeMap::new();
        votes.insert("a".to_string(), vote(VoteOutcome::Pass, "e1"));
        votes.insert("c".to_string(), vote(VoteOutcome::Pass, "e1"));
        votes.insert("b".to_string(), vote(VoteOutcome::Fail, "e2"));
        // All of V: b's 100 of 120 decides.
        assert_eq!(f.decide(Some(&votes)).0, ChallengeOutcome::Fail);
        // The class's electorate: a and c hold all of its 20; b's vote does not count.
        assert_eq!(
            f.decide_among(Some(&[0, 2]), Some(&votes)).0,
            ChallengeOutcome::Pass
        );
        // One of two equal stakes is not more than half.
        votes.remove("c");
        assert_eq!(
            f.decide_among(Some(&[0, 2]), Some(&votes)).0,
            ChallengeOutcome::Unresolved
        );
        // Nobody to decide.
        assert_eq!(
            f.decide_among(Some(&[]), Some(&votes)).0,
            ChallengeOutcome::Unresolved
        );
    }

    #[test]
    fn walking_charges_by_work_and_always_progresses() {
        let hosts: Vec<(String, u32)> = (0..5).map(|i| (format!("h{i}"), i)).collect();
        let (n, spent, done) = walk(&hosts, true, 3, |_, _| Ok(2)).unwrap();
        assert_eq!((n, spent, done), (2, 4, false));
        let (n, _, done) = walk(&hosts, true, 100, |_, _| Ok(1)).unwrap();
        assert_eq!((n, done), (5, true));
        let (n, _, done) = walk(&hosts, true, 1, |_, _| Ok(50)).unwrap();
        assert_eq!((n, done), (1, false));
        assert_eq!(host_cost(0), 1);
        assert_eq!(host_cost(130), 3);
    }
}
