//! The MySQL server loop: handshake, authentication, and the commands of a connection
//! (COM_QUERY, the prepared-statement commands, COM_INIT_DB, COM_PING, COM_FIELD_LIST,
//! COM_PROCESS_KILL, COM_QUIT, ...), with the connection limits MySQL has: `max_connections`
//! (1040 before the handshake), `connect_timeout` for the handshake, `wait_timeout` /
//! `interactive_timeout` for idle connections (4031 then close), and `KILL`.

use crate::proto::{self, Malformed, cap, com, status};
use std::net::SocketAddr;

/// Prepared statements one connection may hold (max_prepared_stmt_count).
pub const STMTS_MAX: usize = 16_382;
use crate::conns::{Conn, Conns};
use crate::proto::ColumnDef;
use crate::session::{Answer, Session, Stmt};
use crate::stream::Stream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tern_client::Client;
use tern_types::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub use crate::VERSION_COMMENT;
/// What the server says it is (clients parse the leading MySQL version).
pub use tern_sql::{SERVER_VERSION, SqlError};

#[derive(Debug, Clone)]
pub struct MysqlOptions {
    pub listen: SocketAddr,
    pub threads: usize,
    /// Largest request payload (`max_allowed_packet`).
    pub max_packet: usize,
    /// Open connections at most (`max_connections`; SET GLOBAL changes it while serving).
    pub max_connections: usize,
    /// Initial global values of system variables (`wait_timeout`, `max_query_memory`,
    /// `max_execution_time`, ...), as if set with SET GLOBAL at start.
    pub globals: Vec<(String, Value)>,
    /// How long a new connection may take to authenticate (MySQL's `connect_timeout`, 10 s).
    pub connect_timeout: std::time::Duration,
    /// TLS after the client's SSLRequest (`[mysql] tls_cert` / `tls_key`); files are re-read when
    /// they change.
    pub tls: Option<tern_client::tls::TlsFiles>,
    /// Refuse clients that do not switch to TLS (MySQL's `require_secure_transport`).
    pub require_secure_transport: bool,
    /// root's password, set at start when root has none (`tern up --root-password`).
    pub root_password: Option<String>,
    /// The RSA private key (PEM) for `caching_sha2_password`'s full authentication without TLS
    /// (MySQL's `caching_sha2_password_private_key_path`); None: a key made at the first need.
    pub rsa_private_key: Option<std::path::PathBuf>,
    /// The first connection id (`CONNECTION_ID()`, the process list, KILL). Front ends of
    /// several processes behind one port (the data nodes of a cluster) start at
    /// `node id << 24 + 1`, so ids are unique across them (16M connections per process life).
    pub first_connection_id: u32,
}

impl Default for MysqlOptions {
    fn default() -> Self {
        MysqlOptions {
            listen: "127.0.0.1:3306".parse().expect("address"),
            threads: 1,
            max_packet: 64 << 20,
            max_connections: crate::conns::MAX_CONNECTIONS_DEFAULT,
            globals: Vec::new(),
            connect_timeout: std::time::Duration::from_secs(10),
            tls: None,
            require_secure_transport: false,
            root_password: None,
            rsa_private_key: None,
            first_connection_id: 1,
        }
    }
}

/// By user: the stored password it was cached for and SHA256(SHA256(password)).
type Sha2Cache = std::collections::HashMap<String, (Vec<u8>, [u8; 32])>;

pub struct MysqlServer {
    pub client: Client,
    globals: crate::session::Globals,
    pub opts: MysqlOptions,
    next_id: AtomicU32,
    pub conns: Arc<Conns>,
    /// Connections running a command now (`tern_client::frontend::Busy`).
    busy: std::sync::atomic::AtomicUsize,
    tls: Option<Arc<tern_client::tls::Reloading>>,
    /// `caching_sha2_password`: SHA256(SHA256(password)) of accounts that signed in fully on this
    /// server (a changed stored password misses, and the entry is replaced at the next full one).
    sha2_cache: std::sync::Mutex<Sha2Cache>,
    /// The RSA key pair of `caching_sha2_password` without TLS (`rsa_auth`), once needed.
    rsa: std::sync::OnceLock<Arc<crate::rsa_auth::RsaKeys>>,
    /// Statements, errors and latency for `/metrics`.
    pub metrics: crate::metrics::Metrics,
}

impl MysqlServer {
    /// Counts a statement that ran, and keeps its error for the status page.
    fn record(&self, sql: &str, t0: std::time::Instant, r: Result<(), &SqlError>) {
        self.metrics.record(sql, t0.elapsed(), r.is_err());
        if let Err(e) = r {
            tern_client::metrics::record_error("mysql", &format!("{} ({}): {}", e.errno, e.sqlstate, e.message));
        }
    }

