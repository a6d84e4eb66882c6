//! LOAD DATA LOCAL INFILE: the client streams the file after the server asks for it; records are
//! parsed as they arrive, in one pass (`RecordParser`: line terminators before field terminators
//! as in MySQL, optionally enclosed fields, escapes, `\N` for NULL, LINES STARTING BY) and
//! inserted in batches, each its own transaction. As in MySQL, LOCAL loads
//! skip rows whose key exists (unless REPLACE) and report them as skipped.

use super::ast::LoadData;
use super::write::store_value;
use crate::SqlError;
use tern_client::{AbortOption, Client, Exec, KeyOp, OpResult, TableHandle};
use tern_types::{ErrorCode, Value};

/// Rows per insert transaction.
const BATCH: usize = 1000;

/// Bytes of the file parsed per hand-off to the parse thread.
const PARSE_BYTES: usize = 1 << 20;

/// Batches parsed and waiting for the committer, at most (with the transactions in flight,
/// what bounds the rows a load holds).
const QUEUED_BATCHES: usize = 8;

/// Insert transactions of one load in flight at once when duplicates are skipped or replaced
/// (the data nodes' ldms work on one batch while the next is sent and the one before commits).
/// A load that stops at its first error commits one batch at a time, so that what it leaves is
/// the rows before the failing batch.
const IN_FLIGHT: usize = 4;

/// A LOAD DATA in progress: a pipeline of three stages. Records are parsed, converted and
/// encoded on a blocking-pool thread (with the front ends hosted on a data-node worker, that
/// worker does not parse); full batches go to a committer task, which keeps up to `IN_FLIGHT`
/// insert transactions going. A batch that has a key in common with a batch in flight waits for
/// it, so which of two rows with one key wins is as if the file were loaded row by row.
pub struct LoadJob {
    pub file: String,
    h: TableHandle,
    replace: bool,
    ignore: bool,
    /// The parsing state (away on the parse thread during `feed`).
    parse: Option<Box<Parse>>,
    /// Where full batches go, and the committer (started with the first batch).
    batches: Option<(tokio::sync::mpsc::Sender<Batch>, tokio::task::JoinHandle<Committed>)>,
    /// Bytes received and not yet handed to the parse thread.
    raw: Vec<u8>,
    pub records: u64,
    pub inserted: u64,
    pub skipped: u64,
    pub warnings: u64,
    pub error: Option<SqlError>,
}

/// A batch for one insert transaction: its operations, made on the parse thread, or, for a
/// table with generated columns (filled from the data nodes before the row is encoded), its rows.
enum Batch {
    Ops(Vec<KeyOp>),
    Rows(Vec<Vec<Value>>),
}

/// Parsing and converting records into rows to insert.
struct Parse {
    h: TableHandle,
    /// Table column of each field.
    targets: Vec<usize>,
    buf: Vec<u8>,
    parser: RecordParser,
    pending: Vec<Vec<Value>>,
    line: u64,
    skip_lines: u64,
    records: u64,
    warnings: u64,
    error: Option<SqlError>,
}

