//! The `mariadb` command-line client against Tern's MySQL front end (the test installs the Debian
//! package when it is missing and it may): connect with and without a database, the statements it
//! sends itself, database DDL, and errors as the client prints them.

use std::process::Command;
mod common;

use common::start;

/// Runs `mariadb` with `args` and `sql`; (exit success, stdout, stderr).
fn mariadb(port: u16, args: &[&str], sql: &str) -> (bool, String, String) {
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

#[test]
fn mariadb_client_sessions() {
    let (_d, _n, port) = start(64 << 20);
    let (ok, out, err) = mariadb(port, &[], "SELECT @@version_comment LIMIT 1; CREATE DATABASE shop; SHOW DATABASES");
    assert!(ok, "{err}");
    assert_eq!(out, "@@version_comment\nTern\nDatabase\ninformation_schema\nshop\n");
    let (ok, out, err) = mariadb(port, &["shop"], "SELECT DATABASE(); SHOW TABLES; SET NAMES utf8mb4; SELECT 7");
    assert!(ok, "{err}");
    assert_eq!(out, "DATABASE()\nshop\n7\n7\n");
    let (ok, _, err) = mariadb(port, &["nope"], "SELECT 1");
    assert!(!ok);
    assert!(err.contains("ERROR 1049 (42000)") && err.contains("Unknown database 'nope'"), "{err}");
    let (ok, _, err) = mariadb(port, &[], "SELECT * FROM shop.items");
    assert!(!ok);
    assert!(err.contains("ERROR 1235 (42000)"), "{err}");
    let (ok, _, err) = mariadb(port, &["-u", "mallory"], "SELECT 1");
    assert!(!ok);
    assert!(err.contains("ERROR 1045 (28000)"), "{err}");
    let (ok, _, err) = mariadb(port, &[], "DROP DATABASE shop; DROP DATABASE shop");
    assert!(!ok);
    assert!(err.contains("ERROR 1008"), "{err}");
}
