//! API keys (interfaces.md §1.5): `X-API-KEY: <16-character prefix>.<secret>`. A key is valid
//! when hex(sha256(secret + salt)) equals the hash stored for its prefix; it grants the databases
//! stored with it. Keys live in a table Tern owns (`tern_sys.api_keys`), read through the native
//! client and cached (refreshed every `refresh`).

use crate::error::RestError;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tern_client::{Client, Column, ColumnType, DdlReq, Exec, OpResult, Table, TableHandle, TernError, Value};
use tern_types::sha256::sha256_hex;

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

/// Checks keys against the key table, with a cache.
pub struct ApiKeys {
    client: Client,
    refresh: Duration,
    cache: Mutex<HashMap<String, (Instant, Option<Entry>)>>,
}

impl ApiKeys {
    pub fn new(client: Client, refresh: Duration) -> ApiKeys {
        ApiKeys { client, refresh, cache: Mutex::new(HashMap::new()) }
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
        for db in dbs {
            if !e.dbs.iter().any(|d| d == db) {
                return Err(denied(db));
            }
        }
        Ok(())
    }
}
