//! `tern up`: a local cluster as child processes, supervised like NDB's angel process: a data
//! node that dies is started again and recovers from its data directory; an API server that
//! dies is started again too. Restarts back off (0.1 s doubling to 30 s, reset after a minute of
//! service) and never end, except for a data node that cannot start (`EXIT_STARTUP`). Runs in the foreground,
//! prints one `ready:` line when every endpoint accepts connections, and stops everything on
//! SIGINT/SIGTERM.

use crate::config::DATANODE_PORT_DEFAULT;
use anyhow::{Context, Result, bail};
use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Exit code of a process that could not start (bad configuration, busy port, locked or foreign
/// data directory). A data node that exits so is not restarted: it needs the operator.
pub const EXIT_STARTUP: i32 = 3;
/// First pause before a restart; it doubles after each death up to `BACKOFF_MAX`.
/// root's first password for the front ends `tern up` starts (in their environment, not on their
/// command line).
static ROOT_PASSWORD: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The password in `<dir>/root-password`, made (random, readable by the owner only) when missing.
fn generated_root_password(dir: &Path) -> Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join("root-password");
    if let Ok(p) = std::fs::read_to_string(&path) {
        return Ok(p.trim().to_string());
    }
    let mut raw = [0u8; 18];
    tern_client::os_random(&mut raw);
    const CHARS: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";
    let p: String = raw.iter().map(|&b| CHARS[b as usize % CHARS.len()] as char).collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    writeln!(f, "{p}")?;
    println!("MySQL root's password was generated and written to {}", path.display());
    Ok(p)
}

const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A child serving this long counts as healthy again: its next death restarts it at once.
const HEALTHY_AFTER: Duration = Duration::from_secs(60);
/// How long a (re)started child may take to serve before it is killed and started again.
const START_TIMEOUT: Duration = Duration::from_secs(120);
#[derive(clap::Args)]
pub struct UpArgs {
    /// Where data lives; it persists across runs.
    #[arg(long, default_value = "./tern-data")]
    pub data_dir: PathBuf,
    /// Data nodes to start (node groups of `--replicas` each).
    #[arg(long, default_value_t = 2)]
    pub datanodes: u16,
    /// Replicas of each partition (1-3). `--datanodes 1 --replicas 1` runs the lightest setup:
    /// one data node without management node.
    #[arg(long, default_value_t = 2)]
    pub replicas: u16,
    /// Management nodes (1 or 3), on consecutive ports from `--mgmd-port`.
    #[arg(long, default_value_t = 1)]
    pub mgmds: u16,
    /// A data node that has not renewed its lease for this long is declared failed (the
    /// client-visible stall after a data node dies).
    #[arg(long, default_value_t = 1500)]
    pub failure_timeout_ms: u64,
    /// REST API port (RonDB REST API 0.1.0, served by the `tern api` process that `up` starts).
    #[arg(long, default_value_t = 4406)]
    pub rest_port: u16,
    /// Redis protocol port (the Redis front end, served by the `tern api` process).
    #[arg(long, default_value_t = 6379)]
    pub redis_port: u16,
    /// MySQL protocol port (the SQL front end, served by the `tern api` process).
    #[arg(long, default_value_t = 3306)]
    pub mysql_port: u16,
    /// Worker threads of the MySQL front end (default: the number of cores).
    #[arg(long)]
    pub mysql_threads: Option<usize>,
    /// Management node port (the first; more mgmds use the next ports).
    #[arg(long, default_value_t = 1186)]
    pub mgmd_port: u16,
    /// Port clients use to reach the data node (the first; more data nodes use the next ports).
    #[arg(long, default_value_t = DATANODE_PORT_DEFAULT)]
    pub datanode_port: u16,
    /// Data memory of the data node ("auto", bytes, or e.g. "2G").
    #[arg(long, default_value = "auto")]
    pub data_memory: String,
    /// ldm worker threads ("auto" or a number).
    #[arg(long, default_value = "auto")]
    pub ldm_workers: String,
    /// Tern's TOML for the API server's front ends (`tern api --toml`; ports stay the flags').
    #[arg(long)]
    pub api_toml: Option<PathBuf>,
    /// MySQL root's password, set at the first start (when root has none yet). Without it, a
    /// MySQL port beyond loopback (`[mysql] listen` in --api-toml) gets a generated one, written
    /// to `<data-dir>/root-password`.
    #[arg(long)]
    pub root_password: Option<String>,
    /// Serve REST, Redis and MySQL from a separate API server process (`tern api`, reaching the
    /// data nodes over shared memory or TCP). By default they run inside every data node's
    /// process, with no process between a request and its rows: in a cluster every data node
    /// serves the same three ports (SO_REUSEPORT), the kernel spreads new connections over them,
    /// and a data node that dies drops only its own connections.
    #[arg(long)]
    pub api_process: bool,
    /// How the API server process and the data nodes reach the data nodes: tcp, shm (shared
    /// memory) or auto (default: shared memory, all processes being on this host).
    #[arg(long)]
    pub transporter: Option<String>,
    /// With the front ends inside the data nodes: "worker" (default: the Redis, REST and MySQL
    /// front ends run on each data node's worker 0 thread, no thread between a request and its
    /// row) or "threads" (every front end on threads of its own).
    #[arg(long)]
    pub front_ends: Option<String>,
    /// Require the cluster secret in this file on every data node and management node port
    /// (made, random and readable by the owner only, when missing). Tools that reach the cluster
    /// (`tern status`, `tern apikey`, native clients) need `TERN_CLUSTER_SECRET_FILE` set to it.
    #[arg(long)]
    pub cluster_secret_file: Option<PathBuf>,
    /// Serve each data node's Prometheus metrics at `/metrics` on this port and the next ones
    /// (data node N on PORT + N - 1; default: off). The API server's are on the REST port.
    #[arg(long)]
    pub metrics_port: Option<u16>,
}

