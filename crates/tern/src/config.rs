//! The data node's TOML configuration, with automatic defaults: data memory from the machine's
//! RAM, ldm worker threads from its cores. An unknown key is an error that names it.

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tern_kernel::NodeConfig;
use tern_runtime::DataNodeConfig;

pub const DATANODE_PORT_DEFAULT: u16 = 11860;

/// A size: bytes as an integer, or text like "512M", "2G".
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Size {
    Bytes(u64),
    Text(String),
}

impl Size {
    pub fn bytes(&self) -> Result<u64> {
        match self {
            Size::Bytes(b) => Ok(*b),
            Size::Text(t) => parse_size(t),
        }
    }
}

pub fn parse_size(t: &str) -> Result<u64> {
    let t = t.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        Some('T' | 't') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: u64 = num
        .trim()
        .parse()
        .with_context(|| format!("'{t}' is not a size (use bytes, or a number with K, M, G or T)"))?;
    n.checked_mul(mult).with_context(|| format!("size '{t}' is too large"))
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DatanodeToml {
    pub node_id: Option<u16>,
    pub data_dir: Option<PathBuf>,
    pub listen: Option<String>,
    /// "auto" or a number.
    pub ldm_workers: Option<toml::Value>,
    /// "auto", bytes, or "2G".
    pub data_memory: Option<Size>,
    pub epoch_interval_ms: Option<u64>,
    pub lock_wait_timeout_ms: Option<u64>,
    pub transaction_inactive_timeout_ms: Option<u64>,
    /// Autocommit writes to one partition of a two-replica node group commit in one round
    /// (default true; `TERN_ONE_ROUND_COMMIT=0` turns it off where the key is not set).
    pub one_round_commit: Option<bool>,
    pub checkpoint_redo_mb: Option<u64>,
    /// How often each partition of a TTL table is purged of expired rows (0: never).
    pub ttl_purge_interval_ms: Option<u64>,
    pub redo_segment_mb: Option<u64>,
    pub spin_max_us: Option<u64>,
    /// µs a worker keeps spinning after an exchange with another worker (see the runtime).
    pub expect_spin_us: Option<u64>,
    pub log_level: Option<String>,
    /// "tcp", "shm" or "auto" (default): whether processes on this host may connect through
    /// shared memory.
    pub transporter: Option<String>,
    /// Where front ends served by this process run: "worker" (default: the Redis, REST and MySQL
    /// front ends on worker 0's thread) or "threads" (each front end on threads of its own).
    pub front_ends: Option<String>,
    /// A file (mode 600) holding the cluster secret every connection to this node must prove
    /// (default: the file named by `TERN_CLUSTER_SECRET_FILE`, if set). Required to listen
    /// beyond loopback.
    pub cluster_secret_file: Option<PathBuf>,
    /// Serve Prometheus metrics at `/metrics` on this address ("127.0.0.1:9186"; default off).
    pub metrics_listen: Option<String>,
}

/// Whether `front_ends` ("worker", the default, or "threads") puts front ends on worker 0.
pub fn front_ends_on_worker(v: Option<&str>) -> Result<bool> {
    match v {
        None | Some("worker") => Ok(true),
        Some("threads") => Ok(false),
        Some(v) => bail!("front_ends must be \"worker\" or \"threads\", not {v:?}"),
    }
}

/// ldm workers when the Redis and REST front ends run on worker 0: one core fewer than `auto_ldm_workers`
/// (that thread also serves them; the other front ends' threads and the clients need a core).
/// Measured on 2 cores (BENCHMARKS.md, issue 12): 1 ldm beat 2 for Redis at every row and for
/// sysbench point_select at 1 thread.
pub fn auto_ldm_workers_hosting() -> u16 {
    (cores().saturating_sub(1)).clamp(1, 16) as u16
}

pub fn cores() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
}

