//! Addresses, signals and the effects a block returns.
//!
//! A block's `handle` receives one signal and the current time (milliseconds, an input like any
//! other) and appends effects to `Out`: signals to other blocks, replies to clients, disk requests
//! and timers. It never performs them itself. The runtime and the simulator carry effects out.

use std::sync::Arc;
use tern_types::cluster::ClusterState;
use tern_types::filter::Filter;
use tern_types::schema::{IndexId, TableId};
use tern_types::{Catalog, TernError};
use tern_wire::{DdlReq, KeyOp, KeyRange, LogEntry, LogOp, OpResult, Reply, Request};

pub use tern_types::cluster::NodeId;
pub type ClientId = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Block {
    Tc(u16),
    Ldm(u16),
    Dict,
    Dist,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Addr {
    pub node: NodeId,
    pub block: Block,
}

impl Addr {
    pub fn new(node: NodeId, block: Block) -> Addr {
        Addr { node, block }
    }
}

/// A transaction: its coordinator and the coordinator's id for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TxnRef {
    pub tc: Addr,
    pub id: u64,
}

impl TxnRef {
    /// The deadlock-victim order: the transaction with the higher id (the younger one at its
    /// coordinator), then the higher coordinator address. Total, so every member of a cycle
    /// agrees on its highest-ranked member.
    pub fn outranks(&self, other: &TxnRef) -> bool {
        (self.id, self.tc) > (other.id, other.tc)
    }
}

/// A deadlock probe: `initiator` waits (directly or through other waits) for a lock held by
/// `target`. An ldm sends it to the target's tc, which passes it to every ldm where the target
/// has a batch outstanding; an ldm where the target is blocked passes it on to the holders of
/// the lock it waits for. Reaching a lock the initiator holds closes a cycle. The victim is the
/// highest-ranked blocked transaction on the path (`TxnRef::outranks`), so every probe that goes
/// round one cycle picks the same one. `hops` bounds the walk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadlockProbe {
    pub initiator: TxnRef,
    pub target: TxnRef,
    pub hops: u8,
    /// The victim so far, the batch of it that is blocked, and the ldm where it is.
    pub victim: TxnRef,
    pub victim_batch: u32,
    pub victim_at: Addr,
}

/// What an ldm holds of a transaction whose coordinator failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeoverState {
    /// Locks or pending changes, no commit yet.
    Prepared,
    /// Committed here in `epoch` (a backup still holding locks, or a primary's commit marker).
    Committed { epoch: u64 },
}

/// An operation inside a prepare batch.
#[derive(Debug, Clone)]
pub enum PrepOp {
    /// Executed by the primary replica.
    Exec { idx: u32, partition: u32, op: KeyOp },
    /// After-image applied by a backup replica (None = delete).
    Replica { table: TableId, partition: u32, key: Vec<u8>, row: Option<Vec<u8>> },
}

/// The result index under which a backup reports that it could not stage a batch's writes (a
/// lock wait that timed out, memory): the transaction must abort, as no client op failed.
pub const REPLICA_FAILED: u32 = u32::MAX;

/// Operations of one transaction batch for one replica chain (primary first).
#[derive(Debug, Clone)]
pub struct PrepareBatch {
    pub txn: TxnRef,
    pub batch: u32,
    pub chain: Vec<Addr>,
    pub pos: u8,
    pub ops: Vec<PrepOp>,
    /// Results gathered so far (carried down the chain to the last replica), by op index;
    /// `REPLICA_FAILED` marks a backup that could not stage the writes.
    pub results: Vec<(u32, OpResult)>,
    /// Whether any op of this batch holds a lock or pending change at this chain.
    pub holds_state: bool,
    /// Index-table operations the primary derived from unique indexes: (origin op, operation).
    pub triggers: Vec<(u32, KeyOp)>,
    /// A busy row lock fails its operation (temporary Deadlock) instead of waiting.
    pub nowait: bool,
    /// One-round commit (a single-chain autocommit batch of two replicas): the epoch the
    /// coordinator took as its commit point when it sent the batch. The primary keeps it only
    /// when every op succeeded without a lock wait, no trigger followed and no commit in a newer
    /// epoch went before here; the last replica then commits on staging (its prepare
    /// acknowledgement is its `Commit` to the primary). Dropped anywhere: the ordinary rounds.
    pub commit_epoch: Option<u64>,
    /// The coordinator's cluster-map version when it routed the batch. A primary with an older
    /// map waits for that one first: the chain may hold a replica that joined since, and writes
    /// this primary let through meanwhile on its older chains would bypass that replica after
    /// this batch reached it.
    pub map_version: u64,
}

