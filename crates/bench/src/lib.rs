//! Load generators behind `tern bench`. Every suite prints a table in the seeds' format
//! (`Benchmark | Throughput | Median | p99 | Batch | Threads | CPU`) and, with `--json`, one JSON
//! object per row with at least `benchmark, throughput, p50_us, p99_us, batch, threads`.
//!
//! `native` is flexAsynch-like: a table of an INT key and 25 INT columns (104-byte rows); each
//! thread has its own connection and runs transactions of `batch` primary-key operations over its
//! own key range: inserts, then reads (random keys, for a fixed time), updates and deletes.
//! Throughput is rows per second; latency is per batch (one round trip). Benchmarks are programs,
//! never tests: nothing here asserts a speed.

pub mod feature_store;
pub mod redis;
pub mod rest;
pub mod sql;
pub mod tpch;

use hdrhistogram::Histogram;
use std::time::{Duration, Instant};
use tern_client::{Client, ColumnType, DdlReq, OpResult, Table, TableHandle, Value};
use tern_types::rng::Rng;
use tern_types::schema::Column;

/// One result row.
#[derive(Debug, Clone)]
pub struct BenchRow {
    pub benchmark: String,
    /// Rows (or requests) per second.
    pub throughput: f64,
    pub p50_us: u64,
    pub p99_us: u64,
    /// The slowest request (with its retries): the longest stall a client saw.
    pub max_us: u64,
    pub batch: usize,
    pub threads: usize,
    /// CPU used by the server process during the run, in % of one core (None if unknown).
    pub server_cpu_pct: Option<f64>,
    /// CPU used by this (client) process, in % of one core.
    pub client_cpu_pct: f64,
    /// Server CPU microseconds per operation (row or request): user+system time of the server
    /// processes (`set_server_pids`, else the one the benchmark talks to) over the operations
    /// done — comparable between runs whatever the client's share of the cores.
    pub server_us_per_op: Option<f64>,
}

impl BenchRow {
    pub fn json(&self) -> String {
        let cpu = self.server_cpu_pct.map(|c| format!("{c:.0}")).unwrap_or_else(|| "null".into());
        let per_op = self.server_us_per_op.map(|c| format!("{c:.2}")).unwrap_or_else(|| "null".into());
        format!(
            "{{\"benchmark\":\"{}\",\"throughput\":{:.0},\"p50_us\":{},\"p99_us\":{},\"max_us\":{},\"batch\":{},\"threads\":{},\"server_cpu_pct\":{},\"client_cpu_pct\":{:.0},\"server_us_per_op\":{}}}",
            self.benchmark,
            self.throughput,
            self.p50_us,
            self.p99_us,
            self.max_us,
            self.batch,
            self.threads,
            cpu,
            self.client_cpu_pct,
            per_op
        )
    }
}

pub fn print_header() {
    println!("Benchmark | Throughput | Median | p99 | Max | Batch | Threads | CPU | Server us/op");
    println!("---|---|---|---|---|---|---|---|---");
}

pub fn print_row(r: &BenchRow) {
    let cpu = match r.server_cpu_pct {
        Some(c) => format!("{c:.0}% (client {:.0}%)", r.client_cpu_pct),
        None => format!("client {:.0}%", r.client_cpu_pct),
    };
    let per_op = r.server_us_per_op.map(|c| format!("{c:.2}")).unwrap_or_else(|| "-".into());
    println!(
        "{} | {}/s | {} us | {} us | {} us | {} | {} | {} | {}",
        r.benchmark,
        group(r.throughput as u64),
        r.p50_us,
        r.p99_us,
        r.max_us,
        r.batch,
        r.threads,
        cpu,
        per_op
    );
}

fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// CPU seconds used so far by a process (utime + stime from /proc), or None.
pub fn process_cpu_secs(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some((utime + stime) / hz)
}

static SERVER_PIDS: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();

/// The server's processes, whose CPU the benchmarks report (with every descendant: `tern up`'s
/// pid covers its management and data nodes and API server). Without it, the one process the
/// benchmark talks to. `tern bench` sets it from `TERN_SERVER_PIDS`.
pub fn set_server_pids(pids: Vec<u32>) {
    let _ = SERVER_PIDS.set(pids);
}

