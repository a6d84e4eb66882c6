//! Tern's native client library (the NDB API idea): connect to a data node, read the catalog, run
//! transactions of batched primary-key operations and scans with pushed-down filters, projections
//! and limits, asynchronously or through a blocking wrapper.
//!
//! Futures here are runtime-agnostic (they complete from the connection's reader thread), so they
//! work on tokio or with the bundled `block_on`. Requests from concurrent callers on one
//! connection are written together (see `conn`). `Client::run` retries temporary errors
//! (lock wait timeouts, node restarts, overload) with bounded, growing back-off.
//!
//! The client is shared by every connection of a front end, so its locks are used as they are
//! when poisoned: a panic in one caller must not break the others (their critical sections only
//! copy or swap, so a poisoned lock still holds consistent data).
//!
//! ```no_run
//! use tern_client::{Client, Value};
//! let client = Client::connect("127.0.0.1:11860").unwrap();
//! let t = client.table("shop", "items").unwrap();
//! let mut txn = client.begin();
//! let ops = vec![t.write(&[Value::Int(1), Value::str("apple")]).unwrap(), t.read(&[Value::Int(2)]).unwrap()];
//! let results = tern_client::block_on(txn.execute(ops, tern_client::Exec::Commit)).unwrap();
//! ```

mod conn;
#[cfg(feature = "tokio")]
pub mod frontend;
#[cfg(feature = "tokio")]
pub mod hosted;
pub mod metrics;
pub mod secret;
pub mod spinwatch;
#[cfg(feature = "tls")]
pub mod tls;

use conn::Conn;
pub use conn::{IN_FLIGHT_MAX, ReplyFuture, allow_reply_spin, flush_deferred, set_defer_sends, set_hosts_worker};

/// Data node addresses the management nodes say are not serving (failed, restarting): clients
/// of this process try them last (see `set_down_nodes`).
static DOWN_NODES: std::sync::RwLock<Vec<String>> = std::sync::RwLock::new(Vec::new());
/// Whether `DOWN_NODES` is non-empty (read on every request; written only on map changes).
static ANY_DOWN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Tells every client of this process which data nodes (by the `host:port` they were given) the
/// management nodes declared not serving: connections to a node newly in the set are closed at
/// once (their waiting requests fail as on a lost connection and are retried elsewhere, a
/// commit in flight reports an unknown result) and reconnects try the serving nodes first.
/// A frozen node (e.g. a stopped process, whose kernel still accepts connections) thus stalls
/// its clients only until it is declared failed, not until their request timeout.
pub fn set_down_nodes(down: Vec<String>) {
    let newly: Vec<String> = {
        let mut cur = DOWN_NODES.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let newly = down.iter().filter(|a| !cur.contains(a)).cloned().collect();
        ANY_DOWN.store(!down.is_empty(), Ordering::Relaxed);
        *cur = down;
        newly
    };
    for a in newly {
        conn::close_connections_to(&a, "the management nodes declared the data node failed");
    }
}

fn is_down(addr: &str) -> bool {
    ANY_DOWN.load(Ordering::Relaxed)
        && DOWN_NODES.read().unwrap_or_else(std::sync::PoisonError::into_inner).iter().any(|a| a == addr)
}

/// The order in which to try `n` addresses starting at `from`: serving ones first.
fn try_order(addrs: &[String], from: usize) -> Vec<usize> {
    let n = addrs.len();
    let (up, down): (Vec<usize>, Vec<usize>) = (0..n).map(|k| (from + k) % n).partition(|&i| !is_down(&addrs[i]));
    up.into_iter().chain(down).collect()
}
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
pub use tern_types::filter::{CmpOp, Filter};
use tern_types::row::{decode_values, encode_index_value};
pub use tern_types::schema::{Catalog, Column, ColumnType, Index, Table, TableId};
use tern_types::value::coerce;
pub use tern_types::{ErrorCode, TernError, Value};
pub use tern_wire::{
    AbortOption, Bound, ColumnUpdate, DdlReq, Exec, KeyOp, KeyRange, LogEntry, LogOp, LogPart, OpKind, OpResult,
    Outcome, SCAN_RANGES_MAX, StatusInfo, UpdateExpr,
};
use tern_wire::{Reply, Request, ScanReq, TxnReq};

pub type Result<T> = std::result::Result<T, TernError>;

/// AUTO_INCREMENT values a client reserves at a time.
pub const AUTO_INC_PREFETCH: u32 = 64;

/// Client options.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub connect_timeout: Duration,
    /// How long a request may wait for its reply.
    pub request_timeout: Duration,
    /// Attempts `Client::run` makes on temporary errors.
    pub retries_max: u32,
    pub retry_backoff_first: Duration,
    pub retry_backoff_max: Duration,
    /// TCP, shared memory, or shared memory when the data node is on this host (the default;
    /// the environment variable `TERN_TRANSPORTER` overrides it).
    pub transporter: tern_shm::Transporter,
    /// The cluster secret to prove when connecting (default: the file named by the
    /// environment variable `TERN_CLUSTER_SECRET_FILE`, when set and readable).
    pub cluster_secret: Option<tern_types::secret::ClusterSecret>,
}

/// The cluster secret of this process's environment (read once); an unreadable file is reported
/// on standard error and leaves the client without a secret (the data node then refuses it with
/// a clear error).
pub fn env_cluster_secret() -> Option<tern_types::secret::ClusterSecret> {
    static SECRET: std::sync::OnceLock<Option<tern_types::secret::ClusterSecret>> = std::sync::OnceLock::new();
    SECRET
        .get_or_init(|| {
            secret::secret_from_env().unwrap_or_else(|e| {
                eprintln!("tern: {e}");
                None
            })
        })
        .clone()
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(60),
            retries_max: 10,
            retry_backoff_first: Duration::from_millis(2),
            retry_backoff_max: Duration::from_millis(500),
            transporter: tern_shm::Transporter::from_env_or(tern_shm::Transporter::Auto),
            cluster_secret: env_cluster_secret(),
        }
    }
}

struct Inner {
    /// The first connection (whatever worker the node gave it): catalog, DDL, status, scans.
    /// The first connection and the worker serving it; replaced when it closed (a restarted
    /// data node) by the next caller that needs it.
    conn: RwLock<(Arc<Conn>, u16)>,
    /// When a reconnect was last tried (at most one try per `RECONNECT_EVERY`).
    reconnect_at: std::sync::Mutex<Option<std::time::Instant>>,
    /// TCP addresses of the data nodes this client may use (empty for an in-process
    /// connection), and which of them the connections go to now. When the first connection
    /// closes, the next address that answers takes over (failover to another data node).
    addrs: Vec<String>,
    /// An in-process client's way to open a connection to a given worker (distribution
    /// awareness without sockets); None for TCP and single-connection in-process clients.
    local: Option<LocalMaker>,
    current: std::sync::atomic::AtomicUsize,
    /// Worker threads of the node.
    workers: u16,
    /// Lazily opened connections to each worker (distribution awareness).
    per_worker: Vec<RwLock<Option<Arc<Conn>>>>,
    /// Row layout and partition count per table id, for choosing a transaction's worker.
    routing: RwLock<tern_types::hash::FastMap<u32, (Arc<tern_types::RowLayout>, u32)>>,
    opts: ClientOptions,
    catalog: RwLock<Arc<Catalog>>,
    next_txn: AtomicU64,
    next_scan: AtomicU64,
    /// Transactions begin durable (their commit is answered once its epoch is on disk on every
    /// replica) — the front ends' "sync every commit" settings.
    durable_default: std::sync::atomic::AtomicBool,
    /// Tables whose writes make a transaction durable (Redis's per-database `appendfsync`);
    /// `durable_tables_any` spares the lock when there are none.
    durable_tables: RwLock<std::collections::BTreeSet<u32>>,
    durable_tables_any: std::sync::atomic::AtomicBool,
    /// Table handles of the current catalog, by database, then name (looked up without
    /// allocating: this is on every REST sub-operation's path).
    handles: RwLock<std::collections::HashMap<String, std::collections::HashMap<String, TableHandle>>>,
    /// Prefetched AUTO_INCREMENT values per table: [next, end).
    auto_inc: std::sync::Mutex<std::collections::HashMap<u32, (u64, u64)>>,
    /// Connections to the other data nodes of `addrs`, by (address, worker), for transactions
    /// whose first row lives in a node group the current node is not in (`node_conn_for_batch`),
    /// and when an open to one last failed (not tried again for a second).
    others: RwLock<std::collections::HashMap<(String, u16), Arc<Conn>>>,
    others_failed: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

/// A connection to a data node with its catalog. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

fn unexpected(r: Reply) -> TernError {
    match r {
        Reply::Error(e) => e,
        other => TernError::new(ErrorCode::Internal, format!("unexpected reply: {other:?}")),
    }
}

impl Client {
    /// Connects to a data node: `addr` is `host:port`, or several separated by commas (any data
    /// nodes of the cluster: the first that answers is used, and the others take over when it
    /// fails).
    pub fn connect(addr: &str) -> Result<Client> {
        Client::connect_with(addr, ClientOptions::default())
    }

