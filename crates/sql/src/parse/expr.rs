//! Expressions, by MySQL's operator precedence (lowest first): OR, XOR, AND, NOT, predicates
//! (comparisons, IS, IN, BETWEEN, LIKE), |, &, shifts, + -, * / DIV MOD, ^, unary operators,
//! primaries (literals, columns, variables, functions, CASE, CAST, subqueries).
//!
//! Depth is bounded while parsing, so no later stage (planning, evaluation, dropping the tree)
//! can run out of stack: recursion of the parser itself (`Parser::nested`, `NESTING_MAX`) and
//! the depth of the tree built (`Parser::depth`, `EXPR_DEPTH_MAX`), which left-associative
//! operator chains grow without recursion. AND, OR and XOR chains are built as balanced trees
//! (they are associative, and evaluation still visits the operands left to right), so a
//! generated `a = 1 OR a = 2 OR ...` of any length stays shallow; other chains count one level
//! per operator.

use super::{EXPR_DEPTH_MAX, ParseError, Parser, balanced};
use super::{RESERVED, number};
use crate::ast::*;
use crate::lex::Tok;
use tern_types::Value;

impl Parser<'_> {
    /// A whole expression; its tree depth is left in `self.depth` and counted into
    /// `self.kid_max` for the node that contains it.
    pub fn expr(&mut self) -> Result<Expr, ParseError> {
        let e = self.nested(Self::or_expr)?;
        self.kid_max = self.kid_max.max(self.depth);
        Ok(e)
    }

    /// The depth `d` of a node being built, or the error when it is too deep.
    fn deeper(&self, d: usize) -> Result<usize, ParseError> {
        if d > EXPR_DEPTH_MAX { Err(ParseError::TooDeep) } else { Ok(d) }
    }

    /// Operands separated by any of `ops` (keywords or symbols), combined by `op` as a balanced
    /// tree in their order.
    fn assoc_chain(
        &mut self,
        ops: &[&str],
        op: BinOp,
        operand: fn(&mut Self) -> Result<Expr, ParseError>,
    ) -> Result<Expr, ParseError> {
        let first = operand(self)?;
        let at_op = |p: &Self| ops.iter().any(|o| p.at_kw(o) || p.at_sym(o));
        if !at_op(self) {
            return Ok(first);
        }
        let mut terms = vec![(first, self.depth)];
        while at_op(self) {
            self.pos += 1;
            let e = operand(self)?;
            terms.push((e, self.depth));
        }
        let (e, d) = balanced(op, terms);
        self.depth = self.deeper(d)?;
        Ok(e)
    }

    pub(super) fn or_expr(&mut self) -> Result<Expr, ParseError> {
        self.assoc_chain(&["OR", "||"], BinOp::Or, Self::xor_expr)
    }

    pub(super) fn xor_expr(&mut self) -> Result<Expr, ParseError> {
        self.assoc_chain(&["XOR"], BinOp::Xor, Self::and_expr)
    }

    pub(super) fn and_expr(&mut self) -> Result<Expr, ParseError> {
        self.assoc_chain(&["AND", "&&"], BinOp::And, Self::not_expr)
    }

    pub(super) fn not_expr(&mut self) -> Result<Expr, ParseError> {
        if self.at_kw("NOT") && !self.at_kw_at(1, "EXISTS") {
            self.pos += 1;
            let e = self.nested(Self::not_expr)?;
            self.depth = self.deeper(self.depth + 1)?;
            return Ok(Expr::Unary(UnOp::Not, Box::new(e)));
        }
        self.predicate()
    }

    /// A left-associative chain of binary operators: `next` gives the operator ahead (and
    /// consumes it), `operand` parses each side.
    fn left_chain(
        &mut self,
        next: fn(&mut Self) -> Option<BinOp>,
        operand: fn(&mut Self) -> Result<Expr, ParseError>,
    ) -> Result<Expr, ParseError> {
        let mut l = operand(self)?;
        let mut d = self.depth;
        while let Some(op) = next(self) {
            let r = operand(self)?;
            d = self.deeper(d.max(self.depth) + 1)?;
            l = Expr::bin(op, l, r);
        }
        self.depth = d;
        Ok(l)
    }

    pub(super) fn predicate(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.bit_or()?;
        let mut d = self.depth;
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
                d = self.deeper(d.max(self.depth) + 1)?;
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
                d = self.deeper(d + 1)?;
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
                    d = self.deeper(d + 1)?;
                    continue;
                }
                let outer = std::mem::take(&mut self.kid_max);
                let mut list = Vec::new();
                loop {
                    list.push(self.expr()?);
                    if !self.eat_sym(",") {
                        break;
                    }
                }
                let inner = std::mem::replace(&mut self.kid_max, outer);
                d = self.deeper(d.max(inner) + 1)?;
                self.expect_sym(")")?;
                l = Expr::In { e: Box::new(l), list, neg };
            } else if self.eat_kw("BETWEEN") {
                let lo = self.bit_or()?;
                let d_lo = self.depth;
                self.expect_kw("AND")?;
                let hi = self.bit_or()?;
                d = self.deeper(d.max(d_lo).max(self.depth) + 1)?;
                l = Expr::Between { e: Box::new(l), lo: Box::new(lo), hi: Box::new(hi), neg };
            } else if self.eat_kw("LIKE") {
                let pat = self.bit_or()?;
                d = self.deeper(d.max(self.depth) + 1)?;
                if self.eat_kw("ESCAPE") {
                    return Err(ParseError::Unsupported("LIKE ... ESCAPE".into()));
                }
                l = Expr::Like { e: Box::new(l), pat: Box::new(pat), neg };
            } else if self.at_kw("REGEXP") || self.at_kw("RLIKE") {
                return Err(ParseError::Unsupported("REGEXP".into()));
            } else if neg {
                return Err(self.error());
            } else {
                self.depth = d;
                return Ok(l);
            }
        }
    }

    pub(super) fn bit_or(&mut self) -> Result<Expr, ParseError> {
        self.left_chain(|p| p.eat_sym("|").then_some(BinOp::BitOr), Self::bit_and)
    }

    pub(super) fn bit_and(&mut self) -> Result<Expr, ParseError> {
        self.left_chain(|p| p.eat_sym("&").then_some(BinOp::BitAnd), Self::shift)
    }

    pub(super) fn shift(&mut self) -> Result<Expr, ParseError> {
        self.left_chain(
            |p| {
                if p.eat_sym("<<") {
                    Some(BinOp::Shl)
                } else if p.eat_sym(">>") {
                    Some(BinOp::Shr)
                } else {
                    None
                }
            },
            Self::additive,
        )
    }

    pub(super) fn additive(&mut self) -> Result<Expr, ParseError> {
        self.left_chain(
            |p| {
                if p.eat_sym("+") {
                    Some(BinOp::Add)
                } else if p.eat_sym("-") {
                    Some(BinOp::Sub)
                } else {
                    None
                }
            },
            Self::multiplicative,
        )
    }

    pub(super) fn multiplicative(&mut self) -> Result<Expr, ParseError> {
        self.left_chain(
            |p| {
                if p.eat_sym("*") {
                    Some(BinOp::Mul)
                } else if p.eat_sym("/") {
                    Some(BinOp::Div)
                } else if p.eat_sym("%") || p.eat_kw("MOD") {
                    Some(BinOp::Mod)
                } else if p.eat_kw("DIV") {
                    Some(BinOp::IntDiv)
                } else {
                    None
                }
            },
            Self::bit_xor,
        )
    }

    pub(super) fn bit_xor(&mut self) -> Result<Expr, ParseError> {
        self.left_chain(|p| p.eat_sym("^").then_some(BinOp::BitXor), Self::unary)
    }

    /// An operand under a prefix operator: one level deeper in both counts.
    fn prefixed(&mut self) -> Result<Expr, ParseError> {
        let e = self.nested(Self::unary)?;
        self.depth = self.deeper(self.depth + 1)?;
        Ok(e)
    }

    pub(super) fn unary(&mut self) -> Result<Expr, ParseError> {
        if self.eat_sym("-") {
            let e = self.prefixed()?;
            return Ok(match e {
                Expr::Lit(Value::Int(v)) => Expr::Lit(Value::Int(-v)),
                Expr::Lit(Value::UInt(v)) if v == 1u64 << 63 => Expr::Lit(Value::Int(i64::MIN)),
                Expr::Lit(Value::Decimal { v, scale }) => Expr::Lit(Value::Decimal { v: -v, scale }),
                Expr::Lit(Value::Double(v)) => Expr::Lit(Value::Double(-v)),
                e => Expr::Unary(UnOp::Neg, Box::new(e)),
            });
        }
        if self.eat_sym("+") {
            return self.prefixed();
        }
        if self.eat_sym("~") {
            return Ok(Expr::Unary(UnOp::BitNot, Box::new(self.prefixed()?)));
        }
        if self.eat_sym("!") {
            return Ok(Expr::Unary(UnOp::Not, Box::new(self.prefixed()?)));
        }
        if self.eat_kw("BINARY") {
            return Ok(Expr::Cast { e: Box::new(self.prefixed()?), ty: CastTy::Binary });
        }
        let e = self.primary()?;
        if self.eat_kw("COLLATE") {
            self.ident_or_string()?;
        }
        Ok(e)
    }

    /// A primary; its depth is one more than the deepest expression inside it.
    pub(super) fn primary(&mut self) -> Result<Expr, ParseError> {
        let outer = std::mem::take(&mut self.kid_max);
        let e = self.primary_node();
        let d = self.kid_max + 1;
        self.kid_max = outer;
        let e = e?;
        self.depth = self.deeper(d)?;
        Ok(e)
    }

    fn primary_node(&mut self) -> Result<Expr, ParseError> {
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

    pub(super) fn column_rest(&mut self, first: String) -> Result<Expr, ParseError> {
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

    pub(super) fn word(&mut self, w: String) -> Result<Expr, ParseError> {
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
            "TIMESTAMPDIFF" | "TIMESTAMPADD" => {
                // TIMESTAMPDIFF(unit, a, b) / TIMESTAMPADD(unit, n, d): the unit is a keyword.
                let unit = self.ident()?.to_ascii_uppercase();
                let unit = unit.strip_prefix("SQL_TSI_").unwrap_or(&unit).to_string();
                self.expect_sym(",")?;
                let a = self.expr()?;
                self.expect_sym(",")?;
                let b = self.expr()?;
                self.expect_sym(")")?;
                return Ok(Expr::Func {
                    name: u,
                    args: vec![Expr::Lit(Value::Bytes(unit.into_bytes())), a, b],
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

    pub(super) fn cast_type(&mut self) -> Result<CastTy, ParseError> {
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

    pub(super) fn case(&mut self) -> Result<Expr, ParseError> {
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
