//! Durable Raft storage of one management node, in its data directory:
//!
//! * `TERN_MGMD`: identity (`"TERNMGMD"`, format, node id, crc32c). A directory without it that is
//!   not empty, with a bad one, or with another node's id is refused with a clear error.
//! * `raft.log`: a header (`"TERNRLOG"`, format, node id, crc32c) then records
//!   `[u32 LE payload length][u32 LE crc32c of payload][payload: postcard LogRecord]`, appended and
//!   fsynced before Raft hears that entries or a vote are persisted. One append is one record
//!   written by one `write`, so a crash can only tear the last record: a record that runs past the
//!   end of the file, ends exactly at it, or is followed only by zero bytes is a torn tail and is
//!   cut off on load; a bad record with live bytes after it is corruption and stops the mgmd.
//!   After a purge the file is rewritten (write a temporary file, fsync, rename, fsync the
//!   directory) once it is larger than `LOG_COMPACT_BYTES`.
//! * `snapshot`: the newest state-machine snapshot (`"TERNSNAP"`, format, length, crc32c, postcard
//!   of meta + `ControlState::encode`), replaced atomically by rename.
//!
//! The state machine is rebuilt on start from the snapshot plus the log (openraft re-applies
//! entries up to the persisted commit index), so `apply` writes nothing.
//! File writes run under `tokio::task::block_in_place`: the Raft core waits for them anyway, and
//! the other tasks of the runtime move to another thread meanwhile.

use crate::raft::TypeConfig;
use crate::state::{Command, CommandResult, ControlState};
use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{
    BasicNode, Entry, EntryPayload, LogId, LogState, OptionalSend, RaftLogReader, RaftSnapshotBuilder, Snapshot,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::{Cursor, Write};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::watch;

const IDENTITY_FILE: &str = "TERN_MGMD";
const IDENTITY_MAGIC: &[u8; 8] = b"TERNMGMD";
const LOG_FILE: &str = "raft.log";
const LOG_MAGIC: &[u8; 8] = b"TERNRLOG";
const SNAPSHOT_FILE: &str = "snapshot";
const SNAPSHOT_MAGIC: &[u8; 8] = b"TERNSNAP";
const FORMAT: u32 = 1;
/// magic + format + node id + crc.
const HEADER_LEN: usize = 8 + 4 + 8 + 4;
/// Rewrite the log after a purge once it is this large.
pub const LOG_COMPACT_BYTES: u64 = 4 << 20;
/// The largest record accepted on load (a sanity bound: appends are far smaller).
const RECORD_MAX: usize = 1 << 30;

type Nid = u64;
type StorageResult<T> = Result<T, StorageError<Nid>>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("{0}")]
    Foreign(String),
    #[error("{0}")]
    Corrupt(String),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io { path: path.display().to_string(), source }
}

fn header(magic: &[u8; 8], node_id: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEADER_LEN);
    h.extend_from_slice(magic);
    h.extend_from_slice(&FORMAT.to_le_bytes());
    h.extend_from_slice(&node_id.to_le_bytes());
    let crc = crc32c::crc32c(&h);
    h.extend_from_slice(&crc.to_le_bytes());
    h
}

/// Checks a header; returns the node id it names.
fn check_header(bytes: &[u8], magic: &[u8; 8], path: &Path) -> Result<u64, StoreError> {
    let what = || path.display().to_string();
    if bytes.len() < HEADER_LEN || &bytes[..8] != magic {
        return Err(StoreError::Foreign(format!("{} is not a Tern management node file", what())));
    }
    let crc = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[..20]) != crc {
        return Err(StoreError::Corrupt(format!("{}: header checksum mismatch", what())));
    }
    let format = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if format != FORMAT {
        return Err(StoreError::Foreign(format!("{}: unknown format {format} (this build reads {FORMAT})", what())));
    }
    Ok(u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes")))
}

