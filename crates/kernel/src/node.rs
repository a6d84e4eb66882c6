//! A data node's blocks, built from recovered state.
//!
//! Partition placement is `tern_types::cluster` (node group `p mod G`, ldm `(p / G) mod L`, the
//! preferred primary rotating over the group); a table gets one partition per ldm per data node
//! by default (NDB's FOR_RP_BY_LDM).

use crate::dict::Dict;
use crate::dist::{Dist, DistConfig};
use crate::io::Storage;
use crate::ldm::{Ldm, LdmConfig, LdmStart};
use crate::recovery::{self, Recovered};
use crate::signal::{Addr, Block, NodeId, Out, Signal};
use crate::tc::{NodeStats, Tc, TcConfig};
use std::sync::Arc;
use tern_store::MemoryBudget;
use tern_types::cluster::{ClusterConfig, ClusterState};

#[derive(Debug, Clone)]
pub struct NodeConfig {
    pub node_id: NodeId,
    pub ldm_count: u16,
    pub data_memory_bytes: u64,
    pub ldm: LdmConfig,
    pub tc: TcConfig,
    pub dist: DistConfig,
    /// The cluster this node belongs to (membership and partition map) as known at start.
    pub cluster: Arc<ClusterState>,
    /// Recover to this epoch at most (a system restart's consistent cut: every node recovers to
    /// the newest epoch all of them have on disk). None: to this node's own durable epoch.
    pub recover_to: Option<u64>,
}

impl NodeConfig {
    /// A single-node cluster: node `node_id`, one replica.
    pub fn new(node_id: NodeId, ldm_count: u16, data_memory_bytes: u64) -> NodeConfig {
        let mut cfg = ClusterConfig::single("127.0.0.1", 0, 0, ldm_count);
        cfg.data_nodes[0].id = node_id;
        NodeConfig::in_cluster(node_id, Arc::new(ClusterState::all_started(cfg)), data_memory_bytes)
    }

    /// Node `node_id` of `cluster` (its ldm count is the cluster's `ldm_workers`).
    pub fn in_cluster(node_id: NodeId, cluster: Arc<ClusterState>, data_memory_bytes: u64) -> NodeConfig {
        let ldm_count = cluster.config.ldm_workers;
        NodeConfig {
            node_id,
            ldm_count,
            data_memory_bytes,
            ldm: LdmConfig::default(),
            tc: TcConfig::default(),
            dist: DistConfig::default(),
            cluster,
            recover_to: None,
        }
    }
}

/// All blocks of one data node. The runtime spreads them over threads; the simulator keeps them
/// together.
pub struct Node {
    pub tcs: Vec<Tc>,
    pub ldms: Vec<Ldm>,
    pub dict: Dict,
    pub dist: Dist,
    pub budget: MemoryBudget,
    pub stats: Arc<NodeStats>,
    /// Per ldm: the LSN where its new redo begins (open the redo writer there).
    pub redo_base: Vec<u64>,
    pub recovered_rows: u64,
    pub recovered_redo_records: u64,
    pub durable_epoch: u64,
}

impl Node {
    /// Recovers from `storage` and builds the blocks. Send `Signal::Start` to the dist block.
    pub fn recover(cfg: &NodeConfig, storage: &dyn Storage) -> Result<Node, String> {
        let budget = MemoryBudget::new(cfg.data_memory_bytes);
        let stats = Arc::new(NodeStats::default());
        let Recovered { catalog, durable_epoch, partitions, ldm_disk, redo_records, rows } =
            recovery::recover(storage, cfg.ldm_count, cfg.recover_to, &budget)?;
        let n = cfg.ldm_count;
        assert_eq!(n, cfg.cluster.config.ldm_workers, "every data node runs the cluster's ldm_workers");
        let ldm_addrs: Vec<Addr> = (0..n).map(|i| Addr::new(cfg.node_id, Block::Ldm(i))).collect();
        let tc_addrs: Vec<Addr> = (0..n).map(|i| Addr::new(cfg.node_id, Block::Tc(i))).collect();
        let mut per_ldm: Vec<Vec<tern_store::Partition>> = (0..n).map(|_| Vec::new()).collect();
        for (from, p) in partitions {
            // The copy of the ldm that holds the partition by the cluster map; one this node no
            // longer holds (moved to another node group), or an older copy another ldm kept
            // from before such a move, is dropped.
            let groups = catalog.table(p.table).map_or(0, |t| t.groups);
            match cfg.cluster.ldm_on(cfg.node_id, p.table, groups, p.partition) {
                Some(l) if l == from && l < n => per_ldm[l as usize].push(p),
                _ => budget.release(p.charged()),
            }
        }
        let mut redo_base = Vec::new();
        let mut ldms = Vec::new();
        for (i, parts) in per_ldm.into_iter().enumerate() {
            let disk = ldm_disk.get(i).cloned().unwrap_or_default();
            redo_base.push(disk.redo_end);
            let start = LdmStart {
                partitions: parts,
                base_lsn: disk.redo_end,
                durable_epoch,
                next_checkpoint_id: disk.next_checkpoint_id,
                old_checkpoints: disk.checkpoints.clone(),
            };
            ldms.push(Ldm::new(
                ldm_addrs[i],
                cfg.cluster.clone(),
                cfg.ldm.clone(),
                budget.clone(),
                stats.clone(),
                &catalog,
                start,
            ));
        }
        // Files of ldms that no longer exist go once the node has started.
        let stale: Vec<String> = ldm_disk.iter().skip(n as usize).flat_map(|d| d.all_files.iter().cloned()).collect();
        let catalog = Arc::new(catalog);
        let tcs = tc_addrs
            .iter()
            .map(|&a| Tc::new(a, cfg.cluster.clone(), cfg.tc.clone(), catalog.clone(), budget.clone(), stats.clone()))
            .collect();
        let dict = Dict::new(Addr::new(cfg.node_id, Block::Dict), cfg.cluster.clone(), catalog);
        let dist = Dist::new(
            Addr::new(cfg.node_id, Block::Dist),
            cfg.dist.clone(),
            cfg.cluster.clone(),
            tc_addrs,
            ldm_addrs,
            durable_epoch,
            stale,
        );
        Ok(Node {
            tcs,
            ldms,
            dict,
            dist,
            budget,
            stats,
            redo_base,
            recovered_rows: rows,
            recovered_redo_records: redo_records,
            durable_epoch,
        })
    }

    /// Checks every block's protocol state and that data memory in use equals what partitions
    /// hold plus what pending changes reserved (the simulator calls it after every signal).
    pub fn check_invariants(&self) {
        for tc in &self.tcs {
            tc.check_invariants();
        }
        for l in &self.ldms {
            l.check_invariants();
        }
        let held: u64 = self.ldms.iter().map(|l| l.charged() + l.pending_reserved()).sum();
        assert_eq!(held, self.budget.used(), "data memory accounting: partitions + reservations != budget in use");
    }

    /// Delivers a signal to one of this node's blocks.
    pub fn handle(&mut self, now_ms: u64, to: Block, sig: Signal, out: &mut Out) {
        match to {
            Block::Tc(i) => self.tcs[i as usize].handle(now_ms, sig, out),
            Block::Ldm(i) => self.ldms[i as usize].handle(now_ms, sig, out),
            Block::Dict => self.dict.handle(now_ms, sig, out),
            Block::Dist => self.dist.handle(now_ms, sig, out),
        }
    }
}
