//! Text and bytes: MySQL's string functions (positions count characters of UTF-8 text),
//! digests and encodings.

use super::{FnCtx, any_null, arg_int, arg_text, bytes, fits};
use crate::eval::{EResult, compare, text, to_f64, to_i128};
use std::cmp::Ordering;
use tern_types::Value;
use tern_types::value::format_decimal;

/// Character positions for UTF-8 text (invalid bytes count one each).
pub(super) fn chars(b: &[u8]) -> Vec<&str> {
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

fn trim_bytes(s: &[u8], rem: &[u8], leading: bool, trailing: bool) -> Vec<u8> {
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

/// Planner-made: the `n` big-endian bytes of a BIT value: BIT_BYTES(value, n).
pub(super) fn bit_bytes(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let n = arg_int(args, 1).unwrap_or(8).clamp(1, 8) as usize;
    match &args[0] {
        Value::Null => Ok(Value::Null),
        v => {
            let x = to_i128(v).unwrap_or(0) as u64;
            bytes(x.to_be_bytes()[8 - n..].to_vec())
        }
    }
}

/// Planner-made: the sort value of an ENUM (member number) or a SET (bit mask of members)
/// column: MEMBER_INDEX(value, is_set, member...).
pub(super) fn member_index(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(v) = arg_text(args, 0) else { return Ok(Value::Null) };
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

pub(super) fn concat(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    let parts: Vec<Vec<u8>> = args.iter().filter_map(text).collect();
    fits("CONCAT", parts.iter().map(Vec::len).sum())?;
    bytes(parts.concat())
}

pub(super) fn concat_ws(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(sep) = arg_text(args, 0) else { return Ok(Value::Null) };
    let parts: Vec<Vec<u8>> = args[1..].iter().filter_map(text).collect();
    fits("CONCAT_WS", parts.iter().map(|p| p.len() + sep.len()).sum())?;
    bytes(parts.join(&sep[..]))
}

pub(super) fn length(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(arg_text(args, 0).map(|s| Value::Int(s.len() as i64)).unwrap_or(Value::Null))
}

pub(super) fn char_length(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(arg_text(args, 0)
        .map(|s| Value::Int(chars(&s).len().max(if s.is_empty() { 0 } else { 1 }) as i64))
        .unwrap_or(Value::Null))
}

fn case(args: &[Value], upper: bool) -> EResult<Value> {
    let Some(s) = arg_text(args, 0) else { return Ok(Value::Null) };
    let s = String::from_utf8_lossy(&s);
    bytes(if upper { s.to_uppercase() } else { s.to_lowercase() }.into_bytes())
}

pub(super) fn upper(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    case(args, true)
}

pub(super) fn lower(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    case(args, false)
}

pub(super) fn substring(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    bytes(substr(&arg_text(args, 0).unwrap_or_default(), arg_int(args, 1).unwrap_or(0), arg_int(args, 2)))
}

fn side(args: &[Value], left: bool) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    let s = arg_text(args, 0).unwrap_or_default();
    let n = arg_int(args, 1).unwrap_or(0).max(0) as usize;
    let cs = chars(&s);
    let k = n.min(cs.len());
    bytes(if left { cs[..k].concat() } else { cs[cs.len() - k..].concat() }.into_bytes())
}

pub(super) fn left(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    side(args, true)
}

pub(super) fn right(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    side(args, false)
}

pub(super) fn repeat(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    let n = arg_int(args, 1).unwrap_or(0).max(0) as usize;
    let s = arg_text(args, 0).unwrap_or_default();
    fits("REPEAT", s.len().saturating_mul(n))?;
    bytes(s.repeat(n))
}

pub(super) fn space(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    bytes(vec![b' '; arg_int(args, 0).unwrap_or(0).clamp(0, 1 << 20) as usize])
}

pub(super) fn replace(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    let t = |i| arg_text(args, i).unwrap_or_default();
    let (s, from, to) = (t(0), t(1), t(2));
    if from.is_empty() {
        return bytes(s);
    }
    let mut out = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i..].starts_with(&from) {
            fits("REPLACE", out.len() + to.len())?;
            out.extend_from_slice(&to);
            i += from.len();
        } else {
            out.push(s[i]);
            i += 1;
        }
    }
    bytes(out)
}