/// Total RAM in bytes, from /proc/meminfo (falls back to 4 GiB).
pub fn total_ram() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(4 << 30)
}

/// Automatic data memory: a quarter of RAM, at least 256 MiB.
pub fn auto_data_memory() -> u64 {
    (total_ram() / 4).max(256 << 20)
}

/// Automatic ldm workers: one per core, 1..=16 (as RonDB's automatic thread config scales LDM
/// threads with the CPUs it has).
pub fn auto_ldm_workers() -> u16 {
    cores().clamp(1, 16) as u16
}

impl DatanodeToml {
    pub fn load(path: &Path) -> Result<DatanodeToml> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read config file {}", path.display()))?;
        DatanodeToml::parse(&text).with_context(|| format!("config file {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<DatanodeToml> {
        toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.message()))
    }

    /// Whether the TOML leaves the ldm worker count to Tern.
    pub fn ldm_auto(&self) -> bool {
        self.ldm_workers.is_none() || matches!(&self.ldm_workers, Some(toml::Value::String(s)) if s == "auto")
    }

    pub fn log_level(&self) -> String {
        self.log_level.clone().unwrap_or_else(|| "info".into())
    }

    /// `metrics_listen` as an address.
    pub fn metrics_addr(&self) -> Result<Option<SocketAddr>> {
        self.metrics_listen
            .as_deref()
            .map(|m| m.parse().with_context(|| format!("metrics_listen = '{m}' is not an address like 127.0.0.1:9186")))
            .transpose()
    }

    /// The cluster secret: `cluster_secret_file`, else the environment's.
    pub fn cluster_secret(&self) -> Result<Option<tern_types::secret::ClusterSecret>> {
        match &self.cluster_secret_file {
            Some(p) => tern_client::secret::read_secret_file(p).map(Some),
            None => tern_client::secret::secret_from_env(),
        }
        .map_err(|e| anyhow::anyhow!(e))
    }

    pub fn to_runtime(&self) -> Result<DataNodeConfig> {
        let node_id = self.node_id.unwrap_or(1);
        if node_id == 0 {
            bail!("node_id must be 1 or more");
        }
        let ldm = match &self.ldm_workers {
            None => auto_ldm_workers(),
            Some(toml::Value::String(s)) if s == "auto" => auto_ldm_workers(),
            Some(toml::Value::Integer(n)) if (1..=64).contains(n) => *n as u16,
            Some(v) => bail!("ldm_workers must be \"auto\" or a number 1..=64, not {v}"),
        };
        let data_memory = match &self.data_memory {
            None => auto_data_memory(),
            Some(Size::Text(t)) if t == "auto" => auto_data_memory(),
            Some(s) => s.bytes().context("data_memory")?,
        };
        if data_memory < (1 << 20) {
            bail!("data_memory must be at least 1M");
        }
        let mut node = NodeConfig::new(node_id, ldm, data_memory);
        if let Some(v) = self.epoch_interval_ms {
            if !(1..=10_000).contains(&v) {
                bail!("epoch_interval_ms must be 1..=10000");
            }
            node.dist.epoch_interval_ms = v;
        }
        if let Some(v) = self.lock_wait_timeout_ms {
            node.ldm.lock_wait_timeout_ms = v.max(1);
        }
        if let Some(v) = self.transaction_inactive_timeout_ms {
            node.tc.inactive_timeout_ms = v.max(1);
        }
        if let Some(v) = self.ttl_purge_interval_ms {
            node.tc.purge_interval_ms = v;
        }
        node.tc.one_round_commit = match self.one_round_commit {
            Some(v) => v,
            None => std::env::var("TERN_ONE_ROUND_COMMIT").as_deref() != Ok("0"),
        };
        if let Some(v) = self.checkpoint_redo_mb {
            node.ldm.checkpoint_redo_bytes = v.max(1) << 20;
        }
        let listen_text = self.listen.clone().unwrap_or_else(|| format!("127.0.0.1:{DATANODE_PORT_DEFAULT}"));
        let listen: SocketAddr = listen_text
            .parse()
            .with_context(|| format!("listen = '{listen_text}' is not an address like 127.0.0.1:11860"))?;
        Ok(DataNodeConfig {
            node,
            data_dir: self.data_dir.clone().unwrap_or_else(|| PathBuf::from("./tern-data/node-1")),
            listen,
            spin_max_us: self.spin_max_us.unwrap_or(50),
            expect_spin_us: self.expect_spin_us.unwrap_or(tern_runtime::EXPECT_SPIN_US_DEFAULT),
            redo_segment_bytes: self.redo_segment_mb.unwrap_or(64).max(1) << 20,
            idle_hook: None,
            control: None,
            transporter: match &self.transporter {
                None => tern_runtime::Transporter::Auto,
                Some(t) => t.parse().map_err(|e: String| anyhow::anyhow!("transporter: {e}"))?,
            },
            cluster_secret: self.cluster_secret()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_are_named() {
        let e = DatanodeToml::parse("node_id = 1\ndata_memroy = \"1G\"\n").unwrap_err().to_string();
        assert!(e.contains("data_memroy"), "{e}");
    }

    #[test]
    fn front_end_layout() {
        let c = DatanodeToml::parse("ldm_workers = \"auto\"\nfront_ends = \"threads\"\n").unwrap();
        assert!(c.ldm_auto());
        assert!(!front_ends_on_worker(c.front_ends.as_deref()).unwrap());
        let c = DatanodeToml::parse("ldm_workers = 2\n").unwrap();
        assert!(!c.ldm_auto());
        assert!(front_ends_on_worker(c.front_ends.as_deref()).unwrap(), "the default");
        let e = front_ends_on_worker(Some("ldm")).unwrap_err().to_string();
        assert!(e.contains("\"worker\" or \"threads\""), "{e}");
        assert!(auto_ldm_workers_hosting() >= 1);
    }

    #[test]
    fn sizes_and_defaults() {
        let c = DatanodeToml::parse("data_memory = \"512M\"\nldm_workers = 3\nlisten = \"127.0.0.1:7000\"\n").unwrap();
        let r = c.to_runtime().unwrap();
        assert_eq!(r.node.data_memory_bytes, 512 << 20);
        assert_eq!(r.node.ldm_count, 3);
        assert_eq!(r.listen.port(), 7000);
        let d = DatanodeToml::default().to_runtime().unwrap();
        assert!(d.node.data_memory_bytes >= 256 << 20);
        assert!(d.node.ldm_count >= 1);
        assert!(DatanodeToml::parse("ldm_workers = \"many\"").unwrap().to_runtime().is_err());
        assert!(parse_size("12X").is_err());
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
    }
}

/// The API server's TOML (`tern api --toml FILE`, `tern up --api-toml FILE`): Tern's own settings
/// for its front ends, next to RonDB's JSON config. Values here override the JSON's `Rondis`
/// section. An unknown key is an error that names it.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ApiToml {
    pub redis: Option<RedisToml>,
    pub rest: Option<RestToml>,
    pub mysql: Option<MysqlToml>,
}

/// `[mysql]`: the MySQL front end. Flags (`--mysql-port`, `--mysql-threads`) win over it.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct MysqlToml {
    /// Serve the MySQL protocol (default true).
    pub enable: Option<bool>,
    /// "127.0.0.1:3306".
    pub listen: Option<String>,
    pub threads: Option<usize>,
    /// Open connections at most (MySQL's max_connections, default 151).
    pub max_connections: Option<usize>,
    /// Seconds an idle connection is kept (MySQL's wait_timeout, default 28800).
    pub wait_timeout: Option<u64>,
    /// Seconds a new connection has to authenticate (MySQL's connect_timeout, default 10).
    pub connect_timeout: Option<u64>,
    /// Intermediate results one statement may hold ("512M", the default; "0": no limit).
    pub max_query_memory: Option<Size>,
    /// Milliseconds a SELECT may run (MySQL's max_execution_time; 0, the default: no limit).
    pub max_execution_time: Option<u64>,
    /// Largest packet a client may send ("64M", MySQL's max_allowed_packet).
    pub max_allowed_packet: Option<Size>,
    /// Default of the session variable `tern_durable_commit`: answer COMMIT only once the
    /// transaction is on disk on every replica (default false).
    pub durable_commit: Option<bool>,
    /// PEM certificate chain and key: clients may switch to TLS (the SSL capability).
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
    /// Refuse clients that stay on plain TCP (MySQL's require_secure_transport; default false).
    pub require_secure_transport: Option<bool>,
    /// PEM RSA private key for caching_sha2_password's password exchange without TLS (MySQL's
    /// setting of that name; default: a key made when first needed).
    pub caching_sha2_password_private_key_path: Option<String>,
}

