//! The `ldm` block (NDB: DBLQH + DBACC + DBTUP + DBTUX): owns a set of partition replicas, their
//! row locks and uncommitted changes, executes key operations and scan fragments, and writes its
//! own redo log and checkpoints (as disk requests). Performance-critical.
//!
//! Transaction handling at one replica:
//! * `Prepare`: execute a batch in order. Writes and locking reads take a row lock (a lock held by
//!   another transaction makes the batch wait, up to `lock_wait_timeout_ms`, then the op fails
//!   with a temporary error). Writes are kept as pending after-images, with their data memory
//!   reserved, so commit cannot fail. Read-committed reads never lock and see committed rows (or
//!   the transaction's own pending write). A non-last replica forwards the after-images down the
//!   chain; the last replica answers the coordinator.
//! * `Commit(epoch)` arrives backup-first: apply pending changes to the store, append one redo
//!   record stamped with the epoch, forward towards the primary. The primary releases the locks
//!   and answers `Committed`; backups release at `Complete`.
//! * `Abort`: forwarded down the chain before undoing locally (per-link FIFO keeps it behind the
//!   batch it cancels).
//!
//! Durability: redo records accumulate in a buffer handed to the disk on `EpochFlush` (or when
//! large); the flush answers `EpochFlushed` with the LSN made durable. Checkpoints snapshot every
//! partition at a point in this block's order (start LSN = end of redo at that point) and become
//! usable once their newest epoch is durable, which then frees older redo and checkpoints.

use crate::checkpoint::{self, CheckpointStream};
use crate::redo::{self, RedoOpRef};
use crate::signal::{Addr, Block, IoReq, Out, PrepOp, PrepareBatch, ScanFrag, ScanFragRows, ScanPos, Signal, TxnRef};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use tern_store::{IndexBound, MemoryBudget, Partition};
use tern_types::row::encode_values;
use tern_types::schema::{ColumnType, TableId};
use tern_types::value::{coerce, rescale};
use tern_types::{Catalog, ErrorCode, RowLayout, TernError, TernResult, Value};
use tern_wire::{ColumnUpdate, KeyOp, OpKind, OpResult, UpdateExpr};

#[derive(Debug, Clone)]
pub struct LdmConfig {
    pub lock_wait_timeout_ms: u64,
    /// Start a checkpoint when this much redo was written since the last one began.
    pub checkpoint_redo_bytes: u64,
    /// Hand the redo buffer to the disk when it grows past this (without syncing).
    pub redo_buffer_bytes: usize,
    pub tick_ms: u64,
    /// Bytes of checkpoint data handed to the disk at a time.
    pub checkpoint_chunk_bytes: usize,
    /// Wall-clock time (ms since the Unix epoch) at which the `now_ms` handed to `handle` was 0;
    /// TTL expiry compares stored DATETIME/TIMESTAMP values against `wall_base_ms + now_ms`.
    pub wall_base_ms: u64,
}

impl Default for LdmConfig {
    fn default() -> Self {
        LdmConfig {
            lock_wait_timeout_ms: 1200,
            checkpoint_redo_bytes: 64 << 20,
            redo_buffer_bytes: 1 << 20,
            tick_ms: 50,
            checkpoint_chunk_bytes: 1 << 20,
            wall_base_ms: 0,
        }
    }
}

/// What an ldm starts from: recovered partitions and where its disk state stands.
pub struct LdmStart {
    pub partitions: Vec<Partition>,
    /// LSN at which this ldm's new redo starts (at or past the end of any old log).
    pub base_lsn: u64,
    pub durable_epoch: u64,
    pub next_checkpoint_id: u64,
    /// Checkpoint files of earlier runs, deleted once the start-up checkpoint is usable.
    pub old_checkpoints: Vec<String>,
}

type PartKey = (TableId, u32);

/// A unique index as the ldm maintains it: the base columns and the index table.
struct UniqueIndex {
    columns: Vec<u16>,
    table: TableId,
    layout: Arc<RowLayout>,
}
type LockKey = (TableId, u32, Vec<u8>);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LockMode {
    Shared,
    Exclusive,
}

#[derive(Debug, Default)]
struct LockEntry {
    exclusive: Option<TxnRef>,
    shared: Vec<TxnRef>,
    waiters: VecDeque<(TxnRef, LockMode)>,
}

impl LockEntry {
    fn compatible(&self, txn: TxnRef, mode: LockMode) -> bool {
        match mode {
            LockMode::Shared => self.exclusive.is_none_or(|t| t == txn),
            LockMode::Exclusive => self.exclusive.is_none_or(|t| t == txn) && self.shared.iter().all(|&t| t == txn),
        }
    }
    fn grant(&mut self, txn: TxnRef, mode: LockMode) {
        match mode {
            LockMode::Shared => {
                if self.exclusive != Some(txn) && !self.shared.contains(&txn) {
                    self.shared.push(txn);
                }
            }
            LockMode::Exclusive => {
                self.shared.retain(|&t| t != txn);
                self.exclusive = Some(txn);
            }
        }
    }
    fn is_free(&self) -> bool {
        self.exclusive.is_none() && self.shared.is_empty() && self.waiters.is_empty()
    }
}

#[derive(Debug)]
struct Change {
    /// None = delete.
    row: Option<Vec<u8>>,
    reserved: u64,
    /// A dirty update (`OpKind::UpdateDirty`): the row to start from when the key is absent at
    /// commit (empty: none) and the updates to apply at commit to the row committed then.
    deferred: Option<(Vec<u8>, Vec<ColumnUpdate>)>,
}

#[derive(Debug, Default)]
struct LdmTxn {
    changes: BTreeMap<LockKey, Change>,
    locks: Vec<LockKey>,
}

struct Blocked {
    batch: Box<PrepareBatch>,
    next_op: usize,
    lock: LockKey,
    deadline_ms: u64,
}

/// Batches at least this long get their lookups prefetched.
const PREFETCH_BATCH_MIN: usize = 4;
/// Chunks in flight before the scan waits for the disk.
const CHECKPOINT_CHUNKS_IN_FLIGHT: usize = 2;

/// A checkpoint being written, a chunk per loop turn.
struct CheckpointRun {
    id: u64,
    start_lsn: u64,
    parts: Vec<PartKey>,
    part_idx: usize,
    /// Next row id to scan in the current partition; None = its header is not written yet.
    next_row: Option<u32>,
    stream: Option<CheckpointStream>,
    chunk_tokens: Vec<u64>,
    finish: Option<(u64, WrittenCheckpoint)>,
    step_queued: bool,
}

struct WrittenCheckpoint {
    start_lsn: u64,
    max_epoch: u64,
    name: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Created,
    StartCheckpoint,
    Ready,
}

