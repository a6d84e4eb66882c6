//! Shared by the MySQL front-end tests: a data node and a Tern MySQL server on 127.0.0.1.

use std::time::Duration;
use tern_client::Client;
use tern_mysql::MysqlOptions;
use tern_runtime::{DataNode, DataNodeConfig};

/// Starts a data node and a MySQL server for it (`max_packet` = max_allowed_packet); returns the
/// server's port.
pub fn start(max_packet: usize) -> (tempfile::TempDir, DataNode, u16) {
    let dir = tempfile::tempdir().unwrap();
    let n = DataNode::start(DataNodeConfig::local(dir.path(), 64 << 20)).unwrap();
    assert!(n.wait_started(Duration::from_secs(20)));
    let addr = n.local_addr().to_string();
    let (tx, rx) = std::sync::mpsc::channel();
    let opts = MysqlOptions { listen: "127.0.0.1:0".parse().unwrap(), max_packet, ..MysqlOptions::default() };
    std::thread::spawn(move || {
        tern_mysql::run(move || Client::connect(&addr).map_err(|e| e.to_string()), opts, |a| tx.send(a).unwrap())
            .unwrap()
    });
    let port = rx.recv_timeout(Duration::from_secs(20)).unwrap().port();
    (dir, n, port)
}

/// Runs `mariadb` against `port` with `args` and `sql` (installing the Debian client when it is
/// missing and this user may); (exit success, stdout, stderr).
#[allow(dead_code)]
pub fn mariadb(port: u16, args: &[&str], sql: &str) -> (bool, String, String) {
    use std::process::Command;
    if Command::new("mariadb").arg("--version").output().is_err() {
        let _ = Command::new("apt-get").args(["install", "-y", "mariadb-client"]).status();
    }
    let out = Command::new("mariadb")
        .args(["-h", "127.0.0.1", "-P", &port.to_string(), "-u", "root", "--batch", "--connect-timeout=10"])
        .args(args)
        .args(["-e", sql])
        .output()
        .expect("the mariadb client is needed: apt-get install -y mariadb-client");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