    pub fn connect_with(addr: &str, opts: ClientOptions) -> Result<Client> {
        let addrs: Vec<String> = addr.split(',').map(|a| a.trim().to_string()).filter(|a| !a.is_empty()).collect();
        let mut last = TernError::new(ErrorCode::InvalidRequest, "no data node address given");
        for i in try_order(&addrs, 0) {
            let a = &addrs[i];
            match Conn::open(a, opts.connect_timeout, opts.transporter) {
                Ok(conn) => return Client::init(conn, addrs.clone(), i, opts, None),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Connects through an in-process transport (see `tern_wire::LocalTransport`).
    pub fn connect_local(
        make: impl FnOnce(tern_wire::ReplySink) -> Box<dyn tern_wire::LocalTransport>,
    ) -> Result<Client> {
        Client::init(Conn::local(make), Vec::new(), 0, ClientOptions::default(), None)
    }

    /// Connects through an in-process transport that can reach each worker (`make(Some(w), ..)`;
    /// `None`: any): like a TCP client, a batch whose rows all live on one worker goes to that
    /// worker's tc, so it never crosses to another thread there.
    pub fn connect_local_workers(make: LocalMaker) -> Result<Client> {
        let first = make.clone();
        Client::init(Conn::local(move |sink| first(None, sink)), Vec::new(), 0, ClientOptions::default(), Some(make))
    }

    fn init(
        conn: Arc<Conn>,
        addrs: Vec<String>,
        current: usize,
        opts: ClientOptions,
        local: Option<LocalMaker>,
    ) -> Result<Client> {
        let hello = Request::Hello {
            client_name: "tern-client".into(),
            worker: None,
            proof: opts.cluster_secret.as_ref().map(|s| s.proof()),
        };
        let (workers, first_worker) = match conn.send(hello)?.wait(&conn, opts.request_timeout)? {
            Reply::Welcome { workers, worker, .. } => (workers.max(1), worker),
            r => return Err(unexpected(r)),
        };
        let c = Client {
            inner: Arc::new(Inner {
                conn: RwLock::new((conn, first_worker)),
                reconnect_at: std::sync::Mutex::new(None),
                addrs,
                local,
                current: std::sync::atomic::AtomicUsize::new(current),
                workers,
                per_worker: (0..workers).map(|_| RwLock::new(None)).collect(),
                routing: RwLock::new(Default::default()),
                opts,
                catalog: RwLock::new(Arc::new(Catalog::new())),
                next_txn: AtomicU64::new(1),
                next_scan: AtomicU64::new(1),
                durable_default: std::sync::atomic::AtomicBool::new(false),
                durable_tables: Default::default(),
                durable_tables_any: std::sync::atomic::AtomicBool::new(false),
                auto_inc: Default::default(),
                handles: Default::default(),
                others: Default::default(),
                others_failed: Default::default(),
            }),
        };
        c.refresh_catalog()?;
        Ok(c)
    }

    /// How this client reaches its data node: "tcp", "shm" (shared memory) or "in-process".
    pub fn transporter(&self) -> &'static str {
        self.main_conn().transport_name()
    }

    /// The first connection; when it has closed (the data node restarted), a new one.
    fn main_conn(&self) -> Arc<Conn> {
        let c = self.inner.conn.read().unwrap_or_else(std::sync::PoisonError::into_inner).0.clone();
        if c.is_closed() && !self.inner.addrs.is_empty() { self.reconnect(c) } else { c }
    }

    /// Opens a TCP connection and says hello (asking for worker `w` when given).
    fn open(&self, addr: &str, w: Option<u16>) -> Result<(Arc<Conn>, u16)> {
        let opts = &self.inner.opts;
        let c = Conn::open(addr, opts.connect_timeout, opts.transporter)?;
        let hello = Request::Hello {
            client_name: "tern-client".into(),
            worker: w,
            proof: opts.cluster_secret.as_ref().map(|s| s.proof()),
        };
        match c.send(hello)?.wait(&c, opts.request_timeout)? {
            Reply::Welcome { worker, .. } if w.is_none_or(|w| w == worker) => Ok((c, worker)),
            Reply::Welcome { .. } => Err(TernError::new(ErrorCode::Internal, "node did not move the connection")),
            r => Err(unexpected(r)),
        }
    }

    /// Replaces a closed first connection (one caller at a time, rate-limited); returns the dead
    /// one when the node cannot be reached yet, so the caller gets its connection error.
    fn reconnect(&self, dead: Arc<Conn>) -> Arc<Conn> {
        const RECONNECT_EVERY: Duration = Duration::from_millis(100);
        if self.inner.addrs.is_empty() {
            return dead;
        }
        let Ok(mut at) = self.inner.reconnect_at.try_lock() else { return dead };
        {
            let cur = self.inner.conn.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !Arc::ptr_eq(&cur.0, &dead) {
                return cur.0.clone();
            }
        }
        if at.is_some_and(|t| t.elapsed() < RECONNECT_EVERY) {
            return dead;
        }
        *at = Some(std::time::Instant::now());
        // The same node first (it may have restarted), then the others in turn; nodes the
        // management nodes declared not serving last.
        let from = self.inner.current.load(Ordering::Relaxed);
        for i in try_order(&self.inner.addrs, from) {
            if let Ok((c, worker)) = self.open(&self.inner.addrs[i], None) {
                self.inner.current.store(i, Ordering::Relaxed);
                *self.inner.conn.write().unwrap_or_else(std::sync::PoisonError::into_inner) = (c.clone(), worker);
                for w in &self.inner.per_worker {
                    *w.write().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
                }
                return c;
            }
        }
        dead
    }

    /// The data node behind `conn` does not serve (it is restarting): use the next one.
    fn leave_node(&self, conn: &Arc<Conn>) {
        let n = self.inner.addrs.len();
        if n < 2 {
            return;
        }
        let main = self.inner.conn.read().unwrap_or_else(std::sync::PoisonError::into_inner).0.clone();
        let on_main_node = Arc::ptr_eq(&main, conn)
            || self.inner.per_worker.iter().any(|w| {
                w.read()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .as_ref()
                    .is_some_and(|c| Arc::ptr_eq(c, conn))
            });
        if !on_main_node || main.is_closed() {
            return;
        }
        self.inner.current.store((self.inner.current.load(Ordering::Relaxed) + 1) % n, Ordering::Relaxed);
        main.close("the data node is not serving (restarting); moving to another");
        for w in &self.inner.per_worker {
            if let Some(c) = w.write().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
                c.close("the data node is not serving (restarting)");
            }
        }
    }

    /// The connection served by worker `w` (opened on first use, and again after it closed;
    /// the first connection if that fails or the client is in-process).
    fn conn_for_worker(&self, w: u16) -> Arc<Conn> {
        let inner = &self.inner;
        if inner.addrs.is_empty() {
            return self.local_conn_for_worker(w);
        }
        let addr = &inner.addrs[inner.current.load(Ordering::Relaxed) % inner.addrs.len()];
        let first = inner.conn.read().unwrap_or_else(std::sync::PoisonError::into_inner).1;
        if w == first || w >= inner.workers || (inner.addrs.len() > 1 && is_down(addr)) {
            // (A node declared not serving: the first connection moves to another first.)
            return self.main_conn();
        }
        if let Some(c) = inner.per_worker[w as usize].read().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref()
            && !c.is_closed()
        {
            return c.clone();
        }
        if self.main_conn().is_closed() {
            return self.main_conn();
        }
        match self.open(addr, Some(w)) {
            Ok((c, _)) => {
                *inner.per_worker[w as usize].write().unwrap_or_else(std::sync::PoisonError::into_inner) =
                    Some(c.clone());
                c
            }
            Err(_) => self.main_conn(),
        }
    }

    /// The worker (and ldm instance) whose partition holds the operation's row; 0 when unknown.
    /// Multi-key writers that lock in (worker, table, key) order, one worker's batch at a time,
    /// cannot deadlock each other.
    pub fn worker_of(&self, op: &KeyOp) -> u16 {
        let routing = self.inner.routing.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        match routing.get(&op.table) {
            Some((layout, partitions)) => layout
                .partition_of_key(&op.key, *partitions)
                .map(|p| (p % self.inner.workers.max(1) as u32) as u16)
                .unwrap_or(0),
            None => 0,
        }
    }

    /// The connection to run a transaction on. When the first batch's operations all live on one
    /// worker's partitions, that worker's connection, so its tc, ldm and socket share a thread
    /// (NDB's distribution-aware TC choice). A batch spread over workers keeps the client's first
    /// connection: a stable home spreads concurrent clients evenly over the workers.
    /// An in-process client's connection to worker `w` (opened on first use).
    fn local_conn_for_worker(&self, w: u16) -> Arc<Conn> {
        let inner = &self.inner;
        let Some(make) = &inner.local else { return self.main_conn() };
        let main = self.main_conn();
        let first = inner.conn.read().unwrap_or_else(std::sync::PoisonError::into_inner).1;
        if w == first || w >= inner.workers || main.is_closed() {
            return main;
        }
        let mut slot = inner.per_worker[w as usize].write().unwrap_or_else(std::sync::PoisonError::into_inner);
        match slot.as_ref() {
            Some(c) if !c.is_closed() => c.clone(),
            _ => {
                let make = make.clone();
                let c = Conn::local(move |sink| make(Some(w), sink));
                *slot = Some(c.clone());
                c
            }
        }
    }

    /// Distribution awareness across data nodes (NDB's TC selection by the first key's
    /// partition): with the cluster map this process follows (`metrics::set_cluster_map`, as
    /// API servers do) and more than one data node address, a transaction whose first row's
    /// partition has no full replica on the current node starts on a node that holds one (the
    /// first such among `addrs`, which an API server with a location domain lists its domain's
    /// first), on the row's ldm worker. None: the current node holds it, or no map, or that node
    /// cannot be reached (then the current node coordinates, as before, forwarding to the
    /// replicas). A stale map only costs a hop: any coordinator may run any transaction.
    fn node_conn_for_batch(&self, ops: &[KeyOp]) -> Option<Arc<Conn>> {
        let inner = &self.inner;
        if inner.addrs.len() < 2 {
            return None;
        }
        let map = Self::multi_group_map()?;
        let op = ops.first()?;
        let p = self.partitions_of(std::slice::from_ref(op))?[0];
        self.node_conn_for_row(&map, op.table, p)?
    }

    /// The cluster map this process follows, when it has more than one node group (with one,
    /// every data node holds every partition: nothing to route, and nothing is computed).
    fn multi_group_map() -> Option<Arc<tern_types::cluster::ClusterState>> {
        metrics::cluster_map().filter(|m| m.config.data_nodes.len() > m.config.replicas.max(1) as usize)
    }

    /// The partition of every operation's row (None when a table's routing is not known).
    fn partitions_of(&self, ops: &[KeyOp]) -> Option<Vec<u32>> {
        let routing = self.inner.routing.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        ops.iter()
            .map(|op| {
                let (layout, partitions) = routing.get(&op.table)?;
                layout.partition_of_key(&op.key, *partitions).ok()
            })
            .collect()
    }

    /// Where a transaction starting with a row of partition `p` of `table` goes: Some(None) on
    /// the current node (it holds a full replica of the partition), Some(Some(conn)) on another
    /// node that does, None when that is not known (no such table, no such node reachable).
    fn node_conn_for_row(
        &self,
        map: &tern_types::cluster::ClusterState,
        table: u32,
        p: u32,
    ) -> Option<Option<Arc<Conn>>> {
        let inner = &self.inner;
        let groups = {
            let cat = inner.catalog.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            let t = cat.tables.get(&table)?;
            if t.groups == 0 { map.base_groups.max(1) } else { t.groups }
        };
        let chain = map.chain(table, groups, p);
        let full = &chain.replicas[..chain.readable.min(chain.replicas.len())];
        // (`host:port` compared without formatting one per data node.)
        let named = |d: &tern_types::cluster::DataNodeSpec, a: &str| {
            a.strip_prefix(d.host.as_str()).and_then(|r| r.strip_prefix(':')).and_then(|p| p.parse::<u16>().ok())
                == Some(d.port)
        };
        let node_at = |a: &str| map.config.data_nodes.iter().find(|d| named(d, a)).map(|d| d.id);
        let holds = |n: tern_types::cluster::NodeId| -> Option<u16> {
            full.iter()
                .find(|(r, _)| *r == n)
                .filter(|_| map.state_of(n) == tern_types::cluster::NodeState::Started)
                .map(|(_, ldm)| *ldm)
        };
        let current = &inner.addrs[inner.current.load(Ordering::Relaxed) % inner.addrs.len()];
        if node_at(current).is_none_or(|n| holds(n).is_some()) {
            return Some(None);
        }
        let (addr, worker) = inner.addrs.iter().find_map(|a| {
            if is_down(a) {
                return None;
            }
            node_at(a).and_then(holds).map(|w| (a.clone(), w))
        })?;
        let key = (addr, worker);
        if let Some(c) = inner.others.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(&key)
            && !c.is_closed()
        {
            return Some(Some(c.clone()));
        }
        {
            let failed = inner.others_failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if failed.get(&key.0).is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                return None;
            }
        }
        match self.open(&key.0, Some(worker.min(inner.workers.saturating_sub(1)))) {
            Ok((c, _)) => {
                inner.others.write().unwrap_or_else(std::sync::PoisonError::into_inner).insert(key, c.clone());
                Some(Some(c))
            }
            Err(_) => {
                let mut failed = inner.others_failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                failed.insert(key.0, std::time::Instant::now());
                None
            }
        }
    }

