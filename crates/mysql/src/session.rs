//! A client session: its database, transaction, variables, prepared statements and cached
//! plans, and the dispatch of every statement kind to planning and execution.

use crate::proto::{self, ColumnDef, ty};
use crate::server::{SERVER_VERSION, SqlError, VERSION_COMMENT};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tern_client::{Client, DdlReq, ErrorCode, TableHandle};
use tern_sql::ast::*;
use tern_sql::limits::{self, Budget, DeadlineKind, Interrupt};
use tern_sql::parse::parse;
pub use tern_sql::parse::sql_error as parse_error;
use tern_sql::plan::{self, Catalog as _, InsertPlan, ModifyPlan, SelectPlan};
use tern_sql::run::{self, Env, Runner, Sess, TxnState};
use tern_sql::{ddl, eval, write};
use tern_types::Value;
use tern_types::error::ErrorClass;

/// A statement's answer.
pub enum Answer {
    Ok {
        affected: u64,
        last_insert_id: u64,
        info: String,
    },
    Rows {
        columns: Vec<ColumnDef>,
        rows: Vec<Vec<Value>>,
    },
    /// LOAD DATA LOCAL INFILE: the server asks the client for the file and feeds the job.
    LocalInfile(Box<tern_sql::load::LoadJob>),
}

impl Answer {
    fn ok() -> Answer {
        Answer::Ok { affected: 0, last_insert_id: 0, info: String::new() }
    }
    fn affected(n: u64) -> Answer {
        Answer::Ok { affected: n, last_insert_id: 0, info: String::new() }
    }
}

/// A planned statement.
pub enum Plan {
    Select(Box<SelectPlan>),
    Insert(Box<InsertPlan>),
    Update(Box<ModifyPlan>),
    Delete(Box<ModifyPlan>),
    /// Everything else runs from the statement itself.
    Other,
    /// A query only the engine runs (what the OLTP path does not parse or plan: derived tables,
    /// CTEs, window functions, ...), prepared: its text, run with the parameter values as
    /// literals in place of its `?`s, and the OLTP path's error, reported when the engine cannot
    /// parse the text either. (Its `Prepared::stmt` is a placeholder, never run.)
    Engine {
        sql: String,
        ours: SqlError,
    },
}

/// How long a session uses its privileges before it reads them again (changes through other API
/// servers reach it within this; those through its own at its next statement).
const GRANTS_TTL: std::time::Duration = std::time::Duration::from_secs(5);

/// A parsed and planned statement, shared by the caches.
pub struct Prepared {
    pub stmt: Statement,
    pub params: usize,
    pub plan: Plan,
    /// The catalog version the plan was made against.
    pub version: u64,
    pub db: Option<String>,
}

impl Prepared {
    /// Result columns (empty for statements without a result set).
    pub fn columns(&self) -> Vec<ColumnDef> {
        match &self.plan {
            Plan::Select(p) => p.columns.clone(),
            _ => Vec::new(),
        }
    }
}

/// A COM_STMT_PREPARE statement.
pub struct Stmt {
    pub prep: Arc<Prepared>,
    pub sql: Arc<str>,
    /// Parameter types from the last execute that sent them: (type, unsigned).
    pub types: Vec<(u8, bool)>,
    pub long_data: HashMap<u16, Vec<u8>>,
}

pub struct Session {
    pub client: Client,
    /// The planner met a table the cached catalog does not know (the async caller refreshes
    /// the catalog and plans again: the planner itself never waits for the data node).
    catalog_miss: std::sync::atomic::AtomicBool,
    pub conn_id: u32,
    pub user: String,
    pub host: String,
    /// Databases this user may use (None: all).
    pub grants: crate::users::Grants,
    /// The privilege generation (`users::generation`) `grants` was read at, and when.
    pub grants_gen: u64,
    pub grants_read: std::time::Instant,
    /// How often `grants` changed in this session (part of the plans' version).
    grants_changes: u64,
    /// The last statement's warnings (SHOW WARNINGS, the OK packet's count): (level, code,
    /// message).
    pub warnings: Vec<(&'static str, u32, String)>,
    pub db: Option<String>,
    pub ts: TxnState,
    pub autocommit: bool,
    pub vars: HashMap<String, Value>,
    /// Global variable values set with SET GLOBAL, shared by the server's sessions.
    pub globals: Globals,
    pub user_vars: HashMap<String, Value>,
    pub stmts: HashMap<u32, Stmt>,
    pub next_stmt: u32,
    /// SQL-level PREPARE name → the statement and its text.
    pub named: HashMap<String, (Arc<Prepared>, Arc<str>)>,
    pub cache: HashMap<String, Arc<Prepared>>,
    pub last_insert_id: AtomicU64,
    pub row_count: i64,
    pub found_rows: u64,
    /// Statements this session ran in the query engine (`SHOW STATUS`: `Tern_engine_queries`).
    pub engine_queries: u64,
    pub max_packet: usize,
    /// Set by `KILL` from another connection (shared with the server's connection list).
    pub interrupt: Arc<Interrupt>,
    /// The server's open connections (SHOW PROCESSLIST, KILL, max_connections).
    pub conns: Arc<crate::conns::Conns>,
}

const CACHE_MAX: usize = 512;

/// Global system variables set at run time (shared by every session of a server).
pub type Globals = Arc<std::sync::RwLock<HashMap<String, Value>>>;

impl Sess for Session {
    fn sysvar(&self, global: bool, name: &str) -> Result<Value, SqlError> {
        if !global && let Some(v) = self.vars.get(name) {
            return Ok(v.clone());
        }
        if global && let Some(v) = self.globals.read().unwrap_or_else(|e| e.into_inner()).get(name) {
            return Ok(v.clone());
        }
        self.default_var(name).ok_or_else(|| SqlError::new(1193, "HY000", format!("Unknown system variable '{name}'")))
    }
    fn uservar(&self, name: &str) -> Value {
        self.user_vars.get(name).cloned().unwrap_or(Value::Null)
    }
}

impl tern_sql::func::FnCtx for Session {
    fn now(&self) -> i64 {
        eval::now_micros()
    }
    fn database(&self) -> Option<String> {
        self.db.clone()
    }
    fn user(&self) -> String {
        format!("{}@localhost", self.user)
    }
    fn connection_id(&self) -> u32 {
        self.conn_id
    }
    fn last_insert_id(&self) -> u64 {
        self.last_insert_id.load(Ordering::Relaxed)
    }
    fn set_last_insert_id(&self, v: u64) {
        self.last_insert_id.store(v, Ordering::Relaxed)
    }
    fn row_count(&self) -> i64 {
        self.row_count
    }
    fn found_rows(&self) -> u64 {
        self.found_rows
    }
}

fn s(v: &str) -> Value {
    Value::Bytes(v.as_bytes().to_vec())
}

/// The variables clients ask for, with their values (session scope unless SET).
const VAR_NAMES: &[&str] = &[
    "autocommit",
    "tern_durable_commit",
    "version",
    "version_comment",
    "max_allowed_packet",
    "sql_mode",
    "character_set_client",
    "character_set_connection",
    "character_set_results",
    "character_set_server",
    "character_set_database",
    "character_set_system",
    "collation_connection",
    "collation_server",
    "collation_database",
    "time_zone",
    "system_time_zone",
    "transaction_isolation",
    "tx_isolation",
    "transaction_read_only",
    "tx_read_only",
    "lower_case_table_names",
    "wait_timeout",
    "interactive_timeout",
    "net_write_timeout",
    "net_read_timeout",
    "auto_increment_increment",
    "auto_increment_offset",
    "license",
    "init_connect",
    "performance_schema",
    "query_cache_size",
    "query_cache_type",
    "have_ssl",
    "hostname",
    "port",
    "sql_select_limit",
    "net_buffer_length",
    "innodb_lock_wait_timeout",
    "lock_wait_timeout",
    "default_storage_engine",
    "storage_engine",
    "last_insert_id",
    "identity",
    "max_execution_time",
    "max_statement_time",
    "max_query_memory",
    "sql_auto_is_null",
    "foreign_key_checks",
    "unique_checks",
    "sql_safe_updates",
    "group_concat_max_len",
    "version_compile_os",
    "version_compile_machine",
    "protocol_version",
    "datadir",
    "socket",
    "server_id",
    "sql_notes",
    "sql_warnings",
    "sql_quote_show_create",
    "names",
    "sql_log_bin",
    "session_track_schema",
    "session_track_system_variables",
    "session_track_state_change",
    "session_track_transaction_info",
    "explicit_defaults_for_timestamp",
    "div_precision_increment",
    "default_week_format",
    "max_connections",
    "ndb_use_exact_count",
    "ndb_autoincrement_prefetch_sz",
    "ndb_batch_size",
    "transaction_allow_batching",
    "ndb_read_backup",
    "optimizer_switch",
    "big_tables",
    "long_query_time",
    "profiling",
    "sql_big_selects",
    "table_open_cache",
    "thread_cache_size",
    "character_sets_dir",
    "resultset_metadata",
    "require_secure_transport",
    "default_authentication_plugin",
    "block_encryption_mode",
    "completion_type",
    "local_infile",
    "timestamp",
    "cte_max_recursion_depth",
    "information_schema_stats_expiry",
    "innodb_strict_mode",
    "max_sort_length",
    "sort_buffer_size",
    "join_buffer_size",
    "sql_require_primary_key",
    "time_format",
    "date_format",
    "datetime_format",
    "warning_count",
    "error_count",
    "event_scheduler",
    "skip_name_resolve",
];

impl Session {
    pub fn new(client: Client, conn_id: u32, user: &str, max_packet: usize) -> Session {
        Session {
            client,
            conn_id,
            user: user.to_string(),
            host: "localhost".into(),
            grants: None,
            grants_gen: 0,
            grants_read: std::time::Instant::now(),
            grants_changes: 0,
            warnings: Vec::new(),
            db: None,
            ts: TxnState::default(),
            autocommit: true,
            vars: HashMap::new(),
            globals: Globals::default(),
            user_vars: HashMap::new(),
            stmts: HashMap::new(),
            next_stmt: 1,
            named: HashMap::new(),
            cache: HashMap::new(),
            catalog_miss: Default::default(),
            last_insert_id: AtomicU64::new(0),
            row_count: -1,
            found_rows: 0,
            engine_queries: 0,
            max_packet,
            interrupt: Arc::default(),
            conns: Arc::default(),
        }
    }

    /// A new session takes the global values set so far (autocommit among them).
    pub fn start_from_globals(&mut self) {
        let g = self.globals.read().unwrap_or_else(|e| e.into_inner()).clone();
        for (k, v) in g {
            if k == "autocommit" {
                self.autocommit =
                    eval::truth(&v).unwrap_or(true) || matches!(&v, Value::Bytes(b) if b.eq_ignore_ascii_case(b"ON"));
            } else {
                self.vars.insert(k, v);
            }
        }
    }

