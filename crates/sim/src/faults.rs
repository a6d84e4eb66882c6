//! Faults: whole-cluster crashes and recoveries, node failures and restarts, cut links.

use super::*;

impl Sim {
    /// Started nodes that may fail: their node group keeps another started member.
    pub(super) fn failure_candidates(&self) -> Vec<NodeId> {
        let live = self.cluster.live_nodes();
        // Started and running: a killed node the detector has not declared yet counts as gone.
        let started: Vec<NodeId> = live
            .iter()
            .copied()
            .filter(|&n| self.cluster.state_of(n) == NodeState::Started && self.nodes[&n].node.is_some())
            .collect();
        started
            .iter()
            .copied()
            .filter(|&n| {
                let g = self.cluster.group_of_node(n).expect("in a group");
                self.cluster.groups()[g].iter().filter(|m| started.contains(m)).count() > 1
            })
            .collect()
    }

    /// A network partition between two data nodes (each of which may fail): every signal
    /// between them, in flight or sent later, is lost until one of them has failed.
    pub(super) fn cut_a_link(&mut self) {
        let c = self.failure_candidates();
        if c.len() < 2 {
            return;
        }
        let a = *self.rng.pick(&c);
        let others: Vec<NodeId> = c.iter().copied().filter(|&n| n != a).collect();
        let b = *self.rng.pick(&others);
        let pair = (a.min(b), a.max(b));
        self.stats.partitions += 1;
        self.log(|| format!("the links between nodes {} and {} are cut", pair.0, pair.1));
        self.events.retain(|_, ev| match ev {
            Event::Deliver { from: Some(f), to, .. } => ((*f).min(to.node), (*f).max(to.node)) != pair,
            _ => true,
        });
        self.cut.insert(pair);
    }

    /// Kills one data node whose node group keeps another live member, as the management nodes
    /// would declare it failed once its lease ran out: it stops at once (losing unsynced disk
    /// writes and every signal it had in flight), and every survivor gets the new cluster map.
    pub(super) fn fail_a_node(&mut self, prefer: Option<NodeId>) {
        // A node group must keep a full replica: only a started node whose group has another
        // started one may fail.
        let candidates = self.failure_candidates();
        if candidates.is_empty() {
            return;
        }
        let victim = match prefer {
            Some(p) if candidates.contains(&p) => p,
            _ => *self.rng.pick(&candidates),
        };
        self.stats.node_failures += 1;
        self.log(|| format!("node {victim} fails"));
        self.kill_process(victim);
        if self.cfg.restart_after_ms > 0 {
            let at = self.now + self.cfg.restart_after_ms / 2 + self.rng.below(self.cfg.restart_after_ms);
            self.restarts.push((at, victim));
        }
        // The management nodes' detector declares it failed once its heartbeats have stopped
        // for a failure timeout (`member`); the survivors learn it from their heartbeats.
        // Modelled membership: declared at once, and every survivor's blocks get the map.
        if !self.cfg.membership {
            let incarnation = self.cluster.nodes[&victim].incarnation;
            if let Err(e) = self.propose(tern_control::Command::NodesFailed { nodes: vec![(victim, incarnation)] }) {
                self.fail(&format!("failing node {victim}: {e}"));
            }
        }
        self.wake_all();
    }

    pub(super) fn crash_and_recover(&mut self) {
        self.check_linearizable();
        self.stats.crashes += 1;
        self.log(|| {
            let mut per_node = Vec::new();
            for (id, sn) in &self.nodes {
                if let Some(n) = sn.node.as_ref() {
                    let rows: usize = n.ldms.iter().flat_map(|l| l.committed_rows()).map(|(_, r)| r.len()).sum();
                    per_node.push(format!("node {id}: {rows} rows, durable epoch {}", n.durable_epoch));
                }
            }
            format!("whole-cluster crash ({})", per_node.join("; "))
        });
        if self.log_enabled {
            use tern_kernel::io::Storage;
            for (id, sn) in &self.nodes {
                let Some(io) = sn.io.as_ref() else { continue };
                let disk = &io.storage;
                let sys = disk.read(tern_kernel::sysfile::SYSFILE_NAME).ok().flatten();
                let sys = sys.and_then(|b| tern_kernel::sysfile::Sysfile::decode(&b).ok());
                eprintln!("  node {id} sysfile durable {:?}", sys.map(|s| s.durable_epoch));
                for l in 0..self.cfg.ldm_count {
                    for f in disk.list(&format!("ldm-{l}")).unwrap_or_default() {
                        if let Some(b) = disk.read(&f).ok().flatten()
                            && let Ok(ck) = tern_kernel::checkpoint::decode(&b)
                        {
                            let parts: Vec<String> =
                                ck.partitions.iter().map(|p| format!("{}.{}:{}", p.0, p.1, p.2.len())).collect();
                            let h = &ck.header;
                            eprintln!("    {f}: max_epoch {} start {} [{}]", h.max_epoch, h.start_lsn, parts.join(" "));
                        }
                    }
                }
            }
        }
        // Everything in flight is lost; the disk loses unsynced bytes.
        self.events.clear();
        let running: Vec<NodeId> = self.nodes.iter().filter(|(_, n)| n.node.is_some()).map(|(&id, _)| id).collect();
        for id in running {
            let sn = self.nodes.get_mut(&id).expect("listed");
            let mut disk = sn.io.take().expect("running").storage;
            sn.node = None;
            sn.member = None;
            disk.crash(&mut self.rng);
            self.nodes.get_mut(&id).expect("listed").disk = disk;
        }
        self.incarnation += 1;
        // The management nodes see every node go: the cluster is down. Only full replicas
        // recover from their own disks; a node that was still restarting restarts again once
        // the cluster is up (`boot`: the system restart).
        let failing: Vec<(NodeId, u32)> = self
            .cluster
            .nodes
            .iter()
            .filter(|(_, s)| s.state != NodeState::Down)
            .map(|(&id, s)| (id, s.incarnation))
            .collect();
        if let Err(e) = self.propose(tern_control::Command::NodesFailed { nodes: failing }) {
            self.fail(&format!("the whole-cluster failure: {e}"));
        }
        for c in &mut self.clients {
            c.state = ClientState::Idle;
            c.pending = None;
            c.wrote = false;
            c.tc = None;
        }
        self.boot();
        let epochs: BTreeSet<u64> =
            self.nodes.values().filter_map(|n| n.node.as_ref()).map(|n| n.durable_epoch).collect();
        if epochs.len() != 1 {
            self.fail(&format!("nodes recovered to different epochs {epochs:?}: not a consistent cut"));
        }
        let durable = *epochs.first().expect("a node");
        self.check_recovered(durable);
        self.check_catalogs();
        self.wake_all();
    }

