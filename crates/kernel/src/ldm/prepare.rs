//! Prepare: executing a batch of key operations at a replica (locks, pending after-images with
//! reserved memory, unique-index triggers) and forwarding after-images down the chain.

use super::*;

impl Ldm {
    /// Whether the batch, from op `from` on, may run on the chain it carries: a write at the head
    /// routed with an older map would bypass a replica that has joined since (so would a
    /// backup's after-images of one), and a partition that moves or has moved away is guarded.
    /// A batch that waited for a lock resumes with `from` > 0: if the map changed while it
    /// waited, a replica may have joined its partitions (and a copy to it may have sent the rows
    /// this batch had not reached yet), so the rest is checked again as a new batch is.
    fn check_route(&self, batch: &PrepareBatch, from: usize) -> Result<(), TernError> {
        if from > 0 && batch.map_version >= self.cluster.version {
            return Ok(());
        }
        if batch.pos == 0 && batch.ops.iter().any(|o| matches!(o, PrepOp::Exec { op, .. } if op.kind.is_write())) {
            self.check_chain(batch)?;
        }
        if batch.pos > 0 && batch.map_version < self.cluster.version && batch.ops.len() > from {
            self.check_chain(batch)?;
        }
        if batch.pos == 0 && !self.moves.guarded.is_empty() {
            self.check_guarded(batch)?;
        }
        Ok(())
    }

