//! MySQL functions the query engine lacks or computes differently, rewritten in the statement
//! before planning into SQL that DataFusion evaluates as MySQL does (MySQL 8.0 reference manual,
//! "Flow Control Functions", "Date and Time Functions", "String Functions"):
//! * `IF(c, a, b)` → `CASE WHEN c THEN a ELSE b END`;
//! * `YEAR`, `QUARTER`, `MONTH`, `DAY`/`DAYOFMONTH`, `HOUR`, `MINUTE`, `SECOND` → `EXTRACT` as an
//!   integer;
//! * `DATE_ADD`/`ADDDATE` and `DATE_SUB`/`SUBDATE` with an `INTERVAL` → `d + INTERVAL …` / `d -
//!   INTERVAL …`;
//! * `DATEDIFF(a, b)` → the days between the two dates (times ignored);
//! * `CONCAT(a, …)` → `a || …` (each argument cast to a string), NULL when any argument is NULL
//!   (DataFusion's `concat` skips NULLs);
//! * `MOD(a, b)` → `a % b`;
//! * `AVG(x)` → `SUM(x) / COUNT(x)` (MySQL rounds the average; the engine truncates a DECIMAL's);
//! * `SUBSTRING`/`SUBSTR` → `MID` (MySQL's negative start counts from the end);
//! * `CAST(x AS SIGNED|UNSIGNED)` and `CONVERT(x, SIGNED|UNSIGNED)` → the evaluator's cast (`udf`),
//!   `CONVERT(x, type)` → `CAST(x AS type)`, `CONVERT(x USING charset)` → `CAST(x AS CHAR)`;
//! * `TIMESTAMPDIFF`/`TIMESTAMPADD(unit, …)` → the unit as a string for the evaluator's functions.
//!
//! Functions the engine lacks that need no rewriting run on the OLTP evaluator (`udf`).
//!
//! Arguments are rendered back to SQL and the replacement parsed again; rewriting runs after
//! the children (a nested call is rewritten first) and never revisits what it produced.

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    DataType, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, visit_expressions_mut,
};
use datafusion::sql::sqlparser::dialect::{GenericDialect, MySqlDialect};
use datafusion::sql::sqlparser::parser::Parser;
use std::ops::ControlFlow;

/// Rewrites the MySQL functions of `stmt` (see the module's list).
pub fn rewrite(stmt: &mut DfStatement) {
    let DfStatement::Statement(s) = stmt else { return };
    let _ = visit_expressions_mut(s.as_mut(), |e| {
        if let Some(n) = rewritten(e) {
            *e = n;
        }
        ControlFlow::<()>::Continue(())
    });
}

/// `GROUP BY a, b WITH ROLLUP` (MySQL's syntax, which the engine's parser does not read) as
/// `GROUP BY ROLLUP(a, b)` in the statement's text, found with Tern's own lexer (so quoted
/// text and comments are left alone); `rewrite_rollup` finishes the job on the parsed
/// statement. The text unchanged when it has no `WITH ROLLUP`.
pub fn rollup_text(sql: &str) -> String {
    let Ok(toks) = tern_sql::lex::tokenize_spans(sql) else { return sql.to_string() };
    if !toks.windows(2).any(|w| w[0].0.is_kw("WITH") && w[1].0.is_kw("ROLLUP")) {
        return sql.to_string();
    }
    // (byte offset, text to insert there) and byte ranges to drop.
    let mut inserts: Vec<(usize, &str)> = Vec::new();
    let mut drops: Vec<(usize, usize)> = Vec::new();
    // The end of the last `GROUP BY` seen at each parenthesis depth.
    let mut group_by: Vec<Option<usize>> = vec![None];
    for (i, (t, _, end)) in toks.iter().enumerate() {
        match t {
            tern_sql::lex::Tok::Sym("(") => group_by.push(None),
            tern_sql::lex::Tok::Sym(")") if group_by.len() > 1 => {
                group_by.pop();
            }
            t if t.is_kw("BY") && i > 0 && toks[i - 1].0.is_kw("GROUP") => {
                *group_by.last_mut().expect("depth") = Some(*end);
            }
            t if t.is_kw("WITH") && toks.get(i + 1).is_some_and(|n| n.0.is_kw("ROLLUP")) => {
                if let Some(at) = group_by.last_mut().and_then(Option::take) {
                    inserts.push((at, " ROLLUP("));
                    drops.push((toks[i].1, toks[i + 1].2));
                }
            }
            _ => {}
        }
    }
    let mut out = String::with_capacity(sql.len() + 16);
    let mut pos = 0;
    let mut edits: Vec<(usize, usize, &str)> =
        inserts.iter().map(|&(at, text)| (at, at, text)).chain(drops.iter().map(|&(a, b)| (a, b, ")"))).collect();
    edits.sort_by_key(|e| e.0);
    for (from, to, text) in edits {
        out.push_str(&sql[pos..from]);
        out.push_str(text);
        pos = to;
    }
    out.push_str(&sql[pos..]);
    out
}

