//! Prometheus text exposition (format 0.0.4) shared by the front ends and the data node: a
//! lock-free latency histogram, a process-wide registry of metric sources (each front end
//! registers one; whoever serves `/metrics` renders them all), and the recent errors of this
//! process (for the status page). Nothing here does I/O.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Histogram bucket upper bounds, in seconds (50 µs .. 2 s).
pub const BUCKETS: [f64; 12] = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.0];

/// A latency histogram updated with relaxed atomics (one fetch_add per bucket hit, count and
/// sum).
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, took: Duration) {
        self.observe_n(1, took);
    }

    /// `n` events that took `total` together (each counted at the mean).
    pub fn observe_n(&self, n: u64, total: Duration) {
        if n == 0 {
            return;
        }
        let each = total.as_secs_f64() / n as f64;
        if let Some(i) = BUCKETS.iter().position(|&b| each <= b) {
            self.buckets[i].fetch_add(n, Ordering::Relaxed);
        }
        self.count.fetch_add(n, Ordering::Relaxed);
        self.sum_ns.fetch_add(total.as_nanos().min(u64::MAX as u128) as u64, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    pub fn sum(&self) -> Duration {
        Duration::from_nanos(self.sum_ns.load(Ordering::Relaxed))
    }

    pub fn reset(&self) {
        self.buckets.iter().chain([&self.count, &self.sum_ns]).for_each(|a| a.store(0, Ordering::Relaxed));
    }

    /// The `_bucket`, `_sum` and `_count` lines of `name` with `labels` (`key="value",...` or
    /// empty). Buckets are cumulative, as Prometheus wants them.
    pub fn render(&self, name: &str, labels: &str, out: &mut String) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut acc = 0;
        for (i, b) in BUCKETS.iter().enumerate() {
            acc += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {acc}");
        }
        let count = self.count();
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {}", self.sum().as_secs_f64());
        let _ = writeln!(out, "{name}_count{braces} {count}");
    }
}

/// Writes `# HELP` and `# TYPE` for a metric.
pub fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value with `\`, `"` and newlines escaped.
pub fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

type Source = Arc<dyn Fn(&mut String) + Send + Sync>;

static SOURCES: Mutex<Vec<(&'static str, Source)>> = Mutex::new(Vec::new());

/// Adds a source of metrics to this process's exposition (a front end, once when it starts; a
/// second source under the same name replaces the first).
pub fn register(name: &'static str, f: Source) {
    let mut s = SOURCES.lock().unwrap_or_else(|e| e.into_inner());
    s.retain(|(n, _)| *n != name);
    s.push((name, f));
}

/// Every registered source's lines, in registration order.
pub fn render_registered(out: &mut String) {
    let sources: Vec<Source> =
        SOURCES.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(_, f)| f.clone()).collect();
    for f in sources {
        f(out);
    }
}

/// A data node as the management nodes see it (for the status page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    pub id: u16,
    pub addr: String,
    /// "started", "starting", "down", ...
    pub state: String,
}

static CLUSTER: Mutex<Vec<ClusterNode>> = Mutex::new(Vec::new());

/// The data nodes of the cluster, as the management nodes last said (an API server that watches
/// them sets it).
pub fn set_cluster_nodes(nodes: Vec<ClusterNode>) {
    *CLUSTER.lock().unwrap_or_else(|e| e.into_inner()) = nodes;
}

/// Read on every transaction's first batch by clients that route across data nodes.
static CLUSTER_MAP: std::sync::RwLock<Option<std::sync::Arc<tern_types::cluster::ClusterState>>> =
    std::sync::RwLock::new(None);

/// The cluster map as the management nodes last published it (an API server that watches them,
/// or a data node's membership thread, sets it): what `ndbinfo` shows of nodes and placement.
pub fn set_cluster_map(st: std::sync::Arc<tern_types::cluster::ClusterState>) {
    *CLUSTER_MAP.write().unwrap_or_else(|e| e.into_inner()) = Some(st);
}

pub fn cluster_map() -> Option<std::sync::Arc<tern_types::cluster::ClusterState>> {
    CLUSTER_MAP.read().unwrap_or_else(|e| e.into_inner()).clone()
}

pub fn cluster_nodes() -> Vec<ClusterNode> {
    CLUSTER.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// One error a client was answered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecentError {
    /// Unix time in milliseconds.
    pub at_ms: u64,
    /// "rest", "redis", "mysql".
    pub front_end: &'static str,
    pub text: String,
}

/// Errors kept for the status page.
pub const RECENT_ERRORS_MAX: usize = 50;

static RECENT: Mutex<std::collections::VecDeque<RecentError>> = Mutex::new(std::collections::VecDeque::new());

/// Keeps `text` (cut to 200 characters) as one of the recent errors of this process.
pub fn record_error(front_end: &'static str, text: &str) {
    let at_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let text: String = text.chars().take(200).collect();
    let mut r = RECENT.lock().unwrap_or_else(|e| e.into_inner());
    if r.len() >= RECENT_ERRORS_MAX {
        r.pop_front();
    }
    r.push_back(RecentError { at_ms, front_end, text });
}

/// The recent errors, oldest first.
pub fn recent_errors() -> Vec<RecentError> {
    RECENT.lock().unwrap_or_else(|e| e.into_inner()).iter().cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_render_cumulative_buckets() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(30));
        h.observe(Duration::from_millis(3));
        h.observe_n(2, Duration::from_secs(10));
        let mut out = String::new();
        h.render("x_seconds", "cmd=\"get\"", &mut out);
        assert!(out.contains("x_seconds_bucket{cmd=\"get\",le=\"0.00005\"} 1\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{cmd=\"get\",le=\"0.005\"} 2\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{cmd=\"get\",le=\"2\"} 2\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{cmd=\"get\",le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_seconds_count{cmd=\"get\"} 4\n"), "{out}");
        assert_eq!(label("a\"b\\c"), "a\\\"b\\\\c");
    }

    #[test]
    fn recent_errors_are_bounded() {
        for i in 0..RECENT_ERRORS_MAX + 5 {
            record_error("redis", &format!("ERR {i}"));
        }
        let r = recent_errors();
        assert_eq!(r.len(), RECENT_ERRORS_MAX);
        assert_eq!(r.last().unwrap().text, format!("ERR {}", RECENT_ERRORS_MAX + 4));
    }
}
