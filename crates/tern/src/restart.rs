//! `tern restart --rolling`: every process of a running cluster restarted in turn while the
//! cluster serves (also how a new version is rolled out).
//!
//! 1. Data nodes, one at a time, through the management nodes (any deployment): the node is asked
//!    to stop (`StopNode`), which it does in order (its last epochs durable, then it leaves the
//!    write chains); it starts again in its own process and waits; `StartNode` lets it register
//!    as a new incarnation, recover from its disk, copy what it missed and become a full replica
//!    (`Started`) before the next node goes. A node whose group has no other full replica is
//!    not stopped: the cluster would go down.
//! 2. Management nodes, one at a time, when there are three or more (a lone one cannot be
//!    restarted without every data node's lease running out), and
//! 3. the API server: both only under `tern up` (found through its pid file in --data-dir), by
//!    SIGTERM to the process, which stops in order and is started again by `tern up`; each must
//!    serve again before the next.

use anyhow::{Context, Result, bail};
use std::path::Path;
use std::time::{Duration, Instant};
use tern_types::cluster::{ClusterState, NodeId, NodeState};

/// How long one data node may take to stop, and to be a full replica again.
const STOP_WAIT: Duration = Duration::from_secs(60);
const REJOIN_WAIT: Duration = Duration::from_secs(600);

fn state(c: &mut tern_control::MgmClient) -> Result<ClusterState> {
    Ok(c.get_state().map_err(|e| anyhow::anyhow!("the management nodes do not answer: {e}"))?.state)
}

fn wait_for(
    c: &mut tern_control::MgmClient,
    what: &str,
    bound: Duration,
    done: impl Fn(&ClusterState) -> bool,
) -> Result<()> {
    let until = Instant::now() + bound;
    loop {
        match c.get_state() {
            Ok(info) if done(&info.state) => return Ok(()),
            Ok(_) => {}
            Err(e) => tracing::debug!("{what}: {e}"),
        }
        if Instant::now() > until {
            bail!("{what}: not done within {} s", bound.as_secs());
        }
        if crate::stop_requested() {
            bail!("interrupted while waiting: {what}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Restarts data node `n` in order and waits until it is a full replica again; returns how long
/// the node was out of the write chains.
fn restart_datanode(c: &mut tern_control::MgmClient, n: NodeId) -> Result<Duration> {
    let st = state(c)?;
    if st.cluster_down {
        bail!("the cluster is down: start it first");
    }
    let inc = st.nodes.get(&n).map(|s| s.incarnation).context("no such data node")?;
    if st.state_of(n) != NodeState::Started {
        bail!("data node {n} is {}, not started: let it finish first", st.state_of(n).name());
    }
    let group = st.group_of_node(n).context("the node has no node group")?;
    let peers_full = st.groups()[group].iter().filter(|&&m| m != n && st.state_of(m) == NodeState::Started).count();
    if peers_full == 0 {
        bail!("data node {n} is the only full replica of node group {group}: stopping it would stop the cluster");
    }
    c.stop_node(n).map_err(|e| anyhow::anyhow!("asking data node {n} to stop: {e}"))?;
    let t0 = Instant::now();
    let left = wait_for(c, &format!("data node {n} stopping"), STOP_WAIT, |s| {
        s.nodes.get(&n).is_some_and(|x| x.incarnation != inc || !x.state.in_chains())
    });
    // Whatever happened, let it start again.
    let started = c.start_node(n).map_err(|e| anyhow::anyhow!("letting data node {n} start: {e}"));
    left?;
    started?;
    eprintln!("tern restart: data node {n} stopped; waiting until it is a full replica again");
    wait_for(c, &format!("data node {n} rejoining"), REJOIN_WAIT, |s| {
        s.nodes.get(&n).is_some_and(|x| x.incarnation > inc && x.state == NodeState::Started)
    })?;
    Ok(t0.elapsed())
}

/// The child processes of `tern up` (pid) whose command line contains `word`, by pid.
fn up_children(up: u32, word: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else { return out };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        if crate::up::proc_stat(pid).is_none_or(|(_, ppid)| ppid != up) {
            continue;
        }
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if cmd.split(|&b| b == 0).nth(1) == Some(word.as_bytes()) {
            out.push(pid);
        }
    }
    out.sort();
    out
}

/// Stops `pid` (a child of `tern up`) in order and waits until `tern up` has started another
/// process for it that serves (`serving`).
fn restart_child(up: u32, word: &str, pid: u32, serving: &dyn Fn() -> bool) -> Result<Duration> {
    let before = up_children(up, word);
    let t0 = Instant::now();
    // SAFETY: plain kill(2) of a process of the cluster.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let until = Instant::now() + STOP_WAIT;
    loop {
        let now = up_children(up, word);
        let replaced = now.len() >= before.len() && !now.contains(&pid);
        if replaced && serving() {
            return Ok(t0.elapsed());
        }
        if Instant::now() > until {
            bail!("the {word} process {pid} was not replaced by a serving one within {} s", STOP_WAIT.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn rolling(mgmd: Vec<String>, data_dir: &Path) -> Result<()> {
    let mut c = crate::admin_client(mgmd);
    let st = state(&mut c)?;
    let nodes: Vec<NodeId> = st.nodes.keys().copied().collect();
    let total = Instant::now();
    for &n in &nodes {
        eprintln!("tern restart: data node {n}");
        let took = restart_datanode(&mut c, n)?;
        println!("data node {n}: restarted and a full replica again after {:.1} s", took.as_secs_f64());
    }
    // The other processes: only under `tern up`, whose children they are.
    let (up, ready) = match crate::up::running_up(data_dir) {
        Ok((pid, ready)) => (Some(pid), ready),
        Err(_) => (None, String::new()),
    };
    // The REST address from `tern up`'s ready line.
    let rest = ready.split_whitespace().find_map(|w| w.strip_prefix("rest=")).map(str::to_string);
    match up {
        None => println!(
            "management nodes and API servers: not under a `tern up` on {} here; restart them one at a time \
             with their supervisor",
            data_dir.display()
        ),
        Some(up) => {
            let mgmds = up_children(up, "mgmd");
            if mgmds.len() >= 3 {
                for pid in mgmds {
                    let serving = || {
                        let mut s = crate::admin_client(
                            st.config.mgmds.iter().map(|m| format!("{}:{}", m.host, m.port)).collect(),
                        );
                        s.connect_timeout = Duration::from_millis(500);
                        s.status().is_ok_and(|x| x.leader.is_some())
                            && state(&mut s).is_ok_and(|x| x.live_nodes().len() == nodes.len())
                    };
                    let took = restart_child(up, "mgmd", pid, &serving)?;
                    println!("management node (pid {pid}): restarted in {:.1} s", took.as_secs_f64());
                }
            } else {
                println!(
                    "management node: not restarted (a single management node cannot restart without every data \
                     node's lease running out; run three, `tern up --mgmds 3`, to roll them)"
                );
            }
            for pid in up_children(up, "api") {
                // Served again when its REST API answers (`tern up` checks every front end).
                let serving = || rest.as_deref().is_none_or(crate::up::rest_ready);
                let took = restart_child(up, "api", pid, &serving)?;
                println!("API server (pid {pid}): restarted in {:.1} s", took.as_secs_f64());
            }
        }
    }
    println!("rolling restart done in {:.1} s", total.elapsed().as_secs_f64());
    Ok(())
}