#[derive(Debug, Clone)]
pub struct ScanFrag {
    pub scan: u64,
    pub reply_to: Addr,
    pub table: TableId,
    pub partition: u32,
    pub index: Option<IndexId>,
    /// Ranges of the index to read, in order (one for a plain range scan); unused without one.
    pub ranges: Arc<Vec<KeyRange>>,
    pub filter: Arc<Filter>,
    pub projection: Option<Arc<Vec<u16>>>,
    pub descending: bool,
    pub max_rows: u32,
    /// Resume position: a row id (full scan) or an index entry key.
    pub resume: ScanPos,
    /// Return each row's index entry key (for ordered merges).
    pub with_keys: bool,
    /// Return only rows whose TTL has passed (purgers) instead of only live ones.
    pub expired: bool,
    /// Return partial aggregate groups of the rows scanned instead of the rows.
    pub aggregate: Option<Arc<tern_agg::Aggregation>>,
    /// Steps the ldm may go on with by itself after this one (aggregating scans): each step's
    /// partial groups go to the tc as it ends (`ScanFragRows::more`), so an ldm on another thread
    /// does not wait for the tc's next request. Bounded, so a scan the tc dropped costs at most
    /// this many more steps.
    pub steps: u32,
    /// Entries of the range to leave out before the first returned (`ScanReq::offset`); only in
    /// a fragment that starts the range.
    pub offset: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanPos {
    Start,
    RowId(u32),
    After(Vec<u8>),
    /// In a multi-range scan: the range (counted in reading order) and the entry key to resume
    /// after (`None`: the range's start).
    Ranged(u32, Option<Vec<u8>>),
    Done,
}

#[derive(Debug, Clone)]
pub struct ScanFragRows {
    pub scan: u64,
    pub partition: u32,
    pub rows: Vec<Vec<u8>>,
    pub keys: Vec<Vec<u8>>,
    pub next: ScanPos,
    pub error: Option<TernError>,
    /// The ldm goes on with the next step by itself: the tc's request is still outstanding.
    pub more: bool,
}

/// Messages between blocks (and from the runtime into blocks).
#[derive(Debug, Clone)]
pub enum Signal {
    // Runtime -> tc.
    ClientRequest {
        client: ClientId,
        req_id: u64,
        req: Request,
    },
    ClientGone {
        client: ClientId,
    },
    // tc <-> ldm: transactions.
    Prepare(Box<PrepareBatch>),
    Prepared(Box<PrepareBatch>),
    /// `results`: a one-round commit's op results, carried from the last replica to the
    /// coordinator (empty otherwise: `Prepared` brought them).
    Commit {
        txn: TxnRef,
        epoch: u64,
        chain: Vec<Addr>,
        pos: u8,
        results: Vec<(u32, OpResult)>,
    },
    Committed {
        txn: TxnRef,
        chain: Vec<Addr>,
        results: Vec<(u32, OpResult)>,
    },
    /// The primary dropped a one-round commit because a lock made its batch wait: the
    /// coordinator no longer counts the transaction in the epoch it took (the ordinary rounds
    /// follow, with a commit point of their own).
    FastOff {
        txn: TxnRef,
    },
    /// A data node of a one-round commit's chain failed: the surviving replica answers
    /// `Committed` if it committed the transaction, else aborts it and answers `Aborted`.
    /// Acted on once the ldm has seen `map_version` (as a fan-out `Abort`).
    Resolve {
        txn: TxnRef,
        map_version: u64,
    },
    Complete {
        txn: TxnRef,
        chain: Vec<Addr>,
        pos: u8,
    },
    /// A replica holding a committed transaction (a backup's locks, a primary's marker) saw a
    /// data node fail: the `Complete` travelling its chain may have died with that node. The
    /// coordinator answers `Complete` to `from` alone once it has forgotten the transaction
    /// (every replica committed); one it still finishes gets its own failure handling.
    CompleteReq {
        txn: TxnRef,
        from: Addr,
    },
    /// `map_version` > 0: sent after data nodes failed (a fan-out abort straight to one replica);
    /// the ldm acts on it only once it has itself seen that cluster-map version, so a prepare
    /// forwarded by a failed node that is still in flight cannot overtake it.
    Abort {
        txn: TxnRef,
        chain: Vec<Addr>,
        pos: u8,
        map_version: u64,
    },
    Aborted {
        txn: TxnRef,
        chain: Vec<Addr>,
    },
    /// Deadlock detection across ldms and nodes (edge chasing, after Chandy, Misra and Haas
    /// 1983); see `DeadlockProbe`.
    DeadlockProbe(Box<DeadlockProbe>),
    /// Heartbeat between the dists of data nodes in the write chains, every
    /// `heartbeat_interval_ms`: a node not heard from for twice `failure_timeout_ms` is suspected.
    NodeHeartbeat {
        from: NodeId,
        incarnation: u32,
    },
    /// A probe came back to its initiator: the victim's blocked batch fails with a deadlock
    /// (1213).
    DeadlockVictim {
        txn: TxnRef,
        batch: u32,
    },
    // tc <-> ldm: scans.
    ScanFrag(Box<ScanFrag>),
    ScanFragRows(Box<ScanFragRows>),
    // Membership: a new cluster state (node states and the partition map), runtime -> dist ->
    // every local block, in version order.
    ClusterMap {
        state: Arc<ClusterState>,
    },
    // Epoch protocol, run by the master node's dist over every live node (`from` = the master's
    // dist, where answers go).
    EpochPrepare {
        from: Addr,
        epoch: u64,
    },
    /// tc -> the epoch master's dist: a durable commit of `epoch` waits until that epoch is
    /// durable. The master starts the round that closes and flushes it at once (or right after
    /// the round running), not at the next interval; commits waiting meanwhile share that round.
    EpochWanted {
        from: Addr,
        epoch: u64,
    },
    /// `current`: the epoch the tc was giving out (a new master learns the newest this way).
    EpochPrepared {
        from: Addr,
        epoch: u64,
        current: u64,
    },
    /// `quiet`: the master runs rounds at the quiet interval (nothing committed for a while);
    /// a tc that commits in this epoch tells it at once (`EpochBusy`).
    EpochCommit {
        from: Addr,
        epoch: u64,
        quiet: bool,
    },
    /// tc -> the epoch master's dist: the first commit of an epoch the master opened as quiet;
    /// rounds go back to the normal interval (the next one starts now when one is due).
    EpochBusy {
        from: Addr,
    },
    /// `newest_commit`: the newest epoch (<= `epoch`) of any commit this tc ever started.
    EpochTcFinished {
        from: Addr,
        epoch: u64,
        newest_commit: u64,
    },
    /// `mark`: write an epoch mark before the sync (the epoch, or one unmarked before it, had
    /// commits somewhere).
    EpochFlush {
        from: Addr,
        epoch: u64,
        mark: bool,
    },
    /// `max_epoch`: newest epoch of any commit this ldm has applied.
    EpochFlushed {
        from: Addr,
        epoch: u64,
        synced_lsn: u64,
        max_epoch: u64,
    },
    /// Master -> every node's dist: write the system file with durable epoch `epoch` and these
    /// synced LSNs of the node's ldms (in instance order).
    EpochSave {
        from: Addr,
        epoch: u64,
        synced_lsn: Vec<u64>,
    },
    EpochSaved {
        from: Addr,
        epoch: u64,
    },
    /// The master's tc 0 -> every live ldm after data nodes failed: report the transactions of
    /// coordinators on those nodes (TC takeover, ndb-protocols.md §2).
    /// Answered once the ldm has seen `map_version` (so nothing from the failed nodes can follow).
    TakeoverReq {
        from: Addr,
        failed: Vec<NodeId>,
        map_version: u64,
    },
    TakeoverConf {
        from: Addr,
        txns: Vec<(TxnRef, TakeoverState)>,
    },
    /// The takeover tc -> the master's dist: every transaction of the failed coordinators is
    /// committed or aborted everywhere (their epochs may now finish).
    TakeoverDone {
        from: Addr,
        failed: Vec<NodeId>,
        /// The cluster map version the takeover started from (the dist may not have seen it
        /// yet; see `Dist::done_ahead`).
        map_version: u64,
    },
    // Node restart: copying partitions to a node that rejoins (ndb-protocols.md §5.2).
    /// A restarted node's dist -> its ldms: fetch your partitions from their primaries.
    StartCopy,
    /// Restarting ldm -> the primary's ldm: send me this partition (acted on once the primary
    /// has seen `map_version`, which puts the restarting node in the partition's write chain).
    CopyFragReq {
        from: Addr,
        table: TableId,
        partition: u32,
        map_version: u64,
    },
    /// Primary -> restarting ldm: committed rows of a partition (`done`: the last batch).
    CopyRows {
        from: Addr,
        table: TableId,
        partition: u32,
        rows: Vec<Vec<u8>>,
        done: bool,
        /// The newest epoch the primary had applied when it read these rows: the restarting
        /// replica's checkpoint holds data up to it, so it may serve a recovery to no older
        /// epoch.
        max_epoch: u64,
    },
    /// Restarting ldm -> primary: a batch was applied, send the next.
    CopyAck {
        from: Addr,
        table: TableId,
        partition: u32,
    },
    /// An ldm -> its dist: every partition it holds has been copied.
    CopyDone {
        from: Addr,
        rows: u64,
    },
    /// A restarting node's dict -> the master's: send me the catalog (answered with SchemaWrite).
    CatalogReq {
        from: Addr,
        /// The asking node's incarnation: a map older than the request that shows the node
        /// down must not end the writes to it.
        incarnation: u32,
    },
    /// A node's dist -> the master's: this node has started and takes part in epochs.
    DistStarted {
        from: Addr,
        durable_epoch: u64,
    },
    EpochDurable {
        epoch: u64,
    },
    // Schema.
    Ddl {
        client: ClientId,
        req_id: u64,
        reply_to: Addr,
        req: DdlReq,
    },
    DdlReply {
        client: ClientId,
        req_id: u64,
        reply: Reply,
    },
    AutoInc {
        client: ClientId,
        req_id: u64,
        reply_to: Addr,
        table: TableId,
        count: u32,
    },
    /// A catalog for a tc or ldm to apply; it answers `SchemaAck` to `dict`.
    Schema {
        catalog: Arc<Catalog>,
        dict: Addr,
    },
    /// Master dict -> every node's dict: persist this catalog (and, with `broadcast`, apply it in
    /// every local block), then answer `SchemaWritten`.
    SchemaWrite {
        from: Addr,
        catalog: Arc<Catalog>,
        broadcast: bool,
    },
    SchemaWritten {
        from: Addr,
        version: u64,
    },
    /// The control plane -> this node's dict: the management nodes committed the catalog of
    /// `version` this dict proposed (`ControlReq::Catalog`); the schema change has happened.
    CatalogStored {
        version: u64,
    },
    /// The control plane -> the master's dict: the catalog the management nodes hold (version 0:
    /// none yet). With `refused`, the proposal of that version was refused because the management
    /// nodes hold another one (a change of an earlier master this one never saw).
    MgmCatalog {
        catalog: Arc<Catalog>,
        refused: Option<u64>,
    },
    SchemaAck {
        from: Addr,
        version: u64,
    },
    IndexBuild {
        dict: Addr,
        table: TableId,
        index: IndexId,
        catalog: Arc<Catalog>,
    },
    IndexBuilt {
        from: Addr,
        index: IndexId,
        result: Result<(), TernError>,
    },
    // Start-up.
    Start,
    LdmReady {
        from: Addr,
        synced_lsn: u64,
    },
    NodeStarted {
        epoch: u64,
        durable_epoch: u64,
    },
    // Disk completions and timers.
    IoDone {
        token: u64,
        result: Result<(), String>,
    },
    Tick,
    /// An ldm continues its running checkpoint (sent to itself so other work interleaves).
    CheckpointStep,
    /// The membership thread to every tc: the node's lease from the management nodes runs until
    /// `until_ms` (block time). A tc serves no client request after it (a temporary error sends
    /// the client to another node) until a renewal moves it on; `u64::MAX`: no lease needed
    /// (a node without management nodes).
    Lease {
        until_ms: u64,
    },
    /// The node's driver -> every tc: the node is stopping in order; serve no more client
    /// requests (a temporary error sends the client to another node), so that the epochs the
    /// stop makes durable hold every commit acknowledged.
    StopServing,
    // Change logs (backups): a tc -> every ldm of the cluster for a client's `Request::Log`.
    /// `sub`: the tc's number for the log (the ldm keys it by `from` too); `call`: the tc's
    /// number for this request, echoed in the answer; `max_bytes`: this ldm's share of a poll.
    LogReq {
        from: Addr,
        sub: u64,
        call: u64,
        op: LogOp,
        max_bytes: u32,
        /// At `Start`: the tables it logs (empty: all).
        tables: Vec<TableId>,
    },
    /// ldm -> tc: the entries it buffered (Poll), or why the log failed there.
    LogChunk {
        from: Addr,
        call: u64,
        entries: Vec<LogEntry>,
        error: Option<TernError>,
    },
}

/// A disk request. Files are named relative to the node's data directory.
#[derive(Debug, Clone)]
pub enum IoReq {
    /// Append to an ldm's redo log at its current end (no sync).
    RedoAppend {
        ldm: u16,
        bytes: Vec<u8>,
    },
    /// Make everything appended so far durable; answers IoDone { token }.
    RedoSync {
        ldm: u16,
        token: u64,
    },
    /// Delete redo segments that lie wholly before `lsn`.
    RedoDiscard {
        ldm: u16,
        lsn: u64,
    },
    /// Atomically replace a file and make it durable; answers IoDone { token }.
    WriteFile {
        name: String,
        bytes: Vec<u8>,
        token: u64,
    },
    DeleteFile {
        name: String,
    },
    /// Save a system-file record (`Sysfile::encode`) durably: appended to the system file and
    /// synced (one fdatasync), or — first after a start, and when the file has grown — the file
    /// replaced atomically by this record alone; answers IoDone { token }.
    SaveSysfile {
        record: Vec<u8>,
        token: u64,
    },
    /// Append to a file being built (a checkpoint); answers IoDone { token }.
    FileAppend {
        name: String,
        bytes: Vec<u8>,
        token: u64,
    },
    /// Sync a built file and rename it into place durably; answers IoDone { token }.
    FileFinish {
        from: String,
        to: String,
        token: u64,
    },
}

/// A request to the control plane (the management nodes), carried out by the driver.
#[derive(Debug, Clone, PartialEq)]
pub enum ControlReq {
    /// This node asks to move to `state` (Copying: join the write chains; Started: a full
    /// replica again).
    SetState(tern_types::cluster::NodeState),
    /// The master reports the newest epoch every live node's disk marks whole (a marked flush).
    DurableEpoch(u64),
    /// This node has not heard from that node for twice the failure timeout (or lost signals
    /// to it): the control plane fails one of the two (`ClusterState::choose_victim`).
    Suspect(NodeId),
    /// The master's dict proposes a schema change: the management nodes own the catalog, and a
    /// change has happened once they committed it (answered `Signal::CatalogStored`, or
    /// `Signal::MgmCatalog` with `refused`). Only then is it written to the data nodes.
    Catalog(Arc<Catalog>),
    /// A move's target ldm holds the partition (every row, in a usable checkpoint).
    MoveCopied { table: TableId, partition: u32 },
    /// A move's source ldm serves the switched partition no more.
    MoveLeft { table: TableId, partition: u32 },
    /// ALTER TABLE … REORGANIZE PARTITION (the dict): these tables are to be spread over every
    /// node group in service.
    Reorganize { tables: Vec<TableId> },
}

/// Effects collected from a block's handling of one signal.
#[derive(Debug, Default)]
pub struct Out {
    pub signals: Vec<(Addr, Signal)>,
    pub replies: Vec<(ClientId, u64, Reply)>,
    pub io: Vec<(Addr, IoReq)>,
    pub timers: Vec<(u64, Addr, Signal)>,
    pub control: Vec<ControlReq>,
    /// Signals a block sends itself to go on with a long task: delivered after the worker has
    /// looked at its other work (mailbox, sockets), so the task cannot hold the thread.
    pub later: Vec<(Addr, Signal)>,
}

impl Out {
    pub fn send(&mut self, to: Addr, sig: Signal) {
        self.signals.push((to, sig));
    }
    pub fn reply(&mut self, client: ClientId, req_id: u64, reply: Reply) {
        self.replies.push((client, req_id, reply));
    }
    pub fn io(&mut self, from: Addr, req: IoReq) {
        self.io.push((from, req));
    }
    pub fn timer(&mut self, delay_ms: u64, to: Addr, sig: Signal) {
        self.timers.push((delay_ms, to, sig));
    }
    /// Sends `sig` to go on with a task after other waiting work (see `later`).
    pub fn send_later(&mut self, to: Addr, sig: Signal) {
        self.later.push((to, sig));
    }
    pub fn is_empty(&self) -> bool {
        self.signals.is_empty()
            && self.later.is_empty()
            && self.replies.is_empty()
            && self.io.is_empty()
            && self.timers.is_empty()
            && self.control.is_empty()
    }
}

impl Signal {
    /// Signals only a node's own driver or blocks send (start-up, timers, disk completions, the
    /// membership thread's maps and catalogs, client traffic, the copy hand-offs between a dist
    /// and its own ldms): one arriving on the node-to-node port is dropped, never delivered.
    pub fn is_local_only(&self) -> bool {
        matches!(
            self,
            Signal::Start
                | Signal::Tick
                | Signal::IoDone { .. }
                | Signal::LdmReady { .. }
                | Signal::NodeStarted { .. }
                | Signal::CheckpointStep
                | Signal::ClusterMap { .. }
                | Signal::CatalogStored { .. }
                | Signal::MgmCatalog { .. }
                | Signal::ClientRequest { .. }
                | Signal::ClientGone { .. }
                | Signal::StartCopy
                | Signal::CopyDone { .. }
                | Signal::Lease { .. }
                | Signal::StopServing
        )
    }
}

/// Signals a block received that it has no use for (a signal of another block, or one a real
/// network delivered early, late or twice), across every block of this process.
static UNEXPECTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// The (block, signal kind) pairs already reported: each is logged once.
static UNEXPECTED_SEEN: std::sync::Mutex<std::collections::BTreeSet<(&'static str, String)>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// How many unexpected signals the blocks of this process dropped.
pub fn unexpected_signals() -> u64 {
    UNEXPECTED.load(std::sync::atomic::Ordering::Relaxed)
}

/// A block at `at` received `sig`, which it does not handle in any state: it is counted, the first
/// of its kind is reported on stderr (with its sender, which the signal's fields name), and it is
/// dropped. One misrouted or stray peer signal must not stop a data node; a breach of the block's
/// own state still does (asserts). The report is the only output and changes no state, so runs
/// stay deterministic.
pub fn drop_unexpected(at: Addr, block: &'static str, sig: &Signal) {
    UNEXPECTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let text = format!("{sig:?}");
    let kind: String = text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    let first = UNEXPECTED_SEEN.lock().unwrap_or_else(|p| p.into_inner()).insert((block, kind));
    if first {
        let shown: String = text.chars().take(300).collect();
        eprintln!(
            "tern: {block} of node {} dropped an unexpected signal (further ones of this kind are only counted): {shown}",
            at.node
        );
    }
}
