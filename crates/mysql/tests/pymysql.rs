//! PyMySQL (from PyPI) against Tern's MySQL front end: `tests/pymysql_session.py` asserts a whole
//! session (connect with a database, DDL, parameterised DML, transactions, typed results,
//! errors). The test installs PyMySQL with pip when it is missing.

mod common;

use common::start;
use std::process::Command;

#[test]
fn pymysql_session() {
    let has = |py: &str| Command::new(py).args(["-c", "import pymysql"]).output().is_ok_and(|o| o.status.success());
    if !has("python3") {
        let _ = Command::new("python3").args(["-m", "pip", "install", "-q", "pymysql==1.1.1"]).status();
    }
    assert!(has("python3"), "PyMySQL is needed: python3 -m pip install pymysql");
    let (_d, _n, port) = start(64 << 20);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pymysql_session.py");
    let out = Command::new("python3").arg(script).arg(port.to_string()).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("pymysql ok"), "{text}");
}
