//! RonSQL: single-table aggregate queries answered through REST (`POST /0.1.0/ronsql`), with
//! RonDB rdrs2's request semantics (explain modes, output formats, error classes) and MySQL's
//! answers: the query is planned and run by this crate's engine exactly as the MySQL front end
//! runs it, so the aggregation is pushed into every ldm when the data node can evaluate it
//! (`plan::PushedAgg`) and the values print as the mysql client prints them.
//!
//! Facts from RonDB's public sources (storage/ndb/src/ronsql, rest-server2's ronsql operation and
//! tests): the five explain modes and their two error texts, the four output formats and their
//! content types, JSON's `{"data":[...]}` layout with the operation id first, TEXT's
//! mysql-batch-mode escaping (no output at all for zero rows), JSON_ASCII's `\uXXXX` escapes,
//! and the error classes with their HTTP statuses and the `[class] Caught exception:` body.

use crate::ast::{SelectItem, Statement};
use crate::limits::Budget;
use crate::meta::{ColumnDef, text_value, ty};
use crate::plan::{self, Access, Final, PushedAgg, SelectPlan, X};
use crate::run::{self, Env, Runner, Sess, TxnState};
use crate::{SqlError, eval};
use tern_agg::{AggExpr, AggOp, Arith};
use tern_client::{Client, TableHandle};
use tern_types::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExplainMode {
    /// A leading EXPLAIN is honoured (the default).
    Allow,
    Forbid,
    Require,
    /// A leading EXPLAIN is ignored.
    Remove,
    /// Every query is explained.
    Force,
}

