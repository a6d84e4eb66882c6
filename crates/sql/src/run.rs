//! Execution of plans against the data nodes through the native client: key reads and writes
//! in the session's transaction (the statement's own transaction under autocommit, committed
//! with its last batch), scans with pushed filters, bounds and limits, nested-loop joins with
//! one batch of key reads per join level, grouping, aggregates, DISTINCT, ORDER BY and LIMIT.

use super::ast::{BinOp, Lock, UnOp};
use super::eval::{self, EResult};
use super::limits;
use super::plan::*;
use crate::SqlError;
use std::cmp::Ordering;
use tern_client::{
    AbortOption, Bound, Client, ColumnUpdate, Exec, Filter, KeyOp, OpKind, OpResult, TableHandle, Transaction,
    UpdateExpr,
};
use tern_types::filter::CmpOp;
use tern_types::value::coerce;
use tern_types::{ErrorCode, TernError, Value};

/// Session state the evaluator reads.
pub trait Sess: crate::func::FnCtx + Sync {
    fn sysvar(&self, global: bool, name: &str) -> Result<Value, SqlError>;
    fn uservar(&self, name: &str) -> Value;
}

pub struct Env<'a> {
    pub params: &'a [Value],
    pub subs: Vec<Vec<Vec<Value>>>,
    pub sess: &'a dyn Sess,
    /// The row an INSERT proposed (for VALUES(col)).
    pub newrow: Option<&'a [Value]>,
}

pub fn ev(x: &X, row: &[Value], aggs: &[Value], env: &Env) -> EResult<Value> {
    Ok(match x {
        X::Lit(v) => v.clone(),
        X::Param(i) => env.params.get(*i).cloned().unwrap_or(Value::Null),
        X::Col(c) => row.get(*c).cloned().unwrap_or(Value::Null),
        X::Agg(i) => aggs.get(*i).cloned().unwrap_or(Value::Null),
        X::NewCol(c) => env.newrow.and_then(|r| r.get(*c).cloned()).unwrap_or(Value::Null),
        X::Sys(g, n) => env.sess.sysvar(*g, n)?,
        X::User(n) => env.sess.uservar(n),
        X::Un(op, a) => {
            let v = ev(a, row, aggs, env)?;
            match op {
                UnOp::Not => eval::bool_value(eval::truth(&v).map(|b| !b)),
                UnOp::Neg => eval::negate(v)?,
                UnOp::BitNot => match eval::to_i128(&v) {
                    Some(i) => Value::UInt(!(i as u64)),
                    None => Value::Null,
                },
            }
        }
        X::Bin(op, a, b) => match op {
            BinOp::And | BinOp::Or | BinOp::Xor => logical(*op, a, b, row, aggs, env)?,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::NullSafeEq => {
                eval::compare_op(*op, &ev(a, row, aggs, env)?, &ev(b, row, aggs, env)?)
            }
            _ => eval::arith(*op, &ev(a, row, aggs, env)?, &ev(b, row, aggs, env)?)?,
        },
        X::IsNull(a, neg) => Value::Int((ev(a, row, aggs, env)?.is_null() != *neg) as i64),
        X::IsBool(a, value, neg) => {
            let t = eval::truth(&ev(a, row, aggs, env)?);
            Value::Int(((t == Some(*value)) != *neg) as i64)
        }
        X::In(a, list, neg) => {
            let v = ev(a, row, aggs, env)?;
            let mut vals = Vec::with_capacity(list.len());
            for x in list {
                vals.push(ev(x, row, aggs, env)?);
            }
            in_list(&v, &vals, *neg)
        }
        X::InSub(a, i, neg) => {
            let v = ev(a, row, aggs, env)?;
            let vals: Vec<Value> =
                sub_rows(env, *i)?.iter().map(|r| r.first().cloned().unwrap_or(Value::Null)).collect();
            in_list(&v, &vals, *neg)
        }
        X::Exists(i, neg) => Value::Int((sub_rows(env, *i)?.is_empty() == *neg) as i64),
        X::Sub(i) => match sub_rows(env, *i)?.len() {
            0 => Value::Null,
            1 => sub_rows(env, *i)?[0].first().cloned().unwrap_or(Value::Null),
            _ => return Err(SqlError::new(1242, "21000", "Subquery returns more than 1 row")),
        },
        X::Between(a, lo, hi, neg) => {
            let v = ev(a, row, aggs, env)?;
            let l = eval::compare_op(BinOp::Ge, &v, &ev(lo, row, aggs, env)?);
            let h = eval::compare_op(BinOp::Le, &v, &ev(hi, row, aggs, env)?);
            let r = match (eval::truth(&l), eval::truth(&h)) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            };
            eval::bool_value(r.map(|b| b != *neg))
        }
        X::Like(a, p, neg) => {
            let (v, p) = (ev(a, row, aggs, env)?, ev(p, row, aggs, env)?);
            match (eval::text(&v), eval::text(&p)) {
                (Some(s), Some(p)) => Value::Int((eval::like(&s, &p) != *neg) as i64),
                _ => Value::Null,
            }
        }
        X::Call(f, args) => {
            let mut vals = Vec::with_capacity(args.len());
            let mut live = limits::Live::default();
            for a in args {
                let v = ev(a, row, aggs, env)?;
                live.hold(&v)?;
                vals.push(v);
            }
            f.call(&vals, env.sess)?
        }
        X::Case(operand, whens, else_) => {
            let op = match operand {
                Some(o) => Some(ev(o, row, aggs, env)?),
                None => None,
            };
            for (w, t) in whens {
                let wv = ev(w, row, aggs, env)?;
                let hit = match &op {
                    Some(o) => eval::compare(o, &wv) == Some(Ordering::Equal),
                    None => eval::truth(&wv) == Some(true),
                };
                if hit {
                    return ev(t, row, aggs, env);
                }
            }
            match else_ {
                Some(e) => ev(e, row, aggs, env)?,
                None => Value::Null,
            }
        }
        X::Cast(a, t) => eval::cast(ev(a, row, aggs, env)?, *t)?,
        X::DateAdd(d, n, unit, sign) => {
            crate::func::date_add(&ev(d, row, aggs, env)?, &ev(n, row, aggs, env)?, unit, *sign)?
        }
    })
}

/// AND, OR (short-circuit, as MySQL evaluates them) and XOR in three-valued logic.
fn logical(op: BinOp, a: &X, b: &X, row: &[Value], aggs: &[Value], env: &Env) -> EResult<Value> {
    Ok(match op {
        BinOp::And => {
            let l = eval::truth(&ev(a, row, aggs, env)?);
            if l == Some(false) {
                return Ok(Value::Int(0));
            }
            let r = eval::truth(&ev(b, row, aggs, env)?);
            eval::bool_value(match (l, r) {
                (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            })
        }
        BinOp::Or => {
            let l = eval::truth(&ev(a, row, aggs, env)?);
            if l == Some(true) {
                return Ok(Value::Int(1));
            }
            let r = eval::truth(&ev(b, row, aggs, env)?);
            eval::bool_value(match (l, r) {
                (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            })
        }
        BinOp::Xor => {
            let l = eval::truth(&ev(a, row, aggs, env)?);
            let r = eval::truth(&ev(b, row, aggs, env)?);
            eval::bool_value(match (l, r) {
                (Some(x), Some(y)) => Some(x != y),
                _ => None,
            })
        }
        _ => unreachable!("not a logical operator: {op:?}"),
    })
}

/// A subquery's rows (run before the statement).
fn sub_rows<'e>(env: &'e Env, i: usize) -> Result<&'e Vec<Vec<Value>>, SqlError> {
    env.subs
        .get(i)
        .ok_or_else(|| SqlError::new(1235, "42000", "This version of Tern doesn't yet support 'a subquery here'"))
}

