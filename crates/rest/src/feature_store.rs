//! The Feature Store REST API (interfaces.md §6): `POST /0.1.0/feature_store` (one feature
//! vector) and `POST /0.1.0/batch_feature_store` (many), as RonDB's rdrs2 serves them. Facts
//! (metadata tables and columns, the order of lookups, serving-key resolution, error codes and
//! texts, the answer's shape) come from RonDB's public rdrs2 sources (`rest-server2/server/src/`
//! `feature_store_ctrl.cpp`, `batch_feature_store_ctrl.cpp`, `metadata.cpp`,
//! `feature_store/feature_store.cpp`, `feature_store_error_code.hpp`, `json_parser.cpp`); the code
//! is ours.
//!
//! A view's metadata is read from Hopsworks' tables in database `hopsworks` (the subset this
//! module reads is created by `crates/rest/feature_store_metadata.sql`): the store by name, the
//! view by (name, version, store), its joins (`training_dataset_join`: prefix and join index), its
//! features (`training_dataset_feature`: output order `idx`, type, feature group, join, label
//! flag), their feature groups and stores, and its serving keys (`serving_key`). It is cached per
//! (store, view, version) for `METADATA_TTL`. Feature values come from the online tables
//! `<store of the group>.<group name>_<version>`: per entry one key read per (join index, feature
//! group), all entries' reads in one batch.

