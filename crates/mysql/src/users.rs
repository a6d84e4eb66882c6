//! Accounts: `mysql.user` (User, Host, authentication_string, plugin: SHA1(SHA1(password)) for
//! `mysql_native_password`, a salted iterated SHA-256 for `caching_sha2_password`, NULL for no
//! password) and `mysql.db` (database grants; Db `*` is a global grant), ordinary Tern tables
//! created by the first CREATE USER. `root` has every privilege and no password until an account
//! row for it says otherwise (`tern up --root-password` gives it one at the first start).

use crate::server::SqlError;
use tern_client::{AbortOption, Client, DdlReq, Exec, OpResult, TableHandle};
use tern_types::{Column, ColumnType, Table, Value};

pub const DB: &str = "mysql";

/// What a signed-in user may reach: None = everything, else these databases.
pub type Grants = Option<Vec<String>>;

fn user_table() -> Table {
    let cols = vec![
        Column::new("User", ColumnType::VarChar { len: 32 }).not_null(),
        Column::new("Host", ColumnType::VarChar { len: 255 }).not_null(),
        Column::new("authentication_string", ColumnType::VarBinary { len: 255 }),
        Column::new("plugin", ColumnType::VarChar { len: 64 }),
    ];
    Table::new(DB, "user", cols, vec![0, 1])
}

/// How an account signs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plugin {
    /// `mysql_native_password`: SHA1(SHA1(password)) stored, a SHA-1 scramble answered.
    Native,
    /// `caching_sha2_password`: a salted, iterated SHA-256 stored; the first sign-in of an
    /// account on an API server sends the password over TLS, later ones a SHA-256 scramble
    /// checked against what that sign-in cached.
    CachingSha2,
}

impl Plugin {
    /// The plugin `IDENTIFIED WITH` names (None: the default, `mysql_native_password`, as
    /// MariaDB's and as MySQL 8 with `default_authentication_plugin=mysql_native_password`).
    pub fn named(name: Option<&str>) -> Result<Plugin, SqlError> {
        match name {
            None | Some(crate::proto::NATIVE_PASSWORD) => Ok(Plugin::Native),
            Some(crate::proto::CACHING_SHA2_PASSWORD) => Ok(Plugin::CachingSha2),
            Some(other) => Err(SqlError::new(1524, "HY000", format!("Plugin '{other}' is not loaded"))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Plugin::Native => crate::proto::NATIVE_PASSWORD,
            Plugin::CachingSha2 => crate::proto::CACHING_SHA2_PASSWORD,
        }
    }

    /// The stored form of `password` (NULL for none).
    fn stored(self, password: Option<&str>) -> Value {
        match password {
            Some(p) if !p.is_empty() => match self {
                Plugin::Native => Value::Bytes(crate::proto::native_password_hash(p.as_bytes()).to_vec()),
                Plugin::CachingSha2 => {
                    let mut salt = [0u8; 16];
                    tern_client::os_random(&mut salt);
                    Value::Bytes(crate::proto::sha2_stored(p.as_bytes(), &salt).into_bytes())
                }
            },
            _ => Value::Null,
        }
    }
}

/// An account's sign-in: its plugin and stored password (None: no password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub plugin: Plugin,
    pub stored: Option<Vec<u8>>,
}

impl Account {
    /// The SHA1(SHA1(password)) of a `mysql_native_password` account.
    pub fn native_hash(&self) -> Option<[u8; 20]> {
        self.stored.as_deref().and_then(|b| b.try_into().ok())
    }
}

/// The account row's values for `plugin` and the stored password, in the table's layout (tables
/// made before `plugin` existed have three columns and keep `mysql_native_password`).
fn account_row(t: &TableHandle, user: &str, host: &str, plugin: Plugin, stored: Value) -> Result<Vec<Value>, SqlError> {
    let mut row = vec![Value::str(user), Value::str(host), stored];
    if t.table.columns.len() > 3 {
        row.push(Value::str(plugin.name()));
    } else if plugin != Plugin::Native {
        return Err(SqlError::new(
            1524,
            "HY000",
            "Plugin 'caching_sha2_password' needs the account table of a newer Tern (mysql.user was made by an older version)",
        ));
    }
    Ok(row)
}

fn db_table() -> Table {
    let cols = vec![
        Column::new("User", ColumnType::VarChar { len: 32 }).not_null(),
        Column::new("Host", ColumnType::VarChar { len: 255 }).not_null(),
        Column::new("Db", ColumnType::VarChar { len: 64 }).not_null(),
    ];
    let mut t = Table::new(DB, "db", cols, vec![0, 1, 2]);
    // All grants of a user sit in one partition: one pruned scan reads them.
    t.partition_key = vec![0];
    t
}

