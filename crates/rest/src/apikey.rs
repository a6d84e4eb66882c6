//! API keys (interfaces.md §1.5): `X-API-KEY: <16-character prefix>.<secret>`. A key is valid
//! when hex(sha256(secret + salt)) equals the hash stored for its prefix; it grants the databases
//! stored with it. Keys live in a table Tern owns (`tern_sys.api_keys`), read through the native
//! client and cached (refreshed every `refresh`).

use crate::error::RestError;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tern_client::{Client, Column, ColumnType, DdlReq, Exec, OpResult, Table, TableHandle, TernError, Value};
use tern_types::digest::sha256_hex;

pub const KEY_DB: &str = "tern_sys";
pub const KEY_TABLE: &str = "api_keys";
pub const PREFIX_LEN: usize = 16;
pub const REFRESH_DEFAULT: Duration = Duration::from_secs(10);

fn key_table() -> Table {
    let mut t = Table::new(
        KEY_DB,
        KEY_TABLE,
        vec![
            Column::new("prefix", ColumnType::VarChar { len: PREFIX_LEN as u32 }).not_null(),
            Column::new("secret_sha256", ColumnType::Char { len: 64 }).not_null(),
            Column::new("salt", ColumnType::VarChar { len: 64 }).not_null(),
            Column::new("dbs", ColumnType::Text).not_null(),
        ],
        vec![0],
    );
    t.comment = "REST API keys".into();
    t
}

/// Creates the key table if it is missing.
pub fn ensure_key_table(client: &Client) -> Result<TableHandle, TernError> {
    client.ddl(DdlReq::CreateDatabase { name: KEY_DB.into(), if_not_exists: true })?;
    client.ddl(DdlReq::CreateTable { table: key_table(), if_not_exists: true })?;
    client.table(KEY_DB, KEY_TABLE)
}

/// Stores a new key for `dbs` and returns it (`prefix.secret`). `random` supplies entropy: at
/// least 64 bytes.
pub fn create_key(client: &Client, dbs: &[String], random: &[u8]) -> Result<String, TernError> {
    assert!(random.len() >= 64, "64 random bytes");
    const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let pick = |b: &[u8]| b.iter().map(|&x| ALNUM[x as usize % ALNUM.len()] as char).collect::<String>();
    let prefix = pick(&random[..PREFIX_LEN]);
    let secret = pick(&random[PREFIX_LEN..48]);
    let salt: String = random[48..64].iter().map(|b| format!("{b:02x}")).collect();
    let t = ensure_key_table(client)?;
    let hash = sha256_hex(format!("{secret}{salt}").as_bytes());
    let row = [Value::str(&prefix), Value::str(&hash), Value::str(&salt), Value::str(&dbs.join(","))];
    client.blocking().execute(vec![t.insert(&row)?])?;
    Ok(format!("{prefix}.{secret}"))
}

#[derive(Clone)]
struct Entry {
    hash: String,
    salt: String,
    dbs: Vec<String>,
}

/// Requests per second one key may make, with bursts of `burst` (a token bucket per key).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    pub per_second: f64,
    pub burst: f64,
}

/// A key's bucket: tokens left and when they were counted.
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Buckets kept at most (full buckets are dropped first: they hold no state worth keeping).
const BUCKETS_MAX: usize = 100_000;

