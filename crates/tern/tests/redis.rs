//! The Redis front end under `tern up`: keys and their TTLs written through Redis survive a
//! SIGKILL of the data node (restarted by the angel) once their epoch is durable, and the API
//! server serves them again without being restarted itself.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tern_client::Client;

mod common;
use common::{consecutive_ports, free_port};

/// A tiny RESP client: sends a command, returns the reply as text (`+OK`, `:5`, `$hello`, `$nil`,
/// `-ERR ...`).
struct Resp {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Resp {
    fn open(port: u16) -> Resp {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Resp { r: BufReader::new(s.try_clone().unwrap()), w: s }
    }

    fn cmd(&mut self, args: &[&[u8]]) -> Vec<u8> {
        let mut b = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            b.extend(format!("${}\r\n", a.len()).bytes());
            b.extend_from_slice(a);
            b.extend_from_slice(b"\r\n");
        }
        self.w.write_all(&b).unwrap();
        let mut line = Vec::new();
        self.r.read_until(b'\n', &mut line).unwrap();
        line.truncate(line.len() - 2);
        if line[0] == b'$' {
            let n: i64 = std::str::from_utf8(&line[1..]).unwrap().parse().unwrap();
            if n < 0 {
                return b"$nil".to_vec();
            }
            let mut v = vec![0; n as usize + 2];
            self.r.read_exact(&mut v).unwrap();
            v.truncate(n as usize);
            let mut out = b"$".to_vec();
            out.extend(v);
            return out;
        }
        line
    }

    fn q(&mut self, line: &str) -> String {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        String::from_utf8(self.cmd(&words)).unwrap()
    }
}

#[test]
fn redis_keys_and_ttls_survive_a_killed_data_node() {
    let dir = tempfile::tempdir().unwrap();
    // Two data nodes: on `port` and the next one.
    let (port, redis) = (consecutive_ports(2), free_port());
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["up", "--data-dir"])
        .arg(dir.path())
        .args(["--datanode-port", &port.to_string(), "--rest-port", &free_port().to_string()])
        .args(["--redis-port", &redis.to_string(), "--data-memory", "256M", "--ldm-workers", "2"])
        .args(["--mysql-port", &free_port().to_string()])
        // Not the default 1186: a management node of an earlier test may still be stopping.
        .args(["--mgmd-port", &free_port().to_string()])
        .env("TERN_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("up-stderr.log")).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    if !line.contains(&format!("redis=127.0.0.1:{redis}")) {
        let _ = child.kill();
        let log = std::fs::read_to_string(dir.path().join("up-stderr.log")).unwrap_or_default();
        panic!("ready line names the Redis port: {line:?}; tern up logged:\n{log}");
    }

    let mut c = Resp::open(redis);
    assert_eq!(c.q("PING"), "+PONG");
    for i in 0..100 {
        assert_eq!(c.q(&format!("SET s{i} value-{i}")), "+OK");
    }
    assert_eq!(c.q("SET t1 v EX 1000"), "+OK");
    assert_eq!(c.q("HSET h f1 v1 f2 v2"), ":2");
    assert_eq!(c.q("PEXPIRE h 500000"), ":1");
    assert_eq!(c.q("SET gone v PX 1"), "+OK");
    for _ in 0..5 {
        c.q("INCR ctr");
    }
    let big: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    assert_eq!(c.cmd(&[b"SET", b"big", &big]), b"+OK");
    assert_eq!(c.q("SELECT 3"), "+OK");
    assert_eq!(c.q("SET in3 three"), "+OK");

    // Wait until everything written is in a durable epoch.
    let addr = format!("127.0.0.1:{port}");
    let client = Client::connect(&addr).unwrap();
    let target = client.status().unwrap().current_epoch;
    let until = Instant::now() + Duration::from_secs(30);
    while client.status().unwrap().durable_epoch < target {
        assert!(Instant::now() < until, "epoch {target} did not become durable");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = client.status().unwrap().pid;
    drop(client);
    unsafe {
        libc::kill(pid as i32, libc::SIGKILL);
    }
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(Instant::now() < until, "data node was not restarted");
        if let Ok(cl) = Client::connect(&addr)
            && cl.status().map(|s| s.state == "started" && s.pid != pid).unwrap_or(false)
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // The same API server (and connection) serves again once it has reconnected.
    let until = Instant::now() + Duration::from_secs(30);
    let mut c = Resp::open(redis);
    loop {
        let r = c.q("GET s7");
        if r == "$value-7" {
            break;
        }
        assert!(r.starts_with("-"), "unexpected reply {r}");
        assert!(Instant::now() < until, "the Redis front end did not recover: {r}");
        std::thread::sleep(Duration::from_millis(100));
    }
    for i in 0..100 {
        assert_eq!(c.q(&format!("GET s{i}")), format!("$value-{i}"));
    }
    let ttl: i64 = c.q("TTL t1")[1..].parse().unwrap();
    assert!((900..=1000).contains(&ttl), "TTL survived: {ttl}");
    let pttl: i64 = c.q("PTTL h")[1..].parse().unwrap();
    assert!((400_000..=500_000).contains(&pttl), "PTTL survived: {pttl}");
    assert_eq!(c.q("HGET h f2"), "$v2");
    assert_eq!(c.q("HLEN h"), ":2");
    assert_eq!(c.q("GET gone"), "$nil");
    assert_eq!(c.q("GET ctr"), "$5");
    let mut want = b"$".to_vec();
    want.extend(&big);
    assert!(c.cmd(&[b"GET", b"big"]) == want, "the 200 KB value survived");
    assert_eq!(c.q("SELECT 3"), "+OK");
    assert_eq!(c.q("GET in3"), "$three");

    unsafe {
        libc::kill(child.id() as i32, libc::SIGINT);
    }
    let until = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < until, "tern up did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}
