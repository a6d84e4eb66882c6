//! Integration tests: a real data node (threads, sockets, files) on 127.0.0.1 and the client.

use std::time::{Duration, Instant};
use tern_client::{
    AbortOption, Client, ColumnType, ColumnUpdate, DdlReq, ErrorCode, Exec, Index, OpResult, ScanSpec, Table,
    TableHandle, UpdateExpr, Value, block_on,
};
use tern_kernel::NodeConfig;
use tern_runtime::{DataNode, DataNodeConfig};
use tern_types::filter::{CmpOp, Filter};
use tern_types::schema::Column;

fn config(dir: &std::path::Path, data_memory: u64) -> DataNodeConfig {
    let mut node = NodeConfig::new(1, 2, data_memory);
    node.dist.epoch_interval_ms = 20;
    DataNodeConfig {
        node,
        data_dir: dir.to_path_buf(),
        listen: "127.0.0.1:0".parse().unwrap(),
        spin_max_us: 20,
        expect_spin_us: tern_runtime::EXPECT_SPIN_US_DEFAULT,
        redo_segment_bytes: 1 << 20,
        idle_hook: None,
        control: None,
        transporter: tern_runtime::Transporter::Auto,
        cluster_secret: None,
    }
}

fn start(dir: &std::path::Path, data_memory: u64) -> DataNode {
    let n = DataNode::start(config(dir, data_memory)).expect("start");
    assert!(n.wait_started(Duration::from_secs(20)), "node started");
    n
}

fn kv_table(name: &str) -> Table {
    Table {
        id: 0,
        database: "test".into(),
        name: name.into(),
        columns: vec![
            Column::new("id", ColumnType::Int { unsigned: false }).not_null(),
            Column::new("v", ColumnType::BigInt { unsigned: false }),
            Column::new("s", ColumnType::VarChar { len: 100 }),
        ],
        primary_key: vec![0],
        partition_key: vec![0],
        indexes: vec![Index { id: 0, name: "v_idx".into(), columns: vec![1], unique: false }],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    }
}

fn setup(c: &Client, name: &str) -> TableHandle {
    c.ddl(DdlReq::CreateDatabase { name: "test".into(), if_not_exists: true }).unwrap();
    c.ddl(DdlReq::CreateTable { table: kv_table(name), if_not_exists: false }).unwrap();
    c.table("test", name).unwrap()
}

fn row(id: i64, v: i64) -> Vec<Value> {
    vec![Value::Int(id), Value::Int(v), Value::str(&format!("s{id}"))]
}

fn read_v(c: &Client, t: &TableHandle, id: i64) -> Option<i64> {
    let r = c.blocking().execute(vec![t.read(&[Value::Int(id)]).unwrap()]).unwrap();
    match &r[0] {
        OpResult::Row(b) => t.decode_row(b).unwrap()[1].as_i128().map(|x| x as i64),
        OpResult::NotFound => None,
        other => panic!("{other:?}"),
    }
}

#[test]
fn crud_scan_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 64 << 20);
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = setup(&c, "kv");
    // Errors are per operation and clear.
    assert_eq!(
        c.ddl(DdlReq::CreateTable { table: kv_table("kv"), if_not_exists: false }).unwrap_err().code,
        ErrorCode::TableExists
    );
    let ops: Vec<_> = (0..100).map(|i| t.insert(&row(i, i * 10)).unwrap()).collect();
    c.blocking().execute(ops).unwrap();
    assert_eq!(read_v(&c, &t, 7), Some(70));
    assert_eq!(read_v(&c, &t, 1000), None);
    // Duplicate insert aborts the transaction with 630 / MySQL 1062.
    let e = c.blocking().execute(vec![t.insert(&row(5, 1)).unwrap()]).unwrap_err();
    assert_eq!(e.code, ErrorCode::DuplicateKey);
    assert_eq!(e.code.mysql_errno(), 1062);
    // Interpreted update inside the data node.
    c.blocking()
        .execute(vec![
            t.update(&[Value::Int(7)], vec![ColumnUpdate { col: 1, expr: UpdateExpr::Add(Value::Int(5)) }]).unwrap(),
        ])
        .unwrap();
    assert_eq!(read_v(&c, &t, 7), Some(75));
    // Update of a missing row: NotFound aborts under AbortOnError; IgnoreError reports it per op.
    let e = c.blocking().execute(vec![t.delete(&[Value::Int(555)]).unwrap()]).unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);
    let mut txn = c.begin();
    let r = block_on(txn.execute_with(
        vec![t.delete(&[Value::Int(555)]).unwrap(), t.delete(&[Value::Int(99)]).unwrap()],
        Exec::Commit,
        AbortOption::IgnoreError,
    ))
    .unwrap();
    assert_eq!(r[0], OpResult::NotFound);
    assert_eq!(r[1], OpResult::Done);
    assert_eq!(read_v(&c, &t, 99), None);
    // Projection.
    let r = c.blocking().execute(vec![t.read_columns(&[Value::Int(3)], &[2]).unwrap()]).unwrap();
    let OpResult::Row(b) = &r[0] else { panic!() };
    assert_eq!(t.decode_projection(&[2], b).unwrap(), vec![Value::str("s3")]);
    // Full scan with a pushed filter and a limit.
    let mut spec = ScanSpec::table(t.id());
    spec.filter = Filter::Cmp { col: 1, op: CmpOp::Ge, value: Value::Int(500) };
    let rows = c.blocking().scan_all(spec.clone()).unwrap();
    assert_eq!(rows.len(), 49, "v >= 500 for ids 50..=98");
    spec.limit = 10;
    spec.batch_rows = 3;
    assert_eq!(c.blocking().scan_all(spec).unwrap().len(), 10);
    // Ordered index range scan across partitions, merged in order.
    let idx = t.index("v_idx").unwrap();
    let mut spec = ScanSpec::table(t.id());
    spec.index = Some(idx.id);
    spec.lo = Some(t.index_bound(&idx, &[Value::Int(100)], true).unwrap());
    spec.hi = Some(t.index_bound(&idx, &[Value::Int(200)], false).unwrap());
    spec.ordered = true;
    spec.batch_rows = 4;
    let got: Vec<i64> = c
        .blocking()
        .scan_all(spec.clone())
        .unwrap()
        .iter()
        .map(|b| t.decode_row(b).unwrap()[1].as_i128().unwrap() as i64)
        .collect();
    assert_eq!(got, (10..20).map(|i| i * 10).collect::<Vec<_>>());
    spec.descending = true;
    let got: Vec<i64> = c
        .blocking()
        .scan_all(spec)
        .unwrap()
        .iter()
        .map(|b| t.decode_row(b).unwrap()[1].as_i128().unwrap() as i64)
        .collect();
    assert_eq!(got, (10..20).rev().map(|i| i * 10).collect::<Vec<_>>());
    // A multi-range scan (as a join's keys): ranges in order, an empty one among them, batches
    // of 2 so that steps resume inside and between ranges; ordered both ways and unordered.
    let b = |v: i64, inclusive| Some(t.index_bound(&idx, &[Value::Int(v)], inclusive).unwrap());
    let mut spec = ScanSpec::table(t.id());
    spec.index = Some(idx.id);
    spec.ranges = vec![(b(100, true), b(120, true)), (b(300, true), b(300, true)), (b(305, true), b(305, true))];
    spec.ranges.push((b(500, true), b(530, false)));
    spec.ordered = true;
    spec.batch_rows = 2;
    let values = |spec: ScanSpec| -> Vec<i64> {
        let rows = c.blocking().scan_all(spec).unwrap();
        rows.iter().map(|b| t.decode_row(b).unwrap()[1].as_i128().unwrap() as i64).collect()
    };
    let want = vec![100, 110, 120, 300, 500, 510, 520];
    assert_eq!(values(spec.clone()), want);
    spec.descending = true;
    assert_eq!(values(spec.clone()), want.iter().rev().copied().collect::<Vec<_>>());
    spec.ordered = false;
    spec.descending = false;
    let mut got = values(spec.clone());
    got.sort();
    assert_eq!(got, want);
    // Ranges without an index are refused.
    spec.index = None;
    assert_eq!(c.blocking().scan_all(spec).unwrap_err().code, ErrorCode::InvalidRequest);
    // A durable commit survives a restart.
    let mut txn = c.begin().durable(true);
    block_on(txn.execute(vec![t.write(&row(1000, 1)).unwrap()], Exec::Commit)).unwrap();
    drop(c);
    node.shutdown();
    let node = start(dir.path(), 64 << 20);
    assert!(node.recovered_rows >= 100, "recovered {}", node.recovered_rows);
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = c.table("test", "kv").unwrap();
    assert_eq!(read_v(&c, &t, 1000), Some(1));
    assert_eq!(read_v(&c, &t, 7), Some(75));
    let st = c.status().unwrap();
    assert_eq!(st.state, "started");
    assert!(st.durable_epoch > 0);
    assert!(st.memory_used > 0 && st.memory_used < st.memory_total);
    // Rows per table, counted again from the recovered partitions: ids 0..=98 and 1000.
    assert_eq!(st.table_rows.iter().find(|(id, _)| *id == t.id()), Some(&(t.id(), 100)));
}