/// Writes `bytes` to `dir/name` atomically: temporary file, fsync, rename, fsync the directory.
fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), StoreError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = File::create(&tmp).map_err(io_err(&tmp))?;
    f.write_all(bytes).map_err(io_err(&tmp))?;
    f.sync_all().map_err(io_err(&tmp))?;
    let path = dir.join(name);
    std::fs::rename(&tmp, &path).map_err(io_err(&path))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_err(dir))
}

/// Opens (creating if needed) the data directory of management node `node_id`.
pub fn open_data_dir(dir: &Path, node_id: u64) -> Result<(), StoreError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let id_path = dir.join(IDENTITY_FILE);
    match std::fs::read(&id_path) {
        Ok(bytes) => {
            let owner = check_header(&bytes, IDENTITY_MAGIC, &id_path)?;
            if owner != node_id {
                return Err(StoreError::Foreign(format!(
                    "{} belongs to management node {owner}, not {node_id}",
                    dir.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut entries = std::fs::read_dir(dir).map_err(io_err(dir))?;
            if entries.next().is_some() {
                return Err(StoreError::Foreign(format!(
                    "{} is not empty and has no {IDENTITY_FILE}: not a Tern management node directory",
                    dir.display()
                )));
            }
            write_atomic(dir, IDENTITY_FILE, &header(IDENTITY_MAGIC, node_id))
        }
        Err(e) => Err(io_err(&id_path)(e)),
    }
}

/// One record of `raft.log`.
#[derive(Serialize, Deserialize)]
enum LogRecord {
    Vote(Vote<Nid>),
    Entries(Vec<Entry<TypeConfig>>),
    /// Entries from this index on are gone.
    Truncate(u64),
    Purge(LogId<Nid>),
    Committed(Option<LogId<Nid>>),
}

/// What the log file holds.
#[derive(Default)]
struct LogContents {
    vote: Option<Vote<Nid>>,
    committed: Option<LogId<Nid>>,
    last_purged: Option<LogId<Nid>>,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
}

impl LogContents {
    fn replay(&mut self, rec: LogRecord) {
        match rec {
            LogRecord::Vote(v) => self.vote = Some(v),
            LogRecord::Entries(es) => {
                if let Some(first) = es.first() {
                    self.entries.split_off(&first.log_id.index);
                }
                for e in es {
                    self.entries.insert(e.log_id.index, e);
                }
            }
            LogRecord::Truncate(index) => {
                self.entries.split_off(&index);
            }
            LogRecord::Purge(id) => {
                if self.last_purged.is_none_or(|p| p.index < id.index) {
                    self.last_purged = Some(id);
                }
                self.entries = self.entries.split_off(&(id.index + 1));
            }
            LogRecord::Committed(c) => self.committed = c,
        }
    }
}

fn record_bytes(rec: &LogRecord) -> Vec<u8> {
    let mut out = postcard::to_extend(rec, vec![0u8; 8]).expect("serialising into a Vec cannot fail");
    let len = (out.len() - 8) as u32;
    let crc = crc32c::crc32c(&out[8..]);
    out[..4].copy_from_slice(&len.to_le_bytes());
    out[4..8].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Parses the records after the header; returns the contents and the length of the valid prefix
/// (the file is cut there when a torn tail follows).
fn parse_log(bytes: &[u8], path: &Path) -> Result<(LogContents, usize), StoreError> {
    let mut contents = LogContents::default();
    let mut at = HEADER_LEN;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let torn_here = || rest.iter().all(|&b| b == 0);
        if rest.len() < 8 {
            return Ok((contents, at)); // a torn record header
        }
        let len = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(rest[4..8].try_into().expect("4 bytes"));
        if len > RECORD_MAX || 8 + len > rest.len() {
            return Ok((contents, at)); // runs past the end: torn
        }
        let payload = &rest[8..8 + len];
        if len == 0 || crc32c::crc32c(payload) != crc {
            if 8 + len == rest.len() || torn_here() {
                return Ok((contents, at));
            }
            return Err(StoreError::Corrupt(format!(
                "{}: bad record at offset {at} followed by {} more bytes",
                path.display(),
                rest.len() - 8 - len
            )));
        }
        let rec: LogRecord = postcard::from_bytes(payload)
            .map_err(|e| StoreError::Corrupt(format!("{}: undecodable record at offset {at}: {e}", path.display())))?;
        contents.replay(rec);
        at += 8 + len;
    }
    Ok((contents, at))
}

/// The append-only log file.
struct LogFile {
    dir: PathBuf,
    path: PathBuf,
    node_id: u64,
    file: File,
    len: u64,
}

impl LogFile {
    fn open(dir: &Path, node_id: u64) -> Result<(LogFile, LogContents), StoreError> {
        let path = dir.join(LOG_FILE);
        let (contents, valid) = match std::fs::read(&path) {
            Ok(bytes) => {
                let owner = check_header(&bytes, LOG_MAGIC, &path)?;
                if owner != node_id {
                    return Err(StoreError::Foreign(format!("{} belongs to node {owner}", path.display())));
                }
                let (contents, valid) = parse_log(&bytes, &path)?;
                if valid < bytes.len() {
                    tracing::warn!(
                        "{}: cut a torn tail of {} bytes at offset {valid}",
                        path.display(),
                        bytes.len() - valid
                    );
                }
                (contents, valid)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                write_atomic(dir, LOG_FILE, &header(LOG_MAGIC, node_id))?;
                (LogContents::default(), HEADER_LEN)
            }
            Err(e) => return Err(io_err(&path)(e)),
        };
        let file = OpenOptions::new().write(true).open(&path).map_err(io_err(&path))?;
        file.set_len(valid as u64).map_err(io_err(&path))?;
        file.sync_all().map_err(io_err(&path))?;
        let mut log = LogFile { dir: dir.to_path_buf(), path, node_id, file, len: valid as u64 };
        log.reopen_append()?;
        Ok((log, contents))
    }

    fn reopen_append(&mut self) -> Result<(), StoreError> {
        self.file = OpenOptions::new().append(true).open(&self.path).map_err(io_err(&self.path))?;
        Ok(())
    }

    fn append(&mut self, rec: &LogRecord, sync: bool) -> Result<(), StoreError> {
        let bytes = record_bytes(rec);
        self.file.write_all(&bytes).map_err(io_err(&self.path))?;
        if sync {
            self.file.sync_data().map_err(io_err(&self.path))?;
        }
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Rewrites the file with just what `contents` holds.
    fn compact(&mut self, contents: &LogContents) -> Result<(), StoreError> {
        let mut bytes = header(LOG_MAGIC, self.node_id);
        if let Some(v) = contents.vote {
            bytes.extend(record_bytes(&LogRecord::Vote(v)));
        }
        if let Some(p) = contents.last_purged {
            bytes.extend(record_bytes(&LogRecord::Purge(p)));
        }
        bytes.extend(record_bytes(&LogRecord::Committed(contents.committed)));
        let entries: Vec<Entry<TypeConfig>> = contents.entries.values().cloned().collect();
        for chunk in entries.chunks(256) {
            bytes.extend(record_bytes(&LogRecord::Entries(chunk.to_vec())));
        }
        write_atomic(&self.dir, LOG_FILE, &bytes)?;
        self.len = bytes.len() as u64;
        self.reopen_append()
    }
}

fn write_err(e: StoreError) -> StorageError<Nid> {
    StorageIOError::write_logs(&e).into()
}

/// Raft's log and vote. Entries live in memory (shared with the log readers) and in `raft.log`.
pub struct LogStore {
    mem: Arc<Mutex<LogContents>>,
    file: LogFile,
}

/// A reader of the in-memory entries, for replication tasks.
#[derive(Clone)]
pub struct LogReader {
    mem: Arc<Mutex<LogContents>>,
}

impl LogStore {
    pub fn open(dir: &Path, node_id: u64) -> Result<LogStore, StoreError> {
        let (file, contents) = LogFile::open(dir, node_id)?;
        Ok(LogStore { mem: Arc::new(Mutex::new(contents)), file })
    }

    fn mem(&self) -> std::sync::MutexGuard<'_, LogContents> {
        self.mem.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Updates memory and the file (under `block_in_place`: file I/O). The error type is
    /// openraft's, which is what every caller returns.
    #[allow(clippy::result_large_err)]
    fn record(&mut self, rec: LogRecord, sync: bool) -> StorageResult<()> {
        tokio::task::block_in_place(|| self.file.append(&rec, sync)).map_err(write_err)?;
        self.mem().replay(rec);
        Ok(())
    }
}

fn read_range<RB: RangeBounds<u64>>(mem: &Mutex<LogContents>, range: RB) -> Vec<Entry<TypeConfig>> {
    let mem = mem.lock().unwrap_or_else(|p| p.into_inner());
    let start = range.start_bound().cloned();
    let end = range.end_bound().cloned();
    if let (Bound::Included(s) | Bound::Excluded(s), Bound::Excluded(e)) = (start, end)
        && s >= e
    {
        return Vec::new();
    }
    mem.entries.range((start, end)).map(|(_, e)| e.clone()).collect()
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        Ok(read_range(&self.mem, range))
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        Ok(read_range(&self.mem, range))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let mem = self.mem();
        let last = mem.entries.values().next_back().map(|e| e.log_id).or(mem.last_purged);
        Ok(LogState { last_purged_log_id: mem.last_purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        LogReader { mem: self.mem.clone() }
    }

    async fn save_vote(&mut self, vote: &Vote<Nid>) -> StorageResult<()> {
        tokio::task::block_in_place(|| self.file.append(&LogRecord::Vote(*vote), true))
            .map_err(|e| StorageError::from(StorageIOError::write_vote(&e)))?;
        self.mem().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<Nid>>> {
        Ok(self.mem().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId<Nid>>) -> StorageResult<()> {
        // Not synced: a lost commit index only means re-learning it from the leader.
        self.record(LogRecord::Committed(committed), false)
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<Nid>>> {
        Ok(self.mem().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry<TypeConfig>> = entries.into_iter().collect();
        if !entries.is_empty() {
            self.record(LogRecord::Entries(entries), true)?;
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<Nid>) -> StorageResult<()> {
        self.record(LogRecord::Truncate(log_id.index), true)
    }

    async fn purge(&mut self, log_id: LogId<Nid>) -> StorageResult<()> {
        self.record(LogRecord::Purge(log_id), true)?;
        if self.file.len > LOG_COMPACT_BYTES {
            let mem = self.mem.clone();
            let mem = mem.lock().unwrap_or_else(|p| p.into_inner());
            tokio::task::block_in_place(|| self.file.compact(&mem)).map_err(write_err)?;
        }
        Ok(())
    }
}

/// The stored snapshot: openraft's meta plus `ControlState::encode`.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta<Nid, BasicNode>,
    data: Vec<u8>,
}

/// A stored snapshot: its meta and `ControlState::encode` bytes.
type StoredSnapshot = (SnapshotMeta<Nid, BasicNode>, Arc<Vec<u8>>);

/// The snapshot file of a data directory, shared by the state machine and its snapshot builders
/// so that an older snapshot never replaces a newer one.
#[derive(Clone)]
struct SnapshotSlot {
    dir: PathBuf,
    current: Arc<Mutex<Option<StoredSnapshot>>>,
}

impl SnapshotSlot {
    fn load(dir: &Path) -> Result<SnapshotSlot, StoreError> {
        let path = dir.join(SNAPSHOT_FILE);
        let current = match std::fs::read(&path) {
            Ok(bytes) => {
                check_header(&bytes, SNAPSHOT_MAGIC, &path)?;
                let body = &bytes[HEADER_LEN..];
                if body.len() < 4 {
                    return Err(StoreError::Corrupt(format!("{}: truncated", path.display())));
                }
                let crc = u32::from_le_bytes(body[..4].try_into().expect("4 bytes"));
                if crc32c::crc32c(&body[4..]) != crc {
                    return Err(StoreError::Corrupt(format!("{}: checksum mismatch", path.display())));
                }
                let snap: SnapshotFile = postcard::from_bytes(&body[4..])
                    .map_err(|e| StoreError::Corrupt(format!("{}: {e}", path.display())))?;
                Some((snap.meta, Arc::new(snap.data)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err(&path)(e)),
        };
        Ok(SnapshotSlot { dir: dir.to_path_buf(), current: Arc::new(Mutex::new(current)) })
    }

    fn get(&self) -> Option<StoredSnapshot> {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stores a snapshot unless a newer one is already stored.
    fn store(&self, meta: &SnapshotMeta<Nid, BasicNode>, data: Vec<u8>) -> Result<(), StoreError> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.as_ref().is_some_and(|(m, _)| m.last_log_id > meta.last_log_id) {
            return Ok(());
        }
        let file = SnapshotFile { meta: meta.clone(), data };
        let body = postcard::to_allocvec(&file).expect("serialising into a Vec cannot fail");
        let mut bytes = header(SNAPSHOT_MAGIC, 0);
        bytes.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        bytes.extend_from_slice(&body);
        tokio::task::block_in_place(|| write_atomic(&self.dir, SNAPSHOT_FILE, &bytes))?;
        *current = Some((file.meta, Arc::new(file.data)));
        Ok(())
    }
}

/// The applied state, published to the server after every applied batch.
pub struct StateMachine {
    state: ControlState,
    last_applied: Option<LogId<Nid>>,
    membership: StoredMembership<Nid, BasicNode>,
    snapshots: SnapshotSlot,
    publish: watch::Sender<Arc<ControlState>>,
    snapshot_seq: u64,
}

impl StateMachine {
    /// Loads the snapshot of `dir` if any, else starts from `initial`. Returns the machine and the
    /// receiver of published states.
    pub fn open(
        dir: &Path,
        initial: ControlState,
    ) -> Result<(StateMachine, watch::Receiver<Arc<ControlState>>), StoreError> {
        let snapshots = SnapshotSlot::load(dir)?;
        let (state, last_applied, membership) = match snapshots.get() {
            Some((meta, data)) => {
                let state = ControlState::decode(&data).map_err(StoreError::Corrupt)?;
                if state.state.config != initial.state.config {
                    tracing::warn!(
                        "the cluster file differs from the replicated configuration; using the replicated one"
                    );
                }
                (state, meta.last_log_id, meta.last_membership)
            }
            None => (initial, None, StoredMembership::default()),
        };
        let (publish, rx) = watch::channel(Arc::new(state.clone()));
        Ok((StateMachine { state, last_applied, membership, snapshots, publish, snapshot_seq: 0 }, rx))
    }

    fn publish(&self) {
        self.publish.send_replace(Arc::new(self.state.clone()));
    }
}

/// Builds a snapshot from a copy of the state taken when it was asked for.
pub struct SnapshotBuilder {
    state: ControlState,
    last_applied: Option<LogId<Nid>>,
    membership: StoredMembership<Nid, BasicNode>,
    snapshots: SnapshotSlot,
    seq: u64,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let data = self.state.encode();
        let snapshot_id = match self.last_applied {
            Some(id) => format!("{}-{}-{}", id.leader_id.term, id.index, self.seq),
            None => format!("0-0-{}", self.seq),
        };
        let meta =
            SnapshotMeta { last_log_id: self.last_applied, last_membership: self.membership.clone(), snapshot_id };
        self.snapshots
            .store(&meta, data.clone())
            .map_err(|e| StorageError::from(StorageIOError::write_snapshot(None, &e)))?;
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(data)) })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(&mut self) -> StorageResult<(Option<LogId<Nid>>, StoredMembership<Nid, BasicNode>)> {
        Ok((self.last_applied, self.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<CommandResult>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut out = Vec::new();
        for entry in entries {
            self.last_applied = Some(entry.log_id);
            let result = match &entry.payload {
                EntryPayload::Normal(cmd) => self.state.apply(cmd),
                EntryPayload::Membership(m) => {
                    self.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                    Ok(crate::state::Applied { version: self.state.version(), incarnation: 0 })
                }
                EntryPayload::Blank => Ok(crate::state::Applied { version: self.state.version(), incarnation: 0 }),
            };
            out.push(result);
        }
        // Published after every apply: a change that moves no map version (the durable epoch)
        // is still visible to readers.
        self.publish();
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshot_seq += 1;
        SnapshotBuilder {
            state: self.state.clone(),
            last_applied: self.last_applied,
            membership: self.membership.clone(),
            snapshots: self.snapshots.clone(),
            seq: self.snapshot_seq,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<Nid, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let data = snapshot.into_inner();
        let state = ControlState::decode(&data)
            .map_err(|e| StorageError::from(StorageIOError::read_snapshot(Some(meta.signature()), &AnyErr(e))))?;
        self.snapshots
            .store(meta, data)
            .map_err(|e| StorageError::from(StorageIOError::write_snapshot(Some(meta.signature()), &e)))?;
        self.state = state;
        self.last_applied = meta.last_log_id;
        self.membership = meta.last_membership.clone();
        self.publish();
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        Ok(self
            .snapshots
            .get()
            .map(|(meta, data)| Snapshot { meta, snapshot: Box::new(Cursor::new(data.as_ref().clone())) }))
    }
}

/// A text error for openraft's error wrappers.
#[derive(Debug)]
struct AnyErr(String);

impl std::fmt::Display for AnyErr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AnyErr {}

/// The command type's name in logs.
pub fn describe(cmd: &Command) -> &'static str {
    match cmd {
        Command::Register { .. } => "register",
        Command::SetState { .. } => "set-state",
        Command::NodesFailed { .. } => "nodes-failed",
        Command::SetDurableEpoch { .. } => "set-durable-epoch",
        Command::SetCatalog { .. } => "set-catalog",
        Command::StopNode { .. } => "stop-node",
        Command::StartNode { .. } => "start-node",
        Command::StartCluster { .. } => "start-cluster",
        Command::Leave { .. } => "leave",
        Command::AddNodes { .. } => "add-nodes",
        Command::Reorganize { .. } => "reorganize",
        Command::MoveCopied { .. } => "move-copied",
        Command::MoveLeft { .. } => "move-left",
        Command::DrainGroup { .. } => "drain-group",
        Command::UndrainGroup { .. } => "undrain-group",
        Command::RemoveGroup { .. } => "remove-group",
        Command::AddNodesIn { .. } => "add-nodes",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, LeaderId};

    fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Normal(Command::SetDurableEpoch { epoch: index }),
        }
    }

    fn write_records(dir: &Path, recs: &[LogRecord]) -> PathBuf {
        let path = dir.join(LOG_FILE);
        let mut bytes = header(LOG_MAGIC, 7);
        for r in recs {
            bytes.extend(record_bytes(r));
        }
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn sample() -> Vec<LogRecord> {
        vec![
            LogRecord::Vote(Vote { leader_id: LeaderId::new(3, 1), committed: true }),
            LogRecord::Entries(vec![entry(1, 1), entry(1, 2), entry(1, 3)]),
            LogRecord::Truncate(3),
            LogRecord::Entries(vec![entry(2, 3), entry(2, 4)]),
            LogRecord::Purge(LogId::new(CommittedLeaderId::new(1, 1), 1)),
            LogRecord::Committed(Some(LogId::new(CommittedLeaderId::new(2, 1), 4))),
        ]
    }

    #[test]
    fn replay_applies_truncate_and_purge() {
        let dir = tempfile::tempdir().unwrap();
        write_records(dir.path(), &sample());
        let (_f, c) = LogFile::open(dir.path(), 7).unwrap();
        assert_eq!(c.entries.keys().copied().collect::<Vec<_>>(), vec![2, 3, 4]);
        assert_eq!(c.entries[&3].log_id.leader_id.term, 2);
        assert_eq!(c.last_purged.unwrap().index, 1);
        assert_eq!(c.committed.unwrap().index, 4);
        assert_eq!(c.vote.unwrap().leader_id.term, 3);
    }

    #[test]
    fn a_torn_tail_is_cut_and_the_log_stays_usable() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_records(dir.path(), &sample());
        let full = std::fs::read(&path).unwrap();
        // Every cut inside the last record loses only that record.
        let last_len = record_bytes(&sample().pop().unwrap()).len();
        for cut in 1..last_len {
            std::fs::write(&path, &full[..full.len() - cut]).unwrap();
            let (_f, c) = LogFile::open(dir.path(), 7).unwrap();
            assert_eq!(c.committed, None, "cut {cut}");
            assert_eq!(c.entries.len(), 3);
            assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, full.len() - last_len);
        }
        // Zeros after the valid records (a file extended but never written) are a torn tail too.
        let mut zeros = full.clone();
        zeros.extend_from_slice(&[0; 100]);
        std::fs::write(&path, &zeros).unwrap();
        let (mut f, c) = LogFile::open(dir.path(), 7).unwrap();
        assert_eq!(c.committed.unwrap().index, 4);
        f.append(&LogRecord::Truncate(4), true).unwrap();
        drop(f);
        let (_f, c) = LogFile::open(dir.path(), 7).unwrap();
        assert_eq!(c.entries.keys().copied().collect::<Vec<_>>(), vec![2, 3]);
    }

    #[test]
    fn corruption_in_the_middle_and_foreign_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_records(dir.path(), &sample());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[HEADER_LEN + 10] ^= 0xff; // inside the first record
        std::fs::write(&path, &bytes).unwrap();
        let e = LogFile::open(dir.path(), 7).err().unwrap().to_string();
        assert!(e.contains("bad record at offset"), "{e}");
        write_records(dir.path(), &sample());
        let e = LogFile::open(dir.path(), 8).err().unwrap().to_string();
        assert!(e.contains("belongs to node 7"), "{e}");
        std::fs::write(&path, b"hello world, this is not a log file").unwrap();
        let e = LogFile::open(dir.path(), 7).err().unwrap().to_string();
        assert!(e.contains("not a Tern management node file"), "{e}");
    }

    #[test]
    fn compaction_keeps_the_contents() {
        let dir = tempfile::tempdir().unwrap();
        write_records(dir.path(), &sample());
        let (mut f, c) = LogFile::open(dir.path(), 7).unwrap();
        f.compact(&c).unwrap();
        f.append(&LogRecord::Entries(vec![entry(2, 5)]), true).unwrap();
        drop(f);
        let (_f, c2) = LogFile::open(dir.path(), 7).unwrap();
        assert_eq!(c2.entries.keys().copied().collect::<Vec<_>>(), vec![2, 3, 4, 5]);
        assert_eq!((c2.vote, c2.committed, c2.last_purged), (c.vote, c.committed, c.last_purged));
    }

    #[test]
    fn data_dir_identity_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("mgmd");
        open_data_dir(&d, 65).unwrap();
        open_data_dir(&d, 65).unwrap();
        let e = open_data_dir(&d, 66).unwrap_err().to_string();
        assert!(e.contains("belongs to management node 65"), "{e}");
        let other = dir.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("sysfile"), b"x").unwrap();
        let e = open_data_dir(&other, 65).unwrap_err().to_string();
        assert!(e.contains("not a Tern management node directory"), "{e}");
        std::fs::write(d.join(IDENTITY_FILE), b"TERNMGMD garbage garbage").unwrap();
        assert!(open_data_dir(&d, 65).is_err());
    }
}
