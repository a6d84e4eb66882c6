//! A recursive-descent parser for the MySQL statements Tern serves. Errors are MySQL's 1064
//! "You have an error in your SQL syntax; ... near '<rest>' at line 1" so clients see the usual
//! text; statements it does not know at all are named by the caller (1235).

use super::ast::*;
use super::lex::{Tok, tokenize};
use crate::SqlError;
use tern_types::Value;

mod admin;
mod ddl;
mod expr;
mod query;

#[derive(Debug, Clone, PartialEq)]
pub enum ParseError {
    /// 1064 with the text near the failure.
    Syntax(String),
    /// A statement kind Tern does not serve (1235): its leading words.
    Unsupported(String),
    /// The parser's recursion passed `NESTING_MAX` (1064 "memory exhausted near ...", as
    /// MySQL's parser says when its stack runs out), with the text near the failure.
    Exhausted(String),
    /// An expression tree deeper than `EXPR_DEPTH_MAX` (1436 "Thread stack overrun", what
    /// MySQL answers when evaluating it would need more stack).
    TooDeep,
    /// SELECTs nested deeper than `SELECT_NESTING_MAX` (1473).
    SelectNesting,
}

/// Deepest recursion of the parser: nested parentheses, function calls, prefix operators, CASE,
/// subqueries. One level is a chain of ~27 frames through the precedence ladder, up to 12 KiB in
/// a debug build; front-end workers have 16 MiB of stack, and this limit keeps parsing within a
/// quarter of it. (MariaDB 10.11 with its default stack takes 300 nested `ABS(` but not 1,000.)
pub const NESTING_MAX: usize = 256;
/// Deepest expression tree accepted; planning and evaluation recurse once per level.
/// (MariaDB 10.11 with its default stack fails near 1,000 levels of `1+1+...` or `ABS(ABS(...))`.)
pub const EXPR_DEPTH_MAX: usize = 2000;
/// Deepest nesting of SELECTs (MySQL's MAX_SELECT_NESTING).
pub const SELECT_NESTING_MAX: usize = 63;

pub struct Parsed {
    pub stmt: Statement,
    pub params: usize,
}

/// Parses one statement (a trailing `;` is allowed; more statements after it are an error).
pub fn parse(sql: &str) -> Result<Parsed, ParseError> {
    let toks = tokenize(sql).map_err(|e| ParseError::Syntax(format!("{} near '{}'", e.0, clip(sql))))?;
    let mut p = Parser::new(sql, toks);
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

/// MySQL's 1064 text for a parse error; 1235 for statements Tern does not serve.
pub fn sql_error(e: ParseError, sql: &str) -> SqlError {
    match e {
        ParseError::Syntax(near) if sql.trim().is_empty() => {
            let _ = near;
            SqlError::new(1065, "42000", "Query was empty")
        }
        ParseError::Syntax(near) => SqlError::new(
            1064,
            "42000",
            format!(
                "You have an error in your SQL syntax; check the manual that corresponds to your MySQL server version for the right syntax to use near '{near}' at line 1"
            ),
        ),
        ParseError::Unsupported(what) => {
            SqlError::new(1235, "42000", format!("This version of Tern doesn't yet support '{what}'"))
        }
        ParseError::Exhausted(near) => {
            SqlError::new(1064, "42000", format!("memory exhausted near '{near}' at line 1"))
        }
        ParseError::TooDeep => SqlError::new(
            1436,
            "HY000",
            format!("Thread stack overrun: the expression is nested more than {} levels deep", EXPR_DEPTH_MAX),
        ),
        ParseError::SelectNesting => SqlError::new(1473, "HY000", "Too high level of nesting for select"),
    }
}

/// Parses a standalone expression (for `PREPARE ... FROM` tests and defaults).
pub fn parse_expr(sql: &str) -> Result<Expr, ParseError> {
    let toks = tokenize(sql).map_err(|e| ParseError::Syntax(e.0))?;
    let mut p = Parser::new(sql, toks);
    let e = p.expr()?;
    if p.pos < p.toks.len() {
        return Err(p.error());
    }
    Ok(e)
}

/// `terms` (each with its tree depth) combined by the associative `op` into a balanced tree that
/// keeps their order, and its depth: a chain of n terms is log2(n) levels deep, not n.
fn balanced(op: BinOp, terms: Vec<(Expr, usize)>) -> (Expr, usize) {
    let mut level = terms;
    while level.len() > 1 {
        let mut next = Vec::with_capacity(level.len().div_ceil(2));
        let mut it = level.into_iter();
        while let Some((a, da)) = it.next() {
            match it.next() {
                Some((b, db)) => next.push((Expr::bin(op, a, b), da.max(db) + 1)),
                None => next.push((a, da)),
            }
        }
        level = next;
    }
    level.pop().expect("at least one term")
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
    /// Recursion depth now (bounded by `NESTING_MAX`).
    nesting: usize,
    /// SELECTs open now (bounded by `SELECT_NESTING_MAX`).
    selects: usize,
    /// Tree depth of the expression parsed last (bounded by `EXPR_DEPTH_MAX`).
    depth: usize,
    /// The deepest of the whole expressions parsed since the enclosing node began.
    kid_max: usize,
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
    fn new(sql: &'a str, toks: Vec<(Tok, usize)>) -> Parser<'a> {
        Parser { sql, toks, pos: 0, params: 0, nesting: 0, selects: 0, depth: 0, kid_max: 0 }
    }

    /// Runs `f` one recursion level deeper, or fails once `NESTING_MAX` levels are open.
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T, ParseError>) -> Result<T, ParseError> {
        if self.nesting >= NESTING_MAX {
            let near = match self.toks.get(self.pos) {
                Some((_, off)) => clip(&self.sql[*off..]),
                None => String::new(),
            };
            return Err(ParseError::Exhausted(near));
        }
        self.nesting += 1;
        let r = f(self);
        self.nesting -= 1;
        r
    }

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
            "KILL" => self.kill(),
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
        use crate::privs::{ALL, GRANT, INSERT, SELECT};
        let g = |sql: &str| match stmt(sql) {
            Statement::Grant { privs, level, user, revoke, .. } => (privs, level, user, revoke),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            g("GRANT SELECT, INSERT ON shop.items TO bob WITH GRANT OPTION"),
            (
                SELECT | INSERT | GRANT,
                Some(GrantLevel::Table(Some("shop".into()), "items".into())),
                "bob".into(),
                false
            )
        );
        assert_eq!(g("GRANT ALL ON *.* TO 'a'@'%'").1, Some(GrantLevel::Global));
        assert_eq!(g("GRANT LOCK TABLES, SELECT ON * TO a").0, SELECT);
        assert_eq!(g("GRANT SELECT ON t TO a").1, Some(GrantLevel::Table(None, "t".into())));
        assert_eq!(g("REVOKE ALL PRIVILEGES, GRANT OPTION FROM a"), (ALL | GRANT, None, "a".into(), true));
        assert!(parse("GRANT FLY ON *.* TO a").is_err());
        assert!(parse("GRANT SELECT (c) ON t TO a").is_err());
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
