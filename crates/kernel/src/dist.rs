//! The `dist` block (NDB: DBDIH's epoch and start-up coordination): runs this node's start-up and,
//! on the master node (the live node that joined first, `ClusterState::master`), the epoch
//! (global checkpoint) protocol over every live node of the cluster.
//!
//! Start-up (local): every ldm writes a checkpoint of what it recovered; when all have, the system
//! file is rewritten for the current ldm layout, and only then may files of earlier runs be
//! removed (`NodeStarted`). A crash anywhere in between recovers the same state again. Then the
//! node tells the master it takes part in epochs (`DistStarted`).
//!
//! Epoch round, every `epoch_interval_ms`, run by the master once every live node has started
//! (ndb-protocols.md §3.2–3.3):
//! 1. `EpochPrepare(new)` to every tc of every live node: each closes its commit gate and answers.
//! 2. `EpochCommit(new)` to all of them: each switches to the new epoch and reopens the gate; from
//!    now on no tc anywhere gives out the old epoch (epochs are a consistent cut).
//! 3. Each tc answers `EpochTcFinished(old)` once none of its old-epoch transactions is still
//!    committing: every commit record of `old` is in the redo buffer of every replica.
//! 4. `EpochFlush(old)` to every ldm of every live node: each writes its redo buffer — with an
//!    epoch mark last when `old` or an epoch before it had commits since the last marked flush
//!    (`redo`) — syncs, and answers with the LSN made durable and the newest epoch it applied.
//! 5. `EpochDurable(old)` to every tc of the nodes that flushed: durable commits are
//!    acknowledged after this one sync on each replica.
//! 6. Off that path, at most once per `SAVE_EVERY_MS` (at once for a node not saved yet), when
//!    any ldm applied an epoch newer than the last one saved: `EpochSave(e)` (the newest flushed
//!    epoch) to those nodes' dists, which append it to their system files (durable epoch `e`,
//!    their ldms' synced LSNs) and answer `EpochSaved`. Then `EpochDurable(e)` goes to their ldms
//!    and dists: checkpoints may become usable and free the redo before them.
//!
//! So an epoch is announced durable only once every live node has it in its redo, marked: after
//! a whole-cluster crash, every node recovers to the smallest of the nodes' epochs
//! (`recovery::node_epoch`: its system file's, or the newest its every ldm marked after it), the
//! consistent cut, which is at least the last epoch announced durable.

use crate::signal::{Addr, Block, ControlReq, IoReq, NodeId, Out, Signal};
use crate::sysfile::Sysfile;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tern_types::cluster::{ClusterState, NodeState};

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
    /// `max_current`: the newest epoch any tc answered it was giving out.
    Prepare {
        new: u64,
        waiting: BTreeSet<Addr>,
        max_current: u64,
    },
    /// `mark`: some tc committed in an epoch not marked yet (its flush must mark the redo).
    Finish {
        old: u64,
        waiting: BTreeSet<Addr>,
        mark: bool,
    },
    Flush {
        old: u64,
        waiting: BTreeSet<Addr>,
        max_epoch: u64,
        synced: BTreeMap<Addr, u64>,
        mark: bool,
    },
}

/// A flushed epoch the system files of `nodes` are to hold (with their ldms' synced LSNs).
#[derive(Debug, PartialEq, Eq)]
struct SaveWork {
    epoch: u64,
    synced: BTreeMap<Addr, u64>,
    nodes: BTreeSet<NodeId>,
}

/// System-file saves run at most this often (a node not saved yet is saved at once): they only
/// let checkpoints become usable, so redo is freed up to this much later.
pub const SAVE_EVERY_MS: u64 = 1000;

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
    cluster: Arc<ClusterState>,
    /// This node's blocks.
    tcs: Vec<Addr>,
    ldms: Vec<Addr>,
    phase: Phase,
    /// Newest epoch announced durable (cluster-wide).
    durable_epoch: u64,
    /// Synced LSN per local ldm, as reported at start-up.
    synced_lsn: Vec<u64>,
    /// A system-file write for an epoch save: (io token, epoch, master to answer).
    saving: Option<(u64, u64, Addr)>,
    /// Files of earlier runs to delete once the node has started (e.g. of removed ldms).
    stale_files: Vec<String>,
    next_token: u64,
    /// An epoch save received before this node could write it: (master, epoch, ldm positions).
    deferred_save: Option<(Addr, u64, Vec<u64>)>,
    /// A restarting node waiting for the catalog: epoch ticks since it last asked.
    catalog_wait: Option<u64>,
    // ---- master state (used while this node is the master)
    round: Round,
    current_epoch: u64,
    /// Newest epoch written to the system files of `saved_nodes`.
    saved_epoch: u64,
    /// The nodes whose system files hold `saved_epoch`: they alone learn that it is durable (a
    /// node that joined since has not saved it, so its checkpoints may not count on it).
    saved_nodes: BTreeSet<NodeId>,
    /// Live nodes that reported they have started.
    started_nodes: BTreeSet<NodeId>,
    /// Failed nodes whose transactions are still being taken over: no epoch finishes meanwhile
    /// (a taken-over commit joins the epoch its coordinator had given it).
    takeovers: BTreeSet<NodeId>,
    /// Takeovers finished against a cluster map newer than this dist's: (map version, nodes).
    done_ahead: Vec<(u64, Vec<NodeId>)>,
    /// Node restart: local ldms still copying their partitions, and rows copied so far.
    copying: Option<usize>,
    /// This life's first system-file save is written (the master saves a node that joined the
    /// chains at its next round): only then does this node's disk hold every epoch made
    /// durable before it joined, which a full replica's must (a system restart's cut is the
    /// smallest of theirs). A node with nothing to copy is done copying before that.
    saved_in_life: bool,
    /// Copying is done; `Started` is asked for once the first save is written.
    started_after_save: bool,
    pub copied_rows: u64,
    /// The driver's clock (ms), set once at the top of every `handle`.
    now_ms: u64,
    /// Heartbeats between data nodes: when each other node in the chains (of the incarnation
    /// noted) was last heard from, when this node last sent its own, and when it last
    /// suspected each node.
    heard: BTreeMap<NodeId, (u32, u64)>,
    beat_sent_ms: u64,
    suspected_ms: BTreeMap<NodeId, u64>,
    /// When the last tick ran, and the most it came late.
    last_tick_ms: u64,
    late_ms_max: u64,
    /// The newest epoch a durable commit waits for (`EpochWanted`): while it is not durable,
    /// the master runs rounds back to back instead of once per interval.
    wanted_epoch: u64,
    /// Newest epoch this master announced durable to the tcs (flushed, marked where needed).
    flushed_epoch: u64,
    /// Newest epoch a marked flush of this master covered (0: none yet, so the first marks).
    marked_epoch: u64,
    /// Transactions were taken over since the last marked flush (they commit in old epochs).
    takeover_unmarked: bool,
    /// The newest flushed epoch not yet saved, and the save running (with the nodes it waits for).
    save_next: Option<SaveWork>,
    save_running: Option<(SaveWork, BTreeSet<NodeId>)>,
    last_save_ms: u64,
    /// Rounds in a row that found nothing to do (no commit, nothing new to save, every live
    /// node started, no takeover): from `QUIET_AFTER_ROUNDS` on, rounds start only every
    /// `QUIET_INTERVAL_MS` until a tc commits again (`EpochBusy`) or anything else happens.
    quiet_rounds: u32,
    /// When the master started its last round (block time).
    round_started_ms: u64,
}