    fn default_var(&self, name: &str) -> Option<Value> {
        Some(match name {
            "autocommit" => Value::Int(self.autocommit as i64),
            // COMMIT is answered once the transaction is on disk on every replica (else: in the
            // memory of every replica, on disk within an epoch). `[mysql] durable_commit` sets
            // the default.
            "tern_durable_commit" => Value::Int(self.client.durable_commits() as i64),
            "version" => s(SERVER_VERSION),
            "version_comment" => s(VERSION_COMMENT),
            "max_allowed_packet" => Value::Int(self.max_packet as i64),
            "sql_mode" => s(
                "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",
            ),
            "character_set_client"
            | "character_set_connection"
            | "character_set_results"
            | "character_set_server"
            | "character_set_database" => s("utf8mb4"),
            "character_set_system" => s("utf8mb3"),
            "collation_connection" | "collation_server" | "collation_database" => s("utf8mb4_bin"),
            "time_zone" => s("+00:00"),
            "system_time_zone" => s("UTC"),
            "transaction_isolation" | "tx_isolation" => s("READ-COMMITTED"),
            "transaction_read_only"
            | "tx_read_only"
            | "lower_case_table_names"
            | "performance_schema"
            | "query_cache_size"
            | "max_execution_time"
            | "sql_auto_is_null"
            | "sql_safe_updates"
            | "profiling"
            | "big_tables"
            | "innodb_strict_mode"
            | "sql_require_primary_key"
            | "warning_count"
            | "error_count"
            | "skip_name_resolve" => Value::Int(0),
            // Tables read at a local backup unless created with READ_BACKUP=0 (NDB's default
            // since 8.0.19).
            "ndb_read_backup" => Value::Int(1),
            "wait_timeout" | "interactive_timeout" => Value::Int(28800),
            "max_query_memory" => Value::UInt(limits::QUERY_MEMORY_DEFAULT),
            "max_statement_time" => Value::Double(0.0),
            "net_write_timeout" => Value::Int(60),
            "net_read_timeout" => Value::Int(30),
            "auto_increment_increment"
            | "auto_increment_offset"
            | "foreign_key_checks"
            | "unique_checks"
            | "sql_notes"
            | "sql_warnings"
            | "sql_quote_show_create"
            | "sql_log_bin"
            | "explicit_defaults_for_timestamp"
            | "ndb_use_exact_count"
            | "transaction_allow_batching"
            | "sql_big_selects"
            | "local_infile"
            | "server_id"
            | "protocol_version" => Value::Int(if name == "protocol_version" { 10 } else { 1 }),
            "license" => s("GPL"),
            "init_connect"
            | "session_track_system_variables"
            | "datadir"
            | "socket"
            | "character_sets_dir"
            | "optimizer_switch"
            | "block_encryption_mode"
            | "time_format"
            | "date_format"
            | "datetime_format" => s(""),
            "query_cache_type"
            | "have_ssl"
            | "session_track_schema"
            | "session_track_state_change"
            | "session_track_transaction_info"
            | "require_secure_transport"
            | "event_scheduler" => s("OFF"),
            "hostname" => s("localhost"),
            "port" => Value::Int(3306),
            "sql_select_limit" => Value::UInt(u64::MAX),
            "net_buffer_length" => Value::Int(16384),
            "innodb_lock_wait_timeout" | "lock_wait_timeout" => Value::Int(50),
            "default_storage_engine" | "storage_engine" => s("ndbcluster"),
            "last_insert_id" | "identity" => Value::UInt(self.last_insert_id.load(Ordering::Relaxed)),
            // MariaDB's default; the engine cuts GROUP_CONCAT results there.
            "group_concat_max_len" => Value::Int(1_048_576),
            "version_compile_os" => s("Linux"),
            "version_compile_machine" => s(std::env::consts::ARCH),
            "div_precision_increment" => Value::Int(4),
            "default_week_format" | "completion_type" => Value::Int(0),
            "max_connections" => Value::Int(self.conns.limit.max() as i64),
            "ndb_autoincrement_prefetch_sz" => Value::Int(512),
            "ndb_batch_size" => Value::Int(32768),
            "long_query_time" => Value::Double(10.0),
            "table_open_cache" => Value::Int(4000),
            "thread_cache_size" => Value::Int(9),
            "resultset_metadata" => s("FULL"),
            "default_authentication_plugin" => s("mysql_native_password"),
            "timestamp" => Value::Double(eval::now_micros() as f64 / 1e6),
            "cte_max_recursion_depth" => Value::Int(1000),
            "information_schema_stats_expiry" => Value::Int(86400),
            "max_sort_length" => Value::Int(1024),
            "sort_buffer_size" => Value::Int(262144),
            "join_buffer_size" => Value::Int(262144),
            _ => return None,
        })
    }

    /// A numeric system variable of this session (SET value, else the default), or `dflt`.
    fn var_f64(&self, name: &str, dflt: f64) -> f64 {
        let v = self.vars.get(name).cloned().or_else(|| self.default_var(name));
        v.and_then(|v| eval::to_f64(&v)).unwrap_or(dflt)
    }

    /// The allowance of the statement about to run: `max_query_memory`, and its deadline from
    /// `max_execution_time` (milliseconds, SELECT only, as MySQL) or `max_statement_time`
    /// (seconds, every statement, as MariaDB), whichever comes first.
    fn budget(&self, select: bool) -> Budget {
        let memory = self.var_f64("max_query_memory", limits::QUERY_MEMORY_DEFAULT as f64);
        let memory = if memory <= 0.0 { u64::MAX } else { memory as u64 };
        let now = std::time::Instant::now();
        let mut deadline = None;
        let ms = self.var_f64("max_execution_time", 0.0);
        if select && ms > 0.0 {
            deadline = Some((now + std::time::Duration::from_millis(ms as u64), DeadlineKind::ExecutionTime));
        }
        let secs = self.var_f64("max_statement_time", 0.0);
        if secs > 0.0 {
            let at = now + std::time::Duration::from_secs_f64(secs.min(1e9));
            if deadline.is_none_or(|(d, _)| at < d) {
                deadline = Some((at, DeadlineKind::StatementTime));
            }
        }
        Budget::new(memory, deadline, self.interrupt.clone())
    }

    /// How long the connection may wait for its next command: `interactive_timeout` for
    /// clients that said they are interactive, else `wait_timeout` (seconds; MySQL's 28800).
    pub fn idle_timeout(&self, interactive: bool) -> std::time::Duration {
        let name = if interactive { "interactive_timeout" } else { "wait_timeout" };
        std::time::Duration::from_secs_f64(self.var_f64(name, 28800.0).clamp(1.0, 31_536_000.0))
    }

    /// `KILL [QUERY] id`: stops connection `id`'s statement (`query`) or the connection. Others'
    /// connections need the administrator (MySQL's CONNECTION_ADMIN / SUPER).
    pub fn kill(&self, id: u32, query: bool) -> Result<(), SqlError> {
        let Some(c) = self.conns.get(id) else {
            return Err(SqlError::new(1094, "HY000", format!("Unknown thread id: {id}")));
        };
        if c.activity().user != self.user && !self.is_admin() {
            return Err(SqlError::new(1095, "HY000", format!("You are not owner of thread {id}")));
        }
        c.kill(!query);
        Ok(())
    }

    /// SHOW [FULL] PROCESSLIST: the connections this user may see (all for the administrator).
    fn process_list(&self, full: bool) -> Vec<Vec<Value>> {
        let opt = |v: Option<String>| v.map(|t| Value::Bytes(t.into_bytes())).unwrap_or(Value::Null);
        let mut rows = Vec::new();
        for c in self.conns.list() {
            let a = c.activity();
            if !self.is_admin() && a.user != self.user {
                continue;
            }
            let info = a.info.map(|i| if full { i } else { i.chars().take(crate::conns::INFO_SHORT).collect() });
            let state = if a.command == "Sleep" { "" } else { "executing" };
            rows.push(vec![
                Value::Int(c.id as i64),
                s(&a.user),
                s(&a.host),
                opt(a.db),
                s(a.command),
                Value::Int(a.since.elapsed().as_secs() as i64),
                s(state),
                opt(info),
            ]);
        }
        rows
    }

    pub fn status(&self) -> u16 {
        let mut st = 0;
        if self.autocommit {
            st |= proto::status::AUTOCOMMIT;
        }
        if self.ts.open && (self.ts.txn.is_some() || !self.autocommit || self.explicit_open()) {
            st |= proto::status::IN_TRANS;
        }
        st
    }

    fn explicit_open(&self) -> bool {
        self.ts.open && self.autocommit
    }

    /// What a cached plan was made for: the catalog version, and in the top bits how often the
    /// session's privileges changed (plans check privileges, so a REVOKE must not leave a plan
    /// that skipped its check).
    fn plan_version(&self) -> u64 {
        self.client.catalog().version ^ (self.grants_changes << 40)
    }

    /// Reads the session's privileges again when accounts or privileges changed through this API
    /// server, and every `GRANTS_TTL` otherwise (a change made through another API server):
    /// MySQL applies table and database privilege changes to a connected client from its next
    /// statement. A failed read keeps the old ones and is tried again at the next statement.
    pub async fn refresh_grants(&mut self) {
        let generation = crate::users::generation();
        if generation == self.grants_gen && self.grants_read.elapsed() < GRANTS_TTL {
            return;
        }
        if let Ok(g) = crate::users::grants(&self.client, &self.user, &self.host).await {
            if g != self.grants {
                self.grants = g;
                self.grants_changes += 1;
            }
            self.grants_gen = generation;
            self.grants_read = std::time::Instant::now();
        }
    }

    async fn refresh(&self) {
        let _ = self.client.refresh_catalog_async().await;
    }

    async fn ddl(&self, req: DdlReq) -> Result<(), SqlError> {
        self.client.ddl_async(req).await.map(|_| ()).map_err(SqlError::from)
    }

    /// Whether this user may use database `db` (1044 otherwise).
    pub fn check_db(&self, db: &str) -> Result<(), SqlError> {
        match &self.grants {
            Some(p) if !db.eq_ignore_ascii_case(tern_sql::infoschema::DB) && !p.sees_db(db) => {
                Err(crate::users::db_denied(&self.user, &self.host, db))
            }
            _ => Ok(()),
        }
    }

    /// Whether this user may administer (root, or a global GRANT OPTION).
    pub fn is_admin(&self) -> bool {
        self.grants.as_ref().is_none_or(|p| p.is_admin())
    }

    /// Needs `need` (`tern_sql::privs` bits) on table `db.t`: MySQL's 1142 otherwise.
    pub fn check_table(&self, db: &str, t: &str, need: u16) -> Result<(), SqlError> {
        let Some(p) = &self.grants else { return Ok(()) };
        if db.eq_ignore_ascii_case(tern_sql::infoschema::DB) {
            return Ok(());
        }
        let missing = need & !p.on_table(db, t);
        if missing == 0 {
            return Ok(());
        }
        Err(crate::users::table_denied(tern_sql::privs::command(missing), &self.user, &self.host, t))
    }

    /// Whether SHOW TABLES lists `db.t` for this user (any privilege on it).
    fn sees_table(&self, db: &str, t: &str) -> bool {
        db.eq_ignore_ascii_case(tern_sql::infoschema::DB)
            || self.grants.as_ref().is_none_or(|p| p.on_table(db, t) & tern_sql::privs::ALL != 0)
    }

    /// Needs `need` on database `db` as a whole (CREATE/DROP DATABASE): MySQL's 1044 otherwise.
    fn check_db_priv(&self, db: &str, need: u16) -> Result<(), SqlError> {
        match &self.grants {
            Some(p) if need & !p.on_db(db) != 0 => Err(crate::users::db_denied(&self.user, &self.host, db)),
            _ => Ok(()),
        }
    }

    /// What the analytic engine may read for this user.
    fn engine_access(&self) -> tern_engine::Access {
        // Every database: a table the user may not read fails with 1142 (as MySQL), not "no
        // such table".
        let dbs = self.client.databases();
        let Some(p) = self.grants.clone() else { return tern_engine::Access::dbs(dbs) };
        let (user, host) = (self.user.clone(), self.host.clone());
        let check: tern_engine::TableCheck = std::sync::Arc::new(move |db: &str, t: &str| {
            if p.on_table(db, t) & tern_sql::privs::SELECT != 0 {
                return Ok(());
            }
            Err(crate::users::table_denied("SELECT", &user, &host, t))
        });
        tern_engine::Access { dbs, table_check: Some(check) }
    }

    /// Account statements need a global grant.
    fn check_admin(&self, what: &str) -> Result<(), SqlError> {
        if !self.is_admin() {
            return Err(SqlError::new(
                1227,
                "42000",
                format!("Access denied; you need (at least one of) the {what} privilege(s) for this operation"),
            ));
        }
        Ok(())
    }

