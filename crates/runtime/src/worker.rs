//! A worker thread: owns one tc and one ldm (worker 0 also dict and dist), the client connections
//! assigned to it, and an event loop. Performance-critical.
//!
//! Each loop turn: drain the mailbox, read sockets, run every queued signal through its block,
//! fire due timers, then flush: signals for other workers go as one batch per worker, replies are
//! framed into each connection's write buffer and written with one syscall per connection. When
//! idle the worker spins briefly (adaptively: the spin budget grows while spinning finds work and
//! shrinks while it does not) before it parks in `epoll_wait`.

use crate::mailbox::Mailbox;
use crate::peer::PeerLink;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::BTreeMap;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tern_kernel::dict::Dict;
use tern_kernel::dist::Dist;
use tern_kernel::ldm::Ldm;
use tern_kernel::signal::{Addr, Block, ClientId, IoReq, NodeId, Out, Signal};
use tern_kernel::tc::Tc;
use tern_types::cluster::{ClusterState, NodeState};
use tern_wire::{FRAME_HEADER_LEN, Reply, Request, begin_frame, decode_frame, finish_frame};
use tern_wire::{PeerHello, Turn};

pub const LISTENER: Token = Token(0);
pub const WAKER: Token = Token(1);
/// The hosted worker's timer descriptor (`ParkTimer`).
const PARK_TIMER: Token = Token(usize::MAX - 1);
/// Unread bytes buffered per connection before it stops being read (backpressure).
pub const CONN_READ_BUFFER_MAX: usize = 80 * 1024 * 1024;
/// Bytes a connection may send before its first frame proved the cluster secret (a greeting is
/// well under it): a stranger cannot make the node buffer `CONN_READ_BUFFER_MAX`.
const UNAUTHED_READ_MAX: usize = 64 * 1024;
/// Unsent reply bytes per connection before the worker stops reading its requests (a client
/// that does not read its replies cannot make the node buffer without bound).
pub const CONN_WRITE_BUFFER_MAX: usize = 64 * 1024 * 1024;

pub use tern_wire::ReplySink;

/// Hand-offs between workers make them spin only this long after the last client request.
const CLIENT_RECENT_MS: u64 = 50;

/// A client or peer connection handed to a worker: TCP, or shared memory (the Unix socket that
/// tells when the other process is gone, and this side of the rings).
pub enum Accepted {
    Tcp(std::net::TcpStream),
    Shm(std::os::unix::net::UnixStream, Box<tern_shm::Endpoint>),
}

pub enum Inbound {
    Signal(Block, Signal),
    NewConn(Accepted),
    /// A connection moved here by its Hello, with the bytes already read from it.
    AdoptConn(Accepted, Vec<u8>),
    LocalOpen {
        client: ClientId,
        sink: ReplySink,
    },
    LocalRequest {
        client: ClientId,
        req_id: u64,
        req: Request,
    },
    LocalGone {
        client: ClientId,
    },
    Stop,
}

/// State shared by every thread of a data node.
pub struct Shared {
    pub started: AtomicBool,
    /// The newest epoch this node's tcs were given (their EpochCommits) and the newest durable
    /// one (dist's EpochDurable).
    pub current_epoch: AtomicU64,
    pub durable_epoch: AtomicU64,
    pub stopping: AtomicBool,
    /// Workers whose tc has taken `Signal::StopServing` (an orderly stop waits for all of them
    /// before it picks the last epoch to make durable).
    pub stopped_serving: AtomicUsize,
    pub next_client: AtomicU64,
    pub epoch: Instant,
    pub spin_max_us: u64,
    /// How long a worker keeps spinning after it exchanged signals with another worker.
    pub expect_spin_us: u64,
    /// When a worker last received a client request (ms, `now_ms`).
    pub client_seen_ms: AtomicU64,
    pub idle_hook: Option<fn()>,
    /// Where the blocks' requests to the control plane go (the membership thread).
    pub control: Option<Arc<crate::ControlInbox>>,
    /// Whether links to data nodes on this host may use shared memory.
    pub transporter: tern_shm::Transporter,
    /// What every connection's first frame must prove, and what this node proves to others.
    pub cluster_secret: Option<tern_types::secret::ClusterSecret>,
    /// The node's statistics (the workers publish their links there).
    pub stats: Arc<tern_kernel::tc::NodeStats>,
}

impl Shared {
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

/// The blocks a worker runs.
pub struct WorkerBlocks {
    pub tc: Tc,
    pub ldm: Ldm,
    pub dict: Option<Dict>,
    pub dist: Option<Dist>,
}

pub fn worker_of(b: Block) -> usize {
    match b {
        Block::Tc(i) | Block::Ldm(i) => i as usize,
        Block::Dict | Block::Dist => 0,
    }
}

/// A connection's socket: the TCP stream it talks over, or the Unix socket of a shared-memory
/// connection (only watched for end-of-file; the bytes go through `Conn::shm`).
enum Stream {
    Tcp(TcpStream),
    Unix(mio::net::UnixStream),
}

impl Stream {
    fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }

    fn into_accepted(self, shm: Option<Box<tern_shm::Endpoint>>) -> Accepted {
        use std::os::fd::{FromRawFd, IntoRawFd};
        match (self, shm) {
            (Stream::Tcp(s), _) => Accepted::Tcp(into_std(s)),
            // SAFETY: the fd comes from a mio stream we own and give up here.
            (Stream::Unix(s), Some(e)) => {
                Accepted::Shm(unsafe { std::os::unix::net::UnixStream::from_raw_fd(s.into_raw_fd()) }, e)
            }
            (Stream::Unix(_), None) => unreachable!("a Unix stream always has its rings"),
        }
    }
}

impl mio::event::Source for Stream {
    fn register(&mut self, r: &mio::Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.register(r, t, i),
            Stream::Unix(s) => s.register(r, t, i),
        }
    }
    fn reregister(&mut self, r: &mio::Registry, t: Token, i: Interest) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.reregister(r, t, i),
            Stream::Unix(s) => s.reregister(r, t, i),
        }
    }
    fn deregister(&mut self, r: &mio::Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.deregister(r),
            Stream::Unix(s) => s.deregister(r),
        }
    }
}

struct Conn {
    stream: Stream,
    /// A shared-memory connection's rings (its eventfd is registered under the same token).
    shm: Option<Box<tern_shm::Endpoint>>,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    client: ClientId,
    want_write: bool,
    /// Requests decoded so far (a connection may only move to another worker before any).
    requests: u64,
    /// Reading is paused until the client drains its replies.
    paused: bool,
    /// A connection from another data node (after its greeting): frames carry signals.
    peer: Option<(NodeId, u32)>,
    /// Its first frame proved the cluster secret (always true without a secret).
    authed: bool,
    /// Refused: nothing more is read, and it closes once its error reply is written.
    closing: bool,
}

