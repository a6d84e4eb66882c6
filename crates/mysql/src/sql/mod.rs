//! SQL: tokenizer, parser, planner and executor of the MySQL front end.
//!
//! `lex` → `parse` (statements as `ast`) → `plan` (names resolved, access paths chosen, plans
//! cached by `session`) → `run` / `write` (execution through the native client) with `eval`
//! supplying MySQL's value semantics and `ddl` the table definitions.

pub mod ast;
pub mod ddl;
pub mod eval;
pub mod infoschema;
pub mod lex;
pub mod limits;
pub mod load;
pub mod normalize;
pub mod parse;
pub mod plan;
pub mod run;
pub mod session;
pub mod users;
pub mod write;
