//! A connection to one data node: request ids, in-flight reply slots, and the two transporters
//! (TCP and in-process). Performance-critical.
//!
//! Sending batches across concurrent callers: a caller appends its framed request to a shared
//! buffer; if no one is writing it becomes the writer and writes everything queued, again and
//! again while others keep appending. So many callers' requests leave in one `write`.
//! Receiving: one reader thread decodes reply frames and completes each request's slot, waking a
//! waiting thread or async task.

use std::collections::HashMap;
use std::future::Future;
use std::io::Write;
use std::net::TcpStream;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tern_types::{ErrorCode, TernError};
use tern_wire::{LocalTransport, Reply, Request, begin_frame, decode_frame, finish_frame};

thread_local! {
    /// Whether `Conn::request` on this thread queues instead of writing at once.
    static DEFER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Connections with requests this thread queued and has not flushed.
    static QUEUED: std::cell::RefCell<Vec<Arc<Conn>>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Requests queued since the last flush, and when the first of them was.
    static QUEUED_SINCE: std::cell::Cell<(u32, Option<Instant>)> = const { std::cell::Cell::new((0, None)) };
}

/// A worker that keeps finding work may not park for a while: past this many queued requests, or
/// this long since the first, a new request flushes the queue itself.
const DEFER_MAX_REQUESTS: u32 = 64;
const DEFER_MAX_WAIT: Duration = Duration::from_micros(200);

/// Makes `Conn::request` on this thread queue its requests until `flush_deferred` (for executor
/// threads that call `flush_deferred` before they park, e.g. from tokio's `on_thread_park`).
pub fn set_defer_sends(on: bool) {
    DEFER.with(|d| d.set(on));
}

/// Sends every request this thread queued.
pub fn flush_deferred() {
    QUEUED_SINCE.with(|s| s.set((0, None)));
    let conns = QUEUED.with(|q| std::mem::take(&mut *q.borrow_mut()));
    for c in conns {
        c.flush();
    }
}

/// Requests in flight per connection; more wait for a free slot (backpressure).
pub const IN_FLIGHT_MAX: usize = 65_536;

#[derive(Default)]
struct SlotState {
    reply: Option<Result<Reply, TernError>>,
    waker: Option<Waker>,
    thread: Option<std::thread::Thread>,
}

/// Where one request's reply lands.
#[derive(Default)]
pub struct Slot {
    ready: AtomicBool,
    state: Mutex<SlotState>,
    /// When the request was sent (for the connection's reply-time average).
    sent_at: Option<Instant>,
}

impl Slot {
    fn complete(&self, r: Result<Reply, TernError>) {
        let (waker, thread) = {
            let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if s.reply.is_some() || self.ready.load(Ordering::Acquire) {
                return;
            }
            s.reply = Some(r);
            self.ready.store(true, Ordering::Release);
            (s.waker.take(), s.thread.take())
        };
        if let Some(w) = waker {
            w.wake();
        }
        if let Some(t) = thread {
            t.unpark();
        }
    }

    fn take(&self) -> Option<Result<Reply, TernError>> {
        if !self.ready.load(Ordering::Acquire) {
            return None;
        }
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).reply.take()
    }

    /// Blocks the calling thread: spins briefly (a loopback round trip is ~15 µs), reading the
    /// socket itself when it can, then parks.
    pub fn wait(&self, conn: &Conn, timeout: Duration) -> Result<Reply, TernError> {
        if hosts_worker() {
            return Err(TernError::new(
                ErrorCode::Internal,
                "a blocking data-node request on the thread that runs the data node's worker",
            ));
        }
        let start = Instant::now();
        while start.elapsed() < Duration::from_micros(40) {
            if let Some(r) = self.take() {
                return r;
            }
            conn.help_read();
        }
        // Without a reader thread (a runtime task reads, and the runtime may be busy) keep
        // reading for ourselves between short naps.
        let nap = if conn.reader_thread.load(Ordering::Relaxed) {
            Duration::from_millis(100)
        } else {
            Duration::from_millis(1)
        };
        loop {
            conn.help_read();
            {
                let mut s = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if let Some(r) = s.reply.take() {
                    return r;
                }
                s.thread = Some(std::thread::current());
            }
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(TernError::new(ErrorCode::UnknownResult, "no reply from the data node in time"));
            }
            std::thread::park_timeout(left.min(nap));
        }
    }
}

