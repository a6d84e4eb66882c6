//! CREATE TABLE as Tern tables: MySQL column types mapped to `tern_types::ColumnType`, RonDB's
//! table options (`ENGINE=ndbcluster`, `COMMENT "NDB_TABLE=TTL=...,PARTITION_BALANCE=..."`,
//! `PARTITION BY KEY`), and the reverse for SHOW CREATE TABLE. Every table created here gets
//! an ordered index named `PRIMARY` over its declared primary key (as RonDB does), so primary
//! key ranges are index scans.

use super::ast::{ColumnSpec, CreateTable, Expr, IndexSpec, TypeName};
use crate::SqlError;
use tern_types::schema::{HIDDEN_ROWID, Index, Members, Ttl};
use tern_types::value::coerce;
use tern_types::{Column, ColumnType, Table, Value};

fn bad_type(t: &TypeName) -> SqlError {
    SqlError::new(1064, "42000", format!("You have an error in your SQL syntax; unknown or malformed type {}", t.name))
}

fn arg(t: &TypeName, i: usize) -> Result<Option<u32>, SqlError> {
    match t.args.get(i) {
        None => Ok(None),
        Some(a) => a.parse().map(Some).map_err(|_| bad_type(t)),
    }
}

/// The Tern type of a MySQL type.
pub fn column_type(t: &TypeName) -> Result<ColumnType, SqlError> {
    use ColumnType as C;
    let u = t.unsigned;
    let fsp = |t: &TypeName| -> Result<u8, SqlError> {
        let f = arg(t, 0)?.unwrap_or(0);
        if f > 6 {
            return Err(SqlError::new(1426, "42000", format!("Too big precision {f} specified. Maximum is 6.")));
        }
        Ok(f as u8)
    };
    Ok(match t.name.as_str() {
        "TINYINT" | "INT1" => C::TinyInt { unsigned: u },
        "BOOL" | "BOOLEAN" => C::TinyInt { unsigned: false },
        "SMALLINT" | "INT2" => C::SmallInt { unsigned: u },
        "MEDIUMINT" | "INT3" | "MIDDLEINT" => C::MediumInt { unsigned: u },
        "INT" | "INTEGER" | "INT4" => C::Int { unsigned: u },
        "BIGINT" | "INT8" => C::BigInt { unsigned: u },
        "SERIAL" => C::BigInt { unsigned: true },
        "FLOAT" => {
            if arg(t, 0)?.is_some_and(|p| p > 24) && t.args.len() == 1 {
                C::Double
            } else {
                C::Float
            }
        }
        "DOUBLE" | "REAL" | "FLOAT8" => C::Double,
        "FLOAT4" => C::Float,
        "DECIMAL" | "NUMERIC" | "DEC" | "FIXED" => {
            let p = arg(t, 0)?.unwrap_or(10);
            let s = arg(t, 1)?.unwrap_or(0);
            if p > 38 || p == 0 {
                return Err(SqlError::new(1426, "42000", format!("Too big precision {p} specified. Maximum is 38.")));
            }
            if s > p {
                return Err(SqlError::new(
                    1427,
                    "42000",
                    "For float(M,D), double(M,D) or decimal(M,D), M must be >= D",
                ));
            }
            C::Decimal { precision: p as u8, scale: s as u8, unsigned: u }
        }
        "CHAR" | "CHARACTER" | "NCHAR" => C::Char { len: arg(t, 0)?.unwrap_or(1) },
        "VARCHAR" | "NVARCHAR" | "VARCHARACTER" => C::VarChar { len: arg(t, 0)?.ok_or_else(|| bad_type(t))? },
        "BINARY" => C::Binary { len: arg(t, 0)?.unwrap_or(1) },
        "VARBINARY" => C::VarBinary { len: arg(t, 0)?.ok_or_else(|| bad_type(t))? },
        "TEXT" | "TINYTEXT" | "MEDIUMTEXT" | "LONGTEXT" | "JSON" => C::Text,
        "BLOB" | "TINYBLOB" | "MEDIUMBLOB" | "LONGBLOB" => C::Blob,
        "DATE" => C::Date,
        "TIME" => C::Time { fsp: fsp(t)? },
        "DATETIME" => C::DateTime { fsp: fsp(t)? },
        "TIMESTAMP" => C::Timestamp { fsp: fsp(t)? },
        "YEAR" => C::Year,
        "BIT" => {
            let b = arg(t, 0)?.unwrap_or(1);
            if !(1..=64).contains(&b) {
                return Err(SqlError::new(1439, "42000", "Display width out of range for column (max = 64)"));
            }
            C::Bit { bits: b as u8 }
        }
        // Stored as text of the longest value (see `members`).
        "ENUM" => C::VarChar { len: t.args.iter().map(|a| a.chars().count() as u32).max().unwrap_or(0).max(1) },
        "SET" => C::VarChar {
            len: (t.args.iter().map(|a| a.chars().count() as u32 + 1).sum::<u32>()).saturating_sub(1).max(1),
        },
        "GEOMETRY" | "POINT" | "LINESTRING" | "POLYGON" | "MULTIPOINT" | "MULTILINESTRING" | "MULTIPOLYGON"
        | "GEOMETRYCOLLECTION" => {
            return Err(SqlError::new(
                1235,
                "42000",
                format!("This version of Tern doesn't yet support '{} columns'", t.name),
            ));
        }
        _ => return Err(bad_type(t)),
    })
}