    /// The server (Err: the TLS files cannot be used, naming the setting and file).
    pub fn new(client: Client, opts: MysqlOptions) -> Result<Arc<MysqlServer>, String> {
        let globals: crate::session::Globals = Default::default();
        globals.write().unwrap_or_else(|e| e.into_inner()).extend(opts.globals.iter().cloned());
        let conns = Arc::new(Conns::new(opts.max_connections));
        let tls = match &opts.tls {
            Some(files) => Some(Arc::new(tern_client::tls::Reloading::new(files.clone(), &[])?)),
            None => None,
        };
        let rsa = std::sync::OnceLock::new();
        if let Some(path) = &opts.rsa_private_key {
            let keys = crate::rsa_auth::RsaKeys::load(path)
                .map_err(|e| format!("caching_sha2_password_private_key_path: {e}"))?;
            let _ = rsa.set(Arc::new(keys));
        }
        let first_id = opts.first_connection_id.max(1);
        Ok(Arc::new(MysqlServer {
            client,
            opts,
            next_id: AtomicU32::new(first_id),
            globals,
            conns,
            busy: Default::default(),
            tls,
            sha2_cache: Default::default(),
            rsa,
            metrics: Default::default(),
        }))
    }

    pub async fn serve(self: Arc<Self>, listener: tokio::net::TcpListener) {
        loop {
            let (stream, peer) = tern_client::frontend::accept(&listener).await;
            let mut stream = Stream::Plain(stream);
            let me = self.clone();
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let host = peer.ip().to_string();
            me.metrics.connections.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let Some(reg) = me.conns.register(id, &host) else {
                    me.metrics.rejected.fetch_add(1, Ordering::Relaxed);
                    // MySQL answers an over-the-limit connection with 1040 in place of the
                    // handshake.
                    let e = SqlError::new(1040, "08004", "Too many connections");
                    if me.send_err(&mut stream, 0, &e).await.is_ok() {
                        tern_client::frontend::linger_close(stream.tcp()).await;
                    }
                    return;
                };
                me.serve_conn(stream, &reg.conn).await;
            });
        }
    }

    async fn serve_conn(self: Arc<Self>, s: Stream, conn: &Arc<Conn>) {
        let mut buf = Vec::with_capacity(16 << 10);
        let Some((mut s, mut link, mut sess)) = self.open_session(s, &mut buf, conn).await else { return };
        // Commands: each starts a new sequence at 0.
        loop {
            conn.idle(sess.db.as_deref());
            let idle = sess.idle_timeout(link.interactive);
            let next = tokio::select! {
                p = tokio::time::timeout(idle, self.read_payload(&mut s, &mut buf)) => p,
                _ = conn.wake.notified() => Ok(None),
            };
            let payload = match next {
                Ok(Some((_, p))) => {
                    sess.refresh_grants().await;
                    p
                }
                Ok(None) => break,
                Err(_) => {
                    // MySQL 8.0.24+ says why before it closes an idle connection.
                    let e = SqlError::new(
                        4031,
                        "HY000",
                        "The client was disconnected by the server because of inactivity. See wait_timeout and interactive_timeout for configuring this behavior.",
                    );
                    if self.send_err(&mut s, 0, &e).await.is_ok() {
                        tern_client::frontend::linger_close(s.tcp()).await;
                    }
                    break;
                }
            };
            if conn.interrupt.connection_killed() {
                break;
            }
            let Some(&cmd) = payload.first() else { break };
            let arg = &payload[1..];
            conn.begin(command_name(cmd), (cmd == com::QUERY).then(|| process_info(arg)));
            let _busy = tern_client::frontend::Busy::enter(&self.busy, self.opts.threads);
            let mut out = Vec::new();
            let mut cx = Cx { s: &mut s, buf: &mut buf, sess: &mut sess, link: &mut link, conn, out: &mut out };
            match self.command(cmd, arg, &mut cx).await {
                Then::Reply => {}
                Then::Silent => continue,
                Then::Close => break,
            }
            if conn.interrupt.connection_killed() {
                // KILL CONNECTION: the statement that ran was interrupted; say why, then close.
                out.clear();
                proto::put_packets(&mut out, 1, &proto::err_packet(1927, "70100", "Connection was killed"));
                let _ = send(&mut s, &out).await;
                break;
            }
            if send(&mut s, &out).await.is_err() {
                break;
            }
        }
        // An open transaction of a closed connection rolls back (dropping it sends the rollback).
        drop(sess);
    }

    /// The handshake, sign-in (within connect_timeout), the account's grants and the initial
    /// database, answered with OK: the connection ready for commands. None: refused (its error
    /// sent) or gone.
    async fn open_session(
        &self,
        mut s: Stream,
        buf: &mut Vec<u8>,
        conn: &Arc<Conn>,
    ) -> Option<(Stream, Link, Session)> {
        let id = conn.id;
        let mut scramble = [0u8; 20];
        fill_scramble(&mut scramble);
        let mut out = Vec::new();
        let hello = proto::handshake_v10(SERVER_VERSION, id, &scramble, status::AUTOCOMMIT, self.tls.is_some());
        proto::put_packets(&mut out, 0, &hello);
        send(&mut s, &out).await.ok()?;
        // Handshake response (sequence 1), maybe an SSLRequest first and an auth switch, all
        // within connect_timeout.
        let Ok(Some((mut s, (seq, hr)))) =
            tokio::time::timeout(self.opts.connect_timeout, self.sign_in(s, buf, &scramble)).await
        else {
            return None;
        };
        let caps = hr.capabilities & proto::SERVER_CAPABILITIES;
        let link = Link {
            user: hr.user.clone(),
            caps,
            deprecate_eof: caps & cap::DEPRECATE_EOF != 0,
            // Several statements in one COM_QUERY only when the client asks (off by default).
            multi: caps & cap::MULTI_STATEMENTS != 0,
            interactive: hr.capabilities & cap::INTERACTIVE != 0,
        };
        let mut sess = self.session(id, &hr.user, conn);
        conn.set_user(&hr.user);
        sess.grants_gen = crate::users::generation();
        sess.grants = match crate::users::grants(&self.client, &hr.user, "localhost").await {
            Ok(g) => g,
            Err(e) => {
                let _ = self.send_err(&mut s, seq, &e).await;
                return None;
            }
        };
        if let Some(db) = hr.database
            && !db.is_empty()
            && let Err(e) = sess.use_db(&db).await
        {
            let _ = self.send_err(&mut s, seq, &e).await;
            return None;
        }
        let mut out = Vec::new();
        proto::put_packets(&mut out, seq, &proto::ok_packet(0, 0, sess.status(), 0, ""));
        send(&mut s, &out).await.ok()?;
        Some((s, link, sess))
    }

    /// Runs one command, its answer in `cx.out`.
    async fn command(&self, cmd: u8, arg: &[u8], cx: &mut Cx<'_>) -> Then {
        let out = &mut *cx.out;
        let sess = &mut *cx.sess;
        match cmd {
            com::QUIT => return Then::Close,
            com::PING => ok(out, sess),
            com::FIELD_LIST => field_list(out, sess, arg, cx.link.deprecate_eof),
            com::SET_OPTION => {
                // Multi-statements on (0) / off (1): answered with EOF, as MySQL does.
                match arg.first() {
                    Some(0) => cx.link.multi = true,
                    Some(1) => cx.link.multi = false,
                    _ => {}
                }
                proto::put_packets(out, 1, &proto::eof_packet(sess.status(), 0));
            }
            com::INIT_DB => match sess.use_db(&String::from_utf8_lossy(arg)).await {
                Ok(()) => ok(out, sess),
                Err(e) => err(out, &e),
            },
            com::QUERY => return self.query(arg, cx).await,
            com::STMT_PREPARE => stmt_prepare(out, sess, arg, cx.link.deprecate_eof).await,
            com::STMT_EXECUTE => match execute_args(sess, arg) {
                Ok((prep, sql, params)) => {
                    let t0 = std::time::Instant::now();
                    let r = sess.execute_stmt(&prep, &sql, &params).await;
                    self.record(&sql, t0, r.as_ref().map(|_| ()));
                    match r {
                        Ok(a) => put_answer(out, sess, a, cx.link.deprecate_eof, true),
                        Err(e) => err(out, &e),
                    }
                }
                Err(e) => err(out, &e),
            },
            com::STMT_SEND_LONG_DATA => {
                if arg.len() >= 6 {
                    let id = u32::from_le_bytes(arg[0..4].try_into().expect("4 bytes"));
                    let param = u16::from_le_bytes(arg[4..6].try_into().expect("2 bytes"));
                    if let Some(st) = sess.stmts.get_mut(&id) {
                        let d = st.long_data.entry(param).or_default();
                        if d.len() + arg.len() - 6 <= self.opts.max_packet {
                            d.extend_from_slice(&arg[6..]);
                        }
                    }
                }
                return Then::Silent;
            }
            com::STMT_CLOSE => {
                if arg.len() >= 4 {
                    sess.stmts.remove(&u32::from_le_bytes(arg[0..4].try_into().expect("4 bytes")));
                }
                return Then::Silent;
            }
            com::STMT_RESET => {
                let id = if arg.len() >= 4 { u32::from_le_bytes(arg[0..4].try_into().expect("4 bytes")) } else { 0 };
                match sess.stmts.get_mut(&id) {
                    Some(st) => {
                        st.long_data.clear();
                        ok(out, sess);
                    }
                    None => err(out, &unknown_stmt(id, "mysqld_stmt_reset")),
                }
            }
            // The old protocol's KILL <id>: a connection kill.
            com::PROCESS_KILL => match arg.get(..4) {
                Some(b) => match sess.kill(u32::from_le_bytes(b.try_into().expect("4 bytes")), false) {
                    Ok(()) => ok(out, sess),
                    Err(e) => err(out, &e),
                },
                None => err(out, &SqlError::new(1047, "08S01", "Unknown command")),
            },
            com::RESET_CONNECTION => {
                let db = sess.db.clone();
                let grants = sess.grants.take();
                *sess = self.session(cx.conn.id, &cx.link.user, cx.conn);
                sess.grants = grants;
                sess.db = db;
                ok(out, sess);
            }
            other => err(out, &SqlError::new(1047, "08S01", format!("Unknown command {other:#04x}"))),
        }
        Then::Reply
    }

    /// COM_QUERY. With CLIENT_MULTI_STATEMENTS (off unless the client asks) each statement's
    /// result in turn, all but the last with MORE_RESULTS_EXISTS; an error ends the run.
    async fn query(&self, arg: &[u8], cx: &mut Cx<'_>) -> Then {
        let text = tern_sql::lex::decode_statement(arg);
        let parts =
            if cx.link.multi && text.contains(';') { tern_sql::lex::split_statements(&text) } else { Vec::new() };
        if parts.len() > 1 {
            let mut seq = 1u8;
            let n = parts.len();
            for (i, part) in parts.into_iter().enumerate() {
                let more = if i + 1 < n { proto::status::MORE_RESULTS_EXISTS } else { 0 };
                let t0 = std::time::Instant::now();
                let r = cx.sess.query(&part).await;
                self.record(&part, t0, r.as_ref().map(|_| ()));
                match r {
                    Ok(Answer::LocalInfile(_)) => {
                        let e =
                            SqlError::new(1295, "HY000", "LOAD DATA LOCAL is not allowed among multiple statements");
                        proto::put_packets(cx.out, seq, &proto::err_packet(e.errno, e.sqlstate, &e.message));
                        break;
                    }
                    Ok(a) => seq = put_answer_at(cx.out, seq, more, cx.sess, a, cx.link.deprecate_eof, false),
                    Err(e) => {
                        proto::put_packets(cx.out, seq, &proto::err_packet(e.errno, e.sqlstate, &e.message));
                        break;
                    }
                }
            }
            return Then::Reply;
        }
        let sql = parts.into_iter().next().unwrap_or(text);
        let t0 = std::time::Instant::now();
        let r = cx.sess.query(&sql).await;
        self.record(&sql, t0, r.as_ref().map(|_| ()));
        match r {
            Ok(Answer::LocalInfile(job)) => match self.local_infile(cx.s, cx.buf, cx.sess, *job, cx.link.caps).await {
                Some(o) => *cx.out = o,
                None => return Then::Close,
            },
            Ok(a) => put_answer(cx.out, cx.sess, a, cx.link.deprecate_eof, false),
            Err(e) => err(cx.out, &e),
        }
        Then::Reply
    }

    /// root's password at start (`root_password`), and no port beyond loopback while root has
    /// none.
    async fn prepare_accounts(&self) -> Result<(), String> {
        if let Some(pw) = self.opts.root_password.as_deref().filter(|p| !p.is_empty())
            && crate::users::ensure_root_password(&self.client, pw).await.map_err(|e| e.message)?
        {
            tracing::info!("root's password set");
        }
        if !self.opts.listen.ip().is_loopback()
            && !crate::users::root_has_password(&self.client).await.map_err(|e| e.message)?
        {
            return Err(format!(
                "refusing to serve MySQL on {} while root has no password: start with --root-password (tern up) or set one with ALTER USER root IDENTIFIED BY '...', or listen on a loopback address",
                self.opts.listen
            ));
        }
        Ok(())
    }

    /// The sign-in after the server's handshake: TLS when the client asks (SSLRequest), the
    /// handshake response, a switch to the account's plugin, and the password check. Some((the
    /// next sequence number, the response)) when the client is in; None when it is refused
    /// (its error sent) or gone.
    async fn sign_in(
        &self,
        mut stream: Stream,
        buf: &mut Vec<u8>,
        scramble: &[u8; 20],
    ) -> Option<(Stream, (u8, proto::HandshakeResponse))> {
        let (mut seq, mut payload) = self.read_payload(&mut stream, buf).await?;
        if proto::is_ssl_request(&payload) {
            let Some(tls) = &self.tls else {
                let e = SqlError::new(1043, "08S01", "Bad handshake: TLS is not configured on this port");
                let _ = self.send_err(&mut stream, seq.wrapping_add(1), &e).await;
                return None;
            };
            let Stream::Plain(tcp) = stream else { return None };
            let io = crate::stream::Prefixed { pre: std::mem::take(buf), tcp };
            match tls.acceptor().accept(io).await {
                Ok(t) => stream = Stream::Tls(Box::new(t)),
                Err(e) => {
                    tracing::debug!("MySQL TLS handshake failed: {e}");
                    return None;
                }
            }
            (seq, payload) = self.read_payload(&mut stream, buf).await?;
        }
        let in_ = self.check_client(&mut stream, buf, scramble, seq, &payload).await?;
        Some((stream, in_))
    }

    async fn check_client(
        &self,
        s: &mut Stream,
        buf: &mut Vec<u8>,
        scramble: &[u8; 20],
        seq: u8,
        payload: &[u8],
    ) -> Option<(u8, proto::HandshakeResponse)> {
        let mut seq = seq.wrapping_add(1);
        if self.opts.require_secure_transport && !s.is_tls() {
            let e = SqlError::new(
                3159,
                "08004",
                "Connections using insecure transport are prohibited while --require_secure_transport=ON.",
            );
            let _ = self.send_err(s, seq, &e).await;
            return None;
        }
        let hr = match proto::parse_handshake_response(payload) {
            Ok(h) => h,
            Err(Malformed(why)) => {
                let _ = self.send_err(s, seq, &SqlError::new(1043, "08S01", why)).await;
                return None;
            }
        };
        // Accounts: `mysql.user` rows; `root` has no password until its row gives one.
        let account = match crate::users::lookup(&self.client, &hr.user, "localhost").await {
            Ok(a) => a,
            Err(e) => {
                let _ = self.send_err(s, seq, &e).await;
                return None;
            }
        };
        let known = account.is_some() || hr.user == "root";
        let plugin = account.as_ref().map(|a| a.plugin).unwrap_or(crate::users::Plugin::Native);
        let mut auth = hr.auth.clone();
        if hr.plugin.as_deref().is_some_and(|p| p != plugin.name()) {
            let mut out = Vec::new();
            proto::put_packets(&mut out, seq, &proto::auth_switch(plugin.name(), scramble));
            send(s, &out).await.ok()?;
            let (s2, p) = self.read_payload(s, buf).await?;
            seq = s2.wrapping_add(1);
            auth = p;
        }
        let stored = account.as_ref().and_then(|a| a.stored.clone());
        let ok = match plugin {
            _ if !known => false,
            crate::users::Plugin::Native => {
                let hash = account.as_ref().and_then(|a| a.native_hash());
                (stored.is_none() || hash.is_some()) && proto::native_password_ok(hash.as_ref(), scramble, &auth)
            }
            crate::users::Plugin::CachingSha2 => match &stored {
                None => auth.is_empty(),
                Some(_) if auth.is_empty() => false,
                Some(stored) => {
                    let cached = self
                        .sha2_cache
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .get(&hr.user)
                        .filter(|(for_stored, _)| for_stored == stored)
                        .map(|(_, h)| *h);
                    match cached {
                        Some(c) => {
                            // The challenge went out with a trailing NUL in the auth switch, and
                            // PyMySQL hashes it too.
                            let mut with_nul = scramble.to_vec();
                            with_nul.push(0);
                            let fast = proto::sha2_scramble_ok(&c, scramble, &auth)
                                || proto::sha2_scramble_ok(&c, &with_nul, &auth);
                            if fast {
                                let mut out = Vec::new();
                                proto::put_packets(&mut out, seq, &proto::SHA2_FAST_OK);
                                send(s, &out).await.ok()?;
                                seq = seq.wrapping_add(1);
                            }
                            fast
                        }
                        None => self.sha2_full_auth(s, buf, scramble, &mut seq, &hr.user, stored).await?,
                    }
                }
            },
        };
        if !ok {
            let e = SqlError::new(
                1045,
                "28000",
                format!(
                    "Access denied for user '{}'@'localhost' (using password: {})",
                    hr.user,
                    if auth.is_empty() { "NO" } else { "YES" }
                ),
            );
            let _ = self.send_err(s, seq, &e).await;
            return None;
        }
        Some((seq, hr))
    }

    /// caching_sha2_password's full authentication: the password itself, over TLS, or encrypted
    /// with the server's RSA key (`rsa_auth`); a good one is cached for the fast path. Some(whether
    /// it matches `stored`), None when the connection is refused (its error sent) or gone.
    async fn sha2_full_auth(
        &self,
        s: &mut Stream,
        buf: &mut Vec<u8>,
        scramble: &[u8; 20],
        seq: &mut u8,
        user: &str,
        stored: &[u8],
    ) -> Option<bool> {
        let mut out = Vec::new();
        proto::put_packets(&mut out, *seq, &proto::SHA2_FULL_AUTH);
        send(s, &out).await.ok()?;
        let (s3, mut p) = self.read_payload(s, buf).await?;
        *seq = s3.wrapping_add(1);
        if !s.is_tls() {
            let refuse = |why: &str| {
                SqlError::new(1045, "28000", format!("Access denied for user '{user}'@'localhost' ({why})"))
            };
            let Some(keys) = self.rsa_keys().await else {
                let e = refuse("the server's RSA key could not be made; connect with TLS");
                let _ = self.send_err(s, *seq, &e).await;
                return None;
            };
            if p == [crate::rsa_auth::REQUEST_PUBLIC_KEY] {
                let mut more = vec![0x01];
                more.extend_from_slice(keys.pem().as_bytes());
                let mut out = Vec::new();
                proto::put_packets(&mut out, *seq, &more);
                send(s, &out).await.ok()?;
                let (s4, q) = self.read_payload(s, buf).await?;
                *seq = s4.wrapping_add(1);
                p = q;
            }
            match keys.password(&p, scramble) {
                Some(mut pw) => {
                    pw.push(0);
                    p = pw;
                }
                None => {
                    // A client that sent its password in the clear (it
                    // thought the connection secure) gets MySQL's refusal.
                    let e = refuse("using password: YES");
                    let _ = self.send_err(s, *seq, &e).await;
                    return None;
                }
            }
        }
        let pw = p.strip_suffix(&[0]).unwrap_or(&p);
        let text = String::from_utf8_lossy(stored);
        let good = proto::sha2_stored_ok(&text, pw);
        if good {
            let h = tern_types::digest::sha256(&tern_types::digest::sha256(pw));
            let mut cache = self.sha2_cache.lock().unwrap_or_else(|e| e.into_inner());
            cache.insert(user.to_string(), (stored.to_vec(), h));
        }
        Some(good)
    }

    /// The RSA key pair of `caching_sha2_password` (made on tokio's blocking pool at the first
    /// need when none was configured).
    async fn rsa_keys(&self) -> Option<Arc<crate::rsa_auth::RsaKeys>> {
        if let Some(k) = self.rsa.get() {
            return Some(k.clone());
        }
        let made = tokio::task::spawn_blocking(crate::rsa_auth::RsaKeys::generate).await.ok()?;
        match made {
            Ok(k) => Some(self.rsa.get_or_init(|| Arc::new(k)).clone()),
            Err(e) => {
                tracing::warn!("cannot make the RSA key of caching_sha2_password: {e}");
                None
            }
        }
    }

    /// A fresh session of connection `conn` for `user`, starting from the global variables.
    fn session(&self, id: u32, user: &str, conn: &Arc<Conn>) -> Session {
        let mut sess = Session::new(self.client.clone(), id, user, self.opts.max_packet);
        sess.globals = self.globals.clone();
        sess.start_from_globals();
        sess.interrupt = conn.interrupt.clone();
        sess.conns = self.conns.clone();
        sess
    }

    /// LOAD DATA LOCAL INFILE: asks for the file, loads what arrives, answers OK or the error
    /// (after the client has sent the whole file). None: the connection is gone.
    async fn local_infile(
        &self,
        s: &mut Stream,
        buf: &mut Vec<u8>,
        sess: &mut Session,
        mut job: tern_sql::load::LoadJob,
        caps: u32,
    ) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        if caps & cap::LOCAL_FILES == 0 {
            let e = SqlError::new(1148, "42000", "The used command is not allowed with this MySQL version");
            proto::put_packets(&mut out, 1, &proto::err_packet(e.errno, e.sqlstate, &e.message));
            return Some(out);
        }
        let mut req = vec![0xFB];
        req.extend_from_slice(job.file.as_bytes());
        proto::put_packets(&mut out, 1, &req);
        send(s, &out).await.ok()?;
        let seq = loop {
            let (sq, chunk) = self.read_payload(s, buf).await?;
            if chunk.is_empty() {
                break sq.wrapping_add(1);
            }
            job.feed(&self.client, &chunk).await;
        };
        job.finish(&self.client).await;
        let mut out = Vec::new();
        match job.error {
            Some(e) => proto::put_packets(&mut out, seq, &proto::err_packet(e.errno, e.sqlstate, &e.message)),
            None => {
                sess.row_count = job.inserted as i64;
                let info = format!(
                    "Records: {}  Deleted: 0  Skipped: {}  Warnings: {}",
                    job.records, job.skipped, job.warnings
                );
                proto::put_packets(
                    &mut out,
                    seq,
                    &proto::ok_packet(job.inserted, 0, sess.status(), job.warnings.min(u16::MAX as u64) as u16, &info),
                )
            }
        };
        Some(out)
    }

    /// The next whole payload (None: the connection closed or sent an oversized or broken packet).
    async fn read_payload(&self, s: &mut Stream, buf: &mut Vec<u8>) -> Option<(u8, Vec<u8>)> {
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
                    if self.send_err(s, 1, &e).await.is_ok() {
                        tern_client::frontend::linger_close(s.tcp()).await;
                    }
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

    async fn send_err(&self, s: &mut Stream, seq: u8, e: &SqlError) -> std::io::Result<()> {
        let mut out = Vec::new();
        proto::put_packets(&mut out, seq, &proto::err_packet(e.errno, e.sqlstate, &e.message));
        send(s, &out).await
    }
}