    pub(super) fn exec_batch(&mut self, mut batch: Box<PrepareBatch>, from: usize, out: &mut Out) {
        debug_assert!(from <= batch.ops.len(), "invariant: a batch resumes within its operations");
        let txn = batch.txn;
        if from == 0 && (self.coordinator_gone(&txn) || (!self.aborted.is_empty() && self.aborted.contains_key(&txn))) {
            // A prepare of a transaction whose coordinator failed, reaching this replica after
            // the map said so (forwarded down a chain, or in flight, while the takeover ran): the
            // takeover settled what the replicas reported and nobody awaits this batch, so it
            // must take no lock (it would be held forever). The same for one that its
            // coordinator's fan-out abort overtook (a chain of three or more, which a move makes,
            // whose failed member came after the live ones this batch still travels through).
            return;
        }
        if let Err(e) = self.check_route(&batch, from) {
            self.fail_rest(&mut batch, from, e.code, &e.message);
            self.finish_batch(batch, out);
            return;
        }
        if from == 0 && batch.pos == 0 && batch.chain.len() == 1 && !self.can_serve(&batch) {
            // A read sent to this backup (READ_BACKUP) while it is not a full replica (a map
            // the coordinator had not seen yet): the client retries.
            let e = TernError::new(ErrorCode::NodeNotStarted, "Temporary failure, replica not started");
            self.fail_rest(&mut batch, 0, e.code, &e.message);
            self.finish_batch(batch, out);
            return;
        }
        if from == 0 && batch.ops.len() >= PREFETCH_BATCH_MIN {
            self.prefetch_batch(&batch);
        }
        for i in from..batch.ops.len() {
            let lock = match &batch.ops[i] {
                PrepOp::Exec { partition, op, .. } => match op.kind {
                    OpKind::Read if self.fast_committed == 0 => None,
                    OpKind::Read => {
                        // A committed read takes no lock, unless a one-round commit committed
                        // the row here but not yet at its primary: then it waits for that.
                        let key = (op.table, *partition, KeyBuf::new(&op.key));
                        self.fast_pending(&key).then_some((key, LockMode::Shared))
                    }
                    OpKind::UpdateDirty if batch.chain.len() == 1 && !self.uniques.contains_key(&op.table) => None,
                    OpKind::ReadShared => Some(((op.table, *partition, KeyBuf::new(&op.key)), LockMode::Shared)),
                    _ => Some(((op.table, *partition, KeyBuf::new(&op.key)), LockMode::Exclusive)),
                },
                PrepOp::Replica { table, partition, key, .. } => {
                    Some(((*table, *partition, KeyBuf::new(key)), LockMode::Exclusive))
                }
            };
            let mode = lock.as_ref().map(|l| l.1);
            // A committed read that waits for a one-round commit is never granted the lock.
            let read_wait = matches!(&batch.ops[i], PrepOp::Exec { op, .. } if op.kind == OpKind::Read);
            if batch.nowait
                && !read_wait
                && let (Some((lock_key, mode)), PrepOp::Exec { idx, .. }) = (&lock, &batch.ops[i])
                && self.parts.contains_key(&(lock_key.0, lock_key.1))
                && !self.try_acquire(txn, lock_key, *mode)
            {
                let e = TernError::new(ErrorCode::Deadlock, "row lock is busy (no-wait transaction)");
                batch.results.push((*idx, OpResult::Error(e)));
                batch.holds_state |= self.txns.contains_key(&txn);
                continue;
            }
            if let Some((lock_key, mode)) = lock
                && self.parts.contains_key(&(lock_key.0, lock_key.1))
                && !self.acquire((txn, batch.batch), &lock_key, mode)
            {
                if self.waits_for_itself(txn, &lock_key) {
                    // A cycle of waits within this ldm: fail now instead of at the timeout
                    // (cycles through other ldms still end at the lock-wait timeout, as in NDB).
                    if let Some(e) = self.locks.get_mut(&lock_key) {
                        e.waiters.retain(|(t, _)| *t != (txn, batch.batch));
                        if e.is_free() {
                            self.locks.remove(&lock_key);
                        }
                    }
                    crate::tc::NodeStats::count(&self.stats.deadlocks);
                    self.fail_rest(
                        &mut batch,
                        i,
                        ErrorCode::Deadlock,
                        "Deadlock found when trying to get lock; try restarting transaction",
                    );
                    self.finish_batch(batch, out);
                    return;
                }
                crate::tc::NodeStats::count(&self.stats.lock_waits);
                if batch.pos == 0 && batch.commit_epoch.take().is_some() {
                    // A one-round commit waits for no lock: it would hold its epoch open.
                    out.send(self.coordinator(txn), Signal::FastOff { txn });
                }
                let deadline_ms = self.now_ms + self.cfg.lock_wait_timeout_ms;
                let w = (txn, batch.batch);
                assert!(!self.blocked.contains_key(&w), "batch {w:?} is already waiting");
                self.blocked.insert(
                    w,
                    Blocked {
                        batch,
                        next_op: i,
                        lock: lock_key,
                        since_ms: self.now_ms,
                        deadline_ms,
                        probed_ms: self.now_ms,
                        read_wait,
                    },
                );
                // The cycle may run through other ldms or nodes.
                self.probe_wait(w, out);
                return;
            }
            if mode.is_some() {
                batch.holds_state = true;
            }
            match &mut batch.ops[i] {
                PrepOp::Exec { idx, partition, op } => {
                    let idx = *idx;
                    let mut triggers = Vec::new();
                    if op.kind == OpKind::UpdateDirty {
                        // No lock, but a pending change this chain must commit or drop.
                        batch.holds_state = true;
                    }
                    let r = self.exec_op(txn, *partition, op, &mut triggers);
                    batch.results.push((idx, r));
                    batch.triggers.extend(triggers.into_iter().map(|t| (idx, t)));
                }
                PrepOp::Replica { table, partition, key, row } => {
                    let lk = (*table, *partition, KeyBuf::new(key));
                    // The next replica (if any) gets this after-image too.
                    let last = batch.pos as usize + 1 == batch.chain.len();
                    let row = if last { row.take() } else { row.clone() };
                    if let Err(e) = self.stage(txn, (lk, None), row) {
                        batch.results.push((REPLICA_FAILED, OpResult::Error(e)));
                    }
                }
            }
        }
        self.finish_batch(batch, out);
    }

