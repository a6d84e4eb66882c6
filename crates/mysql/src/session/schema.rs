//! Schema statements: CREATE/DROP DATABASE and TABLE, indexes, ALTER TABLE (columns by copying
//! rows), TRUNCATE.

use super::*;

/// The value MySQL gives existing rows for a new NOT NULL column without a default.
pub(super) fn implicit_default(t: tern_types::ColumnType) -> Option<Value> {
    use tern_types::ColumnType as C;
    Some(match t {
        t if t.is_integer() => {
            if t.is_unsigned() {
                Value::UInt(0)
            } else {
                Value::Int(0)
            }
        }
        C::Float => Value::Float(0.0),
        C::Double => Value::Double(0.0),
        C::Decimal { scale, .. } => Value::Decimal { v: 0, scale },
        C::Char { .. } | C::VarChar { .. } | C::Text | C::VarBinary { .. } | C::Blob => Value::Bytes(Vec::new()),
        C::Binary { len } => Value::Bytes(vec![0; len as usize]),
        C::Year => Value::Year(0),
        C::Bit { .. } => Value::Bit(0),
        C::Time { .. } => Value::Time(0),
        _ => return None,
    })
}

impl Session {
    pub(super) async fn ddl(&self, req: DdlReq) -> Result<(), SqlError> {
        self.client.ddl_async(req).await.map(|_| ()).map_err(SqlError::from)
    }

    pub(super) async fn known_db(&self, db: &str) -> Result<(), SqlError> {
        if self.client.databases().iter().any(|d| d == db) {
            return Ok(());
        }
        self.refresh().await;
        if self.client.databases().iter().any(|d| d == db) {
            Ok(())
        } else {
            Err(SqlError::new(1049, "42000", format!("Unknown database '{db}'")))
        }
    }

    pub fn table(&self, db: Option<&str>, name: &str) -> Result<TableHandle, SqlError> {
        let h = CatalogView::unchecked(self).table(db, name)?;
        // Statements that change a table checked their own privilege; the others (SHOW
        // COLUMNS, SHOW CREATE TABLE, SHOW INDEX, COM_FIELD_LIST) need any privilege on it.
        if !self.sees_table(&h.table.database, &h.table.name) {
            return Err(crate::users::table_denied("SELECT", &self.user, &self.host, &h.table.name));
        }
        Ok(h)
    }