fn default_value(e: &Expr) -> Result<Option<Value>, SqlError> {
    Ok(match e {
        Expr::Lit(v) => Some(v.clone()),
        Expr::Func { name, .. } if matches!(name.as_str(), "CURRENT_TIMESTAMP" | "NOW" | "LOCALTIMESTAMP") => None,
        Expr::Cast { e, .. } => default_value(e)?,
        _ => return Err(SqlError::new(1067, "42000", "Invalid default value")),
    })
}

/// The members of an ENUM or SET type, checked as MySQL does (1291 for a duplicate, 1097 for a
/// SET of more than 64, 1234 for a comma in a SET member).
fn members(c: &ColumnSpec) -> Result<Option<Members>, SqlError> {
    let set = match c.ty.name.as_str() {
        "ENUM" => false,
        "SET" => true,
        _ => return Ok(None),
    };
    let values = c.ty.args.clone();
    if values.is_empty() {
        return Err(bad_type(&c.ty));
    }
    for (i, v) in values.iter().enumerate() {
        if values[..i].iter().any(|w| w.eq_ignore_ascii_case(v)) {
            return Err(SqlError::new(
                1291,
                "HY000",
                format!("Column '{}' has duplicated value '{v}' in {}", c.name, c.ty.name),
            ));
        }
        if set && v.contains(',') {
            return Err(SqlError::new(1367, "22007", format!("Illegal set '{v}' value found during parsing")));
        }
    }
    if set && values.len() > 64 {
        return Err(SqlError::new(1097, "HY000", format!("Too many strings for column {} and SET", c.name)));
    }
    if values.len() > tern_types::schema::ENUM_MEMBERS_MAX {
        return Err(SqlError::new(1097, "HY000", format!("Too many strings for column {} and ENUM", c.name)));
    }
    Ok(Some(Members { set, values }))
}

/// The type as SHOW CREATE TABLE / SHOW COLUMNS print it, ENUM and SET with their members.
pub fn column_type_text(c: &Column) -> String {
    match &c.members {
        Some(m) => format!(
            "{}({})",
            if m.set { "set" } else { "enum" },
            m.values.iter().map(|v| format!("'{}'", v.replace('\'', "''"))).collect::<Vec<_>>().join(",")
        ),
        None => type_text(c.ty),
    }
}

/// A column definition as Tern stores it.
pub fn column(c: &ColumnSpec) -> Result<Column, SqlError> {
    let ty = column_type(&c.ty)?;
    let mut col = Column::new(&c.name, ty);
    col.members = members(c)?;
    if c.ty.name == "SERIAL" {
        col.nullable = false;
        col.auto_increment = true;
    }
    if c.not_null == Some(true) || c.primary_key {
        col.nullable = false;
    }
    col.auto_increment |= c.auto_increment;
    if col.auto_increment && !ty.is_integer() {
        return Err(SqlError::new(1063, "42000", format!("Incorrect column specifier for column '{}'", c.name)));
    }
    if let Some(d) = &c.default {
        match default_value(d)? {
            Some(Value::Null) if !col.nullable => {
                return Err(SqlError::new(1067, "42000", format!("Invalid default value for '{}'", c.name)));
            }
            Some(Value::Null) => {}
            Some(v) => {
                let v = match &col.members {
                    Some(m) => crate::column::member_value(m, v),
                    None => coerce(ty, v).ok(),
                };
                let v =
                    v.ok_or_else(|| SqlError::new(1067, "42000", format!("Invalid default value for '{}'", c.name)))?;
                col.default = Some(v);
            }
            None => {}
        }
    }
    Ok(col)
}

