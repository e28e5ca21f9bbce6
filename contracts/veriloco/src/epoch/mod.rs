//! The epoch's phase machine: phases by block-height deadlines, early close, auto-advance
//! (`docs/contract.md`, "The epoch"). The work done at a phase's close and the messages of each
//! phase live beside it:
//!
//! * [`handlers`]   — join, commit, reveal, verdict, propose_model, advance (one phase each);
//! * [`challenges`] — the close of `reveal`: the seed, absent / no-reveal outcomes, assignments;
//! * [`tally`]      — challenge majorities and outcomes from the stored votes (finalize and the
//!                    report share it);
//! * [`finalize`]   — the close of `verify`: outcomes, slashes, catcher shares, rewards, payments.
//!
//! Every execute runs [`advance`] before and after its own handler: while the current phase's
//! deadline has passed (`height >= phase_deadline`) or everyone it waits for has acted, the phase
//! is closed. A phase closed by its deadline is closed *at* the deadline: the next phase's
//! deadline counts from there, however late the transaction that notices it, so the schedule
//! does not depend on when someone happens to send one. A phase closed early counts from the
//! height of the message that completed it.
//!
//! Adding a phase: a [`Phase`] variant, its row in [`phase_complete`] (what it waits for) and in
//! [`advance`] (what its close does and which phase follows), its length in `spec::Phases`, and
//! its message in [`handlers`] (checked with `handlers::expect_phase`).

pub mod challenges;
pub mod finalize;
pub mod handlers;
pub mod tally;

use crate::beacon;
use crate::deps::Storage;
use crate::error::ContractError;
use crate::hashing::{digest_from_hex, hex};
use crate::records::{self, Counts, EpochHeader, Phase, COUNTS, HEADERS};
use crate::state::{self, Config, CURRENT_EPOCH};
use crate::types::{Event, Response, Uint128};

/// The current epoch's header and counters, loaded once per execute and saved once at its end.
pub struct Epoch {
    pub header: EpochHeader,
    pub counts: Counts,
    header_dirty: bool,
    counts_dirty: bool,
}

