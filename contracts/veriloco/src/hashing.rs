//! Tagged SHA-256 and hex, byte for byte as `docs/protocol.md` ("Hashing") and
//! `protocol/rules/hashing.py`: `H(tag, data) = sha256("veriloco:" || utf8(tag) || 0x00 || data)`.

use serde::{Deserialize, Serialize};
use sha2::digest::generic_array::GenericArray;
use sha2::{compress256, Digest, Sha256};

use crate::error::ContractError;

/// Domain tags the contract uses (`protocol.rules.hashing.Tag`).
pub mod tag {
    pub const RUN_SPEC: &str = "run-spec";
    pub const BEACON_COMMIT: &str = "beacon/commit";
    pub const BEACON_SEED: &str = "beacon/seed";
    pub const BEACON_GENESIS: &str = "beacon/genesis";
    pub const SAMPLE_SEGMENTS: &str = "sample/segments";
    pub const SAMPLE_PICKERS: &str = "sample/pickers";
    pub const SAMPLE_PICKS: &str = "sample/picks";
    pub const SEAT: &str = "seat";
    pub const VERDICT: &str = "verdict";
    pub const TRAPS: &str = "traps";
    pub const VDF_INPUT: &str = "vdf/input";
    pub const VDF_PRIME: &str = "vdf/prime";
    pub const VDF_SEED: &str = "vdf/seed";
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

/// SHA-256 of `H(tag, ...)` fed across several transactions: the compression state after every
/// whole 64-byte block, the bytes of the unfinished block, and the length so far. It is stored
/// between transactions (the epoch seed hashes every reveal, and closing `reveal` reads the
/// reveals page by page); [`StreamHash::finish`] gives exactly what [`tagged_hash`] gives over
/// the same bytes.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct StreamHash {
    /// The eight state words.
    #[serde(rename = "s")]
    state: [u32; 8],
    /// Bytes not yet compressed (fewer than 64), hex.
    #[serde(rename = "b")]
    pending: String,
    /// Bytes fed so far.
    #[serde(rename = "n")]
    length: u64,
}

/// SHA-256's initial state (FIPS 180-4, 5.3.3).
const SHA256_IV: [u32; 8] = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

impl StreamHash {
    /// A hash of `"veriloco:" || tag || 0x00` so far.
    pub fn tagged(tag: &str) -> StreamHash {
        let mut out = StreamHash {
            state: SHA256_IV,
            pending: String::new(),
            length: 0,
        };
        let mut head = b"veriloco:".to_vec();
        head.extend_from_slice(tag.as_bytes());
        head.push(0);
        out.update(&[&head]);
        out
    }

    fn pending_bytes(&self) -> Vec<u8> {
        // Only this module writes `pending`, always as lowercase hex of fewer than 64 bytes.
        bytes_from_hex(&self.pending).unwrap_or_default()
    }

    /// Feed `parts` in order.
    pub fn update(&mut self, parts: &[&[u8]]) {
        let mut buffer = self.pending_bytes();
        for part in parts {
            buffer.extend_from_slice(part);
            self.length += part.len() as u64;
        }
        let whole = buffer.len() / 64 * 64;
        let blocks: Vec<GenericArray<u8, _>> = buffer[..whole]
            .chunks(64)
            .map(GenericArray::clone_from_slice)
            .collect();
        compress256(&mut self.state, &blocks);
        self.pending = hex(&buffer[whole..]);
    }

