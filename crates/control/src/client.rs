//! `MgmClient`: the blocking client of the management nodes, for data nodes, API servers and
//! `tern status` (plain `std::net::TcpStream` with timeouts; the caller needs no tokio runtime).
//!
//! It keeps one connection, to the mgmd that last answered, and follows `NotLeader` redirects. On
//! a connection error it tries the next configured mgmd; during an election (`NotLeader` without
//! a leader, `Unavailable`) it waits a little and tries again. Every call is bounded: at most
//! `ATTEMPTS_PER_MGMD` attempts per configured mgmd and `call_timeout` in total (plus the long
//! poll of `watch`).

use crate::proto::{self, HeartbeatReq, Reply, Request, Role, StateReply};
use crate::state::{Applied, Command};
use std::io::ErrorKind;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};
use tern_types::cluster::{ClusterState, NodeId};

/// Attempts in one call at most (elections can take a few rounds; `call_timeout` bounds the time).
pub const ATTEMPTS_MAX: usize = 100;
/// Pause before retrying while there is no leader.
const ELECTION_BACKOFF: Duration = Duration::from_millis(100);

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The state machine refused the command (nothing changed); retrying will not help.
    #[error("rejected: {0}")]
    Rejected(String),
    /// No management node could answer in time (no leader, unreachable): temporary.
    #[error("no management node answered: {0}")]
    Unavailable(String),
    /// The mgmd answered with a protocol error (a bug or a version mismatch).
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// A heartbeat's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatInfo {
    /// Until when the node may serve: the lease counted from when the heartbeat was sent; `None`
    /// when no lease was granted (down, fenced, stale incarnation, leadership unconfirmed).
    pub lease_until: Option<Instant>,
    pub lease_ms: u64,
    /// An operator asked this node to stop.
    pub stop: bool,
    pub version: u64,
    /// The version of the catalog the management nodes hold (0: none).
    pub catalog_version: u64,
    /// The cluster state, when newer than the `known_version` sent.
    pub state: Option<ClusterState>,
}

/// The replicated state as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateInfo {
    pub state: ClusterState,
    pub catalog_version: u64,
    pub stop_requested: Vec<NodeId>,
    /// The leader's failure detector (`None` when a follower answered).
    pub detector: Option<crate::proto::DetectorReport>,
}

impl StateInfo {
    /// Whether the leader heard node `n` within `ms`.
    pub fn heard_within(&self, n: NodeId, ms: u64) -> bool {
        self.detector.as_ref().is_some_and(|d| d.heard_ms.iter().any(|&(m, ago)| m == n && ago <= ms))
    }
}

/// `tern status`'s view of the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusInfo {
    /// The mgmd that answered.
    pub mgmd: u64,
    pub leader: Option<u64>,
    pub term: u64,
    pub last_applied: u64,
    /// (id, address) of every mgmd.
    pub members: Vec<(u64, String)>,
    pub state: StateInfo,
}

struct Conn {
    addr: String,
    stream: TcpStream,
}

pub struct MgmClient {
    addrs: Vec<String>,
    role: Role,
    conn: Option<Conn>,
    next: usize,
    leader_hint: Option<String>,
    /// The cluster secret's proof sent in `Hello`.
    proof: Option<[u8; 32]>,
    pub connect_timeout: Duration,
    /// How long one reply may take.
    pub request_timeout: Duration,
    /// How long one call may take over all its attempts.
    pub call_timeout: Duration,
}

fn decode_state(bytes: &[u8]) -> Result<ClusterState, ControlError> {
    ClusterState::decode(bytes).map_err(|e| ControlError::Protocol(format!("bad cluster state: {e:?}")))
}

fn state_info(s: StateReply) -> Result<StateInfo, ControlError> {
    Ok(StateInfo {
        state: decode_state(&s.state)?,
        catalog_version: s.catalog_version,
        stop_requested: s.stop_requested,
        detector: s.detector,
    })
}

