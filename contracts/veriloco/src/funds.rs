//! Checks on the funds attached to a message, and bank transfers out of the contract.
//!
//! By the time the contract runs, the chain has already moved `info.funds` from the sender to the
//! contract; rejecting the message reverts that transfer with the rest of the transaction.

use crate::error::ContractError;
use crate::types::{BankMsg, Coin, CosmosMsg, MessageInfo, Uint128};

/// The Cosmos SDK spelling of a coin list (`5inj,3uatom`), or `nothing`.
pub fn format_coins(coins: &[Coin]) -> String {
    if coins.is_empty() {
        return "nothing".to_string();
    }
    coins
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The amount attached, which must be exactly one nonzero coin of `denom`.
pub fn must_pay(
    info: &MessageInfo,
    denom: &str,
    action: &'static str,
) -> Result<Uint128, ContractError> {
    match info.funds.as_slice() {
        [coin] if coin.denom == denom && !coin.amount.is_zero() => Ok(coin.amount),
        _ => Err(ContractError::FundsRequired {
            action,
            denom: denom.to_string(),
            got: format_coins(&info.funds),
        }),
    }
}

/// Refuse attached funds (so no coin enters the contract outside its accounting).
pub fn nonpayable(info: &MessageInfo, action: &'static str) -> Result<(), ContractError> {
    if info.funds.is_empty() {
        Ok(())
    } else {
        Err(ContractError::FundsNotAccepted {
            action,
            got: format_coins(&info.funds),
        })
    }
}

/// A bank transfer from the contract.
pub fn bank_send(to: &str, denom: &str, amount: Uint128) -> CosmosMsg {
    CosmosMsg::Bank(BankMsg::Send {
        to_address: to.to_string(),
        amount: vec![Coin {
            denom: denom.to_string(),
            amount,
        }],
    })
}
