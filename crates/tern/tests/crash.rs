//! Crash recovery with real processes: a data node is killed with SIGKILL while clients commit
//! durable transactions, restarted from its data directory, and checked: every acknowledged durable
//! transaction is fully present and no transaction is half-present. Repeated over several cycles.
//! Prints its seed; rerun with TERN_SEED.

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_client::{Client, ColumnType, DdlReq, Exec, ScanSpec, Table, Value, block_on};
use tern_types::rng::Rng;
use tern_types::schema::Column;

const ROWS_PER_TXN: i64 = 6;

mod common;
use common::free_port;

fn spawn(config: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["datanode", "--config"])
        .arg(config)
        .env("TERN_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn data node")
}

fn connect_started(addr: &str, child: &mut Child) -> Client {
    let until = Instant::now() + Duration::from_secs(60);
    while Instant::now() < until {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("data node exited during start-up: {st}");
        }
        if let Ok(c) = Client::connect(addr)
            && c.status().map(|s| s.state == "started").unwrap_or(false)
        {
            return c;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("data node did not start");
}

fn table() -> Table {
    Table {
        id: 0,
        database: "crash".into(),
        name: "t".into(),
        columns: vec![
            Column::new("id", ColumnType::BigInt { unsigned: false }).not_null(),
            Column::new("txn", ColumnType::BigInt { unsigned: false }).not_null(),
            Column::new("pad", ColumnType::VarChar { len: 64 }),
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

#[test]
fn sigkill_during_durable_writes_loses_nothing_acknowledged() {
    let seed = tern_testkit::seed();
    println!("seed = {seed} (rerun with TERN_SEED={seed})");
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let cfg = dir.path().join("dn.toml");
    std::fs::write(
        &cfg,
        format!(
            "data_dir = {:?}\nlisten = \"{addr}\"\ndata_memory = \"256M\"\nldm_workers = 2\nepoch_interval_ms = 20\ncheckpoint_redo_mb = 1\nredo_segment_mb = 1\n",
            dir.path().join("node").display().to_string()
        ),
    )
    .unwrap();
    let mut child = spawn(&cfg);
    let c = connect_started(&addr, &mut child);
    c.ddl(DdlReq::CreateDatabase { name: "crash".into(), if_not_exists: true }).unwrap();
    c.ddl(DdlReq::CreateTable { table: table(), if_not_exists: true }).unwrap();
    drop(c);
    let acked: Arc<Mutex<BTreeSet<i64>>> = Arc::default();
    let mut rng = Rng::new(seed);
    let mut next_txn = 1i64;
    for cycle in 0..4 {
        let stop = Arc::new(AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..3 {
            let addr = addr.clone();
            let stop = stop.clone();
            let acked = acked.clone();
            let first = next_txn + w * 1_000_000;
            writers.push(std::thread::spawn(move || {
                let Ok(c) = Client::connect(&addr) else {
                    return;
                };
                let Ok(t) = c.table("crash", "t") else { return };
                let mut txn_id = first;
                while !stop.load(Ordering::Relaxed) {
                    let ops: Vec<_> = (0..ROWS_PER_TXN)
                        .map(|j| {
                            t.insert(&[
                                Value::Int(txn_id * 100 + j),
                                Value::Int(txn_id),
                                Value::str("x".repeat(40).as_str()),
                            ])
                            .unwrap()
                        })
                        .collect();
                    let mut txn = c.begin().durable(true);
                    match block_on(txn.execute(ops, Exec::Commit)) {
                        Ok(_) => {
                            acked.lock().unwrap().insert(txn_id);
                        }
                        Err(_) => return, // the node died
                    }
                    txn_id += 1;
                }
            }));
        }
        next_txn += 10_000_000;
        std::thread::sleep(Duration::from_millis(300 + rng.below(700)));
        // SIGKILL: no shutdown code runs.
        child.kill().unwrap();
        child.wait().unwrap();
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        child = spawn(&cfg);
        let c = connect_started(&addr, &mut child);
        let t = c.table("crash", "t").unwrap();
        let rows = c.blocking().scan_all(ScanSpec::table(t.id())).unwrap();
        let mut by_txn: BTreeMap<i64, BTreeSet<i64>> = BTreeMap::new();
        for r in rows {
            let v = t.decode_row(&r).unwrap();
            let id = v[0].as_i128().unwrap() as i64;
            let txn = v[1].as_i128().unwrap() as i64;
            assert_eq!(id / 100, txn, "row belongs to its transaction");
            by_txn.entry(txn).or_default().insert(id);
        }
        for (txn, ids) in &by_txn {
            assert_eq!(ids.len() as i64, ROWS_PER_TXN, "cycle {cycle}: transaction {txn} is half-present: {ids:?}");
        }
        let acked_now = acked.lock().unwrap().clone();
        let missing: Vec<_> = acked_now.iter().filter(|t| !by_txn.contains_key(t)).take(5).collect();
        assert!(missing.is_empty(), "cycle {cycle}: acknowledged durable transactions lost: {missing:?}");
        assert!(!acked_now.is_empty(), "the workload committed something");
        println!("cycle {cycle}: {} transactions present, {} acknowledged", by_txn.len(), acked_now.len());
    }
    child.kill().unwrap();
    child.wait().unwrap();
}