fn unexpected(reply: Reply) -> ControlError {
    ControlError::Protocol(format!("unexpected reply {reply:?}"))
}

impl MgmClient {
    /// A client of the mgmds at `addrs` ("host:port"), as an administrator.
    pub fn new(addrs: Vec<String>) -> MgmClient {
        MgmClient {
            addrs,
            role: Role::Admin,
            conn: None,
            next: 0,
            leader_hint: None,
            proof: None,
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(6),
            call_timeout: Duration::from_secs(10),
        }
    }

    pub fn with_role(mut self, role: Role) -> MgmClient {
        self.role = role;
        self
    }

    /// Proves `secret` when connecting (management nodes with a cluster secret refuse others).
    pub fn with_secret(mut self, secret: Option<&tern_types::secret::ClusterSecret>) -> MgmClient {
        self.proof = secret.map(|s| s.proof());
        self
    }

    /// The mgmd this client is connected to, if any.
    pub fn connected_to(&self) -> Option<&str> {
        self.conn.as_ref().map(|c| c.addr.as_str())
    }

    /// Sends a heartbeat of data node `node`.
    pub fn heartbeat(
        &mut self,
        node: NodeId,
        incarnation: u32,
        known_version: u64,
        suspects: &[NodeId],
    ) -> Result<HeartbeatInfo, ControlError> {
        let req = Request::Heartbeat(HeartbeatReq { node, incarnation, known_version, suspects: suspects.to_vec() });
        match self.call(&req, self.request_timeout)? {
            (Reply::Heartbeat(h), sent_at) => Ok(HeartbeatInfo {
                lease_until: (h.lease_ms > 0).then(|| sent_at + Duration::from_millis(h.lease_ms)),
                lease_ms: h.lease_ms,
                stop: h.stop,
                version: h.version,
                catalog_version: h.catalog_version,
                state: h.state.as_deref().map(decode_state).transpose()?,
            }),
            (other, _) => Err(unexpected(other)),
        }
    }

    /// Proposes a command; returns what it did once applied.
    pub fn propose(&mut self, cmd: Command) -> Result<Applied, ControlError> {
        self.applied(&Request::Propose(cmd))
    }

    /// Registers a (re)starting data node; returns its new incarnation.
    pub fn register(&mut self, node: NodeId, last_incarnation: u32, durable_epoch: u64) -> Result<u32, ControlError> {
        let cmd = Command::Register { node, incarnation: last_incarnation, durable_epoch };
        Ok(self.propose(cmd)?.incarnation)
    }

    pub fn stop_node(&mut self, node: NodeId) -> Result<Applied, ControlError> {
        self.applied(&Request::StopNode { node })
    }

    pub fn start_node(&mut self, node: NodeId) -> Result<Applied, ControlError> {
        self.applied(&Request::StartNode { node })
    }

    fn applied(&mut self, req: &Request) -> Result<Applied, ControlError> {
        match self.call(req, self.request_timeout)?.0 {
            Reply::Ok(a) => Ok(a),
            Reply::Rejected(reason) => Err(ControlError::Rejected(reason)),
            other => Err(unexpected(other)),
        }
    }

    pub fn get_state(&mut self) -> Result<StateInfo, ControlError> {
        match self.call(&Request::GetState, self.request_timeout)?.0 {
            Reply::State(s) => state_info(s),
            other => Err(unexpected(other)),
        }
    }

    /// The catalog: (version, bytes).
    pub fn get_catalog(&mut self) -> Result<(u64, Vec<u8>), ControlError> {
        match self.call(&Request::GetCatalog, self.request_timeout)?.0 {
            Reply::Catalog { version, bytes } => Ok((version, bytes)),
            other => Err(unexpected(other)),
        }
    }

