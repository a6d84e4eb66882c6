//! The `dict` block (NDB: DBDICT): runs schema changes and keeps the data node's copy of the
//! catalog. The catalog itself is owned by the management nodes: the master node's dict runs DDL
//! for the whole cluster, one request at a time (other nodes' tcs send theirs to it), and a change
//! happens when the management nodes commit the new catalog (`ControlReq::Catalog`, answered
//! `CatalogStored`). Only then does every live node's dict persist it (atomic file replace) and
//! distribute it to its own tcs and ldms, and the master answers the client. A master that finds
//! the management nodes holding a newer catalog (a change an earlier master committed but did not
//! write everywhere before it failed, or one made before a whole-cluster crash) writes that one to
//! every node (`MgmCatalog`). Without management nodes (one data node) the runtime answers
//! `CatalogStored` itself.
//!
//! The master also hands out AUTO_INCREMENT ranges, persisting a high-water mark (a catalog
//! change too) so values are never reused after a restart or a change of master.
//!
//! CREATE INDEX first builds the index in every ldm of every live node (which also checks
//! uniqueness over existing rows); only when all succeed is the new catalog proposed. A failure
//! (or a refused proposal) sends the old catalog back out, which makes the ldms drop the
//! half-built index.

use crate::signal::{Addr, Block, ClientId, IoReq, NodeId, Out, Signal};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use tern_types::cluster::{ClusterState, NodeState};
use tern_types::schema::{Database, IndexId, TableId, check_ident};
use tern_types::{Catalog, ErrorCode, TernError};
use tern_wire::{DdlReq, Reply};
// (`DdlReq::Reorganize` is answered in `begin`; `plan` never sees it.)

pub const CATALOG_FILE: &str = "catalog";
/// Queued schema requests beyond the running one; more answer "overloaded".
pub const DDL_QUEUE_MAX: usize = 1024;
pub const PARTITIONS_MAX: u32 = 1024;
const AUTO_INC_PREFETCH: u64 = 1000;

enum Stage {
    BuildIndex {
        catalog: Arc<Catalog>,
        index: IndexId,
        waiting: usize,
        failure: Option<TernError>,
    },
    Revert {
        waiting: usize,
        error: TernError,
    },
    /// Waiting for the management nodes to commit the catalog (`broadcast` as for `Write`;
    /// `built`: an index was built for it, to be dropped if the proposal is refused).
    Store {
        catalog: Arc<Catalog>,
        broadcast: bool,
        built: bool,
    },
    /// Every live node's dict writes (and applies) the catalog.
    Write {
        catalog: Arc<Catalog>,
        waiting: BTreeSet<NodeId>,
    },
}

/// This node's part of a catalog change: write the file, apply it locally, answer the master.
struct LocalWrite {
    /// Who asked for this write (answered when it is done): the master, and a new master that
    /// asked for the same catalog while it was being written (the old one may have failed).
    masters: Vec<Addr>,
    catalog: Arc<Catalog>,
    broadcast: bool,
    token: u64,
    /// Local tcs and ldms yet to acknowledge (after the file is written).
    waiting: Option<usize>,
}

/// Who a job answers.
enum Origin {
    /// A client's DDL or AUTO_INCREMENT request.
    Client { client: ClientId, req_id: u64, reply_to: Addr },
    /// A restarting node's dist asked for the catalog (told `SchemaWritten` when its dict has it).
    Join(Addr),
    /// The management nodes hold a newer catalog than this master: nobody waits for it.
    Adopt,
}

struct Job {
    origin: Origin,
    reply: Reply,
    stage: Stage,
}

pub struct Dict {
    addr: Addr,
    cluster: Arc<ClusterState>,
    catalog: Arc<Catalog>,
    job: Option<Job>,
    local: Option<LocalWrite>,
    /// Restarting nodes that fetched the catalog: every later change is written to them too.
    joining: BTreeMap<NodeId, u32>,
    /// A catalog write that arrived while another was in progress.
    queued_write: Option<Signal>,
    queue: VecDeque<Signal>,
    auto_next: HashMap<TableId, u64>,
    next_token: u64,
    /// Schema requests this dict forwarded to the master, by the request id it gave them: the
    /// answer comes back through here, so a master that fails leaves nobody waiting.
    forwarded: BTreeMap<u64, Forwarded>,
    /// The newest catalog version this dict, as master, has had written on every live node. A
    /// new master (a takeover, a system restart) writes its catalog everywhere once, even when
    /// the management nodes hold the same version: the master before it may have failed (or
    /// the cluster crashed) before every node had it.
    everywhere: u64,
}

struct Forwarded {
    master: NodeId,
    client: ClientId,
    req_id: u64,
    reply_to: Addr,
    ddl: bool,
}