/// The processes in `roots` and all their descendants (from /proc).
fn with_descendants(roots: &[u32]) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            let ppid = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
            if let Some(pp) = ppid {
                parent_of.push((pid, pp));
            }
        }
    }
    let mut all: Vec<u32> = roots.to_vec();
    let mut i = 0;
    while i < all.len() {
        let p = all[i];
        all.extend(
            parent_of.iter().filter(|&&(c, pp)| pp == p && !all.contains(&c)).map(|&(c, _)| c).collect::<Vec<_>>(),
        );
        i += 1;
    }
    all
}

/// CPU seconds the server used so far: the processes of `set_server_pids` and their
/// descendants, else `pid` (0: unknown).
pub fn server_cpu_secs(pid: u32) -> Option<f64> {
    match SERVER_PIDS.get() {
        Some(roots) if !roots.is_empty() => {
            Some(with_descendants(roots).into_iter().filter_map(process_cpu_secs).sum())
        }
        _ if pid == 0 => None,
        _ => process_cpu_secs(pid),
    }
}

/// Server CPU in % of one core between two `server_cpu_secs` readings `elapsed` seconds apart.
pub fn cpu_pct(before: Option<f64>, after: Option<f64>, elapsed: f64) -> Option<f64> {
    Some((after? - before?) / elapsed * 100.0)
}

/// Server CPU microseconds per operation between two `server_cpu_secs` readings.
pub fn per_op_us(before: Option<f64>, after: Option<f64>, ops: u64) -> Option<f64> {
    match (before, after) {
        (Some(a), Some(b)) if ops > 0 => Some((b - a) / ops as f64 * 1e6),
        _ => None,
    }
}

/// Resident set size of a process in bytes (from /proc), or None.
pub fn process_rss_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[derive(Debug, Clone)]
pub struct NativeOptions {
    pub addr: String,
    pub threads: usize,
    pub batch: usize,
    pub rows: u64,
    pub read_seconds: f64,
    /// Phases to run, in order, from: insert, read, update, delete.
    pub phases: Vec<String>,
    /// Read this existing table (`db.table`, INT key 0..rows) instead of the flex table; only
    /// the read phase is allowed then (to compare front ends on the same rows).
    pub table: Option<String>,
    /// Use `bench.flex_rb`, the flex table created with `NDB_TABLE=READ_BACKUP=1` (committed
    /// reads at a backup replica on the coordinator's node).
    pub read_backup: bool,
}

pub const BENCH_DB: &str = "bench";
pub const FLEX_TABLE: &str = "flex";

fn flex_table(read_backup: bool) -> Table {
    let mut columns = vec![Column::new("id", ColumnType::Int { unsigned: false }).not_null()];
    for i in 0..25 {
        columns.push(Column::new(&format!("c{i}"), ColumnType::Int { unsigned: false }).not_null());
    }
    if read_backup {
        let mut t = Table::new(BENCH_DB, "flex_rb", columns, vec![0]);
        t.comment = "NDB_TABLE=READ_BACKUP=1".into();
        return t;
    }
    Table::new(BENCH_DB, FLEX_TABLE, columns, vec![0])
}

/// Creates (if absent) the flexAsynch table (`flex`, or `flex_rb` with READ_BACKUP=1).
pub fn ensure_flex(client: &Client, read_backup: bool) -> Result<TableHandle, String> {
    client.ddl(DdlReq::CreateDatabase { name: BENCH_DB.into(), if_not_exists: true }).map_err(|e| e.to_string())?;
    let table = flex_table(read_backup);
    let name = table.name.clone();
    client.ddl(DdlReq::CreateTable { table, if_not_exists: true }).map_err(|e| e.to_string())?;
    client.table(BENCH_DB, &name).map_err(|e| e.to_string())
}

fn flex_values(id: i64, salt: i64) -> Vec<Value> {
    (0..26)
        .map(|c| Value::Int(if c == 0 { id } else { id.wrapping_mul(31).wrapping_add(c + salt) as i32 as i64 }))
        .collect()
}