    /// A batch of committed reads whose rows live in several node groups, split by the node
    /// that holds them (None: not routable, or all on one node): each part is then read as a
    /// transaction of its own on its node, so no coordinator forwards another group's rows.
    /// Read-committed either way: each read sees a committed row, as when one coordinator
    /// sends the parts to the groups.
    fn split_reads(&self, ops: &[KeyOp]) -> Option<Vec<(Arc<Conn>, Vec<usize>)>> {
        const SPLIT_OPS_MAX: usize = 4096;
        if self.inner.addrs.len() < 2 || ops.len() < 2 || ops.len() > SPLIT_OPS_MAX {
            return None;
        }
        let map = Self::multi_group_map()?;
        let partitions = self.partitions_of(ops)?;
        let mut by_part: std::collections::HashMap<(u32, u32), usize> = Default::default();
        let mut parts: Vec<(Arc<Conn>, Vec<usize>)> = Vec::new();
        for (i, (op, &partition)) in ops.iter().zip(&partitions).enumerate() {
            let slot = match by_part.get(&(op.table, partition)) {
                Some(&s) => s,
                None => {
                    let conn = self.node_conn_for_row(&map, op.table, partition)?.unwrap_or_else(|| self.main_conn());
                    let s = match parts.iter().position(|(c, _)| Arc::ptr_eq(c, &conn)) {
                        Some(s) => s,
                        None => {
                            parts.push((conn, Vec::new()));
                            parts.len() - 1
                        }
                    };
                    by_part.insert((op.table, partition), s);
                    s
                }
            };
            parts[slot].1.push(i);
        }
        (parts.len() > 1).then_some(parts)
    }

