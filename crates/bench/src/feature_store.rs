//! `tern bench feature-store`: feature vectors per second and latency of the Feature Store REST
//! API at batch 1 (`/0.1.0/feature_store`) and larger batches (`/0.1.0/batch_feature_store`).
//!
//! Setup (idempotent): the metadata tables from `crates/rest/feature_store_metadata.sql` and a
//! feature view `fsbench.user_features` v1 over two feature groups joined on the user id
//! (`users_1`: 4 features, `activity_1` with the prefix `act_`: 3 features), both created through
//! the MySQL front end with the `mariadb` client; then `rows` users are written to both online
//! tables through the native client. Each thread keeps one keep-alive HTTP connection and asks
//! for random users; a vector is one entry.

use crate::rest::Http;
use crate::tpch::My;
use crate::{BenchRow, Measure, measure};
use std::time::{Duration, Instant};
use tern_client::{Client, Value};
use tern_types::rng::Rng;

const METADATA: &str = include_str!("../../rest/feature_store_metadata.sql");

/// The bench's feature store and view (ids far from what a user picks by hand).
const VIEW: &str = r#"
CREATE DATABASE IF NOT EXISTS fsbench;
CREATE TABLE IF NOT EXISTS fsbench.users_1 (id BIGINT NOT NULL PRIMARY KEY, age INT, country VARCHAR(20), score DOUBLE, signup DATE);
CREATE TABLE IF NOT EXISTS fsbench.activity_1 (id BIGINT NOT NULL PRIMARY KEY, clicks BIGINT, spend DECIMAL(10,2), last_seen TIMESTAMP NULL);
USE hopsworks;
REPLACE INTO feature_store (id, name, project_id) VALUES (900001, 'fsbench', 900001);
REPLACE INTO feature_group (id, name, feature_store_id, version, online_enabled) VALUES
  (900001, 'users', 900001, 1, 1), (900002, 'activity', 900001, 1, 1);
REPLACE INTO feature_view (id, name, feature_store_id, version) VALUES (900001, 'user_features', 900001, 1);
REPLACE INTO training_dataset_join (id, feature_group, idx, prefix, feature_view_id) VALUES
  (900001, 900001, 0, NULL, 900001), (900002, 900002, 1, 'act_', 900001);
REPLACE INTO training_dataset_feature (id, feature_group, name, type, td_join, idx, label, feature_view_id) VALUES
  (900001, 900001, 'id', 'bigint', 900001, 0, 0, 900001), (900002, 900001, 'age', 'int', 900001, 1, 0, 900001),
  (900003, 900001, 'country', 'string', 900001, 2, 0, 900001), (900004, 900001, 'score', 'double', 900001, 3, 0, 900001),
  (900005, 900001, 'signup', 'date', 900001, 4, 0, 900001), (900006, 900002, 'id', 'bigint', 900002, 5, 0, 900001),
  (900007, 900002, 'clicks', 'bigint', 900002, 6, 0, 900001), (900008, 900002, 'spend', 'decimal', 900002, 7, 0, 900001),
  (900009, 900002, 'last_seen', 'timestamp', 900002, 8, 0, 900001);
REPLACE INTO serving_key (id, prefix, feature_name, join_on, join_index, feature_group_id, required, feature_view_id) VALUES
  (900001, NULL, 'id', NULL, 0, 900001, 1, 900001), (900002, 'act_', 'id', 'id', 1, 900002, 0, 900001);
"#;

#[derive(Debug, Clone)]
pub struct FeatureStoreOptions {
    pub datanode: String,
    pub mysql: String,
    pub rest: String,
    pub rows: u64,
    pub threads: Vec<usize>,
    pub batches: Vec<usize>,
    pub seconds: f64,
}