fn error_reply(code: ErrorCode, msg: impl Into<String>) -> Reply {
    Reply::Error(TernError::new(code, msg))
}

impl Dict {
    pub fn new(addr: Addr, cluster: Arc<ClusterState>, catalog: Arc<Catalog>) -> Dict {
        Dict {
            addr,
            cluster,
            catalog,
            job: None,
            local: None,
            joining: BTreeMap::new(),
            queued_write: None,
            queue: VecDeque::new(),
            auto_next: HashMap::new(),
            next_token: 0,
            forwarded: BTreeMap::new(),
            everywhere: 0,
        }
    }

    /// What the dict is doing (for the simulator's failure reports).
    pub fn describe(&self) -> String {
        let stage = self.job.as_ref().map(|j| match &j.stage {
            Stage::Store { catalog, .. } => format!("store v{}", catalog.version),
            Stage::Write { catalog, waiting } => format!("write v{} waiting {waiting:?}", catalog.version),
            Stage::BuildIndex { .. } => "build index".to_string(),
            Stage::Revert { .. } => "revert".to_string(),
        });
        format!(
            "map v{} catalog v{} master {} job {:?} queue {} local {:?} forwarded {}",
            self.cluster.version,
            self.catalog.version,
            self.is_master(),
            stage,
            self.queue.len(),
            self.local.as_ref().map(|w| (w.catalog.version, w.waiting)),
            self.forwarded.len()
        )
    }

    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    fn is_master(&self) -> bool {
        self.cluster.master().is_none_or(|m| m == self.addr.node)
    }

    /// Every ldm of every live node.
    fn all_ldms(&self) -> Vec<Addr> {
        let n = self.cluster.config.ldm_workers;
        self.cluster
            .live_nodes()
            .into_iter()
            .flat_map(|node| (0..n).map(move |i| Addr::new(node, Block::Ldm(i))))
            .collect()
    }

    /// This node's tcs and ldms.
    fn local_blocks(&self) -> Vec<Addr> {
        let (node, n) = (self.addr.node, self.cluster.config.ldm_workers);
        (0..n).flat_map(|i| [Addr::new(node, Block::Ldm(i)), Addr::new(node, Block::Tc(i))]).collect()
    }

    pub fn handle(&mut self, _now_ms: u64, sig: Signal, out: &mut Out) {
        match sig {
            Signal::Ddl { .. } | Signal::AutoInc { .. } | Signal::CatalogReq { .. } if !self.is_master() => {
                let master = Addr::new(self.cluster.master().expect("a master"), Block::Dict);
                let sig = match sig {
                    Signal::Ddl { client, req_id, reply_to, req } => {
                        let token = self.forward(master.node, client, req_id, reply_to, true);
                        Signal::Ddl { client, req_id: token, reply_to: self.addr, req }
                    }
                    Signal::AutoInc { client, req_id, reply_to, table, count } => {
                        let token = self.forward(master.node, client, req_id, reply_to, false);
                        Signal::AutoInc { client, req_id: token, reply_to: self.addr, table, count }
                    }
                    other => other,
                };
                out.send(master, sig);
            }
            Signal::DdlReply { req_id, reply, .. } => {
                // The master's answer to a request forwarded from here.
                if let Some(f) = self.forwarded.remove(&req_id) {
                    out.send(f.reply_to, Signal::DdlReply { client: f.client, req_id: f.req_id, reply });
                }
            }
            Signal::CatalogStored { .. } | Signal::MgmCatalog { .. } if !self.is_master() => {
                // Mastership moved on: the new master's control plane tells it.
            }
            Signal::CatalogStored { version } => self.stored(version, out),
            Signal::MgmCatalog { catalog, refused: Some(v) } if matches!(self.job.as_ref().map(|j| &j.stage), Some(Stage::Store { catalog: c, .. }) if c.version == v) => {
                self.refused(catalog, v, out)
            }
            Signal::MgmCatalog { catalog, refused } => {
                let sig = Signal::MgmCatalog { catalog, refused };
                if self.job.is_none() {
                    self.begin(sig, out);
                } else {
                    // One waits at most: the newest.
                    match self.queue.iter_mut().find(|q| matches!(q, Signal::MgmCatalog { .. })) {
                        Some(q) => *q = sig,
                        None => self.queue.push_back(sig),
                    }
                }
            }
            Signal::CatalogReq { from, .. }
                if self.job.as_ref().is_some_and(|j| matches!(j.origin, Origin::Join(a) if a.node == from.node)) =>
            {
                // A restarting node asks again (its first request or our write to it was lost
                // while the maps caught up): write again; the job completes on its answer.
                if let Some(Stage::Write { catalog, .. }) = self.job.as_ref().map(|j| &j.stage) {
                    let sig = Signal::SchemaWrite { from: self.addr, catalog: catalog.clone(), broadcast: true };
                    out.send(Addr::new(from.node, Block::Dict), sig);
                }
            }
            Signal::CatalogReq { from, .. }
                if self
                    .queue
                    .iter()
                    .any(|q| matches!(q, Signal::CatalogReq { from: f, .. } if f.node == from.node)) => {}
            Signal::Ddl { .. } | Signal::AutoInc { .. } | Signal::CatalogReq { .. } => {
                if self.job.is_some() {
                    if self.queue.len() >= DDL_QUEUE_MAX {
                        if let Signal::Ddl { client, req_id, reply_to, .. }
                        | Signal::AutoInc { client, req_id, reply_to, .. } = sig
                        {
                            let reply = error_reply(ErrorCode::Overloaded, "too many schema requests queued");
                            out.send(reply_to, Signal::DdlReply { client, req_id, reply });
                        }
                        return;
                    }
                    self.queue.push_back(sig);
                } else {
                    self.begin(sig, out);
                }
            }
            Signal::IndexBuilt { result, index, .. } => self.index_built(index, result, out),
            Signal::SchemaAck { version, .. } => self.schema_ack(version, out),
            Signal::IoDone { token, result } => self.written(token, result, out),
            Signal::SchemaWrite { .. } => self.schema_write(sig, out),
            Signal::SchemaWritten { from, version } => self.node_written(from.node, version, out),
            Signal::ClusterMap { state } if state.version <= self.cluster.version => {
                // An older map after a newer one (as every block does, ignore it): acting on it
                // would make this dict forward to a master the newer map declared failed.
            }
            Signal::ClusterMap { state } => self.cluster_map(state, out),
            other => crate::signal::drop_unexpected(self.addr, "dict", &other),
        }
    }

