//! Helpers of the tests that start `tern up` as a user would.
#![allow(dead_code)] // each test binary uses its own subset

use std::process::Child;
use std::time::{Duration, Instant};

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `n` free ports in a row (mgmds and data nodes of `tern up` take consecutive ports).
pub fn consecutive_ports(n: u16) -> u16 {
    let start = free_port();
    (start..start + 300).find(|p| (0..n).all(|i| std::net::TcpListener::bind(("127.0.0.1", p + i)).is_ok())).unwrap()
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

/// `tern up` with one data node in `dir/data`, the MySQL and REST front ends on the given ports
/// (the others on free ones), once it printed its ready line (returned).
pub fn up_single(dir: &std::path::Path, mysql: u16, rest: u16, data_memory: &str) -> (Up, String) {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["up", "--datanodes", "1", "--replicas", "1", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--datanode-port", &free_port().to_string(), "--rest-port", &rest.to_string()])
        .args(["--redis-port", &free_port().to_string(), "--data-memory", data_memory])
        .args(["--mysql-port", &mysql.to_string(), "--mgmd-port", &free_port().to_string()])
        .env("TERN_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let up = Up(child);
    let mut line = String::new();
    BufReader::new(out).read_line(&mut line).unwrap();
    (up, line)
}
