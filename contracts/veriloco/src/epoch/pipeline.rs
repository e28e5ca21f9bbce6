//! Two epochs in flight (`phases.pipelined`; `docs/contract.md`, "Pipelined epochs"): the
//! optimistic start vote, the hand-over from a training epoch to a settling one, and the holds
//! that keep every epoch built on its predecessor's settled model.
//!
//! Once epoch e's seed is fixed (its `reveal` closed), the hosts that committed in e propose
//! θ^opt_{e+1} = the outer step of e's settled start over *every* committed Δ of e
//! (`propose_start`). When one hash is backed by more than 2/3 of the committed stake, epoch
//! e + 1 opens at once from it (`join`, prev_seed = seed_e) while e goes on through its verdict
//! rounds, finalize and `propose` (θ^s_{e+1}: the accepted Δs only) as in a synchronous run. At
//! most two epochs are open: e + 1's own start vote waits for e to settle, and so do
//! * e + 1's `propose` (θ^s_{e+2} builds on θ^s_{e+1}): its window counts from e's close;
//! * e + 1's `join` when its minimums are missing (it is neither extended nor abandoned until e
//!   closed, so an epoch never closes before its predecessor);
//! * the close of e + 1's `reveal`, which fixes e + 1's weights (V's, the picker draw's): every
//!   slash of e, its finalize's and its exclusions', lands before it (a reveal after the
//!   window's deadline is refused meanwhile);
//! * every `claim` ([`crate::state::unsettled_epoch`]): a stake unbonded while e settles stays
//!   slashable by e.
//! An epoch whose start vote does not pass opens its successor at its close, synchronously.

use crate::deps::{DepsMut, Storage};
use crate::error::{refuse, ContractError};
use crate::funds::nonpayable;
use crate::records::{
    Phase, Stage, COMMITMENTS, HOST_CUTS, PARTICIPANTS, START_BACKING, START_PROPOSALS,
};
use crate::state::{Config, Role, CURRENT_EPOCH, SETTLING};
use crate::types::{Event, MessageInfo, Response, SubMsg};

use super::{advance, deadline, fresh_header, minimums_met, over_two_thirds, phase_event, Epoch};

/// The open epochs of one execute: the current one (joining or training, or the only one) and,
/// in a pipelined run, the older one still settling.
pub struct Epochs {
    pub current: Epoch,
    pub settling: Option<Epoch>,
}

impl Epochs {
    pub fn load(storage: &dyn Storage, budget: u32) -> Result<Epochs, ContractError> {
        let mut current = Epoch::load_current(storage)?;
        current.budget = budget;
        let settling = match SETTLING.may_load(storage)? {
            Some(e) => Some(Epoch::load(storage, e)?),
            None => None,
        };
        Ok(Epochs { current, settling })
    }

    /// The epoch a message for `epoch` goes to: the settling one when it names it, else the
    /// current one (whose checks refuse any other number).
    pub fn for_message(&mut self, epoch: u64) -> &mut Epoch {
        match self.settling.as_mut() {
            Some(old) if old.number() == epoch => old,
            _ => &mut self.current,
        }
    }

    /// Close what is due in both epochs (the settling one first, on one shared page budget),
    /// hand the settled θ to the current epoch when the settling one closed, and open the next
    /// epoch when the current one's start vote passed. Returns the phase closes begun.
    pub fn advance(
        &mut self,
        storage: &mut dyn Storage,
        config: &Config,
        height: u64,
        out: &mut Response,
    ) -> Result<u32, ContractError> {
        let mut transitions = 0;
        if let Some(old) = self.settling.as_mut() {
            old.budget = self.current.budget;
            transitions += advance(storage, config, old, height, out)?;
            self.current.budget = old.budget;
            if old.header.phase == Phase::Closed {
                transitions += 1;
                self.settled(storage, config, height, out)?;
            }
        }
        transitions += advance(storage, config, &mut self.current, height, out)?;
        if self.open_next(storage, config, height, out)? {
            transitions += 1;
            // The new epoch's join may already be complete (nobody to wait for).
            transitions += advance(storage, config, &mut self.current, height, out)?;
        }
        Ok(transitions)
    }

