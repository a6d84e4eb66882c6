//! The analytic query engine: Apache DataFusion planning and running the SELECTs the OLTP path
//! (`plan` / `run`: key lookups, index ranges, nested-loop joins with batched key reads) does not
//! serve well — joins that would scan inner tables, derived tables, CTEs, correlated subqueries,
//! window functions, set operations (see docs/decisions/query-engine.md for the decision).
//!
//! A statement is parsed by DataFusion's parser in its MySQL dialect and planned against
//! `table::TernCatalog`, whose tables scan Tern partitions in parallel with projections and
//! simple filters pushed to the data node. Plans run on the engine's own threads (a tokio
//! runtime of `threads` workers), never on a front end's or data node's thread; memory is bounded
//! per statement (sorts and aggregations spill to disk beyond it; a statement whose hash join
//! runs out runs again with sort-merge joins, which spill; what still does not fit fails with
//! MySQL's 3170), and the statement stops on KILL or its deadline.

pub mod arrow;
mod funcs;
mod group_concat;
mod join_order;
mod memory;
mod mysql;
mod names;
mod scan;
pub mod table;
mod udf;

use datafusion::common::DataFusionError;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tern_client::Client;
use tern_sql::SqlError;
use tern_sql::limits::Budget;
use tern_sql::meta::ColumnDef;
use tern_types::Value;

/// The engine's threads.
struct Engine {
    rt: tokio::runtime::Runtime,
    threads: usize,
}

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(1, 16);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name("tern-engine")
            .thread_stack_size(16 << 20)
            .enable_all()
            .build()
            .expect("the query engine's runtime starts");
        Engine { rt, threads }
    })
}

/// A result set.
pub struct Rows {
    pub columns: Vec<ColumnDef>,
    pub rows: Vec<Vec<Value>>,
}

/// Name of the default schema when no database is selected (no Tern database can be named so:
/// names are at most 64 characters of MySQL identifiers... and this one has a NUL).
const NO_DATABASE: &str = "\0no database";

/// Keys of a hash join's build side, at most, that it hands to its probe-side scan (which reads
/// them by key or sends them to the data node as a key-set filter, see `scan`). DataFusion
/// keeps them as one literal each (~100 bytes), so this bounds that list at ~25 MiB.
const JOIN_KEYS_MAX: usize = 1 << 18;

/// How often a waiting statement looks at KILL and its deadline.
const CHECK_EVERY: Duration = Duration::from_millis(20);

/// What a statement may read: databases it may see (others are unknown to it) and, when set, a
/// check of each table it reads (an error such as MySQL's 1142 fails the statement).
#[derive(Clone, Default)]
pub struct Access {
    pub dbs: Vec<String>,
    pub table_check: Option<TableCheck>,
}

/// `(db, table)` → may the statement read it.
pub type TableCheck = Arc<dyn Fn(&str, &str) -> Result<(), SqlError> + Send + Sync>;

impl Access {
    /// These databases, every table in them.
    pub fn dbs(dbs: Vec<String>) -> Access {
        Access { dbs, table_check: None }
    }
}

/// Plans and runs `sql` (one SELECT / WITH statement) with `db` as the current database.
pub fn query<'a>(
    client: &'a Client,
    db: Option<&'a str>,
    sql: &'a str,
    allowed: &'a Access,
    budget: &'a mut Budget,
) -> tern_sql::Fut<'a, Result<Rows, SqlError>> {
    Box::pin(query_async(client, db, sql, allowed, budget))
}

async fn query_async(
    client: &Client,
    db: Option<&str>,
    sql: &str,
    allowed: &Access,
    budget: &mut Budget,
) -> Result<Rows, SqlError> {
    let memory = budget.memory_max().min(usize::MAX as u64) as usize;
    let s = Statement::new(client, db, sql, allowed, memory);
    checked(budget, async move { s.run().await }).await
}

/// The engine's plan of `sql` as text (what `EXPLAIN FORMAT=TREE` shows), or with `analyze`
/// the plan after running it, with each operator's rows, times and, for Tern scans, the keys
/// they looked up (`EXPLAIN ANALYZE`).
pub fn explain<'a>(
    client: &'a Client,
    db: Option<&'a str>,
    sql: &'a str,
    allowed: &'a Access,
    budget: &'a mut Budget,
    analyze: bool,
) -> tern_sql::Fut<'a, Result<String, SqlError>> {
    Box::pin(explain_async(client, db, sql, allowed, budget, analyze))
}