fn in_list(v: &Value, vals: &[Value], neg: bool) -> Value {
    if v.is_null() {
        return Value::Null;
    }
    let mut unknown = false;
    for x in vals {
        match eval::compare(v, x) {
            Some(Ordering::Equal) => return Value::Int(!neg as i64),
            None => unknown = true,
            _ => {}
        }
    }
    if unknown { Value::Null } else { Value::Int(neg as i64) }
}

fn passes(conds: &[X], row: &[Value], env: &Env) -> EResult<bool> {
    for c in conds {
        if eval::truth(&ev(c, row, &[], env)?) != Some(true) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The session's transaction state.
#[derive(Default)]
pub struct TxnState {
    pub txn: Option<Transaction>,
    /// BEGIN / START TRANSACTION, or autocommit off.
    pub open: bool,
    /// Transactions begin durable (the session's `tern_durable_commit`).
    pub durable: bool,
}

/// How `Runner::fetch` reads: locks, a row limit it may push (0: none), index order (Some:
/// descending?), and whether the read ends the statement.
#[derive(Clone, Copy, Default)]
pub struct How {
    pub lock: Option<Lock>,
    pub limit: u64,
    pub scan_order: Option<bool>,
    pub last: bool,
}

/// Executes plans for one statement.
pub struct Runner<'a> {
    pub client: &'a Client,
    pub ts: &'a mut TxnState,
    /// The statement's memory and time, and its kill switch.
    pub budget: super::limits::Budget,
}

pub fn tern_err(e: TernError) -> SqlError {
    SqlError::from(e)
}

impl Runner<'_> {
    /// One batch of key operations in the session's transaction. `last`: the statement ends
    /// with this batch (under autocommit the batch commits).
    pub async fn batch(&mut self, ops: Vec<KeyOp>, abort: AbortOption, last: bool) -> Result<Vec<OpResult>, SqlError> {
        self.budget.check()?;
        if ops.is_empty() && !(last && !self.ts.open && self.ts.txn.is_some()) {
            return Ok(Vec::new());
        }
        let commit = last && !self.ts.open;
        let durable = self.ts.durable;
        let txn = self.ts.txn.get_or_insert_with(|| self.client.begin().durable(durable));
        let r = txn.execute_with(ops, if commit { Exec::Commit } else { Exec::NoCommit }, abort).await;
        if commit || r.is_err() {
            // Committed, or aborted by the data node (a failed transaction is gone).
            self.ts.txn = None;
            if r.is_err() {
                self.ts.open = false;
            }
        }
        r.map_err(tern_err)
    }

    /// Ends the statement: commits its own transaction if one is still open under autocommit.
    pub async fn finish(&mut self) -> Result<(), SqlError> {
        if !self.ts.open
            && let Some(t) = self.ts.txn.take()
        {
            t.commit().await.map_err(tern_err)?;
        }
        Ok(())
    }

    /// Rolls back the statement's own transaction after an error (under autocommit).
    pub fn abandon(&mut self) {
        if !self.ts.open {
            self.ts.txn = None;
        }
    }

    async fn scan_rows(
        &mut self,
        h: &TableHandle,
        spec: tern_client::ScanSpec,
        needed: &[u16],
    ) -> Result<Vec<Vec<Value>>, SqlError> {
        let mut sc = self.client.scan(spec);
        let mut out = Vec::new();
        loop {
            self.budget.check()?;
            let Some(batch) = sc.next_batch().await.map_err(tern_err)? else { break };
            for r in batch {
                let row = place(h, needed, &r)?;
                self.budget.charge_row(&row)?;
                out.push(row);
            }
        }
        Ok(out)
    }

    /// Rows of `src` matching its access path and pushed conditions, given the values of the
    /// earlier tables in `prefix`. Rows are table-width (unread columns are NULL).
    pub async fn fetch(
        &mut self,
        src: &Src,
        prefix: &[Value],
        env: &Env<'_>,
        how: How,
    ) -> Result<Vec<Vec<Value>>, SqlError> {
        let How { lock, limit, scan_order, last } = how;
        let h = &src.handle;
        if super::infoschema::is_virtual(&h.table.database) {
            // Virtual tables: every row (the query's conditions are applied by the caller).
            let rows = if h.table.database == super::ndbinfo::DB {
                super::ndbinfo::rows(self.client, &h.table.name).await
            } else {
                super::infoschema::rows(&self.client.catalog(), &h.table.name)
            };
            for r in &rows {
                self.budget.charge_row(r)?;
            }
            return Ok(rows);
        }
        match src.access {
            Access::Key(_) | Access::Keys(_) => {
                let mut rows = self.fetch_keyed_many(src, &[prefix], env, lock, last).await?;
                Ok(rows.pop().unwrap_or_default())
            }
            _ => {
                let (filter, exact) = pushed_filter(src, prefix, env)?;
                let mut specs = Vec::new();
                match &src.access {
                    Access::Index { index, ranges } => {
                        for r in ranges {
                            let Some((lo, hi)) = bounds(h, index, r, prefix, env)? else { continue };
                            let mut spec = tern_client::ScanSpec::table(h.id());
                            spec.index = Some(index.id);
                            spec.lo = lo;
                            spec.hi = hi;
                            specs.push(spec);
                        }
                    }
                    _ => specs.push(tern_client::ScanSpec::table(h.id())),
                }
                let multi = specs.len() > 1;
                let mut out = Vec::new();
                for mut spec in specs {
                    spec.filter = filter.clone();
                    spec.projection = Some(src.needed.clone());
                    if exact && limit > 0 {
                        spec.limit = limit;
                        spec.batch_rows = limit.clamp(1, 1024) as u32;
                    }
                    if let Some(desc) = scan_order
                        && spec.index.is_some()
                    {
                        spec.ordered = true;
                        spec.descending = desc;
                    }
                    out.extend(self.scan_rows(h, spec, &src.needed).await?);
                }
                if multi {
                    dedup_by_key(h, &mut out);
                }
                if let Some(l) = lock {
                    // Lock what the scan found, by key, and use the locked versions.
                    let mut ops = Vec::new();
                    for r in &out {
                        let kv = h.key_of_values(r);
                        if let Some(op) = key_op_locked(h, &kv, l, &src.needed)? {
                            ops.push(op);
                        }
                    }
                    let res = self.batch(ops, AbortOption::IgnoreError, last).await?;
                    out.clear();
                    for r in res {
                        if let OpResult::Row(b) = r {
                            out.push(place(h, &src.needed, &b)?);
                        }
                    }
                }
                Ok(out)
            }
        }
    }
}

