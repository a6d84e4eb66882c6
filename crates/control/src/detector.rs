//! Failure detection and arbitration on the Raft leader, as a pure struct driven by the caller's
//! clock (milliseconds of a monotonic clock): the leader feeds it heartbeats and suspicions and asks
//! it, on every tick, which nodes to declare failed.
//!
//! Leases and fencing (why a declared-failed node has already stopped serving):
//! * a data node treats its lease as starting when it *sent* the heartbeat whose reply granted it,
//!   and the lease lasts `lease_ms = failure_timeout_ms - heartbeat_interval_ms`;
//! * the leader declares a node failed by timeout only when no heartbeat has *arrived* for
//!   `failure_timeout_ms`: the last grant was made on a heartbeat sent no later than it arrived, so
//!   that lease ended at least `heartbeat_interval_ms` before the declaration (the margin absorbs
//!   clock-rate differences);
//! * a node chosen by arbitration is first *fenced*: it gets no more leases, and is declared only
//!   once the last lease granted to it has run out;
//! * a newly elected leader does not know what its predecessor granted, so it declares nobody
//!   failed before a full `failure_timeout_ms` has passed since it took over (the server only
//!   grants leases while its leadership was confirmed by a quorum within one heartbeat interval,
//!   so an old leader's last grant ends before then).
//!
//! A node that cannot reach a majority of management nodes therefore stops serving before anyone
//! may declare it dead, and there are never two primaries for one partition.
//!
//! Suspicions (data node A reports it cannot reach B): the leader, as arbitrator, fails one of
//! the two. A node that has gone quiet towards the leader too (no heartbeat for three heartbeat
//! intervals: most likely dead — a SIGKILLed node's peers see its links break at once) is the
//! one; if both keep heartbeating for five intervals after the report (a real partition
//! between them), the one whose loss leaves the better survivability
//! (`ClusterState::survivability`: Win over Ask over Lose), else never the master, else the one
//! that joined later. A reporter is thus never failed in place of a peer that died. Several nodes timing out in one tick are returned together, so the state
//! machine sees the whole set and declares the cluster down rather than a partial set when a node
//! group is lost.

use std::collections::BTreeMap;
use tern_types::cluster::{ClusterState, NodeId, NodeState};

#[derive(Debug, Clone, Copy)]
struct Seen {
    incarnation: u32,
    /// Last heartbeat arrival (or when watching began).
    at_ms: u64,
    /// Arrival time of the heartbeat of the last lease granted, if any.
    granted_at_ms: Option<u64>,
    /// Whether a heartbeat of this incarnation arrived in this term (not only watched).
    heard: bool,
}

/// The leader's failure detector. One per leadership term: a new leader builds a new one.
#[derive(Debug, Clone)]
pub struct Detector {
    failure_timeout_ms: u64,
    heartbeat_interval_ms: u64,
    lease_ms: u64,
    /// Nobody is declared failed before this time (a new leader's wait).
    armed_at_ms: u64,
    seen: BTreeMap<NodeId, Seen>,
    /// (reporter, suspect) pairs not yet arbitrated, with when first reported.
    suspicions: BTreeMap<(NodeId, NodeId), u64>,
    /// Nodes chosen by arbitration, with the incarnation chosen: no more leases for them.
    fenced: BTreeMap<NodeId, u32>,
}

/// The lease a heartbeat reply grants: what remains of the failure timeout after one heartbeat
/// interval of margin.
pub fn lease_ms(failure_timeout_ms: u64, heartbeat_interval_ms: u64) -> u64 {
    failure_timeout_ms.saturating_sub(heartbeat_interval_ms)
}

impl Detector {
    /// A detector for a leader that took over at `now_ms`.
    pub fn new(failure_timeout_ms: u64, heartbeat_interval_ms: u64, now_ms: u64) -> Detector {
        Detector {
            failure_timeout_ms,
            heartbeat_interval_ms,
            lease_ms: lease_ms(failure_timeout_ms, heartbeat_interval_ms),
            armed_at_ms: now_ms.saturating_add(failure_timeout_ms),
            seen: BTreeMap::new(),
            suspicions: BTreeMap::new(),
            fenced: BTreeMap::new(),
        }
    }

    pub fn lease_ms(&self) -> u64 {
        self.lease_ms
    }

    /// The detector itself was not run for `late_ms` beyond its tick interval (its process was
    /// not scheduled: a starved host). Heartbeats that came meanwhile wait unread in their sockets,
    /// so silence over that stretch says nothing about the nodes: every node's judgement (and a
    /// new leader's wait) is extended by it. Declaring later keeps every lease safe (a lease
    /// ends before the detector could declare its node without the credit).
    pub fn credit_lateness(&mut self, late_ms: u64, now_ms: u64) {
        for seen in self.seen.values_mut() {
            seen.at_ms = seen.at_ms.saturating_add(late_ms).min(now_ms);
        }
        if self.armed_at_ms > now_ms.saturating_sub(late_ms) {
            self.armed_at_ms = self.armed_at_ms.saturating_add(late_ms);
        }
    }

