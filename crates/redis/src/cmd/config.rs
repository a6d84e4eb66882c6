//! CONFIG GET / SET / RESETSTAT / REWRITE. GET answers every parameter redis-server 7.0 has (names
//! and defaults as `CONFIG GET *` of redis-server 7.0.15 lists them), with Tern's values where a
//! parameter maps to a Tern setting. SET changes the settings Tern has (`maxclients`, `timeout`,
//! `proto-max-bulk-len`, `client-query-buffer-limit`, `appendfsync`, `requirepass`, and the
//! cluster's `notify-keyspace-events`); every other parameter redis-server lets CONFIG SET
//! change is validated as redis-server validates it (yes/no, integers, memory values, its
//! enumerations, `save`'s pairs), stored by this API server and answered by GET, with no other
//! effect (Tern has no such setting: `maxmemory`, `hz`, encodings' thresholds — which OBJECT
//! ENCODING follows — `save`, `lua-time-limit` ...). Parameters redis-server refuses to change
//! at runtime are refused with its texts. Several pairs are validated first and then applied
//! together, as redis-server does.

use super::{R, err};
use crate::Server;
use crate::glob::Glob;
use crate::resp::{self, parse_int};
use std::sync::atomic::Ordering;

/// Parameters whose values are redis-server's defaults (Tern has no such setting).
const DEFAULTS: &[(&str, &str)] = &[
    ("acl-pubsub-default", "resetchannels"),
    ("aclfile", ""),
    ("acllog-max-len", "128"),
    ("active-defrag-cycle-max", "25"),
    ("active-defrag-cycle-min", "1"),
    ("active-defrag-ignore-bytes", "104857600"),
    ("active-defrag-max-scan-fields", "1000"),
    ("active-defrag-threshold-lower", "10"),
    ("active-defrag-threshold-upper", "100"),
    ("active-expire-effort", "1"),
    ("activedefrag", "no"),
    ("activerehashing", "yes"),
    ("always-show-logo", "no"),
    ("aof-disable-auto-gc", "no"),
    ("aof-load-truncated", "yes"),
    ("aof-rewrite-incremental-fsync", "yes"),
    ("aof-timestamp-enabled", "no"),
    ("aof-use-rdb-preamble", "yes"),
    ("aof_rewrite_cpulist", ""),
    ("appenddirname", "appendonlydir"),
    ("appendfilename", "appendonly.aof"),
    ("appendfsync", "everysec"),
    ("auto-aof-rewrite-min-size", "67108864"),
    ("auto-aof-rewrite-percentage", "100"),
    ("bgsave_cpulist", ""),
    ("bind-source-addr", ""),
    ("bio_cpulist", ""),
    ("busy-reply-threshold", "5000"),
    ("client-output-buffer-limit", "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"),
    ("cluster-allow-pubsubshard-when-down", "yes"),
    ("cluster-allow-reads-when-down", "no"),
    ("cluster-allow-replica-migration", "yes"),
    ("cluster-announce-bus-port", "0"),
    ("cluster-announce-hostname", ""),
    ("cluster-announce-ip", ""),
    ("cluster-announce-port", "0"),
    ("cluster-announce-tls-port", "0"),
    ("cluster-config-file", "nodes.conf"),
    ("cluster-enabled", "no"),
    ("cluster-link-sendbuf-limit", "0"),
    ("cluster-migration-barrier", "1"),
    ("cluster-node-timeout", "15000"),
    ("cluster-port", "0"),
    ("cluster-preferred-endpoint-type", "ip"),
    ("cluster-replica-no-failover", "no"),
    ("cluster-replica-validity-factor", "10"),
    ("cluster-require-full-coverage", "yes"),
    ("cluster-slave-no-failover", "no"),
    ("cluster-slave-validity-factor", "10"),
    ("crash-log-enabled", "yes"),
    ("crash-memcheck-enabled", "yes"),
    ("daemonize", "no"),
    ("dbfilename", "dump.rdb"),
    ("disable-thp", "yes"),
    ("dynamic-hz", "yes"),
    ("enable-debug-command", "no"),
    ("enable-module-command", "no"),
    ("enable-protected-configs", "no"),
    ("hash-max-listpack-entries", "512"),
    ("hash-max-listpack-value", "64"),
    ("hash-max-ziplist-entries", "512"),
    ("hash-max-ziplist-value", "64"),
    ("hll-sparse-max-bytes", "3000"),
    ("hz", "10"),
    ("ignore-warnings", ""),
    ("io-threads-do-reads", "no"),
    ("jemalloc-bg-thread", "yes"),
    ("latency-monitor-threshold", "0"),
    ("latency-tracking", "yes"),
    ("latency-tracking-info-percentiles", "50 99 99.9"),
    ("lazyfree-lazy-eviction", "no"),
    ("lazyfree-lazy-expire", "no"),
    ("lazyfree-lazy-server-del", "no"),
    ("lazyfree-lazy-user-del", "no"),
    ("lazyfree-lazy-user-flush", "no"),
    ("lfu-decay-time", "1"),
    ("lfu-log-factor", "10"),
    ("list-compress-depth", "0"),
    ("list-max-listpack-size", "-2"),
    ("list-max-ziplist-size", "-2"),
    ("logfile", ""),
    ("loglevel", "notice"),
    ("lua-time-limit", "5000"),
    ("masterauth", ""),
    ("masteruser", ""),
    ("maxmemory", "0"),
    ("maxmemory-clients", "0"),
    ("maxmemory-eviction-tenacity", "10"),
    ("maxmemory-policy", "noeviction"),
    ("maxmemory-samples", "5"),
    ("min-replicas-max-lag", "10"),
    ("min-replicas-to-write", "0"),
    ("min-slaves-max-lag", "10"),
    ("min-slaves-to-write", "0"),
    ("no-appendfsync-on-rewrite", "no"),
    ("oom-score-adj", "no"),
    ("oom-score-adj-values", "0 200 800"),
    ("pidfile", ""),
    ("proc-title-template", "{title} {listen-addr} {server-mode}"),
    ("propagation-error-behavior", "ignore"),
    ("protected-mode", "yes"),
    ("rdb-del-sync-files", "no"),
    ("rdb-save-incremental-fsync", "yes"),
    ("rdbchecksum", "yes"),
    ("rdbcompression", "yes"),
    ("repl-backlog-size", "1048576"),
    ("repl-backlog-ttl", "3600"),
    ("repl-disable-tcp-nodelay", "no"),
    ("repl-diskless-load", "disabled"),
    ("repl-diskless-sync", "yes"),
    ("repl-diskless-sync-delay", "5"),
    ("repl-diskless-sync-max-replicas", "0"),
    ("repl-ping-replica-period", "10"),
    ("repl-ping-slave-period", "10"),
    ("repl-timeout", "60"),
    ("replica-announce-ip", ""),
    ("replica-announce-port", "0"),
    ("replica-announced", "yes"),
    ("replica-ignore-disk-write-errors", "no"),
    ("replica-ignore-maxmemory", "yes"),
    ("replica-lazy-flush", "no"),
    ("replica-priority", "100"),
    ("replica-read-only", "yes"),
    ("replica-serve-stale-data", "yes"),
    ("replicaof", ""),
    ("sanitize-dump-payload", "no"),
    ("server_cpulist", ""),
    ("set-max-intset-entries", "512"),
    ("set-proc-title", "yes"),
    ("shutdown-on-sigint", "default"),
    ("shutdown-on-sigterm", "default"),
    ("shutdown-timeout", "10"),
    ("slave-announce-ip", ""),
    ("slave-announce-port", "0"),
    ("slave-ignore-maxmemory", "yes"),
    ("slave-lazy-flush", "no"),
    ("slave-priority", "100"),
    ("slave-read-only", "yes"),
    ("slave-serve-stale-data", "yes"),
    ("slaveof", ""),
    ("slowlog-log-slower-than", "10000"),
    ("slowlog-max-len", "128"),
    ("socket-mark-id", "0"),
    ("stop-writes-on-bgsave-error", "yes"),
    ("stream-node-max-bytes", "4096"),
    ("stream-node-max-entries", "100"),
    ("supervised", "no"),
    ("syslog-enabled", "no"),
    ("syslog-facility", "local0"),
    ("syslog-ident", "redis"),
    ("tcp-backlog", "511"),
    ("tcp-keepalive", "300"),
    ("tls-auth-clients", "yes"),
    ("tls-ca-cert-dir", ""),
    ("tls-ca-cert-file", ""),
    ("tls-cert-file", ""),
    ("tls-ciphers", ""),
    ("tls-ciphersuites", ""),
    ("tls-client-cert-file", ""),
    ("tls-client-key-file", ""),
    ("tls-client-key-file-pass", ""),
    ("tls-cluster", "no"),
    ("tls-dh-params-file", ""),
    ("tls-key-file", ""),
    ("tls-key-file-pass", ""),
    ("tls-port", "0"),
    ("tls-prefer-server-ciphers", "no"),
    ("tls-protocols", ""),
    ("tls-replication", "no"),
    ("tls-session-cache-size", "20480"),
    ("tls-session-cache-timeout", "300"),
    ("tls-session-caching", "yes"),
    ("tracking-table-max-keys", "1000000"),
    ("unixsocket", ""),
    ("unixsocketperm", "0"),
    ("zset-max-listpack-entries", "128"),
    ("zset-max-listpack-value", "64"),
    ("zset-max-ziplist-entries", "128"),
    ("zset-max-ziplist-value", "64"),
];