impl Runner<'_> {
    /// Key access (`Access::Key` / `Access::Keys`), batched: the rows each of `prefixes` reads
    /// from `src` (keyed by the earlier tables' values), from one batch of distinct key reads
    /// for all of them instead of one round trip per prefix; each prefix's rows in its keys'
    /// order. The answer may cover only the first prefixes (at most about
    /// `KEYED_READS_PER_BATCH` reads, though one prefix's keys all go). `last`: as `batch`'s.
    async fn fetch_keyed_many<P: AsRef<[Value]>>(
        &mut self,
        src: &Src,
        prefixes: &[P],
        env: &Env<'_>,
        lock: Option<Lock>,
        last: bool,
    ) -> Result<Vec<Vec<Vec<Value>>>, SqlError> {
        let h = &src.handle;
        let mut slot: std::collections::HashMap<Vec<u8>, usize> = std::collections::HashMap::new();
        let mut ops = Vec::new();
        let mut wanted: Vec<Vec<usize>> = Vec::with_capacity(prefixes.len());
        // The last prefix (+1) that wants each read: a prefix lists a key once.
        let mut stamp: Vec<usize> = Vec::new();
        for (n, prefix) in prefixes.iter().enumerate() {
            // Bounded per batch: the rest of the prefixes go in the next one.
            if ops.len() >= KEYED_READS_PER_BATCH {
                break;
            }
            let mut mine: Vec<usize> = Vec::new();
            for op in key_ops(src, prefix.as_ref(), env, lock)? {
                let next = ops.len();
                let at = *slot.entry(op.key.clone()).or_insert(next);
                if at == next {
                    ops.push(op);
                    stamp.push(0);
                }
                if stamp[at] != n + 1 {
                    stamp[at] = n + 1;
                    mine.push(at);
                }
            }
            wanted.push(mine);
        }
        if ops.is_empty() {
            return Ok(vec![Vec::new(); wanted.len()]);
        }
        let n_ops = ops.len();
        let res = self.batch(ops, AbortOption::IgnoreError, last).await?;
        let mut found: Vec<Option<Vec<Value>>> = Vec::with_capacity(res.len());
        for r in res {
            found.push(match r {
                OpResult::Row(b) => Some(place(h, &src.needed, &b)?),
                OpResult::NotFound | OpResult::Done => None,
                OpResult::Error(e) => return Err(tern_err(e)),
            });
        }
        found.resize(n_ops, None);
        // A row goes to its last prefix by move, to the others as a copy.
        let mut uses = vec![0usize; found.len()];
        wanted.iter().flatten().for_each(|&k| uses[k] += 1);
        let mut out = Vec::with_capacity(prefixes.len());
        for mine in wanted {
            let rows: Vec<Vec<Value>> = mine
                .iter()
                .filter_map(|&k| {
                    uses[k] -= 1;
                    if uses[k] == 0 { found[k].take() } else { found[k].clone() }
                })
                .collect();
            for r in &rows {
                self.budget.charge_row(r)?;
            }
            out.push(rows);
        }
        Ok(out)
    }
}

/// The key reads of a keyed access path (`Access::Key` / `Access::Keys`) for one prefix, in
/// the path's order (a key may repeat); none for scans.
fn key_ops(src: &Src, prefix: &[Value], env: &Env<'_>, lock: Option<Lock>) -> Result<Vec<KeyOp>, SqlError> {
    let h = &src.handle;
    let keys: Vec<&Vec<X>> = match &src.access {
        Access::Key(k) => vec![k],
        Access::Keys(ks) => ks.iter().collect(),
        _ => return Ok(Vec::new()),
    };
    let mut ops = Vec::with_capacity(keys.len());
    for k in keys {
        let mut vals: Vec<Value> = k.iter().map(|x| ev(x, prefix, &[], env)).collect::<Result<_, _>>()?;
        // A string against a numeric key compares as its numeric prefix ('3abc' = 3).
        for (v, &c) in vals.iter_mut().zip(&h.table.primary_key) {
            let ty = h.table.columns[c as usize].ty;
            if let Value::Bytes(b) = v
                && (ty.is_integer() || matches!(ty, tern_types::ColumnType::Decimal { .. }))
                && std::str::from_utf8(b).map(|t| t.trim().parse::<f64>().is_err()).unwrap_or(true)
            {
                *v = Value::Double(eval::str_to_f64(b));
            }
        }
        if vals.iter().any(Value::is_null) {
            continue;
        }
        let op = match lock {
            Some(l) => h.read_locked(&vals, l == Lock::Exclusive),
            None => h.read(&vals),
        };
        match op {
            Ok(mut op) => {
                op.projection = Some(src.needed.clone());
                ops.push(op);
            }
            // A key value that cannot be stored in the key column matches no row.
            Err(e)
                if matches!(e.code, ErrorCode::InvalidValue | ErrorCode::ValueOutOfRange | ErrorCode::DataTooLong) => {}
            Err(e) => return Err(tern_err(e)),
        }
    }
    Ok(ops)
}

fn key_op_locked(h: &TableHandle, key: &[Value], l: Lock, needed: &[u16]) -> Result<Option<KeyOp>, SqlError> {
    let mut op = h.read_locked(key, l == Lock::Exclusive).map_err(tern_err)?;
    op.projection = Some(needed.to_vec());
    Ok(Some(op))
}

fn dedup_by_key(h: &TableHandle, rows: &mut Vec<Vec<Value>>) {
    let mut seen = std::collections::HashSet::new();
    rows.retain(|r| {
        let k = h.key_of_values(r);
        seen.insert(h.key(&k).unwrap_or_default())
    });
}

