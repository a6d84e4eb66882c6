//! The `dist` block (NDB: DBDIH's epoch and start-up coordination): runs the node start-up
//! protocol and the epoch (global checkpoint) protocol.
//!
//! Start-up: every ldm writes a checkpoint of what it recovered; when all have, the system file is
//! rewritten for the current ldm layout, and only then may files of earlier runs be removed
//! (`NodeStarted`). A crash anywhere in between recovers the same state again.
//!
//! Epoch round, every `epoch_interval_ms` (ndb-protocols.md §3.2–3.3):
//! 1. `EpochPrepare(new)` to every tc: each closes its commit gate and answers.
//! 2. `EpochCommit(new)`: each tc switches to the new epoch and reopens the gate; from now on no tc
//!    gives out the old epoch.
//! 3. Each tc answers `EpochTcFinished(old)` once none of its old-epoch transactions is still
//!    committing: every commit record of `old` is in an ldm's redo buffer.
//! 4. `EpochFlush(old)` to every ldm: each writes and syncs its redo and answers with the LSN made
//!    durable and the newest epoch it has applied.
//! 5. If any ldm applied an epoch newer than the one in the system file, the system file is
//!    rewritten with durable epoch `old` and the synced LSNs. Then `EpochDurable(old)` goes to every
//!    tc (durable commits are acknowledged) and ldm (checkpoints may become usable).

use crate::signal::{Addr, IoReq, Out, Signal};
use crate::sysfile::{SYSFILE_NAME, Sysfile};

#[derive(Debug, Clone)]
pub struct DistConfig {
    pub epoch_interval_ms: u64,
}

