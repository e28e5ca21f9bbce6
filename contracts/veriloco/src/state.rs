//! The run-wide records: singletons (config, spec, books, eligibility counts, the current epoch,
//! cw2's version record) and one pair of records per member, as [`Item`]s and [`Map`]s.
//!
//! Keys: fixed ASCII names for singletons, `member/` + address for members (so a range yields
//! members ordered by address), `mt/` + address for their lifetime totals. Values are JSON, except
//! the spec, which is stored as the deployed text. The per-epoch records are in `records.rs`.

use serde::{Deserialize, Serialize};

use crate::deps::{Order, Storage};
use crate::error::ContractError;
use crate::spec::{Economics, Phases, Verification};
use crate::storage::{Item, Map, Raw};
use crate::types::{is_zero, Uint128};

/// Fixed at instantiation.
pub const CONFIG: Item<Config> = Item::new(b"config");
/// The spec text exactly as deployed (its hash is the run id).
pub const SPEC: Item<String, Raw> = Item::new(b"spec");
pub const TOTALS: Item<Totals> = Item::new(b"totals");
pub const ELIGIBLE: Item<Eligible> = Item::new(b"eligible");
/// The epoch in progress (unbonding counts in epochs too); absent means 0.
pub const CURRENT_EPOCH: Item<u64> = Item::new(b"current_epoch");
/// Pipelined runs: the older of two epochs in flight, still settling while the current one
/// trains; absent when only the current epoch is open (`epoch::pipeline`).
pub const SETTLING: Item<u64> = Item::new(b"settling_epoch");
/// cw2's key for contract name and version, so explorers and migrations can read them; written
/// at instantiation and by every migration (`upgrade.rs`).
pub const CONTRACT_INFO: Item<ContractVersion> = Item::new(b"contract_info");
/// The members by address (the address itself is the key, not part of the value).
pub const MEMBERS: Map<&str, Member> = Map::new(b"member/");
/// Their lifetime totals, apart so that paying a reward does not rewrite the member.
pub const MEMBER_TOTALS: Map<&str, MemberTotals> = Map::new(b"mt/");
/// Each member's standby revealer (`set_standby`): the one address that may reveal for it.
pub const STANDBYS: Map<&str, String> = Map::new(b"sy/");

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
    /// The chain admin the deployer declared (the `admin` it also gave `MsgInstantiateContract`),
    /// shown by `config {}`; None: deployed without one, an immutable run. The contract cannot
    /// check it (wasmd tells a contract nothing about its admin, and `migrate` nothing about its
    /// sender): the chain's record is what counts (`docs/chain.md`, "Upgrades").
    pub admin: Option<String>,
    pub economics: Economics,
    pub phases: Phases,
    pub verification: Verification,
    /// S = train.inner_steps / train.segment_steps: what every commitment must declare.
    pub segments: u32,
    /// The most records (participants, or reveals) one execute processes of a paged close
    /// (closing `reveal`, finalize): what bounds every transaction's work, whatever the epoch's
    /// size. Set at instantiation (`settle_page`, default [`DEFAULT_SETTLE_PAGE`]).
    #[serde(default = "default_settle_page")]
    pub settle_page: u32,
}

/// The default page of a paged close: `docs/benchmarks.md` has the gas of a page.
pub const DEFAULT_SETTLE_PAGE: u32 = 64;

