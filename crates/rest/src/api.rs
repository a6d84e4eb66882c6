//! The REST operations: request validation in RonDB's order, translation to batched key
//! operations on the native client, and RonDB's response shapes (interfaces.md §1.1–1.4).
//! A batch is one transaction of batched key operations: one round trip to the data node.

use crate::config::RestOptions;
use crate::error::RestError;
use crate::json::{parse_value, push_json_str, push_value};
use serde::Deserialize;
use serde_json::Value as Json;
use serde_json::value::RawValue;
use std::borrow::Cow;
use tern_client::{AbortOption, Client, ColumnUpdate, Exec, KeyOp, OpKind, OpResult, TableHandle, UpdateExpr, Value};
use tern_types::schema::IDENT_MAX_BYTES;

/// A validated pk-read body (steps that need no schema).
pub struct ReadSpec {
    pub db: String,
    pub table: String,
    pub operation_id: Option<String>,
    pub filters: Vec<(String, Json)>,
    pub read_columns: Option<Vec<String>>,
}

fn field_failed(field: &str, tag: &str) -> RestError {
    RestError::bad_request(format!("Error: Field validation for '{field}' failed on the '{tag}' tag"))
}

/// Checks a db, table or column identifier: length errors name the field, bad characters not.
fn check_ident(field: &str, s: &str) -> Result<(), RestError> {
    if s.is_empty() {
        return Err(field_failed(field, if field == "Column" { "required" } else { "min" }));
    }
    // As in RonDB's REST server: the request's field validation counts characters, the
    // identifier check after it counts bytes (64 multi-byte characters pass the first only).
    if s.chars().count() > IDENT_MAX_BYTES {
        return Err(field_failed(field, "max"));
    }
    if s.len() > IDENT_MAX_BYTES {
        return Err(RestError::bad_request("identifier is too large"));
    }
    if s.chars().any(|c| c == '\0' || c as u32 > 0xFFFF) {
        return Err(RestError::bad_request("identifier carries an invalid character"));
    }
    Ok(())
}

fn operation_id(body: &serde_json::Map<String, Json>, opts: &RestOptions) -> Result<Option<String>, RestError> {
    match body.get("operationId") {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) if s.chars().count() <= opts.operation_id_max_size => Ok(Some(s.clone())),
        Some(_) => Err(RestError::bad_request("operationId is invalid")),
    }
}

/// Parses `[{"column": ..., "value": ...}]` lists (filters, writeColumns).
fn column_values(list: &[Json]) -> Result<Vec<(String, Json)>, RestError> {
    let mut out = Vec::with_capacity(list.len());
    for f in list {
        let Some(o) = f.as_object() else { return Err(field_failed("Column", "required")) };
        let column = match o.get("column") {
            Some(Json::String(c)) => c.clone(),
            _ => return Err(field_failed("Column", "required")),
        };
        check_ident("Column", &column)?;
        let value = match o.get("value") {
            None | Some(Json::Null) => return Err(field_failed("Value", "required")),
            Some(v) => v.clone(),
        };
        out.push((column, value));
    }
    Ok(out)
}

fn body_object(body: &Json) -> Result<&serde_json::Map<String, Json>, RestError> {
    body.as_object().ok_or_else(|| RestError::bad_request("Error: the request body must be a JSON object"))
}

/// `{"column": ..., "value": ...}` as sent (borrowed from the request body).
#[derive(Deserialize)]
pub struct ColValIn<'a> {
    #[serde(borrow, default)]
    column: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    value: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub struct ReadColIn<'a> {
    #[serde(borrow, default)]
    column: Option<Cow<'a, str>>,
    #[serde(rename = "dataReturnType", borrow, default)]
    data_return_type: Option<Cow<'a, str>>,
}

