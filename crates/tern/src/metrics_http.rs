//! The data node's Prometheus endpoint (`metrics_listen` in its TOML): `GET /metrics` on a
//! thread of its own, one connection at a time with short deadlines (a scraper that stalls
//! holds it at most `DEADLINE` per direction), answering from the node's status (memory, rows
//! and memory per table, epochs, lock waits, deadlocks, timeouts, redo and checkpoints) and the
//! front ends running in the process.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;
use tern_client::metrics::{header, label};

const DEADLINE: Duration = Duration::from_secs(2);
const HEAD_MAX: usize = 8 << 10;

/// Binds `listen` and serves `render()`'s text at `/metrics` until the process ends.
pub fn spawn(listen: SocketAddr, render: impl Fn() -> String + Send + 'static) -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind(listen).map_err(|e| anyhow::anyhow!("cannot listen on {listen} for metrics: {e}"))?;
    let addr = l.local_addr()?;
    std::thread::Builder::new().name("tern-metrics".into()).spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let _ = s.set_read_timeout(Some(DEADLINE));
            let _ = s.set_write_timeout(Some(DEADLINE));
            let mut head = Vec::new();
            let mut b = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < HEAD_MAX {
                match s.read(&mut b) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&b[..n]),
                }
            }
            let line = String::from_utf8_lossy(&head).lines().next().unwrap_or("").to_string();
            let mut parts = line.split(' ');
            let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let (status, body) = match (method, path.split('?').next().unwrap_or("")) {
                ("GET", "/metrics") => ("200 OK", render()),
                ("GET", _) => ("404 Not Found", "not found: the data node serves /metrics\n".to_string()),
                _ => ("405 Method Not Allowed", "only GET\n".to_string()),
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    })?;
    Ok(addr)
}

/// The exposition of a data node from its status and catalog.
pub fn render_node(client: &tern_client::Client) -> String {
    let mut out = String::new();
    let st = match client.status() {
        Ok(s) => s,
        Err(e) => {
            header(&mut out, "tern_datanode_up", "gauge", "1 when the data node answered its status.");
            let _ = writeln!(out, "tern_datanode_up 0\n# status failed: {}", e.message.replace('\n', " "));
            return out;
        }
    };
    let mut catalog = client.catalog();
    if st.table_rows.iter().chain(&st.table_bytes).any(|(t, _)| !catalog.tables.contains_key(t)) {
        // Tables made since this client last read the catalog.
        let _ = client.refresh_catalog();
        catalog = client.catalog();
    }
    let name = |t: u32| match catalog.tables.get(&t) {
        Some(t) => format!("database=\"{}\",table=\"{}\"", label(&t.database), label(&t.name)),
        None => format!("table_id=\"{t}\""),
    };
    let node = st.node_id;
    let gauge = |out: &mut String, n: &str, help: &str, v: u64| {
        header(out, n, "gauge", help);
        let _ = writeln!(out, "{n}{{node=\"{node}\"}} {v}");
    };
    gauge(&mut out, "tern_datanode_up", "1 when the data node answered its status.", 1);
    gauge(
        &mut out,
        "tern_datanode_started",
        "1 once the node serves (0 while it starts or copies data).",
        u64::from(st.state == "started"),
    );
    gauge(&mut out, "tern_datanode_memory_used_bytes", "Data memory in use.", st.memory_used);
    gauge(&mut out, "tern_datanode_memory_total_bytes", "Data memory configured.", st.memory_total);
    gauge(&mut out, "tern_datanode_rows", "Rows in the partition replicas on this node.", st.rows);
    gauge(&mut out, "tern_datanode_partitions", "Partitions in the catalog.", st.partitions as u64);
    gauge(&mut out, "tern_datanode_epoch_current", "The newest epoch given out.", st.current_epoch);
    gauge(&mut out, "tern_datanode_epoch_durable", "The newest epoch on disk on every node.", st.durable_epoch);
    gauge(
        &mut out,
        "tern_datanode_epoch_lag",
        "Epochs given out and not yet durable.",
        st.current_epoch.saturating_sub(st.durable_epoch),
    );
    gauge(&mut out, "tern_datanode_catalog_version", "The catalog version this node has.", st.catalog_version);
    header(&mut out, "tern_datanode_table_rows", "gauge", "Rows per table on this node.");
    for (t, n) in &st.table_rows {
        let _ = writeln!(out, "tern_datanode_table_rows{{node=\"{node}\",{}}} {n}", name(*t));
    }
    header(&mut out, "tern_datanode_table_memory_bytes", "gauge", "Data memory per table on this node.");
    for (t, n) in &st.table_bytes {
        let _ = writeln!(out, "tern_datanode_table_memory_bytes{{node=\"{node}\",{}}} {n}", name(*t));
    }
    header(&mut out, "tern_datanode_ttl_purged_rows_total", "counter", "Rows the TTL purge deleted, per table.");
    for (t, n) in &st.ttl_purged {
        let _ = writeln!(out, "tern_datanode_ttl_purged_rows_total{{node=\"{node}\",{}}} {n}", name(*t));
    }
    for (c, v) in &st.counters {
        let n = format!("tern_datanode_{c}_total");
        header(&mut out, &n, "counter", &counter_help(c));
        let _ = writeln!(out, "{n}{{node=\"{node}\"}} {v}");
    }
    header(
        &mut out,
        "tern_datanode_backup_reads_total",
        "counter",
        "Key reads served by a backup replica on this node.",
    );
    let _ = writeln!(out, "tern_datanode_backup_reads_total{{node=\"{node}\"}} {}", st.backup_reads);
    // Front ends running in this process.
    tern_client::metrics::render_registered(&mut out);
    out
}

fn counter_help(c: &str) -> String {
    match c {
        "aborts" => "Transactions aborted or rolled back by this node's coordinators.",
        "checkpoints" => "Local checkpoints completed (each ldm counts its own).",
        "commits" => "Transactions committed by this node's coordinators.",
        "deadlocks" => "Deadlocks found (a transaction chosen as the victim).",
        "fast_commits" => "Transactions sent as one-round commits (a few fall back to the ordinary rounds).",
        "inactive_timeouts" => "Transactions aborted after being inactive too long.",
        "lock_wait_timeouts" => "Lock waits that ended by the lock-wait timeout.",
        "lock_waits" => "Batches that waited for a row lock.",
        "redo_bytes" => "Redo log bytes written.",
        other => other,
    }
    .to_string()
}
