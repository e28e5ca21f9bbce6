//! Counters of each validator's sittings, so that the `participant` query (what a node polls
//! every tick) reads a constant number of records whatever the number of hosts, challenges or
//! votes (`docs/contract.md`, "Queries").
//!
//! Per (epoch, validator), a list of counts (indexed by the constants below) of its own round-0
//! seats, re-votes, commitments and openings; each is bumped where the event happens (the close
//! of `reveal`, `commit_verdict`, `reveal_verdict`, the close of `objection` and of
//! `verdict_reveal`), the closes summing a page's changes per validator and writing each once. A
//! final-round seat is everyone else's: when a challenge is disputed, the epoch's count of
//! disputed challenges of its electorate (all of V, or one class) grows by one (`de/` e key),
//! instead of one write per member of V; a validator's final-round seats are the disputed
//! challenges of its electorates less those it holds a round-0 seat on ([`SEAT_ELECTED`]).
//!
//! An epoch whose challenges were assigned before this contract version has no counters (no
//! `sk/` e marker): its `participant` query walks its assignments as before.
//!
//! The records are `Vec<u32>` in a `Map<(u64, &str), _>`, the type of `records::TRAPS`, so
//! the wasm reuses that code (the contract's size is capped).

use crate::deps::Storage;
use crate::error::ContractError;
use crate::records::{Assignment, Phase, PARTICIPANTS};
use crate::storage::Map;

/// Per (epoch, validator): its counts.
pub const SITTINGS: Map<(u64, &str), Vec<u32>> = Map::new(b"ss/");
/// Per (epoch, electorate): `[n]`, the disputed challenges whose final round that electorate
/// votes in ([`ALL_OF_V`], or a compute class).
pub const DISPUTED_BY: Map<(u64, &str), Vec<u32>> = Map::new(b"de/");
/// `(epoch, "")` is set at the first page of the close of `reveal` of an epoch whose sittings
/// are counted.
pub const COUNTED: Map<(u64, &str), Vec<u32>> = Map::new(b"sk/");

/// The [`DISPUTED_BY`] key of a challenge whose electorate is all of V (no class is "*").
pub const ALL_OF_V: &str = "*";

/// Round-0 seats.
pub const SEATS: usize = 0;
/// Round-0 seats on disputed challenges whose electorate holds it (each one a final-round seat
/// of its electorate that it does not hold).
pub const SEAT_ELECTED: usize = 1;
/// Re-votes it owes or gave (round-0 seats that objected to, or sit on, a disputed challenge).
pub const REVOTES: usize = 2;
/// Round-0 commitments, and those on challenges disputed since.
pub const COMMITTED0: usize = 3;
pub const COMMITTED0_DISPUTED: usize = 4;
/// Round-0 openings, and those on challenges disputed (before or after the opening).
pub const OPENED0: usize = 5;
pub const OPENED0_DISPUTED: usize = 6;
/// Final-round commitments and openings.
pub const COMMITTED1: usize = 7;
pub const OPENED1: usize = 8;
/// Re-vote commitments and openings.
pub const COMMITTED_REVOTE: usize = 9;
pub const OPENED_REVOTE: usize = 10;
const FIELDS: usize = 11;

/// One validator's counts in `epoch` (zeros when none is stored).
pub fn load(storage: &dyn Storage, epoch: u64, validator: &str) -> Result<Vec<u32>, ContractError> {
    let mut s = SITTINGS
        .may_load(storage, (epoch, validator))?
        .unwrap_or_default();
    s.resize(FIELDS, 0);
    Ok(s)
}

/// (assigned, voted, to_commit, to_reveal) of the `participant` query, for a validator with
/// counts `s` and `finals` final-round seats, in `phase` (nothing is due while a phase's close
/// runs: its messages are refused by then).
pub fn status(s: &[u32], finals: u32, phase: Phase, closing: bool) -> (u32, u32, u32, u32) {
    let sub = |a: u32, b: u32| a.saturating_sub(b);
    let assigned = s[SEATS] + finals;
    let voted = s[OPENED0] + s[OPENED1];
    let (to_commit, to_reveal) = match (closing, phase) {
        (true, _) => (0, 0),
        (_, Phase::Verify) => (sub(s[SEATS], s[COMMITTED0]), 0),
        (_, Phase::VerdictReveal) => (
            0,
            sub(
                sub(s[COMMITTED0], s[COMMITTED0_DISPUTED]),
                sub(s[OPENED0], s[OPENED0_DISPUTED]),
            ),
        ),
        (_, Phase::Dispute) => (
            sub(finals + s[REVOTES], s[COMMITTED1] + s[COMMITTED_REVOTE]),
            0,
        ),
        (_, Phase::DisputeReveal) => (
            0,
            sub(s[COMMITTED0_DISPUTED], s[OPENED0_DISPUTED])
                + sub(s[COMMITTED1], s[OPENED1])
                + sub(s[COMMITTED_REVOTE], s[OPENED_REVOTE]),
        ),
        _ => (0, 0),
    };
    (assigned, voted, to_commit, to_reveal)
}

