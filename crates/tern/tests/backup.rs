//! Online backup and restore: `tern backup` runs while writers commit on a two-node cluster,
//! `tern restore` loads it into a one-node cluster, and every table's checksum equals the
//! source's state at the backup's end epoch (computed from what the writers committed, with the
//! epochs their commits reported). Unique indexes and AUTO_INCREMENT work after the restore; a
//! corrupt backup, a second backup into the same directory and a restore into a cluster that
//! holds rows are refused.

mod common;

use common::{Up, consecutive_ports, free_port};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tern_client::{Client, Column, ColumnType, DdlReq, Exec, Index, ScanSpec, Table, Value, block_on};

/// `tern up` with `datanodes` data nodes of `replicas` replicas; returns it and the data node
/// addresses (comma-separated).
fn up(dir: &Path, datanodes: u16, replicas: u16) -> (Up, String) {
    let data = dir.join("data").display().to_string();
    let args: Vec<String> = [
        "--data-dir",
        &data,
        "--datanodes",
        &datanodes.to_string(),
        "--replicas",
        &replicas.to_string(),
        "--datanode-port",
        &consecutive_ports(datanodes).to_string(),
        "--rest-port",
        &free_port().to_string(),
        "--redis-port",
        &free_port().to_string(),
        "--mysql-port",
        &free_port().to_string(),
        "--mgmd-port",
        &free_port().to_string(),
        "--data-memory",
        "256M",
        "--ldm-workers",
        "2",
    ]
    .map(String::from)
    .to_vec();
    let (up, line) = common::spawn_up(dir, &args);
    let Some(addrs) = line.split_whitespace().find_map(|w| w.strip_prefix("datanode=")) else {
        panic!("tern up did not start: {line:?}\n{}", common::up_log(dir));
    };
    (up, addrs.to_string())
}

fn tern(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tern")).args(args).env("TERN_LOG", "warn").output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn bigint() -> ColumnType {
    ColumnType::BigInt { unsigned: false }
}

fn varchar() -> ColumnType {
    ColumnType::VarChar { len: 64 }
}

fn create_tables(c: &Client) {
    c.ddl(DdlReq::CreateDatabase { name: "shop".into(), if_not_exists: false }).unwrap();
    let kv = Table::new(
        "shop",
        "kv",
        vec![Column::new("id", bigint()).not_null(), Column::new("v", varchar()), Column::new("n", bigint())],
        vec![0],
    );
    let mut users = Table::new(
        "shop",
        "users",
        vec![Column::new("id", bigint()).not_null(), Column::new("email", varchar()).not_null()],
        vec![0],
    );
    users.indexes.push(Index { id: 0, name: "email".into(), columns: vec![1], unique: true });
    let mut id = Column::new("id", ColumnType::BigInt { unsigned: true }).not_null();
    id.auto_increment = true;
    let items = Table::new("shop", "items", vec![id, Column::new("name", varchar())], vec![0]);
    let fixed = Table::new(
        "shop",
        "fixed",
        vec![Column::new("k", bigint()).not_null(), Column::new("blob", ColumnType::Blob)],
        vec![0],
    );
    for t in [kv, users, items, fixed] {
        c.ddl(DdlReq::CreateTable { table: t, if_not_exists: false }).unwrap();
    }
}

