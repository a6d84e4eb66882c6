//! A data node's side of membership, as two pure state machines driven by the caller's clock
//! (milliseconds of a monotonic clock): the same code runs in a data node process (`tern`'s
//! `member`, one thread each, calling the management nodes) and in the simulator (its clock,
//! its management nodes).
//!
//! * `Heart`: heartbeats every `heartbeat_ms`; a reply's lease counts from when its heartbeat
//!   was *sent*; every newer cluster map goes to the node's blocks; the node fences itself (stops
//!   at once) when the cluster declared it failed, the cluster is down, a system restart made it
//!   a full replica while it booted to copy, or its lease lapsed and was not renewed within a
//!   failure timeout. A lapsed lease alone is no reason to stop: the node, the management nodes
//!   or the whole host may only not have been scheduled, and the node's tcs refuse clients by
//!   their own clock meanwhile.
//! * `Work`: the blocks' requests, one call at a time, in rounds: state changes in order (a
//!   refused one fences the node), reorganisations, partition-move reports, the master's catalog
//!   proposals (refused: the management nodes' catalog is fetched and given to the dict), the
//!   durable epoch (newest only, at most once a second), and the master's fetch of a catalog it
//!   has not seen. A call that cannot reach the management nodes ends its kind of work for the
//!   round; the next round retries it.
//!
//! Invariants (asserted): the known map version only grows; a fenced machine does nothing more;
//! a lease only moves forward; the work machine has at most one call in flight.

use crate::state::Command;
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use tern_types::Catalog;
use tern_types::cluster::{ClusterState, NodeId, NodeState};

/// How often the durable epoch is reported (ms): the control plane's durable epoch is only a
/// lower bound of a system restart's cut, so it may lag; a proposal per epoch kept the
/// management nodes busy on an idle cluster.
pub const DURABLE_REPORT_EVERY_MS: u64 = 1_000;

/// What the heartbeat machine learns for the work machine (a process shares it between its two
/// threads).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Learned {
    /// The master data node in the newest map: only the master's dict proposes catalogs and
    /// learns of one it never saw.
    pub master: Option<NodeId>,
    /// The catalog version the management nodes hold, as the newest heartbeat reply said.
    pub mgm_catalog: Option<u64>,
    /// This node asked to become `Started` (after its copy), before the map showing it.
    pub proposed_started: bool,
}

/// The node a heartbeat machine serves.
#[derive(Debug, Clone)]
pub struct HeartConfig {
    pub node: NodeId,
    pub incarnation: u32,
    pub heartbeat_ms: u64,
    /// A lapsed lease not renewed within it stops the node.
    pub failure_timeout_ms: u64,
    /// Booted by a system restart (from its disk, `Started`); else the node copies and becomes
    /// `Started` only by its own request.
    pub booted_started: bool,
    /// The map version the node booted with.
    pub known_version: u64,
}

/// A heartbeat's reply.
#[derive(Debug, Clone)]
pub struct Beat {
    /// A lease was granted, for `lease_ms` from when the heartbeat was sent.
    pub granted: bool,
    pub lease_ms: u64,
    /// An operator asked this node to stop.
    pub stop: bool,
    /// The catalog version the management nodes hold (0: none).
    pub catalog_version: u64,
    /// The cluster map, when newer than the version the heartbeat named.
    pub state: Option<ClusterState>,
}

/// What the heartbeat machine asks of its driver.
#[derive(Debug, Clone, PartialEq)]
pub enum HeartAction {
    /// Send a heartbeat now, naming the map version known, and answer `on_reply` / `on_failed`.
    Beat { known_version: u64 },
    /// The node's tcs may serve clients until then (the driver's clock).
    Lease { until_ms: u64 },
    /// The lease had lapsed this long and was renewed: the node serves again.
    Renewed { lapsed_ms: u64 },
    /// The lease lapsed: the tcs serve no client until it is renewed.
    Lapsed,
    /// A newer map for the node's blocks.
    Publish(Arc<ClusterState>),
    /// The map's membership (node states, incarnations, cluster down) changed: worth a log line.
    Membership(Arc<ClusterState>),
    /// Stop the node at once, for this reason.
    Fence(String),
    /// An operator asked the node to stop in order (as SIGTERM).
    RequestStop,
}

