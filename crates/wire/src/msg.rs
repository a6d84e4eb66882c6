//! Client <-> data node messages.

use tern_types::bin::{Dec, DecodeError, DecodeResult, Enc};
use tern_types::filter::Filter;
use tern_types::schema::{Index, IndexId, Table, TableId};
use tern_types::{Catalog, ErrorCode, TernError, Value};

/// Operations per transaction batch.
pub const OPS_PER_BATCH_MAX: usize = 16_384;
/// Rows per scan batch.
pub const SCAN_BATCH_ROWS_MAX: u32 = 4096;
/// Index ranges one scan may read (`ScanReq::ranges`).
pub const SCAN_RANGES_MAX: usize = 1 << 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Read committed: no lock, latest committed version (or this transaction's own write).
    Read,
    ReadShared,
    ReadExclusive,
    Insert,
    Update,
    /// Insert or overwrite.
    Write,
    Delete,
    /// Deletes the row only if its TTL has passed (background purgers); NotFound otherwise.
    DeleteExpired,
    /// An `Update` that takes no row lock ("dirty", RonDB's DirtyINCRDECR): its column updates
    /// are applied again at commit to the row as committed then, so concurrent dirty increments
    /// never lose one another; the values it returns are computed at prepare and may be stale.
    /// An update that no longer applies at commit (a guard fails, an overflow) is dropped. Runs
    /// as a locked `Update` on tables with unique indexes or more than one replica.
    UpdateDirty,
}

impl OpKind {
    pub fn is_write(self) -> bool {
        matches!(
            self,
            OpKind::Insert
                | OpKind::Update
                | OpKind::Write
                | OpKind::Delete
                | OpKind::DeleteExpired
                | OpKind::UpdateDirty
        )
    }
    pub fn takes_lock(self) -> bool {
        !matches!(self, OpKind::Read)
    }
    fn from_u8(v: u8) -> DecodeResult<OpKind> {
        Ok(match v {
            0 => OpKind::Read,
            1 => OpKind::ReadShared,
            2 => OpKind::ReadExclusive,
            3 => OpKind::Insert,
            4 => OpKind::Update,
            5 => OpKind::Write,
            6 => OpKind::Delete,
            7 => OpKind::DeleteExpired,
            8 => OpKind::UpdateDirty,
            _ => return Err(DecodeError("bad op kind")),
        })
    }
}

/// A column change executed inside the data node (interpreted update).
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateExpr {
    Set(Value),
    /// Numeric add, checked for overflow against the column type. On a string column the stored
    /// value is a decimal integer (Redis INCR semantics: a signed 64-bit integer, no spaces, no '+').
    Add(Value),
    /// A guard: the operation fails with `ConditionFailed` unless the column equals the value.
    Expect(Value),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ColumnUpdate {
    pub col: u16,
    pub expr: UpdateExpr,
}

/// One primary-key operation.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyOp {
    pub table: TableId,
    pub kind: OpKind,
    /// Encoded primary key (memcomparable, see `tern_types::row`).
    pub key: Vec<u8>,
    /// Full encoded row for Insert and Write. For Update: empty, or the row to start from when
    /// the key is absent (an upsert: the updates are applied to it). Empty otherwise.
    pub row: Vec<u8>,
    /// Column changes for Update.
    pub updates: Vec<ColumnUpdate>,
    /// Columns to return: for reads None = the whole stored row; for Update the new row's
    /// columns; for Write and Delete the previous row's columns (NotFound when there was none).
    pub projection: Option<Vec<u16>>,
}

