//! The replicated state machine of the management nodes: what every mgmd holds once it has applied
//! the Raft log up to some index, and the pure function that applies one command to it.
//!
//! `ControlState` wraps the `ClusterState` the data nodes act on (node states, incarnations, join
//! order, durable epoch, `cluster_down`) and adds what only the control plane needs: the schema
//! catalog (opaque bytes with a version) and the operators' stop requests.
//!
//! Invariants kept by `apply`:
//! * every command that changes anything bumps `ClusterState::version` by exactly one, and a
//!   rejected command changes nothing;
//! * a node's incarnation only grows; commands naming an older incarnation are rejected, so a
//!   message from before a restart can never act on the restarted node;
//! * `joined_seq` of a node entering the write chains is larger than every other node's, so the
//!   master (the started node that joined first) only changes when the master leaves;
//! * when a failure would leave a node group that had a live member with none, the whole cluster
//!   is declared down (`cluster_down`, every node `Down`) instead of a partial failed set: the
//!   survivors cannot hold every partition, so a system restart is the only way on;
//! * the durable epoch never goes backwards.
//!
//! `apply` reads no clock and no randomness: every mgmd computes the same state from the same log.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tern_types::cluster::{ClusterConfig, ClusterState, DataNodeSpec, NodeId, NodeState, TableShape};

/// The largest catalog the control plane accepts (one Raft entry must fit in one frame).
pub const CATALOG_BYTES_MAX: usize = 8 << 20;

/// A change to the replicated state, proposed through Raft and applied by every mgmd in log order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// A data node (re)starts: it becomes `Starting` with a new incarnation, larger than both the
    /// one the control plane knew and `incarnation` (the last one the node itself held, 0 if
    /// none). A node that was still in the write chains is first failed: its memory is gone.
    /// `durable_epoch`: the durable epoch in the node's own system file (0: none), which a
    /// system restart's cut takes into account.
    Register { node: NodeId, incarnation: u32, durable_epoch: u64 },
    /// A data node asks to move to `state` (Copying: join the write chains; Started: a full
    /// replica; Down: a graceful stop).
    SetState {
        node: NodeId,
        incarnation: u32,
        #[serde(with = "node_state_serde")]
        state: NodeState,
    },
    /// The leader's failure detector declares these (node, incarnation) pairs failed.
    NodesFailed { nodes: Vec<(NodeId, u32)> },
    /// The master reports the newest epoch every live node has on disk (monotonic).
    SetDurableEpoch { epoch: u64 },
    /// A new schema catalog (opaque to the control plane); versions only grow.
    SetCatalog { version: u64, bytes: Vec<u8> },
    /// An operator asks a data node to stop; the node sees the flag in its heartbeat replies.
    StopNode { node: NodeId },
    /// An operator withdraws a stop request.
    StartNode { node: NodeId },
    /// A system restart: with no node in the write chains, these registered (`Starting`) nodes
    /// become `Started` together, in this order, each recovering from its own disk to the
    /// durable epoch. They must include every node of `restorable` (the full replicas when the
    /// cluster went down), or every data node of a cluster that never started.
    StartCluster { nodes: Vec<(NodeId, u32)> },
    /// A data node stops in order (SIGTERM, `tern stop`): it has made its last epochs durable
    /// and leaves the write chains, as `SetState` to `Down` does, without being declared failed.
    /// `sysfile_epoch`: the durable epoch of its system file as it leaves. When the last nodes of
    /// the cluster leave this way, every one that left with the final system-file epoch holds
    /// all the data and is restorable: a system restart starts them all from their disks.
    Leave { node: NodeId, incarnation: u32, sysfile_epoch: u64 },
    /// Online add node group (NDB: the nodes in config.ini, then CREATE NODEGROUP): data nodes
    /// forming new node groups join the configuration, `Down` and empty. The group comes into
    /// service once all its members have started; with `reorganize`, every table is then spread
    /// over it (as ALTER TABLE … REORGANIZE PARTITION on each).
    AddNodes { nodes: Vec<NodeSpecWire>, reorganize: bool },
    /// ALTER TABLE … REORGANIZE PARTITION: spread the table over every node group in service.
    Reorganize { table: u32 },
    /// A move's target ldm on this node holds the partition (every row, in a usable checkpoint).
    MoveCopied { node: NodeId, incarnation: u32, table: u32, partition: u32 },
    /// A move's source ldm on this node serves the switched partition no more.
    MoveLeft { node: NodeId, incarnation: u32, table: u32, partition: u32 },
    /// NDB's DROP NODEGROUP, online: the last node group in service is taken out of it and its
    /// partitions move away; `RemoveGroup` drops it (and its data nodes) once it is empty.
    DrainGroup { group: u32 },
    /// Puts a draining node group back in service.
    UndrainGroup { group: u32 },
    /// Drops an empty node group out of service, with its (stopped) data nodes.
    RemoveGroup { group: u32 },
    /// `AddNodes` with each node's location domain (`domains[i]` for `nodes[i]`; 0: none). A
    /// variant of its own, after the others, so logs written before it still decode.
    AddNodesIn { nodes: Vec<NodeSpecWire>, domains: Vec<u8>, reorganize: bool },
}

/// A data node in a command (`DataNodeSpec` without serde in the types crate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeSpecWire {
    pub id: NodeId,
    pub host: String,
    pub port: u16,
}

/// What an applied command returns to its proposer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// `ClusterState::version` after the command.
    pub version: u64,
    /// The node's incarnation after the command (the new one for `Register`; 0 when the command
    /// names no single node).
    pub incarnation: u32,
}

/// The outcome of applying one command: `Err` holds why it was rejected (nothing changed).
pub type CommandResult = Result<Applied, String>;

/// Everything the management nodes replicate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlState {
    pub state: ClusterState,
    pub catalog_version: u64,
    /// Shared so that publishing a new state to readers does not copy the catalog.
    pub catalog: Arc<Vec<u8>>,
    /// Data nodes an operator asked to stop.
    pub stop_requested: BTreeSet<NodeId>,
    /// The nodes whose disks hold the cluster's data up to `durable_epoch`: the `Started` nodes
    /// while the cluster runs, kept as they were when it went down. A system restart starts
    /// exactly these from their disks; any other node rejoins by copying afterwards.
    pub restorable: BTreeSet<NodeId>,
    /// The durable epoch in each registered node's own system file (as it registered, or as it
    /// left in order).
    pub sysfile_epochs: BTreeMap<NodeId, u64>,
    /// Nodes that left in order (`Leave`) since they last registered, with their system file's
    /// epoch then.
    pub left_clean: BTreeMap<NodeId, u64>,
    /// The catalog's tables as the planner of partition moves sees them (derived from
    /// `catalog`, not stored).
    pub tables: Vec<TableShape>,
}

