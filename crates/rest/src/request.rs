//! Request bodies of the data endpoints, parsed and validated in the order of RonDB's REST server
//! (rdrs2) and with its error texts, so clients that match texts see the same thing:
//!
//! 1. parsing (`logicalclocks/rondb`, `storage/ndb/rest-server2/server/src/json_parser.cpp`:
//!    `pk_parse`, `batch_parse`, `extract_db_and_table`): missing / null / empty sections, the
//!    sub-operation envelope and the relative URL;
//! 2. validation (`pk_data_structs.cpp`: `validate_db`, `validate_table`, `validate_column`,
//!    `validate_operation_id`, `PKReadParams::validate_columns`): identifiers (at most 64 *bytes*,
//!    code points U+0001..U+FFFF), operationId length, duplicate and overlapping columns.
//!
//! Schema-dependent checks (table exists, key columns, value types) come after, in `api`.
//! Where rdrs2 answers with a simdjson error code, the text is simdjson's message for that code.
//!
//! Every parse is bounded: values are borrowed as `RawValue` (serde_json skips them iteratively)
//! and filter values are parsed with serde_json's recursion limit on.

mod fast;

use crate::config::RestOptions;
use crate::error::RestError;
use serde::{Deserialize, Deserializer};
use serde_json::Value as Json;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashSet;
use tern_types::schema::IDENT_MAX_BYTES;

/// simdjson's message for INCORRECT_TYPE (a section of the wrong JSON type).
pub const INCORRECT_TYPE: &str = "The JSON element does not have the requested type.";
/// simdjson's message for NO_SUCH_FIELD (pk-read without `filters`).
pub const NO_SUCH_FIELD: &str = "The JSON field referenced does not exist in this object.";
pub const NO_OPERATIONS: &str = "No operations defined";
pub const METHOD_POST: &str = "the Method section should be POST";
pub const RELATIVE_URL_REQUIRED: &str = "the relativeUrl section is required";
pub const RELATIVE_URL_FAILED: &str = "Field validation for 'RelativeURL' failed";
pub const BODY_FAILED: &str = "Field validation for 'Body' failed";
/// batchwrite sub-operations name their allowed operations (rdrs2's batchwrite tests match
/// "pk-write, pk-update, or pk-insert").
pub const WRITE_URL_FAILED: &str =
    "Field validation for 'RelativeURL' failed. Expecting pk-write, pk-update, or pk-insert";

/// A JSON object member: absent, `null`, or a raw value.
#[derive(Clone, Copy)]
enum Field<'a> {
    Missing,
    Null,
    Present(&'a RawValue),
}

impl<'a> Field<'a> {
    fn of(raw: Option<&'a RawValue>) -> Field<'a> {
        match raw {
            None => Field::Missing,
            Some(r) if r.get() == "null" => Field::Null,
            Some(r) => Field::Present(r),
        }
    }
}

/// Keeps a member that is present, even as `null` (serde maps `null` to `None` for `Option`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

#[derive(Deserialize)]
struct PkReadRaw<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    filters: Option<&'a RawValue>,
    #[serde(rename = "readColumns", borrow, default, deserialize_with = "present")]
    read_columns: Option<&'a RawValue>,
    #[serde(rename = "operationId", borrow, default, deserialize_with = "present")]
    operation_id: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct WriteRaw<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    filters: Option<&'a RawValue>,
    #[serde(rename = "writeColumns", borrow, default, deserialize_with = "present")]
    write_columns: Option<&'a RawValue>,
    #[serde(rename = "operationId", borrow, default, deserialize_with = "present")]
    operation_id: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ColumnRaw<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    column: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    value: Option<&'a RawValue>,
    #[serde(rename = "dataReturnType", borrow, default, deserialize_with = "present")]
    data_return_type: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct EnvelopeRaw<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    operations: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct OpRaw<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(rename = "relative-url", borrow, default, deserialize_with = "present")]
    url: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    body: Option<&'a RawValue>,
}

fn bad(msg: impl Into<String>) -> RestError {
    RestError::bad_request(msg)
}

