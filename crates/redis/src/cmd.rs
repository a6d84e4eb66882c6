//! The commands (interfaces.md §2) with redis-server's replies and error texts. Each command is
//! one transaction of batched key operations; GET and plain SET runs from a pipeline are merged
//! into one transaction (see `Server::run_pipeline`).

use crate::db::{self, Db, HASH_VALUE_MAX, INLINE_MAX, KEY_MAX, META, Meta, TYPE_HASH, TYPE_STRING, VALUE_MAX};
use crate::resp::{self, parse_int};
use crate::{Server, Session};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tern_client::{
    AbortOption, ColumnUpdate, ErrorCode, Exec, KeyOp, OpKind, OpResult, ScanSpec, TernError, Transaction, UpdateExpr,
    Value,
};
use tern_types::filter::{CmpOp, Filter};

/// An error reply (the text after '-').
#[derive(Debug, Clone, PartialEq)]
pub struct RErr(pub String);

pub type R<T = ()> = Result<T, RErr>;

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const NOT_INT: &str = "ERR value is not an integer or out of range";
pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
pub const SYNTAX: &str = "ERR syntax error";
const TOO_BIG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";

fn err(s: impl Into<String>) -> RErr {
    RErr(s.into())
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

/// Lower-case command name and arity (redis-server's convention: n = exactly n arguments including
/// the name, -n = at least n).
const COMMANDS: &[(&str, i32)] = &[
    ("get", 2),
    ("set", -3),
    ("mget", -2),
    ("mset", -3),
    ("setnx", 3),
    ("getdel", 2),
    ("incr", 2),
    ("incrby", 3),
    ("decr", 2),
    ("decrby", 3),
    ("strlen", 2),
    ("append", 3),
    ("getrange", 4),
    ("setrange", 4),
    ("del", -2),
    ("exists", -2),
    ("type", 2),
    ("expire", -3),
    ("pexpire", -3),
    ("expireat", -3),
    ("pexpireat", -3),
    ("ttl", 2),
    ("pttl", 2),
    ("persist", 2),
    ("scan", -2),
    ("hset", -4),
    ("hget", 3),
    ("hmget", -3),
    ("hmset", -4),
    ("hdel", -3),
    ("hgetall", 2),
    ("hlen", 2),
    ("hexists", 3),
    ("hincrby", 4),
    ("ping", -1),
    ("echo", 2),
    ("select", 2),
    ("quit", -1),
    ("hello", -1),
    ("client", -2),
    ("config", -2),
    ("command", -1),
    ("info", -1),
    ("dbsize", 1),
    ("flushdb", -1),
    ("flushall", -1),
    ("auth", -2),
    ("setex", 4),
    ("psetex", 4),
    ("getset", 3),
    ("msetnx", -3),
    ("unlink", -2),
    ("keys", 2),
];

pub fn command_count() -> usize {
    COMMANDS.len()
}

/// The command's table name, or the unknown-command / arity error.
pub fn lookup(args: &[Vec<u8>]) -> R<&'static str> {
    let name = String::from_utf8_lossy(&args[0]).to_lowercase();
    match COMMANDS.iter().find(|(n, _)| *n == name) {
        None => {
            let mut rest = String::new();
            for a in &args[1..] {
                if rest.len() >= 128 {
                    break;
                }
                let a = String::from_utf8_lossy(a);
                let room = 128 - rest.len();
                rest.push('\'');
                rest.extend(a.chars().take(room));
                rest.push_str("' ");
            }
            let cmd: String = String::from_utf8_lossy(&args[0]).chars().take(128).collect();
            Err(err(format!("ERR unknown command '{cmd}', with args beginning with: {rest}")))
        }
        Some(&(n, arity)) => {
            let ok = if arity >= 0 { args.len() == arity as usize } else { args.len() >= (-arity) as usize };
            if ok { Ok(n) } else { Err(err(format!("ERR wrong number of arguments for '{n}' command"))) }
        }
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

/// Runs a transaction body with the client's retries of temporary errors.
async fn txn<T, F, Fut>(s: &Server, f: F) -> R<T>
where
    F: FnMut(Transaction) -> Fut,
    Fut: std::future::Future<Output = Result<Result<T, RErr>, TernError>>,
{
    match s.client.run(f).await {
        Ok(r) => r,
        Err(e) => Err(e.into()),
    }
}

/// The last batch of a transaction; an operation that failed is the transaction's error.
async fn commit_checked(t: &mut Transaction, ops: Vec<KeyOp>) -> Result<Vec<OpResult>, TernError> {
    t.execute_with(ops, Exec::Commit, AbortOption::AbortOnError).await
}

/// One batch of a transaction with per-operation results (IgnoreError).
async fn exec(t: &mut Transaction, ops: Vec<KeyOp>, exec: Exec) -> Result<Vec<OpResult>, TernError> {
    t.execute_with(ops, exec, AbortOption::IgnoreError).await
}

fn update(db: &Db, key: &[u8], updates: Vec<ColumnUpdate>) -> Result<KeyOp, TernError> {
    db.keys.update(&[Value::Bytes(key.to_vec())], updates)
}

fn set_col(col: u16, v: Value) -> ColumnUpdate {
    ColumnUpdate { col, expr: UpdateExpr::Set(v) }
}

/// Operations that write a string value under a key (key row plus overflow parts).
fn string_ops(s: &Server, db: &Db, key: &[u8], value: &[u8], expiry: Option<i64>) -> R<Vec<KeyOp>> {
    let mut meta = Meta::string(&value[..value.len().min(INLINE_MAX)]);
    meta.len = value.len() as u64;
    meta.expiry = expiry;
    let mut ops = Vec::new();
    if value.len() > INLINE_MAX {
        meta.id = s.new_id(db)?;
        meta.parts = db::parts_for(value.len());
        ops.push(db::write_meta(db, key, &meta)?);
        ops.extend(db::part_ops(db, meta.id, value)?);
    } else {
        ops.push(db::write_meta(db, key, &meta)?);
    }
    Ok(ops)
}

/// Runs write operations as one transaction. First optimistically in one batch that fails at
/// once on a busy row lock (nobody waits, so no deadlock can form); after such a failure (or any
/// temporary one) at once again, locking in order with `exec_ordered` (with the client's retries).
pub async fn write_txn(client: &tern_client::Client, ops: Vec<KeyOp>) -> Result<Vec<OpResult>, TernError> {
    let bytes: usize = ops.iter().map(|o| o.row.len() + o.key.len()).sum();
    if bytes < (16 << 20) && ops.len() <= 4096 {
        let mut t = client.begin();
        t.set_nowait(true);
        match t.execute_with(ops.clone(), Exec::Commit, AbortOption::AbortOnError).await {
            Err(e) if e.is_temporary() => {}
            other => return other,
        }
    }
    client
        .run(|mut t| {
            let ops = ops.clone();
            async move { exec_ordered(client, &mut t, ops).await }
        })
        .await
}

/// Executes a transaction's write operations and commits: in (worker, table, key) order, one
/// worker's operations per batch (bounded in size), workers in increasing order. Every multi-key
/// writer of this front end locks this way, so they never deadlock one another. Results come back
/// in the order of `ops`.
pub async fn exec_ordered(
    client: &tern_client::Client,
    t: &mut Transaction,
    ops: Vec<KeyOp>,
) -> Result<Vec<OpResult>, TernError> {
    // Any failed write aborts the whole transaction: a value is never half written.
    exec_ordered_with(client, t, ops, AbortOption::AbortOnError).await
}

/// `exec_ordered` with a choice of abort option.
pub async fn exec_ordered_with(
    client: &tern_client::Client,
    t: &mut Transaction,
    ops: Vec<KeyOp>,
    abort: AbortOption,
) -> Result<Vec<OpResult>, TernError> {
    const BYTES: usize = 16 << 20;
    let workers: Vec<u16> = ops.iter().map(|o| client.worker_of(o)).collect();
    let mut order: Vec<usize> = (0..ops.len()).collect();
    order.sort_by(|&a, &b| (workers[a], ops[a].table, &ops[a].key).cmp(&(workers[b], ops[b].table, &ops[b].key)));
    let mut ops: Vec<Option<KeyOp>> = ops.into_iter().map(Some).collect();
    let mut results: Vec<Option<OpResult>> = (0..ops.len()).map(|_| None).collect();
    let mut i = 0;
    loop {
        let mut batch = Vec::new();
        let mut idx = Vec::new();
        let mut bytes = 0;
        while i < order.len() {
            let j = order[i];
            if !batch.is_empty() && (workers[j] != workers[idx[0]] || bytes >= BYTES || batch.len() >= 4096) {
                break;
            }
            let op = ops[j].take().expect("each op once");
            bytes += op.row.len() + op.key.len();
            batch.push(op);
            idx.push(j);
            i += 1;
        }
        let last = i >= order.len();
        let rs = t.execute_with(batch, if last { Exec::Commit } else { Exec::NoCommit }, abort).await?;
        for (j, r) in idx.into_iter().zip(rs) {
            results[j] = Some(r);
        }
        if last {
            break;
        }
    }
    Ok(results.into_iter().map(|r| r.unwrap_or(OpResult::Done)).collect())
}

impl Server {
    /// A fresh `rondb_key` for a key's overflow or field rows.
    fn new_id(&self, db: &Db) -> R<u64> {
        let c = self.client.clone();
        let table = db.values.id();
        Ok(tokio::task::block_in_place(|| c.next_auto_increment(table))?)
    }

    /// Deletes the overflow or field rows a replaced or deleted key left behind (in the background;
    /// nothing can reach them any more because the key row no longer names them).
    pub fn cleanup(self: &Arc<Self>, db: &Arc<Db>, old: &Meta) {
        if old.id == 0 {
            return;
        }
        let (me, db, old) = (self.clone(), db.clone(), old.clone());
        tokio::spawn(async move {
            if let Err(e) = me.cleanup_now(&db, &old).await {
                tracing::warn!("cleaning up rows of an old value failed: {}", e.0);
            }
        });
    }

    pub async fn cleanup_now(&self, db: &Db, old: &Meta) -> R {
        let ops: Vec<KeyOp> = if old.kind == TYPE_HASH {
            let fields = self.hash_fields(db, old.id, false).await?;
            fields.into_iter().map(|(f, _)| db.hashes.delete(&db::field_key(&f, old.id))).collect::<Result<_, _>>()?
        } else {
            (0..old.parts).map(|i| db::part_delete(db, old.id, i)).collect::<Result<_, _>>()?
        };
        for chunk in ops.chunks(1024) {
            txn(self, |mut t| {
                let c = chunk.to_vec();
                async move { exec(&mut t, c, Exec::Commit).await.map(|_| Ok(())) }
            })
            .await?;
        }
        Ok(())
    }

    /// A hash's (field, value) pairs (values empty when `values` is false): one pruned scan.
    async fn hash_fields(&self, db: &Db, id: u64, values: bool) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut spec = ScanSpec::table(db.hashes.id());
        spec.partition = Some(db.hashes.partition_of(&db::field_key(b"", id))?);
        spec.filter = Filter::Cmp { col: 0, op: CmpOp::Eq, value: Value::UInt(id) };
        let cols: Vec<u16> = if values { vec![1, 2] } else { vec![1] };
        spec.projection = Some(cols.clone());
        spec.batch_rows = 1024;
        let rows = self.client.scan(spec).collect().await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let mut v = db.hashes.decode_projection(&cols, &r)?.into_iter();
            let f = db::bytes_of(v.next().unwrap_or(Value::Null));
            out.push((f, v.next().map(db::bytes_of).unwrap_or_default()));
        }
        Ok(out)
    }

    /// The full value of a string whose key row is `meta` (reads its overflow parts). None when a
    /// concurrent writer replaced the value meanwhile (the caller retries).
    async fn assemble(&self, db: &Db, meta: &Meta) -> R<Option<Vec<u8>>> {
        if meta.parts == 0 {
            return Ok(Some(meta.start.clone()));
        }
        let mut value = Vec::with_capacity(meta.len as usize);
        value.extend_from_slice(&meta.start);
        let ords: Vec<u32> = (0..meta.parts).collect();
        for chunk in ords.chunks(256) {
            let ops = chunk.iter().map(|&i| db::part_read(db, meta.id, i)).collect::<Result<Vec<_>, _>>()?;
            let rs = txn(self, |mut t| {
                let ops = ops.clone();
                async move { exec(&mut t, ops, Exec::Commit).await.map(Ok) }
            })
            .await?;
            for r in rs {
                match row_of(Some(r))? {
                    Some(b) => value.extend(db::bytes_of(db.values.decode_projection(&[2], &b)?.remove(0))),
                    None => return Ok(None),
                }
            }
        }
        Ok(Some(value))
    }

    /// A string's value (None: no such key), WRONGTYPE for a hash.
    pub async fn get_string(&self, db: &Db, key: &[u8], first: Option<Meta>) -> R<Option<Vec<u8>>> {
        let mut meta = first;
        for _ in 0..100 {
            let m = match meta.take() {
                Some(m) => m,
                None => match self.read_meta(db, key).await? {
                    Some(m) => m,
                    None => return Ok(None),
                },
            };
            if m.kind != TYPE_STRING {
                return Err(err(WRONGTYPE));
            }
            if let Some(v) = self.assemble(db, &m).await? {
                return Ok(Some(v));
            }
        }
        Err(err("ERR the value kept changing while it was read; try again"))
    }

    async fn read_meta(&self, db: &Db, key: &[u8]) -> R<Option<Meta>> {
        let op = db::read_meta(db, key, OpKind::Read)?;
        let r = txn(self, |mut t| {
            let op = op.clone();
            async move { exec(&mut t, vec![op], Exec::Commit).await.map(Ok) }
        })
        .await?;
        meta_of(db, r.into_iter().next())
    }

    // ------------------------------------------------------------------ dispatch

    /// Runs one command, appending its reply. Returns false when the connection is to close.
    pub async fn command(self: &Arc<Self>, sess: &mut Session, args: Vec<Vec<u8>>, out: &mut Vec<u8>) -> bool {
        self.stats.commands.fetch_add(1, Ordering::Relaxed);
        let name = match lookup(&args) {
            Ok(n) => n,
            Err(e) => {
                resp::error(out, &e.0);
                return true;
            }
        };
        if name == "quit" {
            resp::simple(out, "OK");
            return false;
        }
        let start = out.len();
        if let Err(e) = self.dispatch(sess, name, &args, out).await {
            resp::error(out, &e.0);
        }
        if sess.resp3 {
            let docs = name == "command" && args.get(1).is_some_and(|a| is(a, "docs"));
            let shape = match name {
                "hgetall" | "config" | "hello" => resp::Resp3Shape::Map,
                "command" if docs => resp::Resp3Shape::Map,
                "info" => resp::Resp3Shape::Verbatim,
                _ => resp::Resp3Shape::Plain,
            };
            let r3 = resp::to_resp3(&out[start..], shape);
            out.truncate(start);
            out.extend(r3);
        }
        true
    }

    async fn dispatch(self: &Arc<Self>, sess: &mut Session, name: &str, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        match name {
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
                self.db(n as u32)?;
                sess.db = n as u32;
                resp::simple(out, "OK");
            }
            "hello" => self.hello(sess, a, out)?,
            "client" => self.client_cmd(sess, a, out)?,
            "config" => self.config_cmd(a, out)?,
            "command" => self.command_cmd(a, out)?,
            "info" => self.info(sess, a, out).await?,
            "auth" => {
                return Err(err(
                    "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
                ));
            }
            "dbsize" => {
                let db = self.db(sess.db)?;
                resp::integer(out, self.count_keys(&db).await?.0 as i64);
            }
            "flushdb" => {
                self.flush(sess.db).await?;
                resp::simple(out, "OK");
            }
            "flushall" => {
                for i in 0..self.opts.databases {
                    if self.is_open(i) {
                        self.flush(i).await?;
                    }
                }
                resp::simple(out, "OK");
            }
            _ => {
                let db = self.db(sess.db)?;
                self.data_command(sess, &db, name, a, out).await?;
            }
        }
        Ok(())
    }

    async fn data_command(
        self: &Arc<Self>,
        sess: &mut Session,
        db: &Arc<Db>,
        name: &str,
        a: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> R {
        if !matches!(name, "scan" | "mset" | "msetnx" | "mget" | "del" | "unlink" | "exists" | "keys") {
            check_key(&a[1])?;
        }
        match name {
            "get" => match self.get_string(db, &a[1], None).await? {
                Some(v) => resp::bulk(out, &v),
                None => resp::null(out),
            },
            "set" => self.set(db, a, out).await?,
            "setnx" => {
                let args = vec![b"set".to_vec(), a[1].clone(), a[2].clone(), b"nx".to_vec()];
                let mut o = Vec::new();
                self.set(db, &args, &mut o).await?;
                resp::integer(out, if o.starts_with(b"+OK") { 1 } else { 0 });
            }
            "mget" => self.mget(db, &a[1..], out).await?,
            "mset" => {
                if a.len().is_multiple_of(2) {
                    return Err(err("ERR wrong number of arguments for 'mset' command"));
                }
                self.mset(db, &a[1..]).await?;
                resp::simple(out, "OK");
            }
            "getdel" => match self.getdel(db, &a[1]).await? {
                Some(v) => resp::bulk(out, &v),
                None => resp::null(out),
            },
            "incr" | "decr" | "incrby" | "decrby" => {
                let by = match name {
                    "incr" => 1,
                    "decr" => -1,
                    "incrby" => int_arg(&a[2])?,
                    _ => {
                        let d = int_arg(&a[2])?;
                        d.checked_neg().ok_or_else(|| err("ERR decrement would overflow"))?
                    }
                };
                resp::integer(out, self.incr(sess, db, &a[1], by).await?);
            }
            "strlen" => {
                let n = match self.read_meta(db, &a[1]).await? {
                    None => 0,
                    Some(m) if m.kind != TYPE_STRING => return Err(err(WRONGTYPE)),
                    Some(m) => m.strlen(),
                };
                resp::integer(out, n as i64);
            }
            "append" => resp::integer(out, self.append_or_setrange(db, &a[1], None, &a[2]).await? as i64),
            "setrange" => {
                let off = int_arg(&a[2])?;
                if off < 0 {
                    return Err(err("ERR offset is out of range"));
                }
                if off as u64 + a[3].len() as u64 > VALUE_MAX as u64 {
                    return Err(err(TOO_BIG));
                }
                resp::integer(out, self.append_or_setrange(db, &a[1], Some(off as usize), &a[3]).await? as i64);
            }
            "getrange" => {
                let (start, end) = (int_arg(&a[2])?, int_arg(&a[3])?);
                let v = self.get_string(db, &a[1], None).await?.unwrap_or_default();
                resp::bulk(out, range(&v, start, end));
            }
            "del" | "unlink" => resp::integer(out, self.del(db, &a[1..]).await?),
            "setex" | "psetex" => {
                let v = int_arg(&a[2])?;
                if v <= 0 {
                    return Err(err(format!("ERR invalid expire time in '{name}' command")));
                }
                let unit: &[u8] = if name == "setex" { b"ex" } else { b"px" };
                let args = vec![b"set".to_vec(), a[1].clone(), a[3].clone(), unit.to_vec(), a[2].clone()];
                self.set(db, &args, out).await?;
            }
            "getset" => {
                let args = vec![b"set".to_vec(), a[1].clone(), a[2].clone(), b"get".to_vec()];
                self.set(db, &args, out).await?;
            }
            "msetnx" => {
                if a.len().is_multiple_of(2) {
                    return Err(err("ERR wrong number of arguments for 'msetnx' command"));
                }
                resp::integer(out, self.msetnx(db, &a[1..]).await?);
            }
            "keys" => {
                let keys = self.keys(db, &a[1]).await?;
                resp::array_len(out, keys.len());
                for k in keys {
                    resp::bulk(out, &k);
                }
            }
            "exists" => resp::integer(out, self.exists(db, &a[1..]).await?),
            "type" => {
                let t = match self.read_meta(db, &a[1]).await? {
                    None => "none",
                    Some(m) if m.kind == TYPE_HASH => "hash",
                    Some(_) => "string",
                };
                resp::simple(out, t);
            }
            "expire" | "pexpire" | "expireat" | "pexpireat" => resp::integer(out, self.expire(db, name, a).await?),
            "ttl" | "pttl" => {
                let v = match self.read_meta(db, &a[1]).await? {
                    None => -2,
                    Some(Meta { expiry: None, .. }) => -1,
                    Some(Meta { expiry: Some(e), .. }) => {
                        let left = (e - db::now_ms()).max(0);
                        if name == "ttl" { (left + 500) / 1000 } else { left }
                    }
                };
                resp::integer(out, v);
            }
            "persist" => resp::integer(out, self.persist(db, &a[1]).await?),
            "scan" => self.scan(sess, db, a, out).await?,
            "hset" | "hmset" => {
                if !a.len().is_multiple_of(2) {
                    return Err(err(format!("ERR wrong number of arguments for '{name}' command")));
                }
                let added = self.hset(db, &a[1], &a[2..]).await?;
                if name == "hset" {
                    resp::integer(out, added);
                } else {
                    resp::simple(out, "OK");
                }
            }
            "hget" => match self.hget(db, &a[1], &a[2..3]).await?.pop().flatten() {
                Some(v) => resp::bulk(out, &v),
                None => resp::null(out),
            },
            "hmget" => {
                let vs = self.hget(db, &a[1], &a[2..]).await?;
                resp::array_len(out, vs.len());
                for v in vs {
                    match v {
                        Some(v) => resp::bulk(out, &v),
                        None => resp::null(out),
                    }
                }
            }
            "hexists" => {
                let v = self.hget(db, &a[1], &a[2..3]).await?.pop().flatten();
                resp::integer(out, v.is_some() as i64);
            }
            "hdel" => resp::integer(out, self.hdel(db, &a[1], &a[2..]).await?),
            "hlen" => {
                let n = match self.read_meta(db, &a[1]).await? {
                    None => 0,
                    Some(m) if m.kind != TYPE_HASH => return Err(err(WRONGTYPE)),
                    Some(m) => m.len as i64,
                };
                resp::integer(out, n);
            }
            "hgetall" => {
                let pairs = match self.read_meta(db, &a[1]).await? {
                    None => Vec::new(),
                    Some(m) if m.kind != TYPE_HASH => return Err(err(WRONGTYPE)),
                    Some(m) => self.hash_fields(db, m.id, true).await?,
                };
                resp::array_len(out, pairs.len() * 2);
                for (f, v) in pairs {
                    resp::bulk(out, &f);
                    resp::bulk(out, &v);
                }
            }
            "hincrby" => {
                let by = int_arg(&a[3])?;
                resp::integer(out, self.hincrby(db, &a[1], &a[2], by).await?);
            }
            other => return Err(err(format!("ERR unknown command '{other}'"))),
        }
        Ok(())
    }

    // ------------------------------------------------------------------ strings

    async fn set(self: &Arc<Self>, db: &Arc<Db>, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let (key, value) = (&a[1], &a[2]);
        let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
        let mut expiry: Option<i64> = None;
        let mut i = 3;
        while i < a.len() {
            let o = &a[i];
            let next = a.get(i + 1);
            if is(o, "nx") && !xx {
                nx = true;
            } else if is(o, "xx") && !nx {
                xx = true;
            } else if is(o, "get") {
                get = true;
            } else if is(o, "keepttl") && expiry.is_none() {
                keepttl = true;
            } else if (is(o, "ex") || is(o, "px") || is(o, "exat") || is(o, "pxat"))
                && !keepttl
                && expiry.is_none()
                && let Some(n) = next
            {
                let v = int_arg(n)?;
                let bad = || err("ERR invalid expire time in 'set' command");
                if v <= 0 {
                    return Err(bad());
                }
                let ms = if is(o, "ex") || is(o, "exat") { v.checked_mul(1000).ok_or_else(bad)? } else { v };
                let at = if is(o, "ex") || is(o, "px") { ms.checked_add(db::now_ms()).ok_or_else(bad)? } else { ms };
                expiry = Some(at);
                i += 1;
            } else {
                return Err(err(SYNTAX));
            }
            i += 1;
        }
        if value.len() > VALUE_MAX {
            return Err(err(TOO_BIG));
        }
        let simple = !nx && !xx && !get && !keepttl;
        let me = self.clone();
        let dbc = db.clone();
        let (done, old) = txn(self, |mut t| {
            let (me, db) = (me.clone(), dbc.clone());
            async move {
                let mut old: Option<Meta> = None;
                let mut old_value = None;
                if !simple {
                    let r = exec(&mut t, vec![db::read_meta(&db, key, OpKind::ReadExclusive)?], Exec::NoCommit).await?;
                    old = match meta_of(&db, r.into_iter().next()) {
                        Ok(m) => m,
                        Err(e) => return Ok(Err(e)),
                    };
                    if get && let Some(m) = &old {
                        if m.kind != TYPE_STRING {
                            return Ok(Err(err(WRONGTYPE)));
                        }
                        old_value = match me.assemble(&db, m).await {
                            Ok(v) => v,
                            Err(e) => return Ok(Err(e)),
                        };
                    }
                    if (nx && old.is_some()) || (xx && old.is_none()) {
                        t.rollback().await?;
                        return Ok(Ok((Err(old_value), None)));
                    }
                }
                let exp = if keepttl { old.as_ref().and_then(|m| m.expiry) } else { expiry };
                let ops = match string_ops(&me, &db, key, value, exp) {
                    Ok(o) => o,
                    Err(e) => return Ok(Err(e)),
                };
                let rs = exec_ordered(&me.client, &mut t, ops).await?;
                if let Some(OpResult::Error(e)) = rs.iter().find(|r| matches!(r, OpResult::Error(_))) {
                    return Err(e.clone());
                }
                let replaced = match meta_of(&db, rs.into_iter().next()) {
                    Ok(m) => m,
                    Err(e) => return Ok(Err(e)),
                };
                Ok(Ok((Ok(old_value), replaced)))
            }
        })
        .await?;
        if let Some(m) = &old {
            self.cleanup(db, m);
        }
        match done {
            Ok(old_value) if get => match old_value {
                Some(v) => resp::bulk(out, &v),
                None => resp::null(out),
            },
            Ok(_) => resp::simple(out, "OK"),
            Err(old_value) if get => match old_value {
                Some(v) => resp::bulk(out, &v),
                None => resp::null(out),
            },
            Err(_) => resp::null(out),
        }
        Ok(())
    }

    async fn mget(self: &Arc<Self>, db: &Arc<Db>, keys: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let mut ops = Vec::with_capacity(keys.len());
        for k in keys {
            if k.len() > KEY_MAX {
                ops.push(None);
            } else {
                ops.push(Some(db::read_meta(db, k, OpKind::Read)?));
            }
        }
        let real: Vec<KeyOp> = ops.iter().flatten().cloned().collect();
        // Read committed, key by key as in Redis: one transaction per data-node worker.
        let mut rs = self.run_split(real).await.into_iter();
        resp::array_len(out, keys.len());
        for (k, op) in keys.iter().zip(&ops) {
            let m = if op.is_some() { meta_of(db, rs.next())? } else { None };
            match m {
                Some(m) if m.kind == TYPE_STRING => match self.get_string(db, k, Some(m)).await {
                    Ok(Some(v)) => resp::bulk(out, &v),
                    _ => resp::null(out),
                },
                _ => resp::null(out),
            }
        }
        Ok(())
    }

    /// MSET: one atomic transaction (RonDB's Rondis MSET is not atomic; Tern's is).
    async fn mset(self: &Arc<Self>, db: &Arc<Db>, pairs: &[Vec<u8>]) -> R {
        let mut ops = Vec::new();
        for p in pairs.chunks(2) {
            check_key(&p[0])?;
            if p[1].len() > VALUE_MAX {
                return Err(err(TOO_BIG));
            }
            ops.extend(string_ops(self, db, &p[0], &p[1], None)?);
        }
        let rs = write_txn(&self.client, ops).await?;
        for r in rs {
            match r {
                OpResult::Error(e) => return Err(e.into()),
                OpResult::Row(b) if b.len() > 1 => {
                    if let Ok(m) = Meta::decode(db, &b) {
                        self.cleanup(db, &m);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// MSETNX: all keys are set, atomically, only if none of them exists (1), else nothing (0).
    async fn msetnx(self: &Arc<Self>, db: &Arc<Db>, pairs: &[Vec<u8>]) -> R<i64> {
        // A key given twice gets its last value (as in redis-server).
        let mut last: Vec<(&[u8], &[u8])> = Vec::new();
        for p in pairs.chunks(2) {
            check_key(&p[0])?;
            if p[1].len() > VALUE_MAX {
                return Err(err(TOO_BIG));
            }
            match last.iter_mut().find(|(k, _)| *k == &p[0][..]) {
                Some(e) => e.1 = &p[1],
                None => last.push((&p[0], &p[1])),
            }
        }
        let mut ops = Vec::new();
        for (k, v) in last {
            let mut o = string_ops(self, db, k, v, None)?;
            o[0].kind = OpKind::Insert;
            o[0].projection = None;
            ops.extend(o);
        }
        let r = self
            .client
            .run(|mut t| {
                let ops = ops.clone();
                async move { exec_ordered_with(&self.client, &mut t, ops, AbortOption::AbortOnError).await }
            })
            .await;
        match r {
            Ok(_) => Ok(1),
            Err(e) if e.code == ErrorCode::DuplicateKey => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// KEYS: every live key matching the pattern (a full scan, like redis-server's).
    async fn keys(&self, db: &Db, pattern: &[u8]) -> R<Vec<Vec<u8>>> {
        let mut spec = ScanSpec::table(db.keys.id());
        spec.projection = Some(vec![db::K_KEY]);
        spec.batch_rows = 4096;
        let mut sc = self.client.scan(spec);
        let mut keys = Vec::new();
        while let Some(rows) = sc.next_batch().await? {
            for r in rows {
                let k = db::bytes_of(db.keys.decode_projection(&[db::K_KEY], &r)?.remove(0));
                if glob(pattern, &k) {
                    keys.push(k);
                }
            }
        }
        Ok(keys)
    }

    async fn getdel(self: &Arc<Self>, db: &Arc<Db>, key: &[u8]) -> R<Option<Vec<u8>>> {
        let me = self.clone();
        let dbc = db.clone();
        let r = txn(self, |mut t| {
            let (me, db) = (me.clone(), dbc.clone());
            async move {
                let r = exec(&mut t, vec![db::read_meta(&db, key, OpKind::ReadExclusive)?], Exec::NoCommit).await?;
                let m = match meta_of(&db, r.into_iter().next()) {
                    Ok(Some(m)) => m,
                    Ok(None) => return Ok(Ok(None)),
                    Err(e) => return Ok(Err(e)),
                };
                if m.kind != TYPE_STRING {
                    return Ok(Err(err(WRONGTYPE)));
                }
                let v = match me.assemble(&db, &m).await {
                    Ok(v) => v,
                    Err(e) => return Ok(Err(e)),
                };
                commit_checked(&mut t, vec![db.keys.delete(&[Value::Bytes(key.to_vec())])?]).await?;
                Ok(Ok(Some((m, v))))
            }
        })
        .await?;
        Ok(match r {
            Some((m, v)) => {
                self.cleanup(db, &m);
                v
            }
            None => None,
        })
    }

    /// INCR/DECR/INCRBY/DECRBY: one read-modify-write executed inside the data node.
    async fn incr(&self, _sess: &Session, db: &Db, key: &[u8], by: i64) -> R<i64> {
        let mut op = update(
            db,
            key,
            vec![
                ColumnUpdate { col: db::K_TYPE, expr: UpdateExpr::Expect(Value::UInt(TYPE_STRING as u64)) },
                ColumnUpdate { col: db::K_VALUE, expr: UpdateExpr::Add(Value::Int(by)) },
            ],
        )?;
        op.row = Meta::string(b"0").row(db, key)?;
        op.projection = Some(vec![db::K_VALUE]);
        if self.opts.dirty_incr.get(db.index as usize).copied().unwrap_or(false) {
            // Rondis' DirtyINCRDECR: no row lock; the increment is applied at commit.
            op.kind = OpKind::UpdateDirty;
        }
        let r = txn(self, |mut t| {
            let op = op.clone();
            async move { exec(&mut t, vec![op], Exec::Commit).await.map(Ok) }
        })
        .await?;
        match r.into_iter().next() {
            Some(OpResult::Row(b)) => {
                let v = db::bytes_of(db.keys.decode_projection(&[db::K_VALUE], &b)?.remove(0));
                parse_int(&v).ok_or_else(|| err(NOT_INT))
            }
            Some(OpResult::Error(e)) => Err(match e.code {
                ErrorCode::InvalidValue => err(NOT_INT),
                ErrorCode::ValueOutOfRange => err(OVERFLOW),
                _ => e.into(),
            }),
            other => Err(err(format!("ERR unexpected result {other:?}"))),
        }
    }

    /// APPEND (offset None) or SETRANGE: rewrites the value, keeping its expiry.
    async fn append_or_setrange(self: &Arc<Self>, db: &Arc<Db>, key: &[u8], off: Option<usize>, v: &[u8]) -> R<u64> {
        let me = self.clone();
        let dbc = db.clone();
        let (len, old) = txn(self, |mut t| {
            let (me, db) = (me.clone(), dbc.clone());
            async move {
                let r = exec(&mut t, vec![db::read_meta(&db, key, OpKind::ReadExclusive)?], Exec::NoCommit).await?;
                let m = match meta_of(&db, r.into_iter().next()) {
                    Ok(m) => m,
                    Err(e) => return Ok(Err(e)),
                };
                if m.as_ref().is_some_and(|m| m.kind != TYPE_STRING) {
                    return Ok(Err(err(WRONGTYPE)));
                }
                let mut value = match &m {
                    Some(m) => match me.assemble(&db, m).await {
                        Ok(Some(v)) => v,
                        Ok(None) => return Err(TernError::new(ErrorCode::Deadlock, "value changed")),
                        Err(e) => return Ok(Err(e)),
                    },
                    None => Vec::new(),
                };
                match off {
                    None => {
                        if value.len() + v.len() > VALUE_MAX {
                            return Ok(Err(err(TOO_BIG)));
                        }
                        value.extend_from_slice(v);
                    }
                    Some(o) => {
                        if v.is_empty() {
                            t.rollback().await?;
                            return Ok(Ok((value.len() as u64, None)));
                        }
                        if value.len() < o + v.len() {
                            value.resize(o + v.len(), 0);
                        }
                        value[o..o + v.len()].copy_from_slice(v);
                    }
                }
                let ops = match string_ops(&me, &db, key, &value, m.as_ref().and_then(|m| m.expiry)) {
                    Ok(o) => o,
                    Err(e) => return Ok(Err(e)),
                };
                let rs = exec_ordered(&me.client, &mut t, ops).await?;
                if let Some(OpResult::Error(e)) = rs.iter().find(|r| matches!(r, OpResult::Error(_))) {
                    return Err(e.clone());
                }
                Ok(Ok((value.len() as u64, m)))
            }
        })
        .await?;
        if let Some(m) = old {
            self.cleanup(db, &m);
        }
        Ok(len)
    }

    // ------------------------------------------------------------------ keys

    async fn del(self: &Arc<Self>, db: &Arc<Db>, keys: &[Vec<u8>]) -> R<i64> {
        let mut ops = Vec::new();
        for k in keys.iter().filter(|k| k.len() <= KEY_MAX) {
            let mut op = db.keys.delete(&[Value::Bytes(k.clone())])?;
            op.projection = Some(META.to_vec());
            ops.push(op);
        }
        let rs = txn(self, |mut t| {
            let ops = ops.clone();
            async move { exec_ordered_with(&self.client, &mut t, ops, AbortOption::IgnoreError).await.map(Ok) }
        })
        .await?;
        let mut n = 0;
        for r in rs {
            if let Some(m) = meta_of(db, Some(r))? {
                n += 1;
                self.cleanup(db, &m);
            }
        }
        Ok(n)
    }

    async fn exists(&self, db: &Db, keys: &[Vec<u8>]) -> R<i64> {
        let mut ops = Vec::new();
        for k in keys.iter().filter(|k| k.len() <= KEY_MAX) {
            ops.push(db.keys.read_columns(&[Value::Bytes(k.clone())], &[db::K_TYPE])?);
        }
        let rs = txn(self, |mut t| {
            let ops = ops.clone();
            async move { exec(&mut t, ops, Exec::Commit).await.map(Ok) }
        })
        .await?;
        let mut n = 0;
        for r in rs {
            if row_of(Some(r))?.is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    async fn expire(self: &Arc<Self>, db: &Arc<Db>, name: &str, a: &[Vec<u8>]) -> R<i64> {
        let v = int_arg(&a[2])?;
        let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
        for o in &a[3..] {
            if is(o, "nx") {
                nx = true;
            } else if is(o, "xx") {
                xx = true;
            } else if is(o, "gt") {
                gt = true;
            } else if is(o, "lt") {
                lt = true;
            } else {
                return Err(err(format!("ERR Unsupported option {}", String::from_utf8_lossy(o))));
            }
        }
        if nx && (xx || gt || lt) {
            return Err(err("ERR NX and XX, GT or LT options at the same time are not compatible"));
        }
        if gt && lt {
            return Err(err("ERR GT and LT options at the same time are not compatible"));
        }
        let bad = || err(format!("ERR invalid expire time in '{name}' command"));
        let ms = if name == "expire" || name == "expireat" { v.checked_mul(1000).ok_or_else(bad)? } else { v };
        let at = if name.ends_with("at") { ms } else { ms.checked_add(db::now_ms()).ok_or_else(bad)? };
        let dbc = db.clone();
        let key = &a[1];
        let (n, deleted) = txn(self, |mut t| {
            let db = dbc.clone();
            async move {
                let r = exec(&mut t, vec![db::read_meta(&db, key, OpKind::ReadExclusive)?], Exec::NoCommit).await?;
                let m = match meta_of(&db, r.into_iter().next()) {
                    Ok(Some(m)) => m,
                    Ok(None) => return Ok(Ok((0, None))),
                    Err(e) => return Ok(Err(e)),
                };
                let cur = m.expiry;
                let skip = (nx && cur.is_some())
                    || (xx && cur.is_none())
                    || (gt && cur.is_none_or(|c| at <= c))
                    || (lt && cur.is_some_and(|c| at >= c));
                if skip {
                    t.rollback().await?;
                    return Ok(Ok((0, None)));
                }
                if at <= db::now_ms() {
                    commit_checked(&mut t, vec![db.keys.delete(&[Value::Bytes(key.to_vec())])?]).await?;
                    return Ok(Ok((1, Some(m))));
                }
                let op = update(&db, key, vec![set_col(db::K_EXPIRY, db::expiry_value(Some(at)))])?;
                commit_checked(&mut t, vec![op]).await?;
                Ok(Ok((1, None)))
            }
        })
        .await?;
        if let Some(m) = deleted {
            self.cleanup(db, &m);
        }
        Ok(n)
    }

    async fn persist(&self, db: &Db, key: &[u8]) -> R<i64> {
        let mut op = update(
            db,
            key,
            vec![
                // Fails (per operation) when the key has no expiry: nothing to change then.
                ColumnUpdate { col: db::K_EXPIRY, expr: UpdateExpr::Set(Value::Null) },
            ],
        )?;
        op.projection = None;
        let read = db::read_meta(db, key, OpKind::ReadExclusive)?;
        txn(self, |mut t| {
            let (op, read) = (op.clone(), read.clone());
            async move {
                let r = exec(&mut t, vec![read], Exec::NoCommit).await?;
                match meta_of(db, r.into_iter().next()) {
                    Ok(Some(m)) if m.expiry.is_some() => {
                        commit_checked(&mut t, vec![op]).await?;
                        Ok(Ok(1))
                    }
                    Ok(_) => {
                        t.rollback().await?;
                        Ok(Ok(0))
                    }
                    Err(e) => Ok(Err(e)),
                }
            }
        })
        .await
    }

    async fn scan(&self, sess: &mut Session, db: &Arc<Db>, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let cursor = std::str::from_utf8(&a[1])
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| err("ERR invalid cursor"))?;
        let (mut pattern, mut count, mut kind) = (None, 10i64, None);
        let mut i = 2;
        while i < a.len() {
            let val = a.get(i + 1).ok_or_else(|| err(SYNTAX))?;
            if is(&a[i], "match") {
                pattern = Some(val.clone());
            } else if is(&a[i], "count") {
                count = int_arg(val)?;
                if count < 1 {
                    return Err(err(SYNTAX));
                }
            } else if is(&a[i], "type") {
                kind = Some(String::from_utf8_lossy(val).to_lowercase());
            } else {
                return Err(err(SYNTAX));
            }
            i += 2;
        }
        let scanner = if cursor == 0 {
            let mut spec = ScanSpec::table(db.keys.id());
            spec.projection = Some(vec![db::K_KEY, db::K_TYPE]);
            spec.batch_rows = count.min(4096) as u32;
            Some(self.client.scan(spec))
        } else {
            sess.cursors.remove(&cursor).filter(|(d, _)| *d == db.index).map(|(_, s)| s)
        };
        let mut keys = Vec::new();
        let mut next = 0;
        if let Some(mut sc) = scanner {
            let batch = sc.next_batch().await?;
            for r in batch.unwrap_or_default() {
                let v = db.keys.decode_projection(&[db::K_KEY, db::K_TYPE], &r)?;
                let key = db::bytes_of(v[0].clone());
                let t = if v[1].as_i128() == Some(TYPE_HASH as i128) { "hash" } else { "string" };
                if pattern.as_ref().is_some_and(|p| !glob(p, &key)) || kind.as_ref().is_some_and(|k| k != t) {
                    continue;
                }
                keys.push(key);
            }
            if !sc.is_done() {
                sess.next_cursor += 1;
                next = sess.next_cursor;
                if sess.cursors.len() >= 64
                    && let Some(&old) = sess.cursors.keys().min()
                {
                    sess.cursors.remove(&old);
                }
                sess.cursors.insert(next, (db.index, sc));
            }
        }
        resp::array_len(out, 2);
        resp::bulk(out, next.to_string().as_bytes());
        resp::array_len(out, keys.len());
        for k in keys {
            resp::bulk(out, &k);
        }
        Ok(())
    }

    /// (keys, keys with an expiry) of a database.
    pub async fn count_keys(&self, db: &Db) -> R<(u64, u64)> {
        let mut spec = ScanSpec::table(db.keys.id());
        spec.projection = Some(vec![db::K_EXPIRY]);
        spec.batch_rows = 4096;
        let mut sc = self.client.scan(spec);
        let (mut n, mut e) = (0, 0);
        while let Some(rows) = sc.next_batch().await? {
            for r in rows {
                n += 1;
                if !db.keys.decode_projection(&[db::K_EXPIRY], &r)?[0].is_null() {
                    e += 1;
                }
            }
        }
        Ok((n, e))
    }

    /// Deletes every row of database `index`'s tables.
    async fn flush(&self, index: u32) -> R {
        let db = self.db(index)?;
        for (t, key_cols) in [(&db.keys, vec![0u16]), (&db.values, vec![0, 1]), (&db.hashes, vec![0, 1])] {
            loop {
                let mut spec = ScanSpec::table(t.id());
                spec.projection = Some(key_cols.clone());
                spec.batch_rows = 1024;
                spec.limit = 4096;
                let rows = self.client.scan(spec.clone()).collect().await?;
                let mut spec_exp = spec.clone();
                spec_exp.expired = true;
                let expired =
                    if t.id() == db.keys.id() { self.client.scan(spec_exp).collect().await? } else { Vec::new() };
                if rows.is_empty() && expired.is_empty() {
                    break;
                }
                let mut ops = Vec::new();
                for r in &rows {
                    ops.push(t.delete(&t.decode_projection(&key_cols, r)?)?);
                }
                for r in &expired {
                    let mut op = t.delete(&t.decode_projection(&key_cols, r)?)?;
                    op.kind = OpKind::DeleteExpired;
                    ops.push(op);
                }
                txn(self, |mut tx| {
                    let ops = ops.clone();
                    async move {
                        exec_ordered_with(&self.client, &mut tx, ops, AbortOption::IgnoreError).await.map(|_| Ok(()))
                    }
                })
                .await?;
            }
        }
        Ok(())
    }

    /// Deletes expired keys of database `db` with their parts and fields (a few batches).
    pub async fn purge(&self, db: &Db, max: u64) -> R<u64> {
        let mut spec = ScanSpec::table(db.keys.id());
        spec.expired = true;
        spec.projection = Some(vec![db::K_KEY, db::K_ID, db::K_TYPE, db::K_PARTS]);
        spec.batch_rows = 256;
        spec.limit = max;
        let rows = self.client.scan(spec).collect().await?;
        let mut purged = 0;
        for chunk in rows.chunks(256) {
            let mut ops = Vec::new();
            let mut metas = Vec::new();
            for r in chunk {
                let v = db.keys.decode_projection(&[db::K_KEY, db::K_ID, db::K_TYPE, db::K_PARTS], r)?;
                let mut op = db.keys.delete(&[v[0].clone()])?;
                op.kind = OpKind::DeleteExpired;
                ops.push(op);
                let mut m = Meta::hash(v[1].as_i128().unwrap_or(0) as u64);
                m.kind = v[2].as_i128().unwrap_or(0) as u8;
                m.parts = v[3].as_i128().unwrap_or(0) as u32;
                metas.push(m);
            }
            let rs = txn(self, |mut t| {
                let ops = ops.clone();
                async move { exec_ordered_with(&self.client, &mut t, ops, AbortOption::IgnoreError).await.map(Ok) }
            })
            .await?;
            for (r, m) in rs.into_iter().zip(metas) {
                if r == OpResult::Done {
                    purged += 1;
                    self.cleanup_now(db, &m).await?;
                }
            }
        }
        Ok(purged)
    }

    // ------------------------------------------------------------------ hashes

    /// HSET/HMSET: returns how many fields were new.
    async fn hset(self: &Arc<Self>, db: &Arc<Db>, key: &[u8], pairs: &[Vec<u8>]) -> R<i64> {
        for p in pairs.chunks(2) {
            check_key(&p[0])?;
            if p[1].len() > HASH_VALUE_MAX {
                return Err(err(format!("ERR hash values are limited to {HASH_VALUE_MAX} bytes")));
            }
        }
        let me = self.clone();
        let dbc = db.clone();
        txn(self, |mut t| {
            let (me, db) = (me.clone(), dbc.clone());
            async move {
                let r = exec(&mut t, vec![db::read_meta(&db, key, OpKind::ReadExclusive)?], Exec::NoCommit).await?;
                let old = match meta_of(&db, r.into_iter().next()) {
                    Ok(m) => m,
                    Err(e) => return Ok(Err(e)),
                };
                let mut meta = match old {
                    Some(m) if m.kind != TYPE_HASH => return Ok(Err(err(WRONGTYPE))),
                    Some(m) => m,
                    None => match me.new_id(&db) {
                        Ok(id) => Meta::hash(id),
                        Err(e) => return Ok(Err(e)),
                    },
                };
                let mut ops = Vec::new();
                for p in pairs.chunks(2) {
                    let mut op = db.hashes.write(&[
                        Value::UInt(meta.id),
                        Value::Bytes(p[0].clone()),
                        Value::Bytes(p[1].clone()),
                    ])?;
                    op.projection = Some(vec![1]);
                    ops.push(op);
                }
                let rs = exec(&mut t, ops, Exec::NoCommit).await?;
                let mut added = 0;
                for r in rs {
                    match r {
                        OpResult::NotFound => added += 1,
                        OpResult::Error(e) => return Err(e),
                        _ => {}
                    }
                }
                meta.len += added as u64;
                let w = db::write_meta(&db, key, &meta)?;
                let rs = exec(&mut t, vec![w], Exec::Commit).await?;
                if let Some(OpResult::Error(e)) = rs.into_iter().next() {
                    return Err(e);
                }
                Ok(Ok(added))
            }
        })
        .await
    }

    /// HGET/HMGET/HEXISTS: the values of `fields` (None: absent).
    async fn hget(&self, db: &Db, key: &[u8], fields: &[Vec<u8>]) -> R<Vec<Option<Vec<u8>>>> {
        let m = match self.read_meta(db, key).await? {
            None => return Ok(vec![None; fields.len()]),
            Some(m) if m.kind != TYPE_HASH => return Err(err(WRONGTYPE)),
            Some(m) => m,
        };
        let mut ops = Vec::new();
        let mut idx = Vec::new();
        for (i, f) in fields.iter().enumerate() {
            if f.len() <= KEY_MAX {
                ops.push(db.hashes.read_columns(&db::field_key(f, m.id), &[2])?);
                idx.push(i);
            }
        }
        let rs = txn(self, |mut t| {
            let ops = ops.clone();
            async move { exec(&mut t, ops, Exec::Commit).await.map(Ok) }
        })
        .await?;
        let mut out = vec![None; fields.len()];
        for (i, r) in idx.into_iter().zip(rs) {
            if let Some(b) = row_of(Some(r))? {
                out[i] = Some(db::bytes_of(db.hashes.decode_projection(&[2], &b)?.remove(0)));
            }
        }
        Ok(out)
    }

    async fn hdel(self: &Arc<Self>, db: &Arc<Db>, key: &[u8], fields: &[Vec<u8>]) -> R<i64> {
        let dbc = db.clone();
        txn(self, |mut t| {
            let db = dbc.clone();
            async move {
                let r = exec(&mut t, vec![db::read_meta(&db, key, OpKind::ReadExclusive)?], Exec::NoCommit).await?;
                let mut meta = match meta_of(&db, r.into_iter().next()) {
                    Ok(Some(m)) if m.kind == TYPE_HASH => m,
                    Ok(Some(_)) => return Ok(Err(err(WRONGTYPE))),
                    Ok(None) => return Ok(Ok(0)),
                    Err(e) => return Ok(Err(e)),
                };
                let mut ops = Vec::new();
                for f in fields.iter().filter(|f| f.len() <= KEY_MAX) {
                    ops.push(db.hashes.delete(&db::field_key(f, meta.id))?);
                }
                let rs = exec(&mut t, ops, Exec::NoCommit).await?;
                let removed = rs.iter().filter(|r| **r == OpResult::Done).count() as u64;
                meta.len = meta.len.saturating_sub(removed);
                let op = if meta.len == 0 {
                    db.keys.delete(&[Value::Bytes(key.to_vec())])?
                } else {
                    update(&db, key, vec![set_col(db::K_LEN, Value::UInt(meta.len))])?
                };
                commit_checked(&mut t, vec![op]).await?;
                Ok(Ok(removed as i64))
            }
        })
        .await
    }

    /// HINCRBY: the field's value is changed inside the data node (an upserting in-node add).
    async fn hincrby(self: &Arc<Self>, db: &Arc<Db>, key: &[u8], field: &[u8], by: i64) -> R<i64> {
        check_key(field)?;
        let me = self.clone();
        let dbc = db.clone();
        txn(self, |mut t| {
            let (me, db) = (me.clone(), dbc.clone());
            async move {
                let r = exec(&mut t, vec![db::read_meta(&db, key, OpKind::ReadExclusive)?], Exec::NoCommit).await?;
                let (mut meta, existed) = match meta_of(&db, r.into_iter().next()) {
                    Ok(Some(m)) if m.kind == TYPE_HASH => (m, true),
                    Ok(Some(_)) => return Ok(Err(err(WRONGTYPE))),
                    Ok(None) => match me.new_id(&db) {
                        Ok(id) => (Meta::hash(id), false),
                        Err(e) => return Ok(Err(e)),
                    },
                    Err(e) => return Ok(Err(e)),
                };
                let fk = db::field_key(field, meta.id);
                let is_new = if existed {
                    let r = exec(&mut t, vec![db.hashes.read_columns(&fk, &[1])?], Exec::NoCommit).await?;
                    !matches!(r.first(), Some(OpResult::Row(_)))
                } else {
                    true
                };
                let mut op =
                    db.hashes.update(&fk, vec![ColumnUpdate { col: 2, expr: UpdateExpr::Add(Value::Int(by)) }])?;
                op.row = db.hashes.row(&[fk[0].clone(), fk[1].clone(), Value::Bytes(b"0".to_vec())])?;
                op.projection = Some(vec![2]);
                let mut ops = vec![op];
                if is_new {
                    meta.len += 1;
                    ops.push(db::write_meta(&db, key, &meta)?);
                }
                let rs = exec(&mut t, ops, Exec::NoCommit).await?;
                let v = match rs.into_iter().next() {
                    Some(OpResult::Row(b)) => db::bytes_of(db.hashes.decode_projection(&[2], &b)?.remove(0)),
                    Some(OpResult::Error(e)) => {
                        t.rollback().await?;
                        return Ok(Err(match e.code {
                            ErrorCode::InvalidValue => err("ERR hash value is not an integer"),
                            ErrorCode::ValueOutOfRange => err(OVERFLOW),
                            _ => e.into(),
                        }));
                    }
                    other => return Ok(Err(err(format!("ERR unexpected result {other:?}")))),
                };
                exec(&mut t, Vec::new(), Exec::Commit).await?;
                Ok(parse_int(&v).ok_or_else(|| err("ERR hash value is not an integer")))
            }
        })
        .await
    }

    // ------------------------------------------------------------------ connection and server

    fn hello(&self, sess: &mut Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let mut i = 1;
        let mut proto = None;
        if let Some(v) = a.get(1) {
            let p = parse_int(v).ok_or_else(|| err("ERR Protocol version is not an integer or out of range"))?;
            if p != 2 && p != 3 {
                return Err(err("NOPROTO unsupported protocol version"));
            }
            proto = Some(p == 3);
            i = 2;
        }
        while i < a.len() {
            if is(&a[i], "setname") && i + 1 < a.len() {
                sess.name = Some(a[i + 1].clone());
                i += 2;
            } else if is(&a[i], "auth") && i + 2 < a.len() {
                i += 3;
            } else {
                return Err(err(format!("ERR Syntax error in HELLO option '{}'", String::from_utf8_lossy(&a[i]))));
            }
        }
        if let Some(r3) = proto {
            sess.resp3 = r3;
        }
        resp::array_len(out, 14);
        for (k, v) in [("server", "redis"), ("version", crate::REDIS_VERSION)] {
            resp::bulk(out, k.as_bytes());
            resp::bulk(out, v.as_bytes());
        }
        resp::bulk(out, b"proto");
        resp::integer(out, if sess.resp3 { 3 } else { 2 });
        resp::bulk(out, b"id");
        resp::integer(out, sess.id as i64);
        for (k, v) in [("mode", "standalone"), ("role", "master")] {
            resp::bulk(out, k.as_bytes());
            resp::bulk(out, v.as_bytes());
        }
        resp::bulk(out, b"modules");
        resp::array_len(out, 0);
        Ok(())
    }

    fn client_cmd(&self, sess: &mut Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let sub = String::from_utf8_lossy(&a[1]).to_lowercase();
        match (sub.as_str(), a.len()) {
            ("setname", 3) => {
                if a[2].iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
                    return Err(err("ERR Client names cannot contain spaces, newlines or special characters."));
                }
                sess.name = if a[2].is_empty() { None } else { Some(a[2].clone()) };
                resp::simple(out, "OK");
            }
            ("getname", 2) => match &sess.name {
                Some(n) => resp::bulk(out, n),
                None => resp::null(out),
            },
            ("id", 2) => resp::integer(out, sess.id as i64),
            ("setinfo", 4) => resp::simple(out, "OK"),
            ("setname" | "getname" | "id" | "setinfo", _) => {
                return Err(err(format!("ERR wrong number of arguments for 'client|{sub}' command")));
            }
            _ => {
                return Err(err(format!(
                    "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                    String::from_utf8_lossy(&a[1])
                )));
            }
        }
        Ok(())
    }

    fn config_cmd(&self, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let sub = String::from_utf8_lossy(&a[1]).to_lowercase();
        match sub.as_str() {
            "get" if a.len() >= 3 => {
                let known = [("save", ""), ("appendonly", "no"), ("databases", "")];
                let mut pairs = Vec::new();
                for p in &a[2..] {
                    for (k, v) in known {
                        if glob(p, k.as_bytes()) && !pairs.iter().any(|(x, _): &(String, String)| x == k) {
                            let v = if k == "databases" { self.opts.databases.to_string() } else { v.to_string() };
                            pairs.push((k.to_string(), v));
                        }
                    }
                }
                resp::array_len(out, pairs.len() * 2);
                for (k, v) in pairs {
                    resp::bulk(out, k.as_bytes());
                    resp::bulk(out, v.as_bytes());
                }
            }
            "get" => return Err(err("ERR wrong number of arguments for 'config|get' command")),
            "set" | "resetstat" | "rewrite" => {
                return Err(err(format!("ERR CONFIG {} is not supported by Tern", sub.to_uppercase())));
            }
            _ => {
                return Err(err(format!(
                    "ERR unknown subcommand '{}'. Try CONFIG HELP.",
                    String::from_utf8_lossy(&a[1])
                )));
            }
        }
        Ok(())
    }

    fn command_cmd(&self, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let sub = a.get(1).map(|s| String::from_utf8_lossy(s).to_lowercase());
        match sub.as_deref() {
            Some("count") => resp::integer(out, COMMANDS.len() as i64),
            Some("docs") => resp::array_len(out, 0),
            None | Some("info") => {
                let names: Vec<&(&str, i32)> = match a.get(2..) {
                    Some(ns) if !ns.is_empty() => ns
                        .iter()
                        .filter_map(|n| {
                            let n = String::from_utf8_lossy(n).to_lowercase();
                            COMMANDS.iter().find(|(c, _)| *c == n)
                        })
                        .collect(),
                    _ => COMMANDS.iter().collect(),
                };
                resp::array_len(out, names.len());
                for (n, arity) in names {
                    // name, arity, flags, first key, last key, step (redis 2.8 shape).
                    resp::array_len(out, 6);
                    resp::bulk(out, n.as_bytes());
                    resp::integer(out, *arity as i64);
                    resp::array_len(out, 0);
                    let keyed = !matches!(
                        *n,
                        "ping"
                            | "echo"
                            | "select"
                            | "quit"
                            | "hello"
                            | "client"
                            | "config"
                            | "command"
                            | "info"
                            | "dbsize"
                            | "flushdb"
                            | "flushall"
                            | "auth"
                            | "scan"
                    );
                    let last = if matches!(*n, "mget" | "del" | "exists" | "mset") { -1 } else { keyed as i64 };
                    resp::integer(out, keyed as i64);
                    resp::integer(out, last);
                    resp::integer(out, if *n == "mset" { 2 } else { keyed as i64 });
                }
            }
            Some(other) => {
                return Err(err(format!("ERR unknown subcommand '{other}'. Try COMMAND HELP.")));
            }
        }
        Ok(())
    }

    async fn info(&self, sess: &Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let want = |s: &str| {
            a.len() < 2 || a[1..].iter().any(|x| is(x, s) || is(x, "all") || is(x, "everything") || is(x, "default"))
        };
        let mut t = String::new();
        if want("server") {
            t.push_str(&format!(
                "# Server\r\nredis_version:{}\r\nredis_mode:standalone\r\ntern_version:{}\r\nos:Linux\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
                crate::REDIS_VERSION,
                env!("CARGO_PKG_VERSION"),
                std::process::id(),
                self.port,
                self.started.elapsed().as_secs()
            ));
        }
        if want("clients") {
            t.push_str(&format!(
                "# Clients\r\nconnected_clients:{}\r\n\r\n",
                self.stats.connected.load(Ordering::Relaxed)
            ));
        }
        if want("stats") {
            t.push_str(&format!(
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nexpired_keys:{}\r\n\r\n",
                self.stats.connections.load(Ordering::Relaxed),
                self.stats.commands.load(Ordering::Relaxed),
                self.stats.expired.load(Ordering::Relaxed),
            ));
        }
        if want("keyspace") {
            t.push_str("# Keyspace\r\n");
            for i in 0..self.opts.databases {
                if self.is_open(i) || i == sess.db {
                    let db = self.db(i)?;
                    let (n, e) = self.count_keys(&db).await?;
                    if n > 0 {
                        t.push_str(&format!("db{i}:keys={n},expires={e},avg_ttl=0\r\n"));
                    }
                }
            }
        }
        resp::bulk(out, t.as_bytes());
        Ok(())
    }
}

/// GETRANGE's index rules (negative from the end, clamped, empty when start > end).
fn range(v: &[u8], start: i64, end: i64) -> &[u8] {
    let len = v.len() as i64;
    if len == 0 {
        return &[];
    }
    let (mut s, mut e) = (start, end);
    if s < 0 {
        s += len;
    }
    if e < 0 {
        e += len;
    }
    s = s.max(0);
    e = e.max(0);
    if e >= len {
        e = len - 1;
    }
    if s > e || start > 0 && s >= len {
        return &[];
    }
    &v[s as usize..=e as usize]
}

/// Glob matching as redis's `stringmatchlen` (*, ?, [abc], [^a-z], \x), case-sensitive.
pub fn glob(p: &[u8], s: &[u8]) -> bool {
    match p.first() {
        None => s.is_empty(),
        Some(b'*') => {
            let rest = &p[1..];
            (0..=s.len()).any(|i| glob(rest, &s[i..]))
        }
        Some(b'?') => !s.is_empty() && glob(&p[1..], &s[1..]),
        Some(b'[') => {
            let Some(&c) = s.first() else { return false };
            let mut i = 1;
            let not = p.get(1) == Some(&b'^');
            if not {
                i += 1;
            }
            let mut matched = false;
            while i < p.len() && p[i] != b']' {
                if p[i] == b'\\' && i + 1 < p.len() {
                    matched |= p[i + 1] == c;
                    i += 2;
                } else if i + 2 < p.len() && p[i + 1] == b'-' && p[i + 2] != b']' {
                    let (lo, hi) = if p[i] <= p[i + 2] { (p[i], p[i + 2]) } else { (p[i + 2], p[i]) };
                    matched |= (lo..=hi).contains(&c);
                    i += 3;
                } else {
                    matched |= p[i] == c;
                    i += 1;
                }
            }
            if matched == not {
                return false;
            }
            let rest = if i < p.len() { &p[i + 1..] } else { &p[i..] };
            glob(rest, &s[1..])
        }
        Some(b'\\') if p.len() > 1 => s.first() == Some(&p[1]) && glob(&p[2..], &s[1..]),
        Some(&c) => s.first() == Some(&c) && glob(&p[1..], &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_like_redis() {
        assert!(glob(b"*", b"anything"));
        assert!(glob(b"user:*", b"user:1"));
        assert!(!glob(b"user:*", b"usr:1"));
        assert!(glob(b"h?llo", b"hello") && !glob(b"h?llo", b"hllo"));
        assert!(glob(b"h[ae]llo", b"hallo") && !glob(b"h[ae]llo", b"hillo"));
        assert!(glob(b"h[^e]llo", b"hallo") && !glob(b"h[^e]llo", b"hello"));
        assert!(glob(b"h[a-c]llo", b"hbllo") && !glob(b"h[a-c]llo", b"hdllo"));
        assert!(glob(b"a\\*b", b"a*b") && !glob(b"a\\*b", b"axb"));
    }

    #[test]
    fn getrange_indexes() {
        let v = b"This is a string";
        assert_eq!(range(v, 0, 3), b"This");
        assert_eq!(range(v, -3, -1), b"ing");
        assert_eq!(range(v, 0, -1), v);
        assert_eq!(range(v, 10, 100), b"string");
        assert_eq!(range(v, 5, 3), b"");
        assert_eq!(range(v, 100, 200), b"");
        assert_eq!(range(b"", 0, -1), b"");
    }

    #[test]
    fn unknown_and_arity_errors() {
        let a = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        assert_eq!(
            lookup(&a(&["foo", "a", "b"])).unwrap_err().0,
            "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
        );
        assert_eq!(lookup(&a(&["GET"])).unwrap_err().0, "ERR wrong number of arguments for 'get' command");
        assert_eq!(lookup(&a(&["Set", "k", "v"])).unwrap(), "set");
    }
}
