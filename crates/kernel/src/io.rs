//! Carrying out disk requests over a `Storage`, and reading the redo log back for recovery.
//!
//! Blocks never call this: the runtime (real files) and the simulator (an in-memory disk that
//! loses unsynced bytes on a crash) both execute `IoReq`s through `IoExecutor`, so the file
//! layout logic exists once.
//!
//! Redo segments are files `ldm-<i>/redo-<start LSN as 16 hex digits>.log`; a segment's records
//! start at the LSN in its name and it ends where the next segment starts.

use crate::redo::{self, Read};
use crate::signal::{Addr, IoReq, Signal};
use std::collections::BTreeMap;
use std::io;

/// The file operations the kernel's durability logic needs. Names are relative paths.
pub trait Storage {
    /// Appends to a file, creating it (and its directory) when missing. Not durable until `sync`.
    fn append(&mut self, name: &str, bytes: &[u8]) -> io::Result<()>;
    fn sync(&mut self, name: &str) -> io::Result<()>;
    /// Replaces a file atomically and durably (write temporary, fsync, rename, fsync directory).
    fn write_atomic(&mut self, name: &str, bytes: &[u8]) -> io::Result<()>;
    fn read(&self, name: &str) -> io::Result<Option<Vec<u8>>>;
    /// Names of the files in a directory (relative names including the directory).
    fn list(&self, dir: &str) -> io::Result<Vec<String>>;
    fn delete(&mut self, name: &str) -> io::Result<()>;
    /// Renames a file durably (the directory entry is synced).
    fn rename(&mut self, from: &str, to: &str) -> io::Result<()>;
}

pub const REDO_SEGMENT_BYTES_DEFAULT: u64 = 64 * 1024 * 1024;

pub fn segment_name(ldm: u16, start_lsn: u64) -> String {
    format!("ldm-{ldm}/redo-{start_lsn:016x}.log")
}

pub fn parse_segment_name(name: &str) -> Option<u64> {
    let base = name.rsplit('/').next()?;
    u64::from_str_radix(base.strip_prefix("redo-")?.strip_suffix(".log")?, 16).ok()
}

/// Existing redo segments of an ldm, by start LSN.
pub fn list_segments(storage: &dyn Storage, ldm: u16) -> io::Result<BTreeMap<u64, String>> {
    let mut out = BTreeMap::new();
    for name in storage.list(&format!("ldm-{ldm}"))? {
        if let Some(lsn) = parse_segment_name(&name) {
            out.insert(lsn, name);
        }
    }
    Ok(out)
}

/// Appends an ldm's redo log into segment files.
#[derive(Debug)]
struct RedoWriter {
    ldm: u16,
    segments: BTreeMap<u64, String>,
    current: Option<(u64, u64)>,
    next_lsn: u64,
    unsynced: Vec<String>,
    segment_bytes: u64,
}

impl RedoWriter {
    fn append(&mut self, storage: &mut dyn Storage, bytes: &[u8]) -> io::Result<()> {
        let rotate = match self.current {
            None => true,
            Some((_, size)) => size > 0 && size + bytes.len() as u64 > self.segment_bytes,
        };
        if rotate {
            let name = segment_name(self.ldm, self.next_lsn);
            self.segments.insert(self.next_lsn, name);
            self.current = Some((self.next_lsn, 0));
        }
        let (start, size) = self.current.expect("a current segment");
        let name = self.segments[&start].clone();
        storage.append(&name, bytes)?;
        if !self.unsynced.contains(&name) {
            self.unsynced.push(name);
        }
        self.current = Some((start, size + bytes.len() as u64));
        self.next_lsn += bytes.len() as u64;
        debug_assert!(
            self.segments.keys().next_back() == Some(&start) && start <= self.next_lsn,
            "invariant: redo is appended to its newest segment, in LSN order"
        );
        Ok(())
    }

    fn sync(&mut self, storage: &mut dyn Storage) -> io::Result<()> {
        for name in std::mem::take(&mut self.unsynced) {
            storage.sync(&name)?;
        }
        Ok(())
    }

    /// Deletes segments that end at or before `lsn` (never the current one).
    fn discard(&mut self, storage: &mut dyn Storage, lsn: u64) -> io::Result<()> {
        let starts: Vec<u64> = self.segments.keys().copied().collect();
        for (i, &start) in starts.iter().enumerate() {
            let end = starts.get(i + 1).copied();
            let is_current = self.current.map(|(s, _)| s) == Some(start);
            if let Some(end) = end
                && end <= lsn
                && !is_current
            {
                let name = self.segments.remove(&start).expect("invariant: a listed segment");
                debug_assert!(end <= self.next_lsn, "invariant: only written redo is discarded");
                self.unsynced.retain(|n| *n != name);
                storage.delete(&name)?;
            }
        }
        Ok(())
    }
}

