//! JSON <-> column values, as RonDB's REST API (rdrs2) encodes them (interfaces.md §1.3): what
//! MySQL prints for the same value. Performance-critical (every returned column passes here).

use crate::error::RestError;
use serde_json::Value as Json;
use tern_client::{Column, ColumnType, Value};
use tern_types::time;
use tern_types::value::{coerce, format_decimal, format_g6};

pub use tern_types::base64::{base64_decode, base64_encode};

pub use crate::error::push_json_str;

/// The MySQL type name RonDB puts in "Wrong data type. Expecting X." messages.
fn type_name(ty: ColumnType) -> String {
    let base = ty.sql_name();
    let base = base.split('(').next().unwrap_or(&base).to_string();
    base.to_uppercase()
}

// Error texts of rdrs2's key encoding (`logicalclocks/rondb`,
// `storage/ndb/rest-server2/server/src/db_operations/pk/common.cpp`, `SetOperationPKCol`);
// written values use the same texts.

fn wrong_type(col: &Column) -> RestError {
    RestError::bad_request(format!("Wrong data type. Expecting {}. Column: {}", type_name(col.ty), col.name))
}

fn too_long(col: &Column) -> RestError {
    RestError::bad_request(format!(
        "Invalid column data. Data length is greater than column length. Column: {}",
        col.name
    ))
}

fn bad_time(col: &Column) -> RestError {
    RestError::bad_request(format!("Invalid Date/Time. Column: {}", col.name))
}

fn bad_base64(col: &Column) -> RestError {
    RestError::bad_request(format!("Invalid column data. Encountered error decoding base64. Column: {}", col.name))
}

/// A value from a filter (primary key) or a write column. `key`: FLOAT/DOUBLE/TEXT/BLOB are
/// refused as keys, and NULL is never a key.
pub fn parse_value(col: &Column, v: &Json, key: bool) -> Result<Value, RestError> {
    use ColumnType as T;
    if v.is_null() {
        if key || !col.nullable {
            return Err(RestError::bad_request(format!("Column cannot be null. Column: {}", col.name)));
        }
        return Ok(Value::Null);
    }
    let ty = col.ty;
    let raw = match ty {
        T::Float | T::Double | T::Text | T::Blob if key => {
            return Err(RestError::bad_request(format!(
                "Hash indexes on float and double; and indexes on Blob types are not supported. Column: {}",
                col.name
            )));
        }
        T::Year if key => year_key(col, v)?,
        t if t.is_integer() || t == T::Year => integer(col, v)?,
        T::Float | T::Double => match v {
            Json::Number(n) => Value::Double(n.as_f64().ok_or_else(|| wrong_type(col))?),
            Json::String(s) => Value::Double(s.trim().parse().map_err(|_| wrong_type(col))?),
            _ => return Err(wrong_type(col)),
        },
        T::Decimal { unsigned, .. } => {
            let text = match v {
                Json::Number(n) => n.to_string(),
                Json::String(s) => s.clone(),
                _ => return Err(wrong_decimal(ty, col)),
            };
            // rdrs2 refuses a negative value for DECIMAL UNSIGNED by name.
            if unsigned && text.trim_start().starts_with('-') {
                return Err(RestError::bad_request(format!(
                    "Wrong data type. Expecting DECIMAL UNSIGNED. Column: {}",
                    col.name
                )));
            }
            Value::Bytes(text.into_bytes())
        }
        T::Char { len } | T::VarChar { len } => {
            let s = v.as_str().ok_or_else(|| wrong_type(col))?;
            if s.chars().count() > len as usize {
                return Err(too_long(col));
            }
            Value::Bytes(s.as_bytes().to_vec())
        }
        T::Text => Value::Bytes(v.as_str().ok_or_else(|| wrong_type(col))?.as_bytes().to_vec()),
        T::Binary { len } | T::VarBinary { len } => binary(col, v, len)?,
        T::Blob => {
            Value::Bytes(base64_decode(v.as_str().ok_or_else(|| wrong_type(col))?).ok_or_else(|| bad_base64(col))?)
        }
        T::Bit { .. } => match v {
            Json::String(s) => Value::Bytes(base64_decode(s).ok_or_else(|| bad_base64(col))?),
            Json::Number(n) => Value::UInt(n.as_u64().ok_or_else(|| wrong_type(col))?),
            _ => return Err(wrong_type(col)),
        },
        T::Date => date(col, v.as_str().ok_or_else(|| bad_time(col))?)?,
        T::DateTime { .. } | T::Timestamp { .. } => {
            Value::Bytes(datetime_text(v.as_str().ok_or_else(|| bad_time(col))?).into_owned().into_bytes())
        }
        T::Time { .. } => Value::Bytes(v.as_str().ok_or_else(|| bad_time(col))?.as_bytes().to_vec()),
        _ => return Err(wrong_type(col)),
    };
    coerce(ty, raw).map_err(|e| match ty {
        T::Date | T::DateTime { .. } | T::Time { .. } | T::Timestamp { .. } => bad_time(col),
        T::Char { .. } | T::VarChar { .. } | T::Binary { .. } | T::VarBinary { .. } | T::Text | T::Blob
            if e.code == tern_types::ErrorCode::DataTooLong =>
        {
            too_long(col)
        }
        T::Char { .. } | T::VarChar { .. } | T::Text => {
            RestError::bad_request(format!("Invalid column data. {}. Column: {}", e.message, col.name))
        }
        T::Decimal { .. } => wrong_decimal(ty, col),
        T::Year if key => year_error(col),
        _ => wrong_type(col),
    })
}

