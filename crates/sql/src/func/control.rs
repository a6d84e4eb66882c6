//! NULL handling and choices among the arguments.

use super::FnCtx;
use crate::eval::{EResult, compare, truth};
use std::cmp::Ordering;
use tern_types::Value;

pub(super) fn coalesce(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(args.iter().find(|v| !v.is_null()).cloned().unwrap_or(Value::Null))
}

/// IFNULL / NVL.
pub(super) fn ifnull(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(if args[0].is_null() { args[1].clone() } else { args[0].clone() })
}

pub(super) fn nullif(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(if compare(&args[0], &args[1]) == Some(Ordering::Equal) { Value::Null } else { args[0].clone() })
}

pub(super) fn isnull(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(Value::Int(args[0].is_null() as i64))
}

/// The argument `wanted` is the ordering of (over the best so far); NULL when any is NULL.
fn extreme(args: &[Value], wanted: Ordering) -> EResult<Value> {
    if super::any_null(args) {
        return Ok(Value::Null);
    }
    let mut best = &args[0];
    for v in &args[1..] {
        if compare(v, best).unwrap_or(Ordering::Equal) == wanted {
            best = v;
        }
    }
    Ok(best.clone())
}

pub(super) fn greatest(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    extreme(args, Ordering::Greater)
}

pub(super) fn least(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    extreme(args, Ordering::Less)
}

pub(super) fn if_(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(if truth(&args[0]) == Some(true) { args[1].clone() } else { args[2].clone() })
}
