//! Hash commands: fields are rows of `hset_keys` under the key's `rondb_key`; the key row counts
//! them, is locked by every writer of the hash and is rewritten by each (its change counter, see
//! `bump`), so that a changed hash always has a changed key row.
//!
//! The fields of a hash are read with one pruned scan; scans see committed rows only, so inside
//! EXEC the transaction's own field changes (`Cx::fields`) are merged in.

use super::keys::{cursor_arg, keep_cursor, random_rng, scan_options};
use super::strings::{add_float, bulk_or_null};
use super::{CR, Cx, Fail, NOT_FLOAT, OVERFLOW, Pace, SYNTAX, bump, check_key, err, fail, int_arg, is, row_of};
use crate::db::{self, Db, HASH_VALUE_MAX, KEY_MAX, Meta};
use crate::ldouble::{LDouble, Parsed};
use crate::resp::{self, parse_int};
use crate::{Server, Session};
use std::collections::HashSet;
use std::sync::Arc;
use tern_client::{ColumnUpdate, ErrorCode, OpResult, ScanSpec, UpdateExpr, Value};
use tern_types::filter::{CmpOp, Filter};

/// Fields one HSCAN call reads at most.
const HSCAN_BATCH_MAX: i64 = 4096;

fn field_value_check(v: &[u8]) -> CR {
    if v.len() > HASH_VALUE_MAX {
        return fail(format!("ERR hash values are limited to {HASH_VALUE_MAX} bytes"));
    }
    Ok(())
}

impl Server {
    /// The hash commands; false when `name` is not one.
    pub(super) async fn hash_command(
        &self,
        cx: &mut Cx,
        sess: &mut Session,
        db: &Arc<Db>,
        name: &str,
        a: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> CR<bool> {
        match name {
            "hset" | "hmset" => {
                if !a.len().is_multiple_of(2) {
                    return fail(format!("ERR wrong number of arguments for '{name}' command"));
                }
                let added = self.hset(cx, db, &a[1], &a[2..], false).await?;
                if name == "hset" {
                    resp::integer(out, added);
                } else {
                    resp::simple(out, "OK");
                }
            }
            "hsetnx" => resp::integer(out, self.hset(cx, db, &a[1], &a[2..], true).await?),
            "hget" => bulk_or_null(out, self.hget(cx, db, &a[1], &a[2..3]).await?.pop().flatten()),
            "hmget" => {
                let vs = self.hget(cx, db, &a[1], &a[2..]).await?;
                resp::array_len(out, vs.len());
                vs.into_iter().for_each(|v| bulk_or_null(out, v));
            }
            "hexists" => {
                let v = self.hget(cx, db, &a[1], &a[2..3]).await?.pop().flatten();
                resp::integer(out, v.is_some() as i64);
            }
            "hstrlen" => {
                let v = self.hget(cx, db, &a[1], &a[2..3]).await?.pop().flatten();
                resp::integer(out, v.map_or(0, |v| v.len() as i64));
            }
            "hdel" => resp::integer(out, self.hdel(cx, db, &a[1], &a[2..]).await?),
            "hlen" => {
                let n = self.hash_meta(cx, db, &a[1], false).await?.map_or(0, |m| m.len);
                resp::integer(out, n as i64);
            }
            "hgetall" | "hkeys" | "hvals" => {
                let pairs = match self.hash_meta(cx, db, &a[1], false).await? {
                    None => Vec::new(),
                    Some(m) => self.hash_fields(cx, db, m.id, name != "hkeys").await?,
                };
                let both = name == "hgetall";
                resp::array_len(out, pairs.len() * (1 + both as usize));
                for (f, v) in pairs {
                    if name != "hvals" {
                        resp::bulk(out, &f);
                    }
                    if name != "hkeys" {
                        resp::bulk(out, &v);
                    }
                }
            }
            "hincrby" => {
                let by = int_arg(&a[3])?;
                resp::integer(out, self.hincrby(cx, db, &a[1], &a[2], by).await?);
            }
            "hincrbyfloat" => resp::bulk(out, &self.hincrbyfloat(cx, db, &a[1], &a[2], &a[3]).await?),
            "hrandfield" => self.hrandfield(cx, db, a, out).await?,
            "hscan" => self.hscan(cx, sess, db, a, out).await?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// A hash's (field, value) pairs (values empty when `values` is false): one pruned scan,
    /// with this transaction's own changes merged in.
    pub(super) async fn hash_fields(&self, cx: &mut Cx, db: &Db, id: u64, values: bool) -> CR<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut spec = ScanSpec::table(db.hashes.id());
        spec.partition = Some(db.hashes.partition_of(&db::field_key(b"", id))?);
        spec.filter = Filter::Cmp { col: 0, op: CmpOp::Eq, value: Value::UInt(id) };
        let cols: Vec<u16> = if values { vec![1, 2] } else { vec![1] };
        spec.projection = Some(cols.clone());
        spec.batch_rows = 1024;
        let mut sc = self.client.scan(spec);
        let mut out = Vec::new();
        let mut pace = Pace::default();
        while let Some(rows) = sc.next_batch().await? {
            for r in rows {
                let mut v = db.hashes.decode_projection(&cols, &r)?.into_iter();
                let f = db::bytes_of(v.next().unwrap_or(Value::Null));
                out.push((f, v.next().map(db::bytes_of).unwrap_or_default()));
            }
            pace.batch_done().await;
        }
        if let Some(changes) = cx.fields.get(&(db.index, id)) {
            out.retain(|(f, _)| !changes.contains_key(f));
            out.extend(
                changes.iter().filter_map(|(f, v)| v.clone().map(|v| (f.clone(), if values { v } else { Vec::new() }))),
            );
        }
        Ok(out)
    }

    /// Notes field changes of this transaction (only EXEC reads a hash after changing it).
    pub(super) fn note_fields<'a>(
        &self,
        cx: &mut Cx,
        db: &Db,
        id: u64,
        changes: impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)>,
    ) {
        if cx.multi {
            let c = cx.fields.entry((db.index, id)).or_default();
            for (f, v) in changes {
                c.insert(f.to_vec(), v.map(<[u8]>::to_vec));
            }
        }
    }