async fn explain_async(
    client: &Client,
    db: Option<&str>,
    sql: &str,
    allowed: &Access,
    budget: &mut Budget,
    analyze: bool,
) -> Result<String, SqlError> {
    let memory = budget.memory_max().min(usize::MAX as u64) as usize;
    let s = Statement::new(client, db, sql, allowed, memory);
    checked(budget, async move { s.explain(analyze).await }).await
}

/// Runs `f` on the engine's threads while the statement's KILL and deadline are watched.
async fn checked<T: Send + 'static>(
    budget: &mut Budget,
    f: impl std::future::Future<Output = Result<T, SqlError>> + Send + 'static,
) -> Result<T, SqlError> {
    let mut task = engine().rt.spawn(f);
    loop {
        tokio::select! {
            r = &mut task => return r.map_err(|e| SqlError::new(1105, "HY000", format!("query engine: {e}")))?,
            _ = tokio::time::sleep(CHECK_EVERY) => {
                if let Err(e) = budget.check() {
                    task.abort();
                    return Err(e);
                }
            }
        }
    }
}

/// Bytes of spill files one statement may write (sorts, aggregations and, after a hash join
/// ran out of memory, the sort-merge join that replaces it; DataFusion's own bound is 100 GB).
const SPILL_MAX: u64 = 32 << 30;

/// Spill files one merge pass of a sort reads at once.
const SPILL_MERGE_FAN_IN: usize = 2;

/// One statement for the engine.
struct Statement {
    client: Client,
    db: Option<String>,
    sql: String,
    allowed: Access,
    memory: usize,
}

impl Statement {
    fn new(client: &Client, db: Option<&str>, sql: &str, allowed: &Access, memory: usize) -> Statement {
        Statement {
            client: client.clone(),
            db: db.map(str::to_string),
            sql: sql.to_string(),
            allowed: allowed.clone(),
            memory,
        }
    }

