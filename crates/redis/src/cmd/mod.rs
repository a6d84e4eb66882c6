//! The commands (interfaces.md §2) with redis-server 7's replies and error texts: the command
//! table (arity, key positions, subcommands), the dispatcher, and what every family shares
//! (error replies, argument parsing, reading and writing a key row and a string's overflow
//! parts). Every data command runs against a `Cx` (see `transactions`): alone in its own
//! transaction, or queued by MULTI and run with the others in EXEC's one transaction. GET and
//! plain SET runs from a pipeline are merged into one transaction (`Server::run_pipeline`).
//! The families live in `strings`, `keys`, `hashes`, `server`, `config` and `transactions`.

#[macro_use]
mod transactions;
mod acl_cmd;
mod blocking;
mod config;
mod dump;
mod groups;
mod hashes;
mod keys;
mod lists;
mod pubsub;
mod server;
mod sets;
mod strings;
mod zsets;

pub use blocking::Blockers;
pub use groups::Groups;
pub use zsets::{fmt_score, parse_score};

pub(crate) use transactions::{CR, Cx, Fail, Retry};
pub use transactions::{Multi, Watched, Watches, exec_batched, exec_ordered, exec_ordered_with, write_txn};

use crate::db::{self, Db, INLINE_MAX, KEY_MAX, Meta, TYPE_HASH, TYPE_STRING};
use crate::resp::{self, parse_int};
use crate::{Server, Session};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;
use tern_client::{ColumnUpdate, ErrorCode, KeyOp, OpKind, OpResult, TernError, UpdateExpr, Value};

pub use crate::commands::{
    COMMANDS, Kind, R, RErr, Spec, command_count, get_set, index_of, index_of_spec, keys_of, lookup,
};

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const NOT_INT: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
pub const SYNTAX: &str = "ERR syntax error";
const TOO_BIG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
const NO_SUCH_KEY: &str = "ERR no such key";

fn err(s: impl Into<String>) -> RErr {
    RErr(s.into())
}

/// A Redis error reply as a command failure.
fn fail<T>(s: impl Into<String>) -> CR<T> {
    Err(Fail::Reply(err(s)))
}

impl From<TernError> for RErr {
    fn from(e: TernError) -> RErr {
        match e.code {
            ErrorCode::DataMemoryFull => err("OOM command not allowed when used memory > 'maxmemory'."),
            ErrorCode::ConditionFailed => err(WRONGTYPE),
            _ => err(format!("ERR {}", e.message.replace(['\r', '\n'], " "))),
        }
    }
}

/// Work a long command (KEYS, SCAN, DBSIZE, FLUSHDB, HGETALL of a big hash ...) did since it
/// last let the worker serve other connections; past `PACE_BUDGET` units (about a millisecond
/// of work) it yields. Every batch of rows from the data node also ends with a yield.
#[derive(Debug, Default)]
pub(crate) struct Pace(u64);

const PACE_BUDGET: u64 = 1 << 20;

impl Pace {
    pub(crate) async fn charge(&mut self, units: u64) {
        self.0 += units;
        if self.0 >= PACE_BUDGET {
            self.0 = 0;
            tokio::task::yield_now().await;
        }
    }

    /// A batch is done: let others run.
    pub(crate) async fn batch_done(&mut self) {
        self.0 = 0;
        tokio::task::yield_now().await;
    }
}

fn int_arg(a: &[u8]) -> R<i64> {
    parse_int(a).ok_or_else(|| err(NOT_INT))
}

fn is(a: &[u8], word: &str) -> bool {
    a.eq_ignore_ascii_case(word.as_bytes())
}

fn check_key(key: &[u8]) -> R {
    if key.len() > KEY_MAX {
        return Err(err(format!("ERR key is too long: keys are limited to {KEY_MAX} bytes")));
    }
    Ok(())
}

fn row_of(r: Option<OpResult>) -> R<Option<Vec<u8>>> {
    match r {
        Some(OpResult::Row(b)) => Ok(Some(b)),
        Some(OpResult::NotFound) | Some(OpResult::Done) | None => Ok(None),
        Some(OpResult::Error(e)) => Err(e.into()),
    }
}