    /// A newer cluster map: forgets joins that ended, fails requests forwarded to a master that
    /// failed, and counts a failed node out of the write in progress.
    fn cluster_map(&mut self, state: std::sync::Arc<ClusterState>, out: &mut Out) {
        assert!(state.version > self.cluster.version, "dict: cluster maps only move forward");
        // A node of the request's incarnation that left the start-up states has started
        // (it is live) or failed; a map of an older incarnation predates the request.
        self.joining.retain(|n, inc| {
            state.nodes.get(n).is_some_and(|s| {
                s.incarnation < *inc
                    || (s.incarnation == *inc && matches!(s.state, NodeState::Starting | NodeState::Copying))
            })
        });
        // Requests forwarded to a master that failed: it may or may not have committed
        // a schema change (a new master writes one it did); an AUTO_INCREMENT range can
        // simply be asked for again.
        let failed: Vec<u64> = self
            .forwarded
            .iter()
            .filter(|(_, f)| {
                let was = self.cluster.nodes.get(&f.master).map(|s| s.incarnation);
                state.state_of(f.master) != NodeState::Started
                    || state.nodes.get(&f.master).map(|s| s.incarnation) != was
            })
            .map(|(&t, _)| t)
            .collect();
        for t in failed {
            let f = self.forwarded.remove(&t).expect("listed");
            let e = if f.ddl {
                TernError::new(
                    ErrorCode::UnknownResult,
                    "the master data node failed during the schema change; whether it happened is unknown (check, then try again)",
                )
            } else {
                TernError::new(ErrorCode::NodeFailure, "the master data node failed; try again")
            };
            out.send(f.reply_to, Signal::DdlReply { client: f.client, req_id: f.req_id, reply: Reply::Error(e) });
        }
        self.cluster = state;
        // A node that failed will not answer the write in progress.
        let gone: Vec<NodeId> = match self.job.as_ref().map(|j| &j.stage) {
            Some(Stage::Write { waiting, .. }) => waiting
                .iter()
                .copied()
                .filter(|&n| self.cluster.state_of(n) == NodeState::Down && !self.joining.contains_key(&n))
                .collect(),
            _ => Vec::new(),
        };
        for n in gone {
            if let Some(Stage::Write { catalog, .. }) = self.job.as_ref().map(|j| &j.stage) {
                let v = catalog.version;
                self.node_written(n, v, out);
            }
        }
    }