/// The account tables, created when missing (the DDL is awaited, never blocked on).
pub async fn ensure_tables(client: &Client) -> Result<(TableHandle, TableHandle), SqlError> {
    if let (Some(u), Some(d)) = (client.cached_table(DB, "user"), client.cached_table(DB, "db")) {
        return Ok((u, d));
    }
    let c = client;
    c.ddl_async(DdlReq::CreateDatabase { name: DB.into(), if_not_exists: true }).await?;
    c.ddl_async(DdlReq::CreateTable { table: user_table(), if_not_exists: true }).await?;
    c.ddl_async(DdlReq::CreateTable { table: db_table(), if_not_exists: true }).await?;
    c.refresh_catalog_async().await?;
    Ok((c.table(DB, "user")?, c.table(DB, "db")?))
}

fn hosts_for(host: &str) -> Vec<String> {
    let mut v = vec![host.to_string(), "%".into(), "localhost".into(), "127.0.0.1".into(), "::1".into()];
    v.dedup();
    v
}

/// The account of `user` connecting from `host` (None: no account row).
pub async fn lookup(client: &Client, user: &str, host: &str) -> Result<Option<Account>, SqlError> {
    let h = match client.cached_table(DB, "user") {
        Some(h) => Some(h),
        None => match client.refresh_catalog_async().await {
            Ok(_) => client.cached_table(DB, "user"),
            Err(_) => None,
        },
    };
    let Some(h) = h else {
        return Ok(None);
    };
    let mut ops = Vec::new();
    for hst in hosts_for(host) {
        ops.push(h.read(&[Value::str(user), Value::str(&hst)]).map_err(SqlError::from)?);
    }
    let mut t = client.begin();
    let res = t.execute_with(ops, Exec::Commit, AbortOption::IgnoreError).await.map_err(SqlError::from)?;
    for r in res {
        if let OpResult::Row(b) = r {
            let row = h.decode_row(&b).map_err(SqlError::from)?;
            let plugin = match row.get(3) {
                Some(Value::Bytes(p)) if p == crate::proto::CACHING_SHA2_PASSWORD.as_bytes() => Plugin::CachingSha2,
                _ => Plugin::Native,
            };
            let stored = match &row[2] {
                Value::Bytes(b) if !b.is_empty() => Some(b.to_vec()),
                _ => None,
            };
            return Ok(Some(Account { plugin, stored }));
        }
    }
    Ok(None)
}

/// The databases `user` may use (None: all — root, or a global grant).
pub async fn grants(client: &Client, user: &str, host: &str) -> Result<Grants, SqlError> {
    if user == "root" {
        return Ok(None);
    }
    let Some(d) = client.cached_table(DB, "db") else { return Ok(Some(Vec::new())) };
    let mut spec = tern_client::ScanSpec::table(d.id());
    spec.filter = tern_client::Filter::Cmp { col: 0, op: tern_client::CmpOp::Eq, value: Value::str(user) };
    let rows = client.scan(spec).collect().await.map_err(SqlError::from)?;
    let hosts = hosts_for(host);
    let mut dbs = Vec::new();
    for r in rows {
        let v = d.decode_row(&r).map_err(SqlError::from)?;
        let (Value::Bytes(h), Value::Bytes(db)) = (&v[1], &v[2]) else { continue };
        if !hosts.iter().any(|x| x.as_bytes() == &h[..]) {
            continue;
        }
        if db == b"*" {
            return Ok(None);
        }
        dbs.push(String::from_utf8_lossy(db).into_owned());
    }
    Ok(Some(dbs))
}

async fn write(client: &Client, ops: Vec<tern_client::KeyOp>, abort: AbortOption) -> Result<Vec<OpResult>, SqlError> {
    let mut t = client.begin();
    t.execute_with(ops, Exec::Commit, abort).await.map_err(SqlError::from)
}

fn failed(op: &str, user: &str, host: &str) -> SqlError {
    SqlError::new(1396, "HY000", format!("Operation {op} failed for '{user}'@'{host}'"))
}

