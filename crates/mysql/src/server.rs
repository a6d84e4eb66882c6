//! The MySQL server loop: handshake, authentication, and the commands a client sends first
//! (COM_QUERY, COM_INIT_DB, COM_PING, COM_QUIT). Issue 5 is in progress: statements beyond the
//! session basics (`SELECT @@version_comment`, `SELECT DATABASE()`, `SHOW DATABASES/TABLES`,
//! `USE`, `SET`, `CREATE/DROP DATABASE`, `BEGIN`/`COMMIT`/`ROLLBACK` outside a transaction) answer
//! error 1235 naming what is not supported yet.

use crate::proto::{self, Malformed, cap, com, status};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tern_client::{Client, DdlReq, ErrorCode, TernError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the server says it is (clients parse the leading MySQL version).
pub const SERVER_VERSION: &str = "8.0.35-tern";
pub const VERSION_COMMENT: &str = "Tern";

#[derive(Debug, Clone)]
pub struct MysqlOptions {
    pub listen: SocketAddr,
    pub threads: usize,
    /// Largest request payload (`max_allowed_packet`).
    pub max_packet: usize,
}

impl Default for MysqlOptions {
    fn default() -> Self {
        MysqlOptions { listen: "127.0.0.1:3306".parse().expect("address"), threads: 1, max_packet: 64 << 20 }
    }
}

pub struct MysqlServer {
    pub client: Client,
    pub opts: MysqlOptions,
    next_id: AtomicU32,
}

/// An error for the client: errno, SQLSTATE, message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    pub errno: u16,
    pub sqlstate: &'static str,
    pub message: String,
}

impl SqlError {
    pub fn new(errno: u16, sqlstate: &'static str, message: impl Into<String>) -> SqlError {
        SqlError { errno, sqlstate, message: message.into() }
    }
    fn unsupported(what: &str) -> SqlError {
        SqlError::new(1235, "42000", format!("This version of Tern doesn't yet support '{what}'"))
    }
}

impl From<TernError> for SqlError {
    fn from(e: TernError) -> SqlError {
        SqlError { errno: e.code.mysql_errno(), sqlstate: e.code.sqlstate(), message: e.message }
    }
}

/// A statement's answer.
enum Answer {
    Ok { affected: u64 },
    Rows { columns: Vec<proto::ColumnDef>, rows: Vec<Vec<Option<Vec<u8>>>> },
}

struct Session {
    capabilities: u32,
    db: Option<String>,
    status: u16,
}

impl MysqlServer {
    pub fn new(client: Client, opts: MysqlOptions) -> Arc<MysqlServer> {
        Arc::new(MysqlServer { client, opts, next_id: AtomicU32::new(1) })
    }