use crate::error::RestError;
use crate::json::{parse_value, push_json_str, push_value};
use serde_json::{Map, Value as Json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_client::{AbortOption, Client, Exec, KeyOp, OpResult, ScanSpec, TableHandle, Value};
use tern_types::filter::{CmpOp, Filter};

/// The database of Hopsworks' metadata.
pub const HOPSWORKS: &str = "hopsworks";
/// How long a view's metadata is reused before it is read again.
pub const METADATA_TTL: Duration = Duration::from_secs(5);
/// Views whose metadata is cached at most (the cache is emptied when full).
const CACHE_MAX: usize = 1024;
/// Entries of one batch request, at most.
pub const BATCH_ENTRIES_MAX: usize = 10_000;
/// Key reads per transaction.
const READS_PER_TXN: usize = 1000;

/// A feature-store error: rdrs2's code and reason, a message, and the HTTP status it is sent with
/// (rdrs2 sends metadata, key and passed-feature errors as 400 whatever the code's own status).
#[derive(Debug, Clone, PartialEq)]
pub struct FsError {
    pub code: u32,
    pub reason: &'static str,
    pub message: String,
    pub status: u16,
}

macro_rules! fs_errors {
    ($($name:ident = $code:literal, $reason:literal;)*) => {
        $(pub const $name: (u32, &str) = ($code, $reason);)*
    };
}

fs_errors! {
    FV_NOT_EXIST = 1, "Feature view does not exist.";
    FS_NOT_EXIST = 2, "Feature store does not exist.";
    FG_NOT_EXIST = 3, "Feature group does not exist.";
    FG_READ_FAIL = 4, "Reading feature group failed.";
    FS_READ_FAIL = 5, "Reading feature store failed.";
    FV_READ_FAIL = 6, "Reading feature view failed.";
    TD_JOIN_READ_FAIL = 7, "Reading training dataset join failed.";
    TD_FEATURE_READ_FAIL = 8, "Reading training dataset feature failed.";
    WRONG_DATA_TYPE = 10, "Wrong data type.";
    FEATURE_NOT_EXIST = 11, "Feature does not exist.";
    INCORRECT_PRIMARY_KEY = 12, "Incorrect primary key.";
    READ_FROM_DB_FAIL = 14, "Reading from db failed.";
    FEATURE_STORE_NOT_SHARED = 17, "Accessing unshared feature store failed";
}

fn fs_err((code, reason): (u32, &'static str), message: impl Into<String>) -> FsError {
    FsError { code, reason, message: message.into(), status: 400 }
}

impl FsError {
    /// `{"code": N, "reason": "...", "message": "..."}`.
    pub fn body(&self) -> String {
        let mut out = format!("{{\"code\": {}, \"reason\": ", self.code);
        push_json_str(&mut out, self.reason);
        out.push_str(", \"message\": ");
        push_json_str(&mut out, &self.message);
        out.push('}');
        out
    }
}

/// What the handler answers: an error as plain text (request parsing, as rdrs2) or as the
/// feature-store JSON, or the answer.
#[derive(Debug)]
pub enum Answer {
    Text(u16, String),
    Error(FsError),
    Json(String),
}

// ------------------------------------------------------------------------------- requests

/// A parsed request (the single endpoint gives one entry).
#[derive(Debug, Clone, PartialEq)]
pub struct FsRequest {
    pub store: String,
    pub view: String,
    pub version: i64,
    pub entries: Vec<Map<String, Json>>,
    /// Per entry (the single endpoint: one), possibly empty.
    pub passed: Vec<Map<String, Json>>,
    /// `metadataOptions` given: (featureName, featureType).
    pub metadata: Option<(bool, bool)>,
    pub validate_passed: bool,
    pub detailed: bool,
}

fn invalid(key: &str) -> Answer {
    Answer::Text(400, format!("Error:Field validation for 'Body' failed {key}"))
}

fn no_null_values(m: &Map<String, Json>) -> Result<(), Answer> {
    match m.iter().find(|(_, v)| v.is_null()) {
        Some((k, _)) => Err(invalid(k)),
        None => Ok(()),
    }
}

/// Parses and validates a request body (`batch`: the batch endpoint's shape).
pub fn parse(body: &str, batch: bool) -> Result<FsRequest, Answer> {
    let v: Json = serde_json::from_str(body)
        .map_err(|e| Answer::Text(400, format!("Error:the request body is not valid JSON: {e}")))?;
    let Json::Object(o) = v else {
        return Err(Answer::Text(400, "Error:the request body is not a JSON object".into()));
    };
    let text = |key: &str| match o.get(key) {
        Some(Json::String(s)) if batch || !s.is_empty() => Ok(s.clone()),
        _ => Err(invalid(key)),
    };
    let store = text("featureStoreName")?;
    let view = text("featureViewName")?;
    let version = match o.get("featureViewVersion") {
        Some(Json::Number(n)) => n.as_i64().filter(|&v| v >= 0 && v <= u32::MAX as i64),
        _ => None,
    }
    .ok_or_else(|| invalid("featureViewVersion"))?;
    let object = |v: &Json, key: &str| match v {
        Json::Object(m) => no_null_values(m).map(|_| m.clone()),
        _ => Err(invalid(key)),
    };
    let (entries, passed) = if batch {
        let Some(Json::Array(items)) = o.get("entries") else { return Err(invalid("entries")) };
        if items.len() > BATCH_ENTRIES_MAX {
            return Err(Answer::Text(400, format!("Error:at most {BATCH_ENTRIES_MAX} entries per request")));
        }
        let entries = items.iter().map(|e| object(e, "entries")).collect::<Result<Vec<_>, _>>()?;
        let passed = match o.get("passedFeatures") {
            None | Some(Json::Null) => Vec::new(),
            Some(Json::Array(p)) => p
                .iter()
                .map(|x| if x.is_null() { Ok(Map::new()) } else { object(x, "passedFeatures") })
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => return Err(invalid("passedFeatures")),
        };
        (entries, passed)
    } else {
        let entries = vec![object(o.get("entries").unwrap_or(&Json::Null), "entries")?];
        let passed = match o.get("passedFeatures") {
            None | Some(Json::Null) => Map::new(),
            Some(p) => object(p, "passedFeatures")?,
        };
        (entries, vec![passed])
    };
    // An options object: each named flag as given (None: absent).
    let flags = |key: &str, names: &[&str], strict: bool| -> Result<Option<Vec<Option<bool>>>, Answer> {
        match o.get(key) {
            None | Some(Json::Null) => Ok(None),
            Some(Json::Object(m)) => {
                let mut out = vec![None; names.len()];
                for (k, v) in m {
                    match (names.iter().position(|n| n == k), v) {
                        (Some(i), Json::Bool(b)) => out[i] = Some(*b),
                        (None, _) if !strict => {}
                        _ => return Err(invalid(&format!("{k}{key}"))),
                    }
                }
                Ok(Some(out))
            }
            Some(_) => Err(invalid(key)),
        }
    };
    let metadata = flags("metadataOptions", &["featureName", "featureType"], !batch)?
        .map(|f| (f[0].unwrap_or(false), f[1].unwrap_or(false)));
    let options = flags("options", &["validatePassedFeatures", "includeDetailedStatus"], true)?.unwrap_or_default();
    // rdrs2's default validates passed features.
    let validate_passed = options.first().copied().flatten().unwrap_or(true);
    let detailed = options.get(1).copied().flatten().unwrap_or(false);
    Ok(FsRequest { store, view, version, entries, passed, metadata, validate_passed, detailed })
}

// ------------------------------------------------------------------------------- metadata

#[derive(Debug, Clone)]
struct ServingKey {
    fg: i64,
    name: String,
    /// prefix + name: the key's name in the view's output and in entries.
    full: String,
    required: bool,
    join_on: String,
    join_index: i64,
    /// The entry that names this key first: prefix + name when required, else `join_on`.
    required_entry: String,
}

/// One key read per entry: a feature group at a join index.
#[derive(Debug, Clone)]
struct GroupRead {
    fg: i64,
    db: String,
    table: String,
    /// Serving keys of this group (indexes into `View::keys`).
    keys: Vec<usize>,
    /// Columns read and the output position of each.
    columns: Vec<(String, usize)>,
}

/// A feature view's metadata, ready to serve.
#[derive(Debug)]
pub struct View {
    /// Output names (prefix + name) and offline types, in output order (labels left out).
    names: Vec<String>,
    types: Vec<String>,
    by_name: HashMap<String, Vec<usize>>,
    keys: Vec<ServingKey>,
    valid_keys: HashSet<String>,
    reads: Vec<GroupRead>,
    /// Feature stores the view reads (API-key scopes).
    pub stores: Vec<String>,
}

type Row = Vec<Value>;

/// Rows of `hopsworks.<table>` whose columns equal the given values, with the column positions
/// of `want`.
async fn select(
    client: &Client,
    table: &str,
    filters: &[(&str, Value)],
    want: &[&str],
    fail: (u32, &'static str),
) -> Result<Vec<Row>, FsError> {
    let t = client
        .table(HOPSWORKS, table)
        .map_err(|_| fs_err(fail, format!("table {HOPSWORKS}.{table} does not exist")))?;
    let col = |n: &str| t.column(n).map_err(|e| fs_err(fail, e.message));
    let mut conds = Vec::new();
    for (name, v) in filters {
        conds.push(Filter::Cmp { col: col(name)?, op: CmpOp::Eq, value: v.clone() });
    }
    let cols = want.iter().map(|n| col(n)).collect::<Result<Vec<u16>, _>>()?;
    let mut spec = ScanSpec::table(t.id());
    spec.filter = if conds.len() == 1 { conds.remove(0) } else { Filter::And(conds) };
    spec.projection = Some(cols.clone());
    let rows = client.scan(spec).collect().await.map_err(|e| fs_err(fail, e.message))?;
    rows.iter().map(|r| t.decode_projection(&cols, r).map_err(|e| fs_err(fail, e.message))).collect()
}

fn int(v: &Value) -> Option<i64> {
    v.as_i128().map(|n| n as i64)
}

fn text(v: &Value) -> String {
    match v {
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        Value::Null => String::new(),
        other => other.as_i128().map(|n| n.to_string()).unwrap_or_default(),
    }
}

/// Reads a view's metadata (rdrs2's order of lookups and errors).
async fn load_view(client: &Client, store: &str, view: &str, version: i64) -> Result<View, FsError> {
    let fs = select(client, "feature_store", &[("name", Value::str(store))], &["id"], FS_READ_FAIL).await?;
    let fs_id = match fs.as_slice() {
        [] => return Err(fs_err(FS_NOT_EXIST, "")),
        [r] => int(&r[0]).unwrap_or(0),
        _ => return Err(fs_err(FS_READ_FAIL, format!("more than one feature store is named {store}"))),
    };
    let fv = select(
        client,
        "feature_view",
        &[("name", Value::str(view)), ("version", Value::Int(version)), ("feature_store_id", Value::Int(fs_id))],
        &["id"],
        FV_READ_FAIL,
    )
    .await?;
    let Some(fv_id) = fv.first().and_then(|r| int(&r[0])) else { return Err(fs_err(FV_NOT_EXIST, "")) };
    let deleted = || fs_err(FG_NOT_EXIST, "Feature view may contain deleted feature groups.");
    let joins = select(
        client,
        "training_dataset_join",
        &[("feature_view_id", Value::Int(fv_id))],
        &["id", "prefix", "idx"],
        TD_JOIN_READ_FAIL,
    )
    .await?;
    if joins.is_empty() {
        return Err(deleted());
    }
    let joins: HashMap<i64, (String, i64)> =
        joins.iter().map(|r| (int(&r[0]).unwrap_or(0), (text(&r[1]), int(&r[2]).unwrap_or(0)))).collect();
    let mut tdf = select(
        client,
        "training_dataset_feature",
        &[("feature_view_id", Value::Int(fv_id))],
        &["feature_group", "name", "type", "td_join", "idx", "label"],
        TD_FEATURE_READ_FAIL,
    )
    .await?;
    if tdf.is_empty() {
        return Err(deleted());
    }
    tdf.sort_by_key(|r| int(&r[4]).unwrap_or(0));
    // Feature groups and the stores that own them, each read once.
    let mut groups: HashMap<i64, (String, i64, String)> = HashMap::new();
    let mut store_names: HashMap<i64, String> = HashMap::new();
    for r in &tdf {
        let name = text(&r[1]);
        let Some(fg) = int(&r[0]).filter(|&g| g != 0) else {
            return Err(fs_err(
                FG_NOT_EXIST,
                format!("Cannot get the feature group of feature `{name}`. Check if the feature group still exists."),
            ));
        };
        if groups.contains_key(&fg) {
            continue;
        }
        let g = select(
            client,
            "feature_group",
            &[("id", Value::Int(fg))],
            &["name", "version", "feature_store_id"],
            FG_READ_FAIL,
        )
        .await?;
        let Some(g) = g.first() else { return Err(fs_err(FG_NOT_EXIST, "")) };
        let owner = int(&g[2]).unwrap_or(0);
        if let std::collections::hash_map::Entry::Vacant(e) = store_names.entry(owner) {
            let s = select(client, "feature_store", &[("id", Value::Int(owner))], &["name"], FS_READ_FAIL).await?;
            let Some(s) = s.first() else { return Err(fs_err(FS_NOT_EXIST, "")) };
            e.insert(text(&s[0]));
        }
        groups.insert(fg, (text(&g[0]), int(&g[1]).unwrap_or(0), store_names[&owner].clone()));
    }
    let sk = select(
        client,
        "serving_key",
        &[("feature_view_id", Value::Int(fv_id))],
        &["feature_group_id", "feature_name", "prefix", "required", "join_on", "join_index"],
        FV_READ_FAIL,
    )
    .await
    .map_err(|_| fs_err(FV_READ_FAIL, "Failed to read serving keys."))?;
    if sk.is_empty() {
        return Err(fs_err(FV_READ_FAIL, "Failed to read serving keys."));
    }
    let keys: Vec<ServingKey> = sk
        .iter()
        .map(|r| {
            let (name, prefix, required, join_on) = (text(&r[1]), text(&r[2]), int(&r[3]) != Some(0), text(&r[4]));
            let full = format!("{prefix}{name}");
            let required_entry = if required { full.clone() } else { join_on.clone() };
            ServingKey {
                fg: int(&r[0]).unwrap_or(0),
                name,
                full,
                required,
                join_on,
                join_index: int(&r[5]).unwrap_or(0),
                required_entry,
            }
        })
        .collect();
    let mut valid_keys = HashSet::new();
    for k in &keys {
        valid_keys.insert(k.full.clone());
        valid_keys.insert(k.name.clone());
    }
    // Output order: by idx, labels left out.
    let (mut names, mut types, mut by_name) = (Vec::new(), Vec::new(), HashMap::<String, Vec<usize>>::new());
    let mut reads: BTreeMap<(i64, i64), GroupRead> = BTreeMap::new();
    for r in tdf.iter().filter(|r| int(&r[5]) != Some(1)) {
        let (fg, name) = (int(&r[0]).unwrap_or(0), text(&r[1]));
        let (prefix, join_index) = int(&r[3]).and_then(|j| joins.get(&j)).cloned().unwrap_or_default();
        let pos = names.len();
        let out = format!("{prefix}{name}");
        by_name.entry(out.clone()).or_default().push(pos);
        names.push(out);
        types.push(text(&r[2]));
        let (g, v, db) = &groups[&fg];
        let read = reads.entry((join_index, fg)).or_insert_with(|| GroupRead {
            fg,
            db: db.clone(),
            table: format!("{g}_{v}"),
            keys: keys
                .iter()
                .enumerate()
                .filter(|(_, k)| k.fg == fg && k.join_index == join_index)
                .map(|(i, _)| i)
                .collect(),
            columns: Vec::new(),
        });
        // Serving-key columns are not read: their values come from the entry.
        if !keys.iter().any(|k| k.join_index == join_index && k.name == name) {
            read.columns.push((name, pos));
        }
    }
    let mut stores: Vec<String> = groups.values().map(|(_, _, s)| s.clone()).collect();
    stores.push(store.to_string());
    stores.sort();
    stores.dedup();
    Ok(View { names, types, by_name, keys, valid_keys, reads: reads.into_values().collect(), stores })
}

impl View {
    /// The online tables the view reads: (database, table).
    pub fn online_tables(&self) -> impl Iterator<Item = (&str, &str)> {
        self.reads.iter().map(|g| (g.db.as_str(), g.table.as_str()))
    }
}

/// Views' metadata, reused for `METADATA_TTL`.
#[derive(Default)]
pub struct Cache(Mutex<HashMap<ViewKey, (Instant, Arc<View>)>>);

/// (feature store, feature view, version).
type ViewKey = (String, String, i64);

impl Cache {
    pub async fn view(&self, client: &Client, r: &FsRequest) -> Result<Arc<View>, FsError> {
        let key = (r.store.clone(), r.view.clone(), r.version);
        if let Some((at, v)) = self.0.lock().unwrap_or_else(|e| e.into_inner()).get(&key)
            && at.elapsed() < METADATA_TTL
        {
            return Ok(v.clone());
        }
        let v = Arc::new(load_view(client, &r.store, &r.view, r.version).await?);
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= CACHE_MAX {
            m.clear();
        }
        m.insert(key, (Instant::now(), v.clone()));
        Ok(v)
    }
}

// ------------------------------------------------------------------------------- serving

/// The JSON type rdrs2 expects for a passed feature of an offline type ("OTHER": not checked).
fn expected_json_type(offline: &str) -> &'static str {
    match offline.split('<').next().unwrap_or("").trim().to_ascii_lowercase().as_str() {
        "boolean" => "BOOLEAN",
        "tinyint" | "int" | "smallint" | "bigint" | "float" | "double" | "decimal" => "NUMBER",
        "date" | "string" | "binary" | "timestamp" => "STRING",
        _ => "OTHER",
    }
}

fn json_type(v: &Json) -> &'static str {
    match v {
        Json::Number(_) => "NUMBER",
        Json::String(_) => "STRING",
        Json::Bool(_) => "BOOLEAN",
        Json::Null => "NULL",
        _ => "OTHER",
    }
}

impl View {
    fn check_entry(&self, entry: &Map<String, Json>) -> Result<(), FsError> {
        if entry.is_empty() {
            return Err(fs_err(INCORRECT_PRIMARY_KEY, "No entries found"));
        }
        match entry.keys().find(|k| !self.valid_keys.contains(*k)) {
            Some(k) => Err(fs_err(
                INCORRECT_PRIMARY_KEY,
                format!("Provided primary key `{k}` does not belong to the set of primary keys."),
            )),
            None => Ok(()),
        }
    }

    fn check_passed(&self, passed: &Map<String, Json>) -> Result<(), FsError> {
        for (k, v) in passed {
            let Some(&pos) = self.by_name.get(k).and_then(|p| p.first()) else {
                return Err(fs_err(
                    FEATURE_NOT_EXIST,
                    format!(
                        "Feature `{k}` does not exist in the feature view or it is a label which cannot be a passed feature."
                    ),
                ));
            };
            let want = expected_json_type(&self.types[pos]);
            let got = json_type(v);
            if want != "OTHER" && got != want {
                return Err(fs_err(
                    WRONG_DATA_TYPE,
                    format!("Got: '{got}', expected: '{want}' (offline type: {})", self.types[pos]),
                ));
            }
        }
        Ok(())
    }

    /// The key value of serving key `k` in an entry: the required entry, then prefix + name,
    /// then the bare name.
    fn key_value<'a>(&self, k: &ServingKey, entry: &'a Map<String, Json>) -> Option<&'a Json> {
        entry.get(&k.required_entry).or_else(|| entry.get(&k.full)).or_else(|| entry.get(&k.name))
    }

    /// Serving-key values echoed into their features' slots (rdrs2's three passes, later ones
    /// win: bare name, prefixed name, required entry or join column).
    fn fill_keys(&self, entry: &Map<String, Json>, slots: &mut [Option<String>]) {
        let mut set = |out: &str, v: Option<&Json>| {
            if let (Some(v), Some(ps)) = (v, self.by_name.get(out)) {
                for &p in ps {
                    slots[p] = Some(v.to_string());
                }
            }
        };
        for k in &self.keys {
            set(&k.full, entry.get(&k.name));
        }
        for k in &self.keys {
            set(&k.full, entry.get(&k.full));
        }
        for k in &self.keys {
            if k.required {
                set(&k.full, entry.get(&k.full));
            } else if !k.join_on.is_empty() {
                set(&k.full, entry.get(&k.join_on));
            }
        }
    }
}