/// `[rest]`: Tern's own REST settings (RonDB's JSON config has no keys for them).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RestToml {
    /// Open connections at most; one more is answered 503 (default 10000).
    pub max_connections: Option<usize>,
    /// Milliseconds a connection may wait for its next request (default 60000).
    pub idle_timeout_ms: Option<u64>,
    /// Milliseconds to receive a request's head from its first byte, and again its body
    /// (default 30000).
    pub header_read_timeout_ms: Option<u64>,
    /// Request bodies all connections may hold at once ("256M", the default); beyond it a
    /// request is answered 503.
    pub max_body_memory: Option<Size>,
    /// Answer a write only once it is on disk on every replica (default false: in the memory of
    /// every replica, on disk within an epoch).
    pub durable_commit: Option<bool>,
    /// Requests per second each API key may make (with API keys on); more are answered 429.
    pub key_rate_limit: Option<f64>,
    /// Requests one key may make at once after a pause (default: one second's worth).
    pub key_rate_burst: Option<f64>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RedisToml {
    /// Serve the Redis protocol (default true).
    pub enable: Option<bool>,
    /// "127.0.0.1:6379".
    pub listen: Option<String>,
    pub threads: Option<usize>,
    pub databases: Option<u32>,
    /// Database indexes whose INCR/DECR take no row lock (RonDB's DirtyINCRDECR).
    pub dirty_incr_decr: Option<Vec<u32>>,
    /// Database indexes whose writes are answered only once on disk on every replica (as
    /// `appendfsync = "always"`, for those databases only). CONFIG SET tern-durable-databases
    /// changes it at run time.
    pub durable_databases: Option<Vec<u32>>,
    /// Bytes of received, unexecuted commands a connection may hold ("1G").
    pub max_pending: Option<Size>,
    /// Open connections at most (redis-server's `maxclients`, default 10000).
    pub max_clients: Option<usize>,
    /// "always": answer a write once it is on disk on every replica; "everysec" (default) or
    /// "no": once it is in the memory of every replica (on disk within an epoch). CONFIG SET
    /// appendfsync changes it at run time.
    pub appendfsync: Option<String>,
    /// Seconds a connection may stay idle (redis-server's `timeout`; 0, the default: forever).
    pub timeout_s: Option<u64>,
    /// The default user's password (redis-server's `requirepass`); required to listen on an
    /// address other than loopback.
    pub requirepass: Option<String>,
    /// Also serve Redis over TLS on this port (redis-server's `tls-port`), on `listen`'s address.
    pub tls_port: Option<u16>,
    /// The server certificate chain (PEM; `tls-cert-file`).
    pub tls_cert_file: Option<String>,
    /// Its private key (PEM; `tls-key-file`).
    pub tls_key_file: Option<String>,
    /// CA certificates client certificates must chain to (`tls-ca-cert-file`).
    pub tls_ca_cert_file: Option<String>,
    /// "yes" (redis-server's default: clients must present a certificate signed by
    /// `tls_ca_cert_file`) or "no".
    pub tls_auth_clients: Option<String>,
}