/// The request body is not JSON at all.
pub fn not_json(e: serde_json::Error) -> RestError {
    bad(format!("Error: the request body is not valid JSON: {e}"))
}

/// Parses the whole body as one JSON object of shape `T` (syntax errors name the position).
fn top_object<'a, T: Deserialize<'a>>(raw: &'a str) -> Result<T, RestError> {
    let first = raw.trim_start().as_bytes().first().copied();
    match serde_json::from_str::<T>(raw) {
        Ok(v) => Ok(v),
        Err(e) if e.is_data() && first != Some(b'{') => Err(bad(INCORRECT_TYPE)),
        Err(e) => Err(not_json(e)),
    }
}

/// A nested object of shape `T` (already known to be valid JSON).
fn object<'a, T: Deserialize<'a>>(raw: &'a RawValue) -> Result<T, RestError> {
    if !raw.get().starts_with('{') {
        return Err(bad(INCORRECT_TYPE));
    }
    serde_json::from_str(raw.get()).map_err(|e| bad(e.to_string()))
}

fn array(raw: &RawValue) -> Result<Vec<&RawValue>, RestError> {
    if !raw.get().starts_with('[') {
        return Err(bad(INCORRECT_TYPE));
    }
    serde_json::from_str(raw.get()).map_err(|e| bad(e.to_string()))
}

fn string(raw: &RawValue) -> Result<Cow<'_, str>, RestError> {
    if !raw.get().starts_with('"') {
        return Err(bad(INCORRECT_TYPE));
    }
    serde_json::from_str(raw.get()).map_err(|e| bad(e.to_string()))
}

/// The texts for a missing, null or empty `filters` section; they differ between endpoints.
struct FilterTexts {
    missing: &'static str,
    null: &'static str,
    empty: &'static str,
}

const PK_READ_FILTERS: FilterTexts =
    FilterTexts { missing: NO_SUCH_FIELD, null: "the Field section is null", empty: "the Field section is empty" };
const BATCH_FILTERS: FilterTexts = FilterTexts {
    missing: "the Field section is empty",
    null: "the Field section is null",
    empty: "the Field section is empty",
};
const WRITE_FILTERS: FilterTexts = FilterTexts {
    missing: "the filters section is null",
    null: "the filters section is null",
    empty: "the filters section is empty",
};

/// `filters`: `[{"column": name, "value": v}]`, values parsed (recursion-limited).
fn filters(raw: Option<&RawValue>, texts: &FilterTexts) -> Result<Vec<(String, Json)>, RestError> {
    let list = match Field::of(raw) {
        Field::Missing => return Err(bad(texts.missing)),
        Field::Null => return Err(bad(texts.null)),
        Field::Present(r) => array(r)?,
    };
    if list.is_empty() {
        return Err(bad(texts.empty));
    }
    let mut out = Vec::with_capacity(list.len());
    for f in list {
        let f: ColumnRaw = object(f)?;
        let column = match Field::of(f.column) {
            Field::Missing => return Err(bad(NO_SUCH_FIELD)),
            Field::Null => return Err(bad("a Column name in the Field section is null")),
            Field::Present(r) => string(r)?,
        };
        if column.is_empty() {
            return Err(bad("a Column name in the Field section is empty"));
        }
        // rdrs2 treats a missing value like a null one (its own message for that case is
        // simdjson's "No error", a slip we do not copy).
        let value = match Field::of(f.value) {
            Field::Missing | Field::Null => return Err(bad("a Column in the Field section is null")),
            Field::Present(r) => serde_json::from_str::<Json>(r.get()).map_err(not_json)?,
        };
        out.push((column.into_owned(), value));
    }
    Ok(out)
}