    pub async fn use_db(&mut self, db: &str) -> Result<(), SqlError> {
        self.check_db(db)?;
        if db.eq_ignore_ascii_case("information_schema") {
            self.db = Some("information_schema".into());
            return Ok(());
        }
        if db.eq_ignore_ascii_case(tern_sql::ndbinfo::DB) {
            self.db = Some(tern_sql::ndbinfo::DB.into());
            return Ok(());
        }
        if !self.client.databases().iter().any(|d| d == db) {
            self.refresh().await;
            if !self.client.databases().iter().any(|d| d == db) {
                return Err(SqlError::new(1049, "42000", format!("Unknown database '{db}'")));
            }
        }
        self.db = Some(db.to_string());
        Ok(())
    }

    fn need_db(&self, db: Option<&str>) -> Result<String, SqlError> {
        db.map(str::to_string)
            .or_else(|| self.db.clone())
            .ok_or_else(|| SqlError::new(1046, "3D000", "No database selected"))
    }

    /// Parses and plans (or takes from the cache) a statement text.
    pub async fn prepare(&mut self, sql: &str) -> Result<Arc<Prepared>, SqlError> {
        let version = self.plan_version();
        if let Some(p) = self.cache.get(sql)
            && p.version == version
            && p.db == self.db
        {
            return Ok(p.clone());
        }
        let parsed = parse(sql).map_err(|e| parse_error(e, sql))?;
        let prep = Arc::new(self.plan_fresh(parsed.stmt, parsed.params).await?);
        if matches!(prep.plan, Plan::Select(_) | Plan::Insert(_) | Plan::Update(_) | Plan::Delete(_)) {
            if self.cache.len() >= CACHE_MAX {
                self.cache.clear();
            }
            self.cache.insert(sql.to_string(), prep.clone());
        }
        Ok(prep)
    }

    /// `prepare` for COM_STMT_PREPARE and PREPARE: a query that only the engine runs is prepared
    /// for it (its parameters counted; its columns are known when it runs).
    pub async fn prepare_stmt(&mut self, sql: &str) -> Result<Arc<Prepared>, SqlError> {
        match self.prepare(sql).await {
            Err(e) if matches!(e.errno, 1064 | 1235) && is_query_text(sql) => {
                let Ok(toks) = tern_sql::lex::tokenize(sql) else { return Err(e) };
                let params = toks.iter().filter(|(t, _)| matches!(t, tern_sql::lex::Tok::Param)).count();
                Ok(Arc::new(Prepared {
                    stmt: Statement::Begin,
                    params,
                    plan: Plan::Engine { sql: sql.to_string(), ours: e },
                    version: self.plan_version(),
                    db: self.db.clone(),
                }))
            }
            r => r,
        }
    }

    /// Plans with the cached catalog; when it names a table the cache does not know, refreshes
    /// the catalog (awaited) and plans once more.
    async fn plan_fresh(&self, stmt: Statement, params: usize) -> Result<Prepared, SqlError> {
        self.catalog_miss.store(false, std::sync::atomic::Ordering::Relaxed);
        let version = self.plan_version();
        let plan = match self.make_plan(&stmt) {
            Err(_) if self.catalog_miss.load(std::sync::atomic::Ordering::Relaxed) => {
                self.refresh().await;
                return self.plan(stmt, params);
            }
            r => r?,
        };
        Ok(Prepared { stmt, params, plan, version, db: self.db.clone() })
    }

    fn plan(&self, stmt: Statement, params: usize) -> Result<Prepared, SqlError> {
        let version = self.plan_version();
        let plan = self.make_plan(&stmt)?;
        Ok(Prepared { stmt, params, plan, version, db: self.db.clone() })
    }

    fn make_plan(&self, stmt: &Statement) -> Result<Plan, SqlError> {
        let mut cat = CatalogView::new(self);
        // Also without grants: a write to a virtual database's table is refused by the view.
        cat.target = self.target_of(stmt);
        let db = self.db.as_deref();
        let plan = match &stmt {
            Statement::Select(q) => Plan::Select(Box::new(plan::plan_select(q, &cat, db)?)),
            Statement::Insert(i) => Plan::Insert(Box::new(plan::plan_insert(i, &cat, db)?)),
            Statement::Update(u) => Plan::Update(Box::new(plan::plan_modify(
                &u.table,
                u.filter.as_ref(),
                &u.sets,
                &u.order_by,
                u.limit.as_ref(),
                &cat,
                db,
            )?)),
            Statement::Delete(d) => Plan::Delete(Box::new(plan::plan_modify(
                &d.table,
                d.filter.as_ref(),
                &[],
                &d.order_by,
                d.limit.as_ref(),
                &cat,
                db,
            )?)),
            _ => Plan::Other,
        };
        Ok(plan)
    }

    /// The table an INSERT, UPDATE or DELETE writes and the privileges it needs there (INSERT;
    /// REPLACE also DELETE; ON DUPLICATE KEY UPDATE also UPDATE; UPDATE or DELETE, and SELECT
    /// too when a WHERE clause reads the table). Every other table a statement reads needs
    /// SELECT (`CatalogView`).
    fn target_of(&self, stmt: &Statement) -> Option<(String, String, u16)> {
        use tern_sql::privs::{DELETE, INSERT, SELECT, UPDATE};
        let (t, need) = match stmt {
            Statement::Insert(i) => {
                (&i.table, INSERT | if i.replace { DELETE } else { 0 } | if i.on_dup.is_empty() { 0 } else { UPDATE })
            }
            Statement::Update(u) => (&u.table, UPDATE | if u.filter.is_some() { SELECT } else { 0 }),
            Statement::Delete(d) => (&d.table, DELETE | if d.filter.is_some() { SELECT } else { 0 }),
            _ => return None,
        };
        let db = t.db.clone().or_else(|| self.db.clone())?;
        Some((db, t.name.clone(), need))
    }

    /// Runs a COM_QUERY text.
    pub async fn query(&mut self, sql: &str) -> Result<Answer, SqlError> {
        let head = sql.trim_start().get(..13).unwrap_or("").to_ascii_uppercase();
        if !(head.starts_with("SHOW WARNINGS") || head.starts_with("SHOW ERRORS") || head.starts_with("SHOW COUNT")) {
            self.warnings.clear();
        }
        if let Some((analyze, inner)) = explain_of(sql) {
            return self.explain(inner, analyze).await;
        }
        if let Some((db, table)) = reorganize_of(sql) {
            // NDB's online reorganisation after adding node groups: the partitions move while
            // the table serves (the statement returns once the move is asked for).
            let db = self.need_db(db.as_deref())?;
            self.check_db(&db)?;
            self.ddl(DdlReq::Reorganize { database: db, table }).await?;
            return Ok(Answer::ok());
        }
        let version = self.plan_version();
        let exact = self.cache.get(sql).is_some_and(|p| p.version == version && p.db == self.db);
        if !exact
            && let Some((norm, params)) = tern_sql::normalize::normalize(sql)
            && let Some(prep) = self.prepare_normalized(&norm, params.len())
        {
            if self.for_engine(&prep) {
                match self.engine_query(sql, None, column_names(&prep.stmt)).await {
                    Err(e) if engine_lacks(&e) => {}
                    r => return r,
                }
            }
            return self.execute(&prep, &params).await;
        }
        let prep = match self.prepare(sql).await {
            Ok(p) => p,
            // What the OLTP path does not parse or plan (derived tables, CTEs, correlated
            // subqueries, window functions, ...) may still be a query the engine runs.
            Err(e) if matches!(e.errno, 1064 | 1235) && is_query_text(sql) => {
                return self.engine_query(sql, Some(e), None).await;
            }
            Err(e) => return Err(e),
        };
        if self.for_engine(&prep) {
            match self.engine_query(sql, None, column_names(&prep.stmt)).await {
                Err(e) if engine_lacks(&e) => {}
                r => return r,
            }
        }
        self.execute(&prep, &[]).await
    }

    /// Whether a planned statement runs better in the query engine: a SELECT without locking
    /// reads, while the session holds no data-node transaction (the engine reads committed rows,
    /// so it would miss the transaction's own writes), that would join by scanning an inner
    /// table once per outer row, or that joins starting from a full scan of its first table (an
    /// analytic join: its nested loops would hold every joined row; the engine's hash joins
    /// build on one side and spill).
    fn for_engine(&self, prep: &Prepared) -> bool {
        // An aggregate over a join starting from a range of an index (TPC-H Q14: a month of
        // lineitem joined to part) is analytic too: the engine reads the range in parallel and
        // joins by hashing, where the nested loops evaluate row by row on one thread.
        fn ranged_aggregate(p: &SelectPlan) -> bool {
            p.srcs.len() > 1
                && p.grouped
                && matches!(&p.srcs[0].access, plan::Access::Index { ranges, .. }
                    if ranges.iter().any(|r| r.lo.is_some() || r.hi.is_some()))
        }
        fn scans_inner(p: &SelectPlan) -> bool {
            p.srcs.iter().skip(1).any(|s| matches!(s.access, plan::Access::Scan))
                || (p.srcs.len() > 1 && matches!(p.srcs[0].access, plan::Access::Scan))
                || ranged_aggregate(p)
                || p.subs.iter().any(scans_inner)
                || p.unions.iter().any(|(_, u)| scans_inner(u))
        }
        match &prep.plan {
            Plan::Select(p) => p.lock.is_none() && self.ts.txn.is_none() && scans_inner(p),
            _ => false,
        }
    }

    /// `EXPLAIN [FORMAT=TREE | EXTENDED | ANALYZE] <query>`: how the query runs, as one row of
    /// text in a column `EXPLAIN` (the shape of MySQL's FORMAT=TREE): the key-value path's
    /// tables, access paths and pushed conditions, or the engine's operator tree; ANALYZE runs
    /// the query and adds the rows it returned (and, in the engine, each operator's metrics —
    /// for Tern scans the keys read by key and by index ranges).
    async fn explain(&mut self, sql: &str, analyze: bool) -> Result<Answer, SqlError> {
        let text = match self.prepare(sql).await {
            Ok(prep) if !self.for_engine(&prep) => {
                let Plan::Select(p) = &prep.plan else {
                    return Err(SqlError::new(
                        1235,
                        "42000",
                        "This version of Tern doesn't yet support 'EXPLAIN of this statement'",
                    ));
                };
                let names = column_names(&prep.stmt).unwrap_or_default();
                let mut text = String::from("Key-value path:\n");
                {
                    let env = Env { params: &[], subs: Vec::new(), sess: &*self, newrow: None };
                    text.push_str(&tern_sql::ronsql::explain_tables(p, &names, &env));
                }
                if analyze {
                    self.interrupt.statement_starts();
                    if let Answer::Rows { rows, .. } = self.execute(&prep, &[]).await? {
                        text.push_str(&format!("Rows returned: {}\n", rows.len()));
                    }
                }
                text
            }
            Ok(_) => self.engine_explain(sql, analyze).await?,
            Err(e) if matches!(e.errno, 1064 | 1235) => match self.engine_explain(sql, analyze).await {
                Err(x) if x.errno == 1064 => return Err(e),
                r => r?,
            },
            Err(e) => return Err(e),
        };
        Ok(Answer::Rows {
            columns: vec![ColumnDef::expr("EXPLAIN", ty::VAR_STRING, text.len() as u32)],
            rows: vec![vec![Value::Bytes(text.trim_end().as_bytes().to_vec())]],
        })
    }

    async fn engine_explain(&mut self, sql: &str, analyze: bool) -> Result<String, SqlError> {
        self.interrupt.statement_starts();
        let allowed = self.engine_access();
        let mut budget = self.budget(true);
        tern_engine::explain(&self.client, self.db.as_deref(), sql, &allowed, &mut budget, analyze).await
    }

