//! A B+tree that counts: every inner node keeps the number of entries under each child, so the
//! rank of a key (how many entries sort before it) and the entry at a rank are found in
//! O(log n), as are the size of a range and a seek that skips n entries. Ordered indexes are kept
//! in it, so that ZRANK, ZCOUNT, a rank range of a sorted set or a random member of a set cost a
//! descent instead of a walk over everything before them.
//!
//! Nodes live in one arena (`Vec`) and refer to each other by index; freed nodes are reused.
//! Leaves are linked both ways for range reads. A separator `keys[i]` of an inner node is at most
//! the smallest key under child `i + 1` and greater than every key under child `i` (a deleted
//! smallest key may leave it smaller than what is now there, which keeps both sides true).
//!
//! Invariants (checked by `check`, which the model-based tests call as they go): every
//! count is the number of entries under its child; keys ascend strictly across the leaf chain;
//! every separator lies between its neighbours' keys; every leaf is at the same depth; a node
//! other than the root holds at least MIN entries or children.

use std::cmp::Ordering;

/// Entries of a leaf and children of an inner node, at most.
const CAP: usize = 64;
/// Below this many a node other than the root borrows from or merges with a sibling.
const MIN: usize = CAP / 4;
/// No node (the end of the leaf chain).
const NONE: u32 = u32::MAX;

#[derive(Debug)]
enum Node<K, V> {
    /// Keys and values apart (a key of 32 bytes beside a 4-byte value would pad each pair to 48).
    Leaf {
        keys: Vec<K>,
        vals: Vec<V>,
        prev: u32,
        next: u32,
    },
    Inner {
        keys: Vec<K>,
        kids: Vec<u32>,
        counts: Vec<usize>,
    },
}

/// A position in the tree: the `idx`th entry of leaf `leaf` (`idx` may equal the leaf's length:
/// just past it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    leaf: u32,
    idx: usize,
}

/// The inner nodes a descent passed and the child taken in each, on the stack (no allocation per
/// insert or remove). Every inner node but the root has at least MIN children, so 2^32 entries
/// are at most 8 levels deep.
#[derive(Default)]
struct Path {
    at: [(u32, usize); 12],
    len: usize,
}

impl Path {
    fn push(&mut self, step: (u32, usize)) {
        assert!(self.len < self.at.len(), "a tree of fewer than 2^32 entries is at most 12 levels deep");
        self.at[self.len] = step;
        self.len += 1;
    }

    fn get(&self) -> &[(u32, usize)] {
        &self.at[..self.len]
    }
}

#[derive(Debug)]
pub struct CountedTree<K, V> {
    nodes: Vec<Node<K, V>>,
    free: Vec<u32>,
    root: u32,
    len: usize,
}

