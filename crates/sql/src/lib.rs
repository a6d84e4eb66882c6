//! Tern's SQL engine, shared by the MySQL front end (`tern-mysql`: wire protocol, sessions,
//! accounts) and REST's RonSQL endpoint. The analytic query engine (DataFusion) is the crate
//! `tern-engine`, which only the MySQL front end uses: REST reaches no more than RonSQL needs.
//!
//! `lex` → `parse` (statements as `ast`) → `plan` (names resolved, access paths chosen; plans are
//! cached by the caller's session) → `run` / `write` (execution through the native client) with
//! `eval` supplying MySQL's value semantics, `ddl` the table definitions and `meta` the result
//! columns in MySQL's type system.

pub mod ast;
pub mod column;
pub mod ddl;
pub mod eval;
pub mod func;
pub mod infoschema;
pub mod lex;
pub mod limits;
pub mod load;
pub mod meta;
pub mod ndbinfo;
pub mod normalize;
pub mod parse;
pub mod plan;
pub mod privs;
pub mod ronsql;
pub mod run;
pub mod write;

use tern_types::error::ErrorClass;
use tern_types::{ErrorCode, TernError};

/// What the statement entry points that the front ends call return: a boxed future. A future is
/// compiled where it is polled, so an `async fn` here would be compiled again in every crate and
/// test binary that awaits it (the MySQL and REST front ends, the `tern` binary: the whole SQL
/// path and the query engine's planner several times over). Returned boxed from a function
/// that is not generic, it is compiled once, here (one allocation per statement).
pub type Fut<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// What the server says it is (clients parse the leading MySQL version; `VERSION()`).
pub const SERVER_VERSION: &str = "8.0.35-tern";

/// An error for the client: errno, SQLSTATE, message, and the Tern error it came from (if it
/// did). Code that decides what an error means (retry, transaction gone, duplicate) branches on
/// `code` / `class()`, never on errno: one errno stands for several causes (1297 is overload,
/// node failure, a schema change and shutdown alike).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlError {
    pub errno: u16,
    pub sqlstate: &'static str,
    pub message: String,
    pub code: Option<ErrorCode>,
}

impl SqlError {
    pub fn new(errno: u16, sqlstate: &'static str, message: impl Into<String>) -> SqlError {
        SqlError { errno, sqlstate, message: message.into(), code: None }
    }

    /// The same error, marked as caused by `code`.
    pub fn with_code(mut self, code: ErrorCode) -> SqlError {
        self.code = Some(code);
        self
    }

    /// Whether the data node's error `code` caused it.
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code == Some(code)
    }

    pub fn class(&self) -> Option<ErrorClass> {
        self.code.map(ErrorCode::class)
    }
}

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.errno, self.sqlstate, self.message)
    }
}

impl std::error::Error for SqlError {}

impl From<TernError> for SqlError {
    fn from(e: TernError) -> SqlError {
        SqlError { errno: e.code.mysql_errno(), sqlstate: e.code.sqlstate(), message: e.message, code: Some(e.code) }
    }
}
