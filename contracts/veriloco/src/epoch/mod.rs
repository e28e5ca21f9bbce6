//! The epoch's phase machine: phases by block-height deadlines, early close, auto-advance
//! (`docs/contract.md`, "The epoch"). The work done at a phase's close and the messages of each
//! phase live beside it:
//!
//! * [`handlers`]   — join, commit, reveal, commit_verdict, ready, reveal_verdict, reveal_traps,
//!                    propose_model, advance;
//! * [`challenges`] — the close of `reveal`: the seed, absent / no-reveal outcomes, each host's
//!                    pickers and the challenges their secrets pick, with their round-0 seats;
//! * [`disputes`]   — the close of `objection` (which challenges are disputed) and the decisions:
//!                    undisputed challenges pass at the close of `verdict_reveal`, disputed ones
//!                    are decided by the stake of V at the close of `dispute_reveal`;
//! * [`tally`]      — outcomes and counts from the decisions and the stored votes (finalize and
//!                    the report share it);
//! * [`finalize`]   — after the last round: outcomes, slashes, catcher shares, rewards, payments.
//!
//! Closing `reveal`, closing a verdict round and finalizing walk every participant or challenged
//! host: they run **page by page** (a
//! [`Closing`] with its stage and cursor in the epoch header). Each execute may process at most
//! `Config::settle_page` records (participants, or reveals for the seed) over all stages; when
//! its budget is spent the close goes on with the next transaction (any epoch message, or
//! `advance`). While a close runs, the phase keeps its name, its deadline is the height at which
//! the close began (so the phase reads as due and nodes send `advance`), and its own messages
//! are refused. The phase that follows opens at the height of the page that completed the close.
//!
//! Every execute runs [`advance`] before and after its own handler: when the current phase's
//! deadline has passed (`height >= phase_deadline`) or everyone it waits for has acted, the phase
//! is closed *at the height of that transaction*, and the next phase's window counts from there:
//! a phase never closes before its members had its whole window from the block at which it
//! actually opened, however long the chain idled before. So one transaction closes at most one
//! phase by its deadline; phases that have nobody to wait for close at once behind it.
//!
//! Adding a phase: a [`Phase`] variant, its row in [`phase_complete`] (what it waits for) and in
//! [`advance`] (what its close does and which phase follows), its length in `spec::Phases`, and
//! its message in [`handlers`] (checked with `handlers::expect_phase`).

pub mod challenges;
pub mod disputes;
pub mod finalize;
pub mod handlers;
pub mod pipeline;
pub mod tally;

use std::collections::BTreeMap;

use crate::beacon;
use crate::deps::Storage;
use crate::error::ContractError;
use crate::funds::bank_send;
use crate::hashing::{hex, stored_digest};
use crate::records::{self, Closing, Counts, EpochHeader, Phase, Stage, COUNTS, HEADERS};
use crate::state::{self, Config, CURRENT_EPOCH};
use crate::types::{Event, Response, SubMsg, Uint128};

/// The current epoch's header and counters, loaded once per execute and saved once at its end.
pub struct Epoch {
    pub header: EpochHeader,
    pub counts: Counts,
    header_dirty: bool,
    counts_dirty: bool,
    /// Records a paged close may still process in this execute (`Config::settle_page`).
    pub budget: u32,
    /// What this execute's pages pay, by recipient: one bank send each at the end of the
    /// transaction ([`Epoch::take_sends`]).
    sends: BTreeMap<String, Uint128>,
}

/// What one page of a paged close did: how many records it processed, whether its stage is done.
pub struct Page {
    pub records: u32,
    pub done: bool,
}

impl Epoch {
    pub fn load_current(storage: &dyn Storage) -> Result<Epoch, ContractError> {
        Epoch::load(storage, state::current_epoch(storage)?)
    }

    /// Epoch `e`, which must have opened.
    pub fn load(storage: &dyn Storage, e: u64) -> Result<Epoch, ContractError> {
        let header = HEADERS.load_or(storage, e, || {
            ContractError::NotInstantiated(format!("epoch {e}"))
        })?;
        Ok(Epoch {
            header,
            counts: records::load_counts(storage, e)?,
            header_dirty: false,
            counts_dirty: false,
            budget: 0,
            sends: BTreeMap::new(),
        })
    }

    /// A new epoch (not yet saved).
    fn open(header: EpochHeader) -> Epoch {
        Epoch {
            header,
            counts: Counts::default(),
            header_dirty: true,
            counts_dirty: true,
            budget: 0,
            sends: BTreeMap::new(),
        }
    }

    pub fn number(&self) -> u64 {
        self.header.epoch
    }