/// A future for a reply.
pub struct ReplyFuture {
    slot: Arc<Slot>,
    conn: Arc<Conn>,
    spun: bool,
}

/// Longest an async poll spins for a reply that usually comes back fast.
const POLL_SPIN_MAX_US: u64 = 50;

thread_local! {
    /// Whether a reply awaited on this thread may be spun for (see `allow_reply_spin`).
    static REPLY_SPIN: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
    /// This thread runs a data-node worker next to its front-end tasks (see `set_hosts_worker`).
    static HOSTS_WORKER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks this thread as the one that runs a data-node worker next to its front-end tasks
/// (`tern_runtime::HostedWorker`): a reply awaited here is never spun for (the worker that
/// answers runs on this thread once the task yields), and a blocking wait here is refused, as it
/// could never end.
pub fn set_hosts_worker() {
    HOSTS_WORKER.with(|h| h.set(true));
    REPLY_SPIN.with(|s| s.set(false));
}

pub(crate) fn hosts_worker() -> bool {
    HOSTS_WORKER.with(std::cell::Cell::get)
}

/// Lets replies awaited on this thread from now on be spun for briefly (the default), or not: a
/// front end whose executor thread has other clients' work waiting turns it off, since spinning
/// would hold that work back (with an in-process data node on a small machine it also takes
/// the data node's CPU).
pub fn allow_reply_spin(on: bool) {
    REPLY_SPIN.with(|s| s.set(on && !hosts_worker()));
}

impl Future for ReplyFuture {
    type Output = Result<Reply, TernError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(r) = self.slot.take() {
            return Poll::Ready(r);
        }
        // On the first poll, when this connection's replies recently came back within the spin
        // budget, read for them for a moment: handing the reply over through the reader thread
        // and an executor wake-up costs more on a small machine.
        // With other requests in flight on the connection, spinning here would only delay the
        // callers behind this one on the same executor thread (each poll a wasted `recv`): the
        // reader task or thread completes the slots then.
        let ewma = self.conn.reply_ewma_us.load(Ordering::Relaxed);
        let alone = !self.spun
            && REPLY_SPIN.with(std::cell::Cell::get)
            && self.conn.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len() <= 1;
        if !alone {
            self.spun = true;
            let mut s = self.slot.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(r) = s.reply.take() {
                return Poll::Ready(r);
            }
            s.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        // Our request may still be queued on this thread: send it before waiting for its reply.
        flush_deferred();
        let budget = if ewma <= POLL_SPIN_MAX_US {
            Duration::from_micros((ewma * 3 / 2).min(POLL_SPIN_MAX_US))
        } else {
            Duration::ZERO
        };
        self.spun = true;
        let start = Instant::now();
        loop {
            self.conn.help_read();
            if let Some(r) = self.slot.take() {
                return Poll::Ready(r);
            }
            if start.elapsed() >= budget {
                break;
            }
            std::hint::spin_loop();
        }
        let mut s = self.slot.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(r) = s.reply.take() {
            return Poll::Ready(r);
        }
        s.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

enum Transport {
    Tcp {
        stream: Mutex<TcpStream>,
        out: Mutex<(Vec<u8>, bool)>,
    },
    /// Shared memory (`tern_shm`): requests go into the ring, the Unix socket only tells when the
    /// data node's process is gone.
    Shm {
        tx: Mutex<ShmTx>,
        out: Mutex<(Vec<u8>, bool)>,
        socket: std::os::unix::net::UnixStream,
    },
    /// In-process: requests are handed to the data node's worker as values; `queued` holds the
    /// deferred ones (see `request`).
    Local {
        t: Box<dyn LocalTransport>,
        queued: Mutex<Vec<(u64, Request)>>,
    },
}

struct ShmTx {
    ring: tern_shm::Producer,
    wake_node: Arc<tern_shm::EventFd>,
}

/// The receive side of a connection: whoever holds the lock may read the socket (without
/// blocking) or the ring and complete the slots of the replies it finds.
struct Rx {
    stream: Option<TcpStream>,
    shm: Option<ShmRx>,
    buf: Vec<u8>,
    filled: usize,
}

struct ShmRx {
    ring: tern_shm::Consumer,
    wake_node: Arc<tern_shm::EventFd>,
    wake_me: Arc<tern_shm::EventFd>,
}

pub struct Conn {
    transport: Transport,
    rx: Option<Mutex<Rx>>,
    pending: Mutex<HashMap<u64, Arc<Slot>>>,
    next_req: AtomicU64,
    closed: AtomicBool,
    close_reason: Mutex<Option<String>>,
    pub peer: String,
    /// Moving average of request-to-reply time, in microseconds.
    reply_ewma_us: AtomicU64,
    /// A reader thread serves this connection (else a runtime task, or the caller itself).
    reader_thread: AtomicBool,
}

/// Every TCP connection of this process (weakly), so that a data node the management nodes
/// declared failed can have its connections closed at once (`close_connections_to`).
static TCP_CONNS: Mutex<Vec<std::sync::Weak<Conn>>> = Mutex::new(Vec::new());

fn register_tcp(c: &Arc<Conn>) {
    let mut all = TCP_CONNS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    all.retain(|w| w.strong_count() > 0);
    all.push(Arc::downgrade(c));
}

/// Closes every open connection of this process to the data node at `addr` (its waiting
/// requests fail as on a lost connection); returns how many.
pub fn close_connections_to(addr: &str, reason: &str) -> usize {
    let conns: Vec<Arc<Conn>> = TCP_CONNS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .iter()
        .filter_map(|w| w.upgrade())
        .filter(|c| c.peer == addr && !c.is_closed())
        .collect();
    for c in &conns {
        c.close(reason);
    }
    conns.len()
}

fn conn_error(msg: impl Into<String>) -> TernError {
    TernError::new(ErrorCode::NodeFailure, msg)
}

impl Conn {
    /// Connects over TCP (TCP_NODELAY on) and starts the reader thread.
    pub fn tcp(addr: &str, timeout: Duration) -> Result<Arc<Conn>, TernError> {
        use std::net::ToSocketAddrs;
        let addrs: Vec<_> =
            addr.to_socket_addrs().map_err(|e| conn_error(format!("cannot resolve {addr}: {e}")))?.collect();
        let mut last = None;
        let mut stream = None;
        for a in addrs {
            match TcpStream::connect_timeout(&a, timeout) {
                Ok(s) => {
                    stream = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let stream = stream.ok_or_else(|| {
            conn_error(format!(
                "cannot connect to data node at {addr}: {}",
                last.map(|e| e.to_string()).unwrap_or_default()
            ))
        })?;
        stream.set_nodelay(true).map_err(|e| conn_error(e.to_string()))?;
        let reader = stream.try_clone().map_err(|e| conn_error(e.to_string()))?;
        use std::os::fd::AsRawFd;
        let fd = reader.as_raw_fd();
        let conn = Arc::new(Conn::with(
            Transport::Tcp { stream: Mutex::new(stream), out: Mutex::new((Vec::new(), false)) },
            Some(Rx { stream: Some(reader), shm: None, buf: vec![0; 256 * 1024], filled: 0 }),
            addr,
        ));
        register_tcp(&conn);
        let c = Arc::downgrade(&conn);
        #[cfg(feature = "tokio")]
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let dup = conn
                .rx
                .as_ref()
                .expect("tcp")
                .lock()
                .expect("rx")
                .stream
                .as_ref()
                .expect("tcp")
                .try_clone()
                .map_err(|e| conn_error(e.to_string()))?;
            // SAFETY: the TcpStream owns its descriptor for the whole life of the AsyncFd.
            let afd = unsafe { tokio::io::unix::AsyncFd::register_with_interest(dup, tokio::io::Interest::READABLE) }
                .map_err(|e| conn_error(e.to_string()))?;
            crate::spinwatch::watch(fd);
            handle.spawn(read_task(afd, c));
            conn.reader_thread.store(false, Ordering::Relaxed);
            return Ok(conn);
        }
        std::thread::Builder::new()
            .name("tern-client-rx".into())
            .spawn(move || read_loop(fd, c))
            .map_err(|e| conn_error(e.to_string()))?;
        Ok(conn)
    }

    /// A connection over `transport` with nothing in flight.
    fn with(transport: Transport, rx: Option<Rx>, peer: &str) -> Conn {
        Conn {
            transport,
            rx: rx.map(Mutex::new),
            pending: Mutex::new(HashMap::new()),
            next_req: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            close_reason: Mutex::new(None),
            peer: peer.to_string(),
            reply_ewma_us: AtomicU64::new(30),
            reader_thread: AtomicBool::new(true),
        }
    }

    /// Connects over the transporter asked for: `Auto` tries shared memory when `addr` is on this
    /// host (and the data node offers it), else TCP.
    pub fn open(addr: &str, timeout: Duration, transporter: tern_shm::Transporter) -> Result<Arc<Conn>, TernError> {
        use tern_shm::Transporter;
        match transporter {
            Transporter::Tcp => Conn::tcp(addr, timeout),
            Transporter::Shm => Conn::shm(addr, timeout),
            Transporter::Auto => {
                if tern_shm::split_host_port(addr).is_some_and(|(h, _)| tern_shm::is_this_host(h))
                    && let Ok(c) = Conn::shm(addr, timeout)
                {
                    return Ok(c);
                }
                Conn::tcp(addr, timeout)
            }
        }
    }

    /// Connects through shared memory to the data node listening on TCP `addr` on this host
    /// (see `tern_shm`), and starts the reader (a task inside a tokio runtime, else a thread).
    pub fn shm(addr: &str, timeout: Duration) -> Result<Arc<Conn>, TernError> {
        let port = tern_shm::split_host_port(addr)
            .map(|(_, p)| p)
            .ok_or_else(|| conn_error(format!("{addr} is not host:port")))?;
        let (socket, e) = tern_shm::connect(port, timeout)
            .map_err(|e| conn_error(format!("cannot connect to data node at {addr} through shared memory: {e}")))?;
        let tern_shm::Endpoint { tx, rx, wake_peer, wake_me } = e;
        let (wake_node, wake_me) = (Arc::new(wake_peer), Arc::new(wake_me));
        let sock_fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
        let ev_fd = wake_me.raw_fd();
        let conn = Arc::new(Conn::with(
            Transport::Shm {
                tx: Mutex::new(ShmTx { ring: tx, wake_node: wake_node.clone() }),
                out: Mutex::new((Vec::new(), false)),
                socket,
            },
            Some(Rx { stream: None, shm: Some(ShmRx { ring: rx, wake_node, wake_me }), buf: Vec::new(), filled: 0 }),
            addr,
        ));
        register_tcp(&conn);
        let c = Arc::downgrade(&conn);
        #[cfg(feature = "tokio")]
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            use tokio::io::{Interest, unix::AsyncFd};
            // The tasks own duplicates of the descriptors (registered for as long as they run).
            let dup = |fd| {
                // SAFETY: duplicates a descriptor the connection holds open right now.
                let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
                if d < 0 {
                    return Err(conn_error(std::io::Error::last_os_error().to_string()));
                }
                // SAFETY: a fresh descriptor we own.
                Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(d) })
            };
            use std::os::fd::FromRawFd;
            // SAFETY: each AsyncFd owns its descriptor for its whole life.
            let ev = unsafe { AsyncFd::register_with_interest(dup(ev_fd)?, Interest::READABLE) }
                .map_err(|e| conn_error(e.to_string()))?;
            // SAFETY: as above.
            let sock = unsafe { AsyncFd::register_with_interest(dup(sock_fd)?, Interest::READABLE) }
                .map_err(|e| conn_error(e.to_string()))?;
            crate::spinwatch::watch(ev_fd);
            handle.spawn(shm_read_task(ev, c.clone()));
            handle.spawn(shm_watch_task(sock, c));
            conn.reader_thread.store(false, Ordering::Relaxed);
            return Ok(conn);
        }
        std::thread::Builder::new()
            .name("tern-client-shm".into())
            .spawn(move || shm_read_loop(ev_fd, sock_fd, c))
            .map_err(|e| conn_error(e.to_string()))?;
        Ok(conn)
    }

    /// Wraps an in-process transport. `make` receives the sink that must receive the replies.
    pub fn local(make: impl FnOnce(tern_wire::ReplySink) -> Box<dyn LocalTransport>) -> Arc<Conn> {
        Arc::new_cyclic(|weak: &std::sync::Weak<Conn>| {
            let w = weak.clone();
            let sink: tern_wire::ReplySink = Arc::new(move |req_id, reply| {
                let Some(c) = w.upgrade() else { return };
                match (req_id, reply) {
                    // The data node's end closed (request ids start at 1).
                    (0, Reply::Error(e)) => c.fail_all(e.message),
                    (0, _) => c.fail_all("the data node closed the connection".into()),
                    (req_id, reply) => c.complete(req_id, Ok(reply)),
                }
            });
            Conn::with(Transport::Local { t: make(sink), queued: Mutex::new(Vec::new()) }, None, "in-process")
        })
    }

    /// "tcp", "shm" or "in-process".
    pub fn transport_name(&self) -> &'static str {
        match self.transport {
            Transport::Tcp { .. } => "tcp",
            Transport::Shm { .. } => "shm",
            Transport::Local { .. } => "in-process",
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn complete(&self, req_id: u64, r: Result<Reply, TernError>) {
        let slot = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&req_id);
        if let Some(s) = slot {
            if let Some(at) = s.sent_at {
                let us = (at.elapsed().as_micros() as u64).min(100_000);
                let old = self.reply_ewma_us.load(Ordering::Relaxed);
                self.reply_ewma_us.store((old * 7 + us) / 8, Ordering::Relaxed);
            }
            s.complete(r);
        }
    }

    /// Closes the connection for the client's own reasons (every waiting request fails).
    pub fn close(&self, reason: &str) {
        self.fail_all(reason.to_string());
    }

    fn fail_all(&self, reason: String) {
        self.closed.store(true, Ordering::Release);
        *self.close_reason.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(reason.clone());
        let slots: Vec<Arc<Slot>> =
            self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain().map(|(_, s)| s).collect();
        for s in slots {
            s.complete(Err(conn_error(format!("connection to the data node lost: {reason}"))));
        }
    }

    /// Sends a request; the returned slot receives the reply.
    pub fn send(&self, req: Request) -> Result<Arc<Slot>, TernError> {
        self.send_with(req, false)
    }

    /// Sends a request; with `defer`, a request on a TCP connection is only queued and goes out
    /// with the others queued by this thread when it calls `flush_deferred` (see `request`).
    fn send_with(&self, req: Request, defer: bool) -> Result<Arc<Slot>, TernError> {
        if !defer {
            // Whatever this thread queued goes first (a blocking call must not strand it).
            flush_deferred();
        }
        if self.is_closed() {
            let why =
                self.close_reason.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone().unwrap_or_default();
            return Err(conn_error(format!("connection to the data node at {} is closed: {why}", self.peer)));
        }
        let req_id = self.next_req.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot { sent_at: Some(Instant::now()), ..Default::default() });
        {
            let mut p = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if p.len() >= IN_FLIGHT_MAX {
                return Err(TernError::new(ErrorCode::Overloaded, "too many requests in flight on this connection"));
            }
            p.insert(req_id, slot.clone());
        }
        match &self.transport {
            Transport::Local { t, queued } => {
                if defer {
                    queued.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((req_id, req));
                } else {
                    t.send(req_id, req);
                }
            }
            Transport::Tcp { out, .. } | Transport::Shm { out, .. } => {
                let buf = {
                    let mut o = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let at = begin_frame(&mut o.0);
                    req.encode(req_id, &mut o.0);
                    if o.0.len() - at - tern_wire::FRAME_HEADER_LEN > tern_wire::FRAME_PAYLOAD_MAX {
                        o.0.truncate(at);
                        drop(o);
                        self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&req_id);
                        return Err(TernError::new(ErrorCode::TooLarge, "request is larger than the frame limit"));
                    }
                    finish_frame(&mut o.0, at);
                    if o.1 {
                        return Ok(slot); // another caller is writing and will send ours too
                    }
                    if defer {
                        return Ok(slot);
                    }
                    o.1 = true;
                    std::mem::take(&mut o.0)
                };
                self.write_out(buf)?;
            }
        }
        Ok(slot)
    }

    /// Writes `buf`, then whatever others queued meanwhile, as the connection's current writer.
    fn write_out(&self, mut buf: Vec<u8>) -> Result<(), TernError> {
        let out = match &self.transport {
            Transport::Tcp { out, .. } | Transport::Shm { out, .. } => out,
            Transport::Local { .. } => return Ok(()),
        };
        loop {
            let r = match &self.transport {
                Transport::Tcp { stream, .. } => {
                    stream.lock().unwrap_or_else(std::sync::PoisonError::into_inner).write_all(&buf)
                }
                Transport::Shm { tx, .. } => self.write_shm(tx, &buf),
                Transport::Local { .. } => Ok(()),
            };
            if let Err(e) = r {
                out.lock().unwrap_or_else(std::sync::PoisonError::into_inner).1 = false;
                self.fail_all(e.to_string());
                return Err(conn_error(format!("sending to the data node failed: {e}")));
            }
            buf.clear();
            let mut o = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if o.0.is_empty() {
                o.1 = false;
                // Keep the allocation for next time.
                std::mem::swap(&mut o.0, &mut buf);
                return Ok(());
            }
            std::mem::swap(&mut o.0, &mut buf);
        }
    }

    /// Writes all of `buf` into the request ring, waiting while it is full (the data node reads
    /// it and wakes nobody: this writer naps briefly, as a blocking socket write would wait).
    fn write_shm(&self, tx: &Mutex<ShmTx>, buf: &[u8]) -> std::io::Result<()> {
        let mut tx = tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut at = 0;
        let mut naps = 0u32;
        while at < buf.len() {
            let (n, wake) = tx.ring.write(&buf[at..]).map_err(std::io::Error::other)?;
            if wake {
                tx.wake_node.signal();
            }
            at += n;
            if n == 0 {
                if self.is_closed() {
                    return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "connection closed"));
                }
                // The node's worker may be parked with our ring full of requests it has read
                // only partly: make sure it looks.
                tx.wake_node.signal();
                naps += 1;
                if naps < 64 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }
        Ok(())
    }

    /// Sends what is queued, unless another caller is writing (it sends ours too).
    fn flush(&self) {
        let out = match &self.transport {
            Transport::Tcp { out, .. } | Transport::Shm { out, .. } => out,
            Transport::Local { t, queued } => {
                let mut reqs = std::mem::take(&mut *queued.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
                t.send_all(&mut reqs);
                return;
            }
        };
        let buf = {
            let mut o = out.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if o.1 || o.0.is_empty() {
                return;
            }
            o.1 = true;
            std::mem::take(&mut o.0)
        };
        let _ = self.write_out(buf);
    }

    /// A future for the reply. On a thread that defers sends (`set_defer_sends`), the request is
    /// queued and leaves together with every other request this thread queued before it next
    /// flushes (`flush_deferred`, called when the executor runs out of work or before a poll
    /// spins), so concurrent tasks' requests share one `write` and one data-node wake-up.
    pub fn request(self: &Arc<Self>, req: Request) -> Result<ReplyFuture, TernError> {
        let defer = DEFER.with(|d| d.get());
        let slot = self.send_with(req, defer)?;
        if defer {
            QUEUED.with(|q| {
                let mut q = q.borrow_mut();
                if !q.iter().any(|c| Arc::ptr_eq(c, self)) {
                    q.push(self.clone());
                }
            });
            let (n, since) = QUEUED_SINCE.with(|s| s.get());
            let since = since.unwrap_or_else(Instant::now);
            if n + 1 >= DEFER_MAX_REQUESTS || since.elapsed() >= DEFER_MAX_WAIT {
                flush_deferred();
            } else {
                QUEUED_SINCE.with(|s| s.set((n + 1, Some(since))));
            }
        }
        Ok(ReplyFuture { slot, conn: self.clone(), spun: false })
    }

    /// Reads whatever replies have arrived, if no other thread is reading: a waiting thread picks
    /// up its reply itself instead of waiting for the reader thread to wake up (NDB's poll owner).
    pub fn help_read(&self) {
        if let Some(rx) = &self.rx
            && let Ok(mut g) = rx.try_lock()
        {
            self.pump(&mut g);
        }
    }

    /// Reads whatever replies have arrived, waiting for a caller that is reading.
    fn help_read_blocking(&self) {
        if let Some(rx) = &self.rx {
            let mut g = rx.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            self.pump(&mut g);
        }
    }

    /// Reads without blocking until the socket (or ring) is drained, completing slots.
    fn pump(&self, rx: &mut Rx) {
        use std::os::fd::AsRawFd;
        if rx.shm.is_some() {
            return self.pump_shm(rx);
        }
        let fd = rx.stream.as_ref().expect("tcp").as_raw_fd();
        loop {
            if rx.buf.len() - rx.filled < 64 * 1024 {
                let n = (rx.buf.len() * 2).max(256 * 1024);
                rx.buf.resize(n, 0);
            }
            let free = &mut rx.buf[rx.filled..];
            let room = free.len();
            // SAFETY: reads into our own buffer, at most its free length.
            let n = unsafe { libc::recv(fd, free.as_mut_ptr() as *mut libc::c_void, room, libc::MSG_DONTWAIT) };
            if n == 0 {
                self.fail_all("the data node closed the connection".into());
                return;
            }
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::WouldBlock => return,
                    std::io::ErrorKind::Interrupted => continue,
                    _ => {
                        self.fail_all(e.to_string());
                        return;
                    }
                }
            }
            rx.filled += n as usize;
            let Some(at) = self.complete_frames(&rx.buf[..rx.filled]) else { return };
            rx.buf.copy_within(at..rx.filled, 0);
            rx.filled -= at;
            // A read that left room drained the socket: stop here rather than pay a `recv` that
            // only says EAGAIN (edge-triggered readers clear their readiness after a pump; data
            // that arrives later raises a new edge).
            if (n as usize) < room {
                return;
            }
        }
    }
}

