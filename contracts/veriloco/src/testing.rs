//! The native context of the unit tests: an in-memory [`Storage`] and an [`Api`] that checks
//! bech32 addresses (checksum included) with the chain's prefix, like cosmwasm-std's
//! `MockStorage` and `MockApi`. Test builds only: the wasm build uses `abi::ExternalStorage`
//! and `abi::ExternalApi`.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::deps::{check_address_length, Api, Deps, DepsMut, Order, Record, Storage};
use crate::error::ContractError;

/// Keys and values in a sorted map; ranges are snapshots, like the embedded chain's iterators.
#[derive(Default, Clone, Debug, PartialEq, Eq)]
pub struct MemoryStorage {
    data: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl Storage for MemoryStorage {
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.data.get(key).cloned()
    }

    fn range<'a>(
        &'a self,
        start: Option<&[u8]>,
        end: Option<&[u8]>,
        order: Order,
    ) -> Box<dyn Iterator<Item = Record> + 'a> {
        let lower = start.map_or(Bound::Unbounded, |s| Bound::Included(s.to_vec()));
        let upper = end.map_or(Bound::Unbounded, |e| Bound::Excluded(e.to_vec()));
        if let (Bound::Included(s), Bound::Excluded(e)) = (&lower, &upper) {
            if s >= e {
                return Box::new(std::iter::empty());
            }
        }
        let items = self
            .data
            .range((lower, upper))
            .map(|(k, v)| (k.clone(), v.clone()));
        match order {
            Order::Ascending => Box::new(items),
            Order::Descending => Box::new(items.rev()),
        }
    }

    fn set(&mut self, key: &[u8], value: &[u8]) {
        assert!(!value.is_empty(), "storage values must not be empty");
        self.data.insert(key.to_vec(), value.to_vec());
    }

    fn remove(&mut self, key: &[u8]) {
        self.data.remove(key);
    }
}

const CHARSET: &[u8; 32] = b"qpzry9x8gf2tvdw0s3jn54khce6mua7l";

fn polymod(values: &[u8]) -> u32 {
    const GEN: [u32; 5] = [
        0x3b6a_57b2,
        0x2650_8e6d,
        0x1ea1_19fa,
        0x3d42_33dd,
        0x2a14_62b3,
    ];
    let mut chk: u32 = 1;
    for v in values {
        let top = chk >> 25;
        chk = ((chk & 0x01ff_ffff) << 5) ^ u32::from(*v);
        for (i, g) in GEN.iter().enumerate() {
            if (top >> i) & 1 == 1 {
                chk ^= g;
            }
        }
    }
    chk
}

fn expand_hrp(hrp: &str) -> Vec<u8> {
    let mut out: Vec<u8> = hrp.bytes().map(|b| b >> 5).collect();
    out.push(0);
    out.extend(hrp.bytes().map(|b| b & 31));
    out
}

/// Regroup bits (`from` bits per input value into `to` bits per output value).
fn convert_bits(data: &[u8], from: u32, to: u32, pad: bool) -> Option<Vec<u8>> {
    let mut acc: u32 = 0;
    let mut bits: u32 = 0;
    let mut out = Vec::new();
    let max = (1u32 << to) - 1;
    for value in data {
        acc = (acc << from) | u32::from(*value);
        bits += from;
        while bits >= to {
            bits -= to;
            out.push(((acc >> bits) & max) as u8);
        }
    }
    if pad {
        if bits > 0 {
            out.push(((acc << (to - bits)) & max) as u8);
        }
    } else if bits >= from || ((acc << (to - bits)) & max) != 0 {
        return None;
    }
    Some(out)
}

/// The bech32 (BIP 173) address of `data` under `hrp`.
pub fn bech32_encode(hrp: &str, data: &[u8]) -> String {
    let values = convert_bits(data, 8, 5, true).expect("padding always converts");
    let mut check_input = expand_hrp(hrp);
    check_input.extend_from_slice(&values);
    check_input.extend_from_slice(&[0; 6]);
    let checksum = polymod(&check_input) ^ 1;
    let mut out = format!("{hrp}1");
    for v in values.iter() {
        out.push(CHARSET[*v as usize] as char);
    }
    for i in 0..6 {
        out.push(CHARSET[((checksum >> (5 * (5 - i))) & 31) as usize] as char);
    }
    out
}

