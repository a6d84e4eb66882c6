//! The TTL purge (interfaces.md §5): expired rows are invisible at once (the ldms check every
//! read), and this background pass deletes them to free their memory.
//!
//! Every tc purges the partitions whose primary replica is its own worker's ldm, so the work
//! spreads over every worker of every node and follows the primaries when they move. A pass
//! over one (table, partition) scans the partition for expired rows (an ordered index whose
//! first column is the TTL column bounds the scan at `now - seconds`; otherwise the partition is
//! scanned whole, a bounded number of rows per step) and deletes each batch of them in one
//! transaction of `DeleteExpired` operations, which delete a row only if it is still expired
//! when locked (a row written again meanwhile stays). The rows of a table's `TtlCascade`
//! children whose first column equals a purged row's column go with it (the Redis front end's
//! overflow parts and hash fields).
//!
//! The purge is an ordinary client of its own tc: its requests carry `PURGE_CLIENT` and their
//! replies are taken out of the block's output before they would reach the runtime. At most
//! `purge_batches_per_tick` batches run per tick; a partition where a pass found nothing is
//! visited less and less often (up to every `BACKOFF_MAX` intervals).

use super::*;

/// The client id the purge's requests carry (runtime client ids count up from 1).
pub(super) const PURGE_CLIENT: ClientId = u64::MAX - 1;
/// After a pass that purged nothing, a partition waits up to this many intervals.
const BACKOFF_MAX: u64 = 64;

/// The purge's state in one tc.
#[derive(Default)]
pub(super) struct Purge {
    /// Per (table, partition): when it is due next (ms) and its back-off (intervals).
    pace: BTreeMap<(TableId, u32), (u64, u64)>,
    /// The (table, partition) of the running pass.
    pass: Option<(TableId, u32)>,
    /// The running pass: its TTL sweep at the bottom, above it the cascade sweeps of its last
    /// batch (the top one runs).
    sweeps: Vec<Sweep>,
    /// Rows the running pass purged.
    purged: u64,
    /// Request (and scan/transaction) ids.
    next_id: u64,
    /// The request whose reply is awaited.
    awaiting: Option<u64>,
    /// Batches deleted during this tick.
    batches: u32,
    /// The pass waits for the next tick.
    paused: bool,
    /// Passes abandoned on an error (a failed node, memory, a dropped table), for tests.
    pub(super) errors: u64,
}

struct Sweep {
    table: TableId,
    partition: u32,
    scan: u64,
    /// `DeleteExpired` for the TTL sweep, `Delete` for cascades.
    kind: OpKind,
    /// The scan gave its last batch.
    done: bool,
    /// The rows of the batch being deleted.
    rows: Vec<Vec<u8>>,
    /// A cascade sweep not opened yet (`scan` is 0): the first-column values to delete.
    values: Vec<Value>,
}

impl Tc {
    /// Purge work of one tick: continues a paused pass or starts the next due one.
    pub(super) fn purge_tick(&mut self, out: &mut Out) {
        self.purge.batches = 0;
        if !self.started || self.cfg.purge_interval_ms == 0 {
            return;
        }
        if self.purge.paused {
            self.purge.paused = false;
            self.purge_continue(out);
            return;
        }
        if !self.purge.sweeps.is_empty() || self.purge.awaiting.is_some() {
            return;
        }
        let now = self.now_ms;
        let Block::Tc(me) = self.addr.block else { return };
        let mine = Addr::new(self.addr.node, Block::Ldm(me));
        // The TTL partitions whose primary is this worker's ldm, in a fixed order.
        let due = self
            .catalog
            .tables
            .values()
            .filter(|t| t.ttl.is_some())
            .flat_map(|t| (0..t.partition_count).map(move |p| (t.id, p)))
            .filter(|&(t, p)| self.chain_of(t, p).addrs.first() == Some(&mine))
            .find(|k| self.purge.pace.get(k).is_none_or(|&(at, _)| at <= now));
        // Forget partitions of dropped tables.
        let catalog = &self.catalog;
        self.purge.pace.retain(|(t, _), _| catalog.tables.contains_key(t));
        let Some((table, partition)) = due else { return };
        self.purge.purged = 0;
        self.purge.pass = Some((table, partition));
        self.purge_sweep(table, partition, OpKind::DeleteExpired, None, out);
    }