    /// A master's request to write a catalog to this node's disk (`SchemaWrite`).
    fn schema_write(&mut self, sig: Signal, out: &mut Out) {
        match sig {
            Signal::SchemaWrite { from, catalog, .. }
                if self.local.as_ref().is_some_and(|w| *w.catalog == *catalog) =>
            {
                // Asked again while this very write is in progress: it answers every asker.
                let w = self.local.as_mut().expect("checked");
                if !w.masters.contains(&from) {
                    w.masters.push(from);
                }
            }
            Signal::SchemaWrite { from, catalog, .. } if self.local.is_none() && *self.catalog == *catalog => {
                // Applied already (a repeated request): answer again.
                out.send(from, Signal::SchemaWritten { from: self.addr, version: catalog.version });
            }
            Signal::SchemaWrite { .. } if self.local.is_some() => {
                // A different catalog while one is being written (a restarting node asked again
                // while a DDL went on): after this one, the newest waits.
                self.queued_write = Some(sig);
            }
            Signal::SchemaWrite { from, catalog, broadcast } => {
                let bytes = encode_catalog_file(&catalog);
                self.next_token += 1;
                let token = self.next_token;
                out.io(self.addr, IoReq::WriteFile { name: CATALOG_FILE.into(), bytes, token });
                self.local = Some(LocalWrite { masters: vec![from], catalog, broadcast, token, waiting: None });
            }
            _ => unreachable!("schema_write takes SchemaWrite"),
        }
    }

    /// Remembers a request forwarded to the master; returns the request id it goes with.
    fn forward(&mut self, master: NodeId, client: ClientId, req_id: u64, reply_to: Addr, ddl: bool) -> u64 {
        self.next_token += 1;
        let token = self.next_token;
        self.forwarded.insert(token, Forwarded { master, client, req_id, reply_to, ddl });
        token
    }

    fn begin(&mut self, sig: Signal, out: &mut Out) {
        match sig {
            Signal::Ddl { client, req_id, reply_to, req: DdlReq::Reorganize { database, table } } => {
                // No catalog change: the control plane moves the partitions.
                let reply = match self.catalog.find_table(&database, &table) {
                    Some(t) => {
                        let mut tables = vec![t.id];
                        tables.extend(t.indexes.iter().filter_map(|i| self.catalog.index_tables.get(&i.id).copied()));
                        out.control.push(crate::signal::ControlReq::Reorganize { tables });
                        Reply::DdlDone { catalog_version: self.catalog.version }
                    }
                    None => Reply::Error(TernError::new(
                        ErrorCode::NoSuchTable,
                        format!("Table '{database}.{table}' doesn't exist"),
                    )),
                };
                out.send(reply_to, Signal::DdlReply { client, req_id, reply });
                self.next_job(out);
            }
            Signal::Ddl { client, req_id, reply_to, req } => match self.plan(req) {
                Ok(Some((catalog, build))) => {
                    let reply = Reply::DdlDone { catalog_version: catalog.version };
                    let stage = Stage::Write { catalog: catalog.clone(), waiting: BTreeSet::new() };
                    let mut job = Job { origin: Origin::Client { client, req_id, reply_to }, reply, stage };
                    match build {
                        Some((table, index)) => {
                            let ldms = self.all_ldms();
                            for &l in &ldms {
                                let catalog = catalog.clone();
                                out.send(l, Signal::IndexBuild { dict: self.addr, table, index, catalog });
                            }
                            job.stage = Stage::BuildIndex { catalog, index, waiting: ldms.len(), failure: None };
                            self.job = Some(job);
                        }
                        None => {
                            self.job = Some(job);
                            self.store(catalog, true, false, out);
                        }
                    }
                }
                Ok(None) => {
                    let reply = Reply::DdlDone { catalog_version: self.catalog.version };
                    out.send(reply_to, Signal::DdlReply { client, req_id, reply });
                    self.next_job(out);
                }
                Err(e) => {
                    out.send(reply_to, Signal::DdlReply { client, req_id, reply: Reply::Error(e) });
                    self.next_job(out);
                }
            },
            Signal::CatalogReq { from, incarnation } => {
                // A restarting node: write the catalog there, and every later change too.
                self.joining.insert(from.node, incarnation);
                let catalog = self.catalog.clone();
                let waiting: BTreeSet<NodeId> = [from.node].into();
                let sig = Signal::SchemaWrite { from: self.addr, catalog: catalog.clone(), broadcast: true };
                out.send(Addr::new(from.node, Block::Dict), sig);
                let reply = Reply::DdlDone { catalog_version: catalog.version };
                let stage = Stage::Write { catalog, waiting };
                self.job = Some(Job { origin: Origin::Join(from), reply, stage });
            }
            Signal::MgmCatalog { catalog, refused } => {
                use std::cmp::Ordering;
                match catalog.version.cmp(&self.catalog.version) {
                    Ordering::Greater => {
                        // Committed by an earlier master but not written everywhere: write it.
                        let reply = Reply::DdlDone { catalog_version: catalog.version };
                        let stage = Stage::Write { catalog: catalog.clone(), waiting: BTreeSet::new() };
                        self.job = Some(Job { origin: Origin::Adopt, reply, stage });
                        self.write(catalog, true, out);
                    }
                    Ordering::Equal if self.everywhere < catalog.version => {
                        // Ours is theirs, but some node may lack it: write it everywhere.
                        let reply = Reply::DdlDone { catalog_version: catalog.version };
                        let stage = Stage::Write { catalog: catalog.clone(), waiting: BTreeSet::new() };
                        self.job = Some(Job { origin: Origin::Adopt, reply, stage });
                        self.write(self.catalog.clone(), true, out);
                    }
                    Ordering::Less if refused.is_none() => {
                        // The management nodes have not seen this catalog (a data directory from
                        // before they owned it): give it to them; nobody waits. (Not again when
                        // they refused it, e.g. over their size limit.)
                        out.control.push(crate::signal::ControlReq::Catalog(self.catalog.clone()));
                        self.next_job(out);
                    }
                    Ordering::Less | Ordering::Equal => self.next_job(out),
                }
            }
            Signal::AutoInc { client, req_id, reply_to, table, count } => {
                if self.catalog.table(table).is_none() {
                    let reply = error_reply(ErrorCode::NoSuchTable, format!("table id {table} does not exist"));
                    out.send(reply_to, Signal::DdlReply { client, req_id, reply });
                    return self.next_job(out);
                }
                let count = count.clamp(1, 1_000_000);
                let high = self.catalog.auto_inc_high.get(&table).copied().unwrap_or(1);
                let next = *self.auto_next.entry(table).or_insert(high);
                self.auto_next.insert(table, next + count as u64);
                let reply = Reply::AutoIncRange { start: next, count };
                if next + count as u64 <= high {
                    out.send(reply_to, Signal::DdlReply { client, req_id, reply });
                    return self.next_job(out);
                }
                let mut c = (*self.catalog).clone();
                // A new version (not applied by tcs and ldms): the management nodes accept only
                // growing versions.
                c.version += 1;
                c.auto_inc_high.insert(table, next + count as u64 + AUTO_INC_PREFETCH);
                let c = Arc::new(c);
                let stage = Stage::Write { catalog: c.clone(), waiting: BTreeSet::new() };
                self.job = Some(Job { origin: Origin::Client { client, req_id, reply_to }, reply, stage });
                self.store(c, false, false, out);
            }
            other => panic!("not a schema request: {other:?}"),
        }
    }

