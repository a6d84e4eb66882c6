//! What the async front ends (REST, Redis) share around the client: their tokio runtime, whose
//! workers spin before they park (`spinwatch`) and may queue data-node requests until they run
//! out of work (`set_defer_sends`), binding their port with a clear error, the cap on open
//! connections (`ConnLimit`) and closing after a final error (`linger_close`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Stack of every front-end worker thread. Parsers and evaluators bound their recursion depth
/// (see each front end's limits); this leaves room for those bounds in debug builds too.
pub const WORKER_STACK_BYTES: usize = 16 << 20;

/// A multi-thread runtime of `threads` workers named `name`. With `defer_sends`, data-node
/// requests of every task a worker runs in one pass leave in one write when it runs out of work.
pub fn runtime(threads: usize, name: &str, defer_sends: bool) -> Result<tokio::runtime::Runtime, String> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(threads.max(1)).enable_io().enable_time().thread_name(name).thread_stack_size(WORKER_STACK_BYTES);
    b.on_thread_park(|| {
        // Requests that tasks of this thread queued leave now, together (see `Conn::request`).
        crate::flush_deferred();
        crate::spinwatch::park_spin();
    });
    // This runtime's own spin set, for its workers and for this thread (which runs its
    // `block_on` future, e.g. an accept loop that watches the connections).
    let set = crate::spinwatch::new_set();
    crate::spinwatch::enter(set);
    b.on_thread_start(move || {
        crate::spinwatch::enter(set);
        if defer_sends {
            crate::set_defer_sends(true);
        }
    });
    b.build().map_err(|e| e.to_string())
}

/// Where a front end reports the address it listens on (called once it is bound).
pub type Bound = Box<dyn FnOnce(SocketAddr) + Send>;

/// How a front end's `run_on` gets its client: a boxed closure, so that `run_on` need not be
/// generic (a generic entry point would have every caller compile the whole server again).
pub type Connect<'a> = Box<dyn FnOnce() -> Result<crate::Client, String> + 'a>;
/// What a front end's `run_on` calls once it listens, with the bound address.
pub type Ready<'a> = Box<dyn FnOnce(SocketAddr) + 'a>;

/// Runs a front end, blocking this thread until it ends: as a task of `on` (a runtime that runs
/// elsewhere: the thread of a data-node worker that hosts front ends, see `crate::hosted`) or,
/// with None, on a `runtime(threads, name, defer_sends)` of its own (`own`), whose `block_on`
/// this thread runs (the accept loop lives here). `connect` makes the client on this thread,
/// never on a runtime worker (where it would wait for the data node while the worker's other
/// tasks wait for it); for an own runtime inside that runtime's context, so the client's
/// sockets are read by its reactor. `serve` binds, reports its address (passed to `ready`
/// here) and serves.
pub fn run_front_end<F>(
    on: Option<tokio::runtime::Handle>,
    own: (usize, &str, bool),
    what: &str,
    connect: impl FnOnce() -> Result<crate::Client, String>,
    serve: impl FnOnce(crate::Client, Bound) -> F,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), String>
where
    F: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    // (One message: the address.)
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let bound: Bound = Box::new(move |addr| {
        let _ = tx.send(addr);
    });
    let Some(rt) = on else {
        let rt = runtime(own.0, own.1, own.2)?;
        let client = {
            let _in = rt.enter();
            connect()?
        };
        let mut serving = std::pin::pin!(serve(client, bound));
        let mut ready = Some(ready);
        // The address is sent while `serving` is polled: look for it after each poll.
        return rt.block_on(std::future::poll_fn(|cx| {
            let r = serving.as_mut().poll(cx);
            if let Ok(addr) = rx.try_recv()
                && let Some(ready) = ready.take()
            {
                ready(addr);
            }
            r
        }));
    };
    let client = connect()?;
    let serving = rt.spawn(serve(client, bound));
    // (No address: it failed to start; its error comes from the task below.)
    if let Ok(addr) = rx.recv() {
        ready(addr);
    }
    // (Waiting for a task's end needs no driver on this thread.)
    match rt.block_on(serving) {
        Ok(r) => r,
        Err(e) => Err(format!("the {what} front end stopped: {e}")),
    }
}

