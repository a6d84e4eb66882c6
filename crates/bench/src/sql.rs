//! `tern bench sql`: primary-key reads through the MySQL protocol — `point` runs a prepared
//! `SELECT c FROM t WHERE id = ?` (binary protocol, one key per round trip), `in` runs a prepared
//! `SELECT c FROM t WHERE id IN (?, ..., ?)` with `batch` keys per round trip (RonDB reports ~174 k
//! key lookups/s per data-node core this way). Throughput is rows per second; latency is per round
//! trip. Works against any MySQL-protocol server (user root without a password).

use crate::BenchRow;
use hdrhistogram::Histogram;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tern_mysql::proto::{self, cap};
use tern_types::rng::Rng;

#[derive(Debug, Clone)]
pub struct SqlOptions {
    pub addr: String,
    pub rows: u64,
    pub threads: Vec<usize>,
    pub batches: Vec<usize>,
    pub seconds: f64,
    pub benchmarks: Vec<String>,
}

/// One connection speaking just enough of the MySQL protocol for the benchmark.
pub struct MyConn {
    s: TcpStream,
    buf: Vec<u8>,
}

impl MyConn {
    pub fn connect(addr: &str) -> Result<MyConn, String> {
        let s = TcpStream::connect(addr).map_err(|e| format!("cannot connect to the MySQL server at {addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let mut c = MyConn { s, buf: Vec::with_capacity(1 << 16) };
        let (_, hs) = c.packet()?;
        if hs.first() != Some(&10) {
            return Err("not a MySQL v10 handshake".into());
        }
        let caps =
            cap::PROTOCOL_41 | cap::SECURE_CONNECTION | cap::PLUGIN_AUTH | cap::LONG_PASSWORD | cap::DEPRECATE_EOF;
        let mut p = Vec::new();
        p.extend_from_slice(&caps.to_le_bytes());
        p.extend_from_slice(&(1u32 << 24).to_le_bytes());
        p.push(45);
        p.extend_from_slice(&[0; 23]);
        p.extend_from_slice(b"root\0");
        p.push(0);
        p.extend_from_slice(proto::NATIVE_PASSWORD.as_bytes());
        p.push(0);
        c.send(1, &p)?;
        let (seq, mut r) = c.packet()?;
        if r.first() == Some(&0xFE) && r.len() > 1 {
            c.send(seq.wrapping_add(1), b"")?;
            r = c.packet()?.1;
        }
        if r.first() != Some(&0) {
            return Err(format!("login failed: {}", String::from_utf8_lossy(r.get(9..).unwrap_or(&[]))));
        }
        Ok(c)
    }

    fn send(&mut self, seq: u8, payload: &[u8]) -> Result<(), String> {
        let mut out = Vec::with_capacity(payload.len() + 4);
        proto::put_packets(&mut out, seq, payload);
        self.s.write_all(&out).map_err(|e| e.to_string())
    }

    fn packet(&mut self) -> Result<(u8, Vec<u8>), String> {
        loop {
            if let Some((seq, p, used)) = proto::take_payload(&self.buf, 1 << 30).map_err(|e| e.0.to_string())? {
                self.buf.drain(..used);
                return Ok((seq, p));
            }
            let mut b = [0u8; 65536];
            let n = self.s.read(&mut b).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
            self.buf.extend_from_slice(&b[..n]);
        }
    }

    fn error_of(p: &[u8]) -> String {
        format!(
            "ERROR {}: {}",
            u16::from_le_bytes([p[1], p.get(2).copied().unwrap_or(0)]),
            String::from_utf8_lossy(p.get(9..).unwrap_or(&[]))
        )
    }

    /// Reads a result (OK, or a result set with DEPRECATE_EOF); returns the row count.
    fn result(&mut self) -> Result<u64, String> {
        let (_, first) = self.packet()?;
        match first.first() {
            Some(0) => return Ok(0),
            Some(0xFF) => return Err(Self::error_of(&first)),
            _ => {}
        }
        let n = proto::Reader::new(&first).lenenc_int().map_err(|e| e.0.to_string())?.unwrap_or(0);
        for _ in 0..n {
            self.packet()?;
        }
        let mut rows = 0;
        loop {
            let (_, p) = self.packet()?;
            match p.first() {
                Some(0xFE) if p.len() < 0xFF_FFFF => return Ok(rows),
                Some(0xFF) => return Err(Self::error_of(&p)),
                _ => rows += 1,
            }
        }
    }

    pub fn query(&mut self, sql: &str) -> Result<u64, String> {
        let mut p = vec![proto::com::QUERY];
        p.extend_from_slice(sql.as_bytes());
        self.send(0, &p)?;
        self.result()
    }

    /// Prepares a statement; returns its id.
    pub fn prepare(&mut self, sql: &str) -> Result<u32, String> {
        let mut p = vec![proto::com::STMT_PREPARE];
        p.extend_from_slice(sql.as_bytes());
        self.send(0, &p)?;
        let (_, ok) = self.packet()?;
        if ok.first() != Some(&0) || ok.len() < 9 {
            return Err(Self::error_of(&ok));
        }
        let id = u32::from_le_bytes(ok[1..5].try_into().expect("4 bytes"));
        let cols = u16::from_le_bytes([ok[5], ok[6]]);
        let params = u16::from_le_bytes([ok[7], ok[8]]);
        for _ in 0..cols as usize + params as usize {
            self.packet()?;
        }
        Ok(id)
    }

    /// Executes a prepared statement with BIGINT parameters (types sent each time).
    pub fn execute(&mut self, id: u32, params: &[i64]) -> Result<u64, String> {
        let mut p = vec![proto::com::STMT_EXECUTE];
        p.extend_from_slice(&id.to_le_bytes());
        p.push(0);
        p.extend_from_slice(&1u32.to_le_bytes());
        if !params.is_empty() {
            p.extend(std::iter::repeat_n(0u8, params.len().div_ceil(8)));
            p.push(1);
            for _ in params {
                p.extend_from_slice(&[proto::ty::LONGLONG, 0]);
            }
            for v in params {
                p.extend_from_slice(&v.to_le_bytes());
            }
        }
        self.send(0, &p)?;
        self.result()
    }
}

/// Creates `bench_sql.t` with `rows` rows (500 per INSERT).
pub fn load(o: &SqlOptions) -> Result<(), String> {
    let mut c = MyConn::connect(&o.addr)?;
    c.query("CREATE DATABASE IF NOT EXISTS bench_sql")?;
    c.query("DROP TABLE IF EXISTS bench_sql.t")?;
    c.query("CREATE TABLE bench_sql.t (id BIGINT NOT NULL PRIMARY KEY, c VARCHAR(100) NOT NULL)")?;
    let mut i = 0;
    while i < o.rows {
        let end = (i + 500).min(o.rows);
        let values: Vec<String> = (i..end).map(|k| format!("({k},'value-{k:020}')")).collect();
        c.query(&format!("INSERT INTO bench_sql.t VALUES {}", values.join(",")))?;
        i = end;
    }
    Ok(())
}

pub fn run(o: &SqlOptions) -> Result<Vec<BenchRow>, String> {
    load(o)?;
    let mut out = Vec::new();
    for bench in &o.benchmarks {
        let bench = bench.to_lowercase();
        if !matches!(bench.as_str(), "point" | "in") {
            return Err(format!("unknown benchmark {bench}: point or in"));
        }
        for &threads in &o.threads {
            let batches = if bench == "point" { vec![1] } else { o.batches.clone() };
            for batch in batches {
                out.push(run_one(o, &bench, threads, batch.max(1))?);
            }
        }
    }
    Ok(out)
}

fn run_one(o: &SqlOptions, bench: &str, threads: usize, batch: usize) -> Result<BenchRow, String> {
    let me0 = crate::process_cpu_secs(std::process::id()).unwrap_or(0.0);
    // The MySQL front end's process is not known here: only `TERN_SERVER_PIDS` gives a figure.
    let cpu0 = crate::server_cpu_secs(0);
    let start = Instant::now();
    let results: Vec<Result<(u64, Histogram<u64>), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<(u64, Histogram<u64>), String> {
                    let mut c = MyConn::connect(&o.addr)?;
                    let sql = if bench == "point" {
                        "SELECT c FROM bench_sql.t WHERE id = ?".to_string()
                    } else {
                        format!("SELECT c FROM bench_sql.t WHERE id IN ({})", vec!["?"; batch].join(","))
                    };
                    let id = c.prepare(&sql)?;
                    let mut hist = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
                    let mut rng = Rng::new(t as u64 * 7919 + 3);
                    let until = Instant::now() + Duration::from_secs_f64(o.seconds);
                    let mut rows = 0u64;
                    let mut keys = vec![0i64; batch];
                    while Instant::now() < until {
                        for k in keys.iter_mut() {
                            *k = rng.below(o.rows.max(1)) as i64;
                        }
                        let t0 = Instant::now();
                        rows += c.execute(id, &keys)?;
                        hist.record(t0.elapsed().as_micros() as u64).map_err(|e| e.to_string())?;
                    }
                    Ok((rows, hist))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("bench thread panicked".into()))).collect()
    });
    let elapsed = start.elapsed().as_secs_f64();
    let (rows, hist) = crate::merge_threads(results)?;
    let cpu1 = crate::server_cpu_secs(0);
    Ok(BenchRow {
        benchmark: if bench == "point" { "sql-point".into() } else { "sql-in".into() },
        throughput: rows as f64 / elapsed,
        p50_us: hist.value_at_quantile(0.5),
        p99_us: hist.value_at_quantile(0.99),
        max_us: hist.max(),
        batch,
        threads,
        server_cpu_pct: crate::cpu_pct(cpu0, cpu1, elapsed),
        client_cpu_pct: (crate::process_cpu_secs(std::process::id()).unwrap_or(0.0) - me0) / elapsed * 100.0,
        server_us_per_op: crate::per_op_us(cpu0, cpu1, rows),
    })
}