    fn next_job(&mut self, out: &mut Out) {
        self.job = None;
        if let Some(sig) = self.queue.pop_front() {
            self.begin(sig, out);
        }
    }

    /// Proposes the running job's catalog to the management nodes.
    fn store(&mut self, catalog: Arc<Catalog>, broadcast: bool, built: bool, out: &mut Out) {
        out.control.push(crate::signal::ControlReq::Catalog(catalog.clone()));
        self.job.as_mut().expect("a job").stage = Stage::Store { catalog, broadcast, built };
    }

    /// The management nodes committed the catalog of `version`: write it to every node.
    fn stored(&mut self, version: u64, out: &mut Out) {
        let Some(Stage::Store { catalog, broadcast, .. }) = self.job.as_ref().map(|j| &j.stage) else { return };
        if catalog.version != version {
            return;
        }
        let (catalog, broadcast) = (catalog.clone(), *broadcast);
        self.write(catalog, broadcast, out);
    }

    /// The management nodes refused the running job's catalog: they hold `theirs`, which this
    /// master never saw. The job fails with a temporary error (after dropping an index built
    /// for it); then `theirs` is written to every node.
    fn refused(&mut self, theirs: Arc<Catalog>, version: u64, out: &mut Out) {
        let ldms = self.all_ldms();
        let job = self.job.as_mut().expect("a job");
        let Stage::Store { built, .. } = job.stage else { unreachable!("checked by the caller") };
        let error = TernError::new(
            ErrorCode::SchemaChanged,
            "the management nodes did not accept the new catalog (an earlier master node changed the schema, or it is over their size limit); try again",
        );
        self.queue.retain(|q| !matches!(q, Signal::MgmCatalog { .. }));
        self.queue.push_front(Signal::MgmCatalog { catalog: theirs, refused: Some(version) });
        if built {
            for &l in &ldms {
                out.send(l, Signal::Schema { catalog: self.catalog.clone(), dict: self.addr });
            }
            job.stage = Stage::Revert { waiting: ldms.len(), error };
        } else {
            job.reply = Reply::Error(error);
            self.finish(out);
        }
    }