/// A per-connection challenge from the OS's random source (getrandom(2)): an attacker who knew
/// it ahead could replay a recorded `mysql_native_password` answer.
fn fill_scramble(s: &mut [u8; 20]) {
    let mut raw = [0u8; 20];
    tern_client::os_random(&mut raw);
    for (b, r) in s.iter_mut().zip(raw) {
        // Printable, non-NUL bytes, as MySQL servers send.
        *b = 0x21 + r % 0x5e;
    }
}

/// Writes `b` and pushes it out (a TLS stream holds written bytes until flushed).
async fn send(s: &mut Stream, b: &[u8]) -> std::io::Result<()> {
    s.write_all(b).await?;
    s.flush().await
}

/// The statement text the process list shows: its first `INFO_MAX` bytes.
fn process_info(sql: &[u8]) -> String {
    const INFO_MAX: usize = 4096;
    String::from_utf8_lossy(&sql[..sql.len().min(INFO_MAX)]).into_owned()
}

/// The process-list name of command byte `cmd`.
fn command_name(cmd: u8) -> &'static str {
    match cmd {
        com::QUERY => "Query",
        com::STMT_PREPARE => "Prepare",
        com::STMT_EXECUTE => "Execute",
        com::STMT_CLOSE | com::STMT_RESET => "Reset stmt",
        com::PING => "Ping",
        com::INIT_DB => "Init DB",
        com::FIELD_LIST => "Field List",
        com::PROCESS_KILL => "Kill",
        com::QUIT => "Quit",
        _ => "Command",
    }
}

