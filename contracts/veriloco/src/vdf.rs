//! The check of a Wesolowski VDF over RSA-2048 modulo ±1, byte for byte as
//! `protocol/rules/vdf.py` (which also evaluates and proves; `docs/contract.md`, "The delayed
//! seed"): `π^ℓ · x^(2^T mod ℓ) = y`, two exponentiations with 128-bit exponents. Pinned by
//! `tests/vectors/vdf.json`.

use num_bigint::BigUint;
use num_traits::{One, Zero};

use crate::hashing::{tag, tagged_hash};

/// RSA Laboratories' RSA-2048 challenge number, big-endian.
const MODULUS_HEX: &str = concat!(
    "c7970ceedcc3b0754490201a7aa613cd73911081c790f5f1a8726f463550bb5b7ff0db8e1ea1189ec72f93d1",
    "650011bd721aeeacc2acde32a04107f0648c2813a31f5b0b7765ff8b44b4b6ffc93384b646eb09c7cf5e8592",
    "d40ea33c80039f35b4f14a04b51f7bfd781be4d1673164ba8eb991c2c4d730bbbe35f592bdef524af7e8daef",
    "d26c66fc02c479af89d64d373f442709439de66ceb955f3ea37d5159f6135809f85334b5cb1813addc80cd05",
    "609f10ac6a95ad65872c909525bdad32bc729592642920f24c61dc5b3c3b7923e56b16a4d9d373d8721f24a3",
    "fc0f1b3131f55615172866bccc30f95054c824e733a5eb6817f7bc16399d48c6361cc7e5",
);

/// An element's encoding: 256 bytes big-endian (512 hex characters).
pub const ELEMENT_BYTES: usize = 256;
/// The largest delay a spec may ask for (`verification.delay_squarings`).
pub const MAX_SQUARINGS: u64 = 1 << 40;
const PRIME_TRIES: u32 = 1 << 16;
const SMALL_PRIMES: [u32; 20] = [
    2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71,
];

fn modulus() -> BigUint {
    BigUint::parse_bytes(MODULUS_HEX.as_bytes(), 16).expect("the modulus is hex")
}

fn normalize(a: &BigUint, n: &BigUint) -> BigUint {
    let a = a % n;
    let b = n - &a;
    if b < a {
        b
    } else {
        a
    }
}

fn encode(a: &BigUint) -> Vec<u8> {
    let bytes = a.to_bytes_be();
    let mut out = vec![0u8; ELEMENT_BYTES - bytes.len()];
    out.extend_from_slice(&bytes);
    out
}

/// An element from its 512 lowercase hex characters: `None` unless it is canonical, in
/// `[1, (N − 1)/2]`.
pub fn decode(text: &str) -> Option<BigUint> {
    let ok = text.len() == 2 * ELEMENT_BYTES
        && text
            .bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c));
    if !ok {
        return None;
    }
    let a = BigUint::parse_bytes(text.as_bytes(), 16)?;
    let half = modulus() >> 1u32;
    (!a.is_zero() && a <= half).then_some(a)
}

/// `x` for a seed: 256 bytes of `H("vdf/input", seed || u32be(i))`, i = 0..7, modulo N, ±1.
pub fn input_element(seed: &[u8]) -> BigUint {
    let mut wide = Vec::with_capacity(ELEMENT_BYTES);
    for i in 0..(ELEMENT_BYTES / 32) as u32 {
        wide.extend_from_slice(&tagged_hash(tag::VDF_INPUT, &[seed, &i.to_be_bytes()]));
    }
    normalize(&BigUint::from_bytes_be(&wide), &modulus())
}

/// Miller–Rabin with the first 20 primes as bases.
pub fn is_probable_prime(n: &BigUint) -> bool {
    let two = BigUint::from(2u32);
    if n < &two {
        return false;
    }
    for p in SMALL_PRIMES {
        if (n % p).is_zero() {
            return *n == BigUint::from(p);
        }
    }
    let n1 = n - 1u32;
    let s = n1.trailing_zeros().unwrap_or(0);
    let d = &n1 >> s;
    'bases: for a in SMALL_PRIMES {
        let mut x = BigUint::from(a).modpow(&d, n);
        if x.is_one() || x == n1 {
            continue;
        }
        for _ in 1..s {
            x = &x * &x % n;
            if x == n1 {
                continue 'bases;
            }
        }
        return false;
    }
    true
}

/// Wesolowski's challenge prime `ℓ` for (x, y, T).
pub fn challenge_prime(x: &BigUint, y: &BigUint, squarings: u64) -> Option<BigUint> {
    let (ex, ey) = (encode(x), encode(y));
    let t = squarings.to_be_bytes();
    let top = BigUint::one() << 127u32;
    for i in 0..PRIME_TRIES {
        let block = tagged_hash(tag::VDF_PRIME, &[&ex, &ey, &t, &i.to_be_bytes()]);
        let candidate = BigUint::from_bytes_be(&block[..16]) | &top | BigUint::one();
        if is_probable_prime(&candidate) {
            return Some(candidate);
        }
    }
    None
}

/// Whether `proof` shows `y = x^(2^T)` modulo ±1 (both canonical elements).
pub fn verify(x: &BigUint, squarings: u64, y: &BigUint, proof: &BigUint) -> bool {
    if !(1..=MAX_SQUARINGS).contains(&squarings) {
        return false;
    }
    let n = modulus();
    let half = &n >> 1u32;
    if y.is_zero() || proof.is_zero() || y > &half || proof > &half {
        return false;
    }
    let ell = match challenge_prime(x, y, squarings) {
        Some(ell) => ell,
        None => return false,
    };
    let r = BigUint::from(2u32).modpow(&BigUint::from(squarings), &ell);
    let lhs = proof.modpow(&ell, &n) * x.modpow(&r, &n);
    normalize(&lhs, &n) == *y
}

/// The seed the challenges are drawn from: `H("vdf/seed", enc(y))`.
pub fn delayed_seed(y: &BigUint) -> [u8; 32] {
    tagged_hash(tag::VDF_SEED, &[&encode(y)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_modulus_is_rsa_2048() {
        let n = modulus();
        assert_eq!(n.bits(), 2048);
        assert_eq!(n.to_str_radix(10).len(), 617);
        assert!(n
            .to_str_radix(10)
            .starts_with("2519590847565789349402718324004839857142928"));
    }

    #[test]
    fn small_primes_and_composites() {
        let primes = [2u64, 3, 71, 73, 7919, (1u64 << 61) - 1];
        let composites = [1u64, 4, 561, 3215031751, 341550071728321];
        for p in primes {
            assert!(is_probable_prime(&BigUint::from(p)), "{p}");
        }
        for c in composites {
            assert!(!is_probable_prime(&BigUint::from(c)), "{c}");
        }
    }

    #[test]
    fn a_short_delay_verifies_and_its_neighbours_do_not() {
        let n = modulus();
        let x = input_element(&[9u8; 32]);
        let t = 64u64;
        let y = normalize(&x.modpow(&(BigUint::one() << t as usize), &n), &n);
        let ell = challenge_prime(&x, &y, t).unwrap();
        let q = (BigUint::one() << t as usize) / &ell;
        let proof = normalize(&x.modpow(&q, &n), &n);
        assert!(verify(&x, t, &y, &proof));
        assert!(!verify(&x, t + 1, &y, &proof));
        assert!(!verify(&x, t, &normalize(&(&y + 1u32), &n), &proof));
        assert!(!verify(&x, 0, &y, &proof));
        // −y is y's element but not its canonical form.
        assert!(!verify(&x, t, &(&n - &y), &proof));
    }
}