/// The stored form of `ControlState` (snapshots): the cluster state in its own binary encoding.
#[derive(Serialize, Deserialize)]
struct ControlStateWire {
    state: Vec<u8>,
    catalog_version: u64,
    catalog: Vec<u8>,
    stop_requested: Vec<NodeId>,
    restorable: Vec<NodeId>,
    sysfile_epochs: Vec<(NodeId, u64)>,
    left_clean: Vec<(NodeId, u64)>,
}

/// The stored form before `left_clean` (read from older data directories).
#[derive(Deserialize)]
struct ControlStateWireV1 {
    state: Vec<u8>,
    catalog_version: u64,
    catalog: Vec<u8>,
    stop_requested: Vec<NodeId>,
    restorable: Vec<NodeId>,
    sysfile_epochs: Vec<(NodeId, u64)>,
}

impl ControlState {
    pub fn new(config: ClusterConfig) -> ControlState {
        ControlState {
            state: ClusterState::new(config),
            catalog_version: 0,
            catalog: Arc::new(Vec::new()),
            stop_requested: BTreeSet::new(),
            restorable: BTreeSet::new(),
            sysfile_epochs: BTreeMap::new(),
            left_clean: BTreeMap::new(),
            tables: Vec::new(),
        }
    }

    pub fn version(&self) -> u64 {
        self.state.version
    }

    /// Applies one command. Pure: the result depends only on `self` and `cmd`. After any
    /// accepted command, partition moves take their next steps (`ClusterState::settle_moves`),
    /// added node groups whose members have started come into service, and the planner starts
    /// the moves a reorganisation or a drain needs; all of it within the command's one version.
    pub fn apply(&mut self, cmd: &Command) -> CommandResult {
        let before = self.state.version;
        let r = self.apply_command(cmd);
        if r.is_ok() && self.advance_moves() && self.state.version == before {
            self.state.version += 1;
        }
        if self.state.version > before + 1 {
            self.state.version = before + 1;
        }
        r.map(|a| Applied { version: self.state.version, ..a })
    }

    /// The moves' next steps after a command; whether anything changed.
    fn advance_moves(&mut self) -> bool {
        let s = &mut self.state;
        let mut changed = s.settle_moves();
        changed |= s.activate_groups();
        changed |= s.pin_draining(&self.tables);
        if s.rebalance_all || !s.rebalance.is_empty() || !s.draining.is_empty() || !s.placed.is_empty() {
            for (t, g, p, to) in s.plan_moves(&self.tables) {
                changed |= s.begin_move(t, g, p, to).is_ok();
            }
            let placed = s.placed.len();
            s.tidy_placements(&self.tables);
            changed |= placed != s.placed.len();
        }
        changed
    }

    fn apply_command(&mut self, cmd: &Command) -> CommandResult {
        match cmd {
            Command::Register { node, incarnation, durable_epoch } => {
                self.register(*node, *incarnation, *durable_epoch)
            }
            Command::SetState { node, incarnation, state } => self.set_state(*node, *incarnation, *state),
            Command::NodesFailed { nodes } => self.nodes_failed(nodes),
            Command::SetDurableEpoch { epoch } => self.set_durable_epoch(*epoch),
            Command::SetCatalog { version, bytes } => self.set_catalog(*version, bytes),
            Command::StopNode { node } => self.set_stop(*node, true),
            Command::StartNode { node } => self.set_stop(*node, false),
            Command::StartCluster { nodes } => self.start_cluster(nodes),
            Command::Leave { node, incarnation, sysfile_epoch } => self.leave(*node, *incarnation, *sysfile_epoch),
            Command::AddNodes { nodes, reorganize } => self.add_nodes(nodes, &[], *reorganize),
            Command::AddNodesIn { nodes, domains, reorganize } => self.add_nodes(nodes, domains, *reorganize),
            Command::Reorganize { table } => {
                if !self.tables.iter().any(|t| t.0 == *table) {
                    return Err(format!("no table with id {table}"));
                }
                if self.state.rebalance_all || !self.state.rebalance.insert(*table) {
                    return self.applied(0); // already reorganised
                }
                self.bump();
                self.applied(0)
            }
            Command::MoveCopied { node, incarnation, table, partition }
            | Command::MoveLeft { node, incarnation, table, partition } => {
                self.known(*node)?;
                let current = self.state.nodes[node].incarnation;
                if *incarnation != current {
                    return Err(format!("stale incarnation {incarnation} of node {node} (current {current})"));
                }
                let mut next = self.state.clone();
                let r = if matches!(cmd, Command::MoveLeft { .. }) {
                    next.move_left(*table, *partition, *node)
                } else {
                    next.move_copied(*table, *partition, *node)
                };
                r?;
                self.state = next;
                self.applied(*incarnation)
            }
            Command::DrainGroup { group } => {
                let mut next = self.state.clone();
                next.drain_group(*group, &self.tables)?;
                self.state = next;
                self.applied(0)
            }
            Command::UndrainGroup { group } => {
                let mut next = self.state.clone();
                next.undrain_group(*group)?;
                self.state = next;
                self.applied(0)
            }
            Command::RemoveGroup { group } => {
                let mut next = self.state.clone();
                next.remove_group(*group, &self.tables)?;
                let gone: Vec<NodeId> =
                    self.state.nodes.keys().filter(|n| !next.nodes.contains_key(n)).copied().collect();
                self.state = next;
                for n in gone {
                    self.stop_requested.remove(&n);
                    self.restorable.remove(&n);
                    self.sysfile_epochs.remove(&n);
                    self.left_clean.remove(&n);
                }
                self.applied(0)
            }
        }
        .inspect(|_| self.track_restorable())
    }

    /// While the cluster serves, the restorable nodes are its full replicas.
    fn track_restorable(&mut self) {
        if self.state.cluster_down {
            return;
        }
        let started: BTreeSet<NodeId> =
            self.state.nodes.iter().filter(|(_, s)| s.state == NodeState::Started).map(|(&n, _)| n).collect();
        if !started.is_empty() {
            self.restorable = started;
        }
    }