fn meta_of(db: &Db, r: Option<OpResult>) -> R<Option<Meta>> {
    match row_of(r)? {
        Some(b) => Ok(Some(Meta::decode(db, &b)?)),
        None => Ok(None),
    }
}

/// The replaced key row a `db::write_meta` returned (`Meta::decode_old`).
fn old_of(db: &Db, r: Option<OpResult>) -> R<Option<Meta>> {
    match row_of(r)? {
        Some(b) => Ok(Some(Meta::decode_old(db, &b)?)),
        None => Ok(None),
    }
}

fn update(db: &Db, key: &[u8], updates: Vec<ColumnUpdate>) -> Result<KeyOp, TernError> {
    db.keys.update(&[Value::Bytes(key.to_vec())], updates)
}

fn set_col(col: u16, v: Value) -> ColumnUpdate {
    ColumnUpdate { col, expr: UpdateExpr::Set(v) }
}

fn delete_key(db: &Db, key: &[u8]) -> Result<KeyOp, TernError> {
    let mut op = db.keys.delete(&[Value::Bytes(key.to_vec())])?;
    op.projection = Some(db::META.to_vec());
    Ok(op)
}

/// A hash key row's change counter (kept in `value_start`, unused by hashes otherwise), so that
/// every change of a hash changes its key row (WATCH compares key rows).
fn bump(meta: &mut Meta) {
    let n = parse_int(&meta.start).unwrap_or(0);
    meta.start = n.wrapping_add(1).to_string().into_bytes();
}

impl Server {
    /// A fresh `rondb_key` for a key's overflow or field rows.
    async fn new_id(&self, db: &Db) -> R<u64> {
        Ok(self.client.next_auto_increment_async(db.values.id()).await?)
    }

    /// Operations that write a string value under a key (key row plus overflow parts).
    async fn string_ops(&self, db: &Db, key: &[u8], value: &[u8], expiry: Option<i64>) -> R<Vec<KeyOp>> {
        let mut meta = Meta::string(&value[..value.len().min(INLINE_MAX)]);
        meta.len = value.len() as u64;
        meta.expiry = expiry;
        if value.len() > INLINE_MAX {
            meta.id = self.new_id(db).await?;
            meta.parts = db::parts_for(value.len());
            let id = meta.id;
            let mut ops = vec![db::write_meta_owned(db, key, meta)?];
            ops.extend(db::part_ops(db, id, value)?);
            Ok(ops)
        } else {
            Ok(vec![db::write_meta_owned(db, key, meta)?])
        }
    }

    /// Writes a string value under `key` (the key locked or about to be), replacing what was
    /// there; the replaced row's parts or fields go after the commit.
    pub(crate) async fn put_string(
        &self,
        cx: &mut Cx,
        db: &Arc<Db>,
        key: &[u8],
        value: &[u8],
        expiry: Option<i64>,
        last: bool,
    ) -> CR {
        let ops = self.string_ops(db, key, value, expiry).await?;
        let rs = cx.write(ops, last).await?;
        if let Some(old) = old_of(db, rs.into_iter().next())? {
            cx.garbage(db, old);
        }
        self.touched(cx, db.index, key, false);
        Ok(())
    }

    /// Deletes the overflow or field rows a replaced or deleted key left behind (nothing can
    /// reach them any more because no key row names them).
    pub async fn cleanup_now(&self, db: &Db, old: &Meta) -> R {
        let ops: Vec<KeyOp> = if old.kind != TYPE_STRING {
            self.child_deletes(db, old).await?
        } else {
            (0..old.parts).map(|i| db::part_delete(db, old.id, i)).collect::<Result<_, _>>()?
        };
        for chunk in ops.chunks(1024) {
            standalone!(self, |cx| cx.last(chunk.to_vec()).await.map(|_| ()).map_err(Fail::Txn))?;
        }
        Ok(())
    }

