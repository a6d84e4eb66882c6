//! `tern mgm`: the management client in ndb_mgm's manner. Each command is one line, given with
//! `-e` (several separated by `;`) or read from standard input:
//!
//! - `SHOW` — the data nodes by node group, their state, the management nodes, moves running;
//! - `N STOP`, `N START`, `N RESTART` — one data node (it flushes and leaves in order; START
//!   lets it rejoin; RESTART does both and waits until it is a full replica again);
//! - `CREATE NODEGROUP id@host:port, id@host:port [NOREORGANIZE]` — online add node group: the
//!   data nodes join the configuration, start empty (`tern datanode --mgmd … --node-id id`)
//!   and, unless NOREORGANIZE, every table is spread over the new group once it has started;
//! - `ALTER TABLE db.t REORGANIZE PARTITION` — spread one table over every node group in service;
//! - `DROP NODEGROUP n` — drain the node group (its partitions move away while the cluster
//!   serves), stop its data nodes, and remove it;
//! - `REPORT MEMORYUSAGE` — data memory per data node;
//! - `START BACKUP dir` — an online backup (as `tern backup`).

use anyhow::{Result, anyhow, bail};
use std::time::{Duration, Instant};
use tern_control::{Command, MgmClient, NodeSpecWire};
use tern_types::cluster::{ClusterState, MovePhase, NodeState};

/// How long `DROP NODEGROUP` and `N RESTART` wait for the cluster to get where they want it.
const WAIT_MAX: Duration = Duration::from_secs(1800);
const POLL: Duration = Duration::from_millis(200);

/// Runs the commands of `execute` (or of standard input, one per line).
pub fn run(mgmd: Vec<String>, execute: Option<String>) -> Result<()> {
    let mut c = crate::admin_client(mgmd);
    let lines: Vec<String> = match execute {
        Some(e) => e.split(';').map(str::to_string).collect(),
        None => std::io::stdin().lines().collect::<Result<_, _>>()?,
    };
    for line in lines {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        command(&mut c, line)?;
    }
    Ok(())
}

/// One command line.
pub fn command(c: &mut MgmClient, line: &str) -> Result<()> {
    let words: Vec<String> = line.split_whitespace().map(|w| w.to_ascii_uppercase()).collect();
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["SHOW"] => show(c),
        [n, "STOP"] => node_stop(c, parse_node(n)?, true),
        [n, "START"] => node_stop(c, parse_node(n)?, false),
        [n, "RESTART"] => node_restart(c, parse_node(n)?),
        ["CREATE", "NODEGROUP", ..] => create_nodegroup(c, line),
        ["DROP", "NODEGROUP", g] => drop_nodegroup(c, g.parse().map_err(|_| anyhow!("bad node group {g}"))?),
        ["ALTER", "TABLE", _, "REORGANIZE", "PARTITION"] => {
            let name = line.split_whitespace().nth(2).expect("matched");
            reorganize(c, name)
        }
        ["REPORT", "MEMORYUSAGE"] | ["ALL", "REPORT", "MEMORYUSAGE"] => memory_usage(c),
        ["START", "BACKUP", _] => {
            let dir = line.split_whitespace().nth(2).expect("matched");
            let st = state(c)?;
            let addrs: Vec<String> = st
                .config
                .data_nodes
                .iter()
                .filter(|d| st.state_of(d.id) == NodeState::Started)
                .map(|d| d.addr())
                .collect();
            crate::backup::backup(&addrs.join(","), std::path::Path::new(dir))
        }
        _ => bail!(
            "unknown command {line:?} (SHOW, N STOP|START|RESTART, CREATE NODEGROUP id@host:port,..., DROP NODEGROUP n, ALTER TABLE db.t REORGANIZE PARTITION, REPORT MEMORYUSAGE, START BACKUP dir)"
        ),
    }
}

fn parse_node(w: &str) -> Result<u16> {
    w.parse().map_err(|_| anyhow!("bad data node id {w}"))
}

fn state(c: &mut MgmClient) -> Result<ClusterState> {
    Ok(c.get_state().map_err(|e| anyhow!("no management node answers: {e}"))?.state)
}

fn propose(c: &mut MgmClient, cmd: Command) -> Result<()> {
    c.propose(cmd).map(|_| ()).map_err(|e| anyhow!("{e}"))
}