    /// The key row of a hash about to change (locked), or a new one.
    async fn hash_for_write(&self, cx: &mut Cx, db: &Db, key: &[u8]) -> CR<(Meta, bool)> {
        match self.hash_meta(cx, db, key, true).await? {
            Some(m) => Ok((m, true)),
            None => Ok((Meta::hash(self.new_id(db).await?), false)),
        }
    }

    /// Writes a hash's key row with its count and a bumped change counter (last batch).
    async fn write_hash_meta(&self, cx: &mut Cx, db: &Db, key: &[u8], mut meta: Meta) -> CR {
        bump(&mut meta);
        cx.write(vec![db::write_meta(db, key, &meta)?], true).await?;
        self.touched(cx, db.index, key, false);
        Ok(())
    }

    /// HSET/HMSET: how many fields were new. HSETNX (`nx`): 1 when the one field was new and
    /// set, 0 when it existed.
    pub(super) async fn hset(&self, cx: &mut Cx, db: &Arc<Db>, key: &[u8], pairs: &[Vec<u8>], nx: bool) -> CR<i64> {
        for p in pairs.chunks(2) {
            check_key(&p[0])?;
            field_value_check(&p[1])?;
        }
        let (mut meta, existed) = self.hash_for_write(cx, db, key).await?;
        if nx && existed {
            let r = cx.run(vec![db.hashes.read_columns(&db::field_key(&pairs[0], meta.id), &[1])?]).await?;
            if matches!(r.first(), Some(OpResult::Row(_))) {
                return Ok(0);
            }
        }
        let mut ops = Vec::with_capacity(pairs.len() / 2);
        for p in pairs.chunks(2) {
            let mut op =
                db.hashes.write(&[Value::UInt(meta.id), Value::Bytes(p[0].clone()), Value::Bytes(p[1].clone())])?;
            op.projection = Some(vec![1]);
            ops.push(op);
        }
        let rs = cx.write(ops, false).await?;
        let added = rs.iter().filter(|r| **r == OpResult::NotFound).count() as i64;
        self.note_fields(cx, db, meta.id, pairs.chunks(2).map(|p| (&p[0][..], Some(&p[1][..]))));
        meta.len += added as u64;
        self.write_hash_meta(cx, db, key, meta).await?;
        Ok(added)
    }

    /// HGET/HMGET/HEXISTS/HSTRLEN: the values of `fields` (None: absent).
    async fn hget(&self, cx: &mut Cx, db: &Db, key: &[u8], fields: &[Vec<u8>]) -> CR<Vec<Option<Vec<u8>>>> {
        let Some(m) = self.hash_meta(cx, db, key, false).await? else { return Ok(vec![None; fields.len()]) };
        let mut ops = Vec::new();
        let mut idx = Vec::new();
        for (i, f) in fields.iter().enumerate() {
            if f.len() <= KEY_MAX {
                ops.push(db.hashes.read_columns(&db::field_key(f, m.id), &[2])?);
                idx.push(i);
            }
        }
        let rs = cx.last(ops).await?;
        let mut out = vec![None; fields.len()];
        for (i, r) in idx.into_iter().zip(rs) {
            if let Some(b) = row_of(Some(r))? {
                out[i] = Some(db::bytes_of(db.hashes.decode_projection(&[2], &b)?.remove(0)));
            }
        }
        Ok(out)
    }

