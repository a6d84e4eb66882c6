//! Helpers for the Redis front-end tests: a data node and a Tern Redis server on 127.0.0.1, a real
//! redis-server to compare with, and a small RESP client.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use tern_redis::RedisOptions;
use tern_runtime::{DataNode, DataNodeConfig};

#[allow(unused_imports)]
pub use tern_client::hosted::test_hosted as hosted;

pub fn start_node(data_memory: u64) -> (tempfile::TempDir, DataNode, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = DataNodeConfig::local(dir.path(), data_memory);
    cfg.redo_segment_bytes = 4 << 20;
    // The layout of `tern up` on one host: the Redis front end on worker 0's thread.
    let (host, rt) = tern_client::hosted::test_hosting();
    let n = DataNode::start_hosted(cfg, host).unwrap();
    let rt = rt.map(|rx| rx.recv_timeout(Duration::from_secs(20)).unwrap());
    assert!(n.wait_started(Duration::from_secs(20)));
    let addr = n.local_addr().to_string();
    if let Some(rt) = rt {
        tern_client::hosted::register(&addr, rt);
    }
    let c = n.local_connector();
    tern_client::register_local_node(&addr, std::sync::Arc::new(move |w, s| Box::new(c.connect_to(w, s))));
    (dir, n, addr)
}

/// Starts Tern's Redis server for the data node at `addr`; returns its port.
pub fn start_tern(addr: &str, opts: RedisOptions) -> u16 {
    try_start_tern(addr, opts).unwrap()
}

/// `start_tern`, with the server's start-up error (a TLS port taken, say) as an `Err`.
pub fn try_start_tern(addr: &str, mut opts: RedisOptions) -> Result<u16, String> {
    opts.listen = "127.0.0.1:0".parse().unwrap();
    let addr = addr.to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let host = tern_client::hosted::registered(&addr);
    std::thread::spawn(move || {
        let connect = move || tern_client::connect_prefer_local(&addr).map_err(|e| e.to_string());
        let ready = tx.clone();
        if let Err(e) = tern_redis::run_on(host, connect, opts, move |a| ready.send(Ok(a)).unwrap()) {
            let _ = tx.send(Err(e));
        }
    });
    rx.recv_timeout(Duration::from_secs(20)).map_err(|e| e.to_string())?.map(|a| a.port())
}

/// A redis-server on a free port, stopped when dropped.
pub use tern_testkit::peers::Peer;
#[allow(unused_imports)]
pub use tern_testkit::ports::free_port;

/// Starts redis-server (the Debian package, which `.ci/run` installs).
pub fn start_peer() -> Peer {
    start_peer_with(&[])
}

/// `start_peer` with more redis-server arguments.
pub fn start_peer_with(extra: &[&str]) -> Peer {
    tern_testkit::peers::redis(extra)
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
    /// RESP3 `_`.
    Null,
    /// RESP3 `%`: key, value, key, value ...
    Map(Vec<Reply>),
    /// RESP3 `=`: format and text.
    Verbatim(Vec<u8>),
    /// RESP3 `,`: a double as text.
    Double(String),
    /// RESP3 `~`: a set.
    Set(Vec<Reply>),
    /// RESP3 `>`: a push (pub/sub).
    Push(Vec<Reply>),
}

impl Reply {
    pub fn bulk(s: &str) -> Reply {
        Reply::Bulk(Some(s.as_bytes().to_vec()))
    }
}

pub struct Conn {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Conn {
    pub fn open(port: u16) -> Conn {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        Conn { r: BufReader::new(s.try_clone().unwrap()), w: s }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).unwrap();
    }

