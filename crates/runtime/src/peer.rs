//! The node-to-node transporter: each worker keeps one outgoing TCP connection to every other data
//! node it sends signals to, opened on first use and greeted with a `PeerHello` naming the sending
//! node and worker. Signals are framed (`tern_wire` frames around `tern_kernel::codec`) into the
//! link's write buffer and written with the worker's other output once per loop turn, so every
//! signal from one block to another travels in order over one connection (per-link FIFO, which the
//! commit and abort chains rely on).
//!
//! The receiving node reads such a connection like a client connection until the greeting, moves
//! it to the worker the greeting names, and from then on hands each frame's signal to the block it
//! is addressed to. Connections are one-way: a node never answers on a link it accepted.
//!
//! A link that breaks after it carried signals may have lost some (written, not yet received):
//! per-link FIFO is broken, so the link is *poisoned* — everything for that node is dropped
//! until the cluster map shows the node failed or restarted (a new incarnation resets the link)
//! — and the worker reports the node to the control plane as suspected, which fails one of the
//! two (a broken link is a node failure, as in NDB). A link that breaks before it carried
//! anything (the peer is still starting) keeps its buffer and is re-opened, at most every
//! `RECONNECT_MS`.
//!
//! A peer on this host is reached through shared memory when both allow it (`transporter =
//! "auto" | "shm"`): the link connects to the peer's abstract Unix socket, writes its frames into
//! the request ring instead of the socket, and watches the socket (and its eventfd, woken when
//! the peer frees ring space) under the link's token. The frames, the greeting and the rules
//! above are the same.

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use std::io::{self, Write};
use std::net::{SocketAddr, ToSocketAddrs};
use tern_kernel::signal::{Addr, NodeId, Signal};
use tern_wire::{PeerHello, begin_frame, finish_frame};

/// Unsent bytes a link buffers (e.g. while its peer is still starting) before it drops signals.
pub const LINK_BUFFER_MAX: usize = 256 * 1024 * 1024;
/// A broken or refused link is retried at most this often.
pub const RECONNECT_MS: u64 = 100;

pub struct PeerLink {
    pub node: NodeId,
    addr: Option<SocketAddr>,
    pub token: Token,
    stream: Option<TcpStream>,
    /// Shared memory to a peer on this host: the Unix socket (watched for end-of-file) and the
    /// rings; `stream` is then None.
    shm: Option<(mio::net::UnixStream, Box<tern_shm::Endpoint>)>,
    /// Whether this link tries shared memory first (the peer is on this host and the transporter
    /// allows it).
    try_shm: bool,
    /// The greeting's bytes still to write on a new connection (before any signal).
    greeting: Vec<u8>,
    /// Bytes of the current connection have reached the peer's socket: from now on a break loses
    /// signals (before it, the buffer is kept for the next attempt, e.g. while the peer starts).
    established: bool,
    wbuf: Vec<u8>,
    want_write: bool,
    retry_at_ms: u64,
    /// Signals dropped because the link broke or its buffer was full.
    pub dropped: u64,
    /// Bytes written to the peer, and connections opened (for `ndbinfo.transporters`).
    pub bytes_sent: u64,
    pub connects: u64,
    host_port: String,
    /// The link broke after carrying signals: drop everything until `reset`.
    pub poisoned: bool,
    /// When the peer was last reported as suspected (for re-reporting while poisoned).
    pub suspected_ms: u64,
}

impl PeerLink {
    pub fn new(node: NodeId, host_port: &str, token: Token, transporter: tern_shm::Transporter) -> PeerLink {
        let addr = host_port.to_socket_addrs().ok().and_then(|mut a| a.next());
        if addr.is_none() {
            tracing::error!(node, host_port, "cannot resolve the address of data node");
        }
        let try_shm = transporter != tern_shm::Transporter::Tcp
            && addr.is_some_and(|a| tern_shm::is_this_host(&a.ip().to_string()));
        PeerLink {
            node,
            addr,
            token,
            stream: None,
            shm: None,
            try_shm,
            greeting: Vec::new(),
            established: false,
            wbuf: Vec::new(),
            want_write: false,
            retry_at_ms: 0,
            dropped: 0,
            bytes_sent: 0,
            connects: 0,
            host_port: host_port.to_string(),
            poisoned: false,
            suspected_ms: 0,
        }
    }