/// Node states and incarnations, and whether the cluster is down.
type Membership = (Vec<(NodeId, NodeState, u32)>, bool);

/// The heartbeat machine.
#[derive(Debug, Clone)]
pub struct Heart {
    cfg: HeartConfig,
    known_version: u64,
    lease_until: Option<u64>,
    /// Since when the lease has lapsed.
    lapsed: Option<u64>,
    next_beat: u64,
    /// When the heartbeat in flight was sent.
    sent_at: Option<u64>,
    published: Option<Membership>,
    stop_asked: bool,
    fenced: bool,
}

impl Heart {
    pub fn new(cfg: HeartConfig, now: u64) -> Heart {
        Heart {
            known_version: cfg.known_version,
            cfg,
            lease_until: None,
            lapsed: None,
            next_beat: now,
            sent_at: None,
            published: None,
            stop_asked: false,
            fenced: false,
        }
    }

    pub fn known_version(&self) -> u64 {
        self.known_version
    }

    pub fn fenced(&self) -> bool {
        self.fenced
    }

    fn fence(&mut self, why: &str, out: &mut Vec<HeartAction>) {
        self.fenced = true;
        out.push(HeartAction::Fence(why.to_string()));
    }

    /// What is due at `now`: a heartbeat, a lapse of the lease, the fence of a lapsed lease not
    /// renewed within a failure timeout. `leaving`: the node stops in order (no fence).
    pub fn tick(&mut self, now: u64, leaving: bool) -> Vec<HeartAction> {
        let mut out = Vec::new();
        if self.fenced {
            return out;
        }
        if now >= self.next_beat && self.sent_at.is_none() {
            self.next_beat = now + self.cfg.heartbeat_ms;
            self.sent_at = Some(now);
            out.push(HeartAction::Beat { known_version: self.known_version });
        }
        if !leaving && self.lapsed.is_none() && self.lease_until.is_some_and(|t| now >= t) {
            self.lapsed = Some(now);
            out.push(HeartAction::Lapsed);
        }
        if !leaving && self.lapsed.is_some_and(|t| now.saturating_sub(t) >= self.cfg.failure_timeout_ms) {
            self.fence("lost contact with the management nodes (lease expired and not renewed)", &mut out);
        }
        out
    }

    /// The heartbeat in flight could not be answered (the next one is due as planned).
    pub fn on_failed(&mut self) {
        self.sent_at = None;
    }

    /// The reply to the heartbeat in flight, arrived at `now`.
    pub fn on_reply(&mut self, now: u64, beat: Beat, leaving: bool, learned: &mut Learned) -> Vec<HeartAction> {
        let mut out = Vec::new();
        let Some(sent) = self.sent_at.take() else { return out };
        if self.fenced {
            return out;
        }
        if beat.granted {
            let until = sent + beat.lease_ms;
            if self.lease_until.is_none_or(|t| until >= t) {
                self.lease_until = Some(until);
                // The tcs serve clients until then, by their own clock.
                out.push(HeartAction::Lease { until_ms: until });
            }
            if let Some(since) = self.lapsed.take() {
                out.push(HeartAction::Renewed { lapsed_ms: now.saturating_sub(since) });
            }
        }
        if let Some(st) = &beat.state {
            learned.master = st.master();
        }
        learned.mgm_catalog = Some(beat.catalog_version);
        if let Some(st) = beat.state
            && st.version > self.known_version
        {
            self.known_version = st.version;
            let me = self.cfg.node;
            let mine = st.nodes.get(&me).cloned();
            let gone =
                mine.as_ref().is_none_or(|s| s.incarnation != self.cfg.incarnation || s.state == NodeState::Down);
            if gone && leaving {
                // The orderly leave was applied: nothing more to hand the blocks.
                return out;
            }
            if gone {
                self.fence("the cluster declared this node failed", &mut out);
                return out;
            }
            if st.cluster_down {
                self.fence("the cluster is down (a node group lost all its replicas)", &mut out);
                return out;
            }
            if mine.is_some_and(|s| s.state == NodeState::Started)
                && !self.cfg.booted_started
                && !learned.proposed_started
            {
                // A system restart made this node a full replica while it booted to copy (it
                // recovered only its own disk, not to the cluster's cut).
                self.fence("the cluster started this node from its disk while it booted to copy", &mut out);
                return out;
            }
            let st = Arc::new(st);
            let membership: Membership =
                (st.nodes.iter().map(|(&n, s)| (n, s.state, s.incarnation)).collect(), st.cluster_down);
            if self.published.as_ref() != Some(&membership) {
                self.published = Some(membership);
                out.push(HeartAction::Membership(st.clone()));
            }
            // Every version (they move only with membership, catalog or operator changes):
            // blocks compare map versions across nodes.
            out.push(HeartAction::Publish(st));
        }
        if beat.stop && !leaving && !self.stop_asked {
            self.stop_asked = true;
            out.push(HeartAction::RequestStop);
        }
        out
    }