    pub fn header_mut(&mut self) -> &mut EpochHeader {
        self.header_dirty = true;
        &mut self.header
    }

    /// Add `amounts` to what this transaction pays.
    pub fn pay(&mut self, amounts: &BTreeMap<String, Uint128>) -> Result<(), ContractError> {
        for (to, amount) in amounts {
            let due = self.sends.entry(to.clone()).or_default();
            *due = due.checked_add(*amount)?;
        }
        Ok(())
    }

    /// One bank send per recipient of what this transaction's pages paid, in address order.
    pub fn take_sends(&mut self, denom: &str) -> Vec<SubMsg> {
        std::mem::take(&mut self.sends)
            .into_iter()
            .filter(|(_, amount)| !amount.is_zero())
            .map(|(to, amount)| SubMsg::never(bank_send(&to, denom, amount)))
            .collect()
    }

    /// The close in progress (a copy to update and put back).
    pub fn closing(&self) -> Result<Closing, ContractError> {
        self.header
            .closing
            .clone()
            .ok_or_else(|| ContractError::Corrupt("corrupt state: no close in progress".into()))
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
pub(crate) fn fresh_header(
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
        round: 0,
        extensions: 0,
        abandoned: false,
        accepted_stake: Uint128::zero(),
        slashed_total: Uint128::zero(),
        to_treasury: Uint128::zero(),
        to_catchers: Uint128::zero(),
        rewards_total: Uint128::zero(),
        closing: None,
        start_model_hash: None,
        settled_start: None,
        delayed_seed: None,
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
    stored_digest(Some(&config.run_id), "corrupt config: run_id")
}

pub(crate) fn deadline(from: u64, blocks: u64) -> Result<u64, ContractError> {
    from.checked_add(blocks)
        .ok_or(ContractError::CounterOverflow(
            "phase deadline overflows u64",
        ))
}

pub(crate) fn phase_event(epoch: u64, phase: Phase, at: u64, deadline: u64) -> Event {
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
    let mut event = phase_event(header.epoch, phase, at, until);
    if matches!(phase, Phase::Dispute | Phase::DisputeReveal) {
        // The final round (there is one).
        event = event.add_attribute("round", header.round);
    }
    out.push(event);
    Ok(())
}

/// Did the join phase gather the run's minimums?
pub(crate) fn minimums_met(config: &Config, counts: &Counts) -> bool {
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
            // Only once every eligible member joined: while more are eligible than the seats,
            // a larger stake may still take the smallest seat, so the phase runs to its deadline.
            let eligible = state::load_eligible(storage)?;
            c.hosts >= eligible.hosts && c.validators >= eligible.validators
        }
        Phase::Train => c.committed + c.sat_out >= c.hosts,
        Phase::Reveal => c.revealed >= c.hosts + c.validators,
        Phase::Delay => ep.header.delayed_seed.is_some(),
        Phase::Verify | Phase::Dispute => c.votes_posted >= c.votes_expected,
        Phase::Objection => c.ready >= c.seated && c.traps_opened >= c.challenged,
        Phase::VerdictReveal => c.votes_revealed >= c.votes_expected,
        Phase::DisputeReveal => c.votes_revealed >= c.votes_posted + c.carried,
        Phase::Propose => agreed_hash(&ep.header, c).is_some() || c.proposed >= c.accepted,
        Phase::Closed => false,
    })
}

/// Whether `stake` is more than 2/3 of `total` (a positive total).
pub(crate) fn over_two_thirds(stake: Uint128, total: Uint128) -> bool {
    let total = total.0;
    // stake * 3 > total * 2  <=>  stake > floor(2 * total / 3), computed without overflow.
    let two_thirds = total / 3 * 2 + total % 3 * 2 / 3;
    total > 0 && stake.0 > two_thirds
}

/// The proposed hash backed by more than 2/3 of the accepted stake, if any.
pub(crate) fn agreed_hash(header: &EpochHeader, counts: &Counts) -> Option<String> {
    if over_two_thirds(counts.best_stake, header.accepted_stake) {
        counts.best_hash.clone()
    } else {
        None
    }
}

