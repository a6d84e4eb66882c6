//! Runs a data node: recovers its blocks from the data directory, spreads them over worker
//! threads (worker i runs tc i and ldm i; worker 0 also dict and dist), serves clients over TCP
//! (the TCP transporter) or in-process (the local transporter), and executes disk requests on an
//! I/O thread in order.
//!
//! Nothing here decides anything about data: all of that is in `tern-kernel`.

pub mod fs;
mod mailbox;
mod peer;
mod worker;

use crate::fs::{DataDir, FsStorage};
use mailbox::Mailbox;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tern_kernel::io::IoExecutor;
use tern_kernel::signal::{Addr, Block, ClientId, Signal};
use tern_kernel::{Node, NodeConfig};
pub use tern_shm::Transporter;
use tern_wire::Request;
pub use worker::HostedWorker;
pub use worker::ReplySink;
use worker::{Inbound, IoQueue, Shared, Worker, WorkerBlocks, worker_of};

/// Drives worker 0 on its thread (`DataNode::start_hosted`; e.g. `tern_client::hosted::host`).
pub type Host = Box<dyn FnOnce(Box<dyn tern_wire::HostedWorker>) + Send>;

#[derive(Debug, Clone)]
pub struct DataNodeConfig {
    pub node: NodeConfig,
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// Upper bound of the adaptive idle spin, in microseconds (0 = never spin).
    pub spin_max_us: u64,
    /// How long (µs) an idle worker keeps spinning after it exchanged signals with another
    /// worker, when a reply is likely (a transaction spanning workers: prepare, then commit).
    /// Saves a sleep and a wake-up per hop; costs CPU that threads outside the workers (front
    /// ends in this process, clients on this host) may need on a small machine. 0: off.
    pub expect_spin_us: u64,
    pub redo_segment_bytes: u64,
    /// Called by a worker when it goes idle after work (at most every 100 ms), e.g. to let the
    /// allocator return freed memory to the OS.
    pub idle_hook: Option<fn()>,
    /// Receives the blocks' requests to the control plane (node state changes, the durable
    /// epoch); without a control plane they are dropped.
    pub control: Option<Arc<ControlInbox>>,
    /// Whether processes on this host may connect through shared memory (`Shm`/`Auto`: the node
    /// listens on its abstract Unix socket; `Tcp`: TCP only). With `Shm` a node that cannot
    /// listen there does not start; with `Auto` it serves TCP only and says why.
    pub transporter: tern_shm::Transporter,
    /// The cluster secret: every connection (clients, other data nodes) must prove it in its
    /// first frame, and this node proves it to the others. Without one the node may only listen
    /// on loopback.
    pub cluster_secret: Option<tern_types::secret::ClusterSecret>,
}

/// A move's report from an ldm: its copy is complete (`left` false), or it left the partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct MoveReport {
    pub left: bool,
    pub table: u32,
    pub partition: u32,
}

/// The blocks' requests to the control plane, waiting for the membership thread. Bounded by
/// construction: the durable epoch is kept as the newest only, a node state change repeating
/// the last one waiting is not queued again (a node asks for a handful in its life), and
/// suspicions are a set of node ids.
#[derive(Debug, Default)]
pub struct ControlInbox {
    pending: std::sync::Mutex<(Vec<tern_types::cluster::NodeState>, u64)>,
    suspects: std::sync::Mutex<std::collections::BTreeSet<tern_types::cluster::NodeId>>,
    /// The newest catalog the master's dict reported.
    catalog: std::sync::Mutex<Option<Arc<tern_types::Catalog>>>,
    /// Partition moves' reports (`MoveCopied` / `MoveLeft`), a set: reporting again is harmless.
    moves: std::sync::Mutex<std::collections::BTreeSet<MoveReport>>,
    /// Tables to reorganise (ALTER TABLE … REORGANIZE PARTITION), a set.
    reorganize: std::sync::Mutex<std::collections::BTreeSet<u32>>,
    /// Rung (under `pending`) when a state change or a catalog arrives: the membership thread
    /// sleeps on it instead of polling.
    arrived: std::sync::Condvar,
}

