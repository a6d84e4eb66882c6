//! Hash functions. Both are stable across versions and platforms because partition placement and
//! recovered state depend on them.
//!
//! * `partition_hash`: FNV-1a 64 over the partition-key bytes (the memcomparable encoding of the
//!   partition-key columns, see `row`), then `partition = hash % partition_count`. Documented in
//!   ARCHITECTURE.md; never change it without a data migration.
//! * `index_hash`: a fast multiply-mix hash for in-memory hash tables (primary hash index).
//! * `FastState` / `FastMap`: the same mix as a seeded `BuildHasher` for std maps on hot paths.

/// FNV-1a, 64 bit (Fowler, Noll, Vo; parameters from the public FNV specification).
pub fn partition_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub fn partition_of(partition_key: &[u8], partition_count: u32) -> u32 {
    assert!(partition_count > 0);
    (partition_hash(partition_key) % partition_count as u64) as u32
}

#[inline]
fn mix(a: u64, b: u64) -> u64 {
    let r = (a as u128).wrapping_mul(b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

/// Hash for in-memory hash tables; consumes 8 bytes per step.
#[inline]
pub fn index_hash(bytes: &[u8]) -> u64 {
    const K0: u64 = 0xa076_1d64_78bd_642f;
    const K1: u64 = 0xe703_7ed1_a0b4_28db;
    let mut h = K0 ^ (bytes.len() as u64).wrapping_mul(K1);
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let v = u64::from_le_bytes(c.try_into().expect("chunk of 8"));
        h = mix(h ^ v, K1);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut t = [0u8; 8];
        t[..rest.len()].copy_from_slice(rest);
        h = mix(h ^ u64::from_le_bytes(t), K0);
    }
    mix(h, K1)
}

/// A `BuildHasher` for hot in-memory maps (the ldm lock table, the tc's transactions): the
/// multiply-mix of `index_hash` instead of SipHash, started from a random per-process seed so a
/// client cannot choose keys that collide (NOT stable across processes: never persist it).
#[derive(Clone, Copy, Debug)]
pub struct FastState(u64);

impl Default for FastState {
    fn default() -> FastState {
        use std::hash::{BuildHasher, Hasher};
        static SEED: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
        FastState(*SEED.get_or_init(|| {
            // std's RandomState carries random keys: one hash of anything gives a random seed.
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u64(0x5465_726e);
            h.finish() | 1
        }))
    }
}

impl std::hash::BuildHasher for FastState {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.0)
    }
}

/// The hasher of `FastState`.
pub struct FastHasher(u64);

const F0: u64 = 0xa076_1d64_78bd_642f;
const F1: u64 = 0xe703_7ed1_a0b4_28db;

impl std::hash::Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            h = mix(h ^ u64::from_le_bytes(c.try_into().expect("chunk of 8")), F1);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut t = [0u8; 8];
            t[..rest.len()].copy_from_slice(rest);
            h = mix(h ^ u64::from_le_bytes(t) ^ ((rest.len() as u64) << 59), F0);
        }
        self.0 = h;
    }
    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = mix(self.0 ^ v, F1);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        mix(self.0, F0)
    }
}

/// A `HashMap` with `FastState`.
pub type FastMap<K, V> = std::collections::HashMap<K, V, FastState>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_hasher_spreads_and_is_seeded_once_per_process() {
        use std::hash::BuildHasher;
        let s = FastState::default();
        let h = |k: &(u32, u32, Vec<u8>)| s.hash_one(k);
        let a = h(&(1, 2, b"abc".to_vec()));
        assert_eq!(a, FastState::default().hash_one(&(1u32, 2u32, b"abc".to_vec())), "one seed per process");
        assert_ne!(a, h(&(1, 2, b"abd".to_vec())));
        assert_ne!(a, h(&(2, 1, b"abc".to_vec())));
        assert_ne!(h(&(1, 2, b"abcdefgh".to_vec())), h(&(1, 2, b"abcdefgh\0".to_vec())));
        let mut m: FastMap<u64, u64> = FastMap::default();
        for i in 0..10_000 {
            m.insert(i, i * 2);
        }
        assert!((0..10_000).all(|i| m[&i] == i * 2));
    }

    #[test]
    fn fnv_reference_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(partition_hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(partition_hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(partition_hash(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn index_hash_spreads() {
        let a = index_hash(&1u32.to_be_bytes());
        let b = index_hash(&2u32.to_be_bytes());
        assert_ne!(a, b);
        assert_ne!(index_hash(b"abcdefgh1"), index_hash(b"abcdefgh2"));
    }
}
