//! Unit tests of the ldm block driven signal by signal.

use super::*;
use crate::signal::{Block, PrepareBatch};
use tern_types::schema::{Column, ColumnType, Table};

fn table() -> Table {
    Table {
        id: 1,
        database: "d".into(),
        name: "t".into(),
        columns: vec![
            Column::new("id", ColumnType::BigInt { unsigned: false }).not_null(),
            Column::new("v", ColumnType::BigInt { unsigned: false }),
        ],
        primary_key: vec![0],
        partition_key: vec![0],
        indexes: vec![],
        partition_count: 1,
        groups: 0,
        ttl: None,
        comment: String::new(),
    }
}

fn ldm() -> (Ldm, Arc<RowLayout>) {
    let mut catalog = Catalog::new();
    let t = table();
    catalog.tables.insert(t.id, t.clone());
    let start =
        LdmStart { partitions: vec![], base_lsn: 0, durable_epoch: 0, next_checkpoint_id: 1, old_checkpoints: vec![] };
    let addr = Addr::new(1, Block::Ldm(0));
    let cluster = crate::NodeConfig::new(1, 1, 1 << 30).cluster;
    let l =
        Ldm::new(addr, cluster, LdmConfig::default(), MemoryBudget::new(1 << 30), Default::default(), &catalog, start);
    (l, Arc::new(RowLayout::new(&t)))
}

/// Transaction ids carry the coordinator's incarnation (1 in a started test cluster) on top.
fn tref(id: u64) -> TxnRef {
    TxnRef { tc: Addr::new(1, Block::Tc(0)), id: (1 << 40) | id }
}

fn write(layout: &RowLayout, id: i64) -> PrepOp {
    let mut row = Vec::new();
    layout.encode_row(&[Value::Int(id), Value::Int(id * 10)], &mut row).expect("row");
    let key = layout.key_of(&row).to_vec();
    PrepOp::Exec {
        idx: 0,
        partition: 0,
        op: KeyOp { table: 1, kind: OpKind::Write, key, row, updates: vec![], projection: None },
    }
}

fn prepare(ldm: &mut Ldm, now: u64, txn: u64, ops: Vec<PrepOp>) -> Out {
    let ops = ops
        .into_iter()
        .enumerate()
        .map(|(i, op)| match op {
            PrepOp::Exec { partition, op, .. } => PrepOp::Exec { idx: i as u32, partition, op },
            other => other,
        })
        .collect();
    let batch = PrepareBatch {
        txn: tref(txn),
        batch: 0,
        chain: vec![ldm.addr],
        pos: 0,
        ops,
        results: vec![],
        holds_state: false,
        triggers: vec![],
        nowait: false,
        commit_epoch: None,
        map_version: 0,
    };
    let mut out = Out::default();
    ldm.handle(now, Signal::Prepare(Box::new(batch)), &mut out);
    out
}

fn prepared_of(out: &Out, txn: u64) -> Option<&PrepareBatch> {
    out.signals.iter().find_map(|(_, s)| match s {
        Signal::Prepared(b) if b.txn == tref(txn) => Some(&**b),
        _ => None,
    })
}

fn commit(ldm: &mut Ldm, now: u64, txn: u64) -> Out {
    let mut out = Out::default();
    ldm.handle(
        now,
        Signal::Commit { txn: tref(txn), epoch: 1, chain: vec![ldm.addr], pos: 0, results: vec![] },
        &mut out,
    );
    out
}