pub(super) fn reverse(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(arg_text(args, 0)
        .map(|s| Value::Bytes(chars(&s).into_iter().rev().collect::<String>().into_bytes()))
        .unwrap_or(Value::Null))
}

/// TRIM(mode, string, [remove]) as the parser makes it.
pub(super) fn trim(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(s) = arg_text(args, 1) else { return Ok(Value::Null) };
    let mode = arg_text(args, 0).unwrap_or_default();
    let rem = if args.len() > 2 { arg_text(args, 2).unwrap_or_default() } else { b" ".to_vec() };
    bytes(trim_bytes(&s, &rem, mode != b"TRAILING", mode != b"LEADING"))
}

pub(super) fn ltrim(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(s) = arg_text(args, 0) else { return Ok(Value::Null) };
    bytes(trim_bytes(&s, b" ", true, false))
}

pub(super) fn rtrim(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(s) = arg_text(args, 0) else { return Ok(Value::Null) };
    bytes(trim_bytes(&s, b" ", false, true))
}

fn pad(args: &[Value], name: &str, left: bool) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    let s = arg_text(args, 0).unwrap_or_default();
    let n = arg_int(args, 1).unwrap_or(0).max(0) as usize;
    let pad = arg_text(args, 2).unwrap_or_default();
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
    bytes(if left { fill + &s } else { s + &fill }.into_bytes())
}

pub(super) fn lpad(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    pad(args, "LPAD", true)
}

pub(super) fn rpad(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    pad(args, "RPAD", false)
}

/// The 1-based character position of `needle` in `hay` at or after character `from` (0-based),
/// 0 when absent.
fn find_from(needle: &[u8], hay: &[u8], from: usize) -> Value {
    let hs = String::from_utf8_lossy(hay);
    let ns = String::from_utf8_lossy(needle);
    let cidx: Vec<usize> = hs.char_indices().map(|(i, _)| i).collect();
    if from > cidx.len() {
        return Value::Int(0);
    }
    let byte_from = cidx.get(from).copied().unwrap_or(hs.len());
    Value::Int(match hs[byte_from..].find(&*ns) {
        Some(p) => (hs[..byte_from + p].chars().count() + 1) as i64,
        None => 0,
    })
}

/// LOCATE(needle, hay[, from]).
pub(super) fn locate(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    let t = |i| arg_text(args, i).unwrap_or_default();
    let from = arg_int(args, 2).unwrap_or(1).max(1) as usize - 1;
    Ok(find_from(&t(0), &t(1), from))
}

/// INSTR(hay, needle).
pub(super) fn instr(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    let t = |i| arg_text(args, i).unwrap_or_default();
    Ok(find_from(&t(1), &t(0), 0))
}

/// POSITION(needle IN hay).
pub(super) fn position(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    let t = |i| arg_text(args, i).unwrap_or_default();
    Ok(find_from(&t(0), &t(1), 0))
}

/// ASCII / ORD: the first byte.
pub(super) fn ascii(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(arg_text(args, 0).map(|s| Value::Int(s.first().copied().unwrap_or(0) as i64)).unwrap_or(Value::Null))
}

pub(super) fn hex(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    match &args[0] {
        Value::Null => Ok(Value::Null),
        Value::Bytes(b) => bytes(b.iter().map(|x| format!("{x:02X}")).collect::<String>().into_bytes()),
        other => bytes(format!("{:X}", to_i128(other).unwrap_or(0) as u64).into_bytes()),
    }
}