/// Binds the MySQL port (a clear error when it is taken) and serves on a runtime of
/// `opts.threads` workers, blocking this thread until the process ends.
pub fn run(
    connect: impl FnOnce() -> Result<Client, String>,
    opts: MysqlOptions,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), String> {
    run_on(None, connect, opts, ready)
}

/// `run`, on the given runtime (a data node's hosting worker) or, with None, on its own threads.
pub fn run_on(
    on: Option<tokio::runtime::Handle>,
    connect: impl FnOnce() -> Result<Client, String>,
    opts: MysqlOptions,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), String> {
    run_on_boxed(on, Box::new(connect), opts, Box::new(ready))
}

/// `run_on`'s body. Not generic, so that the whole server (its futures, the SQL engine's
/// futures below them) is compiled once, in this crate, rather than again in every crate and
/// test that starts a MySQL server (futures are instantiated where they are polled).
fn run_on_boxed(
    on: Option<tokio::runtime::Handle>,
    connect: tern_client::frontend::Connect<'_>,
    opts: MysqlOptions,
    ready: tern_client::frontend::Ready<'_>,
) -> Result<(), String> {
    let own = (opts.threads, "tern-mysql", false);
    // Certificate problems are reported before anything starts.
    if let Some(files) = &opts.tls {
        tern_client::tls::server_config(files, &[])?;
    }
    if let Some(path) = &opts.rsa_private_key {
        crate::rsa_auth::RsaKeys::load(path).map_err(|e| format!("caching_sha2_password_private_key_path: {e}"))?;
    }
    let serve = move |client, bound: tern_client::frontend::Bound| async move {
        let listen = opts.listen;
        let server = MysqlServer::new(client, opts)?;
        server.prepare_accounts().await?;
        let weak = Arc::downgrade(&server);
        tern_client::metrics::register(
            "mysql",
            Arc::new(move |out: &mut String| {
                if let Some(s) = weak.upgrade() {
                    s.metrics.render(s.conns.list().len(), out);
                }
            }),
        );
        let listener = tern_client::frontend::bind(listen, "MySQL").await?;
        bound(listener.local_addr().map_err(|e| e.to_string())?);
        server.serve(listener).await;
        Ok(())
    };
    tern_client::frontend::run_front_end(on, own, "MySQL", connect, serve, ready)
}