/// The sending block of the signals that name it (those a dist receives from other nodes).
fn sig_from(sig: &Signal) -> Option<Addr> {
    match sig {
        Signal::EpochPrepared { from, .. }
        | Signal::EpochTcFinished { from, .. }
        | Signal::EpochFlushed { from, .. }
        | Signal::EpochSave { from, .. }
        | Signal::EpochSaved { from, .. }
        | Signal::EpochWanted { from, .. }
        | Signal::EpochBusy { from }
        | Signal::DistStarted { from, .. } => Some(*from),
        _ => None,
    }
}

/// Empty rounds in a row after which an idle master slows its rounds down.
const QUIET_AFTER_ROUNDS: u32 = 10;
/// The round interval of a quiet master (an idle cluster's epochs, ms).
pub const QUIET_INTERVAL_MS: u64 = 1000;

/// How often a restarting node asks again for the catalog.
const CATALOG_RETRY_MS: u64 = 1000;

impl Dist {
    pub fn new(
        addr: Addr,
        cfg: DistConfig,
        cluster: Arc<ClusterState>,
        tcs: Vec<Addr>,
        ldms: Vec<Addr>,
        durable_epoch: u64,
        stale_files: Vec<String>,
    ) -> Dist {
        let n = ldms.len();
        // Epoch numbers never go back, even when a system restart recovers to an older epoch
        // than the control plane last heard was durable (nothing was written after it): the
        // control plane's durable epoch stays a valid cut for the next restart.
        let first_epoch = durable_epoch.max(cluster.durable_epoch) + 1;
        Dist {
            addr,
            cfg,
            cluster,
            tcs,
            ldms,
            phase: Phase::Created,
            durable_epoch,
            synced_lsn: vec![0; n],
            saving: None,
            stale_files,
            next_token: 0,
            round: Round::Idle,
            current_epoch: first_epoch,
            saved_epoch: durable_epoch,
            saved_nodes: BTreeSet::new(),
            started_nodes: BTreeSet::new(),
            takeovers: BTreeSet::new(),
            done_ahead: Vec::new(),
            copying: None,
            saved_in_life: false,
            started_after_save: false,
            copied_rows: 0,
            catalog_wait: None,
            deferred_save: None,
            now_ms: 0,
            heard: BTreeMap::new(),
            beat_sent_ms: 0,
            suspected_ms: BTreeMap::new(),
            last_tick_ms: 0,
            late_ms_max: 0,
            wanted_epoch: 0,
            flushed_epoch: durable_epoch,
            marked_epoch: 0,
            takeover_unmarked: false,
            save_next: None,
            save_running: None,
            last_save_ms: 0,
            quiet_rounds: 0,
            round_started_ms: 0,
        }
    }

    pub fn durable_epoch(&self) -> u64 {
        self.durable_epoch
    }

    pub fn is_running(&self) -> bool {
        self.phase == Phase::Running
    }

    fn is_master(&self) -> bool {
        self.cluster.master() == Some(self.addr.node)
    }

