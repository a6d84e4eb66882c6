//! The Redis front end (Rondis, interfaces.md §2): RESP2 over TCP, served by `tern api`, each Redis
//! key a row in ordinary tables of database `redis_<n>` (see `db`). A thin adapter over the native
//! client like the REST API: it never reaches into data-node internals (architecture.md §9).
//!
//! Connections are tokio tasks. All complete commands a read brings are parsed at once; runs of
//! GET and plain SET among them become one transaction of batched key operations, and the client
//! batches the frames of concurrent connections onto its data-node sockets, so pipelining and many
//! connections both turn into batches at the data node. A connection's unparsed bytes are bounded
//! (`RedisOptions::max_pending`, redis-server's `client-query-buffer-limit`, 1 GB), and so are the
//! open connections (`maxclients`) and how long one may sit idle (`timeout`); see `clients`.
//! Every other command runs in a Tern transaction of its own, or, between MULTI and EXEC, in
//! EXEC's one transaction (see `cmd`). Long commands yield between batches, so one connection
//! never holds a worker away from the others.

pub mod acl;
pub mod clients;
#[macro_use]
pub mod cmd;
pub mod commands;
pub mod db;
pub mod foreign;
pub mod glob;
pub mod keyspace;
pub mod ldouble;
pub mod pubsub;
pub mod rdb;
pub mod resp;

use crate::clients::{ClientInfo, Registry, lock};
use crate::cmd::RErr;
use crate::db::{Db, INLINE_MAX, KEY_MAX, Meta, TYPE_STRING};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_client::frontend::{ConnLimit, ConnSlot};
use tern_client::{AbortOption, Client, Exec, OpKind, OpResult, Scanner};

/// The redis-server version Tern answers as (HELLO, INFO): the command set of 7.0.
pub const REDIS_VERSION: &str = "7.0.0";

#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub listen: SocketAddr,
    /// tokio worker threads (`Rondis.NumThreads`).
    pub threads: usize,
    /// Databases 0..n (`Rondis.NumDatabases`; redis-server's default 16).
    pub databases: u32,
    /// `Rondis.Databases[].DirtyINCRDECR` per database index (accepted; see README).
    pub dirty_incr: Vec<bool>,
    /// How long an idle worker polls its sockets before it sleeps.
    pub spin: Duration,
    /// Bytes of received, not yet executed commands a connection may hold.
    pub max_pending: usize,
    pub limits: resp::Limits,
    /// Open connections at most (redis-server's `maxclients`, 10,000); more are refused with
    /// `-ERR max number of clients reached`.
    pub max_clients: usize,
    /// A connection idle this long is closed (redis-server's `timeout`; zero: never).
    pub timeout: Duration,
    /// The process's memory allocator, for INFO memory's `mem_allocator` (`tern` uses mimalloc).
    pub allocator: &'static str,
    /// Databases whose writes are answered only once on disk on every replica (`appendfsync
    /// always` for one database; `CONFIG SET tern-durable-databases` changes it at run time).
    pub durable_databases: Vec<u32>,
    /// The default user's password (redis-server's `requirepass`; None: no password, every
    /// connection signs in as `default`). `CONFIG SET requirepass` and `ACL SETUSER` change it.
    pub requirepass: Option<String>,
    /// A TLS port besides the plain one (redis-server's `tls-port`, `tls-cert-file`,
    /// `tls-key-file`, `tls-ca-cert-file`, `tls-auth-clients`).
    pub tls: Option<RedisTls>,
}

/// Redis over TLS: where, and the certificate files (re-read when they change).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisTls {
    pub listen: SocketAddr,
    pub files: tern_client::tls::TlsFiles,
}

/// How long a TLS client may take to finish its handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            listen: "127.0.0.1:6379".parse().expect("address"),
            threads: 1,
            databases: 16,
            dirty_incr: Vec::new(),
            spin: Duration::from_micros(50),
            max_pending: 1 << 30,
            limits: resp::Limits::default(),
            max_clients: 10_000,
            timeout: Duration::ZERO,
            allocator: "libc",
            durable_databases: Vec::new(),
            requirepass: None,
            tls: None,
        }
    }
}

/// Counters for INFO stats, commandstats and errorstats.
pub struct Stats {
    pub commands: AtomicU64,
    pub connections: AtomicU64,
    /// Connections refused at `maxclients`.
    pub rejected: AtomicU64,
    /// Per command of `cmd::COMMANDS`: calls, microseconds, rejected calls, failed calls.
    per_command: Vec<[AtomicU64; 4]>,
    /// Per command of `cmd::COMMANDS`: its latency (for `/metrics`).
    latency: Vec<tern_client::metrics::Histogram>,
    /// Error replies by their code (the first word: ERR, WRONGTYPE ...).
    errors: Mutex<std::collections::BTreeMap<String, u64>>,
    /// The data node's count of purged keys at the last CONFIG RESETSTAT (INFO's
    /// `expired_keys` counts from there, as redis-server's does).
    pub expired_base: AtomicU64,
    /// Commands that ran in a group another command led (`cmd::groups`), and groups of more
    /// than one command (INFO's `tern_grouped_commands`, `tern_command_groups`).
    pub grouped: AtomicU64,
    pub groups: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            commands: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            per_command: (0..cmd::command_count()).map(|_| Default::default()).collect(),
            latency: (0..cmd::command_count()).map(|_| Default::default()).collect(),
            errors: Mutex::default(),
            expired_base: AtomicU64::new(0),
            grouped: AtomicU64::new(0),
            groups: AtomicU64::new(0),
        }
    }
}

