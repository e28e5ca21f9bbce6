//! The close of a verdict round (`docs/contract.md`, "Disputes"): at the close of
//! `verdict_reveal` (round 0) and of each `dispute_reveal` (round i), every challenge still
//! pending is decided from the verdicts opened in that round, or goes to a dispute committee of
//! the next round, or, when no round is left or nobody can sit on the committee, ends
//! `unresolved`.
//!
//! * Round 0 (the `r` validators the seed assigned) decides only a unanimous round: every one of
//!   them opened the same verdict, and it is `pass` (on a segment the host did not declare a
//!   trap) or `fail` from at least two. Anything else — a disagreement, an `unavailable`, a
//!   silence, a lone `fail`, a `pass` on a trap — is a dispute.
//! * Round i ≥ 1 (a committee drawn for the round) decides from the opened verdicts of *every*
//!   member that sat on the challenge so far (the first round's and each committee's): the
//!   host is `unavailable` when more than half of those members voted `unavailable`; otherwise
//!   `pass` or `fail` wins with a strict majority of the opened `pass`/`fail` votes and at
//!   least two of them. Anything else (a tie, silence, a lone vote) goes to the next round, or
//!   ends `unresolved` when no round or nobody is left. Counting the first round keeps its
//!   honest votes: one liar plus silence can never decide against the truth.
//!
//! It runs page by page over the challenged hosts (`super::closing`): stage `salts` hashes the
//! salts of the round's opened verdicts into the next round's seed (`commitments::dispute_seed`,
//! the hash state kept between pages), then stage `decide` decides or draws per host.
//!
//! Committees are drawn from the validators of V that are not the host and not yet assigned to
//! the challenge, with the seed of the round (`commitments::dispute_seed`: the epoch seed and the
//! salts of the verdicts just opened), so nobody knows a committee when it casts the vote that
//! may cause the dispute.

use std::collections::BTreeMap;

use crate::deps::{Order, Storage};
use crate::error::ContractError;
use crate::hashing::{hex, stored_digest, tag, u32be, StreamHash};
use crate::records::{
    self, Assignment, ChallengeOutcome, Closing, Stage, VoteOutcome, ASSIGNMENTS, TRAPS, VOTES,
};
use crate::sampling::dispute_committee;
use crate::state::Config;
use crate::types::{Event, Response};

use super::{end_page, split_page, Epoch, Page};

/// The decision of the first round from its members' opened verdicts (None: not opened).
pub fn first_round(votes: &[Option<VoteOutcome>], trap: bool) -> Option<ChallengeOutcome> {
    let first = match votes.first() {
        Some(Some(o)) => *o,
        _ => return None,
    };
    if votes.iter().any(|v| *v != Some(first)) {
        return None;
    }
    match first {
        VoteOutcome::Pass if !trap => Some(ChallengeOutcome::Pass),
        VoteOutcome::Fail if votes.len() >= 2 => Some(ChallengeOutcome::Fail),
        _ => None,
    }
}

/// The decision of a dispute round from the opened verdicts of every member that sat on the
/// challenge so far (None: no decision, to the next round). `unavailable` needs more than half
/// of those members; `pass`/`fail` a strict majority of the opened `pass`/`fail` votes and at
/// least two of them (an `unavailable` or a silence counts for neither side).
pub fn committee_decision(votes: &[Option<VoteOutcome>]) -> Option<ChallengeOutcome> {
    let count = |o: VoteOutcome| votes.iter().filter(|v| **v == Some(o)).count();
    let (pass, fail, unavailable) = (
        count(VoteOutcome::Pass),
        count(VoteOutcome::Fail),
        count(VoteOutcome::Unavailable),
    );
    if unavailable * 2 > votes.len() {
        Some(ChallengeOutcome::Unavailable)
    } else if pass > fail && pass >= 2 {
        Some(ChallengeOutcome::Pass)
    } else if fail > pass && fail >= 2 {
        Some(ChallengeOutcome::Fail)
    } else {
        None
    }
}

/// The close of the current round as it starts: the next round's seed hashes the epoch seed and
/// the round number, then (stage `salts`) the salts of the round's opened verdicts.
pub fn begin(ep: &Epoch) -> Result<Closing, ContractError> {
    let epoch_seed = stored_digest(
        ep.header.seed.as_deref(),
        "corrupt state: a verdict round without a seed",
    )?;
    let mut hash = StreamHash::tagged(tag::DISPUTE_SEED);
    hash.update(&[&epoch_seed, &u32be(ep.header.round + 1)]);
    Ok(Closing {
        seed_hash: Some(hash),
        ..Closing::at(Stage::Salts)
    })
}

/// The next `limit` challenged hosts after the cursor (address order), and whether they are the
/// last.
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

