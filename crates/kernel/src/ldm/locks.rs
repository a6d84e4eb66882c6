//! Row locks: shared/exclusive with FIFO waiters, lock-wait deadlines, and the deadlock check
//! within this ldm.

use super::*;

/// A batch that may wait for a lock: its transaction and the batch's number.
pub(super) type Waiter = (TxnRef, u32);

#[derive(Debug, Default)]
pub(super) struct LockEntry {
    pub(super) exclusive: Option<TxnRef>,
    pub(super) shared: Vec<TxnRef>,
    /// Batches waiting, in arrival order: (transaction, its batch number), mode.
    pub(super) waiters: VecDeque<(Waiter, LockMode)>,
}

impl LockEntry {
    pub(super) fn compatible(&self, txn: TxnRef, mode: LockMode) -> bool {
        match mode {
            LockMode::Shared => self.exclusive.is_none_or(|t| t == txn),
            LockMode::Exclusive => self.exclusive.is_none_or(|t| t == txn) && self.shared.iter().all(|&t| t == txn),
        }
    }
    pub(super) fn grant(&mut self, txn: TxnRef, mode: LockMode) {
        match mode {
            LockMode::Shared => {
                if self.exclusive != Some(txn) && !self.shared.contains(&txn) {
                    self.shared.push(txn);
                }
            }
            LockMode::Exclusive => {
                self.shared.retain(|&t| t != txn);
                self.exclusive = Some(txn);
            }
        }
    }
    pub(super) fn is_free(&self) -> bool {
        self.exclusive.is_none() && self.shared.is_empty() && self.waiters.is_empty()
    }
}

impl Ldm {
    /// Takes the lock if it is free now; never queues.
    pub(super) fn try_acquire(&mut self, txn: TxnRef, key: &LockKey, mode: LockMode) -> bool {
        let free = match self.locks.get(key) {
            None => true,
            Some(e) => {
                e.exclusive == Some(txn)
                    || (mode == LockMode::Shared && e.shared.contains(&txn))
                    || (e.compatible(txn, mode) && e.waiters.is_empty())
            }
        };
        free && self.acquire((txn, u32::MAX), key, mode)
    }

    /// Takes a lock, or queues the batch `waiter` for it; true when granted now.
    pub(super) fn acquire(&mut self, waiter: Waiter, key: &LockKey, mode: LockMode) -> bool {
        let txn = waiter.0;
        let entry = self.locks.entry(key.clone()).or_default();
        let owned = entry.exclusive == Some(txn) || (mode == LockMode::Shared && entry.shared.contains(&txn));
        if owned {
            return true;
        }
        if entry.compatible(txn, mode) && entry.waiters.is_empty() {
            entry.grant(txn, mode);
            let t = self.txns.entry(txn).or_insert_with(|| LdmTxn::since(self.now_ms));
            t.locks.push(key.clone());
            return true;
        }
        entry.waiters.push_back((waiter, mode));
        false
    }

