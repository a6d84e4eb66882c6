//! The oracle: what the signals seen say was prepared and committed, and the checks against it
//! (recovered state, replicas, indexes, pushed aggregates, catalogs, linearizability).

use super::*;

#[derive(Default)]
pub(super) struct Oracle {
    /// Ops seen in Prepare signals, by transaction.
    pub(crate) ops: HashMap<TxnKey, Vec<ModelOp>>,
    /// Commit points in order: (txn key, epoch).
    pub(crate) commits: Vec<(TxnKey, u64)>,
    pub(crate) committed: BTreeSet<TxnKey>,
    /// The nodes whose ldms handled a `Commit` of a committed transaction: one whose commits all
    /// died with their nodes was never committed anywhere that survives (its coordinator died
    /// too, or finishes it later on the survivors), so it leaves the committed set until a
    /// survivor commits it.
    pub(crate) commit_nodes: HashMap<TxnKey, BTreeSet<NodeId>>,
    /// The nodes of the chains the transaction's `Commit`s went along: once all handled one, it
    /// is committed on every replica of its time (a node joining later gets it by copy).
    pub(crate) commit_chains: HashMap<TxnKey, BTreeSet<NodeId>>,
    /// Stamps (column `a` values) of committed transactions.
    pub(crate) committed_stamps: BTreeSet<i64>,
    pub(crate) stamp_of: HashMap<TxnKey, BTreeSet<i64>>,
    /// One-round commits the last replica committed (it sent `Commit` up the chain before any
    /// replica handled one): the epoch, for when its primary failed and it answers `Resolve`.
    pub(crate) fast_epoch: HashMap<TxnKey, u64>,
    /// The read ops of each prepare batch in flight, by (transaction, batch): what a replica
    /// answers for them must be committed already when it answers.
    pub(crate) read_ops: HashMap<(TxnKey, u32), Vec<u32>>,
}

impl Sim {
    /// Every acknowledged schema change is in the management nodes' catalog and in the catalog
    /// of every started node's dict, tcs and ldms.
    pub(super) fn check_catalogs(&mut self) {
        let mut missing = Vec::new();
        for name in &self.ddl_acked {
            if !self.mgm_catalog.as_ref().is_some_and(|c| c.databases.contains_key(name)) {
                missing.push(format!("{name} not in the management nodes' catalog"));
            }
            for (&id, sn) in &self.nodes {
                let Some(node) = &sn.node else { continue };
                if self.cluster.state_of(id) != NodeState::Started {
                    continue;
                }
                if !node.dict.catalog().databases.contains_key(name) {
                    missing.push(format!("{name} not in node {id}'s catalog"));
                }
            }
        }
        if !missing.is_empty() {
            self.fail(&format!("acknowledged schema changes missing: {missing:?}"));
        }
        // And every schema change is answered (one waiting behind a failed master is told).
        if let Some(c) = self.ddl_client().map(|c| &self.clients[c as usize - 1])
            && c.state == ClientState::Waiting
            && self.now > c.sent_at + 2_000
        {
            let since = c.sent_at;
            self.fail(&format!("a schema change sent at t={since} ms got no answer ({:?})", self.ddl_waiting));
        }
    }

    /// Lets every transaction in flight finish (clients stop starting new ones), then checks
    /// that the live cluster holds exactly the committed transactions: an acknowledged commit
    /// survives the failure of a node whose group keeps a live member.
    pub(super) fn quiesce_and_check_live(&mut self) {
        if self.table.is_none() {
            return;
        }
        let until = self.now + 3_000;
        while self.now < until && self.step_node_only() {}
        let mut expect = self.base.clone();
        let commits: Vec<(TxnKey, u64)> = self.oracle.commits.clone();
        for (key, _) in &commits {
            self.apply_model(&mut expect, key);
        }
        let got = self.dump();
        if got != expect {
            let missing: Vec<_> = expect.iter().filter(|(k, v)| got.get(k) != Some(v)).take(5).collect();
            let extra: Vec<_> = got.iter().filter(|(k, v)| expect.get(k) != Some(v)).take(5).collect();
            self.fail(&format!(
                "live state differs from the committed transactions: expected-but-not-found {missing:?}, found-but-not-expected {extra:?}"
            ));
        }
        self.check_catalogs();
        // After the quiet time, every started node has the management nodes' catalog (a change
        // a failed master committed there but did not write is written by the next one).
        if let Some(mgm) = self.mgm_catalog.clone() {
            for (&id, sn) in &self.nodes {
                let Some(node) = &sn.node else { continue };
                let v = node.dict.catalog().version;
                if self.cluster.state_of(id) == NodeState::Started && v != mgm.version {
                    self.fail(&format!(
                        "node {id} has catalog version {v}, the management nodes {} (not caught up)",
                        mgm.version
                    ));
                }
            }
        }
    }