/// Stage `salts`: the salts of the verdicts opened in this round on the next `limit` hosts'
/// challenges, hashed in key order (host, segment, validator) into the next round's seed
/// (`commitments::dispute_seed`, fed page by page). At the last host the seed is set and stage
/// `decide` follows.
pub fn salts_page(
    storage: &mut dyn Storage,
    ep: &mut Epoch,
    limit: usize,
) -> Result<Page, ContractError> {
    let e = ep.number();
    let round = ep.header.round;
    let mut closing = ep.closing()?;
    let (page, done) = next_hosts(storage, e, closing.after.as_deref(), limit)?;
    let mut hash = closing.seed_hash.take().ok_or_else(|| {
        ContractError::Corrupt("corrupt state: closing a round without the seed's hash".into())
    })?;
    for (host, _) in page.iter() {
        for record in VOTES
            .prefix2(e, host)
            .range(storage, None, Order::Ascending)
        {
            let (_, vote) = record?;
            if vote.round != round {
                continue;
            }
            let salt = stored_digest(Some(&vote.salt), "corrupt vote record: salt")?;
            hash.update(&[&salt]);
        }
    }
    if done {
        closing.round_seed = Some(hex(&hash.finish()));
    } else {
        closing.seed_hash = Some(hash);
    }
    Ok(end_page(ep, closing, &page, done, Some(Stage::Decide)))
}

/// Stage `decide`: every pending challenge of the next `limit` hosts is decided from the opened
/// verdicts, or gets its committee for the next round (drawn with the round's seed), or ends
/// `unresolved`. At the last host the `wasm-dispute` event is emitted and, when a dispute round
/// follows, the header's round and the counts are set for it.
pub fn decide_page(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    limit: usize,
    at: u64,
    out: &mut Response,
) -> Result<Page, ContractError> {
    let e = ep.number();
    let mut closing = ep.closing()?;
    let round = Round {
        epoch: e,
        round: ep.header.round,
        seed: stored_digest(
            closing.round_seed.as_deref(),
            "corrupt state: deciding without a seed",
        )?,
        set: records::load_validator_set(storage, e)?,
    };
    let (page, done) = next_hosts(storage, e, closing.after.as_deref(), limit)?;
    for (host, mut list) in page.iter().cloned() {
        if !list.iter().any(|a| a.outcome.is_pending()) {
            continue;
        }
        round.decide_host(storage, config, &host, &mut list, &mut closing)?;
        ASSIGNMENTS.save(storage, (e, &host), &list);
    }
    if done {
        out.events.push(dispute_event(&closing, e, round.round, at));
        if closing.disputes > 0 {
            ep.header_mut().round = round.round + 1;
            let counts = ep.counts_mut();
            counts.votes_expected = closing.members;
            counts.votes_posted = 0;
            counts.votes_revealed = 0;
        }
    }
    Ok(end_page(ep, closing, &page, done, None))
}

/// What deciding a round's challenges needs: the epoch, the round, its seed (for committees)
/// and V.
struct Round {
    epoch: u64,
    round: u32,
    seed: [u8; 32],
    set: Vec<String>,
}

impl Round {
    /// Every pending challenge of `host` (its `list`): decided, sent to a committee of the next
    /// round, or ended `unresolved`; `closing`'s counts follow.
    fn decide_host(
        &self,
        storage: &dyn Storage,
        config: &Config,
        host: &str,
        list: &mut [Assignment],
        closing: &mut Closing,
    ) -> Result<(), ContractError> {
        let ver = &config.verification;
        let next = self.round + 1;
        let traps = TRAPS.may_load(storage, (self.epoch, host))?;
        let cast = self.cast(storage, host)?;
        for a in list.iter_mut().filter(|a| a.outcome.is_pending()) {
            let trap = traps.as_ref().map_or(false, |t| t.contains(&a.segment));
            if let Some(outcome) = self.decision(a, cast.get(&a.segment), trap) {
                a.outcome = outcome;
                closing.decided += 1;
                continue;
            }
            let committee = if next > ver.dispute_rounds || a.committees.len() as u32 != self.round
            {
                Vec::new()
            } else {
                self.committee(host, a, ver.committee_size(next))?
            };
            if committee.is_empty() {
                a.outcome = ChallengeOutcome::Unresolved;
                closing.unresolved += 1;
                continue;
            }
            closing.members += committee.len() as u32;
            closing.disputes += 1;
            a.committees.push(committee);
        }
        Ok(())
    }

    /// The verdicts opened on `host`'s challenges: segment -> validator -> outcome.
    fn cast(
        &self,
        storage: &dyn Storage,
        host: &str,
    ) -> Result<BTreeMap<u32, BTreeMap<String, VoteOutcome>>, ContractError> {
        let mut cast: BTreeMap<u32, BTreeMap<String, VoteOutcome>> = BTreeMap::new();
        for record in VOTES
            .prefix2(self.epoch, host)
            .range(storage, None, Order::Ascending)
        {
            let ((segment, validator), vote) = record?;
            cast.entry(segment)
                .or_default()
                .insert(validator, vote.outcome);
        }
        Ok(cast)
    }