    /// The nodes a system restart must start together: the restorable ones, or all of a cluster
    /// that never started.
    pub fn system_restart_nodes(&self) -> BTreeSet<NodeId> {
        if self.restorable.is_empty() { self.state.nodes.keys().copied().collect() } else { self.restorable.clone() }
    }

    fn start_cluster(&mut self, nodes: &[(NodeId, u32)]) -> CommandResult {
        if !self.state.live_nodes().is_empty() {
            // Already started (a retried or concurrent proposal of the same restart).
            return if nodes.iter().all(|(n, _)| self.state.state_of(*n) == NodeState::Started) {
                self.applied(0)
            } else {
                Err("the cluster is running: nodes join it by a node restart".into())
            };
        }
        let listed: BTreeSet<NodeId> = nodes.iter().map(|(n, _)| *n).collect();
        let missing: Vec<NodeId> = self.system_restart_nodes().difference(&listed).copied().collect();
        if !missing.is_empty() {
            return Err(format!("a system restart needs nodes {missing:?} too"));
        }
        for (n, inc) in nodes {
            self.known(*n)?;
            let st = &self.state.nodes[n];
            if st.state != NodeState::Starting || st.incarnation != *inc {
                return Err(format!("node {n} (incarnation {inc}) has not registered for this restart"));
            }
        }
        // The cut: the smallest durable epoch in the system files of the nodes that hold the
        // data. An epoch is acknowledged durable only once every live node saved it, so this is
        // at least every durable acknowledgement given, while the durable epoch reported to the
        // control plane may lag behind it (the cluster can die between an acknowledgement and
        // the report).
        let needed = self.system_restart_nodes();
        let cut = needed.iter().map(|n| self.sysfile_epochs.get(n).copied().unwrap_or(0)).min().unwrap_or(0);
        self.state.durable_epoch = self.state.durable_epoch.max(cut);
        let mut seq = self.state.nodes.values().map(|s| s.joined_seq).max().unwrap_or(0);
        // Only the nodes that hold the data start from their disks; any other node that
        // registered (one still copying when the cluster went down: its disk is partial) stays
        // `Starting` and rejoins by a node restart once the cluster runs.
        for (n, _) in nodes.iter().filter(|(n, _)| needed.contains(n)) {
            seq += 1;
            let st = self.state.nodes.get_mut(n).expect("checked above");
            st.state = NodeState::Started;
            st.joined_seq = seq;
        }
        self.state.cluster_down = false;
        self.bump();
        self.applied(0)
    }

    fn applied(&self, incarnation: u32) -> CommandResult {
        Ok(Applied { version: self.state.version, incarnation })
    }

    fn bump(&mut self) {
        self.state.version += 1;
    }

    fn known(&self, node: NodeId) -> Result<(), String> {
        if self.state.nodes.contains_key(&node) { Ok(()) } else { Err(format!("unknown data node {node}")) }
    }

    fn register(&mut self, node: NodeId, incarnation: u32, durable_epoch: u64) -> CommandResult {
        self.known(node)?;
        self.sysfile_epochs.insert(node, durable_epoch);
        self.left_clean.remove(&node);
        let status = &self.state.nodes[&node];
        let was_in_chains = status.state.in_chains();
        let new_incarnation = status.incarnation.max(incarnation).checked_add(1).ok_or("incarnation overflow")?;
        if was_in_chains {
            self.fail(&[node]);
        }
        let status = self.state.nodes.get_mut(&node).expect("checked above");
        status.state = NodeState::Starting;
        status.incarnation = new_incarnation;
        self.bump();
        self.applied(new_incarnation)
    }

    fn set_state(&mut self, node: NodeId, incarnation: u32, state: NodeState) -> CommandResult {
        self.known(node)?;
        let current = self.state.nodes[&node].clone();
        if incarnation != current.incarnation {
            return Err(format!("stale incarnation {incarnation} of node {node} (current {})", current.incarnation));
        }
        if current.state == state {
            return self.applied(incarnation);
        }
        match (current.state, state) {
            (NodeState::Down, _) => return Err(format!("node {node} is down: it must register again")),
            (_, NodeState::Starting) => {
                return Err(format!("node {node} becomes starting only by registering"));
            }
            (NodeState::Started, NodeState::Copying) => {
                return Err(format!("node {node} is started: it cannot go back to copying"));
            }
            (_, NodeState::Copying) if self.state.cluster_down => {
                return Err("the cluster is down: nodes rejoin through a system restart".into());
            }
            (NodeState::Starting, NodeState::Started) => {
                // From disk only all together (StartCluster); alone only after copying.
                return Err(format!("node {node} is started only after copying, or by a system restart"));
            }
            (_, NodeState::Down) => {
                self.fail(&[node]);
                self.bump();
                return self.applied(incarnation);
            }
            _ => {}
        }
        let next_seq = self.state.nodes.values().map(|s| s.joined_seq).max().unwrap_or(0) + 1;
        let status = self.state.nodes.get_mut(&node).expect("checked above");
        if !status.state.in_chains() {
            status.joined_seq = next_seq;
        }
        status.state = state;
        self.bump();
        self.applied(incarnation)
    }

    fn leave(&mut self, node: NodeId, incarnation: u32, sysfile_epoch: u64) -> CommandResult {
        self.known(node)?;
        let current = self.state.nodes[&node].clone();
        if incarnation != current.incarnation {
            return Err(format!("stale incarnation {incarnation} of node {node} (current {})", current.incarnation));
        }
        if current.state == NodeState::Down {
            return self.applied(incarnation); // a retried proposal, or already failed
        }
        let was_full = current.state == NodeState::Started;
        let down_before = self.state.cluster_down;
        self.sysfile_epochs.insert(node, sysfile_epoch);
        if was_full {
            self.left_clean.insert(node, sysfile_epoch);
        }
        self.fail(&[node]);
        if self.state.cluster_down && !down_before {
            // The whole cluster stopped in order: every full replica that left with the newest
            // system-file epoch holds everything durable, as the last one does.
            let last = sysfile_epoch;
            for (&n, &e) in &self.left_clean {
                if e == last {
                    self.restorable.insert(n);
                }
            }
        }
        self.bump();
        self.applied(incarnation)
    }

