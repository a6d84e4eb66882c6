//! Typed values and their conversion to a column's canonical form.
//!
//! `coerce` is the single place where a value supplied by a client is checked against a column
//! type (range, length, date validity) and brought into the canonical variant that the row codec
//! stores. Everything after it may assume values match their columns.

use crate::bin::{Dec, DecodeError, DecodeResult, Enc};
use crate::column_type::ColumnType;
use crate::error::{ErrorCode, TernResult, err};
use crate::time;
use std::cmp::Ordering;

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    UInt(u64),
    Float(f32),
    Double(f64),
    /// Scaled integer: value = v / 10^scale.
    Decimal {
        v: i128,
        scale: u8,
    },
    /// CHAR, VARCHAR, TEXT, BINARY, VARBINARY, BLOB.
    Bytes(Vec<u8>),
    /// Days since 1970-01-01.
    Date(i32),
    /// Signed microseconds.
    Time(i64),
    /// Microseconds since 1970-01-01 00:00:00 (naive).
    DateTime(i64),
    /// Microseconds since the Unix epoch, UTC.
    Timestamp(i64),
    Year(u16),
    Bit(u64),
}

impl Value {
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    pub fn str(s: &str) -> Value {
        Value::Bytes(s.as_bytes().to_vec())
    }

    /// The value as i128 when it is an exact integer (integers, YEAR, BIT, integral decimals).
    pub fn as_i128(&self) -> Option<i128> {
        match *self {
            Value::Int(v) => Some(v as i128),
            Value::UInt(v) => Some(v as i128),
            Value::Year(v) => Some(v as i128),
            Value::Bit(v) => Some(v as i128),
            Value::Decimal { v, scale } => {
                let p = 10i128.pow(scale as u32);
                (v % p == 0).then_some(v / p)
            }
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::Int(v) => Some(v as f64),
            Value::UInt(v) => Some(v as f64),
            Value::Float(v) => Some(v as f64),
            Value::Double(v) => Some(v),
            Value::Decimal { v, scale } => Some(v as f64 / 10f64.powi(scale as i32)),
            Value::Year(v) => Some(v as f64),
            Value::Bit(v) => Some(v as f64),
            Value::Bytes(ref b) => std::str::from_utf8(b).ok()?.trim().parse().ok(),
            _ => None,
        }
    }

    pub fn encode(&self, e: &mut Enc) {
        match *self {
            Value::Null => e.u8(0),
            Value::Int(v) => {
                e.u8(1);
                e.i64(v)
            }
            Value::UInt(v) => {
                e.u8(2);
                e.u64(v)
            }
            Value::Float(v) => {
                e.u8(3);
                e.u32(v.to_bits())
            }
            Value::Double(v) => {
                e.u8(4);
                e.f64(v)
            }
            Value::Decimal { v, scale } => {
                e.u8(5);
                e.i128(v);
                e.u8(scale)
            }
            Value::Bytes(ref b) => {
                e.u8(6);
                e.bytes(b)
            }
            Value::Date(v) => {
                e.u8(7);
                e.u32(v as u32)
            }
            Value::Time(v) => {
                e.u8(8);
                e.i64(v)
            }
            Value::DateTime(v) => {
                e.u8(9);
                e.i64(v)
            }
            Value::Timestamp(v) => {
                e.u8(10);
                e.i64(v)
            }
            Value::Year(v) => {
                e.u8(11);
                e.u16(v)
            }
            Value::Bit(v) => {
                e.u8(12);
                e.u64(v)
            }
        }
    }

    pub fn decode(d: &mut Dec) -> DecodeResult<Value> {
        Ok(match d.u8()? {
            0 => Value::Null,
            1 => Value::Int(d.i64()?),
            2 => Value::UInt(d.u64()?),
            3 => Value::Float(f32::from_bits(d.u32()?)),
            4 => Value::Double(d.f64()?),
            5 => {
                let v = d.i128()?;
                let scale = d.u8()?;
                if scale > 38 {
                    return Err(DecodeError("bad decimal scale"));
                }
                Value::Decimal { v, scale }
            }
            6 => Value::Bytes(d.bytes()?.to_vec()),
            7 => Value::Date(d.u32()? as i32),
            8 => Value::Time(d.i64()?),
            9 => Value::DateTime(d.i64()?),
            10 => Value::Timestamp(d.i64()?),
            11 => Value::Year(d.u16()?),
            12 => Value::Bit(d.u64()?),
            _ => return Err(DecodeError("unknown value tag")),
        })
    }