#[test]
fn multi_partition_atomicity_and_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 64 << 20);
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = setup(&c, "acct");
    c.blocking().execute((0..20).map(|i| t.insert(&row(i, 100)).unwrap()).collect()).unwrap();
    // A transaction over many partitions that fails at its last op changes nothing.
    let mut ops: Vec<_> = (0..20)
        .map(|i| {
            t.update(&[Value::Int(i)], vec![ColumnUpdate { col: 1, expr: UpdateExpr::Set(Value::Int(0)) }]).unwrap()
        })
        .collect();
    ops.push(t.insert(&row(3, 1)).unwrap());
    assert_eq!(c.blocking().execute(ops).unwrap_err().code, ErrorCode::DuplicateKey);
    for i in 0..20 {
        assert_eq!(read_v(&c, &t, i), Some(100));
    }
    // NoCommit then Rollback: nothing visible, locks released.
    let mut txn = c.begin();
    block_on(txn.execute(vec![t.write(&row(1, 5)).unwrap(), t.write(&row(2, 5)).unwrap()], Exec::NoCommit)).unwrap();
    assert_eq!(read_v(&c, &t, 1), Some(100), "uncommitted writes are invisible to others");
    // Own writes are visible inside the transaction.
    let r = block_on(txn.execute(vec![t.read(&[Value::Int(1)]).unwrap()], Exec::NoCommit)).unwrap();
    let OpResult::Row(b) = &r[0] else { panic!() };
    assert_eq!(t.decode_row(b).unwrap()[1], Value::Int(5));
    block_on(txn.rollback()).unwrap();
    assert_eq!(read_v(&c, &t, 1), Some(100));
    c.blocking().execute(vec![t.write(&row(1, 6)).unwrap()]).unwrap();
    // A transfer across partitions commits both sides.
    let mut txn = c.begin();
    let ops = vec![
        t.update(&[Value::Int(4)], vec![ColumnUpdate { col: 1, expr: UpdateExpr::Add(Value::Int(-30)) }]).unwrap(),
        t.update(&[Value::Int(5)], vec![ColumnUpdate { col: 1, expr: UpdateExpr::Add(Value::Int(30)) }]).unwrap(),
    ];
    block_on(txn.execute(ops, Exec::Commit)).unwrap();
    assert_eq!((read_v(&c, &t, 4), read_v(&c, &t, 5)), (Some(70), Some(130)));
}

/// A batch larger than one request may hold (OPS_PER_BATCH_MAX) goes as several requests of
/// one transaction: all of it commits, or — when its last operation fails — none of it.
#[test]
fn batches_over_the_request_limit_are_one_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 64 << 20);
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = setup(&c, "big");
    let n = tern_wire::OPS_PER_BATCH_MAX as i64 * 2 + 100;
    let mut ops: Vec<_> = (0..n).map(|i| t.insert(&row(i, i)).unwrap()).collect();
    ops.push(t.insert(&row(5, 0)).unwrap());
    assert_eq!(c.blocking().execute(ops).unwrap_err().code, ErrorCode::DuplicateKey);
    assert_eq!(read_v(&c, &t, 0), None);
    assert_eq!(read_v(&c, &t, n - 1), None);
    let ops: Vec<_> = (0..n).map(|i| t.insert(&row(i, i)).unwrap()).collect();
    let results = c.blocking().execute(ops).unwrap();
    assert_eq!(results.len(), n as usize);
    for i in [0, tern_wire::OPS_PER_BATCH_MAX as i64, n - 1] {
        assert_eq!(read_v(&c, &t, i), Some(i));
    }
}

#[test]
fn lock_wait_timeout_is_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 64 << 20);
    let a = Client::connect(&node.local_addr().to_string()).unwrap();
    let b = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = setup(&a, "locks");
    a.blocking().execute(vec![t.insert(&row(1, 1)).unwrap()]).unwrap();
    let mut holder = a.begin();
    block_on(holder.execute(vec![t.read_locked(&[Value::Int(1)], true).unwrap()], Exec::NoCommit)).unwrap();
    // A read-committed read does not wait for the lock.
    assert_eq!(read_v(&b, &t, 1), Some(1));
    let started = Instant::now();
    let mut waiter = b.begin();
    let e = block_on(waiter.execute(vec![t.write(&row(1, 2)).unwrap()], Exec::Commit)).unwrap_err();
    assert_eq!(e.code, ErrorCode::LockWaitTimeout);
    assert!(e.is_temporary());
    assert_eq!(e.code.mysql_errno(), 1205);
    assert!(started.elapsed() >= Duration::from_millis(1000), "waited for the lock wait timeout");
    block_on(holder.commit()).unwrap();
    // Once released, the write goes through.
    b.blocking().execute(vec![t.write(&row(1, 3)).unwrap()]).unwrap();
    assert_eq!(read_v(&a, &t, 1), Some(3));
}

#[test]
fn data_memory_full_fails_writes_and_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 200_000);
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = setup(&c, "full");
    let mut stored = 0;
    let mut full = None;
    for i in 0..100_000 {
        match c.blocking().execute(vec![t.insert(&row(i, i)).unwrap()]) {
            Ok(_) => stored += 1,
            Err(e) => {
                full = Some(e);
                break;
            }
        }
    }
    let e = full.expect("memory filled up");
    assert_eq!(e.code, ErrorCode::DataMemoryFull);
    assert!(e.message.contains("data memory is full"), "{}", e.message);
    assert!(stored > 100);
    for i in [0, stored / 2, stored - 1] {
        assert_eq!(read_v(&c, &t, i), Some(i), "row {i} intact");
    }
    // Deleting frees memory; writes work again.
    c.blocking().execute((0..50).map(|i| t.delete(&[Value::Int(i)]).unwrap()).collect()).unwrap();
    c.blocking().execute(vec![t.insert(&row(stored, 1)).unwrap()]).unwrap();
}