    fn conn_for_batch(&self, ops: &[KeyOp]) -> Arc<Conn> {
        if let Some(c) = self.node_conn_for_batch(ops) {
            return c;
        }
        // Mixed batches stop at the second worker seen, so looking at many ops costs little.
        const ROUTE_OPS_MAX: usize = 4096;
        let routable = !self.inner.addrs.is_empty() || self.inner.local.is_some();
        if !routable || self.inner.workers <= 1 || ops.is_empty() || ops.len() > ROUTE_OPS_MAX {
            return self.main_conn();
        }
        let mut worker = None;
        {
            let routing = self.inner.routing.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            for op in ops {
                let Some((layout, partitions)) = routing.get(&op.table) else { return self.main_conn() };
                let Ok(p) = layout.partition_of_key(&op.key, *partitions) else { return self.main_conn() };
                let w = (p % self.inner.workers as u32) as u16;
                if worker.is_some_and(|x| x != w) {
                    return self.main_conn();
                }
                worker = Some(w);
            }
        }
        self.conn_for_worker(worker.expect("at least one op"))
    }

    /// Sends a request and waits for its reply on this thread.
    fn call(&self, req: Request) -> Result<Reply> {
        let c = self.main_conn();
        let r = c.send(req)?.wait(&c, self.inner.opts.request_timeout);
        self.note_not_started(&c, &r);
        r
    }

    async fn call_async(&self, req: &Request) -> Result<Reply> {
        let c = self.main_conn();
        let r = c.request(req.clone())?.await;
        self.note_not_started(&c, &r);
        r
    }

    /// A node that answers it is not serving yet makes the client move to another.
    fn note_not_started(&self, c: &Arc<Conn>, r: &Result<Reply>) {
        let not_started = match r {
            Err(e) | Ok(Reply::Error(e)) => e.code == ErrorCode::NodeNotStarted,
            Ok(Reply::Txn(t)) => {
                matches!(&t.outcome, tern_wire::Outcome::Aborted(e) if e.code == ErrorCode::NodeNotStarted)
            }
            _ => false,
        };
        if not_started {
            self.leave_node(c);
        }
    }