    /// When the machine next has something to do: the next heartbeat, the lease's end, the fence
    /// deadline of a lapsed lease.
    pub fn wake_at(&self, leaving: bool) -> u64 {
        let mut wake = self.next_beat;
        if let Some(t) = self.lease_until.filter(|_| self.lapsed.is_none() && !leaving) {
            wake = wake.min(t);
        }
        if let Some(t) = self.lapsed.filter(|_| !leaving) {
            wake = wake.min(t + self.cfg.failure_timeout_ms);
        }
        wake
    }
}

/// A partition move's report: the target holds the partition (`left` false), or the source
/// serves it no more (`left`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MoveReport {
    pub left: bool,
    pub table: u32,
    pub partition: u32,
}

/// A call of the management nodes the work machine asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    Propose(Command),
    /// The catalog the management nodes hold (answered `Done::Catalog`).
    FetchCatalog,
}

/// A call's success.
#[derive(Debug, Clone)]
pub enum Done {
    /// The proposal was committed (or fetch: the catalog).
    Committed,
    Catalog(Arc<Catalog>),
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The management nodes refused it (the state machine's reason).
    Rejected(String),
    /// No management node answered it (or the answer could not be used).
    Unavailable(String),
}

/// What the work machine tells its driver, besides the calls.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkAction {
    /// The catalog version was committed: the dict may write it to the data nodes.
    CatalogStored { version: u64 },
    /// The management nodes' catalog, for the dict (`refused`: the version they refused).
    MgmCatalog { catalog: Arc<Catalog>, refused: Option<u64> },
    /// Stop the node at once, for this reason.
    Fence(String),
}

/// What the round is at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    States,
    Reorganize,
    /// Move reports after this one (None: from the first).
    Moves(Option<MoveReport>),
    Catalog,
    Durable,
    MasterCatalog,
    Done,
}

/// The call in flight and what it was for.
#[derive(Debug, Clone)]
enum Pending {
    State(NodeState),
    Reorganize(u32),
    Move(MoveReport),
    Catalog(Arc<Catalog>),
    /// Fetching the catalog after `.0` was refused.
    Refused(Arc<Catalog>),
    Durable(u64),
    MasterCatalog,
}

/// The work machine.
#[derive(Debug, Clone)]
pub struct Work {
    node: NodeId,
    incarnation: u32,
    durable_sent: u64,
    durable_want: u64,
    durable_reported_at: Option<u64>,
    /// The catalog version the management nodes hold as far as this node's dict knows (it
    /// proposed or was given it).
    catalog_known: Option<u64>,
    /// A catalog the dict proposed that could not reach the management nodes: proposed again
    /// (idempotent) unless a newer one replaces it.
    catalog_want: Option<Arc<Catalog>>,
    catalog_new: Option<Arc<Catalog>>,
    states: VecDeque<NodeState>,
    /// Partition moves' reports not yet taken (retried; a refused one is stale — an older move,
    /// or another incarnation's — and dropped).
    moves: BTreeSet<MoveReport>,
    reorganize: BTreeSet<u32>,
    stage: Stage,
    pending: Option<Pending>,
    fenced: bool,
    left: bool,
}

