//! The close of `reveal` (`docs/contract.md`, "Challenges"): the epoch seed from the valid
//! reveals (for the next epoch's data); `absent` for hosts without a commitment and `no_reveal`
//! for participants without a reveal; and, with verification enabled, the challenges of every
//! committed and revealed host: its pickers (a committee drawn by stake among the validators that
//! joined, from the previous seed) and the segments each picker's revealed secret picks, with
//! their round-0 seats.
//!
//! It runs page by page (`super::closing`): stage `seed` hashes the reveals in address order
//! into the seed (the hash state is kept in the epoch between pages, so the seed is byte for
//! byte `beacon::epoch_seed` over every reveal) and gathers V; stage `assign` walks the
//! participants in address order.

use crate::deps::Storage;
use crate::error::ContractError;
use crate::hashing::{hex, stored_digest, tag, u64be, StreamHash};
use std::collections::{BTreeMap, BTreeSet};

use crate::classes;
use crate::records::{
    self, Assignment, Closing, Outcome, Participant, Payout, Stage, ASSIGNMENTS, COMMITMENTS,
    JOINED_CLASSES, JOINED_VALIDATORS, PARTICIPANTS, PAYOUTS, REVEALS, SEATED, VALIDATOR_SETS,
    VALIDATOR_STAKES, WEIGHT_CAPS,
};
use crate::sampling::{pickers, picks};
use crate::sittings;
use crate::state::{self, Config, Role};
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
    let mut validators: Option<(Vec<String>, Vec<crate::types::Uint128>)> = None;
    for (address, secret) in page.iter() {
        hash.update(&[address.as_bytes(), &[0u8], secret]);
        if !config.verification.enabled {
            continue;
        }
        let mut participant = PARTICIPANTS.load_or(storage, (e, address), || {
            ContractError::Corrupt(format!("corrupt state: {address} revealed without joining"))
        })?;
        if participant.role == Role::Validator {
            // Its weight: its stake at join, or what a slash of the epoch before left it at risk.
            if let Some(cap) = WEIGHT_CAPS.may_load(storage, (e, address))? {
                participant.weight = Some(participant.stake.min(cap));
                PARTICIPANTS.save(storage, (e, address), &participant);
            }
            if validators.is_none() {
                validators = Some((
                    records::load_validator_set(storage, e)?,
                    records::load_validator_stakes(storage, e)?,
                ));
            }
            if let Some((v, w)) = validators.as_mut() {
                v.push(address.clone());
                w.push(participant.weight());
            }
        }
    }
    if let Some((v, w)) = validators {
        VALIDATOR_SETS.save(storage, e, &v);
        VALIDATOR_STAKES.save(storage, e, &w);
    }
    closing.reveals += page.len() as u32;
    if done {
        if config.verification.enabled {
            cap_joined_weights(storage, e)?;
        }
        ep.header_mut().seed = Some(hex(&hash.finish()));
    } else {
        closing.seed_hash = Some(hash);
    }
    Ok(end_page(ep, closing, &page, done, Some(Stage::Assign)))
}

