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
//! On top of that, the two context objects the handlers get ([`ExternalStorage`],
//! [`ExternalApi`]: the `deps::Storage` and `deps::Api` of the VM) and the entry plumbing that
//! parses the arguments and serializes the result.
//!
//! Every `unsafe` of the contract is in this module, and each says why it holds. It is compiled
//! for wasm32 only; the native unit tests use `testing::MemoryStorage` and `testing::MockApi`.

use std::mem;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::deps::{
    check_address_length, Api, Deps, DepsMut, Order, Record, Storage, MAX_CANONICAL_ADDRESS,
    MAX_HUMAN_ADDRESS,
};
use crate::error::ContractError;
use crate::msg::parse_json;
use crate::types::{Binary, ContractResult, Env, MessageInfo, Response};

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
/// Only the ones the contract can call end up as wasm imports: the linker drops the rest.
mod imports {
    extern "C" {
        pub fn db_read(key: u32) -> u32;
        pub fn db_write(key: u32, value: u32);
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
    // SAFETY: the VM passes only Regions that `allocate` or an entry point made, once each.
    drop(unsafe { consume_region(pointer) });
}

/// Hand a buffer to the host: leak it and return a pointer to a heap Region that owns it.
/// The host frees it with `deallocate` (entry-point results) or hands it back to us later.
fn release_buffer(buffer: Vec<u8>) -> u32 {
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
/// `ptr` must point to a Region boxed by [`release_buffer`] (through [`allocate`]: the argument
/// Regions of an entry point and the results of imports such as `db_read`, which the VM
/// allocates with our `allocate`), whose `offset` and `capacity` are still those of the buffer
/// it leaked, with `length <= capacity` initialized bytes; and it must not be used again.
unsafe fn consume_region(ptr: u32) -> Vec<u8> {
    assert!(ptr != 0, "region pointer is null");
    let region = Box::from_raw(ptr as *mut Region);
    assert!(region.offset != 0, "region starts at null");
    assert!(
        region.length <= region.capacity,
        "region length exceeds its capacity"
    );
    Vec::from_raw_parts(
        region.offset as *mut u8,
        region.length as usize,
        region.capacity as usize,
    )
}

/// A Region borrowing `data`, for passing our bytes to an import (the host only reads them).
/// Keep the returned Box alive while the host uses its address.
fn borrow_region(data: &[u8]) -> Box<Region> {
    Box::new(Region {
        offset: data.as_ptr() as u32,
        capacity: data.len() as u32,
        length: data.len() as u32,
    })
}

/// An empty Region with room for `capacity` bytes, for imports that write into a destination
/// Region we provide (`addr_canonicalize`, `addr_humanize`). Read it back with
/// [`take_written`], which frees it.
fn output_region(capacity: usize) -> Box<Region> {
    let mut buffer = mem::ManuallyDrop::new(Vec::<u8>::with_capacity(capacity));
    Box::new(Region {
        offset: buffer.as_mut_ptr() as u32,
        capacity: buffer.capacity() as u32,
        length: 0,
    })
}

/// The bytes the host wrote into a Region from [`output_region`]; ownership returns to us.
///
/// # Safety
/// `region` must come from [`output_region`] (taking it by value makes it single-use), and the
/// host must have set its `length` to the number of bytes it wrote, at most `capacity` (the VM's
/// `write_region` checks that before writing). Anything else makes the Vec claim memory it does
/// not own.
unsafe fn take_written(region: Region) -> Vec<u8> {
    assert!(
        region.length <= region.capacity,
        "region length exceeds its capacity"
    );
    Vec::from_raw_parts(
        region.offset as *mut u8,
        region.length as usize,
        region.capacity as usize,
    )
}

/// Address of a Region for an import call.
fn region_ptr(region: &Region) -> u32 {
    region as *const Region as u32
}

/// Split `key || value || len(key) u32be || len(value) u32be` (cosmwasm's "sections").
fn decode_sections(data: &[u8]) -> (&[u8], &[u8]) {
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

// -- the context of a call -----------------------------------------------------------------------

/// The contract's store in the VM, through `db_read`, `db_write`, `db_remove`, `db_scan` and
/// `db_next` (semantics of cosmwasm-std 2.1 `ExternalStorage`, `packages/std/src/imports.rs`).
pub struct ExternalStorage;

impl Storage for ExternalStorage {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let key_region = borrow_region(key);
        // SAFETY: the Region describes `key`, alive for the call; the host only reads it.
        let result = unsafe { imports::db_read(region_ptr(&key_region)) };
        if result == 0 {
            return None;
        }
        // SAFETY: a nonzero result is a Region the VM allocated with our `allocate` and gave us.
        Some(unsafe { consume_region(result) })
    }

    fn range<'a>(
        &'a self,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        order: Order,
    ) -> Box<dyn Iterator<Item = Record> + 'a> {
        // 0 means "no bound"; the Regions only need to live across the call (the VM copies).
        let start_region = start.map(borrow_region);
        let end_region = end.map(borrow_region);
        let start_ptr = start_region.as_deref().map(region_ptr).unwrap_or(0);
        let end_ptr = end_region.as_deref().map(region_ptr).unwrap_or(0);
        // SAFETY: the Regions describe `start`/`end`, alive for the call; the host only reads them.
        let iterator_id = unsafe { imports::db_scan(start_ptr, end_ptr, order as i32) };
        Box::new(ExternalIterator { iterator_id })
    }

