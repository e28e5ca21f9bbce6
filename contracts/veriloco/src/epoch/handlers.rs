//! The epoch messages, one phase each: `join` (join), `commit` (train), `reveal` (reveal),
//! `commit_verdict` (verify, dispute), `ready` and `reveal_traps` (objection), `reveal_verdict`
//! (verdict_reveal, dispute_reveal), `propose_model` (propose), and `advance`, which any phase
//! accepts. Each checks its epoch and phase first ([`expect_phase`]), then the sender's
//! part in the epoch, then its fields; a refused message writes nothing.

use crate::beacon;
use crate::classes;
use crate::commitments::{trap_commitment, verdict_commitment};
use crate::deps::DepsMut;
use crate::error::{refuse, ContractError};
use crate::funds::nonpayable;
use crate::hashing::{digest_from_hex, hex, parse_digest, stored_digest};
use crate::limits::{
    MAX_ADDRESS_LEN, MAX_DECIMAL_LEN, MAX_GAIN_MICRO, MAX_LOSS_MICRO, MAX_OBJECTIONS_PER_READY,
};
use crate::records::{
    self, Assignment, Commitment, Outcome, Participant, Phase, Proposal, Vote, VoteOutcome,
    ASSIGNMENTS, BACKING, COMMITMENTS, EXCLUSIONS, JOINED_CLASSES, JOINED_VALIDATORS, PARTICIPANTS,
    PROPOSALS, READY, READY_SO_FAR, REVEALS, REVOTE, REVOTE_COMMITS, SEATED, SEATS, TRAPS,
    VERDICT_COMMITS, VOTES,
};
use crate::sampling::seat_rank;
use crate::sittings;
use crate::state::{self, Config, Role};
use crate::types::{MessageInfo, Response, Uint128};

use super::Epoch;

// -- checks shared by the epoch messages ---------------------------------------------------------

/// `epoch` must be the current one; returns it.
pub(crate) fn expect_current(
    ep: &Epoch,
    action: &'static str,
    epoch: u64,
) -> Result<u64, ContractError> {
    let current = ep.number();
    if epoch < current {
        return Err(ContractError::EpochClosed {
            action,
            epoch,
            current,
        });
    }
    if epoch > current {
        return Err(ContractError::EpochNotStarted {
            action,
            epoch,
            current,
        });
    }
    Ok(current)
}

/// `epoch` must be the current one and in `phase`.
pub fn expect_phase(
    ep: &Epoch,
    action: &'static str,
    epoch: u64,
    phase: Phase,
) -> Result<(), ContractError> {
    let current = expect_current(ep, action, epoch)?;
    if ep.header.phase != phase {
        return Err(ContractError::WrongPhase {
            action,
            epoch: current,
            phase: ep.header.phase.as_str(),
            expected: phase.as_str(),
        });
    }
    expect_open(ep, action)
}

/// The phase must not be closing (a paged close in progress refuses the phase's messages).
fn expect_open(ep: &Epoch, action: &'static str) -> Result<(), ContractError> {
    if ep.header.closing.is_some() {
        return Err(ContractError::Closing {
            action,
            epoch: ep.number(),
            phase: ep.header.phase.as_str(),
        });
    }
    Ok(())
}

/// `epoch` must be the current one and in one of the phases `accepts` takes (`expected` names
/// them in the refusal).
pub fn expect_phases(
    ep: &Epoch,
    action: &'static str,
    epoch: u64,
    accepts: fn(Phase) -> bool,
    expected: &'static str,
) -> Result<(), ContractError> {
    let current = expect_current(ep, action, epoch)?;
    if !accepts(ep.header.phase) {
        return Err(ContractError::WrongPhase {
            action,
            epoch: current,
            phase: ep.header.phase.as_str(),
            expected,
        });
    }
    expect_open(ep, action)
}

/// `value` must be a 64-hex digest.
pub fn hex_field(
    action: &'static str,
    field: &'static str,
    value: &str,
) -> Result<(), ContractError> {
    parse_digest(action, field, value).map(drop)
}

/// The sender's participant record in the current epoch.
fn participant(
    deps: &DepsMut,
    ep: &Epoch,
    action: &'static str,
    sender: &str,
) -> Result<Participant, ContractError> {
    let epoch = ep.number();
    PARTICIPANTS.load_or(deps.storage, (epoch, sender), || {
        ContractError::NotParticipant {
            action,
            address: sender.to_string(),
            epoch,
        }
    })
}

/// The sender's participant record in the current epoch, which must be of `role`.
fn participant_as(
    deps: &DepsMut,
    ep: &Epoch,
    action: &'static str,
    sender: &str,
    role: Role,
) -> Result<Participant, ContractError> {
    let p = participant(deps, ep, action, sender)?;
    if p.role != role {
        return Err(ContractError::WrongRole {
            action,
            address: sender.to_string(),
            epoch: ep.number(),
            role: p.role.as_str(),
            expected: role.as_str(),
        });
    }
    Ok(p)
}

/// A canonical decimal string (`protocol.types.Dec` as serialized): no sign, no exponent, no
/// leading zeros, no trailing fractional zeros, at most [`MAX_DECIMAL_LEN`] characters.
pub fn is_canonical_decimal(text: &str) -> bool {
    if text.is_empty() || text.len() > MAX_DECIMAL_LEN {
        return false;
    }
    let (int, frac) = match text.find('.') {
        Some(i) => (&text[..i], Some(&text[i + 1..])),
        None => (text, None),
    };
    let int_ok = !int.is_empty()
        && int.bytes().all(|b| b.is_ascii_digit())
        && (int == "0" || !int.starts_with('0'));
    let frac_ok = match frac {
        None => true,
        Some(f) => !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) && !f.ends_with('0'),
    };
    int_ok && frac_ok
}

/// Compare two canonical decimals (see [`is_canonical_decimal`]) as numbers: integer parts by
/// length then digits (no leading zeros), then fractional digits as text (no trailing zeros, so
/// text order is numeric order).
pub fn cmp_decimal(a: &str, b: &str) -> std::cmp::Ordering {
    let split = |t: &str| -> (String, String) {
        match t.find('.') {
            Some(i) => (t[..i].to_string(), t[i + 1..].to_string()),
            None => (t.to_string(), String::new()),
        }
    };
    let ((ai, af), (bi, bf)) = (split(a), split(b));
    ai.len()
        .cmp(&bi.len())
        .then_with(|| ai.cmp(&bi))
        .then_with(|| af.cmp(&bf))
}