#[test]
fn a_waiter_resumed_by_a_commit_that_waits_again_gets_a_fresh_deadline() {
    let (mut l, layout) = ldm();
    assert!(prepared_of(&prepare(&mut l, 0, 1, vec![write(&layout, 1)]), 1).is_some());
    assert!(prepared_of(&prepare(&mut l, 0, 3, vec![write(&layout, 2)]), 3).is_some());
    // Txn 2 waits for key 1 (held by 1), then will wait for key 2 (held by 3).
    let out = prepare(&mut l, 5_000, 2, vec![write(&layout, 1), write(&layout, 2)]);
    assert!(prepared_of(&out, 2).is_none(), "waits for txn 1");
    l.check_invariants();
    // Txn 1 commits late: txn 2 resumes, takes key 1 and queues on key 2.
    let out = commit(&mut l, 6_000, 1);
    assert!(prepared_of(&out, 2).is_none(), "now waits for txn 3");
    l.check_invariants();
    // A tick before the new deadline (6,000 + 1,200) must not time it out.
    let mut out = Out::default();
    l.handle(6_100, Signal::Tick, &mut out);
    assert!(prepared_of(&out, 2).is_none(), "timed out although it waited only 100 ms: {:?}", out.signals);
    // Txn 3 commits: txn 2 gets both rows.
    let out = commit(&mut l, 6_300, 3);
    let b = prepared_of(&out, 2).expect("txn 2 prepared");
    assert!(b.results.iter().all(|(_, r)| matches!(r, OpResult::Done)), "{:?}", b.results);
    l.check_invariants();
    // And it does time out once it really waited longer than the timeout.
    assert!(prepared_of(&prepare(&mut l, 6_400, 4, vec![write(&layout, 2)]), 4).is_none());
    let mut out = Out::default();
    l.handle(6_400 + 1_300, Signal::Tick, &mut out);
    let b = prepared_of(&out, 4).expect("timed out");
    assert!(matches!(&b.results[0].1, OpResult::Error(e) if e.code == ErrorCode::LockWaitTimeout));
    l.check_invariants();
}

/// An aggregating scan goes on by itself for the steps it was given: every step's partial
/// groups go to the tc as `more` while the next step is queued as a `later` signal to itself,
/// then it stops and waits for the tc's next request; the partials add up to every row.
#[test]
fn an_aggregating_scan_goes_on_by_itself_for_its_steps() {
    use tern_agg::{AggExpr, AggOp, Aggregation};
    let (mut l, layout) = ldm();
    let rows = 1_000i64;
    assert!(prepared_of(&prepare(&mut l, 0, 1, (1..=rows).map(|i| write(&layout, i)).collect()), 1).is_some());
    let _ = commit(&mut l, 0, 1);
    let tc = Addr::new(1, Block::Tc(0));
    let agg = Arc::new(Aggregation {
        group_by: vec![],
        aggs: vec![(AggOp::Count, None), (AggOp::Max, Some(AggExpr::Col(1)))],
    });
    let frag = |resume: ScanPos| ScanFrag {
        scan: 9,
        reply_to: tc,
        table: 1,
        partition: 0,
        index: None,
        ranges: Arc::new(vec![]),
        filter: Arc::new(tern_types::filter::Filter::True),
        projection: None,
        descending: false,
        // 16 rows per step.
        max_rows: 1,
        resume,
        with_keys: false,
        expired: false,
        aggregate: Some(agg.clone()),
        steps: 3,
        offset: 0,
    };
    let mut acc: Option<Vec<Value>> = None;
    let (mut requests, mut partials) = (0, 0);
    let mut pending = vec![Signal::ScanFrag(Box::new(frag(ScanPos::Start)))];
    while let Some(sig) = pending.pop() {
        let mut out = Out::default();
        l.handle(0, sig, &mut out);
        assert!(out.later.len() <= 1, "{:?}", out.later);
        let reply = out.signals.iter().find_map(|(to, s)| match s {
            Signal::ScanFragRows(r) if *to == tc => Some(r.clone()),
            _ => None,
        });
        let r = reply.expect("every step answers the tc");
        assert!(r.error.is_none(), "{:?}", r.error);
        for row in &r.rows {
            let (_, part) = tern_agg::decode_partial(&agg, row).expect("partial");
            match &mut acc {
                None => acc = Some(part),
                Some(a) => agg.merge(a, &part),
            }
            partials += 1;
        }
        match (r.more, out.later.pop()) {
            (true, Some((to, Signal::ScanFrag(f)))) => {
                assert_eq!(to, l.addr);
                assert_eq!(f.resume, r.next);
                pending.push(Signal::ScanFrag(f));
            }
            (false, None) if r.next == ScanPos::Done => {}
            (false, None) => {
                // The steps are used up: the tc asks again from where the scan stopped.
                requests += 1;
                assert!(requests < 1_000, "the scan does not end");
                pending.push(Signal::ScanFrag(Box::new(frag(r.next.clone()))));
            }
            other => panic!("a step that goes on must say so and queue the next step: {other:?}"),
        }
    }
    let acc = acc.expect("some partial");
    assert_eq!(acc[0], Value::Int(rows), "every row counted once");
    assert_eq!(acc[1], Value::Int(rows * 10));
    // 1,000 rows at 16 a step in runs of 4 steps per request.
    assert_eq!(partials, (rows as usize).div_ceil(16));
    assert_eq!(requests, ((rows as usize).div_ceil(16) - 1) / 4);
}

