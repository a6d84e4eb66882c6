//! Deterministic simulator: drives the kernel blocks of a cluster of data nodes (node groups of
//! `replicas` nodes) from a seed on one thread, with a simulated clock, a simulated disk that loses unsynced writes on a crash (keeping a random,
//! possibly damaged, prefix of them), random signal and disk delays (FIFO per link), simulated
//! clients, random crashes and recoveries.
//!
//! After every recovery it checks the invariants of architecture.md §5 against an oracle built from
//! the signals it saw (the ops each transaction prepared and the epoch each commit point took):
//! the recovered database must equal the state after exactly the transactions of epochs up to the
//! durable epoch, applied in commit order (atomicity, durability, consistent recovery), and every
//! commit acknowledged as durable must be in it. While running, every read must return a value
//! written by a transaction that had already reached its commit point (committed reads); and at
//! the end of every cluster life the reads of each key must be linearizable against its version
//! order (`linear`). Network partitions between data nodes (cut links, heartbeats, arbitration)
//! and per-node clock skew are optional faults (`SimConfig`).
//!
//! A failing run panics with its seed; `Sim::run(seed)` reproduces it exactly.

pub mod linear;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use tern_kernel::io::{IoExecutor, Storage};
use tern_kernel::signal::{Addr, Block, ControlReq, IoReq, NodeId, Out, Signal, TxnRef};
use tern_kernel::{Node, NodeConfig};
use tern_types::cluster::{ClusterConfig, ClusterState, DataNodeSpec, NodeState};
use tern_types::rng::Rng;
use tern_types::schema::{Column, ColumnType, Table};
use tern_types::{RowLayout, Value};
use tern_wire::{
    AbortOption, ColumnUpdate, DdlReq, Exec, KeyOp, OpKind, OpResult, Outcome, Reply, Request, ScanReq, TxnReq,
    UpdateExpr,
};

/// An in-memory disk: each file has the bytes written so far and the prefix known durable.
#[derive(Default, Clone)]
pub struct SimDisk {
    files: BTreeMap<String, (Vec<u8>, usize)>,
}

impl SimDisk {
    /// Loses what was not synced: each file keeps its durable prefix plus a random part of the rest,
    /// whose last bytes may be damaged (a torn write).
    pub fn crash(&mut self, rng: &mut Rng) {
        for (data, durable) in self.files.values_mut() {
            let extra = data.len() - *durable;
            let keep = if extra == 0 { 0 } else { rng.below(extra as u64 + 1) as usize };
            data.truncate(*durable + keep);
            if keep > 0 && rng.chance(50) {
                let at = *durable + rng.below(keep as u64) as usize;
                data[at] ^= 0x5A;
            }
        }
    }

    pub fn file_names(&self) -> Vec<String> {
        self.files.keys().cloned().collect()
    }

    /// Flips a byte of a file (for corruption tests).
    pub fn damage(&mut self, name: &str, offset: usize) {
        let f = self.files.get_mut(name).expect("file exists");
        f.0[offset] ^= 0xFF;
    }

    /// Appends bytes to a file without syncing them (a torn tail).
    pub fn append_garbage(&mut self, name: &str, bytes: &[u8]) {
        self.files.get_mut(name).expect("file exists").0.extend_from_slice(bytes);
    }
}

impl Storage for SimDisk {
    fn append(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.files.entry(name.to_string()).or_default().0.extend_from_slice(bytes);
        Ok(())
    }
    fn sync(&mut self, name: &str) -> io::Result<()> {
        if let Some(f) = self.files.get_mut(name) {
            f.1 = f.0.len();
        }
        Ok(())
    }
    fn write_atomic(&mut self, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.files.insert(name.to_string(), (bytes.to_vec(), bytes.len()));
        Ok(())
    }
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>> {
        Ok(self.files.get(name).map(|f| f.0.clone()))
    }
    fn list(&self, dir: &str) -> io::Result<Vec<String>> {
        let prefix = format!("{dir}/");
        Ok(self.files.keys().filter(|k| k.starts_with(&prefix)).cloned().collect())
    }
    fn delete(&mut self, name: &str) -> io::Result<()> {
        self.files.remove(name);
        Ok(())
    }
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()> {
        match self.files.remove(from) {
            Some(f) => {
                self.files.insert(to.to_string(), f);
                Ok(())
            }
            None => Err(io::Error::new(io::ErrorKind::NotFound, from.to_string())),
        }
    }
}

/// Simulation knobs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Data nodes (a multiple of `replicas`) and replicas per node group.
    pub data_nodes: u16,
    pub replicas: u8,
    pub ldm_count: u16,
    pub clients: u32,
    pub keys: u64,
    pub duration_ms: u64,
    pub crash_every_ms: u64,
    /// Kill one data node (never the last live one of its node group) about this often; 0 = never.
    pub fail_every_ms: u64,
    /// Restart a failed node this long after it failed (node restart with copy); 0 = never.
    pub restart_after_ms: u64,
    pub epoch_interval_ms: u64,
    pub data_memory_bytes: u64,
    /// Cut the links between two data nodes (both directions, losing what was in flight) about
    /// this often; 0 = never. The data nodes' heartbeats stop, one of them suspects the other,
    /// and the modelled control plane fails one (`ClusterState::choose_victim`).
    pub partition_every_ms: u64,
    /// Each node's clock runs at its own rate (±5 %) from its own offset.
    pub clock_skew: bool,
    /// A schema change (CREATE DATABASE through a random node's tc) about this often; 0 = never.
    /// Every acknowledged one must be in every started node's catalog and the management
    /// nodes' at every check.
    pub ddl_every_ms: u64,
    /// A (re)starting node's local start (recovery from its disk, before its dist starts) takes
    /// a random time up to this; meanwhile its blocks already receive the other nodes' signals,
    /// as a real node's do once its transporter is up. 0 = every node starts at once.
    pub boot_spread_ms: u64,
    /// The table is READ_BACKUP (key reads of a transaction that holds nothing go to a backup
    /// on the coordinator's node). Such reads may see a commit before its primary does, so the
    /// linearizability check is off; every value a replica returns must still be committed.
    pub read_backup: bool,
    /// The table has a unique index (every write also writes its index table, in a second
    /// wave: no one-round commits).
    pub unique_index: bool,
    /// Online scale-out: the last node group starts empty (not active). Early in the run the
    /// modelled control plane activates it and reorganises every table (partitions move there
    /// under whatever faults come), and past the middle takes it out again (they move back).
    pub scale_out: bool,
    /// How often a backup is begun when none runs.
    pub backup_every_ms: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            data_nodes: 1,
            replicas: 1,
            ldm_count: 3,
            clients: 4,
            keys: 40,
            duration_ms: 8_000,
            crash_every_ms: 1_500,
            fail_every_ms: 0,
            restart_after_ms: 0,
            epoch_interval_ms: 20,
            data_memory_bytes: 1 << 30,
            partition_every_ms: 0,
            clock_skew: false,
            ddl_every_ms: 250,
            boot_spread_ms: 0,
            read_backup: false,
            unique_index: true,
            scale_out: false,
            backup_every_ms: 1_500,
        }
    }
}

// (Simulator events: a signal inline is what most of them are; boxing it would only add work.)
#[allow(clippy::large_enum_variant)]
enum Event {
    /// `from`: the sending node (None: a client or the simulator), so a failed node's signals
    /// still in flight can be dropped.
    Deliver {
        from: Option<NodeId>,
        to: Addr,
        sig: Signal,
        incarnation: u32,
    },
    Io {
        from: Addr,
        req: IoReq,
        incarnation: u32,
    },
    Reply {
        client: u64,
        req_id: u64,
        reply: Reply,
        incarnation: u32,
    },
    ClientWake {
        client: u64,
        incarnation: u32,
    },
    /// A block's request reaching the control plane (after a delay, sometimes twice), from the
    /// node's incarnation `node_incarnation` (a request of an earlier life is refused, as the
    /// management nodes refuse stale incarnations).
    Control {
        node: NodeId,
        node_incarnation: u32,
        req: ControlReq,
        incarnation: u32,
    },
}

/// A row of the test table: id -> (a, b).
type Row = (i64, Option<i64>);

#[derive(Clone, Debug)]
enum ModelOp {
    Put(i64, Row),
    Insert(i64, Row),
    Delete(i64),
    SetA(i64, i64),
}

impl ModelOp {
    fn key(&self) -> i64 {
        match self {
            ModelOp::Put(k, _) | ModelOp::Insert(k, _) | ModelOp::Delete(k) | ModelOp::SetA(k, _) => *k,
        }
    }
}

/// A transaction: (incarnation, coordinator node, tc instance, txn id).
type TxnKey = (u32, NodeId, u16, u64);

/// One simulated data node: its disk and, while running, its blocks and disk executor.
struct SimNode {
    disk: SimDisk,
    node: Option<Node>,
    io: Option<IoExecutor<SimDisk>>,
    io_time: u64,
}