    /// The statement planned (logically) in a session of its own. `hash_joins`: equi-joins
    /// hash their build side in memory (fast; DataFusion's hash joins cannot spill), else they
    /// sort both sides and merge (sorts and the merge's buffered rows spill to disk).
    async fn plan(&self, hash_joins: bool) -> Result<(SessionContext, datafusion::dataframe::DataFrame), SqlError> {
        let Statement { client, db, sql, allowed, memory } = self;
        let (client, memory) = (client.clone(), *memory);
        // With joins that spill, smaller batches, so each sort's fair share of the memory
        // holds a few of them.
        let batch = if hash_joins { SessionConfig::new().batch_size() } else { 1024 };
        let mut config = SessionConfig::new()
            .with_batch_size(batch)
            .with_target_partitions(engine().threads)
            .with_information_schema(false)
            .with_create_default_catalog_and_schema(false)
            .with_default_catalog_and_schema("def", db.as_deref().unwrap_or(NO_DATABASE));
        {
            let o = config.options_mut();
            o.sql_parser.dialect = datafusion::config::Dialect::MySQL;
            // MySQL sorts NULL first in ascending order.
            o.sql_parser.default_null_ordering = "nulls_min".into();
            o.sql_parser.map_string_types_to_utf8view = false;
            // `1.5` is a DECIMAL literal in MySQL.
            o.sql_parser.parse_float_as_decimal = true;
            // A hash join hands the keys of a build side of up to this many rows to the scan on
            // its probe side, which then reads only those (`scan`: key reads or index ranges).
            o.optimizer.hash_join_inlist_pushdown_max_distinct_values = JOIN_KEYS_MAX;
            o.optimizer.hash_join_inlist_pushdown_max_size = JOIN_KEYS_MAX * 64;
            o.optimizer.prefer_hash_join = hash_joins;
            if !hash_joins {
                // Every equi-join sorts and merges (no side is "small enough" to hash whole).
                o.optimizer.hash_join_single_partition_threshold = 0;
                o.optimizer.hash_join_single_partition_threshold_rows = 0;
            }
            // A sort keeps this much for merging what it spilled (per partition; DataFusion's
            // 10 MiB each would exceed a small max_query_memory before the first row).
            o.execution.sort_spill_reservation_bytes = (memory / 32).min(10 << 20);
            o.execution.sort_in_place_threshold_bytes = (memory / 16).min(1 << 20);
        }
        // Operators that spill (sorts, aggregations) share what the others leave fairly: with
        // a greedy pool the first sort took it all and the next failed on its first batch.
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(memory::StatementPool::new(memory)))
            .with_max_temp_directory_size(SPILL_MAX)
            // A merge of spill files reserves a batch per file for as many files as it can get,
            // starving the other sorts of the statement (DataFusion's own note says so): a few
            // files per pass leave them their share.
            .with_max_spill_merge_fan_in(SPILL_MERGE_FAN_IN)
            .build_arc()
            .map_err(df_error)?;
        let mut state = datafusion::execution::SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .with_physical_optimizer_rule(Arc::new(scan::JoinKeysRule))
            .with_physical_optimizer_rule(Arc::new(scan::YieldingJoinsRule));
        // Semi joins move onto the input they filter (inner joins are reordered after the
        // optimizer, `physical`).
        state = state.with_optimizer_rule(Arc::new(join_order::JoinOrder { reorder: false }));
        let state = state.build();
        let mut ctx = SessionContext::new_with_state(state);
        datafusion::execution::FunctionRegistry::register_expr_planner(&mut ctx, Arc::new(mysql::MySqlPlanner))
            .map_err(df_error)?;
        udf::register(&ctx);
        // Table sizes for the join planner (which side to hash), from the node's row counts.
        let rows = match client.status_async().await {
            Ok(s) => s.table_rows.into_iter().collect(),
            Err(_) => Default::default(),
        };
        ctx.register_catalog(
            "def",
            Arc::new(table::TernCatalog { client, allowed: allowed.clone(), rows: Arc::new(rows) }),
        );
        let state = ctx.state();
        let text = funcs::rollup_text(sql);
        let mut stmt = state.sql_to_statement(&text, &datafusion::config::Dialect::MySQL).map_err(|e| {
            SqlError::new(1064, "42000", format!("You have an error in your SQL syntax; {}", strip(&e)))
        })?;
        names::name_columns(&mut stmt, &text);
        funcs::rewrite(&mut stmt);
        funcs::rewrite_rollup(&mut stmt);
        let plan = state.statement_to_plan(stmt).await.map_err(|e| plan_error(e, db.as_deref()))?;
        use datafusion::logical_expr::LogicalPlan as P;
        if matches!(plan, P::Dml(_) | P::Ddl(_) | P::Copy(_) | P::Statement(_) | P::Explain(_) | P::Analyze(_)) {
            // Only queries reach the engine: no DDL, DML, COPY, SET or EXPLAIN of its own.
            return Err(SqlError::new(
                1235,
                "42000",
                "This version of Tern doesn't yet support 'this statement in the query engine'",
            ));
        }
        let df = ctx.execute_logical_plan(plan).await.map_err(df_error)?;
        Ok((ctx, df))
    }

    /// Runs the statement with hash joins; when one of them runs out of memory, again with
    /// sort-merge joins, which spill (nothing has been sent to the client yet: the rows are
    /// gathered here first).
    async fn run(self) -> Result<Rows, SqlError> {
        match self.run_with(true).await {
            Err(Run::HashJoinOutOfMemory(_)) => self.run_with(false).await.map_err(Run::error),
            r => r.map_err(Run::error),
        }
    }

    async fn run_with(&self, hash_joins: bool) -> Result<Rows, Run> {
        let memory = self.memory;
        let (ctx, df) = self.plan(hash_joins).await?;
        let mut columns: Vec<ColumnDef> = df.schema().fields().iter().map(|f| arrow::column_def(f)).collect();
        let decimals_known: Vec<bool> = df.schema().fields().iter().map(|f| arrow::decimals_known(f)).collect();
        let plan = physical(&ctx, df).await?;
        let hashes = hash_joins && has_hash_join(plan.as_ref());
        let failed = Run::of(hashes);
        // Each batch becomes rows here, on the engine's threads, as it arrives; the rows count
        // against the same bound as the operators' memory.
        let mut stream = datafusion::physical_plan::execute_stream(plan, ctx.task_ctx()).map_err(failed)?;
        let (mut rows, mut bytes) = (Vec::new(), 0usize);
        while let Some(b) = futures::StreamExt::next(&mut stream).await {
            let from = rows.len();
            arrow::rows_of(&b.map_err(failed)?, &mut rows).map_err(|e| SqlError::new(1105, "HY000", e))?;
            bytes = rows[from..].iter().fold(bytes, |n, r| n.saturating_add(tern_sql::limits::row_bytes(r)));
            if bytes > memory {
                return Err(tern_sql::limits::memory_exceeded(memory as u64).into());
            }
        }
        // A computed DATETIME or TIME shows the fraction digits its values need (a column's
        // own are in its metadata).
        for (i, (c, known)) in columns.iter_mut().zip(&decimals_known).enumerate() {
            if !known && (c.ty == tern_sql::meta::ty::DATETIME || c.ty == tern_sql::meta::ty::TIME) {
                c.decimals = rows.iter().map(|r| r.get(i).map_or(0, arrow::fsp_of)).max().unwrap_or(0);
            }
        }
        Ok(Rows { columns, rows })
    }

    async fn explain(self, analyze: bool) -> Result<String, SqlError> {
        match self.explain_with(analyze, true).await {
            Err(Run::HashJoinOutOfMemory(_)) => self.explain_with(analyze, false).await.map_err(Run::error),
            r => r.map_err(Run::error),
        }
    }

    async fn explain_with(&self, analyze: bool, hash_joins: bool) -> Result<String, Run> {
        let (ctx, df) = self.plan(hash_joins).await?;
        let plan = physical(&ctx, df).await?;
        let mut out = String::from("Query engine (DataFusion) plan:\n");
        if analyze {
            let hashes = hash_joins && has_hash_join(plan.as_ref());
            let failed = Run::of(hashes);
            let mut stream = datafusion::physical_plan::execute_stream(plan.clone(), ctx.task_ctx()).map_err(failed)?;
            let mut n = 0usize;
            while let Some(b) = futures::StreamExt::next(&mut stream).await {
                n += b.map_err(failed)?.num_rows();
            }
            let shown = datafusion::physical_plan::display::DisplayableExecutionPlan::with_metrics(plan.as_ref());
            out.push_str(&format!("{}Rows returned: {n}\n", shown.indent(true)));
        } else {
            let shown = datafusion::physical_plan::displayable(plan.as_ref());
            out.push_str(&shown.indent(true).to_string());
        }
        Ok(out)
    }
}

