//! Prepared statements and the plan cache: PREPARE / EXECUTE / DEALLOCATE, the binary
//! protocol's statements, and plans cached by normalized text.

use super::*;

/// `sql` with each `?` replaced by its parameter value as a SQL literal (strings quoted with
/// their quotes doubled and backslashes escaped, bytes that are not UTF-8 as `X'..'`, temporal
/// values as quoted text, numbers as written, a negative one in parentheses).
pub(super) fn bind_literals(sql: &str, params: &[Value]) -> Result<String, SqlError> {
    let toks = tern_sql::lex::tokenize_spans(sql).map_err(|e| SqlError::new(1064, "42000", e.0))?;
    let mut out = String::with_capacity(sql.len() + 16 * params.len());
    let mut at = 0;
    let mut next = params.iter();
    for (t, start, end) in toks {
        if !matches!(t, tern_sql::lex::Tok::Param) {
            continue;
        }
        let v =
            next.next().ok_or_else(|| SqlError::new(1210, "HY000", "Incorrect arguments to mysqld_stmt_execute"))?;
        out.push_str(&sql[at..start]);
        out.push_str(&sql_literal(v));
        at = end;
    }
    out.push_str(&sql[at..]);
    Ok(out)
}

pub(super) fn sql_literal(v: &Value) -> String {
    let text = || String::from_utf8_lossy(&eval::text(v).unwrap_or_default()).into_owned();
    match v {
        Value::Null => "NULL".into(),
        // A negative number in parentheses: `x -?` must not become `x --5`.
        Value::Int(_) | Value::UInt(_) | Value::Decimal { .. } | Value::Double(_) | Value::Float(_) => {
            let t = text();
            if t.starts_with('-') { format!("({t})") } else { t }
        }
        Value::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "''")),
            Err(_) => format!("X'{}'", b.iter().map(|x| format!("{x:02X}")).collect::<String>()),
        },
        _ => format!("'{}'", text().replace('\'', "''")),
    }
}

impl Session {
    /// Parses and plans (or takes from the cache) a statement text.
    pub async fn prepare(&mut self, sql: &str) -> Result<Arc<Prepared>, SqlError> {
        let version = self.plan_version();
        if let Some(p) = self.cache.get(sql)
            && p.version == version
            && p.db == self.db
        {
            return Ok(p.clone());
        }
        let parsed = parse(sql).map_err(|e| parse_error(e, sql))?;
        let prep = Arc::new(self.plan_fresh(parsed.stmt, parsed.params).await?);
        if matches!(prep.plan, Plan::Select(_) | Plan::Insert(_) | Plan::Update(_) | Plan::Delete(_)) {
            if self.cache.len() >= CACHE_MAX {
                self.cache.clear();
            }
            self.cache.insert(sql.to_string(), prep.clone());
        }
        Ok(prep)
    }

    /// `prepare` for COM_STMT_PREPARE and PREPARE: a query that only the engine runs is prepared
    /// for it (its parameters counted; its columns are known when it runs).
    pub async fn prepare_stmt(&mut self, sql: &str) -> Result<Arc<Prepared>, SqlError> {
        match self.prepare(sql).await {
            Err(e) if matches!(e.errno, 1064 | 1235) && is_query_text(sql) => {
                let Ok(toks) = tern_sql::lex::tokenize(sql) else { return Err(e) };
                let params = toks.iter().filter(|(t, _)| matches!(t, tern_sql::lex::Tok::Param)).count();
                Ok(Arc::new(Prepared {
                    stmt: Statement::Begin,
                    params,
                    plan: Plan::Engine { sql: sql.to_string(), ours: e },
                    version: self.plan_version(),
                    db: self.db.clone(),
                }))
            }
            r => r,
        }
    }

    /// Plans with the cached catalog; when it names a table the cache does not know, refreshes
    /// the catalog (awaited) and plans once more.
    pub(super) async fn plan_fresh(&self, stmt: Statement, params: usize) -> Result<Prepared, SqlError> {
        self.catalog_miss.store(false, std::sync::atomic::Ordering::Relaxed);
        let version = self.plan_version();
        let plan = match self.make_plan(&stmt) {
            Err(_) if self.catalog_miss.load(std::sync::atomic::Ordering::Relaxed) => {
                self.refresh().await;
                return self.plan(stmt, params);
            }
            r => r?,
        };
        Ok(Prepared { stmt, params, plan, version, db: self.db.clone() })
    }

    pub(super) fn plan(&self, stmt: Statement, params: usize) -> Result<Prepared, SqlError> {
        let version = self.plan_version();
        let plan = self.make_plan(&stmt)?;
        Ok(Prepared { stmt, params, plan, version, db: self.db.clone() })
    }

    pub(super) fn make_plan(&self, stmt: &Statement) -> Result<Plan, SqlError> {
        let mut cat = CatalogView::new(self);
        // Also without grants: a write to a virtual database's table is refused by the view.
        cat.target = self.target_of(stmt);
        let db = self.db.as_deref();
        let plan = match &stmt {
            Statement::Select(q) => Plan::Select(Box::new(plan::plan_select(q, &cat, db)?)),
            Statement::Insert(i) => Plan::Insert(Box::new(plan::plan_insert(i, &cat, db)?)),
            Statement::Update(u) => Plan::Update(Box::new(plan::plan_modify(
                &u.table,
                u.filter.as_ref(),
                &u.sets,
                &u.order_by,
                u.limit.as_ref(),
                &cat,
                db,
            )?)),
            Statement::Delete(d) => Plan::Delete(Box::new(plan::plan_modify(
                &d.table,
                d.filter.as_ref(),
                &[],
                &d.order_by,
                d.limit.as_ref(),
                &cat,
                db,
            )?)),
            _ => Plan::Other,
        };
        Ok(plan)
    }