/// What committing some batches did.
#[derive(Default)]
struct Committed {
    inserted: u64,
    skipped: u64,
    warnings: u64,
    error: Option<SqlError>,
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
            h: h.clone(),
            replace: spec.replace,
            ignore: !spec.replace && (spec.ignore || spec.local),
            parse: Some(Box::new(Parse {
                parser: RecordParser::new(&spec),
                skip_lines: spec.ignore_lines,
                h,
                targets,
                buf: Vec::new(),
                pending: Vec::new(),
                line: 0,
                records: 0,
                warnings: 0,
                error: None,
            })),
            batches: None,
            raw: Vec::new(),
            records: 0,
            inserted: 0,
            skipped: 0,
            warnings: 0,
            error: None,
        })
    }

    /// Takes the next chunk of the file: parses it on the parse thread while earlier batches
    /// commit, then queues its full batches for the committer (waiting while the queue is full).
    pub fn feed<'a>(&'a mut self, client: &'a Client, chunk: &'a [u8]) -> crate::Fut<'a, ()> {
        Box::pin(self.feed_async(client, chunk))
    }

    async fn feed_async(&mut self, client: &Client, chunk: &[u8]) {
        // Packets are small (16 KiB from the mariadb client): the parse thread gets a MiB at a
        // time, so that the hand-offs do not cost more than the overlap saves.
        self.raw.extend_from_slice(chunk);
        if self.raw.len() < PARSE_BYTES {
            return;
        }
        let raw = std::mem::take(&mut self.raw);
        let batches = self.parse_chunk(raw, false).await;
        self.queue(client, batches).await;
    }

    /// The end of the file: the last record, the last batch, every commit done.
    pub fn finish<'a>(&'a mut self, client: &'a Client) -> crate::Fut<'a, ()> {
        Box::pin(self.finish_async(client))
    }

    async fn finish_async(&mut self, client: &Client) {
        let raw = std::mem::take(&mut self.raw);
        let batches = self.parse_chunk(raw, true).await;
        self.queue(client, batches).await;
        self.wait_commit().await;
    }

    /// Hands full batches to the committer (started on the first); once the committer has
    /// stopped at an error, waits for it and keeps the error.
    async fn queue(&mut self, client: &Client, batches: Vec<Batch>) {
        if batches.is_empty() || self.error.is_some() {
            return;
        }
        let (replace, ignore) = (self.replace, self.ignore);
        let (tx, _) = self.batches.get_or_insert_with(|| {
            let (tx, rx) = tokio::sync::mpsc::channel(QUEUED_BATCHES);
            (tx, tokio::spawn(committer(client.clone(), self.h.clone(), rx, replace, ignore)))
        });
        for b in batches {
            if tx.send(b).await.is_err() {
                // The committer stopped (an error): its result says why.
                self.wait_commit().await;
                return;
            }
        }
    }

    /// Parses `chunk` (and with `last` the end of the file) away from this thread; returns the
    /// full batches (all pending rows when `last`). Nothing once an error is known.
    async fn parse_chunk(&mut self, chunk: Vec<u8>, last: bool) -> Vec<Batch> {
        if self.error.is_some() {
            return Vec::new();
        }
        let Some(mut p) = self.parse.take() else { return Vec::new() };
        let replace = self.replace;
        let parsed = tokio::task::spawn_blocking(move || {
            p.buf.extend_from_slice(&chunk);
            p.parse(last);
            let keep = if last || p.error.is_some() { 0 } else { p.pending.len() % BATCH };
            let mut batches = Vec::with_capacity(p.pending.len() / BATCH + 1);
            while p.pending.len() > keep {
                let n = (p.pending.len() - keep).min(BATCH);
                let rows = p.pending.drain(..n).collect::<Vec<_>>();
                match p.ops(rows, replace) {
                    Ok(b) => batches.push(b),
                    Err(e) => {
                        p.error = Some(e);
                        break;
                    }
                }
            }
            (p, batches)
        })
        .await;
        match parsed {
            Ok((mut p, batches)) => {
                self.records = p.records;
                self.warnings += std::mem::take(&mut p.warnings);
                if let Some(e) = p.error.take() {
                    self.error = Some(e);
                }
                self.parse = Some(p);
                batches
            }
            Err(e) => {
                self.error = Some(SqlError::new(1105, "HY000", format!("LOAD DATA parser stopped: {e}")));
                Vec::new()
            }
        }
    }

    /// Closes the queue, waits for every batch to commit and counts what they did.
    async fn wait_commit(&mut self) {
        if let Some((tx, task)) = self.batches.take() {
            drop(tx);
            match task.await {
                Ok(c) => self.absorb(c),
                Err(e) => self.error = Some(SqlError::new(1105, "HY000", format!("LOAD DATA commit stopped: {e}"))),
            }
        }
    }

    fn absorb(&mut self, c: Committed) {
        self.inserted += c.inserted;
        self.skipped += c.skipped;
        self.warnings += c.warnings;
        if self.error.is_none() {
            self.error = c.error;
        }
    }
}

impl Parse {
    /// The insert (or, with REPLACE, write) operations of a batch of rows; the rows themselves
    /// when the table has generated columns.
    fn ops(&self, rows: Vec<Vec<Value>>, replace: bool) -> Result<Batch, SqlError> {
        if self.h.table.columns.iter().any(|c| c.auto_increment) {
            return Ok(Batch::Rows(rows));
        }
        let op = |r| if replace { self.h.write_owned(r) } else { self.h.insert_owned(r) };
        Ok(Batch::Ops(rows.into_iter().map(op).collect::<Result<_, _>>()?))
    }