    /// The settling epoch closed at `at`: the current epoch now builds on its settled θ, and a
    /// window it was held in counts from now.
    fn settled(
        &mut self,
        storage: &mut dyn Storage,
        config: &Config,
        at: u64,
        out: &mut Response,
    ) -> Result<(), ContractError> {
        let mut old = match self.settling.take() {
            Some(old) => old,
            None => return Ok(()),
        };
        old.save(storage);
        let sends = std::mem::take(&mut old.sends);
        self.current.pay(&sends)?;
        // Whether the current epoch's phase waited for this one (asked before it is gone).
        let held = held(storage, config, &self.current)? && self.current.header.closing.is_none();
        SETTLING.remove(storage);
        let settled = old.header.next_model_hash.clone();
        let epoch = self.current.number();
        let blocks = match self.current.header.phase {
            Phase::Propose => config.phases.propose_blocks,
            _ => config.phases.join_blocks,
        };
        let until = deadline(at, blocks)?;
        // What the old epoch's slashes took off this epoch's hosts after the vote totals had
        // counted them (`records::HostCuts`): off the totals now, before any of them votes.
        if let Some(cuts) = HOST_CUTS.may_load(storage, epoch)? {
            let counts = self.current.counts_mut();
            counts.committed_stake = counts.committed_stake.checked_sub(cuts.committed)?;
            HOST_CUTS.remove(storage, epoch);
        }
        let header = self.current.header_mut();
        header.settled_start = settled;
        // A held `propose` or `join` gets its window from now; a held `reveal` does not: its
        // window was the reveals' (late ones are refused), and its close begins at once.
        let extends = matches!(header.phase, Phase::Propose | Phase::Join);
        if held && extends && header.phase_deadline < until {
            header.phase_deadline = until;
            let phase = header.phase;
            out.events.push(
                phase_event(epoch, phase, at, until).add_attribute("after_settled", old.number()),
            );
        }
        Ok(())
    }

    /// Open epoch e + 1 from the current epoch e's agreed optimistic start (if it passed and no
    /// older epoch settles); e becomes the settling epoch. Returns whether it opened.
    fn open_next(
        &mut self,
        storage: &mut dyn Storage,
        config: &Config,
        at: u64,
        out: &mut Response,
    ) -> Result<bool, ContractError> {
        if !config.phases.pipelined || self.settling.is_some() {
            return Ok(false);
        }
        let cur = &self.current;
        if cur.header.phase == Phase::Closed || cur.header.start_model_hash.is_some() {
            return Ok(false);
        }
        // Not while e's reveal close still records its absences (stage `assign`, after the
        // seed): every miss of e is on its host's record before anyone joins e + 1.
        if matches!(&cur.header.closing, Some(c) if c.stage == Stage::Assign) {
            return Ok(false);
        }
        let (start, seed) = match (agreed_start(cur), cur.header.seed.clone()) {
            (Some(start), Some(seed)) => (start, seed),
            _ => return Ok(false),
        };
        let epoch = cur.number();
        let next = epoch
            .checked_add(1)
            .ok_or(ContractError::CounterOverflow("epoch counter overflows"))?;
        self.current.header_mut().start_model_hash = Some(start.clone());
        let until = deadline(at, config.phases.join_blocks)?;
        let mut opened = Epoch::open(fresh_header(next, at, until, start.clone(), seed));
        opened.budget = self.current.budget;
        let old = std::mem::replace(&mut self.current, opened);
        old.save(storage);
        self.settling = Some(old);
        SETTLING.save(storage, &epoch);
        CURRENT_EPOCH.save(storage, &next);
        out.events.push(
            Event::new("pipeline")
                .add_attribute("settling", epoch)
                .add_attribute("training", next)
                .add_attribute("start_model_hash", &start)
                .add_attribute("at", at),
        );
        out.events.push(phase_event(next, Phase::Join, at, until));
        Ok(true)
    }

    /// Every payment of this execute, one bank send per recipient.
    pub fn take_sends(&mut self, denom: &str) -> Result<Vec<SubMsg>, ContractError> {
        if let Some(old) = self.settling.as_mut() {
            let sends = std::mem::take(&mut old.sends);
            self.current.pay(&sends)?;
        }
        Ok(self.current.take_sends(denom))
    }

    pub fn save(&self, storage: &mut dyn Storage) {
        if let Some(old) = self.settling.as_ref() {
            old.save(storage);
        }
        self.current.save(storage);
    }
}