/// Runs the native suite; returns one row per phase.
pub fn run_native(o: &NativeOptions) -> Result<Vec<BenchRow>, String> {
    let setup = Client::connect(&o.addr).map_err(|e| e.to_string())?;
    let table = match &o.table {
        None => ensure_flex(&setup, o.read_backup)?,
        Some(name) => {
            let (db, t) = name.split_once('.').ok_or_else(|| format!("--table wants db.table, not '{name}'"))?;
            if o.phases.iter().any(|p| p != "read") {
                return Err("--table is for the read phase only (--phases read)".into());
            }
            setup.table(db, t).map_err(|e| e.to_string())?
        }
    };
    let server_pid = setup.status().map(|s| s.pid).unwrap_or(0);
    let mut out = Vec::new();
    for phase in &o.phases {
        let row = run_phase(o, &table, phase, server_pid)?;
        out.push(row);
    }
    Ok(out)
}

fn run_phase(o: &NativeOptions, table: &TableHandle, phase: &str, server_pid: u32) -> Result<BenchRow, String> {
    let threads = o.threads.max(1);
    let batch = o.batch.max(1);
    let per_thread = o.rows / threads as u64;
    let clients: Vec<Client> =
        (0..threads).map(|_| Client::connect(&o.addr).map_err(|e| e.to_string())).collect::<Result<_, _>>()?;
    let server_cpu0 = server_cpu_secs(server_pid);
    let client_cpu0 = process_cpu_secs(std::process::id()).unwrap_or(0.0);
    let start = Instant::now();
    let results: Vec<Result<(u64, Histogram<u64>), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(ti, client)| {
                let table = table.clone();
                let phase = phase.to_string();
                let read_for = Duration::from_secs_f64(o.read_seconds);
                s.spawn(move || {
                    let lo = ti as u64 * per_thread;
                    let hi = lo + per_thread;
                    worker(&client, &table, &phase, lo, hi, batch, read_for, ti as u64)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("bench thread panicked".into()))).collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let (rows, hist) = merge_threads(results)?;
    let server_cpu1 = server_cpu_secs(server_pid);
    let client_cpu = (process_cpu_secs(std::process::id()).unwrap_or(0.0) - client_cpu0) / elapsed * 100.0;
    Ok(BenchRow {
        benchmark: format!("native-{phase}"),
        throughput: rows as f64 / elapsed,
        p50_us: hist.value_at_quantile(0.5),
        p99_us: hist.value_at_quantile(0.99),
        max_us: hist.max(),
        batch,
        threads,
        server_cpu_pct: cpu_pct(server_cpu0, server_cpu1, elapsed),
        client_cpu_pct: client_cpu,
        server_us_per_op: per_op_us(server_cpu0, server_cpu1, rows),
    })
}

/// Sums the rows and merges the latency histograms of the benchmark's client threads.
pub(crate) fn merge_threads(
    results: Vec<Result<(u64, Histogram<u64>), String>>,
) -> Result<(u64, Histogram<u64>), String> {
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let mut rows = 0;
    for r in results {
        let (n, h) = r?;
        rows += n;
        hist.add(h).map_err(|e| e.to_string())?;
    }
    Ok((rows, hist))
}

/// What one measurement is: its name, client threads, batch, seconds, and the server process
/// whose CPU is reported.
pub(crate) struct Measure {
    pub name: String,
    pub threads: usize,
    pub batch: usize,
    pub seconds: f64,
    pub server_pid: u32,
}

/// Runs `m.threads` client threads for `m.seconds`: each builds its state with `setup(thread)`
/// and repeats `step`, which does one request and returns (units done, the request's latency).
/// One row: units per second, latency percentiles, and the CPU of the server and of this process.
pub(crate) fn measure<S>(
    m: Measure,
    setup: impl Fn(usize) -> Result<S, String> + Sync,
    step: impl Fn(&mut S) -> Result<(u64, Duration), String> + Sync,
) -> Result<BenchRow, String> {
    let cpu0 = server_cpu_secs(m.server_pid);
    let me0 = process_cpu_secs(std::process::id()).unwrap_or(0.0);
    let start = Instant::now();
    let (setup, step) = (&setup, &step);
    let results: Vec<Result<(u64, Histogram<u64>), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..m.threads)
            .map(|t| {
                s.spawn(move || -> Result<(u64, Histogram<u64>), String> {
                    let mut state = setup(t)?;
                    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
                    let until = Instant::now() + Duration::from_secs_f64(m.seconds);
                    let mut units = 0u64;
                    while Instant::now() < until {
                        let (n, took) = step(&mut state)?;
                        hist.record(took.as_micros() as u64).map_err(|e| e.to_string())?;
                        units += n;
                    }
                    Ok((units, hist))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("bench thread panicked".into()))).collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let (units, hist) = merge_threads(results)?;
    let cpu1 = server_cpu_secs(m.server_pid);
    Ok(BenchRow {
        benchmark: m.name,
        throughput: units as f64 / elapsed,
        p50_us: hist.value_at_quantile(0.5),
        p99_us: hist.value_at_quantile(0.99),
        max_us: hist.max(),
        batch: m.batch,
        threads: m.threads,
        server_cpu_pct: cpu_pct(cpu0, cpu1, elapsed),
        client_cpu_pct: (process_cpu_secs(std::process::id()).unwrap_or(0.0) - me0) / elapsed * 100.0,
        server_us_per_op: per_op_us(cpu0, cpu1, units),
    })
}

#[allow(clippy::too_many_arguments)]
fn worker(
    client: &Client,
    t: &TableHandle,
    phase: &str,
    lo: u64,
    hi: u64,
    batch: usize,
    read_for: Duration,
    seed: u64,
) -> Result<(u64, Histogram<u64>), String> {
    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let b = client.blocking();
    let mut done = 0u64;
    let mut rng = Rng::new(seed.wrapping_mul(0x9e37_79b9) + 1);
    let mut run_batch = |ops: Vec<tern_client::KeyOp>, expect_rows: bool| -> Result<u64, String> {
        let n = ops.len() as u64;
        let t0 = Instant::now();
        // A temporary error (a node restarting, a partition switching to a new node group) is
        // retried for up to 30 s; the batch's latency includes the wait (the stall it saw).
        let r = loop {
            match b.execute(ops.clone()) {
                Ok(r) => break r,
                // (Writes here are idempotent, so an unknown outcome is retried too.)
                Err(e)
                    if (e.is_temporary() || e.code == tern_client::ErrorCode::UnknownResult)
                        && t0.elapsed() < Duration::from_secs(30) =>
                {
                    std::thread::sleep(Duration::from_millis(2))
                }
                Err(e) => return Err(e.to_string()),
            }
        };
        hist.record(t0.elapsed().as_micros() as u64).map_err(|e| e.to_string())?;
        if expect_rows && r.iter().any(|x| !matches!(x, OpResult::Row(_))) {
            return Err("a read found no row: load the table first (phase insert)".into());
        }
        Ok(n)
    };
    match phase {
        "read" => {
            let until = Instant::now() + read_for;
            let span = (hi - lo).max(1);
            while Instant::now() < until {
                let ops = (0..batch)
                    .map(|_| t.read(&[Value::Int((lo + rng.below(span)) as i64)]))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?;
                done += run_batch(ops, true)?;
            }
        }
        "insert" | "update" | "delete" => {
            let mut k = lo;
            while k < hi {
                let end = (k + batch as u64).min(hi);
                let ops = (k..end)
                    .map(|id| match phase {
                        "insert" => t.write(&flex_values(id as i64, 0)),
                        "update" => t.write(&flex_values(id as i64, 1)),
                        _ => t.delete(&[Value::Int(id as i64)]),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| e.to_string())?;
                done += run_batch(ops, false)?;
                k = end;
            }
        }
        other => {
            return Err(format!("unknown phase '{other}' (use insert, read, update, delete)"));
        }
    }
    Ok((done, hist))
}