    /// Parses the buffered bytes into pending rows (what stays is an undecided tail).
    fn parse(&mut self, last: bool) {
        if self.error.is_some() {
            return;
        }
        let mut records = Vec::new();
        match self.parser.parse(&self.buf, last, &mut records) {
            Ok(used) => {
                self.buf.drain(..used);
            }
            Err(e) => self.error = Some(e),
        }
        self.take(records);
    }

    fn take(&mut self, records: Vec<Record>) {
        for fields in records {
            if self.error.is_some() {
                return;
            }
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
                let v = v.unwrap_or_else(|| crate::column::default_of(col));
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
}

/// An insert transaction in flight: its outcome and the hashes of its rows' keys.
type Flying = (tokio::task::JoinHandle<Result<Vec<OpResult>, tern_client::TernError>>, Vec<u64>);

/// Inserts the queued batches, each in its own transaction, up to `IN_FLIGHT` at once (one when
/// the load stops at its first error); a batch sharing a key with one in flight waits for it.
/// Stops taking batches at the first error (the ones in flight finish and are counted).
async fn committer(
    client: Client,
    h: TableHandle,
    mut rx: tokio::sync::mpsc::Receiver<Batch>,
    replace: bool,
    ignore: bool,
) -> Committed {
    let mut done = Committed::default();
    let depth = if replace || ignore { IN_FLIGHT } else { 1 };
    let abort = if ignore { AbortOption::IgnoreError } else { AbortOption::AbortOnError };
    let mut flying: std::collections::VecDeque<Flying> = Default::default();
    // Key hashes of the batches in flight (with how many of them have each).
    let mut keys: tern_types::hash::FastMap<u64, u32> = Default::default();
    'batches: while done.error.is_none() {
        let ops = match rx.recv().await {
            None => break,
            Some(Batch::Ops(ops)) => ops,
            Some(Batch::Rows(mut rows)) => {
                let mut ops = Vec::with_capacity(rows.len());
                for r in rows.iter_mut() {
                    if let Err(e) = client.fill_generated_async(&h, r).await {
                        done.error = Some(SqlError::from(e));
                        break 'batches;
                    }
                }
                for r in rows {
                    match if replace { h.write_owned(r) } else { h.insert_owned(r) } {
                        Ok(op) => ops.push(op),
                        Err(e) => {
                            done.error = Some(SqlError::from(e));
                            break 'batches;
                        }
                    }
                }
                ops
            }
        };
        let hashes: Vec<u64> = ops.iter().map(|op| tern_types::hash::index_hash(&op.key)).collect();
        while flying.len() >= depth || (!flying.is_empty() && hashes.iter().any(|k| keys.contains_key(k))) {
            let f = flying.pop_front().expect("non-empty");
            land(f, &mut keys, &mut done).await;
            if done.error.is_some() {
                break 'batches;
            }
        }
        for &k in &hashes {
            *keys.entry(k).or_default() += 1;
        }
        let client = client.clone();
        let txn = tokio::spawn(async move { client.begin().execute_with(ops, Exec::Commit, abort).await });
        flying.push_back((txn, hashes));
    }
    // Whatever is in flight commits (or fails) anyway: count it.
    while let Some(f) = flying.pop_front() {
        land(f, &mut keys, &mut done).await;
    }
    done
}

/// Waits for an insert transaction and counts its rows.
async fn land(f: Flying, keys: &mut tern_types::hash::FastMap<u64, u32>, done: &mut Committed) {
    let (txn, hashes) = f;
    for k in hashes {
        if let Some(n) = keys.get_mut(&k) {
            *n -= 1;
            if *n == 0 {
                keys.remove(&k);
            }
        }
    }
    let res = match txn.await {
        Ok(r) => r,
        Err(e) => {
            done.error.get_or_insert(SqlError::new(1105, "HY000", format!("LOAD DATA commit stopped: {e}")));
            return;
        }
    };
    match res {
        Ok(res) => {
            for r in res {
                match r {
                    OpResult::Error(e) if e.code == ErrorCode::DuplicateKey => {
                        done.skipped += 1;
                        done.warnings += 1;
                    }
                    OpResult::Error(e) => {
                        done.error.get_or_insert(SqlError::from(e));
                    }
                    _ => done.inserted += 1,
                }
            }
        }
        Err(e) => {
            done.error.get_or_insert(SqlError::from(e));
        }
    }
}

/// Longest record LOAD DATA accepts (MySQL's default max_allowed_packet).
pub const RECORD_BYTES_MAX: usize = 64 << 20;

/// One record: its fields (None for `\N`, or an unenclosed `NULL` when fields are enclosed).
pub type Record = Vec<Option<Vec<u8>>>;

/// A resumable record parser: it keeps the record in progress between chunks, so every byte of
/// the file is looked at once (only an undecidable tail — part of a terminator, an escape or a
/// quote at the end of a chunk — waits for the next chunk). Line terminators are recognised
/// before field terminators, as MySQL does, so `FIELDS TERMINATED BY '|' LINES TERMINATED BY
/// '|\n'` (TPC-H's .tbl files) reads one record per line.
pub struct RecordParser {
    ft: Vec<u8>,
    lt: Vec<u8>,
    starting: Vec<u8>,
    esc: Option<u8>,
    enc: Option<u8>,
    /// Looking for `LINES STARTING BY` before the next record.
    seeking: bool,
    fields: Record,
    field: Vec<u8>,
    /// The current field has begun (its opening quote, if any, is behind).
    begun: bool,
    quoted: bool,
    /// The field was enclosed (so the word NULL is a string, not NULL).
    was_quoted: bool,
    escaped_null: bool,
    bytes: usize,
    /// Bytes that may end a run of plain field data outside quotes: the escape and the first
    /// bytes of the terminators (None when a terminator is empty: every byte is looked at).
    special: Option<Box<[bool; 256]>>,
}

/// What a step of the parser found at the current position.
enum Step {
    /// `n` bytes form a line terminator.
    Line(usize),
    /// `n` bytes form a field terminator.
    Field(usize),
    /// Too few bytes to know: wait for more.
    Wait,
    /// Neither.
    Data,
}

impl RecordParser {
    pub fn new(spec: &LoadData) -> RecordParser {
        RecordParser {
            ft: spec.fields_terminated.clone(),
            lt: spec.lines_terminated.clone(),
            starting: spec.lines_starting.clone(),
            esc: spec.escaped,
            enc: spec.enclosed,
            seeking: !spec.lines_starting.is_empty(),
            fields: Vec::new(),
            field: Vec::new(),
            begun: false,
            quoted: false,
            was_quoted: false,
            escaped_null: false,
            bytes: 0,
            special: match (spec.lines_terminated.first(), spec.fields_terminated.first()) {
                (Some(&l), Some(&f)) => {
                    let mut t = Box::new([false; 256]);
                    t[l as usize] = true;
                    t[f as usize] = true;
                    if let Some(e) = spec.escaped {
                        t[e as usize] = true;
                    }
                    Some(t)
                }
                _ => None,
            },
        }
    }

