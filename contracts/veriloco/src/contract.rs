//! Entry points: instantiate, the execute dispatch, the query dispatch.
//!
//! Each message's logic lives in its own module (`staking`, `rewards`, `epoch`, `settle`,
//! `query`); this file parses, runs the auto-advance around every execute, and routes.

use crate::msg::parse_json;
use crate::api;
use crate::error::{fail, ContractError};
use crate::funds::nonpayable;
use crate::epoch::{self, Epoch};
use crate::hashing::is_hex_digest;
use crate::msg::{
    AccountingResponse, ChallengesResponse, ConfigResponse, EpochsResponse, ExecuteMsg,
    InstantiateMsg, MembersResponse, QueryMsg,
};
use crate::records::Commitment;
use crate::spec::parse_spec;
use crate::state::{self, Config, Eligible, MemberView, Totals};
use crate::types::{Binary, Env, MessageInfo, Response};
use crate::query as epoch_query;
use crate::{rewards, settle, staking};

/// Default and maximum page size of `members`.
const DEFAULT_PAGE: u32 = 30;
const MAX_PAGE: u32 = 100;

pub fn instantiate(env: &Env, info: &MessageInfo, msg: &[u8]) -> Result<Response, ContractError> {
    let msg: InstantiateMsg = parse_json("instantiate message", msg)?;
    nonpayable(info, "instantiate")?;
    let spec = parse_spec(&msg.spec_json).map_err(|e| e.context("instantiate"))?;
    let segments = spec.view.segments();
    let view = spec.view;
    let economics = view.economics;
    if msg.denom != economics.denom {
        fail!(
            "instantiate: denom {:?} differs from the spec's economics.denom {:?}",
            msg.denom,
            economics.denom
        );
    }
    if !is_hex_digest(&msg.initial_model_hash) {
        fail!(
            "instantiate: initial_model_hash must be 64 lowercase hex characters, got {:?}",
            msg.initial_model_hash
        );
    }
    api::addr_validate(&msg.treasury).map_err(|e| e.context("instantiate: treasury"))?;
    if let Some(admin) = &msg.admin {
        api::addr_validate(admin).map_err(|e| e.context("instantiate: admin"))?;
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
    };
    state::save_config(&config);
    state::save_spec_json(&msg.spec_json);
    state::save_totals(&Totals::default());
    state::save_eligible(&Eligible::default());
    state::save_contract_version();
    epoch::open_first(&config, env.block.height)?;
    Ok(Response::new()
        .add_attribute("action", "instantiate")
        .add_attribute("run_id", &config.run_id)
        .add_attribute("run_name", &view.name)
        .add_attribute("denom", &config.denom)
        .add_attribute("epoch", 0)
        .add_attribute("phase_deadline", env.block.height + config.phases.join_blocks))
}

/// Every execute: close what is due (auto-advance), run the message, close what the message
/// completed, save the epoch once. A refused message reverts all of it, auto-advance included.
pub fn execute(env: &Env, info: &MessageInfo, msg: &[u8]) -> Result<Response, ContractError> {
    let msg: ExecuteMsg = parse_json("execute message", msg)?;
    let config = state::load_config()?;
    let height = env.block.height;
    let mut ep = Epoch::load_current()?;
    let mut before = Response::new();
    let transitions = epoch::advance(&config, &mut ep, height, &mut before)?;
    let response = match msg {
        ExecuteMsg::Bond { role, endpoint } => staking::bond(&config, info, role, endpoint)?,
        ExecuteMsg::Unbond { amount } => staking::unbond(&config, info, amount)?,
        ExecuteMsg::Claim {} => staking::claim(&config, info)?,
        ExecuteMsg::FundRewards {} => rewards::fund_rewards(&config, info)?,
        ExecuteMsg::Join {
            epoch,
            beacon_commit,
        } => epoch::join(&config, &mut ep, info, epoch, beacon_commit)?,
        ExecuteMsg::Commit {
            epoch,
            checkpoint_root,
            delta_hash,
            loss_digest,
            segments,
            train_loss_micro,
        } => epoch::commit(
            &config,
            &mut ep,
            info,
            epoch,
            Commitment {
                checkpoint_root,
                delta_hash,
                loss_digest,
                segments,
                train_loss_micro,
            },
        )?,
        ExecuteMsg::Reveal { epoch, secret } => epoch::reveal(&mut ep, info, epoch, secret)?,
        ExecuteMsg::Verdict {
            epoch,
            host,
            segment,
            outcome,
            distance,
            evidence,
        } => settle::verdict(&mut ep, info, epoch, host, segment, outcome, distance, evidence)?,
        ExecuteMsg::ProposeModel {
            epoch,
            model_hash,
            val_loss_micro,
        } => epoch::propose_model(&mut ep, info, epoch, model_hash, val_loss_micro)?,
        ExecuteMsg::Advance {} => epoch::advance_msg(&ep, info, height, transitions)?,
    };
    let mut after = Response::new();
    epoch::advance(&config, &mut ep, height, &mut after)?;
    ep.save();
    Ok(before.merge(response).merge(after))
}

pub fn query(_env: &Env, msg: &[u8]) -> Result<Binary, ContractError> {
    let msg: QueryMsg = parse_json("query message", msg)?;
    let answer = match msg {
        QueryMsg::Config {} => to_json(&query_config()?),
        QueryMsg::Member { address } => to_json(&query_member(&address)?),
        QueryMsg::Members {
            role,
            start_after,
            limit,
        } => {
            if start_after.as_ref().map_or(false, |a| a.len() > 256) {
                fail!("members: start_after is longer than an address (256 bytes)");
            }
            let limit = limit.unwrap_or(DEFAULT_PAGE).min(MAX_PAGE) as usize;
            let members = state::members_page(start_after.as_deref(), limit, |m| {
                role.map_or(true, |r| m.role == r)
            })?;
            to_json(&MembersResponse { members })
        }
        QueryMsg::Accounting {} => to_json(&query_accounting()?),
        QueryMsg::Epoch { epoch } => to_json(&epoch_query::epoch(epoch)?),
        QueryMsg::Epochs { start_after, limit } => to_json(&EpochsResponse {
            epochs: epoch_query::epochs(start_after, limit)?,
        }),
        QueryMsg::Challenges { epoch, validator } => to_json(&ChallengesResponse {
            challenges: epoch_query::challenges(epoch, &validator)?,
        }),
        QueryMsg::Report { epoch } => to_json(&epoch_query::report(epoch)?),
    };
    Ok(answer)
}

fn to_json<T: serde::Serialize>(value: &T) -> Binary {
    Binary(serde_json::to_vec(value).expect("serialize query answer"))
}

fn query_config() -> Result<ConfigResponse, ContractError> {
    let config = state::load_config()?;
    Ok(ConfigResponse {
        run_id: config.run_id,
        spec_json: state::load_spec_json()?,
        initial_model_hash: config.initial_model_hash,
        denom: config.denom,
        treasury: config.treasury,
        admin: config.admin,
    })
}

/// The member at `address`, or `null` if it never bonded.
fn query_member(address: &str) -> Result<Option<MemberView>, ContractError> {
    api::addr_validate(address).map_err(|e| e.context("member"))?;
    state::member_view(address)
}

fn query_accounting() -> Result<AccountingResponse, ContractError> {
    let totals = state::load_totals()?;
    Ok(AccountingResponse {
        bonded: totals.bonded,
        unbonding: totals.unbonding,
        reward_pool: totals.reward_pool,
    })
}