/// How a run of a statement failed.
enum Run {
    /// Out of memory with a hash join in the plan: worth running again with joins that spill.
    HashJoinOutOfMemory(SqlError),
    Failed(SqlError),
}

impl Run {
    /// What a DataFusion error means for a run whose plan `hashes` joins or not.
    fn of(hashes: bool) -> impl Fn(DataFusionError) -> Run + Copy {
        move |e| {
            if hashes && matches!(e.find_root(), DataFusionError::ResourcesExhausted(_)) {
                Run::HashJoinOutOfMemory(df_error(e))
            } else {
                Run::Failed(df_error(e))
            }
        }
    }

    fn error(self) -> SqlError {
        match self {
            Run::HashJoinOutOfMemory(e) | Run::Failed(e) => e,
        }
    }
}

impl From<SqlError> for Run {
    fn from(e: SqlError) -> Run {
        Run::Failed(e)
    }
}

/// Whether a physical plan hashes a join's side in memory.
fn has_hash_join(plan: &dyn datafusion::physical_plan::ExecutionPlan) -> bool {
    let mut todo = vec![plan];
    while let Some(p) = todo.pop() {
        if p.is::<datafusion::physical_plan::joins::HashJoinExec>() {
            return true;
        }
        todo.extend(p.children().into_iter().map(|c| c.as_ref()));
    }
    false
}

/// DataFusion's message without its "Error during planning: " style prefix chain.
fn strip(e: &DataFusionError) -> String {
    let s = e.strip_backtrace();
    s.rsplit_once(": ").map(|(_, m)| m.to_string()).filter(|m| !m.is_empty()).unwrap_or(s)
}