    /// Runs a query in the analytic engine (`tern_engine`). `ours`: the OLTP path's error
    /// for it, answered instead when the engine cannot parse the text either.
    /// `names`: the result's column names as MySQL gives them (alias, else the text as written),
    /// when the OLTP parser read the statement.
    async fn engine_query(
        &mut self,
        sql: &str,
        ours: Option<SqlError>,
        names: Option<Vec<String>>,
    ) -> Result<Answer, SqlError> {
        self.interrupt.statement_starts();
        self.engine_queries += 1;
        let allowed = self.engine_access();
        let mut budget = self.budget(true);
        let r = tern_engine::query(&self.client, self.db.as_deref(), sql, &allowed, &mut budget).await;
        match r {
            Ok(mut r) => {
                if let Some(names) = names.filter(|n| n.len() == r.columns.len()) {
                    for (c, n) in r.columns.iter_mut().zip(names) {
                        c.name = n;
                    }
                }
                self.found_rows = r.rows.len() as u64;
                self.row_count = -1;
                Ok(Answer::Rows { columns: r.columns, rows: r.rows })
            }
            Err(e) => match ours {
                Some(o) if e.errno == 1064 => Err(o),
                _ => Err(e),
            },
        }
    }

    /// The cached plan of a normalised text (None: it does not plan; the caller uses the text
    /// as written, so errors speak of what the client sent).
    fn prepare_normalized(&mut self, norm: &str, params: usize) -> Option<Arc<Prepared>> {
        let version = self.plan_version();
        if let Some(p) = self.cache.get(norm)
            && p.version == version
            && p.db == self.db
        {
            return Some(p.clone());
        }
        let parsed = parse(norm).ok()?;
        if parsed.params != params {
            return None;
        }
        let prep = Arc::new(self.plan(parsed.stmt, parsed.params).ok()?);
        if !matches!(prep.plan, Plan::Select(_) | Plan::Insert(_) | Plan::Update(_) | Plan::Delete(_)) {
            return None;
        }
        if self.cache.len() >= CACHE_MAX {
            self.cache.clear();
        }
        self.cache.insert(norm.to_string(), prep.clone());
        Some(prep)
    }

    /// Runs a prepared statement (COM_STMT_EXECUTE, EXECUTE) of text `sql`: one the query engine
    /// serves better (`for_engine`: an analytic join) runs there with its parameter values as
    /// literals, as its text would from COM_QUERY; the rest as `execute`.
    pub async fn execute_stmt(
        &mut self,
        prep: &Arc<Prepared>,
        sql: &str,
        params: &[Value],
    ) -> Result<Answer, SqlError> {
        if params.len() >= prep.params && self.for_engine(prep) {
            let text = bind_literals(sql, params)?;
            match self.engine_query(&text, None, column_names(&prep.stmt)).await {
                Err(e) if engine_lacks(&e) => {}
                r => return r,
            }
        }
        self.execute(prep, params).await
    }

    /// Runs a prepared statement with parameter values; a stale plan (the catalog changed) is
    /// made again first.
    pub async fn execute(&mut self, prep: &Arc<Prepared>, params: &[Value]) -> Result<Answer, SqlError> {
        let prep = if prep.version != self.plan_version() && !matches!(prep.plan, Plan::Other | Plan::Engine { .. }) {
            Arc::new(self.plan_fresh(prep.stmt.clone(), prep.params).await?)
        } else {
            prep.clone()
        };
        let r = self.execute_plan(&prep, params).await;
        match r {
            Err(e) if e.is(ErrorCode::SchemaChanged) && !self.ts.open => {
                // The schema changed under us (another API server): refresh and plan again.
                self.refresh().await;
                let again = Arc::new(self.plan(prep.stmt.clone(), prep.params)?);
                self.execute_plan(&again, params).await
            }
            r => r,
        }
    }

    async fn execute_plan(&mut self, prep: &Prepared, params: &[Value]) -> Result<Answer, SqlError> {
        if params.len() < prep.params {
            return Err(SqlError::new(1210, "HY000", "Incorrect arguments to mysqld_stmt_execute"));
        }
        self.interrupt.statement_starts();
        // Autocommit off: every statement joins the open transaction.
        if !self.autocommit {
            self.ts.open = true;
        }
        match &prep.plan {
            Plan::Select(p) => {
                let rows = {
                    let mut ts = std::mem::take(&mut self.ts);
                    ts.durable = self.durable_commit();
                    let env = Env { params, subs: Vec::new(), sess: self, newrow: None };
                    let mut run = Runner { client: &self.client, ts: &mut ts, budget: self.budget(true) };
                    let r = run::run_select(&mut run, p, &env, true).await;
                    let r = match r {
                        Ok(rows) => run.finish().await.map(|_| rows),
                        Err(e) => {
                            run.abandon();
                            Err(e)
                        }
                    };
                    self.ts = ts;
                    r
                };
                let rows = self.txn_error(rows)?;
                self.found_rows = rows.len() as u64;
                self.row_count = -1;
                Ok(Answer::Rows { columns: typed_columns(p, &rows), rows })
            }
            Plan::Insert(p) => {
                let r = self.run_write(W::Insert(p), params).await?;
                if let Some(id) = r.last_insert_id {
                    self.last_insert_id.store(id, Ordering::Relaxed);
                }
                self.row_count = r.affected as i64;
                Ok(Answer::Ok { affected: r.affected, last_insert_id: r.last_insert_id.unwrap_or(0), info: r.info })
            }
            Plan::Update(p) => {
                let r = self.run_write(W::Update(p), params).await?;
                self.row_count = r.affected as i64;
                Ok(Answer::Ok { affected: r.affected, last_insert_id: 0, info: r.info })
            }
            Plan::Delete(p) => {
                let r = self.run_write(W::Delete(p), params).await?;
                self.row_count = r.affected as i64;
                Ok(Answer::Ok { affected: r.affected, last_insert_id: 0, info: String::new() })
            }
            Plan::Engine { sql, ours } => {
                let text = bind_literals(sql, params)?;
                self.engine_query(&text, Some(ours.clone()), None).await
            }
            Plan::Other => {
                let stmt = prep.stmt.clone();
                let r = self.other(&stmt, params).await;
                if !matches!(stmt, Statement::Show(_) | Statement::Select(_)) {
                    self.row_count = match &r {
                        Ok(Answer::Ok { affected, .. }) => *affected as i64,
                        _ => -1,
                    };
                }
                r
            }
        }
    }

    /// A transaction that failed in the data node is gone: the session leaves it.
    fn txn_error<T>(&mut self, r: Result<T, SqlError>) -> Result<T, SqlError> {
        if let Err(e) = &r
            && (matches!(e.class(), Some(ErrorClass::Temporary | ErrorClass::UnknownResult))
                || e.is(ErrorCode::TransactionAborted))
            && self.ts.txn.is_none()
        {
            self.ts.open = false;
        }
        r
    }

    async fn run_write(&mut self, w: W<'_>, params: &[Value]) -> Result<write::WriteResult, SqlError> {
        let mut ts = std::mem::take(&mut self.ts);
        ts.durable = self.durable_commit();
        let r = {
            let env = Env { params, subs: Vec::new(), sess: &*self, newrow: None };
            let mut run = Runner { client: &self.client, ts: &mut ts, budget: self.budget(false) };
            let r = match w {
                W::Insert(p) => write::run_insert(&mut run, p, &env).await,
                W::Update(p) => write::run_update(&mut run, p, &env).await,
                W::Delete(p) => write::run_delete(&mut run, p, &env).await,
            };
            match r {
                Ok(w) => run.finish().await.map(|_| w),
                Err(e) => {
                    run.abandon();
                    Err(e)
                }
            }
        };
        self.ts = ts;
        self.txn_error(r)
    }

    async fn commit(&mut self) -> Result<(), SqlError> {
        self.ts.open = false;
        if let Some(t) = self.ts.txn.take() {
            t.commit().await.map_err(SqlError::from)?;
        }
        Ok(())
    }

    async fn rollback(&mut self) -> Result<(), SqlError> {
        self.ts.open = false;
        if let Some(t) = self.ts.txn.take() {
            t.rollback().await.map_err(SqlError::from)?;
        }
        Ok(())
    }