impl Runner<'_> {
    /// Partial groups of a pushed aggregation, merged: (group values, accumulators) per group.
    /// None when some condition cannot be pushed exactly (the caller then aggregates rows).
    pub async fn fetch_aggregate(
        &mut self,
        src: &Src,
        env: &Env<'_>,
        a: &tern_agg::Aggregation,
    ) -> Result<Option<Vec<(Vec<Value>, Vec<Value>)>>, SqlError> {
        let h = &src.handle;
        let (filter, exact) = pushed_filter(src, &[], env)?;
        if !exact {
            return Ok(None);
        }
        let mut spec = tern_client::ScanSpec::table(h.id());
        // An ordered-index range visits rows in key order, one random row access (and one index
        // key) per row: for a range open at one end — mostly a large part of the table, and no
        // statistics say otherwise — the partition's sequential scan with the range's condition
        // pushed as a filter is faster (TPC-H Q1: `l_shipdate <= ...` covers 98 % of lineitem).
        // Equalities and ranges closed at both ends keep the index.
        let bounded = |r: &Range| !r.eq.is_empty() || (r.lo.is_some() && r.hi.is_some());
        if let Access::Index { index, ranges } = &src.access
            && ranges.iter().all(bounded)
        {
            let Some(r) = ranges.first() else { return Ok(Some(Vec::new())) };
            let Some((lo, hi)) = bounds(h, index, r, &[], env)? else { return Ok(Some(Vec::new())) };
            spec.index = Some(index.id);
            spec.lo = lo;
            spec.hi = hi;
        }
        spec.filter = filter;
        spec.aggregate = Some(a.clone());
        let mut sc = self.client.scan(spec);
        let mut groups: Vec<(Vec<Value>, Vec<Value>)> = Vec::new();
        let mut index: std::collections::HashMap<Vec<u8>, Vec<usize>> = std::collections::HashMap::new();
        loop {
            self.budget.check()?;
            let batch = match sc.next_batch().await {
                Ok(Some(b)) => b,
                Ok(None) => break,
                // Arithmetic the data node could not do (overflow): the rows are aggregated
                // here instead, which reports MySQL's own error.
                Err(e) if e.code == tern_types::ErrorCode::ValueOutOfRange => return Ok(None),
                Err(e) => return Err(tern_err(e)),
            };
            for b in batch {
                let (g, accs) = tern_agg::decode_partial(a, &b)
                    .map_err(|e| SqlError::new(1105, "HY000", format!("bad aggregate from the data node: {e:?}")))?;
                let hk = group_hash(&g);
                let slot = index.get(&hk).and_then(|c| c.iter().copied().find(|&i| key_eq(&groups[i].0, &g)));
                match slot {
                    Some(i) => a.merge(&mut groups[i].1, &accs),
                    None => {
                        self.budget.charge(limits::row_bytes(&g) + limits::row_bytes(&accs))?;
                        index.entry(hk).or_default().push(groups.len());
                        groups.push((g, accs));
                    }
                }
            }
        }
        Ok(Some(groups))
    }
}

/// Decodes a projected row into a table-width row.
fn place(h: &TableHandle, needed: &[u16], bytes: &[u8]) -> Result<Vec<Value>, SqlError> {
    let vals = h.decode_projection(needed, bytes).map_err(tern_err)?;
    let mut row = vec![Value::Null; h.table.columns.len()];
    for (&c, v) in needed.iter().zip(vals) {
        row[c as usize] = v;
    }
    Ok(row)
}

/// The pushed filter with its constants evaluated and coerced; `exact` is false when some
/// condition could not be pushed (then no limit may be pushed either). A filter stays within the
/// data node's `FILTER_TERMS_MAX` terms (and values per IN-list); conditions beyond are left to
/// the API server's check of every condition.
fn pushed_filter(src: &Src, prefix: &[Value], env: &Env) -> Result<(Filter, bool), SqlError> {
    let cols = &src.handle.table.columns;
    let mut parts = Vec::new();
    let mut exact = true;
    let conv = |c: u16, v: Value| -> Option<Value> {
        if v.is_null() || !same_kind(cols[c as usize].ty, &v) {
            return None;
        }
        coerce(cols[c as usize].ty, v).ok()
    };
    for p in &src.push {
        if parts.len() >= tern_types::filter::FILTER_TERMS_MAX {
            exact = false;
            break;
        }
        match p {
            Push::Cmp(c, op, x) => {
                let v = ev(x, prefix, &[], env)?;
                if v.is_null() {
                    // A comparison with NULL is never true.
                    return Ok((Filter::Not(Box::new(Filter::True)), true));
                }
                match conv(*c, v.clone()) {
                    // Only when coercion kept the value exactly (no rounding of 1.5 into an
                    // integer column, no string → number surprises).
                    Some(cv) if eval::compare(&cv, &v) == Some(Ordering::Equal) => {
                        parts.push(Filter::Cmp { col: *c, op: *op, value: cv })
                    }
                    _ => exact = false,
                }
            }
            Push::IsNull(c, is_null) => parts.push(if *is_null { Filter::IsNull(*c) } else { Filter::IsNotNull(*c) }),
            Push::In(c, list) => {
                let mut values = Vec::new();
                let mut ok = true;
                for x in list {
                    let v = ev(x, prefix, &[], env)?;
                    if v.is_null() {
                        continue;
                    }
                    match conv(*c, v.clone()) {
                        Some(cv) if eval::compare(&cv, &v) == Some(Ordering::Equal) => values.push(cv),
                        _ => ok = false,
                    }
                }
                if ok && values.len() <= tern_types::filter::FILTER_TERMS_MAX {
                    parts.push(Filter::In { col: *c, values });
                } else {
                    exact = false;
                }
            }
        }
    }
    let f = match parts.len() {
        0 => Filter::True,
        1 => parts.pop().expect("one"),
        _ => Filter::And(parts),
    };
    Ok((f, exact))
}

/// Whether comparing column values of type `ty` with `v` in stored order is what SQL means: a
/// string column compares with strings only (MySQL compares it with a number numerically).
fn same_kind(ty: tern_types::ColumnType, v: &Value) -> bool {
    use tern_types::ColumnType as C;
    match ty {
        C::Char { .. } | C::VarChar { .. } | C::Text | C::Binary { .. } | C::VarBinary { .. } | C::Blob => {
            matches!(v, Value::Bytes(_))
        }
        _ => true,
    }
}

/// Encoded bounds of one range (None: the range is empty, e.g. compares with NULL).
#[allow(clippy::type_complexity)]
fn bounds(
    h: &TableHandle,
    index: &tern_client::Index,
    r: &Range,
    prefix: &[Value],
    env: &Env,
) -> Result<Option<(Option<Bound>, Option<Bound>)>, SqlError> {
    let mut eq = Vec::new();
    for x in &r.eq {
        let v = ev(x, prefix, &[], env)?;
        if v.is_null() {
            return Ok(None);
        }
        eq.push(v);
    }
    let col_ty = |k: usize| h.table.columns[index.columns[k] as usize].ty;
    // Values that cannot be stored in the column: fall back to the unbounded side (the local
    // filter keeps the result exact) or an empty range for equality.
    for (k, v) in eq.iter_mut().enumerate() {
        match coerce(col_ty(k), v.clone()) {
            Ok(c) if same_kind(col_ty(k), v) && eval::compare(&c, v) == Some(Ordering::Equal) => *v = c,
            // Not comparable the way the index orders (a number against a string column, a
            // string that is not a number): the whole index, and the local filter decides.
            _ => return Ok(Some((None, None))),
        }
    }
    let side = |b: &Option<(X, bool)>| -> Result<Option<(Value, bool)>, SqlError> {
        match b {
            None => Ok(None),
            Some((x, incl)) => {
                let v = ev(x, prefix, &[], env)?;
                if v.is_null() {
                    return Ok(Some((Value::Null, *incl)));
                }
                if !same_kind(col_ty(eq.len()), &v) {
                    return Ok(Some((Value::Null, true)));
                }
                match coerce(col_ty(eq.len()), v.clone()) {
                    Ok(c) if eval::compare(&c, &v) == Some(Ordering::Equal) => Ok(Some((c, *incl))),
                    // Inexact (e.g. 1.5 for an integer column): widen to inclusive.
                    Ok(c) => Ok(Some((c, true))),
                    Err(_) => Ok(Some((Value::Null, true))),
                }
            }
        }
    };
    let lo = side(&r.lo)?;
    let hi = side(&r.hi)?;
    if lo.as_ref().is_some_and(|(v, _)| v.is_null() && r.lo.is_some()) && matches!(&r.lo, Some((_, _))) {
        // NULL or unconvertible lower bound: compare with NULL is unknown → empty, unless the
        // conversion failed (then scan unbounded and let the local filter decide).
    }
    let mk = |side: Option<(Value, bool)>| -> Result<Option<Bound>, SqlError> {
        match side {
            Some((v, incl)) if !v.is_null() => {
                let mut vals = eq.clone();
                vals.push(v);
                Ok(Some(h.index_bound(index, &vals, incl).map_err(tern_err)?))
            }
            _ if !eq.is_empty() => Ok(Some(h.index_bound(index, &eq, true).map_err(tern_err)?)),
            _ => Ok(None),
        }
    };
    Ok(Some((mk(lo)?, mk(hi)?)))
}

