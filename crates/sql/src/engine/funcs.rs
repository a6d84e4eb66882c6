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

/// The replacement of one function call, None to keep it.
fn rewritten(e: &Expr) -> Option<Expr> {
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

/// A replacement's SQL as an expression (MySQL's dialect); None when it does not parse (too deep
/// for the parser's limit: the call stays as written and the engine refuses it).
fn parse(sql: &str) -> Option<Expr> {
    Parser::new(&MySqlDialect {}).try_with_sql(sql).ok()?.parse_expr().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::ast::Statement;

    fn rewrite_sql(sql: &str) -> String {
        let mut stmts = Parser::parse_sql(&MySqlDialect {}, sql).unwrap();
        let mut stmt = DfStatement::Statement(Box::new(stmts.remove(0)));
        rewrite(&mut stmt);
        let DfStatement::Statement(s) = stmt else { unreachable!() };
        let s: Statement = *s;
        s.to_string()
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
}