    fn set(&mut self, key: &[u8], value: &[u8]) {
        assert!(!value.is_empty(), "storage values must not be empty");
        let key_region = borrow_region(key);
        let value_region = borrow_region(value);
        // SAFETY: both Regions describe live slices for the call; the host only reads them.
        unsafe { imports::db_write(region_ptr(&key_region), region_ptr(&value_region)) };
    }

    fn remove(&mut self, key: &[u8]) {
        let key_region = borrow_region(key);
        // SAFETY: the Region describes `key`, alive for the call; the host only reads it.
        unsafe { imports::db_remove(region_ptr(&key_region)) };
    }
}

/// An open VM iterator (`db_scan`), read with `db_next` until its empty key.
struct ExternalIterator {
    iterator_id: u32,
}

impl Iterator for ExternalIterator {
    type Item = Record;

    fn next(&mut self) -> Option<Record> {
        // SAFETY: `iterator_id` came from `db_scan` in this call; the host checks it anyway.
        let ptr = unsafe { imports::db_next(self.iterator_id) };
        // SAFETY: `db_next` returns a Region the VM allocated with our `allocate`.
        let data = unsafe { consume_region(ptr) };
        let (key, value) = decode_sections(&data);
        if key.is_empty() {
            None
        } else {
            Some((key.to_vec(), value.to_vec()))
        }
    }
}

/// The chain's address functions in the VM. Return convention (cosmwasm-vm 2.1
/// `packages/vm/src/imports.rs`): 0 on success, otherwise a Region the host allocated holding a
/// UTF-8 error message (a user error such as a bad checksum). The host traps instead on faults
/// (an input over its length limit), so lengths are checked here first.
pub struct ExternalApi;

/// The text of an error Region an import returned.
fn host_message(ptr: u32) -> String {
    // SAFETY: a nonzero import result is a Region the VM allocated with our `allocate`.
    String::from_utf8_lossy(&unsafe { consume_region(ptr) }).into_owned()
}

impl Api for ExternalApi {
    fn addr_validate(&self, human: &str) -> Result<(), ContractError> {
        check_address_length(human)?;
        let source = borrow_region(human.as_bytes());
        // SAFETY: the Region describes `human`, alive for the call; the host only reads it.
        let result = unsafe { imports::addr_validate(region_ptr(&source)) };
        if result == 0 {
            return Ok(());
        }
        Err(ContractError::InvalidAddress {
            address: human.to_string(),
            reason: host_message(result),
        })
    }

    fn addr_canonicalize(&self, human: &str) -> Result<Vec<u8>, ContractError> {
        check_address_length(human)?;
        let source = borrow_region(human.as_bytes());
        let destination = output_region(MAX_CANONICAL_ADDRESS);
        // SAFETY: `source` describes `human`; `destination` is ours with room for any canonical
        // address; both live across the call.
        let result =
            unsafe { imports::addr_canonicalize(region_ptr(&source), region_ptr(&destination)) };
        // SAFETY: `destination` came from `output_region`; the host set its length.
        let written = unsafe { take_written(*destination) };
        if result == 0 {
            return Ok(written);
        }
        Err(ContractError::InvalidAddress {
            address: human.to_string(),
            reason: host_message(result),
        })
    }