    /// ALTER TABLE ADD/DROP COLUMN by copying (MySQL's ALGORITHM=COPY without its table lock):
    /// the rows go to a table with the new definition under a temporary name, the original is
    /// dropped and created again with the new definition, and the rows come back. Writes by other
    /// sessions while this runs may be lost.
    pub(super) async fn alter_columns(&mut self, h: &TableHandle, ops: &[&AlterOp]) -> Result<(), SqlError> {
        use tern_types::schema::HIDDEN_ROWID;
        let old = &h.table;
        let mut def = (**old).clone();
        // A hidden primary key is made again by the new table.
        if let Some(p) = def.columns.iter().position(|c| c.hidden && c.name == HIDDEN_ROWID) {
            def.columns.remove(p);
            def.primary_key.clear();
            def.partition_key.clear();
        }
        for op in ops {
            match op {
                AlterOp::AddColumn(spec) => {
                    if spec.primary_key || spec.unique || spec.auto_increment {
                        return Err(SqlError::new(
                            1235,
                            "42000",
                            "This version of Tern doesn't yet support 'ADD COLUMN with a key or AUTO_INCREMENT'",
                        ));
                    }
                    if def.column_index(&spec.name).is_some() {
                        return Err(SqlError::new(1060, "42S21", format!("Duplicate column name '{}'", spec.name)));
                    }
                    let c = ddl::column(spec)?;
                    if !c.nullable && c.default.is_none() && c.members.is_none() && implicit_default(c.ty).is_none() {
                        return Err(SqlError::new(1138, "22004", "Invalid use of NULL value"));
                    }
                    def.columns.push(c);
                }
                AlterOp::DropColumn(name) => {
                    let Some(c) = def.column_index(name) else {
                        return Err(SqlError::new(
                            1091,
                            "42000",
                            format!("Can't DROP '{name}'; check that column/key exists"),
                        ));
                    };
                    if def.primary_key.contains(&(c as u16)) {
                        return Err(SqlError::new(
                            1235,
                            "42000",
                            "This version of Tern doesn't yet support 'dropping a primary key column'",
                        ));
                    }
                    if def.columns.len() == 1 {
                        return Err(SqlError::new(
                            1090,
                            "42000",
                            "You can't delete all columns with ALTER TABLE; use DROP TABLE instead",
                        ));
                    }
                    def.columns.remove(c);
                    let fix = |v: &mut Vec<u16>| {
                        v.retain(|&x| x as usize != c);
                        for x in v.iter_mut() {
                            if *x as usize > c {
                                *x -= 1;
                            }
                        }
                    };
                    fix(&mut def.primary_key);
                    fix(&mut def.partition_key);
                    for idx in def.indexes.iter_mut() {
                        fix(&mut idx.columns);
                    }
                    def.indexes.retain(|i| !i.columns.is_empty());
                    def.ttl = match def.ttl.take() {
                        Some(t) if t.column as usize == c => None,
                        Some(mut t) => {
                            if t.column as usize > c {
                                t.column -= 1;
                            }
                            t.cascade.retain(|x| x.column as usize != c);
                            for x in t.cascade.iter_mut().filter(|x| x.column as usize > c) {
                                x.column -= 1;
                            }
                            Some(t)
                        }
                        None => None,
                    };
                }
                _ => {}
            }
        }
        def.id = 0;
        for i in def.indexes.iter_mut() {
            i.id = 0;
        }
        // New row from an old row: columns by name, new ones their default.
        let from_old: Vec<Option<usize>> = def.columns.iter().map(|c| old.column_index(&c.name)).collect();
        let fill: Vec<Value> = def
            .columns
            .iter()
            .map(|c| {
                if c.members.is_some() {
                    return tern_sql::column::default_of(c);
                }
                c.default
                    .clone()
                    .or_else(|| if c.nullable { None } else { implicit_default(c.ty) })
                    .unwrap_or(Value::Null)
            })
            .collect();
        let db = old.database.clone();
        let tmp_name: String = format!("#alter#{}", old.name).chars().take(64).collect();
        let _ = self.ddl(DdlReq::DropTable { database: db.clone(), name: tmp_name.clone(), if_exists: true }).await;
        let mut tmp_def = def.clone();
        tmp_def.name = tmp_name.clone();
        self.ddl(DdlReq::CreateTable { table: tmp_def, if_not_exists: false }).await?;
        let tmp = CatalogView::unchecked(self).table(Some(&db), &tmp_name)?;
        let map = |r: &[Value]| -> Vec<Value> {
            from_old.iter().zip(&fill).map(|(o, f)| o.map(|i| r[i].clone()).unwrap_or_else(|| f.clone())).collect()
        };
        self.copy_rows(h, &tmp, &map).await?;
        self.ddl(DdlReq::DropTable { database: db.clone(), name: old.name.clone(), if_exists: false }).await?;
        self.ddl(DdlReq::CreateTable { table: def, if_not_exists: false }).await?;
        let fresh = CatalogView::unchecked(self).table(Some(&db), &old.name)?;
        self.copy_rows(&tmp, &fresh, &|r: &[Value]| r.to_vec()).await?;
        self.ddl(DdlReq::DropTable { database: db, name: tmp_name, if_exists: false }).await?;
        Ok(())
    }

