//! Epochs: phases by block-height deadlines, early close, auto-advance, and the messages of the
//! join, train, reveal and propose phases (`docs/contract.md`, "The epoch").
//!
//! Every execute runs [`advance`] before and after its own handler: while the current phase's
//! deadline has passed (`height >= phase_deadline`) or everyone it waits for has acted, the phase
//! is closed. A phase closed by its deadline is closed *at* the deadline: the next phase's
//! deadline counts from there, however late the transaction that notices it, so the schedule
//! does not depend on when someone happens to send one. A phase closed early counts from the
//! height of the message that completed it.

use crate::beacon;
use crate::error::{fail, ContractError};
use crate::funds::nonpayable;
use crate::hashing::{digest_from_hex, hex, is_hex_digest};
use crate::records::{
    self, Commitment, Counts, EpochHeader, Outcome, Participant, Phase, Proposal,
};
use crate::settle;
use crate::state::{self, Config, Role};
use crate::types::{Event, MessageInfo, Response, Uint128};

/// The current epoch's header and counters, loaded once per execute and saved once at its end.
pub struct Epoch {
    pub header: EpochHeader,
    pub counts: Counts,
    header_dirty: bool,
    counts_dirty: bool,
}

impl Epoch {
    pub fn load_current() -> Result<Epoch, ContractError> {
        let e = state::current_epoch()?;
        let header = records::load_header(e)?
            .ok_or_else(|| ContractError::new(format!("epoch {e} missing: contract not instantiated")))?;
        Ok(Epoch {
            header,
            counts: records::load_counts(e)?,
            header_dirty: false,
            counts_dirty: false,
        })
    }

    /// A new epoch (not yet saved).
    fn open(header: EpochHeader) -> Epoch {
        Epoch {
            header,
            counts: Counts::default(),
            header_dirty: true,
            counts_dirty: true,
        }
    }

    pub fn number(&self) -> u64 {
        self.header.epoch
    }

    pub fn header_mut(&mut self) -> &mut EpochHeader {
        self.header_dirty = true;
        &mut self.header
    }

    pub fn counts_mut(&mut self) -> &mut Counts {
        self.counts_dirty = true;
        &mut self.counts
    }

    pub fn save(&self) {
        if self.header_dirty {
            records::save_header(&self.header);
        }
        if self.counts_dirty {
            records::save_counts(self.header.epoch, &self.counts);
        }
    }
}

/// Epoch 0, opened at instantiation: θ_0 from the instantiate message, the genesis seed as its
/// previous seed, in `join` until `height + join_blocks`.
pub fn open_first(config: &Config, height: u64) -> Result<(), ContractError> {
    let run_id = run_id_bytes(config)?;
    let header = EpochHeader {
        epoch: 0,
        phase: Phase::Join,
        phase_deadline: deadline(height, config.phases.join_blocks)?,
        started_at: height,
        model_hash: config.initial_model_hash.clone(),
        prev_seed: hex(&beacon::genesis_seed(&run_id)),
        seed: None,
        next_model_hash: None,
        agreed: None,
        accepted_stake: Uint128::zero(),
        slashed_total: Uint128::zero(),
        to_treasury: Uint128::zero(),
        to_catchers: Uint128::zero(),
        rewards_total: Uint128::zero(),
    };
    state::save_current_epoch(0);
    Epoch::open(header).save();
    Ok(())
}

pub fn run_id_bytes(config: &Config) -> Result<[u8; 32], ContractError> {
    digest_from_hex(&config.run_id).ok_or_else(|| ContractError::new("corrupt config: run_id"))
}

fn deadline(from: u64, blocks: u64) -> Result<u64, ContractError> {
    from.checked_add(blocks)
        .ok_or_else(|| ContractError::new("phase deadline overflows u64"))
}

fn phase_event(epoch: u64, phase: Phase, at: u64, deadline: u64) -> Event {
    Event::new("phase")
        .add_attribute("epoch", epoch)
        .add_attribute("phase", phase.as_str())
        .add_attribute("at", at)
        .add_attribute("deadline", deadline)
}

/// Move the current epoch to `phase` at height `at`, closing at `at + blocks`.
pub fn enter(ep: &mut Epoch, phase: Phase, at: u64, blocks: u64, out: &mut Vec<Event>) -> Result<(), ContractError> {
    let until = deadline(at, blocks)?;
    let header = ep.header_mut();
    header.phase = phase;
    header.phase_deadline = until;
    out.push(phase_event(header.epoch, phase, at, until));
    Ok(())
}

/// Did the join phase gather the run's minimums?
fn minimums_met(config: &Config, counts: &Counts) -> bool {
    counts.hosts >= config.phases.min_hosts && counts.validators >= config.phases.min_validators
}

