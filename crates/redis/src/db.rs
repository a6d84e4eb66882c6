//! How Redis data is stored: database `n` is the SQL database `redis_<n>` with ordinary tables
//! (interfaces.md §2, following RonDB's Rondis layout in spirit):
//!
//! * `string_keys(redis_key VARBINARY(3000) PRIMARY KEY, rondb_key, value_type, tot_value_len,
//!   num_rows, value_start VARBINARY(8000), expiry_date DATETIME(3) NULL)` with
//!   `TTL=0@expiry_date`: one row per key of any type. For a string, `value_start` holds the
//!   first 8000 bytes and `num_rows` overflow rows hold the rest; for a hash `tot_value_len`
//!   counts its fields. `rondb_key` (0 when unused) names the key's overflow or field rows; a key
//!   that is written anew gets a fresh one, so rows left by an expired key never resurface.
//! * `string_values(rondb_key, ordinal, value BLOB)`: overflow parts of up to 65,535 bytes.
//! * `hset_keys(rondb_key, field VARBINARY(3000), value BLOB)` (values up to 65,535 bytes), partitioned by `rondb_key`, so a hash is
//!   read with one pruned scan.
//! * `list_values(rondb_key, position BIGINT, value BLOB)`: a list's elements at consecutive
//!   positions; the key row's `value_start` holds the first position (decimal), `tot_value_len`
//!   the length and `num_rows` a change counter. Every index, end and range is a primary-key
//!   read (position = first + index), so LINDEX, LSET, pushes and pops cost O(1) at any length.
//! * `set_members(rondb_key, member VARBINARY(3000))` with the ordered index `by_key`
//!   (`rondb_key`): a set's members in byte order, read with one index range of one partition.
//! * `zset_members(rondb_key, member VARBINARY(3000), score DOUBLE)` with the ordered index
//!   `by_score` (`rondb_key`, `score`; the primary key follows, so equal scores order by
//!   member bytes, as redis orders them): score lookups by primary key, ranges by the index.
//!
//! Hashes, sets and sorted sets count their members in `tot_value_len` and keep a change
//! counter in `value_start`, so that every change of a collection changes its key row (WATCH).
//! All child tables are partitioned by `rondb_key`: a collection lives in one partition.
//!
//! Expired keys vanish at once because the data node hides rows past their TTL; the purger here
//! deletes them (and their parts and fields) in the background.

use std::time::{SystemTime, UNIX_EPOCH};
use tern_client::{Client, Column, ColumnType, DdlReq, ErrorCode, KeyOp, OpKind, Table, TableHandle, TernError, Value};
use tern_types::schema::{Ttl, TtlCascade};

pub const KEY_MAX: usize = 3000;
pub const INLINE_MAX: usize = 8000;
/// A BLOB column holds up to 65,535 bytes (as in MySQL).
pub const PART_MAX: usize = 65_535;
pub const HASH_VALUE_MAX: usize = 65_535;
/// redis-server's `proto-max-bulk-len` and string size limit.
pub const VALUE_MAX: usize = 512 << 20;

// string_keys columns.
pub const K_KEY: u16 = 0;
pub const K_ID: u16 = 1;
pub const K_TYPE: u16 = 2;
pub const K_LEN: u16 = 3;
pub const K_PARTS: u16 = 4;
pub const K_VALUE: u16 = 5;
pub const K_EXPIRY: u16 = 6;
/// Every column but the key, in this order (see `Meta`).
pub const META: [u16; 6] = [K_ID, K_TYPE, K_LEN, K_PARTS, K_VALUE, K_EXPIRY];
/// The columns of a replaced key row that its clean-up needs (`write_meta` returns these; decode
/// with `Meta::decode_old`): not the inline value, which would be copied for nothing.
pub const OLD: [u16; 3] = [K_ID, K_TYPE, K_PARTS];

pub const TYPE_STRING: u8 = 0;
pub const TYPE_HASH: u8 = 1;
pub const TYPE_LIST: u8 = 2;
pub const TYPE_SET: u8 = 3;
pub const TYPE_ZSET: u8 = 4;

