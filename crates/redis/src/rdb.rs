//! Redis's RDB value format as DUMP and RESTORE use it (facts from redis's rdb.c, listpack.c,
//! intset.c and lzf_d.c, RDB version 10 of redis 7.0): a payload is the value's type byte, its
//! encoding, the RDB version (2 bytes, little-endian) and a CRC-64 (Jones polynomial, reflected,
//! little-endian) of everything before it.
//!
//! DUMP writes the plain encodings every redis since 2.x loads (string, list, set, hash, and
//! sorted sets with binary scores), with redis's integer encoding of short integer strings, so a
//! small string's payload is byte for byte redis-server's. RESTORE reads those, and the compact
//! encodings redis 7.0 and 7.2 write (listpacks, intsets, quicklists of listpacks, LZF-compressed
//! strings). Ziplist and zipmap encodings (RDB 9 and older) and streams are refused with redis's
//! "Bad data format".

/// The RDB version DUMP writes (redis 7.0's) and the newest RESTORE reads (redis 7.2's).
pub const VERSION: u16 = 10;
pub const VERSION_MAX: u16 = 11;

/// A value as the payload holds it.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    String(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    /// (member, score).
    Zset(Vec<(Vec<u8>, f64)>),
    /// (field, value).
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
}

const T_STRING: u8 = 0;
const T_LIST: u8 = 1;
const T_SET: u8 = 2;
const T_ZSET: u8 = 3;
const T_HASH: u8 = 4;
const T_ZSET_2: u8 = 5;
const T_SET_INTSET: u8 = 11;
const T_HASH_LISTPACK: u8 = 16;
const T_ZSET_LISTPACK: u8 = 17;
const T_LIST_QUICKLIST_2: u8 = 18;
const T_SET_LISTPACK: u8 = 20;

/// Why a payload was refused (RESTORE answers these texts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Version or checksum.
    Checksum,
    BadFormat,
}

// ------------------------------------------------------------------ CRC-64

/// redis's `crc64(0, bytes)`: CRC-64/REDIS (Jones polynomial, reflected, no final XOR).
pub fn crc64(bytes: &[u8]) -> u64 {
    const CRC: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);
    CRC.checksum(bytes)
}

// ------------------------------------------------------------------ writing

