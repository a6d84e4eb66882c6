//! The session and the server.

use super::{FnCtx, bytes};
use crate::eval::{EResult, to_i128};
use tern_types::Value;

/// DATABASE / SCHEMA: the current database, NULL without one.
pub(super) fn database(_: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    Ok(ctx.database().map(|d| Value::Bytes(d.into_bytes())).unwrap_or(Value::Null))
}

pub(super) fn version(_: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    bytes(crate::SERVER_VERSION.as_bytes().to_vec())
}

/// USER and its synonyms.
pub(super) fn user(_: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    bytes(ctx.user().into_bytes())
}

pub(super) fn connection_id(_: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    Ok(Value::UInt(ctx.connection_id() as u64))
}

/// LAST_INSERT_ID(): the session's; LAST_INSERT_ID(x) sets it to x and returns x.
pub(super) fn last_insert_id(args: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    if let Some(v) = args.first() {
        ctx.set_last_insert_id(to_i128(v).unwrap_or(0) as u64);
        return Ok(v.clone());
    }
    Ok(Value::UInt(ctx.last_insert_id()))
}

pub(super) fn row_count(_: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    Ok(Value::Int(ctx.row_count()))
}

pub(super) fn found_rows(_: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    Ok(Value::Int(ctx.found_rows() as i64))
}

/// SLEEP returns at once: a statement may not hold its worker.
pub(super) fn sleep(_: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(Value::Int(0))
}

pub(super) fn charset(_: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    bytes(b"utf8mb4".to_vec())
}

pub(super) fn collation(_: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    bytes(b"utf8mb4_bin".to_vec())
}