impl ExplainMode {
    pub fn parse(s: &str) -> Option<ExplainMode> {
        Some(match s {
            "ALLOW" => ExplainMode::Allow,
            "FORBID" => ExplainMode::Forbid,
            "REQUIRE" => ExplainMode::Require,
            "REMOVE" => ExplainMode::Remove,
            "FORCE" => ExplainMode::Force,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    Json,
    JsonAscii,
    Text,
    TextNoHeader,
}

impl OutputFormat {
    pub fn parse(s: &str) -> Option<OutputFormat> {
        Some(match s {
            "JSON" => OutputFormat::Json,
            "JSON_ASCII" => OutputFormat::JsonAscii,
            "TEXT" => OutputFormat::Text,
            "TEXT_NOHEADER" => OutputFormat::TextNoHeader,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Json => "JSON",
            OutputFormat::JsonAscii => "JSON_ASCII",
            OutputFormat::Text => "TEXT",
            OutputFormat::TextNoHeader => "TEXT_NOHEADER",
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            OutputFormat::Json => "application/json; charset=utf-8",
            OutputFormat::JsonAscii => "application/json; charset=US-ASCII",
            OutputFormat::Text => "text/tab-separated-values; charset=utf-8; header=present",
            OutputFormat::TextNoHeader => "text/tab-separated-values; charset=utf-8; header=absent",
        }
    }
}

/// RonSQL's error classes (the `X-RonSQL-Error-Class` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    Syntax,
    Semantic,
    Unsupported,
    Limit,
    Resource,
    Internal,
}

impl ErrorClass {
    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::Syntax => "syntax",
            ErrorClass::Semantic => "semantic",
            ErrorClass::Unsupported => "unsupported",
            ErrorClass::Limit => "limit",
            ErrorClass::Resource => "resource",
            ErrorClass::Internal => "internal",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RonSqlError {
    pub class: ErrorClass,
    pub message: String,
    /// The data node's error code behind it (the `X-RonSQL-NDB-Error` header).
    pub ndb_error: Option<u32>,
}

impl RonSqlError {
    fn new(class: ErrorClass, message: impl Into<String>) -> RonSqlError {
        RonSqlError { class, message: message.into(), ndb_error: None }
    }

    /// The HTTP status of the class (a result over the memory limit is 413).
    pub fn status(&self) -> u16 {
        match self.class {
            ErrorClass::Syntax | ErrorClass::Semantic | ErrorClass::Unsupported => 400,
            ErrorClass::Limit if self.message.contains("result too large") => 413,
            ErrorClass::Limit => 400,
            ErrorClass::Resource => 503,
            ErrorClass::Internal => 500,
        }
    }

    /// The error body: `[class] Caught exception: message`.
    pub fn body(&self) -> String {
        format!("[{}] Caught exception: {}\n", self.class.name(), self.message)
    }

    fn from_sql(e: SqlError) -> RonSqlError {
        let class = match e.errno {
            1064 | 1065 | 1436 | 1473 => ErrorClass::Syntax,
            1046 | 1049 | 1052 | 1054 | 1055 | 1056 | 1109 | 1111 | 1146 | 1222 | 1241 | 1242 | 1247 => {
                ErrorClass::Semantic
            }
            1235 => ErrorClass::Unsupported,
            3170 | 3024 | 1317 | 1028 | 1153 | 1690 | 1264 => ErrorClass::Limit,
            _ => match e.class() {
                Some(tern_types::error::ErrorClass::Temporary) => ErrorClass::Resource,
                _ => ErrorClass::Internal,
            },
        };
        let message = match e.errno {
            1146 => format!("Failed to get table. {}", e.message),
            1054 => format!("Could not find column. {}", e.message),
            3170 => format!("result too large: {}", e.message),
            _ => e.message,
        };
        RonSqlError { class, message, ndb_error: e.code.map(|c| c as u32) }
    }
}

/// One RonSQL request, validated.
pub struct Query<'a> {
    pub sql: &'a str,
    pub database: &'a str,
    pub explain: ExplainMode,
    pub format: OutputFormat,
    pub operation_id: Option<&'a str>,
}

/// An answer: its content type and body.
pub struct Answer {
    pub content_type: &'static str,
    pub body: String,
}

/// The table a query reads (for the caller's access checks and catalog refresh), once it
/// parses; errors are RonSQL's.
pub fn table_of(sql: &str) -> Result<(Option<String>, String), RonSqlError> {
    let (_, text) = strip_explain(sql);
    let q = parse_select(text)?;
    let t = q.from.first().ok_or_else(|| RonSqlError::new(ErrorClass::Unsupported, "A FROM clause is required."))?;
    Ok((t.db.clone(), t.name.clone()))
}

/// Runs a RonSQL query: plans it like the MySQL front end, explains it or runs it, and formats
/// the result.
pub fn run<'a>(client: &'a Client, q: &'a Query<'_>, budget: Budget) -> crate::Fut<'a, Result<Answer, RonSqlError>> {
    Box::pin(run_async(client, q, budget))
}

async fn run_async(client: &Client, q: &Query<'_>, budget: Budget) -> Result<Answer, RonSqlError> {
    let (has_explain, text) = strip_explain(q.sql);
    let explain = match (q.explain, has_explain) {
        (ExplainMode::Forbid, true) => {
            return Err(RonSqlError::new(ErrorClass::Semantic, "Tried to EXPLAIN with explain mode set to FORBID."));
        }
        (ExplainMode::Require, false) => {
            return Err(RonSqlError::new(ErrorClass::Semantic, "Tried to query with explain mode set to REQUIRE."));
        }
        (ExplainMode::Allow, e) => e,
        (ExplainMode::Forbid, false) => false,
        (ExplainMode::Require, true) | (ExplainMode::Force, _) => true,
        (ExplainMode::Remove, _) => false,
    };
    let select = parse_select(text)?;
    check_shape(&select)?;
    let names: Vec<String> = select
        .items
        .iter()
        .map(|i| match i {
            SelectItem::Expr { alias, text, .. } => alias.clone().unwrap_or_else(|| text.clone()),
            SelectItem::Star(_) => String::new(),
        })
        .collect();
    let cat = OneDb { client, db: q.database };
    let p = plan::plan_select(&select, &cat, Some(q.database)).map_err(RonSqlError::from_sql)?;
    if !p.grouped {
        return Err(RonSqlError::new(
            ErrorClass::Unsupported,
            "Not an aggregate query. Currently, RonSQL only supports aggregate queries.",
        ));
    }
    if !p.subs.is_empty() {
        return Err(RonSqlError::new(ErrorClass::Unsupported, "RonSQL feature not implemented: subqueries."));
    }
    if explain {
        if matches!(q.format, OutputFormat::Json | OutputFormat::JsonAscii) {
            return Err(RonSqlError::new(
                ErrorClass::Unsupported,
                format!("RonSQL feature not implemented: {} format for EXPLAIN output", q.format.name()),
            ));
        }
        let sess = RonSess { db: q.database.to_string() };
        let env = Env { params: &[], subs: Vec::new(), sess: &sess, newrow: None };
        return Ok(Answer {
            content_type: "text/plain; charset=utf-8",
            body: explain_plan(&p, &names, q.format, &env),
        });
    }
    let sess = RonSess { db: q.database.to_string() };
    let env = Env { params: &[], subs: Vec::new(), sess: &sess, newrow: None };
    let mut ts = TxnState::default();
    let mut runner = Runner { client, ts: &mut ts, budget };
    let rows = match run::run_select(&mut runner, &p, &env, true).await {
        Ok(r) => r,
        Err(e) => {
            runner.abandon();
            return Err(RonSqlError::from_sql(e));
        }
    };
    runner.finish().await.map_err(RonSqlError::from_sql)?;
    Ok(Answer { content_type: q.format.content_type(), body: format_rows(&names, &p.columns, &rows, q) })
}

/// A leading EXPLAIN keyword (any case), and the rest.
fn strip_explain(sql: &str) -> (bool, &str) {
    let t = sql.trim_start();
    match t.get(..7) {
        Some(w) if w.eq_ignore_ascii_case("explain") && t[7..].starts_with(|c: char| c.is_whitespace()) => {
            (true, &t[7..])
        }
        _ => (false, sql),
    }
}

fn parse_select(text: &str) -> Result<crate::ast::Select, RonSqlError> {
    if text.trim().trim_end_matches(';').trim().is_empty() {
        return Err(RonSqlError::new(ErrorClass::Syntax, "Syntax error in SQL statement: Empty input"));
    }
    let parsed = crate::parse::parse(text).map_err(|e| {
        // Whatever the parser refuses, RonSQL calls a syntax error (rdrs2 has no other class
        // for statements it does not know).
        let e = crate::parse::sql_error(e, text);
        RonSqlError::new(ErrorClass::Syntax, format!("Syntax error in SQL statement: {}", e.message))
    })?;
    match parsed.stmt {
        Statement::Select(q) => Ok(*q),
        _ => Err(RonSqlError::new(ErrorClass::Unsupported, "RonSQL serves SELECT statements only.")),
    }
}

/// RonSQL's subset: one table, an aggregate query, no subqueries, unions or locking.
fn check_shape(q: &crate::ast::Select) -> Result<(), RonSqlError> {
    let unsupported = |m: &str| Err(RonSqlError::new(ErrorClass::Unsupported, m));
    if q.from.len() != 1 {
        return unsupported(if q.from.is_empty() {
            "A FROM clause is required."
        } else {
            "RonSQL feature not implemented: queries over more than one table."
        });
    }
    if !q.unions.is_empty() {
        return unsupported("RonSQL feature not implemented: UNION.");
    }
    if q.lock.is_some() {
        return unsupported("RonSQL feature not implemented: locking reads.");
    }
    if q.items.iter().any(|i| matches!(i, SelectItem::Star(_))) {
        return unsupported("RonSQL feature not implemented: SELECT *.");
    }
    Ok(())
}

struct OneDb<'a> {
    client: &'a Client,
    db: &'a str,
}