/// A `GROUP BY ROLLUP(a, b)` (MySQL has no such syntax: it came from `rollup_text`) gets,
/// without an ORDER BY, the order MySQL and MariaDB return such groups in: ascending by each
/// grouping column, a super-aggregate row after the groups it sums (`ORDER BY GROUPING(a), a,
/// GROUPING(b), b`). A position (`GROUP BY 1`) becomes the select item it names.
pub fn rewrite_rollup(stmt: &mut DfStatement) {
    use datafusion::sql::sqlparser::ast::{
        GroupByExpr, OrderBy, OrderByExpr, OrderByKind, OrderByOptions, Query, SelectItem, SetExpr, Value, VisitMut,
        VisitorMut,
    };
    struct Rollups;
    impl VisitorMut for Rollups {
        type Break = ();
        fn post_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
            let SetExpr::Select(sel) = q.body.as_mut() else { return ControlFlow::Continue(()) };
            let GroupByExpr::Expressions(group, mods) = &sel.group_by else { return ControlFlow::Continue(()) };
            // The engine's MySQL dialect reads `ROLLUP(a, b)` as a function call.
            let [Expr::Function(f)] = group.as_slice() else { return ControlFlow::Continue(()) };
            if !mods.is_empty() || !f.name.to_string().eq_ignore_ascii_case("rollup") {
                return ControlFlow::Continue(());
            }
            let FunctionArguments::List(list) = &f.args else { return ControlFlow::Continue(()) };
            let mut exprs: Vec<Expr> = Vec::new();
            for a in &list.args {
                let FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) = a else { return ControlFlow::Continue(()) };
                exprs.push(e.clone());
            }
            let item = |n: usize| match sel.projection.get(n.wrapping_sub(1)) {
                Some(SelectItem::UnnamedExpr(e)) | Some(SelectItem::ExprWithAlias { expr: e, .. }) => Some(e.clone()),
                _ => None,
            };
            let exprs: Vec<Expr> = exprs
                .into_iter()
                .map(|e| {
                    let at = match &e {
                        Expr::Value(v) => match &v.value {
                            Value::Number(n, _) => n.parse::<usize>().ok().and_then(item),
                            _ => None,
                        },
                        // A select item's alias (which the engine does not look up inside
                        // ROLLUP) is its expression.
                        Expr::Identifier(id) => sel.projection.iter().find_map(|p| match p {
                            SelectItem::ExprWithAlias { expr, alias }
                                if alias.value.eq_ignore_ascii_case(&id.value) =>
                            {
                                Some(expr.clone())
                            }
                            _ => None,
                        }),
                        _ => None,
                    };
                    at.unwrap_or(e)
                })
                .collect();
            sel.group_by =
                GroupByExpr::Expressions(vec![Expr::Rollup(exprs.iter().map(|e| vec![e.clone()]).collect())], vec![]);
            if q.order_by.is_none() {
                let mut keys = Vec::new();
                for e in &exprs {
                    let Some(g) = parse(&format!("GROUPING({e})")) else { return ControlFlow::Continue(()) };
                    for x in [g, e.clone()] {
                        keys.push(OrderByExpr {
                            expr: x,
                            options: OrderByOptions { asc: Some(true), nulls_first: None },
                            with_fill: None,
                        });
                    }
                }
                q.order_by = Some(OrderBy { kind: OrderByKind::Expressions(keys), interpolate: None });
            }
            ControlFlow::Continue(())
        }
    }
    let DfStatement::Statement(s) = stmt else { return };
    let _ = s.visit(&mut Rollups);
}