    async fn other(&mut self, stmt: &Statement, params: &[Value]) -> Result<Answer, SqlError> {
        match stmt {
            Statement::Begin => {
                self.commit().await?;
                self.ts.open = true;
                Ok(Answer::ok())
            }
            Statement::Commit => {
                self.commit().await?;
                Ok(Answer::ok())
            }
            Statement::Rollback => {
                self.rollback().await?;
                Ok(Answer::ok())
            }
            Statement::Use(db) => {
                self.use_db(db).await?;
                Ok(Answer::ok())
            }
            Statement::SetNames | Statement::SetTransaction | Statement::Noop => Ok(Answer::ok()),
            Statement::Set(list) => {
                for (target, e) in list {
                    // `SET [SESSION] x = DEFAULT`: the global value (what a new session starts
                    // from); `SET GLOBAL x = DEFAULT`: the server's own default.
                    if matches!(e, tern_sql::ast::Expr::Default)
                        && let SetTarget::Sys { global, name } = target
                    {
                        if !VAR_NAMES.contains(&name.as_str()) {
                            return Err(SqlError::new(1193, "HY000", format!("Unknown system variable '{name}'")));
                        }
                        let global_value = self.globals.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned();
                        if *global {
                            self.check_admin("SUPER or SYSTEM_VARIABLES_ADMIN")?;
                            self.globals.write().unwrap_or_else(|e| e.into_inner()).remove(name);
                        } else if name == "autocommit" {
                            self.set_var(name, global_value.unwrap_or(Value::Int(1))).await?;
                        } else if let Some(v) = global_value {
                            self.set_var(name, v).await?;
                        } else {
                            self.vars.remove(name);
                        }
                        continue;
                    }
                    let v = {
                        let x = plan_const(e, self)?;
                        let env = Env { params, subs: Vec::new(), sess: self, newrow: None };
                        run::ev(&x, &[], &[], &env)?
                    };
                    match target {
                        SetTarget::User(n) => {
                            self.user_vars.insert(n.clone(), v);
                        }
                        SetTarget::Sys { global: true, name } => {
                            // Global values: new sessions start from them (this one keeps its own).
                            self.check_admin("SUPER or SYSTEM_VARIABLES_ADMIN")?;
                            if !VAR_NAMES.contains(&name.as_str()) {
                                return Err(SqlError::new(1193, "HY000", format!("Unknown system variable '{name}'")));
                            }
                            if name == "max_connections" {
                                let n = eval::to_i128(&v).filter(|n| (1..=100_000).contains(n)).ok_or_else(|| {
                                    SqlError::new(
                                        1231,
                                        "42000",
                                        "Variable 'max_connections' can't be set to this value",
                                    )
                                })?;
                                self.conns.limit.set_max(n as usize);
                            }
                            self.globals.write().unwrap_or_else(|e| e.into_inner()).insert(name.clone(), v);
                        }
                        SetTarget::Sys { name, .. } => self.set_var(name, v).await?,
                    }
                }
                Ok(Answer::ok())
            }
            Statement::CreateDatabase { name, if_not_exists } => {
                self.check_db_priv(name, tern_sql::privs::CREATE)?;
                if tern_sql::infoschema::is_virtual(name) {
                    // MySQL's answer for its own system databases.
                    return Err(SqlError::new(
                        1007,
                        "HY000",
                        format!("Can't create database '{name}'; database exists"),
                    ));
                }
                match self.ddl(DdlReq::CreateDatabase { name: name.clone(), if_not_exists: *if_not_exists }).await {
                    Err(e) if e.is(ErrorCode::DatabaseExists) => {
                        Err(SqlError::new(1007, "HY000", format!("Can't create database '{name}'; database exists")))
                    }
                    r => r.map(|_| Answer::affected(1)),
                }
            }
            Statement::DropDatabase { name, if_exists } => {
                self.check_db_priv(name, tern_sql::privs::DROP)?;
                match self.ddl(DdlReq::DropDatabase { name: name.clone(), if_exists: *if_exists }).await {
                    Err(e) if e.is(ErrorCode::NoSuchDatabase) => Err(SqlError::new(
                        1008,
                        "HY000",
                        format!("Can't drop database '{name}'; database doesn't exist"),
                    )),
                    r => {
                        r?;
                        if self.db.as_deref() == Some(name.as_str()) {
                            self.db = None;
                        }
                        Ok(Answer::ok())
                    }
                }
            }
            Statement::CreateTable(ct) => {
                let db = self.need_db(ct.table.db.as_deref())?;
                self.check_table(&db, &ct.table.name, tern_sql::privs::CREATE)?;
                self.known_db(&db).await?;
                let table = match &ct.like {
                    Some(other) => {
                        let src = self.table(Some(other.db.as_deref().unwrap_or(&db)), &other.name)?;
                        self.check_table(&src.table.database, &src.table.name, tern_sql::privs::SELECT)?;
                        let mut t = (*src.table).clone();
                        t.id = 0;
                        t.database = db.clone();
                        t.name = ct.table.name.clone();
                        t.partition_count = 0;
                        t.columns.retain(|c| !c.hidden);
                        if t.columns.len() < src.table.columns.len() {
                            t.primary_key.clear();
                            t.partition_key.clear();
                        }
                        t
                    }
                    None => ddl::table_of(ct, &db)?,
                };
                match self.ddl(DdlReq::CreateTable { table, if_not_exists: ct.if_not_exists }).await {
                    Err(e) if e.is(ErrorCode::TableExists) => {
                        Err(SqlError::new(1050, "42S01", format!("Table '{}' already exists", ct.table.name)))
                    }
                    r => {
                        r?;
                        for what in &ct.ignored {
                            self.warnings.push((
                                "Warning",
                                1235,
                                format!(
                                    "Tern does not enforce {what} of table `{}`: accepted and ignored",
                                    ct.table.name
                                ),
                            ));
                        }
                        Ok(Answer::ok())
                    }
                }
            }
            Statement::DropTable { tables, if_exists } => {
                let mut missing = Vec::new();
                for t in tables {
                    let db = self.need_db(t.db.as_deref())?;
                    self.check_table(&db, &t.name, tern_sql::privs::DROP)?;
                    match self
                        .ddl(DdlReq::DropTable { database: db.clone(), name: t.name.clone(), if_exists: *if_exists })
                        .await
                    {
                        Err(e) if e.is(ErrorCode::NoSuchTable) => missing.push(format!("{db}.{}", t.name)),
                        r => r?,
                    }
                }
                if !missing.is_empty() {
                    return Err(SqlError::new(1051, "42S02", format!("Unknown table '{}'", missing.join(","))));
                }
                Ok(Answer::ok())
            }
            Statement::CreateIndex { table, index } => {
                let db = self.need_db(table.db.as_deref())?;
                self.check_table(&db, &table.name, tern_sql::privs::INDEX)?;
                let h = self.table(Some(&db), &table.name)?;
                let idx = ddl::index_of(&h.table, index)?;
                self.ddl(DdlReq::CreateIndex { database: db, table: table.name.clone(), index: idx }).await?;
                Ok(Answer::ok())
            }
            Statement::DropIndex { table, name } => {
                let db = self.need_db(table.db.as_deref())?;
                self.check_table(&db, &table.name, tern_sql::privs::INDEX)?;
                self.table(Some(&db), &table.name)?;
                self.ddl(DdlReq::DropIndex { database: db, table: table.name.clone(), name: name.clone() }).await?;
                Ok(Answer::ok())
            }
            Statement::AlterTable { table, ops } => {
                let db = self.need_db(table.db.as_deref())?;
                self.check_table(&db, &table.name, tern_sql::privs::ALTER)?;
                let h = self.table(Some(&db), &table.name)?;
                for op in ops {
                    match op {
                        AlterOp::AddIndex(spec) => {
                            let idx = ddl::index_of(&h.table, spec)?;
                            self.ddl(DdlReq::CreateIndex {
                                database: db.clone(),
                                table: table.name.clone(),
                                index: idx,
                            })
                            .await?;
                        }
                        AlterOp::DropIndex(name) => {
                            self.ddl(DdlReq::DropIndex {
                                database: db.clone(),
                                table: table.name.clone(),
                                name: name.clone(),
                            })
                            .await?;
                        }
                        AlterOp::AddColumn(_) | AlterOp::DropColumn(_) => {}
                    }
                }
                let column_ops: Vec<&AlterOp> =
                    ops.iter().filter(|o| matches!(o, AlterOp::AddColumn(_) | AlterOp::DropColumn(_))).collect();
                if !column_ops.is_empty() {
                    self.refresh().await;
                    let h = self.table(Some(&db), &table.name)?;
                    self.alter_columns(&h, &column_ops).await?;
                }
                Ok(Answer::ok())
            }
            Statement::Truncate(t) => {
                let db = self.need_db(t.db.as_deref())?;
                self.check_table(&db, &t.name, tern_sql::privs::DROP)?;
                let h = self.table(Some(&db), &t.name)?;
                self.truncate(&h).await?;
                Ok(Answer::ok())
            }
            Statement::Show(kind) => self.show(kind).await,
            Statement::Prepare { name, sql } => {
                let text = {
                    let x = plan_const(sql, self)?;
                    let env = Env { params, subs: Vec::new(), sess: self, newrow: None };
                    eval::text(&run::ev(&x, &[], &[], &env)?).unwrap_or_default()
                };
                let text = String::from_utf8_lossy(&text).into_owned();
                let prep = self.prepare_stmt(&text).await?;
                self.named.insert(name.clone(), (prep, text.into()));
                Ok(Answer::ok())
            }
            Statement::Execute { name, using } => {
                let (prep, text) = self.named.get(name).cloned().ok_or_else(|| {
                    SqlError::new(
                        1243,
                        "HY000",
                        format!("Unknown prepared statement handler ({name}) given to EXECUTE"),
                    )
                })?;
                if using.len() != prep.params {
                    return Err(SqlError::new(1210, "HY000", "Incorrect arguments to EXECUTE"));
                }
                let vals: Vec<Value> = using.iter().map(|u| self.uservar(u)).collect();
                Box::pin(self.execute_stmt(&prep, &text, &vals)).await
            }
            Statement::Kill { id, query } => {
                let v = {
                    let x = plan_const(id, self)?;
                    let env = Env { params, subs: Vec::new(), sess: self, newrow: None };
                    run::ev(&x, &[], &[], &env)?
                };
                let id = eval::to_i128(&v).and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
                    SqlError::new(
                        1094,
                        "HY000",
                        format!("Unknown thread id: {}", String::from_utf8_lossy(&eval::text(&v).unwrap_or_default())),
                    )
                })?;
                self.kill(id, *query)?;
                if id == self.conn_id {
                    // Killing oneself interrupts this very statement (as in MySQL).
                    return Err(SqlError::new(1317, "70100", "Query execution was interrupted"));
                }
                Ok(Answer::ok())
            }
            Statement::Deallocate(name) => {
                if self.named.remove(name).is_none() {
                    return Err(SqlError::new(
                        1243,
                        "HY000",
                        format!("Unknown prepared statement handler ({name}) given to DEALLOCATE PREPARE"),
                    ));
                }
                Ok(Answer::ok())
            }
            Statement::CreateUser { users, if_not_exists } => {
                self.check_admin("CREATE USER")?;
                for (u, h, pw, plugin) in users {
                    let plugin = crate::users::Plugin::named(plugin.as_deref())?;
                    let r = crate::users::create_user(&self.client, u, h, pw.as_deref(), plugin, *if_not_exists).await;
                    crate::users::changed();
                    r?;
                }
                Ok(Answer::ok())
            }
            Statement::DropUser { users, if_exists } => {
                self.check_admin("CREATE USER")?;
                for (u, h) in users {
                    let r = crate::users::drop_user(&self.client, u, h, *if_exists).await;
                    crate::users::changed();
                    r?;
                }
                Ok(Answer::ok())
            }
            Statement::Grant { privs, level, user, host, revoke } => {
                let key = match level {
                    Some(l) => Some(crate::users::level_key(l, self.db.as_deref())?),
                    None => None,
                };
                // MySQL's rule: GRANT OPTION at the level, and every privilege passed on held
                // there; REVOKE ALL ... FROM needs the administrator.
                if let Some(p) = &self.grants {
                    let held = match &key {
                        Some((d, _)) if d == "*" => p.global,
                        Some((d, t)) if t == "*" => p.on_db(d),
                        Some((d, t)) => p.on_table(d, t),
                        None => 0,
                    };
                    if held & tern_sql::privs::GRANT == 0 || *privs & !held != 0 {
                        if let Some((_, t)) = key.as_ref().filter(|(d, t)| d != "*" && t != "*") {
                            return Err(crate::users::table_denied("GRANT", &self.user, &self.host, t));
                        }
                        let db = key.as_ref().map_or("*", |k| k.0.as_str());
                        return Err(crate::users::db_denied(&self.user, &self.host, db));
                    }
                }
                let r = crate::users::grant(&self.client, *privs, key, user, host, *revoke).await;
                crate::users::changed();
                r?;
                Ok(Answer::ok())
            }
            Statement::AlterUser { user, host, password, plugin } => {
                if *user != self.user {
                    self.check_admin("CREATE USER")?;
                }
                let plugin = crate::users::Plugin::named(plugin.as_deref())?;
                let r = crate::users::alter_user(&self.client, user, host, password, plugin).await;
                crate::users::changed();
                r?;
                Ok(Answer::ok())
            }
            Statement::LoadData(ld) => {
                if !ld.local {
                    return Err(SqlError::new(
                        1235,
                        "42000",
                        "This version of Tern doesn't yet support 'LOAD DATA INFILE of server files'; use LOAD DATA LOCAL INFILE",
                    ));
                }
                let h = self.table(ld.table.db.as_deref(), &ld.table.name)?;
                self.check_table(&h.table.database, &h.table.name, tern_sql::privs::INSERT)?;
                Ok(Answer::LocalInfile(Box::new(tern_sql::load::LoadJob::new((**ld).clone(), h)?)))
            }
            Statement::Select(_) | Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_) => {
                unreachable!("planned statements")
            }
        }
    }

    async fn known_db(&self, db: &str) -> Result<(), SqlError> {
        if self.client.databases().iter().any(|d| d == db) {
            return Ok(());
        }
        self.refresh().await;
        if self.client.databases().iter().any(|d| d == db) {
            Ok(())
        } else {
            Err(SqlError::new(1049, "42000", format!("Unknown database '{db}'")))
        }
    }

    async fn set_var(&mut self, name: &str, v: Value) -> Result<(), SqlError> {
        if !VAR_NAMES.contains(&name) {
            return Err(SqlError::new(1193, "HY000", format!("Unknown system variable '{name}'")));
        }
        if name == "autocommit" {
            let on = match &v {
                Value::Bytes(b) => {
                    let t = String::from_utf8_lossy(b).to_ascii_uppercase();
                    match t.as_str() {
                        "ON" | "1" | "TRUE" => true,
                        "OFF" | "0" | "FALSE" => false,
                        _ => {
                            return Err(SqlError::new(
                                1231,
                                "42000",
                                format!("Variable 'autocommit' can't be set to the value of '{t}'"),
                            ));
                        }
                    }
                }
                o => eval::truth(o).unwrap_or(false),
            };
            if on && !self.autocommit {
                // Turning autocommit on commits the open transaction.
                self.commit().await?;
            }
            self.autocommit = on;
            if on {
                self.ts.open = self.ts.open && self.explicit_open();
            }
            return Ok(());
        }
        self.vars.insert(name.to_string(), v);
        Ok(())
    }

    /// The session's `tern_durable_commit`.
    fn durable_commit(&self) -> bool {
        match self.vars.get("tern_durable_commit") {
            Some(Value::Bytes(b)) => {
                matches!(String::from_utf8_lossy(b).to_ascii_uppercase().as_str(), "ON" | "1" | "TRUE")
            }
            Some(v) => eval::truth(v).unwrap_or(false),
            None => self.client.durable_commits(),
        }
    }

    pub fn table(&self, db: Option<&str>, name: &str) -> Result<TableHandle, SqlError> {
        let h = CatalogView::unchecked(self).table(db, name)?;
        // Statements that change a table checked their own privilege; the others (SHOW
        // COLUMNS, SHOW CREATE TABLE, SHOW INDEX, COM_FIELD_LIST) need any privilege on it.
        if !self.sees_table(&h.table.database, &h.table.name) {
            return Err(crate::users::table_denied("SELECT", &self.user, &self.host, &h.table.name));
        }
        Ok(h)
    }

    /// ALTER TABLE ADD/DROP COLUMN by copying (MySQL's ALGORITHM=COPY without its table lock):
    /// the rows go to a table with the new definition under a temporary name, the original is
    /// dropped and created again with the new definition, and the rows come back. Writes by other
    /// sessions while this runs may be lost.
    async fn alter_columns(&mut self, h: &TableHandle, ops: &[&AlterOp]) -> Result<(), SqlError> {
        use tern_types::schema::HIDDEN_ROWID;
        let old = &h.table;
        let mut def = (**old).clone();
        // A hidden primary key is made again by the new table.
        if let Some(p) = def.columns.iter().position(|c| c.hidden && c.name == HIDDEN_ROWID) {
            def.columns.remove(p);
            def.primary_key.clear();
            def.partition_key.clear();
        }
        for op in ops {
            match op {
                AlterOp::AddColumn(spec) => {
                    if spec.primary_key || spec.unique || spec.auto_increment {
                        return Err(SqlError::new(
                            1235,
                            "42000",
                            "This version of Tern doesn't yet support 'ADD COLUMN with a key or AUTO_INCREMENT'",
                        ));
                    }
                    if def.column_index(&spec.name).is_some() {
                        return Err(SqlError::new(1060, "42S21", format!("Duplicate column name '{}'", spec.name)));
                    }
                    let c = ddl::column(spec)?;
                    if !c.nullable && c.default.is_none() && c.members.is_none() && implicit_default(c.ty).is_none() {
                        return Err(SqlError::new(1138, "22004", "Invalid use of NULL value"));
                    }
                    def.columns.push(c);
                }
                AlterOp::DropColumn(name) => {
                    let Some(c) = def.column_index(name) else {
                        return Err(SqlError::new(
                            1091,
                            "42000",
                            format!("Can't DROP '{name}'; check that column/key exists"),
                        ));
                    };
                    if def.primary_key.contains(&(c as u16)) {
                        return Err(SqlError::new(
                            1235,
                            "42000",
                            "This version of Tern doesn't yet support 'dropping a primary key column'",
                        ));
                    }
                    if def.columns.len() == 1 {
                        return Err(SqlError::new(
                            1090,
                            "42000",
                            "You can't delete all columns with ALTER TABLE; use DROP TABLE instead",
                        ));
                    }
                    def.columns.remove(c);
                    let fix = |v: &mut Vec<u16>| {
                        v.retain(|&x| x as usize != c);
                        for x in v.iter_mut() {
                            if *x as usize > c {
                                *x -= 1;
                            }
                        }
                    };
                    fix(&mut def.primary_key);
                    fix(&mut def.partition_key);
                    for idx in def.indexes.iter_mut() {
                        fix(&mut idx.columns);
                    }
                    def.indexes.retain(|i| !i.columns.is_empty());
                    def.ttl = match def.ttl.take() {
                        Some(t) if t.column as usize == c => None,
                        Some(mut t) => {
                            if t.column as usize > c {
                                t.column -= 1;
                            }
                            t.cascade.retain(|x| x.column as usize != c);
                            for x in t.cascade.iter_mut().filter(|x| x.column as usize > c) {
                                x.column -= 1;
                            }
                            Some(t)
                        }
                        None => None,
                    };
                }
                _ => {}
            }
        }
        def.id = 0;
        for i in def.indexes.iter_mut() {
            i.id = 0;
        }
        // New row from an old row: columns by name, new ones their default.
        let from_old: Vec<Option<usize>> = def.columns.iter().map(|c| old.column_index(&c.name)).collect();
        let fill: Vec<Value> = def
            .columns
            .iter()
            .map(|c| {
                if c.members.is_some() {
                    return write::default_of(c);
                }
                c.default
                    .clone()
                    .or_else(|| if c.nullable { None } else { implicit_default(c.ty) })
                    .unwrap_or(Value::Null)
            })
            .collect();
        let db = old.database.clone();
        let tmp_name: String = format!("#alter#{}", old.name).chars().take(64).collect();
        let _ = self.ddl(DdlReq::DropTable { database: db.clone(), name: tmp_name.clone(), if_exists: true }).await;
        let mut tmp_def = def.clone();
        tmp_def.name = tmp_name.clone();
        self.ddl(DdlReq::CreateTable { table: tmp_def, if_not_exists: false }).await?;
        let tmp = CatalogView::unchecked(self).table(Some(&db), &tmp_name)?;
        let map = |r: &[Value]| -> Vec<Value> {
            from_old.iter().zip(&fill).map(|(o, f)| o.map(|i| r[i].clone()).unwrap_or_else(|| f.clone())).collect()
        };
        self.copy_rows(h, &tmp, &map).await?;
        self.ddl(DdlReq::DropTable { database: db.clone(), name: old.name.clone(), if_exists: false }).await?;
        self.ddl(DdlReq::CreateTable { table: def, if_not_exists: false }).await?;
        let fresh = CatalogView::unchecked(self).table(Some(&db), &old.name)?;
        self.copy_rows(&tmp, &fresh, &|r: &[Value]| r.to_vec()).await?;
        self.ddl(DdlReq::DropTable { database: db, name: tmp_name, if_exists: false }).await?;
        Ok(())
    }

    /// Copies every row of `from` into `to` (rows mapped by `map`; a hidden key is made anew).
    async fn copy_rows(
        &self,
        from: &TableHandle,
        to: &TableHandle,
        map: &(dyn Fn(&[Value]) -> Vec<Value> + Sync),
    ) -> Result<(), SqlError> {
        let visible: Vec<usize> = (0..from.table.columns.len()).filter(|&c| !from.table.columns[c].hidden).collect();
        let mut sc = self.client.scan(tern_client::ScanSpec::table(from.id()));
        let auto = to.table.columns.iter().position(|c| c.auto_increment && !c.hidden);
        let mut max_auto = 0u64;
        while let Some(batch) = sc.next_batch().await.map_err(SqlError::from)? {
            let mut ops = Vec::with_capacity(batch.len());
            let mut rows = Vec::with_capacity(batch.len());
            for b in batch {
                let full = from.decode_row(&b).map_err(SqlError::from)?;
                let vis: Vec<Value> = visible.iter().map(|&c| full[c].clone()).collect();
                let mut r = map(&vis);
                if to.table.columns.len() > r.len() {
                    r.resize(to.table.columns.len(), Value::Null);
                }
                if let Some(a) = auto {
                    max_auto = max_auto.max(eval::to_i128(&r[a]).unwrap_or(0).max(0) as u64);
                }
                rows.push(r);
            }
            for r in rows.iter_mut() {
                self.client.fill_generated_async(to, r).await.map_err(SqlError::from)?;
            }
            for r in &rows {
                ops.push(to.insert(r).map_err(SqlError::from)?);
            }
            let mut t = self.client.begin();
            t.execute_with(ops, tern_client::Exec::Commit, tern_client::AbortOption::AbortOnError)
                .await
                .map_err(SqlError::from)?;
        }
        if auto.is_some() && max_auto > 0 {
            self.client.bump_auto_increment_async(to.id(), max_auto).await.map_err(SqlError::from)?;
        }
        Ok(())
    }

    async fn truncate(&mut self, h: &TableHandle) -> Result<(), SqlError> {
        let mut spec = tern_client::ScanSpec::table(h.id());
        spec.projection = Some(h.table.primary_key.clone());
        let mut sc = self.client.scan(spec);
        let mut keys = Vec::new();
        while let Some(batch) = sc.next_batch().await.map_err(SqlError::from)? {
            for r in batch {
                keys.push(h.decode_projection(&h.table.primary_key, &r).map_err(SqlError::from)?);
            }
        }
        for chunk in keys.chunks(1000) {
            let ops = chunk.iter().map(|k| h.delete(k)).collect::<Result<Vec<_>, _>>().map_err(SqlError::from)?;
            let mut t = self.client.begin();
            t.execute_with(ops, tern_client::Exec::Commit, tern_client::AbortOption::IgnoreError)
                .await
                .map_err(SqlError::from)?;
        }
        Ok(())
    }

    async fn show(&mut self, kind: &ShowKind) -> Result<Answer, SqlError> {
        let col = |n: &str| ColumnDef::expr(n, ty::VAR_STRING, 256);
        let strs = |v: Vec<Vec<String>>| -> Vec<Vec<Value>> {
            v.into_iter().map(|r| r.into_iter().map(|x| Value::Bytes(x.into_bytes())).collect()).collect()
        };
        let like_ok =
            |pat: &Option<String>, v: &str| pat.as_ref().is_none_or(|p| eval::like(v.as_bytes(), p.as_bytes()));
        match kind {
            ShowKind::Databases { like } => {
                self.refresh().await;
                let mut dbs = self.client.databases();
                dbs.push("information_schema".into());
                dbs.push(tern_sql::ndbinfo::DB.into());
                dbs.sort();
                dbs.retain(|d| like_ok(like, d) && self.check_db(d).is_ok());
                Ok(Answer::Rows {
                    columns: vec![col("Database")],
                    rows: strs(dbs.into_iter().map(|d| vec![d]).collect()),
                })
            }
            ShowKind::Tables { db, like, full } => {
                let db = self.need_db(db.as_deref())?;
                self.refresh().await;
                if !tern_sql::infoschema::is_virtual(&db) {
                    self.known_db(&db).await?;
                }
                let mut tables = if db.eq_ignore_ascii_case(tern_sql::infoschema::DB) {
                    tern_sql::infoschema::TABLES.iter().map(|t| t.to_string()).collect()
                } else if db.eq_ignore_ascii_case(tern_sql::ndbinfo::DB) {
                    tern_sql::ndbinfo::TABLES.iter().map(|t| t.to_string()).collect()
                } else {
                    self.client.tables(&db)
                };
                tables.sort();
                tables.retain(|t| like_ok(like, t) && self.sees_table(&db, t));
                let mut columns = vec![col(&format!("Tables_in_{db}"))];
                if *full {
                    columns.push(col("Table_type"));
                }
                let rows =
                    tables.into_iter().map(|t| if *full { vec![t, "BASE TABLE".into()] } else { vec![t] }).collect();
                Ok(Answer::Rows { columns, rows: strs(rows) })
            }
            ShowKind::Columns { table, full, like } => {
                let h = self.table(table.db.as_deref(), &table.name)?;
                let t = &h.table;
                let mut rows = Vec::new();
                for (i, c) in t.columns.iter().enumerate().filter(|(_, c)| !c.hidden) {
                    if !like_ok(like, &c.name) {
                        continue;
                    }
                    let key = ddl::column_key(t, i);
                    let mut r = vec![
                        Value::Bytes(c.name.clone().into_bytes()),
                        Value::Bytes(ddl::column_type_text(c).into_bytes()),
                    ];
                    if *full {
                        r.push(if c.ty.is_text() { s("utf8mb4_bin") } else { Value::Null });
                    }
                    r.push(s(if c.nullable { "YES" } else { "NO" }));
                    r.push(s(key));
                    r.push(ddl::default_text(c).map(|d| Value::Bytes(d.into_bytes())).unwrap_or(Value::Null));
                    r.push(s(if c.auto_increment { "auto_increment" } else { "" }));
                    if *full {
                        r.push(s("select,insert,update,references"));
                        r.push(s(""));
                    }
                    rows.push(r);
                }
                let mut names = vec!["Field", "Type"];
                if *full {
                    names.push("Collation");
                }
                names.extend(["Null", "Key", "Default", "Extra"]);
                if *full {
                    names.extend(["Privileges", "Comment"]);
                }
                Ok(Answer::Rows { columns: names.into_iter().map(col).collect(), rows })
            }
            ShowKind::CreateTable(t) => {
                let h = self.table(t.db.as_deref(), &t.name)?;
                Ok(Answer::Rows {
                    columns: vec![col("Table"), col("Create Table")],
                    rows: strs(vec![vec![h.table.name.clone(), ddl::show_create(&h.table)]]),
                })
            }
            ShowKind::CreateDatabase(d) => {
                self.known_db(d).await?;
                Ok(Answer::Rows {
                    columns: vec![col("Database"), col("Create Database")],
                    rows: strs(vec![vec![
                        d.clone(),
                        format!("CREATE DATABASE `{d}` /*!40100 DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin */"),
                    ]]),
                })
            }
            ShowKind::Index(t) => {
                let h = self.table(t.db.as_deref(), &t.name)?;
                let mut rows = Vec::new();
                for i in &h.table.indexes {
                    for (seq, &c) in i.columns.iter().enumerate() {
                        rows.push(vec![
                            s(&h.table.name),
                            Value::Int((!(i.unique || i.name == "PRIMARY")) as i64),
                            s(&i.name),
                            Value::Int(seq as i64 + 1),
                            s(&h.table.columns[c as usize].name),
                            s("A"),
                            Value::Null,
                            Value::Null,
                            Value::Null,
                            s(if h.table.columns[c as usize].nullable { "YES" } else { "" }),
                            s("BTREE"),
                            s(""),
                            s(""),
                        ]);
                    }
                }
                let names = [
                    "Table",
                    "Non_unique",
                    "Key_name",
                    "Seq_in_index",
                    "Column_name",
                    "Collation",
                    "Cardinality",
                    "Sub_part",
                    "Packed",
                    "Null",
                    "Index_type",
                    "Comment",
                    "Index_comment",
                ];
                Ok(Answer::Rows { columns: names.into_iter().map(col).collect(), rows })
            }
            ShowKind::Variables { like, filter, global } => {
                let mut rows = Vec::new();
                let mut names: Vec<&str> = VAR_NAMES.to_vec();
                names.sort();
                for n in names {
                    if !like_ok(like, n) {
                        continue;
                    }
                    let v = self.sysvar(*global, n)?;
                    rows.push(vec![s(n), Value::Bytes(eval::text(&v).unwrap_or_default())]);
                }
                if let Some(f) = filter {
                    // WHERE on Variable_name / Value.
                    let mut kept = Vec::new();
                    for r in rows {
                        let e = substitute_show(f, &r);
                        let x = plan_const(&e, self)?;
                        let env = Env { params: &[], subs: Vec::new(), sess: self, newrow: None };
                        if eval::truth(&run::ev(&x, &[], &[], &env)?) == Some(true) {
                            kept.push(r);
                        }
                    }
                    rows = kept;
                }
                Ok(Answer::Rows { columns: vec![col("Variable_name"), col("Value")], rows })
            }
            ShowKind::Status { like } => {
                let st = self.client.status_async().await.map_err(SqlError::from)?;
                let all = vec![
                    ("Uptime".to_string(), "1".to_string()),
                    ("Threads_connected".into(), "1".into()),
                    ("Ndb_cluster_node_id".into(), st.node_id.to_string()),
                    ("Ndb_number_of_data_nodes".into(), "1".into()),
                    ("Ndb_memory_used".into(), st.memory_used.to_string()),
                    ("Ndb_memory_total".into(), st.memory_total.to_string()),
                    ("Ndb_rows".into(), st.rows.to_string()),
                    ("Ndb_durable_epoch".into(), st.durable_epoch.to_string()),
                    ("Tern_engine_queries".into(), self.engine_queries.to_string()),
                ];
                let rows = all.into_iter().filter(|(n, _)| like_ok(like, n)).map(|(n, v)| vec![n, v]).collect();
                Ok(Answer::Rows { columns: vec![col("Variable_name"), col("Value")], rows: strs(rows) })
            }
            ShowKind::Warnings | ShowKind::Errors => Ok(Answer::Rows {
                columns: vec![col("Level"), ColumnDef::expr("Code", ty::LONG, 4), col("Message")],
                rows: self
                    .warnings
                    .iter()
                    .filter(|w| matches!(kind, ShowKind::Warnings) || w.0 == "Error")
                    .map(|(level, code, msg)| vec![s(level), Value::Int(*code as i64), s(msg)])
                    .collect(),
            }),
            ShowKind::Empty(columns) => {
                Ok(Answer::Rows { columns: columns.iter().map(|c| col(c)).collect(), rows: Vec::new() })
            }
            ShowKind::Engines => Ok(Answer::Rows {
                columns: ["Engine", "Support", "Comment", "Transactions", "XA", "Savepoints"]
                    .into_iter()
                    .map(col)
                    .collect(),
                rows: strs(vec![vec![
                    "ndbcluster".into(),
                    "DEFAULT".into(),
                    "Tern: in-memory, synchronously replicated".into(),
                    "YES".into(),
                    "NO".into(),
                    "NO".into(),
                ]]),
            }),
            ShowKind::Collation { like } => {
                let rows: Vec<Vec<Value>> = [
                    ("utf8mb4_bin", "utf8mb4", 46),
                    ("utf8mb4_general_ci", "utf8mb4", 45),
                    ("latin1_general_cs", "latin1", 49),
                    ("binary", "binary", 63),
                ]
                .into_iter()
                .filter(|(n, _, _)| like_ok(like, n))
                .map(|(n, c, id)| vec![s(n), s(c), Value::Int(id), s(""), s("Yes"), Value::Int(1), s("PAD SPACE")])
                .collect();
                Ok(Answer::Rows {
                    columns: ["Collation", "Charset", "Id", "Default", "Compiled", "Sortlen", "Pad_attribute"]
                        .into_iter()
                        .map(col)
                        .collect(),
                    rows,
                })
            }
            ShowKind::CharacterSet { like } => {
                let rows: Vec<Vec<Value>> = [
                    ("utf8mb4", "UTF-8 Unicode", "utf8mb4_bin", 4),
                    ("latin1", "cp1252 West European", "latin1_swedish_ci", 1),
                    ("binary", "Binary pseudo charset", "binary", 1),
                ]
                .into_iter()
                .filter(|(n, ..)| like_ok(like, n))
                .map(|(n, d, c, l)| vec![s(n), s(d), s(c), Value::Int(l)])
                .collect();
                Ok(Answer::Rows {
                    columns: ["Charset", "Description", "Default collation", "Maxlen"].into_iter().map(col).collect(),
                    rows,
                })
            }
            ShowKind::Processlist { full } => Ok(Answer::Rows {
                columns: ["Id", "User", "Host", "db", "Command", "Time", "State", "Info"]
                    .into_iter()
                    .map(col)
                    .collect(),
                rows: self.process_list(*full),
            }),
            ShowKind::TableStatus { like } => {
                let db = self.need_db(None)?;
                let mut tables = self.client.tables(&db);
                tables.sort();
                let rows = tables
                    .into_iter()
                    .filter(|t| like_ok(like, t) && self.sees_table(&db, t))
                    .map(|t| vec![s(&t), s("ndbcluster"), Value::Int(10), s("Dynamic")])
                    .collect();
                Ok(Answer::Rows {
                    columns: ["Name", "Engine", "Version", "Row_format"].into_iter().map(col).collect(),
                    rows,
                })
            }
            ShowKind::Grants(who) => {
                let user = who.clone().unwrap_or_else(|| self.user.clone());
                if user != self.user {
                    self.check_admin("SELECT on mysql")?;
                }
                let grants = if user == self.user {
                    self.grants.clone()
                } else {
                    crate::users::grants(&self.client, &user, "localhost").await?
                };
                let rows = match grants {
                    None => vec![format!("GRANT ALL PRIVILEGES ON *.* TO `{user}`@`%` WITH GRANT OPTION")],
                    Some(p) => p.describe(&user),
                };
                Ok(Answer::Rows {
                    columns: vec![col(&format!("Grants for {user}@%"))],
                    rows: rows.into_iter().map(|r| vec![Value::Bytes(r.into_bytes())]).collect(),
                })
            }
        }
    }
}

