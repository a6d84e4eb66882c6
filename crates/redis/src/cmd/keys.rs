//! Key commands over every type: DEL, EXISTS, TYPE, the EXPIRE and TTL families, PERSIST,
//! RENAME(NX), COPY, MOVE, KEYS, SCAN and RANDOMKEY (scans of `string_keys`, with redis-server's
//! glob patterns), DBSIZE's count, FLUSHDB/FLUSHALL, MEMORY USAGE's estimate and the purge of
//! expired keys.
//!
//! Scans read committed rows: inside EXEC they do not see the transaction's own writes.

use super::{
    CR, Cx, Fail, NO_SUCH_KEY, NOT_INT, Pace, R, SYNTAX, delete_key, err, fail, int_arg, is, meta_of, old_of, set_col,
    update,
};
use crate::db::{self, Db, KEY_MAX, Meta, TYPE_HASH, TYPE_LIST, TYPE_SET, TYPE_STRING, TYPE_ZSET};
use crate::glob::Glob;
use crate::resp;
use crate::{Server, Session};
use std::sync::Arc;
use tern_client::TableHandle;
use tern_client::{AbortOption, KeyOp, OpKind, OpResult, ScanSpec, Value};

/// Rows of `string_keys` one SCAN call reads at most (COUNT is a hint, as in redis).
const SCAN_BATCH_MAX: i64 = 4096;
/// Open SCAN/HSCAN cursors per connection; the oldest goes beyond.
const CURSORS_MAX: usize = 64;
/// Rows RANDOMKEY reads from the partition it picks.
const RANDOM_SAMPLE: u64 = 64;

pub(super) fn type_name(kind: u8) -> &'static str {
    match kind {
        TYPE_HASH => "hash",
        TYPE_LIST => "list",
        TYPE_SET => "set",
        TYPE_ZSET => "zset",
        _ => "string",
    }
}

/// The expiry-family reply for a key row: -2 no key, -1 no expiry, else `f(expiry ms)`.
fn ttl_reply(m: Option<Meta>, f: impl Fn(i64) -> i64) -> i64 {
    match m {
        None => -2,
        Some(Meta { expiry: None, .. }) => -1,
        Some(Meta { expiry: Some(e), .. }) => f(e),
    }
}

