//! INSERT / REPLACE / UPDATE / DELETE execution. Under autocommit a statement is one
//! transaction, all or nothing (its last batch commits). Inside an open transaction a failed
//! statement undoes only its own changes (MySQL's statement rollback) and the transaction
//! stays open, except for deadlocks and timeouts, which roll back the whole transaction.

use super::eval;
use super::plan::*;
use super::run::*;
use crate::SqlError;
use std::cmp::Ordering;
use tern_client::{AbortOption, ColumnUpdate, KeyOp, OpResult, TableHandle, UpdateExpr};
use tern_types::value::coerce;
use tern_types::{ColumnType, ErrorCode, Value};

pub struct WriteResult {
    pub affected: u64,
    pub last_insert_id: Option<u64>,
    pub info: String,
}

/// A value for column `c` of `h`, coerced, with MySQL's NOT NULL errors.
pub fn store_value(h: &TableHandle, c: usize, v: Value, explicit: bool) -> Result<Value, SqlError> {
    let col = &h.table.columns[c];
    if let Some(m) = &col.members
        && !v.is_null()
    {
        return crate::column::member_value(m, v)
            .ok_or_else(|| SqlError::new(1265, "01000", format!("Data truncated for column '{}' at row 1", col.name)));
    }
    if v.is_null() {
        if !col.nullable {
            return Err(if explicit {
                SqlError::new(1048, "23000", format!("Column '{}' cannot be null", col.name))
            } else {
                SqlError::new(1364, "HY000", format!("Field '{}' doesn't have a default value", col.name))
            });
        }
        return Ok(Value::Null);
    }
    let v = match (col.ty, v) {
        // Two-digit years: 0-69 are 2000-2069, 70-99 are 1970-1999 ('0' and '00' are 2000, the
        // number 0 stays 0000), as MySQL reads them.
        (ColumnType::Year, Value::Bytes(b)) if (1..=2).contains(&b.len()) && b.iter().all(u8::is_ascii_digit) => {
            let n: i64 = std::str::from_utf8(&b).unwrap_or("0").parse().unwrap_or(0);
            Value::Int(if n < 70 { 2000 + n } else { 1900 + n })
        }
        (ColumnType::Year, Value::Int(n)) if (1..=99).contains(&n) => {
            Value::Int(if n < 70 { 2000 + n } else { 1900 + n })
        }
        // A number stored in a binary string column is its text, as in MySQL.
        (ColumnType::Binary { .. } | ColumnType::VarBinary { .. } | ColumnType::Blob, v)
            if matches!(
                v,
                Value::Int(_) | Value::UInt(_) | Value::Decimal { .. } | Value::Double(_) | Value::Float(_)
            ) =>
        {
            Value::Bytes(eval::text(&v).unwrap_or_default())
        }
        // Dates and times with any punctuation as delimiters ('2012^12^31 11*30*45').
        (ColumnType::Date | ColumnType::DateTime { .. } | ColumnType::Timestamp { .. }, Value::Bytes(b)) => {
            Value::Bytes(eval::relaxed_datetime(&b).unwrap_or(b))
        }
        // Integers given as decimals/doubles round, as MySQL does on store.
        (t, Value::Decimal { v, scale }) if t.is_integer() => Value::Int(
            eval::to_i128(&Value::Decimal { v, scale }).unwrap_or(0).clamp(i64::MIN as i128, i64::MAX as i128) as i64,
        ),
        (t, Value::Double(d)) if t.is_integer() && d.is_finite() => Value::Decimal { v: d.round() as i128, scale: 0 },
        (t, Value::Bytes(b)) if t.is_integer() && std::str::from_utf8(&b).is_ok_and(|s| s.trim().contains('.')) => {
            eval::to_i128(&Value::Bytes(b)).map(|i| Value::Decimal { v: i, scale: 0 }).unwrap_or(Value::Null)
        }
        (_, v) => v,
    };
    coerce(col.ty, v).map_err(|e| {
        let msg = match e.code {
            ErrorCode::ValueOutOfRange => format!("Out of range value for column '{}' at row 1", col.name),
            ErrorCode::DataTooLong => format!("Data too long for column '{}' at row 1", col.name),
            ErrorCode::InvalidValue => {
                format!("Incorrect {} value for column '{}' at row 1", col.ty.sql_name(), col.name)
            }
            _ => e.message.clone(),
        };
        let temporal = matches!(
            col.ty,
            ColumnType::Date
                | ColumnType::DateTime { .. }
                | ColumnType::Timestamp { .. }
                | ColumnType::Time { .. }
                | ColumnType::Year
        );
        if e.code == ErrorCode::InvalidValue && temporal {
            return SqlError::new(1292, "22007", msg);
        }
        SqlError::new(e.code.mysql_errno(), e.code.sqlstate(), msg)
    })
}