    pub(super) fn apply_model(&self, expect: &mut BTreeMap<i64, Row>, key: &TxnKey) {
        for op in self.oracle.ops.get(key).cloned().unwrap_or_default() {
            match op {
                ModelOp::Put(k, r) | ModelOp::Insert(k, r) => {
                    expect.insert(k, r);
                }
                ModelOp::Delete(k) => {
                    expect.remove(&k);
                }
                ModelOp::SetA(k, a) => match expect.get_mut(&k) {
                    Some(r) => r.0 = a,
                    None => self.fail(&format!("oracle: committed update of missing key {k} by {key:?}")),
                },
            }
        }
    }

    /// Checks this cluster life's reads for linearizability (`linear`) against the version order
    /// of each key: the recovered base, then the committed transactions in commit order.
    pub(super) fn check_linearizable(&mut self) {
        let mut versions: linear::Versions = self.base.iter().map(|(&k, r)| (k, vec![Some(r.0)])).collect();
        for (key, _) in &self.oracle.commits {
            for op in self.oracle.ops.get(key).map(|v| v.as_slice()).unwrap_or_default() {
                let (k, v) = match op {
                    ModelOp::Put(k, r) | ModelOp::Insert(k, r) => (*k, Some(r.0)),
                    ModelOp::SetA(k, a) => (*k, Some(*a)),
                    ModelOp::Delete(k) => (*k, None),
                };
                versions.entry(k).or_default().push(v);
            }
        }
        match linear::check(&versions, &self.lin_acks, &self.lin_reads) {
            Ok(n) => self.stats.linearizable_reads += n as u64,
            Err(e) => self.fail(&format!("not linearizable: {e}")),
        }
        self.lin_reads.clear();
        self.lin_acks.clear();
    }

    /// Compares the recovered partitions with the oracle's state at `durable`.
    pub(super) fn check_recovered(&mut self, durable: u64) {
        let mut expect = self.base.clone();
        let commits = std::mem::take(&mut self.oracle.commits);
        for (key, epoch) in &commits {
            if *epoch <= durable {
                self.apply_model(&mut expect, key);
            }
        }
        for (stamp, epoch) in std::mem::take(&mut self.durable_acks) {
            if epoch > durable {
                self.fail(&format!(
                    "durable commit (stamp {stamp}, epoch {epoch}) lost: recovered only to epoch {durable}"
                ));
            }
        }
        let got = self.dump();
        if got != expect {
            let missing: Vec<_> = expect.iter().filter(|(k, v)| got.get(k) != Some(v)).take(5).collect();
            let extra: Vec<_> = got.iter().filter(|(k, v)| expect.get(k) != Some(v)).take(5).collect();
            self.fail(&format!(
                "recovered state differs from the transactions of epochs <= {durable}: expected-but-not-found {missing:?}, found-but-not-expected {extra:?}"
            ));
        }
        self.stats.verified_rows += got.len() as u64;
        self.base = expect;
        self.oracle = Oracle::default();
    }