/// Runs subqueries of a plan (uncorrelated: each once).
pub async fn run_subs(run: &mut Runner<'_>, subs: &[SelectPlan], env: &mut Env<'_>) -> Result<(), SqlError> {
    for s in subs {
        let rows = run_select(run, s, env, false).await?;
        env.subs.push(rows);
    }
    Ok(())
}

/// The environment with a statement's subqueries run (None: it has none; use the caller's).
pub async fn with_subs<'a>(
    run: &mut Runner<'_>,
    subs: &[SelectPlan],
    env: &Env<'a>,
) -> Result<Option<Env<'a>>, SqlError> {
    if subs.is_empty() {
        return Ok(None);
    }
    let mut own = Env { params: env.params, subs: Vec::new(), sess: env.sess, newrow: None };
    run_subs(run, subs, &mut own).await?;
    Ok(Some(own))
}

fn limit_of(x: &Option<X>, env: &Env) -> Result<Option<u64>, SqlError> {
    match x {
        None => Ok(None),
        Some(x) => {
            let v = ev(x, &[], &[], env)?;
            match eval::to_i128(&v) {
                Some(n) if n >= 0 => Ok(Some(n.min(u64::MAX as i128) as u64)),
                _ => Err(SqlError::new(1210, "HY000", "Incorrect arguments to LIMIT")),
            }
        }
    }
}

/// Rows a statement handles between two yields to the executor when it works on rows it holds
/// (joins over cached matches, filters, grouping, projection, DISTINCT): the executor thread may
/// be a data node's worker (the front ends on the worker), whose other connections and own
/// signals must not wait behind one statement.
const YIELD_EVERY_ROWS: usize = 4096;

/// Prefixes whose key reads into the next table go to the data node in one batch (batched key
/// access; the engine's keyed lookups use the same size).
const KEYED_PREFIXES_PER_BATCH: usize = 1000;

/// Distinct key reads per batch of batched key access.
const KEYED_READS_PER_BATCH: usize = 4096;

/// Results with more rows than this are sorted on the blocking pool, off the executor thread.
const SORT_OFF_THREAD_ROWS: usize = 16_384;

/// Counts rows and yields to the executor every `YIELD_EVERY_ROWS` of them.
#[derive(Default)]
struct Pace(usize);

impl Pace {
    async fn row(&mut self) {
        self.0 += 1;
        if self.0 >= YIELD_EVERY_ROWS {
            self.0 = 0;
            tokio::task::yield_now().await;
        }
    }
}

/// Runs a SELECT plan: its result rows (one value per item). The future is boxed (`crate::Fut`),
/// which is also what lets subqueries and UNION parts run through it recursively.
pub fn run_select<'a>(
    run: &'a mut Runner<'_>,
    p: &'a SelectPlan,
    env: &'a Env<'_>,
    last: bool,
) -> crate::Fut<'a, Result<Vec<Vec<Value>>, SqlError>> {
    Box::pin(select(run, p, env, last))
}

async fn select(run: &mut Runner<'_>, p: &SelectPlan, env: &Env<'_>, last: bool) -> Result<Vec<Vec<Value>>, SqlError> {
    let own = with_subs(run, &p.subs, env).await?;
    let env = own.as_ref().unwrap_or(env);
    let limit = limit_of(&p.limit, env)?;
    let offset = limit_of(&p.offset, env)?.unwrap_or(0);
    // Aggregation done by the data node: groups come back instead of rows.
    let mut pushed_groups = None;
    if let Some(a) = &p.agg_push {
        pushed_groups = run.fetch_aggregate(&p.srcs[0], env, &a.agg).await?;
    }
    let srcs = if pushed_groups.is_some() { &p.srcs[..0] } else { &p.srcs[..] };
    let mut rows = join(run, p, env, srcs, last, limit, offset).await?;
    let mut pace = Pace::default();
    if !srcs.is_empty() {
        let mut kept = Vec::with_capacity(rows.len());
        for r in rows {
            pace.row().await;
            if passes(&p.filter, &r, env)? {
                kept.push(r);
            }
        }
        rows = kept;
    }
    // Project (grouping first).
    let mut out: Vec<(Vec<Value>, Vec<Value>)> = Vec::new();
    if let (Some(a), Some(mut groups)) = (&p.agg_push, pushed_groups) {
        if groups.is_empty() && p.group_by.is_empty() {
            groups.push((Vec::new(), a.agg.start()));
        }
        // Aggregate values then grouping values (`PushedAgg` rewrote the expressions so).
        let none: Vec<Value> = Vec::new();
        for (g, slots) in groups {
            let mut aggv: Vec<Value> = a.finals.iter().map(|f| final_value(*f, &slots)).collect();
            aggv.extend(g);
            if let Some(hv) = &a.having
                && eval::truth(&ev(hv, &none, &aggv, env)?) != Some(true)
            {
                continue;
            }
            let items = a.items.iter().map(|x| ev(x, &none, &aggv, env)).collect::<Result<Vec<_>, _>>()?;
            let keys = a.order.iter().map(|(x, _)| ev(x, &none, &aggv, env)).collect::<Result<Vec<_>, _>>()?;
            out.push((items, keys));
        }
    } else if p.grouped {
        out = group(run, p, env, &rows, &mut pace).await?;
    } else {
        for r in &rows {
            pace.row().await;
            let items = p.items.iter().map(|x| ev(x, r, &[], env)).collect::<Result<Vec<_>, _>>()?;
            run.budget.charge_row(&items)?;
            let keys = if p.scan_order.is_some() && p.push_limit {
                Vec::new()
            } else {
                p.order.iter().map(|(x, _)| ev(x, r, &[], env)).collect::<Result<Vec<_>, _>>()?
            };
            out.push((items, keys));
        }
    }
    // UNION parts.
    for (all, u) in &p.unions {
        let rows = run_select(run, u, env, false).await?;
        for r in &rows {
            run.budget.charge_row(r)?;
        }
        out.extend(rows.into_iter().map(|r| (r, Vec::new())));
        if !*all {
            dedup(&mut out).await;
        }
    }
    if p.distinct {
        dedup(&mut out).await;
    }
    if !p.order.is_empty() && (p.scan_order.is_none() || !p.push_limit) {
        out = sort(p, env, out).await?;
    }
    let start = (offset as usize).min(out.len());
    let end = match limit {
        Some(l) => start.saturating_add(l as usize).min(out.len()),
        None => out.len(),
    };
    Ok(out.drain(start..end).map(|(i, _)| i).collect())
}

