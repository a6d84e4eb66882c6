//! The `dict` block (NDB: DBDICT): owns the schema catalog of this node, runs DDL one request at
//! a time, persists the catalog (atomic file replace) before any change takes effect, and
//! distributes new catalog versions to every tc and ldm before answering the client. It also hands
//! out AUTO_INCREMENT ranges, persisting a high-water mark so values are never reused after a
//! restart.
//!
//! CREATE INDEX first builds the index in every ldm (which also checks uniqueness over existing
//! rows); only when all succeed is the new catalog written. A failure sends the old catalog back
//! out, which makes the ldms drop the half-built index.

use crate::signal::{Addr, ClientId, IoReq, Out, Signal};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use tern_types::schema::{Database, IndexId, TableId, check_ident};
use tern_types::{Catalog, ErrorCode, TernError};
use tern_wire::{DdlReq, Reply};

pub const CATALOG_FILE: &str = "catalog";
/// Queued schema requests beyond the running one; more answer "overloaded".
pub const DDL_QUEUE_MAX: usize = 1024;
pub const PARTITIONS_MAX: u32 = 1024;
const AUTO_INC_PREFETCH: u64 = 1000;

enum Stage {
    BuildIndex { catalog: Arc<Catalog>, index: IndexId, waiting: usize, failure: Option<TernError> },
    Revert { waiting: usize, error: TernError },
    Write { catalog: Arc<Catalog>, token: u64, broadcast: bool },
    Broadcast { waiting: usize },
}

struct Job {
    client: ClientId,
    req_id: u64,
    reply_to: Addr,
    reply: Reply,
    stage: Stage,
}

pub struct Dict {
    addr: Addr,
    ldms: Vec<Addr>,
    tcs: Vec<Addr>,
    default_partitions: u32,
    catalog: Arc<Catalog>,
    job: Option<Job>,
    queue: VecDeque<Signal>,
    auto_next: HashMap<TableId, u64>,
    next_token: u64,
}

fn error_reply(code: ErrorCode, msg: impl Into<String>) -> Reply {
    Reply::Error(TernError::new(code, msg))
}

