//! Privileges of the session's account: the grants it holds (refreshed when accounts change)
//! and the checks every statement passes; account statements (CREATE/DROP/ALTER USER, GRANT).

use super::*;

impl Session {
    /// Reads the session's privileges again when accounts or privileges changed through this API
    /// server, and every `GRANTS_TTL` otherwise (a change made through another API server):
    /// MySQL applies table and database privilege changes to a connected client from its next
    /// statement. A failed read keeps the old ones and is tried again at the next statement.
    pub async fn refresh_grants(&mut self) {
        let generation = crate::users::generation();
        if generation == self.grants_gen && self.grants_read.elapsed() < GRANTS_TTL {
            return;
        }
        if let Ok(g) = crate::users::grants(&self.client, &self.user, &self.host).await {
            if g != self.grants {
                self.grants = g;
                self.grants_changes += 1;
            }
            self.grants_gen = generation;
            self.grants_read = std::time::Instant::now();
        }
    }

    /// Whether this user may use database `db` (1044 otherwise).
    pub fn check_db(&self, db: &str) -> Result<(), SqlError> {
        match &self.grants {
            Some(p) if !db.eq_ignore_ascii_case(tern_sql::infoschema::DB) && !p.sees_db(db) => {
                Err(crate::users::db_denied(&self.user, &self.host, db))
            }
            _ => Ok(()),
        }
    }

    /// Whether this user may administer (root, or a global GRANT OPTION).
    pub fn is_admin(&self) -> bool {
        self.grants.as_ref().is_none_or(|p| p.is_admin())
    }

    /// Needs `need` (`tern_sql::privs` bits) on table `db.t`: MySQL's 1142 otherwise.
    pub fn check_table(&self, db: &str, t: &str, need: u16) -> Result<(), SqlError> {
        let Some(p) = &self.grants else { return Ok(()) };
        if db.eq_ignore_ascii_case(tern_sql::infoschema::DB) {
            return Ok(());
        }
        let missing = need & !p.on_table(db, t);
        if missing == 0 {
            return Ok(());
        }
        Err(crate::users::table_denied(tern_sql::privs::command(missing), &self.user, &self.host, t))
    }

    /// Whether SHOW TABLES lists `db.t` for this user (any privilege on it).
    pub(super) fn sees_table(&self, db: &str, t: &str) -> bool {
        db.eq_ignore_ascii_case(tern_sql::infoschema::DB)
            || self.grants.as_ref().is_none_or(|p| p.on_table(db, t) & tern_sql::privs::ALL != 0)
    }

    /// Needs `need` on database `db` as a whole (CREATE/DROP DATABASE): MySQL's 1044 otherwise.
    pub(super) fn check_db_priv(&self, db: &str, need: u16) -> Result<(), SqlError> {
        match &self.grants {
            Some(p) if need & !p.on_db(db) != 0 => Err(crate::users::db_denied(&self.user, &self.host, db)),
            _ => Ok(()),
        }
    }

    /// What the analytic engine may read for this user.
    pub(super) fn engine_access(&self) -> tern_engine::Access {
        // Every database: a table the user may not read fails with 1142 (as MySQL), not "no
        // such table".
        let dbs = self.client.databases();
        let Some(p) = self.grants.clone() else { return tern_engine::Access::dbs(dbs) };
        let (user, host) = (self.user.clone(), self.host.clone());
        let check: tern_engine::TableCheck = std::sync::Arc::new(move |db: &str, t: &str| {
            if p.on_table(db, t) & tern_sql::privs::SELECT != 0 {
                return Ok(());
            }
            Err(crate::users::table_denied("SELECT", &user, &host, t))
        });
        tern_engine::Access { dbs, table_check: Some(check) }
    }

    /// Account statements need a global grant.
    pub(super) fn check_admin(&self, what: &str) -> Result<(), SqlError> {
        if !self.is_admin() {
            return Err(SqlError::new(
                1227,
                "42000",
                format!("Access denied; you need (at least one of) the {what} privilege(s) for this operation"),
            ));
        }
        Ok(())
    }

    /// CREATE USER, DROP USER, GRANT / REVOKE, ALTER USER.
    pub(super) async fn account_stmt(&mut self, stmt: &Statement) -> Result<Answer, SqlError> {
        match stmt {
            Statement::CreateUser { users, if_not_exists } => {
                self.check_admin("CREATE USER")?;
                for (u, h, pw, plugin) in users {
                    let plugin = crate::users::Plugin::named(plugin.as_deref())?;
                    let r = crate::users::create_user(&self.client, u, h, pw.as_deref(), plugin, *if_not_exists).await;
                    crate::users::changed();
                    r?;
                }
                Ok(Answer::ok())
            }
            Statement::DropUser { users, if_exists } => {
                self.check_admin("CREATE USER")?;
                for (u, h) in users {
                    let r = crate::users::drop_user(&self.client, u, h, *if_exists).await;
                    crate::users::changed();
                    r?;
                }
                Ok(Answer::ok())
            }
            Statement::Grant { privs, level, user, host, revoke } => {
                let key = match level {
                    Some(l) => Some(crate::users::level_key(l, self.db.as_deref())?),
                    None => None,
                };
                // MySQL's rule: GRANT OPTION at the level, and every privilege passed on held
                // there; REVOKE ALL ... FROM needs the administrator.
                if let Some(p) = &self.grants {
                    let held = match &key {
                        Some((d, _)) if d == "*" => p.global,
                        Some((d, t)) if t == "*" => p.on_db(d),
                        Some((d, t)) => p.on_table(d, t),
                        None => 0,
                    };
                    if held & tern_sql::privs::GRANT == 0 || *privs & !held != 0 {
                        if let Some((_, t)) = key.as_ref().filter(|(d, t)| d != "*" && t != "*") {
                            return Err(crate::users::table_denied("GRANT", &self.user, &self.host, t));
                        }
                        let db = key.as_ref().map_or("*", |k| k.0.as_str());
                        return Err(crate::users::db_denied(&self.user, &self.host, db));
                    }
                }
                let r = crate::users::grant(&self.client, *privs, key, user, host, *revoke).await;
                crate::users::changed();
                r?;
                Ok(Answer::ok())
            }
            Statement::AlterUser { user, host, password, plugin } => {
                if *user != self.user {
                    self.check_admin("CREATE USER")?;
                }
                let plugin = crate::users::Plugin::named(plugin.as_deref())?;
                let r = crate::users::alter_user(&self.client, user, host, password, plugin).await;
                crate::users::changed();
                r?;
                Ok(Answer::ok())
            }
            _ => unreachable!("an account statement"),
        }
    }
}
