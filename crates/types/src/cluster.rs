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
use std::collections::{BTreeMap, BTreeSet};

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
    /// The node's location domain (availability zone, RonDB's `LocationDomainId`), 0: none.
    /// READ_BACKUP reads prefer a replica in the reader's domain; the cluster file's node groups
    /// spread their replicas over the domains where they can.
    pub location_domain: u8,
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
            data_nodes: vec![DataNodeSpec { id: 1, host: host.into(), port, location_domain: 0 }],
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

    /// The node groups when the first `base` of them are the cluster file's: those spread
    /// each group's replicas over the location domains where they can (a group takes its next
    /// node from the domain with the most nodes left that it has none of yet, nodes in id order
    /// within a domain); groups added later (`CREATE NODEGROUP`) are as their nodes were given.
    /// Without location domains this is `node_groups`.
    pub fn node_groups_spread(&self, base: usize) -> Vec<Vec<NodeId>> {
        let r = self.replicas.max(1) as usize;
        let mut ids: Vec<(NodeId, u8)> = self.data_nodes.iter().map(|d| (d.id, d.location_domain)).collect();
        ids.sort_unstable();
        let first = (base * r).min(ids.len());
        if ids[..first].iter().all(|&(_, d)| d == ids[0].1) {
            return self.node_groups();
        }
        // Domains in the order they first appear, each with its nodes left (ascending ids).
        let mut buckets: Vec<(u8, std::collections::VecDeque<NodeId>)> = Vec::new();
        for &(id, d) in &ids[..first] {
            match buckets.iter_mut().find(|(b, _)| *b == d) {
                Some((_, v)) => v.push_back(id),
                None => buckets.push((d, std::collections::VecDeque::from([id]))),
            }
        }
        let mut groups = Vec::new();
        for _ in 0..first.div_ceil(r) {
            let mut g: Vec<NodeId> = Vec::with_capacity(r);
            let mut used: Vec<u8> = Vec::new();
            for _ in 0..r {
                let pick = |fresh: bool| {
                    buckets
                        .iter()
                        .enumerate()
                        .filter(|(_, (d, v))| !v.is_empty() && (!fresh || !used.contains(d)))
                        .max_by_key(|(i, (_, v))| (v.len(), std::cmp::Reverse(*i)))
                        .map(|(i, _)| i)
                };
                let Some(i) = pick(true).or_else(|| pick(false)) else { break };
                used.push(buckets[i].0);
                g.push(buckets[i].1.pop_front().expect("not empty"));
            }
            g.sort_unstable();
            groups.push(g);
        }
        let rest: Vec<NodeId> = ids[first..].iter().map(|&(id, _)| id).collect();
        groups.extend(rest.chunks(r).map(|c| c.to_vec()));
        groups
    }

    /// A data node's location domain (0: none, or not a data node of this cluster).
    pub fn domain_of(&self, node: NodeId) -> u8 {
        self.data_node(node).map_or(0, |d| d.location_domain)
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
            data_nodes.push(DataNodeSpec { id: d.u16()?, host: d.string()?, port: d.u16()?, location_domain: 0 });
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
    /// The node groups of the cluster as first configured: where tables of `groups == 0`
    /// (created before node groups could be added) have their default homes.
    pub base_groups: u32,
    /// Node groups `0..active_groups` take new tables (`Table::groups` of a table created now)
    /// and are balanced by reorganisations; a group added later joins once all its members have
    /// started.
    pub active_groups: u32,
    /// Reorganise every table over the active groups (`AddNodes` with automatic moves), besides
    /// the tables in `rebalance` (ALTER TABLE … REORGANIZE PARTITION).
    pub rebalance_all: bool,
    pub rebalance: BTreeSet<u32>,
    /// Partitions away from their default home, or being moved: (table id, partition).
    pub placed: BTreeMap<(u32, u32), Placed>,
    /// Added node groups taken out of service (NDB's DROP NODEGROUP, done online): their
    /// partitions move away, and they do not come back into service by themselves. Every
    /// partition homed in one has an explicit placement (`pin_draining`), so the map alone tells
    /// whether the group still holds data.
    pub draining: BTreeSet<u32>,
}

/// Where a partition lives: its node group, the ldm worker that holds it on every member of the
/// group, and the rotation of the group's members that puts its preferred primary first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Home {
    pub group: u32,
    pub ldm: u16,
    pub rank: u8,
}

/// A partition's home and, while it moves to another node group, the move (NDB's online
/// reorganisation, done here a whole partition at a time with the node-restart copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub home: Home,
    pub moving: Option<PartMove>,
    /// The change-log generation of the partition's home primary (`ClusterState::logs_changes`):
    /// a move's target logs with `log_gen + 1`, and keeps that number when the move completes; a
    /// cancelled move leaves the home at `log_gen + 2`. A backup's restore orders one key's
    /// changes by (epoch, log_gen), so each leader's changes come after its predecessor's.
    pub log_gen: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartMove {
    pub to: Home,
    pub phase: MovePhase,
    /// Target replicas (node, incarnation) that hold every row and a checkpoint of them.
    pub copied: Vec<(NodeId, u32)>,
    /// Source replicas (node, incarnation) that have stopped serving reads of the partition.
    pub left: Vec<(NodeId, u32)>,
}

/// The phases of a move. `Copying`: the chain is the source group's replicas, then the target
/// group's (copying; writes reach them, reads do not). `Switched`: the target group's replicas
/// lead (its preferred member is primary) and the source's follow, still written but no longer
/// read. Once every live source replica has said it reads the partition no more, the move is
/// done: the home is the target and the source replicas drop their copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MovePhase {
    Copying = 0,
    Switched = 1,
}

/// A partition's replica chain: (node, ldm) primary first; the first `readable` are full
/// replicas that may serve reads, the rest are written only (copying, or leaving after a move).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chain {
    pub replicas: Vec<(NodeId, u16)>,
    pub readable: usize,
}

impl ClusterState {
    pub fn new(config: ClusterConfig) -> ClusterState {
        let nodes = config
            .data_nodes
            .iter()
            .map(|d| (d.id, NodeStatus { state: NodeState::Down, incarnation: 0, joined_seq: 0 }))
            .collect();
        let groups = config.node_groups().len().max(1) as u32;
        ClusterState {
            version: 1,
            config,
            nodes,
            durable_epoch: 0,
            cluster_down: false,
            base_groups: groups,
            active_groups: groups,
            rebalance_all: false,
            rebalance: BTreeSet::new(),
            placed: BTreeMap::new(),
            draining: BTreeSet::new(),
        }
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
        self.config.node_groups_spread(self.base_groups as usize)
    }