    /// Whether `b[i..]` starts a terminator (the line's first, as MySQL), or may once more
    /// bytes arrive.
    fn at(&self, b: &[u8], i: usize, last: bool) -> Step {
        // Most bytes start neither terminator (`perf`: the two `starts_with` per byte were 7 %
        // of a LOAD DATA's thread).
        if let (Some(&l), Some(&f)) = (self.lt.first(), self.ft.first())
            && b[i] != l
            && b[i] != f
        {
            return Step::Data;
        }
        let rest = &b[i..];
        let partial = |t: &[u8]| !last && rest.len() < t.len() && t.starts_with(rest);
        if rest.starts_with(&self.lt) {
            return Step::Line(self.lt.len());
        }
        // What may still become a line terminator is not taken for a field terminator.
        if partial(&self.lt) {
            return Step::Wait;
        }
        if rest.starts_with(&self.ft) {
            return Step::Field(self.ft.len());
        }
        if partial(&self.ft) { Step::Wait } else { Step::Data }
    }

    fn end_field(&mut self) {
        let f = std::mem::take(&mut self.field);
        let null = (self.escaped_null && f.is_empty()) || (self.enc.is_some() && !self.was_quoted && f == b"NULL");
        self.fields.push(if null { None } else { Some(f) });
        self.begun = false;
        self.quoted = false;
        self.was_quoted = false;
        self.escaped_null = false;
    }

    fn end_record(&mut self, out: &mut Vec<Record>) {
        self.end_field();
        out.push(std::mem::take(&mut self.fields));
        self.bytes = 0;
        self.seeking = !self.starting.is_empty();
    }

    fn push(&mut self, c: u8) -> Result<(), SqlError> {
        self.push_run(&[c])
    }

