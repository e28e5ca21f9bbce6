//! veriloco settlement contract (CosmWasm, interface_version_8) without cosmwasm-std.
//!
//! Layout (`docs/chain.md`, "The contract crate"):
//! * `abi`      — Region, allocate/deallocate, the interface marker, the `env` imports, the VM's
//!                `Storage` and `Api`, entry plumbing: every `unsafe` of the contract (wasm32 only);
//! * `deps`     — the context handlers get: the `Storage` and `Api` traits, `Deps`, `DepsMut`;
//! * `storage`  — `Item` and `Map` over a `Storage` (cw-storage-plus's shape);
//! * `testing`  — the native context of the unit tests: in-memory store, bech32 `MockApi`;
//! * `types`    — the VM's JSON types (Env, MessageInfo, Coin, Uint128, Response, SubMsg, ...);
//! * `error`    — `ContractError`, one variant per kind of refusal;
//! * `limits`   — the limits shared with `protocol/rules/limits.py`;
//! * `spec`     — canonical-JSON check, run id, the spec sections the contract enforces;
//! * `msg`      — messages and query answers (the public JSON interface);
//! * `state`    — run-wide records (config, books, members) as `Item`s and `Map`s;
//! * `records`  — the per-epoch records and their `Map`s;
//! * `contract` — instantiate and the execute/query dispatch;
//! * `upgrade`  — the `migrate` entry point: cw2's name and version checked, state kept;
//! * `funds`, `staking`, `rewards` — one concern each;
//! * `classes`  — compute-profile classes: who picks and decides a host's challenges;
//! * `hashing`, `beacon`, `commitments`, `sampling` — the byte-for-byte protocol rules
//!                (`docs/protocol.md`);
//! * `epoch`    — the phase machine, and in it `handlers` (the epoch messages), `challenges`
//!                (reveal close), `disputes` (round closes: decisions, committees), `tally`
//!                (outcomes from the decisions) and `finalize`;
//! * `query`    — every query.

#[cfg(target_arch = "wasm32")]
mod abi;
pub mod beacon;
pub mod classes;
pub mod commitments;
pub mod contract;
pub mod deps;
pub mod epoch;
pub mod error;
pub mod funds;
pub mod hashing;
pub mod limits;
pub mod msg;
pub mod query;
pub mod records;
pub mod rewards;
pub mod sampling;
pub mod sittings;
pub mod spec;
pub mod staking;
pub mod state;
pub mod storage;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;
pub mod types;
pub mod upgrade;
pub mod vdf;

// The entry points the VM calls (`migrate` only when the chain's admin migrates the contract). `allocate`, `deallocate` and `interface_version_8` are
// exported from `abi`.

#[cfg(target_arch = "wasm32")]
#[no_mangle]
pub extern "C" fn instantiate(env_ptr: u32, info_ptr: u32, msg_ptr: u32) -> u32 {
    abi::entry_with_info(
        [env_ptr, info_ptr, msg_ptr],
        "instantiate message",
        contract::instantiate,
    )
}

#[cfg(target_arch = "wasm32")]
#[no_mangle]
pub extern "C" fn execute(env_ptr: u32, info_ptr: u32, msg_ptr: u32) -> u32 {
    abi::entry_with_info(
        [env_ptr, info_ptr, msg_ptr],
        "execute message",
        contract::execute,
    )
}

/// wasmd calls it (cosmwasm-vm 2.1: `migrate(env, msg)`, no MessageInfo) for a
/// `MsgMigrateContract` from the contract's admin, with this code as the new one.
#[cfg(target_arch = "wasm32")]
#[no_mangle]
pub extern "C" fn migrate(env_ptr: u32, msg_ptr: u32) -> u32 {
    abi::entry_migrate([env_ptr, msg_ptr], "migrate message", upgrade::migrate)
}

#[cfg(target_arch = "wasm32")]
#[no_mangle]
pub extern "C" fn query(env_ptr: u32, msg_ptr: u32) -> u32 {
    abi::entry_query([env_ptr, msg_ptr], "query message", contract::query)
}