fn substitute_show(e: &Expr, row: &[Value]) -> Expr {
    match e {
        Expr::Column { name, .. } if name.eq_ignore_ascii_case("Variable_name") => Expr::Lit(row[0].clone()),
        Expr::Column { name, .. } if name.eq_ignore_ascii_case("Value") => Expr::Lit(row[1].clone()),
        Expr::Binary(op, a, b) => Expr::bin(*op, substitute_show(a, row), substitute_show(b, row)),
        Expr::Like { e, pat, neg } => {
            Expr::Like { e: Box::new(substitute_show(e, row)), pat: Box::new(substitute_show(pat, row)), neg: *neg }
        }
        Expr::In { e, list, neg } => Expr::In {
            e: Box::new(substitute_show(e, row)),
            list: list.iter().map(|x| substitute_show(x, row)).collect(),
            neg: *neg,
        },
        other => other.clone(),
    }
}

/// Compiles an expression that reads no table.
fn plan_const(e: &Expr, sess: &Session) -> Result<plan::X, SqlError> {
    let q = Select {
        items: vec![SelectItem::Expr { e: e.clone(), alias: None, text: String::new() }],
        ..Select::default()
    };
    let p = plan::plan_select(&q, &CatalogView::new(sess), sess.db.as_deref())?;
    Ok(p.items.into_iter().next().expect("one item"))
}