impl<K: Ord + Clone, V: Copy> Default for CountedTree<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Ord + Clone, V: Copy> CountedTree<K, V> {
    pub fn new() -> Self {
        CountedTree {
            nodes: vec![Node::Leaf { keys: Vec::new(), vals: Vec::new(), prev: NONE, next: NONE }],
            free: Vec::new(),
            root: 0,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn alloc(&mut self, n: Node<K, V>) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = n;
                i
            }
            None => {
                self.nodes.push(n);
                u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 tree nodes")
            }
        }
    }

    /// Takes node `i` out of the tree; its slot is reused by the next `alloc`.
    fn release(&mut self, i: u32) -> Node<K, V> {
        self.free.push(i);
        std::mem::replace(
            &mut self.nodes[i as usize],
            Node::Leaf { keys: Vec::new(), vals: Vec::new(), prev: NONE, next: NONE },
        )
    }

    /// The child of an inner node to descend into for `k`: past every separator at most `k`.
    fn route(keys: &[K], k: &K) -> usize {
        keys.partition_point(|s| s <= k)
    }

    #[cfg(test)]
    pub fn get(&self, k: &K) -> Option<V> {
        let mut n = self.root;
        loop {
            match &self.nodes[n as usize] {
                Node::Inner { keys, kids, .. } => n = kids[Self::route(keys, k)],
                Node::Leaf { keys, vals, .. } => {
                    return keys.binary_search(k).ok().map(|i| vals[i]);
                }
            }
        }
    }

    /// Inserts `k`, or replaces its value (returned).
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        let mut path = Path::default();
        let mut n = self.root;
        while let Node::Inner { keys, kids, .. } = &self.nodes[n as usize] {
            let c = Self::route(keys, &k);
            path.push((n, c));
            n = kids[c];
        }
        let Node::Leaf { keys, vals, .. } = &mut self.nodes[n as usize] else { unreachable!("descent ends at a leaf") };
        let at = match keys.binary_search(&k) {
            Ok(i) => return Some(std::mem::replace(&mut vals[i], v)),
            Err(i) => i,
        };
        keys.insert(at, k);
        vals.insert(at, v);
        let len = keys.len();
        let mut split = (len > CAP).then(|| {
            // Keys that arrive in order (a growing sorted set, an auto-increment key) fill the
            // leaf they leave three quarters full rather than half.
            let keep = if at + 1 == len {
                len - MIN - 1
            } else if at == 0 {
                MIN + 1
            } else {
                len / 2
            };
            self.split_leaf(n, keep)
        });
        self.len += 1;
        for &(p, c) in path.get().iter().rev() {
            let Node::Inner { keys, kids, counts } = &mut self.nodes[p as usize] else {
                unreachable!("path of inner nodes")
            };
            counts[c] += 1;
            if let Some((sep, right, moved)) = split.take() {
                counts[c] -= moved;
                keys.insert(c, sep);
                kids.insert(c + 1, right);
                counts.insert(c + 1, moved);
                if kids.len() > CAP {
                    split = Some(self.split_inner(p));
                }
            }
        }
        if let Some((sep, right, moved)) = split {
            let left = self.root;
            let total = self.len;
            self.root = self.alloc(Node::Inner {
                keys: vec![sep],
                kids: vec![left, right],
                counts: vec![total - moved, moved],
            });
        }
        None
    }

    /// Splits an overfull leaf: (separator, the new right leaf, entries moved to it).
    fn split_leaf(&mut self, n: u32, keep: usize) -> (K, u32, usize) {
        let Node::Leaf { keys, vals, next, .. } = &mut self.nodes[n as usize] else { unreachable!("a leaf") };
        // Every leaf that ever split holds room for CAP + 1 and no more (a Vec left to double
        // would hold 128).
        let (mut rkeys, mut rvals) = (Vec::with_capacity(CAP + 1), Vec::with_capacity(CAP + 1));
        rkeys.extend(keys.drain(keep..));
        rvals.extend(vals.drain(keep..));
        keys.shrink_to(CAP + 1);
        vals.shrink_to(CAP + 1);
        let old_next = *next;
        let sep = rkeys[0].clone();
        let moved = rkeys.len();
        let r = self.alloc(Node::Leaf { keys: rkeys, vals: rvals, prev: n, next: old_next });
        if let Node::Leaf { next, .. } = &mut self.nodes[n as usize] {
            *next = r;
        }
        if old_next != NONE
            && let Node::Leaf { prev, .. } = &mut self.nodes[old_next as usize]
        {
            *prev = r;
        }
        (sep, r, moved)
    }

    /// Splits an overfull inner node: (separator, the new right node, entries under it).
    fn split_inner(&mut self, n: u32) -> (K, u32, usize) {
        let Node::Inner { keys, kids, counts } = &mut self.nodes[n as usize] else { unreachable!("an inner node") };
        let at = kids.len() / 2;
        let rkids = kids.split_off(at);
        let rcounts = counts.split_off(at);
        let mut rkeys = keys.split_off(at - 1);
        let sep = rkeys.remove(0);
        let moved = rcounts.iter().sum();
        let r = self.alloc(Node::Inner { keys: rkeys, kids: rkids, counts: rcounts });
        (sep, r, moved)
    }

    /// Removes `k`; its value.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let mut path = Path::default();
        let mut n = self.root;
        while let Node::Inner { keys, kids, .. } = &self.nodes[n as usize] {
            let c = Self::route(keys, k);
            path.push((n, c));
            n = kids[c];
        }
        let Node::Leaf { keys, vals, .. } = &mut self.nodes[n as usize] else { unreachable!("descent ends at a leaf") };
        let i = keys.binary_search(k).ok()?;
        keys.remove(i);
        let v = vals.remove(i);
        self.len -= 1;
        for &(p, c) in path.get() {
            let Node::Inner { counts, .. } = &mut self.nodes[p as usize] else { unreachable!("path of inner nodes") };
            counts[c] -= 1;
        }
        // Mend underfull nodes bottom-up: a node short of MIN borrows from or merges with a
        // sibling; a merge takes a child from the parent, which may then be short in turn.
        for &(p, c) in path.get().iter().rev() {
            if !self.rebalance(p, c) {
                break;
            }
        }
        if let Node::Inner { kids, .. } = &self.nodes[self.root as usize]
            && kids.len() == 1
        {
            let only = kids[0];
            let old = self.root;
            self.root = only;
            self.release(old);
        }
        Some(v)
    }

    fn size(&self, n: u32) -> usize {
        match &self.nodes[n as usize] {
            Node::Leaf { keys, .. } => keys.len(),
            Node::Inner { kids, .. } => kids.len(),
        }
    }

    /// Mends child `c` of inner node `p` if it is short of MIN; whether `p` lost a child.
    fn rebalance(&mut self, p: u32, c: usize) -> bool {
        let Node::Inner { kids, .. } = &self.nodes[p as usize] else { unreachable!("an inner node") };
        let kid = kids[c];
        if self.size(kid) >= MIN || kids.len() < 2 {
            return false;
        }
        // Pair the child with its right sibling (its left one when it is the last).
        let (l, r) = if c + 1 < kids.len() { (c, c + 1) } else { (c - 1, c) };
        let (ln, rn) = (kids[l], kids[r]);
        if self.size(ln) + self.size(rn) <= CAP {
            self.merge(p, l, ln, rn);
            true
        } else {
            self.shift(p, l, ln, rn, c == l);
            false
        }
    }

    /// Moves everything of `rn` (child `l + 1` of `p`) into `ln` (child `l`) and frees `rn`.
    fn merge(&mut self, p: u32, l: usize, ln: u32, rn: u32) {
        let Node::Inner { keys, kids, counts } = &mut self.nodes[p as usize] else { unreachable!("an inner node") };
        let sep = keys.remove(l);
        kids.remove(l + 1);
        let moved = counts.remove(l + 1);
        counts[l] += moved;
        match self.release(rn) {
            Node::Leaf { keys: mut rk, vals: mut rv, next: rnext, .. } => {
                let Node::Leaf { keys, vals, next, .. } = &mut self.nodes[ln as usize] else {
                    unreachable!("siblings alike")
                };
                keys.append(&mut rk);
                vals.append(&mut rv);
                *next = rnext;
                if rnext != NONE
                    && let Node::Leaf { prev, .. } = &mut self.nodes[rnext as usize]
                {
                    *prev = ln;
                }
            }
            Node::Inner { keys: mut rk, kids: mut rkids, counts: mut rc } => {
                let Node::Inner { keys, kids, counts } = &mut self.nodes[ln as usize] else {
                    unreachable!("siblings alike")
                };
                keys.push(sep);
                keys.append(&mut rk);
                kids.append(&mut rkids);
                counts.append(&mut rc);
            }
        }
    }

    /// Moves one entry or child between siblings `ln` and `rn` (children `l`, `l + 1` of `p`):
    /// to the left one when `to_left`, else to the right one.
    fn shift(&mut self, p: u32, l: usize, ln: u32, rn: u32, to_left: bool) {
        let leaf = matches!(self.nodes[ln as usize], Node::Leaf { .. });
        let psep = |t: &Self| match &t.nodes[p as usize] {
            Node::Inner { keys, .. } => keys[l].clone(),
            Node::Leaf { .. } => unreachable!("an inner node"),
        };
        let (new_sep, moved) = match (leaf, to_left) {
            (true, true) => {
                let Node::Leaf { keys, vals, .. } = &mut self.nodes[rn as usize] else { unreachable!() };
                let e = (keys.remove(0), vals.remove(0));
                let sep = keys[0].clone();
                let Node::Leaf { keys, vals, .. } = &mut self.nodes[ln as usize] else { unreachable!() };
                keys.push(e.0);
                vals.push(e.1);
                (sep, 1isize)
            }
            (true, false) => {
                let Node::Leaf { keys, vals, .. } = &mut self.nodes[ln as usize] else { unreachable!() };
                let e =
                    (keys.pop().expect("a sibling with more than MIN entries"), vals.pop().expect("a value per key"));
                let sep = e.0.clone();
                let Node::Leaf { keys, vals, .. } = &mut self.nodes[rn as usize] else { unreachable!() };
                keys.insert(0, e.0);
                vals.insert(0, e.1);
                (sep, -1)
            }
            (false, true) => {
                let psep = psep(self);
                let Node::Inner { keys, kids, counts } = &mut self.nodes[rn as usize] else { unreachable!() };
                let (k0, c0) = (kids.remove(0), counts.remove(0));
                let sep = keys.remove(0);
                let Node::Inner { keys, kids, counts } = &mut self.nodes[ln as usize] else { unreachable!() };
                keys.push(psep);
                kids.push(k0);
                counts.push(c0);
                (sep, c0 as isize)
            }
            (false, false) => {
                let psep = psep(self);
                let Node::Inner { keys, kids, counts } = &mut self.nodes[ln as usize] else { unreachable!() };
                let (kl, cl) = (kids.pop().expect("children"), counts.pop().expect("counts"));
                let sep = keys.pop().expect("separators");
                let Node::Inner { keys, kids, counts } = &mut self.nodes[rn as usize] else { unreachable!() };
                keys.insert(0, psep);
                kids.insert(0, kl);
                counts.insert(0, cl);
                (sep, -(cl as isize))
            }
        };
        let Node::Inner { keys, counts, .. } = &mut self.nodes[p as usize] else { unreachable!("an inner node") };
        keys[l] = new_sep;
        counts[l] = counts[l].wrapping_add_signed(moved);
        counts[l + 1] = counts[l + 1].wrapping_add_signed(-moved);
    }

    /// The number of entries whose key satisfies `pred`, which must hold for every key below
    /// some point and for none above it (a "less than" test); and where that point is.
    pub fn seek(&self, pred: impl Fn(&K) -> bool) -> (usize, Cursor) {
        let mut n = self.root;
        let mut before = 0;
        loop {
            match &self.nodes[n as usize] {
                Node::Inner { keys, kids, counts } => {
                    let c = keys.partition_point(|k| pred(k));
                    before += counts[..c].iter().sum::<usize>();
                    n = kids[c];
                }
                Node::Leaf { keys, .. } => {
                    let i = keys.partition_point(|k| pred(k));
                    return (before + i, Cursor { leaf: n, idx: i });
                }
            }
        }
    }

    /// The position of the entry of rank `pos` (0-based; `len()` is just past the last).
    pub fn at(&self, mut pos: usize) -> Cursor {
        let mut n = self.root;
        loop {
            match &self.nodes[n as usize] {
                Node::Inner { kids, counts, .. } => {
                    let mut c = 0;
                    while c + 1 < kids.len() && pos >= counts[c] {
                        pos -= counts[c];
                        c += 1;
                    }
                    n = kids[c];
                }
                Node::Leaf { keys, .. } => {
                    return Cursor { leaf: n, idx: pos.min(keys.len()) };
                }
            }
        }
    }

    /// The entry at `c` and the cursor after it; None past the last entry.
    pub fn next(&self, mut c: Cursor) -> Option<((&K, V), Cursor)> {
        loop {
            let Node::Leaf { keys, vals, next, .. } = &self.nodes[c.leaf as usize] else {
                unreachable!("cursors are in leaves")
            };
            if let Some(k) = keys.get(c.idx) {
                return Some(((k, vals[c.idx]), Cursor { leaf: c.leaf, idx: c.idx + 1 }));
            }
            if *next == NONE {
                return None;
            }
            c = Cursor { leaf: *next, idx: 0 };
        }
    }

    /// The entry just before `c` and the cursor at it; None before the first entry.
    pub fn prev(&self, mut c: Cursor) -> Option<((&K, V), Cursor)> {
        loop {
            let Node::Leaf { keys, vals, prev, .. } = &self.nodes[c.leaf as usize] else {
                unreachable!("cursors are in leaves")
            };
            if c.idx > 0 {
                return Some(((&keys[c.idx - 1], vals[c.idx - 1]), Cursor { leaf: c.leaf, idx: c.idx - 1 }));
            }
            if *prev == NONE {
                return None;
            }
            let len = match &self.nodes[*prev as usize] {
                Node::Leaf { keys, .. } => keys.len(),
                Node::Inner { .. } => unreachable!("leaves link to leaves"),
            };
            c = Cursor { leaf: *prev, idx: len };
        }
    }

    /// Every entry in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, V)> + '_ {
        let mut c = Some(self.at(0));
        std::iter::from_fn(move || {
            let (e, n) = self.next(c?)?;
            c = Some(n);
            Some(e)
        })
    }

    /// Checks the invariants of the module comment (tests and debug checks).
    pub fn check(&self) {
        let mut leaves = Vec::new();
        let total = self.check_node(self.root, None, None, 0, &mut vec![false; self.nodes.len()], &mut leaves, true);
        assert_eq!(total, self.len, "the root's entries are the tree's length");
        let depths: std::collections::BTreeSet<usize> = leaves.iter().map(|l| l.1).collect();
        assert!(depths.len() <= 1, "every leaf at the same depth");
        // The leaf chain, both ways, is the leaves in order.
        for w in leaves.windows(2) {
            let (Node::Leaf { next, .. }, Node::Leaf { prev, .. }) =
                (&self.nodes[w[0].0 as usize], &self.nodes[w[1].0 as usize])
            else {
                unreachable!()
            };
            assert_eq!(*next, w[1].0, "leaf chain forward");
            assert_eq!(*prev, w[0].0, "leaf chain backward");
        }
        let mut last: Option<&K> = None;
        for (k, _) in self.iter() {
            assert!(last.is_none_or(|l| l.cmp(k) == Ordering::Less), "keys ascend strictly");
            last = Some(k);
        }
        assert_eq!(self.iter().count(), self.len, "the chain holds every entry");
    }

    #[allow(clippy::too_many_arguments)]
    fn check_node(
        &self,
        n: u32,
        lo: Option<&K>,
        hi: Option<&K>,
        depth: usize,
        seen: &mut Vec<bool>,
        leaves: &mut Vec<(u32, usize)>,
        root: bool,
    ) -> usize {
        assert!(!std::mem::replace(&mut seen[n as usize], true), "no node reached twice");
        match &self.nodes[n as usize] {
            Node::Leaf { keys, vals, .. } => {
                assert!(root || keys.len() >= MIN, "a leaf holds at least MIN entries");
                assert!(keys.len() <= CAP);
                assert_eq!(keys.len(), vals.len(), "a value per key");
                assert!(root || keys.capacity() <= CAP + 1, "a split leaf holds room for CAP + 1");
                for e in keys {
                    assert!(lo.is_none_or(|l| l <= e), "a key at least its left separator");
                    assert!(hi.is_none_or(|h| e < h), "a key below its right separator");
                }
                leaves.push((n, depth));
                keys.len()
            }
            Node::Inner { keys, kids, counts } => {
                assert!(kids.len() >= 2 && (root || kids.len() >= MIN), "an inner node holds at least MIN children");
                assert!(kids.len() <= CAP);
                assert_eq!(keys.len() + 1, kids.len());
                assert_eq!(counts.len(), kids.len());
                let mut total = 0;
                for (i, &kid) in kids.iter().enumerate() {
                    let l = if i == 0 { lo } else { Some(&keys[i - 1]) };
                    let h = if i == keys.len() { hi } else { Some(&keys[i]) };
                    let c = self.check_node(kid, l, h, depth + 1, seen, leaves, false);
                    assert_eq!(c, counts[i], "a count is the entries under its child");
                    total += c;
                }
                total
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Random inserts, replaces and removes (growing, then shrinking to empty) agree with a
    /// BTreeMap at every step: values, ranks, seeks, positions and walks both ways.
    #[test]
    fn agrees_with_a_btreemap() {
        for seed in [1u64, 7, 0x9E37_79B9_7F4A_7C15] {
            let mut rng = Rng(seed);
            let mut t: CountedTree<u32, u32> = CountedTree::new();
            let mut m: BTreeMap<u32, u32> = BTreeMap::new();
            let space = 6000;
            for step in 0..30_000u32 {
                let k = (rng.next() % space) as u32;
                let grow = step < 18_000;
                if !rng.next().is_multiple_of(3) && grow || rng.next().is_multiple_of(5) {
                    assert_eq!(t.insert(k, step), m.insert(k, step), "seed {seed} step {step}");
                } else {
                    assert_eq!(t.remove(&k), m.remove(&k), "seed {seed} step {step}");
                }
                assert_eq!(t.len(), m.len());
                if step % 997 == 0 {
                    t.check();
                    let probe = (rng.next() % space) as u32;
                    let (rank, c) = t.seek(|x| *x < probe);
                    assert_eq!(rank, m.range(..probe).count(), "rank of {probe}");
                    assert_eq!(t.next(c).map(|e| *e.0.0), m.range(probe..).next().map(|e| *e.0));
                    assert_eq!(t.prev(c).map(|e| *e.0.0), m.range(..probe).next_back().map(|e| *e.0));
                    assert_eq!(
                        t.next(t.at(rank)).map(|e| *e.0.0),
                        t.next(c).map(|e| *e.0.0),
                        "at(rank) is the seek's place"
                    );
                    assert_eq!(t.get(&probe), m.get(&probe).copied());
                    let want: Vec<(u32, u32)> = m.iter().map(|(k, v)| (*k, *v)).collect();
                    let got: Vec<(u32, u32)> = t.iter().map(|(k, v)| (*k, v)).collect();
                    assert_eq!(got, want);
                    // Backwards from the end.
                    let mut back = Vec::new();
                    let mut c = t.at(t.len());
                    while let Some((e, p)) = t.prev(c) {
                        back.push(*e.0);
                        c = p;
                    }
                    back.reverse();
                    assert_eq!(back, m.keys().copied().collect::<Vec<_>>());
                    for _ in 0..20 {
                        if m.is_empty() {
                            break;
                        }
                        let r = (rng.next() % m.len() as u64) as usize;
                        assert_eq!(t.next(t.at(r)).map(|e| *e.0.0), m.keys().nth(r).copied(), "entry of rank {r}");
                    }
                }
            }
            for k in m.keys().copied().collect::<Vec<_>>() {
                assert_eq!(t.remove(&k), m.remove(&k));
            }
            t.check();
            assert!(t.is_empty());
            assert_eq!(t.nodes.len() - t.free.len(), 1, "an empty tree is one leaf");
        }
    }

    /// Ascending and descending inserts (the common index patterns) keep nodes at least a
    /// quarter full and the tree shallow.
    #[test]
    fn sequential_inserts_stay_balanced() {
        for desc in [false, true] {
            let mut t: CountedTree<u64, u32> = CountedTree::new();
            for i in 0..100_000u64 {
                t.insert(if desc { u64::MAX - i } else { i }, 0);
            }
            t.check();
            let leaves = t.nodes.iter().filter(|n| matches!(n, Node::Leaf { .. })).count() - t.free.len();
            // In-order keys leave each split leaf three quarters full (48 of 64).
            assert!(leaves <= 100_000 / 47, "{leaves} leaves");
            for i in (0..100_000u64).step_by(2) {
                t.remove(&if desc { u64::MAX - i } else { i });
            }
            t.check();
            assert_eq!(t.len(), 50_000);
            assert_eq!(t.next(t.at(10)).map(|e| *e.0.0), Some(if desc { u64::MAX - 99_979 } else { 21 }));
        }
    }

    /// A tree three inner levels deep, emptied in a scattered order: merges and borrows at every
    /// level keep the counts and the chain right.
    #[test]
    fn deep_tree_emptied_scattered() {
        const N: u64 = 300_000;
        let mut t: CountedTree<u64, u32> = CountedTree::new();
        for i in 0..N {
            t.insert((i * 7919) % N, i as u32);
        }
        t.check();
        let mut left = N as usize;
        let inv = inverse(7919, N);
        for (round, i) in (0..N).enumerate() {
            let k = (i * 104_729) % N;
            assert_eq!(t.remove(&k), Some(((k * inv) % N) as u32));
            left -= 1;
            if round % 37_000 == 0 {
                t.check();
                assert_eq!(t.len(), left);
            }
        }
        t.check();
        assert!(t.is_empty());
    }

    /// The inverse of `a` modulo `n` (they are coprime).
    fn inverse(a: u64, n: u64) -> u64 {
        (1..n).find(|x| (a * x) % n == 1).expect("coprime")
    }
}