fn put_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.push(0x40 | (n >> 8) as u8);
        out.push(n as u8);
    } else if n <= u32::MAX as u64 {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// A string, integer-encoded when it is the canonical text of a small integer (as redis's
/// `rdbTryIntegerEncoding`).
fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11
        && let Some(v) = std::str::from_utf8(s).ok().and_then(|t| t.parse::<i64>().ok())
        && v.to_string().as_bytes() == s
    {
        if let Ok(x) = i8::try_from(v) {
            out.extend_from_slice(&[0xc0, x as u8]);
            return;
        }
        if let Ok(x) = i16::try_from(v) {
            out.push(0xc1);
            out.extend_from_slice(&x.to_le_bytes());
            return;
        }
        if let Ok(x) = i32::try_from(v) {
            out.push(0xc2);
            out.extend_from_slice(&x.to_le_bytes());
            return;
        }
    }
    put_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// DUMP's payload of a value.
pub fn dump(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    match v {
        Value::String(s) => {
            out.push(T_STRING);
            put_string(&mut out, s);
        }
        Value::List(items) | Value::Set(items) => {
            out.push(if matches!(v, Value::List(_)) { T_LIST } else { T_SET });
            put_len(&mut out, items.len() as u64);
            items.iter().for_each(|i| put_string(&mut out, i));
        }
        Value::Zset(entries) => {
            out.push(T_ZSET_2);
            put_len(&mut out, entries.len() as u64);
            for (m, s) in entries {
                put_string(&mut out, m);
                out.extend_from_slice(&s.to_le_bytes());
            }
        }
        Value::Hash(pairs) => {
            out.push(T_HASH);
            put_len(&mut out, pairs.len() as u64);
            for (f, x) in pairs {
                put_string(&mut out, f);
                put_string(&mut out, x);
            }
        }
    }
    out.extend_from_slice(&VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

// ------------------------------------------------------------------ reading

struct Reader<'a> {
    b: &'a [u8],
}

type Res<T> = Result<T, Refused>;

impl<'a> Reader<'a> {
    fn u8(&mut self) -> Res<u8> {
        let (&x, rest) = self.b.split_first().ok_or(Refused::BadFormat)?;
        self.b = rest;
        Ok(x)
    }

    fn take(&mut self, n: usize) -> Res<&'a [u8]> {
        if n > self.b.len() {
            return Err(Refused::BadFormat);
        }
        let (x, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(x)
    }

    /// A length, or `Err(special)` in `Ok` for a string's special encoding.
    fn len_or_enc(&mut self) -> Res<Result<u64, u8>> {
        let b = self.u8()?;
        Ok(match b >> 6 {
            0 => Ok((b & 0x3f) as u64),
            1 => Ok((((b & 0x3f) as u64) << 8) | self.u8()? as u64),
            2 if b == 0x80 => Ok(u32::from_be_bytes(self.take(4)?.try_into().unwrap_or_default()) as u64),
            2 if b == 0x81 => Ok(u64::from_be_bytes(self.take(8)?.try_into().unwrap_or_default())),
            2 => return Err(Refused::BadFormat),
            _ => Err(b & 0x3f),
        })
    }

    fn len(&mut self) -> Res<usize> {
        match self.len_or_enc()? {
            Ok(n) if n <= self.b.len() as u64 * 8 + 16 => Ok(n as usize),
            _ => Err(Refused::BadFormat),
        }
    }

    fn string(&mut self) -> Res<Vec<u8>> {
        match self.len_or_enc()? {
            Ok(n) => Ok(self.take(usize::try_from(n).map_err(|_| Refused::BadFormat)?)?.to_vec()),
            Err(0) => Ok((self.u8()? as i8).to_string().into_bytes()),
            Err(1) => Ok(i16::from_le_bytes(self.take(2)?.try_into().unwrap_or_default()).to_string().into_bytes()),
            Err(2) => Ok(i32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default()).to_string().into_bytes()),
            Err(3) => {
                let clen = self.len()?;
                let ulen = self.len_or_enc()?.map_err(|_| Refused::BadFormat)?;
                // No value may be bigger than a bulk string (redis's proto-max-bulk-len ceiling).
                if ulen > crate::db::VALUE_MAX as u64 {
                    return Err(Refused::BadFormat);
                }
                lzf_decompress(self.take(clen)?, ulen as usize)
            }
            Err(_) => Err(Refused::BadFormat),
        }
    }

    /// The old sorted-set score: a length byte then its text (253 NaN, 254 +inf, 255 -inf).
    fn text_score(&mut self) -> Res<f64> {
        match self.u8()? {
            253 => Ok(f64::NAN),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => {
                std::str::from_utf8(self.take(n as usize)?).ok().and_then(|s| s.parse().ok()).ok_or(Refused::BadFormat)
            }
        }
    }
}

/// LZF decompression (lzf_d.c's format): literal runs (control < 32) and back references.
fn lzf_decompress(mut input: &[u8], ulen: usize) -> Res<Vec<u8>> {
    // (Grown as it fills: a payload's claimed length is not trusted for an allocation.)
    let mut out: Vec<u8> = Vec::with_capacity(ulen.min(input.len().saturating_mul(4)));
    while let Some((&ctrl, rest)) = input.split_first() {
        input = rest;
        if ctrl < 32 {
            let n = ctrl as usize + 1;
            if n > input.len() || out.len() + n > ulen {
                return Err(Refused::BadFormat);
            }
            out.extend_from_slice(&input[..n]);
            input = &input[n..];
        } else {
            let mut n = (ctrl >> 5) as usize;
            if n == 7 {
                let (&x, rest) = input.split_first().ok_or(Refused::BadFormat)?;
                n += x as usize;
                input = rest;
            }
            n += 2;
            let (&lo, rest) = input.split_first().ok_or(Refused::BadFormat)?;
            input = rest;
            let back = (((ctrl & 0x1f) as usize) << 8) + lo as usize + 1;
            if back > out.len() || out.len() + n > ulen {
                return Err(Refused::BadFormat);
            }
            let start = out.len() - back;
            for i in 0..n {
                let b = out[start + i];
                out.push(b);
            }
        }
    }
    if out.len() != ulen {
        return Err(Refused::BadFormat);
    }
    Ok(out)
}

/// The entries of a listpack (listpack.c): integers as their decimal text.
fn listpack(lp: &[u8]) -> Res<Vec<Vec<u8>>> {
    if lp.len() < 7 || u32::from_le_bytes(lp[..4].try_into().unwrap_or_default()) as usize != lp.len() {
        return Err(Refused::BadFormat);
    }
    let mut p = &lp[6..];
    let mut out = Vec::new();
    loop {
        let (&b, _) = p.split_first().ok_or(Refused::BadFormat)?;
        if b == 0xff {
            break;
        }
        let int = |v: i64| v.to_string().into_bytes();
        let get = |p: &[u8], from: usize, n: usize| -> Res<Vec<u8>> {
            p.get(from..from + n).map(<[u8]>::to_vec).ok_or(Refused::BadFormat)
        };
        let sign =
            |v: u64, bits: u32| -> i64 { if v >= 1 << (bits - 1) { v as i64 - (1i64 << bits) } else { v as i64 } };
        let le = |p: &[u8], n: usize| -> Res<u64> {
            let s = p.get(1..1 + n).ok_or(Refused::BadFormat)?;
            Ok(s.iter().rev().fold(0u64, |a, &x| (a << 8) | x as u64))
        };
        let (entry, size) = if b & 0x80 == 0 {
            (int((b & 0x7f) as i64), 1)
        } else if b & 0xc0 == 0x80 {
            let n = (b & 0x3f) as usize;
            (get(p, 1, n)?, 1 + n)
        } else if b & 0xe0 == 0xc0 {
            let v = (((b & 0x1f) as u64) << 8) | *p.get(1).ok_or(Refused::BadFormat)? as u64;
            (int(sign(v, 13)), 2)
        } else if b & 0xf0 == 0xe0 {
            let n = (((b & 0x0f) as usize) << 8) | *p.get(1).ok_or(Refused::BadFormat)? as usize;
            (get(p, 2, n)?, 2 + n)
        } else {
            match b {
                0xf0 => {
                    let n = le(p, 4)? as usize;
                    (get(p, 5, n)?, 5 + n)
                }
                0xf1 => (int(sign(le(p, 2)?, 16)), 3),
                0xf2 => (int(sign(le(p, 3)?, 24)), 4),
                0xf3 => (int(sign(le(p, 4)?, 32)), 5),
                0xf4 => (int(le(p, 8)? as i64), 9),
                _ => return Err(Refused::BadFormat),
            }
        };
        let back = match size {
            0..128 => 1,
            128..16384 => 2,
            16384..2_097_152 => 3,
            2_097_152..268_435_456 => 4,
            _ => 5,
        };
        if size + back > p.len() {
            return Err(Refused::BadFormat);
        }
        p = &p[size + back..];
        out.push(entry);
    }
    Ok(out)
}

fn intset(b: &[u8]) -> Res<Vec<Vec<u8>>> {
    if b.len() < 8 {
        return Err(Refused::BadFormat);
    }
    let enc = u32::from_le_bytes(b[..4].try_into().unwrap_or_default()) as usize;
    let n = u32::from_le_bytes(b[4..8].try_into().unwrap_or_default()) as usize;
    if !matches!(enc, 2 | 4 | 8) || b.len() != 8 + enc * n {
        return Err(Refused::BadFormat);
    }
    Ok(b[8..]
        .chunks(enc)
        .map(|c| {
            let v = match enc {
                2 => i16::from_le_bytes([c[0], c[1]]) as i64,
                4 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64,
                _ => i64::from_le_bytes(c.try_into().unwrap_or_default()),
            };
            v.to_string().into_bytes()
        })
        .collect())
}

fn pairs(v: Vec<Vec<u8>>) -> Res<Vec<(Vec<u8>, Vec<u8>)>> {
    if !v.len().is_multiple_of(2) {
        return Err(Refused::BadFormat);
    }
    let mut it = v.into_iter();
    let mut out = Vec::new();
    while let (Some(a), Some(b)) = (it.next(), it.next()) {
        out.push((a, b));
    }
    Ok(out)
}

/// Checks a payload's footer (RESTORE's "DUMP payload version or checksum are wrong").
pub fn verify(p: &[u8]) -> Result<(), Refused> {
    if p.len() < 10 {
        return Err(Refused::Checksum);
    }
    let (body, footer) = p.split_at(p.len() - 10);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    let crc = u64::from_le_bytes(footer[2..].try_into().unwrap_or_default());
    if version > VERSION_MAX || crc64(&p[..body.len() + 2]) != crc {
        return Err(Refused::Checksum);
    }
    Ok(())
}

/// Reads a verified payload's value.
pub fn restore(p: &[u8]) -> Res<Value> {
    verify(p)?;
    let mut r = Reader { b: &p[..p.len() - 10] };
    let v = match r.u8()? {
        T_STRING => Value::String(r.string()?),
        T_LIST => {
            let n = r.len()?;
            Value::List((0..n).map(|_| r.string()).collect::<Res<_>>()?)
        }
        T_SET => {
            let n = r.len()?;
            Value::Set((0..n).map(|_| r.string()).collect::<Res<_>>()?)
        }
        t @ (T_ZSET | T_ZSET_2) => {
            let n = r.len()?;
            let mut v = Vec::new();
            for _ in 0..n {
                let m = r.string()?;
                let s = if t == T_ZSET {
                    r.text_score()?
                } else {
                    f64::from_le_bytes(r.take(8)?.try_into().unwrap_or_default())
                };
                if s.is_nan() {
                    return Err(Refused::BadFormat);
                }
                v.push((m, s));
            }
            Value::Zset(v)
        }
        T_HASH => {
            let n = r.len()?;
            let mut v = Vec::new();
            for _ in 0..n {
                v.push((r.string()?, r.string()?));
            }
            Value::Hash(v)
        }
        T_SET_INTSET => Value::Set(intset(&r.string()?)?),
        T_SET_LISTPACK => Value::Set(listpack(&r.string()?)?),
        T_HASH_LISTPACK => Value::Hash(pairs(listpack(&r.string()?)?)?),
        T_ZSET_LISTPACK => {
            let mut v = Vec::new();
            for (m, s) in pairs(listpack(&r.string()?)?)? {
                let s: f64 = std::str::from_utf8(&s).ok().and_then(|x| x.parse().ok()).ok_or(Refused::BadFormat)?;
                v.push((m, s));
            }
            Value::Zset(v)
        }
        T_LIST_QUICKLIST_2 => {
            let nodes = r.len()?;
            let mut v = Vec::new();
            for _ in 0..nodes {
                match r.len_or_enc()? {
                    Ok(1) => v.push(r.string()?),
                    Ok(2) => v.extend(listpack(&r.string()?)?),
                    _ => return Err(Refused::BadFormat),
                }
            }
            Value::List(v)
        }
        _ => return Err(Refused::BadFormat),
    };
    if !r.b.is_empty() {
        return Err(Refused::BadFormat);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_is_redis_s() {
        // redis's crc64 test: "123456789" -> e9c6d914c4b8d9ca.
        assert_eq!(crc64(b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn small_strings_dump_as_redis_server_does() {
        // `DUMP` of "v" and of "123" on redis-server 7.0.15.
        let v = dump(&Value::String(b"v".to_vec()));
        assert_eq!(&v[..5], &[0, 1, b'v', 10, 0]);
        let n = dump(&Value::String(b"123".to_vec()));
        assert_eq!(&n[..4], &[0, 0xc0, 123, 10]);
        assert_eq!(restore(&n).unwrap(), Value::String(b"123".to_vec()));
    }

    #[test]
    fn every_type_round_trips() {
        for v in [
            Value::String(vec![7; 70_000]),
            Value::String(b"-32768".to_vec()),
            Value::String(b"007".to_vec()),
            Value::List(vec![b"a".to_vec(), b"12".to_vec(), vec![]]),
            Value::Set(vec![b"x".to_vec(), b"-5".to_vec()]),
            Value::Zset(vec![(b"m".to_vec(), 1.5), (b"n".to_vec(), f64::INFINITY)]),
            Value::Hash(vec![(b"f".to_vec(), b"v".to_vec())]),
        ] {
            assert_eq!(restore(&dump(&v)).unwrap(), v);
        }
    }

    #[test]
    fn damaged_payloads_are_refused() {
        let mut p = dump(&Value::String(b"hello".to_vec()));
        let n = p.len();
        p[1] ^= 1;
        assert_eq!(restore(&p), Err(Refused::Checksum));
        assert_eq!(restore(b"short"), Err(Refused::Checksum));
        // A valid footer around a length that runs past the end.
        let mut q = vec![T_STRING, 0x3f, b'x'];
        q.extend_from_slice(&VERSION.to_le_bytes());
        let crc = crc64(&q);
        q.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(restore(&q), Err(Refused::BadFormat));
        assert!(n > 10);
    }

    #[test]
    fn compact_encodings_of_redis_7_are_read() {
        let hex = |h: &str| {
            (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect::<Vec<u8>>()
        };
        // redis-server 7.0.15's `DUMP` after RPUSH l a, SADD s 1, ZADD z 1 a, HSET h a b and
        // SET big <100 x> (LZF-compressed), checksums and all.
        let b = |s: &str| s.as_bytes().to_vec();
        assert_eq!(restore(&hex("1201020a0a0000000100816102ff0a0009b9edf594ded995")), Ok(Value::List(vec![b("a")])));
        assert_eq!(restore(&hex("0b0a020000000100000001000a00056f61290c490534")), Ok(Value::Set(vec![b("1")])));
        assert_eq!(
            restore(&hex("110c0c00000002008161020101ff0a00a805ceb8d7a93302")),
            Ok(Value::Zset(vec![(b("a"), 1.0)]))
        );
        assert_eq!(
            restore(&hex("100d0d0000000200816102816202ff0a00d93c7f0728f0edcc")),
            Ok(Value::Hash(vec![(b("a"), b("b"))]))
        );
        assert_eq!(
            restore(&hex("00c3094064017878e057000178780a005db7f663bb08625f")),
            Ok(Value::String(vec![b'x'; 100]))
        );
        assert_eq!(lzf_decompress(&[2, b'a', b'b', b'c', 0x20, 2], 6).unwrap(), b"abcabc");
    }
}