/// Changes to several validators' counts, summed over a page and written once each (sorted
/// lists, not maps: the contract's size is capped).
#[derive(Default)]
pub struct Changes {
    by_validator: Vec<(String, Vec<u32>)>,
    disputed: Vec<(String, Vec<u32>)>,
}

/// The counts of `key` in the sorted `list` (`len` zeros when new).
fn slot<'a>(list: &'a mut Vec<(String, Vec<u32>)>, key: &str, len: usize) -> &'a mut Vec<u32> {
    let i = match list.binary_search_by(|(k, _)| k.as_str().cmp(key)) {
        Ok(i) => i,
        Err(i) => {
            list.insert(i, (key.to_string(), vec![0; len]));
            i
        }
    };
    &mut list[i].1
}

impl Changes {
    /// Add `n` to `validator`'s count `field`.
    pub fn add(&mut self, validator: &str, field: usize, n: u32) {
        slot(&mut self.by_validator, validator, FIELDS)[field] += n;
    }

    pub fn write(self, storage: &mut dyn Storage, epoch: u64) -> Result<(), ContractError> {
        for (map, list) in [(SITTINGS, self.by_validator), (DISPUTED_BY, self.disputed)] {
            for (key, d) in list {
                let mut s = map.may_load(storage, (epoch, &key))?.unwrap_or_default();
                s.resize(s.len().max(d.len()), 0);
                for (x, n) in s.iter_mut().zip(d) {
                    *x += n;
                }
                map.save(storage, (epoch, &key), &s);
            }
        }
        Ok(())
    }
}

/// Add one to `validator`'s counts `fields` now (its own message).
pub fn bump(
    storage: &mut dyn Storage,
    epoch: u64,
    validator: &str,
    fields: &[usize],
) -> Result<(), ContractError> {
    let mut changes = Changes::default();
    for field in fields {
        changes.add(validator, *field, 1);
    }
    changes.write(storage, epoch)
}

/// The final-round seats of a validator of `class` whose counts are `s`: the disputed
/// challenges of all of V and of its class, less those it holds a round-0 seat on.
pub fn finals(
    storage: &dyn Storage,
    epoch: u64,
    class: &str,
    s: &[u32],
) -> Result<u32, ContractError> {
    let mut n = 0u32;
    for key in [ALL_OF_V, class] {
        let d = DISPUTED_BY.may_load(storage, (epoch, key))?;
        n += d.and_then(|d| d.first().copied()).unwrap_or_default();
    }
    Ok(n.saturating_sub(s[SEAT_ELECTED]))
}

/// The [`DISPUTED_BY`] key of challenge `a`'s electorate (None: nobody votes in its final
/// round): all of V, or the class of its members (that of its first, an index into V `set`).
pub fn electorate_key(
    storage: &dyn Storage,
    epoch: u64,
    set: &[String],
    a: &Assignment,
) -> Result<Option<String>, ContractError> {
    let first = match a.electorate.as_deref() {
        None => return Ok(Some(ALL_OF_V.to_string())),
        Some(e) => e.first().and_then(|i| set.get(*i as usize)),
    };
    Ok(match first {
        Some(v) => Some(
            PARTICIPANTS
                .may_load(storage, (epoch, v))?
                .map(|p| p.class)
                .unwrap_or_default(),
        ),
        None => None,
    })
}

/// Record that `a` was just disputed: its electorate's final round, and for each round-0 seat
/// (an index into V `set`) whether the electorate holds it, whether it re-votes, and whether it
/// had committed (`committed`) and opened (`opened`) its round-0 verdict.
pub fn disputed(
    changes: &mut Changes,
    electorate: Option<String>,
    a: &Assignment,
    set: &[String],
    committed: &dyn Fn(&str) -> bool,
    opened: &dyn Fn(&str) -> bool,
) -> Result<(), ContractError> {
    if let Some(key) = electorate {
        slot(&mut changes.disputed, &key, 1)[0] += 1;
    }
    for (seat, v) in a.validators.iter().zip(a.addresses(set)?) {
        let counts = slot(&mut changes.by_validator, &v, FIELDS);
        counts[SEAT_ELECTED] += u32::from(a.elects(*seat));
        counts[REVOTES] += u32::from(a.revotes(*seat));
        counts[COMMITTED0_DISPUTED] += u32::from(committed(&v));
        counts[OPENED0_DISPUTED] += u32::from(opened(&v));
    }
    Ok(())
}
