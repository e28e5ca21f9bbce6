//! Deterministic sampling from the epoch seed, byte for byte as `docs/protocol.md` ("Sampling")
//! and `protocol/rules/sampling.py`: which segments of a host are challenged, and which validators
//! replay each. `tests/vectors/{stream,sampling}.json` pin both implementations.

use crate::hashing::{tag, tagged_hash, u32be};

/// `Stream(tag, material)`: value `i` is the first 8 bytes, big-endian, of
/// `H(tag, material || u32be(i))`.
pub struct Stream<'a> {
    tag: &'a str,
    material: Vec<u8>,
    counter: u32,
}

impl<'a> Stream<'a> {
    pub fn new(tag: &'a str, material: Vec<u8>) -> Self {
        Stream {
            tag,
            material,
            counter: 0,
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let block = tagged_hash(self.tag, &[&self.material, &u32be(self.counter)]);
        // 2^32 draws would take far longer than any block allows; wrapping is unreachable.
        self.counter = self.counter.wrapping_add(1);
        let mut first = [0u8; 8];
        first.copy_from_slice(&block[..8]);
        u64::from_be_bytes(first)
    }

    /// A uniform integer in `[0, n)` (`1 <= n`): rejection sampling on 64-bit draws, so there is
    /// no modulo bias. `limit = 2^64 - (2^64 mod n)`; draw until `x < limit`, return `x mod n`.
    pub fn uniform(&mut self, n: u64) -> u64 {
        assert!(n >= 1, "uniform needs n >= 1");
        let two64: u128 = 1 << 64;
        let limit = two64 - two64 % u128::from(n);
        loop {
            let x = self.next_u64();
            if u128::from(x) < limit {
                return x % n;
            }
        }
    }
}

/// Partial Fisher–Yates: for `i` in `0..m`, swap `pool[i]` with `pool[i + uniform(len - i)]`;
/// the picks are `pool[..m]`.
fn partial_shuffle<T>(stream: &mut Stream, mut pool: Vec<T>, m: usize) -> Vec<T> {
    let len = pool.len();
    for i in 0..m {
        let j = i + stream.uniform((len - i) as u64) as usize;
        pool.swap(i, j);
    }
    pool.truncate(m);
    pool
}

/// The challenged segments of `host` with `segments` committed segments: `min(k, S - 1)`
/// distinct ones among `0..S-1` (sorted), followed by the last one, `S - 1`.
pub fn challenged_segments(epoch_seed: &[u8; 32], host: &str, segments: u32, k: u32) -> Vec<u32> {
    assert!(segments >= 1, "segments must be >= 1");
    let mut material = epoch_seed.to_vec();
    material.extend_from_slice(host.as_bytes());
    let mut stream = Stream::new(tag::SAMPLE_SEGMENTS, material);
    let pool: Vec<u32> = (0..segments - 1).collect();
    let m = k.min(segments - 1) as usize;
    let mut chosen = partial_shuffle(&mut stream, pool, m);
    chosen.sort_unstable();
    chosen.push(segments - 1);
    chosen
}

/// The validators of one challenge: candidates are `validators` without `host`, deduplicated
/// and sorted; `min(r, candidates)` of them are picked, and returned sorted.
pub fn challenge_validators(
    epoch_seed: &[u8; 32],
    host: &str,
    segment: u32,
    validators: &[String],
    r: u32,
) -> Vec<String> {
    let mut candidates: Vec<String> = validators
        .iter()
        .filter(|v| v.as_str() != host)
        .cloned()
        .collect();
    candidates.sort();
    candidates.dedup();
    let mut material = epoch_seed.to_vec();
    material.extend_from_slice(host.as_bytes());
    material.push(0);
    material.extend_from_slice(&u32be(segment));
    let mut stream = Stream::new(tag::SAMPLE_VALIDATORS, material);
    let m = (r as usize).min(candidates.len());
    let mut picked = partial_shuffle(&mut stream, candidates, m);
    picked.sort();
    picked
}

/// A dispute committee of round `round` for (`host`, `segment`): candidates are `validators`
/// without `host` and without `excluded` (every validator already assigned to this challenge),
/// deduplicated and sorted; `min(m, candidates)` are picked from
/// `Stream("sample/dispute", dispute_seed || utf8(host) || 0x00 || u32be(segment))` and returned
/// sorted.
pub fn dispute_committee(
    dispute_seed: &[u8; 32],
    host: &str,
    segment: u32,
    validators: &[String],
    excluded: &[String],
    m: u32,
) -> Vec<String> {
    let mut candidates: Vec<String> = validators
        .iter()
        .filter(|v| v.as_str() != host && !excluded.contains(v))
        .cloned()
        .collect();
    candidates.sort();
    candidates.dedup();
    let mut material = dispute_seed.to_vec();
    material.extend_from_slice(host.as_bytes());
    material.push(0);
    material.extend_from_slice(&u32be(segment));
    let mut stream = Stream::new(tag::SAMPLE_DISPUTE, material);
    let k = (m as usize).min(candidates.len());
    let mut picked = partial_shuffle(&mut stream, candidates, k);
    picked.sort();
    picked
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_cases() {
        let seed = [7u8; 32];
        // One segment: only the last one, whatever k.
        assert_eq!(challenged_segments(&seed, "inj1x", 1, 5), vec![0]);
        // k >= S - 1: every segment.
        assert_eq!(challenged_segments(&seed, "inj1x", 4, 9), vec![0, 1, 2, 3]);
        // No candidates.
        assert!(challenge_validators(&seed, "a", 0, &["a".to_string()], 3).is_empty());
        let vs: Vec<String> = ["b", "c", "b", "a"].iter().map(|s| s.to_string()).collect();
        assert_eq!(challenge_validators(&seed, "a", 0, &vs, 5), vec!["b", "c"]);
        // A committee never holds the host or an excluded validator.
        let all: Vec<String> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let picked = dispute_committee(&seed, "a", 0, &all, &["b".to_string()], 9);
        assert_eq!(picked, vec!["c", "d", "e"]);
        assert!(dispute_committee(&seed, "a", 0, &all, &all, 3).is_empty());
    }
}
