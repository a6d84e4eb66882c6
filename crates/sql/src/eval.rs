//! Value semantics of SQL expressions, as MySQL defines them: three-valued logic, numeric
//! promotion (integers → decimals → doubles; strings compared with numbers become numbers),
//! integer overflow errors, decimal division with four more fraction digits, and the scalar
//! functions clients and fixtures use.

use super::ast::{BinOp, CastTy};
use crate::SqlError;
use std::cmp::Ordering;
use tern_types::time;
use tern_types::value::{format_decimal, parse_decimal, rescale};
use tern_types::{ColumnType, Value};

pub type EResult<T> = Result<T, SqlError>;

/// MySQL's relaxed date and time syntax: any punctuation character may separate the parts of a
/// date or a time ('2012^12^31 11*30*45', '1111:11:11'); the result uses '-' and ':' (and keeps
/// a fraction after '.'). None when `b` is not of that shape (the caller then uses it as is),
/// or already is `YYYY-MM-DD` (what a load of dates mostly reads: no allocation for it).
pub fn relaxed_datetime(b: &[u8]) -> Option<Vec<u8>> {
    let digit = |i: usize| b[i].is_ascii_digit();
    if b.len() == 10 && b[4] == b'-' && b[7] == b'-' && [0, 1, 2, 3, 5, 6, 8, 9].into_iter().all(digit) {
        return None;
    }
    let s = std::str::from_utf8(b).ok()?.trim();
    let (date, time) = match s.find([' ', 'T']) {
        Some(i) => (&s[..i], Some(s[i + 1..].trim_start())),
        None => (s, None),
    };
    let parts = |t: &str| -> Option<Vec<String>> {
        let v: Vec<String> =
            t.split(|c: char| c.is_ascii_punctuation()).filter(|p| !p.is_empty()).map(str::to_string).collect();
        (v.iter().all(|p| p.bytes().all(|c| c.is_ascii_digit()))).then_some(v)
    };
    let d = parts(date)?;
    if d.len() != 3 || !date.contains(|c: char| c.is_ascii_punctuation()) {
        return None;
    }
    let mut out = format!("{}-{}-{}", d[0], d[1], d[2]);
    if let Some(t) = time {
        let (hms, frac) = match t.rfind('.') {
            Some(i) if t[..i].matches(|c: char| c.is_ascii_punctuation()).count() >= 2 => (&t[..i], Some(&t[i + 1..])),
            _ => (t, None),
        };
        let p = parts(hms)?;
        if p.is_empty() || p.len() > 3 {
            return None;
        }
        out.push(' ');
        out.push_str(&p.join(":"));
        if let Some(f) = frac {
            out.push('.');
            out.push_str(f);
        }
    }
    Some(out.into_bytes())
}

/// Longest string a function may return (MySQL's default max_allowed_packet).
pub const VALUE_BYTES_MAX: usize = 64 << 20;

/// Error 1301 when function `name` would return `n` bytes, more than `VALUE_BYTES_MAX`.
fn fits(name: &str, n: usize) -> Result<(), SqlError> {
    if n > VALUE_BYTES_MAX {
        return Err(SqlError::new(
            1301,
            "HY000",
            format!(
                "Result of {}() was larger than max_allowed_packet ({VALUE_BYTES_MAX}) - truncated",
                name.to_ascii_lowercase()
            ),
        ));
    }
    Ok(())
}

pub fn out_of_range(what: &str) -> SqlError {
    SqlError::new(1690, "22003", format!("{what} value is out of range"))
}

/// A string's numeric prefix as MySQL reads it ('12abc' → 12, 'abc' → 0).
pub fn str_to_f64(b: &[u8]) -> f64 {
    let s = String::from_utf8_lossy(b);
    let s = s.trim_start();
    let mut end = 0;
    let bytes = s.as_bytes();
    let mut seen_digit = false;
    let mut seen_dot = false;
    let mut seen_e = false;
    while end < bytes.len() {
        let c = bytes[end];
        if c.is_ascii_digit() {
            seen_digit = true;
        } else if (c == b'-' || c == b'+') && (end == 0 || matches!(bytes[end - 1], b'e' | b'E')) {
        } else if c == b'.' && !seen_dot && !seen_e {
            seen_dot = true;
        } else if (c == b'e' || c == b'E') && seen_digit && !seen_e {
            seen_e = true;
        } else {
            break;
        }
        end += 1;
    }
    let mut t = &s[..end];
    while !t.is_empty() && t.parse::<f64>().is_err() {
        t = &t[..t.len() - 1];
    }
    t.parse().unwrap_or(0.0)
}

/// A string's integer prefix (leading spaces, a sign, digits; '12.9abc' → 12, 'abc' → 0),
/// within i64::MIN ..= u64::MAX.
pub fn str_int_prefix(b: &[u8]) -> i128 {
    let mut i = b.iter().take_while(|c| c.is_ascii_whitespace()).count();
    let negative = match b.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let mut n: i128 = 0;
    for c in b[i..].iter().take_while(|c| c.is_ascii_digit()) {
        n = (n * 10 + (c - b'0') as i128).min(u64::MAX as i128 + 1);
    }
    if negative { (-n).max(i64::MIN as i128) } else { n.min(u64::MAX as i128) }
}

/// An exact reading of a string as a number when it is one (integer or fixed-point text).
fn str_exact(b: &[u8]) -> Option<Value> {
    let s = std::str::from_utf8(b).ok()?.trim();
    if s.is_empty() || s.contains(['e', 'E']) {
        return None;
    }
    let v = super::parse::number(s.strip_prefix('+').unwrap_or(s))?;
    match v {
        Value::Double(_) => None,
        v => Some(v),
    }
}

pub fn to_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Null => None,
        Value::Bytes(b) => Some(str_to_f64(b)),
        Value::Date(d) => {
            let (y, m, dd) = time::civil_from_days(*d);
            Some((y as i64 * 10000 + m as i64 * 100 + dd as i64) as f64)
        }
        Value::DateTime(t) | Value::Timestamp(t) => Some(datetime_number(*t)),
        Value::Time(t) => {
            let s = t / time::MICROS_PER_SEC;
            Some(((s / 3600) * 10000 + (s / 60 % 60) * 100 + s % 60) as f64)
        }
        other => other.as_f64(),
    }
}

fn datetime_number(t: i64) -> f64 {
    let days = t.div_euclid(time::MICROS_PER_DAY);
    let secs = t.rem_euclid(time::MICROS_PER_DAY) / time::MICROS_PER_SEC;
    let (y, m, d) = time::civil_from_days(days as i32);
    (y as i64 * 10_000_000_000
        + m as i64 * 100_000_000
        + d as i64 * 1_000_000
        + (secs / 3600) * 10000
        + (secs / 60 % 60) * 100
        + secs % 60) as f64
}

/// Integer value (rounding decimals and doubles half away from zero, as MySQL's CAST does).
pub fn to_i128(v: &Value) -> Option<i128> {
    match v {
        Value::Null => None,
        Value::Int(i) => Some(*i as i128),
        Value::UInt(u) => Some(*u as i128),
        Value::Decimal { v, scale } => {
            let p = 10i128.pow(*scale as u32);
            let q = v / p;
            let r = (v % p).abs();
            Some(if r * 2 >= p { q + v.signum() } else { q })
        }
        Value::Bytes(b) => match str_exact(b) {
            Some(x) => to_i128(&x),
            None => Some(str_to_f64(b).round() as i128),
        },
        other => {
            if let Some(i) = other.as_i128() {
                return Some(i);
            }
            to_f64(other).map(|f| f.round() as i128)
        }
    }
}

