//! String commands: GET/SET and their variants, MGET/MSET(NX), GETDEL, in-node INCR/DECR,
//! APPEND, SETRANGE and GETRANGE's index rules.

use super::transactions::{commit_checked, exec, exec_ordered, exec_ordered_with, txn, write_txn};
use super::{
    NOT_INT, OVERFLOW, R, SYNTAX, TOO_BIG, WRONGTYPE, check_key, err, int_arg, is, meta_of, string_ops, update,
};
use crate::db::{self, Db, KEY_MAX, Meta, TYPE_STRING, VALUE_MAX};
use crate::resp::{self, parse_int};
use crate::{Server, Session};
use std::sync::Arc;
use tern_client::{AbortOption, ColumnUpdate, ErrorCode, Exec, KeyOp, OpKind, OpResult, TernError, UpdateExpr, Value};

impl Server {
    pub(super) async fn set(self: &Arc<Self>, db: &Arc<Db>, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
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

    pub(super) async fn mget(self: &Arc<Self>, db: &Arc<Db>, keys: &[Vec<u8>], out: &mut Vec<u8>) -> R {
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
    pub(super) async fn mset(self: &Arc<Self>, db: &Arc<Db>, pairs: &[Vec<u8>]) -> R {
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
    pub(super) async fn msetnx(self: &Arc<Self>, db: &Arc<Db>, pairs: &[Vec<u8>]) -> R<i64> {
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

    pub(super) async fn getdel(self: &Arc<Self>, db: &Arc<Db>, key: &[u8]) -> R<Option<Vec<u8>>> {
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
    pub(super) async fn incr(&self, _sess: &Session, db: &Db, key: &[u8], by: i64) -> R<i64> {
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
    pub(super) async fn append_or_setrange(
        self: &Arc<Self>,
        db: &Arc<Db>,
        key: &[u8],
        off: Option<usize>,
        v: &[u8],
    ) -> R<u64> {
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
}

/// GETRANGE's index rules (negative from the end, clamped, empty when start > end).
pub(super) fn range(v: &[u8], start: i64, end: i64) -> &[u8] {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