#[test]
fn spinning_switched_off_still_serves() {
    let dir = tempfile::tempdir().unwrap();
    let n = DataNode::start(DataNodeConfig { spin_max_us: 0, ..config(dir.path(), 64 << 20) }).expect("start");
    assert!(n.wait_started(Duration::from_secs(20)), "node started");
    let c = Client::connect(&n.local_addr().to_string()).unwrap();
    let t = setup(&c, "nospin");
    // Concurrent transactions across both workers, so that work arrives while a worker would
    // spin (that used to panic the worker: a clamp to an empty range).
    std::thread::scope(|s| {
        for th in 0..4i64 {
            let (c, t) = (&c, &t);
            s.spawn(move || {
                for b in 0..50i64 {
                    let ops = (0..10).map(|k| t.insert(&row(th * 1000 + b * 10 + k, 3)).unwrap()).collect();
                    c.blocking().execute(ops).unwrap();
                }
            });
        }
    });
    for i in (0..4000).filter(|i| i % 1000 < 500) {
        assert_eq!(read_v(&c, &t, i), Some(3));
    }
}

#[test]
fn in_process_transport() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 64 << 20);
    let c = Client::connect_local(|sink| Box::new(node.connect_local(sink))).unwrap();
    let t = setup(&c, "local");
    c.blocking().execute(vec![t.insert(&row(1, 42)).unwrap()]).unwrap();
    assert_eq!(read_v(&c, &t, 1), Some(42));
}

/// With a cluster secret, every connection's first frame must prove it: a client without the
/// secret or with another one gets AccessDenied (over TCP and shared memory) and is
/// disconnected, as is a raw peer greeting without the proof; the right secret works. Without a
/// secret the node refuses to listen beyond loopback.
#[test]
fn the_cluster_secret_is_required_on_every_connection() {
    use std::io::{Read, Write};
    use tern_client::ClientOptions;
    use tern_types::secret::ClusterSecret;
    use tern_wire::{Reply, Request, decode_frame, encode_frame};
    let secret = ClusterSecret::new(b"a secret of twenty-four b").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 64 << 20);
    cfg.cluster_secret = Some(secret.clone());
    let node = DataNode::start(cfg).expect("start");
    assert!(node.wait_started(Duration::from_secs(20)));
    let addr = node.local_addr().to_string();
    for transporter in [tern_runtime::Transporter::Tcp, tern_runtime::Transporter::Shm] {
        for (given, why) in
            [(None, "no cluster secret"), (Some(ClusterSecret::new(b"another secret, also long").unwrap()), "a wrong")]
        {
            let opts = ClientOptions { transporter, cluster_secret: given, ..ClientOptions::default() };
            let e = Client::connect_with(&addr, opts).err().expect("refused");
            assert_eq!(e.code, ErrorCode::AccessDenied, "{e:?}");
            assert!(e.message.contains("requires the cluster secret") && e.message.contains(why), "{e:?}");
            assert!(e.message.contains("TERN_CLUSTER_SECRET_FILE"), "{e:?}");
        }
        let opts = ClientOptions { transporter, cluster_secret: Some(secret.clone()), ..ClientOptions::default() };
        let c = Client::connect_with(&addr, opts).expect("the right secret is let in");
        let t = setup(&c, &format!("secret_{}", c.transporter()));
        c.blocking().execute(vec![t.insert(&row(1, 7)).unwrap()]).unwrap();
        assert_eq!(read_v(&c, &t, 1), Some(7));
    }
    // Raw first frames without the proof: a request other than Hello, and a peer's greeting.
    let mut get_catalog = Vec::new();
    Request::GetCatalog.encode(5, &mut get_catalog);
    let mut peer = Vec::new();
    tern_wire::PeerHello { node: 2, worker: 0, incarnation: 1, target_incarnation: 1, proof: None }.encode(&mut peer);
    for payload in [get_catalog, peer] {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut f = Vec::new();
        encode_frame(&payload, &mut f);
        s.write_all(&f).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("the node closes the connection");
        let (reply, _) = decode_frame(&got).unwrap().expect("an error frame before the close");
        match Reply::decode(reply).unwrap().1 {
            Reply::Error(e) => assert_eq!(e.code, ErrorCode::AccessDenied),
            r => panic!("{r:?}"),
        }
    }
    drop(node);
    let mut cfg = config(tempfile::tempdir().unwrap().path(), 1 << 20);
    cfg.listen = "0.0.0.0:0".parse().unwrap();
    let e = DataNode::start(cfg).err().expect("refused");
    assert!(e.contains("without a cluster secret") && e.contains("TERN_CLUSTER_SECRET_FILE"), "{e}");
}

#[test]
fn busy_port_and_locked_dir_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 64 << 20);
    let dir2 = tempfile::tempdir().unwrap();
    let mut cfg = config(dir2.path(), 1 << 20);
    cfg.listen = node.local_addr();
    let e = DataNode::start(cfg).err().unwrap();
    assert!(e.contains("already in use"), "{e}");
    let e = DataNode::start(config(dir.path(), 1 << 20)).err().unwrap();
    assert!(e.contains("in use by another process"), "{e}");
}

