//! Typed records over a [`Storage`]: [`Item`] (one value under a fixed key) and [`Map`] (values
//! under a namespace and a key), shaped like cw-storage-plus (`load`, `may_load`, `save`,
//! `remove`, `has`, `range` with `start_after` and `limit`, `prefix` of a composite key).
//!
//! Keys: the namespace, then each part of the key ([`KeyPart`]): integers as fixed-width
//! big-endian bytes, text as its UTF-8 bytes, followed by a 0 byte unless it is the last part.
//! So keys sort by their parts in order (epoch, then address) and a prefix scan of a map's first
//! part yields the rest in order. This is the layout the contract has always stored (a plain
//! concatenation, unlike cw-storage-plus's length-prefixed parts); `docs/chain.md` lists every
//! namespace.
//!
//! Values: JSON by default ([`Json`]); [`Raw`] stores bytes and text as they are.

use std::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::deps::{Order, Record, Storage};
use crate::error::ContractError;

// -- values ------------------------------------------------------------------------------------

/// How a value of type `T` is stored.
pub trait Codec<T> {
    fn encode(value: &T) -> Vec<u8>;
    fn decode(bytes: &[u8]) -> Result<T, String>;
}

/// serde_json, as every record but two is stored.
pub struct Json;

impl<T: Serialize + DeserializeOwned> Codec<T> for Json {
    fn encode(value: &T) -> Vec<u8> {
        // Our own types serialize without fail (no maps with non-string keys, no floats).
        serde_json::to_vec(value).expect("serialize a record")
    }

    fn decode(bytes: &[u8]) -> Result<T, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

/// The bytes themselves: UTF-8 text (the deployed spec) or a 32-byte secret.
pub struct Raw;

impl Codec<String> for Raw {
    fn encode(value: &String) -> Vec<u8> {
        value.as_bytes().to_vec()
    }

    fn decode(bytes: &[u8]) -> Result<String, String> {
        String::from_utf8(bytes.to_vec()).map_err(|_| "not UTF-8".to_string())
    }
}

impl Codec<[u8; 32]> for Raw {
    fn encode(value: &[u8; 32]) -> Vec<u8> {
        value.to_vec()
    }

    fn decode(bytes: &[u8]) -> Result<[u8; 32], String> {
        let mut out = [0u8; 32];
        if bytes.len() != out.len() {
            return Err(format!("{} bytes, expected 32", bytes.len()));
        }
        out.copy_from_slice(bytes);
        Ok(out)
    }
}

fn corrupt_value(key: &[u8], reason: String) -> ContractError {
    ContractError::Corrupt(format!(
        "corrupt state under key {:?}: {reason}",
        String::from_utf8_lossy(key)
    ))
}

fn corrupt_key(key: &[u8]) -> ContractError {
    ContractError::Corrupt(format!("corrupt key {:?}", String::from_utf8_lossy(key)))
}

fn store<T, C: Codec<T>>(storage: &mut dyn Storage, key: &[u8], value: &T) {
    let bytes = C::encode(value);
    storage.set(key, &bytes);
}

fn fetch<T, C: Codec<T>>(storage: &dyn Storage, key: &[u8]) -> Result<Option<T>, ContractError> {
    match storage.get(key) {
        None => Ok(None),
        Some(bytes) => C::decode(&bytes)
            .map(Some)
            .map_err(|reason| corrupt_value(key, reason)),
    }
}

// -- keys --------------------------------------------------------------------------------------

/// One part of a key.
pub trait KeyPart {
    /// What reading the part back yields (`String` for `&str`).
    type Owned;

    /// Append the part; `last` is false when more parts follow.
    fn write(&self, out: &mut Vec<u8>, last: bool);

    /// Read the part from the front of `bytes` (all of it when `last`); the rest follows.
    fn read(bytes: &[u8], last: bool) -> Option<(Self::Owned, &[u8])>;
}

impl KeyPart for u64 {
    type Owned = u64;

    fn write(&self, out: &mut Vec<u8>, _last: bool) {
        out.extend_from_slice(&self.to_be_bytes());
    }

    fn read(bytes: &[u8], last: bool) -> Option<(u64, &[u8])> {
        if bytes.len() < 8 || (last && bytes.len() != 8) {
            return None;
        }
        let (head, rest) = bytes.split_at(8);
        let mut be = [0u8; 8];
        be.copy_from_slice(head);
        Some((u64::from_be_bytes(be), rest))
    }
}

impl KeyPart for u32 {
    type Owned = u32;

