//! The run spec as the contract reads it.
//!
//! The operator deploys the spec as canonical JSON text (`protocol/rules/encoding.py`: keys sorted,
//! no whitespace, integers only in the i64 range, no floats). The contract checks that the text
//! is canonical, so that its hash, the run id, is unambiguous, and parses the sections it
//! enforces. Field names follow `protocol/rules/spec.py` (`RunSpec`); sections and fields the contract
//! does not use are ignored here (the Python model rejects unknown fields, not the contract).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ContractError;
use crate::hashing::{hex, tag, tagged_hash};
use crate::limits::{
    ARCHITECTURES, BPS_DENOMINATOR, MAX_BLOCKS, MAX_HELD, MAX_HELD_BITS, MAX_JOIN_EXTENSIONS,
    MAX_MISS_WINDOW_EPOCHS, MAX_PARTICIPANTS, MAX_SEATS_CAP, MAX_SEGMENTS, MIN_STAKE,
    MIN_UNBONDING_EPOCHS,
};
use crate::types::Uint128;

/// `return Err(ContractError::InvalidSpec(format!(...)))`.
macro_rules! invalid {
    ($($arg:tt)*) => {
        return Err(ContractError::InvalidSpec(format!($($arg)*)))
    };
}

/// `RunSpec.economics`: stake, slashing and rewards.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Economics {
    pub denom: String,
    pub min_host_stake: Uint128,
    pub min_validator_stake: Uint128,
    pub unbonding_epochs: u64,
    pub slash_invalid_bps: u16,
    pub slash_unavailable_bps: u16,
    pub slash_absent_bps: u16,
    pub slash_no_reveal_bps: u16,
    pub slash_validator_wrong_bps: u16,
    pub slash_validator_silent_bps: u16,
    /// An `unavailable` objection the final vote contradicts (at most the wrong slash).
    #[serde(default = "default_unserved_bps")]
    pub slash_validator_unserved_bps: u16,
    pub catcher_share_bps: u16,
    pub reward_per_epoch: Uint128,
    pub host_reward_share_bps: u16,
    /// W: a host's misses (epochs it joined and trained nothing) of the last W epochs rank its
    /// seat, and its absence is excused only when it missed none of them (`docs/contract.md`,
    /// "Absences"). 1 ..= `MAX_MISS_WINDOW_EPOCHS`; omitted at its default, so specs and run ids
    /// from before the field are unchanged.
    #[serde(
        default = "default_miss_window",
        skip_serializing_if = "is_default_miss_window"
    )]
    pub miss_window_epochs: u64,
}

fn default_unserved_bps() -> u16 {
    500
}

/// The default W (`protocol.rules.spec.DEFAULT_MISS_WINDOW_EPOCHS`).
pub const DEFAULT_MISS_WINDOW_EPOCHS: u64 = 8;

fn default_miss_window() -> u64 {
    DEFAULT_MISS_WINDOW_EPOCHS
}

fn is_default_miss_window(w: &u64) -> bool {
    *w == DEFAULT_MISS_WINDOW_EPOCHS
}

