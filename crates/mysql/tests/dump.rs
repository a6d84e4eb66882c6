//! mariadb-dump both ways (issue 14): a dump MariaDB made (extended INSERTs, `/*!…*/` comments,
//! LOCK TABLES, the SET prologue, FOREIGN KEY and CHECK clauses) loads into Tern, and
//! `mariadb-dump` run against Tern makes a file that loads back into Tern and into MariaDB, with
//! the same rows everywhere. Real files, made in the test by the Debian tools.

mod common;

use common::{start, start_mariadb};
use std::process::{Command, Stdio};

/// Runs `mariadb` on `port` reading `file` (or `-e sql`); (success, stdout, stderr).
fn client(port: u16, db: Option<&str>, sql: Option<&str>, file: Option<&std::path::Path>) -> (bool, String, String) {
    let mut c = Command::new("mariadb");
    c.args(["-h", "127.0.0.1", "-P", &port.to_string(), "-u", "root", "--batch"]);
    if let Some(d) = db {
        c.arg(d);
    }
    if let Some(s) = sql {
        c.args(["-e", s]);
    }
    c.stdin(match file {
        Some(f) => Stdio::from(std::fs::File::open(f).unwrap()),
        None => Stdio::null(),
    });
    let o = c.output().expect("mariadb client");
    (o.status.success(), String::from_utf8_lossy(&o.stdout).into(), String::from_utf8_lossy(&o.stderr).into())
}

fn dump(port: u16, args: &[&str], file: &std::path::Path) {
    let o = Command::new("mariadb-dump")
        .args(["-h", "127.0.0.1", "-P", &port.to_string(), "-u", "root"])
        .args(args)
        .output()
        .expect("mariadb-dump (mariadb-client)");
    assert!(o.status.success(), "mariadb-dump: {}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(file, &o.stdout).unwrap();
}

const ROWS: &str = "SELECT * FROM parent ORDER BY id; SELECT id, parent_id, HEX(b), d, e FROM child ORDER BY id";

#[test]
fn dumps_load_both_ways() {
    let (_d, _n, tern) = start(64 << 20);
    let maria = start_mariadb();
    let dir = tempfile::tempdir().unwrap();
    let setup = "CREATE DATABASE m; USE m; \
        CREATE TABLE parent (id INT PRIMARY KEY, name VARCHAR(20) NOT NULL DEFAULT 'x', note TEXT, ts DATETIME NULL, amount DECIMAL(12,3), flag TINYINT DEFAULT 0, UNIQUE KEY uq_name (name), CONSTRAINT ck CHECK (id > 0)); \
        CREATE TABLE child (id INT AUTO_INCREMENT PRIMARY KEY, parent_id INT NOT NULL, b BLOB, d DOUBLE, e ENUM('a','b') DEFAULT 'a', KEY fk_p (parent_id), CONSTRAINT fk_p FOREIGN KEY (parent_id) REFERENCES parent (id) ON DELETE CASCADE); \
        INSERT INTO parent VALUES (1,'one','multi\\nline ''quoted''','2024-02-03 04:05:06',12.5,1),(2,'two',NULL,NULL,NULL,0); \
        INSERT INTO child (parent_id, b, d, e) VALUES (1, X'00FF10', 1.5e10, 'b'), (2, NULL, -0.25, 'a')";
    let (ok, _, err) = client(maria.port, None, Some(setup), None);
    assert!(ok, "{err}");
    let (ok, want, err) = client(maria.port, Some("m"), Some(ROWS), None);
    assert!(ok, "{err}");

    // MariaDB's dump into Tern.
    let from_maria = dir.path().join("maria.sql");
    dump(maria.port, &["--databases", "m"], &from_maria);
    let text = String::from_utf8_lossy(&std::fs::read(&from_maria).unwrap()).into_owned();
    assert!(text.contains("FOREIGN KEY") && text.contains("LOCK TABLES") && text.contains("/*!40101"), "{text}");
    let (ok, _, err) = client(tern, None, None, Some(&from_maria));
    assert!(ok, "loading MariaDB's dump into Tern: {err}");
    let (ok, got, err) = client(tern, Some("m"), Some(ROWS), None);
    assert!(ok, "{err}");
    assert_eq!(got, want);

    // Tern's dump back into Tern (another database) and into MariaDB.
    let from_tern = dir.path().join("tern.sql");
    dump(tern, &["m"], &from_tern);
    for port in [tern, maria.port] {
        let (ok, _, err) = client(port, None, Some("CREATE DATABASE m2"), None);
        assert!(ok, "{err}");
        let (ok, _, err) = client(port, Some("m2"), None, Some(&from_tern));
        assert!(ok, "loading Tern's dump into {port}: {err}");
        let (ok, got, err) = client(port, Some("m2"), Some(ROWS), None);
        assert!(ok, "{err}");
        assert_eq!(got, want, "port {port}");
    }

    // The constraints Tern does not enforce are said in warnings.
    let (ok, out, err) = client(
        tern,
        Some("m"),
        Some("CREATE TABLE t3 (a INT PRIMARY KEY, b INT REFERENCES parent (id)); SHOW WARNINGS"),
        None,
    );
    assert!(ok, "{err}");
    assert!(out.contains("Warning\t1235\tTern does not enforce REFERENCES on `b` of table `t3`"), "{out}");
}