#[derive(Default)]
struct Oracle {
    /// Ops seen in Prepare signals, by transaction.
    ops: HashMap<TxnKey, Vec<ModelOp>>,
    /// Commit points in order: (txn key, epoch).
    commits: Vec<(TxnKey, u64)>,
    committed: BTreeSet<TxnKey>,
    /// The nodes whose ldms handled a `Commit` of a committed transaction: one whose commits all
    /// died with their nodes was never committed anywhere that survives (its coordinator died
    /// too, or finishes it later on the survivors), so it leaves the committed set until a
    /// survivor commits it.
    commit_nodes: HashMap<TxnKey, BTreeSet<NodeId>>,
    /// The nodes of the chains the transaction's `Commit`s went along: once all handled one, it
    /// is committed on every replica of its time (a node joining later gets it by copy).
    commit_chains: HashMap<TxnKey, BTreeSet<NodeId>>,
    /// Stamps (column `a` values) of committed transactions.
    committed_stamps: BTreeSet<i64>,
    stamp_of: HashMap<TxnKey, BTreeSet<i64>>,
    /// One-round commits the last replica committed (it sent `Commit` up the chain before any
    /// replica handled one): the epoch, for when its primary failed and it answers `Resolve`.
    fast_epoch: HashMap<TxnKey, u64>,
    /// The read ops of each prepare batch in flight, by (transaction, batch): what a replica
    /// answers for them must be committed already when it answers.
    read_ops: HashMap<(TxnKey, u32), Vec<u32>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientState {
    Idle,
    Waiting,
    Scanning,
}

struct SimClient {
    state: ClientState,
    seq: u64,
    next_txn: u64,
    /// Durable commits acknowledged: stamp -> epoch.
    pending: Option<(u64, bool)>,
    /// Which operations of the batch in flight write.
    write_ops: Vec<bool>,
    /// A write of the open transaction took effect (so its commit has something to make durable).
    wrote: bool,
    /// The tc coordinating the open transaction (every batch of it goes there).
    tc: Option<Addr>,
    /// Linearizability history: when the request in flight was sent, the key of each read op of
    /// a read-only batch, the stamps the batch in flight writes and those of the open
    /// transaction.
    sent_at: u64,
    read_keys: Vec<Option<i64>>,
    batch_stamps: Vec<i64>,
    txn_stamps: Vec<i64>,
}

pub struct Sim {
    pub seed: u64,
    cfg: SimConfig,
    rng: Rng,
    now: u64,
    seq: u64,
    events: BTreeMap<(u64, u64), Event>,
    link_time: HashMap<(Addr, Addr), u64>,
    /// Node pairs (lower id first) whose links are cut: every signal between them is lost.
    cut: BTreeSet<(NodeId, NodeId)>,
    /// Per node: clock offset (ms) and rate (per mille of the simulator's clock).
    clocks: BTreeMap<NodeId, (u64, u64)>,
    /// This cluster life's single-key history: reads, and when each written stamp's commit was
    /// acknowledged (see `linear`).
    lin_reads: Vec<linear::Read>,
    lin_acks: HashMap<i64, u64>,
    log_enabled: bool,
    /// `TERN_SIM_KEY`: log every prepare and commit point touching this key.
    log_key: Option<i64>,
    /// `TERN_SIM_TXN` (a transaction id) and `TERN_SIM_EPOCH`: log their signals.
    log_txn: Option<u64>,
    log_epoch: Option<u64>,
    cluster: std::sync::Arc<ClusterState>,
    /// The catalog the modelled management nodes own (kept across whole-cluster crashes).
    mgm_catalog: Option<std::sync::Arc<tern_types::Catalog>>,
    nodes: BTreeMap<NodeId, SimNode>,
    incarnation: u32,
    started_nodes: BTreeSet<NodeId>,
    table: Option<Table>,
    pending_table: Option<Table>,
    layout: Option<RowLayout>,
    clients: Vec<SimClient>,
    oracle: Oracle,
    /// Committed state as of the last recovery.
    base: BTreeMap<i64, Row>,
    durable_acks: Vec<(i64, u64)>,
    scan_rows: Vec<Vec<u8>>,
    verifying: bool,
    verify_table: u32,
    /// The aggregation the verification scan pushes (None: a plain scan).
    verify_agg: Option<tern_agg::Aggregation>,
    index_table: Option<Table>,
    pub stats: SimStats,
    /// A node failure is due (since then).
    armed_since: Option<u64>,
    /// The node to fail at the next step (chosen at an interesting moment).
    strike: Option<NodeId>,
    /// Failed nodes to restart, and when.
    restarts: Vec<(u64, NodeId)>,
    /// With staggered starts (`boot_spread_ms`): when to fail the master while the others may
    /// still be starting (once after every boot).
    fail_in_start: Option<u64>,
    /// Waiting for the nodes of a system restart to start (nothing else runs meanwhile).
    booting: bool,
    failed_in_start: bool,
    /// Databases the DDL client created (acknowledged), and the one it waits for.
    ddl_acked: BTreeSet<String>,
    ddl_waiting: Option<String>,
    ddl_seq: u64,
    /// The backup running (client `BACKUP_CLIENT`), and when the next one starts.
    backup: Option<SimBackup>,
    next_backup: u64,
    /// Set while the modelled control plane starts planned moves (`publish` does not plan again).
    /// When each node's blocks get the newest map (the membership thread hands a node the
    /// catalog only after the map that made it master).
    map_at: BTreeMap<NodeId, u64>,
    planning: bool,
}

/// The client id of the simulated `tern backup`.
const BACKUP_CLIENT: u64 = 998;
/// How often a backup starts (simulated ms), and how long it may take before it is given up.
const BACKUP_TIMEOUT_MS: u64 = 20_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BackupPhase {
    Starting,
    Scanning,
    Status,
    /// Polling the log until every ldm's mark reached the end epoch.
    Polling(u64),
}

/// A backup as `tern backup` takes it: change log started, table scanned, end epoch = the tc's
/// current epoch + 1 once the scan ended, log polled until every ldm marked that epoch.
struct SimBackup {
    phase: BackupPhase,
    tc: Addr,
    /// The data nodes' states when it started: a change fails the change log.
    nodes: BTreeMap<NodeId, tern_types::cluster::NodeStatus>,
    /// The partitions' placements when it started: moves that step meanwhile (begin, switch,
    /// end) leave the log running, logged by source and target.
    placed: BTreeMap<(u32, u32), tern_types::cluster::Placed>,
    incarnation: u32,
    started: u64,
    req: u64,
    rows: Vec<Vec<u8>>,
    /// Per (node, ldm): its entries in order, and its newest epoch mark.
    parts: BTreeMap<(u16, u16), (Vec<tern_wire::LogEntry>, u64)>,
}

#[derive(Debug, Default, Clone)]
pub struct SimStats {
    pub crashes: u32,
    pub commits: u64,
    pub aborts: u64,
    pub reads: u64,
    pub verified_rows: u64,
    pub lock_timeouts: u64,
    /// Transactions aborted as deadlock victims (within one ldm or found by probes).
    pub deadlocks: u64,
    pub node_failures: u32,
    pub node_restarts: u32,
    /// Links cut between two data nodes, and suspicions that made the control plane fail one.
    pub partitions: u32,
    pub suspicion_failures: u32,
    /// Reads checked for linearizability against their keys' version order.
    pub linearizable_reads: u64,
    /// Schema changes acknowledged (and checked in every catalog afterwards).
    pub schema_changes: u64,
    /// Backups (change log + scan, `tern backup`'s protocol) whose state at their end epoch was
    /// checked against the oracle, and those given up (a failure, crash or map change met them).
    pub backups_checked: u32,
    pub backups_abandoned: u32,
    /// Backups checked during which partition moves began, switched or ended.
    pub backups_across_moves: u32,
    /// One-round commits: committed by the last replica on staging, dropped back to the ordinary
    /// rounds by a lock wait at the primary (`FastOff`), and settled by a survivor (`Resolve`).
    pub fast_commits: u64,
    pub fast_offs: u64,
    pub resolves: u64,
    /// Partition moves begun and done (`scale_out`).
    pub moves_begun: u64,
    pub moves_done: u64,
}

impl SimStats {
    /// Adds another run's counts (totals over seeds).
    pub fn add(&mut self, o: &SimStats) {
        self.crashes += o.crashes;
        self.commits += o.commits;
        self.aborts += o.aborts;
        self.reads += o.reads;
        self.verified_rows += o.verified_rows;
        self.lock_timeouts += o.lock_timeouts;
        self.deadlocks += o.deadlocks;
        self.node_failures += o.node_failures;
        self.node_restarts += o.node_restarts;
        self.partitions += o.partitions;
        self.suspicion_failures += o.suspicion_failures;
        self.linearizable_reads += o.linearizable_reads;
        self.schema_changes += o.schema_changes;
        self.backups_checked += o.backups_checked;
        self.fast_commits += o.fast_commits;
        self.fast_offs += o.fast_offs;
        self.resolves += o.resolves;
        self.moves_begun += o.moves_begun;
        self.moves_done += o.moves_done;
        self.backups_abandoned += o.backups_abandoned;
        self.backups_across_moves += o.backups_across_moves;
    }
}

impl Sim {
    pub fn new(seed: u64, cfg: SimConfig) -> Sim {
        let first_backup = cfg.backup_every_ms / 2;
        // The last client (when `ddl_every_ms` is set) changes the schema instead.
        let clients = (0..cfg.clients as u64 + u64::from(cfg.ddl_every_ms > 0))
            .map(|id| {
                let _ = id;
                SimClient {
                    state: ClientState::Idle,
                    seq: 0,
                    next_txn: 0,
                    pending: None,
                    write_ops: vec![],
                    wrote: false,
                    tc: None,
                    sent_at: 0,
                    read_keys: Vec::new(),
                    batch_stamps: Vec::new(),
                    txn_stamps: Vec::new(),
                }
            })
            .collect();
        let cluster = std::sync::Arc::new(ClusterState::all_started(ClusterConfig {
            replicas: cfg.replicas,
            data_nodes: (1..=cfg.data_nodes)
                .map(|id| DataNodeSpec { id, host: "sim".into(), port: 0, location_domain: 0 })
                .collect(),
            mgmds: vec![tern_types::cluster::MgmdSpec { id: 65, host: "sim".into(), port: 0 }],
            ldm_workers: cfg.ldm_count,
            epoch_interval_ms: cfg.epoch_interval_ms,
            heartbeat_interval_ms: 100,
            failure_timeout_ms: 1000,
        }));
        cluster.config.validate().expect("a valid simulated cluster");
        let mut cluster = cluster;
        if cfg.scale_out {
            let c = std::sync::Arc::make_mut(&mut cluster);
            assert!(c.groups().len() >= 2, "scale_out needs two node groups");
            c.base_groups = c.groups().len() as u32 - 1;
            c.active_groups = c.base_groups;
        }
        let nodes = (1..=cfg.data_nodes)
            .map(|id| (id, SimNode { disk: SimDisk::default(), node: None, io: None, io_time: 0 }))
            .collect();
        Sim {
            seed,
            log_enabled: std::env::var_os("TERN_SIM_LOG").is_some(),
            log_key: std::env::var("TERN_SIM_KEY").ok().and_then(|k| k.parse().ok()),
            log_txn: std::env::var("TERN_SIM_TXN").ok().and_then(|k| k.parse().ok()),
            log_epoch: std::env::var("TERN_SIM_EPOCH").ok().and_then(|k| k.parse().ok()),
            rng: Rng::new(seed),
            cfg,
            now: 0,
            seq: 0,
            events: BTreeMap::new(),
            link_time: HashMap::new(),
            cut: BTreeSet::new(),
            clocks: BTreeMap::new(),
            lin_reads: Vec::new(),
            lin_acks: HashMap::new(),
            cluster,
            mgm_catalog: None,
            nodes,
            incarnation: 0,
            started_nodes: BTreeSet::new(),
            table: None,
            pending_table: None,
            layout: None,
            clients,
            oracle: Oracle::default(),
            base: BTreeMap::new(),
            durable_acks: Vec::new(),
            scan_rows: Vec::new(),
            verifying: false,
            verify_table: 0,
            verify_agg: None,
            index_table: None,
            stats: SimStats::default(),
            armed_since: None,
            strike: None,
            restarts: Vec::new(),
            fail_in_start: None,
            booting: false,
            failed_in_start: false,
            ddl_acked: BTreeSet::new(),
            ddl_waiting: None,
            ddl_seq: 0,
            backup: None,
            next_backup: first_backup,
            planning: false,
            map_at: BTreeMap::new(),
        }
    }

    /// The client that changes the schema (None without `ddl_every_ms`).
    fn ddl_client(&self) -> Option<u64> {
        (self.cfg.ddl_every_ms > 0).then_some(self.cfg.clients as u64 + 1)
    }

    /// The DDL client: CREATE DATABASE through a random started node's tc (which forwards it to
    /// the master when it is not the master).
    fn ddl_act(&mut self, client: u64) {
        let every = self.cfg.ddl_every_ms;
        let live: Vec<NodeId> =
            self.cluster.nodes.iter().filter(|(_, s)| s.state == NodeState::Started).map(|(&n, _)| n).collect();
        if !self.started() || self.table.is_none() || live.is_empty() {
            self.wake(client, every);
            return;
        }
        self.ddl_seq += 1;
        let name = format!("x{}_{}", self.incarnation, self.ddl_seq);
        let node = *self.rng.pick(&live);
        let tc = Addr::new(node, Block::Tc(self.rng.below(self.cfg.ldm_count as u64) as u16));
        let (inc, t) = (self.incarnation, self.now + self.rng.below(3));
        let c = &mut self.clients[client as usize - 1];
        c.seq += 1;
        c.sent_at = self.now;
        c.state = ClientState::Waiting;
        c.tc = Some(tc);
        let req = Request::Ddl(DdlReq::CreateDatabase { name: name.clone(), if_not_exists: false });
        let sig = Signal::ClientRequest { client, req_id: c.seq, req };
        self.log(|| format!("DDL client: CREATE DATABASE {name} via {tc:?}"));
        self.ddl_waiting = Some(name);
        self.push(t, Event::Deliver { from: None, to: tc, sig, incarnation: inc });
    }

    fn ddl_reply(&mut self, client: u64, reply: Reply) {
        let name = self.ddl_waiting.take();
        self.log(|| format!("DDL client: {name:?} answered {reply:?}"));
        match reply {
            Reply::DdlDone { .. } => {
                self.ddl_acked.insert(name.expect("a DDL in flight"));
                self.stats.schema_changes += 1;
            }
            // Not done, or (the master failed) not known whether done.
            Reply::Error(e) if e.is_temporary() || e.code == tern_types::ErrorCode::UnknownResult => {}
            other => self.fail(&format!("DDL client: unexpected reply {other:?}")),
        }
        let c = &mut self.clients[client as usize - 1];
        c.state = ClientState::Idle;
        c.tc = None;
        let after = self.cfg.ddl_every_ms / 2 + self.rng.below(self.cfg.ddl_every_ms);
        self.wake(client, after);
    }

    /// Every acknowledged schema change is in the management nodes' catalog and in the catalog
    /// of every started node's dict, tcs and ldms.
    fn check_catalogs(&mut self) {
        let mut missing = Vec::new();
        for name in &self.ddl_acked {
            if !self.mgm_catalog.as_ref().is_some_and(|c| c.databases.contains_key(name)) {
                missing.push(format!("{name} not in the management nodes' catalog"));
            }
            for (&id, sn) in &self.nodes {
                let Some(node) = &sn.node else { continue };
                if self.cluster.state_of(id) != NodeState::Started {
                    continue;
                }
                if !node.dict.catalog().databases.contains_key(name) {
                    missing.push(format!("{name} not in node {id}'s catalog"));
                }
            }
        }
        if !missing.is_empty() {
            self.fail(&format!("acknowledged schema changes missing: {missing:?}"));
        }
        // And every schema change is answered (one waiting behind a failed master is told).
        if let Some(c) = self.ddl_client().map(|c| &self.clients[c as usize - 1])
            && c.state == ClientState::Waiting
            && self.now > c.sent_at + 2_000
        {
            let since = c.sent_at;
            self.fail(&format!("a schema change sent at t={since} ms got no answer ({:?})", self.ddl_waiting));
        }
    }

