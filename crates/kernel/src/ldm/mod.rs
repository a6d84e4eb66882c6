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

mod commit;
mod copy;
mod durability;
mod keybuf;
mod locks;
mod log;
mod moves;
mod prepare;
mod rows;
mod scan;
#[cfg(test)]
mod tests;

use keybuf::KeyBuf;
use locks::LockEntry;
pub use rows::parse_decimal_i64;
use rows::*;

use crate::checkpoint::{self, CheckpointStream};
use crate::redo::{self, RedoOpRef};
use crate::signal::{
    Addr, Block, ControlReq, DeadlockProbe, IoReq, NodeId, Out, PrepOp, PrepareBatch, REPLICA_FAILED, ScanFrag,
    ScanFragRows, ScanPos, Signal, TakeoverState, TxnRef,
};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use tern_store::{IndexBound, MemoryBudget, Partition, RowId};
use tern_types::schema::{ColumnType, TableId};
use tern_types::value::{coerce, rescale};
use tern_types::{Catalog, ErrorCode, RowLayout, TernError, TernResult, Value};
use tern_wire::{ColumnUpdate, KeyOp, OpKind, OpResult, UpdateExpr};

#[derive(Debug, Clone)]
pub struct LdmConfig {
    pub lock_wait_timeout_ms: u64,
    /// A lock wait sends deadlock probes through other ldms and nodes when it begins and repeats
    /// them this often while it lasts (a probe can miss a cycle whose last wait was still in
    /// flight); cycles within this ldm are found when the wait begins.
    pub deadlock_probe_ms: u64,
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
            deadlock_probe_ms: 50,
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
/// A row lock's (and a pending change's) key: table, partition, encoded primary key.
type LockKey = (TableId, u32, KeyBuf);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LockMode {
    Shared,
    Exclusive,
}

#[derive(Debug)]
struct Change {
    /// None = delete.
    row: Option<Vec<u8>>,
    reserved: u64,
    /// Where prepare found the row (a hint for commit's `Partition::upsert_at`).
    at: Option<RowId>,
    /// A dirty update (`OpKind::UpdateDirty`): the row to start from when the key is absent at
    /// commit (empty: none) and the updates to apply at commit to the row committed then.
    deferred: Option<(Vec<u8>, Vec<ColumnUpdate>)>,
    /// A delete of a row past its TTL (`OpKind::DeleteExpired`): logged as an expiry.
    expired: bool,
}

#[derive(Debug, Default)]
struct LdmTxn {
    /// When this transaction first reached this ldm (the age `ndbinfo.cluster_locks` shows).
    since_ms: u64,
    changes: BTreeMap<LockKey, Change>,
    locks: Vec<LockKey>,
    /// A backup that has committed (in this epoch) and keeps its locks until `Complete`.
    committed_epoch: Option<u64>,
    /// Committed here by a one-round commit (this replica last in its chain): until `Complete`
    /// says the primary committed too, reads at this replica wait for its rows, and `results`
    /// are kept for a `Resolve` after the primary failed.
    fast: bool,
    results: Vec<(u32, OpResult)>,
}

impl LdmTxn {
    fn since(now_ms: u64) -> LdmTxn {
        LdmTxn { since_ms: now_ms, ..Default::default() }
    }
}

struct Blocked {
    batch: Box<PrepareBatch>,
    next_op: usize,
    lock: LockKey,
    /// When this wait began, and when it times out (`since_ms + lock_wait_timeout_ms`).
    since_ms: u64,
    deadline_ms: u64,
    /// When deadlock probes were last sent for this wait (first when it began).
    probed_ms: u64,
    /// A committed read waiting for a one-round commit's row: resumed without the lock.
    read_wait: bool,
}

/// How long an ldm remembers a fan-out abort: longer than a prepare can spend travelling a
/// chain (each replica may hold it for a lock wait).
const ABORTED_KEEP_MS: u64 = 60_000;

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
    id: u64,
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
    /// When this ldm last published its tables' memory to `stats` (0: never).
    bytes_published_ms: u64,
    cluster: Arc<tern_types::cluster::ClusterState>,
    /// Signals sent because of a cluster-map version this ldm has not seen yet (fan-out aborts,
    /// takeover requests), in arrival order.
    deferred: Vec<Signal>,
    /// Commit markers: transactions committed here as primary, until their `Complete` (what a
    /// takeover learns when the coordinator failed after this commit).
    markers: BTreeMap<TxnRef, u64>,
    /// Where the running epoch flush is answered (the epoch master's dist).
    flush_reply_to: Addr,
    /// Set once every ldm has written its start-up checkpoint: earlier runs' files may go.
    cleanup_allowed: bool,
    cfg: LdmConfig,
    budget: MemoryBudget,
    layouts: tern_types::hash::FastMap<TableId, Arc<RowLayout>>,
    /// Table definitions of the current catalog.
    tables: HashMap<TableId, tern_types::schema::Table>,
    /// Node restart: this ldm fetching its partitions, or sending partitions to a rejoining one.
    fetch: Option<copy::Fetch>,
    copies: BTreeMap<(TableId, u32, Addr), copy::CopySession>,
    /// Transactions aborted here by a coordinator's fan-out abort, with when (forgotten after
    /// `ABORTED_KEEP_MS`): their prepares that arrive later are dropped.
    aborted: BTreeMap<TxnRef, u64>,
    /// Partition moves this ldm takes part in (`moves.rs`).
    moves: moves::Moves,
    /// Per table, its unique indexes and their hidden index tables.
    uniques: tern_types::hash::FastMap<TableId, Vec<UniqueIndex>>,
    catalog_version: u64,
    parts: BTreeMap<PartKey, Partition>,
    txns: tern_types::hash::FastMap<TxnRef, LdmTxn>,
    locks: tern_types::hash::FastMap<LockKey, LockEntry>,
    /// Batches waiting for a lock, by (transaction, batch number): a transaction may have a batch
    /// here as primary of one partition and another as backup of a different one.
    blocked: BTreeMap<locks::Waiter, Blocked>,
    redo_buf: Vec<u8>,
    /// LSN one past the last byte produced (including the unflushed buffer).
    lsn: u64,
    synced_lsn: u64,
    appended_since_sync: bool,
    max_epoch_applied: u64,
    /// The newest epoch of any commit run here (with changes or not): a one-round commit whose
    /// coordinator took an older epoch would be ordered before a transaction it follows.
    newest_commit_epoch: u64,
    /// Transactions here with `LdmTxn::fast` set: while none, a committed read looks up no lock.
    fast_committed: usize,
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
    ttls: tern_types::hash::FastMap<TableId, (usize, u64)>,
    /// The driver's clock (ms), set once at the top of every `handle`: all deadlines read it.
    now_ms: u64,
    /// Wall-clock now in µs since the Unix epoch, refreshed on every signal.
    now_us: i64,
    /// Change logs (backups) by (the tc that registered it, its number there).
    logs: BTreeMap<(Addr, u64), log::LogSub>,
}