/// Has everyone the current phase waits for acted?
fn phase_complete(config: &Config, ep: &Epoch) -> Result<bool, ContractError> {
    let c = &ep.counts;
    Ok(match ep.header.phase {
        Phase::Join => {
            if !minimums_met(config, c) {
                return Ok(false);
            }
            let eligible = state::load_eligible()?;
            c.hosts >= eligible.hosts.min(config.phases.max_hosts)
                && c.validators >= eligible.validators.min(config.phases.max_validators)
        }
        Phase::Train => c.committed >= c.hosts,
        Phase::Reveal => c.revealed >= c.hosts + c.validators,
        Phase::Verify => c.votes_posted >= c.votes_expected,
        Phase::Propose => agreed_hash(&ep.header, c).is_some() || c.proposed >= c.accepted,
        Phase::Closed => false,
    })
}

/// The proposed hash backed by more than 2/3 of the accepted stake, if any.
fn agreed_hash(header: &EpochHeader, counts: &Counts) -> Option<String> {
    let total = header.accepted_stake.0;
    // best * 3 > total * 2  <=>  best > floor(2 * total / 3), computed without overflow.
    let two_thirds = total / 3 * 2 + total % 3 * 2 / 3;
    if total > 0 && counts.best_stake.0 > two_thirds {
        counts.best_hash.clone()
    } else {
        None
    }
}

/// Close every phase that is due (deadline passed) or complete (everyone acted); returns how
/// many transitions were made. Events and bank messages go into `out`.
pub fn advance(config: &Config, ep: &mut Epoch, height: u64, out: &mut Response) -> Result<u32, ContractError> {
    let mut transitions = 0u32;
    // The height at which this pass entered the current phase, if it did.
    let mut entered: Option<u64> = None;
    loop {
        let due = height >= ep.header.phase_deadline;
        let complete = phase_complete(config, ep)?;
        if !due && !complete {
            return Ok(transitions);
        }
        // When the phase closes: a phase with nobody to wait for closes where it began; one past
        // its deadline closes at the deadline; one completed by this message closes now.
        let at = match entered {
            Some(start) if complete => start,
            _ if due => ep.header.phase_deadline,
            _ => height,
        };
        transitions += 1;
        entered = Some(at);
        match ep.header.phase {
            Phase::Join => {
                if minimums_met(config, &ep.counts) {
                    enter(ep, Phase::Train, at, config.phases.train_blocks, &mut out.events)?;
                } else {
                    // Not enough participants: extend by whole join periods until the deadline
                    // lies ahead again.
                    let blocks = config.phases.join_blocks;
                    let old = ep.header.phase_deadline;
                    let periods = (height - old) / blocks + 1;
                    let until = deadline(old, periods.saturating_mul(blocks))?;
                    let epoch = ep.number();
                    ep.header_mut().phase_deadline = until;
                    out.events.push(
                        phase_event(epoch, Phase::Join, old, until)
                            .add_attribute("extended", "true")
                            .add_attribute("hosts", ep.counts.hosts)
                            .add_attribute("validators", ep.counts.validators),
                    );
                }
            }
            Phase::Train => enter(ep, Phase::Reveal, at, config.phases.reveal_blocks, &mut out.events)?,
            Phase::Reveal => {
                settle::close_reveal(config, ep, at, out)?;
                if config.verification.enabled {
                    enter(ep, Phase::Verify, at, config.phases.verify_blocks, &mut out.events)?;
                } else {
                    finalize_and_continue(config, ep, at, out)?;
                }
            }
            Phase::Verify => finalize_and_continue(config, ep, at, out)?,
            Phase::Propose => {
                let agreed = agreed_hash(&ep.header, &ep.counts);
                close_epoch(config, ep, at, agreed, out)?;
            }
            Phase::Closed => fail!("corrupt state: the current epoch {} is closed", ep.number()),
        }
    }
}

fn finalize_and_continue(config: &Config, ep: &mut Epoch, at: u64, out: &mut Response) -> Result<(), ContractError> {
    settle::finalize(config, ep, at, out)?;
    if ep.counts.accepted > 0 {
        enter(ep, Phase::Propose, at, config.phases.propose_blocks, &mut out.events)
    } else {
        close_epoch(config, ep, at, None, out)
    }
}