    /// The row locks held and waited for, oldest first, at most `tern_wire::LOCKS_REPORTED`
    /// (for `ndbinfo.cluster_locks`). A holder's duration is its transaction's age at this ldm.
    /// It walks the transactions and the waiting batches, not the lock table: a transaction
    /// holding a million locks is one candidate, of which at most the report's size is looked at.
    pub(super) fn lock_report(&self) -> Vec<tern_wire::LockStat> {
        let (now, max) = (self.now_ms, tern_wire::LOCKS_REPORTED);
        // (since, key, coordinator node, transaction id, exclusive, waiting).
        type Row<'a> = (u64, &'a LockKey, u16, u64, bool, bool);
        let mut holders: Vec<(u64, TxnRef, &LdmTxn)> =
            self.txns.iter().filter(|(_, t)| !t.locks.is_empty()).map(|(r, t)| (t.since_ms, *r, t)).collect();
        holders.sort_unstable_by_key(|&(since, r, _)| (since, r));
        let mut rows: Vec<Row<'_>> = Vec::new();
        'holders: for (since, r, t) in holders {
            for key in &t.locks {
                if rows.len() >= max {
                    break 'holders;
                }
                if let Some(e) = self.locks.get(key) {
                    rows.push((since, key, r.tc.node, r.id, e.exclusive == Some(r), false));
                }
            }
        }
        // Waiting batches (in `blocked`, ordered by waiter) that queue on their lock's entry.
        let mut waits: Vec<Row<'_>> = Vec::new();
        for (w, b) in &self.blocked {
            let Some(e) = self.locks.get(&b.lock) else { continue };
            if let Some((_, mode)) = e.waiters.iter().find(|(x, _)| x == w) {
                waits.push((b.since_ms, &b.lock, w.0.tc.node, w.0.id, *mode == LockMode::Exclusive, true));
            }
        }
        rows.extend(waits);
        rows.sort_unstable();
        rows.truncate(max);
        let me = self.instance();
        rows.into_iter()
            .map(|(since, key, tc_node, txn, exclusive, waiting)| tern_wire::LockStat {
                ldm: me,
                table: key.0,
                partition: key.1,
                key: key.2[..key.2.len().min(64)].to_vec(),
                tc_node,
                txn,
                exclusive,
                waiting,
                duration_ms: now.saturating_sub(since),
            })
            .collect()
    }

    /// Releases every lock of `txn` and resumes batches that were waiting for them.
    pub(super) fn release_txn(&mut self, txn: TxnRef, out: &mut Out) {
        let Some(t) = self.txns.remove(&txn) else {
            return;
        };
        if t.fast {
            self.fast_committed -= 1;
        }
        for ch in t.changes.values() {
            self.budget.release(ch.reserved);
        }
        let mut resume = Vec::new();
        for key in t.locks {
            let Some(entry) = self.locks.get_mut(&key) else {
                continue;
            };
            if entry.exclusive == Some(txn) {
                entry.exclusive = None;
            }
            entry.shared.retain(|&x| x != txn);
            while let Some(&(w, mode)) = entry.waiters.front() {
                if !entry.compatible(w.0, mode) {
                    break;
                }
                entry.waiters.pop_front();
                // A committed read waited only for a one-round commit: it takes no lock.
                let read = self.blocked.get(&w).is_some_and(|b| b.read_wait);
                if !read {
                    entry.grant(w.0, mode);
                }
                resume.push((w, key.clone(), read));
            }
            if entry.is_free() {
                self.locks.remove(&key);
            }
        }
        if !self.copies.is_empty() {
            self.copy_step(out);
        }
        for (w, key, read) in resume {
            if read {
                if let Some(b) = self.blocked.remove(&w) {
                    self.exec_batch(b.batch, b.next_op, out);
                }
                continue;
            }
            let locks = &mut self.txns.entry(w.0).or_insert_with(|| LdmTxn::since(self.now_ms)).locks;
            if !locks.contains(&key) {
                locks.push(key);
            }
            if let Some(b) = self.blocked.remove(&w) {
                let mut batch = b.batch;
                batch.holds_state = true;
                // The op that waited now holds its lock; execute it and the rest of the batch.
                self.exec_batch(batch, b.next_op, out);
            }
        }
    }

    /// Whether `txn`, now queued on `lock`, waits (through holders blocked at this ldm) for a lock
    /// it holds itself. Only waits known here count, so a cycle found is a real deadlock.
    pub(super) fn waits_for_itself(&self, txn: TxnRef, lock: &LockKey) -> bool {
        // (lock, reached through another transaction's wait)
        let mut todo: Vec<(&LockKey, bool)> = vec![(lock, false)];
        let mut seen: Vec<TxnRef> = Vec::new();
        while let Some((l, through)) = todo.pop() {
            let Some(e) = self.locks.get(l) else { continue };
            for h in e.exclusive.iter().chain(e.shared.iter()) {
                if *h == txn {
                    // Holding the lock it waits for (a shared lock it upgrades) is no cycle;
                    // holding one another waiter needs is.
                    if through {
                        return true;
                    }
                    continue;
                }
                if seen.contains(h) || seen.len() >= 64 {
                    continue;
                }
                seen.push(*h);
                for (_, b) in self.blocked.range((*h, 0)..=(*h, u32::MAX)) {
                    todo.push((&b.lock, true));
                }
            }
        }
        false
    }

    pub(super) fn expire_waits(&mut self, out: &mut Out) {
        let expired: Vec<Waiter> =
            self.blocked.iter().filter(|(_, b)| b.deadline_ms <= self.now_ms).map(|(w, _)| *w).collect();
        for w in expired {
            let msg = "Lock wait timeout exceeded; try restarting transaction";
            crate::tc::NodeStats::count(&self.stats.lock_wait_timeouts);
            self.fail_wait(w, ErrorCode::LockWaitTimeout, msg, out);
        }
    }

    /// Ends a lock wait with an error for the waiting op (the rest of its batch is not run).
    /// Nothing happens if `w` is not waiting (any more).
    pub(super) fn fail_wait(&mut self, w: Waiter, code: ErrorCode, msg: &str, out: &mut Out) {
        let Some(b) = self.blocked.remove(&w) else { return };
        if let Some(e) = self.locks.get_mut(&b.lock) {
            e.waiters.retain(|(t, _)| *t != w);
            if e.is_free() {
                self.locks.remove(&b.lock);
            }
        }
        let mut batch = b.batch;
        self.fail_rest(&mut batch, b.next_op, code, msg);
        self.finish_batch(batch, out);
    }

    /// Repeats the deadlock probes of waits that last (see `LdmConfig::deadlock_probe_ms`).
    pub(super) fn probe_waits(&mut self, out: &mut Out) {
        let (now, every) = (self.now_ms, self.cfg.deadlock_probe_ms);
        let due: Vec<Waiter> = self
            .blocked
            .iter_mut()
            .filter(|(_, b)| now >= b.probed_ms + every)
            .map(|(w, b)| {
                b.probed_ms = now;
                *w
            })
            .collect();
        for w in due {
            self.probe_wait(w, out);
        }
    }

    /// Sends a deadlock probe for the blocked batch `w` to the coordinator of every other
    /// holder of the lock it waits for.
    pub(super) fn probe_wait(&self, w: Waiter, out: &mut Out) {
        let Some(b) = self.blocked.get(&w) else { return };
        let Some(e) = self.locks.get(&b.lock) else { return };
        let mut targets: Vec<TxnRef> =
            e.exclusive.iter().chain(e.shared.iter()).copied().filter(|&h| h != w.0).collect();
        targets.sort_unstable();
        targets.dedup();
        for target in targets {
            let probe =
                DeadlockProbe { initiator: w.0, target, hops: 0, victim: w.0, victim_batch: w.1, victim_at: self.addr };
            out.send(target.tc, Signal::DeadlockProbe(Box::new(probe)));
        }
    }

    /// A probe for `p.target`: if the target is blocked here, the initiator's wait reaches the
    /// holders of that lock too. Holding one itself closes the cycle; the others get the probe
    /// next.
    pub(super) fn deadlock_probe(&mut self, p: DeadlockProbe, out: &mut Out) {
        let mut next: Vec<(TxnRef, DeadlockProbe)> = Vec::new();
        for (&(txn, batch), b) in self.blocked.range((p.target, 0)..=(p.target, u32::MAX)) {
            let Some(e) = self.locks.get(&b.lock) else { continue };
            let mut q = p.clone();
            if txn.outranks(&q.victim) {
                (q.victim, q.victim_batch, q.victim_at) = (txn, batch, self.addr);
            }
            for &h in e.exclusive.iter().chain(e.shared.iter()) {
                if h == p.initiator {
                    out.send(q.victim_at, Signal::DeadlockVictim { txn: q.victim, batch: q.victim_batch });
                    return;
                }
                if h != txn {
                    next.push((h, DeadlockProbe { target: h, hops: p.hops.saturating_add(1), ..q.clone() }));
                }
            }
        }
        if p.hops >= DEADLOCK_PROBE_HOPS {
            return;
        }
        next.sort_unstable_by_key(|(h, _)| *h);
        next.dedup_by_key(|(h, _)| *h);
        for (h, q) in next {
            out.send(h.tc, Signal::DeadlockProbe(Box::new(q)));
        }
    }
}