/// The rows of the join of `srcs` (in FROM order; none: the one row of a SELECT without
/// tables), each table's access filtered by its ON conditions; WHERE is applied after.
async fn join(
    run: &mut Runner<'_>,
    p: &SelectPlan,
    env: &Env<'_>,
    srcs: &[Src],
    last: bool,
    limit: Option<u64>,
    offset: u64,
) -> Result<Vec<Vec<Value>>, SqlError> {
    let mut rows: Vec<Vec<Value>> = vec![vec![Value::Null; p.width]];
    if p.srcs.is_empty() && !passes(&p.filter, &rows[0], env)? {
        rows.clear();
    }
    let single_last = last && p.srcs.len() == 1 && p.unions.is_empty();
    for (i, src) in srcs.iter().enumerate() {
        let pushed_limit = if p.push_limit { limit.map(|l| l.saturating_add(offset)).unwrap_or(0) } else { 0 };
        let n = src.handle.table.columns.len();
        let mut next = Vec::new();
        let independent = i == 0 || is_independent(src);
        let mut cache: Option<Vec<Vec<Value>>> = None;
        let mut since_yield = 0usize;
        let keyed = !independent
            && matches!(src.access, Access::Key(_) | Access::Keys(_))
            && !super::infoschema::is_virtual(&src.handle.table.database);
        let mut batched: std::collections::VecDeque<Vec<Vec<Value>>> = std::collections::VecDeque::new();
        for (j, prefix) in rows.iter().enumerate() {
            // Joining cached rows does not wait for the data node: let the executor thread's
            // other connections run now and then (a large join would hold it for seconds; it
            // also lets a KILL from another connection on this thread arrive).
            if since_yield >= YIELD_EVERY_ROWS {
                since_yield = 0;
                tokio::task::yield_now().await;
            }
            let matches = if rows.len() == 1 {
                // One prefix (always so for the first table): no cache to keep.
                let lim = if independent { pushed_limit } else { 0 };
                let order = if independent { p.scan_order } else { None };
                run.fetch(src, prefix, env, How { lock: p.lock, limit: lim, scan_order: order, last: single_last })
                    .await?
            } else if independent {
                if cache.is_none() {
                    cache = Some(
                        run.fetch(
                            src,
                            prefix,
                            env,
                            How { lock: p.lock, limit: pushed_limit, scan_order: p.scan_order, last: single_last },
                        )
                        .await?,
                    );
                }
                let c = cache.clone().expect("fetched");
                since_yield += c.len();
                for r in &c {
                    run.budget.charge_row(r)?;
                }
                c
            } else if keyed {
                // Batched key access: the next prefixes' keys in one batch.
                if batched.is_empty() {
                    let end = (j + KEYED_PREFIXES_PER_BATCH).min(rows.len());
                    batched = run.fetch_keyed_many(src, &rows[j..end], env, p.lock, false).await?.into();
                }
                batched.pop_front().unwrap_or_default()
            } else {
                run.fetch(src, prefix, env, How { lock: p.lock, ..How::default() }).await?
            };
            let mut any = false;
            for m in matches {
                let r = if p.srcs.len() == 1 && m.len() == p.width {
                    m
                } else {
                    let mut r = prefix.clone();
                    r[src.offset..src.offset + n].clone_from_slice(&m);
                    r
                };
                if src.left_join && !passes(&src.on, &r, env)? {
                    continue;
                }
                // Conditions that only involve tables up to this one prune early.
                any = true;
                run.budget.charge_row(&r)?;
                next.push(r);
            }
            if !any && src.left_join {
                next.push(prefix.clone());
            }
        }
        rows = next;
        if rows.is_empty() {
            break;
        }
    }
    Ok(rows)
}

/// GROUP BY (or aggregates over all rows) in the API server: per group its (items, sort keys),
/// HAVING applied.
async fn group(
    run: &mut Runner<'_>,
    p: &SelectPlan,
    env: &Env<'_>,
    rows: &[Vec<Value>],
    pace: &mut Pace,
) -> Result<Vec<(Vec<Value>, Vec<Value>)>, SqlError> {
    let mut out = Vec::new();
    let mut groups: Vec<(Vec<Value>, Vec<Value>, Vec<AggState>)> = Vec::new();
    let mut index: std::collections::HashMap<Vec<u8>, Vec<usize>> = std::collections::HashMap::new();
    for r in rows {
        pace.row().await;
        let key: Vec<Value> = p.group_by.iter().map(|g| ev(g, r, &[], env)).collect::<Result<_, _>>()?;
        let hk = group_hash(&key);
        let slot = index.get(&hk).and_then(|c| c.iter().copied().find(|&g| key_eq(&groups[g].0, &key)));
        let g = match slot {
            Some(g) => g,
            None => {
                run.budget.charge(limits::row_bytes(&key) + limits::row_bytes(r))?;
                groups.push((key, r.clone(), p.aggs.iter().map(AggState::new).collect()));
                index.entry(hk).or_default().push(groups.len() - 1);
                groups.len() - 1
            }
        };
        for (st, a) in groups[g].2.iter_mut().zip(&p.aggs) {
            let v = match &a.arg {
                Some(x) => Some(ev(x, r, &[], env)?),
                None => None,
            };
            st.add(a, v)?;
        }
    }
    if groups.is_empty() && p.group_by.is_empty() {
        groups.push((Vec::new(), vec![Value::Null; p.width], p.aggs.iter().map(AggState::new).collect()));
    }
    for (_, first, states) in groups {
        let aggv: Vec<Value> = states.into_iter().zip(&p.aggs).map(|(s, a)| s.finish(a)).collect();
        if let Some(hv) = &p.having
            && eval::truth(&ev(hv, &first, &aggv, env)?) != Some(true)
        {
            continue;
        }
        let items = p.items.iter().map(|x| ev(x, &first, &aggv, env)).collect::<Result<Vec<_>, _>>()?;
        let keys = p.order.iter().map(|(x, _)| ev(x, &first, &aggv, env)).collect::<Result<Vec<_>, _>>()?;
        out.push((items, keys));
    }
    Ok(out)
}