    fn master_dist(&self) -> Addr {
        Addr::new(self.cluster.master().unwrap_or(self.addr.node), Block::Dist)
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    /// Every tc (or ldm) of every live node, in address order.
    fn ask_catalog(&self, out: &mut Out) {
        let master = Addr::new(self.cluster.master().unwrap_or(self.addr.node), Block::Dict);
        let incarnation = self.cluster.nodes.get(&self.addr.node).map_or(0, |s| s.incarnation);
        out.send(master, Signal::CatalogReq { from: self.addr, incarnation });
    }

    fn all(&self, block: fn(u16) -> Block) -> BTreeSet<Addr> {
        let n = self.cluster.config.ldm_workers;
        self.cluster.live_nodes().into_iter().flat_map(|node| (0..n).map(move |i| Addr::new(node, block(i)))).collect()
    }

    fn write_sysfile(&mut self, durable: u64, synced_lsn: Vec<u64>, out: &mut Out) -> u64 {
        let token = self.token();
        let bytes = Sysfile { durable_epoch: durable, synced_lsn }.encode();
        out.io(self.addr, IoReq::SaveSysfile { record: bytes, token });
        token
    }

    pub fn handle(&mut self, now_ms: u64, sig: Signal, out: &mut Out) {
        debug_assert!(now_ms >= self.now_ms, "time never goes back");
        self.now_ms = now_ms;
        // Any signal from another node's block shows that node is alive and reachable.
        if let Some(from) = sig_from(&sig)
            && from.node != self.addr.node
            && let Some(h) = self.heard.get_mut(&from.node)
        {
            h.1 = now_ms;
        }
        match sig {
            Signal::Start => {
                for &l in &self.ldms {
                    out.send(l, Signal::Start);
                }
                self.phase = Phase::Starting { waiting: self.ldms.len() };
            }
            Signal::LdmReady { from, synced_lsn } => {
                let Some(i) = self.ldms.iter().position(|&l| l == from) else {
                    return crate::signal::drop_unexpected(self.addr, "dist", &Signal::LdmReady { from, synced_lsn });
                };
                self.synced_lsn[i] = synced_lsn;
                if let Phase::Starting { waiting } = &mut self.phase {
                    *waiting -= 1;
                    if *waiting == 0 {
                        let token = self.write_sysfile(self.durable_epoch, self.synced_lsn.clone(), out);
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
            Signal::ClusterMap { state } => self.cluster_map(state, out),
            Signal::TakeoverDone { failed, map_version, .. } => {
                for n in &failed {
                    self.takeovers.remove(n);
                }
                // The takeover tc saw a map this dist has not yet: when that map (or a newer one)
                // arrives, its failures of these nodes are already taken over.
                if map_version > self.cluster.version {
                    self.done_ahead.push((map_version, failed));
                }
                self.advance(out);
            }
            Signal::DistStarted { from, .. } => {
                // Kept by every dist: any of them may become the master.
                if self.cluster.state_of(from.node).in_chains() {
                    self.started_nodes.insert(from.node);
                }
            }
            Signal::Tick => {
                if let Some(ticks) = self.catalog_wait.as_mut() {
                    // No catalog yet: ask again about once a second (a request, or the write
                    // answering it, may be lost while the other nodes learn of this restart).
                    *ticks += 1;
                    if *ticks * self.cfg.epoch_interval_ms.max(1) >= CATALOG_RETRY_MS {
                        self.catalog_wait = Some(0);
                        self.ask_catalog(out);
                    }
                }
                if self.round_due() {
                    self.maybe_start_round(out);
                }
                self.maybe_save(out);
                self.credit_lateness();
                self.heartbeats(out);
                out.timer(self.cfg.epoch_interval_ms, self.addr, Signal::Tick);
            }
            Signal::NodeHeartbeat { from, incarnation } => {
                if self.cluster.nodes.get(&from).is_some_and(|s| s.incarnation <= incarnation) {
                    self.heard.insert(from, (incarnation, self.now_ms));
                }
            }
            Signal::EpochPrepared { from, epoch, current } => self.prepared(from, epoch, current, out),
            Signal::EpochTcFinished { from, epoch, newest_commit } => self.tc_finished(from, epoch, newest_commit, out),
            Signal::EpochFlushed { from, epoch, synced_lsn, max_epoch } => {
                self.flushed(from, epoch, synced_lsn, max_epoch, out)
            }
            Signal::EpochSave { from, epoch, synced_lsn } => {
                if synced_lsn.len() != self.synced_lsn.len() {
                    // Another ldm layout than this node's: not a save for this incarnation.
                    let sig = Signal::EpochSave { from, epoch, synced_lsn };
                    return crate::signal::drop_unexpected(self.addr, "dist", &sig);
                }
                if epoch < self.durable_epoch {
                    // Of a round an earlier master left (the system file holds a newer epoch
                    // already): writing it would move the node's cut back.
                    let sig = Signal::EpochSave { from, epoch, synced_lsn };
                    return crate::signal::drop_unexpected(self.addr, "dist", &sig);
                }
                if self.phase != Phase::Running || self.saving.is_some() {
                    // Early (this node is still starting) or while a save is being written:
                    // done once this node can (the master waits for the answer); a newer
                    // request replaces an older one, whose round a newer master abandoned.
                    if self.deferred_save.as_ref().is_none_or(|d| d.1 <= epoch) {
                        self.deferred_save = Some((from, epoch, synced_lsn));
                    }
                    return;
                }
                self.save(from, epoch, synced_lsn, out);
            }
            Signal::EpochSaved { from, epoch } => self.saved(from, epoch, out),
            Signal::EpochDurable { epoch } => self.durable_epoch = self.durable_epoch.max(epoch),
            Signal::EpochBusy { .. } => {
                // A commit in an epoch opened as quiet: the normal interval again, and a round
                // now when one is due by it.
                self.quiet_rounds = 0;
                if self.now_ms >= self.round_started_ms + self.cfg.epoch_interval_ms {
                    self.maybe_start_round(out);
                }
            }
            Signal::EpochWanted { epoch, .. } => {
                // Only the master runs rounds; a request that reached a former master is
                // served by the interval's round.
                self.quiet_rounds = 0;
                if epoch > self.durable_epoch.max(self.flushed_epoch) {
                    self.wanted_epoch = self.wanted_epoch.max(epoch);
                    self.maybe_start_round(out);
                }
            }
            Signal::SchemaWritten { .. } => {
                // The catalog is here: join the write chains of this node's partitions.
                if self.catalog_wait.take().is_some() {
                    out.control.push(ControlReq::SetState(NodeState::Copying));
                }
            }
            Signal::CopyDone { rows, .. } => {
                self.copied_rows += rows;
                if let Some(n) = self.copying.as_mut() {
                    *n -= 1;
                    if *n == 0 {
                        // Every partition is copied and checkpointed here: a full replica again
                        // (once a system file of this life holds an epoch since it joined).
                        self.copying = None;
                        if self.saved_in_life {
                            out.control.push(ControlReq::SetState(NodeState::Started));
                        } else {
                            self.started_after_save = true;
                        }
                    }
                }
            }
            other => crate::signal::drop_unexpected(self.addr, "dist", &other),
        }
    }

    /// When this tick came much later than asked (the node's threads were not scheduled: a
    /// starved host), the others' silence over that stretch says nothing about them: their
    /// judgement is extended by the lateness, as ZooKeeper-style detectors do.
    fn credit_lateness(&mut self) {
        let (now, interval) = (self.now_ms, self.cfg.epoch_interval_ms.max(1));
        let last = std::mem::replace(&mut self.last_tick_ms, now);
        let late = now.saturating_sub(last).saturating_sub(interval);
        if last == 0 || late <= interval {
            return;
        }
        self.late_ms_max = self.late_ms_max.max(late);
        for h in self.heard.values_mut() {
            h.1 = (h.1 + late).min(now);
        }
    }

    /// The longest a tick of this dist came late (ms): how starved the node's threads were.
    pub fn late_ms_max(&self) -> u64 {
        self.late_ms_max
    }

    /// Heartbeats to every other node in the chains, and suspicions of those not heard from for
    /// twice the failure timeout (ndb-protocols.md §2: NDB's data nodes heartbeat each other; a node
    /// that misses them is reported, and arbitration fails one side). Only while this node is
    /// in the chains itself: a node still recovering or fetching the catalog neither sends nor
    /// judges.
    fn heartbeats(&mut self, out: &mut Out) {
        let me = self.addr.node;
        if self.phase != Phase::Running || !self.cluster.state_of(me).in_chains() {
            return;
        }
        let (now, every) = (self.now_ms, self.cluster.config.heartbeat_interval_ms.max(1));
        // Twice the management nodes' failure timeout: a dead node is their call (faster); this
        // is for data nodes that cannot reach each other, and must not fire on heartbeats queued
        // behind a node restart's copy traffic on a loaded machine.
        let timeout = 2 * self.cluster.config.failure_timeout_ms.max(every);
        let others: Vec<(NodeId, u32)> = self
            .cluster
            .nodes
            .iter()
            .filter(|(n, s)| **n != me && s.state.in_chains())
            .map(|(n, s)| (*n, s.incarnation))
            .collect();
        self.heard.retain(|n, _| others.iter().any(|(o, _)| o == n));
        self.suspected_ms.retain(|n, _| others.iter().any(|(o, _)| o == n));
        if now >= self.beat_sent_ms + every {
            self.beat_sent_ms = now;
            let incarnation = self.cluster.nodes.get(&me).map_or(0, |s| s.incarnation);
            for &(n, _) in &others {
                out.send(Addr::new(n, Block::Dist), Signal::NodeHeartbeat { from: me, incarnation });
            }
        }
        for (n, incarnation) in others {
            // A node newly in the chains (or of a new incarnation) gets a full timeout from now.
            let heard = self.heard.entry(n).or_insert((incarnation, now));
            if heard.0 < incarnation {
                *heard = (incarnation, now);
            }
            let last = heard.1;
            if now >= last + timeout && self.suspected_ms.get(&n).is_none_or(|&t| now >= t + every) {
                self.suspected_ms.insert(n, now);
                out.control.push(ControlReq::Suspect(n));
            }
        }
    }

    /// Tells the master that this node takes part in epochs (again whenever the master changes:
    /// a new master knows only the nodes that told it).
    fn announce_started(&mut self, out: &mut Out) {
        if self.is_master() {
            self.started_nodes.insert(self.addr.node);
        } else {
            out.send(self.master_dist(), Signal::DistStarted { from: self.addr, durable_epoch: self.durable_epoch });
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
            self.announce_started(out);
            out.timer(self.cfg.epoch_interval_ms, self.addr, Signal::Tick);
            if self.cluster.state_of(self.addr.node) == NodeState::Starting {
                // A node restart (ndb-protocols.md §5): first the current catalog from the master.
                self.catalog_wait = Some(0);
                self.ask_catalog(out);
            }
            self.run_deferred_save(out);
            return;
        }
        if let Some((t, epoch, master)) = self.saving
            && t == token
        {
            self.saving = None;
            self.saved_in_life = true;
            if std::mem::take(&mut self.started_after_save) {
                out.control.push(ControlReq::SetState(NodeState::Started));
            }
            out.send(master, Signal::EpochSaved { from: self.addr, epoch });
            self.run_deferred_save(out);
        }
    }

    /// Writes the system file for an epoch save of the master `from`.
    fn save(&mut self, from: Addr, epoch: u64, synced_lsn: Vec<u64>, out: &mut Out) {
        assert!(self.phase == Phase::Running && self.saving.is_none(), "one epoch save at a time, once started");
        assert!(
            epoch >= self.durable_epoch,
            "an epoch save of {epoch} behind the durable epoch {}",
            self.durable_epoch
        );
        let token = self.write_sysfile(epoch, synced_lsn, out);
        self.saving = Some((token, epoch, from));
    }

    /// An epoch save that came while this node was starting or saving, if any.
    fn run_deferred_save(&mut self, out: &mut Out) {
        if self.phase == Phase::Running
            && self.saving.is_none()
            && let Some((from, epoch, lsns)) = self.deferred_save.take()
            && epoch >= self.durable_epoch
        {
            self.save(from, epoch, lsns, out);
        }
    }

    // ---------------------------------------------------------------- master: epoch rounds

    /// Idle for `QUIET_AFTER_ROUNDS` rounds: rounds start at the quiet interval.
    fn is_quiet(&self) -> bool {
        self.quiet_rounds >= QUIET_AFTER_ROUNDS
    }

    /// Whether the interval's round is due now (always, unless the master is quiet and its
    /// last round started less than `QUIET_INTERVAL_MS` ago).
    fn round_due(&self) -> bool {
        !self.is_quiet() || self.now_ms >= self.round_started_ms + QUIET_INTERVAL_MS.max(self.cfg.epoch_interval_ms)
    }

    fn maybe_start_round(&mut self, out: &mut Out) {
        if self.round != Round::Idle || self.phase != Phase::Running || !self.is_master() {
            return;
        }
        if !self.cluster.live_nodes().iter().all(|n| self.started_nodes.contains(n)) {
            return;
        }
        let new = self.current_epoch + 1;
        let tcs = self.all(Block::Tc);
        for &t in &tcs {
            out.send(t, Signal::EpochPrepare { from: self.addr, epoch: new });
        }
        self.round_started_ms = self.now_ms;
        self.round = Round::Prepare { new, waiting: tcs, max_current: 0 };
    }

    fn prepared(&mut self, from: Addr, epoch: u64, current: u64, out: &mut Out) {
        let Round::Prepare { new, waiting, max_current } = &mut self.round else { return };
        if *new != epoch {
            return; // an answer to a round a previous master started
        }
        waiting.remove(&from);
        *max_current = (*max_current).max(current);
        self.advance(out);
    }

    fn tc_finished(&mut self, from: Addr, epoch: u64, newest_commit: u64, out: &mut Out) {
        let Round::Finish { old, waiting, mark } = &mut self.round else { return };
        // Reports are cumulative: every epoch up to `epoch` is finished at that tc.
        if epoch >= *old {
            waiting.remove(&from);
        }
        if newest_commit > self.marked_epoch {
            *mark = true;
        }
        self.advance(out);
    }

    fn flushed(&mut self, from: Addr, epoch: u64, synced_lsn: u64, max_epoch: u64, out: &mut Out) {
        let Round::Flush { old, waiting, max_epoch: m, synced, .. } = &mut self.round else { return };
        if *old != epoch {
            return;
        }
        waiting.remove(&from);
        synced.insert(from, synced_lsn);
        *m = (*m).max(max_epoch);
        self.advance(out);
    }

    fn saved(&mut self, from: Addr, epoch: u64, out: &mut Out) {
        let Some((work, waiting)) = self.save_running.as_mut() else { return };
        if work.epoch == epoch {
            waiting.remove(&from.node);
        }
        self.save_step(out);
    }

    /// Starts the next system-file save when one is due.
    fn maybe_save(&mut self, out: &mut Out) {
        if self.save_running.is_some() || !self.is_master() {
            return;
        }
        let Some(work) = &self.save_next else { return };
        let new_node = !work.nodes.is_subset(&self.saved_nodes);
        if !new_node && self.now_ms < self.last_save_ms + SAVE_EVERY_MS {
            return;
        }
        let work = self.save_next.take().expect("checked");
        self.last_save_ms = self.now_ms;
        for &node in &work.nodes {
            let lsns: Vec<u64> = work
                .synced
                .range(Addr::new(node, Block::Ldm(0))..=Addr::new(node, Block::Ldm(u16::MAX)))
                .map(|(_, &l)| l)
                .collect();
            let sig = Signal::EpochSave { from: self.addr, epoch: work.epoch, synced_lsn: lsns };
            out.send(Addr::new(node, Block::Dist), sig);
        }
        let waiting = work.nodes.clone();
        self.save_running = Some((work, waiting));
        self.save_step(out);
    }

    /// Ends the running save once every node answered: the nodes that saved learn the epoch is
    /// durable for their checkpoints.
    fn save_step(&mut self, out: &mut Out) {
        if !self.save_running.as_ref().is_some_and(|(_, w)| w.is_empty()) {
            return;
        }
        let (work, _) = self.save_running.take().expect("checked");
        self.saved_epoch = work.epoch;
        self.saved_nodes = work.nodes;
        self.saved_durable(work.epoch, out);
        self.maybe_save(out);
    }

    /// Moves the running round on once every live participant has answered its step.
    fn advance(&mut self, out: &mut Out) {
        loop {
            match &mut self.round {
                Round::Prepare { new, waiting, max_current } if waiting.is_empty() => {
                    // Every tc has closed its gate: switch all to an epoch newer than any given out.
                    let new = (*new).max(*max_current + 1);
                    let old = new - 1;
                    assert!(new > self.current_epoch, "invariant: epochs only grow (master's epoch {new})");
                    self.current_epoch = new;
                    let tcs = self.all(Block::Tc);
                    let quiet = self.is_quiet();
                    for &t in &tcs {
                        out.send(t, Signal::EpochCommit { from: self.addr, epoch: new, quiet });
                    }
                    self.round = Round::Finish { old, waiting: tcs, mark: false };
                }
                Round::Finish { old, waiting, mark } if waiting.is_empty() && self.takeovers.is_empty() => {
                    let old = *old;
                    // Taken-over commits keep the epochs their coordinators gave them: mark.
                    let mark = *mark || self.takeover_unmarked;
                    let ldms = self.all(Block::Ldm);
                    for &l in &ldms {
                        out.send(l, Signal::EpochFlush { from: self.addr, epoch: old, mark });
                    }
                    self.round = Round::Flush { old, waiting: ldms, max_epoch: 0, synced: BTreeMap::new(), mark };
                }
                Round::Flush { old, waiting, max_epoch, synced, mark } if waiting.is_empty() => {
                    let (old, m, mark) = (*old, *max_epoch, *mark);
                    let synced = std::mem::take(synced);
                    if mark {
                        self.marked_epoch = old;
                        self.takeover_unmarked = false;
                    }
                    // Exactly the nodes whose ldms flushed count: a node that joined the chains
                    // after the flush began has no synced position (nor mark) in this round,
                    // and one that failed since has none to save.
                    let live = self.cluster.live_nodes();
                    let nodes: BTreeSet<NodeId> = synced.keys().map(|a| a.node).filter(|n| live.contains(n)).collect();
                    if m <= self.saved_epoch && nodes.is_subset(&self.saved_nodes) {
                        // Nothing new anywhere since the last save: the system files cover it.
                        self.save_next = None;
                        let all_started = live.iter().all(|&n| self.cluster.state_of(n) == NodeState::Started);
                        if !mark && all_started && self.wanted_epoch <= old {
                            self.quiet_rounds = self.quiet_rounds.saturating_add(1);
                        } else {
                            self.quiet_rounds = 0;
                        }
                        return self.made_durable(old, &nodes, true, out);
                    }
                    self.quiet_rounds = 0;
                    self.save_next = Some(SaveWork { epoch: old, synced, nodes: nodes.clone() });
                    self.made_durable(old, &nodes, false, out);
                    return self.maybe_save(out);
                }
                _ => return,
            }
        }
    }

    /// A new cluster map: failed nodes no longer answer any step of the running round, and
    /// epochs wait until their transactions are taken over. When the master itself failed, the
    /// next master starts the epoch protocol afresh: its first round learns the newest epoch any
    /// tc gave out (`EpochPrepared::current`) and moves every tc past it, which closes whatever
    /// round the old master left half done.
    fn cluster_map(&mut self, state: Arc<ClusterState>, out: &mut Out) {
        if state.version <= self.cluster.version {
            return;
        }
        let old = std::mem::replace(&mut self.cluster, state);
        let me = self.addr.node;
        // Membership moved: rounds at the normal interval until things are quiet again.
        self.quiet_rounds = 0;
        if self.phase == Phase::Running && old.master() != self.cluster.master() {
            self.announce_started(out);
        }
        // A node joins the chains only after its local start (it asked for Copying then): the
        // master need not hear its DistStarted, which may have gone to a node that was not (yet)
        // master when it was sent.
        for (&n, s) in &self.cluster.nodes {
            if s.state == NodeState::Copying && old.state_of(n) != NodeState::Copying {
                self.started_nodes.insert(n);
            }
        }
        if old.state_of(me) != NodeState::Copying && self.cluster.state_of(me) == NodeState::Copying {
            // In the write chains now: fetch every partition from its primary.
            for &l in &self.ldms {
                out.send(l, Signal::StartCopy);
            }
            self.copying = Some(self.ldms.len());
        }
        let failed: BTreeSet<NodeId> = self.cluster.failed_since(&old).into_iter().collect();
        // A failed node tells again once it has restarted (its next incarnation).
        self.started_nodes.retain(|n| !failed.contains(n));
        // Takeovers that finished before this map reached the dist (its tc saw it first).
        let version = self.cluster.version;
        let done: BTreeSet<NodeId> =
            self.done_ahead.iter().filter(|(v, _)| *v <= version).flat_map(|(_, n)| n.iter().copied()).collect();
        self.done_ahead.retain(|(v, _)| *v > version);
        if failed.is_empty() {
            return;
        }
        if !self.is_master() {
            self.round = Round::Idle;
            return;
        }
        if old.master() == Some(me) {
            match &mut self.round {
                Round::Prepare { waiting, .. } | Round::Finish { waiting, .. } => {
                    waiting.retain(|a| !failed.contains(&a.node))
                }
                Round::Flush { waiting, synced, .. } => {
                    // A failed node's positions go too: if it restarts and rejoins before this
                    // round ends, the new incarnation has not flushed in it (and must not be
                    // sent a save with some of its ldms' positions from its previous life).
                    waiting.retain(|a| !failed.contains(&a.node));
                    synced.retain(|a, _| !failed.contains(&a.node));
                }
                Round::Idle => {}
            }
            if let Some(w) = self.save_next.as_mut() {
                w.nodes.retain(|n| !failed.contains(n));
                w.synced.retain(|a, _| !failed.contains(&a.node));
            }
            if let Some((w, waiting)) = self.save_running.as_mut() {
                w.nodes.retain(|n| !failed.contains(n));
                waiting.retain(|n| !failed.contains(n));
            }
            self.saved_nodes.retain(|n| !failed.contains(n));
            self.takeovers.extend(failed.difference(&done));
            self.takeover_unmarked = true;
        } else {
            self.round = Round::Idle;
            self.saved_epoch = 0;
            self.saved_nodes.clear();
            self.marked_epoch = 0;
            self.save_next = None;
            self.save_running = None;
            // Only the nodes that told this dist they started (now or when the master changed):
            // a live node may still be recovering in a system restart, and an epoch save must
            // not reach it before it has started.
            // The same set the takeover tc on this node takes over.
            self.takeovers = self
                .cluster
                .nodes
                .iter()
                .filter(|(n, s)| !s.state.in_chains() && !done.contains(n))
                .map(|(&n, _)| n)
                .collect();
        }
        self.save_step(out);
        self.advance(out);
    }

    /// `EpochDurable(epoch)` to these blocks of the live ones of `nodes` (not this dist).
    fn tell_durable(&self, epoch: u64, nodes: &BTreeSet<NodeId>, tcs: bool, rest: bool, out: &mut Out) {
        let n = self.cluster.config.ldm_workers;
        let live = self.cluster.live_nodes();
        let targets: BTreeSet<Addr> = nodes
            .iter()
            .filter(|node| live.contains(node))
            .flat_map(|&node| {
                let t = if tcs { 0..n } else { 0..0 };
                let r = if rest { 0..n } else { 0..0 };
                let d = if rest { Some(Addr::new(node, Block::Dist)) } else { None };
                t.map(move |i| Addr::new(node, Block::Tc(i)))
                    .chain(r.map(move |i| Addr::new(node, Block::Ldm(i))))
                    .chain(d)
            })
            .filter(|&a| a != self.addr)
            .collect();
        for a in targets {
            out.send(a, Signal::EpochDurable { epoch });
        }
    }

    /// A saved epoch: the ldms and dists of the nodes whose system files hold it (only they
    /// may count on it for their checkpoints) learn it.
    fn saved_durable(&mut self, epoch: u64, out: &mut Out) {
        self.durable_epoch = self.durable_epoch.max(epoch);
        let nodes = self.saved_nodes.clone();
        self.tell_durable(epoch, &nodes, false, true, out);
    }

    /// A flushed epoch: the tcs of the nodes that flushed it acknowledge its durable commits
    /// (and, when the system files already cover it, `covered`, the ldms and dists learn it too).
    fn made_durable(&mut self, epoch: u64, nodes: &BTreeSet<NodeId>, covered: bool, out: &mut Out) {
        debug_assert!(epoch < self.current_epoch, "invariant: only a closed epoch is flushed");
        debug_assert!(
            nodes.iter().all(|n| self.cluster.state_of(*n).in_chains()),
            "invariant: an epoch is durable on nodes in the write chains"
        );
        self.flushed_epoch = self.flushed_epoch.max(epoch);
        if covered {
            self.durable_epoch = self.durable_epoch.max(epoch);
        }
        self.tell_durable(epoch, nodes, true, covered, out);
        // The control plane keeps the newest durable epoch, a lower bound of a system restart's
        // cut: only an epoch every live node's disk marks (`recovery::node_epoch`). An unmarked
        // epoch (no commit anywhere since the last mark) is not: a node whose disk holds it
        // cannot show it, and a cut above its node epoch would recover the nodes to different
        // epochs (the simulator running the control plane's own state machine found this).
        if self.marked_epoch > 0 {
            debug_assert!(self.marked_epoch <= epoch, "a marked epoch is a flushed one");
            out.control.push(ControlReq::DurableEpoch(self.marked_epoch));
        }
        self.round = Round::Idle;
        if self.wanted_epoch > epoch {
            // A durable commit came into the epoch given out meanwhile: close it at once.
            self.maybe_start_round(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::Out;

    fn run(d: &mut Dist, now: u64, sig: Signal) -> Out {
        let mut out = Out::default();
        d.handle(now, sig, &mut out);
        out
    }

    fn sent(out: &Out) -> Vec<(Addr, &Signal)> {
        out.signals.iter().map(|(a, s)| (*a, s)).collect()
    }

    /// A one-node master (tc, ldm and dist of node 1) that has started.
    fn started_master() -> (Dist, Addr, Addr, Addr) {
        let cfg = tern_types::cluster::ClusterConfig {
            ldm_workers: 1,
            ..crate::NodeConfig::new(1, 1, 1 << 20).cluster.config.clone()
        };
        let cluster = Arc::new(ClusterState::all_started(cfg));
        let (me, tc, ldm) = (Addr::new(1, Block::Dist), Addr::new(1, Block::Tc(0)), Addr::new(1, Block::Ldm(0)));
        let mut d = Dist::new(me, DistConfig::default(), cluster, vec![tc], vec![ldm], 0, vec![]);
        run(&mut d, 1, Signal::Start);
        let out = run(&mut d, 1, Signal::LdmReady { from: ldm, synced_lsn: 0 });
        let [(_, IoReq::SaveSysfile { token, .. })] = &out.io[..] else { panic!("start-up save: {:?}", out.io) };
        run(&mut d, 2, Signal::IoDone { token: *token, result: Ok(()) });
        assert!(d.is_running());
        (d, me, tc, ldm)
    }

    /// The rest of a round the master started (`prepare`: what it sent): the tc answers every
    /// step, `newest_commit` as given; returns the closed epoch, whether the tcs were told the
    /// new one is quiet, whether the flush marked, and the flush's outputs.
    fn finish_round(
        d: &mut Dist,
        now: u64,
        prepare: &Out,
        tc: Addr,
        ldm: Addr,
        newest_commit: u64,
    ) -> (u64, bool, bool, Out) {
        let Some(&(_, &Signal::EpochPrepare { epoch: new, .. })) = sent(prepare).iter().find(|(a, _)| *a == tc) else {
            panic!("a round starts: {:?}", prepare.signals)
        };
        let out = run(d, now, Signal::EpochPrepared { from: tc, epoch: new, current: new - 1 });
        let Some(&(_, &Signal::EpochCommit { quiet, .. })) = sent(&out).iter().find(|(a, _)| *a == tc) else {
            panic!("the new epoch: {:?}", out.signals)
        };
        let old = new - 1;
        let out = run(d, now, Signal::EpochTcFinished { from: tc, epoch: old, newest_commit });
        let [(to, Signal::EpochFlush { epoch, mark, .. })] = &sent(&out)[..] else { panic!("{:?}", out.signals) };
        assert_eq!((*to, *epoch), (ldm, old));
        let mark = *mark;
        let out = run(
            d,
            now,
            Signal::EpochFlushed { from: ldm, epoch: old, synced_lsn: 100 * now, max_epoch: newest_commit },
        );
        (old, quiet, mark, out)
    }

    /// A one-node master through start-up and two epoch rounds: the tcs hear an epoch is durable
    /// right after the ldms flushed (one sync: the flush marks the redo), the system file is saved
    /// after that, and only its save tells the ldms; a round without commits does not mark.
    #[test]
    fn durable_is_announced_after_the_marked_flush_and_the_save_follows() {
        let (mut d, me, tc, ldm) = started_master();
        let round = |d: &mut Dist, now: u64, newest_commit: u64| -> (u64, bool, Out) {
            let prepare = run(d, now, Signal::Tick);
            let (old, _, mark, out) = finish_round(d, now, &prepare, tc, ldm, newest_commit);
            (old, mark, out)
        };

        // Commits in the first epoch: the flush marks; the tc hears at once, the ldm does not yet.
        let (old, mark, out) = round(&mut d, 200, 1);
        assert!(mark, "an epoch with commits is marked");
        let signals = sent(&out);
        assert!(signals.iter().any(|(a, s)| *a == tc && matches!(s, Signal::EpochDurable { epoch } if *epoch == old)));
        assert!(!signals.iter().any(|(a, s)| *a == ldm && matches!(s, Signal::EpochDurable { .. })));
        // The node was never saved: its save goes out at once, and its end tells the ldm.
        let Some((_, Signal::EpochSave { epoch, synced_lsn, .. })) = signals.iter().find(|(a, _)| *a == me) else {
            panic!("a save: {:?}", out.signals)
        };
        assert_eq!((*epoch, synced_lsn.clone()), (old, vec![20_000]));
        let out = run(&mut d, 201, Signal::EpochSave { from: me, epoch: old, synced_lsn: vec![20_000] });
        let [(_, IoReq::SaveSysfile { token, .. })] = &out.io[..] else { panic!("{:?}", out.io) };
        let out = run(&mut d, 202, Signal::IoDone { token: *token, result: Ok(()) });
        let [(to, Signal::EpochSaved { .. })] = &sent(&out)[..] else { panic!("{:?}", out.signals) };
        assert_eq!(*to, me);
        let out = run(&mut d, 202, Signal::EpochSaved { from: me, epoch: old });
        assert!(
            sent(&out).iter().any(|(a, s)| *a == ldm && matches!(s, Signal::EpochDurable { epoch } if *epoch == old))
        );
        assert_eq!(d.durable_epoch(), old);

        // No commit since: no mark, and nothing new to save.
        let (_, mark, out) = round(&mut d, 400, 1);
        assert!(!mark, "an epoch without commits needs no mark");
        assert!(!sent(&out).iter().any(|(_, s)| matches!(s, Signal::EpochSave { .. })));
    }

    /// An idle master slows its rounds to the quiet interval after `QUIET_AFTER_ROUNDS` empty
    /// ones and says so in `EpochCommit`; the first commit in a quiet epoch (`EpochBusy`) brings
    /// the normal interval back at once.
    #[test]
    fn an_idle_master_runs_quiet_rounds_until_a_tc_commits() {
        let (mut d, me, tc, ldm) = started_master();
        let interval = DistConfig::default().epoch_interval_ms;
        // A round with a commit (and the node's first save), then empty rounds.
        let prepare = run(&mut d, 100, Signal::Tick);
        let (old, _, mark, _) = finish_round(&mut d, 100, &prepare, tc, ldm, 1);
        assert!(mark);
        let out = run(&mut d, 101, Signal::EpochSave { from: me, epoch: old, synced_lsn: vec![10_000] });
        let [(_, IoReq::SaveSysfile { token, .. })] = &out.io[..] else { panic!("{:?}", out.io) };
        run(&mut d, 102, Signal::IoDone { token: *token, result: Ok(()) });
        run(&mut d, 102, Signal::EpochSaved { from: me, epoch: old });
        let mut now = 100;
        for i in 0..QUIET_AFTER_ROUNDS {
            now += interval;
            let prepare = run(&mut d, now, Signal::Tick);
            let (_, quiet, mark, _) = finish_round(&mut d, now, &prepare, tc, ldm, 1);
            assert!(!quiet && !mark, "round {i} of the normal interval");
        }
        // Quiet now: ticks start no round until the quiet interval has passed since the last.
        let last = now;
        while now + interval < last + QUIET_INTERVAL_MS {
            now += interval;
            let out = run(&mut d, now, Signal::Tick);
            assert!(!sent(&out).iter().any(|(_, s)| matches!(s, Signal::EpochPrepare { .. })), "at {now}");
        }
        now = last + QUIET_INTERVAL_MS;
        let prepare = run(&mut d, now, Signal::Tick);
        let (_, quiet, _, _) = finish_round(&mut d, now, &prepare, tc, ldm, 1);
        assert!(quiet, "the epoch opened by a quiet round says so");
        // A commit in it: the next round is due at the normal interval, and starts then.
        let out = run(&mut d, now + 5, Signal::EpochBusy { from: tc });
        assert!(!sent(&out).iter().any(|(_, s)| matches!(s, Signal::EpochPrepare { .. })), "not before the interval");
        now += interval;
        let prepare = run(&mut d, now, Signal::Tick);
        let (_, quiet, mark, _) = finish_round(&mut d, now, &prepare, tc, ldm, 2 + QUIET_AFTER_ROUNDS as u64);
        assert!(!quiet && mark, "busy again: the normal interval, and the commit's epoch is marked");
        // A busy message after the interval has passed starts the round at once.
        let out = run(&mut d, now + interval + 30, Signal::EpochBusy { from: tc });
        assert!(sent(&out).iter().any(|(_, s)| matches!(s, Signal::EpochPrepare { .. })));
    }
}