/// Executes disk requests in order.
pub struct IoExecutor<S: Storage> {
    pub storage: S,
    redo: BTreeMap<u16, RedoWriter>,
    segment_bytes: u64,
    /// Bytes of the system file saved since this executor started (0: none yet; the next save
    /// replaces the file).
    sysfile_bytes: usize,
}

impl<S: Storage> IoExecutor<S> {
    pub fn new(storage: S, segment_bytes: u64) -> IoExecutor<S> {
        IoExecutor { storage, redo: BTreeMap::new(), segment_bytes, sysfile_bytes: 0 }
    }

    /// Opens an ldm's log for appending at `start_lsn` (a fresh segment starts there). The log
    /// found on disk is synced first: its tail may be bytes of the previous run that were never
    /// synced (a process crash leaves them in the page cache; they survive as valid records),
    /// and the ldm counts everything up to `start_lsn` as synced — an OS crash must not take
    /// them away after a system file named them durable. (Found by the simulator: a node
    /// restarted after a crash reported a synced position its disk later lost.)
    pub fn open_redo(&mut self, ldm: u16, start_lsn: u64) -> io::Result<()> {
        let segments = list_segments(&self.storage, ldm)?;
        for name in segments.values() {
            self.storage.sync(name)?;
        }
        self.redo.insert(
            ldm,
            RedoWriter {
                ldm,
                segments,
                current: None,
                next_lsn: start_lsn,
                unsynced: Vec::new(),
                segment_bytes: self.segment_bytes,
            },
        );
        Ok(())
    }

    fn writer(&mut self, ldm: u16) -> io::Result<&mut RedoWriter> {
        self.redo.get_mut(&ldm).ok_or_else(|| io::Error::other(format!("redo log of ldm {ldm} is not open")))
    }

    /// Executes one request; returns the completion signal to deliver, if the request has one.
    pub fn execute(&mut self, from: Addr, req: IoReq) -> io::Result<Option<(Addr, Signal)>> {
        match req {
            IoReq::RedoAppend { ldm, bytes } => {
                let storage = &mut self.storage as &mut dyn Storage;
                let w = self.redo.get_mut(&ldm).ok_or_else(|| io::Error::other("redo log is not open"))?;
                w.append(storage, &bytes)?;
                Ok(None)
            }
            IoReq::RedoSync { ldm, token } => {
                let storage = &mut self.storage as &mut dyn Storage;
                let w = self.redo.get_mut(&ldm).ok_or_else(|| io::Error::other("redo log is not open"))?;
                w.sync(storage)?;
                Ok(Some((from, Signal::IoDone { token, result: Ok(()) })))
            }
            IoReq::RedoDiscard { ldm, lsn } => {
                self.writer(ldm)?;
                let storage = &mut self.storage as &mut dyn Storage;
                self.redo.get_mut(&ldm).expect("checked").discard(storage, lsn)?;
                Ok(None)
            }
            IoReq::WriteFile { name, bytes, token } => {
                self.storage.write_atomic(&name, &bytes)?;
                Ok(Some((from, Signal::IoDone { token, result: Ok(()) })))
            }
            IoReq::DeleteFile { name } => {
                self.storage.delete(&name)?;
                Ok(None)
            }
            IoReq::SaveSysfile { record, token } => {
                let framed = crate::sysfile::frame(&record);
                if self.sysfile_bytes == 0 || self.sysfile_bytes + framed.len() > crate::sysfile::LOG_BYTES_MAX {
                    // The first save since the start (the file may end in a torn record, or
                    // be of the single-record format) and a grown file: this record alone.
                    self.storage.write_atomic(crate::sysfile::SYSFILE_NAME, &framed)?;
                    self.sysfile_bytes = framed.len();
                } else {
                    self.storage.append(crate::sysfile::SYSFILE_NAME, &framed)?;
                    self.storage.sync(crate::sysfile::SYSFILE_NAME)?;
                    self.sysfile_bytes += framed.len();
                }
                Ok(Some((from, Signal::IoDone { token, result: Ok(()) })))
            }
            IoReq::FileAppend { name, bytes, token } => {
                self.storage.append(&name, &bytes)?;
                Ok(Some((from, Signal::IoDone { token, result: Ok(()) })))
            }
            IoReq::FileFinish { from: name, to, token } => {
                self.storage.sync(&name)?;
                self.storage.rename(&name, &to)?;
                Ok(Some((from, Signal::IoDone { token, result: Ok(()) })))
            }
        }
    }
}

/// A redo problem found during recovery: always names the file and offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedoCorruption {
    pub file: String,
    pub offset: u64,
    pub reason: String,
}

