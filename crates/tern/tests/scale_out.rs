//! Online scale-out with real processes on 127.0.0.1: a cluster of one node group (two data
//! nodes, two replicas) serves writers while `tern mgm -e "CREATE NODEGROUP …"` adds two data
//! nodes as a second group; they start empty, half the partitions move to them under load, and
//! every acknowledged write is there afterwards, once, with the new group holding its share.
//! Then `DROP NODEGROUP 1` drains the group back, stops its nodes and removes it, again without
//! losing a write. Prints its seed and the move figures; rerun with TERN_SEED.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_client::{Client, ColumnType, DdlReq, ErrorCode, Exec, OpResult, ScanSpec, Table, Value, block_on};
use tern_types::cluster::ClusterState;
use tern_types::rng::Rng;
use tern_types::schema::Column;

mod common;
use common::free_port;

struct Cluster {
    dir: tempfile::TempDir,
    mgmd_port: u16,
    ports: Vec<u16>,
    mgmd: Option<Child>,
    nodes: BTreeMap<u16, Child>,
}

impl Cluster {
    /// A management node and data nodes 1 and 2 (one node group); ports for 3 and 4 too.
    fn new() -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        let mgmd_port = free_port();
        let ports: Vec<u16> = (0..4).map(|_| free_port()).collect();
        let mut text = format!(
            "replicas = 2\nldm_workers = 2\nepoch_interval_ms = 50\nheartbeat_interval_ms = 100\nfailure_timeout_ms = 1500\n\n[[mgmd]]\nid = 145\nhost = \"127.0.0.1\"\nport = {mgmd_port}\n"
        );
        for (i, p) in ports.iter().take(2).enumerate() {
            text.push_str(&format!("\n[[datanode]]\nid = {}\nhost = \"127.0.0.1\"\nport = {p}\n", i + 1));
        }
        std::fs::write(dir.path().join("cluster.toml"), text).unwrap();
        for id in 1..=4 {
            std::fs::write(
                dir.path().join(format!("dn{id}.toml")),
                format!("data_dir = {:?}\ndata_memory = \"256M\"\n", dir.path().join(format!("node-{id}"))),
            )
            .unwrap();
        }
        let d = dir.path();
        let mgmd = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["mgmd", "--config"])
            .arg(d.join("cluster.toml"))
            .args(["--node-id", "145", "--data-dir"])
            .arg(d.join("mgmd"))
            .env("TERN_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn mgmd");
        Cluster { dir, mgmd_port, ports, mgmd: Some(mgmd), nodes: BTreeMap::new() }
    }

    fn mgmd_addr(&self) -> String {
        format!("127.0.0.1:{}", self.mgmd_port)
    }

    fn addr(&self, id: u16) -> String {
        format!("127.0.0.1:{}", self.ports[id as usize - 1])
    }

    fn start(&mut self, id: u16) {
        let d = self.dir.path();
        let child = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["datanode", "--config"])
            .arg(d.join(format!("dn{id}.toml")))
            .args(["--mgmd", &self.mgmd_addr(), "--node-id", &id.to_string()])
            .env("TERN_LOG", std::env::var("TERN_TEST_LOG").unwrap_or_else(|_| "warn".into()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn data node");
        self.nodes.insert(id, child);
    }

    /// `tern mgm -e …`; panics with its output when it fails.
    fn mgm(&self, cmd: &str) -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["mgm", "--mgmd", &self.mgmd_addr(), "-e", cmd])
            .output()
            .expect("run tern mgm");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "tern mgm -e {cmd:?} failed: {text}{}", String::from_utf8_lossy(&out.stderr));
        text
    }

    fn state(&self) -> ClusterState {
        let mut c = tern_control::MgmClient::new(vec![self.mgmd_addr()]).with_role(tern_control::Role::Admin);
        c.get_state().expect("the management node answers").state
    }

    fn wait(&mut self, what: &str, within: Duration, done: impl Fn(&ClusterState) -> bool) -> ClusterState {
        let until = Instant::now() + within;
        loop {
            for (id, c) in self.nodes.iter_mut() {
                if let Some(st) = c.try_wait().unwrap() {
                    panic!("data node {id} exited: {st}");
                }
            }
            let st = tern_control::MgmClient::new(vec![self.mgmd_addr()])
                .with_role(tern_control::Role::Admin)
                .get_state()
                .map(|i| i.state);
            if let Ok(st) = &st
                && done(st)
            {
                return st.clone();
            }
            assert!(Instant::now() < until, "timed out waiting for {what}: {st:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts data nodes 1 and 2, waits until both serve clients and creates `so.t`; returns
    /// their addresses and a client of them.
    fn first_group_with_table(&mut self) -> (String, Client) {
        self.start(1);
        self.start(2);
        self.wait("the first node group", Duration::from_secs(60), |st| {
            [1, 2].iter().all(|&n| st.state_of(n) == tern_types::cluster::NodeState::Started)
        });
        let addrs = format!("{},{}", self.addr(1), self.addr(2));
        // The nodes' own view follows the management node's by a heartbeat.
        let until = Instant::now() + Duration::from_secs(30);
        while ![1, 2]
            .iter()
            .all(|&n| Client::connect(&self.addr(n)).and_then(|c| c.status()).is_ok_and(|s| s.state == "started"))
        {
            assert!(Instant::now() < until, "the data nodes do not serve");
            std::thread::sleep(Duration::from_millis(50));
        }
        let c = Client::connect(&addrs).unwrap();
        c.ddl(DdlReq::CreateDatabase { name: "so".into(), if_not_exists: false }).unwrap();
        c.ddl(DdlReq::CreateTable { table: table(), if_not_exists: false }).unwrap();
        (addrs, c)
    }

    fn rows_of(&self, id: u16) -> u64 {
        Client::connect(&self.addr(id)).and_then(|c| c.status()).map_or(0, |s| s.rows)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, mut c) in std::mem::take(&mut self.nodes) {
            let _ = c.kill();
            let _ = c.wait();
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
        database: "so".into(),
        name: "t".into(),
        columns: vec![
            Column::new("id", ColumnType::BigInt { unsigned: false }).not_null(),
            Column::new("v", ColumnType::BigInt { unsigned: false }).not_null(),
            Column::new("pad", ColumnType::VarChar { len: 200 }),
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

/// Acknowledged writes: id -> value.
type Acked = Arc<Mutex<BTreeMap<i64, i64>>>;

/// Writers upsert rows until `stop`; each returns the longest time between two of its acks.
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
                let t = c.table("so", "t").unwrap();
                let (mut last_ack, mut worst, mut i) = (Instant::now(), Duration::ZERO, 0i64);
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let id = (w as i64) * 1_000_000 + rng.below(3000) as i64;
                    let op = t.write(&[Value::Int(id), Value::Int(i), Value::str(&"p".repeat(100))]).unwrap();
                    match block_on(c.begin().execute(vec![op], Exec::Commit)) {
                        Ok(_) => {
                            acked.lock().unwrap().insert(id, i);
                            worst = worst.max(last_ack.elapsed());
                            last_ack = Instant::now();
                        }
                        Err(e) if e.code == ErrorCode::UnknownResult => {
                            acked.lock().unwrap().remove(&id);
                        }
                        Err(e) => {
                            assert!(e.is_temporary(), "writer {w}: {e}");
                            std::thread::sleep(Duration::from_millis(2));
                        }
                    }
                }
                worst.max(last_ack.elapsed())
            })
        })
        .collect()
}