fn dup_error(h: &TableHandle, e: &tern_client::TernError, row: Option<&[Value]>) -> SqlError {
    if e.code != ErrorCode::DuplicateKey {
        return SqlError::from(e.clone());
    }
    let key = row.map(|r| {
        h.key_of_values(r)
            .iter()
            .map(|v| eval::text(v).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or("NULL".into()))
            .collect::<Vec<_>>()
            .join("-")
    });
    let which = if e.message.contains("PRIMARY") || e.message.is_empty() {
        format!("{}.PRIMARY", h.table.name)
    } else {
        // The data node names the unique index in quotes.
        e.message
            .split('\'')
            .nth(1)
            .map(|n| format!("{}.{}", h.table.name, n))
            .unwrap_or_else(|| format!("{}.PRIMARY", h.table.name))
    };
    let message = match key {
        Some(k) if e.message.contains("PRIMARY") => format!("Duplicate entry '{k}' for key '{which}'"),
        _ => format!("Duplicate entry for key '{which}'"),
    };
    SqlError::new(1062, "23000", message).with_code(ErrorCode::DuplicateKey)
}

/// Runs a batch of writes as one statement: all or nothing.
async fn statement_batch(run: &mut Runner<'_>, ops: Vec<KeyOp>, last: bool) -> Result<Vec<OpResult>, SqlError> {
    if !run.ts.open {
        return run.batch(ops, AbortOption::AbortOnError, last).await;
    }
    let keys: Vec<(u32, Vec<u8>, tern_client::OpKind)> = ops.iter().map(|o| (o.table, o.key.clone(), o.kind)).collect();
    let res = run.batch(ops, AbortOption::IgnoreError, false).await?;
    if let Some(e) = res.iter().find_map(|r| if let OpResult::Error(e) = r { Some(e.clone()) } else { None }) {
        // Undo this statement's inserts (statement rollback); other kinds are checked
        // before they are sent, so only inserts can partly succeed here.
        let undo: Vec<KeyOp> = keys
            .iter()
            .zip(&res)
            .filter(|((_, _, k), r)| matches!(r, OpResult::Done) && *k == tern_client::OpKind::Insert)
            .map(|((t, key, _), _)| KeyOp {
                table: *t,
                kind: tern_client::OpKind::Delete,
                key: key.clone(),
                row: Vec::new(),
                updates: Vec::new(),
                projection: None,
            })
            .collect();
        if !undo.is_empty() {
            run.batch(undo, AbortOption::AbortOnError, false).await?;
        }
        return Err(SqlError::from(e));
    }
    Ok(res)
}

pub fn run_insert<'a>(
    run: &'a mut Runner<'_>,
    p: &'a InsertPlan,
    env: &'a Env<'_>,
) -> crate::Fut<'a, Result<WriteResult, SqlError>> {
    Box::pin(insert(run, p, env))
}

