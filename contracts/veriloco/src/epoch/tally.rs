//! Outcomes and counts derived from an epoch's stored challenges, verdict commitments, opened
//! verdicts and trap openings (`docs/contract.md`, "Finalize" 1–3). The round closes
//! (`disputes`) decide each challenge and store the decision; finalize settles with this tally and
//! the report shows it, so the two always agree. Pure given the records: nothing here writes.

use std::collections::{BTreeMap, BTreeSet};

use crate::deps::{Order, Storage};
use crate::error::ContractError;
use crate::records::{
    self, Assignment, ChallengeOutcome, Outcome, Standing, Vote, VoteOutcome, ASSIGNMENTS, TRAPS,
    VERDICT_COMMITS, VOTES,
};

/// How a validator did on its assignments (first rounds and committees).
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidatorStats {
    /// Challenges it was assigned to, in any round.
    pub assigned: u32,
    /// Verdict commitments it posted on them.
    pub committed: u32,
    /// Verdicts it opened (a valid opening of its commitment).
    pub voted: u32,
    /// `pass` or `fail` votes against a `pass` or `fail` decision.
    pub against: u32,
    /// `unavailable` votes.
    pub unavailable: u32,
}

impl ValidatorStats {
    /// Add these counts to a stored standing.
    pub fn add_to(&self, standing: &mut Standing) {
        standing.assigned += self.assigned;
        standing.committed += self.committed;
        standing.voted += self.voted;
        standing.against += self.against;
        standing.unavailable += self.unavailable;
    }

    /// The counts of a stored standing.
    pub fn of_standing(standing: &Standing) -> ValidatorStats {
        ValidatorStats {
            assigned: standing.assigned,
            committed: standing.committed,
            voted: standing.voted,
            against: standing.against,
            unavailable: standing.unavailable,
        }
    }
}

/// One challenge: who sat on it (round, validator), who committed, the opened votes, the
/// decision, and whether the host declared it a trap.
pub struct ChallengeTally {
    pub members: Vec<(u32, String)>,
    /// Validator -> its verdict commitment.
    pub committed: BTreeMap<String, String>,
    pub votes: BTreeMap<String, Vote>,
    pub outcome: ChallengeOutcome,
    pub trap: bool,
}

impl ChallengeTally {
    /// The validators whose opened vote was `outcome`.
    fn voters(&self, outcome: VoteOutcome) -> impl Iterator<Item = &String> + '_ {
        self.votes
            .iter()
            .filter(move |(_, v)| v.outcome == outcome)
            .map(|(a, _)| a)
    }

    /// Whether this challenge makes its host invalid: the segment failed and the host did not
    /// declare it a trap, or the host declared it a trap and it passed (the host lied).
    pub fn convicts_host(&self) -> bool {
        matches!(
            (self.outcome, self.trap),
            (ChallengeOutcome::Fail, false) | (ChallengeOutcome::Pass, true)
        )
    }
}

/// Per-challenge tallies of an epoch, each assigned validator's counts, and the opened traps.
pub struct Tally {
    /// (host, segment) -> members, commitments, votes, decision.
    pub challenges: BTreeMap<(String, u32), ChallengeTally>,
    pub validators: BTreeMap<String, ValidatorStats>,
    /// Host -> the trap segments it opened.
    pub traps: BTreeMap<String, Vec<u32>>,
}

impl Tally {
    /// The tally of `epoch` as stored now (decisions of rounds not yet closed are pending).
    pub fn of_epoch(storage: &dyn Storage, epoch: u64) -> Result<Tally, ContractError> {
        let traps: BTreeMap<String, Vec<u32>> =
            TRAPS.prefix(epoch).all(storage)?.into_iter().collect();
        let mut challenges: BTreeMap<(String, u32), ChallengeTally> = BTreeMap::new();
        let assignments = ASSIGNMENTS.prefix(epoch).all(storage)?;
        let set = if assignments.is_empty() {
            Vec::new()
        } else {
            records::load_validator_set(storage, epoch)?
        };
        for (host, list) in assignments {
            challenges.extend(host_challenges(
                storage,
                epoch,
                &host,
                &list,
                &set,
                traps.get(&host),
            )?);
        }
        Ok(Tally::of_challenges(challenges, traps))
    }

    /// The tally of one host's challenges (what finalize settles that host with, one page of
    /// hosts at a time): its outcome, its catchers, and its part of each validator's counts.
    pub fn of_host(
        storage: &dyn Storage,
        epoch: u64,
        host: &str,
        set: &[String],
    ) -> Result<Option<Tally>, ContractError> {
        let list = match ASSIGNMENTS.may_load(storage, (epoch, host))? {
            Some(list) => list,
            None => return Ok(None),
        };
        let mut traps = BTreeMap::new();
        if let Some(t) = TRAPS.may_load(storage, (epoch, host))? {
            traps.insert(host.to_string(), t);
        }
        let challenges = host_challenges(storage, epoch, host, &list, set, traps.get(host))?;
        Ok(Some(Tally::of_challenges(challenges, traps)))
    }