/// Truth value: None for NULL.
pub fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Null => None,
        Value::Int(i) => Some(*i != 0),
        Value::UInt(u) => Some(*u != 0),
        Value::Decimal { v, .. } => Some(*v != 0),
        other => to_f64(other).map(|f| f != 0.0),
    }
}

pub fn bool_value(b: Option<bool>) -> Value {
    match b {
        None => Value::Null,
        Some(b) => Value::Int(b as i64),
    }
}

/// Text form of a value for string functions and the text protocol (None for NULL).
pub fn text(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::Null => None,
        Value::Bytes(b) => Some(b.clone()),
        Value::Double(d) => Some(double_text(*d).into_bytes()),
        Value::Float(f) => Some(tern_types::value::format_g6(*f as f64).into_bytes()),
        Value::DateTime(t) | Value::Timestamp(t) => {
            let fsp = if t % time::MICROS_PER_SEC != 0 { 6 } else { 0 };
            Some(time::format_datetime(*t, fsp).into_bytes())
        }
        Value::Time(t) => {
            let fsp = if t % time::MICROS_PER_SEC != 0 { 6 } else { 0 };
            Some(time::format_time(*t, fsp).into_bytes())
        }
        other => other.to_text(ColumnType::Int { unsigned: false }).map(String::into_bytes),
    }
}

/// Doubles as MySQL prints computed doubles (shortest round-trip form, `1e20` style exponents).
pub fn double_text(d: f64) -> String {
    if d.is_finite() && d.fract() == 0.0 && d.abs() < 1e15 {
        return format!("{}", d as i64);
    }
    let s = format!("{d}");
    if d.abs() >= 1e15 || (d != 0.0 && d.abs() < 1e-4) {
        let e = format!("{d:e}");
        // Rust prints 1e20 / 1.5e-7; MySQL prints 1e20 / 1.5e-7 too.
        return e;
    }
    s
}

#[derive(Clone, Copy, PartialEq)]
enum Num {
    Int,
    Dec,
    Dbl,
}

fn num_kind(v: &Value) -> Num {
    match v {
        Value::Int(_) | Value::UInt(_) | Value::Year(_) | Value::Bit(_) => Num::Int,
        Value::Decimal { .. } => Num::Dec,
        Value::Bytes(b) => match str_exact(b) {
            Some(Value::Decimal { .. }) | None => Num::Dbl,
            Some(_) => Num::Dbl,
        },
        Value::Date(_) | Value::DateTime(_) | Value::Timestamp(_) | Value::Time(_) => Num::Int,
        _ => Num::Dbl,
    }
}

fn as_dec(v: &Value) -> Option<(i128, u8)> {
    match v {
        Value::Decimal { v, scale } => Some((*v, *scale)),
        other => Some((to_i128(other)?, 0)),
    }
}

fn int_result(v: i128) -> EResult<Value> {
    if let Ok(i) = i64::try_from(v) {
        Ok(Value::Int(i))
    } else if let Ok(u) = u64::try_from(v) {
        Ok(Value::UInt(u))
    } else {
        Err(out_of_range("BIGINT"))
    }
}

fn dec_result(v: i128, scale: u8) -> EResult<Value> {
    if v.unsigned_abs() >= 10u128.pow(38) { Err(out_of_range("DECIMAL")) } else { Ok(Value::Decimal { v, scale }) }
}

fn temporal_int(v: &Value) -> Value {
    match v {
        Value::Date(_) | Value::DateTime(_) | Value::Timestamp(_) | Value::Time(_) => {
            Value::Int(to_f64(v).unwrap_or(0.0) as i64)
        }
        o => o.clone(),
    }
}

/// Arithmetic and bit operators.
pub fn arith(op: BinOp, a: &Value, b: &Value) -> EResult<Value> {
    if a.is_null() || b.is_null() {
        return Ok(Value::Null);
    }
    let (a, b) = (temporal_int(a), temporal_int(b));
    let kind = match (num_kind(&a), num_kind(&b)) {
        (Num::Dbl, _) | (_, Num::Dbl) => Num::Dbl,
        (Num::Dec, _) | (_, Num::Dec) => Num::Dec,
        _ => Num::Int,
    };
    match op {
        BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr => {
            let x = to_i128(&a).unwrap_or(0) as u64;
            let y = to_i128(&b).unwrap_or(0) as u64;
            return Ok(Value::UInt(match op {
                BinOp::BitAnd => x & y,
                BinOp::BitOr => x | y,
                BinOp::BitXor => x ^ y,
                BinOp::Shl => {
                    if y >= 64 {
                        0
                    } else {
                        x << y
                    }
                }
                _ => {
                    if y >= 64 {
                        0
                    } else {
                        x >> y
                    }
                }
            }));
        }
        BinOp::IntDiv => {
            if kind == Num::Int {
                let (x, y) = (to_i128(&a).unwrap_or(0), to_i128(&b).unwrap_or(0));
                return if y == 0 { Ok(Value::Null) } else { int_result(x / y) };
            }
            let (x, y) = (to_f64(&a).unwrap_or(0.0), to_f64(&b).unwrap_or(0.0));
            return if y == 0.0 { Ok(Value::Null) } else { int_result((x / y).trunc() as i128) };
        }
        _ => {}
    }
    match kind {
        Num::Int => {
            let (x, y) = (to_i128(&a).unwrap_or(0), to_i128(&b).unwrap_or(0));
            let unsigned = matches!(a, Value::UInt(_)) || matches!(b, Value::UInt(_));
            let r = match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                BinOp::Mul => x.checked_mul(y).ok_or_else(|| out_of_range("BIGINT"))?,
                BinOp::Mod => {
                    if y == 0 {
                        return Ok(Value::Null);
                    }
                    x % y
                }
                BinOp::Div => {
                    if y == 0 {
                        return Ok(Value::Null);
                    }
                    return div_dec(x, 0, y, 0);
                }
                _ => unreachable!("arith on {op:?}"),
            };
            if unsigned {
                if r < 0 || r > u64::MAX as i128 {
                    return Err(out_of_range("BIGINT UNSIGNED"));
                }
                return Ok(if r <= i64::MAX as i128 { Value::Int(r as i64) } else { Value::UInt(r as u64) });
            }
            // Signed arithmetic stays in BIGINT.
            match i64::try_from(r) {
                Ok(i) => Ok(Value::Int(i)),
                Err(_) => Err(out_of_range("BIGINT")),
            }
        }
        Num::Dec => {
            let (Some((x, sx)), Some((y, sy))) = (as_dec(&a), as_dec(&b)) else { return Ok(Value::Null) };
            let s = sx.max(sy);
            let (xs, ys) = (
                rescale(x, sx, s).ok_or_else(|| out_of_range("DECIMAL"))?,
                rescale(y, sy, s).ok_or_else(|| out_of_range("DECIMAL"))?,
            );
            match op {
                BinOp::Add => dec_result(xs + ys, s),
                BinOp::Sub => dec_result(xs - ys, s),
                BinOp::Mul => dec_result(x.checked_mul(y).ok_or_else(|| out_of_range("DECIMAL"))?, sx + sy),
                BinOp::Mod => {
                    if ys == 0 {
                        Ok(Value::Null)
                    } else {
                        dec_result(xs % ys, s)
                    }
                }
                BinOp::Div => {
                    if y == 0 {
                        Ok(Value::Null)
                    } else {
                        div_dec(x, sx, y, sy)
                    }
                }
                _ => unreachable!(),
            }
        }
        Num::Dbl => {
            let (x, y) = (to_f64(&a).unwrap_or(0.0), to_f64(&b).unwrap_or(0.0));
            let r = match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                BinOp::Mul => x * y,
                BinOp::Mod => {
                    if y == 0.0 {
                        return Ok(Value::Null);
                    }
                    x % y
                }
                BinOp::Div => {
                    if y == 0.0 {
                        return Ok(Value::Null);
                    }
                    x / y
                }
                _ => unreachable!(),
            };
            if !r.is_finite() {
                return Err(out_of_range("DOUBLE"));
            }
            Ok(Value::Double(r))
        }
    }
}