/// How a signed-in connection talks: what its client asked for at the handshake.
struct Link {
    user: String,
    caps: u32,
    deprecate_eof: bool,
    /// Several statements in one COM_QUERY (CLIENT_MULTI_STATEMENTS, COM_SET_OPTION).
    multi: bool,
    interactive: bool,
}

/// What one command works with: the connection's stream and read buffer, its session, and the
/// answer being built.
struct Cx<'a> {
    s: &'a mut Stream,
    buf: &'a mut Vec<u8>,
    sess: &'a mut Session,
    link: &'a mut Link,
    conn: &'a Arc<Conn>,
    out: &'a mut Vec<u8>,
}

/// What the connection does after a command.
enum Then {
    /// Send the answer.
    Reply,
    /// The command has no answer (COM_STMT_SEND_LONG_DATA, COM_STMT_CLOSE).
    Silent,
    Close,
}

fn ok(out: &mut Vec<u8>, sess: &Session) {
    proto::put_packets(out, 1, &proto::ok_packet(0, 0, sess.status(), 0, ""));
}

fn err(out: &mut Vec<u8>, e: &SqlError) {
    proto::put_packets(out, 1, &proto::err_packet(e.errno, e.sqlstate, &e.message));
}

/// COM_FIELD_LIST: a table's column definitions, for completion (mysql client without -A).
fn field_list(out: &mut Vec<u8>, sess: &Session, arg: &[u8], deprecate_eof: bool) {
    let table = String::from_utf8_lossy(arg.split(|&b| b == 0).next().unwrap_or(&[])).into_owned();
    let mut seq = 1;
    if let Ok(h) = sess.table(None, &table) {
        for (c, col) in h.table.columns.iter().enumerate().filter(|(_, c)| !c.hidden) {
            let mut def = tern_sql::plan::column_def(&h, c, &table, &col.name);
            def.schema = h.table.database.clone();
            let mut p = proto::column_def(&def);
            p.push(0xFB);
            seq = proto::put_packets(out, seq, &p);
        }
    }
    let end = if deprecate_eof { proto::eof_ok_packet(sess.status(), 0) } else { proto::eof_packet(sess.status(), 0) };
    proto::put_packets(out, seq, &end);
}

