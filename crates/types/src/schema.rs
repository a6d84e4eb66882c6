//! Schema structs: column types, columns, indexes, tables, databases and the catalog, with a
//! binary encoding used to persist the catalog and to ship it to clients.
//!
//! Invariants: table and index ids are never reused (ids grow monotonically in the catalog);
//! every table has a primary key (a hidden `$rowid` BIGINT UNSIGNED AUTO_INCREMENT column when
//! none is declared); the partition key is a non-empty subset of the primary key.

use crate::bin::{Dec, DecodeError, DecodeResult, Enc};
use crate::error::{ErrorCode, TernResult, err};
use crate::value::Value;
use std::collections::BTreeMap;

pub type TableId = u32;
pub type IndexId = u32;

/// Limits on identifiers and sizes, shared by every front end.
pub const IDENT_MAX_BYTES: usize = 64;
pub const COLUMNS_MAX: usize = 512;
pub const KEY_MAX_BYTES: usize = 4096;
pub use crate::column_type::{ColumnType, DECIMAL_PRECISION_MAX, ROW_MAX_BYTES};
pub const HIDDEN_ROWID: &str = "$rowid";

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub ty: ColumnType,
    pub nullable: bool,
    pub default: Option<Value>,
    pub auto_increment: bool,
    pub hidden: bool,
    /// The members of an SQL ENUM or SET column. Such a column is stored as text (its `ty` is a
    /// VARCHAR of the longest value), so the data node, REST and the native client see the
    /// member names; the SQL front end checks and normalises values against the members.
    pub members: Option<Members>,
}

/// Members of an ENUM (one of them) or a SET (any of them, comma-separated, in member order).
#[derive(Debug, Clone, PartialEq)]
pub struct Members {
    pub set: bool,
    pub values: Vec<String>,
}

/// Members one ENUM may have (MySQL's limit); a SET has at most 64.
pub const ENUM_MEMBERS_MAX: usize = 65_535;

impl Column {
    pub fn new(name: &str, ty: ColumnType) -> Column {
        Column {
            name: name.to_string(),
            ty,
            nullable: true,
            default: None,
            auto_increment: false,
            hidden: false,
            members: None,
        }
    }
    pub fn not_null(mut self) -> Column {
        self.nullable = false;
        self
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Index {
    pub id: IndexId,
    pub name: String,
    /// Column positions in the table.
    pub columns: Vec<u16>,
    pub unique: bool,
}

/// TTL option: rows are invisible once `now > column + seconds`; the data node's purge deletes
/// them in the background (`tern_kernel::purge`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ttl {
    pub column: u16,
    pub seconds: u32,
    /// Rows of other tables that the purge deletes with a purged row (an `ON DELETE CASCADE`
    /// that only the purge applies; the Redis front end's overflow and hash-field rows).
    pub cascade: Vec<TtlCascade>,
}

impl Ttl {
    pub fn new(column: u16, seconds: u32) -> Ttl {
        Ttl { column, seconds, cascade: Vec::new() }
    }
}

/// Rows of table `child` (same database) whose first column equals the purged row's `column`
/// are purged with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TtlCascade {
    pub child: String,
    pub column: u16,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub id: TableId,
    pub database: String,
    pub name: String,
    pub columns: Vec<Column>,
    /// Primary key column positions, in key order.
    pub primary_key: Vec<u16>,
    /// Partition key column positions: a subset of the primary key.
    pub partition_key: Vec<u16>,
    pub indexes: Vec<Index>,
    pub partition_count: u32,
    /// The node groups its partitions were spread over when it was created (partition `p`'s
    /// default home is group `p mod groups`; `cluster::ClusterState::home`). 0: the cluster's
    /// original node groups (`ClusterState::base_groups`; catalogs before format 3).
    pub groups: u32,
    pub ttl: Option<Ttl>,
    pub comment: String,
}