#[test]
fn unique_index_holds_across_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 64 << 20);
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    c.ddl(DdlReq::CreateDatabase { name: "test".into(), if_not_exists: true }).unwrap();
    let mut table = kv_table("users");
    table.indexes = vec![Index { id: 0, name: "email_uq".into(), columns: vec![2], unique: true }];
    c.ddl(DdlReq::CreateTable { table, if_not_exists: false }).unwrap();
    let t = c.table("test", "users").unwrap();
    let user = |id: i64, email: Option<&str>| {
        vec![Value::Int(id), Value::Int(0), email.map(Value::str).unwrap_or(Value::Null)]
    };
    c.blocking().execute(vec![t.insert(&user(1, Some("a@x"))).unwrap()]).unwrap();
    // Keys 1..40 spread over both partitions: the duplicate is caught wherever it lands.
    for id in 2..40 {
        let e = c.blocking().execute(vec![t.insert(&user(id, Some("a@x"))).unwrap()]).unwrap_err();
        assert_eq!(e.code, ErrorCode::DuplicateKey, "id {id}");
        assert!(e.message.contains("email_uq"), "{}", e.message);
        assert_eq!(read_v(&c, &t, id), None, "nothing of the failed insert is left");
    }
    // NULLs are not indexed: many rows may hold NULL.
    c.blocking().execute((2..6).map(|id| t.insert(&user(id, None)).unwrap()).collect()).unwrap();
    // Updating into a taken value fails; into a free one works and frees the old value.
    let set = |id: i64, email: &str| {
        t.update(&[Value::Int(id)], vec![ColumnUpdate { col: 2, expr: UpdateExpr::Set(Value::str(email)) }]).unwrap()
    };
    assert_eq!(c.blocking().execute(vec![set(2, "a@x")]).unwrap_err().code, ErrorCode::DuplicateKey);
    c.blocking().execute(vec![set(1, "b@x")]).unwrap();
    c.blocking().execute(vec![t.insert(&user(7, Some("a@x"))).unwrap()]).unwrap();
    // Delete frees the value; a delete and a re-insert in one transaction works.
    c.blocking().execute(vec![t.delete(&[Value::Int(7)]).unwrap(), t.insert(&user(8, Some("a@x"))).unwrap()]).unwrap();
    // Two inserts of one value in one batch: the second fails, the whole transaction aborts.
    let e = c
        .blocking()
        .execute(vec![t.insert(&user(20, Some("z@x"))).unwrap(), t.insert(&user(21, Some("z@x"))).unwrap()])
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::DuplicateKey);
    assert_eq!(read_v(&c, &t, 20), None);
    // IgnoreError does not let a unique violation through.
    let mut txn = c.begin();
    let r = block_on(txn.execute_with(
        vec![t.insert(&user(30, Some("b@x"))).unwrap()],
        Exec::Commit,
        AbortOption::IgnoreError,
    ));
    assert_eq!(r.unwrap_err().code, ErrorCode::DuplicateKey);
    // The unique index also serves ordered scans.
    let idx = t.index("email_uq").unwrap();
    let mut spec = ScanSpec::table(t.id());
    spec.index = Some(idx.id);
    spec.ordered = true;
    spec.lo = Some(t.index_bound(&idx, &[Value::str("a")], true).unwrap());
    let emails: Vec<Value> =
        c.blocking().scan_all(spec).unwrap().iter().map(|b| t.decode_row(b).unwrap()[2].clone()).collect();
    assert_eq!(emails, vec![Value::str("a@x"), Value::str("b@x")]);
    // Hidden index tables do not show among the database's tables.
    assert_eq!(c.catalog().tables_in("test").count(), 1);
    // Creating a unique index on a table with rows is refused clearly, and changes nothing.
    let e = c
        .ddl(DdlReq::CreateIndex {
            database: "test".into(),
            table: "users".into(),
            index: Index { id: 0, name: "v_uq".into(), columns: vec![1], unique: true },
        })
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported);
    assert!(c.table("test", "users").unwrap().index("v_uq").is_err());
    c.blocking().execute(vec![t.insert(&user(50, Some("c@x"))).unwrap()]).unwrap();
}

#[test]
fn auto_increment_hidden_key_and_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 64 << 20);
    let addr = node.local_addr().to_string();
    let c = Client::connect(&addr).unwrap();
    c.ddl(DdlReq::CreateDatabase { name: "test".into(), if_not_exists: true }).unwrap();
    // AUTO_INCREMENT primary key and a column with a default.
    let mut id = Column::new("id", ColumnType::BigInt { unsigned: true }).not_null();
    id.auto_increment = true;
    let mut n = Column::new("n", ColumnType::Int { unsigned: false }).not_null();
    n.default = Some(Value::Int(5));
    let t = Table {
        id: 0,
        database: "test".into(),
        name: "ai".into(),
        columns: vec![id, n, Column::new("s", ColumnType::VarChar { len: 10 }).not_null()],
        primary_key: vec![0],
        partition_key: vec![],
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    };
    c.ddl(DdlReq::CreateTable { table: t, if_not_exists: false }).unwrap();
    let t = c.table("test", "ai").unwrap();
    let c2 = Client::connect(&addr).unwrap();
    let mut ids = std::collections::BTreeSet::new();
    for client in [&c, &c2, &c, &c2] {
        for _ in 0..10 {
            let mut v = t.values_named(&[("s", Value::str("x"))]).unwrap();
            let got = client.fill_generated(&t, &mut v).unwrap().expect("generated");
            assert!(ids.insert(got), "auto-increment value {got} handed out twice");
            client.blocking().execute(vec![t.insert(&v).unwrap()]).unwrap();
        }
    }
    assert_eq!(ids.len(), 40);
    let rows = c.blocking().scan_all(ScanSpec::table(t.id())).unwrap();
    assert_eq!(rows.len(), 40);
    assert!(rows.iter().all(|r| t.decode_row(r).unwrap()[1] == Value::Int(5)), "the default filled n");
    let e = t.values_named(&[("n", Value::Int(1))]).unwrap_err();
    assert_eq!(e.code, ErrorCode::NotNull);
    assert!(e.message.contains("doesn't have a default value"), "{}", e.message);
    // A table without a primary key gets a hidden one.
    let t2 = Table {
        id: 0,
        database: "test".into(),
        name: "nokey".into(),
        columns: vec![Column::new("v", ColumnType::Int { unsigned: false })],
        primary_key: vec![],
        partition_key: vec![],
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    };
    c.ddl(DdlReq::CreateTable { table: t2, if_not_exists: false }).unwrap();
    let t2 = c.table("test", "nokey").unwrap();
    assert_eq!(t2.table.columns.len(), 2);
    assert!(t2.table.columns[1].hidden);
    for i in 0..3 {
        let mut v = t2.values_named(&[("v", Value::Int(7))]).unwrap();
        c.fill_generated(&t2, &mut v).unwrap().expect("hidden key generated");
        c.blocking().execute(vec![t2.insert(&v).unwrap()]).unwrap_or_else(|e| panic!("row {i}: {e}"));
    }
    assert_eq!(c.blocking().scan_all(ScanSpec::table(t2.id())).unwrap().len(), 3, "equal rows are kept apart");
    assert_eq!(c.tables("test"), vec!["ai".to_string(), "nokey".to_string()]);
    assert!(c.databases().contains(&"test".to_string()));
    // After a restart, new values never reuse old ones.
    let max = *ids.iter().max().unwrap();
    drop((c, c2));
    node.shutdown();
    let node = start(dir.path(), 64 << 20);
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = c.table("test", "ai").unwrap();
    let mut v = t.values_named(&[("s", Value::str("y"))]).unwrap();
    assert!(c.fill_generated(&t, &mut v).unwrap().unwrap() > max);
}

#[test]
fn inactive_transactions_are_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 64 << 20);
    cfg.node.tc.inactive_timeout_ms = 300;
    let node = DataNode::start(cfg).unwrap();
    assert!(node.wait_started(Duration::from_secs(20)));
    let a = Client::connect(&node.local_addr().to_string()).unwrap();
    let b = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = setup(&a, "idle");
    a.blocking().execute(vec![t.insert(&row(1, 1)).unwrap()]).unwrap();
    let mut idle = a.begin();
    block_on(idle.execute(vec![t.read_locked(&[Value::Int(1)], true).unwrap()], Exec::NoCommit)).unwrap();
    std::thread::sleep(Duration::from_millis(900));
    // The idle transaction was aborted: its lock is gone ...
    b.blocking().execute(vec![t.write(&row(1, 2)).unwrap()]).unwrap();
    // ... and its next request is told so.
    let e = block_on(idle.execute(vec![t.read(&[Value::Int(1)]).unwrap()], Exec::Commit)).unwrap_err();
    assert_eq!(e.code, ErrorCode::TransactionTimeout);
    assert!(e.is_temporary());
}

