//! The contract's messages and query answers: its public JSON interface.
//!
//! Messages are externally tagged, snake_case (`{"bond": {"role": "host", "endpoint": "..."}}`),
//! unknown fields are errors (a typo must not be silently ignored), amounts are decimal strings.

use serde::{Deserialize, Serialize};

use crate::state::{Member, Role};
use crate::types::Uint128;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct InstantiateMsg {
    /// The run spec as canonical JSON text; its tagged hash is the run id.
    pub spec_json: String,
    /// θ_0, 64 lowercase hex.
    pub initial_model_hash: String,
    /// Must equal `economics.denom` of the spec.
    pub denom: String,
    pub treasury: String,
    #[serde(default)]
    pub admin: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ExecuteMsg {
    /// Stake the attached funds as `role` and set the endpoint.
    Bond { role: Role, endpoint: String },
    /// Start unbonding `amount` of bonded stake.
    Unbond { amount: Uint128 },
    /// Pay out every unbonding entry that has been released.
    Claim {},
    /// Add the attached funds to the reward pool.
    FundRewards {},
}

#[derive(Deserialize, Debug)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum QueryMsg {
    Config {},
    Member {
        address: String,
    },
    Members {
        #[serde(default)]
        role: Option<Role>,
        #[serde(default)]
        start_after: Option<String>,
        #[serde(default)]
        limit: Option<u32>,
    },
    Accounting {},
}

/// Answer to `config {}` (`protocol.views.Config`).
#[derive(Serialize)]
pub struct ConfigResponse {
    pub run_id: String,
    pub spec_json: String,
    pub initial_model_hash: String,
    pub denom: String,
    pub treasury: String,
    pub admin: Option<String>,
}

/// Answer to `members {...}`: members ordered by address.
#[derive(Serialize)]
pub struct MembersResponse {
    pub members: Vec<Member>,
}

/// Answer to `accounting {}` (`protocol.views.Accounting`): everything the contract holds, by
/// purpose. Their sum equals the contract's bank balance in the run's denom (more only if
/// someone sent coins to the contract outside its messages).
#[derive(Serialize)]
pub struct AccountingResponse {
    pub bonded: Uint128,
    pub unbonding: Uint128,
    pub reward_pool: Uint128,
}