impl Work {
    pub fn new(node: NodeId, incarnation: u32) -> Work {
        Work {
            node,
            incarnation,
            durable_sent: 0,
            durable_want: 0,
            durable_reported_at: None,
            catalog_known: None,
            catalog_want: None,
            catalog_new: None,
            states: VecDeque::new(),
            moves: BTreeSet::new(),
            reorganize: BTreeSet::new(),
            stage: Stage::Done,
            pending: None,
            fenced: false,
            left: false,
        }
    }

    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// The blocks' requests: state changes in order, the newest durable epoch, move reports,
    /// tables to reorganise, and the catalog the master's dict proposes (the newest replaces an
    /// older one not yet proposed).
    pub fn intake(
        &mut self,
        states: impl IntoIterator<Item = NodeState>,
        durable: u64,
        moves: impl IntoIterator<Item = MoveReport>,
        reorganize: impl IntoIterator<Item = u32>,
        catalog: Option<Arc<Catalog>>,
    ) {
        self.states.extend(states);
        self.durable_want = self.durable_want.max(durable);
        self.moves.extend(moves);
        self.reorganize.extend(reorganize);
        if catalog.is_some() {
            self.catalog_new = catalog;
        }
    }

    /// Starts a round of calls.
    pub fn begin_round(&mut self) {
        assert!(self.pending.is_none(), "a round begins with no call in flight");
        self.stage = Stage::States;
    }

    /// The round's next call (None: the round is done, or the machine fenced). `learned`: what
    /// the heartbeats said; a state change to `Started` is marked in it before it is proposed
    /// (the map that shows it may come first).
    pub fn next_call(&mut self, now: u64, learned: &mut Learned) -> Option<Call> {
        assert!(self.pending.is_none(), "one call at a time");
        if self.fenced {
            return None;
        }
        let (node, incarnation) = (self.node, self.incarnation);
        loop {
            match self.stage {
                Stage::States => match self.states.front() {
                    Some(&state) => {
                        if state == NodeState::Started {
                            learned.proposed_started = true;
                        }
                        self.pending = Some(Pending::State(state));
                        return Some(Call::Propose(Command::SetState { node, incarnation, state }));
                    }
                    None => self.stage = Stage::Reorganize,
                },
                Stage::Reorganize => match self.reorganize.first() {
                    Some(&table) => {
                        self.pending = Some(Pending::Reorganize(table));
                        return Some(Call::Propose(Command::Reorganize { table }));
                    }
                    None => self.stage = Stage::Moves(None),
                },
                Stage::Moves(after) => {
                    let next = match after {
                        None => self.moves.first().copied(),
                        Some(a) => self.moves.range(a..).find(|m| **m != a).copied(),
                    };
                    match next {
                        Some(r) => {
                            self.pending = Some(Pending::Move(r));
                            let (table, partition) = (r.table, r.partition);
                            return Some(Call::Propose(if r.left {
                                Command::MoveLeft { node, incarnation, table, partition }
                            } else {
                                Command::MoveCopied { node, incarnation, table, partition }
                            }));
                        }
                        None => self.stage = Stage::Catalog,
                    }
                }
                Stage::Catalog => {
                    self.stage = Stage::Durable;
                    if let Some(c) = self.catalog_new.take().or_else(|| self.catalog_want.take()) {
                        let mut bytes = Vec::new();
                        c.encode(&mut bytes);
                        let version = c.version;
                        self.pending = Some(Pending::Catalog(c));
                        return Some(Call::Propose(Command::SetCatalog { version, bytes }));
                    }
                }
                Stage::Durable => {
                    self.stage = Stage::MasterCatalog;
                    let due = self.durable_reported_at.is_none_or(|t| now >= t + DURABLE_REPORT_EVERY_MS);
                    if self.durable_want > self.durable_sent && due {
                        self.durable_reported_at = Some(now);
                        self.pending = Some(Pending::Durable(self.durable_want));
                        return Some(Call::Propose(Command::SetDurableEpoch { epoch: self.durable_want }));
                    }
                }
                Stage::MasterCatalog => {
                    self.stage = Stage::Done;
                    // The master learns of a catalog it did not propose (an earlier master's
                    // change, or theirs is older than the one on disk here).
                    if learned.master == Some(node)
                        && let Some(v) = learned.mgm_catalog
                        && self.catalog_known != Some(v)
                        && self.catalog_want.is_none()
                    {
                        self.pending = Some(Pending::MasterCatalog);
                        return Some(Call::FetchCatalog);
                    }
                }
                Stage::Done => return None,
            }
        }
    }