/// One entry's answer.
struct Vector {
    slots: Vec<Option<String>>,
    status: &'static str,
    /// (feature group, HTTP status) per group read.
    detailed: Vec<(i64, u16)>,
}

/// A planned key read: (entry, group read); `read_op`: false when the entry lacks a key of that
/// group (no operation was sent).
struct Planned {
    entry: usize,
    read: usize,
    read_op: bool,
}

/// A group read resolved once per request: its online table, the serving key of each of the
/// table's primary-key columns (None: the view has none for it), and the columns read (their
/// error is reported only when a read is planned, as it would be per entry).
struct Resolved {
    t: TableHandle,
    keys: Vec<Option<usize>>,
    cols: Result<Vec<u16>, FsError>,
}

fn resolve(client: &Client, view: &View, g: &GroupRead) -> Result<Resolved, FsError> {
    let t = client.table(&g.db, &g.table).map_err(|e| fs_err(READ_FROM_DB_FAIL, e.message).with_status(500))?;
    let keys = t
        .table
        .primary_key
        .iter()
        .map(|&c| {
            let name = &t.table.columns[c as usize].name;
            g.keys.iter().copied().find(|&i| view.keys[i].name == *name)
        })
        .collect();
    let cols = g
        .columns
        .iter()
        .map(|(name, _)| {
            t.column(name).map_err(|_| fs_err(INCORRECT_PRIMARY_KEY, format!("Column does not exist. Column: {name}")))
        })
        .collect();
    Ok(Resolved { t, keys, cols })
}

