//! Helpers of the tests that start `tern up` as a user would.
#![allow(dead_code)] // each test binary uses its own subset

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use tern_testkit::ports::free_port;

/// `n` free ports in a row (mgmds and data nodes of `tern up` take consecutive ports).
pub fn consecutive_ports(n: u16) -> u16 {
    tern_testkit::ports::ports_in_a_row(n)
}

/// `tern up`, stopped (SIGINT, as a user's Ctrl-C) when dropped, also when the test fails.
pub struct Up(pub Child);

impl Drop for Up {
    fn drop(&mut self) {
        // SAFETY: signals a child process this test started.
        unsafe {
            libc::kill(self.0.id() as i32, libc::SIGINT);
        }
        let until = Instant::now() + Duration::from_secs(30);
        while self.0.try_wait().ok().flatten().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `tern up ARGS...` with its log (warnings and up) in `log_dir/up-stderr.log`; returns
/// it (stopped when dropped) and its first line on stdout (the ready line; empty if it stopped).
pub fn spawn_up(log_dir: &std::path::Path, args: &[String]) -> (Up, String) {
    use std::io::{BufRead, BufReader};

    std::fs::create_dir_all(log_dir).unwrap();
    let log = std::fs::File::create(log_dir.join("up-stderr.log")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .arg("up")
        .args(args)
        .env("TERN_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let up = Up(child);
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    (up, line)
}

/// What `tern up` started by `spawn_up` logged.
pub fn up_log(log_dir: &std::path::Path) -> String {
    std::fs::read_to_string(log_dir.join("up-stderr.log")).unwrap_or_default()
}

/// `tern up` with one data node in `dir/data`, the MySQL and REST front ends on the given ports
/// (the others on free ones), once it printed its ready line (returned).
pub fn up_single(dir: &std::path::Path, mysql: u16, rest: u16, data_memory: &str) -> (Up, String) {
    let data = dir.join("data").display().to_string();
    let args: Vec<String> = [
        "--datanodes",
        "1",
        "--replicas",
        "1",
        "--data-dir",
        &data,
        "--datanode-port",
        &free_port().to_string(),
        "--rest-port",
        &rest.to_string(),
        "--redis-port",
        &free_port().to_string(),
        "--data-memory",
        data_memory,
        "--mysql-port",
        &mysql.to_string(),
        "--mgmd-port",
        &free_port().to_string(),
    ]
    .map(String::from)
    .to_vec();
    spawn_up(dir, &args)
}

/// The pid of `parent`'s child process with an argument ending in `word`.
pub fn child_pid(parent: u32, word: &str) -> Option<u32> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // The parent pid is the second field after the parenthesised command name.
        let ppid = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid == Some(parent) && cmd.split(|&b| b == 0).any(|a| a.ends_with(word.as_bytes())) {
            return Some(pid);
        }
    }
    None
}

/// Runs statements with the mariadb client (a new connection each time); the output, tab
/// separated without headers, or the error text.
pub fn sql(port: u16, q: &str) -> Result<String, String> {
    let o = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-P", &port.to_string(), "-u", "root", "-N", "-B", "-e", q])
        .stdin(Stdio::null())
        .output()
        .expect("mariadb client");
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&o.stderr).trim().to_string())
    }
}

pub fn redis_set(port: u16, key: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let cmd = format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1\r\nv\r\n", key.len());
    if s.write_all(cmd.as_bytes()).is_err() {
        return false;
    }
    let mut buf = [0u8; 5];
    matches!(s.read(&mut buf), Ok(5) if &buf == b"+OK\r\n")
}

/// One Redis command and its whole reply (read until the server pauses; replies here are short).
pub fn redis_cmd(port: u16, args: &[&str]) -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return String::new() };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut cmd = format!("*{}\r\n", args.len());
    for a in args {
        cmd.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    if s.write_all(cmd.as_bytes()).is_err() {
        return String::new();
    }
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).to_string()
}
