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
//! Then two membership threads run (`run`), each driving one of tern-control's pure membership
//! machines (`tern_control::member`, which the simulator runs too): the heartbeat thread drives
//! `Heart` (heartbeats every `heartbeat_interval_ms`, and nothing else, so it never waits behind
//! a proposal; newer cluster maps to the node's blocks; the fence: a node whose lease ran out,
//! or that the cluster declared failed, stops at once, and the angel of `tern up` restarts it as
//! a node restart). The work thread drives `Work`: the blocks' requests (state changes, the
//! durable epoch, coalesced, catalogs, move reports) and, on an orderly stop, the leave. A lease
//! counts from when its heartbeat was sent and is shorter than the failure timeout, so the node
//! stops serving before the control plane may declare it dead (tern-control's detector, which
//! does not count a stretch in which it was not scheduled itself as silence).

use anyhow::{Context, Result, bail};
use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tern_control::member::{
    Beat, Call, CallError, Done, Heart, HeartAction, HeartConfig, Learned, MoveReport, Work, WorkAction,
};
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
    // The newest epoch this node's disk holds whole: a system restart's cut is the smallest of
    // the restarting nodes'.
    let durable = sysfile_epoch(data_dir);
    let incarnation = retry("registering", stop, || client.register(node, last, durable))?;
    std::fs::write(&inc_path, format!("{incarnation}\n")).with_context(|| format!("writing {}", inc_path.display()))?;
    tracing::info!(node, incarnation, "registered with the management nodes");
    let mut last_log = Instant::now();
    loop {
        let info = retry("reading the cluster", stop, || client.get_state())?;
        let st = info.state.clone();
        if st.nodes.get(&node).is_none_or(|s| s.incarnation != incarnation) {
            bail!("node {node} was registered again by another process (incarnation changed)");
        }
        if st.state_of(node) == NodeState::Started {
            // Started by a system restart (ours or another node's proposal).
            let cut = st.durable_epoch;
            return Ok(Joined { state: st, incarnation, recover_to: Some(cut) });
        }
        if !st.live_nodes().is_empty() {
            // The cluster runs: a node restart, once its master is heard from. Live nodes whose
            // processes are gone (the whole cluster was killed, and the management nodes have
            // not declared them failed yet) are not a cluster to copy from: their failure ends
            // in a system restart, which this node then takes part in.
            let master = st.master();
            let timeout = st.config.failure_timeout_ms;
            if master.is_some_and(|n| info.heard_within(n, timeout)) {
                return Ok(Joined { state: st, incarnation, recover_to: None });
            }
            if last_log.elapsed() > Duration::from_secs(3) {
                tracing::info!(?master, "waiting until the running nodes are heard from, or declared failed");
                last_log = Instant::now();
            }
            if stop() {
                bail!("stopped while waiting for the cluster");
            }
            std::thread::sleep(Duration::from_millis(100));
            continue;
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

/// The membership threads' view of the node they serve.
pub struct Member {
    pub node: NodeId,
    pub incarnation: u32,
    pub heartbeat: Duration,
    pub known_version: u64,
    /// The master data node in the newest map: only the master's dict proposes catalogs and
    /// learns of one it never saw.
    pub master: Option<NodeId>,
    /// Booted by a system restart (from its disk, `Started`); else the node copies and becomes
    /// `Started` only by its own request.
    pub booted_started: bool,
    /// The cluster's failure timeout: a lapsed lease not renewed within it stops the node.
    pub failure_timeout: Duration,
    /// Where the node's system file is (its epoch goes with an orderly leave).
    pub data_dir: std::path::PathBuf,
}

/// How the process steers the membership threads.
#[derive(Default)]
pub struct Steer {
    /// The node stops in order: leave the cluster (the node's last epochs are durable), and do
    /// not fence on the map that shows it gone.
    pub leaving: AtomicBool,
    /// Set once the leave was committed (or could not be, within its bound).
    pub left: AtomicBool,
    /// The threads end.
    pub stop: AtomicBool,
}

impl Steer {
    /// Asks for an orderly leave and waits (at most `bound`) until it is done.
    pub fn leave(&self, bound: Duration) -> bool {
        self.leaving.store(true, Ordering::SeqCst);
        let until = Instant::now() + bound;
        while !self.left.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.left.load(Ordering::SeqCst)
    }
}

type Shared = std::sync::Mutex<Learned>;

/// Runs until `steer.stop`: two threads, so that heartbeats never wait behind proposals.
/// * The heartbeat thread (raised priority where the OS allows): heartbeats every
///   `heartbeat_interval_ms`, hands every newer cluster map to the node's blocks, and fences: a
///   node whose lease ran out, or that the cluster declared failed, stops at once. Its only
///   management-node call is the heartbeat itself.
/// * The work thread: the blocks' requests (state changes in order, the durable epoch, the
///   master's catalog proposals and fetches) and the orderly leave.
///
/// `publish` hands a map to the node, `to_dict` a signal to its dict; `fence` stops the node (it
/// does not return in a real process).
#[allow(clippy::too_many_arguments)]
pub fn run(
    hb_client: MgmClient,
    work_client: MgmClient,
    m: Member,
    control: Arc<tern_runtime::ControlInbox>,
    publish: &(dyn Fn(Arc<ClusterState>) + Sync),
    to_dict: &(dyn Fn(Signal) + Sync),
    lease: &(dyn Fn(Option<Instant>) + Sync),
    fence: &(dyn Fn(&str) + Sync),
    steer: &Steer,
) {
    let shared = Shared::new(Learned { master: m.master, ..Default::default() });
    std::thread::scope(|scope| {
        let (shared, control) = (&shared, &control);
        let (node, incarnation, data_dir) = (m.node, m.incarnation, m.data_dir.clone());
        let work = std::thread::Builder::new().name("tern-member-work".into()).spawn_scoped(scope, move || {
            work_loop(work_client, node, incarnation, &data_dir, control, shared, to_dict, fence, steer)
        });
        if let Err(e) = work {
            fence(&format!("cannot start the membership work thread: {e}"));
            return;
        }
        raise_priority("heartbeat");
        heartbeat_loop(hb_client, m, control, shared, publish, lease, fence, steer);
    });
}

/// Best effort: a thread whose lateness decides whether a node is declared dead runs at a higher
/// priority than request work (nice -10; needs CAP_SYS_NICE, else it stays as it is). Threads
/// it starts inherit it.
pub fn raise_priority(what: &str) {
    // SAFETY: setpriority on the calling thread (Linux: `who` 0 is the calling thread).
    let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -10) };
    if r != 0 {
        tracing::debug!("{what}: could not raise the thread's priority (needs CAP_SYS_NICE)");
    }
}

