//! `ndbinfo`: the cluster's live state as virtual tables readable through SQL, in the manner of
//! NDB's `ndbinfo` database (the names follow NDB's where Tern has the same thing; the columns
//! are Tern's and are documented in README.md, "Watching the cluster: ndbinfo").
//!
//! Their rows come from the cluster map the management nodes published to this process
//! (`tern_client::metrics::cluster_map`) and from a status request to every data node that is
//! not down (each on a short connection of its own, in parallel, at most two seconds each). A
//! node that does not answer is missing from the per-node tables; `nodes` still lists it with
//! what the map says. The per-partition figures and the locks are as each ldm last published
//! them (at most about a second old).

use tern_client::{Client, StatusInfo, TableHandle};
use tern_types::cluster::ClusterState;
use tern_types::schema::Catalog;
use tern_types::{Column, ColumnType, Table, Value};

pub const DB: &str = "ndbinfo";
pub const TABLES: [&str; 7] =
    ["cluster_locks", "counters", "memoryusage", "nodes", "table_fragments", "table_placement", "transporters"];

/// NDB reports memory in pages of this size.
const PAGE_BYTES: u64 = 32 * 1024;

fn vc(name: &str) -> Column {
    Column::new(name, ColumnType::VarChar { len: 512 })
}
fn num(name: &str) -> Column {
    Column::new(name, ColumnType::BigInt { unsigned: true })
}

/// The definition of an ndbinfo table (None: not one of ours).
pub fn table(name: &str) -> Option<TableHandle> {
    let lower = name.to_ascii_lowercase();
    let (id, cols): (u32, Vec<Column>) = match lower.as_str() {
        "nodes" => (
            u32::MAX - 20,
            vec![
                num("node_id"),
                num("node_group"),
                vc("status"),
                num("start_count"),
                num("uptime"),
                vc("address"),
                num("is_master"),
                num("config_generation"),
                num("location_domain"),
            ],
        ),
        "memoryusage" => (
            u32::MAX - 21,
            vec![num("node_id"), vc("memory_type"), num("used"), num("used_pages"), num("total"), num("total_pages")],
        ),
        "transporters" => (
            u32::MAX - 22,
            vec![
                num("node_id"),
                num("remote_node_id"),
                vc("status"),
                vc("remote_address"),
                vc("transporter"),
                num("bytes_sent"),
                num("bytes_received"),
                num("connect_count"),
                num("signals_dropped"),
            ],
        ),
        "table_fragments" => (
            u32::MAX - 23,
            vec![
                num("node_id"),
                num("table_id"),
                vc("database_name"),
                vc("table_name"),
                num("partition_id"),
                num("block_instance"),
                vc("replica_role"),
                num("node_group"),
                num("row_count"),
                num("memory_bytes"),
            ],
        ),
        "table_placement" => (
            u32::MAX - 24,
            vec![
                num("table_id"),
                vc("database_name"),
                vc("table_name"),
                num("partition_id"),
                num("node_group"),
                num("primary_node"),
                vc("replica_nodes"),
                num("moving_to_group"),
                vc("move_phase"),
            ],
        ),
        "cluster_locks" => (
            u32::MAX - 25,
            vec![
                num("node_id"),
                num("block_instance"),
                num("tableid"),
                num("fragmentid"),
                vc("lock_key"),
                num("tc_node_id"),
                num("transid"),
                vc("mode"),
                vc("state"),
                num("duration_millis"),
            ],
        ),
        "counters" => (u32::MAX - 26, vec![num("node_id"), vc("counter_name"), num("val")]),
        _ => return None,
    };
    let mut t = Table::new(DB, &lower, cols, vec![0]);
    t.id = id;
    t.partition_count = 1;
    Some(TableHandle::new(t))
}

fn s(v: &str) -> Value {
    Value::Bytes(v.as_bytes().to_vec())
}
fn u(v: u64) -> Value {
    Value::UInt(v)
}

/// Every data node's status, ascending by node id: each node of the map that is not down, or
/// (no map: a process not watching management nodes) the node this client is connected to.
async fn statuses(client: &Client, map: Option<&ClusterState>) -> Vec<StatusInfo> {
    let Some(map) = map else {
        return client.status_async().await.into_iter().collect();
    };
    let mut tasks = Vec::new();
    for d in &map.config.data_nodes {
        if map.state_of(d.id) == tern_types::cluster::NodeState::Down {
            continue;
        }
        let (c, addr) = (client.clone(), d.addr());
        tasks.push(tokio::task::spawn_blocking(move || c.status_at(&addr)));
    }
    let mut out = Vec::new();
    for t in tasks {
        if let Ok(Ok(st)) = t.await {
            out.push(st);
        }
    }
    out.sort_by_key(|s| s.node_id);
    out
}

/// The node groups a table's partitions were spread over (0 in the catalog: the base ones).
fn groups_of(map: &ClusterState, t: &Table) -> u32 {
    if t.groups == 0 { map.base_groups.max(1) } else { t.groups }
}

fn names(cat: &Catalog, table: u32) -> (Value, Value) {
    match cat.tables.get(&table) {
        Some(t) => (s(&t.database), s(&t.name)),
        None => (Value::Null, Value::Null),
    }
}

