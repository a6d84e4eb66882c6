//! The default `tern up` cluster (1 mgmd, 2 data nodes, 2 replicas, each data node serving the
//! REST, Redis and MySQL ports itself) under real
//! conditions (issue 32): an orderly stop on SIGTERM (and `tern stop`) that loses no acknowledged
//! write and declares nobody failed, a second signal that stops at once, a data node frozen by
//! SIGSTOP for less than the failure timeout (kept) and for more (declared failed, fenced,
//! rejoins), a host starved of CPU by busy processes (nobody declared failed), and repeated
//! whole-cluster SIGKILLs with restarts on the same directory (every one comes back, losing at
//! most the writes of the last epochs).
//!
//! The tests of this binary run one at a time (`SERIAL`): the starvation test must not starve the
//! others, and each cluster takes a good part of the two cores.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{child_pid, consecutive_ports, free_port, redis_cmd, redis_set};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// A `tern up` cluster's ports.
#[derive(Clone, Copy)]
struct Ports {
    mgmd: u16,
    redis: u16,
    mysql: u16,
    rest: u16,
    dn: u16,
}

impl Ports {
    fn new() -> Ports {
        Ports { mgmd: free_port(), redis: free_port(), mysql: free_port(), rest: free_port(), dn: consecutive_ports(2) }
    }
}

/// A `tern up` of a test: killed with all its children when dropped (a failing test leaves no
/// cluster behind).
struct UpProc(Child);