// -- messages --------------------------------------------------------------------------------------

pub fn join(
    deps: DepsMut,
    config: &Config,
    ep: &mut Epoch,
    info: &MessageInfo,
    epoch: u64,
    beacon_commit: String,
    compute_class: String,
) -> Result<Response, ContractError> {
    const ACTION: &str = "join";
    nonpayable(info, ACTION)?;
    expect_phase(ep, ACTION, epoch, Phase::Join)?;
    hex_field(ACTION, "beacon_commit", &beacon_commit)?;
    classes::validate(ACTION, &compute_class)?;
    let sender = &info.sender;
    let member = match state::load_member(deps.storage, sender)? {
        Some(m) => m,
        None => refuse!(ACTION, "{sender} is not a member; bond first"),
    };
    let role = member.role;
    let minimum = config.min_stake(role);
    if !config.is_eligible(role, member.bonded) {
        // Amounts in Cosmos notation (base units and the denom), like every amount the contract writes.
        refuse!(
            ACTION,
            "bonded stake {}{} is below the minimum {}{} for a {}",
            member.bonded,
            config.denom,
            minimum.max(Uint128(1)),
            config.denom,
            role.as_str()
        );
    }
    if PARTICIPANTS
        .may_load(deps.storage, (epoch, sender))?
        .is_some()
    {
        refuse!(ACTION, "{sender} already joined epoch {epoch}");
    }
    let (joined, cap) = match role {
        Role::Host => (ep.counts.hosts, config.phases.max_hosts),
        Role::Validator => (ep.counts.validators, config.phases.max_validators),
    };
    // Seats go by stake, never by arrival: a full role admits a newcomer only in place of its
    // smallest seat (misses, stake at join, then seat rank), which it must out-rank. A host ranks
    // below every host that missed fewer of the last `miss_window_epochs` epochs (issue 30),
    // whatever its stake.
    let prev_seed = stored_digest(
        Some(&ep.header.prev_seed),
        "corrupt state: an epoch without its previous seed",
    )?;
    let window = config.economics.miss_window_epochs;
    let misses = match role {
        Role::Host => member.misses_before(epoch, window),
        Role::Validator => 0,
    };
    let key = seat_key(
        member.bonded,
        &seat_rank(&prev_seed, sender),
        sender,
        misses,
    );
    let role_key = seat_role(role);
    let mut evicted: Option<String> = None;
    if joined >= cap {
        let smallest = SEATS.prefix2(epoch, role_key).page(deps.storage, None, 1)?;
        // What a refusal says of a newcomer that missed epochs.
        let missed = || {
            format!(
                "epoch {epoch} is full and {sender} missed {misses} of the last {window} epochs \
                 (the last: epoch {})",
                member.last_miss.unwrap_or_default()
            )
        };
        match smallest.first() {
            Some((seat, _)) if key.as_str() > seat.as_str() => {
                let (_, _, address) = parse_seat_key(seat)?;
                PARTICIPANTS.remove(deps.storage, (epoch, address.as_str()));
                SEATS.remove(deps.storage, (epoch, role_key, seat.as_str()));
                evicted = Some(address);
            }
            Some((seat, _)) if misses > 0 => {
                let (seat_misses, stake, _) = parse_seat_key(seat)?;
                if seat_misses < misses {
                    refuse!(
                        ACTION,
                        "{}: a host ranks below every host that missed fewer",
                        missed()
                    );
                }
                refuse!(
                    ACTION,
                    "{}: it ranks below every host that missed fewer, and the smallest seat of a \
                     host that missed as many holds {stake}{}",
                    missed(),
                    config.denom
                );
            }
            Some((seat, _)) => {
                let (_, stake, _) = parse_seat_key(seat)?;
                refuse!(
                    ACTION,
                    "epoch {epoch} is full: its {cap} {} seats are held by stakes of at least \
                     {stake}{}; a larger stake at join takes the smallest seat",
                    role.as_str(),
                    config.denom
                );
            }
            None => refuse!(
                ACTION,
                "epoch {epoch} is full: it admits at most {cap} {}s",
                role.as_str()
            ),
        }
    }
    SEATS.save(deps.storage, (epoch, role_key, key.as_str()), &1);
    PARTICIPANTS.save(
        deps.storage,
        (epoch, sender),
        &Participant {
            role,
            stake: member.bonded,
            beacon: beacon_commit,
            class: compute_class.clone(),
            weight: None,
        },
    );
    let response = Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("member", sender)
        .add_attribute("role", role.as_str())
        .add_attribute("stake", member.bonded)
        .add_attribute("compute_class", &compute_class);
    if let Some(address) = evicted {
        // One out, one in: the counts stay.
        return Ok(response.add_attribute("evicted", address));
    }
    let counts = ep.counts_mut();
    match role {
        Role::Host => counts.hosts += 1,
        Role::Validator => counts.validators += 1,
    }
    Ok(response)
}

/// The mark that leads the seat key of a host that missed epochs of the window: `-` sorts below
/// every hex digit, so such a seat is smaller than any seat without it. Keys without it are the
/// keys stored before the rule, and `-` alone (one miss) is the key of the build that marked a
/// sit-out of the epoch before, so seats saved by older builds still parse and sort.
const MISS_MARK: char = '-';
/// After [`MISS_MARK`], the mark of two or more misses, then `hex2(255 − misses)`: `!` sorts
/// below every hex digit (so below one miss), and more misses below fewer.
const MISSES_MARK: char = '!';

/// The key of a seat: `[mark] || hex32(stake) || hex(rank) || address`, so that seats sort by
/// misses (the most first), then stake, then rank (the smallest first: the one a newcomer of a
/// full epoch must out-rank). The mark: none for no miss, `-` for one, `-!` and
/// `hex2(255 − misses)` for more.
fn seat_key(stake: Uint128, rank: &[u8; 32], address: &str, misses: u32) -> String {
    let mark = match misses {
        0 => String::new(),
        1 => MISS_MARK.to_string(),
        m => format!("{MISS_MARK}{MISSES_MARK}{:02x}", 255 - m.min(255)),
    };
    format!("{mark}{:032x}{}{}", stake.0, hex(rank), address)
}

