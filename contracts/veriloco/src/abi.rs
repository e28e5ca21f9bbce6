//! The CosmWasm ABI (interface_version_8), written for this contract instead of taken from
//! cosmwasm-std.
//!
//! What the VM expects, from cosmwasm-vm 2.1 (`packages/vm/src/memory.rs`, `calls.rs`,
//! `compatibility.rs`) and cosmwasm-std 2.1 (`packages/std/src/exports.rs`, `memory.rs`):
//!
//! * Data crosses the boundary as a pointer to a [`Region`]: three little-endian u32s
//!   `offset, capacity, length` describing bytes in linear memory. The VM rejects a Region whose
//!   `offset` is 0, whose `length > capacity`, or whose end overflows u32.
//! * The VM allocates the arguments of an entry point with our exported `allocate`, writes them,
//!   and calls e.g. `execute(env_ptr, info_ptr, msg_ptr)`. The contract takes ownership of the
//!   argument Regions (it frees them); the VM frees the returned Region with `deallocate`.
//! * Exports `allocate`, `deallocate` and exactly one marker `interface_version_8` are required.
//! * Imports come only from module `env` (declared in [`imports`]).
//!
//! Everything unsafe in the contract lives in this module. It is compiled for wasm32 only; a
//! native build (`cargo test`) replaces the imports with in-memory stand-ins (`storage`, `api`).

use std::mem;

use serde::Serialize;

use crate::error::ContractError;
use crate::msg::parse_json;
use crate::types::{ContractResult, Env, MessageInfo, Response};

/// A view of bytes in the contract's linear memory; the unit of exchange with the VM.
///
/// `#[repr(C)]` with three u32 fields: 12 bytes, no padding, the same layout as the VM's
/// `Region` on wasm32 (little endian).
#[repr(C)]
pub struct Region {
    /// Start of the bytes, counted from the beginning of linear memory. Never 0.
    pub offset: u32,
    /// Bytes reserved at `offset`.
    pub capacity: u32,
    /// Bytes in use (`length <= capacity`).
    pub length: u32,
}

/// The functions the host provides (all in module `env`; the VM refuses any other module).
///
/// Only the ones the contract calls end up as wasm imports: the linker drops the rest.
pub mod imports {
    extern "C" {
        pub fn db_read(key: u32) -> u32;
        pub fn db_write(key: u32, value: u32);
        #[allow(dead_code)]
        pub fn db_remove(key: u32);
        pub fn db_scan(start_ptr: u32, end_ptr: u32, order: i32) -> u32;
        pub fn db_next(iterator_id: u32) -> u32;

        pub fn addr_validate(source_ptr: u32) -> u32;
        pub fn addr_canonicalize(source_ptr: u32, destination_ptr: u32) -> u32;
        pub fn addr_humanize(source_ptr: u32, destination_ptr: u32) -> u32;

        pub fn debug(source_ptr: u32);
        pub fn abort(source_ptr: u32);
    }
}

/// Marker export: the VM accepts the contract only if exactly one `interface_version_*` export
/// exists and it is `interface_version_8`.
#[no_mangle]
pub extern "C" fn interface_version_8() {}

/// Reserve `size` bytes and return a pointer to a new heap Region describing them (length 0).
/// The VM calls this to pass arguments in, and to return data from imports such as `db_read`.
#[no_mangle]
pub extern "C" fn allocate(size: usize) -> u32 {
    release_buffer(Vec::with_capacity(size))
}

/// Free a Region made by [`allocate`] (or returned by an entry point) and the bytes it describes.
#[no_mangle]
pub extern "C" fn deallocate(pointer: u32) {
    drop(unsafe { consume_region(pointer) });
}

/// Hand a buffer to the host: leak it and return a pointer to a heap Region that owns it.
/// The host frees it with `deallocate` (entry-point results) or hands it back to us later.
pub fn release_buffer(buffer: Vec<u8>) -> u32 {
    let mut buffer = mem::ManuallyDrop::new(buffer);
    // A Vec's pointer is never null (an empty Vec uses a dangling, aligned, non-zero pointer),
    // so `offset` is never 0, which the VM would reject.
    let region = Box::new(Region {
        offset: buffer.as_mut_ptr() as u32,
        capacity: buffer.capacity() as u32,
        length: buffer.len() as u32,
    });
    Box::into_raw(region) as u32
}

