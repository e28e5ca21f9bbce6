//! Entry points: instantiate, the execute dispatch, the query dispatch.
//!
//! Each message's logic lives in its own module (`staking`, `rewards`; epoch logic to come in
//! e.g. `epoch.rs`, `challenge.rs`, `settle.rs`); this file only parses and routes.

use crate::abi::parse_json;
use crate::api;
use crate::error::{fail, ContractError};
use crate::funds::nonpayable;
use crate::msg::{
    AccountingResponse, ConfigResponse, ExecuteMsg, InstantiateMsg, MembersResponse, QueryMsg,
};
use crate::spec::{is_hex_digest, parse_spec};
use crate::state::{self, Config, Member, Totals};
use crate::types::{Binary, Env, MessageInfo, Response};
use crate::{rewards, staking};

/// Default and maximum page size of `members`.
const DEFAULT_PAGE: u32 = 30;
const MAX_PAGE: u32 = 100;

pub fn instantiate(_env: &Env, info: &MessageInfo, msg: &[u8]) -> Result<Response, ContractError> {
    let msg: InstantiateMsg = parse_json("instantiate message", msg)?;
    nonpayable(info, "instantiate")?;
    let spec = parse_spec(&msg.spec_json).map_err(|e| e.context("instantiate"))?;
    let economics = spec.view.economics;
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
    };
    state::save_config(&config);
    state::save_spec_json(&msg.spec_json);
    state::save_totals(&Totals::default());
    state::save_contract_version();
    Ok(Response::new()
        .add_attribute("action", "instantiate")
        .add_attribute("run_id", &config.run_id)
        .add_attribute("run_name", &spec.view.name)
        .add_attribute("denom", &config.denom))
}

pub fn execute(_env: &Env, info: &MessageInfo, msg: &[u8]) -> Result<Response, ContractError> {
    let msg: ExecuteMsg = parse_json("execute message", msg)?;
    match msg {
        ExecuteMsg::Bond { role, endpoint } => staking::bond(info, role, endpoint),
        ExecuteMsg::Unbond { amount } => staking::unbond(info, amount),
        ExecuteMsg::Claim {} => staking::claim(info),
        ExecuteMsg::FundRewards {} => rewards::fund_rewards(info),
    }
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
            let limit = limit.unwrap_or(DEFAULT_PAGE).min(MAX_PAGE) as usize;
            let members = state::members_page(start_after.as_deref(), limit, |m| {
                role.map_or(true, |r| m.role == r)
            })?;
            to_json(&MembersResponse { members })
        }
        QueryMsg::Accounting {} => to_json(&query_accounting()?),
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
fn query_member(address: &str) -> Result<Option<Member>, ContractError> {
    api::addr_validate(address).map_err(|e| e.context("member"))?;
    state::load_member(address)
}

fn query_accounting() -> Result<AccountingResponse, ContractError> {
    let totals = state::load_totals()?;
    Ok(AccountingResponse {
        bonded: totals.bonded,
        unbonding: totals.unbonding,
        reward_pool: totals.reward_pool,
    })
}