    /// The rows of the test table held by the node's ldms, read through a full scan via tc once the
    /// node has started.
    pub(super) fn dump(&mut self) -> BTreeMap<i64, Row> {
        // Run the node until it has started.
        let deadline = self.now + 60_000;
        self.booting = true;
        while !self.started() {
            if self.now > deadline || !self.step_node_only() {
                self.fail("the cluster did not start after recovery");
            }
        }
        self.booting = false;
        if self.failed_in_start {
            // Let the failure settle (maps, takeover) before the verification scans.
            self.failed_in_start = false;
            let until = self.now + 300;
            while self.now < until && self.step_node_only() {}
            while !self.started() {
                if self.now > deadline || !self.step_node_only() {
                    self.fail("the cluster did not start after a failure during its start");
                }
            }
        }
        self.check_replicas_agree();
        let Some(table) = self.table.clone() else {
            return BTreeMap::new();
        };
        let rows = self.scan_table(table.id);
        let layout = self.layout.as_ref().expect("table");
        let mut out = BTreeMap::new();
        for r in &rows {
            let v = layout.decode_row(r).expect("valid row");
            let id = v[0].as_i128().expect("int") as i64;
            let a = v[1].as_i128().expect("int") as i64;
            let b = v[2].as_i128().map(|x| x as i64);
            if out.insert(id, (a, b)).is_some() {
                self.fail(&format!("scan returned key {id} twice"));
            }
        }
        self.check_unique_index(&out);
        self.check_pushed_aggregate(table.id, &out);
        out
    }

    /// A pushed aggregation (its ldms going on by themselves between the tc's requests) counts
    /// every row once: COUNT(*), SUM(a) and MAX(b) over the whole table equal the plain scan's.
    pub(super) fn check_pushed_aggregate(&mut self, table: u32, rows: &BTreeMap<i64, Row>) {
        use tern_agg::{AggExpr, AggOp, Aggregation};
        let agg = Aggregation {
            group_by: vec![],
            aggs: vec![(AggOp::Count, None), (AggOp::Sum, Some(AggExpr::Col(1))), (AggOp::Max, Some(AggExpr::Col(2)))],
        };
        self.verify_agg = Some(agg.clone());
        let partials = self.scan_table(table);
        self.verify_agg = None;
        let mut acc = agg.start();
        for p in &partials {
            let (_, part) = tern_agg::decode_partial(&agg, p).expect("a partial group");
            agg.merge(&mut acc, &part);
        }
        let got: Vec<Option<i128>> = acc.iter().map(|v| v.as_i128()).collect();
        let want = vec![
            Some(rows.len() as i128),
            (!rows.is_empty()).then(|| rows.values().map(|r| r.0 as i128).sum()),
            rows.values().filter_map(|r| r.1.map(|b| b as i128)).max(),
        ];
        if got != want {
            self.fail(&format!("pushed COUNT/SUM/MAX {got:?} disagree with the scanned rows' {want:?}"));
        }
    }

    /// Replica agreement (architecture.md §5, invariant 3): every replica of every partition holds
    /// the same rows, and each partition lives on exactly its node group's nodes.
    pub(super) fn check_replicas_agree(&mut self) {
        type Copies = Vec<(NodeId, Vec<Vec<u8>>)>;
        let mut copies: BTreeMap<(u32, u32), Copies> = BTreeMap::new();
        for (&id, sn) in &self.nodes {
            let Some(node) = sn.node.as_ref() else { continue };
            if self.cluster.state_of(id) != NodeState::Started {
                continue; // a restarting node's copy is not complete yet
            }
            for ldm in &node.ldms {
                for (key, mut rows) in ldm.committed_rows() {
                    rows.sort();
                    copies.entry(key).or_default().push((id, rows));
                }
            }
        }
        for ((table, partition), reps) in copies {
            // The full replicas, and while a move is switched its sources (still written).
            let groups = self.table_groups(table);
            let chain = self.cluster.chain(table, groups, partition);
            let switched = self
                .cluster
                .placed
                .get(&(table, partition))
                .and_then(|p| p.moving.as_ref())
                .is_some_and(|m| m.phase == tern_types::cluster::MovePhase::Switched);
            let full = if switched { chain.replicas.len() } else { chain.readable };
            let want: BTreeSet<NodeId> = chain.replicas[..full]
                .iter()
                .map(|r| r.0)
                .filter(|&n| self.cluster.state_of(n) == NodeState::Started)
                .collect();
            // A move's target still copying, or a source that has not dropped its copy yet, is
            // not compared.
            let reps: Vec<(NodeId, Vec<Vec<u8>>)> = reps.into_iter().filter(|r| want.contains(&r.0)).collect();
            if reps.is_empty() {
                continue;
            }
            let have: BTreeSet<NodeId> = reps.iter().map(|r| r.0).collect();
            if want != have {
                self.fail(&format!("table {table} partition {partition} is on nodes {have:?}, not {want:?}"));
            }
            let first = &reps[0];
            for r in &reps[1..] {
                if r.1 != first.1 {
                    let only_a: Vec<&Vec<u8>> = first.1.iter().filter(|x| !r.1.contains(x)).take(3).collect();
                    let only_b: Vec<&Vec<u8>> = r.1.iter().filter(|x| !first.1.contains(x)).take(3).collect();
                    self.fail(&format!(
                        "replicas disagree: table {table} partition {partition} has {} rows on node {} and {} on node {} (only on the first {only_a:?}, only on the second {only_b:?})",
                        first.1.len(),
                        first.0,
                        r.1.len(),
                        r.0
                    ));
                }
            }
        }
    }