/// The replacement of one function call, None to keep it.
fn rewritten(e: &Expr) -> Option<Expr> {
    // A number with an exponent (`2e0`, `1.5E-3`) is a DOUBLE in MySQL; the engine reads every
    // literal with a point or exponent as a DECIMAL (`parse_float_as_decimal`, right for `1.5`).
    if let Expr::Value(v) = e
        && let datafusion::sql::sqlparser::ast::Value::Number(n, _) = &v.value
        && n.contains(['e', 'E'])
    {
        return parse(&format!("CAST('{n}' AS DOUBLE)"));
    }
    // SUBSTRING/SUBSTR (either syntax) → MID, which the OLTP evaluator runs (`udf`): the
    // engine's own counts a negative start before the string, MySQL's from its end.
    if let Expr::Substring { expr, substring_from, substring_for, .. } = e {
        let args: Vec<String> = [Some(expr), substring_from.as_ref(), substring_for.as_ref()]
            .into_iter()
            .flatten()
            .map(|x| format!("({x})"))
            .collect();
        let sql = format!("MID({})", args.join(", "));
        return parse(&sql);
    }
    // CAST/CONVERT to SIGNED or UNSIGNED (which the engine does not know) run on the OLTP
    // evaluator's cast (`udf`: MySQL rounds a DECIMAL, reads a string's leading number);
    // CONVERT(x, type) is CAST(x AS type) and CONVERT(x USING charset) is x.
    let signed = |t: &DataType| match t {
        DataType::Signed | DataType::SignedInteger => Some("tern_cast_signed"),
        DataType::Unsigned | DataType::UnsignedInteger => Some("tern_cast_unsigned"),
        _ => None,
    };
    match e {
        Expr::Cast { expr, data_type, format: None, .. } => {
            let f = signed(data_type)?;
            return parse(&format!("{f}(({expr}))"));
        }
        Expr::Convert { is_try: false, expr, data_type, charset, styles, .. } if styles.is_empty() => {
            let sql = match (data_type, charset) {
                (Some(t), None) => match signed(t) {
                    Some(f) => format!("{f}(({expr}))"),
                    None => format!("CAST(({expr}) AS {t})"),
                },
                (None, Some(_)) => format!("CAST(({expr}) AS CHAR)"),
                _ => return None,
            };
            return parse(&sql);
        }
        _ => {}
    }
    let Expr::Function(f) = e else { return None };
    if f.over.is_some() || f.filter.is_some() || f.name.0.len() != 1 {
        return None;
    }
    let FunctionArguments::List(list) = &f.args else { return None };
    if f.name.to_string().eq_ignore_ascii_case("GROUP_CONCAT") {
        return group_concat(list);
    }
    if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
        return None;
    }
    let mut args = Vec::with_capacity(list.args.len());
    let mut interval = Vec::with_capacity(list.args.len());
    for a in &list.args {
        let FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) = a else { return None };
        interval.push(matches!(x, Expr::Interval(_)));
        args.push(format!("({x})"));
    }
    let name = f.name.to_string().to_ascii_uppercase();
    // TIMESTAMPDIFF/TIMESTAMPADD(unit, a, b): the unit keyword becomes a string for the
    // evaluator's functions (`udf`).
    if matches!(name.as_str(), "TIMESTAMPDIFF" | "TIMESTAMPADD")
        && let [FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(unit))), ..] = &list.args[..]
        && args.len() == 3
    {
        let unit = unit.value.to_ascii_uppercase();
        if !unit.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return None;
        }
        let sql = format!("{}('{unit}', {}, {})", name.to_ascii_lowercase(), args[1], args[2]);
        return parse(&sql);
    }
    let sql = match (name.as_str(), &args[..]) {
        ("IF", [c, a, b]) => format!("CASE WHEN {c} THEN {a} ELSE {b} END"),
        ("YEAR" | "QUARTER" | "MONTH" | "HOUR" | "MINUTE" | "SECOND", [x]) => {
            format!("CAST(EXTRACT({name} FROM {x}) AS BIGINT)")
        }
        ("DAY" | "DAYOFMONTH", [x]) => format!("CAST(EXTRACT(DAY FROM {x}) AS BIGINT)"),
        ("DATE_ADD" | "ADDDATE", [d, i]) if interval[1] => format!("({d} + {i})"),
        ("DATE_SUB" | "SUBDATE", [d, i]) if interval[1] => format!("({d} - {i})"),
        // MySQL's `%` (a zero divisor gives NULL; the engine's planner makes `%` MySQL's).
        ("MOD", [a, b]) => format!("({a} % {b})"),
        // MySQL's AVG is SUM / COUNT with `/`'s scale (4 more digits) rounded half away from
        // zero; the engine's own truncates a DECIMAL average (19358.60 / 7 = 2765.514285).
        ("AVG", [x]) => format!("(SUM({x}) / COUNT({x}))"),
        ("DATEDIFF", [a, b]) => {
            format!("(CAST(CAST(CAST({a} AS DATE) AS INT) AS BIGINT) - CAST(CAST(CAST({b} AS DATE) AS INT) AS BIGINT))")
        }
        // `||` is NULL when either side is (and each argument appears once: nested CONCATs
        // grow the statement linearly); the casts are those DataFusion's `concat` makes.
        ("CONCAT", xs) if !xs.is_empty() => {
            let parts: Vec<String> = xs.iter().map(|x| format!("CAST({x} AS VARCHAR)")).collect();
            let sql = format!("({})", parts.join(" || "));
            // Parsed as standard SQL, where `||` concatenates (in MySQL's dialect it is OR).
            return Parser::new(&GenericDialect {}).try_with_sql(&sql).ok()?.parse_expr().ok();
        }
        _ => return None,
    };
    parse(&sql)
}