    /// The full value of a string whose key row is `meta` (reads its overflow parts, 256 at a
    /// time). None when a concurrent writer replaced the value meanwhile (the caller reads the key
    /// row again).
    async fn assemble(&self, cx: &mut Cx, db: &Db, meta: &Meta) -> CR<Option<Vec<u8>>> {
        if meta.parts == 0 {
            return Ok(Some(meta.start.clone()));
        }
        let mut value = Vec::with_capacity(meta.len as usize);
        value.extend_from_slice(&meta.start);
        let ords: Vec<u32> = (0..meta.parts).collect();
        for chunk in ords.chunks(256) {
            let ops = chunk.iter().map(|&i| db::part_read(db, meta.id, i)).collect::<Result<Vec<_>, _>>()?;
            for r in cx.run(ops).await? {
                match row_of(Some(r))? {
                    Some(b) => value.extend(db::bytes_of(db.values.decode_projection(&[2], &b)?.remove(0))),
                    None => return Ok(None),
                }
            }
        }
        Ok(Some(value))
    }

    /// A string's value (None: no such key), WRONGTYPE for a hash. `first` is the key row when
    /// the caller has read it; `lock` reads it exclusively (the caller is about to change it).
    pub(crate) async fn get_string(
        &self,
        cx: &mut Cx,
        db: &Db,
        key: &[u8],
        first: Option<Meta>,
        lock: bool,
    ) -> CR<Option<Vec<u8>>> {
        let mut meta = first;
        for _ in 0..100 {
            let m = match meta.take() {
                Some(m) => m,
                None => match self.read_meta(cx, db, key, lock).await? {
                    Some(m) => m,
                    None => return Ok(None),
                },
            };
            if m.kind != TYPE_STRING {
                return fail(WRONGTYPE);
            }
            if let Some(v) = self.assemble(cx, db, &m).await? {
                return Ok(Some(v));
            }
        }
        fail("ERR the value kept changing while it was read; try again")
    }

    /// A key row (read committed, or locked exclusively when `lock`). A read that finds no key
    /// raises a `keymiss` event (redis's lookupKeyRead); `read_meta_quiet` raises none.
    async fn read_meta(&self, cx: &mut Cx, db: &Db, key: &[u8], lock: bool) -> CR<Option<Meta>> {
        let m = self.read_meta_quiet(cx, db, key, lock).await?;
        if m.is_none() && !lock {
            cx.key_miss(db.index, key);
        }
        Ok(m)
    }

    /// A key row that must be of type `kind` or absent, read committed without a `keymiss`
    /// event (the pops' look for a key with members: redis's lookupKeyWrite).
    async fn probe_meta(&self, cx: &mut Cx, db: &Db, key: &[u8], kind: u8) -> CR<Option<Meta>> {
        match self.read_meta_quiet(cx, db, key, false).await? {
            Some(m) if m.kind != kind => fail(WRONGTYPE),
            m => Ok(m),
        }
    }

    /// `read_meta` without a `keymiss` event (redis's LOOKUP_NONOTIFY: OBJECT, MEMORY USAGE).
    async fn read_meta_quiet(&self, cx: &mut Cx, db: &Db, key: &[u8], lock: bool) -> CR<Option<Meta>> {
        let op = db::read_meta(db, key, if lock { OpKind::ReadExclusive } else { OpKind::Read })?;
        let r = cx.run(vec![op]).await?;
        Ok(meta_of(db, r.into_iter().next())?)
    }

    /// A key row that must be a string or absent (WRONGTYPE otherwise).
    async fn string_meta(&self, cx: &mut Cx, db: &Db, key: &[u8], lock: bool) -> CR<Option<Meta>> {
        match self.read_meta(cx, db, key, lock).await? {
            Some(m) if m.kind != TYPE_STRING => fail(WRONGTYPE),
            m => Ok(m),
        }
    }

    /// A key row that must be a hash or absent.
    async fn hash_meta(&self, cx: &mut Cx, db: &Db, key: &[u8], lock: bool) -> CR<Option<Meta>> {
        match self.read_meta(cx, db, key, lock).await? {
            Some(m) if m.kind != TYPE_HASH => fail(WRONGTYPE),
            m => Ok(m),
        }
    }

    // ------------------------------------------------------------------ dispatch