/// Builds the table of a CREATE TABLE statement.
pub fn table_of(ct: &CreateTable, db: &str) -> Result<Table, SqlError> {
    if ct.columns.is_empty() {
        return Err(SqlError::new(1113, "42000", "A table must have at least 1 column"));
    }
    let mut columns = Vec::new();
    for c in &ct.columns {
        if columns.iter().any(|x: &Column| x.name.eq_ignore_ascii_case(&c.name)) {
            return Err(SqlError::new(1060, "42S21", format!("Duplicate column name '{}'", c.name)));
        }
        columns.push(column(c)?);
    }
    let col_names: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
    let find = |name: &str| -> Result<u16, SqlError> {
        col_names
            .iter()
            .position(|c| c.eq_ignore_ascii_case(name))
            .map(|p| p as u16)
            .ok_or_else(|| SqlError::new(1072, "42000", format!("Key column '{name}' doesn't exist in table")))
    };
    let mut pk: Vec<u16> = Vec::new();
    for (i, c) in ct.columns.iter().enumerate() {
        if c.primary_key {
            if !pk.is_empty() {
                return Err(SqlError::new(1068, "42000", "Multiple primary key defined"));
            }
            pk.push(i as u16);
        }
    }
    let mut indexes = Vec::new();
    for idx in &ct.indexes {
        let cols = idx.columns.iter().map(|c| find(c)).collect::<Result<Vec<_>, _>>()?;
        if idx.primary {
            if !pk.is_empty() {
                return Err(SqlError::new(1068, "42000", "Multiple primary key defined"));
            }
            pk = cols;
            continue;
        }
        indexes.push(Index { id: 0, name: String::new(), columns: cols, unique: idx.unique });
    }
    for &k in &pk {
        columns[k as usize].nullable = false;
    }
    // Index names: as given, else the first column's name (MySQL's rule, `_2`, `_3` on clashes).
    let mut named: Vec<Index> = Vec::new();
    for (spec, mut idx) in ct.indexes.iter().filter(|i| !i.primary).zip(indexes) {
        let base = spec.name.clone().unwrap_or_else(|| columns[idx.columns[0] as usize].name.clone());
        let mut name = base.clone();
        let mut k = 2;
        while named.iter().any(|i| i.name.eq_ignore_ascii_case(&name)) {
            if spec.name.is_some() {
                return Err(SqlError::new(1061, "42000", format!("Duplicate key name '{base}'")));
            }
            name = format!("{base}_{k}");
            k += 1;
        }
        idx.name = name;
        named.push(idx);
    }
    for (i, c) in ct.columns.iter().enumerate() {
        if c.unique && !pk.contains(&(i as u16)) {
            let mut name = c.name.clone();
            let mut k = 2;
            while named.iter().any(|x| x.name.eq_ignore_ascii_case(&name)) {
                name = format!("{}_{k}", c.name);
                k += 1;
            }
            named.push(Index { id: 0, name, columns: vec![i as u16], unique: true });
        }
    }
    if !pk.is_empty() {
        named.insert(0, Index { id: 0, name: "PRIMARY".into(), columns: pk.clone(), unique: false });
    }
    let mut t = Table::new(db, &ct.table.name, columns, pk.clone());
    t.indexes = named;
    if pk.is_empty() {
        t.partition_key = Vec::new();
    }
    for (name, value) in &ct.options {
        match name.as_str() {
            "ENGINE" => {
                let e = value.to_ascii_lowercase();
                if !["ndbcluster", "ndb", "innodb", "memory", "myisam", "tern", "aria"].contains(&e.as_str()) {
                    return Err(SqlError::new(1286, "42000", format!("Unknown storage engine '{value}'")));
                }
            }
            "COMMENT" => {
                t.comment = value.clone();
                let opts = tern_types::ndb_comment::parse(value)
                    .map_err(|e| SqlError::new(e.code.mysql_errno(), e.code.sqlstate(), e.message))?;
                if let Some((secs, col)) = opts.ttl {
                    let c = find(&col)
                        .map_err(|_| SqlError::new(1105, "HY000", format!("TTL column '{col}' doesn't exist")))?;
                    let ty = t.columns[c as usize].ty;
                    if !matches!(ty, ColumnType::DateTime { .. } | ColumnType::Timestamp { .. }) {
                        return Err(SqlError::new(
                            1105,
                            "HY000",
                            format!("TTL column '{col}' must be DATETIME or TIMESTAMP"),
                        ));
                    }
                    // An internal purge cascade (the Redis tables') survives a new comment.
                    let cascade = t.ttl.take().map(|x| x.cascade).unwrap_or_default();
                    t.ttl = Some(Ttl { column: c, seconds: secs, cascade });
                }
            }
            _ => {} // CHARSET, COLLATE, AUTO_INCREMENT, ROW_FORMAT, ...: accepted
        }
    }
    if let Some(cols) = &ct.partition_by_key {
        if pk.is_empty() {
            return Err(SqlError::new(
                1503,
                "HY000",
                "A PRIMARY KEY must include all columns in the table's partitioning function",
            ));
        }
        let pkeys =
            if cols.is_empty() { pk.clone() } else { cols.iter().map(|c| find(c)).collect::<Result<Vec<_>, _>>()? };
        if pkeys.iter().any(|c| !pk.contains(c)) {
            return Err(SqlError::new(
                1503,
                "HY000",
                "A PRIMARY KEY must include all columns in the table's partitioning function",
            ));
        }
        t.partition_key = pkeys;
    }
    if let Some(n) = ct.partitions {
        t.partition_count = n;
    }
    Ok(t)
}

