//! Row helpers: projection, TTL expiry, interpreted updates and numeric addition.

use super::*;

/// A read's result: the whole stored row, or the projected columns as a value list.
pub(super) fn project(layout: &RowLayout, row: &[u8], projection: Option<&[u16]>) -> OpResult {
    match projection {
        None => OpResult::Row(row.to_vec()),
        Some(cols) => {
            // Copies the stored bytes of each column (no decoding into values).
            let mut buf = Vec::with_capacity(row.len().min(256) + 4 * cols.len());
            match layout.project_into(row, cols, &mut buf) {
                Ok(()) => OpResult::Row(buf),
                Err(e) => OpResult::Error(e),
            }
        }
    }
}

/// Whether a row of a table with TTL `(column, seconds)` is expired at `now_us` (µs since the
/// Unix epoch). A NULL TTL column never expires.
pub(super) fn row_expired(layout: &RowLayout, (col, seconds): (usize, u64), row: &[u8], now_us: i64) -> bool {
    match layout.get(row, col) {
        Ok(Value::DateTime(t) | Value::Timestamp(t)) => now_us > t.saturating_add(seconds as i64 * 1_000_000),
        _ => false,
    }
}

/// The result of a write that returns the previous row's columns when asked to.
pub(super) fn previous(layout: &RowLayout, old: Option<&[u8]>, projection: Option<&[u16]>) -> OpResult {
    match (projection, old) {
        (None, _) => OpResult::Done,
        (Some(cols), Some(r)) => project(layout, r, Some(cols)),
        (Some(_), None) => OpResult::NotFound,
    }
}

/// Applies interpreted column updates to a stored row, returning the new row.
pub(super) fn apply_updates(layout: &RowLayout, row: &[u8], updates: &[ColumnUpdate]) -> TernResult<Vec<u8>> {
    let mut values = layout.decode_row(row)?;
    for u in updates {
        let c = u.col as usize;
        let Some(&ty) = layout.types.get(c) else {
            return Err(TernError::new(ErrorCode::NoSuchColumn, format!("column {c} does not exist")));
        };
        if layout.key_cols.contains(&u.col) {
            return Err(TernError::new(ErrorCode::InvalidRequest, "an update cannot change the primary key"));
        }
        let v = match &u.expr {
            UpdateExpr::Set(v) => coerce(ty, v.clone())?,
            UpdateExpr::Add(d) => add_values(ty, &values[c], d)?,
            UpdateExpr::Expect(v) => {
                if values[c].cmp_sql(v) != Some(std::cmp::Ordering::Equal) {
                    return Err(TernError::new(ErrorCode::ConditionFailed, format!("column {c} has another value")));
                }
                continue;
            }
        };
        if v.is_null() && !layout.nullable[c] {
            return Err(TernError::new(ErrorCode::NotNull, "Column cannot be null"));
        }
        values[c] = v;
    }
    let mut out = Vec::with_capacity(row.len());
    layout.encode_row(&values, &mut out)?;
    Ok(out)
}

/// Parses a signed 64-bit decimal integer the way Redis does (`string2ll`): optional '-', no
/// '+', no spaces, no leading zeros, at most 20 characters.
pub fn parse_decimal_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let (neg, digits) = match b[0] {
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || (digits[0] == b'0' && (digits.len() > 1 || neg)) {
        return None;
    }
    let mut v: i128 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (d - b'0') as i128;
        if v > i64::MAX as i128 + 1 {
            return None;
        }
    }
    i64::try_from(if neg { -v } else { v }).ok()
}

/// Numeric addition executed in the data node, checked against the column type.
pub(super) fn add_values(ty: ColumnType, cur: &Value, delta: &Value) -> TernResult<Value> {
    if cur.is_null() || delta.is_null() {
        return Ok(Value::Null);
    }
    let overflow = || TernError::new(ErrorCode::ValueOutOfRange, "increment or decrement would overflow");
    match ty {
        t if t.is_integer() => {
            let a = cur.as_i128().ok_or_else(overflow)?;
            let b =
                delta.as_i128().ok_or_else(|| TernError::new(ErrorCode::InvalidValue, "value is not an integer"))?;
            let (lo, hi) = t.int_range().expect("integer");
            let s = a.checked_add(b).filter(|s| (lo..=hi).contains(s)).ok_or_else(overflow)?;
            Ok(if t.is_unsigned() { Value::UInt(s as u64) } else { Value::Int(s as i64) })
        }
        ColumnType::Float | ColumnType::Double => {
            let a = cur.as_f64().unwrap_or(0.0);
            let b = delta.as_f64().ok_or_else(|| TernError::new(ErrorCode::InvalidValue, "value is not a number"))?;
            coerce(ty, Value::Double(a + b))
        }
        ColumnType::Decimal { scale, .. } => {
            let Value::Decimal { v: a, .. } = cur else {
                return Err(overflow());
            };
            let b = match delta {
                Value::Decimal { v, scale: s } => rescale(*v, *s, scale),
                other => other.as_i128().and_then(|n| rescale(n, 0, scale)),
            }
            .ok_or_else(overflow)?;
            coerce(ty, Value::Decimal { v: a.checked_add(b).ok_or_else(overflow)?, scale })
        }
        ColumnType::VarBinary { .. } | ColumnType::VarChar { .. } | ColumnType::Blob | ColumnType::Text => {
            let delta = delta
                .as_i128()
                .and_then(|d| i64::try_from(d).ok())
                .ok_or_else(|| TernError::new(ErrorCode::InvalidValue, "value is not an integer or out of range"))?;
            let bytes = match cur {
                Value::Bytes(b) => &b[..],
                _ => &[],
            };
            let a = parse_decimal_i64(bytes)
                .ok_or_else(|| TernError::new(ErrorCode::InvalidValue, "value is not an integer or out of range"))?;
            let sum = a.checked_add(delta).ok_or_else(overflow)?;
            coerce(ty, Value::Bytes(sum.to_string().into_bytes()))
        }
        _ => Err(TernError::new(ErrorCode::InvalidValue, format!("cannot add to a {} column", ty.sql_name()))),
    }
}