impl Stats {
    /// CONFIG RESETSTAT.
    pub fn reset(&self) {
        for c in [&self.commands, &self.connections, &self.rejected] {
            c.store(0, Ordering::Relaxed);
        }
        self.per_command.iter().flatten().for_each(|c| c.store(0, Ordering::Relaxed));
        self.latency.iter().for_each(|h| h.reset());
        lock(&self.errors).clear();
    }

    /// A command that ran, its time and its reply.
    pub fn record(&self, spec: &cmd::Spec, took: Duration, reply: &[u8]) {
        let i = cmd::index_of_spec(spec);
        let c = &self.per_command[i];
        c[0].fetch_add(1, Ordering::Relaxed);
        c[1].fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        self.latency[i].observe(took);
        if reply.first() == Some(&b'-') {
            c[3].fetch_add(1, Ordering::Relaxed);
            let text = String::from_utf8_lossy(&reply[1..reply.len().min(200)]);
            self.error(&text);
            tern_client::metrics::record_error("redis", text.trim_end());
        }
    }

    /// Calls of the fast GET/SET path.
    fn record_fast(&self, index: usize, calls: u64, took: Duration) {
        let c = &self.per_command[index];
        c[0].fetch_add(calls, Ordering::Relaxed);
        c[1].fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        self.latency[index].observe_n(calls, took);
    }

    /// The Prometheus exposition of these counters (`/metrics` of the API server).
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        use tern_client::metrics::{header, label};
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        header(out, "tern_redis_connections_total", "counter", "Redis connections accepted.");
        let _ = writeln!(out, "tern_redis_connections_total {}", get(&self.connections));
        header(out, "tern_redis_connections_rejected_total", "counter", "Redis connections refused at maxclients.");
        let _ = writeln!(out, "tern_redis_connections_rejected_total {}", get(&self.rejected));
        let used: Vec<usize> = (0..self.per_command.len())
            .filter(|&i| get(&self.per_command[i][0]) + get(&self.per_command[i][2]) > 0)
            .collect();
        let name = |i: usize| label(cmd::COMMANDS[i].name);
        // (series, help, slot of `per_command`)
        let series = [
            ("tern_redis_commands_total", "Redis commands run, by command.", 0),
            ("tern_redis_command_errors_total", "Redis commands answered with an error, by command.", 3),
            ("tern_redis_command_rejected_total", "Redis calls refused before they ran, by command.", 2),
        ];
        for (metric, help, slot) in series {
            header(out, metric, "counter", help);
            for &i in &used {
                let _ = writeln!(out, "{metric}{{command=\"{}\"}} {}", name(i), get(&self.per_command[i][slot]));
            }
        }
        header(out, "tern_redis_command_duration_seconds", "histogram", "Redis command latency, by command.");
        for &i in &used {
            self.latency[i].render("tern_redis_command_duration_seconds", &format!("command=\"{}\"", name(i)), out);
        }
        header(out, "tern_redis_errors_total", "counter", "Redis error replies by their code.");
        for (code, n) in self.errors() {
            let _ = writeln!(out, "tern_redis_errors_total{{code=\"{}\"}} {n}", label(&code));
        }
    }

    /// A call refused before it ran (wrong arity, unknown subcommand).
    pub fn reject(&self, index: usize) {
        self.per_command[index][2].fetch_add(1, Ordering::Relaxed);
    }

    /// An error reply, counted by its code.
    pub fn error(&self, text: &str) {
        let code: String = text.split([' ', '\r']).next().unwrap_or("ERR").chars().take(32).collect();
        *lock(&self.errors).entry(code).or_default() += 1;
    }

    /// (calls, microseconds, rejected, failed) of command `index`.
    pub fn command(&self, index: usize) -> (u64, u64, u64, u64) {
        let c = &self.per_command[index];
        let l = |i: usize| c[i].load(Ordering::Relaxed);
        (l(0), l(1), l(2), l(3))
    }

    pub fn errors(&self) -> Vec<(String, u64)> {
        lock(&self.errors).iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    pub fn error_total(&self) -> u64 {
        lock(&self.errors).values().sum()
    }
}

/// Settings `CONFIG SET` changes while serving.
pub struct Live {
    pub conns: ConnLimit,
    pub timeout_s: AtomicU64,
    pub max_bulk: AtomicUsize,
    pub max_pending: AtomicUsize,
    /// Connections running commands now (`tern_client::frontend::Busy`).
    pub busy: AtomicUsize,
}

/// How often a waiting connection looks at its idle time and at a changed `timeout`.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// Commands parsed from one read before they run (the rest waits in the buffer).
const PIPELINE_MAX: usize = 1024;