/// The parameters CONFIG SET changes, with redis-server's bounds.
const SETTABLE: &[(&str, Kind, i64, i64)] = &[
    ("maxclients", Kind::Int, 1, u32::MAX as i64),
    ("timeout", Kind::Int, 0, i32::MAX as i64),
    ("proto-max-bulk-len", Kind::Memory, 1 << 20, i64::MAX),
    ("client-query-buffer-limit", Kind::Memory, 1 << 20, i64::MAX),
    // always: every commit is answered once it is on disk on every replica (a durable Tern
    // transaction); everysec / no: answered from memory, on disk within an epoch (~100 ms).
    ("appendfsync", Kind::Fsync, 0, 2),
    // Tern's own: the databases whose writes are answered once on disk on every replica, as
    // `appendfsync always` for those databases only ("0 3"; "" for none).
    (DURABLE_DBS, Kind::Databases, 0, 0),
    // The default user's password (empty: none); connections already signed in stay so.
    ("requirepass", Kind::Text, 0, 0),
    // The cluster's (every API server's) keyspace notifications (`crate::keyspace`).
    ("notify-keyspace-events", Kind::Events, 0, 0),
];

/// Parameters redis-server 7.0 refuses to change at runtime ("can't set immutable config"), and
/// Tern's listening address, which is set when the server starts.
const IMMUTABLE: &[&str] = &[
    "aclfile",
    "always-show-logo",
    "aof_rewrite_cpulist",
    "appenddirname",
    "appendfilename",
    "bgsave_cpulist",
    "bind",
    "bio_cpulist",
    "cluster-config-file",
    "cluster-enabled",
    "cluster-port",
    "daemonize",
    "databases",
    "disable-thp",
    "enable-debug-command",
    "enable-module-command",
    "enable-protected-configs",
    "io-threads",
    "io-threads-do-reads",
    "logfile",
    "pidfile",
    "port",
    "rdbchecksum",
    "replicaof",
    "server_cpulist",
    "set-proc-title",
    "slaveof",
    "socket-mark-id",
    "supervised",
    "syslog-enabled",
    "syslog-facility",
    "syslog-ident",
    "tcp-backlog",
    "unixsocket",
    "unixsocketperm",
];

