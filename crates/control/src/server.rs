//! The management node process: its own tokio runtime, the Raft node, the listener on the mgmd
//! port (clients and peers alike), and two leader duties — confirming leadership with a quorum
//! (so leases are only granted by a leader that still is one) and ticking the failure detector.
//!
//! Requests other than `Hello`, `Status` and Raft RPCs are answered by the leader only; a follower
//! answers `NotLeader` with the leader's id and address when it knows them (no forwarding: the
//! client reconnects to the leader, so the leader sees every heartbeat's arrival time itself).
//!
//! Limits: at most `CONNECTIONS_MAX` connections (beyond: an error frame and close); one request
//! at a time per connection, each at most `FRAME_MAX` bytes and fully received within
//! `FRAME_TIMEOUT` once started; a connection idle for `IDLE_TIMEOUT` (or that has not sent
//! `Hello` within `FRAME_TIMEOUT`) is closed; a reply must be taken within `WRITE_TIMEOUT`.
//! Nothing here blocks the runtime: proposals and long polls wait in their connection's task.

use crate::detector::Detector;
use crate::proto::{self, FrameError, HeartbeatReply, HeartbeatReq, MemberReply, Reply, Request, Role, StateReply};
use crate::raft::{self, Network, Raft};
use crate::state::{Command, ControlState};
use crate::store::{self, LogStore, StateMachine};
use anyhow::Context;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, RaftMetrics, ServerState};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tern_types::cluster::{ClusterConfig, NodeId};
use tokio::io::AsyncReadExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::{Instant, timeout};

/// Open connections at most (clients and peers).
pub const CONNECTIONS_MAX: usize = 1024;
/// A frame, once its first byte arrived, must be complete within this.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection with no request for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// A reply must be accepted by the client within this.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a proposal may wait for Raft.
pub const PROPOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// What a management node needs to run.
#[derive(Debug, Clone)]
pub struct MgmdOptions {
    pub config: ClusterConfig,
    /// This mgmd's id (one of `config.mgmds`).
    pub node_id: NodeId,
    pub data_dir: PathBuf,
    /// Address to listen on; default: this mgmd's host and port from the config.
    pub bind: Option<String>,
    /// The cluster secret every connection must prove in its `Hello` (and this mgmd proves to
    /// the others). Without one the mgmd may only listen on loopback.
    pub secret: Option<tern_types::secret::ClusterSecret>,
}

/// Runs a management node until `shutdown` is set. Blocking; builds its own tokio runtime.
pub fn run_mgmd(opts: MgmdOptions, shutdown: Arc<AtomicBool>) -> anyhow::Result<()> {
    let listener = bind(&opts)?;
    run_on(opts, listener, shutdown, None)
}

/// A management node running on its own thread (tests, `tern up`).
pub struct MgmdHandle {
    addr: SocketAddr,
    shutdown: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<()>>>,
}

