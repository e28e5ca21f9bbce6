//! The run spec as the contract reads it.
//!
//! The operator deploys the spec as canonical JSON text (`protocol/encoding.py`: keys sorted,
//! no whitespace, integers only in the i64 range, no floats). The contract checks that the text
//! is canonical, so that its hash, the run id, is unambiguous, and parses the sections it
//! enforces. Field names follow `protocol/spec.py` (`RunSpec`); sections and fields the contract
//! does not use are ignored here (the Python model rejects unknown fields, not the contract).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{fail, ContractError};
use crate::types::Uint128;

/// Domain tag of the run id: `sha256("veriloco:run-spec" || 0x00 || spec_json)`
/// (`protocol/hashing.py`, `Tag.RUN_SPEC`).
const RUN_SPEC_TAG: &[u8] = b"veriloco:run-spec\x00";

/// Basis points in one whole.
pub const BPS_ONE: u16 = 10_000;

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
    pub catcher_share_bps: u16,
    pub reward_per_epoch: Uint128,
    pub host_reward_share_bps: u16,
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
            ("catcher_share_bps", self.catcher_share_bps),
            ("host_reward_share_bps", self.host_reward_share_bps),
        ];
        for (name, value) in fractions.iter() {
            if *value > BPS_ONE {
                fail!("economics.{name} is {value}, more than {BPS_ONE} basis points");
            }
        }
        Ok(())
    }
}

/// The parts of `RunSpec` the contract uses. Epoch logic adds `phases`, `verification` and
/// `train` here.
#[derive(Deserialize, Clone, Debug)]
pub struct RunSpecView {
    pub version: u32,
    pub name: String,
    pub economics: Economics,
}

/// A spec that passed every check, with its run id.
pub struct ParsedSpec {
    pub run_id: String,
    pub view: RunSpecView,
}

/// Check that `spec_json` is canonical, compute the run id and parse the sections we need.
pub fn parse_spec(spec_json: &str) -> Result<ParsedSpec, ContractError> {
    let value: Value = serde_json::from_str(spec_json)
        .map_err(|e| ContractError::new(format!("spec_json is not valid JSON: {e}")))?;
    check_integers(&value, "$")?;
    // serde_json's Map is a BTreeMap here (no `preserve_order`), so re-serializing sorts keys
    // and drops whitespace: equal text means the input was canonical.
    let canonical = serde_json::to_string(&value).expect("serialize JSON value");
    if canonical != spec_json {
        fail!(
            "spec_json is not canonical JSON (keys sorted, no whitespace, minimal escapes); \
             encode it with protocol.encoding.canonical_json"
        );
    }
    let view: RunSpecView = serde_json::from_value(value)
        .map_err(|e| ContractError::new(format!("spec_json does not match the run spec: {e}")))?;
    if view.version != 1 {
        fail!(
            "spec version {} is not supported (expected 1)",
            view.version
        );
    }
    view.economics.validate()?;
    Ok(ParsedSpec {
        run_id: run_id(spec_json.as_bytes()),
        view,
    })
}

/// hex(sha256("veriloco:run-spec" || 0x00 || spec bytes)).
pub fn run_id(spec_bytes: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(RUN_SPEC_TAG);
    hasher.update(spec_bytes);
    hex(&hasher.finalize())
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

/// True for 64 lowercase hex characters (a sha256 digest, `protocol.hashing.HexDigest`).
pub fn is_hex_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Canonical JSON has integers in the i64 range only: floats (including `-0`, `1e3`) and
/// integers beyond i64 are refused, as `protocol.encoding` refuses them.
fn check_integers(value: &Value, path: &str) -> Result<(), ContractError> {
    match value {
        Value::Number(n) => {
            if !n.is_i64() {
                fail!("spec_json: {path} = {n} is not an integer in the signed 64-bit range (floats are not canonical)");
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