impl plan::Catalog for OneDb<'_> {
    fn table(&self, db: Option<&str>, name: &str) -> Result<TableHandle, SqlError> {
        let db = db.unwrap_or(self.db);
        if !db.eq_ignore_ascii_case(self.db) {
            return Err(SqlError::new(1146, "42S02", format!("Table '{db}.{name}' is not in the request's database")));
        }
        self.client
            .cached_table(self.db, name)
            .ok_or_else(|| SqlError::new(1146, "42S02", format!("Table '{}.{name}' doesn't exist", self.db)))
    }
}

/// A RonSQL request's session: no variables, the request's database.
struct RonSess {
    db: String,
}

impl Sess for RonSess {
    fn sysvar(&self, _global: bool, name: &str) -> Result<Value, SqlError> {
        Err(SqlError::new(1193, "HY000", format!("Unknown system variable '{name}'")))
    }
    fn uservar(&self, _name: &str) -> Value {
        Value::Null
    }
}

impl crate::func::FnCtx for RonSess {
    fn now(&self) -> i64 {
        eval::now_micros()
    }
    fn database(&self) -> Option<String> {
        Some(self.db.clone())
    }
    fn user(&self) -> String {
        "ronsql@localhost".into()
    }
    fn connection_id(&self) -> u32 {
        0
    }
    fn last_insert_id(&self) -> u64 {
        0
    }
    fn set_last_insert_id(&self, _v: u64) {}
    fn row_count(&self) -> i64 {
        -1
    }
    fn found_rows(&self) -> u64 {
        0
    }
}