impl Conn {
    /// Completes the request of every whole reply frame in `bytes`; returns how many bytes they
    /// took (None: the connection failed on a bad frame).
    fn complete_frames(&self, bytes: &[u8]) -> Option<usize> {
        let mut at = 0;
        loop {
            match decode_frame(&bytes[at..]) {
                Ok(Some((payload, len))) => {
                    match Reply::decode(payload) {
                        Ok((req_id, reply)) => self.complete(req_id, Ok(reply)),
                        Err(e) => {
                            self.fail_all(format!("undecodable reply: {e}"));
                            return None;
                        }
                    }
                    at += len;
                }
                Ok(None) => return Some(at),
                Err(e) => {
                    self.fail_all(format!("bad frame from the data node: {e}"));
                    return None;
                }
            }
        }
    }

    /// Copies what the reply ring holds and completes the whole frames in it.
    fn pump_shm(&self, rx: &mut Rx) {
        let Rx { shm, buf, .. } = rx;
        let shm = shm.as_mut().expect("shm");
        loop {
            match shm.ring.read_into(buf, usize::MAX) {
                Ok((0, _)) => return,
                Ok((_, wake)) => {
                    if wake {
                        shm.wake_node.signal();
                    }
                }
                Err(e) => {
                    self.fail_all(format!("shared memory: {e}"));
                    return;
                }
            }
            let Some(at) = self.complete_frames(buf) else { return };
            buf.drain(..at);
        }
    }