    /// The outcome of the call in flight.
    pub fn on_result(&mut self, result: Result<Done, CallError>) -> Vec<WorkAction> {
        let pending = self.pending.take().expect("a call in flight");
        let mut out = Vec::new();
        let refused = match &result {
            Err(CallError::Rejected(r)) => Some(r.clone()),
            _ => None,
        };
        let unavailable = matches!(result, Err(CallError::Unavailable(_)));
        match pending {
            Pending::State(state) => {
                if let Some(r) = refused {
                    self.fenced = true;
                    out.push(WorkAction::Fence(format!("the control plane refused state {}: {r}", state.name())));
                    return out;
                }
                if unavailable {
                    self.stage = Stage::Reorganize;
                } else {
                    let done = self.states.pop_front();
                    debug_assert_eq!(done, Some(state), "state changes in order");
                }
            }
            Pending::Reorganize(table) => {
                if unavailable {
                    self.stage = Stage::Moves(None);
                } else {
                    self.reorganize.remove(&table);
                }
            }
            Pending::Move(r) => {
                if unavailable {
                    self.stage = Stage::Catalog;
                } else {
                    self.moves.remove(&r);
                    self.stage = Stage::Moves(Some(r));
                }
            }
            Pending::Catalog(c) => match result {
                Ok(_) => {
                    self.catalog_known = Some(c.version);
                    out.push(WorkAction::CatalogStored { version: c.version });
                }
                Err(CallError::Rejected(_)) => {
                    // They hold another catalog: fetch it for the dict (next call).
                    self.pending = Some(Pending::Refused(c));
                    return out;
                }
                Err(CallError::Unavailable(_)) => self.catalog_want = Some(c),
            },
            Pending::Refused(c) => match result {
                Ok(Done::Catalog(theirs)) => {
                    self.catalog_known = Some(theirs.version);
                    out.push(WorkAction::MgmCatalog { catalog: theirs, refused: Some(c.version) });
                }
                _ => self.catalog_want = Some(c),
            },
            Pending::Durable(e) => {
                if result.is_ok() {
                    self.durable_sent = self.durable_sent.max(e);
                }
            }
            Pending::MasterCatalog => {
                if let Ok(Done::Catalog(theirs)) = result {
                    self.catalog_known = Some(theirs.version);
                    out.push(WorkAction::MgmCatalog { catalog: theirs, refused: None });
                }
            }
        }
        out
    }

    /// A call the machine asks for right after a result (a refused catalog's fetch), before the
    /// round goes on.
    pub fn follow_up(&self) -> Option<Call> {
        matches!(self.pending, Some(Pending::Refused(_))).then_some(Call::FetchCatalog)
    }

