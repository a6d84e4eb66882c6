//! Hash functions. Both are stable across versions and platforms because partition placement and
//! recovered state depend on them.
//!
//! * `partition_hash`: FNV-1a 64 over the partition-key bytes (the memcomparable encoding of the
//!   partition-key columns, see `row`), then `partition = hash % partition_count`. Documented in
//!   ARCHITECTURE.md; never change it without a data migration.
//! * `index_hash`: a fast multiply-mix hash for in-memory hash tables (primary hash index).

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

#[cfg(test)]
mod tests {
    use super::*;

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
