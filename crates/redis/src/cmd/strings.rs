//! String commands: GET/SET and their variants, GETEX, MGET/MSET(NX), GETDEL, in-node
//! INCR/DECR, INCRBYFLOAT (redis's `long double`, see `ldouble`), APPEND, SETRANGE, GETRANGE,
//! the bit commands and LCS. A value over `INLINE_MAX` bytes lives in overflow parts under a fresh
//! `rondb_key` per write (parts are never changed in place, so a reader that finds a part gone
//! knows the value was replaced and reads the key row again); reads of a byte range fetch only
//! the parts that hold it.

use super::transactions::changed;
use super::{
    CR, Cx, Fail, NOT_FLOAT, NOT_INT, OVERFLOW, Pace, SYNTAX, TOO_BIG, WRONGTYPE, check_key, err, fail, int_arg, is,
    meta_of, row_of, set_col, update,
};
use crate::Server;
use crate::db::{self, Db, INLINE_MAX, KEY_MAX, Meta, PART_MAX, TYPE_STRING};
use crate::ldouble::{LDouble, Parsed};
use crate::resp::{self, parse_int};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tern_client::{AbortOption, ColumnUpdate, ErrorCode, OpKind, OpResult, UpdateExpr, Value};

/// Expiry options of SET and GETEX.
#[derive(Debug, Default)]
struct ExpiryOpt {
    /// Absolute expiry in ms.
    at: Option<i64>,
    /// EXAT/PXAT (an absolute time in the past deletes the key, for GETEX).
    absolute: bool,
    persist: bool,
}

/// redis's `getExpireMillisecondsOrReply`: a positive number, in seconds or ms, relative or not.
fn expire_ms(v: &[u8], opt: &[u8], cmd: &str) -> CR<(i64, bool)> {
    let v = int_arg(v)?;
    let bad = || Fail::Reply(err(format!("ERR invalid expire time in '{cmd}' command")));
    let secs = is(opt, "ex") || is(opt, "exat");
    if v <= 0 || (secs && v > i64::MAX / 1000) {
        return Err(bad());
    }
    let ms = if secs { v * 1000 } else { v };
    let relative = is(opt, "ex") || is(opt, "px");
    let at = if relative { ms.checked_add(db::now_ms()).ok_or_else(bad)? } else { ms };
    Ok((at, !relative))
}

fn is_expiry_word(o: &[u8]) -> bool {
    is(o, "ex") || is(o, "px") || is(o, "exat") || is(o, "pxat")
}

/// GETRANGE's index rules (negative from the end, clamped): the inclusive byte range, or None
/// when it is empty.
pub(super) fn range_bounds(len: usize, start: i64, end: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    if len == 0 {
        return None;
    }
    let (mut s, mut e) = (start, end);
    if s < 0 {
        s += len;
    }
    if e < 0 {
        e += len;
    }
    s = s.max(0);
    e = e.max(0);
    if e >= len {
        e = len - 1;
    }
    if s > e || start > 0 && s >= len {
        return None;
    }
    Some((s as usize, e as usize))
}

/// A bit offset as redis takes it: 0 .. proto-max-bulk-len × 8.
fn bit_offset(a: &[u8], max_bulk: usize) -> CR<u64> {
    match parse_int(a) {
        Some(v) if v >= 0 && ((v as u64) >> 3) < max_bulk as u64 => Ok(v as u64),
        _ => fail("ERR bit offset is not an integer or out of range"),
    }
}

/// The value written by INCRBYFLOAT: stored + increment in redis's `long double`.
pub(super) fn add_float(stored: Option<&[u8]>, by: &[u8], stored_err: &str) -> CR<Vec<u8>> {
    let incr = match LDouble::parse(by) {
        Parsed::Num(v) => Some(v),
        Parsed::Inf => None,
        Parsed::Bad => return fail(NOT_FLOAT),
    };
    let cur = match stored.map(LDouble::parse) {
        None => LDouble::ZERO,
        Some(Parsed::Num(v)) => v,
        Some(Parsed::Inf) => return fail("ERR increment would produce NaN or Infinity"),
        Some(Parsed::Bad) => return fail(stored_err),
    };
    match incr.and_then(|i| cur.add(&i)) {
        Some(v) => Ok(v.to_human().into_bytes()),
        None => fail("ERR increment would produce NaN or Infinity"),
    }
}

