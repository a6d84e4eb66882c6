//! A data node as a member of a cluster run by management nodes (`tern datanode --mgmd ...`).
//!
//! Start: fetch the cluster from the mgmd, register (a new incarnation, remembered in the data
//! directory), then either
//! * join a running cluster (node restart): boot in state `Starting`; the kernel recovers from
//!   disk, fetches the catalog, joins the write chains and copies what it missed, asking the
//!   control plane for `Copying` and `Started` through `ControlReq`s; or
//! * take part in a system restart: when no node holds a replica, wait until every node the
//!   restart needs has registered and propose `StartCluster` (any of them may; it is applied
//!   once), then boot `Started`, recovering from disk to the cluster's durable epoch (the
//!   consistent cut).
//!
//! Then the membership thread heartbeats the mgmd leader every `heartbeat_interval_ms`, hands
//! every newer cluster map to the node's blocks, forwards the blocks' requests (state changes,
//! the durable epoch, coalesced), and fences: a node whose lease ran out, or that the cluster
//! declared failed, stops at once (the angel of `tern up` restarts it as a node restart). A
//! lease counts from when its heartbeat was sent and is shorter than the failure timeout, so the
//! node stops serving before the control plane may declare it dead (tern-control's detector).

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tern_control::{Command, ControlError, MgmClient, Role, StateInfo};
use tern_types::cluster::{ClusterState, NodeId, NodeState};

/// Exit code of a data node that fenced itself (lost its lease or was declared failed).
pub const EXIT_FENCED: i32 = 4;
/// How long a starting node waits for the management nodes to answer at all.
const MGMD_WAIT: Duration = Duration::from_secs(120);

/// What a node starts with.
pub struct Joined {
    pub state: ClusterState,
    pub incarnation: u32,
    /// `Some(cut)` in a system restart: recover to exactly this epoch.
    pub recover_to: Option<u64>,
}