/// The statement's physical plan: DataFusion's logical optimizer (with the semi-join push),
/// then its inner joins reordered (`join_order`) on the rows their filtered inputs keep, measured
/// on a sample of each (a few thousand rows read per filtered table of a join of three or more).
async fn physical(
    ctx: &SessionContext,
    df: datafusion::dataframe::DataFrame,
) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>, SqlError> {
    let (state, plan) = df.into_parts();
    let mut plan = state.optimize(&plan).map_err(df_error)?;
    if join_order::enabled() {
        let mut samples = join_order::Samples::new();
        // A sample that cannot be planned or read leaves its input to the guesses.
        for s in join_order::sample_plans(&plan).unwrap_or_default() {
            let (Ok(passed), Ok(read)) = (count_of(ctx, &state, &s.passed).await, count_of(ctx, &state, &s.read).await)
            else {
                continue;
            };
            if read > 0 {
                // None passing in the sample: fewer than one in `read`, say half of that.
                samples.insert(s.key, (passed as f64).max(0.5) / read as f64);
            }
        }
        let reordered = join_order::reorder_sampled(plan, &samples).map_err(df_error)?;
        plan = if reordered.transformed { state.optimize(&reordered.data).map_err(df_error)? } else { reordered.data };
    }
    state.query_planner().create_physical_plan(&plan, &state).await.map_err(df_error)
}

/// The one INT64 value of a counting plan (`join_order::SamplePlan`).
async fn count_of(
    ctx: &SessionContext,
    state: &datafusion::execution::SessionState,
    plan: &datafusion::logical_expr::LogicalPlan,
) -> Result<i64, SqlError> {
    let physical = state.query_planner().create_physical_plan(plan, state).await.map_err(df_error)?;
    let batches = datafusion::physical_plan::collect(physical, ctx.task_ctx()).await.map_err(df_error)?;
    let count = batches
        .iter()
        .find(|b| b.num_rows() > 0)
        .and_then(|b| b.column(0).as_any().downcast_ref::<datafusion::arrow::array::Int64Array>().map(|a| a.value(0)));
    Ok(count.unwrap_or(0))
}

fn plan_error(e: DataFusionError, db: Option<&str>) -> SqlError {
    let text = e.strip_backtrace();
    if let Some(rest) = text.split("table '").nth(1)
        && text.contains("not found")
    {
        let name = rest.split('\'').next().unwrap_or("");
        let name = name.strip_prefix("def.").unwrap_or(name);
        if name.starts_with(NO_DATABASE) || (db.is_none() && !name.contains('.')) {
            return SqlError::new(1046, "3D000", "No database selected");
        }
        return SqlError::new(1146, "42S02", format!("Table '{name}' doesn't exist"));
    }
    if text.contains("must appear in the GROUP BY clause") {
        // The engine groups as MySQL's ONLY_FULL_GROUP_BY does.
        return SqlError::new(
            1055,
            "42000",
            format!(
                "Expression of SELECT list is not in GROUP BY clause and contains nonaggregated column: {}",
                strip(&e)
            ),
        );
    }
    if text.contains("No field named") || text.contains("Schema error") {
        return SqlError::new(1054, "42S22", format!("Unknown column in query: {}", strip(&e)));
    }
    df_error(e)
}

fn df_error(e: DataFusionError) -> SqlError {
    // Operators wrap what failed (a hash join's build side is shared, `Shared`; streams add
    // `Context` and Arrow's `External`): the innermost DataFusion error says what it was.
    let root = e.find_root();
    match root {
        DataFusionError::ResourcesExhausted(m) => {
            return SqlError::new(
                3170,
                "HY000",
                format!("Memory capacity of max_query_memory bytes exceeded for this query: {m}"),
            );
        }
        DataFusionError::External(x) => {
            if let Some(t) = x.downcast_ref::<tern_types::TernError>() {
                return SqlError::from(t.clone());
            }
            if let Some(t) = x.downcast_ref::<SqlError>() {
                return t.clone();
            }
        }
        DataFusionError::NotImplemented(m) => {
            return SqlError::new(1235, "42000", format!("This version of Tern doesn't yet support '{m}'"));
        }
        _ => {}
    }
    match e {
        DataFusionError::External(x) => SqlError::new(1105, "HY000", x.to_string()),
        e => SqlError::new(1105, "HY000", e.strip_backtrace()),
    }
}