    /// Waits up to `timeout_ms` for a state newer than `known_version`; `None` if none came.
    pub fn watch(&mut self, known_version: u64, timeout_ms: u64) -> Result<Option<StateInfo>, ControlError> {
        let timeout_ms = timeout_ms.min(proto::WATCH_TIMEOUT_MS_MAX);
        let req = Request::WatchState { known_version, timeout_ms };
        match self.call(&req, self.request_timeout + Duration::from_millis(timeout_ms))?.0 {
            Reply::State(s) => Ok(Some(state_info(s)?)),
            Reply::Unchanged { .. } => Ok(None),
            other => Err(unexpected(other)),
        }
    }

    /// The control plane's status, from whichever mgmd answers (not necessarily the leader).
    pub fn status(&mut self) -> Result<StatusInfo, ControlError> {
        match self.call(&Request::Status, self.request_timeout)?.0 {
            Reply::Status(s) => Ok(StatusInfo {
                mgmd: s.id,
                leader: s.leader,
                term: s.term,
                last_applied: s.last_applied,
                members: s.members.into_iter().map(|m| (m.id, m.addr)).collect(),
                state: state_info(s.state)?,
            }),
            other => Err(unexpected(other)),
        }
    }

    /// Where to send the next attempt: the redirect target, else the current connection, else
    /// the next configured mgmd.
    fn pick(&mut self) -> String {
        if let Some(hint) = self.leader_hint.take() {
            return hint;
        }
        if let Some(c) = &self.conn {
            return c.addr.clone();
        }
        let addr = self.addrs[self.next % self.addrs.len()].clone();
        self.next += 1;
        addr
    }

