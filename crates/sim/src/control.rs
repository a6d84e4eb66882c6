//! The management nodes' replicated state: their own state machine (`tern_control::ControlState`,
//! the code every mgmd applies its Raft log with). The data nodes' membership threads propose
//! its commands (`member`: state changes, catalogs, durable epochs, partition moves,
//! reorganisations; the detector's failures), and so do the simulator's operators and faults (a
//! restarted node that registers, a whole-cluster crash and the system restart after it, a node
//! group added or dropped). What stays modelled is the Raft replication itself: one
//! linearizable log, applied at once.

use super::*;
use tern_control::{Command, CommandResult};

impl Sim {
    /// Proposes `cmd` to the management nodes' state machine; the new map is published when it
    /// changed. Err: why it was refused (nothing changed).
    pub(super) fn propose(&mut self, cmd: Command) -> CommandResult {
        let before = self.mgm.version();
        let r = self.mgm.apply(&cmd);
        if !matches!(cmd, Command::SetCatalog { .. }) {
            self.log(|| format!("control plane: {cmd:?} -> {r:?}"));
        }
        let version = self.mgm.version();
        assert!(
            version == before || (r.is_ok() && version == before + 1),
            "a command moves the map by one version at most, a refused one not at all"
        );
        if version != before {
            self.publish();
        }
        r
    }

    /// A block's request to the control plane, from `node`'s current incarnation `inc`, when
    /// the membership threads are modelled (`SimConfig::membership` off): as one call, at once.
    pub(super) fn control(&mut self, node: NodeId, inc: u32, req: ControlReq) {
        match req {
            ControlReq::Catalog(c) => self.propose_catalog(node, c),
            ControlReq::Suspect(suspect) => {
                // Arbitration as the management nodes' leader runs it: of two live nodes that
                // cannot reach each other, one is failed (the other if that one may not fail
                // here).
                let live = |n: NodeId| self.cluster.state_of(n).in_chains();
                if !live(node) || !live(suspect) {
                    return;
                }
                let victim = self.cluster.choose_victim(node, suspect);
                let other = if victim == node { suspect } else { node };
                let c = self.failure_candidates();
                let Some(v) = [victim, other].into_iter().find(|n| c.contains(n)) else { return };
                self.stats.suspicion_failures += 1;
                self.log(|| format!("node {node} suspects node {suspect}: node {v} is failed"));
                self.fail_a_node(Some(v));
            }
            ControlReq::MoveCopied { table, partition } => {
                let _ = self.propose(Command::MoveCopied { node, incarnation: inc, table, partition });
            }
            ControlReq::MoveLeft { table, partition } => {
                let _ = self.propose(Command::MoveLeft { node, incarnation: inc, table, partition });
            }
            ControlReq::SetState(state) => {
                let before = self.mgm.version();
                // A late or repeated request (a Copying after Started) is refused or changes
                // nothing.
                if self.propose(Command::SetState { node, incarnation: inc, state }).is_ok()
                    && self.mgm.version() != before
                    && state == NodeState::Started
                {
                    self.stats.node_restarts += 1;
                }
            }
            ControlReq::DurableEpoch(epoch) => {
                let _ = self.propose(Command::SetDurableEpoch { epoch });
            }
            ControlReq::Reorganize { tables } => {
                for table in tables {
                    let _ = self.propose(Command::Reorganize { table });
                }
            }
        }
    }

    /// The master's dict proposes a schema change: committed (`CatalogStored`) or refused
    /// because the management nodes hold another catalog, which the dict is then given.
    fn propose_catalog(&mut self, node: NodeId, c: std::sync::Arc<tern_types::Catalog>) {
        let mut bytes = Vec::new();
        c.encode(&mut bytes);
        let accepted = self.propose(Command::SetCatalog { version: c.version, bytes }).is_ok();
        self.log(|| format!("node {node} proposes catalog version {}: accepted {accepted}", c.version));
        let sig = if accepted {
            self.mgm_catalog = Some(c.clone());
            Signal::CatalogStored { version: c.version }
        } else {
            let held = self.mgm_catalog.clone().expect("refused by one");
            assert_eq!(held.version, self.mgm.catalog_version, "the catalog the management nodes hold");
            Signal::MgmCatalog { catalog: held, refused: Some(c.version) }
        };
        let at = self.now + 1 + self.rng.below(20);
        let inc = self.incarnation;
        self.push(at, Event::Deliver { from: None, to: Addr::new(node, Block::Dict), sig, incarnation: inc });
        if accepted && self.cluster.master() != Some(node) {
            // A proposal of a master that failed meanwhile, committed after the new master
            // looked: its membership thread sees the new version at its next heartbeat.
            self.give_master_the_catalog();
        }
    }