async fn insert(run: &mut Runner<'_>, p: &InsertPlan, env: &Env<'_>) -> Result<WriteResult, SqlError> {
    let h = &p.handle;
    let ncol = h.table.columns.len();
    // Rows of values.
    let mut rows: Vec<Vec<Value>> = Vec::new();
    if let Some((sel, targets)) = &p.select {
        let got = run_select(run, sel, env, false).await?;
        for r in got {
            let mut row: Vec<Value> = p.rows[0].iter().map(|x| ev(x, &[], &[], env)).collect::<Result<_, _>>()?;
            for (&t, v) in targets.iter().zip(r) {
                row[t] = v;
            }
            rows.push(row);
        }
    } else {
        for r in &p.rows {
            rows.push(r.iter().map(|x| ev(x, &[], &[], env)).collect::<Result<_, _>>()?);
        }
    }
    // Generated values, then coercion.
    let mut first_id = None;
    let auto = h.table.columns.iter().position(|c| c.auto_increment);
    if let Some(a) = auto {
        let client = run.client.clone();
        let needs = rows.iter().any(|r| r[a].is_null() || eval::to_i128(&r[a]) == Some(0));
        if needs {
            for r in rows.iter_mut() {
                if !(r[a].is_null() || eval::to_i128(&r[a]) == Some(0)) {
                    continue;
                }
                r[a] = Value::Null;
                let got = client.fill_generated_async(h, r).await.map_err(SqlError::from)?;
                if first_id.is_none() && !h.table.columns[a].hidden {
                    first_id = got;
                }
            }
        }
    }
    // Explicit AUTO_INCREMENT values move the counter past them (as MySQL does).
    if let Some(a) = auto
        && !h.table.columns[a].hidden
    {
        let max = rows.iter().filter(|r| !r[a].is_null()).filter_map(|r| eval::to_i128(&r[a])).filter(|v| *v > 0).max();
        if let Some(m) = max {
            let used = m.min(u64::MAX as i128) as u64;
            if !run.client.auto_increment_past(h.id(), used) {
                run.client.bump_auto_increment_async(h.id(), used).await.map_err(SqlError::from)?;
            }
        }
    }
    for (ri, r) in rows.iter_mut().enumerate() {
        for (c, slot) in r.iter_mut().enumerate().take(ncol) {
            let v = std::mem::replace(slot, Value::Null);
            *slot = store_value(h, c, v, p.explicit[c]).map_err(|mut e| {
                e.message = e.message.replace("at row 1", &format!("at row {}", ri + 1));
                e
            })?;
        }
    }
    if rows.is_empty() {
        return Ok(WriteResult { affected: 0, last_insert_id: None, info: String::new() });
    }
    let n = rows.len() as u64;
    if !p.on_dup.is_empty() {
        return insert_on_dup(run, p, rows, env, first_id).await;
    }
    let mut ops = Vec::with_capacity(rows.len());
    for r in &rows {
        ops.push(if p.replace { h.write(r) } else { h.insert(r) }.map_err(SqlError::from)?);
    }
    if p.replace {
        // REPLACE counts 2 for a replaced row: read the keys first (locked) to know.
        let mut reads = Vec::new();
        for r in &rows {
            let mut op = h.read_locked(&h.key_of_values(r), true).map_err(SqlError::from)?;
            op.projection = Some(h.table.primary_key.clone());
            reads.push(op);
        }
        let found = run.batch(reads, AbortOption::IgnoreError, false).await?;
        let existed = found.iter().filter(|r| matches!(r, OpResult::Row(_))).count() as u64;
        statement_batch(run, ops, true).await?;
        return Ok(WriteResult { affected: n + existed, last_insert_id: first_id, info: String::new() });
    }
    if p.ignore {
        let res = run.batch(ops, AbortOption::IgnoreError, true).await?;
        let mut done = 0;
        for r in &res {
            match r {
                OpResult::Done | OpResult::Row(_) => done += 1,
                OpResult::Error(e) if e.code == ErrorCode::DuplicateKey => {}
                OpResult::Error(e) => return Err(SqlError::from(e.clone())),
                OpResult::NotFound => {}
            }
        }
        let dups = n - done;
        let info = if n > 1 { format!("Records: {n}  Duplicates: {dups}  Warnings: {dups}") } else { String::new() };
        return Ok(WriteResult { affected: done, last_insert_id: first_id, info });
    }
    match statement_batch(run, ops, true).await {
        Ok(_) => {
            let info = if n > 1 { format!("Records: {n}  Duplicates: 0  Warnings: 0") } else { String::new() };
            Ok(WriteResult { affected: n, last_insert_id: first_id, info })
        }
        Err(e) if e.is(ErrorCode::DuplicateKey) => {
            // Name the duplicate: the first row whose key exists.
            let row = if rows.len() == 1 { Some(&rows[0][..]) } else { None };
            Err(dup_error(h, &tern_client::TernError::new(ErrorCode::DuplicateKey, e.message.clone()), row))
        }
        Err(e) => Err(e),
    }
}