/// COM_STMT_PREPARE: the statement's id, its parameters and result columns (at most
/// STMTS_MAX statements per session).
async fn stmt_prepare(out: &mut Vec<u8>, sess: &mut Session, arg: &[u8], deprecate_eof: bool) {
    let sql = tern_sql::lex::decode_statement(arg);
    let prep = match sess.prepare_stmt(&sql).await {
        Ok(p) => p,
        Err(e) => return err(out, &e),
    };
    if sess.stmts.len() >= STMTS_MAX {
        let e = SqlError::new(
            1461,
            "42000",
            format!("Can't create more than max_prepared_stmt_count statements (current value: {STMTS_MAX})"),
        );
        return err(out, &e);
    }
    let id = sess.next_stmt;
    sess.next_stmt = sess.next_stmt.wrapping_add(1).max(1);
    let columns = prep.columns();
    let mut p = vec![0u8];
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&(columns.len() as u16).to_le_bytes());
    p.extend_from_slice(&(prep.params as u16).to_le_bytes());
    p.push(0);
    p.extend_from_slice(&0u16.to_le_bytes());
    let mut seq = proto::put_packets(out, 1, &p);
    if prep.params > 0 {
        for _ in 0..prep.params {
            let d = ColumnDef::expr("?", proto::ty::VAR_STRING, 0);
            seq = proto::put_packets(out, seq, &proto::column_def(&d));
        }
        if !deprecate_eof {
            seq = proto::put_packets(out, seq, &proto::eof_packet(sess.status(), 0));
        }
    }
    if !columns.is_empty() {
        for c in &columns {
            seq = proto::put_packets(out, seq, &proto::column_def(c));
        }
        if !deprecate_eof {
            proto::put_packets(out, seq, &proto::eof_packet(sess.status(), 0));
        }
    }
    sess.stmts.insert(id, Stmt { prep, sql: sql.into(), types: Vec::new(), long_data: Default::default() });
}