    /// Runs a whole simulation; panics (naming the seed) when an invariant breaks.
    pub fn run(seed: u64, cfg: SimConfig) -> SimStats {
        let mut sim = Sim::new(seed, cfg);
        if sim.cfg.clock_skew {
            for id in 1..=sim.cfg.data_nodes {
                let clock = (sim.rng.below(10_000), 950 + sim.rng.below(101));
                sim.clocks.insert(id, clock);
            }
        }
        sim.boot();
        sim.wake_all();
        let mut next_crash = sim.cfg.crash_every_ms / 2 + sim.rng.below(sim.cfg.crash_every_ms);
        let every = sim.cfg.fail_every_ms;
        let mut next_fail = if every == 0 { u64::MAX } else { every / 2 + sim.rng.below(every) };
        let cut_every = sim.cfg.partition_every_ms;
        let mut next_cut = if cut_every == 0 { u64::MAX } else { cut_every / 2 + sim.rng.below(cut_every) };
        let sixth = sim.cfg.duration_ms / 6;
        let (mut next_grow, mut next_shrink) = if sim.cfg.scale_out {
            (sixth / 2 + sim.rng.below(sixth), 3 * sixth + sim.rng.below(sixth))
        } else {
            (u64::MAX, u64::MAX)
        };
        while sim.now < sim.cfg.duration_ms {
            if sim.now >= next_grow.min(next_shrink) && sim.started() && sim.table.is_some() {
                let grow = next_grow <= next_shrink;
                let mut next = (*sim.cluster).clone();
                next.rebalance_all = true;
                if grow {
                    next.version += 1;
                    next.draining.clear();
                    next.active_groups = next.groups().len() as u32;
                } else {
                    // As the control plane drains a node group: its default homes are pinned
                    // and the planner moves them off.
                    let tables = sim.mgm_tables();
                    let last = next.groups().len() as u32 - 1;
                    next.drain_group(last, &tables).expect("the added group drains");
                }
                sim.log(|| format!("node groups in service: {} (reorganising every table)", next.active_groups));
                if grow {
                    next_grow = u64::MAX;
                } else {
                    next_shrink = u64::MAX;
                }
                sim.publish(next);
                continue;
            }
            if sim.now >= next_cut && sim.started() && sim.table.is_some() && sim.cut.is_empty() {
                sim.cut_a_link();
                next_cut = sim.now + cut_every / 2 + sim.rng.below(cut_every);
                continue;
            }
            if sim.now >= next_crash && sim.started() && sim.table.is_some() {
                sim.crash_and_recover();
                next_crash = sim.now + sim.cfg.crash_every_ms / 2 + sim.rng.below(sim.cfg.crash_every_ms);
                continue;
            }
            if sim.now >= next_fail && sim.started() && sim.table.is_some() {
                // Armed: the failure strikes at the next interesting moment (a coordinator
                // whose transaction has just committed on another node), or soon anyway.
                if sim.armed_since.is_none() {
                    sim.armed_since = Some(sim.now);
                }
                let victim = sim.strike.take();
                if victim.is_some() || sim.now > sim.armed_since.unwrap_or(0) + 200 {
                    sim.fail_a_node(victim);
                    sim.armed_since = None;
                    next_fail = sim.now + every / 2 + sim.rng.below(every);
                    continue;
                }
            }
            if let Some(i) = sim.restarts.iter().position(|&(at, _)| sim.now >= at) {
                let (_, id) = sim.restarts.remove(i);
                sim.restart_node(id);
                continue;
            }
            if sim.now >= sim.next_backup && sim.started() && sim.table.is_some() {
                sim.backup_tick();
                sim.next_backup = sim.now + sim.cfg.backup_every_ms.max(1);
            }
            if !sim.step() {
                break;
            }
        }
        sim.quiesce_and_check_live();
        sim.crash_and_recover();
        sim.stats.clone()
    }

    /// Runs a simulation without a final crash and returns its disk as it is at the end, with
    /// everything written made durable (for corruption tests).
    pub fn run_and_take_disk(seed: u64, cfg: SimConfig) -> SimDisk {
        let mut sim = Sim::new(seed, cfg);
        sim.boot();
        sim.wake_all();
        while sim.now < sim.cfg.duration_ms && sim.step() {}
        let first = sim.nodes.values_mut().next().expect("a node");
        let mut disk = first.io.take().expect("running").storage;
        for f in disk.files.values_mut() {
            f.1 = f.0.len();
        }
        disk
    }

    /// Major events (failures, restarts, cluster maps, copies) on stderr when `TERN_SIM_LOG` is
    /// set: the first aid when a seed fails.
    fn log(&self, what: impl FnOnce() -> String) {
        if self.log_enabled {
            eprintln!("[sim t={}] {}", self.now, what());
        }
    }

    fn fail(&self, msg: &str) -> ! {
        for (id, sn) in &self.nodes {
            if let Some(n) = &sn.node {
                eprintln!("node {id} dict: {}", n.dict.describe());
                for (i, l) in n.ldms.iter().enumerate() {
                    eprintln!("node {id} ldm {i}: {}", l.describe());
                }
            }
        }
        panic!("simulation failed (seed {}, t={} ms): {msg}", self.seed, self.now);
    }

    fn push(&mut self, at: u64, ev: Event) {
        self.seq += 1;
        self.events.insert((at, self.seq), ev);
    }

    fn started(&self) -> bool {
        self.cluster.live_nodes().iter().all(|n| self.started_nodes.contains(n))
    }

    /// Where verification scans go: the first tc of the first live node.
    fn verify_tc(&self) -> Addr {
        Addr::new(*self.cluster.live_nodes().first().expect("a live node"), Block::Tc(0))
    }

    fn node_cfg(&self, id: NodeId, recover_to: Option<u64>) -> NodeConfig {
        let mut c = NodeConfig::in_cluster(id, self.cluster.clone(), self.cfg.data_memory_bytes);
        c.recover_to = recover_to;
        c.dist.epoch_interval_ms = self.cfg.epoch_interval_ms;
        c.ldm.checkpoint_redo_bytes = 4096;
        c.ldm.redo_buffer_bytes = 512;
        // Checkpoints span many loop turns while transactions go on (fuzzy checkpoints).
        c.ldm.checkpoint_chunk_bytes = 200;
        c.ldm.lock_wait_timeout_ms = 300;
        c
    }

    /// Starts every node from its disk: a system restart to the consistent cut, the smallest of
    /// the nodes' epochs (their system files', or newer ones marked in all their redo logs).
    fn boot(&mut self) {
        let live = self.cluster.live_nodes();
        let cut = self
            .nodes
            .iter()
            .filter(|(id, _)| live.contains(id))
            .map(|(_, n)| tern_kernel::recovery::node_epoch(&n.disk).unwrap_or(0))
            .min();
        for id in live {
            let cfg = self.node_cfg(id, cut);
            let node = match Node::recover(&cfg, &self.nodes[&id].disk) {
                Ok(n) => n,
                Err(e) => self.fail(&format!("node {id}: recovery failed: {e}")),
            };
            self.log(|| {
                let parts: Vec<String> = node
                    .ldms
                    .iter()
                    .flat_map(|l| l.committed_rows())
                    .map(|(k, r)| format!("{}.{}:{}", k.0, k.1, r.len()))
                    .collect();
                format!("node {id} recovered to {:?}: [{}]", cut, parts.join(" "))
            });
            self.run_node(id, node);
        }
        self.started_nodes.clear();
        self.link_time.clear();
        self.cut.clear();
        self.give_master_the_catalog();
        if self.cfg.boot_spread_ms > 0 && self.cfg.fail_every_ms > 0 {
            self.fail_in_start = Some(self.now);
        }
    }

    /// A node's own clock: its offset plus the simulator's time at its rate (monotonic).
    fn node_now(&self, node: NodeId) -> u64 {
        match self.clocks.get(&node) {
            Some(&(offset, rate)) => offset + self.now * rate / 1000,
            None => self.now,
        }
    }

    /// The simulator's time after a node's timer of `delay` ms (at the node's clock rate).
    fn timer_at(&self, node: NodeId, delay: u64) -> u64 {
        match self.clocks.get(&node) {
            Some(&(_, rate)) => self.now + (delay * 1000).div_ceil(rate),
            None => self.now + delay,
        }
    }

    /// Started nodes that may fail: their node group keeps another started member.
    fn failure_candidates(&self) -> Vec<NodeId> {
        let live = self.cluster.live_nodes();
        let started: Vec<NodeId> =
            live.iter().copied().filter(|&n| self.cluster.state_of(n) == NodeState::Started).collect();
        started
            .iter()
            .copied()
            .filter(|&n| {
                let g = self.cluster.group_of_node(n).expect("in a group");
                self.cluster.groups()[g].iter().filter(|m| started.contains(m)).count() > 1
            })
            .collect()
    }

    /// A network partition between two data nodes (each of which may fail): every signal
    /// between them, in flight or sent later, is lost until one of them has failed.
    fn cut_a_link(&mut self) {
        let c = self.failure_candidates();
        if c.len() < 2 {
            return;
        }
        let a = *self.rng.pick(&c);
        let others: Vec<NodeId> = c.iter().copied().filter(|&n| n != a).collect();
        let b = *self.rng.pick(&others);
        let pair = (a.min(b), a.max(b));
        self.stats.partitions += 1;
        self.log(|| format!("the links between nodes {} and {} are cut", pair.0, pair.1));
        self.events.retain(|_, ev| match ev {
            Event::Deliver { from: Some(f), to, .. } => ((*f).min(to.node), (*f).max(to.node)) != pair,
            _ => true,
        });
        self.cut.insert(pair);
    }

    /// Kills one data node whose node group keeps another live member, as the management nodes
    /// would declare it failed once its lease ran out: it stops at once (losing unsynced disk
    /// writes and every signal it had in flight), and every survivor gets the new cluster map.
    fn fail_a_node(&mut self, prefer: Option<NodeId>) {
        // A node group must keep a full replica: only a started node whose group has another
        // started one may fail.
        let candidates = self.failure_candidates();
        if candidates.is_empty() {
            return;
        }
        let victim = match prefer {
            Some(p) if candidates.contains(&p) => p,
            _ => *self.rng.pick(&candidates),
        };
        self.stats.node_failures += 1;
        self.log(|| format!("node {victim} fails"));
        self.cut.retain(|&(a, b)| a != victim && b != victim);
        // Everything the victim would still do or send is gone.
        self.events.retain(|_, ev| match ev {
            Event::Deliver { from, to, .. } => to.node != victim && *from != Some(victim),
            Event::Io { from, .. } => from.node != victim,
            _ => true,
        });
        self.forget_commits_only_on(victim);
        let sn = self.nodes.get_mut(&victim).expect("a node");
        let mut disk = sn.io.take().expect("running").storage;
        sn.node = None;
        disk.crash(&mut self.rng);
        sn.disk = disk;
        self.started_nodes.remove(&victim);
        let mut next = (*self.cluster).clone();
        next.version += 1;
        next.nodes.get_mut(&victim).expect("a node").state = NodeState::Down;
        if self.cfg.restart_after_ms > 0 {
            let at = self.now + self.cfg.restart_after_ms / 2 + self.rng.below(self.cfg.restart_after_ms);
            self.restarts.push((at, victim));
        }
        // Clients whose coordinator died lose their answer (outcome unknown to them).
        for c in &mut self.clients {
            if c.tc.is_some_and(|t| t.node == victim) || (c.state == ClientState::Waiting && c.tc.is_none()) {
                c.state = ClientState::Idle;
                c.pending = None;
                c.tc = None;
                c.wrote = false;
            }
        }
        // Every block of every survivor learns of it, node by node.
        self.publish(next);
        self.wake_all();
    }