/// ORDER BY: rows sorted by their keys (after a UNION, by the result columns ORDER BY names);
/// a long sort off the executor thread.
async fn sort(
    p: &SelectPlan,
    env: &Env<'_>,
    mut out: Vec<(Vec<Value>, Vec<Value>)>,
) -> Result<Vec<(Vec<Value>, Vec<Value>)>, SqlError> {
    if !p.unions.is_empty() {
        // ORDER BY after a union sorts by the result columns it names.
        for (items, keys) in out.iter_mut() {
            *keys =
                p.order.iter().map(|(x, _)| ev(x, items, &[], env)).collect::<Result<Vec<_>, _>>().unwrap_or_default();
        }
    }
    let dirs: Vec<bool> = p.order.iter().map(|(_, d)| *d).collect();
    if out.len() > SORT_OFF_THREAD_ROWS {
        // A long sort must not hold the executor thread (see `YIELD_EVERY_ROWS`).
        out = tokio::task::spawn_blocking(move || {
            sort_rows(&mut out, &dirs);
            out
        })
        .await
        .map_err(|e| SqlError::new(1105, "HY000", format!("sorting failed: {e}")))?;
    } else {
        sort_rows(&mut out, &dirs);
    }
    Ok(out)
}

/// Whether a joined table's access depends on no earlier table (its rows can be fetched once).
fn is_independent(src: &Src) -> bool {
    let below = |x: &X| {
        let mut ok = true;
        walk_cols(x, &mut |c| {
            if c < src.offset {
                ok = false
            }
        });
        ok
    };
    let access_ok = match &src.access {
        Access::Key(k) => k.iter().all(below),
        Access::Keys(ks) => ks.iter().flatten().all(below),
        Access::Index { ranges, .. } => ranges.iter().all(|r| {
            r.eq.iter().all(below)
                && r.lo.as_ref().is_none_or(|(x, _)| below(x))
                && r.hi.as_ref().is_none_or(|(x, _)| below(x))
        }),
        Access::Scan => true,
    };
    access_ok
        && src.push.iter().all(|p| match p {
            Push::Cmp(_, _, x) => below(x),
            Push::In(_, l) => l.iter().all(below),
            Push::IsNull(..) => true,
        })
}

fn walk_cols(x: &X, f: &mut dyn FnMut(usize)) {
    match x {
        X::Col(c) => f(*c),
        X::Un(_, a) | X::IsNull(a, _) | X::IsBool(a, _, _) | X::Cast(a, _) | X::InSub(a, _, _) => walk_cols(a, f),
        X::Bin(_, a, b) | X::Like(a, b, _) | X::DateAdd(a, b, _, _) => {
            walk_cols(a, f);
            walk_cols(b, f);
        }
        X::In(a, l, _) => {
            walk_cols(a, f);
            for v in l {
                walk_cols(v, f);
            }
        }
        X::Between(a, b, c, _) => {
            walk_cols(a, f);
            walk_cols(b, f);
            walk_cols(c, f);
        }
        X::Call(_, l) => {
            for v in l {
                walk_cols(v, f);
            }
        }
        X::Case(o, w, e) => {
            if let Some(o) = o {
                walk_cols(o, f);
            }
            for (a, b) in w {
                walk_cols(a, f);
                walk_cols(b, f);
            }
            if let Some(e) = e {
                walk_cols(e, f);
            }
        }
        _ => {}
    }
}

fn key_eq(a: &[Value], b: &[Value]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| eval::group_eq(x, y))
}

/// A hash key for grouping: numbers by their double value, strings by bytes.
fn group_hash(k: &[Value]) -> Vec<u8> {
    let mut out = Vec::new();
    for v in k {
        match v {
            Value::Null => out.push(0),
            Value::Bytes(b) => {
                out.push(1);
                out.extend_from_slice(&(b.len() as u32).to_le_bytes());
                out.extend_from_slice(b);
            }
            o => {
                out.push(2);
                out.extend_from_slice(&eval::to_f64(o).unwrap_or(0.0).to_bits().to_le_bytes());
            }
        }
    }
    out
}