fn unknown_stmt(id: u32, what: &str) -> SqlError {
    SqlError::new(1243, "HY000", format!("Unknown prepared statement handler ({id}) given to {what}"))
}

/// A statement to execute: the prepared statement, its text and the parameter values.
type Execute = (std::sync::Arc<crate::session::Prepared>, std::sync::Arc<str>, Vec<Value>);

/// Parses COM_STMT_EXECUTE: the statement and its parameter values (types from this packet
/// or, when not re-sent, from the previous execution).
fn execute_args(sess: &mut Session, arg: &[u8]) -> Result<Execute, SqlError> {
    let bad = || SqlError::new(1210, "HY000", "Incorrect arguments to mysqld_stmt_execute");
    let mut r = proto::Reader::new(arg);
    let id = r.u32().map_err(|_| bad())?;
    let st = sess.stmts.get_mut(&id).ok_or_else(|| unknown_stmt(id, "mysqld_stmt_execute"))?;
    let _flags = r.u8().map_err(|_| bad())?;
    let _iterations = r.u32().map_err(|_| bad())?;
    let n = st.prep.params;
    let mut params = Vec::with_capacity(n);
    if n > 0 {
        let nulls = r.bytes(n.div_ceil(8)).map_err(|_| bad())?.to_vec();
        let bound = r.u8().map_err(|_| bad())?;
        if bound == 1 {
            st.types.clear();
            for _ in 0..n {
                let t = r.u8().map_err(|_| bad())?;
                let f = r.u8().map_err(|_| bad())?;
                st.types.push((t, f & 0x80 != 0));
            }
        }
        if st.types.len() != n {
            return Err(bad());
        }
        for i in 0..n {
            if nulls[i / 8] & (1 << (i % 8)) != 0 {
                params.push(Value::Null);
                continue;
            }
            if let Some(d) = st.long_data.get(&(i as u16)) {
                params.push(Value::Bytes(d.clone()));
                continue;
            }
            let (t, unsigned) = st.types[i];
            params.push(proto::binary_param(&mut r, t, unsigned).map_err(|_| bad())?);
        }
        st.long_data.clear();
    }
    Ok((st.prep.clone(), st.sql.clone(), params))
}