    pub(super) fn finish_batch(&mut self, mut batch: Box<PrepareBatch>, out: &mut Out) {
        let next = batch.pos as usize + 1;
        if batch.commit_epoch.is_some() && !self.fast_commit_allowed(&batch) {
            // The coordinator learns it from `Prepared` (ordinary rounds from there).
            batch.commit_epoch = None;
        }
        if let Some(epoch) = batch.commit_epoch
            && next == batch.chain.len()
        {
            // One-round commit at the last replica: staged everything, so commit now. The
            // `Commit` to the primary is this replica's prepare acknowledgement as well.
            let txn = batch.txn;
            let results = std::mem::take(&mut batch.results);
            let t = self.txns.entry(txn).or_insert_with(|| LdmTxn::since(self.now_ms));
            debug_assert!(!t.fast, "{txn:?} committed in one round twice");
            t.fast = true;
            self.fast_committed += 1;
            self.commit(txn, epoch, batch.chain, batch.pos, results, out);
            return;
        }
        if next < batch.chain.len() {
            // Forward after-images of this replica's successful writes to the next replica.
            let mut replica_ops = Vec::new();
            if batch.pos == 0 {
                // Every write that staged a change here goes down the chain as its after-image
                // (whatever the op answered: a write returning the previous row answers
                // NotFound when it inserted one).
                for op in &batch.ops {
                    if let PrepOp::Exec { partition, op, .. } = op
                        && op.kind.is_write()
                    {
                        let lk = (op.table, *partition, KeyBuf::new(&op.key));
                        let Some(change) = self.txns.get(&batch.txn).and_then(|t| t.changes.get(&lk)) else {
                            continue; // nothing changed (a failed op, an update of a missing row)
                        };
                        let row = change.row.clone();
                        replica_ops.push(PrepOp::Replica {
                            table: op.table,
                            partition: *partition,
                            key: op.key.clone(),
                            row,
                        });
                    }
                }
            } else {
                replica_ops = std::mem::take(&mut batch.ops);
            }
            batch.ops = replica_ops;
            batch.pos += 1;
            let to = batch.chain[next];
            out.send(to, Signal::Prepare(batch));
        } else {
            // The coordinator needs the results, not the operations (nor their rows).
            batch.ops = Vec::new();
            out.send(batch.txn.tc, Signal::Prepared(batch));
        }
    }

    /// Whether a batch sent as a one-round commit may stay one here. The primary (where every
    /// client op ran) requires that each succeeded, no unique-index trigger followed, the batch
    /// holds something to commit and no commit in a newer epoch than the coordinator's ran here
    /// (its transactions may precede this one); the last replica that it staged every write.
    fn fast_commit_allowed(&self, batch: &PrepareBatch) -> bool {
        let epoch = batch.commit_epoch.expect("a one-round commit");
        debug_assert!(batch.chain.len() == 2, "one-round commits run on chains of two");
        if batch.pos == 0 {
            batch.holds_state
                && batch.triggers.is_empty()
                && epoch >= self.newest_commit_epoch
                && batch.results.iter().all(|(_, r)| !matches!(r, OpResult::Error(_) | OpResult::NotFound))
        } else {
            batch.results.iter().all(|(i, _)| *i != REPLICA_FAILED) && self.txns.contains_key(&batch.txn)
        }
    }

    /// Overlaps the cache misses of a batch's key lookups: first start loading every op's index
    /// slots, then (slots now at hand) every op's heap entry, then its row, before executing
    /// any op.
    pub(super) fn prefetch_batch(&self, batch: &PrepareBatch) {
        for pass in 0..3 {
            for op in &batch.ops {
                if let PrepOp::Exec { partition, op, .. } = op
                    && let Some(p) = self.parts.get(&(op.table, *partition))
                {
                    match pass {
                        0 => p.prefetch_slot(&op.key),
                        1 => p.prefetch_entry(&op.key),
                        _ => p.prefetch_row(&op.key),
                    }
                }
            }
        }
    }

    pub(super) fn layout(&self, table: TableId) -> Option<&Arc<RowLayout>> {
        self.layouts.get(&table)
    }

    /// The row as this transaction sees it: its own pending change, else the committed row.
    /// A row whose TTL has passed is absent.
    pub(super) fn current_row(&self, txn: TxnRef, lk: &LockKey) -> Option<Vec<u8>> {
        self.current_row_raw(txn, lk).filter(|r| !self.expired(lk.0, r))
    }

    /// `current_row` including rows whose TTL has passed.
    pub(super) fn current_row_raw(&self, txn: TxnRef, lk: &LockKey) -> Option<Vec<u8>> {
        self.current_row_at(txn, lk).0.map(<[u8]>::to_vec)
    }

    /// `current_row_raw` without copying the row, and where the committed row is stored (a hint
    /// for commit, also when the row is this transaction's pending change).
    pub(super) fn current_row_at(&self, txn: TxnRef, lk: &LockKey) -> (Option<&[u8]>, Option<RowId>) {
        if let Some(c) = self.txns.get(&txn).and_then(|t| t.changes.get(lk)) {
            return (c.row.as_deref(), c.at);
        }
        let Some(p) = self.parts.get(&(lk.0, lk.1)) else { return (None, None) };
        match p.lookup(&lk.2) {
            Some(id) => (Some(p.row(id)), Some(id)),
            None => (None, None),
        }
    }

