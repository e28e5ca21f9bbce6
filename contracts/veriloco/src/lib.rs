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
//! * `funds`, `staking`, `rewards` — one concern each. Epoch logic goes in its own modules.

mod abi;
mod api;
mod contract;
mod error;
mod funds;
mod msg;
mod rewards;
mod spec;
mod staking;
mod state;
mod storage;
mod types;

// The entry points the VM calls. `allocate`, `deallocate` and `interface_version_8` are
// exported from `abi`.

#[no_mangle]
pub extern "C" fn instantiate(env_ptr: u32, info_ptr: u32, msg_ptr: u32) -> u32 {
    abi::entry_with_info(env_ptr, info_ptr, msg_ptr, contract::instantiate)
}

#[no_mangle]
pub extern "C" fn execute(env_ptr: u32, info_ptr: u32, msg_ptr: u32) -> u32 {
    abi::entry_with_info(env_ptr, info_ptr, msg_ptr, contract::execute)
}

#[no_mangle]
pub extern "C" fn query(env_ptr: u32, msg_ptr: u32) -> u32 {
    abi::entry_query(env_ptr, msg_ptr, contract::query)
}