    /// SQL comparison: None when either side is NULL or the two cannot be compared.
    pub fn cmp_sql(&self, other: &Value) -> Option<Ordering> {
        use Value::*;
        match (self, other) {
            (Null, _) | (_, Null) => None,
            (Bytes(a), Bytes(b)) => Some(a.cmp(b)),
            (Date(a), Date(b)) => Some(a.cmp(b)),
            (Time(a), Time(b)) | (DateTime(a), DateTime(b)) | (Timestamp(a), Timestamp(b)) => Some(a.cmp(b)),
            (DateTime(a), Date(b)) => Some(a.cmp(&(*b as i64 * time::MICROS_PER_DAY))),
            (Date(a), DateTime(b)) => Some((*a as i64 * time::MICROS_PER_DAY).cmp(b)),
            (Decimal { v: a, scale: sa }, Decimal { v: b, scale: sb }) => {
                let s = (*sa).max(*sb);
                Some(rescale(*a, *sa, s)?.cmp(&rescale(*b, *sb, s)?))
            }
            (Decimal { v, scale }, o) if o.as_i128().is_some() => Some(v.cmp(&rescale(o.as_i128()?, 0, *scale)?)),
            (o, Decimal { v, scale }) if o.as_i128().is_some() => Some(rescale(o.as_i128()?, 0, *scale)?.cmp(v)),
            _ => match (self.as_i128(), other.as_i128()) {
                (Some(a), Some(b)) if !matches!(self, Decimal { .. }) && !matches!(other, Decimal { .. }) => {
                    Some(a.cmp(&b))
                }
                _ => self.as_f64()?.partial_cmp(&other.as_f64()?),
            },
        }
    }

    /// A short text form, as MySQL's text protocol prints the value.
    pub fn to_text(&self, ty: ColumnType) -> Option<String> {
        Some(match *self {
            Value::Null => return None,
            Value::Int(v) => v.to_string(),
            Value::UInt(v) => v.to_string(),
            Value::Float(v) => format_g6(v as f64),
            Value::Double(v) => format_g6(v),
            Value::Decimal { v, scale } => format_decimal(v, scale),
            Value::Bytes(ref b) => String::from_utf8_lossy(b).into_owned(),
            Value::Date(d) => time::format_date(d),
            Value::Time(t) => time::format_time(t, fsp_of(ty)),
            Value::DateTime(t) | Value::Timestamp(t) => time::format_datetime(t, fsp_of(ty)),
            // MySQL prints YEAR with four digits (0000 for the zero year).
            Value::Year(y) => format!("{y:04}"),
            Value::Bit(b) => b.to_string(),
        })
    }
}

fn fsp_of(ty: ColumnType) -> u8 {
    match ty {
        ColumnType::Time { fsp } | ColumnType::DateTime { fsp } | ColumnType::Timestamp { fsp } => fsp,
        _ => 0,
    }
}

/// Brings a scaled integer from one scale to another; None on overflow or inexact downscale.
pub fn rescale(v: i128, from: u8, to: u8) -> Option<i128> {
    if to >= from {
        v.checked_mul(10i128.checked_pow((to - from) as u32)?)
    } else {
        let p = 10i128.pow((from - to) as u32);
        (v % p == 0).then_some(v / p)
    }
}

/// Prints a scaled decimal with exactly `scale` fraction digits.
pub fn format_decimal(v: i128, scale: u8) -> String {
    let neg = v < 0;
    let a = v.unsigned_abs();
    let p = 10u128.pow(scale as u32);
    let (int, frac) = (a / p, a % p);
    let sign = if neg { "-" } else { "" };
    if scale == 0 { format!("{sign}{int}") } else { format!("{sign}{int}.{frac:0w$}", w = scale as usize) }
}

/// Parses `[-+]digits[.digits]` into a decimal of the given scale (rounding half away from zero
/// beyond the scale, as MySQL does on store).
pub fn parse_decimal(s: &str, scale: u8) -> Option<i128> {
    let s = s.trim();
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if (int.is_empty() && frac.is_empty()) || !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v: i128 = 0;
    for b in int.bytes() {
        v = v.checked_mul(10)?.checked_add((b - b'0') as i128)?;
    }
    let fb = frac.as_bytes();
    for i in 0..scale as usize {
        let digit = fb.get(i).map(|b| (b - b'0') as i128).unwrap_or(0);
        v = v.checked_mul(10)?.checked_add(digit)?;
    }
    if fb.get(scale as usize).is_some_and(|&b| b >= b'5') {
        v = v.checked_add(1)?;
    }
    Some(if neg { -v } else { v })
}

