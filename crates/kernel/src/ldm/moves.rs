//! Partition moves (online scale-out; the map side is `tern_types::cluster`, "Online scale-out").
//!
//! * As a move's **target** (an ldm of the group the partition goes to): while the move copies,
//!   the partition is here empty and in the write chain (after the source's replicas), and this
//!   ldm fetches its rows from the primary with the node-restart copy (`copy.rs`). Once they are
//!   here and a checkpoint holds them (so this node can recover the partition from its own
//!   disk), it reports `MoveCopied`. Rows held from an earlier life may be incomplete: a target
//!   that has not fetched in this life starts from empty.
//! * As a move's **source**: after the switch the target leads the chain and this replica is
//!   still written but serves no new reads. A full scan it began goes on here (its row-id
//!   positions mean nothing elsewhere) until no step came for `LEAVE_QUIET_MS` (at most
//!   `LEAVE_MAX_MS` after the switch); then it reports `MoveLeft` and serves the partition no
//!   more. Once every source replica has left, the move is done, the chains skip this node, and
//!   the partition is *retired*: dropped as soon as no transaction here uses it.
//!
//! Guarded partitions (moving here in either role, or retired) get stricter checks at the head
//! of a chain (`check_guarded`): a batch must carry exactly the chain of this ldm's map, and a
//! read sent to this replica alone must find it a full one. Anything else was routed with
//! another map and gets a temporary error; the coordinator's client retries.

use super::*;
use std::collections::BTreeSet;
use tern_types::cluster::MovePhase;

/// A move's source reports it has left once no scan step came for this long...
const LEAVE_QUIET_MS: u64 = 300;
/// ...or this long after it saw the switch, whichever is first.
const LEAVE_MAX_MS: u64 = 10_000;

/// A source replica of a switched partition.
pub(super) struct Leaving {
    since_ms: u64,
    last_scan_ms: u64,
    reported: bool,
}

/// What this ldm knows about the moves that concern it.
#[derive(Default)]
pub(super) struct Moves {
    /// Partitions moving here (either role) or retired: checked at the head of a chain.
    pub guarded: BTreeSet<PartKey>,
    pub leaving: BTreeMap<PartKey, Leaving>,
    /// Held but no longer this ldm's (a done move took them elsewhere).
    pub retired: BTreeSet<PartKey>,
    /// Targets fetched and checkpointed in this life.
    pub fetched: BTreeSet<PartKey>,
}

fn distribution_changed() -> TernError {
    TernError::new(ErrorCode::SchemaChanged, "Temporary failure, distribution changed")
}

impl Ldm {
    /// After a new cluster map or catalog: take up the roles the moves give this ldm.
    pub(super) fn placement_changed(&mut self, out: &mut Out) {
        let me = self.addr.node;
        let inst = self.instance();
        let Some(group) = self.cluster.group_of_node(me).map(|g| g as u32) else { return };
        let inc = self.cluster.nodes.get(&me).map_or(0, |s| s.incarnation);
        let started = self.cluster.state_of(me) == tern_types::cluster::NodeState::Started;
        let mut guarded = BTreeSet::new();
        let mut targets = BTreeSet::new();
        let mut sources = BTreeSet::new();
        let moving: Vec<(PartKey, tern_types::cluster::Placed)> = self
            .cluster
            .placed
            .iter()
            .filter(|(k, p)| p.moving.is_some() && self.tables.contains_key(&k.0))
            .map(|(k, p)| (*k, p.clone()))
            .collect();
        for (key, pl) in moving {
            let m = pl.moving.as_ref().expect("moving");
            if m.to.group == group && m.to.ldm == inst {
                guarded.insert(key);
                if m.phase == MovePhase::Copying {
                    targets.insert(key);
                    self.target(key, m.copied.contains(&(me, inc)), started, out);
                }
            }
            if pl.home.group == group && pl.home.ldm == inst {
                guarded.insert(key);
                if m.phase == MovePhase::Switched {
                    sources.insert(key);
                    let now = self.now_ms;
                    let e = self.moves.leaving.entry(key).or_insert(Leaving {
                        since_ms: now,
                        last_scan_ms: now,
                        reported: false,
                    });
                    e.reported |= m.left.contains(&(me, inc));
                }
            }
        }
        self.moves.leaving.retain(|k, _| sources.contains(k));
        self.moves.fetched.retain(|k| targets.contains(k));
        let not_owned: Vec<PartKey> = self.parts.keys().filter(|k| !self.owns(k.0, k.1)).copied().collect();
        self.moves.retired = not_owned.into_iter().collect();
        guarded.extend(self.moves.retired.iter().copied());
        debug_assert!(
            self.moves.retired.iter().all(|k| !targets.contains(k)),
            "invariant: a move's target keeps the partition it fetches"
        );
        self.moves.guarded = guarded;
        self.leave_step(out);
        self.drop_retired();
    }