/// Close the current epoch at `at` with θ_{e+1} = `agreed` (or θ_e when None) and open the next
/// one in `join` at once, with prev_seed = seed_e.
fn close_epoch(
    config: &Config,
    ep: &mut Epoch,
    at: u64,
    agreed: Option<String>,
    out: &mut Response,
) -> Result<(), ContractError> {
    let next_model = agreed.clone().unwrap_or_else(|| ep.header.model_hash.clone());
    let seed = ep
        .header
        .seed
        .clone()
        .ok_or_else(|| ContractError::new("corrupt state: closing an epoch without a seed"))?;
    let epoch = ep.number();
    {
        let header = ep.header_mut();
        header.phase = Phase::Closed;
        header.phase_deadline = at;
        header.next_model_hash = Some(next_model.clone());
        header.agreed = Some(agreed.is_some());
    }
    ep.save();
    out.events.push(
        Event::new("epoch")
            .add_attribute("epoch", epoch)
            .add_attribute("closed_at", at)
            .add_attribute("next_model_hash", &next_model)
            .add_attribute("agreed", agreed.is_some()),
    );
    let next = epoch
        .checked_add(1)
        .ok_or_else(|| ContractError::new("epoch counter overflows"))?;
    let until = deadline(at, config.phases.join_blocks)?;
    *ep = Epoch::open(EpochHeader {
        epoch: next,
        phase: Phase::Join,
        phase_deadline: until,
        started_at: at,
        model_hash: next_model,
        prev_seed: seed,
        seed: None,
        next_model_hash: None,
        agreed: None,
        accepted_stake: Uint128::zero(),
        slashed_total: Uint128::zero(),
        to_treasury: Uint128::zero(),
        to_catchers: Uint128::zero(),
        rewards_total: Uint128::zero(),
    });
    state::save_current_epoch(next);
    out.events.push(phase_event(next, Phase::Join, at, until));
    Ok(())
}

// -- checks shared by the epoch messages ---------------------------------------------------------

/// `epoch` must be the current one and in `phase`.
pub fn expect_phase(ep: &Epoch, action: &str, epoch: u64, phase: Phase) -> Result<(), ContractError> {
    let current = ep.number();
    if epoch < current {
        fail!("{action}: epoch {epoch} is closed; the current epoch is {current}");
    }
    if epoch > current {
        fail!("{action}: epoch {epoch} has not started; the current epoch is {current}");
    }
    if ep.header.phase != phase {
        fail!(
            "{action}: epoch {current} is in phase {}; {action} is accepted in phase {} only",
            ep.header.phase.as_str(),
            phase.as_str()
        );
    }
    Ok(())
}

pub fn hex_field(action: &str, field: &str, value: &str) -> Result<(), ContractError> {
    if !is_hex_digest(value) {
        fail!("{action}: {field} must be 64 lowercase hex characters, got {value:?}");
    }
    Ok(())
}

/// The sender's participant record in the current epoch, which must be of `role`.
fn participant_as(ep: &Epoch, action: &str, sender: &str, role: Role) -> Result<Participant, ContractError> {
    let epoch = ep.number();
    match records::load_participant(epoch, sender)? {
        None => fail!("{action}: {sender} did not join epoch {epoch}"),
        Some(p) if p.role != role => fail!(
            "{action}: {sender} joined epoch {epoch} as a {}; only {}s may {action}",
            p.role.as_str(),
            role.as_str()
        ),
        Some(p) => Ok(p),
    }
}

// -- messages --------------------------------------------------------------------------------------

pub fn join(
    config: &Config,
    ep: &mut Epoch,
    info: &MessageInfo,
    epoch: u64,
    beacon_commit: String,
) -> Result<Response, ContractError> {
    const ACTION: &str = "join";
    nonpayable(info, ACTION)?;
    expect_phase(ep, ACTION, epoch, Phase::Join)?;
    hex_field(ACTION, "beacon_commit", &beacon_commit)?;
    let sender = &info.sender;
    let member = match state::load_member(sender)? {
        Some(m) => m,
        None => fail!("{ACTION}: {sender} is not a member; bond first"),
    };
    let role = member.role;
    let minimum = config.min_stake(role);
    if !config.is_eligible(role, member.bonded) {
        fail!(
            "{ACTION}: bonded stake {} is below the minimum {} for a {}",
            member.bonded,
            minimum.max(Uint128(1)),
            role.as_str()
        );
    }
    if records::load_participant(epoch, sender)?.is_some() {
        fail!("{ACTION}: {sender} already joined epoch {epoch}");
    }
    let (joined, cap) = match role {
        Role::Host => (ep.counts.hosts, config.phases.max_hosts),
        Role::Validator => (ep.counts.validators, config.phases.max_validators),
    };
    if joined >= cap {
        fail!(
            "{ACTION}: epoch {epoch} is full: it admits at most {cap} {}s",
            role.as_str()
        );
    }
    records::save_participant(
        epoch,
        sender,
        &Participant {
            role,
            stake: member.bonded,
            beacon: beacon_commit,
        },
    );
    let counts = ep.counts_mut();
    match role {
        Role::Host => counts.hosts += 1,
        Role::Validator => counts.validators += 1,
    }
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("member", sender)
        .add_attribute("role", role.as_str())
        .add_attribute("stake", member.bonded))
}

