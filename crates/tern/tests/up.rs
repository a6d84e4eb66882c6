//! `tern up` as a user runs it: the ready line, the angel restarting a killed data node (which
//! recovers its data), a clean stop on SIGINT, and clear errors for a busy port or a foreign data
//! directory.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tern_client::{Client, ColumnType, DdlReq, Exec, OpResult, Table, Value, block_on};
use tern_types::schema::Column;

mod common;
use common::{child_pid, consecutive_ports, free_port, redis_cmd, redis_set, sql};

fn up(dir: &std::path::Path, port: u16) -> Child {
    up_with_rest(dir, port, free_port())
}

fn up_with_rest(dir: &std::path::Path, port: u16, rest: u16) -> Child {
    up_command(dir, port, rest).spawn().unwrap()
}

/// `tern up` of one data node on these ports, its output piped, not started yet.
fn up_command(dir: &std::path::Path, port: u16, rest: u16) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tern"));
    cmd.args(["up", "--data-dir"])
        .arg(dir)
        .args(["--datanode-port", &port.to_string(), "--rest-port", &rest.to_string()])
        .args(["--redis-port", &free_port().to_string(), "--mysql-port", &free_port().to_string()])
        .args(["--data-memory", "128M", "--ldm-workers", "2", "--datanodes", "1", "--replicas", "1"])
        .env("TERN_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// A minimal HTTP POST of a JSON body: (status, body).
fn http_post(port: u16, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let status = r.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, r.split("\r\n\r\n").nth(1).unwrap_or("").to_string())
}

/// A minimal HTTP GET returning the body.
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    r.split("\r\n\r\n").nth(1).unwrap_or("").to_string()
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let until = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < until, "process did not exit in time");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr_of(child: &mut Child) -> String {
    let mut s = String::new();
    use std::io::Read;
    child.stderr.take().unwrap().read_to_string(&mut s).unwrap();
    s
}

#[test]
fn up_serves_restarts_a_killed_datanode_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let rest = free_port();
    let mut child = up_with_rest(dir.path(), port, rest);
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("ready: "), "first line: {line:?}");
    assert!(line.contains(&format!("datanode=127.0.0.1:{port}")), "{line}");
    assert!(line.contains(&format!("rest=127.0.0.1:{rest}")), "{line}");
    assert_eq!(http_get(rest, "/0.1.0/health"), "1", "the REST API serves once ready");
    let addr = format!("127.0.0.1:{port}");
    let c = Client::connect(&addr).unwrap();
    c.ddl(DdlReq::CreateDatabase { name: "u".into(), if_not_exists: true }).unwrap();
    let table = Table {
        id: 0,
        database: "u".into(),
        name: "t".into(),
        columns: vec![
            Column::new("id", ColumnType::Int { unsigned: false }).not_null(),
            Column::new("v", ColumnType::Int { unsigned: false }),
        ],
        primary_key: vec![0],
        partition_key: vec![0],
        indexes: vec![],
        partition_count: 0,
        groups: 0,
        ttl: None,
        comment: String::new(),
    };
    c.ddl(DdlReq::CreateTable { table, if_not_exists: false }).unwrap();
    let t = c.table("u", "t").unwrap();
    let mut txn = c.begin().durable(true);
    block_on(
        txn.execute((0..50).map(|i| t.write(&[Value::Int(i), Value::Int(i * 2)]).unwrap()).collect(), Exec::Commit),
    )
    .unwrap();
    let pid = c.status().unwrap().pid;
    assert!(pid > 0);
    drop(c);
    // Kill the data node; the supervisor must bring it back with its data.
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
    let until = Instant::now() + Duration::from_secs(60);
    let c = loop {
        assert!(Instant::now() < until, "data node was not restarted");
        if let Ok(c) = Client::connect(&addr)
            && c.status().map(|s| s.state == "started" && s.pid != pid).unwrap_or(false)
        {
            break c;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let t = c.table("u", "t").unwrap();
    let r = c.blocking().execute(vec![t.read(&[Value::Int(49)]).unwrap()]).unwrap();
    let OpResult::Row(b) = &r[0] else { panic!("row 49 lost after restart: {r:?}") };
    assert_eq!(t.decode_row(b).unwrap()[1], Value::Int(98));
    let new_pid = c.status().unwrap().pid;
    drop(c);
    // `tern status --json` counts the table's rows (recovered after the restart).
    let out = Command::new(env!("CARGO_BIN_EXE_tern")).args(["status", "--addr", &addr, "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let tables = v["nodes"][0]["tables"].as_array().expect("tables");
    assert!(tables.iter().any(|t| t["table"] == "u.t" && t["rows"] == 50 && t["ttl_purged_rows"] == 0), "{tables:?}");
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let st = wait_exit(&mut child, Duration::from_secs(30));
    assert!(st.success(), "tern up exits 0 on SIGINT: {st}");
    assert!(!std::path::Path::new(&format!("/proc/{new_pid}")).exists(), "data node stopped with tern up");
}

/// The MySQL front end answers with its handshake.
fn mysql_serves(port: u16) -> bool {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut b = [0u8; 5];
    matches!(s.read(&mut b), Ok(5) if b[4] == 10)
}

/// An API server that keeps crashing (before issue 10, five deaths within a minute made `tern up`
/// give up and stop the healthy data node) is restarted every time, with back-off, while the
/// data node keeps serving untouched.
#[test]
fn a_crash_looping_api_server_never_stops_the_datanode() {
    let dir = tempfile::tempdir().unwrap();
    let (port, mysql) = (free_port(), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["up", "--data-dir"])
        .arg(dir.path())
        .args(["--datanode-port", &port.to_string(), "--rest-port", &free_port().to_string()])
        .args(["--redis-port", &free_port().to_string(), "--mysql-port", &mysql.to_string()])
        .args(["--data-memory", "128M", "--ldm-workers", "2", "--datanodes", "1", "--replicas", "1"])
        .arg("--api-process")
        .env("TERN_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("ready: "), "first line: {line:?}");
    // tern up's own messages, as they come: each round waits until the supervisor itself saw the
    // restarted API server serve (the test's MySQL probe may see it first).
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let (log, err) = (log.clone(), child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                let mut g = log.lock().unwrap();
                g.push_str(&l);
                g.push('\n');
            }
        })
    };
    let serving_again = || log.lock().unwrap().matches("the API server is serving again").count();
    let addr = format!("127.0.0.1:{port}");
    let datanode = Client::connect(&addr).unwrap().status().unwrap().pid;
    for round in 0..7 {
        let api = child_pid(child.id(), "api").expect("the API server process");
        // SAFETY: kill(2) on a process this test's child started.
        unsafe {
            libc::kill(api as i32, libc::SIGKILL);
        }
        let until = Instant::now() + Duration::from_secs(60);
        while child_pid(child.id(), "api").is_none_or(|p| p == api) || !mysql_serves(mysql) || serving_again() <= round
        {
            assert!(Instant::now() < until, "round {round}: the API server was not restarted");
            assert!(child.try_wait().unwrap().is_none(), "round {round}: tern up gave up");
            std::thread::sleep(Duration::from_millis(50));
        }
        let c = Client::connect(&addr).unwrap();
        assert_eq!(c.status().unwrap().pid, datanode, "round {round}: the data node was never restarted");
    }
    // SAFETY: kill(2) on this test's child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let st = wait_exit(&mut child, Duration::from_secs(30));
    assert!(st.success(), "tern up exits 0 on SIGINT: {st}");
    reader.join().unwrap();
    let log = log.lock().unwrap().clone();
    assert!(log.contains("the API server stopped (signal 9); restarting it in"), "{log}");
    assert!(log.contains("the API server is serving again"), "{log}");
}

#[test]
fn busy_port_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let mut child = up(dir.path(), port);
    let st = wait_exit(&mut child, Duration::from_secs(30));
    assert!(!st.success());
    let err = stderr_of(&mut child);
    assert!(err.contains(&format!("port {port} is already in use")), "{err}");
    // The REST port too.
    let mut child = up_with_rest(dir.path(), free_port(), port);
    let st = wait_exit(&mut child, Duration::from_secs(30));
    assert!(!st.success());
    let err = stderr_of(&mut child);
    assert!(err.contains(&format!("port {port} is already in use (REST API)")), "{err}");
}

