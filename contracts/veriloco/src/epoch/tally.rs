//! Challenge majorities and outcomes, derived from an epoch's stored assignments and votes
//! (`docs/contract.md`, "Finalize" 1–3). Finalize decides with it, and the report shows it, so
//! the two always agree. Pure given the records: nothing here writes.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::deps::Storage;
use crate::error::ContractError;
use crate::records::{self, Outcome, Vote, VoteOutcome, ASSIGNMENTS, VOTES};

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
    pub fn of_votes(votes: &[VoteOutcome]) -> ChallengeOutcome {
        let count = |o: VoteOutcome| votes.iter().filter(|v| **v == o).count();
        for o in [
            VoteOutcome::Pass,
            VoteOutcome::Fail,
            VoteOutcome::Unavailable,
        ] {
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

/// How a validator did on its assignments.
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidatorStats {
    pub assigned: u32,
    pub voted: u32,
    pub against: u32,
}

/// One challenge: its validators, the votes posted, and the outcome.
pub struct ChallengeTally {
    pub validators: Vec<String>,
    pub votes: BTreeMap<String, Vote>,
    pub outcome: ChallengeOutcome,
}

/// Per-challenge tallies of an epoch and each assigned validator's counts.
pub struct Tally {
    /// (host, segment) -> assigned validators, their votes, and the outcome.
    pub challenges: BTreeMap<(String, u32), ChallengeTally>,
    pub validators: BTreeMap<String, ValidatorStats>,
}

impl Tally {
    /// The tally of `epoch`; outcomes are decided only when `decided` (after `verify` closed),
    /// otherwise every challenge is pending and no vote counts as against.
    pub fn of_epoch(
        storage: &dyn Storage,
        epoch: u64,
        decided: bool,
    ) -> Result<Tally, ContractError> {
        let mut challenges: BTreeMap<(String, u32), ChallengeTally> = BTreeMap::new();
        let assignments = ASSIGNMENTS.prefix(epoch).all(storage)?;
        let set = if assignments.is_empty() {
            Vec::new()
        } else {
            records::load_validator_set(storage, epoch)?
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
        for record in VOTES
            .prefix(epoch)
            .range(storage, None, crate::deps::Order::Ascending)
        {
            let ((host, segment, validator), vote) = record?;
            if let Some(c) = challenges.get_mut(&(host, segment)) {
                c.votes.insert(validator, vote);
            }
        }
        Ok(Tally::of_challenges(challenges, decided))
    }

    /// Decide (when `decided`) and count, from the challenges with their votes.
    pub fn of_challenges(
        mut challenges: BTreeMap<(String, u32), ChallengeTally>,
        decided: bool,
    ) -> Tally {
        let mut validators: BTreeMap<String, ValidatorStats> = BTreeMap::new();
        for c in challenges.values_mut() {
            if decided {
                let outcomes: Vec<VoteOutcome> = c.votes.values().map(|v| v.outcome).collect();
                c.outcome = ChallengeOutcome::of_votes(&outcomes);
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
        Tally {
            challenges,
            validators,
        }
    }

    /// The challenges of `host`, in segment order.
    fn of_host<'a>(&'a self, host: &'a str) -> impl Iterator<Item = &'a ChallengeTally> + 'a {
        self.challenges
            .range((host.to_string(), 0u32)..)
            .take_while(move |((h, _), _)| h == host)
            .map(|(_, c)| c)
    }

    /// A host's outcome from its challenges: any fail → invalid; else any unavailable →
    /// unavailable; else any inconclusive → inconclusive; else accepted. None: not challenged.
    pub fn host_outcome(&self, host: &str) -> Option<Outcome> {
        let rank = |o: Outcome| match o {
            Outcome::Invalid => 3,
            Outcome::Unavailable => 2,
            Outcome::Inconclusive => 1,
            _ => 0,
        };
        self.of_host(host)
            .map(|c| match c.outcome {
                ChallengeOutcome::Fail => Outcome::Invalid,
                ChallengeOutcome::Unavailable => Outcome::Unavailable,
                ChallengeOutcome::Pass => Outcome::Accepted,
                _ => Outcome::Inconclusive,
            })
            .fold(None, |worst: Option<Outcome>, o| match worst {
                Some(w) if rank(w) >= rank(o) => Some(w),
                _ => Some(o),
            })
    }

    /// The validators who voted `fail` on `host`'s failed challenges.
    pub fn catchers(&self, host: &str) -> BTreeSet<String> {
        self.of_host(host)
            .filter(|c| c.outcome == ChallengeOutcome::Fail)
            .flat_map(|c| c.votes.iter())
            .filter(|(_, vote)| vote.outcome == VoteOutcome::Fail)
            .map(|(v, _)| v.clone())
            .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_is_strict() {
        use VoteOutcome::*;
        let of = ChallengeOutcome::of_votes;
        assert_eq!(of(&[]), ChallengeOutcome::Inconclusive);
        assert_eq!(of(&[Pass]), ChallengeOutcome::Pass);
        assert_eq!(of(&[Pass, Fail]), ChallengeOutcome::Inconclusive);
        assert_eq!(of(&[Fail, Fail, Pass]), ChallengeOutcome::Fail);
        assert_eq!(
            of(&[Fail, Unavailable, Pass]),
            ChallengeOutcome::Inconclusive
        );
        assert_eq!(
            of(&[Unavailable, Unavailable, Pass, Fail]),
            ChallengeOutcome::Inconclusive
        );
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

    fn vote(outcome: VoteOutcome) -> Vote {
        Vote {
            outcome,
            distance: "0".into(),
            evidence: "0".repeat(64),
        }
    }

    #[test]
    fn host_outcome_is_the_worst_challenge_and_catchers_voted_fail() {
        use VoteOutcome::*;
        let challenge = |votes: &[(&str, VoteOutcome)]| ChallengeTally {
            validators: votes.iter().map(|(v, _)| v.to_string()).collect(),
            votes: votes
                .iter()
                .map(|(v, o)| (v.to_string(), vote(*o)))
                .collect(),
            outcome: ChallengeOutcome::Pending,
        };
        let mut challenges = BTreeMap::new();
        challenges.insert(
            ("h1".to_string(), 0),
            challenge(&[("a", Pass), ("b", Pass)]),
        );
        challenges.insert(
            ("h1".to_string(), 3),
            challenge(&[("a", Fail), ("c", Fail), ("b", Pass)]),
        );
        challenges.insert(
            ("h2".to_string(), 1),
            challenge(&[("a", Pass), ("b", Unavailable)]),
        );
        challenges.insert(("h3".to_string(), 1), challenge(&[("c", Pass)]));
        let pending = Tally::of_challenges(
            challenges
                .iter()
                .map(|(k, c)| {
                    let copy = ChallengeTally {
                        validators: c.validators.clone(),
                        votes: c.votes.clone(),
                        outcome: c.outcome,
                    };
                    (k.clone(), copy)
                })
                .collect(),
            false,
        );
        // Undecided: nothing is against, hosts are inconclusive so far.
        assert_eq!(pending.validators["b"].against, 0);
        assert_eq!(pending.host_outcome("h1"), Some(Outcome::Inconclusive));
        let t = Tally::of_challenges(challenges, true);
        assert_eq!(t.host_outcome("h1"), Some(Outcome::Invalid));
        assert_eq!(t.host_outcome("h2"), Some(Outcome::Inconclusive));
        assert_eq!(t.host_outcome("h3"), Some(Outcome::Accepted));
        assert_eq!(t.host_outcome("h0"), None);
        let catchers: Vec<String> = t.catchers("h1").into_iter().collect();
        assert_eq!(catchers, vec!["a".to_string(), "c".to_string()]);
        assert!(t.catchers("h3").is_empty());
        assert_eq!(
            t.validators["b"],
            ValidatorStats {
                assigned: 3,
                voted: 3,
                against: 1
            }
        );
    }
}