/// The rows of ndbinfo table `name` (lower case, as `table` gave it).
pub async fn rows(client: &Client, name: &str) -> Vec<Vec<Value>> {
    let map = tern_client::metrics::cluster_map();
    let cat = client.catalog();
    if name == "table_placement" {
        return map.map(|m| placement(&m, &cat)).unwrap_or_default();
    }
    let st = statuses(client, map.as_deref()).await;
    let mut out = Vec::new();
    match name {
        "nodes" => nodes(map.as_deref(), &st, &mut out),
        "memoryusage" => {
            for n in &st {
                let id = u(n.node_id as u64);
                out.push(vec![
                    id,
                    s("Data memory"),
                    u(n.memory_used),
                    u(n.memory_used.div_ceil(PAGE_BYTES)),
                    u(n.memory_total),
                    u(n.memory_total / PAGE_BYTES),
                ]);
            }
        }
        "transporters" => {
            for n in &st {
                for l in &n.links {
                    out.push(vec![
                        u(n.node_id as u64),
                        u(l.node as u64),
                        s(&l.status),
                        s(&l.addr),
                        s(&l.transporter),
                        u(l.bytes_sent),
                        u(l.bytes_received),
                        u(l.connects),
                        u(l.dropped),
                    ]);
                }
            }
        }
        "table_fragments" => {
            for n in &st {
                for f in &n.fragments {
                    let (db, tname) = names(&cat, f.table);
                    let (role, group) = match (map.as_deref(), cat.tables.get(&f.table)) {
                        (Some(m), Some(t)) => {
                            let groups = groups_of(m, t);
                            let chain = m.chain(f.table, groups, f.partition);
                            let role = match chain.replicas.iter().position(|&(node, _)| node == n.node_id) {
                                Some(0) if chain.readable > 0 => "primary",
                                Some(i) if i < chain.readable => "backup",
                                Some(_) => "copying",
                                None => "leaving",
                            };
                            (s(role), m.group_of_node(n.node_id).map_or(Value::Null, |g| u(g as u64)))
                        }
                        _ => (Value::Null, Value::Null),
                    };
                    out.push(vec![
                        u(n.node_id as u64),
                        u(f.table as u64),
                        db,
                        tname,
                        u(f.partition as u64),
                        u(f.ldm as u64),
                        role,
                        group,
                        u(f.rows),
                        u(f.bytes),
                    ]);
                }
            }
        }
        "cluster_locks" => {
            for n in &st {
                for l in &n.locks {
                    let key: String = l.key.iter().map(|b| format!("{b:02x}")).collect();
                    out.push(vec![
                        u(n.node_id as u64),
                        u(l.ldm as u64),
                        u(l.table as u64),
                        u(l.partition as u64),
                        s(&key),
                        u(l.tc_node as u64),
                        u(l.txn),
                        s(if l.exclusive { "X" } else { "S" }),
                        s(if l.waiting { "W" } else { "H" }),
                        u(l.duration_ms),
                    ]);
                }
            }
        }
        "counters" => {
            for n in &st {
                for (c, v) in &n.counters {
                    out.push(vec![u(n.node_id as u64), s(c), u(*v)]);
                }
            }
        }
        _ => {}
    }
    out
}

fn nodes(map: Option<&ClusterState>, st: &[StatusInfo], out: &mut Vec<Vec<Value>>) {
    let status_of = |id: u16| st.iter().find(|s| s.node_id == id);
    let Some(m) = map else {
        for n in st {
            out.push(vec![
                u(n.node_id as u64),
                u(0),
                s(&n.state.to_ascii_uppercase()),
                Value::Null,
                u(n.uptime_ms / 1000),
                Value::Null,
                u(1),
                Value::Null,
                Value::Null,
            ]);
        }
        return;
    };
    let master = m.master();
    for d in &m.config.data_nodes {
        let ns = m.nodes.get(&d.id);
        out.push(vec![
            u(d.id as u64),
            m.group_of_node(d.id).map_or(Value::Null, |g| u(g as u64)),
            s(&m.state_of(d.id).name().to_ascii_uppercase()),
            ns.map_or(Value::Null, |n| u(n.incarnation as u64)),
            status_of(d.id).map_or(Value::Null, |n| u(n.uptime_ms / 1000)),
            s(&d.addr()),
            u((master == Some(d.id)) as u64),
            u(m.version),
            u(d.location_domain as u64),
        ]);
    }
}

/// What the map says of every partition of every table: its home group, chain and any move.
fn placement(m: &ClusterState, cat: &Catalog) -> Vec<Vec<Value>> {
    let mut tables: Vec<&Table> = cat.tables.values().collect();
    tables.sort_by_key(|t| t.id);
    let mut out = Vec::new();
    for t in tables {
        let groups = groups_of(m, t);
        for p in 0..t.partition_count {
            let home = m.home(t.id, groups, p);
            let chain = m.chain(t.id, groups, p);
            let replicas: Vec<String> = chain.replicas.iter().map(|(n, _)| n.to_string()).collect();
            let moving = m.placed.get(&(t.id, p)).and_then(|pl| pl.moving.as_ref());
            out.push(vec![
                u(t.id as u64),
                s(&t.database),
                s(&t.name),
                u(p as u64),
                u(home.group as u64),
                m.primary(t.id, groups, p).map_or(Value::Null, |n| u(n as u64)),
                s(&replicas.join(",")),
                moving.map_or(Value::Null, |mv| u(mv.to.group as u64)),
                moving.map_or(Value::Null, |mv| {
                    s(match mv.phase {
                        tern_types::cluster::MovePhase::Copying => "copying",
                        tern_types::cluster::MovePhase::Switched => "switched",
                    })
                }),
            ]);
        }
    }
    out
}
