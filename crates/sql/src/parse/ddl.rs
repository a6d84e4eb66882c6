//! Data definition: CREATE/DROP/ALTER of databases, tables, indexes and users, column specs and
//! type names.

use super::{ParseError, Parser};
use crate::ast::*;
use crate::lex::Tok;

impl Parser<'_> {
    pub(super) fn if_not_exists(&mut self) -> bool {
        self.eat_kws(&["IF", "NOT", "EXISTS"])
    }

    pub(super) fn create(&mut self) -> Result<Statement, ParseError> {
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
                let mut plugin = None;
                if self.eat_kws(&["IDENTIFIED", "BY"]) {
                    pw = Some(self.string()?);
                } else if self.eat_kws(&["IDENTIFIED", "WITH"]) {
                    plugin = Some(self.ident_or_string()?.to_ascii_lowercase());
                    if self.eat_kw("BY") {
                        pw = Some(self.string()?);
                    }
                }
                users.push((user, host, pw, plugin));
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
    pub(super) fn user_spec(&mut self) -> Result<(String, String), ParseError> {
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

    pub(super) fn index_columns(&mut self) -> Result<Vec<String>, ParseError> {
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

    pub(super) fn create_table(&mut self) -> Result<Statement, ParseError> {
        let if_not_exists = self.if_not_exists();
        let table = self.obj_name()?;
        let mut ct = CreateTable {
            table,
            if_not_exists,
            columns: Vec::new(),
            indexes: Vec::new(),
            options: Vec::new(),
            partition_by_key: None,
            ignored: Vec::new(),
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

    pub(super) fn table_element(&mut self, ct: &mut CreateTable) -> Result<(), ParseError> {
        let mut constraint = None;
        if self.eat_kw("CONSTRAINT")
            && !self.at_kw("PRIMARY")
            && !self.at_kw("UNIQUE")
            && !self.at_kw("FOREIGN")
            && !self.at_kw("CHECK")
        {
            constraint = Some(self.ident()?);
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
        // Accepted and not enforced (a dump from MariaDB or MySQL loads; the statement warns).
        if self.eat_kws(&["FOREIGN", "KEY"]) {
            let name = if self.at_sym("(") { None } else { Some(self.ident()?) };
            self.index_columns()?;
            self.references()?;
            let name = constraint.or(name).map(|n| format!("`{n}`")).unwrap_or_default();
            ct.ignored.push(format!("FOREIGN KEY {name}").trim_end().to_string());
            return Ok(());
        }
        if self.eat_kw("CHECK") {
            self.skip_parenthesized()?;
            let name = constraint.map(|n| format!("`{n}`")).unwrap_or_default();
            ct.ignored.push(format!("CHECK {name}").trim_end().to_string());
            return Ok(());
        }
        let mut c = self.column_spec()?;
        if let Some(what) = c.ignored.take() {
            ct.ignored.push(what);
        }
        ct.columns.push(c);
        Ok(())
    }

    /// `REFERENCES t (cols) [MATCH FULL|PARTIAL|SIMPLE] [ON DELETE|UPDATE action]...`, read and
    /// dropped.
    fn references(&mut self) -> Result<(), ParseError> {
        self.expect_kw("REFERENCES")?;
        self.obj_name()?;
        if self.at_sym("(") {
            self.index_columns()?;
        }
        loop {
            if self.eat_kw("MATCH") {
                self.ident()?;
            } else if self.eat_kw("ON") {
                if !self.eat_kw("DELETE") {
                    self.expect_kw("UPDATE")?;
                }
                if !(self.eat_kw("RESTRICT") || self.eat_kw("CASCADE")) {
                    if self.eat_kw("SET") {
                        if !self.eat_kw("NULL") {
                            self.expect_kw("DEFAULT")?;
                        }
                    } else {
                        self.expect_kw("NO")?;
                        self.expect_kw("ACTION")?;
                    }
                }
            } else {
                return Ok(());
            }
        }
    }

    /// A parenthesized expression read and dropped (CHECK constraints).
    fn skip_parenthesized(&mut self) -> Result<(), ParseError> {
        self.expect_sym("(")?;
        let mut depth = 1;
        while depth > 0 {
            match self.next() {
                None => return Err(self.error()),
                Some(Tok::Sym("(")) => depth += 1,
                Some(Tok::Sym(")")) => depth -= 1,
                Some(_) => {}
            }
        }
        Ok(())
    }

    pub(super) fn index_options(&mut self) -> Result<(), ParseError> {
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

    pub(super) fn column_spec(&mut self) -> Result<ColumnSpec, ParseError> {
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
            ignored: None,
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
            } else if self.at_kw("REFERENCES") {
                self.references()?;
                c.ignored = Some(format!("REFERENCES on `{}`", c.name));
            } else if self.eat_kw("CHECK") {
                self.skip_parenthesized()?;
                c.ignored = Some(format!("CHECK on `{}`", c.name));
            } else {
                return Ok(c);
            }
        }
    }

    pub(super) fn type_name(&mut self) -> Result<TypeName, ParseError> {
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

    pub(super) fn drop(&mut self) -> Result<Statement, ParseError> {
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

    pub(super) fn alter(&mut self) -> Result<Statement, ParseError> {
        self.pos += 1;
        if self.eat_kw("USER") {
            self.eat_kws(&["IF", "EXISTS"]);
            let (user, host) = self.user_spec()?;
            self.expect_kw("IDENTIFIED")?;
            let mut plugin = None;
            if self.eat_kw("WITH") {
                plugin = Some(self.ident_or_string()?.to_ascii_lowercase());
            }
            self.expect_kw("BY")?;
            let password = self.string()?;
            return Ok(Statement::AlterUser { user, host, password, plugin });
        }
        if self.at_kw("DATABASE") || self.at_kw("SCHEMA") {
            self.skip_rest();
            return Ok(Statement::Noop);
        }
        self.eat_kw("ONLINE");
        self.expect_kw("TABLE")?;
        let table = self.obj_name()?;
        // MyISAM's non-unique index switch, in every mysqldump file: nothing to do here.
        if (self.at_kw("DISABLE") || self.at_kw("ENABLE"))
            && self.toks.get(self.pos + 1).is_some_and(|t| t.0.is_kw("KEYS"))
        {
            self.pos += 2;
            return Ok(Statement::Noop);
        }
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
                        ignored: Vec::new(),
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
}