/// `GROUP_CONCAT([DISTINCT] a [, b ...] [ORDER BY k [ASC|DESC], ...] [SEPARATOR 's'])` as
/// `tern_group_concat('<flags>', 's', tern_concat(a, b, ...), k, ...)` (`group_concat`: the
/// arguments' text as MySQL's CONCAT makes it — NULL when one is NULL, and the row is left
/// out —, ordered by the keys; separator ',' by default).
fn group_concat(list: &datafusion::sql::sqlparser::ast::FunctionArgumentList) -> Option<Expr> {
    use datafusion::sql::sqlparser::ast::{DuplicateTreatment, FunctionArgumentClause, Value};
    let mut args = Vec::with_capacity(list.args.len());
    for a in &list.args {
        let FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) = a else { return None };
        args.push(format!("({x})"));
    }
    if args.is_empty() {
        return None;
    }
    let distinct = matches!(list.duplicate_treatment, Some(DuplicateTreatment::Distinct));
    let (mut flags, mut keys, mut sep) = (String::from(if distinct { "D" } else { "-" }), Vec::new(), ",".to_string());
    for c in &list.clauses {
        match c {
            FunctionArgumentClause::OrderBy(o) => {
                for k in o {
                    flags.push(if k.options.asc == Some(false) { 'd' } else { 'a' });
                    keys.push(format!("({})", k.expr));
                }
            }
            FunctionArgumentClause::Separator(v) => match &v.value {
                Value::SingleQuotedString(t) | Value::DoubleQuotedString(t) => sep = t.clone(),
                _ => return None,
            },
            _ => return None,
        }
    }
    let quote = |t: &str| format!("'{}'", t.replace('\\', "\\\\").replace('\'', "''"));
    let mut call = vec![quote(&flags), quote(&sep), format!("tern_concat({})", args.join(", "))];
    call.extend(keys);
    parse(&format!("tern_group_concat({})", call.join(", ")))
}

