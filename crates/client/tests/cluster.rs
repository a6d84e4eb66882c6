//! Two data nodes in one node group with two replicas, in this process on 127.0.0.1: every
//! write reaches both replicas through the node-to-node transporter, either node coordinates
//! transactions over partitions whose primary is on the other, DDL issued at one node reaches
//! both, and a whole-cluster restart recovers both nodes to the same epoch.

use std::sync::Arc;
use std::time::Duration;
use tern_client::{Client, Column, ColumnType, DdlReq, ErrorCode, Exec, OpResult, Table, TableHandle, Value};
use tern_kernel::NodeConfig;
use tern_runtime::{DataNode, DataNodeConfig};
use tern_types::cluster::{ClusterConfig, ClusterState, DataNodeSpec, MgmdSpec};

use tern_testkit::ports::free_port;

fn cluster(ports: &[u16]) -> Arc<ClusterState> {
    let cfg = ClusterConfig {
        replicas: 2,
        data_nodes: ports
            .iter()
            .enumerate()
            .map(|(i, &port)| DataNodeSpec { id: i as u16 + 1, host: "127.0.0.1".into(), port, location_domain: 0 })
            .collect(),
        mgmds: vec![MgmdSpec { id: 65, host: "127.0.0.1".into(), port: 1 }],
        ldm_workers: 1,
        epoch_interval_ms: 20,
        heartbeat_interval_ms: 100,
        failure_timeout_ms: 1000,
    };
    cfg.validate().unwrap();
    Arc::new(ClusterState::all_started(cfg))
}

/// The consistent cut of a whole-cluster restart: the smallest durable epoch in the nodes'
/// system files.
fn cut(dirs: &[&std::path::Path]) -> Option<u64> {
    // Each node's own epoch (its system file's, or a newer one its redo logs all marked), as the
    // management nodes take it at a system restart.
    dirs.iter()
        .map(|d| tern_kernel::recovery::node_epoch(&tern_runtime::fs::FsStorage::new(d)).ok().filter(|&e| e > 0))
        .collect::<Option<Vec<u64>>>()
        .and_then(|v| v.into_iter().min())
}

fn start(id: u16, state: &Arc<ClusterState>, dir: &std::path::Path, recover_to: Option<u64>) -> DataNode {
    start_with(id, state, dir, recover_to, None)
}

fn start_with(
    id: u16,
    state: &Arc<ClusterState>,
    dir: &std::path::Path,
    recover_to: Option<u64>,
    cluster_secret: Option<tern_types::secret::ClusterSecret>,
) -> DataNode {
    let port = state.config.data_node(id).unwrap().port;
    let mut node = NodeConfig::in_cluster(id, state.clone(), 64 << 20);
    node.dist.epoch_interval_ms = 20;
    node.recover_to = recover_to;
    let cfg = DataNodeConfig {
        node,
        listen: format!("127.0.0.1:{port}").parse().unwrap(),
        cluster_secret,
        ..DataNodeConfig::local(dir, 64 << 20)
    };
    DataNode::start(cfg).unwrap_or_else(|e| panic!("node {id}: {e}"))
}

fn table() -> Table {
    Table {
        id: 0,
        database: "c".into(),
        name: "t".into(),
        columns: vec![
            Column::new("id", ColumnType::BigInt { unsigned: false }).not_null(),
            Column::new("v", ColumnType::VarChar { len: 100 }),
        ],
        primary_key: vec![0],
        partition_key: vec![0],
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: "NDB_TABLE=READ_BACKUP=0".into(),
    }
}

