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
    /// REST API port (the REST front end arrives with its issue).
    #[arg(long, default_value_t = 4406)]
    pub rest_port: u16,
    /// Redis protocol port (the Redis front end arrives with its issue).
    #[arg(long, default_value_t = 6379)]
    pub redis_port: u16,
    /// MySQL protocol port (the SQL front end arrives with its issue).
    #[arg(long, default_value_t = 3306)]
    pub mysql_port: u16,
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

fn spawn_datanode(config: &Path) -> Result<Child> {
    let exe = std::env::current_exe().context("cannot find the tern executable")?;
    let mut cmd = Command::new(exe);
    cmd.arg("datanode").arg("--config").arg(config).stdin(Stdio::null());
    // SAFETY: prctl is async-signal-safe; the child then dies with its parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    cmd.spawn().context("cannot start the data node process")
}

fn describe(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => "unknown status".into(),
    }
}

/// Waits until the data node answers `status` with state "started".
fn wait_ready(child: &mut Child, addr: &str, timeout: Duration) -> Result<()> {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if let Some(st) = child.try_wait()? {
            bail!("the data node stopped during start-up ({})", describe(st));
        }
        if crate::stop_requested() {
            bail!("interrupted");
        }
        if let Ok(c) = tern_client::Client::connect(addr)
            && c.status().map(|s| s.state == "started").unwrap_or(false)
        {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("the data node did not start within {} s", timeout.as_secs())
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
    let addr = format!("127.0.0.1:{}", a.datanode_port);
    if std::net::TcpListener::bind(&addr).is_err() {
        bail!("port {} is already in use (data node); pick another with --datanode-port", a.datanode_port);
    }
    let config = write_datanode_config(&a, &dir)?;
    let mut child = spawn_datanode(&config)?;
    if let Err(e) = wait_ready(&mut child, &addr, Duration::from_secs(120)) {
        stop_child(&mut child);
        return Err(e);
    }
    println!("ready: datanode={addr} data-dir={}", dir.display());
    std::io::stdout().flush()?;
    let mut restarts: Vec<Instant> = Vec::new();
    loop {
        if crate::stop_requested() {
            eprintln!("tern up: stopping");
            stop_child(&mut child);
            return Ok(());
        }
        if let Some(st) = child.try_wait()? {
            if crate::stop_requested() {
                return Ok(());
            }
            if st.code() == Some(EXIT_STARTUP) {
                bail!("the data node cannot start ({}); see its message above", describe(st));
            }
            restarts.retain(|t| t.elapsed() < RESTART_WINDOW);
            if restarts.len() >= RESTARTS_MAX {
                bail!("the data node died {} times within {} s; giving up", RESTARTS_MAX, RESTART_WINDOW.as_secs());
            }
            restarts.push(Instant::now());
            eprintln!("tern up: data node 1 stopped ({}); restarting it", describe(st));
            child = spawn_datanode(&config)?;
            match wait_ready(&mut child, &addr, Duration::from_secs(120)) {
                Ok(()) => eprintln!("tern up: data node 1 recovered and is serving again"),
                Err(e) => eprintln!("tern up: data node 1 restart: {e:#}"),
            }
            continue;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