impl ApiToml {
    /// Whether each front end (REST, Redis, MySQL) answers commits only once they are durable.
    pub fn durable_commits(&self) -> Result<(bool, bool, bool)> {
        let rest = self.rest.as_ref().and_then(|r| r.durable_commit).unwrap_or(false);
        let redis = match self.redis.as_ref().and_then(|r| r.appendfsync.as_deref()) {
            None | Some("everysec") | Some("no") => false,
            Some("always") => true,
            Some(v) => bail!("[redis] appendfsync must be always, everysec or no, not {v:?}"),
        };
        let mysql = self.mysql.as_ref().and_then(|m| m.durable_commit).unwrap_or(false);
        Ok((rest, redis, mysql))
    }

    /// Applies the `[rest]` table to the REST options.
    pub fn apply_rest(&self, o: &mut tern_rest::config::RestOptions) -> Result<()> {
        let Some(r) = &self.rest else { return Ok(()) };
        if let Some(n) = r.max_connections {
            if n == 0 {
                bail!("[rest] max_connections must be at least 1");
            }
            o.max_connections = n;
        }
        let ms = |key: &str, v: u64| -> Result<std::time::Duration> {
            if v == 0 {
                bail!("[rest] {key} must be at least 1");
            }
            Ok(std::time::Duration::from_millis(v))
        };
        if let Some(v) = r.idle_timeout_ms {
            o.idle_timeout = ms("idle_timeout_ms", v)?;
        }
        if let Some(v) = r.header_read_timeout_ms {
            o.header_read_timeout = ms("header_read_timeout_ms", v)?;
        }
        if let Some(m) = &r.max_body_memory {
            o.body_memory_max = usize::try_from(m.bytes().context("[rest] max_body_memory")?).unwrap_or(usize::MAX);
        }
        match (r.key_rate_limit, r.key_rate_burst) {
            (Some(per_second), burst) => {
                if !(per_second > 0.0 && per_second.is_finite()) {
                    bail!("[rest] key_rate_limit must be a number of requests per second above 0");
                }
                let burst = burst.unwrap_or(per_second.max(1.0));
                if !(burst >= 1.0 && burst.is_finite()) {
                    bail!("[rest] key_rate_burst must be at least 1");
                }
                o.key_rate_limit = Some(tern_rest::apikey::RateLimit { per_second, burst });
            }
            (None, Some(_)) => bail!("[rest] key_rate_burst needs key_rate_limit"),
            (None, None) => {}
        }
        Ok(())
    }

