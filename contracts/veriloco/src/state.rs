//! What the contract stores, and under which keys.
//!
//! Keys: fixed ASCII names for singletons, `member/` + address for members (so a prefix scan
//! yields members ordered by address). Values are JSON. The per-epoch records live in
//! `records.rs` under their own short prefixes.

use serde::{Deserialize, Serialize};

use crate::error::ContractError;
use crate::spec::{Economics, Phases, Verification};
use crate::storage::{self, Order};
use crate::types::{is_zero, Uint128};

const CONFIG_KEY: &[u8] = b"config";
const SPEC_KEY: &[u8] = b"spec";
const TOTALS_KEY: &[u8] = b"totals";
const CURRENT_EPOCH_KEY: &[u8] = b"current_epoch";
/// cw2's key for contract name and version, so explorers and migrations can read them.
const CONTRACT_INFO_KEY: &[u8] = b"contract_info";
const MEMBER_PREFIX: &[u8] = b"member/";
const MEMBER_TOTALS_PREFIX: &[u8] = b"mt/";
const ELIGIBLE_KEY: &[u8] = b"eligible";

/// Fixed at instantiation.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Config {
    /// hex(sha256("veriloco:run-spec\0" || spec_json)).
    pub run_id: String,
    /// θ_0: hash of the initial global model (64 lowercase hex).
    pub initial_model_hash: String,
    /// The only denom the contract accepts and pays.
    pub denom: String,
    /// Receives the treasury's share of slashed funds.
    pub treasury: String,
    pub admin: Option<String>,
    pub economics: Economics,
    pub phases: Phases,
    pub verification: Verification,
    /// S = train.inner_steps / train.segment_steps: what every commitment must declare.
    pub segments: u32,
}

impl Config {
    /// The stake a member of `role` needs to join an epoch.
    pub fn min_stake(&self, role: Role) -> Uint128 {
        match role {
            Role::Host => self.economics.min_host_stake,
            Role::Validator => self.economics.min_validator_stake,
        }
    }

    /// May a member of `role` with `bonded` stake join an epoch? (At least the minimum, and never
    /// with nothing at stake.)
    pub fn is_eligible(&self, role: Role, bonded: Uint128) -> bool {
        !bonded.is_zero() && bonded >= self.min_stake(role)
    }
}

/// The contract's books. Every coin the contract holds in `denom` is in one of these:
/// bank balance == bonded + unbonding + reward_pool. (Slashed funds are paid to catchers and
/// the treasury in the same message that slashes, so nothing else is held.)
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct Totals {
    /// Sum of every member's `bonded`.
    pub bonded: Uint128,
    /// Sum of every member's unbonding entries (not yet claimed; still slashable).
    pub unbonding: Uint128,
    /// Funded by `fund_rewards`; paid out by epoch settlement.
    pub reward_pool: Uint128,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Host,
    Validator,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Host => "host",
            Role::Validator => "validator",
        }
    }
}

/// Stake on its way out: paid by `claim` once `release_epoch <= current_epoch`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct UnbondingEntry {
    pub amount: Uint128,
    pub release_epoch: u64,
}

/// A host or validator, as stored under `member/<address>`. The role is fixed by the first bond.
/// Lifetime totals live in a separate small record ([`MemberTotals`]) so that paying a reward
/// does not rewrite this one.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Member {
    /// From the key; not stored in the value.
    #[serde(skip)]
    pub address: String,
    pub role: Role,
    /// Where the member serves artifacts (hosts) or can be reached (validators).
    pub endpoint: String,
    pub bonded: Uint128,
    /// Ordered by release epoch; still slashable until claimed.
    pub unbonding: Vec<UnbondingEntry>,
}

/// Everything ever slashed from and paid to a member, under `mt/<address>`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberTotals {
    #[serde(rename = "s", default, skip_serializing_if = "is_zero")]
    pub slashed: Uint128,
    #[serde(rename = "r", default, skip_serializing_if = "is_zero")]
    pub rewarded: Uint128,
}

/// A member as queries return it (`protocol.views.Member`, field for field).
#[derive(Serialize, Clone, Debug)]
pub struct MemberView {
    pub address: String,
    pub role: Role,
    pub endpoint: String,
    pub bonded: Uint128,
    pub unbonding: Vec<UnbondingEntry>,
    pub slashed_total: Uint128,
    pub rewarded_total: Uint128,
}

impl Member {
    /// Sum of entries released at or before `epoch`.
    pub fn claimable(&self, epoch: u64) -> Result<Uint128, ContractError> {
        self.unbonding
            .iter()
            .filter(|e| e.release_epoch <= epoch)
            .try_fold(Uint128::zero(), |acc, e| acc.checked_add(e.amount))
    }
}

/// How many members could join an epoch now (bonded at least the minimum of their role). The
/// join phase closes early once all of them (up to the caps) joined. Kept up to date by every
/// change of a member's bonded stake: bond, unbond, slash.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct Eligible {
    pub hosts: u32,
    pub validators: u32,
}

pub fn load_eligible() -> Result<Eligible, ContractError> {
    Ok(storage::load(ELIGIBLE_KEY)?.unwrap_or_default())
}

pub fn save_eligible(eligible: &Eligible) {
    storage::save(ELIGIBLE_KEY, eligible);
}