/// At the end of stage `seed`, before any of `e`'s pickers is drawn: the picker draw
/// (`JOINED_VALIDATORS`) weighs each validator a slash of the epoch before reached after it
/// joined (`WEIGHT_CAPS`, noted by that epoch's finalize and exclusions, all before `e`'s reveal
/// close began: it waits for that epoch to close, `super::pipeline::held`; so the same caps for
/// every page) as the seed pages weighed it in V (`VALIDATOR_STAKES`, its
/// participant record's `weight`); a capped validator that did not reveal gets its `weight`
/// here. Nothing to do without caps (one empty range); with them, one rewrite of the joined
/// list, as the close of `join` wrote it.
pub fn cap_joined_weights(storage: &mut dyn Storage, e: u64) -> Result<(), ContractError> {
    let caps: Vec<(String, crate::types::Uint128)> =
        WEIGHT_CAPS.prefix(e).page(storage, None, usize::MAX)?;
    if caps.is_empty() {
        return Ok(());
    }
    let mut joined = JOINED_VALIDATORS.may_load(storage, e)?.unwrap_or_default();
    for (address, cap) in caps.iter() {
        let i = match joined.binary_search_by(|(a, _)| a.as_str().cmp(address)) {
            Ok(i) => i,
            Err(_) => continue, // not a validator of `e` (the finalize noted only those)
        };
        let weight = joined[i].1.min(*cap);
        joined[i].1 = weight;
        if !REVEALS.has(storage, (e, address.as_str())) {
            let mut p = PARTICIPANTS.load_or(storage, (e, address.as_str()), || {
                ContractError::Corrupt(format!("corrupt state: {address} joined without a record"))
            })?;
            p.weight = Some(weight);
            PARTICIPANTS.save(storage, (e, address.as_str()), &p);
        }
    }
    JOINED_VALIDATORS.save(storage, e, &joined);
    Ok(())
}

/// Stage `assign`: for the next `limit` participants (address order), `absent` for hosts
/// without a commitment and `no_reveal` for participants without a reveal; with verification
/// enabled, every other host's challenges and their round-0 seats ([`assign`]). At the last one
/// the `wasm-seed` event is emitted.
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
    let (page, done) = split_page(
        PARTICIPANTS
            .prefix(e)
            .page(storage, closing.after.as_deref(), limit + 1)?,
        limit,
    );
    // The epoch's validators V: joined and revealed, in address order (stage `seed`), and the
    // validators that joined with their stakes (who may pick).
    let ctx = if config.verification.enabled {
        let prev_seed = stored_digest(
            Some(&ep.header.prev_seed),
            "corrupt state: an epoch without its previous seed",
        )?;
        let joined: Vec<(String, u128)> = JOINED_VALIDATORS
            .may_load(storage, e)?
            .unwrap_or_default()
            .into_iter()
            .map(|(a, s)| (a, s.0))
            .collect();
        let joined_classes = JOINED_CLASSES.may_load(storage, e)?.unwrap_or_default();
        let set = records::load_validator_set(storage, e)?;
        // V's classes, from the joined validators' (V is a subset of them).
        let v_classes = set
            .iter()
            .map(|v| {
                joined
                    .binary_search_by(|(a, _)| a.as_str().cmp(v))
                    .ok()
                    .and_then(|i| joined_classes.get(i).cloned())
                    .unwrap_or_default()
            })
            .collect();
        // With a delayed seed, the VDF output's seed picks for every picker (phase `delay`); none
        // posted within `delay_blocks`: each picker's own secret, as without the option.
        let delayed_seed = ep
            .header
            .delayed_seed
            .as_deref()
            .map(|text| {
                stored_digest(
                    Some(text),
                    "corrupt state: a delayed seed that is not a digest",
                )
            })
            .transpose()?;
        Some(PickContext {
            prev_seed,
            delayed_seed,
            joined,
            joined_classes,
            set,
            v_classes,
        })
    } else {
        None
    };
    let (mut expected, mut challenged) = (0u32, 0u32);
    if ctx.is_some() && closing.after.is_none() {
        // This epoch's sittings are counted from its first assignment (`crate::sittings`).
        sittings::COUNTED.save(storage, (e, ""), &vec![1]);
    }
    // The members of V with a round-0 seat on this page, and each one's new seats.
    let mut seats = Seats::default();
    for (address, participant) in page.iter() {
        let votes = settle_participant(
            storage,
            config,
            e,
            address,
            participant,
            ctx.as_ref(),
            &mut seats,
        )?;
        if let Some(votes) = votes {
            expected += votes;
            challenged += 1;
        }
    }
    let Seats { seated, changes } = seats;
    let mut new_seated = 0u32;
    if !seated.is_empty() {
        changes.write(storage, e)?;
        let mut all: BTreeSet<u16> = SEATED
            .may_load(storage, e)?
            .unwrap_or_default()
            .into_iter()
            .collect();
        let before = all.len();
        all.extend(seated);
        new_seated = (all.len() - before) as u32;
        SEATED.save(storage, e, &all.into_iter().collect::<Vec<u16>>());
    }
    let counts = ep.counts_mut();
    counts.votes_expected += expected;
    counts.challenged += challenged;
    counts.seated += new_seated;
    if done {
        out.events.push(seed_event(ep, closing.reveals, at));
    }
    Ok(end_page(ep, closing, &page, done, None))
}