    /// Applies the `[mysql]` table to the MySQL options; Ok(false) when it switches MySQL off.
    pub fn apply_mysql(&self, o: &mut tern_mysql::MysqlOptions) -> Result<bool> {
        let Some(m) = &self.mysql else { return Ok(true) };
        if m.enable == Some(false) {
            return Ok(false);
        }
        if let Some(l) = &m.listen {
            o.listen = l.parse().with_context(|| format!("[mysql] listen: '{l}' is not an address"))?;
        }
        if let Some(t) = m.threads {
            o.threads = t.clamp(1, 256);
        }
        if let Some(n) = m.max_connections {
            if !(1..=100_000).contains(&n) {
                bail!("[mysql] max_connections must be 1..100000, not {n}");
            }
            o.max_connections = n;
        }
        if let Some(s) = m.connect_timeout {
            o.connect_timeout = std::time::Duration::from_secs(s.clamp(1, 3600));
        }
        if let Some(p) = &m.max_allowed_packet {
            o.max_packet = (p.bytes()? as usize).clamp(1 << 10, 1 << 30);
        }
        match (&m.tls_cert, &m.tls_key) {
            (Some(cert), Some(key)) => {
                o.tls = Some(tern_client::tls::TlsFiles {
                    certificate_file: cert.clone(),
                    private_key_file: key.clone(),
                    root_ca_cert_file: None,
                    verify_client: false,
                    names: ["[mysql] tls_cert", "[mysql] tls_key", "[mysql] tls_ca"],
                })
            }
            (None, None) => {}
            _ => bail!("[mysql] tls_cert and tls_key go together"),
        }
        if let Some(p) = &m.caching_sha2_password_private_key_path {
            o.rsa_private_key = Some(p.into());
        }
        if let Some(r) = m.require_secure_transport {
            if r && o.tls.is_none() {
                bail!("[mysql] require_secure_transport needs tls_cert and tls_key");
            }
            o.require_secure_transport = r;
        }
        let mut global = |name: &str, v: tern_types::Value| o.globals.push((name.to_string(), v));
        if let Some(s) = m.wait_timeout {
            global("wait_timeout", tern_types::Value::UInt(s.clamp(1, 31_536_000)));
        }
        if let Some(b) = &m.max_query_memory {
            global("max_query_memory", tern_types::Value::UInt(b.bytes()?));
        }
        if let Some(ms) = m.max_execution_time {
            global("max_execution_time", tern_types::Value::UInt(ms));
        }
        Ok(true)
    }

