//! A replicated cluster of real processes on 127.0.0.1: one management node and two data nodes
//! in one node group with two replicas. Writers commit through the native client (given both
//! data node addresses) while one data node is killed with SIGKILL; then the survivors must hold
//! every acknowledged write, writers must resume within seconds, the killed node restarts, copies
//! what it missed and serves again, and both replicas hold the same rows. A whole-cluster SIGKILL
//! then recovers to a consistent cut holding every write acknowledged as durable.
//! Prints its seed; rerun with TERN_SEED.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_client::{Client, ColumnType, DdlReq, ErrorCode, Exec, OpResult, Table, Value, block_on};
use tern_types::rng::Rng;
use tern_types::schema::Column;

mod common;
use common::free_port;

struct Cluster {
    dir: tempfile::TempDir,
    mgmd_port: u16,
    ports: Vec<u16>,
    mgmd: Option<Child>,
    nodes: Vec<Option<Child>>,
}

impl Cluster {
    fn new() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mgmd_port = free_port();
        let ports = vec![free_port(), free_port()];
        let mut text = format!(
            "replicas = 2\nldm_workers = 2\nepoch_interval_ms = 50\nheartbeat_interval_ms = 100\nfailure_timeout_ms = 800\n\n[[mgmd]]\nid = 145\nhost = \"127.0.0.1\"\nport = {mgmd_port}\n"
        );
        for (i, p) in ports.iter().enumerate() {
            text.push_str(&format!("\n[[datanode]]\nid = {}\nhost = \"127.0.0.1\"\nport = {p}\n", i + 1));
        }
        std::fs::write(dir.path().join("cluster.toml"), text).unwrap();
        for id in 1..=2 {
            std::fs::write(
                dir.path().join(format!("dn{id}.toml")),
                format!("data_dir = {:?}\ndata_memory = \"256M\"\n", dir.path().join(format!("node-{id}"))),
            )
            .unwrap();
        }
        let mut c = Cluster { dir, mgmd_port, ports, mgmd: None, nodes: vec![None, None] };
        c.start_mgmd();
        c
    }

    fn mgmd_addr(&self) -> String {
        format!("127.0.0.1:{}", self.mgmd_port)
    }

    fn addrs(&self) -> String {
        self.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect::<Vec<_>>().join(",")
    }

    fn start_mgmd(&mut self) {
        let d = self.dir.path();
        self.mgmd = Some(
            Command::new(env!("CARGO_BIN_EXE_tern"))
                .args(["mgmd", "--config"])
                .arg(d.join("cluster.toml"))
                .args(["--node-id", "145", "--data-dir"])
                .arg(d.join("mgmd"))
                .env("TERN_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn mgmd"),
        );
    }

    fn start(&mut self, id: usize) {
        let d = self.dir.path();
        self.nodes[id - 1] = Some(
            Command::new(env!("CARGO_BIN_EXE_tern"))
                .args(["datanode", "--config"])
                .arg(d.join(format!("dn{id}.toml")))
                .args(["--mgmd", &self.mgmd_addr(), "--node-id", &id.to_string()])
                .env("TERN_LOG", std::env::var("TERN_TEST_LOG").unwrap_or_else(|_| "warn".into()))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn data node"),
        );
    }

    fn kill(&mut self, id: usize) {
        if let Some(mut c) = self.nodes[id - 1].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits until the node reports itself started (serving as a full replica).
    fn wait_started(&mut self, id: usize, within: Duration) {
        let addr = format!("127.0.0.1:{}", self.ports[id - 1]);
        let until = Instant::now() + within;
        loop {
            if let Some(st) = self.nodes[id - 1].as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!("data node {id} exited: {st}");
            }
            if Client::connect(&addr).and_then(|c| c.status()).is_ok_and(|s| s.state == "started")
                && self.state_of(id) == "started"
            {
                return;
            }
            assert!(Instant::now() < until, "data node {id} did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The node's state as the management node sees it.
    fn state_of(&self, id: usize) -> String {
        let mut c = tern_control::MgmClient::new(vec![self.mgmd_addr()]).with_role(tern_control::Role::Admin);
        c.status().map(|s| s.state.state.state_of(id as u16).name().to_string()).unwrap_or_default()
    }

    fn rows_of(&self, id: usize) -> u64 {
        Client::connect(&format!("127.0.0.1:{}", self.ports[id - 1])).and_then(|c| c.status()).map_or(0, |s| s.rows)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for id in 1..=self.nodes.len() {
            self.kill(id);
        }
        if let Some(mut m) = self.mgmd.take() {
            let _ = m.kill();
            let _ = m.wait();
        }
    }
}

fn table() -> Table {
    Table {
        id: 0,
        database: "cl".into(),
        name: "t".into(),
        columns: vec![
            Column::new("id", ColumnType::BigInt { unsigned: false }).not_null(),
            Column::new("v", ColumnType::BigInt { unsigned: false }).not_null(),
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

/// Acknowledged writes: id -> value, and whether the ack was durable.
type Acked = Arc<Mutex<BTreeMap<i64, (i64, bool)>>>;

/// Writers commit single-row upserts (every third durable) until `stop`; they record each
/// acknowledged write and the longest time between two acknowledgements.
fn writers(
    addrs: String,
    n: usize,
    stop: Arc<AtomicBool>,
    acked: Acked,
    seed: u64,
) -> Vec<std::thread::JoinHandle<Duration>> {
    (0..n)
        .map(|w| {
            let (addrs, stop, acked) = (addrs.clone(), stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(seed ^ (w as u64 + 1));
                let c = Client::connect(&addrs).expect("connect");
                let t = c.table("cl", "t").unwrap();
                let mut last_ack = Instant::now();
                let mut worst = Duration::ZERO;
                let mut i = 0i64;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let id = (w as i64) * 1_000_000 + (rng.below(500) as i64);
                    let v = i;
                    let durable = i % 3 == 0;
                    let mut txn = c.begin().durable(durable);
                    let op = t.write(&[Value::Int(id), Value::Int(v)]).unwrap();
                    match block_on(txn.execute(vec![op], Exec::Commit)) {
                        Ok(_) => {
                            acked.lock().unwrap().insert(id, (v, durable));
                            worst = worst.max(last_ack.elapsed());
                            last_ack = Instant::now();
                        }
                        Err(e) if e.code == ErrorCode::UnknownResult => {
                            // Might have committed: this writer never touches the key again.
                            acked.lock().unwrap().remove(&id);
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(e) => {
                            assert!(e.is_temporary(), "writer {w}: {e}");
                            std::thread::sleep(Duration::from_millis(5));
                        }
                    }
                }
                worst.max(last_ack.elapsed())
            })
        })
        .collect()
}

fn verify(c: &Client, acked: &Acked, durable_only: bool) -> usize {
    let t = c.table("cl", "t").unwrap();
    let want: Vec<(i64, (i64, bool))> =
        acked.lock().unwrap().iter().filter(|(_, (_, d))| !durable_only || *d).map(|(k, v)| (*k, *v)).collect();
    let mut checked = 0;
    for chunk in want.chunks(200) {
        let ops = chunk.iter().map(|(id, _)| t.read(&[Value::Int(*id)]).unwrap()).collect();
        let got = c.blocking().execute(ops).expect("read back");
        for ((id, (v, _)), r) in chunk.iter().zip(got) {
            match r {
                OpResult::Row(b) => {
                    let row = t.decode_row(&b).unwrap();
                    if durable_only {
                        // A later non-durable write to the key may be lost: at least this one.
                        assert!(
                            row[1].as_i128().unwrap() as i64 >= *v,
                            "key {id}: value {:?} older than acked {v}",
                            row[1]
                        );
                    } else {
                        assert_eq!(row[1], Value::Int(*v), "key {id}");
                    }
                }
                other => panic!("acknowledged key {id} is missing: {other:?}"),
            }
            checked += 1;
        }
    }
    checked
}

#[test]
fn sigkill_of_a_data_node_loses_no_acknowledged_write_and_it_rejoins() {
    let seed = tern_testkit::seed();
    println!("seed {seed}");
    let mut cl = Cluster::new();
    cl.start(1);
    cl.start(2);
    cl.wait_started(1, Duration::from_secs(60));
    cl.wait_started(2, Duration::from_secs(60));
    let c = Client::connect(&cl.addrs()).unwrap();
    c.ddl(DdlReq::CreateDatabase { name: "cl".into(), if_not_exists: false }).unwrap();
    c.ddl(DdlReq::CreateTable { table: table(), if_not_exists: false }).unwrap();

    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let ws = writers(cl.addrs(), 4, stop.clone(), acked.clone(), seed);
    std::thread::sleep(Duration::from_millis(800));
    // Kill the node the clients reach first (and the master).
    let killed_at = Instant::now();
    cl.kill(1);
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let worst: Vec<Duration> = ws.into_iter().map(|h| h.join().unwrap()).collect();
    let worst = worst.into_iter().max().unwrap();
    println!("longest gap between acknowledgements: {worst:?} (kill at +{:?})", killed_at.elapsed());
    assert!(worst < Duration::from_secs(3), "clients stalled for {worst:?}");
    let n = verify(&c, &acked, false);
    assert!(n > 50, "too few writes: {n}");
    assert_eq!(cl.state_of(1), "down");

    // The killed node restarts, copies what it missed, and serves as a full replica.
    cl.start(1);
    cl.wait_started(1, Duration::from_secs(60));
    let rows = (cl.rows_of(1), cl.rows_of(2));
    assert_eq!(rows.0, rows.1, "both replicas hold the same rows after the copy");
    // The master is node 2 now (node 1 rejoined later): kill it too; node 1 takes over, node 2
    // restarts and copies back, under writes.
    let stop = Arc::new(AtomicBool::new(false));
    let ws = writers(cl.addrs(), 2, stop.clone(), acked.clone(), seed ^ 7);
    std::thread::sleep(Duration::from_millis(300));
    cl.kill(2);
    std::thread::sleep(Duration::from_millis(300));
    cl.start(2);
    cl.wait_started(2, Duration::from_secs(60));
    stop.store(true, Ordering::Relaxed);
    for h in ws {
        h.join().unwrap();
    }
    verify(&c, &acked, false);
    // With node 2 gone, node 1 alone has everything.
    cl.kill(2);
    let until = Instant::now() + Duration::from_secs(10);
    while cl.state_of(2) != "down" {
        assert!(Instant::now() < until, "node 2 was not declared failed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let c1 = Client::connect(&format!("127.0.0.1:{}", cl.ports[0])).unwrap();
    verify(&c1, &acked, false);
}