    fn write(&self, out: &mut Vec<u8>, _last: bool) {
        out.extend_from_slice(&self.to_be_bytes());
    }

    fn read(bytes: &[u8], last: bool) -> Option<(u32, &[u8])> {
        if bytes.len() < 4 || (last && bytes.len() != 4) {
            return None;
        }
        let (head, rest) = bytes.split_at(4);
        let mut be = [0u8; 4];
        be.copy_from_slice(head);
        Some((u32::from_be_bytes(be), rest))
    }
}

/// Text (addresses, hashes). Not last: terminated by a 0 byte, which addresses never contain.
impl<'a> KeyPart for &'a str {
    type Owned = String;

    fn write(&self, out: &mut Vec<u8>, last: bool) {
        debug_assert!(
            last || !self.as_bytes().contains(&0),
            "a key part with a 0 byte"
        );
        out.extend_from_slice(self.as_bytes());
        if !last {
            out.push(0);
        }
    }

    fn read(bytes: &[u8], last: bool) -> Option<(String, &[u8])> {
        let (text, rest) = if last {
            (bytes, &bytes[bytes.len()..])
        } else {
            let end = bytes.iter().position(|b| *b == 0)?;
            (&bytes[..end], &bytes[end + 1..])
        };
        let text = String::from_utf8(text.to_vec()).ok()?;
        Some((text, rest))
    }
}

/// A whole key: one part, or a tuple of parts.
pub trait PrimaryKey {
    /// What reading the key back yields.
    type Owned;

    fn write_key(&self, out: &mut Vec<u8>);

    fn read_key(bytes: &[u8]) -> Option<Self::Owned>;
}

impl<P: KeyPart> PrimaryKey for P {
    type Owned = P::Owned;

    fn write_key(&self, out: &mut Vec<u8>) {
        self.write(out, true);
    }

    fn read_key(bytes: &[u8]) -> Option<P::Owned> {
        P::read(bytes, true).map(|(part, _)| part)
    }
}

impl<A: KeyPart, B: KeyPart> PrimaryKey for (A, B) {
    type Owned = (A::Owned, B::Owned);

    fn write_key(&self, out: &mut Vec<u8>) {
        self.0.write(out, false);
        self.1.write(out, true);
    }

    fn read_key(bytes: &[u8]) -> Option<Self::Owned> {
        let (a, rest) = A::read(bytes, false)?;
        let (b, _) = B::read(rest, true)?;
        Some((a, b))
    }
}

impl<A: KeyPart, B: KeyPart, C: KeyPart> PrimaryKey for (A, B, C) {
    type Owned = (A::Owned, B::Owned, C::Owned);

    fn write_key(&self, out: &mut Vec<u8>) {
        self.0.write(out, false);
        self.1.write(out, false);
        self.2.write(out, true);
    }

    fn read_key(bytes: &[u8]) -> Option<Self::Owned> {
        let (a, rest) = A::read(bytes, false)?;
        let (b, rest) = B::read(rest, false)?;
        let (c, _) = C::read(rest, true)?;
        Some((a, b, c))
    }
}

impl<A: KeyPart, B: KeyPart, C: KeyPart, D: KeyPart> PrimaryKey for (A, B, C, D) {
    type Owned = (A::Owned, B::Owned, C::Owned, D::Owned);

    fn write_key(&self, out: &mut Vec<u8>) {
        self.0.write(out, false);
        self.1.write(out, false);
        self.2.write(out, false);
        self.3.write(out, true);
    }

    fn read_key(bytes: &[u8]) -> Option<Self::Owned> {
        let (a, rest) = A::read(bytes, false)?;
        let (b, rest) = B::read(rest, false)?;
        let (c, rest) = C::read(rest, false)?;
        let (d, _) = D::read(rest, true)?;
        Some((a, b, c, d))
    }
}

// -- Item --------------------------------------------------------------------------------------

/// One value under a fixed key.
pub struct Item<T, C = Json> {
    key: &'static [u8],
    _value: PhantomData<(T, C)>,
}

impl<T, C> Item<T, C> {
    pub const fn new(key: &'static [u8]) -> Self {
        Item {
            key,
            _value: PhantomData,
        }
    }
}

impl<T, C: Codec<T>> Item<T, C> {
    pub fn save(&self, storage: &mut dyn Storage, value: &T) {
        store::<T, C>(storage, self.key, value);
    }