/// Take ownership of a heap Region (one made by [`allocate`]) and the bytes it describes.
///
/// # Safety
/// `ptr` must come from [`release_buffer`]/[`allocate`] and must not be used again.
pub unsafe fn consume_region(ptr: u32) -> Vec<u8> {
    assert!(ptr != 0, "region pointer is null");
    let region = Box::from_raw(ptr as *mut Region);
    assert!(region.offset != 0, "region starts at null");
    Vec::from_raw_parts(
        region.offset as *mut u8,
        region.length as usize,
        region.capacity as usize,
    )
}

/// A Region borrowing `data`, for passing our bytes to an import (the host only reads them).
/// Keep the returned Box alive while the host uses its address.
pub fn borrow_region(data: &[u8]) -> Box<Region> {
    Box::new(Region {
        offset: data.as_ptr() as u32,
        capacity: data.len() as u32,
        length: data.len() as u32,
    })
}

/// An empty Region with room for `capacity` bytes, for imports that write into a destination
/// Region we provide (`addr_canonicalize`, `addr_humanize`). Read it back with
/// [`take_written`].
pub fn output_region(capacity: usize) -> Box<Region> {
    let mut buffer = mem::ManuallyDrop::new(Vec::<u8>::with_capacity(capacity));
    Box::new(Region {
        offset: buffer.as_mut_ptr() as u32,
        capacity: buffer.capacity() as u32,
        length: 0,
    })
}

/// The bytes the host wrote into a Region from [`output_region`] (ownership returns to us).
pub fn take_written(region: Box<Region>) -> Vec<u8> {
    unsafe {
        Vec::from_raw_parts(
            region.offset as *mut u8,
            region.length as usize,
            region.capacity as usize,
        )
    }
}

/// Address of a Region for an import call.
pub fn region_ptr(region: &Region) -> u32 {
    region as *const Region as u32
}

/// Route panics to the host's `abort` import, so a bug surfaces as "Aborted: <message>" instead
/// of a bare `unreachable` trap.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        crate::api::abort(&info.to_string());
    }));
}

/// Serialize a ContractResult and hand it to the host.
fn finish<T: Serialize>(result: Result<T, ContractError>) -> u32 {
    let wrapped = match result {
        Ok(value) => ContractResult::Ok(value),
        Err(err) => ContractResult::Err(err.to_string()),
    };
    // Serializing our own types cannot fail (no maps with non-string keys, no floats).
    release_buffer(serde_json::to_vec(&wrapped).expect("serialize contract result"))
}

/// The body of the `instantiate` and `execute` exports: take the three argument Regions, parse
/// Env and MessageInfo, run `handler` on the raw message bytes, return `{"ok": Response}` or
/// `{"error": "..."}`.
pub fn entry_with_info(
    env_ptr: u32,
    info_ptr: u32,
    msg_ptr: u32,
    handler: fn(&Env, &MessageInfo, &[u8]) -> Result<Response, ContractError>,
) -> u32 {
    install_panic_hook();
    let (env, info, msg) = unsafe {
        (
            consume_region(env_ptr),
            consume_region(info_ptr),
            consume_region(msg_ptr),
        )
    };
    finish((|| {
        let env: Env = parse_json("env", &env)?;
        let info: MessageInfo = parse_json("message info", &info)?;
        handler(&env, &info, &msg)
    })())
}

/// The body of the `query` export: returns `{"ok": "<base64 of the answer JSON>"}` or
/// `{"error": "..."}`.
pub fn entry_query(
    env_ptr: u32,
    msg_ptr: u32,
    handler: fn(&Env, &[u8]) -> Result<crate::types::Binary, ContractError>,
) -> u32 {
    install_panic_hook();
    let (env, msg) = unsafe { (consume_region(env_ptr), consume_region(msg_ptr)) };
    finish((|| {
        let env: Env = parse_json("env", &env)?;
        handler(&env, &msg)
    })())
}