pub struct Server {
    pub client: Client,
    pub opts: RedisOptions,
    pub stats: Stats,
    pub started: Instant,
    pub port: u16,
    pub live: Live,
    pub clients: Registry,
    /// Keys connections WATCH.
    pub watches: Arc<cmd::Watches>,
    /// Connections blocked in BLPOP & co, per key.
    pub blockers: cmd::Blockers,
    /// Commands of one collection key waiting to run together (`cmd::groups`).
    pub groups: cmd::Groups,
    /// Subscribers here, and the change log that brings every API server's messages.
    pub pubsub: Arc<pubsub::PubSub>,
    dbs: Mutex<HashMap<u32, Arc<Db>>>,
    /// Databases whose writes commit durably (see `RedisOptions::durable_databases`).
    durable_dbs: Mutex<std::collections::BTreeSet<u32>>,
    /// Parameters CONFIG SET stored that have no Tern setting behind them (answered by CONFIG
    /// GET as redis-server would).
    pub(crate) config_stored: Mutex<std::collections::HashMap<&'static str, String>>,
    /// MONITOR connections' mailboxes (pruned when their connections are gone).
    pub(crate) monitors: Mutex<Vec<std::sync::Weak<pubsub::Mailbox>>>,
    pub(crate) monitoring: AtomicUsize,
    /// LASTSAVE's time (unix seconds): the last SAVE or BGSAVE, or the start.
    pub(crate) last_save: AtomicU64,
    /// This server, for tasks it spawns.
    me: std::sync::Weak<Server>,
    /// Users and their permissions (AUTH, ACL).
    pub acl: acl::Acl,
    /// The last connection id given out (plain and TLS connections share the sequence).
    next_id: AtomicU64,
}

/// Per-connection state.
pub struct Session {
    pub id: u64,
    pub db: u32,
    /// What other connections see of this one (CLIENT LIST) and its kill switch.
    pub info: Arc<ClientInfo>,
    /// Open SCAN and HSCAN cursors: cursor -> (database, the hash's `rondb_key` or 0, scan).
    pub cursors: HashMap<u64, (u32, u64, Scanner)>,
    pub next_cursor: u64,
    /// Replies in RESP3 (after `HELLO 3`).
    pub resp3: bool,
    /// Between MULTI and EXEC.
    pub multi: Option<cmd::Multi>,
    pub watch: Option<cmd::Watched>,
    /// The signed-in user (the default user until AUTH) as of `acl_generation`.
    pub user: Arc<acl::User>,
    /// Signed in: AUTH or HELLO AUTH succeeded, or the default user needs no password.
    pub authed: bool,
    pub acl_generation: u64,
    /// The connection's socket (-1: none), for a blocked command to notice the client left.
    pub fd: i32,
    /// Its pub/sub subscriptions (None: it never subscribed); also the mailbox of MONITOR.
    pub subs: Option<pubsub::Subs>,
    /// CLIENT REPLY: 0 on, 1 off, 2 skip the next command's reply, 3 skip this one's and the
    /// next one's (set by SKIP).
    pub reply: u8,
}

/// A command the pipeline path merges into one transaction.
enum Fast {
    Get(Vec<u8>),
    Set(Vec<u8>, Vec<u8>),
}

/// Whether a restricted user may run this GET or SET (its command and key rules).
fn fast_allowed(user: &acl::User, args: &[Vec<u8>]) -> bool {
    let (get, set) = cmd::get_set();
    let i = match args.first() {
        Some(a) if a.eq_ignore_ascii_case(b"get") => get,
        Some(a) if a.eq_ignore_ascii_case(b"set") => set,
        _ => return false,
    };
    user.check(&cmd::COMMANDS[i], args).is_ok()
}

/// The fast-path form of a command, taking its arguments (None: the command runs on its own).
fn fast(args: &mut [Vec<u8>]) -> Option<Fast> {
    match args.len() {
        2 if args[0].eq_ignore_ascii_case(b"get") && args[1].len() <= KEY_MAX => {
            Some(Fast::Get(std::mem::take(&mut args[1])))
        }
        3 if args[0].eq_ignore_ascii_case(b"set") && args[1].len() <= KEY_MAX && args[2].len() <= INLINE_MAX => {
            Some(Fast::Set(std::mem::take(&mut args[1]), std::mem::take(&mut args[2])))
        }
        _ => None,
    }
}

impl Server {
    pub fn new(client: Client, opts: RedisOptions, port: u16) -> Arc<Server> {
        let live = Live {
            conns: ConnLimit::new(opts.max_clients),
            timeout_s: AtomicU64::new(opts.timeout.as_secs()),
            max_bulk: AtomicUsize::new(opts.limits.max_bulk),
            max_pending: AtomicUsize::new(opts.max_pending),
            busy: AtomicUsize::new(0),
        };
        let opts_durable = opts.durable_databases.iter().copied().collect();
        let opts_requirepass = opts.requirepass.clone();
        let pubsub = pubsub::PubSub::new(client.clone());
        Arc::new_cyclic(|me| Server {
            client,
            opts,
            stats: Stats::default(),
            started: Instant::now(),
            port,
            live,
            clients: Registry::default(),
            watches: Arc::default(),
            blockers: cmd::Blockers::default(),
            groups: cmd::Groups::default(),
            pubsub,
            dbs: Mutex::default(),
            durable_dbs: Mutex::new(opts_durable),
            config_stored: Mutex::default(),
            monitors: Mutex::default(),
            monitoring: AtomicUsize::new(0),
            last_save: AtomicU64::new(db::now_ms() as u64 / 1000),
            me: me.clone(),
            acl: acl::Acl::new(opts_requirepass.as_deref()),
            next_id: AtomicU64::new(0),
        })
    }

    /// This server as an `Arc` (None while it is being dropped).
    pub fn me(&self) -> Option<Arc<Server>> {
        self.me.upgrade()
    }

    /// A write to `key` of database `db` (WATCH).
    pub fn touch(&self, db: u32, key: &[u8]) {
        self.watches.touch(db, key);
        self.blockers.wake(db, key);
    }

    /// The parser's limits as configured now.
    pub fn limits(&self) -> resp::Limits {
        resp::Limits { max_bulk: self.live.max_bulk.load(Ordering::Relaxed), ..self.opts.limits }
    }

