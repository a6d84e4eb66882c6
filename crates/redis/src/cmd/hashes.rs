//! Hash commands: fields are rows of `hset_keys` under the key's `rondb_key`; the key row counts
//! them and is locked by every writer of the hash.

use super::transactions::{commit_checked, exec, txn};
use super::{OVERFLOW, Pace, R, WRONGTYPE, check_key, err, meta_of, row_of, set_col, update};
use crate::Server;
use crate::db::{self, Db, HASH_VALUE_MAX, KEY_MAX, Meta, TYPE_HASH};
use crate::resp::parse_int;
use std::sync::Arc;
use tern_client::{ColumnUpdate, ErrorCode, Exec, OpKind, OpResult, ScanSpec, UpdateExpr, Value};
use tern_types::filter::{CmpOp, Filter};

impl Server {
    /// A hash's (field, value) pairs (values empty when `values` is false): one pruned scan.
    pub(super) async fn hash_fields(&self, db: &Db, id: u64, values: bool) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
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
        Ok(out)
    }

    /// HSET/HMSET: returns how many fields were new.
    pub(super) async fn hset(self: &Arc<Self>, db: &Arc<Db>, key: &[u8], pairs: &[Vec<u8>]) -> R<i64> {
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
    pub(super) async fn hget(&self, db: &Db, key: &[u8], fields: &[Vec<u8>]) -> R<Vec<Option<Vec<u8>>>> {
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

    pub(super) async fn hdel(self: &Arc<Self>, db: &Arc<Db>, key: &[u8], fields: &[Vec<u8>]) -> R<i64> {
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
    pub(super) async fn hincrby(self: &Arc<Self>, db: &Arc<Db>, key: &[u8], field: &[u8], by: i64) -> R<i64> {
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
}
