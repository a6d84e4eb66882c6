//! Result column names as MySQL gives them: an expression without an alias is named by its
//! text as written in the statement (`x / 2`, `COUNT(*)`), a string literal by its value; a column
//! by its name. DataFusion would name them by its own rendering (`d.x / Int64(2)`), so the
//! statement's top-level select items get those names as aliases before planning.

use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{Expr, Ident, SelectItem, SetExpr, Statement, Value, ValueWithSpan};
use datafusion::sql::sqlparser::dialect::MySqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Location, Token, Tokenizer};

/// Names the unaliased items of the statement's result (the first SELECT of a set operation).
pub fn name_columns(stmt: &mut DfStatement, sql: &str) {
    let DfStatement::Statement(s) = stmt else { return };
    let Statement::Query(q) = s.as_mut() else { return };
    let Some(texts) = item_texts(sql) else { return };
    let mut body = q.body.as_mut();
    loop {
        match body {
            SetExpr::Select(s) => {
                // The texts are those of the first SELECT at the top level of the statement: they
                // name this projection only if they line up with it.
                if texts.len() != s.projection.len() {
                    return;
                }
                for (item, text) in s.projection.iter_mut().zip(texts) {
                    if let SelectItem::UnnamedExpr(e) = item
                        && let Some(name) = name_of(e, text)
                    {
                        *item = SelectItem::ExprWithAlias { expr: e.clone(), alias: Ident::with_quote('`', name) };
                    }
                }
                return;
            }
            SetExpr::SetOperation { left, .. } => body = left.as_mut(),
            _ => return,
        }
    }
}

/// MySQL's name of an unaliased item written as `text` (None: DataFusion's own is the same).
fn name_of(e: &Expr, text: &str) -> Option<String> {
    match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => None,
        Expr::Value(ValueWithSpan { value: Value::SingleQuotedString(s) | Value::DoubleQuotedString(s), .. }) => {
            Some(s.clone())
        }
        _ => Some(text.to_string()).filter(|t| !t.is_empty()),
    }
}

/// The texts of the select items of the first SELECT at depth 0 (outside parentheses: after a
/// WITH clause's queries), split at its top-level commas and ended by the first clause keyword.
fn item_texts(sql: &str) -> Option<Vec<&str>> {
    let tokens = Tokenizer::new(&MySqlDialect {}, sql).tokenize_with_location().ok()?;
    let keyword =
        |t: &Token, k: &str| matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(k));
    let mut depth = 0i32;
    let mut i = 0;
    // The SELECT.
    loop {
        let t = &tokens.get(i)?.token;
        match t {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ if depth == 0 && keyword(t, "SELECT") => break,
            _ => {}
        }
        i += 1;
    }
    i += 1;
    const MODIFIERS: [&str; 10] = [
        "ALL",
        "DISTINCT",
        "DISTINCTROW",
        "HIGH_PRIORITY",
        "STRAIGHT_JOIN",
        "SQL_SMALL_RESULT",
        "SQL_BIG_RESULT",
        "SQL_BUFFER_RESULT",
        "SQL_NO_CACHE",
        "SQL_CALC_FOUND_ROWS",
    ];
    const ENDS: [&str; 11] =
        ["FROM", "WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "UNION", "EXCEPT", "INTERSECT", "WINDOW", "INTO"];
    let mut items = Vec::new();
    let mut first: Option<usize> = None;
    let mut last = 0;
    while let Some(t) = tokens.get(i) {
        let tok = &t.token;
        let blank = matches!(tok, Token::Whitespace(_));
        if depth == 0 && (ENDS.iter().any(|k| keyword(tok, k)) || matches!(tok, Token::SemiColon | Token::EOF)) {
            break;
        }
        match tok {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ => {}
        }
        if depth == 0 && matches!(tok, Token::Comma) {
            items.push((first?, last));
            first = None;
        } else if !blank {
            if first.is_none() && items.is_empty() && MODIFIERS.iter().any(|k| keyword(tok, k)) {
                i += 1;
                continue;
            }
            first.get_or_insert(i);
            last = i;
        }
        i += 1;
    }
    items.push((first?, last));
    items.into_iter().map(|(a, b)| slice(sql, tokens[a].span.start, tokens[b].span.end)).collect()
}

/// The text between two locations (1-based lines and character columns; `end` exclusive).
fn slice(sql: &str, start: Location, end: Location) -> Option<&str> {
    let offset = |l: Location| -> Option<usize> {
        if l.line == 0 {
            return None;
        }
        let mut line_start = 0;
        for _ in 1..l.line {
            line_start += sql[line_start..].find('\n')? + 1;
        }
        let line = &sql[line_start..];
        let col = (l.column as usize).checked_sub(1)?;
        Some(line_start + line.char_indices().nth(col).map_or(line.len(), |(i, _)| i))
    };
    let (a, b) = (offset(start)?, offset(end)?);
    sql.get(a..b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::parser::DFParser;

    fn names(sql: &str) -> Vec<String> {
        let mut stmt = DFParser::parse_sql_with_dialect(sql, &MySqlDialect {}).unwrap().pop_front().unwrap();
        name_columns(&mut stmt, sql);
        let DfStatement::Statement(s) = stmt else { panic!() };
        let Statement::Query(q) = *s else { panic!() };
        let sel = match *q.body {
            SetExpr::Select(sel) => sel,
            SetExpr::SetOperation { left, .. } => match *left {
                SetExpr::Select(sel) => sel,
                _ => panic!(),
            },
            _ => panic!(),
        };
        sel.projection
            .iter()
            .map(|i| match i {
                SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
                other => format!("({other})"),
            })
            .collect()
    }

    #[test]
    fn items_are_named_by_their_text() {
        assert_eq!(
            names("SELECT x, d.y, x / 2, COUNT(*),  (x - 3) / 0.7 , 'abc', sum(a)  AS s, -x FROM d"),
            ["(x)", "(d.y)", "x / 2", "COUNT(*)", "(x - 3) / 0.7", "abc", "s", "-x"]
        );
        assert_eq!(names("SELECT\n  a +\n  b, é || 'ü', 1\nFROM t"), ["a +\n  b", "é || 'ü'", "1"]);
        assert_eq!(
            names("WITH w AS (SELECT 1 AS a) SELECT DISTINCT a + 1, f(a, (2)) FROM w UNION SELECT 1, 2"),
            ["a + 1", "f(a, (2))"]
        );
        assert_eq!(names("SELECT 1 + 1;"), ["1 + 1"]);
    }
}
