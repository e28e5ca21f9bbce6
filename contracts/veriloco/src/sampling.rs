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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashing::tests::{unhex, vectors};
    use crate::hashing::u64be;

    fn seed32(text: &str) -> [u8; 32] {
        let mut out = [0u8; 32];
        out.copy_from_slice(&unhex(text));
        out
    }

    /// The batch indices of `docs/protocol.md`; the contract does not need them, the test checks
    /// the stream against the Python sampler's widest use.
    fn batch_indices(
        run_id: &[u8],
        prev: &[u8],
        host: &str,
        step: u64,
        batch: usize,
        n: u64,
    ) -> Vec<u64> {
        let mut material = run_id.to_vec();
        material.extend_from_slice(prev);
        material.extend_from_slice(host.as_bytes());
        material.push(0);
        material.extend_from_slice(&u64be(step));
        let mut stream = Stream::new(tag::SAMPLE_BATCH, material);
        (0..batch).map(|_| stream.uniform(n)).collect()
    }

    #[test]
    fn stream_and_uniform_match_vectors() {
        let v = vectors("stream");
        let cases = v["cases"].as_array().unwrap();
        assert_eq!(cases.len(), 4);
        for case in cases {
            let tag_name = case["tag"].as_str().unwrap();
            let material = unhex(case["material_hex"].as_str().unwrap());
            let mut s = Stream::new(tag_name, material.clone());
            for want in case["first_u64"].as_array().unwrap() {
                assert_eq!(s.next_u64().to_string(), want.as_str().unwrap());
            }
            let n: u64 = case["n"].as_str().unwrap().parse().unwrap();
            let mut s = Stream::new(tag_name, material);
            for want in case["uniform"].as_array().unwrap() {
                assert_eq!(s.uniform(n).to_string(), want.as_str().unwrap());
            }
        }
    }

    #[test]
    fn batch_indices_match_vectors() {
        let v = vectors("sampling");
        let cases = v["batch_indices"].as_array().unwrap();
        assert!(!cases.is_empty());
        for case in cases {
            let got = batch_indices(
                &unhex(case["run_id"].as_str().unwrap()),
                &unhex(case["prev_epoch_seed"].as_str().unwrap()),
                case["host"].as_str().unwrap(),
                case["step"].as_u64().unwrap(),
                case["batch_size"].as_u64().unwrap() as usize,
                case["n_windows"].as_u64().unwrap(),
            );
            let want: Vec<u64> = case["indices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn challenged_segments_match_vectors() {
        let v = vectors("sampling");
        let cases = v["challenged_segments"].as_array().unwrap();
        assert!(cases.len() >= 10);
        for case in cases {
            let got = challenged_segments(
                &seed32(case["epoch_seed"].as_str().unwrap()),
                case["host"].as_str().unwrap(),
                case["segments"].as_u64().unwrap() as u32,
                case["k"].as_u64().unwrap() as u32,
            );
            let want: Vec<u32> = case["challenged"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(got, want, "case {case}");
        }
    }

    #[test]
    fn challenge_validators_match_vectors() {
        let v = vectors("sampling");
        let cases = v["challenge_validators"].as_array().unwrap();
        assert!(cases.len() >= 10);
        for case in cases {
            let validators: Vec<String> = case["validators"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect();
            let got = challenge_validators(
                &seed32(case["epoch_seed"].as_str().unwrap()),
                case["host"].as_str().unwrap(),
                case["segment"].as_u64().unwrap() as u32,
                &validators,
                case["r"].as_u64().unwrap() as u32,
            );
            let want: Vec<String> = case["assigned"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect();
            assert_eq!(got, want, "case {case}");
            assert!(!got.iter().any(|v| v == case["host"].as_str().unwrap()));
        }
    }

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
    }
}