    pub fn group_count(&self) -> u32 {
        self.groups().len().max(1) as u32
    }

    /// The node group holding `node`.
    pub fn group_of_node(&self, node: NodeId) -> Option<usize> {
        self.groups().iter().position(|g| g.contains(&node))
    }

    /// A partition's default home: group `p mod G`, ldm `(p / G) mod L`, preferred-primary rank
    /// `(p / (G·L)) mod R`, where `G` is the table's `groups` (0: the base groups).
    pub fn default_home(&self, groups: u32, partition: u32) -> Home {
        let g = if groups == 0 { self.base_groups } else { groups }.max(1);
        let ldms = self.config.ldm_workers;
        Home {
            group: group_of(partition, g),
            ldm: ldm_of(partition, g, ldms),
            rank: primary_rank(partition, g, ldms, self.config.replicas as usize) as u8,
        }
    }

    /// Where partition `partition` of table `table` (created over `groups` node groups) lives.
    pub fn home(&self, table: u32, groups: u32, partition: u32) -> Home {
        self.placed.get(&(table, partition)).map_or_else(|| self.default_home(groups, partition), |p| p.home)
    }

    /// The members of a home's group in preferred-primary order.
    pub fn preferred(&self, home: Home) -> Vec<NodeId> {
        let mut members = self.groups().get(home.group as usize).cloned().unwrap_or_default();
        if !members.is_empty() {
            let r = home.rank as usize % members.len();
            members.rotate_left(r);
        }
        members
    }

    /// The chain of a home: started members in preferred order, then copying ones.
    fn home_chain(&self, home: Home) -> (Vec<(NodeId, u16)>, usize) {
        let pref = self.preferred(home);
        let started: Vec<(NodeId, u16)> =
            pref.iter().filter(|&&n| self.state_of(n) == NodeState::Started).map(|&n| (n, home.ldm)).collect();
        let readable = started.len();
        let mut out = started;
        out.extend(pref.iter().filter(|&&n| self.state_of(n) == NodeState::Copying).map(|&n| (n, home.ldm)));
        (out, readable)
    }

    /// Whether the ldm `me` puts a partition's commits into the backups' change logs, and with
    /// which generation: the chain's head does (the home's primary, or after a switch the
    /// target's), and while a move copies so does the target's primary — from when it joins
    /// the chain it sees every commit, so the log holds each key's commits in order once the
    /// restore takes the newer generation's entry of an epoch (see `Placed::gen`).
    pub fn logs_changes(&self, table: u32, groups: u32, partition: u32, me: (NodeId, u16)) -> Option<u32> {
        let placed = self.placed.get(&(table, partition));
        let log_gen = placed.map_or(0, |p| p.log_gen);
        let moving = placed.and_then(|p| p.moving.as_ref());
        let chain = self.chain(table, groups, partition);
        if chain.readable > 0 && chain.replicas[0] == me {
            return Some(log_gen + u32::from(moving.is_some_and(|m| m.phase == MovePhase::Switched)));
        }
        let m = moving.filter(|m| m.phase == MovePhase::Copying)?;
        (self.home_chain(m.to).0.first() == Some(&me)).then_some(log_gen + 1)
    }

    /// The replica chain of a partition (see `Chain` and `MovePhase`). Empty when no member holds
    /// a replica (the cluster is down).
    pub fn chain(&self, table: u32, groups: u32, partition: u32) -> Chain {
        let placed = self.placed.get(&(table, partition));
        let home = placed.map_or_else(|| self.default_home(groups, partition), |p| p.home);
        let (mut replicas, readable) = self.home_chain(home);
        match placed.and_then(|p| p.moving.as_ref()) {
            None => Chain { replicas, readable },
            Some(m) if m.phase == MovePhase::Copying => {
                replicas.extend(self.home_chain(m.to).0);
                Chain { replicas, readable }
            }
            Some(m) => {
                let (mut lead, readable) = self.home_chain(m.to);
                if readable == 0 {
                    // Switched, and no target replica is a full one: nobody may serve it.
                    return Chain::default();
                }
                lead.append(&mut replicas);
                Chain { replicas: lead, readable }
            }
        }
    }

    /// The primary of a partition: the chain's head when it is a full replica.
    pub fn primary(&self, table: u32, groups: u32, partition: u32) -> Option<NodeId> {
        let c = self.chain(table, groups, partition);
        (c.readable > 0).then(|| c.replicas[0].0)
    }

    /// The ldm instance that holds a partition on `node` (when the node is one of its replicas,
    /// or a move's target).
    pub fn ldm_on(&self, node: NodeId, table: u32, groups: u32, partition: u32) -> Option<u16> {
        let g = self.group_of_node(node)? as u32;
        let placed = self.placed.get(&(table, partition));
        let home = placed.map_or_else(|| self.default_home(groups, partition), |p| p.home);
        if home.group == g {
            return Some(home.ldm);
        }
        placed.and_then(|p| p.moving.as_ref()).filter(|m| m.to.group == g).map(|m| m.to.ldm)
    }