/// Close every phase that is due (deadline passed) or complete (everyone acted) at `height`, and
/// run the close in progress with this execute's budget; returns how many phase closes began
/// (at least 1 when only a page of a close in progress ran). Events and bank messages go into `out`.
///
/// Each phase closes at `height` and the next one counts its window from `height`, so a phase
/// entered here is never due in the same pass (windows are at least one block): only phases
/// with nobody left to wait for close behind it.
pub fn advance(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    height: u64,
    out: &mut Response,
) -> Result<u32, ContractError> {
    let mut transitions = 0u32;
    loop {
        if ep.header.closing.is_some() {
            if ep.budget == 0 {
                return Ok(transitions);
            }
            // A phase close counts once, when it begins; a transaction that only runs a later
            // page of it counts one (it made progress: `advance` succeeds).
            transitions = transitions.max(1);
            match run_close(storage, config, ep, height, out)? {
                None => return Ok(transitions),
                Some(stage) => after_close(storage, config, ep, stage, height, out)?,
            }
            continue;
        }
        // A settling epoch that just closed (its successor is open already), or a held phase.
        if ep.header.phase == Phase::Closed || pipeline::held(storage, config, ep)? {
            return Ok(transitions);
        }
        // `delay` closes on its deadline only with a fallback window (`delay_blocks`); otherwise
        // only a valid VDF output ends it.
        let waits_for_output =
            ep.header.phase == Phase::Delay && config.verification.delay_blocks == 0;
        let due = height >= ep.header.phase_deadline && !waits_for_output;
        let complete = phase_complete(storage, config, ep)?;
        if !due && !complete {
            return Ok(transitions);
        }
        transitions += 1;
        close_phase(storage, config, ep, height, out)?;
    }
}

/// Close the current phase (due or complete) at `at`: enter the next one, or begin the paged
/// close that walks the epoch (`reveal`, a verdict round, `propose` with exclusions).
fn close_phase(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    at: u64,
    out: &mut Response,
) -> Result<(), ContractError> {
    let phases = &config.phases;
    let events = &mut out.events;
    match ep.header.phase {
        Phase::Join if minimums_met(config, &ep.counts) => {
            handlers::record_joined_validators(storage, ep.number())?;
            enter(ep, Phase::Train, at, phases.train_blocks, events)
        }
        Phase::Join if ep.header.extensions >= phases.max_join_extensions => {
            abandon_epoch(storage, config, ep, at, out)
        }
        Phase::Join => extend_join(config, ep, at, out),
        Phase::Train => enter(ep, Phase::Reveal, at, phases.reveal_blocks, events),
        // The closes that walk every participant start here and run page by page in `advance`.
        Phase::Reveal => {
            let closing = challenges::begin(config, ep.number())?;
            begin_close(ep, closing, at);
            Ok(())
        }
        // The VDF output was posted (the challenges follow, drawn from it), or the fallback window
        // passed without it (each picker's own picks).
        Phase::Delay => {
            let closing = Closing {
                reveals: ep.counts.revealed,
                ..Closing::at(Stage::Assign)
            };
            begin_close(ep, closing, at);
            Ok(())
        }
        Phase::Verify => enter(
            ep,
            Phase::Objection,
            at,
            phases.verdict_reveal_blocks,
            events,
        ),
        Phase::Objection => {
            // Its pages count the `pass` openings verdict_reveal waits for.
            ep.counts_mut().votes_expected = 0;
            begin_close(ep, Closing::at(Stage::Objections), at);
            Ok(())
        }
        Phase::Dispute => {
            ep.counts_mut().votes_revealed = 0;
            enter(
                ep,
                Phase::DisputeReveal,
                at,
                phases.verdict_reveal_blocks,
                events,
            )
        }
        // Undisputed challenges pass (closing `verdict_reveal`); disputed ones are decided by
        // the final vote (closing `dispute_reveal`): one paged stage for both.
        Phase::VerdictReveal | Phase::DisputeReveal => {
            begin_close(ep, Closing::at(Stage::Decide), at);
            Ok(())
        }
        Phase::Propose => {
            let agreed = agreed_hash(&ep.header, &ep.counts);
            // The agreed model's backers excluded a Δ: settle it page by page first.
            let excluded = match agreed.as_deref() {
                Some(hash) => finalize::has_exclusions(storage, ep.number(), hash)?,
                None => false,
            };
            if excluded {
                // Counted from the start, so `epoch {counts: true}` knows the stage's tally is whole.
                ep.counts_mut().withdrawn = Some(0);
                begin_close(ep, Closing::at(Stage::Exclusions), at);
                Ok(())
            } else {
                close_epoch(storage, config, ep, at, agreed, out)
            }
        }
        Phase::Closed => Err(ContractError::Corrupt(format!(
            "corrupt state: the current epoch {} is closed",
            ep.number()
        ))),
    }
}