fn err_op(code: ErrorCode, msg: impl Into<String>) -> OpResult {
    OpResult::Error(TernError::new(code, msg))
}

impl Ldm {
    pub fn new(
        addr: Addr,
        cluster: Arc<tern_types::cluster::ClusterState>,
        cfg: LdmConfig,
        budget: MemoryBudget,
        stats: Arc<crate::tc::NodeStats>,
        catalog: &Catalog,
        start: LdmStart,
    ) -> Ldm {
        let mut ldm = Ldm {
            addr,
            stats,
            bytes_published_ms: 0,
            deferred: Vec::new(),
            markers: BTreeMap::new(),
            flush_reply_to: Addr::new(addr.node, Block::Dist),
            cluster,
            cleanup_allowed: false,
            cfg,
            budget,
            layouts: Default::default(),
            tables: HashMap::new(),
            fetch: None,
            copies: BTreeMap::new(),
            moves: Default::default(),
            aborted: BTreeMap::new(),
            uniques: Default::default(),
            catalog_version: 0,
            parts: BTreeMap::new(),
            txns: Default::default(),
            locks: Default::default(),
            blocked: BTreeMap::new(),
            redo_buf: Vec::new(),
            lsn: start.base_lsn,
            synced_lsn: start.base_lsn,
            appended_since_sync: false,
            max_epoch_applied: start.durable_epoch,
            newest_commit_epoch: start.durable_epoch,
            fast_committed: 0,
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
            ttls: Default::default(),
            now_ms: 0,
            now_us: 0,
            logs: BTreeMap::new(),
        };
        for p in start.partitions {
            ldm.stats.add_rows(p.table, p.len() as i64);
            ldm.parts.insert((p.table, p.partition), p);
        }
        ldm.apply_catalog(catalog);
        ldm
    }