fn log_req(
    l: &mut Ldm,
    now: u64,
    op: tern_wire::LogOp,
    max_bytes: u32,
) -> (Vec<tern_wire::LogEntry>, Option<TernError>) {
    log_req_on(l, now, 7, op, max_bytes, vec![])
}

/// A request of change log `sub`, limited to `tables` at its start.
fn log_req_on(
    l: &mut Ldm,
    now: u64,
    sub: u64,
    op: tern_wire::LogOp,
    max_bytes: u32,
    tables: Vec<TableId>,
) -> (Vec<tern_wire::LogEntry>, Option<TernError>) {
    let tc = Addr::new(1, Block::Tc(0));
    let mut out = Out::default();
    l.handle(now, Signal::LogReq { from: tc, sub, call: 1, op, max_bytes, tables }, &mut out);
    match out.signals.pop() {
        Some((to, Signal::LogChunk { entries, error, .. })) if to == tc => (entries, error),
        other => panic!("no answer to the tc: {other:?}"),
    }
}

/// A change log (backups) holds what the primary commits after it started, with epochs, and
/// an epoch mark at each flush after that epoch's commits; polls hand it out in order within
/// their budget; it fails when the cluster map changes and is dropped when nobody polls it.
#[test]
fn a_change_log_keeps_commits_and_epoch_marks_in_order() {
    use tern_wire::{LogEntry, LogOp};
    let (mut l, layout) = ldm();
    // Committed before the log started: not in it.
    assert!(prepared_of(&prepare(&mut l, 0, 1, vec![write(&layout, 1)]), 1).is_some());
    let _ = commit(&mut l, 0, 1);
    assert_eq!(log_req(&mut l, 0, LogOp::Start, 0), (vec![], None));
    // A log of other tables (pub/sub's) sees none of these commits, only the epoch marks; one
    // of this table sees them.
    assert_eq!(log_req_on(&mut l, 0, 8, LogOp::Start, 0, vec![99]), (vec![], None));
    assert_eq!(log_req_on(&mut l, 0, 9, LogOp::Start, 0, vec![1, 99]), (vec![], None));
    assert!(prepared_of(&prepare(&mut l, 10, 2, vec![write(&layout, 2), write(&layout, 3)]), 2).is_some());
    let _ = commit(&mut l, 10, 2);
    let mut out = Out::default();
    l.handle(20, Signal::EpochFlush { from: Addr::new(1, Block::Dist), epoch: 1, mark: true }, &mut out);
    // A delete, in the next epoch.
    let key = |id: i64| {
        let mut row = Vec::new();
        layout.encode_row(&[Value::Int(id), Value::Int(0)], &mut row).expect("row");
        layout.key_of(&row).to_vec()
    };
    let del = PrepOp::Exec {
        idx: 0,
        partition: 0,
        op: KeyOp { table: 1, kind: OpKind::Delete, key: key(2), row: vec![], updates: vec![], projection: None },
    };
    assert!(prepared_of(&prepare(&mut l, 30, 3, vec![del]), 3).is_some());
    let mut out = Out::default();
    l.handle(30, Signal::Commit { txn: tref(3), epoch: 2, chain: vec![l.addr], pos: 0, results: vec![] }, &mut out);

    // A small budget still returns one entry at a time, in commit order.
    let (first, e) = log_req(&mut l, 40, LogOp::Poll, 1);
    assert!(e.is_none());
    assert!(
        matches!(&first[..], [LogEntry::Put { epoch: 1, log_gen: 0, table: 1, row }] if layout.key_of(row) == key(2)),
        "{first:?}"
    );
    let (rest, _) = log_req(&mut l, 40, LogOp::Poll, 1 << 20);
    assert!(matches!(&rest[0], LogEntry::Put { epoch: 1, row, .. } if layout.key_of(row) == key(3)), "{rest:?}");
    assert_eq!(rest[1], LogEntry::Epoch(1));
    assert_eq!(rest[2], LogEntry::Delete { epoch: 2, log_gen: 0, table: 1, key: key(2), expired: false });
    assert_eq!(rest.len(), 3);
    assert_eq!(log_req(&mut l, 50, LogOp::Poll, 1 << 20), (vec![], None));
    assert_eq!(log_req_on(&mut l, 50, 8, LogOp::Poll, 1 << 20, vec![]), (vec![LogEntry::Epoch(1)], None));
    assert_eq!(log_req_on(&mut l, 50, 9, LogOp::Poll, 1 << 20, vec![]).0, [first, rest].concat());
    for sub in [8, 9] {
        assert_eq!(log_req_on(&mut l, 50, sub, LogOp::Stop, 0, vec![]), (vec![], None));
    }

    // A map that changes only its version (a schema change) leaves the log alone; one where a
    // node's state changed fails it; the next poll says why, then it is gone.
    let mut map = (*l.cluster).clone();
    map.version += 1;
    let mut out = Out::default();
    l.handle(55, Signal::ClusterMap { state: Arc::new(map.clone()) }, &mut out);
    assert_eq!(log_req(&mut l, 56, LogOp::Poll, 1 << 20), (vec![], None));
    map.version += 1;
    map.nodes.values_mut().for_each(|n| n.incarnation += 1);
    let mut out = Out::default();
    l.handle(60, Signal::ClusterMap { state: Arc::new(map) }, &mut out);
    let (_, e) = log_req(&mut l, 70, LogOp::Poll, 1 << 20);
    assert_eq!(e.map(|e| e.code), Some(ErrorCode::NodeFailure));
    let (_, e) = log_req(&mut l, 70, LogOp::Poll, 1 << 20);
    assert_eq!(e.map(|e| e.code), Some(ErrorCode::InvalidRequest));

    // A log nobody polls for a minute is dropped.
    assert_eq!(log_req(&mut l, 100, LogOp::Start, 0), (vec![], None));
    let mut out = Out::default();
    l.handle(100 + 61_000, Signal::Tick, &mut out);
    let (_, e) = log_req(&mut l, 100 + 61_000, LogOp::Poll, 1 << 20);
    assert_eq!(e.map(|e| e.code), Some(ErrorCode::InvalidRequest));
}