    /// `current_row` with `current_row_at`'s hint.
    fn current_row_owned_at(&self, txn: TxnRef, lk: &LockKey) -> (Option<Vec<u8>>, Option<RowId>) {
        let (r, at) = self.current_row_at(txn, lk);
        (r.filter(|r| !self.expired(lk.0, r)).map(<[u8]>::to_vec), at)
    }

    /// Whether `row` of `table` has passed its TTL (interfaces.md §5: now > column + seconds).
    pub(super) fn expired(&self, table: TableId, row: &[u8]) -> bool {
        match (self.ttls.get(&table), self.layouts.get(&table)) {
            (Some(&ttl), Some(layout)) => row_expired(layout, ttl, row, self.now_us),
            _ => false,
        }
    }

    /// Executes one operation at the primary. Writes to a table with unique indexes add the
    /// index-table operations that keep them (NDB's unique-index triggers) to `triggers`.
    pub(super) fn exec_op(
        &mut self,
        txn: TxnRef,
        partition: u32,
        op: &mut KeyOp,
        triggers: &mut Vec<KeyOp>,
    ) -> OpResult {
        let Some(layout) = self.layout(op.table).cloned() else {
            return err_op(ErrorCode::SchemaChanged, "table is not known at this data node (schema changed)");
        };
        if !self.parts.contains_key(&(op.table, partition)) {
            return err_op(
                ErrorCode::SchemaChanged,
                format!("partition {partition} of table {} is not here", op.table),
            );
        }
        if op.kind == OpKind::Read {
            // Read committed: this transaction's own pending write, else the committed row.
            let own = self.txns.get(&txn).filter(|t| !t.changes.is_empty());
            if let Some(t) = own
                && let Some(c) = t.changes.get(&(op.table, partition, KeyBuf::new(&op.key)))
            {
                return match &c.row {
                    Some(r) if !self.expired(op.table, r) => project(&layout, r, op.projection.as_deref()),
                    _ => OpResult::NotFound,
                };
            }
            let p = &self.parts[&(op.table, partition)];
            return match p.lookup(&op.key) {
                Some(id) if !self.expired(op.table, p.row(id)) => project(&layout, p.row(id), op.projection.as_deref()),
                _ => OpResult::NotFound,
            };
        }
        let lk: LockKey = (op.table, partition, KeyBuf::new(&op.key));
        match op.kind {
            OpKind::Read | OpKind::ReadShared | OpKind::ReadExclusive => match self.current_row(txn, &lk) {
                Some(r) => project(&layout, &r, op.projection.as_deref()),
                None => OpResult::NotFound,
            },
            OpKind::Insert | OpKind::Write => {
                if let Err(e) = layout.check_row(&op.row) {
                    return OpResult::Error(e);
                }
                if layout.key_of(&op.row) != &op.key[..] {
                    return err_op(ErrorCode::InvalidRequest, "row key differs from the operation key");
                }
                let (old, at) = self.current_row_at(txn, &lk);
                let old = old.filter(|r| !self.expired(op.table, r));
                if op.kind == OpKind::Insert && old.is_some() {
                    return err_op(ErrorCode::DuplicateKey, "Duplicate entry for key 'PRIMARY'");
                }
                let result = previous(&layout, old, op.projection.as_deref());
                // The old row is copied only for unique-index triggers; the new row moves (the
                // batch keeps the op's key, which is all the chain and the tc use afterwards).
                let old = if self.uniques.contains_key(&op.table) { old.map(<[u8]>::to_vec) } else { None };
                let row = std::mem::take(&mut op.row);
                self.stage_with_triggers(txn, (lk, at), old, Some(row), triggers, result)
            }
            OpKind::UpdateDirty if !self.txns.get(&txn).is_some_and(|t| t.locks.contains(&lk)) => {
                self.exec_dirty_update(txn, &layout, lk, op)
            }
            OpKind::Update | OpKind::UpdateDirty => {
                let (cur, at) = self.current_row_owned_at(txn, &lk);
                let (cur, base) = match cur {
                    Some(cur) => (Some(cur.clone()), cur),
                    None if op.row.is_empty() => return OpResult::NotFound,
                    None => {
                        // Upsert: start from the row the operation carries.
                        if let Err(e) = layout.check_row(&op.row) {
                            return OpResult::Error(e);
                        }
                        if layout.key_of(&op.row) != &op.key[..] {
                            return err_op(ErrorCode::InvalidRequest, "row key differs from the operation key");
                        }
                        (None, op.row.clone())
                    }
                };
                let row = match apply_updates(&layout, &base, &op.updates) {
                    Ok(r) => r,
                    Err(e) => return OpResult::Error(e),
                };
                let result = match &op.projection {
                    Some(cols) => project(&layout, &row, Some(cols)),
                    None => OpResult::Done,
                };
                self.stage_with_triggers(txn, (lk, at), cur, Some(row), triggers, result)
            }
            OpKind::Delete => {
                let (Some(cur), at) = self.current_row_owned_at(txn, &lk) else {
                    return OpResult::NotFound;
                };
                let result = previous(&layout, Some(&cur), op.projection.as_deref());
                self.stage_with_triggers(txn, (lk, at), Some(cur), None, triggers, result)
            }
            OpKind::DeleteExpired => match self.current_row_raw(txn, &lk) {
                Some(cur) if self.expired(op.table, &cur) => {
                    let r =
                        self.stage_with_triggers(txn, (lk.clone(), None), Some(cur), None, triggers, OpResult::Done);
                    if let Some(ch) = self.txns.get_mut(&txn).and_then(|t| t.changes.get_mut(&lk)) {
                        ch.expired = true;
                    }
                    r
                }
                _ => OpResult::NotFound,
            },
        }
    }