fn seat_role(role: Role) -> &'static str {
    match role {
        Role::Host => "h",
        Role::Validator => "v",
    }
}

/// A seat key's misses, stake and address ([`seat_key`]).
fn parse_seat_key(full: &str) -> Result<(u32, Uint128, String), ContractError> {
    let corrupt = || ContractError::Corrupt(format!("corrupt seat key {full:?}"));
    let (misses, key) = match full.strip_prefix(MISS_MARK) {
        None => (0, full),
        Some(rest) => match rest.strip_prefix(MISSES_MARK) {
            None => (1, rest),
            Some(rest) => {
                let inverted = rest
                    .get(..2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(corrupt)?;
                (255 - u32::from(inverted), &rest[2..])
            }
        },
    };
    if key.len() <= 96 || !key.is_char_boundary(96) {
        return Err(corrupt());
    }
    let stake = u128::from_str_radix(&key[..32], 16).map_err(|_| corrupt())?;
    Ok((misses, Uint128(stake), key[96..].to_string()))
}

/// At the close of `join`: the validators that joined, in address order with their stake at
/// join (`JOINED_VALIDATORS`), from whom each host's pickers are drawn, and the class each
/// declared (`JOINED_CLASSES`).
pub fn record_joined_validators(
    storage: &mut dyn crate::deps::Storage,
    epoch: u64,
) -> Result<(), ContractError> {
    let mut joined: Vec<(String, Uint128)> = Vec::new();
    for (key, _) in SEATS
        .prefix2(epoch, seat_role(Role::Validator))
        .all(storage)?
    {
        let (_, stake, address) = parse_seat_key(&key)?;
        joined.push((address, stake));
    }
    joined.sort();
    let mut classes: Vec<String> = Vec::with_capacity(joined.len());
    for (address, _) in joined.iter() {
        let p = PARTICIPANTS.load_or(storage, (epoch, address.as_str()), || {
            ContractError::Corrupt(format!(
                "corrupt state: a seat of {address} without joining"
            ))
        })?;
        classes.push(p.class);
    }
    JOINED_VALIDATORS.save(storage, epoch, &joined);
    if classes.iter().any(|c| !c.is_empty()) {
        JOINED_CLASSES.save(storage, epoch, &classes);
    } else {
        JOINED_CLASSES.remove(storage, epoch);
    }
    Ok(())
}

pub fn commit(
    deps: DepsMut,
    config: &Config,
    ep: &mut Epoch,
    info: &MessageInfo,
    epoch: u64,
    commitment: Commitment,
) -> Result<Response, ContractError> {
    const ACTION: &str = "commit";
    nonpayable(info, ACTION)?;
    expect_phase(ep, ACTION, epoch, Phase::Train)?;
    let sender = &info.sender;
    let host = participant_as(&deps, ep, ACTION, sender, Role::Host)?;
    if COMMITMENTS
        .may_load(deps.storage, (epoch, sender))?
        .is_some()
    {
        refuse!(ACTION, "{sender} already committed in epoch {epoch}");
    }
    if sat_out(&deps, epoch, sender)? {
        refuse!(
            ACTION,
            "{sender} sat out epoch {epoch}; it commits in the next"
        );
    }
    hex_field(ACTION, "checkpoint_root", &commitment.checkpoint_root)?;
    hex_field(ACTION, "delta_hash", &commitment.delta_hash)?;
    hex_field(ACTION, "loss_digest", &commitment.loss_digest)?;
    hex_field(ACTION, "trap_commit", &commitment.trap_commit)?;
    // A partial epoch (issue 30): a host that finished s < S segments by the deadline commits
    // those s; its challenges are drawn among them and its reward is its share of the steps.
    if commitment.segments == 0 || commitment.segments > config.segments {
        refuse!(
            ACTION,
            "segments is {}, but the run has 1 to {} segments per epoch",
            commitment.segments,
            config.segments
        );
    }
    if commitment.train_loss_micro > MAX_LOSS_MICRO {
        refuse!(
            ACTION,
            "train_loss_micro {} exceeds the bound {MAX_LOSS_MICRO}",
            commitment.train_loss_micro
        );
    }
    COMMITMENTS.save(deps.storage, (epoch, sender), &commitment);
    let counts = ep.counts_mut();
    counts.committed += 1;
    // The weight of a pipelined run's start vote (`pipeline::propose_start`): its stake at
    // join, or less once a slash of the epoch before reached it (`records::HostCuts`).
    counts.committed_stake = counts.committed_stake.checked_add(host.weight())?;
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("host", sender)
        .add_attribute("checkpoint_root", &commitment.checkpoint_root)
        .add_attribute("delta_hash", &commitment.delta_hash))
}

/// Whether `host` sent `sit_out` in epoch `e` (its payout says so from then on).
fn sat_out(deps: &DepsMut, e: u64, host: &str) -> Result<bool, ContractError> {
    Ok(records::load_payout(deps.storage, e, host)?.outcome == Outcome::SatOut)
}

/// `delayed_seed {epoch, output, proof}` (phase `delay`, anyone): the VDF output `y` over the
/// epoch seed with Wesolowski's proof (`crate::vdf`, 512 lowercase hex characters each). The
/// contract checks it (two 128-bit exponentiations) and keeps `H("vdf/seed", y)`, from which
/// every host's challenges are drawn; the phase then closes and the challenges are assigned.
/// Nobody can post another output: the first valid one is the only one there is.
pub fn delayed_seed(
    config: &Config,
    ep: &mut Epoch,
    info: &MessageInfo,
    epoch: u64,
    output: &str,
    proof: &str,
) -> Result<Response, ContractError> {
    const ACTION: &str = "delayed_seed";
    nonpayable(info, ACTION)?;
    expect_phase(ep, ACTION, epoch, Phase::Delay)?;
    if ep.header.delayed_seed.is_some() {
        refuse!(ACTION, "epoch {epoch}'s delayed seed is already set");
    }
    let (y, pi) = match (crate::vdf::decode(output), crate::vdf::decode(proof)) {
        (Some(y), Some(pi)) => (y, pi),
        _ => refuse!(
            ACTION,
            "output and proof must be 512 lowercase hex characters each, a number in [1, (N - 1)/2]"
        ),
    };
    let seed = stored_digest(
        ep.header.seed.as_deref(),
        "corrupt state: delay without a seed",
    )?;
    let squarings = config.verification.delay_squarings;
    let x = crate::vdf::input_element(&seed);
    if !crate::vdf::verify(&x, squarings, &y, &pi) {
        refuse!(
            ACTION,
            "the proof does not show that output is the epoch {epoch} seed's input raised to 2^{squarings}"
        );
    }
    let delayed = hex(&crate::vdf::delayed_seed(&y));
    ep.header_mut().delayed_seed = Some(delayed.clone());
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("delayed_seed", delayed)
        .add_attribute("sender", info.sender.as_str()))
}

