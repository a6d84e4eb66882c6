//! Shared by the MySQL front-end tests: a data node and a Tern MySQL server on 127.0.0.1.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use tern_mysql::MysqlOptions;
use tern_mysql::proto::{self, cap};
use tern_runtime::{DataNode, DataNodeConfig};

/// Starts a data node and a MySQL server for it (`max_packet` = max_allowed_packet); returns the
/// server's port.
#[allow(dead_code)]
pub fn start(max_packet: usize) -> (tempfile::TempDir, DataNode, u16) {
    start_with(MysqlOptions { max_packet, ..MysqlOptions::default() })
}

/// Starts a data node and a MySQL server with `opts` (its listen address is replaced by a free
/// port on 127.0.0.1).
pub fn start_with(opts: MysqlOptions) -> (tempfile::TempDir, DataNode, u16) {
    let dir = tempfile::tempdir().unwrap();
    // TERN_TEST_TRANSPORT=hosted: the layout of `tern up` on one host, the MySQL front end on
    // worker 0's thread.
    let (host, rt) = tern_client::hosted::test_hosting();
    let n = DataNode::start_hosted(DataNodeConfig::local(dir.path(), 64 << 20), host).unwrap();
    let rt = rt.map(|rx| rx.recv_timeout(Duration::from_secs(20)).unwrap());
    assert!(n.wait_started(Duration::from_secs(20)));
    let addr = n.local_addr().to_string();
    let c = n.local_connector();
    tern_client::register_local_node(&addr, std::sync::Arc::new(move |w, s| Box::new(c.connect_to(w, s))));
    let (tx, rx) = std::sync::mpsc::channel();
    let opts = MysqlOptions { listen: "127.0.0.1:0".parse().unwrap(), ..opts };
    std::thread::spawn(move || {
        let connect = move || tern_client::connect_prefer_local(&addr).map_err(|e| e.to_string());
        tern_mysql::run_on(rt, connect, opts, |a| tx.send(a).unwrap()).unwrap()
    });
    let port = rx.recv_timeout(Duration::from_secs(20)).unwrap().port();
    (dir, n, port)
}

