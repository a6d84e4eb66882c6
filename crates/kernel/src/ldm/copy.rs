//! Node restart: copying partitions to a replica that rejoins (ndb-protocols.md §5.2, the whole-
//! fragment form of §10.2: the restarting replica starts empty).
//!
//! The restarting node is already in every write chain of its partitions (last, state `Copying`)
//! when its ldm asks each partition's primary for the rows. The primary acts on the request only
//! once it has seen that cluster map, so from then on every write it executes either travels the
//! chain through the new replica or — carrying an older chain — is refused (`check_chain`). It
//! then waits until the transactions that had written the partition before (which may lack the
//! new replica) are gone, and streams committed rows in row-id order, a batch per
//! acknowledgement, over the same link the chain uses (per-link FIFO). A row with a pending write
//! is not copied until that write has committed or aborted: its commit reaches the new replica
//! first (commits run backup-first), so the copy then ships the same or a newer value, never an
//! older one over a newer.
//!
//! When every partition is copied, the restarting ldm writes a checkpoint and reports `CopyDone`
//! once it is usable: only then can the node recover by itself (its redo lacks the copied rows).

use super::*;

/// What one key in `Fetch::touched` is charged to the data-memory budget beyond its bytes.
const TOUCHED_OVERHEAD: u64 = 48;

/// Rows (or bytes) per copy batch, and batches in flight per copy.
const COPY_BATCH_ROWS: usize = 2048;
const COPY_BATCH_BYTES: usize = 1 << 20;
const COPY_WINDOW: u32 = 2;

/// One batch of a partition copy, as the restarting side applies it.
pub(super) struct CopiedRows {
    pub rows: Vec<Vec<u8>>,
    pub done: bool,
    pub max_epoch: u64,
}

/// A restarting ldm's progress (or a move target's: `node_restart` false).
pub(super) struct Fetch {
    todo: VecDeque<PartKey>,
    pub(super) current: Option<PartKey>,
    /// The node `current` is being copied from.
    source: NodeId,
    /// Partitions copied so far.
    done: Vec<PartKey>,
    rows: u64,
    /// Every partition copied; waiting for the checkpoint that covers them to become usable.
    checkpoint: Option<u64>,
    node_restart: bool,
    /// Keys of `current` that a commit down the chain wrote here since its copy began. A
    /// copied row of one of them is older (it left the primary before that write's prepare,
    /// which reached this replica first by another path: a move's chains are longer than two)
    /// and is dropped. At most one entry per key the partition has had during the copy; charged
    /// to the data-memory budget (`touched_bytes`) until the partition's copy ends, so a copy
    /// under heavy writes fills the budget (writes then fail with "data memory is full")
    /// rather than the process's memory.
    touched: std::collections::HashSet<KeyBuf>,
    touched_bytes: u64,
}

impl Fetch {
    pub(super) fn has(&self, key: PartKey) -> bool {
        self.current == Some(key) || self.todo.contains(&key) || self.done.contains(&key)
    }

    /// A commit down the chain wrote `key` of the partition being copied.
    pub(super) fn touch(&mut self, key: &KeyBuf, budget: &MemoryBudget) {
        if !self.touched.contains(key) {
            let n = key.len() as u64 + TOUCHED_OVERHEAD;
            budget.force(n);
            self.touched_bytes += n;
            self.touched.insert(key.clone());
        }
    }

    pub(super) fn touched_bytes(&self) -> u64 {
        self.touched_bytes
    }

    /// The partition's copy ended (or starts again): its touched keys are forgotten.
    fn clear_touched(&mut self, budget: &MemoryBudget) {
        budget.release(std::mem::take(&mut self.touched_bytes));
        self.touched = Default::default();
    }
}

/// A primary sending one partition to a restarting replica.
pub(super) struct CopySession {
    /// Next row id to send.
    next: u32,
    /// Transactions that wrote the partition before the copy began (their chains may lack the
    /// new replica): the copy starts once all are gone.
    before: Vec<TxnRef>,
    in_flight: u32,
    done: bool,
}

