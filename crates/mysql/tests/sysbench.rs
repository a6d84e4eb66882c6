//! sysbench 1.0.20's OLTP scripts, unmodified, against Tern's MySQL front end: `prepare`, every
//! workload of interfaces.md §3 in `--db-ps-mode=auto` (binary-protocol prepared statements) and
//! `disable` (text queries), and `cleanup`; then checks that the data is consistent (row counts
//! where the workload keeps them, `SUM(k)` where it keeps it). The test installs sysbench (Debian
//! package) when it is missing and this user may.

mod common;

use common::{mariadb, start};
use std::process::Command;

const TABLES: usize = 2;
const SIZE: usize = 1000;

fn sysbench(port: u16, args: &[&str]) -> String {
    let out = Command::new("sysbench")
        .args(args)
        .args([
            "--db-driver=mysql",
            "--mysql-host=127.0.0.1",
            &format!("--mysql-port={port}"),
            "--mysql-user=root",
            "--mysql-db=sbtest",
            &format!("--tables={TABLES}"),
            &format!("--table-size={SIZE}"),
        ])
        .output()
        .expect("sysbench is needed: apt-get install -y sysbench");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("FATAL"), "sysbench {args:?} failed:\n{text}");
    text
}

fn one(port: u16, sql: &str) -> String {
    let (ok, out, err) = mariadb(port, &["sbtest", "-N"], sql);
    assert!(ok, "{sql}: {err}");
    out.trim().to_string()
}

/// (rows, SUM(k)) of each table.
fn state(port: u16) -> Vec<(u64, i64)> {
    (1..=TABLES)
        .map(|t| {
            let r = one(port, &format!("SELECT COUNT(*), SUM(k) FROM sbtest{t}"));
            let mut it = r.split('\t');
            (it.next().unwrap().parse().unwrap(), it.next().unwrap().parse().unwrap())
        })
        .collect()
}

fn transactions(out: &str) -> u64 {
    let line = out.lines().find(|l| l.trim_start().starts_with("transactions:")).expect("a transactions line");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn sysbench_oltp_suite() {
    let (_d, _n, port) = start(64 << 20);
    let (ok, _, err) = mariadb(port, &[], "CREATE DATABASE sbtest");
    assert!(ok, "{err}");
    for mode in ["auto", "disable"] {
        sysbench(port, &["oltp_read_write", "prepare"]);
        let st = state(port);
        assert!(st.iter().all(|(n, _)| *n == SIZE as u64), "{st:?}");
        // Index on k exists and is used by select_random_points (k IN (...)).
        assert!(one(port, "SHOW CREATE TABLE sbtest1").contains("KEY `k_1` (`k`)"));
        let ps = format!("--db-ps-mode={mode}");
        let run = |w: &str, threads: &str| {
            let out =
                sysbench(port, &[w, &ps, "--time=1", &format!("--threads={threads}"), "--report-interval=0", "run"]);
            let n = transactions(&out);
            assert!(n > 0, "{w} {mode}: no transactions\n{out}");
            out
        };
        // Read-only workloads change nothing.
        let before = state(port);
        for w in ["oltp_point_select", "oltp_read_only", "select_random_points", "select_random_ranges"] {
            run(w, "4");
        }
        assert_eq!(state(port), before, "read-only workloads changed data ({mode})");
        // Non-index updates keep k; the rows stay.
        run("oltp_update_non_index", "4");
        assert_eq!(state(port), before, "oltp_update_non_index ({mode})");
        // read_write and write_only delete and re-insert the same ids: counts stay.
        let before_counts: Vec<u64> = state(port).iter().map(|s| s.0).collect();
        for w in ["oltp_read_write", "oltp_write_only", "oltp_update_index"] {
            run(w, "4");
            let counts: Vec<u64> = state(port).iter().map(|s| s.0).collect();
            assert_eq!(counts, before_counts, "{w} ({mode}) changed row counts");
        }
        // Every row is still whole and its k matches an index lookup.
        let r = one(port, "SELECT id, k FROM sbtest1 WHERE id = 7");
        let k = r.split('\t').nth(1).unwrap();
        assert!(one(port, &format!("SELECT COUNT(*) FROM sbtest1 WHERE k = {k} AND id = 7")) == "1");
        assert_eq!(one(port, "SELECT COUNT(*) FROM sbtest1 WHERE LENGTH(c) = 0 OR LENGTH(pad) = 0"), "0");
        // Inserts add rows, deletes remove them (sysbench's own auto-increment ids).
        let n0: u64 = state(port).iter().map(|s| s.0).sum();
        let out = run("oltp_insert", "2");
        let n1: u64 = state(port).iter().map(|s| s.0).sum();
        assert_eq!(n1, n0 + transactions(&out), "oltp_insert ({mode})");
        run("oltp_delete", "2");
        assert!(state(port).iter().map(|s| s.0).sum::<u64>() <= n1);
        sysbench(port, &["oltp_read_write", "cleanup"]);
        assert_eq!(one(port, "SHOW TABLES"), "");
    }
}
