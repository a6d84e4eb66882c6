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
//! A link that breaks drops what it had not sent (a broken link is a node failure, which the
//! membership protocol handles) and is re-opened, at most every `RECONNECT_MS`, when there is
//! something to send.

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
        }
    }

    /// Frames one signal into the link's buffer (false: dropped, the buffer is full).
    pub fn push(&mut self, to: Addr, sig: &Signal) -> bool {
        if self.wbuf.len() >= LINK_BUFFER_MAX {
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
    pub fn flush(&mut self, registry: &Registry, hello: PeerHello, now_ms: u64) -> bool {
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
            return !self.broken(registry);
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
    /// Returns whether unsent signals were dropped (a connection that had been established broke;
    /// before that, e.g. while the peer starts, they wait for the next attempt).
    pub fn broken(&mut self, registry: &Registry) -> bool {
        if let Some(mut s) = self.stream.take() {
            let _ = registry.deregister(&mut s);
        }
        let dropped = self.established && !self.wbuf.is_empty();
        if dropped {
            self.dropped += 1;
            self.wbuf.clear();
        }
        self.established = false;
        self.greeting.clear();
        self.want_write = false;
        dropped
    }

    /// The peer left the cluster: close the connection and drop what it had not sent (it would
    /// otherwise be retried for as long as the node is down).
    pub fn reset(&mut self, registry: &Registry) {
        if self.has_output() {
            tracing::info!(node = self.node, "data node {} is down; dropping what was queued for it", self.node);
        }
        self.broken(registry);
        self.wbuf.clear();
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
