//! Scan fragments: full and ordered-index scans of one partition with pushed filters,
//! projections and partial aggregation.

use super::*;

/// Rows one scan step looks at, at most (about a few milliseconds of work).
const SCAN_EXAMINE_MAX: usize = 1 << 16;

/// Ranges of a multi-range scan one step reads, at most.
const RANGES_PER_STEP: usize = 4096;

/// Names the lifetime of the rows a scan's row function takes: the partition's, so an
/// aggregating scan may keep them in its batch until the step ends.
fn emitter<'a, F>(f: F) -> F
where
    F: FnMut(&'a [u8], Option<&[u8]>, &mut Vec<Vec<u8>>, &mut Vec<Vec<u8>>) -> bool,
{
    f
}

/// A scan range's bound as the store takes it.
fn index_bound(b: &Option<tern_wire::Bound>) -> Option<IndexBound> {
    b.as_ref().map(|b| IndexBound { key: b.key.clone(), inclusive: b.inclusive })
}

/// One step of an index scan over `req`'s ranges, in reading order (reversed when
/// descending): a step goes on to the next range while `visit` (key, row) wants more, and stops
/// after at most `RANGES_PER_STEP` ranges (an empty range still costs a seek). Where the next
/// step resumes.
fn index_ranges<'a>(
    part: &'a Partition,
    pos: usize,
    req: &ScanFrag,
    mut visit: impl FnMut(&[u8], &'a [u8]) -> bool,
) -> ScanPos {
    let n = req.ranges.len();
    let multi = n > 1;
    let (mut i, mut after) = match &req.resume {
        ScanPos::After(k) if !multi => (0, Some(k.clone())),
        ScanPos::Ranged(r, k) if multi => (*r as usize, k.clone()),
        _ => (0, None),
    };
    let mut visited = 0usize;
    while i < n {
        let (lo, hi) = &req.ranges[if req.descending { n - 1 - i } else { i }];
        let (lo, hi) = (index_bound(lo), index_bound(hi));
        let stopped = part.index_scan(
            pos,
            lo.as_ref(),
            hi.as_ref(),
            after.as_deref(),
            req.descending,
            if after.is_none() { req.offset } else { 0 },
            |k, _, row| visit(k, row),
        );
        if let Some(k) = stopped {
            return if multi { ScanPos::Ranged(i as u32, Some(k)) } else { ScanPos::After(k) };
        }
        i += 1;
        after = None;
        visited += 1;
        if visited >= RANGES_PER_STEP && i < n {
            return ScanPos::Ranged(i as u32, None);
        }
    }
    ScanPos::Done
}

/// A plain range read of an index (one partition, no filter, not of a TTL table): an offset is
/// found by rank and COUNT(*) is the ranges' sizes, in O(log n) however big they are. What that
/// settles before any row is read: COUNT(*)'s partial row, or the refusal of an offset where it
/// cannot be found by rank; None when the scan reads its rows.
fn counted(req: &ScanFrag, part: &Partition, ttl_table: bool) -> Option<TernResult<Vec<Vec<u8>>>> {
    let plain =
        req.index.is_some() && matches!(*req.filter, tern_types::filter::Filter::True) && !ttl_table && !req.expired;
    if req.offset > 0 && (!plain || req.ranges.len() != 1 || req.aggregate.is_some()) {
        return Some(Err(TernError::new(ErrorCode::InvalidRequest, "an offset needs a plain range scan of an index")));
    }
    if plain
        && req.resume == ScanPos::Start
        && req.aggregate.as_ref().is_some_and(|a| a.is_count_star())
        && let Some(pos) = req.index.and_then(|i| part.index_position(i))
    {
        let n = req
            .ranges
            .iter()
            .map(|(lo, hi)| part.index_count(pos, index_bound(lo).as_ref(), index_bound(hi).as_ref()))
            .sum();
        return Some(Ok(tern_agg::Aggregation::count_partial(n)));
    }
    None
}

impl Ldm {
    pub(super) fn scan(&mut self, req: ScanFrag, out: &mut Out) {
        let mut rows = Vec::new();
        let mut keys = Vec::new();
        let reply = |rows, keys, next, error| {
            Box::new(ScanFragRows { scan: req.scan, partition: req.partition, rows, keys, next, error, more: false })
        };
        if self.moves.guarded.contains(&(req.table, req.partition))
            && let Err(e) = self.scan_allowed((req.table, req.partition), &req.resume)
        {
            out.send(req.reply_to, Signal::ScanFragRows(reply(rows, keys, ScanPos::Done, Some(e))));
            return;
        }
        let (Some(part), Some(layout)) = (self.parts.get(&(req.table, req.partition)), self.layouts.get(&req.table))
        else {
            let e = TernError::new(ErrorCode::SchemaChanged, "scanned partition is not here (schema changed)");
            out.send(req.reply_to, Signal::ScanFragRows(reply(rows, keys, ScanPos::Done, Some(e))));
            return;
        };
        let max = req.max_rows.max(1) as usize;
        let mut error = None;
        let ttl = self.ttls.get(&req.table).copied();
        let now_us = self.now_us;
        // Aggregating scans fold up to 16 batches' worth of rows into partial groups per step.
        let agg = req.aggregate.clone();
        if let Some(a) = &agg
            && a.max_column().is_some_and(|c| c as usize >= layout.column_count())
        {
            let e = TernError::new(ErrorCode::InvalidRequest, "aggregate names a missing column");
            out.send(req.reply_to, Signal::ScanFragRows(reply(rows, keys, ScanPos::Done, Some(e))));
            return;
        }
        if let Some(answer) = counted(&req, part, ttl.is_some()) {
            let (rows, e) = answer.map_or_else(|e| (Vec::new(), Some(e)), |rows| (rows, None));
            out.send(req.reply_to, Signal::ScanFragRows(reply(rows, keys, ScanPos::Done, e)));
            return;
        }
        let mut partial = tern_agg::Partial::default();
        let mut folded = 0usize;
        let agg_max = max.saturating_mul(16);
        // One step examines a bounded number of rows however few pass the filter, so a selective
        // scan of a big partition cannot hold the thread (the tc asks again from `next`).
        let mut examined = 0usize;
        let filter = req.filter.prepare(layout);
        let mut emit = emitter(|row, key, rows, keys| {
            examined += 1;
            let expired = ttl.is_some_and(|t| row_expired(layout, t, row, now_us));
            if expired != req.expired || !filter.passes(layout, row) {
                return examined < SCAN_EXAMINE_MAX;
            }
            if let Some(a) = &agg {
                if let Err(e) = partial.add(a, layout, row) {
                    error = Some(TernError::new(ErrorCode::ValueOutOfRange, e.0));
                    return false;
                }
                folded += 1;
                return folded < agg_max && partial.len() < tern_agg::GROUPS_MAX && examined < SCAN_EXAMINE_MAX;
            }
            match project(layout, row, req.projection.as_deref().map(|v| &v[..])) {
                OpResult::Row(r) => rows.push(r),
                OpResult::Error(e) => {
                    error = Some(e);
                    return false;
                }
                _ => {}
            }
            if let Some(k) = key {
                keys.push(k.to_vec());
            }
            rows.len() < max && examined < SCAN_EXAMINE_MAX
        });
        let next = match req.index {
            None => {
                let from = match req.resume {
                    ScanPos::Start => 0,
                    ScanPos::RowId(r) => r,
                    _ => u32::MAX,
                };
                match part.scan(from, |_, row| emit(row, None, &mut rows, &mut keys)) {
                    Some(r) => ScanPos::RowId(r),
                    None => ScanPos::Done,
                }
            }
            Some(index) => match part.index_position(index) {
                None => {
                    error = Some(TernError::new(ErrorCode::NoSuchIndex, "index is not here (schema changed)"));
                    ScanPos::Done
                }
                Some(pos) => {
                    let with_keys = req.with_keys;
                    index_ranges(part, pos, &req, |k, row| emit(row, with_keys.then_some(k), &mut rows, &mut keys))
                }
            },
        };
        if agg.is_some() {
            match partial.finish() {
                Ok(r) => rows = r,
                Err(e) if error.is_none() => error = Some(TernError::new(ErrorCode::ValueOutOfRange, e.0)),
                Err(_) => {}
            }
            keys.clear();
        }
        let next = if error.is_some() { ScanPos::Done } else { next };
        debug_assert!(agg.is_some() || rows.len() <= max, "invariant: a scan batch holds at most max_rows rows");
        debug_assert!(keys.is_empty() || keys.len() == rows.len(), "invariant: a locking scan gives a key per row");
        if agg.is_some() && req.steps > 0 && next != ScanPos::Done {
            // Go on by itself: the partial groups go to the tc now and the next step runs after
            // this thread's other waiting work.
            let mut rows = reply(rows, keys, next.clone(), None);
            rows.more = true;
            out.send(req.reply_to, Signal::ScanFragRows(rows));
            let again = ScanFrag { resume: next, steps: req.steps - 1, ..req };
            out.send_later(self.addr, Signal::ScanFrag(Box::new(again)));
            return;
        }
        out.send(req.reply_to, Signal::ScanFragRows(reply(rows, keys, next, error)));
    }

    /// The committed rows of every partition this ldm holds (for the simulator's replica checks).
    pub fn committed_rows(&self) -> BTreeMap<(TableId, u32), Vec<Vec<u8>>> {
        self.parts
            .iter()
            .map(|(&k, p)| {
                let mut rows = Vec::with_capacity(p.len() as usize);
                p.scan(0, |_, row| {
                    rows.push(row.to_vec());
                    true
                });
                (k, rows)
            })
            .collect()
    }
}