pub async fn create_user(
    client: &Client,
    user: &str,
    host: &str,
    password: Option<&str>,
    plugin: Plugin,
    if_not_exists: bool,
) -> Result<(), SqlError> {
    let (u, _) = ensure_tables(client).await?;
    let row = account_row(&u, user, host, plugin, plugin.stored(password))?;
    let op = u.insert(&row).map_err(SqlError::from)?;
    match write(client, vec![op], AbortOption::IgnoreError).await?.into_iter().next() {
        Some(OpResult::Error(e)) if e.code == tern_types::ErrorCode::DuplicateKey => {
            if if_not_exists {
                Ok(())
            } else {
                Err(failed("CREATE USER", user, host))
            }
        }
        Some(OpResult::Error(e)) => Err(SqlError::from(e)),
        _ => Ok(()),
    }
}

pub async fn alter_user(
    client: &Client,
    user: &str,
    host: &str,
    password: &str,
    plugin: Plugin,
) -> Result<(), SqlError> {
    let (u, _) = ensure_tables(client).await?;
    let row = account_row(&u, user, host, plugin, plugin.stored(Some(password)))?;
    // root may set a password without an account row yet.
    let op = if user == "root" {
        u.write(&row).map_err(SqlError::from)?
    } else {
        let updates = row
            .into_iter()
            .enumerate()
            .skip(2)
            .map(|(col, v)| tern_client::ColumnUpdate { col: col as u16, expr: tern_client::UpdateExpr::Set(v) })
            .collect();
        u.update(&[Value::str(user), Value::str(host)], updates).map_err(SqlError::from)?
    };
    match write(client, vec![op], AbortOption::IgnoreError).await?.into_iter().next() {
        Some(OpResult::NotFound) => Err(failed("ALTER USER", user, host)),
        Some(OpResult::Error(e)) => Err(SqlError::from(e)),
        _ => Ok(()),
    }
}

pub async fn drop_user(client: &Client, user: &str, host: &str, if_exists: bool) -> Result<(), SqlError> {
    let (u, d) = ensure_tables(client).await?;
    let op = u.delete(&[Value::str(user), Value::str(host)]).map_err(SqlError::from)?;
    let res = write(client, vec![op], AbortOption::IgnoreError).await?;
    if matches!(res.first(), Some(OpResult::NotFound)) && !if_exists {
        return Err(failed("DROP USER", user, host));
    }
    // Its grants go too.
    let mut spec = tern_client::ScanSpec::table(d.id());
    spec.filter = tern_client::Filter::Cmp { col: 0, op: tern_client::CmpOp::Eq, value: Value::str(user) };
    let rows = client.scan(spec).collect().await.map_err(SqlError::from)?;
    let mut ops = Vec::new();
    for r in rows {
        let v = d.decode_row(&r).map_err(SqlError::from)?;
        if v[1] == Value::str(host) {
            ops.push(d.delete(&v).map_err(SqlError::from)?);
        }
    }
    if !ops.is_empty() {
        write(client, ops, AbortOption::IgnoreError).await?;
    }
    Ok(())
}

pub async fn grant(client: &Client, db: &str, user: &str, host: &str, revoke: bool) -> Result<(), SqlError> {
    let (u, d) = ensure_tables(client).await?;
    let exists = {
        let op = u.read(&[Value::str(user), Value::str(host)]).map_err(SqlError::from)?;
        matches!(write(client, vec![op], AbortOption::IgnoreError).await?.first(), Some(OpResult::Row(_)))
    };
    if !exists && user != "root" {
        return Err(SqlError::new(
            1410,
            "42000",
            format!("You are not allowed to create a user with GRANT ('{user}'@'{host}' does not exist)"),
        ));
    }
    let key = [Value::str(user), Value::str(host), Value::str(db)];
    let op = if revoke { d.delete(&key) } else { d.write(&key) }.map_err(SqlError::from)?;
    match write(client, vec![op], AbortOption::IgnoreError).await?.into_iter().next() {
        Some(OpResult::NotFound) if revoke => Err(SqlError::new(
            1141,
            "42000",
            format!("There is no such grant defined for user '{user}' on host '{host}'"),
        )),
        Some(OpResult::Error(e)) => Err(SqlError::from(e)),
        _ => Ok(()),
    }
}

/// Gives root `password` unless it has one already (the first start of `tern up
/// --root-password`); true when it was set now.
pub async fn ensure_root_password(client: &Client, password: &str) -> Result<bool, SqlError> {
    if lookup(client, "root", "localhost").await?.is_some_and(|a| a.stored.is_some()) {
        return Ok(false);
    }
    alter_user(client, "root", "localhost", password, Plugin::Native).await?;
    Ok(true)
}

/// Whether root signs in with a password.
pub async fn root_has_password(client: &Client) -> Result<bool, SqlError> {
    Ok(lookup(client, "root", "localhost").await?.is_some_and(|a| a.stored.is_some()))
}