/// Options the parser accepted for an index (used by CREATE INDEX / ALTER TABLE ADD INDEX).
pub fn index_of(t: &Table, spec: &IndexSpec) -> Result<Index, SqlError> {
    let mut cols = Vec::new();
    for c in &spec.columns {
        let p = t
            .column_index(c)
            .ok_or_else(|| SqlError::new(1072, "42000", format!("Key column '{c}' doesn't exist in table")))?;
        cols.push(p as u16);
    }
    let name = spec.name.clone().unwrap_or_else(|| t.columns[cols[0] as usize].name.clone());
    Ok(Index { id: 0, name, columns: cols, unique: spec.unique })
}

fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// The type as SHOW CREATE TABLE / SHOW COLUMNS print it.
pub fn type_text(t: ColumnType) -> String {
    use ColumnType as C;
    let unsigned = |s: &str, u: bool| if u { format!("{s} unsigned") } else { s.to_string() };
    match t {
        C::TinyInt { unsigned: u } => unsigned("tinyint", u),
        C::SmallInt { unsigned: u } => unsigned("smallint", u),
        C::MediumInt { unsigned: u } => unsigned("mediumint", u),
        C::Int { unsigned: u } => unsigned("int", u),
        C::BigInt { unsigned: u } => unsigned("bigint", u),
        C::Float => "float".into(),
        C::Double => "double".into(),
        C::Decimal { precision, scale, unsigned: u } => unsigned(&format!("decimal({precision},{scale})"), u),
        C::Char { len } => format!("char({len})"),
        C::VarChar { len } => format!("varchar({len})"),
        C::Binary { len } => format!("binary({len})"),
        C::VarBinary { len } => format!("varbinary({len})"),
        C::Text => "text".into(),
        C::Blob => "blob".into(),
        C::Date => "date".into(),
        C::Time { fsp } => {
            if fsp > 0 {
                format!("time({fsp})")
            } else {
                "time".into()
            }
        }
        C::DateTime { fsp } => {
            if fsp > 0 {
                format!("datetime({fsp})")
            } else {
                "datetime".into()
            }
        }
        C::Timestamp { fsp } => {
            if fsp > 0 {
                format!("timestamp({fsp})")
            } else {
                "timestamp".into()
            }
        }
        C::Year => "year".into(),
        C::Bit { bits } => format!("bit({bits})"),
    }
}

/// The key a column is first in, as SHOW COLUMNS and information_schema say: PRI, UNI, MUL or "".
pub fn column_key(t: &Table, i: usize) -> &'static str {
    let first = |x: &Index| x.columns.first() == Some(&(i as u16));
    if t.primary_key.contains(&(i as u16)) {
        "PRI"
    } else if t.indexes.iter().any(|x| x.unique && first(x)) {
        "UNI"
    } else if t.indexes.iter().any(first) {
        "MUL"
    } else {
        ""
    }
}

