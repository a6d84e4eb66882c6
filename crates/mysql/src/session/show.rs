//! SHOW statements: databases, tables, columns, indexes, variables, status, grants and the
//! process list, as MySQL shapes their result sets.

use super::*;

pub(super) fn substitute_show(e: &Expr, row: &[Value]) -> Expr {
    match e {
        Expr::Column { name, .. } if name.eq_ignore_ascii_case("Variable_name") => Expr::Lit(row[0].clone()),
        Expr::Column { name, .. } if name.eq_ignore_ascii_case("Value") => Expr::Lit(row[1].clone()),
        Expr::Binary(op, a, b) => Expr::bin(*op, substitute_show(a, row), substitute_show(b, row)),
        Expr::Like { e, pat, neg } => {
            Expr::Like { e: Box::new(substitute_show(e, row)), pat: Box::new(substitute_show(pat, row)), neg: *neg }
        }
        Expr::In { e, list, neg } => Expr::In {
            e: Box::new(substitute_show(e, row)),
            list: list.iter().map(|x| substitute_show(x, row)).collect(),
            neg: *neg,
        },
        other => other.clone(),
    }
}

/// A text column of a SHOW result.
fn col(n: &str) -> ColumnDef {
    ColumnDef::expr(n, ty::VAR_STRING, 256)
}

/// Rows of text.
fn strs(v: Vec<Vec<String>>) -> Vec<Vec<Value>> {
    v.into_iter().map(|r| r.into_iter().map(|x| Value::Bytes(x.into_bytes())).collect()).collect()
}

/// Whether `v` matches the LIKE pattern (no pattern: everything does).
fn like_ok(pat: &Option<String>, v: &str) -> bool {
    pat.as_ref().is_none_or(|p| eval::like(v.as_bytes(), p.as_bytes()))
}

impl Session {
    pub(super) async fn show(&mut self, kind: &ShowKind) -> Result<Answer, SqlError> {
        match kind {
            ShowKind::Databases { like } => {
                self.refresh().await;
                let mut dbs = self.client.databases();
                dbs.push("information_schema".into());
                dbs.push(tern_sql::ndbinfo::DB.into());
                dbs.sort();
                dbs.retain(|d| like_ok(like, d) && self.check_db(d).is_ok());
                Ok(Answer::Rows {
                    columns: vec![col("Database")],
                    rows: strs(dbs.into_iter().map(|d| vec![d]).collect()),
                })
            }
            ShowKind::Tables { db, like, full } => self.show_tables(db.as_deref(), like, *full).await,
            ShowKind::Columns { table, full, like } => self.show_columns(table, *full, like),
            ShowKind::CreateTable(t) => {
                let h = self.table(t.db.as_deref(), &t.name)?;
                Ok(Answer::Rows {
                    columns: vec![col("Table"), col("Create Table")],
                    rows: strs(vec![vec![h.table.name.clone(), ddl::show_create(&h.table)]]),
                })
            }
            ShowKind::CreateDatabase(d) => {
                self.known_db(d).await?;
                Ok(Answer::Rows {
                    columns: vec![col("Database"), col("Create Database")],
                    rows: strs(vec![vec![
                        d.clone(),
                        format!("CREATE DATABASE `{d}` /*!40100 DEFAULT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin */"),
                    ]]),
                })
            }
            ShowKind::Index(t) => self.show_index(t),
            ShowKind::Variables { like, filter, global } => self.show_variables(like, filter, *global),
            ShowKind::Status { like } => {
                let st = self.client.status_async().await.map_err(SqlError::from)?;
                let all = vec![
                    ("Uptime".to_string(), "1".to_string()),
                    ("Threads_connected".into(), "1".into()),
                    ("Ndb_cluster_node_id".into(), st.node_id.to_string()),
                    ("Ndb_number_of_data_nodes".into(), "1".into()),
                    ("Ndb_memory_used".into(), st.memory_used.to_string()),
                    ("Ndb_memory_total".into(), st.memory_total.to_string()),
                    ("Ndb_rows".into(), st.rows.to_string()),
                    ("Ndb_durable_epoch".into(), st.durable_epoch.to_string()),
                    ("Tern_engine_queries".into(), self.engine_queries.to_string()),
                ];
                let rows = all.into_iter().filter(|(n, _)| like_ok(like, n)).map(|(n, v)| vec![n, v]).collect();
                Ok(Answer::Rows { columns: vec![col("Variable_name"), col("Value")], rows: strs(rows) })
            }
            ShowKind::Warnings | ShowKind::Errors => Ok(Answer::Rows {
                columns: vec![col("Level"), ColumnDef::expr("Code", ty::LONG, 4), col("Message")],
                rows: self
                    .warnings
                    .iter()
                    .filter(|w| matches!(kind, ShowKind::Warnings) || w.0 == "Error")
                    .map(|(level, code, msg)| vec![s(level), Value::Int(*code as i64), s(msg)])
                    .collect(),
            }),
            ShowKind::Empty(columns) => {
                Ok(Answer::Rows { columns: columns.iter().map(|c| col(c)).collect(), rows: Vec::new() })
            }
            ShowKind::Engines => Ok(Answer::Rows {
                columns: ["Engine", "Support", "Comment", "Transactions", "XA", "Savepoints"]
                    .into_iter()
                    .map(col)
                    .collect(),
                rows: strs(vec![vec![
                    "ndbcluster".into(),
                    "DEFAULT".into(),
                    "Tern: in-memory, synchronously replicated".into(),
                    "YES".into(),
                    "NO".into(),
                    "NO".into(),
                ]]),
            }),
            ShowKind::Collation { like } => {
                let rows: Vec<Vec<Value>> = [
                    ("utf8mb4_bin", "utf8mb4", 46),
                    ("utf8mb4_general_ci", "utf8mb4", 45),
                    ("latin1_general_cs", "latin1", 49),
                    ("binary", "binary", 63),
                ]
                .into_iter()
                .filter(|(n, _, _)| like_ok(like, n))
                .map(|(n, c, id)| vec![s(n), s(c), Value::Int(id), s(""), s("Yes"), Value::Int(1), s("PAD SPACE")])
                .collect();
                Ok(Answer::Rows {
                    columns: ["Collation", "Charset", "Id", "Default", "Compiled", "Sortlen", "Pad_attribute"]
                        .into_iter()
                        .map(col)
                        .collect(),
                    rows,
                })
            }
            ShowKind::CharacterSet { like } => {
                let rows: Vec<Vec<Value>> = [
                    ("utf8mb4", "UTF-8 Unicode", "utf8mb4_bin", 4),
                    ("latin1", "cp1252 West European", "latin1_swedish_ci", 1),
                    ("binary", "Binary pseudo charset", "binary", 1),
                ]
                .into_iter()
                .filter(|(n, ..)| like_ok(like, n))
                .map(|(n, d, c, l)| vec![s(n), s(d), s(c), Value::Int(l)])
                .collect();
                Ok(Answer::Rows {
                    columns: ["Charset", "Description", "Default collation", "Maxlen"].into_iter().map(col).collect(),
                    rows,
                })
            }
            ShowKind::Processlist { full } => Ok(Answer::Rows {
                columns: ["Id", "User", "Host", "db", "Command", "Time", "State", "Info"]
                    .into_iter()
                    .map(col)
                    .collect(),
                rows: self.process_list(*full),
            }),
            ShowKind::TableStatus { like } => {
                let db = self.need_db(None)?;
                let mut tables = self.client.tables(&db);
                tables.sort();
                let rows = tables
                    .into_iter()
                    .filter(|t| like_ok(like, t) && self.sees_table(&db, t))
                    .map(|t| vec![s(&t), s("ndbcluster"), Value::Int(10), s("Dynamic")])
                    .collect();
                Ok(Answer::Rows {
                    columns: ["Name", "Engine", "Version", "Row_format"].into_iter().map(col).collect(),
                    rows,
                })
            }
            ShowKind::Grants(who) => self.show_grants(who).await,
        }
    }