/// Waits until `done` holds for the cluster state (or gives up after `WAIT_MAX`).
fn wait_for(c: &mut MgmClient, what: &str, done: impl Fn(&ClusterState) -> bool) -> Result<ClusterState> {
    let until = Instant::now() + WAIT_MAX;
    loop {
        if let Ok(st) = state(c)
            && done(&st)
        {
            return Ok(st);
        }
        if Instant::now() > until {
            bail!("gave up waiting for {what}");
        }
        std::thread::sleep(POLL);
    }
}

fn show(c: &mut MgmClient) -> Result<()> {
    let s = c.status().map_err(|e| anyhow!("no management node answers: {e}"))?;
    let st = &s.state.state;
    println!("Cluster Configuration");
    println!("---------------------");
    println!("[ndbd(NDB)]\t{} node(s)", st.nodes.len());
    let master = st.master();
    for (g, members) in st.groups().iter().enumerate() {
        let g = g as u32;
        let role = if st.draining.contains(&g) {
            ", draining"
        } else if g >= st.active_groups {
            ", not in service yet"
        } else {
            ""
        };
        for &n in members {
            let ns = &st.nodes[&n];
            let addr = st.config.data_node(n).map(|d| d.addr()).unwrap_or_default();
            let state = match ns.state {
                NodeState::Started => "started",
                NodeState::Copying => "starting, copying",
                NodeState::Starting => "starting",
                NodeState::Down => "not connected",
            };
            let star = if master == Some(n) { ", *" } else { "" };
            println!("id={n}\t@{addr}  ({state}, Nodegroup: {g}{role}{star})");
        }
    }
    println!();
    println!("[ndb_mgmd(MGM)]\t{} node(s)", s.members.len());
    for (id, addr) in &s.members {
        let lead = if s.leader == Some(*id) { ", leader" } else { "" };
        println!("id={id}\t@{addr}  (term {}{lead})", s.term);
    }
    let moving: Vec<String> = st
        .placed
        .iter()
        .filter_map(|(&(t, p), pl)| {
            let m = pl.moving.as_ref()?;
            let phase = if m.phase == MovePhase::Copying { "copying" } else { "switched" };
            Some(format!("table {t} partition {p}: node group {} -> {} ({phase})", pl.home.group, m.to.group))
        })
        .collect();
    if !moving.is_empty() {
        println!();
        println!("Partition moves running: {}", moving.len());
        for m in moving {
            println!("  {m}");
        }
    }
    Ok(())
}

fn node_stop(c: &mut MgmClient, node: u16, stop: bool) -> Result<()> {
    let r = if stop { c.stop_node(node) } else { c.start_node(node) };
    r.map_err(|e| anyhow!("{e}"))?;
    println!("Node {node}: {}", if stop { "stop requested" } else { "may start again" });
    Ok(())
}

fn node_restart(c: &mut MgmClient, node: u16) -> Result<()> {
    let before = state(c)?;
    let inc = before.nodes.get(&node).map(|s| s.incarnation).ok_or_else(|| anyhow!("no data node {node}"))?;
    node_stop(c, node, true)?;
    wait_for(c, "the node to stop", |st| st.state_of(node) == NodeState::Down)?;
    node_stop(c, node, false)?;
    println!("Node {node}: stopped; waiting for it to start again (it does in its own process)");
    wait_for(c, "the node to start", |st| {
        st.nodes.get(&node).is_some_and(|s| s.state == NodeState::Started && s.incarnation > inc)
    })?;
    println!("Node {node}: started");
    Ok(())
}