/// Sorts result rows by their ORDER BY keys (`dirs`: descending per key).
fn sort_rows(out: &mut [(Vec<Value>, Vec<Value>)], dirs: &[bool]) {
    out.sort_by(|a, b| {
        for (k, desc) in dirs.iter().enumerate() {
            let (x, y) = (a.1.get(k), b.1.get(k));
            let o = match (x, y) {
                (Some(x), Some(y)) => eval::sort_cmp(x, y),
                _ => Ordering::Equal,
            };
            let o = if *desc { o.reverse() } else { o };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    });
}

async fn dedup(out: &mut Vec<(Vec<Value>, Vec<Value>)>) {
    let mut seen: std::collections::HashMap<Vec<u8>, Vec<usize>> = std::collections::HashMap::new();
    let mut kept: Vec<(Vec<Value>, Vec<Value>)> = Vec::with_capacity(out.len());
    let mut pace = Pace::default();
    let rows = std::mem::take(out);
    for r in rows {
        pace.row().await;
        let h = group_hash(&r.0);
        let dup = seen.get(&h).is_some_and(|c| c.iter().any(|&i| key_eq(&kept[i].0, &r.0)));
        if !dup {
            seen.entry(h).or_default().push(kept.len());
            kept.push(r);
        }
    }
    *out = kept;
}

/// A query aggregate's value from the merged slots of a pushed aggregation.
fn final_value(f: crate::plan::Final, slots: &[Value]) -> Value {
    use crate::plan::Final;
    let get = |i: usize| slots.get(i).cloned().unwrap_or(Value::Null);
    match f {
        Final::Slot(i) => get(i),
        Final::Avg(s, c) => match (get(s), get(c).as_i128().unwrap_or(0)) {
            (Value::Null, _) | (_, 0) => Value::Null,
            (s, n) => avg(s, n as i64),
        },
        Final::Var { slot, samp, sqrt } => {
            let n = get(slot).as_i128().unwrap_or(0) as i64;
            variance(n, get(slot + 2).as_f64().unwrap_or(0.0), samp, sqrt)
        }
    }
}

/// VAR_POP / VAR_SAMP / STDDEV_POP / STDDEV_SAMP from a count and the sum of squared
/// deviations (NULL without rows, or with one row for the sample forms, as MySQL).
fn variance(n: i64, m2: f64, samp: bool, sqrt: bool) -> Value {
    let d = if samp { n - 1 } else { n };
    if d <= 0 {
        return Value::Null;
    }
    let v = (m2 / d as f64).max(0.0);
    Value::Double(if sqrt { v.sqrt() } else { v })
}

/// Running state of one aggregate.
pub enum AggState {
    Count(i64),
    Sum(Option<Value>),
    Avg(Option<Value>, i64),
    MinMax(Option<Value>),
    Concat(Option<Vec<u8>>),
    Bits(u64),
    /// Count, mean, sum of squared deviations (MySQL's recurrence).
    Var(i64, f64, f64),
    Distinct(Vec<Value>),
}

impl AggState {
    fn new(a: &Agg) -> AggState {
        if a.distinct {
            return AggState::Distinct(Vec::new());
        }
        match a.func {
            AggFn::Count => AggState::Count(0),
            AggFn::Sum => AggState::Sum(None),
            AggFn::Avg => AggState::Avg(None, 0),
            AggFn::Min | AggFn::Max => AggState::MinMax(None),
            AggFn::GroupConcat => AggState::Concat(None),
            AggFn::BitAnd => AggState::Bits(u64::MAX),
            AggFn::BitOr | AggFn::BitXor => AggState::Bits(0),
            AggFn::StdPop | AggFn::StdSamp | AggFn::VarPop | AggFn::VarSamp => AggState::Var(0, 0.0, 0.0),
        }
    }

    fn add(&mut self, a: &Agg, v: Option<Value>) -> Result<(), SqlError> {
        let Some(v) = v else {
            if let AggState::Count(n) = self {
                *n += 1;
            }
            return Ok(());
        };
        if v.is_null() {
            return Ok(());
        }
        match self {
            AggState::Count(n) => *n += 1,
            AggState::Sum(s) => *s = Some(add_num(s.take(), &v)?),
            AggState::Avg(s, n) => {
                *s = Some(add_num(s.take(), &v)?);
                *n += 1;
            }
            AggState::MinMax(m) => {
                let better = match m {
                    None => true,
                    Some(cur) => {
                        let o = eval::compare(&v, cur).unwrap_or(Ordering::Equal);
                        (a.func == AggFn::Min && o == Ordering::Less)
                            || (a.func == AggFn::Max && o == Ordering::Greater)
                    }
                };
                if better {
                    *m = Some(v);
                }
            }
            AggState::Concat(c) => {
                let t = eval::text(&v).unwrap_or_default();
                match c {
                    None => *c = Some(t),
                    Some(b) => {
                        b.push(b',');
                        b.extend_from_slice(&t);
                        b.truncate(1024);
                    }
                }
            }
            AggState::Bits(b) => {
                let x = eval::to_i128(&v).unwrap_or(0) as u64;
                *b = match a.func {
                    AggFn::BitAnd => *b & x,
                    AggFn::BitOr => *b | x,
                    _ => *b ^ x,
                };
            }
            AggState::Var(n, mean, m2) => {
                let x = eval::to_f64(&v).unwrap_or(0.0);
                *n += 1;
                let new_mean = *mean + (x - *mean) / *n as f64;
                *m2 += (x - *mean) * (x - new_mean);
                *mean = new_mean;
            }
            AggState::Distinct(vals) => {
                if !vals.iter().any(|x| eval::group_eq(x, &v)) {
                    vals.push(v);
                }
            }
        }
        Ok(())
    }

    fn finish(self, a: &Agg) -> Value {
        match self {
            AggState::Count(n) => Value::Int(n),
            AggState::Sum(s) => s.map(sum_type).unwrap_or(Value::Null),
            AggState::Avg(s, n) => match s {
                None => Value::Null,
                Some(s) => avg(s, n),
            },
            AggState::MinMax(m) => m.unwrap_or(Value::Null),
            AggState::Concat(c) => c.map(Value::Bytes).unwrap_or(Value::Null),
            AggState::Bits(b) => Value::UInt(b),
            AggState::Var(n, _, m2) => {
                let (samp, sqrt) = a.func.variance().unwrap_or((false, false));
                variance(n, m2, samp, sqrt)
            }
            AggState::Distinct(vals) => {
                let mut st = AggState::new(&Agg { func: a.func, arg: None, distinct: false });
                let plain = Agg { func: a.func, arg: a.arg.clone(), distinct: false };
                for v in vals {
                    let _ = st.add(&plain, Some(v));
                }
                st.finish(&plain)
            }
        }
    }
}

/// SUM of integers is a DECIMAL in MySQL.
fn sum_type(v: Value) -> Value {
    match v {
        Value::Int(i) => Value::Decimal { v: i as i128, scale: 0 },
        Value::UInt(u) => Value::Decimal { v: u as i128, scale: 0 },
        o => o,
    }
}

fn add_num(acc: Option<Value>, v: &Value) -> Result<Value, SqlError> {
    let v = match v {
        Value::Int(i) => Value::Decimal { v: *i as i128, scale: 0 },
        Value::UInt(u) => Value::Decimal { v: *u as i128, scale: 0 },
        Value::Decimal { .. } | Value::Double(_) => v.clone(),
        Value::Float(f) => Value::Double(*f as f64),
        o => match eval::to_f64(o) {
            Some(f) if !matches!(o, Value::Bytes(_)) => Value::Decimal { v: f as i128, scale: 0 },
            _ => Value::Double(eval::to_f64(o).unwrap_or(0.0)),
        },
    };
    match acc {
        None => Ok(v),
        Some(a) => eval::arith(BinOp::Add, &a, &v),
    }
}

fn avg(sum: Value, n: i64) -> Value {
    match sum {
        Value::Decimal { v, scale } => {
            let s2 = (scale + 4).min(30);
            let num = v * 10i128.pow((s2 - scale) as u32 + 1) / n as i128;
            let r = if num >= 0 { (num + 5) / 10 } else { (num - 5) / 10 };
            Value::Decimal { v: r, scale: s2 }
        }
        o => Value::Double(eval::to_f64(&o).unwrap_or(0.0) / n as f64),
    }
}

/// Column updates for a changed row: new values for the columns that differ.
pub fn updates_for(old: &[Value], new: &[Value]) -> Vec<ColumnUpdate> {
    old.iter()
        .zip(new)
        .enumerate()
        .filter(|(_, (o, n))| o != n)
        .map(|(c, (_, n))| ColumnUpdate { col: c as u16, expr: UpdateExpr::Set(n.clone()) })
        .collect()
}

/// Whether an assignment can be applied blind (no read): a constant, or `col = col ± constant`
/// on an integer or decimal column.
pub fn blind_update(h: &TableHandle, col: u16, x: &X, env: &Env) -> Result<Option<UpdateExpr>, SqlError> {
    let ty = h.table.columns[col as usize].ty;
    let constant = |x: &X| {
        !matches!(x, X::Col(_)) && {
            let mut ok = true;
            walk_cols(x, &mut |_| ok = false);
            ok && !matches!(x, X::Call(..) | X::NewCol(_) | X::Sub(_) | X::InSub(..) | X::Exists(..))
        }
    };
    if constant(x) {
        let v = ev(x, &[], &[], env)?;
        return Ok(Some(UpdateExpr::Set(v)));
    }
    if let X::Bin(op @ (BinOp::Add | BinOp::Sub), a, b) = x
        && matches!(**a, X::Col(c) if c == col as usize)
        && constant(b)
        && (ty.is_integer() || matches!(ty, tern_types::ColumnType::Decimal { .. }))
        && !h.table.is_key_column(col as usize)
    {
        let d = ev(b, &[], &[], env)?;
        let d = match (op, eval::to_i128(&d)) {
            (_, _) if d.is_null() => return Ok(None),
            (BinOp::Add, Some(i)) if matches!(d, Value::Int(_) | Value::UInt(_)) => Value::Int(i as i64),
            (BinOp::Sub, Some(i)) if matches!(d, Value::Int(_) | Value::UInt(_)) => Value::Int(-(i as i64)),
            _ => return Ok(None),
        };
        return Ok(Some(UpdateExpr::Add(d)));
    }
    Ok(None)
}

/// `CmpOp` for tests.
pub fn _cmp(_: CmpOp) {}

/// OpKind marker used by the server for key-level writes.
pub fn is_write(k: OpKind) -> bool {
    !matches!(k, OpKind::Read | OpKind::ReadShared | OpKind::ReadExclusive)
}