impl Economics {
    fn validate(&self) -> Result<(), ContractError> {
        let fractions = [
            ("slash_invalid_bps", self.slash_invalid_bps),
            ("slash_unavailable_bps", self.slash_unavailable_bps),
            ("slash_absent_bps", self.slash_absent_bps),
            ("slash_no_reveal_bps", self.slash_no_reveal_bps),
            ("slash_validator_wrong_bps", self.slash_validator_wrong_bps),
            (
                "slash_validator_silent_bps",
                self.slash_validator_silent_bps,
            ),
            (
                "slash_validator_unserved_bps",
                self.slash_validator_unserved_bps,
            ),
            ("catcher_share_bps", self.catcher_share_bps),
            ("host_reward_share_bps", self.host_reward_share_bps),
        ];
        for (name, value) in fractions.iter() {
            if *value > BPS_DENOMINATOR {
                invalid!("economics.{name} is {value}, more than {BPS_DENOMINATOR} basis points");
            }
        }
        // Withholding must never pay: not serving a challenged segment costs at least failing it;
        // not revealing a beacon secret (which could choose between two seeds) costs at least
        // being caught; not opening a committed verdict (which could hide a verdict that turned
        // out wrong) costs at least being wrong.
        if self.slash_unavailable_bps < self.slash_invalid_bps {
            invalid!(
                "economics.slash_unavailable_bps ({}) must be at least slash_invalid_bps ({})",
                self.slash_unavailable_bps,
                self.slash_invalid_bps
            );
        }
        if self.slash_no_reveal_bps < self.slash_invalid_bps {
            invalid!(
                "economics.slash_no_reveal_bps ({}) must be at least slash_invalid_bps ({})",
                self.slash_no_reveal_bps,
                self.slash_invalid_bps
            );
        }
        if self.slash_validator_silent_bps < self.slash_validator_wrong_bps {
            invalid!(
                "economics.slash_validator_silent_bps ({}) must be at least slash_validator_wrong_bps ({})",
                self.slash_validator_silent_bps,
                self.slash_validator_wrong_bps
            );
        }
        // A reader that met a real network fault may say `unavailable` in good faith: the price of
        // an `unavailable` the vote contradicts is at most that of a lie about the replay.
        if self.slash_validator_unserved_bps > self.slash_validator_wrong_bps {
            invalid!(
                "economics.slash_validator_unserved_bps ({}) must be at most slash_validator_wrong_bps ({})",
                self.slash_validator_unserved_bps,
                self.slash_validator_wrong_bps
            );
        }
        if self.miss_window_epochs < 1 || self.miss_window_epochs > MAX_MISS_WINDOW_EPOCHS {
            invalid!(
                "economics.miss_window_epochs is {}, outside 1..={MAX_MISS_WINDOW_EPOCHS}",
                self.miss_window_epochs
            );
        }
        if self.unbonding_epochs < MIN_UNBONDING_EPOCHS {
            invalid!(
                "economics.unbonding_epochs is {}, less than {MIN_UNBONDING_EPOCHS}: stake could \
                 be claimed before the epoch that may slash it is settled",
                self.unbonding_epochs
            );
        }
        let amounts = [
            ("min_host_stake", self.min_host_stake),
            ("min_validator_stake", self.min_validator_stake),
            ("reward_per_epoch", self.reward_per_epoch),
        ];
        for (name, value) in amounts.iter() {
            if value.0 > MAX_HELD {
                invalid!("economics.{name} is more than 2^{MAX_HELD_BITS} base units");
            }
        }
        // Sybils must be costly: every minimum stake is at least MIN_STAKE (a one-basis-point
        // slash of it is never floored to nothing) and at least what one member of its role can
        // earn from an epoch's reward, so no identity earns more in an epoch than it stakes.
        let (host_part, validator_part) = self.reward_parts()?;
        let minimums = [
            ("min_host_stake", "host", self.min_host_stake, host_part),
            (
                "min_validator_stake",
                "validator",
                self.min_validator_stake,
                validator_part,
            ),
        ];
        for (name, role, stake, part) in minimums.iter() {
            if stake.0 < MIN_STAKE {
                invalid!(
                    "economics.{name} is {stake}, less than {MIN_STAKE} base units: sybils would \
                     be cheap and small slashes floored to nothing"
                );
            }
            if stake < part {
                invalid!(
                    "economics.{name} is {stake}, less than the {role}s' part of \
                     reward_per_epoch ({part}): one {role} could earn more in an epoch than it \
                     stakes"
                );
            }
        }
        Ok(())
    }

    /// The most one host and one validator can earn from an epoch's reward: finalize splits
    /// `reward_per_epoch` (at most) into the hosts' part, `host_reward_share_bps` of it floored,
    /// shared by the accepted hosts, and the rest, shared by the diligent validators.
    pub fn reward_parts(&self) -> Result<(Uint128, Uint128), ContractError> {
        let hosts = self.reward_per_epoch.mul_bps(self.host_reward_share_bps);
        Ok((hosts, self.reward_per_epoch.checked_sub(hosts)?))
    }
}

/// `RunSpec.train`: the contract needs only the segment count `S = inner_steps / segment_steps`.
#[derive(Deserialize, Clone, Debug)]
pub struct Train {
    pub inner_steps: u64,
    pub segment_steps: u64,
}

/// `RunSpec.verification`: spot checks on or off; `k` picks per picker plus the last segment;
/// `seats_cap`, the most seats a committee of pickers draws; `tau` and `trap_max_distance`, the
/// window of replay distances in which a host's declared trap is valid.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Verification {
    pub enabled: bool,
    pub challenges_k: u32,
    #[serde(default = "default_seats_cap")]
    pub seats_cap: u32,
    /// Canonical decimal (`protocol.types.Dec`).
    #[serde(default = "default_tau")]
    pub tau: String,
    /// Canonical decimal, at least `tau` (the Python spec fills in 100 × tau when absent).
    #[serde(default = "default_trap_max_distance")]
    pub trap_max_distance: String,
    /// Validation windows of the probe (`trainer.probe`); > 0: a verdict on a host's last
    /// segment carries the host's probe gain (`gain_micro`); 0: the probe is off. Omitted from
    /// the canonical JSON at its default [`DEFAULT_PROBE_WINDOWS`] (`protocol.rules.spec`).
    #[serde(
        default = "default_probe_windows",
        skip_serializing_if = "is_default_probe_windows"
    )]
    pub probe_windows: u32,
    /// The delayed seed (`crate::vdf`, `docs/contract.md` "The delayed seed"): > 0, the squarings
    /// `T` of a VDF over the epoch seed, whose output picks every host's challenges for all of
    /// its pickers at once; 0 (the default, omitted from the canonical JSON): each picker's
    /// revealed secret picks its own.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub delay_squarings: u64,
    /// With a delayed seed: the blocks phase `delay` waits for the output; past them the
    /// challenges fall back to each picker's own picks (0, the default, omitted: it waits for
    /// the output however long it takes).
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub delay_blocks: u64,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// The default `verification.probe_windows` (`protocol.rules.spec.DEFAULT_PROBE_WINDOWS`).
pub const DEFAULT_PROBE_WINDOWS: u32 = 64;