    /// The node groups that hold data: losing every member of one loses data. A group added
    /// later holds data once it is active or some partition lives there (or is switched to it).
    pub fn data_groups(&self) -> BTreeSet<u32> {
        let mut g: BTreeSet<u32> = (0..self.active_groups.max(self.base_groups)).collect();
        for p in self.placed.values() {
            g.insert(p.home.group);
            if let Some(m) = p.moving.as_ref().filter(|m| m.phase == MovePhase::Switched) {
                g.insert(m.to.group);
            }
        }
        g
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
        let holding = self.data_groups();
        let mut any_complete = false;
        // A group that holds no data yet (added, nothing moved there) neither loses nor wins.
        for (_, g) in groups.iter().enumerate().filter(|(i, _)| holding.contains(&(*i as u32))) {
            let live_before: Vec<NodeId> = g.iter().copied().filter(|n| before.contains(n)).collect();
            let left = live_before.iter().filter(|n| remaining.contains(n)).count();
            if left == 0 {
                return Survival::Lose;
            }
            if left == live_before.len() {
                any_complete = true;
            }
        }
        let in_data = |n: &&NodeId| self.group_of_node(**n).is_some_and(|g| holding.contains(&(g as u32)));
        let before: Vec<NodeId> = before.iter().filter(in_data).copied().collect();
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
        e.u32(self.base_groups);
        e.u32(self.active_groups);
        e.bool(self.rebalance_all);
        e.u32(self.rebalance.len() as u32);
        self.rebalance.iter().for_each(|&t| e.u32(t));
        e.u32(self.placed.len() as u32);
        let home = |e: &mut Enc, h: &Home| {
            e.u32(h.group);
            e.u16(h.ldm);
            e.u8(h.rank);
        };
        let members = |e: &mut Enc, v: &[(NodeId, u32)]| {
            e.u32(v.len() as u32);
            for &(n, i) in v {
                e.u16(n);
                e.u32(i);
            }
        };
        for (&(t, p), pl) in &self.placed {
            e.u32(t);
            e.u32(p);
            home(&mut e, &pl.home);
            match &pl.moving {
                None => e.u8(0),
                Some(m) => {
                    e.u8(1 + m.phase as u8);
                    home(&mut e, &m.to);
                    members(&mut e, &m.copied);
                    members(&mut e, &m.left);
                }
            }
        }
        e.u32(self.draining.len() as u32);
        self.draining.iter().for_each(|&g| e.u32(g));
        // Format 4: the data nodes' location domains (those that have one).
        let domains: Vec<(NodeId, u8)> = self
            .config
            .data_nodes
            .iter()
            .filter(|d| d.location_domain != 0)
            .map(|d| (d.id, d.location_domain))
            .collect();
        e.u32(domains.len() as u32);
        for (id, d) in domains {
            e.u16(id);
            e.u8(d);
        }
        // Format 5: the change-log generations of placements that have one.
        let gens: Vec<(&(u32, u32), u32)> =
            self.placed.iter().filter(|(_, p)| p.log_gen != 0).map(|(k, p)| (k, p.log_gen)).collect();
        e.u32(gens.len() as u32);
        for (&(t, p), g) in gens {
            e.u32(t);
            e.u32(p);
            e.u32(g);
        }
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
        let format = d.u16()?;
        if !(1..=STATE_FORMAT).contains(&format) {
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
        let mut s = ClusterState::new(config);
        s.version = version;
        s.nodes = nodes;
        s.durable_epoch = d.u64()?;
        s.cluster_down = d.bool()?;
        if format == 1 {
            return Ok(s); // before node groups could be added: every group is a base group
        }
        s.base_groups = d.u32()?;
        s.active_groups = d.u32()?;
        s.rebalance_all = d.bool()?;
        for _ in 0..d.len(1 << 24)? {
            s.rebalance.insert(d.u32()?);
        }
        let home = |d: &mut Dec| -> DecodeResult<Home> { Ok(Home { group: d.u32()?, ldm: d.u16()?, rank: d.u8()? }) };
        let members = |d: &mut Dec| -> DecodeResult<Vec<(NodeId, u32)>> {
            (0..d.len(DATA_NODES_MAX)?).map(|_| Ok((d.u16()?, d.u32()?))).collect()
        };
        for _ in 0..d.len(1 << 24)? {
            let key = (d.u32()?, d.u32()?);
            let h = home(d)?;
            let moving = match d.u8()? {
                0 => None,
                tag @ (1 | 2) => Some(PartMove {
                    phase: if tag == 1 { MovePhase::Copying } else { MovePhase::Switched },
                    to: home(d)?,
                    copied: members(d)?,
                    left: members(d)?,
                }),
                _ => return Err(DecodeError("bad partition move tag")),
            };
            s.placed.insert(key, Placed { home: h, moving, log_gen: 0 });
        }
        if format >= 3 {
            for _ in 0..d.len(DATA_NODES_MAX)? {
                s.draining.insert(d.u32()?);
            }
        }
        if format >= 4 {
            for _ in 0..d.len(DATA_NODES_MAX)? {
                let (id, domain) = (d.u16()?, d.u8()?);
                let node = s.config.data_nodes.iter_mut().find(|n| n.id == id);
                node.ok_or(DecodeError("a location domain of an unknown data node"))?.location_domain = domain;
            }
        }
        if format >= 5 {
            for _ in 0..d.len(1 << 24)? {
                let (key, log_gen) = ((d.u32()?, d.u32()?), d.u32()?);
                s.placed
                    .get_mut(&key)
                    .ok_or(DecodeError("a change-log generation of an unplaced partition"))?
                    .log_gen = log_gen;
            }
        }
        Ok(s)
    }
}

/// Moves running at once, cluster-wide: each copies one partition to every member of its
/// target group.
pub const MOVES_RUNNING_MAX: usize = 2;

/// A table as the planner of moves sees it: (id, `Table::groups`, partition count).
pub type TableShape = (u32, u32, u32);

/// Online scale-out (NDB's add node group + ALTER TABLE … REORGANIZE PARTITION, a whole partition
/// at a time). Every change here is one new map version; the control plane applies them, the data
/// nodes only copy and report (`ControlReq::MoveCopied` / `MoveLeft`).
impl ClusterState {
    /// Adds data nodes that form new node groups (NDB: the nodes in config.ini, then CREATE
    /// NODEGROUP). They start `Down` and hold nothing until partitions move to them; their ids
    /// come after every existing data node's, so the existing groups keep their numbers.
    pub fn add_nodes(&mut self, nodes: &[DataNodeSpec]) -> Result<(), String> {
        let r = self.config.replicas.max(1) as usize;
        if nodes.is_empty() || !nodes.len().is_multiple_of(r) {
            return Err(format!("{} data nodes cannot form node groups of {r} replicas", nodes.len()));
        }
        let top = self.config.data_nodes.iter().map(|d| d.id).max().unwrap_or(0);
        if let Some(d) = nodes.iter().find(|d| d.id <= top) {
            return Err(format!("node id {} must be above every existing data node id ({top})", d.id));
        }
        let mut config = self.config.clone();
        config.data_nodes.extend(nodes.iter().cloned());
        config.data_nodes.sort_by_key(|d| d.id);
        config.validate()?;
        for d in nodes {
            self.nodes.insert(d.id, NodeStatus { state: NodeState::Down, incarnation: 0, joined_seq: 0 });
        }
        self.config = config;
        self.version += 1;
        Ok(())
    }