    /// The value, or None if it was never saved.
    pub fn may_load(&self, storage: &dyn Storage) -> Result<Option<T>, ContractError> {
        fetch::<T, C>(storage, self.key)
    }

    /// The value, which instantiate saved.
    pub fn load(&self, storage: &dyn Storage) -> Result<T, ContractError> {
        self.may_load(storage)?.ok_or_else(|| {
            ContractError::NotInstantiated(String::from_utf8_lossy(self.key).into_owned())
        })
    }

    pub fn remove(&self, storage: &mut dyn Storage) {
        storage.remove(self.key);
    }
}

// -- Map ---------------------------------------------------------------------------------------

/// Values under `namespace || key`.
pub struct Map<K, T, C = Json> {
    namespace: &'static [u8],
    _types: PhantomData<(K, T, C)>,
}

impl<K, T, C> Map<K, T, C> {
    pub const fn new(namespace: &'static [u8]) -> Self {
        Map {
            namespace,
            _types: PhantomData,
        }
    }
}

impl<K: PrimaryKey, T, C: Codec<T>> Map<K, T, C> {
    /// The stored key of `key`.
    pub fn key(&self, key: K) -> Vec<u8> {
        let mut out = self.namespace.to_vec();
        key.write_key(&mut out);
        out
    }

    pub fn save(&self, storage: &mut dyn Storage, key: K, value: &T) {
        store::<T, C>(storage, &self.key(key), value);
    }

    pub fn may_load(&self, storage: &dyn Storage, key: K) -> Result<Option<T>, ContractError> {
        fetch::<T, C>(storage, &self.key(key))
    }

    /// The value, or `missing()` if there is none.
    pub fn load_or(
        &self,
        storage: &dyn Storage,
        key: K,
        missing: impl FnOnce() -> ContractError,
    ) -> Result<T, ContractError> {
        self.may_load(storage, key)?.ok_or_else(missing)
    }

    /// Whether a value is stored under `key` (reads it: the VM has no cheaper check).
    pub fn has(&self, storage: &dyn Storage, key: K) -> bool {
        storage.get(&self.key(key)).is_some()
    }

    pub fn remove(&self, storage: &mut dyn Storage, key: K) {
        storage.remove(&self.key(key));
    }

    /// Records in key order after `start_after` (from the first when None), decoded lazily.
    pub fn range<'a>(
        &self,
        storage: &'a dyn Storage,
        start_after: Option<K>,
        order: Order,
    ) -> Records<'a, K, T, C> {
        let mut start = None;
        let mut end = prefix_end(self.namespace);
        match (start_after, order) {
            (None, _) => {}
            (Some(after), Order::Ascending) => {
                // The smallest key after `namespace || after`.
                let mut key = self.key(after);
                key.push(0);
                start = Some(key);
            }
            (Some(after), Order::Descending) => end = Some(self.key(after)),
        }
        let start = start.unwrap_or_else(|| self.namespace.to_vec());
        Records::new(
            storage.range(Some(&start), end.as_deref(), order),
            self.namespace.len(),
        )
    }

    /// At most `limit` records after `start_after`, in ascending key order.
    pub fn page(
        &self,
        storage: &dyn Storage,
        start_after: Option<K>,
        limit: usize,
    ) -> Result<Vec<(K::Owned, T)>, ContractError> {
        self.range(storage, start_after, Order::Ascending)
            .take(limit)
            .collect()
    }
}

impl<A: KeyPart, B: KeyPart, T, C: Codec<T>> Map<(A, B), T, C> {
    /// The records whose key starts with `first`, keyed by the rest.
    pub fn prefix(&self, first: A) -> Prefix<B, T, C> {
        let mut namespace = self.namespace.to_vec();
        first.write(&mut namespace, false);
        Prefix::new(namespace)
    }
}

impl<A: KeyPart, B: KeyPart, C: KeyPart, T, V: Codec<T>> Map<(A, B, C), T, V> {
    /// The records whose key starts with `first`, `second`, keyed by the rest.
    pub fn prefix2(&self, first: A, second: B) -> Prefix<C, T, V> {
        let mut namespace = self.namespace.to_vec();
        first.write(&mut namespace, false);
        second.write(&mut namespace, false);
        Prefix::new(namespace)
    }
}

