//! The MySQL front end (issue 5, in progress). So far: the wire protocol (`proto`) — packets,
//! length-encoded values, the v10 handshake and the client's response, `mysql_native_password`,
//! OK/ERR/EOF packets, column definitions and text result rows — written here rather than taken
//! from opensrv-mysql, whose mysql_common dependency builds C (zlib, zstd) and runs bindgen
//! (dependencies.md: "plan to own it later").

/// What `@@version_comment` says.
pub const VERSION_COMMENT: &str = "Tern";

pub mod conns;
pub mod metrics;
pub mod proto;
pub mod rsa_auth;
pub mod server;
pub mod session;
pub mod stream;
pub mod users;

/// The SQL engine (the `tern-sql` crate), as this crate used to hold it.
pub use tern_sql as sql;

pub use server::{MysqlOptions, run, run_on};
