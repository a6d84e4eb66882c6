//! The REST operations after parsing (`request`): the schema checks, translation to batched key
//! operations on the native client, and RonDB's response shapes (interfaces.md §1.1–1.4).
//! A batch is one transaction of batched key operations: one round trip to the data node.

use crate::error::RestError;
use crate::json::{parse_value, push_json_str, push_value};
use crate::request::{ReadSpec, WriteKind, WriteSpec};
use serde_json::Value as Json;
use std::time::Instant;
use tern_client::{AbortOption, Client, ColumnUpdate, Exec, KeyOp, OpKind, OpResult, TableHandle, UpdateExpr, Value};

/// Catalog refreshes caused by unknown tables, one at a time: concurrent misses share one
/// refresh, and a miss observed before a refresh started needs none of its own. The catalog is
/// then never older than the request, and a burst of requests for unknown tables costs one
/// round trip per refresh, not one each.
#[derive(Default)]
pub struct MissRefresh {
    last_start: tokio::sync::Mutex<Option<Instant>>,
}

impl MissRefresh {
    /// Before the (synchronous) schema checks of a request: if it names a table the cached
    /// catalog does not know, refresh the catalog once (awaited; concurrent requests share one
    /// refresh that started after they arrived).
    /// A data node that cannot be asked fails the request (as any data-node error).
    pub async fn ensure_known<'a>(
        &self,
        client: &Client,
        mut names: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Result<(), RestError> {
        // (Consecutive operations of a batch mostly name the same table: asked once.)
        let mut last: Option<(&str, &str)> = None;
        if names.all(|n| last.replace(n) == Some(n) || client.cached_table(n.0, n.1).is_some()) {
            return Ok(());
        }
        let seen = Instant::now();
        let mut last = self.last_start.lock().await;
        if last.is_some_and(|t| t >= seen) {
            return Ok(());
        }
        *last = Some(Instant::now());
        client.refresh_catalog_async().await.map(|_| ()).map_err(RestError::from)
    }
}

/// The table a request's previous operation named (consecutive operations of a batch mostly
/// name the same one): asked of the client's cache only when the name changes, in constant time
/// per operation whatever the batch holds.
#[derive(Default)]
pub struct Tables(Option<(String, String, TableHandle)>);

impl Tables {
    fn get(&mut self, client: &Client, db: &str, name: &str) -> Option<TableHandle> {
        if let Some((d, n, h)) = &self.0
            && d == db
            && n == name
        {
            return Some(h.clone());
        }
        let h = client.cached_table(db, name)?;
        self.0 = Some((db.to_string(), name.to_string(), h.clone()));
        Some(h)
    }
}

/// The table, or RonDB's 404. Hidden index tables are not reachable.
pub fn table(client: &Client, tables: &mut Tables, db: &str, name: &str) -> Result<TableHandle, RestError> {
    let missing = || RestError::not_found(format!("Database/Table does not exist. Database: {db} Table: {name}"));
    // Hidden index tables and Tern's own database are not reachable through REST.
    if name.starts_with('$') || db == crate::apikey::KEY_DB {
        return Err(missing());
    }
    // (A table created since the catalog was read: the caller refreshed it first, see
    // `MissRefresh::ensure_known`.)
    tables.get(client, db, name).ok_or_else(missing)
}

/// Encodes the primary key from filters (steps 11 and 13).
fn key_from_filters(t: &TableHandle, filters: &[(String, Json)]) -> Result<Vec<Value>, RestError> {
    let pk = &t.table.primary_key;
    if filters.len() != pk.len() {
        return Err(RestError::bad_request(format!(
            "Wrong number of primary-key columns. Expecting: {} Got: {}",
            pk.len(),
            filters.len()
        )));
    }
    let mut key = vec![Value::Null; pk.len()];
    for (name, _) in filters {
        let pos = t.table.column_index(name).and_then(|c| pk.iter().position(|&k| k as usize == c));
        if pos.is_none() {
            return Err(RestError::bad_request(format!("Wrong primary-key column. Column: {name}")));
        }
    }
    for (name, v) in filters {
        let c = t.table.column_index(name).expect("checked");
        let pos = pk.iter().position(|&k| k as usize == c).expect("checked");
        key[pos] = parse_value(&t.table.columns[c], v, true)?;
    }
    Ok(key)
}