/// The optimistic start backed by more than 2/3 of the committed stake, if any.
pub fn agreed_start(ep: &Epoch) -> Option<String> {
    let c = &ep.counts;
    if over_two_thirds(c.start_best_stake, c.committed_stake) {
        c.start_best_hash.clone()
    } else {
        None
    }
}

/// Is an epoch older than `ep` still settling?
pub fn older_settling(storage: &dyn Storage, ep: &Epoch) -> Result<bool, ContractError> {
    Ok(matches!(SETTLING.may_load(storage)?, Some(e) if e < ep.number()))
}

/// Is `ep`'s phase held by an older epoch still settling (it does not close until that one
/// closed)? `propose`, `reveal` (its close fixes every weight of `ep`: every slash of the older
/// epoch lands first), and a `join` short of its minimums.
pub fn held(storage: &dyn Storage, config: &Config, ep: &Epoch) -> Result<bool, ContractError> {
    let waits = match ep.header.phase {
        Phase::Propose | Phase::Reveal => true,
        Phase::Join => !minimums_met(config, &ep.counts),
        _ => false,
    };
    Ok(waits && older_settling(storage, ep)?)
}

/// The older epoch that holds `ep`'s phase ([`held`]), if any: what `advance` names when it
/// refuses.
pub fn held_by(
    storage: &dyn Storage,
    config: &Config,
    ep: &Epoch,
) -> Result<Option<u64>, ContractError> {
    if held(storage, config, ep)? {
        SETTLING.may_load(storage)
    } else {
        Ok(None)
    }
}

/// `propose_start {epoch, model_hash}`: a host that committed in `epoch` proposes the optimistic
/// θ_{epoch+1}, once the epoch's seed is fixed and no older epoch settles, before the next
/// epoch opened.
pub fn propose_start(
    deps: DepsMut,
    config: &Config,
    ep: &mut Epoch,
    info: &MessageInfo,
    epoch: u64,
    model_hash: String,
) -> Result<Response, ContractError> {
    const ACTION: &str = "propose_start";
    nonpayable(info, ACTION)?;
    if !config.phases.pipelined {
        refuse!(
            ACTION,
            "the run is not pipelined (phases.pipelined is false)"
        );
    }
    super::handlers::expect_current(ep, ACTION, epoch)?;
    if ep.header.start_model_hash.is_some() {
        refuse!(
            ACTION,
            "epoch {} already opened from its agreed start",
            epoch + 1
        );
    }
    if ep.header.seed.is_none() || ep.header.phase == Phase::Closed {
        refuse!(
            ACTION,
            "epoch {epoch} is in {}: the start vote opens when reveal has closed",
            ep.header.phase.as_str()
        );
    }
    if let Some(old) = SETTLING.may_load(deps.storage)? {
        refuse!(
            ACTION,
            "epoch {old} is still settling: θ_{} builds on its settled model",
            epoch + 1
        );
    }
    let sender = &info.sender;
    let stake = match PARTICIPANTS.may_load(deps.storage, (epoch, sender))? {
        Some(p) if p.role == Role::Host && COMMITMENTS.has(deps.storage, (epoch, sender)) => {
            p.weight()
        }
        _ => refuse!(ACTION, "{sender} is not a committed host of epoch {epoch}"),
    };
    if START_PROPOSALS.has(deps.storage, (epoch, sender)) {
        refuse!(
            ACTION,
            "{sender} already proposed a start for epoch {}",
            epoch + 1
        );
    }
    super::handlers::hex_field(ACTION, "model_hash", &model_hash)?;
    START_PROPOSALS.save(deps.storage, (epoch, sender), &model_hash);
    let backing = START_BACKING
        .may_load(deps.storage, (epoch, &model_hash))?
        .unwrap_or_default()
        .checked_add(stake)?;
    START_BACKING.save(deps.storage, (epoch, &model_hash), &backing);
    let counts = ep.counts_mut();
    counts.start_proposed += 1;
    if backing > counts.start_best_stake {
        counts.start_best_stake = backing;
        counts.start_best_hash = Some(model_hash.clone());
    }
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("epoch", epoch)
        .add_attribute("host", sender)
        .add_attribute("model_hash", &model_hash)
        .add_attribute("backing", backing))
}

/// The settling epoch's number, for queries (None when one epoch is open).
pub fn settling_epoch(storage: &dyn Storage) -> Result<Option<u64>, ContractError> {
    SETTLING.may_load(storage)
}