impl KeyOp {
    pub fn read(table: TableId, key: Vec<u8>) -> KeyOp {
        KeyOp { table, kind: OpKind::Read, key, row: Vec::new(), updates: Vec::new(), projection: None }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exec {
    NoCommit,
    Commit,
    Rollback,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AbortOption {
    /// Any failed operation aborts the transaction (NDB's AbortOnError).
    AbortOnError,
    /// Missing rows and duplicate keys are reported per operation; the rest goes on.
    IgnoreError,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TxnReq {
    /// Client-chosen transaction id, unique per connection.
    pub txn: u64,
    pub ops: Vec<KeyOp>,
    pub exec: Exec,
    pub abort: AbortOption,
    /// Acknowledge the commit only once its epoch is durable on disk.
    pub durable: bool,
    /// A row lock held by another transaction fails the operation at once with a temporary
    /// `Deadlock` error instead of waiting (optimistic multi-key writers retry in lock order).
    pub nowait: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum OpResult {
    Done,
    /// A read's row: the stored row bytes (no projection) or a value list (projection).
    Row(Vec<u8>),
    NotFound,
    Error(TernError),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// NoCommit batch executed; the transaction stays open.
    Open,
    Committed {
        epoch: u64,
    },
    RolledBack,
    Aborted(TernError),
}

#[derive(Debug, Clone, PartialEq)]
pub struct TxnResp {
    pub txn: u64,
    pub results: Vec<OpResult>,
    pub outcome: Outcome,
}

/// Bound of an ordered-index scan on the encoded index-column prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub key: Vec<u8>,
    pub inclusive: bool,
}

/// One range of an ordered index: from `lo` to `hi` (an open end is `None`).
pub type KeyRange = (Option<Bound>, Option<Bound>);

#[derive(Debug, Clone, PartialEq)]
pub struct ScanReq {
    pub scan: u64,
    pub table: TableId,
    /// Ordered index to scan; None = full scan in row-id order.
    pub index: Option<IndexId>,
    pub lo: Option<Bound>,
    pub hi: Option<Bound>,
    /// Several ranges of the index, ascending and disjoint, read one after the other (a
    /// multi-range scan, as for the keys of a join); when not empty, `lo` and `hi` are unused.
    pub ranges: Vec<KeyRange>,
    pub filter: Filter,
    pub projection: Option<Vec<u16>>,
    /// 0 = no limit.
    pub limit: u64,
    /// Merge partitions into index order (index scans only).
    pub ordered: bool,
    pub descending: bool,
    pub batch_rows: u32,
    /// Only this partition (the caller pruned by partition key).
    pub partition: Option<u32>,
    /// Return only rows whose TTL has passed (for purgers); normally expired rows are invisible.
    pub expired: bool,
    /// Fold the rows into partial groups in the data node (`tern_agg`); the rows returned
    /// are partial group rows then.
    pub aggregate: Option<tern_agg::Aggregation>,
    /// Leave out this many entries of the range, in reading order, before the first returned:
    /// found by rank in the ordered index rather than read (ZRANGE by rank, LIMIT offsets, a
    /// random member). Only for a plain range scan of one partition's index (one range, no
    /// filter, not of a TTL table, not aggregating): the data node refuses it elsewhere.
    pub offset: u64,
}

impl ScanReq {
    /// A full scan of a table returning whole rows, in batches of 256.
    pub fn table(table: TableId) -> ScanReq {
        ScanReq {
            scan: 0,
            table,
            index: None,
            lo: None,
            hi: None,
            ranges: Vec::new(),
            filter: Filter::True,
            projection: None,
            limit: 0,
            ordered: false,
            descending: false,
            batch_rows: 256,
            partition: None,
            expired: false,
            aggregate: None,
            offset: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum DdlReq {
    CreateDatabase {
        name: String,
        if_not_exists: bool,
    },
    DropDatabase {
        name: String,
        if_exists: bool,
    },
    /// The table's id and partition count are chosen by the node (partition_count 0 = default).
    CreateTable {
        table: Table,
        if_not_exists: bool,
    },
    DropTable {
        database: String,
        name: String,
        if_exists: bool,
    },
    CreateIndex {
        database: String,
        table: String,
        index: Index,
    },
    DropIndex {
        database: String,
        table: String,
        name: String,
    },
    /// ALTER TABLE … REORGANIZE PARTITION: spread the table (and its unique indexes' tables)
    /// over every node group in service. Answered once the control plane has taken it; the
    /// partitions move while the table serves.
    Reorganize {
        database: String,
        table: String,
    },
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct StatusInfo {
    pub node_id: u16,
    pub state: String,
    pub memory_used: u64,
    pub memory_total: u64,
    pub partitions: u32,
    pub rows: u64,
    pub ldm_workers: u16,
    pub durable_epoch: u64,
    pub current_epoch: u64,
    pub catalog_version: u64,
    /// Process id of the data node (0 when unknown).
    pub pid: u32,
    /// Key reads this node's coordinators sent to a backup replica on this node (READ_BACKUP).
    pub backup_reads: u64,
    /// Rows the TTL purge deleted on this node, per table id (ascending).
    pub ttl_purged: Vec<(u32, u64)>,
    /// Rows per table in the partition replicas this node holds, per table id (ascending): the
    /// query engine's estimate of a table's size.
    pub table_rows: Vec<(u32, u64)>,
    /// Data memory charged to each table's partition replicas on this node, per table id
    /// (ascending; refreshed by each ldm about once a second).
    pub table_bytes: Vec<(u32, u64)>,
    /// Event counters of the node since it started (lock waits, deadlocks, timeouts, redo and
    /// checkpoint progress), by name (ascending).
    pub counters: Vec<(String, u64)>,
    /// Milliseconds since the node's coordinator started.
    pub uptime_ms: u64,
    /// The partition replicas this node holds, by (table, partition) ascending.
    pub fragments: Vec<FragmentStat>,
    /// Row locks held or waited for, as each ldm last published them (at most
    /// `LOCKS_REPORTED` per ldm, about a second old at most).
    pub locks: Vec<LockStat>,
    /// This node's links to the other data nodes, by node id.
    pub links: Vec<LinkStat>,
}

/// Row locks each ldm reports at most (the oldest first).
pub const LOCKS_REPORTED: usize = 256;

/// One partition replica a data node holds (`ndbinfo.table_fragments`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FragmentStat {
    pub table: u32,
    pub partition: u32,
    pub ldm: u16,
    pub rows: u64,
    /// Data memory charged to it.
    pub bytes: u64,
}

/// One row lock (`ndbinfo.cluster_locks`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LockStat {
    pub ldm: u16,
    pub table: u32,
    pub partition: u32,
    /// The row's key as stored (its first 64 bytes).
    pub key: Vec<u8>,
    /// The transaction: its coordinator's node and its id there.
    pub tc_node: u16,
    pub txn: u64,
    pub exclusive: bool,
    /// Waiting for the lock (else holding it).
    pub waiting: bool,
    /// How long the wait has lasted, or how long ago the holder reached this ldm.
    pub duration_ms: u64,
}

/// A link to another data node (`ndbinfo.transporters`), summed over the node's workers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LinkStat {
    pub node: u16,
    pub addr: String,
    /// "CONNECTED", "CONNECTING" (never carried a signal yet, or reconnecting) or
    /// "DISCONNECTED" (broke after carrying signals; dropped until the peer is declared failed).
    pub status: String,
    /// "tcp" or "shm".
    pub transporter: String,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub connects: u64,
    /// Signals dropped because the link broke or its buffer was full.
    pub dropped: u64,
}

/// What a change-log request does (backups, `tern backup`): `Start` registers a log at every ldm
/// of the cluster (answered once all of them log every commit they make as primary), `Poll`
/// fetches what they buffered since (at most `max_bytes` in all, at least one entry per ldm that
/// has one), `Stop` ends it. A log nobody polls for a minute is dropped by the ldms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOp {
    Start,
    Poll,
    Stop,
}

impl LogOp {
    pub fn to_u8(self) -> u8 {
        match self {
            LogOp::Start => 0,
            LogOp::Poll => 1,
            LogOp::Stop => 2,
        }
    }

    pub fn from_u8(v: u8) -> DecodeResult<LogOp> {
        Ok(match v {
            0 => LogOp::Start,
            1 => LogOp::Poll,
            2 => LogOp::Stop,
            _ => return Err(DecodeError("bad log op")),
        })
    }
}

/// One entry of a change log: a commit as the partition's primary replica applied it, or an
/// epoch mark.
#[derive(Debug, Clone, PartialEq)]
pub enum LogEntry {
    /// The row's after-image (its stored bytes) committed in `epoch`. `log_gen` is the
    /// partition's change-log generation at the ldm that logged it (`Placed::log_gen`): while a
    /// partition moves, two ldms log it, and of one key's entries in an epoch the higher
    /// generation's last one is the newest.
    Put { epoch: u64, log_gen: u32, table: TableId, row: Vec<u8> },
    /// The row with this encoded primary key was deleted in `epoch`; `expired`: by the TTL
    /// purge (`OpKind::DeleteExpired`), the row being past its TTL.
    Delete { epoch: u64, log_gen: u32, table: TableId, key: Vec<u8>, expired: bool },
    /// Every commit of this epoch and of earlier ones at this ldm came before this mark.
    Epoch(u64),
}

impl LogEntry {
    /// Bytes this entry takes in a reply (what poll budgets count).
    pub fn size(&self) -> usize {
        match self {
            LogEntry::Put { row: b, .. } | LogEntry::Delete { key: b, .. } => 21 + b.len(),
            LogEntry::Epoch(_) => 9,
        }
    }
}

/// The entries one ldm returned, in its commit order.
#[derive(Debug, Clone, PartialEq)]
pub struct LogPart {
    pub node: u16,
    pub ldm: u16,
    pub entries: Vec<LogEntry>,
}

/// Entries of a change-log reply (all parts together).
pub const LOG_ENTRIES_MAX: usize = 1 << 22;

/// Appends a change-log entry: `[0][epoch u64][table u32][row]`, `[1][epoch u64][table u32][key]`
/// or `[2][epoch u64]`; of a generation above 0, `[3][epoch u64][log_gen u32][table u32][row]` and
/// `[4][epoch u64][log_gen u32][table u32][key]`; an expiry's delete is tagged 5 (generation 0)
/// or 6 (above) instead of 1 or 4.
pub fn enc_log_entry(e: &mut Enc, x: &LogEntry) {
    match x {
        LogEntry::Put { epoch, log_gen, table, row } | LogEntry::Delete { epoch, log_gen, table, key: row, .. } => {
            let tag = match (x, *log_gen) {
                (LogEntry::Delete { expired: true, .. }, 0) => 5,
                (LogEntry::Delete { expired: true, .. }, _) => 6,
                (LogEntry::Delete { .. }, 0) => 1,
                (LogEntry::Delete { .. }, _) => 4,
                (_, 0) => 0,
                _ => 3,
            };
            e.u8(tag);
            e.u64(*epoch);
            if *log_gen != 0 {
                e.u32(*log_gen);
            }
            e.u32(*table);
            e.bytes(row);
        }
        LogEntry::Epoch(epoch) => {
            e.u8(2);
            e.u64(*epoch);
        }
    }
}

/// Reads what `enc_log_entry` wrote.
pub fn dec_log_entry(d: &mut Dec) -> DecodeResult<LogEntry> {
    Ok(match d.u8()? {
        0 => LogEntry::Put { epoch: d.u64()?, log_gen: 0, table: d.u32()?, row: d.bytes()?.to_vec() },
        t @ (1 | 5) => {
            LogEntry::Delete { epoch: d.u64()?, log_gen: 0, table: d.u32()?, key: d.bytes()?.to_vec(), expired: t == 5 }
        }
        2 => LogEntry::Epoch(d.u64()?),
        3 => LogEntry::Put { epoch: d.u64()?, log_gen: d.u32()?, table: d.u32()?, row: d.bytes()?.to_vec() },
        t @ (4 | 6) => LogEntry::Delete {
            epoch: d.u64()?,
            log_gen: d.u32()?,
            table: d.u32()?,
            key: d.bytes()?.to_vec(),
            expired: t == 6,
        },
        _ => return Err(DecodeError("bad log entry tag")),
    })
}

/// Tables a change log is limited to, at most this many (an empty list: every table).
pub const LOG_TABLES_MAX: usize = 1 << 12;

/// Appends the tables of a change log's start.
pub fn enc_tables(e: &mut Enc, tables: &[TableId]) {
    e.u32(tables.len() as u32);
    tables.iter().for_each(|&t| e.u32(t));
}

/// Reads what `enc_tables` wrote.
pub fn dec_tables(d: &mut Dec) -> DecodeResult<Vec<TableId>> {
    let n = d.len(LOG_TABLES_MAX)?;
    (0..n).map(|_| d.u32()).collect()
}

/// Appends a list of change-log parts.
pub fn enc_log_parts(e: &mut Enc, parts: &[LogPart]) {
    e.u32(parts.len() as u32);
    for p in parts {
        e.u16(p.node);
        e.u16(p.ldm);
        e.u32(p.entries.len() as u32);
        p.entries.iter().for_each(|x| enc_log_entry(e, x));
    }
}

/// Reads what `enc_log_parts` wrote (at most `LOG_ENTRIES_MAX` entries in all).
pub fn dec_log_parts(d: &mut Dec) -> DecodeResult<Vec<LogPart>> {
    let n = d.len(1 << 16)?;
    let mut total = 0;
    let mut parts = Vec::new();
    for _ in 0..n {
        let (node, ldm) = (d.u16()?, d.u16()?);
        let k = d.len(LOG_ENTRIES_MAX - total)?;
        total += k;
        let entries = (0..k).map(|_| dec_log_entry(d)).collect::<DecodeResult<_>>()?;
        parts.push(LogPart { node, ldm, entries });
    }
    Ok(parts)
}

#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// First request on a connection. `worker`: move this connection to that worker thread (the
    /// tc co-located with the ldm of the partitions it will mostly touch).
    Hello {
        client_name: String,
        worker: Option<u16>,
        /// The cluster secret's proof (`tern_types::secret`), when the client has a secret.
        proof: Option<[u8; 32]>,
    },
    GetCatalog,
    Txn(TxnReq),
    Scan(ScanReq),
    ScanNext {
        scan: u64,
    },
    ScanClose {
        scan: u64,
    },
    Ddl(DdlReq),
    AutoInc {
        table: TableId,
        count: u32,
    },
    Status,
    /// The change log `sub` (a number the client chose, unique per connection); see `LogOp`.
    Log {
        sub: u64,
        op: LogOp,
        max_bytes: u32,
        /// At `Start`: the tables whose changes it carries (empty: every table); ignored after.
        tables: Vec<TableId>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `workers`: worker threads (= ldm count) of the node; `worker`: the one serving this
    /// connection.
    Welcome {
        node_id: u16,
        catalog_version: u64,
        workers: u16,
        worker: u16,
    },
    Catalog(Box<Catalog>),
    Txn(TxnResp),
    ScanRows {
        scan: u64,
        rows: Vec<Vec<u8>>,
        done: bool,
    },
    DdlDone {
        catalog_version: u64,
    },
    AutoIncRange {
        start: u64,
        count: u32,
    },
    Status(Box<StatusInfo>),
    Error(TernError),
    /// A change-log request's answer: per ldm, what it had buffered (empty for Start and Stop).
    Log {
        parts: Vec<LogPart>,
    },
}

/// Appends an error: `[code u32][message str]`.
pub fn enc_err(e: &mut Enc, err: &TernError) {
    e.u32(err.code as u32);
    e.str(&err.message);
}

/// Reads an error; a code this build does not know becomes `Internal` (the message is kept).
pub fn dec_err(d: &mut Dec) -> DecodeResult<TernError> {
    let code = ErrorCode::from_u32(d.u32()?).unwrap_or(ErrorCode::Internal);
    Ok(TernError::new(code, d.string()?))
}

/// Appends an optional column list (a projection): `[0]` or `[1][count u32][col u16]*`.
pub fn enc_opt_cols(e: &mut Enc, p: Option<&[u16]>) {
    match p {
        None => e.u8(0),
        Some(cols) => {
            e.u8(1);
            e.u32(cols.len() as u32);
            cols.iter().for_each(|&c| e.u16(c));
        }
    }
}

/// Reads what `enc_opt_cols` wrote (at most `COLUMNS_MAX` columns).
pub fn dec_opt_cols(d: &mut Dec) -> DecodeResult<Option<Vec<u16>>> {
    Ok(match d.u8()? {
        0 => None,
        1 => {
            let n = d.len(tern_types::schema::COLUMNS_MAX)?;
            Some((0..n).map(|_| d.u16()).collect::<DecodeResult<_>>()?)
        }
        _ => return Err(DecodeError("bad projection tag")),
    })
}

/// Appends an optional scan bound: `[0]` or `[1][key bytes][inclusive bool]`.
pub fn enc_bound(e: &mut Enc, b: &Option<Bound>) {
    match b {
        None => e.u8(0),
        Some(b) => {
            e.u8(1);
            e.bytes(&b.key);
            e.bool(b.inclusive);
        }
    }
}

/// Appends a list of index ranges.
pub fn enc_ranges(e: &mut Enc, ranges: &[KeyRange]) {
    e.u32(ranges.len() as u32);
    for (lo, hi) in ranges {
        enc_bound(e, lo);
        enc_bound(e, hi);
    }
}

/// Reads what `enc_ranges` wrote (at most `SCAN_RANGES_MAX`).
pub fn dec_ranges(d: &mut Dec) -> DecodeResult<Vec<KeyRange>> {
    let n = d.len(SCAN_RANGES_MAX)?;
    (0..n).map(|_| Ok((dec_bound(d)?, dec_bound(d)?))).collect()
}

/// Reads what `enc_bound` wrote.
pub fn dec_bound(d: &mut Dec) -> DecodeResult<Option<Bound>> {
    Ok(match d.u8()? {
        0 => None,
        1 => Some(Bound { key: d.bytes()?.to_vec(), inclusive: d.bool()? }),
        _ => return Err(DecodeError("bad bound tag")),
    })
}

/// Appends one operation's result: `[0]` done, `[1][row bytes]`, `[2]` not found, `[3][error]`.
pub fn enc_op_result(e: &mut Enc, r: &OpResult) {
    match r {
        OpResult::Done => e.u8(0),
        OpResult::Row(b) => {
            e.u8(1);
            e.bytes(b)
        }
        OpResult::NotFound => e.u8(2),
        OpResult::Error(err) => {
            e.u8(3);
            enc_err(e, err)
        }
    }
}

/// Reads what `enc_op_result` wrote.
pub fn dec_op_result(d: &mut Dec) -> DecodeResult<OpResult> {
    Ok(match d.u8()? {
        0 => OpResult::Done,
        1 => OpResult::Row(d.bytes()?.to_vec()),
        2 => OpResult::NotFound,
        3 => OpResult::Error(dec_err(d)?),
        _ => return Err(DecodeError("bad op result")),
    })
}

impl KeyOp {
    /// Appends the operation (the layout inside a client `Txn` request).
    pub fn encode(&self, e: &mut Enc) {
        e.u32(self.table);
        e.u8(self.kind as u8);
        e.bytes(&self.key);
        e.bytes(&self.row);
        e.u32(self.updates.len() as u32);
        for u in &self.updates {
            e.u16(u.col);
            match &u.expr {
                UpdateExpr::Set(v) => {
                    e.u8(0);
                    v.encode(e)
                }
                UpdateExpr::Add(v) => {
                    e.u8(1);
                    v.encode(e)
                }
                UpdateExpr::Expect(v) => {
                    e.u8(2);
                    v.encode(e)
                }
            }
        }
        enc_opt_cols(e, self.projection.as_deref());
    }

    /// Reads what `encode` wrote (at most `COLUMNS_MAX` column updates).
    pub fn decode(d: &mut Dec) -> DecodeResult<KeyOp> {
        let table = d.u32()?;
        let kind = OpKind::from_u8(d.u8()?)?;
        let key = d.bytes()?.to_vec();
        let row = d.bytes()?.to_vec();
        let n = d.len(tern_types::schema::COLUMNS_MAX)?;
        let mut updates = Vec::with_capacity(n);
        for _ in 0..n {
            let col = d.u16()?;
            let expr = match d.u8()? {
                0 => UpdateExpr::Set(Value::decode(d)?),
                1 => UpdateExpr::Add(Value::decode(d)?),
                2 => UpdateExpr::Expect(Value::decode(d)?),
                _ => return Err(DecodeError("bad update tag")),
            };
            updates.push(ColumnUpdate { col, expr });
        }
        Ok(KeyOp { table, kind, key, row, updates, projection: dec_opt_cols(d)? })
    }
}

impl Request {
    /// Appends `[kind][req_id][body]`.
    pub fn encode(&self, req_id: u64, out: &mut Vec<u8>) {
        let mut e = Enc::new(out);
        match self {
            Request::Hello { client_name, worker, proof } => {
                e.u8(1);
                e.u64(req_id);
                e.str(client_name);
                match worker {
                    None => e.u8(0),
                    Some(w) => {
                        e.u8(1);
                        e.u16(*w)
                    }
                }
                match proof {
                    None => e.u8(0),
                    Some(p) => {
                        e.u8(1);
                        e.raw(p)
                    }
                }
            }
            Request::GetCatalog => {
                e.u8(2);
                e.u64(req_id);
            }
            Request::Txn(t) => {
                e.u8(3);
                e.u64(req_id);
                e.u64(t.txn);
                e.u8(t.exec as u8);
                e.u8(t.abort as u8);
                e.bool(t.durable);
                e.bool(t.nowait);
                e.u32(t.ops.len() as u32);
                t.ops.iter().for_each(|op| op.encode(&mut e));
            }
            Request::Scan(s) => {
                e.u8(4);
                e.u64(req_id);
                e.u64(s.scan);
                e.u32(s.table);
                match s.index {
                    None => e.u8(0),
                    Some(i) => {
                        e.u8(1);
                        e.u32(i)
                    }
                }
                enc_bound(&mut e, &s.lo);
                enc_bound(&mut e, &s.hi);
                enc_ranges(&mut e, &s.ranges);
                s.filter.encode(&mut e);
                enc_opt_cols(&mut e, s.projection.as_deref());
                e.u64(s.limit);
                e.bool(s.ordered);
                e.bool(s.descending);
                e.u32(s.batch_rows);
                match s.partition {
                    None => e.u8(0),
                    Some(p) => {
                        e.u8(1);
                        e.u32(p)
                    }
                }
                e.bool(s.expired);
                match &s.aggregate {
                    None => e.u8(0),
                    Some(a) => {
                        e.u8(1);
                        a.encode(&mut e);
                    }
                }
                e.u64(s.offset);
            }
            Request::ScanNext { scan } => {
                e.u8(5);
                e.u64(req_id);
                e.u64(*scan);
            }
            Request::ScanClose { scan } => {
                e.u8(6);
                e.u64(req_id);
                e.u64(*scan);
            }
            Request::Ddl(ddl) => {
                e.u8(7);
                e.u64(req_id);
                encode_ddl(&mut e, ddl);
            }
            Request::AutoInc { table, count } => {
                e.u8(8);
                e.u64(req_id);
                e.u32(*table);
                e.u32(*count);
            }
            Request::Status => {
                e.u8(9);
                e.u64(req_id);
            }
            Request::Log { sub, op, max_bytes, tables } => {
                e.u8(10);
                e.u64(req_id);
                e.u64(*sub);
                e.u8(op.to_u8());
                e.u32(*max_bytes);
                enc_tables(&mut e, tables);
            }
        }
    }

    pub fn decode(payload: &[u8]) -> DecodeResult<(u64, Request)> {
        let mut d = Dec::new(payload);
        let kind = d.u8()?;
        let id = d.u64()?;
        let r = match kind {
            1 => Request::Hello {
                client_name: d.string()?,
                worker: match d.u8()? {
                    0 => None,
                    1 => Some(d.u16()?),
                    _ => return Err(DecodeError("bad worker tag")),
                },
                proof: match d.u8()? {
                    0 => None,
                    1 => Some(d.take(32)?.try_into().expect("32 bytes")),
                    _ => return Err(DecodeError("bad proof tag")),
                },
            },
            2 => Request::GetCatalog,
            3 => {
                let txn = d.u64()?;
                let exec = match d.u8()? {
                    0 => Exec::NoCommit,
                    1 => Exec::Commit,
                    2 => Exec::Rollback,
                    _ => return Err(DecodeError("bad exec type")),
                };
                let abort = match d.u8()? {
                    0 => AbortOption::AbortOnError,
                    1 => AbortOption::IgnoreError,
                    _ => return Err(DecodeError("bad abort option")),
                };
                let durable = d.bool()?;
                let nowait = d.bool()?;
                let n = d.len(OPS_PER_BATCH_MAX)?;
                let ops = (0..n).map(|_| KeyOp::decode(&mut d)).collect::<DecodeResult<_>>()?;
                Request::Txn(TxnReq { txn, ops, exec, abort, durable, nowait })
            }
            4 => {
                let scan = d.u64()?;
                let table = d.u32()?;
                let index = match d.u8()? {
                    0 => None,
                    1 => Some(d.u32()?),
                    _ => return Err(DecodeError("bad index tag")),
                };
                let lo = dec_bound(&mut d)?;
                let hi = dec_bound(&mut d)?;
                let ranges = dec_ranges(&mut d)?;
                let filter = Filter::decode(&mut d)?;
                let projection = dec_opt_cols(&mut d)?;
                let limit = d.u64()?;
                let ordered = d.bool()?;
                let descending = d.bool()?;
                let batch_rows = d.u32()?;
                let partition = match d.u8()? {
                    0 => None,
                    1 => Some(d.u32()?),
                    _ => return Err(DecodeError("bad partition tag")),
                };
                let expired = d.bool()?;
                let aggregate = match d.u8()? {
                    0 => None,
                    1 => Some(tern_agg::Aggregation::decode(&mut d)?),
                    _ => return Err(DecodeError("bad aggregate tag")),
                };
                let offset = d.u64()?;
                Request::Scan(ScanReq {
                    scan,
                    table,
                    index,
                    lo,
                    hi,
                    ranges,
                    filter,
                    projection,
                    limit,
                    ordered,
                    descending,
                    batch_rows,
                    partition,
                    expired,
                    aggregate,
                    offset,
                })
            }
            5 => Request::ScanNext { scan: d.u64()? },
            6 => Request::ScanClose { scan: d.u64()? },
            7 => Request::Ddl(decode_ddl(&mut d)?),
            8 => Request::AutoInc { table: d.u32()?, count: d.u32()? },
            9 => Request::Status,
            10 => Request::Log {
                sub: d.u64()?,
                op: LogOp::from_u8(d.u8()?)?,
                max_bytes: d.u32()?,
                tables: dec_tables(&mut d)?,
            },
            _ => return Err(DecodeError("unknown request kind")),
        };
        if !d.is_empty() {
            return Err(DecodeError("trailing bytes in request"));
        }
        Ok((id, r))
    }
}

/// Appends a DDL request. `CreateIndex` carries no index id: the dict assigns it.
pub fn encode_ddl(e: &mut Enc, ddl: &DdlReq) {
    match ddl {
        DdlReq::CreateDatabase { name, if_not_exists } => {
            e.u8(1);
            e.str(name);
            e.bool(*if_not_exists);
        }
        DdlReq::DropDatabase { name, if_exists } => {
            e.u8(2);
            e.str(name);
            e.bool(*if_exists);
        }
        DdlReq::CreateTable { table, if_not_exists } => {
            e.u8(3);
            table.encode(e);
            e.bool(*if_not_exists);
        }
        DdlReq::DropTable { database, name, if_exists } => {
            e.u8(4);
            e.str(database);
            e.str(name);
            e.bool(*if_exists);
        }
        DdlReq::CreateIndex { database, table, index } => {
            e.u8(5);
            e.str(database);
            e.str(table);
            e.str(&index.name);
            e.u32(index.columns.len() as u32);
            index.columns.iter().for_each(|&c| e.u16(c));
            e.bool(index.unique);
        }
        DdlReq::DropIndex { database, table, name } => {
            e.u8(6);
            e.str(database);
            e.str(table);
            e.str(name);
        }
        DdlReq::Reorganize { database, table } => {
            e.u8(7);
            e.str(database);
            e.str(table);
        }
    }
}

/// Reads what `encode_ddl` wrote (`CreateIndex` comes back with index id 0).
pub fn decode_ddl(d: &mut Dec) -> DecodeResult<DdlReq> {
    Ok(match d.u8()? {
        1 => DdlReq::CreateDatabase { name: d.string()?, if_not_exists: d.bool()? },
        2 => DdlReq::DropDatabase { name: d.string()?, if_exists: d.bool()? },
        3 => DdlReq::CreateTable { table: Table::decode(d)?, if_not_exists: d.bool()? },
        4 => DdlReq::DropTable { database: d.string()?, name: d.string()?, if_exists: d.bool()? },
        5 => {
            let database = d.string()?;
            let table = d.string()?;
            let name = d.string()?;
            let n = d.len(tern_types::schema::COLUMNS_MAX)?;
            let columns = (0..n).map(|_| d.u16()).collect::<DecodeResult<_>>()?;
            let unique = d.bool()?;
            DdlReq::CreateIndex { database, table, index: Index { id: 0, name, columns, unique } }
        }
        6 => DdlReq::DropIndex { database: d.string()?, table: d.string()?, name: d.string()? },
        7 => DdlReq::Reorganize { database: d.string()?, table: d.string()? },
        _ => return Err(DecodeError("unknown ddl kind")),
    })
}

impl Reply {
    pub fn encode(&self, req_id: u64, out: &mut Vec<u8>) {
        let mut e = Enc::new(out);
        match self {
            Reply::Welcome { node_id, catalog_version, workers, worker } => {
                e.u8(1);
                e.u64(req_id);
                e.u16(*node_id);
                e.u64(*catalog_version);
                e.u16(*workers);
                e.u16(*worker);
            }
            Reply::Catalog(c) => {
                e.u8(2);
                e.u64(req_id);
                let mut b = Vec::new();
                c.encode(&mut b);
                e.bytes(&b);
            }
            Reply::Txn(t) => {
                e.u8(3);
                e.u64(req_id);
                e.u64(t.txn);
                e.u32(t.results.len() as u32);
                t.results.iter().for_each(|r| enc_op_result(&mut e, r));
                match &t.outcome {
                    Outcome::Open => e.u8(0),
                    Outcome::Committed { epoch } => {
                        e.u8(1);
                        e.u64(*epoch)
                    }
                    Outcome::RolledBack => e.u8(2),
                    Outcome::Aborted(err) => {
                        e.u8(3);
                        enc_err(&mut e, err)
                    }
                }
            }
            Reply::ScanRows { scan, rows, done } => {
                e.u8(4);
                e.u64(req_id);
                e.u64(*scan);
                e.bool(*done);
                e.u32(rows.len() as u32);
                rows.iter().for_each(|r| e.bytes(r));
            }
            Reply::DdlDone { catalog_version } => {
                e.u8(5);
                e.u64(req_id);
                e.u64(*catalog_version);
            }
            Reply::AutoIncRange { start, count } => {
                e.u8(6);
                e.u64(req_id);
                e.u64(*start);
                e.u32(*count);
            }
            Reply::Status(s) => {
                e.u8(7);
                e.u64(req_id);
                e.u16(s.node_id);
                e.str(&s.state);
                e.u64(s.memory_used);
                e.u64(s.memory_total);
                e.u32(s.partitions);
                e.u64(s.rows);
                e.u16(s.ldm_workers);
                e.u64(s.durable_epoch);
                e.u64(s.current_epoch);
                e.u64(s.catalog_version);
                e.u32(s.pid);
                e.u64(s.backup_reads);
                e.u32(s.ttl_purged.len() as u32);
                for &(t, n) in &s.ttl_purged {
                    e.u32(t);
                    e.u64(n);
                }
                e.u32(s.table_rows.len() as u32);
                for &(t, n) in &s.table_rows {
                    e.u32(t);
                    e.u64(n);
                }
                e.u32(s.table_bytes.len() as u32);
                for &(t, n) in &s.table_bytes {
                    e.u32(t);
                    e.u64(n);
                }
                e.u32(s.counters.len() as u32);
                for (name, n) in &s.counters {
                    e.str(name);
                    e.u64(*n);
                }
                e.u64(s.uptime_ms);
                e.u32(s.fragments.len() as u32);
                for f in &s.fragments {
                    e.u32(f.table);
                    e.u32(f.partition);
                    e.u16(f.ldm);
                    e.u64(f.rows);
                    e.u64(f.bytes);
                }
                e.u32(s.locks.len() as u32);
                for l in &s.locks {
                    e.u16(l.ldm);
                    e.u32(l.table);
                    e.u32(l.partition);
                    e.bytes(&l.key);
                    e.u16(l.tc_node);
                    e.u64(l.txn);
                    e.u8(l.exclusive as u8 | (l.waiting as u8) << 1);
                    e.u64(l.duration_ms);
                }
                e.u32(s.links.len() as u32);
                for l in &s.links {
                    e.u16(l.node);
                    e.str(&l.addr);
                    e.str(&l.status);
                    e.str(&l.transporter);
                    e.u64(l.bytes_sent);
                    e.u64(l.bytes_received);
                    e.u64(l.connects);
                    e.u64(l.dropped);
                }
            }
            Reply::Error(err) => {
                e.u8(8);
                e.u64(req_id);
                enc_err(&mut e, err);
            }
            Reply::Log { parts } => {
                e.u8(9);
                e.u64(req_id);
                enc_log_parts(&mut e, parts);
            }
        }
    }

    pub fn decode(payload: &[u8]) -> DecodeResult<(u64, Reply)> {
        let mut d = Dec::new(payload);
        let kind = d.u8()?;
        let id = d.u64()?;
        let r = match kind {
            1 => Reply::Welcome { node_id: d.u16()?, catalog_version: d.u64()?, workers: d.u16()?, worker: d.u16()? },
            2 => Reply::Catalog(Box::new(Catalog::decode(d.bytes()?)?)),
            3 => {
                let txn = d.u64()?;
                let n = d.len(OPS_PER_BATCH_MAX)?;
                let mut results = Vec::with_capacity(n);
                for _ in 0..n {
                    results.push(dec_op_result(&mut d)?);
                }
                let outcome = match d.u8()? {
                    0 => Outcome::Open,
                    1 => Outcome::Committed { epoch: d.u64()? },
                    2 => Outcome::RolledBack,
                    3 => Outcome::Aborted(dec_err(&mut d)?),
                    _ => return Err(DecodeError("bad outcome")),
                };
                Reply::Txn(TxnResp { txn, results, outcome })
            }
            4 => {
                let scan = d.u64()?;
                let done = d.bool()?;
                let n = d.len(SCAN_BATCH_ROWS_MAX as usize * 4)?;
                let rows = (0..n).map(|_| d.bytes().map(|b| b.to_vec())).collect::<DecodeResult<_>>()?;
                Reply::ScanRows { scan, rows, done }
            }
            5 => Reply::DdlDone { catalog_version: d.u64()? },
            6 => Reply::AutoIncRange { start: d.u64()?, count: d.u32()? },
            7 => Reply::Status(Box::new(dec_status(&mut d)?)),
            8 => Reply::Error(dec_err(&mut d)?),
            9 => Reply::Log { parts: dec_log_parts(&mut d)? },
            _ => return Err(DecodeError("unknown reply kind")),
        };
        if !d.is_empty() {
            return Err(DecodeError("trailing bytes in reply"));
        }
        Ok((id, r))
    }
}

/// A status answer; the fields after `counters` are absent in an older node's answer.
fn dec_status(d: &mut Dec) -> DecodeResult<StatusInfo> {
    let mut s = StatusInfo {
        node_id: d.u16()?,
        state: d.string()?,
        memory_used: d.u64()?,
        memory_total: d.u64()?,
        partitions: d.u32()?,
        rows: d.u64()?,
        ldm_workers: d.u16()?,
        durable_epoch: d.u64()?,
        current_epoch: d.u64()?,
        catalog_version: d.u64()?,
        pid: d.u32()?,
        backup_reads: d.u64()?,
        ttl_purged: {
            let n = d.len(1 << 20)?;
            (0..n).map(|_| Ok((d.u32()?, d.u64()?))).collect::<DecodeResult<_>>()?
        },
        table_rows: {
            let n = d.len(1 << 20)?;
            (0..n).map(|_| Ok((d.u32()?, d.u64()?))).collect::<DecodeResult<_>>()?
        },
        table_bytes: {
            let n = d.len(1 << 20)?;
            (0..n).map(|_| Ok((d.u32()?, d.u64()?))).collect::<DecodeResult<_>>()?
        },
        counters: {
            let n = d.len(1 << 16)?;
            (0..n).map(|_| Ok((d.string()?, d.u64()?))).collect::<DecodeResult<_>>()?
        },
        ..Default::default()
    };
    if d.is_empty() {
        return Ok(s);
    }
    s.uptime_ms = d.u64()?;
    let n = d.len(1 << 20)?;
    s.fragments = (0..n)
        .map(|_| {
            Ok(FragmentStat { table: d.u32()?, partition: d.u32()?, ldm: d.u16()?, rows: d.u64()?, bytes: d.u64()? })
        })
        .collect::<DecodeResult<_>>()?;
    let n = d.len(1 << 20)?;
    s.locks = (0..n)
        .map(|_| {
            let (ldm, table, partition) = (d.u16()?, d.u32()?, d.u32()?);
            let key = d.bytes()?.to_vec();
            let (tc_node, txn, flags, duration_ms) = (d.u16()?, d.u64()?, d.u8()?, d.u64()?);
            Ok(LockStat {
                ldm,
                table,
                partition,
                key,
                tc_node,
                txn,
                exclusive: flags & 1 != 0,
                waiting: flags & 2 != 0,
                duration_ms,
            })
        })
        .collect::<DecodeResult<_>>()?;
    let n = d.len(1 << 16)?;
    s.links = (0..n)
        .map(|_| {
            Ok(LinkStat {
                node: d.u16()?,
                addr: d.string()?,
                status: d.string()?,
                transporter: d.string()?,
                bytes_sent: d.u64()?,
                bytes_received: d.u64()?,
                connects: d.u64()?,
                dropped: d.u64()?,
            })
        })
        .collect::<DecodeResult<_>>()?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_replies_round_trip() {
        let reqs = vec![
            Request::Hello { client_name: "x".into(), worker: Some(1), proof: None },
            Request::Hello { client_name: "y".into(), worker: None, proof: Some([7; 32]) },
            Request::Txn(TxnReq {
                txn: 9,
                ops: vec![
                    KeyOp::read(3, vec![1, 2]),
                    KeyOp {
                        table: 3,
                        kind: OpKind::Update,
                        key: vec![5],
                        row: vec![],
                        updates: vec![ColumnUpdate { col: 2, expr: UpdateExpr::Add(Value::Int(1)) }],
                        projection: Some(vec![1, 2]),
                    },
                ],
                exec: Exec::Commit,
                abort: AbortOption::IgnoreError,
                durable: true,
                nowait: true,
            }),
            Request::Scan(ScanReq {
                scan: 1,
                table: 2,
                index: Some(4),
                lo: Some(Bound { key: vec![1], inclusive: true }),
                hi: None,
                ranges: vec![(None, Some(Bound { key: vec![2], inclusive: false }))],
                filter: Filter::IsNull(3),
                projection: None,
                limit: 10,
                ordered: true,
                descending: false,
                batch_rows: 100,
                partition: Some(1),
                expired: true,
                aggregate: Some(tern_agg::Aggregation {
                    group_by: vec![tern_agg::AggExpr::Col(1)],
                    aggs: vec![(tern_agg::AggOp::Count, None), (tern_agg::AggOp::Sum, Some(tern_agg::AggExpr::Col(2)))],
                }),
                offset: 1 << 33,
            }),
            Request::Ddl(DdlReq::DropTable { database: "d".into(), name: "t".into(), if_exists: true }),
            Request::Status,
            Request::Log { sub: 4, op: LogOp::Poll, max_bytes: 1 << 20, tables: vec![] },
            Request::Log { sub: 5, op: LogOp::Start, max_bytes: 0, tables: vec![7, 9] },
        ];
        for r in reqs {
            let mut b = Vec::new();
            r.encode(77, &mut b);
            assert_eq!(Request::decode(&b).unwrap(), (77, r.clone()));
            assert!(Request::decode(&b[..b.len() - 1]).is_err());
        }
        let reps = vec![
            Reply::Txn(TxnResp {
                txn: 1,
                results: vec![
                    OpResult::Row(vec![1, 2, 3]),
                    OpResult::NotFound,
                    OpResult::Error(TernError::new(ErrorCode::DuplicateKey, "dup")),
                ],
                outcome: Outcome::Committed { epoch: 12 },
            }),
            Reply::ScanRows { scan: 3, rows: vec![vec![9; 5]], done: true },
            Reply::Status(Box::new(StatusInfo { node_id: 1, state: "started".into(), ..Default::default() })),
            Reply::Status(Box::new(StatusInfo {
                ttl_purged: vec![(3, 9)],
                table_rows: vec![(3, 100), (4, 0)],
                table_bytes: vec![(3, 4096)],
                counters: vec![("deadlocks".into(), 2), ("lock_waits".into(), 7)],
                uptime_ms: 12_345,
                fragments: vec![FragmentStat { table: 3, partition: 1, ldm: 1, rows: 100, bytes: 4096 }],
                locks: vec![LockStat {
                    ldm: 1,
                    table: 3,
                    partition: 1,
                    key: vec![0, 7],
                    tc_node: 2,
                    txn: 99,
                    exclusive: true,
                    waiting: false,
                    duration_ms: 1500,
                }],
                links: vec![LinkStat {
                    node: 2,
                    addr: "10.0.0.2:11860".into(),
                    status: "CONNECTED".into(),
                    transporter: "tcp".into(),
                    bytes_sent: 1,
                    bytes_received: 2,
                    connects: 1,
                    dropped: 0,
                }],
                ..Default::default()
            })),
            Reply::Error(TernError::new(ErrorCode::NoSuchTable, "no")),
            Reply::Log {
                parts: vec![
                    LogPart {
                        node: 2,
                        ldm: 1,
                        entries: vec![
                            LogEntry::Put { epoch: 7, log_gen: 0, table: 3, row: vec![1, 2] },
                            LogEntry::Put { epoch: 7, log_gen: 2, table: 3, row: vec![1, 2] },
                            LogEntry::Delete { epoch: 8, log_gen: 0, table: 3, key: vec![9], expired: false },
                            LogEntry::Delete { epoch: 8, log_gen: 5, table: 3, key: vec![9], expired: false },
                            LogEntry::Delete { epoch: 8, log_gen: 0, table: 3, key: vec![9], expired: true },
                            LogEntry::Delete { epoch: 8, log_gen: 5, table: 3, key: vec![9], expired: true },
                            LogEntry::Epoch(8),
                        ],
                    },
                    LogPart { node: 1, ldm: 0, entries: vec![] },
                ],
            },
        ];
        for r in reps {
            let mut b = Vec::new();
            r.encode(5, &mut b);
            assert_eq!(Reply::decode(&b).unwrap(), (5, r.clone()));
        }
    }

    #[test]
    fn a_status_answer_of_an_older_node_has_no_fragments_locks_or_links() {
        let s = StatusInfo { node_id: 2, counters: vec![("commits".into(), 3)], ..Default::default() };
        let mut b = Vec::new();
        Reply::Status(Box::new(s.clone())).encode(5, &mut b);
        // The older answer ends after the counters: uptime (8 bytes) and three empty lists.
        b.truncate(b.len() - 8 - 3 * 4);
        assert_eq!(Reply::decode(&b).unwrap(), (5, Reply::Status(Box::new(s))));
        b.pop();
        assert!(Reply::decode(&b).is_err());
    }
}