/// The token buckets of every key.
pub struct Limiter {
    limit: RateLimit,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl Limiter {
    pub fn new(limit: RateLimit) -> Limiter {
        Limiter { limit, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one request from `key`'s bucket at `now`; false when it is empty.
    pub fn take(&self, key: &str, now: Instant) -> bool {
        let l = self.limit;
        let mut b = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if b.len() >= BUCKETS_MAX && !b.contains_key(key) {
            b.retain(|_, x| x.tokens + now.saturating_duration_since(x.at).as_secs_f64() * l.per_second < l.burst);
            if b.len() >= BUCKETS_MAX {
                b.clear();
            }
        }
        let e = b.entry(key.to_string()).or_insert(Bucket { tokens: l.burst, at: now });
        e.tokens = (e.tokens + now.saturating_duration_since(e.at).as_secs_f64() * l.per_second).min(l.burst);
        e.at = e.at.max(now);
        if e.tokens < 1.0 {
            return false;
        }
        e.tokens -= 1.0;
        true
    }
}

/// Checks keys against the key table, with a cache.
pub struct ApiKeys {
    client: Client,
    refresh: Duration,
    cache: Mutex<HashMap<String, (Instant, Option<Entry>)>>,
    limiter: Option<Limiter>,
}

impl ApiKeys {
    pub fn new(client: Client, refresh: Duration, limit: Option<RateLimit>) -> ApiKeys {
        ApiKeys { client, refresh, cache: Mutex::new(HashMap::new()), limiter: limit.map(Limiter::new) }
    }

    async fn entry(&self, prefix: &str) -> Result<Option<Entry>, RestError> {
        if let Some((at, e)) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).get(prefix)
            && at.elapsed() < self.refresh
        {
            return Ok(e.clone());
        }
        let Some(t) = self.client.catalog().find_table(KEY_DB, KEY_TABLE).cloned() else {
            return Ok(None);
        };
        let t = TableHandle::new(t);
        let op = t.read(&[Value::str(prefix)]).map_err(RestError::from)?;
        let mut txn = self.client.begin();
        let r = txn.execute(vec![op], Exec::Commit).await.map_err(RestError::from)?;
        let e = match r.into_iter().next() {
            Some(OpResult::Row(b)) => {
                let v = t.decode_row(&b).map_err(RestError::from)?;
                let text = |x: &Value| match x {
                    Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
                    _ => String::new(),
                };
                Some(Entry {
                    hash: text(&v[1]),
                    salt: text(&v[2]),
                    dbs: text(&v[3]).split(',').map(str::to_string).collect(),
                })
            }
            _ => None,
        };
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() > 100_000 {
            cache.clear();
        }
        cache.insert(prefix.to_string(), (Instant::now(), e.clone()));
        Ok(e)
    }

    /// Checks the `X-API-KEY` header value against the databases a request touches.
    pub async fn check(&self, header: Option<&str>, dbs: &[&str]) -> Result<(), RestError> {
        let Some(key) = header else { return Err(RestError::bad_request("the apikey is nil")) };
        let Some((prefix, secret)) = key.split_once('.') else {
            return Err(RestError::bad_request("the apikey has an incorrect format"));
        };
        if prefix.len() != PREFIX_LEN || secret.is_empty() || !prefix.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(RestError::bad_request("the apikey has an incorrect format"));
        }
        let first = dbs.first().copied().unwrap_or("");
        let denied = |db: &str| RestError::new(401, format!("API key not authorized to access {db}"));
        let Some(e) = self.entry(prefix).await? else { return Err(denied(first)) };
        if sha256_hex(format!("{secret}{}", e.salt).as_bytes()) != e.hash.trim_end() {
            return Err(denied(first));
        }
        if let Some(l) = &self.limiter
            && !l.take(prefix, Instant::now())
        {
            return Err(RestError::new(
                429,
                format!("API key rate limit exceeded: at most {} requests per second", l.limit.per_second),
            ));
        }
        for db in dbs {
            if !e.dbs.iter().any(|d| d == db) {
                return Err(denied(db));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_refill_at_the_rate_and_hold_the_burst() {
        let l = Limiter::new(RateLimit { per_second: 10.0, burst: 3.0 });
        let t0 = Instant::now();
        assert!((0..3).all(|_| l.take("a", t0)), "a full bucket holds the burst");
        assert!(!l.take("a", t0));
        assert!(l.take("b", t0), "keys have buckets of their own");
        assert!(!l.take("a", t0 + Duration::from_millis(50)), "half a token");
        assert!(l.take("a", t0 + Duration::from_millis(100)));
        assert!(!l.take("a", t0 + Duration::from_millis(100)));
        // A long pause refills only up to the burst.
        let later = t0 + Duration::from_secs(60);
        assert!((0..3).all(|_| l.take("a", later)));
        assert!(!l.take("a", later));
    }
}