    /// `Table::groups` of a table of the simulation (the test table or its index table).
    pub(super) fn table_groups(&self, id: u32) -> u32 {
        [&self.table, &self.index_table, &self.pending_table]
            .into_iter()
            .flatten()
            .find(|t| t.id == id)
            .map_or_else(|| self.mgm_catalog.as_ref().and_then(|c| c.table(id)).map_or(0, |t| t.groups), |t| t.groups)
    }

    /// The unique index on `b` is exactly the non-NULL (b, id) pairs of the base rows.
    pub(super) fn check_unique_index(&mut self, base: &BTreeMap<i64, Row>) {
        let Some(it) = self.index_table.clone() else { return };
        let layout = RowLayout::new(&it);
        let mut got = BTreeSet::new();
        for r in self.scan_table(it.id) {
            let v = layout.decode_row(&r).expect("valid index row");
            got.insert((v[0].as_i128().expect("int") as i64, v[1].as_i128().expect("int") as i64));
        }
        let want: BTreeSet<(i64, i64)> = base.iter().filter_map(|(id, (_, b))| b.map(|b| (b, *id))).collect();
        if got != want {
            let missing: Vec<_> = want.difference(&got).take(5).collect();
            let extra: Vec<_> = got.difference(&want).take(5).collect();
            self.fail(&format!(
                "unique index table disagrees with its base table: missing {missing:?}, extra {extra:?}"
            ));
        }
    }

    /// All rows of a table, read through a full scan via tc.
    pub(super) fn scan_table(&mut self, table: u32) -> Vec<Vec<u8>> {
        self.verifying = true;
        self.scan_rows.clear();
        self.verify_table = table;
        self.send_verify_scan(table);
        let deadline = self.now + 60_000;
        while self.verifying {
            if self.now > deadline || !self.step_node_only() {
                self.fail("verification scan did not finish");
            }
        }
        std::mem::take(&mut self.scan_rows)
    }

    pub(super) fn send_verify_scan(&mut self, table: u32) {
        let req = Request::Scan(ScanReq {
            scan: 1,
            table,
            index: None,
            lo: None,
            hi: None,
            ranges: Vec::new(),
            filter: tern_types::filter::Filter::True,
            projection: None,
            limit: 0,
            ordered: false,
            descending: false,
            // An aggregating step folds 16 batches' rows: 16 rows a step, so partitions take
            // several steps.
            batch_rows: if self.verify_agg.is_some() { 1 } else { 7 },
            partition: None,
            expired: false,
            aggregate: self.verify_agg.clone(),
            offset: 0,
        });
        let inc = self.incarnation;
        self.push(
            self.now + 1,
            Event::Deliver {
                from: None,
                to: self.verify_tc(),
                sig: Signal::ClientRequest { client: 999, req_id: 1, req },
                incarnation: inc,
            },
        );
    }

    pub(super) fn verify_reply(&mut self, reply: Reply) {
        match reply {
            Reply::ScanRows { rows, done, .. } => {
                self.scan_rows.extend(rows);
                if done {
                    self.verifying = false;
                } else {
                    let inc = self.incarnation;
                    self.push(
                        self.now,
                        Event::Deliver {
                            from: None,
                            to: self.verify_tc(),
                            sig: Signal::ClientRequest { client: 999, req_id: 2, req: Request::ScanNext { scan: 1 } },
                            incarnation: inc,
                        },
                    );
                }
            }
            // A temporary failure (a map the tc had not seen yet, a move's switch) restarts the
            // scan from nothing, as a client does (a pushed aggregation drops its partials);
            // `scan_table`'s deadline bounds the retries.
            Reply::Error(e) if e.is_temporary() => {
                self.scan_rows.clear();
                self.send_verify_scan(self.verify_table);
            }
            other => self.fail(&format!("verification scan failed: {other:?}")),
        }
    }