/// `readColumns`: absent, null or empty means every non-key column.
fn read_columns(raw: Option<&RawValue>) -> Result<Option<Vec<String>>, RestError> {
    let list = match Field::of(raw) {
        Field::Missing | Field::Null => return Ok(None),
        Field::Present(r) => array(r)?,
    };
    if list.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(list.len());
    for rc in list {
        let rc: ColumnRaw = object(rc)?;
        let column = match Field::of(rc.column) {
            Field::Missing | Field::Null => return Err(bad("a column to read is missing a name")),
            Field::Present(r) => string(r)?,
        };
        if column.is_empty() {
            return Err(bad("a column to read is missing a name"));
        }
        if let Field::Present(r) = Field::of(rc.data_return_type)
            && string(r)? != "default"
        {
            return Err(bad("default dataReturnType is the only supported"));
        }
        out.push(column.into_owned());
    }
    Ok(Some(out))
}

/// `writeColumns`: `[{"column": name, "value": v}]`; a missing value writes NULL.
fn write_columns(raw: Option<&RawValue>) -> Result<Vec<(String, Json)>, RestError> {
    let list = match Field::of(raw) {
        Field::Missing | Field::Null => return Err(bad("the writeColumns section is null")),
        Field::Present(r) => array(r)?,
    };
    if list.is_empty() {
        return Err(bad("the writeColumns section is empty"));
    }
    let mut out = Vec::with_capacity(list.len());
    for w in list {
        let w: ColumnRaw = object(w)?;
        let column = match Field::of(w.column) {
            Field::Missing | Field::Null => return Err(bad("a Column name in the writeColumns section is null")),
            Field::Present(r) => string(r)?,
        };
        if column.is_empty() {
            return Err(bad("a Column name in the writeColumns section is empty"));
        }
        let value = match Field::of(w.value) {
            Field::Missing | Field::Null => Json::Null,
            Field::Present(r) => serde_json::from_str::<Json>(r.get()).map_err(not_json)?,
        };
        out.push((column.into_owned(), value));
    }
    Ok(out)
}

fn operation_id(raw: Option<&RawValue>) -> Result<Option<String>, RestError> {
    match Field::of(raw) {
        Field::Missing | Field::Null => Ok(None),
        Field::Present(r) => Ok(Some(string(r)?.into_owned())),
    }
}

/// A pk-read (or batch read sub-operation), parsed and validated without the schema.
#[derive(Debug)]
pub struct ReadSpec {
    pub db: String,
    pub table: String,
    pub operation_id: Option<String>,
    pub filters: Vec<(String, Json)>,
    /// `None`: every non-key column.
    pub read_columns: Option<Vec<String>>,
}

/// The write operations of `/batchwrite` and `/batchdelete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    Write,
    Update,
    Insert,
    Delete,
}

impl WriteKind {
    fn from_suffix(s: &str) -> Option<WriteKind> {
        Some(match s {
            "pk-write" => WriteKind::Write,
            "pk-update" => WriteKind::Update,
            "pk-insert" => WriteKind::Insert,
            "pk-delete" => WriteKind::Delete,
            _ => return None,
        })
    }
}

/// A batchwrite / batchdelete sub-operation, parsed and validated without the schema.
#[derive(Debug)]
pub struct WriteSpec {
    pub db: String,
    pub table: String,
    pub kind: WriteKind,
    pub operation_id: Option<String>,
    pub filters: Vec<(String, Json)>,
    pub writes: Vec<(String, Json)>,
}

/// Parses a pk-read body (`/<version>/{db}/{table}/pk-read`) and validates it.
pub fn pk_read(db: &str, table: &str, raw: &str, opts: &RestOptions) -> Result<ReadSpec, RestError> {
    let spec = match fast::pk_read(db, table, raw) {
        Some(spec) => spec,
        None => pk_read_general(db, table, raw)?,
    };
    validate_read(&spec, opts)?;
    Ok(spec)
}

/// The general parser of a pk-read body (every shape, every error text); see `fast`.
fn pk_read_general(db: &str, table: &str, raw: &str) -> Result<ReadSpec, RestError> {
    let body: PkReadRaw = top_object(raw)?;
    Ok(ReadSpec {
        db: db.to_string(),
        table: table.to_string(),
        filters: filters(body.filters, &PK_READ_FILTERS)?,
        read_columns: read_columns(body.read_columns)?,
        operation_id: operation_id(body.operation_id)?,
    })
}