impl Ldm {
    /// This node rejoins: drop what the partitions held and fetch each from its primary.
    pub(super) fn start_fetch(&mut self, out: &mut Out) {
        if let Some(mut old) = self.fetch.take() {
            old.clear_touched(&self.budget);
        }
        let keys: Vec<PartKey> = self.parts.keys().copied().collect();
        for k in &keys {
            let old = self.parts.remove(k).expect("listed");
            self.budget.release(old.charged());
            self.stats.add_rows(k.0, -(old.len() as i64));
            if let Some(t) = self.tables.get(&k.0) {
                self.parts.insert(*k, Partition::new(t, k.1, self.layouts[&k.0].clone()));
            }
        }
        self.fetch = Some(Fetch {
            todo: keys.into_iter().collect(),
            current: None,
            source: 0,
            done: Vec::new(),
            rows: 0,
            checkpoint: None,
            node_restart: true,
            touched: Default::default(),
            touched_bytes: 0,
        });
        self.fetch_next(out);
    }

    /// A move's target fetches `key` (empty here now), after what a running fetch has to do.
    pub(super) fn queue_fetch(&mut self, key: PartKey, out: &mut Out) {
        match self.fetch.as_mut() {
            Some(f) => {
                f.todo.push_back(key);
                // The checkpoint that ends this fetch must begin after these rows arrived too.
                f.checkpoint = None;
                if f.current.is_none() {
                    self.fetch_next(out);
                }
            }
            None => {
                self.fetch = Some(Fetch {
                    todo: VecDeque::from([key]),
                    current: None,
                    source: 0,
                    done: Vec::new(),
                    rows: 0,
                    checkpoint: None,
                    node_restart: false,
                    touched: Default::default(),
                    touched_bytes: 0,
                });
                self.fetch_next(out);
            }
        }
    }

    /// The node a partition was being copied from failed: start that partition again, from
    /// empty, from the new primary.
    pub(super) fn refetch_if_source_failed(&mut self, out: &mut Out) {
        let Some(f) = self.fetch.as_ref() else { return };
        let (Some(key), source) = (f.current, f.source) else { return };
        if self.cluster.state_of(source).in_chains() {
            return;
        }
        self.empty_partition(key);
        let f = self.fetch.as_mut().expect("fetching");
        f.current = None;
        f.todo.push_front(key);
        self.fetch_next(out);
    }

    fn fetch_next(&mut self, out: &mut Out) {
        let version = self.cluster.version;
        let (cluster, tables) = (&self.cluster, &self.tables);
        let Some(f) = self.fetch.as_mut() else { return };
        f.clear_touched(&self.budget);
        while let Some(k) = f.todo.pop_front() {
            // The primary's ldm (a move's source may hold it on another ldm than this one).
            let chain = cluster.chain(k.0, tables.get(&k.0).map_or(0, |t| t.groups), k.1);
            let Some(&(primary, ldm)) = chain.replicas.first().filter(|_| chain.readable > 0) else {
                continue; // no live primary: the cluster is down for this group
            };
            f.current = Some(k);
            f.source = primary;
            let to = Addr::new(primary, Block::Ldm(ldm));
            out.send(to, Signal::CopyFragReq { from: self.addr, table: k.0, partition: k.1, map_version: version });
            return;
        }
        f.current = None;
        self.fetch_checkpoint(out);
    }

    /// Everything is here: a checkpoint begun after the last row arrived makes it recoverable
    /// from this node's own disk (one already running began too early: wait for it first).
    pub(super) fn fetch_checkpoint(&mut self, out: &mut Out) {
        let Some(f) = self.fetch.as_ref() else { return };
        if f.current.is_some() || !f.todo.is_empty() || f.checkpoint.is_some() || self.checkpoint_run.is_some() {
            return;
        }
        let id = self.next_checkpoint_id;
        self.start_checkpoint(out);
        self.fetch.as_mut().expect("fetching").checkpoint = Some(id);
    }

