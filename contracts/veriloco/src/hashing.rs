//! Tagged SHA-256 and hex, byte for byte as `docs/protocol.md` ("Hashing") and
//! `protocol/rules/hashing.py`: `H(tag, data) = sha256("veriloco:" || utf8(tag) || 0x00 || data)`.

use sha2::{Digest, Sha256};

/// Domain tags the contract uses (`protocol.rules.hashing.Tag`).
pub mod tag {
    pub const RUN_SPEC: &str = "run-spec";
    pub const BEACON_COMMIT: &str = "beacon/commit";
    pub const BEACON_SEED: &str = "beacon/seed";
    pub const BEACON_GENESIS: &str = "beacon/genesis";
    pub const SAMPLE_SEGMENTS: &str = "sample/segments";
    pub const SAMPLE_VALIDATORS: &str = "sample/validators";
    pub const SAMPLE_DISPUTE: &str = "sample/dispute";
    pub const DISPUTE_SEED: &str = "dispute/seed";
    pub const VERDICT: &str = "verdict";
    pub const TRAPS: &str = "traps";
    // Rules the contract does not run, checked against the shared vectors by the tests.
    #[cfg(test)]
    pub const SAMPLE_BATCH: &str = "sample/batch";
    #[cfg(test)]
    pub const MERKLE_LEAF: &str = "merkle/leaf";
    #[cfg(test)]
    pub const MERKLE_NODE: &str = "merkle/node";
    #[cfg(test)]
    pub const LOSSES: &str = "losses";
}

/// `H(tag, parts[0] || parts[1] || ...)`.
pub fn tagged_hash(tag: &str, parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(b"veriloco:");
    hasher.update(tag.as_bytes());
    hasher.update([0u8]);
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// Lowercase hex.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

/// True for 64 lowercase hex characters (a sha256 digest, `protocol.rules.hashing.HexDigest`).
pub fn is_hex_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The 32 bytes of a lowercase hex digest; None unless [`is_hex_digest`].
pub fn digest_from_hex(text: &str) -> Option<[u8; 32]> {
    if !is_hex_digest(text) {
        return None;
    }
    let nibble = |b: u8| match b {
        b'0'..=b'9' => b - b'0',
        _ => b - b'a' + 10,
    };
    let bytes = text.as_bytes();
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = (nibble(bytes[2 * i]) << 4) | nibble(bytes[2 * i + 1]);
    }
    Some(out)
}

pub fn u32be(n: u32) -> [u8; 4] {
    n.to_be_bytes()
}

pub fn u64be(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let digest = tagged_hash("x", &[b"y"]);
        assert_eq!(digest_from_hex(&hex(&digest)), Some(digest));
        assert_eq!(digest_from_hex(&hex(&digest).to_uppercase()), None);
        assert_eq!(digest_from_hex("ab"), None);
        assert!(is_hex_digest(&"0".repeat(64)));
        assert!(!is_hex_digest(&"g".repeat(64)));
    }
}