/// What drawing a host's challenges needs: the previous seed, the validators that joined (with
/// their stake at join, address order) and their classes, V (those of them that revealed) and
/// V's classes.
struct PickContext {
    prev_seed: [u8; 32],
    /// `H("vdf/seed", y)` when the run delays its seed: it picks in place of each secret.
    delayed_seed: Option<[u8; 32]>,
    joined: Vec<(String, u128)>,
    joined_classes: Vec<String>,
    set: Vec<String>,
    v_classes: Vec<String>,
}

/// The round-0 seats a page of the close of `reveal` assigns: the members of V that hold one,
/// and each one's count (`crate::sittings`).
#[derive(Default)]
struct Seats {
    seated: BTreeSet<u16>,
    changes: sittings::Changes,
}

/// One participant at the close of `reveal`: `absent` or `absent_excused` (a host without a
/// commitment and without `sit_out`, [`absence`]) or `no_reveal` (a sat-out host included) stored as its payout (a sat-out host that
/// revealed keeps `sat_out`), or, for a committed and revealed host with verification
/// enabled, its challenges stored (their seats added to `seats`); returns the verdicts they
/// expect for a challenged host.
fn settle_participant(
    storage: &mut dyn Storage,
    config: &Config,
    e: u64,
    address: &str,
    participant: &Participant,
    ctx: Option<&PickContext>,
    seats: &mut Seats,
) -> Result<Option<u32>, ContractError> {
    let sat_out = participant.role == Role::Host
        && records::load_payout(storage, e, address)?.outcome == Outcome::SatOut;
    let outcome = if sat_out && REVEALS.has(storage, (e, address)) {
        return Ok(None); // sat out (nothing to check) and revealed: stays `sat_out`
    } else if sat_out {
        Outcome::NoReveal // sitting out never excuses a withheld reveal
    } else if participant.role == Role::Host && !COMMITMENTS.has(storage, (e, address)) {
        absence(storage, config, e, address)?
    } else if !REVEALS.has(storage, (e, address)) {
        Outcome::NoReveal
    } else {
        let ctx = match ctx {
            Some(ctx) if participant.role == Role::Host => ctx,
            _ => return Ok(None),
        };
        let assignments = assign(storage, config, e, address, &participant.class, ctx)?;
        let mut expected = 0u32;
        for a in assignments.iter() {
            expected += a.validators.len() as u32;
            seats.seated.extend(a.validators.iter().copied());
            for v in a.addresses(&ctx.set)? {
                seats.changes.add(&v, sittings::SEATS, 1);
            }
        }
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

/// The outcome of a host that joined `e` and sent nothing in `train` (no commitment, no
/// `sit_out`), with the miss recorded on its member record. Its first miss in the last
/// `miss_window_epochs` epochs is excused (a machine that fails now and then: `absent_excused`,
/// neither paid nor slashed); another is `absent` (slashed: joining and doing nothing, to hold a
/// seat or to stall `train` to its deadline, is not free). Either way a withheld reveal is paid
/// for: `no_reveal` when excused, `absent` with the no-reveal slash added when not.
fn absence(
    storage: &mut dyn Storage,
    config: &Config,
    e: u64,
    address: &str,
) -> Result<Outcome, ContractError> {
    let mut member = state::load_member(storage, address)?.ok_or_else(|| {
        ContractError::Corrupt(format!("corrupt state: {address} joined without a member"))
    })?;
    let excused = member.misses_before(e, config.economics.miss_window_epochs) == 0;
    member.record_miss(e);
    state::save_member(storage, &member);
    Ok(match (excused, REVEALS.has(storage, (e, address))) {
        (true, true) => Outcome::AbsentExcused,
        (true, false) => Outcome::NoReveal,
        (false, _) => Outcome::Absent,
    })
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

/// The number of segments `host` committed in epoch `e` (S, or fewer in a partial epoch).
pub fn committed_segments(storage: &dyn Storage, e: u64, host: &str) -> Result<u32, ContractError> {
    Ok(COMMITMENTS
        .load_or(storage, (e, host), || {
            ContractError::Corrupt(format!(
                "corrupt state: {host} has no commitment in epoch {e}"
            ))
        })?
        .segments)
}

/// The challenges of `host` (of compute-profile class `class`): its pickers (drawn by stake from
/// the previous seed among the validators of its class that joined), and for each picker that
/// revealed (a member of V) the segments its secret picks (with a delayed seed, the segments
/// that seed picks, the same for every picker: each then sits on all `k + 1`); each picked segment's round-0 seats
/// are the pickers that picked it, and the last segment, always challenged, seats every picker
/// that revealed. Seats are indices into V; a dispute is decided by V's members of the class
/// (`electorate`). A class that is not served (`classes::served`) gets the last segment only,
/// with no seat and nobody to decide it: the host ends `excluded`, unchecked and unpaid.
fn assign(
    storage: &dyn Storage,
    config: &Config,
    e: u64,
    host: &str,
    class: &str,
    ctx: &PickContext,
) -> Result<Vec<Assignment>, ContractError> {
    let ver = &config.verification;
    // Drawn among the segments the host committed (fewer than S in a partial epoch).
    let segments = committed_segments(storage, e, host)?;
    let mut seats: BTreeMap<u32, BTreeSet<u16>> = BTreeMap::new();
    let mut revealed: BTreeSet<u16> = BTreeSet::new();
    let of_class = classes::of_class(&ctx.joined, &ctx.joined_classes, class);
    let electorate = if classes::served(of_class.len(), config.phases.min_validators) {
        classes::electorate(&ctx.v_classes, class)
    } else {
        return Ok(vec![Assignment {
            segment: segments - 1,
            validators: Vec::new(),
            objectors: Vec::new(),
            disputed: false,
            gain_dispute: false,
            dispute_gain_micro: None,
            outcome: Default::default(),
            decided_by: None,
            electorate: Some(Vec::new()),
            gain_micro: None,
        }]);
    };
    for picker in pickers(&ctx.prev_seed, host, &of_class, ver.seats_cap) {
        let index = match ctx.set.binary_search_by(|v| v.as_str().cmp(picker)) {
            Ok(i) => i as u16,
            Err(_) => continue, // joined but did not reveal: no picks, no seats
        };
        // One common seed, or the picker's own revealed secret.
        let secret = match ctx.delayed_seed {
            Some(seed) => seed,
            None => REVEALS.load_or(storage, (e, picker), || {
                ContractError::Corrupt(format!("corrupt state: {picker} is in V without a reveal"))
            })?,
        };
        revealed.insert(index);
        for g in picks(&secret, host, segments, ver.challenges_k) {
            seats.entry(g).or_default().insert(index);
        }
    }
    seats.insert(segments - 1, revealed);
    Ok(seats
        .into_iter()
        .map(|(segment, v)| Assignment {
            segment,
            validators: v.into_iter().collect(),
            objectors: Vec::new(),
            disputed: false,
            gain_dispute: false,
            dispute_gain_micro: None,
            outcome: Default::default(),
            decided_by: None,
            electorate: electorate.clone(),
            gain_micro: None,
        })
        .collect())
}