/// Milliseconds since `origin`: the membership machines' clock.
fn ms(origin: Instant) -> u64 {
    origin.elapsed().as_millis() as u64
}

#[allow(clippy::too_many_arguments)]
fn heartbeat_loop(
    mut client: MgmClient,
    m: Member,
    control: &tern_runtime::ControlInbox,
    shared: &Shared,
    publish: &(dyn Fn(Arc<ClusterState>) + Sync),
    lease: &(dyn Fn(Option<Instant>) + Sync),
    fence: &(dyn Fn(&str) + Sync),
    steer: &Steer,
) {
    // A heartbeat waits at most half a failure timeout (the next one follows at once): the
    // lease checks run between heartbeats, so a call held up by management nodes that cannot
    // be reached (a partition) must not postpone the fence by the client's default timeouts
    // (in the namespace harness a partitioned node took 20 s to fence instead of ~6).
    let half = m.failure_timeout / 2;
    client.connect_timeout = half.min(Duration::from_secs(1));
    client.request_timeout = half;
    client.call_timeout = half;
    let origin = Instant::now();
    let cfg = HeartConfig {
        node: m.node,
        incarnation: m.incarnation,
        heartbeat_ms: m.heartbeat.as_millis() as u64,
        failure_timeout_ms: m.failure_timeout.as_millis() as u64,
        booted_started: m.booted_started,
        known_version: m.known_version,
    };
    let mut heart = Heart::new(cfg, 0);
    // The longest sleep (a stop is seen within it): one heartbeat interval, so an idle node's
    // heartbeat thread wakes once per beat.
    let tick = Duration::from_millis(250).min(m.heartbeat);
    let mut woke_plan = Instant::now() + tick;
    loop {
        if steer.stop.load(Ordering::SeqCst) {
            return;
        }
        // This thread's own lateness: how long it was not scheduled beyond its sleep.
        let late = Instant::now().saturating_duration_since(woke_plan);
        if late > m.heartbeat {
            tracing::warn!(late_ms = late.as_millis() as u64, "the heartbeat thread was not scheduled in time");
        }
        let leaving = steer.leaving.load(Ordering::SeqCst);
        let mut todo: VecDeque<HeartAction> = heart.tick(ms(origin), leaving).into();
        while let Some(action) = todo.pop_front() {
            match action {
                HeartAction::Beat { known_version } => {
                    let suspects = control.take_suspects();
                    if !suspects.is_empty() && !leaving {
                        tracing::warn!(?suspects, "reporting data nodes this node cannot reach");
                    }
                    match client.heartbeat(m.node, m.incarnation, known_version, &suspects) {
                        Ok(h) => {
                            let beat = Beat {
                                granted: h.lease_until.is_some(),
                                lease_ms: h.lease_ms,
                                stop: h.stop,
                                catalog_version: h.catalog_version,
                                state: h.state,
                            };
                            let mut l = shared.lock().unwrap_or_else(|p| p.into_inner());
                            todo.extend(heart.on_reply(ms(origin), beat, leaving, &mut l));
                        }
                        Err(e) => {
                            heart.on_failed();
                            tracing::warn!("heartbeat: {e}");
                        }
                    }
                }
                // The tcs serve clients until then, by their own clock.
                HeartAction::Lease { until_ms } => lease(Some(origin + Duration::from_millis(until_ms))),
                HeartAction::Renewed { lapsed_ms } => tracing::warn!(
                    lapsed_ms,
                    "lease renewed: serving clients again (the management nodes still count on this node)"
                ),
                // The tcs already refuse clients (they compare the lease with their own clock).
                HeartAction::Lapsed => tracing::warn!("lease lapsed: serving no client until it is renewed"),
                HeartAction::Membership(st) => {
                    let states: Vec<String> = st.nodes.iter().map(|(n, s)| format!("{n}:{}", s.state.name())).collect();
                    tracing::info!(version = st.version, nodes = %states.join(" "), "new cluster map");
                }
                HeartAction::Publish(st) => publish(st),
                HeartAction::Fence(why) => {
                    fence(&why);
                    return;
                }
                HeartAction::RequestStop => {
                    // An orderly stop, as SIGTERM: flush and leave; then the process starts
                    // again in place and waits for `tern start --node N`.
                    tracing::info!("an operator asked this node to stop");
                    crate::request_stop();
                }
            }
        }
        // Asleep until the next thing to do, and within `tick` of a stop.
        let now = Instant::now();
        let due = origin + Duration::from_millis(heart.wake_at(leaving));
        woke_plan = due.min(now + tick).max(now);
        std::thread::sleep(woke_plan - now);
    }
}