    /// Runs one command, appending its reply. Returns false when the connection is to close.
    pub async fn command(self: &Arc<Self>, sess: &mut Session, args: Vec<Vec<u8>>, out: &mut Vec<u8>) -> bool {
        self.stats.commands.fetch_add(1, Ordering::Relaxed);
        let spec = match lookup(&args) {
            Ok(s) => s,
            Err(e) => return self.rejected(sess, &args, e, out),
        };
        if !self.refresh_user(sess) {
            return false;
        }
        if let Err(e) = self.permit(sess, spec, &args) {
            return self.rejected(sess, &args, e, out);
        }
        sess.info.last_cmd.store(index_of_spec(spec) as u32, Ordering::Relaxed);
        if let Some(e) = pubsub::subscribed_refusal(sess, spec.name) {
            return self.rejected(sess, &args, e, out);
        }
        if sess.multi.is_some() && matches!(spec.name, "save" | "shutdown") {
            return self.rejected(sess, &args, err("ERR Command not allowed inside a transaction"), out);
        }
        let start = out.len();
        // (As redis-server, MONITOR shows a command once it ran: SELECT with its new database,
        // a queued command at EXEC, a discarded one never.)
        let queued = sess.multi.is_some() && spec.kind != Kind::Control;
        let monitored = (!queued && self.monitoring.load(Ordering::Relaxed) > 0).then(|| args.clone());
        let open = if queued {
            self.queue(sess, args, out);
            true
        } else {
            let t0 = Instant::now();
            let open = if spec.kind == Kind::Control {
                self.control(sess, spec, args, out).await
            } else {
                self.one(sess, spec, &args, out).await;
                true
            };
            self.stats.record(spec, t0.elapsed(), out.get(start..).unwrap_or(&[]));
            open
        };
        if let Some(args) = monitored {
            self.feed_monitors(sess, spec, &args);
        }
        // CLIENT REPLY OFF / SKIP.
        match sess.reply {
            0 => {}
            1 => out.truncate(start),
            2 => {
                out.truncate(start);
                sess.reply = 0;
            }
            _ => {
                out.truncate(start);
                sess.reply = 2;
            }
        }
        open
    }

    /// MONITOR's line for a command (not for admin commands, with AUTH's and HELLO's
    /// passwords redacted, as redis-server), queued for every monitoring connection.
    fn feed_monitors(&self, sess: &Session, spec: &Spec, args: &[Vec<u8>]) {
        let sub = args.get(1).map(|a| String::from_utf8_lossy(a).to_lowercase()).unwrap_or_default();
        let admin = match spec.name {
            "config" | "save" | "bgsave" | "shutdown" | "monitor" => true,
            "client" => !matches!(sub.as_str(), "id" | "info" | "setname" | "getname" | "reply" | "help" | "setinfo"),
            "acl" => !matches!(sub.as_str(), "whoami" | "cat" | "genpass" | "help"),
            _ => false,
        };
        if admin {
            return;
        }
        let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let mut line =
            format!("+{}.{:06} [{} {}]", d.as_secs(), d.subsec_micros(), sess.db, sess.info.addr).into_bytes();
        // AUTH's arguments, and the user name and password after HELLO's AUTH.
        let redacted = |i: usize| match spec.name {
            "auth" => i >= 1,
            "hello" => (i >= 3 && is(&args[i - 1], "auth")) || (i >= 4 && is(&args[i - 2], "auth")),
            _ => false,
        };
        for (i, a) in args.iter().enumerate() {
            line.push(b' ');
            if redacted(i) {
                line.extend_from_slice(b"\"(redacted)\"");
            } else {
                resp::repr(&mut line, a);
            }
        }
        line.extend_from_slice(b"\r\n");
        let line: Arc<[u8]> = Arc::from(line);
        let mut m = crate::clients::lock(&self.monitors);
        m.retain(|w| match w.upgrade() {
            Some(mb) => {
                mb.push_raw(line.clone());
                true
            }
            None => false,
        });
        self.monitoring.store(m.len(), Ordering::Relaxed);
    }

