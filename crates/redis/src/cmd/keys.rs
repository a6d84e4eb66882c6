//! Key commands over every type: DEL, EXISTS, the EXPIRE family, PERSIST, KEYS and SCAN (with
//! redis-server's glob patterns), DBSIZE's count, FLUSHDB and the purge of expired keys.

use super::transactions::{commit_checked, exec, exec_ordered_with, txn};
use super::{Pace, R, SYNTAX, err, int_arg, is, meta_of, row_of, set_col, update};
use crate::db::{self, Db, KEY_MAX, META, Meta, TYPE_HASH};
use crate::glob::Glob;
use crate::resp;
use crate::{Server, Session};
use std::sync::Arc;
use tern_client::{AbortOption, ColumnUpdate, Exec, OpKind, OpResult, ScanSpec, UpdateExpr, Value};

impl Server {
    /// KEYS: every live key matching the pattern (a full scan, like redis-server's).
    pub(super) async fn keys(&self, db: &Db, pattern: &[u8]) -> R<Vec<Vec<u8>>> {
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

    pub(super) async fn del(self: &Arc<Self>, db: &Arc<Db>, keys: &[Vec<u8>]) -> R<i64> {
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

    pub(super) async fn exists(&self, db: &Db, keys: &[Vec<u8>]) -> R<i64> {
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

    pub(super) async fn expire(self: &Arc<Self>, db: &Arc<Db>, name: &str, a: &[Vec<u8>]) -> R<i64> {
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

    pub(super) async fn persist(&self, db: &Db, key: &[u8]) -> R<i64> {
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

    pub(super) async fn scan(&self, sess: &mut Session, db: &Arc<Db>, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let cursor = std::str::from_utf8(&a[1])
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| err("ERR invalid cursor"))?;
        let (mut pattern, mut count, mut kind) = (None, 10i64, None);
        let mut i = 2;
        while i < a.len() {
            let val = a.get(i + 1).ok_or_else(|| err(SYNTAX))?;
            if is(&a[i], "match") {
                pattern = Some(Glob::new(val, false));
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
                if pattern.as_ref().is_some_and(|p| !p.matches(&key)) || kind.as_ref().is_some_and(|k| k != t) {
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

    /// Deletes every row of database `index`'s tables.
    pub(super) async fn flush(&self, index: u32) -> R {
        let db = self.db(index)?;
        let mut pace = Pace::default();
        for (t, key_cols) in [(&db.keys, vec![0u16]), (&db.values, vec![0, 1]), (&db.hashes, vec![0, 1])] {
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
}