/// rdrs2 names a DECIMAL's precision and scale, not the column.
fn wrong_decimal(ty: ColumnType, col: &Column) -> RestError {
    match ty {
        ColumnType::Decimal { precision, scale, .. } => RestError::bad_request(format!(
            "Wrong data type. Expecting Decimal with Precision: {precision} and Scale: {scale}"
        )),
        _ => wrong_type(col),
    }
}

/// An integer (or YEAR) from a JSON number or a decimal string.
fn integer(col: &Column, v: &Json) -> Result<Value, RestError> {
    let n: Option<i128> = match v {
        Json::Number(n) => n.as_i64().map(|x| x as i128).or_else(|| n.as_u64().map(|x| x as i128)),
        Json::String(s) if s.len() <= 64 => s.trim().parse::<i128>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n > i64::MAX as i128 && n <= u64::MAX as i128 => Ok(Value::UInt(n as u64)),
        Some(n) if n >= i64::MIN as i128 && n <= i64::MAX as i128 => Ok(Value::Int(n as i64)),
        _ => Err(wrong_type(col)),
    }
}

fn year_error(col: &Column) -> RestError {
    RestError::bad_request(format!(
        "Wrong data type. Expecting YEAR column. Possible values [1901-2155]. Column: {}",
        col.name
    ))
}

/// A YEAR key: 1901..=2155 only (rdrs2 does not take MySQL's zero year as a key).
fn year_key(col: &Column, v: &Json) -> Result<Value, RestError> {
    match integer(col, v) {
        Ok(Value::Int(n)) if (1901..=2155).contains(&n) => Ok(Value::Int(n)),
        _ => Err(year_error(col)),
    }
}

/// BINARY / VARBINARY from base64: the encoded text may be at most 4/3 of the column length.
fn binary(col: &Column, v: &Json, len: u32) -> Result<Value, RestError> {
    let text = v.as_str().ok_or_else(|| wrong_type(col))?;
    let max_encoded = 4 * (len as usize).div_ceil(3);
    if text.len() > max_encoded {
        return Err(RestError::bad_request(format!(
            "Invalid column data. Encoded data length is greater than 4/3 of maximum binary size. Column: {} Maximum binary size: {len}",
            col.name
        )));
    }
    let b = base64_decode(text).ok_or_else(|| bad_base64(col))?;
    if b.len() > len as usize {
        return Err(RestError::bad_request(format!(
            "Invalid column data. Decoded data length is greater than column length. Column: {} Length: {len}",
            col.name
        )));
    }
    Ok(Value::Bytes(b))
}