    /// Copies every row of `from` into `to` (rows mapped by `map`; a hidden key is made anew).
    pub(super) async fn copy_rows(
        &self,
        from: &TableHandle,
        to: &TableHandle,
        map: &(dyn Fn(&[Value]) -> Vec<Value> + Sync),
    ) -> Result<(), SqlError> {
        let visible: Vec<usize> = (0..from.table.columns.len()).filter(|&c| !from.table.columns[c].hidden).collect();
        let mut sc = self.client.scan(tern_client::ScanSpec::table(from.id()));
        let auto = to.table.columns.iter().position(|c| c.auto_increment && !c.hidden);
        let mut max_auto = 0u64;
        while let Some(batch) = sc.next_batch().await.map_err(SqlError::from)? {
            let mut ops = Vec::with_capacity(batch.len());
            let mut rows = Vec::with_capacity(batch.len());
            for b in batch {
                let full = from.decode_row(&b).map_err(SqlError::from)?;
                let vis: Vec<Value> = visible.iter().map(|&c| full[c].clone()).collect();
                let mut r = map(&vis);
                if to.table.columns.len() > r.len() {
                    r.resize(to.table.columns.len(), Value::Null);
                }
                if let Some(a) = auto {
                    max_auto = max_auto.max(eval::to_i128(&r[a]).unwrap_or(0).max(0) as u64);
                }
                rows.push(r);
            }
            for r in rows.iter_mut() {
                self.client.fill_generated_async(to, r).await.map_err(SqlError::from)?;
            }
            for r in &rows {
                ops.push(to.insert(r).map_err(SqlError::from)?);
            }
            let mut t = self.client.begin();
            t.execute_with(ops, tern_client::Exec::Commit, tern_client::AbortOption::AbortOnError)
                .await
                .map_err(SqlError::from)?;
        }
        if auto.is_some() && max_auto > 0 {
            self.client.bump_auto_increment_async(to.id(), max_auto).await.map_err(SqlError::from)?;
        }
        Ok(())
    }

    pub(super) async fn truncate(&mut self, h: &TableHandle) -> Result<(), SqlError> {
        let mut spec = tern_client::ScanSpec::table(h.id());
        spec.projection = Some(h.table.primary_key.clone());
        let mut sc = self.client.scan(spec);
        let mut keys = Vec::new();
        while let Some(batch) = sc.next_batch().await.map_err(SqlError::from)? {
            for r in batch {
                keys.push(h.decode_projection(&h.table.primary_key, &r).map_err(SqlError::from)?);
            }
        }
        for chunk in keys.chunks(1000) {
            let ops = chunk.iter().map(|k| h.delete(k)).collect::<Result<Vec<_>, _>>().map_err(SqlError::from)?;
            let mut t = self.client.begin();
            t.execute_with(ops, tern_client::Exec::Commit, tern_client::AbortOption::IgnoreError)
                .await
                .map_err(SqlError::from)?;
        }
        Ok(())
    }

    /// CREATE/DROP DATABASE, DROP TABLE, CREATE/DROP INDEX, TRUNCATE.
    pub(super) async fn schema_stmt(&mut self, stmt: &Statement) -> Result<Answer, SqlError> {
        match stmt {
            Statement::CreateDatabase { name, if_not_exists } => {
                self.check_db_priv(name, tern_sql::privs::CREATE)?;
                if tern_sql::infoschema::is_virtual(name) {
                    // MySQL's answer for its own system databases.
                    return Err(SqlError::new(
                        1007,
                        "HY000",
                        format!("Can't create database '{name}'; database exists"),
                    ));
                }
                match self.ddl(DdlReq::CreateDatabase { name: name.clone(), if_not_exists: *if_not_exists }).await {
                    Err(e) if e.is(ErrorCode::DatabaseExists) => {
                        Err(SqlError::new(1007, "HY000", format!("Can't create database '{name}'; database exists")))
                    }
                    r => r.map(|_| Answer::affected(1)),
                }
            }
            Statement::DropDatabase { name, if_exists } => {
                self.check_db_priv(name, tern_sql::privs::DROP)?;
                match self.ddl(DdlReq::DropDatabase { name: name.clone(), if_exists: *if_exists }).await {
                    Err(e) if e.is(ErrorCode::NoSuchDatabase) => Err(SqlError::new(
                        1008,
                        "HY000",
                        format!("Can't drop database '{name}'; database doesn't exist"),
                    )),
                    r => {
                        r?;
                        if self.db.as_deref() == Some(name.as_str()) {
                            self.db = None;
                        }
                        Ok(Answer::ok())
                    }
                }
            }
            Statement::DropTable { tables, if_exists } => {
                let mut missing = Vec::new();
                for t in tables {
                    let db = self.need_db(t.db.as_deref())?;
                    self.check_table(&db, &t.name, tern_sql::privs::DROP)?;
                    match self
                        .ddl(DdlReq::DropTable { database: db.clone(), name: t.name.clone(), if_exists: *if_exists })
                        .await
                    {
                        Err(e) if e.is(ErrorCode::NoSuchTable) => missing.push(format!("{db}.{}", t.name)),
                        r => r?,
                    }
                }
                if !missing.is_empty() {
                    return Err(SqlError::new(1051, "42S02", format!("Unknown table '{}'", missing.join(","))));
                }
                Ok(Answer::ok())
            }
            Statement::CreateIndex { table, index } => {
                let db = self.need_db(table.db.as_deref())?;
                self.check_table(&db, &table.name, tern_sql::privs::INDEX)?;
                let h = self.table(Some(&db), &table.name)?;
                let idx = ddl::index_of(&h.table, index)?;
                self.ddl(DdlReq::CreateIndex { database: db, table: table.name.clone(), index: idx }).await?;
                Ok(Answer::ok())
            }
            Statement::DropIndex { table, name } => {
                let db = self.need_db(table.db.as_deref())?;
                self.check_table(&db, &table.name, tern_sql::privs::INDEX)?;
                self.table(Some(&db), &table.name)?;
                self.ddl(DdlReq::DropIndex { database: db, table: table.name.clone(), name: name.clone() }).await?;
                Ok(Answer::ok())
            }
            Statement::Truncate(t) => {
                let db = self.need_db(t.db.as_deref())?;
                self.check_table(&db, &t.name, tern_sql::privs::DROP)?;
                let h = self.table(Some(&db), &t.name)?;
                self.truncate(&h).await?;
                Ok(Answer::ok())
            }
            _ => unreachable!("a schema statement"),
        }
    }