/// Protected parameters (`enable-protected-configs no`).
const PROTECTED: &[&str] = &["dbfilename", "dir"];

/// Enumerations and their values (redis-server 7.0's).
const ENUMS: &[(&str, &[&str])] = &[
    (
        "maxmemory-policy",
        &[
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "noeviction",
        ],
    ),
    ("loglevel", &["debug", "verbose", "notice", "warning"]),
    ("acl-pubsub-default", &["allchannels", "resetchannels"]),
    ("sanitize-dump-payload", &["no", "yes", "clients"]),
    ("repl-diskless-load", &["disabled", "on-empty-db", "swapdb"]),
    ("oom-score-adj", &["no", "yes", "relative", "absolute"]),
    ("propagation-error-behavior", &["ignore", "panic", "panic-on-replicas"]),
    ("cluster-preferred-endpoint-type", &["ip", "hostname", "unknown-endpoint"]),
];

/// Parameters that take memory values (`1gb`, `64mb`, ...), shown in bytes.
const MEMORY: &[&str] = &[
    "maxmemory",
    "active-defrag-ignore-bytes",
    "auto-aof-rewrite-min-size",
    "repl-backlog-size",
    "stream-node-max-bytes",
    "hll-sparse-max-bytes",
    "hash-max-listpack-value",
    "hash-max-ziplist-value",
    "zset-max-listpack-value",
    "zset-max-ziplist-value",
    "set-max-intset-entries",
    "cluster-link-sendbuf-limit",
];