/// `%g`-style formatting with 6 significant digits, as MySQL and RonDB's REST API print floats.
pub fn format_g6(v: f64) -> String {
    if v == 0.0 {
        return if v.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    if !v.is_finite() {
        return v.to_string();
    }
    let exp = v.abs().log10().floor() as i32;
    // Round to 6 significant digits first; rounding can move the exponent (999999.5 -> 1e+06).
    let s = format!("{:.5e}", v);
    let (mant, e) = s.split_once('e').expect("exponent form");
    let e: i32 = e.parse().expect("exponent digits");
    let _ = exp;
    if (-4..6).contains(&e) {
        let decimals = (5 - e).max(0) as usize;
        let f = format!("{:.*}", decimals, v);
        trim_zeros(&f)
    } else {
        let m = trim_zeros(mant);
        format!("{}e{}{:02}", m, if e < 0 { '-' } else { '+' }, e.abs())
    }
}

fn trim_zeros(s: &str) -> String {
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s.to_string() }
}

fn text_of(v: &Value) -> Option<&str> {
    match v {
        Value::Bytes(b) => std::str::from_utf8(b).ok(),
        _ => None,
    }
}

fn out_of_range<T>(ty: ColumnType) -> TernResult<T> {
    err(ErrorCode::ValueOutOfRange, format!("Out of range value for column of type {}", ty.sql_name()))
}

fn wrong_type<T>(ty: ColumnType, v: &Value) -> TernResult<T> {
    err(ErrorCode::InvalidValue, format!("Incorrect {} value: {:?}", ty.sql_name(), v))
}

/// Converts a value to the canonical variant for a column type, checking range and length.
/// NULL passes through (nullability is checked by the caller, who knows the column).
pub fn coerce(ty: ColumnType, v: Value) -> TernResult<Value> {
    use ColumnType as T;
    if v.is_null() {
        return Ok(Value::Null);
    }
    match ty {
        T::TinyInt { .. } | T::SmallInt { .. } | T::MediumInt { .. } | T::Int { .. } | T::BigInt { .. } => {
            coerce_int(ty, v)
        }
        // A native client's infinite DOUBLE is kept (the Redis front end's scores are ±inf as
        // often as not); SQL never produces one (its arithmetic refuses overflow) and text does
        // not parse to one.
        T::Double if matches!(v, Value::Double(f) if f.is_infinite()) => Ok(v),
        T::Float | T::Double => {
            let f = match v.as_f64() {
                Some(f) if f.is_finite() => f,
                _ => return wrong_type(ty, &v),
            };
            if ty == T::Float {
                if f.abs() > f32::MAX as f64 {
                    return out_of_range(ty);
                }
                Ok(Value::Float(f as f32))
            } else {
                Ok(Value::Double(f))
            }
        }
        T::Decimal { precision, scale, unsigned } => coerce_decimal(ty, v, precision, scale, unsigned),
        T::Char { .. } | T::VarChar { .. } | T::Text => coerce_text(ty, v),
        T::Binary { .. } | T::VarBinary { .. } | T::Blob => coerce_binary(ty, v),
        T::Date => match v {
            Value::Date(d) => Ok(Value::Date(d)),
            Value::DateTime(t) | Value::Timestamp(t) => Ok(Value::Date(t.div_euclid(time::MICROS_PER_DAY) as i32)),
            ref o => match text_of(o).and_then(|s| {
                time::parse_date(s)
                    .or_else(|| time::parse_datetime(s).map(|t| t.div_euclid(time::MICROS_PER_DAY) as i32))
            }) {
                Some(d) => Ok(Value::Date(d)),
                None => err(ErrorCode::InvalidValue, "Invalid Date/Time."),
            },
        },
        T::DateTime { fsp } | T::Timestamp { fsp } => coerce_datetime(ty, v, fsp),
        T::Time { fsp } => {
            let micros = match v {
                Value::Time(t) => Some(t),
                ref o => text_of(o).and_then(time::parse_time),
            };
            match micros {
                Some(m) if m.abs() <= time::TIME_MAX_MICROS => Ok(Value::Time(time::truncate_fsp(m, fsp))),
                _ => err(ErrorCode::InvalidValue, "Invalid Date/Time."),
            }
        }
        T::Year => {
            let n = match &v {
                Value::Bytes(_) => text_of(&v).and_then(|s| s.trim().parse::<i128>().ok()),
                o => o.as_i128(),
            };
            match n {
                Some(0) => Ok(Value::Year(0)),
                Some(n) if (1901..=2155).contains(&n) => Ok(Value::Year(n as u16)),
                Some(_) => out_of_range(ty),
                None => wrong_type(ty, &v),
            }
        }
        T::Bit { bits } => {
            let n = match &v {
                Value::Bytes(b) if b.len() <= 8 => Some(b.iter().fold(0i128, |a, &x| (a << 8) | x as i128)),
                o => o.as_i128(),
            };
            match n {
                Some(n) if n >= 0 && (bits == 64 || n < (1i128 << bits)) => Ok(Value::Bit(n as u64)),
                Some(_) => out_of_range(ty),
                None => wrong_type(ty, &v),
            }
        }
    }
}