    /// Database `index`, created on first use (its tables' DDL is awaited, not blocked on).
    pub async fn db(&self, index: u32) -> Result<Arc<Db>, RErr> {
        if let Some(d) = lock(&self.dbs).get(&index) {
            return Ok(d.clone());
        }
        let d = Arc::new(db::open(&self.client, index).await?);
        // Under the durable set's lock (taken before the databases', as when it changes).
        let durable = lock(&self.durable_dbs);
        self.mark_durable(&d, durable.contains(&index));
        lock(&self.dbs).insert(index, d.clone());
        Ok(d)
    }

    /// Makes writes to a database's tables commit durably, or no longer.
    fn mark_durable(&self, d: &Db, on: bool) {
        for t in [&d.keys, &d.values, &d.hashes, &d.lists, &d.sets, &d.zsets] {
            self.client.set_table_durable(t.table.id, on);
        }
    }

    /// The databases whose writes commit durably.
    pub fn durable_databases(&self) -> Vec<u32> {
        lock(&self.durable_dbs).iter().copied().collect()
    }

    /// Replaces the set of databases whose writes commit durably.
    pub fn set_durable_databases(&self, dbs: std::collections::BTreeSet<u32>) {
        let mut cur = lock(&self.durable_dbs);
        for d in lock(&self.dbs).values() {
            self.mark_durable(d, dbs.contains(&d.index));
        }
        *cur = dbs;
    }

    pub fn is_open(&self, index: u32) -> bool {
        lock(&self.dbs).contains_key(&index)
    }

    /// Serves on a bound listener until the process ends; with `tls`, every connection first
    /// completes a TLS handshake (within `TLS_HANDSHAKE_TIMEOUT`).
    pub async fn serve(self: Arc<Self>, listener: tokio::net::TcpListener) {
        self.serve_with(listener, None).await
    }

