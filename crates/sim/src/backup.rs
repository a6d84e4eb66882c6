//! The simulated `tern backup`: change log started, table scanned, log polled to the end epoch,
//! and the backup's state at that epoch checked against the oracle.

use super::*;

/// The client id of the simulated `tern backup`.
pub(super) const BACKUP_CLIENT: u64 = 998;

/// How often a backup starts (simulated ms), and how long it may take before it is given up.
pub(super) const BACKUP_TIMEOUT_MS: u64 = 20_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BackupPhase {
    Starting,
    Scanning,
    Status,
    /// Polling the log until every ldm's mark reached the end epoch.
    Polling(u64),
}

/// A backup as `tern backup` takes it: change log started, table scanned, end epoch = the tc's
/// current epoch + 1 once the scan ended, log polled until every ldm marked that epoch.
pub(super) struct SimBackup {
    pub(crate) phase: BackupPhase,
    pub(crate) tc: Addr,
    /// The data nodes' states when it started: a change fails the change log.
    pub(crate) nodes: BTreeMap<NodeId, tern_types::cluster::NodeStatus>,
    /// The partitions' placements when it started: moves that step meanwhile (begin, switch,
    /// end) leave the log running, logged by source and target.
    pub(crate) placed: BTreeMap<(u32, u32), tern_types::cluster::Placed>,
    pub(crate) incarnation: u32,
    pub(crate) started: u64,
    pub(crate) req: u64,
    pub(crate) rows: Vec<Vec<u8>>,
    /// Per (node, ldm): its entries in order, and its newest epoch mark.
    pub(crate) parts: BTreeMap<(u16, u16), (Vec<tern_wire::LogEntry>, u64)>,
}

impl Sim {
    /// Starts a backup, or gives up the running one when it met a crash or a new cluster map
    /// or took too long (its requests may never be answered then).
    pub(super) fn backup_tick(&mut self) {
        if let Some(b) = &self.backup {
            let stale = b.incarnation != self.incarnation
                || b.nodes != self.cluster.nodes
                || self.now > b.started + BACKUP_TIMEOUT_MS;
            if !stale {
                return;
            }
            let b = self.backup.take().expect("running");
            if b.incarnation == self.incarnation {
                self.backup_send_stop(&b);
            }
            self.stats.backups_abandoned += 1;
        }
        let tc = self.verify_tc();
        self.backup = Some(SimBackup {
            phase: BackupPhase::Starting,
            tc,
            nodes: self.cluster.nodes.clone(),
            placed: self.cluster.placed.clone(),
            incarnation: self.incarnation,
            started: self.now,
            req: 0,
            rows: Vec::new(),
            parts: BTreeMap::new(),
        });
        self.backup_send(Request::Log { sub: 1, op: tern_wire::LogOp::Start, max_bytes: 0, tables: vec![] });
    }

    pub(super) fn backup_send(&mut self, req: Request) {
        let inc = self.incarnation;
        let Some(b) = self.backup.as_mut() else { return };
        b.req += 1;
        let sig = Signal::ClientRequest { client: BACKUP_CLIENT, req_id: b.req, req };
        let to = b.tc;
        self.push(self.now + 1, Event::Deliver { from: None, to, sig, incarnation: inc });
    }

    pub(super) fn backup_reply(&mut self, req_id: u64, reply: Reply) {
        let Some(b) = self.backup.as_mut() else { return };
        if req_id != b.req || b.incarnation != self.incarnation {
            return;
        }
        if b.nodes != self.cluster.nodes {
            // A failure or restart meets it: the log fails (checked by the ldm's unit test);
            // nothing to compare.
            self.backup = None;
            self.stats.backups_abandoned += 1;
            return;
        }
        let table = self.table.as_ref().map(|t| t.id);
        let scan = |done_req: Option<u64>| match done_req {
            None => Request::Scan(ScanReq { batch_rows: 7, ..ScanReq::table(table.unwrap_or(0)) }),
            Some(_) => Request::ScanNext { scan: 0 },
        };
        match (b.phase, reply) {
            (_, Reply::Error(_)) => {
                // (Its log stops too: the next backup's start would find it running.)
                let b = self.backup.take().expect("running");
                self.backup_send_stop(&b);
                self.stats.backups_abandoned += 1;
            }
            (BackupPhase::Starting, Reply::Log { .. }) => {
                b.phase = BackupPhase::Scanning;
                self.backup_send(scan(None));
            }
            (BackupPhase::Scanning, Reply::ScanRows { rows, done, .. }) => {
                b.rows.extend(rows);
                if done {
                    b.phase = BackupPhase::Status;
                    self.backup_send(Request::Status);
                } else {
                    self.backup_send(scan(Some(0)));
                }
            }
            (BackupPhase::Status, Reply::Status(st)) => {
                b.phase = BackupPhase::Polling(st.current_epoch + 1);
                self.backup_send(Request::Log { sub: 1, op: tern_wire::LogOp::Poll, max_bytes: 256, tables: vec![] });
            }
            (BackupPhase::Polling(stop), Reply::Log { parts }) => {
                for p in parts {
                    let e = b.parts.entry((p.node, p.ldm)).or_default();
                    for x in p.entries {
                        match x {
                            tern_wire::LogEntry::Epoch(m) => e.1 = e.1.max(m),
                            other => e.0.push(other),
                        }
                    }
                }
                if !b.parts.is_empty() && b.parts.values().all(|(_, m)| *m >= stop) {
                    let b = self.backup.take().expect("running");
                    self.backup_send_stop(&b);
                    self.check_backup(b, stop);
                } else {
                    self.backup_send(Request::Log {
                        sub: 1,
                        op: tern_wire::LogOp::Poll,
                        max_bytes: 256,
                        tables: vec![],
                    });
                }
            }
            (phase, other) => self.fail(&format!("backup in phase {phase:?} got {other:?}")),
        }
    }

