//! The contract's error. The chain returns its `Display` text to the caller verbatim
//! (`{"error": "<text>"}`), so every text names the call that failed and why; clients (and the
//! Python tests) match on these texts, so a variant's text is part of the interface.
//!
//! The variants are the kinds of refusal the contract makes; [`ContractError::Refused`] carries
//! the one-off rules of a single message (`"unbond: amount must be nonzero"`). The shape is
//! that of a `thiserror` enum in a cosmwasm-std contract, written out by hand (no crates.io).

use std::fmt;

/// Why a message or query was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContractError {
    /// JSON that does not parse as `what` (`"execute message"`, `"env"`, ...).
    InvalidJson { what: &'static str, reason: String },
    /// A run spec the contract does not accept (the reason names the field).
    InvalidSpec(String),
    /// An empty address.
    EmptyAddress,
    /// An address longer than the VM accepts (checked first, so it is an error, not a trap).
    AddressTooLong { length: usize, max: usize },
    /// An address the chain's `addr_validate` refused, with the chain's reason.
    InvalidAddress { address: String, reason: String },
    /// Another failure of an address import (`addr_humanize`), with the chain's reason.
    AddressApi(String),
    /// An endpoint that is not an http(s) URL of printable ASCII.
    InvalidEndpoint(String),
    /// A field that must be a 64-character lowercase hex digest.
    NotHexDigest {
        action: &'static str,
        field: &'static str,
        value: String,
    },
    /// Funds attached that are not exactly one nonzero coin of the run's denom.
    FundsRequired {
        action: &'static str,
        denom: String,
        got: String,
    },
    /// Funds attached to a message that takes none.
    FundsNotAccepted { action: &'static str, got: String },
    /// A message for an epoch before the current one.
    EpochClosed {
        action: &'static str,
        epoch: u64,
        current: u64,
    },
    /// A message or query for an epoch after the current one.
    EpochNotStarted {
        action: &'static str,
        epoch: u64,
        current: u64,
    },
    /// A message for the current epoch in a phase that does not accept it.
    WrongPhase {
        action: &'static str,
        epoch: u64,
        phase: &'static str,
        expected: &'static str,
    },
    /// The phase is closing page by page: its messages are no longer accepted.
    Closing {
        action: &'static str,
        epoch: u64,
        phase: &'static str,
    },
    /// The sender did not join the epoch.
    NotParticipant {
        action: &'static str,
        address: String,
        epoch: u64,
    },
    /// The sender joined the epoch in the other role.
    WrongRole {
        action: &'static str,
        address: String,
        epoch: u64,
        role: &'static str,
        expected: &'static str,
    },
    /// A verdict from a validator that is not assigned to that challenge in the current round.
    NotAssigned {
        action: &'static str,
        validator: String,
        host: String,
        segment: u32,
        epoch: u64,
    },
    /// `advance {}` when no phase is due.
    NothingDue {
        epoch: u64,
        phase: &'static str,
        deadline: u64,
        height: u64,
    },
    /// A rule of one message (`action`), with its reason.
    Refused {
        action: &'static str,
        reason: String,
    },
    /// An amount computation that would exceed 128 bits (`"a + b"`).
    Overflow(String),
    /// An amount computation that would go below zero (`"a - b"`).
    Underflow(String),
    /// A height or counter that would exceed 64 bits.
    CounterOverflow(&'static str),
    /// A singleton that instantiate writes is missing.
    NotInstantiated(String),
    /// Stored bytes that do not decode (never expected: the contract wrote them).
    Corrupt(String),
    /// `source`, seen from a caller (`"instantiate: treasury"`).
    Context {
        context: &'static str,
        source: Box<ContractError>,
    },
}

impl ContractError {
    /// The same error with `context: ` in front of its text (e.g. the message being handled).
    pub fn context(self, context: &'static str) -> Self {
        ContractError::Context {
            context,
            source: Box::new(self),
        }
    }

    /// A refusal by the rule of one message.
    pub fn refused(action: &'static str, reason: impl Into<String>) -> Self {
        ContractError::Refused {
            action,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ContractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use ContractError::*;
        match self {
            InvalidJson { what, reason } => write!(f, "invalid {what}: {reason}"),
            InvalidSpec(reason) => f.write_str(reason),
            EmptyAddress => f.write_str("address is empty"),
            AddressTooLong { length, max } => {
                write!(f, "address is {length} bytes, longer than {max}")
            }
            InvalidAddress { address, reason } => write!(f, "invalid address {address:?}: {reason}"),
            AddressApi(reason) => f.write_str(reason),
            InvalidEndpoint(reason) => f.write_str(reason),
            NotHexDigest {
                action,
                field,
                value,
            } => write!(
                f,
                "{action}: {field} must be 64 lowercase hex characters, got {value:?}"
            ),
            FundsRequired { action, denom, got } => write!(
                f,
                "{action}: funds must be exactly one coin of denom {denom} with a nonzero amount, got {got}"
            ),
            FundsNotAccepted { action, got } => {
                write!(f, "{action}: does not accept funds, got {got}")
            }
            EpochClosed {
                action,
                epoch,
                current,
            } => write!(
                f,
                "{action}: epoch {epoch} is closed; the current epoch is {current}"
            ),
            EpochNotStarted {
                action,
                epoch,
                current,
            } => write!(
                f,
                "{action}: epoch {epoch} has not started; the current epoch is {current}"
            ),
            WrongPhase {
                action,
                epoch,
                phase,
                expected,
            } => write!(
                f,
                "{action}: epoch {epoch} is in phase {phase}; {action} is accepted in phase {expected} only"
            ),
            NotParticipant {
                action,
                address,
                epoch,
            } => write!(f, "{action}: {address} did not join epoch {epoch}"),
            WrongRole {
                action,
                address,
                epoch,
                role,
                expected,
            } => write!(
                f,
                "{action}: {address} joined epoch {epoch} as a {role}; only {expected}s may {action}"
            ),
            NotAssigned {
                action,
                validator,
                host,
                segment,
                epoch,
            } => write!(
                f,
                "{action}: {validator} is not assigned to host {host} segment {segment} of epoch {epoch} in this round"
            ),
            Closing {
                action,
                epoch,
                phase,
            } => write!(
                f,
                "{action}: epoch {epoch} is closing phase {phase} page by page; send advance"
            ),
            NothingDue {
                epoch,
                phase,
                deadline,
                height,
            } => write!(
                f,
                "advance: nothing is due: epoch {epoch} is in phase {phase} until height {deadline} (now {height})"
            ),
            Refused { action, reason } => write!(f, "{action}: {reason}"),
            Overflow(operation) => write!(f, "overflow: {operation}"),
            Underflow(operation) => write!(f, "underflow: {operation}"),
            CounterOverflow(what) => f.write_str(what),
            NotInstantiated(what) => write!(f, "{what} missing: contract not instantiated"),
            Corrupt(what) => f.write_str(what),
            Context { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

/// `return Err(ContractError::Refused { action, reason: format!(...) })`.
macro_rules! refuse {
    ($action:expr, $($arg:tt)*) => {
        return Err($crate::error::ContractError::refused($action, format!($($arg)*)))
    };
}
pub(crate) use refuse;

#[cfg(test)]
mod tests {
    use super::ContractError;

    #[test]
    fn texts_are_the_interface() {
        let e = ContractError::WrongPhase {
            action: "commit",
            epoch: 3,
            phase: "reveal",
            expected: "train",
        };
        assert_eq!(
            e.to_string(),
            "commit: epoch 3 is in phase reveal; commit is accepted in phase train only"
        );
        let e = ContractError::InvalidAddress {
            address: "x".into(),
            reason: "bad".into(),
        }
        .context("instantiate: treasury");
        assert_eq!(
            e.to_string(),
            "instantiate: treasury: invalid address \"x\": bad"
        );
        assert_eq!(
            ContractError::refused("unbond", "amount must be nonzero").to_string(),
            "unbond: amount must be nonzero"
        );
    }
}