/// `sit_out {epoch}` (train): a joined host that will finish no segment by the train deadline
/// says so instead of committing nothing (issue 30). It is `sat_out` at once: it has no
/// commitment, so it is not challenged, has no start vote or proposal, is neither paid nor
/// slashed, and joins the next epoch as usual. It still owes its beacon reveal (a free
/// withholding would let it steer the next seed); without it, it is `no_reveal`.
pub fn sit_out(
    deps: DepsMut,
    ep: &mut Epoch,
    info: &MessageInfo,
    epoch: u64,
) -> Result<Response, ContractError> {
    const ACTION: &str = "sit_out";
    nonpayable(info, ACTION)?;
    expect_phase(ep, ACTION, epoch, Phase::Train)?;
    let sender = &info.sender;
    participant_as(&deps, ep, ACTION, sender, Role::Host)?;
    if COMMITMENTS.has(deps.storage, (epoch, sender)) {
        refuse!(
            ACTION,
            "{sender} already committed in epoch {epoch}; a committed host cannot sit out"
        );
    }
    if sat_out(&deps, epoch, sender)? {
        refuse!(ACTION, "{sender} already sat out epoch {epoch}");
    }
    let payout = records::Payout {
        outcome: Outcome::SatOut,
        ..records::Payout::default()
    };
    records::PAYOUTS.save(deps.storage, (epoch, sender), &payout);
    ep.counts_mut().sat_out += 1;
    // A miss: its seat ranks below hosts that missed fewer at the next joins (so sitting out
    // never holds a seat for free), and an absence soon after is not excused.
    if let Some(mut member) = state::load_member(deps.storage, sender)? {
        member.record_miss(epoch);
        state::save_member(deps.storage, &member);
    }
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("host", sender)
        .add_attribute("outcome", Outcome::SatOut.as_str()))
}

pub fn reveal(
    deps: DepsMut,
    ep: &mut Epoch,
    info: &MessageInfo,
    height: u64,
    epoch: u64,
    secret: String,
    on_behalf: Option<String>,
) -> Result<Response, ContractError> {
    const ACTION: &str = "reveal";
    nonpayable(info, ACTION)?;
    expect_phase(ep, ACTION, epoch, Phase::Reveal)?;
    // Past its deadline a `reveal` is still open only while its close waits for the older
    // epoch to settle (`pipeline::held`); the window itself is over.
    let deadline = ep.header.phase_deadline;
    if height >= deadline {
        refuse!(
            ACTION,
            "the reveal window of epoch {epoch} closed at height {deadline} (its close waits \
             for the older epoch to settle)"
        );
    }
    // A standby reveals for the one member that named it; everyone else only for itself.
    let sender = match &on_behalf {
        None => &info.sender,
        Some(member) => {
            let named = crate::state::STANDBYS.may_load(deps.storage, member)?;
            if named.as_deref() != Some(info.sender.as_str()) {
                refuse!(ACTION, "{} is not the standby of {member}", info.sender);
            }
            member
        }
    };
    let participant = participant(&deps, ep, ACTION, sender)?;
    if REVEALS.has(deps.storage, (epoch, sender)) {
        refuse!(ACTION, "{sender} already revealed for epoch {epoch}");
    }
    let secret_bytes = match digest_from_hex(&secret) {
        Some(bytes) => bytes,
        None => refuse!(
            ACTION,
            "secret must be 64 lowercase hex characters (32 bytes)"
        ),
    };
    if hex(&beacon::commitment(sender, epoch, &secret_bytes)) != participant.beacon {
        refuse!(
            ACTION,
            "the secret does not match the beacon commitment {sender} made when joining epoch {epoch}"
        );
    }
    REVEALS.save(deps.storage, (epoch, sender), &secret_bytes);
    ep.counts_mut().revealed += 1;
    let response = Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("member", sender);
    Ok(match on_behalf {
        None => response,
        Some(_) => response.add_attribute("standby", &info.sender),
    })
}

/// The sender's challenge (`host`, `segment`) in the current phase, and the round it sits in:
/// `verify` — a round-0 seat; `verdict_reveal` — a round-0 seat of an undisputed challenge;
/// `dispute` — a member of V without a round-0 seat on a disputed challenge, or a round-0 seat
/// that objected to it or sits on a gain dispute (its re-vote, round [`REVOTE`]); `dispute_reveal` — anyone who sits on a
/// disputed challenge. Refused (one text for every case: not a validator of V, not sitting on it
/// now, segment not challenged, challenge already decided) otherwise.
fn assigned_now(
    deps: &DepsMut,
    ep: &Epoch,
    action: &'static str,
    sender: &str,
    host: &str,
    segment: u32,
) -> Result<(Assignment, u32), ContractError> {
    let epoch = ep.number();
    let not_assigned = || ContractError::NotAssigned {
        action,
        validator: sender.to_string(),
        host: host.to_string(),
        segment,
        epoch,
    };
    let list = ASSIGNMENTS
        .may_load(deps.storage, (epoch, host))?
        .ok_or_else(not_assigned)?;
    let a = list
        .into_iter()
        .find(|a| a.segment == segment)
        .ok_or_else(not_assigned)?;
    let set = records::load_validator_set(deps.storage, epoch)?;
    let index = set
        .binary_search_by(|v| v.as_str().cmp(sender))
        .map_err(|_| not_assigned())? as u16;
    let seat = a.validators.contains(&index);
    let sits = a.outcome.is_pending()
        && match ep.header.phase {
            Phase::Verify => seat,
            Phase::VerdictReveal => seat && !a.disputed,
            Phase::Dispute => {
                a.disputed
                    && (if seat {
                        a.revotes(index)
                    } else {
                        a.elects(index)
                    })
            }
            Phase::DisputeReveal => a.disputed && (seat || a.elects(index)),
            _ => false,
        };
    if !sits {
        return Err(not_assigned());
    }
    let round = match (seat, ep.header.phase) {
        (true, Phase::Dispute) => REVOTE,
        (true, _) => 0,
        (false, _) => 1,
    };
    Ok((a, round))
}