/// An integer column's value: text parsed, whole floats taken, the type's range checked.
fn coerce_int(ty: ColumnType, v: Value) -> TernResult<Value> {
    let n = match &v {
        Value::Bytes(_) => {
            let s = text_of(&v).unwrap_or("").trim();
            match s.parse::<i128>() {
                Ok(n) => n,
                Err(_) => return wrong_type(ty, &v),
            }
        }
        Value::Double(f) if f.fract() == 0.0 && f.abs() < 1e38 => *f as i128,
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 1e38 => *f as i128,
        other => match other.as_i128() {
            Some(n) => n,
            None => return wrong_type(ty, &v),
        },
    };
    let (lo, hi) = ty.int_range().expect("integer type");
    if n < lo || n > hi {
        return out_of_range(ty);
    }
    Ok(if ty.is_unsigned() { Value::UInt(n as u64) } else { Value::Int(n as i64) })
}

/// A DECIMAL(precision, scale) value, rounded to the scale, its precision checked.
fn coerce_decimal(ty: ColumnType, v: Value, precision: u8, scale: u8, unsigned: bool) -> TernResult<Value> {
    let scaled = match &v {
        Value::Bytes(_) => parse_decimal(text_of(&v).unwrap_or(""), scale),
        Value::Decimal { v: x, scale: s } => {
            if *s <= scale {
                rescale(*x, *s, scale)
            } else {
                parse_decimal(&format_decimal(*x, *s), scale)
            }
        }
        Value::Double(_) | Value::Float(_) => {
            parse_decimal(&format!("{:.*}", scale as usize + 1, v.as_f64().unwrap_or(0.0)), scale)
        }
        other => other.as_i128().and_then(|n| rescale(n, 0, scale)),
    };
    let Some(scaled) = scaled else {
        return wrong_type(ty, &v);
    };
    if scaled.unsigned_abs() >= 10u128.pow(precision as u32) || (unsigned && scaled < 0) {
        return out_of_range(ty);
    }
    Ok(Value::Decimal { v: scaled, scale })
}

/// Text: valid UTF-8 within the length in characters (TEXT: bytes); CHAR without trailing
/// spaces.
fn coerce_text(ty: ColumnType, v: Value) -> TernResult<Value> {
    use ColumnType as T;
    let mut b = match v {
        Value::Bytes(b) => b,
        other => match other.to_text(ty) {
            Some(s) => s.into_bytes(),
            None => return wrong_type(ty, &other),
        },
    };
    let s = match std::str::from_utf8(&b) {
        Ok(s) => s,
        Err(_) => {
            return err(ErrorCode::InvalidValue, "Incorrect string value: not valid UTF-8");
        }
    };
    let limit = match ty {
        T::Char { len } | T::VarChar { len } => len as usize,
        _ => 65_535,
    };
    let count = if ty == T::Text { s.len() } else { s.chars().count() };
    if count > limit {
        return err(ErrorCode::DataTooLong, format!("Data too long for column of type {}", ty.sql_name()));
    }
    if matches!(ty, T::Char { .. }) {
        while b.last() == Some(&b' ') {
            b.pop();
        }
    }
    Ok(Value::Bytes(b))
}

/// Bytes within the length; BINARY padded with zero bytes.
fn coerce_binary(ty: ColumnType, v: Value) -> TernResult<Value> {
    use ColumnType as T;
    let Value::Bytes(mut b) = v else {
        return wrong_type(ty, &v);
    };
    let limit = match ty {
        T::Binary { len } | T::VarBinary { len } => len as usize,
        _ => 65_535,
    };
    if b.len() > limit {
        return err(ErrorCode::DataTooLong, format!("Data too long for column of type {}", ty.sql_name()));
    }
    if let T::Binary { len } = ty {
        b.resize(len as usize, 0);
    }
    Ok(Value::Bytes(b))
}

