//! The reward pool. Funded by anyone; epoch settlement (`settle.rs`) pays rewards out of it.

use crate::error::ContractError;
use crate::funds::must_pay;
use crate::state::{self, Config};
use crate::types::{MessageInfo, Response};

pub fn fund_rewards(config: &Config, info: &MessageInfo) -> Result<Response, ContractError> {
    let amount = must_pay(info, &config.denom, "fund_rewards")?;
    let mut totals = state::load_totals()?;
    totals.reward_pool = totals.reward_pool.checked_add(amount)?;
    state::save_totals(&totals);
    Ok(Response::new()
        .add_attribute("action", "fund_rewards")
        .add_attribute("funder", &info.sender)
        .add_attribute("amount", amount)
        .add_attribute("reward_pool", totals.reward_pool))
}
