//! Row heap: rows addressed by a dense row id. Tables whose rows all have one length (only
//! fixed-width columns) keep them in fixed-size pages of equal slots (as NDB's fixed-size pages),
//! so a 104-byte row costs 104 bytes and growth never copies rows; other tables keep one boxed
//! slice per row.

pub type RowId = u32;

/// Starts loading the cache line at `p` (rows, hash slots) before it is read.
#[inline]
pub(crate) fn prefetch_ptr<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint and never faults, whatever the address.
    #[allow(unused_unsafe)]
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Bytes per page of fixed-size rows.
pub const PAGE_BYTES: usize = 32 * 1024;

#[derive(Debug)]
pub(crate) enum Heap {
    Fixed { slot: usize, per_page: usize, pages: Vec<Box<[u8]>>, live: Vec<u64>, free: Vec<RowId>, slots: u32 },
    Var { rows: Vec<Option<Box<[u8]>>>, free: Vec<RowId> },
}

impl Heap {
    pub(crate) fn new(fixed: Option<usize>) -> Heap {
        match fixed {
            Some(slot) if slot > 0 && slot <= PAGE_BYTES => Heap::Fixed {
                slot,
                per_page: PAGE_BYTES / slot,
                pages: Vec::new(),
                live: Vec::new(),
                free: Vec::new(),
                slots: 0,
            },
            _ => Heap::Var { rows: Vec::new(), free: Vec::new() },
        }
    }

    #[inline]
    pub(crate) fn get(&self, id: RowId) -> &[u8] {
        match self {
            Heap::Fixed { slot, per_page, pages, .. } => {
                let (p, i) = (id as usize / per_page, id as usize % per_page);
                &pages[p][i * slot..(i + 1) * slot]
            }
            Heap::Var { rows, .. } => rows[id as usize].as_deref().expect("live row id"),
        }
    }

    /// Starts loading what `get(id)` reads before the row itself: a boxed row's pointer (fixed
    /// pages are found by arithmetic on a small, hot array).
    #[inline]
    pub(crate) fn prefetch_entry(&self, id: RowId) {
        if let Heap::Var { rows, .. } = self
            && let Some(e) = rows.get(id as usize)
        {
            prefetch_ptr(e as *const _);
        }
    }

    /// Starts loading a boxed row's bytes (a scan asks for rows a few ahead of the one it reads;
    /// fixed pages are read in order, which the hardware prefetches by itself).
    #[inline]
    pub(crate) fn prefetch_row(&self, id: RowId) {
        if let Heap::Var { rows, .. } = self
            && let Some(Some(r)) = rows.get(id as usize)
        {
            // Every cache line of the row (a scan reads columns all over it), up to four.
            for at in (0..r.len().min(256)).step_by(64) {
                prefetch_ptr(r[at..].as_ptr());
            }
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
            Heap::Fixed { slot, per_page, pages, live, free, slots } => {
                assert_eq!(row.len(), *slot, "fixed-size row");
                let id = match free.pop() {
                    Some(id) => id,
                    None => {
                        let id = *slots;
                        *slots += 1;
                        if id as usize / *per_page >= pages.len() {
                            pages.push(vec![0u8; *per_page * *slot].into_boxed_slice());
                        }
                        if live.len() * 64 < *slots as usize {
                            live.push(0);
                        }
                        id
                    }
                };
                let (p, i) = (id as usize / *per_page, id as usize % *per_page);
                pages[p][i * *slot..(i + 1) * *slot].copy_from_slice(row);
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
            Heap::Fixed { slot, per_page, pages, .. } => {
                assert_eq!(row.len(), *slot, "fixed-size row");
                let (p, i) = (id as usize / *per_page, id as usize % *per_page);
                pages[p][i * *slot..(i + 1) * *slot].copy_from_slice(row);
            }
            Heap::Var { rows, .. } => match &mut rows[id as usize] {
                // Same length (a changed value of a fixed-size column, most updates): in place.
                Some(r) if r.len() == row.len() => r.copy_from_slice(row),
                r => *r = Some(row.into()),
            },
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
            Heap::Fixed { pages, live, free, .. } => {
                pages.len() * PAGE_BYTES + pages.capacity() * 16 + live.capacity() * 8 + free.capacity() * 4
            }
            Heap::Var { rows, free } => {
                rows.capacity() * 16 + free.capacity() * 4 + rows.iter().flatten().map(|r| r.len()).sum::<usize>()
            }
        }
    }
}