    async fn serve_with(
        self: Arc<Self>,
        listener: tokio::net::TcpListener,
        tls: Option<Arc<tern_client::tls::Reloading>>,
    ) {
        self.pubsub.start_refresh();
        loop {
            let (stream, peer) = tern_client::frontend::accept(&listener).await;
            self.stats.connections.fetch_add(1, Ordering::Relaxed);
            let Some(slot) = self.live.conns.try_acquire() else {
                self.stats.rejected.fetch_add(1, Ordering::Relaxed);
                if tls.is_none() {
                    tokio::spawn(refuse(stream));
                }
                continue;
            };
            let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
            let me = self.clone();
            match &tls {
                None => {
                    tokio::spawn(async move {
                        let laddr = stream.local_addr().unwrap_or(me.opts.listen);
                        if let Ok(s) = Sock::new(stream) {
                            me.serve_conn(s, peer, laddr, id, slot).await;
                        }
                    });
                }
                Some(t) => {
                    let acceptor = t.acceptor();
                    tokio::spawn(async move {
                        let laddr = stream.local_addr().unwrap_or(me.opts.listen);
                        match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                            Ok(Ok(s)) => me.serve_conn(Sock::tls(s), peer, laddr, id, slot).await,
                            Ok(Err(e)) => tracing::debug!(%peer, "Redis TLS handshake failed: {e}"),
                            Err(_) => tracing::debug!(%peer, "Redis TLS handshake timed out"),
                        }
                    });
                }
            }
        }
    }

    /// Serves one connection. `_slot` holds its place under `maxclients` until the task ends
    /// (also by a panic, which fails this connection only).
    async fn serve_conn(self: Arc<Self>, stream: Sock, peer: SocketAddr, laddr: SocketAddr, id: u64, _slot: ConnSlot) {
        let reg = self.clients.add(ClientInfo::new(id, peer, laddr));
        let info = reg.info.clone();
        let user = self.acl.user("default").unwrap_or_else(|| Arc::new(acl::User::default_user()));
        let mut sess = Session {
            authed: !self.acl.auth_required(),
            acl_generation: self.acl.generation(),
            user,
            id,
            db: 0,
            info: info.clone(),
            cursors: HashMap::new(),
            next_cursor: 0,
            resp3: false,
            multi: None,
            watch: None,
            fd: stream.raw_fd(),
            subs: None,
            reply: 0,
        };
        let mut parser = resp::Parser::default();
        let mut buf: Vec<u8> = Vec::with_capacity(16 << 10);
        let mut out: Vec<u8> = Vec::with_capacity(16 << 10);
        loop {
            let limits = self.limits();
            let mut cmds = Vec::new();
            let mut used = 0;
            let mut fatal = None;
            while cmds.len() < PIPELINE_MAX {
                match parser.next(&buf[used..], &limits) {
                    Ok(resp::Parsed::Incomplete { used: u }) => {
                        used += u;
                        break;
                    }
                    Ok(resp::Parsed::Empty { used: u }) => used += u,
                    Ok(resp::Parsed::Command { args, used: u }) => {
                        cmds.push(args);
                        used += u;
                    }
                    Err(e) => {
                        fatal = Some(e.0);
                        break;
                    }
                }
            }
            buf.drain(..used);
            // A full pipeline leaves complete commands in the buffer: run them before reading.
            let more_ready = cmds.len() == PIPELINE_MAX;
            let mut open = true;
            if !cmds.is_empty() {
                let _busy = tern_client::frontend::Busy::enter(&self.live.busy, self.opts.threads);
                open = self.run_pipeline(&mut sess, cmds, &mut out).await;
            }
            if open && fatal.is_none() && buf.len() + parser.held() > self.live.max_pending.load(Ordering::Relaxed) {
                fatal = Some(
                    "ERR Protocol error: the connection's pending commands are over the query buffer limit".into(),
                );
            }
            if let Some(e) = &fatal {
                resp::error(&mut out, e);
            }
            // Messages for a subscriber go after the replies of the commands before them.
            let mail_left = sess.subs.as_ref().is_some_and(|s| s.mailbox.drain(sess.resp3, &mut out, 1 << 20));
            if !out.is_empty() {
                if stream.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
                if out.capacity() > 1 << 20 {
                    out.shrink_to(16 << 10);
                }
            }
            if fatal.is_some() {
                stream.linger_close().await;
                return;
            }
            if !open || info.is_killed() {
                return;
            }
            if more_ready || mail_left {
                continue;
            }
            if buf.len() < used.max(1) && buf.capacity() > 4 << 20 {
                buf.shrink_to(16 << 10);
            }
            buf.reserve(16 << 10);
            // Other connections' queued data-node requests go now rather than when the worker
            // parks: a worker that always finds work (many busy connections) may not park soon.
            tern_client::flush_deferred();
            let mailbox = sess.subs.as_ref().filter(|s| s.count() > 0 || s.monitor).map(|s| s.mailbox.clone());
            if !self.wait_input(&stream, &mut buf, &info, mailbox.as_deref()).await {
                return;
            }
        }
    }

    /// Waits for more bytes from the client, or (a subscriber's `mailbox`) for messages to send.
    /// False when the connection is to close: the client closed it, CLIENT KILL, or it was idle
    /// past `timeout` (closed without a reply, as redis-server does; never a subscriber, as
    /// there). `timeout` is read again every `IDLE_CHECK`, so CONFIG SET reaches connections
    /// that are already waiting.
    async fn wait_input(
        &self,
        stream: &Sock,
        buf: &mut Vec<u8>,
        info: &ClientInfo,
        mailbox: Option<&pubsub::Mailbox>,
    ) -> bool {
        loop {
            let mut timeout_ms = self.live.timeout_s.load(Ordering::Relaxed).saturating_mul(1000);
            if mailbox.is_some() {
                timeout_ms = 0;
            }
            let idle_ms = info.idle_ms();
            if timeout_ms > 0 && idle_ms >= timeout_ms {
                return false;
            }
            let mut slice = IDLE_CHECK;
            if timeout_ms > 0 {
                slice = slice.min(Duration::from_millis(timeout_ms - idle_ms));
            }
            let mail = async {
                match mailbox {
                    Some(m) => m.wake.notified().await,
                    None => std::future::pending().await,
                }
            };
            let ended = first_of(info.killed(), mail, std::future::pending::<()>());
            match first_of(stream.read_into(buf), ended, tokio::time::sleep(slice)).await {
                First::A(Ok(0) | Err(_)) | First::B(First::A(())) => return false,
                First::A(Ok(_)) => {
                    info.touch();
                    return true;
                }
                First::B(_) => return true,
                First::C(()) => {}
            }
        }
    }

    /// Runs parsed commands in order, merging runs of GET / plain SET into one transaction.
    /// Returns false when the connection is to close (QUIT).
    async fn run_pipeline(self: &Arc<Self>, sess: &mut Session, cmds: Vec<Vec<Vec<u8>>>, out: &mut Vec<u8>) -> bool {
        let mut run: Vec<Fast> = Vec::new();
        if !self.refresh_user(sess) {
            return false;
        }
        // A signed-in user's GET and SET take the merged path when the user may run them on
        // their keys (checked here for a restricted user); anything else, and a denied command
        // (answered NOPERM), runs on its own.
        let merge = sess.authed;
        let unrestricted = sess.user.unrestricted();
        // With keyspace notifications on, every write goes through its command (which raises
        // its events).
        let notify_off = self.pubsub.notify_flags() == 0;
        for mut args in cmds {
            if merge
                && notify_off
                && sess.reply == 0
                && self.monitoring.load(Ordering::Relaxed) == 0
                && sess.multi.is_none()
                && (sess.resp3 || sess.subs.as_ref().is_none_or(|s| s.count() == 0))
                && (unrestricted || fast_allowed(&sess.user, &args))
                && let Some(f) = fast(&mut args)
            {
                // A GET of a key SET earlier in the current run starts a new run, so it sees
                // the SET.
                if let Fast::Get(k) = &f
                    && run.iter().any(|r| matches!(r, Fast::Set(w, _) if w == k))
                {
                    self.run_fast(sess, std::mem::take(&mut run), out).await;
                }
                run.push(f);
                continue;
            }
            if !run.is_empty() {
                self.run_fast(sess, std::mem::take(&mut run), out).await;
            }
            if !self.command(sess, args, out).await {
                return false;
            }
        }
        if !run.is_empty() {
            self.run_fast(sess, run, out).await;
        }
        true
    }

    async fn run_fast(self: &Arc<Self>, sess: &mut Session, run: Vec<Fast>, out: &mut Vec<u8>) {
        let start = out.len();
        self.run_fast_resp2(sess, run, out).await;
        if sess.resp3 {
            let r3 = resp::to_resp3(&out[start..], resp::Resp3Shape::Plain);
            out.truncate(start);
            out.extend(r3);
        }
    }

    async fn run_fast_resp2(self: &Arc<Self>, sess: &mut Session, mut run: Vec<Fast>, out: &mut Vec<u8>) {
        self.stats.commands.fetch_add(run.len() as u64, Ordering::Relaxed);
        let t0 = Instant::now();
        let gets = run.iter().filter(|f| matches!(f, Fast::Get(_))).count() as u64;
        let (get_i, set_i) = cmd::get_set();
        sess.info.last_cmd.store(if gets > 0 { get_i } else { set_i } as u32, Ordering::Relaxed);
        let db = match self.db(sess.db).await {
            Ok(d) => d,
            Err(e) => {
                run.iter().for_each(|_| resp::error(out, &e.0));
                return;
            }
        };
        let mut ops = Vec::with_capacity(run.len());
        for f in &mut run {
            let op = match f {
                Fast::Get(k) => db::read_meta(&db, k, OpKind::Read),
                // The value moves into the row (only the key is needed afterwards).
                Fast::Set(k, v) => db::write_meta_owned(&db, k, Meta::string_owned(std::mem::take(v))),
            };
            match op {
                Ok(o) => ops.push(o),
                Err(e) => {
                    run.iter().for_each(|_| resp::error(out, &RErr::from(e.clone()).0));
                    return;
                }
            }
        }
        // A pipeline is not atomic in Redis: each data-node worker's share of the run is its own
        // transaction (see `run_split`).
        let results = self.run_split(ops).await;
        for (f, r) in run.iter().zip(results) {
            let meta = match r {
                OpResult::Row(b) => {
                    match if matches!(f, Fast::Set(..)) { Meta::decode_old(&db, &b) } else { Meta::decode(&db, &b) } {
                        Ok(m) => Some(m),
                        Err(e) => {
                            resp::error(out, &RErr::from(e).0);
                            continue;
                        }
                    }
                }
                OpResult::Error(e) => {
                    resp::error(out, &RErr::from(e).0);
                    continue;
                }
                _ => None,
            };
            match (f, meta) {
                (Fast::Set(k, _), old) => {
                    if let Some(m) = old
                        && m.id != 0
                    {
                        self.collect(vec![(db.clone(), m)]);
                    }
                    self.touch(db.index, k);
                    resp::simple(out, "OK");
                }
                (Fast::Get(_), None) => resp::null(out),
                (Fast::Get(_), Some(m)) if m.kind != TYPE_STRING => resp::error(out, cmd::WRONGTYPE),
                (Fast::Get(_), Some(m)) if m.parts == 0 => resp::bulk(out, &m.start),
                (Fast::Get(k), Some(m)) => {
                    let r = standalone!(self, |cx| self.get_string(cx, &db, k, Some(m.clone()), false).await);
                    match r {
                        Ok(Some(v)) => resp::bulk(out, &v),
                        Ok(None) => resp::null(out),
                        Err(e) => resp::error(out, &e.0),
                    }
                }
            }
        }
        let took = t0.elapsed() / run.len().max(1) as u32;
        self.stats.record_fast(get_i, gets, took * gets as u32);
        self.stats.record_fast(set_i, run.len() as u64 - gets, took * (run.len() as u64 - gets) as u32);
    }

    /// Runs independent operations as one transaction per data-node worker (a single-worker
    /// transaction needs no cross-thread hand-offs in the data node), all sent together; results
    /// in the order of `ops`, a failed transaction's error in each of its slots.
    pub async fn run_split(&self, ops: Vec<tern_client::KeyOp>) -> Vec<OpResult> {
        if ops.len() == 1 {
            // The common case (one command per connection): nothing to group.
            return match self.run_ops(ops).await {
                Ok(r) => r,
                Err(e) => vec![OpResult::Error(e)],
            };
        }
        let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let w = self.client.worker_of(op);
            match groups.iter_mut().find(|g| g.0 == w) {
                Some(g) => g.1.push(i),
                None => groups.push((w, vec![i])),
            }
        }
        let n = ops.len();
        let mut ops: Vec<Option<tern_client::KeyOp>> = ops.into_iter().map(Some).collect();
        let futs: Vec<_> = groups
            .iter()
            .map(|(_, idx)| {
                let group: Vec<tern_client::KeyOp> = idx.iter().map(|&i| ops[i].take().expect("once")).collect();
                self.run_ops(group)
            })
            .collect();
        let mut results: Vec<OpResult> = vec![OpResult::Done; n];
        for ((_, idx), r) in groups.iter().zip(join_all(futs).await) {
            match r {
                Ok(rs) => {
                    for (&i, r) in idx.iter().zip(rs) {
                        results[i] = r;
                    }
                }
                Err(e) => {
                    for &i in idx {
                        results[i] = OpResult::Error(e.clone());
                    }
                }
            }
        }
        results
    }

    /// One transaction of fast-path operations: reads in one batch; writes optimistically in one
    /// no-wait batch, retried in lock order (no deadlocks).
    async fn run_ops(&self, ops: Vec<tern_client::KeyOp>) -> Result<Vec<OpResult>, tern_client::TernError> {
        if ops.len() > 1 && ops.iter().any(|o| o.kind != OpKind::Read) {
            return cmd::write_txn(&self.client, ops).await;
        }
        // Reads take no locks and one write cannot deadlock: one transaction.
        self.client
            .run(|mut t| {
                let ops = ops.clone();
                async move { cmd::exec_batched(&mut t, ops, Exec::Commit, AbortOption::IgnoreError).await }
            })
            .await
    }
}

