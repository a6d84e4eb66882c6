//! Accounts: `mysql.user` (User, Host, authentication_string, plugin: SHA1(SHA1(password)) for
//! `mysql_native_password`, a salted iterated SHA-256 for `caching_sha2_password`, NULL for no
//! password) and `mysql.grants` (User, Host, Db, Table_name, Privs: privileges per level — Db
//! `*` the global level, Table_name `*` a database's), ordinary Tern tables created by the first
//! CREATE USER or GRANT. `mysql.db` rows (User, Host, Db) written by earlier versions still count
//! as ALL PRIVILEGES on that database (Db `*`: every privilege everywhere). `root` has every
//! privilege and no password until an account row for it says otherwise (`tern up
//! --root-password` gives it one at the first start). A session reads its privileges when it
//! signs in (and on COM_CHANGE_USER); GRANT and REVOKE apply to later sign-ins.

use tern_client::{AbortOption, Client, DdlReq, Exec, OpResult, TableHandle};
use tern_sql::SqlError;
use tern_types::{Column, ColumnType, Table, Value};

pub const DB: &str = "mysql";

/// What a signed-in user may do: None = everything (root).
pub type Grants = Option<std::sync::Arc<Privileges>>;

use std::collections::HashMap;
use tern_sql::ast::GrantLevel;
use tern_sql::privs;

/// A user's privileges per level (`tern_sql::privs` bits).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Privileges {
    pub global: u16,
    pub dbs: HashMap<String, u16>,
    pub tables: HashMap<(String, String), u16>,
}

impl Privileges {
    /// Everything held on table `db.t` (its own grants, its database's and the global ones).
    pub fn on_table(&self, db: &str, t: &str) -> u16 {
        self.on_db(db) | self.tables.get(&(db.to_string(), t.to_string())).copied().unwrap_or(0)
    }

    pub fn on_db(&self, db: &str) -> u16 {
        self.global | self.dbs.get(db).copied().unwrap_or(0)
    }

    /// Whether anything in `db` may be used (SHOW DATABASES lists it, USE works).
    pub fn sees_db(&self, db: &str) -> bool {
        self.on_db(db) & !privs::GRANT != 0 || self.tables.iter().any(|((d, _), p)| d == db && *p & !privs::GRANT != 0)
    }

    /// CREATE/DROP/ALTER USER, KILL of others, others' grants: a global GRANT OPTION.
    pub fn is_admin(&self) -> bool {
        self.global & privs::GRANT != 0
    }

    fn add(&mut self, db: &str, t: &str, p: u16) {
        match (db, t) {
            ("*", _) => self.global |= p,
            (_, "*") => *self.dbs.entry(db.to_string()).or_default() |= p,
            _ => *self.tables.entry((db.to_string(), t.to_string())).or_default() |= p,
        }
    }

    /// SHOW GRANTS' lines for `user`.
    pub fn describe(&self, user: &str) -> Vec<String> {
        let with = |p: u16| if p & privs::GRANT != 0 { " WITH GRANT OPTION" } else { "" };
        let mut out =
            vec![format!("GRANT {} ON *.* TO `{user}`@`%`{}", privs::describe(self.global), with(self.global))];
        let mut dbs: Vec<_> = self.dbs.iter().filter(|(_, p)| **p != 0).collect();
        dbs.sort();
        for (d, p) in dbs {
            out.push(format!("GRANT {} ON `{d}`.* TO `{user}`@`%`{}", privs::describe(*p), with(*p)));
        }
        let mut tables: Vec<_> = self.tables.iter().filter(|(_, p)| **p != 0).collect();
        tables.sort();
        for ((d, t), p) in tables {
            out.push(format!("GRANT {} ON `{d}`.`{t}` TO `{user}`@`%`{}", privs::describe(*p), with(*p)));
        }
        out
    }
}

/// MySQL's 1142 for `command` (SELECT, INSERT, GRANT ...) on `table`.
pub fn table_denied(command: &str, user: &str, host: &str, table: &str) -> SqlError {
    SqlError::new(1142, "42000", format!("{command} command denied to user '{user}'@'{host}' for table '{table}'"))
}

/// MySQL's 1044 for database `db`.
pub fn db_denied(user: &str, host: &str, db: &str) -> SqlError {
    SqlError::new(1044, "42000", format!("Access denied for user '{user}'@'{host}' to database '{db}'"))
}

/// A grant level as stored: (Db, Table_name) with `*` for "all".
pub fn level_key(level: &GrantLevel, current_db: Option<&str>) -> Result<(String, String), SqlError> {
    let db = |d: &Option<String>| {
        d.clone()
            .or_else(|| current_db.map(str::to_string))
            .ok_or_else(|| SqlError::new(1046, "3D000", "No database selected"))
    };
    Ok(match level {
        GrantLevel::Global => ("*".into(), "*".into()),
        GrantLevel::Database(d) => (db(d)?, "*".into()),
        GrantLevel::Table(d, t) => (db(d)?, t.clone()),
    })
}

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