    /// With staggered starts: fails the master while other nodes are still recovering, once the
    /// node that becomes the next master has started (it must learn which nodes have started
    /// before it runs epochs with them). Once per boot.
    pub(super) fn fail_in_start(&mut self) {
        if self.table.is_none() || self.started() {
            self.fail_in_start = None;
            return;
        }
        let Some(master) = self.cluster.master() else { return };
        let mut next = (*self.cluster).clone();
        next.nodes.get_mut(&master).expect("the master").state = NodeState::Down;
        let heir = next.master();
        if heir.is_some_and(|h| self.started_nodes.contains(&h)) && self.failure_candidates().contains(&master) {
            self.fail_in_start = None;
            self.log(|| format!("the master {master} fails while nodes start (next: {heir:?})"));
            self.fail_a_node(Some(master));
            self.failed_in_start = true;
        }
    }

    /// Restarts a failed node: it registers (`Starting`), recovers from its disk, fetches the
    /// catalog, joins the write chains (`Copying`), copies its partitions from the primaries and
    /// becomes a full replica again (`Started`).
    pub(super) fn restart_node(&mut self, id: NodeId) {
        if self.nodes[&id].node.is_some() || self.mgm.state.cluster_down {
            return;
        }
        let incarnation = self.cluster.nodes[&id].incarnation;
        let durable_epoch = tern_kernel::recovery::node_epoch(&self.nodes[&id].disk).unwrap_or(0);
        if let Err(e) = self.propose(tern_control::Command::Register { node: id, incarnation, durable_epoch }) {
            self.fail(&format!("node {id} cannot register: {e}"));
        }
        let cfg = self.node_cfg(id, None);
        let sn = self.nodes.get_mut(&id).expect("a node");
        let node = match Node::recover(&cfg, &sn.disk) {
            Ok(n) => n,
            Err(e) => self.fail(&format!("node {id}: recovery at restart failed: {e}")),
        };
        self.run_node(id, node, false);
    }

    /// Node `victim`'s process is gone: everything it would still do or send, its membership
    /// threads, the disk writes it had not synced.
    pub(super) fn kill_process(&mut self, victim: NodeId) {
        self.cut.retain(|&(a, b)| a != victim && b != victim);
        self.events.retain(|_, ev| match ev {
            Event::Deliver { from, to, .. } => to.node != victim && *from != Some(victim),
            Event::Io { from, .. } => from.node != victim,
            _ => true,
        });
        self.forget_commits_only_on(victim);
        let sn = self.nodes.get_mut(&victim).expect("a node");
        let mut disk = sn.io.take().expect("running").storage;
        sn.node = None;
        sn.member = None;
        disk.crash(&mut self.rng);
        sn.disk = disk;
        self.started_nodes.remove(&victim);
        // Clients whose coordinator died lose their answer (outcome unknown to them).
        for c in &mut self.clients {
            if c.tc.is_some_and(|t| t.node == victim) || (c.state == ClientState::Waiting && c.tc.is_none()) {
                c.state = ClientState::Idle;
                c.pending = None;
                c.tc = None;
                c.wrote = false;
            }
        }
        if self.mgm.state.cluster_down && self.nodes.values().all(|sn| sn.node.is_none()) {
            // The cluster went down and every process has stopped: they start again, and the
            // system restart runs.
            self.log(|| "the cluster is down and every data node has stopped: a system restart".to_string());
            self.restart_cluster = true;
        }
    }
}
