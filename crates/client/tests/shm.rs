//! The shared-memory transporter end to end: a real data node and clients in this process that
//! reach it through the rings (negotiated by `transporter = "auto"`), TCP when asked, fallback
//! and refusal when the node does not offer it, frames larger than a ring, and the loss of
//! either side.

use std::time::{Duration, Instant};
use tern_client::{
    Client, ClientOptions, ColumnType, DdlReq, ErrorCode, Exec, OpResult, ScanSpec, Table, Value, block_on,
};
use tern_kernel::NodeConfig;
use tern_runtime::{DataNode, DataNodeConfig, Transporter};
use tern_types::schema::Column;

fn start(dir: &std::path::Path, transporter: Transporter, lock_wait_ms: u64) -> DataNode {
    let mut node = NodeConfig::new(1, 2, 256 << 20);
    node.dist.epoch_interval_ms = 20;
    node.ldm.lock_wait_timeout_ms = lock_wait_ms;
    let cfg = DataNodeConfig { node, transporter, ..DataNodeConfig::local(dir, 256 << 20) };
    let n = DataNode::start(cfg).expect("start");
    assert!(n.wait_started(Duration::from_secs(20)));
    n
}

fn connect(node: &DataNode, transporter: Transporter) -> tern_client::Result<Client> {
    let opts = ClientOptions { transporter, ..ClientOptions::default() };
    Client::connect_with(&node.local_addr().to_string(), opts)
}

fn table() -> Table {
    Table {
        id: 0,
        database: "s".into(),
        name: "t".into(),
        columns: vec![
            Column::new("id", ColumnType::Int { unsigned: false }).not_null(),
            Column::new("v", ColumnType::VarChar { len: 200 }),
        ],
        primary_key: vec![0],
        partition_key: vec![0],
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    }
}

fn setup(c: &Client) -> tern_client::TableHandle {
    c.ddl(DdlReq::CreateDatabase { name: "s".into(), if_not_exists: true }).unwrap();
    c.ddl(DdlReq::CreateTable { table: table(), if_not_exists: true }).unwrap();
    c.table("s", "t").unwrap()
}

#[test]
fn auto_uses_shared_memory_on_this_host_and_tcp_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), Transporter::Auto, 1000);
    let shm = connect(&node, Transporter::Auto).unwrap();
    assert_eq!(shm.transporter(), "shm");
    let tcp = connect(&node, Transporter::Tcp).unwrap();
    assert_eq!(tcp.transporter(), "tcp");
    let t = setup(&shm);
    let row = |i: i32| vec![Value::Int(i as i64), Value::str(&format!("v{i}"))];
    shm.blocking().execute((0..100).map(|i| t.insert(&row(i)).unwrap()).collect()).unwrap();
    // Both see the same rows, whichever way they came in.
    let t2 = tcp.table("s", "t").unwrap();
    for i in [0, 57, 99] {
        match &tcp.blocking().execute(vec![t2.read(&[Value::Int(i)]).unwrap()]).unwrap()[0] {
            OpResult::Row(b) => assert_eq!(t2.decode_row(b).unwrap()[1], Value::str(&format!("v{i}"))),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_node_without_shared_memory_falls_back_or_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), Transporter::Tcp, 1000);
    assert_eq!(connect(&node, Transporter::Auto).unwrap().transporter(), "tcp");
    let e = connect(&node, Transporter::Shm).err().expect("no shared memory offered");
    assert_eq!(e.code, ErrorCode::NodeFailure);
    assert!(e.message.contains("shared memory"), "{e}");
}

/// Requests and replies larger than a ring (1 MiB) stream through it in pieces.
#[test]
fn frames_larger_than_the_ring() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), Transporter::Shm, 1000);
    let c = connect(&node, Transporter::Shm).unwrap();
    let t = setup(&c);
    let long = "x".repeat(180);
    let n = 12_000;
    let ops = (0..n).map(|i| t.insert(&[Value::Int(i), Value::str(&long)]).unwrap()).collect();
    c.blocking().execute(ops).unwrap(); // ~2.3 MB in one request
    let reads = (0..n).map(|i| t.read(&[Value::Int(i)]).unwrap()).collect();
    let got = c.blocking().execute(reads).unwrap(); // ~2.3 MB in one reply
    assert_eq!(got.len(), n as usize);
    assert!(got.iter().all(|r| matches!(r, OpResult::Row(_))));
    let rows = c.blocking().scan_all(ScanSpec::table(t.id())).unwrap();
    assert_eq!(rows.len(), n as usize);
}

/// A client that goes away (its process dies: the Unix socket closes) has its transaction
/// aborted at once: another client gets the lock long before the lock wait timeout.
#[test]
fn a_client_that_goes_away_releases_its_locks() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), Transporter::Shm, 20_000);
    let a = connect(&node, Transporter::Shm).unwrap();
    let b = connect(&node, Transporter::Shm).unwrap();
    let t = setup(&a);
    a.blocking().execute(vec![t.insert(&[Value::Int(1), Value::str("a")]).unwrap()]).unwrap();
    let mut holder = a.begin();
    block_on(holder.execute(vec![t.read_locked(&[Value::Int(1)], true).unwrap()], Exec::NoCommit)).unwrap();
    let started = Instant::now();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        drop(holder);
        drop(a);
    });
    let tb = b.table("s", "t").unwrap();
    b.blocking().execute(vec![tb.write(&[Value::Int(1), Value::str("b")]).unwrap()]).unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "waited {:?}", started.elapsed());
}

/// The data node stops: a client's waiting and later requests fail at once with a node
/// failure, not after the request timeout.
#[test]
fn a_node_that_stops_fails_the_clients_requests() {
    let dir = tempfile::tempdir().unwrap();
    let node = start(dir.path(), Transporter::Shm, 1000);
    let c = connect(&node, Transporter::Shm).unwrap();
    let t = setup(&c);
    c.blocking().execute(vec![t.insert(&[Value::Int(1), Value::str("a")]).unwrap()]).unwrap();
    node.kill();
    let started = Instant::now();
    let e = c.blocking().execute(vec![t.read(&[Value::Int(1)]).unwrap()]).unwrap_err();
    assert!(e.code == ErrorCode::NodeFailure || e.is_temporary(), "{e}");
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
}