impl ControlInbox {
    pub fn push(&self, req: tern_kernel::signal::ControlReq) {
        use tern_kernel::signal::ControlReq;
        let mut p = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match req {
            ControlReq::SetState(s) if p.0.last() != Some(&s) => {
                p.0.push(s);
                self.arrived.notify_all();
            }
            ControlReq::SetState(_) => {}
            ControlReq::DurableEpoch(e) => p.1 = p.1.max(e),
            ControlReq::Suspect(n) => {
                drop(p);
                self.suspects.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(n);
            }
            ControlReq::MoveCopied { table, partition } | ControlReq::MoveLeft { table, partition } => {
                let left = matches!(req, ControlReq::MoveLeft { .. });
                self.moves.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(MoveReport {
                    left,
                    table,
                    partition,
                });
                self.arrived.notify_all();
            }
            ControlReq::Reorganize { tables } => {
                drop(p);
                self.reorganize.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(tables);
                let _p = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                self.arrived.notify_all();
            }
            ControlReq::Catalog(c) => {
                drop(p);
                let mut cur = self.catalog.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if cur.as_ref().is_none_or(|old| old.version < c.version) {
                    *cur = Some(c);
                }
                drop(cur);
                // (Taking `pending` orders the notification after a waiter's check.)
                let _p = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                self.arrived.notify_all();
            }
        }
    }

    /// The tables to reorganise since the last call.
    pub fn take_reorganize(&self) -> Vec<u32> {
        let mut m = self.reorganize.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::take(&mut *m).into_iter().collect()
    }

    /// The moves' reports since the last call.
    pub fn take_moves(&self) -> Vec<MoveReport> {
        let mut m = self.moves.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::take(&mut *m).into_iter().collect()
    }

    /// The newest catalog reported since the last call.
    pub fn take_catalog(&self) -> Option<Arc<tern_types::Catalog>> {
        self.catalog.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take()
    }

    /// The nodes suspected since the last call (reported with the next heartbeat).
    pub fn take_suspects(&self) -> Vec<tern_types::cluster::NodeId> {
        let mut s = self.suspects.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::take(&mut *s).into_iter().collect()
    }

    /// The state changes asked for since the last call, in order, and the newest durable epoch
    /// reported so far.
    pub fn take(&self) -> (Vec<tern_types::cluster::NodeState>, u64) {
        let mut p = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        (std::mem::take(&mut p.0), p.1)
    }

    /// Waits up to `timeout` for a state change or a catalog to arrive (returns at once when
    /// one is waiting). Durable epochs do not wake it: they are reported at the caller's pace.
    pub fn wait(&self, timeout: std::time::Duration) {
        let p = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // (`push` never holds `catalog` while it takes `pending`.)
        let catalog_waiting = || self.catalog.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some();
        if !p.0.is_empty() || catalog_waiting() {
            return;
        }
        let _ = self.arrived.wait_timeout(p, timeout);
    }
}

impl DataNodeConfig {
    /// A node for tests and embedding: node 1 with 2 ldm workers on 127.0.0.1 (an ephemeral
    /// port), a 20 ms epoch interval, a short idle spin and 1 MiB redo segments.
    pub fn local(data_dir: &std::path::Path, data_memory: u64) -> DataNodeConfig {
        let mut node = NodeConfig::new(1, 2, data_memory);
        node.dist.epoch_interval_ms = 20;
        DataNodeConfig {
            node,
            data_dir: data_dir.to_path_buf(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            spin_max_us: 10,
            expect_spin_us: EXPECT_SPIN_US_DEFAULT,
            redo_segment_bytes: 1 << 20,
            idle_hook: None,
            control: None,
            transporter: tern_shm::Transporter::Auto,
            cluster_secret: None,
        }
    }
}

/// Hands cluster maps to every block of a running node (the membership thread holds one).
#[derive(Clone)]
pub struct MapPublisher {
    mailboxes: Arc<Vec<Arc<Mailbox<Inbound>>>>,
    /// The blocks' time base (`Shared::epoch`).
    epoch: Instant,
}

impl MapPublisher {
    /// The node's lease now runs until `until` (None: lapsed, serve no client).
    pub fn lease(&self, until: Option<Instant>) {
        let until_ms = until.map_or(0, |t| t.saturating_duration_since(self.epoch).as_millis() as u64);
        for (i, mb) in self.mailboxes.iter().enumerate() {
            mb.push(Inbound::Signal(Block::Tc(i as u16), Signal::Lease { until_ms }));
        }
    }