impl MgmdHandle {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the node and waits for its thread.
    pub fn stop(mut self) -> anyhow::Result<()> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> anyhow::Result<()> {
        self.shutdown.store(true, Ordering::SeqCst);
        match self.thread.take() {
            Some(t) => t.join().map_err(|_| anyhow::anyhow!("the mgmd thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for MgmdHandle {
    fn drop(&mut self) {
        let _ = self.stop_inner();
    }
}

/// Starts a management node on a thread; returns once it serves (or failed to start).
pub fn spawn_mgmd(opts: MgmdOptions) -> anyhow::Result<MgmdHandle> {
    let listener = bind(&opts)?;
    let addr = listener.local_addr()?;
    let shutdown = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let flag = shutdown.clone();
    let thread = std::thread::Builder::new()
        .name(format!("tern-mgmd-{}", opts.node_id))
        .spawn(move || run_on(opts, listener, flag, Some(started_tx)))?;
    let mut handle = MgmdHandle { addr, shutdown, thread: Some(thread) };
    match started_rx.recv_timeout(Duration::from_secs(30)) {
        Ok(()) => Ok(handle),
        Err(_) => {
            // The thread ended (with its error) or hangs: report its error if there is one.
            handle.shutdown.store(true, Ordering::SeqCst);
            match handle.thread.take().map(|t| t.join()) {
                Some(Ok(Err(e))) => Err(e),
                _ => Err(anyhow::anyhow!("the management node did not start")),
            }
        }
    }
}

/// The environment variable naming the cluster secret's file (as `tern_client::secret::SECRET_FILE_ENV`).
pub const SECRET_FILE_ENV: &str = "TERN_CLUSTER_SECRET_FILE";

fn bind(opts: &MgmdOptions) -> anyhow::Result<std::net::TcpListener> {
    let addr =
        match &opts.bind {
            Some(a) => a.clone(),
            None => {
                let me =
                    opts.config.mgmds.iter().find(|m| m.id == opts.node_id).with_context(|| {
                        format!("management node {} is not in the cluster configuration", opts.node_id)
                    })?;
                format!("{}:{}", me.host, me.port)
            }
        };
    if opts.secret.is_none() {
        use std::net::ToSocketAddrs;
        let resolved = addr.to_socket_addrs().with_context(|| format!("cannot resolve {addr}"))?;
        if resolved.into_iter().any(|a| !a.ip().is_loopback()) {
            anyhow::bail!(
                "refusing to listen on {addr} without a cluster secret: anyone who reaches the port could \
                 change the cluster. Set {SECRET_FILE_ENV} to a file holding the secret, or listen on 127.0.0.1"
            );
        }
    }
    std::net::TcpListener::bind(&addr).with_context(|| format!("cannot listen on {addr} (is the port taken?)"))
}

fn run_on(
    opts: MgmdOptions,
    listener: std::net::TcpListener,
    shutdown: Arc<AtomicBool>,
    started: Option<std::sync::mpsc::Sender<()>>,
) -> anyhow::Result<()> {
    crate::config::validate(&opts.config)?;
    if !opts.config.mgmds.iter().any(|m| m.id == opts.node_id) {
        anyhow::bail!("management node {} is not in the cluster configuration", opts.node_id);
    }
    store::open_data_dir(&opts.data_dir, opts.node_id as u64)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("tern-mgmd")
        .enable_all()
        .build()
        .context("cannot build the mgmd runtime")?;
    let result = rt.block_on(async move {
        let server = Server::start(opts, listener).await?;
        if let Some(tx) = started {
            let _ = tx.send(());
        }
        server.run(shutdown).await
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    result
}

/// What the leader keeps for its term.
#[derive(Default)]
struct LeaderDuty {
    term: Option<u64>,
    detector: Option<Detector>,
    /// Start time (ms) of the newest quorum confirmation of this leadership.
    confirmed_at_ms: Option<u64>,
    /// The longest the detector's tick came late in this term (credited to every node).
    late_ms_max: u64,
}

struct Ctx {
    id: u64,
    raft: Raft,
    metrics: watch::Receiver<RaftMetrics<u64, BasicNode>>,
    state: watch::Receiver<Arc<ControlState>>,
    duty: Mutex<LeaderDuty>,
    start: Instant,
    members: Vec<MemberReply>,
    secret: Option<tern_types::secret::ClusterSecret>,
}

struct Server {
    ctx: Arc<Ctx>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Server {
    async fn start(opts: MgmdOptions, listener: std::net::TcpListener) -> anyhow::Result<Server> {
        let id = opts.node_id as u64;
        let log = LogStore::open(&opts.data_dir, id)?;
        let (sm, state) = StateMachine::open(&opts.data_dir, ControlState::new(opts.config.clone()))?;
        let config = Arc::new(raft::raft_config().validate().context("raft configuration")?);
        let network = Network { proof: opts.secret.as_ref().map(|s| s.proof()) };
        let raft = Raft::new(id, config, network, log, sm).await.context("cannot start raft")?;
        let members: BTreeMap<u64, BasicNode> =
            opts.config.mgmds.iter().map(|m| (m.id as u64, BasicNode::new(format!("{}:{}", m.host, m.port)))).collect();
        if !raft.is_initialized().await.context("raft")? {
            // Every mgmd proposes the same initial membership; the log entry is identical on all.
            if let Err(e) = raft.initialize(members.clone()).await {
                tracing::info!("raft initialize: {e}");
            }
        }
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let ctx = Arc::new(Ctx {
            id,
            metrics: raft.metrics(),
            raft,
            state,
            duty: Mutex::new(LeaderDuty::default()),
            start: Instant::now(),
            secret: opts.secret.clone(),
            members: members.iter().map(|(id, n)| MemberReply { id: *id, addr: n.addr.clone() }).collect(),
        });
        let tasks = vec![
            tokio::spawn(accept_loop(ctx.clone(), listener)),
            tokio::spawn(confirm_loop(ctx.clone())),
            tokio::spawn(detect_loop(ctx.clone())),
        ];
        Ok(Server { ctx, tasks })
    }

    async fn run(self, shutdown: Arc<AtomicBool>) -> anyhow::Result<()> {
        while !shutdown.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for t in &self.tasks {
            t.abort();
        }
        let _ = timeout(Duration::from_secs(5), self.ctx.raft.shutdown()).await;
        Ok(())
    }
}

impl Ctx {
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    fn current(&self) -> Arc<ControlState> {
        self.state.borrow().clone()
    }

    /// `Ok(term)` when this mgmd leads, else the leader to redirect to (if known).
    fn leadership(&self) -> Result<u64, Option<MemberReply>> {
        let m = self.metrics.borrow();
        if m.state == ServerState::Leader && m.current_leader == Some(self.id) {
            return Ok(m.current_term);
        }
        Err(m.current_leader.and_then(|l| self.members.iter().find(|x| x.id == l).cloned()))
    }

    /// This term's duty, reset when the term changed (a new leader starts a new detector).
    fn duty(&self, term: u64, now_ms: u64) -> MutexGuard<'_, LeaderDuty> {
        let mut d = self.duty.lock().unwrap_or_else(|p| p.into_inner());
        if d.term != Some(term) {
            let cfg = &self.current().state.config;
            d.term = Some(term);
            d.detector = Some(Detector::new(cfg.failure_timeout_ms, cfg.heartbeat_interval_ms, now_ms));
            d.confirmed_at_ms = None;
            d.late_ms_max = 0;
            tracing::info!(term, "mgmd {} leads; failure detection armed after {} ms", self.id, cfg.failure_timeout_ms);
        }
        d
    }

    fn timing(&self) -> (u64, u64) {
        let s = self.current();
        (s.state.config.heartbeat_interval_ms.max(1), s.state.config.failure_timeout_ms)
    }
}

async fn accept_loop(ctx: Arc<Ctx>, listener: TcpListener) {
    let conns = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        match conns.clone().try_acquire_owned() {
            Ok(permit) => {
                tokio::spawn(serve_conn(ctx.clone(), stream, permit));
            }
            Err(_) => {
                tokio::spawn(async move {
                    let (_, mut wr) = stream.into_split();
                    let text = format!("too many connections (at most {CONNECTIONS_MAX})");
                    send_error(&mut wr, text).await;
                });
            }
        }
    }
}

/// Confirms leadership with a quorum every quarter heartbeat interval; leases are granted only
/// while the newest confirmation started less than one heartbeat interval ago. Why this fences a
/// deposed leader: a confirmation started at `c` was acknowledged by a majority after `c`; a new
/// leader needs votes from a majority, one of which acknowledged first, so it was elected after
/// `c`. A lease granted at `t <= c + heartbeat` ends by `c + heartbeat + lease = c +
/// failure_timeout`, before the new leader may declare anyone failed.
async fn confirm_loop(ctx: Arc<Ctx>) {
    loop {
        let (hb, _) = ctx.timing();
        tokio::time::sleep(Duration::from_millis((hb / 4).max(5))).await;
        let Ok(term) = ctx.leadership() else { continue };
        let t0 = ctx.now_ms();
        // Confirmed when a quorum acknowledged this leadership and the state machine has applied
        // everything committed before (else it could grant a lease to a node already failed).
        if let Ok(Ok((read, applied))) = timeout(Duration::from_millis(hb), ctx.raft.get_read_log_id()).await {
            if read.map(|l| l.index) > applied.map(|l| l.index) {
                continue;
            }
            let mut d = ctx.duty(term, t0);
            d.confirmed_at_ms = Some(d.confirmed_at_ms.map_or(t0, |c| c.max(t0)));
        }
    }
}

/// Ticks the failure detector and proposes the failures it finds.
async fn detect_loop(ctx: Arc<Ctx>) {
    let mut last_tick = ctx.now_ms();
    loop {
        let (hb, ft) = ctx.timing();
        // Half a heartbeat interval, at most 125 ms: the declaration waits a failure timeout
        // anyway, and an idle mgmd should not wake more often than the heartbeats arrive.
        let every = (hb / 2).clamp(5, 125);
        tokio::time::sleep(Duration::from_millis(every)).await;
        let now = ctx.now_ms();
        // How late this tick is beyond its interval: the mgmd was not scheduled (a starved
        // host). Lateness up to a heartbeat interval is ordinary jitter.
        let late = now.saturating_sub(last_tick).saturating_sub(every);
        last_tick = now;
        let Ok(term) = ctx.leadership() else { continue };
        let state = ctx.current();
        let failed = {
            let mut d = ctx.duty(term, now);
            if late > hb {
                tracing::warn!(
                    late_ms = late,
                    "the failure detector was not scheduled for {late} ms; not counted as silence"
                );
                d.late_ms_max = d.late_ms_max.max(late);
                if let Some(det) = d.detector.as_mut() {
                    det.credit_lateness(late, now);
                }
            }
            d.detector.as_mut().map(|det| det.on_tick(&state.state, now)).unwrap_or_default()
        };
        if failed.is_empty() {
            continue;
        }
        tracing::warn!(?failed, "declaring data nodes failed");
        let cmd = Command::NodesFailed { nodes: failed };
        match timeout(Duration::from_millis(ft.max(1000)), ctx.raft.client_write(cmd)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!("proposing failed nodes: {e}"),
            Err(_) => tracing::warn!("proposing failed nodes timed out"),
        }
    }
}

enum ReadError {
    Closed,
    Bad(String),
}

/// Reads one request frame: the header may take `idle`, the rest at most `FRAME_TIMEOUT`.
async fn read_request(rd: &mut OwnedReadHalf, idle: Duration) -> Result<Vec<u8>, ReadError> {
    let mut head = [0u8; 4];
    match timeout(idle, rd.read_u8()).await {
        Err(_) => return Err(ReadError::Bad("idle timeout".into())),
        Ok(Err(_)) => return Err(ReadError::Closed),
        Ok(Ok(b)) => head[0] = b,
    }
    let body = async {
        rd.read_exact(&mut head[1..]).await.map_err(FrameError::from)?;
        let len = proto::frame_len(head)?;
        let mut buf = Vec::new();
        (&mut *rd).take(len as u64).read_to_end(&mut buf).await?;
        if buf.len() != len {
            return Err(FrameError::Closed);
        }
        Ok(buf)
    };
    match timeout(FRAME_TIMEOUT, body).await {
        Err(_) => Err(ReadError::Bad(format!("a frame took longer than {} s", FRAME_TIMEOUT.as_secs()))),
        Ok(Err(FrameError::Closed | FrameError::Io(_))) => Err(ReadError::Closed),
        Ok(Err(e)) => Err(ReadError::Bad(e.to_string())),
        Ok(Ok(buf)) => Ok(buf),
    }
}

async fn send(wr: &mut OwnedWriteHalf, reply: &Reply) -> bool {
    matches!(timeout(WRITE_TIMEOUT, proto::write_frame(wr, &proto::encode(reply))).await, Ok(Ok(())))
}

async fn send_error(wr: &mut OwnedWriteHalf, text: String) {
    let _ = timeout(Duration::from_secs(1), proto::write_frame(wr, &proto::encode(&Reply::Error(text)))).await;
    let _ = timeout(Duration::from_secs(1), tokio::io::AsyncWriteExt::shutdown(wr)).await;
}

async fn serve_conn(ctx: Arc<Ctx>, stream: TcpStream, _permit: OwnedSemaphorePermit) {
    let _ = stream.set_nodelay(true);
    let (mut rd, mut wr) = stream.into_split();
    let mut role: Option<Role> = None;
    loop {
        let idle = if role.is_some() { IDLE_TIMEOUT } else { FRAME_TIMEOUT };
        let payload = match read_request(&mut rd, idle).await {
            Ok(p) => p,
            Err(ReadError::Closed) => return,
            Err(ReadError::Bad(text)) => return send_error(&mut wr, text).await,
        };
        let req = match proto::decode_request(&payload) {
            Ok(r) => r,
            Err(text) => return send_error(&mut wr, text).await,
        };
        let reply = match (role, req) {
            (None, Request::Hello { magic, version, role: r, proof }) => {
                if magic != proto::PROTOCOL_MAGIC {
                    return send_error(&mut wr, format!("bad protocol magic {magic:#x}")).await;
                }
                if let Some(s) = &ctx.secret
                    && !proof.is_some_and(|p| s.verify(&p))
                {
                    let why = if proof.is_some() { "a wrong cluster secret" } else { "no cluster secret" };
                    tracing::warn!("refusing a connection with {why}");
                    let text = format!(
                        "access denied: this management node requires the cluster secret and the connection \
                         presented {why} (set {} to the secret's file)",
                        SECRET_FILE_ENV
                    );
                    return send_error(&mut wr, text).await;
                }
                if version != proto::PROTOCOL_VERSION {
                    let text = format!(
                        "unsupported protocol version {version} (this mgmd speaks {})",
                        proto::PROTOCOL_VERSION
                    );
                    return send_error(&mut wr, text).await;
                }
                role = Some(r);
                Reply::Hello { version: proto::PROTOCOL_VERSION, mgmd: ctx.id }
            }
            (None, _) => return send_error(&mut wr, "the first request must be Hello".into()).await,
            (Some(_), Request::Hello { .. }) => return send_error(&mut wr, "Hello sent twice".into()).await,
            (Some(r), req) => match handle(&ctx, r, req).await {
                Ok(reply) => reply,
                Err(text) => return send_error(&mut wr, text).await,
            },
        };
        if !send(&mut wr, &reply).await {
            return;
        }
    }
}

/// Answers one request; `Err` is a protocol error (sent, then the connection closes).
async fn handle(ctx: &Ctx, role: Role, req: Request) -> Result<Reply, String> {
    if matches!(req, Request::RaftAppend(_) | Request::RaftVote(_) | Request::RaftSnapshot(_)) {
        if role != Role::Peer {
            return Err("raft requests are for management nodes (role Peer)".into());
        }
        return raft::serve_raft(&ctx.raft, &req).await.map(Reply::Raft);
    }
    if let Request::Status = req {
        return Ok(status(ctx));
    }
    let term = match ctx.leadership() {
        Ok(term) => term,
        Err(leader) => return Ok(Reply::NotLeader { leader }),
    };
    Ok(match req {
        Request::Heartbeat(hb) => heartbeat(ctx, term, hb),
        Request::Propose(Command::NodesFailed { .. }) => {
            Reply::Rejected("failures are declared by the leader's failure detector".into())
        }
        Request::Propose(cmd) => propose(ctx, cmd).await,
        Request::StopNode { node } => propose(ctx, Command::StopNode { node }).await,
        Request::StartNode { node } => propose(ctx, Command::StartNode { node }).await,
        Request::GetState => Reply::State(state_reply(ctx, &ctx.current())),
        Request::GetCatalog => {
            let s = ctx.current();
            Reply::Catalog { version: s.catalog_version, bytes: s.catalog.as_ref().clone() }
        }
        Request::WatchState { known_version, timeout_ms } => watch_state(ctx, known_version, timeout_ms).await,
        Request::Hello { .. }
        | Request::Status
        | Request::RaftAppend(_)
        | Request::RaftVote(_)
        | Request::RaftSnapshot(_) => {
            return Err("unexpected request".into());
        }
    })
}

fn state_reply(ctx: &Ctx, s: &ControlState) -> StateReply {
    let mut state = Vec::new();
    s.state.encode(&mut state);
    let detector = ctx.leadership().ok().and_then(|term| {
        let now = ctx.now_ms();
        let d = ctx.duty(term, now);
        let det = d.detector.as_ref()?;
        let lease_ms = lease_now(det, d.confirmed_at_ms, now, &s.state.config);
        Some(proto::DetectorReport { heard_ms: det.heard_ago(now), lease_ms, late_ms_max: d.late_ms_max })
    });
    StateReply {
        state,
        catalog_version: s.catalog_version,
        stop_requested: s.stop_requested.iter().copied().collect(),
        detector,
    }
}

/// The lease a heartbeat arriving now may be granted: the detector's, shortened so that it ends
/// by `confirmed + failure_timeout` (a leader elected after the confirmation `confirmed` waits
/// a full failure timeout before declaring anyone failed); 0 when leadership was not confirmed
/// recently enough for any. A confirmation that comes late (a starved mgmd) shortens the lease
/// instead of withholding it.
fn lease_now(det: &Detector, confirmed_at_ms: Option<u64>, now: u64, cfg: &ClusterConfig) -> u64 {
    let Some(c) = confirmed_at_ms else { return 0 };
    let since = now.saturating_sub(c).max(cfg.heartbeat_interval_ms);
    det.lease_ms().min(cfg.failure_timeout_ms.saturating_sub(since))
}

fn status(ctx: &Ctx) -> Reply {
    let m = ctx.metrics.borrow().clone();
    Reply::Status(proto::StatusReply {
        id: ctx.id,
        leader: m.current_leader,
        term: m.current_term,
        last_applied: m.last_applied.map_or(0, |l| l.index),
        members: ctx.members.clone(),
        state: state_reply(ctx, &ctx.current()),
    })
}

/// Records the heartbeat and grants a lease when the node is alive in the state, not fenced, and
/// this leadership was confirmed by a quorum within one heartbeat interval.
fn heartbeat(ctx: &Ctx, term: u64, hb: HeartbeatReq) -> Reply {
    let s = ctx.current();
    let now = ctx.now_ms();
    let cfg = &s.state.config;
    let alive = s
        .state
        .nodes
        .get(&hb.node)
        .is_some_and(|n| n.incarnation == hb.incarnation && n.state != tern_types::cluster::NodeState::Down);
    let mut lease_ms = 0;
    if alive {
        let mut d = ctx.duty(term, now);
        let confirmed = d.confirmed_at_ms;
        if let Some(det) = d.detector.as_mut() {
            let grant = det.on_heartbeat(hb.node, hb.incarnation, now);
            for suspect in &hb.suspects {
                det.on_suspect(hb.node, *suspect, now);
            }
            if grant {
                lease_ms = lease_now(det, confirmed, now, cfg);
            }
        }
    }
    let version = s.version();
    Reply::Heartbeat(HeartbeatReply {
        lease_ms,
        stop: s.stop_requested.contains(&hb.node),
        version,
        state: (version > hb.known_version).then(|| {
            let mut out = Vec::new();
            s.state.encode(&mut out);
            out
        }),
        catalog_version: s.catalog_version,
    })
}

async fn propose(ctx: &Ctx, cmd: Command) -> Reply {
    let what = store::describe(&cmd);
    match timeout(PROPOSE_TIMEOUT, ctx.raft.client_write(cmd)).await {
        Err(_) => Reply::Unavailable(format!("{what}: not committed within {} s", PROPOSE_TIMEOUT.as_secs())),
        Ok(Ok(resp)) => match resp.data {
            Ok(applied) => Reply::Ok(applied),
            Err(reason) => Reply::Rejected(reason),
        },
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
            Reply::NotLeader { leader: raft::member(f.leader_id, f.leader_node.as_ref()) }
        }
        Ok(Err(e)) => Reply::Unavailable(format!("{what}: {e}")),
    }
}

async fn watch_state(ctx: &Ctx, known_version: u64, timeout_ms: u64) -> Reply {
    let mut rx = ctx.state.clone();
    let wait = Duration::from_millis(timeout_ms.min(proto::WATCH_TIMEOUT_MS_MAX));
    let _ = timeout(wait, rx.wait_for(|s| s.version() > known_version)).await;
    let s = ctx.current();
    if s.version() > known_version {
        Reply::State(state_reply(ctx, &s))
    } else {
        Reply::Unchanged { version: s.version() }
    }
}