    /// A dirty update: computes the row from what this transaction sees now (for the reply and the
    /// memory reservation) and records the updates to apply again at commit, without a lock.
    pub(super) fn exec_dirty_update(
        &mut self,
        txn: TxnRef,
        layout: &Arc<RowLayout>,
        lk: LockKey,
        op: &KeyOp,
    ) -> OpResult {
        if self.uniques.contains_key(&op.table) {
            return err_op(ErrorCode::Internal, "dirty update on a table with unique indexes");
        }
        let base = match self.current_row(txn, &lk) {
            Some(cur) => cur,
            None if op.row.is_empty() => return OpResult::NotFound,
            None => {
                if let Err(e) = layout.check_row(&op.row) {
                    return OpResult::Error(e);
                }
                if layout.key_of(&op.row) != &op.key[..] {
                    return err_op(ErrorCode::InvalidRequest, "row key differs from the operation key");
                }
                op.row.clone()
            }
        };
        let row = match apply_updates(layout, &base, &op.updates) {
            Ok(r) => r,
            Err(e) => return OpResult::Error(e),
        };
        let result = match &op.projection {
            Some(cols) => project(layout, &row, Some(cols)),
            None => OpResult::Done,
        };
        let mut updates = self
            .txns
            .get(&txn)
            .and_then(|t| t.changes.get(&lk))
            .and_then(|c| c.deferred.as_ref())
            .map(|d| d.1.clone())
            .unwrap_or_default();
        updates.extend(op.updates.iter().cloned());
        match self.stage(txn, (lk.clone(), None), Some(row)) {
            Ok(()) => {
                if let Some(c) = self.txns.get_mut(&txn).and_then(|t| t.changes.get_mut(&lk)) {
                    c.deferred = Some((op.row.clone(), updates));
                }
                result
            }
            Err(e) => OpResult::Error(e),
        }
    }

    pub(super) fn stage_with_triggers(
        &mut self,
        txn: TxnRef,
        lk: (LockKey, Option<RowId>),
        old: Option<Vec<u8>>,
        new: Option<Vec<u8>>,
        triggers: &mut Vec<KeyOp>,
        ok: OpResult,
    ) -> OpResult {
        if let Err(e) = self.unique_triggers(lk.0.0, old.as_deref(), new.as_deref(), triggers) {
            return OpResult::Error(e);
        }
        match self.stage(txn, lk, new) {
            Ok(()) => ok,
            Err(e) => {
                triggers.clear();
                OpResult::Error(e)
            }
        }
    }