    /// Groups past the active ones join, in order, once every member has started. Returns whether
    /// anything changed (the caller bumps the version once for all changes of one command).
    pub fn activate_groups(&mut self) -> bool {
        let groups = self.groups();
        let before = self.active_groups;
        while let Some(g) = groups.get(self.active_groups as usize) {
            if self.draining.contains(&self.active_groups) || !g.iter().all(|&n| self.state_of(n) == NodeState::Started)
            {
                break;
            }
            self.active_groups += 1;
        }
        self.active_groups != before
    }

    /// Takes the last node group in service out of it (NDB's DROP NODEGROUP, online): new tables
    /// no longer use it and the planner moves every partition off it; `remove_group` drops it
    /// once it is empty. Only groups added to the cluster can go (the first ones hold the
    /// default homes of every older table). `tables`: every table of the catalog.
    pub fn drain_group(&mut self, group: u32, tables: &[TableShape]) -> Result<(), String> {
        if group < self.base_groups {
            return Err(format!(
                "node group {group} is one of the cluster's first {} node groups: only added node groups can be dropped",
                self.base_groups
            ));
        }
        if self.draining.contains(&group) {
            return Ok(()); // asked again
        }
        if group + 1 != self.active_groups {
            return Err(format!(
                "node group {group} is not the last node group in service (node groups 0-{} are): drop the last one first",
                self.active_groups.saturating_sub(1)
            ));
        }
        self.active_groups -= 1;
        self.draining.insert(group);
        self.pin_draining(tables);
        self.version += 1;
        Ok(())
    }

    /// Partitions whose default home is in a draining group get an explicit placement there (a
    /// table created while a drain began may still name the group). Returns whether any did.
    pub fn pin_draining(&mut self, tables: &[TableShape]) -> bool {
        if self.draining.is_empty() {
            return false;
        }
        let mut changed = false;
        for &(t, g, parts) in tables {
            for p in 0..parts {
                let home = self.default_home(g, p);
                if self.draining.contains(&home.group) && !self.placed.contains_key(&(t, p)) {
                    self.placed.insert((t, p), Placed { home, moving: None, log_gen: 0 });
                    changed = true;
                }
            }
        }
        changed
    }

    /// Puts a draining group back in service (once its members are started); what moved away
    /// stays away until a reorganisation moves it back.
    pub fn undrain_group(&mut self, group: u32) -> Result<(), String> {
        if !self.draining.remove(&group) {
            return Err(format!("node group {group} is not being dropped"));
        }
        self.activate_groups();
        self.version += 1;
        Ok(())
    }

    /// Whether any partition lives in `group` or is moving there.
    pub fn group_holds_data(&self, group: u32, tables: &[TableShape]) -> bool {
        let placed = self
            .placed
            .values()
            .any(|p| p.home.group == group || p.moving.as_ref().is_some_and(|m| m.to.group == group));
        placed
            || tables.iter().any(|&(t, g, parts)| {
                (0..parts).any(|p| !self.placed.contains_key(&(t, p)) && self.default_home(g, p).group == group)
            })
    }

    /// Removes an empty node group that is out of service (drained, or added and never put in
    /// service) and is the last one, with its data nodes, which must be stopped.
    pub fn remove_group(&mut self, group: u32, tables: &[TableShape]) -> Result<(), String> {
        let groups = self.groups();
        let Some(members) = groups.get(group as usize) else {
            return Err(format!("there is no node group {group}"));
        };
        if group < self.base_groups {
            return Err(format!("node group {group} is one of the cluster's first node groups: it cannot be dropped"));
        }
        if group as usize + 1 != groups.len() {
            return Err(format!(
                "node group {group} is not the last node group: drop node group {} first",
                groups.len() - 1
            ));
        }
        if group < self.active_groups {
            return Err(format!("node group {group} is in service: drop it (which drains it) first"));
        }
        if self.group_holds_data(group, tables) {
            return Err(format!("node group {group} still holds partitions: wait for them to move away"));
        }
        if let Some(n) = members.iter().find(|&&n| self.state_of(n) != NodeState::Down) {
            return Err(format!("data node {n} of node group {group} is running: stop it first"));
        }
        let gone: BTreeSet<NodeId> = members.iter().copied().collect();
        self.config.data_nodes.retain(|d| !gone.contains(&d.id));
        self.nodes.retain(|n, _| !gone.contains(n));
        self.draining.remove(&group);
        self.version += 1;
        Ok(())
    }

    /// Starts moving a partition to `to` (a home in another group whose every member is started).
    pub fn begin_move(&mut self, table: u32, groups: u32, partition: u32, to: Home) -> Result<(), String> {
        let home = self.home(table, groups, partition);
        if self.placed.get(&(table, partition)).is_some_and(|p| p.moving.is_some()) {
            return Err(format!("partition {partition} of table {table} is already moving"));
        }
        if to.group == home.group {
            return Err(format!("partition {partition} of table {table} is in node group {} already", to.group));
        }
        let members = self.groups().get(to.group as usize).cloned().unwrap_or_default();
        if members.is_empty() || !members.iter().all(|&n| self.state_of(n) == NodeState::Started) {
            return Err(format!("node group {} has members that are not started", to.group));
        }
        if to.ldm >= self.config.ldm_workers.max(1) || to.rank as usize >= members.len() {
            return Err(format!("no ldm {} / rank {} in node group {}", to.ldm, to.rank, to.group));
        }
        let moving = PartMove { to, phase: MovePhase::Copying, copied: Vec::new(), left: Vec::new() };
        let log_gen = self.placed.get(&(table, partition)).map_or(0, |p| p.log_gen);
        self.placed.insert((table, partition), Placed { home, moving: Some(moving), log_gen });
        self.version += 1;
        Ok(())
    }

