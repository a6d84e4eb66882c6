//! JSON <-> column values, as RonDB's REST API (rdrs2) encodes them (interfaces.md §1.3): what
//! MySQL prints for the same value. Performance-critical (every returned column passes here).

use crate::error::RestError;
use serde_json::Value as Json;
use tern_client::{Column, ColumnType, Value};
use tern_types::time;
use tern_types::value::{coerce, format_decimal, format_g6};

pub use tern_types::base64::{base64_decode, base64_encode};

/// Appends `s` as a JSON string.
pub fn push_json_str(out: &mut String, s: &str) {
    out.push('"');
    if !s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        out.push_str(s);
        out.push('"');
        return;
    }
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The MySQL type name RonDB puts in "Wrong data type. Expecting X." messages.
fn type_name(ty: ColumnType) -> String {
    let base = ty.sql_name();
    let base = base.split('(').next().unwrap_or(&base).to_string();
    base.to_uppercase()
}

fn wrong_type(col: &Column) -> RestError {
    RestError::bad_request(format!("Wrong data type. Expecting {}. Column: {}", type_name(col.ty), col.name))
}

fn too_long() -> RestError {
    RestError::bad_request("Invalid column data. Data length is greater than column length")
}

fn bad_time() -> RestError {
    RestError::bad_request("Invalid Date/Time.")
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
    let text = || -> Option<&str> { v.as_str() };
    let ty = col.ty;
    let raw = match ty {
        T::Float | T::Double | T::Text | T::Blob if key => {
            return Err(RestError::bad_request(
                "Hash indexes on float and double; and indexes on Blob types are not supported.",
            ));
        }
        t if t.is_integer() || t == T::Year => {
            let n: Option<i128> = match v {
                Json::Number(n) => n.as_i64().map(|x| x as i128).or_else(|| n.as_u64().map(|x| x as i128)),
                Json::String(s) => s.trim().parse::<i128>().ok(),
                _ => None,
            };
            match n {
                Some(n) if n > i64::MAX as i128 && n <= u64::MAX as i128 => Value::UInt(n as u64),
                Some(n) if n >= i64::MIN as i128 && n <= i64::MAX as i128 => Value::Int(n as i64),
                _ => return Err(wrong_type(col)),
            }
        }
        T::Float | T::Double => match v {
            Json::Number(n) => Value::Double(n.as_f64().ok_or_else(|| wrong_type(col))?),
            Json::String(s) => Value::Double(s.trim().parse().map_err(|_| wrong_type(col))?),
            _ => return Err(wrong_type(col)),
        },
        T::Decimal { .. } => match v {
            Json::Number(n) => Value::Bytes(n.to_string().into_bytes()),
            Json::String(s) => Value::Bytes(s.clone().into_bytes()),
            _ => return Err(wrong_type(col)),
        },
        T::Char { len } | T::VarChar { len } => {
            let s = text().ok_or_else(|| wrong_type(col))?;
            if s.chars().count() > len as usize {
                return Err(too_long());
            }
            Value::Bytes(s.as_bytes().to_vec())
        }
        T::Text => Value::Bytes(text().ok_or_else(|| wrong_type(col))?.as_bytes().to_vec()),
        T::Binary { len } | T::VarBinary { len } => {
            let b = base64_decode(text().ok_or_else(|| wrong_type(col))?)
                .ok_or_else(|| RestError::bad_request("Invalid column data. The value is not valid base64"))?;
            if b.len() > len as usize {
                return Err(too_long());
            }
            Value::Bytes(b)
        }
        T::Blob => Value::Bytes(
            base64_decode(text().ok_or_else(|| wrong_type(col))?)
                .ok_or_else(|| RestError::bad_request("Invalid column data. The value is not valid base64"))?,
        ),
        T::Bit { .. } => match v {
            Json::String(s) => Value::Bytes(
                base64_decode(s)
                    .ok_or_else(|| RestError::bad_request("Invalid column data. The value is not valid base64"))?,
            ),
            Json::Number(n) => Value::UInt(n.as_u64().ok_or_else(|| wrong_type(col))?),
            _ => return Err(wrong_type(col)),
        },
        T::Date | T::DateTime { .. } | T::Time { .. } => Value::Bytes(text().ok_or_else(bad_time)?.as_bytes().to_vec()),
        T::Timestamp { .. } => Value::Bytes(text().ok_or_else(bad_time)?.as_bytes().to_vec()),
        _ => return Err(wrong_type(col)),
    };
    coerce(ty, raw).map_err(|e| match ty {
        T::Date | T::DateTime { .. } | T::Time { .. } | T::Timestamp { .. } => bad_time(),
        T::Char { .. } | T::VarChar { .. } | T::Binary { .. } | T::VarBinary { .. } | T::Text | T::Blob
            if e.code == tern_types::ErrorCode::DataTooLong =>
        {
            too_long()
        }
        T::Char { .. } | T::VarChar { .. } | T::Text => {
            RestError::bad_request(format!("Invalid column data. {}. Column: {}", e.message, col.name))
        }
        _ => wrong_type(col),
    })
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
        push_value(&mut s, ColumnType::Decimal { precision: 10, scale: 2 }, &Value::Decimal { v: 12340, scale: 2 });
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
            "Invalid Date/Time."
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