/// Decimal division: the dividend's scale plus 4 fraction digits (div_precision_increment),
/// rounded half away from zero.
fn div_dec(x: i128, sx: u8, y: i128, sy: u8) -> EResult<Value> {
    let scale = (sx + 4).min(30);
    // x/10^sx / (y/10^sy) = x * 10^(sy + scale - sx) / y / 10^scale
    let shift = (sy as u32 + scale as u32).saturating_sub(sx as u32);
    let num = x.checked_mul(10i128.pow(shift + 1)).ok_or_else(|| out_of_range("DECIMAL"))?;
    let q = num / y;
    let r = if q >= 0 { (q + 5) / 10 } else { (q - 5) / 10 };
    dec_result(r, scale)
}

/// SQL comparison with MySQL's conversions: strings against numbers compare as numbers,
/// strings against temporal values are read as temporal values.
pub fn compare(a: &Value, b: &Value) -> Option<Ordering> {
    use Value::*;
    match (a, b) {
        (Null, _) | (_, Null) => None,
        (Bytes(x), Bytes(y)) => Some(x.cmp(y)),
        (Bytes(s), t @ (Date(_) | DateTime(_) | Timestamp(_) | Time(_))) => {
            let sv = temporal_from_text(s, t)?;
            sv.cmp_sql(t)
        }
        (t @ (Date(_) | DateTime(_) | Timestamp(_) | Time(_)), Bytes(s)) => {
            let sv = temporal_from_text(s, t)?;
            t.cmp_sql(&sv)
        }
        (Bytes(s), n) | (n, Bytes(s)) => {
            let flip = matches!(a, Bytes(_));
            let sv = match str_exact(s) {
                Some(v) => v,
                None => Double(str_to_f64(s)),
            };
            let o = if matches!(sv, Double(_)) || matches!(n, Double(_) | Float(_)) {
                to_f64(&sv)?.partial_cmp(&to_f64(n)?)
            } else {
                sv.cmp_sql(n)
            }?;
            Some(if flip { o } else { o.reverse() })
        }
        (Timestamp(x), DateTime(y)) | (DateTime(x), Timestamp(y)) => Some(x.cmp(y)),
        (Double(_) | Float(_), _) | (_, Double(_) | Float(_)) => to_f64(a)?.partial_cmp(&to_f64(b)?),
        _ => a.cmp_sql(b).or_else(|| to_f64(a)?.partial_cmp(&to_f64(b)?)),
    }
}

fn temporal_from_text(s: &[u8], like: &Value) -> Option<Value> {
    let t = std::str::from_utf8(s).ok()?.trim();
    match like {
        Value::Date(_) => time::parse_date(t).map(Value::Date).or_else(|| time::parse_datetime(t).map(Value::DateTime)),
        Value::Time(_) => time::parse_time(t).map(Value::Time),
        _ => time::parse_datetime(t)
            .or_else(|| time::parse_date(t).map(|d| d as i64 * time::MICROS_PER_DAY))
            .map(|x| if matches!(like, Value::Timestamp(_)) { Value::Timestamp(x) } else { Value::DateTime(x) }),
    }
}

/// Equality for grouping and DISTINCT: NULLs are equal to each other.
pub fn group_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::Null, _) | (_, Value::Null) => false,
        _ => compare(a, b) == Some(Ordering::Equal),
    }
}

/// Ordering for ORDER BY: NULLs first.
pub fn sort_cmp(a: &Value, b: &Value) -> Ordering {
    match (a.is_null(), b.is_null()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        _ => compare(a, b).unwrap_or(Ordering::Equal),
    }
}

pub fn compare_op(op: BinOp, a: &Value, b: &Value) -> Value {
    if op == BinOp::NullSafeEq {
        return Value::Int(match (a.is_null(), b.is_null()) {
            (true, true) => 1,
            (true, false) | (false, true) => 0,
            _ => (compare(a, b) == Some(Ordering::Equal)) as i64,
        });
    }
    let Some(o) = compare(a, b) else { return Value::Null };
    Value::Int(match op {
        BinOp::Eq => o == Ordering::Equal,
        BinOp::Ne => o != Ordering::Equal,
        BinOp::Lt => o == Ordering::Less,
        BinOp::Le => o != Ordering::Greater,
        BinOp::Gt => o == Ordering::Greater,
        BinOp::Ge => o != Ordering::Less,
        _ => unreachable!("compare {op:?}"),
    } as i64)
}

/// LIKE with `%`, `_` and backslash escapes (byte-wise, case-sensitive).
pub fn like(s: &[u8], p: &[u8]) -> bool {
    fn go(s: &[u8], p: &[u8]) -> bool {
        let (mut si, mut pi) = (0, 0);
        let (mut star_p, mut star_s) = (usize::MAX, 0);
        while si < s.len() {
            if pi < p.len() && p[pi] == b'\\' && pi + 1 < p.len() {
                if s[si] == p[pi + 1] {
                    si += 1;
                    pi += 2;
                    continue;
                }
            } else if pi < p.len() && (p[pi] == b'_' || (p[pi] != b'%' && p[pi] == s[si])) {
                si += 1;
                pi += 1;
                continue;
            } else if pi < p.len() && p[pi] == b'%' {
                star_p = pi;
                star_s = si;
                pi += 1;
                continue;
            }
            if star_p != usize::MAX {
                pi = star_p + 1;
                star_s += 1;
                si = star_s;
                continue;
            }
            return false;
        }
        while pi < p.len() && p[pi] == b'%' {
            pi += 1;
        }
        pi == p.len()
    }
    go(s, p)
}