enum W<'p> {
    Insert(&'p InsertPlan),
    Update(&'p ModifyPlan),
    Delete(&'p ModifyPlan),
}

/// Table lookups for the planner (refreshing the catalog once for unknown tables); records the
/// tables it handed out, for the privilege check.
pub struct CatalogView<'a> {
    pub sess: &'a Session,
    /// A statement's target table (INSERT, UPDATE, DELETE) and the privileges it needs there;
    /// every other table needs SELECT.
    pub target: Option<(String, String, u16)>,
    /// Checks privileges (off for `Session::table`, whose callers check their own).
    pub check: bool,
    /// The target was resolved once (as the table written): the planners resolve it first, so
    /// a later resolution reads it (INSERT ... SELECT FROM itself) and needs SELECT too.
    pub target_seen: std::cell::Cell<bool>,
}

impl<'a> CatalogView<'a> {
    pub fn new(sess: &'a Session) -> CatalogView<'a> {
        CatalogView { check: true, ..CatalogView::unchecked(sess) }
    }

    /// A view that checks no privileges (for callers that check their own).
    pub fn unchecked(sess: &'a Session) -> CatalogView<'a> {
        CatalogView { sess, target: None, check: false, target_seen: Default::default() }
    }
}

impl plan::Catalog for CatalogView<'_> {
    fn table(&self, db: Option<&str>, name: &str) -> Result<TableHandle, SqlError> {
        let db = db
            .map(str::to_string)
            .or_else(|| self.sess.db.clone())
            .ok_or_else(|| SqlError::new(1046, "3D000", "No database selected"))?;
        if self.check && self.sess.grants.is_some() && !db.eq_ignore_ascii_case(tern_sql::infoschema::DB) {
            let need =
                match &self.target {
                    Some((d, t, need)) if *d == db && t.eq_ignore_ascii_case(name) => {
                        if self.target_seen.replace(true) { *need | tern_sql::privs::SELECT } else { *need }
                    }
                    _ => tern_sql::privs::SELECT,
                };
            self.sess.check_table(&db, name, need)?;
        }
        let written = matches!(&self.target, Some((d, t, need))
            if d.eq_ignore_ascii_case(&db) && t.eq_ignore_ascii_case(name) && need & !tern_sql::privs::SELECT != 0);
        if written && db.eq_ignore_ascii_case(tern_sql::ndbinfo::DB) {
            // NDB's ndbinfo tables are read only (MySQL's ER_OPEN_AS_READONLY).
            return Err(SqlError::new(1036, "HY000", format!("Table '{name}' is read only")));
        }
        if written && db.eq_ignore_ascii_case(tern_sql::infoschema::DB) {
            return Err(crate::users::db_denied(&self.sess.user, &self.sess.host, tern_sql::infoschema::DB));
        }
        if db.eq_ignore_ascii_case(tern_sql::infoschema::DB) {
            return tern_sql::infoschema::table(name).ok_or_else(|| {
                SqlError::new(
                    1109,
                    "42S02",
                    format!("Unknown table '{}' in information_schema", name.to_ascii_uppercase()),
                )
            });
        }
        if db.eq_ignore_ascii_case(tern_sql::ndbinfo::DB) {
            return tern_sql::ndbinfo::table(name)
                .ok_or_else(|| SqlError::new(1146, "42S02", format!("Table 'ndbinfo.{name}' doesn't exist")));
        }
        if let Some(h) = self.sess.client.cached_table(&db, name) {
            return Ok(h);
        }
        self.sess.catalog_miss.store(true, std::sync::atomic::Ordering::Relaxed);
        Err(SqlError::new(1146, "42S02", format!("Table '{db}.{name}' doesn't exist")))
    }
}

/// A SELECT's column names as MySQL gives them (alias, else the expression as written), when
/// its list has no `*` and no UNION follows.
fn column_names(stmt: &Statement) -> Option<Vec<String>> {
    let Statement::Select(q) = stmt else { return None };
    if !q.unions.is_empty() {
        return None;
    }
    q.items
        .iter()
        .map(|i| match i {
            SelectItem::Star(_) => None,
            SelectItem::Expr { alias, text, .. } => Some(alias.clone().unwrap_or_else(|| text.clone())),
        })
        .collect()
}

/// Whether the engine refused a statement the OLTP path planned for want of something (a MySQL
/// function or syntax it does not know): the OLTP path then runs it. Not for KILL, deadlines or
/// memory, which the OLTP path would meet too.
fn engine_lacks(e: &SqlError) -> bool {
    matches!(e.errno, 1064 | 1105 | 1235) && e.code.is_none()
}

/// `ALTER [ONLINE] TABLE [db.]t REORGANIZE PARTITION` (NDB's form, with nothing after it):
/// Some((db, table)), names unquoted.
fn reorganize_of(sql: &str) -> Option<(Option<String>, String)> {
    let words: Vec<&str> = sql.trim().trim_end_matches(';').split_whitespace().collect();
    let up: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
    let at = match up.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["ALTER", "TABLE", _, "REORGANIZE", "PARTITION"] => 2,
        ["ALTER", "ONLINE", "TABLE", _, "REORGANIZE", "PARTITION"] => 3,
        _ => return None,
    };
    let unquote = |s: &str| s.trim_matches('`').to_string();
    match words[at].split_once('.') {
        Some((d, t)) => Some((Some(unquote(d)), unquote(t))),
        None => Some((None, unquote(words[at]))),
    }
}

/// `EXPLAIN` (or DESCRIBE / DESC) of a query, with its options: `ANALYZE` (run it too),
/// `EXTENDED`, `FORMAT=TREE` / `FORMAT=TRADITIONAL`; Some((analyze, the query)). Other forms
/// (`EXPLAIN tbl`, FORMAT=JSON) are not this.
fn explain_of(sql: &str) -> Option<(bool, &str)> {
    let word = |t: &str| -> Option<(String, usize)> {
        let t2 = t.trim_start();
        let skipped = t.len() - t2.len();
        let n = t2.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '=')).unwrap_or(t2.len());
        (n > 0).then(|| (t2[..n].to_ascii_uppercase(), skipped + n))
    };
    let (first, mut at) = word(sql)?;
    if !matches!(first.as_str(), "EXPLAIN" | "DESCRIBE" | "DESC") {
        return None;
    }
    let mut analyze = false;
    loop {
        let rest = &sql[at..];
        // FORMAT = TREE with blanks around `=`.
        let squeezed: String = rest.trim_start().chars().take(24).filter(|c| !c.is_whitespace()).collect();
        let up = squeezed.to_ascii_uppercase();
        if up.starts_with("FORMAT=TREE") || up.starts_with("FORMAT=TRADITIONAL") {
            let eq = rest.find('=')?;
            let (_, n) = word(&rest[eq + 1..])?;
            at += eq + 1 + n;
            continue;
        }
        match word(rest) {
            Some((w, n)) if w == "ANALYZE" => {
                analyze = true;
                at += n;
            }
            Some((w, n)) if w == "EXTENDED" => at += n,
            _ => break,
        }
    }
    let inner = &sql[at..];
    is_query_text(inner).then_some((analyze, inner))
}