    async fn hdel(&self, cx: &mut Cx, db: &Arc<Db>, key: &[u8], fields: &[Vec<u8>]) -> CR<i64> {
        let Some(mut meta) = self.hash_meta(cx, db, key, true).await? else { return Ok(0) };
        let fields: Vec<&Vec<u8>> = fields.iter().filter(|f| f.len() <= KEY_MAX).collect();
        let ops = fields.iter().map(|f| db.hashes.delete(&db::field_key(f, meta.id))).collect::<Result<Vec<_>, _>>()?;
        let rs = cx.run(ops).await?;
        let removed = rs.iter().filter(|r| **r == OpResult::Done).count() as u64;
        if removed == 0 {
            return Ok(0);
        }
        self.note_fields(cx, db, meta.id, fields.iter().map(|f| (&f[..], None)));
        meta.len = meta.len.saturating_sub(removed);
        if meta.len == 0 {
            cx.write(vec![db.keys.delete(&[Value::Bytes(key.to_vec())])?], true).await?;
            self.touched(cx, db.index, key, true);
        } else {
            self.write_hash_meta(cx, db, key, meta).await?;
        }
        Ok(removed as i64)
    }

    /// HINCRBY: the field's value is changed inside the data node (an upserting in-node add).
    async fn hincrby(&self, cx: &mut Cx, db: &Arc<Db>, key: &[u8], field: &[u8], by: i64) -> CR<i64> {
        check_key(field)?;
        let (mut meta, existed) = self.hash_for_write(cx, db, key).await?;
        let fk = db::field_key(field, meta.id);
        let is_new = !existed
            || !matches!(cx.run(vec![db.hashes.read_columns(&fk, &[1])?]).await?.first(), Some(OpResult::Row(_)));
        let mut op = db.hashes.update(&fk, vec![ColumnUpdate { col: 2, expr: UpdateExpr::Add(Value::Int(by)) }])?;
        op.row = db.hashes.row(&[fk[0].clone(), fk[1].clone(), Value::Bytes(b"0".to_vec())])?;
        op.projection = Some(vec![2]);
        let v = match cx.run(vec![op]).await?.into_iter().next() {
            Some(OpResult::Row(b)) => db::bytes_of(db.hashes.decode_projection(&[2], &b)?.remove(0)),
            Some(OpResult::Error(e)) => {
                return Err(Fail::Reply(match e.code {
                    ErrorCode::InvalidValue => err("ERR hash value is not an integer"),
                    ErrorCode::ValueOutOfRange => err(OVERFLOW),
                    _ => e.into(),
                }));
            }
            other => return fail(format!("ERR unexpected result {other:?}")),
        };
        self.note_fields(cx, db, meta.id, std::iter::once((field, Some(&v[..]))));
        meta.len += is_new as u64;
        self.write_hash_meta(cx, db, key, meta).await?;
        Ok(parse_int(&v).ok_or_else(|| err("ERR hash value is not an integer"))?)
    }

    /// HINCRBYFLOAT: the sum in redis's `long double`, written back as the field's string.
    async fn hincrbyfloat(&self, cx: &mut Cx, db: &Arc<Db>, key: &[u8], field: &[u8], by: &[u8]) -> CR<Vec<u8>> {
        check_key(field)?;
        // The increment is checked before the key (redis refuses an infinite one here).
        match LDouble::parse(by) {
            Parsed::Num(_) => {}
            Parsed::Inf => return fail("ERR value is NaN or Infinity"),
            Parsed::Bad => return fail(NOT_FLOAT),
        }
        let (mut meta, existed) = self.hash_for_write(cx, db, key).await?;
        let fk = db::field_key(field, meta.id);
        let cur = if existed {
            match cx.run(vec![db.hashes.read_columns(&fk, &[2])?]).await?.into_iter().next() {
                Some(OpResult::Row(b)) => Some(db::bytes_of(db.hashes.decode_projection(&[2], &b)?.remove(0))),
                _ => None,
            }
        } else {
            None
        };
        let v = add_float(cur.as_deref(), by, "ERR hash value is not a float")?;
        cx.write(vec![db.hashes.write(&[fk[0].clone(), fk[1].clone(), Value::Bytes(v.clone())])?], false).await?;
        self.note_fields(cx, db, meta.id, std::iter::once((field, Some(&v[..]))));
        meta.len += cur.is_none() as u64;
        self.write_hash_meta(cx, db, key, meta).await?;
        Ok(v)
    }

