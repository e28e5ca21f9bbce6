//! The epoch queries: `epoch`, `epochs`, `challenges`, `report`. Read-only: they show what is
//! stored, so a phase whose deadline has passed shows until the next transaction closes it (its
//! `phase_deadline` tells the reader it is due).

use std::collections::BTreeSet;

use crate::api;
use crate::error::{fail, ContractError};
use crate::msg::{
    ChallengeInfo, ChallengeReport, CommitmentView, EpochInfo, EpochReport, HostReport,
    ProposalView, ValidatorReport, VoteView,
};
use crate::records::{self, EpochHeader, Outcome, Phase};
use crate::settle::Tally;
use crate::state::{self, Role};

/// Default and maximum page size of `epochs` (each item lists the epoch's participants).
const DEFAULT_EPOCHS: u32 = 10;
const MAX_EPOCHS: u32 = 30;

fn header(action: &str, epoch: u64) -> Result<EpochHeader, ContractError> {
    match records::load_header(epoch)? {
        Some(h) => Ok(h),
        None => fail!(
            "{action}: epoch {epoch} has not started; the current epoch is {}",
            state::current_epoch()?
        ),
    }
}

fn info(header: EpochHeader) -> Result<EpochInfo, ContractError> {
    let e = header.epoch;
    let mut hosts = Vec::new();
    let mut validators = Vec::new();
    let mut accepted = Vec::new();
    let payouts = records::payouts(e)?;
    for (address, p) in records::participants(e)? {
        if payouts.get(&address).map_or(false, |x| x.outcome == Outcome::Accepted) {
            accepted.push(address.clone());
        }
        match p.role {
            Role::Host => hosts.push(address),
            Role::Validator => validators.push(address),
        }
    }
    let committed = records::commitments(e)?.into_iter().map(|(a, _)| a).collect();
    Ok(EpochInfo {
        epoch: e,
        phase: header.phase.as_str(),
        phase_deadline: header.phase_deadline,
        started_at: header.started_at,
        model_hash: header.model_hash,
        prev_seed: header.prev_seed,
        seed: header.seed,
        next_model_hash: header.next_model_hash,
        agreed: header.agreed,
        hosts,
        validators,
        committed,
        accepted,
    })
}

pub fn epoch(epoch: Option<u64>) -> Result<EpochInfo, ContractError> {
    let e = match epoch {
        Some(e) => e,
        None => state::current_epoch()?,
    };
    info(header("epoch", e)?)
}

pub fn epochs(start_after: Option<u64>, limit: Option<u32>) -> Result<Vec<EpochInfo>, ContractError> {
    let limit = limit.unwrap_or(DEFAULT_EPOCHS).min(MAX_EPOCHS) as usize;
    records::headers_page(start_after, limit)?
        .into_iter()
        .map(info)
        .collect()
}

pub fn challenges(epoch: u64, validator: &str) -> Result<Vec<ChallengeInfo>, ContractError> {
    api::addr_validate(validator).map_err(|e| e.context("challenges: validator"))?;
    header("challenges", epoch)?;
    let mut out = Vec::new();
    let assignments = records::all_assignments(epoch)?;
    if assignments.is_empty() {
        return Ok(out);
    }
    let set = records::load_validator_set(epoch)?;
    let index = match set.iter().position(|v| v == validator) {
        Some(i) => i as u16,
        None => return Ok(out),
    };
    for (host, assignments) in assignments {
        let mine: Vec<_> = assignments
            .into_iter()
            .filter(|a| a.validators.contains(&index))
            .collect();
        if mine.is_empty() {
            continue;
        }
        let commitment = records::load_commitment(epoch, &host)?
            .ok_or_else(|| ContractError::new("corrupt state: a challenged host without a commitment"))?;
        let endpoint = state::load_member(&host)?.map(|m| m.endpoint).unwrap_or_default();
        for a in mine {
            out.push(ChallengeInfo {
                epoch,
                host: host.clone(),
                segment: a.segment,
                segments: commitment.segments,
                checkpoint_root: commitment.checkpoint_root.clone(),
                delta_hash: commitment.delta_hash.clone(),
                loss_digest: commitment.loss_digest.clone(),
                endpoint: endpoint.clone(),
                voted: records::has_vote(epoch, &host, a.segment, validator),
                validators: a.addresses(&set)?,
            });
        }
    }
    Ok(out)
}