    /// CREATE TABLE, also `LIKE` another (its visible columns, their keys when all are kept).
    pub(super) async fn create_table(&mut self, ct: &CreateTable) -> Result<Answer, SqlError> {
        let db = self.need_db(ct.table.db.as_deref())?;
        self.check_table(&db, &ct.table.name, tern_sql::privs::CREATE)?;
        self.known_db(&db).await?;
        let table = match &ct.like {
            Some(other) => {
                let src = self.table(Some(other.db.as_deref().unwrap_or(&db)), &other.name)?;
                self.check_table(&src.table.database, &src.table.name, tern_sql::privs::SELECT)?;
                let mut t = (*src.table).clone();
                t.id = 0;
                t.database = db.clone();
                t.name = ct.table.name.clone();
                t.partition_count = 0;
                t.columns.retain(|c| !c.hidden);
                if t.columns.len() < src.table.columns.len() {
                    t.primary_key.clear();
                    t.partition_key.clear();
                }
                t
            }
            None => ddl::table_of(ct, &db)?,
        };
        match self.ddl(DdlReq::CreateTable { table, if_not_exists: ct.if_not_exists }).await {
            Err(e) if e.is(ErrorCode::TableExists) => {
                Err(SqlError::new(1050, "42S01", format!("Table '{}' already exists", ct.table.name)))
            }
            r => {
                r?;
                for what in &ct.ignored {
                    self.warnings.push((
                        "Warning",
                        1235,
                        format!("Tern does not enforce {what} of table `{}`: accepted and ignored", ct.table.name),
                    ));
                }
                Ok(Answer::ok())
            }
        }
    }

    /// ALTER TABLE: index changes through the dictionary, column changes by copying rows.
    pub(super) async fn alter_table(&mut self, table: &ObjName, ops: &[AlterOp]) -> Result<Answer, SqlError> {
        let db = self.need_db(table.db.as_deref())?;
        self.check_table(&db, &table.name, tern_sql::privs::ALTER)?;
        let h = self.table(Some(&db), &table.name)?;
        for op in ops {
            match op {
                AlterOp::AddIndex(spec) => {
                    let idx = ddl::index_of(&h.table, spec)?;
                    self.ddl(DdlReq::CreateIndex { database: db.clone(), table: table.name.clone(), index: idx })
                        .await?;
                }
                AlterOp::DropIndex(name) => {
                    self.ddl(DdlReq::DropIndex { database: db.clone(), table: table.name.clone(), name: name.clone() })
                        .await?;
                }
                AlterOp::AddColumn(_) | AlterOp::DropColumn(_) => {}
            }
        }
        let column_ops: Vec<&AlterOp> =
            ops.iter().filter(|o| matches!(o, AlterOp::AddColumn(_) | AlterOp::DropColumn(_))).collect();
        if !column_ops.is_empty() {
            self.refresh().await;
            let h = self.table(Some(&db), &table.name)?;
            self.alter_columns(&h, &column_ops).await?;
        }
        Ok(Answer::ok())
    }
}
