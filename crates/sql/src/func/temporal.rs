//! Dates and times (the session time zone is UTC; times are microseconds).

use super::{FnCtx, arg_int, arg_string, arg_text};
use crate::SqlError;
use crate::ast::CastTy;
use crate::eval::{EResult, cast, to_i128};
use tern_types::Value;
use tern_types::time;

/// `DATE_ADD`/`DATE_SUB`/`+ INTERVAL`: adds `n` units to a date or datetime.
pub fn date_add(d: &Value, n: &Value, unit: &str, sign: i64) -> EResult<Value> {
    if d.is_null() || n.is_null() {
        return Ok(Value::Null);
    }
    let (base, was_date) = match d {
        Value::Date(x) => (*x as i64 * time::MICROS_PER_DAY, true),
        Value::DateTime(t) | Value::Timestamp(t) => (*t, false),
        Value::Bytes(b) => {
            let s = String::from_utf8_lossy(b);
            match time::parse_date(s.trim()) {
                Some(x) if !s.contains(':') => (x as i64 * time::MICROS_PER_DAY, true),
                _ => match time::parse_datetime(s.trim()) {
                    Some(t) => (t, false),
                    None => return Ok(Value::Null),
                },
            }
        }
        _ => return Ok(Value::Null),
    };
    let k = to_i128(n).unwrap_or(0) as i64 * sign;
    let micros = |m: i64| -> EResult<Value> {
        let t = base + m;
        if was_date && t % time::MICROS_PER_DAY == 0 {
            Ok(Value::Date(t.div_euclid(time::MICROS_PER_DAY) as i32))
        } else {
            Ok(Value::DateTime(t))
        }
    };
    match unit {
        "MICROSECOND" => micros(k),
        "SECOND" => micros(k * time::MICROS_PER_SEC),
        "MINUTE" => micros(k * 60 * time::MICROS_PER_SEC),
        "HOUR" => micros(k * 3600 * time::MICROS_PER_SEC),
        "DAY" => micros(k * time::MICROS_PER_DAY),
        "WEEK" => micros(k * 7 * time::MICROS_PER_DAY),
        "MONTH" | "QUARTER" | "YEAR" => {
            let months = match unit {
                "MONTH" => k,
                "QUARTER" => 3 * k,
                _ => 12 * k,
            };
            let days = base.div_euclid(time::MICROS_PER_DAY);
            let rest = base.rem_euclid(time::MICROS_PER_DAY);
            let (y, m, dd) = time::civil_from_days(days as i32);
            let total = y as i64 * 12 + (m as i64 - 1) + months;
            let (ny, nm) = (total.div_euclid(12) as i32, (total.rem_euclid(12) + 1) as u32);
            let nd = dd.min(time::days_in_month(ny, nm));
            let t = time::days_from_civil(ny, nm, nd) as i64 * time::MICROS_PER_DAY + rest;
            if was_date { Ok(Value::Date((t / time::MICROS_PER_DAY) as i32)) } else { Ok(Value::DateTime(t)) }
        }
        other => Err(SqlError::new(1064, "42000", format!("Unsupported INTERVAL unit {other}"))),
    }
}

/// NOW and its synonyms: the statement's time, to the fraction digits asked for.
pub(super) fn now(args: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    let fsp = arg_int(args, 0).unwrap_or(0).clamp(0, 6) as u8;
    Ok(Value::DateTime(time::truncate_fsp(ctx.now(), fsp)))
}

pub(super) fn curdate(_: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    Ok(Value::Date(ctx.now().div_euclid(time::MICROS_PER_DAY) as i32))
}

pub(super) fn curtime(_: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    Ok(Value::Time(ctx.now().rem_euclid(time::MICROS_PER_DAY) / time::MICROS_PER_SEC * time::MICROS_PER_SEC))
}

pub(super) fn unix_timestamp(args: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    if args.is_empty() {
        return Ok(Value::Int(ctx.now() / time::MICROS_PER_SEC));
    }
    Ok(match cast(args[0].clone(), CastTy::DateTime)? {
        Value::DateTime(t) => Value::Int(t / time::MICROS_PER_SEC),
        _ => Value::Null,
    })
}

/// FROM_UNIXTIME(s[, format]): NULL before the epoch and after MySQL 8's last second
/// (3001-01-18 23:59:59 UTC).
pub(super) fn from_unixtime(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(at) =
        arg_int(args, 0).filter(|s| (0..=32_536_771_199).contains(s)).and_then(|s| s.checked_mul(time::MICROS_PER_SEC))
    else {
        return Ok(Value::Null);
    };
    match args.get(1) {
        None => Ok(Value::DateTime(at)),
        Some(_) => Ok(arg_text(args, 1).map_or(Value::Null, |f| Value::Bytes(time::date_format(at, &f)))),
    }
}