    /// The round's decision on a pending challenge from the opened verdicts of its members
    /// (round 0: its first-round members; a dispute round: every member so far, all rounds).
    fn decision(
        &self,
        a: &Assignment,
        votes_of: Option<&BTreeMap<String, VoteOutcome>>,
        trap: bool,
    ) -> Option<ChallengeOutcome> {
        let sat: Vec<u16> = if self.round == 0 {
            a.round_members(0).to_vec()
        } else {
            (0..=self.round)
                .flat_map(|r| a.round_members(r).iter().copied())
                .collect()
        };
        let votes: Vec<Option<VoteOutcome>> = sat
            .iter()
            .map(|i| {
                let v = self.set.get(*i as usize)?;
                votes_of.and_then(|c| c.get(v)).copied()
            })
            .collect();
        if self.round == 0 {
            first_round(&votes, trap)
        } else {
            committee_decision(&votes)
        }
    }

    /// The committee of the next round for a challenge, as indices into V: drawn with the
    /// round's seed among the validators not yet on it (empty: nobody is left).
    fn committee(&self, host: &str, a: &Assignment, size: u32) -> Result<Vec<u16>, ContractError> {
        let excluded: Vec<String> = a.members(&self.set)?.into_iter().map(|(_, v)| v).collect();
        let set = &self.set;
        dispute_committee(&self.seed, host, a.segment, set, &excluded, size)
            .iter()
            .map(|v| set.binary_search(v).map(|i| i as u16))
            .collect::<Result<Vec<u16>, usize>>()
            .map_err(|_| ContractError::Corrupt("a committee member is not in V".into()))
    }
}

/// `wasm-dispute`, at the end of a verdict round's close.
fn dispute_event(closing: &Closing, epoch: u64, round: u32, at: u64) -> Event {
    Event::new("dispute")
        .add_attribute("epoch", epoch)
        .add_attribute("round", round)
        .add_attribute("decided", closing.decided)
        .add_attribute("unresolved", closing.unresolved)
        .add_attribute("disputes", closing.disputes)
        .add_attribute("committee_members", closing.members)
        .add_attribute("next_seed", closing.round_seed.clone().unwrap_or_default())
        .add_attribute("at", at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use VoteOutcome::*;

    #[test]
    fn the_first_round_decides_only_when_unanimous() {
        let of = first_round;
        assert_eq!(
            of(&[Some(Pass), Some(Pass)], false),
            Some(ChallengeOutcome::Pass)
        );
        assert_eq!(of(&[Some(Pass)], false), Some(ChallengeOutcome::Pass));
        assert_eq!(
            of(&[Some(Fail), Some(Fail)], false),
            Some(ChallengeOutcome::Fail)
        );
        // One validator's fail alone never decides; nor does a disagreement, a silence, an
        // unavailable, or a pass on a trap.
        assert_eq!(of(&[Some(Fail)], false), None);
        assert_eq!(of(&[Some(Pass), Some(Fail)], false), None);
        assert_eq!(of(&[Some(Pass), None], false), None);
        assert_eq!(of(&[None, None], false), None);
        assert_eq!(of(&[Some(Unavailable), Some(Unavailable)], false), None);
        assert_eq!(of(&[Some(Pass), Some(Pass)], true), None);
        assert_eq!(
            of(&[Some(Fail), Some(Fail)], true),
            Some(ChallengeOutcome::Fail)
        );
        assert_eq!(of(&[], false), None);
    }

    #[test]
    fn a_dispute_decides_by_the_majority_of_every_opened_vote_with_at_least_two() {
        // The votes of every member so far: first round, then committees.
        let of = committee_decision;
        // The cases: an always-fail liar outvoted by two honest passes; an always-pass
        // liar outvoted by two honest fails; a host that served one validator of three.
        assert_eq!(
            of(&[Some(Pass), Some(Fail), Some(Pass)]),
            Some(ChallengeOutcome::Pass)
        );
        assert_eq!(
            of(&[Some(Pass), Some(Fail), Some(Fail)]),
            Some(ChallengeOutcome::Fail)
        );
        assert_eq!(
            of(&[Some(Fail), Some(Unavailable), Some(Unavailable)]),
            Some(ChallengeOutcome::Unavailable)
        );
        // One liar plus silence never decides: a lone vote is not enough.
        assert_eq!(of(&[None, Some(Fail), None]), None);
        assert_eq!(of(&[Some(Pass), None, None]), None);
        // One unavailable is no ground against the host; the others decide.
        assert_eq!(
            of(&[Some(Unavailable), Some(Pass), Some(Pass)]),
            Some(ChallengeOutcome::Pass)
        );
        assert_eq!(of(&[Some(Unavailable), Some(Pass), None]), None);
        // Ties and silence go to the next round.
        assert_eq!(of(&[Some(Pass), Some(Fail), None]), None);
        assert_eq!(
            of(&[Some(Pass), Some(Fail), Some(Pass), Some(Fail), None]),
            None
        );
        assert_eq!(of(&[None, None, None]), None);
        assert_eq!(of(&[]), None);
    }
}
