//! `tern bench redis`: the seeds' Rondis tables — SET, GET, MSET and MGET with threads × batch
//! sizes. Each thread keeps one connection. For SET and GET a batch of `b` is `b` pipelined
//! commands per round trip; for MSET and MGET it is one command of `b` keys. Throughput is keys
//! per second; latency is per round trip. Works against any Redis-protocol server (Tern's front
//! end or redis-server, for comparison).

use crate::{BenchRow, Measure, measure};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Instant;
use tern_types::rng::Rng;

#[derive(Debug, Clone)]
pub struct RedisOptions {
    pub redis: String,
    /// Distinct keys (`key:<n>`), written before the GET and MGET runs.
    pub keys: u64,
    pub threads: Vec<usize>,
    pub batches: Vec<usize>,
    pub seconds: f64,
    pub value_size: usize,
    pub benchmarks: Vec<String>,
}

/// One connection speaking just enough RESP for the benchmark.
pub struct RespConn {
    w: TcpStream,
    r: BufReader<TcpStream>,
    out: Vec<u8>,
}

impl RespConn {
    pub fn connect(addr: &str) -> Result<RespConn, String> {
        let s = TcpStream::connect(addr).map_err(|e| format!("cannot connect to the Redis server at {addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let r = BufReader::with_capacity(1 << 20, s.try_clone().map_err(|e| e.to_string())?);
        Ok(RespConn { w: s, r, out: Vec::new() })
    }

    /// Queues a command.
    pub fn push(&mut self, args: &[&[u8]]) {
        self.out.extend(format!("*{}\r\n", args.len()).bytes());
        for a in args {
            self.out.extend(format!("${}\r\n", a.len()).bytes());
            self.out.extend_from_slice(a);
            self.out.extend_from_slice(b"\r\n");
        }
    }

    /// Sends the queued commands and reads `n` replies; an error reply is an error.
    pub fn round_trip(&mut self, n: usize) -> Result<Vec<u8>, String> {
        self.w.write_all(&self.out).map_err(|e| e.to_string())?;
        self.out.clear();
        let mut last = Vec::new();
        for _ in 0..n {
            last = self.reply()?;
        }
        Ok(last)
    }

    /// Reads one reply; returns its first line (or a bulk string's payload).
    fn reply(&mut self) -> Result<Vec<u8>, String> {
        let mut line = Vec::new();
        self.r.read_until(b'\n', &mut line).map_err(|e| e.to_string())?;
        if line.len() < 3 {
            return Err("the server closed the connection".into());
        }
        line.truncate(line.len() - 2);
        let num = || -> Result<i64, String> {
            std::str::from_utf8(&line[1..]).ok().and_then(|s| s.parse().ok()).ok_or("bad reply length".to_string())
        };
        match line[0] {
            b'-' => Err(String::from_utf8_lossy(&line).into_owned()),
            b'$' => {
                let n = num()?;
                if n < 0 {
                    return Ok(Vec::new());
                }
                let mut v = vec![0; n as usize + 2];
                self.r.read_exact(&mut v).map_err(|e| e.to_string())?;
                v.truncate(n as usize);
                Ok(v)
            }
            b'*' => {
                for _ in 0..num()?.max(0) {
                    self.reply()?;
                }
                Ok(line)
            }
            _ => Ok(line),
        }
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("key:{i:010}").into_bytes()
}

/// The server's process id from `INFO server` (0 if it does not say).
fn server_pid(addr: &str) -> u32 {
    let Ok(mut c) = RespConn::connect(addr) else { return 0 };
    c.push(&[b"INFO", b"server"]);
    let Ok(info) = c.round_trip(1) else { return 0 };
    String::from_utf8_lossy(&info)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Writes every key once (MSET of 100 keys at a time).
pub fn load(o: &RedisOptions) -> Result<(), String> {
    let mut c = RespConn::connect(&o.redis)?;
    let value = vec![b'v'; o.value_size];
    let mut i = 0;
    while i < o.keys {
        let end = (i + 100).min(o.keys);
        let keys: Vec<Vec<u8>> = (i..end).map(key).collect();
        let mut args: Vec<&[u8]> = vec![b"MSET"];
        for k in &keys {
            args.push(k);
            args.push(&value);
        }
        c.push(&args);
        c.round_trip(1)?;
        i = end;
    }
    Ok(())
}

/// Runs the suite; one row per benchmark × threads × batch.
pub fn run(o: &RedisOptions) -> Result<Vec<BenchRow>, String> {
    load(o)?;
    let pid = server_pid(&o.redis);
    let mut out = Vec::new();
    for bench in &o.benchmarks {
        let bench = bench.to_uppercase();
        if !matches!(bench.as_str(), "SET" | "GET" | "MSET" | "MGET") {
            return Err(format!("unknown benchmark {bench}: SET, GET, MSET or MGET"));
        }
        for &threads in &o.threads {
            for &batch in &o.batches {
                out.push(run_one(o, &bench, threads, batch.max(1), pid)?);
            }
        }
    }
    Ok(out)
}

fn run_one(o: &RedisOptions, bench: &str, threads: usize, batch: usize, pid: u32) -> Result<BenchRow, String> {
    let m = Measure { name: bench.to_string(), threads, batch, seconds: o.seconds, server_pid: pid };
    let value = vec![b'w'; o.value_size];
    let setup = |t: usize| Ok((RespConn::connect(&o.redis)?, Rng::new(t as u64 * 7919 + 1)));
    measure(m, setup, |(c, rng): &mut (RespConn, Rng)| {
        let keys: Vec<Vec<u8>> = (0..batch).map(|_| key(rng.below(o.keys.max(1)))).collect();
        let replies = match bench {
            "SET" | "GET" => {
                for k in &keys {
                    if bench == "SET" {
                        c.push(&[b"SET", k, &value]);
                    } else {
                        c.push(&[b"GET", k]);
                    }
                }
                batch
            }
            _ => {
                let mut args: Vec<&[u8]> = vec![if bench == "MSET" { b"MSET" } else { b"MGET" }];
                for k in &keys {
                    args.push(k);
                    if bench == "MSET" {
                        args.push(&value);
                    }
                }
                c.push(&args);
                1
            }
        };
        let t0 = Instant::now();
        c.round_trip(replies)?;
        Ok((batch as u64, t0.elapsed()))
    })
}