/// A DATE: MySQL's date-time syntax is accepted, but only with a zero time part (rdrs2:
/// "Expecting only date data").
fn date(col: &Column, s: &str) -> Result<Value, RestError> {
    if time::parse_date(s).is_some() {
        return Ok(Value::Bytes(s.as_bytes().to_vec()));
    }
    match time::parse_datetime(&datetime_text(s)) {
        Some(t) if t.rem_euclid(time::MICROS_PER_DAY) == 0 => {
            Ok(Value::Date(t.div_euclid(time::MICROS_PER_DAY) as i32))
        }
        Some(_) => {
            Err(RestError::bad_request(format!("Invalid column data. Expecting only date data. Column: {}", col.name)))
        }
        None => Err(bad_time(col)),
    }
}

/// MySQL's `str_to_datetime` (which rdrs2 uses) skips any run of punctuation and spaces between
/// the date and the time, so `1111-11-11 -11:11:11` is 11:11:11; Tern's parser wants one space.
fn datetime_text(s: &str) -> std::borrow::Cow<'_, str> {
    let t = s.trim();
    let Some(i) = t.find([' ', 'T']) else { return std::borrow::Cow::Borrowed(s) };
    let rest = &t[i + 1..];
    let time = rest.trim_start_matches(|c: char| c.is_ascii_punctuation() || c.is_ascii_whitespace());
    if time.len() == rest.len() {
        return std::borrow::Cow::Borrowed(s);
    }
    std::borrow::Cow::Owned(format!("{} {time}", &t[..i]))
}

/// Appends a stored value as RonDB returns it.
/// Appends a number's decimal text without a temporary String.
fn push_display(out: &mut String, v: impl std::fmt::Display) {
    use std::fmt::Write;
    let _ = write!(out, "{v}");
}