    fn addr_humanize(&self, canonical: &[u8]) -> Result<String, ContractError> {
        let source = borrow_region(canonical);
        let destination = output_region(MAX_HUMAN_ADDRESS);
        // SAFETY: as in `addr_canonicalize`.
        let result =
            unsafe { imports::addr_humanize(region_ptr(&source), region_ptr(&destination)) };
        // SAFETY: `destination` came from `output_region`; the host set its length.
        let written = unsafe { take_written(*destination) };
        if result != 0 {
            return Err(ContractError::AddressApi(format!(
                "cannot humanize address: {}",
                host_message(result)
            )));
        }
        String::from_utf8(written)
            .map_err(|_| ContractError::AddressApi("host returned a non-UTF-8 address".into()))
    }

    fn debug(&self, message: &str) {
        let region = borrow_region(message.as_bytes());
        // SAFETY: the Region describes `message`, alive for the call; the host only reads it.
        unsafe { imports::debug(region_ptr(&region)) };
    }
}

/// Stop execution with `message` (the host turns this into a VM error; it never returns).
fn abort(message: &str) {
    let region = borrow_region(message.as_bytes());
    // SAFETY: the Region describes `message`, alive for the call; the host only reads it.
    unsafe { imports::abort(region_ptr(&region)) };
}

// -- entry points ----------------------------------------------------------------------------------

/// Route panics to the host's `abort` import, so a bug surfaces as "Aborted: <message>" instead
/// of a bare `unreachable` trap.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| abort(&info.to_string())));
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

/// Take the argument Regions of an entry point.
fn take_arguments<const N: usize>(pointers: [u32; N]) -> [Vec<u8>; N] {
    // SAFETY: the VM allocated each argument with our `allocate`, wrote it, and hands it over.
    pointers.map(|ptr| unsafe { consume_region(ptr) })
}

/// The body of the `instantiate` and `execute` exports: take the three argument Regions, parse
/// Env, MessageInfo and the message (`what` names it in a parse error), run `handler` on the
/// VM's store, return `{"ok": Response}` or `{"error": "..."}`.
pub fn entry_with_info<M: DeserializeOwned>(
    pointers: [u32; 3],
    what: &'static str,
    handler: fn(DepsMut, Env, MessageInfo, M) -> Result<Response, ContractError>,
) -> u32 {
    install_panic_hook();
    let [env, info, msg] = take_arguments(pointers);
    finish((|| {
        let env: Env = parse_json("env", &env)?;
        let info: MessageInfo = parse_json("message info", &info)?;
        let msg: M = parse_json(what, &msg)?;
        let deps = DepsMut {
            storage: &mut ExternalStorage,
            api: &ExternalApi,
        };
        handler(deps, env, info, msg)
    })())
}

/// The body of the `migrate` export: like [`entry_with_info`] without a MessageInfo (wasmd
/// passes none: only the chain knows, and has checked, who migrates).
pub fn entry_migrate<M: DeserializeOwned>(
    pointers: [u32; 2],
    what: &'static str,
    handler: fn(DepsMut, Env, M) -> Result<Response, ContractError>,
) -> u32 {
    install_panic_hook();
    let [env, msg] = take_arguments(pointers);
    finish((|| {
        let env: Env = parse_json("env", &env)?;
        let msg: M = parse_json(what, &msg)?;
        let deps = DepsMut {
            storage: &mut ExternalStorage,
            api: &ExternalApi,
        };
        handler(deps, env, msg)
    })())
}

/// The body of the `query` export: returns `{"ok": "<base64 of the answer JSON>"}` or
/// `{"error": "..."}`.
pub fn entry_query<M: DeserializeOwned>(
    pointers: [u32; 2],
    what: &'static str,
    handler: fn(Deps, Env, M) -> Result<Binary, ContractError>,
) -> u32 {
    install_panic_hook();
    let [env, msg] = take_arguments(pointers);
    finish((|| {
        let env: Env = parse_json("env", &env)?;
        let msg: M = parse_json(what, &msg)?;
        let deps = Deps {
            storage: &ExternalStorage,
            api: &ExternalApi,
        };
        handler(deps, env, msg)
    })())
}