    /// Has every live node's dict write (and, with `broadcast`, apply) `catalog`.
    fn write(&mut self, catalog: Arc<Catalog>, broadcast: bool, out: &mut Out) {
        let nodes: BTreeSet<NodeId> =
            self.cluster.live_nodes().into_iter().chain(self.joining.keys().copied()).collect();
        for &n in &nodes {
            let sig = Signal::SchemaWrite { from: self.addr, catalog: catalog.clone(), broadcast };
            out.send(Addr::new(n, Block::Dict), sig);
        }
        self.job.as_mut().expect("a job").stage = Stage::Write { catalog, waiting: nodes };
    }

    /// This node's catalog file is written: apply it here, then answer the master.
    fn written(&mut self, token: u64, result: Result<(), String>, out: &mut Out) {
        if let Err(e) = result {
            panic!("dict: writing the catalog failed: {e}");
        }
        let Some(w) = self.local.as_mut() else { return };
        if w.token != token || w.waiting.is_some() {
            return;
        }
        debug_assert!(
            w.catalog.version >= self.catalog.version,
            "invariant: catalog versions only grow ({} after {})",
            w.catalog.version,
            self.catalog.version
        );
        self.catalog = w.catalog.clone();
        if !w.broadcast {
            return self.local_done(out);
        }
        let targets = self.local_blocks();
        let w = self.local.as_mut().expect("writing");
        w.waiting = Some(targets.len());
        for a in targets {
            out.send(a, Signal::Schema { catalog: w.catalog.clone(), dict: self.addr });
        }
    }

    fn local_done(&mut self, out: &mut Out) {
        let w = self.local.take().expect("writing");
        for m in w.masters {
            out.send(m, Signal::SchemaWritten { from: self.addr, version: w.catalog.version });
        }
        if let Some(next) = self.queued_write.take() {
            self.handle(0, next, out);
        }
    }

    fn schema_ack(&mut self, version: u64, out: &mut Out) {
        if let Some(w) = self.local.as_mut()
            && w.catalog.version == version
            && let Some(waiting) = w.waiting.as_mut()
        {
            *waiting -= 1;
            if *waiting == 0 {
                self.local_done(out);
            }
            return;
        }
        let Some(job) = self.job.as_mut() else { return };
        if let Stage::Revert { waiting, error } = &mut job.stage {
            *waiting -= 1;
            if *waiting == 0 {
                job.reply = Reply::Error(error.clone());
                self.finish(out);
            }
        }
    }

    /// The master: a node has written and applied the catalog of the running job.
    fn node_written(&mut self, node: NodeId, version: u64, out: &mut Out) {
        let Some(job) = self.job.as_mut() else { return };
        let Stage::Write { catalog, waiting } = &mut job.stage else { return };
        if catalog.version != version {
            return;
        }
        waiting.remove(&node);
        if waiting.is_empty() {
            if !matches!(job.origin, Origin::Join(_)) {
                self.everywhere = self.everywhere.max(version);
            }
            self.finish(out);
        }
    }

    fn index_built(&mut self, index: IndexId, result: Result<(), TernError>, out: &mut Out) {
        let Some(job) = self.job.as_mut() else { return };
        let Stage::BuildIndex { catalog, index: want, waiting, failure } = &mut job.stage else {
            return;
        };
        if *want != index {
            return;
        }
        if let Err(e) = result {
            failure.get_or_insert(e);
        }
        *waiting -= 1;
        if *waiting > 0 {
            return;
        }
        let catalog = catalog.clone();
        match failure.take() {
            None => self.store(catalog, true, true, out),
            Some(error) => {
                // Send the unchanged catalog: ldms drop indexes it does not name.
                let ldms = self.all_ldms();
                for &l in &ldms {
                    out.send(l, Signal::Schema { catalog: self.catalog.clone(), dict: self.addr });
                }
                let job = self.job.as_mut().expect("a job");
                job.stage = Stage::Revert { waiting: ldms.len(), error };
            }
        }
    }

    fn finish(&mut self, out: &mut Out) {
        let job = self.job.take().expect("a job");
        match job.origin {
            Origin::Join(dist) => {
                out.send(dist, Signal::SchemaWritten { from: self.addr, version: self.catalog.version })
            }
            Origin::Client { client, req_id, reply_to } => {
                out.send(reply_to, Signal::DdlReply { client, req_id, reply: job.reply })
            }
            Origin::Adopt => {}
        }
        self.next_job(out);
    }