    /// The node groups table `t` was created over (`Table::groups`).
    pub(super) fn groups_of(&self, t: TableId) -> u32 {
        self.tables.get(&t).map_or(0, |t| t.groups)
    }

    /// Whether this ldm holds partition `p` of table `t` by the cluster map (a replica of it, or
    /// a move's target).
    pub(super) fn owns(&self, t: TableId, p: u32) -> bool {
        self.cluster.ldm_on(self.addr.node, t, self.groups_of(t), p) == Some(self.instance())
    }

    /// The chain of a partition by this ldm's map.
    pub(super) fn chain_of(&self, t: TableId, p: u32) -> tern_types::cluster::Chain {
        self.cluster.chain(t, self.groups_of(t), p)
    }

    fn instance(&self) -> u16 {
        match self.addr.block {
            Block::Ldm(i) => i,
            _ => unreachable!("ldm address"),
        }
    }

    /// Publishes the data memory charged per table, the partition replicas held and the row
    /// locks to the node's statistics (at most once a second: a status report may be that old).
    fn publish_stats(&mut self) {
        if self.now_ms < self.bytes_published_ms + 1000 && self.bytes_published_ms != 0 {
            return;
        }
        self.bytes_published_ms = self.now_ms.max(1);
        let me = self.instance();
        let mut per: BTreeMap<TableId, u64> = BTreeMap::new();
        let mut frags = Vec::with_capacity(self.parts.len());
        for (&(t, p), part) in &self.parts {
            let bytes = part.charged();
            *per.entry(t).or_default() += bytes;
            frags.push(tern_wire::FragmentStat { table: t, partition: p, ldm: me, rows: part.len(), bytes });
        }
        {
            let mut all = self.stats.table_bytes.lock().unwrap_or_else(|e| e.into_inner());
            all.retain(|&(l, _), _| l != me);
            all.extend(per.into_iter().map(|(t, b)| ((me, t), b)));
        }
        self.stats.fragments.lock().unwrap_or_else(|e| e.into_inner()).insert(me, frags);
        let locks = self.lock_report();
        self.stats.locks.lock().unwrap_or_else(|e| e.into_inner()).insert(me, locks);
    }

    /// Rows and partitions held, for status reports.
    pub fn stats(&self) -> (u32, u64) {
        (self.parts.len() as u32, self.parts.values().map(|p| p.len()).sum())
    }

