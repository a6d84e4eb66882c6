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
use tern_kernel::signal::Signal;
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
    /// The master data node in the newest map: only the master's dict proposes catalogs and
    /// learns of one it never saw.
    pub master: Option<NodeId>,
}

/// Runs until `stop()`: heartbeats, cluster maps, control requests, fencing. `publish` hands a
/// map to the node, `to_dict` a signal to its dict; `fence` stops the node (it does not return
/// in a real process).
pub fn run(
    mut client: MgmClient,
    mut m: Member,
    control: Arc<tern_runtime::ControlInbox>,
    publish: &dyn Fn(Arc<ClusterState>),
    to_dict: &dyn Fn(Signal),
    fence: &dyn Fn(&str),
    stop: &dyn Fn() -> bool,
) {
    let mut lease_until: Option<Instant> = None;
    let mut durable_sent = 0u64;
    let mut durable_want = 0u64;
    // The catalog version the management nodes hold as far as this node's dict knows (it
    // proposed or was given it); on the master, another one is fetched and handed to the dict.
    let mut catalog_known: Option<u64> = None;
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
        // A schema change the master's dict proposes (newest only; one that could not reach
        // the management nodes is proposed again, which is idempotent): committed, or refused
        // because they hold another catalog, which the dict is then given.
        if let Some(c) = control.take_catalog().or_else(|| catalog_want.take()) {
            let mut bytes = Vec::new();
            c.encode(&mut bytes);
            match client.propose(Command::SetCatalog { version: c.version, bytes }) {
                Ok(_) => {
                    catalog_known = Some(c.version);
                    to_dict(Signal::CatalogStored { version: c.version });
                }
                Err(ControlError::Rejected(r)) => {
                    tracing::warn!("the management nodes refused catalog version {}: {r}", c.version);
                    match fetch_catalog(&mut client) {
                        Ok(theirs) => {
                            catalog_known = Some(theirs.version);
                            to_dict(Signal::MgmCatalog { catalog: theirs, refused: Some(c.version) });
                        }
                        Err(e) => {
                            tracing::debug!("fetching the catalog: {e}");
                            catalog_want = Some(c);
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!("proposing catalog version {}: {e}", c.version);
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
                    if let Some(st) = &h.state {
                        m.master = st.master();
                    }
                    // The master learns of a catalog it did not propose (an earlier master's
                    // change, or theirs is older than the one on disk here).
                    if m.master == Some(m.node) && catalog_known != Some(h.catalog_version) && catalog_want.is_none() {
                        match fetch_catalog(&mut client) {
                            Ok(theirs) => {
                                catalog_known = Some(theirs.version);
                                to_dict(Signal::MgmCatalog { catalog: theirs, refused: None });
                            }
                            Err(e) => tracing::debug!("fetching the catalog: {e}"),
                        }
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

/// The catalog the management nodes hold (version 0 and empty: none yet).
fn fetch_catalog(client: &mut MgmClient) -> Result<Arc<tern_types::Catalog>> {
    let (version, bytes) = client.get_catalog()?;
    if bytes.is_empty() {
        return Ok(Arc::new(tern_types::Catalog { version: 0, ..tern_types::Catalog::new() }));
    }
    let c = tern_types::Catalog::decode(&bytes).map_err(|e| anyhow::anyhow!("catalog version {version}: {e}"))?;
    Ok(Arc::new(c))
}

/// What the membership thread hands the node before it has booted.
#[derive(Default)]
struct Held {
    publisher: Option<tern_runtime::MapPublisher>,
    /// The newest map only.
    map: Option<Arc<ClusterState>>,
    /// The dict's signals, in order (a handful: one per catalog fetched or proposed).
    dict: Vec<Signal>,
}

/// Where the membership thread puts cluster maps and the dict's signals: held until the node has
/// booted, then handed to its blocks.
#[derive(Default)]
pub struct Maps {
    inner: std::sync::Mutex<Held>,
}

impl Maps {
    pub fn publish(&self, st: Arc<ClusterState>) {
        let mut p = self.inner.lock().expect("maps");
        match &p.publisher {
            Some(pb) => pb.publish(st),
            None => p.map = Some(st),
        }
    }

    pub fn to_dict(&self, sig: Signal) {
        let mut p = self.inner.lock().expect("maps");
        match &p.publisher {
            Some(pb) => pb.to_dict(sig),
            None => p.dict.push(sig),
        }
    }

    pub fn attach(&self, pb: tern_runtime::MapPublisher) {
        let mut p = self.inner.lock().expect("maps");
        if let Some(st) = p.map.take() {
            pb.publish(st);
        }
        for sig in p.dict.drain(..) {
            pb.to_dict(sig);
        }
        p.publisher = Some(pb);
    }
}

/// A client of the management nodes for a data node.
pub fn client(addrs: &[String], secret: Option<&tern_types::secret::ClusterSecret>) -> MgmClient {
    MgmClient::new(addrs.to_vec()).with_role(Role::DataNode).with_secret(secret)
}
