//! The close of `reveal` (`docs/contract.md`, "Challenges"): the epoch seed from the valid
//! reveals; `absent` for hosts without a commitment and `no_reveal` for participants without a
//! reveal; and, with verification enabled, the challenges of every committed and revealed host:
//! its challenged segments and the first-round validators of each, drawn from the seed.
//!
//! It runs page by page (`super::closing`): stage `seed` hashes the reveals in address order
//! into the seed (the hash state is kept in the epoch between pages, so the seed is byte for
//! byte `beacon::epoch_seed` over every reveal) and gathers V; stage `assign` walks the
//! participants in address order.

use crate::deps::Storage;
use crate::error::ContractError;
use crate::hashing::{hex, stored_digest, tag, u64be, StreamHash};
use crate::records::{
    self, Assignment, Closing, Outcome, Participant, Payout, Stage, ASSIGNMENTS, COMMITMENTS,
    PARTICIPANTS, PAYOUTS, REVEALS, VALIDATOR_SETS,
};
use crate::sampling::{challenge_validators, challenged_segments};
use crate::state::{Config, Role};
use crate::types::{Event, Response};

use super::{end_page, run_id_bytes, split_page, Epoch, Page};

/// The close of `reveal` as it starts: the seed's hash over `run_id || u64be(epoch)`, before
/// the reveals (`beacon::epoch_seed`, fed page by page).
pub fn begin(config: &Config, epoch: u64) -> Result<Closing, ContractError> {
    let run_id = run_id_bytes(config)?;
    let mut seed_hash = StreamHash::tagged(tag::BEACON_SEED);
    seed_hash.update(&[&run_id, &u64be(epoch)]);
    Ok(Closing {
        seed_hash: Some(seed_hash),
        ..Closing::at(Stage::Seed)
    })
}

/// Stage `seed`: hash the next `limit` valid reveals (address order) into the seed, and append
/// the validators among them to V. At the last one the seed is set and stage `assign` follows.
pub fn seed_page(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    limit: usize,
) -> Result<Page, ContractError> {
    let e = ep.number();
    let mut closing = ep.closing()?;
    let (page, done) = split_page(
        REVEALS
            .prefix(e)
            .page(storage, closing.after.as_deref(), limit + 1)?,
        limit,
    );
    let mut hash = closing.seed_hash.take().ok_or_else(|| {
        ContractError::Corrupt("corrupt state: closing reveal without the seed's hash".into())
    })?;
    let mut validators: Option<Vec<String>> = None;
    for (address, secret) in page.iter() {
        hash.update(&[address.as_bytes(), &[0u8], secret]);
        if !config.verification.enabled {
            continue;
        }
        let participant = PARTICIPANTS.load_or(storage, (e, address), || {
            ContractError::Corrupt(format!("corrupt state: {address} revealed without joining"))
        })?;
        if participant.role == Role::Validator {
            if validators.is_none() {
                validators = Some(records::load_validator_set(storage, e)?);
            }
            if let Some(v) = validators.as_mut() {
                v.push(address.clone());
            }
        }
    }
    if let Some(v) = validators {
        VALIDATOR_SETS.save(storage, e, &v);
    }
    closing.reveals += page.len() as u32;
    if done {
        ep.header_mut().seed = Some(hex(&hash.finish()));
    } else {
        closing.seed_hash = Some(hash);
    }
    Ok(end_page(ep, closing, &page, done, Some(Stage::Assign)))
}

/// Stage `assign`: for the next `limit` participants (address order), `absent` for hosts
/// without a commitment and `no_reveal` for participants without a reveal; with verification
/// enabled, every other host's challenges and their first-round validators, drawn from the
/// seed. At the last one the `wasm-seed` event is emitted.
pub fn assign_page(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    limit: usize,
    at: u64,
    out: &mut Response,
) -> Result<Page, ContractError> {
    let e = ep.number();
    let closing = ep.closing()?;
    let seed = stored_digest(
        ep.header.seed.as_deref(),
        "corrupt state: assigning without a seed",
    )?;
    let (page, done) = split_page(
        PARTICIPANTS
            .prefix(e)
            .page(storage, closing.after.as_deref(), limit + 1)?,
        limit,
    );
    // The epoch's validators V: joined and revealed, in address order (stage `seed`).
    let validators = if config.verification.enabled {
        records::load_validator_set(storage, e)?
    } else {
        Vec::new()
    };
    let (mut expected, mut challenged) = (0u32, 0u32);
    for (address, participant) in page.iter() {
        let votes =
            settle_participant(storage, config, e, &seed, address, participant, &validators)?;
        if let Some(votes) = votes {
            expected += votes;
            challenged += 1;
        }
    }
    let counts = ep.counts_mut();
    counts.votes_expected += expected;
    counts.challenged += challenged;
    if done {
        out.events.push(seed_event(ep, closing.reveals, at));
    }
    Ok(end_page(ep, closing, &page, done, None))
}

/// One participant at the close of `reveal`: `absent` (a host without a commitment) or
/// `no_reveal` stored as its payout, or, for a committed and revealed host with verification
/// enabled, its challenges stored; returns the verdicts they expect for a challenged host.
fn settle_participant(
    storage: &mut dyn Storage,
    config: &Config,
    e: u64,
    seed: &[u8; 32],
    address: &str,
    participant: &Participant,
    validators: &[String],
) -> Result<Option<u32>, ContractError> {
    let outcome = if participant.role == Role::Host && !COMMITMENTS.has(storage, (e, address)) {
        Outcome::Absent
    } else if !REVEALS.has(storage, (e, address)) {
        Outcome::NoReveal
    } else {
        if participant.role != Role::Host || !config.verification.enabled {
            return Ok(None);
        }
        let ver = &config.verification;
        let assignments = assign(
            seed,
            address,
            config.segments,
            ver.challenges_k,
            ver.validators_r,
            validators,
        )?;
        let expected = assignments
            .iter()
            .map(|a| a.validators.len() as u32)
            .sum::<u32>();
        ASSIGNMENTS.save(storage, (e, address), &assignments);
        return Ok(Some(expected));
    };
    let payout = Payout {
        outcome,
        ..Payout::default()
    };
    PAYOUTS.save(storage, (e, address), &payout);
    Ok(None)
}

/// `wasm-seed`, at the end of the close of `reveal`.
fn seed_event(ep: &Epoch, reveals: u32, at: u64) -> Event {
    Event::new("seed")
        .add_attribute("epoch", ep.number())
        .add_attribute("seed", ep.header.seed.clone().unwrap_or_default())
        .add_attribute("reveals", reveals)
        .add_attribute("challenged_hosts", ep.counts.challenged)
        .add_attribute("verdicts_expected", ep.counts.votes_expected)
        .add_attribute("at", at)
}

/// The challenges of `host`: each challenged segment with its validators, stored as indices
/// into `validators` (V, sorted).
fn assign(
    seed: &[u8; 32],
    host: &str,
    segments: u32,
    k: u32,
    r: u32,
    validators: &[String],
) -> Result<Vec<Assignment>, ContractError> {
    challenged_segments(seed, host, segments, k)
        .into_iter()
        .map(|segment| {
            let picked = challenge_validators(seed, host, segment, validators, r);
            let indices = picked
                .iter()
                .map(|v| validators.binary_search(v).map(|i| i as u16))
                .collect::<Result<Vec<u16>, usize>>()
                .map_err(|_| ContractError::Corrupt("a challenge validator is not in V".into()))?;
            Ok(Assignment {
                segment,
                validators: indices,
                committees: Vec::new(),
                outcome: Default::default(),
            })
        })
        .collect()
}