fn fast_batch(txn: u64, chain: Vec<Addr>, pos: u8, ops: Vec<PrepOp>, epoch: u64) -> Signal {
    let results = if pos == 0 { vec![] } else { vec![(0, OpResult::Done)] };
    Signal::Prepare(Box::new(PrepareBatch {
        txn: tref(txn),
        batch: 0,
        chain,
        pos,
        ops,
        results,
        holds_state: pos > 0,
        triggers: vec![],
        nowait: false,
        commit_epoch: Some(epoch),
        map_version: 0,
    }))
}

fn forwarded(out: &Out, txn: u64) -> Option<&PrepareBatch> {
    out.signals.iter().find_map(|(_, s)| match s {
        Signal::Prepare(b) if b.txn == tref(txn) => Some(&**b),
        _ => None,
    })
}

/// The last replica of a one-round commit commits when it staged the after-images and sends
/// `Commit` (with the results) up the chain; reads there wait for the row until `Complete` says
/// the primary committed too, and a `Resolve` after the primary failed answers `Committed`.
#[test]
fn a_one_round_commit_commits_at_the_last_replica_and_reads_there_wait_for_complete() {
    let (mut l, layout) = ldm();
    let primary = Addr::new(2, Block::Ldm(0));
    let chain = vec![primary, l.addr];
    let PrepOp::Exec { op, .. } = write(&layout, 1) else { unreachable!() };
    let replica = PrepOp::Replica { table: 1, partition: 0, key: op.key.clone(), row: Some(op.row.clone()) };
    let mut out = Out::default();
    l.handle(10, fast_batch(1, chain.clone(), 1, vec![replica], 5), &mut out);
    assert!(prepared_of(&out, 1).is_none(), "no Prepared in one round: {:?}", out.signals);
    let commit = out.signals.iter().find(|(to, s)| *to == primary && matches!(s, Signal::Commit { .. }));
    let Some((_, Signal::Commit { epoch: 5, pos: 0, results, .. })) = commit else {
        panic!("Commit to the primary expected: {:?}", out.signals)
    };
    assert!(matches!(results[..], [(0, OpResult::Done)]), "{results:?}");
    l.check_invariants();
    // A committed read of the row waits (the primary may not have committed yet).
    let read = PrepOp::Exec { idx: 0, partition: 0, op: KeyOp::read(1, op.key.clone()) };
    let out = prepare(&mut l, 20, 2, vec![read.clone()]);
    assert!(prepared_of(&out, 2).is_none(), "the read must wait: {:?}", out.signals);
    // The primary failed: this replica committed, so it says so, with the results.
    let mut out = Out::default();
    l.handle(30, Signal::Resolve { txn: tref(1), map_version: 0 }, &mut out);
    let answer = out.signals.iter().find_map(|(_, s)| match s {
        Signal::Committed { chain, results, .. } => Some((chain.clone(), results.clone())),
        _ => None,
    });
    assert_eq!(answer.map(|(c, r)| (c, r.len())), Some((vec![l.addr], 1)));
    // Complete releases the row: the read resumes and sees the committed row.
    let mut out = Out::default();
    l.handle(40, Signal::Complete { txn: tref(1), chain: vec![l.addr], pos: 0 }, &mut out);
    let b = prepared_of(&out, 2).expect("the read resumed");
    assert!(matches!(&b.results[..], [(0, OpResult::Row(r))] if *r == op.row), "{:?}", b.results);
    assert!(!l.txns.contains_key(&tref(2)), "the read keeps no lock");
    assert!(l.locks.is_empty() && l.txns.is_empty(), "nothing left: {:?}", l.txns.keys().collect::<Vec<_>>());
    l.check_invariants();
    // A read now runs at once.
    assert!(prepared_of(&prepare(&mut l, 50, 3, vec![read]), 3).is_some());
}