/// Numbers print bare in JSON; everything else is a string.
fn is_number(c: &ColumnDef) -> bool {
    matches!(
        c.ty,
        ty::DECIMAL
            | ty::NEWDECIMAL
            | ty::TINY
            | ty::SHORT
            | ty::LONG
            | ty::FLOAT
            | ty::DOUBLE
            | ty::LONGLONG
            | ty::INT24
    )
}

fn format_rows(names: &[String], columns: &[ColumnDef], rows: &[Vec<Value>], q: &Query<'_>) -> String {
    let mut out = String::new();
    match q.format {
        OutputFormat::Json | OutputFormat::JsonAscii => {
            let ascii = q.format == OutputFormat::JsonAscii;
            match q.operation_id {
                Some(id) => {
                    out.push_str("{\"operationId\": ");
                    push_json_str(&mut out, id, ascii);
                    out.push_str(",\n\"data\":\n");
                }
                None => out.push_str("{\"data\":\n"),
            }
            out.push('[');
            for (i, row) in rows.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push('{');
                for (j, (v, c)) in row.iter().zip(columns).enumerate() {
                    if j > 0 {
                        out.push(',');
                    }
                    push_json_str(&mut out, names.get(j).map_or("", String::as_str), ascii);
                    out.push(':');
                    match text_value(v, c) {
                        None => out.push_str("null"),
                        Some(t) if is_number(c) && !matches!(v, Value::Double(d) if !d.is_finite()) => {
                            out.push_str(&String::from_utf8_lossy(&t))
                        }
                        Some(t) => push_json_str(&mut out, &String::from_utf8_lossy(&t), ascii),
                    }
                }
                out.push_str("}\n");
            }
            out.push_str("]\n}\n");
        }
        OutputFormat::Text | OutputFormat::TextNoHeader => {
            // As the mysql client in batch mode: nothing at all for an empty result.
            if rows.is_empty() {
                return out;
            }
            if q.format == OutputFormat::Text {
                let header: Vec<String> = names.iter().map(|n| tsv_escape(n.as_bytes())).collect();
                out.push_str(&header.join("\t"));
                out.push('\n');
            }
            for row in rows {
                let cells: Vec<String> = row
                    .iter()
                    .zip(columns)
                    .map(|(v, c)| match text_value(v, c) {
                        None => "NULL".to_string(),
                        Some(t) => tsv_escape(&t),
                    })
                    .collect();
                out.push_str(&cells.join("\t"));
                out.push('\n');
            }
        }
    }
    out
}