/// Writes a statement's answer: OK, or a result set in the text or the binary protocol.
fn put_answer(out: &mut Vec<u8>, sess: &Session, a: Answer, deprecate_eof: bool, binary: bool) {
    put_answer_at(out, 1, 0, sess, a, deprecate_eof, binary);
}

/// Writes an answer from sequence id `seq` with `more` added to its final status (the
/// MORE_RESULTS_EXISTS flag of multi-statement results); returns the next sequence id.
fn put_answer_at(
    out: &mut Vec<u8>,
    seq: u8,
    more: u16,
    sess: &Session,
    a: Answer,
    deprecate_eof: bool,
    binary: bool,
) -> u8 {
    let status = sess.status() | more;
    match a {
        Answer::Ok { affected, last_insert_id, info } => {
            let warnings = sess.warnings.len().min(u16::MAX as usize) as u16;
            proto::put_packets(out, seq, &proto::ok_packet(affected, last_insert_id, status, warnings, &info))
        }
        Answer::LocalInfile(_) => {
            let e = SqlError::new(1295, "HY000", "This command is not supported in this protocol yet");
            proto::put_packets(out, seq, &proto::err_packet(e.errno, e.sqlstate, &e.message))
        }
        Answer::Rows { columns, rows } => {
            let mut count = Vec::new();
            proto::put_lenenc_int(&mut count, columns.len() as u64);
            let mut seq = proto::put_packets(out, seq, &count);
            for c in &columns {
                seq = proto::put_packets(out, seq, &proto::column_def(c));
            }
            if !deprecate_eof {
                seq = proto::put_packets(out, seq, &proto::eof_packet(status, 0));
            }
            let mut p = Vec::new();
            for r in &rows {
                p.clear();
                if binary {
                    proto::binary_row(&mut p, &columns, r);
                } else {
                    for (v, c) in r.iter().zip(&columns) {
                        match proto::text_value(v, c) {
                            None => p.push(0xFB),
                            Some(b) => proto::put_lenenc_str(&mut p, &b),
                        }
                    }
                }
                seq = proto::put_packets(out, seq, &p);
            }
            let end = if deprecate_eof { proto::eof_ok_packet(status, 0) } else { proto::eof_packet(status, 0) };
            proto::put_packets(out, seq, &end)
        }
    }
}