fn retry<T>(what: &str, stop: &dyn Fn() -> bool, mut f: impl FnMut() -> Result<T, ControlError>) -> Result<T> {
    let deadline = Instant::now() + MGMD_WAIT;
    let mut last_log = Instant::now();
    loop {
        match f() {
            Ok(v) => return Ok(v),
            Err(ControlError::Rejected(r)) => bail!("{what}: the management node refused: {r}"),
            Err(e) => {
                if Instant::now() > deadline || stop() {
                    bail!("{what}: no management node answered: {e}");
                }
                if last_log.elapsed() > Duration::from_secs(5) {
                    tracing::warn!("{what}: waiting for the management nodes: {e}");
                    last_log = Instant::now();
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Reads the cluster from the management nodes (before anything else: it says which ports and
/// how many ldm workers this node has).
pub fn fetch(client: &mut MgmClient, stop: &dyn Fn() -> bool) -> Result<StateInfo> {
    retry("reading the cluster", stop, || client.get_state())
}

/// Registers and waits until the node may boot (see the module doc).
pub fn join(client: &mut MgmClient, node: NodeId, data_dir: &Path, stop: &dyn Fn() -> bool) -> Result<Joined> {
    std::fs::create_dir_all(data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
    // An operator's stop holds the node until `tern start --node N`.
    let mut told = false;
    while retry("reading the cluster", stop, || client.get_state())?.stop_requested.contains(&node) {
        if !told {
            tracing::info!(node, "an operator stopped this node; waiting for `tern start --node {node}`");
            told = true;
        }
        if stop() {
            bail!("stopped while waiting for `tern start`");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let inc_path = data_dir.join(tern_runtime::fs::INCARNATION_FILE);
    let last: u32 = std::fs::read_to_string(&inc_path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    // The durable epoch of this node's own system file: a system restart's cut is the smallest
    // of the restarting nodes'.
    let sysfile = std::fs::read(data_dir.join(tern_kernel::sysfile::SYSFILE_NAME)).ok();
    let durable = sysfile.and_then(|b| tern_kernel::sysfile::Sysfile::decode(&b).ok()).map_or(0, |s| s.durable_epoch);
    let incarnation = retry("registering", stop, || client.register(node, last, durable))?;
    std::fs::write(&inc_path, format!("{incarnation}\n")).with_context(|| format!("writing {}", inc_path.display()))?;
    tracing::info!(node, incarnation, "registered with the management nodes");
    let mut last_log = Instant::now();
    loop {
        let info = retry("reading the cluster", stop, || client.get_state())?;
        let st = info.state;
        if st.nodes.get(&node).is_none_or(|s| s.incarnation != incarnation) {
            bail!("node {node} was registered again by another process (incarnation changed)");
        }
        if st.state_of(node) == NodeState::Started {
            // Started by a system restart (ours or another node's proposal).
            let cut = st.durable_epoch;
            return Ok(Joined { state: st, incarnation, recover_to: Some(cut) });
        }
        if !st.live_nodes().is_empty() {
            // The cluster runs: a node restart.
            return Ok(Joined { state: st, incarnation, recover_to: None });
        }
        // A system restart: start every registered node together once all it needs are here.
        let starting: Vec<(NodeId, u32)> =
            st.nodes.iter().filter(|(_, s)| s.state == NodeState::Starting).map(|(&n, s)| (n, s.incarnation)).collect();
        match client.propose(Command::StartCluster { nodes: starting }) {
            Ok(_) => continue,
            Err(ControlError::Rejected(r)) => {
                if last_log.elapsed() > Duration::from_secs(3) {
                    tracing::info!("system restart: waiting for the other data nodes ({r})");
                    last_log = Instant::now();
                }
            }
            Err(e) => tracing::warn!("system restart: {e}"),
        }
        if stop() {
            bail!("stopped while waiting for the other data nodes");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Node states and incarnations, and whether the cluster is down: what makes a map worth
/// handing to the blocks.
type Membership = (Vec<(NodeId, NodeState, u32)>, bool);

/// The membership thread's view of the node it serves.
pub struct Member {
    pub node: NodeId,
    pub incarnation: u32,
    pub heartbeat: Duration,
    pub known_version: u64,
}

/// Runs until `stop()`: heartbeats, cluster maps, control requests, fencing. `publish` hands a
/// map to the node; `fence` stops the node (it does not return in a real process).
pub fn run(
    mut client: MgmClient,
    mut m: Member,
    control: Arc<tern_runtime::ControlInbox>,
    publish: &dyn Fn(Arc<ClusterState>),
    fence: &dyn Fn(&str),
    stop: &dyn Fn() -> bool,
) {
    let mut lease_until: Option<Instant> = None;
    let mut durable_sent = 0u64;
    let mut durable_want = 0u64;
    let mut catalog_sent = 0u64;
    let mut catalog_want: Option<Arc<tern_types::Catalog>> = None;
    let mut state_changes: Vec<NodeState> = Vec::new();
    let mut next_beat = Instant::now();
    // Membership as last logged.
    let mut published: Option<Membership> = None;
    loop {
        if stop() {
            // The node has shut down (its last epochs are durable): report the newest.
            durable_want = durable_want.max(control.take().1);
            if durable_want > durable_sent {
                // Bounded: a stopping node must not hang on management nodes that are gone.
                client.call_timeout = Duration::from_secs(2);
                client.request_timeout = Duration::from_secs(1);
                let _ = client.propose(Command::SetDurableEpoch { epoch: durable_want });
            }
            return;
        }
        // Requests of the blocks: state changes in order; the durable epoch, only the newest.
        let (states, durable) = control.take();
        state_changes.extend(states);
        durable_want = durable_want.max(durable);
        while let Some(&s) = state_changes.first() {
            match client.propose(Command::SetState { node: m.node, incarnation: m.incarnation, state: s }) {
                Ok(_) => {
                    tracing::info!(node = m.node, state = s.name(), "node state changed");
                    state_changes.remove(0);
                }
                Err(ControlError::Rejected(r)) => {
                    fence(&format!("the control plane refused state {}: {r}", s.name()));
                    return;
                }
                Err(e) => {
                    tracing::warn!("proposing state {}: {e}", s.name());
                    break;
                }
            }
        }
        // The master's newest catalog, replicated by the management nodes (newest only; a
        // failed proposal is retried with whatever is newest then).
        if let Some(c) = control.take_catalog().or_else(|| catalog_want.take())
            && c.version > catalog_sent
        {
            let mut bytes = Vec::new();
            c.encode(&mut bytes);
            match client.propose(Command::SetCatalog { version: c.version, bytes }) {
                Ok(_) => catalog_sent = c.version,
                Err(ControlError::Rejected(r)) => {
                    tracing::warn!("the management nodes refused catalog version {}: {r}", c.version);
                    catalog_sent = c.version;
                }
                Err(e) => {
                    tracing::debug!("reporting catalog version {}: {e}", c.version);
                    catalog_want = Some(c);
                }
            }
        }
        if durable_want > durable_sent {
            match client.propose(Command::SetDurableEpoch { epoch: durable_want }) {
                Ok(_) => durable_sent = durable_want,
                Err(e) => tracing::debug!("reporting durable epoch {durable_want}: {e}"),
            }
        }
        if Instant::now() >= next_beat {
            next_beat = Instant::now() + m.heartbeat;
            let suspects = control.take_suspects();
            if !suspects.is_empty() {
                tracing::warn!(?suspects, "reporting data nodes this node cannot reach");
            }
            match client.heartbeat(m.node, m.incarnation, m.known_version, &suspects) {
                Ok(h) => {
                    if h.lease_until.is_some() {
                        lease_until = h.lease_until;
                    }
                    if let Some(st) = h.state
                        && st.version > m.known_version
                    {
                        m.known_version = st.version;
                        let mine = st.nodes.get(&m.node).cloned();
                        if mine.is_none_or(|s| s.incarnation != m.incarnation || s.state == NodeState::Down) {
                            fence("the cluster declared this node failed");
                            return;
                        }
                        if st.cluster_down {
                            fence("the cluster is down (a node group lost all its replicas)");
                            return;
                        }
                        let membership: Membership =
                            (st.nodes.iter().map(|(&n, s)| (n, s.state, s.incarnation)).collect(), st.cluster_down);
                        if published.as_ref() != Some(&membership) {
                            let states: Vec<String> =
                                st.nodes.iter().map(|(n, s)| format!("{n}:{}", s.state.name())).collect();
                            tracing::info!(version = st.version, nodes = %states.join(" "), "new cluster map");
                            published = Some(membership);
                        }
                        // Every version (they move only with membership, catalog or operator
                        // changes): blocks compare map versions across nodes.
                        publish(Arc::new(st));
                    }
                    if h.stop {
                        tracing::info!("an operator asked this node to stop");
                        fence("stopped by an operator");
                        return;
                    }
                }
                Err(e) => tracing::warn!("heartbeat: {e}"),
            }
        }
        if lease_until.is_some_and(|t| Instant::now() >= t) {
            fence("lost contact with the management nodes (lease expired)");
            return;
        }
        std::thread::sleep(Duration::from_millis(10).min(m.heartbeat));
    }
}

/// Where the membership thread puts cluster maps: held until the node has booted (the newest
/// only), then handed to its blocks.
#[derive(Default)]
pub struct Maps {
    inner: std::sync::Mutex<(Option<tern_runtime::MapPublisher>, Option<Arc<ClusterState>>)>,
}

impl Maps {
    pub fn publish(&self, st: Arc<ClusterState>) {
        let mut p = self.inner.lock().expect("maps");
        match &p.0 {
            Some(pb) => pb.publish(st),
            None => p.1 = Some(st),
        }
    }

    pub fn attach(&self, pb: tern_runtime::MapPublisher) {
        let mut p = self.inner.lock().expect("maps");
        if let Some(st) = p.1.take() {
            pb.publish(st);
        }
        p.0 = Some(pb);
    }
}

/// A client of the management nodes for a data node.
pub fn client(addrs: &[String]) -> MgmClient {
    MgmClient::new(addrs.to_vec()).with_role(Role::DataNode)
}