#[test]
fn graceful_shutdown_keeps_acknowledged_commits() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 64 << 20);
    // Long epochs: the commits below are acknowledged long before their epoch is durable.
    cfg.node.dist.epoch_interval_ms = 1000;
    let node = DataNode::start(cfg.clone()).unwrap();
    assert!(node.wait_started(Duration::from_secs(20)));
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = setup(&c, "graceful");
    c.blocking().execute((0..10).map(|i| t.write(&row(i, i)).unwrap()).collect()).unwrap();
    drop(c);
    node.shutdown();
    let node = DataNode::start(cfg).unwrap();
    assert!(node.wait_started(Duration::from_secs(20)));
    assert_eq!(node.recovered_rows, 10, "every acknowledged commit survived the stop");
}

#[test]
fn composite_key_with_partition_key_subset() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 64 << 20);
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    c.ddl(DdlReq::CreateDatabase { name: "test".into(), if_not_exists: true }).unwrap();
    // PRIMARY KEY (user, item), PARTITION BY KEY (user): a user's rows share one partition.
    let table = Table {
        id: 0,
        database: "test".into(),
        name: "features".into(),
        columns: vec![
            Column::new("user", ColumnType::VarChar { len: 20 }).not_null(),
            Column::new("item", ColumnType::Int { unsigned: true }).not_null(),
            Column::new("score", ColumnType::Double),
        ],
        primary_key: vec![0, 1],
        partition_key: vec![0],
        indexes: vec![],
        partition_count: 8,
        groups: 0,
        ttl: None,
        comment: String::new(),
    };
    c.ddl(DdlReq::CreateTable { table, if_not_exists: false }).unwrap();
    let t = c.table("test", "features").unwrap();
    let mut ops = Vec::new();
    for u in 0..10 {
        for i in 0..5u64 {
            ops.push(
                t.insert(&[Value::str(&format!("user{u}")), Value::UInt(i), Value::Double(u as f64 + i as f64 / 10.0)])
                    .unwrap(),
            );
        }
    }
    c.blocking().execute(ops).unwrap();
    let r = c.blocking().execute(vec![t.read(&[Value::str("user3"), Value::UInt(4)]).unwrap()]).unwrap();
    let OpResult::Row(b) = &r[0] else { panic!() };
    assert_eq!(t.decode_row(b).unwrap()[2], Value::Double(3.4));
    // Every row of user7 is in the partition its first row is in.
    let p = t.partition_of(&[Value::str("user7"), Value::UInt(0)]).unwrap();
    for i in 1..5u64 {
        assert_eq!(t.partition_of(&[Value::str("user7"), Value::UInt(i)]).unwrap(), p);
    }
    let mut spec = ScanSpec::table(t.id());
    spec.partition = Some(p);
    spec.filter = Filter::Cmp { col: 0, op: CmpOp::Eq, value: Value::str("user7") };
    let rows = c.blocking().scan_all(spec).unwrap();
    assert_eq!(rows.len(), 5, "the pruned scan finds all of user7's rows in one partition");
    // A key with the wrong number of columns is a clear error.
    let e = t.read(&[Value::str("user7")]).unwrap_err();
    assert!(e.message.contains("Wrong number of primary-key columns. Expecting: 2 Got: 1"), "{}", e.message);
}

/// TTL tables hide expired rows from key reads and scans at once (interfaces.md §5), an insert
/// over an expired row succeeds, purgers see only expired rows; in-node string increments with
/// upsert and guards; writes and deletes that return the previous row.
#[test]
fn ttl_string_increment_and_previous_rows() {
    let dir = tempfile::tempdir().unwrap();
    // The data node's own purge is off: this test purges by hand.
    let mut cfg = config(dir.path(), 64 << 20);
    cfg.node.tc.purge_interval_ms = 0;
    let node = DataNode::start(cfg).expect("start");
    assert!(node.wait_started(Duration::from_secs(20)), "node started");
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    c.ddl(DdlReq::CreateDatabase { name: "test".into(), if_not_exists: true }).unwrap();
    let t = Table {
        id: 0,
        database: "test".into(),
        name: "ttl".into(),
        columns: vec![
            Column::new("k", ColumnType::VarBinary { len: 100 }).not_null(),
            Column::new("v", ColumnType::VarBinary { len: 100 }).not_null(),
            Column::new("kind", ColumnType::TinyInt { unsigned: true }).not_null(),
            Column::new("exp", ColumnType::DateTime { fsp: 3 }),
        ],
        primary_key: vec![0],
        partition_key: vec![0],
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: Some(tern_types::schema::Ttl::new(3, 0)),
        comment: String::new(),
    };
    c.ddl(DdlReq::CreateTable { table: t, if_not_exists: false }).unwrap();
    let t = c.table("test", "ttl").unwrap();
    let b = c.blocking();
    let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    let k = |s: &str| Value::Bytes(s.as_bytes().to_vec());
    let rowv = |key: &str, v: &str, exp: Option<i64>| {
        vec![k(key), k(v), Value::UInt(0), exp.map(Value::DateTime).unwrap_or(Value::Null)]
    };
    b.execute(vec![
        t.write(&rowv("past", "1", Some(now_us - 1_000_000))).unwrap(),
        t.write(&rowv("soon", "2", Some(now_us + 1_500_000))).unwrap(),
        t.write(&rowv("never", "3", None)).unwrap(),
    ])
    .unwrap();
    let present = |key: &str| matches!(b.execute(vec![t.read(&[k(key)]).unwrap()]).unwrap()[0], OpResult::Row(_));
    assert!(!present("past") && present("soon") && present("never"));
    let live = b.scan_all(ScanSpec::table(t.id())).unwrap().len();
    assert_eq!(live, 2);
    let mut expired = ScanSpec::table(t.id());
    expired.expired = true;
    assert_eq!(b.scan_all(expired.clone()).unwrap().len(), 1);
    std::thread::sleep(Duration::from_millis(1700));
    assert!(!present("soon"));
    assert_eq!(b.scan_all(expired).unwrap().len(), 2);
    // An update of an expired row finds nothing; an insert over it succeeds.
    let upd = t.update(&[k("soon")], vec![ColumnUpdate { col: 1, expr: UpdateExpr::Set(k("x")) }]).unwrap();
    assert_eq!(b.execute_with(vec![upd], AbortOption::IgnoreError).unwrap()[0], OpResult::NotFound);
    b.execute(vec![t.insert(&rowv("soon", "5", None)).unwrap()]).unwrap();
    assert!(present("soon"));
    // The purger's delete removes only expired rows.
    let mut purge = t.delete(&[k("past")]).unwrap();
    purge.kind = tern_client::OpKind::DeleteExpired;
    let mut keep = t.delete(&[k("never")]).unwrap();
    keep.kind = tern_client::OpKind::DeleteExpired;
    assert_eq!(
        b.execute_with(vec![purge, keep], AbortOption::IgnoreError).unwrap(),
        vec![OpResult::Done, OpResult::NotFound]
    );
    assert!(present("never"));

    // In-node increment of a decimal string, with upsert and a guard on `kind`.
    let incr = |key: &str, by: i64, kind: u64| {
        let mut op = t
            .update(
                &[k(key)],
                vec![
                    ColumnUpdate { col: 2, expr: UpdateExpr::Expect(Value::UInt(kind)) },
                    ColumnUpdate { col: 1, expr: UpdateExpr::Add(Value::Int(by)) },
                ],
            )
            .unwrap();
        op.row = t.row(&rowv(key, "0", None)).unwrap();
        op.projection = Some(vec![1]);
        b.execute_with(vec![op], AbortOption::IgnoreError).unwrap().remove(0)
    };
    let val = |r: OpResult| match r {
        OpResult::Row(bytes) => t.decode_projection(&[1], &bytes).unwrap().remove(0),
        other => panic!("{other:?}"),
    };
    assert_eq!(val(incr("ctr", 5, 0)), k("5"));
    assert_eq!(val(incr("ctr", -7, 0)), k("-2"));
    assert_eq!(val(incr("never", 10, 0)), k("13"));
    let err = |r: OpResult| match r {
        OpResult::Error(e) => e.code,
        other => panic!("{other:?}"),
    };
    assert_eq!(err(incr("ctr", 1, 1)), ErrorCode::ConditionFailed);
    b.execute(vec![t.write(&rowv("text", "12a", None)).unwrap()]).unwrap();
    assert_eq!(err(incr("text", 1, 0)), ErrorCode::InvalidValue);
    b.execute(vec![t.write(&rowv("big", &i64::MAX.to_string(), None)).unwrap()]).unwrap();
    assert_eq!(err(incr("big", 1, 0)), ErrorCode::ValueOutOfRange);
    assert_eq!(val(incr("big", -1, 0)), k(&(i64::MAX - 1).to_string()));

    // Write and Delete with a projection return the previous row's columns.
    let mut w = t.write(&rowv("ctr", "new", None)).unwrap();
    w.projection = Some(vec![1]);
    assert_eq!(val(b.execute(vec![w.clone()]).unwrap().remove(0)), k("-2"));
    let mut w2 = t.write(&rowv("fresh", "x", None)).unwrap();
    w2.projection = Some(vec![1]);
    assert_eq!(b.execute_with(vec![w2], AbortOption::IgnoreError).unwrap()[0], OpResult::NotFound);
    let mut d = t.delete(&[k("ctr")]).unwrap();
    d.projection = Some(vec![1]);
    assert_eq!(val(b.execute(vec![d.clone()]).unwrap().remove(0)), k("new"));
    assert_eq!(b.execute_with(vec![d], AbortOption::IgnoreError).unwrap()[0], OpResult::NotFound);
}