fn default_settle_page() -> u32 {
    DEFAULT_SETTLE_PAGE
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

impl Totals {
    /// Refuse an inflow of `amount` that would make the contract hold more than `MAX_HELD`
    /// (bonds, unbonding entries and the reward pool): every later sum and product of finalize
    /// then fits in 128 bits, so an overflow can never refuse a finalize and lock the funds.
    pub fn admit(&self, amount: Uint128, action: &'static str) -> Result<(), ContractError> {
        let held = self
            .bonded
            .0
            .checked_add(self.unbonding.0)
            .and_then(|x| x.checked_add(self.reward_pool.0))
            .and_then(|x| x.checked_add(amount.0));
        match held {
            Some(total) if total <= crate::limits::MAX_HELD => Ok(()),
            _ => Err(ContractError::refused(
                action,
                format!(
                    "the contract would hold more than 2^{} base units",
                    crate::limits::MAX_HELD_BITS
                ),
            )),
        }
    }
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
    /// From the key ([`load_member`] fills it in); not stored in the value.
    #[serde(skip)]
    pub address: String,
    pub role: Role,
    /// Where the member serves artifacts (hosts) or can be reached (validators).
    pub endpoint: String,
    pub bonded: Uint128,
    /// Ordered by release epoch; still slashable until claimed.
    pub unbonding: Vec<UnbondingEntry>,
    /// The last epoch this host missed: it joined and trained nothing (sent `sit_out`, or was
    /// absent). Its misses of the last `economics.miss_window_epochs` epochs rank its seat at
    /// `join` and decide whether an absence is excused (`docs/contract.md`, "Seats by stake",
    /// "Absences"). Stored under `sat_out`, the key of the build that counted sit-outs only, so a
    /// member it stored reads as one miss at that epoch; absent for a host that never missed.
    #[serde(rename = "sat_out", default, skip_serializing_if = "Option::is_none")]
    pub last_miss: Option<u64>,
    /// The misses of the [`MISS_HISTORY`] epochs before `last_miss`: bit i set = missed epoch
    /// `last_miss − 1 − i` (O(1) per member, whatever its history). Omitted while 0, so a
    /// member with one miss is stored as that build stored it.
    #[serde(rename = "mb", default, skip_serializing_if = "is_zero_u64")]
    pub earlier_misses: u64,
}

/// How many epochs before its last miss a member record remembers: the longest
/// `economics.miss_window_epochs` (`MAX_MISS_WINDOW_EPOCHS`).
pub const MISS_HISTORY: u64 = crate::limits::MAX_MISS_WINDOW_EPOCHS;

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
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
    /// Its stake a slash takes its share of: bonded plus every unbonding entry not yet claimed.
    pub fn at_risk(&self) -> Result<Uint128, ContractError> {
        self.unbonding
            .iter()
            .try_fold(self.bonded, |acc, e| acc.checked_add(e.amount))
    }

    /// Record a miss in `epoch` (idempotent, in any order; a miss more than [`MISS_HISTORY`]
    /// epochs before the last one is forgotten, as no window reaches it).
    pub fn record_miss(&mut self, epoch: u64) {
        let last = match self.last_miss {
            None => {
                self.last_miss = Some(epoch);
                self.earlier_misses = 0;
                return;
            }
            Some(last) => last,
        };
        if epoch > last {
            let gap = epoch - last;
            let shifted = if gap < 64 {
                self.earlier_misses << gap
            } else {
                0
            };
            let old_last = if gap <= MISS_HISTORY {
                1u64 << (gap - 1)
            } else {
                0
            };
            self.earlier_misses = shifted | old_last;
            self.last_miss = Some(epoch);
        } else if epoch < last && last - epoch <= MISS_HISTORY {
            self.earlier_misses |= 1u64 << (last - epoch - 1);
        }
    }

    /// How many of the `window` epochs before `epoch` (`epoch − window ..= epoch − 1`) this
    /// member missed. Exact for every `window ≤ MISS_HISTORY`.
    pub fn misses_before(&self, epoch: u64, window: u64) -> u32 {
        let last = match self.last_miss {
            Some(last) => last,
            None => return 0,
        };
        let first = epoch.saturating_sub(window);
        let in_window = |m: u64| m >= first && m < epoch;
        let earlier = (0..MISS_HISTORY)
            .filter(|i| (self.earlier_misses >> i) & 1 == 1)
            .filter_map(|i| last.checked_sub(i + 1))
            .filter(|m| in_window(*m))
            .count();
        earlier as u32 + u32::from(in_window(last))
    }

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
    storage: &mut dyn Storage,
    config: &Config,
    role: Role,
    before: Uint128,
    after: Uint128,
) -> Result<(), ContractError> {
    let mut eligible = load_eligible(storage)?;
    if track_eligibility(config, &mut eligible, role, before, after) {
        ELIGIBLE.save(storage, &eligible);
    }
    Ok(())
}

pub fn load_eligible(storage: &dyn Storage) -> Result<Eligible, ContractError> {
    Ok(ELIGIBLE.may_load(storage)?.unwrap_or_default())
}

/// The name/version record cw2 defines (`{"contract": ..., "version": ...}`).
#[derive(Serialize, Deserialize)]
pub struct ContractVersion {
    pub contract: String,
    pub version: String,
}

impl ContractVersion {
    /// This build's name and version.
    pub fn this() -> ContractVersion {
        ContractVersion {
            contract: crate::upgrade::CONTRACT_NAME.to_string(),
            version: crate::upgrade::CONTRACT_VERSION.to_string(),
        }
    }
}

/// The epoch in progress.
pub fn current_epoch(storage: &dyn Storage) -> Result<u64, ContractError> {
    Ok(CURRENT_EPOCH.may_load(storage)?.unwrap_or(0))
}

/// The oldest epoch not yet settled: the settling one, else the current one. Unbonding entries
/// release against it, so none is claimable before every epoch that could slash it settled.
pub fn unsettled_epoch(storage: &dyn Storage) -> Result<u64, ContractError> {
    match SETTLING.may_load(storage)? {
        Some(e) => Ok(e),
        None => current_epoch(storage),
    }
}

/// The member at `address`, with its address filled in.
pub fn load_member(storage: &dyn Storage, address: &str) -> Result<Option<Member>, ContractError> {
    Ok(MEMBERS.may_load(storage, address)?.map(|mut member| {
        member.address = address.to_string();
        member
    }))
}

pub fn save_member(storage: &mut dyn Storage, member: &Member) {
    MEMBERS.save(storage, &member.address, member);
}

pub fn load_member_totals(
    storage: &dyn Storage,
    address: &str,
) -> Result<MemberTotals, ContractError> {
    Ok(MEMBER_TOTALS
        .may_load(storage, address)?
        .unwrap_or_default())
}

fn view(storage: &dyn Storage, member: Member) -> Result<MemberView, ContractError> {
    let totals = load_member_totals(storage, &member.address)?;
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
pub fn member_view(
    storage: &dyn Storage,
    address: &str,
) -> Result<Option<MemberView>, ContractError> {
    load_member(storage, address)?
        .map(|m| view(storage, m))
        .transpose()
}

/// Members in address order, starting after `start_after`; stops after `limit` records that
/// pass `keep`.
pub fn members_page(
    storage: &dyn Storage,
    start_after: Option<&str>,
    limit: usize,
    keep: impl Fn(&Member) -> bool,
) -> Result<Vec<MemberView>, ContractError> {
    let mut out: Vec<Member> = Vec::new();
    if limit == 0 {
        return Ok(Vec::new());
    }
    for record in MEMBERS.range(storage, start_after, Order::Ascending) {
        let (address, mut member) = record?;
        member.address = address;
        if keep(&member) {
            out.push(member);
            if out.len() == limit {
                break;
            }
        }
    }
    out.into_iter().map(|m| view(storage, m)).collect()
}