    /// An orderly stop: the newest durable epoch (the node has flushed its last epochs), then,
    /// when `leaving`, the leave from the write chains with the epoch its system file holds. Once.
    pub fn leave_calls(&mut self, durable: u64, leaving: bool, sysfile_epoch: u64) -> Vec<Command> {
        self.durable_want = self.durable_want.max(durable);
        let mut calls = Vec::new();
        if self.durable_want > self.durable_sent {
            calls.push(Command::SetDurableEpoch { epoch: self.durable_want });
        }
        if leaving && !self.left {
            self.left = true;
            calls.push(Command::Leave { node: self.node, incarnation: self.incarnation, sysfile_epoch });
        }
        calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_types::cluster::{ClusterConfig, DataNodeSpec, MgmdSpec};

    fn cluster(nodes: u16) -> ClusterState {
        ClusterState::all_started(ClusterConfig {
            replicas: 2,
            data_nodes: (1..=nodes)
                .map(|id| DataNodeSpec { id, host: "h".into(), port: 0, location_domain: 0 })
                .collect(),
            mgmds: vec![MgmdSpec { id: 65, host: "h".into(), port: 0 }],
            ldm_workers: 1,
            epoch_interval_ms: 20,
            heartbeat_interval_ms: 100,
            failure_timeout_ms: 1000,
        })
    }

    fn heart(booted_started: bool) -> Heart {
        let cfg = HeartConfig {
            node: 1,
            incarnation: 1,
            heartbeat_ms: 100,
            failure_timeout_ms: 1000,
            booted_started,
            known_version: 0,
        };
        Heart::new(cfg, 0)
    }

    fn beat(state: Option<ClusterState>) -> Beat {
        Beat { granted: true, lease_ms: 900, stop: false, catalog_version: 0, state }
    }

    #[test]
    fn a_lease_counts_from_the_heartbeat_sent_and_a_lapse_fences_only_after_a_failure_timeout() {
        let mut h = heart(true);
        let mut l = Learned::default();
        assert_eq!(h.tick(0, false), vec![HeartAction::Beat { known_version: 0 }]);
        // Nothing more while one is in flight.
        assert_eq!(h.tick(150, false), vec![]);
        assert_eq!(h.on_reply(200, beat(None), false, &mut l), vec![HeartAction::Lease { until_ms: 900 }]);
        assert_eq!(l.mgm_catalog, Some(0));
        // Heartbeats fail from here on: the lease lapses at 900, the node fences at 1900.
        assert_eq!(h.tick(200, false), vec![HeartAction::Beat { known_version: 0 }]);
        h.on_failed();
        assert_eq!(h.wake_at(false), 300);
        assert!(h.tick(899, false).iter().all(|a| matches!(a, HeartAction::Beat { .. })));
        h.on_failed();
        assert!(h.tick(900, false).contains(&HeartAction::Lapsed));
        h.on_failed();
        assert!(!h.tick(1899, false).iter().any(|a| matches!(a, HeartAction::Fence(_))));
        h.on_failed();
        let a = h.tick(1900, false);
        assert!(a.iter().any(|a| matches!(a, HeartAction::Fence(r) if r.contains("lease expired"))), "{a:?}");
        assert!(h.fenced());
        assert_eq!(h.tick(5000, false), vec![]);
    }

    #[test]
    fn a_renewal_ends_a_lapse_and_leaving_never_fences() {
        let mut h = heart(true);
        let mut l = Learned::default();
        h.tick(0, false);
        h.on_reply(10, beat(None), false, &mut l);
        h.tick(950, false);
        h.on_failed();
        assert!(h.lapsed.is_some());
        assert_eq!(h.tick(1050, false), vec![HeartAction::Beat { known_version: 0 }]);
        let a = h.on_reply(1060, beat(None), false, &mut l);
        assert_eq!(a, vec![HeartAction::Lease { until_ms: 1950 }, HeartAction::Renewed { lapsed_ms: 110 }]);
        // Leaving: a lapse does not fence.
        let mut h = heart(true);
        h.tick(0, true);
        h.on_reply(10, beat(None), true, &mut l);
        h.tick(5000, true);
        h.on_failed();
        assert!(!h.tick(9000, true).iter().any(|a| matches!(a, HeartAction::Fence(_))));
    }

    #[test]
    fn newer_maps_are_published_and_a_map_showing_this_node_failed_fences() {
        let mut h = heart(true);
        let mut l = Learned::default();
        let mut st = cluster(2);
        st.version = 3;
        st.nodes.get_mut(&1).unwrap().incarnation = 1;
        h.tick(0, false);
        let a = h.on_reply(5, beat(Some(st.clone())), false, &mut l);
        assert!(
            matches!(&a[..], [HeartAction::Lease { .. }, HeartAction::Membership(_), HeartAction::Publish(s)] if s.version == 3)
        );
        assert_eq!(h.known_version(), 3);
        assert_eq!(l.master, st.master());
        // An older or equal map is not published again.
        h.tick(100, false);
        assert_eq!(h.on_reply(105, beat(Some(st.clone())), false, &mut l), vec![HeartAction::Lease { until_ms: 1000 }]);
        // A new version with the same membership: published, not logged.
        st.version = 4;
        h.tick(200, false);
        let a = h.on_reply(205, beat(Some(st.clone())), false, &mut l);
        assert!(matches!(&a[..], [HeartAction::Lease { .. }, HeartAction::Publish(_)]), "{a:?}");
        st.version = 5;
        st.nodes.get_mut(&1).unwrap().state = NodeState::Down;
        h.tick(300, false);
        let a = h.on_reply(305, beat(Some(st.clone())), false, &mut l);
        assert!(matches!(a.last(), Some(HeartAction::Fence(r)) if r.contains("declared this node failed")), "{a:?}");
        // Leaving, the same map only ends the publishing.
        let mut h = heart(true);
        h.tick(0, true);
        assert_eq!(h.on_reply(5, beat(Some(st)), true, &mut l), vec![HeartAction::Lease { until_ms: 900 }]);
    }

    #[test]
    fn a_node_booted_to_copy_fences_when_a_system_restart_started_it() {
        let mut h = heart(false);
        let mut l = Learned::default();
        let mut st = cluster(2);
        st.version = 2;
        st.nodes.get_mut(&1).unwrap().incarnation = 1;
        h.tick(0, false);
        let a = h.on_reply(5, beat(Some(st.clone())), false, &mut l);
        assert!(matches!(a.last(), Some(HeartAction::Fence(r)) if r.contains("booted to copy")), "{a:?}");
        // Unless it asked for Started itself.
        let mut h = heart(false);
        l.proposed_started = true;
        h.tick(0, false);
        assert!(matches!(h.on_reply(5, beat(Some(st)), false, &mut l).last(), Some(HeartAction::Publish(_))));
    }

    #[test]
    fn an_operators_stop_is_asked_once() {
        let mut h = heart(true);
        let mut l = Learned::default();
        h.tick(0, false);
        let b = Beat { stop: true, ..beat(None) };
        assert!(h.on_reply(5, b.clone(), false, &mut l).contains(&HeartAction::RequestStop));
        h.tick(100, false);
        assert!(!h.on_reply(105, b, false, &mut l).contains(&HeartAction::RequestStop));
    }

    fn run_round(
        w: &mut Work,
        now: u64,
        l: &mut Learned,
        mut answer: impl FnMut(&Call) -> Result<Done, CallError>,
    ) -> (Vec<Call>, Vec<WorkAction>) {
        let (mut calls, mut acts) = (Vec::new(), Vec::new());
        w.begin_round();
        while let Some(c) = w.next_call(now, l) {
            let r = answer(&c);
            calls.push(c);
            acts.extend(w.on_result(r));
            while let Some(f) = w.follow_up() {
                let r = answer(&f);
                calls.push(f);
                acts.extend(w.on_result(r));
            }
        }
        (calls, acts)
    }

    #[test]
    fn state_changes_go_in_order_and_a_refused_one_fences() {
        let mut w = Work::new(2, 7);
        let mut l = Learned::default();
        w.intake([NodeState::Copying, NodeState::Started], 0, [], [], None);
        // Unreachable: the first is tried once this round, the rest of the round goes on.
        let (calls, _) = run_round(&mut w, 0, &mut l, |_| Err(CallError::Unavailable("down".into())));
        assert_eq!(
            calls,
            vec![Call::Propose(Command::SetState { node: 2, incarnation: 7, state: NodeState::Copying })]
        );
        let (calls, _) = run_round(&mut w, 10, &mut l, |_| Ok(Done::Committed));
        assert_eq!(calls.len(), 2);
        assert!(l.proposed_started, "Started is marked before it is proposed");
        w.intake([NodeState::Started], 0, [], [], None);
        let (_, acts) = run_round(&mut w, 20, &mut l, |_| Err(CallError::Rejected("no".into())));
        assert!(matches!(&acts[..], [WorkAction::Fence(r)] if r.contains("refused state started")), "{acts:?}");
        assert!(w.fenced());
        w.begin_round();
        assert_eq!(w.next_call(30, &mut l), None);
    }

    #[test]
    fn move_reports_are_retried_until_taken_or_refused() {
        let mut w = Work::new(1, 1);
        let mut l = Learned::default();
        let a = MoveReport { left: false, table: 5, partition: 0 };
        let b = MoveReport { left: true, table: 5, partition: 1 };
        w.intake([], 0, [a, b], [9], None);
        let mut n = 0;
        let (calls, _) = run_round(&mut w, 0, &mut l, |_| {
            n += 1;
            if n == 2 { Err(CallError::Unavailable("x".into())) } else { Ok(Done::Committed) }
        });
        // Reorganize 9 taken, move a unreachable: b waits for the next round.
        assert_eq!(calls.len(), 2);
        let (calls, _) = run_round(&mut w, 10, &mut l, |c| match c {
            Call::Propose(Command::MoveCopied { .. }) => Err(CallError::Rejected("stale".into())),
            _ => Ok(Done::Committed),
        });
        assert_eq!(calls.len(), 2);
        let (calls, _) = run_round(&mut w, 20, &mut l, |_| Ok(Done::Committed));
        assert!(calls.is_empty(), "{calls:?}");
    }

    #[test]
    fn a_refused_catalog_gives_the_dict_theirs_and_an_unreachable_one_is_proposed_again() {
        let mut w = Work::new(1, 1);
        let mut l = Learned { master: Some(1), ..Default::default() };
        let mine = Arc::new(Catalog { version: 5, ..Catalog::new() });
        let theirs = Arc::new(Catalog { version: 6, ..Catalog::new() });
        w.intake([], 0, [], [], Some(mine.clone()));
        let (calls, _) = run_round(&mut w, 0, &mut l, |_| Err(CallError::Unavailable("x".into())));
        assert!(matches!(&calls[..], [Call::Propose(Command::SetCatalog { version: 5, .. })]), "{calls:?}");
        let t = theirs.clone();
        let (calls, acts) = run_round(&mut w, 10, &mut l, move |c| match c {
            Call::Propose(_) => Err(CallError::Rejected("stale catalog version 5".into())),
            Call::FetchCatalog => Ok(Done::Catalog(t.clone())),
        });
        assert!(
            matches!(&calls[..], [Call::Propose(Command::SetCatalog { version: 5, .. }), Call::FetchCatalog]),
            "{calls:?}"
        );
        assert!(acts.contains(&WorkAction::MgmCatalog { catalog: theirs.clone(), refused: Some(5) }), "{acts:?}");
        // The master fetches a catalog the management nodes hold that it has not seen.
        l.mgm_catalog = Some(8);
        let eight = Arc::new(Catalog { version: 8, ..Catalog::new() });
        let e = eight.clone();
        let (calls, acts) = run_round(&mut w, 20, &mut l, move |_| Ok(Done::Catalog(e.clone())));
        assert_eq!(calls, vec![Call::FetchCatalog]);
        assert_eq!(acts, vec![WorkAction::MgmCatalog { catalog: eight, refused: None }]);
        let (calls, _) = run_round(&mut w, 30, &mut l, |_| Ok(Done::Committed));
        assert!(calls.is_empty());
    }

    #[test]
    fn the_durable_epoch_is_reported_newest_only_at_most_once_a_second_and_a_leave_goes_once() {
        let mut w = Work::new(3, 2);
        let mut l = Learned::default();
        w.intake([], 10, [], [], None);
        w.intake([], 12, [], [], None);
        let (calls, _) = run_round(&mut w, 0, &mut l, |_| Ok(Done::Committed));
        assert_eq!(calls, vec![Call::Propose(Command::SetDurableEpoch { epoch: 12 })]);
        w.intake([], 13, [], [], None);
        assert!(run_round(&mut w, 500, &mut l, |_| Ok(Done::Committed)).0.is_empty());
        assert_eq!(run_round(&mut w, 1000, &mut l, |_| Ok(Done::Committed)).0.len(), 1);
        let calls = w.leave_calls(14, true, 13);
        assert_eq!(
            calls,
            vec![Command::SetDurableEpoch { epoch: 14 }, Command::Leave { node: 3, incarnation: 2, sysfile_epoch: 13 }]
        );
        assert!(w.leave_calls(14, true, 13).iter().all(|c| !matches!(c, Command::Leave { .. })));
    }
}