/// Adjust `eligible` for a member of `role` whose bonded stake went from `before` to `after`.
/// Returns whether it changed (the caller saves it).
pub fn track_eligibility(
    config: &Config,
    eligible: &mut Eligible,
    role: Role,
    before: Uint128,
    after: Uint128,
) -> bool {
    let was = config.is_eligible(role, before);
    let is = config.is_eligible(role, after);
    if was == is {
        return false;
    }
    let count = match role {
        Role::Host => &mut eligible.hosts,
        Role::Validator => &mut eligible.validators,
    };
    if is {
        *count += 1;
    } else {
        *count -= 1;
    }
    true
}

/// [`track_eligibility`] for one change, loading and saving the counts.
pub fn update_eligibility(
    config: &Config,
    role: Role,
    before: Uint128,
    after: Uint128,
) -> Result<(), ContractError> {
    let mut eligible = load_eligible()?;
    if track_eligibility(config, &mut eligible, role, before, after) {
        save_eligible(&eligible);
    }
    Ok(())
}

/// The name/version record cw2 defines (`{"contract": ..., "version": ...}`).
#[derive(Serialize, Deserialize)]
pub struct ContractVersion {
    pub contract: String,
    pub version: String,
}

fn must_exist<T>(value: Option<T>, what: &str) -> Result<T, ContractError> {
    value.ok_or_else(|| ContractError::new(format!("{what} missing: contract not instantiated")))
}

pub fn load_config() -> Result<Config, ContractError> {
    must_exist(storage::load(CONFIG_KEY)?, "config")
}

pub fn save_config(config: &Config) {
    storage::save(CONFIG_KEY, config);
}

/// The spec text exactly as deployed (its hash is the run id).
pub fn load_spec_json() -> Result<String, ContractError> {
    let bytes = must_exist(storage::get(SPEC_KEY), "spec")?;
    String::from_utf8(bytes).map_err(|_| ContractError::new("stored spec is not UTF-8"))
}

pub fn save_spec_json(spec_json: &str) {
    storage::set(SPEC_KEY, spec_json.as_bytes());
}

pub fn load_totals() -> Result<Totals, ContractError> {
    must_exist(storage::load(TOTALS_KEY)?, "totals")
}

pub fn save_totals(totals: &Totals) {
    storage::save(TOTALS_KEY, totals);
}

/// The epoch in progress (unbonding counts in epochs too).
pub fn current_epoch() -> Result<u64, ContractError> {
    Ok(storage::load(CURRENT_EPOCH_KEY)?.unwrap_or(0))
}

pub fn save_current_epoch(epoch: u64) {
    storage::save(CURRENT_EPOCH_KEY, &epoch);
}

pub fn save_contract_version() {
    storage::save(
        CONTRACT_INFO_KEY,
        &ContractVersion {
            contract: env!("CARGO_PKG_NAME").to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
    );
}

fn member_key(address: &str) -> Vec<u8> {
    let mut key = MEMBER_PREFIX.to_vec();
    key.extend_from_slice(address.as_bytes());
    key
}

fn totals_key(address: &str) -> Vec<u8> {
    let mut key = MEMBER_TOTALS_PREFIX.to_vec();
    key.extend_from_slice(address.as_bytes());
    key
}

fn parse_member(address: &str, value: &[u8]) -> Result<Member, ContractError> {
    let mut member: Member = serde_json::from_slice(value)
        .map_err(|e| ContractError::new(format!("corrupt member record: {e}")))?;
    member.address = address.to_string();
    Ok(member)
}

pub fn load_member(address: &str) -> Result<Option<Member>, ContractError> {
    match storage::get(&member_key(address)) {
        None => Ok(None),
        Some(value) => parse_member(address, &value).map(Some),
    }
}

pub fn save_member(member: &Member) {
    storage::save(&member_key(&member.address), member);
}

pub fn load_member_totals(address: &str) -> Result<MemberTotals, ContractError> {
    Ok(storage::load(&totals_key(address))?.unwrap_or_default())
}

pub fn save_member_totals(address: &str, totals: &MemberTotals) {
    storage::save(&totals_key(address), totals);
}

fn view(member: Member) -> Result<MemberView, ContractError> {
    let totals = load_member_totals(&member.address)?;
    Ok(MemberView {
        address: member.address,
        role: member.role,
        endpoint: member.endpoint,
        bonded: member.bonded,
        unbonding: member.unbonding,
        slashed_total: totals.slashed,
        rewarded_total: totals.rewarded,
    })
}

/// The member at `address` as queries show it, or None.
pub fn member_view(address: &str) -> Result<Option<MemberView>, ContractError> {
    load_member(address)?.map(view).transpose()
}

/// Members in address order, starting after `start_after`; stops after `limit` records that
/// pass `keep`.
pub fn members_page(
    start_after: Option<&str>,
    limit: usize,
    keep: impl Fn(&Member) -> bool,
) -> Result<Vec<MemberView>, ContractError> {
    let mut out: Vec<Member> = Vec::new();
    if limit == 0 {
        return Ok(Vec::new());
    }
    let skip = MEMBER_PREFIX.len();
    for (key, value) in storage::prefix_range(
        MEMBER_PREFIX,
        start_after.map(|s| s.as_bytes()),
        Order::Ascending,
    ) {
        let address = String::from_utf8(key[skip..].to_vec())
            .map_err(|_| ContractError::new("corrupt member key"))?;
        let member = parse_member(&address, &value)?;
        if keep(&member) {
            out.push(member);
            if out.len() == limit {
                break;
            }
        }
    }
    out.into_iter().map(view).collect()
}