    fn push_run(&mut self, run: &[u8]) -> Result<(), SqlError> {
        self.bytes += run.len();
        if self.bytes > RECORD_BYTES_MAX {
            return Err(SqlError::new(
                1153,
                "08S01",
                format!(
                    "Got a packet bigger than 'max_allowed_packet' bytes (a LOAD DATA record over {RECORD_BYTES_MAX} bytes)"
                ),
            ));
        }
        self.field.extend_from_slice(run);
        Ok(())
    }

    /// Parses what `b` completes; `last`: `b` ends the file. Returns the records and the bytes
    /// consumed (the rest must be passed again, followed by more data).
    pub fn parse(&mut self, b: &[u8], last: bool, out: &mut Vec<Record>) -> Result<usize, SqlError> {
        let mut i = 0;
        while i < b.len() {
            if self.seeking {
                let p = &self.starting;
                match b[i..].windows(p.len()).position(|w| w == &p[..]) {
                    Some(k) => {
                        i += k + p.len();
                        self.seeking = false;
                        continue;
                    }
                    // Keep what may be the start of the prefix.
                    None if !last => return Ok(b.len().saturating_sub(p.len() - 1).max(i)),
                    None => return Ok(b.len()),
                }
            }
            let c = b[i];
            if !self.begun {
                self.begun = true;
                if self.enc == Some(c) {
                    self.quoted = true;
                    self.was_quoted = true;
                    i += 1;
                    continue;
                }
            }
            if self.esc == Some(c) {
                let Some(&n) = b.get(i + 1) else {
                    if !last {
                        return Ok(i);
                    }
                    self.push(c)?;
                    i += 1;
                    continue;
                };
                match n {
                    b'N' if self.field.is_empty() && !self.quoted => self.escaped_null = true,
                    b'0' => self.push(0)?,
                    b'n' => self.push(b'\n')?,
                    b't' => self.push(b'\t')?,
                    b'r' => self.push(b'\r')?,
                    b'b' => self.push(8)?,
                    b'Z' => self.push(26)?,
                    other => self.push(other)?,
                }
                i += 2;
                continue;
            }
            if self.quoted {
                if self.enc == Some(c) {
                    match b.get(i + 1) {
                        None if !last => return Ok(i),
                        // The closing quote at the end of the file.
                        None => {
                            self.quoted = false;
                            i += 1;
                            continue;
                        }
                        Some(&n) if Some(n) == self.enc => {
                            self.push(c)?;
                            i += 2;
                            continue;
                        }
                        Some(_) => match self.at(b, i + 1, last) {
                            Step::Wait => return Ok(i),
                            // A closing quote is followed by a terminator.
                            Step::Line(_) | Step::Field(_) => {
                                self.quoted = false;
                                i += 1;
                                continue;
                            }
                            Step::Data => {}
                        },
                    }
                }
                self.push(c)?;
                i += 1;
                continue;
            }
            // Plain data up to the next byte that may mean something, in one piece (the parse
            // was a third of a LOAD DATA's front-end time byte by byte).
            if let Some(t) = &self.special {
                let run = b[i..].iter().position(|&c| t[c as usize]).unwrap_or(b.len() - i);
                if run > 0 {
                    self.push_run(&b[i..i + run])?;
                    i += run;
                    continue;
                }
            }
            match self.at(b, i, last) {
                Step::Line(n) => {
                    self.end_record(out);
                    i += n;
                }
                Step::Field(n) => {
                    self.end_field();
                    i += n;
                }
                Step::Wait => return Ok(i),
                Step::Data => {
                    self.push(c)?;
                    i += 1;
                }
            }
        }
        if last && (self.begun || !self.fields.is_empty() || !self.field.is_empty()) {
            // A final record without its line terminator.
            self.end_record(out);
        }
        Ok(b.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ast::Statement;
    use crate::parse::parse;

    fn spec(sql: &str) -> LoadData {
        let Statement::LoadData(l) = parse(sql).unwrap().stmt else { panic!() };
        *l
    }

    fn f(s: &str) -> Option<Vec<u8>> {
        Some(s.as_bytes().to_vec())
    }

    /// All records of `input` fed in chunks of `chunk` bytes (as the client streams them).
    fn records(sql: &str, input: &[u8], chunk: usize) -> Vec<Record> {
        let mut p = RecordParser::new(&spec(sql));
        let mut buf = Vec::new();
        let mut out = Vec::new();
        for c in input.chunks(chunk.max(1)) {
            buf.extend_from_slice(c);
            let used = p.parse(&buf, false, &mut out).unwrap();
            buf.drain(..used);
        }
        let used = p.parse(&buf, true, &mut out).unwrap();
        assert_eq!(used, buf.len());
        out
    }

    /// The terminator combinations MySQL's manual shows, each fed whole and split at every
    /// byte: the same records.
    #[test]
    fn terminators_as_mysql_reads_them() {
        let cases: Vec<(&str, &[u8], Vec<Record>)> = vec![
            (
                "LOAD DATA LOCAL INFILE 'f' INTO TABLE t",
                b"1\ta\\tb\n2\t\\N\n3\tpart",
                vec![vec![f("1"), f("a\tb")], vec![f("2"), None], vec![f("3"), f("part")]],
            ),
            (
                "LOAD DATA LOCAL INFILE 'f' INTO TABLE t FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' LINES TERMINATED BY '\\r\\n'",
                b"1,\"a,\"\"b\"\"\r\nc\"\r\n2,x\r\n3,NULL,\"NULL\"\r\n",
                vec![vec![f("1"), f("a,\"b\"\r\nc")], vec![f("2"), f("x")], vec![f("3"), None, f("NULL")]],
            ),
            // TPC-H's .tbl files: the field terminator is a prefix of the line terminator.
            (
                "LOAD DATA LOCAL INFILE 'f' INTO TABLE t FIELDS TERMINATED BY '|' LINES TERMINATED BY '|\\n'",
                b"1|Customer#1|IVhzIApeRb|15|\n2|Customer#2|XSTf4,NCwDVaW|13|\n",
                vec![
                    vec![f("1"), f("Customer#1"), f("IVhzIApeRb"), f("15")],
                    vec![f("2"), f("Customer#2"), f("XSTf4,NCwDVaW"), f("13")],
                ],
            ),
            (
                "LOAD DATA LOCAL INFILE 'f' INTO TABLE t LINES TERMINATED BY '\\r\\n'",
                b"a\tb\r\nc\td\r\n",
                vec![vec![f("a"), f("b")], vec![f("c"), f("d")]],
            ),
            // LINES STARTING BY: text before the prefix, and lines without it, are skipped.
            (
                "LOAD DATA LOCAL INFILE 'f' INTO TABLE t FIELDS TERMINATED BY ',' LINES STARTING BY 'xxx'",
                b"xxx\"abc\",1\nsomething xxx\"def\",2\n\"ghi\",3",
                vec![vec![f("\"abc\""), f("1")], vec![f("\"def\""), f("2")]],
            ),
            // No escape character: backslashes are data.
            (
                "LOAD DATA LOCAL INFILE 'f' INTO TABLE t FIELDS TERMINATED BY ';' ESCAPED BY '' LINES TERMINATED BY '##'",
                b"a\\b;c##d;\\N##",
                vec![vec![f("a\\b"), f("c")], vec![f("d"), f("\\N")]],
            ),
        ];
        for (sql, input, want) in cases {
            assert_eq!(records(sql, input, input.len()), want, "{sql}");
            for chunk in 1..input.len() {
                assert_eq!(records(sql, input, chunk), want, "{sql} in chunks of {chunk}");
            }
        }
    }

    /// Every byte is parsed once: what waits for the next chunk is never more than an
    /// undecided tail, however long the record (a 2.4 MB line took 15 s before).
    #[test]
    fn long_records_are_parsed_in_one_pass() {
        let s = spec("LOAD DATA LOCAL INFILE 'f' INTO TABLE t FIELDS TERMINATED BY '|' LINES TERMINATED BY '|\n'");
        let mut p = RecordParser::new(&s);
        let mut out = Vec::new();
        let line = vec![b'x'; 8 << 20];
        let mut buf = Vec::new();
        for c in line.chunks(4096) {
            buf.extend_from_slice(c);
            let used = p.parse(&buf, false, &mut out).unwrap();
            buf.drain(..used);
            assert!(buf.len() < 2, "{} bytes wait", buf.len());
        }
        buf.extend_from_slice(b"|\n");
        let used = p.parse(&buf, false, &mut out).unwrap();
        assert_eq!(used, 2);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0][0].as_ref().map(Vec::len), Some(8 << 20));
        // A record beyond the limit is an error, not unbounded memory.
        let mut p = RecordParser::new(&s);
        let big = vec![b'y'; RECORD_BYTES_MAX + 1];
        assert_eq!(p.parse(&big, false, &mut out).unwrap_err().errno, 1153);
    }
}
