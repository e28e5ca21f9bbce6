//! The game's commitments, byte for byte as `docs/protocol.md` ("Verdicts, traps and disputes")
//! and `protocol/rules/commitments.py`: a validator's verdict commitment, a host's trap
//! commitment, and the seed of a dispute round. `tests/vectors/commitments.json` pins all three.

use crate::hashing::{tag, tagged_hash, u32be, u64be};

/// `H("verdict", utf8(validator) || 0x00 || u64be(epoch) || utf8(host) || 0x00 || u32be(segment)
/// || u8(outcome) || utf8(distance) || 0x00 || evidence || salt)`, with the outcome's code
/// (`pass` 0, `fail` 1, `unavailable` 2). Binding the validator's address means a copied
/// commitment never opens for the copier. A verdict on a host's last segment that carries the
/// host's probe gain appends `0x01 || u64be(gain_micro as two's complement)` after the salt, so
/// the gain is hidden like the rest; without one the preimage is exactly the older format. A vote
/// that decides a gain dispute (a re-vote or a final vote) also carries the host's gain on its
/// dispute windows, appending `0x02 || u64be(dispute_gain_micro as two's complement)` after the
/// gain (only ever with one).
#[allow(clippy::too_many_arguments)]
pub fn verdict_commitment(
    validator: &str,
    epoch: u64,
    host: &str,
    segment: u32,
    outcome: u8,
    distance: &str,
    evidence: &[u8; 32],
    salt: &[u8; 32],
    gain_micro: Option<i64>,
    dispute_gain_micro: Option<i64>,
) -> [u8; 32] {
    let mut gain: Vec<u8> = match gain_micro {
        Some(g) => [&[1u8][..], &u64be(g as u64)[..]].concat(),
        None => Vec::new(),
    };
    if let Some(d) = dispute_gain_micro {
        gain.extend_from_slice(&[2u8]);
        gain.extend_from_slice(&u64be(d as u64));
    }
    tagged_hash(
        tag::VERDICT,
        &[
            validator.as_bytes(),
            &[0u8],
            &u64be(epoch),
            host.as_bytes(),
            &[0u8],
            &u32be(segment),
            &[outcome],
            distance.as_bytes(),
            &[0u8],
            evidence,
            salt,
            &gain,
        ],
    )
}

/// `H("traps", utf8(host) || 0x00 || u64be(epoch) || u32be(n) || u32be(t_1) || … || u32be(t_n)
/// || salt)` over the trap segments in ascending order (an honest host commits to n = 0).
pub fn trap_commitment(host: &str, epoch: u64, segments: &[u32], salt: &[u8; 32]) -> [u8; 32] {
    let mut list = Vec::with_capacity(4 + 4 * segments.len());
    list.extend_from_slice(&u32be(segments.len() as u32));
    for s in segments {
        list.extend_from_slice(&u32be(*s));
    }
    tagged_hash(
        tag::TRAPS,
        &[host.as_bytes(), &[0u8], &u64be(epoch), &list, salt],
    )
}
