//! `information_schema` as virtual tables built from the catalog: SCHEMATA, TABLES, COLUMNS,
//! STATISTICS. They plan like other tables (their rows are produced here instead of by a data
//! node scan, and the query's conditions are applied to them as usual).

use super::ddl;
use tern_client::TableHandle;
use tern_types::schema::Catalog;
use tern_types::{Column, ColumnType, Table, Value};

pub const DB: &str = "information_schema";
pub const TABLES: [&str; 6] = ["COLUMNS", "ROUTINES", "SCHEMATA", "STATISTICS", "TABLES", "TRIGGERS"];

/// Whether `db` is one of the virtual databases (information_schema, ndbinfo): rows made by
/// Tern, not stored by data nodes.
pub fn is_virtual(db: &str) -> bool {
    db.eq_ignore_ascii_case(DB) || db.eq_ignore_ascii_case(super::ndbinfo::DB)
}

fn vc(name: &str) -> Column {
    Column::new(name, ColumnType::VarChar { len: 64 })
}
fn num(name: &str) -> Column {
    Column::new(name, ColumnType::BigInt { unsigned: true })
}

/// The definition of a virtual table (None: not one of ours).
pub fn table(name: &str) -> Option<TableHandle> {
    let upper = name.to_ascii_uppercase();
    let (id, cols): (u32, Vec<Column>) = match upper.as_str() {
        "SCHEMATA" => (
            u32::MAX - 1,
            vec![
                vc("CATALOG_NAME"),
                vc("SCHEMA_NAME"),
                vc("DEFAULT_CHARACTER_SET_NAME"),
                vc("DEFAULT_COLLATION_NAME"),
                vc("SQL_PATH"),
            ],
        ),
        "TABLES" => (
            u32::MAX - 2,
            vec![
                vc("TABLE_CATALOG"),
                vc("TABLE_SCHEMA"),
                vc("TABLE_NAME"),
                vc("TABLE_TYPE"),
                vc("ENGINE"),
                num("VERSION"),
                vc("ROW_FORMAT"),
                num("TABLE_ROWS"),
                num("AUTO_INCREMENT"),
                vc("TABLE_COLLATION"),
                Column::new("TABLE_COMMENT", ColumnType::VarChar { len: 2048 }),
            ],
        ),
        "COLUMNS" => (
            u32::MAX - 3,
            vec![
                vc("TABLE_CATALOG"),
                vc("TABLE_SCHEMA"),
                vc("TABLE_NAME"),
                vc("COLUMN_NAME"),
                num("ORDINAL_POSITION"),
                Column::new("COLUMN_DEFAULT", ColumnType::Text),
                vc("IS_NULLABLE"),
                vc("DATA_TYPE"),
                num("CHARACTER_MAXIMUM_LENGTH"),
                num("NUMERIC_PRECISION"),
                num("NUMERIC_SCALE"),
                vc("CHARACTER_SET_NAME"),
                vc("COLLATION_NAME"),
                Column::new("COLUMN_TYPE", ColumnType::VarChar { len: 255 }),
                vc("COLUMN_KEY"),
                vc("EXTRA"),
                Column::new("COLUMN_COMMENT", ColumnType::VarChar { len: 1024 }),
                // Tern has no generated columns: always empty (mariadb-dump asks for it).
                Column::new("GENERATION_EXPRESSION", ColumnType::Text),
            ],
        ),
        "STATISTICS" => (
            u32::MAX - 4,
            vec![
                vc("TABLE_CATALOG"),
                vc("TABLE_SCHEMA"),
                vc("TABLE_NAME"),
                num("NON_UNIQUE"),
                vc("INDEX_SCHEMA"),
                vc("INDEX_NAME"),
                num("SEQ_IN_INDEX"),
                vc("COLUMN_NAME"),
                vc("INDEX_TYPE"),
            ],
        ),
        // Tern has neither triggers nor stored routines: empty, for tools that ask (mariadb-dump).
        "TRIGGERS" => (
            u32::MAX - 5,
            vec![
                vc("TRIGGER_CATALOG"),
                vc("TRIGGER_SCHEMA"),
                vc("TRIGGER_NAME"),
                vc("EVENT_MANIPULATION"),
                vc("EVENT_OBJECT_CATALOG"),
                vc("EVENT_OBJECT_SCHEMA"),
                vc("EVENT_OBJECT_TABLE"),
                num("ACTION_ORDER"),
                Column::new("ACTION_STATEMENT", ColumnType::Text),
                vc("ACTION_TIMING"),
                vc("DEFINER"),
            ],
        ),
        "ROUTINES" => (
            u32::MAX - 6,
            vec![
                vc("SPECIFIC_NAME"),
                vc("ROUTINE_CATALOG"),
                vc("ROUTINE_SCHEMA"),
                vc("ROUTINE_NAME"),
                vc("ROUTINE_TYPE"),
                Column::new("ROUTINE_DEFINITION", ColumnType::Text),
                vc("DEFINER"),
            ],
        ),
        _ => return None,
    };
    let mut t = Table::new(DB, &upper, cols, vec![0]);
    t.id = id;
    t.partition_count = 1;
    Some(TableHandle::new(t))
}