pub struct Ldm {
    addr: Addr,
    stats: Arc<crate::tc::NodeStats>,
    ldm_count: u16,
    /// Set once every ldm has written its start-up checkpoint: earlier runs' files may go.
    cleanup_allowed: bool,
    cfg: LdmConfig,
    budget: MemoryBudget,
    layouts: HashMap<TableId, Arc<RowLayout>>,
    /// Per table, its unique indexes and their hidden index tables.
    uniques: HashMap<TableId, Vec<UniqueIndex>>,
    catalog_version: u64,
    parts: BTreeMap<PartKey, Partition>,
    txns: HashMap<TxnRef, LdmTxn>,
    locks: HashMap<LockKey, LockEntry>,
    blocked: HashMap<TxnRef, Blocked>,
    redo_buf: Vec<u8>,
    /// LSN one past the last byte produced (including the unflushed buffer).
    lsn: u64,
    synced_lsn: u64,
    appended_since_sync: bool,
    max_epoch_applied: u64,
    /// (io token, epoch, LSN being synced, newest epoch applied).
    pending_flush: Option<(u64, u64, u64, u64)>,
    durable_epoch: u64,
    next_token: u64,
    next_checkpoint_id: u64,
    checkpoint_start_lsn: u64,
    checkpoint_run: Option<CheckpointRun>,
    checkpoints_written: Vec<WrittenCheckpoint>,
    current_checkpoint: Option<WrittenCheckpoint>,
    old_checkpoints: Vec<String>,
    phase: Phase,
    dist: Addr,
    /// Tables with a TTL: (column, seconds).
    ttls: HashMap<TableId, (usize, u64)>,
    /// Wall-clock now in µs since the Unix epoch, refreshed on every signal.
    now_us: i64,
}

fn err_op(code: ErrorCode, msg: impl Into<String>) -> OpResult {
    OpResult::Error(TernError::new(code, msg))
}

impl Ldm {
    pub fn new(
        addr: Addr,
        ldm_count: u16,
        cfg: LdmConfig,
        budget: MemoryBudget,
        stats: Arc<crate::tc::NodeStats>,
        catalog: &Catalog,
        start: LdmStart,
    ) -> Ldm {
        let mut ldm = Ldm {
            addr,
            stats,
            ldm_count,
            cleanup_allowed: false,
            cfg,
            budget,
            layouts: HashMap::new(),
            uniques: HashMap::new(),
            catalog_version: 0,
            parts: BTreeMap::new(),
            txns: HashMap::new(),
            locks: HashMap::new(),
            blocked: HashMap::new(),
            redo_buf: Vec::new(),
            lsn: start.base_lsn,
            synced_lsn: start.base_lsn,
            appended_since_sync: false,
            max_epoch_applied: start.durable_epoch,
            pending_flush: None,
            durable_epoch: start.durable_epoch,
            next_token: 1,
            next_checkpoint_id: start.next_checkpoint_id,
            checkpoint_start_lsn: start.base_lsn,
            checkpoint_run: None,
            checkpoints_written: Vec::new(),
            current_checkpoint: None,
            old_checkpoints: start.old_checkpoints,
            phase: Phase::Created,
            dist: Addr::new(addr.node, Block::Dist),
            ttls: HashMap::new(),
            now_us: 0,
        };
        for p in start.partitions {
            ldm.stats.rows.fetch_add(p.len() as i64, std::sync::atomic::Ordering::Relaxed);
            ldm.parts.insert((p.table, p.partition), p);
        }
        ldm.apply_catalog(catalog);
        ldm
    }

    fn instance(&self) -> u16 {
        match self.addr.block {
            Block::Ldm(i) => i,
            _ => unreachable!("ldm address"),
        }
    }

    /// Rows and partitions held, for status reports.
    pub fn stats(&self) -> (u32, u64) {
        (self.parts.len() as u32, self.parts.values().map(|p| p.len()).sum())
    }