fn default_probe_windows() -> u32 {
    DEFAULT_PROBE_WINDOWS
}

fn is_default_probe_windows(n: &u32) -> bool {
    *n == DEFAULT_PROBE_WINDOWS
}

fn default_seats_cap() -> u32 {
    19
}

fn default_tau() -> String {
    "0.00001".to_string()
}

fn default_trap_max_distance() -> String {
    "0.001".to_string()
}

impl Verification {
    /// Whether a trap decided `fail` with the deciding replay `distance` is a valid trap:
    /// `tau <= distance <= trap_max_distance`.
    pub fn valid_trap(&self, distance: &str) -> bool {
        use crate::epoch::handlers::cmp_decimal;
        use std::cmp::Ordering::Greater;
        cmp_decimal(&self.tau, distance) != Greater
            && cmp_decimal(distance, &self.trap_max_distance) != Greater
    }
}

/// `RunSpec.phases`: phase lengths in blocks, and how many participants an epoch needs and
/// admits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Phases {
    pub join_blocks: u64,
    pub train_blocks: u64,
    pub reveal_blocks: u64,
    /// Each verdict-commit window: `verify` and every `dispute` round.
    pub verify_blocks: u64,
    /// Each verdict-opening window: `verdict_reveal` and every `dispute_reveal` round.
    pub verdict_reveal_blocks: u64,
    pub propose_blocks: u64,
    /// How many times a join phase without its minimums is extended before the epoch is
    /// abandoned (closed unplayed, so epochs, and unbonding, go on).
    pub max_join_extensions: u32,
    pub min_hosts: u32,
    pub min_validators: u32,
    pub max_hosts: u32,
    pub max_validators: u32,
    /// Two epochs in flight (`docs/contract.md`, "Pipelined epochs"): epoch e + 1 opens from the
    /// optimistic start its committed hosts agree on while e settles. Omitted at its default
    /// (false: one epoch at a time), so specs and run ids from before the field are unchanged.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pipelined: bool,
}

impl Phases {
    fn validate(&self) -> Result<(), ContractError> {
        let lengths = [
            ("join_blocks", self.join_blocks),
            ("train_blocks", self.train_blocks),
            ("reveal_blocks", self.reveal_blocks),
            ("verify_blocks", self.verify_blocks),
            ("verdict_reveal_blocks", self.verdict_reveal_blocks),
            ("propose_blocks", self.propose_blocks),
        ];
        for (name, value) in lengths.iter() {
            if *value < 1 || *value > MAX_BLOCKS {
                invalid!("phases.{name} is {value}, outside 1..={MAX_BLOCKS}");
            }
        }
        if self.min_hosts < 1 {
            invalid!("phases.min_hosts must be at least 1");
        }
        if self.max_hosts > MAX_PARTICIPANTS || self.max_validators > MAX_PARTICIPANTS {
            invalid!(
                "phases.max_hosts and phases.max_validators must be at most {MAX_PARTICIPANTS}"
            );
        }
        if self.min_hosts > self.max_hosts || self.min_validators > self.max_validators {
            invalid!("phases.min_hosts/min_validators must not exceed max_hosts/max_validators");
        }
        if self.max_join_extensions > MAX_JOIN_EXTENSIONS {
            invalid!("phases.max_join_extensions must be at most {MAX_JOIN_EXTENSIONS}");
        }
        Ok(())
    }
}

/// `RunSpec.model`: the contract checks only that the architecture is one the project ships
/// ([`ARCHITECTURES`]); its parameters are checked by every node.
#[derive(Deserialize, Clone, Debug)]
pub struct Model {
    pub architecture: String,
}

/// The parts of `RunSpec` the contract uses.
#[derive(Deserialize, Clone, Debug)]
pub struct RunSpecView {
    pub version: u32,
    pub name: String,
    pub model: Model,
    pub economics: Economics,
    pub train: Train,
    pub verification: Verification,
    pub phases: Phases,
}