    /// This ldm is the target of a copying move of `key`.
    fn target(&mut self, key: PartKey, recorded: bool, started: bool, out: &mut Out) {
        if self.moves.fetched.contains(&key) {
            if !recorded {
                out.control.push(ControlReq::MoveCopied { table: key.0, partition: key.1 });
            }
            return;
        }
        if self.fetch.as_ref().is_some_and(|f| f.has(key)) {
            return;
        }
        if self.fetch.is_none() && !started {
            // A node restart's copy (which fetches every partition this ldm holds) is still to
            // come, or the node is recovering: a later map starts this one.
            self.empty_partition(key);
            return;
        }
        self.empty_partition(key);
        self.queue_fetch(key, out);
    }

    /// Replaces whatever this ldm holds of `key` with an empty partition.
    pub(super) fn empty_partition(&mut self, key: PartKey) {
        let Some(t) = self.tables.get(&key.0) else { return };
        let fresh = Partition::new(t, key.1, self.layouts[&key.0].clone());
        if let Some(old) = self.parts.insert(key, fresh) {
            self.budget.release(old.charged());
            self.stats.add_rows(key.0, -(old.len() as i64));
        }
    }

    /// Sources of switched partitions whose scans have gone quiet report that they left.
    pub(super) fn leave_step(&mut self, out: &mut Out) {
        let now = self.now_ms;
        for (key, l) in self.moves.leaving.iter_mut() {
            if l.reported {
                continue;
            }
            if now >= l.last_scan_ms + LEAVE_QUIET_MS || now >= l.since_ms + LEAVE_MAX_MS {
                debug_assert!(l.since_ms <= now, "invariant: a switch is seen before its source leaves");
                l.reported = true;
                out.control.push(ControlReq::MoveLeft { table: key.0, partition: key.1 });
            }
        }
    }

    /// Drops retired partitions no transaction, lock wait or copy here uses any more.
    pub(super) fn drop_retired(&mut self) {
        if self.moves.retired.is_empty() {
            return;
        }
        let busy = |k: &PartKey| {
            self.txns
                .values()
                .any(|t| t.changes.keys().any(|c| (c.0, c.1) == *k) || t.locks.iter().any(|c| (c.0, c.1) == *k))
                || self.blocked.values().any(|b| (b.lock.0, b.lock.1) == *k)
                || self.copies.keys().any(|c| (c.0, c.1) == *k)
        };
        let idle: Vec<PartKey> = self.moves.retired.iter().filter(|k| !busy(k)).copied().collect();
        for k in idle {
            debug_assert!(!self.owns(k.0, k.1), "invariant: only a partition this ldm no longer owns is dropped");
            self.moves.retired.remove(&k);
            if let Some(p) = self.parts.remove(&k) {
                self.budget.release(p.charged());
                self.stats.add_rows(k.0, -(p.len() as i64));
            }
        }
    }

    /// The stricter checks for a batch at the head of its chain on a guarded partition.
    pub(super) fn check_guarded(&self, batch: &PrepareBatch) -> Result<(), TernError> {
        let me = self.addr;
        for op in &batch.ops {
            let PrepOp::Exec { partition, op, .. } = op else { continue };
            let key = (op.table, *partition);
            if !self.moves.guarded.contains(&key) {
                continue;
            }
            if self.moves.retired.contains(&key) {
                return Err(distribution_changed());
            }
            let chain = self.chain_of(key.0, key.1);
            let addrs: Vec<Addr> = chain.replicas.iter().map(|&(n, l)| Addr::new(n, Block::Ldm(l))).collect();
            let ok = if batch.chain.len() == 1 && addrs.len() > 1 {
                // A read sent to this replica alone (READ_BACKUP): it must be a full one.
                addrs[..chain.readable].contains(&me)
            } else {
                batch.chain == addrs
            };
            if !ok {
                return Err(distribution_changed());
            }
        }
        Ok(())
    }

    /// Whether a scan step of a guarded partition may run here (and notes it for leaving).
    pub(super) fn scan_allowed(&mut self, key: PartKey, resume: &ScanPos) -> Result<(), TernError> {
        if self.moves.retired.contains(&key) {
            return Err(distribution_changed());
        }
        let now = self.now_ms;
        if let Some(l) = self.moves.leaving.get_mut(&key) {
            // A switched source: a scan it began goes on until it has left; none begins here.
            if l.reported || *resume == ScanPos::Start {
                return Err(distribution_changed());
            }
            l.last_scan_ms = now;
            return Ok(());
        }
        let chain = self.chain_of(key.0, key.1);
        let me = (self.addr.node, self.instance());
        if chain.replicas[..chain.readable].contains(&me) { Ok(()) } else { Err(distribution_changed()) }
    }
}