async fn insert_on_dup(
    run: &mut Runner<'_>,
    p: &InsertPlan,
    rows: Vec<Vec<Value>>,
    env: &Env<'_>,
    first_id: Option<u64>,
) -> Result<WriteResult, SqlError> {
    let h = &p.handle;
    let mut affected = 0;
    for row in rows {
        // Lock the key (existing or not), then insert or update.
        let key = h.key_of_values(&row);
        let op = h.read_locked(&key, true).map_err(SqlError::from)?;
        let res = run.batch(vec![op], AbortOption::IgnoreError, false).await?;
        match res.into_iter().next() {
            Some(OpResult::Row(b)) => {
                let old = h.decode_row(&b).map_err(SqlError::from)?;
                let mut new = old.clone();
                let env2 = Env { params: env.params, subs: Vec::new(), sess: env.sess, newrow: Some(&row) };
                for (c, x) in &p.on_dup {
                    let v = ev(x, &new, &[], &env2)?;
                    new[*c as usize] = store_value(h, *c as usize, v, true)?;
                }
                let ups = updates_for(&old, &new);
                if ups.iter().any(|u| h.table.is_key_column(u.col as usize)) {
                    return Err(SqlError::new(
                        1235,
                        "42000",
                        "This version of Tern doesn't yet support 'changing the primary key in ON DUPLICATE KEY UPDATE'",
                    ));
                }
                if !ups.is_empty() {
                    let op = h.update(&key, ups).map_err(SqlError::from)?;
                    statement_batch(run, vec![op], false).await?;
                    affected += 2;
                }
            }
            _ => {
                let op = h.insert(&row).map_err(SqlError::from)?;
                statement_batch(run, vec![op], false).await.map_err(|e| {
                    if e.is(ErrorCode::DuplicateKey) {
                        dup_error(
                            h,
                            &tern_client::TernError::new(ErrorCode::DuplicateKey, e.message.clone()),
                            Some(&row),
                        )
                    } else {
                        e
                    }
                })?;
                affected += 1;
            }
        }
    }
    run.finish().await?;
    Ok(WriteResult { affected, last_insert_id: first_id, info: String::new() })
}

/// Rows an UPDATE/DELETE touches, locked, filtered, ordered and limited.
async fn target_rows(run: &mut Runner<'_>, p: &ModifyPlan, env: &Env<'_>) -> Result<Vec<Vec<Value>>, SqlError> {
    let mut rows =
        run.fetch(&p.src, &[], env, How { lock: Some(super::ast::Lock::Exclusive), ..How::default() }).await?;
    let mut kept = Vec::with_capacity(rows.len());
    for r in rows.drain(..) {
        let mut ok = true;
        for c in &p.filter {
            if eval::truth(&ev(c, &r, &[], env)?) != Some(true) {
                ok = false;
                break;
            }
        }
        if ok {
            kept.push(r);
        }
    }
    if !p.order.is_empty() {
        let mut keyed: Vec<(Vec<Value>, Vec<Value>)> = Vec::new();
        for r in kept {
            let k = p.order.iter().map(|(x, _)| ev(x, &r, &[], env)).collect::<Result<Vec<_>, _>>()?;
            keyed.push((k, r));
        }
        keyed.sort_by(|a, b| {
            for (i, (_, desc)) in p.order.iter().enumerate() {
                let o = eval::sort_cmp(&a.0[i], &b.0[i]);
                let o = if *desc { o.reverse() } else { o };
                if o != Ordering::Equal {
                    return o;
                }
            }
            Ordering::Equal
        });
        kept = keyed.into_iter().map(|(_, r)| r).collect();
    }
    if let Some(l) = &p.limit {
        let n = eval::to_i128(&ev(l, &[], &[], env)?).unwrap_or(0).max(0) as usize;
        kept.truncate(n);
    }
    Ok(kept)
}