impl Server {
    /// The key commands; false when `name` is not one.
    pub(super) async fn key_command(
        &self,
        cx: &mut Cx,
        sess: &mut Session,
        db: &Arc<Db>,
        name: &str,
        a: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> CR<bool> {
        match name {
            "del" | "unlink" => resp::integer(out, self.del(cx, db, &a[1..]).await?),
            "exists" => resp::integer(out, self.exists(cx, db, &a[1..]).await?),
            "type" => {
                let m = self.read_meta(cx, db, &a[1], false).await?;
                resp::simple(out, m.map_or("none", |m| type_name(m.kind)));
            }
            "expire" | "pexpire" | "expireat" | "pexpireat" => resp::integer(out, self.expire(cx, db, name, a).await?),
            "ttl" | "pttl" | "expiretime" | "pexpiretime" => {
                let m = self.read_meta(cx, db, &a[1], false).await?;
                let now = db::now_ms();
                resp::integer(
                    out,
                    ttl_reply(m, |e| match name {
                        "ttl" => ((e - now).max(0) + 500) / 1000,
                        "pttl" => (e - now).max(0),
                        "expiretime" => e / 1000,
                        _ => e,
                    }),
                );
            }
            "persist" => resp::integer(out, self.persist(cx, db, &a[1]).await?),
            "keys" => {
                let keys = self.keys(db, &a[1]).await?;
                resp::array_len(out, keys.len());
                keys.iter().for_each(|k| resp::bulk(out, k));
            }
            "scan" => self.scan(sess, db, a, out).await?,
            "randomkey" => match self.random_key(db).await? {
                Some(k) => resp::bulk(out, &k),
                None => resp::null(out),
            },
            "rename" | "renamenx" => {
                let done = self.rename(cx, db, &a[1], &a[2], name == "renamenx").await?;
                if name == "rename" {
                    resp::simple(out, "OK");
                } else {
                    resp::integer(out, done as i64);
                }
            }
            "copy" => resp::integer(out, self.copy(cx, db, a).await? as i64),
            "move" => resp::integer(out, self.move_key(cx, db, &a[1], &a[2]).await? as i64),
            "dbsize" => resp::integer(out, self.count_keys(db).await?.0 as i64),
            "flushdb" | "flushall" => {
                if let Some(o) = a.get(1)
                    && (a.len() > 2 || !(is(o, "sync") || is(o, "async")))
                {
                    return fail(SYNTAX);
                }
                if name == "flushdb" {
                    self.flush_in(cx, db.index).await?;
                } else {
                    for i in 0..self.opts.databases {
                        if self.is_open(i) {
                            self.flush_in(cx, i).await?;
                        }
                    }
                }
                resp::simple(out, "OK");
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    async fn del(&self, cx: &mut Cx, db: &Arc<Db>, keys: &[Vec<u8>]) -> CR<i64> {
        let mut ops = Vec::new();
        for k in keys.iter().filter(|k| k.len() <= KEY_MAX) {
            ops.push(delete_key(db, k)?);
        }
        let rs = cx.write_ordered(ops, AbortOption::IgnoreError, true).await?;
        let mut n = 0;
        for (k, r) in keys.iter().filter(|k| k.len() <= KEY_MAX).zip(rs) {
            if let Some(m) = meta_of(db, Some(r))? {
                n += 1;
                cx.garbage(db, m);
                self.touched(cx, db.index, k, true);
            }
        }
        Ok(n)
    }

    async fn exists(&self, cx: &mut Cx, db: &Db, keys: &[Vec<u8>]) -> CR<i64> {
        let mut ops = Vec::new();
        for k in keys.iter().filter(|k| k.len() <= KEY_MAX) {
            ops.push(db.keys.read_columns(&[Value::Bytes(k.clone())], &[db::K_TYPE])?);
        }
        let rs = cx.last(ops).await?;
        for (k, r) in keys.iter().filter(|k| k.len() <= KEY_MAX).zip(&rs) {
            if !matches!(r, OpResult::Row(_)) {
                cx.key_miss(db.index, k);
            }
        }
        Ok(rs.iter().filter(|r| matches!(r, OpResult::Row(_))).count() as i64)
    }

    async fn expire(&self, cx: &mut Cx, db: &Arc<Db>, name: &str, a: &[Vec<u8>]) -> CR<i64> {
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
                return fail(format!("ERR Unsupported option {}", String::from_utf8_lossy(o)));
            }
        }
        if nx && (xx || gt || lt) {
            return fail("ERR NX and XX, GT or LT options at the same time are not compatible");
        }
        if gt && lt {
            return fail("ERR GT and LT options at the same time are not compatible");
        }
        let bad = || err(format!("ERR invalid expire time in '{name}' command"));
        let ms = if name == "expire" || name == "expireat" { v.checked_mul(1000).ok_or_else(bad)? } else { v };
        let at = if name.ends_with("at") { ms } else { ms.checked_add(db::now_ms()).ok_or_else(bad)? };
        let key = &a[1];
        let Some(m) = self.read_meta(cx, db, key, true).await? else { return Ok(0) };
        let cur = m.expiry;
        let skip = (nx && cur.is_some())
            || (xx && cur.is_none())
            || (gt && cur.is_none_or(|c| at <= c))
            || (lt && cur.is_some_and(|c| at >= c));
        if skip {
            return Ok(0);
        }
        let gone = at <= db::now_ms();
        if gone {
            cx.write(vec![db.keys.delete(&[Value::Bytes(key.to_vec())])?], true).await?;
            cx.garbage(db, m);
        } else {
            cx.write(vec![update(db, key, vec![set_col(db::K_EXPIRY, db::expiry_value(Some(at)))])?], true).await?;
        }
        self.touched(cx, db.index, key, gone);
        Ok(1)
    }

    async fn persist(&self, cx: &mut Cx, db: &Db, key: &[u8]) -> CR<i64> {
        match self.read_meta(cx, db, key, true).await? {
            Some(m) if m.expiry.is_some() => {
                cx.write(vec![update(db, key, vec![set_col(db::K_EXPIRY, Value::Null)])?], true).await?;
                self.touched(cx, db.index, key, false);
                Ok(1)
            }
            _ => Ok(0),
        }
    }

    /// Locks the key rows of `keys` (database, key) in the front end's lock order; their rows.
    pub(super) async fn lock_keys(&self, cx: &mut Cx, keys: &[(&Db, &[u8])]) -> CR<Vec<Option<Meta>>> {
        let ops = keys.iter().map(|(d, k)| db::read_meta(d, k, OpKind::ReadExclusive)).collect::<Result<_, _>>()?;
        let rs = cx.write_ordered(ops, AbortOption::IgnoreError, false).await?;
        let mut metas = Vec::new();
        for ((d, _), r) in keys.iter().zip(rs) {
            metas.push(meta_of(d, Some(r))?);
        }
        Ok(metas)
    }

    /// RENAME / RENAMENX: the key row moves (its parts or fields stay under its `rondb_key`,
    /// its expiry with it); a replaced destination's rows go. False: RENAMENX found the
    /// destination.
    async fn rename(&self, cx: &mut Cx, db: &Arc<Db>, src: &[u8], dst: &[u8], nx: bool) -> CR<bool> {
        let metas = self.lock_keys(cx, &[(db, src), (db, dst)]).await?;
        let Some(m) = metas[0].clone() else { return fail(NO_SUCH_KEY) };
        if src == dst {
            return Ok(!nx);
        }
        if nx && metas[1].is_some() {
            return Ok(false);
        }
        let ops = vec![db.keys.delete(&[Value::Bytes(src.to_vec())])?, db::write_meta(db, dst, &m)?];
        let rs = cx.write(ops, true).await?;
        if let Some(old) = old_of(db, rs.into_iter().nth(1))? {
            cx.garbage(db, old);
        }
        self.touched(cx, db.index, src, true);
        self.touched(cx, db.index, dst, false);
        Ok(true)
    }

    /// COPY src dst [DB n] [REPLACE]: a new value (fresh `rondb_key`, parts or fields copied)
    /// with the source's expiry.
    async fn copy(&self, cx: &mut Cx, db: &Arc<Db>, a: &[Vec<u8>]) -> CR<bool> {
        let (mut to, mut replace) = (db.index, false);
        let mut i = 3;
        while i < a.len() {
            if is(&a[i], "replace") {
                replace = true;
            } else if is(&a[i], "db") && i + 1 < a.len() {
                to = self.db_index(&a[i + 1])?;
                i += 1;
            } else {
                return fail(SYNTAX);
            }
            i += 1;
        }
        let (src, dst) = (&a[1], &a[2]);
        if to == db.index && src == dst {
            return fail("ERR source and destination objects are the same");
        }
        let tdb = self.db(to).await?;
        let metas = self.lock_keys(cx, &[(db, src), (&tdb, dst)]).await?;
        let Some(m) = metas[0].clone() else { return Ok(false) };
        if metas[1].is_some() && !replace {
            return Ok(false);
        }
        self.copy_value(cx, db, &m, &tdb, dst).await?;
        self.touched(cx, to, dst, false);
        Ok(true)
    }

    /// MOVE key db: the value is copied to the other database and deleted here, unless the key is
    /// missing here or present there.
    async fn move_key(&self, cx: &mut Cx, db: &Arc<Db>, key: &[u8], to: &[u8]) -> CR<bool> {
        let to = self.db_index(to)?;
        if to == db.index {
            return fail("ERR source and destination objects are the same");
        }
        let tdb = self.db(to).await?;
        let metas = self.lock_keys(cx, &[(db, key), (&tdb, key)]).await?;
        let Some(m) = metas[0].clone() else { return Ok(false) };
        if metas[1].is_some() {
            return Ok(false);
        }
        self.copy_value(cx, db, &m, &tdb, key).await?;
        cx.write(vec![db.keys.delete(&[Value::Bytes(key.to_vec())])?], true).await?;
        cx.garbage(db, m);
        self.touched(cx, db.index, key, true);
        self.touched(cx, to, key, false);
        Ok(true)
    }

    /// A database index argument of COPY/MOVE.
    fn db_index(&self, a: &[u8]) -> CR<u32> {
        let n = int_arg(a).map_err(|_| err(NOT_INT))?;
        if n < 0 || n >= self.opts.databases as i64 || n > i32::MAX as i64 {
            return fail("ERR DB index is out of range");
        }
        Ok(n as u32)
    }

    /// Writes a copy of the value whose key row is `m` (in `from`) under `key` in `to`, with
    /// its expiry; the destination's previous rows go after the commit.
    async fn copy_value(&self, cx: &mut Cx, from: &Arc<Db>, m: &Meta, to: &Arc<Db>, key: &[u8]) -> CR {
        if m.kind == TYPE_STRING {
            let v = self.assemble(cx, from, m).await?.ok_or_else(super::transactions::changed)?;
            let ops = self.string_ops(to, key, &v, m.expiry).await?;
            let rs = cx.write(ops, false).await?;
            if let Some(old) = old_of(to, rs.into_iter().next())? {
                cx.garbage(to, old);
            }
            return Ok(());
        }
        if m.kind != TYPE_HASH {
            return self.copy_collection(cx, from, m, to, key).await;
        }
        let fields = self.hash_fields(cx, from, m.id, true).await?;
        let mut meta = Meta::hash(self.new_id(to).await?);
        meta.len = fields.len() as u64;
        meta.expiry = m.expiry;
        meta.start = m.start.clone();
        let mut ops: Vec<KeyOp> = Vec::with_capacity(fields.len() + 1);
        for (f, v) in &fields {
            ops.push(to.hashes.write(&[Value::UInt(meta.id), Value::Bytes(f.clone()), Value::Bytes(v.clone())])?);
        }
        cx.write(ops, false).await?;
        if cx.multi {
            let changes = cx.fields.entry((to.index, meta.id)).or_default();
            fields.into_iter().for_each(|(f, v)| _ = changes.insert(f, Some(v)));
        }
        let rs = cx.write(vec![db::write_meta(to, key, &meta)?], false).await?;
        if let Some(old) = old_of(to, rs.into_iter().next())? {
            cx.garbage(to, old);
        }
        Ok(())
    }

    /// KEYS: every live key matching the pattern (a full scan, like redis-server's).
    async fn keys(&self, db: &Db, pattern: &[u8]) -> R<Vec<Vec<u8>>> {
        let mut spec = ScanSpec::table(db.keys.id());
        spec.projection = Some(vec![db::K_KEY]);
        spec.batch_rows = 4096;
        let mut sc = self.client.scan(spec);
        let mut keys = Vec::new();
        let plen = pattern.len() as u64;
        let pattern = Glob::new(pattern, false);
        let mut pace = Pace::default();
        while let Some(rows) = sc.next_batch().await? {
            for r in rows {
                let k = db::bytes_of(db.keys.decode_projection(&[db::K_KEY], &r)?.remove(0));
                // What matching may cost at most (see `glob`).
                let n = k.len() as u64;
                pace.charge((n + 1) * (plen.min(n) + 1)).await;
                if pattern.matches(&k) {
                    keys.push(k);
                }
            }
            pace.batch_done().await;
        }
        Ok(keys)
    }

    /// SCAN cursor [MATCH p] [COUNT n] [TYPE t]: a cursor is a scan this connection keeps open.
    async fn scan(&self, sess: &mut Session, db: &Arc<Db>, a: &[Vec<u8>], out: &mut Vec<u8>) -> CR {
        let cursor = cursor_arg(&a[1])?;
        let (pattern, count, kind) = scan_options(&a[2..], true)?;
        let scanner = if cursor == 0 {
            let mut spec = ScanSpec::table(db.keys.id());
            spec.projection = Some(vec![db::K_KEY, db::K_TYPE]);
            spec.batch_rows = count.min(SCAN_BATCH_MAX) as u32;
            Some(self.client.scan(spec))
        } else {
            sess.cursors.remove(&cursor).filter(|c| c.0 == db.index && c.1 == 0).map(|c| c.2)
        };
        let mut keys = Vec::new();
        let mut next = 0;
        if let Some(mut sc) = scanner {
            for r in sc.next_batch().await?.unwrap_or_default() {
                let v = db.keys.decode_projection(&[db::K_KEY, db::K_TYPE], &r)?;
                let key = db::bytes_of(v[0].clone());
                let t = type_name(v[1].as_i128().unwrap_or(0) as u8);
                if pattern.as_ref().is_some_and(|p| !p.matches(&key)) || kind.as_ref().is_some_and(|k| k != t) {
                    continue;
                }
                keys.push(key);
            }
            if !sc.is_done() {
                next = keep_cursor(sess, (db.index, 0, sc));
            }
        }
        resp::array_len(out, 2);
        resp::bulk(out, next.to_string().as_bytes());
        resp::array_len(out, keys.len());
        keys.iter().for_each(|k| resp::bulk(out, k));
        Ok(())
    }

    /// RANDOMKEY: a key from a sample of a randomly chosen partition (the next non-empty one).
    async fn random_key(&self, db: &Db) -> R<Option<Vec<u8>>> {
        let parts = db.keys.table.partition_count.max(1);
        let mut rng = tern_types::rng::Rng::new(random_seed());
        let first = rng.below(parts as u64) as u32;
        for i in 0..parts {
            let mut spec = ScanSpec::table(db.keys.id());
            spec.projection = Some(vec![db::K_KEY]);
            spec.partition = Some((first + i) % parts);
            spec.limit = RANDOM_SAMPLE;
            let rows = self.client.scan(spec).collect().await?;
            if !rows.is_empty() {
                let r = &rows[rng.below(rows.len() as u64) as usize];
                return Ok(Some(db::bytes_of(db.keys.decode_projection(&[db::K_KEY], r)?.remove(0))));
            }
        }
        Ok(None)
    }

    /// (keys, keys with an expiry) of a database.
    pub async fn count_keys(&self, db: &Db) -> R<(u64, u64)> {
        let mut spec = ScanSpec::table(db.keys.id());
        spec.projection = Some(vec![db::K_EXPIRY]);
        spec.batch_rows = 4096;
        let mut sc = self.client.scan(spec);
        let (mut n, mut e) = (0, 0);
        let mut pace = Pace::default();
        while let Some(rows) = sc.next_batch().await? {
            pace.batch_done().await;
            for r in rows {
                n += 1;
                if !db.keys.decode_projection(&[db::K_EXPIRY], &r)?[0].is_null() {
                    e += 1;
                }
            }
        }
        Ok((n, e))
    }

    /// FLUSHDB of one database: alone, every row of its tables in batches; inside EXEC, in the
    /// transaction, the key rows it can see (committed ones and the keys the queued commands
    /// name), their parts and fields after the commit.
    async fn flush_in(&self, cx: &mut Cx, index: u32) -> CR {
        if !cx.multi {
            return Ok(self.flush(index).await?);
        }
        let db = self.db(index).await?;
        let mut spec = ScanSpec::table(db.keys.id());
        spec.projection = Some(vec![db::K_KEY]);
        spec.batch_rows = 4096;
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for r in self.client.scan(spec).collect().await? {
            keys.push(db::bytes_of(db.keys.decode_projection(&[db::K_KEY], &r)?.remove(0)));
        }
        keys.extend(cx.named.iter().filter(|(d, _)| *d == index).map(|(_, k)| k.clone()));
        keys.sort();
        keys.dedup();
        let ops = keys.iter().map(|k| delete_key(&db, k)).collect::<Result<Vec<_>, _>>()?;
        for (k, r) in keys.iter().zip(cx.run(ops).await?) {
            if let Some(m) = meta_of(&db, Some(r))? {
                cx.garbage(&db, m);
                self.touched(cx, index, k, true);
            }
        }
        Ok(())
    }

    /// Deletes every row of database `index`'s tables, in batches of their own transactions.
    pub(super) async fn flush(&self, index: u32) -> R {
        let db = self.db(index).await?;
        let mut pace = Pace::default();
        for (t, key_cols) in [
            (&db.keys, vec![0u16]),
            (&db.values, vec![0, 1]),
            (&db.hashes, vec![0, 1]),
            (&db.lists, vec![0, 1]),
            (&db.sets, vec![0, 1]),
            (&db.zsets, vec![0, 1]),
        ] {
            loop {
                let mut spec = ScanSpec::table(t.id());
                spec.projection = Some(key_cols.clone());
                spec.batch_rows = 1024;
                spec.limit = 4096;
                pace.batch_done().await;
                let rows = self.client.scan(spec.clone()).collect().await?;
                let mut spec_exp = spec.clone();
                spec_exp.expired = true;
                let expired =
                    if t.id() == db.keys.id() { self.client.scan(spec_exp).collect().await? } else { Vec::new() };
                if rows.is_empty() && expired.is_empty() {
                    break;
                }
                let mut ops = Vec::new();
                let mut marks = Vec::new();
                for r in &rows {
                    let key = t.decode_projection(&key_cols, r)?;
                    if t.id() == db.keys.id()
                        && let Some(Value::Bytes(k)) = key.first()
                    {
                        self.touch(index, k);
                        marks.push((index, k.clone()));
                    }
                    ops.push(t.delete(&key)?);
                }
                for r in &expired {
                    let mut op = t.delete(&t.decode_projection(&key_cols, r)?)?;
                    op.kind = OpKind::DeleteExpired;
                    ops.push(op);
                }
                // FLUSHDB raises no keyspace event: its keys are marked so that none is derived
                // from its deletes either.
                standalone!(self, |cx| {
                    if cx.notify != 0 {
                        cx.marks.extend(marks.iter().cloned());
                    }
                    cx.write_ordered(ops.clone(), AbortOption::IgnoreError, true).await.map(|_| ()).map_err(Fail::Txn)
                })?;
            }
        }
        Ok(())
    }

    /// MEMORY USAGE: bytes the key's rows take, estimated from their sizes (None: no key).
    pub(super) async fn memory_usage(&self, cx: &mut Cx, db: &Db, key: &[u8]) -> CR<Option<i64>> {
        /// Per-row bookkeeping (row header, hash index slot) in the data node, roughly.
        const ROW_OVERHEAD: i64 = 48;
        let Some(m) = self.read_meta_quiet(cx, db, key, false).await? else { return Ok(None) };
        let base = ROW_OVERHEAD + key.len() as i64 + m.start.len() as i64 + 40;
        let rest = if m.kind == TYPE_HASH {
            let fields = self.hash_fields(cx, db, m.id, true).await?;
            fields.iter().map(|(f, v)| ROW_OVERHEAD + 8 + f.len() as i64 + v.len() as i64).sum()
        } else if m.kind != TYPE_STRING {
            // Measured on up to `SAMPLE` members and scaled (as redis's SAMPLES).
            const SAMPLE: i64 = 64;
            let sample = self.collection_sample(cx, db, &m, SAMPLE).await?;
            let per = if sample.is_empty() {
                0
            } else {
                sample.iter().map(|(k, v)| k.len() as i64 + v.len() as i64).sum::<i64>() / sample.len() as i64
            };
            // Ordered-index entries of sets and sorted sets: their key bytes and node share.
            let index = if m.kind == TYPE_LIST { 0 } else { 56 + 24 };
            m.len as i64 * (ROW_OVERHEAD + 16 + index + per)
        } else {
            (m.len as i64 - m.start.len() as i64).max(0) + m.parts as i64 * (ROW_OVERHEAD + 12)
        };
        Ok(Some(base + rest))
    }
}

impl Server {
    /// The deletes of every child row under a replaced or deleted collection's `rondb_key` (a
    /// pruned scan of its one partition).
    pub(super) async fn child_deletes(&self, db: &Db, old: &Meta) -> R<Vec<KeyOp>> {
        let (t, probe): (&TableHandle, Value) = match old.kind {
            TYPE_HASH => (&db.hashes, Value::Bytes(Vec::new())),
            TYPE_LIST => (&db.lists, Value::Int(0)),
            TYPE_SET => (&db.sets, Value::Bytes(Vec::new())),
            TYPE_ZSET => (&db.zsets, Value::Bytes(Vec::new())),
            _ => return Ok(Vec::new()),
        };
        let mut spec = ScanSpec::table(t.id());
        spec.partition = Some(t.partition_of(&[Value::UInt(old.id), probe])?);
        spec.filter =
            tern_types::filter::Filter::Cmp { col: 0, op: tern_types::filter::CmpOp::Eq, value: Value::UInt(old.id) };
        spec.projection = Some(vec![0, 1]);
        spec.batch_rows = 1024;
        let rows = self.client.scan(spec).collect().await?;
        let mut ops = Vec::with_capacity(rows.len());
        for r in rows {
            ops.push(t.delete(&t.decode_projection(&[0, 1], &r)?)?);
        }
        Ok(ops)
    }

    /// Up to `n` members of a collection (list elements with empty keys, set members with empty
    /// values, sorted-set members with their scores as text).
    async fn collection_sample(&self, cx: &mut Cx, db: &Db, m: &Meta, n: i64) -> CR<Vec<(Vec<u8>, Vec<u8>)>> {
        let all = self.collection_contents(cx, db, m, Some(n)).await?;
        Ok(all)
    }

    /// A list's, set's or sorted set's contents in order (at most `limit`): list elements as
    /// (empty, element), set members as (member, empty), sorted-set entries as (member, score
    /// as 8 little-endian bytes).
    pub(super) async fn collection_contents(
        &self,
        cx: &mut Cx,
        db: &Db,
        m: &Meta,
        limit: Option<i64>,
    ) -> CR<Vec<(Vec<u8>, Vec<u8>)>> {
        let cap = limit.unwrap_or(i64::MAX);
        Ok(match m.kind {
            TYPE_LIST => {
                let e = (m.len as i64).min(cap) - 1;
                self.list_elements(cx, db, m, 0, e).await?.into_iter().map(|v| (Vec::new(), v)).collect()
            }
            TYPE_SET => {
                let mut v = self.set_members(cx, db, m.id).await?;
                v.truncate(cap.max(0) as usize);
                v.into_iter().map(|x| (x, Vec::new())).collect()
            }
            TYPE_ZSET => {
                let mut v = self.zall(cx, db, m.id).await?;
                v.truncate(cap.max(0) as usize);
                v.into_iter().map(|(x, s)| (x, s.to_le_bytes().to_vec())).collect()
            }
            _ => Vec::new(),
        })
    }

    /// COPY of a list, set or sorted set: its contents under a fresh `rondb_key` in `to`.
    async fn copy_collection(&self, cx: &mut Cx, from: &Arc<Db>, m: &Meta, to: &Arc<Db>, key: &[u8]) -> CR {
        let contents = self.collection_contents(cx, from, m, None).await?;
        let mut meta = Meta::collection(m.kind, self.new_id(to).await?);
        meta.expiry = m.expiry;
        meta.len = contents.len() as u64;
        meta.start = if m.kind == TYPE_LIST { b"0".to_vec() } else { m.start.clone() };
        let mut ops: Vec<KeyOp> = Vec::with_capacity(contents.len());
        for (i, (x, v)) in contents.iter().enumerate() {
            ops.push(match m.kind {
                TYPE_LIST => to.lists.write(&[Value::UInt(meta.id), Value::Int(i as i64), Value::Bytes(v.clone())])?,
                TYPE_SET => to.sets.write(&[Value::UInt(meta.id), Value::Bytes(x.clone())])?,
                _ => to.zsets.write(&[
                    Value::UInt(meta.id),
                    Value::Bytes(x.clone()),
                    Value::Double(f64::from_le_bytes(v[..8].try_into().expect("8 bytes"))),
                ])?,
            });
        }
        for chunk in ops.chunks(1024) {
            cx.write(chunk.to_vec(), false).await?;
        }
        if cx.multi && m.kind != TYPE_LIST {
            let changes = cx.fields.entry((to.index, meta.id)).or_default();
            contents.into_iter().for_each(|(x, v)| _ = changes.insert(x, Some(v)));
        }
        let rs = cx.write(vec![db::write_meta(to, key, &meta)?], false).await?;
        if let Some(old) = old_of(to, rs.into_iter().next())? {
            cx.garbage(to, old);
        }
        Ok(())
    }
}

/// A SCAN/HSCAN cursor argument.
pub(super) fn cursor_arg(a: &[u8]) -> CR<u64> {
    std::str::from_utf8(a).ok().and_then(|s| s.parse::<u64>().ok()).ok_or_else(|| err("ERR invalid cursor").into())
}

/// MATCH, COUNT (and for SCAN, TYPE) options.
pub(super) fn scan_options(a: &[Vec<u8>], with_type: bool) -> CR<(Option<Glob>, i64, Option<String>)> {
    let (mut pattern, mut count, mut kind) = (None, 10i64, None);
    let mut i = 0;
    while i < a.len() {
        let Some(val) = a.get(i + 1) else { return fail(SYNTAX) };
        if is(&a[i], "match") {
            pattern = Some(Glob::new(val, false));
        } else if is(&a[i], "count") {
            count = int_arg(val)?;
            if count < 1 {
                return fail(SYNTAX);
            }
        } else if with_type && is(&a[i], "type") {
            kind = Some(String::from_utf8_lossy(val).to_lowercase());
        } else {
            return fail(SYNTAX);
        }
        i += 2;
    }
    Ok((pattern, count, kind))
}

/// Keeps an open scan for the next call; its cursor number.
pub(super) fn keep_cursor(sess: &mut Session, c: (u32, u64, tern_client::Scanner)) -> u64 {
    sess.next_cursor += 1;
    if sess.cursors.len() >= CURSORS_MAX
        && let Some(&old) = sess.cursors.keys().min()
    {
        sess.cursors.remove(&old);
    }
    sess.cursors.insert(sess.next_cursor, c);
    sess.next_cursor
}

fn random_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    t ^ CALLS.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
}

pub(super) fn random_rng() -> tern_types::rng::Rng {
    tern_types::rng::Rng::new(random_seed())
}
