//! The contract's key-value store, through the `db_*` imports.
//!
//! Keys and values are raw bytes; the contract stores JSON values (see [`load`]/[`save`]).
//! Semantics follow cosmwasm-std 2.1 `ExternalStorage` (`packages/std/src/imports.rs`):
//! `db_read` returns 0 for a missing key, otherwise a Region the host allocated (we own it);
//! iteration uses `db_scan(start, end, order)` with start inclusive, end exclusive, 0 for
//! "unbounded", and `db_next` returns `key || value || len(key) u32be || len(value) u32be`
//! (cosmwasm's "sections" encoding), an empty key meaning the end.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::abi::{borrow_region, consume_region, imports, region_ptr};
use crate::error::ContractError;

/// The value stored under `key`, if any.
pub fn get(key: &[u8]) -> Option<Vec<u8>> {
    let key_region = borrow_region(key);
    let result = unsafe { imports::db_read(region_ptr(&key_region)) };
    if result == 0 {
        None
    } else {
        Some(unsafe { consume_region(result) })
    }
}

/// Store `value` under `key`. Empty values are refused (the VM cannot tell them from "missing").
pub fn set(key: &[u8], value: &[u8]) {
    assert!(!value.is_empty(), "storage values must not be empty");
    let key_region = borrow_region(key);
    let value_region = borrow_region(value);
    unsafe { imports::db_write(region_ptr(&key_region), region_ptr(&value_region)) };
}

/// Delete `key` (no-op if absent).
#[allow(dead_code)]
pub fn remove(key: &[u8]) {
    let key_region = borrow_region(key);
    unsafe { imports::db_remove(region_ptr(&key_region)) };
}

/// Read and parse a JSON value.
pub fn load<T: DeserializeOwned>(key: &[u8]) -> Result<Option<T>, ContractError> {
    match get(key) {
        None => Ok(None),
        Some(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            ContractError::new(format!(
                "corrupt state under key {:?}: {e}",
                String::from_utf8_lossy(key)
            ))
        }),
    }
}

/// Serialize a value as JSON and store it.
pub fn save<T: Serialize>(key: &[u8], value: &T) {
    set(key, &serde_json::to_vec(value).expect("serialize state"));
}

/// Iteration order, as the VM numbers it.
#[derive(Clone, Copy)]
pub enum Order {
    Ascending = 1,
    #[allow(dead_code)]
    Descending = 2,
}

/// An open iterator over a key range; yields `(key, value)` in byte order of the keys.
pub struct Range {
    iterator_id: u32,
}

/// Iterate over keys in `[start, end)`; `None` leaves that side unbounded.
pub fn range(start: Option<&[u8]>, end: Option<&[u8]>, order: Order) -> Range {
    // The Regions must stay alive across the call; 0 means "no bound".
    let start_region = start.map(borrow_region);
    let end_region = end.map(borrow_region);
    let start_ptr = start_region.as_deref().map(region_ptr).unwrap_or(0);
    let end_ptr = end_region.as_deref().map(region_ptr).unwrap_or(0);
    let iterator_id = unsafe { imports::db_scan(start_ptr, end_ptr, order as i32) };
    Range { iterator_id }
}

/// Iterate over every key that starts with `prefix`.
pub fn prefix_range(prefix: &[u8], start_after: Option<&[u8]>, order: Order) -> Range {
    let start = match start_after {
        // The smallest key strictly greater than `prefix || start_after`.
        Some(after) => {
            let mut key = prefix.to_vec();
            key.extend_from_slice(after);
            key.push(0);
            key
        }
        None => prefix.to_vec(),
    };
    let end = prefix_end(prefix);
    range(Some(&start), end.as_deref(), order)
}

/// The smallest key greater than every key starting with `prefix` (None: unbounded).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

impl Iterator for Range {
    type Item = (Vec<u8>, Vec<u8>);

    fn next(&mut self) -> Option<Self::Item> {
        let ptr = unsafe { imports::db_next(self.iterator_id) };
        let data = unsafe { consume_region(ptr) };
        let (key, value) = decode_pair(&data);
        if key.is_empty() {
            None
        } else {
            Some((key.to_vec(), value.to_vec()))
        }
    }
}

/// Split `key || value || len(key) u32be || len(value) u32be`.
fn decode_pair(data: &[u8]) -> (&[u8], &[u8]) {
    let (rest, value) = split_tail(data);
    let (_, key) = split_tail(rest);
    (key, value)
}

fn split_tail(data: &[u8]) -> (&[u8], &[u8]) {
    assert!(data.len() >= 4, "db_next: section without length");
    let (body, len_bytes) = data.split_at(data.len() - 4);
    let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]) as usize;
    assert!(len <= body.len(), "db_next: section longer than data");
    body.split_at(body.len() - len)
}