    /// A command refused before it ran (unknown, wrong arity): inside MULTI it also fails the
    /// transaction, as in redis-server.
    fn rejected(&self, sess: &mut Session, args: &[Vec<u8>], e: RErr, out: &mut Vec<u8>) -> bool {
        let name = String::from_utf8_lossy(&args[0]).to_lowercase();
        if let Some(i) = index_of(&name) {
            self.stats.reject(i);
        }
        self.stats.error(&e.0);
        if name == "exec" {
            // EXEC's own arity error ends the transaction with EXECABORT's wording.
            sess.multi = None;
            self.unwatch(sess);
            let why = e.0.strip_prefix("ERR ").unwrap_or(&e.0);
            resp::error(out, &format!("EXECABORT Transaction discarded because of: {why}"));
            return true;
        }
        if let Some(m) = sess.multi.as_mut() {
            m.failed = true;
        }
        resp::error(out, &e.0);
        true
    }

    /// One command outside EXEC, its reply appended (in RESP3 when the session speaks it).
    async fn one(self: &Arc<Self>, sess: &mut Session, spec: &Spec, a: &[Vec<u8>], out: &mut Vec<u8>) {
        let start = out.len();
        if blocking::blocking_keys(spec.name, a).is_some() {
            self.blocking(sess, spec, a, out).await;
        } else {
            self.try_once(sess, spec, a, out).await;
        }
        self.resp3(sess, spec, a, out, start);
    }

    /// One command in its own transaction (or a server command), its RESP2 reply appended.
    async fn try_once(self: &Arc<Self>, sess: &mut Session, spec: &Spec, a: &[Vec<u8>], out: &mut Vec<u8>) {
        let start = out.len();
        let r = match spec.kind {
            Kind::Write if groups::family(spec.name).is_some() => {
                let fam = groups::family(spec.name).expect("a family");
                return self.grouped(sess, fam, a, out).await;
            }
            Kind::Read | Kind::Write => match self.db(sess.db).await {
                Ok(db) => standalone!(self, |cx| {
                    out.truncate(start);
                    self.data_command(cx, sess, &db, spec.name, a, out).await
                }),
                Err(e) => Err(e),
            },
            _ => self.dispatch(sess, spec.name, a, out).await,
        };
        if let Err(e) = r {
            // Whatever the command wrote before it failed (an array's start) goes.
            out.truncate(start);
            resp::error(out, &e.0);
        }
    }

    /// Rewrites the reply from `start` into RESP3 when the session speaks it.
    fn resp3(&self, sess: &Session, spec: &Spec, a: &[Vec<u8>], out: &mut Vec<u8>, start: usize) {
        if !sess.resp3 {
            return;
        }
        let shape = match spec.name {
            "hgetall" | "config" | "hello" => resp::Resp3Shape::Map,
            "hrandfield" if a.len() == 4 => resp::Resp3Shape::Pairs,
            "smembers" | "sinter" | "sunion" | "sdiff" => resp::Resp3Shape::Set,
            "subscribe" | "psubscribe" | "unsubscribe" | "punsubscribe" => resp::Resp3Shape::Push,
            "spop" if a.len() == 3 => resp::Resp3Shape::Set,
            "command" if a.get(1).is_some_and(|x| is(x, "docs")) => resp::Resp3Shape::Map,
            "acl" if a.get(1).is_some_and(|x| is(x, "getuser")) => resp::Resp3Shape::Map,
            "info" => resp::Resp3Shape::Verbatim,
            "client" if a.get(1).is_some_and(|x| is(x, "list") || is(x, "info")) => resp::Resp3Shape::Verbatim,
            "lcs" if a.iter().any(|x| is(x, "idx")) => resp::Resp3Shape::Map,
            _ => resp::Resp3Shape::Plain,
        };
        let r3 = resp::to_resp3(&out[start..], shape);
        out.truncate(start);
        out.extend(r3);
    }