    pub fn load(path: &Path) -> Result<ApiToml> {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("{}: invalid API server configuration", path.display()))
    }

    /// Applies the `[redis]` table to the Redis options; Ok(false) when it switches Redis off.
    pub fn apply_redis(&self, o: &mut tern_redis::RedisOptions) -> Result<bool> {
        let Some(r) = &self.redis else { return Ok(true) };
        if r.enable == Some(false) {
            return Ok(false);
        }
        if let Some(l) = &r.listen {
            o.listen = l.parse().with_context(|| format!("[redis] listen: '{l}' is not an address"))?;
        }
        if let Some(t) = r.threads {
            o.threads = t.max(1);
        }
        if let Some(n) = r.databases {
            if n == 0 || n > 1024 {
                bail!("[redis] databases must be 1..1024, not {n}");
            }
            o.databases = n;
        }
        if let Some(d) = &r.dirty_incr_decr {
            for &i in d {
                if i >= o.databases {
                    bail!("[redis] dirty_incr_decr: database {i} is not below databases = {}", o.databases);
                }
                if o.dirty_incr.len() <= i as usize {
                    o.dirty_incr.resize(i as usize + 1, false);
                }
                o.dirty_incr[i as usize] = true;
            }
        }
        if let Some(d) = &r.durable_databases {
            if let Some(i) = d.iter().find(|&&i| i >= o.databases) {
                bail!("[redis] durable_databases: database {i} is not below databases = {}", o.databases);
            }
            o.durable_databases = d.clone();
        }
        if let Some(m) = &r.max_pending {
            o.max_pending = m.bytes()?.max(1 << 16) as usize;
        }
        if let Some(n) = r.max_clients {
            if n == 0 {
                bail!("[redis] max_clients must be at least 1");
            }
            o.max_clients = n;
        }
        if let Some(s) = r.timeout_s {
            o.timeout = std::time::Duration::from_secs(s.min(i32::MAX as u64));
        }
        if let Some(p) = &r.requirepass {
            o.requirepass = Some(p.clone()).filter(|p| !p.is_empty());
        }
        if let Some(port) = r.tls_port {
            let (Some(cert), Some(key)) = (&r.tls_cert_file, &r.tls_key_file) else {
                bail!("[redis] tls_port needs tls_cert_file and tls_key_file");
            };
            let verify_client = match r.tls_auth_clients.as_deref().unwrap_or("yes") {
                "yes" => true,
                "no" => false,
                other => bail!("[redis] tls_auth_clients must be \"yes\" or \"no\", not \"{other}\""),
            };
            if verify_client && r.tls_ca_cert_file.is_none() {
                bail!("[redis] tls_auth_clients = \"yes\" (the default) needs tls_ca_cert_file, or set it to \"no\"");
            }
            let files = tern_client::tls::TlsFiles {
                certificate_file: cert.clone(),
                private_key_file: key.clone(),
                root_ca_cert_file: r.tls_ca_cert_file.clone(),
                verify_client,
                names: ["tls_cert_file", "tls_key_file", "tls_ca_cert_file"],
            };
            o.tls = Some(tern_redis::RedisTls { listen: std::net::SocketAddr::new(o.listen.ip(), port), files });
        } else if r.tls_cert_file.is_some() || r.tls_key_file.is_some() {
            bail!("[redis] tls_cert_file and tls_key_file need tls_port");
        }
        Ok(true)
    }
}