pub(super) fn date(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    cast(args.first().cloned().unwrap_or(Value::Null), CastTy::Date)
}

pub(super) fn time(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(match args.first() {
        Some(Value::DateTime(t) | Value::Timestamp(t)) => Value::Time(t.rem_euclid(time::MICROS_PER_DAY)),
        Some(Value::Date(_)) => Value::Time(0),
        // Text: what reads as a TIME, else its leading TIME-like part (' 7x' is 00:00:07,
        // as MariaDB reads it with a warning), else NULL.
        Some(Value::Bytes(b)) => {
            let t = String::from_utf8_lossy(b);
            let t = t.trim();
            let lead = t.find(|c: char| !(c.is_ascii_digit() || matches!(c, ':' | '.' | '-' | ' '))).unwrap_or(t.len());
            match time::parse_time(t).or_else(|| time::parse_time(t[..lead].trim_end_matches(['.', ':', '-', ' ']))) {
                Some(v) => Value::Time(v),
                None => Value::Null,
            }
        }
        Some(v) => cast(v.clone(), CastTy::Time)?,
        None => Value::Null,
    })
}

/// The first argument as a DATETIME, None for NULL or what is not a date.
fn datetime_arg(args: &[Value]) -> EResult<Option<i64>> {
    Ok(match cast(args[0].clone(), CastTy::DateTime)? {
        Value::DateTime(t) => Some(t),
        _ => None,
    })
}

pub(super) fn date_format(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let (Some(at), Some(f)) = (datetime_arg(args)?, arg_text(args, 1)) else { return Ok(Value::Null) };
    Ok(Value::Bytes(time::date_format(at, &f)))
}

/// `part` of the first argument's day (days since the epoch) and datetime.
fn of_day(args: &[Value], part: impl Fn(i32, i64) -> Value) -> EResult<Value> {
    let Some(at) = datetime_arg(args)? else { return Ok(Value::Null) };
    Ok(part(at.div_euclid(time::MICROS_PER_DAY) as i32, at))
}

pub(super) fn dayofweek(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    of_day(args, |days, _| Value::Int((time::weekday(days) as i64 + 1) % 7 + 1))
}

pub(super) fn weekday(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    of_day(args, |days, _| Value::Int(time::weekday(days) as i64))
}

pub(super) fn dayofyear(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    of_day(args, |days, _| {
        let (y, _, _) = time::civil_from_days(days);
        Value::Int((days - time::days_from_civil(y, 1, 1)) as i64 + 1)
    })
}

/// WEEK(d, mode): mode's bits are Monday first, weeks 1..53, and (flipped when Sunday is
/// first) week 1 holding the first day of the week.
pub(super) fn week(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let mode = arg_int(args, 1).unwrap_or(0).rem_euclid(8) as u32;
    of_day(args, |days, _| {
        let monday = mode & 1 != 0;
        let first_weekday = (mode & 4 != 0) == monday;
        Value::Int(time::week(days, monday, mode & 2 != 0, first_weekday).0 as i64)
    })
}

pub(super) fn last_day(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    of_day(args, |days, _| {
        let (y, m, _) = time::civil_from_days(days);
        Value::Date(time::days_from_civil(y, m, time::days_in_month(y, m)))
    })
}

pub(super) fn monthname(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    of_day(args, |_, at| Value::Bytes(time::date_format(at, b"%M")))
}

pub(super) fn dayname(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    of_day(args, |_, at| Value::Bytes(time::date_format(at, b"%W")))
}

pub(super) fn timestampadd(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let unit = arg_string(args, 0).unwrap_or_default();
    date_add(&args[2], &args[1], &unit, 1)
}

/// Whole calendar months from a to b (a month is complete when b's day and time reach a's).
fn months_between(a: i64, b: i64) -> i64 {
    let (lo, hi, sign) = if b >= a { (a, b, 1) } else { (b, a, -1) };
    let split = |t: i64| {
        let (y, m, d) = time::civil_from_days(t.div_euclid(time::MICROS_PER_DAY) as i32);
        (y as i64 * 12 + m as i64, d, t.rem_euclid(time::MICROS_PER_DAY))
    };
    let ((ml, dl, rl), (mh, dh, rh)) = (split(lo), split(hi));
    sign * (mh - ml - ((dh, rh) < (dl, rl)) as i64)
}