/// The primary keeps a one-round commit only when it can: a lock wait drops it (and tells the
/// coordinator with `FastOff`), and so do a failed op and a commit in a newer epoch before it.
#[test]
fn a_primary_drops_the_one_round_commit_when_it_must() {
    let (mut l, layout) = ldm();
    let chain = vec![l.addr, Addr::new(2, Block::Ldm(0))];
    // Kept: the after-image goes on with the epoch.
    let mut out = Out::default();
    l.handle(10, fast_batch(1, chain.clone(), 0, vec![write(&layout, 1)], 5), &mut out);
    assert_eq!(forwarded(&out, 1).map(|b| b.commit_epoch), Some(Some(5)));
    // A lock wait: FastOff now, and the batch goes on without it once the lock is free.
    let mut out = Out::default();
    l.handle(11, fast_batch(2, chain.clone(), 0, vec![write(&layout, 1)], 5), &mut out);
    assert!(forwarded(&out, 2).is_none());
    assert!(out.signals.iter().any(|(to, s)| *to == tref(2).tc && matches!(s, Signal::FastOff { .. })));
    let mut out = Out::default();
    l.handle(12, Signal::Commit { txn: tref(1), epoch: 7, chain: chain.clone(), pos: 0, results: vec![] }, &mut out);
    assert_eq!(forwarded(&out, 2).map(|b| b.commit_epoch), Some(None));
    l.handle(13, Signal::Complete { txn: tref(1), chain: chain.clone(), pos: 0 }, &mut Out::default());
    l.handle(13, Signal::Abort { txn: tref(2), chain: chain.clone(), pos: 0, map_version: 0 }, &mut Out::default());
    // A commit in epoch 7 ran here: a one-round commit of epoch 6 could be ordered before it.
    let mut out = Out::default();
    l.handle(14, fast_batch(3, chain.clone(), 0, vec![write(&layout, 2)], 6), &mut out);
    assert_eq!(forwarded(&out, 3).map(|b| b.commit_epoch), Some(None));
    // A failed op (an update of a missing row) keeps the ordinary rounds.
    let update = PrepOp::Exec {
        idx: 1,
        partition: 0,
        op: KeyOp { kind: OpKind::Update, updates: vec![], ..KeyOp::read(1, layout_key(&layout, 99)) },
    };
    let mut out = Out::default();
    l.handle(15, fast_batch(4, chain, 0, vec![write(&layout, 3), update], 8), &mut out);
    assert_eq!(forwarded(&out, 4).map(|b| b.commit_epoch), Some(None));
    l.check_invariants();
}