/// The mysql client's batch-mode escaping: NUL, tab, newline and backslash.
fn tsv_escape(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '\0' => out.push_str("\\0"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out
}

/// A JSON string as RonSQL writes it: control characters, DEL and C1 controls as `\u00xx`
/// (except \b \t \n \f \r), `"` and `\` escaped; with `ascii`, everything from U+00A0 up as
/// `\uxxxx` (surrogate pairs beyond U+FFFF).
pub fn push_json_str(out: &mut String, s: &str, ascii: bool) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c if ascii && (c as u32) >= 0xa0 => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{:04x}", unit));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// EXPLAIN's text: the access path, the conditions pushed to the data node, the aggregation
/// program it runs (or that the API server aggregates), and the output steps.
pub fn explain_plan(p: &SelectPlan, names: &[String], format: OutputFormat, env: &Env<'_>) -> String {
    let mut out = explain_tables(p, names, env);
    out.push_str(match format {
        OutputFormat::Text => "Output in mysql-style tab separated format.\n",
        OutputFormat::TextNoHeader => "Output in mysql-style tab separated, header-less format.\n",
        OutputFormat::Json => "Output in UTF-8 encoded JSON.\n",
        OutputFormat::JsonAscii => "Output in ASCII encoded JSON.\n",
    });
    out.push('\n');
    out
}

/// How the key-value path reads a planned SELECT: per table (in join order: each later table
/// read once per batch of rows before it) its access path and the conditions pushed to the data
/// node, then what the API server does (checks, aggregation or the pushed program, order,
/// limit). The MySQL front end's EXPLAIN shows it for queries that do not go to the engine.
pub fn explain_tables(p: &SelectPlan, names: &[String], env: &Env<'_>) -> String {
    let mut out = String::new();
    if p.srcs.is_empty() {
        out.push_str("No table: evaluated by the API server.\n");
        return out;
    }
    for (i, src) in p.srcs.iter().enumerate() {
        let t = &src.handle.table;
        let col = |c: usize| format!("`{}`", t.columns.get(c).map_or("?", |c| c.name.as_str()));
        if i > 0 {
            out.push_str("Joined (nested loop, batched by the rows before it):\n");
        }
        out.push_str(&format!("Table: `{}`.`{}`\n", t.database, t.name));
        match &src.access {
            Access::Scan => out.push_str("Execute as table scan.\n"),
            Access::Index { index, ranges } => {
                let cols: Vec<String> = index.columns.iter().map(|&c| col(c as usize)).collect();
                out.push_str(&format!(
                    "Execute as index scan.\nIndex: `{}`({}), {} range{}\n",
                    index.name,
                    cols.join(", "),
                    ranges.len(),
                    if ranges.len() == 1 { "" } else { "s" }
                ));
            }
            Access::Key(_) => out.push_str("Execute as primary key lookup.\n"),
            Access::Keys(k) => out.push_str(&format!("Execute as {} primary key lookups.\n", k.len())),
        }
        if src.push.is_empty() {
            out.push_str("No conditions pushed to the data node.\n");
        } else {
            out.push_str(&format!("Conditions pushed to the data node ({}):\n", src.push.len()));
            for c in &src.push {
                let line = match c {
                    plan::Push::Cmp(c, op, x) => {
                        format!("{} {} {}", col(*c as usize), cmp_text(*op), x_text(x, &col, env))
                    }
                    plan::Push::IsNull(c, true) => format!("{} IS NULL", col(*c as usize)),
                    plan::Push::IsNull(c, false) => format!("{} IS NOT NULL", col(*c as usize)),
                    plan::Push::In(c, l) => {
                        let vals: Vec<String> = l.iter().map(|x| x_text(x, &col, env)).collect();
                        format!("{} IN ({})", col(*c as usize), vals.join(", "))
                    }
                };
                out.push_str(&format!("  {line}\n"));
            }
        }
    }
    let t = &p.srcs[0].handle.table;
    let col = |c: usize| format!("`{}`", t.columns.get(c).map_or("?", |c| c.name.as_str()));
    if !p.filter.is_empty() && p.agg_push.is_none() {
        out.push_str(&format!("Conditions checked by the API server: {}\n", p.filter.len()));
    }
    match &p.agg_push {
        Some(a) => explain_program(&mut out, a, names, &col),
        None if p.grouped => {
            out.push_str("Aggregation by the API server over the scanned rows (the data node cannot evaluate it).\n")
        }
        None => {}
    }
    if !p.order.is_empty() {
        out.push_str(&format!(
            "Result sorted by {} key{}.\n",
            p.order.len(),
            if p.order.len() == 1 { "" } else { "s" }
        ));
    }
    if let Some(X::Lit(n)) = &p.limit {
        out.push_str(&format!(
            "Result limited to {} rows.\n",
            eval::text(n).map(|t| String::from_utf8_lossy(&t).into_owned()).unwrap_or_default()
        ));
    }
    out
}

fn explain_program(out: &mut String, a: &PushedAgg, names: &[String], col: &dyn Fn(usize) -> String) {
    out.push_str(&format!(
        "Aggregation program pushed to every ldm ({} grouping expression{}, {} aggregate{}); the API server merges the partial groups:\n",
        a.agg.group_by.len(),
        if a.agg.group_by.len() == 1 { "" } else { "s" },
        a.agg.aggs.len(),
        if a.agg.aggs.len() == 1 { "" } else { "s" }
    ));
    for (i, g) in a.agg.group_by.iter().enumerate() {
        out.push_str(&format!("  G{i} = {}\n", agg_expr_text(g, col)));
    }
    for (i, (op, arg)) in a.agg.aggs.iter().enumerate() {
        let name = match op {
            AggOp::Count => "COUNT",
            AggOp::Sum => "SUM",
            AggOp::Min => "MIN",
            AggOp::Max => "MAX",
            AggOp::Var => "VARIANCE_STATE",
        };
        let arg = arg.as_ref().map_or("*".to_string(), |x| agg_expr_text(x, col));
        out.push_str(&format!("  A{i} = {name}({arg})\n"));
    }
    // Which aggregate each query value comes from (slots to aggregate numbers).
    let slot_to_agg: Vec<usize> =
        a.agg.aggs.iter().enumerate().flat_map(|(i, (op, _))| std::iter::repeat_n(i, op.slots())).collect();
    let agg_of = |s: usize| slot_to_agg.get(s).copied().unwrap_or(0);
    out.push_str("Output:\n");
    for (i, x) in a.items.iter().enumerate() {
        let name = names.get(i).map_or("?", String::as_str);
        let how = match x {
            X::Agg(j) if *j >= a.finals.len() => format!("G{}", j - a.finals.len()),
            X::Agg(j) => match a.finals[*j] {
                Final::Slot(s) => format!("A{}", agg_of(s)),
                Final::Avg(s, c) => format!("CLIENT-SIDE CALCULATION: A{} / A{}", agg_of(s), agg_of(c)),
                Final::Var { slot, samp, sqrt } => format!(
                    "CLIENT-SIDE CALCULATION: {}{} of A{}",
                    if sqrt { "standard deviation" } else { "variance" },
                    if samp { " (sample)" } else { "" },
                    agg_of(slot)
                ),
            },
            _ => "an expression over the groups and aggregates".to_string(),
        };
        out.push_str(&format!("  `{name}` = {how}\n"));
    }
}

fn agg_expr_text(x: &AggExpr, col: &dyn Fn(usize) -> String) -> String {
    match x {
        AggExpr::Col(c) => col(*c as usize),
        AggExpr::Lit(v) => eval::text(v).map(|t| String::from_utf8_lossy(&t).into_owned()).unwrap_or_default(),
        AggExpr::Neg(a) => format!("-{}", agg_expr_text(a, col)),
        AggExpr::Bin(op, a, b) => format!(
            "({} {} {})",
            agg_expr_text(a, col),
            match op {
                Arith::Add => "+",
                Arith::Sub => "-",
                Arith::Mul => "*",
            },
            agg_expr_text(b, col)
        ),
    }
}

fn cmp_text(op: tern_types::filter::CmpOp) -> &'static str {
    use tern_types::filter::CmpOp::*;
    match op {
        Eq => "=",
        Ne => "<>",
        Lt => "<",
        Le => "<=",
        Gt => ">",
        Ge => ">=",
    }
}