    /// Lets every transaction in flight finish (clients stop starting new ones), then checks
    /// that the live cluster holds exactly the committed transactions: an acknowledged commit
    /// survives the failure of a node whose group keeps a live member.
    fn quiesce_and_check_live(&mut self) {
        if self.table.is_none() {
            return;
        }
        let until = self.now + 3_000;
        while self.now < until && self.step_node_only() {}
        let mut expect = self.base.clone();
        let commits: Vec<(TxnKey, u64)> = self.oracle.commits.clone();
        for (key, _) in &commits {
            self.apply_model(&mut expect, key);
        }
        let got = self.dump();
        if got != expect {
            let missing: Vec<_> = expect.iter().filter(|(k, v)| got.get(k) != Some(v)).take(5).collect();
            let extra: Vec<_> = got.iter().filter(|(k, v)| expect.get(k) != Some(v)).take(5).collect();
            self.fail(&format!(
                "live state differs from the committed transactions: expected-but-not-found {missing:?}, found-but-not-expected {extra:?}"
            ));
        }
        self.check_catalogs();
        // After the quiet time, every started node has the management nodes' catalog (a change
        // a failed master committed there but did not write is written by the next one).
        if let Some(mgm) = self.mgm_catalog.clone() {
            for (&id, sn) in &self.nodes {
                let Some(node) = &sn.node else { continue };
                let v = node.dict.catalog().version;
                if self.cluster.state_of(id) == NodeState::Started && v != mgm.version {
                    self.fail(&format!(
                        "node {id} has catalog version {v}, the management nodes {} (not caught up)",
                        mgm.version
                    ));
                }
            }
        }
    }

    fn apply_model(&self, expect: &mut BTreeMap<i64, Row>, key: &TxnKey) {
        for op in self.oracle.ops.get(key).cloned().unwrap_or_default() {
            match op {
                ModelOp::Put(k, r) | ModelOp::Insert(k, r) => {
                    expect.insert(k, r);
                }
                ModelOp::Delete(k) => {
                    expect.remove(&k);
                }
                ModelOp::SetA(k, a) => match expect.get_mut(&k) {
                    Some(r) => r.0 = a,
                    None => self.fail(&format!("oracle: committed update of missing key {k} by {key:?}")),
                },
            }
        }
    }

    /// Checks this cluster life's reads for linearizability (`linear`) against the version order
    /// of each key: the recovered base, then the committed transactions in commit order.
    fn check_linearizable(&mut self) {
        let mut versions: linear::Versions = self.base.iter().map(|(&k, r)| (k, vec![Some(r.0)])).collect();
        for (key, _) in &self.oracle.commits {
            for op in self.oracle.ops.get(key).map(|v| v.as_slice()).unwrap_or_default() {
                let (k, v) = match op {
                    ModelOp::Put(k, r) | ModelOp::Insert(k, r) => (*k, Some(r.0)),
                    ModelOp::SetA(k, a) => (*k, Some(*a)),
                    ModelOp::Delete(k) => (*k, None),
                };
                versions.entry(k).or_default().push(v);
            }
        }
        match linear::check(&versions, &self.lin_acks, &self.lin_reads) {
            Ok(n) => self.stats.linearizable_reads += n as u64,
            Err(e) => self.fail(&format!("not linearizable: {e}")),
        }
        self.lin_reads.clear();
        self.lin_acks.clear();
    }

    fn crash_and_recover(&mut self) {
        self.check_linearizable();
        self.stats.crashes += 1;
        self.log(|| {
            let mut per_node = Vec::new();
            for (id, sn) in &self.nodes {
                if let Some(n) = sn.node.as_ref() {
                    let rows: usize = n.ldms.iter().flat_map(|l| l.committed_rows()).map(|(_, r)| r.len()).sum();
                    per_node.push(format!("node {id}: {rows} rows, durable epoch {}", n.durable_epoch));
                }
            }
            format!("whole-cluster crash ({})", per_node.join("; "))
        });
        if self.log_enabled {
            use tern_kernel::io::Storage;
            for (id, sn) in &self.nodes {
                let Some(io) = sn.io.as_ref() else { continue };
                let disk = &io.storage;
                let sys = disk.read(tern_kernel::sysfile::SYSFILE_NAME).ok().flatten();
                let sys = sys.and_then(|b| tern_kernel::sysfile::Sysfile::decode(&b).ok());
                eprintln!("  node {id} sysfile durable {:?}", sys.map(|s| s.durable_epoch));
                for l in 0..self.cfg.ldm_count {
                    for f in disk.list(&format!("ldm-{l}")).unwrap_or_default() {
                        if let Some(b) = disk.read(&f).ok().flatten()
                            && let Ok(ck) = tern_kernel::checkpoint::decode(&b)
                        {
                            let parts: Vec<String> =
                                ck.partitions.iter().map(|p| format!("{}.{}:{}", p.0, p.1, p.2.len())).collect();
                            let h = &ck.header;
                            eprintln!("    {f}: max_epoch {} start {} [{}]", h.max_epoch, h.start_lsn, parts.join(" "));
                        }
                    }
                }
            }
        }
        // Everything in flight is lost; the disk loses unsynced bytes.
        self.events.clear();
        let running: Vec<NodeId> = self.nodes.iter().filter(|(_, n)| n.node.is_some()).map(|(&id, _)| id).collect();
        for id in running {
            let sn = self.nodes.get_mut(&id).expect("listed");
            let mut disk = sn.io.take().expect("running").storage;
            sn.node = None;
            disk.crash(&mut self.rng);
            self.nodes.get_mut(&id).expect("listed").disk = disk;
        }
        self.incarnation += 1;
        // Only full replicas recover from their own disks; a node that was still restarting
        // restarts again once the cluster is up.
        let partial: Vec<NodeId> = self
            .cluster
            .nodes
            .iter()
            .filter(|(_, s)| matches!(s.state, NodeState::Starting | NodeState::Copying))
            .map(|(&id, _)| id)
            .collect();
        if !partial.is_empty() {
            let mut next = (*self.cluster).clone();
            next.version += 1;
            for id in &partial {
                next.nodes.get_mut(id).expect("a node").state = NodeState::Down;
                self.restarts.push((self.now + 200, *id));
            }
            self.cluster = std::sync::Arc::new(next);
        }
        for c in &mut self.clients {
            c.state = ClientState::Idle;
            c.pending = None;
            c.wrote = false;
            c.tc = None;
        }
        self.boot();
        let epochs: BTreeSet<u64> =
            self.nodes.values().filter_map(|n| n.node.as_ref()).map(|n| n.durable_epoch).collect();
        if epochs.len() != 1 {
            self.fail(&format!("nodes recovered to different epochs {epochs:?}: not a consistent cut"));
        }
        let durable = *epochs.first().expect("a node");
        self.check_recovered(durable);
        self.check_catalogs();
        self.wake_all();
    }

    /// Compares the recovered partitions with the oracle's state at `durable`.
    fn check_recovered(&mut self, durable: u64) {
        let mut expect = self.base.clone();
        let commits = std::mem::take(&mut self.oracle.commits);
        for (key, epoch) in &commits {
            if *epoch <= durable {
                self.apply_model(&mut expect, key);
            }
        }
        for (stamp, epoch) in std::mem::take(&mut self.durable_acks) {
            if epoch > durable {
                self.fail(&format!(
                    "durable commit (stamp {stamp}, epoch {epoch}) lost: recovered only to epoch {durable}"
                ));
            }
        }
        let got = self.dump();
        if got != expect {
            let missing: Vec<_> = expect.iter().filter(|(k, v)| got.get(k) != Some(v)).take(5).collect();
            let extra: Vec<_> = got.iter().filter(|(k, v)| expect.get(k) != Some(v)).take(5).collect();
            self.fail(&format!(
                "recovered state differs from the transactions of epochs <= {durable}: expected-but-not-found {missing:?}, found-but-not-expected {extra:?}"
            ));
        }
        self.stats.verified_rows += got.len() as u64;
        self.base = expect;
        self.oracle = Oracle::default();
    }

    /// The rows of the test table held by the node's ldms, read through a full scan via tc once the
    /// node has started.
    fn dump(&mut self) -> BTreeMap<i64, Row> {
        // Run the node until it has started.
        let deadline = self.now + 60_000;
        self.booting = true;
        while !self.started() {
            if self.now > deadline || !self.step_node_only() {
                self.fail("the cluster did not start after recovery");
            }
        }
        self.booting = false;
        if self.failed_in_start {
            // Let the failure settle (maps, takeover) before the verification scans.
            self.failed_in_start = false;
            let until = self.now + 300;
            while self.now < until && self.step_node_only() {}
            while !self.started() {
                if self.now > deadline || !self.step_node_only() {
                    self.fail("the cluster did not start after a failure during its start");
                }
            }
        }
        self.check_replicas_agree();
        let Some(table) = self.table.clone() else {
            return BTreeMap::new();
        };
        let rows = self.scan_table(table.id);
        let layout = self.layout.as_ref().expect("table");
        let mut out = BTreeMap::new();
        for r in &rows {
            let v = layout.decode_row(r).expect("valid row");
            let id = v[0].as_i128().expect("int") as i64;
            let a = v[1].as_i128().expect("int") as i64;
            let b = v[2].as_i128().map(|x| x as i64);
            if out.insert(id, (a, b)).is_some() {
                self.fail(&format!("scan returned key {id} twice"));
            }
        }
        self.check_unique_index(&out);
        self.check_pushed_aggregate(table.id, &out);
        out
    }

    /// A pushed aggregation (its ldms going on by themselves between the tc's requests) counts
    /// every row once: COUNT(*), SUM(a) and MAX(b) over the whole table equal the plain scan's.
    fn check_pushed_aggregate(&mut self, table: u32, rows: &BTreeMap<i64, Row>) {
        use tern_agg::{AggExpr, AggOp, Aggregation};
        let agg = Aggregation {
            group_by: vec![],
            aggs: vec![(AggOp::Count, None), (AggOp::Sum, Some(AggExpr::Col(1))), (AggOp::Max, Some(AggExpr::Col(2)))],
        };
        self.verify_agg = Some(agg.clone());
        let partials = self.scan_table(table);
        self.verify_agg = None;
        let mut acc = agg.start();
        for p in &partials {
            let (_, part) = tern_agg::decode_partial(&agg, p).expect("a partial group");
            agg.merge(&mut acc, &part);
        }
        let got: Vec<Option<i128>> = acc.iter().map(|v| v.as_i128()).collect();
        let want = vec![
            Some(rows.len() as i128),
            (!rows.is_empty()).then(|| rows.values().map(|r| r.0 as i128).sum()),
            rows.values().filter_map(|r| r.1.map(|b| b as i128)).max(),
        ];
        if got != want {
            self.fail(&format!("pushed COUNT/SUM/MAX {got:?} disagree with the scanned rows' {want:?}"));
        }
    }

    /// Replica agreement (architecture.md §5, invariant 3): every replica of every partition holds
    /// the same rows, and each partition lives on exactly its node group's nodes.
    fn check_replicas_agree(&mut self) {
        type Copies = Vec<(NodeId, Vec<Vec<u8>>)>;
        let mut copies: BTreeMap<(u32, u32), Copies> = BTreeMap::new();
        for (&id, sn) in &self.nodes {
            let Some(node) = sn.node.as_ref() else { continue };
            if self.cluster.state_of(id) != NodeState::Started {
                continue; // a restarting node's copy is not complete yet
            }
            for ldm in &node.ldms {
                for (key, mut rows) in ldm.committed_rows() {
                    rows.sort();
                    copies.entry(key).or_default().push((id, rows));
                }
            }
        }
        for ((table, partition), reps) in copies {
            // The full replicas, and while a move is switched its sources (still written).
            let groups = self.table_groups(table);
            let chain = self.cluster.chain(table, groups, partition);
            let switched = self
                .cluster
                .placed
                .get(&(table, partition))
                .and_then(|p| p.moving.as_ref())
                .is_some_and(|m| m.phase == tern_types::cluster::MovePhase::Switched);
            let full = if switched { chain.replicas.len() } else { chain.readable };
            let want: BTreeSet<NodeId> = chain.replicas[..full]
                .iter()
                .map(|r| r.0)
                .filter(|&n| self.cluster.state_of(n) == NodeState::Started)
                .collect();
            // A move's target still copying, or a source that has not dropped its copy yet, is
            // not compared.
            let reps: Vec<(NodeId, Vec<Vec<u8>>)> = reps.into_iter().filter(|r| want.contains(&r.0)).collect();
            if reps.is_empty() {
                continue;
            }
            let have: BTreeSet<NodeId> = reps.iter().map(|r| r.0).collect();
            if want != have {
                self.fail(&format!("table {table} partition {partition} is on nodes {have:?}, not {want:?}"));
            }
            let first = &reps[0];
            for r in &reps[1..] {
                if r.1 != first.1 {
                    let only_a: Vec<&Vec<u8>> = first.1.iter().filter(|x| !r.1.contains(x)).take(3).collect();
                    let only_b: Vec<&Vec<u8>> = r.1.iter().filter(|x| !first.1.contains(x)).take(3).collect();
                    self.fail(&format!(
                        "replicas disagree: table {table} partition {partition} has {} rows on node {} and {} on node {} (only on the first {only_a:?}, only on the second {only_b:?})",
                        first.1.len(),
                        first.0,
                        r.1.len(),
                        r.0
                    ));
                }
            }
        }
    }