    pub fn catalog(&self) -> Arc<Catalog> {
        self.inner.catalog.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub fn refresh_catalog(&self) -> Result<Arc<Catalog>> {
        self.install_catalog(self.call(Request::GetCatalog)?)
    }

    /// `refresh_catalog` without blocking the calling thread.
    pub async fn refresh_catalog_async(&self) -> Result<Arc<Catalog>> {
        self.install_catalog(self.call_async(&Request::GetCatalog).await?)
    }

    fn install_catalog(&self, reply: Reply) -> Result<Arc<Catalog>> {
        match reply {
            Reply::Catalog(c) => {
                let c = Arc::new(*c);
                *self.inner.routing.write().unwrap_or_else(std::sync::PoisonError::into_inner) = c
                    .tables
                    .values()
                    .map(|t| (t.id, (Arc::new(tern_types::RowLayout::new(t)), t.partition_count)))
                    .collect();
                *self.inner.catalog.write().unwrap_or_else(std::sync::PoisonError::into_inner) = c.clone();
                self.inner.handles.write().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
                Ok(c)
            }
            r => Err(unexpected(r)),
        }
    }

    /// A table by database and name (refreshing the catalog once if it is not known yet).
    pub fn table(&self, database: &str, name: &str) -> Result<TableHandle> {
        if let Some(t) = self.cached_table(database, name) {
            return Ok(t);
        }
        self.refresh_catalog()?;
        self.cached_table(database, name)
            .ok_or_else(|| TernError::new(ErrorCode::NoSuchTable, format!("Table '{database}.{name}' doesn't exist")))
    }

    /// A table from the local catalog only (no round trip); handles are built once per catalog
    /// version and shared.
    pub fn cached_table(&self, database: &str, name: &str) -> Option<TableHandle> {
        if let Some(h) = self
            .inner
            .handles
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(database)
            .and_then(|d| d.get(name))
        {
            return Some(h.clone());
        }
        let t = self.catalog().find_table(database, name)?.clone();
        let h = TableHandle::new(t);
        let mut handles = self.inner.handles.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if handles.values().map(|d| d.len()).sum::<usize>() > 100_000 {
            handles.clear();
        }
        handles.entry(database.to_string()).or_default().insert(name.to_string(), h.clone());
        Some(h)
    }

    /// Runs a schema change; returns the new catalog version (and refreshes the local catalog).
    pub fn ddl(&self, req: DdlReq) -> Result<u64> {
        let v = ddl_done(self.call(Request::Ddl(req))?)?;
        self.refresh_catalog()?;
        Ok(v)
    }

    /// `ddl` without blocking the calling thread.
    pub async fn ddl_async(&self, req: DdlReq) -> Result<u64> {
        let v = ddl_done(self.call_async(&Request::Ddl(req)).await?)?;
        self.refresh_catalog_async().await?;
        Ok(v)
    }

    pub fn status(&self) -> Result<StatusInfo> {
        status_of(self.call(Request::Status)?)
    }

    /// `status` without blocking the calling thread.
    pub async fn status_async(&self) -> Result<StatusInfo> {
        status_of(self.call_async(&Request::Status).await?)
    }

    /// The status of the data node at `addr` (any node of the cluster, not only the one this
    /// client talks to), on a connection of its own that is closed afterwards: for
    /// cluster-wide views (`ndbinfo`). Blocking; at most the connect and request timeouts, each
    /// capped at two seconds.
    pub fn status_at(&self, addr: &str) -> Result<StatusInfo> {
        let opts = &self.inner.opts;
        let cap = Duration::from_secs(2);
        let c = Conn::open(addr, opts.connect_timeout.min(cap), tern_shm::Transporter::Tcp)?;
        let proof = opts.cluster_secret.clone().or_else(env_cluster_secret).map(|s| s.proof());
        let hello = Request::Hello { client_name: "tern-ndbinfo".into(), worker: None, proof };
        let r = (|| {
            match c.send(hello)?.wait(&c, opts.request_timeout.min(cap))? {
                Reply::Welcome { .. } => {}
                r => return Err(unexpected(r)),
            }
            status_of(c.send(Request::Status)?.wait(&c, opts.request_timeout.min(cap))?)
        })();
        c.close("status read");
        r
    }

    /// A change-log request (backups; see `LogOp`): what each ldm of the cluster returned. The
    /// log lives on this client's main connection at the data node it is connected to. It
    /// carries every table's changes.
    pub fn change_log(&self, sub: u64, op: LogOp, max_bytes: u32) -> Result<Vec<LogPart>> {
        match self.call(Request::Log { sub, op, max_bytes, tables: Vec::new() })? {
            Reply::Log { parts } => Ok(parts),
            r => Err(unexpected(r)),
        }
    }

    /// `change_log` without blocking the calling thread; a log started with `tables` carries
    /// only those tables' changes (and every epoch mark).
    pub async fn change_log_async(
        &self,
        sub: u64,
        op: LogOp,
        max_bytes: u32,
        tables: Vec<tern_types::schema::TableId>,
    ) -> Result<Vec<LogPart>> {
        match self.call_async(&Request::Log { sub, op, max_bytes, tables }).await? {
            Reply::Log { parts } => Ok(parts),
            r => Err(unexpected(r)),
        }
    }

    /// Reserves `count` AUTO_INCREMENT values of a table; returns the first.
    pub fn auto_increment(&self, table: u32, count: u32) -> Result<(u64, u32)> {
        auto_inc_range(self.call(Request::AutoInc { table, count })?)
    }

    /// `auto_increment` without blocking the calling thread.
    pub async fn auto_increment_async(&self, table: u32, count: u32) -> Result<(u64, u32)> {
        auto_inc_range(self.call_async(&Request::AutoInc { table, count }).await?)
    }

    /// The next AUTO_INCREMENT value of a table. Values come from the data node in ranges of
    /// `AUTO_INC_PREFETCH` (like NDB's `ndb_autoincrement_prefetch_sz`), so they are unique
    /// cluster-wide and increasing per client, not gap-free.
    pub fn next_auto_increment(&self, table: u32) -> Result<u64> {
        if let Some(v) = self.cached_auto_increment(table) {
            return Ok(v);
        }
        Ok(self.new_auto_inc_range(table, self.auto_increment(table, AUTO_INC_PREFETCH)?))
    }

    /// `next_auto_increment` without blocking the calling thread.
    pub async fn next_auto_increment_async(&self, table: u32) -> Result<u64> {
        if let Some(v) = self.cached_auto_increment(table) {
            return Ok(v);
        }
        Ok(self.new_auto_inc_range(table, self.auto_increment_async(table, AUTO_INC_PREFETCH).await?))
    }

    /// The next prefetched AUTO_INCREMENT value of a table, if one is left.
    fn cached_auto_increment(&self, table: u32) -> Option<u64> {
        let mut m = self.inner.auto_inc.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (next, end) = m.get_mut(&table)?;
        (*next < *end).then(|| {
            *next += 1;
            *next - 1
        })
    }

    /// Keeps a new range (its first value is taken now and returned).
    fn new_auto_inc_range(&self, table: u32, (start, count): (u64, u32)) -> u64 {
        let mut m = self.inner.auto_inc.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        m.insert(table, (start + 1, start + count as u64));
        start
    }

    /// Whether this client's next AUTO_INCREMENT value of a table already exceeds `used` (no
    /// round trip).
    pub fn auto_increment_past(&self, table: u32, used: u64) -> bool {
        let m = self.inner.auto_inc.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        m.get(&table).is_some_and(|(next, _)| *next > used)
    }

    /// Makes the following AUTO_INCREMENT values of a table exceed `used` (a row was written
    /// with that value explicitly, as MySQL and NDB do): drops cached values up to it and, when
    /// the data node's counter is not past it, reserves the values up to it.
    pub fn bump_auto_increment(&self, table: u32, used: u64) -> Result<()> {
        if self.bump_cached_auto_increment(table, used) {
            return Ok(());
        }
        loop {
            let got = self.auto_increment(table, 1)?;
            match self.bumped_past(table, used, got) {
                None => return Ok(()),
                Some(gap) => self.auto_increment(table, gap)?,
            };
        }
    }

    /// `bump_auto_increment` without blocking the calling thread.
    pub async fn bump_auto_increment_async(&self, table: u32, used: u64) -> Result<()> {
        if self.bump_cached_auto_increment(table, used) {
            return Ok(());
        }
        loop {
            let got = self.auto_increment_async(table, 1).await?;
            match self.bumped_past(table, used, got) {
                None => return Ok(()),
                Some(gap) => self.auto_increment_async(table, gap).await?,
            };
        }
    }

    /// `bump_auto_increment` within the cached range: true when that was enough (else the
    /// cached range is dropped).
    fn bump_cached_auto_increment(&self, table: u32, used: u64) -> bool {
        let mut m = self.inner.auto_inc.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some((next, end)) = m.get_mut(&table) else { return false };
        if *next > used {
            return true;
        }
        if *end > used + 1 {
            *next = used + 1;
            return true;
        }
        m.remove(&table);
        false
    }

    /// After reserving `(start, count)`: None when the counter is now past `used` (the range
    /// is kept), else how many more values to reserve to get there.
    fn bumped_past(&self, table: u32, used: u64, (start, count): (u64, u32)) -> Option<u32> {
        let past = start + count as u64;
        if past > used {
            let mut m = self.inner.auto_inc.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            m.insert(table, (start, past));
            return None;
        }
        Some((used + 1 - past).min(u32::MAX as u64) as u32)
    }

    /// Fills generated values of a full row: an AUTO_INCREMENT column (or the hidden primary key
    /// of a table declared without one) given as NULL or 0 gets the next value, which is returned.
    pub fn fill_generated(&self, t: &TableHandle, values: &mut [Value]) -> Result<Option<u64>> {
        let Some(c) = generated_column(t, values)? else { return Ok(None) };
        let n = self.next_auto_increment(t.id())?;
        values[c] = Value::UInt(n);
        Ok(Some(n))
    }

    /// `fill_generated` without blocking the calling thread.
    pub async fn fill_generated_async(&self, t: &TableHandle, values: &mut [Value]) -> Result<Option<u64>> {
        let Some(c) = generated_column(t, values)? else { return Ok(None) };
        let n = self.next_auto_increment_async(t.id()).await?;
        values[c] = Value::UInt(n);
        Ok(Some(n))
    }

    /// Names of the databases.
    pub fn databases(&self) -> Vec<String> {
        self.catalog().databases.keys().cloned().collect()
    }

    /// Names of a database's tables (hidden index tables excluded).
    pub fn tables(&self, database: &str) -> Vec<String> {
        self.catalog().tables_in(database).map(|t| t.name.clone()).collect()
    }

    /// Makes every transaction this client (and its clones) begins from now on durable, or not
    /// (`Transaction::durable` still decides per transaction).
    pub fn set_durable_commits(&self, on: bool) {
        self.inner.durable_default.store(on, Ordering::Relaxed);
    }

    pub fn durable_commits(&self) -> bool {
        self.inner.durable_default.load(Ordering::Relaxed)
    }

    /// Makes every transaction of this client (and its clones) that writes `table` durable, or
    /// no longer: its commit is answered once its epoch is on disk on every replica.
    pub fn set_table_durable(&self, table: u32, on: bool) {
        let mut t = self.inner.durable_tables.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if on {
            t.insert(table);
        } else {
            t.remove(&table);
        }
        self.inner.durable_tables_any.store(!t.is_empty(), Ordering::Relaxed);
    }

    /// Whether a batch writes a table made durable with `set_table_durable`.
    fn writes_durable_table(&self, ops: &[KeyOp]) -> bool {
        if !self.inner.durable_tables_any.load(Ordering::Relaxed) {
            return false;
        }
        let t = self.inner.durable_tables.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        ops.iter().any(|o| o.kind != OpKind::Read && t.contains(&o.table))
    }

    /// Starts a transaction (nothing is sent until the first `execute`).
    pub fn begin(&self) -> Transaction {
        Transaction {
            client: self.clone(),
            id: self.inner.next_txn.fetch_add(1, Ordering::Relaxed),
            durable: self.inner.durable_default.load(Ordering::Relaxed),
            nowait: false,
            finished: false,
            started: false,
            conn: None,
            commit_epoch: None,
        }
    }

    /// Runs `f` in a fresh transaction, retrying the whole of it on temporary errors with
    /// growing back-off, at most `retries_max` times.
    pub async fn run<T, F, Fut>(&self, mut f: F) -> Result<T>
    where
        F: FnMut(Transaction) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut backoff = self.inner.opts.retry_backoff_first;
        let mut attempt = 0;
        loop {
            match f(self.begin()).await {
                Err(e) if e.is_temporary() && attempt < self.inner.opts.retries_max => {
                    attempt += 1;
                    sleep(backoff).await;
                    backoff = (backoff * 2).min(self.inner.opts.retry_backoff_max);
                }
                other => return other,
            }
        }
    }

    /// Starts a scan; read it with `Scanner::next_batch`.
    pub fn scan(&self, spec: ScanSpec) -> Scanner {
        Scanner {
            client: self.clone(),
            id: self.inner.next_scan.fetch_add(1, Ordering::Relaxed),
            spec: Some(spec),
            done: false,
        }
    }

    /// A blocking view of this client.
    pub fn blocking(&self) -> BlockingClient {
        BlockingClient { client: self.clone() }
    }
}

/// A table with its row layout: builds keys, rows and operations from values, decodes results.
#[derive(Clone)]
pub struct TableHandle {
    pub table: Arc<Table>,
    pub layout: Arc<tern_types::RowLayout>,
}

impl TableHandle {
    pub fn new(table: Table) -> TableHandle {
        let layout = Arc::new(tern_types::RowLayout::new(&table));
        TableHandle { table: Arc::new(table), layout }
    }

    pub fn id(&self) -> u32 {
        self.table.id
    }

    pub fn column(&self, name: &str) -> Result<u16> {
        self.table.column_index(name).map(|c| c as u16).ok_or_else(|| {
            TernError::new(ErrorCode::NoSuchColumn, format!("Unknown column '{name}' in '{}'", self.table.name))
        })
    }

    /// Encodes a primary key from values in key order, coercing them to the key types.
    pub fn key(&self, values: &[Value]) -> Result<Vec<u8>> {
        self.key_owned(values.to_vec())
    }