    pub(super) fn backup_send_stop(&mut self, b: &SimBackup) {
        let sig = Signal::ClientRequest {
            client: BACKUP_CLIENT,
            req_id: u64::MAX,
            req: Request::Log { sub: 1, op: tern_wire::LogOp::Stop, max_bytes: 0, tables: vec![] },
        };
        let inc = self.incarnation;
        self.push(self.now + 1, Event::Deliver { from: None, to: b.tc, sig, incarnation: inc });
    }

    /// The backup's rows with its log applied up to `stop` must be the committed state at
    /// `stop`: the recovered base with every transaction of an epoch up to `stop`.
    pub(super) fn check_backup(&mut self, b: SimBackup, stop: u64) {
        let Some(table) = self.table.clone() else { return };
        let layout = self.layout.as_ref().expect("table");
        let row_of = |bytes: &[u8]| {
            let v = layout.decode_row(bytes).expect("valid row");
            (
                v[0].as_i128().expect("int") as i64,
                (v[1].as_i128().expect("int") as i64, v[2].as_i128().map(|x| x as i64)),
            )
        };
        let mut got: BTreeMap<i64, Row> = b.rows.iter().map(|r| row_of(r)).collect();
        // As `tern restore` does: of one key's entries, the one of the highest (epoch,
        // generation) wins, the last of those in its ldm's order (a moving partition is logged
        // by its source and its target, the target one generation up). The parts are taken in
        // reverse (node, ldm) order so that a lower generation's later arrival is tested too.
        let mut applied: BTreeMap<i64, (u64, u32)> = BTreeMap::new();
        for (entries, _) in b.parts.values().rev() {
            for e in entries {
                let (id, row, at) = match e {
                    tern_wire::LogEntry::Put { epoch, log_gen, table: t, row } if *t == table.id && *epoch <= stop => {
                        let (id, r) = row_of(row);
                        (id, Some(r), (*epoch, *log_gen))
                    }
                    tern_wire::LogEntry::Delete { epoch, log_gen, table: t, key, .. }
                        if *t == table.id && *epoch <= stop =>
                    {
                        let id = layout.decode_key(key).expect("valid key")[0].as_i128().expect("int") as i64;
                        (id, None, (*epoch, *log_gen))
                    }
                    _ => continue,
                };
                if applied.get(&id).is_some_and(|&a| a > at) {
                    continue;
                }
                applied.insert(id, at);
                match row {
                    Some(r) => got.insert(id, r),
                    None => got.remove(&id),
                };
            }
        }
        let mut expect = self.base.clone();
        let commits: Vec<(TxnKey, u64)> = self.oracle.commits.clone();
        for (key, epoch) in &commits {
            if *epoch <= stop {
                self.apply_model(&mut expect, key);
            }
        }
        if got != expect {
            let missing: Vec<_> = expect.iter().filter(|(k, v)| got.get(k) != Some(v)).take(5).collect();
            let extra: Vec<_> = got.iter().filter(|(k, v)| expect.get(k) != Some(v)).take(5).collect();
            self.fail(&format!(
                "a backup (scan from t={}, end epoch {stop}) differs from the committed state at that epoch: expected-but-not-found {missing:?}, found-but-not-expected {extra:?}",
                b.started
            ));
        }
        self.stats.backups_checked += 1;
        if b.placed != self.cluster.placed {
            self.stats.backups_across_moves += 1;
        }
    }
}