pub fn push_value(out: &mut String, ty: ColumnType, v: &Value) {
    use ColumnType as T;
    match v {
        Value::Null => out.push_str("null"),
        Value::Int(n) => push_display(out, n),
        Value::UInt(n) => push_display(out, n),
        Value::Year(y) => push_display(out, y),
        Value::Float(f) => out.push_str(&format_g6(*f as f64)),
        Value::Double(f) => out.push_str(&format_g6(*f)),
        Value::Decimal { v, scale } => out.push_str(&format_decimal(*v, *scale)),
        Value::Bytes(b) => match ty {
            T::Char { .. } | T::VarChar { .. } | T::Text => match std::str::from_utf8(b) {
                Ok(s) => push_json_str(out, s.trim_end_matches(' ')),
                Err(_) => push_json_str(out, String::from_utf8_lossy(b).trim_end_matches(' ')),
            },
            _ => {
                out.push('"');
                base64_encode(b, out);
                out.push('"');
            }
        },
        Value::Bit(n) => {
            let T::Bit { bits } = ty else { return out.push_str(&n.to_string()) };
            let bytes = (bits as usize).div_ceil(8);
            out.push('"');
            base64_encode(&n.to_be_bytes()[8 - bytes..], out);
            out.push('"');
        }
        Value::Date(d) => push_json_str(out, &time::format_date(*d)),
        Value::DateTime(t) | Value::Timestamp(t) => {
            let fsp = match ty {
                T::DateTime { fsp } | T::Timestamp { fsp } => fsp,
                _ => 0,
            };
            push_json_str(out, &time::format_datetime(*t, fsp));
        }
        Value::Time(t) => {
            let fsp = if let T::Time { fsp } = ty { fsp } else { 0 };
            push_json_str(out, &time::format_time(*t, fsp));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_print_as_mysql_does() {
        let mut s = String::new();
        push_value(
            &mut s,
            ColumnType::Decimal { precision: 10, scale: 2, unsigned: false },
            &Value::Decimal { v: 12340, scale: 2 },
        );
        s.push(' ');
        push_value(&mut s, ColumnType::Double, &Value::Double(1234567.0));
        s.push(' ');
        push_value(&mut s, ColumnType::Char { len: 5 }, &Value::str("ab  "));
        s.push(' ');
        push_value(&mut s, ColumnType::Bit { bits: 12 }, &Value::Bit(0x0ABC));
        s.push(' ');
        push_value(&mut s, ColumnType::DateTime { fsp: 3 }, &Value::DateTime(1_500_000));
        assert_eq!(s, r#"123.40 1.23457e+06 "ab" "Crw=" "1970-01-01 00:00:01.500""#);
    }

    #[test]
    fn key_values_are_checked() {
        let col = Column::new("id", ColumnType::TinyInt { unsigned: false }).not_null();
        assert_eq!(parse_value(&col, &serde_json::json!("12"), true).unwrap(), Value::Int(12));
        let e = parse_value(&col, &serde_json::json!(300), true).unwrap_err();
        assert!(e.message.contains("Wrong data type. Expecting TINYINT. Column: id"), "{}", e.message);
        let col = Column::new("f", ColumnType::Double).not_null();
        assert!(parse_value(&col, &serde_json::json!(1.5), true).unwrap_err().message.contains("float and double"));
        let col = Column::new("b", ColumnType::Binary { len: 4 }).not_null();
        assert_eq!(parse_value(&col, &serde_json::json!("AQI="), true).unwrap(), Value::Bytes(vec![1, 2, 0, 0]));
        let col = Column::new("d", ColumnType::Date).not_null();
        assert_eq!(
            parse_value(&col, &serde_json::json!("2024-02-30"), true).unwrap_err().message,
            "Invalid Date/Time. Column: d"
        );
        // A date-time is a date only when its time part is zero (rdrs2).
        assert_eq!(parse_value(&col, &serde_json::json!("2024-02-03 00:00:00"), true).unwrap(), Value::Date(19756));
        assert_eq!(
            parse_value(&col, &serde_json::json!("2024-02-03 10:00:00"), true).unwrap_err().message,
            "Invalid column data. Expecting only date data. Column: d"
        );
        // Punctuation before the time part is skipped, as MySQL's str_to_datetime does.
        let col = Column::new("t", ColumnType::DateTime { fsp: 6 }).not_null();
        assert_eq!(
            parse_value(&col, &serde_json::json!("1111-11-11 -11:11:11.123456"), true).unwrap(),
            parse_value(&col, &serde_json::json!("1111-11-11 11:11:11.123456"), true).unwrap()
        );
        let col = Column::new("de", ColumnType::Decimal { precision: 5, scale: 2, unsigned: false }).not_null();
        assert_eq!(
            parse_value(&col, &serde_json::json!("12345.6"), true).unwrap_err().message,
            "Wrong data type. Expecting Decimal with Precision: 5 and Scale: 2"
        );
        let col = Column::new("y", ColumnType::Year).not_null();
        assert!(
            parse_value(&col, &serde_json::json!(0), true).unwrap_err().message.contains("Possible values [1901-2155]")
        );
        let col = Column::new("vb", ColumnType::VarBinary { len: 3 }).not_null();
        assert!(
            parse_value(&col, &serde_json::json!("AAAAAAAA"), true).unwrap_err().message.contains("4/3 of maximum")
        );
        let col = Column::new("s", ColumnType::VarChar { len: 2 }).not_null();
        assert!(
            parse_value(&col, &serde_json::json!("abc"), true)
                .unwrap_err()
                .message
                .contains("greater than column length")
        );
    }
}
