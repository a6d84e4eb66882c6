//! Prometheus metrics of the MySQL front end: statements by kind (the first keyword: select,
//! insert, update, delete, ...), their errors and a latency histogram per kind.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tern_client::metrics::{Histogram, header};

/// The statement kinds counted apart; anything else is "other".
pub const KINDS: [&str; 16] = [
    "select", "insert", "update", "delete", "replace", "set", "show", "begin", "commit", "rollback", "create", "drop",
    "alter", "grant", "load", "other",
];

#[derive(Default)]
pub struct Metrics {
    statements: [AtomicU64; KINDS.len()],
    errors: [AtomicU64; KINDS.len()],
    latency: [Histogram; KINDS.len()],
    pub connections: AtomicU64,
    pub rejected: AtomicU64,
}

/// The kind of a statement text (its first keyword; `START TRANSACTION` is begin).
pub fn kind_of(sql: &str) -> usize {
    let word: String = sql
        .trim_start_matches(|c: char| c.is_whitespace() || c == '(')
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_lowercase();
    let word = match word.as_str() {
        "start" => "begin",
        "with" | "explain" | "values" | "table" => "select",
        "truncate" | "rename" => "drop",
        "revoke" => "grant",
        w => w,
    };
    KINDS.iter().position(|k| *k == word).unwrap_or(KINDS.len() - 1)
}

impl Metrics {
    /// A statement that ran (`failed`: answered with an error).
    pub fn record(&self, sql: &str, took: Duration, failed: bool) {
        let k = kind_of(sql);
        self.statements[k].fetch_add(1, Ordering::Relaxed);
        if failed {
            self.errors[k].fetch_add(1, Ordering::Relaxed);
        }
        self.latency[k].observe(took);
    }

    pub fn render(&self, open: usize, out: &mut String) {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        header(out, "tern_mysql_connections_open", "gauge", "MySQL connections open now.");
        let _ = writeln!(out, "tern_mysql_connections_open {open}");
        header(out, "tern_mysql_connections_total", "counter", "MySQL connections accepted.");
        let _ = writeln!(out, "tern_mysql_connections_total {}", get(&self.connections));
        header(
            out,
            "tern_mysql_connections_rejected_total",
            "counter",
            "MySQL connections refused at max_connections.",
        );
        let _ = writeln!(out, "tern_mysql_connections_rejected_total {}", get(&self.rejected));
        let used: Vec<usize> = (0..KINDS.len()).filter(|&k| get(&self.statements[k]) > 0).collect();
        header(out, "tern_mysql_statements_total", "counter", "MySQL statements run, by kind.");
        for &k in &used {
            let _ = writeln!(out, "tern_mysql_statements_total{{kind=\"{}\"}} {}", KINDS[k], get(&self.statements[k]));
        }
        header(
            out,
            "tern_mysql_statement_errors_total",
            "counter",
            "MySQL statements answered with an error, by kind.",
        );
        for &k in &used {
            let _ =
                writeln!(out, "tern_mysql_statement_errors_total{{kind=\"{}\"}} {}", KINDS[k], get(&self.errors[k]));
        }
        header(out, "tern_mysql_statement_duration_seconds", "histogram", "MySQL statement latency, by kind.");
        for &k in &used {
            self.latency[k].render("tern_mysql_statement_duration_seconds", &format!("kind=\"{}\"", KINDS[k]), out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_counted_by_kind() {
        assert_eq!(KINDS[kind_of("  SELECT 1")], "select");
        assert_eq!(KINDS[kind_of("start transaction")], "begin");
        assert_eq!(KINDS[kind_of("(select 1) union (select 2)")], "select");
        assert_eq!(KINDS[kind_of("FLUSH TABLES")], "other");
        let m = Metrics::default();
        m.record("insert into t values (1)", Duration::from_millis(1), false);
        m.record("insert into t values (1)", Duration::from_millis(2), true);
        let mut out = String::new();
        m.render(3, &mut out);
        assert!(out.contains("tern_mysql_statements_total{kind=\"insert\"} 2\n"), "{out}");
        assert!(out.contains("tern_mysql_statement_errors_total{kind=\"insert\"} 1\n"), "{out}");
        assert!(out.contains("tern_mysql_statement_duration_seconds_count{kind=\"insert\"} 2\n"), "{out}");
        assert!(out.contains("tern_mysql_connections_open 3\n"), "{out}");
    }
}