    /// Builds the oracle from what the blocks say to each other.
    pub(super) fn observe(&mut self, to: Addr, sig: &Signal) {
        match sig {
            Signal::NodeStarted { .. } if self.started_nodes.insert(to.node) => {
                self.log(|| format!("node {} started", to.node));
            }
            Signal::Prepare(b) if b.pos == 0 => {
                let Some(layout) = &self.layout else { return };
                let key = self.txn_key(&b.txn);
                let reads: Vec<u32> = b
                    .ops
                    .iter()
                    .filter_map(|o| match o {
                        tern_kernel::signal::PrepOp::Exec { idx, op, .. } if op.kind == OpKind::Read => Some(*idx),
                        _ => None,
                    })
                    .collect();
                if !reads.is_empty() {
                    self.oracle.read_ops.insert((key, b.batch), reads);
                }
                for op in &b.ops {
                    let tern_kernel::signal::PrepOp::Exec { op, .. } = op else {
                        continue;
                    };
                    let id = match layout.decode_key(&op.key) {
                        Ok(v) => v[0].as_i128().expect("int") as i64,
                        Err(_) => continue,
                    };
                    let row = || {
                        let v = layout.decode_row(&op.row).expect("valid row");
                        (v[1].as_i128().expect("int") as i64, v[2].as_i128().map(|x| x as i64))
                    };
                    let m = match op.kind {
                        OpKind::Write => ModelOp::Put(id, row()),
                        OpKind::Insert => ModelOp::Insert(id, row()),
                        OpKind::Delete => ModelOp::Delete(id),
                        OpKind::Update => match &op.updates[0].expr {
                            UpdateExpr::Set(Value::Int(a)) => ModelOp::SetA(id, *a),
                            _ => continue,
                        },
                        _ => continue,
                    };
                    let stamp = match &m {
                        ModelOp::Put(_, r) | ModelOp::Insert(_, r) => Some(r.0),
                        ModelOp::SetA(_, a) => Some(*a),
                        ModelOp::Delete(_) => None,
                    };
                    if let Some(s) = stamp {
                        self.oracle.stamp_of.entry(key).or_default().insert(s);
                    }
                    if self.log_key == Some(id) {
                        self.log(|| format!("prepare {key:?} -> {to:?} at pos 0: {m:?}"));
                    }
                    self.oracle.ops.entry(key).or_default().push(m);
                }
            }
            _ => {}
        }
    }

    /// A node failed: transactions that committed only on nodes that are gone now are not
    /// committed (yet).
    pub(super) fn forget_commits_only_on(&mut self, victim: NodeId) {
        let running = |n: &NodeId| *n != victim && self.nodes[n].node.is_some();
        let lost: Vec<TxnKey> = self
            .oracle
            .committed
            .iter()
            .filter(|k| {
                let handled = self.oracle.commit_nodes.get(k);
                let settled = self.oracle.commit_chains.get(k).is_some_and(|c| handled.is_some_and(|h| c.is_subset(h)));
                !settled && !handled.is_some_and(|ns| ns.iter().any(running))
            })
            .copied()
            .collect();
        // The victim leaves every chain: a transaction the others have all committed is settled.
        for chain in self.oracle.commit_chains.values_mut() {
            chain.remove(&victim);
        }
        for key in lost {
            self.log(|| {
                format!(
                    "commit of {key:?} died with node {victim} (committed on {:?}, ops {:?})",
                    self.oracle.commit_nodes.get(&key),
                    self.oracle.ops.get(&key)
                )
            });
            self.oracle.committed.remove(&key);
            self.oracle.commit_nodes.remove(&key);
            self.oracle.commit_chains.remove(&key);
            self.oracle.commits.retain(|(k, _)| *k != key);
            if let Some(st) = self.oracle.stamp_of.get(&key) {
                for s in st {
                    self.oracle.committed_stamps.remove(s);
                }
            }
        }
    }