    pub fn publish(&self, state: Arc<tern_types::cluster::ClusterState>) {
        for (i, mb) in self.mailboxes.iter().enumerate() {
            let i = i as u16;
            let mut blocks = vec![Block::Ldm(i), Block::Tc(i)];
            if i == 0 {
                blocks.extend([Block::Dict, Block::Dist]);
            }
            for b in blocks {
                mb.push(Inbound::Signal(b, Signal::ClusterMap { state: state.clone() }));
            }
        }
    }

    /// Hands the dict a signal from the control plane (`CatalogStored`, `MgmCatalog`).
    pub fn to_dict(&self, sig: Signal) {
        self.mailboxes[0].push(Inbound::Signal(Block::Dict, sig));
    }
}

/// The default of `DataNodeConfig::expect_spin_us`.
pub const EXPECT_SPIN_US_DEFAULT: u64 = 150;

/// Longest a graceful shutdown waits for the last epochs to become durable.
pub const SHUTDOWN_FLUSH_MAX: Duration = Duration::from_secs(5);

/// Stack of a worker thread that hosts front ends (as `tern_client::frontend::WORKER_STACK_BYTES`,
/// which this crate does not depend on: parsers and evaluators bound their recursion for it).
pub const HOSTING_STACK_BYTES: usize = 16 << 20;

/// A running data node.
pub struct DataNode {
    shared: Arc<Shared>,
    mailboxes: Arc<Vec<Arc<Mailbox<Inbound>>>>,
    threads: Vec<JoinHandle<()>>,
    io_thread: Option<JoinHandle<()>>,
    io: Arc<IoQueue>,
    local_addr: SocketAddr,
    _dir: DataDir,
    pub recovered_rows: u64,
    pub durable_epoch: u64,
}

/// The client and peer port (non-blocking) and, as the transporter setting asks, the
/// shared-memory listener beside it.
#[allow(clippy::type_complexity)]
fn bind(
    cfg: &DataNodeConfig,
) -> Result<(std::net::TcpListener, SocketAddr, Option<std::os::unix::net::UnixListener>), String> {
    let listener = std::net::TcpListener::bind(cfg.listen).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            format!("cannot listen on {}: the port is already in use", cfg.listen)
        } else {
            format!("cannot listen on {}: {e}", cfg.listen)
        }
    })?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let local_addr = listener.local_addr().map_err(|e| e.to_string())?;
    let shm_listener = match cfg.transporter {
        tern_shm::Transporter::Tcp => None,
        t => match tern_shm::listen(local_addr.port()) {
            Ok(l) => Some(l),
            Err(e) if t == tern_shm::Transporter::Shm => {
                return Err(format!(
                    "cannot listen for shared-memory connections (@{}): {e}",
                    tern_shm::socket_name(local_addr.port())
                ));
            }
            Err(e) => {
                tracing::warn!(
                    "not offering shared-memory connections (@{}): {e}; TCP only",
                    tern_shm::socket_name(local_addr.port())
                );
                None
            }
        },
    };
    Ok((listener, local_addr, shm_listener))
}

impl DataNode {
    /// Opens the data directory, recovers, binds the client port and starts every thread.
    pub fn start(cfg: DataNodeConfig) -> Result<DataNode, String> {
        DataNode::start_hosted(cfg, None)
    }

