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
use crate::hashing::{digest_from_hex, hex, tag, u64be, StreamHash};
use crate::records::{
    self, Assignment, Closing, Outcome, Payout, Stage, ASSIGNMENTS, COMMITMENTS, PARTICIPANTS,
    PAYOUTS, REVEALS, VALIDATOR_SETS,
};
use crate::sampling::{challenge_validators, challenged_segments};
use crate::state::{Config, Role};
use crate::types::{Event, Response};

use super::{advance_cursor, run_id_bytes, Epoch, Page};

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
    let page = REVEALS
        .prefix(e)
        .page(storage, closing.after.as_deref(), limit + 1)?;
    let done = page.len() <= limit;
    let page = &page[..page.len().min(limit)];
    let mut hash = closing.seed_hash.take().ok_or_else(|| {
        ContractError::Corrupt("corrupt state: closing reveal without the seed's hash".into())
    })?;
    let mut validators: Option<Vec<String>> = None;
    for (address, secret) in page {
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
    advance_cursor(&mut closing, page, done, Stage::Assign);
    ep.header_mut().closing = Some(closing);
    Ok(Page {
        records: page.len() as u32,
        done,
    })
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
    let mut closing = ep.closing()?;
    let seed = ep
        .header
        .seed
        .as_deref()
        .and_then(digest_from_hex)
        .ok_or_else(|| ContractError::Corrupt("corrupt state: assigning without a seed".into()))?;
    let page = PARTICIPANTS
        .prefix(e)
        .page(storage, closing.after.as_deref(), limit + 1)?;
    let done = page.len() <= limit;
    let page = &page[..page.len().min(limit)];
    // The epoch's validators V: joined and revealed, in address order (stage `seed`).
    let validators = if config.verification.enabled {
        records::load_validator_set(storage, e)?
    } else {
        Vec::new()
    };
    let (k, r) = (
        config.verification.challenges_k,
        config.verification.validators_r,
    );
    let (mut expected, mut challenged) = (0u32, 0u32);
    for (address, participant) in page {
        let outcome = if participant.role == Role::Host && !COMMITMENTS.has(storage, (e, address)) {
            Outcome::Absent
        } else if !REVEALS.has(storage, (e, address)) {
            Outcome::NoReveal
        } else {
            if participant.role == Role::Host && config.verification.enabled {
                let assignments = assign(&seed, address, config.segments, k, r, &validators)?;
                expected += assignments
                    .iter()
                    .map(|a| a.validators.len() as u32)
                    .sum::<u32>();
                challenged += 1;
                ASSIGNMENTS.save(storage, (e, address), &assignments);
            }
            continue;
        };
        PAYOUTS.save(
            storage,
            (e, address),
            &Payout {
                outcome,
                ..Payout::default()
            },
        );
    }
    let counts = ep.counts_mut();
    counts.votes_expected += expected;
    counts.challenged += challenged;
    if done {
        let seed_hex = ep.header.seed.clone().unwrap_or_default();
        out.events.push(
            Event::new("seed")
                .add_attribute("epoch", e)
                .add_attribute("seed", &seed_hex)
                .add_attribute("reveals", closing.reveals)
                .add_attribute("challenged_hosts", ep.counts.challenged)
                .add_attribute("verdicts_expected", ep.counts.votes_expected)
                .add_attribute("at", at),
        );
    } else {
        closing.after = page.last().map(|(a, _)| a.clone());
    }
    ep.header_mut().closing = Some(closing);
    Ok(Page {
        records: page.len() as u32,
        done,
    })
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
