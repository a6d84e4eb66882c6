//! The data nodes' membership threads and the management nodes' leader as the simulator runs
//! them: each running node drives tern-control's own membership machines (`Heart`: heartbeats,
//! leases, fencing, maps to the blocks; `Work`: the blocks' requests) by its own clock, and the
//! leader answers heartbeats with the real failure detector (`Detector`: leases, timeouts,
//! arbitration of suspicions). A node learns of a new map only through a heartbeat reply, a
//! killed node is declared failed only when its heartbeats have stopped for a failure timeout,
//! and a node the cluster declared failed fences itself when its next reply says so. Calls of the
//! management nodes sometimes fail (not applied, or applied with the reply lost: the machine
//! retries, the state machine must take the retry).

use super::*;
use tern_control::Command;
use tern_control::member::{
    Beat, Call, CallError, Done, Heart, HeartAction, HeartConfig, Learned, MoveReport, Work, WorkAction,
};

/// A running node's membership threads.
pub(crate) struct SimMember {
    pub(crate) incarnation: u32,
    heart: Heart,
    work: Work,
    learned: Learned,
    /// Suspicions for the next heartbeat (the process's control inbox).
    suspects: BTreeSet<NodeId>,
}

/// What happens to a node's membership threads.
pub(crate) enum MemberEv {
    /// The heartbeat thread wakes.
    Tick,
    /// A heartbeat's reply arrives.
    Reply(Box<Beat>),
    /// The work thread runs a round (woken by a request, or its poll).
    Round,
}

/// The work thread's poll (ms).
const WORK_POLL_MS: u64 = 250;

impl Sim {
    /// Starts node `id`'s membership threads (its process just started, with incarnation
    /// `incarnation` and map version `known_version`).
    pub(super) fn start_member(&mut self, id: NodeId, booted_started: bool) {
        let status = &self.cluster.nodes[&id];
        let incarnation = status.incarnation;
        let c = &self.cluster.config;
        let cfg = HeartConfig {
            node: id,
            incarnation,
            heartbeat_ms: c.heartbeat_interval_ms,
            failure_timeout_ms: c.failure_timeout_ms,
            booted_started,
            known_version: self.cluster.version,
        };
        let now = self.node_now(id);
        let learned = Learned { master: self.cluster.master(), ..Learned::default() };
        let m = SimMember {
            incarnation,
            heart: Heart::new(cfg, now),
            work: Work::new(id, incarnation),
            learned,
            suspects: BTreeSet::new(),
        };
        self.nodes.get_mut(&id).expect("a node").member = Some(m);
        self.member_at(id, incarnation, self.now, MemberEv::Tick);
        self.member_at(id, incarnation, self.now + WORK_POLL_MS, MemberEv::Round);
    }

    fn member_at(&mut self, node: NodeId, node_incarnation: u32, at: u64, ev: MemberEv) {
        let incarnation = self.incarnation;
        self.push(at, Event::Member { node, node_incarnation, ev, incarnation });
    }

    /// A block's request reaches the node's membership threads (its control inbox).
    pub(super) fn member_request(&mut self, node: NodeId, node_incarnation: u32, req: ControlReq) {
        let Some(m) = self.nodes.get_mut(&node).and_then(|sn| sn.member.as_mut()) else { return };
        if m.incarnation != node_incarnation {
            return; // the request of a process that is gone
        }
        let (mut states, mut durable, mut moves, mut tables, mut catalog) = (vec![], 0, vec![], vec![], None);
        match req {
            ControlReq::SetState(s) => states.push(s),
            ControlReq::DurableEpoch(e) => durable = e,
            ControlReq::Suspect(n) => {
                m.suspects.insert(n);
                return;
            }
            ControlReq::Catalog(c) => catalog = Some(c),
            ControlReq::MoveCopied { table, partition } => moves.push(MoveReport { left: false, table, partition }),
            ControlReq::MoveLeft { table, partition } => moves.push(MoveReport { left: true, table, partition }),
            ControlReq::Reorganize { tables: t } => tables = t,
        }
        let wake = !states.is_empty() || catalog.is_some();
        m.work.intake(states, durable, moves, tables, catalog);
        if wake {
            // State changes and catalogs wake the work thread at once.
            self.member_at(node, node_incarnation, self.now, MemberEv::Round);
        }
    }