    fn nodes_failed(&mut self, nodes: &[(NodeId, u32)]) -> CommandResult {
        // Only the incarnations the detector saw fail: a node that re-registered meanwhile lives.
        let failing: Vec<NodeId> = nodes
            .iter()
            .filter(|(n, inc)| {
                self.state.nodes.get(n).is_some_and(|s| s.incarnation == *inc && s.state != NodeState::Down)
            })
            .map(|(n, _)| *n)
            .collect();
        if failing.is_empty() {
            return self.applied(0);
        }
        self.fail(&failing);
        self.bump();
        self.applied(0)
    }

    /// Marks `nodes` down; when that would leave a node group that had a live member with none,
    /// declares the whole cluster down instead.
    fn fail(&mut self, nodes: &[NodeId]) {
        if group_lost(&self.state, nodes) {
            self.state.cluster_down = true;
            for status in self.state.nodes.values_mut() {
                if status.state.in_chains() {
                    status.state = NodeState::Down;
                }
            }
        }
        for n in nodes {
            if let Some(status) = self.state.nodes.get_mut(n) {
                status.state = NodeState::Down;
            }
        }
    }

    /// Not a change of the map: the version stays (data nodes would otherwise get a new map
    /// every epoch, and compare map versions that differ only by it).
    fn set_durable_epoch(&mut self, epoch: u64) -> CommandResult {
        self.state.durable_epoch = self.state.durable_epoch.max(epoch);
        self.applied(0)
    }

    fn set_catalog(&mut self, version: u64, bytes: &[u8]) -> CommandResult {
        if bytes.len() > CATALOG_BYTES_MAX {
            return Err(format!("catalog of {} bytes is over the {CATALOG_BYTES_MAX}-byte limit", bytes.len()));
        }
        if version == self.catalog_version && bytes == self.catalog.as_slice() {
            return self.applied(0); // a retried proposal
        }
        if version <= self.catalog_version {
            return Err(format!("stale catalog version {version} (current {})", self.catalog_version));
        }
        self.catalog_version = version;
        self.catalog = Arc::new(bytes.to_vec());
        if let Some(tables) = table_shapes(bytes) {
            let live: BTreeSet<u32> = tables.iter().map(|t| t.0).collect();
            self.state.forget_tables(&live);
            self.tables = tables;
        }
        self.bump();
        self.applied(0)
    }

    fn add_nodes(&mut self, nodes: &[NodeSpecWire], domains: &[u8], reorganize: bool) -> CommandResult {
        if self.state.cluster_down {
            return Err("the cluster is down: restart it before adding node groups".into());
        }
        if !domains.is_empty() && domains.len() != nodes.len() {
            return Err("one location domain per added data node".into());
        }
        let specs: Vec<DataNodeSpec> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| DataNodeSpec {
                id: n.id,
                host: n.host.clone(),
                port: n.port,
                location_domain: domains.get(i).copied().unwrap_or(0),
            })
            .collect();
        if specs.iter().all(|d| self.state.config.data_node(d.id).is_some_and(|have| *have == *d)) {
            return self.applied(0); // a retried proposal
        }
        let mut next = self.state.clone();
        next.add_nodes(&specs)?;
        next.rebalance_all |= reorganize;
        self.state = next;
        self.applied(0)
    }

    fn set_stop(&mut self, node: NodeId, stop: bool) -> CommandResult {
        self.known(node)?;
        let changed = if stop { self.stop_requested.insert(node) } else { self.stop_requested.remove(&node) };
        if changed {
            self.bump();
        }
        self.applied(0)
    }

    /// The stored form (postcard).
    pub fn encode(&self) -> Vec<u8> {
        let mut state = Vec::new();
        self.state.encode(&mut state);
        let wire = ControlStateWire {
            state,
            catalog_version: self.catalog_version,
            catalog: self.catalog.as_ref().clone(),
            stop_requested: self.stop_requested.iter().copied().collect(),
            restorable: self.restorable.iter().copied().collect(),
            sysfile_epochs: self.sysfile_epochs.iter().map(|(&n, &e)| (n, e)).collect(),
            left_clean: self.left_clean.iter().map(|(&n, &e)| (n, e)).collect(),
        };
        postcard::to_allocvec(&wire).expect("a control state always serialises")
    }

    pub fn decode(bytes: &[u8]) -> Result<ControlState, String> {
        let wire: ControlStateWire = match postcard::from_bytes(bytes) {
            Ok(w) => w,
            Err(e) => match postcard::from_bytes::<ControlStateWireV1>(bytes) {
                Ok(v1) => ControlStateWire {
                    state: v1.state,
                    catalog_version: v1.catalog_version,
                    catalog: v1.catalog,
                    stop_requested: v1.stop_requested,
                    restorable: v1.restorable,
                    sysfile_epochs: v1.sysfile_epochs,
                    left_clean: Vec::new(),
                },
                Err(_) => return Err(format!("bad control state encoding: {e}")),
            },
        };
        let state = ClusterState::decode(&wire.state).map_err(|e| format!("bad cluster state: {e:?}"))?;
        let tables = table_shapes(&wire.catalog).unwrap_or_default();
        Ok(ControlState {
            state,
            catalog_version: wire.catalog_version,
            catalog: Arc::new(wire.catalog),
            stop_requested: wire.stop_requested.into_iter().collect(),
            restorable: wire.restorable.into_iter().collect(),
            sysfile_epochs: wire.sysfile_epochs.into_iter().collect(),
            left_clean: wire.left_clean.into_iter().collect(),
            tables,
        })
    }
}

/// The tables of an encoded catalog (None when the bytes are not one: the control plane's own
/// tests store arbitrary bytes).
fn table_shapes(bytes: &[u8]) -> Option<Vec<TableShape>> {
    tern_types::Catalog::decode(bytes)
        .ok()
        .map(|c| c.tables.values().map(|t| (t.id, t.groups, t.partition_count)).collect())
}

/// True when removing `failing` from the write chains leaves some node group that has a full
/// replica (`Started`) now with none (NDB's "Lose" outcome, counted only over groups that are
/// up: a group that has not started yet cannot be lost). A member still copying does not keep
/// its group: its copy is not complete.
pub fn group_lost(state: &ClusterState, failing: &[NodeId]) -> bool {
    // A group that holds no data (added and empty, or drained) loses nothing.
    let holding = state.data_groups();
    state.groups().iter().enumerate().filter(|(i, _)| holding.contains(&(*i as u32))).any(|(_, group)| {
        let full: Vec<NodeId> = group.iter().copied().filter(|n| state.state_of(*n) == NodeState::Started).collect();
        !full.is_empty() && full.iter().all(|n| failing.contains(n))
    })
}