/// Which batch endpoint an envelope belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Batch {
    Read,
    Write,
    Delete,
}

/// One sub-operation of a batch envelope after the envelope checks.
struct SubOp<'a> {
    db: String,
    table: String,
    suffix: String,
    body: &'a RawValue,
}

/// Splits `db/table/op` as rdrs2's `extract_db_and_table` does: at least 11 characters, leading
/// and trailing slashes ignored, exactly three non-empty parts (the operation is checked by the
/// caller). No percent-decoding: the URL is a JSON string, not a request line.
fn relative_url(url: &str) -> Result<(&str, &str, &str), RestError> {
    if url.len() < 11 {
        return Err(bad(RELATIVE_URL_FAILED));
    }
    let mut parts = url.trim_end_matches('/').trim_start_matches('/').split('/');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(db), Some(table), Some(op), None) if !db.is_empty() && !table.is_empty() => Ok((db, table, op)),
        _ => Err(bad(RELATIVE_URL_FAILED)),
    }
}

fn sub_op(raw: &RawValue, batch: Batch) -> Result<SubOp<'_>, RestError> {
    let op: OpRaw = object(raw)?;
    // rdrs2's batch read accepts a sub-operation without `method`; its write endpoints do not.
    match Field::of(op.method) {
        Field::Missing if batch == Batch::Read => {}
        Field::Missing | Field::Null => return Err(bad(METHOD_POST)),
        Field::Present(r) => {
            if string(r)? != "POST" {
                return Err(bad(METHOD_POST));
            }
        }
    }
    let url = match Field::of(op.url) {
        Field::Missing | Field::Null => return Err(bad(RELATIVE_URL_REQUIRED)),
        Field::Present(r) => r,
    };
    let url = string(url)?;
    let (db, table, suffix) = relative_url(&url)?;
    let ok = match batch {
        Batch::Read => suffix == "pk-read",
        Batch::Delete => suffix == "pk-delete",
        // Tern also takes pk-delete in batchwrite (a documented extension).
        Batch::Write => WriteKind::from_suffix(suffix).is_some(),
    };
    if !ok {
        return Err(bad(if batch == Batch::Write { WRITE_URL_FAILED } else { RELATIVE_URL_FAILED }));
    }
    let body = match Field::of(op.body) {
        Field::Missing | Field::Null => return Err(bad(BODY_FAILED)),
        Field::Present(r) => r,
    };
    Ok(SubOp { db: db.to_string(), table: table.to_string(), suffix: suffix.to_string(), body })
}

/// The sub-operations of a batch envelope: every envelope and body check, then the batch size
/// (rdrs2 checks the size after parsing).
fn envelope(raw: &str, batch: Batch) -> Result<Vec<SubOp<'_>>, RestError> {
    let env: EnvelopeRaw = top_object(raw)?;
    let list = match Field::of(env.operations) {
        Field::Missing | Field::Null => return Err(bad(NO_OPERATIONS)),
        Field::Present(r) => array(r)?,
    };
    if list.is_empty() {
        return Err(bad(NO_OPERATIONS));
    }
    list.into_iter().map(|op| sub_op(op, batch)).collect()
}

fn check_batch_size(n: usize, opts: &RestOptions) -> Result<(), RestError> {
    if n > opts.batch_max_size {
        return Err(bad(format!("Batch size exceeds maximum allowed size: {}", opts.batch_max_size)));
    }
    Ok(())
}

/// Parses and validates a `/batch` envelope of pk-reads; any error fails the whole request.
pub fn batch_read(raw: &str, opts: &RestOptions) -> Result<Vec<ReadSpec>, RestError> {
    let specs = match fast::batch_read(raw) {
        Some(specs) => specs,
        None => batch_read_general(raw)?,
    };
    check_batch_size(specs.len(), opts)?;
    for s in &specs {
        validate_read(s, opts)?;
    }
    Ok(specs)
}