/// A default as SHOW prints it (None: no default).
pub fn default_text(c: &Column) -> Option<String> {
    c.default.as_ref().and_then(|v| match v {
        Value::Bytes(b)
            if matches!(c.ty, ColumnType::Binary { .. } | ColumnType::VarBinary { .. } | ColumnType::Bit { .. }) =>
        {
            Some(format!("0x{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()))
        }
        v => v.to_text(c.ty),
    })
}

/// SHOW CREATE TABLE text.
pub fn show_create(t: &Table) -> String {
    let mut lines = Vec::new();
    for c in t.columns.iter().filter(|c| !c.hidden) {
        let mut l = format!("  {} {}", quote(&c.name), column_type_text(c));
        if !c.nullable {
            l.push_str(" NOT NULL");
        }
        if c.auto_increment {
            l.push_str(" AUTO_INCREMENT");
        } else if let Some(d) = default_text(c) {
            l.push_str(&format!(" DEFAULT '{}'", d.replace('\'', "''")));
        } else if c.nullable {
            l.push_str(" DEFAULT NULL");
        }
        lines.push(l);
    }
    let visible_pk = t.primary_key.iter().all(|&k| !t.columns[k as usize].hidden);
    if visible_pk {
        lines.push(format!(
            "  PRIMARY KEY ({})",
            t.primary_key.iter().map(|&k| quote(&t.columns[k as usize].name)).collect::<Vec<_>>().join(",")
        ));
    }
    for i in t.indexes.iter().filter(|i| i.name != "PRIMARY") {
        lines.push(format!(
            "  {}KEY {} ({})",
            if i.unique { "UNIQUE " } else { "" },
            quote(&i.name),
            i.columns.iter().map(|&k| quote(&t.columns[k as usize].name)).collect::<Vec<_>>().join(",")
        ));
    }
    let mut s = format!(
        "CREATE TABLE {} (\n{}\n) ENGINE=ndbcluster DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        quote(&t.name),
        lines.join(",\n")
    );
    if !t.comment.is_empty() {
        s.push_str(&format!(" COMMENT='{}'", t.comment.replace('\'', "''")));
    }
    if visible_pk && t.partition_key != t.primary_key {
        s.push_str(&format!(
            "\n/*!50100 PARTITION BY KEY ({}) */",
            t.partition_key.iter().map(|&k| quote(&t.columns[k as usize].name)).collect::<Vec<_>>().join(",")
        ));
    }
    let _ = HIDDEN_ROWID;
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ast::Statement;
    use crate::parse::parse;

    fn ct(sql: &str) -> Result<Table, SqlError> {
        let Statement::CreateTable(c) = parse(sql).unwrap().stmt else { panic!() };
        table_of(&c, "db")
    }

    #[test]
    fn sysbench_table() {
        let t = ct("CREATE TABLE sbtest1(id INTEGER NOT NULL AUTO_INCREMENT, k INTEGER DEFAULT '0' NOT NULL, c CHAR(120) DEFAULT '' NOT NULL, pad CHAR(60) DEFAULT '' NOT NULL, PRIMARY KEY (id)) /*! ENGINE = innodb */").unwrap();
        assert_eq!(t.primary_key, vec![0]);
        assert_eq!(t.columns[1].default, Some(Value::Int(0)));
        assert!(t.columns[0].auto_increment);
        assert_eq!(t.indexes[0].name, "PRIMARY");
        assert_eq!(t.columns[2].ty, ColumnType::Char { len: 120 });
    }

    #[test]
    fn rondb_options() {
        let t = ct("CREATE TABLE t (id INT, ts DATETIME NOT NULL, v VARCHAR(10), PRIMARY KEY (id, ts)) ENGINE=ndbcluster COMMENT=\"NDB_TABLE=TTL=60@ts\" PARTITION BY KEY(id)").unwrap();
        assert_eq!(t.ttl, Some(Ttl::new(1, 60)));
        assert_eq!(t.partition_key, vec![0]);
        assert!(ct("CREATE TABLE t (id INT PRIMARY KEY, v INT) COMMENT='NDB_TABLE=TTL=60@v'").is_err());
        assert!(ct("CREATE TABLE t (id INT PRIMARY KEY) ENGINE=bogus").is_err());
        assert!(ct("CREATE TABLE t (id INT PRIMARY KEY, id INT)").is_err());
        assert!(ct("CREATE TABLE t (id INT, v INT, PRIMARY KEY (id)) PARTITION BY KEY(v)").is_err());
        let t = ct("CREATE TABLE t (a INT, b INT UNIQUE, KEY (a), KEY (a))").unwrap();
        let names: Vec<&str> = t.indexes.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, vec!["a", "a_2", "b"]);
        assert!(t.primary_key.is_empty());
        let sc = show_create(&ct("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10) DEFAULT 'x')").unwrap());
        assert!(sc.contains("`v` varchar(10) DEFAULT 'x'"), "{sc}");
    }
}