pub fn commit_verdict(
    deps: DepsMut,
    ep: &mut Epoch,
    info: &MessageInfo,
    epoch: u64,
    host: String,
    segment: u32,
    commitment: String,
) -> Result<Response, ContractError> {
    const ACTION: &str = "commit_verdict";
    nonpayable(info, ACTION)?;
    expect_phases(
        ep,
        ACTION,
        epoch,
        Phase::commits_verdicts,
        "verify or dispute",
    )?;
    deps.api
        .addr_validate(&host)
        .map_err(|e| e.context("commit_verdict: host"))?;
    let sender = &info.sender;
    let (_, round) = assigned_now(&deps, ep, ACTION, sender, &host, segment)?;
    // An objecting round-0 seat (every seat of a gain dispute) commits again in `dispute`: its
    // re-vote, kept apart.
    let commits = if round == REVOTE {
        REVOTE_COMMITS
    } else {
        VERDICT_COMMITS
    };
    if commits.has(deps.storage, (epoch, &host, segment, sender)) {
        refuse!(
            ACTION,
            "{sender} already committed a verdict on host {host} segment {segment} of epoch {epoch}"
        );
    }
    hex_field(ACTION, "commitment", &commitment)?;
    commits.save(deps.storage, (epoch, &host, segment, sender), &commitment);
    let field = match round {
        0 => sittings::COMMITTED0,
        REVOTE => sittings::COMMITTED_REVOTE,
        _ => sittings::COMMITTED1,
    };
    sittings::bump(deps.storage, epoch, sender, &[field])?;
    ep.counts_mut().votes_posted += 1;
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("validator", sender)
        .add_attribute("host", &host)
        .add_attribute("segment", segment)
        .add_attribute("round", round))
}

/// A validator's opening of its verdict on one challenged segment.
pub struct VerdictOpening {
    pub epoch: u64,
    pub host: String,
    pub segment: u32,
    pub outcome: VoteOutcome,
    pub distance: String,
    pub evidence: String,
    pub salt: String,
    /// The host's probe gain (its last segment, probe on).
    pub gain_micro: Option<i64>,
    /// Its gain on the host's dispute windows (a vote that decides a gain dispute).
    pub dispute_gain_micro: Option<i64>,
}

pub fn reveal_verdict(
    deps: DepsMut,
    config: &Config,
    ep: &mut Epoch,
    info: &MessageInfo,
    msg: VerdictOpening,
) -> Result<Response, ContractError> {
    const ACTION: &str = "reveal_verdict";
    let VerdictOpening {
        epoch,
        host,
        segment,
        outcome,
        distance,
        evidence,
        salt,
        gain_micro,
        dispute_gain_micro,
    } = msg;
    nonpayable(info, ACTION)?;
    expect_phases(
        ep,
        ACTION,
        epoch,
        Phase::reveals_verdicts,
        "verdict_reveal or dispute_reveal",
    )?;
    deps.api
        .addr_validate(&host)
        .map_err(|e| e.context("reveal_verdict: host"))?;
    let sender = &info.sender;
    let (a, round) = assigned_now(&deps, ep, ACTION, sender, &host, segment)?;
    if ep.header.phase == Phase::VerdictReveal && outcome != VoteOutcome::Pass {
        refuse!(
            ACTION,
            "only pass verdicts open in verdict_reveal: a seat that found otherwise objects in \
             objection, and the final vote decides"
        );
    }
    // A round-0 seat that opened its `unavailable` or `fail` in `dispute_reveal` next opens its
    // re-vote, if it committed one: the re-vote replaces an `unavailable` and must repeat a `fail`.
    let earlier = VOTES.may_load(deps.storage, (epoch, &host, segment, sender))?;
    let (round, first, first_gain) = match &earlier {
        None => (round, None, None),
        Some(v)
            if v.round == 0
                && v.outcome != VoteOutcome::Pass
                && REVOTE_COMMITS.has(deps.storage, (epoch, &host, segment, sender)) =>
        {
            if v.outcome == VoteOutcome::Fail
                && (outcome != VoteOutcome::Fail
                    || distance != v.distance
                    || evidence != v.evidence
                    || gain_micro != v.gain_micro)
            {
                refuse!(
                    ACTION,
                    "a re-vote after a round-0 fail must repeat it (same distance, evidence and gain)"
                );
            }
            (REVOTE, Some(v.outcome), None)
        }
        // A gain dispute: a seat that opened its `pass` in `verdict_reveal` opens its re-vote,
        // which repeats that `pass` (same distance and evidence) with both gains. Its round-0
        // gain is kept in the re-vote's record (`first_gain_micro`): finalize judges it.
        Some(v)
            if v.round == 0
                && v.outcome == VoteOutcome::Pass
                && a.gain_dispute
                && REVOTE_COMMITS.has(deps.storage, (epoch, &host, segment, sender)) =>
        {
            if outcome != VoteOutcome::Pass || distance != v.distance || evidence != v.evidence {
                refuse!(
                    ACTION,
                    "a re-vote in a gain dispute must repeat the seat's round-0 pass (same \
                     distance and evidence) with the gain on the dispute windows"
                );
            }
            (REVOTE, Some(v.outcome), v.gain_micro)
        }
        Some(_) => refuse!(
            ACTION,
            "{sender} already opened its verdict on host {host} segment {segment} of epoch {epoch}"
        ),
    };
    let commits = if round == REVOTE {
        REVOTE_COMMITS
    } else {
        VERDICT_COMMITS
    };
    let committed = match commits.may_load(deps.storage, (epoch, &host, segment, sender))? {
        Some(c) => c,
        None => refuse!(
            ACTION,
            "{sender} committed no verdict on host {host} segment {segment} of epoch {epoch}"
        ),
    };
    if !is_canonical_decimal(&distance) {
        refuse!(
            ACTION,
            "distance must be a canonical decimal string like \"0.0123\", got {distance:?}"
        );
    }
    check_gain(
        deps.storage,
        config,
        epoch,
        &host,
        segment,
        outcome,
        gain_micro,
    )?;
    check_dispute_gain(
        a.gain_dispute && round != 0,
        outcome,
        gain_micro,
        dispute_gain_micro,
    )?;
    let evidence_bytes = parse_digest(ACTION, "evidence", &evidence)?;
    let salt_bytes = parse_digest(ACTION, "salt", &salt)?;
    let opened = verdict_commitment(
        sender,
        epoch,
        &host,
        segment,
        outcome.code(),
        &distance,
        &evidence_bytes,
        &salt_bytes,
        gain_micro,
        dispute_gain_micro,
    );
    if hex(&opened) != committed {
        refuse!(
            ACTION,
            "the opening does not match the verdict commitment {sender} made on host {host} segment {segment} of epoch {epoch}"
        );
    }
    VOTES.save(
        deps.storage,
        (epoch, &host, segment, sender),
        &Vote {
            outcome,
            distance,
            evidence,
            salt,
            round,
            first,
            gain_micro,
            dispute_gain_micro,
            first_gain_micro: first_gain,
        },
    );
    // A re-vote replaces the seat's round-0 record: its key was counted at that opening.
    let fields: &[usize] = match (round, a.disputed) {
        (0, true) => &[sittings::OPENED0, sittings::OPENED0_DISPUTED],
        (0, false) => &[sittings::OPENED0],
        (REVOTE, _) => &[sittings::OPENED_REVOTE],
        _ => &[sittings::OPENED1],
    };
    sittings::bump(deps.storage, epoch, sender, fields)?;
    ep.counts_mut().votes_revealed += 1;
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("validator", sender)
        .add_attribute("host", &host)
        .add_attribute("segment", segment)
        .add_attribute("round", round)
        .add_attribute("outcome", outcome.as_str()))
}

