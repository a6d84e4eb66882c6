//! Restart recovery: rebuild every partition as of the last durable epoch E.
//!
//! E is the node's own epoch (`node_epoch`) capped by a system restart's cut: the system file's
//! durable epoch, or later the newest epoch that *every* ldm has an epoch mark of in its redo
//! past the positions the system file names (an epoch flush marks and syncs; the system file is
//! saved afterwards, off the durable commits' path).
//!
//! For each ldm of the layout recorded in the system file: load the newest checkpoint whose
//! newest epoch is <= E, then replay that ldm's redo from the checkpoint's start LSN — up to the
//! LSN the system file says was made durable strictly (damage there is corruption), then on over
//! the valid records after it — applying only commit records of epochs <= E. The result holds
//! exactly the transactions of epochs <= E (architecture.md §5, invariant 6).
//!
//! Pure over a `Storage`: the runtime passes real files, the simulator its in-memory disk.

use crate::checkpoint;
use crate::dict::CATALOG_FILE;
use crate::io::{self, Storage};
use crate::redo::{self, RedoOp};
use crate::sysfile::{SYSFILE_NAME, Sysfile};
use std::collections::BTreeMap;
use std::sync::Arc;
use tern_store::{MemoryBudget, Partition};
use tern_types::schema::TableId;
use tern_types::{Catalog, RowLayout};

/// What recovery found and rebuilt.
pub struct Recovered {
    pub catalog: Catalog,
    pub durable_epoch: u64,
    /// Every partition with the ldm whose checkpoint and redo it came from. A node may hold
    /// copies of one partition from two ldms (it moved away to another node group and back to
    /// another ldm, and the old ldm has not checkpointed since): the cluster map says which one
    /// is the node's (`Node::recover`); each ldm's redo is applied only to its own partitions.
    pub partitions: Vec<(u16, Partition)>,
    /// Per ldm instance (covering old and new layouts): next checkpoint id, redo end, old files.
    pub ldm_disk: Vec<LdmDisk>,
    pub redo_records: u64,
    pub rows: u64,
}

#[derive(Debug, Clone, Default)]
pub struct LdmDisk {
    pub next_checkpoint_id: u64,
    pub redo_end: u64,
    pub checkpoints: Vec<String>,
    pub all_files: Vec<String>,
}

fn fail(msg: String) -> String {
    msg
}

/// The newest epoch this node's disk holds whole: the system file's durable epoch, or the newest
/// epoch every ldm of its layout marked after the synced positions it names, if newer. A system
/// restart's cut is the smallest of the restarting nodes' (0: no system file).
pub fn node_epoch(storage: &dyn Storage) -> Result<u64, String> {
    let Some(b) = storage.read(SYSFILE_NAME).map_err(|e| format!("reading {SYSFILE_NAME}: {e}"))? else {
        return Ok(0);
    };
    let sys =
        Sysfile::decode(&b).map_err(|e| format!("the system file '{SYSFILE_NAME}' is corrupt or foreign: {e}"))?;
    marked_epoch(storage, &sys)
}

