//! The `tc` block (NDB: DBTC): the transaction coordinator. It accepts client requests, routes
//! each key operation to the replica chain of its partition, runs the commit protocol, and drives
//! scans across partitions (merging them into index order when asked).
//!
//! Commit protocol (ndb-protocols.md §1, with the chain of replicas primary first):
//! 1. `Prepare` batches go to each chain's primary; the last replica answers `Prepared`.
//! 2. Once every batch of a committing transaction is prepared, the **commit point** is taking
//!    the current epoch. While the epoch coordinator switches epochs (between `EpochPrepare` and
//!    `EpochCommit`) commit points are queued, so epochs form a consistent cut.
//! 3. `Commit(epoch)` goes to each chain's *last* replica and travels towards the primary, which
//!    releases the locks and answers `Committed`. Then the client is told (or, for a durable
//!    commit, once the epoch is durable). Chains longer than one get a `Complete` that releases the
//!    backups' locks. With one replica the chain has length one and the same code runs.
//! 4. The tc reports an epoch finished to `dist` once no transaction of that epoch is still
//!    committing.

use crate::signal::{
    Addr, Block, ClientId, NodeId, Out, PrepOp, PrepareBatch, REPLICA_FAILED, ScanFrag, ScanFragRows, ScanPos, Signal,
    TakeoverState, TxnRef,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use tern_store::MemoryBudget;
use tern_types::Value;
use tern_types::cluster::{ClusterState, NodeState};
use tern_types::schema::TableId;
use tern_types::{Catalog, ErrorCode, RowLayout, TernError};
use tern_wire::{
    AbortOption, Exec, KeyOp, OpKind, OpResult, Outcome, Reply, Request, ScanReq, StatusInfo, TxnReq, TxnResp,
};

pub(crate) mod log;
mod purge;

#[derive(Debug, Clone)]
pub struct TcConfig {
    /// An open transaction idle for longer than this is aborted.
    pub inactive_timeout_ms: u64,
    pub tick_ms: u64,
    /// Open transactions per tc; more answer "overloaded".
    pub txns_max: usize,
    /// Open scans per tc.
    pub scans_max: usize,
    /// TTL expiry and the purge compare stored DATETIME/TIMESTAMP values against
    /// `wall_base_ms + now_ms` (as the ldm does).
    pub wall_base_ms: u64,
    /// How often a partition of a TTL table is purged (0: never); see `purge`.
    pub purge_interval_ms: u64,
    /// Expired rows deleted per purge transaction.
    pub purge_batch_rows: u32,
    /// Purge transactions per tick and tc, at most.
    pub purge_batches_per_tick: u32,
    /// Autocommit batches for one chain of two replicas commit in one round (see `route`).
    pub one_round_commit: bool,
}

impl Default for TcConfig {
    fn default() -> Self {
        TcConfig {
            inactive_timeout_ms: 30_000,
            tick_ms: 100,
            txns_max: 100_000,
            scans_max: 10_000,
            wall_base_ms: 0,
            purge_interval_ms: 1_000,
            purge_batch_rows: 256,
            purge_batches_per_tick: 8,
            one_round_commit: true,
        }
    }
}

/// Node-wide counters the tc reports in status answers.
#[derive(Debug, Default)]
pub struct NodeStats {
    pub rows: std::sync::atomic::AtomicI64,
    /// Set by the runtime; lets local tools read the process's CPU and memory.
    pub pid: std::sync::atomic::AtomicU32,
    /// Key reads sent to a backup replica instead of the primary (READ_BACKUP: on this node, or
    /// on another node of its location domain).
    pub backup_reads: std::sync::atomic::AtomicU64,
    /// Committed key reads this node's coordinators sent to a replica on this node, on another
    /// node of its location domain, and on a node elsewhere (another domain, or no domains).
    pub reads_here: std::sync::atomic::AtomicU64,
    pub reads_in_domain: std::sync::atomic::AtomicU64,
    pub reads_elsewhere: std::sync::atomic::AtomicU64,
    /// Rows the TTL purge deleted, per table (cascaded rows under their own table).
    pub ttl_purged: std::sync::Mutex<BTreeMap<TableId, u64>>,
    /// Rows per table in the partition replicas this node holds (`rows` is their sum).
    pub table_rows: std::sync::Mutex<BTreeMap<TableId, i64>>,
    /// Data memory charged per (ldm, table), as each ldm last published it.
    pub table_bytes: std::sync::Mutex<BTreeMap<(u16, TableId), u64>>,
    /// The partition replicas each ldm holds and the row locks it has (oldest first, at most
    /// `tern_wire::LOCKS_REPORTED`), as each ldm last published them (about once a second).
    pub fragments: std::sync::Mutex<BTreeMap<u16, Vec<tern_wire::FragmentStat>>>,
    pub locks: std::sync::Mutex<BTreeMap<u16, Vec<tern_wire::LockStat>>>,
    /// Each worker's links to the other data nodes, by (worker, peer), as the runtime's workers
    /// last published them; status answers sum them per peer.
    pub links: std::sync::Mutex<BTreeMap<(u16, NodeId), tern_wire::LinkStat>>,
    /// Batches that waited for a row lock.
    pub lock_waits: std::sync::atomic::AtomicU64,
    /// Lock waits that ended by the lock-wait timeout.
    pub lock_wait_timeouts: std::sync::atomic::AtomicU64,
    /// Deadlocks found (a cycle within an ldm, or a victim chosen by a probe).
    pub deadlocks: std::sync::atomic::AtomicU64,
    /// Transactions aborted for being inactive too long.
    pub inactive_timeouts: std::sync::atomic::AtomicU64,
    /// Transactions committed and aborted by this node's coordinators.
    pub commits: std::sync::atomic::AtomicU64,
    pub aborts: std::sync::atomic::AtomicU64,
    /// Transactions sent as one-round commits (some fall back to the ordinary rounds).
    pub fast_commits: std::sync::atomic::AtomicU64,
    /// Redo log bytes written and local checkpoints completed (set by the runtime's I/O).
    pub redo_bytes: std::sync::atomic::AtomicU64,
    pub checkpoints: std::sync::atomic::AtomicU64,
}

impl NodeStats {
    /// Counts `delta` rows more (or fewer) of `table` on this node.
    pub fn add_rows(&self, table: TableId, delta: i64) {
        if delta != 0 {
            self.rows.fetch_add(delta, std::sync::atomic::Ordering::Relaxed);
            *self.table_rows.lock().unwrap_or_else(|e| e.into_inner()).entry(table).or_default() += delta;
        }
    }

    /// The event counters by name (ascending), for status answers.
    pub fn counters(&self) -> Vec<(String, u64)> {
        let get = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        vec![
            ("aborts".into(), get(&self.aborts)),
            ("checkpoints".into(), get(&self.checkpoints)),
            ("commits".into(), get(&self.commits)),
            ("deadlocks".into(), get(&self.deadlocks)),
            ("fast_commits".into(), get(&self.fast_commits)),
            ("inactive_timeouts".into(), get(&self.inactive_timeouts)),
            ("lock_wait_timeouts".into(), get(&self.lock_wait_timeouts)),
            ("lock_waits".into(), get(&self.lock_waits)),
            ("reads_elsewhere".into(), get(&self.reads_elsewhere)),
            ("reads_here".into(), get(&self.reads_here)),
            ("reads_in_domain".into(), get(&self.reads_in_domain)),
            ("redo_bytes".into(), get(&self.redo_bytes)),
        ]
    }

    /// The links to each other data node, summed over the workers: connected when any worker's
    /// link is (and none broke), disconnected when one broke.
    pub fn summed_links(&self) -> Vec<tern_wire::LinkStat> {
        let all = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let mut per: BTreeMap<NodeId, tern_wire::LinkStat> = BTreeMap::new();
        for (&(_, peer), l) in all.iter() {
            let sum = per.entry(peer).or_insert_with(|| tern_wire::LinkStat {
                node: peer,
                addr: l.addr.clone(),
                status: l.status.clone(),
                transporter: l.transporter.clone(),
                ..Default::default()
            });
            let rank = |s: &str| match s {
                "DISCONNECTED" => 2,
                "CONNECTED" => 1,
                _ => 0,
            };
            if rank(&l.status) > rank(&sum.status) {
                sum.status = l.status.clone();
            }
            if l.transporter == "shm" {
                sum.transporter = l.transporter.clone();
            }
            sum.bytes_sent += l.bytes_sent;
            sum.bytes_received += l.bytes_received;
            sum.connects += l.connects;
            sum.dropped += l.dropped;
        }
        per.into_values().collect()
    }

    /// Counts one event.
    pub fn count(a: &std::sync::atomic::AtomicU64) {
        a.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    fn count_purged(&self, table: TableId, rows: u64) {
        if rows > 0 {
            *self.ttl_purged.lock().unwrap_or_else(|e| e.into_inner()).entry(table).or_default() += rows;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Preparing,
    WaitEpoch,
    Committing,
    Aborting,
    /// A one-round commit: the commit point was taken when the only batch was sent (counted in
    /// `epoch`); the chain answers `Committed`, or `Prepared` / `FastOff` when it fell back to
    /// the ordinary rounds. `resolving`: a replica failed and the survivor was asked.
    FastCommit {
        resolving: bool,
    },
}

struct Txn {
    client: ClientId,
    client_txn: u64,
    req_id: u64,
    state: State,
    /// Chains holding locks or pending changes of this transaction.
    participants: Vec<Vec<Addr>>,
    /// Every chain a prepare of this transaction went to (a superset of `participants`).
    chains: Vec<Vec<Addr>>,
    /// Preparing: batches of the current wave not answered yet, by batch number.
    pending: BTreeMap<u32, Vec<Addr>>,
    /// Committing / Aborting: chains (or single replicas, after a node failure) whose answer is
    /// awaited.
    awaiting: BTreeSet<Vec<Addr>>,
    /// A data node holding part of this transaction failed: it aborts once its prepares are
    /// accounted for.
    doomed: Option<TernError>,
    /// A backup could not stage this wave's writes: the transaction aborts with this error.
    replica_failure: Option<TernError>,
    results: Vec<OpResult>,
    writes: Vec<bool>,
    exec: Exec,
    abort_option: AbortOption,
    /// The current batch fails busy locks at once instead of waiting.
    nowait: bool,
    durable: bool,
    epoch: u64,
    abort_reason: Option<TernError>,
    last_active_ms: u64,
    orphan: bool,
    /// Operations of the client's current batch (results beyond are unique-index triggers).
    client_ops: usize,
    /// Unique-index trigger operations collected from the current wave: (origin op, operation).
    triggers: Vec<(u32, tern_wire::KeyOp)>,
    /// For each trigger result slot: its origin op and the index table it touched.
    trigger_origin: Vec<(u32, TableId)>,
    /// A unique-index violation: aborts the transaction whatever its abort option.
    trigger_failure: Option<TernError>,
    /// Prepare batches sent so far (numbers them: an ldm may hold two of one transaction).
    batches_sent: u32,
}

/// Steps an ldm takes by itself in an aggregating scan before it waits for the tc's next
/// request: each step's partial groups are a few rows, so the ldms of other threads need not
/// wait for this tc's thread between steps (with several ldm workers they scan in parallel),
/// and a dropped scan (KILL, client gone) costs at most this many more steps.
const AGG_STEPS_AHEAD: u32 = 32;

/// What a stopping node answers clients (`Signal::StopServing`): temporary, try another node.
fn stopping() -> TernError {
    TernError::new(ErrorCode::NodeNotStarted, "data node is stopping; retry on another node")
}

struct PartScan {
    pos: ScanPos,
    outstanding: bool,
    /// The ldm the outstanding fragment request went to.
    target: Option<Addr>,
    rows: std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
}

struct Scan {
    local: u64,
    client: ClientId,
    req_id: u64,
    req: ScanReq,
    filter: Arc<tern_types::filter::Filter>,
    projection: Option<Arc<Vec<u16>>>,
    /// The index ranges every fragment reads (`lo..hi` as one range, or the request's list).
    ranges: Arc<Vec<tern_wire::KeyRange>>,
    parts: BTreeMap<u32, PartScan>,
    sent: u64,
    /// The client asked for the next batch and has not been answered.
    waiting: bool,
    out: Vec<Vec<u8>>,
}

/// A TC takeover this tc runs for failed nodes (ndb-protocols.md §2): the ldms' reports, then
/// commit-or-abort of every transaction those nodes coordinated.
struct Takeover {
    failed: Vec<NodeId>,
    /// ldms that have not reported yet.
    reports: BTreeSet<Addr>,
    /// Per transaction: what the ldms reported of it.
    txns: BTreeMap<TxnRef, TakenOver>,
    /// Commit/abort answers awaited: (transaction, single-replica chain).
    awaiting: BTreeSet<(TxnRef, Vec<Addr>)>,
    /// The cluster map version it started from.
    map_version: u64,
}

/// A taken-over transaction: ldms holding it prepared, ldms that committed it, its commit epoch.
#[derive(Default)]
struct TakenOver {
    prepared: BTreeSet<Addr>,
    committed: BTreeSet<Addr>,
    epoch: Option<u64>,
}

pub struct Tc {
    addr: Addr,
    cfg: TcConfig,
    ldm_count: u16,
    cluster: Arc<ClusterState>,
    /// Replica chains (ldm addresses, primary first), each once; `part_chains` gives every
    /// partition of every table its chain (an index here, which also groups a wave's batches).
    chains: Vec<TcChain>,
    part_chains: tern_types::hash::FastMap<TableId, Vec<u32>>,
    /// The dist that runs the epoch protocol (where finished epochs are reported).
    epoch_master: Addr,
    catalog: Arc<Catalog>,
    layouts: tern_types::hash::FastMap<TableId, Arc<RowLayout>>,
    /// Tables whose committed reads may go to a backup replica on this node: every table not
    /// created with `NDB_TABLE=READ_BACKUP=0` in its comment (NDB's default since 8.0.19,
    /// `ndb_read_backup=ON`).
    read_backup: std::collections::HashSet<TableId, tern_types::hash::FastState>,
    next_id: u64,
    txns: tern_types::hash::FastMap<u64, Txn>,
    by_client: tern_types::hash::FastMap<(ClientId, u64), u64>,
    /// Transactions aborted while the client had no request outstanding (inactivity, a failed
    /// data node): the client's next request for one gets this error.
    aborted_idle: tern_types::hash::FastMap<(ClientId, u64), TernError>,
    current_epoch: u64,
    /// The time of the first signal this tc handled (uptime in status answers).
    started_ms: u64,
    gate_closed: bool,
    gate_queue: Vec<u64>,
    committing: BTreeMap<u64, u32>,
    unreported: Vec<u64>,
    /// The newest epoch of any commit point this tc gave (taken-over commits included): tells
    /// the master whether an epoch flush must mark the redo.
    newest_commit: u64,
    /// The current epoch, when the master opened it as quiet (`EpochCommit::quiet`) and no
    /// commit point of this tc fell into it yet.
    quiet_epoch: Option<u64>,
    durable_epoch: u64,
    durable_waiters: BTreeMap<u64, Vec<(ClientId, u64, Reply)>>,
    /// The newest epoch this tc asked the epoch master to make durable now (`EpochWanted`).
    epoch_wanted: u64,
    scans: HashMap<(ClientId, u64), Scan>,
    /// Scan id used towards ldms (unique in this tc) -> the client's scan.
    scan_ids: HashMap<u64, (ClientId, u64)>,
    /// Scans that failed while their client was not waiting for a batch: the error answers its
    /// next request (one per client scan id; dropped with the client).
    failed_scans: HashMap<(ClientId, u64), TernError>,
    started: bool,
    /// The node's lease from the management nodes ends at this time (`u64::MAX`: none needed);
    /// no client request is served after it.
    lease_until_ms: u64,
    /// The node stops in order (`Signal::StopServing`): no client request is served any more.
    stopping: bool,
    takeover: Option<Takeover>,
    /// Failed nodes whose takeover waits for the running one.
    takeover_queue: Vec<NodeId>,
    /// The driver's clock (ms), set once at the top of every `handle`.
    now_ms: u64,
    budget: MemoryBudget,
    stats: Arc<NodeStats>,
    purge: purge::Purge,
    /// Change logs (backups) of this tc's clients, by (client, the client's number for it).
    logs: BTreeMap<(ClientId, u64), log::LogSub>,
    /// Change-log requests waiting for the ldms' answers, by call number.
    log_calls: BTreeMap<u64, log::LogCall>,
    next_log: u64,
}

impl Tc {
    pub fn new(
        addr: Addr,
        cluster: Arc<ClusterState>,
        cfg: TcConfig,
        catalog: Arc<Catalog>,
        budget: MemoryBudget,
        stats: Arc<NodeStats>,
    ) -> Tc {
        // Transaction ids carry the node's incarnation in their top bits, so a restarted
        // coordinator never reuses the id of a transaction other nodes may still remember (a
        // commit marker, an aborted-idle record, a takeover in progress).
        let incarnation = cluster.nodes.get(&addr.node).map_or(0, |n| n.incarnation);
        let mut tc = Tc {
            addr,
            cfg,
            ldm_count: cluster.config.ldm_workers,
            chains: Vec::new(),
            part_chains: Default::default(),
            epoch_master: Addr::new(addr.node, Block::Dist),
            cluster,
            catalog: Arc::new(Catalog::new()),
            layouts: Default::default(),
            read_backup: Default::default(),
            next_id: (incarnation as u64) << 40,
            txns: Default::default(),
            by_client: Default::default(),
            aborted_idle: Default::default(),
            current_epoch: 0,
            started_ms: u64::MAX,
            gate_closed: false,
            gate_queue: Vec::new(),
            committing: BTreeMap::new(),
            unreported: Vec::new(),
            newest_commit: 0,
            quiet_epoch: None,
            durable_epoch: 0,
            durable_waiters: BTreeMap::new(),
            epoch_wanted: 0,
            scans: HashMap::new(),
            scan_ids: HashMap::new(),
            failed_scans: HashMap::new(),
            started: false,
            lease_until_ms: u64::MAX,
            stopping: false,
            takeover: None,
            takeover_queue: Vec::new(),
            now_ms: 0,
            budget,
            stats,
            purge: Default::default(),
            logs: BTreeMap::new(),
            log_calls: BTreeMap::new(),
            next_log: 0,
        };
        tc.set_catalog(catalog);
        tc.set_routing();
        tc
    }

    pub fn node_id(&self) -> crate::signal::NodeId {
        self.addr.node
    }

    /// Computes every partition's chain from the cluster map and the catalog (after either
    /// changes). Partitions at their default home share the chain of that home.
    fn set_routing(&mut self) {
        let mut interned: BTreeMap<(Vec<Addr>, usize), u32> = BTreeMap::new();
        let mut by_home: BTreeMap<tern_types::cluster::Home, u32> = BTreeMap::new();
        let mut chains: Vec<TcChain> = Vec::new();
        let mut intern = |c: tern_types::cluster::Chain| -> u32 {
            let addrs: Vec<Addr> = c.replicas.iter().map(|&(n, l)| Addr::new(n, Block::Ldm(l))).collect();
            *interned.entry((addrs.clone(), c.readable)).or_insert_with(|| {
                chains.push(TcChain { addrs, readable: c.readable });
                chains.len() as u32 - 1
            })
        };
        let cluster = &self.cluster;
        let mut part_chains: tern_types::hash::FastMap<TableId, Vec<u32>> = Default::default();
        for t in self.catalog.tables.values() {
            let v = (0..t.partition_count)
                .map(|p| {
                    if cluster.placed.contains_key(&(t.id, p)) {
                        intern(cluster.chain(t.id, t.groups, p))
                    } else {
                        let home = cluster.default_home(t.groups, p);
                        *by_home.entry(home).or_insert_with(|| intern(cluster.chain(t.id, t.groups, p)))
                    }
                })
                .collect();
            part_chains.insert(t.id, v);
        }
        self.chains = chains;
        self.part_chains = part_chains;
    }

    /// The chain of a partition of a known table (empty when not known).
    fn chain_of(&self, table: TableId, partition: u32) -> &TcChain {
        static NONE: TcChain = TcChain { addrs: Vec::new(), readable: 0 };
        self.chain_key(table, partition).map_or(&NONE, |i| &self.chains[i as usize])
    }

    fn set_catalog(&mut self, catalog: Arc<Catalog>) {
        self.layouts = catalog.tables.values().map(|t| (t.id, Arc::new(RowLayout::new(t)))).collect();
        self.read_backup = catalog
            .tables
            .values()
            .filter(|t| !tern_types::ndb_comment::parse(&t.comment).is_ok_and(|o| o.read_backup == Some(false)))
            .map(|t| t.id)
            .collect();
        self.catalog = catalog;
        self.set_routing();
    }

    /// This node's dict: it runs DDL when this node is the master and otherwise forwards it
    /// there, answering itself if that master fails.
    fn dict(&self) -> Addr {
        Addr::new(self.addr.node, Block::Dict)
    }

    /// The replica chain (ldm addresses, primary first) of a partition.
    fn chain(&self, table: TableId, partition: u32) -> Vec<Addr> {
        self.chain_of(table, partition).addrs.clone()
    }

    /// Where a READ_BACKUP read of a partition goes instead of its primary (None: the primary):
    /// a full backup on this node; else, when the primary is in another location domain than
    /// this node, a full backup in this node's domain (RonDB's location domains: an API node's
    /// reads stay in its availability zone). Never a replica that copies or leaves.
    fn near_backup(&self, table: TableId, partition: u32) -> Option<Addr> {
        let chain = self.chain_of(table, partition);
        let readable = &chain.addrs[..chain.readable];
        let started = |a: &&Addr| self.cluster.state_of(a.node) == NodeState::Started;
        let me = self.addr.node;
        if let Some(a) = readable.iter().skip(1).find(|a| a.node == me) {
            return Some(*a).filter(|a| started(&a));
        }
        let domain = self.cluster.config.domain_of(me);
        if domain == 0
            || readable.first().is_none_or(|p| p.node == me || self.cluster.config.domain_of(p.node) == domain)
        {
            return None;
        }
        readable.iter().skip(1).filter(started).find(|a| self.cluster.config.domain_of(a.node) == domain).copied()
    }

    /// Which chain a partition's operations go to (batches are grouped by this).
    fn chain_key(&self, table: TableId, partition: u32) -> Option<u32> {
        self.part_chains.get(&table).and_then(|v| v.get(partition as usize)).copied()
    }

    pub fn handle(&mut self, now_ms: u64, sig: Signal, out: &mut Out) {
        debug_assert!(now_ms >= self.now_ms, "time never goes back");
        self.now_ms = now_ms;
        if self.started_ms == u64::MAX {
            self.started_ms = now_ms;
        }
        let replies = out.replies.len();
        self.handle_signal(sig, out);
        self.purge_replies(replies, out);
    }

    fn handle_signal(&mut self, sig: Signal, out: &mut Out) {
        match sig {
            Signal::ClientRequest { client, req_id, req } => self.request(client, req_id, req, out),
            Signal::ClientGone { client } => self.client_gone(client, out),
            Signal::Prepared(batch) => self.prepared(*batch, out),
            Signal::Committed { txn, chain, .. } if txn.tc != self.addr => self.takeover_answer(txn, chain, true, out),
            Signal::Aborted { txn, chain } if txn.tc != self.addr => self.takeover_answer(txn, chain, false, out),
            Signal::Committed { txn, chain, results } => self.committed(txn, chain, results, out),
            Signal::Aborted { txn, chain } => self.aborted(txn, chain, out),
            Signal::CompleteReq { txn, from } => {
                // Ids count up from this incarnation's base: an id below `next_id` of this
                // incarnation that is no longer held finished its commit (or abort) here.
                let mine = txn.tc == self.addr && txn.id >> 40 == self.next_id >> 40 && txn.id < self.next_id;
                if mine && !self.txns.contains_key(&txn.id) {
                    out.send(from, Signal::Complete { txn, chain: vec![from], pos: 0 });
                }
            }
            Signal::FastOff { txn } => {
                if txn.tc == self.addr
                    && self.txns.get(&txn.id).is_some_and(|t| t.state == State::FastCommit { resolving: false })
                {
                    self.fast_off(txn.id, out);
                }
            }
            Signal::ScanFragRows(rows) => self.scan_rows(*rows, out),
            Signal::LogChunk { from, call, entries, error } => self.log_chunk(from, call, entries, error, out),
            Signal::EpochPrepare { from, epoch } => {
                self.gate_closed = true;
                out.send(from, Signal::EpochPrepared { from: self.addr, epoch, current: self.current_epoch });
            }
            Signal::EpochCommit { from, epoch, quiet } => {
                self.epoch_master = from;
                self.current_epoch = epoch;
                self.quiet_epoch = quiet.then_some(epoch);
                self.gate_closed = false;
                // Reports are cumulative: once nothing of epochs below `epoch` is committing,
                // all of them are finished here (also those a failed master had half switched).
                if self.unreported.last().is_none_or(|&e| e < epoch - 1) {
                    self.unreported.push(epoch - 1);
                }
                for id in std::mem::take(&mut self.gate_queue) {
                    self.commit_point(id, out);
                }
                self.report_finished(out);
            }
            Signal::EpochDurable { epoch } => {
                self.durable_epoch = self.durable_epoch.max(epoch);
                let later = self.durable_waiters.split_off(&(epoch + 1));
                for (_, waiters) in std::mem::replace(&mut self.durable_waiters, later) {
                    for (c, r, reply) in waiters {
                        out.reply(c, r, reply);
                    }
                }
            }
            Signal::Schema { catalog, dict } => {
                let version = catalog.version;
                self.set_catalog(catalog);
                out.send(dict, Signal::SchemaAck { from: self.addr, version });
            }
            Signal::ClusterMap { state } => self.cluster_map(state, out),
            Signal::TakeoverConf { from, txns } => self.takeover_conf(from, txns, out),
            Signal::DdlReply { client, req_id, reply } => out.reply(client, req_id, reply),
            Signal::Lease { until_ms } => self.lease_until_ms = until_ms,
            Signal::StopServing => self.stopping = true,
            Signal::NodeStarted { epoch, durable_epoch } => {
                self.started = true;
                self.current_epoch = epoch;
                self.durable_epoch = durable_epoch;
                out.timer(self.cfg.tick_ms, self.addr, Signal::Tick);
            }
            Signal::DeadlockProbe(ref p) => {
                let target = p.target;
                // A blocked transaction waits on every batch it has outstanding: pass the probe
                // to each replica they went to (the ldms check whether it is blocked there).
                let Some(t) = self.txns.get(&target.id) else { return };
                if target.tc != self.addr || !matches!(t.state, State::Preparing | State::FastCommit { .. }) {
                    return;
                }
                let ldms: BTreeSet<Addr> = t.pending.values().flatten().copied().collect();
                for ldm in ldms {
                    out.send(ldm, sig.clone());
                }
            }
            Signal::Tick => {
                self.expire_idle(out);
                self.purge_tick(out);
                out.timer(self.cfg.tick_ms, self.addr, Signal::Tick);
            }
            other => crate::signal::drop_unexpected(self.addr, "tc", &other),
        }
    }

    fn request(&mut self, client: ClientId, req_id: u64, req: Request, out: &mut Out) {
        match req {
            Request::Hello { .. } => out.reply(
                client,
                req_id,
                Reply::Welcome {
                    node_id: self.addr.node,
                    catalog_version: self.catalog.version,
                    workers: self.ldm_count,
                    worker: match self.addr.block {
                        Block::Tc(i) => i,
                        _ => 0,
                    },
                },
            ),
            Request::GetCatalog => out.reply(client, req_id, Reply::Catalog(Box::new((*self.catalog).clone()))),
            Request::Status => out.reply(client, req_id, Reply::Status(Box::new(self.status()))),
            _ if !self.started => out.reply(
                client,
                req_id,
                Reply::Error(TernError::new(ErrorCode::ShuttingDown, "data node is starting; retry shortly")),
            ),
            _ if self.stopping => out.reply(client, req_id, Reply::Error(stopping())),
            _ if self.now_ms >= self.lease_until_ms => {
                // The node cannot tell whether the others still count on it (its lease lapsed:
                // it or the management nodes were not scheduled, or cannot reach each other).
                let e = TernError::new(
                    ErrorCode::NodeNotStarted,
                    "data node's lease with the management nodes lapsed; retry on another node",
                );
                out.reply(client, req_id, Reply::Error(e))
            }
            Request::Txn(_) | Request::Scan(_) if self.cluster.state_of(self.addr.node) != NodeState::Started => {
                let e = TernError::new(ErrorCode::NodeNotStarted, "data node is restarting; retry on another node");
                out.reply(client, req_id, Reply::Error(e))
            }
            Request::Txn(t) => self.txn_request(client, req_id, t, out),
            Request::Scan(s) => self.scan_start(client, req_id, s, out),
            Request::ScanNext { scan } => self.scan_next(client, req_id, scan, out),
            Request::ScanClose { scan } => {
                self.drop_scan((client, scan));
                self.failed_scans.remove(&(client, scan));
                out.reply(client, req_id, Reply::ScanRows { scan, rows: Vec::new(), done: true });
            }
            Request::Ddl(ddl) => out.send(self.dict(), Signal::Ddl { client, req_id, reply_to: self.addr, req: ddl }),
            Request::AutoInc { table, count } => {
                out.send(self.dict(), Signal::AutoInc { client, req_id, reply_to: self.addr, table, count })
            }
            Request::Log { sub, op, max_bytes, tables } => {
                self.log_request(client, req_id, sub, op, max_bytes, tables, out)
            }
        }
    }

    fn status(&self) -> StatusInfo {
        StatusInfo {
            node_id: self.addr.node,
            state: if self.started { "started".into() } else { "starting".into() },
            memory_used: self.budget.used(),
            memory_total: self.budget.limit(),
            partitions: self.catalog.tables.values().map(|t| t.partition_count).sum(),
            rows: self.stats.rows.load(std::sync::atomic::Ordering::Relaxed).max(0) as u64,
            ldm_workers: self.ldm_count,
            durable_epoch: self.durable_epoch,
            current_epoch: self.current_epoch,
            catalog_version: self.catalog.version,
            pid: self.stats.pid.load(std::sync::atomic::Ordering::Relaxed),
            backup_reads: self.stats.backup_reads.load(std::sync::atomic::Ordering::Relaxed),
            ttl_purged: self
                .stats
                .ttl_purged
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|(&t, &n)| (t, n))
                .collect(),
            table_rows: self
                .stats
                .table_rows
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter(|(t, _)| self.catalog.tables.contains_key(t))
                .map(|(&t, &n)| (t, n.max(0) as u64))
                .collect(),
            table_bytes: {
                let mut per: BTreeMap<TableId, u64> = BTreeMap::new();
                for (&(_, t), &b) in self.stats.table_bytes.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    if self.catalog.tables.contains_key(&t) {
                        *per.entry(t).or_default() += b;
                    }
                }
                per.into_iter().collect()
            },
            counters: self.stats.counters(),
            uptime_ms: self.now_ms.saturating_sub(self.started_ms),
            fragments: {
                let all = self.stats.fragments.lock().unwrap_or_else(|e| e.into_inner());
                let mut v: Vec<tern_wire::FragmentStat> =
                    all.values().flatten().filter(|f| self.catalog.tables.contains_key(&f.table)).cloned().collect();
                v.sort_by_key(|f| (f.table, f.partition, f.ldm));
                v
            },
            locks: self.stats.locks.lock().unwrap_or_else(|e| e.into_inner()).values().flatten().cloned().collect(),
            links: self.stats.summed_links(),
        }
    }

    /// Checks the coordinator's bookkeeping (O(transactions); the simulator calls it after every
    /// signal). Panics on the first inconsistency.
    pub fn check_invariants(&self) {
        assert_eq!(self.by_client.len(), self.txns.len(), "client index and transactions disagree");
        for (key, id) in &self.by_client {
            let t = self.txns.get(id).unwrap_or_else(|| panic!("client index names a gone txn {id}"));
            assert_eq!((t.client, t.client_txn), *key, "client index points at another txn");
        }
        assert_eq!(self.scans.len(), self.scan_ids.len(), "scan indexes disagree");
        for (local, key) in &self.scan_ids {
            assert_eq!(self.scans.get(key).map(|s| s.local), Some(*local), "scan id {local} is stale");
        }
        let mut committing: BTreeMap<u64, u32> = BTreeMap::new();
        for (id, t) in &self.txns {
            match t.state {
                State::Committing => {
                    *committing.entry(t.epoch).or_default() += 1;
                    assert!(!t.awaiting.is_empty(), "committing txn {id} waits for nothing");
                    assert!(t.epoch <= self.current_epoch, "txn {id} committed in a future epoch");
                }
                State::FastCommit { .. } => {
                    *committing.entry(t.epoch).or_default() += 1;
                    assert!(!t.awaiting.is_empty(), "one-round commit {id} waits for nothing");
                    assert!(t.epoch <= self.current_epoch, "txn {id} committed in a future epoch");
                    assert_eq!(t.participants.len(), 1, "one-round commit {id} on several chains");
                }
                State::Aborting => assert!(!t.awaiting.is_empty(), "aborting txn {id} waits for nothing"),
                State::WaitEpoch => {
                    assert!(self.gate_closed && self.gate_queue.contains(id), "txn {id} waits for no epoch switch")
                }
                State::Idle => assert!(t.pending.is_empty(), "idle txn {id} has prepares outstanding"),
                State::Preparing => assert!(!t.pending.is_empty(), "preparing txn {id} waits for nothing"),
            }
        }
        assert_eq!(committing, self.committing, "commit counts per epoch disagree with the transactions");
        assert!(self.gate_closed || self.gate_queue.is_empty(), "transactions queued behind an open gate");
        assert!(self.unreported.windows(2).all(|w| w[0] < w[1]), "unreported epochs out of order");
    }

    // ---------------------------------------------------------------- transactions

    fn txn_request(&mut self, client: ClientId, req_id: u64, req: TxnReq, out: &mut Out) {
        let key = (client, req.txn);
        if let Some(e) = self.aborted_idle.remove(&key) {
            out.reply(client, req_id, txn_reply(req.txn, Vec::new(), Outcome::Aborted(e)));
            return;
        }
        let id = match self.by_client.get(&key) {
            Some(&id) => id,
            None => {
                if req.exec == Exec::Rollback && req.ops.is_empty() {
                    out.reply(client, req_id, txn_reply(req.txn, Vec::new(), Outcome::RolledBack));
                    return;
                }
                if self.txns.len() >= self.cfg.txns_max {
                    let e = TernError::new(ErrorCode::Overloaded, "too many open transactions at this node");
                    out.reply(client, req_id, txn_reply(req.txn, Vec::new(), Outcome::Aborted(e)));
                    return;
                }
                self.next_id += 1;
                let id = self.next_id;
                self.by_client.insert(key, id);
                self.txns.insert(
                    id,
                    Txn {
                        client,
                        client_txn: req.txn,
                        req_id,
                        state: State::Idle,
                        participants: Vec::new(),
                        chains: Vec::new(),
                        pending: BTreeMap::new(),
                        awaiting: BTreeSet::new(),
                        doomed: None,
                        replica_failure: None,
                        results: Vec::new(),
                        writes: Vec::new(),
                        exec: req.exec,
                        abort_option: req.abort,
                        nowait: req.nowait,
                        durable: req.durable,
                        epoch: 0,
                        abort_reason: None,
                        last_active_ms: self.now_ms,
                        orphan: false,
                        client_ops: 0,
                        triggers: Vec::new(),
                        trigger_origin: Vec::new(),
                        trigger_failure: None,
                        batches_sent: 0,
                    },
                );
                id
            }
        };
        let txn = self.txns.get_mut(&id).expect("present");
        if txn.state != State::Idle {
            let e = TernError::new(ErrorCode::InvalidRequest, "transaction is busy with an earlier batch");
            out.reply(client, req_id, Reply::Error(e));
            return;
        }
        txn.req_id = req_id;
        txn.exec = req.exec;
        txn.abort_option = req.abort;
        txn.nowait = req.nowait;
        txn.durable |= req.durable;
        txn.last_active_ms = self.now_ms;
        txn.results = vec![OpResult::Done; req.ops.len()];
        // NotFound fails an AbortOnError transaction for writes that need the row; a Write found
        // no previous row and a DeleteExpired an unexpired one, which are not errors.
        txn.writes = req
            .ops
            .iter()
            .map(|o| o.kind.is_write() && !matches!(o.kind, OpKind::Write | OpKind::DeleteExpired))
            .collect();
        txn.client_ops = req.ops.len();
        if req.exec == Exec::Rollback {
            txn.results.clear();
            self.start_abort(id, None, out);
            return;
        }
        self.route(id, req.ops, 0, out);
    }

    /// Groups a wave of operations by replica chain and sends one Prepare per chain. `base` is the
    /// result slot of the first operation.
    fn route(&mut self, id: u64, ops: Vec<tern_wire::KeyOp>, base: usize, out: &mut Out) {
        let tref = TxnRef { tc: self.addr, id };
        let nowait = self.txns.get(&id).is_some_and(|t| t.nowait);
        let mut batches: BTreeMap<(u32, bool), Box<PrepareBatch>> = BTreeMap::new();
        let mut routing_errors = Vec::new();
        let n = ops.len();
        // READ_BACKUP: a wave of committed reads of a transaction that holds nothing yet may read
        // a backup on this node. Backups commit before the primary (commit runs backup-first),
        // so every commit acknowledged to any client is already there. A transaction that wrote
        // reads at the primary, which holds its own pending writes.
        let backup_reads = !self.read_backup.is_empty()
            && self.txns.get(&id).is_some_and(|t| t.participants.is_empty())
            && ops.iter().all(|o| o.kind == OpKind::Read);
        let mut local_reads = 0u64;
        // Committed reads by where they go: this node, its domain, elsewhere.
        let mut reads = [0u64; 3];
        let my_domain = self.cluster.config.domain_of(self.addr.node);
        for (i, op) in ops.into_iter().enumerate() {
            let routed = self.partition_of(&op).and_then(|p| {
                if self.chain_of(op.table, p).addrs.is_empty() {
                    Err(TernError::new(ErrorCode::NodeFailure, "the partition has no live replica"))
                } else {
                    Ok(p)
                }
            });
            match routed {
                Ok(partition) => {
                    let local = (backup_reads && self.read_backup.contains(&op.table))
                        .then(|| self.near_backup(op.table, partition))
                        .flatten();
                    let key = self.chain_key(op.table, partition).expect("a routed partition has a chain");
                    let b = batches.entry((key, local.is_some())).or_insert_with(|| {
                        Box::new(PrepareBatch {
                            txn: tref,
                            batch: 0,
                            chain: local.map_or_else(|| self.chain(op.table, partition), |a| vec![a]),
                            pos: 0,
                            ops: Vec::with_capacity(n),
                            results: Vec::with_capacity(n),
                            holds_state: false,
                            triggers: Vec::new(),
                            nowait,
                            commit_epoch: None,
                            map_version: self.cluster.version,
                        })
                    });
                    if op.kind == OpKind::Read {
                        let to = local.map_or_else(|| b.chain[0].node, |a| a.node);
                        let at = if to == self.addr.node {
                            0
                        } else if my_domain != 0 && self.cluster.config.domain_of(to) == my_domain {
                            1
                        } else {
                            2
                        };
                        reads[at] += 1;
                    }
                    b.ops.push(PrepOp::Exec { idx: (base + i) as u32, partition, op });
                    local_reads += local.is_some() as u64;
                }
                Err(e) => routing_errors.push((base + i, e)),
            }
        }
        if local_reads > 0 {
            self.stats.backup_reads.fetch_add(local_reads, std::sync::atomic::Ordering::Relaxed);
        }
        for (n, c) in
            reads.into_iter().zip([&self.stats.reads_here, &self.stats.reads_in_domain, &self.stats.reads_elsewhere])
        {
            if n > 0 {
                c.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        }
        let txn = self.txns.get_mut(&id).expect("present");
        // One-round commit: an autocommit batch for a single chain of two replicas takes its
        // commit point now (the gate is open), and the last replica commits when it staged.
        let fast = self.cfg.one_round_commit
            && txn.exec == Exec::Commit
            && base == 0
            && txn.batches_sent == 0
            && routing_errors.is_empty()
            && batches.len() == 1
            && batches.first_key_value().is_some_and(|((_, local), b)| !local && b.chain.len() == 2)
            && !self.gate_closed
            && !self.stopping;
        for (i, e) in routing_errors {
            txn.results[i] = OpResult::Error(e);
        }
        txn.state = State::Preparing;
        if fast {
            let chain = batches.values().next().expect("one").chain.clone();
            txn.state = State::FastCommit { resolving: false };
            txn.epoch = self.current_epoch;
            txn.participants = vec![chain.clone()];
            txn.awaiting = BTreeSet::from([chain]);
            *self.committing.entry(txn.epoch).or_default() += 1;
            self.newest_commit = self.newest_commit.max(txn.epoch);
            if self.quiet_epoch == Some(txn.epoch) {
                self.quiet_epoch = None;
                out.send(self.epoch_master, Signal::EpochBusy { from: self.addr });
            }
            NodeStats::count(&self.stats.fast_commits);
        }
        let commit_epoch = fast.then_some(txn.epoch);
        for (_, mut b) in batches {
            b.commit_epoch = commit_epoch;
            b.batch = txn.batches_sent;
            txn.batches_sent = txn.batches_sent.wrapping_add(1);
            txn.pending.insert(b.batch, b.chain.clone());
            if !txn.chains.contains(&b.chain) {
                txn.chains.push(b.chain.clone());
            }
            out.send(b.chain[0], Signal::Prepare(b));
        }
        if self.txns[&id].pending.is_empty() {
            self.wave_done(id, out);
        }
    }

    /// A wave of prepares finished: run the unique-index triggers it produced as one more wave,
    /// or, when there are none, fold trigger results into their origin ops and finish the batch.
    fn wave_done(&mut self, id: u64, out: &mut Out) {
        let txn = self.txns.get_mut(&id).expect("present");
        if !txn.triggers.is_empty() && !txn.orphan && txn.doomed.is_none() && txn.replica_failure.is_none() {
            let base = txn.results.len();
            let mut ops = Vec::with_capacity(txn.triggers.len());
            for (origin, op) in std::mem::take(&mut txn.triggers) {
                txn.results.push(OpResult::Done);
                txn.writes.push(true);
                txn.trigger_origin.push((origin, op.table));
                ops.push(op);
            }
            self.route(id, ops, base, out);
            return;
        }
        txn.triggers.clear();
        if txn.results.len() > txn.client_ops {
            let origins = std::mem::take(&mut txn.trigger_origin);
            let extra: Vec<OpResult> = txn.results.drain(txn.client_ops..).collect();
            txn.writes.truncate(txn.client_ops);
            for ((origin, table), r) in origins.into_iter().zip(extra) {
                let e = match r {
                    OpResult::Error(e) if e.code == ErrorCode::DuplicateKey => {
                        let name = index_name_of(&self.catalog, table);
                        TernError::new(ErrorCode::DuplicateKey, format!("Duplicate entry for key '{name}'"))
                    }
                    OpResult::Error(e) => e,
                    _ => continue, // done, or an index entry already gone
                };
                txn.results[origin as usize] = OpResult::Error(e.clone());
                txn.trigger_failure.get_or_insert(e);
            }
        }
        self.batch_done(id, out);
    }

    fn partition_of(&self, op: &tern_wire::KeyOp) -> Result<u32, TernError> {
        let (Some(t), Some(layout)) = (self.catalog.table(op.table), self.layouts.get(&op.table)) else {
            return Err(TernError::new(ErrorCode::NoSuchTable, format!("table id {} does not exist", op.table)));
        };
        layout.check_key(&op.key)?;
        if matches!(op.kind, OpKind::Insert | OpKind::Write) && op.row.is_empty() {
            return Err(TernError::new(ErrorCode::InvalidRequest, "insert and write need a row"));
        }
        layout.partition_of_key(&op.key, t.partition_count)
    }

    fn prepared(&mut self, batch: PrepareBatch, out: &mut Out) {
        let id = batch.txn.id;
        match self.txns.get(&id).map(|t| t.state) {
            None | Some(State::FastCommit { resolving: true }) => return,
            Some(State::FastCommit { resolving: false }) => self.fast_off(id, out),
            Some(_) => {}
        }
        let txn = self.txns.get_mut(&id).expect("present");
        if txn.state != State::Preparing || txn.pending.remove(&batch.batch).is_none() {
            return;
        }
        if batch.holds_state && !txn.participants.contains(&batch.chain) {
            txn.participants.push(batch.chain.clone());
        }
        txn.triggers.extend(batch.triggers);
        for (i, r) in batch.results {
            if i == REPLICA_FAILED {
                if let OpResult::Error(e) = r {
                    txn.replica_failure.get_or_insert(e);
                }
            } else if let Some(slot) = txn.results.get_mut(i as usize) {
                *slot = r;
            }
        }
        if txn.pending.is_empty() {
            self.wave_done(id, out);
        }
    }

    fn batch_done(&mut self, id: u64, out: &mut Out) {
        let txn = self.txns.get_mut(&id).expect("present");
        if let Some(e) = txn.doomed.clone() {
            self.start_abort(id, Some(e), out);
            return;
        }
        let mut failure = txn.trigger_failure.take().or(txn.replica_failure.take());
        for (i, r) in txn.results.iter().enumerate() {
            let fatal = match r {
                OpResult::Error(e) => e.is_temporary() || txn.abort_option == AbortOption::AbortOnError,
                OpResult::NotFound => txn.writes[i] && txn.abort_option == AbortOption::AbortOnError,
                _ => false,
            };
            if fatal && failure.is_none() {
                failure = Some(match r {
                    OpResult::Error(e) => e.clone(),
                    _ => TernError::new(ErrorCode::NotFound, "Can't find record (tuple did not exist)"),
                });
                break;
            }
        }
        if txn.orphan {
            self.start_abort(id, None, out);
            return;
        }
        if let Some(e) = failure {
            self.start_abort(id, Some(e), out);
            return;
        }
        match txn.exec {
            Exec::NoCommit => {
                txn.state = State::Idle;
                let results = std::mem::take(&mut txn.results);
                out.reply(txn.client, txn.req_id, txn_reply(txn.client_txn, results, Outcome::Open));
            }
            Exec::Commit => self.commit_point(id, out),
            Exec::Rollback => self.start_abort(id, None, out),
        }
    }

    /// The commit decision: take the current epoch (or wait for the epoch switch to end).
    fn commit_point(&mut self, id: u64, out: &mut Out) {
        let txn = self.txns.get_mut(&id).expect("present");
        if txn.participants.is_empty() {
            let (client, req_id, ctx) = (txn.client, txn.req_id, txn.client_txn);
            let results = std::mem::take(&mut txn.results);
            let epoch = self.current_epoch;
            self.forget(id);
            NodeStats::count(&self.stats.commits);
            out.reply(client, req_id, txn_reply(ctx, results, Outcome::Committed { epoch }));
            return;
        }
        if self.stopping {
            // An orderly stop picks the last epoch it makes durable once every tc stopped
            // serving: no commit point may come after that.
            self.start_abort(id, Some(stopping()), out);
            return;
        }
        if self.gate_closed {
            txn.state = State::WaitEpoch;
            self.gate_queue.push(id);
            return;
        }
        txn.state = State::Committing;
        txn.epoch = self.current_epoch;
        txn.awaiting = txn.participants.iter().cloned().collect();
        *self.committing.entry(txn.epoch).or_default() += 1;
        self.newest_commit = self.newest_commit.max(txn.epoch);
        if self.quiet_epoch == Some(txn.epoch) {
            // The master runs rounds at the quiet interval: back to the normal one.
            self.quiet_epoch = None;
            out.send(self.epoch_master, Signal::EpochBusy { from: self.addr });
        }
        for chain in &txn.participants {
            let pos = (chain.len() - 1) as u8;
            out.send(
                chain[pos as usize],
                Signal::Commit {
                    txn: TxnRef { tc: self.addr, id },
                    epoch: txn.epoch,
                    chain: chain.clone(),
                    pos,
                    results: Vec::new(),
                },
            );
        }
    }

    fn committed(&mut self, tref: TxnRef, chain: Vec<Addr>, results: Vec<(u32, OpResult)>, out: &mut Out) {
        let Some(txn) = self.txns.get_mut(&tref.id) else {
            return;
        };
        if let State::FastCommit { .. } = txn.state {
            // The first answer settles a one-round commit: the primary's (from the chain, with
            // the results), or the survivor's after a failure.
            for (i, r) in results {
                if let Some(slot) = txn.results.get_mut(i as usize) {
                    *slot = r;
                }
            }
            txn.state = State::Committing;
            txn.awaiting = BTreeSet::from([chain.clone()]);
        }
        // A late answer for a chain replaced after a node failure is a duplicate.
        if txn.state != State::Committing || !txn.awaiting.remove(&chain) || !txn.awaiting.is_empty() {
            return;
        }
        // Complete releases the backups' locks and the primaries' commit markers.
        for chain in &txn.participants {
            let pos = (chain.len() - 1) as u8;
            out.send(chain[pos as usize], Signal::Complete { txn: tref, chain: chain.clone(), pos });
        }
        let epoch = txn.epoch;
        NodeStats::count(&self.stats.commits);
        let reply = txn_reply(txn.client_txn, std::mem::take(&mut txn.results), Outcome::Committed { epoch });
        let (client, req_id, durable, orphan) = (txn.client, txn.req_id, txn.durable, txn.orphan);
        self.forget(tref.id);
        if !orphan {
            if durable && epoch > self.durable_epoch {
                self.durable_waiters.entry(epoch).or_default().push((client, req_id, reply));
                if epoch > self.epoch_wanted {
                    // Group commit on demand: the master flushes this epoch now.
                    self.epoch_wanted = epoch;
                    out.send(self.epoch_master, Signal::EpochWanted { from: self.addr, epoch });
                }
            } else {
                out.reply(client, req_id, reply);
            }
        }
        self.uncount(epoch, out);
    }

    /// Tells dist which closed epochs have no transaction still committing, oldest first.
    fn report_finished(&mut self, out: &mut Out) {
        while let Some(&e) = self.unreported.first() {
            if self.committing.range(..=e).next().is_some() {
                break;
            }
            self.unreported.remove(0);
            let newest_commit = self.newest_commit.min(e);
            out.send(self.epoch_master, Signal::EpochTcFinished { from: self.addr, epoch: e, newest_commit });
        }
    }

    fn start_abort(&mut self, id: u64, reason: Option<TernError>, out: &mut Out) {
        let version = self.cluster.version;
        let txn = self.txns.get_mut(&id).expect("present");
        txn.abort_reason = reason;
        txn.state = State::Aborting;
        txn.awaiting.clear();
        let tref = TxnRef { tc: self.addr, id };
        if txn.doomed.is_some() {
            // After a node failure: straight to every live replica of every chain it touched,
            // acted on once each has seen the failure.
            let members: BTreeSet<Addr> = txn.chains.iter().flatten().copied().collect();
            for m in members {
                if self.cluster.state_of(m.node).in_chains() {
                    txn.awaiting.insert(vec![m]);
                    out.send(m, Signal::Abort { txn: tref, chain: vec![m], pos: 0, map_version: version });
                }
            }
        } else {
            for chain in &txn.participants {
                txn.awaiting.insert(chain.clone());
                out.send(chain[0], Signal::Abort { txn: tref, chain: chain.clone(), pos: 0, map_version: 0 });
            }
        }
        if txn.awaiting.is_empty() {
            self.finish_abort(id, out);
        }
    }

    /// A one-round commit fell back to the ordinary rounds: it no longer counts in the epoch it
    /// took (its own commit point comes after the prepares).
    fn fast_off(&mut self, id: u64, out: &mut Out) {
        let txn = self.txns.get_mut(&id).expect("present");
        debug_assert_eq!(txn.state, State::FastCommit { resolving: false });
        txn.state = State::Preparing;
        txn.participants.clear();
        txn.awaiting.clear();
        let epoch = std::mem::take(&mut txn.epoch);
        self.uncount(epoch, out);
    }

    /// A transaction counted in `epoch` stopped committing there.
    fn uncount(&mut self, epoch: u64, out: &mut Out) {
        let n = self.committing.get_mut(&epoch).expect("counted");
        *n -= 1;
        if *n == 0 {
            self.committing.remove(&epoch);
            self.report_finished(out);
        }
    }

    /// A one-round commit whose chain lost a replica: the survivor says whether it committed
    /// (the primary, or the last replica that committed first; the failed one can no longer
    /// commit anything). With no survivor the outcome is unknown to the client.
    fn fast_failed(&mut self, id: u64, dead: &dyn Fn(&Addr) -> bool, out: &mut Out) {
        let version = self.cluster.version;
        let txn = self.txns.get_mut(&id).expect("present");
        let chain = txn.participants[0].clone();
        if txn.state == (State::FastCommit { resolving: true }) && !chain.iter().any(dead) {
            return; // the survivor asked is still there: its answer comes
        }
        match chain.iter().find(|a| !dead(a)) {
            Some(&m) if chain.len() > 1 => {
                txn.state = State::FastCommit { resolving: true };
                txn.participants = vec![vec![m]];
                txn.awaiting = BTreeSet::from([vec![m]]);
                out.send(m, Signal::Resolve { txn: TxnRef { tc: self.addr, id }, map_version: version });
            }
            _ => {
                let e = TernError::new(ErrorCode::NodeFailure, "every replica of the transaction's data failed");
                self.fast_aborted(id, e, out);
            }
        }
    }

    fn fast_aborted(&mut self, id: u64, e: TernError, out: &mut Out) {
        let txn = self.txns.get_mut(&id).expect("present");
        let (client, req_id, ctx, orphan, epoch) = (txn.client, txn.req_id, txn.client_txn, txn.orphan, txn.epoch);
        self.forget(id);
        NodeStats::count(&self.stats.aborts);
        if !orphan {
            out.reply(client, req_id, txn_reply(ctx, Vec::new(), Outcome::Aborted(e)));
        }
        self.uncount(epoch, out);
    }

    fn aborted(&mut self, tref: TxnRef, chain: Vec<Addr>, out: &mut Out) {
        let Some(txn) = self.txns.get_mut(&tref.id) else {
            return;
        };
        if txn.state == (State::FastCommit { resolving: true }) {
            if txn.awaiting.contains(&chain) {
                let e = TernError::new(ErrorCode::NodeFailure, "a data node failed during the transaction; retry it");
                self.fast_aborted(tref.id, e, out);
            }
            return;
        }
        if txn.state != State::Aborting || !txn.awaiting.remove(&chain) {
            return;
        }
        if txn.awaiting.is_empty() {
            self.finish_abort(tref.id, out);
        }
    }

    fn finish_abort(&mut self, id: u64, out: &mut Out) {
        let txn = self.txns.get_mut(&id).expect("present");
        let outcome = match txn.abort_reason.take() {
            Some(e) => Outcome::Aborted(e),
            None => Outcome::RolledBack,
        };
        NodeStats::count(&self.stats.aborts);
        let reply = txn_reply(txn.client_txn, std::mem::take(&mut txn.results), outcome);
        let (client, req_id, orphan) = (txn.client, txn.req_id, txn.orphan);
        self.forget(id);
        if !orphan {
            out.reply(client, req_id, reply);
        }
    }

    fn forget(&mut self, id: u64) {
        if let Some(t) = self.txns.remove(&id) {
            self.by_client.remove(&(t.client, t.client_txn));
        }
    }

    /// Ends a scan with an error: now if its client waits for a batch, else at its next request
    /// (a reply now would answer a request already answered, and the next one would find the
    /// scan gone and take it for finished).
    fn fail_scan(&mut self, key: (ClientId, u64), e: TernError, out: &mut Out) {
        let Some(s) = self.scans.get(&key) else { return };
        let (client, req_id, waiting) = (s.client, s.req_id, s.waiting);
        self.drop_scan(key);
        if waiting {
            out.reply(client, req_id, Reply::Error(e));
        } else {
            self.failed_scans.insert(key, e);
        }
    }

    fn drop_scan(&mut self, key: (ClientId, u64)) {
        if let Some(s) = self.scans.remove(&key) {
            self.scan_ids.remove(&s.local);
        }
    }

    fn client_gone(&mut self, client: ClientId, out: &mut Out) {
        let gone: Vec<(ClientId, u64)> = self.scans.keys().filter(|(c, _)| *c == client).copied().collect();
        for k in gone {
            self.drop_scan(k);
        }
        self.failed_scans.retain(|(c, _), _| *c != client);
        self.aborted_idle.retain(|(c, _), _| *c != client);
        self.log_client_gone(client, out);
        // Ordered, so the aborts go out in the same order in every run (the kernel's rule).
        let mut ids: Vec<u64> = self.txns.iter().filter(|(_, t)| t.client == client).map(|(id, _)| *id).collect();
        ids.sort_unstable();
        for id in ids {
            let t = self.txns.get_mut(&id).expect("listed");
            t.orphan = true;
            if t.state == State::Idle {
                self.start_abort(id, None, out);
            }
        }
    }

    fn expire_idle(&mut self, out: &mut Out) {
        let now_ms = self.now_ms;
        let timeout = self.cfg.inactive_timeout_ms;
        let mut ids: Vec<u64> = self
            .txns
            .iter()
            .filter(|(_, t)| t.state == State::Idle && now_ms.saturating_sub(t.last_active_ms) > timeout)
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        for id in ids {
            let t = self.txns.get_mut(&id).expect("listed");
            t.orphan = true;
            NodeStats::count(&self.stats.inactive_timeouts);
            let e =
                TernError::new(ErrorCode::TransactionTimeout, "transaction was aborted after being inactive too long");
            self.aborted_idle.insert((t.client, t.client_txn), e);
            self.start_abort(id, None, out);
        }
    }

    // ---------------------------------------------------------------- node failures

    /// A new cluster map. Data nodes that left the write chains have failed (the management
    /// nodes declared them so only after they stopped serving): transactions touching them
    /// abort if they had not reached their commit point, and finish committing on the surviving
    /// replicas if they had (ndb-protocols.md §1.7); scans reading them fail; and the master's
    /// tc 0 takes over the transactions they coordinated.
    fn cluster_map(&mut self, state: Arc<ClusterState>, out: &mut Out) {
        if state.version <= self.cluster.version {
            return;
        }
        let old = std::mem::replace(&mut self.cluster, state);
        self.set_routing();
        if old.nodes != self.cluster.nodes {
            self.log_map_changed();
        }
        let failed: Vec<NodeId> = self.cluster.failed_since(&old);
        if failed.is_empty() {
            return;
        }
        self.log_nodes_failed(&failed, out);
        let version = self.cluster.version;
        let dead = |a: &Addr| failed.contains(&a.node);
        let err = TernError::new(ErrorCode::NodeFailure, "a data node failed during the transaction; retry it");
        let mut ids: Vec<u64> = self.txns.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let txn = self.txns.get_mut(&id).expect("listed");
            let affected = txn.chains.iter().chain(txn.participants.iter()).any(|c| c.iter().any(dead));
            if !affected {
                continue;
            }
            let tref = TxnRef { tc: self.addr, id };
            match txn.state {
                State::FastCommit { .. } => self.fast_failed(id, &dead, out),
                State::Preparing => {
                    // Prepares through a failed node will never be answered.
                    txn.pending.retain(|_, c| !c.iter().any(dead));
                    txn.doomed = Some(err.clone());
                    if txn.pending.is_empty() {
                        self.wave_done(id, out);
                    }
                }
                State::Idle => {
                    txn.doomed = Some(err.clone());
                    txn.orphan = true;
                    self.aborted_idle.insert((txn.client, txn.client_txn), err.clone());
                    self.start_abort(id, Some(err.clone()), out);
                }
                State::WaitEpoch => {
                    self.gate_queue.retain(|&q| q != id);
                    txn.doomed = Some(err.clone());
                    self.start_abort(id, Some(err.clone()), out);
                }
                State::Committing => {
                    // Past the commit point: finish on every surviving replica, one by one.
                    let epoch = txn.epoch;
                    let broken: Vec<Vec<Addr>> = txn.awaiting.iter().filter(|c| c.iter().any(dead)).cloned().collect();
                    for chain in broken {
                        txn.awaiting.remove(&chain);
                        for &m in chain.iter().filter(|a| !dead(a)) {
                            txn.awaiting.insert(vec![m]);
                            out.send(
                                m,
                                Signal::Commit { txn: tref, epoch, chain: vec![m], pos: 0, results: Vec::new() },
                            );
                        }
                    }
                    let mut parts = Vec::new();
                    for chain in std::mem::take(&mut txn.participants) {
                        if chain.iter().any(dead) {
                            parts.extend(chain.iter().filter(|a| !dead(a)).map(|&m| vec![m]));
                        } else {
                            parts.push(chain);
                        }
                    }
                    txn.participants = parts;
                    if txn.awaiting.is_empty() {
                        // Every replica of what was left is gone (a whole node group failed).
                        let last = txn.participants.first().cloned().unwrap_or_else(|| vec![self.addr]);
                        txn.awaiting.insert(last.clone());
                        self.committed(tref, last, Vec::new(), out);
                    }
                }
                State::Aborting => {
                    let broken: Vec<Vec<Addr>> = txn.awaiting.iter().filter(|c| c.iter().any(dead)).cloned().collect();
                    for chain in broken {
                        txn.awaiting.remove(&chain);
                        for &m in chain.iter().filter(|a| !dead(a)) {
                            txn.awaiting.insert(vec![m]);
                            out.send(m, Signal::Abort { txn: tref, chain: vec![m], pos: 0, map_version: version });
                        }
                    }
                    if txn.awaiting.is_empty() {
                        self.finish_abort(id, out);
                    }
                }
            }
        }
        self.fail_scans(&failed, out);
        // The master's first tc takes over what the failed nodes coordinated (all nodes that
        // are down when the master itself changed: the old master may not have finished).
        let takeover_by_me = self.cluster.master() == Some(self.addr.node) && self.addr.block == Block::Tc(0);
        if takeover_by_me {
            let set = if old.master() != self.cluster.master() {
                self.cluster.nodes.iter().filter(|(_, s)| !s.state.in_chains()).map(|(&n, _)| n).collect()
            } else {
                failed.clone()
            };
            self.start_takeover(set, out);
        } else if self.takeover.is_some() {
            self.takeover_forget(&failed, out);
        }
    }

    /// Nodes failed while a takeover runs: their reports will not come and their answers are
    /// not awaited. The takeover goes on with what the others reported (a report set emptied
    /// this way still has its transactions resolved).
    fn takeover_forget(&mut self, failed: &[NodeId], out: &mut Out) {
        let Some(t) = self.takeover.as_mut() else { return };
        let dead = |a: &Addr| failed.contains(&a.node);
        t.reports.retain(|a| !dead(a));
        t.awaiting.retain(|(_, c)| !c.iter().any(dead));
        for e in t.txns.values_mut() {
            e.prepared.retain(|a| !dead(a));
            e.committed.retain(|a| !dead(a));
        }
        self.takeover_step(out);
    }

    /// Scans with a fragment on a failed node fail with a temporary error (as NDB's 4028-class
    /// node-failure errors); the client restarts them.
    fn fail_scans(&mut self, failed: &[NodeId], out: &mut Out) {
        let mut hit: Vec<(ClientId, u64)> = self
            .scans
            .iter()
            .filter(|(_, s)| {
                s.parts.iter().any(|(&p, ps)| {
                    // A full scan's row-id position means something only at its replica.
                    let lost = ps.target.is_some_and(|a| failed.contains(&a.node));
                    lost && (ps.outstanding || matches!(ps.pos, ScanPos::RowId(_)))
                        || (ps.pos != ScanPos::Done && self.chain_of(s.req.table, p).addrs.is_empty())
                })
            })
            .map(|(k, _)| *k)
            .collect();
        hit.sort_unstable();
        for key in hit {
            let e = TernError::new(ErrorCode::NodeFailure, "a data node failed during the scan; restart it");
            self.fail_scan(key, e, out);
        }
    }

    fn start_takeover(&mut self, mut failed: Vec<NodeId>, out: &mut Out) {
        if self.takeover.is_some() {
            // One takeover at a time: drop answers from the newly failed, queue their takeover.
            self.takeover_queue.extend(failed.iter().copied());
            self.takeover_forget(&failed, out);
            return;
        }
        failed.sort_unstable();
        failed.dedup();
        let n = self.ldm_count;
        let reports: BTreeSet<Addr> = self
            .cluster
            .live_nodes()
            .into_iter()
            .flat_map(|node| (0..n).map(move |i| Addr::new(node, Block::Ldm(i))))
            .collect();
        let version = self.cluster.version;
        for &l in &reports {
            out.send(l, Signal::TakeoverReq { from: self.addr, failed: failed.clone(), map_version: version });
        }
        self.takeover =
            Some(Takeover { failed, reports, txns: BTreeMap::new(), awaiting: BTreeSet::new(), map_version: version });
    }

    fn takeover_conf(&mut self, from: Addr, txns: Vec<(TxnRef, TakeoverState)>, out: &mut Out) {
        let Some(t) = self.takeover.as_mut() else { return };
        if !t.reports.remove(&from) {
            return;
        }
        for (txn, st) in txns {
            let e = t.txns.entry(txn).or_default();
            match st {
                TakeoverState::Prepared => {
                    e.prepared.insert(from);
                }
                TakeoverState::Committed { epoch } => {
                    assert!(e.epoch.is_none_or(|x| x == epoch), "{txn:?} committed in two epochs");
                    e.committed.insert(from);
                    e.epoch = Some(epoch);
                }
            }
        }
        if t.reports.is_empty() {
            self.takeover_resolve(out);
        }
    }

    /// Every report is in: commit each transaction some participant committed (in that epoch),
    /// abort the rest (ndb-protocols.md §2.4: commit iff a live participant committed).
    fn takeover_resolve(&mut self, out: &mut Out) {
        let version = self.cluster.version;
        let t = self.takeover.as_mut().expect("running");
        for (txn, TakenOver { prepared, committed, epoch }) in std::mem::take(&mut t.txns) {
            for &l in prepared.iter().chain(committed.iter()) {
                t.awaiting.insert((txn, vec![l]));
                let sig = match epoch {
                    Some(epoch) => Signal::Commit { txn, epoch, chain: vec![l], pos: 0, results: Vec::new() },
                    None => Signal::Abort { txn, chain: vec![l], pos: 0, map_version: version },
                };
                out.send(l, sig);
            }
        }
        self.takeover_step(out);
    }

    /// A commit or abort of a taken-over transaction was answered (by a replica now holding
    /// nothing of it but, after a commit, a marker that the Complete sent here removes).
    fn takeover_answer(&mut self, txn: TxnRef, chain: Vec<Addr>, committed: bool, out: &mut Out) {
        let Some(t) = self.takeover.as_mut() else { return };
        if !t.awaiting.remove(&(txn, chain.clone())) {
            return;
        }
        if committed {
            out.send(chain[0], Signal::Complete { txn, chain: chain.clone(), pos: 0 });
        }
        self.takeover_step(out);
    }

    fn takeover_step(&mut self, out: &mut Out) {
        let Some(t) = self.takeover.as_ref() else { return };
        if !t.reports.is_empty() {
            return;
        }
        if !t.txns.is_empty() {
            // The last reports were dropped (their nodes failed): resolve with the others'.
            self.takeover_resolve(out); // comes back here
            return;
        }
        if !t.awaiting.is_empty() {
            return;
        }
        let Takeover { failed, map_version, .. } = self.takeover.take().expect("running");
        out.send(Addr::new(self.addr.node, Block::Dist), Signal::TakeoverDone { from: self.addr, failed, map_version });
        if !self.takeover_queue.is_empty() {
            let next = std::mem::take(&mut self.takeover_queue);
            self.start_takeover(next, out);
        }
    }

    // ---------------------------------------------------------------- scans

    fn scan_start(&mut self, client: ClientId, req_id: u64, mut req: ScanReq, out: &mut Out) {
        let fail =
            |out: &mut Out, code, msg: String| out.reply(client, req_id, Reply::Error(TernError::new(code, msg)));
        let Some(t) = self.catalog.table(req.table) else {
            return fail(out, ErrorCode::NoSuchTable, format!("table id {} does not exist", req.table));
        };
        if let Some(i) = req.index
            && !t.indexes.iter().any(|x| x.id == i)
        {
            return fail(out, ErrorCode::NoSuchIndex, format!("index id {i} does not exist on {}", t.name));
        }
        if req.filter.max_column().is_some_and(|c| c as usize >= t.columns.len())
            || req.projection.as_ref().is_some_and(|p| p.iter().any(|&c| c as usize >= t.columns.len()))
        {
            return fail(out, ErrorCode::NoSuchColumn, "scan names a column the table does not have".into());
        }
        if req.index.is_none() && !req.ranges.is_empty() {
            return fail(out, ErrorCode::InvalidRequest, "index ranges given for a scan without an index".into());
        }
        if req.offset > 0 && (req.index.is_none() || (req.partition.is_none() && t.partition_count > 1)) {
            return fail(out, ErrorCode::InvalidRequest, "an offset needs an index scan of one partition".into());
        }
        if self.scans.len() >= self.cfg.scans_max {
            return fail(out, ErrorCode::Overloaded, "too many open scans at this node".into());
        }
        let parts: Vec<u32> = match req.partition {
            Some(p) if p < t.partition_count => vec![p],
            Some(p) => {
                return fail(out, ErrorCode::InvalidRequest, format!("partition {p} does not exist"));
            }
            None => (0..t.partition_count).collect(),
        };
        self.next_id += 1;
        let local = self.next_id;
        let key = (client, req.scan);
        if self.scans.contains_key(&key) {
            return fail(out, ErrorCode::InvalidRequest, format!("scan {} is already open", req.scan));
        }
        self.failed_scans.remove(&key);
        let ranges = match std::mem::take(&mut req.ranges) {
            r if r.is_empty() => vec![(req.lo.clone(), req.hi.clone())],
            r => r,
        };
        let scan = Scan {
            local,
            client,
            req_id,
            ranges: Arc::new(ranges),
            filter: Arc::new(req.filter.clone()),
            projection: req.projection.clone().map(Arc::new),
            parts: parts
                .into_iter()
                .map(|p| {
                    (p, PartScan { pos: ScanPos::Start, outstanding: false, target: None, rows: Default::default() })
                })
                .collect(),
            sent: 0,
            waiting: true,
            out: Vec::new(),
            req,
        };
        self.scans.insert(key, scan);
        self.scan_ids.insert(local, key);
        self.scan_pump(key, out);
    }

    fn scan_next(&mut self, client: ClientId, req_id: u64, scan: u64, out: &mut Out) {
        if let Some(e) = self.failed_scans.remove(&(client, scan)) {
            return out.reply(client, req_id, Reply::Error(e));
        }
        match self.scans.get_mut(&(client, scan)) {
            None => out.reply(client, req_id, Reply::ScanRows { scan, rows: Vec::new(), done: true }),
            Some(s) => {
                s.req_id = req_id;
                s.waiting = true;
                self.scan_pump((client, scan), out);
            }
        }
    }

    fn scan_rows(&mut self, r: ScanFragRows, out: &mut Out) {
        let Some(&key) = self.scan_ids.get(&r.scan) else {
            return;
        };
        let Some(s) = self.scans.get_mut(&key) else {
            return;
        };
        if !s.parts.get(&r.partition).is_some_and(|p| p.outstanding) {
            return;
        }
        if let Some(e) = r.error {
            self.fail_scan(key, e, out);
            return;
        }
        let p = s.parts.get_mut(&r.partition).expect("checked");
        // While the ldm goes on by itself (an aggregating scan) the request stays outstanding.
        p.outstanding = r.more;
        p.pos = r.next;
        let keys = if r.keys.len() == r.rows.len() { r.keys } else { vec![Vec::new(); r.rows.len()] };
        p.rows.extend(keys.into_iter().zip(r.rows));
        self.scan_pump(key, out);
    }

    /// Moves a scan forward: emits rows the client may have, fetches more where needed, and
    /// answers the client once a batch is full or the scan is finished.
    fn scan_pump(&mut self, key: (ClientId, u64), out: &mut Out) {
        let tc = self.addr;
        let (chains, part_chains) = (&self.chains, &self.part_chains);
        let s = self.scans.get_mut(&key).expect("present");
        let table_chains = part_chains.get(&s.req.table);
        if !s.waiting {
            return;
        }
        let batch = s.req.batch_rows.clamp(1, tern_wire::SCAN_BATCH_ROWS_MAX) as usize;
        let limit = if s.req.limit == 0 { u64::MAX } else { s.req.limit };
        let ordered = s.req.ordered && s.req.index.is_some();
        // Emit what can be emitted.
        loop {
            if s.out.len() >= batch || s.sent + s.out.len() as u64 >= limit {
                break;
            }
            let next = if ordered {
                // A row may go out only when every unfinished partition has a row buffered.
                let blocked = s.parts.values().any(|p| p.rows.is_empty() && p.pos != ScanPos::Done);
                if blocked {
                    None
                } else {
                    let desc = s.req.descending;
                    s.parts
                        .iter()
                        .filter(|(_, p)| !p.rows.is_empty())
                        .min_by(|a, b| {
                            let o = a.1.rows[0].0.cmp(&b.1.rows[0].0);
                            if desc { o.reverse() } else { o }
                        })
                        .map(|(k, _)| *k)
                }
            } else {
                s.parts.iter().find(|(_, p)| !p.rows.is_empty()).map(|(k, _)| *k)
            };
            match next {
                Some(pk) => {
                    let (_, row) = s.parts.get_mut(&pk).expect("found").rows.pop_front().expect("non-empty");
                    s.out.push(row);
                }
                None => break,
            }
        }
        let all_done = s.parts.values().all(|p| p.pos == ScanPos::Done && p.rows.is_empty());
        let limit_hit = s.sent + s.out.len() as u64 >= limit;
        if s.out.len() >= batch || all_done || limit_hit {
            let rows = std::mem::take(&mut s.out);
            s.sent += rows.len() as u64;
            s.waiting = false;
            let done = all_done || limit_hit;
            let (client, req_id, scan) = (s.client, s.req_id, s.req.scan);
            if done {
                self.drop_scan(key);
            }
            out.reply(client, req_id, Reply::ScanRows { scan, rows, done });
            return;
        }
        // Fetch from partitions whose buffers ran dry.
        let with_keys = ordered;
        let max_rows = batch as u32;
        let mut unreachable = false;
        for (&partition, p) in s.parts.iter_mut() {
            if p.rows.is_empty() && !p.outstanding && p.pos != ScanPos::Done {
                // A scan goes on where it began while that replica is in the chain (its row-id
                // positions mean nothing elsewhere; a move's source serves a scan it began until
                // it leaves), else it starts at the primary.
                let chain = table_chains.and_then(|v| v.get(partition as usize)).map(|&i| &chains[i as usize]);
                let sticky = p
                    .target
                    .filter(|t| matches!(p.pos, ScanPos::RowId(_)) && chain.is_some_and(|c| c.addrs.contains(t)));
                let Some(to) = sticky.or_else(|| chain.and_then(|c| c.addrs[..c.readable].first().copied())) else {
                    unreachable = true;
                    break;
                };
                p.outstanding = true;
                p.target = Some(to);
                let frag = ScanFrag {
                    scan: s.local,
                    reply_to: tc,
                    table: s.req.table,
                    partition,
                    index: s.req.index,
                    ranges: s.ranges.clone(),
                    filter: s.filter.clone(),
                    projection: s.projection.clone(),
                    descending: s.req.descending,
                    max_rows,
                    resume: p.pos.clone(),
                    with_keys,
                    expired: s.req.expired,
                    aggregate: s.req.aggregate.clone().map(Arc::new),
                    steps: if s.req.aggregate.is_some() { AGG_STEPS_AHEAD } else { 0 },
                    offset: if p.pos == ScanPos::Start { s.req.offset } else { 0 },
                };
                out.send(to, Signal::ScanFrag(Box::new(frag)));
            }
        }
        if unreachable {
            let (client, req_id) = (s.client, s.req_id);
            self.drop_scan(key);
            let e = TernError::new(ErrorCode::NodeFailure, "a partition of the table has no live replica");
            out.reply(client, req_id, Reply::Error(e));
        }
    }
}

/// A replica chain as the tc routes it: ldm addresses, primary first; the first `readable` may
/// serve reads (the others copy, or leave after a move).
#[derive(Debug, Default)]
struct TcChain {
    addrs: Vec<Addr>,
    readable: usize,
}

/// The name of the unique index an index table enforces.
fn index_name_of(catalog: &Catalog, index_table: TableId) -> String {
    let Some((&index, _)) = catalog.index_tables.iter().find(|(_, t)| **t == index_table) else {
        return "unique".into();
    };
    catalog
        .tables
        .values()
        .flat_map(|t| t.indexes.iter())
        .find(|i| i.id == index)
        .map(|i| i.name.clone())
        .unwrap_or_else(|| "unique".into())
}

fn txn_reply(txn: u64, results: Vec<OpResult>, outcome: Outcome) -> Reply {
    Reply::Txn(TxnResp { txn, results, outcome })
}