/// Where a probe gain belongs on a verdict: on the host's last committed segment with the probe
/// on (`verification.probe_windows > 0`). There a `pass` must carry one and a `fail` may (its
/// voters computed it); an `unavailable` never does, nor a verdict anywhere else. Its magnitude
/// is at most `MAX_GAIN_MICRO` (the probe's clamp).
fn check_gain(
    storage: &dyn crate::deps::Storage,
    config: &Config,
    epoch: u64,
    host: &str,
    segment: u32,
    outcome: VoteOutcome,
    gain_micro: Option<i64>,
) -> Result<(), ContractError> {
    const ACTION: &str = "reveal_verdict";
    let probe = config.verification.probe_windows > 0;
    let last = probe && segment + 1 == super::challenges::committed_segments(storage, epoch, host)?;
    match (gain_micro, outcome) {
        (None, VoteOutcome::Pass) if last => refuse!(
            ACTION,
            "a pass on the last segment ({segment}) of host {host} must carry the host's probe \
             gain (gain_micro): the run's probe is on"
        ),
        (Some(_), VoteOutcome::Unavailable) => refuse!(
            ACTION,
            "an unavailable verdict carries no probe gain (gain_micro)"
        ),
        (Some(_), _) if !last => refuse!(
            ACTION,
            "gain_micro belongs only on a verdict on a host's last segment when the run's probe \
             is on (verification.probe_windows > 0); segment {segment} of host {host} is not that"
        ),
        (Some(g), _) if g.unsigned_abs() > MAX_GAIN_MICRO => refuse!(
            ACTION,
            "gain_micro must be within ±{MAX_GAIN_MICRO}, got {g}"
        ),
        _ => Ok(()),
    }
}

/// The dispute-window gain of an opening: required on a `pass` that decides a gain dispute
/// (`deciding`: a re-vote or a final vote on one), allowed there on a `fail` that carries a gain,
/// refused everywhere else (round-0 openings, other challenges: their preimage is unchanged).
fn check_dispute_gain(
    deciding: bool,
    outcome: VoteOutcome,
    gain_micro: Option<i64>,
    dispute_gain_micro: Option<i64>,
) -> Result<(), ContractError> {
    const ACTION: &str = "reveal_verdict";
    match dispute_gain_micro {
        None if deciding && outcome == VoteOutcome::Pass => refuse!(
            ACTION,
            "a pass that decides a gain dispute must carry the host's gain on its dispute windows \
             (dispute_gain_micro) as well as its main-window gain"
        ),
        None => Ok(()),
        Some(_) if !deciding || gain_micro.is_none() => refuse!(
            ACTION,
            "dispute_gain_micro belongs only with a gain_micro on a vote that decides a gain \
             dispute (a round-0 seat's re-vote or a final vote)"
        ),
        Some(d) if d.unsigned_abs() > MAX_GAIN_MICRO => refuse!(
            ACTION,
            "dispute_gain_micro must be within ±{MAX_GAIN_MICRO}, got {d}"
        ),
        Some(_) => Ok(()),
    }
}