pub fn commit(
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
    participant_as(ep, ACTION, sender, Role::Host)?;
    if records::load_commitment(epoch, sender)?.is_some() {
        fail!("{ACTION}: {sender} already committed in epoch {epoch}");
    }
    hex_field(ACTION, "checkpoint_root", &commitment.checkpoint_root)?;
    hex_field(ACTION, "delta_hash", &commitment.delta_hash)?;
    hex_field(ACTION, "loss_digest", &commitment.loss_digest)?;
    if commitment.segments != config.segments {
        fail!(
            "{ACTION}: segments is {}, but the run has {} segments per epoch",
            commitment.segments,
            config.segments
        );
    }
    records::save_commitment(epoch, sender, &commitment);
    ep.counts_mut().committed += 1;
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("host", sender)
        .add_attribute("checkpoint_root", &commitment.checkpoint_root)
        .add_attribute("delta_hash", &commitment.delta_hash))
}

pub fn reveal(ep: &mut Epoch, info: &MessageInfo, epoch: u64, secret: String) -> Result<Response, ContractError> {
    const ACTION: &str = "reveal";
    nonpayable(info, ACTION)?;
    expect_phase(ep, ACTION, epoch, Phase::Reveal)?;
    let sender = &info.sender;
    let participant = match records::load_participant(epoch, sender)? {
        Some(p) => p,
        None => fail!("{ACTION}: {sender} did not join epoch {epoch}"),
    };
    if records::has_revealed(epoch, sender) {
        fail!("{ACTION}: {sender} already revealed for epoch {epoch}");
    }
    let secret_bytes = match digest_from_hex(&secret) {
        Some(bytes) => bytes,
        None => fail!("{ACTION}: secret must be 64 lowercase hex characters (32 bytes)"),
    };
    if hex(&beacon::commitment(sender, epoch, &secret_bytes)) != participant.beacon {
        fail!(
            "{ACTION}: the secret does not match the beacon commitment {sender} made when joining epoch {epoch}"
        );
    }
    records::save_reveal(epoch, sender, &secret_bytes);
    ep.counts_mut().revealed += 1;
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("member", sender))
}

pub fn propose_model(
    ep: &mut Epoch,
    info: &MessageInfo,
    epoch: u64,
    model_hash: String,
    val_loss_micro: u64,
) -> Result<Response, ContractError> {
    const ACTION: &str = "propose_model";
    nonpayable(info, ACTION)?;
    expect_phase(ep, ACTION, epoch, Phase::Propose)?;
    let sender = &info.sender;
    let participant = match records::load_participant(epoch, sender)? {
        Some(p) if p.role == Role::Host && records::load_payout(epoch, sender)?.outcome == Outcome::Accepted => p,
        _ => fail!("{ACTION}: {sender} is not an accepted host of epoch {epoch}"),
    };
    if records::load_proposal(epoch, sender)?.is_some() {
        fail!("{ACTION}: {sender} already proposed a model for epoch {epoch}");
    }
    hex_field(ACTION, "model_hash", &model_hash)?;
    records::save_proposal(
        epoch,
        sender,
        &Proposal {
            model_hash: model_hash.clone(),
            val_loss_micro,
        },
    );
    let tally = records::load_tally(epoch, &model_hash)?.checked_add(participant.stake)?;
    records::save_tally(epoch, &model_hash, tally);
    let counts = ep.counts_mut();
    counts.proposed += 1;
    if tally > counts.best_stake {
        counts.best_stake = tally;
        counts.best_hash = Some(model_hash.clone());
    }
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("host", sender)
        .add_attribute("model_hash", &model_hash)
        .add_attribute("backing", tally))
}

/// `advance {}`: succeeds only if the auto-advance of this very transaction closed something.
pub fn advance_msg(ep: &Epoch, info: &MessageInfo, height: u64, transitions: u32) -> Result<Response, ContractError> {
    nonpayable(info, "advance")?;
    if transitions == 0 {
        fail!(
            "advance: nothing is due: epoch {} is in phase {} until height {} (now {height})",
            ep.number(),
            ep.header.phase.as_str(),
            ep.header.phase_deadline
        );
    }
    Ok(Response::new()
        .add_attribute("action", "advance")
        .add_attribute("transitions", transitions)
        .add_attribute("epoch", ep.number())
        .add_attribute("phase", ep.header.phase.as_str())
        .add_attribute("deadline", ep.header.phase_deadline))
}