    /// Index-table operations for a row changing from `old` to `new`: delete the old unique
    /// value's entry and insert the new one (nothing when the value is unchanged; NULLs are not
    /// indexed, as in MySQL).
    pub(super) fn unique_triggers(
        &self,
        table: TableId,
        old: Option<&[u8]>,
        new: Option<&[u8]>,
        out: &mut Vec<KeyOp>,
    ) -> TernResult<()> {
        let Some(uniques) = self.uniques.get(&table) else { return Ok(()) };
        let base = &self.layouts[&table];
        for u in uniques {
            let entry = |row: &[u8]| -> TernResult<Option<(Vec<u8>, Vec<u8>)>> {
                let mut values = Vec::with_capacity(u.columns.len() + base.key_cols.len());
                for &c in &u.columns {
                    let v = base.get(row, c as usize)?;
                    if v.is_null() {
                        return Ok(None);
                    }
                    values.push(v);
                }
                for &k in &base.key_cols {
                    values.push(base.get(row, k as usize)?);
                }
                let mut irow = Vec::new();
                u.layout.encode_row(&values, &mut irow)?;
                Ok(Some((u.layout.key_of(&irow).to_vec(), irow)))
            };
            let o = old.map(entry).transpose()?.flatten();
            let n = new.map(entry).transpose()?.flatten();
            if o.as_ref().map(|x| &x.0) == n.as_ref().map(|x| &x.0) {
                continue;
            }
            if let Some((key, _)) = o {
                out.push(KeyOp {
                    table: u.table,
                    kind: OpKind::Delete,
                    key,
                    row: Vec::new(),
                    updates: Vec::new(),
                    projection: None,
                });
            }
            if let Some((key, row)) = n {
                out.push(KeyOp {
                    table: u.table,
                    kind: OpKind::Insert,
                    key,
                    row,
                    updates: Vec::new(),
                    projection: None,
                });
            }
        }
        Ok(())
    }

    /// Records a pending after-image, reserving its data memory (uniqueness is the index
    /// tables' business, checked through the trigger operations). `lk` comes with where the
    /// row was found, if known.
    pub(super) fn stage(
        &mut self,
        txn: TxnRef,
        (lk, at): (LockKey, Option<RowId>),
        row: Option<Vec<u8>>,
    ) -> TernResult<()> {
        let part = self
            .parts
            .get(&(lk.0, lk.1))
            .ok_or_else(|| TernError::new(ErrorCode::SchemaChanged, "partition is not here (schema changed)"))?;
        let mut reserved = 0;
        if let Some(r) = &row {
            reserved = part.charge(r);
            self.budget.reserve(reserved)?;
        }
        let t = self.txns.entry(txn).or_insert_with(|| LdmTxn::since(self.now_ms));
        if let Some(prev) = t.changes.insert(lk, Change { row, reserved, at, deferred: None, expired: false }) {
            self.budget.release(prev.reserved);
        }
        Ok(())
    }

    /// Whether the coordinator of `txn` has failed or restarted since it began (transaction ids
    /// carry the coordinator's incarnation in their top bits).
    pub(super) fn coordinator_gone(&self, txn: &TxnRef) -> bool {
        self.cluster
            .nodes
            .get(&txn.tc.node)
            .is_some_and(|s| !s.state.in_chains() || s.incarnation != (txn.id >> 40) as u32)
    }

    /// Whether this replica may run a batch sent to it alone: it is the primary of the batch's
    /// partitions, or a backup (a READ_BACKUP read) of a node that is started.
    fn can_serve(&self, batch: &PrepareBatch) -> bool {
        let primary_here = |t: TableId, p: u32| self.cluster.primary(t, self.groups_of(t), p) == Some(self.addr.node);
        self.cluster.state_of(self.addr.node) == tern_types::cluster::NodeState::Started
            || batch.ops.iter().all(|o| match o {
                PrepOp::Exec { partition, op, .. } => primary_here(op.table, *partition),
                PrepOp::Replica { .. } => true,
            })
    }

    /// Fails operation `from` of a batch with `code` and the ones after it as not executed.
    /// Fails the batch from op `from` on. A backup's replica ops have no result slot of their
    /// own: their failure is reported once, under `REPLICA_FAILED`, and dooms the transaction
    /// (the tc must not commit a write a replica did not stage).
    pub(super) fn fail_rest(&self, batch: &mut PrepareBatch, from: usize, code: ErrorCode, msg: &str) {
        let mut replica_failed = false;
        for (i, op) in batch.ops.iter().enumerate().skip(from) {
            match op {
                PrepOp::Exec { idx, .. } => {
                    let r = if i == from {
                        err_op(code, msg)
                    } else {
                        err_op(ErrorCode::TransactionAborted, "operation not executed: an earlier operation failed")
                    };
                    batch.results.push((*idx, r));
                }
                PrepOp::Replica { .. } if !replica_failed => {
                    replica_failed = true;
                    batch.results.push((REPLICA_FAILED, err_op(code, msg)));
                }
                PrepOp::Replica { .. } => {}
            }
        }
        batch.ops.truncate(from);
    }
}
