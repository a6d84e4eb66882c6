//! Expressions, by MySQL's operator precedence (lowest first): OR, XOR, AND, NOT, predicates
//! (comparisons, IS, IN, BETWEEN, LIKE), |, &, shifts, + -, * / DIV MOD, ^, unary operators,
//! primaries (literals, columns, variables, functions, CASE, CAST, subqueries).

use super::{ParseError, Parser};
use super::{RESERVED, number};
use crate::sql::ast::*;
use crate::sql::lex::Tok;
use tern_types::Value;

impl Parser<'_> {
    pub fn expr(&mut self) -> Result<Expr, ParseError> {
        self.or_expr()
    }

    pub(super) fn or_expr(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.xor_expr()?;
        while self.eat_kw("OR") || self.eat_sym("||") {
            let r = self.xor_expr()?;
            l = Expr::bin(BinOp::Or, l, r);
        }
        Ok(l)
    }

    pub(super) fn xor_expr(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.and_expr()?;
        while self.eat_kw("XOR") {
            let r = self.and_expr()?;
            l = Expr::bin(BinOp::Xor, l, r);
        }
        Ok(l)
    }

    pub(super) fn and_expr(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.not_expr()?;
        while self.eat_kw("AND") || self.eat_sym("&&") {
            let r = self.not_expr()?;
            l = Expr::bin(BinOp::And, l, r);
        }
        Ok(l)
    }

    pub(super) fn not_expr(&mut self) -> Result<Expr, ParseError> {
        if self.at_kw("NOT") && !self.at_kw_at(1, "EXISTS") {
            self.pos += 1;
            let e = self.not_expr()?;
            return Ok(Expr::Unary(UnOp::Not, Box::new(e)));
        }
        self.predicate()
    }

    pub(super) fn predicate(&mut self) -> Result<Expr, ParseError> {
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

    pub(super) fn bit_or(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.bit_and()?;
        while self.eat_sym("|") {
            let r = self.bit_and()?;
            l = Expr::bin(BinOp::BitOr, l, r);
        }
        Ok(l)
    }

    pub(super) fn bit_and(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.shift()?;
        while self.eat_sym("&") {
            let r = self.shift()?;
            l = Expr::bin(BinOp::BitAnd, l, r);
        }
        Ok(l)
    }

    pub(super) fn shift(&mut self) -> Result<Expr, ParseError> {
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

    pub(super) fn additive(&mut self) -> Result<Expr, ParseError> {
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

    pub(super) fn multiplicative(&mut self) -> Result<Expr, ParseError> {
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

    pub(super) fn bit_xor(&mut self) -> Result<Expr, ParseError> {
        let mut l = self.unary()?;
        while self.eat_sym("^") {
            let r = self.unary()?;
            l = Expr::bin(BinOp::BitXor, l, r);
        }
        Ok(l)
    }

    pub(super) fn unary(&mut self) -> Result<Expr, ParseError> {
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

    pub(super) fn primary(&mut self) -> Result<Expr, ParseError> {
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