static SHARE_PORTS: AtomicBool = AtomicBool::new(false);

/// Whether this process's front ends share their ports with the front ends of other processes
/// on this host (`SO_REUSEPORT`): every data node of a local cluster serves the REST, Redis and
/// MySQL ports, the kernel spreads new connections over the processes listening, and a process
/// that dies takes only its own connections with it. Set before any front end binds.
pub fn set_share_ports(on: bool) {
    SHARE_PORTS.store(on, Ordering::Relaxed);
}

/// Listen backlog of a shared port (what `TcpListener::bind` uses on Linux).
const BACKLOG: u32 = 1024;

/// Binds `addr` for the front end `what`; a taken port is said so. With `set_share_ports`, the
/// socket is bound with `SO_REUSEPORT`: it shares the port only with sockets of the same user
/// that set it too, so a port another program holds is still refused.
pub async fn bind(addr: SocketAddr, what: &str) -> Result<tokio::net::TcpListener, String> {
    let bound =
        if SHARE_PORTS.load(Ordering::Relaxed) { bind_shared(addr) } else { tokio::net::TcpListener::bind(addr).await };
    bound.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            format!("cannot listen on {addr} ({what}): the port is already in use")
        } else {
            format!("cannot listen on {addr} ({what}): {e}")
        }
    })
}

fn bind_shared(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let s = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    s.set_reuseaddr(true)?;
    s.set_reuseport(true)?;
    s.bind(addr)?;
    let l = s.listen(BACKLOG)?;
    LISTENERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(std::os::fd::AsRawFd::as_raw_fd(&l));
    Ok(l)
}

/// The listening sockets of shared ports (`bind_shared`), for `stop_listening`.
static LISTENERS: std::sync::Mutex<Vec<std::os::fd::RawFd>> = std::sync::Mutex::new(Vec::new());
static LISTENING_STOPPED: AtomicBool = AtomicBool::new(false);

/// A process that stops in order stops taking connections on its shared ports first: each
/// listening socket is shut down (it leaves the port's `SO_REUSEPORT` group, so the kernel sends
/// new connections to the other processes serving the port, and connections it had queued but
/// not accepted are reset, which clients see as a refused attempt to retry). Connections
/// already open are served on while the process finishes.
pub fn stop_listening() {
    LISTENING_STOPPED.store(true, Ordering::SeqCst);
    for &fd in LISTENERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).iter() {
        // SAFETY: shutdown(2) of a listening socket this process bound and never closes while
        // it runs (the front ends keep their listeners until the process exits).
        unsafe { libc::shutdown(fd, libc::SHUT_RD) };
    }
}

/// A front-end connection running a command, counted while it lives: while more connections run
/// one than the front end has threads, replies are not spun for on this thread
/// (`crate::allow_reply_spin`), as the other connections' work waits behind the spin.
pub struct Busy<'a>(&'a AtomicUsize);