enum ClientEnd {
    Tcp(Token),
    Local(ReplySink),
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct TimerKey(std::cmp::Reverse<(u64, u64)>);

pub struct IoQueue {
    pub q: std::sync::Mutex<VecDeque<(Addr, IoReq)>>,
    pub cv: std::sync::Condvar,
}

pub struct Worker {
    pub index: usize,
    pub blocks: WorkerBlocks,
    pub poll: Poll,
    pub listener: Option<TcpListener>,
    pub mailbox: Arc<Mailbox<Inbound>>,
    pub peers: Arc<Vec<Arc<Mailbox<Inbound>>>>,
    pub io: Arc<IoQueue>,
    pub shared: Arc<Shared>,
    node_id: NodeId,
    cluster: Arc<ClusterState>,
    /// Outgoing connections to other data nodes, and the tokens of their sockets.
    links: BTreeMap<NodeId, PeerLink>,
    link_tokens: HashMap<Token, NodeId>,
    dirty_links: Vec<NodeId>,
    /// Bytes of signals received from each peer on its connections to this worker, and when
    /// the links' figures were last published to the node's statistics.
    received: BTreeMap<NodeId, u64>,
    links_published_ms: u64,
    conns: tern_types::hash::FastMap<Token, Conn>,
    /// The shared-memory connections, polled on every loop turn and while spinning.
    shm_conns: Vec<Token>,
    /// Scratch list of the shared-memory connections parked on (kept for its allocation).
    shm_parked: Vec<Token>,
    clients: tern_types::hash::FastMap<ClientId, ClientEnd>,
    next_token: usize,
    next_conn_worker: usize,
    local: VecDeque<(Block, Signal)>,
    /// Signals blocks sent themselves to go on with a long task (`Out::later`): queued for the
    /// next turn, after the mailbox and the sockets were looked at.
    later: Vec<(Block, Signal)>,
    outboxes: Vec<Vec<Inbound>>,
    timers: BinaryHeap<TimerKey>,
    timer_sigs: HashMap<u64, (Block, Signal)>,
    timer_seq: u64,
    dirty: Vec<Token>,
    inbox: Vec<Inbound>,
    spin_us: u64,
    /// Until when a reply from another worker is likely (this worker just handed it work, or
    /// got work from one): the idle spin lasts at least until then, so a transaction spanning
    /// workers does not pay a sleep and a wake-up on every prepare and commit hop.
    expect_until: Option<Instant>,
    /// A client request arrived in this loop turn (published to `Shared::client_seen_ms`).
    client_seen: bool,
    /// This turn delivered `Signal::StopServing` to the tc (counted in `Shared::stopped_serving`
    /// once the turn ran it).
    stop_serving_seen: bool,
    busy_since_idle: bool,
    last_idle_hook_ms: u64,
    /// A reply went to an in-process client since the hosted driver last asked (its task may
    /// have been woken on this thread).
    replied_local: bool,
    /// The hosted worker's wake-up for its next timer (None: parks in `epoll_wait` with a timeout).
    park_timer: Option<ParkTimer>,
}

/// A timerfd in the worker's epoll set, armed for the next timer when the hosted worker parks:
/// the descriptor the async runtime watches turns readable when a timer is due, so the runtime
/// needs no timer of its own per park (registering one made it wake itself through its eventfd
/// on every idle tick).
struct ParkTimer {
    fd: std::os::fd::OwnedFd,
    /// The worker-clock ms it is armed for (None: disarmed or fired).
    armed: Option<u64>,
}

impl ParkTimer {
    fn new(registry: &mio::Registry) -> io::Result<ParkTimer> {
        use std::os::fd::{AsRawFd, FromRawFd};
        // SAFETY: plain system call; the descriptor returned is ours alone.
        let raw = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor owned by nothing else.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
        registry.register(&mut mio::unix::SourceFd(&fd.as_raw_fd()), PARK_TIMER, Interest::READABLE)?;
        Ok(ParkTimer { fd, armed: None })
    }

    /// Fires at `due` (worker-clock ms; at least 1 ms from `now`); a no-op when armed for it already.
    fn arm(&mut self, due: u64, now: u64) {
        use std::os::fd::AsRawFd;
        if self.armed == Some(due) {
            return;
        }
        let ms = due.saturating_sub(now).max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: (ms / 1000) as libc::time_t,
                tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long,
            },
        };
        // SAFETY: a valid timerfd and itimerspec; the old value is not asked for.
        let r = unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        assert!(r == 0, "arming the worker's timer: {}", io::Error::last_os_error());
        self.armed = Some(due);
    }

    /// It turned readable: take the expiry count (edge-triggered, so it fires again when re-armed).
    fn fired(&mut self) {
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into our buffer; nonblocking (EAGAIN when not expired).
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        self.armed = None;
    }
}