/// The twin names redis keeps for one setting (old ziplist names and new listpack names).
const ALIASES: &[(&str, &str)] = &[
    ("hash-max-ziplist-entries", "hash-max-listpack-entries"),
    ("hash-max-ziplist-value", "hash-max-listpack-value"),
    ("zset-max-ziplist-entries", "zset-max-listpack-entries"),
    ("zset-max-ziplist-value", "zset-max-listpack-value"),
    ("list-max-ziplist-size", "list-max-listpack-size"),
    ("slaveof", "replicaof"),
    ("cluster-slave-no-failover", "cluster-replica-no-failover"),
    ("cluster-slave-validity-factor", "cluster-replica-validity-factor"),
];

/// A stored parameter's new value, validated as redis-server validates its kind (the kind
/// follows from redis's default: yes/no, a number, or text).
fn stored_value(param: &str, v: &[u8]) -> Result<String, String> {
    let text = String::from_utf8_lossy(v).into_owned();
    if let Some((_, values)) = ENUMS.iter().find(|(n, _)| *n == param) {
        let lower = text.to_lowercase();
        return if values.contains(&lower.as_str()) {
            Ok(lower)
        } else {
            Err(format!("argument(s) must be one of the following: {}", values.join(", ")))
        };
    }
    if param == "save" {
        let words: Vec<&str> = text.split_whitespace().collect();
        if !words.len().is_multiple_of(2) || words.iter().any(|w| w.parse::<u64>().is_err()) {
            return Err("Invalid save parameters".into());
        }
        return Ok(words.join(" "));
    }
    if MEMORY.contains(&param) {
        return match memory(v) {
            Some(n) if n >= 0 => Ok(n.to_string()),
            Some(_) => Err(format!("argument must be between 0 and {} inclusive", i64::MAX)),
            None => Err("argument must be a memory value".into()),
        };
    }
    let default = DEFAULTS.iter().find(|(n, _)| *n == param).map_or("", |(_, d)| *d);
    if matches!(default, "yes" | "no") {
        return match text.to_lowercase().as_str() {
            w @ ("yes" | "no") => Ok(w.to_string()),
            _ => Err("argument must be 'yes' or 'no'".into()),
        };
    }
    if !default.is_empty() && parse_int(default.as_bytes()).is_some() {
        return match parse_int(v) {
            Some(n) => Ok(n.to_string()),
            None => Err("argument couldn't be parsed into an integer".into()),
        };
    }
    Ok(text)
}

/// Tern's per-database `appendfsync always`. Not among `CONFIG GET *`'s answers (which list
/// what redis-server has); `CONFIG GET tern-durable-databases` names it.
const DURABLE_DBS: &str = "tern-durable-databases";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Int,
    /// A byte count with an optional unit (`b`, `k`, `kb`, `m`, `mb`, `g`, `gb`).
    Memory,
    /// `no` (0), `everysec` (1) or `always` (2).
    Fsync,
    /// Database indexes separated by spaces or commas.
    Databases,
    /// Any text.
    Text,
    /// Keyspace-event class letters.
    Events,
}

fn fsync_mode(v: &[u8]) -> Option<i64> {
    match v.to_ascii_lowercase().as_slice() {
        b"no" => Some(0),
        b"everysec" => Some(1),
        b"always" => Some(2),
        _ => None,
    }
}

/// A memory value as redis's `memtoll` reads it: `k`, `m`, `g` are powers of 1000, `kb`, `mb`,
/// `gb` powers of 1024.
fn memory(v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?.to_ascii_lowercase();
    let units: [(&str, i64); 7] = [
        ("kb", 1 << 10),
        ("mb", 1 << 20),
        ("gb", 1 << 30),
        ("k", 1000),
        ("m", 1_000_000),
        ("g", 1_000_000_000),
        ("b", 1),
    ];
    let (digits, mul) =
        units.iter().find(|(u, _)| s.ends_with(u)).map(|(u, m)| (&s[..s.len() - u.len()], *m)).unwrap_or((&s, 1));
    parse_int(digits.as_bytes())?.checked_mul(mul)
}