/// A client connection: a plain socket read and written directly (a read that leaves room in
/// the buffer drained the socket, so its readiness is cleared without the extra `recv` that
/// would only say EAGAIN), or a TLS stream. A connection's reads and writes never overlap (one
/// task serves it), so the TLS stream's lock is never contended.
enum Sock {
    Plain(PlainSock),
    Tls(Box<tokio::sync::Mutex<tern_client::tls::tokio_rustls::server::TlsStream<tokio::net::TcpStream>>>),
}

impl Sock {
    fn new(s: tokio::net::TcpStream) -> std::io::Result<Sock> {
        PlainSock::new(s).map(Sock::Plain)
    }

    fn tls(s: tern_client::tls::tokio_rustls::server::TlsStream<tokio::net::TcpStream>) -> Sock {
        Sock::Tls(Box::new(tokio::sync::Mutex::new(s)))
    }

    /// The TCP socket's descriptor.
    fn raw_fd(&self) -> i32 {
        use std::os::fd::AsRawFd;
        match self {
            Sock::Plain(p) => p.fd.get_ref().as_raw_fd(),
            Sock::Tls(t) => t.try_lock().map_or(-1, |g| g.get_ref().0.as_raw_fd()),
        }
    }

    async fn read_into(&self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        match self {
            Sock::Plain(p) => p.read_into(buf).await,
            Sock::Tls(t) => {
                use tokio::io::AsyncReadExt;
                if buf.capacity() == buf.len() {
                    buf.reserve(16 << 10);
                }
                t.lock().await.read_buf(buf).await
            }
        }
    }