fn layout_key(layout: &RowLayout, id: i64) -> Vec<u8> {
    let PrepOp::Exec { op, .. } = write(layout, id) else { unreachable!() };
    op.key
}

/// The lock report behind `ndbinfo.cluster_locks`: holders and waiters with their ages, oldest
/// first, and the published fragment rows; a committed transaction's locks are gone from the
/// next report.
#[test]
fn the_lock_report_lists_holders_and_waiters_oldest_first_and_forgets_committed_ones() {
    let (mut l, layout) = ldm();
    assert!(prepared_of(&prepare(&mut l, 1_000, 1, vec![write(&layout, 1)]), 1).is_some());
    assert!(prepared_of(&prepare(&mut l, 1_500, 3, vec![write(&layout, 2)]), 3).is_some());
    assert!(prepared_of(&prepare(&mut l, 1_800, 2, vec![write(&layout, 1)]), 2).is_none(), "waits");
    let mut out = Out::default();
    l.handle(2_000, Signal::Tick, &mut out);
    let locks = l.stats.locks.lock().unwrap().get(&l.instance()).cloned().expect("published");
    let seen: Vec<(u64, bool, bool, u64)> =
        locks.iter().map(|s| (s.txn & 0xff, s.exclusive, s.waiting, s.duration_ms)).collect();
    assert_eq!(seen, vec![(1, true, false, 1_000), (3, true, false, 500), (2, true, true, 200)]);
    let k1 = layout
        .key_of(&{
            let mut row = Vec::new();
            layout.encode_row(&[Value::Int(1), Value::Int(10)], &mut row).unwrap();
            row
        })
        .to_vec();
    assert!(locks.iter().all(|s| s.table == 1 && s.partition == 0 && s.tc_node == 1));
    assert_eq!(locks[0].key, k1);
    assert_eq!(locks[2].key, k1, "the waiter waits on the holder's key");
    // Txn 1 commits: txn 2 takes its lock; txn 3 commits too.
    commit(&mut l, 2_100, 1);
    commit(&mut l, 2_100, 3);
    let now: Vec<(u64, bool)> = l.lock_report().iter().map(|s| (s.txn & 0xff, s.waiting)).collect();
    assert_eq!(now, vec![(2, false)], "only txn 2 holds a lock now");
    // The fragment report (published at most once a second) counts the committed rows.
    let mut out = Out::default();
    l.handle(3_100, Signal::Tick, &mut out);
    let frags = l.stats.fragments.lock().unwrap().get(&l.instance()).cloned().expect("published");
    assert_eq!(frags.len(), 1);
    assert_eq!((frags[0].table, frags[0].partition, frags[0].rows), (1, 0, 2));
    assert!(frags[0].bytes > 0);
}

/// However many locks are held, a report keeps the oldest `LOCKS_REPORTED`.
#[test]
fn the_lock_report_is_bounded_and_keeps_the_oldest() {
    let (mut l, layout) = ldm();
    let n = tern_wire::LOCKS_REPORTED as i64 + 50;
    for i in 0..n {
        let t = 10 + i as u64;
        assert!(prepared_of(&prepare(&mut l, 1_000 + i as u64, t, vec![write(&layout, i)]), t).is_some());
    }
    l.now_ms = 1_000 + n as u64;
    let r = l.lock_report();
    assert_eq!(r.len(), tern_wire::LOCKS_REPORTED);
    let txns: Vec<u64> = r.iter().map(|s| s.txn & 0xffff).collect();
    let want: Vec<u64> = (10..10 + tern_wire::LOCKS_REPORTED as u64).collect();
    assert_eq!(txns, want, "the oldest, in order");
}