/// A resolved read: the operation and the columns it returns.
pub struct ReadOp {
    pub op: KeyOp,
    pub columns: Vec<u16>,
    pub operation_id: Option<String>,
    pub table: TableHandle,
}

/// Steps 10–13: schema checks, then the key operation.
pub fn resolve_read(client: &Client, tables: &mut Tables, spec: ReadSpec) -> Result<ReadOp, RestError> {
    let t = table(client, tables, &spec.db, &spec.table)?;
    let key = key_from_filters(&t, &spec.filters)?;
    let columns: Vec<u16> = match &spec.read_columns {
        None => (0..t.table.columns.len() as u16)
            .filter(|&c| !t.table.is_key_column(c as usize) && !t.table.columns[c as usize].hidden)
            .collect(),
        Some(names) => {
            let mut cols = Vec::with_capacity(names.len());
            for n in names {
                match t.table.column_index(n) {
                    Some(c) if !t.table.is_key_column(c) && !t.table.columns[c].hidden => cols.push(c as u16),
                    Some(_) => {
                        return Err(RestError::bad_request(format!(
                            "Column does not exist. Column: {n} (primary-key columns are not read columns)"
                        )));
                    }
                    None => return Err(RestError::bad_request(format!("Column does not exist. Column: {n}"))),
                }
            }
            cols
        }
    };
    let op = t.read_columns_owned(key, &columns).map_err(|e| RestError::bad_request(e.message))?;
    Ok(ReadOp { op, columns, operation_id: spec.operation_id, table: t })
}

fn push_operation_id(out: &mut String, id: &Option<String>) {
    out.push_str("\"operationId\":");
    push_json_str(out, id.as_deref().unwrap_or(""));
}

/// `{"operationId": ..., "data": {...}}` for a found row.
pub fn read_body(r: &ReadOp, bytes: &[u8], out: &mut String) -> Result<(), RestError> {
    let values = r.table.decode_projection(&r.columns, bytes).map_err(RestError::from)?;
    out.push('{');
    push_operation_id(out, &r.operation_id);
    out.push_str(",\"data\":{");
    for (i, (&c, v)) in r.columns.iter().zip(&values).enumerate() {
        if i > 0 {
            out.push(',');
        }
        let col = &r.table.table.columns[c as usize];
        push_json_str(out, &col.name);
        out.push(':');
        push_value(out, col.ty, v);
    }
    out.push_str("}}");
    Ok(())
}

/// One sub-operation of a batch: its outcome before or after execution.
pub enum SubOp {
    Failed(RestError, Option<String>),
    Read(ReadOp),
    Write { op: KeyOp, operation_id: Option<String> },
}

impl SubOp {
    fn operation_id(&self) -> &Option<String> {
        match self {
            SubOp::Failed(_, id) => id,
            SubOp::Read(r) => &r.operation_id,
            SubOp::Write { operation_id, .. } => operation_id,
        }
    }
}