#[cfg(test)]
mod api_toml_tests {
    use super::*;

    #[test]
    fn rest_table_overrides_and_checks() {
        let t: ApiToml = toml::from_str(
            "[rest]\nmax_connections = 5\nidle_timeout_ms = 1500\nheader_read_timeout_ms = 700\nmax_body_memory = \"64M\"\n",
        )
        .unwrap();
        let mut o = tern_rest::config::RestOptions::default();
        t.apply_rest(&mut o).unwrap();
        assert_eq!(o.max_connections, 5);
        assert_eq!(o.idle_timeout, std::time::Duration::from_millis(1500));
        assert_eq!(o.header_read_timeout, std::time::Duration::from_millis(700));
        assert_eq!(o.body_memory_max, 64 << 20);
        let d = tern_rest::config::RestOptions::default();
        assert_eq!((d.max_connections, d.idle_timeout.as_secs(), d.header_read_timeout.as_secs()), (10_000, 60, 30));
        let zero: ApiToml = toml::from_str("[rest]\nmax_connections = 0\n").unwrap();
        assert!(zero.apply_rest(&mut o).is_err());
        let e = toml::from_str::<ApiToml>("[rest]\nmax_conns = 1\n").unwrap_err().to_string();
        assert!(e.contains("max_conns"), "{e}");
        let limited: ApiToml = toml::from_str("[rest]\nkey_rate_limit = 50\n").unwrap();
        limited.apply_rest(&mut o).unwrap();
        assert_eq!(o.key_rate_limit, Some(tern_rest::apikey::RateLimit { per_second: 50.0, burst: 50.0 }));
        for bad in ["key_rate_limit = 0", "key_rate_limit = 5\nkey_rate_burst = 0.5", "key_rate_burst = 3"] {
            let t: ApiToml = toml::from_str(&format!("[rest]\n{bad}\n")).unwrap();
            assert!(t.apply_rest(&mut o).is_err(), "{bad}");
        }
    }

    #[test]
    fn mysql_table_overrides_and_checks() {
        let t: ApiToml = toml::from_str(
            "[mysql]\nlisten = \"127.0.0.1:3307\"\nmax_connections = 20\nwait_timeout = 60\nconnect_timeout = 5\nmax_query_memory = \"64M\"\nmax_execution_time = 1500\n",
        )
        .unwrap();
        let mut o = tern_mysql::MysqlOptions::default();
        assert!(t.apply_mysql(&mut o).unwrap());
        assert_eq!(o.listen.port(), 3307);
        assert_eq!(o.max_connections, 20);
        assert_eq!(o.connect_timeout, std::time::Duration::from_secs(5));
        let g: std::collections::HashMap<_, _> = o.globals.into_iter().collect();
        assert_eq!(g["wait_timeout"], tern_types::Value::UInt(60));
        assert_eq!(g["max_query_memory"], tern_types::Value::UInt(64 << 20));
        assert_eq!(g["max_execution_time"], tern_types::Value::UInt(1500));
        let bad: ApiToml = toml::from_str("[mysql]\nmax_connections = 0\n").unwrap();
        assert!(bad.apply_mysql(&mut tern_mysql::MysqlOptions::default()).is_err());
        let e = toml::from_str::<ApiToml>("[mysql]\nmax_conn = 1\n").unwrap_err().to_string();
        assert!(e.contains("max_conn"), "{e}");
        let off: ApiToml = toml::from_str("[mysql]\nenable = false\n").unwrap();
        assert!(!off.apply_mysql(&mut tern_mysql::MysqlOptions::default()).unwrap());
    }