pub fn cast(v: Value, ty: CastTy) -> EResult<Value> {
    if v.is_null() {
        return Ok(Value::Null);
    }
    Ok(match ty {
        // A string becomes an integer by its integer prefix ('3.7' → 3, '1e3' → 1), past the
        // range of BIGINT UNSIGNED clamped to it, as MariaDB's CAST reads it.
        CastTy::Signed if matches!(v, Value::Bytes(_)) => {
            let Value::Bytes(b) = &v else { unreachable!() };
            Value::Int(str_int_prefix(b) as i64)
        }
        CastTy::Unsigned if matches!(v, Value::Bytes(_)) => {
            let Value::Bytes(b) = &v else { unreachable!() };
            let i = str_int_prefix(b);
            Value::UInt(if i < 0 { i as i64 as u64 } else { i as u64 })
        }
        CastTy::Signed => Value::Int(to_i128(&v).unwrap_or(0).clamp(i64::MIN as i128, i64::MAX as i128) as i64),
        CastTy::Unsigned => {
            let i = to_i128(&v).unwrap_or(0);
            Value::UInt(if i < 0 { (i as i64) as u64 } else { i.min(u64::MAX as i128) as u64 })
        }
        CastTy::Char | CastTy::Binary => Value::Bytes(text(&v).unwrap_or_default()),
        CastTy::Double => Value::Double(to_f64(&v).unwrap_or(0.0)),
        CastTy::Decimal(p, s) => {
            let t = text(&v).unwrap_or_default();
            let d = parse_decimal(&String::from_utf8_lossy(&t), s).unwrap_or(0);
            let max = 10i128.pow(p.min(38) as u32) - 1;
            Value::Decimal { v: d.clamp(-max, max), scale: s }
        }
        CastTy::Date => tern_types::value::coerce(ColumnType::Date, as_text_value(v)).unwrap_or(Value::Null),
        CastTy::DateTime => {
            tern_types::value::coerce(ColumnType::DateTime { fsp: 6 }, as_text_value(v)).unwrap_or(Value::Null)
        }
        CastTy::Time => tern_types::value::coerce(ColumnType::Time { fsp: 6 }, as_text_value(v)).unwrap_or(Value::Null),
    })
}

fn as_text_value(v: Value) -> Value {
    match v {
        Value::Bytes(_) | Value::Date(_) | Value::DateTime(_) | Value::Timestamp(_) | Value::Time(_) => v,
        o => Value::Bytes(text(&o).unwrap_or_default()),
    }
}

/// Microseconds since the epoch, now (UTC; the session time zone is UTC).
pub fn now_micros() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_micros() as i64).unwrap_or(0)
}

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

fn arg_text(args: &[Value], i: usize) -> Option<Vec<u8>> {
    args.get(i).and_then(text)
}

fn arg_int(args: &[Value], i: usize) -> Option<i64> {
    args.get(i).and_then(to_i128).map(|v| v.clamp(i64::MIN as i128, i64::MAX as i128) as i64)
}

fn chars(b: &[u8]) -> Vec<&str> {
    // Character positions for UTF-8 text (invalid bytes count one each).
    match std::str::from_utf8(b) {
        Ok(s) => s.char_indices().map(|(i, c)| &s[i..i + c.len_utf8()]).collect(),
        Err(_) => Vec::new(),
    }
}

fn substr(s: &[u8], pos: i64, len: Option<i64>) -> Vec<u8> {
    let cs = chars(s);
    let n = cs.len() as i64;
    let start = if pos > 0 {
        pos - 1
    } else if pos < 0 {
        n + pos
    } else {
        return Vec::new();
    };
    if start < 0 || start >= n {
        return Vec::new();
    }
    let end = match len {
        Some(l) if l <= 0 => return Vec::new(),
        Some(l) => (start + l).min(n),
        None => n,
    };
    cs[start as usize..end as usize].concat().into_bytes()
}