    /// A target replica holds the partition (copied, checkpointed). When every target member
    /// has, in its current incarnation, the move switches.
    pub fn move_copied(&mut self, table: u32, partition: u32, node: NodeId) -> Result<(), String> {
        let inc = self.nodes.get(&node).map_or(0, |s| s.incarnation);
        let groups = self.groups();
        let Some(m) = self.placed.get_mut(&(table, partition)).and_then(|p| p.moving.as_mut()) else {
            return Err(format!("partition {partition} of table {table} is not moving"));
        };
        if m.phase != MovePhase::Copying || !groups.get(m.to.group as usize).is_some_and(|g| g.contains(&node)) {
            return Err(format!("node {node} is not copying partition {partition} of table {table}"));
        }
        if !m.copied.contains(&(node, inc)) {
            m.copied.push((node, inc));
            m.copied.sort_unstable();
        }
        self.settle_moves();
        self.version += 1;
        Ok(())
    }

    /// A source replica serves reads of a switched partition no more.
    pub fn move_left(&mut self, table: u32, partition: u32, node: NodeId) -> Result<(), String> {
        let inc = self.nodes.get(&node).map_or(0, |s| s.incarnation);
        let groups = self.groups();
        let Some(p) = self.placed.get_mut(&(table, partition)) else {
            return Err(format!("partition {partition} of table {table} is not moving"));
        };
        let home = p.home.group;
        let Some(m) = p.moving.as_mut().filter(|m| m.phase == MovePhase::Switched) else {
            return Err(format!("partition {partition} of table {table} has not switched"));
        };
        if !groups.get(home as usize).is_some_and(|g| g.contains(&node)) {
            return Err(format!("node {node} does not hold partition {partition} of table {table}"));
        }
        if !m.left.contains(&(node, inc)) {
            m.left.push((node, inc));
            m.left.sort_unstable();
        }
        self.settle_moves();
        self.version += 1;
        Ok(())
    }

    /// Gives up a move that has not switched (its table was dropped, or an operator asked).
    pub fn cancel_move(&mut self, table: u32, partition: u32) -> Result<(), String> {
        let Some(p) = self.placed.get_mut(&(table, partition)) else {
            return Err(format!("partition {partition} of table {table} is not moving"));
        };
        if p.moving.as_ref().is_none_or(|m| m.phase != MovePhase::Copying) {
            return Err(format!("partition {partition} of table {table} is not copying"));
        }
        p.moving = None;
        // The target logged with gen + 1 while it copied; the home's changes from now on come
        // after those.
        p.log_gen += 2;
        self.version += 1;
        Ok(())
    }

    /// Forgets the placements of tables that no longer exist (moves of them are dropped; a
    /// switched one is done as far as anyone can tell: nobody reads the table).
    pub fn forget_tables(&mut self, live: &BTreeSet<u32>) -> bool {
        let before = (self.placed.len(), self.rebalance.len());
        self.placed.retain(|(t, _), _| live.contains(t));
        self.rebalance.retain(|t| live.contains(t));
        before != (self.placed.len(), self.rebalance.len())
    }

    /// Moves whose condition holds take their next step: `Copying` switches when every target
    /// member is started and copied in its current incarnation; `Switched` is done when every
    /// source member in the chains has left in its current incarnation. Changes nothing about
    /// the version (the command that called it bumps it). Also called after membership changes.
    pub fn settle_moves(&mut self) -> bool {
        let groups = self.groups();
        let cur = |s: &ClusterState, n: NodeId| s.nodes.get(&n).map_or((n, 0), |x| (n, x.incarnation));
        let mut changed = false;
        let keys: Vec<(u32, u32)> = self.placed.keys().copied().collect();
        for k in keys {
            let p = &self.placed[&k];
            let Some(m) = &p.moving else { continue };
            let to = groups.get(m.to.group as usize).cloned().unwrap_or_default();
            let from = groups.get(p.home.group as usize).cloned().unwrap_or_default();
            let step = match m.phase {
                MovePhase::Copying => {
                    to.iter().all(|&n| self.state_of(n) == NodeState::Started && m.copied.contains(&cur(self, n)))
                }
                MovePhase::Switched => {
                    from.iter().filter(|&&n| self.state_of(n).in_chains()).all(|&n| m.left.contains(&cur(self, n)))
                }
            };
            if !step {
                continue;
            }
            changed = true;
            let p = self.placed.get_mut(&k).expect("listed");
            let m = p.moving.as_mut().expect("moving");
            if m.phase == MovePhase::Copying {
                m.phase = MovePhase::Switched;
                m.left.clear();
            } else {
                p.home = m.to;
                p.moving = None;
                p.log_gen += 1; // the target, home now, has logged with one more since the move began
            }
        }
        changed
    }

    /// Drops placements equal to their partition's default home (after moving back), given the
    /// tables' `groups`.
    pub fn tidy_placements(&mut self, tables: &[TableShape]) {
        for &(t, g, _) in tables {
            let defaults: Vec<u32> = self
                .placed
                .range((t, 0)..=(t, u32::MAX))
                .filter(|(k, pl)| {
                    // A moved partition keeps its placement: its change-log generation must
                    // not fall back to 0 while a backup may be running.
                    pl.log_gen == 0
                        && pl.moving.is_none()
                        && pl.home == self.default_home(g, k.1)
                        && !self.draining.contains(&pl.home.group)
                })
                .map(|(&(_, p), _)| p)
                .collect();
            for p in defaults {
                self.placed.remove(&(t, p));
            }
        }
    }