impl<A: KeyPart, B: KeyPart, C: KeyPart, D: KeyPart, T, V: Codec<T>> Map<(A, B, C, D), T, V> {
    /// The records whose key starts with `first`, keyed by the rest.
    pub fn prefix(&self, first: A) -> Prefix<(B, C, D), T, V> {
        let mut namespace = self.namespace.to_vec();
        first.write(&mut namespace, false);
        Prefix::new(namespace)
    }

    /// The records whose key starts with `first`, `second`, keyed by the rest.
    pub fn prefix2(&self, first: A, second: B) -> Prefix<(C, D), T, V> {
        let mut namespace = self.namespace.to_vec();
        first.write(&mut namespace, false);
        second.write(&mut namespace, false);
        Prefix::new(namespace)
    }

    /// The records whose key starts with `first`, `second`, `third`, keyed by the rest.
    pub fn prefix3(&self, first: A, second: B, third: C) -> Prefix<D, T, V> {
        let mut namespace = self.namespace.to_vec();
        first.write(&mut namespace, false);
        second.write(&mut namespace, false);
        third.write(&mut namespace, false);
        Prefix::new(namespace)
    }
}

/// The records of a [`Map`] under one value of its first key part.
pub struct Prefix<K, T, C = Json> {
    namespace: Vec<u8>,
    _types: PhantomData<(K, T, C)>,
}

impl<K: PrimaryKey, T, C: Codec<T>> Prefix<K, T, C> {
    fn new(namespace: Vec<u8>) -> Self {
        Prefix {
            namespace,
            _types: PhantomData,
        }
    }

    /// Records after `start_after` (the rest of the key), in key order, decoded lazily.
    pub fn range<'a>(
        &self,
        storage: &'a dyn Storage,
        start_after: Option<K>,
        order: Order,
    ) -> Records<'a, K, T, C> {
        let mut start = self.namespace.clone();
        let mut end = prefix_end(&self.namespace);
        if let Some(after) = start_after {
            let mut key = self.namespace.clone();
            after.write_key(&mut key);
            match order {
                Order::Ascending => {
                    key.push(0);
                    start = key;
                }
                Order::Descending => end = Some(key),
            }
        }
        Records::new(
            storage.range(Some(&start), end.as_deref(), order),
            self.namespace.len(),
        )
    }

    /// Every record, in ascending key order (collected: safe to write afterwards).
    pub fn all(&self, storage: &dyn Storage) -> Result<Vec<(K::Owned, T)>, ContractError> {
        self.range(storage, None, Order::Ascending).collect()
    }

    /// At most `limit` records after `start_after`, in ascending key order.
    pub fn page(
        &self,
        storage: &dyn Storage,
        start_after: Option<K>,
        limit: usize,
    ) -> Result<Vec<(K::Owned, T)>, ContractError> {
        self.range(storage, start_after, Order::Ascending)
            .take(limit)
            .collect()
    }
}

/// The smallest key greater than every key starting with `prefix` (None: unbounded).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Decoded records of a range: `(key without the namespace, value)`.
pub struct Records<'a, K, T, C> {
    inner: Box<dyn Iterator<Item = Record> + 'a>,
    skip: usize,
    _types: PhantomData<(K, T, C)>,
}

impl<'a, K, T, C> Records<'a, K, T, C> {
    fn new(inner: Box<dyn Iterator<Item = Record> + 'a>, skip: usize) -> Self {
        Records {
            inner,
            skip,
            _types: PhantomData,
        }
    }
}