impl Table {
    /// A table definition with the usual defaults: partitioned by its whole primary key, no
    /// secondary indexes, the default partition count, no TTL. Ids are chosen by the catalog.
    pub fn new(database: &str, name: &str, columns: Vec<Column>, primary_key: Vec<u16>) -> Table {
        Table {
            id: 0,
            database: database.to_string(),
            name: name.to_string(),
            columns,
            partition_key: primary_key.clone(),
            primary_key,
            indexes: Vec::new(),
            partition_count: 0,
            groups: 0,
            ttl: None,
            comment: String::new(),
        }
    }

    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name.eq_ignore_ascii_case(name))
    }

    pub fn is_key_column(&self, col: usize) -> bool {
        self.primary_key.contains(&(col as u16))
    }

    pub fn index_by_name(&self, name: &str) -> Option<&Index> {
        self.indexes.iter().find(|i| i.name.eq_ignore_ascii_case(name))
    }

    /// Validates a table definition before it enters the catalog.
    pub fn validate(&self) -> TernResult<()> {
        check_ident("table", &self.name)?;
        if self.columns.is_empty() || self.columns.len() > COLUMNS_MAX {
            return err(ErrorCode::InvalidSchema, format!("a table needs 1..={COLUMNS_MAX} columns"));
        }
        for (i, c) in self.columns.iter().enumerate() {
            check_ident("column", &c.name)?;
            c.ty.validate()?;
            if self.columns[..i].iter().any(|o| o.name.eq_ignore_ascii_case(&c.name)) {
                return err(ErrorCode::InvalidSchema, format!("Duplicate column name '{}'", c.name));
            }
            if c.auto_increment && !c.ty.is_integer() {
                return err(ErrorCode::InvalidSchema, format!("Incorrect column specifier for column '{}'", c.name));
            }
        }
        if self.primary_key.is_empty() {
            return err(ErrorCode::InvalidSchema, "a table needs a primary key");
        }
        for &k in &self.primary_key {
            let c = self
                .columns
                .get(k as usize)
                .ok_or_else(|| crate::TernError::new(ErrorCode::InvalidSchema, "primary key names a missing column"))?;
            if c.nullable {
                return err(ErrorCode::InvalidSchema, format!("primary key column '{}' must be NOT NULL", c.name));
            }
            if !c.ty.indexable() {
                return err(
                    ErrorCode::InvalidSchema,
                    format!("column '{}' of type {} cannot be in a key", c.name, c.ty.sql_name()),
                );
            }
        }
        if self.partition_key.is_empty() || self.partition_key.iter().any(|p| !self.primary_key.contains(p)) {
            return err(ErrorCode::InvalidSchema, "the partition key must be a non-empty subset of the primary key");
        }
        if self.partition_count == 0 {
            return err(ErrorCode::InvalidSchema, "partition count must be at least 1");
        }
        for idx in &self.indexes {
            check_ident("index", &idx.name)?;
            if idx.columns.is_empty() {
                return err(ErrorCode::InvalidSchema, "an index needs at least one column");
            }
            for &c in &idx.columns {
                let col = self
                    .columns
                    .get(c as usize)
                    .ok_or_else(|| crate::TernError::new(ErrorCode::InvalidSchema, "index names a missing column"))?;
                if !col.ty.indexable() {
                    return err(ErrorCode::InvalidSchema, format!("column '{}' cannot be indexed", col.name));
                }
            }
        }
        Ok(())
    }

    pub fn encode(&self, e: &mut Enc) {
        e.u32(self.id);
        e.str(&self.database);
        e.str(&self.name);
        e.u32(self.columns.len() as u32);
        for c in &self.columns {
            e.str(&c.name);
            c.ty.encode(e);
            e.bool(c.nullable);
            e.bool(c.auto_increment);
            e.bool(c.hidden);
            match &c.default {
                None => e.u8(0),
                Some(v) => {
                    e.u8(1);
                    v.encode(e);
                }
            }
            match &c.members {
                None => e.u8(0),
                Some(m) => {
                    e.u8(if m.set { 2 } else { 1 });
                    e.u32(m.values.len() as u32);
                    m.values.iter().for_each(|v| e.str(v));
                }
            }
        }
        encode_u16s(e, &self.primary_key);
        encode_u16s(e, &self.partition_key);
        e.u32(self.indexes.len() as u32);
        for i in &self.indexes {
            e.u32(i.id);
            e.str(&i.name);
            encode_u16s(e, &i.columns);
            e.bool(i.unique);
        }
        e.u32(self.partition_count);
        e.u32(self.groups);
        match &self.ttl {
            None => e.u8(0),
            Some(t) => {
                // Tag 1 (no cascade) is what catalogs written before cascades hold.
                e.u8(if t.cascade.is_empty() { 1 } else { 2 });
                e.u16(t.column);
                e.u32(t.seconds);
                if !t.cascade.is_empty() {
                    e.u32(t.cascade.len() as u32);
                    for c in &t.cascade {
                        e.str(&c.child);
                        e.u16(c.column);
                    }
                }
            }
        }
        e.str(&self.comment);
    }

    pub fn decode(d: &mut Dec) -> DecodeResult<Table> {
        Self::decode_format(d, CATALOG_FORMAT)
    }

    /// A table as written by catalog format `format` (1 had no ENUM/SET members, 2 no `groups`).
    fn decode_format(d: &mut Dec, format: u16) -> DecodeResult<Table> {
        let id = d.u32()?;
        let database = d.string()?;
        let name = d.string()?;
        let n = d.len(COLUMNS_MAX)?;
        let mut columns = Vec::with_capacity(n);
        for _ in 0..n {
            let name = d.string()?;
            let ty = ColumnType::decode(d)?;
            let nullable = d.bool()?;
            let auto_increment = d.bool()?;
            let hidden = d.bool()?;
            let default = match d.u8()? {
                0 => None,
                1 => Some(Value::decode(d)?),
                _ => return Err(DecodeError("bad default tag")),
            };
            let members = match if format >= 2 { d.u8()? } else { 0 } {
                0 => None,
                t @ (1 | 2) => {
                    let n = d.len(ENUM_MEMBERS_MAX)?;
                    Some(Members { set: t == 2, values: (0..n).map(|_| d.string()).collect::<DecodeResult<_>>()? })
                }
                _ => return Err(DecodeError("bad members tag")),
            };
            columns.push(Column { name, ty, nullable, default, auto_increment, hidden, members });
        }
        let primary_key = decode_u16s(d)?;
        let partition_key = decode_u16s(d)?;
        let ni = d.len(COLUMNS_MAX)?;
        let mut indexes = Vec::with_capacity(ni);
        for _ in 0..ni {
            let id = d.u32()?;
            let name = d.string()?;
            let columns = decode_u16s(d)?;
            let unique = d.bool()?;
            indexes.push(Index { id, name, columns, unique });
        }
        let partition_count = d.u32()?;
        let groups = if format >= 3 { d.u32()? } else { 0 };
        let ttl = match d.u8()? {
            0 => None,
            tag @ (1 | 2) => {
                let mut t = Ttl::new(d.u16()?, d.u32()?);
                if tag == 2 {
                    let n = d.len(COLUMNS_MAX)?;
                    for _ in 0..n {
                        t.cascade.push(TtlCascade { child: d.string()?, column: d.u16()? });
                    }
                }
                Some(t)
            }
            _ => return Err(DecodeError("bad ttl tag")),
        };
        let comment = d.string()?;
        let t = Table {
            id,
            database,
            name,
            columns,
            primary_key,
            partition_key,
            indexes,
            partition_count,
            groups,
            ttl,
            comment,
        };
        let in_range = |v: &Vec<u16>| v.iter().all(|&c| (c as usize) < t.columns.len());
        let ttl_in_range = t.ttl.as_ref().is_none_or(|x| {
            (x.column as usize) < t.columns.len() && x.cascade.iter().all(|c| (c.column as usize) < t.columns.len())
        });
        if !in_range(&t.primary_key)
            || !in_range(&t.partition_key)
            || !t.indexes.iter().all(|i| in_range(&i.columns))
            || !ttl_in_range
        {
            return Err(DecodeError("column position out of range"));
        }
        Ok(t)
    }
}

