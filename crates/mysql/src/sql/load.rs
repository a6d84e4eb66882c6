//! LOAD DATA LOCAL INFILE: the client streams the file after the server asks for it; records are
//! parsed as they arrive (fields and lines terminated, optionally enclosed, backslash escapes,
//! `\N` for NULL) and inserted in batches, each its own transaction. As in MySQL, LOCAL loads
//! skip rows whose key exists (unless REPLACE) and report them as skipped.

use super::ast::LoadData;
use super::write::store_value;
use crate::server::SqlError;
use tern_client::{AbortOption, Client, Exec, OpResult, TableHandle};
use tern_types::{ErrorCode, Value};

/// Rows per insert transaction.
const BATCH: usize = 1000;

pub struct LoadJob {
    pub file: String,
    spec: LoadData,
    h: TableHandle,
    /// Table column of each field.
    targets: Vec<usize>,
    buf: Vec<u8>,
    pending: Vec<Vec<Value>>,
    line: u64,
    skip_lines: u64,
    pub records: u64,
    pub inserted: u64,
    pub skipped: u64,
    pub warnings: u64,
    pub error: Option<SqlError>,
}

impl LoadJob {
    pub fn new(spec: LoadData, h: TableHandle) -> Result<LoadJob, SqlError> {
        let targets: Vec<usize> = match &spec.columns {
            Some(cols) => cols
                .iter()
                .map(|c| {
                    h.table
                        .column_index(c)
                        .ok_or_else(|| SqlError::new(1054, "42S22", format!("Unknown column '{c}' in 'field list'")))
                })
                .collect::<Result<_, _>>()?,
            None => (0..h.table.columns.len()).filter(|&c| !h.table.columns[c].hidden).collect(),
        };
        Ok(LoadJob {
            file: spec.file.clone(),
            skip_lines: spec.ignore_lines,
            spec,
            h,
            targets,
            buf: Vec::new(),
            pending: Vec::new(),
            line: 0,
            records: 0,
            inserted: 0,
            skipped: 0,
            warnings: 0,
            error: None,
        })
    }

    /// Takes the next chunk of the file; inserts full batches.
    pub async fn feed(&mut self, client: &Client, chunk: &[u8]) {
        if self.error.is_some() {
            return;
        }
        self.buf.extend_from_slice(chunk);
        let (records, used) = parse_records(&self.buf, &self.spec, false);
        self.buf.drain(..used);
        self.take(records);
        if self.pending.len() >= BATCH {
            self.flush(client).await;
        }
    }

    /// The end of the file: the last record, the last batch.
    pub async fn finish(&mut self, client: &Client) {
        if self.error.is_none() {
            let (records, used) = parse_records(&self.buf, &self.spec, true);
            self.buf.drain(..used);
            self.take(records);
        }
        if self.error.is_none() {
            self.flush(client).await;
        }
    }

    fn take(&mut self, records: Vec<Vec<Option<Vec<u8>>>>) {
        for fields in records {
            self.line += 1;
            if self.skip_lines > 0 {
                self.skip_lines -= 1;
                continue;
            }
            self.records += 1;
            let ncol = self.h.table.columns.len();
            let mut row: Vec<Option<Value>> = vec![None; ncol];
            if fields.len() != self.targets.len() {
                self.warnings += 1;
            }
            for (&t, f) in self.targets.iter().zip(fields) {
                row[t] = Some(match f {
                    None => Value::Null,
                    Some(b) => Value::Bytes(b),
                });
            }
            let mut vals = Vec::with_capacity(ncol);
            for (c, v) in row.into_iter().enumerate() {
                let col = &self.h.table.columns[c];
                let explicit = v.is_some();
                let v = v.unwrap_or_else(|| col.default.clone().unwrap_or(Value::Null));
                // Empty fields of numeric columns load as 0 / NULL-able as in MySQL's LOCAL mode.
                let v = match v {
                    Value::Bytes(b)
                        if b.is_empty()
                            && !col.ty.is_text()
                            && !matches!(
                                col.ty,
                                tern_types::ColumnType::Binary { .. }
                                    | tern_types::ColumnType::VarBinary { .. }
                                    | tern_types::ColumnType::Blob
                            ) =>
                    {
                        self.warnings += 1;
                        if col.nullable { Value::Null } else { Value::Int(0) }
                    }
                    v => v,
                };
                if col.auto_increment && (v.is_null() || matches!(&v, Value::Bytes(b) if b == b"0")) {
                    vals.push(Value::Null);
                    continue;
                }
                match store_value(&self.h, c, v, explicit) {
                    Ok(v) => vals.push(v),
                    Err(mut e) => {
                        e.message = e.message.replace("at row 1", &format!("at row {}", self.line));
                        self.error = Some(e);
                        return;
                    }
                }
            }
            self.pending.push(vals);
        }
    }