/// `sql` with each `?` replaced by its parameter value as a SQL literal (strings quoted with
/// their quotes doubled and backslashes escaped, bytes that are not UTF-8 as `X'..'`, temporal
/// values as quoted text, numbers as written, a negative one in parentheses).
fn bind_literals(sql: &str, params: &[Value]) -> Result<String, SqlError> {
    let toks = tern_sql::lex::tokenize_spans(sql).map_err(|e| SqlError::new(1064, "42000", e.0))?;
    let mut out = String::with_capacity(sql.len() + 16 * params.len());
    let mut at = 0;
    let mut next = params.iter();
    for (t, start, end) in toks {
        if !matches!(t, tern_sql::lex::Tok::Param) {
            continue;
        }
        let v =
            next.next().ok_or_else(|| SqlError::new(1210, "HY000", "Incorrect arguments to mysqld_stmt_execute"))?;
        out.push_str(&sql[at..start]);
        out.push_str(&sql_literal(v));
        at = end;
    }
    out.push_str(&sql[at..]);
    Ok(out)
}

fn sql_literal(v: &Value) -> String {
    let text = || String::from_utf8_lossy(&eval::text(v).unwrap_or_default()).into_owned();
    match v {
        Value::Null => "NULL".into(),
        // A negative number in parentheses: `x -?` must not become `x --5`.
        Value::Int(_) | Value::UInt(_) | Value::Decimal { .. } | Value::Double(_) | Value::Float(_) => {
            let t = text();
            if t.starts_with('-') { format!("({t})") } else { t }
        }
        Value::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''")),
            Err(_) => format!("X'{}'", b.iter().map(|x| format!("{x:02X}")).collect::<String>()),
        },
        _ => format!("'{}'", text().replace('\'', "''")),
    }
}

/// Whether a statement text is a query (SELECT, WITH, or one in parentheses), past leading
/// blanks and comments.
fn is_query_text(sql: &str) -> bool {
    let mut t = sql.trim_start();
    loop {
        if let Some(rest) = t.strip_prefix("/*") {
            match rest.find("*/") {
                Some(i) => t = rest[i + 2..].trim_start(),
                None => return false,
            }
        } else if let Some(rest) = t.strip_prefix('(') {
            t = rest.trim_start();
        } else {
            break;
        }
    }
    let word: String = t.chars().take_while(|c| c.is_ascii_alphabetic()).collect();
    word.eq_ignore_ascii_case("select") || word.eq_ignore_ascii_case("with")
}

/// Result columns with the types of variables, parameters and subqueries taken from the values
/// (their types are not known when the statement is planned).
fn typed_columns(p: &SelectPlan, rows: &[Vec<Value>]) -> Vec<ColumnDef> {
    let mut cols = p.columns.clone();
    for (i, x) in p.items.iter().enumerate() {
        if !matches!(x, plan::X::Sys(..) | plan::X::User(_) | plan::X::Param(_) | plan::X::Sub(_)) {
            continue;
        }
        let mut kind = None;
        for r in rows {
            let k = match &r[i] {
                Value::Null => continue,
                Value::Int(_) | Value::UInt(_) => (ty::LONGLONG, 21, 0),
                Value::Decimal { scale, .. } => (ty::NEWDECIMAL, 40, *scale),
                Value::Double(_) | Value::Float(_) => (ty::DOUBLE, 23, 31),
                _ => (ty::VAR_STRING, 255, 31),
            };
            if kind.is_some_and(|x| x != k) {
                kind = Some((ty::VAR_STRING, 255, 31));
                break;
            }
            kind = Some(k);
        }
        if let Some((t, len, dec)) = kind
            && t != ty::VAR_STRING
        {
            let name = cols[i].name.clone();
            cols[i] = ColumnDef::expr(&name, t, len);
            cols[i].decimals = dec;
        }
    }
    cols
}

/// The value MySQL gives existing rows for a new NOT NULL column without a default.
fn implicit_default(t: tern_types::ColumnType) -> Option<Value> {
    use tern_types::ColumnType as C;
    Some(match t {
        t if t.is_integer() => {
            if t.is_unsigned() {
                Value::UInt(0)
            } else {
                Value::Int(0)
            }
        }
        C::Float => Value::Float(0.0),
        C::Double => Value::Double(0.0),
        C::Decimal { scale, .. } => Value::Decimal { v: 0, scale },
        C::Char { .. } | C::VarChar { .. } | C::Text | C::VarBinary { .. } | C::Blob => Value::Bytes(Vec::new()),
        C::Binary { len } => Value::Bytes(vec![0; len as usize]),
        C::Year => Value::Year(0),
        C::Bit { .. } => Value::Bit(0),
        C::Time { .. } => Value::Time(0),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::{explain_of, reorganize_of};

    #[test]
    fn explain_forms() {
        assert_eq!(explain_of("EXPLAIN SELECT 1"), Some((false, " SELECT 1")));
        assert_eq!(reorganize_of("alter table `d`.`t` reorganize partition;"), Some((Some("d".into()), "t".into())));
        assert_eq!(reorganize_of("ALTER ONLINE TABLE t REORGANIZE PARTITION"), Some((None, "t".into())));
        assert_eq!(reorganize_of("ALTER TABLE t ADD COLUMN c INT"), None);
        assert_eq!(explain_of("  explain analyze select * from t"), Some((true, " select * from t")));
        assert_eq!(explain_of("EXPLAIN FORMAT = TREE WITH x AS (SELECT 1) SELECT * FROM x").map(|e| e.0), Some(false));
        assert_eq!(explain_of("explain format=tree (select 1)"), Some((false, " (select 1)")));
        assert_eq!(explain_of("DESCRIBE EXTENDED SELECT a FROM t").map(|e| e.1.trim()), Some("SELECT a FROM t"));
        // Not a query's EXPLAIN: a table's columns, JSON, or no EXPLAIN at all.
        assert_eq!(explain_of("EXPLAIN t"), None);
        assert_eq!(explain_of("DESC t"), None);
        assert_eq!(explain_of("EXPLAIN FORMAT=JSON SELECT 1"), None);
        assert_eq!(explain_of("SELECT 1"), None);
        assert_eq!(explain_of("EXPLAINSELECT 1"), None);
        assert_eq!(explain_of(""), None);
    }
}