    /// The reader is about to sleep: asks the data node to wake it (false: replies arrived).
    fn shm_prepare_park(&self) -> bool {
        let Some(rx) = &self.rx else { return false };
        let g = rx.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        g.shm.as_ref().is_none_or(|s| s.ring.prepare_park())
    }

    fn shm_unpark(&self) {
        if let Some(rx) = &self.rx {
            let g = rx.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(s) = &g.shm {
                s.ring.unpark();
                s.wake_me.drain();
            }
        }
    }
}

/// The shared-memory reader task: reads the ring until it is empty, then parks on the eventfd.
#[cfg(feature = "tokio")]
async fn shm_read_task(ev: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>, conn: std::sync::Weak<Conn>) {
    loop {
        {
            let Some(c) = conn.upgrade() else { return };
            if c.is_closed() {
                return;
            }
            c.help_read_blocking();
            if !c.shm_prepare_park() {
                continue;
            }
        }
        let Ok(mut guard) = ev.readable().await else { return };
        guard.clear_ready();
        let Some(c) = conn.upgrade() else { return };
        c.shm_unpark();
    }
}

/// Watches a shared-memory connection's Unix socket: end-of-file means the data node is gone.
#[cfg(feature = "tokio")]
async fn shm_watch_task(sock: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>, conn: std::sync::Weak<Conn>) {
    loop {
        let Ok(mut guard) = sock.readable().await else { return };
        let Some(c) = conn.upgrade() else { return };
        if c.is_closed() {
            return;
        }
        if !socket_alive(std::os::fd::AsRawFd::as_raw_fd(sock.get_ref())) {
            c.help_read_blocking();
            c.fail_all("the data node closed the connection".into());
            return;
        }
        guard.clear_ready();
    }
}

