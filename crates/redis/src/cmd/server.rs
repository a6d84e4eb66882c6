//! Connection and server commands: HELLO, CLIENT, CONFIG, COMMAND and INFO.

use super::{COMMANDS, R, err, is};
use crate::resp::{self, parse_int};
use crate::{Server, Session};
use std::sync::atomic::Ordering;

impl Server {
    pub(super) fn hello(&self, sess: &mut Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let mut i = 1;
        let mut proto = None;
        if let Some(v) = a.get(1) {
            let p = parse_int(v).ok_or_else(|| err("ERR Protocol version is not an integer or out of range"))?;
            if p != 2 && p != 3 {
                return Err(err("NOPROTO unsupported protocol version"));
            }
            proto = Some(p == 3);
            i = 2;
        }
        while i < a.len() {
            if is(&a[i], "setname") && i + 1 < a.len() {
                sess.info.set_name(Some(a[i + 1].clone()));
                i += 2;
            } else if is(&a[i], "auth") && i + 2 < a.len() {
                i += 3;
            } else {
                return Err(err(format!("ERR Syntax error in HELLO option '{}'", String::from_utf8_lossy(&a[i]))));
            }
        }
        if let Some(r3) = proto {
            sess.resp3 = r3;
            sess.info.resp.store(if r3 { 3 } else { 2 }, Ordering::Relaxed);
        }
        resp::array_len(out, 14);
        for (k, v) in [("server", "redis"), ("version", crate::REDIS_VERSION)] {
            resp::bulk(out, k.as_bytes());
            resp::bulk(out, v.as_bytes());
        }
        resp::bulk(out, b"proto");
        resp::integer(out, if sess.resp3 { 3 } else { 2 });
        resp::bulk(out, b"id");
        resp::integer(out, sess.id as i64);
        for (k, v) in [("mode", "standalone"), ("role", "master")] {
            resp::bulk(out, k.as_bytes());
            resp::bulk(out, v.as_bytes());
        }
        resp::bulk(out, b"modules");
        resp::array_len(out, 0);
        Ok(())
    }

    pub(super) fn client_cmd(&self, sess: &mut Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let sub = String::from_utf8_lossy(&a[1]).to_lowercase();
        match (sub.as_str(), a.len()) {
            ("setname", 3) => {
                if a[2].iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
                    return Err(err("ERR Client names cannot contain spaces, newlines or special characters."));
                }
                sess.info.set_name(if a[2].is_empty() { None } else { Some(a[2].clone()) });
                resp::simple(out, "OK");
            }
            ("getname", 2) => match &sess.info.name() {
                Some(n) => resp::bulk(out, n),
                None => resp::null(out),
            },
            ("id", 2) => resp::integer(out, sess.id as i64),
            ("setinfo", 4) => resp::simple(out, "OK"),
            ("setname" | "getname" | "id" | "setinfo", _) => {
                return Err(err(format!("ERR wrong number of arguments for 'client|{sub}' command")));
            }
            _ => {
                return Err(err(format!(
                    "ERR unknown subcommand '{}'. Try CLIENT HELP.",
                    String::from_utf8_lossy(&a[1])
                )));
            }
        }
        Ok(())
    }

    pub(super) fn command_cmd(&self, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let sub = a.get(1).map(|s| String::from_utf8_lossy(s).to_lowercase());
        match sub.as_deref() {
            Some("count") => resp::integer(out, COMMANDS.len() as i64),
            Some("docs") => resp::array_len(out, 0),
            None | Some("info") => {
                let names: Vec<&(&str, i32)> = match a.get(2..) {
                    Some(ns) if !ns.is_empty() => ns
                        .iter()
                        .filter_map(|n| {
                            let n = String::from_utf8_lossy(n).to_lowercase();
                            COMMANDS.iter().find(|(c, _)| *c == n)
                        })
                        .collect(),
                    _ => COMMANDS.iter().collect(),
                };
                resp::array_len(out, names.len());
                for (n, arity) in names {
                    // name, arity, flags, first key, last key, step (redis 2.8 shape).
                    resp::array_len(out, 6);
                    resp::bulk(out, n.as_bytes());
                    resp::integer(out, *arity as i64);
                    resp::array_len(out, 0);
                    let keyed = !matches!(
                        *n,
                        "ping"
                            | "echo"
                            | "select"
                            | "quit"
                            | "hello"
                            | "client"
                            | "config"
                            | "command"
                            | "info"
                            | "dbsize"
                            | "flushdb"
                            | "flushall"
                            | "auth"
                            | "scan"
                    );
                    let last = if matches!(*n, "mget" | "del" | "exists" | "mset") { -1 } else { keyed as i64 };
                    resp::integer(out, keyed as i64);
                    resp::integer(out, last);
                    resp::integer(out, if *n == "mset" { 2 } else { keyed as i64 });
                }
            }
            Some(other) => {
                return Err(err(format!("ERR unknown subcommand '{other}'. Try COMMAND HELP.")));
            }
        }
        Ok(())
    }

    pub(super) async fn info(&self, sess: &Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let want = |s: &str| {
            a.len() < 2 || a[1..].iter().any(|x| is(x, s) || is(x, "all") || is(x, "everything") || is(x, "default"))
        };
        let mut t = String::new();
        if want("server") {
            t.push_str(&format!(
                "# Server\r\nredis_version:{}\r\nredis_mode:standalone\r\ntern_version:{}\r\nos:Linux\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\n\r\n",
                crate::REDIS_VERSION,
                env!("CARGO_PKG_VERSION"),
                std::process::id(),
                self.port,
                self.started.elapsed().as_secs()
            ));
        }
        if want("clients") {
            t.push_str(&format!(
                "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\n\r\n",
                self.live.conns.open(),
                self.live.conns.max()
            ));
        }
        if want("stats") {
            t.push_str(&format!(
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nexpired_keys:{}\r\n\r\n",
                self.stats.connections.load(Ordering::Relaxed),
                self.stats.commands.load(Ordering::Relaxed),
                self.stats.expired.load(Ordering::Relaxed),
            ));
        }
        if want("keyspace") {
            t.push_str("# Keyspace\r\n");
            for i in 0..self.opts.databases {
                if self.is_open(i) || i == sess.db {
                    let db = self.db(i)?;
                    let (n, e) = self.count_keys(&db).await?;
                    if n > 0 {
                        t.push_str(&format!("db{i}:keys={n},expires={e},avg_ttl=0\r\n"));
                    }
                }
            }
        }
        resp::bulk(out, t.as_bytes());
        Ok(())
    }
}