fn grants_table() -> Table {
    let cols = vec![
        Column::new("User", ColumnType::VarChar { len: 32 }).not_null(),
        Column::new("Host", ColumnType::VarChar { len: 255 }).not_null(),
        Column::new("Db", ColumnType::VarChar { len: 64 }).not_null(),
        Column::new("Table_name", ColumnType::VarChar { len: 64 }).not_null(),
        Column::new("Privs", ColumnType::VarChar { len: 255 }).not_null(),
    ];
    let mut t = Table::new(DB, "grants", cols, vec![0, 1, 2, 3]);
    // All grants of a user sit in one partition: one pruned scan reads them.
    t.partition_key = vec![0];
    t
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

/// The privilege table, created when missing.
async fn ensure_grants_table(client: &Client) -> Result<TableHandle, SqlError> {
    if let Some(g) = client.cached_table(DB, "grants") {
        return Ok(g);
    }
    client.ddl_async(DdlReq::CreateTable { table: grants_table(), if_not_exists: true }).await?;
    client.refresh_catalog_async().await?;
    Ok(client.table(DB, "grants")?)
}

/// The rows of `t` whose first column is `user` and second one of `hosts`, decoded.
async fn rows_of(client: &Client, t: &TableHandle, user: &str, hosts: &[String]) -> Result<Vec<Vec<Value>>, SqlError> {
    let mut spec = tern_client::ScanSpec::table(t.id());
    spec.filter = tern_client::Filter::Cmp { col: 0, op: tern_client::CmpOp::Eq, value: Value::str(user) };
    let rows = client.scan(spec).collect().await.map_err(SqlError::from)?;
    let mut out = Vec::new();
    for r in rows {
        let v = t.decode_row(&r).map_err(SqlError::from)?;
        if matches!(&v[1], Value::Bytes(h) if hosts.iter().any(|x| x.as_bytes() == &h[..])) {
            out.push(v);
        }
    }
    Ok(out)
}

fn text(v: &Value) -> String {
    match v {
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    }
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

/// Bumped after every account or privilege statement through this process: sessions read
/// their privileges again before their next statement (`Session::refresh_grants`).
static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub fn generation() -> u64 {
    GENERATION.load(std::sync::atomic::Ordering::SeqCst)
}

/// Accounts or privileges may have changed.
pub fn changed() {
    GENERATION.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// What `user` may do (None: everything — root, or a global grant of an earlier version).
pub async fn grants(client: &Client, user: &str, host: &str) -> Result<Grants, SqlError> {
    if user == "root" {
        return Ok(None);
    }
    let hosts = hosts_for(host);
    let mut p = Privileges::default();
    if let Some(d) = client.cached_table(DB, "db") {
        for v in rows_of(client, &d, user, &hosts).await? {
            let db = text(&v[2]);
            if db == "*" {
                return Ok(None);
            }
            p.add(&db, "*", privs::ALL);
        }
    }
    if let Some(g) = client.cached_table(DB, "grants") {
        for v in rows_of(client, &g, user, &hosts).await? {
            p.add(&text(&v[2]), &text(&v[3]), privs::from_text(&text(&v[4])));
        }
    }
    Ok(Some(std::sync::Arc::new(p)))
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
    if let Some(g) = client.cached_table(DB, "grants") {
        for v in rows_of(client, &g, user, &[host.to_string()]).await? {
            ops.push(g.delete(&v[..4]).map_err(SqlError::from)?);
        }
    }
    if !ops.is_empty() {
        write(client, ops, AbortOption::IgnoreError).await?;
    }
    Ok(())
}

/// GRANT `p` ON `level` TO user@host, or REVOKE (`level` None: every level). The caller checked
/// that it may.
pub async fn grant(
    client: &Client,
    p: u16,
    level: Option<(String, String)>,
    user: &str,
    host: &str,
    revoke: bool,
) -> Result<(), SqlError> {
    let (u, d) = ensure_tables(client).await?;
    let g = ensure_grants_table(client).await?;
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
    let hosts = [host.to_string()];
    let mut ops = Vec::new();
    let Some((db, table)) = level else {
        // REVOKE ALL PRIVILEGES, GRANT OPTION FROM u: every grant row goes.
        for v in rows_of(client, &g, user, &hosts).await? {
            ops.push(g.delete(&v[..4]).map_err(SqlError::from)?);
        }
        for v in rows_of(client, &d, user, &hosts).await? {
            ops.push(d.delete(&v[..3]).map_err(SqlError::from)?);
        }
        if !ops.is_empty() {
            write(client, ops, AbortOption::IgnoreError).await?;
        }
        return Ok(());
    };
    let key = [Value::str(user), Value::str(host), Value::str(&db), Value::str(&table)];
    let mut held = match write(client, vec![g.read(&key).map_err(SqlError::from)?], AbortOption::IgnoreError)
        .await?
        .into_iter()
        .next()
    {
        Some(OpResult::Row(b)) => privs::from_text(&text(&g.decode_row(&b).map_err(SqlError::from)?[4])),
        _ => 0,
    };
    // A database grant of an earlier version (ALL PRIVILEGES) moves into the new table.
    if table == "*" {
        let old = [Value::str(user), Value::str(host), Value::str(&db)];
        if let Some(OpResult::Row(_)) =
            write(client, vec![d.read(&old).map_err(SqlError::from)?], AbortOption::IgnoreError).await?.first()
        {
            held |= if db == "*" { privs::ALL | privs::GRANT } else { privs::ALL };
            ops.push(d.delete(&old).map_err(SqlError::from)?);
        }
    }
    let now = if revoke { held & !p } else { held | p };
    if revoke && held & p == 0 && p != 0 {
        return Err(SqlError::new(
            1141,
            "42000",
            format!("There is no such grant defined for user '{user}' on host '{host}'"),
        ));
    }
    if now == 0 {
        ops.push(g.delete(&key).map_err(SqlError::from)?);
    } else {
        let mut row = key.to_vec();
        row.push(Value::str(&privs::to_text(now)));
        ops.push(g.write(&row).map_err(SqlError::from)?);
    }
    for r in write(client, ops, AbortOption::IgnoreError).await? {
        if let OpResult::Error(e) = r {
            return Err(SqlError::from(e));
        }
    }
    Ok(())
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