    /// Validates a DDL request against the current catalog. Ok(None): nothing to change
    /// (IF [NOT] EXISTS). Ok(Some((catalog, index to build))) otherwise.
    #[allow(clippy::type_complexity)]
    fn plan(&self, req: DdlReq) -> Result<Option<(Arc<Catalog>, Option<(TableId, IndexId)>)>, TernError> {
        let mut c = (*self.catalog).clone();
        c.version += 1;
        let mut build = None;
        match req {
            DdlReq::CreateDatabase { name, if_not_exists } => {
                check_ident("database", &name)?;
                if c.databases.contains_key(&name) {
                    if if_not_exists {
                        return Ok(None);
                    }
                    return Err(TernError::new(
                        ErrorCode::DatabaseExists,
                        format!("Can't create database '{name}'; database exists"),
                    ));
                }
                c.databases.insert(name.clone(), Database { name });
            }
            DdlReq::DropDatabase { name, if_exists } => {
                if c.databases.remove(&name).is_none() {
                    if if_exists {
                        return Ok(None);
                    }
                    return Err(TernError::new(
                        ErrorCode::NoSuchDatabase,
                        format!("Can't drop database '{name}'; database doesn't exist"),
                    ));
                }
                c.tables.retain(|_, t| t.database != name);
                let live: Vec<TableId> = c.tables.keys().copied().collect();
                c.auto_inc_high.retain(|t, _| live.contains(t));
                c.index_tables.retain(|_, t| live.contains(t));
            }
            DdlReq::CreateTable { mut table, if_not_exists } => {
                if !c.databases.contains_key(&table.database) {
                    return Err(TernError::new(
                        ErrorCode::NoSuchDatabase,
                        format!("Unknown database '{}'", table.database),
                    ));
                }
                if c.find_table(&table.database, &table.name).is_some() {
                    if if_not_exists {
                        return Ok(None);
                    }
                    return Err(TernError::new(
                        ErrorCode::TableExists,
                        format!("Table '{}' already exists", table.name),
                    ));
                }
                if table.primary_key.is_empty() {
                    // No primary key declared: a hidden one, filled by the client (as NDB does).
                    let mut col = tern_types::Column::new(
                        tern_types::schema::HIDDEN_ROWID,
                        tern_types::ColumnType::BigInt { unsigned: true },
                    )
                    .not_null();
                    col.auto_increment = true;
                    col.hidden = true;
                    table.columns.push(col);
                    table.primary_key = vec![(table.columns.len() - 1) as u16];
                    table.partition_key = table.primary_key.clone();
                }
                if table.partition_key.is_empty() {
                    table.partition_key = table.primary_key.clone();
                }
                if table.columns.iter().filter(|c| c.auto_increment).count() > 1 {
                    return Err(TernError::new(
                        ErrorCode::InvalidSchema,
                        "Incorrect table definition; there can be only one auto column",
                    ));
                }
                table.id = c.next_table_id;
                c.next_table_id += 1;
                self.spread(&mut table);
                if table.partition_count > PARTITIONS_MAX {
                    return Err(TernError::new(
                        ErrorCode::InvalidSchema,
                        format!("at most {PARTITIONS_MAX} partitions"),
                    ));
                }
                for idx in &mut table.indexes {
                    idx.id = c.next_index_id;
                    c.next_index_id += 1;
                }
                table.validate()?;
                let uniques: Vec<tern_types::Index> = table.indexes.iter().filter(|i| i.unique).cloned().collect();
                for idx in uniques {
                    add_index_table(&mut c, &table, &idx);
                }
                c.tables.insert(table.id, table);
            }
            DdlReq::DropTable { database, name, if_exists } => {
                let Some(id) = c.find_table(&database, &name).map(|t| t.id) else {
                    if if_exists {
                        return Ok(None);
                    }
                    return Err(TernError::new(ErrorCode::NoSuchTable, format!("Unknown table '{database}.{name}'")));
                };
                if let Some(t) = c.tables.remove(&id) {
                    for idx in &t.indexes {
                        if let Some(it) = c.index_tables.remove(&idx.id) {
                            c.tables.remove(&it);
                        }
                    }
                }
                c.auto_inc_high.remove(&id);
            }
            DdlReq::CreateIndex { database, table, mut index } => {
                let id = c.next_index_id;
                let t = find_mut(&mut c, &database, &table)?;
                if t.index_by_name(&index.name).is_some() {
                    return Err(TernError::new(ErrorCode::IndexExists, format!("Duplicate key name '{}'", index.name)));
                }
                index.id = id;
                t.indexes.push(index.clone());
                t.validate()?;
                build = Some((t.id, id));
                let base = t.clone();
                c.next_index_id += 1;
                if index.unique {
                    add_index_table(&mut c, &base, &index);
                }
            }
            DdlReq::Reorganize { .. } => return Ok(None),
            DdlReq::DropIndex { database, table, name } => {
                let t = find_mut(&mut c, &database, &table)?;
                let before = t.indexes.len();
                let dropped: Vec<u32> =
                    t.indexes.iter().filter(|i| i.name.eq_ignore_ascii_case(&name)).map(|i| i.id).collect();
                t.indexes.retain(|i| !i.name.eq_ignore_ascii_case(&name));
                for id in dropped {
                    if let Some(it) = c.index_tables.remove(&id) {
                        c.tables.remove(&it);
                    }
                }
                let t = find_mut(&mut c, &database, &table)?;
                if t.indexes.len() == before {
                    return Err(TernError::new(
                        ErrorCode::NoSuchIndex,
                        format!("Can't DROP '{name}'; check that column/key exists"),
                    ));
                }
            }
        }
        Ok(Some((Arc::new(c), build)))
    }
}

