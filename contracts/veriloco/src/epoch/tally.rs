//! Outcomes and counts derived from an epoch's stored challenges, verdict commitments, opened
//! verdicts and trap openings (`docs/contract.md`, "Finalize" 1–3). The round closes
//! (`disputes`) decide each challenge and store the decision; finalize settles with this tally and
//! the report shows it, so the two always agree. Pure given the records: nothing here writes.

use std::collections::{BTreeMap, BTreeSet};

use crate::deps::{Order, Storage};
use crate::error::ContractError;
use crate::records::{
    self, Assignment, ChallengeOutcome, Outcome, Standing, Vote, VoteOutcome, ASSIGNMENTS, REVOTE,
    REVOTE_COMMITS, TRAPS, VERDICT_COMMITS, VOTES,
};
use crate::spec::Verification;

/// How a validator did on the challenges it sat on (round-0 seats and final rounds).
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct ValidatorStats {
    /// Challenges it sat on, in any round.
    pub assigned: u32,
    /// Verdict commitments it posted on them.
    pub committed: u32,
    /// Verdicts it opened (a valid opening of its commitment).
    pub voted: u32,
    /// Lies: a `pass`/`fail` vote against a `pass`/`fail` decision or outside the deciding group
    /// (another distance or evidence), or an objection backed by a `pass`.
    pub against: u32,
    /// `unavailable` votes.
    pub unavailable: u32,
    /// `unavailable` votes against a `pass`/`fail` decision where a holder had the leaves when
    /// it voted (the host served another voter it could read them from), and round-0 `pass`/
    /// `fail` openings on a challenge decided `unavailable` (it held the leaves and served
    /// nobody: honest stake, reading from every holder, would have voted with it): slashed.
    pub unserved: u32,
    /// `unavailable` votes against a `pass`/`fail` decision where no holder had them yet (a
    /// round-0 seat that no other round-0 seat could serve, and that did not re-vote with the
    /// decision): not slashed, not paid.
    pub excused: u32,
}

impl ValidatorStats {
    /// Add these counts to a stored standing.
    pub fn add_to(&self, standing: &mut Standing) {
        standing.assigned += self.assigned;
        standing.committed += self.committed;
        standing.voted += self.voted;
        standing.against += self.against;
        standing.unavailable += self.unavailable;
        standing.unserved += self.unserved;
        standing.excused += self.excused;
    }

    /// The counts of a stored standing.
    pub fn of_standing(standing: &Standing) -> ValidatorStats {
        ValidatorStats {
            assigned: standing.assigned,
            committed: standing.committed,
            voted: standing.voted,
            against: standing.against,
            unavailable: standing.unavailable,
            unserved: standing.unserved,
            excused: standing.excused,
        }
    }

    /// Add `other`'s counts.
    pub fn add(&mut self, other: &ValidatorStats) {
        self.assigned += other.assigned;
        self.committed += other.committed;
        self.voted += other.voted;
        self.against += other.against;
        self.unavailable += other.unavailable;
        self.unserved += other.unserved;
        self.excused += other.excused;
    }
}

/// The vote records a tally of these challenges read (what a page is charged for): opened
/// votes, and the re-vote commitments of objecting round-0 seats (at most the seats of each
/// disputed challenge, read beside its votes).
pub fn votes_read(tally: &Tally) -> usize {
    tally
        .challenges
        .values()
        .map(|c| c.votes.len() + c.recommitted.len())
        .sum()
}