    /// Creates partitions this ldm owns for new tables and drops those of dropped tables.
    fn apply_catalog(&mut self, catalog: &Catalog) {
        self.tables = catalog.tables.iter().map(|(&id, t)| (id, t.clone())).collect();
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
        // An index this ldm has not built: a catalog the master adopted from the management
        // nodes (its change was committed, and the index built everywhere, but an earlier master
        // failed before writing it here, or a whole-cluster crash came between). Built now;
        // it held over the same rows when it was committed, so it cannot fail on uniqueness
        // unless the partition is corrupt, which the assertion reports.
        for ((t, _), p) in self.parts.iter_mut() {
            let Some(def) = catalog.table(*t) else { continue };
            let missing: Vec<_> = def.indexes.iter().filter(|i| p.index_position(i.id).is_none()).collect();
            for idx in missing {
                let before = p.charged();
                let built = p.add_index(idx);
                assert!(built.is_ok(), "ldm: building committed index {} of table {t}: {built:?}", idx.id);
                self.budget.force(p.charged().saturating_sub(before));
            }
        }
        let dropped: Vec<PartKey> =
            self.parts.keys().filter(|(t, _)| !catalog.tables.contains_key(t)).copied().collect();
        for k in dropped {
            let p = self.parts.remove(&k).expect("listed");
            self.budget.release(p.charged());
            self.stats.add_rows(k.0, -(p.len() as i64));
        }
        let owned: Vec<(TableId, u32)> = catalog
            .tables
            .values()
            .flat_map(|t| (0..t.partition_count).map(move |p| (t.id, p)))
            .filter(|&(t, p)| self.owns(t, p))
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
        debug_assert!(now_ms >= self.now_ms, "time never goes back");
        self.now_ms = now_ms;
        self.now_us = (self.cfg.wall_base_ms.saturating_add(now_ms) as i64).saturating_mul(1000);
        match sig {
            Signal::Start => {
                out.timer(self.cfg.tick_ms, self.addr, Signal::Tick);
                self.start_checkpoint(out);
                self.phase = Phase::StartCheckpoint;
            }
            Signal::Prepare(ref b) if b.pos == 0 && b.map_version > self.cluster.version => self.deferred.push(sig),
            Signal::Prepare(batch) => self.exec_batch(batch, 0, out),
            Signal::Commit { txn, epoch, chain, pos, results } => self.commit(txn, epoch, chain, pos, results, out),
            Signal::Complete { txn, chain, pos } => {
                if pos > 0 {
                    self.release_txn(txn, out);
                    out.send(chain[pos as usize - 1], Signal::Complete { txn, chain, pos: pos - 1 });
                } else {
                    self.markers.remove(&txn);
                    // A backup whose primary failed is the chain's head now: a Complete that
                    // starts here ends its committed state and releases its locks.
                    self.release_txn(txn, out);
                }
            }
            Signal::Abort { map_version, .. }
            | Signal::Resolve { map_version, .. }
            | Signal::TakeoverReq { map_version, .. }
            | Signal::CopyFragReq { map_version, .. }
                if map_version > self.cluster.version =>
            {
                self.deferred.push(sig);
            }
            Signal::Resolve { txn, .. } => self.resolve(txn, out),
            Signal::Abort { txn, chain, pos, map_version } => {
                if map_version > 0 {
                    // Straight from the coordinator after a failure: a prepare of this
                    // transaction still travelling down a chain of live replicas may come after
                    // it, and must then take nothing (nobody would ever release it).
                    self.aborted.insert(txn, self.now_ms);
                }
                if let Some(&next) = chain.get(pos as usize + 1) {
                    out.send(next, Signal::Abort { txn, chain: chain.clone(), pos: pos + 1, map_version: 0 });
                }
                self.abort(txn, out);
                if pos as usize + 1 == chain.len() {
                    out.send(self.coordinator(txn), Signal::Aborted { txn, chain });
                }
            }
            Signal::StartCopy if self.cluster.state_of(self.addr.node) != tern_types::cluster::NodeState::Copying => {
                // The dist saw this node join the chains before this ldm did: copying now would
                // tell the primaries an older map, and they would let writes bypass this replica.
                self.deferred.push(sig);
            }
            Signal::StartCopy => self.start_fetch(out),
            Signal::CopyFragReq { from, table, partition, .. } => self.copy_request(from, (table, partition), out),
            Signal::CopyRows { from, table, partition, rows, done, max_epoch } => {
                self.copy_rows(from, (table, partition), copy::CopiedRows { rows, done, max_epoch }, out)
            }
            Signal::CopyAck { from, table, partition } => self.copy_ack(from, (table, partition), out),
            Signal::TakeoverReq { from, failed, .. } => {
                let txns = self.takeover_report(&failed);
                out.send(from, Signal::TakeoverConf { from: self.addr, txns });
            }
            Signal::ScanFrag(req) => self.scan(*req, out),
            Signal::EpochFlush { from, epoch, mark } => {
                self.flush_reply_to = from;
                if !self.logs.is_empty() {
                    self.log_epoch(epoch);
                }
                self.flush(epoch, mark, out)
            }
            Signal::LogReq { from, sub, call, op, max_bytes, tables } => {
                self.log_request(from, sub, call, op, max_bytes, tables, out)
            }
            Signal::ClusterMap { state } => {
                if state.version > self.cluster.version {
                    if state.nodes != self.cluster.nodes {
                        self.log_map_changed();
                    }
                    let old = std::mem::replace(&mut self.cluster, state);
                    // Copies to a node that failed or restarted end; one from a failed source
                    // starts again from the new primary.
                    let failed = self.cluster.failed_since(&old);
                    self.copies.retain(|(_, _, to), _| !failed.contains(&to.node));
                    if !failed.is_empty() {
                        self.ask_completion(out);
                    }
                    self.refetch_if_source_failed(out);
                    self.placement_changed(out);
                    let version = self.cluster.version;
                    let (now, later): (Vec<Signal>, Vec<Signal>) =
                        std::mem::take(&mut self.deferred).into_iter().partition(|s| match s {
                            Signal::Abort { map_version, .. }
                            | Signal::Resolve { map_version, .. }
                            | Signal::TakeoverReq { map_version, .. }
                            | Signal::CopyFragReq { map_version, .. } => *map_version <= version,
                            Signal::Prepare(b) => b.pos > 0 || b.map_version <= version,
                            _ => true,
                        });
                    self.deferred = later;
                    for s in now {
                        self.handle(self.now_ms, s, out);
                    }
                }
            }
            Signal::EpochDurable { epoch } => self.on_durable(epoch, out),
            Signal::IoDone { token, result } => self.io_done(token, result, out),
            Signal::Schema { catalog, dict } => {
                self.apply_catalog(&catalog);
                self.placement_changed(out);
                out.send(dict, Signal::SchemaAck { from: self.addr, version: catalog.version });
            }
            Signal::IndexBuild { dict, table, index, catalog } => {
                let result = self.build_index(table, index, &catalog);
                out.send(dict, Signal::IndexBuilt { from: self.addr, index, result });
            }
            Signal::NodeStarted { .. } => {
                self.cleanup_allowed = true;
                self.on_durable(self.durable_epoch, out);
            }
            Signal::CheckpointStep => self.checkpoint_step(out),
            Signal::DeadlockProbe(p) => self.deadlock_probe(*p, out),
            Signal::DeadlockVictim { txn, batch } => {
                if self.blocked.contains_key(&(txn, batch)) {
                    crate::tc::NodeStats::count(&self.stats.deadlocks);
                }
                let msg = "Deadlock found when trying to get lock; try restarting transaction";
                self.fail_wait((txn, batch), ErrorCode::Deadlock, msg, out);
            }
            Signal::Tick => {
                self.publish_stats();
                self.log_tick();
                self.expire_waits(out);
                self.probe_waits(out);
                self.copy_step(out);
                self.leave_step(out);
                self.drop_retired();
                let now = self.now_ms;
                self.aborted.retain(|_, at| now < *at + ABORTED_KEEP_MS);
                // Lock waits and copies are what need the short tick (timeouts, deadlock probes,
                // copy windows); without either it runs at twice the interval (an idle node
                // wakes less). A wait that starts meanwhile is looked at by the next tick.
                let idle = self.blocked.is_empty() && self.copies.is_empty();
                let next = if idle { 2 * self.cfg.tick_ms } else { self.cfg.tick_ms };
                out.timer(next, self.addr, Signal::Tick);
            }
            other => crate::signal::drop_unexpected(self.addr, "ldm", &other),
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
}