/// Every acknowledged write reads back, and a full scan sees each key exactly once; returns
/// (acknowledged keys, keys the scan saw).
fn verify(c: &Client, acked: &Acked) -> (usize, usize) {
    let t = c.table("so", "t").unwrap();
    let want: Vec<(i64, i64)> = acked.lock().unwrap().iter().map(|(k, v)| (*k, *v)).collect();
    for chunk in want.chunks(200) {
        let ops = chunk.iter().map(|(id, _)| t.read(&[Value::Int(*id)]).unwrap()).collect();
        let got = c.blocking().execute(ops).expect("read back");
        for ((id, v), r) in chunk.iter().zip(got) {
            match r {
                OpResult::Row(b) => assert_eq!(t.decode_row(&b).unwrap()[1], Value::Int(*v), "key {id}"),
                other => panic!("acknowledged key {id} is missing: {other:?}"),
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    for row in c.blocking().scan_all(ScanSpec::table(t.id())).expect("full scan") {
        let id = t.decode_row(&row).unwrap()[0].as_i128().unwrap() as i64;
        assert!(seen.insert(id), "the scan saw key {id} twice");
    }
    for (id, _) in &want {
        assert!(seen.contains(id), "the scan missed key {id}");
    }
    (want.len(), seen.len())
}

/// Waits until the data nodes' row counts (published about once a second, and counting a
/// moved partition's old copy until it is dropped) add up to `want`.
fn wait_rows(cl: &Cluster, nodes: &[u16], want: usize) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let have: u64 = nodes.iter().map(|&n| cl.rows_of(n)).sum();
        if have as usize == want {
            return;
        }
        assert!(Instant::now() < until, "rows on nodes {nodes:?}: {have}, the table holds {want}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn moves_running(st: &ClusterState) -> usize {
    st.placed.values().filter(|p| p.moving.is_some()).count()
}

#[test]
fn a_node_group_is_added_and_dropped_online_under_writes_losing_nothing() {
    let seed = tern_testkit::seed();
    println!("seed {seed}");
    let mut cl = Cluster::new();
    let (addrs, c) = cl.first_group_with_table();

    // A TTL table across the move: rows that expire while their partitions move are purged by
    // the new primaries; rows that never expire stay.
    let mut tt = Table::new(
        "so",
        "ttl",
        vec![
            Column::new("id", ColumnType::BigInt { unsigned: false }).not_null(),
            Column::new("exp", ColumnType::DateTime { fsp: 3 }),
        ],
        vec![0],
    );
    tt.ttl = Some(tern_types::schema::Ttl::new(1, 0));
    c.ddl(DdlReq::CreateTable { table: tt, if_not_exists: false }).unwrap();
    let tt = c.table("so", "ttl").unwrap();
    let now_us = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
    let ttl_rows = (0..200)
        .map(|i| {
            let exp = if i % 2 == 0 { Value::DateTime(now_us + 4_000_000) } else { Value::Null };
            tt.write(&[Value::Int(i), exp]).unwrap()
        })
        .collect();
    c.blocking().execute(ttl_rows).unwrap();

    let acked: Acked = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let ws = writers(addrs.clone(), 3, stop.clone(), acked.clone(), seed);
    std::thread::sleep(Duration::from_secs(1));
    let before_rows = cl.rows_of(1);

    // Add node group 1 online; its nodes start empty and partitions move to them.
    let out = cl.mgm(&format!("CREATE NODEGROUP 3@{}, 4@{}", cl.addr(3), cl.addr(4)));
    assert!(out.contains("Nodegroup 1 created"), "{out}");
    let began = Instant::now();
    cl.start(3);
    cl.start(4);
    let st = cl.wait("the partitions to move to node group 1", Duration::from_secs(120), |st| {
        st.active_groups == 2 && moves_running(st) == 0 && st.placed.values().filter(|p| p.home.group == 1).count() >= 2
    });
    let took = began.elapsed();
    stop.store(true, Ordering::Relaxed);
    let worst = ws.into_iter().map(|h| h.join().unwrap()).max().unwrap();
    let moved_rows = cl.rows_of(3);
    println!(
        "added a node group: {} partitions moved in {took:?} (about {} rows on node 3 of {before_rows}+ before); longest gap between a writer's acknowledgements {worst:?}",
        st.placed.values().filter(|p| p.home.group == 1).count(),
        moved_rows
    );
    assert!(moved_rows > 0, "node group 1 holds no rows");
    let (n, scanned) = verify(&c, &acked);
    assert!(n > 100, "too few writes: {n}");
    // The expired half is purged (the purge runs every second on each partition's primary, now
    // in either group); the other half is there, once.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let mut expired = ScanSpec::table(tt.id());
        expired.expired = true;
        let left = c.blocking().scan_all(expired).expect("scan expired rows").len();
        if left == 0
            && now_us + 4_000_000
                < std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64
        {
            break;
        }
        assert!(Instant::now() < until, "{left} expired rows were not purged across the move");
        std::thread::sleep(Duration::from_millis(200));
    }
    let live: Vec<i64> = c
        .blocking()
        .scan_all(ScanSpec::table(tt.id()))
        .unwrap()
        .iter()
        .map(|r| tt.decode_row(r).unwrap()[0].as_i128().unwrap() as i64)
        .collect();
    let mut sorted = live.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..200).filter(|i| i % 2 == 1).collect::<Vec<i64>>(), "the rows that never expire");
    // The groups split the rows between them (the old copies were dropped).
    wait_rows(&cl, &[1, 3], scanned + live.len());
    wait_rows(&cl, &[2, 4], scanned + live.len());
    // Distribution awareness across nodes: a client that follows the map (as API servers do)
    // and knows every data node starts each single-row transaction on a node holding the row,
    // so every read is served where it is coordinated.
    tern_client::metrics::set_cluster_map(Arc::new(cl.state()));
    let all = (1..=4).map(|n| cl.addr(n)).collect::<Vec<_>>().join(",");
    let routed = Client::connect(&all).unwrap();
    let counters = |c: &Client| -> Vec<(u64, u64)> {
        (1..=4)
            .map(|n| {
                let st = c.status_at(&cl.addr(n)).unwrap();
                let get = |k: &str| st.counters.iter().find(|(n, _)| n == k).map_or(0, |(_, v)| *v);
                (get("reads_here"), get("reads_elsewhere"))
            })
            .collect()
    };
    let before = counters(&routed);
    let rt = routed.table("so", "t").unwrap();
    let keys: Vec<i64> = acked.lock().unwrap().keys().copied().take(200).collect();
    for k in &keys {
        let r = routed.blocking().execute(vec![rt.read(&[Value::Int(*k)]).unwrap()]).unwrap();
        assert!(matches!(r[0], OpResult::Row(_)), "key {k}");
    }
    let after = counters(&routed);
    let here: u64 = before.iter().zip(&after).map(|(b, a)| a.0 - b.0).sum();
    let elsewhere: u64 = before.iter().zip(&after).map(|(b, a)| a.1 - b.1).sum();
    println!("single-row reads with the map: {here} served where coordinated, {elsewhere} forwarded");
    assert_eq!((here, elsewhere), (keys.len() as u64, 0), "per node before {before:?} after {after:?}");
    let coordinators = before.iter().zip(&after).filter(|(b, a)| a.0 > b.0).count();
    assert!(coordinators >= 2, "both node groups coordinate: {before:?} {after:?}");
    // A batch of reads over both groups is split per node: each part read where it lives, the
    // answers in the batch's order.
    let want: Vec<(i64, i64)> = {
        let a = acked.lock().unwrap();
        keys.iter().map(|k| (*k, a[k])).collect()
    };
    let before = counters(&routed);
    let ops = want.iter().map(|(k, _)| rt.read(&[Value::Int(*k)]).unwrap()).collect();
    let got = routed.blocking().execute(ops).unwrap();
    for ((k, v), r) in want.iter().zip(&got) {
        match r {
            OpResult::Row(b) => assert_eq!(rt.decode_row(b).unwrap()[..2], [Value::Int(*k), Value::Int(*v)]),
            other => panic!("key {k}: {other:?}"),
        }
    }
    let after = counters(&routed);
    let elsewhere: u64 = before.iter().zip(&after).map(|(b, a)| a.1 - b.1).sum();
    assert_eq!(elsewhere, 0, "a split batch forwarded reads: {before:?} {after:?}");
    // ALTER TABLE … REORGANIZE PARTITION's request (as SQL sends it) reaches the control plane
    // through the dict; an unknown table is refused.
    c.ddl(DdlReq::Reorganize { database: "so".into(), table: "t".into() }).expect("reorganize");
    let e = c.ddl(DdlReq::Reorganize { database: "so".into(), table: "nope".into() }).unwrap_err();
    assert!(e.message.contains("doesn't exist"), "{e}");
    assert!(cl.mgm("ALTER TABLE so.t REORGANIZE PARTITION").contains("reorganising"));
    let show = cl.mgm("SHOW");
    assert!(show.contains("Nodegroup: 1") && show.contains("id=4"), "{show}");
    assert!(cl.mgm("REPORT MEMORYUSAGE").contains("Node 3: Data usage is"));

    // Drop it again under writes: drained, its nodes stopped, removed.
    let stop = Arc::new(AtomicBool::new(false));
    let ws = writers(addrs.clone(), 2, stop.clone(), acked.clone(), seed ^ 7);
    let out = cl.mgm("DROP NODEGROUP 1");
    assert!(out.contains("Nodegroup 1 dropped"), "{out}");
    stop.store(true, Ordering::Relaxed);
    for h in ws {
        h.join().unwrap();
    }
    for id in [3, 4] {
        let mut child = cl.nodes.remove(&id).unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < until, "data node {id} did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let st = cl.state();
    assert_eq!(st.groups().len(), 1);
    assert!(!st.nodes.contains_key(&3));
    let (_, scanned) = verify(&c, &acked);
    wait_rows(&cl, &[1], scanned + live.len());
    wait_rows(&cl, &[2], scanned + live.len());
}

/// One writer's committed transactions: (commit epoch, id, value; None = deleted).
type Commits = Vec<(u64, i64, Option<i64>)>;

/// A writer over ids `w * 1_000_000 + 0..2000` (upserts, and deletes of a fifth of the rows it
/// wrote) until `stop`,
/// recording each commit's epoch; ids whose outcome is unknown are returned apart.
fn epoch_writer(addrs: String, w: i64, stop: Arc<AtomicBool>, seed: u64) -> (Commits, Vec<i64>) {
    let mut rng = Rng::new(seed ^ (w as u64 + 11));
    let c = Client::connect(&addrs).expect("connect");
    let t = c.table("so", "t").unwrap();
    let (mut done, mut unknown, mut i) = (Vec::new(), Vec::new(), 0i64);
    let mut live = std::collections::BTreeSet::new();
    let until = Instant::now() + Duration::from_secs(120);
    while !stop.load(Ordering::Relaxed) && Instant::now() < until {
        i += 1;
        let id = w * 1_000_000 + rng.below(2000) as i64;
        let delete = live.contains(&id) && rng.below(5) == 0;
        let op = if delete {
            t.delete(&[Value::Int(id)]).unwrap()
        } else {
            t.write(&[Value::Int(id), Value::Int(i), Value::str(&"q".repeat(150))]).unwrap()
        };
        let mut txn = c.begin();
        match block_on(txn.execute(vec![op], Exec::Commit)) {
            Ok(_) => {
                if delete {
                    live.remove(&id);
                } else {
                    live.insert(id);
                }
                done.push((txn.commit_epoch().expect("committed"), id, (!delete).then_some(i)))
            }
            Err(e) if e.code == ErrorCode::UnknownResult => unknown.push(id),
            Err(e) => {
                assert!(e.is_temporary(), "writer {w}: {e}");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    (done, unknown)
}

/// `tern backup` while a table's partitions move to an added node group (source and target both
/// log a moving partition, the target a generation up): backups are taken one after another
/// under writes until one ran across a move's steps, and that one restored into a fresh
/// cluster holds exactly the writers' state at its end epoch.
#[test]
fn a_backup_taken_while_partitions_move_restores_the_state_at_its_end_epoch() {
    let seed = tern_testkit::seed();
    println!("seed {seed}");
    let mut cl = Cluster::new();
    let (addrs, c) = cl.first_group_with_table();
    let t = c.table("so", "t").unwrap();
    // Enough rows that the moves take a while: 150,000 of about 200 bytes.
    let mut model: BTreeMap<i64, i64> = BTreeMap::new();
    for chunk in (0..150_000i64).collect::<Vec<_>>().chunks(500) {
        let ops = chunk
            .iter()
            .map(|&id| t.write(&[Value::Int(id + 10_000_000), Value::Int(-1), Value::str(&"r".repeat(180))]).unwrap())
            .collect();
        c.blocking().execute(ops).unwrap();
        model.extend(chunk.iter().map(|&id| (id + 10_000_000, -1)));
    }
    // The group is added without reorganising, so that its nodes' joining (which fails a
    // running change log: the backup would be taken again) is over before the moves begin.
    let out = cl.mgm(&format!("CREATE NODEGROUP 3@{}, 4@{} NOREORGANIZE", cl.addr(3), cl.addr(4)));
    assert!(out.contains("Nodegroup 1 created"), "{out}");
    cl.start(3);
    cl.start(4);
    cl.wait("node group 1 in service", Duration::from_secs(60), |st| {
        st.active_groups == 2 && [3, 4].iter().all(|&n| st.state_of(n) == tern_types::cluster::NodeState::Started)
    });

    let stop = Arc::new(AtomicBool::new(false));
    let ws: Vec<_> = (0..2)
        .map(|w| {
            let (a, s) = (addrs.clone(), stop.clone());
            std::thread::spawn(move || epoch_writer(a, w, s, seed))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // Backups back to back from just before the reorganisation until one spans a move's step.
    let backups = tempfile::tempdir().unwrap();
    let mut spanning = None;
    let mut reorganised = false;
    for attempt in 0..40 {
        let dir = backups.path().join(format!("b{attempt}"));
        let before = cl.state().placed;
        let child = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["backup", "--addr", &addrs, "--dir"])
            .arg(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tern backup");
        if !reorganised {
            std::thread::sleep(Duration::from_millis(150));
            assert!(cl.mgm("ALTER TABLE so.t REORGANIZE PARTITION").contains("reorganising"));
            reorganised = true;
        }
        let out = child.wait_with_output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "tern backup failed while partitions moved: {text}");
        assert!(!text.contains("taking it again"), "a move failed the backup's change log: {text}");
        let after = cl.state().placed;
        // Which group leads each placed partition: a switch (or a move's end) changes it.
        let leads = |p: &BTreeMap<(u32, u32), tern_types::cluster::Placed>| -> BTreeMap<(u32, u32), u32> {
            p.iter()
                .map(|(k, pl)| {
                    let switched = pl.moving.as_ref().filter(|m| m.phase == tern_types::cluster::MovePhase::Switched);
                    (*k, switched.map_or(pl.home.group, |m| m.to.group))
                })
                .collect()
        };
        let switched = leads(&before) != leads(&after);
        println!("backup {attempt}: a partition switched to its new group during it: {switched}");
        if switched {
            spanning = Some(dir);
            break;
        }
    }
    let dir = spanning.expect("no backup ran across a step of the moves");
    cl.wait("the moves to end", Duration::from_secs(120), |st| moves_running(st) == 0);
    stop.store(true, Ordering::Relaxed);
    let mut unknown = std::collections::BTreeSet::new();
    let mut commits: Commits = Vec::new();
    for h in ws {
        let (done, u) = h.join().unwrap();
        commits.extend(done);
        unknown.extend(u);
    }
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("BACKUP.json")).unwrap()).unwrap();
    let stop_epoch = manifest["stop_epoch"].as_u64().unwrap();
    // Each writer's commits are in its own order; their keys are disjoint.
    for (epoch, id, v) in &commits {
        if *epoch <= stop_epoch {
            match v {
                Some(v) => model.insert(*id, *v),
                None => model.remove(id),
            };
        }
    }
    let during = commits.iter().filter(|(e, _, _)| *e <= stop_epoch).count();
    assert!(
        during > 0 && commits.len() > during,
        "writes before and after the end epoch: {during} of {}",
        commits.len()
    );
    drop(c);
    drop(cl);

    // Restore into a fresh cluster of one node group.
    let mut target = Cluster::new();
    target.start(1);
    target.start(2);
    target.wait("the target cluster", Duration::from_secs(60), |st| {
        [1, 2].iter().all(|&n| st.state_of(n) == tern_types::cluster::NodeState::Started)
    });
    let taddrs = format!("{},{}", target.addr(1), target.addr(2));
    let until = Instant::now() + Duration::from_secs(30);
    let out = loop {
        let out = Command::new(env!("CARGO_BIN_EXE_tern"))
            .args(["restore", "--addr", &taddrs, "--dir"])
            .arg(&dir)
            .output()
            .unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        if out.status.success() || Instant::now() > until || !text.contains("emporary") {
            break (out.status.success(), text);
        }
        std::thread::sleep(Duration::from_millis(200)); // the target's nodes still starting
    };
    assert!(out.0, "tern restore failed: {}", out.1);
    let tc = Client::connect(&taddrs).unwrap();
    let tt = tc.table("so", "t").unwrap();
    let mut got: BTreeMap<i64, i64> = BTreeMap::new();
    for row in tc.blocking().scan_all(ScanSpec::table(tt.id())).unwrap() {
        let v = tt.decode_row(&row).unwrap();
        got.insert(v[0].as_i128().unwrap() as i64, v[1].as_i128().unwrap() as i64);
    }
    for id in &unknown {
        got.remove(id);
        model.remove(id);
    }
    let wrong: Vec<_> = model.iter().filter(|(k, v)| got.get(k) != Some(v)).take(5).collect();
    let extra: Vec<_> = got.iter().filter(|(k, _)| !model.contains_key(k)).take(5).collect();
    println!(
        "restored {} rows at epoch {stop_epoch} ({during} of {} writes before it); {} ids of unknown outcome left out",
        got.len(),
        commits.len(),
        unknown.len()
    );
    assert!(
        wrong.is_empty() && extra.is_empty(),
        "restored state differs: wrong or missing {wrong:?}, extra {extra:?}"
    );
}

/// NDB's `N RESTART`, `N STOP` and `N START` without a supervisor: the data node stops in order
/// and starts again in its own process (the same pid: nothing restarts it from outside), rejoins
/// as a new incarnation and holds every row; after `N STOP` it waits in place until `N START`.
#[test]
fn n_restart_and_n_stop_start_work_without_a_supervisor() {
    let mut cl = Cluster::new();
    let (_, c) = cl.first_group_with_table();
    let started = |n: u16| move |st: &ClusterState| st.state_of(n) == tern_types::cluster::NodeState::Started;
    let t = c.table("so", "t").unwrap();
    let ops = (0..500).map(|i| t.write(&[Value::Int(i), Value::Int(i * 3), Value::Null]).unwrap()).collect();
    c.blocking().execute(ops).unwrap();
    let pid = cl.nodes[&2].id();
    let inc = cl.state().nodes[&2].incarnation;

    let out = cl.mgm("2 RESTART");
    assert!(out.contains("Node 2: started"), "{out}");
    let st = cl.state();
    assert!(st.nodes[&2].incarnation > inc && started(2)(&st), "{:?}", st.nodes);
    assert!(cl.nodes.get_mut(&2).unwrap().try_wait().unwrap().is_none(), "the data node's process exited");
    let status = Client::connect(&cl.addr(2)).and_then(|c| c.status()).expect("node 2 answers");
    assert_eq!(status.pid, pid, "node 2 started again in the same process");

    // `N STOP`: it leaves and waits in place; `N START` lets it rejoin.
    let inc = st.nodes[&2].incarnation;
    assert!(cl.mgm("2 STOP").contains("Node 2: stop requested"));
    cl.wait("node 2 to stop", Duration::from_secs(60), |st| st.state_of(2) == tern_types::cluster::NodeState::Down);
    std::thread::sleep(Duration::from_millis(500));
    assert!(cl.nodes.get_mut(&2).unwrap().try_wait().unwrap().is_none(), "the stopped node's process exited");
    assert_eq!(cl.state().state_of(2), tern_types::cluster::NodeState::Down, "it waits for START");
    assert!(cl.mgm("2 START").contains("may start again"));
    cl.wait("node 2 to rejoin", Duration::from_secs(120), |st| started(2)(st) && st.nodes[&2].incarnation > inc);

    // Every row is on node 2 again: read there alone.
    let c2 = Client::connect(&cl.addr(2)).unwrap();
    let t2 = c2.table("so", "t").unwrap();
    let got = c2.blocking().scan_all(ScanSpec::table(t2.id())).unwrap().len();
    assert_eq!(got, 500);
    let status = c2.status().unwrap();
    assert_eq!(status.pid, pid);
}
