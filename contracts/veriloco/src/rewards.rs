//! The reward pool. Funded by anyone; epoch settlement (`epoch/finalize.rs`) pays rewards out of it.

use crate::deps::DepsMut;
use crate::error::ContractError;
use crate::funds::must_pay;
use crate::state::{Config, TOTALS};
use crate::types::{MessageInfo, Response};

pub fn fund_rewards(
    deps: DepsMut,
    config: &Config,
    info: &MessageInfo,
) -> Result<Response, ContractError> {
    let amount = must_pay(info, &config.denom, "fund_rewards")?;
    let mut totals = TOTALS.load(deps.storage)?;
    totals.admit(amount, "fund_rewards")?;
    totals.reward_pool = totals.reward_pool.checked_add(amount)?;
    TOTALS.save(deps.storage, &totals);
    Ok(Response::new()
        .add_attribute("action", "fund_rewards")
        .add_attribute("funder", &info.sender)
        .add_attribute("amount", amount)
        .add_attribute("reward_pool", totals.reward_pool))
}