    /// HRANDFIELD key [count [WITHVALUES]]: distinct fields for a positive count, repeats
    /// allowed for a negative one.
    async fn hrandfield(&self, cx: &mut Cx, db: &Arc<Db>, a: &[Vec<u8>], out: &mut Vec<u8>) -> CR {
        let count = match a.get(2) {
            None => None,
            Some(c) => Some(int_arg(c)?),
        };
        let values = match a.len() {
            2 | 3 => false,
            4 if is(&a[3], "withvalues") => true,
            _ => return fail(SYNTAX),
        };
        if count.is_some_and(|c| c < -(i64::MAX / 2) || (values && c.unsigned_abs() > (i64::MAX / 2) as u64)) {
            return fail("ERR value is out of range");
        }
        let fields = match self.hash_meta(cx, db, &a[1], false).await? {
            None => Vec::new(),
            Some(m) => self.hash_fields(cx, db, m.id, values).await?,
        };
        let mut rng = random_rng();
        let Some(count) = count else {
            let f = (!fields.is_empty()).then(|| fields[rng.below(fields.len() as u64) as usize].0.clone());
            bulk_or_null(out, f);
            return Ok(());
        };
        let picked: Vec<&(Vec<u8>, Vec<u8>)> = if count < 0 {
            if fields.is_empty() {
                Vec::new()
            } else {
                // Repeats make the reply as long as asked: bounded like a bulk string.
                let max = self.live.max_bulk.load(std::sync::atomic::Ordering::Relaxed) as u64;
                let each: u64 =
                    fields.iter().map(|(f, v)| f.len() as u64 + v.len() as u64 + 16).sum::<u64>() / fields.len() as u64;
                if count.unsigned_abs().saturating_mul(each) > max {
                    return fail("ERR reply would exceed proto-max-bulk-len");
                }
                let mut pace = Pace::default();
                let mut v = Vec::with_capacity(count.unsigned_abs() as usize);
                for _ in 0..count.unsigned_abs() {
                    v.push(&fields[rng.below(fields.len() as u64) as usize]);
                    pace.charge(1).await;
                }
                v
            }
        } else {
            let n = (count as usize).min(fields.len());
            let mut chosen = HashSet::new();
            while chosen.len() < n {
                chosen.insert(rng.below(fields.len() as u64) as usize);
            }
            chosen.into_iter().map(|i| &fields[i]).collect()
        };
        resp::array_len(out, picked.len() * (1 + values as usize));
        for (f, v) in picked {
            resp::bulk(out, f);
            if values {
                resp::bulk(out, v);
            }
        }
        Ok(())
    }

    /// HSCAN key cursor [MATCH p] [COUNT n]: a cursor is a scan of the hash's fields this
    /// connection keeps open (committed fields).
    async fn hscan(&self, cx: &mut Cx, sess: &mut Session, db: &Arc<Db>, a: &[Vec<u8>], out: &mut Vec<u8>) -> CR {
        let cursor = cursor_arg(&a[2])?;
        let (pattern, count, _) = scan_options(&a[3..], false)?;
        let meta = self.hash_meta(cx, db, &a[1], false).await?;
        let mut pairs = Vec::new();
        let mut next = 0;
        if let Some(m) = meta {
            let scanner = if cursor == 0 {
                let mut spec = ScanSpec::table(db.hashes.id());
                spec.partition = Some(db.hashes.partition_of(&db::field_key(b"", m.id))?);
                spec.filter = Filter::Cmp { col: 0, op: CmpOp::Eq, value: Value::UInt(m.id) };
                spec.projection = Some(vec![1, 2]);
                spec.batch_rows = count.min(HSCAN_BATCH_MAX) as u32;
                Some(self.client.scan(spec))
            } else {
                sess.cursors.remove(&cursor).filter(|c| c.0 == db.index && c.1 == m.id).map(|c| c.2)
            };
            if let Some(mut sc) = scanner {
                for r in sc.next_batch().await?.unwrap_or_default() {
                    let mut v = db.hashes.decode_projection(&[1, 2], &r)?.into_iter();
                    let f = db::bytes_of(v.next().unwrap_or(Value::Null));
                    if pattern.as_ref().is_none_or(|p| p.matches(&f)) {
                        pairs.push((f, v.next().map(db::bytes_of).unwrap_or_default()));
                    }
                }
                if !sc.is_done() {
                    next = keep_cursor(sess, (db.index, m.id, sc));
                }
            }
        }
        resp::array_len(out, 2);
        resp::bulk(out, next.to_string().as_bytes());
        resp::array_len(out, pairs.len() * 2);
        for (f, v) in pairs {
            resp::bulk(out, &f);
            resp::bulk(out, &v);
        }
        Ok(())
    }
}
