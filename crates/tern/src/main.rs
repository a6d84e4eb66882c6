//! `tern`: the one binary. `up` starts a local cluster, `datanode` runs a data node, `status`
//! reports on one, `bench` measures it.

mod backup;
mod config;
mod member;
mod metrics_http;
mod mgm;
mod restart;
mod up;

// The data node allocates and frees small buffers per operation; mimalloc's thread-local free
// lists are much cheaper than glibc malloc for that pattern.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tern_types::cluster::ClusterState;

#[derive(Parser)]
#[command(name = "tern", version, about = "Tern: a distributed in-memory database in the style of RonDB")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a local cluster in the foreground (Ctrl-C stops it).
    Up(up::UpArgs),
    /// Run the API server: the RonDB-compatible REST API (more front ends follow).
    Api(ApiArgs),
    /// Manage REST API keys.
    Apikey {
        #[command(subcommand)]
        cmd: ApikeyCmd,
    },
    /// Run one data node.
    Datanode {
        /// TOML configuration file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Also serve the REST API from this process on this port (colocated API server: the
        /// front ends reach the data node through the in-process transport).
        #[arg(long)]
        rest_port: Option<u16>,
        #[command(flatten)]
        front: ColocatedArgs,
        /// Management nodes (host:port, repeat or comma-separate): join the cluster they run;
        /// its ports, replicas and ldm workers come from the cluster file.
        #[arg(long, value_delimiter = ',')]
        mgmd: Vec<String>,
        /// This data node's id in the cluster file (with --mgmd).
        #[arg(long)]
        node_id: Option<u16>,
        /// Data directory (overrides the TOML's).
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// How processes on this host may connect: tcp, shm (shared memory), or auto (default:
        /// offer shared memory next to TCP). Overrides the TOML's `transporter`.
        #[arg(long)]
        transporter: Option<String>,
    },
    /// Stop the whole cluster `tern up` runs on --data-dir, in order (as SIGTERM to `tern up`:
    /// front ends, then data nodes after their last epochs are durable, management nodes last);
    /// or, with --node, ask one data node to stop (it flushes and leaves the cluster; under
    /// `tern up` it stays stopped until `tern start --node N`).
    Stop {
        #[arg(long)]
        node: Option<u16>,
        #[arg(long, default_value = "127.0.0.1:1186", value_delimiter = ',')]
        mgmd: Vec<String>,
        /// The data directory of the `tern up` to stop (without --node).
        #[arg(long, default_value = "./tern-data")]
        data_dir: PathBuf,
        /// How long to wait for the stop (without --node).
        #[arg(long, default_value_t = 60)]
        wait_secs: u64,
    },
    /// Restart every process of a running cluster in turn while it serves (`--rolling`): each
    /// data node stops in order, restarts and is a full replica again before the next; then,
    /// under `tern up` on --data-dir, the management nodes (when there are three or more) and
    /// the API server. Also how a new version is rolled out.
    Restart {
        /// One process at a time (the only kind of restart there is; required).
        #[arg(long)]
        rolling: bool,
        #[arg(long, default_value = "127.0.0.1:1186", value_delimiter = ',')]
        mgmd: Vec<String>,
        /// The data directory of the `tern up` whose management nodes and API server to roll.
        #[arg(long, default_value = "./tern-data")]
        data_dir: PathBuf,
    },
    /// Let a stopped data node start again (it rejoins by a node restart).
    Start {
        #[arg(long)]
        node: u16,
        #[arg(long, default_value = "127.0.0.1:1186", value_delimiter = ',')]
        mgmd: Vec<String>,
    },
    /// The management client (ndb_mgm): SHOW, N STOP|START|RESTART, CREATE NODEGROUP
    /// id@host:port,..., DROP NODEGROUP n, ALTER TABLE db.t REORGANIZE PARTITION, REPORT
    /// MEMORYUSAGE, START BACKUP dir. Commands come from -e (separated by ';') or stdin.
    Mgm {
        #[arg(long, default_value = "127.0.0.1:1186", value_delimiter = ',')]
        mgmd: Vec<String>,
        /// The command(s) to run.
        #[arg(short = 'e', long)]
        execute: Option<String>,
    },
    /// Run a management node (ndb_mgmd): the cluster's configuration, membership and failure
    /// detection, replicated with Raft over the management nodes of the cluster file.
    Mgmd {
        /// The cluster file (TOML: replicas, [[mgmd]] and [[datanode]] lists).
        #[arg(long)]
        config: PathBuf,
        /// This management node's id in the cluster file.
        #[arg(long)]
        node_id: u16,
        /// Where the Raft log and snapshots live.
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Show a data node's state.
    Status {
        #[arg(long, default_value = "127.0.0.1:11860")]
        addr: String,
        /// Ask the management nodes instead (host:port, comma-separated): the whole cluster.
        #[arg(long, value_delimiter = ',')]
        mgmd: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Take an online backup, consistent at one epoch, while writes go on (NDB's scheme: every
    /// table scanned plus a log of the changes committed meanwhile, up to the end epoch).
    Backup {
        /// Data nodes (host:port, comma-separated; the ready line of `tern up` names them).
        #[arg(long, default_value = "127.0.0.1:11860")]
        addr: String,
        /// A new or empty directory for the backup's files (`BACKUP.json` is written last).
        #[arg(long)]
        dir: PathBuf,
    },
    /// Load a backup into an empty cluster (any number of data nodes): the state of the
    /// source at the backup's end epoch.
    Restore {
        /// Data nodes of the target cluster (host:port, comma-separated).
        #[arg(long, default_value = "127.0.0.1:11860")]
        addr: String,
        /// The backup's directory.
        #[arg(long)]
        dir: PathBuf,
    },
    /// Run a benchmark. With `TERN_SERVER_PIDS="pid ..."` (e.g. `tern up`'s pid) every row also
    /// gives the server CPU microseconds per operation of those processes and their descendants.
    Bench {
        #[command(subcommand)]
        suite: BenchSuite,
    },
}

/// Front ends served from a data node's process (`tern datanode --redis-port ...`): no socket
/// and no other process between them and the data node.
#[derive(clap::Args, Clone, Default)]
struct ColocatedArgs {
    /// Also serve the Redis protocol from this process on this port.
    #[arg(long)]
    redis_port: Option<u16>,
    /// Also serve the MySQL protocol from this process on this port.
    #[arg(long)]
    mysql_port: Option<u16>,
    /// Worker threads of a colocated MySQL front end (default: the number of cores).
    #[arg(long)]
    mysql_threads: Option<usize>,
    /// Tern's TOML for colocated front ends (`[redis]`, `[rest]`, `[mysql]`, as `tern api --toml`).
    #[arg(long)]
    api_toml: Option<PathBuf>,
    /// Share the front ends' ports with the other data nodes on this host (SO_REUSEPORT): the
    /// kernel spreads new connections over them, and a node that dies drops only its own.
    #[arg(long)]
    share_ports: bool,
}

impl ColocatedArgs {
    /// The API server arguments of the front ends asked for (None: none).
    fn api_args(&self, rest_port: Option<u16>) -> Option<ApiArgs> {
        if rest_port.is_none() && self.redis_port.is_none() && self.mysql_port.is_none() {
            return None;
        }
        Some(ApiArgs {
            config: None,
            datanode: None,
            mgmd: Vec::new(),
            location_domain: None,
            rest_port,
            rest_ip: Some("127.0.0.1".into()),
            no_rest: rest_port.is_none(),
            spin_us: 50,
            redis_port: self.redis_port,
            redis_ip: None,
            no_redis: self.redis_port.is_none(),
            mysql_port: self.mysql_port,
            mysql_threads: self.mysql_threads,
            no_mysql: self.mysql_port.is_none(),
            toml: self.api_toml.clone(),
            transporter: None,
            node_id: None,
        })
    }
}

#[derive(Subcommand)]
enum ApikeyCmd {
    /// Create a key granting access to the named databases; prints it (shown once).
    Create {
        /// A database the key may access (repeat for several).
        #[arg(long = "db", required = true)]
        dbs: Vec<String>,
        /// Data node address.
        #[arg(long, default_value = "127.0.0.1:11860")]
        addr: String,
    },
}

#[derive(clap::Args)]
struct ApiArgs {
    /// RonDB REST server config (JSON); also read from RDRS_CONFIG_FILE.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Data node(s) to serve from (host:port, comma-separated: the client fails over).
    /// Default: the data nodes of the cluster the management nodes run (`--mgmd`, or the
    /// config JSON's `RonDB.Mgmds`), else 127.0.0.1:11860.
    #[arg(long)]
    datanode: Option<String>,
    /// Management nodes (host:port, comma-separated): serve the data nodes of their cluster.
    #[arg(long, value_delimiter = ',')]
    mgmd: Vec<String>,
    /// This API server's location domain (availability zone, 1-255; RonDB's LocationDomainId):
    /// with `--mgmd`, it coordinates its transactions on the data nodes of its domain first, and
    /// their READ_BACKUP reads stay in the domain where a replica is.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..))]
    location_domain: Option<u8>,
    /// REST port (overrides REST.ServerPort).
    #[arg(long)]
    rest_port: Option<u16>,
    /// REST address to bind (overrides REST.ServerIP).
    #[arg(long)]
    rest_ip: Option<String>,
    /// Do not serve the REST API.
    #[arg(long)]
    no_rest: bool,
    /// Microseconds an idle REST worker polls its sockets before it sleeps (0: never).
    #[arg(long, default_value_t = 50)]
    spin_us: u64,
    /// Redis port (overrides Rondis.ServerPort; default 6379).
    #[arg(long)]
    redis_port: Option<u16>,
    /// Redis address to bind (default: the REST address).
    #[arg(long)]
    redis_ip: Option<String>,
    /// Do not serve the Redis protocol (like Rondis.Enable = false).
    #[arg(long)]
    no_redis: bool,
    /// MySQL protocol port (default 3306, or `[mysql] listen`).
    #[arg(long)]
    mysql_port: Option<u16>,
    /// Worker threads of the MySQL front end (default: the number of cores).
    #[arg(long)]
    mysql_threads: Option<usize>,
    /// Do not serve the MySQL protocol.
    #[arg(long)]
    no_mysql: bool,
    /// Tern's TOML for the front ends (`[redis]`, `[rest]`, `[mysql]`; see the README); overrides
    /// the JSON's Rondis section.
    #[arg(long)]
    toml: Option<PathBuf>,
    /// How to reach the data nodes: tcp, shm (shared memory, same host only), or auto (default:
    /// shared memory to a data node on this host that offers it, else TCP).
    #[arg(long)]
    transporter: Option<String>,
    /// The data node whose process serves these front ends (its MySQL connection ids are
    /// prefixed with it); not a flag.
    #[arg(skip)]
    node_id: Option<u16>,
}

#[derive(Subcommand)]
enum BenchSuite {
    /// RonDB's REST benchmarks (BenchmarkSimple, BenchmarkManyColumns, BenchmarkBinary) against
    /// pk-read (batch 1) and batch (batch > 1).
    Rest {
        /// Data node address (for loading the tables).
        #[arg(long, default_value = "127.0.0.1:11860")]
        addr: String,
        /// REST API address.
        #[arg(long, default_value = "127.0.0.1:4406")]
        rest: String,
        /// Rows in each table.
        #[arg(long, default_value_t = 1000)]
        rows: u64,
        #[arg(long, default_value = "1", value_delimiter = ',')]
        threads: Vec<usize>,
        /// Rows per request: 1 uses pk-read, more uses batch.
        #[arg(long, default_value = "1,100", value_delimiter = ',')]
        batch: Vec<usize>,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        #[arg(long, default_value = "BenchmarkSimple,BenchmarkManyColumns,BenchmarkBinary", value_delimiter = ',')]
        benchmarks: Vec<String>,
        #[arg(long)]
        json: bool,
        /// Microseconds the HTTP client polls for a reply before it blocks (0: a plain blocking
        /// client; the native client polls adaptively).
        #[arg(long, default_value_t = 0)]
        client_spin_us: u64,
    },
    /// The seeds' Rondis tables: SET, GET (batch = pipelined commands), MSET, MGET (batch = keys
    /// per command) against a Redis-protocol server; throughput in keys per second.
    Redis {
        /// Redis server address (Tern's front end, or redis-server for comparison).
        #[arg(long, default_value = "127.0.0.1:6379")]
        redis: String,
        /// Distinct keys, written before the run.
        #[arg(long, default_value_t = 100_000)]
        keys: u64,
        #[arg(long, default_value = "1", value_delimiter = ',')]
        threads: Vec<usize>,
        #[arg(long, default_value = "1,16,64,256", value_delimiter = ',')]
        batch: Vec<usize>,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Value size in bytes.
        #[arg(long, default_value_t = 100)]
        value_size: usize,
        #[arg(long, default_value = "SET,GET,MSET,MGET", value_delimiter = ',')]
        benchmarks: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// The Feature Store REST API: feature vectors per second and latency of a view joining two
    /// feature groups, at batch 1 (`/0.1.0/feature_store`) and larger (`batch_feature_store`).
    /// Creates the metadata tables and the view through the MySQL front end (`mariadb` client).
    FeatureStore {
        /// Data node address (for writing the feature rows).
        #[arg(long, default_value = "127.0.0.1:11860")]
        addr: String,
        /// MySQL front end (creates the metadata and the online tables).
        #[arg(long, default_value = "127.0.0.1:3306")]
        mysql: String,
        /// REST API address.
        #[arg(long, default_value = "127.0.0.1:4406")]
        rest: String,
        /// Users (rows in each feature group).
        #[arg(long, default_value_t = 10_000)]
        rows: u64,
        #[arg(long, default_value = "1", value_delimiter = ',')]
        threads: Vec<usize>,
        /// Entries per request: 1 uses feature_store, more batch_feature_store.
        #[arg(long, default_value = "1,100", value_delimiter = ',')]
        batch: Vec<usize>,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        #[arg(long)]
        json: bool,
    },
    /// Primary-key reads through the MySQL protocol: `point` (prepared `WHERE id = ?`) and `in`
    /// (prepared `WHERE id IN (batch keys)`); throughput in rows per second.
    Sql {
        /// MySQL server address (Tern's front end, or MariaDB/MySQL for comparison).
        #[arg(long, default_value = "127.0.0.1:3306")]
        addr: String,
        /// Rows of `bench_sql.t`, written before the run.
        #[arg(long, default_value_t = 100_000)]
        rows: u64,
        #[arg(long, default_value = "1", value_delimiter = ',')]
        threads: Vec<usize>,
        /// Keys per IN-list (the `in` benchmark).
        #[arg(long, default_value = "100", value_delimiter = ',')]
        batch: Vec<usize>,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        #[arg(long, default_value = "point,in", value_delimiter = ',')]
        benchmarks: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// TPC-H through the MySQL protocol: generates the data (tpchgen-cli), loads it with LOAD
    /// DATA, runs the 22 queries, and with --against runs them on MariaDB (started for the run)
    /// and/or DuckDB (through Python) in the same run, comparing the answers.
    Tpch {
        /// MySQL server address (Tern's front end).
        #[arg(long, default_value = "127.0.0.1:3306")]
        addr: String,
        /// Scale factor (1 = lineitem of 6 million rows).
        #[arg(long, default_value_t = 0.1)]
        scale: f64,
        /// Directory for generated data (kept per scale factor) and the peer's files.
        #[arg(long, default_value = "tpch-data")]
        dir: std::path::PathBuf,
        /// Peers to run the same queries on: mariadb, duckdb.
        #[arg(long, value_delimiter = ',')]
        against: Vec<String>,
        /// Queries, e.g. 1-22 or 1,3,6.
        #[arg(long, default_value = "1-22")]
        queries: String,
        /// Seconds a query may run on one engine.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Keep the data already loaded into Tern.
        #[arg(long)]
        no_load: bool,
    },
    /// flexAsynch-like batched primary-key operations through the native client.
    Native {
        /// Data node address.
        #[arg(long, default_value = "127.0.0.1:11860")]
        addr: String,
        /// Client threads, each with its own connection (comma list runs each).
        #[arg(long, default_value = "1", value_delimiter = ',')]
        threads: Vec<usize>,
        /// Operations per transaction batch (comma list runs each).
        #[arg(long, default_value = "64", value_delimiter = ',')]
        batch: Vec<usize>,
        /// Rows in the table.
        #[arg(long, default_value_t = 100_000)]
        rows: u64,
        /// Seconds the read phase runs.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Phases in order.
        #[arg(long, default_value = "insert,read,update,delete", value_delimiter = ',')]
        phases: Vec<String>,
        #[arg(long)]
        json: bool,
        /// Also report the data node's memory per row after loading (RSS delta and accounted).
        #[arg(long)]
        memory: bool,
        /// Read an existing table (db.table with an INT key 0..rows) instead of bench.flex.
        #[arg(long)]
        table: Option<String>,
        /// Follow the cluster map of these management nodes (host:port, comma-separated), as an
        /// API server does: each transaction then starts on a data node that holds its first
        /// row (distribution awareness across nodes), given every data node in --addr.
        #[arg(long, value_delimiter = ',')]
        mgmd: Vec<String>,
        /// Use bench.flex_rb, created with NDB_TABLE=READ_BACKUP=1 (reads at a local backup,
        /// which every table without READ_BACKUP=0 does since issue 33).
        #[arg(long)]
        read_backup: bool,
    },
}

/// `1-22` or `1,3,6` (or both) as query numbers in 1..=22.
fn parse_query_list(s: &str) -> anyhow::Result<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.trim().parse()?, b.trim().parse()?);
        if a == 0 || b > 22 || a > b {
            bail!("queries are numbered 1 to 22: {part}");
        }
        out.extend(a..=b);
    }
    if out.is_empty() {
        bail!("no queries");
    }
    Ok(out)
}

static STOP: AtomicBool = AtomicBool::new(false);
/// Set by the first SIGTERM or SIGINT (an operator's stop through the control plane is not one).
static SIGNALLED: AtomicBool = AtomicBool::new(false);
/// The control plane asked this data node to stop (`N STOP`, `N RESTART`, `tern stop --node N`,
/// a rolling restart): once stopped in order it starts again in this process.
static OPERATOR_STOP: AtomicBool = AtomicBool::new(false);
/// This program's path as it was at start: a re-exec runs what is installed there then (a new
/// version during a rolling upgrade).
static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Child processes to kill at a second signal (`tern up`'s; 0 = free slot).
static CHILDREN: [std::sync::atomic::AtomicI32; 64] = [const { std::sync::atomic::AtomicI32::new(0) }; 64];

/// Remembers a child process: a second SIGINT/SIGTERM kills it with this process.
pub fn register_child(pid: u32) {
    for slot in &CHILDREN {
        if slot.compare_exchange(0, pid as i32, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            return;
        }
    }
}

pub fn unregister_child(pid: u32) {
    for slot in &CHILDREN {
        let _ = slot.compare_exchange(pid as i32, 0, Ordering::SeqCst, Ordering::SeqCst);
    }
}

/// The first SIGINT or SIGTERM asks for an orderly stop; a second one ends the process at once
/// (exit code 128 + the signal's number, as a shell reports a process killed by it), and the
/// children it supervises with it (SIGKILL).
extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(true, Ordering::SeqCst);
    if STOP.swap(true, Ordering::SeqCst) {
        for slot in &CHILDREN {
            let pid = slot.load(Ordering::SeqCst);
            if pid > 0 {
                // SAFETY: kill is async-signal-safe.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + sig) };
    }
}

/// Asks this process for an orderly stop, as a first SIGTERM does (an operator's `tern stop
/// --node N` seen in a heartbeat reply).
pub fn request_stop() {
    OPERATOR_STOP.store(true, Ordering::SeqCst);
    STOP.store(true, Ordering::SeqCst);
}

/// A data node the control plane stopped starts again at once in the same process, as NDB's
/// angel process does for `N RESTART`: the new image waits, holding nothing, until `N START`
/// (`tern start --node N`) and then rejoins by a node restart. So no supervisor is needed for
/// an operator's stop and start, and a supervisor sees no exit. A signal (SIGTERM, Ctrl-C)
/// ends the process instead. Returns only when the exec failed.
fn start_again_after_operator_stop() {
    if !OPERATOR_STOP.load(Ordering::SeqCst) || SIGNALLED.load(Ordering::SeqCst) {
        return;
    }
    let Some(exe) = EXE.get() else { return };
    tracing::info!(exe = %exe.display(), "stopped by an operator: starting again in this process");
    use std::os::unix::process::CommandExt;
    let e = std::process::Command::new(exe).args(std::env::args_os().skip(1)).exec();
    tracing::warn!("could not start again ({e}): exiting (a supervisor has to start it)");
}

pub fn install_signal_handlers() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }
}

/// How often a process's idle main thread looks for a stop request (SIGTERM, SIGINT): a stop
/// starts within it; shorter costs wake-ups on an idle host.
pub const STOP_POLL: Duration = Duration::from_millis(200);

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

fn init_logging(level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("TERN_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("{level},openraft=warn")));
    use std::io::IsTerminal;
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .try_init();
}

fn main() {
    if let Ok(exe) = std::env::current_exe() {
        let _ = EXE.set(exe);
    }
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Up(a) => up::run(a),
        Cmd::Api(a) => api(a),
        Cmd::Apikey { cmd: ApikeyCmd::Create { dbs, addr } } => apikey_create(&dbs, &addr),
        Cmd::Datanode { config, rest_port, front, mgmd, node_id, data_dir, transporter } if !mgmd.is_empty() => {
            tern_client::frontend::set_share_ports(front.share_ports);
            let r = datanode_in_cluster(config, front.api_args(rest_port), mgmd, node_id, data_dir, transporter);
            if r.is_ok() {
                start_again_after_operator_stop();
            }
            r
        }
        Cmd::Datanode { config, rest_port, front, data_dir, transporter, .. } => {
            tern_client::frontend::set_share_ports(front.share_ports);
            datanode(config, front.api_args(rest_port), data_dir, transporter)
        }
        Cmd::Mgmd { config, node_id, data_dir } => mgmd(&config, node_id, data_dir),
        Cmd::Stop { node: Some(node), mgmd, .. } => operator(mgmd, node, true),
        Cmd::Stop { node: None, data_dir, wait_secs, .. } => {
            up::stop_cluster(&data_dir, Duration::from_secs(wait_secs))
        }
        Cmd::Start { node, mgmd } => operator(mgmd, node, false),
        Cmd::Mgm { mgmd, execute } => mgm::run(mgmd, execute),
        Cmd::Restart { rolling: true, mgmd, data_dir } => {
            init_logging("warn");
            install_signal_handlers();
            restart::rolling(mgmd, &data_dir)
        }
        Cmd::Restart { rolling: false, .. } => {
            Err(anyhow::anyhow!("only a rolling restart is offered: tern restart --rolling"))
        }
        Cmd::Status { mgmd, json, .. } if !mgmd.is_empty() => cluster_status(mgmd, json),
        Cmd::Status { addr, json, .. } => status(&addr, json),
        Cmd::Backup { addr, dir } => backup::backup(&addr, &dir),
        Cmd::Restore { addr, dir } => backup::restore(&addr, &dir),
        Cmd::Bench { suite } => bench(suite),
    };
    if let Err(e) = r {
        eprintln!("tern: {e:#}");
        std::process::exit(up::EXIT_STARTUP);
    }
}

/// A management client for the `tern` tools, proving the environment's cluster secret.
pub fn admin_client(mgmd: Vec<String>) -> tern_control::MgmClient {
    tern_control::MgmClient::new(mgmd)
        .with_role(tern_control::Role::Admin)
        .with_secret(tern_client::env_cluster_secret().as_ref())
}

/// This process's cluster secret (`TERN_CLUSTER_SECRET_FILE`); an unreadable or unsafe file is
/// an error.
fn process_secret() -> Result<Option<tern_types::secret::ClusterSecret>> {
    tern_client::secret::secret_from_env().map_err(|e| anyhow::anyhow!(e))
}

/// `tern stop|start --node N`: the operator's request, kept by the control plane.
fn operator(mgmd: Vec<String>, node: u16, stop: bool) -> Result<()> {
    let mut c = admin_client(mgmd);
    let r = if stop { c.stop_node(node) } else { c.start_node(node) };
    r.map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("data node {node}: {}", if stop { "asked to stop" } else { "may start again" });
    Ok(())
}

fn mgmd(config: &std::path::Path, node_id: u16, data_dir: PathBuf) -> Result<()> {
    init_logging("info");
    let cluster = tern_control::load_cluster_config(config)?;
    install_signal_handlers();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::spawn(move || {
        while !stop_requested() {
            std::thread::sleep(STOP_POLL);
        }
        flag.store(true, Ordering::SeqCst);
    });
    tracing::info!(node_id, "management node starting");
    // The failure detector's threads inherit it: a busy host must not make it late.
    member::raise_priority("mgmd");
    let secret = process_secret()?;
    tern_control::run_mgmd(tern_control::MgmdOptions { config: cluster, node_id, data_dir, bind: None, secret }, stop)
}

/// A data node of a cluster run by management nodes (see `member`).
fn datanode_in_cluster(
    config: Option<PathBuf>,
    front: Option<ApiArgs>,
    mgmd: Vec<String>,
    node_id: Option<u16>,
    data_dir: Option<PathBuf>,
    transporter: Option<String>,
) -> Result<()> {
    let mut toml = match &config {
        Some(p) => config::DatanodeToml::load(p)?,
        None => config::DatanodeToml::default(),
    };
    if transporter.is_some() {
        toml.transporter = transporter;
    }
    init_logging(&toml.log_level());
    install_signal_handlers();
    let node_id = node_id.or(toml.node_id).context("--node-id is needed with --mgmd")?;
    if let Some(d) = data_dir {
        toml.data_dir = Some(d);
    }
    let secret = toml.cluster_secret()?;
    let mut client = member::client(&mgmd, secret.as_ref());
    let info = member::fetch(&mut client, &stop_requested)?;
    let spec = info
        .state
        .config
        .data_node(node_id)
        .with_context(|| format!("data node {node_id} is not in the cluster file"))?
        .clone();
    toml.node_id = Some(node_id);
    toml.ldm_workers = Some(toml::Value::Integer(info.state.config.ldm_workers as i64));
    toml.epoch_interval_ms = Some(info.state.config.epoch_interval_ms);
    toml.listen = Some(spec.addr());
    let mut cfg = toml.to_runtime()?;
    colocated_spin(&mut cfg, front.as_ref(), toml.expect_spin_us);
    // The front ends on worker 0's thread, as in a lone data node (the cluster file sets the
    // ldm workers).
    let on_worker = hosts_front_ends(front.as_ref(), &toml)?;
    let mut front = front;
    if let Some(a) = front.as_mut() {
        a.node_id = Some(node_id);
    }
    let joined = member::join(&mut client, node_id, &cfg.data_dir, &stop_requested)?;
    let heartbeat = Duration::from_millis(joined.state.config.heartbeat_interval_ms.max(10));
    let inbox = Arc::new(tern_runtime::ControlInbox::default());
    let rx = inbox.clone();
    // The membership thread runs from now on: a long local recovery keeps its lease.
    let publisher = Arc::new(member::Maps::default());
    let m = member::Member {
        node: node_id,
        incarnation: joined.incarnation,
        heartbeat,
        known_version: joined.state.version,
        master: joined.state.master(),
        booted_started: joined.recover_to.is_some(),
        failure_timeout: Duration::from_millis(joined.state.config.failure_timeout_ms.max(100)),
        data_dir: cfg.data_dir.clone(),
    };
    let steer = Arc::new(member::Steer::default());
    let member = {
        let publisher = publisher.clone();
        let hb_client = member::client(&mgmd, secret.as_ref());
        let work_client = member::client(&mgmd, secret.as_ref());
        let steer = steer.clone();
        std::thread::Builder::new().name("tern-member".into()).spawn(move || {
            let publish = |st: Arc<ClusterState>| {
                publish_cluster_nodes(&st);
                publisher.publish(st)
            };
            let to_dict = |sig| publisher.to_dict(sig);
            let lease = |until| publisher.lease(until);
            let fence = |why: &str| {
                tracing::error!("stopping this data node at once: {why}");
                eprintln!("tern: data node stopped: {why}");
                std::process::exit(member::EXIT_FENCED);
            };
            member::run(hb_client, work_client, m, rx, &publish, &to_dict, &lease, &fence, &steer);
        })?
    };
    // The TOML's tuning, the cluster's shape.
    cfg.node.ldm_count = joined.state.config.ldm_workers;
    cfg.node.cluster = Arc::new(joined.state);
    cfg.node.recover_to = joined.recover_to;
    cfg.control = Some(inbox);
    tune_allocator();
    cfg.idle_hook = Some(collect_freed_memory);
    let (host, runtime) = front_end_host(on_worker);
    let node = tern_runtime::DataNode::start_hosted(cfg, host).map_err(|e| anyhow::anyhow!(e))?;
    let runtime = match runtime {
        Some(rx) => Some(rx.recv().context("the data node's worker 0 did not start")?),
        None => None,
    };
    publisher.attach(node.map_publisher());
    tracing::info!(addr = %node.local_addr(), rows = node.recovered_rows, durable_epoch = node.durable_epoch, "data node listening");
    // An orderly stop: the last epochs are made durable, then the node leaves the cluster (a
    // planned stop, not a failure the others must detect), then its threads stop.
    let leave = |n: &tern_runtime::DataNode| {
        n.flush_for_stop();
        if !steer.leave(Duration::from_secs(3)) {
            tracing::warn!("the management nodes did not confirm the leave within 3 s");
        }
    };
    let r = serve_until_stopped(node, front, runtime, toml.metrics_addr()?, Some(&leave));
    steer.stop.store(true, Ordering::SeqCst);
    let _ = member.join();
    r
}

/// With front ends inside the data node and no core to spare beyond the workers, the workers do
/// not keep spinning after exchanges between them (measured with Redis on 2 cores: the front
/// end's thread needs that CPU more than the hand-offs need the spin) unless the TOML says so.
fn colocated_spin(cfg: &mut tern_runtime::DataNodeConfig, front: Option<&ApiArgs>, asked: Option<u64>) {
    if front.is_some() && asked.is_none() && config::cores() <= cfg.node.ldm_count as usize + 1 {
        cfg.expect_spin_us = 0;
    }
}

/// Waits until this node serves transactions in its own view of the cluster: after a node
/// restart it first recovers, registers and copies what it missed. Its front ends listen only
/// then: on ports shared with the other data nodes, connections the kernel gave a listener of a
/// node not yet serving would wait behind it (measured: 1.5-2.5 s Redis stalls in a rolling
/// restart) instead of going to a node that serves.
fn wait_serving(node: &tern_runtime::DataNode) {
    let mut client = None;
    while !stop_requested() {
        if client.is_none() {
            let connector = node.local_connector();
            client = tern_client::Client::connect_local(move |sink| Box::new(connector.connect_to(None, sink))).ok();
        }
        // An empty transaction: refused ("data node is restarting") until its map shows it
        // started, and answered at once after.
        if client.as_ref().is_some_and(|c| c.blocking().execute(Vec::new()).is_ok()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn serve_until_stopped(
    node: tern_runtime::DataNode,
    front: Option<ApiArgs>,
    on_worker: Option<tokio::runtime::Handle>,
    metrics: Option<std::net::SocketAddr>,
    before_stop: Option<&dyn Fn(&tern_runtime::DataNode)>,
) -> Result<()> {
    if let Some(listen) = metrics {
        let connector = node.local_connector();
        let client = tern_client::Client::connect_local(move |sink| Box::new(connector.connect_to(None, sink)))
            .map_err(|e| anyhow::anyhow!("metrics: {e}"))?;
        let addr = metrics_http::spawn(listen, move || metrics_http::render_node(&client))?;
        tracing::info!(%addr, "data node metrics at /metrics");
    }
    while !node.wait_started(Duration::from_millis(50)) {
        if stop_requested() {
            break;
        }
    }
    tracing::info!(addr = %node.local_addr(), "data node started");
    if front.is_some() {
        wait_serving(&node);
    }
    let r = match front {
        Some(a) if !stop_requested() => serve_colocated(&node, a, on_worker),
        _ => {
            while !stop_requested() {
                std::thread::sleep(STOP_POLL);
            }
            Ok(())
        }
    };
    tracing::info!("stopping");
    // New connections to the shared front-door ports go to the other data nodes from now on.
    tern_client::frontend::stop_listening();
    match before_stop {
        Some(f) if node.is_started() => {
            // Flushed and left: the others no longer count on this node.
            f(&node);
            node.kill();
        }
        _ => node.shutdown(),
    }
    tracing::info!("stopped");
    r
}

fn datanode(
    config: Option<PathBuf>,
    front: Option<ApiArgs>,
    data_dir: Option<PathBuf>,
    transporter: Option<String>,
) -> Result<()> {
    let mut toml = match &config {
        Some(p) => config::DatanodeToml::load(p)?,
        None => config::DatanodeToml::default(),
    };
    if transporter.is_some() {
        toml.transporter = transporter;
    }
    if let Some(d) = data_dir {
        toml.data_dir = Some(d);
    }
    init_logging(&toml.log_level());
    let on_worker = hosts_front_ends(front.as_ref(), &toml)?;
    if on_worker && toml.ldm_auto() {
        toml.ldm_workers = Some(toml::Value::Integer(config::auto_ldm_workers_hosting().into()));
    }
    let mut cfg = toml.to_runtime()?;
    colocated_spin(&mut cfg, front.as_ref(), toml.expect_spin_us);
    tune_allocator();
    cfg.idle_hook = Some(collect_freed_memory);
    install_signal_handlers();
    let (host, runtime) = front_end_host(on_worker);
    let node = tern_runtime::DataNode::start_hosted(cfg, host).map_err(|e| anyhow::anyhow!(e))?;
    let runtime = match runtime {
        Some(rx) => Some(rx.recv().context("the data node's worker 0 did not start")?),
        None => None,
    };
    tracing::info!(addr = %node.local_addr(), rows = node.recovered_rows, durable_epoch = node.durable_epoch, on_worker, "data node listening");
    serve_until_stopped(node, front, runtime, toml.metrics_addr()?, None)
}

/// Whether the front ends asked for run on worker 0's thread (see `tern_client::hosted`; the
/// TOML's `front_ends = "worker"`, the default) rather than on threads of their own.
fn hosts_front_ends(front: Option<&ApiArgs>, toml: &config::DatanodeToml) -> Result<bool> {
    Ok(front.is_some_and(|a| !a.no_redis || !a.no_rest || !a.no_mysql)
        && config::front_ends_on_worker(toml.front_ends.as_deref())?)
}

type HostedRuntime = std::sync::mpsc::Receiver<tokio::runtime::Handle>;

/// The driver of worker 0 when it hosts the front ends, and where its runtime is announced.
fn front_end_host(on_worker: bool) -> (Option<tern_runtime::Host>, Option<HostedRuntime>) {
    if on_worker {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        (Some(tern_client::hosted::host(tx)), Some(rx))
    } else {
        (None, None)
    }
}

/// Serves the front ends `a` asks for from the data node's process, through the in-process
/// transport, until a stop is requested.
fn serve_colocated(node: &tern_runtime::DataNode, a: ApiArgs, on_worker: Option<tokio::runtime::Handle>) -> Result<()> {
    let connector = node.local_connector();
    let make: tern_client::LocalMaker = Arc::new(move |w, sink| Box::new(connector.connect_to(w, sink)));
    let connect = move || tern_client::Client::connect_local_workers(make.clone()).map_err(|e| e.to_string());
    // RonDB's REST config JSON, as `tern api` reads it (`tern up` passes RDRS_CONFIG_FILE on).
    let cfg = match std::env::var_os("RDRS_CONFIG_FILE") {
        Some(p) => tern_rest::config::RonDbConfig::load(std::path::Path::new(&p)).map_err(|e| anyhow::anyhow!(e))?,
        None => tern_rest::config::RonDbConfig::default(),
    };
    let opts = rest_options(&a, &cfg)?;
    serve_front_ends(&a, &cfg, opts, Arc::new(connect), on_worker)
}

/// mimalloc option ids (mimalloc.h v2 `mi_option_e`).
const MI_OPTION_ARENA_EAGER_COMMIT: i32 = 4;
const MI_OPTION_PURGE_DELAY: i32 = 15;

/// How long freed pages stay committed before mimalloc returns them to the OS. 0 (at once) made
/// every request's short-lived buffers fault pages in again: ~11 % of a busy Redis SET thread
/// in page faults and madvise (perf), 5-7 % more SET -P16 throughput with 50 ms. The idle hook
/// (`collect_freed_memory`) returns what is left once the node goes idle.
const PURGE_DELAY_MS: std::os::raw::c_long = 50;

/// The data node keeps its rows for long and churns small buffers: return freed pages to the OS
/// soon and commit arena memory only when used, so resident memory tracks the data.
fn tune_allocator() {
    // SAFETY: setting documented mimalloc options before the data node allocates its data.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY as _, PURGE_DELAY_MS);
        libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT as _, 0);
    }
}

fn collect_freed_memory() {
    // SAFETY: mi_collect may be called from any thread at any time.
    unsafe { libmimalloc_sys::mi_collect(false) }
}

fn apikey_create(dbs: &[String], addr: &str) -> Result<()> {
    for db in dbs {
        tern_types::schema::check_ident("database", db).map_err(|e| anyhow::anyhow!(e.message))?;
    }
    let c = tern_client::Client::connect(addr).with_context(|| format!("no data node answers at {addr}"))?;
    let mut random = [0u8; 64];
    tern_client::os_random(&mut random);
    let key = tern_rest::apikey::create_key(&c, dbs, &random)?;
    println!("{key}");
    Ok(())
}

/// The Redis front end's options: the `Rondis` section of the RonDB config, then the flags.
fn redis_options(
    cfg: &tern_rest::config::RonDbConfig,
    a: &ApiArgs,
    rest: &tern_rest::config::RestOptions,
) -> Result<Option<tern_redis::RedisOptions>> {
    let r = cfg.rondis.clone().unwrap_or_default();
    if a.no_redis || r.enable == Some(false) {
        return Ok(None);
    }
    // This binary's global allocator (INFO memory's mem_allocator).
    let mut o = tern_redis::RedisOptions { allocator: "mimalloc", ..Default::default() };
    let ip = a.redis_ip.clone().unwrap_or_else(|| rest.listen.ip().to_string());
    let port = a.redis_port.or(r.server_port).unwrap_or(6379);
    o.listen = format!("{ip}:{port}").parse().with_context(|| format!("'{ip}:{port}' is not an address"))?;
    if let Some(t) = r.num_threads {
        // RonDB's default config asks for 64 threads; more workers than cores only add switches.
        o.threads = t.clamp(1, std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    }
    if let Some(n) = r.num_databases {
        if n == 0 || n > 1024 {
            bail!("Rondis.NumDatabases must be 1..1024, not {n}");
        }
        o.databases = n;
    }
    for d in r.databases.unwrap_or_default() {
        if d.index >= o.databases {
            bail!("Rondis.Databases: index {} is not below NumDatabases {}", d.index, o.databases);
        }
        if o.dirty_incr.len() <= d.index as usize {
            o.dirty_incr.resize(d.index as usize + 1, false);
        }
        o.dirty_incr[d.index as usize] = d.dirty_incr_decr.unwrap_or(false);
    }
    o.spin = rest.spin;
    if let Some(path) = &a.toml
        && !crate::config::ApiToml::load(path)?.apply_redis(&mut o)?
    {
        return Ok(None);
    }
    if a.redis_port.is_some() || a.redis_ip.is_some() {
        let ip = a.redis_ip.clone().unwrap_or_else(|| o.listen.ip().to_string());
        let port = a.redis_port.unwrap_or(o.listen.port());
        o.listen = format!("{ip}:{port}").parse().with_context(|| format!("'{ip}:{port}' is not an address"))?;
    }
    Ok(Some(o))
}

/// The MySQL front end's options: defaults, then the API TOML's `[mysql]`, then the flags
/// (None: switched off).
fn mysql_options(a: &ApiArgs) -> Result<Option<tern_mysql::MysqlOptions>> {
    if a.no_mysql {
        return Ok(None);
    }
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let mut o = tern_mysql::MysqlOptions { threads: cores.clamp(1, 256), ..Default::default() };
    let ip = a.rest_ip.clone().unwrap_or_else(|| "127.0.0.1".into());
    o.listen = format!("{ip}:3306").parse().with_context(|| format!("'{ip}' is not an address"))?;
    if let Some(path) = &a.toml
        && !crate::config::ApiToml::load(path)?.apply_mysql(&mut o)?
    {
        return Ok(None);
    }
    if let Some(port) = a.mysql_port {
        o.listen.set_port(port);
    }
    if let Some(t) = a.mysql_threads {
        o.threads = t.clamp(1, 256);
    }
    // root's first password (`tern up --root-password`), passed in the environment rather than
    // on the command line, where other users of the host could read it.
    o.root_password = std::env::var("TERN_ROOT_PASSWORD").ok().filter(|p| !p.is_empty());
    if let Some(n) = a.node_id {
        // The front ends of every data node share the port: ids must not collide.
        o.first_connection_id = ((n as u32) << 24) | 1;
    }
    Ok(Some(o))
}

fn api(a: ApiArgs) -> Result<()> {
    let path = a.config.clone().or_else(|| std::env::var_os("RDRS_CONFIG_FILE").map(PathBuf::from));
    let cfg = match &path {
        Some(p) => tern_rest::config::RonDbConfig::load(p).map_err(|e| anyhow::anyhow!(e))?,
        None => tern_rest::config::RonDbConfig::default(),
    };
    let level = cfg.log.as_ref().and_then(|l| l.level.clone()).unwrap_or_else(|| "info".into()).to_lowercase();
    init_logging(&level);
    let opts = rest_options(&a, &cfg)?;
    install_signal_handlers();
    // The data node may still be starting: try for a while (inside the REST runtime).
    let (datanode, mgmd) = api_datanodes(&a, &cfg)?;
    tracing::info!(%datanode, "serving from data nodes");
    if !mgmd.is_empty() {
        std::thread::Builder::new().name("tern-api-watch".into()).spawn(move || watch_cluster(mgmd))?;
    }
    let mut copts = tern_client::ClientOptions::default();
    if let Some(t) = &a.transporter {
        copts.transporter = t.parse().map_err(|e: String| anyhow::anyhow!("--transporter: {e}"))?;
    }
    let connect = move || {
        let until = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            match tern_client::Client::connect_with(&datanode, copts.clone()) {
                Ok(c) => {
                    tracing::info!(transporter = c.transporter(), "connected to the data nodes");
                    return Ok(c);
                }
                Err(e) if std::time::Instant::now() < until && !stop_requested() => {
                    tracing::debug!("waiting for the data node: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(format!("cannot reach the data node at {datanode}: {e}")),
            }
        }
    };
    serve_front_ends(&a, &cfg, opts, Arc::new(connect), None)
}

/// The REST options: the config JSON's, then the TOML's `[rest]`, then the flags.
fn rest_options(a: &ApiArgs, cfg: &tern_rest::config::RonDbConfig) -> Result<tern_rest::config::RestOptions> {
    let mut opts = tern_rest::config::RestOptions::from_config(cfg).map_err(|e| anyhow::anyhow!(e))?;
    if let Some(path) = &a.toml {
        crate::config::ApiToml::load(path)?.apply_rest(&mut opts)?;
    }
    if a.rest_port.is_some() || a.rest_ip.is_some() {
        let ip = a.rest_ip.clone().unwrap_or_else(|| opts.listen.ip().to_string());
        let port = a.rest_port.unwrap_or(opts.listen.port());
        opts.listen = format!("{ip}:{port}").parse().with_context(|| format!("'{ip}:{port}' is not an address"))?;
    }
    opts.spin = Duration::from_micros(a.spin_us.min(10_000));
    Ok(opts)
}

/// Where front ends report that they listen (name, address), or why they stopped.
type FrontEndReports = std::sync::mpsc::SyncSender<Result<(&'static str, std::net::SocketAddr), String>>;

/// Runs one front end on a thread of its own; it reports on `tx` once it listens, or its error.
fn spawn_front_end(
    what: &'static str,
    thread: &str,
    tx: &FrontEndReports,
    run: impl FnOnce(&mut dyn FnMut(std::net::SocketAddr)) -> Result<(), String> + Send + 'static,
) -> Result<()> {
    let tx = tx.clone();
    std::thread::Builder::new().name(thread.into()).spawn(move || {
        let listening = tx.clone();
        if let Err(e) = run(&mut |addr| {
            let _ = listening.send(Ok((what, addr)));
        }) {
            let _ = tx.send(Err(e));
        }
    })?;
    Ok(())
}

/// A front end's way to a data node: a new client (the API server's over TCP, a colocated
/// front end's in-process).
type Connect = Arc<dyn Fn() -> Result<tern_client::Client, String> + Send + Sync>;

/// Runs the REST, Redis and MySQL front ends `a` asks for, on clients from `connect`, until a stop
/// is requested (Err: one could not start or stopped).
fn serve_front_ends(
    a: &ApiArgs,
    cfg: &tern_rest::config::RonDbConfig,
    opts: tern_rest::config::RestOptions,
    connect: Connect,
    on_worker: Option<tokio::runtime::Handle>,
) -> Result<()> {
    let redis = redis_options(cfg, a, &opts)?;
    // Durable acknowledgement per front end (`[rest] durable_commit`, `[redis] appendfsync`,
    // `[mysql] durable_commit`): every transaction of that front end's client is durable.
    let (rest_durable, redis_durable, mysql_durable) = match &a.toml {
        Some(path) => crate::config::ApiToml::load(path)?.durable_commits()?,
        None => (false, false, false),
    };
    let durable = |on: bool, connect: Connect| move || connect().inspect(|c| c.set_durable_commits(on));
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<(&str, std::net::SocketAddr), String>>(4);
    let mut waiting = 0;
    if !a.no_rest {
        waiting += 1;
        let c = durable(rest_durable, connect.clone());
        let rt = on_worker.clone();
        spawn_front_end("REST API", "tern-rest-main", &tx, move |ready| tern_rest::run_on(rt, c, opts, ready))?;
    }
    if let Some(mopts) = mysql_options(a)? {
        waiting += 1;
        let c = durable(mysql_durable, connect.clone());
        let rt = on_worker.clone();
        spawn_front_end("MySQL", "tern-mysql-main", &tx, move |ready| tern_mysql::run_on(rt, c, mopts, ready))?;
    }
    if let Some(ropts) = redis {
        waiting += 1;
        let c = durable(redis_durable, connect);
        spawn_front_end("Redis", "tern-redis-main", &tx, move |ready| tern_redis::run_on(on_worker, c, ropts, ready))?;
    }
    drop(tx);
    while waiting > 0 {
        match rx.recv() {
            Ok(Ok((what, addr))) => {
                tracing::info!(%addr, "{what} listening");
                waiting -= 1;
            }
            Ok(Err(e)) => bail!(e),
            Err(_) => bail!("the API server stopped"),
        }
    }
    while !stop_requested() {
        if let Ok(Err(e)) = rx.try_recv() {
            bail!(e);
        }
        std::thread::sleep(STOP_POLL);
    }
    tracing::info!("stopping");
    Ok(())
}

/// The data nodes and their states for the front ends' status page and metrics.
fn publish_cluster_nodes(st: &ClusterState) {
    let nodes = st
        .config
        .data_nodes
        .iter()
        .map(|d| tern_client::metrics::ClusterNode {
            id: d.id,
            addr: d.addr(),
            state: format!("{:?}", st.state_of(d.id)).to_lowercase(),
        })
        .collect();
    tern_client::metrics::set_cluster_nodes(nodes);
    tern_client::metrics::set_cluster_map(Arc::new(st.clone()));
}

/// The API server's watch of the cluster map: data nodes that are not serving (failed, or still
/// restarting) are handed to the client library (`tern_client::set_down_nodes`), which closes
/// its connections to them at once instead of waiting for a frozen node to answer.
fn watch_cluster(mgmd: Vec<String>) {
    let on_state = |st: &ClusterState| publish_cluster_nodes(st);
    tern_control::watch_cluster(
        mgmd,
        tern_client::env_cluster_secret().as_ref(),
        &tern_client::set_down_nodes,
        &on_state,
        &stop_requested,
    );
}

/// Where the API server finds its data nodes: `--datanode`; else the cluster of the management
/// nodes named by `--mgmd` or by the config JSON's `RonDB.Mgmds` (RonDB's way); else the local
/// default. Management nodes named on the command line must answer (within 60 s); ones from the
/// JSON only when there is no data node on the default port to fall back to. Also returns the
/// management nodes that answered (the API server watches the cluster map through them).
fn api_datanodes(a: &ApiArgs, cfg: &tern_rest::config::RonDbConfig) -> Result<(String, Vec<String>)> {
    const DEFAULT: &str = "127.0.0.1:11860";
    if let Some(d) = &a.datanode {
        // `tern up` names its data nodes and its management nodes.
        return Ok((d.clone(), a.mgmd.clone()));
    }
    let (mgmds, explicit) = if a.mgmd.is_empty() {
        let json = cfg.rondb.as_ref().and_then(|r| r.mgmds.clone()).unwrap_or_default();
        (json.iter().map(|m| format!("{}:{}", m.ip, m.port)).collect::<Vec<_>>(), false)
    } else {
        (a.mgmd.clone(), true)
    };
    if mgmds.is_empty() {
        return Ok((DEFAULT.into(), Vec::new()));
    }
    let mut client = admin_client(mgmds.clone());
    client.call_timeout = Duration::from_secs(3);
    let until = std::time::Instant::now() + Duration::from_secs(if explicit { 60 } else { 3 });
    loop {
        match client.get_state() {
            Ok(info) => {
                // Its own location domain's data nodes first: the client coordinates there.
                let mut specs: Vec<&tern_types::cluster::DataNodeSpec> = info.state.config.data_nodes.iter().collect();
                if let Some(mine) = a.location_domain {
                    specs.sort_by_key(|d| d.location_domain != mine);
                    if specs.first().is_none_or(|d| d.location_domain != mine) {
                        tracing::warn!("no data node is in this API server's location domain {mine}");
                    }
                }
                let nodes: Vec<String> = specs.iter().map(|d| d.addr()).collect();
                if nodes.is_empty() {
                    bail!("the management nodes at {} know no data nodes", mgmds.join(","));
                }
                return Ok((nodes.join(","), mgmds));
            }
            Err(e) if std::time::Instant::now() >= until || stop_requested() => {
                if explicit {
                    bail!("cannot reach the management nodes at {}: {e}", mgmds.join(","));
                }
                tracing::warn!(
                    "the management nodes of RonDB.Mgmds ({}) do not answer ({e}); using {DEFAULT}",
                    mgmds.join(",")
                );
                return Ok((DEFAULT.into(), Vec::new()));
            }
            Err(e) => {
                tracing::debug!("waiting for the management nodes: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// `tern status --mgmd`: the cluster as the management nodes see it, and each data node's own
/// report (epochs, rows, memory) where it answers.
fn cluster_status(mgmd: Vec<String>, json: bool) -> Result<()> {
    let mut c = admin_client(mgmd);
    let s = c.status().map_err(|e| anyhow::anyhow!("no management node answers: {e}"))?;
    let st = &s.state.state;
    let groups = st.groups();
    let det = s.state.detector.as_ref();
    // Primaries of a table created now (default partitions over the active node groups).
    let active = st.active_groups.max(1);
    let partitions = st.config.ldm_workers.max(1) as u32 * active * st.config.replicas.max(1) as u32;
    let primaries = |n: u16| (0..partitions).filter(|&p| st.primary(u32::MAX, active, p) == Some(n)).count();
    let nodes: Vec<serde_json::Value> = st
        .nodes
        .iter()
        .map(|(&id, ns)| {
            let spec = st.config.data_node(id);
            let addr = spec.map(|d| d.addr()).unwrap_or_default();
            let own = tern_client::Client::connect(&addr).ok().and_then(|cl| cl.status().ok());
            serde_json::json!({
                "node_id": id,
                "address": addr,
                "node_group": st.group_of_node(id),
                "state": ns.state.name(),
                "incarnation": ns.incarnation,
                "primary_partitions": primaries(id),
                "master": st.master() == Some(id),
                "rows": own.as_ref().map(|o| o.rows),
                "current_epoch": own.as_ref().map(|o| o.current_epoch),
                "durable_epoch": own.as_ref().map(|o| o.durable_epoch),
                "heartbeat_ms_ago": det.and_then(|d| d.heard_ms.iter().find(|h| h.0 == id).map(|h| h.1)),
            })
        })
        .collect();
    // The margins of failure detection: a node is declared failed after `failure_timeout_ms`
    // without a heartbeat; it stops serving when its lease runs out, before that.
    let cfg = &st.config;
    let detection = serde_json::json!({
        "failure_timeout_ms": cfg.failure_timeout_ms,
        "heartbeat_interval_ms": cfg.heartbeat_interval_ms,
        "lease_ms": det.map(|d| d.lease_ms),
        "margin_ms": det.map(|d| cfg.failure_timeout_ms.saturating_sub(d.lease_ms)),
        "detector_late_ms_max": det.map(|d| d.late_ms_max),
        "answered_by_leader": det.is_some(),
    });
    if json {
        let v = serde_json::json!({
            "mgmd": { "answered": s.mgmd, "leader": s.leader, "term": s.term,
                      "members": s.members.iter().map(|(id, a)| serde_json::json!({"id": id, "address": a})).collect::<Vec<_>>() },
            "replicas": st.config.replicas,
            "node_groups": groups,
            "map_version": st.version,
            "durable_epoch": st.durable_epoch,
            "cluster_down": st.cluster_down,
            "failure_detection": detection,
            "nodes": nodes,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let leader = s.leader.map_or("none".to_string(), |l| l.to_string());
    println!(
        "management nodes {:?}, leader {leader}, term {}",
        s.members.iter().map(|(id, a)| format!("{id}@{a}")).collect::<Vec<_>>(),
        s.term
    );
    println!(
        "{} node group(s) of {} replica(s); map version {}; durable epoch {}{}",
        groups.len(),
        st.config.replicas,
        st.version,
        st.durable_epoch,
        if st.cluster_down { "; CLUSTER DOWN (needs a system restart)" } else { "" }
    );
    match det {
        Some(d) => println!(
            "failure detection: declared failed after {} ms without a heartbeat (every {} ms); lease {} ms \
             (a node stops serving {} ms before it may be declared); the detector was late by at most {} ms",
            cfg.failure_timeout_ms,
            cfg.heartbeat_interval_ms,
            d.lease_ms,
            cfg.failure_timeout_ms.saturating_sub(d.lease_ms),
            d.late_ms_max
        ),
        None => println!(
            "failure detection: declared failed after {} ms without a heartbeat (every {} ms); ask the leader for leases",
            cfg.failure_timeout_ms, cfg.heartbeat_interval_ms
        ),
    }
    println!(
        "node  group  address              state     inc  primaries  master  rows        epoch (current/durable)  heartbeat"
    );
    for n in &nodes {
        let opt = |k: &str| n[k].as_u64().map_or("-".to_string(), |v| v.to_string());
        let heard = n["heartbeat_ms_ago"].as_u64().map_or("-".to_string(), |v| format!("{v} ms ago"));
        println!(
            "{:<5} {:<6} {:<20} {:<9} {:<4} {:<10} {:<7} {:<11} {:<24} {heard}",
            opt("node_id"),
            opt("node_group"),
            n["address"].as_str().unwrap_or(""),
            n["state"].as_str().unwrap_or(""),
            opt("incarnation"),
            opt("primary_partitions"),
            if n["master"].as_bool() == Some(true) { "yes" } else { "" },
            opt("rows"),
            format!("{}/{}", opt("current_epoch"), opt("durable_epoch")),
        );
    }
    Ok(())
}

fn status(addr: &str, json: bool) -> Result<()> {
    let c = tern_client::Client::connect(addr).with_context(|| format!("no data node answers at {addr}"))?;
    let s = c.status()?;
    if json {
        // Rows per table in the replicas this node holds, and rows its TTL purge deleted.
        let cat = c.catalog();
        let tables: Vec<serde_json::Value> = s
            .table_rows
            .iter()
            .filter_map(|&(id, rows)| {
                let t = cat.table(id)?;
                let purged = s.ttl_purged.iter().find(|(p, _)| *p == id).map_or(0, |(_, n)| *n);
                Some(serde_json::json!({"table": format!("{}.{}", t.database, t.name), "rows": rows, "ttl_purged_rows": purged}))
            })
            .collect();
        let v = serde_json::json!({
            "nodes": [{
                "node_id": s.node_id,
                "role": "datanode",
                "address": addr,
                "state": s.state,
                "memory_used": s.memory_used,
                "memory_total": s.memory_total,
                "partitions": s.partitions,
                "rows": s.rows,
                "ldm_workers": s.ldm_workers,
                "current_epoch": s.current_epoch,
                "durable_epoch": s.durable_epoch,
                "catalog_version": s.catalog_version,
                "backup_reads": s.backup_reads,
                "ttl_purged_rows": s.ttl_purged.iter().map(|(_, n)| n).sum::<u64>(),
                "tables": tables,
            }],
            "last_durable_epoch": s.durable_epoch,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "node  role      address              state    memory used / total        partitions  rows        durable epoch"
        );
        println!(
            "{:<5} {:<9} {:<20} {:<8} {:>10} / {:<14} {:<11} {:<11} {}",
            s.node_id,
            "datanode",
            addr,
            s.state,
            human(s.memory_used),
            human(s.memory_total),
            s.partitions,
            s.rows,
            s.durable_epoch
        );
    }
    Ok(())
}

fn human(b: u64) -> String {
    match b {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

/// A bench suite's rows: a table (with its header) or one JSON object per line.
fn print_rows(rows: Vec<tern_bench::BenchRow>, json: bool) {
    if !json {
        tern_bench::print_header();
    }
    for r in rows {
        if json {
            println!("{}", r.json());
        } else {
            tern_bench::print_row(&r);
        }
    }
}

fn bench(suite: BenchSuite) -> Result<()> {
    // The server processes whose CPU per operation the rows report (with their descendants).
    if let Some(v) = std::env::var_os("TERN_SERVER_PIDS") {
        let v = v.to_string_lossy().into_owned();
        let pids = v
            .split([',', ' '])
            .filter(|p| !p.is_empty())
            .map(|p| p.parse::<u32>().with_context(|| format!("TERN_SERVER_PIDS: {p:?} is not a process id")))
            .collect::<Result<Vec<u32>>>()?;
        tern_bench::set_server_pids(pids);
    }
    match suite {
        BenchSuite::Rest { addr, rest, rows, threads, batch, seconds, benchmarks, json, client_spin_us } => {
            for b in &benchmarks {
                if !matches!(b.as_str(), "BenchmarkSimple" | "BenchmarkManyColumns" | "BenchmarkBinary") {
                    bail!("unknown benchmark '{b}' (BenchmarkSimple, BenchmarkManyColumns, BenchmarkBinary)");
                }
            }
            let o = tern_bench::rest::RestOptions {
                datanode: addr,
                rest,
                rows,
                threads,
                batches: batch,
                seconds,
                benchmarks,
                client_spin: Duration::from_micros(client_spin_us.min(10_000)),
            };
            print_rows(tern_bench::rest::run(&o).map_err(|e| anyhow::anyhow!(e))?, json);
            Ok(())
        }
        BenchSuite::Redis { redis, keys, threads, batch, seconds, value_size, benchmarks, json } => {
            if threads.is_empty() || batch.is_empty() || threads.contains(&0) {
                bail!("--threads and --batch need at least one value, threads at least 1");
            }
            let o = tern_bench::redis::RedisOptions {
                redis,
                keys: keys.max(1),
                threads,
                batches: batch,
                seconds,
                value_size,
                benchmarks,
            };
            print_rows(tern_bench::redis::run(&o).map_err(|e| anyhow::anyhow!(e))?, json);
            Ok(())
        }
        BenchSuite::FeatureStore { addr, mysql, rest, rows, threads, batch, seconds, json } => {
            if threads.is_empty() || batch.is_empty() || threads.contains(&0) || batch.contains(&0) {
                bail!("--threads and --batch need at least one value, each at least 1");
            }
            if batch.iter().any(|&b| b > 10_000) {
                bail!("--batch is at most 10000 (the API's limit per request)");
            }
            let o = tern_bench::feature_store::FeatureStoreOptions {
                datanode: addr,
                mysql,
                rest,
                rows: rows.max(1),
                threads,
                batches: batch,
                seconds,
            };
            print_rows(tern_bench::feature_store::run(&o).map_err(|e| anyhow::anyhow!(e))?, json);
            Ok(())
        }
        BenchSuite::Sql { addr, rows, threads, batch, seconds, benchmarks, json } => {
            if threads.is_empty() || batch.is_empty() || threads.contains(&0) {
                bail!("--threads and --batch need at least one value, threads at least 1");
            }
            let o =
                tern_bench::sql::SqlOptions { addr, rows: rows.max(1), threads, batches: batch, seconds, benchmarks };
            print_rows(tern_bench::sql::run(&o).map_err(|e| anyhow::anyhow!(e))?, json);
            Ok(())
        }
        BenchSuite::Tpch { addr, scale, dir, against, queries, timeout, no_load } => {
            if scale.is_nan() || scale <= 0.0 {
                bail!("--scale must be positive");
            }
            let queries = parse_query_list(&queries)?;
            let o = tern_bench::tpch::TpchOptions {
                addr,
                scale,
                dir,
                against,
                queries,
                timeout: std::time::Duration::from_secs(timeout.max(1)),
                no_load,
            };
            let r = tern_bench::tpch::run(&o).map_err(|e| anyhow::anyhow!(e))?;
            tern_bench::tpch::print(&r);
            Ok(())
        }
        BenchSuite::Native { addr, threads, batch, rows, seconds, phases, json, memory, table, read_backup, mgmd } => {
            if threads.is_empty() || batch.is_empty() {
                bail!("--threads and --batch need at least one value");
            }
            if !mgmd.is_empty() {
                std::thread::spawn(move || watch_cluster(mgmd));
                let until = std::time::Instant::now() + Duration::from_secs(10);
                while tern_client::metrics::cluster_map().is_none() {
                    if std::time::Instant::now() > until {
                        bail!("the management nodes do not answer");
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            if !json {
                tern_bench::print_header();
            }
            if memory {
                memory_report(&addr, rows, json)?;
            }
            for &t in &threads {
                for &b in &batch {
                    let o = tern_bench::NativeOptions {
                        addr: addr.clone(),
                        threads: t,
                        batch: b,
                        rows,
                        read_seconds: seconds,
                        phases: phases.clone(),
                        table: table.clone(),
                        read_backup,
                    };
                    for r in tern_bench::run_native(&o).map_err(|e| anyhow::anyhow!(e))? {
                        if json {
                            println!("{}", r.json());
                        } else {
                            tern_bench::print_row(&r);
                        }
                    }
                }
            }
            Ok(())
        }
    }
}

/// Loads `rows` rows into an empty flex table and reports the data node's memory per row: the
/// growth of its resident set 2 s after the load (what the OS says the rows cost, indexes and
/// allocator slack included) and the growth of accounted data memory.
fn memory_report(addr: &str, rows: u64, json: bool) -> Result<()> {
    let c = tern_client::Client::connect(addr)?;
    let t = tern_bench::ensure_flex(&c, false).map_err(|e| anyhow::anyhow!(e))?;
    let s0 = c.status()?;
    if s0.rows > 0 {
        bail!("--memory needs an empty data node (found {} rows); start one with a fresh --data-dir", s0.rows);
    }
    let rss0 =
        tern_bench::process_rss_bytes(s0.pid).context("cannot read the data node's memory (is it on this machine?)")?;
    let o = tern_bench::NativeOptions {
        addr: addr.into(),
        threads: 2,
        batch: 256,
        rows,
        read_seconds: 0.0,
        phases: vec!["insert".into()],
        table: None,
        read_backup: false,
    };
    tern_bench::run_native(&o).map_err(|e| anyhow::anyhow!(e))?;
    // Let the node settle: freed load-time buffers go back to the OS within a couple of seconds.
    std::thread::sleep(Duration::from_secs(2));
    let s1 = c.status()?;
    let rss1 = tern_bench::process_rss_bytes(s1.pid).unwrap_or(rss0);
    let n = s1.rows.max(1) as f64;
    let rss_per_row = (rss1.saturating_sub(rss0)) as f64 / n;
    let acc_per_row = (s1.memory_used - s0.memory_used) as f64 / n;
    let _ = t;
    if json {
        println!(
            "{{\"benchmark\":\"native-memory\",\"rows\":{},\"rss_bytes_per_row\":{rss_per_row:.1},\"accounted_bytes_per_row\":{acc_per_row:.1}}}",
            s1.rows
        );
    } else {
        println!(
            "memory | {} rows | RSS growth {rss_per_row:.1} bytes/row | accounted {acc_per_row:.1} bytes/row",
            s1.rows
        );
    }
    Ok(())
}