/// Redis on an address other than loopback without `requirepass` does not start, and the error
/// names the setting (issue 14: no front door open to the network without credentials).
#[test]
fn redis_on_a_public_address_without_a_password_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("api.toml");
    std::fs::write(&toml, "[redis]\nlisten = \"0.0.0.0:6379\"\n").unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut child = up_command(&data, free_port(), free_port()).arg("--api-toml").arg(&toml).spawn().unwrap();
    let st = wait_exit(&mut child, Duration::from_secs(60));
    assert!(!st.success());
    let err = stderr_of(&mut child);
    assert!(err.contains("without a password: set requirepass"), "{err}");
}

#[test]
fn foreign_data_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("node-1")).unwrap();
    std::fs::write(dir.path().join("node-1").join("ibdata1"), b"not ours").unwrap();
    let mut child = up(dir.path(), free_port());
    let st = wait_exit(&mut child, Duration::from_secs(30));
    assert!(!st.success());
    let err = stderr_of(&mut child);
    assert!(err.contains("not a Tern data directory"), "{err}");
    assert_eq!(
        std::fs::read(dir.path().join("node-1").join("ibdata1")).unwrap(),
        b"not ours",
        "nothing of it was touched"
    );
}

#[test]
fn colocated_rest_api_in_the_data_node_process() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let rest = free_port();
    let cfg = dir.path().join("dn.toml");
    std::fs::write(
        &cfg,
        format!(
            "data_dir = {:?}\nlisten = \"127.0.0.1:{port}\"\ndata_memory = \"64M\"\n",
            dir.path().join("node").display().to_string()
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["datanode", "--config"])
        .arg(&cfg)
        .args(["--rest-port", &rest.to_string()])
        .env("TERN_LOG", "warn")
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    let c = loop {
        assert!(Instant::now() < until, "data node did not start");
        if let Ok(c) = Client::connect(&format!("127.0.0.1:{port}"))
            && c.status().map(|s| s.state == "started").unwrap_or(false)
        {
            break c;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    c.ddl(DdlReq::CreateDatabase { name: "co".into(), if_not_exists: true }).unwrap();
    let t = Table::new(
        "co",
        "t",
        vec![
            Column::new("id", ColumnType::Int { unsigned: false }).not_null(),
            Column::new("v", ColumnType::Int { unsigned: false }),
        ],
        vec![0],
    );
    c.ddl(DdlReq::CreateTable { table: t, if_not_exists: false }).unwrap();
    let h = c.table("co", "t").unwrap();
    c.blocking().execute(vec![h.write(&[Value::Int(3), Value::Int(33)]).unwrap()]).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", rest)).is_err() {
        assert!(Instant::now() < until, "REST port did not open");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(http_get(rest, "/0.1.0/health"), "1");
    use std::io::{Read, Write};
    let body = r#"{"filters":[{"column":"id","value":3}]}"#;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", rest)).unwrap();
    write!(
        s,
        "POST /0.1.0/co/t/pk-read HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert!(r.contains("\"v\":33"), "{r}");
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    assert!(wait_exit(&mut child, Duration::from_secs(30)).success());
}

/// The default `tern up`: one management node and two data nodes of one node group with two
/// replicas; a data node killed with SIGKILL under Redis and SQL write load is restarted by the
/// angel and rejoins by copying; no acknowledged write of either front door is lost, neither
/// stalls for 3 s, and the data written meanwhile is on both replicas.
#[test]
fn up_by_default_runs_a_replicated_cluster_that_heals() {
    let dir = tempfile::tempdir().unwrap();
    let Cluster { mut child, line, mgmd, redis, mysql, dn } = default_cluster(dir.path());
    assert!(line.contains("mgmd="), "{line}");
    sql(mysql, "CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, v INT)").unwrap();
    // SQL writers on their own connection, one INSERT per statement, until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // INSERTs acknowledged so far (the load goes on until there are enough of them too).
    let sql_acked = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sql_writer = {
        let (stop, sql_acked) = (stop.clone(), sql_acked.clone());
        std::thread::spawn(move || {
            let (mut acked, mut worst, mut last) = (Vec::new(), Duration::ZERO, Instant::now());
            for id in 0..100_000 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                if sql(mysql, &format!("INSERT INTO d.t VALUES ({id}, {id})")).is_ok() {
                    acked.push(id);
                    sql_acked.store(acked.len(), std::sync::atomic::Ordering::Relaxed);
                    worst = worst.max(last.elapsed());
                    last = Instant::now();
                }
            }
            (acked, worst)
        })
    };
    let addrs = format!("127.0.0.1:{dn},127.0.0.1:{}", dn + 1);
    let c = tern_client::Client::connect(&addrs).unwrap();
    let status = |id: u16| -> String {
        let mut m =
            tern_control::MgmClient::new(vec![format!("127.0.0.1:{mgmd}")]).with_role(tern_control::Role::Admin);
        m.status().map(|s| s.state.state.state_of(id).name().to_string()).unwrap_or_default()
    };
    assert_eq!((status(1), status(2)), ("started".into(), "started".into()));
    // Kill data node 2; the angel restarts it and it rejoins.
    let pid = child_pid(child.id(), "datanode-2.toml").expect("data node 2");
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let mut writes = 0;
    let until = Instant::now() + Duration::from_secs(60);
    let mut last_ack = Instant::now();
    let mut worst = Duration::ZERO;
    loop {
        if redis_set(redis, &format!("k{writes}")) {
            writes += 1;
            worst = worst.max(last_ack.elapsed());
            last_ack = Instant::now();
        }
        if writes > 20
            && sql_acked.load(std::sync::atomic::Ordering::Relaxed) > 20
            && status(2) == "started"
            && child_pid(child.id(), "datanode-2.toml").is_some_and(|p| p != pid)
        {
            break;
        }
        assert!(
            Instant::now() < until,
            "data node 2 did not rejoin (state {}, {writes} writes, last SET answer {:?}); log:\n{}",
            status(2),
            redis_cmd(redis, &["SET", "probe", "v"]),
            up_log_tail(dir.path())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (acked, sql_worst) = sql_writer.join().unwrap();
    assert!(worst < Duration::from_secs(3), "Redis clients stalled for {worst:?}");
    assert!(sql_worst < Duration::from_secs(3), "SQL clients stalled for {sql_worst:?}");
    assert!(acked.len() > 20, "too few SQL writes: {}", acked.len());
    // Every acknowledged SET and INSERT is there.
    for i in 0..writes {
        assert_eq!(redis_cmd(redis, &["GET", &format!("k{i}")]), "$1\r\nv\r\n", "acknowledged k{i} lost");
    }
    let ids = sql(mysql, "SELECT id FROM d.t").unwrap();
    let have: std::collections::BTreeSet<i64> = ids.lines().map(|l| l.parse().unwrap()).collect();
    let lost: Vec<&i64> = acked.iter().filter(|id| !have.contains(id)).collect();
    assert!(lost.is_empty(), "acknowledged SQL inserts lost: {lost:?}");
    let rows = |port: u16| tern_client::Client::connect(&format!("127.0.0.1:{port}")).unwrap().status().unwrap().rows;
    let until = Instant::now() + Duration::from_secs(10);
    while rows(dn) != rows(dn + 1) {
        assert!(Instant::now() < until, "replicas differ: {} vs {} rows", rows(dn), rows(dn + 1));
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(c);
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = wait_exit(&mut child, Duration::from_secs(60));
    assert!(st.success(), "{st}");
}

/// The default cluster's data nodes serve the front doors themselves on shared ports: Redis
/// connections land on both processes; a SIGKILL of one drops only the connections it served
/// (the others go on answering on the same connection), new connections land on the survivor
/// while it restarts, and once back it serves new connections again.
#[test]
fn a_data_node_that_dies_takes_only_its_own_front_end_connections() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let Cluster { mut child, mgmd, redis, mysql, .. } = default_cluster(dir.path());
    assert!(child_pid(child.id(), "api").is_none(), "a separate API server runs");
    let pids = [1, 2].map(|n| child_pid(child.id(), &format!("datanode-{n}.toml")).expect("data node"));
    // One command on an open connection; None when it is gone.
    let ask = |s: &mut std::net::TcpStream, args: &[&str]| -> Option<String> {
        let mut cmd = format!("*{}\r\n", args.len());
        for a in args {
            cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(cmd.as_bytes()).ok()?;
        let mut buf = vec![0u8; 8192];
        let n = s.read(&mut buf).ok().filter(|&n| n > 0)?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    };
    let process_of = |s: &mut std::net::TcpStream| -> Option<u32> {
        let info = ask(s, &["INFO", "server"])?;
        info.lines().find_map(|l| l.strip_prefix("process_id:")).and_then(|p| p.trim().parse().ok())
    };
    let mut conns: Vec<(std::net::TcpStream, u32)> = Vec::new();
    for _ in 0..40 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", redis)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let pid = process_of(&mut s).expect("INFO answered");
        assert!(pids.contains(&pid), "connection served by {pid}, not a data node {pids:?}");
        conns.push((s, pid));
    }
    let on = |pid: u32, conns: &[(std::net::TcpStream, u32)]| conns.iter().filter(|c| c.1 == pid).count();
    assert!(on(pids[0], &conns) > 0 && on(pids[1], &conns) > 0, "the kernel spread no connections");
    for (i, (s, _)) in conns.iter_mut().enumerate() {
        assert_eq!(ask(s, &["SET", &format!("c{i}"), "v"]).as_deref(), Some("+OK\r\n"));
    }
    sql(mysql, "CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY)").unwrap();
    // MySQL connection ids are unique across the data nodes' front ends (node id << 24 + n).
    let ids: std::collections::BTreeSet<u64> =
        (0..12).map(|_| sql(mysql, "SELECT CONNECTION_ID()").unwrap().parse().unwrap()).collect();
    assert_eq!(ids.len(), 12, "connection ids repeat: {ids:?}");
    assert!(ids.iter().all(|&i| i >> 24 == 1 || i >> 24 == 2), "{ids:?}");
    unsafe { libc::kill(pids[1] as i32, libc::SIGKILL) };
    std::thread::sleep(Duration::from_millis(200));
    // The survivor's connections answer on; the dead node's are closed (or reset).
    for (i, (s, pid)) in conns.iter_mut().enumerate() {
        let got = ask(s, &["GET", &format!("c{i}")]);
        if *pid == pids[0] {
            assert_eq!(got.as_deref(), Some("$1\r\nv\r\n"), "a survivor's connection {i} broke");
        } else {
            assert!(got.is_none(), "connection {i} of the killed node answered {got:?}");
        }
    }
    // New connections (Redis and MySQL) land on the living.
    for i in 0..20 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", redis)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let until = Instant::now() + Duration::from_secs(10);
        // (Until the management node declares node 2 failed, writes wait for it.)
        loop {
            match ask(&mut s, &["SET", &format!("n{i}"), "v"]).as_deref() {
                Some("+OK\r\n") => break,
                other => assert!(Instant::now() < until, "new connection {i}: {other:?}"),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // The survivor, or node 2 once the angel restarted it: never the dead process.
        let by = process_of(&mut s).expect("INFO answered");
        assert_ne!(by, pids[1], "a new connection reached the killed process");
    }
    sql(mysql, "INSERT INTO d.t VALUES (1)").unwrap();
    // Node 2 comes back (the angel restarts it) and serves new connections again.
    let status = |id: u16| -> String {
        let mut m =
            tern_control::MgmClient::new(vec![format!("127.0.0.1:{mgmd}")]).with_role(tern_control::Role::Admin);
        m.status().map(|s| s.state.state.state_of(id).name().to_string()).unwrap_or_default()
    };
    let until = Instant::now() + Duration::from_secs(60);
    let back = loop {
        let now = child_pid(child.id(), "datanode-2.toml").filter(|&p| p != pids[1]);
        if let Some(p) = now
            && status(2) == "started"
        {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", redis)).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            if process_of(&mut s) == Some(p) {
                break p;
            }
        }
        assert!(Instant::now() < until, "data node 2 serves no connection again; log:\n{}", up_log_tail(dir.path()));
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_ne!(back, pids[1]);
    for i in 0..conns.len() {
        assert_eq!(redis_cmd(redis, &["GET", &format!("c{i}")]), "$1\r\nv\r\n", "c{i} lost");
    }
    assert_eq!(sql(mysql, "SELECT id FROM d.t").unwrap(), "1");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = wait_exit(&mut child, Duration::from_secs(60));
    assert!(st.success(), "{st}");
}

/// Whole-cluster crash: both data nodes of the default `tern up` die by SIGKILL at once. The
/// angel restarts them, the management node starts them together (system restart) and both
/// recover to the same last durable epoch: every durably acknowledged write (SQL with
/// `tern_durable_commit`, Redis with `appendfsync always`) is there, writes acknowledged without
/// durability long before the crash too, and the two replicas hold the same rows.
#[test]
fn whole_cluster_sigkill_recovers_to_the_last_durable_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let Cluster { mut child, redis, mysql, dn, .. } = default_cluster(dir.path());
    sql(mysql, "CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, v INT)").unwrap();
    // Old, non-durable writes: long past their epoch's flush when the cluster dies.
    for i in 0..50 {
        assert!(redis_set(redis, &format!("old{i}")));
    }
    std::thread::sleep(Duration::from_secs(3));
    // Durable writes right before the crash.
    assert_eq!(redis_cmd(redis, &["CONFIG", "SET", "appendfsync", "always"]), "+OK\r\n");
    for i in 0..20 {
        assert!(redis_set(redis, &format!("durable{i}")));
    }
    let values: Vec<String> = (0..20).map(|i| format!("({i}, {i})")).collect();
    sql(mysql, &format!("SET SESSION tern_durable_commit = 1; INSERT INTO d.t VALUES {}", values.join(","))).unwrap();
    let pids = [child_pid(child.id(), "datanode-1.toml").unwrap(), child_pid(child.id(), "datanode-2.toml").unwrap()];
    for pid in pids {
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    }
    // Both come back (new processes), and the front doors serve again.
    let until = Instant::now() + Duration::from_secs(90);
    loop {
        let back = ["datanode-1.toml", "datanode-2.toml"]
            .iter()
            .all(|w| child_pid(child.id(), w).is_some_and(|p| !pids.contains(&p)));
        if back && redis_cmd(redis, &["GET", "durable19"]) == "$1\r\nv\r\n" {
            break;
        }
        assert!(Instant::now() < until, "the cluster did not come back: {:?}", redis_cmd(redis, &["GET", "durable19"]));
        std::thread::sleep(Duration::from_millis(100));
    }
    for k in (0..20).map(|i| format!("durable{i}")).chain((0..50).map(|i| format!("old{i}"))) {
        assert_eq!(redis_cmd(redis, &["GET", &k]), "$1\r\nv\r\n", "{k} lost");
    }
    // A node that is not a full replica yet (one that failed first rejoins by copying) answers
    // "restarting" and its clients move on: retry the read for a while.
    let until = Instant::now() + Duration::from_secs(30);
    let got = loop {
        match sql(mysql, "SELECT COUNT(*), SUM(v) FROM d.t") {
            Ok(v) => break v,
            Err(e) if e.contains("restarting") && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(got, "20\t190");
    // Both replicas hold the same rows.
    let rows =
        |port: u16| Client::connect(&format!("127.0.0.1:{port}")).ok().and_then(|c| c.status().ok()).map(|s| s.rows);
    let until = Instant::now() + Duration::from_secs(30);
    while rows(dn).is_none() || rows(dn) != rows(dn + 1) {
        assert!(Instant::now() < until, "replicas differ: {:?} vs {:?} rows", rows(dn), rows(dn + 1));
        std::thread::sleep(Duration::from_millis(100));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = wait_exit(&mut child, Duration::from_secs(60));
    assert!(st.success(), "{st}");
}

/// Durable acknowledgement from the front doors (served from inside the data node, `tern up`'s
/// topology with one data node): with Redis `CONFIG SET appendfsync always`,
/// MySQL `SET SESSION tern_durable_commit = 1` and REST's `[rest] durable_commit = true`, every
/// acknowledged write survives a SIGKILL of the data node that comes right after it (the angel restarts the node, which recovers from disk).
#[test]
fn durable_acknowledgements_from_redis_and_sql_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let (dn, redis, mysql, rest) = (free_port(), free_port(), free_port(), free_port());
    // REST's durable acknowledgement is a config key of the API server.
    let toml = dir.path().join("api.toml");
    std::fs::write(&toml, "[rest]\ndurable_commit = true\n").unwrap();
    let (mut child, _) = up_ready(
        dir.path(),
        &[
            "--api-toml",
            toml.to_str().unwrap(),
            "--datanode-port",
            &dn.to_string(),
            "--rest-port",
            &rest.to_string(),
            "--redis-port",
            &redis.to_string(),
            "--mysql-port",
            &mysql.to_string(),
            "--data-memory",
            "128M",
            "--ldm-workers",
            "2",
            "--datanodes",
            "1",
            "--replicas",
            "1",
        ],
    );
    let sql = |q: &str| -> String {
        let o = Command::new("mariadb")
            .args(["-h", "127.0.0.1", "-P", &mysql.to_string(), "-u", "root", "-N", "-B", "-e", q])
            .output()
            .expect("mariadb client");
        assert!(o.status.success(), "{q}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    sql(
        "CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, v INT); CREATE TABLE d.r (id INT PRIMARY KEY, v INT)",
    );
    assert_eq!(redis_cmd(redis, &["CONFIG", "SET", "appendfsync", "always"]), "+OK\r\n");
    assert!(redis_cmd(redis, &["CONFIG", "GET", "appendfsync"]).contains("always"));
    // With one data node the front ends run inside it: no API server process.
    assert!(child_pid(child.id(), "api").is_none(), "a separate API server runs");
    for round in 0..3 {
        let pid = child_pid(child.id(), "datanode").expect("data node");
        // Acknowledged durable writes, then at once SIGKILL.
        for i in 0..20 {
            let k = format!("r{round}k{i}");
            assert_eq!(redis_cmd(redis, &["SET", &k, "v"]), "+OK\r\n");
        }
        sql(&format!("SET SESSION tern_durable_commit = 1; INSERT INTO d.t VALUES ({round}, {round})"));
        let body = format!(
            r#"{{"operations": [{{"method": "POST", "relative-url": "d/r/pk-insert", "body": {{"filters": [{{"column": "id", "value": {round}}}], "writeColumns": [{{"column": "v", "value": {round}}}]}}}}]}}"#
        );
        let (status, answer) = http_post(rest, "/0.1.0/batchwrite", &body);
        assert_eq!(status, 200, "{answer}");
        assert!(answer.contains("\"code\":200"), "{answer}");
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let until = Instant::now() + Duration::from_secs(60);
        while child_pid(child.id(), "datanode").is_none_or(|p| p == pid)
            || !redis_cmd(redis, &["PING"]).contains("PONG")
        {
            assert!(Instant::now() < until, "the data node did not come back");
            std::thread::sleep(Duration::from_millis(50));
        }
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let got = redis_cmd(redis, &["GET", &format!("r{round}k19")]);
            if got == "$1\r\nv\r\n" {
                break;
            }
            assert!(Instant::now() < until, "acknowledged durable SET lost: {got:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
        for r in 0..=round {
            for i in 0..20 {
                assert_eq!(redis_cmd(redis, &["GET", &format!("r{r}k{i}")]), "$1\r\nv\r\n", "r{r}k{i}");
            }
        }
        assert_eq!(sql("SELECT COUNT(*) FROM d.t"), (round + 1).to_string());
        assert_eq!(sql("SELECT COUNT(*) FROM d.r"), (round + 1).to_string(), "a durable REST write was lost");
    }
    // Per database: only database 2 answers writes once on disk.
    assert_eq!(redis_cmd(redis, &["CONFIG", "SET", "appendfsync", "everysec"]), "+OK\r\n");
    assert_eq!(redis_cmd(redis, &["CONFIG", "SET", "tern-durable-databases", "2"]), "+OK\r\n");
    let pid = child_pid(child.id(), "datanode").expect("data node");
    for i in 0..20 {
        assert!(redis_db_set(redis, 2, &format!("db2k{i}")), "SET in database 2");
    }
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let until = Instant::now() + Duration::from_secs(60);
    while child_pid(child.id(), "datanode").is_none_or(|p| p == pid) || !redis_db_get(redis, 2, "db2k19") {
        assert!(Instant::now() < until, "an acknowledged SET to the durable database 2 was lost");
        std::thread::sleep(Duration::from_millis(50));
    }
    for i in 0..20 {
        assert!(redis_db_get(redis, 2, &format!("db2k{i}")), "db2k{i} lost");
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    wait_exit(&mut child, Duration::from_secs(60));
}

/// SELECT `db` and SET `key` to "v" on one connection: both answered +OK.
fn redis_db_set(port: u16, db: u32, key: &str) -> bool {
    redis_db_cmd(port, db, &format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\nv\r\n", key.len()), "+OK\r\n")
}

/// SELECT `db` and GET `key`: it holds "v".
fn redis_db_get(port: u16, db: u32, key: &str) -> bool {
    redis_db_cmd(port, db, &format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len()), "$1\r\nv\r\n")
}

fn redis_db_cmd(port: u16, db: u32, cmd: &str, want: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let select = format!("*2\r\n$6\r\nSELECT\r\n${}\r\n{db}\r\n", db.to_string().len());
    if s.write_all(format!("{select}{cmd}").as_bytes()).is_err() {
        return false;
    }
    let expect = format!("+OK\r\n{want}");
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while got.len() < expect.len() {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    got == expect.as_bytes()
}

/// Three management nodes: SIGKILL of the Raft leader leaves the cluster serving and managed
/// (writes go on; a data node killed afterwards is still declared failed, restarted and
/// rejoins).
#[test]
fn sigkill_of_the_mgmd_leader_with_three_mgmds() {
    let dir = tempfile::tempdir().unwrap();
    let (mgmd, dn, redis) = (consecutive_ports(3), consecutive_ports(2), free_port());
    let (mut child, _) = up_ready(
        dir.path(),
        &[
            "--mgmds",
            "3",
            "--mgmd-port",
            &mgmd.to_string(),
            "--datanode-port",
            &dn.to_string(),
            "--rest-port",
            &free_port().to_string(),
            "--redis-port",
            &redis.to_string(),
            "--mysql-port",
            &free_port().to_string(),
            "--data-memory",
            "128M",
            "--failure-timeout-ms",
            "900",
        ],
    );
    let addrs: Vec<String> = (0..3).map(|i| format!("127.0.0.1:{}", mgmd + i)).collect();
    let status = || tern_control::MgmClient::new(addrs.clone()).with_role(tern_control::Role::Admin).status();
    let leader = status().unwrap().leader.expect("a leader");
    let pid = child_pid(child.id(), &format!("mgmd-{leader}")).expect("the leader's process");
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    // Writes go on, and the control plane answers (a leader again).
    let until = Instant::now() + Duration::from_secs(30);
    let mut ok = 0;
    while ok < 50 {
        if redis_set(redis, &format!("m{ok}")) {
            ok += 1;
        }
        assert!(Instant::now() < until, "writes stopped after the mgmd leader died");
    }
    let until = Instant::now() + Duration::from_secs(30);
    while !status().is_ok_and(|s| s.leader.is_some()) {
        assert!(Instant::now() < until, "no mgmd leader after the leader was killed");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The cluster is still managed: a killed data node is failed, restarted, and rejoins.
    let dpid = child_pid(child.id(), "datanode-2.toml").expect("data node 2");
    unsafe { libc::kill(dpid as i32, libc::SIGKILL) };
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let st = status();
        if child_pid(child.id(), "datanode-2.toml").is_some_and(|p| p != dpid)
            && st.is_ok_and(|s| s.state.state.state_of(2) == tern_types::cluster::NodeState::Started)
        {
            break;
        }
        assert!(Instant::now() < until, "data node 2 did not rejoin");
        redis_set(redis, "during");
        std::thread::sleep(Duration::from_millis(50));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    wait_exit(&mut child, Duration::from_secs(60));
}

/// The default `tern up` (1 mgmd, 2 data nodes, 2 replicas) on free ports, with a 0.9 s
/// failure timeout.
struct Cluster {
    child: Child,
    line: String,
    mgmd: u16,
    redis: u16,
    mysql: u16,
    /// The first data node's port (the second's is the next).
    dn: u16,
}

fn default_cluster(dir: &std::path::Path) -> Cluster {
    cluster_with(dir, &[])
}

/// `default_cluster` with more `tern up` arguments.
fn cluster_with(dir: &std::path::Path, extra: &[&str]) -> Cluster {
    let (mgmd, redis, mysql) = (free_port(), free_port(), free_port());
    let dn = consecutive_ports(2);
    let ports = [dn.to_string(), mgmd.to_string(), free_port().to_string(), redis.to_string(), mysql.to_string()];
    let mut args = vec![
        "--datanode-port",
        &ports[0],
        "--mgmd-port",
        &ports[1],
        "--rest-port",
        &ports[2],
        "--redis-port",
        &ports[3],
        "--mysql-port",
        &ports[4],
        "--data-memory",
        "128M",
        "--failure-timeout-ms",
        "900",
    ];
    args.extend_from_slice(extra);
    let (child, line) = up_ready(dir, &args);
    Cluster { child, line, mgmd, redis, mysql, dn }
}

/// The last lines `tern up` (and its children) logged, for failure messages.
fn up_log_tail(dir: &std::path::Path) -> String {
    let log = std::fs::read_to_string(dir.join("up-stderr.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Starts `tern up --data-dir DIR ARGS...` and waits for its `ready:` line. Its log (warnings
/// and up) goes to `DIR/up-stderr.log` (see `up_log_tail`).
fn up_ready(dir: &std::path::Path, args: &[&str]) -> (Child, String) {
    let log = std::fs::File::create(dir.join("up-stderr.log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["up", "--data-dir"])
        .arg(dir)
        .args(args)
        .env("TERN_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.starts_with("ready:"), "{line}\n{}", up_log_tail(dir));
    (child, line)
}

/// `tern up --cluster-secret-file F`: the file is made (mode 600), the cluster runs with it
/// (data nodes, mgmd, API server and its front ends all prove it), and the data node and
/// management ports refuse whoever does not: `tern status --mgmd` and a native client without
/// `TERN_CLUSTER_SECRET_FILE` get "access denied", with it they are served.
#[test]
fn a_cluster_secret_guards_the_data_node_and_management_ports() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("cluster-secret");
    let Cluster { mut child, mgmd, mysql, dn, .. } =
        cluster_with(dir.path(), &["--cluster-secret-file", secret.to_str().unwrap()]);
    assert_eq!(std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777, 0o600);
    sql(mysql, "CREATE DATABASE s; CREATE TABLE s.t (id INT PRIMARY KEY); INSERT INTO s.t VALUES (1)").unwrap();
    assert_eq!(sql(mysql, "SELECT id FROM s.t").unwrap(), "1");
    let status = |with_secret: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tern"));
        c.args(["status", "--mgmd", &format!("127.0.0.1:{mgmd}")]).env_remove("TERN_CLUSTER_SECRET_FILE");
        if with_secret {
            c.env("TERN_CLUSTER_SECRET_FILE", &secret);
        }
        c.output().unwrap()
    };
    let denied = status(false);
    assert!(!denied.status.success());
    let text = String::from_utf8_lossy(&denied.stderr);
    assert!(text.contains("access denied") && text.contains("TERN_CLUSTER_SECRET_FILE"), "{text}");
    let ok = status(true);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    for port in [dn, dn + 1] {
        let e = tern_client::Client::connect(&format!("127.0.0.1:{port}")).err().expect("refused without the secret");
        assert_eq!(e.code, tern_client::ErrorCode::AccessDenied, "{e:?}");
    }
    let opts = tern_client::ClientOptions {
        cluster_secret: Some(tern_client::secret::read_secret_file(&secret).unwrap()),
        ..Default::default()
    };
    let c = tern_client::Client::connect_with(&format!("127.0.0.1:{dn}"), opts).unwrap();
    assert!(c.table("s", "t").is_ok());
    // `tern backup` is a client like the others: refused without the secret, served with it.
    let addrs = format!("127.0.0.1:{dn},127.0.0.1:{}", dn + 1);
    let backup = |with_secret: bool, to: &std::path::Path| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tern"));
        c.args(["backup", "--addr", &addrs, "--dir", to.to_str().unwrap()]).env_remove("TERN_CLUSTER_SECRET_FILE");
        if with_secret {
            c.env("TERN_CLUSTER_SECRET_FILE", &secret);
        }
        c.output().unwrap()
    };
    let denied = backup(false, &dir.path().join("b1"));
    let text = String::from_utf8_lossy(&denied.stderr);
    assert!(!denied.status.success() && text.contains("access denied"), "{text}");
    assert!(!dir.path().join("b1").exists(), "a refused backup leaves no directory");
    let ok = backup(true, &dir.path().join("b2"));
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(dir.path().join("b2/BACKUP.json").exists());
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    wait_exit(&mut child, Duration::from_secs(60));
}

/// `tern api --mgmd HOST:PORT`: a separate API server finds the data nodes from the management
/// nodes and serves (REST health and a SQL round trip through the data nodes). The management
/// nodes own the catalog: a schema change is there before the client hears it is done, and a
/// catalog committed there that the data nodes never got (an earlier master failed before
/// writing it) is written to them by the master.
#[test]
fn api_server_finds_the_data_nodes_through_the_management_node() {
    let dir = tempfile::tempdir().unwrap();
    let Cluster { mut child, mgmd, mysql, line, .. } = default_cluster(dir.path());
    sql(mysql, "CREATE DATABASE d; CREATE TABLE d.t (id INT PRIMARY KEY, v INT); INSERT INTO d.t VALUES (1, 7)")
        .unwrap();
    // The status page lists both data nodes (from the management node) as started.
    let rest: u16 =
        line.split("rest=127.0.0.1:").nth(1).and_then(|r| r.split_whitespace().next()).unwrap().parse().unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let j = http_get(rest, "/status.json");
        let v: serde_json::Value = serde_json::from_str(&j).unwrap_or_default();
        let states: Vec<(u64, String)> = v["nodes"]
            .as_array()
            .map(|a| {
                a.iter().map(|n| (n["id"].as_u64().unwrap_or(0), n["state"].as_str().unwrap_or("").into())).collect()
            })
            .unwrap_or_default();
        // Both with their figures (the one the API server does not use through a client of
        // its own).
        let figures =
            v["nodes"].as_array().is_some_and(|a| a.iter().all(|n| n["memory_total"].as_u64().unwrap_or(0) > 0));
        if states == [(1, "started".to_string()), (2, "started".to_string())] && figures {
            break;
        }
        assert!(Instant::now() < until, "status.json: {j}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut m = tern_control::MgmClient::new(vec![format!("127.0.0.1:{mgmd}")]).with_role(tern_control::Role::Admin);
    let (version, bytes) = m.get_catalog().unwrap();
    let mut cat = tern_types::schema::Catalog::decode(&bytes).unwrap();
    assert!(cat.find_table("d", "t").is_some(), "the management node lacks the new table (version {version})");
    // As if a master had committed a change and died before writing it to any data node.
    cat.version += 1;
    cat.databases.insert("adopted".into(), tern_types::Database { name: "adopted".into() });
    let mut enc = Vec::new();
    cat.encode(&mut enc);
    m.propose(tern_control::Command::SetCatalog { version: cat.version, bytes: enc }).unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while !sql(mysql, "SHOW DATABASES").unwrap_or_default().lines().any(|l| l == "adopted") {
        assert!(Instant::now() < until, "the master did not write the management nodes' catalog");
        std::thread::sleep(Duration::from_millis(100));
    }
    // The next change builds on it.
    sql(mysql, "CREATE TABLE adopted.t2 (id INT PRIMARY KEY)").unwrap();
    let (v2, _) = m.get_catalog().unwrap();
    assert_eq!(v2, cat.version + 1);
    let (rest, mysql2) = (free_port(), free_port());
    let mut api = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["api", "--mgmd", &format!("127.0.0.1:{mgmd}"), "--no-redis"])
        .args(["--rest-port", &rest.to_string(), "--mysql-port", &mysql2.to_string()])
        .env("TERN_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    let got = loop {
        if let Ok(v) = sql(mysql2, "SELECT v FROM d.t WHERE id = 1") {
            break v;
        }
        assert!(Instant::now() < until, "the API server did not serve");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(got, "7");
    let health = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", rest)).unwrap();
        write!(s, "GET /0.1.0/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        r
    };
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    unsafe { libc::kill(api.id() as i32, libc::SIGTERM) };
    wait_exit(&mut api, Duration::from_secs(30));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    wait_exit(&mut child, Duration::from_secs(60));
}

/// A frozen data node (SIGSTOP: its kernel still accepts connections, nothing answers) — the
/// one the API server talks to first — stalls Redis clients only until the management node
/// declares it failed: the API server watches the cluster map and leaves it then, instead of
/// waiting for its requests to time out. Woken up, the node finds its lease gone, stops, and
/// the angel restarts it; no acknowledged write is lost. (A separate API server: with the front
/// ends inside the data nodes, new connections the kernel gives a frozen node's shared port
/// wait until it wakes up and fences — see docs/architecture/runtime.md, "Front ends in every data node".)
#[test]
fn a_frozen_data_node_stalls_clients_only_until_it_is_declared_failed() {
    let dir = tempfile::tempdir().unwrap();
    let Cluster { mut child, mgmd, redis, .. } = cluster_with(dir.path(), &["--api-process"]);
    let status = |id: u16| -> String {
        let mut m =
            tern_control::MgmClient::new(vec![format!("127.0.0.1:{mgmd}")]).with_role(tern_control::Role::Admin);
        m.status().map(|s| s.state.state.state_of(id).name().to_string()).unwrap_or_default()
    };
    let mut acked = Vec::new();
    for i in 0..50 {
        assert!(redis_set(redis, &format!("f{i}")));
        acked.push(i);
    }
    let pid = child_pid(child.id(), "datanode-1.toml").expect("data node 1");
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let (mut last, mut worst) = (Instant::now(), Duration::ZERO);
    let frozen_until = Instant::now() + Duration::from_secs(6);
    let mut i = 50;
    while Instant::now() < frozen_until {
        if redis_set(redis, &format!("f{i}")) {
            acked.push(i);
            worst = worst.max(last.elapsed());
            last = Instant::now();
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    worst = worst.max(last.elapsed());
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    println!("longest gap between acknowledged SETs while node 1 was frozen: {worst:?}");
    assert!(worst < Duration::from_secs(3), "Redis clients stalled for {worst:?}; log:\n{}", up_log_tail(dir.path()));
    assert!(acked.len() > 60, "too few writes while node 1 was frozen: {}", acked.len());
    // Node 1 stops (its lease ran out), is restarted and copies back in.
    let until = Instant::now() + Duration::from_secs(60);
    while !(status(1) == "started" && child_pid(child.id(), "datanode-1.toml").is_some_and(|p| p != pid)) {
        assert!(
            Instant::now() < until,
            "node 1 did not come back (state {}); log:\n{}",
            status(1),
            up_log_tail(dir.path())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for i in acked {
        // An error or no reply (a node in transition) is retried; a missing key is a lost write.
        let until = Instant::now() + Duration::from_secs(10);
        let got = loop {
            let got = redis_cmd(redis, &["GET", &format!("f{i}")]);
            if !(got.is_empty() || got.starts_with('-')) || Instant::now() > until {
                break got;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(got, "$1\r\nv\r\n", "acknowledged f{i} lost; log:\n{}", up_log_tail(dir.path()));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    wait_exit(&mut child, Duration::from_secs(60));
}

/// A one-data-node `tern up` (front ends inside the node) and its ports.
struct Single {
    child: Child,
    rest: u16,
    redis: u16,
    mysql: u16,
}

fn single_node(dir: &std::path::Path, extra: &[&str]) -> Single {
    let (rest, redis, mysql, dn) = (free_port(), free_port(), free_port(), free_port());
    let ports: Vec<String> = [dn, rest, redis, mysql].iter().map(u16::to_string).collect();
    let mut args = vec!["--datanodes", "1", "--replicas", "1", "--data-memory", "128M", "--ldm-workers", "2"];
    args.extend(["--datanode-port", &ports[0], "--rest-port", &ports[1], "--redis-port", &ports[2]]);
    args.extend(["--mysql-port", &ports[3]]);
    args.extend_from_slice(extra);
    let (child, _) = up_ready(dir, &args);
    Single { child, rest, redis, mysql }
}

/// The value of the first exposition line that starts with `prefix` (None: no such line).
fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.rsplit(' ').next()).and_then(|v| v.parse().ok())
}

/// `tern up --metrics-port P`: the data node serves Prometheus text at `/metrics` — memory,
/// rows and memory per table, epochs, lock waits and lock-wait timeouts (made here by two
/// PyMySQL sessions on one row), commits — along with the front ends in its process (Redis
/// commands and errors, MySQL statements by kind with latency histograms); the REST port's
/// `/metrics` has the same front-end series.
#[test]
fn metrics_from_the_data_node_and_the_front_ends() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = free_port();
    let Single { mut child, rest, redis, mysql } = single_node(dir.path(), &["--metrics-port", &metrics.to_string()]);
    sql(
        mysql,
        "CREATE DATABASE m; CREATE TABLE m.t (id INT PRIMARY KEY, v INT); INSERT INTO m.t VALUES (1, 1), (2, 2)",
    )
    .unwrap();
    assert_eq!(redis_cmd(redis, &["SET", "a", "b"]), "+OK\r\n");
    assert!(redis_cmd(redis, &["INCR", "a"]).starts_with("-ERR"));
    // A lock wait that times out: one session holds the row, the other waits for it.
    let script = format!(
        "import pymysql\na = pymysql.connect(host='127.0.0.1', port={mysql}, user='root', autocommit=False)\nb = pymysql.connect(host='127.0.0.1', port={mysql}, user='root', autocommit=True)\na.cursor().execute('UPDATE m.t SET v = 5 WHERE id = 1')\ntry:\n    b.cursor().execute('UPDATE m.t SET v = 6 WHERE id = 1')\n    print('no wait')\nexcept pymysql.err.MySQLError as e:\n    print(e.args[0])\na.rollback()\n"
    );
    let out = Command::new("python3").args(["-c", &script]).output().expect("python3 with PyMySQL");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1205", "{}", String::from_utf8_lossy(&out.stderr));
    let until = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let t = http_get(metrics, "/metrics");
        // Table memory is published by each ldm about once a second.
        if metric(&t, "tern_datanode_table_memory_bytes{node=\"1\",database=\"m\",table=\"t\"}")
            .is_some_and(|v| v > 0.0)
            || Instant::now() > until
        {
            break t;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    for (prefix, at_least) in [
        ("tern_datanode_up{node=\"1\"}", 1.0),
        ("tern_datanode_started{node=\"1\"}", 1.0),
        ("tern_datanode_memory_used_bytes{node=\"1\"}", 1.0),
        ("tern_datanode_table_rows{node=\"1\",database=\"m\",table=\"t\"}", 2.0),
        ("tern_datanode_table_memory_bytes{node=\"1\",database=\"m\",table=\"t\"}", 1.0),
        ("tern_datanode_epoch_durable{node=\"1\"}", 1.0),
        ("tern_datanode_lock_waits_total{node=\"1\"}", 1.0),
        ("tern_datanode_lock_wait_timeouts_total{node=\"1\"}", 1.0),
        ("tern_datanode_commits_total{node=\"1\"}", 1.0),
        ("tern_datanode_redo_bytes_total{node=\"1\"}", 1.0),
        ("tern_redis_commands_total{command=\"set\"}", 1.0),
        ("tern_redis_command_errors_total{command=\"incr\"}", 1.0),
        ("tern_redis_command_duration_seconds_count{command=\"set\"}", 1.0),
        ("tern_mysql_statements_total{kind=\"insert\"}", 1.0),
        ("tern_mysql_statement_errors_total{kind=\"update\"}", 1.0),
        ("tern_mysql_statement_duration_seconds_bucket{kind=\"update\",le=\"+Inf\"}", 2.0),
    ] {
        let v = metric(&text, prefix).unwrap_or_else(|| panic!("no {prefix} in\n{text}"));
        assert!(v >= at_least, "{prefix} = {v}\n{text}");
    }
    assert!(text.contains("# TYPE tern_datanode_epoch_lag gauge"), "{text}");
    let rest_text = http_get(rest, "/metrics");
    assert!(metric(&rest_text, "tern_redis_commands_total{command=\"set\"}").is_some(), "{rest_text}");
    assert!(metric(&rest_text, "tern_mysql_statements_total{kind=\"insert\"}").is_some(), "{rest_text}");
    assert!(http_get(metrics, "/nothing").contains("not found"));
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    wait_exit(&mut child, Duration::from_secs(60));
}

/// The headless Chromium of the Debian package `chromium-headless-shell` (`.ci/run` installs it).
fn chromium() -> &'static str {
    for c in ["chromium-headless-shell", "chromium"] {
        if Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()) {
            return c;
        }
    }
    panic!("headless Chromium is needed: apt-get install -y chromium-headless-shell");
}

/// The status page (`/` on the REST port) of a running `tern up`, loaded in headless Chromium
/// with its script run: the data node and its state, the tables with rows and memory, the
/// throughput and latency charts drawn from the traffic made here, and the recent Redis error;
/// a screenshot is saved (`status-page.png` in cargo's test temp directory). The page loads
/// nothing from elsewhere.
#[test]
fn status_page_in_headless_chromium() {
    let browser = chromium();
    let dir = tempfile::tempdir().unwrap();
    let Single { mut child, rest, redis, mysql } = single_node(dir.path(), &[]);
    sql(mysql, "CREATE DATABASE shop; CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20)); INSERT INTO shop.items VALUES (1, 'tea'), (2, 'cake')")
        .unwrap();
    assert!(redis_cmd(redis, &["SET", "counter", "x"]).starts_with("+OK"));
    assert!(redis_cmd(redis, &["INCR", "counter"]).contains("not an integer"));
    // Traffic over a few sampling intervals (two seconds each), so the charts have points.
    let until = Instant::now() + Duration::from_secs(5);
    let mut i = 0;
    while Instant::now() < until {
        redis_cmd(redis, &["SET", &format!("k{i}"), "v"]);
        i += 1;
    }
    let page = http_get(rest, "/");
    assert!(page.contains("<title>Tern status</title>"), "{page}");
    assert!(!page.contains("http://") && !page.contains("https://") && !page.contains("src="), "no external assets");
    let dom = Command::new(browser)
        .args(["--no-sandbox", "--disable-gpu", "--virtual-time-budget=8000", "--dump-dom"])
        .arg(format!("http://127.0.0.1:{rest}/"))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout).to_string();
    for want in [
        "Tern status",
        "class=\"ok\">started<",
        ">shop.items<",
        "redis_0.string_keys",
        "<path d=\"M",
        "[redis] ERR value is not an integer",
    ] {
        assert!(dom.contains(want), "the page lacks {want:?}:\n{dom}");
    }
    assert!(dom.contains("— updated"), "the script did not run to the end:\n{dom}");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let out = Command::new(browser)
        .args(["--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=8000"])
        .args(["--window-size=1280,900", &format!("--screenshot={}", shot.display())])
        .arg(format!("http://127.0.0.1:{rest}/"))
        .output()
        .unwrap();
    let png = std::fs::read(&shot)
        .unwrap_or_else(|e| panic!("no screenshot ({e}): {}", String::from_utf8_lossy(&out.stderr)));
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "screenshot of {} bytes", png.len());
    eprintln!("status page screenshot: {}", shot.display());
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    wait_exit(&mut child, Duration::from_secs(60));
}

/// Runs `q` until `ok` accepts its output (figures a data node publishes about once a second).
fn sql_until(port: u16, q: &str, within: Duration, ok: impl Fn(&str) -> bool) -> String {
    let until = Instant::now() + within;
    loop {
        let got = sql(port, q).unwrap_or_else(|e| e);
        if ok(&got) {
            return got;
        }
        assert!(Instant::now() < until, "{q}: {got}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `ndbinfo` through MySQL on the default cluster: the nodes and the master, memory, the links
/// between the data nodes, every partition replica with its role and row count, the placement,
/// a row lock held by an open transaction (gone once it commits), and the counters; the
/// database is listed, read-only and subject to the usual errors.
#[test]
fn ndbinfo_shows_the_cluster_through_sql() {
    let dir = tempfile::tempdir().unwrap();
    let Cluster { mut child, mysql, dn, .. } = default_cluster(dir.path());
    let until = Instant::now() + Duration::from_secs(30);
    while !mysql_serves(mysql) {
        assert!(Instant::now() < until, "MySQL does not serve; log:\n{}", up_log_tail(dir.path()));
        std::thread::sleep(Duration::from_millis(100));
    }
    let nodes = sql_until(
        mysql,
        "SELECT node_id, node_group, status, is_master FROM ndbinfo.nodes ORDER BY node_id",
        Duration::from_secs(30),
        |o| o.lines().count() == 2 && o.lines().all(|l| l.contains("STARTED")),
    );
    let rows: Vec<Vec<&str>> = nodes.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!((rows[0][0], rows[1][0]), ("1", "2"), "{nodes}");
    assert!(rows.iter().all(|r| r[1] == "0"), "one node group: {nodes}");
    assert_eq!(rows.iter().filter(|r| r[3] == "1").count(), 1, "one master: {nodes}");
    // A node whose status request does not come back in time (a busy host) is missing from a
    // per-node table for that query: ask again.
    let mem = sql_until(
        mysql,
        "SELECT node_id, memory_type, total FROM ndbinfo.memoryusage ORDER BY node_id",
        Duration::from_secs(20),
        |o| o.lines().count() == 2,
    );
    assert!(mem.lines().all(|l| l.contains("Data memory") && l.ends_with(&(128u64 << 20).to_string())), "{mem}");
    let links = sql_until(
        mysql,
        "SELECT node_id, remote_node_id, status FROM ndbinfo.transporters ORDER BY node_id, remote_node_id",
        Duration::from_secs(10),
        |o| o == "1\t2\tCONNECTED\n2\t1\tCONNECTED",
    );
    assert!(!links.is_empty());

    sql(mysql, "CREATE DATABASE nd; CREATE TABLE nd.t (id INT PRIMARY KEY, v INT)").unwrap();
    let values: Vec<String> = (0..100).map(|i| format!("({i},{i})")).collect();
    sql(mysql, &format!("INSERT INTO nd.t VALUES {}", values.join(","))).unwrap();
    // Each row has a primary and a backup replica; none is copying or leaving.
    let frag_q = "SELECT replica_role, SUM(row_count) FROM ndbinfo.table_fragments \
                  WHERE database_name = 'nd' AND table_name = 't' GROUP BY replica_role ORDER BY replica_role";
    sql_until(mysql, frag_q, Duration::from_secs(10), |o| o == "backup\t100\nprimary\t100");
    let parts: usize =
        sql(mysql, "SELECT COUNT(*) FROM ndbinfo.table_placement WHERE database_name = 'nd'").unwrap().parse().unwrap();
    assert!(parts >= 2, "{parts} partitions");
    let placed = sql(
        mysql,
        "SELECT DISTINCT node_group, replica_nodes, moving_to_group FROM ndbinfo.table_placement \
         WHERE table_name = 't' ORDER BY replica_nodes",
    )
    .unwrap();
    assert!(placed.lines().all(|l| l == "0\t1,2\tNULL" || l == "0\t2,1\tNULL"), "{placed}");
    // The primaries are spread over both nodes.
    sql_until(
        mysql,
        "SELECT COUNT(DISTINCT node_id) FROM ndbinfo.table_fragments WHERE table_name = 't' AND replica_role = 'primary'",
        Duration::from_secs(20),
        |o| o == "2",
    );

    // A transaction that holds a row lock shows in cluster_locks until it commits.
    let c = Client::connect(&format!("127.0.0.1:{dn},127.0.0.1:{}", dn + 1)).unwrap();
    let t = c.table("nd", "t").unwrap();
    let mut txn = c.begin();
    let op = t.write(&[Value::Int(7), Value::Int(70)]).unwrap();
    block_on(txn.execute(vec![op], Exec::NoCommit)).unwrap();
    let locks_q = "SELECT node_id, mode, state, tableid = (SELECT MIN(table_id) FROM ndbinfo.table_placement \
                   WHERE table_name = 't') FROM ndbinfo.cluster_locks ORDER BY node_id";
    let locks = sql_until(mysql, locks_q, Duration::from_secs(10), |o| o.lines().count() == 2);
    assert_eq!(locks, "1\tX\tH\t1\n2\tX\tH\t1", "an exclusive lock at both replicas");
    block_on(txn.execute(vec![], Exec::Commit)).unwrap();
    sql_until(mysql, "SELECT COUNT(*) FROM ndbinfo.cluster_locks", Duration::from_secs(10), |o| o == "0");
    assert_eq!(sql(mysql, "SELECT v FROM nd.t WHERE id = 7").unwrap(), "70");

    sql_until(
        mysql,
        "SELECT COUNT(DISTINCT node_id), COUNT(*) > 4 FROM ndbinfo.counters",
        Duration::from_secs(20),
        |o| o == "2\t1",
    );
    let one = sql(mysql, "SELECT node_id FROM ndbinfo.nodes WHERE node_id = 2").unwrap();
    assert_eq!(one, "2");
    let dbs = sql(mysql, "SHOW DATABASES").unwrap();
    assert!(dbs.lines().any(|l| l == "ndbinfo"), "{dbs}");
    let tables = sql(mysql, "SHOW TABLES FROM ndbinfo").unwrap();
    assert!(tables.contains("cluster_locks") && tables.contains("table_fragments"), "{tables}");
    let e = sql(mysql, "SELECT * FROM ndbinfo.nope").unwrap_err();
    assert!(e.contains("1146"), "{e}");
    let e = sql(mysql, "CREATE DATABASE ndbinfo").unwrap_err();
    assert!(e.contains("1007"), "{e}");
    let e = sql(mysql, "INSERT INTO ndbinfo.counters VALUES (1, 'x', 1)").unwrap_err();
    assert!(e.contains("1036") && e.contains("read only"), "{e}");
    let e = sql(mysql, "DELETE FROM ndbinfo.cluster_locks").unwrap_err();
    assert!(e.contains("1036"), "{e}");
    let e = sql(mysql, "UPDATE information_schema.tables SET table_name = 'x'").unwrap_err();
    assert!(e.contains("1044"), "{e}");
    assert!(sql(mysql, "SELECT COUNT(*) FROM ndbinfo.nodes").is_ok(), "still serves");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    wait_exit(&mut child, Duration::from_secs(60));
}
