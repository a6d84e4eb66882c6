//! Session and administration statements: SET, SHOW, GRANT/REVOKE.

use super::{ParseError, Parser};
use crate::ast::*;
use crate::lex::Tok;
use tern_types::Value;

impl Parser<'_> {
    /// `KILL [CONNECTION | QUERY] id`
    pub(super) fn kill(&mut self) -> Result<Statement, ParseError> {
        self.pos += 1;
        let query = self.eat_kw("QUERY");
        if !query {
            self.eat_kw("CONNECTION");
        }
        Ok(Statement::Kill { id: self.expr()?, query })
    }

    pub(super) fn set(&mut self) -> Result<Statement, ParseError> {
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

    pub(super) fn like_or_where(&mut self) -> Result<(Option<String>, Option<Expr>), ParseError> {
        if self.eat_kw("LIKE") {
            return Ok((Some(self.string()?), None));
        }
        if self.eat_kw("WHERE") {
            return Ok((None, Some(self.expr()?)));
        }
        Ok((None, None))
    }

    pub(super) fn show(&mut self) -> Result<Statement, ParseError> {
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
            ShowKind::Processlist { full }
        } else if self.eat_kws(&["TABLE", "STATUS"]) {
            if self.eat_kw("FROM") || self.eat_kw("IN") {
                self.ident()?;
            }
            ShowKind::TableStatus { like: self.like_or_where()?.0 }
        } else if self.at_kw("EVENTS") || self.at_kw("TRIGGERS") {
            let events = self.eat_kw("EVENTS");
            if !events {
                self.eat_kw("TRIGGERS");
            }
            if self.eat_kw("FROM") || self.eat_kw("IN") {
                self.ident()?;
            }
            self.like_or_where()?;
            ShowKind::Empty(if events {
                &[
                    "Db",
                    "Name",
                    "Definer",
                    "Time zone",
                    "Type",
                    "Execute at",
                    "Interval value",
                    "Interval field",
                    "Starts",
                    "Ends",
                    "Status",
                    "Originator",
                    "character_set_client",
                    "collation_connection",
                    "Database Collation",
                ]
            } else {
                &[
                    "Trigger",
                    "Event",
                    "Table",
                    "Statement",
                    "Timing",
                    "Created",
                    "sql_mode",
                    "Definer",
                    "character_set_client",
                    "collation_connection",
                    "Database Collation",
                ]
            })
        } else if self.eat_kws(&["PROCEDURE", "STATUS"]) || self.eat_kws(&["FUNCTION", "STATUS"]) {
            self.like_or_where()?;
            ShowKind::Empty(&[
                "Db",
                "Name",
                "Type",
                "Definer",
                "Modified",
                "Created",
                "Security_type",
                "Comment",
                "character_set_client",
                "collation_connection",
                "Database Collation",
            ])
        } else if self.eat_kw("GRANTS") {
            let user = if self.eat_kw("FOR") { Some(self.user_spec()?.0) } else { None };
            ShowKind::Grants(user)
        } else {
            return Err(self.unsupported_show());
        };
        Ok(Statement::Show(kind))
    }

    pub(super) fn unsupported_show(&self) -> ParseError {
        match self.peek() {
            Some(Tok::Word(w)) => ParseError::Unsupported(format!("SHOW {}", w.to_uppercase())),
            _ => self.error(),
        }
    }

    pub(super) fn grant(&mut self) -> Result<Statement, ParseError> {
        let revoke = self.next().is_some_and(|t| t.is_kw("REVOKE"));
        // Privileges (words up to a comma, ON or FROM), e.g. `SELECT, INSERT`, `ALL PRIVILEGES`,
        // `GRANT OPTION`, `CREATE TEMPORARY TABLES`.
        let mut privs = 0u16;
        loop {
            let mut words = Vec::new();
            while let Some(Tok::Word(w)) = self.peek() {
                if self.at_kw("ON") || (revoke && self.at_kw("FROM")) {
                    break;
                }
                words.push(w.to_ascii_uppercase());
                self.pos += 1;
            }
            if self.at_sym("(") {
                return Err(ParseError::Unsupported("column privileges".into()));
            }
            let name = words.join(" ");
            privs |= crate::privs::named(&name).ok_or_else(|| self.error())?;
            if !self.eat_sym(",") {
                break;
            }
        }
        let level = if self.eat_kw("ON") {
            self.eat_kw("TABLE");
            Some(if self.eat_sym("*") {
                if self.eat_sym(".") {
                    self.expect_sym("*")?;
                    GrantLevel::Global
                } else {
                    GrantLevel::Database(None)
                }
            } else {
                let first = self.ident()?;
                if self.eat_sym(".") {
                    if self.eat_sym("*") {
                        GrantLevel::Database(Some(first))
                    } else {
                        GrantLevel::Table(Some(first), self.ident()?)
                    }
                } else {
                    GrantLevel::Table(None, first)
                }
            })
        } else if revoke && privs & crate::privs::ALL == crate::privs::ALL && privs & crate::privs::GRANT != 0 {
            None
        } else {
            return Err(self.error());
        };
        if revoke {
            self.expect_kw("FROM")?;
        } else {
            self.expect_kw("TO")?;
        }
        let (user, host) = self.user_spec()?;
        if !revoke && self.eat_kw("WITH") {
            self.expect_kw("GRANT")?;
            self.expect_kw("OPTION")?;
            privs |= crate::privs::GRANT;
        }
        self.skip_rest();
        Ok(Statement::Grant { privs, level, user, host, revoke })
    }
}