/// A paged close completed at `stage` (see [`run_close`]): open what follows it.
fn after_close(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    stage: Stage,
    at: u64,
    out: &mut Response,
) -> Result<(), ContractError> {
    let verify_blocks = config.phases.verify_blocks;
    match stage {
        // The seed is fixed; the challenges wait for the VDF output over it: for `delay_blocks`
        // (then each picker's own picks), or, without them, as long as it takes (the window,
        // `reveal_blocks`, is then only when the output is expected).
        Stage::Seed => {
            let ver = &config.verification;
            let window = if ver.delay_blocks > 0 {
                ver.delay_blocks
            } else {
                config.phases.reveal_blocks
            };
            enter(ep, Phase::Delay, at, window, &mut out.events)
        }
        Stage::Assign => enter(ep, Phase::Verify, at, verify_blocks, &mut out.events),
        Stage::Objections => {
            let counts = ep.counts_mut();
            counts.votes_revealed = 0;
            enter(
                ep,
                Phase::VerdictReveal,
                at,
                config.phases.verdict_reveal_blocks,
                &mut out.events,
            )
        }
        Stage::Decide => {
            let counts = ep.counts_mut();
            counts.votes_expected = counts.final_expected;
            counts.votes_posted = 0;
            counts.votes_revealed = 0;
            ep.header_mut().round = 1;
            enter(ep, Phase::Dispute, at, verify_blocks, &mut out.events)
        }
        Stage::Exclusions => {
            let agreed = agreed_hash(&ep.header, &ep.counts);
            close_epoch(storage, config, ep, at, agreed, out)
        }
        _ => after_finalize(storage, config, ep, at, out),
    }
}

/// Start a paged close at `at`: the phase reads as due from now on (its deadline is `at`), so
/// nodes send `advance` until it is done.
fn begin_close(ep: &mut Epoch, closing: Closing, at: u64) {
    let header = ep.header_mut();
    header.phase_deadline = at;
    header.closing = Some(closing);
}

/// Run the close in progress with this execute's budget. Returns the stage that completed the
/// close (`assign`: reveal closed with verification on; `objections`: objection closed;
/// `decide`: verdict_reveal closed and the final round follows; `rewards`: finalized;
/// `exclusions`: propose closed), or None when the budget ran out first.
fn run_close(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    at: u64,
    out: &mut Response,
) -> Result<Option<Stage>, ContractError> {
    loop {
        if ep.budget == 0 {
            return Ok(None);
        }
        let stage = ep.closing()?.stage;
        let limit = ep.budget as usize;
        let page = match stage {
            Stage::Seed => challenges::seed_page(storage, config, ep, limit)?,
            Stage::Assign => challenges::assign_page(storage, config, ep, limit, at, out)?,
            Stage::Objections => disputes::objections_page(storage, ep, limit)?,
            Stage::Decide => disputes::decide_page(storage, config, ep, limit, at, out)?,
            Stage::Outcomes => finalize::outcomes_page(storage, config, ep, limit)?,
            Stage::Slashes => finalize::slashes_page(storage, config, ep, limit)?,
            Stage::Rewards => finalize::rewards_page(storage, config, ep, limit, at, out)?,
            Stage::Exclusions => finalize::exclusions_page(storage, config, ep, limit, out)?,
        };
        ep.budget = ep.budget.saturating_sub(page.records);
        if !page.done {
            continue;
        }
        match stage {
            // With a delayed seed the close of `reveal` stops after the seed: phase `delay`.
            Stage::Seed
                if config.verification.enabled && config.verification.delay_squarings > 0 =>
            {
                ep.header_mut().closing = None;
                return Ok(Some(stage));
            }
            Stage::Assign if config.verification.enabled => {
                ep.header_mut().closing = None;
                return Ok(Some(stage));
            }
            Stage::Assign => {
                // Verification disabled: finalize follows at once, in the same close.
                let closing = finalize::begin(storage, config)?;
                ep.header_mut().closing = Some(closing);
            }
            Stage::Rewards | Stage::Exclusions => {
                ep.header_mut().closing = None;
                return Ok(Some(stage));
            }
            Stage::Objections => {
                ep.header_mut().closing = None;
                return Ok(Some(stage));
            }
            // The close of verdict_reveal with disputed challenges: the final round follows.
            Stage::Decide if ep.header.round == 0 && ep.counts.disputed > 0 => {
                ep.header_mut().closing = None;
                return Ok(Some(stage));
            }
            Stage::Decide => {
                // Nothing left in dispute: finalize follows at once, in the same close.
                let closing = finalize::begin(storage, config)?;
                ep.header_mut().closing = Some(closing);
            }
            // The page moved the cursor to the next stage.
            _ => {}
        }
    }
}