impl<'a> Busy<'a> {
    pub fn enter(running: &'a AtomicUsize, threads: usize) -> Busy<'a> {
        let now = running.fetch_add(1, Ordering::Relaxed) + 1;
        crate::allow_reply_spin(now <= threads);
        Busy(running)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The number of open connections of one front end against its cap (`max_connections`,
/// `maxclients`, REST's connection cap). The cap can change while serving (SET GLOBAL, CONFIG
/// SET); connections already open stay.
#[derive(Clone, Debug)]
pub struct ConnLimit {
    open: Arc<AtomicUsize>,
    max: Arc<AtomicUsize>,
}

/// One open connection's place under a `ConnLimit`, given back when dropped.
#[derive(Debug)]
pub struct ConnSlot(Arc<AtomicUsize>);

impl Drop for ConnSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ConnLimit {
    pub fn new(max: usize) -> ConnLimit {
        ConnLimit { open: Arc::new(AtomicUsize::new(0)), max: Arc::new(AtomicUsize::new(max)) }
    }

    pub fn max(&self) -> usize {
        self.max.load(Ordering::Relaxed)
    }

    pub fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// A place for one more connection, or `None` when `max` are open (the caller answers with
    /// its protocol's "too many connections" error and closes).
    pub fn try_acquire(&self) -> Option<ConnSlot> {
        let max = self.max();
        let mut cur = self.open.load(Ordering::Relaxed);
        loop {
            if cur >= max {
                return None;
            }
            match self.open.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => return Some(ConnSlot(self.open.clone())),
                Err(now) => cur = now,
            }
        }
    }
}

/// The next client connection, ready for a request/response protocol: TCP_NODELAY on (without it
/// a client waits for delayed ACKs) and watched by the spin-before-park hook. Accept errors (for
/// example out of descriptors) are logged and retried after a short pause.
pub async fn accept(listener: &tokio::net::TcpListener) -> (tokio::net::TcpStream, SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                crate::spinwatch::watch(std::os::fd::AsRawFd::as_raw_fd(&stream));
                return (stream, peer);
            }
            Err(_) if LISTENING_STOPPED.load(Ordering::SeqCst) => {
                // The process is stopping (`stop_listening`): no more connections.
                std::future::pending::<()>().await;
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// Closes a connection after a final error reply without losing the reply: closing with unread
/// input makes the kernel send a reset, which can destroy the reply in flight, so the write side
/// shuts first and input is read and dropped until the client closes (at most 2 s or 64 MB).
pub async fn linger_close(s: &mut tokio::net::TcpStream) {
    // SAFETY: shuts down the write half of a descriptor the stream owns.
    unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(&*s), libc::SHUT_WR) };
    let mut scratch = vec![0u8; 64 << 10];
    let mut dropped = 0usize;
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
        while dropped < 64 << 20 {
            let _ = s.readable().await;
            match s.try_read(&mut scratch) {
                Ok(0) => return,
                Ok(n) => dropped += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::{ConnLimit, bind_shared};

    #[test]
    fn shared_ports_take_only_sharing_sockets() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().expect("runtime");
        rt.block_on(async {
            let a = bind_shared("127.0.0.1:0".parse().unwrap()).expect("first shared");
            let addr = a.local_addr().unwrap();
            // A second process's front end (here: a second socket) shares the port ...
            let b = bind_shared(addr).expect("second shared");
            assert_eq!(b.local_addr().unwrap(), addr);
            // ... and each accepts connections to it.
            let c1 = std::net::TcpStream::connect(addr).expect("connect");
            let accepted = std::future::poll_fn(|cx| {
                for l in [&a, &b] {
                    if let std::task::Poll::Ready(r) = l.poll_accept(cx) {
                        return std::task::Poll::Ready(r.is_ok());
                    }
                }
                std::task::Poll::Pending
            })
            .await;
            assert!(accepted);
            drop(c1);
            // A stopping process shuts its socket down (`stop_listening`): every new connection
            // then goes to the one still listening.
            // SAFETY: shutdown(2) of the listener `b` owns.
            assert_eq!(unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(&b), libc::SHUT_RD) }, 0);
            for _ in 0..20 {
                let _c = std::net::TcpStream::connect(addr).expect("connect after the shutdown");
                a.accept().await.expect("accepted by the listener left");
            }
            assert!(b.accept().await.is_err(), "a shut-down listener accepts nothing");
            // A socket that does not share is refused, and so is sharing a port held that way.
            assert!(std::net::TcpListener::bind(addr).is_err());
            let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let err = bind_shared(plain.local_addr().unwrap()).expect_err("refused");
            assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        });
    }

    #[test]
    fn conn_limit_counts_and_frees() {
        let l = ConnLimit::new(2);
        let a = l.try_acquire().expect("first");
        let b = l.try_acquire().expect("second");
        assert!(l.try_acquire().is_none());
        assert_eq!(l.open(), 2);
        drop(a);
        let c = l.try_acquire().expect("freed place");
        l.set_max(1);
        assert!(l.try_acquire().is_none());
        drop(b);
        drop(c);
        assert_eq!(l.open(), 0);
        assert!(l.try_acquire().is_some());
    }
}
