//! TPC-H through the MySQL front end of `tern up`, differentially against MariaDB: `tern bench
//! tpch` generates scale factor 0.01 (tpchgen-cli, which `.ci/run` installs), loads it with LOAD
//! DATA into Tern and into a MariaDB it starts, runs the 22 queries (the specification's
//! validation parameters) on both, and every answer must equal MariaDB's text exactly.

use std::process::Command;

mod common;
use common::free_port;

#[test]
fn all_22_tpch_queries_answer_as_mariadb_does() {
    let dir = tempfile::tempdir().unwrap();
    let mysql = free_port();
    let (_up, line) = common::up_single(dir.path(), mysql, free_port(), "512M");
    assert!(line.contains(&format!("mysql=127.0.0.1:{mysql}")), "ready line names the MySQL port: {line}");

    let bench = Command::new(env!("CARGO_BIN_EXE_tern"))
        .args(["bench", "tpch", "--scale", "0.01", "--against", "mariadb", "--timeout", "300"])
        .args(["--addr", &format!("127.0.0.1:{mysql}"), "--dir"])
        .arg(dir.path().join("tpch"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&bench.stdout);
    assert!(bench.status.success(), "tern bench tpch failed:\n{report}\n{}", String::from_utf8_lossy(&bench.stderr));
    println!("{report}");
    let lines: Vec<&str> = report.lines().filter(|l| l.starts_with('Q')).collect();
    assert_eq!(lines.len(), 22, "one line per query:\n{report}");
    for l in lines {
        assert!(l.ends_with("= mariadb"), "answer differs from MariaDB's: {l}\n{report}");
    }
    // lineitem was loaded completely (60,175 rows at this scale).
    assert!(
        report.lines().any(|l| l.starts_with("tern") && l.contains("lineitem") && l.contains(" 60175 ")),
        "{report}"
    );
}
