//! The JSON types exchanged with the VM, matching cosmwasm-std 2.1 field for field
//! (`packages/std/src/types.rs`, `coin.rs`, `results/{contract_result,response,submessages,
//! cosmos_msg,events}.rs`, `math/uint128.rs`, `binary.rs`, `timestamp.rs`).
//!
//! Incoming types ignore unknown fields, as cosmwasm-std does, so a newer VM can add fields.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::error::ContractError;
use crate::limits::BPS_DENOMINATOR;

/// An unsigned 128-bit amount, as a decimal string in JSON (`"1500"`), like cosmwasm's Uint128.
///
/// Parsing is strict: digits only, no sign, no leading zeros (the canonical form the Python side
/// writes), so one amount has one spelling.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Uint128(pub u128);

impl Uint128 {
    pub const fn zero() -> Self {
        Uint128(0)
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// Parse the canonical decimal form.
    pub fn parse(text: &str) -> Result<Self, String> {
        let canonical = !text.is_empty()
            && text.len() <= 39
            && text.bytes().all(|b| b.is_ascii_digit())
            && (text == "0" || !text.starts_with('0'));
        if !canonical {
            return Err(format!(
                "{text:?} is not an amount (a decimal integer string without sign or leading zeros)"
            ));
        }
        text.parse::<u128>()
            .map(Uint128)
            .map_err(|_| format!("{text:?} does not fit in 128 bits"))
    }

    pub fn checked_add(self, other: Uint128) -> Result<Uint128, ContractError> {
        self.0
            .checked_add(other.0)
            .map(Uint128)
            .ok_or_else(|| ContractError::Overflow(format!("{self} + {other}")))
    }

    pub fn checked_sub(self, other: Uint128) -> Result<Uint128, ContractError> {
        self.0
            .checked_sub(other.0)
            .map(Uint128)
            .ok_or_else(|| ContractError::Underflow(format!("{self} - {other}")))
    }

    /// `floor(self * bps / 10000)`, exact and without overflow for every u128.
    pub fn mul_bps(self, bps: u16) -> Uint128 {
        let one = u128::from(BPS_DENOMINATOR);
        let bps = u128::from(bps).min(one);
        Uint128(self.0 / one * bps + self.0 % one * bps / one)
    }

    /// `self * n`, refusing overflow.
    pub fn checked_mul(self, n: u128) -> Result<Uint128, ContractError> {
        self.0
            .checked_mul(n)
            .map(Uint128)
            .ok_or_else(|| ContractError::Overflow(format!("{self} * {n}")))
    }

    /// `floor(self / n)`; 0 when `n` is 0 (nobody to share with).
    pub fn div_floor(self, n: u128) -> Uint128 {
        if n == 0 {
            Uint128::zero()
        } else {
            Uint128(self.0 / n)
        }
    }
}

/// For `#[serde(skip_serializing_if = "...")]`: stored records leave zero amounts out.
pub fn is_zero(amount: &Uint128) -> bool {
    amount.is_zero()
}

impl fmt::Display for Uint128 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl Serialize for Uint128 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.to_string())
    }
}

impl<'de> Deserialize<'de> for Uint128 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct AmountVisitor;
        impl<'de> Visitor<'de> for AmountVisitor {
            type Value = Uint128;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an amount as a decimal string, e.g. \"1000\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Uint128, E> {
                Uint128::parse(v).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(AmountVisitor)
    }
}

/// An unsigned 64-bit integer as a decimal string in JSON (cosmwasm's Uint64, used by
/// Timestamp: nanoseconds since the Unix epoch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Uint64(pub u64);

impl Serialize for Uint64 {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0.to_string())
    }
}

impl<'de> Deserialize<'de> for Uint64 {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct U64Visitor;
        impl<'de> Visitor<'de> for U64Visitor {
            type Value = Uint64;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a u64 as a decimal string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Uint64, E> {
                v.parse::<u64>().map(Uint64).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(U64Visitor)
    }
}

/// Bytes, as standard base64 with padding in JSON (cosmwasm's Binary).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Binary(pub Vec<u8>);

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with `=` padding.
pub fn base64_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity((data.len() + 2) / 3 * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

impl Serialize for Binary {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&base64_encode(&self.0))
    }
}

/// A block of the chain as the contract sees it.
#[derive(Deserialize, Clone, Debug)]
pub struct BlockInfo {
    pub height: u64,
    /// Nanoseconds since the Unix epoch.
    pub time: Uint64,
    pub chain_id: String,
}