    pub fn send(&mut self, args: &[&[u8]]) {
        let mut b = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            b.extend(format!("${}\r\n", a.len()).bytes());
            b.extend_from_slice(a);
            b.extend_from_slice(b"\r\n");
        }
        self.send_raw(&b);
    }

    pub fn cmd(&mut self, args: &[&[u8]]) -> Reply {
        self.send(args);
        self.read()
    }

    /// A command given as space-separated words.
    pub fn q(&mut self, line: &str) -> Reply {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        self.cmd(&words)
    }

    fn line(&mut self) -> String {
        let mut l = Vec::new();
        self.r.read_until(b'\n', &mut l).unwrap();
        assert!(l.ends_with(b"\r\n"), "truncated reply line: {l:?}");
        String::from_utf8(l[..l.len() - 2].to_vec()).unwrap()
    }

    pub fn read(&mut self) -> Reply {
        let l = self.line();
        let (t, rest) = l.split_at(1);
        match t {
            "+" => Reply::Simple(rest.into()),
            "-" => Reply::Error(rest.into()),
            ":" => Reply::Int(rest.parse().unwrap()),
            "$" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Reply::Bulk(None);
                }
                let mut b = vec![0; n as usize + 2];
                self.r.read_exact(&mut b).unwrap();
                b.truncate(n as usize);
                Reply::Bulk(Some(b))
            }
            "*" => {
                let n: i64 = rest.parse().unwrap();
                if n < 0 {
                    return Reply::Array(None);
                }
                Reply::Array(Some((0..n).map(|_| self.read()).collect()))
            }
            "_" => Reply::Null,
            "," => Reply::Double(rest.into()),
            "~" => {
                let n: usize = rest.parse().unwrap();
                Reply::Set((0..n).map(|_| self.read()).collect())
            }
            ">" => {
                let n: usize = rest.parse().unwrap();
                Reply::Push((0..n).map(|_| self.read()).collect())
            }
            "%" => {
                let n: usize = rest.parse().unwrap();
                Reply::Map((0..2 * n).map(|_| self.read()).collect())
            }
            "=" => {
                let n: usize = rest.parse().unwrap();
                let mut b = vec![0; n + 2];
                self.r.read_exact(&mut b).unwrap();
                b.truncate(n);
                Reply::Verbatim(b)
            }
            _ => panic!("bad reply line {l:?}"),
        }
    }

    /// The next reply, or None once the server has closed the connection (an EOF, or a reset
    /// because request bytes were left unread) before it.
    pub fn read_or_closed(&mut self) -> Option<Reply> {
        self.w.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        match self.r.fill_buf() {
            Ok([]) => None,
            Ok(_) => Some(self.read()),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => None,
            Err(e) => panic!("no reply and no close: {e}"),
        }
    }

    /// Closes the sending side (the server sees end of input after what was sent).
    pub fn shutdown_write(&mut self) {
        let _ = self.w.shutdown(std::net::Shutdown::Write);
    }

    /// Whether a reply (or its start) has arrived, without waiting.
    pub fn has_reply(&mut self) -> bool {
        if !self.r.buffer().is_empty() {
            return true;
        }
        self.w.set_nonblocking(true).unwrap();
        let mut b = [0u8; 1];
        let r = self.w.peek(&mut b);
        self.w.set_nonblocking(false).unwrap();
        matches!(r, Ok(n) if n > 0)
    }

    /// Whether the server closed the connection (reads until EOF or a timeout).
    pub fn closed(&mut self) -> bool {
        self.drain().is_some()
    }

    /// Reads until the server closes: how many bytes came and the first 100 of them, or None
    /// when it did not close within 60 s.
    pub fn drain(&mut self) -> Option<(usize, String)> {
        self.w.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let mut b = [0u8; 64 << 10];
        let (mut n, mut head) = (0, Vec::new());
        loop {
            match self.r.read(&mut b) {
                Ok(0) => return Some((n, String::from_utf8_lossy(&head).into())),
                Ok(k) => {
                    head.extend_from_slice(&b[..k.min(100 - head.len())]);
                    n += k;
                }
                // Unread request bytes make the kernel reset rather than close.
                Err(e) => {
                    return (e.kind() == std::io::ErrorKind::ConnectionReset)
                        .then(|| (n, String::from_utf8_lossy(&head).into()));
                }
            }
        }
    }
}