/// How many waits a deadlock probe follows (a longer cycle ends at the lock-wait timeout).
const DEADLOCK_PROBE_HOPS: u8 = 16;

impl Ldm {
    /// Checks the lock table against the transactions and blocked batches (O(locks); the
    /// simulator calls it after every signal). Panics on the first inconsistency.
    pub fn check_invariants(&self) {
        for (key, e) in &self.locks {
            assert!(!e.is_free(), "ldm {}: a free lock entry is kept for {key:?}", self.instance());
            if let Some(x) = e.exclusive {
                assert!(e.shared.iter().all(|&s| s == x), "exclusive and shared holders differ on {key:?}");
            }
            for h in e.exclusive.iter().chain(e.shared.iter()) {
                assert!(
                    self.txns.get(h).is_some_and(|t| t.locks.contains(key)),
                    "holder {h:?} of {key:?} does not list the lock"
                );
            }
            for (w, _) in &e.waiters {
                assert!(
                    self.blocked.get(w).is_some_and(|b| &b.lock == key && b.batch.batch == w.1),
                    "waiter {w:?} on {key:?} is not blocked on it"
                );
            }
        }
        for (t, b) in &self.blocked {
            assert!(
                self.locks.get(&b.lock).is_some_and(|e| e.waiters.iter().any(|(w, _)| w == t)),
                "blocked {t:?} is not queued on {:?}",
                b.lock
            );
            assert!(b.deadline_ms >= b.since_ms, "deadline before the wait began");
        }
        assert_eq!(
            self.fast_committed,
            self.txns.values().filter(|t| t.fast).count(),
            "one-round commits counted and held disagree"
        );
        for (t, txn) in &self.txns {
            for key in &txn.locks {
                let e = self.locks.get(key).unwrap_or_else(|| panic!("{t:?} lists {key:?}, which has no entry"));
                assert!(e.exclusive == Some(*t) || e.shared.contains(t), "{t:?} lists {key:?} but does not hold it");
            }
        }
    }

    /// Data memory reserved for pending after-images (not yet charged to partitions).
    pub fn pending_reserved(&self) -> u64 {
        self.txns.values().flat_map(|t| t.changes.values()).map(|c| c.reserved).sum()
    }

    /// Data memory charged by this ldm's partitions (and by a running copy's touched keys).
    pub fn charged(&self) -> u64 {
        self.parts.values().map(|p| p.charged()).sum::<u64>() + self.fetch.as_ref().map_or(0, |f| f.touched_bytes())
    }
}