/// The prefix and bytes of a lowercase bech32 address, or why it is not one.
pub fn bech32_decode(address: &str) -> Result<(String, Vec<u8>), &'static str> {
    if address.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err("not lowercase");
    }
    let split = address.rfind('1').ok_or("no separator")?;
    let (hrp, rest) = (&address[..split], &address[split + 1..]);
    if hrp.is_empty() || rest.len() < 6 {
        return Err("too short");
    }
    let values = rest
        .bytes()
        .map(|c| CHARSET.iter().position(|x| *x == c).map(|p| p as u8))
        .collect::<Option<Vec<u8>>>()
        .ok_or("invalid character")?;
    let mut check_input = expand_hrp(hrp);
    check_input.extend_from_slice(&values);
    if polymod(&check_input) != 1 {
        return Err("invalid checksum");
    }
    let data = convert_bits(&values[..values.len() - 6], 5, 8, false).ok_or("invalid padding")?;
    Ok((hrp.to_string(), data))
}

/// The chain's address functions, natively: bech32 with `prefix` and a 20- or 32-byte payload,
/// as wasmd accepts (lowercase only, as its `addr_validate`).
pub struct MockApi {
    pub prefix: &'static str,
    /// Lines passed to `debug`, in order.
    pub log: std::cell::RefCell<Vec<String>>,
}

impl Default for MockApi {
    fn default() -> Self {
        MockApi {
            prefix: "inj",
            log: Default::default(),
        }
    }
}

impl MockApi {
    /// A valid address of this chain made from `label` (20 bytes of its tagged hash).
    pub fn addr(&self, label: &str) -> String {
        let digest = crate::hashing::tagged_hash("test-address", &[label.as_bytes()]);
        bech32_encode(self.prefix, &digest[..20])
    }
}

impl Api for MockApi {
    fn addr_validate(&self, human: &str) -> Result<(), ContractError> {
        self.addr_canonicalize(human).map(|_| ())
    }

    fn addr_canonicalize(&self, human: &str) -> Result<Vec<u8>, ContractError> {
        check_address_length(human)?;
        let invalid = |reason: &str| ContractError::InvalidAddress {
            address: human.to_string(),
            reason: reason.to_string(),
        };
        let (hrp, data) = bech32_decode(human).map_err(invalid)?;
        if hrp != self.prefix {
            return Err(invalid("wrong bech32 prefix"));
        }
        if data.len() != 20 && data.len() != 32 {
            return Err(invalid("address length must be 20 or 32 bytes"));
        }
        Ok(data)
    }

    fn addr_humanize(&self, canonical: &[u8]) -> Result<String, ContractError> {
        if canonical.len() != 20 && canonical.len() != 32 {
            return Err(ContractError::AddressApi(format!(
                "cannot humanize address: {} bytes",
                canonical.len()
            )));
        }
        Ok(bech32_encode(self.prefix, canonical))
    }

    fn debug(&self, message: &str) {
        self.log.borrow_mut().push(message.to_string());
    }
}

/// A store and an API for one native test.
#[derive(Default)]
pub struct MockDeps {
    pub storage: MemoryStorage,
    pub api: MockApi,
}

impl MockDeps {
    pub fn as_mut(&mut self) -> DepsMut<'_> {
        DepsMut {
            storage: &mut self.storage,
            api: &self.api,
        }
    }

    pub fn as_ref(&self) -> Deps<'_> {
        Deps {
            storage: &self.storage,
            api: &self.api,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bech32_round_trips_and_checks() {
        let api = MockApi::default();
        let a = api.addr("host-0");
        assert!(a.starts_with("inj1") && a.len() == 42, "{a}");
        api.addr_validate(&a).unwrap();
        let canonical = api.addr_canonicalize(&a).unwrap();
        assert_eq!(api.addr_humanize(&canonical).unwrap(), a);
        // One changed character breaks the checksum.
        let mut bad = a.clone().into_bytes();
        let last = bad.len() - 1;
        bad[last] = if bad[last] == b'q' { b'p' } else { b'q' };
        let bad = String::from_utf8(bad).unwrap();
        assert!(api.addr_validate(&bad).is_err());
        assert!(api.addr_validate(&a.to_uppercase()).is_err());
        assert!(api.addr_validate("").is_err());
        assert!(api.addr_validate(&"a".repeat(300)).is_err());
        let cosmos = bech32_encode("cosmos", &canonical);
        let err = api.addr_validate(&cosmos).unwrap_err().to_string();
        assert!(err.contains("wrong bech32 prefix"), "{err}");
    }

    #[test]
    fn bip173_example() {
        // BIP 173's shortest valid string: prefix "a", no data, a checksum.
        let (hrp, _) = bech32_decode("a12uel5l").unwrap();
        assert_eq!(hrp, "a");
        assert!(bech32_decode("a12uel5m").is_err());
    }
}
