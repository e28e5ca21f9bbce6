//! The reward pool. Funded by anyone; epoch settlement (to come) pays rewards out of it.

use crate::error::ContractError;
use crate::funds::must_pay;
use crate::state;
use crate::types::{MessageInfo, Response};

pub fn fund_rewards(info: &MessageInfo) -> Result<Response, ContractError> {
    let config = state::load_config()?;
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
