//! Entry points: instantiate, the execute dispatch, the query dispatch, with cosmwasm-std's
//! signatures (`abi` parses the arguments and builds the context on wasm; the native tests call
//! these directly on `testing::MockDeps`).
//!
//! Each message's logic lives in its own module (`staking`, `rewards`, `epoch::handlers`,
//! `query`); this file runs the auto-advance around every execute and routes.

use crate::deps::{Deps, DepsMut};
use crate::epoch;
use crate::epoch::handlers::{self, ModelProposal, VerdictOpening};
use crate::epoch::pipeline::{self, Epochs};
use crate::error::ContractError;
use crate::funds::nonpayable;
use crate::hashing::is_hex_digest;
use crate::msg::{
    AggregationInputsResponse, ChallengesResponse, EpochsResponse, ExecuteMsg, InstantiateMsg,
    MembersResponse, QueryMsg,
};
use crate::query as queries;
use crate::records::Commitment;
use crate::spec::parse_spec;
use crate::state::{
    Config, ContractVersion, Eligible, Totals, CONFIG, CONTRACT_INFO, DEFAULT_SETTLE_PAGE,
    ELIGIBLE, SPEC, TOTALS,
};
use crate::types::{Binary, Env, MessageInfo, Response};
use crate::{rewards, staking};

pub fn instantiate(
    deps: DepsMut,
    env: Env,
    info: MessageInfo,
    msg: InstantiateMsg,
) -> Result<Response, ContractError> {
    const ACTION: &str = "instantiate";
    nonpayable(&info, ACTION)?;
    let spec = parse_spec(&msg.spec_json).map_err(|e| e.context(ACTION))?;
    let segments = spec.view.segments();
    let view = spec.view;
    let economics = view.economics;
    if msg.denom != economics.denom {
        return Err(ContractError::refused(
            ACTION,
            format!(
                "denom {:?} differs from the spec's economics.denom {:?}",
                msg.denom, economics.denom
            ),
        ));
    }
    if !is_hex_digest(&msg.initial_model_hash) {
        return Err(ContractError::refused(
            ACTION,
            format!(
                "initial_model_hash must be 64 lowercase hex characters, got {:?}",
                msg.initial_model_hash
            ),
        ));
    }
    deps.api
        .addr_validate(&msg.treasury)
        .map_err(|e| e.context("instantiate: treasury"))?;
    if let Some(admin) = &msg.admin {
        deps.api
            .addr_validate(admin)
            .map_err(|e| e.context("instantiate: admin"))?;
    }
    let settle_page = msg.settle_page.unwrap_or(DEFAULT_SETTLE_PAGE);
    if settle_page == 0 {
        return Err(ContractError::refused(
            ACTION,
            "settle_page must be at least 1".to_string(),
        ));
    }
    let config = Config {
        run_id: spec.run_id,
        initial_model_hash: msg.initial_model_hash,
        denom: msg.denom,
        treasury: msg.treasury,
        admin: msg.admin,
        economics,
        phases: view.phases,
        verification: view.verification,
        segments,
        settle_page,
    };
    CONFIG.save(deps.storage, &config);
    SPEC.save(deps.storage, &msg.spec_json);
    TOTALS.save(deps.storage, &Totals::default());
    ELIGIBLE.save(deps.storage, &Eligible::default());
    CONTRACT_INFO.save(deps.storage, &ContractVersion::this());
    epoch::open_first(deps.storage, &config, env.block.height)?;
    Ok(Response::new()
        .add_attribute("action", ACTION)
        .add_attribute("run_id", &config.run_id)
        .add_attribute("run_name", &view.name)
        .add_attribute("denom", &config.denom)
        .add_attribute("epoch", 0)
        .add_attribute(
            "phase_deadline",
            env.block.height + config.phases.join_blocks,
        ))
}

