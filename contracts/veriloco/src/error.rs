//! The contract's error: a readable message that the chain returns to the caller verbatim
//! (`{"error": "<message>"}`), so every message says which call failed and why.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractError {
    message: String,
}

impl ContractError {
    pub fn new(message: impl Into<String>) -> Self {
        ContractError {
            message: message.into(),
        }
    }

    /// The same error with `context: ` in front (e.g. the name of the message being handled).
    pub fn context(self, context: &str) -> Self {
        ContractError::new(format!("{context}: {}", self.message))
    }
}

impl fmt::Display for ContractError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// `return Err(...)` with a formatted message.
macro_rules! fail {
    ($($arg:tt)*) => {
        return Err($crate::error::ContractError::new(format!($($arg)*)))
    };
}
pub(crate) use fail;