    pub(super) fn txn_key(&self, txn: &TxnRef) -> TxnKey {
        let tc = match txn.tc.block {
            Block::Tc(i) => i,
            _ => 0,
        };
        (self.incarnation, txn.tc.node, tc, txn.id)
    }

    /// What a replica's own signals say: a `Commit` sent up the chain means the sender has
    /// committed (a one-round commit's last replica handles no `Commit` of its own; it is not
    /// committed for the oracle until its primary is, as reads there wait for that), and a
    /// survivor's `Committed` answer to `Resolve` settles such a commit after the primary failed.
    pub(super) fn observe_ldm_send(&mut self, from: Addr, sig: &Signal) {
        match sig {
            Signal::Commit { txn, epoch, .. } => {
                let key = self.txn_key(txn);
                self.oracle.commit_nodes.entry(key).or_default().insert(from.node);
                if !self.oracle.committed.contains(&key) {
                    self.oracle.fast_epoch.insert(key, *epoch);
                    self.stats.fast_commits += 1;
                }
            }
            Signal::Prepared(b) => {
                let key = self.txn_key(&b.txn);
                let Some(reads) = self.oracle.read_ops.remove(&(key, b.batch)) else { return };
                let Some(layout) = self.layout.clone() else { return };
                for (i, r) in &b.results {
                    let OpResult::Row(bytes) = r else { continue };
                    if !reads.contains(i) {
                        continue;
                    }
                    let Ok(v) = layout.decode_row(bytes) else { continue };
                    let a = v[1].as_i128().expect("int") as i64;
                    let own = self.oracle.stamp_of.get(&key).is_some_and(|s| s.contains(&a));
                    if !own && !self.oracle.committed_stamps.contains(&a) && !self.base.values().any(|r| r.0 == a) {
                        self.fail(&format!("{from:?} read value {a} of a transaction not committed yet"));
                    }
                }
            }
            Signal::Committed { txn, chain, .. } if chain.len() == 1 => {
                let key = self.txn_key(txn);
                if !self.oracle.committed.contains(&key)
                    && let Some(&epoch) = self.oracle.fast_epoch.get(&key)
                {
                    self.oracle.commit_chains.entry(key).or_default().insert(from.node);
                    self.log(|| format!("commit point of {key:?} (epoch {epoch}): resolved at {from:?}"));
                    self.mark_committed(key, epoch);
                }
            }
            _ => {}
        }
    }

    /// A transaction is committed once any replica handled a `Commit` for it: from then on it
    /// only rolls forward (a takeover commits it on the replicas that had not).
    pub(super) fn observe_delivery(&mut self, node: NodeId, sig: &Signal) {
        let Signal::Commit { txn, epoch, chain, .. } = sig else { return };
        let key = self.txn_key(txn);
        if let Some(k) = self.log_key
            && self.oracle.ops.get(&key).is_some_and(|ops| ops.iter().any(|o| o.key() == k))
        {
            self.log(|| format!("Commit of {key:?} (epoch {epoch}) handled by node {node}, chain {chain:?}"));
        }
        self.oracle.commit_nodes.entry(key).or_default().insert(node);
        // Members that have failed since the chain was formed will never commit it.
        let alive: Vec<NodeId> =
            chain.iter().map(|a| a.node).filter(|n| self.nodes.get(n).is_some_and(|sn| sn.node.is_some())).collect();
        self.oracle.commit_chains.entry(key).or_default().extend(alive);
        if !self.oracle.committed.contains(&key)
            && let Some(k) = self.log_key
            && self.oracle.ops.get(&key).is_some_and(|ops| ops.iter().any(|o| o.key() == k))
        {
            self.log(|| format!("commit point of {key:?} (epoch {epoch}) at {txn:?}"));
        }
        self.mark_committed(key, *epoch);
    }

    /// The commit point of `key` (in `epoch`), once: from then on it only rolls forward.
    pub(super) fn mark_committed(&mut self, key: TxnKey, epoch: u64) {
        if self.oracle.committed.insert(key) {
            self.oracle.commits.push((key, epoch));
            if let Some(st) = self.oracle.stamp_of.get(&key) {
                self.oracle.committed_stamps.extend(st.iter().copied());
            }
        }
    }
}