pub fn report(epoch: u64) -> Result<EpochReport, ContractError> {
    let h = header("report", epoch)?;
    let config = state::load_config()?;
    // Challenge outcomes are decided at finalize: after `verify` closed.
    let decided = matches!(h.phase, Phase::Propose | Phase::Closed);
    let tally = Tally::of_epoch(epoch, decided)?;
    let revealed: BTreeSet<String> = records::reveals(epoch)?.into_iter().map(|(a, _)| a).collect();
    let mut commitments: std::collections::BTreeMap<String, records::Commitment> =
        records::commitments(epoch)?.into_iter().collect();
    let mut proposals: std::collections::BTreeMap<String, records::Proposal> =
        records::proposals(epoch)?.into_iter().collect();
    let mut payouts = records::payouts(epoch)?;
    let mut hosts = Vec::new();
    let mut validators = Vec::new();
    for (address, p) in records::participants(epoch)? {
        let was_revealed = revealed.contains(&address);
        let pay = payouts.remove(&address).unwrap_or_default();
        match p.role {
            Role::Host => hosts.push(HostReport {
                stake: p.stake,
                revealed: was_revealed,
                commitment: commitments.remove(&address).map(|c| CommitmentView {
                    epoch,
                    checkpoint_root: c.checkpoint_root,
                    delta_hash: c.delta_hash,
                    loss_digest: c.loss_digest,
                    segments: c.segments,
                    train_loss_micro: c.train_loss_micro,
                }),
                outcome: pay.outcome.as_str(),
                slashed: pay.slashed,
                reward: pay.reward,
                proposal: proposals.remove(&address).map(|m| ProposalView {
                    epoch,
                    model_hash: m.model_hash,
                    val_loss_micro: m.val_loss_micro,
                }),
                address,
            }),
            Role::Validator => {
                // Counts are live; the outcome is decided (and stored) by finalize.
                let stats = tally.validators.get(&address).copied().unwrap_or_default();
                validators.push(ValidatorReport {
                    stake: p.stake,
                    revealed: was_revealed,
                    assigned: stats.assigned,
                    voted: stats.voted,
                    against_majority: stats.against,
                    outcome: pay.outcome.as_str(),
                    slashed: pay.slashed,
                    reward: pay.reward,
                    catcher_reward: pay.catcher,
                    address,
                });
            }
        }
    }
    let challenges = tally
        .challenges
        .into_iter()
        .map(|((host, segment), c)| {
            let mut votes = c.votes;
            ChallengeReport {
                host,
                segment,
                votes: c
                    .validators
                    .into_iter()
                    .map(|v| {
                        let vote = votes.remove(&v);
                        VoteView {
                            outcome: vote.as_ref().map(|x| x.outcome),
                            distance: vote.as_ref().map(|x| x.distance.clone()),
                            evidence: vote.map(|x| x.evidence),
                            validator: v,
                        }
                    })
                    .collect(),
                outcome: c.outcome,
            }
        })
        .collect();
    Ok(EpochReport {
        run_id: config.run_id,
        epoch,
        phase: h.phase.as_str(),
        phase_deadline: h.phase_deadline,
        started_at: h.started_at,
        model_hash: h.model_hash,
        next_model_hash: h.next_model_hash,
        agreed: h.agreed,
        seed: h.seed,
        hosts,
        validators,
        challenges,
        slashed_total: h.slashed_total,
        to_treasury: h.to_treasury,
        to_catchers: h.to_catchers,
        rewards_total: h.rewards_total,
    })
}
