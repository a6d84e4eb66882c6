//! Row heap: rows addressed by a dense row id. Tables whose rows all have one length (only
//! fixed-width columns) use one contiguous arena of equal slots, so a 104-byte row costs 104 bytes;
//! other tables keep one boxed slice per row.

pub type RowId = u32;

#[derive(Debug)]
pub(crate) enum Heap {
    Fixed { slot: usize, arena: Vec<u8>, live: Vec<u64>, free: Vec<RowId>, slots: u32 },
    Var { rows: Vec<Option<Box<[u8]>>>, free: Vec<RowId> },
}

impl Heap {
    pub(crate) fn new(fixed: Option<usize>) -> Heap {
        match fixed {
            Some(slot) if slot > 0 => {
                Heap::Fixed { slot, arena: Vec::new(), live: Vec::new(), free: Vec::new(), slots: 0 }
            }
            _ => Heap::Var { rows: Vec::new(), free: Vec::new() },
        }
    }

    #[inline]
    pub(crate) fn get(&self, id: RowId) -> &[u8] {
        match self {
            Heap::Fixed { slot, arena, .. } => &arena[id as usize * slot..(id as usize + 1) * slot],
            Heap::Var { rows, .. } => rows[id as usize].as_deref().expect("live row id"),
        }
    }

    pub(crate) fn is_live(&self, id: RowId) -> bool {
        match self {
            Heap::Fixed { live, slots, .. } => id < *slots && live[id as usize / 64] & (1 << (id % 64)) != 0,
            Heap::Var { rows, .. } => rows.get(id as usize).is_some_and(|r| r.is_some()),
        }
    }

    /// One past the highest row id ever handed out.
    pub(crate) fn id_limit(&self) -> RowId {
        match self {
            Heap::Fixed { slots, .. } => *slots,
            Heap::Var { rows, .. } => rows.len() as RowId,
        }
    }

    pub(crate) fn insert(&mut self, row: &[u8]) -> RowId {
        match self {
            Heap::Fixed { slot, arena, live, free, slots } => {
                assert_eq!(row.len(), *slot, "fixed-size row");
                let id = match free.pop() {
                    Some(id) => id,
                    None => {
                        let id = *slots;
                        *slots += 1;
                        if arena.len() == arena.capacity() {
                            // Grow by 1/8 (at least 64 rows) instead of doubling, to keep slack small.
                            let extra = (arena.len() / 8).max(64 * *slot);
                            arena.reserve_exact(extra);
                        }
                        arena.resize(*slots as usize * *slot, 0);
                        if live.len() * 64 < *slots as usize {
                            live.push(0);
                        }
                        id
                    }
                };
                let at = id as usize * *slot;
                arena[at..at + *slot].copy_from_slice(row);
                live[id as usize / 64] |= 1 << (id % 64);
                id
            }
            Heap::Var { rows, free } => {
                let b: Box<[u8]> = row.into();
                match free.pop() {
                    Some(id) => {
                        rows[id as usize] = Some(b);
                        id
                    }
                    None => {
                        rows.push(Some(b));
                        (rows.len() - 1) as RowId
                    }
                }
            }
        }
    }

    pub(crate) fn replace(&mut self, id: RowId, row: &[u8]) {
        match self {
            Heap::Fixed { slot, arena, .. } => {
                assert_eq!(row.len(), *slot, "fixed-size row");
                arena[id as usize * *slot..(id as usize + 1) * *slot].copy_from_slice(row);
            }
            Heap::Var { rows, .. } => rows[id as usize] = Some(row.into()),
        }
    }

    pub(crate) fn remove(&mut self, id: RowId) {
        match self {
            Heap::Fixed { live, free, .. } => {
                live[id as usize / 64] &= !(1 << (id % 64));
                free.push(id);
            }
            Heap::Var { rows, free } => {
                rows[id as usize] = None;
                free.push(id);
            }
        }
    }

    /// Bytes of memory held by the heap itself (capacity, not just live rows).
    pub(crate) fn footprint(&self) -> usize {
        match self {
            Heap::Fixed { arena, live, free, .. } => arena.capacity() + live.capacity() * 8 + free.capacity() * 4,
            Heap::Var { rows, free } => {
                rows.capacity() * 16 + free.capacity() * 4 + rows.iter().flatten().map(|r| r.len()).sum::<usize>()
            }
        }
    }
}
