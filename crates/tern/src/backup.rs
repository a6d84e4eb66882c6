//! `tern backup --dir D` and `tern restore --dir D`: an online backup consistent at one epoch,
//! taken while writes go on, and its restore into an empty cluster of any node count.
//!
//! The scheme is NDB's (ndb-protocols.md; the MySQL NDB Cluster manual, "Online Backup of NDB
//! Cluster"): a backup is a fuzzy scan of every table plus a log of the changes committed while
//! the scan ran, replayed up to an end epoch chosen after every scan finished. Steps:
//! 1. A change log starts at every ldm of the started data nodes (`Request::Log`): from then on
//!    each ldm keeps what it commits as a partition's primary (after-images and deletes, with
//!    their epochs) and an epoch mark at every epoch flush. A thread polls it into `log-<t>.dat`.
//! 2. Every table is scanned (read committed) into `data-<t>.dat`.
//! 3. The end epoch is the connected node's current epoch + 1 once the scans ended: no row a
//!    scan read was committed in a later epoch (epochs form a consistent cut, and the tcs give
//!    out at most one epoch more than any node reports). The backup waits until every ldm's
//!    epoch mark reached it (its log holds every change up to it) and the epoch is durable.
//! 4. The catalog (`catalog.bin`) and `BACKUP.json` (end epoch, files with their CRC-32C, row
//!    and log counts) are written last: a directory without `BACKUP.json` is no backup.
//!
//! Restore reads each table's rows, applies its log entries of epochs up to the end epoch in log
//! order (each partition's entries come from one ldm in commit order), and writes the resulting
//! rows, so the target holds exactly the source's state at the end epoch; unique indexes are
//! rebuilt by those writes, AUTO_INCREMENT counters continue above the backup's. The target
//! must be empty: a table may exist already only with the same columns and without rows (the
//! `mysql` and `tern_sys` tables the front ends create at start are merged into).

use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_client::{Catalog, Client, KeyOp, LogEntry, LogOp, Table, TableHandle, block_on};
use tern_types::schema::TableId;
use tern_wire::ScanReq;

/// What `BACKUP.json` says a backup's format is.
pub const FORMAT: &str = "tern-backup-1";
const MANIFEST: &str = "BACKUP.json";
/// The change log's number on the backup's connection.
const LOG_SUB: u64 = 1;
/// Bytes one poll of the change log may bring.
const POLL_BYTES: u32 = 8 << 20;
/// How long the backup waits for its end epoch to be flushed and durable everywhere.
const END_WAIT: Duration = Duration::from_secs(120);
/// Rows per restore transaction.
const RESTORE_BATCH: usize = 256;
/// Backups taken before giving up when the cluster keeps changing under them.
const ATTEMPTS: u32 = 3;
/// Times one table's scan is begun again after a temporary failure.
const SCAN_TRIES: u32 = 10;
/// What a change log's failure says when the cluster changed during the backup (`ldm::log`).
const RETRY_TEXT: &str = "take it again";
/// Databases whose tables the front ends create at start: restore merges into them.
const SYSTEM_DATABASES: &[&str] = &["mysql", "tern_sys"];

/// A log entry kind in `log-<t>.dat`: `[kind u8][epoch u64][len u32][bytes]`, and for an entry
/// of a change-log generation above 0 (logged by a partition's move target, or after a move:
/// `LogEntry::Put`) `[kind u8][epoch u64][log_gen u32][len u32][bytes]`.
const LOG_PUT: u8 = 0;
const LOG_DELETE: u8 = 1;
const LOG_PUT_GEN: u8 = 2;
const LOG_DELETE_GEN: u8 = 3;

/// Per table, a finished file's CRC-32C and its row or entry count.
type Files = BTreeMap<TableId, (u32, u64)>;

/// A file being written with its CRC-32C kept on the way.
struct CrcFile {
    w: BufWriter<std::fs::File>,
    crc: u32,
    count: u64,
}

impl CrcFile {
    fn create(path: &Path) -> Result<CrcFile> {
        let f = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(CrcFile { w: BufWriter::with_capacity(1 << 20, f), crc: 0, count: 0 })
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.w.write_all(bytes)?;
        Ok(())
    }

    fn finish(self) -> Result<(u32, u64)> {
        let f = self.w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        Ok((self.crc, self.count))
    }
}

fn data_name(t: TableId) -> String {
    format!("data-{t}.dat")
}