/// Serde for `NodeState` as its one-byte code (the types crate has no serde).
mod node_state_serde {
    use serde::{Deserialize, Deserializer, Serializer};
    use tern_types::cluster::NodeState;

    pub fn serialize<S: Serializer>(state: &NodeState, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u8(*state as u8)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<NodeState, D::Error> {
        let code = u8::deserialize(d)?;
        NodeState::from_u8(code).map_err(|_| serde::de::Error::custom(format!("bad node state {code}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_types::cluster::{DataNodeSpec, MgmdSpec};

    fn config(nodes: u16, replicas: u8) -> ClusterConfig {
        ClusterConfig {
            replicas,
            data_nodes: (1..=nodes)
                .map(|id| DataNodeSpec { id, host: "127.0.0.1".into(), port: 11860 + id, location_domain: 0 })
                .collect(),
            mgmds: vec![MgmdSpec { id: 65, host: "127.0.0.1".into(), port: 1186 }],
            ldm_workers: 2,
            epoch_interval_ms: 100,
            heartbeat_interval_ms: 100,
            failure_timeout_ms: 1000,
        }
    }

    fn ok(s: &mut ControlState, cmd: Command) -> Applied {
        let before = s.clone();
        let r = s.apply(&cmd).unwrap_or_else(|e| panic!("{cmd:?} rejected: {e}"));
        assert!(s.version() == before.version() || s.version() == before.version() + 1);
        assert_eq!(r.version, s.version());
        r
    }

    fn rejected(s: &mut ControlState, cmd: Command) -> String {
        let before = s.clone();
        let e = s.apply(&cmd).expect_err("must be rejected");
        assert_eq!(*s, before, "a rejected command changes nothing");
        e
    }

    /// Registers and starts every node; returns their incarnations.
    fn start_all(s: &mut ControlState) -> Vec<u32> {
        let ids: Vec<NodeId> = s.state.nodes.keys().copied().collect();
        let mut incs = Vec::new();
        for &n in &ids {
            incs.push(ok(s, Command::Register { node: n, incarnation: 0, durable_epoch: 0 }).incarnation);
        }
        ok(s, Command::StartCluster { nodes: ids.into_iter().zip(incs.iter().copied()).collect() });
        incs
    }

    /// An encoded catalog with one table of `parts` partitions over `groups` node groups.
    fn catalog_bytes(version: u64, parts: u32, groups: u32) -> Vec<u8> {
        use tern_types::schema::{Column, ColumnType, Table};
        let mut c = tern_types::Catalog::new();
        c.version = version;
        let mut t =
            Table::new("db", "t", vec![Column::new("id", ColumnType::Int { unsigned: false }).not_null()], vec![0]);
        t.id = 5;
        t.partition_count = parts;
        t.groups = groups;
        c.tables.insert(5, t);
        let mut out = Vec::new();
        c.encode(&mut out);
        out
    }

    #[test]
    fn added_data_nodes_may_name_their_location_domains() {
        let mut s = ControlState::new(config(2, 2));
        start_all(&mut s);
        let wire = |id| NodeSpecWire { id, host: "127.0.0.1".into(), port: 11860 + id };
        let e = rejected(
            &mut s,
            Command::AddNodesIn { nodes: vec![wire(3), wire(4)], domains: vec![1], reorganize: false },
        );
        assert!(e.contains("location domain"), "{e}");
        ok(&mut s, Command::AddNodesIn { nodes: vec![wire(3), wire(4)], domains: vec![1, 2], reorganize: false });
        assert_eq!((s.state.config.domain_of(3), s.state.config.domain_of(4)), (1, 2));
        assert_eq!(s.state.groups(), vec![vec![1, 2], vec![3, 4]]);
    }

    #[test]
    fn an_added_node_group_gets_partitions_moved_to_it_and_is_drained_and_removed() {
        let mut s = ControlState::new(config(2, 2));
        let incs = start_all(&mut s);
        ok(&mut s, Command::SetCatalog { version: 2, bytes: catalog_bytes(2, 4, 1) });
        assert_eq!(s.tables, vec![(5, 1, 4)]);
        assert!(rejected(&mut s, Command::Reorganize { table: 9 }).contains("no table"));
        let wire = |id| NodeSpecWire { id, host: "127.0.0.1".into(), port: 11860 + id };
        let v = s.version();
        ok(&mut s, Command::AddNodes { nodes: vec![wire(3), wire(4)], reorganize: true });
        assert_eq!(s.version(), v + 1);
        ok(&mut s, Command::AddNodes { nodes: vec![wire(3), wire(4)], reorganize: true });
        assert_eq!(s.version(), v + 1, "a retried proposal changes nothing");
        assert!(
            rejected(&mut s, Command::AddNodes { nodes: vec![wire(5)], reorganize: false }).contains("node groups")
        );
        // The new nodes start empty: register, copy (nothing), start. Then the group is in
        // service and moves begin, all within the command's one version.
        let mut new_incs = Vec::new();
        for n in [3, 4] {
            let i = ok(&mut s, Command::Register { node: n, incarnation: 0, durable_epoch: 0 }).incarnation;
            ok(&mut s, Command::SetState { node: n, incarnation: i, state: NodeState::Copying });
            new_incs.push(i);
        }
        ok(&mut s, Command::SetState { node: 3, incarnation: new_incs[0], state: NodeState::Started });
        assert_eq!(s.state.active_groups, 1);
        let v = s.version();
        ok(&mut s, Command::SetState { node: 4, incarnation: new_incs[1], state: NodeState::Started });
        assert_eq!((s.version(), s.state.active_groups), (v + 1, 2));
        let moving: Vec<(u32, u32)> =
            s.state.placed.iter().filter(|(_, p)| p.moving.is_some()).map(|(k, _)| *k).collect();
        assert_eq!(moving.len(), 2, "half the partitions move, two at a time");
        // Reports: a stale incarnation is refused; copies switch the move, leaves end it.
        let (t, p) = moving[0];
        let copied = |node, incarnation| Command::MoveCopied { node, incarnation, table: t, partition: p };
        let left = |node, incarnation| Command::MoveLeft { node, incarnation, table: t, partition: p };
        assert!(rejected(&mut s, copied(3, new_incs[0] + 7)).contains("stale incarnation"));
        assert!(rejected(&mut s, copied(1, incs[0])).contains("not copying"));
        ok(&mut s, copied(3, new_incs[0]));
        ok(&mut s, copied(4, new_incs[1]));
        ok(&mut s, left(1, incs[0]));
        ok(&mut s, left(2, incs[1]));
        assert_eq!(s.state.placed[&(t, p)].home.group, 1);
        // Every move done: two partitions per group.
        for &(t, p) in &moving[1..] {
            for (n, i) in [(3, new_incs[0]), (4, new_incs[1])] {
                ok(&mut s, Command::MoveCopied { node: n, incarnation: i, table: t, partition: p });
            }
            for (n, i) in [(1, incs[0]), (2, incs[1])] {
                ok(&mut s, Command::MoveLeft { node: n, incarnation: i, table: t, partition: p });
            }
        }
        assert!(s.state.placed.values().all(|p| p.moving.is_none() && p.home.group == 1));
        // Drain it again: the partitions move back, then the stopped group is removed.
        assert!(rejected(&mut s, Command::RemoveGroup { group: 1 }).contains("in service"));
        ok(&mut s, Command::DrainGroup { group: 1 });
        assert_eq!(s.state.active_groups, 1);
        loop {
            let moving: Vec<(u32, u32)> =
                s.state.placed.iter().filter(|(_, p)| p.moving.is_some()).map(|(k, _)| *k).collect();
            if moving.is_empty() {
                break;
            }
            for (t, p) in moving {
                for (n, i) in [(1, incs[0]), (2, incs[1])] {
                    ok(&mut s, Command::MoveCopied { node: n, incarnation: i, table: t, partition: p });
                }
                for (n, i) in [(3, new_incs[0]), (4, new_incs[1])] {
                    ok(&mut s, Command::MoveLeft { node: n, incarnation: i, table: t, partition: p });
                }
            }
        }
        assert!(s.state.placed.values().all(|p| p.moving.is_none() && p.home.group == 0), "all back in group 0");
        assert!(rejected(&mut s, Command::RemoveGroup { group: 1 }).contains("running"));
        // Both members of the empty group may stop: the cluster stays up.
        ok(&mut s, Command::Leave { node: 3, incarnation: new_incs[0], sysfile_epoch: 1 });
        ok(&mut s, Command::Leave { node: 4, incarnation: new_incs[1], sysfile_epoch: 1 });
        assert!(!s.state.cluster_down);
        ok(&mut s, Command::RemoveGroup { group: 1 });
        assert_eq!(s.state.nodes.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
        let back = ControlState::decode(&s.encode()).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn a_node_that_was_still_copying_does_not_start_from_its_partial_disk_in_a_system_restart() {
        let mut s = ControlState::new(config(2, 2));
        let incs = start_all(&mut s);
        // Node 2 fails and restarts; the cluster goes down while it is still copying.
        ok(&mut s, Command::NodesFailed { nodes: vec![(2, incs[1])] });
        let i2 = ok(&mut s, Command::Register { node: 2, incarnation: incs[1], durable_epoch: 9 }).incarnation;
        ok(&mut s, Command::SetState { node: 2, incarnation: i2, state: NodeState::Copying });
        let i1 = ok(&mut s, Command::Register { node: 1, incarnation: incs[0], durable_epoch: 7 }).incarnation;
        assert!(s.state.cluster_down);
        assert_eq!(s.restorable, BTreeSet::from([1]));
        let i2 = ok(&mut s, Command::Register { node: 2, incarnation: i2, durable_epoch: 9 }).incarnation;
        // Both registered and listed: only node 1 holds the data; node 2 stays starting and
        // copies once the cluster runs. The cut is node 1's epoch.
        ok(&mut s, Command::StartCluster { nodes: vec![(1, i1), (2, i2)] });
        assert_eq!(s.state.state_of(1), NodeState::Started);
        assert_eq!(s.state.state_of(2), NodeState::Starting);
        assert_eq!(s.state.durable_epoch, 7);
        // A retried proposal of the same restart is refused (node 2 joins by a node restart).
        assert!(rejected(&mut s, Command::StartCluster { nodes: vec![(1, i1), (2, i2)] }).contains("node restart"));
        ok(&mut s, Command::SetState { node: 2, incarnation: i2, state: NodeState::Copying });
    }

    #[test]
    fn nodes_that_leave_in_order_with_the_last_epoch_all_restart_from_their_disks() {
        let mut s = ControlState::new(config(2, 2));
        let incs = start_all(&mut s);
        ok(&mut s, Command::Leave { node: 2, incarnation: incs[1], sysfile_epoch: 40 });
        assert_eq!(s.state.state_of(2), NodeState::Down);
        assert!(!s.state.cluster_down, "node 1 still serves");
        assert_eq!(s.state.master(), Some(1));
        // A retried leave changes nothing.
        let v = s.version();
        ok(&mut s, Command::Leave { node: 2, incarnation: incs[1], sysfile_epoch: 40 });
        assert_eq!(s.version(), v);
        ok(&mut s, Command::Leave { node: 1, incarnation: incs[0], sysfile_epoch: 40 });
        assert!(s.state.cluster_down);
        assert_eq!(s.restorable, BTreeSet::from([1, 2]), "nothing was saved after node 2 left");
        // Restart: both from disk.
        let i1 = ok(&mut s, Command::Register { node: 1, incarnation: incs[0], durable_epoch: 40 }).incarnation;
        let i2 = ok(&mut s, Command::Register { node: 2, incarnation: incs[1], durable_epoch: 40 }).incarnation;
        ok(&mut s, Command::StartCluster { nodes: vec![(1, i1), (2, i2)] });
        assert_eq!(s.state.live_nodes(), vec![1, 2]);

        // Node 1 saved more after node 2 left: only node 1 is restorable.
        let mut s = ControlState::new(config(2, 2));
        let incs = start_all(&mut s);
        ok(&mut s, Command::Leave { node: 2, incarnation: incs[1], sysfile_epoch: 40 });
        ok(&mut s, Command::Leave { node: 1, incarnation: incs[0], sysfile_epoch: 41 });
        assert_eq!(s.restorable, BTreeSet::from([1]));
        assert!(rejected(&mut s, Command::Leave { node: 1, incarnation: 99, sysfile_epoch: 41 }).contains("stale"));
        // The stored form keeps it.
        assert_eq!(ControlState::decode(&s.encode()).unwrap(), s);
    }

    #[test]
    fn register_bumps_the_incarnation_and_a_stale_incarnation_is_rejected() {
        let mut s = ControlState::new(config(2, 2));
        let v0 = s.version();
        let a = ok(&mut s, Command::Register { node: 1, incarnation: 0, durable_epoch: 0 });
        assert_eq!(a.incarnation, 1);
        assert_eq!(a.version, v0 + 1);
        assert_eq!(s.state.state_of(1), NodeState::Starting);
        // The node remembers incarnation 7 from an older control plane: the new one is above it.
        let b = ok(&mut s, Command::Register { node: 1, incarnation: 7, durable_epoch: 0 });
        assert_eq!(b.incarnation, 8);
        let e = rejected(&mut s, Command::SetState { node: 1, incarnation: 1, state: NodeState::Started });
        assert!(e.contains("stale incarnation"), "{e}");
        assert!(rejected(&mut s, Command::Register { node: 9, incarnation: 0, durable_epoch: 0 }).contains("unknown"));
    }

    #[test]
    fn joining_sets_join_order_and_the_master_is_the_first_joiner() {
        let mut s = ControlState::new(config(2, 2));
        let i2 = ok(&mut s, Command::Register { node: 2, incarnation: 0, durable_epoch: 0 }).incarnation;
        let i1 = ok(&mut s, Command::Register { node: 1, incarnation: 0, durable_epoch: 0 }).incarnation;
        ok(&mut s, Command::SetState { node: 2, incarnation: i2, state: NodeState::Copying });
        ok(&mut s, Command::SetState { node: 2, incarnation: i2, state: NodeState::Started });
        ok(&mut s, Command::SetState { node: 1, incarnation: i1, state: NodeState::Copying });
        assert_eq!(s.state.master(), Some(2));
        let seq1 = s.state.nodes[&1].joined_seq;
        assert!(seq1 > s.state.nodes[&2].joined_seq);
        // Copying -> Started keeps the join order; repeating a state is a no-op.
        ok(&mut s, Command::SetState { node: 1, incarnation: i1, state: NodeState::Started });
        assert_eq!(s.state.nodes[&1].joined_seq, seq1);
        let v = s.version();
        ok(&mut s, Command::SetState { node: 1, incarnation: i1, state: NodeState::Started });
        assert_eq!(s.version(), v);
        assert!(
            rejected(&mut s, Command::SetState { node: 1, incarnation: i1, state: NodeState::Copying })
                .contains("cannot go back")
        );
        assert!(
            rejected(&mut s, Command::SetState { node: 1, incarnation: i1, state: NodeState::Starting })
                .contains("registering")
        );
    }

    #[test]
    fn a_failed_node_leaves_the_chains_and_a_restart_of_a_live_node_fails_it_first() {
        let mut s = ControlState::new(config(2, 2));
        let incs = start_all(&mut s);
        ok(&mut s, Command::NodesFailed { nodes: vec![(1, incs[0])] });
        assert_eq!(s.state.state_of(1), NodeState::Down);
        assert!(!s.state.cluster_down);
        assert_eq!(s.state.master(), Some(2));
        // A down node must register before anything else.
        assert!(
            rejected(&mut s, Command::SetState { node: 1, incarnation: incs[0], state: NodeState::Copying })
                .contains("register")
        );
        // Node 2 restarts without having been detected: the group would be empty -> cluster down.
        ok(&mut s, Command::Register { node: 2, incarnation: incs[1], durable_epoch: 0 });
        assert!(s.state.cluster_down);
        assert_eq!(s.state.state_of(2), NodeState::Starting);
    }

    #[test]
    fn a_failure_of_a_stale_incarnation_is_ignored() {
        let mut s = ControlState::new(config(2, 2));
        let incs = start_all(&mut s);
        let new_inc = ok(&mut s, Command::Register { node: 1, incarnation: incs[0], durable_epoch: 0 }).incarnation;
        let v = s.version();
        ok(&mut s, Command::NodesFailed { nodes: vec![(1, incs[0])] });
        assert_eq!(s.version(), v, "nothing changed");
        assert_eq!(s.state.state_of(1), NodeState::Starting);
        assert_eq!(s.state.nodes[&1].incarnation, new_inc);
    }

    /// The control plane's durable epoch may lag behind what the nodes acknowledged (the cluster
    /// died before the last report): the system restart's cut is the smallest durable epoch in
    /// the system files of the nodes it needs (node 1's old file does not count: it copies).
    #[test]
    fn a_system_restart_recovers_to_the_smallest_system_file_epoch_of_the_nodes_it_needs() {
        let mut s = ControlState::new(config(4, 2)); // groups [1,2] [3,4]
        let incs = start_all(&mut s);
        ok(&mut s, Command::SetDurableEpoch { epoch: 10 });
        ok(&mut s, Command::NodesFailed { nodes: vec![(1, incs[0])] });
        ok(&mut s, Command::NodesFailed { nodes: vec![(2, incs[1]), (3, incs[2]), (4, incs[3])] });
        assert!(s.state.cluster_down);
        let reg = |s: &mut ControlState, node, i: usize, durable_epoch| {
            ok(s, Command::Register { node, incarnation: incs[i], durable_epoch }).incarnation
        };
        let _inc1 = reg(&mut s, 1, 0, 3);
        let inc2 = reg(&mut s, 2, 1, 15);
        let inc3 = reg(&mut s, 3, 2, 14);
        let inc4 = reg(&mut s, 4, 3, 16);
        ok(&mut s, Command::StartCluster { nodes: vec![(2, inc2), (3, inc3), (4, inc4)] });
        assert_eq!(s.state.durable_epoch, 14);
        // The cut never goes below what the control plane already knew.
        let mut s2 = ControlState::new(config(2, 2));
        let incs = start_all(&mut s2);
        ok(&mut s2, Command::SetDurableEpoch { epoch: 20 });
        ok(&mut s2, Command::NodesFailed { nodes: vec![(1, incs[0]), (2, incs[1])] });
        let a = ok(&mut s2, Command::Register { node: 1, incarnation: incs[0], durable_epoch: 20 }).incarnation;
        let b = ok(&mut s2, Command::Register { node: 2, incarnation: incs[1], durable_epoch: 0 }).incarnation;
        ok(&mut s2, Command::StartCluster { nodes: vec![(1, a), (2, b)] });
        assert_eq!(s2.state.durable_epoch, 20);
        let back = ControlState::decode(&s2.encode()).unwrap();
        assert_eq!(back.sysfile_epochs, s2.sysfile_epochs);
    }

    #[test]
    fn losing_a_whole_group_declares_the_cluster_down_and_a_start_clears_it() {
        let mut s = ControlState::new(config(4, 2)); // groups [1,2] [3,4]
        let incs = start_all(&mut s);
        // One per group: the cluster survives.
        ok(&mut s, Command::NodesFailed { nodes: vec![(1, incs[0]), (3, incs[2])] });
        assert!(!s.state.cluster_down);
        assert_eq!(s.state.live_nodes(), vec![2, 4]);
        // The rest of group [3,4] fails: no partial set, the whole cluster is down.
        ok(&mut s, Command::NodesFailed { nodes: vec![(4, incs[3])] });
        assert!(s.state.cluster_down);
        assert!(s.state.live_nodes().is_empty());
        let durable = s.state.durable_epoch;
        // The full replicas when it went down were 2 and 4: a system restart starts exactly them.
        assert_eq!(s.system_restart_nodes(), [2, 4].into_iter().collect());
        let inc1 = ok(&mut s, Command::Register { node: 1, incarnation: incs[0], durable_epoch: 0 }).incarnation;
        assert!(
            rejected(&mut s, Command::SetState { node: 1, incarnation: inc1, state: NodeState::Copying })
                .contains("system restart")
        );
        assert!(
            rejected(&mut s, Command::SetState { node: 1, incarnation: inc1, state: NodeState::Started })
                .contains("system restart")
        );
        let inc2 = ok(&mut s, Command::Register { node: 2, incarnation: incs[1], durable_epoch: 0 }).incarnation;
        assert!(rejected(&mut s, Command::StartCluster { nodes: vec![(2, inc2)] }).contains("[4]"));
        let inc4 = ok(&mut s, Command::Register { node: 4, incarnation: incs[3], durable_epoch: 0 }).incarnation;
        assert!(
            rejected(&mut s, Command::StartCluster { nodes: vec![(2, inc2), (4, inc4 + 1)] }).contains("registered")
        );
        ok(&mut s, Command::StartCluster { nodes: vec![(2, inc2), (4, inc4)] });
        assert!(!s.state.cluster_down);
        assert_eq!(s.state.live_nodes(), vec![2, 4]);
        assert_eq!(s.state.master(), Some(2));
        assert_eq!(s.state.durable_epoch, durable);
        // A retried proposal of the same restart is harmless; node 1 now joins by copying.
        ok(&mut s, Command::StartCluster { nodes: vec![(2, inc2), (4, inc4)] });
        ok(&mut s, Command::SetState { node: 1, incarnation: inc1, state: NodeState::Copying });
        ok(&mut s, Command::SetState { node: 1, incarnation: inc1, state: NodeState::Started });
        assert_eq!(s.restorable, [1, 2, 4].into_iter().collect());
    }

    #[test]
    fn a_graceful_stop_is_a_failure_with_the_same_rules() {
        let mut s = ControlState::new(config(2, 1)); // groups [1] [2]
        let incs = start_all(&mut s);
        ok(&mut s, Command::SetState { node: 2, incarnation: incs[1], state: NodeState::Down });
        assert!(s.state.cluster_down, "group [2] lost");
        assert_eq!(s.state.state_of(1), NodeState::Down);
    }

    #[test]
    fn a_group_that_never_started_cannot_be_lost() {
        let mut s = ControlState::new(config(4, 2));
        let i1 = ok(&mut s, Command::Register { node: 1, incarnation: 0, durable_epoch: 0 }).incarnation;
        let i2 = ok(&mut s, Command::Register { node: 2, incarnation: 0, durable_epoch: 0 }).incarnation;
        for (n, i) in [(1, i1), (2, i2)] {
            ok(&mut s, Command::SetState { node: n, incarnation: i, state: NodeState::Copying });
            ok(&mut s, Command::SetState { node: n, incarnation: i, state: NodeState::Started });
        }
        ok(&mut s, Command::NodesFailed { nodes: vec![(1, i1)] });
        assert!(!s.state.cluster_down);
        assert_eq!(s.state.live_nodes(), vec![2]);
    }

    #[test]
    fn durable_epoch_is_monotonic_and_catalog_versions_grow() {
        let mut s = ControlState::new(config(2, 2));
        ok(&mut s, Command::SetDurableEpoch { epoch: 10 });
        let v = s.version();
        ok(&mut s, Command::SetDurableEpoch { epoch: 9 });
        assert_eq!((s.state.durable_epoch, s.version()), (10, v));
        ok(&mut s, Command::SetCatalog { version: 3, bytes: vec![1, 2, 3] });
        let v = s.version();
        ok(&mut s, Command::SetCatalog { version: 3, bytes: vec![1, 2, 3] }); // retried
        assert_eq!(s.version(), v);
        assert!(rejected(&mut s, Command::SetCatalog { version: 3, bytes: vec![9] }).contains("stale"));
        assert!(
            rejected(&mut s, Command::SetCatalog { version: 4, bytes: vec![0; CATALOG_BYTES_MAX + 1] })
                .contains("limit")
        );
        assert_eq!((s.catalog_version, s.catalog.as_slice()), (3, &[1u8, 2, 3][..]));
    }

    #[test]
    fn stop_flags_bump_the_version_once() {
        let mut s = ControlState::new(config(2, 2));
        let v = s.version();
        ok(&mut s, Command::StopNode { node: 2 });
        ok(&mut s, Command::StopNode { node: 2 });
        assert_eq!(s.version(), v + 1);
        assert!(s.stop_requested.contains(&2));
        ok(&mut s, Command::StartNode { node: 2 });
        assert!(s.stop_requested.is_empty());
        assert!(rejected(&mut s, Command::StopNode { node: 99 }).contains("unknown"));
    }

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let mut s = ControlState::new(config(4, 2));
        start_all(&mut s);
        ok(&mut s, Command::SetCatalog { version: 2, bytes: b"catalog".to_vec() });
        ok(&mut s, Command::StopNode { node: 3 });
        let bytes = s.encode();
        assert_eq!(ControlState::decode(&bytes).unwrap(), s);
        assert!(ControlState::decode(&bytes[..bytes.len() / 2]).is_err());
        assert!(ControlState::decode(&[0xff; 7]).is_err());
        let cmd = Command::SetState { node: 1, incarnation: 2, state: NodeState::Copying };
        let enc = postcard::to_allocvec(&cmd).unwrap();
        assert_eq!(postcard::from_bytes::<Command>(&enc).unwrap(), cmd);
    }
}