    /// Creates partitions this ldm owns for new tables and drops those of dropped tables.
    fn apply_catalog(&mut self, catalog: &Catalog) {
        self.catalog_version = catalog.version;
        self.layouts.clear();
        self.ttls.clear();
        for t in catalog.tables.values() {
            self.layouts.insert(t.id, Arc::new(RowLayout::new(t)));
            if let Some(ttl) = &t.ttl {
                self.ttls.insert(t.id, (ttl.column as usize, ttl.seconds as u64));
            }
        }
        self.uniques.clear();
        for t in catalog.tables.values() {
            for idx in t.indexes.iter().filter(|i| i.unique) {
                if let Some(&it) = catalog.index_tables.get(&idx.id) {
                    let u = UniqueIndex { columns: idx.columns.clone(), table: it, layout: self.layouts[&it].clone() };
                    self.uniques.entry(t.id).or_default().push(u);
                }
            }
        }
        for ((t, _), p) in self.parts.iter_mut() {
            if let Some(def) = catalog.table(*t) {
                for id in p.index_ids() {
                    if !def.indexes.iter().any(|i| i.id == id) {
                        let before = p.charged();
                        p.drop_index(id);
                        self.budget.release(before.saturating_sub(p.charged()));
                    }
                }
            }
        }
        let dropped: Vec<PartKey> =
            self.parts.keys().filter(|(t, _)| !catalog.tables.contains_key(t)).copied().collect();
        for k in dropped {
            let p = self.parts.remove(&k).expect("listed");
            self.budget.release(p.charged());
            self.stats.rows.fetch_sub(p.len() as i64, std::sync::atomic::Ordering::Relaxed);
        }
        let owned: Vec<(TableId, u32)> = catalog
            .tables
            .values()
            .flat_map(|t| (0..t.partition_count).map(move |p| (t.id, p)))
            .filter(|&(_, p)| crate::node::ldm_of(p, self.ldm_count) == self.instance())
            .collect();
        for (t, p) in owned {
            if !self.parts.contains_key(&(t, p)) {
                let table = catalog.table(t).expect("listed");
                self.parts.insert((t, p), Partition::new(table, p, self.layouts[&t].clone()));
            }
        }
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    pub fn handle(&mut self, now_ms: u64, sig: Signal, out: &mut Out) {
        self.now_us = (self.cfg.wall_base_ms.saturating_add(now_ms) as i64).saturating_mul(1000);
        match sig {
            Signal::Start => {
                out.timer(self.cfg.tick_ms, self.addr, Signal::Tick);
                self.start_checkpoint(out);
                self.phase = Phase::StartCheckpoint;
            }
            Signal::Prepare(batch) => self.exec_batch(now_ms, batch, 0, out),
            Signal::Commit { txn, epoch, chain, pos } => self.commit(txn, epoch, chain, pos, out),
            Signal::Complete { txn, chain, pos } => {
                if pos > 0 {
                    self.release_txn(now_ms, txn, out);
                    out.send(chain[pos as usize - 1], Signal::Complete { txn, chain, pos: pos - 1 });
                }
            }
            Signal::Abort { txn, chain, pos } => {
                if let Some(&next) = chain.get(pos as usize + 1) {
                    out.send(next, Signal::Abort { txn, chain: chain.clone(), pos: pos + 1 });
                }
                self.abort(now_ms, txn, out);
                if pos as usize + 1 == chain.len() {
                    out.send(txn.tc, Signal::Aborted { txn, chain });
                }
            }
            Signal::ScanFrag(req) => self.scan(*req, out),
            Signal::EpochFlush { epoch } => self.flush(epoch, out),
            Signal::EpochDurable { epoch } => self.on_durable(epoch, out),
            Signal::IoDone { token, result } => self.io_done(token, result, out),
            Signal::Schema { catalog } => {
                self.apply_catalog(&catalog);
                out.send(
                    Addr::new(self.addr.node, Block::Dict),
                    Signal::SchemaAck { from: self.addr, version: catalog.version },
                );
            }
            Signal::IndexBuild { table, index, catalog } => {
                let result = self.build_index(table, index, &catalog);
                out.send(Addr::new(self.addr.node, Block::Dict), Signal::IndexBuilt { from: self.addr, index, result });
            }
            Signal::NodeStarted { .. } => {
                self.cleanup_allowed = true;
                self.on_durable(self.durable_epoch, out);
            }
            Signal::CheckpointStep => self.checkpoint_step(out),
            Signal::Tick => {
                self.expire_waits(now_ms, out);
                out.timer(self.cfg.tick_ms, self.addr, Signal::Tick);
            }
            other => panic!("ldm received an unexpected signal: {other:?}"),
        }
    }

    /// Adds an index to every partition of `table` (CREATE INDEX); undone on failure.
    fn build_index(&mut self, table: TableId, index: u32, catalog: &Catalog) -> Result<(), TernError> {
        let Some(t) = catalog.table(table) else {
            return Err(TernError::new(ErrorCode::NoSuchTable, "table was dropped"));
        };
        let Some(def) = t.indexes.iter().find(|i| i.id == index) else {
            return Err(TernError::new(ErrorCode::NoSuchIndex, "index not in catalog"));
        };
        let keys: Vec<PartKey> = self.parts.keys().filter(|(tt, _)| *tt == table).copied().collect();
        if def.unique && keys.iter().any(|k| !self.parts[k].is_empty()) {
            return Err(TernError::new(
                ErrorCode::Unsupported,
                "CREATE UNIQUE INDEX on a table that already has rows is not supported yet; declare the unique key when creating the table",
            ));
        }
        let mut done = Vec::new();
        for k in keys {
            let p = self.parts.get_mut(&k).expect("listed");
            let before = p.charged();
            if p.index_position(index).is_some() {
                continue;
            }
            match p.add_index(def) {
                Ok(()) => {
                    self.budget.force(p.charged().saturating_sub(before));
                    done.push(k);
                }
                Err(e) => {
                    for d in done {
                        let p = self.parts.get_mut(&d).expect("listed");
                        let before = p.charged();
                        p.drop_index(index);
                        self.budget.release(before.saturating_sub(p.charged()));
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    // ---------------------------------------------------------------- prepare

    fn exec_batch(&mut self, now_ms: u64, mut batch: Box<PrepareBatch>, from: usize, out: &mut Out) {
        let txn = batch.txn;
        if from == 0 && batch.ops.len() >= PREFETCH_BATCH_MIN {
            self.prefetch_batch(&batch);
        }
        for i in from..batch.ops.len() {
            let lock = match &batch.ops[i] {
                PrepOp::Exec { partition, op, .. } => match op.kind {
                    OpKind::Read => None,
                    OpKind::UpdateDirty if batch.chain.len() == 1 && !self.uniques.contains_key(&op.table) => None,
                    OpKind::ReadShared => Some(((op.table, *partition, op.key.clone()), LockMode::Shared)),
                    _ => Some(((op.table, *partition, op.key.clone()), LockMode::Exclusive)),
                },
                PrepOp::Replica { table, partition, key, .. } => {
                    Some(((*table, *partition, key.clone()), LockMode::Exclusive))
                }
            };
            let mode = lock.as_ref().map(|l| l.1);
            if batch.nowait
                && let (Some((lock_key, mode)), PrepOp::Exec { idx, .. }) = (&lock, &batch.ops[i])
                && self.parts.contains_key(&(lock_key.0, lock_key.1))
                && !self.try_acquire(txn, lock_key, *mode)
            {
                let e = TernError::new(ErrorCode::Deadlock, "row lock is busy (no-wait transaction)");
                batch.results.push((*idx, OpResult::Error(e)));
                batch.holds_state |= self.txns.contains_key(&txn);
                continue;
            }
            if let Some((lock_key, mode)) = lock
                && self.parts.contains_key(&(lock_key.0, lock_key.1))
                && !self.acquire(txn, &lock_key, mode)
            {
                if self.waits_for_itself(txn, &lock_key) {
                    // A cycle of waits within this ldm: fail now instead of at the timeout
                    // (cycles through other ldms still end at the lock-wait timeout, as in NDB).
                    if let Some(e) = self.locks.get_mut(&lock_key) {
                        e.waiters.retain(|(t, _)| *t != txn);
                        if e.is_free() {
                            self.locks.remove(&lock_key);
                        }
                    }
                    self.fail_rest(
                        &mut batch,
                        i,
                        ErrorCode::Deadlock,
                        "Deadlock found when trying to get lock; try restarting transaction",
                    );
                    self.finish_batch(batch, out);
                    return;
                }
                let deadline_ms = now_ms + self.cfg.lock_wait_timeout_ms;
                self.blocked.insert(txn, Blocked { batch, next_op: i, lock: lock_key, deadline_ms });
                return;
            }
            if mode.is_some() {
                batch.holds_state = true;
            }
            match &batch.ops[i] {
                PrepOp::Exec { idx, partition, op } => {
                    let idx = *idx;
                    let mut triggers = Vec::new();
                    if op.kind == OpKind::UpdateDirty {
                        // No lock, but a pending change this chain must commit or drop.
                        batch.holds_state = true;
                    }
                    let r = self.exec_op(txn, *partition, op, &mut triggers);
                    batch.results.push((idx, r));
                    batch.triggers.extend(triggers.into_iter().map(|t| (idx, t)));
                }
                PrepOp::Replica { table, partition, key, row } => {
                    let lk = (*table, *partition, key.clone());
                    let row = row.clone();
                    if let Err(e) = self.stage(txn, lk, row) {
                        batch.results.push((u32::MAX, OpResult::Error(e)));
                    }
                }
            }
        }
        self.finish_batch(batch, out);
    }

    fn finish_batch(&mut self, mut batch: Box<PrepareBatch>, out: &mut Out) {
        let next = batch.pos as usize + 1;
        if next < batch.chain.len() {
            // Forward after-images of this replica's successful writes to the next replica.
            let mut replica_ops = Vec::new();
            if batch.pos == 0 {
                let ok: HashMap<u32, bool> = batch
                    .results
                    .iter()
                    .map(|(i, r)| (*i, !matches!(r, OpResult::Error(_) | OpResult::NotFound)))
                    .collect();
                for op in &batch.ops {
                    if let PrepOp::Exec { idx, partition, op } = op
                        && op.kind.is_write()
                        && ok.get(idx).copied().unwrap_or(false)
                    {
                        let lk = (op.table, *partition, op.key.clone());
                        let row =
                            self.txns.get(&batch.txn).and_then(|t| t.changes.get(&lk)).and_then(|c| c.row.clone());
                        replica_ops.push(PrepOp::Replica {
                            table: op.table,
                            partition: *partition,
                            key: op.key.clone(),
                            row,
                        });
                    }
                }
            } else {
                replica_ops = std::mem::take(&mut batch.ops);
            }
            batch.ops = replica_ops;
            batch.pos += 1;
            let to = batch.chain[next];
            out.send(to, Signal::Prepare(batch));
        } else {
            out.send(batch.txn.tc, Signal::Prepared(batch));
        }
    }

    /// Overlaps the cache misses of a batch's key lookups: first start loading every op's index
    /// slots, then (slots now at hand) every op's row, before executing any op.
    fn prefetch_batch(&self, batch: &PrepareBatch) {
        for pass in 0..2 {
            for op in &batch.ops {
                if let PrepOp::Exec { partition, op, .. } = op
                    && let Some(p) = self.parts.get(&(op.table, *partition))
                {
                    if pass == 0 {
                        p.prefetch_slot(&op.key);
                    } else {
                        p.prefetch_row(&op.key);
                    }
                }
            }
        }
    }

    /// Takes a lock, or queues the request; true when granted now.
    /// Takes the lock if it is free now; never queues.
    fn try_acquire(&mut self, txn: TxnRef, key: &LockKey, mode: LockMode) -> bool {
        let free = match self.locks.get(key) {
            None => true,
            Some(e) => {
                e.exclusive == Some(txn)
                    || (mode == LockMode::Shared && e.shared.contains(&txn))
                    || (e.compatible(txn, mode) && e.waiters.is_empty())
            }
        };
        free && self.acquire(txn, key, mode)
    }

    fn acquire(&mut self, txn: TxnRef, key: &LockKey, mode: LockMode) -> bool {
        let entry = self.locks.entry(key.clone()).or_default();
        let owned = entry.exclusive == Some(txn) || (mode == LockMode::Shared && entry.shared.contains(&txn));
        if owned {
            return true;
        }
        if entry.compatible(txn, mode) && entry.waiters.is_empty() {
            entry.grant(txn, mode);
            let t = self.txns.entry(txn).or_default();
            t.locks.push(key.clone());
            return true;
        }
        entry.waiters.push_back((txn, mode));
        false
    }

    fn layout(&self, table: TableId) -> Option<&Arc<RowLayout>> {
        self.layouts.get(&table)
    }

    /// The row as this transaction sees it: its own pending change, else the committed row.
    /// A row whose TTL has passed is absent.
    fn current_row(&self, txn: TxnRef, lk: &LockKey) -> Option<Vec<u8>> {
        self.current_row_raw(txn, lk).filter(|r| !self.expired(lk.0, r))
    }

    /// `current_row` including rows whose TTL has passed.
    fn current_row_raw(&self, txn: TxnRef, lk: &LockKey) -> Option<Vec<u8>> {
        if let Some(c) = self.txns.get(&txn).and_then(|t| t.changes.get(lk)) {
            return c.row.clone();
        }
        let p = self.parts.get(&(lk.0, lk.1))?;
        p.lookup(&lk.2).map(|id| p.row(id).to_vec())
    }

    /// Whether `row` of `table` has passed its TTL (interfaces.md §5: now > column + seconds).
    fn expired(&self, table: TableId, row: &[u8]) -> bool {
        match (self.ttls.get(&table), self.layouts.get(&table)) {
            (Some(&ttl), Some(layout)) => row_expired(layout, ttl, row, self.now_us),
            _ => false,
        }
    }

    /// Executes one operation at the primary. Writes to a table with unique indexes add the
    /// index-table operations that keep them (NDB's unique-index triggers) to `triggers`.
    fn exec_op(&mut self, txn: TxnRef, partition: u32, op: &KeyOp, triggers: &mut Vec<KeyOp>) -> OpResult {
        let Some(layout) = self.layout(op.table).cloned() else {
            return err_op(ErrorCode::SchemaChanged, "table is not known at this data node (schema changed)");
        };
        if !self.parts.contains_key(&(op.table, partition)) {
            return err_op(
                ErrorCode::SchemaChanged,
                format!("partition {partition} of table {} is not here", op.table),
            );
        }
        if op.kind == OpKind::Read {
            // Read committed: this transaction's own pending write, else the committed row.
            let own = self.txns.get(&txn).filter(|t| !t.changes.is_empty());
            if let Some(t) = own
                && let Some(c) = t.changes.get(&(op.table, partition, op.key.clone()))
            {
                return match &c.row {
                    Some(r) if !self.expired(op.table, r) => project(&layout, r, op.projection.as_deref()),
                    _ => OpResult::NotFound,
                };
            }
            let p = &self.parts[&(op.table, partition)];
            return match p.lookup(&op.key) {
                Some(id) if !self.expired(op.table, p.row(id)) => project(&layout, p.row(id), op.projection.as_deref()),
                _ => OpResult::NotFound,
            };
        }
        let lk: LockKey = (op.table, partition, op.key.clone());
        match op.kind {
            OpKind::Read | OpKind::ReadShared | OpKind::ReadExclusive => match self.current_row(txn, &lk) {
                Some(r) => project(&layout, &r, op.projection.as_deref()),
                None => OpResult::NotFound,
            },
            OpKind::Insert | OpKind::Write => {
                if let Err(e) = layout.check_row(&op.row) {
                    return OpResult::Error(e);
                }
                if layout.key_of(&op.row) != &op.key[..] {
                    return err_op(ErrorCode::InvalidRequest, "row key differs from the operation key");
                }
                let old = self.current_row(txn, &lk);
                if op.kind == OpKind::Insert && old.is_some() {
                    return err_op(ErrorCode::DuplicateKey, "Duplicate entry for key 'PRIMARY'");
                }
                let result = previous(&layout, old.as_deref(), op.projection.as_deref());
                self.stage_with_triggers(txn, lk, old, Some(op.row.clone()), triggers, result)
            }
            OpKind::UpdateDirty if !self.txns.get(&txn).is_some_and(|t| t.locks.contains(&lk)) => {
                self.exec_dirty_update(txn, &layout, lk, op)
            }
            OpKind::Update | OpKind::UpdateDirty => {
                let (cur, base) = match self.current_row(txn, &lk) {
                    Some(cur) => (Some(cur.clone()), cur),
                    None if op.row.is_empty() => return OpResult::NotFound,
                    None => {
                        // Upsert: start from the row the operation carries.
                        if let Err(e) = layout.check_row(&op.row) {
                            return OpResult::Error(e);
                        }
                        if layout.key_of(&op.row) != &op.key[..] {
                            return err_op(ErrorCode::InvalidRequest, "row key differs from the operation key");
                        }
                        (None, op.row.clone())
                    }
                };
                let row = match apply_updates(&layout, &base, &op.updates) {
                    Ok(r) => r,
                    Err(e) => return OpResult::Error(e),
                };
                let result = match &op.projection {
                    Some(cols) => project(&layout, &row, Some(cols)),
                    None => OpResult::Done,
                };
                self.stage_with_triggers(txn, lk, cur, Some(row), triggers, result)
            }
            OpKind::Delete => {
                let Some(cur) = self.current_row(txn, &lk) else {
                    return OpResult::NotFound;
                };
                let result = previous(&layout, Some(&cur), op.projection.as_deref());
                self.stage_with_triggers(txn, lk, Some(cur), None, triggers, result)
            }
            OpKind::DeleteExpired => match self.current_row_raw(txn, &lk) {
                Some(cur) if self.expired(op.table, &cur) => {
                    self.stage_with_triggers(txn, lk, Some(cur), None, triggers, OpResult::Done)
                }
                _ => OpResult::NotFound,
            },
        }
    }

    /// A dirty update: computes the row from what this transaction sees now (for the reply and the
    /// memory reservation) and records the updates to apply again at commit, without a lock.
    fn exec_dirty_update(&mut self, txn: TxnRef, layout: &Arc<RowLayout>, lk: LockKey, op: &KeyOp) -> OpResult {
        if self.uniques.contains_key(&op.table) {
            return err_op(ErrorCode::Internal, "dirty update on a table with unique indexes");
        }
        let base = match self.current_row(txn, &lk) {
            Some(cur) => cur,
            None if op.row.is_empty() => return OpResult::NotFound,
            None => {
                if let Err(e) = layout.check_row(&op.row) {
                    return OpResult::Error(e);
                }
                if layout.key_of(&op.row) != &op.key[..] {
                    return err_op(ErrorCode::InvalidRequest, "row key differs from the operation key");
                }
                op.row.clone()
            }
        };
        let row = match apply_updates(layout, &base, &op.updates) {
            Ok(r) => r,
            Err(e) => return OpResult::Error(e),
        };
        let result = match &op.projection {
            Some(cols) => project(layout, &row, Some(cols)),
            None => OpResult::Done,
        };
        let mut updates = self
            .txns
            .get(&txn)
            .and_then(|t| t.changes.get(&lk))
            .and_then(|c| c.deferred.as_ref())
            .map(|d| d.1.clone())
            .unwrap_or_default();
        updates.extend(op.updates.iter().cloned());
        match self.stage(txn, lk.clone(), Some(row)) {
            Ok(()) => {
                if let Some(c) = self.txns.get_mut(&txn).and_then(|t| t.changes.get_mut(&lk)) {
                    c.deferred = Some((op.row.clone(), updates));
                }
                result
            }
            Err(e) => OpResult::Error(e),
        }
    }

    fn stage_with_triggers(
        &mut self,
        txn: TxnRef,
        lk: LockKey,
        old: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
        triggers: &mut Vec<KeyOp>,
        ok: OpResult,
    ) -> OpResult {
        if let Err(e) = self.unique_triggers(lk.0, old.as_deref(), new.as_deref(), triggers) {
            return OpResult::Error(e);
        }
        match self.stage(txn, lk, new) {
            Ok(()) => ok,
            Err(e) => {
                triggers.clear();
                OpResult::Error(e)
            }
        }
    }

    /// Index-table operations for a row changing from `old` to `new`: delete the old unique
    /// value's entry and insert the new one (nothing when the value is unchanged; NULLs are not
    /// indexed, as in MySQL).
    fn unique_triggers(
        &self,
        table: TableId,
        old: Option<&[u8]>,
        new: Option<&[u8]>,
        out: &mut Vec<KeyOp>,
    ) -> TernResult<()> {
        let Some(uniques) = self.uniques.get(&table) else { return Ok(()) };
        let base = &self.layouts[&table];
        for u in uniques {
            let entry = |row: &[u8]| -> TernResult<Option<(Vec<u8>, Vec<u8>)>> {
                let mut values = Vec::with_capacity(u.columns.len() + base.key_cols.len());
                for &c in &u.columns {
                    let v = base.get(row, c as usize)?;
                    if v.is_null() {
                        return Ok(None);
                    }
                    values.push(v);
                }
                for &k in &base.key_cols {
                    values.push(base.get(row, k as usize)?);
                }
                let mut irow = Vec::new();
                u.layout.encode_row(&values, &mut irow)?;
                Ok(Some((u.layout.key_of(&irow).to_vec(), irow)))
            };
            let o = old.map(entry).transpose()?.flatten();
            let n = new.map(entry).transpose()?.flatten();
            if o.as_ref().map(|x| &x.0) == n.as_ref().map(|x| &x.0) {
                continue;
            }
            if let Some((key, _)) = o {
                out.push(KeyOp {
                    table: u.table,
                    kind: OpKind::Delete,
                    key,
                    row: Vec::new(),
                    updates: Vec::new(),
                    projection: None,
                });
            }
            if let Some((key, row)) = n {
                out.push(KeyOp {
                    table: u.table,
                    kind: OpKind::Insert,
                    key,
                    row,
                    updates: Vec::new(),
                    projection: None,
                });
            }
        }
        Ok(())
    }

    /// Records a pending after-image, reserving its data memory (uniqueness is the index
    /// tables' business, checked through the trigger operations).
    fn stage(&mut self, txn: TxnRef, lk: LockKey, row: Option<Vec<u8>>) -> TernResult<()> {
        let part = self
            .parts
            .get(&(lk.0, lk.1))
            .ok_or_else(|| TernError::new(ErrorCode::SchemaChanged, "partition is not here (schema changed)"))?;
        let mut reserved = 0;
        if let Some(r) = &row {
            reserved = part.charge(r);
            self.budget.reserve(reserved)?;
        }
        let t = self.txns.entry(txn).or_default();
        if let Some(prev) = t.changes.insert(lk, Change { row, reserved, deferred: None }) {
            self.budget.release(prev.reserved);
        }
        Ok(())
    }

    // ---------------------------------------------------------------- commit / abort

    fn commit(&mut self, txn: TxnRef, epoch: u64, chain: Vec<Addr>, pos: u8, out: &mut Out) {
        let mut changes = match self.txns.get_mut(&txn) {
            Some(t) => std::mem::take(&mut t.changes),
            None => BTreeMap::new(),
        };
        self.apply_deferred(&mut changes);
        if !changes.is_empty() {
            let mut ops: Vec<RedoOpRef<'_>> = Vec::with_capacity(changes.len());
            for (lk, ch) in &changes {
                let Some(part) = self.parts.get_mut(&(lk.0, lk.1)) else {
                    self.budget.release(ch.reserved);
                    continue; // table dropped meanwhile
                };
                let before = part.charged();
                let rows_before = part.len() as i64;
                match &ch.row {
                    Some(r) => {
                        part.upsert(r).expect("a staged row was checked at prepare");
                        ops.push(RedoOpRef::Put { table: lk.0, partition: lk.1, row: r });
                    }
                    None => {
                        if let Some(id) = part.lookup(&lk.2) {
                            part.delete(id).expect("live row");
                        }
                        ops.push(RedoOpRef::Delete { table: lk.0, partition: lk.1, key: &lk.2 });
                    }
                }
                let after = part.charged();
                self.stats.rows.fetch_add(part.len() as i64 - rows_before, std::sync::atomic::Ordering::Relaxed);
                if after >= before {
                    self.budget.force(after - before);
                } else {
                    self.budget.release(before - after);
                }
                self.budget.release(ch.reserved);
            }
            let before = self.redo_buf.len();
            let tc_instance = match txn.tc.block {
                Block::Tc(i) => i,
                _ => 0,
            };
            redo::append_commit(&mut self.redo_buf, epoch, txn.tc.node, tc_instance, txn.id, &ops);
            self.lsn += (self.redo_buf.len() - before) as u64;
            self.max_epoch_applied = self.max_epoch_applied.max(epoch);
            if self.redo_buf.len() >= self.cfg.redo_buffer_bytes {
                self.write_redo_buffer(out);
            }
        }
        if pos == 0 {
            self.release_txn(0, txn, out);
            out.send(txn.tc, Signal::Committed { txn, chain });
        } else {
            out.send(chain[pos as usize - 1], Signal::Commit { txn, epoch, chain: chain.clone(), pos: pos - 1 });
        }
    }

    /// Dirty updates take effect on the row as committed now (or their upsert row when there is
    /// none, or it has expired); one that no longer applies (a guard fails, an overflow) is
    /// dropped.
    fn apply_deferred(&mut self, changes: &mut BTreeMap<LockKey, Change>) {
        let keys: Vec<LockKey> = changes.iter().filter(|(_, c)| c.deferred.is_some()).map(|(k, _)| k.clone()).collect();
        for lk in keys {
            let ch = changes.get_mut(&lk).expect("listed");
            let (upsert, updates) = ch.deferred.take().expect("deferred");
            let Some(layout) = self.layouts.get(&lk.0).cloned() else { continue };
            let current = self
                .parts
                .get(&(lk.0, lk.1))
                .and_then(|p| p.lookup(&lk.2).map(|id| p.row(id).to_vec()))
                .filter(|r| !self.expired(lk.0, r));
            let row = match current {
                Some(cur) => apply_updates(&layout, &cur, &updates).ok(),
                None if !upsert.is_empty() => apply_updates(&layout, &upsert, &updates).ok(),
                None => None,
            };
            match row {
                Some(r) => ch.row = Some(r),
                None => {
                    let reserved = ch.reserved;
                    changes.remove(&lk);
                    self.budget.release(reserved);
                }
            }
        }
    }

    fn abort(&mut self, now_ms: u64, txn: TxnRef, out: &mut Out) {
        if let Some(b) = self.blocked.remove(&txn)
            && let Some(e) = self.locks.get_mut(&b.lock)
        {
            e.waiters.retain(|(t, _)| *t != txn);
            if e.is_free() {
                self.locks.remove(&b.lock);
            }
        }
        if let Some(t) = self.txns.get_mut(&txn) {
            for (_, ch) in std::mem::take(&mut t.changes) {
                self.budget.release(ch.reserved);
            }
        }
        self.release_txn(now_ms, txn, out);
    }

    /// Releases every lock of `txn` and resumes batches that were waiting for them.
    fn release_txn(&mut self, now_ms: u64, txn: TxnRef, out: &mut Out) {
        let Some(t) = self.txns.remove(&txn) else {
            return;
        };
        for ch in t.changes.values() {
            self.budget.release(ch.reserved);
        }
        let mut resume = Vec::new();
        for key in t.locks {
            let Some(entry) = self.locks.get_mut(&key) else {
                continue;
            };
            if entry.exclusive == Some(txn) {
                entry.exclusive = None;
            }
            entry.shared.retain(|&x| x != txn);
            while let Some(&(w, mode)) = entry.waiters.front() {
                if !entry.compatible(w, mode) {
                    break;
                }
                entry.waiters.pop_front();
                entry.grant(w, mode);
                resume.push((w, key.clone()));
            }
            if entry.is_free() {
                self.locks.remove(&key);
            }
        }
        for (w, key) in resume {
            self.txns.entry(w).or_default().locks.push(key);
            if let Some(b) = self.blocked.remove(&w) {
                let mut batch = b.batch;
                batch.holds_state = true;
                // The op that waited now holds its lock; execute it and the rest of the batch.
                self.exec_batch(now_ms, batch, b.next_op, out);
            }
        }
    }

    /// Whether `txn`, now queued on `lock`, waits (through holders blocked at this ldm) for a lock
    /// it holds itself. Only waits known here count, so a cycle found is a real deadlock.
    fn waits_for_itself(&self, txn: TxnRef, lock: &LockKey) -> bool {
        // (lock, reached through another transaction's wait)
        let mut todo: Vec<(&LockKey, bool)> = vec![(lock, false)];
        let mut seen: Vec<TxnRef> = Vec::new();
        while let Some((l, through)) = todo.pop() {
            let Some(e) = self.locks.get(l) else { continue };
            for h in e.exclusive.iter().chain(e.shared.iter()) {
                if *h == txn {
                    // Holding the lock it waits for (a shared lock it upgrades) is no cycle;
                    // holding one another waiter needs is.
                    if through {
                        return true;
                    }
                    continue;
                }
                if seen.contains(h) || seen.len() >= 64 {
                    continue;
                }
                seen.push(*h);
                if let Some(b) = self.blocked.get(h) {
                    todo.push((&b.lock, true));
                }
            }
        }
        false
    }

    /// Fails operation `from` of a batch with `code` and the ones after it as not executed.
    fn fail_rest(&self, batch: &mut PrepareBatch, from: usize, code: ErrorCode, msg: &str) {
        for (i, op) in batch.ops.iter().enumerate().skip(from) {
            if let PrepOp::Exec { idx, .. } = op {
                let r = if i == from {
                    err_op(code, msg)
                } else {
                    err_op(ErrorCode::TransactionAborted, "operation not executed: an earlier operation failed")
                };
                batch.results.push((*idx, r));
            }
        }
        batch.ops.truncate(from);
    }

    fn expire_waits(&mut self, now_ms: u64, out: &mut Out) {
        let mut expired: Vec<TxnRef> =
            self.blocked.iter().filter(|(_, b)| b.deadline_ms <= now_ms).map(|(t, _)| *t).collect();
        expired.sort();
        for txn in expired {
            let b = self.blocked.remove(&txn).expect("listed");
            if let Some(e) = self.locks.get_mut(&b.lock) {
                e.waiters.retain(|(t, _)| *t != txn);
                if e.is_free() {
                    self.locks.remove(&b.lock);
                }
            }
            let mut batch = b.batch;
            for (i, op) in batch.ops.iter().enumerate().skip(b.next_op) {
                if let PrepOp::Exec { idx, .. } = op {
                    let r = if i == b.next_op {
                        err_op(ErrorCode::LockWaitTimeout, "Lock wait timeout exceeded; try restarting transaction")
                    } else {
                        err_op(ErrorCode::TransactionAborted, "operation not executed: an earlier operation failed")
                    };
                    batch.results.push((*idx, r));
                }
            }
            batch.ops.truncate(b.next_op);
            self.finish_batch(batch, out);
        }
    }

    // ---------------------------------------------------------------- scans

    fn scan(&mut self, req: ScanFrag, out: &mut Out) {
        let mut rows = Vec::new();
        let mut keys = Vec::new();
        let reply = |rows, keys, next, error| {
            Box::new(ScanFragRows { scan: req.scan, partition: req.partition, rows, keys, next, error })
        };
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
        let mut partial = tern_types::agg::Partial::default();
        let mut folded = 0usize;
        let agg_max = max.saturating_mul(16);
        let mut emit = |row: &[u8], key: Option<&[u8]>, rows: &mut Vec<Vec<u8>>, keys: &mut Vec<Vec<u8>>| -> bool {
            let expired = ttl.is_some_and(|t| row_expired(layout, t, row, now_us));
            if expired != req.expired || !req.filter.passes(layout, row) {
                return true;
            }
            if let Some(a) = &agg {
                partial.add(a, layout, row);
                folded += 1;
                return folded < agg_max && partial.len() < tern_types::agg::GROUPS_MAX;
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
            rows.len() < max
        };
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
                    let lo = req.lo.as_ref().map(|b| IndexBound { key: b.key.clone(), inclusive: b.inclusive });
                    let hi = req.hi.as_ref().map(|b| IndexBound { key: b.key.clone(), inclusive: b.inclusive });
                    let after = match &req.resume {
                        ScanPos::After(k) => Some(&k[..]),
                        _ => None,
                    };
                    let with_keys = req.with_keys;
                    match part.index_scan(pos, lo.as_ref(), hi.as_ref(), after, req.descending, |k, _, row| {
                        emit(row, with_keys.then_some(k), &mut rows, &mut keys)
                    }) {
                        Some(k) => ScanPos::After(k),
                        None => ScanPos::Done,
                    }
                }
            },
        };
        let next = if error.is_some() { ScanPos::Done } else { next };
        if agg.is_some() {
            rows = partial.finish();
            keys.clear();
        }
        out.send(req.reply_to, Signal::ScanFragRows(reply(rows, keys, next, error)));
    }

    // ---------------------------------------------------------------- durability

    fn write_redo_buffer(&mut self, out: &mut Out) {
        if !self.redo_buf.is_empty() {
            let bytes = std::mem::take(&mut self.redo_buf);
            out.io(self.addr, IoReq::RedoAppend { ldm: self.instance(), bytes });
            self.appended_since_sync = true;
        }
    }

    fn flush(&mut self, epoch: u64, out: &mut Out) {
        self.write_redo_buffer(out);
        let max_epoch = self.max_epoch_applied;
        if !self.appended_since_sync {
            out.send(
                self.dist,
                Signal::EpochFlushed { from: self.addr, epoch, synced_lsn: self.synced_lsn, max_epoch },
            );
            return;
        }
        let token = self.token();
        out.io(self.addr, IoReq::RedoSync { ldm: self.instance(), token });
        self.appended_since_sync = false;
        self.pending_flush = Some((token, epoch, self.lsn, max_epoch));
    }

    fn io_done(&mut self, token: u64, result: Result<(), String>, out: &mut Out) {
        if let Err(e) = result {
            panic!("ldm {}: disk request failed: {e}", self.instance());
        }
        if let Some((t, epoch, lsn, max_epoch)) = self.pending_flush
            && t == token
        {
            self.pending_flush = None;
            self.synced_lsn = lsn;
            out.send(self.dist, Signal::EpochFlushed { from: self.addr, epoch, synced_lsn: lsn, max_epoch });
            if self.phase == Phase::Ready && self.lsn - self.checkpoint_start_lsn >= self.cfg.checkpoint_redo_bytes {
                self.start_checkpoint(out);
            }
            return;
        }
        let Some(run) = self.checkpoint_run.as_mut() else { return };
        if let Some(i) = run.chunk_tokens.iter().position(|&t| t == token) {
            run.chunk_tokens.swap_remove(i);
            if !run.step_queued && run.finish.is_none() {
                self.checkpoint_step(out);
            }
            return;
        }
        if run.finish.as_ref().is_some_and(|(t, _)| *t == token) {
            let (_, ck) = self.checkpoint_run.take().expect("running").finish.expect("finishing");
            self.checkpoints_written.push(ck);
            if self.phase == Phase::StartCheckpoint {
                // The start-up checkpoint holds only durable data: usable at once. Old files are
                // removed only when the dist block says every ldm has written its own.
                self.phase = Phase::Ready;
                out.send(self.dist, Signal::LdmReady { from: self.addr, synced_lsn: self.synced_lsn });
            } else {
                self.on_durable(self.durable_epoch, out);
            }
        }
    }

    /// Starts a fuzzy checkpoint of every partition: it records the redo position now, then
    /// streams the partitions out a chunk per loop turn while transactions go on.
    fn start_checkpoint(&mut self, out: &mut Out) {
        if self.checkpoint_run.is_some() {
            return;
        }
        self.write_redo_buffer(out);
        let id = self.next_checkpoint_id;
        self.next_checkpoint_id += 1;
        self.checkpoint_start_lsn = self.lsn;
        // A file of that name can only be debris; start from nothing.
        out.io(self.addr, IoReq::DeleteFile { name: checkpoint::part_name(self.instance(), id) });
        self.checkpoint_run = Some(CheckpointRun {
            id,
            start_lsn: self.lsn,
            parts: self.parts.keys().copied().collect(),
            part_idx: 0,
            next_row: None,
            stream: Some(CheckpointStream::new(self.instance(), id, self.lsn)),
            chunk_tokens: Vec::new(),
            finish: None,
            step_queued: false,
        });
        self.checkpoint_step(out);
    }

    /// Produces the next chunk of the running checkpoint (or its end).
    fn checkpoint_step(&mut self, out: &mut Out) {
        let Some(mut run) = self.checkpoint_run.take() else { return };
        run.step_queued = false;
        if run.finish.is_some() || run.chunk_tokens.len() >= CHECKPOINT_CHUNKS_IN_FLIGHT {
            self.checkpoint_run = Some(run);
            return;
        }
        let ldm = self.instance();
        let chunk_bytes = self.cfg.checkpoint_chunk_bytes.max(1);
        let stream = run.stream.as_mut().expect("stream until finished");
        while run.part_idx < run.parts.len() && stream.buffered() < chunk_bytes {
            let key = run.parts[run.part_idx];
            let Some(p) = self.parts.get(&key) else {
                run.part_idx += 1;
                run.next_row = None;
                continue;
            };
            let from = match run.next_row {
                Some(r) => r,
                None => {
                    stream.partition(key.0, key.1);
                    0
                }
            };
            let next = p.scan(from, |_, row| {
                stream.row(row);
                stream.buffered() < chunk_bytes
            });
            match next {
                Some(r) => run.next_row = Some(r),
                None => {
                    run.part_idx += 1;
                    run.next_row = None;
                }
            }
        }
        let part = checkpoint::part_name(ldm, run.id);
        if run.part_idx >= run.parts.len() {
            let last = run.stream.take().expect("stream").finish(self.max_epoch_applied);
            let token = self.token();
            out.io(self.addr, IoReq::FileAppend { name: part.clone(), bytes: last, token });
            run.chunk_tokens.push(token);
            let token = self.token();
            let name = checkpoint::file_name(ldm, run.id);
            out.io(self.addr, IoReq::FileFinish { from: part, to: name.clone(), token });
            let ck = WrittenCheckpoint { start_lsn: run.start_lsn, max_epoch: self.max_epoch_applied, name };
            run.finish = Some((token, ck));
        } else {
            let chunk = stream.take_chunk();
            let token = self.token();
            out.io(self.addr, IoReq::FileAppend { name: part, bytes: chunk, token });
            run.chunk_tokens.push(token);
            if run.chunk_tokens.len() < CHECKPOINT_CHUNKS_IN_FLIGHT {
                run.step_queued = true;
                out.send(self.addr, Signal::CheckpointStep);
            }
        }
        self.checkpoint_run = Some(run);
    }

    /// A newer epoch is durable: checkpoints whose data it covers become usable, which frees the
    /// redo before them and the older checkpoint files.
    fn on_durable(&mut self, epoch: u64, out: &mut Out) {
        self.durable_epoch = self.durable_epoch.max(epoch);
        if self.phase != Phase::Ready {
            return;
        }
        let usable: Vec<usize> = (0..self.checkpoints_written.len())
            .filter(|&i| self.checkpoints_written[i].max_epoch <= self.durable_epoch)
            .collect();
        let Some(&newest) = usable.last() else { return };
        if !self.cleanup_allowed {
            return;
        }
        let ck = self.checkpoints_written.remove(newest);
        let mut stale: Vec<String> = std::mem::take(&mut self.old_checkpoints);
        for i in usable.iter().rev().skip(1) {
            stale.push(self.checkpoints_written.remove(*i).name);
        }
        if let Some(prev) = self.current_checkpoint.take() {
            stale.push(prev.name);
        }
        for name in stale {
            out.io(self.addr, IoReq::DeleteFile { name });
        }
        out.io(self.addr, IoReq::RedoDiscard { ldm: self.instance(), lsn: ck.start_lsn });
        self.current_checkpoint = Some(ck);
    }
}

/// A read's result: the whole stored row, or the projected columns as a value list.
fn project(layout: &RowLayout, row: &[u8], projection: Option<&[u16]>) -> OpResult {
    match projection {
        None => OpResult::Row(row.to_vec()),
        Some(cols) => {
            let mut types = Vec::with_capacity(cols.len());
            let mut values = Vec::with_capacity(cols.len());
            for &c in cols {
                let Some(&ty) = layout.types.get(c as usize) else {
                    return err_op(ErrorCode::NoSuchColumn, format!("column {c} does not exist"));
                };
                types.push(ty);
                match layout.get(row, c as usize) {
                    Ok(v) => values.push(v),
                    Err(e) => return OpResult::Error(e),
                }
            }
            let mut buf = Vec::new();
            match encode_values(&types, &values, &mut buf) {
                Ok(()) => OpResult::Row(buf),
                Err(e) => OpResult::Error(e),
            }
        }
    }
}

/// Whether a row of a table with TTL `(column, seconds)` is expired at `now_us` (µs since the
/// Unix epoch). A NULL TTL column never expires.
fn row_expired(layout: &RowLayout, (col, seconds): (usize, u64), row: &[u8], now_us: i64) -> bool {
    match layout.get(row, col) {
        Ok(Value::DateTime(t) | Value::Timestamp(t)) => now_us > t.saturating_add(seconds as i64 * 1_000_000),
        _ => false,
    }
}

/// The result of a write that returns the previous row's columns when asked to.
fn previous(layout: &RowLayout, old: Option<&[u8]>, projection: Option<&[u16]>) -> OpResult {
    match (projection, old) {
        (None, _) => OpResult::Done,
        (Some(cols), Some(r)) => project(layout, r, Some(cols)),
        (Some(_), None) => OpResult::NotFound,
    }
}

/// Applies interpreted column updates to a stored row, returning the new row.
fn apply_updates(layout: &RowLayout, row: &[u8], updates: &[ColumnUpdate]) -> TernResult<Vec<u8>> {
    let mut values = layout.decode_row(row)?;
    for u in updates {
        let c = u.col as usize;
        let Some(&ty) = layout.types.get(c) else {
            return Err(TernError::new(ErrorCode::NoSuchColumn, format!("column {c} does not exist")));
        };
        if layout.key_cols.contains(&u.col) {
            return Err(TernError::new(ErrorCode::InvalidRequest, "an update cannot change the primary key"));
        }
        let v = match &u.expr {
            UpdateExpr::Set(v) => coerce(ty, v.clone())?,
            UpdateExpr::Add(d) => add_values(ty, &values[c], d)?,
            UpdateExpr::Expect(v) => {
                if values[c].cmp_sql(v) != Some(std::cmp::Ordering::Equal) {
                    return Err(TernError::new(ErrorCode::ConditionFailed, format!("column {c} has another value")));
                }
                continue;
            }
        };
        if v.is_null() && !layout.nullable[c] {
            return Err(TernError::new(ErrorCode::NotNull, "Column cannot be null"));
        }
        values[c] = v;
    }
    let mut out = Vec::with_capacity(row.len());
    layout.encode_row(&values, &mut out)?;
    Ok(out)
}

/// Parses a signed 64-bit decimal integer the way Redis does (`string2ll`): optional '-', no
/// '+', no spaces, no leading zeros, at most 20 characters.
pub fn parse_decimal_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let (neg, digits) = match b[0] {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || (digits[0] == b'0' && (digits.len() > 1 || neg)) {
        return None;
    }
    let mut v: i128 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (d - b'0') as i128;
        if v > i64::MAX as i128 + 1 {
            return None;
        }
    }
    i64::try_from(if neg { -v } else { v }).ok()
}

/// Numeric addition executed in the data node, checked against the column type.
fn add_values(ty: ColumnType, cur: &Value, delta: &Value) -> TernResult<Value> {
    if cur.is_null() || delta.is_null() {
        return Ok(Value::Null);
    }
    let overflow = || TernError::new(ErrorCode::ValueOutOfRange, "increment or decrement would overflow");
    match ty {
        t if t.is_integer() => {
            let a = cur.as_i128().ok_or_else(overflow)?;
            let b =
                delta.as_i128().ok_or_else(|| TernError::new(ErrorCode::InvalidValue, "value is not an integer"))?;
            let (lo, hi) = t.int_range().expect("integer");
            let s = a.checked_add(b).filter(|s| (lo..=hi).contains(s)).ok_or_else(overflow)?;
            Ok(if t.is_unsigned() { Value::UInt(s as u64) } else { Value::Int(s as i64) })
        }
        ColumnType::Float | ColumnType::Double => {
            let a = cur.as_f64().unwrap_or(0.0);
            let b = delta.as_f64().ok_or_else(|| TernError::new(ErrorCode::InvalidValue, "value is not a number"))?;
            coerce(ty, Value::Double(a + b))
        }
        ColumnType::Decimal { scale, .. } => {
            let Value::Decimal { v: a, .. } = cur else {
                return Err(overflow());
            };
            let b = match delta {
                Value::Decimal { v, scale: s } => rescale(*v, *s, scale),
                other => other.as_i128().and_then(|n| rescale(n, 0, scale)),
            }
            .ok_or_else(overflow)?;
            coerce(ty, Value::Decimal { v: a.checked_add(b).ok_or_else(overflow)?, scale })
        }
        ColumnType::VarBinary { .. } | ColumnType::VarChar { .. } | ColumnType::Blob | ColumnType::Text => {
            let delta = delta
                .as_i128()
                .and_then(|d| i64::try_from(d).ok())
                .ok_or_else(|| TernError::new(ErrorCode::InvalidValue, "value is not an integer or out of range"))?;
            let bytes = match cur {
                Value::Bytes(b) => &b[..],
                _ => &[],
            };
            let a = parse_decimal_i64(bytes)
                .ok_or_else(|| TernError::new(ErrorCode::InvalidValue, "value is not an integer or out of range"))?;
            let sum = a.checked_add(delta).ok_or_else(overflow)?;
            coerce(ty, Value::Bytes(sum.to_string().into_bytes()))
        }
        _ => Err(TernError::new(ErrorCode::InvalidValue, format!("cannot add to a {} column", ty.sql_name()))),
    }
}