impl<'a, K: PrimaryKey, T, C: Codec<T>> Iterator for Records<'a, K, T, C> {
    type Item = Result<(K::Owned, T), ContractError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (key, value) = self.inner.next()?;
        let decoded = key
            .get(self.skip..)
            .and_then(K::read_key)
            .ok_or_else(|| corrupt_key(&key))
            .and_then(|k| {
                C::decode(&value)
                    .map(|v| (k, v))
                    .map_err(|reason| corrupt_value(&key, reason))
            });
        Some(decoded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::MemoryStorage;

    const SCORES: Map<(u64, &str), u32> = Map::new(b"sc/");
    const VOTES: Map<(u64, &str, u32, &str), String> = Map::new(b"vo/");
    const NAMES: Map<&str, String> = Map::new(b"nm/");
    const SECRET: Item<[u8; 32], Raw> = Item::new(b"secret");

    #[test]
    fn keys_are_plain_concatenations() {
        assert_eq!(SCORES.key((1, "ab")), b"sc/\0\0\0\0\0\0\0\x01ab".to_vec());
        assert_eq!(
            VOTES.key((2, "h", 7, "v")),
            b"vo/\0\0\0\0\0\0\0\x02h\0\0\0\0\x07v".to_vec()
        );
    }

    #[test]
    fn item_and_map_round_trip() {
        let mut store = MemoryStorage::default();
        assert_eq!(SECRET.may_load(&store).unwrap(), None);
        assert_eq!(
            SECRET.load(&store).unwrap_err().to_string(),
            "secret missing: contract not instantiated"
        );
        SECRET.save(&mut store, &[7u8; 32]);
        assert_eq!(store.get(b"secret"), Some(vec![7u8; 32]));
        assert_eq!(SECRET.load(&store).unwrap(), [7u8; 32]);
        SECRET.remove(&mut store);
        assert!(store.get(b"secret").is_none());

        SCORES.save(&mut store, (1, "b"), &2);
        SCORES.save(&mut store, (1, "a"), &1);
        SCORES.save(&mut store, (2, "a"), &3);
        assert!(SCORES.has(&store, (1, "a")));
        assert_eq!(SCORES.may_load(&store, (1, "c")).unwrap(), None);
        let one = SCORES.prefix(1).all(&store).unwrap();
        assert_eq!(one, vec![("a".to_string(), 1), ("b".to_string(), 2)]);
        let after = SCORES.prefix(1).page(&store, Some("a"), 10).unwrap();
        assert_eq!(after, vec![("b".to_string(), 2)]);
        let down: Vec<_> = SCORES
            .prefix(1)
            .range(&store, Some("b"), Order::Descending)
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(down, vec![("a".to_string(), 1)]);
        let whole = SCORES.page(&store, Some((1, "b")), 10).unwrap();
        assert_eq!(whole, vec![((2, "a".to_string()), 3)]);
        SCORES.remove(&mut store, (1, "a"));
        assert_eq!(SCORES.prefix(1).all(&store).unwrap().len(), 1);
    }

    #[test]
    fn composite_keys_read_back() {
        let mut store = MemoryStorage::default();
        VOTES.save(&mut store, (3, "inj1host", 7, "inj1val"), &"x".to_string());
        VOTES.save(&mut store, (3, "inj1host", 2, "inj1val"), &"y".to_string());
        VOTES.save(&mut store, (4, "inj1other", 0, "inj1val"), &"z".to_string());
        let got = VOTES.prefix(3).all(&store).unwrap();
        let keys: Vec<_> = got.iter().map(|(k, _)| k.clone()).collect();
        assert_eq!(
            keys,
            vec![
                ("inj1host".to_string(), 2, "inj1val".to_string()),
                ("inj1host".to_string(), 7, "inj1val".to_string()),
            ]
        );
        assert!(VOTES.has(&store, (4, "inj1other", 0, "inj1val")));
        assert!(!VOTES.has(&store, (4, "inj1other", 1, "inj1val")));
    }

    #[test]
    fn full_map_pages_by_key() {
        let mut store = MemoryStorage::default();
        for name in ["c", "a", "b"] {
            NAMES.save(&mut store, name, &name.to_uppercase());
        }
        // Another namespace that sorts right after ours is not read.
        store.set(b"nm0", b"other");
        let first = NAMES.page(&store, None, 2).unwrap();
        assert_eq!(
            first,
            vec![("a".into(), "A".into()), ("b".into(), "B".into())]
        );
        let rest = NAMES.page(&store, Some("b"), 2).unwrap();
        assert_eq!(rest, vec![("c".into(), "C".into())]);
    }

    #[test]
    fn corrupt_values_are_errors() {
        let mut store = MemoryStorage::default();
        store.set(b"nm/a", b"not json");
        let err = NAMES.may_load(&store, "a").unwrap_err().to_string();
        assert!(err.starts_with("corrupt state under key \"nm/a\""), "{err}");
        store.set(b"secret", b"short");
        assert!(SECRET.load(&store).is_err());
    }
}