fn encode_u16s(e: &mut Enc, v: &[u16]) {
    e.u32(v.len() as u32);
    for &x in v {
        e.u16(x);
    }
}

fn decode_u16s(d: &mut Dec) -> DecodeResult<Vec<u16>> {
    let n = d.len(COLUMNS_MAX)?;
    (0..n).map(|_| d.u16()).collect()
}

/// Checks a database, table, column or index name.
pub fn check_ident(what: &str, name: &str) -> TernResult<()> {
    if name.is_empty() {
        return err(ErrorCode::InvalidSchema, format!("{what} name is empty"));
    }
    if name.len() > IDENT_MAX_BYTES {
        return err(ErrorCode::InvalidSchema, format!("{what} name '{name}' is longer than {IDENT_MAX_BYTES} bytes"));
    }
    if name.chars().any(|c| c == '\0' || c as u32 > 0xFFFF) {
        return err(ErrorCode::InvalidSchema, format!("{what} name carries an invalid character"));
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq)]
pub struct Database {
    pub name: String,
}

/// The schema catalog: databases and tables, with a version that grows on every change.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Catalog {
    pub version: u64,
    pub next_table_id: TableId,
    pub next_index_id: IndexId,
    pub databases: BTreeMap<String, Database>,
    /// Tables by id; ids are never reused.
    pub tables: BTreeMap<TableId, Table>,
    /// Per table, the AUTO_INCREMENT value below which every value may have been handed out.
    pub auto_inc_high: BTreeMap<TableId, u64>,
    /// Unique index id -> its hidden index table (primary key = the index columns, values = the
    /// base table's primary key). The index table is what makes uniqueness hold across partitions.
    pub index_tables: BTreeMap<IndexId, TableId>,
}

