//! Connection and server commands: HELLO, CLIENT (ID, INFO, LIST, KILL, SETNAME, GETNAME,
//! SETINFO, NO-EVICT), COMMAND, INFO (server, clients, memory, persistence, stats, replication,
//! cpu, modules, errorstats, cluster, keyspace, commandstats) and MEMORY. Field names and
//! line formats are redis-server 7.0's; values are Tern's where it has them.

use super::{COMMANDS, Kind, R, SYNTAX, err, int_arg, is};
use crate::clients::ClientInfo;
use crate::resp::{self, parse_int};
use crate::{Server, Session};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;

/// INFO's sections in order, and which of them `INFO` / `INFO default` shows.
const SECTIONS: &[(&str, bool)] = &[
    ("server", true),
    ("clients", true),
    ("memory", true),
    ("persistence", true),
    ("stats", true),
    ("replication", true),
    ("cpu", true),
    ("modules", true),
    ("commandstats", false),
    ("errorstats", true),
    ("latencystats", false),
    ("cluster", true),
    ("keyspace", true),
];

fn human(bytes: u64) -> String {
    let units = ["B", "K", "M", "G", "T", "P"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{bytes}B") } else { format!("{v:.2}{}", units[u]) }
}

/// Resident and peak resident bytes of this process (Linux `/proc`), zero when unknown.
fn rss_bytes() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (kb("VmRSS:"), kb("VmHWM:"))
}

fn system_memory() -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    info.lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// CPU seconds (system, user) this process used.
fn cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid, writable rusage.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return (0.0, 0.0);
    }
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(u.ru_stime), s(u.ru_utime))
}

/// One CLIENT LIST line (redis 7.0's fields; buffer sizes Tern does not track are 0).
fn client_line(c: &ClientInfo, names: &[&str]) -> String {
    let name = c.name().map(|n| String::from_utf8_lossy(&n).into_owned()).unwrap_or_default();
    let multi = c.multi.load(Ordering::Relaxed);
    let mut flags = String::new();
    if multi >= 0 {
        flags.push('x');
    }
    if c.no_evict.load(Ordering::Relaxed) {
        flags.push('e');
    }
    let (sub, psub) = (c.sub.load(Ordering::Relaxed), c.psub.load(Ordering::Relaxed));
    if sub + psub > 0 {
        flags.push('P');
    }
    if flags.is_empty() {
        flags.push('N');
    }
    let cmd = names.get(c.last_cmd.load(Ordering::Relaxed) as usize).copied().unwrap_or("NULL");
    format!(
        "id={} addr={} laddr={} fd=-1 name={name} age={} idle={} flags={flags} db={} sub={sub} psub={psub} ssub=0 multi={multi} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={cmd} user={} redir=-1 resp={}\n",
        c.id,
        c.addr,
        c.laddr,
        c.created.elapsed().as_secs(),
        c.idle_ms() / 1000,
        c.db.load(Ordering::Relaxed),
        c.user(),
        c.resp.load(Ordering::Relaxed),
    )
}

fn check_client_name(n: &[u8]) -> R {
    if n.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(err("ERR Client names cannot contain spaces, newlines or special characters."));
    }
    Ok(())
}