/// The catalog file: the encoded catalog followed by its crc32c.
pub fn encode_catalog_file(c: &Catalog) -> Vec<u8> {
    let mut bytes = Vec::new();
    c.encode(&mut bytes);
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// Reads a catalog file, checking its checksum and every table definition.
pub fn decode_catalog_file(bytes: &[u8]) -> Result<Catalog, String> {
    if bytes.len() < 4 {
        return Err("file too short".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err("checksum mismatch".into());
    }
    let c = Catalog::decode(body).map_err(|e| e.to_string())?;
    for t in c.tables.values() {
        t.validate().map_err(|e| format!("table {}.{}: {}", t.database, t.name, e.message))?;
    }
    Ok(c)
}

/// Creates the hidden table that enforces a unique index across partitions.
impl Dict {
    /// A new table spreads over the node groups in service (one added later holds nothing until
    /// partitions move there); by default one partition per ldm of their nodes.
    fn spread(&self, table: &mut tern_types::Table) {
        table.groups = self.cluster.active_groups.max(1);
        if table.partition_count == 0 {
            let nodes = table.groups * self.cluster.config.replicas.max(1) as u32;
            table.partition_count = self.cluster.config.ldm_workers.max(1) as u32 * nodes;
        }
    }
}

fn add_index_table(c: &mut Catalog, base: &tern_types::Table, index: &tern_types::Index) {
    let mut it = Catalog::index_table_def(base, index);
    it.id = c.next_table_id;
    c.next_table_id += 1;
    c.index_tables.insert(index.id, it.id);
    c.tables.insert(it.id, it);
}

fn find_mut<'a>(c: &'a mut Catalog, database: &str, table: &str) -> Result<&'a mut tern_types::Table, TernError> {
    if !c.databases.contains_key(database) {
        return Err(TernError::new(ErrorCode::NoSuchDatabase, format!("Unknown database '{database}'")));
    }
    c.tables
        .values_mut()
        .find(|t| t.database == database && t.name == table)
        .ok_or_else(|| TernError::new(ErrorCode::NoSuchTable, format!("Table '{database}.{table}' doesn't exist")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tern_types::cluster::{ClusterConfig, DataNodeSpec};

    fn two_nodes() -> Arc<ClusterState> {
        let mut cfg = ClusterConfig::single("127.0.0.1", 0, 0, 1);
        cfg.replicas = 2;
        cfg.data_nodes.push(DataNodeSpec { id: 2, host: "127.0.0.1".into(), port: 0, location_domain: 0 });
        Arc::new(ClusterState::all_started(cfg))
    }

    fn writes(out: &Out) -> Vec<(NodeId, u64)> {
        out.signals
            .iter()
            .filter_map(|(to, s)| match s {
                Signal::SchemaWrite { catalog, .. } => Some((to.node, catalog.version)),
                _ => None,
            })
            .collect()
    }

    /// A new master whose catalog is the management nodes' still writes it to every node once
    /// (the master before it may have failed before node 2 had it); not again after that.
    #[test]
    fn a_new_master_writes_its_catalog_everywhere_once() {
        let mut c = Catalog::new();
        c.version = 7;
        let c = Arc::new(c);
        let master = Addr::new(1, Block::Dict);
        let mut d = Dict::new(master, two_nodes(), c.clone());
        let mut out = Out::default();
        d.handle(0, Signal::MgmCatalog { catalog: c.clone(), refused: None }, &mut out);
        assert_eq!(writes(&out), vec![(1, 7), (2, 7)]);
        for n in [1, 2] {
            d.handle(0, Signal::SchemaWritten { from: Addr::new(n, Block::Dict), version: 7 }, &mut out);
        }
        assert!(d.job.is_none(), "the write completed");
        let mut out = Out::default();
        d.handle(0, Signal::MgmCatalog { catalog: c, refused: None }, &mut out);
        assert!(writes(&out).is_empty(), "written everywhere already: {:?}", out.signals);
    }
}