    /// The digest (SHA-256 padding: 0x80, zeros, the bit length as u64be).
    pub fn finish(&self) -> [u8; 32] {
        let mut buffer = self.pending_bytes();
        buffer.push(0x80);
        while buffer.len() % 64 != 56 {
            buffer.push(0);
        }
        buffer.extend_from_slice(&(self.length.wrapping_mul(8)).to_be_bytes());
        let blocks: Vec<GenericArray<u8, _>> = buffer
            .chunks(64)
            .map(GenericArray::clone_from_slice)
            .collect();
        let mut state = self.state;
        compress256(&mut state, &blocks);
        let mut out = [0u8; 32];
        for (i, word) in state.iter().enumerate() {
            out[4 * i..4 * i + 4].copy_from_slice(&word.to_be_bytes());
        }
        out
    }
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

/// The bytes of lowercase hex (an even number of `0-9a-f`); None otherwise. Every hex the
/// contract reads goes through here.
pub fn bytes_from_hex(text: &str) -> Option<Vec<u8>> {
    let nibble = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    };
    if text.len() % 2 != 0 {
        return None;
    }
    text.as_bytes()
        .chunks(2)
        .map(|pair| Some((nibble(pair[0])? << 4) | nibble(pair[1])?))
        .collect()
}

/// The 32 bytes of a lowercase hex digest; None unless [`is_hex_digest`].
pub fn digest_from_hex(text: &str) -> Option<[u8; 32]> {
    if !is_hex_digest(text) {
        return None;
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(&bytes_from_hex(text)?);
    Some(out)
}

/// A digest field of a message: its 32 bytes, or the refusal `NotHexDigest` naming the field.
pub fn parse_digest(
    action: &'static str,
    field: &'static str,
    value: &str,
) -> Result<[u8; 32], ContractError> {
    digest_from_hex(value).ok_or_else(|| ContractError::NotHexDigest {
        action,
        field,
        value: value.to_string(),
    })
}

/// A digest the contract stored itself (the run id, a seed, a salt): its 32 bytes, or
/// `Corrupt(corrupt)` when it is missing or malformed (never expected).
pub fn stored_digest(text: Option<&str>, corrupt: &str) -> Result<[u8; 32], ContractError> {
    text.and_then(digest_from_hex)
        .ok_or_else(|| ContractError::Corrupt(corrupt.to_string()))
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
        assert_eq!(bytes_from_hex("00ff7a"), Some(vec![0, 255, 0x7a]));
        assert_eq!(bytes_from_hex(""), Some(vec![]));
        for bad in ["0", "0g", "FF", "+1"] {
            assert_eq!(bytes_from_hex(bad), None, "{bad}");
        }
        assert_eq!(parse_digest("reveal", "salt", &hex(&digest)), Ok(digest));
        assert_eq!(
            parse_digest("reveal", "salt", "ab")
                .unwrap_err()
                .to_string(),
            ContractError::NotHexDigest {
                action: "reveal",
                field: "salt",
                value: "ab".into()
            }
            .to_string()
        );
        assert_eq!(stored_digest(Some(&hex(&digest)), "x"), Ok(digest));
        assert_eq!(
            stored_digest(None, "corrupt state: no seed"),
            Err(ContractError::Corrupt("corrupt state: no seed".into()))
        );
    }

    #[test]
    fn a_stream_hash_fed_in_pieces_equals_the_tagged_hash() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 % 251) as u8).collect();
        for cuts in [
            vec![],
            vec![1],
            vec![55, 56, 64],
            vec![63, 64, 65, 128, 200],
            vec![299],
        ] {
            let mut stream = StreamHash::tagged("beacon/seed");
            let mut from = 0;
            for cut in cuts.iter().chain(std::iter::once(&data.len())) {
                // Through JSON, as it is stored between transactions.
                let text = serde_json::to_string(&stream).unwrap();
                stream = serde_json::from_str(&text).unwrap();
                stream.update(&[&data[from..*cut]]);
                from = *cut;
            }
            assert_eq!(stream.finish(), tagged_hash("beacon/seed", &[&data]));
        }
        for n in [0usize, 1, 45, 46, 47, 55, 64, 119, 120] {
            let mut stream = StreamHash::tagged("t");
            stream.update(&[&data[..n]]);
            assert_eq!(stream.finish(), tagged_hash("t", &[&data[..n]]), "{n}");
        }
    }
}