/// Creates the metadata and the view, and writes `rows` users.
pub fn load(o: &FeatureStoreOptions) -> Result<(), String> {
    let my = My::new(&o.mysql)?;
    let timeout = Duration::from_secs(120);
    my.run(None, METADATA, timeout).map_err(|e| format!("loading the metadata tables: {e}"))?;
    my.run(None, VIEW, timeout).map_err(|e| format!("creating the bench's feature view: {e}"))?;
    let client = Client::connect(&o.datanode).map_err(|e| e.to_string())?;
    client.refresh_catalog().map_err(|e| e.to_string())?;
    let users = client.table("fsbench", "users_1").map_err(|e| e.to_string())?;
    let activity = client.table("fsbench", "activity_1").map_err(|e| e.to_string())?;
    let b = client.blocking();
    let e = |e: tern_client::TernError| e.to_string();
    let mut i = 0;
    while i < o.rows {
        let end = (i + 200).min(o.rows);
        let mut ops = Vec::with_capacity(400);
        for r in i..end {
            let id = Value::Int(r as i64);
            ops.push(
                users
                    .write(&[
                        id.clone(),
                        Value::Int(18 + (r % 60) as i64),
                        Value::str(["SE", "DE", "US", "BR"][(r % 4) as usize]),
                        Value::Double(r as f64 / 7.0),
                        Value::Date(18_000 + (r % 2000) as i32),
                    ])
                    .map_err(e)?,
            );
            ops.push(
                activity
                    .write(&[
                        id,
                        Value::Int((r * 13 % 1000) as i64),
                        Value::Decimal { v: (r * 37 % 100_000) as i128, scale: 2 },
                        Value::Timestamp(1_700_000_000_000_000 + r as i64 * 1_000_000),
                    ])
                    .map_err(e)?,
            );
        }
        b.execute(ops).map_err(e)?;
        i = end;
    }
    Ok(())
}

/// The REST server's process id, from its metrics (0 if unknown).
fn rest_pid(rest: &str) -> u32 {
    let Ok(mut h) = Http::connect(rest) else { return 0 };
    let Ok((200, body)) = h.request("GET", "/metrics", "") else { return 0 };
    body.lines().find_map(|l| l.strip_prefix("tern_rest_process_pid ")).and_then(|v| v.trim().parse().ok()).unwrap_or(0)
}

/// Runs the suite; one row per threads × batch.
pub fn run(o: &FeatureStoreOptions) -> Result<Vec<BenchRow>, String> {
    load(o)?;
    let pid = rest_pid(&o.rest);
    let mut out = Vec::new();
    for &threads in &o.threads {
        for &batch in &o.batches {
            out.push(run_one(o, threads, batch.max(1), pid)?);
        }
    }
    Ok(out)
}

fn request(batch: usize, rng: &mut Rng, rows: u64) -> (&'static str, String) {
    let head =
        r#"{"featureStoreName": "fsbench", "featureViewName": "user_features", "featureViewVersion": 1, "entries": "#;
    if batch == 1 {
        return ("/0.1.0/feature_store", format!("{head}{{\"id\": {}}}}}", rng.below(rows)));
    }
    let mut b = String::with_capacity(head.len() + 16 * batch);
    b.push_str(head);
    b.push('[');
    for j in 0..batch {
        if j > 0 {
            b.push(',');
        }
        b.push_str(&format!("{{\"id\": {}}}", rng.below(rows)));
    }
    b.push_str("]}");
    ("/0.1.0/batch_feature_store", b)
}

fn run_one(o: &FeatureStoreOptions, threads: usize, batch: usize, pid: u32) -> Result<BenchRow, String> {
    let name = format!("feature-store-{}", if batch == 1 { "single" } else { "batch" });
    let m = Measure { name, threads, batch, seconds: o.seconds, server_pid: pid };
    let setup = |t: usize| Ok((Http::connect(&o.rest)?, Rng::new(t as u64 + 1)));
    measure(m, setup, |(http, rng): &mut (Http, Rng)| {
        let (path, body) = request(batch, rng, o.rows.max(1));
        let t0 = Instant::now();
        let (st, resp) = http.request("POST", path, &body)?;
        let took = t0.elapsed();
        if st != 200 || !resp.contains("COMPLETE") {
            return Err(format!("the feature store answered {st}: {resp}"));
        }
        Ok((batch as u64, took))
    })
}