    /// Opens a sweep: a scan of one partition for expired rows (TTL) or for the rows whose first
    /// column is one of `values` (cascade).
    fn purge_sweep(&mut self, table: TableId, partition: u32, kind: OpKind, values: Option<Vec<Value>>, out: &mut Out) {
        let Some(t) = self.catalog.table(table) else { return self.purge_abandon(out) };
        let mut req = ScanReq::table(table);
        req.partition = Some(partition);
        req.batch_rows = self.cfg.purge_batch_rows.max(1);
        match values {
            Some(values) => req.filter = tern_types::filter::Filter::In { col: 0, values },
            None => {
                req.expired = true;
                // Rows expire once `column < now - seconds`: an ordered index led by the TTL
                // column ends the scan there.
                let ttl = t.ttl.as_ref().expect("a TTL table");
                let col = &t.columns[ttl.column as usize];
                if let Some(index) = t.indexes.iter().find(|i| !i.unique && i.columns.first() == Some(&ttl.column)) {
                    let now_us = (self.cfg.wall_base_ms.saturating_add(self.now_ms) as i64).saturating_mul(1000);
                    let limit = now_us.saturating_sub(ttl.seconds as i64 * 1_000_000);
                    let v = match col.ty {
                        tern_types::ColumnType::Timestamp { .. } => Value::Timestamp(limit),
                        _ => Value::DateTime(limit),
                    };
                    let mut key = Vec::new();
                    if tern_types::row::encode_index_value(col.ty, col.nullable, &v, &mut key).is_ok() {
                        req.index = Some(index.id);
                        req.hi = Some(tern_wire::Bound { key, inclusive: false });
                    }
                }
            }
        }
        self.purge.next_id += 1;
        let id = self.purge.next_id;
        req.scan = id;
        self.purge.sweeps.push(Sweep {
            table,
            partition,
            scan: id,
            kind,
            done: false,
            rows: Vec::new(),
            values: Vec::new(),
        });
        debug_assert!(self.purge.awaiting.is_none(), "invariant: the purge waits for one reply at a time");
        self.purge.awaiting = Some(id);
        self.request(PURGE_CLIENT, id, Request::Scan(req), out);
    }

    /// Takes the purge's replies out of `out` (from position `from` on) and acts on them; the
    /// requests that causes may answer at once, so this repeats until none is left.
    pub(super) fn purge_replies(&mut self, from: usize, out: &mut Out) {
        loop {
            if !out.replies[from.min(out.replies.len())..].iter().any(|(c, _, _)| *c == PURGE_CLIENT) {
                return;
            }
            let mut mine = Vec::new();
            let mut i = from;
            while i < out.replies.len() {
                if out.replies[i].0 == PURGE_CLIENT {
                    let (_, req_id, reply) = out.replies.remove(i);
                    mine.push((req_id, reply));
                } else {
                    i += 1;
                }
            }
            for (req_id, reply) in mine {
                if self.purge.awaiting == Some(req_id) {
                    self.purge.awaiting = None;
                    self.purge_reply(reply, out);
                }
            }
        }
    }

    fn purge_reply(&mut self, reply: Reply, out: &mut Out) {
        match reply {
            Reply::ScanRows { rows, done, .. } => {
                let Some(top) = self.purge.sweeps.last_mut() else { return };
                top.done = done;
                if rows.is_empty() {
                    return self.purge_continue(out);
                }
                let Some(layout) = self.layouts.get(&top.table).cloned() else { return self.purge_abandon(out) };
                let ops = rows
                    .iter()
                    .map(|r| KeyOp {
                        table: top.table,
                        kind: top.kind,
                        key: layout.key_of(r).to_vec(),
                        row: Vec::new(),
                        updates: Vec::new(),
                        projection: None,
                    })
                    .collect();
                top.rows = rows;
                self.purge.next_id += 1;
                let id = self.purge.next_id;
                self.purge.awaiting = Some(id);
                let txn = TxnReq {
                    txn: id,
                    ops,
                    exec: Exec::Commit,
                    abort: AbortOption::IgnoreError,
                    durable: false,
                    nowait: false,
                };
                self.request(PURGE_CLIENT, id, Request::Txn(txn), out);
            }
            Reply::Txn(TxnResp { results, outcome: Outcome::Committed { .. }, .. }) => {
                let Some(top) = self.purge.sweeps.last_mut() else { return };
                let rows = std::mem::take(&mut top.rows);
                let deleted: Vec<&Vec<u8>> =
                    rows.iter().zip(&results).filter(|(_, r)| **r == OpResult::Done).map(|(row, _)| row).collect();
                let (table, kind) = (top.table, top.kind);
                self.stats.count_purged(table, deleted.len() as u64);
                self.purge.batches += 1;
                if kind != OpKind::DeleteExpired {
                    return self.purge_continue(out);
                }
                self.purge.purged += deleted.len() as u64;
                // The cascade sweeps of the purged rows run before the pass goes on.
                let cascades = self.purge_cascades(table, &deleted);
                for (child, partition, values) in cascades.into_iter().rev() {
                    // Pushed now, opened when they reach the top of the stack.
                    self.purge.sweeps.push(Sweep {
                        table: child,
                        partition,
                        scan: 0,
                        kind: OpKind::Delete,
                        done: false,
                        rows: Vec::new(),
                        values,
                    });
                }
                self.purge_continue(out);
            }
            // An error, an abort (a failed node, full memory) or a dropped table: the pass stops
            // and the partition comes round again later.
            _ => {
                self.purge.errors += 1;
                self.purge_abandon(out);
            }
        }
    }