impl Server {
    /// Every parameter with its current value.
    fn config_values(&self) -> Vec<(&'static str, String)> {
        let mut v: Vec<(&'static str, String)> = DEFAULTS.iter().map(|(k, d)| (*k, d.to_string())).collect();
        let ip = self.opts.listen.ip().to_string();
        v.extend([
            ("maxclients", self.live.conns.max().to_string()),
            ("timeout", self.live.timeout_s.load(Ordering::Relaxed).to_string()),
            ("proto-max-bulk-len", self.live.max_bulk.load(Ordering::Relaxed).to_string()),
            ("client-query-buffer-limit", self.live.max_pending.load(Ordering::Relaxed).to_string()),
            ("databases", self.opts.databases.to_string()),
            ("port", self.port.to_string()),
            ("bind", ip),
            // Tern's durability is its redo log and checkpoints, not RDB or AOF files.
            ("save", String::new()),
            ("appendonly", "no".to_string()),
            ("dir", std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default()),
            ("io-threads", self.opts.threads.to_string()),
            ("requirepass", self.acl.requirepass()),
            ("notify-keyspace-events", crate::keyspace::flags_string(self.pubsub.notify_flags())),
        ]);
        let fsync = if self.client.durable_commits() { "always" } else { "everysec" };
        if let Some(e) = v.iter_mut().find(|(k, _)| *k == "appendfsync") {
            e.1 = fsync.to_string();
        }
        let stored = crate::clients::lock(&self.config_stored);
        for (k, val) in v.iter_mut() {
            if let Some(x) = stored.get(k) {
                *val = x.clone();
            }
        }
        v
    }

    /// One parameter's current value ("" for none).
    pub(crate) fn config_value(&self, name: &str) -> String {
        self.config_values().into_iter().find(|(k, _)| *k == name).map(|(_, v)| v).unwrap_or_default()
    }

    pub(super) async fn config_cmd(&self, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let sub = String::from_utf8_lossy(&a[1]).to_lowercase();
        match sub.as_str() {
            "get" if a.len() >= 3 => {
                let globs: Vec<Glob> = a[2..].iter().map(|p| Glob::new(p, true)).collect();
                let mut pairs: Vec<_> = self
                    .config_values()
                    .into_iter()
                    .filter(|(k, _)| globs.iter().any(|g| g.matches(k.as_bytes())))
                    .collect();
                if a[2..].iter().any(|p| p.eq_ignore_ascii_case(DURABLE_DBS.as_bytes())) {
                    let list: Vec<String> = self.durable_databases().iter().map(u32::to_string).collect();
                    pairs.push((DURABLE_DBS, list.join(" ")));
                }
                resp::array_len(out, pairs.len() * 2);
                for (k, v) in pairs {
                    resp::bulk(out, k.as_bytes());
                    resp::bulk(out, v.as_bytes());
                }
            }
            "set" if a.len() >= 4 => {
                self.config_set(&a[2..]).await?;
                resp::simple(out, "OK");
            }
            "get" | "set" => return Err(err(format!("ERR wrong number of arguments for 'config|{sub}' command"))),
            "resetstat" if a.len() == 2 => {
                self.stats.reset();
                resp::simple(out, "OK");
            }
            "rewrite" if a.len() == 2 => return Err(err("ERR The server is running without a config file")),
            "resetstat" | "rewrite" => {
                return Err(err(format!("ERR wrong number of arguments for 'config|{sub}' command")));
            }
            _ => {
                return Err(err(format!(
                    "ERR unknown subcommand '{}'. Try CONFIG HELP.",
                    String::from_utf8_lossy(&a[1])
                )));
            }
        }
        Ok(())
    }

    /// CONFIG SET param value [param value ...]: all validated, then all applied.
    async fn config_set(&self, pairs: &[Vec<u8>]) -> R {
        if !pairs.len().is_multiple_of(2) {
            return Err(err("ERR syntax error"));
        }
        let mut new: Vec<(&str, i64)> = Vec::new();
        let mut dbs = std::collections::BTreeSet::new();
        let mut password = None;
        let mut events = None;
        let mut store: Vec<(&'static str, String)> = Vec::new();
        for p in pairs.chunks(2) {
            let name = String::from_utf8_lossy(&p[0]).to_lowercase();
            let Some(&(param, kind, lo, hi)) = SETTABLE.iter().find(|s| s.0 == name) else {
                let Some(param) = self.config_values().into_iter().map(|(k, _)| k).find(|k| *k == name) else {
                    return Err(err(format!(
                        "ERR Unknown option or number of arguments for CONFIG SET - '{}'",
                        String::from_utf8_lossy(&p[0])
                    )));
                };
                let failed =
                    |why: &str| err(format!("ERR CONFIG SET failed (possibly related to argument '{param}') - {why}"));
                if IMMUTABLE.contains(&param) {
                    return Err(failed("can't set immutable config"));
                }
                if PROTECTED.contains(&param) {
                    return Err(failed("can't set protected config"));
                }
                if store.iter().any(|(n, _)| *n == param) || new.iter().any(|(n, _)| *n == param) {
                    return Err(failed("duplicate parameter"));
                }
                let v = stored_value(param, &p[1]).map_err(|why| failed(&why))?;
                store.push((param, v));
                continue;
            };
            let failed =
                |why: &str| err(format!("ERR CONFIG SET failed (possibly related to argument '{param}') - {why}"));
            if new.iter().any(|(n, _)| *n == param) || store.iter().any(|(n, _)| *n == param) {
                return Err(failed("duplicate parameter"));
            }
            let v = match kind {
                Kind::Int => parse_int(&p[1]).ok_or_else(|| failed("argument couldn't be parsed into an integer"))?,
                Kind::Memory => memory(&p[1]).ok_or_else(|| failed("argument must be a memory value"))?,
                Kind::Fsync => fsync_mode(&p[1])
                    .ok_or_else(|| failed("argument(s) must be one of the following: always, everysec, no"))?,
                Kind::Databases => {
                    let text = String::from_utf8_lossy(&p[1]);
                    for w in text.split(|c: char| c == ',' || c.is_ascii_whitespace()).filter(|w| !w.is_empty()) {
                        match w.parse::<u32>() {
                            Ok(i) if i < self.opts.databases => dbs.insert(i),
                            _ => {
                                return Err(failed(&format!(
                                    "'{w}' is not a database index below {}",
                                    self.opts.databases
                                )));
                            }
                        };
                    }
                    0
                }
                Kind::Text => {
                    password = Some(String::from_utf8_lossy(&p[1]).into_owned());
                    0
                }
                Kind::Events => {
                    events = Some(
                        crate::keyspace::parse_flags(&p[1])
                            .ok_or_else(|| failed("Invalid event class character. Use 'Ag$lshzxeKEtmdn'."))?,
                    );
                    0
                }
            };
            if v < lo || v > hi {
                return Err(failed(&format!("argument must be between {lo} and {hi} inclusive")));
            }
            new.push((param, v));
        }
        // The cluster's setting first: the one that can fail (its row is written).
        if let Some(f) = events {
            self.pubsub.set_notify(f).await.map_err(|e| {
                err(format!(
                    "ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - {}",
                    e.message
                ))
            })?;
        }
        {
            let mut stored = crate::clients::lock(&self.config_stored);
            for (param, v) in store {
                // A setting with two names changes under both.
                for (a, b) in ALIASES {
                    if param == *a {
                        stored.insert(b, v.clone());
                    } else if param == *b {
                        stored.insert(a, v.clone());
                    }
                }
                stored.insert(param, v);
            }
        }
        for (param, v) in new {
            let v = v as u64;
            match param {
                "maxclients" => self.live.conns.set_max(v as usize),
                "timeout" => self.live.timeout_s.store(v, Ordering::Relaxed),
                "proto-max-bulk-len" => self.live.max_bulk.store(v as usize, Ordering::Relaxed),
                "appendfsync" => self.client.set_durable_commits(v == 2),
                DURABLE_DBS => self.set_durable_databases(std::mem::take(&mut dbs)),
                "requirepass" => self.acl.set_requirepass(password.as_deref().unwrap_or_default()),
                "notify-keyspace-events" => {}
                _ => self.live.max_pending.store(v as usize, Ordering::Relaxed),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_values_like_redis() {
        assert_eq!(memory(b"2KB"), Some(2048));
        assert_eq!(memory(b"1k"), Some(1000));
        assert_eq!(memory(b"1gb"), Some(1 << 30));
        assert_eq!(memory(b"5"), Some(5));
        assert_eq!(memory(b"abc"), None);
        assert_eq!(memory(b"1.5mb"), None);
    }

    #[test]
    fn defaults_are_sorted_and_unique() {
        assert!(DEFAULTS.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(DEFAULTS.len() + 13, 192, "redis-server 7.0 has 192 parameters");
    }
}
