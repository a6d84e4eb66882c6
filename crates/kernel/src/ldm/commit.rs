//! Commit (backup-first, one redo record per transaction) and abort.

use super::*;

impl Ldm {
    pub(super) fn commit(
        &mut self,
        txn: TxnRef,
        epoch: u64,
        chain: Vec<Addr>,
        pos: u8,
        results: Vec<(u32, OpResult)>,
        out: &mut Out,
    ) {
        self.newest_commit_epoch = self.newest_commit_epoch.max(epoch);
        let mut changes = match self.txns.get_mut(&txn) {
            Some(t) => std::mem::take(&mut t.changes),
            None => BTreeMap::new(),
        };
        self.apply_deferred(&mut changes);
        if !changes.is_empty() {
            let mut ops: Vec<RedoOpRef<'_>> = Vec::with_capacity(changes.len());
            // Row count changes per table, told to the node's stats once per table (the changes
            // are ordered by table), not once per row.
            let mut counted: Option<(TableId, i64)> = None;
            let fetching = self.fetch.as_ref().and_then(|f| f.current);
            for (lk, ch) in &changes {
                if fetching == Some((lk.0, lk.1))
                    && let Some(f) = self.fetch.as_mut()
                {
                    f.touch(&lk.2, &self.budget);
                }
                let Some(part) = self.parts.get_mut(&(lk.0, lk.1)) else {
                    self.budget.release(ch.reserved);
                    continue; // table dropped meanwhile
                };
                let before = part.charged();
                let rows_before = part.len() as i64;
                match &ch.row {
                    Some(r) => {
                        part.upsert_at(ch.at, r).expect("a staged row was checked at prepare");
                        ops.push(RedoOpRef::Put { table: lk.0, partition: lk.1, row: r });
                    }
                    None => {
                        if let Some(id) = part.lookup_at(ch.at, &lk.2) {
                            part.delete(id).expect("live row");
                        }
                        ops.push(RedoOpRef::Delete { table: lk.0, partition: lk.1, key: &lk.2 });
                    }
                }
                let after = part.charged();
                let delta = part.len() as i64 - rows_before;
                match &mut counted {
                    Some((t, n)) if *t == lk.0 => *n += delta,
                    c => {
                        if let Some((t, n)) = c.replace((lk.0, delta)) {
                            self.stats.add_rows(t, n);
                        }
                    }
                }
                if after >= before {
                    self.budget.force(after - before);
                } else {
                    self.budget.release(before - after);
                }
                self.budget.release(ch.reserved);
            }
            if let Some((t, n)) = counted {
                self.stats.add_rows(t, n);
            }
            let before = self.redo_buf.len();
            let tc_instance = match txn.tc.block {
                Block::Tc(i) => i,
                _ => 0,
            };
            redo::append_commit(&mut self.redo_buf, epoch, txn.tc.node, tc_instance, txn.id, &ops);
            if !self.logs.is_empty() {
                self.log_changes(epoch, &changes);
            }
            self.lsn += (self.redo_buf.len() - before) as u64;
            debug_assert!(self.redo_buf.len() > before, "invariant: a commit with changes writes its redo record");
            self.max_epoch_applied = self.max_epoch_applied.max(epoch);
            if self.redo_buf.len() >= self.cfg.redo_buffer_bytes {
                self.write_redo_buffer(out);
            }
        }
        if pos == 0 {
            if self.txns.contains_key(&txn) {
                // Kept until Complete: a takeover learns here that the transaction committed.
                self.markers.insert(txn, epoch);
            }
            self.release_txn(txn, out);
            out.send(self.coordinator(txn), Signal::Committed { txn, chain, results });
        } else {
            let t = self.txns.entry(txn).or_insert_with(|| LdmTxn::since(self.now_ms));
            t.committed_epoch = Some(epoch);
            if t.fast {
                t.results.clone_from(&results);
            }
            out.send(
                chain[pos as usize - 1],
                Signal::Commit { txn, epoch, chain: chain.clone(), pos: pos - 1, results },
            );
        }
    }

    /// Data nodes failed: a `Complete` on its way down a chain through one of them is lost, and
    /// the replicas before it would hold their locks (or markers) forever. Each committed
    /// transaction held here whose coordinator lives on asks it; a coordinator that failed is
    /// taken over, and the takeover completes what it finds.
    pub(super) fn ask_completion(&self, out: &mut Out) {
        let committed = self.txns.iter().filter(|(_, x)| x.committed_epoch.is_some()).map(|(t, _)| *t);
        let asks: std::collections::BTreeSet<TxnRef> =
            committed.chain(self.markers.keys().copied()).filter(|t| self.coordinator(*t) == t.tc).collect();
        for txn in asks {
            out.send(txn.tc, Signal::CompleteReq { txn, from: self.addr });
        }
    }

