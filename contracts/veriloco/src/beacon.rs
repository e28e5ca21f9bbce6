//! The commit-reveal randomness beacon, byte for byte as `docs/protocol.md` ("Beacon and
//! seeds") and `protocol/rules/beacon.py`.

use crate::hashing::{tag, tagged_hash, u64be};

/// `H("beacon/commit", utf8(address) || 0x00 || u64be(epoch) || secret)`.
pub fn commitment(address: &str, epoch: u64, secret: &[u8; 32]) -> [u8; 32] {
    tagged_hash(
        tag::BEACON_COMMIT,
        &[address.as_bytes(), &[0u8], &u64be(epoch), secret],
    )
}

/// `H("beacon/seed", run_id || u64be(epoch) || utf8(a_1) || 0x00 || s_1 || ...)` over the valid
/// reveals; `reveals` must be in ascending address order (storage order gives exactly that).
pub fn epoch_seed(run_id: &[u8; 32], epoch: u64, reveals: &[(String, [u8; 32])]) -> [u8; 32] {
    let epoch_bytes = u64be(epoch);
    let mut parts: Vec<&[u8]> = vec![run_id, &epoch_bytes];
    for (address, secret) in reveals {
        parts.push(address.as_bytes());
        parts.push(&[0u8]);
        parts.push(secret);
    }
    tagged_hash(tag::BEACON_SEED, &parts)
}

/// The "previous epoch seed" of epoch 0: `H("beacon/genesis", run_id)`.
pub fn genesis_seed(run_id: &[u8; 32]) -> [u8; 32] {
    tagged_hash(tag::BEACON_GENESIS, &[run_id])
}