/// TIMESTAMPDIFF(unit, a, b): whole units from a to b, truncated toward zero.
pub(super) fn timestampdiff(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let unit = arg_string(args, 0).unwrap_or_default();
    let (Value::DateTime(a), Value::DateTime(b)) =
        (cast(args[1].clone(), CastTy::DateTime)?, cast(args[2].clone(), CastTy::DateTime)?)
    else {
        return Ok(Value::Null);
    };
    // (Saturating: FROM_UNIXTIME reaches beyond the calendar's years.)
    let d = b.saturating_sub(a);
    Ok(Value::Int(match unit.as_str() {
        "MICROSECOND" => d,
        "SECOND" => d / time::MICROS_PER_SEC,
        "MINUTE" => d / (60 * time::MICROS_PER_SEC),
        "HOUR" => d / (3600 * time::MICROS_PER_SEC),
        "DAY" => d / time::MICROS_PER_DAY,
        "WEEK" => d / (7 * time::MICROS_PER_DAY),
        "MONTH" => months_between(a, b),
        "QUARTER" => months_between(a, b) / 3,
        "YEAR" => months_between(a, b) / 12,
        _ => return Ok(Value::Null),
    }))
}

pub(super) fn str_to_date(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let (Some(v), Some(f)) = (arg_text(args, 0), arg_text(args, 1)) else { return Ok(Value::Null) };
    Ok(match time::str_to_date(&v, &f) {
        Some(time::Parsed::Date(d)) => Value::Date(d),
        Some(time::Parsed::DateTime(t)) => Value::DateTime(t),
        Some(time::Parsed::Time(t)) => Value::Time(t),
        None => Value::Null,
    })
}

/// The first argument's (year, month, day, seconds of its day), None for NULL or a non-date.
fn civil(args: &[Value]) -> EResult<Option<(i32, u32, u32, i64)>> {
    let Some(t) = datetime_arg(args)? else { return Ok(None) };
    let (y, m, d) = time::civil_from_days(t.div_euclid(time::MICROS_PER_DAY) as i32);
    Ok(Some((y, m, d, t.rem_euclid(time::MICROS_PER_DAY) / time::MICROS_PER_SEC)))
}

fn civil_part(args: &[Value], part: impl Fn((i32, u32, u32, i64)) -> i64) -> EResult<Value> {
    Ok(civil(args)?.map_or(Value::Null, |c| Value::Int(part(c))))
}

pub(super) fn year(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    civil_part(args, |(y, ..)| y as i64)
}

pub(super) fn month(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    civil_part(args, |(_, m, ..)| m as i64)
}

/// DAY / DAYOFMONTH.
pub(super) fn day(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    civil_part(args, |(_, _, d, _)| d as i64)
}

/// Seconds of a TIME argument (or of text that reads as one): HOUR, MINUTE and SECOND of a TIME
/// count its parts, hours past 23 included. None when the argument is no TIME.
fn time_secs(args: &[Value]) -> Option<i64> {
    let t = match &args[0] {
        Value::Time(t) => *t,
        Value::Bytes(b) => std::str::from_utf8(b).ok().and_then(time::parse_time)?,
        _ => return None,
    };
    Some(t.unsigned_abs() as i64 / time::MICROS_PER_SEC)
}

fn clock_part(args: &[Value], part: impl Fn(i64) -> i64) -> EResult<Value> {
    if let Some(secs) = time_secs(args) {
        return Ok(Value::Int(part(secs)));
    }
    civil_part(args, |(.., secs)| part(secs))
}

pub(super) fn hour(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    clock_part(args, |s| s / 3600)
}

pub(super) fn minute(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    clock_part(args, |s| s / 60 % 60)
}

pub(super) fn second(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    clock_part(args, |s| s % 60)
}

pub(super) fn datediff(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let a = cast(args[0].clone(), CastTy::Date)?;
    let b = cast(args[1].clone(), CastTy::Date)?;
    Ok(match (a, b) {
        (Value::Date(x), Value::Date(y)) => Value::Int((x - y) as i64),
        _ => Value::Null,
    })
}

/// EXTRACT(unit FROM x), as the parser makes it: EXTRACT(unit, x) calls the unit's function.
pub(super) fn extract(args: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    let unit = arg_string(args, 0).unwrap_or_default();
    super::call_by_name(&unit, &args[1..], ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_months_and_clock_parts() {
        let at = |y, m, d| time::days_from_civil(y, m, d) as i64 * time::MICROS_PER_DAY;
        assert_eq!(months_between(at(2024, 1, 31), at(2024, 2, 29)), 0);
        assert_eq!(months_between(at(2024, 1, 31), at(2024, 3, 31)), 2);
        assert_eq!(months_between(at(2024, 3, 31), at(2024, 1, 31)), -2);
        assert_eq!(time_secs(&[Value::str("25:01:02")]), Some(90062));
        assert_eq!(time_secs(&[Value::str("noon")]), None);
        assert_eq!(time_secs(&[Value::Int(5)]), None);
        assert!(super::super::any_null(&[Value::Null]));
    }
}