    async fn write_all(&self, data: &[u8]) -> std::io::Result<()> {
        match self {
            Sock::Plain(p) => p.write_all(data).await,
            Sock::Tls(t) => {
                use tokio::io::AsyncWriteExt;
                let mut s = t.lock().await;
                s.write_all(data).await?;
                s.flush().await
            }
        }
    }

    async fn linger_close(&self) {
        match self {
            Sock::Plain(p) => p.linger_close().await,
            Sock::Tls(t) => {
                use tokio::io::AsyncWriteExt;
                // close_notify, then the socket's write side.
                let _ = tokio::time::timeout(std::time::Duration::from_secs(2), t.lock().await.shutdown()).await;
            }
        }
    }
}

struct PlainSock {
    fd: tokio::io::unix::AsyncFd<std::net::TcpStream>,
}

impl PlainSock {
    fn new(s: tokio::net::TcpStream) -> std::io::Result<PlainSock> {
        let s = s.into_std()?;
        s.set_nonblocking(true)?;
        // SAFETY: the TcpStream owns its descriptor for the whole life of the AsyncFd.
        Ok(PlainSock { fd: unsafe { tokio::io::unix::AsyncFd::register(s)? } })
    }

    /// Closes after an error reply without losing it: closing with unread input makes the kernel
    /// send a reset, which can destroy the reply in flight. So the write side shuts first and
    /// input is read and dropped until the client closes (at most 2 s or 64 MB).
    async fn linger_close(&self) {
        use std::os::fd::AsRawFd;
        // SAFETY: shuts down the write half of a descriptor this socket owns.
        unsafe { libc::shutdown(self.fd.get_ref().as_raw_fd(), libc::SHUT_WR) };
        let mut scratch = Vec::with_capacity(64 << 10);
        let mut dropped = 0usize;
        let _ = tokio::time::timeout(std::time::Duration::from_secs(2), async {
            while dropped < 64 << 20 {
                scratch.clear();
                match self.read_into(&mut scratch).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => dropped += n,
                }
            }
        })
        .await;
    }

    /// Appends what the socket has (at least one byte; 0 = closed) to `buf`'s spare capacity.
    async fn read_into(&self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        loop {
            let mut g = self.fd.readable().await?;
            let spare = buf.spare_capacity_mut();
            let room = spare.len();
            let r = g.try_io(|s| {
                // SAFETY: receives into the vector's spare capacity, at most its length.
                let n =
                    unsafe { libc::recv(s.get_ref().as_raw_fd(), spare.as_mut_ptr() as *mut libc::c_void, room, 0) };
                if n < 0 { Err(std::io::Error::last_os_error()) } else { Ok(n as usize) }
            });
            match r {
                Ok(Ok(n)) => {
                    // SAFETY: recv initialised the first n spare bytes.
                    unsafe { buf.set_len(buf.len() + n) };
                    if n > 0 && n < room {
                        g.clear_ready();
                    }
                    return Ok(n);
                }
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    async fn write_all(&self, mut data: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        while !data.is_empty() {
            match self.fd.get_ref().write(data) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => data = &data[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    let mut g = self.fd.writable().await?;
                    if let Ok(r) = g.try_io(|s| s.get_ref().write(data)) {
                        data = &data[r?..];
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Answers a connection over `maxclients` with redis-server's error and closes it.
async fn refuse(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    if stream.write_all(b"-ERR max number of clients reached\r\n").await.is_ok() {
        tern_client::frontend::linger_close(&mut stream).await;
    }
}

/// Which of three futures finished first.
enum First<A, B, C> {
    A(A),
    B(B),
    C(C),
}

/// Polls three futures until one finishes (in order a, b, c); the others are dropped.
async fn first_of<A: std::future::Future, B: std::future::Future, C: std::future::Future>(
    a: A,
    b: B,
    c: C,
) -> First<A::Output, B::Output, C::Output> {
    let (mut a, mut b, mut c) = (std::pin::pin!(a), std::pin::pin!(b), std::pin::pin!(c));
    std::future::poll_fn(|cx| {
        use std::task::Poll;
        if let Poll::Ready(v) = a.as_mut().poll(cx) {
            return Poll::Ready(First::A(v));
        }
        if let Poll::Ready(v) = b.as_mut().poll(cx) {
            return Poll::Ready(First::B(v));
        }
        if let Poll::Ready(v) = c.as_mut().poll(cx) {
            return Poll::Ready(First::C(v));
        }
        Poll::Pending
    })
    .await
}

/// Polls futures together; their outputs in order.
async fn join_all<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Option<std::pin::Pin<Box<F>>>> = futs.into_iter().map(|f| Some(Box::pin(f))).collect();
    let mut outs: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(outs.iter_mut()) {
            if let Some(fut) = f {
                match fut.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *o = Some(v);
                        *f = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending { std::task::Poll::Pending } else { std::task::Poll::Ready(()) }
    })
    .await;
    outs.into_iter().map(|o| o.expect("completed")).collect()
}

/// Binds the Redis port (a clear error when it is taken) and serves on a runtime of
/// `opts.threads` workers, blocking this thread until the process ends.
pub fn run(
    connect: impl FnOnce() -> Result<Client, String>,
    opts: RedisOptions,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), String> {
    run_on(None, connect, opts, ready)
}

/// `run`; with `Some(rt)` the connections are served by that runtime (one that already runs
/// elsewhere: the thread of a data-node worker that hosts front ends). On a runtime of its own,
/// data-node requests of all connections served in one executor pass leave in one write when
/// the worker runs out of work (cross-connection batching).
pub fn run_on(
    rt: Option<tokio::runtime::Handle>,
    connect: impl FnOnce() -> Result<Client, String>,
    opts: RedisOptions,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), String> {
    run_on_boxed(rt, Box::new(connect), opts, Box::new(ready))
}

/// `run_on`'s body. Not generic, so that the server's futures are compiled once, in this
/// crate, rather than again in every crate and test that starts it (futures are instantiated
/// where they are polled).
fn run_on_boxed(
    rt: Option<tokio::runtime::Handle>,
    connect: tern_client::frontend::Connect<'_>,
    opts: RedisOptions,
    ready: tern_client::frontend::Ready<'_>,
) -> Result<(), String> {
    check_exposure(&opts)?;
    tern_client::spinwatch::set_spin(opts.spin);
    let own = (opts.threads, "tern-redis", true);
    let serve = move |client, bound| serve(client, opts, bound);
    tern_client::frontend::run_front_end(rt, own, "Redis", connect, serve, ready)
}

/// Redis on an address other than loopback needs a password (as redis-server's protected mode,
/// but refusing to start rather than refusing each client).
pub fn check_exposure(opts: &RedisOptions) -> Result<(), String> {
    for listen in std::iter::once(opts.listen).chain(opts.tls.as_ref().map(|t| t.listen)) {
        if !listen.ip().is_loopback() && opts.requirepass.is_none() {
            return Err(format!(
                "refusing to serve Redis on {listen} without a password: set requirepass in the [redis] table of Tern's TOML, or listen on a loopback address",
            ));
        }
    }
    Ok(())
}

/// Binds, creates database 0 (SQL users see redis_0 at once), says where (`bound`), and serves
/// until the process ends.
async fn serve(client: Client, opts: RedisOptions, bound: impl FnOnce(SocketAddr)) -> Result<(), String> {
    let listener = tern_client::frontend::bind(opts.listen, "Redis").await?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let tls = match &opts.tls {
        Some(t) => {
            let reloading = Arc::new(tern_client::tls::Reloading::new(t.files.clone(), &[])?);
            let l = tern_client::frontend::bind(t.listen, "Redis TLS").await?;
            tracing::info!(addr = %l.local_addr().map_err(|e| e.to_string())?, "Redis TLS listening");
            Some((l, reloading))
        }
        None => None,
    };
    let server = Server::new(client, opts, addr.port());
    // Database 0's tables are made now. The data nodes may still be starting (a node's own
    // view of the cluster lags the management nodes' by a heartbeat): a temporary error is
    // retried for a minute rather than ending the front end.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match db::open(&server.client, 0).await {
            Ok(_) => break,
            Err(e) if e.is_temporary() && std::time::Instant::now() < until => {
                tracing::debug!("waiting for the data nodes: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(e) => return Err(RErr::from(e).0),
        }
    }
    server.clone().db(0).await.map_err(|e| e.0)?;
    let weak = Arc::downgrade(&server);
    tern_client::metrics::register(
        "redis",
        Arc::new(move |out: &mut String| {
            if let Some(s) = weak.upgrade() {
                s.stats.render(out);
            }
        }),
    );
    bound(addr);
    if let Some((l, reloading)) = tls {
        tokio::spawn(server.clone().serve_with(l, Some(reloading)));
    }
    server.serve(listener).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_beyond_loopback_needs_a_password() {
        let mut o = RedisOptions { listen: "0.0.0.0:6379".parse().unwrap(), ..Default::default() };
        assert!(check_exposure(&o).unwrap_err().contains("set requirepass"));
        o.requirepass = Some("x".into());
        assert!(check_exposure(&o).is_ok());
        for local in ["127.0.0.1:6379", "[::1]:6379"] {
            let o = RedisOptions { listen: local.parse().unwrap(), ..Default::default() };
            assert!(check_exposure(&o).is_ok(), "{local}");
        }
    }
}
