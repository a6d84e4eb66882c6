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
//!
//! Here: the configuration, the event queue and the main loop. `disk` is the simulated disk,
//! `net` the network and clocks, `control` the control plane the nodes talk to, `faults` the
//! crashes, failures, restarts and cut links, `clients` the simulated clients, `backup` the
//! simulated `tern backup`, `oracle` what the signals say was committed and the checks against
//! it, `linear` the linearizability check.

mod backup;
mod clients;
mod control;
mod disk;
mod faults;
pub mod linear;
mod member;
mod net;
mod oracle;

use backup::{BACKUP_CLIENT, SimBackup};
use clients::{ClientState, SimClient};
pub use disk::SimDisk;
use oracle::Oracle;

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
    /// and the control plane fails one (`ClusterState::choose_victim`).
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
    /// control plane brings it into service and reorganises every table (partitions move there
    /// under whatever faults come), and past the middle takes it out again (they move back).
    pub scale_out: bool,
    /// How often a backup is begun when none runs.
    pub backup_every_ms: u64,
    /// The data nodes run their real membership threads (`tern_control::member`: maps only
    /// through heartbeat replies, leases, fencing) against the leader's real failure detector
    /// (a killed node is declared failed when its heartbeats have stopped for a failure
    /// timeout). Off: membership is modelled (every running node gets each map within a few ms,
    /// a killed node is declared failed at once, requests reach the state machine as one call).
    pub membership: bool,
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
            membership: true,
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
    /// A block's request reaching its node's membership threads (the process's control inbox),
    /// from the node's incarnation `node_incarnation` (dropped when that process is gone).
    Control {
        node: NodeId,
        node_incarnation: u32,
        req: ControlReq,
        incarnation: u32,
    },
    /// Something for a node's membership threads (`member`).
    Member {
        node: NodeId,
        node_incarnation: u32,
        ev: member::MemberEv,
        incarnation: u32,
    },
    /// A node's heartbeat reaching the management nodes' leader.
    MgmHeartbeat {
        node: NodeId,
        node_incarnation: u32,
        known_version: u64,
        suspects: Vec<NodeId>,
        incarnation: u32,
    },
    /// The leader's failure detector runs.
    DetectorTick {
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
    /// The membership threads of the running process.
    member: Option<member::SimMember>,
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
    /// The newest cluster map (the management nodes' state's).
    cluster: std::sync::Arc<ClusterState>,
    /// The management nodes' replicated state machine (`control`).
    mgm: tern_control::ControlState,
    /// The management nodes' leader's failure detector (`member`).
    detector: tern_control::Detector,
    /// The catalog the management nodes own, decoded (kept across whole-cluster crashes).
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
    /// The cluster went down and every process stopped: the main loop runs a system restart.
    restart_cluster: bool,
    /// When each node's blocks got the newest map, with modelled membership (the membership
    /// thread hands a node the catalog only after the map that made it master).
    map_at: BTreeMap<NodeId, u64>,
    failed_in_start: bool,
    /// Databases the DDL client created (acknowledged), and the one it waits for.
    ddl_acked: BTreeSet<String>,
    ddl_waiting: Option<String>,
    ddl_seq: u64,
    /// The backup running (client `BACKUP_CLIENT`), and when the next one starts.
    backup: Option<SimBackup>,
    next_backup: u64,
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
    /// Nodes the management nodes' detector declared failed, and nodes that fenced themselves.
    pub declared_failed: u32,
    pub fences: u32,
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
        self.declared_failed += o.declared_failed;
        self.fences += o.fences;
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
        let config = ClusterConfig {
            replicas: cfg.replicas,
            data_nodes: (1..=cfg.data_nodes)
                .map(|id| DataNodeSpec { id, host: "sim".into(), port: 0, location_domain: 0 })
                .collect(),
            mgmds: vec![tern_types::cluster::MgmdSpec { id: 65, host: "sim".into(), port: 0 }],
            ldm_workers: cfg.ldm_count,
            epoch_interval_ms: cfg.epoch_interval_ms,
            heartbeat_interval_ms: 100,
            failure_timeout_ms: 1000,
        };
        config.validate().expect("a valid simulated cluster");
        let mut mgm = tern_control::ControlState::new(config);
        if cfg.scale_out {
            // The last node group is one an operator added: configured, its nodes running, not
            // yet in service (held out as a drained group until the run brings it in).
            let c = &mut mgm.state;
            assert!(c.groups().len() >= 2, "scale_out needs two node groups");
            c.base_groups = c.groups().len() as u32 - 1;
            c.active_groups = c.base_groups;
            c.draining.insert(c.base_groups);
        }
        let cluster = std::sync::Arc::new(mgm.state.clone());
        let c = &mgm.state.config;
        let detector = tern_control::Detector::new(c.failure_timeout_ms, c.heartbeat_interval_ms, 0);
        let nodes = (1..=cfg.data_nodes)
            .map(|id| (id, SimNode { disk: SimDisk::default(), node: None, io: None, io_time: 0, member: None }))
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
            mgm,
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
            restart_cluster: false,
            map_at: BTreeMap::new(),
            failed_in_start: false,
            ddl_acked: BTreeSet::new(),
            ddl_waiting: None,
            ddl_seq: 0,
            backup: None,
            next_backup: first_backup,
            detector,
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
            if std::mem::take(&mut sim.restart_cluster) {
                sim.crash_and_recover();
                continue;
            }
            if sim.now >= next_grow.min(next_shrink) && sim.started() && sim.table.is_some() {
                let grow = next_grow <= next_shrink;
                let last = sim.cluster.groups().len() as u32 - 1;
                if grow {
                    // The added group comes into service and every table is spread over it.
                    sim.propose(tern_control::Command::UndrainGroup { group: last }).expect("the added group comes in");
                    let tables: Vec<u32> =
                        sim.mgm_catalog.as_ref().map_or_else(Vec::new, |c| c.tables.keys().copied().collect());
                    for table in tables {
                        sim.propose(tern_control::Command::Reorganize { table }).expect("a table of the catalog");
                    }
                    next_grow = u64::MAX;
                } else {
                    // As an operator drops the node group: its partitions move off it.
                    sim.propose(tern_control::Command::DrainGroup { group: last }).expect("the added group drains");
                    next_shrink = u64::MAX;
                }
                sim.log(|| format!("node groups in service: {}", sim.cluster.active_groups));
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
        self.system_restart();
        let live = self.cluster.live_nodes();
        // The consistent cut the management nodes chose: the smallest epoch the system files of
        // the nodes that hold the data name, or the newest durable epoch reported if later.
        let cut = Some(self.cluster.durable_epoch);
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
            self.run_node(id, node, true);
        }
        self.started_nodes.clear();
        self.link_time.clear();
        self.cut.clear();
        if self.cfg.membership {
            let incarnation = self.incarnation;
            self.push(self.now + self.cluster.config.heartbeat_interval_ms, Event::DetectorTick { incarnation });
        } else {
            self.give_master_the_catalog();
        }
        if self.cfg.boot_spread_ms > 0 && self.cfg.fail_every_ms > 0 {
            self.fail_in_start = Some(self.now);
        }
    }

    /// One event, without waking clients (used while verifying).
    fn step_node_only(&mut self) -> bool {
        self.step_inner(false)
    }

    fn step(&mut self) -> bool {
        self.step_inner(true)
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
                if self.cfg.membership {
                    self.member_request(node, node_incarnation, req);
                } else {
                    // Requests that name their incarnation go to the state machine, which
                    // refuses a stale one itself; the others are a stale process's only if it
                    // is not current.
                    let names_incarnation = matches!(
                        req,
                        ControlReq::SetState(_) | ControlReq::MoveCopied { .. } | ControlReq::MoveLeft { .. }
                    );
                    if names_incarnation
                        || self.cluster.nodes.get(&node).is_some_and(|s| s.incarnation == node_incarnation)
                    {
                        self.control(node, node_incarnation, req);
                    }
                }
            }
            Event::Member { node, node_incarnation, ev, incarnation } if incarnation == self.incarnation => {
                self.member_event(node, node_incarnation, ev)
            }
            Event::MgmHeartbeat { node, node_incarnation, known_version, suspects, incarnation }
                if incarnation == self.incarnation =>
            {
                self.mgm_heartbeat(node, node_incarnation, known_version, suspects)
            }
            Event::DetectorTick { incarnation } if incarnation == self.incarnation => self.detector_tick(),
            _ => {}
        }
        true
    }

    /// Gives a recovered node its disk executor and starts it.
    /// Starts node `id`'s process on its recovered blocks (`booted_started`: in a system
    /// restart, as a full replica) and its membership threads.
    fn run_node(&mut self, id: NodeId, node: Node, booted_started: bool) {
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
        if self.cfg.membership {
            self.start_member(id, booted_started);
        }
    }

    // ------------------------------------------------------------ clients
}
