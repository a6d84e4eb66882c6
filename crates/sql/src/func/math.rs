//! Numbers: exact for integers and DECIMALs, DOUBLE otherwise (MySQL's rules).

use super::{FnCtx, any_null, arg_int};
use crate::ast::BinOp;
use crate::eval::{EResult, arith, as_dec, int_result, now_micros, out_of_range, to_f64};
use tern_types::Value;
use tern_types::value::rescale;

pub(super) fn abs(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(match &args[0] {
        Value::Null => Value::Null,
        Value::Int(i) => Value::Int(i.checked_abs().ok_or_else(|| out_of_range("BIGINT"))?),
        Value::UInt(u) => Value::UInt(*u),
        Value::Decimal { v, scale } => Value::Decimal { v: v.abs(), scale: *scale },
        o => Value::Double(to_f64(o).unwrap_or(0.0).abs()),
    })
}

pub(super) fn sign(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(args
        .first()
        .and_then(to_f64)
        .map(|f| Value::Int(f.partial_cmp(&0.0).map_or(0, |o| o as i64)))
        .unwrap_or(Value::Null))
}

pub(super) fn round_fn(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    round(&args[0], arg_int(args, 1).unwrap_or(0), false)
}

pub(super) fn truncate(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    round(&args[0], arg_int(args, 1).unwrap_or(0), true)
}

fn floor_or_ceil(v: &Value, floor: bool) -> EResult<Value> {
    Ok(match v {
        Value::Null => Value::Null,
        v @ (Value::Int(_) | Value::UInt(_)) => v.clone(),
        Value::Decimal { v, scale } => {
            let p = 10i128.pow(*scale as u32);
            let q = v.div_euclid(p);
            let q = if floor || v.rem_euclid(p) == 0 { q } else { q + 1 };
            int_result(q)?
        }
        o => {
            let f = to_f64(o).unwrap_or(0.0);
            Value::Double(if floor { f.floor() } else { f.ceil() })
        }
    })
}

pub(super) fn floor(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    floor_or_ceil(&args[0], true)
}

/// CEIL / CEILING.
pub(super) fn ceil(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    floor_or_ceil(&args[0], false)
}

pub(super) fn mod_(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    arith(BinOp::Mod, &args[0], &args[1])
}

/// POW / POWER.
pub(super) fn pow(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    Ok(Value::Double(to_f64(&args[0]).unwrap_or(0.0).powf(to_f64(&args[1]).unwrap_or(0.0))))
}

pub(super) fn sqrt(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(args
        .first()
        .and_then(to_f64)
        .map(|f| if f < 0.0 { Value::Null } else { Value::Double(f.sqrt()) })
        .unwrap_or(Value::Null))
}

pub(super) fn rand(_: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(Value::Double((now_micros() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) as f64 / u64::MAX as f64))
}

/// ROUND (half away from zero) or TRUNCATE (toward zero) of `v` to `d` fraction digits (`d` < 0
/// rounds left of the point): exact for integers and DECIMALs.
pub(crate) fn round(v: &Value, d: i64, truncate: bool) -> EResult<Value> {
    let d = d.clamp(-38, 30);
    match v {
        Value::Int(_) | Value::UInt(_) if d >= 0 => Ok(v.clone()),
        Value::Decimal { .. } | Value::Int(_) | Value::UInt(_) => {
            let (x, s) = as_dec(v).unwrap_or((0, 0));
            let target = d.max(0) as u8;
            if d >= s as i64 {
                return Ok(Value::Decimal {
                    v: rescale(x, s, target).ok_or_else(|| out_of_range("DECIMAL"))?,
                    scale: target,
                });
            }
            let drop = (s as i64 - d) as u32;
            let p = 10i128.checked_pow(drop).ok_or_else(|| out_of_range("DECIMAL"))?;
            let q = x / p;
            let r = x % p;
            let q = if !truncate && r.abs() * 2 >= p { q + x.signum() } else { q };
            if d < 0 {
                let back = q * 10i128.pow((-d) as u32);
                return if matches!(v, Value::Decimal { .. }) {
                    Ok(Value::Decimal { v: back, scale: 0 })
                } else {
                    int_result(back)
                };
            }
            Ok(Value::Decimal { v: q, scale: target })
        }
        o => {
            let f = to_f64(o).unwrap_or(0.0);
            let p = 10f64.powi(d as i32);
            let x = f * p;
            let r = if truncate { x.trunc() } else { x.round() };
            Ok(Value::Double(r / p))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding() {
        assert_eq!(round(&Value::Decimal { v: 125, scale: 2 }, 1, false).unwrap(), Value::Decimal { v: 13, scale: 1 });
        assert_eq!(
            round(&Value::Decimal { v: -125, scale: 2 }, 1, false).unwrap(),
            Value::Decimal { v: -13, scale: 1 }
        );
        assert_eq!(round(&Value::Int(1234), -2, false).unwrap(), Value::Int(1200));
        assert_eq!(round(&Value::Decimal { v: 129, scale: 2 }, 1, true).unwrap(), Value::Decimal { v: 12, scale: 1 });
        assert_eq!(floor_or_ceil(&Value::Decimal { v: -15, scale: 1 }, true).unwrap(), Value::Int(-2));
        assert_eq!(floor_or_ceil(&Value::Decimal { v: 11, scale: 1 }, false).unwrap(), Value::Int(2));
    }
}