pub(super) fn unhex(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(s) = arg_text(args, 0) else { return Ok(Value::Null) };
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

fn hex_digest(d: &[u8]) -> EResult<Value> {
    bytes(tern_types::digest::hex(d).into_bytes())
}

pub(super) fn md5(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(s) = arg_text(args, 0) else { return Ok(Value::Null) };
    hex_digest(&tern_types::digest::md5(&s))
}

pub(super) fn sha1(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(s) = arg_text(args, 0) else { return Ok(Value::Null) };
    hex_digest(&tern_types::digest::sha1(&s))
}

pub(super) fn sha2(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(s) = arg_text(args, 0) else { return Ok(Value::Null) };
    use tern_types::digest;
    match to_i128(&args[1]) {
        None => Ok(Value::Null),
        Some(0 | 256) => hex_digest(&digest::sha256(&s)),
        Some(224) => hex_digest(&digest::sha224(&s)),
        Some(384) => hex_digest(&digest::sha384(&s)),
        Some(512) => hex_digest(&digest::sha512(&s)),
        // MySQL: NULL for a length it does not know.
        Some(_) => Ok(Value::Null),
    }
}

pub(super) fn crc32(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(arg_text(args, 0).map(|s| Value::Int(tern_types::digest::crc32(&s) as i64)).unwrap_or(Value::Null))
}

pub(super) fn to_base64(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(s) = arg_text(args, 0) else { return Ok(Value::Null) };
    let mut out = String::new();
    tern_types::base64::base64_encode(&s, &mut out);
    bytes(out.into_bytes())
}

pub(super) fn from_base64(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(s) = arg_text(args, 0) else { return Ok(Value::Null) };
    let s: Vec<u8> = s.into_iter().filter(|c| !c.is_ascii_whitespace()).collect();
    Ok(tern_types::base64::base64_decode(&String::from_utf8_lossy(&s)).map(Value::Bytes).unwrap_or(Value::Null))
}

/// FORMAT(x, d): rounded half away from zero to d digits, thousands separated by commas.
pub(super) fn format(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    if any_null(args) {
        return Ok(Value::Null);
    }
    let d = arg_int(args, 1).unwrap_or(0).clamp(0, 30);
    let x = match &args[0] {
        Value::Int(i) => Value::Decimal { v: *i as i128, scale: 0 },
        Value::UInt(u) => Value::Decimal { v: *u as i128, scale: 0 },
        v @ Value::Decimal { .. } => v.clone(),
        o => Value::Double(to_f64(o).unwrap_or(0.0)),
    };
    let text = match super::round(&x, d, false)? {
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

/// SUBSTRING_INDEX(s, delim, n): the text before the n-th delimiter (n > 0) or after the n-th
/// from the end.
pub(super) fn substring_index(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let (Some(s), Some(d), Some(n)) = (arg_text(args, 0), arg_text(args, 1), arg_int(args, 2)) else {
        return Ok(Value::Null);
    };
    if d.is_empty() || n == 0 {
        return bytes(Vec::new());
    }
    let at: Vec<usize> = s.windows(d.len()).enumerate().filter(|(_, w)| *w == &d[..]).map(|(i, _)| i).collect();
    let k = n.unsigned_abs().min(usize::MAX as u64) as usize;
    if k > at.len() {
        return bytes(s);
    }
    bytes(if n > 0 { s[..at[k - 1]].to_vec() } else { s[at[at.len() - k] + d.len()..].to_vec() })
}

pub(super) fn field(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    let Some(x) = args.first().filter(|v| !v.is_null()) else { return Ok(Value::Int(0)) };
    Ok(Value::Int(args[1..].iter().position(|v| compare(x, v) == Some(Ordering::Equal)).map_or(0, |i| i as i64 + 1)))
}

pub(super) fn elt(args: &[Value], _: &dyn FnCtx) -> EResult<Value> {
    Ok(match arg_int(args, 0) {
        Some(n) if n >= 1 && (n as usize) < args.len() => args[n as usize].clone(),
        _ => Value::Null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_and_substrings() {
        assert_eq!(trim_bytes(b"xxaxx", b"x", true, false), b"axx");
        assert_eq!(trim_bytes(b"xxaxx", b"x", false, true), b"xxa");
        assert_eq!(trim_bytes(b"abab", b"ab", true, true), b"");
        assert_eq!(substr("héllo".as_bytes(), 2, Some(3)), "éll".as_bytes());
        assert_eq!(substr(b"hello", -3, None), b"llo");
        assert_eq!(substr(b"hello", 0, None), b"");
        assert_eq!(find_from(b"l", b"hello", 3), Value::Int(4));
        assert_eq!(find_from(b"z", b"hello", 0), Value::Int(0));
    }
}