const CATALOG_MAGIC: u32 = 0x5445_5243; // "TERC"
/// Format 2 added ENUM/SET members to columns; format 1 catalogs are still read.
const CATALOG_FORMAT: u16 = 3;

impl Catalog {
    pub fn new() -> Catalog {
        Catalog { version: 1, next_table_id: 1, next_index_id: 1, ..Default::default() }
    }

    pub fn table(&self, id: TableId) -> Option<&Table> {
        self.tables.get(&id)
    }

    pub fn find_table(&self, db: &str, name: &str) -> Option<&Table> {
        self.tables.values().find(|t| t.database == db && t.name == name)
    }

    /// User-visible tables of a database (hidden index tables excluded).
    pub fn tables_in(&self, db: &str) -> impl Iterator<Item = &Table> {
        self.tables.values().filter(move |t| t.database == db && !self.is_index_table(t.id))
    }

    pub fn is_index_table(&self, id: TableId) -> bool {
        self.index_tables.values().any(|&t| t == id)
    }

    /// The hidden index table that enforces a unique index, built from the base table.
    pub fn index_table_def(base: &Table, index: &Index) -> Table {
        let mut columns = Vec::new();
        for &c in &index.columns {
            let mut col = base.columns[c as usize].clone();
            col.nullable = false;
            col.default = None;
            col.auto_increment = false;
            columns.push(col);
        }
        for &k in &base.primary_key {
            let mut col = base.columns[k as usize].clone();
            col.name = format!("$pk_{}", col.name);
            col.default = None;
            col.auto_increment = false;
            col.hidden = true;
            columns.push(col);
        }
        let n = index.columns.len() as u16;
        Table {
            id: 0,
            database: base.database.clone(),
            name: format!("$unique_{}_{}", base.id, index.id),
            columns,
            primary_key: (0..n).collect(),
            partition_key: (0..n).collect(),
            indexes: Vec::new(),
            partition_count: base.partition_count,
            groups: base.groups,
            ttl: None,
            comment: format!("unique index {} of {}", index.name, base.name),
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut e = Enc::new(out);
        e.u32(CATALOG_MAGIC);
        e.u16(CATALOG_FORMAT);
        e.u64(self.version);
        e.u32(self.next_table_id);
        e.u32(self.next_index_id);
        e.u32(self.databases.len() as u32);
        for d in self.databases.values() {
            e.str(&d.name);
        }
        e.u32(self.tables.len() as u32);
        for t in self.tables.values() {
            t.encode(&mut e);
        }
        e.u32(self.auto_inc_high.len() as u32);
        for (t, v) in &self.auto_inc_high {
            e.u32(*t);
            e.u64(*v);
        }
        e.u32(self.index_tables.len() as u32);
        for (i, t) in &self.index_tables {
            e.u32(*i);
            e.u32(*t);
        }
    }

    pub fn decode(bytes: &[u8]) -> DecodeResult<Catalog> {
        let mut d = Dec::new(bytes);
        if d.u32()? != CATALOG_MAGIC {
            return Err(DecodeError("not a Tern catalog"));
        }
        let format = d.u16()?;
        if !(1..=CATALOG_FORMAT).contains(&format) {
            return Err(DecodeError("unknown catalog format version"));
        }
        let mut c =
            Catalog { version: d.u64()?, next_table_id: d.u32()?, next_index_id: d.u32()?, ..Default::default() };
        let nd = d.len(1 << 20)?;
        for _ in 0..nd {
            let name = d.string()?;
            c.databases.insert(name.clone(), Database { name });
        }
        let nt = d.len(1 << 20)?;
        for _ in 0..nt {
            let t = Table::decode_format(&mut d, format)?;
            c.tables.insert(t.id, t);
        }
        let na = d.len(1 << 20)?;
        for _ in 0..na {
            let t = d.u32()?;
            c.auto_inc_high.insert(t, d.u64()?);
        }
        let ni = d.len(1 << 20)?;
        for _ in 0..ni {
            let i = d.u32()?;
            c.index_tables.insert(i, d.u32()?);
        }
        if !d.is_empty() {
            return Err(DecodeError("trailing bytes after catalog"));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub fn sample_table() -> Table {
        Table {
            id: 7,
            database: "db".into(),
            name: "t".into(),
            columns: vec![
                Column::new("id", ColumnType::Int { unsigned: false }).not_null(),
                Column::new("name", ColumnType::VarChar { len: 20 }),
                Column { default: Some(Value::Int(5)), ..Column::new("n", ColumnType::BigInt { unsigned: true }) },
            ],
            primary_key: vec![0],
            partition_key: vec![0],
            indexes: vec![Index { id: 1, name: "k".into(), columns: vec![1], unique: false }],
            partition_count: 4,
            groups: 2,
            ttl: None,
            comment: String::new(),
        }
    }

    #[test]
    fn catalog_round_trip() {
        let mut c = Catalog::new();
        c.databases.insert("db".into(), Database { name: "db".into() });
        let t = sample_table();
        t.validate().unwrap();
        c.tables.insert(t.id, t);
        let mut buf = Vec::new();
        c.encode(&mut buf);
        assert_eq!(Catalog::decode(&buf).unwrap(), c);
        assert!(Catalog::decode(&buf[..buf.len() - 1]).is_err());
        assert!(Catalog::decode(b"garbage!").is_err());
    }

    /// A TTL is written with tag 1 (as before cascades existed) unless it has a cascade; both
    /// read back, and a cascade naming a missing column is refused.
    #[test]
    fn ttl_with_and_without_cascade() {
        for cascade in [vec![], vec![TtlCascade { child: "parts".into(), column: 0 }]] {
            let mut t = sample_table();
            t.columns.push(Column::new("at", ColumnType::DateTime { fsp: 0 }));
            t.ttl = Some(Ttl { column: 3, seconds: 60, cascade: cascade.clone() });
            let mut buf = Vec::new();
            t.encode(&mut Enc::new(&mut buf));
            assert_eq!(Table::decode(&mut Dec::new(&buf)).unwrap(), t);
            let tag = buf.len() - 4 - t.comment.len() - 6 - if cascade.is_empty() { 0 } else { 4 + 4 + 5 + 2 } - 1;
            assert_eq!(buf[tag], if cascade.is_empty() { 1 } else { 2 });
        }
        let mut t = sample_table();
        t.columns.push(Column::new("at", ColumnType::DateTime { fsp: 0 }));
        t.ttl = Some(Ttl { column: 3, seconds: 60, cascade: vec![TtlCascade { child: "p".into(), column: 9 }] });
        let mut buf = Vec::new();
        t.encode(&mut Enc::new(&mut buf));
        assert!(Table::decode(&mut Dec::new(&buf)).is_err());
    }

    /// ENUM/SET members survive the catalog, and a catalog of format 1 (written before
    /// members existed) is still read.
    #[test]
    fn members_and_format_1_catalogs() {
        let mut c = Catalog::new();
        c.databases.insert("db".into(), Database { name: "db".into() });
        let mut t = sample_table();
        t.columns.push(Column {
            members: Some(Members { set: true, values: vec!["a".into(), "b c".into()] }),
            ..Column::new("s", ColumnType::VarChar { len: 5 })
        });
        c.tables.insert(t.id, t);
        let mut buf = Vec::new();
        c.encode(&mut buf);
        assert_eq!(Catalog::decode(&buf).unwrap(), c);
        // Format 1: no member tag after each column's default.
        let mut c1 = Catalog::new();
        c1.tables.insert(7, sample_table());
        let mut v2 = Vec::new();
        c1.encode(&mut v2);
        let mut v1 = Vec::new();
        let mut pos = 0;
        for col in &sample_table().columns {
            let name = v2[pos..].windows(col.name.len() + 1).position(|w| &w[1..] == col.name.as_bytes()).unwrap()
                + pos
                + 1
                + col.name.len();
            // type (9), nullable, auto_increment, hidden, default (tag and value)
            let mut after = name + 9 + 3;
            after += match &col.default {
                None => 1,
                Some(v) => {
                    let mut b = Vec::new();
                    v.encode(&mut Enc::new(&mut b));
                    1 + b.len()
                }
            };
            assert_eq!(v2[after], 0, "no members");
            v1.extend_from_slice(&v2[pos..after]);
            pos = after + 1;
        }
        v1.extend_from_slice(&v2[pos..]);
        v1[4..6].copy_from_slice(&1u16.to_le_bytes());
        // Nor `groups` (after the partition count, 4): such tables have 0, the base groups.
        let at = v1.windows(8).rposition(|w| w == [4, 0, 0, 0, 2, 0, 0, 0]).unwrap();
        v1.drain(at + 4..at + 8);
        c1.tables.get_mut(&7).unwrap().groups = 0;
        assert_eq!(Catalog::decode(&v1).unwrap(), c1);
    }

    #[test]
    fn validation_rejects_bad_tables() {
        let mut t = sample_table();
        t.columns[0].nullable = true;
        assert!(t.validate().is_err());
        let mut t = sample_table();
        t.partition_key = vec![1];
        assert!(t.validate().is_err());
        let mut t = sample_table();
        t.columns[1].name = "ID".into();
        assert!(t.validate().is_err());
        assert!(ColumnType::Decimal { precision: 40, scale: 2, unsigned: false }.validate().is_err());
    }
}