impl Dict {
    pub fn new(addr: Addr, ldms: Vec<Addr>, tcs: Vec<Addr>, catalog: Arc<Catalog>) -> Dict {
        let default_partitions = ldms.len() as u32;
        Dict {
            addr,
            ldms,
            tcs,
            default_partitions,
            catalog,
            job: None,
            queue: VecDeque::new(),
            auto_next: HashMap::new(),
            next_token: 0,
        }
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    pub fn handle(&mut self, _now_ms: u64, sig: Signal, out: &mut Out) {
        match sig {
            Signal::Ddl { .. } | Signal::AutoInc { .. } => {
                if self.job.is_some() {
                    if self.queue.len() >= DDL_QUEUE_MAX {
                        if let Signal::Ddl { client, req_id, reply_to, .. }
                        | Signal::AutoInc { client, req_id, reply_to, .. } = sig
                        {
                            let reply = error_reply(ErrorCode::Overloaded, "too many schema requests queued");
                            out.send(reply_to, Signal::DdlReply { client, req_id, reply });
                        }
                        return;
                    }
                    self.queue.push_back(sig);
                } else {
                    self.begin(sig, out);
                }
            }
            Signal::IndexBuilt { result, index, .. } => self.index_built(index, result, out),
            Signal::SchemaAck { .. } => self.schema_ack(out),
            Signal::IoDone { token, result } => self.written(token, result, out),
            other => panic!("dict received an unexpected signal: {other:?}"),
        }
    }

    fn begin(&mut self, sig: Signal, out: &mut Out) {
        match sig {
            Signal::Ddl { client, req_id, reply_to, req } => match self.plan(req) {
                Ok(Some((catalog, build))) => {
                    let reply = Reply::DdlDone { catalog_version: catalog.version };
                    let mut job = Job { client, req_id, reply_to, reply, stage: Stage::Broadcast { waiting: 0 } };
                    match build {
                        Some((table, index)) => {
                            for &l in &self.ldms {
                                out.send(l, Signal::IndexBuild { table, index, catalog: catalog.clone() });
                            }
                            job.stage = Stage::BuildIndex { catalog, index, waiting: self.ldms.len(), failure: None };
                            self.job = Some(job);
                        }
                        None => {
                            self.job = Some(job);
                            self.write(catalog, true, out);
                        }
                    }
                }
                Ok(None) => {
                    let reply = Reply::DdlDone { catalog_version: self.catalog.version };
                    out.send(reply_to, Signal::DdlReply { client, req_id, reply });
                    self.next_job(out);
                }
                Err(e) => {
                    out.send(reply_to, Signal::DdlReply { client, req_id, reply: Reply::Error(e) });
                    self.next_job(out);
                }
            },
            Signal::AutoInc { client, req_id, reply_to, table, count } => {
                if self.catalog.table(table).is_none() {
                    let reply = error_reply(ErrorCode::NoSuchTable, format!("table id {table} does not exist"));
                    out.send(reply_to, Signal::DdlReply { client, req_id, reply });
                    return self.next_job(out);
                }
                let count = count.clamp(1, 1_000_000);
                let high = self.catalog.auto_inc_high.get(&table).copied().unwrap_or(1);
                let next = *self.auto_next.entry(table).or_insert(high);
                self.auto_next.insert(table, next + count as u64);
                let reply = Reply::AutoIncRange { start: next, count };
                if next + count as u64 <= high {
                    out.send(reply_to, Signal::DdlReply { client, req_id, reply });
                    return self.next_job(out);
                }
                let mut c = (*self.catalog).clone();
                c.auto_inc_high.insert(table, next + count as u64 + AUTO_INC_PREFETCH);
                self.job = Some(Job { client, req_id, reply_to, reply, stage: Stage::Broadcast { waiting: 0 } });
                self.write(Arc::new(c), false, out);
            }
            other => panic!("not a schema request: {other:?}"),
        }
    }

    fn next_job(&mut self, out: &mut Out) {
        self.job = None;
        if let Some(sig) = self.queue.pop_front() {
            self.begin(sig, out);
        }
    }

    fn write(&mut self, catalog: Arc<Catalog>, broadcast: bool, out: &mut Out) {
        let bytes = encode_catalog_file(&catalog);
        self.next_token += 1;
        let token = self.next_token;
        out.io(self.addr, IoReq::WriteFile { name: CATALOG_FILE.into(), bytes, token });
        self.job.as_mut().expect("a job").stage = Stage::Write { catalog, token, broadcast };
    }

    fn written(&mut self, token: u64, result: Result<(), String>, out: &mut Out) {
        if let Err(e) = result {
            panic!("dict: writing the catalog failed: {e}");
        }
        let Some(job) = self.job.as_mut() else { return };
        let Stage::Write { catalog, token: t, broadcast } = &job.stage else {
            return;
        };
        if *t != token {
            return;
        }
        let catalog = catalog.clone();
        let broadcast = *broadcast;
        self.catalog = catalog.clone();
        if !broadcast {
            return self.finish(out);
        }
        let targets: Vec<Addr> = self.ldms.iter().chain(self.tcs.iter()).copied().collect();
        for &a in &targets {
            out.send(a, Signal::Schema { catalog: catalog.clone() });
        }
        self.job.as_mut().expect("a job").stage = Stage::Broadcast { waiting: targets.len() };
    }

    fn schema_ack(&mut self, out: &mut Out) {
        let Some(job) = self.job.as_mut() else { return };
        match &mut job.stage {
            Stage::Broadcast { waiting } => {
                *waiting -= 1;
                if *waiting == 0 {
                    self.finish(out);
                }
            }
            Stage::Revert { waiting, error } => {
                *waiting -= 1;
                if *waiting == 0 {
                    job.reply = Reply::Error(error.clone());
                    self.finish(out);
                }
            }
            _ => {}
        }
    }

    fn index_built(&mut self, index: IndexId, result: Result<(), TernError>, out: &mut Out) {
        let Some(job) = self.job.as_mut() else { return };
        let Stage::BuildIndex { catalog, index: want, waiting, failure } = &mut job.stage else {
            return;
        };
        if *want != index {
            return;
        }
        if let Err(e) = result {
            failure.get_or_insert(e);
        }
        *waiting -= 1;
        if *waiting > 0 {
            return;
        }
        let catalog = catalog.clone();
        match failure.take() {
            None => self.write(catalog, true, out),
            Some(error) => {
                // Send the unchanged catalog: ldms drop indexes it does not name.
                for &l in &self.ldms {
                    out.send(l, Signal::Schema { catalog: self.catalog.clone() });
                }
                job.stage = Stage::Revert { waiting: self.ldms.len(), error };
            }
        }
    }

    fn finish(&mut self, out: &mut Out) {
        let job = self.job.take().expect("a job");
        out.send(job.reply_to, Signal::DdlReply { client: job.client, req_id: job.req_id, reply: job.reply });
        self.next_job(out);
    }

    /// Validates a DDL request against the current catalog. Ok(None): nothing to change
    /// (IF [NOT] EXISTS). Ok(Some((catalog, index to build))) otherwise.
    #[allow(clippy::type_complexity)]
    fn plan(&self, req: DdlReq) -> Result<Option<(Arc<Catalog>, Option<(TableId, IndexId)>)>, TernError> {
        let mut c = (*self.catalog).clone();
        c.version += 1;
        let mut build = None;
        match req {
            DdlReq::CreateDatabase { name, if_not_exists } => {
                check_ident("database", &name)?;
                if c.databases.contains_key(&name) {
                    if if_not_exists {
                        return Ok(None);
                    }
                    return Err(TernError::new(
                        ErrorCode::DatabaseExists,
                        format!("Can't create database '{name}'; database exists"),
                    ));
                }
                c.databases.insert(name.clone(), Database { name });
            }
            DdlReq::DropDatabase { name, if_exists } => {
                if c.databases.remove(&name).is_none() {
                    if if_exists {
                        return Ok(None);
                    }
                    return Err(TernError::new(
                        ErrorCode::NoSuchDatabase,
                        format!("Can't drop database '{name}'; database doesn't exist"),
                    ));
                }
                c.tables.retain(|_, t| t.database != name);
                let live: Vec<TableId> = c.tables.keys().copied().collect();
                c.auto_inc_high.retain(|t, _| live.contains(t));
                c.index_tables.retain(|_, t| live.contains(t));
            }
            DdlReq::CreateTable { mut table, if_not_exists } => {
                if !c.databases.contains_key(&table.database) {
                    return Err(TernError::new(
                        ErrorCode::NoSuchDatabase,
                        format!("Unknown database '{}'", table.database),
                    ));
                }
                if c.find_table(&table.database, &table.name).is_some() {
                    if if_not_exists {
                        return Ok(None);
                    }
                    return Err(TernError::new(
                        ErrorCode::TableExists,
                        format!("Table '{}' already exists", table.name),
                    ));
                }
                if table.primary_key.is_empty() {
                    // No primary key declared: a hidden one, filled by the client (as NDB does).
                    let mut col = tern_types::Column::new(
                        tern_types::schema::HIDDEN_ROWID,
                        tern_types::ColumnType::BigInt { unsigned: true },
                    )
                    .not_null();
                    col.auto_increment = true;
                    col.hidden = true;
                    table.columns.push(col);
                    table.primary_key = vec![(table.columns.len() - 1) as u16];
                    table.partition_key = table.primary_key.clone();
                }
                if table.partition_key.is_empty() {
                    table.partition_key = table.primary_key.clone();
                }
                if table.columns.iter().filter(|c| c.auto_increment).count() > 1 {
                    return Err(TernError::new(
                        ErrorCode::InvalidSchema,
                        "Incorrect table definition; there can be only one auto column",
                    ));
                }
                table.id = c.next_table_id;
                c.next_table_id += 1;
                if table.partition_count == 0 {
                    table.partition_count = self.default_partitions;
                }
                if table.partition_count > PARTITIONS_MAX {
                    return Err(TernError::new(
                        ErrorCode::InvalidSchema,
                        format!("at most {PARTITIONS_MAX} partitions"),
                    ));
                }
                for idx in &mut table.indexes {
                    idx.id = c.next_index_id;
                    c.next_index_id += 1;
                }
                table.validate()?;
                let uniques: Vec<tern_types::Index> = table.indexes.iter().filter(|i| i.unique).cloned().collect();
                for idx in uniques {
                    add_index_table(&mut c, &table, &idx);
                }
                c.tables.insert(table.id, table);
            }
            DdlReq::DropTable { database, name, if_exists } => {
                let Some(id) = c.find_table(&database, &name).map(|t| t.id) else {
                    if if_exists {
                        return Ok(None);
                    }
                    return Err(TernError::new(ErrorCode::NoSuchTable, format!("Unknown table '{database}.{name}'")));
                };
                if let Some(t) = c.tables.remove(&id) {
                    for idx in &t.indexes {
                        if let Some(it) = c.index_tables.remove(&idx.id) {
                            c.tables.remove(&it);
                        }
                    }
                }
                c.auto_inc_high.remove(&id);
            }
            DdlReq::CreateIndex { database, table, mut index } => {
                let id = c.next_index_id;
                let t = find_mut(&mut c, &database, &table)?;
                if t.index_by_name(&index.name).is_some() {
                    return Err(TernError::new(ErrorCode::IndexExists, format!("Duplicate key name '{}'", index.name)));
                }
                index.id = id;
                t.indexes.push(index.clone());
                t.validate()?;
                build = Some((t.id, id));
                let base = t.clone();
                c.next_index_id += 1;
                if index.unique {
                    add_index_table(&mut c, &base, &index);
                }
            }
            DdlReq::DropIndex { database, table, name } => {
                let t = find_mut(&mut c, &database, &table)?;
                let before = t.indexes.len();
                let dropped: Vec<u32> =
                    t.indexes.iter().filter(|i| i.name.eq_ignore_ascii_case(&name)).map(|i| i.id).collect();
                t.indexes.retain(|i| !i.name.eq_ignore_ascii_case(&name));
                for id in dropped {
                    if let Some(it) = c.index_tables.remove(&id) {
                        c.tables.remove(&it);
                    }
                }
                let t = find_mut(&mut c, &database, &table)?;
                if t.indexes.len() == before {
                    return Err(TernError::new(
                        ErrorCode::NoSuchIndex,
                        format!("Can't DROP '{name}'; check that column/key exists"),
                    ));
                }
            }
        }
        Ok(Some((Arc::new(c), build)))
    }
}

/// The catalog file: the encoded catalog followed by its crc32c.
pub fn encode_catalog_file(c: &Catalog) -> Vec<u8> {
    let mut bytes = Vec::new();
    c.encode(&mut bytes);
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// Reads a catalog file, checking its checksum and every table definition.
pub fn decode_catalog_file(bytes: &[u8]) -> Result<Catalog, String> {
    if bytes.len() < 4 {
        return Err("file too short".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err("checksum mismatch".into());
    }
    let c = Catalog::decode(body).map_err(|e| e.to_string())?;
    for t in c.tables.values() {
        t.validate().map_err(|e| format!("table {}.{}: {}", t.database, t.name, e.message))?;
    }
    Ok(c)
}

/// Creates the hidden table that enforces a unique index across partitions.
fn add_index_table(c: &mut Catalog, base: &tern_types::Table, index: &tern_types::Index) {
    let mut it = Catalog::index_table_def(base, index);
    it.id = c.next_table_id;
    c.next_table_id += 1;
    c.index_tables.insert(index.id, it.id);
    c.tables.insert(it.id, it);
}

fn find_mut<'a>(c: &'a mut Catalog, database: &str, table: &str) -> Result<&'a mut tern_types::Table, TernError> {
    if !c.databases.contains_key(database) {
        return Err(TernError::new(ErrorCode::NoSuchDatabase, format!("Unknown database '{database}'")));
    }
    c.tables
        .values_mut()
        .find(|t| t.database == database && t.name == table)
        .ok_or_else(|| TernError::new(ErrorCode::NoSuchTable, format!("Table '{database}.{table}' doesn't exist")))
}
