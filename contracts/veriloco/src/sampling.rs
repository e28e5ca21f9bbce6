//! Deterministic sampling, byte for byte as `docs/protocol.md` ("Sampling") and
//! `protocol/rules/sampling.py`: who picks a host's challenges (a committee drawn by stake from
//! the previous seed), which segments each picker's secret picks, and the seat rank that breaks
//! ties of stake for a full epoch. `tests/vectors/{stream,sampling}.json` pin both sides.

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

    /// A uniform integer in `[0, n)` (`1 <= n`) from 128-bit draws: two stream values, the first
    /// the high half; draw until `x < 2^128 - (2^128 mod n)`.
    pub fn uniform128(&mut self, n: u128) -> u128 {
        assert!(n >= 1, "uniform128 needs n >= 1");
        // 2^128 mod n, computed in u128: (2^128 - n) mod n == 2^128 mod n.
        let rem = (u128::MAX - n + 1) % n;
        loop {
            let x = (u128::from(self.next_u64()) << 64) | u128::from(self.next_u64());
            // x < 2^128 - rem  <=>  x <= u128::MAX - rem
            if rem == 0 || x <= u128::MAX - rem {
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

/// Candidates for a draw by stake: in address order, zero stakes dropped, with cumulative sums.
pub struct StakePool<'a> {
    members: Vec<(&'a str, u128)>,
    cumulative: Vec<u128>,
}

impl<'a> StakePool<'a> {
    /// `candidates` in any order (duplicates: the first stake counts), zero stakes dropped.
    pub fn new(candidates: impl IntoIterator<Item = (&'a str, u128)>) -> Self {
        let mut members: Vec<(&str, u128)> = candidates.into_iter().filter(|c| c.1 > 0).collect();
        members.sort_by(|a, b| a.0.cmp(b.0));
        members.dedup_by(|b, a| a.0 == b.0);
        let mut cumulative = Vec::with_capacity(members.len());
        let mut sum = 0u128;
        for (_, stake) in members.iter() {
            sum = sum.saturating_add(*stake);
            cumulative.push(sum);
        }
        StakePool {
            members,
            cumulative,
        }
    }

    pub fn total(&self) -> u128 {
        self.cumulative.last().copied().unwrap_or(0)
    }

    /// One seat: `uniform128(total)`, held by the first candidate whose cumulative stake exceeds
    /// it (the pool must hold stake).
    pub fn seat(&self, stream: &mut Stream) -> (&'a str, u128) {
        let x = stream.uniform128(self.total());
        let i = self.cumulative.partition_point(|c| *c <= x);
        self.members[i]
    }
}

/// `m` seats with replacement, each holder with probability proportional to its stake (draw
/// order, repeats included; empty without stake).
pub fn stake_seats<'a>(stream: &mut Stream, pool: &StakePool<'a>, m: usize) -> Vec<&'a str> {
    if pool.total() == 0 {
        return Vec::new();
    }
    (0..m).map(|_| pool.seat(stream).0).collect()
}

/// Seats drawn one at a time from `Stream(tag, material)` until the distinct holders hold MORE
/// than 1/3 of the pool's stake, or `cap` seats were drawn; the distinct holders, sorted.
pub fn stake_committee<'a>(
    tag: &str,
    material: Vec<u8>,
    pool: &StakePool<'a>,
    cap: u32,
) -> Vec<&'a str> {
    let total = pool.total();
    let mut chosen: Vec<&str> = Vec::new();
    if total == 0 {
        return chosen;
    }
    let mut stream = Stream::new(tag, material);
    let mut held = 0u128;
    for _ in 0..cap {
        let (address, stake) = pool.seat(&mut stream);
        if let Err(at) = chosen.binary_search(&address) {
            chosen.insert(at, address);
            held += stake;
            // Stakes are at most 2^96 each (`MAX_HELD`): held * 3 cannot overflow.
            if held.saturating_mul(3) > total {
                break;
            }
        }
    }
    chosen
}

/// The pickers of `host`: [`stake_committee`] over the epoch's joined validators (stake at join)
/// without the host, from `Stream("sample/pickers", prev_seed || utf8(host))`.
pub fn pickers<'a>(
    prev_seed: &[u8; 32],
    host: &str,
    validators: &'a [(String, u128)],
    cap: u32,
) -> Vec<&'a str> {
    let pool = StakePool::new(
        validators
            .iter()
            .filter(|(a, _)| a != host)
            .map(|(a, s)| (a.as_str(), *s)),
    );
    let mut material = prev_seed.to_vec();
    material.extend_from_slice(host.as_bytes());
    stake_committee(tag::SAMPLE_PICKERS, material, &pool, cap)
}

/// The segments a picker's `secret` picks on `host`: `min(k, S - 1)` distinct ones among the
/// first `S - 1`, from `Stream("sample/picks", secret || utf8(host))`, sorted.
pub fn picks(secret: &[u8; 32], host: &str, segments: u32, k: u32) -> Vec<u32> {
    assert!(segments >= 1, "segments must be >= 1");
    let mut material = secret.to_vec();
    material.extend_from_slice(host.as_bytes());
    let mut stream = Stream::new(tag::SAMPLE_PICKS, material);
    let pool: Vec<u32> = (0..segments - 1).collect();
    let m = k.min(segments - 1) as usize;
    let mut chosen = partial_shuffle(&mut stream, pool, m);
    chosen.sort_unstable();
    chosen
}

/// `H("seat", prev_seed || utf8(address))`: of two equal stakes at join, the larger rank keeps a
/// seat of a full epoch.
pub fn seat_rank(prev_seed: &[u8; 32], address: &str) -> [u8; 32] {
    tagged_hash(tag::SEAT, &[prev_seed, address.as_bytes()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committees_stop_past_a_third_or_at_the_cap() {
        let seed = [7u8; 32];
        let vs: Vec<(String, u128)> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|s| (s.to_string(), 10))
            .collect();
        // Six equal stakes: two holders are exactly a third, not more: three are drawn.
        let p = pickers(&seed, "h", &vs, 19);
        assert_eq!(p.len(), 3);
        assert!(p.windows(2).all(|w| w[0] < w[1]));
        // A cap of one seat: one picker.
        assert_eq!(pickers(&seed, "h", &vs, 1).len(), 1);
        // The host is never its own picker; no stake, nobody.
        let alone = vec![("h".to_string(), 5u128)];
        assert!(pickers(&seed, "h", &alone, 19).is_empty());
        // One segment: nothing to pick but the last.
        assert!(picks(&seed, "h", 1, 5).is_empty());
        assert_eq!(picks(&seed, "h", 4, 9), vec![0, 1, 2]);
    }

    #[test]
    fn uniform128_stays_below() {
        let mut s = Stream::new("t", vec![1]);
        for n in [1u128, 2, 3, 1 << 100, u128::MAX] {
            assert!(s.uniform128(n) < n);
        }
    }
}