impl RunSpecView {
    /// `S`: segments per epoch (checked by [`parse_spec`]).
    pub fn segments(&self) -> u32 {
        (self.train.inner_steps / self.train.segment_steps) as u32
    }

    fn validate(&self) -> Result<(), ContractError> {
        if !ARCHITECTURES.contains(&self.model.architecture.as_str()) {
            invalid!(
                "model.architecture {:?} is not one of {ARCHITECTURES:?}",
                self.model.architecture
            );
        }
        self.economics.validate()?;
        self.phases.validate()?;
        let train = &self.train;
        if train.inner_steps < 1 || train.segment_steps < 1 {
            invalid!("train.inner_steps and train.segment_steps must be at least 1");
        }
        if train.inner_steps % train.segment_steps != 0 {
            invalid!(
                "train.inner_steps ({}) must be a multiple of train.segment_steps ({})",
                train.inner_steps,
                train.segment_steps
            );
        }
        if train.inner_steps / train.segment_steps > u64::from(MAX_SEGMENTS) {
            invalid!("at most {MAX_SEGMENTS} segments per epoch");
        }
        let ver = &self.verification;
        if ver.enabled && self.phases.min_validators < 1 {
            invalid!("verification needs phases.min_validators >= 1");
        }
        if ver.seats_cap < 1 || ver.seats_cap > MAX_SEATS_CAP {
            invalid!("verification.seats_cap must be between 1 and {MAX_SEATS_CAP}");
        }
        let decimal = crate::epoch::handlers::is_canonical_decimal;
        if !decimal(&ver.tau) || !decimal(&ver.trap_max_distance) || ver.tau == "0" {
            invalid!("verification.tau and trap_max_distance must be positive canonical decimals");
        }
        if crate::epoch::handlers::cmp_decimal(&ver.trap_max_distance, &ver.tau)
            == std::cmp::Ordering::Less
        {
            invalid!("verification.trap_max_distance must be at least tau");
        }
        if ver.challenges_k > MAX_SEGMENTS {
            invalid!("verification.challenges_k must be at most {MAX_SEGMENTS}");
        }
        if ver.delay_blocks > MAX_BLOCKS {
            invalid!("verification.delay_blocks must be at most {MAX_BLOCKS}");
        }
        if ver.delay_squarings > crate::vdf::MAX_SQUARINGS {
            invalid!(
                "verification.delay_squarings must be at most 2^40 ({})",
                crate::vdf::MAX_SQUARINGS
            );
        }
        Ok(())
    }
}

/// A spec that passed every check, with its run id.
pub struct ParsedSpec {
    pub run_id: String,
    pub view: RunSpecView,
}

/// Check that `spec_json` is canonical, compute the run id and parse the sections we need.
pub fn parse_spec(spec_json: &str) -> Result<ParsedSpec, ContractError> {
    let value: Value = serde_json::from_str(spec_json)
        .map_err(|e| ContractError::InvalidSpec(format!("spec_json is not valid JSON: {e}")))?;
    check_integers(&value, "$")?;
    // serde_json's Map is a BTreeMap here (no `preserve_order`), so re-serializing sorts keys
    // and drops whitespace: equal text means the input was canonical.
    let canonical = serde_json::to_string(&value).expect("serialize JSON value");
    if canonical != spec_json {
        invalid!(
            "spec_json is not canonical JSON (keys sorted, no whitespace, minimal escapes); \
             encode it with protocol.rules.encoding.canonical_json"
        );
    }
    let view: RunSpecView = serde_json::from_value(value).map_err(|e| {
        ContractError::InvalidSpec(format!("spec_json does not match the run spec: {e}"))
    })?;
    if view.version != 1 {
        invalid!(
            "spec version {} is not supported (expected 1)",
            view.version
        );
    }
    view.validate()?;
    Ok(ParsedSpec {
        run_id: run_id(spec_json.as_bytes()),
        view,
    })
}

/// hex(H("run-spec", spec bytes)): the run id.
pub fn run_id(spec_bytes: &[u8]) -> String {
    hex(&tagged_hash(tag::RUN_SPEC, &[spec_bytes]))
}

/// Canonical JSON has integers in the i64 range only: floats (including `-0`, `1e3`) and
/// integers beyond i64 are refused, as `protocol.rules.encoding` refuses them.
fn check_integers(value: &Value, path: &str) -> Result<(), ContractError> {
    match value {
        Value::Number(n) => {
            if !n.is_i64() {
                invalid!("spec_json: {path} = {n} is not an integer in the signed 64-bit range (floats are not canonical)");
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                check_integers(item, &format!("{path}[{i}]"))?;
            }
        }
        Value::Object(map) => {
            for (key, item) in map.iter() {
                check_integers(item, &format!("{path}.{key}"))?;
            }
        }
        _ => {}
    }
    Ok(())
}
