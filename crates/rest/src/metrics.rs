//! Prometheus metrics of the REST front end: requests by endpoint and status, a latency
//! histogram per endpoint, and connection counts (open, rejected over the cap, closed by a
//! deadline) and handler panics (text exposition format 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tern_client::metrics::Histogram;

#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    latency: Mutex<BTreeMap<&'static str, Histogram>>,
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
        lock(&self.latency).entry(endpoint).or_default().observe(took);
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
        for (e, h) in lock(&self.latency).iter() {
            h.render("tern_rest_request_duration_seconds", &format!("endpoint=\"{e}\""), &mut out);
        }
        // The other front ends of this process (Redis, MySQL).
        tern_client::metrics::render_registered(&mut out);
        out
    }
}
