//! Prometheus metrics of the REST front end: requests by endpoint and status, a latency
//! histogram per endpoint, and connection counts (open, rejected over the cap, closed by a
//! deadline) and handler panics (text exposition format 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Histogram bucket upper bounds, in seconds.
const BUCKETS: [f64; 12] = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.0];

#[derive(Default)]
struct Series {
    count: u64,
    sum_s: f64,
    buckets: [u64; BUCKETS.len()],
}

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    latency: Mutex<BTreeMap<&'static str, Series>>,
    rejected: AtomicU64,
    timed_out: AtomicU64,
    panics: AtomicU64,
}

/// A poisoned lock (a panic elsewhere while it was held) still holds valid counters.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    pub fn conn_rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    pub fn conn_timed_out(&self) {
        self.timed_out.fetch_add(1, Ordering::Relaxed);
    }

    pub fn handler_panicked(&self) {
        self.panics.fetch_add(1, Ordering::Relaxed);
    }

    pub fn record(&self, endpoint: &'static str, status: u16, took: Duration) {
        if status >= 400 {
            tern_client::metrics::record_error("rest", &format!("{endpoint}: HTTP {status}"));
        }
        *lock(&self.requests).entry((endpoint, status)).or_default() += 1;
        let s = took.as_secs_f64();
        let mut l = lock(&self.latency);
        let series = l.entry(endpoint).or_default();
        series.count += 1;
        series.sum_s += s;
        for (i, &b) in BUCKETS.iter().enumerate() {
            if s <= b {
                series.buckets[i] += 1;
            }
        }
    }

    /// The exposition text; `open`: connections open now.
    pub fn render(&self, open: usize) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP tern_rest_process_pid Process id of this API server.\n# TYPE tern_rest_process_pid gauge\n",
        );
        let _ = writeln!(out, "tern_rest_process_pid {}", std::process::id());
        let mut counter = |name: &str, help: &str, kind: &str, v: u64| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        };
        counter("tern_rest_connections_open", "REST connections open now.", "gauge", open as u64);
        let n = self.rejected.load(Ordering::Relaxed);
        counter("tern_rest_connections_rejected_total", "Connections answered 503 over the cap.", "counter", n);
        let n = self.timed_out.load(Ordering::Relaxed);
        counter(
            "tern_rest_connections_timed_out_total",
            "Connections closed by a read or write deadline.",
            "counter",
            n,
        );
        let n = self.panics.load(Ordering::Relaxed);
        counter("tern_rest_handler_panics_total", "Requests answered 500 after a handler panic.", "counter", n);
        out.push_str("# HELP tern_rest_requests_total REST requests by endpoint and HTTP status.\n");
        out.push_str("# TYPE tern_rest_requests_total counter\n");
        for ((e, st), n) in lock(&self.requests).iter() {
            let _ = writeln!(out, "tern_rest_requests_total{{endpoint=\"{e}\",status=\"{st}\"}} {n}");
        }
        out.push_str("# HELP tern_rest_request_duration_seconds REST request latency by endpoint.\n");
        out.push_str("# TYPE tern_rest_request_duration_seconds histogram\n");
        for (e, s) in lock(&self.latency).iter() {
            for (i, b) in BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "tern_rest_request_duration_seconds_bucket{{endpoint=\"{e}\",le=\"{b}\"}} {}",
                    s.buckets[i]
                );
            }
            let _ =
                writeln!(out, "tern_rest_request_duration_seconds_bucket{{endpoint=\"{e}\",le=\"+Inf\"}} {}", s.count);
            let _ = writeln!(out, "tern_rest_request_duration_seconds_sum{{endpoint=\"{e}\"}} {}", s.sum_s);
            let _ = writeln!(out, "tern_rest_request_duration_seconds_count{{endpoint=\"{e}\"}} {}", s.count);
        }
        // The other front ends of this process (Redis, MySQL).
        tern_client::metrics::render_registered(&mut out);
        out
    }
}