/// Scalar functions (aggregates are handled by the executor). `ctx` supplies session values.
pub fn call(name: &str, args: &[Value], ctx: &dyn FnCtx) -> EResult<Value> {
    let null_in = args.iter().any(Value::is_null);
    let t = |i| arg_text(args, i);
    let need = |n: usize| -> EResult<()> {
        if args.len() < n {
            Err(SqlError::new(
                1582,
                "42000",
                format!("Incorrect parameter count in the call to native function '{name}'"),
            ))
        } else {
            Ok(())
        }
    };
    let bytes = |b: Vec<u8>| Ok(Value::Bytes(b));
    match name {
        // Planner-made (not callable from SQL): the sort value of an ENUM (member number) or a
        // SET (bit mask of members) column: MEMBER_INDEX(value, is_set, member...).
        // Planner-made: the `n` big-endian bytes of a BIT value: BIT_BYTES(value, n).
        "BIT_BYTES" => {
            let n = arg_int(args, 1).unwrap_or(8).clamp(1, 8) as usize;
            match &args[0] {
                Value::Null => Ok(Value::Null),
                v => {
                    let x = to_i128(v).unwrap_or(0) as u64;
                    bytes(x.to_be_bytes()[8 - n..].to_vec())
                }
            }
        }
        "MEMBER_INDEX" => {
            let Some(v) = t(0) else { return Ok(Value::Null) };
            let members = &args[2..];
            let pos = |p: &[u8]| members.iter().position(|m| matches!(m, Value::Bytes(b) if b == p));
            if arg_int(args, 1) == Some(1) {
                let mut mask = 0u64;
                for part in v.split(|&c| c == b',').filter(|p| !p.is_empty()) {
                    mask |= pos(part).map(|i| 1u64 << i.min(63)).unwrap_or(0);
                }
                Ok(Value::UInt(mask))
            } else {
                Ok(Value::Int(pos(&v).map(|i| i as i64 + 1).unwrap_or(0)))
            }
        }
        "CONCAT" => {
            if null_in {
                return Ok(Value::Null);
            }
            let parts: Vec<Vec<u8>> = args.iter().filter_map(text).collect();
            fits(name, parts.iter().map(Vec::len).sum())?;
            bytes(parts.concat())
        }
        "CONCAT_WS" => {
            need(1)?;
            let Some(sep) = t(0) else { return Ok(Value::Null) };
            let parts: Vec<Vec<u8>> = args[1..].iter().filter_map(text).collect();
            fits(name, parts.iter().map(|p| p.len() + sep.len()).sum())?;
            bytes(parts.join(&sep[..]))
        }
        "LENGTH" | "OCTET_LENGTH" => {
            need(1)?;
            Ok(t(0).map(|s| Value::Int(s.len() as i64)).unwrap_or(Value::Null))
        }
        "CHAR_LENGTH" | "CHARACTER_LENGTH" => {
            need(1)?;
            Ok(t(0)
                .map(|s| Value::Int(chars(&s).len().max(if s.is_empty() { 0 } else { 1 }) as i64))
                .unwrap_or(Value::Null))
        }
        "UPPER" | "UCASE" | "LOWER" | "LCASE" => {
            need(1)?;
            let Some(s) = t(0) else { return Ok(Value::Null) };
            let s = String::from_utf8_lossy(&s).into_owned();
            bytes(if name.starts_with('U') { s.to_uppercase() } else { s.to_lowercase() }.into_bytes())
        }
        "SUBSTRING" | "SUBSTR" | "MID" => {
            need(2)?;
            if null_in {
                return Ok(Value::Null);
            }
            bytes(substr(&t(0).unwrap_or_default(), arg_int(args, 1).unwrap_or(0), arg_int(args, 2)))
        }
        "LEFT" | "RIGHT" => {
            need(2)?;
            if null_in {
                return Ok(Value::Null);
            }
            let s = t(0).unwrap_or_default();
            let n = arg_int(args, 1).unwrap_or(0).max(0) as usize;
            let cs = chars(&s);
            let k = n.min(cs.len());
            bytes(if name == "LEFT" { cs[..k].concat() } else { cs[cs.len() - k..].concat() }.into_bytes())
        }
        "REPEAT" => {
            need(2)?;
            if null_in {
                return Ok(Value::Null);
            }
            let n = arg_int(args, 1).unwrap_or(0).max(0) as usize;
            let s = t(0).unwrap_or_default();
            fits(name, s.len().saturating_mul(n))?;
            bytes(s.repeat(n))
        }
        "SPACE" => bytes(vec![b' '; arg_int(args, 0).unwrap_or(0).clamp(0, 1 << 20) as usize]),
        "REPLACE" => {
            need(3)?;
            if null_in {
                return Ok(Value::Null);
            }
            let (s, from, to) = (t(0).unwrap_or_default(), t(1).unwrap_or_default(), t(2).unwrap_or_default());
            if from.is_empty() {
                return bytes(s);
            }
            let mut out = Vec::with_capacity(s.len());
            let mut i = 0;
            while i < s.len() {
                if s[i..].starts_with(&from) {
                    fits(name, out.len() + to.len())?;
                    out.extend_from_slice(&to);
                    i += from.len();
                } else {
                    out.push(s[i]);
                    i += 1;
                }
            }
            bytes(out)
        }
        "REVERSE" => Ok(t(0)
            .map(|s| Value::Bytes(chars(&s).into_iter().rev().collect::<String>().into_bytes()))
            .unwrap_or(Value::Null)),
        "TRIM" => {
            // args: mode, string, [remove]
            let Some(s) = t(1) else { return Ok(Value::Null) };
            let mode = t(0).unwrap_or_default();
            let rem = if args.len() > 2 { t(2).unwrap_or_default() } else { b" ".to_vec() };
            bytes(trim(&s, &rem, mode != b"TRAILING", mode != b"LEADING"))
        }
        "LTRIM" | "RTRIM" => {
            let Some(s) = t(0) else { return Ok(Value::Null) };
            bytes(trim(&s, b" ", name == "LTRIM", name == "RTRIM"))
        }
        "LPAD" | "RPAD" => {
            need(3)?;
            if null_in {
                return Ok(Value::Null);
            }
            let s = t(0).unwrap_or_default();
            let n = arg_int(args, 1).unwrap_or(0).max(0) as usize;
            let pad = t(2).unwrap_or_default();
            let cs = chars(&s);
            if cs.len() >= n {
                return bytes(cs[..n].concat().into_bytes());
            }
            let pc = chars(&pad);
            if pc.is_empty() {
                return Ok(Value::Null);
            }
            let widest = pc.iter().map(|c| c.len()).max().unwrap_or(1);
            fits(name, s.len().saturating_add((n - cs.len()).saturating_mul(widest)))?;
            let fill: String = (0..n - cs.len()).map(|i| pc[i % pc.len()]).collect();
            let s = String::from_utf8_lossy(&s).into_owned();
            bytes(if name == "LPAD" { fill + &s } else { s + &fill }.into_bytes())
        }
        "LOCATE" | "INSTR" | "POSITION" => {
            need(2)?;
            if null_in {
                return Ok(Value::Null);
            }
            let (needle, hay) = if name == "INSTR" {
                (t(1).unwrap_or_default(), t(0).unwrap_or_default())
            } else {
                (t(0).unwrap_or_default(), t(1).unwrap_or_default())
            };
            let from = if name == "LOCATE" { arg_int(args, 2).unwrap_or(1).max(1) as usize - 1 } else { 0 };
            let hs = String::from_utf8_lossy(&hay).into_owned();
            let ns = String::from_utf8_lossy(&needle).into_owned();
            let cidx: Vec<usize> = hs.char_indices().map(|(i, _)| i).collect();
            if from > cidx.len() {
                return Ok(Value::Int(0));
            }
            let byte_from = cidx.get(from).copied().unwrap_or(hs.len());
            Ok(Value::Int(match hs[byte_from..].find(&ns) {
                Some(p) => (hs[..byte_from + p].chars().count() + 1) as i64,
                None => 0,
            }))
        }
        "ASCII" | "ORD" => Ok(t(0).map(|s| Value::Int(s.first().copied().unwrap_or(0) as i64)).unwrap_or(Value::Null)),
        "HEX" => {
            need(1)?;
            match &args[0] {
                Value::Null => Ok(Value::Null),
                Value::Bytes(b) => bytes(b.iter().map(|x| format!("{x:02X}")).collect::<String>().into_bytes()),
                other => bytes(format!("{:X}", to_i128(other).unwrap_or(0) as u64).into_bytes()),
            }
        }
        "UNHEX" => {
            let Some(s) = t(0) else { return Ok(Value::Null) };
            let s = if s.len() % 2 == 1 { [b"0".as_slice(), &s].concat() } else { s };
            let mut out = Vec::new();
            for c in s.chunks(2) {
                match u8::from_str_radix(std::str::from_utf8(c).unwrap_or("zz"), 16) {
                    Ok(b) => out.push(b),
                    Err(_) => return Ok(Value::Null),
                }
            }
            bytes(out)
        }
        // Digests as lowercase hex strings (MySQL's MD5, SHA1/SHA, SHA2 of 224, 256, 384, 512 bits).
        "MD5" | "SHA1" | "SHA" | "SHA2" => {
            let Some(s) = t(0) else { return Ok(Value::Null) };
            let digest: Vec<u8> = match name {
                "MD5" => tern_types::digest::md5(&s).to_vec(),
                "SHA1" | "SHA" => tern_types::digest::sha1(&s).to_vec(),
                _ => {
                    need(2)?;
                    match to_i128(&args[1]) {
                        None => return Ok(Value::Null),
                        Some(0 | 256) => tern_types::digest::sha256(&s).to_vec(),
                        Some(224) => tern_types::digest::sha224(&s).to_vec(),
                        Some(384) => tern_types::digest::sha384(&s).to_vec(),
                        Some(512) => tern_types::digest::sha512(&s).to_vec(),
                        // MySQL: NULL for a length it does not know.
                        Some(_) => return Ok(Value::Null),
                    }
                }
            };
            bytes(tern_types::digest::hex(&digest).into_bytes())
        }
        "CRC32" => Ok(t(0).map(|s| Value::Int(tern_types::digest::crc32(&s) as i64)).unwrap_or(Value::Null)),
        "TO_BASE64" => {
            let Some(s) = t(0) else { return Ok(Value::Null) };
            let mut out = String::new();
            tern_types::base64::base64_encode(&s, &mut out);
            bytes(out.into_bytes())
        }
        "FROM_BASE64" => {
            let Some(s) = t(0) else { return Ok(Value::Null) };
            let s: Vec<u8> = s.into_iter().filter(|c| !c.is_ascii_whitespace()).collect();
            Ok(tern_types::base64::base64_decode(&String::from_utf8_lossy(&s)).map(Value::Bytes).unwrap_or(Value::Null))
        }
        "COALESCE" => Ok(args.iter().find(|v| !v.is_null()).cloned().unwrap_or(Value::Null)),
        "IFNULL" | "NVL" => {
            need(2)?;
            Ok(if args[0].is_null() { args[1].clone() } else { args[0].clone() })
        }
        "NULLIF" => {
            need(2)?;
            Ok(if compare(&args[0], &args[1]) == Some(Ordering::Equal) { Value::Null } else { args[0].clone() })
        }
        "ISNULL" => {
            need(1)?;
            Ok(Value::Int(args[0].is_null() as i64))
        }
        "GREATEST" | "LEAST" => {
            need(2)?;
            if null_in {
                return Ok(Value::Null);
            }
            let mut best = args[0].clone();
            for v in &args[1..] {
                let o = compare(v, &best).unwrap_or(Ordering::Equal);
                if (name == "GREATEST" && o == Ordering::Greater) || (name == "LEAST" && o == Ordering::Less) {
                    best = v.clone();
                }
            }
            Ok(best)
        }
        "ABS" => {
            need(1)?;
            Ok(match &args[0] {
                Value::Null => Value::Null,
                Value::Int(i) => Value::Int(i.checked_abs().ok_or_else(|| out_of_range("BIGINT"))?),
                Value::UInt(u) => Value::UInt(*u),
                Value::Decimal { v, scale } => Value::Decimal { v: v.abs(), scale: *scale },
                o => Value::Double(to_f64(o).unwrap_or(0.0).abs()),
            })
        }
        "SIGN" => Ok(args
            .first()
            .and_then(to_f64)
            .map(|f| {
                Value::Int(if f > 0.0 {
                    1
                } else if f < 0.0 {
                    -1
                } else {
                    0
                })
            })
            .unwrap_or(Value::Null)),
        "ROUND" | "TRUNCATE" => {
            need(1)?;
            let d = arg_int(args, 1).unwrap_or(0);
            if null_in {
                return Ok(Value::Null);
            }
            round(&args[0], d, name == "TRUNCATE")
        }
        "FLOOR" | "CEIL" | "CEILING" => {
            need(1)?;
            Ok(match &args[0] {
                Value::Null => Value::Null,
                v @ (Value::Int(_) | Value::UInt(_)) => v.clone(),
                Value::Decimal { v, scale } => {
                    let p = 10i128.pow(*scale as u32);
                    let q = v.div_euclid(p);
                    let q = if name == "FLOOR" || v.rem_euclid(p) == 0 { q } else { q + 1 };
                    int_result(q)?
                }
                o => {
                    let f = to_f64(o).unwrap_or(0.0);
                    Value::Double(if name == "FLOOR" { f.floor() } else { f.ceil() })
                }
            })
        }
        "MOD" => {
            need(2)?;
            arith(BinOp::Mod, &args[0], &args[1])
        }
        "POW" | "POWER" => {
            need(2)?;
            if null_in {
                return Ok(Value::Null);
            }
            Ok(Value::Double(to_f64(&args[0]).unwrap_or(0.0).powf(to_f64(&args[1]).unwrap_or(0.0))))
        }
        "SQRT" => Ok(args
            .first()
            .and_then(to_f64)
            .map(|f| if f < 0.0 { Value::Null } else { Value::Double(f.sqrt()) })
            .unwrap_or(Value::Null)),
        "RAND" => Ok(Value::Double((now_micros() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) as f64 / u64::MAX as f64)),
        "IF" => {
            need(3)?;
            Ok(if truth(&args[0]) == Some(true) { args[1].clone() } else { args[2].clone() })
        }
        "NOW" | "CURRENT_TIMESTAMP" | "SYSDATE" | "LOCALTIME" | "LOCALTIMESTAMP" | "UTC_TIMESTAMP" => {
            let fsp = arg_int(args, 0).unwrap_or(0).clamp(0, 6) as u8;
            Ok(Value::DateTime(time::truncate_fsp(ctx.now(), fsp)))
        }
        "CURDATE" | "CURRENT_DATE" | "UTC_DATE" => Ok(Value::Date(ctx.now().div_euclid(time::MICROS_PER_DAY) as i32)),
        "CURTIME" | "CURRENT_TIME" => {
            Ok(Value::Time(ctx.now().rem_euclid(time::MICROS_PER_DAY) / time::MICROS_PER_SEC * time::MICROS_PER_SEC))
        }
        "UNIX_TIMESTAMP" => {
            if args.is_empty() {
                return Ok(Value::Int(ctx.now() / time::MICROS_PER_SEC));
            }
            let v = cast(args[0].clone(), CastTy::DateTime)?;
            Ok(match v {
                Value::DateTime(t) => Value::Int(t / time::MICROS_PER_SEC),
                _ => Value::Null,
            })
        }
        "FROM_UNIXTIME" => {
            need(1)?;
            // NULL before the epoch and after MySQL 8's last second (3001-01-18 23:59:59 UTC).
            let Some(at) = arg_int(args, 0)
                .filter(|s| (0..=32_536_771_199).contains(s))
                .and_then(|s| s.checked_mul(time::MICROS_PER_SEC))
            else {
                return Ok(Value::Null);
            };
            match args.get(1) {
                None => Ok(Value::DateTime(at)),
                Some(_) => Ok(t(1).map_or(Value::Null, |f| Value::Bytes(time::date_format(at, &f)))),
            }
        }
        "DATE" => Ok(cast(args.first().cloned().unwrap_or(Value::Null), CastTy::Date)?),
        "TIME" => Ok(match args.first() {
            Some(Value::DateTime(t) | Value::Timestamp(t)) => Value::Time(t.rem_euclid(time::MICROS_PER_DAY)),
            Some(Value::Date(_)) => Value::Time(0),
            // Text: what reads as a TIME, else its leading TIME-like part (' 7x' is 00:00:07,
            // as MariaDB reads it with a warning), else NULL.
            Some(Value::Bytes(b)) => {
                let t = String::from_utf8_lossy(b);
                let t = t.trim();
                let lead =
                    t.find(|c: char| !(c.is_ascii_digit() || matches!(c, ':' | '.' | '-' | ' '))).unwrap_or(t.len());
                match time::parse_time(t).or_else(|| time::parse_time(t[..lead].trim_end_matches(['.', ':', '-', ' '])))
                {
                    Some(v) => Value::Time(v),
                    None => Value::Null,
                }
            }
            Some(v) => cast(v.clone(), CastTy::Time)?,
            None => Value::Null,
        }),
        "DATE_FORMAT" => {
            need(2)?;
            let (Value::DateTime(at), Some(f)) = (cast(args[0].clone(), CastTy::DateTime)?, t(1)) else {
                return Ok(Value::Null);
            };
            Ok(Value::Bytes(time::date_format(at, &f)))
        }
        "DAYOFWEEK" | "WEEKDAY" | "DAYOFYEAR" | "WEEK" | "LAST_DAY" | "MONTHNAME" | "DAYNAME" => {
            need(1)?;
            let Value::DateTime(at) = cast(args[0].clone(), CastTy::DateTime)? else { return Ok(Value::Null) };
            let days = at.div_euclid(time::MICROS_PER_DAY) as i32;
            let (y, m, _) = time::civil_from_days(days);
            Ok(match name {
                "DAYOFWEEK" => Value::Int((time::weekday(days) as i64 + 1) % 7 + 1),
                "WEEKDAY" => Value::Int(time::weekday(days) as i64),
                "DAYOFYEAR" => Value::Int((days - time::days_from_civil(y, 1, 1)) as i64 + 1),
                "WEEK" => {
                    // WEEK(d, mode): mode's bits are Monday first, weeks 1..53, and (flipped
                    // when Sunday is first) week 1 holding the first day of the week.
                    let mode = arg_int(args, 1).unwrap_or(0).rem_euclid(8) as u32;
                    let monday = mode & 1 != 0;
                    let first_weekday = (mode & 4 != 0) == monday;
                    Value::Int(time::week(days, monday, mode & 2 != 0, first_weekday).0 as i64)
                }
                "LAST_DAY" => Value::Date(time::days_from_civil(y, m, time::days_in_month(y, m))),
                "MONTHNAME" => Value::Bytes(time::date_format(at, b"%M")),
                _ => Value::Bytes(time::date_format(at, b"%W")),
            })
        }
        "TIMESTAMPADD" => {
            need(3)?;
            let unit = t(0).map(|u| String::from_utf8_lossy(&u).into_owned()).unwrap_or_default();
            date_add(&args[2], &args[1], &unit, 1)
        }
        "TIMESTAMPDIFF" => {
            need(3)?;
            let unit = t(0).map(|u| String::from_utf8_lossy(&u).into_owned()).unwrap_or_default();
            let (Value::DateTime(a), Value::DateTime(b)) =
                (cast(args[1].clone(), CastTy::DateTime)?, cast(args[2].clone(), CastTy::DateTime)?)
            else {
                return Ok(Value::Null);
            };
            // Whole units from a to b, truncated toward zero; months by the calendar (a month
            // is complete when b's day and time reach a's).
            let months = |a: i64, b: i64| -> i64 {
                let (lo, hi, sign) = if b >= a { (a, b, 1) } else { (b, a, -1) };
                let split = |t: i64| {
                    let (y, m, d) = time::civil_from_days(t.div_euclid(time::MICROS_PER_DAY) as i32);
                    (y as i64 * 12 + m as i64, d, t.rem_euclid(time::MICROS_PER_DAY))
                };
                let ((ml, dl, rl), (mh, dh, rh)) = (split(lo), split(hi));
                sign * (mh - ml - ((dh, rh) < (dl, rl)) as i64)
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
                "MONTH" => months(a, b),
                "QUARTER" => months(a, b) / 3,
                "YEAR" => months(a, b) / 12,
                _ => return Ok(Value::Null),
            }))
        }
        "STR_TO_DATE" => {
            need(2)?;
            let (Some(v), Some(f)) = (t(0), t(1)) else { return Ok(Value::Null) };
            Ok(match time::str_to_date(&v, &f) {
                Some(time::Parsed::Date(d)) => Value::Date(d),
                Some(time::Parsed::DateTime(t)) => Value::DateTime(t),
                Some(time::Parsed::Time(t)) => Value::Time(t),
                None => Value::Null,
            })
        }
        "FORMAT" => {
            need(2)?;
            if null_in {
                return Ok(Value::Null);
            }
            // Rounded half away from zero to d digits, then thousands separated by commas.
            let d = arg_int(args, 1).unwrap_or(0).clamp(0, 30);
            let x = match &args[0] {
                Value::Int(i) => Value::Decimal { v: *i as i128, scale: 0 },
                Value::UInt(u) => Value::Decimal { v: *u as i128, scale: 0 },
                v @ Value::Decimal { .. } => v.clone(),
                o => Value::Double(to_f64(o).unwrap_or(0.0)),
            };
            let text = match round(&x, d, false)? {
                Value::Decimal { v, scale } => format_decimal(v, scale),
                Value::Double(f) => format!("{:.*}", d as usize, f),
                o => String::from_utf8_lossy(&text(&o).unwrap_or_default()).into_owned(),
            };
            let (sign, digits) = text.strip_prefix('-').map_or(("", text.as_str()), |t| ("-", t));
            let (int, frac) = digits.split_once('.').map_or((digits, None), |(a, b)| (a, Some(b)));
            let mut out = String::from(sign);
            for (k, ch) in int.chars().enumerate() {
                if k > 0 && (int.len() - k) % 3 == 0 {
                    out.push(',');
                }
                out.push(ch);
            }
            if let Some(f) = frac {
                out.push('.');
                out.push_str(f);
            }
            bytes(out.into_bytes())
        }
        "SUBSTRING_INDEX" => {
            need(3)?;
            let (Some(s), Some(d), Some(n)) = (t(0), t(1), arg_int(args, 2)) else { return Ok(Value::Null) };
            if d.is_empty() || n == 0 {
                return bytes(Vec::new());
            }
            // The text before the n-th delimiter (n > 0) or after the n-th from the end.
            let at: Vec<usize> = s.windows(d.len()).enumerate().filter(|(_, w)| *w == &d[..]).map(|(i, _)| i).collect();
            let k = n.unsigned_abs().min(usize::MAX as u64) as usize;
            if k > at.len() {
                return bytes(s);
            }
            bytes(if n > 0 { s[..at[k - 1]].to_vec() } else { s[at[at.len() - k] + d.len()..].to_vec() })
        }
        "FIELD" => {
            need(2)?;
            let Some(x) = args.first().filter(|v| !v.is_null()) else { return Ok(Value::Int(0)) };
            Ok(Value::Int(
                args[1..].iter().position(|v| compare(x, v) == Some(Ordering::Equal)).map_or(0, |i| i as i64 + 1),
            ))
        }
        "ELT" => {
            need(2)?;
            Ok(match arg_int(args, 0) {
                Some(n) if n >= 1 && (n as usize) < args.len() => args[n as usize].clone(),
                _ => Value::Null,
            })
        }
        "HOUR" | "MINUTE" | "SECOND"
            if matches!(args.first(), Some(Value::Time(_)))
                || matches!(args.first(), Some(Value::Bytes(b)) if std::str::from_utf8(b).is_ok_and(|t| time::parse_time(t).is_some())) =>
        {
            // Of a TIME (or text that reads as one): its parts, hours past 23 included.
            let t = match &args[0] {
                Value::Time(t) => *t,
                Value::Bytes(b) => std::str::from_utf8(b).ok().and_then(time::parse_time).unwrap_or(0),
                _ => 0,
            };
            let secs = t.unsigned_abs() as i64 / time::MICROS_PER_SEC;
            Ok(Value::Int(match name {
                "HOUR" => secs / 3600,
                "MINUTE" => secs / 60 % 60,
                _ => secs % 60,
            }))
        }
        "YEAR" | "MONTH" | "DAY" | "DAYOFMONTH" | "HOUR" | "MINUTE" | "SECOND" => {
            need(1)?;
            let v = cast(args[0].clone(), CastTy::DateTime)?;
            let Value::DateTime(t) = v else { return Ok(Value::Null) };
            let days = t.div_euclid(time::MICROS_PER_DAY) as i32;
            let secs = t.rem_euclid(time::MICROS_PER_DAY) / time::MICROS_PER_SEC;
            let (y, m, d) = time::civil_from_days(days);
            Ok(Value::Int(match name {
                "YEAR" => y as i64,
                "MONTH" => m as i64,
                "DAY" | "DAYOFMONTH" => d as i64,
                "HOUR" => secs / 3600,
                "MINUTE" => secs / 60 % 60,
                _ => secs % 60,
            }))
        }
        "DATE_ADD" | "ADDDATE" | "DATE_SUB" | "SUBDATE" => {
            need(2)?;
            let sign = if name.contains("SUB") { -1 } else { 1 };
            // The interval arrives as (value, unit-text) pairs from the executor.
            let unit =
                args.get(2).and_then(text).map(|u| String::from_utf8_lossy(&u).into_owned()).unwrap_or("DAY".into());
            date_add(&args[0], &args[1], &unit, sign)
        }
        "DATEDIFF" => {
            need(2)?;
            let a = cast(args[0].clone(), CastTy::Date)?;
            let b = cast(args[1].clone(), CastTy::Date)?;
            Ok(match (a, b) {
                (Value::Date(x), Value::Date(y)) => Value::Int((x - y) as i64),
                _ => Value::Null,
            })
        }
        "DATABASE" | "SCHEMA" => Ok(ctx.database().map(|d| Value::Bytes(d.into_bytes())).unwrap_or(Value::Null)),
        "VERSION" => bytes(crate::SERVER_VERSION.as_bytes().to_vec()),
        "USER" | "CURRENT_USER" | "SESSION_USER" | "SYSTEM_USER" => bytes(ctx.user().into_bytes()),
        "CONNECTION_ID" => Ok(Value::UInt(ctx.connection_id() as u64)),
        "LAST_INSERT_ID" => {
            if let Some(v) = args.first() {
                ctx.set_last_insert_id(to_i128(v).unwrap_or(0) as u64);
                return Ok(v.clone());
            }
            Ok(Value::UInt(ctx.last_insert_id()))
        }
        "ROW_COUNT" => Ok(Value::Int(ctx.row_count())),
        "FOUND_ROWS" => Ok(Value::Int(ctx.found_rows() as i64)),
        "SLEEP" => Ok(Value::Int(0)),
        "CHARSET" => bytes(b"utf8mb4".to_vec()),
        "COLLATION" => bytes(b"utf8mb4_bin".to_vec()),
        "EXTRACT" => {
            let unit = t(0).map(|u| String::from_utf8_lossy(&u).into_owned()).unwrap_or_default();
            call(&unit, &args[1..], ctx)
        }
        _ => Err(SqlError::new(1305, "42000", format!("FUNCTION {name} does not exist"))),
    }
}