/// Whether a socket is still open at the other end (reads and drops stray bytes).
fn socket_alive(fd: std::os::fd::RawFd) -> bool {
    let mut b = [0u8; 64];
    loop {
        // SAFETY: a non-blocking receive into a local buffer.
        let n = unsafe { libc::recv(fd, b.as_mut_ptr() as *mut libc::c_void, b.len(), libc::MSG_DONTWAIT) };
        if n > 0 {
            continue;
        }
        if n == 0 {
            return false;
        }
        return matches!(
            std::io::Error::last_os_error().kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
        );
    }
}

/// The shared-memory reader thread: reads the ring, parks on the eventfd and the socket.
fn shm_read_loop(ev_fd: std::os::fd::RawFd, sock_fd: std::os::fd::RawFd, conn: std::sync::Weak<Conn>) {
    loop {
        {
            let Some(c) = conn.upgrade() else { return };
            if c.is_closed() {
                return;
            }
            c.help_read_blocking();
            if !c.shm_prepare_park() {
                continue;
            }
        }
        let mut p = [
            libc::pollfd { fd: ev_fd, events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: sock_fd, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds; both descriptors stay open while the connection lives
        // (checked after the wait).
        unsafe { libc::poll(p.as_mut_ptr(), 2, 100) };
        let Some(c) = conn.upgrade() else { return };
        c.shm_unpark();
        if p[1].revents != 0 && !socket_alive(sock_fd) {
            // Replies the node wrote before it closed (an error saying why) come first.
            c.help_read_blocking();
            c.fail_all("the data node closed the connection".into());
            return;
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Transport::Tcp { stream, .. } = &self.transport
            && let Ok(s) = stream.lock()
        {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        if let Transport::Shm { socket, .. } = &self.transport {
            let _ = socket.shutdown(std::net::Shutdown::Both);
            // The reader sleeping on the eventfd wakes, finds the connection gone, and ends.
            if let Some(rx) = &self.rx
                && let Ok(g) = rx.lock()
                && let Some(s) = &g.shm
            {
                s.wake_me.signal();
            }
        }
    }
}

/// The reader task (inside a tokio runtime): waits on the runtime's reactor until the socket is
/// readable, then reads under the receive lock. Ends when the connection is dropped or dies.
#[cfg(feature = "tokio")]
async fn read_task(afd: tokio::io::unix::AsyncFd<TcpStream>, conn: std::sync::Weak<Conn>) {
    loop {
        let Ok(mut guard) = afd.readable().await else { return };
        let Some(c) = conn.upgrade() else { return };
        if let Some(rx) = &c.rx {
            let mut g = rx.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            c.pump(&mut g);
        }
        if c.is_closed() {
            return;
        }
        guard.clear_ready();
    }
}

/// The reader thread: waits until the socket is readable, then reads under the receive lock
/// (unless a waiting caller got there first). Ends when the connection is dropped or dies.
fn read_loop(fd: std::os::fd::RawFd, conn: std::sync::Weak<Conn>) {
    loop {
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; the fd stays open while the connection lives (checked below).
        let r = unsafe { libc::poll(&mut p, 1, 100) };
        let Some(c) = conn.upgrade() else { return };
        if c.is_closed() {
            return;
        }
        if r > 0 {
            if let Some(rx) = &c.rx {
                let mut g = rx.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                c.pump(&mut g);
            }
            if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 && c.is_closed() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An in-process transport that records what reaches it: one entry per call, the request ids.
    #[derive(Default, Clone)]
    struct Recorder(Arc<Mutex<Vec<Vec<u64>>>>);

    impl LocalTransport for Recorder {
        fn send(&self, req_id: u64, _req: Request) {
            self.0.lock().unwrap().push(vec![req_id]);
        }
        fn send_all(&self, reqs: &mut Vec<(u64, Request)>) {
            self.0.lock().unwrap().push(reqs.drain(..).map(|(id, _)| id).collect());
        }
    }

    #[test]
    fn deferred_in_process_requests_leave_together_and_in_order() {
        let rec = Recorder::default();
        let r = rec.clone();
        let conn = Conn::local(move |_sink| Box::new(r));
        set_defer_sends(true);
        let futures: Vec<_> = (0..3).map(|_| conn.request(Request::GetCatalog).unwrap()).collect();
        assert!(rec.0.lock().unwrap().is_empty(), "deferred requests wait for the flush");
        flush_deferred();
        assert_eq!(*rec.0.lock().unwrap(), vec![vec![1, 2, 3]], "one hand-off, in order");
        // A request that is not deferred sends what this thread queued first.
        let _f4 = conn.request(Request::GetCatalog).unwrap();
        let _s5 = conn.send(Request::GetCatalog).unwrap();
        assert_eq!(*rec.0.lock().unwrap(), vec![vec![1, 2, 3], vec![4], vec![5]]);
        set_defer_sends(false);
        let _s6 = conn.send(Request::GetCatalog).unwrap();
        assert_eq!(rec.0.lock().unwrap().last(), Some(&vec![6]));
        drop(futures);
    }
}