    /// How long ago (ms) the newest heartbeat of each node arrived, for the nodes heard from in
    /// this term.
    pub fn heard_ago(&self, now_ms: u64) -> Vec<(NodeId, u64)> {
        self.seen.iter().filter(|(_, s)| s.heard).map(|(&n, s)| (n, now_ms.saturating_sub(s.at_ms))).collect()
    }

    /// A heartbeat of a live (not `Down`) node with its current incarnation arrived at `now_ms`.
    /// Returns whether the reply may grant a lease (not when the node is being fenced); the caller
    /// must only grant when this returns true, and then the grant is recorded here.
    pub fn on_heartbeat(&mut self, node: NodeId, incarnation: u32, now_ms: u64) -> bool {
        let fenced = self.fenced.get(&node) == Some(&incarnation);
        let seen =
            self.seen.entry(node).or_insert(Seen { incarnation, at_ms: now_ms, granted_at_ms: None, heard: false });
        if seen.incarnation != incarnation {
            *seen = Seen { incarnation, at_ms: now_ms, granted_at_ms: None, heard: false };
        }
        seen.at_ms = seen.at_ms.max(now_ms);
        seen.heard = true;
        if fenced {
            return false;
        }
        seen.granted_at_ms = Some(now_ms);
        true
    }

    /// `reporter` says (at `now_ms`) it cannot reach `suspect`.
    pub fn on_suspect(&mut self, reporter: NodeId, suspect: NodeId, now_ms: u64) {
        if reporter != suspect {
            self.suspicions.entry((reporter, suspect)).or_insert(now_ms);
        }
    }

