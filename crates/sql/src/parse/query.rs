//! Queries and data changes: SELECT (with UNION, joins, ORDER BY, LIMIT, locking clauses),
//! INSERT/REPLACE, UPDATE, DELETE and LOAD DATA.

use super::{ParseError, Parser, RESERVED, SELECT_NESTING_MAX, balanced};
use crate::ast::*;
use crate::lex::Tok;
use tern_types::Value;

impl Parser<'_> {
    /// A SELECT (with UNIONs), at most `SELECT_NESTING_MAX` deep.
    pub(super) fn select_stmt(&mut self) -> Result<Select, ParseError> {
        if self.selects >= SELECT_NESTING_MAX {
            return Err(ParseError::SelectNesting);
        }
        self.selects += 1;
        let s = self.nested(Self::select_union);
        self.selects -= 1;
        s
    }

    fn select_union(&mut self) -> Result<Select, ParseError> {
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

    pub(super) fn select_core(&mut self) -> Result<Select, ParseError> {
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

    pub(super) fn order_by(&mut self) -> Result<Vec<(Expr, bool)>, ParseError> {
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

    pub(super) fn limit(&mut self) -> Result<(Option<Expr>, Option<Expr>), ParseError> {
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

    pub(super) fn select_item(&mut self) -> Result<SelectItem, ParseError> {
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

    pub(super) fn at_sym_at(&self, k: usize, s: &str) -> bool {
        matches!(self.peek_at(k), Some(Tok::Sym(x)) if *x == s)
    }

    pub(super) fn alias(&mut self) -> Result<Option<String>, ParseError> {
        if self.eat_kw("AS") {
            return Ok(Some(self.ident_or_string()?));
        }
        match self.peek() {
            Some(Tok::Word(w)) if !RESERVED.iter().any(|r| w.eq_ignore_ascii_case(r)) => Ok(Some(self.ident()?)),
            Some(Tok::Quoted(_)) | Some(Tok::Str(_)) => Ok(Some(self.ident_or_string()?)),
            _ => Ok(None),
        }
    }

    pub(super) fn table_ref(&mut self, join: Option<(JoinKind, Option<Expr>)>) -> Result<TableRef, ParseError> {
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

    pub(super) fn table_list(&mut self) -> Result<Vec<TableRef>, ParseError> {
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
                let mut on = Vec::new();
                let prev = out.last().map(|p: &TableRef| p.alias.clone().unwrap_or(p.name.clone()));
                let me = t.alias.clone().unwrap_or(t.name.clone());
                loop {
                    let c = self.ident()?;
                    let eq = Expr::bin(
                        BinOp::Eq,
                        Expr::Column { table: prev.clone(), name: c.clone() },
                        Expr::Column { table: Some(me.clone()), name: c },
                    );
                    on.push((eq, 1));
                    if !self.eat_sym(",") {
                        break;
                    }
                }
                self.expect_sym(")")?;
                t.join = Some((kind, Some(balanced(BinOp::And, on).0)));
            }
            out.push(t);
        }
        Ok(out)
    }

    pub(super) fn insert(&mut self) -> Result<Statement, ParseError> {
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
    pub(super) fn column_name(&mut self) -> Result<String, ParseError> {
        let mut n = self.ident()?;
        while self.eat_sym(".") {
            n = self.ident()?;
        }
        Ok(n)
    }

    pub(super) fn assignments(&mut self) -> Result<Vec<(String, Expr)>, ParseError> {
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

    pub(super) fn update(&mut self) -> Result<Statement, ParseError> {
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

    pub(super) fn delete(&mut self) -> Result<Statement, ParseError> {
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

    pub(super) fn load_data(&mut self) -> Result<Statement, ParseError> {
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
            lines_starting: Vec::new(),
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
                    ld.lines_starting = self.string()?.into_bytes();
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
}