#[derive(Deserialize, Clone, Debug)]
pub struct TransactionInfo {
    pub index: u32,
}

#[derive(Deserialize, Clone, Debug)]
pub struct ContractInfo {
    pub address: String,
}

/// The first argument of every entry point.
#[derive(Deserialize, Clone, Debug)]
pub struct Env {
    pub block: BlockInfo,
    /// None in queries (and in some system calls).
    pub transaction: Option<TransactionInfo>,
    pub contract: ContractInfo,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Coin {
    pub denom: String,
    pub amount: Uint128,
}

impl fmt::Display for Coin {
    /// The Cosmos SDK spelling, e.g. `100inj`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.amount, self.denom)
    }
}

/// Who called, and what they attached (already moved to the contract by the chain).
#[derive(Deserialize, Clone, Debug)]
pub struct MessageInfo {
    pub sender: String,
    pub funds: Vec<Coin>,
}

/// `{"ok": ...}` or `{"error": "..."}`.
#[derive(Serialize)]
pub enum ContractResult<T> {
    #[serde(rename = "ok")]
    Ok(T),
    #[serde(rename = "error")]
    Err(String),
}

#[derive(Serialize, Clone, Debug)]
pub struct Attribute {
    pub key: String,
    pub value: String,
}

/// A custom event; the chain prefixes its type with `wasm-`.
#[derive(Serialize, Clone, Debug)]
pub struct Event {
    #[serde(rename = "type")]
    pub ty: String,
    pub attributes: Vec<Attribute>,
}

impl Event {
    pub fn new(ty: &str) -> Self {
        Event {
            ty: ty.to_string(),
            attributes: Vec::new(),
        }
    }

    pub fn add_attribute(mut self, key: &str, value: impl ToString) -> Self {
        self.attributes.push(Attribute {
            key: key.to_string(),
            value: value.to_string(),
        });
        self
    }
}

#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "snake_case")]
pub enum BankMsg {
    Send {
        to_address: String,
        amount: Vec<Coin>,
    },
}

/// The messages the contract dispatches. Only bank sends so far; the JSON shape is cosmwasm's
/// `CosmosMsg`, so adding `wasm` or others later keeps the wire format.
#[derive(Serialize, Clone, Debug)]
#[serde(rename_all = "snake_case")]
pub enum CosmosMsg {
    Bank(BankMsg),
}

/// When the contract wants a reply to a sub-message (cosmwasm's `ReplyOn`); the contract sends
/// only `never` so far.
#[derive(Serialize, Clone, Copy, Debug)]
#[serde(rename_all = "snake_case")]
pub enum ReplyOn {
    Always,
    Error,
    Success,
    Never,
}

/// A message plus reply settings (cosmwasm 2.x: `payload` is always serialized).
#[derive(Serialize, Clone, Debug)]
pub struct SubMsg {
    pub id: u64,
    pub payload: Binary,
    pub msg: CosmosMsg,
    pub gas_limit: Option<u64>,
    pub reply_on: ReplyOn,
}

impl SubMsg {
    /// A message without a reply: if it fails, the whole transaction fails.
    pub fn never(msg: CosmosMsg) -> SubMsg {
        SubMsg {
            id: 0,
            payload: Binary::default(),
            msg,
            gas_limit: None,
            reply_on: ReplyOn::Never,
        }
    }
}

/// What instantiate and execute return.
#[derive(Serialize, Clone, Debug, Default)]
pub struct Response {
    pub messages: Vec<SubMsg>,
    pub attributes: Vec<Attribute>,
    pub events: Vec<Event>,
    pub data: Option<Binary>,
}

impl Response {
    pub fn new() -> Self {
        Response::default()
    }

    /// An attribute of the `wasm` event the chain emits for this contract.
    pub fn add_attribute(mut self, key: &str, value: impl ToString) -> Self {
        self.attributes.push(Attribute {
            key: key.to_string(),
            value: value.to_string(),
        });
        self
    }

    pub fn add_event(mut self, event: Event) -> Self {
        self.events.push(event);
        self
    }

    /// Append `other`'s messages, attributes and events after ours.
    pub fn merge(mut self, other: Response) -> Self {
        self.messages.extend(other.messages);
        self.attributes.extend(other.attributes);
        self.events.extend(other.events);
        self
    }

    /// A message executed after this call; if it fails the whole transaction fails
    /// (`reply_on: never`).
    pub fn add_message(mut self, msg: CosmosMsg) -> Self {
        self.messages.push(SubMsg::never(msg));
        self
    }
}