    /// Count, from the challenges with their votes and decisions.
    pub fn of_challenges(
        challenges: BTreeMap<(String, u32), ChallengeTally>,
        traps: BTreeMap<String, Vec<u32>>,
    ) -> Tally {
        let mut validators: BTreeMap<String, ValidatorStats> = BTreeMap::new();
        for c in challenges.values() {
            let decided = c.outcome.decided_vote();
            for (_, v) in c.members.iter() {
                let stats = validators.entry(v.clone()).or_default();
                stats.assigned += 1;
                if c.committed.contains_key(v) {
                    stats.committed += 1;
                }
                if let Some(vote) = c.votes.get(v) {
                    stats.voted += 1;
                    if vote.outcome == VoteOutcome::Unavailable {
                        stats.unavailable += 1;
                    } else if decided.map_or(false, |d| d != vote.outcome) {
                        stats.against += 1;
                    }
                }
            }
        }
        Tally {
            challenges,
            validators,
            traps,
        }
    }

    /// The challenges of `host`, in segment order.
    fn challenges_of<'a>(&'a self, host: &'a str) -> impl Iterator<Item = &'a ChallengeTally> + 'a {
        self.challenges
            .range((host.to_string(), 0u32)..)
            .take_while(move |((h, _), _)| h == host)
            .map(|(_, c)| c)
    }

    /// A host's outcome from its challenges: a challenge that convicts it → invalid; else any
    /// unavailable → unavailable; else it opened traps → audit; else any unresolved (or, never
    /// expected at finalize, pending) → excluded; else accepted. None: not challenged.
    pub fn host_outcome(&self, host: &str) -> Option<Outcome> {
        let mut any = false;
        let (mut invalid, mut unavailable, mut unresolved) = (false, false, false);
        for c in self.challenges_of(host) {
            any = true;
            invalid |= c.convicts_host();
            match c.outcome {
                ChallengeOutcome::Unavailable => unavailable = true,
                ChallengeOutcome::Unresolved | ChallengeOutcome::Pending => unresolved = true,
                _ => {}
            }
        }
        if !any {
            return None;
        }
        let audited = self.traps.get(host).map_or(false, |t| !t.is_empty());
        Some(if invalid {
            Outcome::Invalid
        } else if unavailable {
            Outcome::Unavailable
        } else if audited {
            Outcome::Audit
        } else if unresolved {
            Outcome::Excluded
        } else {
            Outcome::Accepted
        })
    }

    /// Who caught an invalid `host`: the validators who voted with the decision of a challenge
    /// that convicts it (`fail` on a failed segment; `pass` on a trap that passed).
    pub fn catchers(&self, host: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for c in self.challenges_of(host).filter(|c| c.convicts_host()) {
            let with = if c.trap {
                VoteOutcome::Pass
            } else {
                VoteOutcome::Fail
            };
            out.extend(c.voters(with).cloned());
        }
        out
    }

    /// Validator -> the auditors whose confirmed trap it passed (a trap that failed: the host
    /// was right, every `pass` on it is wrong). Those auditors share the catcher part of its
    /// slash.
    pub fn trap_victims(&self) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for ((host, _), c) in self.challenges.iter() {
            if c.trap && c.outcome == ChallengeOutcome::Fail {
                for v in c.voters(VoteOutcome::Pass) {
                    out.entry(v.clone()).or_default().insert(host.clone());
                }
            }
        }
        out
    }
}

/// One host's challenges (`list`, its stored assignments) with their members, verdict
/// commitments, opened votes, decisions and whether the host declared each a trap: two prefix
/// scans of the host's records.
fn host_challenges(
    storage: &dyn Storage,
    epoch: u64,
    host: &str,
    list: &[Assignment],
    set: &[String],
    host_traps: Option<&Vec<u32>>,
) -> Result<BTreeMap<(String, u32), ChallengeTally>, ContractError> {
    let mut challenges: BTreeMap<(String, u32), ChallengeTally> = BTreeMap::new();
    for a in list {
        challenges.insert(
            (host.to_string(), a.segment),
            ChallengeTally {
                members: a.members(set)?,
                committed: BTreeMap::new(),
                votes: BTreeMap::new(),
                outcome: a.outcome,
                trap: host_traps.map_or(false, |t| t.contains(&a.segment)),
            },
        );
    }
    for record in VERDICT_COMMITS
        .prefix2(epoch, host)
        .range(storage, None, Order::Ascending)
    {
        let ((segment, validator), commitment) = record?;
        if let Some(c) = challenges.get_mut(&(host.to_string(), segment)) {
            c.committed.insert(validator, commitment);
        }
    }
    for record in VOTES
        .prefix2(epoch, host)
        .range(storage, None, Order::Ascending)
    {
        let ((segment, validator), vote) = record?;
        if let Some(c) = challenges.get_mut(&(host.to_string(), segment)) {
            c.votes.insert(validator, vote);
        }
    }
    Ok(challenges)
}