/// Serves a parsed request: single when `batch` is false.
pub async fn serve(client: &Client, view: &View, r: &FsRequest, batch: bool) -> Answer {
    match serve_inner(client, view, r, batch).await {
        Ok(a) => a,
        Err(e) => Answer::Error(e),
    }
}

async fn serve_inner(client: &Client, view: &View, r: &FsRequest, batch: bool) -> Result<Answer, FsError> {
    if batch {
        if r.entries.is_empty() {
            return Ok(Answer::Text(400, "No primary key is given.".into()));
        }
        if !r.passed.is_empty() && r.passed.len() != r.entries.len() {
            return Ok(Answer::Text(
                400,
                "Length of passed feature does not equal to that of the entries provided in the request.".into(),
            ));
        }
    }
    let empty = Map::new();
    let passed = |i: usize| r.passed.get(i).unwrap_or(&empty);
    // Per entry: its validation outcome (a batch marks a bad entry ERROR; a single request fails).
    let mut ok = Vec::with_capacity(r.entries.len());
    for (i, e) in r.entries.iter().enumerate() {
        let check =
            view.check_entry(e).and_then(|_| if r.validate_passed { view.check_passed(passed(i)) } else { Ok(()) });
        match check {
            Err(err) if !batch => return Err(err),
            c => ok.push(c.is_ok()),
        }
    }
    // The key reads (each group's table resolved when first needed).
    let mut resolved: Vec<Option<Resolved>> = view.reads.iter().map(|_| None).collect();
    let (mut plans, mut ops) = (Vec::new(), Vec::new());
    for (i, e) in r.entries.iter().enumerate().filter(|(i, _)| ok[*i]) {
        for (j, g) in view.reads.iter().enumerate() {
            let res = match &mut resolved[j] {
                Some(res) => res,
                slot => slot.insert(resolve(client, view, g)?),
            };
            let op = plan_read(view, res, e)?;
            plans.push(Planned { entry: i, read: j, read_op: op.is_some() });
            ops.extend(op);
        }
    }
    let mut results = Vec::with_capacity(ops.len());
    while !ops.is_empty() {
        let rest = ops.split_off(ops.len().min(READS_PER_TXN));
        let mut txn = client.begin();
        let rs = txn
            .execute_with(std::mem::replace(&mut ops, rest), Exec::Commit, AbortOption::IgnoreError)
            .await
            .map_err(|e| fs_err(READ_FROM_DB_FAIL, e.message).with_status(500))?;
        results.extend(rs);
    }
    let mut vectors: Vec<Option<Vector>> = ok
        .iter()
        .map(|&good| good.then(|| Vector { slots: vec![None; view.names.len()], status: "COMPLETE", detailed: vec![] }))
        .collect();
    let mut results = results.into_iter();
    for p in &plans {
        let v = vectors[p.entry].as_mut().expect("planned entries are valid");
        let g = &view.reads[p.read];
        if !p.read_op {
            // A key of this group is missing from the entry.
            v.status = "MISSING";
            v.detailed.push((g.fg, 400));
            continue;
        }
        let Some(Resolved { t, cols: Ok(cols), .. }) = &resolved[p.read] else {
            return Err(fs_err(READ_FROM_DB_FAIL, "a planned read lost its table").with_status(500));
        };
        match results.next() {
            Some(OpResult::Row(bytes)) => {
                let values = t.decode_projection(cols, &bytes).map_err(|e| fs_err(READ_FROM_DB_FAIL, e.message))?;
                for ((&c, value), (_, pos)) in cols.iter().zip(&values).zip(&g.columns) {
                    if !value.is_null() {
                        let mut s = String::new();
                        push_value(&mut s, t.table.columns[c as usize].ty, value);
                        v.slots[*pos] = Some(s);
                    }
                }
                v.detailed.push((g.fg, 200));
            }
            Some(OpResult::NotFound) => {
                v.status = "MISSING";
                v.detailed.push((g.fg, 404));
            }
            _ => {
                v.status = "ERROR";
                v.detailed.push((g.fg, 500));
            }
        }
    }
    for (i, v) in vectors.iter_mut().enumerate() {
        if let Some(v) = v {
            view.fill_keys(&r.entries[i], &mut v.slots);
            for (k, value) in passed(i) {
                for &p in view.by_name.get(k).map(|p| p.as_slice()).unwrap_or(&[]) {
                    v.slots[p] = Some(value.to_string());
                }
            }
        }
    }
    Ok(Answer::Json(render(view, r, &vectors, batch)))
}

