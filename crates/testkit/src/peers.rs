//! The real peers differential tests compare Tern with: redis-server and MariaDB, each started on
//! a free port in its own temporary directory and stopped when dropped. `.ci/run` installs both
//! (Debian's redis-server and mariadb-server); a test that needs one fails with the install
//! command when it is missing. A port picked free may be taken again before the peer binds it
//! (another test's server): the peer answering must be the one started, else it is tried again.

use crate::ports::free_port;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running peer server.
pub struct Peer {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Peer {
    /// The peer's temporary directory (its data and logs).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts redis-server with `extra` arguments (no persistence, 127.0.0.1).
pub fn redis(extra: &[&str]) -> Peer {
    assert!(
        Command::new("redis-server").arg("--version").output().is_ok(),
        "redis-server is needed for the differential tests: apt-get install -y redis-server"
    );
    for _ in 0..10 {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = free_port();
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(extra)
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        if redis_is_ours(&mut child, port) {
            return Peer { child, port, dir };
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("could not start redis-server on a free port");
}

/// Whether the redis-server answering on `port` is `child` (its INFO names the pid).
fn redis_is_ours(child: &mut Child, port: u16) -> bool {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if child.try_wait().ok().flatten().is_some() {
            return false; // it could not bind
        }
        if let Ok(mut t) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = t.set_read_timeout(Some(Duration::from_secs(2)));
            let _ = t.write_all(b"INFO server\r\n");
            let mut got = Vec::new();
            let mut b = [0u8; 4096];
            while let Ok(n) = t.read(&mut b) {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&b[..n]);
                if got.windows(11).any(|w| w == b"process_id:") && got.ends_with(b"\r\n\r\n") {
                    break;
                }
            }
            return String::from_utf8_lossy(&got).contains(&format!("process_id:{}\r\n", child.id()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Starts MariaDB on a fresh data directory (root without a password; the privilege system on
/// only with `grants`).
pub fn mariadb(grants: bool) -> Peer {
    for _ in 0..3 {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let data = dir.path().join("data");
        let st = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--user=root", "--auth-root-authentication-method=normal"])
            .output()
            .expect("mariadb-install-db is needed: apt-get install -y mariadb-server");
        assert!(st.status.success(), "mariadb-install-db: {}", String::from_utf8_lossy(&st.stderr));
        let port = free_port();
        let mut child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", dir.path().join("sock").display()))
            .args(["--user=root", "--innodb-buffer-pool-size=64M"])
            .args(if grants { &[][..] } else { &["--skip-grant-tables"][..] })
            .arg(format!("--log-error={}", dir.path().join("err.log").display()))
            .arg(format!("--pid-file={}", dir.path().join("pid").display()))
            .spawn()
            .expect("mariadbd starts");
        if mariadb_is_ours(&mut child, port, &dir.path().join("pid")) {
            return Peer { child, port, dir };
        }
        let log = std::fs::read_to_string(dir.path().join("err.log")).unwrap_or_default();
        eprintln!("mariadbd did not start on {port}; retrying:\n{log}");
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("MariaDB did not start");
}

/// Whether the server answering on `port` is MariaDB (its handshake names it) and its pid file
/// is `child`'s.
fn mariadb_is_ours(child: &mut Child, port: u16, pid_file: &std::path::Path) -> bool {
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        if child.try_wait().ok().flatten().is_some() {
            return false;
        }
        if let Ok(mut t) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = t.set_read_timeout(Some(Duration::from_secs(5)));
            let mut b = [0u8; 512];
            let n = t.read(&mut b).unwrap_or(0);
            let pid = std::fs::read_to_string(pid_file).unwrap_or_default();
            if String::from_utf8_lossy(&b[..n]).contains("MariaDB") && pid.trim() == child.id().to_string() {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}