    /// The moves to start now so that the tables to reorganise (`rebalance_all`, or in
    /// `rebalance`) end up spread evenly over the active node groups, at most
    /// `MOVES_RUNNING_MAX` running at once: (table, groups, partition, target home). Pure and
    /// deterministic: tables in id order; a group above its share gives its highest partitions
    /// to the groups below theirs, lowest group first; on the target the partition goes to the
    /// ldm, then the preferred-primary rank, holding fewest of the table's partitions.
    pub fn plan_moves(&self, tables: &[TableShape]) -> Vec<(u32, u32, u32, Home)> {
        let running = self.placed.values().filter(|p| p.moving.is_some()).count();
        let mut budget = MOVES_RUNNING_MAX.saturating_sub(running);
        let mut plan = Vec::new();
        let active = self.active_groups.max(1);
        let groups = self.groups();
        let ready =
            |g: u32| groups.get(g as usize).is_some_and(|m| m.iter().all(|&n| self.state_of(n) == NodeState::Started));
        let mut sorted: Vec<TableShape> = tables.to_vec();
        sorted.sort_unstable();
        for (t, g, parts) in sorted {
            if budget == 0 {
                break;
            }
            // Where each partition is (a moving one counts where it goes).
            let at = |p: u32| -> Home {
                let pl = self.placed.get(&(t, p));
                pl.and_then(|x| x.moving.as_ref()).map_or_else(|| self.home(t, g, p), |m| m.to)
            };
            let balance = self.rebalance_all || self.rebalance.contains(&t);
            let homes: Vec<Home> = (0..parts).map(at).collect();
            // Tables not reorganised still leave groups out of service (drained).
            if parts == 0 || !(balance || homes.iter().any(|h| h.group >= active)) {
                continue;
            }
            let mut count = vec![0u32; active as usize];
            for h in &homes {
                if let Some(c) = count.get_mut(h.group as usize) {
                    *c += 1;
                }
            }
            // Shares: the groups holding most keep the larger shares (fewest moves).
            let (q, extra) = (parts / active, parts % active);
            let mut order: Vec<u32> = (0..active).collect();
            order.sort_by_key(|&x| (std::cmp::Reverse(count[x as usize]), x));
            let mut share = vec![q; active as usize];
            for &x in order.iter().take(extra as usize) {
                share[x as usize] += 1;
            }
            let mut homes = homes;
            for p in (0..parts).rev() {
                if budget == 0 {
                    break;
                }
                let from = homes[p as usize].group;
                let over = from >= active || (balance && count[from as usize] > share[from as usize]);
                let busy = self.placed.get(&(t, p)).is_some_and(|x| x.moving.is_some());
                if !over || busy {
                    continue;
                }
                let Some(to) = (0..active).find(|&x| count[x as usize] < share[x as usize] && ready(x)) else {
                    continue;
                };
                let members = groups[to as usize].len().max(1);
                let on_ldm = |l: u16| homes.iter().filter(|h| h.group == to && h.ldm == l).count();
                let ldm = (0..self.config.ldm_workers.max(1)).min_by_key(|&l| (on_ldm(l), l)).expect("an ldm");
                let on_rank = |r: u8| homes.iter().filter(|h| h.group == to && h.rank == r).count();
                let rank = (0..members as u8).min_by_key(|&r| (on_rank(r), r)).expect("a rank");
                let home = Home { group: to, ldm, rank };
                if from < active {
                    count[from as usize] -= 1;
                }
                count[to as usize] += 1;
                homes[p as usize] = home;
                plan.push((t, g, p, home));
                budget -= 1;
            }
        }
        plan
    }
}

const STATE_FORMAT: u16 = 5;

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

    /// The cluster file's node groups spread their replicas over the location domains (stable
    /// when groups are added later), and the domains survive the map's encoding.
    #[test]
    fn node_groups_spread_over_location_domains() {
        let mut c = cfg(4, 2, 1);
        assert_eq!(c.node_groups_spread(2), vec![vec![1, 2], vec![3, 4]], "no domains: consecutive");
        for (id, d) in [(1, 1), (2, 1), (3, 2), (4, 2)] {
            c.data_nodes[id - 1].location_domain = d;
        }
        assert_eq!(c.node_groups_spread(2), vec![vec![1, 3], vec![2, 4]]);
        // An added group (nodes 5, 6) is as given, and the first ones do not move.
        for id in [5, 6] {
            c.data_nodes.push(DataNodeSpec { id, host: "h".into(), port: 1, location_domain: 1 });
        }
        assert_eq!(c.node_groups_spread(2), vec![vec![1, 3], vec![2, 4], vec![5, 6]]);
        // Uneven domains: spread where it can.
        let mut c = cfg(4, 2, 1);
        for (id, d) in [(1, 1), (2, 1), (3, 1), (4, 2)] {
            c.data_nodes[id - 1].location_domain = d;
        }
        assert_eq!(c.node_groups_spread(2), vec![vec![1, 4], vec![2, 3]]);
        // Three replicas over three zones.
        let mut c = cfg(6, 3, 1);
        for (id, d) in [(1, 1), (2, 1), (3, 2), (4, 2), (5, 3), (6, 3)] {
            c.data_nodes[id - 1].location_domain = d;
        }
        assert_eq!(c.node_groups_spread(2), vec![vec![1, 3, 5], vec![2, 4, 6]]);
        let mut st = ClusterState::new(c.clone());
        assert_eq!(st.groups(), vec![vec![1, 3, 5], vec![2, 4, 6]]);
        st.version = 9;
        let mut bytes = Vec::new();
        st.encode(&mut bytes);
        let back = ClusterState::decode(&bytes).unwrap();
        assert_eq!(back.config, c);
        assert_eq!(back.config.domain_of(4), 2);
        assert_eq!(back.groups(), st.groups());
    }

    fn cfg(nodes: u16, replicas: u8, ldms: u16) -> ClusterConfig {
        ClusterConfig {
            replicas,
            data_nodes: (1..=nodes)
                .map(|id| DataNodeSpec { id, host: "127.0.0.1".into(), port: 11860 + id, location_domain: 0 })
                .collect(),
            mgmds: vec![MgmdSpec { id: 65, host: "127.0.0.1".into(), port: 1186 }],
            ldm_workers: ldms,
            epoch_interval_ms: 100,
            heartbeat_interval_ms: 100,
            failure_timeout_ms: 1000,
        }
    }

    fn nodes_of(c: &Chain) -> Vec<NodeId> {
        c.replicas.iter().map(|r| r.0).collect()
    }

    #[test]
    fn every_ldm_of_every_node_is_preferred_primary_of_one_default_partition() {
        for (nodes, replicas, ldms) in [(1, 1, 2), (2, 2, 2), (4, 2, 3), (3, 3, 1), (2, 1, 4)] {
            let c = cfg(nodes, replicas, ldms);
            c.validate().unwrap();
            let s = ClusterState::all_started(c.clone());
            let mut seen = std::collections::BTreeSet::new();
            for p in 0..c.default_partitions() {
                let ch = s.chain(1, 0, p);
                assert_eq!(ch.replicas.len(), replicas as usize);
                assert_eq!(ch.readable, replicas as usize);
                assert!(seen.insert(ch.replicas[0]), "({nodes},{replicas},{ldms}) partition {p}");
                // Every replica is in the partition's node group, on the same ldm.
                let h = s.home(1, 0, p);
                assert!(ch.replicas.iter().all(|&(n, l)| s.groups()[h.group as usize].contains(&n) && l == h.ldm));
                assert_eq!(s.ldm_on(ch.replicas[0].0, 1, 0, p), Some(h.ldm));
            }
            assert_eq!(seen.len(), nodes as usize * ldms as usize);
        }
    }