/// Rows of the tables the writers change, as the test believes them: (table, id) -> row.
type Model = BTreeMap<(&'static str, i64), Vec<Value>>;

fn kv_row(id: i64, ver: i64) -> Vec<Value> {
    vec![Value::Int(id), Value::Bytes(format!("v{id}-{ver}").into_bytes()), Value::Int(ver)]
}

fn user_row(id: i64, ver: i64) -> Vec<Value> {
    vec![Value::Int(id), Value::Bytes(format!("u{id}.{ver}@example.com").into_bytes())]
}

/// One committed transaction of a writer: its epoch and its changes (None = delete).
type Committed = (u64, Vec<((&'static str, i64), Option<Vec<Value>>)>);

/// A writer owning the ids `id % 2 == me`: updates, inserts and deletes in transactions of one
/// to three operations over both tables until told to stop (at most 60 s).
fn writer(addrs: String, me: i64, start: Model, stop: Arc<AtomicBool>) -> Vec<Committed> {
    let c = Client::connect(&addrs).unwrap();
    let (kv, users) = (c.table("shop", "kv").unwrap(), c.table("shop", "users").unwrap());
    let mut live: Model = start.into_iter().filter(|((_, id), _)| id % 2 == me).collect();
    let mut rng = tern_types::rng::Rng::new(0x5eed + me as u64);
    let mut done = Vec::new();
    let until = Instant::now() + Duration::from_secs(60);
    let mut ver = 1000;
    while !stop.load(Ordering::SeqCst) && Instant::now() < until {
        let mut ops = Vec::new();
        let mut changes = Vec::new();
        for _ in 0..1 + rng.below(3) {
            ver += 1;
            let table = if rng.below(3) == 0 { "users" } else { "kv" };
            let id = (rng.below(1500) as i64) * 2 + me;
            if changes.iter().any(|(k, _)| *k == (table, id)) {
                continue;
            }
            let h = if table == "kv" { &kv } else { &users };
            let row = if table == "kv" { kv_row(id, ver) } else { user_row(id, ver) };
            let exists = live.contains_key(&(table, id));
            if exists && rng.below(4) == 0 {
                ops.push(h.delete(&[Value::Int(id)]).unwrap());
                changes.push(((table, id), None));
            } else {
                ops.push(h.write(&row).unwrap());
                changes.push(((table, id), Some(row)));
            }
        }
        let mut t = c.begin();
        match block_on(t.execute(ops, Exec::Commit)) {
            Ok(_) => {
                for (k, v) in &changes {
                    match v {
                        Some(r) => live.insert(*k, r.clone()),
                        None => live.remove(k),
                    };
                }
                done.push((t.commit_epoch().expect("committed"), changes));
            }
            Err(e) => panic!("writer {me}: {e}"),
        }
    }
    done
}

/// Per table (`db.name`): row count and a digest of its rows (each rendered, sorted).
fn digest(rows: impl IntoIterator<Item = Vec<Value>>) -> (usize, String) {
    let mut lines: Vec<String> = rows.into_iter().map(|r| format!("{r:?}")).collect();
    lines.sort();
    (lines.len(), tern_types::digest::sha256_hex(lines.join("\n").as_bytes()))
}

fn checksums(c: &Client) -> BTreeMap<String, (usize, String)> {
    let cat = c.refresh_catalog().unwrap();
    let hidden: Vec<u32> = cat.index_tables.values().copied().collect();
    let mut out = BTreeMap::new();
    for t in cat.tables.values().filter(|t| !hidden.contains(&t.id)) {
        let h = c.table(&t.database, &t.name).unwrap();
        let rows = c.blocking().scan_all(ScanSpec::table(t.id)).unwrap();
        out.insert(format!("{}.{}", t.database, t.name), digest(rows.iter().map(|r| h.decode_row(r).unwrap())));
    }
    out
}

#[test]
fn backup_while_writing_restores_the_state_at_its_end_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let (source, addrs) = up(&tmp.path().join("source"), 2, 2);
    let c = Client::connect(&addrs).unwrap();
    create_tables(&c);

    // Before the backup: rows in every table (the writers change kv and users).
    let mut model = Model::new();
    let [kv, users, items, fixed] = ["kv", "users", "items", "fixed"].map(|n| c.table("shop", n).unwrap());
    let mut ops = Vec::new();
    for id in 0..2000i64 {
        ops.push(kv.write(&kv_row(id, 0)).unwrap());
        model.insert(("kv", id), kv_row(id, 0));
        if id < 600 {
            ops.push(users.write(&user_row(id, 0)).unwrap());
            model.insert(("users", id), user_row(id, 0));
        }
        if id < 300 {
            let auto = c.next_auto_increment(items.id()).unwrap();
            ops.push(items.write(&[Value::UInt(auto), Value::Bytes(format!("item {id}").into_bytes())]).unwrap());
            ops.push(fixed.write(&[Value::Int(id), Value::Bytes(vec![id as u8; 20_000])]).unwrap());
        }
        if ops.len() >= 200 {
            c.blocking().execute(std::mem::take(&mut ops)).unwrap();
        }
    }
    c.blocking().execute(ops).unwrap();

    // Writers run through the whole backup and a while after it.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|me| {
            let (a, m, s) = (addrs.clone(), model.clone(), stop.clone());
            std::thread::spawn(move || writer(a, me, m, s))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let dir = tmp.path().join("backup");
    let (ok, out) = tern(&["backup", "--addr", &addrs, "--dir", dir.to_str().unwrap()]);
    assert!(ok, "tern backup failed: {out}");
    assert!(out.contains("consistent at epoch"), "{out}");
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    let committed: Vec<Committed> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();

    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("BACKUP.json")).unwrap()).unwrap();
    let stop_epoch = manifest["stop_epoch"].as_u64().unwrap();
    let start_epoch = manifest["start_epoch"].as_u64().unwrap();
    let logged: u64 = manifest["tables"].as_array().unwrap().iter().map(|t| t["log_entries"].as_u64().unwrap()).sum();
    // The writes overlapped the backup on both sides of its end epoch, and the log caught them.
    let during = committed.iter().filter(|(e, _)| *e >= start_epoch && *e <= stop_epoch).count();
    let after = committed.iter().filter(|(e, _)| *e > stop_epoch).count();
    assert!(during > 0 && after > 0, "writes during the backup: {during}, after its end epoch: {after}");
    assert!(logged > 0, "the backup's change log caught nothing: {manifest}");
    println!(
        "backup: epochs {start_epoch}..={stop_epoch}, {} transactions ({during} during, {after} after), {logged} logged",
        committed.len()
    );

    // What the source held at the end epoch: the writers' tables from their commits (each
    // writer's own keys, in its commit order), the others as they are (nobody writes them).
    for (epoch, changes) in &committed {
        if *epoch <= stop_epoch {
            for (k, v) in changes {
                match v {
                    Some(r) => model.insert(*k, r.clone()),
                    None => model.remove(k),
                };
            }
        }
    }
    let mut expected = checksums(&c);
    for name in ["kv", "users"] {
        let rows = model.iter().filter(|((t, _), _)| *t == name).map(|(_, r)| r.clone());
        expected.insert(format!("shop.{name}"), digest(rows));
    }
    let items_max = 300u64;
    assert_eq!(expected["shop.items"].0, 300);

    // A second backup into the same directory is refused and leaves the first intact.
    let (ok, out) = tern(&["backup", "--addr", &addrs, "--dir", dir.to_str().unwrap()]);
    assert!(!ok && out.contains("already holds a backup"), "{out}");
    drop(c);
    drop(source);

    // Restore into a cluster of one data node.
    let (_target, target_addrs) = up(&tmp.path().join("target"), 1, 1);
    // A corrupt copy is refused before anything is written.
    let bad = tmp.path().join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), bad.join(e.file_name())).unwrap();
    }
    let data = bad.join(
        manifest["tables"].as_array().unwrap().iter().find(|t| t["name"] == "kv").unwrap()["data_file"]
            .as_str()
            .unwrap(),
    );
    let mut bytes = std::fs::read(&data).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&data, bytes).unwrap();
    let (ok, out) = tern(&["restore", "--addr", &target_addrs, "--dir", bad.to_str().unwrap()]);
    assert!(!ok && out.contains("is corrupt"), "{out}");

    let (ok, out) = tern(&["restore", "--addr", &target_addrs, "--dir", dir.to_str().unwrap()]);
    assert!(ok, "tern restore failed: {out}");
    let t = Client::connect(&target_addrs).unwrap();
    let restored = checksums(&t);
    for (name, want) in &expected {
        assert_eq!(restored.get(name), Some(want), "table {name} after the restore");
    }

    // The unique index holds, AUTO_INCREMENT continues above the restored rows.
    let users = t.table("shop", "users").unwrap();
    let (_, taken) = model.iter().find(|((n, _), _)| *n == "users").unwrap();
    let dup = users.insert(&[Value::Int(1_000_001), taken[1].clone()]).unwrap();
    let err = t.blocking().execute(vec![dup]).unwrap_err();
    assert_eq!(err.code, tern_client::ErrorCode::DuplicateKey, "{err}");
    let items = t.table("shop", "items").unwrap();
    assert!(t.next_auto_increment(items.id()).unwrap() > items_max);

    // The target holds rows now: another restore is refused.
    let (ok, out) = tern(&["restore", "--addr", &target_addrs, "--dir", dir.to_str().unwrap()]);
    assert!(!ok && out.contains("already holds rows"), "{out}");
}
