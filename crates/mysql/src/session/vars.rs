//! Session and global system variables: the names Tern knows, their defaults, SET, and what
//! they steer (statement budgets, idle timeouts, durable commits).

use super::*;

/// The variables clients ask for, with their values (session scope unless SET).
pub(super) const VAR_NAMES: &[&str] = &[
    "autocommit",
    "tern_durable_commit",
    "version",
    "version_comment",
    "max_allowed_packet",
    "sql_mode",
    "character_set_client",
    "character_set_connection",
    "character_set_results",
    "character_set_server",
    "character_set_database",
    "character_set_system",
    "collation_connection",
    "collation_server",
    "collation_database",
    "time_zone",
    "system_time_zone",
    "transaction_isolation",
    "tx_isolation",
    "transaction_read_only",
    "tx_read_only",
    "lower_case_table_names",
    "wait_timeout",
    "interactive_timeout",
    "net_write_timeout",
    "net_read_timeout",
    "auto_increment_increment",
    "auto_increment_offset",
    "license",
    "init_connect",
    "performance_schema",
    "query_cache_size",
    "query_cache_type",
    "have_ssl",
    "hostname",
    "port",
    "sql_select_limit",
    "net_buffer_length",
    "innodb_lock_wait_timeout",
    "lock_wait_timeout",
    "default_storage_engine",
    "storage_engine",
    "last_insert_id",
    "identity",
    "max_execution_time",
    "max_statement_time",
    "max_query_memory",
    "sql_auto_is_null",
    "foreign_key_checks",
    "unique_checks",
    "sql_safe_updates",
    "group_concat_max_len",
    "version_compile_os",
    "version_compile_machine",
    "protocol_version",
    "datadir",
    "socket",
    "server_id",
    "sql_notes",
    "sql_warnings",
    "sql_quote_show_create",
    "names",
    "sql_log_bin",
    "session_track_schema",
    "session_track_system_variables",
    "session_track_state_change",
    "session_track_transaction_info",
    "explicit_defaults_for_timestamp",
    "div_precision_increment",
    "default_week_format",
    "max_connections",
    "ndb_use_exact_count",
    "ndb_autoincrement_prefetch_sz",
    "ndb_batch_size",
    "transaction_allow_batching",
    "ndb_read_backup",
    "optimizer_switch",
    "big_tables",
    "long_query_time",
    "profiling",
    "sql_big_selects",
    "table_open_cache",
    "thread_cache_size",
    "character_sets_dir",
    "resultset_metadata",
    "require_secure_transport",
    "default_authentication_plugin",
    "block_encryption_mode",
    "completion_type",
    "local_infile",
    "timestamp",
    "cte_max_recursion_depth",
    "information_schema_stats_expiry",
    "innodb_strict_mode",
    "max_sort_length",
    "sort_buffer_size",
    "join_buffer_size",
    "sql_require_primary_key",
    "time_format",
    "date_format",
    "datetime_format",
    "warning_count",
    "error_count",
    "event_scheduler",
    "skip_name_resolve",
];

impl Session {
    /// A new session takes the global values set so far (autocommit among them).
    pub fn start_from_globals(&mut self) {
        let g = self.globals.read().unwrap_or_else(|e| e.into_inner()).clone();
        for (k, v) in g {
            if k == "autocommit" {
                self.autocommit =
                    eval::truth(&v).unwrap_or(true) || matches!(&v, Value::Bytes(b) if b.eq_ignore_ascii_case(b"ON"));
            } else {
                self.vars.insert(k, v);
            }
        }
    }