fn s(v: &str) -> Value {
    Value::Bytes(v.as_bytes().to_vec())
}

/// Numeric precision/scale and character length of a column type, as information_schema says.
fn sizes(t: ColumnType) -> (Value, Value, Value) {
    use ColumnType as C;
    let n = |v: u64| Value::UInt(v);
    match t {
        C::TinyInt { .. } => (Value::Null, n(3), n(0)),
        C::SmallInt { .. } => (Value::Null, n(5), n(0)),
        C::MediumInt { .. } => (Value::Null, n(7), n(0)),
        C::Int { .. } => (Value::Null, n(10), n(0)),
        C::BigInt { unsigned } => (Value::Null, n(if unsigned { 20 } else { 19 }), n(0)),
        C::Float => (Value::Null, n(12), Value::Null),
        C::Double => (Value::Null, n(22), Value::Null),
        C::Decimal { precision, scale, .. } => (Value::Null, n(precision as u64), n(scale as u64)),
        C::Char { len } | C::VarChar { len } | C::Binary { len } | C::VarBinary { len } => {
            (n(len as u64), Value::Null, Value::Null)
        }
        C::Text | C::Blob => (n(65535), Value::Null, Value::Null),
        _ => (Value::Null, Value::Null, Value::Null),
    }
}

fn data_type(t: ColumnType) -> String {
    let full = ddl::type_text(t);
    full.split(['(', ' ']).next().unwrap_or("").to_string()
}

/// The rows of a virtual table.
pub fn rows(cat: &Catalog, name: &str) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    let tables = || {
        let mut v: Vec<&Table> = cat.tables.values().filter(|t| !cat.is_index_table(t.id)).collect();
        v.sort_by(|a, b| (&a.database, &a.name).cmp(&(&b.database, &b.name)));
        v
    };
    match name {
        "SCHEMATA" => {
            let mut dbs: Vec<String> = cat.databases.keys().cloned().collect();
            dbs.push(DB.into());
            dbs.sort();
            for d in dbs {
                out.push(vec![s("def"), s(&d), s("utf8mb4"), s("utf8mb4_bin"), Value::Null]);
            }
        }
        "TABLES" => {
            for t in tables() {
                let auto = if t.columns.iter().any(|c| c.auto_increment && !c.hidden) {
                    cat.auto_inc_high.get(&t.id).map(|v| Value::UInt(*v + 1)).unwrap_or(Value::UInt(1))
                } else {
                    Value::Null
                };
                out.push(vec![
                    s("def"),
                    s(&t.database),
                    s(&t.name),
                    s("BASE TABLE"),
                    s("ndbcluster"),
                    Value::UInt(10),
                    s("Dynamic"),
                    Value::Null,
                    auto,
                    s("utf8mb4_bin"),
                    s(&t.comment),
                ]);
            }
            for v in TABLES {
                out.push(vec![
                    s("def"),
                    s(DB),
                    s(v),
                    s("SYSTEM VIEW"),
                    Value::Null,
                    Value::UInt(10),
                    Value::Null,
                    Value::Null,
                    Value::Null,
                    s("utf8mb3_general_ci"),
                    s(""),
                ]);
            }
        }
        "COLUMNS" => {
            for t in tables() {
                for (i, c) in t.columns.iter().enumerate().filter(|(_, c)| !c.hidden) {
                    let (len, prec, scale) = sizes(c.ty);
                    let key = ddl::column_key(t, i);
                    let text = c.ty.is_text();
                    out.push(vec![
                        s("def"),
                        s(&t.database),
                        s(&t.name),
                        s(&c.name),
                        Value::UInt(i as u64 + 1),
                        ddl::default_text(c).map(|d| Value::Bytes(d.into_bytes())).unwrap_or(Value::Null),
                        s(if c.nullable { "YES" } else { "NO" }),
                        s(&match &c.members {
                            Some(m) if m.set => "set".to_string(),
                            Some(_) => "enum".to_string(),
                            None => data_type(c.ty),
                        }),
                        len,
                        prec,
                        scale,
                        if text { s("utf8mb4") } else { Value::Null },
                        if text { s("utf8mb4_bin") } else { Value::Null },
                        s(&ddl::column_type_text(c)),
                        s(key),
                        s(if c.auto_increment { "auto_increment" } else { "" }),
                        s(""),
                        s(""),
                    ]);
                }
            }
        }
        "STATISTICS" => {
            for t in tables() {
                for idx in &t.indexes {
                    if t.columns.iter().any(|c| c.hidden) && idx.name == "PRIMARY" {
                        continue;
                    }
                    for (k, &c) in idx.columns.iter().enumerate() {
                        out.push(vec![
                            s("def"),
                            s(&t.database),
                            s(&t.name),
                            Value::UInt(!(idx.unique || idx.name == "PRIMARY") as u64),
                            s(&t.database),
                            s(&idx.name),
                            Value::UInt(k as u64 + 1),
                            s(&t.columns[c as usize].name),
                            s("BTREE"),
                        ]);
                    }
                }
            }
        }
        _ => {}
    }
    out
}
