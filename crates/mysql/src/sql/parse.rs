//! A recursive-descent parser for the MySQL statements Tern serves. Errors are MySQL's 1064
//! "You have an error in your SQL syntax; ... near '<rest>' at line 1" so clients see the usual
//! text; statements it does not know at all are named by the caller (1235).

use super::ast::*;
use super::lex::{Tok, tokenize};
use tern_types::Value;

#[derive(Debug, Clone, PartialEq)]
pub enum ParseError {
    /// 1064 with the text near the failure.
    Syntax(String),
    /// A statement kind Tern does not serve (1235): its leading words.
    Unsupported(String),
}

pub struct Parsed {
    pub stmt: Statement,
    pub params: usize,
}

/// Parses one statement (a trailing `;` is allowed; more statements after it are an error).
pub fn parse(sql: &str) -> Result<Parsed, ParseError> {
    let toks = tokenize(sql).map_err(|e| ParseError::Syntax(format!("{} near '{}'", e.0, clip(sql))))?;
    let mut p = Parser { sql, toks, pos: 0, params: 0 };
    if p.toks.is_empty() {
        return Err(ParseError::Syntax(String::new()));
    }
    let stmt = p.statement()?;
    while p.eat_sym(";") {}
    if p.pos < p.toks.len() {
        return Err(p.error());
    }
    Ok(Parsed { stmt, params: p.params })
}

/// Parses a standalone expression (for `PREPARE ... FROM` tests and defaults).
pub fn parse_expr(sql: &str) -> Result<Expr, ParseError> {
    let toks = tokenize(sql).map_err(|e| ParseError::Syntax(e.0))?;
    let mut p = Parser { sql, toks, pos: 0, params: 0 };
    let e = p.expr()?;
    if p.pos < p.toks.len() {
        return Err(p.error());
    }
    Ok(e)
}

fn clip(s: &str) -> String {
    let mut end = s.len().min(80);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The numeric value of number text: integers that fit are Int/UInt, other integers and
/// fixed-point numbers are decimals, exponent forms are doubles.
pub fn number(text: &str) -> Option<Value> {
    if text.contains(['e', 'E']) {
        return text.parse::<f64>().ok().map(Value::Double);
    }
    if !text.contains('.') {
        if let Ok(v) = text.parse::<i64>() {
            return Some(Value::Int(v));
        }
        if let Ok(v) = text.parse::<u64>() {
            return Some(Value::UInt(v));
        }
        return tern_types::value::parse_decimal(text, 0)
            .map(|v| Value::Decimal { v, scale: 0 })
            .or_else(|| text.parse::<f64>().ok().map(Value::Double));
    }
    let frac = text.split_once('.').map(|(_, f)| f.len()).unwrap_or(0).min(30) as u8;
    match tern_types::value::parse_decimal(text, frac) {
        Some(v) if v.unsigned_abs() < 10u128.pow(38) => Some(Value::Decimal { v, scale: frac }),
        _ => text.parse::<f64>().ok().map(Value::Double),
    }
}

struct Parser<'a> {
    sql: &'a str,
    toks: Vec<(Tok, usize)>,
    pos: usize,
    params: usize,
}

