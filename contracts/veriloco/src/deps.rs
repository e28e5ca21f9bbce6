//! What a handler may touch: the contract's key-value store and the chain's address functions,
//! passed in as a context ([`Deps`] for queries, [`DepsMut`] for instantiate and execute)
//! instead of reached through free functions.
//!
//! The traits have the shape of cosmwasm-std 2.1's `Storage` and `Api` (`packages/std/src/
//! traits.rs`, `deps.rs`), so that moving to cosmwasm-std replaces this module by imports. Two
//! implementations each: the VM's (`abi::ExternalStorage`, `abi::ExternalApi`, over the `db_*`
//! and `addr_*` imports; wasm32 only) and an in-memory one for the native unit tests
//! (`testing::MemoryStorage`, `testing::MockApi`).

use crate::error::ContractError;

/// A stored key and its value.
pub type Record = (Vec<u8>, Vec<u8>);

/// Iteration order, numbered as the VM's `db_scan` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    Ascending = 1,
    Descending = 2,
}

/// The contract's key-value store. Keys and values are bytes; values are never empty (the VM
/// cannot tell an empty value from a missing one, so `set` refuses it).
///
/// Never write while a range is open over the keys written (collect first): the Cosmos SDK's
/// iterators do not promise to see, or to tolerate, writes made during iteration.
pub trait Storage {
    /// The value under `key`, if any.
    fn get(&self, key: &[u8]) -> Option<Vec<u8>>;

    /// The records with keys in `[start, end)` (`None`: that side unbounded), in `order`.
    fn range<'a>(
        &'a self,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        order: Order,
    ) -> Box<dyn Iterator<Item = Record> + 'a>;

    /// Store `value` (not empty) under `key`.
    fn set(&mut self, key: &[u8], value: &[u8]);

    /// Delete `key` (nothing happens if it is absent).
    fn remove(&mut self, key: &[u8]);
}

/// The chain's address functions and its debug log.
pub trait Api {
    /// Check that `human` is a valid, normalized address of this chain (bech32, its prefix).
    fn addr_validate(&self, human: &str) -> Result<(), ContractError>;

    /// The chain's binary form of `human`.
    fn addr_canonicalize(&self, human: &str) -> Result<Vec<u8>, ContractError>;

    /// The human (bech32) form of a binary address.
    fn addr_humanize(&self, canonical: &[u8]) -> Result<String, ContractError>;

    /// A line for the node's debug log (discarded on production chains).
    fn debug(&self, message: &str);
}

/// The VM refuses to read a human address longer than this (MAX_LENGTH_HUMAN_ADDRESS).
pub const MAX_HUMAN_ADDRESS: usize = 256;
/// Canonical addresses are at most this long (MAX_LENGTH_CANONICAL_ADDRESS).
pub const MAX_CANONICAL_ADDRESS: usize = 64;

/// The checks every [`Api`] makes before asking the chain: an empty address, or one the VM would
/// trap on, is an error message instead.
pub fn check_address_length(human: &str) -> Result<(), ContractError> {
    if human.is_empty() {
        return Err(ContractError::EmptyAddress);
    }
    if human.len() > MAX_HUMAN_ADDRESS {
        return Err(ContractError::AddressTooLong {
            length: human.len(),
            max: MAX_HUMAN_ADDRESS,
        });
    }
    Ok(())
}

/// Read-only context: what queries get.
#[derive(Clone, Copy)]
pub struct Deps<'a> {
    pub storage: &'a dyn Storage,
    pub api: &'a dyn Api,
}

/// Read-write context: what instantiate and execute get.
pub struct DepsMut<'a> {
    pub storage: &'a mut dyn Storage,
    pub api: &'a dyn Api,
}

impl<'a> DepsMut<'a> {
    /// A read-only view, for code shared with queries.
    pub fn as_ref(&self) -> Deps<'_> {
        Deps {
            storage: self.storage,
            api: self.api,
        }
    }

    /// A shorter-lived copy, to pass on while keeping this one.
    pub fn branch(&mut self) -> DepsMut<'_> {
        DepsMut {
            storage: self.storage,
            api: self.api,
        }
    }
}