    /// `Table::groups` of a table of the simulation (the test table or its index table).
    fn table_groups(&self, id: u32) -> u32 {
        [&self.table, &self.index_table, &self.pending_table]
            .into_iter()
            .flatten()
            .find(|t| t.id == id)
            .map_or_else(|| self.mgm_catalog.as_ref().and_then(|c| c.table(id)).map_or(0, |t| t.groups), |t| t.groups)
    }

    /// The unique index on `b` is exactly the non-NULL (b, id) pairs of the base rows.
    fn check_unique_index(&mut self, base: &BTreeMap<i64, Row>) {
        let Some(it) = self.index_table.clone() else { return };
        let layout = RowLayout::new(&it);
        let mut got = BTreeSet::new();
        for r in self.scan_table(it.id) {
            let v = layout.decode_row(&r).expect("valid index row");
            got.insert((v[0].as_i128().expect("int") as i64, v[1].as_i128().expect("int") as i64));
        }
        let want: BTreeSet<(i64, i64)> = base.iter().filter_map(|(id, (_, b))| b.map(|b| (b, *id))).collect();
        if got != want {
            let missing: Vec<_> = want.difference(&got).take(5).collect();
            let extra: Vec<_> = got.difference(&want).take(5).collect();
            self.fail(&format!(
                "unique index table disagrees with its base table: missing {missing:?}, extra {extra:?}"
            ));
        }
    }

    /// All rows of a table, read through a full scan via tc.
    fn scan_table(&mut self, table: u32) -> Vec<Vec<u8>> {
        self.verifying = true;
        self.scan_rows.clear();
        self.verify_table = table;
        self.send_verify_scan(table);
        let deadline = self.now + 60_000;
        while self.verifying {
            if self.now > deadline || !self.step_node_only() {
                self.fail("verification scan did not finish");
            }
        }
        std::mem::take(&mut self.scan_rows)
    }

    fn send_verify_scan(&mut self, table: u32) {
        let req = Request::Scan(ScanReq {
            scan: 1,
            table,
            index: None,
            lo: None,
            hi: None,
            ranges: Vec::new(),
            filter: tern_types::filter::Filter::True,
            projection: None,
            limit: 0,
            ordered: false,
            descending: false,
            // An aggregating step folds 16 batches' rows: 16 rows a step, so partitions take
            // several steps.
            batch_rows: if self.verify_agg.is_some() { 1 } else { 7 },
            partition: None,
            expired: false,
            aggregate: self.verify_agg.clone(),
            offset: 0,
        });
        let inc = self.incarnation;
        self.push(
            self.now + 1,
            Event::Deliver {
                from: None,
                to: self.verify_tc(),
                sig: Signal::ClientRequest { client: 999, req_id: 1, req },
                incarnation: inc,
            },
        );
    }

    /// One event, without waking clients (used while verifying).
    fn step_node_only(&mut self) -> bool {
        self.step_inner(false)
    }

    fn step(&mut self) -> bool {
        self.step_inner(true)
    }

    /// With staggered starts: fails the master while other nodes are still recovering, once the
    /// node that becomes the next master has started (it must learn which nodes have started
    /// before it runs epochs with them). Once per boot.
    fn fail_in_start(&mut self) {
        if self.table.is_none() || self.started() {
            self.fail_in_start = None;
            return;
        }
        let Some(master) = self.cluster.master() else { return };
        let mut next = (*self.cluster).clone();
        next.nodes.get_mut(&master).expect("the master").state = NodeState::Down;
        let heir = next.master();
        if heir.is_some_and(|h| self.started_nodes.contains(&h)) && self.failure_candidates().contains(&master) {
            self.fail_in_start = None;
            self.log(|| format!("the master {master} fails while nodes start (next: {heir:?})"));
            self.fail_a_node(Some(master));
            self.failed_in_start = true;
        }
    }

    fn step_inner(&mut self, clients: bool) -> bool {
        if self.fail_in_start.is_some() && self.booting {
            self.fail_in_start();
        }
        let Some((&(at, s), _)) = self.events.iter().next() else {
            return false;
        };
        let ev = self.events.remove(&(at, s)).expect("present");
        self.now = self.now.max(at);
        match ev {
            Event::Deliver { to, sig, incarnation, .. } if incarnation == self.incarnation => self.deliver(to, sig),
            Event::Io { from, req, incarnation } if incarnation == self.incarnation => {
                let sn = self.nodes.get_mut(&from.node).expect("a node");
                let done = sn.io.as_mut().expect("running").execute(from, req);
                match done {
                    Ok(Some((to, sig))) => self.send(Addr::new(to.node, Block::Dist), to, sig),
                    Ok(None) => {}
                    Err(e) => self.fail(&format!("sim disk error {e}")),
                }
            }
            Event::Reply { client, req_id, reply, incarnation } if incarnation == self.incarnation => {
                if client == 999 {
                    self.verify_reply(reply);
                } else if client == BACKUP_CLIENT {
                    self.backup_reply(req_id, reply);
                } else if (clients || Some(client) == self.ddl_client())
                    && self.clients.get(client as usize - 1).is_some_and(|c| c.seq == req_id)
                {
                    // (The DDL client hears its answer while the others are quiet: every schema
                    // change must be answered.)
                    // A client matches answers to its request: a late answer to one it gave up
                    // on (its coordinator died) is dropped.
                    self.client_reply(client, req_id, reply);
                }
            }
            Event::ClientWake { client, incarnation } if incarnation == self.incarnation && clients => {
                self.client_act(client);
            }
            Event::Control { node, node_incarnation, req, incarnation } if incarnation == self.incarnation => {
                if !matches!(req, ControlReq::DurableEpoch(_) | ControlReq::Catalog(_)) {
                    self.log(|| format!("control request of node {node}/{node_incarnation}: {req:?}"));
                }
                if self.cluster.nodes.get(&node).is_some_and(|s| s.incarnation == node_incarnation) {
                    self.control(node, req);
                }
            }
            _ => {}
        }
        true
    }

    fn verify_reply(&mut self, reply: Reply) {
        match reply {
            Reply::ScanRows { rows, done, .. } => {
                self.scan_rows.extend(rows);
                if done {
                    self.verifying = false;
                } else {
                    let inc = self.incarnation;
                    self.push(
                        self.now,
                        Event::Deliver {
                            from: None,
                            to: self.verify_tc(),
                            sig: Signal::ClientRequest { client: 999, req_id: 2, req: Request::ScanNext { scan: 1 } },
                            incarnation: inc,
                        },
                    );
                }
            }
            // A temporary failure (a map the tc had not seen yet, a move's switch) restarts the
            // scan from nothing, as a client does (a pushed aggregation drops its partials);
            // `scan_table`'s deadline bounds the retries.
            Reply::Error(e) if e.is_temporary() => {
                self.scan_rows.clear();
                self.send_verify_scan(self.verify_table);
            }
            other => self.fail(&format!("verification scan failed: {other:?}")),
        }
    }

    /// Starts a backup, or gives up the running one when it met a crash or a new cluster map
    /// or took too long (its requests may never be answered then).
    fn backup_tick(&mut self) {
        if let Some(b) = &self.backup {
            let stale = b.incarnation != self.incarnation
                || b.nodes != self.cluster.nodes
                || self.now > b.started + BACKUP_TIMEOUT_MS;
            if !stale {
                return;
            }
            let b = self.backup.take().expect("running");
            if b.incarnation == self.incarnation {
                self.backup_send_stop(&b);
            }
            self.stats.backups_abandoned += 1;
        }
        let tc = self.verify_tc();
        self.backup = Some(SimBackup {
            phase: BackupPhase::Starting,
            tc,
            nodes: self.cluster.nodes.clone(),
            placed: self.cluster.placed.clone(),
            incarnation: self.incarnation,
            started: self.now,
            req: 0,
            rows: Vec::new(),
            parts: BTreeMap::new(),
        });
        self.backup_send(Request::Log { sub: 1, op: tern_wire::LogOp::Start, max_bytes: 0, tables: vec![] });
    }

    fn backup_send(&mut self, req: Request) {
        let inc = self.incarnation;
        let Some(b) = self.backup.as_mut() else { return };
        b.req += 1;
        let sig = Signal::ClientRequest { client: BACKUP_CLIENT, req_id: b.req, req };
        let to = b.tc;
        self.push(self.now + 1, Event::Deliver { from: None, to, sig, incarnation: inc });
    }

    fn backup_reply(&mut self, req_id: u64, reply: Reply) {
        let Some(b) = self.backup.as_mut() else { return };
        if req_id != b.req || b.incarnation != self.incarnation {
            return;
        }
        if b.nodes != self.cluster.nodes {
            // A failure or restart meets it: the log fails (checked by the ldm's unit test);
            // nothing to compare.
            self.backup = None;
            self.stats.backups_abandoned += 1;
            return;
        }
        let table = self.table.as_ref().map(|t| t.id);
        let scan = |done_req: Option<u64>| match done_req {
            None => Request::Scan(ScanReq { batch_rows: 7, ..ScanReq::table(table.unwrap_or(0)) }),
            Some(_) => Request::ScanNext { scan: 0 },
        };
        match (b.phase, reply) {
            (_, Reply::Error(_)) => {
                // (Its log stops too: the next backup's start would find it running.)
                let b = self.backup.take().expect("running");
                self.backup_send_stop(&b);
                self.stats.backups_abandoned += 1;
            }
            (BackupPhase::Starting, Reply::Log { .. }) => {
                b.phase = BackupPhase::Scanning;
                self.backup_send(scan(None));
            }
            (BackupPhase::Scanning, Reply::ScanRows { rows, done, .. }) => {
                b.rows.extend(rows);
                if done {
                    b.phase = BackupPhase::Status;
                    self.backup_send(Request::Status);
                } else {
                    self.backup_send(scan(Some(0)));
                }
            }
            (BackupPhase::Status, Reply::Status(st)) => {
                b.phase = BackupPhase::Polling(st.current_epoch + 1);
                self.backup_send(Request::Log { sub: 1, op: tern_wire::LogOp::Poll, max_bytes: 256, tables: vec![] });
            }
            (BackupPhase::Polling(stop), Reply::Log { parts }) => {
                for p in parts {
                    let e = b.parts.entry((p.node, p.ldm)).or_default();
                    for x in p.entries {
                        match x {
                            tern_wire::LogEntry::Epoch(m) => e.1 = e.1.max(m),
                            other => e.0.push(other),
                        }
                    }
                }
                if !b.parts.is_empty() && b.parts.values().all(|(_, m)| *m >= stop) {
                    let b = self.backup.take().expect("running");
                    self.backup_send_stop(&b);
                    self.check_backup(b, stop);
                } else {
                    self.backup_send(Request::Log {
                        sub: 1,
                        op: tern_wire::LogOp::Poll,
                        max_bytes: 256,
                        tables: vec![],
                    });
                }
            }
            (phase, other) => self.fail(&format!("backup in phase {phase:?} got {other:?}")),
        }
    }

    fn backup_send_stop(&mut self, b: &SimBackup) {
        let sig = Signal::ClientRequest {
            client: BACKUP_CLIENT,
            req_id: u64::MAX,
            req: Request::Log { sub: 1, op: tern_wire::LogOp::Stop, max_bytes: 0, tables: vec![] },
        };
        let inc = self.incarnation;
        self.push(self.now + 1, Event::Deliver { from: None, to: b.tc, sig, incarnation: inc });
    }

