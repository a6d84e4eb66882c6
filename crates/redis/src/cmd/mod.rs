//! The commands (interfaces.md §2) with redis-server's replies and error texts: the command table
//! with arities, the dispatcher, and what every family shares (error replies, argument parsing,
//! reading a key row and a string's overflow parts). Each command is one transaction of batched
//! key operations; GET and plain SET runs from a pipeline are merged into one transaction (see
//! `Server::run_pipeline`). The families live in `strings`, `keys`, `hashes`, `server` and
//! `transactions`.

mod config;
mod hashes;
mod keys;
mod server;
mod strings;
mod transactions;

pub use transactions::{exec_batched, exec_ordered, exec_ordered_with, write_txn};

use crate::db::{self, Db, INLINE_MAX, KEY_MAX, Meta, TYPE_HASH, TYPE_STRING, VALUE_MAX};
use crate::resp::{self, parse_int};
use crate::{Server, Session};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use strings::range;
use tern_client::{ColumnUpdate, ErrorCode, Exec, KeyOp, OpKind, OpResult, TernError, UpdateExpr, Value};
use transactions::{exec, txn};

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
            // Whatever the command wrote before it failed (an array's start) goes.
            out.truncate(start);
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
                sess.info.db.store(sess.db, Ordering::Relaxed);
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
        assert_eq!(lookup(&a(&["Set", "k", "v"])).unwrap(), "set");
    }
}