    async fn flush(&mut self, client: &Client) {
        if self.pending.is_empty() {
            return;
        }
        let rows = std::mem::take(&mut self.pending);
        let h = self.h.clone();
        let mut rows = rows;
        if h.table.columns.iter().any(|c| c.auto_increment) {
            let c = client.clone();
            let h2 = h.clone();
            let r = tokio::task::block_in_place(|| {
                for r in rows.iter_mut() {
                    c.fill_generated(&h2, r)?;
                }
                Ok::<_, tern_client::TernError>(())
            });
            if let Err(e) = r {
                self.error = Some(SqlError::from(e));
                return;
            }
        }
        let mut ops = Vec::with_capacity(rows.len());
        for r in &rows {
            match if self.spec.replace { h.write(r) } else { h.insert(r) } {
                Ok(op) => ops.push(op),
                Err(e) => {
                    self.error = Some(SqlError::from(e));
                    return;
                }
            }
        }
        let ignore = !self.spec.replace && (self.spec.ignore || self.spec.local);
        let abort = if ignore { AbortOption::IgnoreError } else { AbortOption::AbortOnError };
        let mut t = client.begin();
        match t.execute_with(ops, Exec::Commit, abort).await {
            Ok(res) => {
                for r in res {
                    match r {
                        OpResult::Error(e) if e.code == ErrorCode::DuplicateKey => {
                            self.skipped += 1;
                            self.warnings += 1;
                        }
                        OpResult::Error(e) => {
                            self.error = Some(SqlError::from(e));
                            return;
                        }
                        _ => self.inserted += 1,
                    }
                }
            }
            Err(e) => self.error = Some(SqlError::from(e)),
        }
    }
}

/// Parses complete records from `b`; `last`: `b` ends the file (a final record without its
/// terminator counts). Returns the records (None for `\N`) and the bytes consumed.
pub fn parse_records(b: &[u8], spec: &LoadData, last: bool) -> (Vec<Vec<Option<Vec<u8>>>>, usize) {
    let ft = &spec.fields_terminated[..];
    let lt = &spec.lines_terminated[..];
    let esc = spec.escaped;
    let enc = spec.enclosed;
    let mut out = Vec::new();
    let mut pos = 0;
    'records: loop {
        let start = pos;
        let mut fields: Vec<Option<Vec<u8>>> = Vec::new();
        let mut i = pos;
        loop {
            // One field.
            let mut f = Vec::new();
            let mut quoted = false;
            let mut was_escaped_null = false;
            if let Some(q) = enc
                && b.get(i) == Some(&q)
            {
                quoted = true;
                i += 1;
            }
            loop {
                if i >= b.len() {
                    if !last || quoted {
                        // Incomplete: wait for more (or an unterminated quote at the end).
                        if last && i > start {
                            fields.push(Some(f));
                            out.push(fields);
                            return (out, b.len());
                        }
                        return (out, start);
                    }
                    if i == start {
                        return (out, start);
                    }
                    fields.push(if was_escaped_null && f.is_empty() { None } else { Some(f) });
                    out.push(fields);
                    return (out, b.len());
                }
                let c = b[i];
                if Some(c) == esc && i + 1 < b.len() {
                    let n = b[i + 1];
                    match n {
                        b'N' if f.is_empty() && !quoted => was_escaped_null = true,
                        b'0' => f.push(0),
                        b'n' => f.push(b'\n'),
                        b't' => f.push(b'\t'),
                        b'r' => f.push(b'\r'),
                        b'b' => f.push(8),
                        b'Z' => f.push(26),
                        other => f.push(other),
                    }
                    i += 2;
                    continue;
                }
                if Some(c) == esc && i + 1 >= b.len() && !last {
                    return (out, start);
                }
                if quoted {
                    if Some(c) == enc {
                        if b.get(i + 1) == enc.as_ref() {
                            f.push(c);
                            i += 2;
                            continue;
                        }
                        // The closing quote must be followed by a terminator (or the end).
                        if b[i + 1..].starts_with(ft) || b[i + 1..].starts_with(lt) || (last && i + 1 == b.len()) {
                            quoted = false;
                            i += 1;
                            continue;
                        }
                        if i + 1 >= b.len() && !last {
                            return (out, start);
                        }
                    }
                    f.push(c);
                    i += 1;
                    continue;
                }
                if b[i..].starts_with(ft) {
                    fields.push(if was_escaped_null && f.is_empty() { None } else { Some(f) });
                    i += ft.len();
                    break;
                }
                if b[i..].starts_with(lt) {
                    fields.push(if was_escaped_null && f.is_empty() { None } else { Some(f) });
                    i += lt.len();
                    out.push(fields);
                    pos = i;
                    continue 'records;
                }
                f.push(c);
                i += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sql::ast::Statement;
    use crate::sql::parse::parse;

    fn spec(sql: &str) -> LoadData {
        let Statement::LoadData(l) = parse(sql).unwrap().stmt else { panic!() };
        *l
    }

    #[test]
    fn records() {
        let s = spec("LOAD DATA LOCAL INFILE 'f' INTO TABLE t");
        let (r, used) = parse_records(b"1\ta\\tb\n2\t\\N\n3\tpart", &s, false);
        assert_eq!(r, vec![vec![Some(b"1".to_vec()), Some(b"a\tb".to_vec())], vec![Some(b"2".to_vec()), None]]);
        assert_eq!(used, 12);
        let (r, _) = parse_records(b"3\tpart", &s, true);
        assert_eq!(r, vec![vec![Some(b"3".to_vec()), Some(b"part".to_vec())]]);
        let csv = spec(
            "LOAD DATA LOCAL INFILE 'f' INTO TABLE t FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' LINES TERMINATED BY '\\r\\n'",
        );
        let (r, used) = parse_records(b"1,\"a,\"\"b\"\"\r\nc\"\r\n2,x\r\n", &csv, false);
        assert_eq!(
            r,
            vec![
                vec![Some(b"1".to_vec()), Some(b"a,\"b\"\r\nc".to_vec())],
                vec![Some(b"2".to_vec()), Some(b"x".to_vec())]
            ]
        );
        assert_eq!(used, 21);
        // A record split across chunks waits for its end.
        let (r, used) = parse_records(b"1,\"a,", &csv, false);
        assert!(r.is_empty());
        assert_eq!(used, 0);
    }
}
