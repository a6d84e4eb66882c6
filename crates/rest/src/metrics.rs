//! Prometheus metrics of the REST front end: requests by endpoint and status, and a latency
//! histogram per endpoint (text exposition format 0.0.4).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
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
}

impl Metrics {
    pub fn record(&self, endpoint: &'static str, status: u16, took: Duration) {
        *self.requests.lock().expect("metrics").entry((endpoint, status)).or_default() += 1;
        let s = took.as_secs_f64();
        let mut l = self.latency.lock().expect("metrics");
        let series = l.entry(endpoint).or_default();
        series.count += 1;
        series.sum_s += s;
        for (i, &b) in BUCKETS.iter().enumerate() {
            if s <= b {
                series.buckets[i] += 1;
            }
        }
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP tern_rest_process_pid Process id of this API server.\n# TYPE tern_rest_process_pid gauge\n",
        );
        let _ = writeln!(out, "tern_rest_process_pid {}", std::process::id());
        out.push_str("# HELP tern_rest_requests_total REST requests by endpoint and HTTP status.\n");
        out.push_str("# TYPE tern_rest_requests_total counter\n");
        for ((e, st), n) in self.requests.lock().expect("metrics").iter() {
            let _ = writeln!(out, "tern_rest_requests_total{{endpoint=\"{e}\",status=\"{st}\"}} {n}");
        }
        out.push_str("# HELP tern_rest_request_duration_seconds REST request latency by endpoint.\n");
        out.push_str("# TYPE tern_rest_request_duration_seconds histogram\n");
        for (e, s) in self.latency.lock().expect("metrics").iter() {
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
        out
    }
}