    pub(super) fn default_var(&self, name: &str) -> Option<Value> {
        Some(match name {
            "autocommit" => Value::Int(self.autocommit as i64),
            // COMMIT is answered once the transaction is on disk on every replica (else: in the
            // memory of every replica, on disk within an epoch). `[mysql] durable_commit` sets
            // the default.
            "tern_durable_commit" => Value::Int(self.client.durable_commits() as i64),
            "version" => s(SERVER_VERSION),
            "version_comment" => s(VERSION_COMMENT),
            "max_allowed_packet" => Value::Int(self.max_packet as i64),
            "sql_mode" => s(
                "ONLY_FULL_GROUP_BY,STRICT_TRANS_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION",
            ),
            "character_set_client"
            | "character_set_connection"
            | "character_set_results"
            | "character_set_server"
            | "character_set_database" => s("utf8mb4"),
            "character_set_system" => s("utf8mb3"),
            "collation_connection" | "collation_server" | "collation_database" => s("utf8mb4_bin"),
            "time_zone" => s("+00:00"),
            "system_time_zone" => s("UTC"),
            "transaction_isolation" | "tx_isolation" => s("READ-COMMITTED"),
            "transaction_read_only"
            | "tx_read_only"
            | "lower_case_table_names"
            | "performance_schema"
            | "query_cache_size"
            | "max_execution_time"
            | "sql_auto_is_null"
            | "sql_safe_updates"
            | "profiling"
            | "big_tables"
            | "innodb_strict_mode"
            | "sql_require_primary_key"
            | "warning_count"
            | "error_count"
            | "skip_name_resolve" => Value::Int(0),
            // Tables read at a local backup unless created with READ_BACKUP=0 (NDB's default
            // since 8.0.19).
            "ndb_read_backup" => Value::Int(1),
            "wait_timeout" | "interactive_timeout" => Value::Int(28800),
            "max_query_memory" => Value::UInt(limits::QUERY_MEMORY_DEFAULT),
            "max_statement_time" => Value::Double(0.0),
            "net_write_timeout" => Value::Int(60),
            "net_read_timeout" => Value::Int(30),
            "auto_increment_increment"
            | "auto_increment_offset"
            | "foreign_key_checks"
            | "unique_checks"
            | "sql_notes"
            | "sql_warnings"
            | "sql_quote_show_create"
            | "sql_log_bin"
            | "explicit_defaults_for_timestamp"
            | "ndb_use_exact_count"
            | "transaction_allow_batching"
            | "sql_big_selects"
            | "local_infile"
            | "server_id"
            | "protocol_version" => Value::Int(if name == "protocol_version" { 10 } else { 1 }),
            "license" => s("GPL"),
            "init_connect"
            | "session_track_system_variables"
            | "datadir"
            | "socket"
            | "character_sets_dir"
            | "optimizer_switch"
            | "block_encryption_mode"
            | "time_format"
            | "date_format"
            | "datetime_format" => s(""),
            "query_cache_type"
            | "have_ssl"
            | "session_track_schema"
            | "session_track_state_change"
            | "session_track_transaction_info"
            | "require_secure_transport"
            | "event_scheduler" => s("OFF"),
            "hostname" => s("localhost"),
            "port" => Value::Int(3306),
            "sql_select_limit" => Value::UInt(u64::MAX),
            "net_buffer_length" => Value::Int(16384),
            "innodb_lock_wait_timeout" | "lock_wait_timeout" => Value::Int(50),
            "default_storage_engine" | "storage_engine" => s("ndbcluster"),
            "last_insert_id" | "identity" => Value::UInt(self.last_insert_id.load(Ordering::Relaxed)),
            // MariaDB's default; the engine cuts GROUP_CONCAT results there.
            "group_concat_max_len" => Value::Int(1_048_576),
            "version_compile_os" => s("Linux"),
            "version_compile_machine" => s(std::env::consts::ARCH),
            "div_precision_increment" => Value::Int(4),
            "default_week_format" | "completion_type" => Value::Int(0),
            "max_connections" => Value::Int(self.conns.limit.max() as i64),
            "ndb_autoincrement_prefetch_sz" => Value::Int(512),
            "ndb_batch_size" => Value::Int(32768),
            "long_query_time" => Value::Double(10.0),
            "table_open_cache" => Value::Int(4000),
            "thread_cache_size" => Value::Int(9),
            "resultset_metadata" => s("FULL"),
            "default_authentication_plugin" => s("mysql_native_password"),
            "timestamp" => Value::Double(eval::now_micros() as f64 / 1e6),
            "cte_max_recursion_depth" => Value::Int(1000),
            "information_schema_stats_expiry" => Value::Int(86400),
            "max_sort_length" => Value::Int(1024),
            "sort_buffer_size" => Value::Int(262144),
            "join_buffer_size" => Value::Int(262144),
            _ => return None,
        })
    }

    /// A numeric system variable of this session (SET value, else the default), or `dflt`.
    pub(super) fn var_f64(&self, name: &str, dflt: f64) -> f64 {
        let v = self.vars.get(name).cloned().or_else(|| self.default_var(name));
        v.and_then(|v| eval::to_f64(&v)).unwrap_or(dflt)
    }

    /// The allowance of the statement about to run: `max_query_memory`, and its deadline from
    /// `max_execution_time` (milliseconds, SELECT only, as MySQL) or `max_statement_time`
    /// (seconds, every statement, as MariaDB), whichever comes first.
    pub(super) fn budget(&self, select: bool) -> Budget {
        let memory = self.var_f64("max_query_memory", limits::QUERY_MEMORY_DEFAULT as f64);
        let memory = if memory <= 0.0 { u64::MAX } else { memory as u64 };
        let now = std::time::Instant::now();
        let mut deadline = None;
        let ms = self.var_f64("max_execution_time", 0.0);
        if select && ms > 0.0 {
            deadline = Some((now + std::time::Duration::from_millis(ms as u64), DeadlineKind::ExecutionTime));
        }
        let secs = self.var_f64("max_statement_time", 0.0);
        if secs > 0.0 {
            let at = now + std::time::Duration::from_secs_f64(secs.min(1e9));
            if deadline.is_none_or(|(d, _)| at < d) {
                deadline = Some((at, DeadlineKind::StatementTime));
            }
        }
        Budget::new(memory, deadline, self.interrupt.clone())
    }