/// Whether the WHERE clause is exactly the primary-key equality the access uses.
fn key_only(p: &ModifyPlan) -> bool {
    matches!(p.src.access, Access::Key(_))
        && p.filter.len() == p.src.handle.table.primary_key.len()
        && p.order.is_empty()
        && p.limit.is_none()
}

fn key_values(p: &ModifyPlan, env: &Env) -> Result<Option<Vec<Value>>, SqlError> {
    let Access::Key(k) = &p.src.access else { return Ok(None) };
    let vals: Vec<Value> = k.iter().map(|x| ev(x, &[], &[], env)).collect::<Result<_, _>>()?;
    if vals.iter().any(Value::is_null) {
        return Ok(Some(Vec::new()));
    }
    Ok(Some(vals))
}

pub fn run_update<'a>(
    run: &'a mut Runner<'_>,
    p: &'a ModifyPlan,
    env: &'a Env<'_>,
) -> crate::Fut<'a, Result<WriteResult, SqlError>> {
    Box::pin(update(run, p, env))
}

async fn update(run: &mut Runner<'_>, p: &ModifyPlan, env: &Env<'_>) -> Result<WriteResult, SqlError> {
    let own = with_subs(run, &p.subs, env).await?;
    let env = own.as_ref().unwrap_or(env);
    let h = &p.src.handle;
    if key_only(p) {
        // Blind update by key when every assignment can be applied by the data node.
        let mut ups = Vec::new();
        let mut blind = true;
        for (c, x) in &p.sets {
            if h.table.is_key_column(*c as usize) {
                blind = false;
                break;
            }
            match blind_update(h, *c, x, env)? {
                Some(UpdateExpr::Set(v)) => {
                    ups.push(ColumnUpdate { col: *c, expr: UpdateExpr::Set(store_value(h, *c as usize, v, true)?) })
                }
                Some(e) => ups.push(ColumnUpdate { col: *c, expr: e }),
                None => {
                    blind = false;
                    break;
                }
            }
        }
        if blind {
            let Some(key) = key_values(p, env)? else { unreachable!("key access") };
            if key.is_empty() {
                return Ok(matched_info(0, 0));
            }
            let op = match h.update(&key, ups) {
                Ok(op) => op,
                Err(e)
                    if matches!(
                        e.code,
                        ErrorCode::InvalidValue | ErrorCode::ValueOutOfRange | ErrorCode::DataTooLong
                    ) =>
                {
                    run.finish().await?;
                    return Ok(matched_info(0, 0));
                }
                Err(e) => return Err(SqlError::from(e)),
            };
            // Like NDB's read-before-write removal, a blind update reports the row it found as
            // changed (it cannot tell whether the value was already there).
            let res = run.batch(vec![op], AbortOption::IgnoreError, true).await?;
            return match res.into_iter().next() {
                Some(OpResult::Done) | Some(OpResult::Row(_)) => Ok(matched_info(1, 1)),
                Some(OpResult::Error(e)) if e.code == ErrorCode::ValueOutOfRange => {
                    // col = col ± k beyond BIGINT is MySQL's expression overflow (1690).
                    let big = p
                        .sets
                        .iter()
                        .any(|(c, _)| matches!(h.table.columns[*c as usize].ty, ColumnType::BigInt { .. }));
                    Err(if big { eval::out_of_range("BIGINT") } else { out_of_range_col(h, p) })
                }
                Some(OpResult::Error(e)) => Err(SqlError::from(e)),
                _ => Ok(matched_info(0, 0)),
            };
        }
    }
    let rows = target_rows(run, p, env).await?;
    let mut ops = Vec::new();
    let mut changed = 0;
    for old in &rows {
        let mut new = old.clone();
        for (c, x) in &p.sets {
            let v = ev(x, &new, &[], env)?;
            new[*c as usize] = store_value(h, *c as usize, v, true)?;
        }
        let ups = updates_for(old, &new);
        if ups.is_empty() {
            continue;
        }
        changed += 1;
        if ups.iter().any(|u| h.table.is_key_column(u.col as usize)) {
            ops.push(h.delete(&h.key_of_values(old)).map_err(SqlError::from)?);
            ops.push(h.insert(&new).map_err(SqlError::from)?);
        } else {
            ops.push(h.update(&h.key_of_values(old), ups).map_err(SqlError::from)?);
        }
    }
    statement_batch(run, ops, true).await.map_err(|e| {
        if e.is(ErrorCode::DuplicateKey) {
            dup_error(h, &tern_client::TernError::new(ErrorCode::DuplicateKey, e.message.clone()), None)
        } else {
            e
        }
    })?;
    run.finish().await?;
    Ok(matched_info(rows.len() as u64, changed))
}