/// A pk-read body as sent (borrowed from the request body; values stay raw until their column's
/// type is known).
#[derive(Deserialize)]
pub struct PkReadIn<'a> {
    #[serde(borrow, default)]
    filters: Option<Vec<ColValIn<'a>>>,
    #[serde(rename = "readColumns", borrow, default)]
    read_columns: Option<Vec<ReadColIn<'a>>>,
    #[serde(rename = "operationId", borrow, default)]
    operation_id: Option<&'a RawValue>,
}

fn not_json(e: serde_json::Error) -> RestError {
    RestError::bad_request(format!("Error: the request body is not valid JSON: {e}"))
}

pub fn parse_read_body(raw: &str) -> Result<PkReadIn<'_>, RestError> {
    serde_json::from_str(raw).map_err(not_json)
}

fn operation_id_raw(raw: Option<&RawValue>, opts: &RestOptions) -> Result<Option<String>, RestError> {
    match raw {
        None => Ok(None),
        Some(r) if r.get().starts_with('"') => match serde_json::from_str::<String>(r.get()) {
            Ok(s) if s.chars().count() <= opts.operation_id_max_size => Ok(Some(s)),
            _ => Err(RestError::bad_request("operationId is invalid")),
        },
        Some(_) => Err(RestError::bad_request("operationId is invalid")),
    }
}