    /// A one-round commit's chain lost a replica and this one survived: answer whether it
    /// committed here (the other replica can no longer commit it: it has failed), or abort.
    pub(super) fn resolve(&mut self, txn: TxnRef, out: &mut Out) {
        let me = vec![self.addr];
        let to = self.coordinator(txn);
        if self.markers.contains_key(&txn) {
            // The primary committed: its own `Committed` (with the results) went first.
            out.send(to, Signal::Committed { txn, chain: me, results: Vec::new() });
        } else if let Some(t) = self.txns.get(&txn)
            && t.committed_epoch.is_some()
        {
            out.send(to, Signal::Committed { txn, chain: me, results: t.results.clone() });
        } else {
            self.abort(txn, out);
            out.send(to, Signal::Aborted { txn, chain: me });
        }
    }

    /// Whether a one-round commit that this last replica committed holds the row: reads here
    /// wait until the primary committed it too (`Complete`), so nobody sees a commit that a
    /// failure of the primary could still undo.
    pub(super) fn fast_pending(&self, key: &LockKey) -> bool {
        self.locks
            .get(key)
            .and_then(|e| e.exclusive)
            .is_some_and(|t| self.txns.get(&t).is_some_and(|x| x.fast && x.committed_epoch.is_some()))
    }

    /// Where answers about a transaction go: its coordinator, or — when that coordinator's node
    /// has failed — the tc running the takeover (the master's first tc). A coordinator whose
    /// node failed and is back (a new incarnation, in the chains again as Copying before the
    /// takeover's commits and aborts were answered) counts as failed: its new tc knows nothing
    /// of the transaction, and the takeover waiting for the answer would stall the epochs.
    pub(super) fn coordinator(&self, txn: TxnRef) -> Addr {
        if self.cluster.state_of(txn.tc.node).in_chains() && !self.coordinator_gone(&txn) {
            txn.tc
        } else {
            Addr::new(self.cluster.master().unwrap_or(self.addr.node), Block::Tc(0))
        }
    }

    /// What this ldm holds of transactions coordinated on the failed nodes: prepared (locks or
    /// pending changes, or a batch waiting for a lock) or committed (a backup awaiting Complete,
    /// or a primary's marker).
    pub(super) fn takeover_report(&self, failed: &[NodeId]) -> Vec<(TxnRef, TakeoverState)> {
        let mut out: BTreeMap<TxnRef, TakeoverState> = BTreeMap::new();
        for (t, x) in &self.txns {
            if failed.contains(&t.tc.node) {
                let st = match x.committed_epoch {
                    Some(epoch) => TakeoverState::Committed { epoch },
                    None => TakeoverState::Prepared,
                };
                out.insert(*t, st);
            }
        }
        for (t, _) in self.blocked.keys() {
            if failed.contains(&t.tc.node) {
                out.entry(*t).or_insert(TakeoverState::Prepared);
            }
        }
        for (t, &epoch) in &self.markers {
            if failed.contains(&t.tc.node) {
                out.insert(*t, TakeoverState::Committed { epoch });
            }
        }
        out.into_iter().collect()
    }

    /// Dirty updates take effect on the row as committed now (or their upsert row when there is
    /// none, or it has expired); one that no longer applies (a guard fails, an overflow) is
    /// dropped.
    pub(super) fn apply_deferred(&mut self, changes: &mut BTreeMap<LockKey, Change>) {
        let keys: Vec<LockKey> = changes.iter().filter(|(_, c)| c.deferred.is_some()).map(|(k, _)| k.clone()).collect();
        for lk in keys {
            let ch = changes.get_mut(&lk).expect("listed");
            let (upsert, updates) = ch.deferred.take().expect("deferred");
            let Some(layout) = self.layouts.get(&lk.0).cloned() else { continue };
            let current = self
                .parts
                .get(&(lk.0, lk.1))
                .and_then(|p| p.lookup(&lk.2).map(|id| p.row(id).to_vec()))
                .filter(|r| !self.expired(lk.0, r));
            let row = match current {
                Some(cur) => apply_updates(&layout, &cur, &updates).ok(),
                None if !upsert.is_empty() => apply_updates(&layout, &upsert, &updates).ok(),
                None => None,
            };
            match row {
                Some(r) => ch.row = Some(r),
                None => {
                    let reserved = ch.reserved;
                    changes.remove(&lk);
                    self.budget.release(reserved);
                }
            }
        }
    }

    pub(super) fn abort(&mut self, txn: TxnRef, out: &mut Out) {
        let waiting: Vec<locks::Waiter> = self.blocked.range((txn, 0)..=(txn, u32::MAX)).map(|(w, _)| *w).collect();
        for w in waiting {
            let b = self.blocked.remove(&w).expect("listed");
            if let Some(e) = self.locks.get_mut(&b.lock) {
                e.waiters.retain(|(t, _)| *t != w);
                if e.is_free() {
                    self.locks.remove(&b.lock);
                }
            }
        }
        if let Some(t) = self.txns.get_mut(&txn) {
            for (_, ch) in std::mem::take(&mut t.changes) {
                self.budget.release(ch.reserved);
            }
        }
        self.release_txn(txn, out);
        debug_assert!(
            !self.blocked.range((txn, 0)..=(txn, u32::MAX)).any(|_| true),
            "invariant: an aborted transaction waits for no lock"
        );
    }
}