    /// Frames one signal into the link's buffer (false: dropped, the buffer is full or the link
    /// is poisoned).
    pub fn push(&mut self, to: Addr, sig: &Signal) -> bool {
        if self.poisoned || self.wbuf.len() >= LINK_BUFFER_MAX {
            self.dropped += 1;
            return false;
        }
        let at = begin_frame(&mut self.wbuf);
        tern_kernel::codec::encode_signal(to, sig, &mut self.wbuf);
        finish_frame(&mut self.wbuf, at);
        true
    }

    pub fn has_output(&self) -> bool {
        !self.wbuf.is_empty()
    }

    /// Opens the connection when needed and writes what it can. Returns false when the link
    /// broke (its unsent signals are dropped).
    pub fn flush(&mut self, registry: &Registry, hello: PeerHello, now_ms: u64, poison: bool) -> bool {
        if self.poisoned {
            self.wbuf.clear();
        }
        if self.wbuf.is_empty() {
            return true;
        }
        if self.stream.is_none() && self.shm.is_none() {
            if now_ms < self.retry_at_ms {
                return true;
            }
            self.retry_at_ms = now_ms + RECONNECT_MS;
            let Some(addr) = self.addr else { return true };
            if self.try_shm && self.connect_shm(registry, addr.port(), hello) {
                self.connects += 1;
                return self.flush_shm(registry, poison);
            }
            let Ok(mut s) = TcpStream::connect(addr) else { return true };
            let _ = s.set_nodelay(true);
            if registry.register(&mut s, self.token, Interest::READABLE | Interest::WRITABLE).is_err() {
                return true;
            }
            self.want_write = true;
            self.connects += 1;
            self.greeting.clear();
            let at = begin_frame(&mut self.greeting);
            hello.encode(&mut self.greeting);
            finish_frame(&mut self.greeting, at);
            self.established = false;
            self.stream = Some(s);
        }
        if self.shm.is_some() {
            return self.flush_shm(registry, poison);
        }
        let s = self.stream.as_mut().expect("connected");
        let mut broken = false;
        while !self.greeting.is_empty() {
            match s.write(&self.greeting) {
                Ok(0) => broken = true,
                Ok(n) => {
                    self.greeting.drain(..n);
                    self.established = true;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::NotConnected => {}
                Err(_) => broken = true,
            }
            break;
        }
        let mut written = 0;
        while !broken && self.greeting.is_empty() && written < self.wbuf.len() {
            match s.write(&self.wbuf[written..]) {
                Ok(0) => {
                    broken = true;
                    break;
                }
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::NotConnected => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        self.wbuf.drain(..written);
        self.bytes_sent += written as u64;
        if broken {
            return !self.broken(registry, poison);
        }
        let want = !self.wbuf.is_empty();
        if want != self.want_write {
            let interest = if want { Interest::READABLE | Interest::WRITABLE } else { Interest::READABLE };
            let _ = registry.reregister(s, self.token, interest);
            self.want_write = want;
        }
        true
    }

    /// Opens shared memory to the peer (its abstract Unix socket; the acceptor thread there
    /// answers at once, so this short blocking step cannot wait on a busy worker). False: not
    /// offered (an older or TCP-only peer, or not started yet): TCP is tried instead.
    fn connect_shm(&mut self, registry: &Registry, port: u16, hello: PeerHello) -> bool {
        let Ok((s, e)) = tern_shm::connect(port, std::time::Duration::from_secs(1)) else { return false };
        if s.set_nonblocking(true).is_err() {
            return false;
        }
        let mut s = mio::net::UnixStream::from_std(s);
        let ev = e.wake_me.raw_fd();
        if registry.register(&mut s, self.token, Interest::READABLE).is_err() {
            return false;
        }
        if registry.register(&mut mio::unix::SourceFd(&ev), self.token, Interest::READABLE).is_err() {
            let _ = registry.deregister(&mut s);
            return false;
        }
        self.greeting.clear();
        let at = begin_frame(&mut self.greeting);
        hello.encode(&mut self.greeting);
        finish_frame(&mut self.greeting, at);
        self.established = false;
        self.shm = Some((s, Box::new(e)));
        true
    }

    /// Writes the greeting and queued signals into the ring; what does not fit waits for the
    /// peer to free space (it wakes this worker through the eventfd).
    fn flush_shm(&mut self, registry: &Registry, poison: bool) -> bool {
        let Some((_, e)) = self.shm.as_mut() else { return true };
        let mut broken = false;
        let mut full = false;
        while !self.greeting.is_empty() {
            match e.send(&self.greeting) {
                Ok(0) => {
                    full = true;
                    break;
                }
                Ok(n) => {
                    self.greeting.drain(..n);
                    self.established = true;
                }
                Err(_) => {
                    broken = true;
                    break;
                }
            }
        }
        let mut written = 0;
        while !broken && !full && written < self.wbuf.len() {
            match e.send(&self.wbuf[written..]) {
                Ok(0) if e.tx.prepare_wait() => full = true,
                Ok(n) => written += n,
                Err(_) => broken = true,
            }
        }
        self.wbuf.drain(..written);
        self.bytes_sent += written as u64;
        if broken {
            return !self.broken(registry, poison);
        }
        true
    }

    /// What `ndbinfo.transporters` shows of this link (bytes received are counted by the worker
    /// on the peer's own connection to us).
    pub fn stat(&self, bytes_received: u64) -> tern_wire::LinkStat {
        let connected = self.established && (self.stream.is_some() || self.shm.is_some());
        tern_wire::LinkStat {
            node: self.node,
            addr: self.host_port.clone(),
            status: if self.poisoned {
                "DISCONNECTED"
            } else if connected {
                "CONNECTED"
            } else {
                "CONNECTING"
            }
            .into(),
            transporter: if self.shm.is_some() { "shm" } else { "tcp" }.into(),
            bytes_sent: self.bytes_sent,
            bytes_received,
            connects: self.connects,
            dropped: self.dropped,
        }
    }

    /// Whether this link talks through shared memory.
    #[cfg(test)]
    pub fn is_shm(&self) -> bool {
        self.shm.is_some()
    }

    /// The peer closed or the connection failed: drop it and what it had not sent.
    /// Returns whether signals may have been lost (a connection that had carried bytes broke;
    /// before that, e.g. while the peer starts, they wait for the next attempt). With `poison`
    /// such a link then drops everything until `reset` (the peer is in the write chains: its
    /// failure, or ours, must be declared before signals flow again).
    pub fn broken(&mut self, registry: &Registry, poison: bool) -> bool {
        if let Some(mut s) = self.stream.take() {
            let _ = registry.deregister(&mut s);
        }
        if let Some((mut s, e)) = self.shm.take() {
            let _ = registry.deregister(&mut s);
            let _ = registry.deregister(&mut mio::unix::SourceFd(&e.wake_me.raw_fd()));
        }
        let lost = self.established;
        if lost && !self.wbuf.is_empty() {
            self.dropped += 1;
            self.wbuf.clear();
        }
        if lost && poison {
            self.poisoned = true;
        }
        self.established = false;
        self.greeting.clear();
        self.want_write = false;
        lost
    }

    /// The peer left the cluster: close the connection and drop what it had not sent (it would
    /// otherwise be retried for as long as the node is down).
    pub fn reset(&mut self, registry: &Registry) {
        if self.has_output() {
            tracing::info!(node = self.node, "data node {} is down; dropping what was queued for it", self.node);
        }
        self.broken(registry, false);
        self.wbuf.clear();
        self.poisoned = false;
    }

    /// Whether the peer closed its end (a one-way link never carries data back).
    pub fn peer_closed(&mut self) -> bool {
        if let Some((s, e)) = self.shm.as_mut() {
            e.wake_me.drain();
            return closed_by_peer(s);
        }
        self.stream.as_mut().is_some_and(closed_by_peer)
    }
}

/// Reads (and drops) what a non-blocking socket holds; true at end-of-file or on an error.
fn closed_by_peer(s: &mut impl io::Read) -> bool {
    let mut b = [0u8; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};
    use tern_kernel::signal::Block;

    /// A link that carried signals and then broke is poisoned: it drops everything (no
    /// reconnect that would let later signals overtake lost ones) until `reset`.
    #[test]
    fn a_link_that_broke_after_carrying_signals_drops_everything_until_reset() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let poll = mio::Poll::new().unwrap();
        let mut link = PeerLink::new(2, &addr, Token(1), tern_shm::Transporter::Tcp);
        let hello = PeerHello { node: 1, worker: 0, incarnation: 1, target_incarnation: 1, proof: None };
        let to = Addr::new(2, Block::Dist);
        assert!(link.push(to, &Signal::NodeHeartbeat { from: 1, incarnation: 1 }));
        let until = Instant::now() + Duration::from_secs(5);
        while link.has_output() {
            assert!(link.flush(poll.registry(), hello, 0, true));
            assert!(Instant::now() < until, "the link did not connect");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(link.established);
        // The peer goes away.
        let (peer, _) = listener.accept().unwrap();
        drop(peer);
        let until = Instant::now() + Duration::from_secs(5);
        while !link.peer_closed() {
            assert!(Instant::now() < until, "the close was not seen");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(link.broken(poll.registry(), true), "signals may have been lost");
        assert!(link.poisoned);
        assert!(!link.push(to, &Signal::NodeHeartbeat { from: 1, incarnation: 1 }), "dropped while poisoned");
        assert!(!link.has_output());
        assert!(link.flush(poll.registry(), hello, 1_000, true));
        assert!(link.stream.is_none(), "no reconnect while poisoned");
        // The map shows the peer failed or restarted: the link is usable again.
        link.reset(poll.registry());
        assert!(!link.poisoned);
        assert!(link.push(to, &Signal::NodeHeartbeat { from: 1, incarnation: 1 }));
    }

    /// A peer on this host that offers shared memory is reached through it: the greeting and
    /// then the signals arrive in the ring as the same frames TCP would carry.
    #[test]
    fn a_peer_on_this_host_is_reached_through_shared_memory() {
        let port = 30_000 + (std::process::id() % 20_000) as u16;
        let l = tern_shm::listen(port).unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut e = tern_shm::serve(&s, tern_shm::RING_MIN).unwrap();
            let mut buf = Vec::new();
            let mut frames = Vec::new();
            let until = Instant::now() + Duration::from_secs(10);
            while frames.len() < 2 {
                e.recv_into(&mut buf, usize::MAX).unwrap();
                while let Some((payload, n)) = tern_wire::decode_frame(&buf).unwrap() {
                    frames.push(payload.to_vec());
                    buf.drain(..n);
                }
                assert!(Instant::now() < until, "frames did not arrive");
            }
            (frames, s)
        });
        let poll = mio::Poll::new().unwrap();
        let mut link = PeerLink::new(2, &format!("127.0.0.1:{port}"), Token(1), tern_shm::Transporter::Auto);
        let hello = PeerHello { node: 1, worker: 0, incarnation: 1, target_incarnation: 1, proof: None };
        let to = Addr::new(2, Block::Dist);
        assert!(link.push(to, &Signal::NodeHeartbeat { from: 1, incarnation: 1 }));
        assert!(link.flush(poll.registry(), hello, 0, true));
        assert!(link.is_shm() && !link.has_output());
        let (frames, _s) = server.join().unwrap();
        assert_eq!(PeerHello::decode(&frames[0]), Some(hello));
        let (got_to, sig) = tern_kernel::codec::decode_signal(&frames[1]).unwrap();
        assert_eq!(got_to, to);
        assert!(matches!(sig, Signal::NodeHeartbeat { from: 1, incarnation: 1 }));
        // With transporter = "tcp" the same peer is reached over TCP (here: nothing listens).
        let tcp = PeerLink::new(2, &format!("127.0.0.1:{port}"), Token(2), tern_shm::Transporter::Tcp);
        assert!(!tcp.try_shm);
    }

    /// Before a connection carried anything (the peer is still starting) a break keeps the
    /// buffer for the next attempt and does not poison the link.
    #[test]
    fn a_refused_connection_keeps_the_buffer() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let poll = mio::Poll::new().unwrap();
        let mut link = PeerLink::new(2, &format!("127.0.0.1:{port}"), Token(1), tern_shm::Transporter::Tcp);
        let hello = PeerHello { node: 1, worker: 0, incarnation: 1, target_incarnation: 1, proof: None };
        assert!(link.push(Addr::new(2, Block::Dist), &Signal::NodeHeartbeat { from: 1, incarnation: 1 }));
        let _ = link.flush(poll.registry(), hello, 0, true);
        assert!(!link.broken(poll.registry(), true));
        assert!(!link.poisoned && link.has_output());
    }
}