    #[test]
    fn redis_table_overrides_and_unknown_keys_are_named() {
        let t: ApiToml = toml::from_str(
            "[redis]\nlisten = \"127.0.0.1:7000\"\ndatabases = 4\ndirty_incr_decr = [1, 3]\nmax_pending = \"64M\"\nmax_clients = 50\ntimeout_s = 300\n",
        )
        .unwrap();
        let mut o = tern_redis::RedisOptions::default();
        assert!(t.apply_redis(&mut o).unwrap());
        assert_eq!(o.listen.port(), 7000);
        assert_eq!(o.databases, 4);
        assert_eq!(o.dirty_incr, vec![false, true, false, true]);
        assert_eq!(o.max_pending, 64 << 20);
        assert_eq!(o.max_clients, 50);
        assert_eq!(o.timeout, std::time::Duration::from_secs(300));
        let none: ApiToml = toml::from_str("[redis]\nmax_clients = 0\n").unwrap();
        assert!(none.apply_redis(&mut tern_redis::RedisOptions::default()).is_err());
        let durable: ApiToml = toml::from_str("[redis]\ndurable_databases = [0, 5]\n").unwrap();
        let mut o = tern_redis::RedisOptions::default();
        assert!(durable.apply_redis(&mut o).unwrap());
        assert_eq!(o.durable_databases, vec![0, 5]);
        let too_high: ApiToml = toml::from_str("[redis]\ndurable_databases = [16]\n").unwrap();
        let e = too_high.apply_redis(&mut tern_redis::RedisOptions::default()).unwrap_err();
        assert!(e.to_string().contains("durable_databases: database 16"), "{e}");
        let bad: ApiToml = toml::from_str("[redis]\ndirty_incr_decr = [99]\n").unwrap();
        assert!(bad.apply_redis(&mut tern_redis::RedisOptions::default()).is_err());
        let e = toml::from_str::<ApiToml>("[redis]\nport = 1\n").unwrap_err().to_string();
        assert!(e.contains("port"), "{e}");
        let tls: ApiToml = toml::from_str(
            "[redis]\nlisten = \"127.0.0.1:7000\"\ntls_port = 7001\ntls_cert_file = \"c.pem\"\ntls_key_file = \"k.pem\"\ntls_auth_clients = \"no\"\n",
        )
        .unwrap();
        let mut o = tern_redis::RedisOptions::default();
        tls.apply_redis(&mut o).unwrap();
        let t = o.tls.unwrap();
        assert_eq!((t.listen.to_string(), t.files.verify_client), ("127.0.0.1:7001".to_string(), false));
        for bad in [
            "tls_port = 7001\ntls_cert_file = \"c\"\ntls_key_file = \"k\"",
            "tls_port = 7001",
            "tls_cert_file = \"c\"\ntls_key_file = \"k\"",
            "tls_port = 7001\ntls_cert_file = \"c\"\ntls_key_file = \"k\"\ntls_auth_clients = \"optional\"",
        ] {
            let t: ApiToml = toml::from_str(&format!("[redis]\n{bad}\n")).unwrap();
            assert!(t.apply_redis(&mut tern_redis::RedisOptions::default()).is_err(), "{bad}");
        }
        let off: ApiToml = toml::from_str("[redis]\nenable = false\n").unwrap();
        assert!(!off.apply_redis(&mut tern_redis::RedisOptions::default()).unwrap());
    }
}