/// The general parser of a `/batch` envelope (every shape, every error text); see `fast`.
fn batch_read_general(raw: &str) -> Result<Vec<ReadSpec>, RestError> {
    let ops = envelope(raw, Batch::Read)?;
    let mut specs = Vec::with_capacity(ops.len());
    for op in ops {
        let body: PkReadRaw = object(op.body)?;
        specs.push(ReadSpec {
            db: op.db,
            table: op.table,
            filters: filters(body.filters, &BATCH_FILTERS)?,
            read_columns: read_columns(body.read_columns)?,
            operation_id: operation_id(body.operation_id)?,
        });
    }
    Ok(specs)
}

/// Parses and validates a `/batchwrite` or `/batchdelete` envelope.
pub fn batch_write(raw: &str, batch: Batch, opts: &RestOptions) -> Result<Vec<WriteSpec>, RestError> {
    let ops = envelope(raw, batch)?;
    let mut specs = Vec::with_capacity(ops.len());
    for op in ops {
        let kind = WriteKind::from_suffix(&op.suffix).expect("checked by sub_op");
        let body: WriteRaw = object(op.body)?;
        let texts = if batch == Batch::Delete { &BATCH_FILTERS } else { &WRITE_FILTERS };
        let filters = filters(body.filters, texts)?;
        let writes = if kind == WriteKind::Delete { Vec::new() } else { write_columns(body.write_columns)? };
        specs.push(WriteSpec {
            db: op.db,
            table: op.table,
            kind,
            operation_id: operation_id(body.operation_id)?,
            filters,
            writes,
        });
    }
    check_batch_size(specs.len(), opts)?;
    validate_writes(&specs, opts)?;
    Ok(specs)
}

/// rdrs2's `validate_db_identifier`: empty, longer than 64 bytes, or a code point outside
/// U+0001..U+FFFF.
#[derive(Debug, PartialEq, Eq)]
enum IdentError {
    Empty,
    TooLong,
    BadChar(u32),
}

fn check_identifier(s: &str) -> Result<(), IdentError> {
    if s.is_empty() {
        return Err(IdentError::Empty);
    }
    if s.len() > IDENT_MAX_BYTES {
        return Err(IdentError::TooLong);
    }
    match s.chars().find(|&c| c == '\0' || c as u32 > 0xFFFF) {
        Some(c) => Err(IdentError::BadChar(c as u32)),
        None => Ok(()),
    }
}

/// The database of a pk-read or batch read (`validate_db`).
pub fn validate_db(db: &str) -> Result<(), RestError> {
    check_identifier(db).map_err(|e| match e {
        IdentError::Empty => bad("Field validation for 'DB' failed on the 'min' tag: "),
        IdentError::TooLong => bad(format!("Field validation for 'DB' failed on the 'max' tag: {db}")),
        IdentError::BadChar(_) => bad("database name contains invalid characters"),
    })
}

/// The table of a pk-read or batch read (`validate_table`).
pub fn validate_table(table: &str) -> Result<(), RestError> {
    check_identifier(table).map_err(|e| match e {
        IdentError::Empty => bad("Field validation for 'Table' failed on the 'min' tag: "),
        IdentError::TooLong => bad(format!("Field validation for 'Table' failed on the 'max' tag: {table}")),
        IdentError::BadChar(_) => bad("table name contains invalid characters"),
    })
}

/// A column name (`validate_column`).
pub fn validate_column(column: &str) -> Result<(), RestError> {
    check_identifier(column).map_err(|e| match e {
        IdentError::Empty => bad(format!("identifier is empty: {column}")),
        IdentError::TooLong => bad(format!("identifier is too large: {column}")),
        IdentError::BadChar(_) => bad("column name: contains invalid characters"),
    })
}

/// Any identifier of a batchwrite / batchdelete (rdrs2 checks them with the bare
/// `validate_db_identifier` texts there).
fn validate_identifier(s: &str) -> Result<(), RestError> {
    check_identifier(s).map_err(|e| match e {
        IdentError::Empty => bad("identifier is empty"),
        IdentError::TooLong => bad(format!("identifier is too large: {s}")),
        IdentError::BadChar(c) => bad(format!("identifier carries an invalid character: {c}")),
    })
}

