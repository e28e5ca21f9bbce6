//! The close of `reveal` (`docs/contract.md`, "Challenges"): the epoch seed from the valid
//! reveals; `absent` for hosts without a commitment and `no_reveal` for participants without a
//! reveal; and, with verification enabled, the challenges of every committed and revealed host:
//! its challenged segments and the first-round validators of each, drawn from the seed.

use std::collections::BTreeSet;

use crate::beacon;
use crate::deps::Storage;
use crate::error::ContractError;
use crate::hashing::hex;
use crate::records::{
    Assignment, Outcome, Payout, ASSIGNMENTS, COMMITMENTS, PARTICIPANTS, PAYOUTS, REVEALS,
    VALIDATOR_SETS,
};
use crate::sampling::{challenge_validators, challenged_segments};
use crate::state::{Config, Role};
use crate::types::{Event, Response};

use super::{run_id_bytes, Epoch};

/// Close `reveal` of the current epoch at height `at`.
pub fn close_reveal(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    at: u64,
    out: &mut Response,
) -> Result<(), ContractError> {
    let e = ep.number();
    let run_id = run_id_bytes(config)?;
    // Every scan is collected before anything is written.
    let reveals = REVEALS.prefix(e).all(storage)?;
    let seed = beacon::epoch_seed(&run_id, e, &reveals);
    let revealed: BTreeSet<&str> = reveals.iter().map(|(a, _)| a.as_str()).collect();
    let committed: BTreeSet<String> = COMMITMENTS
        .prefix(e)
        .all(storage)?
        .into_iter()
        .map(|(a, _)| a)
        .collect();
    let participants = PARTICIPANTS.prefix(e).all(storage)?;
    // The epoch's validators V: joined and revealed, in address order.
    let validators: Vec<String> = participants
        .iter()
        .filter(|(a, p)| p.role == Role::Validator && revealed.contains(a.as_str()))
        .map(|(a, _)| a.clone())
        .collect();
    let (k, r) = (
        config.verification.challenges_k,
        config.verification.validators_r,
    );
    let mut expected: u32 = 0;
    let mut challenged: u32 = 0;
    for (address, participant) in participants.iter() {
        let outcome = if participant.role == Role::Host && !committed.contains(address) {
            Outcome::Absent
        } else if !revealed.contains(address.as_str()) {
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
    if config.verification.enabled && !validators.is_empty() {
        VALIDATOR_SETS.save(storage, e, &validators);
    }
    let seed_hex = hex(&seed);
    out.events.push(
        Event::new("seed")
            .add_attribute("epoch", e)
            .add_attribute("seed", &seed_hex)
            .add_attribute("reveals", reveals.len())
            .add_attribute("challenged_hosts", challenged)
            .add_attribute("verdicts_expected", expected)
            .add_attribute("at", at),
    );
    ep.header_mut().seed = Some(seed_hex);
    let counts = ep.counts_mut();
    counts.votes_expected = expected;
    counts.challenged = challenged;
    Ok(())
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