impl Server {
    /// The string commands; false when `name` is not one.
    pub(super) async fn string_command(
        &self,
        cx: &mut Cx,
        db: &Arc<Db>,
        name: &str,
        a: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> CR<bool> {
        match name {
            "get" => bulk_or_null(out, self.get_string(cx, db, &a[1], None, false).await?),
            "set" => self.set(cx, db, a, out).await?,
            "setnx" => {
                let args = [b"set".to_vec(), a[1].clone(), a[2].clone(), b"nx".to_vec()];
                let mut o = Vec::new();
                self.set(cx, db, &args, &mut o).await?;
                resp::integer(out, o.starts_with(b"+OK") as i64);
            }
            "setex" | "psetex" => {
                let v = int_arg(&a[2])?;
                if v <= 0 {
                    return fail(format!("ERR invalid expire time in '{name}' command"));
                }
                let unit: &[u8] = if name == "setex" { b"ex" } else { b"px" };
                let args = [b"set".to_vec(), a[1].clone(), a[3].clone(), unit.to_vec(), a[2].clone()];
                self.set(cx, db, &args, out).await?;
            }
            "getset" => {
                let args = [b"set".to_vec(), a[1].clone(), a[2].clone(), b"get".to_vec()];
                self.set(cx, db, &args, out).await?;
            }
            "getdel" => bulk_or_null(out, self.getdel(cx, db, &a[1]).await?),
            "getex" => self.getex(cx, db, a, out).await?,
            "mget" => self.mget(cx, db, &a[1..], out).await?,
            "mset" => {
                if a.len().is_multiple_of(2) {
                    return fail("ERR wrong number of arguments for 'mset' command");
                }
                self.mset(cx, db, &a[1..]).await?;
                resp::simple(out, "OK");
            }
            "msetnx" => {
                if a.len().is_multiple_of(2) {
                    return fail("ERR wrong number of arguments for 'msetnx' command");
                }
                resp::integer(out, self.msetnx(cx, db, &a[1..]).await?);
            }
            "incr" | "decr" | "incrby" | "decrby" => {
                let by = match name {
                    "incr" => 1,
                    "decr" => -1,
                    "incrby" => int_arg(&a[2])?,
                    _ => int_arg(&a[2])?.checked_neg().ok_or_else(|| err("ERR decrement would overflow"))?,
                };
                resp::integer(out, self.incr(cx, db, &a[1], by).await?);
            }
            "incrbyfloat" => resp::bulk(out, &self.incrbyfloat(cx, db, &a[1], &a[2]).await?),
            "strlen" => {
                let n = self.string_meta(cx, db, &a[1], false).await?.map_or(0, |m| m.strlen());
                resp::integer(out, n as i64);
            }
            "append" => resp::integer(out, self.append_or_setrange(cx, db, &a[1], None, &a[2]).await? as i64),
            "setrange" => {
                let off = int_arg(&a[2])?;
                if off < 0 {
                    return fail("ERR offset is out of range");
                }
                if off as u64 + a[3].len() as u64 > self.live.max_bulk.load(Ordering::Relaxed) as u64 {
                    return fail(TOO_BIG);
                }
                resp::integer(out, self.append_or_setrange(cx, db, &a[1], Some(off as usize), &a[3]).await? as i64);
            }
            "getrange" => {
                let (start, end) = (int_arg(&a[2])?, int_arg(&a[3])?);
                let v = match self.string_meta(cx, db, &a[1], false).await? {
                    None => Vec::new(),
                    Some(m) => match range_bounds(m.strlen() as usize, start, end) {
                        None => Vec::new(),
                        Some((s, e)) => self.read_range(cx, db, &a[1], m, s as u64, e as u64 + 1).await?,
                    },
                };
                resp::bulk(out, &v);
            }
            "setbit" => resp::integer(out, self.setbit(cx, db, a).await?),
            "getbit" => resp::integer(out, self.getbit(cx, db, a).await?),
            "bitcount" => resp::integer(out, self.bitcount(cx, db, a).await?),
            "lcs" => self.lcs(cx, db, a, out).await?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Bytes [from, to) of the string under `key` whose key row is `meta` (`to` at most its
    /// length), reading only the parts that hold them; the key row is read again if the value
    /// was replaced meanwhile.
    async fn read_range(&self, cx: &mut Cx, db: &Db, key: &[u8], meta: Meta, from: u64, to: u64) -> CR<Vec<u8>> {
        let mut meta = Some(meta);
        for _ in 0..100 {
            let m = match meta.take() {
                Some(m) => m,
                None => match self.string_meta(cx, db, key, false).await? {
                    Some(m) => m,
                    None => return Ok(Vec::new()),
                },
            };
            let to = to.min(m.strlen());
            if from >= to {
                return Ok(Vec::new());
            }
            if m.parts == 0 {
                return Ok(m.start[from as usize..to as usize].to_vec());
            }
            if let Some(v) = self.read_parts_range(cx, db, &m, from, to).await? {
                return Ok(v);
            }
        }
        fail("ERR the value kept changing while it was read; try again")
    }

    async fn read_parts_range(&self, cx: &mut Cx, db: &Db, m: &Meta, from: u64, to: u64) -> CR<Option<Vec<u8>>> {
        let inline = INLINE_MAX as u64;
        let mut v = Vec::with_capacity((to - from) as usize);
        if from < inline {
            v.extend_from_slice(&m.start[from as usize..to.min(inline) as usize]);
        }
        if to <= inline {
            return Ok(Some(v));
        }
        let first = (from.max(inline) - inline) / PART_MAX as u64;
        let last = (to - 1 - inline) / PART_MAX as u64;
        let ords: Vec<u32> = (first as u32..=last as u32).collect();
        for chunk in ords.chunks(256) {
            let ops = chunk.iter().map(|&i| db::part_read(db, m.id, i)).collect::<Result<Vec<_>, _>>()?;
            for (&i, r) in chunk.iter().zip(cx.run(ops).await?) {
                let Some(b) = row_of(Some(r))? else { return Ok(None) };
                let part = db::bytes_of(db.values.decode_projection(&[2], &b)?.remove(0));
                let base = inline + i as u64 * PART_MAX as u64;
                let s = from.max(base) - base;
                let e = (to - base).min(part.len() as u64);
                if s < e {
                    v.extend_from_slice(&part[s as usize..e as usize]);
                }
            }
        }
        Ok(Some(v))
    }

    async fn set(&self, cx: &mut Cx, db: &Arc<Db>, a: &[Vec<u8>], out: &mut Vec<u8>) -> CR {
        let (key, value) = (&a[1], &a[2]);
        let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
        let mut expiry: Option<i64> = None;
        let mut i = 3;
        while i < a.len() {
            let o = &a[i];
            if is(o, "nx") && !xx {
                nx = true;
            } else if is(o, "xx") && !nx {
                xx = true;
            } else if is(o, "get") {
                get = true;
            } else if is(o, "keepttl") && expiry.is_none() {
                keepttl = true;
            } else if is_expiry_word(o) && !keepttl && expiry.is_none() && i + 1 < a.len() {
                expiry = Some(expire_ms(&a[i + 1], o, "set")?.0);
                i += 1;
            } else {
                return fail(SYNTAX);
            }
            i += 1;
        }
        if value.len() > self.live.max_bulk.load(Ordering::Relaxed) {
            return fail(TOO_BIG);
        }
        let mut old: Option<Meta> = None;
        let mut old_value = None;
        if nx || xx || get || keepttl {
            old = self.read_meta(cx, db, key, true).await?;
            if get && let Some(m) = &old {
                if m.kind != TYPE_STRING {
                    return fail(WRONGTYPE);
                }
                old_value = Some(self.assemble(cx, db, m).await?.ok_or_else(changed)?);
            }
            if (nx && old.is_some()) || (xx && old.is_none()) {
                if get {
                    bulk_or_null(out, old_value);
                } else {
                    resp::null(out);
                }
                return Ok(());
            }
        }
        let exp = if keepttl { old.as_ref().and_then(|m| m.expiry) } else { expiry };
        self.put_string(cx, db, key, value, exp, true).await?;
        if get {
            bulk_or_null(out, old_value);
        } else {
            resp::simple(out, "OK");
        }
        Ok(())
    }

    /// GETEX: the value, and a new expiry (or none with PERSIST); an absolute time already past
    /// deletes the key.
    async fn getex(&self, cx: &mut Cx, db: &Arc<Db>, a: &[Vec<u8>], out: &mut Vec<u8>) -> CR {
        let mut opt = ExpiryOpt::default();
        let mut expire: Option<(&[u8], &[u8])> = None;
        let mut i = 2;
        while i < a.len() {
            let o = &a[i];
            let free = expire.is_none() && !opt.persist;
            if is_expiry_word(o) && free && i + 1 < a.len() {
                expire = Some((&a[i + 1], o));
                i += 1;
            } else if is(o, "persist") && free {
                opt.persist = true;
            } else {
                return fail(SYNTAX);
            }
            i += 1;
        }
        let key = &a[1];
        let lock = expire.is_some() || opt.persist;
        let Some(m) = self.string_meta(cx, db, key, lock).await? else {
            resp::null(out);
            return Ok(());
        };
        if let Some((v, o)) = expire {
            (opt.at, opt.absolute) = expire_ms(v, o, "getex").map(|(at, abs)| (Some(at), abs))?;
        }
        let value = self.assemble(cx, db, &m).await?.ok_or_else(changed)?;
        match opt.at {
            Some(at) if opt.absolute && at <= db::now_ms() => {
                cx.write(vec![db.keys.delete(&[Value::Bytes(key.to_vec())])?], true).await?;
                cx.garbage(db, m);
                self.touched(cx, db.index, key, true);
            }
            Some(at) => {
                cx.write(vec![update(db, key, vec![set_col(db::K_EXPIRY, db::expiry_value(Some(at)))])?], true).await?;
                self.touched(cx, db.index, key, false);
            }
            None if opt.persist && m.expiry.is_some() => {
                cx.write(vec![update(db, key, vec![set_col(db::K_EXPIRY, Value::Null)])?], true).await?;
                self.touched(cx, db.index, key, false);
            }
            None => {}
        }
        resp::bulk(out, &value);
        Ok(())
    }

    async fn getdel(&self, cx: &mut Cx, db: &Arc<Db>, key: &[u8]) -> CR<Option<Vec<u8>>> {
        let Some(m) = self.string_meta(cx, db, key, true).await? else { return Ok(None) };
        let v = self.assemble(cx, db, &m).await?.ok_or_else(changed)?;
        cx.write(vec![db.keys.delete(&[Value::Bytes(key.to_vec())])?], true).await?;
        cx.garbage(db, m);
        self.touched(cx, db.index, key, true);
        Ok(Some(v))
    }

    async fn mget(&self, cx: &mut Cx, db: &Arc<Db>, keys: &[Vec<u8>], out: &mut Vec<u8>) -> CR {
        let mut ops = Vec::with_capacity(keys.len());
        for k in keys.iter().filter(|k| k.len() <= KEY_MAX) {
            ops.push(db::read_meta(db, k, OpKind::Read)?);
        }
        // Read committed, key by key as in Redis: alone, one transaction per data-node worker;
        // inside EXEC, in its transaction.
        let mut rs = if cx.multi { cx.run(ops).await? } else { self.run_split(ops).await }.into_iter();
        let mut values = Vec::with_capacity(keys.len());
        for k in keys {
            let m = if k.len() <= KEY_MAX { meta_of(db, rs.next())? } else { None };
            if m.is_none() {
                cx.key_miss(db.index, k);
            }
            values.push(match m {
                Some(m) if m.kind == TYPE_STRING => self.get_string(cx, db, k, Some(m), false).await.unwrap_or(None),
                _ => None,
            });
        }
        resp::array_len(out, keys.len());
        values.into_iter().for_each(|v| bulk_or_null(out, v));
        Ok(())
    }

    /// MSET: one atomic transaction (RonDB's Rondis MSET is not atomic; Tern's is).
    async fn mset(&self, cx: &mut Cx, db: &Arc<Db>, pairs: &[Vec<u8>]) -> CR {
        let max = self.live.max_bulk.load(Ordering::Relaxed);
        let mut ops = Vec::new();
        for p in pairs.chunks(2) {
            check_key(&p[0])?;
            if p[1].len() > max {
                return fail(TOO_BIG);
            }
            ops.extend(self.string_ops(db, &p[0], &p[1], None).await?);
        }
        let rs = cx.write_ordered(ops, AbortOption::AbortOnError, true).await?;
        for r in rs {
            if let OpResult::Row(b) = r
                && b.len() > 1
                && let Ok(m) = Meta::decode_old(db, &b)
            {
                cx.garbage(db, m);
            }
        }
        for p in pairs.chunks(2) {
            self.touched(cx, db.index, &p[0], false);
        }
        Ok(())
    }

    /// MSETNX: all keys are set, atomically, only if none of them exists (1), else nothing (0).
    async fn msetnx(&self, cx: &mut Cx, db: &Arc<Db>, pairs: &[Vec<u8>]) -> CR<i64> {
        let max = self.live.max_bulk.load(Ordering::Relaxed);
        // A key given twice gets its last value (as in redis-server).
        let mut last: Vec<(&[u8], &[u8])> = Vec::new();
        for p in pairs.chunks(2) {
            check_key(&p[0])?;
            if p[1].len() > max {
                return fail(TOO_BIG);
            }
            match last.iter_mut().find(|(k, _)| *k == &p[0][..]) {
                Some(e) => e.1 = &p[1],
                None => last.push((&p[0], &p[1])),
            }
        }
        let locks = last.iter().map(|(k, _)| db::read_meta(db, k, OpKind::ReadExclusive)).collect::<Result<_, _>>()?;
        let found = cx.write_ordered(locks, AbortOption::IgnoreError, false).await?;
        if found.iter().any(|r| matches!(r, OpResult::Row(_))) {
            return Ok(0);
        }
        let mut ops = Vec::new();
        for (k, v) in &last {
            ops.extend(self.string_ops(db, k, v, None).await?);
        }
        cx.write(ops, true).await?;
        for (k, _) in &last {
            self.touched(cx, db.index, k, false);
        }
        Ok(1)
    }

    /// INCR/DECR/INCRBY/DECRBY: one read-modify-write executed inside the data node.
    async fn incr(&self, cx: &mut Cx, db: &Db, key: &[u8], by: i64) -> CR<i64> {
        let mut op = update(
            db,
            key,
            vec![
                ColumnUpdate { col: db::K_TYPE, expr: UpdateExpr::Expect(Value::UInt(TYPE_STRING as u64)) },
                ColumnUpdate { col: db::K_VALUE, expr: UpdateExpr::Add(Value::Int(by)) },
            ],
        )?;
        op.row = Meta::string(b"0").row(db, key)?;
        op.projection = Some(vec![db::K_VALUE]);
        if self.opts.dirty_incr.get(db.index as usize).copied().unwrap_or(false) {
            // Rondis' DirtyINCRDECR: no row lock; the increment is applied at commit.
            op.kind = OpKind::UpdateDirty;
        }
        match cx.last(vec![op]).await?.into_iter().next() {
            Some(OpResult::Row(b)) => {
                self.touched(cx, db.index, key, false);
                let v = db::bytes_of(db.keys.decode_projection(&[db::K_VALUE], &b)?.remove(0));
                Ok(parse_int(&v).ok_or_else(|| err(NOT_INT))?)
            }
            Some(OpResult::Error(e)) => Err(Fail::Reply(match e.code {
                ErrorCode::InvalidValue => err(NOT_INT),
                ErrorCode::ValueOutOfRange => err(OVERFLOW),
                _ => e.into(),
            })),
            other => fail(format!("ERR unexpected result {other:?}")),
        }
    }

    /// INCRBYFLOAT: the sum in redis's `long double`, written back as a string (the expiry
    /// stays).
    async fn incrbyfloat(&self, cx: &mut Cx, db: &Arc<Db>, key: &[u8], by: &[u8]) -> CR<Vec<u8>> {
        let m = self.string_meta(cx, db, key, true).await?;
        let cur = match &m {
            Some(m) => Some(self.assemble(cx, db, m).await?.ok_or_else(changed)?),
            None => None,
        };
        let v = add_float(cur.as_deref(), by, NOT_FLOAT)?;
        self.put_string(cx, db, key, &v, m.and_then(|m| m.expiry), true).await?;
        Ok(v)
    }

    /// APPEND (offset None) or SETRANGE: rewrites the value, keeping its expiry.
    async fn append_or_setrange(&self, cx: &mut Cx, db: &Arc<Db>, key: &[u8], off: Option<usize>, v: &[u8]) -> CR<u64> {
        let m = self.string_meta(cx, db, key, true).await?;
        let mut value = match &m {
            Some(m) => self.assemble(cx, db, m).await?.ok_or_else(changed)?,
            None => Vec::new(),
        };
        match off {
            None => {
                if value.len() + v.len() > self.live.max_bulk.load(Ordering::Relaxed) {
                    return fail(TOO_BIG);
                }
                value.extend_from_slice(v);
            }
            Some(_) if v.is_empty() => return Ok(value.len() as u64),
            Some(o) => {
                if value.len() < o + v.len() {
                    value.resize(o + v.len(), 0);
                }
                value[o..o + v.len()].copy_from_slice(v);
            }
        }
        self.put_string(cx, db, key, &value, m.and_then(|m| m.expiry), true).await?;
        Ok(value.len() as u64)
    }

    /// SETBIT: the bit's previous value; the string grows with zero bytes as needed.
    async fn setbit(&self, cx: &mut Cx, db: &Arc<Db>, a: &[Vec<u8>]) -> CR<i64> {
        let off = bit_offset(&a[2], self.live.max_bulk.load(Ordering::Relaxed))?;
        let on = match parse_int(&a[3]) {
            Some(v @ (0 | 1)) => v as u8,
            _ => return fail("ERR bit is not an integer or out of range"),
        };
        let m = self.string_meta(cx, db, &a[1], true).await?;
        let mut value = match &m {
            Some(m) => self.assemble(cx, db, m).await?.ok_or_else(changed)?,
            None => Vec::new(),
        };
        let (byte, bit) = ((off >> 3) as usize, 7 - (off & 7) as u8);
        if value.len() <= byte {
            value.resize(byte + 1, 0);
        }
        let old = (value[byte] >> bit) & 1;
        value[byte] = (value[byte] & !(1 << bit)) | (on << bit);
        self.put_string(cx, db, &a[1], &value, m.and_then(|m| m.expiry), true).await?;
        Ok(old as i64)
    }

    async fn getbit(&self, cx: &mut Cx, db: &Arc<Db>, a: &[Vec<u8>]) -> CR<i64> {
        let off = bit_offset(&a[2], self.live.max_bulk.load(Ordering::Relaxed))?;
        let Some(m) = self.string_meta(cx, db, &a[1], false).await? else { return Ok(0) };
        let byte = off >> 3;
        let v = self.read_range(cx, db, &a[1], m, byte, byte + 1).await?;
        Ok(v.first().map_or(0, |b| (b >> (7 - (off & 7))) & 1) as i64)
    }

    /// BITCOUNT key [start end [BYTE|BIT]] (redis 7's index rules).
    async fn bitcount(&self, cx: &mut Cx, db: &Arc<Db>, a: &[Vec<u8>]) -> CR<i64> {
        let Some(m) = self.string_meta(cx, db, &a[1], false).await? else { return Ok(0) };
        let len = m.strlen() as i64;
        let (mut start, mut end, mut bits) = (0i64, len - 1, false);
        match a.len() {
            2 => {}
            4 | 5 => {
                (start, end) = (int_arg(&a[2])?, int_arg(&a[3])?);
                if start < 0 && end < 0 && start > end {
                    return Ok(0);
                }
                if a.len() == 5 {
                    bits = if is(&a[4], "bit") {
                        true
                    } else if is(&a[4], "byte") {
                        false
                    } else {
                        return fail(SYNTAX);
                    };
                }
                let total = if bits { len << 3 } else { len };
                if start < 0 {
                    start += total;
                }
                if end < 0 {
                    end += total;
                }
                start = start.max(0);
                end = end.max(0).min(total - 1);
            }
            _ => return fail(SYNTAX),
        }
        if start > end {
            return Ok(0);
        }
        let (first, last) = if bits { (start >> 3, end >> 3) } else { (start, end) };
        let v = self.read_range(cx, db, &a[1], m, first as u64, last as u64 + 1).await?;
        let mut n: i64 = v.iter().map(|b| b.count_ones() as i64).sum();
        if bits && !v.is_empty() {
            // Bits of the edge bytes outside the range.
            let head = !(0xffu8 >> (start & 7));
            let tail = (1u16 << (7 - (end & 7))) as u8 - 1;
            n -= (v[0] & head).count_ones() as i64 + (v[v.len() - 1] & tail).count_ones() as i64;
        }
        Ok(n)
    }

    /// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN n] [WITHMATCHLEN]: redis's dynamic program (its
    /// table bounded by proto-max-bulk-len, as redis bounds it), yielding between rows.
    async fn lcs(&self, cx: &mut Cx, db: &Arc<Db>, a: &[Vec<u8>], out: &mut Vec<u8>) -> CR {
        let ma = self.read_meta(cx, db, &a[1], false).await?;
        let mb = self.read_meta(cx, db, &a[2], false).await?;
        if ma.iter().chain(mb.iter()).any(|m| m.kind != TYPE_STRING) {
            return fail("ERR The specified keys must contain string values");
        }
        let x = self.get_string(cx, db, &a[1], ma, false).await?.unwrap_or_default();
        let y = self.get_string(cx, db, &a[2], mb, false).await?.unwrap_or_default();
        let (mut idx, mut len, mut withlen, mut minlen) = (false, false, false, 0i64);
        let mut i = 3;
        while i < a.len() {
            if is(&a[i], "idx") {
                idx = true;
            } else if is(&a[i], "len") {
                len = true;
            } else if is(&a[i], "withmatchlen") {
                withlen = true;
            } else if is(&a[i], "minmatchlen") && i + 1 < a.len() {
                minlen = int_arg(&a[i + 1])?.max(0);
                i += 1;
            } else {
                return fail(SYNTAX);
            }
            i += 1;
        }
        if idx && len {
            return fail("ERR If you want both the length and indexes, please just use IDX.");
        }
        let cells = (x.len() as u64 + 1).saturating_mul(y.len() as u64 + 1);
        if cells.saturating_mul(4) > self.live.max_bulk.load(Ordering::Relaxed) as u64 {
            return fail("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
        }
        let table = lcs_table(&x, &y).await;
        lcs_reply(&table, &x, &y, idx, len, withlen, minlen as u64, out);
        Ok(())
    }
}

/// `LCS(i, j)` of the prefixes `x[..i]`, `y[..j]`, row by row (`(x.len()+1) × (y.len()+1)`).
async fn lcs_table(x: &[u8], y: &[u8]) -> Vec<u32> {
    let w = y.len() + 1;
    let mut t = vec![0u32; (x.len() + 1) * w];
    let mut pace = Pace::default();
    for i in 1..=x.len() {
        for j in 1..=y.len() {
            t[i * w + j] = if x[i - 1] == y[j - 1] {
                t[(i - 1) * w + j - 1] + 1
            } else {
                t[(i - 1) * w + j].max(t[i * w + j - 1])
            };
        }
        pace.charge(y.len() as u64).await;
    }
    t
}

/// Walks the table back from the end as redis does, collecting the common string and the
/// matching ranges (each emitted when it can grow no further).
#[allow(clippy::too_many_arguments)]
fn lcs_reply(t: &[u32], x: &[u8], y: &[u8], idx: bool, len: bool, withlen: bool, minlen: u64, out: &mut Vec<u8>) {
    let w = y.len() + 1;
    let total = t[x.len() * w + y.len()];
    if len {
        return resp::integer(out, total as i64);
    }
    let mut common = vec![0u8; total as usize];
    let mut k = total as usize;
    let mut ranges: Vec<[usize; 4]> = Vec::new();
    // Current range: a_start, a_end, b_start, b_end (None: none open).
    let mut cur: Option<[usize; 4]> = None;
    let (mut i, mut j) = (x.len(), y.len());
    while i > 0 && j > 0 {
        let mut emit = false;
        if x[i - 1] == y[j - 1] {
            common[k - 1] = x[i - 1];
            match &mut cur {
                None => cur = Some([i - 1, i - 1, j - 1, j - 1]),
                Some(r) if r[0] == i && r[2] == j => {
                    r[0] -= 1;
                    r[2] -= 1;
                }
                Some(_) => emit = true,
            }
            if cur.is_some_and(|r| r[0] == 0 || r[2] == 0) {
                emit = true;
            }
            k -= 1;
            i -= 1;
            j -= 1;
        } else {
            if t[(i - 1) * w + j] > t[i * w + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = cur.is_some();
        }
        if emit
            && let Some(r) = cur.take()
            && (minlen == 0 || (r[1] - r[0] + 1) as u64 >= minlen)
        {
            ranges.push(r);
        }
    }
    if !idx {
        return resp::bulk(out, &common);
    }
    resp::array_len(out, 4);
    resp::bulk(out, b"matches");
    resp::array_len(out, ranges.len());
    for r in ranges {
        resp::array_len(out, 2 + withlen as usize);
        for pair in [[r[0], r[1]], [r[2], r[3]]] {
            resp::array_len(out, 2);
            resp::integer(out, pair[0] as i64);
            resp::integer(out, pair[1] as i64);
        }
        if withlen {
            resp::integer(out, (r[1] - r[0] + 1) as i64);
        }
    }
    resp::bulk(out, b"len");
    resp::integer(out, total as i64);
}

pub(super) fn bulk_or_null(out: &mut Vec<u8>, v: Option<Vec<u8>>) {
    match v {
        Some(v) => resp::bulk(out, &v),
        None => resp::null(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(v: &[u8], start: i64, end: i64) -> &[u8] {
        range_bounds(v.len(), start, end).map_or(&[][..], |(s, e)| &v[s..=e])
    }

    #[test]
    fn getrange_indexes() {
        let v = b"This is a string";
        assert_eq!(range(v, 0, 3), b"This");
        assert_eq!(range(v, -3, -1), b"ing");
        assert_eq!(range(v, 0, -1), v);
        assert_eq!(range(v, 10, 100), b"string");
        assert_eq!(range(v, 5, 3), b"");
        assert_eq!(range(v, 100, 200), b"");
        assert_eq!(range(b"", 0, -1), b"");
    }

    #[test]
    fn lcs_like_redis() {
        let t = tern_client::block_on(lcs_table(b"ohmytext", b"mynewtext"));
        let mut out = Vec::new();
        lcs_reply(&t, b"ohmytext", b"mynewtext", false, false, false, 0, &mut out);
        assert_eq!(out, b"$6\r\nmytext\r\n");
        out.clear();
        lcs_reply(&t, b"ohmytext", b"mynewtext", true, false, true, 0, &mut out);
        let want = "*4\r\n$7\r\nmatches\r\n*2\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n*3\r\n*2\r\n:2\r\n:3\r\n*2\r\n:0\r\n:1\r\n:2\r\n$3\r\nlen\r\n:6\r\n";
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }
}