impl FsError {
    fn with_status(mut self, status: u16) -> FsError {
        self.status = status;
        self
    }
}

/// The key read of a resolved group for an entry (None: a key value is missing).
fn plan_read(view: &View, res: &Resolved, entry: &Map<String, Json>) -> Result<Option<KeyOp>, FsError> {
    let t = &res.t;
    let mut key = Vec::with_capacity(res.keys.len());
    for (&c, k) in t.table.primary_key.iter().zip(&res.keys) {
        let col = &t.table.columns[c as usize];
        let Some(k) = k.map(|i| &view.keys[i]) else { return Ok(None) };
        let Some(json) = view.key_value(k, entry) else { return Ok(None) };
        let v = parse_value(col, json, true).map_err(|e: RestError| {
            // rdrs2 names the type from the data node's "Wrong data type. Expecting X." text.
            let ty = e.message.split("Expecting ").nth(1).and_then(|t| t.split(['.', ' ']).next());
            match ty {
                Some(ty) => fs_err(WRONG_DATA_TYPE, format!("Primary key '{}' should be in '{ty}' format.", col.name)),
                None => fs_err(WRONG_DATA_TYPE, e.message),
            }
        })?;
        key.push(v);
    }
    let cols = res.cols.as_ref().map_err(|e| e.clone())?;
    let op = t.read_columns_owned(key, cols).map_err(|e| fs_err(INCORRECT_PRIMARY_KEY, e.message))?;
    Ok(Some(op))
}