fn filters_typed(list: &[ColValIn<'_>]) -> Result<Vec<(String, Json)>, RestError> {
    let mut out = Vec::with_capacity(list.len());
    for f in list {
        let Some(column) = &f.column else { return Err(field_failed("Column", "required")) };
        check_ident("Column", column)?;
        let Some(value) = f.value else { return Err(field_failed("Value", "required")) };
        let v: Json = serde_json::from_str(value.get()).map_err(not_json)?;
        out.push((column.to_string(), v));
    }
    for (i, (c, _)) in out.iter().enumerate() {
        if out[..i].iter().any(|(o, _)| o == c) {
            return Err(RestError::bad_request("Error: field validation for filter failed on the 'unique' tag"));
        }
    }
    Ok(out)
}

/// Steps 1–9 of pk-read validation (no schema needed).
pub fn validate_read(db: &str, table: &str, body: &PkReadIn<'_>, opts: &RestOptions) -> Result<ReadSpec, RestError> {
    check_ident("DB", db)?;
    check_ident("Table", table)?;
    let operation_id = operation_id_raw(body.operation_id, opts)?;
    let filters = match &body.filters {
        Some(f) if !f.is_empty() => filters_typed(f)?,
        _ => return Err(RestError::bad_request("Error: Field validation for 'Filters' failed on the 'min' tag")),
    };
    let read_columns = match &body.read_columns {
        None => None,
        Some(list) => {
            let mut cols: Vec<String> = Vec::with_capacity(list.len());
            for rc in list {
                let Some(column) = &rc.column else { return Err(field_failed("Column", "required")) };
                check_ident("Column", column)?;
                match rc.data_return_type.as_deref() {
                    None | Some("default") => {}
                    Some(_) => return Err(RestError::new(500, "Data return type is not supported.")),
                }
                cols.push(column.to_string());
            }
            Some(cols)
        }
    };
    if let Some(cols) = &read_columns {
        if cols.iter().any(|c| filters.iter().any(|(f, _)| f == c)) {
            return Err(RestError::bad_request("Error: field validation for read columns failed"));
        }
        for (i, c) in cols.iter().enumerate() {
            if cols[..i].contains(c) {
                return Err(RestError::bad_request(
                    "Error: field validation for 'ReadColumns' failed on the 'unique' tag",
                ));
            }
        }
    }
    Ok(ReadSpec { db: db.to_string(), table: table.to_string(), operation_id, filters, read_columns })
}

/// The table, or RonDB's 404. Hidden index tables are not reachable.
pub fn table(client: &Client, db: &str, name: &str) -> Result<TableHandle, RestError> {
    let missing = || RestError::not_found(format!("Database/Table does not exist. Database: {db} Table: {name}"));
    // Hidden index tables and Tern's own database are not reachable through REST.
    if name.starts_with('$') || db == crate::apikey::KEY_DB {
        return Err(missing());
    }
    if let Some(t) = client.cached_table(db, name) {
        return Ok(t);
    }
    // Maybe created since the catalog was read: look again, off the async workers.
    tokio::task::block_in_place(|| client.refresh_catalog()).map_err(RestError::from)?;
    client.cached_table(db, name).ok_or_else(missing)
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
pub fn resolve_read(client: &Client, spec: ReadSpec) -> Result<ReadOp, RestError> {
    let t = table(client, &spec.db, &spec.table)?;
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
    let op = t.read_columns(&key, &columns).map_err(|e| RestError::bad_request(e.message))?;
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

#[derive(Deserialize)]
struct OpIn<'a> {
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
    #[serde(rename = "relative-url", borrow, default)]
    url: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    body: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct EnvelopeIn<'a> {
    #[serde(borrow, default)]
    operations: Option<Vec<OpIn<'a>>>,
}

/// One sub-operation of a batch envelope: database, table, operation and its raw body.
pub type EnvelopeOp<'a> = (String, String, String, &'a RawValue);

/// Parses a batch envelope: the operations with method, relative URL and body.
pub fn parse_envelope<'a>(raw: &'a str, opts: &RestOptions) -> Result<Vec<EnvelopeOp<'a>>, RestError> {
    let env: EnvelopeIn<'a> = serde_json::from_str(raw).map_err(not_json)?;
    let Some(ops) = env.operations else {
        return Err(RestError::bad_request("Error: Field validation for 'Operations' failed on the 'required' tag"));
    };
    if ops.len() > opts.batch_max_size {
        return Err(RestError::bad_request(format!(
            "Batch size exceeds maximum allowed size: {}",
            opts.batch_max_size
        )));
    }
    let mut out = Vec::with_capacity(ops.len());
    for op in ops {
        match op.method.as_deref() {
            Some("POST") => {}
            Some(_) => return Err(field_failed("Method", "oneof")),
            None => {
                return Err(RestError::bad_request(
                    "Error: Field validation for 'Method' failed on the 'required' tag",
                ));
            }
        }
        let url = match &op.url {
            Some(u) if !u.is_empty() => u.trim_start_matches('/'),
            _ => {
                return Err(RestError::bad_request(
                    "Error: Field validation for 'RelativeURL' failed on the 'required' tag",
                ));
            }
        };
        let parts: Vec<&str> = url.split('/').collect();
        if parts.len() != 3 {
            return Err(RestError::bad_request(format!(
                "Error: Field validation for 'RelativeURL' failed: '{url}' is not db/table/operation"
            )));
        }
        let (db, table, kind) = (percent_decode(parts[0])?, percent_decode(parts[1])?, parts[2].to_string());
        let body = match op.body {
            Some(b) if b.get().starts_with('{') => b,
            _ => return Err(RestError::bad_request("Error: Field validation for 'Body' failed on the 'required' tag")),
        };
        out.push((db, table, kind, body));
    }
    Ok(out)
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