fn trim(s: &[u8], rem: &[u8], leading: bool, trailing: bool) -> Vec<u8> {
    let mut a = 0;
    let mut b = s.len();
    if rem.is_empty() {
        return s.to_vec();
    }
    if leading {
        while s[a..b].starts_with(rem) {
            a += rem.len();
        }
    }
    if trailing {
        while b - a >= rem.len() && s[a..b].ends_with(rem) {
            b -= rem.len();
        }
    }
    s[a..b].to_vec()
}

fn round(v: &Value, d: i64, truncate: bool) -> EResult<Value> {
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

/// Session values some functions need.
pub trait FnCtx {
    fn now(&self) -> i64;
    fn database(&self) -> Option<String>;
    fn user(&self) -> String;
    fn connection_id(&self) -> u32;
    fn last_insert_id(&self) -> u64;
    fn set_last_insert_id(&self, v: u64);
    fn row_count(&self) -> i64;
    fn found_rows(&self) -> u64;
}

/// Formats a decimal for messages.
pub fn dec_text(v: i128, scale: u8) -> String {
    format_decimal(v, scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relaxed_dates_and_times() {
        let r = |s: &str| relaxed_datetime(s.as_bytes()).map(|v| String::from_utf8(v).unwrap());
        // Already canonical: used as given.
        assert_eq!(r("1996-03-13"), None);
        assert_eq!(r("2012^12^31 11*30*45").as_deref(), Some("2012-12-31 11:30:45"));
        assert_eq!(r("1996/3/1").as_deref(), Some("1996-3-1"));
        assert_eq!(r("2001.02.03 04:05:06.789").as_deref(), Some("2001-02-03 04:05:06.789"));
        assert_eq!(r("1996-03-1x"), None);
        assert_eq!(r("19960313"), None);
    }

    #[test]
    fn arithmetic() {
        assert_eq!(arith(BinOp::Add, &Value::Int(1), &Value::Int(2)).unwrap(), Value::Int(3));
        assert_eq!(arith(BinOp::Div, &Value::Int(1), &Value::Int(3)).unwrap(), Value::Decimal { v: 3333, scale: 4 });
        assert_eq!(arith(BinOp::Div, &Value::Int(1), &Value::Int(0)).unwrap(), Value::Null);
        assert_eq!(arith(BinOp::IntDiv, &Value::Int(7), &Value::Int(2)).unwrap(), Value::Int(3));
        assert_eq!(
            arith(BinOp::Add, &Value::Decimal { v: 15, scale: 1 }, &Value::Int(1)).unwrap(),
            Value::Decimal { v: 25, scale: 1 }
        );
        assert_eq!(arith(BinOp::Add, &Value::str("1.5"), &Value::Int(1)).unwrap(), Value::Double(2.5));
        assert!(arith(BinOp::Add, &Value::Int(i64::MAX), &Value::UInt(u64::MAX)).is_err());
        assert!(arith(BinOp::Sub, &Value::UInt(0), &Value::Int(1)).is_err());
        assert_eq!(arith(BinOp::Mod, &Value::Int(7), &Value::Int(3)).unwrap(), Value::Int(1));
    }

    #[test]
    fn comparisons() {
        assert_eq!(compare(&Value::str("10"), &Value::Int(9)), Some(Ordering::Greater));
        assert_eq!(compare(&Value::str("abc"), &Value::Int(0)), Some(Ordering::Equal));
        assert_eq!(
            compare(&Value::str("2024-01-02"), &Value::Date(time::days_from_civil(2024, 1, 2))),
            Some(Ordering::Equal)
        );
        assert_eq!(compare_op(BinOp::NullSafeEq, &Value::Null, &Value::Null), Value::Int(1));
        assert_eq!(compare_op(BinOp::Eq, &Value::Null, &Value::Int(1)), Value::Null);
        assert!(like(b"abcdef", b"a%f"));
        assert!(like(b"abc", b"a_c"));
        assert!(!like(b"abc", b"a_"));
        assert!(like(b"a%c", b"a\\%c"));
        assert!(!like(b"abc", b"a\\%c"));
        assert!(like(b"", b"%"));
    }

    #[test]
    fn rounding_and_casts() {
        assert_eq!(round(&Value::Decimal { v: 125, scale: 2 }, 1, false).unwrap(), Value::Decimal { v: 13, scale: 1 });
        assert_eq!(
            round(&Value::Decimal { v: -125, scale: 2 }, 1, false).unwrap(),
            Value::Decimal { v: -13, scale: 1 }
        );
        assert_eq!(round(&Value::Int(1234), -2, false).unwrap(), Value::Int(1200));
        assert_eq!(cast(Value::str("12abc"), CastTy::Signed).unwrap(), Value::Int(12));
        assert_eq!(cast(Value::Int(-1), CastTy::Unsigned).unwrap(), Value::UInt(u64::MAX));
        assert_eq!(str_to_f64(b" 1.5e2x"), 150.0);
    }
}