impl std::ops::Deref for UpProc {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for UpProc {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for UpProc {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            // Stopped first, so it starts no child again while they are killed.
            kill(self.0.id(), libc::SIGSTOP);
            for pid in children_of(self.0.id()) {
                kill(pid, libc::SIGCONT);
                kill(pid, libc::SIGKILL);
            }
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Starts `tern up` on `dir` with the default topology on `p`, logging (info and up) to
/// `dir/up-stderr.log` (appended: restarts keep the earlier runs' lines); returns it once it is
/// ready, and how long that took.
fn up(dir: &std::path::Path, p: Ports) -> (UpProc, Duration) {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("up-stderr.log")).unwrap();
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["up", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--datanode-port", &p.dn.to_string(), "--mgmd-port", &p.mgmd.to_string()])
        .args(["--rest-port", &p.rest.to_string(), "--redis-port", &p.redis.to_string()])
        .args(["--mysql-port", &p.mysql.to_string(), "--data-memory", "128M"])
        .env("TERN_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        let mut r = std::io::BufReader::new(out);
        let mut line = String::new();
        let _ = r.read_line(&mut line);
        let _ = tx.send(line);
        // Keep the pipe open (and drained) for as long as `tern up` and its children write to it.
        let _ = std::io::copy(&mut r, &mut std::io::sink());
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(line) if line.starts_with("ready:") => (UpProc(child), t0.elapsed()),
        other => {
            let _ = child.kill();
            panic!("tern up did not get ready ({other:?}); log:\n{}", log_tail(dir, 60));
        }
    }
}

fn log_of(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("up-stderr.log")).unwrap_or_default()
}

fn log_tail(dir: &std::path::Path, n: usize) -> String {
    let log = log_of(dir);
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The data node processes of `tern up` `parent` (node 1, node 2).
fn datanode_pids(parent: u32) -> Vec<Option<u32>> {
    ["datanode-1.toml", "datanode-2.toml"].iter().map(|w| child_pid(parent, w)).collect()
}

/// Every process of `tern up` `parent`: its children (mgmd, data nodes, API server).
fn children_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let ppid = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(parent) {
            out.push(pid);
        }
    }
    out
}

fn alive(pid: u32) -> bool {
    // A zombie (exited, not reaped) counts as gone.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, r)| !r.trim_start().starts_with('Z')))
}

fn kill(pid: u32, sig: i32) {
    // SAFETY: signals a process this test started (or one of its children).
    unsafe { libc::kill(pid as i32, sig) };
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}

/// (state name, incarnation) of data node `id` as the management node has it.
fn node_state(mgmd: u16, id: u16) -> Option<(String, u32)> {
    let mut m = tern_control::MgmClient::new(vec![format!("127.0.0.1:{mgmd}")]).with_role(tern_control::Role::Admin);
    m.connect_timeout = Duration::from_secs(1);
    let s = m.status().ok()?;
    let n = s.state.state.nodes.get(&id)?;
    Some((n.state.name().to_string(), n.incarnation))
}

/// A Redis client that SETs `w{i}` (i = 0, 1, ...) one at a time until stopped; returns each
/// acknowledged key's index with when it was acknowledged.
fn writer(redis: u16, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<(u64, Instant)>> {
    std::thread::spawn(move || {
        let mut acked = Vec::new();
        for i in 0..1_000_000u64 {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if redis_set(redis, &format!("w{i}")) {
                acked.push((i, Instant::now()));
            } else {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        acked
    })
}

/// Both data nodes' (state, incarnation).
fn membership(mgmd: u16) -> Vec<(String, u32)> {
    (1..=2).map(|n| node_state(mgmd, n).unwrap()).collect()
}

/// The acknowledged `w{i}` keys a Redis `writer` wrote that are not there.
fn lost_writes(redis: u16, acked: &[(u64, Instant)]) -> Vec<u64> {
    acked.iter().map(|(i, _)| *i).filter(|i| !has_key(redis, &format!("w{i}"))).collect()
}

/// Nothing happened to the cluster since `before`/`pids` were taken: nobody declared failed or
/// fenced, the same incarnations, the same data node processes.
fn assert_undisturbed(dir: &std::path::Path, p: Ports, up: u32, before: &[(String, u32)], pids: &[Option<u32>]) {
    let log = log_of(dir);
    assert!(!log.contains("declaring data nodes failed"), "declared failed:\n{}", log_tail(dir, 60));
    assert!(!log.contains("stopping this data node at once"), "a node fenced itself:\n{}", log_tail(dir, 60));
    assert_eq!(before, membership(p.mgmd), "membership changed:\n{}", log_tail(dir, 40));
    assert_eq!(datanode_pids(up), pids, "a data node restarted:\n{}", log_tail(dir, 40));
}

/// SIGTERM to `tern up`: it stops in order and exits 0.
fn stop_up(child: &mut UpProc) {
    kill(child.id(), libc::SIGTERM);
    assert!(wait_exit(child, Duration::from_secs(30)).is_some_and(|s| s.success()));
}

fn has_key(redis: u16, k: &str) -> bool {
    redis_cmd(redis, &["GET", k]) == "$1\r\nv\r\n"
}

/// The writes acknowledged before SIGTERM are all there after the restart, the stop is quick
/// and orderly (no data node declared failed, every process gone, exit code 0), and `tern stop`
/// does the same from another shell. The first SIGTERM comes half a second after `ready:`.
#[test]
fn sigterm_stops_in_order_and_loses_no_acknowledged_write() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let p = Ports::new();
    // Right after ready.
    let (mut child, _) = up(dir.path(), p);
    std::thread::sleep(Duration::from_millis(500));
    let procs = children_of(child.id());
    assert_eq!(procs.len(), 3, "mgmd and two data nodes (which serve the front doors)");
    let t0 = Instant::now();
    kill(child.id(), libc::SIGTERM);
    let st = wait_exit(&mut child, Duration::from_secs(20))
        .unwrap_or_else(|| panic!("no stop:\n{}", log_tail(dir.path(), 40)));
    let took = t0.elapsed();
    assert!(st.success(), "{st}: {}", log_tail(dir.path(), 40));
    assert!(procs.iter().all(|&p| !alive(p)), "a child outlived tern up");
    assert!(took < Duration::from_secs(10), "the stop took {took:?}");

    // Under writes: everything acknowledged before the signal is there after the restart.
    let (mut child, _) = up(dir.path(), p);
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(p.redis, stop.clone());
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    kill(child.id(), libc::SIGTERM);
    let st = wait_exit(&mut child, Duration::from_secs(20))
        .unwrap_or_else(|| panic!("no stop:\n{}", log_tail(dir.path(), 40)));
    let took = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let acked: Vec<u64> = w.join().unwrap().into_iter().filter(|(_, at)| *at < t0).map(|(i, _)| i).collect();
    assert!(st.success(), "{st}");
    assert!(acked.len() > 10, "too few writes: {}", acked.len());
    println!("orderly stop under writes took {took:?} ({} writes acknowledged before it)", acked.len());
    let log = log_of(dir.path());
    assert!(!log.contains("declaring data nodes failed"), "a stopping node was declared failed:\n{log}");
    assert!(log.contains("left the cluster in order"), "{}", log_tail(dir.path(), 40));

    let (mut child, _) = up(dir.path(), p);
    let lost: Vec<&u64> = acked.iter().filter(|i| !has_key(p.redis, &format!("w{i}"))).collect();
    assert!(lost.is_empty(), "acknowledged before SIGTERM and lost: {lost:?}");
    // Both data nodes restarted from their disks (both left with the last epoch): no copy.
    assert!(!log_of(dir.path()).contains("state=copying"), "a node had to copy after an orderly stop");
    // `tern stop` from another shell.
    let o = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["stop", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("stopped the cluster"));
    assert!(wait_exit(&mut child, Duration::from_secs(5)).is_some_and(|s| s.success()));
    let o = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["stop", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("no `tern up` runs"), "{}", String::from_utf8_lossy(&o.stderr));

    // A second signal stops at once: tern up and its children are gone right away.
    let (mut child, _) = up(dir.path(), p);
    let procs = children_of(child.id());
    kill(child.id(), libc::SIGINT);
    std::thread::sleep(Duration::from_millis(20));
    kill(child.id(), libc::SIGINT);
    let st = wait_exit(&mut child, Duration::from_secs(3)).expect("a second signal stops at once");
    assert_eq!(st.code(), Some(128 + libc::SIGINT), "{st}");
    let until = Instant::now() + Duration::from_secs(2);
    while procs.iter().any(|&p| alive(p)) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(procs.iter().all(|&p| !alive(p)), "children outlived a second signal");
}

/// SIGSTOP of data node 2 for half the failure timeout: not declared failed (same incarnation,
/// still started). For twice the timeout: declared failed; after SIGCONT it fences itself, the
/// angel restarts it and it rejoins, and no acknowledged write is lost nor a stale value read.
#[test]
fn a_frozen_data_node_is_kept_for_half_the_timeout_and_replaced_after_twice_it() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let p = Ports::new();
    let (mut child, _) = up(dir.path(), p);
    let timeout = Duration::from_millis(1500); // `tern up`'s default --failure-timeout-ms
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(p.redis, stop.clone());
    std::thread::sleep(Duration::from_millis(500));
    let (_, inc) = node_state(p.mgmd, 2).unwrap();
    let pid = datanode_pids(child.id())[1].unwrap();
    kill(pid, libc::SIGSTOP);
    std::thread::sleep(timeout / 2);
    kill(pid, libc::SIGCONT);
    std::thread::sleep(timeout * 2);
    assert_eq!(node_state(p.mgmd, 2), Some(("started".into(), inc)), "declared failed after a short freeze");
    assert_eq!(datanode_pids(child.id())[1], Some(pid), "the process was replaced");
    // `tern status` shows the margins: timeout, lease, when each node was last heard.
    let o = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["status", "--mgmd", &format!("127.0.0.1:{}", p.mgmd), "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let fd = &v["failure_detection"];
    assert_eq!(fd["failure_timeout_ms"], 1500, "{v}");
    assert_eq!(fd["heartbeat_interval_ms"], 250, "{v}");
    assert_eq!(fd["lease_ms"], 1250, "{v}");
    assert_eq!(fd["margin_ms"], 250, "{v}");
    for n in v["nodes"].as_array().unwrap() {
        let ago = n["heartbeat_ms_ago"].as_u64().unwrap_or(u64::MAX);
        assert!(ago < 1000, "node {} last heard {ago} ms ago: {v}", n["node_id"]);
    }
    let o = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["status", "--mgmd", &format!("127.0.0.1:{}", p.mgmd)])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("declared failed after 1500 ms") && text.contains("lease 1250 ms"), "{text}");

    // A counter updated all along: a read after the freeze must see the newest value.
    let counter = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let bump = {
        let (stop, counter) = (stop.clone(), counter.clone());
        std::thread::spawn(move || {
            let mut stale = Vec::new();
            for n in 1..1_000_000u64 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                if redis_cmd(p.redis, &["SET", "counter", &n.to_string()]) == "+OK\r\n" {
                    counter.store(n, Ordering::SeqCst);
                    let want = n;
                    let got = redis_cmd(p.redis, &["GET", "counter"]);
                    let seen: u64 = got.lines().nth(1).and_then(|v| v.parse().ok()).unwrap_or(0);
                    if seen != 0 && seen < want {
                        stale.push((want, seen));
                    }
                } else {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            stale
        })
    };
    kill(pid, libc::SIGSTOP);
    let t0 = Instant::now();
    let mut declared = false;
    while t0.elapsed() < timeout * 2 {
        declared |= node_state(p.mgmd, 2).is_some_and(|(s, i)| s != "started" || i != inc);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(declared, "a node frozen for twice the failure timeout was not declared failed");
    kill(pid, libc::SIGCONT);
    // It fences itself (its lease ran out) and a new incarnation rejoins as a full replica.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let back = node_state(p.mgmd, 2).is_some_and(|(s, i)| s == "started" && i > inc);
        if back && !alive(pid) {
            break;
        }
        assert!(
            Instant::now() < until,
            "data node 2 did not rejoin: {:?}\n{}",
            node_state(p.mgmd, 2),
            log_tail(dir.path(), 40)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::Relaxed);
    let acked = w.join().unwrap();
    let stale = bump.join().unwrap();
    assert!(stale.is_empty(), "stale reads (wrote, read): {stale:?}");
    let lost = lost_writes(p.redis, &acked);
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    let last = counter.load(Ordering::SeqCst);
    assert_eq!(redis_cmd(p.redis, &["GET", "counter"]), format!("${}\r\n{last}\r\n", last.to_string().len()));
    stop_up(&mut child);
}

/// Busy processes that stop by themselves.
struct Hogs(Vec<Child>);

impl Hogs {
    fn start(n: usize, secs: u64) -> Hogs {
        Hogs(
            (0..n)
                .map(|_| {
                    Command::new("timeout")
                        .args([&secs.to_string(), "sh", "-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .spawn()
                        .expect("timeout(1) and sh")
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Eight busy processes on this machine's cores for 30 s under a writing client: no data node is
/// declared failed or fences itself, nothing restarts, and every acknowledged write is there.
#[test]
fn cpu_starvation_declares_nobody_failed() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let p = Ports::new();
    let (mut child, _) = up(dir.path(), p);
    let before = membership(p.mgmd);
    let pids = datanode_pids(child.id());
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(p.redis, stop.clone());
    let secs = 30;
    let hogs = Hogs::start(8, secs);
    std::thread::sleep(Duration::from_secs(secs + 1));
    drop(hogs);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let acked = w.join().unwrap();
    let log = log_of(dir.path());
    let noted: Vec<&str> = log.lines().filter(|l| l.contains("not scheduled")).take(5).collect();
    println!("{} writes acknowledged under the load; lateness noted: {noted:#?}", acked.len());
    assert_undisturbed(dir.path(), p, child.id(), &before, &pids);
    assert!(acked.len() > 50, "the writer made no progress under load: {}", acked.len());
    let lost = lost_writes(p.redis, &acked);
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    stop_up(&mut child);
}

/// Whole-cluster SIGKILL (every process of `tern up`, children first) under writes, then `tern
/// up` again on the same directory, `TERN_RESTART_CYCLES` times (default 20): every cycle is
/// ready within the bound, and the only acknowledged writes lost are those of the last epochs
/// (acknowledged less than two seconds before the kill; an epoch is 100 ms). Prints the time to ready (median, max) and
/// the largest age of a lost write.
#[test]
fn whole_cluster_sigkill_and_restart_cycles() {
    let _g = serial();
    let cycles: usize = std::env::var("TERN_RESTART_CYCLES").ok().and_then(|s| s.parse().ok()).unwrap_or(20);
    let dir = tempfile::tempdir().unwrap();
    let p = Ports::new();
    let (mut child, _) = up(dir.path(), p);
    let mut ready_times = Vec::new();
    let mut worst_age = Duration::ZERO;
    let mut total_lost = 0;
    // Keys acknowledged in earlier cycles and checked present: they must stay.
    let mut kept: Vec<String> = Vec::new();
    for cycle in 0..cycles {
        let stop = Arc::new(AtomicBool::new(false));
        let w = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0..1_000_000u64 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let k = format!("c{cycle}-{i}");
                    if redis_set(p.redis, &k) {
                        acked.push((k, Instant::now()));
                    }
                }
                acked
            })
        };
        std::thread::sleep(Duration::from_millis(1000 + 97 * (cycle as u64 % 7)));
        // `tern up` is stopped first: a supervisor that saw a child die before its own kill would
        // start it again, and that orphan would hold the ports the next `tern up` needs.
        kill(child.id(), libc::SIGSTOP);
        let mut procs = children_of(child.id());
        procs.sort();
        for &pid in &procs {
            kill(pid, libc::SIGKILL);
        }
        let killed_at = Instant::now();
        kill(child.id(), libc::SIGKILL);
        let _ = child.wait();
        stop.store(true, Ordering::Relaxed);
        let acked = w.join().unwrap();
        while procs.iter().any(|&p| alive(p)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let (c, ready) = up(dir.path(), p);
        child = c;
        ready_times.push(ready);
        for k in &kept {
            assert!(has_key(p.redis, k), "cycle {cycle}: {k}, present after an earlier restart, is gone");
        }
        let mut lost = 0;
        for (k, at) in &acked {
            if has_key(p.redis, k) {
                continue;
            }
            lost += 1;
            let age = killed_at.saturating_duration_since(*at);
            worst_age = worst_age.max(age);
            assert!(age < Duration::from_secs(2), "cycle {cycle}: {k}, acknowledged {age:?} before the kill, is lost");
        }
        total_lost += lost;
        kept.extend(acked.iter().filter(|(k, _)| has_key(p.redis, k)).map(|(k, _)| k.clone()).step_by(25));
        println!(
            "cycle {cycle}: ready in {ready:?}; {} writes acknowledged, {lost} of the last epochs lost",
            acked.len()
        );
    }
    ready_times.sort();
    println!(
        "{cycles} whole-cluster SIGKILL cycles: ready median {:?}, max {:?}; {total_lost} acknowledged writes lost, the oldest {worst_age:?} before its kill",
        ready_times[ready_times.len() / 2],
        ready_times.last().unwrap()
    );
    stop_up(&mut child);
}

/// A REST pk-read of `d.t` row `id`: whether it answered 200 with `v`.
fn rest_reads(port: u16, id: u64) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let body = format!(r#"{{"filters":[{{"column":"id","value":{id}}}]}}"#);
    let req = format!(
        "POST /0.1.0/d/t/pk-read HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut r = String::new();
    let _ = s.read_to_string(&mut r);
    r.starts_with("HTTP/1.1 200") && r.contains(&format!("\"v\":{id}"))
}

/// The longest gap between two successes of a client (its stall).
fn worst_gap(times: &[Instant], from: Instant) -> Duration {
    let mut last = from;
    let mut worst = Duration::ZERO;
    for &t in times {
        worst = worst.max(t.saturating_duration_since(last));
        last = last.max(t);
    }
    worst
}

/// `tern restart --rolling` under writes through Redis and SQL and reads through REST: each data
/// node in turn stops in order, restarts, and is a full replica again before the next (its
/// clients' connections close and reconnect to the other's front ends). Nothing acknowledged is lost, every client error is a retryable one, and the
/// clients' stalls are printed (per step; the data-node steps stay within a second).
#[test]
fn rolling_restart_under_load_loses_nothing() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let p = Ports::new();
    let (mut child, _) = up(dir.path(), p);
    common::sql(p.mysql, "CREATE DATABASE d; CREATE TABLE d.t (id BIGINT PRIMARY KEY, v BIGINT)").unwrap();
    common::sql(p.mysql, "INSERT INTO d.t VALUES (1, 1), (2, 2), (3, 3)").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let redis = writer(p.redis, stop.clone());
    let sql = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (mut acked, mut errors) = (Vec::new(), Vec::new());
            for id in 100..1_000_000u64 {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                match common::sql(p.mysql, &format!("INSERT INTO d.t VALUES ({id}, {id})")) {
                    Ok(_) => acked.push((id, Instant::now())),
                    Err(e) => {
                        errors.push(e);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
            (acked, errors)
        })
    };
    let rest = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut ok = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                if rest_reads(p.rest, 1 + i % 3) {
                    ok.push(Instant::now());
                } else {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            ok
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    let t0 = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["restart", "--rolling", "--mgmd", &format!("127.0.0.1:{}", p.mgmd), "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{out}\n{}\n{}", String::from_utf8_lossy(&o.stderr), log_tail(dir.path(), 60));
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let redis = redis.join().unwrap();
    let (sql_acked, sql_errors) = sql.join().unwrap();
    let rest = rest.join().unwrap();
    println!("{out}");
    let redis_times: Vec<Instant> = redis.iter().map(|(_, t)| *t).collect();
    let sql_times: Vec<Instant> = sql_acked.iter().map(|(_, t)| *t).collect();
    println!(
        "rolling restart in {:?}: worst stall redis {:?}, sql {:?}, rest {:?}; {} redis, {} sql writes, {} rest reads; sql errors {:?}",
        t0.elapsed(),
        worst_gap(&redis_times, t0),
        worst_gap(&sql_times, t0),
        worst_gap(&rest, t0),
        redis.len(),
        sql_acked.len(),
        rest.len(),
        sql_errors.iter().take(5).collect::<Vec<_>>()
    );
    assert!(out.contains("data node 1: restarted") && out.contains("data node 2: restarted"), "{out}");
    for e in &sql_errors {
        // The documented retryable ones: the connection went away (its data node restarted) or
        // a temporary cluster error (1297/1296, interfaces.md), which says to retry.
        assert!(
            e.contains("Lost connection")
                || e.contains("Can't connect")
                || e.contains("ERROR 1297")
                || e.contains("ERROR 1296")
                || e.contains("ERROR 1213"),
            "a non-retryable error during the rolling restart: {e}"
        );
    }
    let lost = lost_writes(p.redis, &redis);
    assert!(lost.is_empty(), "acknowledged Redis writes lost: {lost:?}");
    let ids = common::sql(p.mysql, "SELECT id FROM d.t").unwrap();
    let have: std::collections::BTreeSet<u64> = ids.lines().map(|l| l.parse().unwrap()).collect();
    let lost: Vec<u64> = sql_acked.iter().map(|(i, _)| *i).filter(|i| !have.contains(i)).collect();
    assert!(lost.is_empty(), "acknowledged SQL inserts lost: {lost:?}");
    assert!(!log_of(dir.path()).contains("declaring data nodes failed"), "a node was declared failed");
    stop_up(&mut child);
}

/// The management node frozen (SIGSTOP) for twice the failure timeout, then every process of the
/// cluster frozen at once for as long (a host that was not scheduled): the data nodes' leases
/// lapse meanwhile, so they serve no client, but nobody is declared failed, no process stops or
/// restarts, writes go on once they are renewed, and nothing acknowledged is lost.
#[test]
fn a_paused_mgmd_or_host_is_not_a_dead_node() {
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let p = Ports::new();
    let (mut child, _) = up(dir.path(), p);
    let before = membership(p.mgmd);
    let pids = datanode_pids(child.id());
    let mgmd = child_pid(child.id(), "mgmd-145").expect("the mgmd");
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(p.redis, stop.clone());
    let freeze = Duration::from_millis(3000); // twice `tern up`'s default failure timeout
    std::thread::sleep(Duration::from_millis(500));
    kill(mgmd, libc::SIGSTOP);
    std::thread::sleep(freeze);
    kill(mgmd, libc::SIGCONT);
    std::thread::sleep(Duration::from_secs(2));
    // The whole cluster (tern up too) at once.
    let mut all = children_of(child.id());
    all.push(child.id());
    for &pid in &all {
        kill(pid, libc::SIGSTOP);
    }
    std::thread::sleep(freeze);
    for &pid in &all {
        kill(pid, libc::SIGCONT);
    }
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    let acked = w.join().unwrap();
    let log = log_of(dir.path());
    assert_undisturbed(dir.path(), p, child.id(), &before, &pids);
    assert!(
        log.contains("lease renewed"),
        "the leases never lapsed: the test lost its teeth\n{}",
        log_tail(dir.path(), 40)
    );
    let last = acked.last().map(|(_, t)| *t).expect("writes");
    assert!(last.elapsed() < Duration::from_secs(4), "writes did not resume after the freezes");
    let lost = lost_writes(p.redis, &acked);
    assert!(lost.is_empty(), "acknowledged writes lost: {lost:?}");
    stop_up(&mut child);
}

/// Sends a peer greeting then `sigs` as frames on a data node's port; returns whether the node
/// kept the connection open (it closes it on a protocol error).
fn peer_frames(
    port: u16,
    hello: tern_wire::PeerHello,
    sigs: &[(tern_kernel::signal::Addr, tern_kernel::signal::Signal)],
) -> bool {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut buf = Vec::new();
    let at = tern_wire::begin_frame(&mut buf);
    hello.encode(&mut buf);
    tern_wire::finish_frame(&mut buf, at);
    for (to, sig) in sigs {
        let at = tern_wire::begin_frame(&mut buf);
        tern_kernel::codec::encode_signal(*to, sig, &mut buf);
        tern_wire::finish_frame(&mut buf, at);
    }
    if s.write_all(&buf).is_err() {
        return false;
    }
    std::thread::sleep(Duration::from_millis(300));
    s.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut b = [0u8; 64];
    // Open: nothing to read (timeout); closed: end of stream or a reset.
    matches!(s.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut)
}

/// Well-formed frames on the node-to-node port that no real peer would send now: signals only a
/// node's own driver sends (start, timers, disk completions, a lapsed lease), epoch answers and
/// saves of long-gone rounds, heartbeats and start reports of wrong incarnations or unknown
/// nodes, each twice and in shuffled order, from the live peer's incarnation and from a dead
/// one; then a frame for another node. The data node drops them (logging each kind once), stays
/// up, keeps its membership, and clients keep being served.
#[test]
fn stray_frames_on_the_node_to_node_port_do_not_crash_a_node() {
    use tern_kernel::signal::{Addr, Block, Signal};
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let p = Ports::new();
    let (mut child, _) = up(dir.path(), p);
    let before = membership(p.mgmd);
    let pids = datanode_pids(child.id());
    let stop = Arc::new(AtomicBool::new(false));
    let w = writer(p.redis, stop.clone());
    let (inc1, inc2) = (before[0].1, before[1].1);
    let (dist, ldm, tc) =
        (|n| Addr::new(n, Block::Dist), |n, i| Addr::new(n, Block::Ldm(i)), |n, i| Addr::new(n, Block::Tc(i)));
    let mut sigs: Vec<(Addr, Signal)> = vec![
        (dist(1), Signal::Start),
        (tc(1, 0), Signal::Tick),
        (ldm(1, 0), Signal::IoDone { token: 1, result: Err("a peer's disk error".into()) }),
        (dist(1), Signal::LdmReady { from: ldm(1, 0), synced_lsn: 1 << 40 }),
        (tc(1, 0), Signal::NodeStarted { epoch: 1, durable_epoch: 1 }),
        (ldm(1, 0), Signal::CheckpointStep),
        (tc(1, 0), Signal::Lease { until_ms: 0 }),
        (ldm(1, 0), Signal::StartCopy),
        (dist(1), Signal::CopyDone { from: ldm(1, 0), rows: 5 }),
        (dist(1), Signal::EpochSave { from: dist(2), epoch: 1, synced_lsn: vec![0; 1] }),
        (dist(1), Signal::EpochSave { from: dist(2), epoch: 1, synced_lsn: vec![0; 9] }),
        (dist(1), Signal::EpochSaved { from: dist(2), epoch: 1 }),
        (dist(1), Signal::EpochFlushed { from: ldm(2, 0), epoch: 1, synced_lsn: 1 << 40, max_epoch: 1 << 40 }),
        (dist(1), Signal::EpochTcFinished { from: tc(2, 0), epoch: 1, newest_commit: 1 }),
        (dist(1), Signal::EpochPrepared { from: tc(2, 0), epoch: 1, current: 1 }),
        (dist(1), Signal::NodeHeartbeat { from: 2, incarnation: 0 }),
        (dist(1), Signal::DistStarted { from: dist(7), durable_epoch: 1 << 40 }),
        (tc(1, 0), Signal::EpochSave { from: dist(2), epoch: 1, synced_lsn: vec![] }),
        (ldm(1, 0), Signal::DistStarted { from: dist(2), durable_epoch: 0 }),
    ];
    let copy = sigs.clone();
    sigs.extend(copy.into_iter().rev());
    let hello =
        |incarnation| tern_wire::PeerHello { node: 2, worker: 0, incarnation, target_incarnation: inc1, proof: None };
    // As the live peer, then as its dead previous incarnation.
    assert!(peer_frames(p.dn, hello(inc2), &sigs), "the node closed a peer connection for well-formed frames");
    assert!(peer_frames(p.dn, hello(inc2.saturating_sub(1)), &sigs));
    // A frame for another node is a protocol error: the connection closes, the node stays.
    assert!(!peer_frames(p.dn, hello(inc2), &[(dist(5), Signal::Tick)]));
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    let acked = w.join().unwrap();
    let log = log_of(dir.path());
    assert_eq!(before, membership(p.mgmd), "membership changed:\n{}", log_tail(dir.path(), 40));
    assert_eq!(datanode_pids(child.id()), pids, "a data node restarted:\n{}", log_tail(dir.path(), 40));
    assert!(
        log.contains("dropped an unexpected signal"),
        "nothing was dropped: the test lost its teeth\n{}",
        log_tail(dir.path(), 40)
    );
    let last = acked.last().map(|(_, t)| *t).expect("writes");
    assert!(last.elapsed() < Duration::from_secs(2), "writes stopped");
    assert!(redis_set(p.redis, "after-fuzz") && has_key(p.redis, "after-fuzz"), "data node 1 stopped serving");
    stop_up(&mut child);
}