/// A constant side of a pushed condition (computed at execution when it is an expression).
fn x_text(x: &X, col: &dyn Fn(usize) -> String, env: &Env<'_>) -> String {
    let mut constant = true;
    plan::walk_x(x, &mut |n| constant &= !matches!(n, X::Col(_) | X::Param(_) | X::Sub(_)));
    let x = &match (constant, x) {
        (true, X::Lit(_)) | (false, _) => x.clone(),
        (true, _) => run::ev(x, &[], &[], env).map(X::Lit).unwrap_or_else(|_| x.clone()),
    };
    match x {
        X::Lit(Value::Null) => "NULL".into(),
        X::Lit(v @ (Value::Bytes(_) | Value::Date(_) | Value::DateTime(_) | Value::Timestamp(_) | Value::Time(_))) => {
            format!("'{}'", eval::text(v).map(|t| String::from_utf8_lossy(&t).into_owned()).unwrap_or_default())
        }
        X::Lit(v) => eval::text(v).map(|t| String::from_utf8_lossy(&t).into_owned()).unwrap_or_default(),
        X::Col(c) => col(*c),
        X::Param(i) => format!("?{i}"),
        _ => "(a constant expression)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_escape_as_ronsql_does() {
        let mut s = String::new();
        push_json_str(&mut s, "a\"\\\n\u{1}\u{7f}\u{85}é日😀/", false);
        assert_eq!(s, "\"a\\\"\\\\\\n\\u0001\\u007f\\u0085é日😀/\"");
        let mut s = String::new();
        push_json_str(&mut s, "héllo 日本 😀", true);
        assert_eq!(s, "\"h\\u00e9llo \\u65e5\\u672c \\ud83d\\ude00\"");
    }

    #[test]
    fn explain_modes_and_shapes() {
        assert_eq!(strip_explain("  explain SELECT 1"), (true, " SELECT 1"));
        assert_eq!(strip_explain("EXPLAINED"), (false, "EXPLAINED"));
        assert_eq!(ExplainMode::parse("allow"), None);
        assert_eq!(OutputFormat::parse("TEXT_NOHEADER"), Some(OutputFormat::TextNoHeader));
        let shape = |sql: &str| check_shape(&parse_select(sql).unwrap()).map_err(|e| e.class);
        assert_eq!(shape("SELECT a, COUNT(*) FROM t GROUP BY a;"), Ok(()));
        assert_eq!(shape("SELECT COUNT(*) FROM t, u"), Err(ErrorClass::Unsupported));
        assert_eq!(parse_select("SELEC COUNT(*) FROM t").map_err(|e| e.class).err(), Some(ErrorClass::Syntax));
        assert_eq!(
            parse_select("  ").map_err(|e| e.message).err().as_deref(),
            Some("Syntax error in SQL statement: Empty input")
        );
        assert_eq!(tsv_escape(b"a\tb\\c\nd\0"), "a\\tb\\\\c\\nd\\0");
    }
}
