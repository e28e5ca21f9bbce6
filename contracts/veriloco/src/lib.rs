//! veriloco settlement contract (CosmWasm, interface_version_8) without cosmwasm-std.
//!
//! Layout:
//! * `abi`      — Region, allocate/deallocate, the interface marker, the `env` imports, entry
//!                plumbing (all the unsafe code);
//! * `storage`  — db_read/db_write/db_remove/db_scan wrappers;
//! * `api`      — addr_validate/addr_canonicalize/addr_humanize, debug, abort;
//! * `types`    — the VM's JSON types (Env, MessageInfo, Coin, Uint128, Response, SubMsg, ...);
//! * `error`    — ContractError (a readable message);
//! * `spec`     — canonical-JSON check, run id, the spec sections the contract enforces;
//! * `msg`      — messages and query answers (the public JSON interface);
//! * `state`    — stored records and their keys;
//! * `contract` — instantiate and the execute/query dispatch;
//! * `funds`, `staking`, `rewards` — one concern each;
//! * `hashing`, `beacon`, `sampling` — the byte-for-byte protocol rules (`docs/protocol.md`);
//! * `records` — the per-epoch records and their keys;
//! * `epoch`    — phases, deadlines, auto-advance, join/commit/reveal/propose_model/advance;
//! * `settle`   — seed and challenges, verdicts, finalize (slashing, catchers, rewards);
//! * `query`    — the epoch queries (epoch, epochs, challenges, report).

// The entry points exist only in the wasm build; natively (`cargo test`) much of the crate is
// reached only from tests.
#![cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]

#[cfg(target_arch = "wasm32")]
mod abi;
mod api;
mod beacon;
mod contract;
mod epoch;
mod error;
mod funds;
mod hashing;
mod msg;
mod query;
mod records;
mod rewards;
mod sampling;
mod settle;
mod spec;
mod staking;
mod state;
mod storage;
mod types;

// The entry points the VM calls. `allocate`, `deallocate` and `interface_version_8` are
// exported from `abi`.

#[cfg(target_arch = "wasm32")]
#[no_mangle]
pub extern "C" fn instantiate(env_ptr: u32, info_ptr: u32, msg_ptr: u32) -> u32 {
    abi::entry_with_info(env_ptr, info_ptr, msg_ptr, contract::instantiate)
}

#[cfg(target_arch = "wasm32")]
#[no_mangle]
pub extern "C" fn execute(env_ptr: u32, info_ptr: u32, msg_ptr: u32) -> u32 {
    abi::entry_with_info(env_ptr, info_ptr, msg_ptr, contract::execute)
}

#[cfg(target_arch = "wasm32")]
#[no_mangle]
pub extern "C" fn query(env_ptr: u32, msg_ptr: u32) -> u32 {
    abi::entry_query(env_ptr, msg_ptr, contract::query)
}