    /// Connection and server commands (no transaction).
    async fn dispatch(&self, sess: &mut Session, name: &str, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        if self.pubsub_server_cmd(sess, name, a, out).await? {
            return Ok(());
        }
        match name {
            // A subscribed RESP2 connection's PING answers as a message would.
            "ping" if !sess.resp3 && sess.subs.as_ref().is_some_and(|s| s.count() > 0) && a.len() <= 2 => {
                resp::array_len(out, 2);
                resp::bulk(out, b"pong");
                resp::bulk(out, a.get(1).map_or(&b""[..], |x| &x[..]));
            }
            "ping" => match a.len() {
                1 => resp::simple(out, "PONG"),
                2 => resp::bulk(out, &a[1]),
                _ => return Err(err("ERR wrong number of arguments for 'ping' command")),
            },
            "echo" => resp::bulk(out, &a[1]),
            "select" => {
                let n = int_arg(&a[1]).map_err(|_| err(NOT_INT))?;
                if n < 0 || n >= self.opts.databases as i64 {
                    return Err(err("ERR DB index is out of range"));
                }
                self.db(n as u32).await?;
                sess.db = n as u32;
                sess.info.db.store(sess.db, Ordering::Relaxed);
                resp::simple(out, "OK");
            }
            "hello" => self.hello(sess, a, out)?,
            "client" => self.client_cmd(sess, a, out)?,
            "config" => {
                if a.len() == 2 && a[1].eq_ignore_ascii_case(b"resetstat") {
                    // INFO's expired_keys counts from here (the count itself is the data node's).
                    if let Ok(s) = self.client.status_async().await {
                        self.stats.expired_base.store(self.expired_keys(&s), Ordering::Relaxed);
                    }
                }
                self.config_cmd(a, out).await?
            }
            "command" => self.command_cmd(a, out)?,
            "info" => self.info(sess, a, out).await?,
            "time" => {
                let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
                resp::array_len(out, 2);
                resp::bulk(out, d.as_secs().to_string().as_bytes());
                resp::bulk(out, d.subsec_micros().to_string().as_bytes());
            }
            "memory" => self.memory_cmd(sess, a, out).await?,
            "object" => self.object_cmd(sess, a, out).await?,
            "save" => {
                self.last_save.store(db::now_ms() as u64 / 1000, Ordering::Relaxed);
                resp::simple(out, "OK");
            }
            "bgsave" => {
                if a.len() > 2 || (a.len() == 2 && !is(&a[1], "schedule")) {
                    return Err(err(SYNTAX));
                }
                self.last_save.store(db::now_ms() as u64 / 1000, Ordering::Relaxed);
                resp::simple(out, "Background saving started");
            }
            "lastsave" => resp::integer(out, self.last_save.load(Ordering::Relaxed) as i64),
            "shutdown" => {
                for x in &a[1..] {
                    if !["nosave", "save", "now", "force", "abort"].iter().any(|w| is(x, w)) {
                        return Err(err(SYNTAX));
                    }
                }
                if a[1..].iter().any(|x| is(x, "abort")) {
                    return Err(err("ERR No shutdown in progress."));
                }
                return Err(err(
                    "ERR Errors trying to SHUTDOWN: Tern's Redis API server stops with its cluster (`tern down`), not by a client's SHUTDOWN",
                ));
            }
            "swapdb" => {
                let first = int_arg(&a[1]).map_err(|_| err("ERR invalid first DB index"))?;
                let second = int_arg(&a[2]).map_err(|_| err("ERR invalid second DB index"))?;
                let n = self.opts.databases as i64;
                if !(0..n).contains(&first) || !(0..n).contains(&second) {
                    return Err(err("ERR DB index is out of range"));
                }
                // Redis Cluster's answer: a database is the cluster's tables, which every API
                // server serves, so no one server can swap them.
                return Err(err("ERR SWAPDB is not allowed in cluster mode"));
            }
            "monitor" => {
                let info = sess.info.clone();
                let subs = sess.subs.get_or_insert_with(|| self.pubsub.subs(info));
                subs.monitor = true;
                let mut m = crate::clients::lock(&self.monitors);
                if !m.iter().any(|w| w.upgrade().is_some_and(|x| Arc::ptr_eq(&x, &subs.mailbox))) {
                    m.push(Arc::downgrade(&subs.mailbox));
                }
                self.monitoring.store(m.len(), Ordering::Relaxed);
                resp::simple(out, "OK");
            }
            "auth" => self.auth_cmd(sess, a, out)?,
            "acl" => self.acl_cmd(sess, a, out)?,
            other => return Err(err(format!("ERR unknown command '{other}'"))),
        }
        Ok(())
    }