    /// For the rows a TTL sweep purged: per cascade child and partition, the values of its first
    /// column to delete.
    fn purge_cascades(&self, table: TableId, deleted: &[&Vec<u8>]) -> Vec<(TableId, u32, Vec<Value>)> {
        let (Some(t), Some(layout)) = (self.catalog.table(table), self.layouts.get(&table)) else { return Vec::new() };
        let Some(ttl) = &t.ttl else { return Vec::new() };
        let mut sweeps = Vec::new();
        for c in &ttl.cascade {
            let Some(child) = self.catalog.find_table(&t.database, &c.child) else { continue };
            let Some(first) = child.columns.first() else { continue };
            let mut groups: BTreeMap<u32, Vec<Value>> = BTreeMap::new();
            for row in deleted {
                let Ok(v) = layout.get(row, c.column as usize) else { continue };
                if v.is_null() {
                    continue;
                }
                // A child partitioned by its first column alone has all rows of one value in
                // one partition; otherwise every partition is swept.
                if child.partition_key == [0] && child.primary_key.first() == Some(&0) {
                    let mut key = Vec::new();
                    if tern_types::row::encode_key_value(first.ty, &v, &mut key).is_err() {
                        continue;
                    }
                    groups.entry(tern_types::hash::partition_of(&key, child.partition_count)).or_default().push(v);
                } else {
                    for p in 0..child.partition_count {
                        groups.entry(p).or_default().push(v.clone());
                    }
                }
            }
            sweeps.extend(groups.into_iter().map(|(p, values)| (child.id, p, values)));
        }
        sweeps
    }

    /// Moves the running pass on: the next batch of the top sweep, the next sweep, or the end.
    fn purge_continue(&mut self, out: &mut Out) {
        loop {
            let Some(top) = self.purge.sweeps.last() else { return self.purge_finished() };
            if top.scan == 0 {
                // A cascade sweep not opened yet: its values wait in `rows`.
                let s = self.purge.sweeps.pop().expect("top");
                return self.purge_sweep(s.table, s.partition, s.kind, Some(s.values), out);
            }
            if top.done {
                self.purge.sweeps.pop();
                continue;
            }
            if self.purge.batches >= self.cfg.purge_batches_per_tick {
                self.purge.paused = true;
                return;
            }
            let scan = top.scan;
            self.purge.awaiting = Some(scan);
            return self.request(PURGE_CLIENT, scan, Request::ScanNext { scan }, out);
        }
    }

    /// The pass is over: the partition's next visit is one interval away, or further when the
    /// pass purged nothing.
    fn purge_finished(&mut self) {
        let purged = self.purge.purged;
        self.purge_pace(purged > 0);
    }

    /// Sets when the pass's partition is due again: one interval away after a pass that purged
    /// rows, twice the previous back-off after one that did not (or failed).
    fn purge_pace(&mut self, found: bool) {
        let Some(k) = self.purge.pass.take() else { return };
        let interval = self.cfg.purge_interval_ms;
        let e = self.purge.pace.entry(k).or_insert((0, 0));
        e.1 = if found { 1 } else { (e.1 * 2).clamp(1, BACKOFF_MAX) };
        e.0 = self.now_ms + interval * e.1;
    }

    fn purge_abandon(&mut self, _out: &mut Out) {
        for s in std::mem::take(&mut self.purge.sweeps) {
            if s.scan != 0 && !s.done {
                self.drop_scan((PURGE_CLIENT, s.scan));
            }
        }
        self.purge.awaiting = None;
        self.purge.paused = false;
        self.purge_pace(false);
    }
}
