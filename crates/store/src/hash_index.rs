//! The primary hash index: key hash -> row id. Performance-critical.
//!
//! Open addressing with linear probing over two parallel arrays: a 1-byte tag per slot (0 empty,
//! 1 deleted, else 0x80 | 7 bits of the hash) and a 4-byte row id. A probe reads tags, and only
//! for a matching tag the row, to compare keys; so a lookup typically touches one tag line, one id
//! line and the row. 5 bytes per slot; the table grows by 1.5x (slot = hash mapped onto any
//! capacity, not a power of two) so occupancy stays between 1/2 and 3/4 (~7-10 bytes per row).
//!
//! Batches can be prefetched: `prefetch_slot` for every key of a batch, then `prefetch_row` with
//! the candidates, then the lookups: the cache misses of a batch overlap instead of queueing.
//!
//! Invariants: every live row id appears in exactly one slot whose tag matches its hash; there is
//! always at least one empty slot, so probes end.

use crate::heap::{RowId, prefetch_ptr};

const EMPTY: u8 = 0;
const DELETED: u8 = 1;
/// Occupied + deleted slots stay below this fraction of capacity: 3/4, where a probe for an
/// absent key (every insert looks first) reads about 8 slots at most (about 32 at 7/8).
const LOAD_NUM: usize = 3;
const LOAD_DEN: usize = 4;
const MIN_CAPACITY: usize = 16;

#[derive(Debug, Default)]
pub(crate) struct HashIndex {
    tags: Vec<u8>,
    ids: Vec<u32>,
    live: usize,
    deleted: usize,
}

/// A slot's tag: 7 bits of the hash other than the ones that chose its home slot (`home` takes
/// the high bits), so the tags of neighbouring slots are independent of each other. (Tags once
/// came from the high bits: every slot a probe passed near its home had the probe's tag, and each
/// compared a row — 9 % of a LOAD DATA's worker time in those compares.)
#[inline]
fn tag_of(h: u64) -> u8 {
    0x80 | (h & 0x7f) as u8
}

#[inline]
fn home(h: u64, cap: usize) -> usize {
    ((h as u128 * cap as u128) >> 64) as usize
}

impl HashIndex {
    pub(crate) fn len(&self) -> usize {
        self.live
    }

    /// Finds the row id whose key matches (`eq(id)` compares the row's key).
    #[inline]
    pub(crate) fn find(&self, h: u64, eq: impl FnMut(RowId) -> bool) -> Option<RowId> {
        self.probe(h, eq).map(|i| self.ids[i])
    }

    /// The slot of the first id with `h`'s tag for which `eq` holds.
    #[inline]
    fn probe(&self, h: u64, mut eq: impl FnMut(RowId) -> bool) -> Option<usize> {
        let cap = self.tags.len();
        if cap == 0 {
            return None;
        }
        let t = tag_of(h);
        let mut i = home(h, cap);
        loop {
            let tag = self.tags[i];
            if tag == EMPTY {
                return None;
            }
            if tag == t && eq(self.ids[i]) {
                return Some(i);
            }
            i += 1;
            if i == cap {
                i = 0;
            }
        }
    }

    /// Inserts an id whose key is known to be absent. `hash_of(id)` rehashes existing rows when
    /// the table grows.
    pub(crate) fn insert(&mut self, h: u64, id: RowId, hash_of: impl Fn(RowId) -> u64) {
        if (self.live + self.deleted + 1) * LOAD_DEN > self.tags.len() * LOAD_NUM {
            self.resize(&hash_of);
        }
        let cap = self.tags.len();
        let mut i = home(h, cap);
        while self.tags[i] > DELETED {
            i += 1;
            if i == cap {
                i = 0;
            }
        }
        if self.tags[i] == DELETED {
            self.deleted -= 1;
        }
        self.tags[i] = tag_of(h);
        self.ids[i] = id;
        self.live += 1;
    }

    /// Removes `id` (present with hash `h`); returns whether it was there.
    pub(crate) fn remove(&mut self, h: u64, id: RowId) -> bool {
        let Some(i) = self.probe(h, |x| x == id) else { return false };
        let next = if i + 1 == self.tags.len() { 0 } else { i + 1 };
        if self.tags[next] == EMPTY {
            // Nothing probes past an empty slot: this slot can be empty too.
            self.tags[i] = EMPTY;
        } else {
            self.tags[i] = DELETED;
            self.deleted += 1;
        }
        self.live -= 1;
        true
    }