/// Every execute: close what is due (auto-advance), run the message, close what the message
/// completed, save the epoch once. A refused message reverts all of it, auto-advance included.
pub fn execute(
    mut deps: DepsMut,
    env: Env,
    info: MessageInfo,
    msg: ExecuteMsg,
) -> Result<Response, ContractError> {
    let config = CONFIG.load(deps.storage)?;
    let height = env.block.height;
    let mut epochs = Epochs::load(deps.storage, config.settle_page)?;
    let mut before = Response::new();
    let transitions = epochs.advance(deps.storage, &config, height, &mut before)?;
    let d = deps.branch();
    let response = match msg {
        ExecuteMsg::Bond { role, endpoint } => staking::bond(d, &config, &info, role, endpoint)?,
        ExecuteMsg::Unbond { amount } => staking::unbond(d, &config, &info, amount)?,
        ExecuteMsg::Claim {} => staking::claim(d, &config, &info)?,
        ExecuteMsg::SetStandby { standby } => staking::set_standby(d, &info, standby)?,
        ExecuteMsg::FundRewards {} => rewards::fund_rewards(d, &config, &info)?,
        ExecuteMsg::Join {
            epoch,
            beacon_commit,
            compute_class,
        } => handlers::join(
            d,
            &config,
            &mut epochs.current,
            &info,
            epoch,
            beacon_commit,
            compute_class,
        )?,
        ExecuteMsg::Commit {
            epoch,
            checkpoint_root,
            delta_hash,
            loss_digest,
            segments,
            train_loss_micro,
            trap_commit,
        } => handlers::commit(
            d,
            &config,
            epochs.for_message(epoch),
            &info,
            epoch,
            Commitment {
                checkpoint_root,
                delta_hash,
                loss_digest,
                segments,
                train_loss_micro,
                trap_commit,
            },
        )?,
        ExecuteMsg::SitOut { epoch } => {
            handlers::sit_out(d, epochs.for_message(epoch), &info, epoch)?
        }
        ExecuteMsg::Reveal {
            epoch,
            secret,
            participant,
        } => handlers::reveal(
            d,
            epochs.for_message(epoch),
            &info,
            height,
            epoch,
            secret,
            participant,
        )?,
        ExecuteMsg::CommitVerdict {
            epoch,
            host,
            segment,
            commitment,
        } => handlers::commit_verdict(
            d,
            epochs.for_message(epoch),
            &info,
            epoch,
            host,
            segment,
            commitment,
        )?,
        ExecuteMsg::Ready { epoch, objections } => handlers::ready(
            d,
            epochs.for_message(epoch),
            &info,
            epoch,
            objections
                .into_iter()
                .map(|o| (o.host, o.segment))
                .collect(),
        )?,
        ExecuteMsg::RevealVerdict {
            epoch,
            host,
            segment,
            outcome,
            distance,
            evidence,
            salt,
            gain_micro,
            dispute_gain_micro,
        } => handlers::reveal_verdict(
            d,
            &config,
            epochs.for_message(epoch),
            &info,
            VerdictOpening {
                epoch,
                host,
                segment,
                outcome,
                distance,
                evidence,
                salt,
                gain_micro,
                dispute_gain_micro,
            },
        )?,
        ExecuteMsg::RevealTraps {
            epoch,
            segments,
            salt,
        } => handlers::reveal_traps(
            d,
            &config,
            epochs.for_message(epoch),
            &info,
            epoch,
            segments,
            salt,
        )?,
        ExecuteMsg::ProposeModel {
            epoch,
            model_hash,
            val_loss_micro,
            excluded,
        } => handlers::propose_model(
            d,
            &config,
            epochs.for_message(epoch),
            &info,
            ModelProposal {
                epoch,
                model_hash,
                val_loss_micro,
                excluded,
            },
        )?,
        ExecuteMsg::ProposeStart { epoch, model_hash } => pipeline::propose_start(
            d,
            &config,
            epochs.for_message(epoch),
            &info,
            epoch,
            model_hash,
        )?,
        ExecuteMsg::DelayedSeed {
            epoch,
            output,
            proof,
        } => handlers::delayed_seed(
            &config,
            epochs.for_message(epoch),
            &info,
            epoch,
            &output,
            &proof,
        )?,
        ExecuteMsg::Advance {} => {
            let held_by = pipeline::held_by(d.storage, &config, &epochs.current)?;
            handlers::advance(&epochs.current, &info, height, transitions, held_by)?
        }
    };
    let mut after = Response::new();
    epochs.advance(deps.storage, &config, height, &mut after)?;
    epochs.save(deps.storage);
    let mut response = before.merge(response).merge(after);
    response.messages.extend(epochs.take_sends(&config.denom)?);
    Ok(response)
}

pub fn query(deps: Deps, _env: Env, msg: QueryMsg) -> Result<Binary, ContractError> {
    let answer = match msg {
        QueryMsg::Config {} => to_json(&queries::config(deps)?),
        QueryMsg::Member { address } => to_json(&queries::member(deps, &address)?),
        QueryMsg::Standby { member } => to_json(&queries::standby(deps, &member)?),
        QueryMsg::Members {
            role,
            start_after,
            limit,
        } => to_json(&MembersResponse {
            members: queries::members(deps, role, start_after.as_deref(), limit)?,
        }),
        QueryMsg::Accounting {} => to_json(&queries::accounting(deps)?),
        QueryMsg::Epoch {
            epoch,
            lists,
            counts,
        } => to_json(&queries::epoch(deps, epoch, lists, counts)?),
        QueryMsg::Epochs {
            start_after,
            limit,
            lists,
            counts,
        } => to_json(&EpochsResponse {
            epochs: queries::epochs(deps, start_after, limit, lists, counts)?,
        }),
        QueryMsg::Challenges {
            epoch,
            validator,
            start_after,
            limit,
        } => {
            let (challenges, next) =
                queries::challenges(deps, epoch, &validator, start_after.as_deref(), limit)?;
            to_json(&ChallengesResponse { challenges, next })
        }
        QueryMsg::Report {
            epoch,
            start_after,
            start_segment,
            limit,
        } => to_json(&queries::report(
            deps,
            epoch,
            start_after.as_deref(),
            start_segment,
            limit,
        )?),
        QueryMsg::Participant { address, epoch } => {
            to_json(&queries::participant(deps, &address, epoch)?)
        }
        QueryMsg::ComputeClass { class, epoch } => {
            to_json(&queries::compute_class(deps, &class, epoch)?)
        }
        QueryMsg::AggregationInputs {
            epoch,
            start_after,
            limit,
        } => to_json(&AggregationInputsResponse {
            hosts: queries::aggregation_inputs(deps, epoch, start_after.as_deref(), limit)?,
        }),
    };
    Ok(answer)
}

fn to_json<T: serde::Serialize>(value: &T) -> Binary {
    Binary(serde_json::to_vec(value).expect("serialize query answer"))
}