/// CLIENT KILL's filters (the new form).
#[derive(Default)]
struct KillFilter {
    id: Option<u64>,
    addr: Option<String>,
    laddr: Option<String>,
    skipme: bool,
    user: Option<String>,
    /// TYPE other than normal: nothing matches.
    none: bool,
}

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
        let mut name = None;
        let mut auth = None;
        while i < a.len() {
            if is(&a[i], "setname") && i + 1 < a.len() {
                name = Some(&a[i + 1]);
                i += 2;
            } else if is(&a[i], "auth") && i + 2 < a.len() {
                auth = Some((&a[i + 1], &a[i + 2]));
                i += 3;
            } else {
                return Err(err(format!("ERR Syntax error in HELLO option '{}'", String::from_utf8_lossy(&a[i]))));
            }
        }
        if let Some((user, pass)) = auth {
            self.authenticate(sess, user, pass)?;
        }
        if !sess.authed {
            return Err(err(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            ));
        }
        if let Some(n) = name {
            check_client_name(n)?;
            sess.info.set_name(if n.is_empty() { None } else { Some(n.clone()) });
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

    /// CLIENT subcommands (their arities were checked by `lookup`).
    pub(super) fn client_cmd(&self, sess: &mut Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let names: Vec<&str> = COMMANDS.iter().map(|c| c.name).collect();
        match String::from_utf8_lossy(&a[1]).to_lowercase().as_str() {
            "setname" => {
                check_client_name(&a[2])?;
                sess.info.set_name(if a[2].is_empty() { None } else { Some(a[2].clone()) });
                resp::simple(out, "OK");
            }
            "getname" => match &sess.info.name() {
                Some(n) => resp::bulk(out, n),
                None => resp::null(out),
            },
            "id" => resp::integer(out, sess.id as i64),
            "reply" => match String::from_utf8_lossy(&a[2]).to_lowercase().as_str() {
                "on" => {
                    sess.reply = 0;
                    resp::simple(out, "OK");
                }
                "off" => sess.reply = 1,
                "skip" => sess.reply = 3,
                _ => return Err(err(SYNTAX)),
            },
            "setinfo" => resp::simple(out, "OK"),
            "info" => resp::bulk(out, client_line(&sess.info, &names).as_bytes()),
            "list" => {
                let ids = client_list_filter(&a[2..])?;
                let mut text = String::new();
                for c in self.clients.all() {
                    if ids.as_ref().is_none_or(|ids| ids.contains(&c.id)) {
                        text.push_str(&client_line(&c, &names));
                    }
                }
                resp::bulk(out, text.as_bytes());
            }
            "kill" => self.client_kill(sess, &a[2..], out)?,
            "no-evict" => {
                let on = if is(&a[2], "on") {
                    true
                } else if is(&a[2], "off") {
                    false
                } else {
                    return Err(err(SYNTAX));
                };
                sess.info.no_evict.store(on, Ordering::Relaxed);
                resp::simple(out, "OK");
            }
            _ => {
                resp::array_len(out, 1);
                resp::simple(out, "CLIENT <subcommand>: ID, INFO, LIST, KILL, SETNAME, GETNAME, SETINFO, NO-EVICT");
            }
        }
        Ok(())
    }

    /// CLIENT KILL ip:port (old form: +OK or "No such client") or CLIENT KILL filter value ...
    /// (the number killed; SKIPME yes by default).
    fn client_kill(&self, sess: &Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        if a.len() == 1 {
            let addr = String::from_utf8_lossy(&a[0]);
            let c = self.clients.all().into_iter().find(|c| c.addr.to_string() == addr);
            let Some(c) = c else { return Err(err("ERR No such client")) };
            c.kill();
            resp::simple(out, "OK");
            return Ok(());
        }
        if !a.len().is_multiple_of(2) {
            return Err(err(SYNTAX));
        }
        let mut f = KillFilter { skipme: true, ..KillFilter::default() };
        for p in a.chunks(2) {
            let v = String::from_utf8_lossy(&p[1]).into_owned();
            if is(&p[0], "id") {
                f.id = Some(
                    parse_int(&p[1]).filter(|&i| i > 0).ok_or_else(|| err("ERR client-id should be greater than 0"))?
                        as u64,
                );
            } else if is(&p[0], "type") {
                match v.to_lowercase().as_str() {
                    "normal" => {}
                    "master" | "replica" | "slave" | "pubsub" => f.none = true,
                    _ => return Err(err(format!("ERR Unknown client type '{v}'"))),
                }
            } else if is(&p[0], "addr") {
                f.addr = Some(v);
            } else if is(&p[0], "laddr") {
                f.laddr = Some(v);
            } else if is(&p[0], "user") {
                if self.acl.user(&v).is_none() {
                    return Err(err(format!("ERR No such user '{v}'")));
                }
                f.user = Some(v);
            } else if is(&p[0], "skipme") {
                f.skipme = match v.to_lowercase().as_str() {
                    "yes" => true,
                    "no" => false,
                    _ => return Err(err(SYNTAX)),
                };
            } else {
                return Err(err(SYNTAX));
            }
        }
        let mut n = 0;
        for c in self.clients.all() {
            let hit = !f.none
                && f.id.is_none_or(|id| id == c.id)
                && f.addr.as_ref().is_none_or(|a| *a == c.addr.to_string())
                && f.laddr.as_ref().is_none_or(|a| *a == c.laddr.to_string())
                && f.user.as_ref().is_none_or(|u| *u == c.user())
                && !(f.skipme && c.id == sess.id);
            if hit {
                c.kill();
                n += 1;
            }
        }
        resp::integer(out, n);
        Ok(())
    }

    pub(super) fn command_cmd(&self, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let sub = a.get(1).map(|s| String::from_utf8_lossy(s).to_lowercase());
        match sub.as_deref() {
            Some("count") => resp::integer(out, COMMANDS.len() as i64),
            Some("docs") => resp::array_len(out, 0),
            Some("list") => {
                resp::array_len(out, COMMANDS.len());
                COMMANDS.iter().for_each(|c| resp::bulk(out, c.name.as_bytes()));
            }
            None | Some("info") => {
                let specs: Vec<Option<&super::Spec>> = match a.get(2..) {
                    Some(ns) if !ns.is_empty() => ns
                        .iter()
                        .map(|n| {
                            let n = String::from_utf8_lossy(n).to_lowercase();
                            COMMANDS.iter().find(|c| c.name == n)
                        })
                        .collect(),
                    _ => COMMANDS.iter().map(Some).collect(),
                };
                resp::array_len(out, specs.len());
                for s in specs {
                    match s {
                        Some(s) => command_info(s, out),
                        None => resp::null(out),
                    }
                }
            }
            Some(_) => {
                resp::array_len(out, 1);
                resp::simple(out, "COMMAND <subcommand>: COUNT, DOCS, INFO, LIST");
            }
        }
        Ok(())
    }

    /// MEMORY USAGE key [SAMPLES n] (an estimate from the key's rows), DOCTOR, STATS, PURGE.
    /// OBJECT ENCODING / FREQ / IDLETIME / REFCOUNT / HELP.
    pub(super) async fn object_cmd(&self, sess: &mut Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let sub = String::from_utf8_lossy(&a[1]).to_lowercase();
        if sub == "help" {
            let lines = [
                "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "ENCODING <key>",
                "    Return the kind of internal representation used in order to store the value",
                "    associated with a <key>.",
                "FREQ <key>",
                "    Return the access frequency index of the <key>. The returned integer is",
                "    proportional to the logarithm of the recent access frequency of the key.",
                "IDLETIME <key>",
                "    Return the idle time of the <key>, that is the approximated number of",
                "    seconds elapsed since the last access to the key.",
                "REFCOUNT <key>",
                "    Return the number of references of the value associated with the specified",
                "    <key>.",
                "HELP",
                "    Prints this help.",
            ];
            resp::array_len(out, lines.len());
            lines.iter().for_each(|l| resp::simple(out, l));
            return Ok(());
        }
        let db = self.db(sess.db).await?;
        let key = &a[2];
        match standalone!(self, |cx| self.object_of(cx, &db, &sub, key).await)? {
            Some(reply) => out.extend_from_slice(&reply),
            None => resp::null(out),
        }
        Ok(())
    }

    pub(super) async fn memory_cmd(&self, sess: &mut Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        match String::from_utf8_lossy(&a[1]).to_lowercase().as_str() {
            "usage" => {
                match a.len() {
                    3 => {}
                    5 if is(&a[3], "samples") => {
                        int_arg(&a[4])?;
                    }
                    _ => return Err(err(SYNTAX)),
                }
                let db = self.db(sess.db).await?;
                let key = &a[2];
                match standalone!(self, |cx| self.memory_usage(cx, &db, key).await)? {
                    Some(n) => resp::integer(out, n),
                    None => resp::null(out),
                }
            }
            "doctor" => resp::bulk(out, b"Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base."),
            "stats" => {
                let (rss, _) = rss_bytes();
                resp::array_len(out, 4);
                resp::bulk(out, b"peak.allocated");
                resp::integer(out, rss_bytes().1 as i64);
                resp::bulk(out, b"total.allocated");
                resp::integer(out, rss as i64);
            }
            "malloc-stats" => resp::bulk(out, b"Stats not supported for the current allocator"),
            "purge" => resp::simple(out, "OK"),
            _ => {
                resp::array_len(out, 1);
                resp::simple(out, "MEMORY <subcommand>: USAGE, DOCTOR, STATS, MALLOC-STATS, PURGE");
            }
        }
        Ok(())
    }

    pub(super) async fn info(&self, sess: &Session, a: &[Vec<u8>], out: &mut Vec<u8>) -> R {
        let asked: Vec<String> = a[1..].iter().map(|x| String::from_utf8_lossy(x).to_lowercase()).collect();
        let want = |s: &str, default: bool| {
            asked.is_empty()
                || asked.iter().any(|x| x == s || x == "all" || x == "everything" || (x == "default" && default))
        };
        let mut parts = Vec::new();
        // The data node's status, asked at most once per INFO (memory and persistence use it).
        let status = std::sync::OnceLock::new();
        for &(name, default) in SECTIONS {
            if want(name, default) {
                parts.push(self.info_section(sess, name, &status).await?);
            }
        }
        resp::bulk(out, parts.join("\r\n").as_bytes());
        Ok(())
    }

    /// Keys the data node's TTL purge deleted, by its status: the purged rows of every Redis
    /// database's `string_keys` table.
    pub(super) fn expired_keys(&self, s: &tern_client::StatusInfo) -> u64 {
        let keys: Vec<u32> = (0..self.opts.databases)
            .filter_map(|i| self.client.table(&crate::db::db_name(i), "string_keys").ok())
            .map(|t| t.id())
            .collect();
        s.ttl_purged.iter().filter(|(t, _)| keys.contains(t)).map(|(_, n)| n).sum()
    }

    async fn info_section(
        &self,
        sess: &Session,
        name: &str,
        status: &std::sync::OnceLock<Option<tern_client::StatusInfo>>,
    ) -> R<String> {
        // The data node's status, asked for once per INFO and only by the sections that show it.
        if matches!(name, "memory" | "persistence" | "stats") && status.get().is_none() {
            let _ = status.set(self.client.status_async().await.ok());
        }
        let status = || status.get().unwrap_or(&None);
        let mut t = String::new();
        let st = &self.stats;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        match name {
            "server" => {
                let up = self.started.elapsed().as_secs();
                let _ = write!(
                    t,
                    "# Server\r\nredis_version:{}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_build_id:0\r\nredis_mode:standalone\r\ntern_version:{}\r\nos:{} {}\r\narch_bits:64\r\nmultiplexing_api:epoll\r\natomicvar_api:c11-builtin\r\nprocess_id:{}\r\nprocess_supervised:no\r\nrun_id:{:040x}\r\ntcp_port:{}\r\nserver_time_usec:{}\r\nuptime_in_seconds:{up}\r\nuptime_in_days:{}\r\nhz:10\r\nconfigured_hz:10\r\nexecutable:{}\r\nconfig_file:\r\nio_threads_active:0\r\n",
                    crate::REDIS_VERSION,
                    env!("CARGO_PKG_VERSION"),
                    std::env::consts::OS,
                    std::env::consts::ARCH,
                    std::process::id(),
                    self.started.elapsed().as_nanos() ^ (std::process::id() as u128) << 64,
                    self.port,
                    crate::db::now_ms() * 1000,
                    up / 86400,
                    std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default(),
                );
            }
            "clients" => {
                let _ = write!(
                    t,
                    "# Clients\r\nconnected_clients:{}\r\ncluster_connections:0\r\nmaxclients:{}\r\nclient_recent_max_input_buffer:0\r\nclient_recent_max_output_buffer:0\r\nblocked_clients:0\r\ntracking_clients:0\r\nclients_in_timeout_table:0\r\n",
                    self.live.conns.open(),
                    self.live.conns.max()
                );
            }
            "memory" => {
                let (rss, peak) = rss_bytes();
                let data = status().as_ref().map(|s| s.memory_used).unwrap_or(0);
                let sys = system_memory();
                let _ = write!(
                    t,
                    "# Memory\r\nused_memory:{data}\r\nused_memory_human:{}\r\nused_memory_rss:{rss}\r\nused_memory_rss_human:{}\r\nused_memory_peak:{peak}\r\nused_memory_peak_human:{}\r\nused_memory_dataset:{data}\r\ntotal_system_memory:{sys}\r\ntotal_system_memory_human:{}\r\nmaxmemory:0\r\nmaxmemory_human:0B\r\nmaxmemory_policy:noeviction\r\nmem_allocator:{}\r\n",
                    human(data),
                    human(rss),
                    human(peak),
                    human(sys),
                    self.opts.allocator,
                );
            }
            "persistence" => {
                let (durable, current) =
                    status().as_ref().map(|s| (s.durable_epoch, s.current_epoch)).unwrap_or((0, 0));
                let _ = write!(
                    t,
                    "# Persistence\r\nloading:0\r\nasync_loading:0\r\nrdb_changes_since_last_save:0\r\nrdb_bgsave_in_progress:0\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:ok\r\nrdb_saves:0\r\naof_enabled:0\r\naof_rewrite_in_progress:0\r\naof_last_write_status:ok\r\ntern_durable_epoch:{durable}\r\ntern_current_epoch:{current}\r\n",
                    crate::db::now_ms() / 1000,
                );
            }
            "stats" => {
                // Keys the data node's TTL purge deleted (its counts of the `string_keys` tables)
                // since the last CONFIG RESETSTAT.
                let expired = status().as_ref().map_or(0, |s| self.expired_keys(s));
                let expired = expired.saturating_sub(st.expired_base.load(Ordering::Relaxed));
                let _ = write!(
                    t,
                    "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:0\r\nrejected_connections:{}\r\nexpired_keys:{}\r\nevicted_keys:0\r\nkeyspace_hits:0\r\nkeyspace_misses:0\r\npubsub_channels:0\r\npubsub_patterns:0\r\ntotal_error_replies:{}\r\ntern_grouped_commands:{}\r\ntern_command_groups:{}\r\n",
                    load(&st.connections),
                    load(&st.commands),
                    load(&st.rejected),
                    expired,
                    st.error_total(),
                    load(&st.grouped),
                    load(&st.groups),
                );
            }
            "replication" => t.push_str("# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_failover_state:no-failover\r\nmaster_repl_offset:0\r\n"),
            "cpu" => {
                let (sys, user) = cpu_seconds();
                let _ = write!(
                    t,
                    "# CPU\r\nused_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\nused_cpu_sys_children:0.000000\r\nused_cpu_user_children:0.000000\r\n"
                );
            }
            "modules" => t.push_str("# Modules\r\n"),
            "errorstats" => {
                t.push_str("# Errorstats\r\n");
                for (code, n) in st.errors() {
                    let _ = write!(t, "errorstat_{code}:count={n}\r\n");
                }
            }
            "cluster" => t.push_str("# Cluster\r\ncluster_enabled:0\r\n"),
            // Tern keeps no latency histograms per command (yet): the section is empty.
            "latencystats" => t.push_str("# Latencystats\r\n"),
            "commandstats" => {
                t.push_str("# Commandstats\r\n");
                for (i, c) in COMMANDS.iter().enumerate() {
                    let (calls, usec, rejected, failed) = st.command(i);
                    if calls + rejected > 0 {
                        let per = if calls > 0 { usec as f64 / calls as f64 } else { 0.0 };
                        let _ = write!(
                            t,
                            "cmdstat_{}:calls={calls},usec={usec},usec_per_call={per:.2},rejected_calls={rejected},failed_calls={failed}\r\n",
                            c.name
                        );
                    }
                }
            }
            _ => {
                t.push_str("# Keyspace\r\n");
                for i in 0..self.opts.databases {
                    if self.is_open(i) || i == sess.db {
                        let db = self.db(i).await?;
                        let (n, e) = self.count_keys(&db).await?;
                        if n > 0 {
                            let _ = write!(t, "db{i}:keys={n},expires={e},avg_ttl=0\r\n");
                        }
                    }
                }
            }
        }
        Ok(t)
    }
}

