//! The shape of a cluster and the partition map: which data nodes form which node group, what
//! state each node is in, and — as a pure function of that — the ordered replica list (primary
//! first) of every partition (ndb-protocols.md §10.1: one deterministic, replicated distribution
//! map; the primary is a pure function of (distribution, membership), so every node switches
//! primaries identically when the membership changes).
//!
//! The management nodes replicate a `ClusterState`; data nodes and API servers receive copies.
//! Placement of a partition `p` in a cluster of `G` node groups of `R` replicas whose data nodes
//! each run `L` ldm workers:
//! * node group `p mod G`;
//! * ldm worker `(p / G) mod L` on every replica of it;
//! * preferred primary: the group's members rotated left by `(p / (G·L)) mod R`, so that with the
//!   default `G·L·R` partitions every ldm of every node is preferred primary of one partition.
//!
//! The replica list of a partition holds its group's `Started` members in preferred order, then
//! members that are `Copying` (a restarted node that has joined the write chains while it copies
//! what it missed); the first `Started` member is the primary. Nodes that are `Down` or `Starting`
//! hold no replica.

use crate::bin::{Dec, DecodeError, DecodeResult, Enc};
use std::collections::BTreeMap;

pub type NodeId = u16;

/// Data node ids are 1..=DATA_NODE_ID_MAX (as NDB's 1..=144 are reserved for data nodes).
pub const DATA_NODE_ID_MAX: NodeId = 144;
/// Replicas per node group.
pub const REPLICAS_MAX: u8 = 3;
/// Data nodes per cluster.
pub const DATA_NODES_MAX: usize = 48;

/// Where the placement rule lives: node group, ldm worker and preferred-primary rank of a
/// partition. `groups` and `ldms` are at least 1.
pub fn group_of(partition: u32, groups: u32) -> u32 {
    partition % groups.max(1)
}

pub fn ldm_of(partition: u32, groups: u32, ldms: u16) -> u16 {
    ((partition / groups.max(1)) % ldms.max(1) as u32) as u16
}

