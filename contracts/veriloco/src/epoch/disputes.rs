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
use crate::hashing::{digest_from_hex, hex, tag, u32be, StreamHash};
use crate::records::{
    self, Assignment, ChallengeOutcome, Closing, Stage, VoteOutcome, ASSIGNMENTS, TRAPS, VOTES,
};
use crate::sampling::dispute_committee;
use crate::state::Config;
use crate::types::{Event, Response};

use super::{advance_cursor, Epoch, Page};

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
    let epoch_seed = ep
        .header
        .seed
        .as_deref()
        .and_then(digest_from_hex)
        .ok_or_else(|| {
            ContractError::Corrupt("corrupt state: a verdict round without a seed".into())
        })?;
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
    let mut page = ASSIGNMENTS.prefix(epoch).page(storage, after, limit + 1)?;
    let done = page.len() <= limit;
    page.truncate(limit);
    Ok((page, done))
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
            let salt = digest_from_hex(&vote.salt)
                .ok_or_else(|| ContractError::Corrupt("corrupt vote record: salt".into()))?;
            hash.update(&[&salt]);
        }
    }
    if done {
        closing.round_seed = Some(hex(&hash.finish()));
    } else {
        closing.seed_hash = Some(hash);
    }
    advance_cursor(&mut closing, &page, done, Stage::Decide);
    ep.header_mut().closing = Some(closing);
    Ok(Page {
        records: page.len() as u32,
        done,
    })
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
    let round = ep.header.round;
    let ver = &config.verification;
    let mut closing = ep.closing()?;
    let seed = closing
        .round_seed
        .as_deref()
        .and_then(digest_from_hex)
        .ok_or_else(|| ContractError::Corrupt("corrupt state: deciding without a seed".into()))?;
    let set = records::load_validator_set(storage, e)?;
    let (page, done) = next_hosts(storage, e, closing.after.as_deref(), limit)?;
    let next = round + 1;
    for (host, mut list) in page.iter().cloned() {
        if !list.iter().any(|a| a.outcome.is_pending()) {
            continue;
        }
        let traps = TRAPS.may_load(storage, (e, &host))?;
        let mut cast: BTreeMap<u32, BTreeMap<String, VoteOutcome>> = BTreeMap::new();
        for record in VOTES
            .prefix2(e, &host)
            .range(storage, None, Order::Ascending)
        {
            let ((segment, validator), vote) = record?;
            cast.entry(segment)
                .or_default()
                .insert(validator, vote.outcome);
        }
        for a in list.iter_mut().filter(|a| a.outcome.is_pending()) {
            let votes_of = cast.get(&a.segment);
            // Round 0: its members; a dispute round: every member so far (all rounds).
            let sat: Vec<u16> = if round == 0 {
                a.round_members(0).to_vec()
            } else {
                (0..=round)
                    .flat_map(|r| a.round_members(r).iter().copied())
                    .collect()
            };
            let votes: Vec<Option<VoteOutcome>> = sat
                .iter()
                .map(|i| {
                    let v = set.get(*i as usize)?;
                    votes_of.and_then(|c| c.get(v)).copied()
                })
                .collect();
            let trap = traps.as_ref().map_or(false, |t| t.contains(&a.segment));
            let decision = if round == 0 {
                first_round(&votes, trap)
            } else {
                committee_decision(&votes)
            };
            if let Some(outcome) = decision {
                a.outcome = outcome;
                closing.decided += 1;
                continue;
            }
            if next > ver.dispute_rounds || a.committees.len() as u32 != round {
                a.outcome = ChallengeOutcome::Unresolved;
                closing.unresolved += 1;
                continue;
            }
            let excluded: Vec<String> = a.members(&set)?.into_iter().map(|(_, v)| v).collect();
            let committee = dispute_committee(
                &seed,
                &host,
                a.segment,
                &set,
                &excluded,
                ver.committee_size(next),
            );
            if committee.is_empty() {
                a.outcome = ChallengeOutcome::Unresolved;
                closing.unresolved += 1;
                continue;
            }
            let indices = committee
                .iter()
                .map(|v| set.binary_search(v).map(|i| i as u16))
                .collect::<Result<Vec<u16>, usize>>()
                .map_err(|_| ContractError::Corrupt("a committee member is not in V".into()))?;
            closing.members += indices.len() as u32;
            closing.disputes += 1;
            a.committees.push(indices);
        }
        ASSIGNMENTS.save(storage, (e, &host), &list);
    }
    if done {
        out.events.push(
            Event::new("dispute")
                .add_attribute("epoch", e)
                .add_attribute("round", round)
                .add_attribute("decided", closing.decided)
                .add_attribute("unresolved", closing.unresolved)
                .add_attribute("disputes", closing.disputes)
                .add_attribute("committee_members", closing.members)
                .add_attribute("next_seed", closing.round_seed.clone().unwrap_or_default())
                .add_attribute("at", at),
        );
        if closing.disputes > 0 {
            ep.header_mut().round = next;
            let counts = ep.counts_mut();
            counts.votes_expected = closing.members;
            counts.votes_posted = 0;
            counts.votes_revealed = 0;
        }
    } else {
        closing.after = page.last().map(|(h, _)| h.clone());
    }
    ep.header_mut().closing = Some(closing);
    Ok(Page {
        records: page.len() as u32,
        done,
    })
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
