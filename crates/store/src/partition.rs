//! One partition replica: committed rows plus their indexes.
//!
//! The caller (the ldm block) decides what may be applied; methods here check only what the
//! structures themselves need (a duplicate primary key is refused) and keep every index exact.
//! Memory is charged by the caller through `charge`, which is a pure function of the row so the
//! charge released on delete equals the charge reserved on insert.

use crate::counted::{CountedTree, Cursor};
use crate::hash_index::HashIndex;
use crate::heap::{Heap, RowId, prefetch_ptr};
use std::collections::BTreeMap;
use std::sync::Arc;
use tern_types::hash::index_hash;
use tern_types::row::encode_index_value;
use tern_types::schema::{Index, IndexId, Table, TableId};
use tern_types::{ErrorCode, RowLayout, TernError, TernResult};

/// Charged per row beyond its bytes: the hash-index entry and slot bookkeeping.
pub const ROW_OVERHEAD_BYTES: u64 = 8;
/// Charged per ordered-index entry beyond its key bytes (its share of a tree node: the 16-byte
/// head, the pointer to the key bytes and the row id, at B-tree fill).
pub const INDEX_ENTRY_OVERHEAD_BYTES: u64 = 56;

/// How many rows ahead of the one it reads a full scan starts loading a boxed row.
const SCAN_PREFETCH: RowId = 6;

#[derive(Debug)]
struct OrderedIndex {
    id: IndexId,
    name: String,
    columns: Vec<u16>,
    unique: bool,
    /// Entry key: encoded index columns followed by the primary key bytes; counted, so ranks and
    /// range sizes cost a descent.
    map: CountedTree<IKey, RowId>,
}

/// An ordered-index entry key: its bytes, and their first 16 as a big-endian number kept in the
/// tree node, so that most comparisons while descending the tree decide on that number instead
/// of following a pointer to the bytes (`perf` of LOAD DATA into lineitem, three ordered
/// indexes: 31 % of the worker in `memcmp`, mostly the cache misses of reaching each key's
/// bytes; with an 8-byte head still 9 %: an index on a date has thousands of entries per date,
/// whose first 8 bytes differ only in the primary key's top bytes). Ordered exactly as the bytes
/// are (equal heads fall back to the bytes; a shorter key pads with zeros, which orders as the
/// bytes do), so lookups by `[u8]` through `Borrow` agree.
#[derive(Debug, Clone)]
struct IKey {
    head: u128,
    bytes: Box<[u8]>,
}

impl IKey {
    fn new(bytes: Vec<u8>) -> IKey {
        let mut h = [0u8; 16];
        let n = bytes.len().min(16);
        h[..n].copy_from_slice(&bytes[..n]);
        IKey { head: u128::from_be_bytes(h), bytes: bytes.into_boxed_slice() }
    }
}

impl PartialEq for IKey {
    fn eq(&self, o: &IKey) -> bool {
        self.head == o.head && self.bytes == o.bytes
    }
}

impl Eq for IKey {}

impl Ord for IKey {
    fn cmp(&self, o: &IKey) -> std::cmp::Ordering {
        self.head.cmp(&o.head).then_with(|| self.bytes.cmp(&o.bytes))
    }
}

impl PartialOrd for IKey {
    fn partial_cmp(&self, o: &IKey) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl std::borrow::Borrow<[u8]> for IKey {
    fn borrow(&self) -> &[u8] {
        &self.bytes
    }
}

impl std::ops::Deref for IKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// A bound on the encoded index-column prefix of an ordered-index scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexBound {
    pub key: Vec<u8>,
    pub inclusive: bool,
}

#[derive(Debug)]
pub struct Partition {
    pub table: TableId,
    pub partition: u32,
    layout: Arc<RowLayout>,
    heap: Heap,
    hash: HashIndex,
    indexes: Vec<OrderedIndex>,
    rows: u64,
    charged: u64,
}