/// The child tables of `string_keys`: rows under a key's `rondb_key` (first column of each).
pub const CHILDREN: [&str; 5] = ["string_values", "hset_keys", "list_values", "set_members", "zset_members"];
/// The ordered index of `set_members` on `rondb_key` (a set's members in byte order) and of
/// `zset_members` on (`rondb_key`, `score`) (a sorted set in redis's order: score, then member).
pub const SET_INDEX: &str = "by_key";
pub const ZSET_INDEX: &str = "by_score";

/// The tables of one Redis database.
pub struct Db {
    pub index: u32,
    pub keys: TableHandle,
    pub values: TableHandle,
    pub hashes: TableHandle,
    pub lists: TableHandle,
    pub sets: TableHandle,
    pub zsets: TableHandle,
    pub set_index: tern_types::schema::Index,
    pub zset_index: tern_types::schema::Index,
    /// The types of `META`'s and `OLD`'s columns (decoding a key row's `Meta`).
    meta_types: Vec<ColumnType>,
    old_types: Vec<ColumnType>,
}

pub fn db_name(index: u32) -> String {
    format!("redis_{index}")
}

fn vb(len: u32) -> ColumnType {
    ColumnType::VarBinary { len }
}

fn table(db: &str, name: &str, columns: Vec<Column>, pk: Vec<u16>, partition_key: Vec<u16>) -> Table {
    Table {
        id: 0,
        database: db.into(),
        name: name.into(),
        columns,
        primary_key: pk,
        partition_key,
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    }
}

/// The table definitions of database `redis_<index>`.
pub fn definitions(index: u32) -> [Table; 6] {
    let db = db_name(index);
    let u64c = ColumnType::BigInt { unsigned: true };
    let mut keys = table(
        &db,
        "string_keys",
        vec![
            Column::new("redis_key", vb(KEY_MAX as u32)).not_null(),
            Column::new("rondb_key", u64c).not_null(),
            Column::new("value_type", ColumnType::TinyInt { unsigned: true }).not_null(),
            Column::new("tot_value_len", u64c).not_null(),
            Column::new("num_rows", ColumnType::Int { unsigned: true }).not_null(),
            Column::new("value_start", vb(INLINE_MAX as u32)).not_null(),
            Column::new("expiry_date", ColumnType::DateTime { fsp: 3 }),
        ],
        vec![0],
        vec![0],
    );
    // The data node's purge deletes an expired key's overflow parts and hash fields with it.
    keys.ttl = Some(Ttl {
        column: K_EXPIRY,
        seconds: 0,
        cascade: CHILDREN.map(|child| TtlCascade { child: child.into(), column: K_ID }).to_vec(),
    });
    keys.comment = "NDB_TABLE=TTL=0@expiry_date".into();
    let values = table(
        &db,
        "string_values",
        vec![
            Column::new("rondb_key", u64c).not_null(),
            Column::new("ordinal", ColumnType::Int { unsigned: true }).not_null(),
            Column::new("value", ColumnType::Blob).not_null(),
        ],
        vec![0, 1],
        vec![0, 1],
    );
    let hashes = table(
        &db,
        "hset_keys",
        vec![
            Column::new("rondb_key", u64c).not_null(),
            Column::new("field", vb(KEY_MAX as u32)).not_null(),
            Column::new("value", ColumnType::Blob).not_null(),
        ],
        vec![0, 1],
        vec![0],
    );
    let lists = table(
        &db,
        "list_values",
        vec![
            Column::new("rondb_key", u64c).not_null(),
            Column::new("position", ColumnType::BigInt { unsigned: false }).not_null(),
            Column::new("value", ColumnType::Blob).not_null(),
        ],
        vec![0, 1],
        vec![0],
    );
    let mut sets = table(
        &db,
        "set_members",
        vec![Column::new("rondb_key", u64c).not_null(), Column::new("member", vb(KEY_MAX as u32)).not_null()],
        vec![0, 1],
        vec![0],
    );
    sets.indexes = vec![tern_types::schema::Index { id: 0, name: SET_INDEX.into(), columns: vec![0], unique: false }];
    let mut zsets = table(
        &db,
        "zset_members",
        vec![
            Column::new("rondb_key", u64c).not_null(),
            Column::new("member", vb(KEY_MAX as u32)).not_null(),
            Column::new("score", ColumnType::Double).not_null(),
        ],
        vec![0, 1],
        vec![0],
    );
    zsets.indexes =
        vec![tern_types::schema::Index { id: 0, name: ZSET_INDEX.into(), columns: vec![0, 2], unique: false }];
    [keys, values, hashes, lists, sets, zsets]
}