/// A DATETIME or TIMESTAMP (its range checked), to the column's fraction digits.
fn coerce_datetime(ty: ColumnType, v: Value, fsp: u8) -> TernResult<Value> {
    use ColumnType as T;
    let micros = match v {
        Value::DateTime(t) | Value::Timestamp(t) => Some(t),
        Value::Date(d) => Some(d as i64 * time::MICROS_PER_DAY),
        ref o => text_of(o).and_then(time::parse_datetime),
    };
    let Some(m) = micros else {
        return err(ErrorCode::InvalidValue, "Invalid Date/Time.");
    };
    let m = time::truncate_fsp(m, fsp);
    if matches!(ty, T::Timestamp { .. }) {
        // MySQL's TIMESTAMP range: 1970-01-01 00:00:01 .. 2038-01-19 03:14:07 UTC.
        if !(time::MICROS_PER_SEC..=2_147_483_647 * time::MICROS_PER_SEC + 999_999).contains(&m) {
            return err(ErrorCode::InvalidValue, "Invalid Date/Time.");
        }
        Ok(Value::Timestamp(m))
    } else {
        Ok(Value::DateTime(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_are_range_checked() {
        let t = ColumnType::TinyInt { unsigned: false };
        assert_eq!(coerce(t, Value::Int(-128)).unwrap(), Value::Int(-128));
        assert!(coerce(t, Value::Int(128)).is_err());
        assert_eq!(coerce(t, Value::str(" 12")).unwrap(), Value::Int(12));
        let u = ColumnType::BigInt { unsigned: true };
        assert_eq!(coerce(u, Value::UInt(u64::MAX)).unwrap(), Value::UInt(u64::MAX));
        assert!(coerce(u, Value::Int(-1)).is_err());
        assert!(coerce(u, Value::str("x")).is_err());
    }

    #[test]
    fn decimals() {
        let t = ColumnType::Decimal { precision: 5, scale: 2, unsigned: false };
        assert_eq!(coerce(t, Value::str("123.4")).unwrap(), Value::Decimal { v: 12340, scale: 2 });
        assert_eq!(coerce(t, Value::str("-1.005")).unwrap(), Value::Decimal { v: -101, scale: 2 });
        assert!(coerce(t, Value::str("1234.5")).is_err());
        assert_eq!(format_decimal(-101, 2), "-1.01");
        assert_eq!(format_decimal(5, 3), "0.005");
    }

    #[test]
    fn strings_and_binary() {
        assert_eq!(coerce(ColumnType::Char { len: 3 }, Value::str("ab ")).unwrap(), Value::str("ab"));
        assert!(coerce(ColumnType::VarChar { len: 2 }, Value::str("abc")).is_err());
        assert_eq!(coerce(ColumnType::VarChar { len: 2 }, Value::str("éé")).unwrap(), Value::str("éé"));
        assert_eq!(coerce(ColumnType::Binary { len: 3 }, Value::Bytes(vec![1])).unwrap(), Value::Bytes(vec![1, 0, 0]));
    }

    #[test]
    fn g6_formatting() {
        assert_eq!(format_g6(123.456789), "123.457");
        assert_eq!(format_g6(1234567.0), "1.23457e+06");
        assert_eq!(format_g6(0.0001), "0.0001");
        assert_eq!(format_g6(0.00001), "1e-05");
        assert_eq!(format_g6(1.5), "1.5");
        assert_eq!(format_g6(100.0), "100");
        assert_eq!(format_g6(-2.5e10), "-2.5e+10");
    }

    #[test]
    fn comparisons() {
        assert_eq!(Value::Int(3).cmp_sql(&Value::UInt(4)), Some(Ordering::Less));
        assert_eq!(Value::Decimal { v: 150, scale: 2 }.cmp_sql(&Value::Int(1)), Some(Ordering::Greater));
        assert_eq!(Value::Double(1.5).cmp_sql(&Value::Int(1)), Some(Ordering::Greater));
        assert_eq!(Value::Null.cmp_sql(&Value::Int(1)), None);
        assert_eq!(Value::str("a").cmp_sql(&Value::str("b")), Some(Ordering::Less));
    }
}