/// One challenge: who sat on it (round, validator), who committed, who objected, the opened
/// votes, the decision (with the deciding group's distance and evidence when the final vote
/// decided pass or fail, and the probe gain it carries), and whether the host declared it a trap.
pub struct ChallengeTally {
    pub members: Vec<(u32, String)>,
    /// Validator -> its verdict commitment.
    pub committed: BTreeMap<String, String>,
    /// Round-0 seats that committed a re-vote in `dispute` (each owes its opening).
    pub recommitted: BTreeSet<String>,
    pub objectors: BTreeSet<String>,
    pub votes: BTreeMap<String, Vote>,
    pub outcome: ChallengeOutcome,
    pub decided_by: Option<(String, String)>,
    /// The probe gain the decision carries (the host's last segment, probe on).
    pub decided_gain: Option<i64>,
    /// A gain dispute's deciding dispute-window gain (`Assignment::dispute_gain_micro`).
    pub decided_dispute_gain: Option<i64>,
    pub disputed: bool,
    /// A gain dispute (`Assignment::gain_dispute`): every round-0 seat owes a re-vote, and its
    /// round-0 `pass` is judged with its main-window gain even when its re-vote is honest.
    pub gain_dispute: bool,
    pub trap: bool,
}

impl ChallengeTally {
    /// Whether a voter other than `voter`, sitting in `round` (a round-0 seat: round 0 only; a
    /// final voter: any round), opened a vote in the deciding group of a pass/fail decision: a
    /// validator that read the challenge's artifacts and kept them, from whom `voter` could have
    /// read them when the host refused it (`node.leaf_holding`).
    fn held_by_another(&self, voter: &str, round: u32) -> bool {
        self.members.iter().any(|(r, w)| {
            w != voter && *r <= round && self.votes.get(w).map_or(false, |x| self.with_decision(x))
        })
    }

    /// Whether `vote` is in the deciding group of a pass/fail decision: same outcome, distance,
    /// evidence and gain; in a gain dispute a deciding vote (re-vote, final vote) also the same
    /// dispute-window gain, and a re-vote's round-0 opening the same main gain (a seat that lied
    /// in round 0 is against the decision whatever its re-vote).
    fn with_decision(&self, vote: &Vote) -> bool {
        let deciding = self.gain_dispute && vote.round != 0;
        let round0_kept = !(self.gain_dispute && vote.round == REVOTE)
            || vote.first_gain_micro == self.decided_gain;
        let decided = match self.outcome.decided_vote() {
            Some(d) => d,
            None => return false,
        };
        vote.outcome == decided
            && self
                .decided_by
                .as_ref()
                .map_or(true, |(distance, evidence)| {
                    &vote.distance == distance
                        && &vote.evidence == evidence
                        && vote.gain_micro == self.decided_gain
                        && (!deciding || vote.dispute_gain_micro == self.decided_dispute_gain)
                        && round0_kept
                })
    }

    /// Whether this challenge makes its host invalid: a segment decided `fail` that the host did
    /// not declare a trap; a declared trap decided `pass` (the host lied); a declared trap decided
    /// `fail` at a distance outside `[tau, trap_max_distance]` (not the perturbation it claimed).
    pub fn convicts_host(&self, ver: &Verification) -> bool {
        match (self.outcome, self.trap) {
            (ChallengeOutcome::Fail, false) | (ChallengeOutcome::Pass, true) => true,
            (ChallengeOutcome::Fail, true) => !self
                .decided_by
                .as_ref()
                .map_or(false, |(distance, _)| ver.valid_trap(distance)),
            _ => false,
        }
    }
}

/// Per-challenge tallies of an epoch, each sitting validator's counts, and the opened traps.
pub struct Tally {
    /// (host, segment) -> members, commitments, votes, decision.
    pub challenges: BTreeMap<(String, u32), ChallengeTally>,
    pub validators: BTreeMap<String, ValidatorStats>,
    /// Host -> the trap segments it opened.
    pub traps: BTreeMap<String, Vec<u32>>,
}