/// `CREATE NODEGROUP 3@127.0.0.1:11863, 4@127.0.0.1:11864 [NOREORGANIZE]`; `3@host:port/2`
/// puts node 3 in location domain 2.
fn create_nodegroup(c: &mut MgmClient, line: &str) -> Result<()> {
    let rest = line.trim_start()[6..].trim_start()[9..].trim();
    let (list, reorganize) = match rest.to_ascii_uppercase().strip_suffix("NOREORGANIZE") {
        Some(_) => (&rest[..rest.len() - "NOREORGANIZE".len()], false),
        None => (rest, true),
    };
    let mut nodes = Vec::new();
    let mut domains = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item.split_once('@').ok_or_else(|| anyhow!("{item:?}: expected id@host:port"))?;
        // `id@host:port/domain`: the node's location domain (1-255).
        let (addr, domain) = match addr.rsplit_once('/') {
            Some((a, d)) => {
                let d: u8 =
                    d.trim().parse().ok().filter(|&d| d > 0).ok_or_else(|| {
                        anyhow!("bad location domain in {item:?} (expected id@host:port/N, N in 1-255)")
                    })?;
                (a, d)
            }
            None => (addr, 0),
        };
        domains.push(domain);
        let (host, port) = addr.rsplit_once(':').ok_or_else(|| anyhow!("{item:?}: expected id@host:port"))?;
        nodes.push(NodeSpecWire {
            id: id.parse().map_err(|_| anyhow!("bad node id in {item:?}"))?,
            host: host.to_string(),
            port: port.parse().map_err(|_| anyhow!("bad port in {item:?}"))?,
        });
    }
    if nodes.is_empty() {
        bail!("CREATE NODEGROUP needs its data nodes: id@host:port, ...");
    }
    let ids: Vec<u16> = nodes.iter().map(|n| n.id).collect();
    if domains.iter().any(|&d| d != 0) {
        propose(c, Command::AddNodesIn { nodes, domains, reorganize })?;
    } else {
        propose(c, Command::AddNodes { nodes, reorganize })?;
    }
    let st = state(c)?;
    let g = ids.first().and_then(|&n| st.group_of_node(n)).unwrap_or(0);
    println!("Nodegroup {g} created (data nodes {ids:?})");
    println!(
        "Start each with: tern datanode --mgmd {} --node-id ID --data-dir DIR; it comes into service once all have started{}",
        st.config.mgmds.iter().map(|m| format!("{}:{}", m.host, m.port)).collect::<Vec<_>>().join(","),
        if reorganize { ", and every table is then reorganised over it" } else { "" }
    );
    Ok(())
}

fn reorganize(c: &mut MgmClient, name: &str) -> Result<()> {
    let (db, table) = name.split_once('.').ok_or_else(|| anyhow!("name the table as db.table"))?;
    let (_, bytes) = c.get_catalog().map_err(|e| anyhow!("{e}"))?;
    let cat = tern_types::Catalog::decode(&bytes).map_err(|e| anyhow!("the catalog does not decode: {e:?}"))?;
    let t = cat.find_table(db, table).ok_or_else(|| anyhow!("Table '{db}.{table}' doesn't exist"))?;
    let id = t.id;
    let mut ids = vec![id];
    // Its unique indexes' tables move with it.
    for i in &t.indexes {
        if let Some(&it) = cat.index_tables.get(&i.id) {
            ids.push(it);
        }
    }
    for t in ids {
        propose(c, Command::Reorganize { table: t })?;
    }
    println!("Table {db}.{table}: reorganising over every node group in service");
    Ok(())
}

/// Drains the group, waits until it is empty, stops its data nodes and removes it.
fn drop_nodegroup(c: &mut MgmClient, g: u32) -> Result<()> {
    let st = state(c)?;
    let members = st.groups().get(g as usize).cloned().ok_or_else(|| anyhow!("there is no node group {g}"))?;
    if g < st.active_groups {
        propose(c, Command::DrainGroup { group: g })?;
        println!("Nodegroup {g}: draining (its partitions move to the other node groups)");
    }
    let holds = |st: &ClusterState| {
        st.placed.values().any(|p| p.home.group == g || p.moving.as_ref().is_some_and(|m| m.to.group == g))
    };
    wait_for(c, "the node group to empty", |st| !holds(st))?;
    println!("Nodegroup {g}: empty; stopping data nodes {members:?}");
    for &n in &members {
        if state(c)?.state_of(n) != NodeState::Down {
            propose(c, Command::StopNode { node: n })?;
        }
    }
    wait_for(c, "its data nodes to stop", |st| members.iter().all(|&n| st.state_of(n) == NodeState::Down))?;
    propose(c, Command::RemoveGroup { group: g })?;
    for &n in &members {
        let _ = propose(c, Command::StartNode { node: n }); // forget the stop request
    }
    println!("Nodegroup {g} dropped");
    Ok(())
}

fn memory_usage(c: &mut MgmClient) -> Result<()> {
    let st = state(c)?;
    for d in &st.config.data_nodes {
        if !st.state_of(d.id).in_chains() {
            println!("Node {}: not connected", d.id);
            continue;
        }
        match tern_client::Client::connect(&d.addr()).and_then(|cl| cl.status()) {
            Ok(s) => {
                let pct = (s.memory_used * 100).checked_div(s.memory_total).unwrap_or(0);
                println!(
                    "Node {}: Data usage is {pct}%({} bytes of total {}), {} rows in {} partitions",
                    d.id, s.memory_used, s.memory_total, s.rows, s.partitions
                );
            }
            Err(e) => println!("Node {}: no answer ({e})", d.id),
        }
    }
    Ok(())
}