    /// SHOW [FULL] TABLES [FROM db] [LIKE p].
    async fn show_tables(&mut self, db: Option<&str>, like: &Option<String>, full: bool) -> Result<Answer, SqlError> {
        let db = self.need_db(db)?;
        self.refresh().await;
        if !tern_sql::infoschema::is_virtual(&db) {
            self.known_db(&db).await?;
        }
        let mut tables = if db.eq_ignore_ascii_case(tern_sql::infoschema::DB) {
            tern_sql::infoschema::TABLES.iter().map(|t| t.to_string()).collect()
        } else if db.eq_ignore_ascii_case(tern_sql::ndbinfo::DB) {
            tern_sql::ndbinfo::TABLES.iter().map(|t| t.to_string()).collect()
        } else {
            self.client.tables(&db)
        };
        tables.sort();
        tables.retain(|t| like_ok(like, t) && self.sees_table(&db, t));
        let mut columns = vec![col(&format!("Tables_in_{db}"))];
        if full {
            columns.push(col("Table_type"));
        }
        let rows = tables.into_iter().map(|t| if full { vec![t, "BASE TABLE".into()] } else { vec![t] }).collect();
        Ok(Answer::Rows { columns, rows: strs(rows) })
    }

    /// SHOW [FULL] COLUMNS FROM t [LIKE p].
    fn show_columns(&self, table: &ObjName, full: bool, like: &Option<String>) -> Result<Answer, SqlError> {
        let h = self.table(table.db.as_deref(), &table.name)?;
        let t = &h.table;
        let mut rows = Vec::new();
        for (i, c) in t.columns.iter().enumerate().filter(|(_, c)| !c.hidden) {
            if !like_ok(like, &c.name) {
                continue;
            }
            let key = ddl::column_key(t, i);
            let mut r =
                vec![Value::Bytes(c.name.clone().into_bytes()), Value::Bytes(ddl::column_type_text(c).into_bytes())];
            if full {
                r.push(if c.ty.is_text() { s("utf8mb4_bin") } else { Value::Null });
            }
            r.push(s(if c.nullable { "YES" } else { "NO" }));
            r.push(s(key));
            r.push(ddl::default_text(c).map(|d| Value::Bytes(d.into_bytes())).unwrap_or(Value::Null));
            r.push(s(if c.auto_increment { "auto_increment" } else { "" }));
            if full {
                r.push(s("select,insert,update,references"));
                r.push(s(""));
            }
            rows.push(r);
        }
        let mut names = vec!["Field", "Type"];
        if full {
            names.push("Collation");
        }
        names.extend(["Null", "Key", "Default", "Extra"]);
        if full {
            names.extend(["Privileges", "Comment"]);
        }
        Ok(Answer::Rows { columns: names.into_iter().map(col).collect(), rows })
    }