/// Runs `mariadb` against `port` with `args` and `sql` (the Debian client, which `.ci/run`
/// installs); (exit success, stdout, stderr).
#[allow(dead_code)]
pub fn mariadb(port: u16, args: &[&str], sql: &str) -> (bool, String, String) {
    use std::process::Command;
    let out = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-P", &port.to_string(), "-u", "root", "--batch", "--connect-timeout=10"])
        .args(args)
        .args(["-e", sql])
        .output()
        .expect("the mariadb client is needed: apt-get install -y mariadb-client");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A minimal MySQL client.
#[allow(dead_code)]
pub struct My {
    pub last_affected: u64,
    pub s: TcpStream,
    buf: Vec<u8>,
    eof_deprecated: bool,
}

#[derive(Debug, PartialEq)]
pub enum Res {
    Ok,
    Err(u16, String, String),
    Rows(Vec<String>, Vec<Vec<Option<String>>>),
}

#[allow(dead_code)]
impl My {
    pub fn raw(port: u16) -> My {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        My { last_affected: 0, s, buf: Vec::new(), eof_deprecated: true }
    }

    pub fn packet(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if let Some((seq, p, used)) = proto::take_payload(&self.buf, 1 << 30).unwrap() {
                self.buf.drain(..used);
                return Some((seq, p));
            }
            let mut b = [0u8; 65536];
            match self.s.read(&mut b) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&b[..n]),
            }
        }
    }

    /// Sends a payload; a server that already closed (after an error) is not a failure here: the
    /// test then checks what was answered.
    pub fn send(&mut self, seq: u8, payload: &[u8]) {
        let mut out = Vec::new();
        proto::put_packets(&mut out, seq, payload);
        let _ = self.s.write_all(&out);
    }

    /// Connects as `user` with `plugin`, optionally with a database; returns the server's answer.
    pub fn connect(port: u16, user: &str, db: Option<&str>, plugin: &str, eof_deprecated: bool) -> (My, Res) {
        let mut m = My::raw(port);
        m.eof_deprecated = eof_deprecated;
        let (seq, hs) = m.packet().unwrap();
        if hs[0] == 0xFF {
            // Refused before the handshake (max_connections).
            let r = m.result_from(hs);
            return (m, r);
        }
        assert_eq!((seq, hs[0]), (0, 10), "v10 handshake");
        // The server's capabilities: DEPRECATE_EOF only when both sides have it.
        let mut r = proto::Reader::new(&hs[1..]);
        r.nul_str().unwrap();
        r.bytes(4 + 8 + 1).unwrap();
        let lo = r.u16().unwrap() as u32;
        r.bytes(3).unwrap();
        let server_caps = lo | ((r.u16().unwrap() as u32) << 16);
        let eof_deprecated = eof_deprecated && server_caps & cap::DEPRECATE_EOF != 0;
        m.eof_deprecated = eof_deprecated;
        let mut caps = cap::PROTOCOL_41 | cap::SECURE_CONNECTION | cap::PLUGIN_AUTH | cap::LONG_PASSWORD;
        if eof_deprecated {
            caps |= cap::DEPRECATE_EOF;
        }
        if db.is_some() {
            caps |= cap::CONNECT_WITH_DB;
        }
        let mut p = Vec::new();
        p.extend_from_slice(&caps.to_le_bytes());
        p.extend_from_slice(&(1u32 << 24).to_le_bytes());
        p.push(45);
        p.extend_from_slice(&[0; 23]);
        p.extend_from_slice(user.as_bytes());
        p.push(0);
        p.push(0); // empty auth response
        if let Some(d) = db {
            p.extend_from_slice(d.as_bytes());
            p.push(0);
        }
        p.extend_from_slice(plugin.as_bytes());
        p.push(0);
        m.send(1, &p);
        let (seq, mut r) = m.packet().unwrap();
        if r[0] == 0xFE && r.len() > 1 {
            // Auth switch to mysql_native_password: answer with an empty password.
            assert!(r[1..].starts_with(proto::NATIVE_PASSWORD.as_bytes()));
            m.send(seq + 1, b"");
            r = m.packet().unwrap().1;
        }
        let res = m.result_from(r);
        (m, res)
    }

    /// Whether the session sends no EOF packets (CLIENT_DEPRECATE_EOF agreed).
    pub fn eof_deprecated(&self) -> bool {
        self.eof_deprecated
    }

    pub fn result_from(&mut self, first: Vec<u8>) -> Res {
        match first[0] {
            0x00 => {
                self.last_affected = proto::Reader::new(&first[1..]).lenenc_int().ok().flatten().unwrap_or(0);
                Res::Ok
            }
            // An EOF packet (COM_FIELD_LIST's end, COM_SET_OPTION's answer).
            0xFE if first.len() < 9 => Res::Ok,
            0xFF => {
                let errno = u16::from_le_bytes([first[1], first[2]]);
                let state = String::from_utf8_lossy(&first[4..9]).into_owned();
                Res::Err(errno, state, String::from_utf8_lossy(&first[9..]).into_owned())
            }
            _ => {
                let n = proto::Reader::new(&first).lenenc_int().unwrap().unwrap() as usize;
                let mut names = Vec::new();
                for _ in 0..n {
                    let (_, c) = self.packet().unwrap();
                    let mut r = proto::Reader::new(&c);
                    for _ in 0..4 {
                        r.lenenc_str().unwrap();
                    }
                    names.push(String::from_utf8_lossy(r.lenenc_str().unwrap()).into_owned());
                }
                if !self.eof_deprecated {
                    assert_eq!(self.packet().unwrap().1[0], 0xFE, "EOF after the columns");
                }
                let mut rows = Vec::new();
                loop {
                    let (_, p) = self.packet().unwrap();
                    // The end: an EOF packet, or with DEPRECATE_EOF an OK packet with the 0xFE
                    // header (longer when it carries session state, as MariaDB's do).
                    if p[0] == 0xFE && (p.len() < 9 || (self.eof_deprecated && p.len() < 0xFF_FFFF)) {
                        break;
                    }
                    if p[0] == 0xFF {
                        // An error while the rows were being sent.
                        return self.result_from(p);
                    }
                    let mut r = proto::Reader::new(&p);
                    let mut row = Vec::new();
                    for _ in 0..n {
                        if r.rest()[0] == 0xFB {
                            r.u8().unwrap();
                            row.push(None);
                        } else {
                            row.push(Some(String::from_utf8_lossy(r.lenenc_str().unwrap()).into_owned()));
                        }
                    }
                    rows.push(row);
                }
                Res::Rows(names, rows)
            }
        }
    }

    pub fn query(&mut self, sql: &str) -> Res {
        let mut p = vec![proto::com::QUERY];
        p.extend_from_slice(sql.as_bytes());
        self.send(0, &p);
        let (seq, first) = self.packet().expect("an answer");
        assert_eq!(seq, 1);
        self.result_from(first)
    }

    pub fn command(&mut self, cmd: u8, arg: &[u8]) -> Res {
        let mut p = vec![cmd];
        p.extend_from_slice(arg);
        self.send(0, &p);
        let first = self.packet().expect("an answer").1;
        self.result_from(first)
    }
}

#[allow(dead_code)]
pub fn rows(v: &[&[Option<&str>]]) -> Vec<Vec<Option<String>>> {
    v.iter().map(|r| r.iter().map(|c| c.map(str::to_string)).collect()).collect()
}

/// A MariaDB server in a temporary directory, stopped when dropped.
#[allow(dead_code)]
pub use tern_testkit::peers::Peer;

/// Starts MariaDB (mariadb-server, which `.ci/run` installs), retrying on another port when the
/// one picked was taken meanwhile.
#[allow(dead_code)]
pub fn start_mariadb() -> Peer {
    start_mariadb_with(false)
}

/// `start_mariadb`, with its privilege system on when `grants` (root has no password).
#[allow(dead_code)]
pub fn start_mariadb_with(grants: bool) -> Peer {
    tern_testkit::peers::mariadb(grants)
}