fn operation_id_too_long(id: &Option<String>, opts: &RestOptions) -> Option<String> {
    match id {
        Some(id) if id.len() > opts.operation_id_max_size => {
            Some(format!("max allowed length is {}", opts.operation_id_max_size))
        }
        _ => None,
    }
}

/// `PKReadParams::validate`: db, table, operationId, read columns, filter columns, then
/// duplicates and overlaps.
fn validate_read(s: &ReadSpec, opts: &RestOptions) -> Result<(), RestError> {
    validate_db(&s.db)?;
    validate_table(&s.table)?;
    if let Some(m) = operation_id_too_long(&s.operation_id, opts) {
        return Err(bad(format!("operationId is invalid; error: {m}")));
    }
    let reads = s.read_columns.as_deref().unwrap_or_default();
    for c in reads {
        validate_column(c)?;
    }
    for (c, _) in &s.filters {
        validate_column(c)?;
    }
    // Most reads name a few columns: compare pairwise; hash only long lists.
    if s.filters.len() + reads.len() <= 8 {
        for (i, (c, _)) in s.filters.iter().enumerate() {
            if s.filters[..i].iter().any(|(o, _)| o == c) {
                return Err(dup_filter(c));
            }
        }
        for (i, c) in reads.iter().enumerate() {
            if s.filters.iter().any(|(f, _)| f == c) {
                return Err(read_in_filter(c));
            }
            if reads[..i].contains(c) {
                return Err(dup_read(c));
            }
        }
        return Ok(());
    }
    let filter_names = unique_filters(&s.filters)?;
    let mut seen = HashSet::with_capacity(reads.len());
    for c in reads {
        if filter_names.contains(c.as_str()) {
            return Err(read_in_filter(c));
        }
        if !seen.insert(c.as_str()) {
            return Err(dup_read(c));
        }
    }
    Ok(())
}

fn dup_filter(c: &str) -> RestError {
    bad(format!("field validation for filter failed on the 'unique' tag: {c}"))
}

fn read_in_filter(c: &str) -> RestError {
    bad(format!("field validation for read columns failed. '{c}' already included in filter"))
}

fn dup_read(c: &str) -> RestError {
    bad(format!("field validation for 'ReadColumns' failed on the 'unique' tag: {c}"))
}

/// The filter columns, or the first one given twice. Hashed: a body may carry tens of thousands
/// of filters, and a quadratic check would hold the worker.
fn unique_filters(filters: &[(String, Json)]) -> Result<HashSet<&str>, RestError> {
    let mut seen = HashSet::with_capacity(filters.len());
    for (c, _) in filters {
        if !seen.insert(c.as_str()) {
            return Err(dup_filter(c));
        }
    }
    Ok(seen)
}