/// A replacement's SQL as an expression (MySQL's dialect); None when it does not parse (too deep
/// for the parser's limit: the call stays as written and the engine refuses it).
fn parse(sql: &str) -> Option<Expr> {
    Parser::new(&MySqlDialect {}).try_with_sql(sql).ok()?.parse_expr().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::ast::Statement;

    /// `sql` parsed, changed by `f`, and printed.
    fn rewritten_by(sql: &str, f: fn(&mut DfStatement)) -> String {
        let mut stmts = Parser::parse_sql(&MySqlDialect {}, sql).unwrap();
        let mut stmt = DfStatement::Statement(Box::new(stmts.remove(0)));
        f(&mut stmt);
        let DfStatement::Statement(s) = stmt else { unreachable!() };
        let s: Statement = *s;
        s.to_string()
    }

    fn rewrite_sql(sql: &str) -> String {
        rewritten_by(sql, rewrite)
    }

    #[test]
    fn group_concat_becomes_the_ordering_aggregate() {
        assert_eq!(
            rewrite_sql("SELECT GROUP_CONCAT(DISTINCT a, b ORDER BY c DESC, d SEPARATOR '; ') FROM t"),
            "SELECT tern_group_concat('Dda', '; ', tern_concat((a), (b)), (c), (d)) FROM t"
        );
        assert_eq!(
            rewrite_sql("SELECT GROUP_CONCAT(a) FROM t"),
            "SELECT tern_group_concat('-', ',', tern_concat((a))) FROM t"
        );
        assert_eq!(rewrite_sql("SELECT 2e0 / 3, 1.5 FROM t"), "SELECT CAST('2e0' AS DOUBLE) / 3, 1.5 FROM t");
    }

    #[test]
    fn mysql_functions_become_engine_sql() {
        assert_eq!(
            rewrite_sql("SELECT IF(a > 1, 'x', b) FROM t"),
            "SELECT CASE WHEN (a > 1) THEN ('x') ELSE (b) END FROM t"
        );
        // Nested calls are rewritten inside out, and what was produced is not rewritten again.
        assert_eq!(
            rewrite_sql("SELECT CONCAT(a, IF(b, c, d)) FROM t"),
            "SELECT (CAST((a) AS VARCHAR) || CAST((CASE WHEN (b) THEN (c) ELSE (d) END) AS VARCHAR)) FROM t"
        );
        // Nested CONCATs grow the statement linearly, not exponentially.
        let nested = format!("SELECT {}a{} FROM t", "CONCAT(b, ".repeat(12), ")".repeat(12));
        assert!(rewrite_sql(&nested).len() < nested.len() * 8);
        assert_eq!(rewrite_sql("SELECT year(d) FROM t"), "SELECT CAST(EXTRACT(YEAR FROM (d)) AS BIGINT) FROM t");
        assert_eq!(rewrite_sql("SELECT DATE_SUB(d, INTERVAL 2 DAY) FROM t"), "SELECT ((d) - (INTERVAL 2 DAY)) FROM t");
        // Not a MySQL-only form: kept.
        assert_eq!(rewrite_sql("SELECT DATE_ADD(d) FROM t"), "SELECT DATE_ADD(d) FROM t");
        assert_eq!(rewrite_sql("SELECT COUNT(DISTINCT a) FROM t"), "SELECT COUNT(DISTINCT a) FROM t");
        assert_eq!(
            rewrite_sql("SELECT SUBSTRING(a, -3), SUBSTR(a FROM 2 FOR 1) FROM t"),
            "SELECT MID((a), (-3)), MID((a), (2), (1)) FROM t"
        );
        assert_eq!(rewrite_sql("SELECT MOD(a, 2) FROM t"), "SELECT ((a) % (2)) FROM t");
        assert_eq!(
            rewrite_sql("SELECT TIMESTAMPDIFF(MONTH, a, b), TIMESTAMPADD(day, 1, a) FROM t"),
            "SELECT timestampdiff('MONTH', (a), (b)), timestampadd('DAY', (1), (a)) FROM t"
        );
        assert_eq!(
            rewrite_sql(
                "SELECT CAST(a AS SIGNED), CONVERT(b, UNSIGNED), CONVERT(c, CHAR), CONVERT(d USING utf8mb4) FROM t"
            ),
            "SELECT tern_cast_signed((a)), tern_cast_unsigned((b)), CAST((c) AS CHAR), CAST((d) AS CHAR) FROM t"
        );
    }

    fn rollup_sql(sql: &str) -> String {
        rewritten_by(&rollup_text(sql), rewrite_rollup)
    }

    #[test]
    fn with_rollup_becomes_rollup_in_mysql_order() {
        assert_eq!(
            rollup_sql("SELECT a, b AS x, COUNT(*) FROM t GROUP BY 1, x WITH ROLLUP"),
            "SELECT a, b AS x, COUNT(*) FROM t GROUP BY ROLLUP (a, b) ORDER BY GROUPING(a) ASC, a ASC, GROUPING(b) ASC, b ASC"
        );
        // An ORDER BY of the statement's own is kept; strings, comments and a subquery's own
        // GROUP BY are left alone.
        assert_eq!(
            rollup_sql(
                "SELECT a, 'with rollup' FROM t /* WITH ROLLUP */ WHERE a IN (SELECT c FROM u GROUP BY c) GROUP BY a with rollup ORDER BY a DESC"
            ),
            "SELECT a, 'with rollup' FROM t WHERE a IN (SELECT c FROM u GROUP BY c) GROUP BY ROLLUP (a) ORDER BY a DESC"
        );
        assert_eq!(
            rollup_sql("SELECT * FROM (SELECT a, SUM(b) FROM t GROUP BY a WITH ROLLUP) AS d"),
            "SELECT * FROM (SELECT a, SUM(b) FROM t GROUP BY ROLLUP (a) ORDER BY GROUPING(a) ASC, a ASC) AS d"
        );
        let plain = "SELECT a FROM t GROUP BY a";
        assert_eq!(rollup_text(plain), plain);
        assert_eq!(
            rewrite_sql("SELECT AVG(a), AVG(DISTINCT b) FROM t"),
            "SELECT (SUM((a)) / COUNT((a))), AVG(DISTINCT b) FROM t"
        );
    }
}