    pub async fn serve(self: Arc<Self>, listener: tokio::net::TcpListener) {
        loop {
            let (stream, _) = tern_client::frontend::accept(&listener).await;
            let me = self.clone();
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move { me.serve_conn(stream, id).await });
        }
    }

    async fn serve_conn(self: Arc<Self>, mut s: tokio::net::TcpStream, id: u32) {
        let mut buf = Vec::with_capacity(16 << 10);
        let mut scramble = [0u8; 20];
        fill_scramble(&mut scramble, id);
        let mut out = Vec::new();
        proto::put_packets(&mut out, 0, &proto::handshake_v10(SERVER_VERSION, id, &scramble, status::AUTOCOMMIT));
        if s.write_all(&out).await.is_err() {
            return;
        }
        // Handshake response (sequence 1), maybe an auth switch.
        let Some((seq, payload)) = self.read_payload(&mut s, &mut buf).await else { return };
        let hr = match proto::parse_handshake_response(&payload) {
            Ok(h) => h,
            Err(Malformed(why)) => {
                let _ = self.send_err(&mut s, seq.wrapping_add(1), &SqlError::new(1043, "08S01", why)).await;
                return;
            }
        };
        let mut seq = seq.wrapping_add(1);
        let mut auth = hr.auth.clone();
        if hr.plugin.as_deref().is_some_and(|p| p != proto::NATIVE_PASSWORD) {
            let mut out = Vec::new();
            proto::put_packets(&mut out, seq, &proto::auth_switch(&scramble));
            if s.write_all(&out).await.is_err() {
                return;
            }
            let Some((s2, p)) = self.read_payload(&mut s, &mut buf).await else { return };
            seq = s2.wrapping_add(1);
            auth = p;
        }
        // Accounts arrive with issue 5's CREATE USER; until then `root` without a password.
        if hr.user != "root" || !proto::native_password_ok(None, &scramble, &auth) {
            let e = SqlError::new(
                1045,
                "28000",
                format!(
                    "Access denied for user '{}'@'localhost' (using password: {})",
                    hr.user,
                    if auth.is_empty() { "NO" } else { "YES" }
                ),
            );
            let _ = self.send_err(&mut s, seq, &e).await;
            return;
        }
        let mut sess = Session {
            capabilities: hr.capabilities & proto::SERVER_CAPABILITIES,
            db: None,
            status: status::AUTOCOMMIT,
        };
        if let Some(db) = hr.database
            && let Err(e) = self.use_db(&mut sess, &db)
        {
            let _ = self.send_err(&mut s, seq, &e).await;
            return;
        }
        let mut out = Vec::new();
        proto::put_packets(&mut out, seq, &proto::ok_packet(0, 0, sess.status, 0, ""));
        if s.write_all(&out).await.is_err() {
            return;
        }
        // Commands: each starts a new sequence at 0.
        loop {
            let Some((_, payload)) = self.read_payload(&mut s, &mut buf).await else { return };
            let Some(&cmd) = payload.first() else { return };
            let arg = &payload[1..];
            let mut out = Vec::new();
            match cmd {
                com::QUIT => return,
                com::PING => {
                    proto::put_packets(&mut out, 1, &proto::ok_packet(0, 0, sess.status, 0, ""));
                }
                com::FIELD_LIST => {
                    // Column listing for completion (mysql client without -A): none yet, just the end.
                    let end = if sess.capabilities & cap::DEPRECATE_EOF != 0 {
                        proto::eof_ok_packet(sess.status, 0)
                    } else {
                        proto::eof_packet(sess.status, 0)
                    };
                    proto::put_packets(&mut out, 1, &end);
                }
                com::SET_OPTION => {
                    // Multi-statements on/off: answered with EOF, as MySQL does.
                    proto::put_packets(&mut out, 1, &proto::eof_packet(sess.status, 0));
                }
                com::INIT_DB => {
                    let db = String::from_utf8_lossy(arg).into_owned();
                    match self.use_db(&mut sess, &db) {
                        Ok(()) => proto::put_packets(&mut out, 1, &proto::ok_packet(0, 0, sess.status, 0, "")),
                        Err(e) => proto::put_packets(&mut out, 1, &proto::err_packet(e.errno, e.sqlstate, &e.message)),
                    };
                }
                com::QUERY => {
                    let sql = String::from_utf8_lossy(arg).into_owned();
                    match self.query(&mut sess, &sql).await {
                        Ok(Answer::Ok { affected }) => {
                            proto::put_packets(&mut out, 1, &proto::ok_packet(affected, 0, sess.status, 0, ""));
                        }
                        Ok(Answer::Rows { columns, rows }) => {
                            let deprecate_eof = sess.capabilities & cap::DEPRECATE_EOF != 0;
                            proto::put_text_resultset(&mut out, 1, deprecate_eof, sess.status, &columns, &rows);
                        }
                        Err(e) => {
                            proto::put_packets(&mut out, 1, &proto::err_packet(e.errno, e.sqlstate, &e.message));
                        }
                    }
                }
                other => {
                    let e = SqlError::new(1047, "08S01", format!("Unknown command {other:#04x}"));
                    proto::put_packets(&mut out, 1, &proto::err_packet(e.errno, e.sqlstate, &e.message));
                }
            }
            if s.write_all(&out).await.is_err() {
                return;
            }
        }
    }

    /// The next whole payload (None: the connection closed or sent an oversized or broken packet).
    async fn read_payload(&self, s: &mut tokio::net::TcpStream, buf: &mut Vec<u8>) -> Option<(u8, Vec<u8>)> {
        loop {
            match proto::take_payload(buf, self.opts.max_packet) {
                Ok(Some((seq, payload, used))) => {
                    buf.drain(..used);
                    return Some((seq, payload));
                }
                Ok(None) => {}
                Err(Malformed(why)) => {
                    let e = SqlError::new(
                        1153,
                        "08S01",
                        format!("Got a packet bigger than 'max_allowed_packet' bytes ({why})"),
                    );
                    let _ = self.send_err(s, 1, &e).await;
                    return None;
                }
            }
            buf.reserve(16 << 10);
            match s.read_buf(buf).await {
                Ok(0) | Err(_) => return None,
                Ok(_) => {}
            }
        }
    }

    async fn send_err(&self, s: &mut tokio::net::TcpStream, seq: u8, e: &SqlError) -> std::io::Result<()> {
        let mut out = Vec::new();
        proto::put_packets(&mut out, seq, &proto::err_packet(e.errno, e.sqlstate, &e.message));
        s.write_all(&out).await
    }

    fn refresh(&self) {
        tern_client::flush_deferred();
        let c = self.client.clone();
        let _ = tokio::task::block_in_place(|| c.refresh_catalog());
    }

    fn use_db(&self, sess: &mut Session, db: &str) -> Result<(), SqlError> {
        if !self.client.databases().iter().any(|d| d == db) {
            self.refresh();
            if !self.client.databases().iter().any(|d| d == db) {
                return Err(SqlError::new(1049, "42000", format!("Unknown database '{db}'")));
            }
        }
        sess.db = Some(db.to_string());
        Ok(())
    }

    fn ddl(&self, req: DdlReq) -> Result<(), SqlError> {
        tern_client::flush_deferred();
        let c = self.client.clone();
        tokio::task::block_in_place(|| c.ddl(req)).map(|_| ()).map_err(SqlError::from)
    }

    async fn query(&self, sess: &mut Session, sql: &str) -> Result<Answer, SqlError> {
        let q = sql.trim().trim_end_matches(';').trim();
        let words: Vec<&str> = q.split_whitespace().collect();
        let lower: Vec<String> = words.iter().map(|w| w.to_ascii_lowercase()).collect();
        let l: Vec<&str> = lower.iter().map(String::as_str).collect();
        let one = |name: &str, value: Option<&str>| Answer::Rows {
            columns: vec![proto::ColumnDef::expr(name, proto::ty::VAR_STRING, 256)],
            rows: vec![vec![value.map(|v| v.as_bytes().to_vec())]],
        };
        let ident = |w: &str| w.trim_matches('`').to_string();
        match l.as_slice() {
            [] => Err(SqlError::new(1065, "42000", "Query was empty")),
            ["select", "@@version_comment", rest @ ..] if rest.is_empty() || rest == ["limit", "1"] => {
                Ok(one("@@version_comment", Some(VERSION_COMMENT)))
            }
            ["select", v] if *v == "@@version" || *v == "version()" => Ok(one(words[1], Some(SERVER_VERSION))),
            ["select", "database()"] => Ok(one("DATABASE()", sess.db.as_deref())),
            ["select", n] if n.parse::<i64>().is_ok() => Ok(Answer::Rows {
                columns: vec![proto::ColumnDef::expr(words[1], proto::ty::LONGLONG, 20)],
                rows: vec![vec![Some(n.as_bytes().to_vec())]],
            }),
            ["show", "databases"] | ["show", "schemas"] => {
                self.refresh();
                let mut dbs = self.client.databases();
                dbs.push("information_schema".into());
                dbs.sort();
                Ok(Answer::Rows {
                    columns: vec![proto::ColumnDef::expr("Database", proto::ty::VAR_STRING, 256)],
                    rows: dbs.into_iter().map(|d| vec![Some(d.into_bytes())]).collect(),
                })
            }
            ["show", "tables"] => {
                let db = sess.db.clone().ok_or_else(|| SqlError::new(1046, "3D000", "No database selected"))?;
                self.refresh();
                let mut tables = self.client.tables(&db);
                tables.sort();
                Ok(Answer::Rows {
                    columns: vec![proto::ColumnDef::expr(&format!("Tables_in_{db}"), proto::ty::VAR_STRING, 256)],
                    rows: tables.into_iter().map(|t| vec![Some(t.into_bytes())]).collect(),
                })
            }
            ["use", _] => {
                self.use_db(sess, &ident(words[1]))?;
                Ok(Answer::Ok { affected: 0 })
            }
            ["set", ..] => Ok(Answer::Ok { affected: 0 }),
            ["begin"] | ["start", "transaction"] | ["commit"] | ["rollback"] => Ok(Answer::Ok { affected: 0 }),
            ["create", "database" | "schema", rest @ ..] => {
                let (if_not_exists, name) = match rest {
                    ["if", "not", "exists", _] => (true, words[5]),
                    [_] => (false, words[2]),
                    _ => return Err(SqlError::unsupported(q)),
                };
                match self.ddl(DdlReq::CreateDatabase { name: ident(name), if_not_exists }) {
                    Err(e) if e.errno == ErrorCode::DatabaseExists.mysql_errno() => Err(SqlError::new(
                        1007,
                        "HY000",
                        format!("Can't create database '{}'; database exists", ident(name)),
                    )),
                    r => r.map(|_| Answer::Ok { affected: 1 }),
                }
            }
            ["drop", "database" | "schema", rest @ ..] => {
                let (if_exists, name) = match rest {
                    ["if", "exists", _] => (true, words[4]),
                    [_] => (false, words[2]),
                    _ => return Err(SqlError::unsupported(q)),
                };
                let name = ident(name);
                match self.ddl(DdlReq::DropDatabase { name: name.clone(), if_exists }) {
                    Err(e) if e.errno == ErrorCode::NoSuchDatabase.mysql_errno() => Err(SqlError::new(
                        1008,
                        "HY000",
                        format!("Can't drop database '{name}'; database doesn't exist"),
                    )),
                    r => {
                        r?;
                        if sess.db.as_deref() == Some(name.as_str()) {
                            sess.db = None;
                        }
                        Ok(Answer::Ok { affected: 0 })
                    }
                }
            }
            [first, ..] => Err(SqlError::unsupported(&format!("{} statements", first.to_uppercase()))),
        }
    }
}

/// A per-connection challenge (not secret-grade: it only has to differ between connections).
fn fill_scramble(s: &mut [u8; 20], id: u32) {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    let mut rng = tern_types::rng::Rng::new(t as u64 ^ ((id as u64) << 32) ^ std::process::id() as u64);
    for b in s.iter_mut() {
        // Printable, non-NUL bytes, as MySQL servers send.
        *b = 0x21 + rng.below(0x5e) as u8;
    }
}

/// Binds the MySQL port (a clear error when it is taken) and serves on a runtime of
/// `opts.threads` workers, blocking this thread until the process ends.
pub fn run(
    connect: impl FnOnce() -> Result<Client, String>,
    opts: MysqlOptions,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), String> {
    let rt = tern_client::frontend::runtime(opts.threads, "tern-mysql", false)?;
    rt.block_on(async move {
        let client = tokio::task::block_in_place(connect)?;
        let listener = tern_client::frontend::bind(opts.listen, "MySQL").await?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        ready(addr);
        MysqlServer::new(client, opts).serve(listener).await;
        Ok(())
    })
}