    /// The system restart every data node takes part in (at the first start, and after the
    /// whole cluster went down): each registers with the epoch its disk holds whole, then the
    /// registered nodes are started together; those the restart does not need (their disks are
    /// partial: they were still copying) restart later as a node restart.
    pub(super) fn system_restart(&mut self) {
        let ids: Vec<NodeId> = self.nodes.keys().copied().collect();
        for id in ids {
            let incarnation = self.mgm.state.nodes[&id].incarnation;
            let durable_epoch = tern_kernel::recovery::node_epoch(&self.nodes[&id].disk).unwrap_or(0);
            if let Err(e) = self.propose(Command::Register { node: id, incarnation, durable_epoch }) {
                self.fail(&format!("node {id} cannot register: {e}"));
            }
        }
        let starting: Vec<(NodeId, u32)> = self
            .mgm
            .state
            .nodes
            .iter()
            .filter(|(_, s)| s.state == NodeState::Starting)
            .map(|(&n, s)| (n, s.incarnation))
            .collect();
        if let Err(e) = self.propose(Command::StartCluster { nodes: starting.clone() }) {
            self.fail(&format!("the system restart of {starting:?} was refused: {e}"));
        }
        for (id, _) in starting {
            if self.cluster.state_of(id) != NodeState::Started {
                self.restarts.push((self.now + 200, id));
            }
        }
    }

    /// Takes the management nodes' newest map: the nodes learn it from their heartbeats
    /// (`member`), or, with modelled membership, every running node's blocks get it now.
    fn publish(&mut self) {
        let next = self.mgm.state.clone();
        let moving = |s: &ClusterState| -> BTreeSet<(u32, u32)> {
            s.placed.iter().filter(|(_, p)| p.moving.is_some()).map(|(k, _)| *k).collect()
        };
        let (was, now) = (moving(&self.cluster), moving(&next));
        self.stats.moves_begun += now.difference(&was).count() as u64;
        self.stats.moves_done += was.difference(&now).count() as u64;
        for (t, p) in now.difference(&was) {
            self.log(|| format!("partition {p} of table {t} moves"));
        }
        self.log(|| {
            let nodes: Vec<String> =
                next.nodes.iter().map(|(id, s)| format!("{id}:{}/{}", s.state.name(), s.incarnation)).collect();
            format!("cluster map v{} [{}]", next.version, nodes.join(" "))
        });
        assert!(next.version > self.cluster.version, "maps only move forward");
        self.cluster = std::sync::Arc::new(next);
        if self.cfg.membership {
            return;
        }
        let inc = self.incarnation;
        let n = self.cfg.ldm_count;
        let running: Vec<NodeId> = self.nodes.iter().filter(|(_, sn)| sn.node.is_some()).map(|(&id, _)| id).collect();
        // Maps reach nodes at different times (wider apart with moves, whose barriers exist for
        // exactly that); a node's blocks get it at once.
        let spread = if self.cfg.scale_out { 40 } else { 5 };
        for node in running {
            let at = self.now + 1 + self.rng.below(spread);
            self.map_at.insert(node, at);
            let blocks = (0..n).map(Block::Tc).chain((0..n).map(Block::Ldm)).chain([Block::Dict, Block::Dist]);
            for b in blocks {
                let sig = Signal::ClusterMap { state: self.cluster.clone() };
                self.push(at, Event::Deliver { from: None, to: Addr::new(node, b), sig, incarnation: inc });
            }
        }
        self.give_master_the_catalog();
    }

    /// The master's membership thread fetches the management nodes' catalog (it may be one an
    /// earlier master committed and did not write everywhere, before it failed or the whole
    /// cluster crashed); the dict ignores one it has.
    pub(super) fn give_master_the_catalog(&mut self) {
        if let (Some(master), Some(c)) = (self.cluster.master(), self.mgm_catalog.clone())
            && self.nodes.get(&master).is_some_and(|sn| sn.node.is_some())
        {
            let at = (self.now + 6 + self.rng.below(20)).max(self.map_at.get(&master).map_or(0, |t| t + 1));
            let inc = self.incarnation;
            let sig = Signal::MgmCatalog { catalog: c, refused: None };
            self.push(at, Event::Deliver { from: None, to: Addr::new(master, Block::Dict), sig, incarnation: inc });
        }
    }
}
