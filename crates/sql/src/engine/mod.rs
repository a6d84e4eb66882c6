//! The analytic query engine: Apache DataFusion planning and running the SELECTs the OLTP path
//! (`plan` / `run`: key lookups, index ranges, nested-loop joins with batched key reads) does not
//! serve well — joins that would scan inner tables, derived tables, CTEs, correlated subqueries,
//! window functions, set operations (see ARCHITECTURE.md, "Query engine", for the decision).
//!
//! A statement is parsed by DataFusion's parser in its MySQL dialect and planned against
//! `table::TernCatalog`, whose tables scan Tern partitions in parallel with projections and
//! simple filters pushed to the data node. Plans run on the engine's own threads (a tokio
//! runtime of `threads` workers), never on a front end's or data node's thread; memory is bounded
//! per statement (hash tables, sorts and aggregations spill to disk beyond it, other operators
//! fail with MySQL's 3170), and the statement stops on KILL or its deadline.

pub mod arrow;
mod funcs;
mod mysql;
mod names;
mod scan;
pub mod table;
mod udf;

use crate::SqlError;
use crate::limits::Budget;
use crate::meta::ColumnDef;
use datafusion::common::DataFusionError;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tern_client::Client;
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

/// Plans and runs `sql` (one SELECT / WITH statement) with `db` as the current database.
/// `allowed`: the databases the statement may read (others are unknown to it).
pub async fn query(
    client: &Client,
    db: Option<&str>,
    sql: &str,
    allowed: &[String],
    budget: &mut Budget,
) -> Result<Rows, SqlError> {
    let memory = budget.memory_max().min(usize::MAX as u64) as usize;
    let s = Statement::new(client, db, sql, allowed, memory);
    checked(budget, async move { s.run().await }).await
}

/// The engine's plan of `sql` as text (what `EXPLAIN FORMAT=TREE` shows), or with `analyze`
/// the plan after running it, with each operator's rows, times and, for Tern scans, the keys
/// they looked up (`EXPLAIN ANALYZE`).
pub async fn explain(
    client: &Client,
    db: Option<&str>,
    sql: &str,
    allowed: &[String],
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

/// One statement for the engine.
struct Statement {
    client: Client,
    db: Option<String>,
    sql: String,
    allowed: Vec<String>,
    memory: usize,
}

impl Statement {
    fn new(client: &Client, db: Option<&str>, sql: &str, allowed: &[String], memory: usize) -> Statement {
        Statement {
            client: client.clone(),
            db: db.map(str::to_string),
            sql: sql.to_string(),
            allowed: allowed.to_vec(),
            memory,
        }
    }

    /// The statement planned (logically) in a session of its own.
    async fn plan(self) -> Result<(SessionContext, datafusion::dataframe::DataFrame, usize), SqlError> {
        let Statement { client, db, sql, allowed, memory } = self;
        let mut config = SessionConfig::new()
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
        }
        let runtime = RuntimeEnvBuilder::new().with_memory_limit(memory, 1.0).build_arc().map_err(df_error)?;
        let state = datafusion::execution::SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .with_physical_optimizer_rule(Arc::new(scan::JoinKeysRule))
            .with_physical_optimizer_rule(Arc::new(scan::YieldingJoinsRule))
            .build();
        let mut ctx = SessionContext::new_with_state(state);
        datafusion::execution::FunctionRegistry::register_expr_planner(&mut ctx, Arc::new(mysql::MySqlPlanner))
            .map_err(df_error)?;
        udf::register(&ctx);
        // Table sizes for the join planner (which side to hash), from the node's row counts.
        let rows = match client.status_async().await {
            Ok(s) => s.table_rows.into_iter().collect(),
            Err(_) => Default::default(),
        };
        ctx.register_catalog("def", Arc::new(table::TernCatalog { client, allowed, rows: Arc::new(rows) }));
        let state = ctx.state();
        let text = funcs::rollup_text(&sql);
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
        Ok((ctx, df, memory))
    }

    async fn run(self) -> Result<Rows, SqlError> {
        let (_ctx, df, memory) = self.plan().await?;
        let mut columns: Vec<ColumnDef> = df.schema().fields().iter().map(|f| arrow::column_def(f)).collect();
        let decimals_known: Vec<bool> = df.schema().fields().iter().map(|f| arrow::decimals_known(f)).collect();
        // Each batch becomes rows here, on the engine's threads, as it arrives; the rows count
        // against the same bound as the operators' memory.
        let mut stream = df.execute_stream().await.map_err(df_error)?;
        let (mut rows, mut bytes) = (Vec::new(), 0usize);
        while let Some(b) = futures::StreamExt::next(&mut stream).await {
            let from = rows.len();
            arrow::rows_of(&b.map_err(df_error)?, &mut rows).map_err(|e| SqlError::new(1105, "HY000", e))?;
            bytes = rows[from..].iter().fold(bytes, |n, r| n.saturating_add(crate::limits::row_bytes(r)));
            if bytes > memory {
                return Err(crate::limits::memory_exceeded(memory as u64));
            }
        }
        // A computed DATETIME or TIME shows the fraction digits its values need (a column's
        // own are in its metadata).
        for (i, (c, known)) in columns.iter_mut().zip(&decimals_known).enumerate() {
            if !known && (c.ty == crate::meta::ty::DATETIME || c.ty == crate::meta::ty::TIME) {
                c.decimals = rows.iter().map(|r| r.get(i).map_or(0, arrow::fsp_of)).max().unwrap_or(0);
            }
        }
        Ok(Rows { columns, rows })
    }

    async fn explain(self, analyze: bool) -> Result<String, SqlError> {
        let (ctx, df, _) = self.plan().await?;
        let plan = df.create_physical_plan().await.map_err(df_error)?;
        let mut out = String::from("Query engine (DataFusion) plan:\n");
        if analyze {
            let mut stream =
                datafusion::physical_plan::execute_stream(plan.clone(), ctx.task_ctx()).map_err(df_error)?;
            let mut n = 0usize;
            while let Some(b) = futures::StreamExt::next(&mut stream).await {
                n += b.map_err(df_error)?.num_rows();
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

/// DataFusion's message without its "Error during planning: " style prefix chain.
fn strip(e: &DataFusionError) -> String {
    let s = e.strip_backtrace();
    s.rsplit_once(": ").map(|(_, m)| m.to_string()).filter(|m| !m.is_empty()).unwrap_or(s)
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
    match e {
        DataFusionError::ResourcesExhausted(m) => SqlError::new(
            3170,
            "HY000",
            format!("Memory capacity of max_query_memory bytes exceeded for this query: {m}"),
        ),
        DataFusionError::External(x) => match x.downcast::<tern_types::TernError>() {
            Ok(t) => SqlError::from(*t),
            Err(x) => SqlError::new(1105, "HY000", x.to_string()),
        },
        DataFusionError::Context(_, inner) => df_error(*inner),
        DataFusionError::NotImplemented(m) => {
            SqlError::new(1235, "42000", format!("This version of Tern doesn't yet support '{m}'"))
        }
        e => SqlError::new(1105, "HY000", e.strip_backtrace()),
    }
}
