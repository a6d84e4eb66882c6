//! `tern bench rest`: RonDB's REST benchmarks (BenchmarkSimple, BenchmarkManyColumns,
//! BenchmarkBinary) against pk-read and batch, with threads × batch sizes. Each thread keeps one
//! HTTP/1.1 keep-alive connection. Throughput is rows per second; latency is per request.

use crate::{BenchRow, Measure, measure};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use tern_client::{Client, Column, ColumnType, DdlReq, Table, Value};
use tern_types::rng::Rng;

pub const REST_BENCH_DB: &str = "rdrs_bench";

#[derive(Debug, Clone)]
pub struct RestOptions {
    pub datanode: String,
    pub rest: String,
    pub rows: u64,
    pub threads: Vec<usize>,
    pub batches: Vec<usize>,
    pub seconds: f64,
    pub benchmarks: Vec<String>,
    /// How long the HTTP client polls for a reply before it blocks.
    pub client_spin: Duration,
}

/// The reading half of the benchmark's connection: like the native client, it polls the socket
/// for a short while before it blocks, so the figures measure the server rather than the client's
/// own wake-up (BENCHMARKS.md says which runs used it).
struct SpinRead {
    s: TcpStream,
    spin: Duration,
}

impl Read for SpinRead {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        if !self.spin.is_zero() {
            let until = Instant::now() + self.spin;
            loop {
                // SAFETY: a valid socket and a writable buffer of the given length.
                let n = unsafe {
                    libc::recv(self.s.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, buf.len(), libc::MSG_DONTWAIT)
                };
                if n >= 0 {
                    return Ok(n as usize);
                }
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::WouldBlock && e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
                if Instant::now() >= until {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        self.s.read(buf)
    }
}

/// A keep-alive HTTP/1.1 connection (enough for the benchmark).
pub struct Http {
    w: TcpStream,
    r: BufReader<SpinRead>,
    host: String,
}

impl Http {
    pub fn connect(addr: &str) -> Result<Http, String> {
        Http::connect_spin(addr, Duration::ZERO)
    }