impl Tally {
    /// The tally of `epoch` as stored now (decisions not yet made are pending): the whole epoch
    /// at once, which the tests compare the paged report with (no query or message reads it).
    #[cfg(test)]
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
        match ASSIGNMENTS.may_load(storage, (epoch, host))? {
            Some(list) => Ok(Some(Tally::of_assignments(
                storage, epoch, host, &list, set,
            )?)),
            None => Ok(None),
        }
    }

    /// The tally of one host's challenges from its stored assignments (`list`).
    pub fn of_assignments(
        storage: &dyn Storage,
        epoch: u64,
        host: &str,
        list: &[Assignment],
        set: &[String],
    ) -> Result<Tally, ContractError> {
        let mut traps = BTreeMap::new();
        if let Some(t) = TRAPS.may_load(storage, (epoch, host))? {
            traps.insert(host.to_string(), t);
        }
        let challenges = host_challenges(storage, epoch, host, list, set, traps.get(host))?;
        Ok(Tally::of_challenges(challenges, traps))
    }

    /// Count, from the challenges with their votes and decisions.
    pub fn of_challenges(
        challenges: BTreeMap<(String, u32), ChallengeTally>,
        traps: BTreeMap<String, Vec<u32>>,
    ) -> Tally {
        let mut validators: BTreeMap<String, ValidatorStats> = BTreeMap::new();
        for c in challenges.values() {
            let pass_fail = c.outcome.decided_vote().is_some();
            for (round, v) in c.members.iter() {
                let mut stats = ValidatorStats {
                    assigned: 1,
                    ..ValidatorStats::default()
                };
                if c.committed.contains_key(v) {
                    stats.committed = 1;
                }
                if let Some(vote) = c.votes.get(v) {
                    // A re-vote committed and not opened is a missed vote.
                    // A round-0 seat of a gain dispute owes one whether it committed it or not.
                    let owed = c.recommitted.contains(v) || (c.gain_dispute && *round == 0);
                    let owed_revote = owed && vote.round != REVOTE;
                    stats.voted = u32::from(!owed_revote);
                    if vote.outcome == VoteOutcome::Unavailable {
                        stats.unavailable = 1;
                        if pass_fail && c.held_by_another(v, *round) {
                            stats.unserved = 1;
                        } else if pass_fail {
                            stats.excused = 1;
                        }
                    } else if (pass_fail && !c.with_decision(vote))
                        || (vote.round == 0
                            && vote.outcome == VoteOutcome::Pass
                            && c.objectors.contains(v))
                    {
                        stats.against = 1;
                    } else if *round == 0
                        && !vote.replaced_unavailable()
                        && c.outcome == ChallengeOutcome::Unavailable
                    {
                        stats.unserved = 1; // it held the leaves since round 0 and served nobody
                    }
                }
                validators.entry(v.clone()).or_default().add(&stats);
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
    /// unavailable → unavailable; else any unresolved (or, never expected at finalize, pending)
    /// → excluded; else accepted (a valid trap included). None: not challenged.
    pub fn host_outcome(&self, host: &str, ver: &Verification) -> Option<Outcome> {
        let mut any = false;
        let (mut invalid, mut unavailable, mut unresolved) = (false, false, false);
        for c in self.challenges_of(host) {
            any = true;
            invalid |= c.convicts_host(ver);
            match c.outcome {
                ChallengeOutcome::Unavailable => unavailable = true,
                ChallengeOutcome::Unresolved | ChallengeOutcome::Pending => unresolved = true,
                _ => {}
            }
        }
        if !any {
            return None;
        }
        Some(if invalid {
            Outcome::Invalid
        } else if unavailable {
            Outcome::Unavailable
        } else if unresolved {
            Outcome::Excluded
        } else {
            Outcome::Accepted
        })
    }

    /// Who caught an invalid `host`: the voters of the deciding group of each of its convicting
    /// challenges that the final vote decided `fail` (nobody is paid for a `pass`).
    pub fn catchers(&self, host: &str, ver: &Verification) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for c in self
            .challenges_of(host)
            .filter(|c| c.outcome == ChallengeOutcome::Fail && c.convicts_host(ver))
        {
            out.extend(
                c.votes
                    .iter()
                    .filter(|(_, v)| c.with_decision(v))
                    .map(|(a, _)| a.clone()),
            );
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
            unread_challenge(a, set, host_traps)?,
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
    for record in REVOTE_COMMITS
        .prefix2(epoch, host)
        .range(storage, None, Order::Ascending)
    {
        let ((segment, validator), _) = record?;
        if let Some(c) = challenges.get_mut(&(host.to_string(), segment)) {
            c.recommitted.insert(validator);
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

/// One challenge of `host` (`a`, its stored assignment) with its members, verdict commitments,
/// opened votes and decision: three prefix scans of that segment's records only (what a `report`
/// page that splits a host reads per challenge).
pub fn challenge_tally(
    storage: &dyn Storage,
    epoch: u64,
    host: &str,
    a: &Assignment,
    set: &[String],
    host_traps: Option<&Vec<u32>>,
) -> Result<ChallengeTally, ContractError> {
    let mut c = unread_challenge(a, set, host_traps)?;
    for record in
        VERDICT_COMMITS
            .prefix3(epoch, host, a.segment)
            .range(storage, None, Order::Ascending)
    {
        let (validator, commitment) = record?;
        c.committed.insert(validator, commitment);
    }
    for record in
        REVOTE_COMMITS
            .prefix3(epoch, host, a.segment)
            .range(storage, None, Order::Ascending)
    {
        c.recommitted.insert(record?.0);
    }
    for record in VOTES
        .prefix3(epoch, host, a.segment)
        .range(storage, None, Order::Ascending)
    {
        let (validator, vote) = record?;
        c.votes.insert(validator, vote);
    }
    Ok(c)
}

/// A challenge from its stored assignment, before its commitments and votes are read.
fn unread_challenge(
    a: &Assignment,
    set: &[String],
    host_traps: Option<&Vec<u32>>,
) -> Result<ChallengeTally, ContractError> {
    Ok(ChallengeTally {
        members: a.members(set)?,
        committed: BTreeMap::new(),
        recommitted: BTreeSet::new(),
        objectors: records::index_addresses(&a.objectors, set)?
            .into_iter()
            .collect(),
        votes: BTreeMap::new(),
        outcome: a.outcome,
        decided_by: a.decided_by.clone(),
        decided_gain: a.gain_micro,
        decided_dispute_gain: a.dispute_gain_micro,
        disputed: a.disputed,
        gain_dispute: a.gain_dispute,
        trap: host_traps.map_or(false, |t| t.contains(&a.segment)),
    })
}

/// A validator's outcome: lied (see [`ValidatorStats::against`]) → wrong; else missed a vote it
/// owed (no commitment, or no valid opening) → silent; else said `unavailable` against a
/// pass/fail decision → unserved (slashed only where a holder had the leaves: see
/// [`ValidatorStats::unserved`]); else it sat on something → diligent; else idle.
pub fn validator_outcome(stats: ValidatorStats) -> Outcome {
    if stats.against > 0 {
        Outcome::Wrong
    } else if stats.voted < stats.assigned {
        Outcome::Silent
    } else if stats.unserved > 0 || stats.excused > 0 {
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

    fn ver() -> Verification {
        Verification {
            enabled: true,
            challenges_k: 2,
            seats_cap: 19,
            tau: "0.00001".into(),
            trap_max_distance: "0.001".into(),
            probe_windows: 0,
            delay_squarings: 0,
            delay_blocks: 0,
        }
    }

    #[test]
    fn validator_outcomes() {
        let s = |assigned, voted, against, unserved| ValidatorStats {
            assigned,
            committed: assigned,
            voted,
            against,
            unavailable: unserved,
            unserved,
            excused: 0,
        };
        assert_eq!(validator_outcome(s(2, 2, 1, 0)), Outcome::Wrong);
        assert_eq!(validator_outcome(s(2, 1, 1, 0)), Outcome::Wrong);
        assert_eq!(validator_outcome(s(2, 1, 0, 0)), Outcome::Silent);
        assert_eq!(validator_outcome(s(2, 2, 0, 1)), Outcome::Unserved);
        assert_eq!(validator_outcome(s(2, 1, 0, 1)), Outcome::Silent);
        assert_eq!(validator_outcome(s(2, 2, 0, 0)), Outcome::Diligent);
        assert_eq!(validator_outcome(s(0, 0, 0, 0)), Outcome::Idle);
        let excused = ValidatorStats {
            excused: 1,
            unavailable: 1,
            ..s(2, 2, 0, 0)
        };
        assert_eq!(validator_outcome(excused), Outcome::Unserved);
    }

    /// A page is charged for the re-vote commitments a tally reads as well as the opened votes:
    /// a disputed challenge whose round-0 seats all objected reads both.
    #[test]
    fn a_tally_is_charged_for_re_vote_commitments() {
        use VoteOutcome::*;
        let tally = |revoters: &[&str]| {
            let mut c = challenge(&[], ChallengeOutcome::Fail, Some(("0", "f")), false);
            for v in ["a", "b", "c"] {
                c.members.push((1, v.to_string()));
                c.votes.insert(v.to_string(), vote(Fail, "0", "f"));
            }
            c.recommitted = revoters.iter().map(|v| v.to_string()).collect();
            let mut challenges = BTreeMap::new();
            challenges.insert(("h".to_string(), 1), c);
            Tally::of_challenges(challenges, BTreeMap::new())
        };
        assert_eq!(votes_read(&tally(&[])), 3);
        assert_eq!(votes_read(&tally(&["a", "b"])), 5);
    }

    /// An `unavailable` is slashed (`unserved`) only where another voter that could serve the
    /// leaves voted with the decision: for a round-0 seat, another round-0 seat; for a final
    /// voter, anyone. A sole round-0 seat refused by its host is excused.
    #[test]
    fn an_unavailable_without_a_holder_is_excused() {
        use ChallengeOutcome as C;
        use VoteOutcome::*;
        let tally = |members: Vec<(u32, &str, Vote)>| {
            let mut c = challenge(&[], C::Pass, Some(("0", "p")), false);
            for (round, v, o) in members {
                c.members.push((round, v.to_string()));
                c.committed.insert(v.to_string(), "0".repeat(64));
                c.votes.insert(v.to_string(), o);
            }
            let mut challenges = BTreeMap::new();
            challenges.insert(("h".to_string(), 1), c);
            Tally::of_challenges(challenges, BTreeMap::new())
        };
        // Sole round-0 seat refused; the final voters read it (the host served them later).
        let t = tally(vec![
            (0, "r", vote(Unavailable, "0", "x")),
            (1, "a", vote(Pass, "0", "p")),
            (1, "b", vote(Pass, "0", "p")),
        ]);
        assert_eq!(
            (t.validators["r"].unserved, t.validators["r"].excused),
            (0, 1)
        );
        // A co-seat of round 0 held it: the round-0 `unavailable` is contradicted.
        let t = tally(vec![
            (0, "r", vote(Unavailable, "0", "x")),
            (0, "s", vote(Pass, "0", "p")),
            (1, "a", vote(Pass, "0", "p")),
        ]);
        assert_eq!(
            (t.validators["r"].unserved, t.validators["r"].excused),
            (1, 0)
        );
        // A final voter could read it from any other voter with the decision.
        let t = tally(vec![
            (0, "s", vote(Unavailable, "0", "x")),
            (1, "a", vote(Pass, "0", "p")),
            (1, "u", vote(Unavailable, "0", "x")),
        ]);
        assert_eq!(
            (t.validators["u"].unserved, t.validators["u"].excused),
            (1, 0)
        );
        assert_eq!(
            (t.validators["s"].unserved, t.validators["s"].excused),
            (0, 1)
        );
        // With no voter in the deciding group besides itself, nobody held it for it.
        let t = tally(vec![
            (0, "s", vote(Pass, "0", "p")),
            (1, "u", vote(Unavailable, "0", "x")),
        ]);
        assert_eq!(t.validators["u"].unserved, 1); // the round-0 seat "s" held it
    }

    fn vote(outcome: VoteOutcome, distance: &str, evidence: &str) -> Vote {
        Vote {
            outcome,
            distance: distance.into(),
            evidence: evidence.into(),
            salt: "0".repeat(64),
            round: 1,
            first: None,
            gain_micro: None,
            dispute_gain_micro: None,
            first_gain_micro: None,
        }
    }

    fn challenge(
        votes: &[(&str, Vote)],
        outcome: ChallengeOutcome,
        decided_by: Option<(&str, &str)>,
        trap: bool,
    ) -> ChallengeTally {
        ChallengeTally {
            members: votes.iter().map(|(v, _)| (1, v.to_string())).collect(),
            committed: votes
                .iter()
                .map(|(v, _)| (v.to_string(), "0".repeat(64)))
                .collect(),
            recommitted: BTreeSet::new(),
            objectors: BTreeSet::new(),
            votes: votes
                .iter()
                .map(|(v, o)| (v.to_string(), o.clone()))
                .collect(),
            outcome,
            decided_by: decided_by.map(|(d, e)| (d.to_string(), e.to_string())),
            decided_gain: None,
            decided_dispute_gain: None,
            disputed: true,
            gain_dispute: false,
            trap,
        }
    }

    #[test]
    fn host_outcomes_catchers_and_lies() {
        use ChallengeOutcome as C;
        use VoteOutcome::*;
        let v = ver();
        let mut challenges = BTreeMap::new();
        challenges.insert(
            ("h1".to_string(), 3),
            challenge(
                &[
                    ("a", vote(Fail, "0.5", "e")),
                    ("c", vote(Fail, "0.5", "e")),
                    ("b", vote(Pass, "0", "p")),
                    ("d", vote(Fail, "0.5", "guess")),
                    ("u", vote(Unavailable, "0", "x")),
                ],
                C::Fail,
                Some(("0.5", "e")),
                false,
            ),
        );
        // A valid trap (distance inside [tau, trap_max_distance]): the host is accepted.
        challenges.insert(
            ("h2".to_string(), 0),
            challenge(
                &[("a", vote(Fail, "0.0005", "t"))],
                C::Fail,
                Some(("0.0005", "t")),
                true,
            ),
        );
        // A trap failed far beyond the window: not a trap, the host is invalid.
        challenges.insert(
            ("h3".to_string(), 0),
            challenge(
                &[("a", vote(Fail, "0.5", "t"))],
                C::Fail,
                Some(("0.5", "t")),
                true,
            ),
        );
        // A declared trap that passed: the host lied.
        challenges.insert(
            ("h4".to_string(), 1),
            challenge(
                &[("a", vote(Pass, "0", "p"))],
                C::Pass,
                Some(("0", "p")),
                true,
            ),
        );
        challenges.insert(
            ("h5".to_string(), 1),
            challenge(
                &[("a", vote(Unavailable, "0", "x"))],
                C::Unavailable,
                None,
                false,
            ),
        );
        challenges.insert(
            ("h6".to_string(), 1),
            challenge(&[("a", vote(Pass, "0", "p"))], C::Unresolved, None, false),
        );
        let t = Tally::of_challenges(challenges, BTreeMap::new());
        assert_eq!(t.host_outcome("h1", &v), Some(Outcome::Invalid));
        assert_eq!(t.host_outcome("h2", &v), Some(Outcome::Accepted));
        assert_eq!(t.host_outcome("h3", &v), Some(Outcome::Invalid));
        assert_eq!(t.host_outcome("h4", &v), Some(Outcome::Invalid));
        assert_eq!(t.host_outcome("h5", &v), Some(Outcome::Unavailable));
        assert_eq!(t.host_outcome("h6", &v), Some(Outcome::Excluded));
        assert_eq!(t.host_outcome("h0", &v), None);
        let names = |s: BTreeSet<String>| s.into_iter().collect::<Vec<_>>();
        // Only the deciding group of a fail is paid; the guesser with other evidence is not.
        assert_eq!(names(t.catchers("h1", &v)), vec!["a", "c"]);
        assert_eq!(names(t.catchers("h3", &v)), vec!["a"]);
        assert!(t.catchers("h4", &v).is_empty());
        assert_eq!(t.validators["b"].against, 1);
        assert_eq!(t.validators["d"].against, 1);
        assert_eq!(t.validators["u"].unserved, 1);
        assert_eq!(t.validators["c"].against, 0);
    }
}
