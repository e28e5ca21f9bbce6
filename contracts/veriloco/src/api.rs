//! Address handling and diagnostics, through the `addr_*`, `debug` and `abort` imports.
//!
//! Return convention (cosmwasm-vm 2.1 `packages/vm/src/imports.rs`): 0 on success, otherwise a
//! pointer to a Region the host allocated holding a UTF-8 error message (a user error such as a
//! bad checksum). The host traps instead for faults (for example an input over 256 bytes).

#[cfg(target_arch = "wasm32")]
use crate::abi::{borrow_region, consume_region, imports, output_region, region_ptr, take_written};
use crate::error::ContractError;

/// The VM refuses to read a human address longer than this (MAX_LENGTH_HUMAN_ADDRESS); we check
/// first so the caller gets an error message instead of a trap.
const MAX_HUMAN_ADDRESS: usize = 256;
/// Canonical addresses are at most 64 bytes (MAX_LENGTH_CANONICAL_ADDRESS).
const MAX_CANONICAL_ADDRESS: usize = 64;

#[cfg(target_arch = "wasm32")]
fn host_message(ptr: u32) -> String {
    String::from_utf8_lossy(&unsafe { consume_region(ptr) }).into_owned()
}

fn check_length(address: &str) -> Result<(), ContractError> {
    if address.is_empty() {
        return Err(ContractError::new("address is empty"));
    }
    if address.len() > MAX_HUMAN_ADDRESS {
        return Err(ContractError::new(format!(
            "address is {} bytes, longer than {MAX_HUMAN_ADDRESS}",
            address.len()
        )));
    }
    Ok(())
}

/// Check that `address` is a valid, normalized address of this chain (bech32, right prefix).
#[cfg(target_arch = "wasm32")]
pub fn addr_validate(address: &str) -> Result<(), ContractError> {
    check_length(address)?;
    let source = borrow_region(address.as_bytes());
    let result = unsafe { imports::addr_validate(region_ptr(&source)) };
    if result == 0 {
        Ok(())
    } else {
        Err(ContractError::new(format!(
            "invalid address {address:?}: {}",
            host_message(result)
        )))
    }
}

/// The chain's canonical (binary) form of `address`.
#[cfg(target_arch = "wasm32")]
#[allow(dead_code)]
pub fn addr_canonicalize(address: &str) -> Result<Vec<u8>, ContractError> {
    check_length(address)?;
    let source = borrow_region(address.as_bytes());
    let destination = output_region(MAX_CANONICAL_ADDRESS);
    let result =
        unsafe { imports::addr_canonicalize(region_ptr(&source), region_ptr(&destination)) };
    let written = take_written(destination);
    if result == 0 {
        Ok(written)
    } else {
        Err(ContractError::new(format!(
            "invalid address {address:?}: {}",
            host_message(result)
        )))
    }
}

/// The human (bech32) form of a canonical address.
#[cfg(target_arch = "wasm32")]
#[allow(dead_code)]
pub fn addr_humanize(canonical: &[u8]) -> Result<String, ContractError> {
    let source = borrow_region(canonical);
    let destination = output_region(MAX_HUMAN_ADDRESS);
    let result = unsafe { imports::addr_humanize(region_ptr(&source), region_ptr(&destination)) };
    let written = take_written(destination);
    if result != 0 {
        return Err(ContractError::new(format!(
            "cannot humanize address: {}",
            host_message(result)
        )));
    }
    String::from_utf8(written).map_err(|_| ContractError::new("host returned a non-UTF-8 address"))
}

/// A debug line for the host's log (discarded on production chains).
#[cfg(target_arch = "wasm32")]
#[allow(dead_code)]
pub fn debug(message: &str) {
    let region = borrow_region(message.as_bytes());
    unsafe { imports::debug(region_ptr(&region)) };
}

/// Stop execution with `message` (the host turns this into a VM error; it never returns).
#[cfg(target_arch = "wasm32")]
pub fn abort(message: &str) {
    let region = borrow_region(message.as_bytes());
    unsafe { imports::abort(region_ptr(&region)) };
}

/// Native stand-in for `addr_validate` (unit tests only): a lowercase `inj1` address of bech32
/// characters. The real check (checksum included) is the chain's.
#[cfg(not(target_arch = "wasm32"))]
pub fn addr_validate(address: &str) -> Result<(), ContractError> {
    check_length(address)?;
    let body = address.strip_prefix("inj1").unwrap_or("");
    if body.len() < 38 || !body.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
        return Err(ContractError::new(format!(
            "invalid address {address:?}: not a bech32 address with prefix inj"
        )));
    }
    Ok(())
}