fn primary_rank(partition: u32, groups: u32, ldms: u16, replicas: usize) -> usize {
    ((partition / (groups.max(1) * ldms.max(1) as u32)) as usize) % replicas.max(1)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataNodeSpec {
    pub id: NodeId,
    pub host: String,
    /// The port clients and other data nodes connect to.
    pub port: u16,
}

impl DataNodeSpec {
    /// `host:port`, as clients and peers connect to it (and as API servers name the node).
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MgmdSpec {
    pub id: NodeId,
    pub host: String,
    pub port: u16,
}

/// The static description of a cluster (NDB's config.ini), replicated by the management nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// Replicas per node group (NDB's NoOfReplicas), 1..=3.
    pub replicas: u8,
    /// Data nodes in id order; node groups are consecutive runs of `replicas` of them.
    pub data_nodes: Vec<DataNodeSpec>,
    pub mgmds: Vec<MgmdSpec>,
    /// ldm workers of every data node (the same on all; partitions are placed by it).
    pub ldm_workers: u16,
    pub epoch_interval_ms: u64,
    /// Data nodes heartbeat each other and the management leader this often.
    pub heartbeat_interval_ms: u64,
    /// A data node that has not renewed its lease for this long stops serving; a node is declared
    /// failed only after its lease has run out (detection ≤ this + one heartbeat).
    pub failure_timeout_ms: u64,
}

impl ClusterConfig {
    /// One data node, one replica, one management node: today's lightest setup.
    pub fn single(host: &str, port: u16, mgmd_port: u16, ldm_workers: u16) -> ClusterConfig {
        ClusterConfig {
            replicas: 1,
            data_nodes: vec![DataNodeSpec { id: 1, host: host.into(), port }],
            mgmds: vec![MgmdSpec { id: 65, host: host.into(), port: mgmd_port }],
            ldm_workers,
            epoch_interval_ms: 100,
            heartbeat_interval_ms: 100,
            failure_timeout_ms: 1000,
        }
    }

    pub fn node_groups(&self) -> Vec<Vec<NodeId>> {
        let mut ids: Vec<NodeId> = self.data_nodes.iter().map(|d| d.id).collect();
        ids.sort_unstable();
        ids.chunks(self.replicas.max(1) as usize).map(|c| c.to_vec()).collect()
    }

    /// The default partition count of a table: one per ldm per data node (NDB's
    /// FOR_RP_BY_LDM), so every ldm of every node is the preferred primary of one partition.
    pub fn default_partitions(&self) -> u32 {
        (self.ldm_workers.max(1) as u32) * self.data_nodes.len().max(1) as u32
    }

    pub fn data_node(&self, id: NodeId) -> Option<&DataNodeSpec> {
        self.data_nodes.iter().find(|d| d.id == id)
    }

    /// Checks the rules a cluster must follow; the error names what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=REPLICAS_MAX).contains(&self.replicas) {
            return Err(format!("replicas must be 1, 2 or 3 (got {})", self.replicas));
        }
        if self.data_nodes.is_empty() {
            return Err("a cluster needs at least one data node".into());
        }
        if self.data_nodes.len() > DATA_NODES_MAX {
            return Err(format!("at most {DATA_NODES_MAX} data nodes (got {})", self.data_nodes.len()));
        }
        if !self.data_nodes.len().is_multiple_of(self.replicas as usize) {
            return Err(format!(
                "{} data nodes cannot form node groups of {} replicas: the count must be a multiple of replicas",
                self.data_nodes.len(),
                self.replicas
            ));
        }
        if self.mgmds.is_empty() || self.mgmds.len() > 7 {
            return Err(format!("a cluster needs 1 to 7 management nodes (got {})", self.mgmds.len()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for d in &self.data_nodes {
            if d.id == 0 || d.id > DATA_NODE_ID_MAX {
                return Err(format!("data node id {} is out of range 1..={DATA_NODE_ID_MAX}", d.id));
            }
            if !seen.insert(d.id) {
                return Err(format!("node id {} is used twice", d.id));
            }
        }
        for m in &self.mgmds {
            if m.id == 0 || !seen.insert(m.id) {
                return Err(format!("management node id {} is zero or used twice", m.id));
            }
        }
        if self.ldm_workers == 0 || self.ldm_workers > 64 {
            return Err(format!("ldm_workers must be 1..=64 (got {})", self.ldm_workers));
        }
        if self.heartbeat_interval_ms == 0 || self.failure_timeout_ms < 3 * self.heartbeat_interval_ms {
            return Err(format!(
                "failure_timeout_ms ({}) must be at least 3 heartbeat intervals ({} ms)",
                self.failure_timeout_ms, self.heartbeat_interval_ms
            ));
        }
        if self.epoch_interval_ms == 0 {
            return Err("epoch_interval_ms must be positive".into());
        }
        Ok(())
    }

    pub fn encode(&self, e: &mut Enc) {
        e.u8(self.replicas);
        e.u32(self.data_nodes.len() as u32);
        for d in &self.data_nodes {
            e.u16(d.id);
            e.str(&d.host);
            e.u16(d.port);
        }
        e.u32(self.mgmds.len() as u32);
        for m in &self.mgmds {
            e.u16(m.id);
            e.str(&m.host);
            e.u16(m.port);
        }
        e.u16(self.ldm_workers);
        e.u64(self.epoch_interval_ms);
        e.u64(self.heartbeat_interval_ms);
        e.u64(self.failure_timeout_ms);
    }

    pub fn decode(d: &mut Dec) -> DecodeResult<ClusterConfig> {
        let replicas = d.u8()?;
        let n = d.len(DATA_NODES_MAX)?;
        let mut data_nodes = Vec::with_capacity(n);
        for _ in 0..n {
            data_nodes.push(DataNodeSpec { id: d.u16()?, host: d.string()?, port: d.u16()? });
        }
        let n = d.len(7)?;
        let mut mgmds = Vec::with_capacity(n);
        for _ in 0..n {
            mgmds.push(MgmdSpec { id: d.u16()?, host: d.string()?, port: d.u16()? });
        }
        Ok(ClusterConfig {
            replicas,
            data_nodes,
            mgmds,
            ldm_workers: d.u16()?,
            epoch_interval_ms: d.u64()?,
            heartbeat_interval_ms: d.u64()?,
            failure_timeout_ms: d.u64()?,
        })
    }
}

/// A data node's state in the cluster (NDB's node states, reduced).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeState {
    /// Not running, or declared failed.
    Down = 0,
    /// Registered and recovering locally; holds no replica yet.
    Starting = 1,
    /// In the write chains of its partitions while it copies what it missed from the primaries;
    /// serves no reads and is never primary.
    Copying = 2,
    /// A full replica.
    Started = 3,
}

impl NodeState {
    pub fn from_u8(v: u8) -> DecodeResult<NodeState> {
        Ok(match v {
            0 => NodeState::Down,
            1 => NodeState::Starting,
            2 => NodeState::Copying,
            3 => NodeState::Started,
            _ => return Err(DecodeError("bad node state")),
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            NodeState::Down => "down",
            NodeState::Starting => "starting",
            NodeState::Copying => "copying",
            NodeState::Started => "started",
        }
    }

    /// Holds a replica (is in write chains).
    pub fn in_chains(self) -> bool {
        matches!(self, NodeState::Copying | NodeState::Started)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    pub state: NodeState,
    /// Bumped every time the node registers (a restart): signals of an older incarnation are
    /// never acted upon.
    pub incarnation: u32,
    /// Order in which nodes joined (became Copying or Started); the live node with the smallest
    /// is the master (NDB's president: runs epochs and takeover).
    pub joined_seq: u64,
}

/// What the management nodes replicate about a running cluster. Every change bumps `version`;
/// data nodes act on versions in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterState {
    pub version: u64,
    pub config: ClusterConfig,
    pub nodes: BTreeMap<NodeId, NodeStatus>,
    /// The newest epoch every live data node has on disk (NDB's newest restorable GCI): a system
    /// restart recovers every node to exactly this epoch.
    pub durable_epoch: u64,
    /// Set when a node group lost all its members: the cluster cannot serve and must be restarted
    /// as a whole (system restart).
    pub cluster_down: bool,
}

impl ClusterState {
    pub fn new(config: ClusterConfig) -> ClusterState {
        let nodes = config
            .data_nodes
            .iter()
            .map(|d| (d.id, NodeStatus { state: NodeState::Down, incarnation: 0, joined_seq: 0 }))
            .collect();
        ClusterState { version: 1, config, nodes, durable_epoch: 0, cluster_down: false }
    }

    /// Every node started (for tests and the sim): version 1, all `Started`.
    pub fn all_started(config: ClusterConfig) -> ClusterState {
        let mut s = ClusterState::new(config);
        for (i, n) in s.nodes.values_mut().enumerate() {
            n.state = NodeState::Started;
            n.incarnation = 1;
            n.joined_seq = i as u64 + 1;
        }
        s
    }

    pub fn state_of(&self, node: NodeId) -> NodeState {
        self.nodes.get(&node).map_or(NodeState::Down, |n| n.state)
    }

    pub fn groups(&self) -> Vec<Vec<NodeId>> {
        self.config.node_groups()
    }

    pub fn group_count(&self) -> u32 {
        self.groups().len().max(1) as u32
    }

    /// The node group holding `node`.
    pub fn group_of_node(&self, node: NodeId) -> Option<usize> {
        self.groups().iter().position(|g| g.contains(&node))
    }

    /// The members of a partition's group in preferred-primary order.
    pub fn preferred(&self, partition: u32) -> Vec<NodeId> {
        let groups = self.groups();
        let g = group_of(partition, groups.len() as u32) as usize;
        let mut members = groups.get(g).cloned().unwrap_or_default();
        if !members.is_empty() {
            let r = primary_rank(partition, groups.len() as u32, self.config.ldm_workers, members.len());
            members.rotate_left(r);
        }
        members
    }

    /// The replica list of a partition: started members in preferred order, then copying ones.
    /// Empty when no member holds a replica (the cluster is down).
    pub fn replicas(&self, partition: u32) -> Vec<NodeId> {
        let pref = self.preferred(partition);
        let mut out: Vec<NodeId> = pref.iter().copied().filter(|&n| self.state_of(n) == NodeState::Started).collect();
        out.extend(pref.iter().copied().filter(|&n| self.state_of(n) == NodeState::Copying));
        out
    }

    pub fn primary(&self, partition: u32) -> Option<NodeId> {
        self.replicas(partition).first().copied().filter(|&n| self.state_of(n) == NodeState::Started)
    }

    pub fn ldm_of(&self, partition: u32) -> u16 {
        ldm_of(partition, self.group_count(), self.config.ldm_workers)
    }

    /// The master: the started node that joined first.
    pub fn master(&self) -> Option<NodeId> {
        self.nodes
            .iter()
            .filter(|(_, s)| s.state == NodeState::Started)
            .min_by_key(|(id, s)| (s.joined_seq, **id))
            .map(|(id, _)| *id)
    }

    /// Nodes holding replicas (in write chains), ascending.
    /// The nodes live in `old` that are gone in this newer map: out of the chains, or back in
    /// them as a new incarnation (a map that went out while the node was down may never have
    /// reached a block: its restart must still count as the previous incarnation's failure).
    pub fn failed_since(&self, old: &ClusterState) -> Vec<NodeId> {
        old.live_nodes()
            .into_iter()
            .filter(|n| match (old.nodes.get(n), self.nodes.get(n)) {
                (Some(o), Some(s)) => !s.state.in_chains() || s.incarnation != o.incarnation,
                _ => true,
            })
            .collect()
    }

    pub fn live_nodes(&self) -> Vec<NodeId> {
        self.nodes.iter().filter(|(_, s)| s.state.in_chains()).map(|(id, _)| *id).collect()
    }

    /// NDB's survivability rule for a set of nodes that would remain after a failure: `Lose` when
    /// some node group has no member left, `Win` when some group is complete or more than half of
    /// the previously live nodes remain, else `Ask` (the arbitrator decides).
    pub fn survivability(&self, remaining: &[NodeId]) -> Survival {
        let before = self.live_nodes();
        let groups = self.groups();
        let mut any_complete = false;
        for g in &groups {
            let live_before: Vec<NodeId> = g.iter().copied().filter(|n| before.contains(n)).collect();
            let left = live_before.iter().filter(|n| remaining.contains(n)).count();
            if left == 0 {
                return Survival::Lose;
            }
            if left == live_before.len() {
                any_complete = true;
            }
        }
        let left = before.iter().filter(|n| remaining.contains(n)).count();
        if any_complete || 2 * left > before.len() { Survival::Win } else { Survival::Ask }
    }

    /// Which of two live nodes that cannot reach each other to fail (NDB's arbitration): keep the
    /// side with the better survivability; on a tie keep the master, else the node that joined
    /// first.
    pub fn choose_victim(&self, a: NodeId, b: NodeId) -> NodeId {
        let rank = |s: Survival| match s {
            Survival::Win => 2,
            Survival::Ask => 1,
            Survival::Lose => 0,
        };
        let live = self.live_nodes();
        let without = |n: NodeId| -> Vec<NodeId> { live.iter().copied().filter(|&m| m != n).collect() };
        let keep_b = rank(self.survivability(&without(a)));
        let keep_a = rank(self.survivability(&without(b)));
        if keep_b != keep_a {
            return if keep_b > keep_a { a } else { b };
        }
        match self.master() {
            Some(m) if m == a => return b,
            Some(m) if m == b => return a,
            _ => {}
        }
        let order = |n: NodeId| (self.nodes.get(&n).map_or(0, |s| s.joined_seq), n);
        if order(a) > order(b) { a } else { b }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut e = Enc::new(out);
        e.u16(STATE_FORMAT);
        e.u64(self.version);
        self.config.encode(&mut e);
        e.u32(self.nodes.len() as u32);
        for (id, s) in &self.nodes {
            e.u16(*id);
            e.u8(s.state as u8);
            e.u32(s.incarnation);
            e.u64(s.joined_seq);
        }
        e.u64(self.durable_epoch);
        e.bool(self.cluster_down);
    }

    pub fn decode(bytes: &[u8]) -> DecodeResult<ClusterState> {
        let mut d = Dec::new(bytes);
        let s = Self::decode_from(&mut d)?;
        if !d.is_empty() {
            return Err(DecodeError("trailing bytes after the cluster state"));
        }
        Ok(s)
    }

    pub fn decode_from(d: &mut Dec) -> DecodeResult<ClusterState> {
        if d.u16()? != STATE_FORMAT {
            return Err(DecodeError("unknown cluster state format"));
        }
        let version = d.u64()?;
        let config = ClusterConfig::decode(d)?;
        let n = d.len(DATA_NODES_MAX)?;
        let mut nodes = BTreeMap::new();
        for _ in 0..n {
            let id = d.u16()?;
            let state = NodeState::from_u8(d.u8()?)?;
            nodes.insert(id, NodeStatus { state, incarnation: d.u32()?, joined_seq: d.u64()? });
        }
        Ok(ClusterState { version, config, nodes, durable_epoch: d.u64()?, cluster_down: d.bool()? })
    }
}

/// The partition map of one cluster state, precomputed for the hot path: placement repeats
/// every `G·L·R` partitions, so one replica list per residue covers every partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routing {
    pub version: u64,
    groups: u32,
    ldms: u16,
    /// Replica lists (primary first) per residue `p mod period`.
    lists: Vec<Vec<NodeId>>,
}

impl Routing {
    pub fn new(state: &ClusterState) -> Routing {
        let groups = state.group_count();
        let ldms = state.config.ldm_workers.max(1);
        let period = groups * ldms as u32 * state.config.replicas.max(1) as u32;
        let lists = (0..period).map(|p| state.replicas(p)).collect();
        Routing { version: state.version, groups, ldms, lists }
    }

    /// Replicas of a partition, primary first (empty when none is live).
    pub fn replicas(&self, partition: u32) -> &[NodeId] {
        &self.lists[(partition % self.lists.len() as u32) as usize]
    }

    pub fn ldm_of(&self, partition: u32) -> u16 {
        ldm_of(partition, self.groups, self.ldms)
    }

    pub fn group_of(&self, partition: u32) -> u32 {
        group_of(partition, self.groups)
    }

    pub fn groups(&self) -> u32 {
        self.groups
    }
}

const STATE_FORMAT: u16 = 1;

/// The outcome of NDB's survivability check (ndb-protocols.md §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Survival {
    Win,
    Ask,
    Lose,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(nodes: u16, replicas: u8, ldms: u16) -> ClusterConfig {
        ClusterConfig {
            replicas,
            data_nodes: (1..=nodes).map(|id| DataNodeSpec { id, host: "127.0.0.1".into(), port: 11860 + id }).collect(),
            mgmds: vec![MgmdSpec { id: 65, host: "127.0.0.1".into(), port: 1186 }],
            ldm_workers: ldms,
            epoch_interval_ms: 100,
            heartbeat_interval_ms: 100,
            failure_timeout_ms: 1000,
        }
    }

    #[test]
    fn every_ldm_of_every_node_is_preferred_primary_of_one_default_partition() {
        for (nodes, replicas, ldms) in [(1, 1, 2), (2, 2, 2), (4, 2, 3), (3, 3, 1), (2, 1, 4)] {
            let c = cfg(nodes, replicas, ldms);
            c.validate().unwrap();
            let s = ClusterState::all_started(c.clone());
            let mut seen = std::collections::BTreeSet::new();
            for p in 0..c.default_partitions() {
                let r = s.replicas(p);
                assert_eq!(r.len(), replicas as usize);
                assert!(seen.insert((r[0], s.ldm_of(p))), "({nodes},{replicas},{ldms}) partition {p}");
                // Every replica is in the partition's node group.
                let g = group_of(p, s.group_count()) as usize;
                assert!(r.iter().all(|n| s.groups()[g].contains(n)));
            }
            assert_eq!(seen.len(), nodes as usize * ldms as usize);
        }
    }

    #[test]
    fn a_failed_primary_is_replaced_by_the_next_replica_and_a_copying_node_goes_last() {
        let mut s = ClusterState::all_started(cfg(2, 2, 2));
        let p = (0..4).find(|&p| s.primary(p) == Some(1)).unwrap();
        assert_eq!(s.replicas(p), vec![1, 2]);
        s.nodes.get_mut(&1).unwrap().state = NodeState::Down;
        assert_eq!(s.replicas(p), vec![2]);
        assert_eq!(s.primary(p), Some(2));
        s.nodes.get_mut(&1).unwrap().state = NodeState::Copying;
        assert_eq!(s.replicas(p), vec![2, 1]);
        assert_eq!(s.primary(p), Some(2));
        s.nodes.get_mut(&2).unwrap().state = NodeState::Down;
        assert_eq!(s.primary(p), None, "a copying node is never primary");
    }

    #[test]
    fn routing_matches_the_state_for_every_partition() {
        let mut s = ClusterState::all_started(cfg(4, 2, 3));
        s.nodes.get_mut(&3).unwrap().state = NodeState::Copying;
        let r = Routing::new(&s);
        for p in 0..500 {
            assert_eq!(r.replicas(p), &s.replicas(p)[..]);
            assert_eq!(r.ldm_of(p), s.ldm_of(p));
        }
    }

    #[test]
    fn master_is_the_started_node_that_joined_first() {
        let mut s = ClusterState::all_started(cfg(4, 2, 1));
        assert_eq!(s.master(), Some(1));
        s.nodes.get_mut(&1).unwrap().state = NodeState::Down;
        assert_eq!(s.master(), Some(2));
        s.nodes.get_mut(&1).unwrap().state = NodeState::Started;
        s.nodes.get_mut(&1).unwrap().joined_seq = 10;
        assert_eq!(s.master(), Some(2));
    }

    #[test]
    fn survivability_follows_ndb() {
        let s = ClusterState::all_started(cfg(4, 2, 1)); // groups [1,2] [3,4]
        assert_eq!(s.survivability(&[1, 2, 3]), Survival::Win); // a complete group
        assert_eq!(s.survivability(&[1, 3]), Survival::Ask); // half, no complete group
        assert_eq!(s.survivability(&[1, 2]), Survival::Lose); // group [3,4] gone
        let s2 = ClusterState::all_started(cfg(2, 2, 1));
        assert_eq!(s2.survivability(&[1]), Survival::Ask);
        assert_eq!(s2.survivability(&[]), Survival::Lose);
    }

    #[test]
    fn config_rules_and_round_trip() {
        assert!(cfg(3, 2, 2).validate().unwrap_err().contains("multiple of replicas"));
        assert!(cfg(2, 4, 2).validate().is_err());
        let mut c = cfg(2, 2, 2);
        c.failure_timeout_ms = 200;
        assert!(c.validate().unwrap_err().contains("heartbeat"));
        let mut s = ClusterState::all_started(cfg(4, 2, 3));
        s.durable_epoch = 77;
        s.version = 9;
        let mut buf = Vec::new();
        s.encode(&mut buf);
        assert_eq!(ClusterState::decode(&buf).unwrap(), s);
        assert!(ClusterState::decode(&buf[..buf.len() - 1]).is_err());
    }
}