    #[test]
    fn a_failed_primary_is_replaced_by_the_next_replica_and_a_copying_node_goes_last() {
        let mut s = ClusterState::all_started(cfg(2, 2, 2));
        let p = (0..4).find(|&p| s.primary(1, 0, p) == Some(1)).unwrap();
        assert_eq!(nodes_of(&s.chain(1, 0, p)), vec![1, 2]);
        s.nodes.get_mut(&1).unwrap().state = NodeState::Down;
        assert_eq!(nodes_of(&s.chain(1, 0, p)), vec![2]);
        assert_eq!(s.primary(1, 0, p), Some(2));
        s.nodes.get_mut(&1).unwrap().state = NodeState::Copying;
        assert_eq!(
            s.chain(1, 0, p),
            Chain { replicas: vec![(2, s.home(1, 0, p).ldm), (1, s.home(1, 0, p).ldm)], readable: 1 }
        );
        assert_eq!(s.primary(1, 0, p), Some(2));
        s.nodes.get_mut(&2).unwrap().state = NodeState::Down;
        assert_eq!(s.primary(1, 0, p), None, "a copying node is never primary");
    }

    fn start(s: &mut ClusterState, n: NodeId) {
        let seq = s.nodes.values().map(|x| x.joined_seq).max().unwrap_or(0) + 1;
        let st = s.nodes.get_mut(&n).unwrap();
        st.state = NodeState::Started;
        st.incarnation += 1;
        st.joined_seq = seq;
    }

    #[test]
    fn a_partition_moves_to_an_added_node_group_through_copying_switched_and_done() {
        let mut s = ClusterState::all_started(cfg(2, 2, 1)); // one group [1,2]
        let new = |id| DataNodeSpec { id, host: "127.0.0.1".into(), port: 11860 + id, location_domain: 0 };
        assert!(s.add_nodes(&[new(3)]).unwrap_err().contains("node groups of 2"));
        assert!(s.add_nodes(&[new(1), new(5)]).unwrap_err().contains("above every existing"));
        let v = s.version;
        s.add_nodes(&[new(3), new(4)]).unwrap();
        assert_eq!((s.version, s.groups().len(), s.active_groups), (v + 1, 2, 1));
        // The empty group's nodes are down: that loses nothing.
        assert_eq!(s.survivability(&[1]), Survival::Ask);
        assert_eq!(s.survivability(&[1, 2]), Survival::Win);
        let tables = [(7, 0, 2)];
        assert!(s.plan_moves(&tables).is_empty(), "nothing to reorganise yet");
        s.rebalance_all = true;
        assert!(s.plan_moves(&tables).is_empty(), "the new group is not active");
        start(&mut s, 3);
        assert!(!s.activate_groups());
        start(&mut s, 4);
        assert!(s.activate_groups());
        assert_eq!(s.active_groups, 2);
        let plan = s.plan_moves(&tables);
        assert_eq!(plan, vec![(7, 0, 1, Home { group: 1, ldm: 0, rank: 0 })]);
        let (t, g, p, to) = plan[0];
        let before = s.chain(t, g, p);
        assert_eq!(nodes_of(&before), vec![2, 1]);
        s.begin_move(t, g, p, to).unwrap();
        assert!(s.begin_move(t, g, p, to).unwrap_err().contains("already moving"));
        assert!(s.plan_moves(&tables).is_empty(), "the move is under way");
        // Copying: the source leads and is read; the target is written.
        assert_eq!(s.chain(t, g, p), Chain { replicas: vec![(2, 0), (1, 0), (3, 0), (4, 0)], readable: 2 });
        // The change logs: the source's primary with generation 0, the target's with 1.
        let loggers = |s: &ClusterState| -> Vec<(NodeId, u32)> {
            (1..=4).filter_map(|n| s.logs_changes(t, g, p, (n, 0)).map(|x| (n, x))).collect()
        };
        assert_eq!(loggers(&s), vec![(2, 0), (3, 1)]);
        assert_eq!(s.ldm_on(3, t, g, p), Some(0));
        assert_eq!(s.ldm_on(3, t, g, 0), None);
        assert!(s.move_left(t, p, 1).unwrap_err().contains("not switched"));
        s.move_copied(t, p, 3).unwrap();
        assert_eq!(s.placed[&(t, p)].moving.as_ref().unwrap().phase, MovePhase::Copying);
        // A target that restarts must copy again in its new incarnation.
        s.nodes.get_mut(&3).unwrap().incarnation += 1;
        s.move_copied(t, p, 4).unwrap();
        assert!(!s.settle_moves());
        s.move_copied(t, p, 3).unwrap();
        assert_eq!(s.placed[&(t, p)].moving.as_ref().unwrap().phase, MovePhase::Switched);
        assert_eq!(s.chain(t, g, p), Chain { replicas: vec![(3, 0), (4, 0), (2, 0), (1, 0)], readable: 2 });
        assert_eq!(s.primary(t, g, p), Some(3));
        assert_eq!(loggers(&s), vec![(3, 1)], "the source logs no more once switched");
        // While switched the target group holds data: losing it loses the cluster.
        assert_eq!(s.survivability(&[1, 2]), Survival::Lose);
        let mut buf = Vec::new();
        s.encode(&mut buf);
        assert_eq!(ClusterState::decode(&buf).unwrap(), s);
        s.move_left(t, p, 2).unwrap();
        s.nodes.get_mut(&1).unwrap().state = NodeState::Down; // a failed source need not leave
        assert!(s.settle_moves());
        assert_eq!(s.placed[&(t, p)], Placed { home: to, moving: None, log_gen: 1 });
        assert_eq!(s.chain(t, g, p), Chain { replicas: vec![(3, 0), (4, 0)], readable: 2 });
        assert_eq!(loggers(&s), vec![(3, 1)], "the target keeps its generation as the home");
        assert_eq!(s.ldm_on(2, t, g, p), None);
        start(&mut s, 1);
        assert!(s.plan_moves(&tables).is_empty(), "balanced");
        // Back to one group (as a drain would): the home is the default again and is tidied.
        s.begin_move(t, g, p, s.default_home(g, p)).unwrap();
        for n in [1, 2] {
            s.move_copied(t, p, n).unwrap();
        }
        assert_eq!(loggers(&s), vec![(2, 2)], "switched back: the old home leads again, one generation on");
        for n in [3, 4] {
            s.move_left(t, p, n).unwrap();
        }
        // Back home, but a moved partition's placement stays: its generation must not fall back.
        s.tidy_placements(&tables);
        assert_eq!(s.placed[&(t, p)], Placed { home: s.default_home(g, p), moving: None, log_gen: 2 });
        assert_eq!(nodes_of(&s.chain(t, g, p)), vec![2, 1]);
        let mut buf = Vec::new();
        s.encode(&mut buf);
        assert_eq!(ClusterState::decode(&buf).unwrap(), s);
        // A cancelled move leaves the home a generation above its target's.
        s.begin_move(t, g, p, to).unwrap();
        assert_eq!(loggers(&s), vec![(2, 2), (3, 3)]);
        s.cancel_move(t, p).unwrap();
        assert_eq!(loggers(&s), vec![(2, 4)]);
    }