    /// `key` from values it may consume (no copy of byte strings).
    pub fn key_owned(&self, mut values: Vec<Value>) -> Result<Vec<u8>> {
        if values.len() != self.table.primary_key.len() {
            return Err(TernError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "Wrong number of primary-key columns. Expecting: {} Got: {}",
                    self.table.primary_key.len(),
                    values.len()
                ),
            ));
        }
        for (v, &c) in values.iter_mut().zip(&self.table.primary_key) {
            *v = coerce(self.table.columns[c as usize].ty, std::mem::replace(v, Value::Null))?;
        }
        let mut out = Vec::with_capacity(32);
        self.layout.encode_key(&values, &mut out)?;
        Ok(out)
    }

    /// Encodes a full row from one value per column (defaults fill `Value::Null` where a default
    /// exists; NOT NULL is checked).
    pub fn row(&self, values: &[Value]) -> Result<Vec<u8>> {
        self.row_owned(values.to_vec())
    }

    /// `row` from values it may consume (no copy of byte strings).
    pub fn row_owned(&self, mut values: Vec<Value>) -> Result<Vec<u8>> {
        if values.len() != self.table.columns.len() {
            return Err(TernError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "table {} has {} columns, got {} values",
                    self.table.name,
                    self.table.columns.len(),
                    values.len()
                ),
            ));
        }
        let mut bytes = 0;
        for (v, c) in values.iter_mut().zip(&self.table.columns) {
            let given = std::mem::replace(v, Value::Null);
            let given = match (given, &c.default) {
                (Value::Null, Some(d)) if !c.nullable => d.clone(),
                (given, _) => given,
            };
            *v = coerce(c.ty, given)?;
            if v.is_null() && !c.nullable {
                return Err(TernError::new(ErrorCode::NotNull, format!("Column '{}' cannot be null", c.name)));
            }
            if let Value::Bytes(b) = v {
                bytes += b.len();
            }
        }
        let mut out = Vec::with_capacity(self.layout.fixed_row_len().unwrap_or(64 + bytes + 8 * values.len()));
        self.layout.encode_row(&values, &mut out)?;
        Ok(out)
    }

    /// The partition of the row with this primary key (values in key order): a scan can be
    /// pruned to it with `ScanSpec::partition`.
    pub fn partition_of(&self, key: &[Value]) -> Result<u32> {
        let k = self.key(key)?;
        self.layout.partition_of_key(&k, self.table.partition_count)
    }

    /// A full row from named values: columns not named get their default, NULL when nullable,
    /// else an error (AUTO_INCREMENT and hidden columns get NULL, for `fill_generated`).
    pub fn values_named(&self, named: &[(&str, Value)]) -> Result<Vec<Value>> {
        let mut values: Vec<Option<Value>> = vec![None; self.table.columns.len()];
        for (name, v) in named {
            let c = self.column(name)? as usize;
            if values[c].is_some() {
                return Err(TernError::new(ErrorCode::InvalidRequest, format!("Column '{name}' specified twice")));
            }
            values[c] = Some(v.clone());
        }
        let mut out = Vec::with_capacity(values.len());
        for (v, col) in values.into_iter().zip(&self.table.columns) {
            out.push(match v {
                Some(v) => v,
                None => match &col.default {
                    Some(d) => d.clone(),
                    None if col.nullable || col.auto_increment || col.hidden => Value::Null,
                    None => {
                        return Err(TernError::new(
                            ErrorCode::NotNull,
                            format!("Field '{}' doesn't have a default value", col.name),
                        ));
                    }
                },
            });
        }
        Ok(out)
    }

    fn key_values_of(&self, values: &[Value]) -> Vec<Value> {
        self.table.primary_key.iter().map(|&c| values[c as usize].clone()).collect()
    }

    fn op(&self, kind: OpKind, key: Vec<u8>, row: Vec<u8>) -> KeyOp {
        KeyOp { table: self.table.id, kind, key, row, updates: Vec::new(), projection: None }
    }

    pub fn read(&self, key: &[Value]) -> Result<KeyOp> {
        Ok(self.op(OpKind::Read, self.key(key)?, Vec::new()))
    }

    /// A read returning only `columns` (decode with `decode_projection`).
    pub fn read_columns(&self, key: &[Value], columns: &[u16]) -> Result<KeyOp> {
        self.read_columns_owned(key.to_vec(), columns)
    }

    /// `read_columns` from key values it may consume.
    pub fn read_columns_owned(&self, key: Vec<Value>, columns: &[u16]) -> Result<KeyOp> {
        let mut op = self.op(OpKind::Read, self.key_owned(key)?, Vec::new());
        op.projection = Some(columns.to_vec());
        Ok(op)
    }

    pub fn read_locked(&self, key: &[Value], exclusive: bool) -> Result<KeyOp> {
        Ok(self.op(if exclusive { OpKind::ReadExclusive } else { OpKind::ReadShared }, self.key(key)?, Vec::new()))
    }

    pub fn insert(&self, values: &[Value]) -> Result<KeyOp> {
        let row = self.row(values)?;
        Ok(self.op(OpKind::Insert, self.layout.key_of(&row).to_vec(), row))
    }

    /// `insert` from values it may consume (no copy of byte strings).
    pub fn insert_owned(&self, values: Vec<Value>) -> Result<KeyOp> {
        let row = self.row_owned(values)?;
        Ok(self.op(OpKind::Insert, self.layout.key_of(&row).to_vec(), row))
    }

    /// Insert or overwrite.
    pub fn write(&self, values: &[Value]) -> Result<KeyOp> {
        self.write_owned(values.to_vec())
    }

    /// `write` from values it may consume.
    pub fn write_owned(&self, values: Vec<Value>) -> Result<KeyOp> {
        let row = self.row_owned(values)?;
        Ok(self.op(OpKind::Write, self.layout.key_of(&row).to_vec(), row))
    }

    pub fn update(&self, key: &[Value], updates: Vec<ColumnUpdate>) -> Result<KeyOp> {
        let mut op = self.op(OpKind::Update, self.key(key)?, Vec::new());
        op.updates = updates;
        Ok(op)
    }

    pub fn delete(&self, key: &[Value]) -> Result<KeyOp> {
        Ok(self.op(OpKind::Delete, self.key(key)?, Vec::new()))
    }

    /// Key values of a full row's values (key order).
    pub fn key_of_values(&self, values: &[Value]) -> Vec<Value> {
        self.key_values_of(values)
    }

    /// Decodes a whole stored row (a read without projection).
    pub fn decode_row(&self, bytes: &[u8]) -> Result<Vec<Value>> {
        self.layout
            .check_row(bytes)
            .map_err(|e| TernError::new(ErrorCode::Internal, format!("bad row from the data node: {e}")))?;
        self.layout.decode_row(bytes)
    }

    /// Decodes encoded primary-key bytes (a change log's delete) into the key's values.
    pub fn decode_key(&self, key: &[u8]) -> Result<Vec<Value>> {
        self.layout.decode_key(key)
    }

    /// Decodes a projected read or scan row.
    pub fn decode_projection(&self, columns: &[u16], bytes: &[u8]) -> Result<Vec<Value>> {
        let types: Vec<ColumnType> = columns.iter().map(|&c| self.table.columns[c as usize].ty).collect();
        let mut b = bytes;
        decode_values(&types, &mut b)
    }

    /// An encoded ordered-index bound from values of the index's leading columns.
    pub fn index_bound(&self, index: &Index, values: &[Value], inclusive: bool) -> Result<Bound> {
        let mut key = Vec::new();
        for (v, &c) in values.iter().zip(&index.columns) {
            let col = &self.table.columns[c as usize];
            encode_index_value(col.ty, col.nullable, &coerce(col.ty, v.clone())?, &mut key)?;
        }
        Ok(Bound { key, inclusive })
    }

    pub fn index(&self, name: &str) -> Result<Index> {
        self.table.index_by_name(name).cloned().ok_or_else(|| {
            TernError::new(ErrorCode::NoSuchIndex, format!("Key '{name}' doesn't exist in table '{}'", self.table.name))
        })
    }
}

/// The column of a full row to fill with the next AUTO_INCREMENT value (given as NULL or 0).
fn generated_column(t: &TableHandle, values: &[Value]) -> Result<Option<usize>> {
    let Some(c) = t.table.columns.iter().position(|c| c.auto_increment) else { return Ok(None) };
    if values.len() != t.table.columns.len() {
        return Err(TernError::new(ErrorCode::InvalidRequest, "one value per column expected"));
    }
    let v = &values[c];
    Ok((v.is_null() || v.as_i128() == Some(0)).then_some(c))
}

