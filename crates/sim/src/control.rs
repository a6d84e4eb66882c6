//! The control plane as the data nodes meet it: their requests (state changes, catalogs, moves,
//! suspicions), the cluster maps it publishes, and the planner of partition moves.

use super::*;

impl Sim {
    /// The control plane, modelled as one linearizable state machine: a node's state change
    /// becomes a new cluster map, which every running node's blocks receive.
    pub(super) fn control(&mut self, node: NodeId, req: ControlReq) {
        if let ControlReq::Catalog(c) = req {
            // As the management nodes' state machine: versions only grow, the same catalog again
            // is accepted (a retried proposal); the proposer learns the outcome.
            let held = self.mgm_catalog.clone();
            let accepted = held.as_ref().is_none_or(|h| c.version > h.version || *h == c);
            self.log(|| format!("node {node} proposes catalog version {}: accepted {accepted}", c.version));
            let sig = if accepted {
                self.mgm_catalog = Some(c.clone());
                Signal::CatalogStored { version: c.version }
            } else {
                Signal::MgmCatalog { catalog: held.expect("refused by one"), refused: Some(c.version) }
            };
            let at = self.now + 1 + self.rng.below(20);
            let inc = self.incarnation;
            self.push(at, Event::Deliver { from: None, to: Addr::new(node, Block::Dict), sig, incarnation: inc });
            if accepted {
                // A table created while a drain began may name the draining group: its
                // partitions there are pinned (as the control plane does at SetCatalog).
                let tables = self.mgm_tables();
                let mut next = (*self.cluster).clone();
                if next.pin_draining(&tables) {
                    next.version += 1;
                    self.publish(next);
                }
            }
            if accepted && self.cluster.master() != Some(node) {
                // A proposal of a master that failed meanwhile, committed after the new master
                // looked: its membership thread sees the new version at its next heartbeat.
                self.give_master_the_catalog();
            }
            return;
        }
        if let ControlReq::Suspect(suspect) = req {
            // Arbitration as the management nodes run it: of two live nodes that cannot reach
            // each other, one is failed (the other if that one may not fail here).
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
            return;
        }
        if let ControlReq::MoveCopied { table, partition } | ControlReq::MoveLeft { table, partition } = req {
            let mut next = (*self.cluster).clone();
            let done = if matches!(req, ControlReq::MoveLeft { .. }) {
                next.move_left(table, partition, node)
            } else {
                next.move_copied(table, partition, node)
            };
            match done {
                Ok(()) => {
                    self.log(|| format!("move report of node {node}: {req:?}"));
                    self.publish(next)
                }
                Err(e) => self.log(|| format!("move report of node {node} refused: {e}")),
            }
            return;
        }
        let ControlReq::SetState(state) = req else { return };
        let mut next = (*self.cluster).clone();
        let seq = next.nodes.values().map(|n| n.joined_seq).max().unwrap_or(0) + 1;
        let Some(st) = next.nodes.get_mut(&node) else { return };
        // As the management nodes allow: a restarting node joins the chains (Starting ->
        // Copying), then becomes a full replica (Copying -> Started). A late or repeated request
        // (e.g. a Copying after Started) changes nothing.
        let allowed = matches!(
            (st.state, state),
            (NodeState::Starting, NodeState::Copying) | (NodeState::Copying, NodeState::Started)
        );
        if !allowed {
            return;
        }
        st.state = state;
        if state.in_chains() && st.joined_seq == 0 {
            st.joined_seq = seq;
        }
        next.version += 1;
        if state == NodeState::Started {
            self.stats.node_restarts += 1;
        }
        self.publish(next);
    }

    /// Installs a new cluster map and delivers it to every block of every running node; moves
    /// whose condition now holds step on, and the planner starts new ones (a map of its own).
    pub(super) fn publish(&mut self, mut next: ClusterState) {
        next.settle_moves();
        let finished = self
            .cluster
            .placed
            .iter()
            .filter(|(k, p)| p.moving.is_some() && next.placed.get(k).is_none_or(|n| n.moving.is_none()))
            .count();
        self.stats.moves_done += finished as u64;
        self.log(|| {
            let nodes: Vec<String> =
                next.nodes.iter().map(|(id, s)| format!("{id}:{}/{}", s.state.name(), s.incarnation)).collect();
            format!("cluster map v{} [{}]", next.version, nodes.join(" "))
        });
        self.cluster = std::sync::Arc::new(next);
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
        self.start_moves();
    }

    /// The tables of the management nodes' catalog, as the planner of moves sees them.
    pub(super) fn mgm_tables(&self) -> Vec<tern_types::cluster::TableShape> {
        self.mgm_catalog
            .as_ref()
            .map_or_else(Vec::new, |c| c.tables.values().map(|t| (t.id, t.groups, t.partition_count)).collect())
    }

    /// The control plane's planner of moves (`ClusterState::plan_moves`) over the tables the
    /// management nodes' catalog holds.
    pub(super) fn start_moves(&mut self) {
        if self.planning {
            return;
        }
        if self.mgm_catalog.is_none() {
            return;
        }
        let tables = self.mgm_tables();
        let plan = self.cluster.plan_moves(&tables);
        if plan.is_empty() {
            return;
        }
        let mut next = (*self.cluster).clone();
        for (t, g, p, to) in plan {
            if next.begin_move(t, g, p, to).is_ok() {
                self.stats.moves_begun += 1;
                self.log(|| format!("partition {p} of table {t} moves to {to:?}"));
            }
        }
        self.planning = true;
        self.publish(next);
        self.planning = false;
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