impl Epoch {
    pub fn load_current(storage: &dyn Storage) -> Result<Epoch, ContractError> {
        let e = state::current_epoch(storage)?;
        let header = HEADERS.load_or(storage, e, || {
            ContractError::NotInstantiated(format!("epoch {e}"))
        })?;
        Ok(Epoch {
            header,
            counts: records::load_counts(storage, e)?,
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

    /// Write what changed (and only that).
    pub fn save(&self, storage: &mut dyn Storage) {
        if self.header_dirty {
            HEADERS.save(storage, self.header.epoch, &self.header);
        }
        if self.counts_dirty {
            COUNTS.save(storage, self.header.epoch, &self.counts);
        }
    }
}

/// A header for epoch `epoch` opening at `at` in `join`, until `until`.
fn fresh_header(
    epoch: u64,
    at: u64,
    until: u64,
    model_hash: String,
    prev_seed: String,
) -> EpochHeader {
    EpochHeader {
        epoch,
        phase: Phase::Join,
        phase_deadline: until,
        started_at: at,
        model_hash,
        prev_seed,
        seed: None,
        next_model_hash: None,
        agreed: None,
        accepted_stake: Uint128::zero(),
        slashed_total: Uint128::zero(),
        to_treasury: Uint128::zero(),
        to_catchers: Uint128::zero(),
        rewards_total: Uint128::zero(),
    }
}

/// Epoch 0, opened at instantiation: θ_0 from the instantiate message, the genesis seed as its
/// previous seed, in `join` until `height + join_blocks`.
pub fn open_first(
    storage: &mut dyn Storage,
    config: &Config,
    height: u64,
) -> Result<(), ContractError> {
    let run_id = run_id_bytes(config)?;
    let until = deadline(height, config.phases.join_blocks)?;
    let header = fresh_header(
        0,
        height,
        until,
        config.initial_model_hash.clone(),
        hex(&beacon::genesis_seed(&run_id)),
    );
    CURRENT_EPOCH.save(storage, &0);
    Epoch::open(header).save(storage);
    Ok(())
}

pub fn run_id_bytes(config: &Config) -> Result<[u8; 32], ContractError> {
    digest_from_hex(&config.run_id)
        .ok_or_else(|| ContractError::Corrupt("corrupt config: run_id".into()))
}

fn deadline(from: u64, blocks: u64) -> Result<u64, ContractError> {
    from.checked_add(blocks)
        .ok_or(ContractError::CounterOverflow(
            "phase deadline overflows u64",
        ))
}

fn phase_event(epoch: u64, phase: Phase, at: u64, deadline: u64) -> Event {
    Event::new("phase")
        .add_attribute("epoch", epoch)
        .add_attribute("phase", phase.as_str())
        .add_attribute("at", at)
        .add_attribute("deadline", deadline)
}

/// Move the current epoch to `phase` at height `at`, closing at `at + blocks`.
fn enter(
    ep: &mut Epoch,
    phase: Phase,
    at: u64,
    blocks: u64,
    out: &mut Vec<Event>,
) -> Result<(), ContractError> {
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
fn phase_complete(
    storage: &dyn Storage,
    config: &Config,
    ep: &Epoch,
) -> Result<bool, ContractError> {
    let c = &ep.counts;
    Ok(match ep.header.phase {
        Phase::Join => {
            if !minimums_met(config, c) {
                return Ok(false);
            }
            let eligible = state::load_eligible(storage)?;
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
pub fn advance(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    height: u64,
    out: &mut Response,
) -> Result<u32, ContractError> {
    let mut transitions = 0u32;
    // The height at which this pass entered the current phase, if it did.
    let mut entered: Option<u64> = None;
    loop {
        let due = height >= ep.header.phase_deadline;
        let complete = phase_complete(storage, config, ep)?;
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
                    enter(
                        ep,
                        Phase::Train,
                        at,
                        config.phases.train_blocks,
                        &mut out.events,
                    )?;
                } else {
                    extend_join(config, ep, height, out)?;
                }
            }
            Phase::Train => enter(
                ep,
                Phase::Reveal,
                at,
                config.phases.reveal_blocks,
                &mut out.events,
            )?,
            Phase::Reveal => {
                challenges::close_reveal(storage, config, ep, at, out)?;
                if config.verification.enabled {
                    enter(
                        ep,
                        Phase::Verify,
                        at,
                        config.phases.verify_blocks,
                        &mut out.events,
                    )?;
                } else {
                    finalize_and_continue(storage, config, ep, at, out)?;
                }
            }
            Phase::Verify => finalize_and_continue(storage, config, ep, at, out)?,
            Phase::Propose => {
                let agreed = agreed_hash(&ep.header, &ep.counts);
                close_epoch(storage, config, ep, at, agreed, out)?;
            }
            Phase::Closed => {
                return Err(ContractError::Corrupt(format!(
                    "corrupt state: the current epoch {} is closed",
                    ep.number()
                )))
            }
        }
    }
}

/// Not enough participants: extend the join phase by whole join periods until its deadline lies
/// ahead of `height` again.
fn extend_join(
    config: &Config,
    ep: &mut Epoch,
    height: u64,
    out: &mut Response,
) -> Result<(), ContractError> {
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
    Ok(())
}

fn finalize_and_continue(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    at: u64,
    out: &mut Response,
) -> Result<(), ContractError> {
    finalize::finalize(storage, config, ep, at, out)?;
    if ep.counts.accepted > 0 {
        enter(
            ep,
            Phase::Propose,
            at,
            config.phases.propose_blocks,
            &mut out.events,
        )
    } else {
        close_epoch(storage, config, ep, at, None, out)
    }
}

/// Close the current epoch at `at` with θ_{e+1} = `agreed` (or θ_e when None) and open the next
/// one in `join` at once, with prev_seed = seed_e.
fn close_epoch(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    at: u64,
    agreed: Option<String>,
    out: &mut Response,
) -> Result<(), ContractError> {
    let next_model = agreed
        .clone()
        .unwrap_or_else(|| ep.header.model_hash.clone());
    let seed = ep.header.seed.clone().ok_or_else(|| {
        ContractError::Corrupt("corrupt state: closing an epoch without a seed".into())
    })?;
    let epoch = ep.number();
    {
        let header = ep.header_mut();
        header.phase = Phase::Closed;
        header.phase_deadline = at;
        header.next_model_hash = Some(next_model.clone());
        header.agreed = Some(agreed.is_some());
    }
    ep.save(storage);
    out.events.push(
        Event::new("epoch")
            .add_attribute("epoch", epoch)
            .add_attribute("closed_at", at)
            .add_attribute("next_model_hash", &next_model)
            .add_attribute("agreed", agreed.is_some()),
    );
    let next = epoch
        .checked_add(1)
        .ok_or(ContractError::CounterOverflow("epoch counter overflows"))?;
    let until = deadline(at, config.phases.join_blocks)?;
    *ep = Epoch::open(fresh_header(next, at, until, next_model, seed));
    CURRENT_EPOCH.save(storage, &next);
    out.events.push(phase_event(next, Phase::Join, at, until));
    Ok(())
}