fn marked_epoch(storage: &dyn Storage, sys: &Sysfile) -> Result<u64, String> {
    let mut all_marked: Option<u64> = None;
    for (i, &synced) in sys.synced_lsn.iter().enumerate() {
        let mut newest = None;
        io::read_redo_tail(storage, i as u16, synced, |_, payload| {
            if let Ok(redo::Record::EpochMark(e)) = redo::decode(payload) {
                newest = Some(newest.map_or(e, |n: u64| n.max(e)));
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        let Some(m) = newest else { return Ok(sys.durable_epoch) };
        all_marked = Some(all_marked.map_or(m, |a| a.min(m)));
    }
    Ok(all_marked.map_or(sys.durable_epoch, |m| m.max(sys.durable_epoch)))
}

/// Applies one redo record of an epoch <= `durable_epoch` (epoch marks carry no rows).
fn apply_record(
    payload: &[u8],
    durable_epoch: u64,
    catalog: &Catalog,
    layouts: &BTreeMap<TableId, Arc<RowLayout>>,
    parts: &mut BTreeMap<(TableId, u32), Partition>,
    budget: &MemoryBudget,
) -> Result<(), String> {
    let rec = match redo::decode(payload).map_err(|e| format!("undecodable record: {e}"))? {
        redo::Record::EpochMark(_) => return Ok(()),
        redo::Record::Commit(rec) => rec,
    };
    if rec.epoch > durable_epoch {
        return Ok(());
    }
    debug_assert!(rec.epoch > 0, "invariant: a commit record carries its epoch");
    for op in rec.ops {
        let (table, partition) = match &op {
            RedoOp::Put { table, partition, .. } | RedoOp::Delete { table, partition, .. } => (*table, *partition),
        };
        let (Some(t), Some(layout)) = (catalog.table(table), layouts.get(&table)) else {
            continue;
        };
        let p = parts.entry((table, partition)).or_insert_with(|| Partition::new(t, partition, layout.clone()));
        let before = p.charged();
        match op {
            RedoOp::Put { row, .. } => {
                layout.check_row(&row).map_err(|e| format!("bad row: {e}"))?;
                p.upsert(&row).map_err(|e| e.to_string())?;
            }
            RedoOp::Delete { key, .. } => {
                if let Some(id) = p.lookup(&key) {
                    p.delete(id).map_err(|e| e.to_string())?;
                }
            }
        }
        let after = p.charged();
        if after >= before {
            budget.force(after - before);
        } else {
            budget.release(before - after);
        }
    }
    Ok(())
}

/// Rebuilds the node's state from `storage`. `ldm_count` is the new layout (files of ldms beyond
/// it are reported in `ldm_disk` so the caller can remove them once the node has started).
/// `recover_to` caps the epoch recovered to (a
/// system restart's consistent cut).
pub fn recover(
    storage: &dyn Storage,
    ldm_count: u16,
    recover_to: Option<u64>,
    budget: &MemoryBudget,
) -> Result<Recovered, String> {
    let catalog = match storage.read(CATALOG_FILE).map_err(|e| format!("reading {CATALOG_FILE}: {e}"))? {
        Some(b) => crate::dict::decode_catalog_file(&b)
            .map_err(|e| fail(format!("the catalog file '{CATALOG_FILE}' is corrupt or foreign: {e}")))?,
        None => Catalog::new(),
    };
    let sysfile = match storage.read(SYSFILE_NAME).map_err(|e| format!("reading {SYSFILE_NAME}: {e}"))? {
        Some(b) => Some(
            Sysfile::decode(&b).map_err(|e| format!("the system file '{SYSFILE_NAME}' is corrupt or foreign: {e}"))?,
        ),
        None => None,
    };
    let old_count = sysfile.as_ref().map(|s| s.synced_lsn.len() as u16).unwrap_or(0);
    let own_durable = match &sysfile {
        Some(s) => marked_epoch(storage, s)?,
        None => 0,
    };
    let durable_epoch = recover_to.map_or(own_durable, |cap| cap.min(own_durable));
    // The node recovers to no epoch its disk does not hold whole, and never below the system
    // file's saved epoch unless a system restart's cut asks for less.
    assert!(durable_epoch <= own_durable, "invariant: recovery stays within what the disk holds");
    debug_assert!(
        recover_to.is_some() || sysfile.as_ref().is_none_or(|s| durable_epoch >= s.durable_epoch),
        "invariant: a node restart recovers at least its saved epoch"
    );
    let layouts: BTreeMap<TableId, Arc<RowLayout>> =
        catalog.tables.values().map(|t| (t.id, Arc::new(RowLayout::new(t)))).collect();
    let mut recovered: Vec<(u16, Partition)> = Vec::new();
    let mut redo_records = 0;
    let span = old_count.max(ldm_count).max(64);
    let mut ldm_disk = Vec::new();
    for i in 0..span {
        let files = storage.list(&format!("ldm-{i}")).map_err(|e| format!("listing ldm-{i}: {e}"))?;
        let mut checkpoints: Vec<(u64, String)> =
            files.iter().filter_map(|f| checkpoint::parse_file_name(f).map(|id| (id, f.clone()))).collect();
        checkpoints.sort();
        // Ids of unfinished checkpoints (`.part`) are used up too: a new one never appends to them.
        let part_max = files.iter().filter_map(|f| f.strip_suffix(".part").and_then(checkpoint::parse_file_name)).max();
        let disk = LdmDisk {
            next_checkpoint_id: checkpoints.last().map(|c| c.0).max(part_max).map(|m| m + 1).unwrap_or(1),
            redo_end: io::redo_end(storage, i).map_err(|e| format!("reading the redo log of ldm-{i}: {e}"))?,
            // Complete checkpoints and unfinished ones (`.part`) of earlier runs.
            checkpoints: checkpoints
                .iter()
                .map(|c| c.1.clone())
                .chain(files.iter().filter(|f| f.ends_with(".part")).cloned())
                .collect(),
            all_files: files.clone(),
        };
        if i >= ldm_count && files.is_empty() && i >= old_count {
            if i >= ldm_count.max(old_count) {
                break;
            }
            continue;
        }
        ldm_disk.push(disk);
        let Some(sys) = &sysfile else { continue };
        if i >= old_count {
            continue;
        }
        // The newest checkpoint whose data is all durable.
        let mut chosen = None;
        for (_, name) in checkpoints.iter().rev() {
            let bytes = storage.read(name).map_err(|e| format!("reading {name}: {e}"))?.unwrap_or_default();
            let header =
                checkpoint::decode(&bytes).map_err(|e| format!("checkpoint file {name} is corrupt: {e}"))?.header;
            if header.max_epoch <= durable_epoch {
                chosen = Some((name.clone(), bytes));
                break;
            }
        }
        let Some((name, bytes)) = chosen else {
            return Err(format!(
                "ldm-{i} has no usable checkpoint for durable epoch {durable_epoch}: the data directory is incomplete"
            ));
        };
        let ck = checkpoint::decode(&bytes).map_err(|e| format!("checkpoint file {name} is corrupt: {e}"))?;
        let mut parts: BTreeMap<(TableId, u32), Partition> = BTreeMap::new();
        for (table, partition, rows) in ck.partitions {
            let (Some(t), Some(layout)) = (catalog.table(table), layouts.get(&table)) else {
                continue;
            };
            // Which ldm holds it now is `Node::recover`'s business (by the cluster map).
            let mut p = Partition::new(t, partition, layout.clone());
            for r in rows {
                layout.check_row(r).map_err(|e| format!("checkpoint file {name}: bad row in table {table}: {e}"))?;
                p.insert(r).map_err(|e| format!("checkpoint file {name}: {e}"))?;
            }
            budget.force(p.charged());
            parts.insert((table, partition), p);
        }
        let synced = sys.synced_lsn[i as usize];
        let mut apply =
            |_, payload: &[u8]| apply_record(payload, durable_epoch, &catalog, &layouts, &mut parts, budget);
        redo_records +=
            io::read_redo(storage, i, ck.header.start_lsn, synced, &mut apply).map_err(|e| e.to_string())?;
        redo_records +=
            io::read_redo_tail(storage, i, ck.header.start_lsn.max(synced), &mut apply).map_err(|e| e.to_string())?;
        recovered.extend(parts.into_values().map(|p| (i, p)));
    }
    let rows = recovered.iter().map(|p| p.1.len()).sum();
    Ok(Recovered { catalog, durable_epoch, partitions: recovered, ldm_disk, redo_records, rows })
}