/// A dirty update takes no row lock: concurrent open transactions increment the same row without
/// waiting for each other, and at commit each increment applies to the row as committed then, so
/// none is lost. A locked writer does not wait for a dirty one either.
#[test]
fn dirty_updates_take_no_lock_and_lose_no_increment() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 64 << 20);
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = setup(&c, "dirty");
    let b = c.blocking();
    b.execute(vec![t.write(&row(1, 10)).unwrap()]).unwrap();
    let dirty = |by: i64| {
        let mut op =
            t.update(&[Value::Int(1)], vec![ColumnUpdate { col: 1, expr: UpdateExpr::Add(Value::Int(by)) }]).unwrap();
        op.kind = tern_client::OpKind::UpdateDirty;
        op.projection = Some(vec![1]);
        op
    };
    let value = |r: &OpResult| match r {
        OpResult::Row(bytes) => t.decode_projection(&[1], bytes).unwrap()[0].as_i128().unwrap() as i64,
        other => panic!("{other:?}"),
    };
    let mut t1 = c.begin();
    let mut t2 = c.begin();
    let r1 = b.execute_in(&mut t1, vec![dirty(1)], Exec::NoCommit).unwrap();
    // t2 neither waits for t1 nor sees its uncommitted increment.
    let started = Instant::now();
    let r2 = b.execute_in(&mut t2, vec![dirty(5)], Exec::NoCommit).unwrap();
    assert!(started.elapsed() < Duration::from_millis(1000), "a dirty update waited for a lock");
    assert_eq!((value(&r1[0]), value(&r2[0])), (11, 15));
    // A locked update of the same row does not wait for the dirty ones either.
    let locked =
        t.update(&[Value::Int(1)], vec![ColumnUpdate { col: 1, expr: UpdateExpr::Add(Value::Int(100)) }]).unwrap();
    b.execute(vec![locked]).unwrap();
    b.execute_in(&mut t2, vec![], Exec::Commit).unwrap();
    b.execute_in(&mut t1, vec![], Exec::Commit).unwrap();
    assert_eq!(read_v(&c, &t, 1), Some(116), "every increment counted");
    // An upserting dirty update creates the row; a rolled-back one leaves no trace.
    let mut up =
        t.update(&[Value::Int(2)], vec![ColumnUpdate { col: 1, expr: UpdateExpr::Add(Value::Int(3)) }]).unwrap();
    up.kind = tern_client::OpKind::UpdateDirty;
    up.row = t.row(&row(2, 0)).unwrap();
    b.execute(vec![up]).unwrap();
    assert_eq!(read_v(&c, &t, 2), Some(3));
    let mut t3 = c.begin();
    b.execute_in(&mut t3, vec![dirty(1000)], Exec::NoCommit).unwrap();
    b.execute_in(&mut t3, vec![], Exec::Rollback).unwrap();
    assert_eq!(read_v(&c, &t, 1), Some(116));
}

/// Aggregating scans: every partition folds its rows into partial groups over several steps
/// (small batches), with a pushed filter and over an index range; the merged partials equal what
/// the rows give. A bad aggregate column is an error, not a crash.
#[test]
fn aggregating_scans_return_mergeable_partial_groups() {
    use tern_agg::{AggExpr, AggOp, Aggregation, Arith, decode_partial};
    let dir = tempfile::tempdir().unwrap();
    let _n = start(dir.path(), 64 << 20);
    let c = Client::connect(&_n.local_addr().to_string()).unwrap();
    let t = setup(&c, "agg");
    let n = 3000i64;
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let ops = chunk
            .iter()
            .map(|&i| {
                let v = if i % 7 == 0 { Value::Null } else { Value::Int(i % 5 - 2) };
                t.insert(&[Value::Int(i), v, Value::str(&format!("s{:04}", i % 11))]).unwrap()
            })
            .collect();
        c.blocking().execute(ops).unwrap();
    }
    let a = Aggregation {
        group_by: vec![AggExpr::Col(1)],
        aggs: vec![
            (AggOp::Count, None),
            (AggOp::Sum, Some(AggExpr::Col(0))),
            (AggOp::Min, Some(AggExpr::Col(2))),
            (AggOp::Max, Some(AggExpr::Col(0))),
            (AggOp::Count, Some(AggExpr::Col(1))),
            // SUM(id * 3 - v): an arithmetic argument (NULL where v is NULL).
            (
                AggOp::Sum,
                Some(AggExpr::Bin(
                    Arith::Sub,
                    Box::new(AggExpr::Bin(
                        Arith::Mul,
                        Box::new(AggExpr::Col(0)),
                        Box::new(AggExpr::Lit(Value::Int(3))),
                    )),
                    Box::new(AggExpr::Col(1)),
                )),
            ),
        ],
    };
    let args_of = |row: &[Value]| -> Vec<Value> {
        let v3 =
            row[1].as_i128().map(|v| Value::Int((row[0].as_i128().unwrap() * 3 - v) as i64)).unwrap_or(Value::Null);
        vec![Value::Int(1), row[0].clone(), row[2].clone(), row[0].clone(), row[1].clone(), v3]
    };
    let run = |spec: ScanSpec| -> std::collections::BTreeMap<String, Vec<Value>> {
        let mut merged: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
        for r in c.blocking().scan_all(spec).unwrap() {
            let (g, accs) = decode_partial(&a, &r).unwrap();
            let m = merged.entry(format!("{:?}", g[0])).or_insert_with(|| a.start());
            a.merge(m, &accs);
        }
        merged
    };
    // The same from the rows themselves.
    let expect = |keep: &dyn Fn(i64) -> bool| -> std::collections::BTreeMap<String, Vec<Value>> {
        let mut m: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
        for i in (0..n).filter(|&i| keep(i)) {
            let v = if i % 7 == 0 { Value::Null } else { Value::Int(i % 5 - 2) };
            let e = m.entry(format!("{v:?}")).or_insert_with(|| a.start());
            let row = [Value::Int(i), v.clone(), Value::str(&format!("s{:04}", i % 11))];
            a.fold_values(e, &args_of(&row));
        }
        m
    };
    let mut spec = ScanSpec::table(t.id());
    spec.aggregate = Some(a.clone());
    spec.batch_rows = 7;
    let got = run(spec.clone());
    assert_eq!(got.len(), 6, "five values and NULL");
    assert_eq!(got, expect(&|_| true));
    // 16 rows a step: each ldm goes on by itself for its steps, sending partials as it goes,
    // and the tc asks again only when those are used up — every row still counted once.
    spec.batch_rows = 1;
    assert_eq!(run(spec.clone()), expect(&|_| true));
    spec.filter = Filter::Cmp { col: 0, op: CmpOp::Lt, value: Value::Int(1000) };
    assert_eq!(run(spec.clone()), expect(&|i| i < 1000));
    // Over the ordered index on v: v in [0, 1].
    let idx = t.index("v_idx").unwrap();
    let mut ispec = ScanSpec::table(t.id());
    ispec.index = Some(idx.id);
    ispec.lo = Some(t.index_bound(&idx, &[Value::Int(0)], true).unwrap());
    ispec.hi = Some(t.index_bound(&idx, &[Value::Int(1)], true).unwrap());
    ispec.aggregate = Some(a.clone());
    assert_eq!(run(ispec), expect(&|i| i % 7 != 0 && (0..=1).contains(&(i % 5 - 2))));
    let mut bad = ScanSpec::table(t.id());
    bad.aggregate = Some(Aggregation { group_by: vec![AggExpr::Col(9)], aggs: vec![] });
    assert!(c.blocking().scan_all(bad).is_err());
}