/// The `metrics_listen` line of data node `id`'s TOML (empty without --metrics-port).
fn metrics_line(a: &UpArgs, id: u16) -> String {
    match a.metrics_port {
        Some(p) => format!("metrics_listen = \"127.0.0.1:{}\"\n", p.saturating_add(id - 1)),
        None => String::new(),
    }
}

/// The cluster secret's file, made (random, mode 600) when missing; returns its absolute path.
fn cluster_secret_file(path: &Path) -> Result<PathBuf> {
    use std::os::unix::fs::OpenOptionsExt;
    if !path.exists() {
        let mut raw = [0u8; 32];
        tern_client::os_random(&mut raw);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .with_context(|| format!("cannot write {}", path.display()))?;
        writeln!(f, "{}", tern_types::digest::hex(&raw))?;
        eprintln!("tern: a cluster secret was generated and written to {}", path.display());
    }
    let path = path.canonicalize()?;
    tern_client::secret::read_secret_file(&path).map_err(|e| anyhow::anyhow!(e))?;
    Ok(path)
}

fn write_datanode_config(a: &UpArgs, dir: &Path) -> Result<PathBuf> {
    let node_dir = dir.join("node-1");
    let memory = if a.data_memory == "auto" { "\"auto\"".to_string() } else { format!("\"{}\"", a.data_memory) };
    crate::config::parse_size(if a.data_memory == "auto" { "1" } else { &a.data_memory }).context("--data-memory")?;
    let workers = if a.ldm_workers == "auto" {
        "\"auto\"".to_string()
    } else {
        let n: u16 = a.ldm_workers.parse().context("--ldm-workers must be \"auto\" or a number")?;
        n.to_string()
    };
    let mut text = format!(
        "# Written by `tern up` on every start; edit the flags instead.\nnode_id = 1\ndata_dir = {:?}\nlisten = \"127.0.0.1:{}\"\ndata_memory = {memory}\nldm_workers = {workers}\n",
        node_dir.display().to_string(),
        a.datanode_port
    );
    if let Some(f) = &a.front_ends {
        crate::config::front_ends_on_worker(Some(f)).context("--front-ends")?;
        text.push_str(&format!("front_ends = {f:?}\n"));
    }
    text.push_str(&metrics_line(a, 1));
    let path = dir.join("datanode-1.toml");
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The cluster file of a local cluster: mgmds and data nodes on consecutive ports.
fn write_cluster_config(a: &UpArgs, dir: &Path, ldm_workers: u16) -> Result<PathBuf> {
    let mut text = format!(
        "# Written by `tern up` on every start; edit the flags instead.\nreplicas = {}\nldm_workers = {ldm_workers}\nepoch_interval_ms = 100\nheartbeat_interval_ms = {}\nfailure_timeout_ms = {}\n",
        a.replicas,
        (a.failure_timeout_ms / 6).clamp(10, 1000),
        a.failure_timeout_ms
    );
    for i in 0..a.mgmds {
        text.push_str(&format!("\n[[mgmd]]\nid = {}\nhost = \"127.0.0.1\"\nport = {}\n", 145 + i, a.mgmd_port + i));
    }
    for i in 0..a.datanodes {
        text.push_str(&format!(
            "\n[[datanode]]\nid = {}\nhost = \"127.0.0.1\"\nport = {}\n",
            i + 1,
            a.datanode_port + i
        ));
    }
    tern_control::parse_cluster_config(&text).context("the cluster described by the flags")?;
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// A data node's own settings in a cluster (its memory and data directory; the rest comes from
/// the cluster file).
fn write_member_config(a: &UpArgs, dir: &Path, id: u16, memory: u64) -> Result<PathBuf> {
    let mut text = format!(
        "# Written by `tern up` on every start; edit the flags instead.\nnode_id = {id}\ndata_dir = {:?}\ndata_memory = {memory}\n{}",
        dir.join(format!("node-{id}")).display().to_string(),
        metrics_line(a, id)
    );
    if let Some(f) = &a.front_ends {
        crate::config::front_ends_on_worker(Some(f)).context("--front-ends")?;
        text.push_str(&format!("front_ends = {f:?}\n"));
    }
    let path = dir.join(format!("datanode-{id}.toml"));
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

fn mgmd_ready(addr: &str) -> bool {
    let mut c = crate::admin_client(vec![addr.to_string()]);
    c.connect_timeout = Duration::from_millis(500);
    c.status().is_ok_and(|s| s.leader.is_some())
}

fn spawn_tern(args: &[String]) -> Result<Child> {
    let exe = std::env::current_exe().context("cannot find the tern executable")?;
    let mut cmd = Command::new(exe);
    cmd.args(args).stdin(Stdio::null());
    if let Some(p) = ROOT_PASSWORD.get() {
        cmd.env("TERN_ROOT_PASSWORD", p);
    }
    // SAFETY: prctl is async-signal-safe; the child then dies with its parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let child = cmd.spawn().context("cannot start a tern process")?;
    crate::register_child(child.id());
    Ok(child)
}

/// Where a supervised child is in its life.
#[derive(Debug, Clone, Copy)]
enum Life {
    /// Started at `since`; not serving yet.
    Starting { since: Instant },
    /// Serving since `since`.
    Serving { since: Instant },
    /// Dead; to be started again at `at`.
    Waiting { at: Instant },
}

/// One supervised child process (NDB's angel): how to start it, how to tell it is serving, and
/// its restarts. The supervisor never blocks on one child, so a crash-looping API server never
/// stops the data node from being watched (or a healthy one from serving).
struct Supervised {
    name: String,
    args: Vec<String>,
    child: Option<Child>,
    ready: fn(&str) -> bool,
    addr: String,
    life: Life,
    /// Pause before the next restart.
    backoff: Duration,
    /// Whether an `EXIT_STARTUP` after the first start ends `tern up` (the data node: its data
    /// directory or configuration needs the operator) or is retried like a crash (the API
    /// server: a port taken for a while, a data node restarting).
    startup_error_is_fatal: bool,
}

impl Supervised {
    /// Starts the child and waits until it serves: a first start that fails is an error.
    fn start(
        name: String,
        args: Vec<String>,
        addr: String,
        ready: fn(&str) -> bool,
        startup_error_is_fatal: bool,
    ) -> Result<Supervised> {
        let s = Supervised::spawn(name, args, addr, ready, startup_error_is_fatal)?;
        let mut all = vec![s];
        wait_serving(&mut all)?;
        Ok(all.pop().expect("one"))
    }

    /// Starts the child without waiting (data nodes of a system start wait for each other).
    fn spawn(
        name: String,
        args: Vec<String>,
        addr: String,
        ready: fn(&str) -> bool,
        startup_error_is_fatal: bool,
    ) -> Result<Supervised> {
        let child = spawn_tern(&args)?;
        Ok(Supervised {
            name,
            args,
            child: Some(child),
            ready,
            addr,
            life: Life::Starting { since: Instant::now() },
            backoff: BACKOFF_MIN,
            startup_error_is_fatal,
        })
    }

    /// One look at the child: notices a death, restarts after the back-off, tells when it
    /// serves again. Err only when it must not be restarted.
    fn supervise(&mut self) -> Result<()> {
        let now = Instant::now();
        if let Life::Waiting { at } = self.life {
            if now >= at {
                match spawn_tern(&self.args) {
                    Ok(c) => {
                        self.child = Some(c);
                        self.life = Life::Starting { since: now };
                    }
                    Err(e) => self.died(&format!("could not be started: {e:#}"), false)?,
                }
            }
            return Ok(());
        }
        let exited = match &mut self.child {
            Some(c) => c.try_wait()?,
            None => None,
        };
        if let Some(st) = exited {
            self.child = None;
            if crate::stop_requested() {
                return Ok(());
            }
            if st.success() {
                // An orderly stop it was asked for (`tern stop --node N`, a rolling restart):
                // started again at once (it waits there for `tern start --node N`).
                self.backoff = BACKOFF_MIN;
            }
            return self.died(&format!("stopped ({})", describe(st)), st.code() == Some(EXIT_STARTUP));
        }
        match self.life {
            Life::Starting { .. } if (self.ready)(&self.addr) => {
                eprintln!("tern up: the {} is serving again", self.name);
                self.life = Life::Serving { since: now };
            }
            Life::Starting { since } if now.duration_since(since) > START_TIMEOUT => {
                self.stop();
                self.died(&format!("did not serve within {} s of its restart", START_TIMEOUT.as_secs()), false)?;
            }
            Life::Serving { since } if now.duration_since(since) > HEALTHY_AFTER => self.backoff = BACKOFF_MIN,
            _ => {}
        }
        Ok(())
    }

    /// The child is gone for `why`: schedule its restart after the back-off (which doubles), or
    /// give up when it cannot start and that needs the operator.
    fn died(&mut self, why: &str, startup_error: bool) -> Result<()> {
        if startup_error && self.startup_error_is_fatal {
            bail!("the {} cannot start ({why}); see its message above", self.name);
        }
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        eprintln!("tern up: the {} {why}; restarting it in {:.1} s", self.name, wait.as_secs_f64());
        self.life = Life::Waiting { at: Instant::now() + wait };
        Ok(())
    }

    fn stop(&mut self) {
        stop_all(std::slice::from_mut(self), Duration::from_secs(10));
    }
}

/// Waits until every child serves. A child that dies while starting is started again after its
/// back-off, like a crash later on (a data node may lose a start-up race); only an `EXIT_STARTUP`
/// of a child whose start-up errors are fatal (a configuration or data-directory error it names)
/// ends the wait with an error, and so does a stop request. On error every child is stopped.
fn wait_serving(children: &mut [Supervised]) -> Result<()> {
    loop {
        if crate::stop_requested() {
            stop_all(children, Duration::from_secs(10));
            bail!("interrupted");
        }
        for i in 0..children.len() {
            if let Err(e) = children[i].supervise() {
                stop_all(children, Duration::from_secs(10));
                return Err(e);
            }
        }
        if children.iter().all(|c| matches!(c.life, Life::Serving { .. })) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops children in order: SIGTERM to all of them at once, then waits up to `bound` for them to
/// exit (each makes its last epochs durable and leaves the cluster), then SIGKILL for the rest.
fn stop_all(children: &mut [Supervised], bound: Duration) {
    for c in children.iter_mut() {
        if let Some(ch) = &c.child {
            // SAFETY: plain kill(2) on our own child.
            unsafe {
                libc::kill(ch.id() as i32, libc::SIGTERM);
            }
        }
    }
    let until = Instant::now() + bound;
    loop {
        let mut running = 0;
        for c in children.iter_mut() {
            if let Some(ch) = &mut c.child {
                match ch.try_wait() {
                    Ok(Some(_)) | Err(_) => {
                        crate::unregister_child(ch.id());
                        c.child = None;
                    }
                    Ok(None) => running += 1,
                }
            }
        }
        if running == 0 {
            return;
        }
        if Instant::now() >= until {
            for c in children.iter_mut() {
                if let Some(ch) = &mut c.child {
                    eprintln!("tern up: the {} did not stop within {} s; killing it", c.name, bound.as_secs());
                    let _ = ch.kill();
                    let _ = ch.wait();
                    crate::unregister_child(ch.id());
                }
                c.child = None;
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn datanode_ready(addr: &str) -> bool {
    tern_client::Client::connect(addr).and_then(|c| c.status()).map(|s| s.state == "started").unwrap_or(false)
}

/// The REST API answers `GET /0.1.0/ping`.
pub(crate) fn rest_ready(addr: &str) -> bool {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect(addr) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /0.1.0/ping HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(n) if n >= 12 && &buf[9..12] == b"200")
}

/// The Redis front end answers PING.
fn redis_ready(addr: &str) -> bool {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect(addr) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 7];
    matches!(s.read(&mut buf), Ok(7) if &buf == b"+PONG\r\n")
}

/// The MySQL front end sends its handshake.
fn mysql_ready(addr: &str) -> bool {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect(addr) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut buf = [0u8; 5];
    matches!(s.read(&mut buf), Ok(5) if buf[4] == 10)
}

/// The API server is ready when its REST, Redis and MySQL front ends answer ("rest redis mysql").
/// A data node with the front ends inside: "datanode rest redis mysql".
fn colocated_ready(addrs: &str) -> bool {
    let Some((datanode, api)) = addrs.split_once(' ') else { return false };
    datanode_ready(datanode) && api_ready(api)
}

fn api_ready(addrs: &str) -> bool {
    let mut it = addrs.split(' ');
    let (Some(rest), Some(redis), Some(mysql)) = (it.next(), it.next(), it.next()) else { return false };
    rest_ready(rest) && redis_ready(redis) && mysql_ready(mysql)
}

fn describe(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown status".into(),
    }
}

fn port_free(port: u16, what: &str, flag: &str) -> Result<()> {
    if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
        bail!("port {port} is already in use ({what}); pick another with {flag}");
    }
    Ok(())
}

/// The front doors' port flags, as `tern datanode` and `tern api` take them.
fn front_port_args(a: &UpArgs) -> Vec<String> {
    vec![
        "--rest-port".into(),
        a.rest_port.to_string(),
        "--redis-port".into(),
        a.redis_port.to_string(),
        "--mysql-port".into(),
        a.mysql_port.to_string(),
    ]
}

/// The flags of a data node that serves the front doors itself.
fn colocated_args(a: &UpArgs, api_toml: &Option<String>) -> Vec<String> {
    let mut args = front_port_args(a);
    if let Some(t) = a.mysql_threads {
        args.extend(["--mysql-threads".into(), t.to_string()]);
    }
    if let Some(t) = api_toml {
        args.extend(["--api-toml".into(), t.clone()]);
    }
    args
}

/// "rest redis mysql": the front doors' addresses.
fn front_addrs(a: &UpArgs) -> String {
    format!("127.0.0.1:{} 127.0.0.1:{} 127.0.0.1:{}", a.rest_port, a.redis_port, a.mysql_port)
}

/// Starts the management nodes and the data nodes of a cluster; returns them (serving) and the
/// data node addresses for clients.
fn start_cluster(a: &UpArgs, dir: &Path, api_toml: &Option<String>) -> Result<(Vec<Supervised>, String)> {
    if !(1..=3).contains(&a.replicas) || a.datanodes == 0 || !a.datanodes.is_multiple_of(a.replicas) {
        bail!("--datanodes must be a multiple of --replicas (1-3): node groups of {} data nodes", a.replicas);
    }
    if a.mgmds.is_multiple_of(2) || a.mgmds > 7 {
        bail!("--mgmds must be 1, 3, 5 or 7 (a Raft majority)");
    }
    let cores = crate::config::cores() as u16;
    let ldm = if a.ldm_workers == "auto" {
        (cores / a.datanodes).clamp(1, 16)
    } else {
        a.ldm_workers.parse().context("--ldm-workers must be \"auto\" or a number")?
    };
    let memory = if a.data_memory == "auto" {
        (crate::config::auto_data_memory() / a.datanodes as u64).max(256 << 20)
    } else {
        crate::config::parse_size(&a.data_memory).context("--data-memory")?
    };
    for i in 0..a.mgmds {
        port_free(a.mgmd_port + i, "management node", "--mgmd-port")?;
    }
    for i in 0..a.datanodes {
        port_free(a.datanode_port + i, "data node", "--datanode-port")?;
    }
    let cluster = write_cluster_config(a, dir, ldm)?;
    let mgmd_addrs: Vec<String> = (0..a.mgmds).map(|i| format!("127.0.0.1:{}", a.mgmd_port + i)).collect();
    let mut children = Vec::new();
    for i in 0..a.mgmds {
        let args = vec![
            "mgmd".into(),
            "--config".into(),
            cluster.display().to_string(),
            "--node-id".into(),
            (145 + i).to_string(),
            "--data-dir".into(),
            dir.join(format!("mgmd-{}", 145 + i)).display().to_string(),
        ];
        children.push(Supervised::spawn(
            format!("management node {}", 145 + i),
            args,
            mgmd_addrs[i as usize].clone(),
            mgmd_ready,
            true,
        )?);
    }
    wait_serving(&mut children)?;
    let mut addrs = Vec::new();
    let first = children.len();
    for id in 1..=a.datanodes {
        let conf = write_member_config(a, dir, id, memory)?;
        let addr = format!("127.0.0.1:{}", a.datanode_port + id - 1);
        let mut args = vec![
            "datanode".into(),
            "--config".into(),
            conf.display().to_string(),
            "--mgmd".into(),
            mgmd_addrs.join(","),
            "--node-id".into(),
            id.to_string(),
        ];
        if let Some(t) = &a.transporter {
            // Between the data nodes too (they share this host).
            args.extend(["--transporter".into(), t.clone()]);
        }
        let (ready, ready_addr): (fn(&str) -> bool, String) = if a.api_process {
            (datanode_ready, addr.clone())
        } else {
            // Every data node serves the front doors, on the same ports.
            args.extend(colocated_args(a, api_toml));
            args.push("--share-ports".into());
            (colocated_ready, format!("{addr} {}", front_addrs(a)))
        };
        children.push(Supervised::spawn(format!("data node {id}"), args, ready_addr, ready, true)?);
        addrs.push(addr);
    }
    if let Err(e) = wait_serving(&mut children[first..]) {
        stop_all(&mut children[..first], Duration::from_secs(10));
        return Err(e);
    }
    Ok((children, addrs.join(",")))
}

pub fn run(a: UpArgs) -> Result<()> {
    if let Some(f) = &a.cluster_secret_file {
        let path = cluster_secret_file(f)?;
        // SAFETY: no thread has started yet in this process. Every process `tern up` starts
        // inherits the variable, and this one's own clients read it.
        unsafe { std::env::set_var(tern_client::secret::SECRET_FILE_ENV, &path) };
    }
    crate::install_signal_handlers();
    std::fs::create_dir_all(&a.data_dir).with_context(|| format!("cannot create {}", a.data_dir.display()))?;
    let dir = a.data_dir.canonicalize()?;
    port_free(a.rest_port, "REST API", "--rest-port")?;
    port_free(a.redis_port, "Redis", "--redis-port")?;
    port_free(a.mysql_port, "MySQL", "--mysql-port")?;
    let rest = format!("127.0.0.1:{}", a.rest_port);
    let redis = format!("127.0.0.1:{}", a.redis_port);
    let mysql = format!("127.0.0.1:{}", a.mysql_port);
    let api_toml = match &a.api_toml {
        Some(t) => {
            let t = t.canonicalize().with_context(|| format!("--api-toml {}", t.display()))?;
            crate::config::ApiToml::load(&t)?;
            Some(t.display().to_string())
        }
        None => None,
    };
    let mysql_public = match &api_toml {
        Some(t) => crate::config::ApiToml::load(Path::new(t))?
            .mysql
            .and_then(|m| m.listen)
            .and_then(|l| l.parse::<std::net::SocketAddr>().ok())
            .is_some_and(|l| !l.ip().is_loopback()),
        None => false,
    };
    let root_password = match &a.root_password {
        Some(p) => Some(p.clone()),
        None if mysql_public => Some(generated_root_password(&dir)?),
        None => None,
    };
    if let Some(p) = root_password {
        let _ = ROOT_PASSWORD.set(p);
    }
    let single = a.datanodes == 1 && a.replicas == 1;
    let (mut children, addr) = if single {
        // The lightest setup: one data node, no management node; the front ends run inside it
        // (in-process transport) unless --api-process.
        port_free(a.datanode_port, "data node", "--datanode-port")?;
        let addr = format!("127.0.0.1:{}", a.datanode_port);
        let config = write_datanode_config(&a, &dir)?;
        let mut datanode_args = vec!["datanode".into(), "--config".into(), config.display().to_string()];
        let (ready, ready_addr): (fn(&str) -> bool, String) = if a.api_process {
            (datanode_ready, addr.clone())
        } else {
            datanode_args.extend(colocated_args(&a, &api_toml));
            (colocated_ready, format!("{addr} {}", front_addrs(&a)))
        };
        (vec![Supervised::start("data node 1".into(), datanode_args, ready_addr, ready, true)?], addr)
    } else {
        start_cluster(&a, &dir, &api_toml)?
    };
    let mut api_args: Vec<String> =
        vec!["api".into(), "--datanode".into(), addr.clone(), "--rest-ip".into(), "127.0.0.1".into()];
    api_args.extend(front_port_args(&a));
    if !(a.datanodes == 1 && a.replicas == 1) {
        // The API server watches the cluster map: it leaves a failed (or frozen) data node as
        // soon as the management nodes declare it, not when its own requests time out.
        let mgmds: Vec<String> = (0..a.mgmds).map(|i| format!("127.0.0.1:{}", a.mgmd_port + i)).collect();
        api_args.extend(["--mgmd".into(), mgmds.join(",")]);
    }
    if let Some(t) = a.mysql_threads {
        api_args.extend(["--mysql-threads".into(), t.to_string()]);
    }
    if let Some(t) = &a.transporter {
        api_args.extend(["--transporter".into(), t.clone()]);
    }
    if let Some(t) = &api_toml {
        api_args.extend(["--toml".into(), t.clone()]);
    }
    if a.api_process {
        match Supervised::start("API server".into(), api_args, format!("{rest} {redis} {mysql}"), api_ready, false) {
            Ok(s) => children.push(s),
            Err(e) => {
                for c in &mut children {
                    c.stop();
                }
                return Err(e);
            }
        }
    }
    let mgmd = if a.datanodes == 1 && a.replicas == 1 {
        String::new()
    } else {
        format!(
            " mgmd={}",
            (0..a.mgmds).map(|i| format!("127.0.0.1:{}", a.mgmd_port + i)).collect::<Vec<_>>().join(",")
        )
    };
    let ready =
        format!("ready: datanode={addr}{mgmd} rest={rest} redis={redis} mysql={mysql} data-dir={}", dir.display());
    let pid_file = PidFile::write(&dir, &ready)?;
    println!("{ready}");
    std::io::stdout().flush()?;
    let r = loop {
        if crate::stop_requested() {
            break Ok(());
        }
        if let Some(e) = (0..children.len()).find_map(|i| children[i].supervise().err()) {
            break Err(e);
        }
        std::thread::sleep(crate::STOP_POLL);
    };
    let t0 = Instant::now();
    eprintln!("tern up: stopping");
    stop_in_order(&mut children);
    eprintln!("tern up: stopped in {:.1} s", t0.elapsed().as_secs_f64());
    drop(pid_file);
    r
}

/// Front ends first (they stop accepting and end their requests), then every data node at once
/// (each makes its last epochs durable and leaves the cluster in order), the management nodes
/// last (the data nodes' leaves need them).
fn stop_in_order(children: &mut [Supervised]) {
    let role = |c: &Supervised| {
        if c.name.starts_with("management") {
            2
        } else if c.name.starts_with("data node") {
            1
        } else {
            0
        }
    };
    children.sort_by_key(role);
    let apis = children.iter().filter(|c| role(c) == 0).count();
    let datanodes = children.iter().filter(|c| role(c) == 1).count();
    let (front, rest) = children.split_at_mut(apis);
    let (data, mgmds) = rest.split_at_mut(datanodes);
    stop_all(front, Duration::from_secs(5));
    stop_all(data, Duration::from_secs(15));
    stop_all(mgmds, Duration::from_secs(5));
}

/// `<data-dir>/tern-up.pid` while `tern up` serves: its process id, then its ready line (the
/// addresses); `tern stop` and `tern restart` find it there.
struct PidFile(PathBuf);

const PID_FILE: &str = "tern-up.pid";

impl PidFile {
    fn write(dir: &Path, ready: &str) -> Result<PidFile> {
        let path = dir.join(PID_FILE);
        std::fs::write(&path, format!("{}\n{ready}\n", std::process::id()))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(PidFile(path))
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The state letter and parent pid of a process, from `/proc/<pid>/stat` (`None`: no such
/// process).
pub(crate) fn proc_stat(pid: u32) -> Option<(char, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the parenthesised command name: state, parent pid, ...
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    let state = rest.next()?.chars().next()?;
    Some((state, rest.next()?.parse().ok()?))
}

/// Whether `pid` runs (exited and unreaped by its parent counts as gone).
fn running(pid: u32) -> bool {
    proc_stat(pid).is_some_and(|(state, _)| state != 'Z')
}

/// The `tern up` serving `dir`: its pid and ready line, from its pid file. A file left by one that
/// died, or whose pid now belongs to another program, is an error (and the file goes).
pub(crate) fn running_up(dir: &Path) -> Result<(u32, String)> {
    let path = dir.join(PID_FILE);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("no `tern up` runs on {} (cannot read {})", dir.display(), path.display()))?;
    let mut lines = text.lines();
    let pid: u32 = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .filter(|&p| p > 0)
        .with_context(|| format!("{} does not hold a process id", path.display()))?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let is_up = cmdline.split(|&b| b == 0).nth(1) == Some(b"up".as_slice());
    if !running(pid) || !is_up {
        let _ = std::fs::remove_file(&path);
        bail!("the `tern up` of {} (pid {pid}) is not running", dir.display());
    }
    Ok((pid, lines.next().unwrap_or_default().to_string()))
}

/// `tern stop` without `--node`: stops the `tern up` serving `dir` in order (SIGTERM, as a
/// supervisor would) and waits until it has exited.
pub fn stop_cluster(dir: &Path, wait: Duration) -> Result<()> {
    let (pid, _) = running_up(dir)?;
    // SAFETY: plain kill(2) of the `tern up` just checked.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let t0 = Instant::now();
    while t0.elapsed() < wait {
        if !running(pid) {
            println!("stopped the cluster of {} in {:.1} s", dir.display(), t0.elapsed().as_secs_f64());
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("the `tern up` of {} (pid {pid}) did not stop within {} s", dir.display(), wait.as_secs())
}