    /// How long the connection may wait for its next command: `interactive_timeout` for
    /// clients that said they are interactive, else `wait_timeout` (seconds; MySQL's 28800).
    pub fn idle_timeout(&self, interactive: bool) -> std::time::Duration {
        let name = if interactive { "interactive_timeout" } else { "wait_timeout" };
        std::time::Duration::from_secs_f64(self.var_f64(name, 28800.0).clamp(1.0, 31_536_000.0))
    }

    pub(super) async fn set_var(&mut self, name: &str, v: Value) -> Result<(), SqlError> {
        if !VAR_NAMES.contains(&name) {
            return Err(SqlError::new(1193, "HY000", format!("Unknown system variable '{name}'")));
        }
        if name == "autocommit" {
            let on = match &v {
                Value::Bytes(b) => {
                    let t = String::from_utf8_lossy(b).to_ascii_uppercase();
                    match t.as_str() {
                        "ON" | "1" | "TRUE" => true,
                        "OFF" | "0" | "FALSE" => false,
                        _ => {
                            return Err(SqlError::new(
                                1231,
                                "42000",
                                format!("Variable 'autocommit' can't be set to the value of '{t}'"),
                            ));
                        }
                    }
                }
                o => eval::truth(o).unwrap_or(false),
            };
            if on && !self.autocommit {
                // Turning autocommit on commits the open transaction.
                self.commit().await?;
            }
            self.autocommit = on;
            if on {
                self.ts.open = self.ts.open && self.explicit_open();
            }
            return Ok(());
        }
        self.vars.insert(name.to_string(), v);
        Ok(())
    }

    /// The session's `tern_durable_commit`.
    pub(super) fn durable_commit(&self) -> bool {
        match self.vars.get("tern_durable_commit") {
            Some(Value::Bytes(b)) => {
                matches!(String::from_utf8_lossy(b).to_ascii_uppercase().as_str(), "ON" | "1" | "TRUE")
            }
            Some(v) => eval::truth(v).unwrap_or(false),
            None => self.client.durable_commits(),
        }
    }

    /// `SET` of user and system variables (`DEFAULT`: the global value, or the server's own).
    pub(super) async fn set_stmt(&mut self, list: &[(SetTarget, Expr)], params: &[Value]) -> Result<Answer, SqlError> {
        for (target, e) in list {
            // `SET [SESSION] x = DEFAULT`: the global value (what a new session starts
            // from); `SET GLOBAL x = DEFAULT`: the server's own default.
            if matches!(e, tern_sql::ast::Expr::Default)
                && let SetTarget::Sys { global, name } = target
            {
                if !VAR_NAMES.contains(&name.as_str()) {
                    return Err(SqlError::new(1193, "HY000", format!("Unknown system variable '{name}'")));
                }
                let global_value = self.globals.read().unwrap_or_else(|e| e.into_inner()).get(name).cloned();
                if *global {
                    self.check_admin("SUPER or SYSTEM_VARIABLES_ADMIN")?;
                    self.globals.write().unwrap_or_else(|e| e.into_inner()).remove(name);
                } else if name == "autocommit" {
                    self.set_var(name, global_value.unwrap_or(Value::Int(1))).await?;
                } else if let Some(v) = global_value {
                    self.set_var(name, v).await?;
                } else {
                    self.vars.remove(name);
                }
                continue;
            }
            let v = {
                let x = plan_const(e, self)?;
                let env = Env { params, subs: Vec::new(), sess: self, newrow: None };
                run::ev(&x, &[], &[], &env)?
            };
            match target {
                SetTarget::User(n) => {
                    self.user_vars.insert(n.clone(), v);
                }
                SetTarget::Sys { global: true, name } => {
                    // Global values: new sessions start from them (this one keeps its own).
                    self.check_admin("SUPER or SYSTEM_VARIABLES_ADMIN")?;
                    if !VAR_NAMES.contains(&name.as_str()) {
                        return Err(SqlError::new(1193, "HY000", format!("Unknown system variable '{name}'")));
                    }
                    if name == "max_connections" {
                        let n = eval::to_i128(&v).filter(|n| (1..=100_000).contains(n)).ok_or_else(|| {
                            SqlError::new(1231, "42000", "Variable 'max_connections' can't be set to this value")
                        })?;
                        self.conns.limit.set_max(n as usize);
                    }
                    self.globals.write().unwrap_or_else(|e| e.into_inner()).insert(name.clone(), v);
                }
                SetTarget::Sys { name, .. } => self.set_var(name, v).await?,
            }
        }
        Ok(Answer::ok())
    }
}