    fn connect(&self, addr: &str) -> std::io::Result<TcpStream> {
        let mut last = std::io::Error::new(ErrorKind::NotFound, format!("{addr} resolves to no address"));
        for sa in addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&sa, self.connect_timeout) {
                Ok(mut stream) => {
                    stream.set_nodelay(true)?;
                    stream.set_read_timeout(Some(self.request_timeout))?;
                    stream.set_write_timeout(Some(self.request_timeout))?;
                    let hello = Request::Hello {
                        magic: proto::PROTOCOL_MAGIC,
                        version: proto::PROTOCOL_VERSION,
                        role: self.role,
                        proof: self.proof,
                    };
                    proto::write_frame_sync(&mut stream, &proto::encode(&hello))?;
                    let reply = proto::read_frame_sync(&mut stream).map_err(std::io::Error::other)?;
                    return match proto::decode_reply(&reply) {
                        Ok(Reply::Hello { .. }) => Ok(stream),
                        Ok(Reply::Error(e)) if e.starts_with("access denied") => {
                            Err(std::io::Error::new(ErrorKind::PermissionDenied, e))
                        }
                        Ok(Reply::Error(e)) => Err(std::io::Error::other(e)),
                        other => Err(std::io::Error::other(format!("unexpected hello reply {other:?}"))),
                    };
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// One exchange on the connection to `addr` (opened if needed); returns the reply and when
    /// the request was sent.
    fn exchange(&mut self, addr: &str, frame: &[u8], read_timeout: Duration) -> std::io::Result<(Reply, Instant)> {
        if self.conn.as_ref().is_none_or(|c| c.addr != addr) {
            self.conn = None;
            let stream = self.connect(addr)?;
            self.conn = Some(Conn { addr: addr.to_string(), stream });
        }
        let conn = self.conn.as_mut().expect("connected above");
        conn.stream.set_read_timeout(Some(read_timeout))?;
        let sent_at = Instant::now();
        proto::write_frame_sync(&mut conn.stream, frame)?;
        let payload = proto::read_frame_sync(&mut conn.stream).map_err(std::io::Error::other)?;
        let reply = proto::decode_reply(&payload).map_err(std::io::Error::other)?;
        Ok((reply, sent_at))
    }

    fn call(&mut self, req: &Request, read_timeout: Duration) -> Result<(Reply, Instant), ControlError> {
        if self.addrs.is_empty() {
            return Err(ControlError::Unavailable("no management node address configured".into()));
        }
        let frame = proto::encode(req);
        let deadline = Instant::now() + self.call_timeout + read_timeout.saturating_sub(self.request_timeout);
        let mut last_error = String::from("no attempt made");
        let mut redirects = 0;
        for attempt in 0..ATTEMPTS_MAX {
            if attempt > 0 && Instant::now() >= deadline {
                break;
            }
            let addr = self.pick();
            match self.exchange(&addr, &frame, read_timeout) {
                Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                    // Another mgmd would say the same: the secret is wrong or missing.
                    self.conn = None;
                    return Err(ControlError::Protocol(format!("{addr}: {e}")));
                }
                Err(e) => {
                    last_error = format!("{addr}: {e}");
                    self.conn = None;
                }
                Ok((Reply::NotLeader { leader: Some(leader) }, _)) if leader.addr != addr => {
                    last_error = format!("{addr} is not the leader");
                    self.leader_hint = Some(leader.addr);
                    if redirects > 0 {
                        std::thread::sleep(ELECTION_BACKOFF / 2);
                    }
                    redirects += 1;
                }
                Ok((Reply::NotLeader { .. }, _)) => {
                    last_error = format!("{addr}: no leader yet");
                    self.conn = None; // ask another mgmd next time
                    std::thread::sleep(ELECTION_BACKOFF);
                }
                Ok((Reply::Unavailable(text), _)) => {
                    last_error = format!("{addr}: {text}");
                    std::thread::sleep(ELECTION_BACKOFF);
                }
                Ok((Reply::Error(text), _)) => {
                    self.conn = None;
                    return Err(ControlError::Protocol(format!("{addr}: {text}")));
                }
                Ok(ok) => return Ok(ok),
            }
        }
        Err(ControlError::Unavailable(last_error))
    }
}

/// Watches the cluster map through the management nodes `mgmds` until `stop()`: whenever the
/// set of data nodes that are not serving (failed, or still restarting) changes, `on_down` gets
/// their addresses (`DataNodeSpec::addr`). A native client application hands them to
/// `tern_client::set_down_nodes` (as the API server does), so its connections leave a failed or
/// frozen data node as soon as the cluster declares it failed:
/// `std::thread::spawn(move || watch_down_nodes(mgmds, None, &tern_client::set_down_nodes, &|| false))`
/// (`secret`: the cluster secret, when the mgmds require one).
pub fn watch_down_nodes(
    mgmds: Vec<String>,
    secret: Option<&tern_types::secret::ClusterSecret>,
    on_down: &dyn Fn(Vec<String>),
    stop: &dyn Fn() -> bool,
) {
    watch_cluster(mgmds, secret, on_down, &|_| {}, stop)
}

/// `watch_down_nodes`, also handing every new cluster state to `on_state` (the status page's
/// list of data nodes).
pub fn watch_cluster(
    mgmds: Vec<String>,
    secret: Option<&tern_types::secret::ClusterSecret>,
    on_down: &dyn Fn(Vec<String>),
    on_state: &dyn Fn(&ClusterState),
    stop: &dyn Fn() -> bool,
) {
    let mut client = MgmClient::new(mgmds).with_role(Role::Admin).with_secret(secret);
    client.call_timeout = Duration::from_secs(3);
    let mut known = 0;
    let mut down: Option<Vec<String>> = None;
    while !stop() {
        match client.watch(known, 1_000) {
            Ok(Some(info)) => {
                known = info.state.version;
                let st = &info.state;
                on_state(st);
                let now: Vec<String> = st
                    .config
                    .data_nodes
                    .iter()
                    .filter(|d| st.state_of(d.id) != tern_types::cluster::NodeState::Started)
                    .map(|d| d.addr())
                    .collect();
                if down.as_ref() != Some(&now) {
                    tracing::info!(?now, "data nodes not serving");
                    on_down(now.clone());
                    down = Some(now);
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::debug!("watching the cluster: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}