fn log_name(t: TableId) -> String {
    format!("log-{t}.dat")
}

/// Tables a backup holds: every table but the hidden index tables of unique indexes (restore
/// rebuilds them by writing the base rows).
fn backed_up(cat: &Catalog) -> Vec<&Table> {
    let hidden: Vec<TableId> = cat.index_tables.values().copied().collect();
    cat.tables.values().filter(|t| !hidden.contains(&t.id)).collect()
}

/// The change-log side of a backup: a thread polling the log into per-table files.
struct LogPoller {
    /// Per table, its log file (made when its first entry comes).
    files: Mutex<BTreeMap<TableId, CrcFile>>,
    /// Per (node, ldm), the newest epoch mark it sent.
    marks: Mutex<BTreeMap<(u16, u16), u64>>,
    error: Mutex<Option<String>>,
    stop: AtomicBool,
}

impl LogPoller {
    fn run(&self, client: &Client, dir: &Path, tables: &BTreeSet<TableId>) {
        while !self.stop.load(Ordering::SeqCst) {
            match self.poll_once(client, dir, tables) {
                Ok(0) => std::thread::sleep(Duration::from_millis(5)),
                Ok(_) => {}
                Err(e) => {
                    *self.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!("{e:#}"));
                    return;
                }
            }
        }
    }

    /// One poll; returns how many entries came.
    fn poll_once(&self, client: &Client, dir: &Path, tables: &BTreeSet<TableId>) -> Result<usize> {
        let parts = client.change_log(LOG_SUB, LogOp::Poll, POLL_BYTES).context("the change log failed")?;
        let mut n = 0;
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        for p in parts {
            let mark = marks.entry((p.node, p.ldm)).or_insert(0);
            n += p.entries.len();
            for e in p.entries {
                let (kind, epoch, log_gen, table, bytes) = match e {
                    LogEntry::Epoch(x) => {
                        *mark = (*mark).max(x);
                        continue;
                    }
                    LogEntry::Put { epoch, log_gen: 0, table, row } => (LOG_PUT, epoch, 0, table, row),
                    LogEntry::Delete { epoch, log_gen: 0, table, key, .. } => (LOG_DELETE, epoch, 0, table, key),
                    LogEntry::Put { epoch, log_gen, table, row } => (LOG_PUT_GEN, epoch, log_gen, table, row),
                    LogEntry::Delete { epoch, log_gen, table, key, .. } => (LOG_DELETE_GEN, epoch, log_gen, table, key),
                };
                if !tables.contains(&table) {
                    continue; // a unique index's hidden table, or one created meanwhile
                }
                let f = match files.entry(table) {
                    std::collections::btree_map::Entry::Occupied(o) => o.into_mut(),
                    std::collections::btree_map::Entry::Vacant(v) => {
                        v.insert(CrcFile::create(&dir.join(log_name(table)))?)
                    }
                };
                let mut head = [0u8; 17];
                head[0] = kind;
                head[1..9].copy_from_slice(&epoch.to_le_bytes());
                let mut at = 9;
                if log_gen != 0 {
                    head[9..13].copy_from_slice(&log_gen.to_le_bytes());
                    at = 13;
                }
                head[at..at + 4].copy_from_slice(&(bytes.len() as u32).to_le_bytes());
                f.put(&head[..at + 4])?;
                f.put(&bytes)?;
                f.count += 1;
            }
        }
        Ok(n)
    }

    /// The smallest epoch mark over every ldm (0 before each has sent one).
    fn flushed(&self) -> u64 {
        let marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        marks.values().copied().min().unwrap_or(0)
    }

    fn failed(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// `tern backup --addr A --dir D`.
pub fn backup(addr: &str, dir: &Path) -> Result<()> {
    if dir.join(MANIFEST).exists() {
        bail!("{} already holds a backup; choose an empty directory", dir.display());
    }
    let created = !dir.exists();
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    if std::fs::read_dir(dir)?.next().is_some() {
        bail!("{} is not empty; choose an empty directory", dir.display());
    }
    let mut attempt = 1;
    loop {
        let r = take_backup(addr, dir);
        if r.is_err() {
            // Leave nothing that could pass for a backup.
            if let Ok(rd) = std::fs::read_dir(dir) {
                for e in rd.flatten() {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        match r {
            // The cluster changed under it (a node started, failed or restarted): again, as an
            // operator would, a few times.
            Err(e) if attempt < ATTEMPTS && format!("{e:#}").contains(RETRY_TEXT) => {
                eprintln!("tern backup: {e:#}; taking it again (attempt {} of {ATTEMPTS})", attempt + 1);
                attempt += 1;
                std::thread::sleep(Duration::from_secs(2));
            }
            r => {
                if r.is_err() && created {
                    let _ = std::fs::remove_dir_all(dir);
                }
                return r;
            }
        }
    }
}

fn take_backup(addr: &str, dir: &Path) -> Result<()> {
    let started = Instant::now();
    let client = Client::connect(addr).with_context(|| format!("no data node answers at {addr}"))?;
    client.change_log(LOG_SUB, LogOp::Start, 0).context("cannot start the backup's change log")?;
    let catalog = client.refresh_catalog()?;
    let tables: Vec<Table> = backed_up(&catalog).into_iter().cloned().collect();
    let ids: BTreeSet<TableId> = tables.iter().map(|t| t.id).collect();
    let start_epoch = client.status()?.current_epoch;
    let poller = Arc::new(LogPoller {
        files: Mutex::new(BTreeMap::new()),
        marks: Mutex::new(BTreeMap::new()),
        error: Mutex::new(None),
        stop: AtomicBool::new(false),
    });
    let thread = {
        let (p, c, d, ids) = (poller.clone(), client.clone(), dir.to_path_buf(), ids);
        std::thread::Builder::new().name("backup-log".into()).spawn(move || p.run(&c, &d, &ids))?
    };
    let scanned = scan_and_wait(&client, dir, &tables, &poller);
    poller.stop.store(true, Ordering::SeqCst);
    let _ = thread.join();
    let _ = client.change_log(LOG_SUB, LogOp::Stop, 0);
    let (data, stop_epoch) = scanned?;
    if let Some(e) = poller.failed() {
        bail!("{e}");
    }
    // Tables created meanwhile are not in the backup; one of its own that changed or went
    // makes it fail.
    let after = client.refresh_catalog()?;
    if tables.iter().any(|t| after.table(t.id) != Some(t)) {
        bail!("a table changed or was dropped during the backup; take it again");
    }
    // The catalog and the manifest, last.
    let mut cat = Vec::new();
    after.encode(&mut cat);
    std::fs::write(dir.join("catalog.bin"), &cat)?;
    let mut logs = Files::new();
    let files = std::mem::take(&mut *poller.files.lock().unwrap_or_else(|p| p.into_inner()));
    for (t, f) in files {
        logs.insert(t, f.finish()?);
    }
    let mut rows_total = 0;
    let list: Vec<serde_json::Value> = tables
        .iter()
        .map(|t| {
            let (dcrc, rows) = data[&t.id];
            let (lcrc, entries) = logs.get(&t.id).copied().unwrap_or((0, 0));
            rows_total += rows;
            serde_json::json!({
                "id": t.id, "database": t.database, "name": t.name,
                "rows": rows, "data_file": data_name(t.id), "data_crc32c": dcrc,
                "log_entries": entries, "log_file": if entries > 0 { log_name(t.id) } else { String::new() },
                "log_crc32c": lcrc,
            })
        })
        .collect();
    let log_total: u64 = logs.values().map(|(_, n)| n).sum();
    let manifest = serde_json::json!({
        "format": FORMAT,
        "start_epoch": start_epoch,
        "stop_epoch": stop_epoch,
        "catalog_version": after.version,
        "catalog_file": "catalog.bin",
        "catalog_crc32c": crc32c::crc32c(&cat),
        "tables": list,
    });
    let tmp = dir.join(format!("{MANIFEST}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec_pretty(&manifest)?)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dir.join(MANIFEST))?;
    std::fs::File::open(dir)?.sync_all()?;
    println!(
        "backup: {} tables, {rows_total} rows scanned, {log_total} changes logged, consistent at epoch {stop_epoch}, in {:.1} s -> {}",
        tables.len(),
        started.elapsed().as_secs_f64(),
        dir.display()
    );
    Ok(())
}

/// Scans every table into its data file, then chooses the end epoch and waits until every
/// ldm's log is complete up to it and it is durable. Returns each table's (CRC, rows) and the
/// end epoch.
fn scan_and_wait(client: &Client, dir: &Path, tables: &[Table], poller: &LogPoller) -> Result<(Files, u64)> {
    let mut data = BTreeMap::new();
    for t in tables {
        // A scan that meets a temporary failure (a partition move switching under it, a node
        // still starting) is taken again from the start: the log began before either scan.
        let mut tries = 0;
        let finished = loop {
            let mut f = CrcFile::create(&dir.join(data_name(t.id)))?;
            let mut req = ScanReq::table(t.id);
            req.batch_rows = tern_wire::SCAN_BATCH_ROWS_MAX;
            let mut scan = client.scan(req);
            let failed = loop {
                match block_on(scan.next_batch()) {
                    Ok(Some(rows)) => {
                        for r in rows {
                            f.put(&(r.len() as u32).to_le_bytes())?;
                            f.put(&r)?;
                            f.count += 1;
                        }
                        if let Some(e) = poller.failed() {
                            bail!("{e}");
                        }
                    }
                    Ok(None) => break None,
                    Err(e) if e.is_temporary() && tries < SCAN_TRIES => break Some(e),
                    Err(e) => return Err(e).with_context(|| format!("scan of {}.{}", t.database, t.name)),
                }
            };
            match failed {
                None => break f.finish()?,
                Some(e) => {
                    tries += 1;
                    eprintln!("tern backup: scan of {}.{}: {e}; scanning it again", t.database, t.name);
                    std::thread::sleep(Duration::from_millis(100 * tries as u64));
                }
            }
        };
        data.insert(t.id, finished);
    }
    // Every row a scan read was committed in an epoch no later than this (see the module's
    // comment). An ldm's entries come before its mark in its own order, and a poll hands out a
    // prefix of each ldm's buffer, so once every mark reached the end epoch the log files hold
    // every change up to it.
    let stop_epoch = client.status()?.current_epoch + 1;
    let until = Instant::now() + END_WAIT;
    loop {
        if let Some(e) = poller.failed() {
            bail!("{e}");
        }
        if poller.flushed() >= stop_epoch && client.status()?.durable_epoch >= stop_epoch {
            return Ok((data, stop_epoch));
        }
        if Instant::now() > until {
            bail!("epoch {stop_epoch} did not become durable within {END_WAIT:?}; is the cluster healthy?");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A backup read back: its manifest and catalog, files checked.
pub struct Backup {
    pub dir: PathBuf,
    pub stop_epoch: u64,
    pub catalog: Catalog,
    pub tables: Vec<BackupTable>,
}

/// A table of a backup: its id there, its files with their CRC-32C, its row count.
pub struct BackupTable {
    pub id: TableId,
    pub rows: u64,
    data: (String, u64),
    log: Option<(String, u64)>,
}

fn read_checked(dir: &Path, name: &str, crc: u64) -> Result<Vec<u8>> {
    let path = dir.join(name);
    let mut bytes = Vec::new();
    std::fs::File::open(&path)
        .with_context(|| format!("backup file {} is missing", path.display()))?
        .read_to_end(&mut bytes)?;
    if crc32c::crc32c(&bytes) as u64 != crc {
        bail!("backup file {} is corrupt (its CRC-32C does not match BACKUP.json)", path.display());
    }
    Ok(bytes)
}

impl Backup {
    pub fn open(dir: &Path) -> Result<Backup> {
        let m = dir.join(MANIFEST);
        let text = std::fs::read(&m).with_context(|| {
            format!(
                "{} is not a complete backup ({MANIFEST} is missing: the backup failed or is elsewhere)",
                dir.display()
            )
        })?;
        let v: serde_json::Value =
            serde_json::from_slice(&text).with_context(|| format!("{} is not valid JSON", m.display()))?;
        if v["format"] != FORMAT {
            bail!("{} is not a backup this version reads (format {})", m.display(), v["format"]);
        }
        let num =
            |x: &serde_json::Value, k: &str| x[k].as_u64().with_context(|| format!("{}: {k} missing", m.display()));
        let stop_epoch = num(&v, "stop_epoch")?;
        let cat = read_checked(dir, v["catalog_file"].as_str().unwrap_or("catalog.bin"), num(&v, "catalog_crc32c")?)?;
        let catalog = Catalog::decode(&cat).map_err(|e| anyhow::anyhow!("catalog.bin: {e:?}"))?;
        let mut tables = Vec::new();
        for t in v["tables"].as_array().context("tables missing")? {
            let id = num(t, "id")? as TableId;
            if catalog.table(id).is_none() {
                bail!("{}: table {id} is not in catalog.bin", m.display());
            }
            let data = (t["data_file"].as_str().context("data_file missing")?.to_string(), num(t, "data_crc32c")?);
            let log = match t["log_file"].as_str().filter(|s| !s.is_empty()) {
                Some(f) => Some((f.to_string(), num(t, "log_crc32c")?)),
                None => None,
            };
            tables.push(BackupTable { id, rows: num(t, "rows")?, data, log });
        }
        // Every file is checked before a restore writes anything.
        for t in &tables {
            for (name, crc) in std::iter::once(&t.data).chain(t.log.as_ref()) {
                if file_crc(&dir.join(name))? as u64 != *crc {
                    bail!(
                        "backup file {} is corrupt (its CRC-32C does not match BACKUP.json)",
                        dir.join(name).display()
                    );
                }
            }
        }
        Ok(Backup { dir: dir.to_path_buf(), stop_epoch, catalog, tables })
    }

    /// The rows of a table at the backup's end epoch: its scanned rows with its log applied
    /// (entries of later epochs left out), by encoded primary key.
    pub fn rows_at_end(&self, id: TableId) -> Result<HashMap<Vec<u8>, Vec<u8>>> {
        let bt = self.tables.iter().find(|t| t.id == id).context("table not in backup")?;
        let (data_file, data_crc) = &bt.data;
        let h = TableHandle::new(self.catalog.table(id).context("table not in catalog")?.clone());
        let key_of = |row: &[u8]| -> Result<Vec<u8>> {
            let values = h.decode_row(row).map_err(|e| anyhow::anyhow!("a row of table {id}: {e}"))?;
            h.key_owned(h.key_of_values(&values)).map_err(|e| anyhow::anyhow!("a row of table {id}: {e}"))
        };
        let mut rows = HashMap::new();
        let data = read_checked(&self.dir, data_file, *data_crc)?;
        let mut d = &data[..];
        let mut count = 0;
        while !d.is_empty() {
            let (n, rest) = take_len(d, data_file)?;
            let row = &rest[..n];
            rows.insert(key_of(row)?, row.to_vec());
            d = &rest[n..];
            count += 1;
        }
        if count != bt.rows {
            bail!("{data_file} holds {count} rows where BACKUP.json says {}", bt.rows);
        }
        if let Some((log_file, log_crc)) = &bt.log {
            let log = read_checked(&self.dir, log_file, *log_crc)?;
            // Of one key's entries the one of the highest (epoch, generation) is the newest, the
            // last of those in the file (each partition's entries of one generation come from
            // one ldm in commit order; a moving partition's target logs a generation up).
            let mut applied: HashMap<Vec<u8>, (u64, u32)> = HashMap::new();
            let mut d = &log[..];
            while !d.is_empty() {
                if d.len() < 9 {
                    bail!("{log_file}: truncated entry");
                }
                let kind = d[0];
                let epoch = u64::from_le_bytes(d[1..9].try_into().expect("8 bytes"));
                let mut log_gen = 0;
                d = &d[9..];
                if kind == LOG_PUT_GEN || kind == LOG_DELETE_GEN {
                    if d.len() < 4 {
                        bail!("{log_file}: truncated entry");
                    }
                    log_gen = u32::from_le_bytes(d[..4].try_into().expect("4 bytes"));
                    d = &d[4..];
                }
                let (n, rest) = take_len(d, log_file)?;
                let bytes = &rest[..n];
                d = &rest[n..];
                if epoch > self.stop_epoch {
                    continue;
                }
                let key = match kind {
                    LOG_PUT | LOG_PUT_GEN => key_of(bytes)?,
                    LOG_DELETE | LOG_DELETE_GEN => bytes.to_vec(),
                    _ => bail!("{log_file}: unknown entry kind {kind}"),
                };
                let at = (epoch, log_gen);
                if applied.get(&key).is_some_and(|&a| a > at) {
                    continue; // an older leader's entry, arriving after its successor's
                }
                if kind == LOG_PUT || kind == LOG_PUT_GEN {
                    rows.insert(key.clone(), bytes.to_vec());
                } else {
                    rows.remove(&key);
                }
                applied.insert(key, at);
            }
        }
        Ok(rows)
    }
}

/// A file's CRC-32C, read a MiB at a time.
fn file_crc(path: &Path) -> Result<u32> {
    let mut f = std::fs::File::open(path).with_context(|| format!("backup file {} is missing", path.display()))?;
    let mut buf = vec![0; 1 << 20];
    let mut crc = 0;
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(crc);
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
    }
}

/// `[len u32][len bytes]...`: the length and what follows it (checked to hold that many bytes).
fn take_len<'a>(d: &'a [u8], file: &str) -> Result<(usize, &'a [u8])> {
    if d.len() < 4 {
        bail!("{file}: truncated entry");
    }
    let n = u32::from_le_bytes(d[..4].try_into().expect("4 bytes")) as usize;
    if d.len() - 4 < n {
        bail!("{file}: truncated entry");
    }
    Ok((n, &d[4..]))
}

fn same_shape(a: &Table, b: &Table) -> bool {
    a.primary_key == b.primary_key
        && a.columns.len() == b.columns.len()
        && a.columns.iter().zip(&b.columns).all(|(x, y)| x.name == y.name && x.ty == y.ty)
}

/// `tern restore --addr A --dir D`.
pub fn restore(addr: &str, dir: &Path) -> Result<()> {
    let started = Instant::now();
    let b = Backup::open(dir)?;
    let client = Client::connect(addr).with_context(|| format!("no data node answers at {addr}"))?;
    let target = client.refresh_catalog()?;
    // Check everything before writing anything.
    let mut plan = Vec::new();
    for bt in &b.tables {
        let id = bt.id;
        let t = b.catalog.table(id).expect("checked when opened");
        match target.find_table(&t.database, &t.name) {
            Some(existing) => {
                if !same_shape(existing, t) {
                    bail!(
                        "table {}.{} exists in the target with other columns; restore needs an empty cluster",
                        t.database,
                        t.name
                    );
                }
                let mut req = ScanReq::table(existing.id);
                req.limit = 1;
                let has_rows = !client.blocking().scan_all(req)?.is_empty();
                if has_rows && !SYSTEM_DATABASES.contains(&t.database.as_str()) {
                    bail!(
                        "table {}.{} in the target already holds rows; restore needs an empty cluster",
                        t.database,
                        t.name
                    );
                }
                plan.push((id, false));
            }
            None => plan.push((id, true)),
        }
    }
    for db in b.catalog.databases.keys() {
        client.ddl(tern_client::DdlReq::CreateDatabase { name: db.clone(), if_not_exists: true })?;
    }
    for &(id, create) in &plan {
        if create {
            let mut t = b.catalog.table(id).expect("checked").clone();
            t.id = 0;
            client
                .ddl(tern_client::DdlReq::CreateTable { table: t, if_not_exists: false })
                .with_context(|| format!("creating {}", b.catalog.table(id).map(|t| t.name.as_str()).unwrap_or("?")))?;
        }
    }
    let mut total = 0u64;
    for &(id, _) in &plan {
        let t = b.catalog.table(id).expect("checked");
        let rows = b.rows_at_end(id)?;
        let source = TableHandle::new(t.clone());
        let dest = client.table(&t.database, &t.name)?;
        let auto = t.columns.iter().position(|c| c.auto_increment);
        let mut auto_max = 0u64;
        let mut ops: Vec<KeyOp> = Vec::with_capacity(RESTORE_BATCH);
        for row in rows.values() {
            let values = source.decode_row(row)?;
            match auto.map(|c| &values[c]) {
                Some(tern_client::Value::UInt(v)) => auto_max = auto_max.max(*v),
                Some(tern_client::Value::Int(v)) => auto_max = auto_max.max((*v).max(0) as u64),
                _ => {}
            }
            ops.push(dest.write_owned(values)?);
            if ops.len() == RESTORE_BATCH {
                client
                    .blocking()
                    .execute(std::mem::take(&mut ops))
                    .with_context(|| format!("writing {}.{}", t.database, t.name))?;
            }
        }
        if !ops.is_empty() {
            client.blocking().execute(ops).with_context(|| format!("writing {}.{}", t.database, t.name))?;
        }
        total += rows.len() as u64;
        let high = b.catalog.auto_inc_high.get(&id).copied().unwrap_or(0).saturating_sub(1).max(auto_max);
        if auto.is_some() && high > 0 {
            client.bump_auto_increment(dest.id(), high)?;
        }
    }
    println!(
        "restore: {} tables, {total} rows, as of epoch {} of the source, in {:.1} s",
        plan.len(),
        b.stop_epoch,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