/// `ready {epoch, objections}`: a validator with round-0 seats says it is done with them, naming
/// the challenges it objects to (its committed verdict is not `pass`): strictly ascending by
/// (host, segment), each one it sits on in round 0 and committed to. At most
/// `MAX_OBJECTIONS_PER_READY` per message: a validator with more sends several, each after the
/// last objection of the one before (repeats of recorded ones are skipped); the first with fewer
/// than that many is its last, and only then is it ready.
pub fn ready(
    deps: DepsMut,
    ep: &mut Epoch,
    info: &MessageInfo,
    epoch: u64,
    objections: Vec<(String, u32)>,
) -> Result<Response, ContractError> {
    const ACTION: &str = "ready";
    nonpayable(info, ACTION)?;
    expect_phase(ep, ACTION, epoch, Phase::Objection)?;
    let sender = &info.sender;
    let set = records::load_validator_set(deps.storage, epoch)?;
    let seated = SEATED.may_load(deps.storage, epoch)?.unwrap_or_default();
    let index = match set.binary_search_by(|v| v.as_str().cmp(sender)) {
        Ok(i) if seated.binary_search(&(i as u16)).is_ok() => i as u16,
        _ => refuse!(ACTION, "{sender} has no round-0 seat in epoch {epoch}"),
    };
    if READY.has(deps.storage, (epoch, sender)) {
        refuse!(ACTION, "{sender} already sent ready for epoch {epoch}");
    }
    if objections.len() > MAX_OBJECTIONS_PER_READY {
        refuse!(
            ACTION,
            "a ready carries at most {MAX_OBJECTIONS_PER_READY} objections ({} given); send the rest in further ready messages",
            objections.len()
        );
    }
    if objections.windows(2).any(|w| w[0] >= w[1]) {
        refuse!(
            ACTION,
            "objections must be distinct and in ascending order of (host, segment)"
        );
    }
    // Further `ready`s continue after the objections already recorded; one sent again (a node
    // resuming after a crash) repeats objections already recorded, which are skipped.
    let mut so_far = READY_SO_FAR
        .may_load(deps.storage, (epoch, sender))?
        .unwrap_or_default();
    let last_page = objections.len() < MAX_OBJECTIONS_PER_READY;
    let mut fresh = Vec::with_capacity(objections.len());
    for o in objections {
        if so_far.binary_search(&o).is_ok() {
            continue;
        }
        if so_far.last().map_or(false, |last| &o < last) {
            refuse!(
                ACTION,
                "objection on host {} segment {} comes before those of {sender}'s earlier ready messages",
                o.0,
                o.1
            );
        }
        fresh.push(o);
    }
    let mut i = 0;
    while i < fresh.len() {
        let host = fresh[i].0.clone();
        if host.len() > MAX_ADDRESS_LEN {
            refuse!(
                ACTION,
                "an objection's host is longer than {MAX_ADDRESS_LEN} bytes"
            );
        }
        let mut list = ASSIGNMENTS
            .may_load(deps.storage, (epoch, host.as_str()))?
            .unwrap_or_default();
        while i < fresh.len() && fresh[i].0 == host {
            let segment = fresh[i].1;
            let committed = VERDICT_COMMITS.has(deps.storage, (epoch, &host, segment, sender));
            match list.iter_mut().find(|a| a.segment == segment) {
                Some(a) if a.validators.contains(&index) && committed => {
                    if let Err(at) = a.objectors.binary_search(&index) {
                        a.objectors.insert(at, index);
                    }
                }
                _ => refuse!(
                    ACTION,
                    "{sender} holds no committed round-0 seat on host {host} segment {segment} of epoch {epoch}"
                ),
            }
            i += 1;
        }
        ASSIGNMENTS.save(deps.storage, (epoch, host.as_str()), &list);
    }
    let count = fresh.len();
    so_far.extend(fresh);
    if last_page {
        READY_SO_FAR.remove(deps.storage, (epoch, sender));
        READY.save(deps.storage, (epoch, sender), &so_far);
        ep.counts_mut().ready += 1;
    } else {
        READY_SO_FAR.save(deps.storage, (epoch, sender), &so_far);
    }
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("validator", sender)
        .add_attribute("objections", count)
        .add_attribute("last", last_page))
}

pub fn reveal_traps(
    deps: DepsMut,
    config: &Config,
    ep: &mut Epoch,
    info: &MessageInfo,
    epoch: u64,
    segments: Vec<u32>,
    salt: String,
) -> Result<Response, ContractError> {
    const ACTION: &str = "reveal_traps";
    nonpayable(info, ACTION)?;
    expect_phase(ep, ACTION, epoch, Phase::Objection)?;
    let sender = &info.sender;
    participant_as(&deps, ep, ACTION, sender, Role::Host)?;
    let commitment = match COMMITMENTS.may_load(deps.storage, (epoch, sender))? {
        Some(c) => c,
        None => refuse!(ACTION, "{sender} did not commit in epoch {epoch}"),
    };
    if !ASSIGNMENTS.has(deps.storage, (epoch, sender)) {
        refuse!(ACTION, "{sender} has no challenges in epoch {epoch}");
    }
    if TRAPS.has(deps.storage, (epoch, sender)) {
        refuse!(
            ACTION,
            "{sender} already opened its traps for epoch {epoch}"
        );
    }
    if segments.len() > config.segments as usize {
        refuse!(
            ACTION,
            "{} trap segments, but the run has {} segments per epoch",
            segments.len(),
            config.segments
        );
    }
    if segments.windows(2).any(|w| w[0] >= w[1]) {
        refuse!(
            ACTION,
            "trap segments must be distinct and in ascending order"
        );
    }
    if let Some(last) = segments.last() {
        if *last >= config.segments {
            refuse!(
                ACTION,
                "trap segment {last} is not a segment (the run has {} per epoch)",
                config.segments
            );
        }
    }
    let salt_bytes = parse_digest(ACTION, "salt", &salt)?;
    if hex(&trap_commitment(sender, epoch, &segments, &salt_bytes)) != commitment.trap_commit {
        refuse!(
            ACTION,
            "the opening does not match the trap commitment {sender} made in epoch {epoch}"
        );
    }
    let count = segments.len();
    TRAPS.save(deps.storage, (epoch, sender), &segments);
    ep.counts_mut().traps_opened += 1;
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("host", sender)
        .add_attribute("traps", count))
}

/// An accepted host's proposal of θ_{e+1}.
pub struct ModelProposal {
    pub epoch: u64,
    pub model_hash: String,
    pub val_loss_micro: u64,
    /// The accepted hosts whose Δ no holder served the proposer (sorted, distinct).
    pub excluded: Vec<String>,
}