/// A validator's outcome: voted against a pass/fail decision → wrong; else missed an assigned
/// vote (no commitment, or no valid opening) → silent; else voted `unavailable` → unserved (not
/// slashed, not rewarded); else assigned → diligent; else idle.
pub fn validator_outcome(stats: ValidatorStats) -> Outcome {
    if stats.against > 0 {
        Outcome::Wrong
    } else if stats.voted < stats.assigned {
        Outcome::Silent
    } else if stats.unavailable > 0 {
        Outcome::Unserved
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
    fn validator_outcomes() {
        let s = |assigned, voted, against, unavailable| ValidatorStats {
            assigned,
            committed: assigned,
            voted,
            against,
            unavailable,
        };
        assert_eq!(validator_outcome(s(2, 2, 1, 0)), Outcome::Wrong);
        assert_eq!(validator_outcome(s(2, 1, 1, 0)), Outcome::Wrong);
        assert_eq!(validator_outcome(s(2, 1, 0, 0)), Outcome::Silent);
        assert_eq!(validator_outcome(s(2, 2, 0, 1)), Outcome::Unserved);
        assert_eq!(validator_outcome(s(2, 1, 0, 1)), Outcome::Silent);
        assert_eq!(validator_outcome(s(2, 2, 0, 0)), Outcome::Diligent);
        assert_eq!(validator_outcome(s(0, 0, 0, 0)), Outcome::Idle);
    }

    fn vote(outcome: VoteOutcome) -> Vote {
        Vote {
            outcome,
            distance: "0".into(),
            evidence: "0".repeat(64),
            salt: "0".repeat(64),
            round: 0,
        }
    }

    fn challenge(
        votes: &[(&str, VoteOutcome)],
        outcome: ChallengeOutcome,
        trap: bool,
    ) -> ChallengeTally {
        ChallengeTally {
            members: votes.iter().map(|(v, _)| (0, v.to_string())).collect(),
            committed: votes
                .iter()
                .map(|(v, _)| (v.to_string(), "0".repeat(64)))
                .collect(),
            votes: votes
                .iter()
                .map(|(v, o)| (v.to_string(), vote(*o)))
                .collect(),
            outcome,
            trap,
        }
    }

    #[test]
    fn host_outcomes_catchers_and_trap_victims() {
        use ChallengeOutcome as C;
        use VoteOutcome::*;
        let mut challenges = BTreeMap::new();
        challenges.insert(
            ("h1".to_string(), 0),
            challenge(&[("a", Pass), ("b", Pass)], C::Pass, false),
        );
        challenges.insert(
            ("h1".to_string(), 3),
            challenge(&[("a", Fail), ("c", Fail), ("b", Pass)], C::Fail, false),
        );
        challenges.insert(
            ("h2".to_string(), 1),
            challenge(&[("a", Pass), ("b", Unavailable)], C::Unresolved, false),
        );
        challenges.insert(
            ("h3".to_string(), 1),
            challenge(&[("c", Pass)], C::Pass, false),
        );
        // h4, an auditor: its trap failed (d passed it: wrong, h4 caught it).
        challenges.insert(
            ("h4".to_string(), 0),
            challenge(&[("c", Fail), ("d", Pass)], C::Fail, true),
        );
        // h5 declared a trap that passed: it lied.
        challenges.insert(
            ("h5".to_string(), 2),
            challenge(&[("a", Pass), ("c", Pass)], C::Pass, true),
        );
        challenges.insert(
            ("h6".to_string(), 2),
            challenge(&[("a", Unavailable), ("c", Fail)], C::Unavailable, false),
        );
        let traps: BTreeMap<String, Vec<u32>> = [("h4", vec![0]), ("h5", vec![2])]
            .iter()
            .map(|(h, t)| (h.to_string(), t.clone()))
            .collect();
        let t = Tally::of_challenges(challenges, traps);
        assert_eq!(t.host_outcome("h1"), Some(Outcome::Invalid));
        assert_eq!(t.host_outcome("h2"), Some(Outcome::Excluded));
        assert_eq!(t.host_outcome("h3"), Some(Outcome::Accepted));
        assert_eq!(t.host_outcome("h4"), Some(Outcome::Audit));
        assert_eq!(t.host_outcome("h5"), Some(Outcome::Invalid));
        assert_eq!(t.host_outcome("h6"), Some(Outcome::Unavailable));
        assert_eq!(t.host_outcome("h0"), None);
        let names = |s: BTreeSet<String>| s.into_iter().collect::<Vec<_>>();
        assert_eq!(names(t.catchers("h1")), vec!["a", "c"]);
        assert_eq!(names(t.catchers("h5")), vec!["a", "c"]);
        assert!(t.catchers("h3").is_empty());
        let victims = t.trap_victims();
        assert_eq!(victims.len(), 1);
        assert_eq!(names(victims["d"].clone()), vec!["h4"]);
        // b passed a failed segment (wrong once); its unavailable vote is neither wrong nor right.
        assert_eq!(
            t.validators["b"],
            ValidatorStats {
                assigned: 3,
                committed: 3,
                voted: 3,
                against: 1,
                unavailable: 1
            }
        );
        assert_eq!(t.validators["d"].against, 1);
        assert_eq!(t.validators["a"].against, 0);
    }
}