    /// Like `connect`; reads poll the socket for up to `spin` before they block.
    pub fn connect_spin(addr: &str, spin: Duration) -> Result<Http, String> {
        let s = TcpStream::connect(addr).map_err(|e| format!("cannot connect to the REST API at {addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let r = BufReader::new(SpinRead { s: s.try_clone().map_err(|e| e.to_string())?, spin });
        Ok(Http { w: s, r, host: addr.to_string() })
    }

    /// One request; returns (status, body).
    pub fn request(&mut self, method: &str, path: &str, body: &str) -> Result<(u16, String), String> {
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            self.host,
            body.len()
        );
        self.w.write_all(head.as_bytes()).and_then(|_| self.w.write_all(body.as_bytes())).map_err(|e| e.to_string())?;
        let mut line = String::new();
        self.r.read_line(&mut line).map_err(|e| e.to_string())?;
        let status: u16 =
            line.get(9..12).and_then(|s| s.parse().ok()).ok_or_else(|| format!("bad status line {line:?}"))?;
        let mut len = 0usize;
        loop {
            line.clear();
            self.r.read_line(&mut line).map_err(|e| e.to_string())?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().map_err(|_| "bad content-length")?;
            }
        }
        let mut body = vec![0u8; len];
        self.r.read_exact(&mut body).map_err(|e| e.to_string())?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

fn table(name: &str, columns: Vec<Column>) -> Table {
    Table::new(REST_BENCH_DB, name, columns, vec![0])
}

/// A ~3,000-byte binary key for row `i` (table_2).
fn binary_key(i: u64) -> Vec<u8> {
    let mut k = format!("{i:012}").into_bytes();
    k.resize(3000, b'k');
    k
}

/// Creates RonDB's benchmark tables if absent and writes `rows` rows into each.
pub fn load(client: &Client, rows: u64) -> Result<(), String> {
    let e = |e: tern_client::TernError| e.to_string();
    client.ddl(DdlReq::CreateDatabase { name: REST_BENCH_DB.into(), if_not_exists: true }).map_err(e)?;
    let t1 = table(
        "table_1",
        vec![
            Column::new("id0", ColumnType::Int { unsigned: false }).not_null(),
            Column::new("col0", ColumnType::VarChar { len: 100 }),
        ],
    );
    let t2 = table(
        "table_2",
        vec![
            Column::new("id0", ColumnType::VarBinary { len: 3000 }).not_null(),
            Column::new("col0", ColumnType::VarBinary { len: 100 }),
        ],
    );
    let mut c3 = vec![Column::new("id0", ColumnType::Int { unsigned: false }).not_null()];
    for i in 0..100 {
        c3.push(Column::new(&format!("col{i}"), ColumnType::VarChar { len: 100 }));
    }
    let t3 = table("table_3", c3);
    for t in [t1, t2, t3] {
        client.ddl(DdlReq::CreateTable { table: t, if_not_exists: true }).map_err(e)?;
    }
    let h1 = client.table(REST_BENCH_DB, "table_1").map_err(e)?;
    let h2 = client.table(REST_BENCH_DB, "table_2").map_err(e)?;
    let h3 = client.table(REST_BENCH_DB, "table_3").map_err(e)?;
    let b = client.blocking();
    let mut i = 0;
    while i < rows {
        let end = (i + 100).min(rows);
        let mut ops = Vec::new();
        for r in i..end {
            ops.push(h1.write(&[Value::Int(r as i64), Value::str(&format!("value-{r:0>90}"))]).map_err(e)?);
            ops.push(h2.write(&[Value::Bytes(binary_key(r)), Value::Bytes(vec![(r % 251) as u8; 100])]).map_err(e)?);
            let mut v = vec![Value::Int(r as i64)];
            v.extend((0..100).map(|c| Value::str(&format!("r{r}c{c}"))));
            ops.push(h3.write(&v).map_err(e)?);
        }
        b.execute(ops).map_err(e)?;
        i = end;
    }
    Ok(())
}

fn filter_for(bench: &str, i: u64) -> String {
    match bench {
        "BenchmarkBinary" => {
            let mut s = String::with_capacity(4100);
            s.push_str("[{\"column\":\"id0\",\"value\":\"");
            tern_types::base64::base64_encode(&binary_key(i), &mut s);
            s.push_str("\"}]");
            s
        }
        _ => format!("[{{\"column\":\"id0\",\"value\":{i}}}]"),
    }
}

fn table_of(bench: &str) -> &'static str {
    match bench {
        "BenchmarkManyColumns" => "table_3",
        "BenchmarkBinary" => "table_2",
        _ => "table_1",
    }
}

/// The REST server's process id, from its metrics (0 if unknown).
fn rest_pid(rest: &str) -> u32 {
    let Ok(mut h) = Http::connect(rest) else { return 0 };
    let Ok((200, body)) = h.request("GET", "/metrics", "") else { return 0 };
    body.lines().find_map(|l| l.strip_prefix("tern_rest_process_pid ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// Runs the suite; one row per benchmark × endpoint × threads × batch.
pub fn run(o: &RestOptions) -> Result<Vec<BenchRow>, String> {
    let client = Client::connect(&o.datanode).map_err(|e| e.to_string())?;
    load(&client, o.rows)?;
    let pid = rest_pid(&o.rest);
    let mut out = Vec::new();
    for bench in &o.benchmarks {
        for &threads in &o.threads {
            for &batch in &o.batches {
                out.push(run_one(o, bench, threads, batch, pid)?);
            }
        }
    }
    Ok(out)
}

fn run_one(o: &RestOptions, bench: &str, threads: usize, batch: usize, pid: u32) -> Result<BenchRow, String> {
    let path_read = format!("/0.1.0/{REST_BENCH_DB}/{}/pk-read", table_of(bench));
    let name = format!("{bench}-{}", if batch <= 1 { "pkread" } else { "batch" });
    let m = Measure { name, threads, batch: batch.max(1), seconds: o.seconds, server_pid: pid };
    let setup = |t: usize| Ok((Http::connect_spin(&o.rest, o.client_spin)?, Rng::new(t as u64 + 1)));
    measure(m, setup, |(http, rng): &mut (Http, Rng)| {
        let (path, body) = if batch <= 1 {
            (path_read.as_str(), format!("{{\"filters\":{}}}", filter_for(bench, rng.below(o.rows.max(1)))))
        } else {
            let mut b = String::from("{\"operations\":[");
            for j in 0..batch {
                if j > 0 {
                    b.push(',');
                }
                b.push_str(&format!(
                    "{{\"method\":\"POST\",\"relative-url\":\"{REST_BENCH_DB}/{}/pk-read\",\"body\":{{\"filters\":{}}}}}",
                    table_of(bench),
                    filter_for(bench, rng.below(o.rows.max(1)))
                ));
            }
            b.push_str("]}");
            ("/0.1.0/batch", b)
        };
        let t0 = Instant::now();
        let (st, resp) = http.request("POST", path, &body)?;
        let took = t0.elapsed();
        if st != 200 {
            return Err(format!("REST answered {st}: {resp}"));
        }
        Ok((batch.max(1) as u64, took))
    })
}