    /// The backup's rows with its log applied up to `stop` must be the committed state at
    /// `stop`: the recovered base with every transaction of an epoch up to `stop`.
    fn check_backup(&mut self, b: SimBackup, stop: u64) {
        let Some(table) = self.table.clone() else { return };
        let layout = self.layout.as_ref().expect("table");
        let row_of = |bytes: &[u8]| {
            let v = layout.decode_row(bytes).expect("valid row");
            (
                v[0].as_i128().expect("int") as i64,
                (v[1].as_i128().expect("int") as i64, v[2].as_i128().map(|x| x as i64)),
            )
        };
        let mut got: BTreeMap<i64, Row> = b.rows.iter().map(|r| row_of(r)).collect();
        // As `tern restore` does: of one key's entries, the one of the highest (epoch,
        // generation) wins, the last of those in its ldm's order (a moving partition is logged
        // by its source and its target, the target one generation up). The parts are taken in
        // reverse (node, ldm) order so that a lower generation's later arrival is tested too.
        let mut applied: BTreeMap<i64, (u64, u32)> = BTreeMap::new();
        for (entries, _) in b.parts.values().rev() {
            for e in entries {
                let (id, row, at) = match e {
                    tern_wire::LogEntry::Put { epoch, log_gen, table: t, row } if *t == table.id && *epoch <= stop => {
                        let (id, r) = row_of(row);
                        (id, Some(r), (*epoch, *log_gen))
                    }
                    tern_wire::LogEntry::Delete { epoch, log_gen, table: t, key, .. }
                        if *t == table.id && *epoch <= stop =>
                    {
                        let id = layout.decode_key(key).expect("valid key")[0].as_i128().expect("int") as i64;
                        (id, None, (*epoch, *log_gen))
                    }
                    _ => continue,
                };
                if applied.get(&id).is_some_and(|&a| a > at) {
                    continue;
                }
                applied.insert(id, at);
                match row {
                    Some(r) => got.insert(id, r),
                    None => got.remove(&id),
                };
            }
        }
        let mut expect = self.base.clone();
        let commits: Vec<(TxnKey, u64)> = self.oracle.commits.clone();
        for (key, epoch) in &commits {
            if *epoch <= stop {
                self.apply_model(&mut expect, key);
            }
        }
        if got != expect {
            let missing: Vec<_> = expect.iter().filter(|(k, v)| got.get(k) != Some(v)).take(5).collect();
            let extra: Vec<_> = got.iter().filter(|(k, v)| expect.get(k) != Some(v)).take(5).collect();
            self.fail(&format!(
                "a backup (scan from t={}, end epoch {stop}) differs from the committed state at that epoch: expected-but-not-found {missing:?}, found-but-not-expected {extra:?}",
                b.started
            ));
        }
        self.stats.backups_checked += 1;
        if b.placed != self.cluster.placed {
            self.stats.backups_across_moves += 1;
        }
    }

    /// The `TERN_SIM_LOG` lines of a signal: restarts and copies, and the signals of the
    /// transaction (`TERN_SIM_TXN`) and epoch (`TERN_SIM_EPOCH`) asked for.
    fn trace_send(&self, from: Addr, to: Addr, sig: &Signal) {
        let txn = match sig {
            Signal::Prepare(b) | Signal::Prepared(b) => Some(b.txn),
            Signal::Commit { txn, .. }
            | Signal::Committed { txn, .. }
            | Signal::Complete { txn, .. }
            | Signal::Abort { txn, .. } => Some(*txn),
            _ => None,
        };
        let epoch = match sig {
            Signal::EpochFlush { epoch, .. }
            | Signal::EpochTcFinished { epoch, .. }
            | Signal::EpochCommit { epoch, .. }
            | Signal::EpochFlushed { epoch, .. }
            | Signal::EpochSave { epoch, .. }
            | Signal::EpochDurable { epoch }
            | Signal::EpochPrepare { epoch, .. } => Some(*epoch),
            _ => None,
        };
        let wanted = txn.is_some_and(|t| self.log_txn == Some(t.id))
            || epoch.is_some_and(|e| self.log_epoch == Some(e))
            || matches!(
                sig,
                Signal::StartCopy | Signal::CopyFragReq { .. } | Signal::CopyDone { .. } | Signal::CatalogReq { .. }
            );
        if let Signal::SchemaWrite { catalog, broadcast, .. } = sig {
            self.log(|| format!("{from:?} -> {to:?}: SchemaWrite version {} broadcast {broadcast}", catalog.version));
        } else if matches!(sig, Signal::SchemaWritten { .. } | Signal::MgmCatalog { .. } | Signal::CatalogStored { .. })
        {
            self.log(|| match sig {
                Signal::MgmCatalog { catalog, refused } => {
                    format!("{from:?} -> {to:?}: MgmCatalog version {} refused {refused:?}", catalog.version)
                }
                other => format!("{from:?} -> {to:?}: {other:?}"),
            });
        } else if wanted {
            self.log(|| format!("{from:?} -> {to:?}: {sig:?}"));
        } else if let Signal::CopyRows { table, partition, rows, done, .. } = sig {
            self.log(|| {
                format!(
                    "{from:?} -> {to:?}: CopyRows table {table} partition {partition} rows {} done {done}",
                    rows.len()
                )
            });
        }
    }

    /// Sends a signal over the link from -> to, keeping per-link FIFO order.
    fn send(&mut self, from: Addr, to: Addr, sig: Signal) {
        if self.log_enabled {
            self.trace_send(from, to, &sig);
        }
        if matches!(from.block, Block::Ldm(_)) {
            self.observe_ldm_send(from, &sig);
        }
        match sig {
            Signal::FastOff { .. } => self.stats.fast_offs += 1,
            Signal::Resolve { .. } => self.stats.resolves += 1,
            _ => {}
        }
        if from.node != to.node && self.cut.contains(&(from.node.min(to.node), from.node.max(to.node))) {
            return; // the link is cut: lost
        }
        let delay = self.rng.below(3);
        let t = (self.now + delay).max(*self.link_time.get(&(from, to)).unwrap_or(&0));
        self.link_time.insert((from, to), t);
        let inc = self.incarnation;
        self.push(t, Event::Deliver { from: Some(from.node), to, sig, incarnation: inc });
    }