    pub(super) fn member_event(&mut self, node: NodeId, node_incarnation: u32, ev: MemberEv) {
        let Some(mut m) = self.nodes.get_mut(&node).and_then(|sn| sn.member.take()) else { return };
        if m.incarnation != node_incarnation {
            self.nodes.get_mut(&node).expect("a node").member = Some(m);
            return;
        }
        let alive = match ev {
            MemberEv::Tick => {
                let now = self.node_now(node);
                let actions = m.heart.tick(now, false);
                let alive = self.heart_actions(node, &mut m, actions);
                if alive {
                    let wake = m.heart.wake_at(false);
                    let at = self.timer_at(node, wake.saturating_sub(now));
                    self.member_at(node, node_incarnation, at.max(self.now + 1), MemberEv::Tick);
                }
                alive
            }
            MemberEv::Reply(beat) => {
                let now = self.node_now(node);
                let actions = m.heart.on_reply(now, *beat, false, &mut m.learned);
                self.heart_actions(node, &mut m, actions)
            }
            MemberEv::Round => {
                let alive = self.work_round(node, &mut m);
                if alive {
                    let at = self.timer_at(node, WORK_POLL_MS);
                    self.member_at(node, node_incarnation, at, MemberEv::Round);
                }
                alive
            }
        };
        if alive && let Some(sn) = self.nodes.get_mut(&node).filter(|sn| sn.node.is_some()) {
            sn.member = Some(m);
        }
    }

    /// Carries out the heartbeat machine's actions; false when the node fenced itself.
    fn heart_actions(&mut self, node: NodeId, m: &mut SimMember, actions: Vec<HeartAction>) -> bool {
        for a in actions {
            match a {
                HeartAction::Beat { known_version } => {
                    let suspects: Vec<NodeId> = std::mem::take(&mut m.suspects).into_iter().collect();
                    let at = self.now + 1 + self.rng.below(5);
                    let (node_incarnation, incarnation) = (m.incarnation, self.incarnation);
                    let ev = Event::MgmHeartbeat { node, node_incarnation, known_version, suspects, incarnation };
                    self.push(at, ev);
                }
                HeartAction::Lease { until_ms } => {
                    for i in 0..self.cfg.ldm_count {
                        self.deliver(Addr::new(node, Block::Tc(i)), Signal::Lease { until_ms });
                    }
                }
                HeartAction::Publish(st) => {
                    let n = self.cfg.ldm_count;
                    let blocks = (0..n).map(Block::Tc).chain((0..n).map(Block::Ldm)).chain([Block::Dict, Block::Dist]);
                    for b in blocks {
                        let inc = self.incarnation;
                        let sig = Signal::ClusterMap { state: st.clone() };
                        self.push(
                            self.now,
                            Event::Deliver { from: None, to: Addr::new(node, b), sig, incarnation: inc },
                        );
                    }
                }
                HeartAction::Fence(why) => {
                    self.fence_node(node, &why);
                    return false;
                }
                HeartAction::Renewed { lapsed_ms } => {
                    self.log(|| format!("node {node}: lease renewed after {lapsed_ms} ms"))
                }
                HeartAction::Lapsed => self.log(|| format!("node {node}: lease lapsed")),
                HeartAction::Membership(_) | HeartAction::RequestStop => {}
            }
        }
        true
    }

    /// A heartbeat arrives at the management nodes' leader.
    pub(super) fn mgm_heartbeat(
        &mut self,
        node: NodeId,
        node_incarnation: u32,
        known_version: u64,
        suspects: Vec<NodeId>,
    ) {
        let now = self.now;
        let current = self
            .mgm
            .state
            .nodes
            .get(&node)
            .is_some_and(|s| s.incarnation == node_incarnation && s.state != NodeState::Down);
        // As the server: a lease only for a live node's current incarnation.
        let granted = current && self.detector.on_heartbeat(node, node_incarnation, now);
        if current {
            for s in suspects {
                self.log(|| format!("node {node} suspects node {s}"));
                self.detector.on_suspect(node, s, now);
            }
        }
        let beat = Beat {
            granted,
            lease_ms: self.detector.lease_ms(),
            stop: false,
            catalog_version: self.mgm.catalog_version,
            state: (self.mgm.state.version > known_version).then(|| self.mgm.state.clone()),
        };
        let at = self.now + 1 + self.rng.below(5);
        self.member_at(node, node_incarnation, at, MemberEv::Reply(Box::new(beat)));
    }

