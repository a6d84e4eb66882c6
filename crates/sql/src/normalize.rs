//! Statement normalisation for the plan cache: the literals of a SELECT / INSERT / REPLACE /
//! UPDATE / DELETE text become `?` parameters, so `... WHERE id=17` and `... WHERE id=42` share
//! one cached plan and run with the literal as the parameter value. Literals whose text matters
//! stay: the select list (it names result columns), ORDER BY / GROUP BY (positions), and the
//! arguments of type names (`DECIMAL(10,2)` in CAST). When the normalised text does not plan,
//! the caller uses the original text.

use super::lex::{Tok, tokenize_spans};
use super::parse::number;
use tern_types::Value;

const TYPE_WORDS: &[&str] =
    &["DECIMAL", "NUMERIC", "DEC", "CHAR", "VARCHAR", "BINARY", "DATETIME", "TIME", "TIMESTAMP", "FLOAT", "DOUBLE"];

/// (normalised text, literal values in order), or None when the statement is not normalised.
pub fn normalize(sql: &str) -> Option<(String, Vec<Value>)> {
    let toks = tokenize_spans(sql).ok()?;
    let first = match toks.first() {
        Some((Tok::Word(w), ..)) => w.to_ascii_uppercase(),
        _ => return None,
    };
    if !matches!(first.as_str(), "SELECT" | "INSERT" | "REPLACE" | "UPDATE" | "DELETE") {
        return None;
    }
    // Statements that already use `?` are prepared ones: leave them.
    if toks.iter().any(|(t, ..)| *t == Tok::Param) {
        return None;
    }
    let mut out = String::with_capacity(sql.len());
    let mut params = Vec::new();
    let mut last = 0;
    // Per parenthesis depth: inside a select list, inside ORDER/GROUP BY.
    let mut select_list = vec![false];
    let mut positional = vec![false];
    // Depth at which a type's argument list started (literals there stay).
    let mut type_args: Option<usize> = None;
    let mut depth = 0usize;
    for (k, (t, start, end)) in toks.iter().enumerate() {
        match t {
            Tok::Sym("(") => {
                if let (Some((Tok::Word(w), ..)), None) = (k.checked_sub(1).and_then(|p| toks.get(p)), type_args)
                    && TYPE_WORDS.iter().any(|x| w.eq_ignore_ascii_case(x))
                {
                    type_args = Some(depth);
                }
                depth += 1;
                // Inside parentheses the clause goes on (a select list's function arguments
                // still name the column); a subquery's SELECT sets its own.
                let (sl, po) = (*select_list.last().expect("depth"), *positional.last().expect("depth"));
                select_list.push(sl);
                positional.push(po);
                continue;
            }
            Tok::Sym(")") => {
                if depth == 0 {
                    // Unbalanced: not normalised (the parser will say what is wrong).
                    return None;
                }
                depth -= 1;
                select_list.pop();
                positional.pop();
                if type_args == Some(depth) {
                    type_args = None;
                }
                continue;
            }
            Tok::Word(w) => {
                let u = w.to_ascii_uppercase();
                let d = select_list.len() - 1;
                match u.as_str() {
                    "SELECT" => select_list[d] = true,
                    "FROM" => select_list[d] = false,
                    "ORDER" | "GROUP" => positional[d] = true,
                    "LIMIT" | "HAVING" | "FOR" | "UNION" | "LOCK" => positional[d] = false,
                    _ => {}
                }
                continue;
            }
            _ => {}
        }
        let d = select_list.len() - 1;
        if select_list[d] || positional[d] || type_args.is_some() {
            continue;
        }
        let v = match t {
            Tok::Num(n) => number(n)?,
            Tok::Str(b) | Tok::HexBytes(b) | Tok::BitBytes(b) => Value::Bytes(b.clone()),
            _ => continue,
        };
        out.push_str(&sql[last..*start]);
        out.push('?');
        last = *end;
        params.push(v);
    }
    if params.is_empty() {
        return None;
    }
    out.push_str(&sql[last..]);
    Some((out, params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_become_parameters() {
        let (t, p) = normalize("SELECT c FROM sbtest1 WHERE id=5050").unwrap();
        assert_eq!(t, "SELECT c FROM sbtest1 WHERE id=?");
        assert_eq!(p, vec![Value::Int(5050)]);
        let (t, p) = normalize("INSERT INTO t (id, k, c) VALUES (1, -2, 'it''s')").unwrap();
        assert_eq!(t, "INSERT INTO t (id, k, c) VALUES (?, -?, ?)");
        assert_eq!(p, vec![Value::Int(1), Value::Int(2), Value::str("it's")]);
        let (t, _) = normalize("SELECT 'a', 1 + 2 AS x FROM t WHERE k IN (1, 2) ORDER BY 1 LIMIT 5").unwrap();
        assert_eq!(t, "SELECT 'a', 1 + 2 AS x FROM t WHERE k IN (?, ?) ORDER BY 1 LIMIT ?");
        let (t, _) =
            normalize("SELECT id FROM t WHERE d = CAST('1.5' AS DECIMAL(10,2)) AND x IN (SELECT 3 FROM u WHERE y = 4)")
                .unwrap();
        assert_eq!(t, "SELECT id FROM t WHERE d = CAST(? AS DECIMAL(10,2)) AND x IN (SELECT 3 FROM u WHERE y = ?)");
        assert!(normalize("CREATE TABLE t (id INT)").is_none());
        assert!(normalize("SELECT 1").is_none());
        assert!(normalize("SELECT CONCAT('[', c, ']'), 3 IN (1, 2) FROM t").is_none());
        assert!(normalize("SELECT c FROM t WHERE id = ?").is_none());
    }
}