    #[test]
    fn the_planner_spreads_partitions_evenly_with_few_moves() {
        let mut s = ClusterState::all_started(cfg(6, 2, 2)); // groups [1,2] [3,4] [5,6]
        s.base_groups = 1;
        s.active_groups = 3;
        s.rebalance.insert(9);
        let tables = [(8, 0, 6), (9, 0, 6)];
        let mut moved = 0;
        loop {
            let plan = s.plan_moves(&tables);
            if plan.is_empty() {
                break;
            }
            assert!(plan.len() <= MOVES_RUNNING_MAX);
            for (t, _, p, to) in plan {
                assert_eq!(t, 9, "only the table asked for");
                s.begin_move(t, 0, p, to).unwrap();
                s.placed.get_mut(&(t, p)).unwrap().moving = None;
                s.placed.get_mut(&(t, p)).unwrap().home = to;
                moved += 1;
            }
        }
        assert_eq!(moved, 4);
        let mut per = BTreeMap::new();
        for p in 0..6 {
            let h = s.home(9, 0, p);
            *per.entry(h.group).or_insert(0) += 1;
            assert!(s.chain(9, 0, p).replicas.iter().all(|&(_, l)| l == h.ldm));
        }
        assert_eq!(per.into_values().collect::<Vec<_>>(), vec![2, 2, 2]);
        // Each group's two partitions use both ldms.
        let ldms: BTreeSet<(u32, u16)> = (0..6).map(|p| (s.home(9, 0, p).group, s.home(9, 0, p).ldm)).collect();
        assert_eq!(ldms.len(), 6);
    }

    #[test]
    fn an_added_node_group_is_drained_pinned_and_removed() {
        let mut s = ClusterState::all_started(cfg(2, 2, 1)); // one group [1,2]
        let new = |id| DataNodeSpec { id, host: "127.0.0.1".into(), port: 11860 + id, location_domain: 0 };
        s.add_nodes(&[new(3), new(4)]).unwrap();
        start(&mut s, 3);
        start(&mut s, 4);
        assert!(s.activate_groups());
        // A table created over both groups: partition 1's default home is group 1.
        let tables = [(7, 2, 2)];
        assert_eq!(s.home(7, 2, 1).group, 1);
        assert!(s.drain_group(0, &tables).unwrap_err().contains("only added node groups"));
        assert!(s.remove_group(1, &tables).unwrap_err().contains("in service"));
        let v = s.version;
        s.drain_group(1, &tables).unwrap();
        assert_eq!((s.version, s.active_groups), (v + 1, 1));
        // The default home in the drained group is pinned: the map alone shows it holds data.
        assert_eq!(s.placed[&(7, 1)], Placed { home: s.default_home(2, 1), moving: None, log_gen: 0 });
        assert!(s.data_groups().contains(&1));
        assert!(!s.activate_groups(), "a draining group stays out of service");
        s.tidy_placements(&tables);
        assert!(s.placed.contains_key(&(7, 1)), "a pinned placement is not tidied away");
        let mut buf = Vec::new();
        s.encode(&mut buf);
        assert_eq!(ClusterState::decode(&buf).unwrap(), s);
        // Not reorganised, yet the planner moves the partition out of the drained group.
        let plan = s.plan_moves(&tables);
        assert_eq!(plan.len(), 1);
        let (t, g, p, to) = plan[0];
        assert_eq!((t, p, to.group), (7, 1, 0));
        assert!(s.remove_group(1, &tables).unwrap_err().contains("still holds"));
        s.begin_move(t, g, p, to).unwrap();
        for n in [1, 2] {
            s.move_copied(t, p, n).unwrap();
        }
        for n in [3, 4] {
            s.move_left(t, p, n).unwrap();
        }
        assert!(!s.group_holds_data(1, &tables));
        assert!(!s.data_groups().contains(&1));
        // Its nodes may now both go without bringing the cluster down.
        assert_eq!(s.survivability(&[1, 2]), Survival::Win);
        assert!(s.remove_group(1, &tables).unwrap_err().contains("stop it first"));
        for n in [3, 4] {
            s.nodes.get_mut(&n).unwrap().state = NodeState::Down;
        }
        s.remove_group(1, &tables).unwrap();
        assert_eq!((s.groups().len(), s.nodes.len(), s.config.data_nodes.len()), (1, 2, 2));
        assert!(s.draining.is_empty());
        assert_eq!(nodes_of(&s.chain(7, 2, 1)), vec![2, 1]);
        // A drained group can also be put back in service before it is removed.
        s.add_nodes(&[new(5), new(6)]).unwrap();
        start(&mut s, 5);
        start(&mut s, 6);
        s.activate_groups();
        s.drain_group(1, &[]).unwrap();
        s.undrain_group(1).unwrap();
        assert_eq!(s.active_groups, 2);
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
        s.rebalance.insert(3);
        s.placed.insert((3, 1), Placed { home: Home { group: 1, ldm: 2, rank: 1 }, moving: None, log_gen: 0 });
        let mut buf = Vec::new();
        s.encode(&mut buf);
        assert_eq!(ClusterState::decode(&buf).unwrap(), s);
        assert!(ClusterState::decode(&buf[..buf.len() - 1]).is_err());
    }
}