impl Default for DistConfig {
    fn default() -> Self {
        DistConfig { epoch_interval_ms: 100 }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Round {
    Idle,
    Prepare { new: u64, waiting: usize },
    Finish { old: u64, waiting: usize },
    Flush { old: u64, waiting: usize, max_epoch: u64 },
    Save { old: u64, token: u64 },
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Created,
    Starting { waiting: usize },
    SavingStart { token: u64 },
    Running,
}

pub struct Dist {
    addr: Addr,
    cfg: DistConfig,
    tcs: Vec<Addr>,
    ldms: Vec<Addr>,
    phase: Phase,
    round: Round,
    current_epoch: u64,
    durable_epoch: u64,
    /// Durable epoch recorded in the system file.
    file_epoch: u64,
    synced_lsn: Vec<u64>,
    /// Files of earlier runs to delete once the node has started (e.g. of removed ldms).
    stale_files: Vec<String>,
    next_token: u64,
}

impl Dist {
    pub fn new(
        addr: Addr,
        cfg: DistConfig,
        tcs: Vec<Addr>,
        ldms: Vec<Addr>,
        durable_epoch: u64,
        stale_files: Vec<String>,
    ) -> Dist {
        let n = ldms.len();
        Dist {
            addr,
            cfg,
            tcs,
            ldms,
            phase: Phase::Created,
            round: Round::Idle,
            current_epoch: durable_epoch + 1,
            durable_epoch,
            file_epoch: durable_epoch,
            synced_lsn: vec![0; n],
            stale_files,
            next_token: 0,
        }
    }

    pub fn durable_epoch(&self) -> u64 {
        self.durable_epoch
    }

    pub fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    fn ldm_index(&self, a: Addr) -> usize {
        self.ldms.iter().position(|&l| l == a).expect("a known ldm")
    }

    fn save(&mut self, durable: u64, out: &mut Out) -> u64 {
        let token = self.token();
        let bytes = Sysfile { durable_epoch: durable, synced_lsn: self.synced_lsn.clone() }.encode();
        out.io(self.addr, IoReq::WriteFile { name: SYSFILE_NAME.into(), bytes, token });
        token
    }

    pub fn handle(&mut self, _now_ms: u64, sig: Signal, out: &mut Out) {
        match sig {
            Signal::Start => {
                for &l in &self.ldms {
                    out.send(l, Signal::Start);
                }
                self.phase = Phase::Starting { waiting: self.ldms.len() };
            }
            Signal::LdmReady { from, synced_lsn } => {
                let i = self.ldm_index(from);
                self.synced_lsn[i] = synced_lsn;
                if let Phase::Starting { waiting } = &mut self.phase {
                    *waiting -= 1;
                    if *waiting == 0 {
                        let token = self.save(self.durable_epoch, out);
                        self.phase = Phase::SavingStart { token };
                    }
                }
            }
            Signal::IoDone { token, result } => {
                if let Err(e) = result {
                    panic!("dist: writing the system file failed: {e}");
                }
                self.io_done(token, out);
            }
            Signal::Tick => {
                if self.round == Round::Idle && self.phase == Phase::Running {
                    let new = self.current_epoch + 1;
                    for &t in &self.tcs {
                        out.send(t, Signal::EpochPrepare { epoch: new });
                    }
                    self.round = Round::Prepare { new, waiting: self.tcs.len() };
                }
                out.timer(self.cfg.epoch_interval_ms, self.addr, Signal::Tick);
            }
            Signal::EpochPrepared { epoch, .. } => {
                if let Round::Prepare { new, waiting } = &mut self.round {
                    assert_eq!(*new, epoch, "prepare answer for the running round");
                    *waiting -= 1;
                    if *waiting == 0 {
                        let new = *new;
                        let old = self.current_epoch;
                        self.current_epoch = new;
                        for &t in &self.tcs {
                            out.send(t, Signal::EpochCommit { epoch: new });
                        }
                        self.round = Round::Finish { old, waiting: self.tcs.len() };
                    }
                }
            }
            Signal::EpochTcFinished { epoch, .. } => {
                if let Round::Finish { old, waiting } = &mut self.round {
                    assert_eq!(*old, epoch, "finish report for the running round");
                    *waiting -= 1;
                    if *waiting == 0 {
                        let old = *old;
                        for &l in &self.ldms {
                            out.send(l, Signal::EpochFlush { epoch: old });
                        }
                        self.round = Round::Flush { old, waiting: self.ldms.len(), max_epoch: 0 };
                    }
                }
            }
            Signal::EpochFlushed { from, epoch, synced_lsn, max_epoch } => {
                let i = self.ldm_index(from);
                self.synced_lsn[i] = synced_lsn;
                if let Round::Flush { old, waiting, max_epoch: m } = &mut self.round {
                    assert_eq!(*old, epoch, "flush report for the running round");
                    *m = (*m).max(max_epoch);
                    *waiting -= 1;
                    if *waiting == 0 {
                        let (old, m) = (*old, *m);
                        if m > self.file_epoch {
                            let token = self.save(old, out);
                            self.round = Round::Save { old, token };
                        } else {
                            self.made_durable(old, out);
                        }
                    }
                }
            }
            other => panic!("dist received an unexpected signal: {other:?}"),
        }
    }

    fn io_done(&mut self, token: u64, out: &mut Out) {
        if let Phase::SavingStart { token: t } = self.phase
            && t == token
        {
            self.phase = Phase::Running;
            for name in std::mem::take(&mut self.stale_files) {
                out.io(self.addr, IoReq::DeleteFile { name });
            }
            let started = Signal::NodeStarted { epoch: self.current_epoch, durable_epoch: self.durable_epoch };
            for &a in self.tcs.iter().chain(self.ldms.iter()) {
                out.send(a, started.clone());
            }
            out.timer(self.cfg.epoch_interval_ms, self.addr, Signal::Tick);
            return;
        }
        if let Round::Save { old, token: t } = self.round
            && t == token
        {
            self.file_epoch = old;
            self.made_durable(old, out);
        }
    }

    fn made_durable(&mut self, epoch: u64, out: &mut Out) {
        self.durable_epoch = epoch;
        for &a in self.tcs.iter().chain(self.ldms.iter()) {
            out.send(a, Signal::EpochDurable { epoch });
        }
        self.round = Round::Idle;
    }
}