/// Check a proposal's `excluded` list: strictly ascending (sorted, no duplicates), at most the
/// epoch's other accepted hosts, each an accepted host of the epoch other than the proposer.
fn check_excluded(
    deps: &DepsMut,
    config: &Config,
    ep: &Epoch,
    sender: &str,
    excluded: &[String],
) -> Result<(), ContractError> {
    const ACTION: &str = "propose_model";
    let epoch = ep.number();
    let others = ep.counts.accepted.saturating_sub(1) as usize;
    let bound = others.min(config.phases.max_hosts as usize);
    if excluded.len() > bound {
        refuse!(
            ACTION,
            "excluded lists {} hosts, but epoch {epoch} has only {others} other accepted hosts",
            excluded.len()
        );
    }
    if excluded.windows(2).any(|w| w[0] >= w[1]) {
        refuse!(
            ACTION,
            "excluded hosts must be distinct and in ascending order"
        );
    }
    for host in excluded {
        if host.len() > MAX_ADDRESS_LEN {
            refuse!(
                ACTION,
                "excluded host is longer than {MAX_ADDRESS_LEN} bytes"
            );
        }
        if host == sender {
            refuse!(ACTION, "{sender} cannot exclude its own Δ");
        }
        let accepted = PARTICIPANTS.has(deps.storage, (epoch, host))
            && records::load_payout(deps.storage, epoch, host)?.outcome == Outcome::Accepted;
        if !accepted {
            refuse!(
                ACTION,
                "excluded host {host} is not an accepted host of epoch {epoch}"
            );
        }
    }
    Ok(())
}

pub fn propose_model(
    deps: DepsMut,
    config: &Config,
    ep: &mut Epoch,
    info: &MessageInfo,
    msg: ModelProposal,
) -> Result<Response, ContractError> {
    const ACTION: &str = "propose_model";
    let ModelProposal {
        epoch,
        model_hash,
        val_loss_micro,
        excluded,
    } = msg;
    nonpayable(info, ACTION)?;
    expect_phase(ep, ACTION, epoch, Phase::Propose)?;
    if let Some(old) = state::SETTLING.may_load(deps.storage)? {
        if old < epoch {
            refuse!(
                ACTION,
                "epoch {old} is still settling: θ_{} builds on its settled model",
                epoch + 1
            );
        }
    }
    let sender = &info.sender;
    let accepted = match PARTICIPANTS.may_load(deps.storage, (epoch, sender))? {
        Some(p) if p.role == Role::Host => {
            let outcome = records::load_payout(deps.storage, epoch, sender)?.outcome;
            (outcome == Outcome::Accepted).then(|| p)
        }
        _ => None,
    };
    let participant = match accepted {
        Some(p) => p,
        None => refuse!(ACTION, "{sender} is not an accepted host of epoch {epoch}"),
    };
    if PROPOSALS.may_load(deps.storage, (epoch, sender))?.is_some() {
        refuse!(
            ACTION,
            "{sender} already proposed a model for epoch {epoch}"
        );
    }
    hex_field(ACTION, "model_hash", &model_hash)?;
    if val_loss_micro > MAX_LOSS_MICRO {
        refuse!(
            ACTION,
            "val_loss_micro {val_loss_micro} exceeds the bound {MAX_LOSS_MICRO}"
        );
    }
    check_excluded(&deps, config, ep, sender, &excluded)?;
    // Each exclusion is backed, like the hash, by the proposer's accepted stake (its weight: a
    // slash of the epoch before may have capped it), counted per model hash: only the agreed
    // hash's backers settle an exclusion (`exclusions_page`).
    for host in excluded.iter() {
        let key = (epoch, model_hash.as_str(), host.as_str());
        let stake = EXCLUSIONS
            .may_load(deps.storage, key)?
            .unwrap_or_default()
            .checked_add(participant.weight())?;
        EXCLUSIONS.save(deps.storage, key, &stake);
    }
    let count = excluded.len();
    PROPOSALS.save(
        deps.storage,
        (epoch, sender),
        &Proposal {
            model_hash: model_hash.clone(),
            val_loss_micro,
            excluded,
        },
    );
    let backing = BACKING
        .may_load(deps.storage, (epoch, &model_hash))?
        .unwrap_or_default()
        .checked_add(participant.weight())?;
    BACKING.save(deps.storage, (epoch, &model_hash), &backing);
    let counts = ep.counts_mut();
    counts.proposed += 1;
    if backing > counts.best_stake {
        counts.best_stake = backing;
        counts.best_hash = Some(model_hash.clone());
    }
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("host", sender)
        .add_attribute("model_hash", &model_hash)
        .add_attribute("backing", backing)
        .add_attribute("excluded", count))
}

/// `advance {}`: succeeds only if the auto-advance of this very transaction closed something.
/// `held_by`: the older epoch a pipelined run's phase waits for (named in the refusal).
pub fn advance(
    ep: &Epoch,
    info: &MessageInfo,
    height: u64,
    transitions: u32,
    held_by: Option<u64>,
) -> Result<Response, ContractError> {
    nonpayable(info, "advance")?;
    if let (0, Some(old)) = (transitions, held_by) {
        refuse!(
            "advance",
            "nothing is due: epoch {} is in phase {}, held until epoch {old} settles",
            ep.number(),
            ep.header.phase.as_str()
        );
    }
    if transitions == 0 {
        return Err(ContractError::NothingDue {
            epoch: ep.number(),
            phase: ep.header.phase.as_str(),
            deadline: ep.header.phase_deadline,
            height,
        });
    }
    Ok(Response::new()
        .add_attribute("action", "advance")
        .add_attribute("transitions", transitions)
        .add_attribute("epoch", ep.number())
        .add_attribute("phase", ep.header.phase.as_str())
        .add_attribute("deadline", ep.header.phase_deadline))
}

#[cfg(test)]
mod tests {
    use super::is_canonical_decimal;

    #[test]
    fn decimals_compare_as_numbers() {
        use super::cmp_decimal;
        use std::cmp::Ordering::*;
        assert_eq!(cmp_decimal("0.00001", "0.001"), Less);
        assert_eq!(cmp_decimal("0.5", "0.49"), Greater);
        assert_eq!(cmp_decimal("10", "9.99"), Greater);
        assert_eq!(cmp_decimal("1.5", "1.5"), Equal);
        assert_eq!(cmp_decimal("1", "1.0001"), Less);
    }

    #[test]
    fn decimals() {
        for ok in ["0", "1", "0.5", "12.0001", "1000000000"] {
            assert!(is_canonical_decimal(ok), "{ok}");
        }
        for bad in [
            "", "-1", "01", "1.", ".5", "1.50", "1e3", "+1", "0.0", "1,5",
        ] {
            assert!(!is_canonical_decimal(bad), "{bad}");
        }
    }
}