/// Words that end an expression or a select item (cannot be implicit aliases).
const RESERVED: &[&str] = &[
    "FROM",
    "WHERE",
    "GROUP",
    "HAVING",
    "ORDER",
    "LIMIT",
    "OFFSET",
    "FOR",
    "LOCK",
    "UNION",
    "ON",
    "USING",
    "JOIN",
    "INNER",
    "LEFT",
    "RIGHT",
    "CROSS",
    "STRAIGHT_JOIN",
    "NATURAL",
    "AND",
    "OR",
    "XOR",
    "NOT",
    "AS",
    "SET",
    "VALUES",
    "VALUE",
    "INTO",
    "SELECT",
    "BETWEEN",
    "LIKE",
    "IN",
    "IS",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "DIV",
    "MOD",
    "ASC",
    "DESC",
    "WINDOW",
    "DUPLICATE",
    "KEY",
    "PARTITION",
    "USE",
    "IGNORE",
    "FORCE",
    "REGEXP",
    "RLIKE",
    "COLLATE",
];

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|(t, _)| t)
    }
    fn peek_at(&self, k: usize) -> Option<&Tok> {
        self.toks.get(self.pos + k).map(|(t, _)| t)
    }
    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|(t, _)| t.clone());
        if t.is_some() {
            self.pos += 1;
        }
        t
    }
    fn error(&self) -> ParseError {
        let near = match self.toks.get(self.pos) {
            Some((_, off)) => clip(&self.sql[*off..]),
            None => String::new(),
        };
        ParseError::Syntax(near)
    }
    fn at_kw(&self, kw: &str) -> bool {
        self.peek().is_some_and(|t| t.is_kw(kw))
    }
    fn at_kw_at(&self, k: usize, kw: &str) -> bool {
        self.peek_at(k).is_some_and(|t| t.is_kw(kw))
    }
    fn eat_kw(&mut self, kw: &str) -> bool {
        if self.at_kw(kw) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn eat_kws(&mut self, kws: &[&str]) -> bool {
        if kws.iter().enumerate().all(|(k, kw)| self.at_kw_at(k, kw)) {
            self.pos += kws.len();
            true
        } else {
            false
        }
    }
    fn expect_kw(&mut self, kw: &str) -> Result<(), ParseError> {
        if self.eat_kw(kw) { Ok(()) } else { Err(self.error()) }
    }
    fn at_sym(&self, s: &str) -> bool {
        matches!(self.peek(), Some(Tok::Sym(x)) if *x == s)
    }
    fn eat_sym(&mut self, s: &str) -> bool {
        if self.at_sym(s) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect_sym(&mut self, s: &str) -> Result<(), ParseError> {
        if self.eat_sym(s) { Ok(()) } else { Err(self.error()) }
    }
    fn ident(&mut self) -> Result<String, ParseError> {
        match self.peek() {
            Some(Tok::Word(w)) => {
                let w = w.clone();
                self.pos += 1;
                Ok(w)
            }
            Some(Tok::Quoted(w)) => {
                let w = w.clone();
                self.pos += 1;
                Ok(w)
            }
            _ => Err(self.error()),
        }
    }
    /// An identifier or a string (user names, aliases, option values).
    fn ident_or_string(&mut self) -> Result<String, ParseError> {
        if let Some(Tok::Str(s)) = self.peek() {
            let s = String::from_utf8_lossy(s).into_owned();
            self.pos += 1;
            return Ok(s);
        }
        self.ident()
    }
    fn string(&mut self) -> Result<String, ParseError> {
        match self.next() {
            Some(Tok::Str(s)) => Ok(String::from_utf8_lossy(&s).into_owned()),
            _ => {
                self.pos = self.pos.saturating_sub(1);
                Err(self.error())
            }
        }
    }
    fn obj_name(&mut self) -> Result<ObjName, ParseError> {
        let first = self.ident()?;
        if self.eat_sym(".") {
            let name = self.ident()?;
            Ok(ObjName { db: Some(first), name })
        } else {
            Ok(ObjName { db: None, name: first })
        }
    }
    fn u64_lit(&mut self) -> Result<u64, ParseError> {
        match self.next() {
            Some(Tok::Num(n)) => n.parse().map_err(|_| self.error()),
            _ => {
                self.pos = self.pos.saturating_sub(1);
                Err(self.error())
            }
        }
    }
    fn unsupported(&self) -> ParseError {
        let words: Vec<String> = self
            .toks
            .iter()
            .take(2)
            .map(|(t, _)| match t {
                Tok::Word(w) => w.to_uppercase(),
                _ => String::new(),
            })
            .filter(|w| !w.is_empty())
            .collect();
        ParseError::Unsupported(words.join(" "))
    }
    /// Skips tokens up to the end of the statement (options we accept and ignore).
    fn skip_rest(&mut self) {
        while self.pos < self.toks.len() && !self.at_sym(";") {
            self.pos += 1;
        }
    }

    // ------------------------------------------------------------------ statements

    fn statement(&mut self) -> Result<Statement, ParseError> {
        let Some(Tok::Word(w)) = self.peek() else {
            if self.at_sym("(") {
                return Ok(Statement::Select(Box::new(self.select_stmt()?)));
            }
            return Err(self.error());
        };
        let w = w.to_ascii_uppercase();
        match w.as_str() {
            "SELECT" => Ok(Statement::Select(Box::new(self.select_stmt()?))),
            "INSERT" | "REPLACE" => self.insert(),
            "UPDATE" => self.update(),
            "DELETE" => self.delete(),
            "CREATE" => self.create(),
            "DROP" => self.drop(),
            "ALTER" => self.alter(),
            "TRUNCATE" => {
                self.pos += 1;
                self.eat_kw("TABLE");
                Ok(Statement::Truncate(self.obj_name()?))
            }
            "USE" => {
                self.pos += 1;
                Ok(Statement::Use(self.ident()?))
            }
            "SET" => self.set(),
            "SHOW" => self.show(),
            "DESCRIBE" | "DESC" | "EXPLAIN" if !self.at_kw_at(1, "SELECT") => {
                self.pos += 1;
                let table = self.obj_name()?;
                Ok(Statement::Show(ShowKind::Columns { table, full: false, like: None }))
            }
            "BEGIN" => {
                self.pos += 1;
                self.eat_kw("WORK");
                Ok(Statement::Begin)
            }
            "START" => {
                self.pos += 1;
                self.expect_kw("TRANSACTION")?;
                // WITH CONSISTENT SNAPSHOT, READ ONLY/WRITE: accepted.
                self.skip_rest();
                Ok(Statement::Begin)
            }
            "COMMIT" => {
                self.pos += 1;
                self.eat_kw("WORK");
                Ok(Statement::Commit)
            }
            "ROLLBACK" => {
                self.pos += 1;
                self.eat_kw("WORK");
                if self.at_kw("TO") {
                    return Err(self.unsupported());
                }
                Ok(Statement::Rollback)
            }
            "PREPARE" => {
                self.pos += 1;
                let name = self.ident()?;
                self.expect_kw("FROM")?;
                let sql = self.primary()?;
                Ok(Statement::Prepare { name: name.to_ascii_lowercase(), sql })
            }
            "EXECUTE" => {
                self.pos += 1;
                let name = self.ident()?.to_ascii_lowercase();
                let mut using = Vec::new();
                if self.eat_kw("USING") {
                    loop {
                        match self.next() {
                            Some(Tok::UserVar(v)) => using.push(v),
                            _ => {
                                self.pos -= 1;
                                return Err(self.error());
                            }
                        }
                        if !self.eat_sym(",") {
                            break;
                        }
                    }
                }
                Ok(Statement::Execute { name, using })
            }
            "DEALLOCATE" => {
                self.pos += 1;
                self.expect_kw("PREPARE")?;
                Ok(Statement::Deallocate(self.ident()?.to_ascii_lowercase()))
            }
            "GRANT" | "REVOKE" => self.grant(),
            "LOAD" => self.load_data(),
            "LOCK" | "UNLOCK" | "FLUSH" | "ANALYZE" | "OPTIMIZE" | "CHECKSUM" => {
                self.skip_rest();
                Ok(Statement::Noop)
            }
            "DO" => {
                self.pos += 1;
                loop {
                    self.expr()?;
                    if !self.eat_sym(",") {
                        break;
                    }
                }
                Ok(Statement::Noop)
            }
            _ => Err(self.unsupported()),
        }
    }

    fn select_stmt(&mut self) -> Result<Select, ParseError> {
        let mut s = if self.eat_sym("(") {
            let s = self.select_stmt()?;
            self.expect_sym(")")?;
            s
        } else {
            self.select_core()?
        };
        while self.eat_kw("UNION") {
            let all = self.eat_kw("ALL");
            if !all {
                self.eat_kw("DISTINCT");
            }
            let next = if self.eat_sym("(") {
                let n = self.select_stmt()?;
                self.expect_sym(")")?;
                n
            } else {
                self.select_core()?
            };
            s.unions.push((all, next));
        }
        if !s.unions.is_empty() {
            // ORDER BY / LIMIT after a union apply to the whole; the parser put them on the last
            // part, so move them.
            let last = s.unions.last_mut().expect("a union part");
            let order = std::mem::take(&mut last.1.order_by);
            let limit = last.1.limit.take();
            let offset = last.1.offset.take();
            if !order.is_empty() || limit.is_some() {
                s.order_by = order;
                s.limit = limit;
                s.offset = offset;
            }
        }
        Ok(s)
    }

    fn select_core(&mut self) -> Result<Select, ParseError> {
        self.expect_kw("SELECT")?;
        let mut s = Select::default();
        loop {
            if self.eat_kw("DISTINCT") || self.eat_kw("DISTINCTROW") {
                s.distinct = true;
            } else if self.eat_kw("ALL")
                || self.eat_kw("SQL_NO_CACHE")
                || self.eat_kw("SQL_CACHE")
                || self.eat_kw("SQL_CALC_FOUND_ROWS")
                || self.eat_kw("HIGH_PRIORITY")
                || self.eat_kw("STRAIGHT_JOIN")
                || self.eat_kw("SQL_SMALL_RESULT")
                || self.eat_kw("SQL_BIG_RESULT")
                || self.eat_kw("SQL_BUFFER_RESULT")
            {
            } else {
                break;
            }
        }
        loop {
            s.items.push(self.select_item()?);
            if !self.eat_sym(",") {
                break;
            }
        }
        if self.eat_kw("FROM") {
            if self.eat_kw("DUAL") {
            } else {
                s.from = self.table_list()?;
            }
        }
        if self.eat_kw("WHERE") {
            s.filter = Some(self.expr()?);
        }
        if self.eat_kws(&["GROUP", "BY"]) {
            loop {
                s.group_by.push(self.expr()?);
                self.eat_kw("ASC");
                self.eat_kw("DESC");
                if !self.eat_sym(",") {
                    break;
                }
            }
            if self.eat_kws(&["WITH", "ROLLUP"]) {
                return Err(ParseError::Unsupported("WITH ROLLUP".into()));
            }
        }
        if self.eat_kw("HAVING") {
            s.having = Some(self.expr()?);
        }
        s.order_by = self.order_by()?;
        let (limit, offset) = self.limit()?;
        s.limit = limit;
        s.offset = offset;
        if self.eat_kws(&["FOR", "UPDATE"]) {
            s.lock = Some(Lock::Exclusive);
        } else if self.eat_kws(&["FOR", "SHARE"]) || self.eat_kws(&["LOCK", "IN", "SHARE", "MODE"]) {
            s.lock = Some(Lock::Shared);
        }
        if s.lock.is_some() {
            self.eat_kw("NOWAIT");
            self.eat_kws(&["SKIP", "LOCKED"]);
        }
        Ok(s)
    }

    fn order_by(&mut self) -> Result<Vec<(Expr, bool)>, ParseError> {
        let mut out = Vec::new();
        if self.eat_kws(&["ORDER", "BY"]) {
            loop {
                let e = self.expr()?;
                let desc = if self.eat_kw("DESC") {
                    true
                } else {
                    self.eat_kw("ASC");
                    false
                };
                out.push((e, desc));
                if !self.eat_sym(",") {
                    break;
                }
            }
        }
        Ok(out)
    }

    fn limit(&mut self) -> Result<(Option<Expr>, Option<Expr>), ParseError> {
        if !self.eat_kw("LIMIT") {
            return Ok((None, None));
        }
        let a = self.primary()?;
        if self.eat_sym(",") {
            let b = self.primary()?;
            return Ok((Some(b), Some(a)));
        }
        if self.eat_kw("OFFSET") {
            let b = self.primary()?;
            return Ok((Some(a), Some(b)));
        }
        Ok((Some(a), None))
    }

    fn select_item(&mut self) -> Result<SelectItem, ParseError> {
        if self.eat_sym("*") {
            return Ok(SelectItem::Star(None));
        }
        if matches!(self.peek(), Some(Tok::Word(_)) | Some(Tok::Quoted(_)))
            && self.at_sym_at(1, ".")
            && matches!(self.peek_at(2), Some(Tok::Sym("*")))
        {
            let t = self.ident()?;
            self.pos += 2;
            return Ok(SelectItem::Star(Some(t)));
        }
        let Some(&(_, start)) = self.toks.get(self.pos) else { return Err(self.error()) };
        let e = self.expr()?;
        let end = self.toks.get(self.pos).map(|t| t.1).unwrap_or(self.sql.len());
        let text = self.sql[start..end].trim().to_string();
        let text = match &e {
            Expr::Column { name, .. } => name.clone(),
            // A string literal's column is named by its value.
            Expr::Lit(Value::Bytes(b)) if text.starts_with(['\'', '"']) => String::from_utf8_lossy(b).into_owned(),
            _ => text,
        };
        let alias = self.alias()?;
        Ok(SelectItem::Expr { e, alias, text })
    }

    fn at_sym_at(&self, k: usize, s: &str) -> bool {
        matches!(self.peek_at(k), Some(Tok::Sym(x)) if *x == s)
    }

    fn alias(&mut self) -> Result<Option<String>, ParseError> {
        if self.eat_kw("AS") {
            return Ok(Some(self.ident_or_string()?));
        }
        match self.peek() {
            Some(Tok::Word(w)) if !RESERVED.iter().any(|r| w.eq_ignore_ascii_case(r)) => Ok(Some(self.ident()?)),
            Some(Tok::Quoted(_)) | Some(Tok::Str(_)) => Ok(Some(self.ident_or_string()?)),
            _ => Ok(None),
        }
    }

    fn table_ref(&mut self, join: Option<(JoinKind, Option<Expr>)>) -> Result<TableRef, ParseError> {
        if self.at_sym("(") {
            return Err(ParseError::Unsupported("derived tables".into()));
        }
        let n = self.obj_name()?;
        let alias = self.alias()?;
        // Index hints: USE/FORCE/IGNORE INDEX (...)
        while (self.at_kw("USE") || self.at_kw("FORCE") || self.at_kw("IGNORE"))
            && (self.at_kw_at(1, "INDEX") || self.at_kw_at(1, "KEY"))
        {
            self.pos += 2;
            if self.eat_kw("FOR") {
                self.next();
                self.eat_kw("BY");
            }
            self.expect_sym("(")?;
            while !self.eat_sym(")") {
                if self.next().is_none() {
                    return Err(self.error());
                }
            }
        }
        Ok(TableRef { db: n.db, name: n.name, alias, join })
    }

    fn table_list(&mut self) -> Result<Vec<TableRef>, ParseError> {
        let mut out = vec![self.table_ref(None)?];
        loop {
            if self.eat_sym(",") {
                out.push(self.table_ref(Some((JoinKind::Inner, None)))?);
                continue;
            }
            let kind = if self.eat_kw("JOIN") || self.eat_kws(&["INNER", "JOIN"]) || self.eat_kws(&["CROSS", "JOIN"]) {
                JoinKind::Inner
            } else if self.eat_kws(&["LEFT", "JOIN"]) || self.eat_kws(&["LEFT", "OUTER", "JOIN"]) {
                JoinKind::Left
            } else if self.at_kw("RIGHT") || self.at_kw("NATURAL") {
                return Err(ParseError::Unsupported(format!(
                    "{} JOIN",
                    if self.at_kw("RIGHT") { "RIGHT" } else { "NATURAL" }
                )));
            } else {
                break;
            };
            let mut t = self.table_ref(Some((kind, None)))?;
            if self.eat_kw("ON") {
                let on = self.expr()?;
                t.join = Some((kind, Some(on)));
            } else if self.eat_kw("USING") {
                self.expect_sym("(")?;
                let mut on: Option<Expr> = None;
                let prev = out.last().map(|p: &TableRef| p.alias.clone().unwrap_or(p.name.clone()));
                let me = t.alias.clone().unwrap_or(t.name.clone());
                loop {
                    let c = self.ident()?;
                    let eq = Expr::bin(
                        BinOp::Eq,
                        Expr::Column { table: prev.clone(), name: c.clone() },
                        Expr::Column { table: Some(me.clone()), name: c },
                    );
                    on = Some(match on {
                        None => eq,
                        Some(o) => Expr::bin(BinOp::And, o, eq),
                    });
                    if !self.eat_sym(",") {
                        break;
                    }
                }
                self.expect_sym(")")?;
                t.join = Some((kind, on));
            }
            out.push(t);
        }
        Ok(out)
    }

    fn insert(&mut self) -> Result<Statement, ParseError> {
        let replace = self.next().is_some_and(|t| t.is_kw("REPLACE"));
        self.eat_kw("LOW_PRIORITY");
        self.eat_kw("DELAYED");
        self.eat_kw("HIGH_PRIORITY");
        let ignore = self.eat_kw("IGNORE");
        self.eat_kw("INTO");
        let table = self.obj_name()?;
        let mut columns = None;
        if self.at_sym("(") && !self.at_kw_at(1, "SELECT") {
            self.pos += 1;
            let mut cols = Vec::new();
            if !self.at_sym(")") {
                loop {
                    cols.push(self.column_name()?);
                    if !self.eat_sym(",") {
                        break;
                    }
                }
            }
            self.expect_sym(")")?;
            columns = Some(cols);
        }
        let source = if self.eat_kw("VALUES") || self.eat_kw("VALUE") {
            let mut rows = Vec::new();
            loop {
                self.eat_kw("ROW");
                self.expect_sym("(")?;
                let mut row = Vec::new();
                if !self.at_sym(")") {
                    loop {
                        row.push(self.expr()?);
                        if !self.eat_sym(",") {
                            break;
                        }
                    }
                }
                self.expect_sym(")")?;
                rows.push(row);
                if !self.eat_sym(",") {
                    break;
                }
            }
            InsertSource::Values(rows)
        } else if self.eat_kw("SET") {
            let sets = self.assignments()?;
            columns = Some(sets.iter().map(|(c, _)| c.clone()).collect());
            InsertSource::Values(vec![sets.into_iter().map(|(_, e)| e).collect()])
        } else if self.at_kw("SELECT") || self.at_sym("(") {
            InsertSource::Select(Box::new(self.select_stmt()?))
        } else {
            return Err(self.error());
        };
        let mut on_dup = Vec::new();
        if self.eat_kws(&["ON", "DUPLICATE", "KEY", "UPDATE"]) {
            on_dup = self.assignments()?;
        }
        Ok(Statement::Insert(Box::new(Insert { table, columns, source, replace, ignore, on_dup })))
    }

    /// A column name, possibly qualified (`t.c`): the last part.
    fn column_name(&mut self) -> Result<String, ParseError> {
        let mut n = self.ident()?;
        while self.eat_sym(".") {
            n = self.ident()?;
        }
        Ok(n)
    }

    fn assignments(&mut self) -> Result<Vec<(String, Expr)>, ParseError> {
        let mut out = Vec::new();
        loop {
            let c = self.column_name()?;
            if !self.eat_sym("=") && !self.eat_sym(":=") {
                return Err(self.error());
            }
            out.push((c, self.expr()?));
            if !self.eat_sym(",") {
                break;
            }
        }
        Ok(out)
    }

    fn update(&mut self) -> Result<Statement, ParseError> {
        self.pos += 1;
        self.eat_kw("LOW_PRIORITY");
        self.eat_kw("IGNORE");
        let table = self.obj_name()?;
        if self.at_sym(",") || self.at_kw("JOIN") || self.at_kw("INNER") || self.at_kw("LEFT") {
            return Err(ParseError::Unsupported("multi-table UPDATE".into()));
        }
        let _ = self.alias()?;
        self.expect_kw("SET")?;
        let sets = self.assignments()?;
        let filter = if self.eat_kw("WHERE") { Some(self.expr()?) } else { None };
        let order_by = self.order_by()?;
        let limit = if self.eat_kw("LIMIT") { Some(self.primary()?) } else { None };
        Ok(Statement::Update(Box::new(Update { table, sets, filter, order_by, limit })))
    }

    fn delete(&mut self) -> Result<Statement, ParseError> {
        self.pos += 1;
        self.eat_kw("LOW_PRIORITY");
        self.eat_kw("QUICK");
        self.eat_kw("IGNORE");
        self.expect_kw("FROM")?;
        let table = self.obj_name()?;
        if self.at_sym(",") || self.at_kw("USING") || self.at_kw("JOIN") {
            return Err(ParseError::Unsupported("multi-table DELETE".into()));
        }
        let filter = if self.eat_kw("WHERE") { Some(self.expr()?) } else { None };
        let order_by = self.order_by()?;
        let limit = if self.eat_kw("LIMIT") { Some(self.primary()?) } else { None };
        Ok(Statement::Delete(Box::new(Delete { table, filter, order_by, limit })))
    }

    fn if_not_exists(&mut self) -> bool {
        self.eat_kws(&["IF", "NOT", "EXISTS"])
    }

    fn create(&mut self) -> Result<Statement, ParseError> {
        self.pos += 1;
        self.eat_kws(&["OR", "REPLACE"]);
        if self.eat_kw("DATABASE") || self.eat_kw("SCHEMA") {
            let if_not_exists = self.if_not_exists();
            let name = self.ident()?;
            self.skip_rest(); // CHARACTER SET / COLLATE
            return Ok(Statement::CreateDatabase { name, if_not_exists });
        }
        self.eat_kw("TEMPORARY");
        if self.eat_kw("TABLE") {
            return self.create_table();
        }
        let unique = self.eat_kw("UNIQUE");
        self.eat_kw("FULLTEXT");
        if self.eat_kw("INDEX") || self.eat_kw("KEY") {
            let name = self.ident()?;
            if self.eat_kw("USING") {
                self.ident()?;
            }
            self.expect_kw("ON")?;
            let table = self.obj_name()?;
            let columns = self.index_columns()?;
            self.skip_rest();
            return Ok(Statement::CreateIndex {
                table,
                index: IndexSpec { name: Some(name), columns, unique, primary: false },
            });
        }
        if self.eat_kw("USER") {
            let if_not_exists = self.if_not_exists();
            let mut users = Vec::new();
            loop {
                let (user, host) = self.user_spec()?;
                let mut pw = None;
                if self.eat_kws(&["IDENTIFIED", "BY"]) {
                    pw = Some(self.string()?);
                } else if self.eat_kws(&["IDENTIFIED", "WITH"]) {
                    self.ident_or_string()?;
                    if self.eat_kw("BY") {
                        pw = Some(self.string()?);
                    }
                }
                users.push((user, host, pw));
                if !self.eat_sym(",") {
                    break;
                }
            }
            self.skip_rest();
            return Ok(Statement::CreateUser { users, if_not_exists });
        }
        Err(self.unsupported())
    }

    /// `'user'@'host'`, `user@host`, `user` (host `%`).
    fn user_spec(&mut self) -> Result<(String, String), ParseError> {
        let user = self.ident_or_string()?;
        // The lexer reads `@'host'` / `@host` as a user variable.
        let host = match self.peek() {
            Some(Tok::UserVar(h)) => {
                let h = h.clone();
                self.pos += 1;
                h
            }
            _ => "%".to_string(),
        };
        Ok((user, host))
    }

    fn index_columns(&mut self) -> Result<Vec<String>, ParseError> {
        self.expect_sym("(")?;
        let mut cols = Vec::new();
        loop {
            cols.push(self.ident()?);
            if self.eat_sym("(") {
                self.u64_lit()?;
                self.expect_sym(")")?;
            }
            self.eat_kw("ASC");
            self.eat_kw("DESC");
            if !self.eat_sym(",") {
                break;
            }
        }
        self.expect_sym(")")?;
        Ok(cols)
    }

    fn create_table(&mut self) -> Result<Statement, ParseError> {
        let if_not_exists = self.if_not_exists();
        let table = self.obj_name()?;
        let mut ct = CreateTable {
            table,
            if_not_exists,
            columns: Vec::new(),
            indexes: Vec::new(),
            options: Vec::new(),
            partition_by_key: None,
            partitions: None,
            like: None,
        };
        if self.eat_kw("LIKE") {
            ct.like = Some(self.obj_name()?);
            return Ok(Statement::CreateTable(Box::new(ct)));
        }
        if self.at_kw("AS") || self.at_kw("SELECT") {
            return Err(ParseError::Unsupported("CREATE TABLE ... SELECT".into()));
        }
        self.expect_sym("(")?;
        loop {
            self.table_element(&mut ct)?;
            if !self.eat_sym(",") {
                break;
            }
        }
        self.expect_sym(")")?;
        // Table options.
        loop {
            self.eat_sym(",");
            if self.pos >= self.toks.len() || self.at_sym(";") || self.at_kw("PARTITION") {
                break;
            }
            let mut name = self.ident()?.to_ascii_uppercase();
            if name == "DEFAULT" {
                name = self.ident()?.to_ascii_uppercase();
            }
            if name == "CHARACTER" || name == "CHAR" {
                self.expect_kw("SET")?;
                name = "CHARSET".into();
            }
            self.eat_sym("=");
            let value = match self.next() {
                Some(Tok::Word(w)) | Some(Tok::Quoted(w)) | Some(Tok::Num(w)) => w,
                Some(Tok::Str(s)) => String::from_utf8_lossy(&s).into_owned(),
                _ => {
                    self.pos -= 1;
                    return Err(self.error());
                }
            };
            ct.options.push((name, value));
        }
        if self.eat_kw("PARTITION") {
            self.expect_kw("BY")?;
            self.eat_kw("LINEAR");
            if !self.eat_kw("KEY") {
                return Err(ParseError::Unsupported("PARTITION BY other than KEY".into()));
            }
            if self.eat_kw("ALGORITHM") {
                self.expect_sym("=")?;
                self.u64_lit()?;
            }
            self.expect_sym("(")?;
            let mut cols = Vec::new();
            if !self.at_sym(")") {
                loop {
                    cols.push(self.ident()?);
                    if !self.eat_sym(",") {
                        break;
                    }
                }
            }
            self.expect_sym(")")?;
            ct.partition_by_key = Some(cols);
            if self.eat_kw("PARTITIONS") {
                ct.partitions = Some(self.u64_lit()? as u32);
            }
        }
        Ok(Statement::CreateTable(Box::new(ct)))
    }

    fn table_element(&mut self, ct: &mut CreateTable) -> Result<(), ParseError> {
        if self.eat_kw("CONSTRAINT") && !self.at_kw("PRIMARY") && !self.at_kw("UNIQUE") && !self.at_kw("FOREIGN") {
            self.ident()?;
        }
        if self.eat_kws(&["PRIMARY", "KEY"]) {
            if self.eat_kw("USING") {
                self.ident()?;
            }
            let columns = self.index_columns()?;
            self.index_options()?;
            ct.indexes.push(IndexSpec { name: Some("PRIMARY".into()), columns, unique: true, primary: true });
            return Ok(());
        }
        if self.at_kw("UNIQUE") || self.at_kw("INDEX") || self.at_kw("KEY") || self.at_kw("FULLTEXT") {
            let unique = self.eat_kw("UNIQUE");
            self.eat_kw("FULLTEXT");
            if !self.eat_kw("INDEX") {
                self.eat_kw("KEY");
            }
            let name = if self.at_sym("(") { None } else { Some(self.ident()?) };
            if self.eat_kw("USING") {
                self.ident()?;
            }
            let columns = self.index_columns()?;
            self.index_options()?;
            ct.indexes.push(IndexSpec { name, columns, unique, primary: false });
            return Ok(());
        }
        if self.at_kw("FOREIGN") || self.at_kw("CHECK") {
            return Err(ParseError::Unsupported(
                if self.at_kw("CHECK") { "CHECK constraints" } else { "FOREIGN KEY" }.into(),
            ));
        }
        let c = self.column_spec()?;
        ct.columns.push(c);
        Ok(())
    }

    fn index_options(&mut self) -> Result<(), ParseError> {
        loop {
            if self.eat_kw("USING") {
                self.ident()?;
            } else if self.eat_kw("COMMENT") {
                self.string()?;
            } else {
                return Ok(());
            }
        }
    }

    fn column_spec(&mut self) -> Result<ColumnSpec, ParseError> {
        let name = self.ident()?;
        let ty = self.type_name()?;
        let mut c = ColumnSpec {
            name,
            ty,
            not_null: None,
            default: None,
            auto_increment: false,
            primary_key: false,
            unique: false,
            comment: None,
        };
        loop {
            if self.eat_kws(&["NOT", "NULL"]) {
                c.not_null = Some(true);
            } else if self.eat_kw("NULL") {
                c.not_null = Some(false);
            } else if self.eat_kw("DEFAULT") {
                c.default = Some(if self.at_sym("(") { self.primary()? } else { self.unary()? });
            } else if self.eat_kw("AUTO_INCREMENT") {
                c.auto_increment = true;
            } else if self.eat_kws(&["PRIMARY", "KEY"]) {
                c.primary_key = true;
            } else if self.eat_kw("UNIQUE") {
                self.eat_kw("KEY");
                c.unique = true;
            } else if self.eat_kw("KEY") {
                c.primary_key = true;
            } else if self.eat_kw("COMMENT") {
                c.comment = Some(self.string()?);
            } else if self.eat_kw("COLLATE") {
                self.ident_or_string()?;
            } else if self.eat_kw("CHARACTER") {
                self.expect_kw("SET")?;
                self.ident_or_string()?;
            } else if self.eat_kw("CHARSET") {
                self.ident_or_string()?;
            } else if self.eat_kws(&["ON", "UPDATE"]) {
                self.primary()?;
            } else if self.eat_kw("COLUMN_FORMAT") || self.eat_kw("STORAGE") {
                self.ident()?;
            } else if self.eat_kw("SIGNED") || self.eat_kw("ZEROFILL") {
            } else if self.eat_kw("UNSIGNED") {
                c.ty.unsigned = true;
            } else if self.at_kw("GENERATED") || self.at_kw("AS") {
                return Err(ParseError::Unsupported("generated columns".into()));
            } else if self.at_kw("REFERENCES") || self.at_kw("CHECK") {
                return Err(ParseError::Unsupported("FOREIGN KEY".into()));
            } else {
                return Ok(c);
            }
        }
    }

    fn type_name(&mut self) -> Result<TypeName, ParseError> {
        let mut name = self.ident()?.to_ascii_uppercase();
        if (name == "DOUBLE" && self.eat_kw("PRECISION")) || (name == "LONG" && self.eat_kw("VARCHAR")) {
            name = if name == "LONG" { "MEDIUMTEXT".into() } else { name };
        }
        if name == "CHARACTER" && self.eat_kw("VARYING") {
            name = "VARCHAR".into();
        }
        if name == "NATIONAL" {
            name = self.ident()?.to_ascii_uppercase();
        }
        let mut args = Vec::new();
        if self.eat_sym("(") {
            loop {
                match self.next() {
                    Some(Tok::Num(n)) => args.push(n),
                    Some(Tok::Str(s)) => args.push(String::from_utf8_lossy(&s).into_owned()),
                    _ => {
                        self.pos -= 1;
                        return Err(self.error());
                    }
                }
                if !self.eat_sym(",") {
                    break;
                }
            }
            self.expect_sym(")")?;
        }
        let mut unsigned = false;
        loop {
            if self.eat_kw("UNSIGNED") {
                unsigned = true;
            } else if self.eat_kw("SIGNED")
                || self.eat_kw("ZEROFILL")
                || (self.at_kw("BINARY")
                    && (name == "CHAR" || name == "VARCHAR" || name.ends_with("TEXT"))
                    && self.eat_kw("BINARY"))
            {
            } else if self.at_kw("CHARACTER") && self.at_kw_at(1, "SET") {
                self.pos += 2;
                self.ident_or_string()?;
            } else if self.eat_kw("CHARSET") || self.eat_kw("COLLATE") {
                self.ident_or_string()?;
            } else {
                break;
            }
        }
        Ok(TypeName { name, args, unsigned })
    }

    fn drop(&mut self) -> Result<Statement, ParseError> {
        self.pos += 1;
        if self.eat_kw("DATABASE") || self.eat_kw("SCHEMA") {
            let if_exists = self.eat_kws(&["IF", "EXISTS"]);
            return Ok(Statement::DropDatabase { name: self.ident()?, if_exists });
        }
        self.eat_kw("TEMPORARY");
        if self.eat_kw("TABLE") || self.eat_kw("TABLES") {
            let if_exists = self.eat_kws(&["IF", "EXISTS"]);
            let mut tables = Vec::new();
            loop {
                tables.push(self.obj_name()?);
                if !self.eat_sym(",") {
                    break;
                }
            }
            self.eat_kw("RESTRICT");
            self.eat_kw("CASCADE");
            return Ok(Statement::DropTable { tables, if_exists });
        }
        if self.eat_kw("INDEX") || self.eat_kw("KEY") {
            let name = self.ident()?;
            self.expect_kw("ON")?;
            let table = self.obj_name()?;
            return Ok(Statement::DropIndex { table, name });
        }
        if self.eat_kw("USER") {
            let if_exists = self.eat_kws(&["IF", "EXISTS"]);
            let mut users = Vec::new();
            loop {
                users.push(self.user_spec()?);
                if !self.eat_sym(",") {
                    break;
                }
            }
            return Ok(Statement::DropUser { users, if_exists });
        }
        Err(self.unsupported())
    }

    fn alter(&mut self) -> Result<Statement, ParseError> {
        self.pos += 1;
        if self.eat_kw("USER") {
            self.eat_kws(&["IF", "EXISTS"]);
            let (user, host) = self.user_spec()?;
            self.expect_kw("IDENTIFIED")?;
            if self.eat_kw("WITH") {
                self.ident_or_string()?;
            }
            self.expect_kw("BY")?;
            let password = self.string()?;
            return Ok(Statement::AlterUser { user, host, password });
        }
        if self.at_kw("DATABASE") || self.at_kw("SCHEMA") {
            self.skip_rest();
            return Ok(Statement::Noop);
        }
        self.eat_kw("ONLINE");
        self.expect_kw("TABLE")?;
        let table = self.obj_name()?;
        let mut ops = Vec::new();
        loop {
            if self.eat_kw("ADD") {
                if self.at_kw("INDEX") || self.at_kw("KEY") || self.at_kw("UNIQUE") || self.at_kw("PRIMARY") {
                    let mut ct = CreateTable {
                        table: table.clone(),
                        if_not_exists: false,
                        columns: Vec::new(),
                        indexes: Vec::new(),
                        options: Vec::new(),
                        partition_by_key: None,
                        partitions: None,
                        like: None,
                    };
                    self.table_element(&mut ct)?;
                    let idx = ct.indexes.pop().ok_or_else(|| self.error())?;
                    ops.push(AlterOp::AddIndex(idx));
                } else {
                    self.eat_kw("COLUMN");
                    if self.at_sym("(") {
                        return Err(ParseError::Unsupported("ADD COLUMN (list)".into()));
                    }
                    let c = self.column_spec()?;
                    if self.eat_kw("FIRST") {
                    } else if self.eat_kw("AFTER") {
                        self.ident()?;
                    }
                    ops.push(AlterOp::AddColumn(c));
                }
            } else if self.eat_kw("DROP") {
                if self.eat_kw("INDEX") || self.eat_kw("KEY") {
                    ops.push(AlterOp::DropIndex(self.ident()?));
                } else if self.at_kw("PRIMARY") {
                    return Err(ParseError::Unsupported("DROP PRIMARY KEY".into()));
                } else {
                    self.eat_kw("COLUMN");
                    ops.push(AlterOp::DropColumn(self.ident()?));
                }
            } else if self.eat_kw("ENGINE") || self.eat_kw("ALGORITHM") || self.eat_kw("LOCK") {
                self.eat_sym("=");
                self.ident()?;
            } else {
                return Err(ParseError::Unsupported(format!(
                    "ALTER TABLE {}",
                    match self.peek() {
                        Some(Tok::Word(w)) => w.to_uppercase(),
                        _ => "this form".into(),
                    }
                )));
            }
            if !self.eat_sym(",") {
                break;
            }
        }
        Ok(Statement::AlterTable { table, ops })
    }

    fn set(&mut self) -> Result<Statement, ParseError> {
        self.pos += 1;
        if self.eat_kw("NAMES") || (self.at_kw("CHARACTER") && self.at_kw_at(1, "SET")) || self.eat_kw("CHARSET") {
            self.skip_rest();
            return Ok(Statement::SetNames);
        }
        if self.at_kw("TRANSACTION")
            || (self.at_kw_at(1, "TRANSACTION") && (self.at_kw("SESSION") || self.at_kw("GLOBAL")))
        {
            self.skip_rest();
            return Ok(Statement::SetTransaction);
        }
        if self.at_kw("PASSWORD") {
            return Err(ParseError::Unsupported("SET PASSWORD".into()));
        }
        let mut out = Vec::new();
        loop {
            let target = match self.next() {
                Some(Tok::UserVar(v)) => SetTarget::User(v),
                Some(Tok::SysVar(g, n)) => SetTarget::Sys { global: g, name: n },
                Some(Tok::Word(w)) => {
                    let u = w.to_ascii_uppercase();
                    if (u == "GLOBAL" || u == "SESSION" || u == "LOCAL" || u == "PERSIST") && !self.at_sym("=") {
                        let n = self.ident()?.to_ascii_lowercase();
                        SetTarget::Sys { global: u == "GLOBAL" || u == "PERSIST", name: n }
                    } else {
                        SetTarget::Sys { global: false, name: w.to_ascii_lowercase() }
                    }
                }
                _ => {
                    self.pos = self.pos.saturating_sub(1);
                    return Err(self.error());
                }
            };
            if !self.eat_sym("=") && !self.eat_sym(":=") {
                return Err(self.error());
            }
            // `SET x = ON` / `OFF`: words as strings.
            let e = match self.peek() {
                Some(Tok::Word(w))
                    if !self.at_sym_at(1, "(")
                        && !self.at_sym_at(1, ".")
                        && !["NULL", "TRUE", "FALSE", "DEFAULT"].iter().any(|k| w.eq_ignore_ascii_case(k)) =>
                {
                    let w = w.clone();
                    self.pos += 1;
                    Expr::Lit(Value::Bytes(w.into_bytes()))
                }
                _ => self.expr()?,
            };
            out.push((target, e));
            if !self.eat_sym(",") {
                break;
            }
        }
        Ok(Statement::Set(out))
    }

    fn like_or_where(&mut self) -> Result<(Option<String>, Option<Expr>), ParseError> {
        if self.eat_kw("LIKE") {
            return Ok((Some(self.string()?), None));
        }
        if self.eat_kw("WHERE") {
            return Ok((None, Some(self.expr()?)));
        }
        Ok((None, None))
    }

    fn show(&mut self) -> Result<Statement, ParseError> {
        self.pos += 1;
        let full = self.eat_kw("FULL");
        let global = self.eat_kw("GLOBAL");
        if !global {
            self.eat_kw("SESSION");
        }
        let kind = if self.eat_kw("DATABASES") || self.eat_kw("SCHEMAS") {
            ShowKind::Databases { like: self.like_or_where()?.0 }
        } else if self.eat_kw("TABLES") {
            let db = if self.eat_kw("FROM") || self.eat_kw("IN") { Some(self.ident()?) } else { None };
            ShowKind::Tables { db, like: self.like_or_where()?.0, full }
        } else if self.eat_kw("COLUMNS") || self.eat_kw("FIELDS") {
            if !self.eat_kw("FROM") {
                self.expect_kw("IN")?;
            }
            let mut table = self.obj_name()?;
            if self.eat_kw("FROM") || self.eat_kw("IN") {
                table.db = Some(self.ident()?);
            }
            ShowKind::Columns { table, full, like: self.like_or_where()?.0 }
        } else if self.eat_kws(&["CREATE", "TABLE"]) {
            ShowKind::CreateTable(self.obj_name()?)
        } else if self.eat_kws(&["CREATE", "DATABASE"]) || self.eat_kws(&["CREATE", "SCHEMA"]) {
            self.if_not_exists();
            ShowKind::CreateDatabase(self.ident()?)
        } else if self.eat_kw("INDEX") || self.eat_kw("INDEXES") || self.eat_kw("KEYS") {
            if !self.eat_kw("FROM") {
                self.expect_kw("IN")?;
            }
            let mut table = self.obj_name()?;
            if self.eat_kw("FROM") || self.eat_kw("IN") {
                table.db = Some(self.ident()?);
            }
            ShowKind::Index(table)
        } else if self.eat_kw("VARIABLES") {
            let (like, filter) = self.like_or_where()?;
            ShowKind::Variables { global, like, filter }
        } else if self.eat_kw("STATUS") {
            ShowKind::Status { like: self.like_or_where()?.0 }
        } else if self.eat_kw("WARNINGS") {
            self.limit()?;
            ShowKind::Warnings
        } else if self.eat_kw("ERRORS") {
            self.limit()?;
            ShowKind::Errors
        } else if self.eat_kw("ENGINES") {
            ShowKind::Engines
        } else if self.eat_kw("COLLATION") {
            ShowKind::Collation { like: self.like_or_where()?.0 }
        } else if self.eat_kws(&["CHARACTER", "SET"]) || self.eat_kw("CHARSET") {
            ShowKind::CharacterSet { like: self.like_or_where()?.0 }
        } else if self.eat_kw("PROCESSLIST") {
            ShowKind::Processlist
        } else if self.eat_kws(&["TABLE", "STATUS"]) {
            if self.eat_kw("FROM") || self.eat_kw("IN") {
                self.ident()?;
            }
            ShowKind::TableStatus { like: self.like_or_where()?.0 }
        } else if self.eat_kw("GRANTS") {
            let user = if self.eat_kw("FOR") { Some(self.user_spec()?.0) } else { None };
            ShowKind::Grants(user)
        } else {
            return Err(self.unsupported_show());
        };
        Ok(Statement::Show(kind))
    }

    fn unsupported_show(&self) -> ParseError {
        match self.peek() {
            Some(Tok::Word(w)) => ParseError::Unsupported(format!("SHOW {}", w.to_uppercase())),
            _ => self.error(),
        }
    }

    fn grant(&mut self) -> Result<Statement, ParseError> {
        let revoke = self.next().is_some_and(|t| t.is_kw("REVOKE"));
        // Privileges up to ON.
        while !self.at_kw("ON") {
            if self.next().is_none() {
                return Err(self.error());
            }
        }
        self.pos += 1;
        self.eat_kw("TABLE");
        let db = if self.eat_sym("*") {
            if self.eat_sym(".") {
                self.expect_sym("*")?;
            }
            "*".to_string()
        } else {
            let d = self.ident()?;
            if self.eat_sym(".") && !self.eat_sym("*") {
                self.ident()?;
            }
            d
        };
        if revoke {
            self.expect_kw("FROM")?;
        } else {
            self.expect_kw("TO")?;
        }
        let (user, host) = self.user_spec()?;
        self.skip_rest();
        Ok(Statement::Grant { db, user, host, revoke })
    }

    fn load_data(&mut self) -> Result<Statement, ParseError> {
        self.pos += 1;
        self.expect_kw("DATA")?;
        self.eat_kw("LOW_PRIORITY");
        self.eat_kw("CONCURRENT");
        let local = self.eat_kw("LOCAL");
        self.expect_kw("INFILE")?;
        let file = self.string()?;
        let replace = self.eat_kw("REPLACE");
        let ignore = !replace && self.eat_kw("IGNORE");
        self.expect_kw("INTO")?;
        self.expect_kw("TABLE")?;
        let table = self.obj_name()?;
        let mut ld = LoadData {
            file,
            local,
            table,
            replace,
            ignore,
            fields_terminated: b"\t".to_vec(),
            enclosed: None,
            escaped: Some(b'\\'),
            lines_terminated: b"\n".to_vec(),
            ignore_lines: 0,
            columns: None,
        };
        if self.eat_kw("CHARACTER") {
            self.expect_kw("SET")?;
            self.ident_or_string()?;
        }
        if self.eat_kw("FIELDS") || self.eat_kw("COLUMNS") {
            loop {
                if self.eat_kws(&["TERMINATED", "BY"]) {
                    ld.fields_terminated = self.string()?.into_bytes();
                } else if self.eat_kws(&["OPTIONALLY", "ENCLOSED", "BY"]) || self.eat_kws(&["ENCLOSED", "BY"]) {
                    ld.enclosed = self.string()?.bytes().next();
                } else if self.eat_kws(&["ESCAPED", "BY"]) {
                    ld.escaped = self.string()?.bytes().next();
                } else {
                    break;
                }
            }
        }
        if self.eat_kw("LINES") {
            loop {
                if self.eat_kws(&["TERMINATED", "BY"]) {
                    ld.lines_terminated = self.string()?.into_bytes();
                } else if self.eat_kws(&["STARTING", "BY"]) {
                    return Err(ParseError::Unsupported("LINES STARTING BY".into()));
                } else {
                    break;
                }
            }
        }
        if self.eat_kw("IGNORE") {
            ld.ignore_lines = self.u64_lit()?;
            if !self.eat_kw("LINES") {
                self.expect_kw("ROWS")?;
            }
        }
        if self.eat_sym("(") {
            let mut cols = Vec::new();
            loop {
                cols.push(self.ident()?);
                if !self.eat_sym(",") {
                    break;
                }
            }
            self.expect_sym(")")?;
            ld.columns = Some(cols);
        }
        if self.at_kw("SET") {
            return Err(ParseError::Unsupported("LOAD DATA ... SET".into()));
        }
        if ld.fields_terminated.is_empty() || ld.lines_terminated.is_empty() {
            return Err(ParseError::Unsupported("empty LOAD DATA terminators".into()));
        }
        Ok(Statement::LoadData(Box::new(ld)))
    }

    // ------------------------------------------------------------------ expressions

    pub fn expr(&mut self) -> Result<Expr, ParseError> {
        self.or_expr()
    }

    fn or_expr(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.xor_expr()?;
        while self.eat_kw("OR") || self.eat_sym("||") {
            let r = self.xor_expr()?;
            l = Expr::bin(BinOp::Or, l, r);
        }
        Ok(l)
    }

    fn xor_expr(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.and_expr()?;
        while self.eat_kw("XOR") {
            let r = self.and_expr()?;
            l = Expr::bin(BinOp::Xor, l, r);
        }
        Ok(l)
    }

    fn and_expr(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.not_expr()?;
        while self.eat_kw("AND") || self.eat_sym("&&") {
            let r = self.not_expr()?;
            l = Expr::bin(BinOp::And, l, r);
        }
        Ok(l)
    }

    fn not_expr(&mut self) -> Result<Expr, ParseError> {
        if self.at_kw("NOT") && !self.at_kw_at(1, "EXISTS") {
            self.pos += 1;
            let e = self.not_expr()?;
            return Ok(Expr::Unary(UnOp::Not, Box::new(e)));
        }
        self.predicate()
    }

    fn predicate(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.bit_or()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Sym("=")) => Some(BinOp::Eq),
                Some(Tok::Sym("<=>")) => Some(BinOp::NullSafeEq),
                Some(Tok::Sym("<>")) | Some(Tok::Sym("!=")) => Some(BinOp::Ne),
                Some(Tok::Sym("<")) => Some(BinOp::Lt),
                Some(Tok::Sym("<=")) => Some(BinOp::Le),
                Some(Tok::Sym(">")) => Some(BinOp::Gt),
                Some(Tok::Sym(">=")) => Some(BinOp::Ge),
                _ => None,
            };
            if let Some(op) = op {
                self.pos += 1;
                if self.at_kw("ANY") || self.at_kw("ALL") || self.at_kw("SOME") {
                    return Err(ParseError::Unsupported("ANY/ALL subqueries".into()));
                }
                let r = self.bit_or()?;
                l = Expr::bin(op, l, r);
                continue;
            }
            if self.eat_kw("IS") {
                let neg = self.eat_kw("NOT");
                if self.eat_kw("NULL") || self.eat_kw("UNKNOWN") {
                    l = Expr::IsNull { e: Box::new(l), neg };
                } else if self.eat_kw("TRUE") {
                    l = Expr::IsBool { e: Box::new(l), value: true, neg };
                } else if self.eat_kw("FALSE") {
                    l = Expr::IsBool { e: Box::new(l), value: false, neg };
                } else {
                    return Err(self.error());
                }
                continue;
            }
            let neg = self.at_kw("NOT")
                && (self.at_kw_at(1, "IN")
                    || self.at_kw_at(1, "BETWEEN")
                    || self.at_kw_at(1, "LIKE")
                    || self.at_kw_at(1, "REGEXP")
                    || self.at_kw_at(1, "RLIKE"));
            if neg {
                self.pos += 1;
            }
            if self.eat_kw("IN") {
                self.expect_sym("(")?;
                if self.at_kw("SELECT") {
                    let q = self.select_stmt()?;
                    self.expect_sym(")")?;
                    l = Expr::InSelect { e: Box::new(l), q: Box::new(q), neg };
                    continue;
                }
                let mut list = Vec::new();
                loop {
                    list.push(self.expr()?);
                    if !self.eat_sym(",") {
                        break;
                    }
                }
                self.expect_sym(")")?;
                l = Expr::In { e: Box::new(l), list, neg };
            } else if self.eat_kw("BETWEEN") {
                let lo = self.bit_or()?;
                self.expect_kw("AND")?;
                let hi = self.bit_or()?;
                l = Expr::Between { e: Box::new(l), lo: Box::new(lo), hi: Box::new(hi), neg };
            } else if self.eat_kw("LIKE") {
                let pat = self.bit_or()?;
                if self.eat_kw("ESCAPE") {
                    return Err(ParseError::Unsupported("LIKE ... ESCAPE".into()));
                }
                l = Expr::Like { e: Box::new(l), pat: Box::new(pat), neg };
            } else if self.at_kw("REGEXP") || self.at_kw("RLIKE") {
                return Err(ParseError::Unsupported("REGEXP".into()));
            } else if neg {
                return Err(self.error());
            } else {
                return Ok(l);
            }
        }
    }

    fn bit_or(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.bit_and()?;
        while self.eat_sym("|") {
            let r = self.bit_and()?;
            l = Expr::bin(BinOp::BitOr, l, r);
        }
        Ok(l)
    }

    fn bit_and(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.shift()?;
        while self.eat_sym("&") {
            let r = self.shift()?;
            l = Expr::bin(BinOp::BitAnd, l, r);
        }
        Ok(l)
    }

    fn shift(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.additive()?;
        loop {
            let op = if self.eat_sym("<<") {
                BinOp::Shl
            } else if self.eat_sym(">>") {
                BinOp::Shr
            } else {
                return Ok(l);
            };
            let r = self.additive()?;
            l = Expr::bin(op, l, r);
        }
    }

    fn additive(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.multiplicative()?;
        loop {
            let op = if self.eat_sym("+") {
                BinOp::Add
            } else if self.eat_sym("-") {
                BinOp::Sub
            } else {
                return Ok(l);
            };
            let r = self.multiplicative()?;
            l = Expr::bin(op, l, r);
        }
    }

    fn multiplicative(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.bit_xor()?;
        loop {
            let op = if self.eat_sym("*") {
                BinOp::Mul
            } else if self.eat_sym("/") {
                BinOp::Div
            } else if self.eat_sym("%") || self.eat_kw("MOD") {
                BinOp::Mod
            } else if self.eat_kw("DIV") {
                BinOp::IntDiv
            } else {
                return Ok(l);
            };
            let r = self.bit_xor()?;
            l = Expr::bin(op, l, r);
        }
    }

    fn bit_xor(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.unary()?;
        while self.eat_sym("^") {
            let r = self.unary()?;
            l = Expr::bin(BinOp::BitXor, l, r);
        }
        Ok(l)
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        if self.eat_sym("-") {
            let e = self.unary()?;
            return Ok(match e {
                Expr::Lit(Value::Int(v)) => Expr::Lit(Value::Int(-v)),
                Expr::Lit(Value::UInt(v)) if v == 1u64 << 63 => Expr::Lit(Value::Int(i64::MIN)),
                Expr::Lit(Value::Decimal { v, scale }) => Expr::Lit(Value::Decimal { v: -v, scale }),
                Expr::Lit(Value::Double(v)) => Expr::Lit(Value::Double(-v)),
                e => Expr::Unary(UnOp::Neg, Box::new(e)),
            });
        }
        if self.eat_sym("+") {
            return self.unary();
        }
        if self.eat_sym("~") {
            return Ok(Expr::Unary(UnOp::BitNot, Box::new(self.unary()?)));
        }
        if self.eat_sym("!") {
            return Ok(Expr::Unary(UnOp::Not, Box::new(self.unary()?)));
        }
        if self.eat_kw("BINARY") {
            return Ok(Expr::Cast { e: Box::new(self.unary()?), ty: CastTy::Binary });
        }
        let e = self.primary()?;
        if self.eat_kw("COLLATE") {
            self.ident_or_string()?;
        }
        Ok(e)
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        let Some(t) = self.next() else { return Err(self.error()) };
        match t {
            Tok::Num(n) => number(&n).map(Expr::Lit).ok_or_else(|| {
                self.pos -= 1;
                self.error()
            }),
            Tok::Str(s) => Ok(Expr::Lit(Value::Bytes(s))),
            Tok::HexBytes(b) | Tok::BitBytes(b) => Ok(Expr::Lit(Value::Bytes(b))),
            Tok::Param => {
                self.params += 1;
                Ok(Expr::Param(self.params - 1))
            }
            Tok::UserVar(v) => {
                if self.eat_sym(":=") {
                    return Err(ParseError::Unsupported("assignment in expressions".into()));
                }
                Ok(Expr::UserVar(v))
            }
            Tok::SysVar(global, name) => Ok(Expr::SysVar { global, name }),
            Tok::Sym("(") => {
                if self.at_kw("SELECT") {
                    let q = self.select_stmt()?;
                    self.expect_sym(")")?;
                    return Ok(Expr::Subquery(Box::new(q)));
                }
                let e = self.expr()?;
                if self.at_sym(",") {
                    return Err(ParseError::Unsupported("row constructors".into()));
                }
                self.expect_sym(")")?;
                Ok(e)
            }
            Tok::Quoted(q) => self.column_rest(q),
            Tok::Word(w) => self.word(w),
            _ => {
                self.pos -= 1;
                Err(self.error())
            }
        }
    }

    fn column_rest(&mut self, first: String) -> Result<Expr, ParseError> {
        if self.eat_sym(".") {
            let second = self.ident()?;
            if self.eat_sym(".") {
                let third = self.ident()?;
                return Ok(Expr::Column { table: Some(second), name: third });
            }
            return Ok(Expr::Column { table: Some(first), name: second });
        }
        Ok(Expr::Column { table: None, name: first })
    }

    fn word(&mut self, w: String) -> Result<Expr, ParseError> {
        let u = w.to_ascii_uppercase();
        match u.as_str() {
            "NULL" => return Ok(Expr::Lit(Value::Null)),
            "TRUE" => return Ok(Expr::Lit(Value::Int(1))),
            "FALSE" => return Ok(Expr::Lit(Value::Int(0))),
            "DEFAULT" if !self.at_sym("(") => return Ok(Expr::Default),
            "EXISTS" => {
                self.expect_sym("(")?;
                let q = self.select_stmt()?;
                self.expect_sym(")")?;
                return Ok(Expr::Exists { q: Box::new(q), neg: false });
            }
            "NOT" if self.at_kw("EXISTS") => {
                self.pos += 1;
                self.expect_sym("(")?;
                let q = self.select_stmt()?;
                self.expect_sym(")")?;
                return Ok(Expr::Exists { q: Box::new(q), neg: true });
            }
            "CASE" => return self.case(),
            "INTERVAL" => {
                let e = self.expr()?;
                let unit = self.ident()?.to_ascii_uppercase();
                return Ok(Expr::Interval { e: Box::new(e), unit });
            }
            "CURRENT_TIMESTAMP" | "CURRENT_DATE" | "CURRENT_TIME" | "LOCALTIME" | "LOCALTIMESTAMP" | "CURRENT_USER"
            | "UTC_TIMESTAMP" | "UTC_DATE"
                if !self.at_sym("(") =>
            {
                return Ok(Expr::Func { name: u, args: Vec::new(), distinct: false, star: false });
            }
            "DATE" | "TIMESTAMP" | "TIME" if matches!(self.peek(), Some(Tok::Str(_))) => {
                let s = self.string()?;
                let ty = match u.as_str() {
                    "DATE" => CastTy::Date,
                    "TIME" => CastTy::Time,
                    _ => CastTy::DateTime,
                };
                return Ok(Expr::Cast { e: Box::new(Expr::Lit(Value::Bytes(s.into_bytes()))), ty });
            }
            _ => {}
        }
        if !self.at_sym("(") {
            if RESERVED.iter().any(|r| u == *r) && u != "VALUE" {
                self.pos -= 1;
                return Err(self.error());
            }
            return self.column_rest(w);
        }
        self.pos += 1;
        match u.as_str() {
            "CAST" => {
                let e = self.expr()?;
                self.expect_kw("AS")?;
                let ty = self.cast_type()?;
                self.expect_sym(")")?;
                return Ok(Expr::Cast { e: Box::new(e), ty });
            }
            "CONVERT" => {
                let e = self.expr()?;
                let ty = if self.eat_kw("USING") {
                    self.ident()?;
                    CastTy::Char
                } else {
                    self.expect_sym(",")?;
                    self.cast_type()?
                };
                self.expect_sym(")")?;
                return Ok(Expr::Cast { e: Box::new(e), ty });
            }
            "EXTRACT" => {
                let unit = self.ident()?.to_ascii_uppercase();
                self.expect_kw("FROM")?;
                let e = self.expr()?;
                self.expect_sym(")")?;
                return Ok(Expr::Func {
                    name: "EXTRACT".into(),
                    args: vec![Expr::Lit(Value::Bytes(unit.into_bytes())), e],
                    distinct: false,
                    star: false,
                });
            }
            "TRIM" => {
                let mut mode = "BOTH";
                for m in ["BOTH", "LEADING", "TRAILING"] {
                    if self.eat_kw(m) {
                        mode = m;
                    }
                }
                let first = if self.at_kw("FROM") { None } else { Some(self.expr()?) };
                let (rem, e) = if self.eat_kw("FROM") {
                    (first, self.expr()?)
                } else {
                    (None, first.ok_or_else(|| self.error())?)
                };
                self.expect_sym(")")?;
                let mut args = vec![Expr::Lit(Value::Bytes(mode.as_bytes().to_vec())), e];
                if let Some(r) = rem {
                    args.push(r);
                }
                return Ok(Expr::Func { name: "TRIM".into(), args, distinct: false, star: false });
            }
            _ => {}
        }
        if self.eat_sym(")") {
            return Ok(Expr::Func { name: u, args: Vec::new(), distinct: false, star: false });
        }
        if self.at_sym("*") && self.at_sym_at(1, ")") {
            self.pos += 2;
            return Ok(Expr::Func { name: u, args: Vec::new(), distinct: false, star: true });
        }
        let distinct = self.eat_kw("DISTINCT");
        self.eat_kw("ALL");
        let mut args = Vec::new();
        loop {
            args.push(self.expr()?);
            if !self.eat_sym(",") {
                break;
            }
        }
        if u == "GROUP_CONCAT" && (self.at_kw("ORDER") || self.at_kw("SEPARATOR")) {
            return Err(ParseError::Unsupported("GROUP_CONCAT options".into()));
        }
        self.expect_sym(")")?;
        if self.at_kw("OVER") {
            return Err(ParseError::Unsupported("window functions".into()));
        }
        Ok(Expr::Func { name: u, args, distinct, star: false })
    }

    fn cast_type(&mut self) -> Result<CastTy, ParseError> {
        let w = self.ident()?.to_ascii_uppercase();
        let mut args = Vec::new();
        if self.eat_sym("(") {
            loop {
                args.push(self.u64_lit()? as u8);
                if !self.eat_sym(",") {
                    break;
                }
            }
            self.expect_sym(")")?;
        }
        Ok(match w.as_str() {
            "SIGNED" => {
                self.eat_kw("INTEGER");
                self.eat_kw("INT");
                CastTy::Signed
            }
            "UNSIGNED" => {
                self.eat_kw("INTEGER");
                self.eat_kw("INT");
                CastTy::Unsigned
            }
            "INT" | "INTEGER" | "BIGINT" => CastTy::Signed,
            "CHAR" | "VARCHAR" | "NCHAR" | "TEXT" => {
                if self.eat_kw("CHARACTER") {
                    self.expect_kw("SET")?;
                    self.ident()?;
                } else if self.eat_kw("CHARSET") {
                    self.ident()?;
                }
                CastTy::Char
            }
            "BINARY" => CastTy::Binary,
            "DECIMAL" | "NUMERIC" => {
                CastTy::Decimal(args.first().copied().unwrap_or(10), args.get(1).copied().unwrap_or(0))
            }
            "DOUBLE" | "FLOAT" | "REAL" => CastTy::Double,
            "DATE" => CastTy::Date,
            "DATETIME" => CastTy::DateTime,
            "TIME" => CastTy::Time,
            _ => {
                self.pos -= 1;
                return Err(self.error());
            }
        })
    }

    fn case(&mut self) -> Result<Expr, ParseError> {
        let operand = if self.at_kw("WHEN") { None } else { Some(Box::new(self.expr()?)) };
        let mut whens = Vec::new();
        while self.eat_kw("WHEN") {
            let w = self.expr()?;
            self.expect_kw("THEN")?;
            let t = self.expr()?;
            whens.push((w, t));
        }
        if whens.is_empty() {
            return Err(self.error());
        }
        let else_ = if self.eat_kw("ELSE") { Some(Box::new(self.expr()?)) } else { None };
        self.expect_kw("END")?;
        Ok(Expr::Case { operand, whens, else_ })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(s: &str) -> Statement {
        parse(s).unwrap_or_else(|e| panic!("{s}: {e:?}")).stmt
    }

    #[test]
    fn sysbench_statements_parse() {
        for s in [
            "CREATE TABLE sbtest1(\n  id INTEGER NOT NULL AUTO_INCREMENT,\n  k INTEGER DEFAULT '0' NOT NULL,\n  c CHAR(120) DEFAULT '' NOT NULL,\n  pad CHAR(60) DEFAULT '' NOT NULL,\n  PRIMARY KEY (id)\n) /*! ENGINE = innodb */ ",
            "CREATE INDEX k_1 ON sbtest1(k)",
            "INSERT INTO sbtest1(k, c, pad) VALUES(5014, '68487932199-96439406143', '22195207048'),(1, 'a', 'b')",
            "SELECT c FROM sbtest1 WHERE id=?",
            "SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ?",
            "SELECT SUM(k) FROM sbtest1 WHERE id BETWEEN ? AND ?",
            "SELECT DISTINCT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c",
            "UPDATE sbtest1 SET k=k+1 WHERE id=?",
            "DELETE FROM sbtest1 WHERE id=?",
            "INSERT INTO sbtest1 (id, k, c, pad) VALUES (?, ?, ?, ?)",
            "SELECT id, k, c, pad FROM sbtest1 WHERE k IN (?, ?, ?)",
            "SELECT count(k) FROM sbtest1 WHERE k BETWEEN ? AND ? OR k BETWEEN ? AND ?",
            "DROP TABLE IF EXISTS sbtest1",
            "BEGIN",
            "COMMIT",
        ] {
            stmt(s);
        }
        let p = parse("SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c").unwrap();
        assert_eq!(p.params, 2);
        let Statement::CreateTable(ct) = stmt(
            "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10)) ENGINE=ndbcluster COMMENT=\"NDB_TABLE=TTL=60@ts\" PARTITION BY KEY(id)",
        ) else {
            panic!()
        };
        assert_eq!(
            ct.options,
            vec![("ENGINE".into(), "ndbcluster".into()), ("COMMENT".into(), "NDB_TABLE=TTL=60@ts".into())]
        );
        assert_eq!(ct.partition_by_key, Some(vec!["id".to_string()]));
    }

    #[test]
    fn precedence_and_literals() {
        let e = parse_expr("1 + 2 * 3 = 7 AND NOT a OR b").unwrap();
        let Expr::Binary(BinOp::Or, l, _) = e else { panic!() };
        let Expr::Binary(BinOp::And, eq, not) = *l else { panic!() };
        assert!(matches!(*eq, Expr::Binary(BinOp::Eq, _, _)));
        assert!(matches!(*not, Expr::Unary(UnOp::Not, _)));
        assert_eq!(parse_expr("-5").unwrap(), Expr::Lit(Value::Int(-5)));
        assert_eq!(parse_expr("1.50").unwrap(), Expr::Lit(Value::Decimal { v: 150, scale: 2 }));
        assert_eq!(parse_expr("18446744073709551615").unwrap(), Expr::Lit(Value::UInt(u64::MAX)));
        assert!(matches!(parse_expr("a NOT BETWEEN 1 AND 2").unwrap(), Expr::Between { neg: true, .. }));
        assert!(matches!(parse_expr("a NOT IN (1,2)").unwrap(), Expr::In { neg: true, .. }));
        assert!(matches!(parse_expr("x IS NOT NULL").unwrap(), Expr::IsNull { neg: true, .. }));
        assert!(matches!(parse_expr("COUNT(*)").unwrap(), Expr::Func { star: true, .. }));
        assert!(matches!(parse_expr("CAST(a AS UNSIGNED)").unwrap(), Expr::Cast { ty: CastTy::Unsigned, .. }));
    }

    #[test]
    fn errors() {
        assert!(matches!(parse("SELEKT 1"), Err(ParseError::Unsupported(_))));
        assert!(matches!(parse("SELECT FROM"), Err(ParseError::Syntax(_))));
        assert!(matches!(parse("SELECT 1; SELECT 2"), Err(ParseError::Syntax(_))));
        assert!(matches!(parse("SELECT (1"), Err(ParseError::Syntax(_))));
        // Statements that end early are errors, not panics.
        for s in [
            "SELECT",
            "SELECT a,",
            "SELECT * FROM",
            "INSERT INTO t VALUES",
            "UPDATE t SET",
            "CREATE TABLE t (",
            "SHOW",
            "SET",
            "(",
            ")",
        ] {
            assert!(parse(s).is_err(), "{s}");
        }
        let Err(ParseError::Syntax(near)) = parse("SELECT * FROM t WHERE") else { panic!() };
        assert_eq!(near, "");
        let Err(ParseError::Syntax(near)) = parse("SELECT * FROM t WHERE a = = 1") else { panic!() };
        assert_eq!(near, "= 1");
    }

    #[test]
    fn other_statements() {
        assert!(matches!(stmt("SET autocommit=0"), Statement::Set(_)));
        assert!(matches!(stmt("SET NAMES utf8mb4 COLLATE utf8mb4_general_ci"), Statement::SetNames));
        assert!(matches!(stmt("SHOW FULL COLUMNS FROM t"), Statement::Show(ShowKind::Columns { full: true, .. })));
        assert!(matches!(stmt("PREPARE s FROM 'SELECT ?'"), Statement::Prepare { .. }));
        assert!(matches!(stmt("CREATE USER 'bob'@'localhost' IDENTIFIED BY 'pw'"), Statement::CreateUser { .. }));
        assert!(matches!(stmt("GRANT ALL PRIVILEGES ON shop.* TO 'bob'@'%'"), Statement::Grant { .. }));
        assert!(matches!(stmt("ALTER TABLE t ADD COLUMN x INT, DROP INDEX k"), Statement::AlterTable { .. }));
        assert!(matches!(
            stmt("LOAD DATA LOCAL INFILE 'x.csv' INTO TABLE t FIELDS TERMINATED BY ',' IGNORE 1 LINES"),
            Statement::LoadData(_)
        ));
        assert!(matches!(stmt("SELECT * FROM t FOR UPDATE"), Statement::Select(s) if s.lock == Some(Lock::Exclusive)));
        let Statement::Select(s) = stmt("SELECT a.x, b.y FROM a JOIN b ON a.id = b.id LEFT JOIN c USING (id)") else {
            panic!()
        };
        assert_eq!(s.from.len(), 3);
    }
}