    /// SHOW INDEX FROM t: one row per column of each index, as MySQL lists them.
    fn show_index(&self, t: &ObjName) -> Result<Answer, SqlError> {
        let h = self.table(t.db.as_deref(), &t.name)?;
        let mut rows = Vec::new();
        for i in &h.table.indexes {
            for (seq, &c) in i.columns.iter().enumerate() {
                rows.push(vec![
                    s(&h.table.name),
                    Value::Int((!(i.unique || i.name == "PRIMARY")) as i64),
                    s(&i.name),
                    Value::Int(seq as i64 + 1),
                    s(&h.table.columns[c as usize].name),
                    s("A"),
                    Value::Null,
                    Value::Null,
                    Value::Null,
                    s(if h.table.columns[c as usize].nullable { "YES" } else { "" }),
                    s("BTREE"),
                    s(""),
                    s(""),
                ]);
            }
        }
        let names = [
            "Table",
            "Non_unique",
            "Key_name",
            "Seq_in_index",
            "Column_name",
            "Collation",
            "Cardinality",
            "Sub_part",
            "Packed",
            "Null",
            "Index_type",
            "Comment",
            "Index_comment",
        ];
        Ok(Answer::Rows { columns: names.into_iter().map(col).collect(), rows })
    }

    /// SHOW [GLOBAL] VARIABLES [LIKE p | WHERE e].
    fn show_variables(&self, like: &Option<String>, filter: &Option<Expr>, global: bool) -> Result<Answer, SqlError> {
        let mut rows = Vec::new();
        let mut names: Vec<&str> = VAR_NAMES.to_vec();
        names.sort();
        for n in names {
            if !like_ok(like, n) {
                continue;
            }
            let v = self.sysvar(global, n)?;
            rows.push(vec![s(n), Value::Bytes(eval::text(&v).unwrap_or_default())]);
        }
        if let Some(f) = filter {
            // WHERE on Variable_name / Value.
            let mut kept = Vec::new();
            for r in rows {
                let e = substitute_show(f, &r);
                let x = plan_const(&e, self)?;
                let env = Env { params: &[], subs: Vec::new(), sess: self, newrow: None };
                if eval::truth(&run::ev(&x, &[], &[], &env)?) == Some(true) {
                    kept.push(r);
                }
            }
            rows = kept;
        }
        Ok(Answer::Rows { columns: vec![col("Variable_name"), col("Value")], rows })
    }

    /// SHOW GRANTS [FOR user].
    async fn show_grants(&mut self, who: &Option<String>) -> Result<Answer, SqlError> {
        let user = who.clone().unwrap_or_else(|| self.user.clone());
        if user != self.user {
            self.check_admin("SELECT on mysql")?;
        }
        let grants = if user == self.user {
            self.grants.clone()
        } else {
            crate::users::grants(&self.client, &user, "localhost").await?
        };
        let rows = match grants {
            None => vec![format!("GRANT ALL PRIVILEGES ON *.* TO `{user}`@`%` WITH GRANT OPTION")],
            Some(p) => p.describe(&user),
        };
        Ok(Answer::Rows {
            columns: vec![col(&format!("Grants for {user}@%"))],
            rows: rows.into_iter().map(|r| vec![Value::Bytes(r.into_bytes())]).collect(),
        })
    }

    /// SHOW [FULL] PROCESSLIST: the connections this user may see (all for the administrator).
    pub(super) fn process_list(&self, full: bool) -> Vec<Vec<Value>> {
        let opt = |v: Option<String>| v.map(|t| Value::Bytes(t.into_bytes())).unwrap_or(Value::Null);
        let mut rows = Vec::new();
        for c in self.conns.list() {
            let a = c.activity();
            if !self.is_admin() && a.user != self.user {
                continue;
            }
            let info = a.info.map(|i| if full { i } else { i.chars().take(crate::conns::INFO_SHORT).collect() });
            let state = if a.command == "Sleep" { "" } else { "executing" };
            rows.push(vec![
                Value::Int(c.id as i64),
                s(&a.user),
                s(&a.host),
                opt(a.db),
                s(a.command),
                Value::Int(a.since.elapsed().as_secs() as i64),
                s(state),
                opt(info),
            ]);
        }
        rows
    }
}