    /// The nodes (with the incarnation seen failing) to declare failed now, ascending by id.
    pub fn on_tick(&mut self, state: &ClusterState, now_ms: u64) -> Vec<(NodeId, u32)> {
        self.forget_gone(state, now_ms);
        self.arbitrate(state, now_ms);
        if now_ms < self.armed_at_ms {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (&node, seen) in &self.seen {
            let timed_out = now_ms.saturating_sub(seen.at_ms) >= self.failure_timeout_ms;
            let fenced_out = self.fenced.get(&node) == Some(&seen.incarnation)
                && seen.granted_at_ms.is_none_or(|g| now_ms >= g.saturating_add(self.lease_ms));
            if timed_out || fenced_out {
                out.push((node, seen.incarnation));
            }
        }
        // No lease for a node being declared: a heartbeat arriving before the declaration is
        // committed must not grant it one (it would serve after the others took over).
        for &(node, incarnation) in &out {
            self.fenced.insert(node, incarnation);
        }
        out
    }

    /// Starts watching nodes that came alive and forgets nodes that are down or restarted.
    fn forget_gone(&mut self, state: &ClusterState, now_ms: u64) {
        for (&node, status) in &state.nodes {
            if status.state == NodeState::Down {
                self.seen.remove(&node);
                continue;
            }
            let seen = self.seen.entry(node).or_insert(Seen {
                incarnation: status.incarnation,
                at_ms: now_ms,
                granted_at_ms: None,
                heard: false,
            });
            if seen.incarnation != status.incarnation {
                *seen = Seen { incarnation: status.incarnation, at_ms: now_ms, granted_at_ms: None, heard: false };
            }
        }
        self.seen.retain(|n, _| state.nodes.contains_key(n));
        self.fenced
            .retain(|n, inc| state.nodes.get(n).is_some_and(|s| s.state != NodeState::Down && s.incarnation == *inc));
    }

    /// Turns pending suspicions into fenced nodes (see the module comment).
    fn arbitrate(&mut self, state: &ClusterState, now_ms: u64) {
        let hb = self.heartbeat_interval_ms.max(1);
        let suspicions = std::mem::take(&mut self.suspicions);
        for ((reporter, suspect), since) in suspicions {
            let live = |n: NodeId| state.state_of(n).in_chains() && !self.fenced.contains_key(&n);
            if !live(reporter) || !live(suspect) {
                continue; // already decided, or one of them is gone anyway
            }
            let quiet = |n: NodeId| self.seen.get(&n).is_none_or(|s| now_ms.saturating_sub(s.at_ms) >= 3 * hb);
            let victim = match (quiet(reporter), quiet(suspect)) {
                (false, true) => suspect,
                (true, false) => reporter,
                (false, false) if now_ms >= since.saturating_add(5 * hb) => choose_victim(state, reporter, suspect),
                _ => {
                    // Not decided yet (or both quiet: the timeouts will decide).
                    self.suspicions.insert((reporter, suspect), since);
                    continue;
                }
            };
            let incarnation = state.nodes.get(&victim).map_or(0, |s| s.incarnation);
            self.fenced.insert(victim, incarnation);
        }
    }
}

/// Which of two live nodes that cannot reach each other to fail (`ClusterState::choose_victim`).
pub fn choose_victim(state: &ClusterState, a: NodeId, b: NodeId) -> NodeId {
    state.choose_victim(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_types::cluster::{ClusterConfig, DataNodeSpec, MgmdSpec};

    fn started(nodes: u16, replicas: u8) -> ClusterState {
        ClusterState::all_started(ClusterConfig {
            replicas,
            data_nodes: (1..=nodes)
                .map(|id| DataNodeSpec { id, host: "h".into(), port: 1, location_domain: 0 })
                .collect(),
            mgmds: vec![MgmdSpec { id: 65, host: "h".into(), port: 2 }],
            ldm_workers: 1,
            epoch_interval_ms: 100,
            heartbeat_interval_ms: 100,
            failure_timeout_ms: 1000,
        })
    }

    /// Heartbeats every node but `silent` every 100 ms from `from` to `to`, ticking each time;
    /// returns the first tick that declares something, with its time.
    fn run(
        d: &mut Detector,
        s: &ClusterState,
        silent: &[NodeId],
        from: u64,
        to: u64,
    ) -> Option<(u64, Vec<(NodeId, u32)>)> {
        let mut t = from;
        while t <= to {
            for n in s.nodes.keys() {
                if !silent.contains(n) {
                    assert!(d.on_heartbeat(*n, 1, t));
                }
            }
            let out = d.on_tick(s, t);
            if !out.is_empty() {
                return Some((t, out));
            }
            t += 100;
        }
        None
    }

    #[test]
    fn a_silent_node_is_declared_after_the_timeout_and_after_its_lease_ran_out() {
        let s = started(2, 2);
        let mut d = Detector::new(1000, 100, 0);
        assert_eq!(d.lease_ms(), 900);
        // Everybody heartbeats until 2000, then node 2 falls silent.
        assert_eq!(run(&mut d, &s, &[], 0, 2000), None);
        let last_heartbeat = 2000;
        let (t, out) = run(&mut d, &s, &[2], 2100, 10_000).unwrap();
        assert_eq!(out, vec![(2, 1)]);
        assert_eq!(t, last_heartbeat + 1000);
        // The node's lease began no later than the arrival of its last heartbeat.
        assert!(last_heartbeat + d.lease_ms() < t);
    }

    #[test]
    fn a_stall_of_the_detector_itself_is_not_counted_as_silence() {
        let s = started(2, 2);
        let mut d = Detector::new(1000, 100, 0);
        assert_eq!(run(&mut d, &s, &[], 0, 2000), None);
        assert_eq!(d.heard_ago(2000), vec![(1, 0), (2, 0)]);
        // The mgmd is not scheduled from 2000 to 4500: no tick, no heartbeat read. It then
        // credits the 2400 ms it came late (its ticks are 100 ms apart).
        d.credit_lateness(2400, 4500);
        assert!(d.on_tick(&s, 4500).is_empty(), "nobody was silent while the detector ran");
        // The heartbeats queued meanwhile are read: everyone lives on.
        assert_eq!(run(&mut d, &s, &[], 4500, 6000), None);
        // Silence after the stall is still judged: node 2 stops at 6000.
        let (t, out) = run(&mut d, &s, &[2], 6100, 20_000).unwrap();
        assert_eq!((t, out), (7000, vec![(2, 1)]));
        // Without the credit, the same stall declares both.
        let mut d = Detector::new(1000, 100, 0);
        assert_eq!(run(&mut d, &s, &[], 0, 2000), None);
        assert_eq!(d.on_tick(&s, 4500), vec![(1, 1), (2, 1)]);
    }

    #[test]
    fn a_new_leader_waits_a_full_timeout_before_declaring_anyone() {
        let s = started(2, 2);
        let mut d = Detector::new(1000, 100, 5000);
        // Node 1 never heartbeats this leader: still not declared before 6000.
        assert!(d.on_tick(&s, 5000).is_empty());
        let (t, out) = run(&mut d, &s, &[1], 5000, 20_000).unwrap();
        assert_eq!((t, out), (6000, vec![(1, 1)]));
    }

    #[test]
    fn simultaneous_timeouts_come_in_one_set() {
        let s = started(4, 2);
        let mut d = Detector::new(1000, 100, 0);
        assert_eq!(run(&mut d, &s, &[], 0, 1500), None);
        let (_, out) = run(&mut d, &s, &[3, 4], 1600, 10_000).unwrap();
        assert_eq!(out, vec![(3, 1), (4, 1)]);
    }

    #[test]
    fn a_node_that_restarted_or_went_down_is_not_declared() {
        let mut s = started(2, 2);
        let mut d = Detector::new(1000, 100, 0);
        assert_eq!(run(&mut d, &s, &[], 0, 1500), None);
        s.nodes.get_mut(&2).unwrap().state = NodeState::Down;
        assert_eq!(run(&mut d, &s, &[2], 1600, 5000), None);
        // It registers again: watched afresh from the tick that first sees it.
        let st = s.nodes.get_mut(&2).unwrap();
        st.state = NodeState::Starting;
        st.incarnation = 2;
        assert!(d.on_heartbeat(1, 1, 6000));
        assert!(d.on_tick(&s, 6000).is_empty());
        assert_eq!(run(&mut d, &s, &[2], 6100, 6900), None);
        let (t, out) = run(&mut d, &s, &[2], 7000, 9000).unwrap();
        assert_eq!((t, out), (7000, vec![(2, 2)]));
    }

    #[test]
    fn arbitration_fences_first_and_declares_after_the_lease() {
        let s = started(2, 2);
        let mut d = Detector::new(1000, 100, 0);
        assert_eq!(run(&mut d, &s, &[], 0, 2000), None);
        // Node 2 (not the master) reports node 1 (the master), both keep heartbeating: after
        // five heartbeat intervals node 2 is chosen.
        d.on_suspect(2, 1, 2000);
        assert!(d.on_tick(&s, 2050).is_empty());
        for t in [2100, 2200, 2300, 2400] {
            assert!(d.on_heartbeat(1, 1, t) && d.on_heartbeat(2, 1, t), "not fenced before {t}");
            d.on_suspect(2, 1, t);
            assert!(d.on_tick(&s, t).is_empty());
        }
        assert!(d.on_tick(&s, 2500).is_empty());
        assert!(d.on_heartbeat(1, 1, 2500));
        assert!(!d.on_heartbeat(2, 1, 2500), "a fenced node gets no lease");
        // Its last lease was granted at 2400: declared at 2400 + 900, not before.
        assert!(d.on_tick(&s, 3299).is_empty());
        assert_eq!(d.on_tick(&s, 3300), vec![(2, 1)]);
    }

    /// A node that died (SIGKILL) is reported by its peers at once (its links break) while the
    /// leader still holds its last heartbeat: the dead node is the one fenced, never the
    /// reporter — even when the dead one is the master.
    #[test]
    fn a_suspect_that_went_quiet_is_the_victim_not_the_reporter() {
        let s = started(2, 2);
        let mut d = Detector::new(1000, 100, 0);
        assert_eq!(run(&mut d, &s, &[], 0, 2000), None);
        // Node 1 (the master) dies right after its heartbeat at 2000; node 2 reports it at 2010.
        d.on_suspect(2, 1, 2010);
        for t in [2100, 2200] {
            assert!(d.on_heartbeat(2, 1, t));
            assert!(d.on_tick(&s, t).is_empty(), "undecided at {t}");
        }
        assert!(d.on_heartbeat(2, 1, 2300));
        assert!(d.on_tick(&s, 2300).is_empty(), "node 1 fenced, its lease still runs");
        assert!(d.on_heartbeat(2, 1, 2400), "the reporter keeps its lease");
        // Node 1's last lease (granted at 2000) ends at 2900: declared then, before the timeout.
        assert_eq!(d.on_tick(&s, 2900), vec![(1, 1)]);
    }

    #[test]
    fn arbitration_prefers_survivability_then_the_master_then_the_older_node() {
        // Groups [1,2] [3,4]; node 3 already down: losing 4 would lose a group.
        let mut s = started(4, 2);
        s.nodes.get_mut(&3).unwrap().state = NodeState::Down;
        assert_eq!(choose_victim(&s, 4, 1), 1);
        assert_eq!(choose_victim(&s, 1, 4), 1);
        let s = started(4, 2);
        assert_eq!(s.master(), Some(1));
        assert_eq!(choose_victim(&s, 1, 3), 3);
        assert_eq!(choose_victim(&s, 3, 1), 3);
        assert_eq!(choose_victim(&s, 2, 3), 3, "node 3 joined later");
    }

    #[test]
    fn suspicions_of_dead_nodes_are_dropped() {
        let mut s = started(2, 2);
        s.nodes.get_mut(&2).unwrap().state = NodeState::Down;
        let mut d = Detector::new(1000, 100, 0);
        d.on_suspect(1, 2, 0);
        d.on_suspect(1, 1, 0);
        assert!(d.on_tick(&s, 5000).iter().all(|(n, _)| *n != 1));
        assert!(d.on_heartbeat(1, 1, 5000));
    }
}