/// Two transactions that both read a row shared and then both write it wait for each other:
/// the ldm finds the cycle at once (temporary Deadlock, MySQL 1213) instead of waiting for the
/// lock-wait timeout, and the other transaction goes on.
#[test]
fn local_deadlock_is_found_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 64 << 20);
    let a = Client::connect(&node.local_addr().to_string()).unwrap();
    let b = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = setup(&a, "dl");
    a.blocking().execute(vec![t.insert(&row(1, 1)).unwrap()]).unwrap();
    let mut ta = a.begin();
    let mut tb = b.begin();
    block_on(ta.execute(vec![t.read_locked(&[Value::Int(1)], false).unwrap()], Exec::NoCommit)).unwrap();
    block_on(tb.execute(vec![t.read_locked(&[Value::Int(1)], false).unwrap()], Exec::NoCommit)).unwrap();
    let t2 = t.clone();
    let first = std::thread::spawn(move || {
        block_on(ta.execute(vec![t2.write(&row(1, 10)).unwrap()], Exec::Commit)).map(|_| ())
    });
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let e = block_on(tb.execute(vec![t.write(&row(1, 20)).unwrap()], Exec::Commit)).unwrap_err();
    assert_eq!(e.code, ErrorCode::Deadlock, "{e:?}");
    assert_eq!(e.code.mysql_errno(), 1213);
    assert!(started.elapsed() < Duration::from_millis(900), "found before the lock-wait timeout");
    first.join().unwrap().unwrap();
    assert_eq!(read_v(&a, &t, 1), Some(10));
}

/// A cycle of waits through two ldms (each transaction holds a row of one and waits for the
/// other's): no ldm sees it alone, the deadlock probes find it, one transaction fails with 1213
/// long before the (here raised) lock-wait timeout would end it, and the other commits.
#[test]
fn deadlock_across_ldms_is_found_by_probes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 64 << 20);
    cfg.node.ldm.lock_wait_timeout_ms = 60_000;
    let node = DataNode::start(cfg).expect("start");
    assert!(node.wait_started(Duration::from_secs(20)), "node started");
    let a = Client::connect(&node.local_addr().to_string()).unwrap();
    let b = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = setup(&a, "xdl");
    let ldm = |id: i64| tern_types::cluster::ldm_of(t.partition_of(&[Value::Int(id)]).unwrap(), 1, 2);
    let other = (2..100).find(|&k| ldm(k) != ldm(1)).expect("a key of the other ldm");
    a.blocking().execute(vec![t.insert(&row(1, 1)).unwrap(), t.insert(&row(other, 1)).unwrap()]).unwrap();
    for round in 0..3 {
        let mut ta = a.begin();
        let mut tb = b.begin();
        block_on(ta.execute(vec![t.write(&row(1, 100 + round)).unwrap()], Exec::NoCommit)).unwrap();
        block_on(tb.execute(vec![t.write(&row(other, 200 + round)).unwrap()], Exec::NoCommit)).unwrap();
        let t2 = t.clone();
        let first = std::thread::spawn(move || {
            block_on(ta.execute(vec![t2.write(&row(other, 100 + round)).unwrap()], Exec::Commit)).map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(100));
        let second = block_on(tb.execute(vec![t.write(&row(1, 200 + round)).unwrap()], Exec::Commit)).map(|_| ());
        let first = first.join().unwrap();
        // Exactly one is the victim, with the deadlock error (not the lock-wait timeout).
        let (winner, err) = match (first, second) {
            (Ok(()), Err(e)) => (100 + round, e),
            (Err(e), Ok(())) => (200 + round, e),
            other => panic!("round {round}: expected one victim, got {other:?}"),
        };
        assert_eq!(err.code, ErrorCode::Deadlock, "{err:?}");
        assert_eq!(err.code.mysql_errno(), 1213);
        assert_eq!(read_v(&a, &t, 1), Some(winner));
        assert_eq!(read_v(&a, &t, other), Some(winner));
    }
}

