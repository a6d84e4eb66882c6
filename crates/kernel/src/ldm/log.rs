//! Change logs for backups (see `tc::log`): what this ldm commits as the primary replica of a
//! partition, buffered per log with the epochs, plus an epoch mark at every epoch flush (by then
//! every commit of that epoch has been applied here: the flush follows the tcs' reports that
//! nothing of it is still committing). Bounded: a log that is not polled for `LOG_IDLE_MS` is
//! dropped, and when the buffers outgrow `LOG_BUFFER_MAX` the fullest log fails (its backup
//! reports why).

use super::*;
use std::collections::BTreeSet;
use tern_wire::{LogEntry, LogOp};

/// Logs one ldm keeps at a time.
const LOGS_MAX: usize = 8;
/// Bytes of entries the logs of one ldm may buffer between polls, in all (so clients that
/// start logs and never poll hold at most this much here).
pub(super) const LOG_BUFFER_MAX: usize = 128 << 20;
/// A log not polled for this long is dropped (its client is gone).
const LOG_IDLE_MS: u64 = 60_000;

/// One change log at this ldm.
pub(super) struct LogSub {
    entries: VecDeque<LogEntry>,
    bytes: usize,
    polled_ms: u64,
    failed: Option<TernError>,
    /// The tables it logs (empty: every table); epoch marks go to every log.
    tables: BTreeSet<TableId>,
}

impl LogSub {
    /// Whether changes of `table` go to this log.
    fn wants(&self, table: TableId) -> bool {
        self.tables.is_empty() || self.tables.contains(&table)
    }

    fn push(&mut self, e: LogEntry) {
        if self.failed.is_none() {
            self.bytes += e.size();
            self.entries.push_back(e);
        }
    }

    /// Ends the log with `why` (its next poll reports it), freeing its buffer.
    fn fail(&mut self, why: TernError) {
        self.entries.clear();
        self.bytes = 0;
        self.failed.get_or_insert(why);
    }
}

impl Ldm {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn log_request(
        &mut self,
        from: Addr,
        sub: u64,
        call: u64,
        op: LogOp,
        max_bytes: u32,
        tables: Vec<TableId>,
        out: &mut Out,
    ) {
        let key = (from, sub);
        let mut entries = Vec::new();
        let mut error = None;
        match op {
            LogOp::Start if self.logs.len() >= LOGS_MAX => {
                error = Some(TernError::new(ErrorCode::Overloaded, format!("at most {LOGS_MAX} backups at a time")));
            }
            LogOp::Start => {
                let tables = tables.into_iter().collect();
                let s = LogSub { entries: VecDeque::new(), bytes: 0, polled_ms: self.now_ms, failed: None, tables };
                self.logs.insert(key, s);
            }
            LogOp::Poll => match self.logs.get_mut(&key) {
                None => {
                    error = Some(TernError::new(
                        ErrorCode::InvalidRequest,
                        "the backup's change log is gone from a data node (not polled for a minute, or the node restarted)",
                    ))
                }
                Some(s) if s.failed.is_some() => {
                    error = self.logs.remove(&key).and_then(|s| s.failed);
                }
                Some(s) => {
                    s.polled_ms = self.now_ms;
                    let mut taken = 0;
                    while let Some(e) = s.entries.front() {
                        let n = e.size();
                        if !entries.is_empty() && taken + n > max_bytes as usize {
                            break;
                        }
                        taken += n;
                        entries.push(s.entries.pop_front().expect("front"));
                    }
                    s.bytes -= taken;
                }
            },
            LogOp::Stop => {
                self.logs.remove(&key);
            }
        }
        out.send(from, Signal::LogChunk { from: self.addr, call, entries, error });
    }

    /// Called at commit with the transaction's changes (applied): those of partitions this
    /// ldm logs (their primary here, or a move's target primary: `ClusterState::logs_changes`)
    /// go to every log.
    pub(super) fn log_changes(&mut self, epoch: u64, changes: &BTreeMap<LockKey, Change>) {
        let me = self.instance();
        let mut logged_here: BTreeMap<(TableId, u32), Option<u32>> = BTreeMap::new();
        for (lk, ch) in changes {
            let here = *logged_here.entry((lk.0, lk.1)).or_insert_with(|| {
                // (One lookup per partition a transaction wrote, not per row.)
                let g = self.cluster.logs_changes(lk.0, self.groups_of(lk.0), lk.1, (self.addr.node, me));
                g.filter(|_| self.parts.contains_key(&(lk.0, lk.1)))
            });
            let Some(log_gen) = here else { continue };
            let entry = match &ch.row {
                Some(r) => LogEntry::Put { epoch, log_gen, table: lk.0, row: r.clone() },
                None => LogEntry::Delete { epoch, log_gen, table: lk.0, key: lk.2.to_vec(), expired: ch.expired },
            };
            for s in self.logs.values_mut().filter(|s| s.wants(lk.0)) {
                s.push(entry.clone());
            }
        }
        self.log_bound();
    }

    /// An epoch flush: every commit of `epoch` and before has been applied here.
    pub(super) fn log_epoch(&mut self, epoch: u64) {
        for s in self.logs.values_mut() {
            s.push(LogEntry::Epoch(epoch));
        }
        self.log_bound();
    }

    /// Keeps the logs' buffers within `LOG_BUFFER_MAX` in all: the fullest log (its backup is
    /// furthest behind) fails until they fit.
    fn log_bound(&mut self) {
        while self.logs.values().map(|s| s.bytes).sum::<usize>() > LOG_BUFFER_MAX {
            let me = self.addr;
            let Some(s) = self.logs.values_mut().max_by_key(|s| s.bytes) else { return };
            s.fail(TernError::new(
                ErrorCode::Overloaded,
                format!(
                    "backup change log overflow: more than {} MiB of changes waited at ldm {:?} of data node {} for the backup to fetch them",
                    LOG_BUFFER_MAX >> 20,
                    me.block,
                    me.node
                ),
            ));
        }
        debug_assert!(
            self.logs.values().map(|s| s.bytes).sum::<usize>() <= LOG_BUFFER_MAX,
            "invariant: the change logs' buffers stay within their bound"
        );
    }

    /// Drops logs nobody polls.
    pub(super) fn log_tick(&mut self) {
        let now = self.now_ms;
        self.logs.retain(|_, s| now.saturating_sub(s.polled_ms) < LOG_IDLE_MS);
    }

    /// Fails every log: the data nodes' states changed (primaries may move to a backup replica,
    /// whose changes the log would not order after the old primary's). Map versions that change
    /// only the schema or partition placements (moves: see `logs_changes`) leave the logs alone.
    pub(super) fn log_map_changed(&mut self) {
        for s in self.logs.values_mut() {
            s.fail(crate::tc::log::cluster_changed());
        }
    }
}