    /// The restarting side: apply a batch of copied rows.
    pub(super) fn copy_rows(&mut self, from: Addr, key: PartKey, batch: CopiedRows, out: &mut Out) {
        let CopiedRows { rows, done, max_epoch } = batch;
        if self.fetch.as_ref().is_none_or(|f| f.current != Some(key)) {
            return;
        }
        debug_assert!(
            self.fetch.as_ref().is_some_and(|f| !f.done.contains(&key)),
            "invariant: a partition is copied once per fetch"
        );
        // The copied rows carry data of epochs up to the primary's: so does the checkpoint that
        // will hold them.
        self.max_epoch_applied = self.max_epoch_applied.max(max_epoch);
        let Some(f) = self.fetch.as_mut() else { return };
        f.rows += rows.len() as u64;
        let touched = std::mem::take(&mut f.touched);
        let layout = self.layouts.get(&key.0).cloned();
        if let (Some(p), Some(layout)) = (self.parts.get_mut(&key), layout) {
            let before = (p.charged(), p.len());
            for r in rows.iter().filter(|r| touched.is_empty() || !touched.contains(layout.key_of(r))) {
                p.upsert(r).expect("a row the primary holds fits its layout");
            }
            // A copied row may replace a larger version the chain wrote here first.
            let after = p.charged();
            if after >= before.0 {
                self.budget.force(after - before.0);
            } else {
                self.budget.release(before.0 - after);
            }
            self.stats.add_rows(key.0, p.len() as i64 - before.1 as i64);
        }
        if let Some(f) = self.fetch.as_mut() {
            f.touched = touched;
        }
        if done {
            if let Some(f) = self.fetch.as_mut() {
                f.done.push(key);
                f.current = None;
            }
            self.fetch_next(out);
        } else {
            out.send(from, Signal::CopyAck { from: self.addr, table: key.0, partition: key.1 });
        }
    }

    /// The restarting side: a checkpoint became usable; report when it is the one after the copy.
    pub(super) fn fetch_checkpoint_usable(&mut self, checkpoint_id: u64, out: &mut Out) {
        let Some(f) = self.fetch.as_ref() else { return };
        if f.current.is_none() && f.todo.is_empty() && f.checkpoint.is_some_and(|id| id <= checkpoint_id) {
            let mut f = self.fetch.take().expect("fetching");
            debug_assert!(
                f.todo.is_empty() && f.current.is_none(),
                "invariant: a fetch ends with every partition copied"
            );
            f.clear_touched(&self.budget);
            self.moves.fetched.extend(f.done.iter().copied());
            if f.node_restart {
                out.send(Addr::new(self.addr.node, Block::Dist), Signal::CopyDone { from: self.addr, rows: f.rows });
            }
            // Moves whose target this ldm is report the copy.
            self.placement_changed(out);
        }
    }

    /// The primary side: a restarting replica asks for a partition.
    pub(super) fn copy_request(&mut self, from: Addr, key: PartKey, out: &mut Out) {
        if !self.parts.contains_key(&key) {
            out.send(
                from,
                Signal::CopyRows {
                    from: self.addr,
                    table: key.0,
                    partition: key.1,
                    rows: vec![],
                    done: true,
                    max_epoch: self.max_epoch_applied,
                },
            );
            return;
        }
        let before: Vec<TxnRef> = self
            .txns
            .iter()
            .filter(|(_, t)| t.changes.keys().any(|k| (k.0, k.1) == key) || t.locks.iter().any(|k| (k.0, k.1) == key))
            .map(|(t, _)| *t)
            .collect();
        self.copies.insert((key.0, key.1, from), CopySession { next: 0, before, in_flight: 0, done: false });
        self.copy_step(out);
    }

    pub(super) fn copy_ack(&mut self, from: Addr, key: PartKey, out: &mut Out) {
        if let Some(s) = self.copies.get_mut(&(key.0, key.1, from)) {
            s.in_flight = s.in_flight.saturating_sub(1);
        }
        self.copy_step(out);
    }