    /// `start`, with worker 0 driven by `host` on that worker's thread (see `HostedWorker`:
    /// an async runtime that also serves front ends). `host` returns when the worker says
    /// `Turn::Stopped`, after `HostedWorker::finish`.
    pub fn start_hosted(cfg: DataNodeConfig, mut host: Option<Host>) -> Result<DataNode, String> {
        if cfg.cluster_secret.is_none() && tern_wire::beyond_loopback(&cfg.listen) {
            return Err(format!(
                "refusing to listen on {} without a cluster secret: anyone who reaches the port could read \
                 and write every table. Set {} to a file holding the secret (or cluster_secret_file in \
                 the data node's TOML), or listen on 127.0.0.1",
                cfg.listen,
                tern_wire::SECRET_FILE_ENV
            ));
        }
        let dir = DataDir::open(&cfg.data_dir, cfg.node.node_id)?;
        let (listener, local_addr, shm_listener) = bind(&cfg)?;
        let storage = FsStorage::new(&cfg.data_dir);
        let started_at = Instant::now();
        // Blocks see time as ms since `epoch`; TTL expiry needs the wall clock at that instant.
        let epoch = Instant::now();
        let mut node_cfg = cfg.node.clone();
        node_cfg.ldm.wall_base_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        node_cfg.tc.wall_base_ms = node_cfg.ldm.wall_base_ms;
        let node = Node::recover(&node_cfg, &storage)?;
        node.stats.pid.store(std::process::id(), Ordering::Relaxed);
        tracing::info!(
            rows = node.recovered_rows,
            redo_records = node.recovered_redo_records,
            durable_epoch = node.durable_epoch,
            ms = started_at.elapsed().as_millis() as u64,
            "recovered"
        );
        let mut executor = IoExecutor::new(storage, cfg.redo_segment_bytes);
        for (i, &base) in node.redo_base.iter().enumerate() {
            executor.open_redo(i as u16, base).map_err(|e| format!("opening the redo log of ldm {i}: {e}"))?;
        }
        let shared = Arc::new(Shared {
            started: AtomicBool::new(false),
            current_epoch: AtomicU64::new(0),
            durable_epoch: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            stopped_serving: AtomicUsize::new(0),
            next_client: AtomicU64::new(1),
            epoch,
            spin_max_us: cfg.spin_max_us,
            expect_spin_us: if cfg.spin_max_us == 0 { 0 } else { cfg.expect_spin_us },
            client_seen_ms: AtomicU64::new(0),
            idle_hook: cfg.idle_hook,
            control: cfg.control.clone(),
            transporter: cfg.transporter,
            cluster_secret: cfg.cluster_secret.clone(),
            stats: node.stats.clone(),
        });
        let Node { tcs, ldms, dict, dist, recovered_rows, durable_epoch, .. } = node;
        let n = ldms.len();
        let mut polls = Vec::new();
        let mut boxes = Vec::new();
        for _ in 0..n {
            let poll = mio::Poll::new().map_err(|e| e.to_string())?;
            let waker = mio::Waker::new(poll.registry(), worker::WAKER).map_err(|e| e.to_string())?;
            boxes.push(Arc::new(Mailbox::new(waker)));
            polls.push(poll);
        }
        let mailboxes = Arc::new(boxes);
        let io = Arc::new(IoQueue { q: std::sync::Mutex::new(Default::default()), cv: std::sync::Condvar::new() });
        let io_thread = {
            let io = io.clone();
            let mailboxes = mailboxes.clone();
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("tern-io".into())
                .spawn(move || io_loop(executor, io, mailboxes, shared))
                .map_err(|e| e.to_string())?
        };
        let mut dict = Some(dict);
        let mut dist = Some(dist);
        let mut listener = Some(mio::net::TcpListener::from_std(listener));
        let mut threads = Vec::new();
        for (i, ((tc, ldm), poll)) in tcs.into_iter().zip(ldms).zip(polls).enumerate() {
            let blocks = WorkerBlocks {
                tc,
                ldm,
                dict: if i == 0 { dict.take() } else { None },
                dist: if i == 0 { dist.take() } else { None },
            };
            let w = Worker::new(
                i,
                blocks,
                poll,
                if i == 0 { listener.take() } else { None },
                mailboxes[i].clone(),
                mailboxes.clone(),
                io.clone(),
                shared.clone(),
                cfg.node.cluster.clone(),
            );
            let hosted = if i == 0 { host.take() } else { None };
            let mut builder = std::thread::Builder::new().name(format!("tern-worker-{i}"));
            if hosted.is_some() {
                // Front-end tasks run here: their parsers and evaluators need the stack front-end
                // threads have (`tern_client::frontend::WORKER_STACK_BYTES`).
                builder = builder.stack_size(HOSTING_STACK_BYTES);
            }
            threads.push(
                builder
                    .spawn(move || {
                        // A worker that dies would leave its partitions unanswered while the
                        // node looks alive: stop the whole node instead, so that it is noticed
                        // and restarted (as an NDB data node stops on an internal error).
                        let body = move || match hosted {
                            Some(h) => h(Box::new(HostedWorker::new(w))),
                            None => w.run(),
                        };
                        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).is_err() {
                            eprintln!("tern: data node worker {i} failed (see the panic above); stopping the node");
                            std::process::abort();
                        }
                    })
                    .map_err(|e| e.to_string())?,
            );
        }
        if let Some(l) = shm_listener {
            let (mailboxes, shared) = (mailboxes.clone(), shared.clone());
            threads.push(
                std::thread::Builder::new()
                    .name("tern-shm-accept".into())
                    .spawn(move || shm_accept_loop(l, mailboxes, shared))
                    .map_err(|e| e.to_string())?,
            );
        }
        mailboxes[0].push(Inbound::Signal(Block::Dist, Signal::Start));
        Ok(DataNode {
            shared,
            mailboxes,
            threads,
            io_thread: Some(io_thread),
            io,
            local_addr,
            _dir: dir,
            recovered_rows,
            durable_epoch,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// What hands new cluster maps from the control plane to this node's blocks.
    pub fn map_publisher(&self) -> MapPublisher {
        MapPublisher { mailboxes: self.mailboxes.clone(), epoch: self.shared.epoch }
    }

    pub fn is_started(&self) -> bool {
        self.shared.started.load(Ordering::Acquire)
    }

    /// Waits until the node serves transactions.
    pub fn wait_started(&self, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if self.is_started() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        self.is_started()
    }

    /// Opens an in-process connection (the local transporter): requests go straight into a
    /// worker's mailbox and replies come back through `sink`, with no socket and no encoding.
    pub fn connect_local(&self, sink: ReplySink) -> LocalConn {
        self.local_connector().connect(sink)
    }

    /// Something that opens in-process connections, for a front end running in this process.
    pub fn local_connector(&self) -> LocalConnector {
        LocalConnector { shared: self.shared.clone(), mailboxes: self.mailboxes.clone() }
    }

    /// Stops the node gracefully: first waits (up to `SHUTDOWN_FLUSH_MAX`) until every epoch
    /// given out so far is durable, so no commit acknowledged before the stop is lost; then stops
    /// every thread.
    pub fn shutdown(mut self) {
        self.flush_for_stop();
        self.stop_threads();
    }

    /// Stops serving clients (every tc refuses their requests and aborts transactions that
    /// reach their commit point from now on: `Signal::StopServing`), then waits (up to
    /// `SHUTDOWN_FLUSH_MAX`) until every epoch given out so far is durable; returns whether it
    /// is. So every commit acknowledged before the stop is in a durable epoch, on every replica.
    pub fn flush_for_stop(&self) -> bool {
        if !self.is_started() {
            return false;
        }
        let until = Instant::now() + SHUTDOWN_FLUSH_MAX;
        let asked = self.shared.stopped_serving.load(Ordering::Acquire);
        for (i, mb) in self.mailboxes.iter().enumerate() {
            mb.push(Inbound::Signal(Block::Tc(i as u16), Signal::StopServing));
        }
        // Once every tc took it, no commit point can be taken in a later epoch than the current.
        while self.shared.stopped_serving.load(Ordering::Acquire) < asked + self.mailboxes.len()
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        let target = self.shared.current_epoch.load(Ordering::Acquire);
        while self.shared.durable_epoch.load(Ordering::Acquire) < target && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let done = self.shared.durable_epoch.load(Ordering::Acquire) >= target;
        if !done {
            tracing::warn!(target, "stopping before the last epochs became durable");
        }
        done
    }

    /// Stops every thread at once, like a crash would (commits of epochs not yet durable are
    /// lost; durable commits are not).
    pub fn kill(mut self) {
        self.stop_threads();
    }

    fn stop_threads(&mut self) {
        self.shared.stopping.store(true, Ordering::Release);
        for m in self.mailboxes.iter() {
            m.push(Inbound::Stop);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // Under the queue's lock: the io thread either sees `stopping` or is waiting already.
        drop(self.io.q.lock().unwrap_or_else(|p| p.into_inner()));
        self.io.cv.notify_all();
        if let Some(t) = self.io_thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DataNode {
    fn drop(&mut self) {
        self.stop_threads();
    }
}

/// Opens in-process connections to a running data node.
#[derive(Clone)]
pub struct LocalConnector {
    shared: Arc<Shared>,
    mailboxes: Arc<Vec<Arc<Mailbox<Inbound>>>>,
}

impl LocalConnector {
    pub fn connect(&self, sink: ReplySink) -> LocalConn {
        self.connect_to(None, sink)
    }

    /// A connection served by worker `worker` (None: spread over the workers).
    pub fn connect_to(&self, worker: Option<u16>, sink: ReplySink) -> LocalConn {
        let client = self.shared.next_client.fetch_add(1, Ordering::Relaxed) | (1 << 62);
        let w = worker.map_or(client as usize, usize::from) % self.mailboxes.len();
        let mailbox = self.mailboxes[w].clone();
        mailbox.push(Inbound::LocalOpen { client, sink });
        LocalConn { client, mailbox }
    }
}

/// An in-process client connection.
pub struct LocalConn {
    client: ClientId,
    mailbox: Arc<Mailbox<Inbound>>,
}

impl tern_wire::LocalTransport for LocalConn {
    fn send(&self, req_id: u64, req: Request) {
        self.mailbox.push(Inbound::LocalRequest { client: self.client, req_id, req });
    }

    fn send_all(&self, reqs: &mut Vec<(u64, Request)>) {
        let client = self.client;
        let mut items: Vec<Inbound> =
            reqs.drain(..).map(|(req_id, req)| Inbound::LocalRequest { client, req_id, req }).collect();
        self.mailbox.push_all(&mut items);
    }
}

impl Drop for LocalConn {
    fn drop(&mut self) {
        self.mailbox.push(Inbound::LocalGone { client: self.client });
    }
}

/// The longest an idle io thread sleeps before it looks at the stop flag again.
const IO_IDLE_WAIT: Duration = Duration::from_millis(500);

/// Executes disk requests in submission order; completions go back to the requesting block.
/// A failed disk write stops the node: continuing could acknowledge data that is not durable.
fn io_loop(
    mut exec: IoExecutor<FsStorage>,
    io: Arc<IoQueue>,
    mailboxes: Arc<Vec<Arc<Mailbox<Inbound>>>>,
    shared: Arc<Shared>,
) {
    let mut batch = Vec::new();
    loop {
        {
            let mut q = io.q.lock().expect("io queue");
            while q.is_empty() {
                if shared.stopping.load(Ordering::Acquire) {
                    return;
                }
                // Requests and the stop notify; the timeout is only a backstop.
                q = io.cv.wait_timeout(q, IO_IDLE_WAIT).expect("io queue").0;
            }
            batch.extend(q.drain(..));
        }
        for (from, req) in batch.drain(..) {
            match exec.execute(from, req) {
                Ok(Some((to, sig))) => deliver(&mailboxes, to, sig),
                Ok(None) => {}
                Err(e) => {
                    tracing::error!("disk write failed, stopping the data node: {e}");
                    eprintln!("tern datanode: disk write failed, stopping: {e}");
                    std::process::exit(2);
                }
            }
        }
    }
}

/// Accepts shared-memory connections: creates each one's segment and eventfds, hands them to the
/// client over the Unix socket, and gives the connection to a worker (round-robin, as TCP ones;
/// the client's Hello may move it). Ends when the node stops.
fn shm_accept_loop(
    l: std::os::unix::net::UnixListener,
    mailboxes: Arc<Vec<Arc<Mailbox<Inbound>>>>,
    shared: Arc<Shared>,
) {
    use std::os::fd::AsRawFd;
    if let Err(e) = l.set_nonblocking(true) {
        tracing::warn!("shared-memory listener: {e}");
        return;
    }
    let mut next = 0usize;
    while !shared.stopping.load(Ordering::Acquire) {
        match l.accept() {
            Ok((s, _)) => match tern_shm::serve(&s, tern_shm::RING_DEFAULT) {
                Ok(e) => {
                    let w = next % mailboxes.len();
                    next += 1;
                    mailboxes[w].push(Inbound::NewConn(worker::Accepted::Shm(s, Box::new(e))));
                }
                Err(e) => tracing::warn!("setting up a shared-memory connection: {e}"),
            },
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut p = libc::pollfd { fd: l.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd for the listener we own.
                unsafe { libc::poll(&mut p, 1, 100) };
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!("accepting a shared-memory connection: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn deliver(mailboxes: &[Arc<Mailbox<Inbound>>], to: Addr, sig: Signal) {
    mailboxes[worker_of(to.block)].push(Inbound::Signal(to.block, sig));
}