impl Worker {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: usize,
        blocks: WorkerBlocks,
        poll: Poll,
        listener: Option<TcpListener>,
        mailbox: Arc<Mailbox<Inbound>>,
        peers: Arc<Vec<Arc<Mailbox<Inbound>>>>,
        io: Arc<IoQueue>,
        shared: Arc<Shared>,
        cluster: Arc<ClusterState>,
    ) -> Worker {
        let node_id = blocks.tc.node_id();
        let n = peers.len();
        let spin_us = shared.spin_max_us / 4;
        Worker {
            index,
            blocks,
            poll,
            listener,
            mailbox,
            peers,
            io,
            shared,
            node_id,
            cluster,
            links: BTreeMap::new(),
            link_tokens: HashMap::new(),
            dirty_links: Vec::new(),
            received: BTreeMap::new(),
            links_published_ms: 0,
            conns: Default::default(),
            shm_conns: Vec::new(),
            shm_parked: Vec::new(),
            clients: Default::default(),
            next_token: 2,
            next_conn_worker: 0,
            local: VecDeque::new(),
            later: Vec::new(),
            outboxes: (0..n).map(|_| Vec::new()).collect(),
            timers: BinaryHeap::new(),
            timer_sigs: HashMap::new(),
            timer_seq: 0,
            dirty: Vec::new(),
            inbox: Vec::new(),
            spin_us,
            expect_until: None,
            client_seen: false,
            stop_serving_seen: false,
            busy_since_idle: false,
            last_idle_hook_ms: 0,
            replied_local: false,
            park_timer: None,
        }
    }

    pub fn run(mut self) {
        self.register_listener();
        let mut events = Events::with_capacity(256);
        loop {
            match self.turn(&mut events, true) {
                Turn::Stopped => break,
                Turn::Worked => continue,
                Turn::Idle => {}
            }
            if self.spin() {
                continue;
            }
            self.park(&mut events);
        }
        self.finish();
    }

    fn register_listener(&mut self) {
        if let Some(l) = self.listener.as_mut() {
            self.poll.registry().register(l, LISTENER, Interest::READABLE).expect("register listener");
        }
    }

    /// One pass over everything that may have work, without waiting (`poll_io`: look at the
    /// sockets too).
    fn turn(&mut self, events: &mut Events, poll_io: bool) -> Turn {
        let mut worked = self.drain_mailbox();
        if !self.links.is_empty() {
            self.publish_links();
        }
        if self.shared.stopping.load(Ordering::Acquire) {
            return Turn::Stopped;
        }
        if poll_io {
            worked |= self.poll_sockets(events, Some(Duration::ZERO));
        }
        worked |= self.poll_shm();
        if !self.later.is_empty() {
            self.local.extend(self.later.drain(..));
        }
        worked |= self.run_queue();
        if std::mem::take(&mut self.stop_serving_seen) {
            self.shared.stopped_serving.fetch_add(1, Ordering::Release);
        }
        worked |= self.fire_timers();
        self.flush();
        if worked {
            self.busy_since_idle = true;
            Turn::Worked
        } else {
            Turn::Idle
        }
    }

    /// TCP connections close when dropped; in-process ones are told (request id 0), so their
    /// waiting requests fail instead of waiting for a worker that is gone.
    fn finish(&mut self) {
        for end in self.clients.values() {
            if let ClientEnd::Local(sink) = end {
                let e = tern_types::TernError::new(tern_types::ErrorCode::ShuttingDown, "the data node stopped");
                sink(0, tern_wire::Reply::Error(e));
            }
        }
    }

    /// Spins for up to the adaptive budget; true when work turned up.
    fn spin(&mut self) -> bool {
        if self.shared.spin_max_us == 0 || !self.local.is_empty() || !self.later.is_empty() {
            return !self.local.is_empty() || !self.later.is_empty();
        }
        let start = Instant::now();
        let mut budget = Duration::from_micros(self.spin_us);
        if let Some(until) = self.expect_until.take() {
            budget = budget.max(until.saturating_duration_since(start));
        }
        if budget.is_zero() {
            return false;
        }
        let mut iter = 0u32;
        while start.elapsed() < budget {
            iter += 1;
            if !self.mailbox.is_empty() || self.shm_waiting() {
                self.spin_us = grown_spin(self.spin_us, self.shared.spin_max_us);
                return true;
            }
            if iter.is_multiple_of(64) {
                let mut ev = Events::with_capacity(64);
                if self.poll_sockets(&mut ev, Some(Duration::ZERO)) {
                    self.spin_us = grown_spin(self.spin_us, self.shared.spin_max_us);
                    return true;
                }
            }
            std::hint::spin_loop();
        }
        self.spin_us /= 2;
        false
    }

    fn park(&mut self, events: &mut Events) {
        self.idle_hook();
        let timeout = self.park_timeout();
        if self.mailbox.prepare_sleep() {
            if self.park_shm() {
                self.poll_sockets(events, Some(timeout));
            }
            self.unpark_shm();
            self.mailbox.woke();
        }
    }

    /// Publishes this worker's links (`ndbinfo.transporters`) at most once a second.
    fn publish_links(&mut self) {
        let now = self.shared.now_ms();
        if now < self.links_published_ms + 1000 {
            return;
        }
        self.links_published_ms = now;
        let me = self.index as u16;
        let mut all = self.shared.stats.links.lock().unwrap_or_else(|e| e.into_inner());
        for (&node, link) in &self.links {
            all.insert((me, node), link.stat(self.received.get(&node).copied().unwrap_or(0)));
        }
    }

    fn idle_hook(&mut self) {
        if self.busy_since_idle
            && let Some(hook) = self.shared.idle_hook
        {
            let now = self.shared.now_ms();
            if now >= self.last_idle_hook_ms + 100 {
                self.last_idle_hook_ms = now;
                self.busy_since_idle = false;
                hook();
            }
        }
    }

    /// How long a parked worker may sleep: until its next timer, at most 100 ms.
    fn park_timeout(&self) -> Duration {
        let timeout = self.timers.peek().map(|t| {
            let due = t.0.0.0;
            Duration::from_millis(due.saturating_sub(self.shared.now_ms()).max(1))
        });
        timeout.unwrap_or(Duration::from_millis(100)).min(Duration::from_millis(100))
    }

    /// Asks every shared-memory client to wake this worker through its eventfd while it sleeps;
    /// false when one has requests waiting already (do not sleep). (A paused connection is not
    /// read until its client drains its replies, which wakes the worker through the eventfd too.)
    fn park_shm(&mut self) -> bool {
        let mut parked = std::mem::take(&mut self.shm_parked);
        let mut all = true;
        for &t in &self.shm_conns {
            let Some(c) = self.conns.get(&t) else { continue };
            let Some(e) = c.shm.as_ref() else { continue };
            if e.rx.prepare_park() {
                parked.push(t);
            } else if !c.paused {
                all = false;
                break;
            }
        }
        self.shm_parked = parked;
        all
    }

    fn unpark_shm(&mut self) {
        // (A poll may have closed connections: unpark those still here.)
        let mut parked = std::mem::take(&mut self.shm_parked);
        for t in parked.drain(..) {
            if let Some(e) = self.conns.get(&t).and_then(|c| c.shm.as_ref()) {
                e.rx.unpark();
            }
        }
        self.shm_parked = parked;
        if self.spin_us == 0 {
            // With spinning switched off (spin_max_us = 0) it stays off.
            self.spin_us = grown_spin(0, self.shared.spin_max_us);
        }
    }

    /// Another worker is likely to answer within `EXPECT_SPIN_US` (see `expect_until`).
    /// Only while clients are sending requests (within the last `CLIENT_RECENT_MS`): an idle
    /// node's own hand-offs (the epoch protocol) do not make its workers spin.
    fn expect_reply(&mut self) {
        let us = self.shared.expect_spin_us;
        let recent = self.shared.now_ms() <= self.shared.client_seen_ms.load(Ordering::Relaxed) + CLIENT_RECENT_MS;
        if us > 0 && recent {
            self.expect_until = Some(Instant::now() + Duration::from_micros(us));
        }
    }

    fn drain_mailbox(&mut self) -> bool {
        let mut inbox = std::mem::take(&mut self.inbox);
        self.mailbox.drain_into(&mut inbox);
        let worked = !inbox.is_empty();
        if inbox.iter().any(|i| matches!(i, Inbound::Signal(..))) {
            self.expect_reply();
        }
        for item in inbox.drain(..) {
            match item {
                Inbound::Signal(b, s) => {
                    self.stop_serving_seen |= matches!(s, Signal::StopServing);
                    self.local.push_back((b, s))
                }
                Inbound::NewConn(s) => {
                    if let Some(token) = self.add_conn(s, Vec::new()) {
                        // A shared-memory client may have written before its rings were watched.
                        self.read_conn(token);
                    }
                }
                Inbound::AdoptConn(s, pending) => {
                    if let Some(token) = self.add_conn(s, pending) {
                        self.read_conn(token);
                    }
                }
                Inbound::LocalOpen { client, sink } => {
                    self.clients.insert(client, ClientEnd::Local(sink));
                }
                Inbound::LocalRequest { client, req_id, req } => {
                    self.client_seen = true;
                    self.local.push_back((Block::Tc(self.index as u16), Signal::ClientRequest { client, req_id, req }));
                }
                Inbound::LocalGone { client } => {
                    self.clients.remove(&client);
                    self.local.push_back((Block::Tc(self.index as u16), Signal::ClientGone { client }));
                }
                Inbound::Stop => self.shared.stopping.store(true, Ordering::Release),
            }
        }
        self.inbox = inbox;
        worked
    }

    fn add_conn(&mut self, s: Accepted, mut rbuf: Vec<u8>) -> Option<Token> {
        let token = Token(self.next_token);
        self.next_token += 1;
        let (mut stream, shm) = match s {
            Accepted::Tcp(s) => {
                if s.set_nonblocking(true).is_err() || s.set_nodelay(true).is_err() {
                    return None;
                }
                (Stream::Tcp(TcpStream::from_std(s)), None)
            }
            Accepted::Shm(s, e) => {
                if s.set_nonblocking(true).is_err() {
                    return None;
                }
                let fd = e.wake_me.raw_fd();
                if self.poll.registry().register(&mut mio::unix::SourceFd(&fd), token, Interest::READABLE).is_err() {
                    return None;
                }
                self.shm_conns.push(token);
                (Stream::Unix(mio::net::UnixStream::from_std(s)), Some(e))
            }
        };
        if self.poll.registry().register(&mut stream, token, Interest::READABLE).is_err() {
            if let Some(e) = &shm {
                let _ = self.poll.registry().deregister(&mut mio::unix::SourceFd(&e.wake_me.raw_fd()));
                self.shm_conns.retain(|&t| t != token);
            }
            return None;
        }
        let client = self.shared.next_client.fetch_add(1, Ordering::Relaxed);
        self.clients.insert(client, ClientEnd::Tcp(token));
        rbuf.reserve(16 * 1024);
        self.conns.insert(
            token,
            Conn {
                stream,
                shm,
                rbuf,
                wbuf: Vec::new(),
                client,
                want_write: false,
                requests: 0,
                paused: false,
                peer: None,
                authed: self.shared.cluster_secret.is_none(),
                closing: false,
            },
        );
        Some(token)
    }

    /// Whether a shared-memory connection has bytes waiting (or a broken ring to close).
    fn shm_waiting(&self) -> bool {
        self.shm_conns.iter().any(|t| self.conns.get(t).is_some_and(shm_ready))
    }

    /// Reads every shared-memory connection that has bytes waiting.
    fn poll_shm(&mut self) -> bool {
        let mut worked = false;
        for i in 0..self.shm_conns.len() {
            let Some(&t) = self.shm_conns.get(i) else { break };
            if self.conns.get(&t).is_some_and(shm_ready) {
                worked = true;
                self.read_conn(t);
            }
        }
        worked
    }

    /// A shared-memory connection's socket or eventfd fired: end-of-file on the socket means
    /// the client's process is gone (or closed the connection).
    fn shm_event(&mut self, token: Token) -> bool {
        let Some(c) = self.conns.get(&token) else { return false };
        let Some(e) = c.shm.as_ref() else { return true };
        e.wake_me.drain();
        let mut b = [0u8; 64];
        loop {
            // SAFETY: a non-blocking receive into a local buffer from the connection's socket.
            let n = unsafe {
                libc::recv(c.stream.raw_fd(), b.as_mut_ptr() as *mut libc::c_void, b.len(), libc::MSG_DONTWAIT)
            };
            if n > 0 {
                continue; // nothing is sent on the socket; ignore stray bytes
            }
            if n == 0 {
                return false;
            }
            return match io::Error::last_os_error().kind() {
                io::ErrorKind::WouldBlock => true,
                io::ErrorKind::Interrupted => continue,
                _ => false,
            };
        }
    }

    fn poll_sockets(&mut self, events: &mut Events, timeout: Option<Duration>) -> bool {
        if let Err(e) = self.poll.poll(events, timeout)
            && e.kind() != io::ErrorKind::Interrupted
        {
            panic!("worker {}: poll failed: {e}", self.index);
        }
        let mut worked = false;
        let ready: Vec<(Token, bool, bool)> = events
            .iter()
            .map(|e| (e.token(), e.is_readable() || e.is_read_closed() || e.is_error(), e.is_writable()))
            .collect();
        for (token, readable, writable) in ready {
            worked = true;
            match token {
                LISTENER => self.accept(),
                WAKER => {}
                PARK_TIMER => {
                    if let Some(t) = self.park_timer.as_mut() {
                        t.fired();
                    }
                }
                t if self.link_tokens.contains_key(&t) => {
                    let node = self.link_tokens[&t];
                    let poison = self.cluster.state_of(node).in_chains();
                    let link = self.links.get_mut(&node).expect("a link");
                    if readable && link.peer_closed() {
                        tracing::warn!(node, "the connection to data node {node} closed");
                        if link.broken(self.poll.registry(), poison) && poison {
                            suspect(&self.shared.control, node);
                        }
                    }
                    if writable || link.has_output() {
                        self.dirty_links.push(node);
                    }
                }
                t => {
                    let shm = self.conns.get(&t).is_some_and(|c| c.shm.is_some());
                    if shm && !self.shm_event(t) {
                        self.close_conn(t);
                        continue;
                    }
                    if writable || (shm && self.conns.get(&t).is_some_and(|c| !c.wbuf.is_empty())) {
                        self.dirty.push(t);
                    }
                    if readable {
                        self.read_conn(t);
                    }
                }
            }
        }
        worked
    }

    fn accept(&mut self) {
        loop {
            let Some(l) = self.listener.as_ref() else {
                return;
            };
            match l.accept() {
                Ok((s, _)) => {
                    // Spread connections over workers round-robin.
                    let w = self.next_conn_worker % self.peers.len();
                    self.next_conn_worker += 1;
                    let std_stream = into_std(s);
                    if w == self.index {
                        self.add_conn(Accepted::Tcp(std_stream), Vec::new());
                    } else {
                        self.peers[w].push(Inbound::NewConn(Accepted::Tcp(std_stream)));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    return;
                }
            }
        }
    }

    fn read_conn(&mut self, token: Token) {
        let tc = Block::Tc(self.index as u16);
        let Some(conn) = self.conns.get_mut(&token) else {
            return;
        };
        if conn.wbuf.len() >= CONN_WRITE_BUFFER_MAX {
            conn.paused = true;
            return;
        }
        if conn.closing {
            return;
        }
        let mut closed = false;
        let read_max = if conn.authed { CONN_READ_BUFFER_MAX } else { UNAUTHED_READ_MAX };
        if let Some(e) = conn.shm.as_mut() {
            let room = read_max.saturating_sub(conn.rbuf.len());
            if let Err(err) = e.recv_into(&mut conn.rbuf, room) {
                tracing::warn!("closing a shared-memory connection: {err}");
                closed = true;
            }
        }
        if conn.shm.is_none() && recv_socket(conn, read_max) {
            closed = true;
        }
        // Decode every complete frame.
        let mut at = 0;
        let mut protocol_error = None;
        let mut migrate = None;
        let workers = self.peers.len();
        let cluster = &self.cluster;
        let believed = |p: (NodeId, u32)| believed(cluster, p);
        let secret = self.shared.cluster_secret.as_ref();
        let mut peer_bytes = 0u64;
        loop {
            match decode_frame(&conn.rbuf[at..]) {
                Ok(Some((payload, _))) if !conn.authed => {
                    // The first frame must prove the cluster secret: a client's Hello or a
                    // peer's greeting carrying the proof.
                    match secret_refusal(payload, secret) {
                        // The frame is handled below as usual.
                        None => conn.authed = true,
                        Some((req_id, err)) => {
                            let at = begin_frame(&mut conn.wbuf);
                            Reply::Error(err).encode(req_id, &mut conn.wbuf);
                            finish_frame(&mut conn.wbuf, at);
                            conn.closing = true;
                            conn.rbuf.clear();
                            self.dirty.push(token);
                            return;
                        }
                    }
                }
                Ok(Some((_, n))) if conn.peer.is_some_and(|p| !believed(p)) => {
                    at += n;
                }
                Ok(Some((payload, n))) if conn.peer.is_some() => {
                    peer_bytes += n as u64;
                    let (node, index) = (self.node_id, self.index);
                    if let Err(e) = route_peer_signal(node, index, &mut self.local, &mut self.outboxes, payload) {
                        protocol_error = Some(e);
                        break;
                    }
                    at += n;
                }
                Ok(Some((payload, n))) if conn.requests == 0 && PeerHello::decode(payload).is_some() => {
                    let hello = PeerHello::decode(payload).expect("checked");
                    let own = cluster.nodes.get(&self.node_id).map_or(0, |s| s.incarnation);
                    if hello.target_incarnation < own {
                        // Meant for this node's previous life (the sender has not learned of the
                        // restart yet): nothing on this connection may act here.
                        tracing::debug!(node = hello.node, "refusing a connection meant for an earlier incarnation");
                        closed = true;
                        break;
                    }
                    if (hello.worker as usize) != self.index && (hello.worker as usize) < workers {
                        migrate = Some(hello.worker as usize);
                        break;
                    }
                    conn.peer = Some((hello.node, hello.incarnation));
                    conn.requests += 1;
                    at += n;
                }
                Ok(Some((payload, n))) => {
                    match Request::decode(payload) {
                        Ok((_, Request::Hello { worker: Some(w), .. }))
                            if conn.requests == 0 && (w as usize) != self.index && (w as usize) < workers =>
                        {
                            // Distribution awareness: serve this client from the worker it asked for.
                            migrate = Some(w as usize);
                            break;
                        }
                        Ok((req_id, req)) => {
                            conn.requests += 1;
                            self.client_seen = true;
                            self.local.push_back((tc, Signal::ClientRequest { client: conn.client, req_id, req }))
                        }
                        Err(e) if payload.len() >= 9 => {
                            // A well-framed but malformed request: answer it, keep the connection.
                            let req_id = u64::from_le_bytes(payload[1..9].try_into().expect("8 bytes"));
                            let err = tern_types::TernError::new(
                                tern_types::ErrorCode::InvalidRequest,
                                format!("malformed request: {e}"),
                            );
                            let at = begin_frame(&mut conn.wbuf);
                            Reply::Error(err).encode(req_id, &mut conn.wbuf);
                            finish_frame(&mut conn.wbuf, at);
                            self.dirty.push(token);
                        }
                        Err(e) => {
                            protocol_error = Some(e.to_string());
                            break;
                        }
                    }
                    at += n;
                }
                Ok(None) => break,
                Err(e) => {
                    protocol_error = Some(e.to_string());
                    break;
                }
            }
        }
        if !conn.authed && conn.rbuf.len() >= UNAUTHED_READ_MAX && protocol_error.is_none() {
            protocol_error = Some("a connection's first frame is too large for a greeting".into());
        }
        conn.rbuf.drain(..at);
        let peer = conn.peer;
        self.after_read(
            token,
            peer.filter(|_| peer_bytes > 0).map(|(node, _)| (node, peer_bytes)),
            migrate,
            protocol_error,
            closed,
        );
    }

    /// What a read of connection `token` leads to: bytes counted for the peer they came from,
    /// the connection handed to the worker it asked for, or closed (after a protocol error).
    fn after_read(
        &mut self,
        token: Token,
        received: Option<(NodeId, u64)>,
        migrate: Option<usize>,
        protocol_error: Option<String>,
        mut closed: bool,
    ) {
        if let Some((node, bytes)) = received {
            *self.received.entry(node).or_default() += bytes;
        }
        if let Some(w) = migrate {
            let mut c = self.conns.remove(&token).expect("present");
            self.forget_stream(token, &mut c);
            self.clients.remove(&c.client);
            self.peers[w].push(Inbound::AdoptConn(c.stream.into_accepted(c.shm), c.rbuf));
            return;
        }
        if let Some(e) = protocol_error {
            tracing::warn!("closing client connection after a protocol error: {e}");
            closed = true;
        }
        if closed {
            self.close_conn(token);
        }
    }

    /// Stops watching a connection's socket (and eventfd).
    fn forget_stream(&mut self, token: Token, c: &mut Conn) {
        let _ = self.poll.registry().deregister(&mut c.stream);
        if let Some(e) = &c.shm {
            let _ = self.poll.registry().deregister(&mut mio::unix::SourceFd(&e.wake_me.raw_fd()));
            self.shm_conns.retain(|&t| t != token);
        }
    }

    fn close_conn(&mut self, token: Token) {
        if let Some(mut c) = self.conns.remove(&token) {
            self.forget_stream(token, &mut c);
            self.clients.remove(&c.client);
            if let Some((node, _)) = c.peer {
                tracing::warn!(node, "the connection from data node {node} closed");
            } else {
                self.local.push_back((Block::Tc(self.index as u16), Signal::ClientGone { client: c.client }));
            }
        }
    }

    /// Frames a signal for a block of another data node into the link to that node.
    fn send_peer(&mut self, to: Addr, sig: Signal) {
        let link = match self.links.entry(to.node) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => {
                let Some(spec) = self.cluster.config.data_node(to.node) else {
                    tracing::error!(node = to.node, "a signal for a data node that is not in the cluster");
                    return;
                };
                let token = Token(self.next_token);
                self.next_token += 1;
                self.link_tokens.insert(token, to.node);
                v.insert(PeerLink::new(to.node, &spec.addr(), token, self.shared.transporter))
            }
        };
        if !link.push(to, &sig) {
            if !link.poisoned {
                tracing::warn!(node = to.node, "the link to data node {} is full; signal dropped", to.node);
            } else if self.cluster.state_of(to.node).in_chains() {
                // Still poisoned, and the map still has the node: the suspicion was not acted
                // on (it reached the management nodes while the node was not yet in the
                // chains, or they could not decide then). Report it again, at most every second.
                let now = self.shared.now_ms();
                if now >= link.suspected_ms + SUSPECT_AGAIN_MS {
                    link.suspected_ms = now;
                    suspect(&self.shared.control, to.node);
                }
            }
        }
        self.dirty_links.push(to.node);
    }

    /// A new cluster map passes through: links to nodes that left the chains drop what they
    /// hold (nothing more will be sent to them until they rejoin).
    fn on_cluster_map(&mut self, state: &Arc<ClusterState>) {
        if state.version <= self.cluster.version {
            return;
        }
        let old = std::mem::replace(&mut self.cluster, state.clone());
        for (&node, link) in self.links.iter_mut() {
            // Failed, or restarted since (a new incarnation): what was queued was for the old one.
            let inc = |s: &ClusterState| s.nodes.get(&node).map(|n| n.incarnation);
            if (old.state_of(node) != NodeState::Down && state.state_of(node) == NodeState::Down)
                || inc(&old) != inc(state)
            {
                link.reset(self.poll.registry());
            }
        }
    }

    fn block_handle(&mut self, to: Block, sig: Signal, out: &mut Out) {
        if let Signal::ClusterMap { state } = &sig {
            let state = state.clone();
            self.on_cluster_map(&state);
        }
        let now = self.shared.now_ms();
        match to {
            Block::Tc(_) => self.blocks.tc.handle(now, sig, out),
            Block::Ldm(_) => self.blocks.ldm.handle(now, sig, out),
            Block::Dict => self.blocks.dict.as_mut().expect("dict lives on worker 0").handle(now, sig, out),
            Block::Dist => self.blocks.dist.as_mut().expect("dist lives on worker 0").handle(now, sig, out),
        }
    }

    fn run_queue(&mut self) -> bool {
        if self.local.is_empty() {
            return false;
        }
        let mut out = Out::default();
        while let Some((to, sig)) = self.local.pop_front() {
            if let (Block::Tc(_), Signal::EpochCommit { epoch, .. }) = (to, &sig) {
                // The epochs this node's tcs give out, whichever node's dist runs them (the
                // master's own tcs receive its EpochCommit here too; an orderly stop waits until
                // the newest is durable).
                self.shared.current_epoch.fetch_max(*epoch, Ordering::AcqRel);
            }
            self.block_handle(to, sig, &mut out);
            self.route(&mut out);
        }
        true
    }

    fn route(&mut self, out: &mut Out) {
        for req in out.control.drain(..) {
            match (&self.shared.control, req) {
                (Some(inbox), req) => inbox.push(req),
                (None, tern_kernel::signal::ControlReq::Catalog(c)) => {
                    // One data node without management nodes: its own catalog is the catalog.
                    let dict = Addr::new(self.node_id, Block::Dict);
                    out.signals.push((dict, Signal::CatalogStored { version: c.version }));
                }
                (None, req) => tracing::debug!(?req, "no control plane: request dropped"),
            }
        }
        for (to, sig) in out.later.drain(..) {
            if to.node == self.node_id && worker_of(to.block) == self.index {
                self.later.push((to.block, sig));
            } else {
                out.signals.push((to, sig));
            }
        }
        for (to, sig) in out.signals.drain(..) {
            match sig {
                Signal::NodeStarted { epoch, durable_epoch } => {
                    self.shared.current_epoch.fetch_max(epoch, Ordering::AcqRel);
                    self.shared.durable_epoch.fetch_max(durable_epoch, Ordering::AcqRel);
                    self.shared.started.store(true, Ordering::Release);
                }
                Signal::EpochDurable { epoch } => {
                    self.shared.durable_epoch.fetch_max(epoch, Ordering::AcqRel);
                }
                _ => {}
            }
            if to.node != self.node_id {
                self.send_peer(to, sig);
                continue;
            }
            let w = worker_of(to.block);
            if w == self.index {
                self.local.push_back((to.block, sig));
            } else {
                self.outboxes[w].push(Inbound::Signal(to.block, sig));
            }
        }
        for (client, req_id, reply) in out.replies.drain(..) {
            self.reply(client, req_id, reply);
        }
        if !out.io.is_empty() {
            let mut q = self.io.q.lock().expect("io queue");
            q.extend(out.io.drain(..));
            self.io.cv.notify_one();
        }
        for (delay, to, sig) in out.timers.drain(..) {
            self.timer_seq += 1;
            let due = timer_due(self.shared.now_ms(), delay);
            self.timers.push(TimerKey(std::cmp::Reverse((due, self.timer_seq))));
            self.timer_sigs.insert(self.timer_seq, (to.block, sig));
        }
    }

    fn reply(&mut self, client: ClientId, req_id: u64, mut reply: Reply) {
        if let Reply::Status(st) = &mut reply {
            // The node's epochs, not one tc's view: the tcs learn a new epoch at slightly
            // different times, and a client may ask a tc that lags the one that answered its
            // durable commit (the published values lead every tc's).
            st.current_epoch = st.current_epoch.max(self.shared.current_epoch.load(Ordering::Acquire));
            st.durable_epoch = st.durable_epoch.max(self.shared.durable_epoch.load(Ordering::Acquire));
        }
        match self.clients.get(&client) {
            Some(ClientEnd::Tcp(token)) => {
                let token = *token;
                if let Some(c) = self.conns.get_mut(&token) {
                    let at = begin_frame(&mut c.wbuf);
                    reply.encode(req_id, &mut c.wbuf);
                    if c.wbuf.len() - at - FRAME_HEADER_LEN > tern_wire::FRAME_PAYLOAD_MAX {
                        c.wbuf.truncate(at);
                        let e = tern_types::TernError::new(
                            tern_types::ErrorCode::TooLarge,
                            "reply larger than the frame limit",
                        );
                        let at = begin_frame(&mut c.wbuf);
                        Reply::Error(e).encode(req_id, &mut c.wbuf);
                        finish_frame(&mut c.wbuf, at);
                    } else {
                        finish_frame(&mut c.wbuf, at);
                    }
                    self.dirty.push(token);
                }
            }
            Some(ClientEnd::Local(sink)) => {
                self.replied_local = true;
                sink(req_id, reply)
            }
            None => {} // the client went away
        }
    }

    fn fire_timers(&mut self) -> bool {
        let now = self.shared.now_ms();
        let mut fired = false;
        while let Some(t) = self.timers.peek() {
            let (due, seq) = t.0.0;
            if due > now {
                break;
            }
            self.timers.pop();
            if let Some((b, s)) = self.timer_sigs.remove(&seq) {
                self.local.push_back((b, s));
                fired = true;
            }
        }
        if fired {
            self.run_queue();
        }
        fired
    }

    fn flush(&mut self) {
        if std::mem::take(&mut self.client_seen) {
            self.shared.client_seen_ms.store(self.shared.now_ms(), Ordering::Relaxed);
        }
        let mut handed = false;
        for (w, items) in self.outboxes.iter_mut().enumerate() {
            if !items.is_empty() {
                handed = true;
                self.peers[w].push_all(items);
            }
        }
        if handed {
            self.expect_reply();
        }
        if !self.dirty_links.is_empty() {
            let mut dirty = std::mem::take(&mut self.dirty_links);
            dirty.sort_unstable();
            dirty.dedup();
            let incarnation = self.cluster.nodes.get(&self.node_id).map_or(0, |s| s.incarnation);
            let now = self.shared.now_ms();
            for node in dirty.drain(..) {
                let target_incarnation = self.cluster.nodes.get(&node).map_or(0, |s| s.incarnation);
                let hello = PeerHello {
                    node: self.node_id,
                    worker: self.index as u16,
                    incarnation,
                    target_incarnation,
                    proof: self.shared.cluster_secret.as_ref().map(|s| s.proof()),
                };
                let poison = self.cluster.state_of(node).in_chains();
                let link = self.links.get_mut(&node).expect("a link");
                if !link.flush(self.poll.registry(), hello, now, poison) {
                    tracing::warn!(node, "the connection to data node {node} broke; unsent signals dropped");
                    if poison {
                        suspect(&self.shared.control, node);
                    }
                }
                if link.has_output() {
                    // Not connected yet, or the socket is full: try again on the next turn.
                    self.dirty_links.push(node);
                }
            }
        }
        let mut dirty = std::mem::take(&mut self.dirty);
        let mut resume = Vec::new();
        dirty.sort_unstable();
        dirty.dedup();
        for token in dirty.drain(..) {
            let Some(c) = self.conns.get_mut(&token) else {
                continue;
            };
            let mut failed = false;
            if let Some(e) = c.shm.as_mut() {
                let mut written = 0;
                while written < c.wbuf.len() {
                    match e.send(&c.wbuf[written..]) {
                        Ok(0) if e.tx.prepare_wait() => break, // the client wakes us when it has read
                        Ok(n) => written += n,
                        Err(err) => {
                            tracing::warn!("closing a shared-memory connection: {err}");
                            failed = true;
                            break;
                        }
                    }
                }
                c.wbuf.drain(..written);
            }
            while c.shm.is_none() && !c.wbuf.is_empty() {
                let Stream::Tcp(stream) = &mut c.stream else { unreachable!("TCP") };
                match stream.write(&c.wbuf) {
                    Ok(0) => {
                        failed = true;
                        break;
                    }
                    Ok(n) => {
                        c.wbuf.drain(..n);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            if failed || (c.closing && c.wbuf.is_empty()) {
                self.close_conn(token);
                continue;
            }
            let want = !c.wbuf.is_empty();
            if c.paused && c.wbuf.len() < CONN_WRITE_BUFFER_MAX / 2 {
                c.paused = false;
                resume.push(token);
            }
            if want != c.want_write && c.shm.is_none() {
                let interest = if want { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
                let _ = self.poll.registry().reregister(&mut c.stream, token, interest);
                c.want_write = want;
            }
        }
        self.dirty = dirty;
        for token in resume {
            self.read_conn(token);
        }
    }
}

/// Worker 0 driven by an async runtime on its thread (see `tern_wire::HostedWorker`): requests
/// and replies between it and the front-end tasks there cross no thread. It does not spin: its
/// thread's other tasks need the time (the driver's park hook spins instead).
pub struct HostedWorker {
    w: Worker,
    events: Events,
}

impl HostedWorker {
    pub(crate) fn new(mut w: Worker) -> HostedWorker {
        w.register_listener();
        // Without it the driver waits with a runtime timer instead (`park`).
        w.park_timer = ParkTimer::new(w.poll.registry())
            .map_err(|e| tracing::warn!("worker timer descriptor: {e}; parking with the runtime's timer"))
            .ok();
        HostedWorker { w, events: Events::with_capacity(256) }
    }
}

impl tern_wire::HostedWorker for HostedWorker {
    fn bind_thread(&self) {
        self.w.mailbox.set_host_thread();
    }

    fn fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        self.w.poll.as_raw_fd()
    }

    fn spin_max_us(&self) -> u64 {
        self.w.shared.spin_max_us
    }

    fn turn(&mut self, io: bool) -> Turn {
        self.w.turn(&mut self.events, io)
    }

    fn replied_to_tasks(&mut self) -> bool {
        std::mem::take(&mut self.w.replied_local)
    }

    fn park(&mut self, waker: &std::task::Waker) -> Option<Duration> {
        self.w.idle_hook();
        let timeout = self.w.park_timeout();
        self.w.mailbox.park_hosted(waker);
        if !self.w.mailbox.is_empty() {
            return None;
        }
        if !self.w.park_shm() {
            self.unpark();
            return None;
        }
        if let Some(t) = self.w.park_timer.as_mut() {
            let now = self.w.shared.now_ms();
            t.arm(now + timeout.as_millis() as u64, now);
            return Some(Duration::MAX);
        }
        Some(timeout)
    }

    fn unpark(&mut self) {
        self.w.unpark_shm();
        self.w.mailbox.woke();
    }

    fn probe(&self) -> Arc<dyn tern_wire::MailProbe> {
        Arc::new(MailProbe(self.w.mailbox.clone()))
    }

    fn finish(mut self: Box<Self>) {
        self.w.finish();
    }
}

struct MailProbe(Arc<Mailbox<Inbound>>);

impl tern_wire::MailProbe for MailProbe {
    fn waiting(&self) -> bool {
        !self.0.is_empty()
    }

    fn kick(&self) -> bool {
        self.0.kick_hosted()
    }

    fn arm(&self) -> bool {
        self.0.arm_hosted()
    }
}

/// A shared-memory connection with requests to read now.
fn shm_ready(c: &Conn) -> bool {
    !c.paused
        && c.rbuf.len() < CONN_READ_BUFFER_MAX
        && c.shm.as_ref().is_some_and(|e| e.rx.available().map_or(true, |n| n > 0))
}

fn into_std(s: TcpStream) -> std::net::TcpStream {
    use std::os::fd::{FromRawFd, IntoRawFd};
    // SAFETY: the fd comes from a mio stream we own and give up here.
    unsafe { std::net::TcpStream::from_raw_fd(s.into_raw_fd()) }
}

/// How often a poisoned link's peer is reported again while signals for it are dropped.
const SUSPECT_AGAIN_MS: u64 = 1000;

/// A link to a node in the write chains broke after carrying signals: the control plane decides
/// which of the two fails (the link drops everything for it until then).
fn suspect(control: &Option<Arc<crate::ControlInbox>>, node: NodeId) {
    tracing::warn!(node, "signals to data node {node} may be lost: reporting it to the management nodes");
    if let Some(c) = control {
        c.push(tern_kernel::signal::ControlReq::Suspect(node));
    }
}

/// Periodic timers of at least this many ms fire on a shared grid of this step (those of at
/// least twice it on a grid of twice the step), so a worker's blocks' ticks (tc, ldm, dist) come
/// due together and cost one wake-up instead of one each.
const TIMER_GRID_MS: u64 = 50;

/// When a timer armed at `now` for `delay` ms fires: timers of `TIMER_GRID_MS` or more go to
/// the nearest point of their grid (never earlier than half a step before, never at or before
/// `now`), so a tick re-armed on firing keeps its period and its phase; shorter ones are exact.
fn timer_due(now: u64, delay: u64) -> u64 {
    let exact = now + delay;
    if delay < TIMER_GRID_MS {
        return exact;
    }
    let grid = if delay >= 2 * TIMER_GRID_MS { 2 * TIMER_GRID_MS } else { TIMER_GRID_MS };
    let rounded = (exact + grid / 2) / grid * grid;
    let due = rounded.max(now + 1);
    debug_assert!(due + grid / 2 >= exact && due <= exact + grid / 2);
    due
}

/// The next spin budget after spinning found work: doubled, at least 1 µs, never above `max`
/// (so `max` = 0 keeps spinning off).
fn grown_spin(cur: u64, max: u64) -> u64 {
    (cur * 2).max(1).min(max)
}

/// Whether signals of `(node, incarnation)` count: not of an incarnation the map counts as
/// failed, nor older than the map's (a process that was declared dead and woke up: its
/// transactions were taken over). A newer incarnation than the map's is a restarted node whose
/// map reached it first.
fn believed(cluster: &ClusterState, (node, inc): (NodeId, u32)) -> bool {
    cluster
        .nodes
        .get(&node)
        .is_some_and(|s| inc > s.incarnation || (inc == s.incarnation && s.state != NodeState::Down))
}

/// A signal from a peer data node, to the block it names on this node: queued on this worker
/// or passed to the block's worker. Err: the frame is not a signal for this node (the connection
/// closes).
fn route_peer_signal(
    node: NodeId,
    index: usize,
    local: &mut VecDeque<(Block, Signal)>,
    outboxes: &mut [Vec<Inbound>],
    payload: &[u8],
) -> Result<(), String> {
    match tern_kernel::codec::decode_signal(payload) {
        Ok((to, sig)) if to.node == node && sig.is_local_only() => {
            // A peer cannot start, time or complete disk work for this node.
            tern_kernel::signal::drop_unexpected(to, "node-to-node port", &sig);
        }
        Ok((to, sig)) if to.node == node => {
            let w = worker_of(to.block);
            if w == index {
                local.push_back((to.block, sig));
            } else {
                outboxes[w].push(Inbound::Signal(to.block, sig));
            }
        }
        Ok((to, _)) => return Err(format!("a peer sent a signal for node {}", to.node)),
        Err(e) => return Err(format!("undecodable signal from a peer: {e}")),
    }
    Ok(())
}

/// Reads what the connection's socket holds into its read buffer, up to `read_max` bytes
/// buffered; true when the peer closed or the socket failed.
fn recv_socket(conn: &mut Conn, read_max: usize) -> bool {
    loop {
        if conn.rbuf.len() >= read_max {
            break;
        }
        let len = conn.rbuf.len();
        if conn.rbuf.capacity() - len < 16 * 1024 {
            conn.rbuf.reserve(64 * 1024);
        }
        // Read into the spare capacity (no zeroing of the buffer on every read).
        let spare = conn.rbuf.spare_capacity_mut();
        let room = spare.len();
        // SAFETY: receives into the vector's spare capacity, at most its length, from the
        // connection's own socket.
        let n = unsafe { libc::recv(conn.stream.raw_fd(), spare.as_mut_ptr() as *mut libc::c_void, room, 0) };
        if n == 0 {
            return true;
        }
        if n < 0 {
            match io::Error::last_os_error().kind() {
                io::ErrorKind::WouldBlock => break,
                io::ErrorKind::Interrupted => continue,
                _ => return true,
            }
        }
        // SAFETY: recv initialised the first n spare bytes.
        unsafe { conn.rbuf.set_len(len + n as usize) };
        if (n as usize) < room {
            // The socket is drained: epoll (edge-triggered) reports data that arrives later,
            // so the `recv` that would only say EAGAIN is skipped.
            break;
        }
    }
    false
}

/// None when a connection's first frame proves the cluster secret (a client's Hello or a peer's
/// greeting carrying the proof), else the refusal to answer it with (request id, error).
fn secret_refusal(
    payload: &[u8],
    secret: Option<&tern_types::secret::ClusterSecret>,
) -> Option<(u64, tern_types::TernError)> {
    let proof = match PeerHello::decode(payload) {
        Some(h) => h.proof,
        None => match Request::decode(payload) {
            Ok((_, Request::Hello { proof, .. })) => proof,
            _ => None,
        },
    };
    if proof.is_some_and(|p| secret.is_some_and(|s| s.verify(&p))) {
        return None;
    }
    let req_id = payload.get(1..9).map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    let why = if proof.is_some() { "a wrong cluster secret" } else { "no cluster secret" };
    tracing::warn!("refusing a connection with {why}");
    let err = tern_types::TernError::new(
        tern_types::ErrorCode::AccessDenied,
        format!(
            "access denied: this data node requires the cluster secret and the connection \
             presented {why} (set {} to the secret's file)",
            tern_wire::SECRET_FILE_ENV
        ),
    );
    Some((req_id, err))
}

#[cfg(test)]
mod spin_tests {
    use super::grown_spin;

    #[test]
    fn long_timers_share_a_grid_and_keep_their_period() {
        use super::{TIMER_GRID_MS, timer_due};
        // Short delays are exact.
        assert_eq!(timer_due(1_003, 1), 1_004);
        assert_eq!(timer_due(1_003, 49), 1_052);
        // Ticks of 50 and 100 ms armed at different moments land on the same grid points, and
        // ticks of 100 ms or more on every second one.
        assert_eq!(timer_due(1_003, 100), 1_100);
        assert_eq!(timer_due(1_049, 100), 1_100);
        assert_eq!(timer_due(1_051, 100), 1_200);
        assert_eq!(timer_due(1_021, 50), 1_050);
        assert_eq!(timer_due(1_030, 50), 1_100);
        assert_eq!(timer_due(1_021, 200), 1_200);
        // Fired on a grid point (or a little late), a re-armed tick keeps its period.
        let mut t = timer_due(1_003, 100);
        for late in [0, 3, 20, 1, 0] {
            let next = timer_due(t + late, 100);
            assert_eq!(next - t, 100);
            assert_eq!(next % (2 * TIMER_GRID_MS), 0);
            t = next;
        }
    }

    #[test]
    fn spin_budget_grows_within_its_limit() {
        assert_eq!(grown_spin(0, 0), 0);
        assert_eq!(grown_spin(1, 0), 0);
        assert_eq!(grown_spin(0, 50), 1);
        assert_eq!(grown_spin(4, 50), 8);
        assert_eq!(grown_spin(40, 50), 50);
    }
}