    /// The leader's failure detector, every heartbeat interval: nodes whose heartbeats stopped
    /// for a failure timeout, or that arbitration fenced and whose last lease ran out, are
    /// declared failed.
    pub(super) fn detector_tick(&mut self) {
        let failed = self.detector.on_tick(&self.mgm.state, self.now);
        if !failed.is_empty() {
            self.stats.declared_failed += failed.len() as u32;
            self.log(|| format!("the detector declares {failed:?} failed"));
            let _ = self.propose(Command::NodesFailed { nodes: failed });
        }
        let at = self.now + self.cluster.config.heartbeat_interval_ms;
        let incarnation = self.incarnation;
        self.push(at, Event::DetectorTick { incarnation });
    }

    /// One round of the work thread: each call of the management nodes applied to their state
    /// machine (or, now and then, lost before or after it was applied). False: the node fenced.
    fn work_round(&mut self, node: NodeId, m: &mut SimMember) -> bool {
        let now = self.node_now(node);
        m.work.begin_round();
        while let Some(first) = m.work.next_call(now, &mut m.learned) {
            let mut call = first;
            loop {
                let result = self.mgm_call(&call);
                for a in m.work.on_result(result) {
                    match a {
                        WorkAction::CatalogStored { version } => {
                            self.give_dict(node, Signal::CatalogStored { version })
                        }
                        WorkAction::MgmCatalog { catalog, refused } => {
                            self.give_dict(node, Signal::MgmCatalog { catalog, refused })
                        }
                        WorkAction::Fence(why) => {
                            self.fence_node(node, &why);
                            return false;
                        }
                    }
                }
                match m.work.follow_up() {
                    Some(c) => call = c,
                    None => break,
                }
            }
        }
        true
    }

    fn give_dict(&mut self, node: NodeId, sig: Signal) {
        let at = self.now + 1 + self.rng.below(20);
        let inc = self.incarnation;
        self.push(at, Event::Deliver { from: None, to: Addr::new(node, Block::Dict), sig, incarnation: inc });
    }

    /// One call of the management nodes: sometimes it does not reach them, sometimes its reply
    /// is lost after it was applied.
    fn mgm_call(&mut self, call: &Call) -> Result<Done, CallError> {
        if self.rng.chance(4) {
            return Err(CallError::Unavailable("no management node answered".into()));
        }
        let r = match call {
            Call::Propose(cmd) => {
                if let Command::SetCatalog { version, bytes } = cmd {
                    let c = tern_types::Catalog::decode(bytes).expect("a catalog the dict encoded");
                    debug_assert_eq!(c.version, *version);
                    let accepted = self.propose(cmd.clone()).is_ok();
                    if accepted {
                        self.mgm_catalog = Some(std::sync::Arc::new(c));
                    }
                    self.log(|| format!("catalog version {version} proposed: accepted {accepted}"));
                    if accepted {
                        Ok(Done::Committed)
                    } else {
                        Err(CallError::Rejected(format!("stale catalog {version}")))
                    }
                } else {
                    let before = self.mgm.version();
                    match self.propose(cmd.clone()) {
                        Ok(_) => {
                            if matches!(cmd, Command::SetState { state: NodeState::Started, .. })
                                && self.mgm.version() != before
                            {
                                self.stats.node_restarts += 1;
                            }
                            Ok(Done::Committed)
                        }
                        Err(r) => Err(CallError::Rejected(r)),
                    }
                }
            }
            Call::FetchCatalog => Ok(Done::Catalog(self.mgm_catalog.clone().unwrap_or_else(|| {
                std::sync::Arc::new(tern_types::Catalog { version: 0, ..tern_types::Catalog::new() })
            }))),
        };
        if self.rng.chance(3) {
            return Err(CallError::Unavailable("the reply was lost".into()));
        }
        r
    }

    /// Node `node` stops at once (it fenced itself): its process is gone, as a killed one.
    fn fence_node(&mut self, node: NodeId, why: &str) {
        self.stats.fences += 1;
        self.log(|| format!("node {node} fences itself: {why}"));
        self.kill_process(node);
        if self.cfg.restart_after_ms > 0 {
            let at = self.now + self.cfg.restart_after_ms / 2 + self.rng.below(self.cfg.restart_after_ms);
            self.restarts.push((at, node));
        }
    }
}