fn matched_info(matched: u64, changed: u64) -> WriteResult {
    WriteResult {
        affected: changed,
        last_insert_id: None,
        info: format!("Rows matched: {matched}  Changed: {changed}  Warnings: 0"),
    }
}

pub fn run_delete<'a>(
    run: &'a mut Runner<'_>,
    p: &'a ModifyPlan,
    env: &'a Env<'_>,
) -> crate::Fut<'a, Result<WriteResult, SqlError>> {
    Box::pin(delete(run, p, env))
}

async fn delete(run: &mut Runner<'_>, p: &ModifyPlan, env: &Env<'_>) -> Result<WriteResult, SqlError> {
    let own = with_subs(run, &p.subs, env).await?;
    let env = own.as_ref().unwrap_or(env);
    let h = &p.src.handle;
    if key_only(p) {
        let Some(key) = key_values(p, env)? else { unreachable!("key access") };
        if key.is_empty() {
            run.finish().await?;
            return Ok(WriteResult { affected: 0, last_insert_id: None, info: String::new() });
        }
        let op = match h.delete(&key) {
            Ok(op) => op,
            Err(e)
                if matches!(e.code, ErrorCode::InvalidValue | ErrorCode::ValueOutOfRange | ErrorCode::DataTooLong) =>
            {
                run.finish().await?;
                return Ok(WriteResult { affected: 0, last_insert_id: None, info: String::new() });
            }
            Err(e) => return Err(SqlError::from(e)),
        };
        let res = run.batch(vec![op], AbortOption::IgnoreError, true).await?;
        let n = match res.into_iter().next() {
            Some(OpResult::Done) | Some(OpResult::Row(_)) => 1,
            Some(OpResult::Error(e)) => return Err(SqlError::from(e)),
            _ => 0,
        };
        return Ok(WriteResult { affected: n, last_insert_id: None, info: String::new() });
    }
    let rows = target_rows(run, p, env).await?;
    let mut ops = Vec::with_capacity(rows.len());
    for r in &rows {
        ops.push(h.delete(&h.key_of_values(r)).map_err(SqlError::from)?);
    }
    // Large deletes go in bounded batches.
    let n = ops.len() as u64;
    while ops.len() > 1000 {
        let rest = ops.split_off(1000);
        statement_batch(run, std::mem::replace(&mut ops, rest), false).await?;
    }
    statement_batch(run, ops, true).await?;
    run.finish().await?;
    Ok(WriteResult { affected: n, last_insert_id: None, info: String::new() })
}

fn out_of_range_col(h: &TableHandle, p: &ModifyPlan) -> SqlError {
    let name = p.sets.first().map(|(c, _)| h.table.columns[*c as usize].name.clone()).unwrap_or_default();
    SqlError::new(1264, "22003", format!("Out of range value for column '{name}' at row 1"))
}