    /// A data command against `cx`, its RESP2 reply appended.
    pub(crate) async fn data_command(
        &self,
        cx: &mut Cx,
        sess: &mut Session,
        db: &Arc<Db>,
        name: &str,
        a: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> CR {
        let from = cx.touched.len();
        let r = self.data_command_keys(cx, sess, db, name, a, out).await;
        self.command_events(cx, name, a, from, r.is_ok());
        r
    }

    /// The keyspace events of a command that wrote the keys `cx.touched[from..]` (none when it
    /// failed), and their marks.
    fn command_events(&self, cx: &mut Cx, name: &str, a: &[Vec<u8>], from: usize, ok: bool) {
        if cx.notify != 0 {
            let touched: Vec<_> = cx.touched.drain(from..).collect();
            if ok {
                cx.events.extend(crate::keyspace::events_of(name, a, &touched));
                cx.marks.extend(touched.into_iter().map(|(d, k, _)| (d, k)));
            }
        }
    }

    /// `data_command` but for its keyspace events.
    async fn data_command_keys(
        &self,
        cx: &mut Cx,
        sess: &mut Session,
        db: &Arc<Db>,
        name: &str,
        a: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> CR {
        let spec = &COMMANDS[index_of(name).expect("a data command of the table")];
        for k in keys_of(spec, a) {
            if !matches!(name, "mget" | "del" | "unlink" | "exists") {
                check_key(k)?;
            }
        }
        if let Some(fam) = groups::family(name) {
            return self.one_of_family(cx, sess, db, fam, a, out).await;
        }
        if self.string_command(cx, db, name, a, out).await? {
            return Ok(());
        }
        if self.key_command(cx, sess, db, name, a, out).await? {
            return Ok(());
        }
        if self.hash_command(cx, sess, db, name, a, out).await? {
            return Ok(());
        }
        if self.list_command(cx, sess, db, name, a, out).await? {
            return Ok(());
        }
        if self.set_command(cx, sess, db, name, a, out).await? {
            return Ok(());
        }
        if self.zset_command(cx, sess, db, name, a, out).await? {
            return Ok(());
        }
        if name == "publish" {
            return self.publish(cx, sess, a, out).await;
        }
        if self.dump_command(cx, db, name, a, out).await? {
            return Ok(());
        }
        fail(format!("ERR unknown command '{name}'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_and_arity_errors() {
        let a = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        assert_eq!(
            lookup(&a(&["foo", "a", "b"])).unwrap_err().0,
            "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
        );
        assert_eq!(lookup(&a(&["GET"])).unwrap_err().0, "ERR wrong number of arguments for 'get' command");
        assert_eq!(lookup(&a(&["Set", "k", "v"])).unwrap().name, "set");
        assert_eq!(
            lookup(&a(&["CONFIG", "GET"])).unwrap_err().0,
            "ERR wrong number of arguments for 'config|get' command"
        );
        assert_eq!(lookup(&a(&["client", "foo"])).unwrap_err().0, "ERR unknown subcommand 'foo'. Try CLIENT HELP.");
    }

    #[test]
    fn key_positions() {
        let a = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        let spec = |n: &str| &COMMANDS[index_of(n).unwrap()];
        assert_eq!(keys_of(spec("mset"), &a(&["mset", "a", "1", "b", "2"])), vec![&b"a"[..], b"b"]);
        assert_eq!(keys_of(spec("del"), &a(&["del", "a", "b"])), vec![&b"a"[..], b"b"]);
        assert_eq!(keys_of(spec("copy"), &a(&["copy", "a", "b", "db", "1"])), vec![&b"a"[..], b"b"]);
        assert!(keys_of(spec("ping"), &a(&["ping"])).is_empty());
        assert!(COMMANDS.iter().all(|s| s.first == 0 || s.step > 0));
    }
}