/// rdrs2's batchwrite checks: every database, table and column identifier, then per operation the
/// filters' uniqueness and the operationId length.
fn validate_writes(specs: &[WriteSpec], opts: &RestOptions) -> Result<(), RestError> {
    for s in specs {
        validate_identifier(&s.db)?;
    }
    for s in specs {
        validate_identifier(&s.table)?;
    }
    for s in specs {
        for (c, _) in s.writes.iter().chain(&s.filters) {
            validate_column(c)?;
        }
    }
    for s in specs {
        unique_filters(&s.filters)?;
        if let Some(m) = operation_id_too_long(&s.operation_id, opts) {
            return Err(bad(m));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> RestOptions {
        RestOptions { batch_max_size: 2, ..Default::default() }
    }

    fn read_err(body: &str) -> String {
        pk_read("db", "t", body, &opts()).unwrap_err().message
    }

    #[test]
    fn pk_read_sections_use_rdrs2_texts() {
        assert_eq!(read_err("{}"), NO_SUCH_FIELD);
        assert_eq!(read_err(r#"{"filters": null}"#), "the Field section is null");
        assert_eq!(read_err(r#"{"filters": []}"#), "the Field section is empty");
        assert_eq!(read_err(r#"{"filters": "x"}"#), INCORRECT_TYPE);
        assert_eq!(
            read_err(r#"{"filters": [{"column": null, "value": 1}]}"#),
            "a Column name in the Field section is null"
        );
        assert_eq!(
            read_err(r#"{"filters": [{"column": "", "value": 1}]}"#),
            "a Column name in the Field section is empty"
        );
        assert_eq!(
            read_err(r#"{"filters": [{"column": "a", "value": null}]}"#),
            "a Column in the Field section is null"
        );
        assert_eq!(read_err(r#"{"filters": [{"column": "a"}]}"#), "a Column in the Field section is null");
        assert_eq!(
            read_err(r#"{"filters": [{"column": "a", "value": 1}], "readColumns": [{"column": ""}]}"#),
            "a column to read is missing a name"
        );
        assert_eq!(
            read_err(
                r#"{"filters": [{"column": "a", "value": 1}], "readColumns": [{"column": "b", "dataReturnType": "x"}]}"#
            ),
            "default dataReturnType is the only supported"
        );
        assert_eq!(read_err("[1]"), INCORRECT_TYPE);
        assert!(read_err("{").starts_with("Error: the request body is not valid JSON"));
    }

    #[test]
    fn validation_order_and_texts() {
        let long = "c".repeat(65);
        assert_eq!(
            read_err(&format!(r#"{{"filters": [{{"column": "{long}", "value": 1}}]}}"#)),
            format!("identifier is too large: {long}")
        );
        assert_eq!(
            read_err(r#"{"filters": [{"column": "a", "value": 1}], "readColumns": [{"column": "a"}]}"#),
            "field validation for read columns failed. 'a' already included in filter"
        );
        assert_eq!(
            read_err(r#"{"filters": [{"column": "a", "value": 1}, {"column": "a", "value": 2}]}"#),
            "field validation for filter failed on the 'unique' tag: a"
        );
        assert_eq!(
            read_err(
                r#"{"filters": [{"column": "a", "value": 1}], "readColumns": [{"column": "b"}, {"column": "b"}]}"#
            ),
            "field validation for 'ReadColumns' failed on the 'unique' tag: b"
        );
        // Short lists are compared pairwise, long ones hashed: the same answers.
        for n in [2, 12] {
            let cols = |prefix: &str, last: &str| -> String {
                let mut v: Vec<String> =
                    (1..n).map(|i| format!(r#"{{"column": "{prefix}{i}", "value": 1}}"#)).collect();
                v.push(format!(r#"{{"column": "{last}", "value": 1}}"#));
                v.join(",")
            };
            let e = read_err(&format!(r#"{{"filters": [{}]}}"#, cols("f", "f1")));
            assert_eq!(e, "field validation for filter failed on the 'unique' tag: f1");
            let e = read_err(&format!(r#"{{"filters": [{}], "readColumns": [{}]}}"#, cols("f", "x"), cols("r", "f1")));
            assert_eq!(e, "field validation for read columns failed. 'f1' already included in filter");
            let e = read_err(&format!(r#"{{"filters": [{}], "readColumns": [{}]}}"#, cols("f", "x"), cols("r", "r1")));
            assert_eq!(e, "field validation for 'ReadColumns' failed on the 'unique' tag: r1");
        }
        let e = pk_read(&"d".repeat(65), "t", r#"{"filters": [{"column": "a", "value": 1}]}"#, &opts()).unwrap_err();
        assert_eq!(e.message, format!("Field validation for 'DB' failed on the 'max' tag: {}", "d".repeat(65)));
        let e = pk_read("db", "t\u{10000}", r#"{"filters": [{"column": "a", "value": 1}]}"#, &opts()).unwrap_err();
        assert_eq!(e.message, "table name contains invalid characters");
        // 64 characters of two bytes each: over the 64-byte limit.
        let wide = "\u{e9}".repeat(33);
        assert_eq!(
            read_err(&format!(r#"{{"filters": [{{"column": "{wide}", "value": 1}}]}}"#)),
            format!("identifier is too large: {wide}")
        );
        let id = "x".repeat(257);
        assert_eq!(
            read_err(&format!(r#"{{"filters": [{{"column": "a", "value": 1}}], "operationId": "{id}"}}"#)),
            "operationId is invalid; error: max allowed length is 256"
        );
    }

    #[test]
    fn envelopes() {
        let o = opts();
        let e = |b: &str, batch| batch_write(b, batch, &o).unwrap_err().message;
        for batch in [Batch::Write, Batch::Delete] {
            assert_eq!(e(r#"{"operations": []}"#, batch), NO_OPERATIONS);
            assert_eq!(e(r#"{}"#, batch), NO_OPERATIONS);
            assert_eq!(e(r#"{"operations": [{"relative-url": "db/t/pk-delete", "body": {}}]}"#, batch), METHOD_POST);
            assert_eq!(
                e(r#"{"operations": [{"method": "GET", "relative-url": "db/t/pk-delete"}]}"#, batch),
                METHOD_POST
            );
            assert_eq!(e(r#"{"operations": [{"method": "POST", "body": {}}]}"#, batch), RELATIVE_URL_REQUIRED);
        }
        assert_eq!(
            e(r#"{"operations": [{"method": "POST", "relative-url": "db/t/pk-read", "body": {}}]}"#, Batch::Write),
            WRITE_URL_FAILED
        );
        assert_eq!(
            e(r#"{"operations": [{"method": "POST", "relative-url": "db/t/pk-read", "body": {}}]}"#, Batch::Delete),
            RELATIVE_URL_FAILED
        );
        assert_eq!(
            e(r#"{"operations": [{"method": "POST", "relative-url": "db/t/pk-write", "body": null}]}"#, Batch::Write),
            BODY_FAILED
        );
        assert_eq!(
            e(
                r#"{"operations": [{"method": "POST", "relative-url": "db/t/pk-write", "body": {"filters": null}}]}"#,
                Batch::Write
            ),
            "the filters section is null"
        );
        assert_eq!(
            e(
                r#"{"operations": [{"method": "POST", "relative-url": "db/t/pk-write", "body": {"filters": [{"column": "a", "value": 1}]}}]}"#,
                Batch::Write
            ),
            "the writeColumns section is null"
        );
        assert_eq!(
            e(
                r#"{"operations": [{"method": "POST", "relative-url": "db/t/pk-delete", "body": {"filters": null}}]}"#,
                Batch::Delete
            ),
            "the Field section is null"
        );
        // Batch reads accept a missing method; the batch size is checked after parsing.
        let op = r#"{"relative-url": "db/t/pk-read", "body": {"filters": [{"column": "a", "value": 1}]}}"#;
        assert_eq!(batch_read(&format!(r#"{{"operations": [{op}]}}"#), &o).unwrap().len(), 1);
        let three = format!(r#"{{"operations": [{op}, {op}, {op}]}}"#);
        assert_eq!(batch_read(&three, &o).unwrap_err().message, "Batch size exceeds maximum allowed size: 2");
        assert_eq!(batch_read(r#"{"operations": null}"#, &o).unwrap_err().message, NO_OPERATIONS);
        assert_eq!(
            batch_read(r#"{"operations": [{"relative-url": "db/t/pk-read", "body": {}}]}"#, &o).unwrap_err().message,
            "the Field section is empty"
        );
    }

    #[test]
    fn relative_urls() {
        assert_eq!(relative_url("/db/table/pk-read/").unwrap(), ("db", "table", "pk-read"));
        assert_eq!(relative_url("a/b/pk-read").unwrap(), ("a", "b", "pk-read"));
        assert_eq!(relative_url("b/pk-read").unwrap_err().message, RELATIVE_URL_FAILED);
        assert!(relative_url("a/b/c/pk-read").is_err());
        assert!(relative_url("//////////////").is_err());
        assert!(relative_url("db//pk-read-x").is_err());
    }
}