#[allow(clippy::too_many_arguments)]
fn work_loop(
    mut client: MgmClient,
    node: NodeId,
    incarnation: u32,
    data_dir: &Path,
    control: &tern_runtime::ControlInbox,
    shared: &Shared,
    to_dict: &(dyn Fn(Signal) + Sync),
    fence: &(dyn Fn(&str) + Sync),
    steer: &Steer,
) {
    let origin = Instant::now();
    let mut work = Work::new(node, incarnation);
    loop {
        if steer.stop.load(Ordering::SeqCst) || steer.leaving.load(Ordering::SeqCst) {
            leave(&mut client, &mut work, node, data_dir, control, steer);
            return;
        }
        let (states, durable) = control.take();
        let moves = control.take_moves().into_iter().map(|r| MoveReport {
            left: r.left,
            table: r.table,
            partition: r.partition,
        });
        work.intake(states, durable, moves, control.take_reorganize(), control.take_catalog());
        work.begin_round();
        loop {
            let call = {
                let mut l = shared.lock().unwrap_or_else(|p| p.into_inner());
                work.next_call(ms(origin), &mut l)
            };
            let Some(mut call) = call else { break };
            loop {
                let result = perform(&mut client, &call);
                log_outcome(node, &call, &result);
                for action in work.on_result(result) {
                    match action {
                        WorkAction::CatalogStored { version } => to_dict(Signal::CatalogStored { version }),
                        WorkAction::MgmCatalog { catalog, refused } => to_dict(Signal::MgmCatalog { catalog, refused }),
                        WorkAction::Fence(why) => {
                            fence(&why);
                            return;
                        }
                    }
                }
                match work.follow_up() {
                    Some(c) => call = c,
                    None => break,
                }
            }
        }
        // Woken by a state change or a catalog; the stop, the leave, the durable epoch and the
        // heartbeat thread's news are looked at within WORK_POLL.
        control.wait(WORK_POLL);
    }
}