fn ddl_done(reply: Reply) -> Result<u64> {
    match reply {
        Reply::DdlDone { catalog_version } => Ok(catalog_version),
        r => Err(unexpected(r)),
    }
}

fn status_of(reply: Reply) -> Result<StatusInfo> {
    match reply {
        Reply::Status(s) => Ok(*s),
        r => Err(unexpected(r)),
    }
}

fn auto_inc_range(reply: Reply) -> Result<(u64, u32)> {
    match reply {
        Reply::AutoIncRange { start, count } => Ok((start, count)),
        r => Err(unexpected(r)),
    }
}

/// In-process data nodes by the TCP address they also listen on (newest last).
static LOCAL_NODES: std::sync::Mutex<Vec<(String, LocalMaker)>> = std::sync::Mutex::new(Vec::new());

/// Names an in-process data node by its TCP address, so that `connect_prefer_local` reaches it
/// without a socket (a process that runs a data node and front ends together, e.g. a test).
pub fn register_local_node(addr: &str, make: LocalMaker) {
    LOCAL_NODES.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((addr.to_string(), make));
}

/// A client of the data node at `addr`: in-process when it was registered with
/// `register_local_node` and the environment says `TERN_TEST_TRANSPORT=local` (the front-end test
/// suites run once over TCP and once so, the topology of front ends inside the data node), else
/// over TCP.
pub fn connect_prefer_local(addr: &str) -> Result<Client> {
    // ("hosted": the same, with the front end on the data node's worker 0.)
    if matches!(std::env::var("TERN_TEST_TRANSPORT").as_deref(), Ok("local" | "hosted")) {
        let make = LOCAL_NODES
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .rev()
            .find(|(a, _)| a == addr)
            .map(|(_, m)| m.clone());
        if let Some(make) = make {
            return Client::connect_local_workers(make);
        }
    }
    Client::connect(addr)
}

/// Opens an in-process connection to a worker (`None`: any) delivering replies to the sink.
pub type LocalMaker =
    Arc<dyn Fn(Option<u16>, tern_wire::ReplySink) -> Box<dyn tern_wire::LocalTransport> + Send + Sync>;

/// A transaction: batches of operations executed NoCommit / Commit / Rollback.
pub struct Transaction {
    client: Client,
    id: u64,
    durable: bool,
    nowait: bool,
    finished: bool,
    started: bool,
    /// Chosen at the first batch; every batch of the transaction goes to the same tc.
    conn: Option<Arc<Conn>>,
    /// The epoch of its commit point, once committed.
    commit_epoch: Option<u64>,
}

impl Transaction {
    /// The epoch the transaction committed in (None before its commit, or if it did not).
    pub fn commit_epoch(&self) -> Option<u64> {
        self.commit_epoch
    }

    /// Acknowledge the commit only once its epoch is on disk.
    pub fn durable(mut self, yes: bool) -> Transaction {
        self.durable = yes;
        self
    }

    /// Whether the following batches fail at once (temporary `Deadlock`) on a row lock another
    /// transaction holds, instead of waiting for it.
    pub fn set_nowait(&mut self, yes: bool) {
        self.nowait = yes;
    }

    /// Executes a batch (AbortOnError). Returns the per-operation results.
    pub async fn execute(&mut self, ops: Vec<KeyOp>, exec: Exec) -> Result<Vec<OpResult>> {
        self.execute_with(ops, exec, AbortOption::AbortOnError).await
    }

    /// Executes a batch; on success returns per-op results. A failed transaction returns its
    /// error (temporary errors are marked so by their code).
    pub async fn execute_with(&mut self, ops: Vec<KeyOp>, exec: Exec, abort: AbortOption) -> Result<Vec<OpResult>> {
        // A request holds at most OPS_PER_BATCH_MAX operations (the node refuses more as
        // malformed): a larger batch (INSERT ... SELECT of many rows) goes as several, all but
        // the last without committing.
        if ops.len() > tern_wire::OPS_PER_BATCH_MAX && !self.finished {
            let mut ops = ops;
            let mut results = Vec::with_capacity(ops.len());
            while ops.len() > tern_wire::OPS_PER_BATCH_MAX {
                let rest = ops.split_off(tern_wire::OPS_PER_BATCH_MAX);
                results.extend(self.execute_one(ops, Exec::NoCommit, abort).await?);
                ops = rest;
            }
            results.extend(self.execute_one(ops, exec, abort).await?);
            return Ok(results);
        }
        self.execute_one(ops, exec, abort).await
    }

    /// One request of at most OPS_PER_BATCH_MAX operations.
    async fn execute_one(&mut self, ops: Vec<KeyOp>, exec: Exec, abort: AbortOption) -> Result<Vec<OpResult>> {
        if self.finished {
            return Err(TernError::new(ErrorCode::InvalidRequest, "transaction already finished"));
        }
        if !self.started
            && exec == Exec::Commit
            && !self.durable
            && ops.iter().all(|o| o.kind == OpKind::Read)
            && let Some(parts) = self.client.split_reads(&ops)
        {
            return self.execute_split(ops, parts, abort).await;
        }
        self.started = true;
        if self.conn.is_none() {
            self.conn = Some(self.client.conn_for_batch(&ops));
        }
        let conn = self.conn.clone().expect("chosen");
        // Once a batch wrote a durable table, the commit (in this batch or a later one) is.
        self.durable = self.durable || self.client.writes_durable_table(&ops);
        let req = Request::Txn(TxnReq { txn: self.id, ops, exec, abort, durable: self.durable, nowait: self.nowait });
        let reply = match conn.request(req) {
            Ok(f) => match f.await {
                // The commit was sent and its coordinator is gone: it may have committed (its
                // takeover finishes it) or not. Not a failure to retry blindly.
                Err(e) if exec == Exec::Commit && e.code == ErrorCode::NodeFailure => Err(TernError::new(
                    ErrorCode::UnknownResult,
                    format!("the outcome of the commit is unknown: {}", e.message),
                )),
                other => other,
            },
            Err(e) => Err(e),
        };
        self.client.note_not_started(&conn, &reply);
        let resp = match reply {
            Ok(Reply::Txn(r)) => r,
            Ok(r) => {
                self.finished = true;
                return Err(unexpected(r));
            }
            Err(e) => {
                self.finished = true;
                return Err(e);
            }
        };
        match resp.outcome {
            Outcome::Open => Ok(resp.results),
            Outcome::Committed { epoch } => {
                self.finished = true;
                self.commit_epoch = Some(epoch);
                Ok(resp.results)
            }
            Outcome::RolledBack => {
                self.finished = true;
                Ok(resp.results)
            }
            Outcome::Aborted(e) => {
                self.finished = true;
                Err(e)
            }
        }
    }

