//! The contract's key-value store, through the `db_*` imports.
//!
//! Keys and values are raw bytes; the contract stores JSON values (see [`load`]/[`save`]).
//! Semantics follow cosmwasm-std 2.1 `ExternalStorage` (`packages/std/src/imports.rs`):
//! `db_read` returns 0 for a missing key, otherwise a Region the host allocated (we own it);
//! iteration uses `db_scan(start, end, order)` with start inclusive, end exclusive, 0 for
//! "unbounded", and `db_next` returns `key || value || len(key) u32be || len(value) u32be`
//! (cosmwasm's "sections" encoding), an empty key meaning the end.
//!
//! A native build (`cargo test` on the host) has no VM: the same functions then work on a
//! per-thread in-memory map, so the contract's logic can be unit-tested without wasm.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::ContractError;

#[cfg(target_arch = "wasm32")]
mod backend {
    use crate::abi::{borrow_region, consume_region, imports, region_ptr};

    pub fn get(key: &[u8]) -> Option<Vec<u8>> {
        let key_region = borrow_region(key);
        let result = unsafe { imports::db_read(region_ptr(&key_region)) };
        if result == 0 {
            None
        } else {
            Some(unsafe { consume_region(result) })
        }
    }

    pub fn set(key: &[u8], value: &[u8]) {
        let key_region = borrow_region(key);
        let value_region = borrow_region(value);
        unsafe { imports::db_write(region_ptr(&key_region), region_ptr(&value_region)) };
    }

    pub fn remove(key: &[u8]) {
        let key_region = borrow_region(key);
        unsafe { imports::db_remove(region_ptr(&key_region)) };
    }

    /// An open VM iterator.
    pub struct Cursor {
        iterator_id: u32,
    }

    pub fn scan(start: Option<&[u8]>, end: Option<&[u8]>, order: i32) -> Cursor {
        // The Regions must stay alive across the call; 0 means "no bound".
        let start_region = start.map(borrow_region);
        let end_region = end.map(borrow_region);
        let start_ptr = start_region.as_deref().map(region_ptr).unwrap_or(0);
        let end_ptr = end_region.as_deref().map(region_ptr).unwrap_or(0);
        let iterator_id = unsafe { imports::db_scan(start_ptr, end_ptr, order) };
        Cursor { iterator_id }
    }

    impl Cursor {
        pub fn next(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
            let ptr = unsafe { imports::db_next(self.iterator_id) };
            let data = unsafe { consume_region(ptr) };
            let (key, value) = super::decode_pair(&data);
            if key.is_empty() {
                None
            } else {
                Some((key.to_vec(), value.to_vec()))
            }
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod backend {
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::ops::Bound;

    thread_local! {
        static STORE: RefCell<BTreeMap<Vec<u8>, Vec<u8>>> = RefCell::new(BTreeMap::new());
    }

    /// Forget everything (each native test starts from an empty store).
    #[allow(dead_code)]
    pub fn reset() {
        STORE.with(|s| s.borrow_mut().clear());
    }

    pub fn get(key: &[u8]) -> Option<Vec<u8>> {
        STORE.with(|s| s.borrow().get(key).cloned())
    }

    pub fn set(key: &[u8], value: &[u8]) {
        STORE.with(|s| s.borrow_mut().insert(key.to_vec(), value.to_vec()));
    }

    pub fn remove(key: &[u8]) {
        STORE.with(|s| s.borrow_mut().remove(key));
    }

    /// A snapshot of the range, like the embedded chain's iterators.
    pub struct Cursor {
        items: std::vec::IntoIter<(Vec<u8>, Vec<u8>)>,
    }

    pub fn scan(start: Option<&[u8]>, end: Option<&[u8]>, order: i32) -> Cursor {
        let lower = start.map_or(Bound::Unbounded, |s| Bound::Included(s.to_vec()));
        let upper = end.map_or(Bound::Unbounded, |e| Bound::Excluded(e.to_vec()));
        let mut items: Vec<(Vec<u8>, Vec<u8>)> = STORE.with(|s| {
            s.borrow()
                .range((lower, upper))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        });
        if order == 2 {
            items.reverse();
        }
        Cursor {
            items: items.into_iter(),
        }
    }

    impl Cursor {
        pub fn next(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
            self.items.next()
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub use backend::reset;

/// The value stored under `key`, if any.
pub fn get(key: &[u8]) -> Option<Vec<u8>> {
    backend::get(key)
}

/// Store `value` under `key`. Empty values are refused (the VM cannot tell them from "missing").
pub fn set(key: &[u8], value: &[u8]) {
    assert!(!value.is_empty(), "storage values must not be empty");
    backend::set(key, value)
}

/// Delete `key` (no-op if absent).
#[allow(dead_code)]
pub fn remove(key: &[u8]) {
    backend::remove(key)
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
///
/// Never write to the store while a range is open over the keys written (collect first): the
/// Cosmos SDK's iterators do not promise to see, or to tolerate, writes made during iteration.
pub struct Range {
    cursor: backend::Cursor,
}

/// Iterate over keys in `[start, end)`; `None` leaves that side unbounded.
pub fn range(start: Option<&[u8]>, end: Option<&[u8]>, order: Order) -> Range {
    Range {
        cursor: backend::scan(start, end, order as i32),
    }
}

/// Iterate over every key that starts with `prefix` (after `prefix || start_after`, if given).
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
        self.cursor.next()
    }
}

/// Split `key || value || len(key) u32be || len(value) u32be`.
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn decode_pair(data: &[u8]) -> (&[u8], &[u8]) {
    let (rest, value) = split_tail(data);
    let (_, key) = split_tail(rest);
    (key, value)
}

#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
fn split_tail(data: &[u8]) -> (&[u8], &[u8]) {
    assert!(data.len() >= 4, "db_next: section without length");
    let (body, len_bytes) = data.split_at(data.len() - 4);
    let len = u32::from_be_bytes([len_bytes[0], len_bytes[1], len_bytes[2], len_bytes[3]]) as usize;
    assert!(len <= body.len(), "db_next: section longer than data");
    body.split_at(body.len() - len)
}