/// Not enough participants at the deadline: a new join window counted from `at`.
fn extend_join(
    config: &Config,
    ep: &mut Epoch,
    at: u64,
    out: &mut Response,
) -> Result<(), ContractError> {
    let until = deadline(at, config.phases.join_blocks)?;
    let epoch = ep.number();
    let header = ep.header_mut();
    header.phase_deadline = until;
    header.extensions += 1;
    let extensions = header.extensions;
    out.events.push(
        phase_event(epoch, Phase::Join, at, until)
            .add_attribute("extended", "true")
            .add_attribute("extensions", extensions)
            .add_attribute("hosts", ep.counts.hosts)
            .add_attribute("validators", ep.counts.validators),
    );
    Ok(())
}

/// The join phase ran out of extensions without its minimums: close the epoch unplayed at `at`
/// (θ unchanged, nobody slashed or paid, its seed that of no reveal) and open the next one, so
/// that epochs, and with them unbonding, go on.
fn abandon_epoch(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    at: u64,
    out: &mut Response,
) -> Result<(), ContractError> {
    let run_id = run_id_bytes(config)?;
    let e = ep.number();
    let header = ep.header_mut();
    header.seed = Some(hex(&beacon::epoch_seed(&run_id, e, &[])));
    header.abandoned = true;
    close_epoch(storage, config, ep, at, None, out)
}

/// Finalize is done: `propose` if any host was accepted, else the epoch closes with θ unchanged.
fn after_finalize(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    at: u64,
    out: &mut Response,
) -> Result<(), ContractError> {
    // With an older epoch still settling, `propose` waits for it even with nobody to propose:
    // this epoch may close only after its predecessor, on the settled θ.
    if ep.counts.accepted > 0 || pipeline::older_settling(storage, ep)? {
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

/// Close the epoch at `at` with θ_{e+1} = `agreed` (or θ_e when None: the settled θ_e of an epoch
/// that opened from an optimistic start) and open the next one in `join` at once, with
/// prev_seed = seed_e — unless the next one is open already (a pipelined epoch that settles
/// while its successor trains: `pipeline`).
fn close_epoch(
    storage: &mut dyn Storage,
    config: &Config,
    ep: &mut Epoch,
    at: u64,
    agreed: Option<String>,
    out: &mut Response,
) -> Result<(), ContractError> {
    let next_model = agreed.clone().unwrap_or_else(|| {
        ep.header
            .settled_start
            .clone()
            .unwrap_or_else(|| ep.header.model_hash.clone())
    });
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
    let abandoned = ep.header.abandoned;
    out.events.push(
        Event::new("epoch")
            .add_attribute("epoch", epoch)
            .add_attribute("closed_at", at)
            .add_attribute("next_model_hash", &next_model)
            .add_attribute("agreed", agreed.is_some())
            .add_attribute("abandoned", abandoned),
    );
    if state::current_epoch(storage)? > epoch {
        // Its successor opened from the optimistic start; `pipeline` hands over the settled θ.
        return Ok(());
    }
    let next = epoch
        .checked_add(1)
        .ok_or(ContractError::CounterOverflow("epoch counter overflows"))?;
    let until = deadline(at, config.phases.join_blocks)?;
    let (budget, sends) = (ep.budget, std::mem::take(&mut ep.sends));
    *ep = Epoch::open(fresh_header(next, at, until, next_model, seed));
    ep.budget = budget;
    ep.sends = sends;
    CURRENT_EPOCH.save(storage, &next);
    out.events.push(phase_event(next, Phase::Join, at, until));
    Ok(())
}

/// At most `limit` records of a page that was read with `limit + 1`, and whether they are the
/// stage's last.
pub(crate) fn split_page<T>(mut page: Vec<T>, limit: usize) -> (Vec<T>, bool) {
    let done = page.len() <= limit;
    page.truncate(limit);
    (page, done)
}

/// The tail every page of a paged close shares: move the cursor — to stage `next` with no cursor
/// when the page was the stage's last, else past the page's last address — put the close back
/// in the epoch header and report the page. `next` is None for the last stage of a close, whose
/// successor [`run_close`] decides (the cursor then stays as it was when the stage is done).
pub(crate) fn end_page<T>(
    ep: &mut Epoch,
    mut closing: Closing,
    page: &[(String, T)],
    done: bool,
    next: Option<Stage>,
) -> Page {
    match next {
        Some(next) if done => {
            closing.stage = next;
            closing.after = None;
        }
        None if done => {}
        _ => closing.after = page.last().map(|(a, _)| a.clone()),
    }
    ep.header_mut().closing = Some(closing);
    Page {
        records: page.len() as u32,
        done,
    }
}