/// Data nodes with a cluster secret prove it to each other (the peer greeting carries it):
/// writes through either node reach both replicas.
#[test]
fn nodes_with_a_cluster_secret_replicate_to_each_other() {
    let secret = tern_types::secret::ClusterSecret::new(b"the secret of this cluster").unwrap();
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let state = cluster(&[free_port(), free_port()]);
    let n1 = start_with(1, &state, d1.path(), None, Some(secret.clone()));
    let n2 = start_with(2, &state, d2.path(), None, Some(secret.clone()));
    assert!(n1.wait_started(Duration::from_secs(20)) && n2.wait_started(Duration::from_secs(20)));
    let opts = || tern_client::ClientOptions { cluster_secret: Some(secret.clone()), ..Default::default() };
    let c1 = Client::connect_with(&n1.local_addr().to_string(), opts()).unwrap();
    c1.ddl(DdlReq::CreateDatabase { name: "c".into(), if_not_exists: false }).unwrap();
    c1.ddl(DdlReq::CreateTable { table: table(), if_not_exists: false }).unwrap();
    let c2 = Client::connect_with(&n2.local_addr().to_string(), opts()).unwrap();
    let t2 = c2.table("c", "t").unwrap();
    let ops: Vec<_> = (0..100).map(|i| t2.write(&[Value::Int(i), Value::str("v")]).unwrap()).collect();
    c2.blocking().execute(ops).unwrap();
    for (n, c) in [(1, &c1), (2, &c2)] {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while c.status().unwrap().rows != 100 {
            assert!(std::time::Instant::now() < deadline, "node {n} holds {} rows", c.status().unwrap().rows);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    assert!(Client::connect(&n1.local_addr().to_string()).is_err(), "no secret, no entry");
}

#[test]
fn two_replicas_on_two_nodes_serve_replicate_and_restart_consistently() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let state = cluster(&[free_port(), free_port()]);
    let n1 = start(1, &state, d1.path(), None);
    let n2 = start(2, &state, d2.path(), None);
    assert!(n1.wait_started(Duration::from_secs(20)) && n2.wait_started(Duration::from_secs(20)));
    let c1 = Client::connect(&n1.local_addr().to_string()).unwrap();
    c1.ddl(DdlReq::CreateDatabase { name: "c".into(), if_not_exists: false }).unwrap();
    c1.ddl(DdlReq::CreateTable { table: table(), if_not_exists: false }).unwrap();
    // DDL issued at node 1 (the master) is on node 2 as well.
    let c2 = Client::connect(&n2.local_addr().to_string()).unwrap();
    let t2 = c2.table("c", "t").unwrap();
    assert_eq!(t2.table.partition_count, 2, "one partition per ldm per node");
    // Writes through node 2's coordinators (partitions with primaries on both nodes).
    let b2 = c2.blocking();
    let ops: Vec<_> = (0..200).map(|i| t2.write(&[Value::Int(i), Value::str(&format!("v{i}"))]).unwrap()).collect();
    b2.execute(ops).unwrap();
    // Both replicas hold every row.
    for (n, c) in [(1, &c1), (2, &c2)] {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while c.status().unwrap().rows != 200 {
            assert!(std::time::Instant::now() < deadline, "node {n} holds {} rows", c.status().unwrap().rows);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Read back through node 1.
    let t1 = c1.table("c", "t").unwrap();
    let b1 = c1.blocking();
    let got = b1.execute((0..200).map(|i| t1.read(&[Value::Int(i)]).unwrap()).collect()).unwrap();
    for (i, r) in got.iter().enumerate() {
        match r {
            OpResult::Row(bytes) => {
                assert_eq!(t1.decode_row(bytes).unwrap()[1], Value::str(&format!("v{i}")));
            }
            other => panic!("row {i}: {other:?}"),
        }
    }
    // A deadlock across the nodes: each transaction (one coordinated by each node) holds a row
    // whose primary is on one node and waits for the other's. Probes find the cycle: one fails
    // with 1213 (not the lock-wait timeout) and the other commits.
    let part = |id: i64| t1.partition_of(&[Value::Int(id)]).unwrap();
    let (ka, kb) = (2, (3..100).find(|&k| part(k) != part(2)).expect("a key of the other partition"));
    for round in 0..2 {
        let (mut xa, mut xb) = (c1.begin(), c2.begin());
        let w = |t: &TableHandle, k: i64, v: &str| t.write(&[Value::Int(k), Value::str(v)]).unwrap();
        tern_client::block_on(xa.execute(vec![w(&t1, ka, "a")], Exec::NoCommit)).unwrap();
        tern_client::block_on(xb.execute(vec![w(&t2, kb, "b")], Exec::NoCommit)).unwrap();
        let ta = t1.clone();
        let first = std::thread::spawn(move || {
            tern_client::block_on(xa.execute(vec![w(&ta, kb, "a")], Exec::Commit)).map(|_| ())
        });
        std::thread::sleep(Duration::from_millis(100));
        let second = tern_client::block_on(xb.execute(vec![w(&t2, ka, "b")], Exec::Commit)).map(|_| ());
        let (winner, err) = match (first.join().unwrap(), second) {
            (Ok(()), Err(e)) => ("a", e),
            (Err(e), Ok(())) => ("b", e),
            other => panic!("round {round}: expected one victim, got {other:?}"),
        };
        assert_eq!(err.code, ErrorCode::Deadlock, "round {round}: {err:?}");
        let got = b1.execute(vec![t1.read(&[Value::Int(ka)]).unwrap(), t1.read(&[Value::Int(kb)]).unwrap()]).unwrap();
        for r in got {
            match r {
                OpResult::Row(bytes) => assert_eq!(t1.decode_row(&bytes).unwrap()[1], Value::str(winner)),
                other => panic!("{other:?}"),
            }
        }
    }
    // READ_BACKUP (the default, as NDB's since 8.0.19): node 2's coordinators read the
    // partitions whose primary is node 1 at their own backup replica, and a commit acknowledged
    // through node 1 is visible there at once (backups commit before the primary answers).
    let mut rb = table();
    rb.name = "rb".into();
    rb.comment = String::new();
    c1.ddl(DdlReq::CreateTable { table: rb, if_not_exists: false }).unwrap();
    let (r1, r2) = (c1.table("c", "rb").unwrap(), c2.table("c", "rb").unwrap());
    let before = c2.status().unwrap().backup_reads;
    for i in 0..100i64 {
        let k = i % 10;
        b1.execute(vec![r1.write(&[Value::Int(k), Value::str(&format!("v{i}"))]).unwrap()]).unwrap();
        match &b2.execute(vec![r2.read(&[Value::Int(k)]).unwrap()]).unwrap()[0] {
            OpResult::Row(bytes) => assert_eq!(r2.decode_row(bytes).unwrap()[1], Value::str(&format!("v{i}"))),
            other => panic!("{other:?}"),
        }
    }
    let backup_reads = c2.status().unwrap().backup_reads - before;
    assert!((10..100).contains(&backup_reads), "{backup_reads} of 100 reads at node 2's backups");
    assert_eq!(c2.status().unwrap().backup_reads - before, backup_reads, "status itself is no read");
    // A table created with READ_BACKUP=0 reads at the primary.
    let before = c2.status().unwrap().backup_reads;
    b2.execute((0..20).map(|i| t2.read(&[Value::Int(i)]).unwrap()).collect()).unwrap();
    assert_eq!(c2.status().unwrap().backup_reads, before);
    // A transaction that wrote reads its own write at the primary.
    let mut x = c2.begin();
    tern_client::block_on(x.execute(vec![r2.write(&[Value::Int(3), Value::str("mine")]).unwrap()], Exec::NoCommit))
        .unwrap();
    match &tern_client::block_on(x.execute(vec![r2.read(&[Value::Int(3)]).unwrap()], Exec::Commit)).unwrap()[0] {
        OpResult::Row(bytes) => assert_eq!(r2.decode_row(bytes).unwrap()[1], Value::str("mine")),
        other => panic!("{other:?}"),
    }
    // A transaction spanning batches on node 1, committed durably.
    let mut txn = c1.begin().durable(true);
    tern_client::block_on(txn.execute(vec![t1.delete(&[Value::Int(0)]).unwrap()], Exec::NoCommit)).unwrap();
    tern_client::block_on(txn.execute(vec![t1.write(&[Value::Int(1), Value::str("one")]).unwrap()], Exec::Commit))
        .unwrap();
    drop((b1, b2, c1, c2));
    // Whole-cluster crash, then a system restart to the consistent cut.
    n1.kill();
    n2.kill();
    let to = cut(&[d1.path(), d2.path()]);
    assert!(to.is_some_and(|e| e > 0), "both nodes saved epochs: {to:?}");
    let n1 = start(1, &state, d1.path(), to);
    let n2 = start(2, &state, d2.path(), to);
    assert_eq!(n1.durable_epoch, n2.durable_epoch, "both nodes recover to the same epoch");
    assert!(n1.wait_started(Duration::from_secs(20)) && n2.wait_started(Duration::from_secs(20)));
    let c = Client::connect(&n2.local_addr().to_string()).unwrap();
    let t = c.table("c", "t").unwrap();
    let got = c.blocking().execute((0..200).map(|i| t.read(&[Value::Int(i)]).unwrap()).collect()).unwrap();
    assert!(matches!(got[0], OpResult::NotFound), "the durable delete survived: {:?}", got[0]);
    match &got[1] {
        OpResult::Row(b) => assert_eq!(t.decode_row(b).unwrap()[1], Value::str("one")),
        other => panic!("{other:?}"),
    }
    assert_eq!(got.iter().filter(|r| matches!(r, OpResult::Row(_))).count(), 199);
    n1.shutdown();
    n2.shutdown();
}

/// Bad input on the node-to-node port: after a greeting, an undecodable frame or a signal for
/// another node closes that connection; the node keeps serving.
#[test]
fn a_hostile_peer_connection_is_closed_and_the_node_serves_on() {
    use std::io::{Read, Write};
    let d1 = tempfile::tempdir().unwrap();
    let state = {
        let mut s = (*cluster(&[free_port(), free_port()])).clone();
        // Node 2 is registered but holds no replica (starting): node 1 serves alone, and a
        // connection greeting as node 2 (incarnation 1) is believed, so its frames are read.
        s.nodes.get_mut(&2).unwrap().state = tern_types::cluster::NodeState::Starting;
        Arc::new(s)
    };
    let n1 = start(1, &state, d1.path(), None);
    assert!(n1.wait_started(Duration::from_secs(20)));
    let addr = n1.local_addr().to_string();
    let garbage: Vec<Vec<u8>> = vec![vec![0xFF; 64], vec![], {
        // A well-formed signal addressed to node 7.
        let mut b = Vec::new();
        tern_kernel::codec::encode_signal(
            tern_kernel::signal::Addr::new(7, tern_kernel::signal::Block::Dist),
            &tern_kernel::signal::Signal::Start,
            &mut b,
        );
        b
    }];
    for payload in garbage {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut bytes = Vec::new();
        let hello = tern_wire::PeerHello { node: 2, worker: 0, incarnation: 1, target_incarnation: 1, proof: None };
        let at = tern_wire::begin_frame(&mut bytes);
        hello.encode(&mut bytes);
        tern_wire::finish_frame(&mut bytes, at);
        let at = tern_wire::begin_frame(&mut bytes);
        bytes.extend_from_slice(&payload);
        tern_wire::finish_frame(&mut bytes, at);
        s.write_all(&bytes).unwrap();
        // The node closes the connection.
        let mut buf = [0u8; 64];
        assert!(matches!(s.read(&mut buf), Ok(0) | Err(_)), "the connection is closed");
    }
    let c = Client::connect(&addr).unwrap();
    c.ddl(DdlReq::CreateDatabase { name: "c".into(), if_not_exists: false }).unwrap();
    c.ddl(DdlReq::CreateTable { table: table(), if_not_exists: false }).unwrap();
    let t = c.table("c", "t").unwrap();
    c.blocking().execute(vec![t.write(&[Value::Int(1), Value::str("x")]).unwrap()]).unwrap();
    n1.shutdown();
}
