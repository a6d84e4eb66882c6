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
    /// The link broke after carrying signals: drop everything until `reset`.
    pub poisoned: bool,
    /// When the peer was last reported as suspected (for re-reporting while poisoned).
    pub suspected_ms: u64,
}

impl PeerLink {
    pub fn new(node: NodeId, host_port: &str, token: Token) -> PeerLink {
        let addr = host_port.to_socket_addrs().ok().and_then(|mut a| a.next());
        if addr.is_none() {
            tracing::error!(node, host_port, "cannot resolve the address of data node");
        }
        PeerLink {
            node,
            addr,
            token,
            stream: None,
            greeting: Vec::new(),
            established: false,
            wbuf: Vec::new(),
            want_write: false,
            retry_at_ms: 0,
            dropped: 0,
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
        if self.stream.is_none() {
            if now_ms < self.retry_at_ms {
                return true;
            }
            self.retry_at_ms = now_ms + RECONNECT_MS;
            let Some(addr) = self.addr else { return true };
            let Ok(mut s) = TcpStream::connect(addr) else { return true };
            let _ = s.set_nodelay(true);
            if registry.register(&mut s, self.token, Interest::READABLE | Interest::WRITABLE).is_err() {
                return true;
            }
            self.want_write = true;
            self.greeting.clear();
            let at = begin_frame(&mut self.greeting);
            hello.encode(&mut self.greeting);
            finish_frame(&mut self.greeting, at);
            self.established = false;
            self.stream = Some(s);
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

    /// The peer closed or the connection failed: drop it and what it had not sent.
    /// Returns whether signals may have been lost (a connection that had carried bytes broke;
    /// before that, e.g. while the peer starts, they wait for the next attempt). With `poison`
    /// such a link then drops everything until `reset` (the peer is in the write chains: its
    /// failure, or ours, must be declared before signals flow again).
    pub fn broken(&mut self, registry: &Registry, poison: bool) -> bool {
        if let Some(mut s) = self.stream.take() {
            let _ = registry.deregister(&mut s);
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
        let Some(s) = self.stream.as_mut() else { return false };
        let mut b = [0u8; 64];
        loop {
            match io::Read::read(s, &mut b) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return true,
            }
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
        let mut link = PeerLink::new(2, &addr, Token(1));
        let hello = PeerHello { node: 1, worker: 0, incarnation: 1, target_incarnation: 1 };
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

    /// Before a connection carried anything (the peer is still starting) a break keeps the
    /// buffer for the next attempt and does not poison the link.
    #[test]
    fn a_refused_connection_keeps_the_buffer() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let poll = mio::Poll::new().unwrap();
        let mut link = PeerLink::new(2, &format!("127.0.0.1:{port}"), Token(1));
        let hello = PeerHello { node: 1, worker: 0, incarnation: 1, target_incarnation: 1 };
        assert!(link.push(Addr::new(2, Block::Dist), &Signal::NodeHeartbeat { from: 1, incarnation: 1 }));
        let _ = link.flush(poll.registry(), hello, 0, true);
        assert!(!link.broken(poll.registry(), true));
        assert!(!link.poisoned && link.has_output());
    }
}
