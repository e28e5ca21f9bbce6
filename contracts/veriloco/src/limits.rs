//! The limits the contract enforces that the Python side checks the same way. Their one
//! definition is `protocol/rules/limits.py`; `tests/vectors/limits.json` is generated from it,
//! and the native tests (`tests::vectors`) fail unless every constant here equals its entry there
//! and every entry there has a constant here.

/// Most segments one epoch of a host may have (`MAX_SEGMENTS`).
pub const MAX_SEGMENTS: u32 = 1024;
/// Most participants of one role per epoch (`MAX_PARTICIPANTS`): bounds the work of closing a
/// phase.
pub const MAX_PARTICIPANTS: u32 = 1024;
/// Basis points in one whole (`BPS_DENOMINATOR`).
pub const BPS_DENOMINATOR: u16 = 10_000;
/// Longest phase, in blocks (`MAX_BLOCKS`).
pub const MAX_BLOCKS: u64 = 10_000_000;
/// Largest and default page of `epochs` (each item lists the epoch's participants).
pub const EPOCHS_PAGE: u32 = 30;
pub const EPOCHS_PAGE_DEFAULT: u32 = 10;
/// Largest and default page of `members`.
pub const MEMBERS_PAGE: u32 = 100;
pub const MEMBERS_PAGE_DEFAULT: u32 = 30;
/// Largest and default page of `aggregation_inputs`.
pub const AGGREGATION_PAGE: u32 = 100;
pub const AGGREGATION_PAGE_DEFAULT: u32 = 30;
/// Largest and default number of challenged hosts one page of `challenges` scans.
pub const CHALLENGES_PAGE: u32 = 128;
pub const CHALLENGES_PAGE_DEFAULT: u32 = 64;
/// Largest and default page of `report`, in units: a host costs one plus one per 16 votes its
/// challenges hold (`query::report_cost`), a validator one.
pub const REPORT_PAGE: u32 = 32;
pub const REPORT_PAGE_DEFAULT: u32 = 32;
/// Longest member endpoint, in bytes.
pub const MAX_ENDPOINT_LEN: usize = 256;
/// Longest address, in bytes (the VM's limit on a human address).
pub const MAX_ADDRESS_LEN: usize = crate::deps::MAX_HUMAN_ADDRESS;
/// Longest canonical decimal string (a verdict's distance), in characters.
pub const MAX_DECIMAL_LEN: usize = 40;
/// Largest loss a commitment or a model proposal may carry, in micro-nats (`MAX_LOSS_MICRO`):
/// every reader of a report can hold it.
pub const MAX_LOSS_MICRO: u64 = 2_147_483_647;
/// Largest magnitude of a probe gain a verdict may carry, in micro-nats (`MAX_GAIN_MICRO`; the
/// probe clamps to it, and scores a probed model whose loss is not a number at its negative).
pub const MAX_GAIN_MICRO: u64 = 1_000_000_000_000;
/// Largest `verification.seats_cap` (`MAX_SEATS_CAP`): the most seats a committee of pickers draws.
pub const MAX_SEATS_CAP: u32 = 64;
/// Most join extensions a run may allow (`MAX_JOIN_EXTENSIONS`).
pub const MAX_JOIN_EXTENSIONS: u32 = 1000;
/// Most objections one `ready` carries (`MAX_OBJECTIONS_PER_READY`); a `ready` with fewer is its
/// sender's last.
pub const MAX_OBJECTIONS_PER_READY: usize = 64;

/// Longest `economics.miss_window_epochs` (`MAX_MISS_WINDOW_EPOCHS`): a member record keeps its
/// misses of this many epochs before its last one (one 64-bit word).
pub const MAX_MISS_WINDOW_EPOCHS: u64 = 64;

/// Fewest epochs of `unbonding_epochs` (`MIN_UNBONDING_EPOCHS`): stake unbonded in an epoch is
/// released only once that epoch is settled.
pub const MIN_UNBONDING_EPOCHS: u64 = 1;
/// Smallest `min_host_stake` and `min_validator_stake` a spec may set, in base units
/// (`MIN_STAKE`): a one-basis-point slash of a minimum stake is never floored to nothing, and
/// every sybil identity locks at least this much.
pub const MIN_STAKE: u128 = 1_000_000;
/// The contract holds at most `2^MAX_HELD_BITS` base units in all (`MAX_HELD_BITS`): bonds and
/// fundings past it are refused, so finalize's arithmetic cannot overflow.
pub const MAX_HELD_BITS: u32 = 96;
/// `2^MAX_HELD_BITS`.
pub const MAX_HELD: u128 = 1 << MAX_HELD_BITS;

/// The model architectures a run spec may name (`protocol/rules/models.py`, `ARCHITECTURES`):
/// kept equal to the Python registry by `tests/vectors/architectures.json`. A spec naming any
/// other is refused at instantiation, so no node is ever asked to build code a spec names.
pub const ARCHITECTURES: [&str; 1] = ["gpt"];
