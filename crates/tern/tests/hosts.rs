//! A cluster over "real hosts": every role in a network namespace of its own with its own
//! address (see `netns`): three management nodes, data nodes in node groups of two replicas and
//! two API servers, each on its own host, on the ports a real deployment uses; the clients in two
//! more namespaces. Every process is a real `tern`; the test talks to them only from the client
//! namespaces, through the Redis protocol and the management protocol, with the cluster secret.
//!
//! Tests: the loss of a whole host, a network partition (the minority is fenced, no split
//! brain), latency with loss, and adding a node group under load. Each prints its seed (for the
//! writers and the impairment); rerun one with TERN_SEED. They run one at a time (a cluster of
//! nine processes per test on a small machine).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tern_types::cluster::{ClusterState, NodeState};
use tern_types::rng::Rng;

mod netns;
use netns::{Impair, Net};

/// One test at a time: each runs a whole cluster.
static SERIAL: Mutex<()> = Mutex::new(());

/// A test's start: one at a time (the guard), the harness available (None: skipped, as
/// `netns::required` allows), and its seed, printed.
fn begin() -> Option<(std::sync::MutexGuard<'static, ()>, u64)> {
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !netns::required() {
        return None;
    }
    let seed = tern_testkit::seed();
    println!("seed {seed}");
    Some((serial, seed))
}

const PASSWORD: &str = "hosts-test-pw";
const MGMD_IDS: [u16; 3] = [145, 146, 147];

struct Cluster {
    net: Net,
    secret: std::path::PathBuf,
    /// "ip:1186,…"
    mgmds: String,
    /// Data node hosts whose node is in the cluster file (others wait for CREATE NODEGROUP).
    configured: usize,
    /// API server hosts started with `--location-domain`.
    api_domains: Vec<(String, u8)>,
}

impl Cluster {
    /// Hosts m1-m3, d1-d4, a1, a2, c1, c2; `groups` node groups in the cluster file (the rest of
    /// d1-d4 are hosts without a process yet). Starts every configured process.
    fn start(dir: &std::path::Path, impair: Option<Impair>, groups: usize) -> Cluster {
        Cluster::start_with(dir, impair, groups, &[])
    }