/// Builds the write operation of a batchwrite / batchdelete sub-operation.
pub fn resolve_write(
    client: &Client,
    db: &str,
    name: &str,
    kind: &str,
    body: &Json,
    opts: &RestOptions,
) -> Result<SubOp, RestError> {
    check_ident("DB", db)?;
    check_ident("Table", name)?;
    let b = body_object(body)?;
    let operation_id = operation_id(b, opts)?;
    let filters = match b.get("filters") {
        Some(Json::Array(a)) if !a.is_empty() => column_values(a)?,
        _ => return Err(RestError::bad_request("Error: Field validation for 'Filters' failed on the 'min' tag")),
    };
    for (i, (c, _)) in filters.iter().enumerate() {
        if filters[..i].iter().any(|(o, _)| o == c) {
            return Err(RestError::bad_request("Error: field validation for filter failed on the 'unique' tag"));
        }
    }
    let writes = match (kind, b.get("writeColumns")) {
        ("pk-delete", _) => Vec::new(),
        (_, Some(Json::Array(a))) => {
            let mut out = Vec::with_capacity(a.len());
            for w in a {
                let Some(o) = w.as_object() else { return Err(field_failed("Column", "required")) };
                let column = match o.get("column") {
                    Some(Json::String(c)) => c.clone(),
                    _ => return Err(field_failed("Column", "required")),
                };
                check_ident("Column", &column)?;
                out.push((column, o.get("value").cloned().unwrap_or(Json::Null)));
            }
            out
        }
        (_, None | Some(Json::Null)) => Vec::new(),
        _ => return Err(field_failed("WriteColumns", "required")),
    };
    // Schema-dependent checks fail only this sub-operation.
    let build = || -> Result<KeyOp, RestError> {
        let t = table(client, db, name)?;
        let key = key_from_filters(&t, &filters)?;
        let mut set = Vec::with_capacity(writes.len());
        for (c, v) in &writes {
            let Some(ci) = t.table.column_index(c) else {
                return Err(RestError::bad_request(format!("Column does not exist. Column: {c}")));
            };
            if t.table.is_key_column(ci) {
                return Err(RestError::bad_request(format!("Column {c} is a primary-key column: give it in filters")));
            }
            set.push((ci, parse_value(&t.table.columns[ci], v, false)?));
        }
        let e = |e: tern_client::TernError| RestError::bad_request(e.message);
        match kind {
            "pk-delete" => t.delete(&key).map_err(e),
            "pk-update" => t
                .update(
                    &key,
                    set.into_iter().map(|(c, v)| ColumnUpdate { col: c as u16, expr: UpdateExpr::Set(v) }).collect(),
                )
                .map_err(e),
            "pk-write" | "pk-insert" => {
                let mut named: Vec<(&str, Value)> = Vec::new();
                for (i, &k) in t.table.primary_key.iter().enumerate() {
                    named.push((&t.table.columns[k as usize].name, key[i].clone()));
                }
                for (c, v) in &set {
                    named.push((&t.table.columns[*c].name, v.clone()));
                }
                let mut values = t.values_named(&named).map_err(e)?;
                client.fill_generated(&t, &mut values).map_err(RestError::from)?;
                if kind == "pk-insert" { t.insert(&values) } else { t.write(&values) }.map_err(e)
            }
            other => Err(RestError::bad_request(format!(
                "Error: Field validation for 'RelativeURL' failed: unknown operation '{other}'"
            ))),
        }
    };
    match build() {
        Ok(op) => Ok(SubOp::Write { op, operation_id }),
        Err(e) => Ok(SubOp::Failed(e, operation_id)),
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
        let failed = |e: &RestError, out: &mut String| {
            out.push_str(&format!("{{\"code\":{},\"body\":{{", e.status));
            push_operation_id(out, s.operation_id());
            out.push_str(",\"message\":");
            push_json_str(out, &e.message);
            out.push_str("}}");
        };
        if let SubOp::Failed(e, _) = s {
            failed(e, out);
            continue;
        }
        if let Some(e) = all_failed {
            failed(e, out);
            continue;
        }
        let r = slot[i].and_then(|k| results.get(k));
        match (s, r) {
            (SubOp::Read(read), Some(OpResult::Row(bytes))) => {
                out.push_str("{\"code\":200,\"body\":");
                read_body(read, bytes, out)?;
                out.push('}');
            }
            (_, Some(OpResult::NotFound)) => {
                out.push_str("{\"code\":404,\"body\":{");
                push_operation_id(out, s.operation_id());
                out.push_str("}}");
            }
            (_, Some(OpResult::Error(e))) => failed(&RestError::from(e.clone()), out),
            _ => {
                out.push_str("{\"code\":200,\"body\":{");
                push_operation_id(out, s.operation_id());
                out.push_str("}}");
            }
        }
    }
    out.push_str("]}");
    Ok(())
}