/// Decodes %XX escapes of a path segment (UTF-8).
pub fn percent_decode(s: &str) -> Result<String, RestError> {
    if !s.contains('%') {
        return Ok(s.to_string());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let v = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match v {
                Some(v) => {
                    out.push(v);
                    i += 3;
                    continue;
                }
                None => return Err(RestError::bad_request("identifier carries an invalid character")),
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).map_err(|_| RestError::bad_request("identifier carries an invalid character"))
}

/// Builds the write operation of a batchwrite / batchdelete sub-operation; schema-dependent
/// problems fail only this sub-operation.
pub fn resolve_write(client: &Client, tables: &mut Tables, spec: WriteSpec) -> SubOp {
    match build_write(client, tables, &spec) {
        Ok(op) => SubOp::Write { op, operation_id: spec.operation_id },
        Err(e) => SubOp::Failed(e, spec.operation_id),
    }
}

fn build_write(client: &Client, tables: &mut Tables, spec: &WriteSpec) -> Result<KeyOp, RestError> {
    let t = table(client, tables, &spec.db, &spec.table)?;
    let key = key_from_filters(&t, &spec.filters)?;
    let mut set = Vec::with_capacity(spec.writes.len());
    for (c, v) in &spec.writes {
        let Some(ci) = t.table.column_index(c) else {
            return Err(RestError::bad_request(format!("Column does not exist. Column: {c}")));
        };
        if t.table.is_key_column(ci) {
            return Err(RestError::bad_request(format!("Column {c} is a primary-key column: give it in filters")));
        }
        set.push((ci, parse_value(&t.table.columns[ci], v, false)?));
    }
    let e = |e: tern_client::TernError| RestError::bad_request(e.message);
    match spec.kind {
        WriteKind::Delete => t.delete(&key).map_err(e),
        WriteKind::Update => t
            .update(
                &key,
                set.into_iter().map(|(c, v)| ColumnUpdate { col: c as u16, expr: UpdateExpr::Set(v) }).collect(),
            )
            .map_err(e),
        WriteKind::Write | WriteKind::Insert => {
            let mut named: Vec<(&str, Value)> = Vec::with_capacity(key.len() + set.len());
            for (i, &k) in t.table.primary_key.iter().enumerate() {
                named.push((&t.table.columns[k as usize].name, key[i].clone()));
            }
            for (c, v) in &set {
                named.push((&t.table.columns[*c].name, v.clone()));
            }
            let mut values = t.values_named(&named).map_err(e)?;
            client.fill_generated(&t, &mut values).map_err(RestError::from)?;
            if spec.kind == WriteKind::Insert { t.insert(&values) } else { t.write(&values) }.map_err(e)
        }
    }
}

/// Runs the executable sub-operations as one transaction and renders `{"result": [...]}`.
pub async fn run_batch(client: &Client, mut subs: Vec<SubOp>, out: &mut String) -> Result<(), RestError> {
    let mut ops = Vec::with_capacity(subs.len());
    let mut slot = Vec::with_capacity(subs.len());
    let placeholder = || KeyOp::read(0, Vec::new());
    for s in &mut subs {
        match s {
            SubOp::Failed(..) => slot.push(None),
            SubOp::Read(r) => {
                slot.push(Some(ops.len()));
                ops.push(std::mem::replace(&mut r.op, placeholder()));
            }
            SubOp::Write { op, .. } => {
                slot.push(Some(ops.len()));
                ops.push(std::mem::replace(op, placeholder()));
            }
        }
    }
    let writes = ops.iter().any(|o| o.kind != OpKind::Read);
    let results = if ops.is_empty() {
        Vec::new()
    } else {
        let mut txn = client.begin();
        match txn.execute_with(ops, Exec::Commit, AbortOption::IgnoreError).await {
            Ok(r) => r,
            Err(e) if writes && !e.is_temporary() => {
                // The transaction as a whole failed (e.g. a unique key): every write says why.
                let err = RestError::from(e);
                return render(&subs, &slot, &[], Some(&err), out);
            }
            Err(e) => return Err(RestError::from(e)),
        }
    };
    render(&subs, &slot, &results, None, out)
}

/// A failed sub-operation: its status, a message (never null or empty) and its operationId.
fn push_failed(out: &mut String, status: u16, message: &str, id: &Option<String>) {
    use std::fmt::Write;
    let _ = write!(out, "{{\"code\":{status},\"message\":");
    let fallback = hyper::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Error");
    push_json_str(out, if message.is_empty() { fallback } else { message });
    out.push_str(",\"body\":{");
    push_operation_id(out, id);
    out.push_str("}}");
}

fn render(
    subs: &[SubOp],
    slot: &[Option<usize>],
    results: &[OpResult],
    all_failed: Option<&RestError>,
    out: &mut String,
) -> Result<(), RestError> {
    out.push_str("{\"result\":[");
    for (i, s) in subs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let id = s.operation_id();
        if let SubOp::Failed(e, _) = s {
            push_failed(out, e.status, &e.message, id);
            continue;
        }
        if let Some(e) = all_failed {
            push_failed(out, e.status, &e.message, id);
            continue;
        }
        match (s, slot[i].and_then(|k| results.get(k))) {
            (SubOp::Read(read), Some(OpResult::Row(bytes))) => {
                out.push_str("{\"code\":200,\"body\":");
                read_body(read, bytes, out)?;
                out.push('}');
            }
            (_, Some(OpResult::NotFound)) => push_failed(out, 404, "Not Found", id),
            (_, Some(OpResult::Error(e))) => {
                let e = RestError::from(e.clone());
                push_failed(out, e.status, &e.message, id)
            }
            _ => {
                out.push_str("{\"code\":200,\"body\":{");
                push_operation_id(out, id);
                out.push_str("}}");
            }
        }
    }
    out.push_str("]}");
    Ok(())
}