/// The node has flushed (its last epochs are durable): report the newest, then leave the write
/// chains in order. Bounded: a stopping node must not hang on management nodes that are gone.
fn leave(
    client: &mut MgmClient,
    work: &mut Work,
    node: NodeId,
    data_dir: &Path,
    control: &tern_runtime::ControlInbox,
    steer: &Steer,
) {
    client.call_timeout = Duration::from_secs(2);
    client.request_timeout = Duration::from_secs(1);
    let leaving = steer.leaving.load(Ordering::SeqCst) && !steer.left.load(Ordering::SeqCst);
    let sysfile_epoch = if leaving { sysfile_epoch(data_dir) } else { 0 };
    for cmd in work.leave_calls(control.take().1, leaving, sysfile_epoch) {
        let is_leave = matches!(cmd, Command::Leave { .. });
        match client.propose(cmd) {
            Ok(_) if is_leave => tracing::info!(node, sysfile_epoch, "left the cluster in order"),
            Err(e) if is_leave => tracing::warn!("leaving the cluster in order: {e}"),
            _ => {}
        }
    }
    if leaving {
        steer.left.store(true, Ordering::SeqCst);
    }
    while !steer.stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Makes one call of the work machine.
fn perform(client: &mut MgmClient, call: &Call) -> Result<Done, CallError> {
    match call {
        Call::Propose(cmd) => match client.propose(cmd.clone()) {
            Ok(_) => Ok(Done::Committed),
            Err(ControlError::Rejected(r)) => Err(CallError::Rejected(r)),
            Err(e) => Err(CallError::Unavailable(e.to_string())),
        },
        Call::FetchCatalog => {
            fetch_catalog(client).map(Done::Catalog).map_err(|e| CallError::Unavailable(e.to_string()))
        }
    }
}

/// A log line for what a call came to.
fn log_outcome(node: NodeId, call: &Call, result: &Result<Done, CallError>) {
    match (call, result) {
        (Call::Propose(Command::SetState { state, .. }), Ok(_)) => {
            tracing::info!(node, state = state.name(), "node state changed")
        }
        (Call::Propose(Command::SetState { state, .. }), Err(CallError::Unavailable(e))) => {
            tracing::warn!("proposing state {}: {e}", state.name())
        }
        (Call::Propose(Command::Reorganize { table }), Ok(_)) => {
            tracing::info!(table, "table reorganised over the node groups in service")
        }
        (Call::Propose(Command::Reorganize { table }), Err(CallError::Rejected(why))) => {
            tracing::warn!(table, "reorganising a table was refused: {why}")
        }
        (
            Call::Propose(Command::MoveCopied { table, partition, .. } | Command::MoveLeft { table, partition, .. }),
            Ok(_),
        ) => {
            let left = matches!(call, Call::Propose(Command::MoveLeft { .. }));
            tracing::info!(node, table, partition, left, "partition move reported")
        }
        (Call::Propose(Command::SetCatalog { version, .. }), Err(CallError::Rejected(r))) => {
            tracing::warn!("the management nodes refused catalog version {version}: {r}")
        }
        (_, Err(e)) => tracing::debug!("{}: {e:?}", call_name(call)),
        _ => {}
    }
}

fn call_name(call: &Call) -> &'static str {
    match call {
        Call::Propose(Command::SetState { .. }) => "proposing a state",
        Call::Propose(Command::Reorganize { .. }) => "reorganising a table",
        Call::Propose(Command::MoveCopied { .. } | Command::MoveLeft { .. }) => "reporting a partition move",
        Call::Propose(Command::SetCatalog { .. }) => "proposing a catalog",
        Call::Propose(Command::SetDurableEpoch { .. }) => "reporting the durable epoch",
        Call::Propose(_) => "proposing",
        Call::FetchCatalog => "fetching the catalog",
    }
}

/// How often the work thread looks at what does not wake it (the stop, the leave, the durable
/// epoch's report, the master's catalog news); state changes and catalogs wake it at once.
const WORK_POLL: Duration = Duration::from_millis(250);

/// The newest epoch the node's disk holds whole (`recovery::node_epoch`: its system file's, or a
/// newer one marked in all its redo logs; 0 when it has no system file or cannot be read — the
/// recovery that follows reports why).
fn sysfile_epoch(data_dir: &Path) -> u64 {
    tern_kernel::recovery::node_epoch(&tern_runtime::fs::FsStorage::new(data_dir)).unwrap_or(0)
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
    /// The newest lease.
    lease: Option<Option<Instant>>,
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

    pub fn lease(&self, until: Option<Instant>) {
        let mut p = self.inner.lock().expect("maps");
        match &p.publisher {
            Some(pb) => pb.lease(until),
            None => p.lease = Some(until),
        }
    }

    pub fn attach(&self, pb: tern_runtime::MapPublisher) {
        let mut p = self.inner.lock().expect("maps");
        if let Some(until) = p.lease.take() {
            pb.lease(until);
        }
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