/// CLIENT LIST's filters: TYPE (all Tern's clients are normal ones) and ID; None: everyone.
fn client_list_filter(a: &[Vec<u8>]) -> R<Option<Vec<u64>>> {
    if a.is_empty() {
        return Ok(None);
    }
    if is(&a[0], "type") && a.len() == 2 {
        let t = String::from_utf8_lossy(&a[1]).to_lowercase();
        return match t.as_str() {
            "normal" => Ok(None),
            "master" | "replica" | "slave" | "pubsub" => Ok(Some(Vec::new())),
            _ => Err(err(format!("ERR Unknown client type '{}'", String::from_utf8_lossy(&a[1])))),
        };
    }
    if is(&a[0], "id") && a.len() >= 2 {
        let mut ids = Vec::new();
        for x in &a[1..] {
            ids.push(parse_int(x).filter(|&i| i > 0).ok_or_else(|| err("ERR Invalid client ID"))? as u64);
        }
        return Ok(Some(ids));
    }
    Err(err(SYNTAX))
}

/// A COMMAND INFO entry in redis 7's shape: name, arity, flags, first key, last key, step,
/// ACL categories, tips, key specifications, subcommands.
fn command_info(s: &super::Spec, out: &mut Vec<u8>) {
    resp::array_len(out, 10);
    resp::bulk(out, s.name.as_bytes());
    resp::integer(out, s.arity as i64);
    let flags: &[&str] = match s.kind {
        Kind::Read => &["readonly"],
        Kind::Write => &["write"],
        Kind::Server | Kind::Control => &["fast"],
    };
    resp::array_len(out, flags.len());
    flags.iter().for_each(|f| resp::simple(out, f));
    resp::integer(out, s.first as i64);
    resp::integer(out, s.last as i64);
    resp::integer(out, s.step as i64);
    for _ in 0..4 {
        resp::array_len(out, 0);
    }
}
