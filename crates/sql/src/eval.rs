//! Value semantics of SQL expressions, as MySQL defines them: three-valued logic, numeric
//! promotion (integers → decimals → doubles; strings compared with numbers become numbers),
//! integer overflow errors, decimal division with four more fraction digits. The scalar
//! functions are the registry `func`.

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

pub(crate) fn as_dec(v: &Value) -> Option<(i128, u8)> {
    match v {
        Value::Decimal { v, scale } => Some((*v, *scale)),
        other => Some((to_i128(other)?, 0)),
    }
}

pub(crate) fn int_result(v: i128) -> EResult<Value> {
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

/// Unary minus: exact for integers (error 1690 past BIGINT) and DECIMALs, DOUBLE otherwise.
pub fn negate(v: Value) -> EResult<Value> {
    Ok(match v {
        Value::Null => Value::Null,
        Value::Int(i) => Value::Int(i.checked_neg().ok_or_else(|| out_of_range("BIGINT"))?),
        Value::UInt(u) if u <= 1 << 63 => Value::Int((u as i128).wrapping_neg() as i64),
        Value::UInt(_) => return Err(out_of_range("BIGINT")),
        Value::Decimal { v, scale } => Value::Decimal { v: -v, scale },
        o => Value::Double(-to_f64(&o).unwrap_or(0.0)),
    })
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
        assert_eq!(negate(Value::UInt(1 << 63)).unwrap(), Value::Int(i64::MIN));
        assert!(negate(Value::UInt((1 << 63) + 1)).is_err());
        assert!(negate(Value::Int(i64::MIN)).is_err());
        assert_eq!(negate(Value::Decimal { v: 5, scale: 1 }).unwrap(), Value::Decimal { v: -5, scale: 1 });
        assert_eq!(negate(Value::str("1.5")).unwrap(), Value::Double(-1.5));
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
    fn casts() {
        assert_eq!(cast(Value::str("12abc"), CastTy::Signed).unwrap(), Value::Int(12));
        assert_eq!(cast(Value::Int(-1), CastTy::Unsigned).unwrap(), Value::UInt(u64::MAX));
        assert_eq!(str_to_f64(b" 1.5e2x"), 150.0);
    }
}