    /// The table an INSERT, UPDATE or DELETE writes and the privileges it needs there (INSERT;
    /// REPLACE also DELETE; ON DUPLICATE KEY UPDATE also UPDATE; UPDATE or DELETE, and SELECT
    /// too when a WHERE clause reads the table). Every other table a statement reads needs
    /// SELECT (`CatalogView`).
    pub(super) fn target_of(&self, stmt: &Statement) -> Option<(String, String, u16)> {
        use tern_sql::privs::{DELETE, INSERT, SELECT, UPDATE};
        let (t, need) = match stmt {
            Statement::Insert(i) => {
                (&i.table, INSERT | if i.replace { DELETE } else { 0 } | if i.on_dup.is_empty() { 0 } else { UPDATE })
            }
            Statement::Update(u) => (&u.table, UPDATE | if u.filter.is_some() { SELECT } else { 0 }),
            Statement::Delete(d) => (&d.table, DELETE | if d.filter.is_some() { SELECT } else { 0 }),
            _ => return None,
        };
        let db = t.db.clone().or_else(|| self.db.clone())?;
        Some((db, t.name.clone(), need))
    }

    /// The cached plan of a normalised text (None: it does not plan; the caller uses the text
    /// as written, so errors speak of what the client sent).
    pub(super) fn prepare_normalized(&mut self, norm: &str, params: usize) -> Option<Arc<Prepared>> {
        let version = self.plan_version();
        if let Some(p) = self.cache.get(norm)
            && p.version == version
            && p.db == self.db
        {
            return Some(p.clone());
        }
        let parsed = parse(norm).ok()?;
        if parsed.params != params {
            return None;
        }
        let prep = Arc::new(self.plan(parsed.stmt, parsed.params).ok()?);
        if !matches!(prep.plan, Plan::Select(_) | Plan::Insert(_) | Plan::Update(_) | Plan::Delete(_)) {
            return None;
        }
        if self.cache.len() >= CACHE_MAX {
            self.cache.clear();
        }
        self.cache.insert(norm.to_string(), prep.clone());
        Some(prep)
    }

    /// Runs a prepared statement (COM_STMT_EXECUTE, EXECUTE) of text `sql`: one the query engine
    /// serves better (`for_engine`: an analytic join) runs there with its parameter values as
    /// literals, as its text would from COM_QUERY; the rest as `execute`.
    pub async fn execute_stmt(
        &mut self,
        prep: &Arc<Prepared>,
        sql: &str,
        params: &[Value],
    ) -> Result<Answer, SqlError> {
        if params.len() >= prep.params && self.for_engine(prep) {
            let text = bind_literals(sql, params)?;
            match self.engine_query(&text, None, column_names(&prep.stmt)).await {
                Err(e) if engine_lacks(&e) => {}
                r => return r,
            }
        }
        self.execute(prep, params).await
    }

    /// Runs a prepared statement with parameter values; a stale plan (the catalog changed) is
    /// made again first.
    pub async fn execute(&mut self, prep: &Arc<Prepared>, params: &[Value]) -> Result<Answer, SqlError> {
        let prep = if prep.version != self.plan_version() && !matches!(prep.plan, Plan::Other | Plan::Engine { .. }) {
            Arc::new(self.plan_fresh(prep.stmt.clone(), prep.params).await?)
        } else {
            prep.clone()
        };
        let r = self.execute_plan(&prep, params).await;
        match r {
            Err(e) if e.is(ErrorCode::SchemaChanged) && !self.ts.open => {
                // The schema changed under us (another API server): refresh and plan again.
                self.refresh().await;
                let again = Arc::new(self.plan(prep.stmt.clone(), prep.params)?);
                self.execute_plan(&again, params).await
            }
            r => r,
        }
    }

    /// PREPARE, EXECUTE, DEALLOCATE PREPARE of named statements.
    pub(super) async fn prepared_stmt(&mut self, stmt: &Statement, params: &[Value]) -> Result<Answer, SqlError> {
        match stmt {
            Statement::Prepare { name, sql } => {
                let text = {
                    let x = plan_const(sql, self)?;
                    let env = Env { params, subs: Vec::new(), sess: self, newrow: None };
                    eval::text(&run::ev(&x, &[], &[], &env)?).unwrap_or_default()
                };
                let text = String::from_utf8_lossy(&text).into_owned();
                let prep = self.prepare_stmt(&text).await?;
                self.named.insert(name.clone(), (prep, text.into()));
                Ok(Answer::ok())
            }
            Statement::Execute { name, using } => {
                let (prep, text) = self.named.get(name).cloned().ok_or_else(|| {
                    SqlError::new(
                        1243,
                        "HY000",
                        format!("Unknown prepared statement handler ({name}) given to EXECUTE"),
                    )
                })?;
                if using.len() != prep.params {
                    return Err(SqlError::new(1210, "HY000", "Incorrect arguments to EXECUTE"));
                }
                let vals: Vec<Value> = using.iter().map(|u| self.uservar(u)).collect();
                Box::pin(self.execute_stmt(&prep, &text, &vals)).await
            }
            Statement::Deallocate(name) => {
                if self.named.remove(name).is_none() {
                    return Err(SqlError::new(
                        1243,
                        "HY000",
                        format!("Unknown prepared statement handler ({name}) given to DEALLOCATE PREPARE"),
                    ));
                }
                Ok(Answer::ok())
            }
            _ => unreachable!("a prepared-statement statement"),
        }
    }
}
