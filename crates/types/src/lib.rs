//! Tern's shared vocabulary: column types, values, schema structs, the row and key encodings, the
//! partition hash, a small binary codec, and the error catalogue.
//!
//! This crate does no I/O, reads no clock and owns no threads: every other crate depends on it, so
//! it must stay cheap to build and safe to use from the deterministic simulator.

pub mod base64;
pub mod bin;
pub mod cluster;
pub mod column_type;
pub mod digest;
pub mod error;
pub mod filter;
pub mod hash;
pub mod ndb_comment;
pub mod rng;
pub mod row;
pub mod schema;
pub mod secret;
pub mod time;
pub mod value;

pub use error::{ErrorCode, TernError, TernResult};
pub use row::RowLayout;
pub use schema::{Catalog, Column, ColumnType, Database, Index, Table, TableId};
pub use value::Value;