impl std::fmt::Display for RedoCorruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "redo log corrupt in {} at offset {}: {}", self.file, self.offset, self.reason)
    }
}

/// Reads the redo records of `[from_lsn, synced_lsn)` in order, calling `f(lsn, payload)`.
///
/// Everything below `synced_lsn` was made durable, so a bad or missing record there is corruption
/// and stops recovery with the file and offset. Bytes at or above `synced_lsn` (a torn tail, or
/// records of epochs that never became durable) are ignored.
pub fn read_redo(
    storage: &dyn Storage,
    ldm: u16,
    from_lsn: u64,
    synced_lsn: u64,
    f: impl FnMut(u64, &[u8]) -> Result<(), String>,
) -> Result<u64, RedoCorruption> {
    walk_redo(storage, ldm, from_lsn, Some(synced_lsn), f)
}

/// Reads the valid records from `from_lsn` on, past what a system file named synced: records
/// in order until the log ends, a record is torn or damaged, or the next segment does not start
/// where the last record ended (a tail that was never synced ends that way). Calls
/// `f(lsn, payload)`; returns the records read. When the segments holding `from_lsn` are gone
/// (the redo before a newer checkpoint was freed) it starts at the first segment after it.
pub fn read_redo_tail(
    storage: &dyn Storage,
    ldm: u16,
    from_lsn: u64,
    f: impl FnMut(u64, &[u8]) -> Result<(), String>,
) -> Result<u64, RedoCorruption> {
    walk_redo(storage, ldm, from_lsn, None, f)
}

/// Both readers: with `synced` the durable part up to it (anything missing or damaged is
/// corruption), without it the valid tail (anything missing or damaged ends the log).
fn walk_redo(
    storage: &dyn Storage,
    ldm: u16,
    from_lsn: u64,
    synced: Option<u64>,
    mut f: impl FnMut(u64, &[u8]) -> Result<(), String>,
) -> Result<u64, RedoCorruption> {
    let end = synced.unwrap_or(u64::MAX);
    if from_lsn >= end {
        return Ok(0);
    }
    let corrupt = |file: String, offset: u64, reason: String| RedoCorruption { file, offset, reason };
    let segments = list_segments(storage, ldm).map_err(|e| corrupt(format!("ldm-{ldm}"), 0, e.to_string()))?;
    let starts: Vec<u64> = segments.keys().copied().collect();
    let mut lsn = from_lsn;
    if synced.is_none() && starts.first().is_some_and(|&first| first > from_lsn) {
        lsn = starts[0];
    }
    let mut records = 0u64;
    while lsn < end {
        // The segment holding `lsn`: the last one starting at or before it.
        let Some(&start) = starts.iter().rev().find(|&&s| s <= lsn) else {
            return match synced {
                Some(_) => Err(corrupt(segment_name(ldm, lsn), 0, format!("no redo segment holds LSN {lsn}"))),
                None => Ok(records),
            };
        };
        let name = &segments[&start];
        let bytes = storage.read(name).map_err(|e| corrupt(name.clone(), 0, e.to_string()))?.unwrap_or_default();
        let seg_end = start + bytes.len() as u64;
        while lsn < end && lsn < seg_end {
            let off = (lsn - start) as usize;
            match redo::read_record(&bytes[off..]) {
                Read::Record { payload, len } => {
                    if lsn + len as u64 > end {
                        // A record straddling the durable end was written after the sync.
                        return Ok(records);
                    }
                    f(lsn, payload).map_err(|reason| corrupt(name.clone(), off as u64, reason))?;
                    records += 1;
                    lsn += len as u64;
                }
                Read::Short | Read::Bad if synced.is_some() => {
                    let reason = "record checksum or header is wrong inside the durable part of the log";
                    return Err(corrupt(name.clone(), off as u64, reason.into()));
                }
                Read::Short | Read::Bad => return Ok(records),
            }
        }
        if lsn < end && starts.iter().find(|&&s| s > start).copied() != Some(lsn) {
            return match synced {
                Some(synced) => Err(corrupt(
                    name.clone(),
                    lsn - start,
                    format!("log ends at LSN {lsn} but LSN {synced} was made durable"),
                )),
                None => Ok(records),
            };
        }
    }
    Ok(records)
}

/// Physical end of an ldm's redo log (one past the last byte of the last segment), or 0.
pub fn redo_end(storage: &dyn Storage, ldm: u16) -> io::Result<u64> {
    let segs = list_segments(storage, ldm)?;
    match segs.iter().next_back() {
        None => Ok(0),
        Some((start, name)) => Ok(start + storage.read(name)?.map(|b| b.len() as u64).unwrap_or(0)),
    }
}
