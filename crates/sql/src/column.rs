//! Column values the planner, the writers and DDL share: an ENUM/SET column's stored member
//! text and a column's implicit default.

use crate::eval;
use tern_types::Value;
use tern_types::schema::Members;

/// The stored text of value `v` in an ENUM/SET column with members `m`: a member (matched
/// without regard to case, stored as declared) or its 1-based number for an ENUM; members
/// separated by commas, or a bit mask of them, for a SET (stored in member order, each once).
/// None: not a member (MySQL's 1265 in strict mode).
pub fn member_value(m: &Members, v: Value) -> Option<Value> {
    // Members match exactly: Tern compares text as utf8mb4_bin.
    let find = |t: &str| m.values.iter().position(|x| x == t);
    let number = match &v {
        Value::Bytes(_) => None,
        other => Some(eval::to_i128(other)?),
    };
    if !m.set {
        let i = match (number, &v) {
            (Some(n), _) => usize::try_from(n).ok()?.checked_sub(1)?,
            (None, Value::Bytes(b)) => find(std::str::from_utf8(b).ok()?.trim_end_matches(' '))?,
            _ => return None,
        };
        return m.values.get(i).map(|x| Value::Bytes(x.clone().into_bytes()));
    }
    let mut mask: u64 = match (number, &v) {
        (Some(n), _) => u64::try_from(n).ok()?,
        (None, Value::Bytes(b)) => {
            let t = std::str::from_utf8(b).ok()?;
            let mut mask = 0u64;
            for part in t.split(',').filter(|p| !p.is_empty()) {
                mask |= 1 << find(part.trim_end_matches(' '))?;
            }
            mask
        }
        _ => return None,
    };
    if m.values.len() < 64 && mask >> m.values.len() != 0 {
        return None;
    }
    let mut out = Vec::new();
    for x in &m.values {
        if mask & 1 == 1 {
            if !out.is_empty() {
                out.push(b',');
            }
            out.extend_from_slice(x.as_bytes());
        }
        mask >>= 1;
    }
    Some(Value::Bytes(out))
}

/// The value a column takes when a row gives none: its default; for a NOT NULL ENUM without one,
/// its first member (a SET: ''), MySQL's implicit default.
pub fn default_of(col: &tern_types::Column) -> Value {
    match (&col.default, &col.members) {
        (Some(v), _) => v.clone(),
        (None, Some(m)) if !col.nullable => {
            Value::Bytes(if m.set { Vec::new() } else { m.values[0].clone().into_bytes() })
        }
        _ => Value::Null,
    }
}
