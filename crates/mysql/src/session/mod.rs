//! A client session: its database, transaction, variables, prepared statements and cached
//! plans, and the dispatch of every statement kind to planning and execution.

use crate::VERSION_COMMENT;
use crate::proto::{self, ColumnDef, ty};
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
use tern_sql::{SERVER_VERSION, SqlError};
use tern_sql::{ddl, eval, write};
use tern_types::Value;
use tern_types::error::ErrorClass;

mod accounts;
mod prepared;
mod schema;
mod show;
mod transaction;
mod vars;

use prepared::bind_literals;
use vars::VAR_NAMES;

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

    /// What a cached plan was made for: the catalog version, and in the top bits how often the
    /// session's privileges changed (plans check privileges, so a REVOKE must not leave a plan
    /// that skipped its check).
    fn plan_version(&self) -> u64 {
        self.client.catalog().version ^ (self.grants_changes << 40)
    }

    async fn refresh(&self) {
        let _ = self.client.refresh_catalog_async().await;
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

    async fn other(&mut self, stmt: &Statement, params: &[Value]) -> Result<Answer, SqlError> {
        match stmt {
            Statement::Begin | Statement::Commit | Statement::Rollback => self.transaction_stmt(stmt).await,
            Statement::Use(db) => {
                self.use_db(db).await?;
                Ok(Answer::ok())
            }
            Statement::SetNames | Statement::SetTransaction | Statement::Noop => Ok(Answer::ok()),
            Statement::Set(list) => self.set_stmt(list, params).await,
            Statement::CreateDatabase { .. }
            | Statement::DropDatabase { .. }
            | Statement::DropTable { .. }
            | Statement::CreateIndex { .. }
            | Statement::DropIndex { .. }
            | Statement::Truncate(_) => self.schema_stmt(stmt).await,
            Statement::CreateTable(ct) => self.create_table(ct).await,
            Statement::AlterTable { table, ops } => self.alter_table(table, ops).await,
            Statement::Show(kind) => self.show(kind).await,
            Statement::Prepare { .. } | Statement::Execute { .. } | Statement::Deallocate(_) => {
                self.prepared_stmt(stmt, params).await
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
            Statement::CreateUser { .. }
            | Statement::DropUser { .. }
            | Statement::Grant { .. }
            | Statement::AlterUser { .. } => self.account_stmt(stmt).await,
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