fn push_slots(out: &mut String, slots: &[Option<String>]) {
    out.push('[');
    for (i, s) in slots.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(s.as_deref().unwrap_or("null"));
    }
    out.push(']');
}

fn push_detailed(out: &mut String, d: &[(i64, u16)]) {
    out.push('[');
    for (i, (fg, status)) in d.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&format!("{{\"featureGroupId\": {fg}, \"httpStatus\": {status}}}"));
    }
    out.push(']');
}

fn render(view: &View, r: &FsRequest, vectors: &[Option<Vector>], batch: bool) -> String {
    let mut out = String::with_capacity(64 + 16 * view.names.len() * vectors.len());
    out.push_str("{\"features\": ");
    if batch {
        out.push('[');
        for (i, v) in vectors.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            match v {
                Some(v) => push_slots(&mut out, &v.slots),
                None => out.push_str("null"),
            }
        }
        out.push(']');
    } else {
        push_slots(&mut out, &vectors[0].as_ref().expect("a valid single entry").slots);
    }
    out.push_str(", \"metadata\": ");
    match r.metadata {
        None => out.push_str("null"),
        Some((name, ty)) => {
            out.push('[');
            for (i, (n, t)) in view.names.iter().zip(&view.types).enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("{\"featureName\": ");
                if name {
                    push_json_str(&mut out, n)
                } else {
                    out.push_str("null")
                }
                out.push_str(", \"featureType\": ");
                if ty {
                    push_json_str(&mut out, t)
                } else {
                    out.push_str("null")
                }
                out.push('}');
            }
            out.push(']');
        }
    }
    out.push_str(", \"status\": ");
    let status = |v: &Option<Vector>| format!("\"{}\"", v.as_ref().map_or("ERROR", |v| v.status));
    if batch {
        out.push('[');
        out.push_str(&vectors.iter().map(status).collect::<Vec<_>>().join(","));
        out.push(']');
    } else {
        out.push_str(&status(&vectors[0]));
    }
    out.push_str(", \"detailedStatus\": ");
    if !r.detailed {
        out.push_str("null");
    } else if batch {
        out.push('[');
        for (i, v) in vectors.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            match v {
                Some(v) => push_detailed(&mut out, &v.detailed),
                None => out.push_str("null"),
            }
        }
        out.push(']');
    } else {
        push_detailed(&mut out, &vectors[0].as_ref().expect("valid").detailed);
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_validated_with_rdrs2_texts() {
        let text = |a: Answer| match a {
            Answer::Text(400, t) => t,
            other => panic!("{other:?}"),
        };
        let e = |body: &str, batch: bool| text(parse(body, batch).unwrap_err());
        assert_eq!(
            e(r#"{"featureViewName":"v","featureViewVersion":1,"entries":{"id":1}}"#, false),
            "Error:Field validation for 'Body' failed featureStoreName"
        );
        assert_eq!(
            e(r#"{"featureStoreName":"","featureViewName":"v","featureViewVersion":1,"entries":{"id":1}}"#, false),
            "Error:Field validation for 'Body' failed featureStoreName"
        );
        assert_eq!(
            e(r#"{"featureStoreName":"s","featureViewName":"v","featureViewVersion":"1","entries":{"id":1}}"#, false),
            "Error:Field validation for 'Body' failed featureViewVersion"
        );
        assert_eq!(
            e(r#"{"featureStoreName":"s","featureViewName":"v","featureViewVersion":1,"entries":{"id":null}}"#, false),
            "Error:Field validation for 'Body' failed id"
        );
        assert_eq!(
            e(
                r#"{"featureStoreName":"s","featureViewName":"v","featureViewVersion":1,"entries":{"id":1},"options":{"x":true}}"#,
                false
            ),
            "Error:Field validation for 'Body' failed xoptions"
        );
        assert_eq!(
            e(r#"{"featureStoreName":"s","featureViewName":"v","featureViewVersion":1,"entries":{"id":1}}"#, true),
            "Error:Field validation for 'Body' failed entries"
        );
        let r = parse(
            r#"{"featureStoreName":"s","featureViewName":"v","featureViewVersion":2,"entries":[{"id":1},{"id":2}],
               "passedFeatures":[null,{"x":5}],"metadataOptions":{"featureType":true},"options":{"includeDetailedStatus":true}}"#,
            true,
        )
        .unwrap();
        assert_eq!((r.version, r.entries.len(), r.passed.len()), (2, 2, 2));
        assert!(r.passed[0].is_empty() && r.passed[1]["x"] == 5);
        assert_eq!(r.metadata, Some((false, true)));
        assert!(r.validate_passed && r.detailed);
    }

    #[test]
    fn passed_feature_types_follow_offline_types() {
        assert_eq!(expected_json_type("bigint"), "NUMBER");
        assert_eq!(expected_json_type("decimal"), "NUMBER");
        assert_eq!(expected_json_type("timestamp"), "STRING");
        assert_eq!(expected_json_type("array<bigint>"), "OTHER");
        assert_eq!(json_type(&serde_json::json!(true)), "BOOLEAN");
        let e = fs_err(FS_NOT_EXIST, "");
        assert_eq!(e.body(), r#"{"code": 2, "reason": "Feature store does not exist.", "message": ""}"#);
    }
}
