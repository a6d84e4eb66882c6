//! SQL logic tests: the `.sql` scripts in `tests/sql/` run against Tern and against MariaDB (the
//! real peer, started by this test from the Debian package in a temporary directory), and both
//! outputs must equal the script's `.result` file. A statement preceded by `-- tern-only` is not
//! sent to MariaDB (where MySQL semantics differ); `-- sort` sorts that statement's rows.
//!
//! Output per statement: `> statement`, then the column names and rows (tab-separated, `NULL`
//! for NULL), or `ok <affected rows>`, or `error <errno>`.
//! `TERN_RECORD=1` rewrites the `.result` files from MariaDB's answers (review the diff!).

mod common;

use common::{My, Res, start, start_mariadb};
use std::path::{Path, PathBuf};
use tern_mysql::proto;

/// Statements of a script with their directives: (statement, tern_only, sort).
fn statements(text: &str) -> Vec<(String, bool, bool)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut tern_only, mut sort) = (false, false);
    for line in text.lines() {
        let t = line.trim();
        if cur.is_empty() {
            if t == "-- tern-only" {
                tern_only = true;
                continue;
            }
            if t == "-- sort" {
                sort = true;
                continue;
            }
            if t.is_empty() || t.starts_with("--") || t.starts_with('#') {
                continue;
            }
        }
        if !cur.is_empty() {
            cur.push('\n');
        }
        cur.push_str(line);
        if t.ends_with(';') {
            let s = cur.trim().trim_end_matches(';').to_string();
            out.push((s, tern_only, sort));
            cur.clear();
            tern_only = false;
            sort = false;
        }
    }
    assert!(cur.trim().is_empty(), "a statement without its closing ';': {cur}");
    out
}

/// Runs a script on a server; its output in the `.result` format.
fn run_script(port: u16, db: &str, stmts: &[(String, bool, bool)], peer: bool) -> String {
    let (mut m, r) = My::connect(port, "root", None, proto::NATIVE_PASSWORD, true);
    assert_eq!(r, Res::Ok);
    for setup in [format!("DROP DATABASE IF EXISTS {db}"), format!("CREATE DATABASE {db}"), format!("USE {db}")] {
        assert_eq!(m.query(&setup), Res::Ok, "{setup}");
    }
    let mut out = String::new();
    for (sql, tern_only, sort) in stmts {
        out.push_str(&format!("> {}\n", sql.replace('\n', "\n  ")));
        if *tern_only && peer {
            out.push_str("(tern only)\n");
            continue;
        }
        if *tern_only {
            out.push_str("(tern only)\n");
            let _ = m.query(sql);
            continue;
        }
        match m.query(sql) {
            Res::Ok => out.push_str(&format!("ok {}\n", m.last_affected)),
            Res::Err(errno, _, _) => out.push_str(&format!("error {errno}\n")),
            Res::Rows(names, rows) => {
                out.push_str(&names.join("\t"));
                out.push('\n');
                let mut lines: Vec<String> = rows
                    .iter()
                    .map(|r| {
                        r.iter().map(|v| v.clone().unwrap_or_else(|| "NULL".into())).collect::<Vec<_>>().join("\t")
                    })
                    .collect();
                if *sort {
                    lines.sort();
                }
                for l in lines {
                    out.push_str(&l);
                    out.push('\n');
                }
            }
        }
    }
    out
}

fn scripts() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    v.sort();
    assert!(!v.is_empty());
    v
}

fn first_difference(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}: expected `{x}`, got `{y}`", i + 1);
        }
    }
    format!("lengths differ: expected {} lines, got {}", a.lines().count(), b.lines().count())
}

#[test]
fn sql_logic_scripts_match_mariadb_and_tern() {
    let peer = start_mariadb();
    let (_d, _n, port) = start(64 << 20);
    let record = std::env::var("TERN_RECORD").is_ok();
    let mut failures = Vec::new();
    for path in scripts() {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let db = format!("slt_{name}");
        let stmts = statements(&std::fs::read_to_string(&path).unwrap());
        let result_path = path.with_extension("result");
        let from_peer = run_script(peer.port, &db, &stmts, true);
        if record {
            std::fs::write(&result_path, &from_peer).unwrap();
        }
        let expected = std::fs::read_to_string(&result_path).unwrap_or_default();
        // The peer's own answers must still be the recorded ones (they are the reference).
        if from_peer != expected {
            failures.push(format!(
                "{name}: MariaDB differs from {name}.result: {}",
                first_difference(&expected, &from_peer)
            ));
        }
        let from_tern = run_script(port, &db, &stmts, false);
        if from_tern != expected {
            let got = path.with_extension("tern-output");
            let _ = std::fs::write(std::env::temp_dir().join(got.file_name().unwrap()), &from_tern);
            failures.push(format!("{name}: Tern differs: {}", first_difference(&expected, &from_tern)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