impl Partition {
    pub fn new(table: &Table, partition: u32, layout: Arc<RowLayout>) -> Partition {
        let indexes = table
            .indexes
            .iter()
            .map(|i: &Index| OrderedIndex {
                id: i.id,
                name: i.name.clone(),
                columns: i.columns.clone(),
                unique: i.unique,
                map: CountedTree::new(),
            })
            .collect();
        Partition {
            table: table.id,
            partition,
            heap: Heap::new(layout.fixed_row_len()),
            layout,
            hash: HashIndex::default(),
            indexes,
            rows: 0,
            charged: 0,
        }
    }

    pub fn layout(&self) -> &Arc<RowLayout> {
        &self.layout
    }

    pub fn len(&self) -> u64 {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Sum of the charges of live rows.
    pub fn charged(&self) -> u64 {
        self.charged
    }

    /// Real bytes held (heap capacity, hash table, index maps approximated), for reports.
    pub fn footprint(&self) -> usize {
        let idx: usize = self.indexes.iter().map(|i| i.map.iter().map(|(k, _)| k.len() + 48).sum::<usize>()).sum();
        self.heap.footprint() + self.hash.footprint() + idx
    }

    /// What storing `row` costs against data memory.
    pub fn charge(&self, row: &[u8]) -> u64 {
        let key_len = self.layout.key_of(row).len() as u64;
        row.len() as u64 + ROW_OVERHEAD_BYTES + self.indexes.len() as u64 * (key_len + INDEX_ENTRY_OVERHEAD_BYTES)
    }

    #[inline]
    pub fn lookup(&self, key: &[u8]) -> Option<RowId> {
        let h = index_hash(key);
        let heap = &self.heap;
        let layout = &self.layout;
        self.hash.find(h, |id| layout.key_of(heap.get(id)) == key)
    }

    /// First step of a batched lookup: start loading the index slots of `key`.
    #[inline]
    pub fn prefetch_slot(&self, key: &[u8]) {
        self.hash.prefetch_slot(index_hash(key));
    }

    /// Second step: start loading where the row `key` most likely names is stored (its slots
    /// should be loaded).
    #[inline]
    pub fn prefetch_entry(&self, key: &[u8]) {
        if let Some(id) = self.hash.first_candidate(index_hash(key)) {
            self.heap.prefetch_entry(id);
        }
    }

    /// Third step: start loading the row `key` most likely names (its slots and heap entry
    /// should be loaded).
    #[inline]
    pub fn prefetch_row(&self, key: &[u8]) {
        if let Some(id) = self.hash.first_candidate(index_hash(key)) {
            let row = self.heap.get(id);
            prefetch_ptr(row.as_ptr());
            if row.len() > 64 {
                prefetch_ptr(row.as_ptr().wrapping_add(64));
            }
        }
    }

    #[inline]
    pub fn row(&self, id: RowId) -> &[u8] {
        self.heap.get(id)
    }

    pub fn is_live(&self, id: RowId) -> bool {
        self.heap.is_live(id)
    }

    fn index_key(&self, idx: &OrderedIndex, row: &[u8], with_pk: bool) -> TernResult<(Vec<u8>, bool)> {
        let mut k = Vec::with_capacity(32);
        let mut has_null = false;
        for &c in &idx.columns {
            let v = self.layout.get(row, c as usize)?;
            has_null |= v.is_null();
            encode_index_value(self.layout.types[c as usize], self.layout.nullable[c as usize], &v, &mut k)?;
        }
        if with_pk {
            k.extend_from_slice(self.layout.key_of(row));
        }
        Ok((k, has_null))
    }

    /// The name of a unique index that already holds `row`'s value in another row, if any.
    pub fn unique_conflict(&self, row: &[u8], ignore: Option<RowId>) -> TernResult<Option<String>> {
        for idx in self.indexes.iter().filter(|i| i.unique) {
            let (prefix, has_null) = self.index_key(idx, row, false)?;
            if has_null {
                continue; // NULLs never collide in a unique index (as in MySQL).
            }
            let (_, mut at) = idx.map.seek(|k| k[..] < prefix[..]);
            while let Some(((k, id), next)) = idx.map.next(at) {
                if !k.starts_with(&prefix) {
                    break;
                }
                if Some(id) != ignore {
                    return Ok(Some(idx.name.clone()));
                }
                at = next;
            }
        }
        Ok(None)
    }

    /// Whether two rows hold the same non-NULL value in some unique index.
    pub fn unique_values_clash(&self, a: &[u8], b: &[u8]) -> TernResult<bool> {
        for idx in self.indexes.iter().filter(|i| i.unique) {
            let (ka, na) = self.index_key(idx, a, false)?;
            let (kb, nb) = self.index_key(idx, b, false)?;
            if !na && !nb && ka == kb {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Inserts a row whose key is absent. Fails with DuplicateKey (and changes nothing) otherwise.
    pub fn insert(&mut self, row: &[u8]) -> TernResult<RowId> {
        let key = self.layout.key_of(row);
        if self.lookup(key).is_some() {
            return Err(TernError::new(ErrorCode::DuplicateKey, "Duplicate entry for key 'PRIMARY'"));
        }
        let mut entries = Vec::with_capacity(self.indexes.len());
        for idx in &self.indexes {
            entries.push(self.index_key(idx, row, true)?.0);
        }
        let h = index_hash(key);
        let id = self.heap.insert(row);
        let heap = &self.heap;
        let layout = &self.layout;
        self.hash.insert(h, id, |r| index_hash(layout.key_of(heap.get(r))));
        for (idx, k) in self.indexes.iter_mut().zip(entries) {
            let prev = idx.map.insert(IKey::new(k), id);
            assert!(prev.is_none(), "index entry keys include the primary key, so they are unique");
        }
        self.rows += 1;
        self.charged += self.charge(row);
        Ok(id)
    }

    /// Replaces the row at `id` with `row`, which must have the same primary key.
    pub fn update(&mut self, id: RowId, row: &[u8]) -> TernResult<()> {
        assert!(self.heap.is_live(id), "update of a dead row id");
        let old = self.heap.get(id);
        if self.layout.key_of(old) != self.layout.key_of(row) {
            return Err(TernError::new(ErrorCode::Internal, "update may not change the primary key"));
        }
        let mut changes = Vec::new();
        for (i, idx) in self.indexes.iter().enumerate() {
            let (ok, _) = self.index_key(idx, old, true)?;
            let (nk, _) = self.index_key(idx, row, true)?;
            if ok != nk {
                changes.push((i, ok, nk));
            }
        }
        let old_charge = self.charge(old);
        let new_charge = self.charge(row);
        self.heap.replace(id, row);
        for (i, ok, nk) in changes {
            let idx = &mut self.indexes[i];
            let removed = idx.map.remove(&IKey::new(ok));
            assert_eq!(removed, Some(id), "index entry of the old row present");
            idx.map.insert(IKey::new(nk), id);
        }
        self.charged = self.charged - old_charge + new_charge;
        Ok(())
    }

    /// Removes the row at `id`; returns its charge.
    pub fn delete(&mut self, id: RowId) -> TernResult<u64> {
        assert!(self.heap.is_live(id), "delete of a dead row id");
        let old = self.heap.get(id).to_vec();
        let mut entries = Vec::with_capacity(self.indexes.len());
        for idx in &self.indexes {
            entries.push(self.index_key(idx, &old, true)?.0);
        }
        let h = index_hash(self.layout.key_of(&old));
        assert!(self.hash.remove(h, id), "hash index lost a live row");
        for (idx, k) in self.indexes.iter_mut().zip(entries) {
            let removed = idx.map.remove(&IKey::new(k));
            assert_eq!(removed, Some(id), "index entry present");
        }
        self.heap.remove(id);
        let c = self.charge(&old);
        self.rows -= 1;
        self.charged -= c;
        Ok(c)
    }

    /// `lookup` given where the key was seen before (checked, not trusted): a commit applying a
    /// change its prepare looked up skips the second hash probe.
    #[inline]
    pub fn lookup_at(&self, hint: Option<RowId>, key: &[u8]) -> Option<RowId> {
        if let Some(id) = hint
            && self.heap.is_live(id)
            && self.layout.key_of(self.heap.get(id)) == key
        {
            return Some(id);
        }
        self.lookup(key)
    }

    /// Insert or replace by primary key.
    pub fn upsert(&mut self, row: &[u8]) -> TernResult<RowId> {
        self.upsert_at(None, row)
    }

    /// `upsert` with `lookup_at`'s hint.
    pub fn upsert_at(&mut self, hint: Option<RowId>, row: &[u8]) -> TernResult<RowId> {
        match self.lookup_at(hint, self.layout.key_of(row)) {
            Some(id) => {
                self.update(id, row)?;
                Ok(id)
            }
            None => self.insert(row),
        }
    }

    /// Full scan in row-id order from `from`. `f` returns false to stop after the current row;
    /// the result is the row id to resume from, or None when the partition is exhausted.
    pub fn scan<'a>(&'a self, from: RowId, mut f: impl FnMut(RowId, &'a [u8]) -> bool) -> Option<RowId> {
        let limit = self.heap.id_limit();
        let mut id = from;
        while id < limit {
            self.heap.prefetch_row(id.saturating_add(SCAN_PREFETCH));
            if self.heap.is_live(id) && !f(id, self.heap.get(id)) {
                return (id + 1 < limit).then_some(id + 1);
            }
            id += 1;
        }
        None
    }

    pub fn index_ids(&self) -> Vec<IndexId> {
        self.indexes.iter().map(|i| i.id).collect()
    }

    pub fn index_position(&self, index: IndexId) -> Option<usize> {
        self.indexes.iter().position(|i| i.id == index)
    }

    /// The entry positions `[from, to)` of the range between bounds on the encoded index-column
    /// prefix (an exclusive bound leaves out every entry that starts with its key; an inclusive
    /// upper bound takes them in), and where they start and end.
    fn index_range(
        map: &CountedTree<IKey, RowId>,
        lo: Option<&IndexBound>,
        hi: Option<&IndexBound>,
    ) -> ((usize, Cursor), (usize, Cursor)) {
        let from = match lo {
            None => map.seek(|_| false),
            Some(b) if b.inclusive => map.seek(|k| k[..] < b.key[..]),
            Some(b) => map.seek(|k| k[..] < b.key[..] || k.starts_with(&b.key)),
        };
        let to = match hi {
            None => (map.len(), map.at(map.len())),
            Some(b) if b.inclusive => map.seek(|k| k[..] <= b.key[..] || k.starts_with(&b.key)),
            Some(b) => map.seek(|k| k[..] < b.key[..]),
        };
        (from, to)
    }

    /// How many entries of ordered index `index_pos` lie between the bounds (as `index_scan`
    /// reads them): two descents of the counted tree, whatever the range's size.
    pub fn index_count(&self, index_pos: usize, lo: Option<&IndexBound>, hi: Option<&IndexBound>) -> u64 {
        let ((from, _), (to, _)) = Self::index_range(&self.indexes[index_pos].map, lo, hi);
        to.saturating_sub(from) as u64
    }

    /// Ordered-index scan between bounds on the encoded index-column prefix, resuming after the
    /// entry key `after` when given, and leaving out the first `skip` entries (in reading order)
    /// of what remains, found by rank rather than walked. `f` returns false to stop; the result
    /// is the last entry key visited when stopped early (resume after it), or None when the range
    /// is exhausted.
    #[allow(clippy::too_many_arguments)]
    pub fn index_scan<'a>(
        &'a self,
        index_pos: usize,
        lo: Option<&IndexBound>,
        hi: Option<&IndexBound>,
        after: Option<&[u8]>,
        descending: bool,
        skip: u64,
        mut f: impl FnMut(&[u8], RowId, &'a [u8]) -> bool,
    ) -> Option<Vec<u8>> {
        let map = &self.indexes[index_pos].map;
        let ((mut from, mut start), (mut to, mut end)) = Self::index_range(map, lo, hi);
        if let Some(a) = after {
            if descending {
                let (p, c) = map.seek(|k| k[..] < *a);
                if p < to {
                    (to, end) = (p, c);
                }
            } else {
                let (p, c) = map.seek(|k| k[..] <= *a);
                if p > from {
                    (from, start) = (p, c);
                }
            }
        }
        if from >= to {
            return None;
        }
        let skip = usize::try_from(skip).unwrap_or(usize::MAX).min(to - from);
        if skip > 0 {
            if descending {
                to -= skip;
                end = map.at(to);
            } else {
                from += skip;
                start = map.at(from);
            }
        }
        let mut left = to - from;
        if !descending {
            let mut at = start;
            while left > 0 {
                let ((k, id), next) = map.next(at).expect("the range's entries are in the tree");
                if !f(k, id, self.heap.get(id)) {
                    return Some(k.to_vec());
                }
                at = next;
                left -= 1;
            }
        } else {
            let mut at = end;
            while left > 0 {
                let ((k, id), prev) = map.prev(at).expect("the range's entries are in the tree");
                if !f(k, id, self.heap.get(id)) {
                    return Some(k.to_vec());
                }
                at = prev;
                left -= 1;
            }
        }
        None
    }

    /// Adds an ordered index to a partition that already has rows (CREATE INDEX).
    pub fn add_index(&mut self, index: &Index) -> TernResult<()> {
        let mut idx = OrderedIndex {
            id: index.id,
            name: index.name.clone(),
            columns: index.columns.clone(),
            unique: index.unique,
            map: CountedTree::new(),
        };
        let mut seen: BTreeMap<Vec<u8>, ()> = BTreeMap::new();
        let mut id = 0;
        while id < self.heap.id_limit() {
            if self.heap.is_live(id) {
                let row = self.heap.get(id);
                let (k, _) = self.index_key(&idx, row, true)?;
                if idx.unique {
                    let (p, has_null) = self.index_key(&idx, row, false)?;
                    if !has_null && seen.insert(p, ()).is_some() {
                        return Err(TernError::new(
                            ErrorCode::DuplicateKey,
                            format!("Duplicate entry for key '{}'", idx.name),
                        ));
                    }
                }
                idx.map.insert(IKey::new(k), id);
            }
            id += 1;
        }
        self.indexes.push(idx);
        self.recharge();
        Ok(())
    }

    pub fn drop_index(&mut self, index: IndexId) {
        self.indexes.retain(|i| i.id != index);
        self.recharge();
    }

    fn recharge(&mut self) {
        let mut total = 0;
        let mut id = 0;
        while id < self.heap.id_limit() {
            if self.heap.is_live(id) {
                total += self.charge(self.heap.get(id));
            }
            id += 1;
        }
        self.charged = total;
    }

    /// Checks internal consistency (tests and debug builds).
    pub fn check(&self) {
        let mut live = 0;
        self.scan(0, |id, row| {
            live += 1;
            assert_eq!(self.lookup(self.layout.key_of(row)), Some(id), "hash index finds every live row");
            true
        });
        assert_eq!(live, self.rows);
        assert_eq!(self.hash.len() as u64, self.rows);
        for idx in &self.indexes {
            assert_eq!(idx.map.len() as u64, self.rows, "index {} has one entry per row", idx.name);
            idx.map.check();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::IKey;

    /// IKey orders exactly as its bytes do (the `Borrow<[u8]>` contract the range scans rely
    /// on), over keys that share prefixes, end inside and past the 16-byte head, and hold zeros.
    #[test]
    fn index_keys_order_as_their_bytes() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            vec![0, 0],
            vec![1],
            vec![1, 0],
            vec![1, 0, 0, 0, 0, 0, 0, 0, 0],
            vec![1; 16],
            vec![1; 17],
        ];
        for _ in 0..3000 {
            let len = (next() % 24) as usize;
            keys.push((0..len).map(|_| [0u8, 1, 2, 255][(next() % 4) as usize]).collect());
        }
        for a in &keys {
            for b in keys.iter().step_by(7) {
                let (ka, kb) = (IKey::new(a.clone()), IKey::new(b.clone()));
                assert_eq!(ka.cmp(&kb), a.cmp(b), "{a:?} vs {b:?}");
                assert_eq!(ka == kb, a == b);
            }
        }
    }
}