    /// A read-only autocommit batch as one transaction per node (`Client::split_reads`): the
    /// requests leave together, the answers are put back in the batch's order.
    async fn execute_split(
        &mut self,
        ops: Vec<KeyOp>,
        parts: Vec<(Arc<Conn>, Vec<usize>)>,
        abort: AbortOption,
    ) -> Result<Vec<OpResult>> {
        self.finished = true;
        let n = ops.len();
        let mut ops: Vec<Option<KeyOp>> = ops.into_iter().map(Some).collect();
        let mut pending = Vec::with_capacity(parts.len());
        for (conn, idx) in parts {
            let part: Vec<KeyOp> = idx.iter().map(|&i| ops[i].take().expect("each op in one part")).collect();
            let id = self.client.inner.next_txn.fetch_add(1, Ordering::Relaxed);
            let req = Request::Txn(TxnReq {
                txn: id,
                ops: part,
                exec: Exec::Commit,
                abort,
                durable: false,
                nowait: self.nowait,
            });
            pending.push((conn.clone(), idx, conn.request(req)));
        }
        let mut results: Vec<Option<OpResult>> = vec![None; n];
        let mut first_error = None;
        for (conn, idx, f) in pending {
            let reply = match f {
                Ok(f) => f.await,
                Err(e) => Err(e),
            };
            self.client.note_not_started(&conn, &reply);
            match reply {
                Ok(Reply::Txn(r)) => match r.outcome {
                    Outcome::Committed { .. } | Outcome::Open | Outcome::RolledBack if r.results.len() == idx.len() => {
                        for (i, res) in idx.into_iter().zip(r.results) {
                            results[i] = Some(res);
                        }
                    }
                    Outcome::Aborted(e) => {
                        first_error.get_or_insert(e);
                    }
                    _ => {
                        first_error.get_or_insert(TernError::new(
                            ErrorCode::Internal,
                            "a split read answered the wrong count",
                        ));
                    }
                },
                Ok(r) => {
                    first_error.get_or_insert(unexpected(r));
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        Ok(results.into_iter().map(|r| r.expect("every part answered")).collect())
    }

    pub async fn commit(mut self) -> Result<()> {
        self.execute(Vec::new(), Exec::Commit).await.map(|_| ())
    }

    pub async fn rollback(mut self) -> Result<()> {
        self.execute(Vec::new(), Exec::Rollback).await.map(|_| ())
    }
}

impl Drop for Transaction {
    fn drop(&mut self) {
        if self.started && !self.finished {
            // Roll back an abandoned open transaction so its locks go at once.
            let req = Request::Txn(TxnReq {
                txn: self.id,
                ops: Vec::new(),
                exec: Exec::Rollback,
                abort: AbortOption::AbortOnError,
                durable: false,
                nowait: false,
            });
            if let Some(c) = &self.conn {
                let _ = c.send(req);
            }
        }
    }
}

/// What to scan: the wire's scan request (its `scan` id is set by `Client::scan`). Start from
/// `ScanSpec::table(id)` and set what you need.
pub type ScanSpec = ScanReq;

/// Reads a scan in batches.
pub struct Scanner {
    client: Client,
    id: u64,
    spec: Option<ScanSpec>,
    done: bool,
}

impl Scanner {
    /// The next batch of rows (stored rows, or value lists with a projection); None at the end.
    pub async fn next_batch(&mut self) -> Result<Option<Vec<Vec<u8>>>> {
        if self.done {
            return Ok(None);
        }
        let (req, first) = match self.spec.take() {
            Some(mut s) => {
                s.scan = self.id;
                (Request::Scan(s), true)
            }
            None => (Request::ScanNext { scan: self.id }, false),
        };
        let mut reply = self.client.call_async(&req).await;
        // A node that is not serving (restarting) refused the scan before it began: the client
        // has moved to another node, so start it there (a few times, with a short pause).
        for attempt in 1..=3 {
            let not_started = match &reply {
                Ok(Reply::Error(e)) | Err(e) => e.code == ErrorCode::NodeNotStarted,
                _ => false,
            };
            if !first || !not_started {
                break;
            }
            sleep(Duration::from_millis(50 * attempt)).await;
            reply = self.client.call_async(&req).await;
        }
        match reply {
            Ok(Reply::ScanRows { rows, done, .. }) => {
                self.done = done;
                Ok(Some(rows))
            }
            Ok(r) => {
                self.done = true;
                Err(unexpected(r))
            }
            Err(e) => {
                self.done = true;
                Err(e)
            }
        }
    }

    /// Whether the scan has delivered its last batch.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Every remaining row.
    pub async fn collect(mut self) -> Result<Vec<Vec<u8>>> {
        let mut all = Vec::new();
        while let Some(b) = self.next_batch().await? {
            all.extend(b);
        }
        Ok(all)
    }
}

impl Drop for Scanner {
    fn drop(&mut self) {
        if !self.done && self.spec.is_none() {
            let _ = self
                .client
                .inner
                .conn
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0
                .send(Request::ScanClose { scan: self.id });
        }
    }
}

/// Blocking wrapper: the same API, each call waiting on the calling thread.
#[derive(Clone)]
pub struct BlockingClient {
    pub client: Client,
}

impl BlockingClient {
    /// One transaction of one batch, committed, retried on temporary errors.
    pub fn execute(&self, ops: Vec<KeyOp>) -> Result<Vec<OpResult>> {
        let c = self.client.clone();
        block_on(c.run(|mut t| {
            let ops = ops.clone();
            async move { t.execute(ops, Exec::Commit).await }
        }))
    }

    /// Like `execute` with a choice of abort option (IgnoreError reports per-operation errors).
    pub fn execute_with(&self, ops: Vec<KeyOp>, abort: AbortOption) -> Result<Vec<OpResult>> {
        let c = self.client.clone();
        block_on(c.run(|mut t| {
            let ops = ops.clone();
            async move { t.execute_with(ops, Exec::Commit, abort).await }
        }))
    }

    pub fn execute_in(&self, txn: &mut Transaction, ops: Vec<KeyOp>, exec: Exec) -> Result<Vec<OpResult>> {
        block_on(txn.execute(ops, exec))
    }

    pub fn scan_all(&self, spec: ScanSpec) -> Result<Vec<Vec<u8>>> {
        block_on(self.client.scan(spec).collect())
    }
}

/// Wakes a parked thread and notes when the wake came (the reply's arrival time).
struct ThreadWaker {
    thread: std::thread::Thread,
    woke_at: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        if let Ok(mut w) = self.woke_at.lock() {
            w.get_or_insert_with(std::time::Instant::now);
        }
        self.thread.unpark();
    }
}

thread_local! {
    /// Recent wait times of this thread (µs, moving average): decides whether spinning pays.
    static WAIT_EWMA_US: std::cell::Cell<u64> = const { std::cell::Cell::new(20) };
}

/// Longest a waiting thread spins before it parks.
const SPIN_MAX_US: u64 = 60;

/// Runs a future to completion on this thread. It spins only while replies have recently come
/// back within the spin budget (a futex wake-up costs more than a short spin), then parks; on a
/// machine with few cores a long spin would steal the CPU the server needs.
pub fn block_on<F: Future>(f: F) -> F::Output {
    // It would wait forever: the worker that answers runs on this thread.
    assert!(!conn::hosts_worker(), "block_on on the thread that runs the data node's worker");
    let mut f = std::pin::pin!(f);
    let tw = Arc::new(ThreadWaker { thread: std::thread::current(), woke_at: std::sync::Mutex::new(None) });
    let waker = Waker::from(tw.clone());
    let mut cx = Context::from_waker(&waker);
    let start = std::time::Instant::now();
    let ewma = WAIT_EWMA_US.with(|w| w.get());
    let spin =
        if ewma <= SPIN_MAX_US { Duration::from_micros((ewma * 3 / 2).min(SPIN_MAX_US)) } else { Duration::ZERO };
    let out = loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            break v;
        }
        if start.elapsed() < spin {
            for _ in 0..16 {
                std::hint::spin_loop();
            }
        } else {
            std::thread::park_timeout(Duration::from_millis(50));
        }
    };
    // How long the reply took to arrive, not counting the time to wake this thread up.
    let arrived = tw.woke_at.lock().ok().and_then(|w| *w).unwrap_or_else(std::time::Instant::now);
    let took = arrived.saturating_duration_since(start).as_micros() as u64;
    WAIT_EWMA_US.with(|w| w.set((w.get() * 7 + took.min(10_000)) / 8));
    out
}

/// A timer future that needs no runtime (a helper thread wakes it).
async fn sleep(d: Duration) {
    struct Sleep {
        until: std::time::Instant,
        armed: bool,
    }
    impl Future for Sleep {
        type Output = ();
        fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            let now = std::time::Instant::now();
            if now >= self.until {
                return Poll::Ready(());
            }
            if !self.armed {
                self.armed = true;
                let w = cx.waker().clone();
                let left = self.until - now;
                std::thread::spawn(move || {
                    std::thread::sleep(left);
                    w.wake();
                });
            }
            Poll::Pending
        }
    }
    Sleep { until: std::time::Instant::now() + d, armed: false }.await
}

/// Fills `buf` from the OS's random source (getrandom(2)): challenges, salts, generated
/// passwords and keys.
pub fn os_random(buf: &mut [u8]) {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: writes at most the remaining bytes of `buf`.
        let n = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), buf.len() - got, 0) };
        if n > 0 {
            got += n as usize;
        } else if std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            panic!("the OS random source failed: {}", std::io::Error::last_os_error());
        }
    }
}