/// Opens database `index`, creating its SQL database and tables when missing (blocking).
pub async fn open(client: &Client, index: u32) -> Result<Db, TernError> {
    let name = db_name(index);
    let defs = definitions(index);
    let have = |t: &str| client.table(&name, t).ok();
    if defs.iter().any(|t| have(&t.name).is_none()) {
        client.ddl_async(DdlReq::CreateDatabase { name: name.clone(), if_not_exists: true }).await?;
        for t in defs {
            match client.ddl_async(DdlReq::CreateTable { table: t, if_not_exists: true }).await {
                Ok(_) => {}
                Err(e) if e.code == ErrorCode::TableExists => {}
                Err(e) => return Err(e),
            }
        }
        client.refresh_catalog_async().await?;
    }
    let keys = client.table(&name, "string_keys")?;
    let meta_types = META.iter().map(|&c| keys.table.columns[c as usize].ty).collect();
    let old_types = OLD.iter().map(|&c| keys.table.columns[c as usize].ty).collect();
    Ok(Db {
        index,
        keys,
        values: client.table(&name, "string_values")?,
        hashes: client.table(&name, "hset_keys")?,
        lists: client.table(&name, "list_values")?,
        set_index: client.table(&name, "set_members")?.index(SET_INDEX)?,
        sets: client.table(&name, "set_members")?,
        zset_index: client.table(&name, "zset_members")?.index(ZSET_INDEX)?,
        zsets: client.table(&name, "zset_members")?,
        meta_types,
        old_types,
    })
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A key row's columns (all but the key).
#[derive(Debug, Clone, PartialEq)]
pub struct Meta {
    pub id: u64,
    pub kind: u8,
    pub len: u64,
    pub parts: u32,
    pub start: Vec<u8>,
    /// Expiry in ms since the Unix epoch.
    pub expiry: Option<i64>,
}

impl Meta {
    pub fn string(value: &[u8]) -> Meta {
        Meta::string_owned(value.to_vec())
    }

    /// `string` taking the (inline) value.
    pub fn string_owned(value: Vec<u8>) -> Meta {
        Meta { id: 0, kind: TYPE_STRING, len: value.len() as u64, parts: 0, start: value, expiry: None }
    }

    pub fn hash(id: u64) -> Meta {
        Meta::collection(TYPE_HASH, id)
    }

    /// An empty collection (hash, list, set or sorted set) whose member rows go under `id`.
    pub fn collection(kind: u8, id: u64) -> Meta {
        Meta { id, kind, len: 0, parts: 0, start: Vec::new(), expiry: None }
    }

    /// A string's length (an in-node INCR rewrites `value_start` only, so inline strings are
    /// measured there).
    pub fn strlen(&self) -> u64 {
        if self.parts == 0 { self.start.len() as u64 } else { self.len }
    }

    pub fn decode(db: &Db, bytes: &[u8]) -> Result<Meta, TernError> {
        let mut v = tern_types::row::decode_values(&db.meta_types, &mut &bytes[..])?;
        let u = |x: &Value| x.as_i128().unwrap_or(0);
        Ok(Meta {
            id: u(&v[0]) as u64,
            kind: u(&v[1]) as u8,
            len: u(&v[2]) as u64,
            parts: u(&v[3]) as u32,
            start: match std::mem::replace(&mut v[4], Value::Null) {
                Value::Bytes(b) => b,
                _ => Vec::new(),
            },
            expiry: match v[5] {
                Value::DateTime(us) => Some(us.div_euclid(1000)),
                _ => None,
            },
        })
    }

    /// A replaced key row as `write_meta` returns it (`OLD`: what its clean-up needs; no length,
    /// value or expiry).
    pub fn decode_old(db: &Db, bytes: &[u8]) -> Result<Meta, TernError> {
        let v = tern_types::row::decode_values(&db.old_types, &mut &bytes[..])?;
        let u = |x: &Value| x.as_i128().unwrap_or(0);
        Ok(Meta {
            id: u(&v[0]) as u64,
            kind: u(&v[1]) as u8,
            len: 0,
            parts: u(&v[2]) as u32,
            start: Vec::new(),
            expiry: None,
        })
    }

    /// The whole key row.
    pub fn row(&self, db: &Db, key: &[u8]) -> Result<Vec<u8>, TernError> {
        self.clone().into_row(db, key)
    }

    /// `row`, moving the inline value.
    pub fn into_row(self, db: &Db, key: &[u8]) -> Result<Vec<u8>, TernError> {
        db.keys.row_owned(vec![
            Value::Bytes(key.to_vec()),
            Value::UInt(self.id),
            Value::UInt(self.kind as u64),
            Value::UInt(self.len),
            Value::UInt(self.parts as u64),
            Value::Bytes(self.start),
            expiry_value(self.expiry),
        ])
    }
}

pub fn expiry_value(ms: Option<i64>) -> Value {
    match ms {
        Some(ms) => Value::DateTime(ms.saturating_mul(1000)),
        None => Value::Null,
    }
}

pub fn key_of(db: &Db, key: &[u8]) -> Result<Vec<u8>, TernError> {
    db.keys.key_owned(vec![Value::Bytes(key.to_vec())])
}

/// Read (committed, or locked) of a key row with its `Meta` columns.
pub fn read_meta(db: &Db, key: &[u8], kind: OpKind) -> Result<KeyOp, TernError> {
    let mut op = db.keys.read_columns_owned(vec![Value::Bytes(key.to_vec())], &META)?;
    op.kind = kind;
    Ok(op)
}

/// Writes a key row, returning the previous row's `OLD` columns (decode with
/// `Meta::decode_old`; NotFound when there was none).
pub fn write_meta(db: &Db, key: &[u8], meta: &Meta) -> Result<KeyOp, TernError> {
    write_meta_owned(db, key, meta.clone())
}

/// `write_meta` taking the `Meta` (its inline value moves into the row).
pub fn write_meta_owned(db: &Db, key: &[u8], meta: Meta) -> Result<KeyOp, TernError> {
    let row = meta.into_row(db, key)?;
    Ok(KeyOp {
        table: db.keys.id(),
        kind: OpKind::Write,
        key: db.keys.layout.key_of(&row).to_vec(),
        row,
        updates: Vec::new(),
        projection: Some(OLD.to_vec()),
    })
}

/// The overflow rows of a string value stored under `id` (value bytes past `INLINE_MAX`).
pub fn part_ops(db: &Db, id: u64, value: &[u8]) -> Result<Vec<KeyOp>, TernError> {
    value
        .get(INLINE_MAX..)
        .unwrap_or(&[])
        .chunks(PART_MAX)
        .enumerate()
        .map(|(i, c)| db.values.write(&[Value::UInt(id), Value::UInt(i as u64), Value::Bytes(c.to_vec())]))
        .collect()
}

/// Parts needed past the inline part for a value of `len` bytes.
pub fn parts_for(len: usize) -> u32 {
    len.saturating_sub(INLINE_MAX).div_ceil(PART_MAX) as u32
}

pub fn part_read(db: &Db, id: u64, ordinal: u32) -> Result<KeyOp, TernError> {
    db.values.read_columns(&[Value::UInt(id), Value::UInt(ordinal as u64)], &[2])
}

pub fn part_delete(db: &Db, id: u64, ordinal: u32) -> Result<KeyOp, TernError> {
    db.values.delete(&[Value::UInt(id), Value::UInt(ordinal as u64)])
}

pub fn field_key(field: &[u8], id: u64) -> [Value; 2] {
    [Value::UInt(id), Value::Bytes(field.to_vec())]
}

pub fn bytes_of(v: Value) -> Vec<u8> {
    match v {
        Value::Bytes(b) => b,
        _ => Vec::new(),
    }
}

/// Whether a redis key is too long to store.
pub fn check_key(key: &[u8]) -> Result<(), TernError> {
    if key.len() > KEY_MAX {
        return Err(TernError::new(ErrorCode::TooLarge, format!("keys are limited to {KEY_MAX} bytes")));
    }
    Ok(())
}