    /// Sends what every running copy may send now (called after acks, lock releases and ticks).
    pub(super) fn copy_step(&mut self, out: &mut Out) {
        if self.copies.is_empty() {
            return;
        }
        let ids: Vec<(TableId, u32, Addr)> = self.copies.keys().copied().collect();
        for id in ids {
            let (t, p, to) = id;
            let s = self.copies.get_mut(&id).expect("listed");
            s.before.retain(|x| self.txns.contains_key(x));
            if !s.before.is_empty() || s.in_flight >= COPY_WINDOW {
                continue;
            }
            let Some(part) = self.parts.get(&(t, p)) else {
                self.copies.remove(&id);
                let max_epoch = self.max_epoch_applied;
                out.send(
                    to,
                    Signal::CopyRows { from: self.addr, table: t, partition: p, rows: vec![], done: true, max_epoch },
                );
                continue;
            };
            let layout = &self.layouts[&t];
            let locks = &self.locks;
            let mut rows = Vec::new();
            let mut bytes = 0;
            let mut held = None;
            let resume = part.scan(s.next, |rid, row| {
                let key = layout.key_of(row);
                if locks.get(&(t, p, KeyBuf::new(key))).is_some_and(|e| e.exclusive.is_some()) {
                    held = Some(rid);
                    return false;
                }
                bytes += row.len();
                rows.push(row.to_vec());
                rows.len() < COPY_BATCH_ROWS && bytes < COPY_BATCH_BYTES
            });
            let done = held.is_none() && resume.is_none();
            s.next = held.or(resume).unwrap_or(u32::MAX);
            if rows.is_empty() && !done {
                continue; // waits for a pending write to settle
            }
            debug_assert!(!s.done, "invariant: nothing is sent after a copy's last batch");
            s.in_flight += 1;
            s.done = done;
            if done {
                self.copies.remove(&id);
            }
            let max_epoch = self.max_epoch_applied;
            out.send(to, Signal::CopyRows { from: self.addr, table: t, partition: p, rows, done, max_epoch });
        }
    }

    /// A write batch whose chain lacks a replica this ldm's map has (it was routed with an older
    /// map, before a node joined or a move began) is refused: it would bypass that replica.
    /// Checked at the head of the chain, and at a backup that has a newer map than the batch
    /// (the head may not have seen the map yet: a move's copy source is another replica).
    pub(super) fn check_chain(&self, batch: &PrepareBatch) -> Result<(), TernError> {
        // A batch holds the ops of every partition whose chain the coordinator's map made this
        // one: with an older map that may group a partition a replica has joined since with
        // others that have none, so each partition is checked (once).
        let mut checked: Vec<(TableId, u32)> = Vec::new();
        for o in &batch.ops {
            let key = match o {
                PrepOp::Exec { partition, op, .. } => (op.table, *partition),
                PrepOp::Replica { table, partition, .. } => (*table, *partition),
            };
            if checked.contains(&key) {
                continue;
            }
            checked.push(key);
            let want = self.chain_of(key.0, key.1).replicas;
            if !want.iter().all(|(n, _)| batch.chain.iter().any(|a| a.node == *n)) {
                return Err(TernError::new(ErrorCode::SchemaChanged, "Temporary failure, distribution changed"));
            }
        }
        Ok(())
    }
}

impl Ldm {
    /// What this ldm holds open (for the simulator's failure reports): transactions with the
    /// partitions they touch, lock waits and copy sessions.
    pub fn describe(&self) -> String {
        let mut txns: Vec<String> = self
            .txns
            .iter()
            .map(|(t, x)| {
                let parts: std::collections::BTreeSet<(TableId, u32)> =
                    x.changes.keys().chain(x.locks.iter()).map(|k| (k.0, k.1)).collect();
                format!("{t:?} parts {parts:?} committed {:?} fast {}", x.committed_epoch, x.fast)
            })
            .collect();
        txns.sort();
        let copies: Vec<String> = self
            .copies
            .iter()
            .map(|(k, s)| {
                format!("{k:?} next {} before {:?} in_flight {} done {}", s.next, s.before, s.in_flight, s.done)
            })
            .collect();
        format!(
            "txns [{}] blocked {:?} copies [{}] fetch {}",
            txns.join("; "),
            self.blocked.keys().collect::<Vec<_>>(),
            copies.join("; "),
            self.fetch.is_some()
        )
    }
}