    /// `start` with location domains: the data nodes' in the cluster file, the API servers'
    /// on their command line (hosts not named have none).
    fn start_with(dir: &std::path::Path, impair: Option<Impair>, groups: usize, domains: &[(&str, u8)]) -> Cluster {
        let mut net = Net::new(dir, impair);
        for h in ["m1", "m2", "m3", "d1", "d2", "d3", "d4", "a1", "a2", "c1", "c2"] {
            net.add_host(h);
        }
        net.start();
        let secret = dir.join("cluster-secret");
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f =
                std::fs::OpenOptions::new().create(true).truncate(true).write(true).mode(0o600).open(&secret).unwrap();
            f.write_all(format!("{:032x}{:032x}\n", tern_testkit::seed(), 0x7e27u64).as_bytes()).unwrap();
        }
        let mgmds: Vec<String> = ["m1", "m2", "m3"].iter().map(|h| format!("{}:1186", net.ip_of(h))).collect();
        let mut text = String::from(
            "replicas = 2\nldm_workers = 1\nepoch_interval_ms = 50\nheartbeat_interval_ms = 300\nfailure_timeout_ms = 3000\n",
        );
        for (i, h) in ["m1", "m2", "m3"].iter().enumerate() {
            text.push_str(&format!("\n[[mgmd]]\nid = {}\nhost = \"{}\"\nport = 1186\n", MGMD_IDS[i], net.ip_of(h)));
        }
        let configured = groups * 2;
        for n in 1..=configured {
            text.push_str(&format!(
                "\n[[datanode]]\nid = {n}\nhost = \"{}\"\nport = 11860\n",
                net.ip_of(&format!("d{n}"))
            ));
            if let Some((_, d)) = domains.iter().find(|(h, _)| *h == format!("d{n}")) {
                text.push_str(&format!("location_domain = {d}\n"));
            }
        }
        std::fs::write(dir.join("cluster.toml"), text).unwrap();
        for n in 1..=4 {
            std::fs::write(
                dir.join(format!("dn{n}.toml")),
                format!("data_dir = {:?}\ndata_memory = \"128M\"\n", dir.join(format!("d{n}-data"))),
            )
            .unwrap();
        }
        std::fs::write(dir.join("api.toml"), format!("[redis]\nrequirepass = \"{PASSWORD}\"\n")).unwrap();
        let api_domains =
            domains.iter().filter(|(h, _)| h.starts_with('a')).map(|(h, d)| (h.to_string(), *d)).collect();
        let mut c = Cluster { net, secret, mgmds: mgmds.join(","), configured, api_domains };
        for (i, h) in ["m1", "m2", "m3"].iter().enumerate() {
            let args = vec![
                "mgmd".into(),
                "--config".into(),
                dir.join("cluster.toml").display().to_string(),
                "--node-id".into(),
                MGMD_IDS[i].to_string(),
                "--data-dir".into(),
                dir.join(format!("{h}-data")).display().to_string(),
            ];
            let env = c.env();
            c.net.spawn(h, "mgmd", &args, &env);
        }
        for n in 1..=configured as u16 {
            c.start_datanode(n);
        }
        c.wait_state("every data node started", Duration::from_secs(120), |st| {
            (1..=configured as u16).all(|n| st.state_of(n) == NodeState::Started)
        });
        for h in ["a1", "a2"] {
            c.start_api(h);
        }
        for h in ["a1", "a2"] {
            let addr = c.redis_addr(h);
            let until = Instant::now() + Duration::from_secs(60);
            while !c.net.in_ns("c1", || {
                Resp::connect(&addr).and_then(|mut r| r.cmd(&["SET", "ready", "1"])).is_ok_and(|r| r == Reply::Ok)
            }) {
                assert!(Instant::now() < until, "API server {h} does not serve Redis\n{}", c.net.logs());
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        c
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![("TERN_CLUSTER_SECRET_FILE", self.secret.display().to_string())]
    }

    fn start_datanode(&mut self, n: u16) {
        let args = vec![
            "datanode".into(),
            "--config".into(),
            self.net.dir.join(format!("dn{n}.toml")).display().to_string(),
            "--mgmd".into(),
            self.mgmds.clone(),
            "--node-id".into(),
            n.to_string(),
        ];
        let env = self.env();
        self.net.spawn(&format!("d{n}"), "datanode", &args, &env);
    }

    fn start_api(&mut self, h: &str) {
        let ip = self.net.ip_of(h);
        let args: Vec<String> = [
            "api",
            "--mgmd",
            &self.mgmds,
            "--rest-ip",
            &ip,
            "--redis-ip",
            &ip,
            "--redis-port",
            "6379",
            "--no-rest",
            "--no-mysql",
            "--toml",
            &self.net.dir.join("api.toml").display().to_string(),
        ]
        .map(String::from)
        .to_vec();
        let mut args = args;
        if let Some((_, d)) = self.api_domains.iter().find(|(a, _)| a == h) {
            args.extend(["--location-domain".to_string(), d.to_string()]);
        }
        let env = self.env();
        self.net.spawn(h, "api", &args, &env);
    }

    fn redis_addr(&self, h: &str) -> String {
        format!("{}:6379", self.net.ip_of(h))
    }

    /// The cluster map as the management nodes have it, asked from client host c1.
    fn state(&self) -> Option<ClusterState> {
        let (mgmds, secret) = (self.mgmds.clone(), tern_client::secret::read_secret_file(&self.secret).unwrap());
        self.net.in_ns("c1", move || {
            let mut c = tern_control::MgmClient::new(mgmds.split(',').map(String::from).collect())
                .with_role(tern_control::Role::Admin)
                .with_secret(Some(&secret));
            c.get_state().ok().map(|i| i.state)
        })
    }

    fn wait_state(&mut self, what: &str, within: Duration, done: impl Fn(&ClusterState) -> bool) -> ClusterState {
        let until = Instant::now() + within;
        loop {
            let st = self.state();
            if let Some(st) = &st
                && done(st)
            {
                return st.clone();
            }
            assert!(Instant::now() < until, "timed out waiting for {what}: {st:?}\n{}", self.net.logs());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `tern mgm -e CMD` from client host c1.
    fn mgm(&self, cmd: &str) -> String {
        let env = self.env();
        let (ok, out, err) = self.net.tern("c1", &["mgm", "--mgmd", &self.mgmds, "-e", cmd], &env);
        assert!(ok, "tern mgm -e {cmd:?}: {out}{err}");
        out
    }
}

#[derive(Debug, PartialEq)]
enum Reply {
    Ok,
    Err(String),
    Bulk(Option<Vec<u8>>),
    Other(String),
}

/// A minimal Redis client (RESP2), authenticated.
struct Resp {
    w: TcpStream,
    r: BufReader<TcpStream>,
}

impl Resp {
    fn connect(addr: &str) -> std::io::Result<Resp> {
        let s = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.set_nodelay(true)?;
        let mut r = Resp { w: s.try_clone()?, r: BufReader::new(s) };
        match r.cmd(&["AUTH", PASSWORD])? {
            Reply::Ok => Ok(r),
            other => Err(std::io::Error::other(format!("AUTH: {other:?}"))),
        }
    }

    fn send(&mut self, args: &[&str]) -> std::io::Result<()> {
        let mut b = format!("*{}\r\n", args.len());
        for a in args {
            b.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.w.write_all(b.as_bytes())
    }

    fn read(&mut self) -> std::io::Result<Reply> {
        let mut line = String::new();
        if self.r.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end();
        Ok(match line.as_bytes().first() {
            Some(b'+') if line == "+OK" => Reply::Ok,
            Some(b'-') => Reply::Err(line[1..].to_string()),
            Some(b'$') => {
                let n: i64 = line[1..].parse().map_err(std::io::Error::other)?;
                if n < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut v = vec![0u8; n as usize + 2];
                    self.r.read_exact(&mut v)?;
                    v.truncate(n as usize);
                    Reply::Bulk(Some(v))
                }
            }
            _ => Reply::Other(line.to_string()),
        })
    }

    fn cmd(&mut self, args: &[&str]) -> std::io::Result<Reply> {
        self.send(args)?;
        self.read()
    }
}

/// What a writer saw: keys acknowledged (each written once), and each acknowledgement's time
/// and latency.
#[derive(Default)]
struct Acks {
    keys: Vec<String>,
    at: Vec<(Instant, Duration)>,
    errors: u64,
}

impl Acks {
    fn worst_gap(&self, from: Instant, to: Instant) -> Duration {
        let mut last = from;
        let mut worst = Duration::ZERO;
        for (t, _) in self.at.iter().filter(|(t, _)| *t >= from && *t <= to) {
            worst = worst.max(t.saturating_duration_since(last));
            last = *t;
        }
        worst.max(to.saturating_duration_since(last))
    }
    fn latency_percentile(&self, p: f64) -> Duration {
        let mut l: Vec<Duration> = self.at.iter().map(|(_, d)| *d).collect();
        l.sort();
        if l.is_empty() { Duration::ZERO } else { l[((l.len() - 1) as f64 * p) as usize] }
    }
}

/// A writer on client host `host`: SETs fresh keys `tag:i` through the API servers (the first
/// one it reaches, moving on after an error) until `stop` or `limit`, at most one every
/// `pace`.
fn writer(
    net: &Net,
    host: &str,
    apis: Vec<String>,
    tag: String,
    stop: Arc<AtomicBool>,
    seed: u64,
) -> std::thread::JoinHandle<Acks> {
    net.spawn_in(host, move || {
        let mut rng = Rng::new(seed);
        let mut acks = Acks::default();
        let mut conn: Option<Resp> = None;
        let until = Instant::now() + Duration::from_secs(300);
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) && Instant::now() < until {
            if conn.is_none() {
                let addr = &apis[rng.below(apis.len() as u64) as usize];
                conn = Resp::connect(addr).ok();
                if conn.is_none() {
                    acks.errors += 1;
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            }
            i += 1;
            let key = format!("{tag}:{i}");
            let t = Instant::now();
            match conn.as_mut().unwrap().cmd(&["SET", &key, &format!("v{i}")]) {
                Ok(Reply::Ok) => {
                    acks.keys.push(key);
                    acks.at.push((Instant::now(), t.elapsed()));
                }
                Ok(_) => {
                    acks.errors += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(_) => {
                    acks.errors += 1;
                    conn = None;
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        acks
    })
}

/// Every acknowledged key reads back with its value, through API server `api` from `host`
/// (pipelined GETs; a temporary error is retried).
fn verify(net: &Net, host: &str, api: &str, keys: &[String]) {
    let (api, keys) = (api.to_string(), keys.to_vec());
    let missing = net.in_ns(host, move || {
        let mut missing = Vec::new();
        for chunk in keys.chunks(100) {
            let until = Instant::now() + Duration::from_secs(60);
            loop {
                let got: std::io::Result<Vec<Reply>> = (|| {
                    let mut r = Resp::connect(&api)?;
                    for k in chunk {
                        r.send(&["GET", k])?;
                    }
                    chunk.iter().map(|_| r.read()).collect()
                })();
                match got {
                    Ok(replies) if !replies.iter().any(|r| matches!(r, Reply::Err(_))) => {
                        for (k, r) in chunk.iter().zip(replies) {
                            let want = format!("v{}", k.rsplit(':').next().unwrap());
                            if r != Reply::Bulk(Some(want.into_bytes())) {
                                missing.push(format!("{k}: {r:?}"));
                            }
                        }
                        break;
                    }
                    other => {
                        assert!(Instant::now() < until, "cannot read back: {other:?}");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }
        }
        missing
    });
    assert!(
        missing.is_empty(),
        "{} acknowledged writes lost, e.g. {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
}

fn apis(c: &Cluster) -> Vec<String> {
    vec![c.redis_addr("a1"), c.redis_addr("a2")]
}

/// The loss of a whole host, twice: a data node's host (its process SIGKILLed, its link down)
/// while writers go on through both API servers, then an API server's host; the cluster keeps
/// acknowledging, the lost node is declared failed, and when its host comes back (its disk
/// survived) the data node rejoins by a node restart. Nothing acknowledged is lost.
#[test]
fn losing_a_whole_host_loses_no_acknowledged_write() {
    let Some((_serial, seed)) = begin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path(), None, 2);
    let stop = Arc::new(AtomicBool::new(false));
    let ws: Vec<_> = (0..2).map(|w| writer(&c.net, "c1", apis(&c), format!("w{w}"), stop.clone(), seed ^ w)).collect();
    std::thread::sleep(Duration::from_secs(2));
    let lost = Instant::now();
    c.net.kill_host("d1");
    let st = c.wait_state("node 1 declared failed", Duration::from_secs(30), |st| st.state_of(1) == NodeState::Down);
    assert_eq!(st.state_of(2), NodeState::Started);
    std::thread::sleep(Duration::from_secs(2));
    // An API server's host too: the writers move to the other one.
    c.net.kill_host("a2");
    std::thread::sleep(Duration::from_secs(3));
    let back = Instant::now();
    c.net.revive_host("d1");
    c.start_datanode(1);
    c.wait_state("node 1 back", Duration::from_secs(120), |st| st.state_of(1) == NodeState::Started);
    c.net.revive_host("a2");
    c.start_api("a2");
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let acks: Vec<Acks> = ws.into_iter().map(|h| h.join().unwrap()).collect();
    let worst = acks.iter().map(|a| a.worst_gap(lost, back)).max().unwrap();
    let keys: Vec<String> = acks.iter().flat_map(|a| a.keys.clone()).collect();
    let after_loss = acks.iter().flat_map(|a| &a.at).filter(|(t, _)| *t > lost + Duration::from_secs(5)).count();
    println!(
        "{} writes acknowledged ({} after the loss settled), longest gap {worst:?} while hosts were lost",
        keys.len(),
        after_loss
    );
    assert!(after_loss > 20, "the cluster stopped acknowledging after losing a host\n{}", c.net.logs());
    verify(&c.net, "c2", &c.redis_addr("a1"), &keys);
    assert!(c.net.reap().is_empty(), "a process stopped\n{}", c.net.logs());
}

/// A network partition: management node 1, data nodes 1 and 3 (one of each node group), API
/// server 2 and client host c2 are cut off from the rest. The majority (two management nodes,
/// nodes 2 and 4, API server 1, c1) goes on; the minority's data nodes fence themselves (exit
/// code 4) and acknowledge nothing once their lease is over. After the partition heals they
/// restart and copy back in, and every write acknowledged on either side is there.
#[test]
fn a_partitioned_minority_is_fenced_and_no_write_is_lost() {
    let Some((_serial, seed)) = begin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path(), None, 2);
    let stop = Arc::new(AtomicBool::new(false));
    let major = writer(&c.net, "c1", vec![c.redis_addr("a1")], "maj".into(), stop.clone(), seed);
    let minor = writer(&c.net, "c2", vec![c.redis_addr("a2")], "min".into(), stop.clone(), seed ^ 1);
    std::thread::sleep(Duration::from_secs(2));
    let cut = Instant::now();
    c.net.partition(&["m1", "d1", "d3", "a2", "c2"]);
    // The minority's data nodes fence themselves.
    let until = Instant::now() + Duration::from_secs(30);
    let mut fenced = Vec::new();
    while fenced.len() < 2 {
        for n in [1, 3] {
            if let Some(st) = c.net.exited(&format!("d{n}"), "datanode") {
                assert_eq!(st.code(), Some(4), "data node {n} exited with {st}\n{}", c.net.logs());
                fenced.push((n, cut.elapsed()));
            }
        }
        assert!(Instant::now() < until, "the minority's data nodes did not fence ({fenced:?})\n{}", c.net.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let fenced_at = Instant::now();
    let st = c.wait_state("nodes 1 and 3 declared failed", Duration::from_secs(30), |st| {
        st.state_of(1) == NodeState::Down && st.state_of(3) == NodeState::Down
    });
    assert_eq!((st.state_of(2), st.state_of(4)), (NodeState::Started, NodeState::Started));
    std::thread::sleep(Duration::from_secs(3));
    c.net.heal();
    let healed = Instant::now();
    c.start_datanode(1);
    c.start_datanode(3);
    c.wait_state("nodes 1 and 3 back", Duration::from_secs(120), |st| {
        st.state_of(1) == NodeState::Started && st.state_of(3) == NodeState::Started
    });
    stop.store(true, Ordering::Relaxed);
    let (major, minor) = (major.join().unwrap(), minor.join().unwrap());
    let majority_during = major.at.iter().filter(|(t, _)| *t > fenced_at && *t < healed).count();
    let minority_after_fence = minor.at.iter().filter(|(t, _)| *t > fenced_at && *t < healed).count();
    // A lease is at most a failure timeout (3 s here) from the last heartbeat before the cut.
    let minority_after_lease =
        minor.at.iter().filter(|(t, _)| *t > cut + Duration::from_millis(3_500) && *t < healed).count();
    println!(
        "fenced after {fenced:?}; majority acknowledged {majority_during} writes while cut off, the minority {minority_after_fence}; minority writes acknowledged in all {}",
        minor.keys.len()
    );
    assert!(majority_during > 20, "the majority stopped serving\n{}", c.net.logs());
    assert_eq!(minority_after_fence, 0, "the fenced minority acknowledged writes");
    assert_eq!(minority_after_lease, 0, "the minority acknowledged writes after its lease");
    // Fenced within lease + failure timeout + the heartbeats' own timeouts (about 3.5 failure
    // timeouts), not after the management client's long defaults.
    assert!(fenced.iter().all(|(_, t)| *t < Duration::from_secs(14)), "fenced late: {fenced:?}");
    let mut keys = major.keys.clone();
    keys.extend(minor.keys.iter().cloned());
    verify(&c.net, "c1", &c.redis_addr("a1"), &keys);
    verify(&c.net, "c2", &c.redis_addr("a2"), &minor.keys);
}

/// 2–5 ms one-way latency and 1 % frame loss between every pair of hosts (netem where the
/// kernel has it, else the harness's userspace switch): the cluster starts, nobody is declared
/// failed, writes are acknowledged and read back. Prints the SET latencies.
#[test]
fn a_cluster_over_a_slow_lossy_network_serves_and_loses_nothing() {
    let Some((_serial, seed)) = begin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path(), Some(Impair::uniform(2_000, 5_000, 100, seed)), 2);
    println!("impaired by {}", c.net.impaired_by);
    let stop = Arc::new(AtomicBool::new(false));
    let ws: Vec<_> = (0..3).map(|w| writer(&c.net, "c1", apis(&c), format!("w{w}"), stop.clone(), seed ^ w)).collect();
    std::thread::sleep(Duration::from_secs(10));
    stop.store(true, Ordering::Relaxed);
    let acks: Vec<Acks> = ws.into_iter().map(|h| h.join().unwrap()).collect();
    let st = c.state().expect("the management nodes answer");
    for n in 1..=4 {
        assert_eq!(st.state_of(n), NodeState::Started, "node {n}\n{}", c.net.logs());
    }
    assert!(c.net.reap().is_empty(), "a process stopped\n{}", c.net.logs());
    let mut all = Acks::default();
    for a in acks {
        all.keys.extend(a.keys);
        all.at.extend(a.at);
        all.errors += a.errors;
    }
    println!(
        "{} SETs acknowledged in 10 s ({} errors); latency p50 {:?}, p99 {:?}",
        all.keys.len(),
        all.errors,
        all.latency_percentile(0.5),
        all.latency_percentile(0.99)
    );
    assert!(all.keys.len() > 100, "too few writes");
    verify(&c.net, "c2", &c.redis_addr("a2"), &all.keys);
    if let Some(s) = c.net.stop_switch() {
        println!("userspace switch: {} frames, {} dropped", s.frames, s.dropped);
        assert!(s.dropped > 0, "no frame was dropped");
    }
}

/// Online add node group across hosts: a cluster of one node group serves writers; `tern mgm`
/// on a client host adds data nodes 3 and 4 (hosts d3, d4) as node group 1, they start empty and
/// half the partitions move to them. Every acknowledged write is there afterwards.
#[test]
fn a_node_group_is_added_across_hosts_under_load() {
    let Some((_serial, seed)) = begin() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::start(dir.path(), None, 1);
    assert_eq!(c.configured, 2);
    let stop = Arc::new(AtomicBool::new(false));
    let ws: Vec<_> = (0..2).map(|w| writer(&c.net, "c1", apis(&c), format!("w{w}"), stop.clone(), seed ^ w)).collect();
    std::thread::sleep(Duration::from_secs(3));
    let began = Instant::now();
    // (Each added node names its location domain.)
    let out = c.mgm(&format!("CREATE NODEGROUP 3@{}:11860/1, 4@{}:11860/2", c.net.ip_of("d3"), c.net.ip_of("d4")));
    assert!(out.contains("Nodegroup 1 created"), "{out}");
    c.start_datanode(3);
    c.start_datanode(4);
    let st = c.wait_state("partitions moved to node group 1", Duration::from_secs(180), |st| {
        st.active_groups == 2
            && st.placed.values().all(|p| p.moving.is_none())
            && st.placed.values().filter(|p| p.home.group == 1).count() >= 2
    });
    let took = began.elapsed();
    assert_eq!((st.config.domain_of(3), st.config.domain_of(4)), (1, 2));
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let acks: Vec<Acks> = ws.into_iter().map(|h| h.join().unwrap()).collect();
    let worst = acks.iter().map(|a| a.worst_gap(began, began + took)).max().unwrap();
    let keys: Vec<String> = acks.iter().flat_map(|a| a.keys.clone()).collect();
    println!(
        "node group 1 added across hosts: {} partitions moved in {took:?}; {} writes acknowledged, longest gap {worst:?}",
        st.placed.values().filter(|p| p.home.group == 1).count(),
        keys.len()
    );
    let show = c.mgm("SHOW");
    assert!(show.contains("Nodegroup: 1"), "{show}");
    verify(&c.net, "c2", &c.redis_addr("a2"), &keys);
    assert!(c.net.reap().is_empty(), "a process stopped\n{}", c.net.logs());
}

impl Cluster {
    /// Every data node's counters (by node id), asked from client host `host` with the
    /// native client.
    fn counters(&self, host: &str) -> std::collections::BTreeMap<u16, std::collections::BTreeMap<String, u64>> {
        let addrs: Vec<String> =
            (1..=self.configured).map(|n| format!("{}:11860", self.net.ip_of(&format!("d{n}")))).collect();
        let secret = tern_client::secret::read_secret_file(&self.secret).unwrap();
        self.net.in_ns(host, move || {
            let opts = tern_client::ClientOptions { cluster_secret: Some(secret), ..Default::default() };
            let c = tern_client::Client::connect_with(&addrs.join(","), opts).expect("a data node answers");
            addrs
                .iter()
                .map(|a| {
                    let st = c.status_at(a).expect("status");
                    (st.node_id, st.counters.into_iter().collect())
                })
                .collect()
        })
    }
}

/// GETs of random keys among `keys` through `api` from `host`, one at a time for `n` reads:
/// each read's latency, sorted.
fn timed_gets(net: &Net, host: &str, api: &str, keys: &[String], n: usize, seed: u64) -> Vec<Duration> {
    let (api, keys) = (api.to_string(), keys.to_vec());
    net.in_ns(host, move || {
        let mut rng = Rng::new(seed);
        let mut r = Resp::connect(&api).expect("connect");
        let mut lat = Vec::with_capacity(n);
        for _ in 0..n {
            let k = &keys[rng.below(keys.len() as u64) as usize];
            let t = Instant::now();
            let got = r.cmd(&["GET", k]).expect("GET");
            lat.push(t.elapsed());
            assert!(matches!(got, Reply::Bulk(Some(_))), "{k}: {got:?}");
        }
        lat.sort();
        lat
    })
}

fn delta(
    before: &std::collections::BTreeMap<u16, std::collections::BTreeMap<String, u64>>,
    after: &std::collections::BTreeMap<u16, std::collections::BTreeMap<String, u64>>,
    node: u16,
    name: &str,
) -> u64 {
    after[&node].get(name).copied().unwrap_or(0) - before[&node].get(name).copied().unwrap_or(0)
}

/// Location domains over two "zones" 2-3 ms apart (0.05-0.15 ms within one): data nodes 1, 2,
/// API server 1 and client host c1 in zone 1; nodes 3, 4, API server 2 and c2 in zone 2. The
/// cluster file's node groups spread over the zones ({1,3}, {2,4} rather than {1,2}, {3,4}),
/// and the reads of a zone-2 client through its zone-2 API server are coordinated and served by
/// zone-2 data nodes only (the nodes' counters say where each read went). The same cluster
/// without location domains is then measured for comparison; both p50 read latencies print.
#[test]
fn reads_stay_in_their_location_domain() {
    let Some((_serial, seed)) = begin() else { return };
    let zones: Vec<(&str, u8)> = vec![
        ("d1", 1),
        ("d2", 1),
        ("a1", 1),
        ("c1", 1),
        ("m1", 1),
        ("d3", 2),
        ("d4", 2),
        ("a2", 2),
        ("c2", 2),
        ("m2", 2),
        ("m3", 3),
    ];
    let impair = Impair {
        same_zone_us: (50, 150),
        cross_zone_us: (2_000, 3_000),
        loss_per_10k: 0,
        zones: zones.iter().map(|(h, z)| (h.to_string(), *z)).collect(),
        seed,
    };
    let mut p50s = Vec::new();
    for with_domains in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let domains: Vec<(&str, u8)> = if with_domains {
            zones.iter().filter(|(h, _)| h.starts_with(['d', 'a'])).copied().collect()
        } else {
            vec![]
        };
        let c = Cluster::start_with(dir.path(), Some(impair.clone()), 2, &domains);
        let st = c.state().unwrap();
        if with_domains {
            assert_eq!(st.groups(), vec![vec![1, 3], vec![2, 4]], "each node group spans both zones");
        } else {
            assert_eq!(st.groups(), vec![vec![1, 2], vec![3, 4]]);
        }
        // 300 keys written through API server 1.
        let keys: Vec<String> = (0..300).map(|i| format!("ld:{i}")).collect();
        let (api1, ks) = (c.redis_addr("a1"), keys.clone());
        c.net.in_ns("c1", move || {
            let mut r = Resp::connect(&api1).unwrap();
            for k in &ks {
                assert_eq!(r.cmd(&["SET", k, "v"]).unwrap(), Reply::Ok);
            }
        });
        timed_gets(&c.net, "c2", &c.redis_addr("a2"), &keys, 50, seed); // warm the connections
        let before = c.counters("c2");
        let lat = timed_gets(&c.net, "c2", &c.redis_addr("a2"), &keys, 1_000, seed ^ 1);
        let after = c.counters("c2");
        let p = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize];
        println!(
            "{}: GET through the zone-2 API server from zone 2, p50 {:?}, p90 {:?}, p99 {:?}",
            if with_domains { "with location domains" } else { "without location domains" },
            p(0.5),
            p(0.9),
            p(0.99)
        );
        p50s.push(p(0.5));
        let reads = |n: u16| ["reads_here", "reads_in_domain", "reads_elsewhere"].map(|k| delta(&before, &after, n, k));
        println!("reads by node (here, in domain, elsewhere): {:?}", (1..=4).map(reads).collect::<Vec<_>>());
        if with_domains {
            for n in [1, 2] {
                assert_eq!(reads(n), [0, 0, 0], "node {n} (zone 1) coordinated reads of the zone-2 API server");
            }
            let (r3, r4) = (reads(3), reads(4));
            assert_eq!((r3[2], r4[2]), (0, 0), "a read left zone 2");
            assert!(r3.iter().chain(&r4).sum::<u64>() >= 1_000, "the reads were not all counted: {r3:?} {r4:?}");
        }
    }
    println!("p50 read latency: with location domains {:?}, without {:?}", p50s[0], p50s[1]);
}