/// The data node purges expired rows of every TTL table in the background (interfaces.md §5):
/// through an ordered index on the TTL column when there is one and by scanning otherwise; rows
/// that never expire or expire later stay; the rows of the table's cascade children go with
/// their purged parent; the purged rows are counted in the node's status.
#[test]
fn ttl_tables_are_purged_in_the_data_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 256 << 20);
    cfg.node.tc.purge_interval_ms = 100;
    cfg.node.tc.purge_batch_rows = 50;
    let node = DataNode::start(cfg).expect("start");
    assert!(node.wait_started(Duration::from_secs(20)), "node started");
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    c.ddl(DdlReq::CreateDatabase { name: "test".into(), if_not_exists: true }).unwrap();
    let table = |name: &str, ts: ColumnType, indexed: bool, cascade: Vec<tern_types::schema::TtlCascade>| Table {
        id: 0,
        database: "test".into(),
        name: name.into(),
        columns: vec![
            Column::new("id", ColumnType::BigInt { unsigned: false }).not_null(),
            Column::new("at", ts),
            Column::new("v", ColumnType::VarChar { len: 20 }),
        ],
        primary_key: vec![0],
        partition_key: vec![0],
        indexes: if indexed {
            vec![Index { id: 0, name: "at_idx".into(), columns: vec![1], unique: false }]
        } else {
            vec![]
        },
        partition_count: 0,
        groups: 0,
        ttl: Some(tern_types::schema::Ttl { column: 1, seconds: 2, cascade }),
        comment: String::new(),
    };
    let child = Table {
        id: 0,
        database: "test".into(),
        name: "parts".into(),
        columns: vec![
            Column::new("parent", ColumnType::BigInt { unsigned: false }).not_null(),
            Column::new("n", ColumnType::Int { unsigned: false }).not_null(),
        ],
        primary_key: vec![0, 1],
        partition_key: vec![0],
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    };
    let cascade = vec![tern_types::schema::TtlCascade { child: "parts".into(), column: 0 }];
    for t in [
        table("scanned", ColumnType::DateTime { fsp: 6 }, false, cascade),
        table("indexed", ColumnType::Timestamp { fsp: 0 }, true, vec![]),
        child,
    ] {
        c.ddl(DdlReq::CreateTable { table: t, if_not_exists: false }).unwrap();
    }
    let b = c.blocking();
    let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    // Per table: 700 rows already expired (at = now - 3 s with a 2 s TTL), 300 that expire in
    // about 2 s, 100 that never do (NULL), 100 far in the future.
    let expiry = |i: i64| match i % 12 {
        0..=6 => Some(now_us - 3_000_000),
        7..=9 => Some(now_us),
        10 => None,
        _ => Some(now_us + 3_600_000_000),
    };
    let ids: Vec<i64> = (0..1200).collect();
    for name in ["scanned", "indexed"] {
        let t = c.table("test", name).unwrap();
        let ts = |us: i64| {
            if name == "indexed" { Value::Timestamp(us / 1_000_000 * 1_000_000) } else { Value::DateTime(us) }
        };
        for chunk in ids.chunks(300) {
            let ops = chunk
                .iter()
                .map(|&i| t.write(&[Value::Int(i), expiry(i).map(ts).unwrap_or(Value::Null), Value::str("x")]).unwrap())
                .collect();
            b.execute(ops).unwrap();
        }
    }
    let parts = c.table("test", "parts").unwrap();
    for chunk in ids.chunks(200) {
        let ops = chunk
            .iter()
            .flat_map(|&i| (0..3).map(move |n| (i, n)))
            .map(|(i, n)| parts.write(&[Value::Int(i), Value::Int(n)]).unwrap())
            .collect();
        b.execute(ops).unwrap();
    }
    let count = |name: &str, expired: bool| {
        let t = c.table("test", name).unwrap();
        let mut spec = ScanSpec::table(t.id());
        spec.expired = expired;
        b.scan_all(spec).unwrap().len()
    };
    let purged = |name: &str| {
        let id = c.table("test", name).unwrap().id();
        c.status().unwrap().ttl_purged.iter().find(|(t, _)| *t == id).map_or(0, |(_, n)| *n)
    };
    // Everything expires but the 200 rows per table that never do or expire in an hour.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let left = count("scanned", true) + count("indexed", true) + count("scanned", false) + count("indexed", false);
        if left == 400 && count("parts", false) == 600 {
            break;
        }
        assert!(Instant::now() < until, "{left} rows left, {} parts", count("parts", false));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(count("scanned", false), 200);
    assert_eq!(count("indexed", false), 200);
    assert_eq!((purged("scanned"), purged("indexed"), purged("parts")), (1000, 1000, 3000));
    // The survivors are the rows that never expire or expire later, with their parts.
    let t = c.table("test", "scanned").unwrap();
    let mut left: Vec<i64> = b
        .scan_all(ScanSpec::table(t.id()))
        .unwrap()
        .iter()
        .map(|r| t.decode_row(r).unwrap()[0].as_i128().unwrap() as i64)
        .collect();
    left.sort();
    assert_eq!(left, ids.iter().copied().filter(|i| i % 12 >= 10).collect::<Vec<_>>());
    let mut parents: Vec<i64> = b
        .scan_all(ScanSpec::table(parts.id()))
        .unwrap()
        .iter()
        .map(|r| parts.decode_row(r).unwrap()[0].as_i128().unwrap() as i64)
        .collect();
    parents.sort();
    parents.dedup();
    assert_eq!(parents, left);
}

/// An orderly stop (`flush_for_stop`: what SIGTERM and `tern stop` do before a node exits)
/// first stops serving: new requests get a temporary "stopping" error and an open transaction
/// cannot commit any more; every commit acknowledged before it survives even a crash right after.
#[test]
fn an_orderly_stop_refuses_new_work_and_keeps_every_acknowledged_commit() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), 64 << 20);
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = setup(&c, "stopkv");
    for i in 0..50 {
        c.blocking().execute(vec![t.insert(&row(i, i)).unwrap()]).unwrap();
    }
    let mut open = c.begin();
    block_on(open.execute(vec![t.insert(&row(500, 5)).unwrap()], Exec::NoCommit)).unwrap();
    assert!(node.flush_for_stop(), "the last epochs became durable");
    let e = c.blocking().execute(vec![t.read(&[Value::Int(1)]).unwrap()]).unwrap_err();
    assert_eq!(e.code, ErrorCode::NodeNotStarted, "{e}");
    assert!(e.message.contains("stopping"), "{e}");
    assert!(block_on(open.execute(vec![t.insert(&row(501, 5)).unwrap()], Exec::Commit)).is_err());
    drop(open);
    drop(c);
    // A crash right after the flush (the orderly stop kills its threads once it left).
    node.kill();
    let node = start(dir.path(), 64 << 20);
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = c.table("test", "stopkv").unwrap();
    for i in 0..50 {
        assert_eq!(read_v(&c, &t, i), Some(i), "acknowledged row {i}");
    }
    assert_eq!(read_v(&c, &t, 500), None);
    assert_eq!(read_v(&c, &t, 501), None);
    drop(c);
    node.shutdown();
}

/// A durable commit does not wait for the next epoch interval: its tc asks for the round that
/// makes its epoch durable at once (`EpochWanted`). With an interval of ten minutes, durable
/// commits still complete, one after another, and survive a crash right after.
#[test]
fn durable_commits_start_their_epochs_flush_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path(), 64 << 20);
    let node = {
        // The start-up epoch rounds run before the interval matters.
        cfg.node.dist.epoch_interval_ms = 600_000;
        let n = DataNode::start(cfg).expect("start");
        assert!(n.wait_started(Duration::from_secs(20)), "node started");
        n
    };
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = setup(&c, "durkv");
    let before = c.status().unwrap().durable_epoch;
    for i in 0..20 {
        let mut txn = c.begin().durable(true);
        block_on(txn.execute(vec![t.write(&row(i, i)).unwrap()], Exec::Commit)).unwrap();
    }
    assert!(c.status().unwrap().durable_epoch >= before + 20, "one round per durable commit at least");
    drop(c);
    node.kill();
    let node = start(dir.path(), 64 << 20);
    let c = Client::connect(&node.local_addr().to_string()).unwrap();
    let t = c.table("test", "durkv").unwrap();
    for i in 0..20 {
        assert_eq!(read_v(&c, &t, i), Some(i), "durable row {i}");
    }
    drop(c);
    node.shutdown();
}