    /// Rebuilds at 1.5x the live size's need (or the same size when mostly deleted slots).
    fn resize(&mut self, hash_of: &impl Fn(RowId) -> u64) {
        let need = (self.live + 1) * LOAD_DEN / LOAD_NUM + 1;
        let cap = (need * 3 / 2).max(MIN_CAPACITY);
        let old_tags = std::mem::replace(&mut self.tags, vec![EMPTY; cap]);
        let old_ids = std::mem::replace(&mut self.ids, vec![0; cap]);
        self.deleted = 0;
        for (tag, id) in old_tags.into_iter().zip(old_ids) {
            if tag > DELETED {
                let h = hash_of(id);
                let mut i = home(h, cap);
                while self.tags[i] != EMPTY {
                    i += 1;
                    if i == cap {
                        i = 0;
                    }
                }
                self.tags[i] = tag_of(h);
                self.ids[i] = id;
            }
        }
    }

    /// Hints the CPU to load the slots a lookup of `h` starts with.
    #[inline]
    pub(crate) fn prefetch_slot(&self, h: u64) {
        let cap = self.tags.len();
        if cap > 0 {
            let i = home(h, cap);
            prefetch_ptr(self.tags.as_ptr().wrapping_add(i));
            prefetch_ptr(self.ids.as_ptr().wrapping_add(i));
        }
    }

    /// The first candidate row id of `h` (same tag), without comparing keys: for prefetching rows.
    #[inline]
    pub(crate) fn first_candidate(&self, h: u64) -> Option<RowId> {
        let cap = self.tags.len();
        if cap == 0 {
            return None;
        }
        let t = tag_of(h);
        let mut i = home(h, cap);
        for _ in 0..8 {
            match self.tags[i] {
                EMPTY => return None,
                tag if tag == t => return Some(self.ids[i]),
                _ => {}
            }
            i += 1;
            if i == cap {
                i = 0;
            }
        }
        None
    }

    /// Bytes held.
    pub(crate) fn footprint(&self) -> usize {
        self.tags.capacity() + self.ids.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use tern_types::hash::index_hash;
    use tern_types::rng::Rng;

    #[test]
    fn matches_a_map_under_churn() {
        let seed = tern_testkit::seed();
        println!("seed = {seed}");
        let mut rng = Rng::new(seed);
        let mut idx = HashIndex::default();
        // key = id for this test; row id = key.
        let h = |k: u32| index_hash(&k.to_le_bytes());
        let mut model: HashMap<u32, ()> = HashMap::new();
        for step in 0..200_000 {
            let k = rng.below(5000) as u32;
            match rng.below(3) {
                0 | 1 => {
                    if let std::collections::hash_map::Entry::Vacant(e) = model.entry(k) {
                        idx.insert(h(k), k, h);
                        e.insert(());
                    }
                }
                _ => {
                    assert_eq!(idx.remove(h(k), k), model.remove(&k).is_some(), "step {step}");
                }
            }
            if step % 997 == 0 {
                for q in 0..5000u32 {
                    assert_eq!(idx.find(h(q), |id| id == q).is_some(), model.contains_key(&q), "step {step} key {q}");
                }
            }
            assert_eq!(idx.len(), model.len());
        }
        assert!(idx.tags.contains(&EMPTY), "an empty slot always exists");
    }

    /// A probe compares rows only for real tag matches: looking for absent keys in a full table
    /// compares almost no row (with tags from the bits that chose the slot, it compared several
    /// per lookup).
    #[test]
    fn absent_keys_compare_almost_no_row() {
        let mut idx = HashIndex::default();
        let h = |k: u32| index_hash(&k.to_le_bytes());
        for k in 0..200_000u32 {
            idx.insert(h(k), k, h);
        }
        let mut compared = 0usize;
        let lookups = 100_000u32;
        for k in 1_000_000..1_000_000 + lookups {
            let found = idx.find(h(k), |_| {
                compared += 1;
                false
            });
            assert_eq!(found, None);
        }
        let per_lookup = compared as f64 / lookups as f64;
        assert!(per_lookup < 0.25, "{per_lookup} rows compared per absent key");
    }

    #[test]
    fn occupancy_stays_high() {
        let mut idx = HashIndex::default();
        let h = |k: u32| index_hash(&k.to_le_bytes());
        for k in 0..1_000_000u32 {
            idx.insert(h(k), k, h);
        }
        let per_row = idx.footprint() as f64 / 1_000_000.0;
        assert!(per_row <= 10.5, "{per_row} bytes per row");
        for k in (0..1_000_000u32).step_by(9973) {
            assert_eq!(idx.find(h(k), |id| id == k), Some(k));
        }
    }
}