    fn deliver(&mut self, to: Addr, sig: Signal) {
        if self.nodes.get(&to.node).is_none_or(|n| n.node.is_none()) {
            return; // a failed node: the transporter drops it
        }
        if let Signal::Commit { txn, .. } = &sig
            && self.armed_since.is_some()
            && txn.tc.node != to.node
            && self.rng.chance(50)
        {
            // The coordinator dies right after a replica on another node committed: the
            // takeover must commit the rest.
            self.strike = Some(txn.tc.node);
        }
        self.observe_delivery(to.node, &sig);
        if let Signal::EpochSave { from, epoch, .. } = &sig
            && !self.nodes[&to.node].node.as_ref().is_some_and(|n| n.dist.is_running())
        {
            // The master may only count on nodes that told it they started (a real node
            // restarting slowly took this for an assert, dist.rs, before issue 32).
            self.fail(&format!(
                "master {from:?} sent an epoch save of {epoch} to node {}, which has not started",
                to.node
            ));
        }
        let mut out = Out::default();
        let now = self.node_now(to.node);
        let node = self.nodes.get_mut(&to.node).and_then(|n| n.node.as_mut()).expect("a running node");
        let what = if self.log_enabled { format!("{to:?} {sig:?}").chars().take(300).collect() } else { String::new() };
        node.handle(now, to.block, sig, &mut out);
        let seed = self.seed;
        if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| node.check_invariants())) {
            let msg = p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()));
            panic!("simulation failed (seed {seed}, t={now} ms): block invariant: {} {what}", msg.unwrap_or_default());
        }
        self.effects(to, out);
    }

    fn effects(&mut self, from: Addr, out: Out) {
        let inc = self.incarnation;
        // A block's continuation of its own task travels as any signal does (the simulator's
        // delivery order already interleaves it with other work).
        for (to, sig) in out.signals.into_iter().chain(out.later) {
            self.observe(to, &sig);
            self.send(from, to, sig);
        }
        for (client, req_id, reply) in out.replies {
            let t = self.now + self.rng.below(3);
            self.push(t, Event::Reply { client, req_id, reply, incarnation: inc });
        }
        for (from_addr, req) in out.io {
            // Each node's disk executes requests in order, each after a random delay.
            let delay = self.rng.below(4);
            let sn = self.nodes.get_mut(&from_addr.node).expect("a node");
            sn.io_time = sn.io_time.max(self.now) + delay;
            let t = sn.io_time;
            self.push(t, Event::Io { from: from_addr, req, incarnation: inc });
        }
        for (delay, to, sig) in out.timers {
            let at = self.timer_at(to.node, delay);
            self.push(at, Event::Deliver { from: Some(to.node), to, sig, incarnation: inc });
        }
        // Requests to the control plane travel like messages: delayed (heartbeat-sized), and
        // sometimes delivered twice (a retried proposal); the modelled control plane must be
        // idempotent and refuse requests of an earlier incarnation.
        let node_incarnation = self.cluster.nodes.get(&from.node).map_or(0, |s| s.incarnation);
        for req in out.control {
            let copies = if self.rng.chance(10) { 2 } else { 1 };
            for _ in 0..copies {
                let at = self.now + 1 + self.rng.below(40);
                let ev = Event::Control { node: from.node, node_incarnation, req: req.clone(), incarnation: inc };
                self.push(at, ev);
            }
        }
    }

    /// The control plane, modelled as one linearizable state machine: a node's state change
    /// becomes a new cluster map, which every running node's blocks receive.
    fn control(&mut self, node: NodeId, req: ControlReq) {
        if let ControlReq::Catalog(c) = req {
            // As the management nodes' state machine: versions only grow, the same catalog again
            // is accepted (a retried proposal); the proposer learns the outcome.
            let held = self.mgm_catalog.clone();
            let accepted = held.as_ref().is_none_or(|h| c.version > h.version || *h == c);
            self.log(|| format!("node {node} proposes catalog version {}: accepted {accepted}", c.version));
            let sig = if accepted {
                self.mgm_catalog = Some(c.clone());
                Signal::CatalogStored { version: c.version }
            } else {
                Signal::MgmCatalog { catalog: held.expect("refused by one"), refused: Some(c.version) }
            };
            let at = self.now + 1 + self.rng.below(20);
            let inc = self.incarnation;
            self.push(at, Event::Deliver { from: None, to: Addr::new(node, Block::Dict), sig, incarnation: inc });
            if accepted {
                // A table created while a drain began may name the draining group: its
                // partitions there are pinned (as the control plane does at SetCatalog).
                let tables = self.mgm_tables();
                let mut next = (*self.cluster).clone();
                if next.pin_draining(&tables) {
                    next.version += 1;
                    self.publish(next);
                }
            }
            if accepted && self.cluster.master() != Some(node) {
                // A proposal of a master that failed meanwhile, committed after the new master
                // looked: its membership thread sees the new version at its next heartbeat.
                self.give_master_the_catalog();
            }
            return;
        }
        if let ControlReq::Suspect(suspect) = req {
            // Arbitration as the management nodes run it: of two live nodes that cannot reach
            // each other, one is failed (the other if that one may not fail here).
            let live = |n: NodeId| self.cluster.state_of(n).in_chains();
            if !live(node) || !live(suspect) {
                return;
            }
            let victim = self.cluster.choose_victim(node, suspect);
            let other = if victim == node { suspect } else { node };
            let c = self.failure_candidates();
            let Some(v) = [victim, other].into_iter().find(|n| c.contains(n)) else { return };
            self.stats.suspicion_failures += 1;
            self.log(|| format!("node {node} suspects node {suspect}: node {v} is failed"));
            self.fail_a_node(Some(v));
            return;
        }
        if let ControlReq::MoveCopied { table, partition } | ControlReq::MoveLeft { table, partition } = req {
            let mut next = (*self.cluster).clone();
            let done = if matches!(req, ControlReq::MoveLeft { .. }) {
                next.move_left(table, partition, node)
            } else {
                next.move_copied(table, partition, node)
            };
            match done {
                Ok(()) => {
                    self.log(|| format!("move report of node {node}: {req:?}"));
                    self.publish(next)
                }
                Err(e) => self.log(|| format!("move report of node {node} refused: {e}")),
            }
            return;
        }
        let ControlReq::SetState(state) = req else { return };
        let mut next = (*self.cluster).clone();
        let seq = next.nodes.values().map(|n| n.joined_seq).max().unwrap_or(0) + 1;
        let Some(st) = next.nodes.get_mut(&node) else { return };
        // As the management nodes allow: a restarting node joins the chains (Starting ->
        // Copying), then becomes a full replica (Copying -> Started). A late or repeated request
        // (e.g. a Copying after Started) changes nothing.
        let allowed = matches!(
            (st.state, state),
            (NodeState::Starting, NodeState::Copying) | (NodeState::Copying, NodeState::Started)
        );
        if !allowed {
            return;
        }
        st.state = state;
        if state.in_chains() && st.joined_seq == 0 {
            st.joined_seq = seq;
        }
        next.version += 1;
        if state == NodeState::Started {
            self.stats.node_restarts += 1;
        }
        self.publish(next);
    }

    /// Installs a new cluster map and delivers it to every block of every running node; moves
    /// whose condition now holds step on, and the planner starts new ones (a map of its own).
    fn publish(&mut self, mut next: ClusterState) {
        next.settle_moves();
        let finished = self
            .cluster
            .placed
            .iter()
            .filter(|(k, p)| p.moving.is_some() && next.placed.get(k).is_none_or(|n| n.moving.is_none()))
            .count();
        self.stats.moves_done += finished as u64;
        self.log(|| {
            let nodes: Vec<String> =
                next.nodes.iter().map(|(id, s)| format!("{id}:{}/{}", s.state.name(), s.incarnation)).collect();
            format!("cluster map v{} [{}]", next.version, nodes.join(" "))
        });
        self.cluster = std::sync::Arc::new(next);
        let inc = self.incarnation;
        let n = self.cfg.ldm_count;
        let running: Vec<NodeId> = self.nodes.iter().filter(|(_, sn)| sn.node.is_some()).map(|(&id, _)| id).collect();
        // Maps reach nodes at different times (wider apart with moves, whose barriers exist for
        // exactly that); a node's blocks get it at once.
        let spread = if self.cfg.scale_out { 40 } else { 5 };
        for node in running {
            let at = self.now + 1 + self.rng.below(spread);
            self.map_at.insert(node, at);
            let blocks = (0..n).map(Block::Tc).chain((0..n).map(Block::Ldm)).chain([Block::Dict, Block::Dist]);
            for b in blocks {
                let sig = Signal::ClusterMap { state: self.cluster.clone() };
                self.push(at, Event::Deliver { from: None, to: Addr::new(node, b), sig, incarnation: inc });
            }
        }
        self.give_master_the_catalog();
        self.start_moves();
    }

    /// The tables of the management nodes' catalog, as the planner of moves sees them.
    fn mgm_tables(&self) -> Vec<tern_types::cluster::TableShape> {
        self.mgm_catalog
            .as_ref()
            .map_or_else(Vec::new, |c| c.tables.values().map(|t| (t.id, t.groups, t.partition_count)).collect())
    }

    /// The control plane's planner of moves (`ClusterState::plan_moves`) over the tables the
    /// management nodes' catalog holds.
    fn start_moves(&mut self) {
        if self.planning {
            return;
        }
        if self.mgm_catalog.is_none() {
            return;
        }
        let tables = self.mgm_tables();
        let plan = self.cluster.plan_moves(&tables);
        if plan.is_empty() {
            return;
        }
        let mut next = (*self.cluster).clone();
        for (t, g, p, to) in plan {
            if next.begin_move(t, g, p, to).is_ok() {
                self.stats.moves_begun += 1;
                self.log(|| format!("partition {p} of table {t} moves to {to:?}"));
            }
        }
        self.planning = true;
        self.publish(next);
        self.planning = false;
    }

    /// The master's membership thread fetches the management nodes' catalog (it may be one an
    /// earlier master committed and did not write everywhere, before it failed or the whole
    /// cluster crashed); the dict ignores one it has.
    fn give_master_the_catalog(&mut self) {
        if let (Some(master), Some(c)) = (self.cluster.master(), self.mgm_catalog.clone())
            && self.nodes.get(&master).is_some_and(|sn| sn.node.is_some())
        {
            let at = (self.now + 6 + self.rng.below(20)).max(self.map_at.get(&master).map_or(0, |t| t + 1));
            let inc = self.incarnation;
            let sig = Signal::MgmCatalog { catalog: c, refused: None };
            self.push(at, Event::Deliver { from: None, to: Addr::new(master, Block::Dict), sig, incarnation: inc });
        }
    }

    /// Restarts a failed node: it registers (`Starting`), recovers from its disk, fetches the
    /// catalog, joins the write chains (`Copying`), copies its partitions from the primaries and
    /// becomes a full replica again (`Started`).
    fn restart_node(&mut self, id: NodeId) {
        if self.cluster.state_of(id) != NodeState::Down || self.nodes[&id].node.is_some() {
            return;
        }
        let mut next = (*self.cluster).clone();
        let st = next.nodes.get_mut(&id).expect("a node");
        st.state = NodeState::Starting;
        st.incarnation += 1;
        st.joined_seq = 0;
        next.version += 1;
        self.publish(next);
        let cfg = self.node_cfg(id, None);
        let sn = self.nodes.get_mut(&id).expect("a node");
        let node = match Node::recover(&cfg, &sn.disk) {
            Ok(n) => n,
            Err(e) => self.fail(&format!("node {id}: recovery at restart failed: {e}")),
        };
        self.run_node(id, node);
    }

    /// Gives a recovered node its disk executor and starts it.
    fn run_node(&mut self, id: NodeId, node: Node) {
        let sn = self.nodes.get_mut(&id).expect("a node");
        let mut io = IoExecutor::new(sn.disk.clone(), 8192);
        for (i, &base) in node.redo_base.iter().enumerate() {
            io.open_redo(i as u16, base).expect("sim disk");
        }
        sn.io = Some(io);
        sn.node = Some(node);
        let inc = self.incarnation;
        let to = Addr::new(id, Block::Dist);
        let at =
            if self.cfg.boot_spread_ms > 0 { self.now + self.rng.below(self.cfg.boot_spread_ms + 1) } else { self.now };
        self.push(at, Event::Deliver { from: None, to, sig: Signal::Start, incarnation: inc });
    }

    /// Builds the oracle from what the blocks say to each other.
    fn observe(&mut self, to: Addr, sig: &Signal) {
        match sig {
            Signal::NodeStarted { .. } if self.started_nodes.insert(to.node) => {
                self.log(|| format!("node {} started", to.node));
            }
            Signal::Prepare(b) if b.pos == 0 => {
                let Some(layout) = &self.layout else { return };
                let key = self.txn_key(&b.txn);
                let reads: Vec<u32> = b
                    .ops
                    .iter()
                    .filter_map(|o| match o {
                        tern_kernel::signal::PrepOp::Exec { idx, op, .. } if op.kind == OpKind::Read => Some(*idx),
                        _ => None,
                    })
                    .collect();
                if !reads.is_empty() {
                    self.oracle.read_ops.insert((key, b.batch), reads);
                }
                for op in &b.ops {
                    let tern_kernel::signal::PrepOp::Exec { op, .. } = op else {
                        continue;
                    };
                    let id = match layout.decode_key(&op.key) {
                        Ok(v) => v[0].as_i128().expect("int") as i64,
                        Err(_) => continue,
                    };
                    let row = || {
                        let v = layout.decode_row(&op.row).expect("valid row");
                        (v[1].as_i128().expect("int") as i64, v[2].as_i128().map(|x| x as i64))
                    };
                    let m = match op.kind {
                        OpKind::Write => ModelOp::Put(id, row()),
                        OpKind::Insert => ModelOp::Insert(id, row()),
                        OpKind::Delete => ModelOp::Delete(id),
                        OpKind::Update => match &op.updates[0].expr {
                            UpdateExpr::Set(Value::Int(a)) => ModelOp::SetA(id, *a),
                            _ => continue,
                        },
                        _ => continue,
                    };
                    let stamp = match &m {
                        ModelOp::Put(_, r) | ModelOp::Insert(_, r) => Some(r.0),
                        ModelOp::SetA(_, a) => Some(*a),
                        ModelOp::Delete(_) => None,
                    };
                    if let Some(s) = stamp {
                        self.oracle.stamp_of.entry(key).or_default().insert(s);
                    }
                    if self.log_key == Some(id) {
                        self.log(|| format!("prepare {key:?} -> {to:?} at pos 0: {m:?}"));
                    }
                    self.oracle.ops.entry(key).or_default().push(m);
                }
            }
            _ => {}
        }
    }

    /// A node failed: transactions that committed only on nodes that are gone now are not
    /// committed (yet).
    fn forget_commits_only_on(&mut self, victim: NodeId) {
        let running = |n: &NodeId| *n != victim && self.nodes[n].node.is_some();
        let lost: Vec<TxnKey> = self
            .oracle
            .committed
            .iter()
            .filter(|k| {
                let handled = self.oracle.commit_nodes.get(k);
                let settled = self.oracle.commit_chains.get(k).is_some_and(|c| handled.is_some_and(|h| c.is_subset(h)));
                !settled && !handled.is_some_and(|ns| ns.iter().any(running))
            })
            .copied()
            .collect();
        // The victim leaves every chain: a transaction the others have all committed is settled.
        for chain in self.oracle.commit_chains.values_mut() {
            chain.remove(&victim);
        }
        for key in lost {
            self.log(|| {
                format!(
                    "commit of {key:?} died with node {victim} (committed on {:?}, ops {:?})",
                    self.oracle.commit_nodes.get(&key),
                    self.oracle.ops.get(&key)
                )
            });
            self.oracle.committed.remove(&key);
            self.oracle.commit_nodes.remove(&key);
            self.oracle.commit_chains.remove(&key);
            self.oracle.commits.retain(|(k, _)| *k != key);
            if let Some(st) = self.oracle.stamp_of.get(&key) {
                for s in st {
                    self.oracle.committed_stamps.remove(s);
                }
            }
        }
    }

    fn txn_key(&self, txn: &TxnRef) -> TxnKey {
        let tc = match txn.tc.block {
            Block::Tc(i) => i,
            _ => 0,
        };
        (self.incarnation, txn.tc.node, tc, txn.id)
    }

    /// What a replica's own signals say: a `Commit` sent up the chain means the sender has
    /// committed (a one-round commit's last replica handles no `Commit` of its own; it is not
    /// committed for the oracle until its primary is, as reads there wait for that), and a
    /// survivor's `Committed` answer to `Resolve` settles such a commit after the primary failed.
    fn observe_ldm_send(&mut self, from: Addr, sig: &Signal) {
        match sig {
            Signal::Commit { txn, epoch, .. } => {
                let key = self.txn_key(txn);
                self.oracle.commit_nodes.entry(key).or_default().insert(from.node);
                if !self.oracle.committed.contains(&key) {
                    self.oracle.fast_epoch.insert(key, *epoch);
                    self.stats.fast_commits += 1;
                }
            }
            Signal::Prepared(b) => {
                let key = self.txn_key(&b.txn);
                let Some(reads) = self.oracle.read_ops.remove(&(key, b.batch)) else { return };
                let Some(layout) = self.layout.clone() else { return };
                for (i, r) in &b.results {
                    let OpResult::Row(bytes) = r else { continue };
                    if !reads.contains(i) {
                        continue;
                    }
                    let Ok(v) = layout.decode_row(bytes) else { continue };
                    let a = v[1].as_i128().expect("int") as i64;
                    let own = self.oracle.stamp_of.get(&key).is_some_and(|s| s.contains(&a));
                    if !own && !self.oracle.committed_stamps.contains(&a) && !self.base.values().any(|r| r.0 == a) {
                        self.fail(&format!("{from:?} read value {a} of a transaction not committed yet"));
                    }
                }
            }
            Signal::Committed { txn, chain, .. } if chain.len() == 1 => {
                let key = self.txn_key(txn);
                if !self.oracle.committed.contains(&key)
                    && let Some(&epoch) = self.oracle.fast_epoch.get(&key)
                {
                    self.oracle.commit_chains.entry(key).or_default().insert(from.node);
                    self.log(|| format!("commit point of {key:?} (epoch {epoch}): resolved at {from:?}"));
                    self.mark_committed(key, epoch);
                }
            }
            _ => {}
        }
    }

    /// A transaction is committed once any replica handled a `Commit` for it: from then on it
    /// only rolls forward (a takeover commits it on the replicas that had not).
    fn observe_delivery(&mut self, node: NodeId, sig: &Signal) {
        let Signal::Commit { txn, epoch, chain, .. } = sig else { return };
        let key = self.txn_key(txn);
        if let Some(k) = self.log_key
            && self.oracle.ops.get(&key).is_some_and(|ops| ops.iter().any(|o| o.key() == k))
        {
            self.log(|| format!("Commit of {key:?} (epoch {epoch}) handled by node {node}, chain {chain:?}"));
        }
        self.oracle.commit_nodes.entry(key).or_default().insert(node);
        // Members that have failed since the chain was formed will never commit it.
        let alive: Vec<NodeId> =
            chain.iter().map(|a| a.node).filter(|n| self.nodes.get(n).is_some_and(|sn| sn.node.is_some())).collect();
        self.oracle.commit_chains.entry(key).or_default().extend(alive);
        if !self.oracle.committed.contains(&key)
            && let Some(k) = self.log_key
            && self.oracle.ops.get(&key).is_some_and(|ops| ops.iter().any(|o| o.key() == k))
        {
            self.log(|| format!("commit point of {key:?} (epoch {epoch}) at {txn:?}"));
        }
        self.mark_committed(key, *epoch);
    }

    /// The commit point of `key` (in `epoch`), once: from then on it only rolls forward.
    fn mark_committed(&mut self, key: TxnKey, epoch: u64) {
        if self.oracle.committed.insert(key) {
            self.oracle.commits.push((key, epoch));
            if let Some(st) = self.oracle.stamp_of.get(&key) {
                self.oracle.committed_stamps.extend(st.iter().copied());
            }
        }
    }

    // ------------------------------------------------------------ clients

    fn client_request(&mut self, client: u64, req: Request) {
        let inc = self.incarnation;
        let c = &mut self.clients[client as usize - 1];
        c.seq += 1;
        c.sent_at = self.now;
        let req_id = c.seq;
        c.state = ClientState::Waiting;
        let t = self.now + self.rng.below(3);
        // Any tc of any node coordinates (DDL and status go to node 1's first tc).
        let to = match &req {
            Request::Txn(_) => match c.tc {
                Some(tc) => tc,
                None => {
                    let live = self.cluster.live_nodes();
                    let node = *self.rng.pick(&live);
                    let tc = Addr::new(node, Block::Tc(self.rng.below(self.cfg.ldm_count as u64) as u16));
                    self.clients[client as usize - 1].tc = Some(tc);
                    tc
                }
            },
            _ => self.verify_tc(),
        };
        self.push(
            t,
            Event::Deliver { from: None, to, sig: Signal::ClientRequest { client, req_id, req }, incarnation: inc },
        );
    }

    fn wake(&mut self, client: u64, after: u64) {
        let inc = self.incarnation;
        self.push(self.now + after, Event::ClientWake { client, incarnation: inc });
    }

    fn client_act(&mut self, client: u64) {
        if Some(client) == self.ddl_client() && self.clients[client as usize - 1].state == ClientState::Idle {
            return self.ddl_act(client);
        }
        if !self.started() || self.clients[client as usize - 1].state != ClientState::Idle {
            self.wake(client, 5);
            return;
        }
        let Some(table) = self.table.clone() else {
            if client == 1 {
                self.create_schema();
            } else {
                self.wake(client, 10);
            }
            return;
        };
        let layout = self.layout.clone().expect("table");
        let stamp_base = ((self.incarnation as i64) << 40) | ((client as i64) << 32);
        let seq = self.clients[client as usize - 1].seq as i64;
        let nops = 1 + self.rng.below(4) as usize;
        let read_only = self.rng.chance(25);
        let mut ops = Vec::new();
        let (mut read_keys, mut stamps) = (Vec::new(), Vec::new());
        for i in 0..nops {
            let id = self.rng.below(self.cfg.keys) as i64;
            let mut key = Vec::new();
            layout.encode_key(&[Value::Int(id)], &mut key).expect("key");
            let stamp = stamp_base | (seq << 4) | i as i64;
            let b = if self.rng.chance(30) { Value::Null } else { Value::Int(self.rng.below(1000) as i64) };
            let mut row = Vec::new();
            layout.encode_row(&[Value::Int(id), Value::Int(stamp), b], &mut row).expect("row");
            let kind = if read_only {
                *self.rng.pick(&[OpKind::Read, OpKind::Read, OpKind::ReadShared, OpKind::ReadExclusive])
            } else {
                *self.rng.pick(&[
                    OpKind::Write,
                    OpKind::Write,
                    OpKind::Insert,
                    OpKind::Update,
                    OpKind::Delete,
                    OpKind::Read,
                ])
            };
            // Some writes return the previous row (as the Redis front end's do): a write that
            // inserts then answers NotFound, and must replicate all the same.
            let returning = if self.rng.chance(30) { Some(vec![1]) } else { None };
            let op = match kind {
                OpKind::Write | OpKind::Insert => {
                    KeyOp { table: table.id, kind, key, row, updates: vec![], projection: returning }
                }
                OpKind::Update => KeyOp {
                    table: table.id,
                    kind,
                    key,
                    row: vec![],
                    updates: vec![ColumnUpdate { col: 1, expr: UpdateExpr::Set(Value::Int(stamp)) }],
                    projection: None,
                },
                k => KeyOp { table: table.id, kind: k, key, row: vec![], updates: vec![], projection: None },
            };
            read_keys.push(read_only.then_some(id));
            if matches!(op.kind, OpKind::Write | OpKind::Insert | OpKind::Update) {
                stamps.push(stamp);
            }
            ops.push(op);
        }
        let exec = match self.rng.below(10) {
            0 => Exec::Rollback,
            1 => Exec::NoCommit,
            _ => Exec::Commit,
        };
        let durable = self.rng.chance(30);
        self.clients[client as usize - 1].next_txn += 1;
        let txn = self.clients[client as usize - 1].next_txn;
        // Only transactions that write need their epoch on disk before a durable acknowledgement.
        let writes = ops.iter().any(|o| o.kind.is_write());
        let c = &mut self.clients[client as usize - 1];
        c.pending = Some((txn, durable && writes));
        c.write_ops = ops.iter().map(|o| o.kind.is_write()).collect();
        c.wrote = false;
        c.tc = None;
        c.read_keys = read_keys;
        c.batch_stamps = stamps;
        c.txn_stamps.clear();
        self.client_request(
            client,
            Request::Txn(TxnReq { txn, ops, exec, abort: AbortOption::AbortOnError, durable, nowait: false }),
        );
    }

    fn create_schema(&mut self) {
        let t = Table {
            id: 0,
            database: "sim".into(),
            name: "t".into(),
            columns: vec![
                Column::new("id", ColumnType::BigInt { unsigned: false }).not_null(),
                Column::new("a", ColumnType::BigInt { unsigned: false }).not_null(),
                Column::new("b", ColumnType::Int { unsigned: false }),
            ],
            primary_key: vec![0],
            partition_key: vec![0],
            // A unique index: writes that would duplicate `b` abort; its hidden index table is
            // checked against the base rows after every recovery.
            indexes: if self.cfg.unique_index {
                vec![tern_types::schema::Index { id: 0, name: "b_uq".into(), columns: vec![2], unique: true }]
            } else {
                vec![]
            },
            partition_count: 0,
            groups: 0,
            ttl: None,
            // Reads at the primary: the linearizability check holds them to the version order
            // (a committed read at a backup may see a commit before its primary does).
            comment: if self.cfg.read_backup { String::new() } else { "NDB_TABLE=READ_BACKUP=0".into() },
        };
        self.client_request(1, Request::Ddl(DdlReq::CreateDatabase { name: "sim".into(), if_not_exists: true }));
        self.clients[0].state = ClientState::Scanning;
        self.pending_table = Some(t);
    }

    fn client_reply(&mut self, client: u64, _req_id: u64, reply: Reply) {
        if Some(client) == self.ddl_client() {
            return self.ddl_reply(client, reply);
        }
        let idx = client as usize - 1;
        match reply {
            Reply::DdlDone { .. } if self.table.is_none() => {
                if let Some(t) = self.pending_table.take() {
                    self.client_request(client, Request::Ddl(DdlReq::CreateTable { table: t, if_not_exists: true }));
                    self.clients[idx].state = ClientState::Scanning;
                    return;
                }
                self.client_request(client, Request::GetCatalog);
                return;
            }
            Reply::Catalog(c) => {
                let t = c.find_table("sim", "t").cloned();
                if let Some(t) = t {
                    let idx = t.indexes.first().map(|i| i.id);
                    self.index_table = idx.and_then(|i| c.index_tables.get(&i)).and_then(|it| c.table(*it)).cloned();
                    self.layout = Some(RowLayout::new(&t));
                    self.table = Some(t);
                }
            }
            Reply::Txn(resp) => {
                if self.txn_reply(client, resp) {
                    return;
                }
            }
            Reply::Error(e) if e.is_temporary() => {}
            // The schema set-up's master failed: tried again.
            Reply::Error(e) if e.code == tern_types::ErrorCode::UnknownResult && self.table.is_none() => {}
            other => self.fail(&format!("client {client}: unexpected reply {other:?}")),
        }
        self.clients[idx].state = ClientState::Idle;
        let think = self.rng.below(8);
        self.wake(client, think);
    }

    /// Handles a transaction answer; true when it sent a follow-up request.
    fn txn_reply(&mut self, client: u64, resp: tern_wire::TxnResp) -> bool {
        let idx = client as usize - 1;
        let (_, durable) = self.clients[idx].pending.take().unwrap_or((0, false));
        // Only a write that found its row (or inserted one) leaves something to commit; a
        // transaction without any commits nothing and is answered at once, durable or not.
        let c = &mut self.clients[idx];
        let wrote_now = resp.results.iter().enumerate().any(|(i, r)| {
            c.write_ops.get(i).copied().unwrap_or(false) && !matches!(r, OpResult::NotFound | OpResult::Error(_))
        });
        c.wrote |= wrote_now;
        let write_ops = std::mem::take(&mut c.write_ops);
        let durable = durable && c.wrote;
        let read_keys = std::mem::take(&mut c.read_keys);
        let stamps = std::mem::take(&mut c.batch_stamps);
        c.txn_stamps.extend(stamps);
        let invoked = c.sent_at;
        // Committed reads: every value read was written by a transaction past its commit point.
        let layout = self.layout.clone().expect("table");
        for (i, r) in resp.results.iter().enumerate() {
            if write_ops.get(i).copied().unwrap_or(false) {
                continue; // the previous row a write returned (projected)
            }
            if let OpResult::Row(bytes) = r {
                self.stats.reads += 1;
                let v = layout.decode_row(bytes).expect("row");
                let a = v[1].as_i128().expect("int") as i64;
                let own = ((a >> 32) & 0xFF) as u64 == client && (a >> 40) as u32 == self.incarnation;
                if !own && !self.oracle.committed_stamps.contains(&a) && !self.base.values().any(|r| r.0 == a) {
                    self.fail(&format!("client {client} read value {a} that no committed transaction wrote"));
                }
                if let Some(&Some(key)) = read_keys.get(i)
                    && !self.cfg.read_backup
                {
                    self.lin_reads.push(linear::Read { key, stamp: a, invoked, answered: self.now });
                }
            }
        }
        match resp.outcome {
            Outcome::Committed { epoch } => {
                self.stats.commits += 1;
                for s in std::mem::take(&mut self.clients[idx].txn_stamps) {
                    self.lin_acks.insert(s, self.now);
                }
                if durable {
                    self.durable_acks.push((resp.txn as i64, epoch));
                    let tc = self.clients[idx].tc;
                    self.log(|| format!("durable ack of client {client} txn {} epoch {epoch} via {tc:?}", resp.txn));
                }
            }
            Outcome::Open => {
                // Finish the transaction: commit it (or roll it back) in a second batch.
                let exec = if self.rng.chance(70) { Exec::Commit } else { Exec::Rollback };
                self.clients[idx].pending = Some((resp.txn, durable));
                self.client_request(
                    client,
                    Request::Txn(TxnReq {
                        txn: resp.txn,
                        ops: vec![],
                        exec,
                        abort: AbortOption::AbortOnError,
                        durable,
                        nowait: false,
                    }),
                );
                return true;
            }
            Outcome::Aborted(e) => {
                self.stats.aborts += 1;
                if e.code == tern_types::ErrorCode::LockWaitTimeout {
                    self.stats.lock_timeouts += 1;
                }
                if e.code == tern_types::ErrorCode::Deadlock {
                    self.stats.deadlocks += 1;
                }
            }
            Outcome::RolledBack => self.stats.aborts += 1,
        }
        false
    }

    fn wake_all(&mut self) {
        for c in 1..=self.clients.len() as u64 {
            let t = self.rng.below(5);
            self.wake(c, t);
        }
    }
}
