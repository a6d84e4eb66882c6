//! `tern up`: a local cluster as child processes, supervised like NDB's angel process: a data
//! node that dies is started again and recovers from its data directory. Runs in the foreground,
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
/// data directory). The supervisor does not restart such a process.
pub const EXIT_STARTUP: i32 = 3;
const RESTARTS_MAX: usize = 5;
const RESTART_WINDOW: Duration = Duration::from_secs(60);

#[derive(clap::Args)]
pub struct UpArgs {
    /// Where data lives; it persists across runs.
    #[arg(long, default_value = "./tern-data")]
    pub data_dir: PathBuf,
    /// Data nodes to start (this version runs 1).
    #[arg(long, default_value_t = 1)]
    pub datanodes: u16,
    /// Replicas of each partition (this version runs 1).
    #[arg(long, default_value_t = 1)]
    pub replicas: u16,
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
    /// Management node port (the management node arrives with the cluster issue).
    #[arg(long, default_value_t = 1186)]
    pub mgmd_port: u16,
    /// Port clients use to reach the data node.
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
    let text = format!(
        "# Written by `tern up` on every start; edit the flags instead.\nnode_id = 1\ndata_dir = {:?}\nlisten = \"127.0.0.1:{}\"\ndata_memory = {memory}\nldm_workers = {workers}\n",
        node_dir.display().to_string(),
        a.datanode_port
    );
    let path = dir.join("datanode-1.toml");
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

fn spawn_tern(args: &[String]) -> Result<Child> {
    let exe = std::env::current_exe().context("cannot find the tern executable")?;
    let mut cmd = Command::new(exe);
    cmd.args(args).stdin(Stdio::null());
    // SAFETY: prctl is async-signal-safe; the child then dies with its parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn().context("cannot start a tern process")
}

/// One supervised child process: how to start it and how to tell it is serving.
struct Supervised {
    name: &'static str,
    args: Vec<String>,
    child: Child,
    ready: fn(&str) -> bool,
    addr: String,
    restarts: Vec<Instant>,
}

impl Supervised {
    fn start(name: &'static str, args: Vec<String>, addr: String, ready: fn(&str) -> bool) -> Result<Supervised> {
        let child = spawn_tern(&args)?;
        let mut s = Supervised { name, args, child, ready, addr, restarts: Vec::new() };
        if let Err(e) = s.wait_ready(Duration::from_secs(120)) {
            stop_child(&mut s.child);
            return Err(e);
        }
        Ok(s)
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if let Some(st) = self.child.try_wait()? {
                bail!("the {} stopped during start-up ({})", self.name, describe(st));
            }
            if crate::stop_requested() {
                bail!("interrupted");
            }
            if (self.ready)(&self.addr) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("the {} did not start within {} s", self.name, timeout.as_secs())
    }

    /// Restarts the child if it died (NDB's angel). Err when it cannot be kept running.
    fn supervise(&mut self) -> Result<()> {
        let Some(st) = self.child.try_wait()? else { return Ok(()) };
        if crate::stop_requested() {
            return Ok(());
        }
        if st.code() == Some(EXIT_STARTUP) {
            bail!("the {} cannot start ({}); see its message above", self.name, describe(st));
        }
        self.restarts.retain(|t| t.elapsed() < RESTART_WINDOW);
        if self.restarts.len() >= RESTARTS_MAX {
            bail!("the {} died {} times within {} s; giving up", self.name, RESTARTS_MAX, RESTART_WINDOW.as_secs());
        }
        self.restarts.push(Instant::now());
        eprintln!("tern up: {} stopped ({}); restarting it", self.name, describe(st));
        self.child = spawn_tern(&self.args)?;
        match self.wait_ready(Duration::from_secs(120)) {
            Ok(()) => eprintln!("tern up: {} is serving again", self.name),
            Err(e) => eprintln!("tern up: {} restart: {e:#}", self.name),
        }
        Ok(())
    }
}

fn datanode_ready(addr: &str) -> bool {
    tern_client::Client::connect(addr).and_then(|c| c.status()).map(|s| s.state == "started").unwrap_or(false)
}

/// The REST API answers `GET /0.1.0/ping`.
fn rest_ready(addr: &str) -> bool {
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

fn stop_child(child: &mut Child) {
    // SAFETY: plain kill(2) on our own child.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn port_free(port: u16, what: &str, flag: &str) -> Result<()> {
    if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
        bail!("port {port} is already in use ({what}); pick another with {flag}");
    }
    Ok(())
}

pub fn run(a: UpArgs) -> Result<()> {
    if a.datanodes != 1 || a.replicas != 1 {
        bail!(
            "--datanodes {} --replicas {}: this version runs one data node with one replica; multi-node clusters arrive with the cluster work",
            a.datanodes,
            a.replicas
        );
    }
    crate::install_signal_handlers();
    std::fs::create_dir_all(&a.data_dir).with_context(|| format!("cannot create {}", a.data_dir.display()))?;
    let dir = a.data_dir.canonicalize()?;
    port_free(a.datanode_port, "data node", "--datanode-port")?;
    port_free(a.rest_port, "REST API", "--rest-port")?;
    port_free(a.redis_port, "Redis", "--redis-port")?;
    port_free(a.mysql_port, "MySQL", "--mysql-port")?;
    let addr = format!("127.0.0.1:{}", a.datanode_port);
    let rest = format!("127.0.0.1:{}", a.rest_port);
    let config = write_datanode_config(&a, &dir)?;
    let datanode_args = vec!["datanode".into(), "--config".into(), config.display().to_string()];
    let mut children = vec![Supervised::start("data node 1", datanode_args, addr.clone(), datanode_ready)?];
    let api_args = vec![
        "api".into(),
        "--datanode".into(),
        addr.clone(),
        "--rest-ip".into(),
        "127.0.0.1".into(),
        "--rest-port".into(),
        a.rest_port.to_string(),
        "--redis-port".into(),
        a.redis_port.to_string(),
        "--mysql-port".into(),
        a.mysql_port.to_string(),
    ];
    let mut api_args = api_args;
    if let Some(t) = a.mysql_threads {
        api_args.extend(["--mysql-threads".into(), t.to_string()]);
    }
    if let Some(t) = &a.api_toml {
        let t = t.canonicalize().with_context(|| format!("--api-toml {}", t.display()))?;
        crate::config::ApiToml::load(&t)?;
        api_args.extend(["--toml".into(), t.display().to_string()]);
    }
    let redis = format!("127.0.0.1:{}", a.redis_port);
    let mysql = format!("127.0.0.1:{}", a.mysql_port);
    match Supervised::start("API server", api_args, format!("{rest} {redis} {mysql}"), api_ready) {
        Ok(s) => children.push(s),
        Err(e) => {
            for c in &mut children {
                stop_child(&mut c.child);
            }
            return Err(e);
        }
    }
    println!("ready: datanode={addr} rest={rest} redis={redis} mysql={mysql} data-dir={}", dir.display());
    std::io::stdout().flush()?;
    loop {
        if crate::stop_requested() {
            eprintln!("tern up: stopping");
            // Front ends first, then the data node (which makes its last epochs durable).
            for c in children.iter_mut().rev() {
                stop_child(&mut c.child);
            }
            return Ok(());
        }
        for i in 0..children.len() {
            if let Err(e) = children[i].supervise() {
                for c in children.iter_mut().rev() {
                    stop_child(&mut c.child);
                }
                return Err(e);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
