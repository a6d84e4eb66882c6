//! List commands. A list's elements are rows of `list_values` at consecutive positions under
//! its `rondb_key`; the key row holds the first position, the length and a change counter
//! (`db`'s layout). Every element is reached by primary key (position = first + index), so the
//! ends, LINDEX and LSET cost one read or write at any length, and LRANGE reads what it returns.
//! Writers lock the key row first; readers that take more than one round trip read it with a
//! shared lock, so they never see a half-rewritten list (LREM and LINSERT move elements).
//!
//! LREM, LINSERT and LPOS look for values and so read the list (as redis's do); LINSERT moves
//! the shorter side.

use super::groups::{Cmd, Done, checked, counted};
use super::{CR, Cx, NO_SUCH_KEY, NOT_INT, RErr, SYNTAX, WRONGTYPE, fail, int_arg, is, meta_of, row_of};
use crate::db::{self, Db, HASH_VALUE_MAX, Meta, TYPE_LIST};
use crate::resp::{self, parse_int};
use crate::{Server, Session};
use std::sync::Arc;
use tern_client::{KeyOp, OpKind, Value};

/// Elements read or written per batch.
const LIST_BATCH: usize = 1024;

pub(super) const POSITIVE: &str = "ERR value is out of range, must be positive";

/// The first element's position.
fn head_of(m: &Meta) -> i64 {
    parse_int(&m.start).unwrap_or(0)
}

/// Sets the first position and counts a change.
fn set_head(m: &mut Meta, head: i64) {
    m.start = head.to_string().into_bytes();
    m.parts = m.parts.wrapping_add(1);
}

fn pos_key(id: u64, pos: i64) -> [Value; 2] {
    [Value::UInt(id), Value::Int(pos)]
}

pub(super) fn check_element(v: &[u8]) -> CR {
    if v.len() > HASH_VALUE_MAX {
        return fail(format!("ERR list elements are limited to {HASH_VALUE_MAX} bytes"));
    }
    Ok(())
}

/// LEFT or RIGHT: true for LEFT.
pub(super) fn side(a: &[u8]) -> CR<bool> {
    if is(a, "left") {
        Ok(true)
    } else if is(a, "right") {
        Ok(false)
    } else {
        fail(SYNTAX)
    }
}

/// A list's element write.
fn put(db: &Db, id: u64, pos: i64, v: &[u8]) -> Result<KeyOp, tern_client::TernError> {
    db.lists.write(&[Value::UInt(id), Value::Int(pos), Value::Bytes(v.to_vec())])
}

/// A list's element delete returning the element.
fn take(db: &Db, id: u64, pos: i64) -> Result<KeyOp, tern_client::TernError> {
    let mut op = db.lists.delete(&pos_key(id, pos))?;
    op.projection = Some(vec![2]);
    Ok(op)
}

/// The key row of a list after a change: written, or deleted when the list is empty.
fn meta_op(db: &Db, key: &[u8], m: &Meta) -> Result<KeyOp, tern_client::TernError> {
    if m.len == 0 { db.keys.delete(&[Value::Bytes(key.to_vec())]) } else { db::write_meta(db, key, m) }
}

/// Takes up to `count` elements off one end of the list `m` (updated): their positions in
/// popping order.
fn take_from(m: &mut Meta, left: bool, count: i64) -> Vec<i64> {
    let n = (count.max(0) as u64).min(m.len) as i64;
    if n == 0 {
        return Vec::new();
    }
    let head = head_of(m);
    let len = m.len as i64;
    let positions = if left { (head..head + n).collect() } else { (0..n).map(|k| head + len - 1 - k).collect() };
    m.len -= n as u64;
    set_head(m, if left { head + n } else { head });
    positions
}

/// redis's range normalisation of LRANGE: the first and last index, or None when empty.
pub(super) fn norm_range(start: i64, stop: i64, len: i64) -> Option<(i64, i64)> {
    let start = if start < 0 { (len + start).max(0) } else { start };
    let stop = if stop < 0 { len + stop } else { stop };
    if start > stop || start >= len {
        return None;
    }
    Some((start, stop.min(len - 1)))
}

impl Server {
    /// The list commands (non-blocking; the blocking ones try once here); false when `name` is
    /// not one.
    pub(super) async fn list_command(
        &self,
        cx: &mut Cx,
        _sess: &mut Session,
        db: &Arc<Db>,
        name: &str,
        a: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> CR<bool> {
        match name {
            "llen" => resp::integer(out, self.list_meta(cx, db, &a[1], false).await?.map_or(0, |m| m.len as i64)),
            "lrange" => {
                let (start, stop) = (int_arg(&a[2])?, int_arg(&a[3])?);
                // A range of more than one element is read under a shared lock of the key row,
                // taken by the first read (one element needs none).
                let m = if start == stop {
                    self.list_meta(cx, db, &a[1], false).await?
                } else {
                    self.list_meta_shared(cx, db, &a[1]).await?
                };
                let v = match m {
                    None => Vec::new(),
                    Some(m) => match norm_range(start, stop, m.len as i64) {
                        None => Vec::new(),
                        Some((s, e)) => self.list_elements(cx, db, &m, s, e).await?,
                    },
                };
                bulk_array(out, &v);
            }
            "lindex" => {
                let i = int_arg(&a[2])?;
                let v = match self.list_meta(cx, db, &a[1], false).await? {
                    None => None,
                    Some(m) => {
                        let i = if i < 0 { m.len as i64 + i } else { i };
                        if i < 0 || i >= m.len as i64 {
                            None
                        } else {
                            let r = cx.run(vec![db.lists.read_columns(&pos_key(m.id, head_of(&m) + i), &[2])?]).await?;
                            match row_of(r.into_iter().next())? {
                                Some(b) => Some(db::bytes_of(db.lists.decode_projection(&[2], &b)?.remove(0))),
                                None => None,
                            }
                        }
                    }
                };
                super::strings::bulk_or_null(out, v);
            }
            "lset" => {
                let i = int_arg(&a[2])?;
                check_element(&a[3])?;
                let Some(mut m) = self.list_meta(cx, db, &a[1], true).await? else { return fail(NO_SUCH_KEY) };
                let i = if i < 0 { m.len as i64 + i } else { i };
                if i < 0 || i >= m.len as i64 {
                    return fail("ERR index out of range");
                }
                let head = head_of(&m);
                set_head(&mut m, head);
                cx.write(vec![put(db, m.id, head + i, &a[3])?, db::write_meta(db, &a[1], &m)?], true).await?;
                self.touched(cx, db.index, &a[1], false);
                resp::simple(out, "OK");
            }
            "ltrim" => {
                let (start, stop) = (int_arg(&a[2])?, int_arg(&a[3])?);
                self.ltrim(cx, db, &a[1], start, stop).await?;
                resp::simple(out, "OK");
            }
            "lrem" => {
                let count = int_arg(&a[2])?;
                resp::integer(out, self.lrem(cx, db, &a[1], count, &a[3]).await?);
            }
            "linsert" => {
                let before = if is(&a[2], "before") {
                    true
                } else if is(&a[2], "after") {
                    false
                } else {
                    return fail(SYNTAX);
                };
                check_element(&a[4])?;
                resp::integer(out, self.linsert(cx, db, &a[1], before, &a[3], &a[4]).await?);
            }
            "lpos" => self.lpos(cx, db, a, out).await?,
            "lmove" | "rpoplpush" | "blmove" | "brpoplpush" => {
                let (from, to) = if name.ends_with("move") { (side(&a[3])?, side(&a[4])?) } else { (false, true) };
                if name.starts_with('b') {
                    super::blocking::timeout_arg(a.last().expect("arity"))?;
                }
                super::strings::bulk_or_null(out, self.lmove(cx, db, &a[1], &a[2], from, to).await?);
            }
            "lmpop" | "blmpop" => {
                let args = if name == "blmpop" {
                    super::blocking::timeout_arg(&a[1])?;
                    &a[1..]
                } else {
                    a
                };
                let (keys, left, count) = mpop_args(args, false)?;
                match self.mpop(cx, db, &keys, left, count).await? {
                    None => resp::null_array(out),
                    Some((k, v)) => {
                        resp::array_len(out, 2);
                        resp::bulk(out, &k);
                        bulk_array(out, &v);
                    }
                }
            }
            "blpop" | "brpop" => {
                super::blocking::timeout_arg(a.last().expect("arity"))?;
                let keys: Vec<Vec<u8>> = a[1..a.len() - 1].to_vec();
                match self.mpop(cx, db, &keys, name == "blpop", 1).await? {
                    None => resp::null_array(out),
                    Some((k, mut v)) => {
                        resp::array_len(out, 2);
                        resp::bulk(out, &k);
                        resp::bulk(out, &v.remove(0));
                    }
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// A key row that must be a list or absent; `lock`: exclusively (to change it). A reader
    /// that reads elements afterwards uses `list_meta_shared`.
    pub(super) async fn list_meta(&self, cx: &mut Cx, db: &Db, key: &[u8], lock: bool) -> CR<Option<Meta>> {
        match self.read_meta(cx, db, key, lock).await? {
            Some(m) if m.kind != TYPE_LIST => fail(WRONGTYPE),
            m => Ok(m),
        }
    }

    /// A key row that must be a list or absent, read under a shared lock (for a reader that
    /// reads several elements after it).
    async fn list_meta_shared(&self, cx: &mut Cx, db: &Db, key: &[u8]) -> CR<Option<Meta>> {
        let op = db::read_meta(db, key, OpKind::ReadShared)?;
        match meta_of(db, cx.run(vec![op]).await?.into_iter().next())? {
            Some(m) if m.kind != TYPE_LIST => fail(WRONGTYPE),
            None => {
                cx.key_miss(db.index, key);
                Ok(None)
            }
            m => Ok(m),
        }
    }

    /// Elements `s..=e` (indexes) of the list `m` read under a shared lock of its key row
    /// taken again here (the caller's `m` came from an unlocked read; if it changed meanwhile,
    /// the locked row decides).
    async fn list_read(&self, cx: &mut Cx, db: &Db, key: &[u8], m: &Meta, s: i64, e: i64) -> CR<Vec<Vec<u8>>> {
        let mut m = m.clone();
        let (mut s, mut e) = (s, e);
        if e > s {
            match self.list_meta_shared(cx, db, key).await? {
                Some(l) => {
                    if l != m {
                        // Renormalise against the locked row (the caller's indexes were absolute).
                        let len = l.len as i64;
                        if s >= len {
                            return Ok(Vec::new());
                        }
                        e = e.min(len - 1);
                        s = s.max(0);
                        m = l;
                    }
                }
                None => return Ok(Vec::new()),
            }
        }
        self.list_elements(cx, db, &m, s, e).await
    }

    /// Elements `s..=e` of a list whose key row `m` is locked (or read in this transaction).
    pub(super) async fn list_elements(&self, cx: &mut Cx, db: &Db, m: &Meta, s: i64, e: i64) -> CR<Vec<Vec<u8>>> {
        let head = head_of(m);
        let mut out = Vec::with_capacity((e - s + 1).max(0) as usize);
        let mut i = s;
        while i <= e {
            let end = (i + LIST_BATCH as i64 - 1).min(e);
            let ops =
                (i..=end).map(|k| db.lists.read_columns(&pos_key(m.id, head + k), &[2])).collect::<Result<_, _>>()?;
            for r in cx.run(ops).await? {
                match row_of(Some(r))? {
                    Some(b) => out.push(db::bytes_of(db.lists.decode_projection(&[2], &b)?.remove(0))),
                    None => return Err(super::transactions::changed()),
                }
            }
            i = end + 1;
        }
        Ok(out)
    }

    /// LPUSH/RPUSH (`left`), and the X forms (`existing`: only onto a list that exists): the
    /// new length.
    pub(super) async fn push(
        &self,
        cx: &mut Cx,
        db: &Db,
        key: &[u8],
        vals: &[Vec<u8>],
        left: bool,
        existing: bool,
    ) -> CR<i64> {
        for v in vals {
            check_element(v)?;
        }
        let n = self.push_core(cx, db, key, &[(left, existing, vals)]).await?[0];
        if n > 0 {
            self.touched(cx, db.index, key, false);
        }
        Ok(n)
    }

    /// LPUSH RPUSH LPUSHX RPUSHX of one key in order (a group, `groups`): each one's length
    /// after it.
    pub(super) async fn push_all(&self, cx: &mut Cx, db: &Db, key: &[u8], cmds: &[Cmd<'_>]) -> CR<Vec<Done>> {
        let (slots, passed) = checked(cmds, check_element)?;
        let pushes: Vec<(bool, bool, &[Vec<u8>])> = passed
            .iter()
            .map(|c| {
                let name = &c.a[0];
                let existing = name.last().is_some_and(|x| x.eq_ignore_ascii_case(&b'x'));
                (name[0].eq_ignore_ascii_case(&b'l'), existing, &c.a[2..])
            })
            .collect();
        Ok(counted(slots, self.push_core(cx, db, key, &pushes).await?))
    }

    /// Pushes `(left, existing, values)` in order onto the list `key` in one write: the length
    /// after each (0 for an X form while there is no list).
    async fn push_core(&self, cx: &mut Cx, db: &Db, key: &[u8], pushes: &[(bool, bool, &[Vec<u8>])]) -> CR<Vec<i64>> {
        if pushes.is_empty() {
            return Ok(Vec::new());
        }
        let mut m = self.list_meta(cx, db, key, true).await?;
        let mut ops = Vec::new();
        let mut lens = Vec::with_capacity(pushes.len());
        for &(left, existing, vals) in pushes {
            let list = match &mut m {
                Some(m) => m,
                None if existing => {
                    lens.push(0);
                    continue;
                }
                None => m.insert(Meta::collection(TYPE_LIST, self.new_id(db).await?)),
            };
            ops.extend(self.push_ops(db, list, vals.iter().map(|v| &v[..]), left)?);
            lens.push(list.len as i64);
        }
        if let Some(m) = m.filter(|_| !ops.is_empty()) {
            ops.push(db::write_meta(db, key, &m)?);
            cx.write(ops, true).await?;
        }
        Ok(lens)
    }

    /// The element writes that push `vals` onto the list `m` (updated for them).
    fn push_ops<'a>(&self, db: &Db, m: &mut Meta, vals: impl Iterator<Item = &'a [u8]>, left: bool) -> CR<Vec<KeyOp>> {
        let mut head = head_of(m);
        let mut ops = Vec::new();
        for v in vals {
            let pos = if left {
                head -= 1;
                head
            } else {
                head + m.len as i64
            };
            m.len += 1;
            ops.push(put(db, m.id, pos, v)?);
        }
        set_head(m, head);
        Ok(ops)
    }

    /// LPOP RPOP of one key in order (a group, `groups`).
    pub(super) async fn pop_all(&self, cx: &mut Cx, db: &Db, key: &[u8], cmds: &[Cmd<'_>]) -> CR<Vec<Done>> {
        // Per command: (left, count) or its error.
        let mut pops: Vec<Result<(bool, Option<i64>), RErr>> = Vec::with_capacity(cmds.len());
        for c in cmds {
            let left = c.a[0].eq_ignore_ascii_case(b"lpop");
            pops.push(if c.a.len() > 3 {
                let name = if left { "lpop" } else { "rpop" };
                Err(RErr(format!("ERR wrong number of arguments for '{name}' command")))
            } else {
                match c.a.get(2).map(|c| parse_int(c)) {
                    None => Ok((left, None)),
                    Some(Some(n)) if n >= 0 => Ok((left, Some(n))),
                    Some(_) => Err(RErr(POSITIVE.into())),
                }
            });
        }
        let mut m = self.list_meta(cx, db, key, true).await?;
        // The positions each takes, in order.
        let mut positions = Vec::new();
        let mut taken: Vec<Option<(usize, usize, bool)>> = Vec::with_capacity(cmds.len());
        for p in &pops {
            let Ok((left, count)) = *p else {
                taken.push(None);
                continue;
            };
            let Some(l) = m.as_mut().filter(|l| l.len > 0) else {
                taken.push(None);
                continue;
            };
            let from = positions.len();
            positions.extend(take_from(l, left, count.unwrap_or(1)));
            taken.push(Some((from, positions.len(), l.len == 0)));
        }
        let mut got = match m {
            Some(m) if !positions.is_empty() => self.take_positions(cx, db, key, &m, &positions, true).await?,
            _ => Vec::new(),
        }
        .into_iter();
        let mut done = Vec::with_capacity(cmds.len());
        for (p, t) in pops.into_iter().zip(taken) {
            let count = match p {
                Err(e) => {
                    done.push(Done::err(e));
                    continue;
                }
                Ok((_, count)) => count,
            };
            let mut b = Vec::new();
            let Some((from, to, gone)) = t else {
                match count {
                    None => resp::null(&mut b),
                    Some(_) => resp::null_array(&mut b),
                }
                done.push(Done::ok(b, None));
                continue;
            };
            let v: Vec<Vec<u8>> = got.by_ref().take(to - from).collect();
            match count {
                None => resp::bulk(&mut b, &v[0]),
                Some(_) => bulk_array(&mut b, &v),
            }
            done.push(Done::ok(b, (to > from).then_some(gone)));
        }
        Ok(done)
    }

    /// Pops from the locked list `m`, writing its key row (or deleting it when emptied); the
    /// elements and the key row after.
    #[allow(clippy::too_many_arguments)]
    async fn pop_locked(
        &self,
        cx: &mut Cx,
        db: &Db,
        key: &[u8],
        mut m: Meta,
        left: bool,
        count: i64,
        last: bool,
    ) -> CR<(Vec<Vec<u8>>, Meta)> {
        let positions = take_from(&mut m, left, count);
        if positions.is_empty() {
            return Ok((Vec::new(), m));
        }
        let got = self.take_positions(cx, db, key, &m, &positions, last).await?;
        self.touched(cx, db.index, key, m.len == 0);
        Ok((got, m))
    }

    /// Deletes the elements at `positions` returning them, and writes the key row `m` after
    /// (deleted when the list is empty) with the last batch (which commits when `last`).
    async fn take_positions(
        &self,
        cx: &mut Cx,
        db: &Db,
        key: &[u8],
        m: &Meta,
        positions: &[i64],
        last: bool,
    ) -> CR<Vec<Vec<u8>>> {
        let mut got = Vec::with_capacity(positions.len());
        for (i, chunk) in positions.chunks(LIST_BATCH).enumerate() {
            let mut ops = chunk.iter().map(|&p| take(db, m.id, p)).collect::<Result<Vec<_>, _>>()?;
            let final_chunk = (i + 1) * LIST_BATCH >= positions.len();
            if final_chunk {
                ops.push(meta_op(db, key, m)?);
            }
            let rs = cx.write(ops, last && final_chunk).await?;
            for r in rs.into_iter().take(chunk.len()) {
                match row_of(Some(r))? {
                    Some(b) => got.push(db::bytes_of(db.lists.decode_projection(&[2], &b)?.remove(0))),
                    None => return Err(super::transactions::changed()),
                }
            }
        }
        Ok(got)
    }

    /// LTRIM: keeps elements `start..=stop` (redis's normalisation), deleting the rest.
    async fn ltrim(&self, cx: &mut Cx, db: &Db, key: &[u8], start: i64, stop: i64) -> CR {
        let Some(mut m) = self.list_meta(cx, db, key, true).await? else { return Ok(()) };
        let len = m.len as i64;
        let (s, e) = norm_range(start, stop, len).unwrap_or((len, len - 1));
        let head = head_of(&m);
        let doomed: Vec<i64> = (head..head + s.min(len)).chain(head + e + 1..head + len).collect();
        if doomed.is_empty() {
            return Ok(());
        }
        m.len = (e - s + 1).max(0) as u64;
        set_head(&mut m, head + s.min(len));
        self.delete_positions(cx, db, m.id, &doomed).await?;
        cx.write(vec![meta_op(db, key, &m)?], true).await?;
        self.touched(cx, db.index, key, m.len == 0);
        Ok(())
    }

    async fn delete_positions(&self, cx: &mut Cx, db: &Db, id: u64, ps: &[i64]) -> CR {
        for chunk in ps.chunks(LIST_BATCH) {
            let ops = chunk.iter().map(|&p| db.lists.delete(&pos_key(id, p))).collect::<Result<_, _>>()?;
            cx.write(ops, false).await?;
        }
        Ok(())
    }

    /// Rewrites elements from index `from` on with `vals` (the list's new tail) and deletes
    /// positions past the new length (`old_len` is the length before).
    async fn rewrite_tail(&self, cx: &mut Cx, db: &Db, m: &Meta, from: i64, vals: &[Vec<u8>], old_len: i64) -> CR {
        let head = head_of(m);
        for (ci, chunk) in vals.chunks(LIST_BATCH).enumerate() {
            let base = from + (ci * LIST_BATCH) as i64;
            let ops = chunk
                .iter()
                .enumerate()
                .map(|(k, v)| put(db, m.id, head + base + k as i64, v))
                .collect::<Result<_, _>>()?;
            cx.write(ops, false).await?;
        }
        let new_len = from + vals.len() as i64;
        let doomed: Vec<i64> = (head + new_len..head + old_len).collect();
        self.delete_positions(cx, db, m.id, &doomed).await
    }

    /// LREM: removes up to |count| elements equal to `v` (from the tail when negative; all when
    /// 0); how many went.
    async fn lrem(&self, cx: &mut Cx, db: &Db, key: &[u8], count: i64, v: &[u8]) -> CR<i64> {
        let Some(mut m) = self.list_meta(cx, db, key, true).await? else { return Ok(0) };
        let len = m.len as i64;
        let all = self.list_elements(cx, db, &m, 0, len - 1).await?;
        let limit = if count == 0 { u64::MAX } else { count.unsigned_abs() };
        let mut drop = vec![false; all.len()];
        let mut removed = 0u64;
        let order: Box<dyn Iterator<Item = usize>> =
            if count < 0 { Box::new((0..all.len()).rev()) } else { Box::new(0..all.len()) };
        for i in order {
            if removed == limit {
                break;
            }
            if all[i] == v {
                drop[i] = true;
                removed += 1;
            }
        }
        if removed == 0 {
            return Ok(0);
        }
        let first = drop.iter().position(|d| *d).expect("one removed") as i64;
        let rest: Vec<Vec<u8>> =
            all.into_iter().zip(drop).skip(first as usize).filter(|(_, d)| !d).map(|(e, _)| e).collect();
        self.rewrite_tail(cx, db, &m, first, &rest, len).await?;
        m.len -= removed;
        let head = head_of(&m);
        set_head(&mut m, head);
        cx.write(vec![meta_op(db, key, &m)?], true).await?;
        self.touched(cx, db.index, key, m.len == 0);
        Ok(removed as i64)
    }

    /// LINSERT: the new length, -1 when the pivot is not there, 0 when the key is not.
    async fn linsert(&self, cx: &mut Cx, db: &Db, key: &[u8], before: bool, pivot: &[u8], v: &[u8]) -> CR<i64> {
        let Some(mut m) = self.list_meta(cx, db, key, true).await? else { return Ok(0) };
        let len = m.len as i64;
        let mut found = None;
        let mut i = 0;
        let mut read = Vec::new();
        while i < len && found.is_none() {
            let end = (i + LIST_BATCH as i64 - 1).min(len - 1);
            let chunk = self.list_elements(cx, db, &m, i, end).await?;
            if let Some(k) = chunk.iter().position(|e| e == pivot) {
                found = Some(i + k as i64);
            }
            read.extend(chunk);
            i = end + 1;
        }
        let Some(p) = found else { return Ok(-1) };
        let j = if before { p } else { p + 1 };
        let head = head_of(&m);
        if j < len / 2 {
            // Move the first j elements one position towards the head.
            let mut ops = Vec::new();
            for (k, e) in read.iter().take(j as usize).enumerate() {
                ops.push(put(db, m.id, head - 1 + k as i64, e)?);
            }
            ops.push(put(db, m.id, head - 1 + j, v)?);
            for chunk in ops.chunks(LIST_BATCH) {
                cx.write(chunk.to_vec(), false).await?;
            }
            set_head(&mut m, head - 1);
        } else {
            let mut tail = self.list_elements(cx, db, &m, read.len() as i64, len - 1).await?;
            let mut all = read;
            all.append(&mut tail);
            let mut rest = vec![v.to_vec()];
            rest.extend(all.drain(j as usize..));
            self.rewrite_tail(cx, db, &m, j, &rest, len + 1).await?;
            set_head(&mut m, head);
        }
        m.len += 1;
        cx.write(vec![db::write_meta(db, key, &m)?], true).await?;
        self.touched(cx, db.index, key, false);
        Ok(m.len as i64)
    }

    /// LPOS key element [RANK r] [COUNT n] [MAXLEN m].
    async fn lpos(&self, cx: &mut Cx, db: &Db, a: &[Vec<u8>], out: &mut Vec<u8>) -> CR {
        let (mut rank, mut count, mut maxlen) = (1i64, None, 0i64);
        let mut i = 3;
        while i < a.len() {
            let Some(v) = a.get(i + 1) else { return fail(SYNTAX) };
            if is(&a[i], "rank") {
                rank = int_arg(v)?;
                if rank == 0 {
                    return fail(
                        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
                    );
                }
                if rank == i64::MIN {
                    return fail(
                        "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
                    );
                }
            } else if is(&a[i], "count") {
                let c = int_arg(v)?;
                if c < 0 {
                    return fail("ERR COUNT can't be negative");
                }
                count = Some(c);
            } else if is(&a[i], "maxlen") {
                maxlen = int_arg(v)?;
                if maxlen < 0 {
                    return fail("ERR MAXLEN can't be negative");
                }
            } else {
                return fail(SYNTAX);
            }
            i += 2;
        }
        let Some(m) = self.list_meta(cx, db, &a[1], false).await? else {
            if count.is_some() {
                resp::array_len(out, 0);
            } else {
                resp::null(out);
            }
            return Ok(());
        };
        let len = m.len as i64;
        let want = match count {
            Some(0) => i64::MAX,
            Some(c) => c,
            None => 1,
        };
        let mut skip = rank.unsigned_abs() - 1;
        let limit = if maxlen == 0 { len } else { maxlen.min(len) };
        let mut hits = Vec::new();
        let mut seen = 0i64;
        'outer: while seen < limit {
            let n = (LIST_BATCH as i64).min(limit - seen);
            let (s, e) = if rank > 0 { (seen, seen + n - 1) } else { (len - seen - n, len - seen - 1) };
            let mut chunk: Vec<(i64, Vec<u8>)> = (s..=e).zip(self.list_read(cx, db, &a[1], &m, s, e).await?).collect();
            if rank < 0 {
                chunk.reverse();
            }
            for (idx, e) in chunk {
                if e == a[2] {
                    if skip > 0 {
                        skip -= 1;
                    } else {
                        hits.push(idx);
                        if hits.len() as i64 >= want {
                            break 'outer;
                        }
                    }
                }
            }
            seen += n;
        }
        if count.is_some() {
            resp::array_len(out, hits.len());
            hits.iter().for_each(|h| resp::integer(out, *h));
        } else {
            match hits.first() {
                Some(h) => resp::integer(out, *h),
                None => resp::null(out),
            }
        }
        Ok(())
    }

    /// LMOVE: pops from `src`'s `from` end (true: left) and pushes onto `dst`'s `to` end.
    async fn lmove(&self, cx: &mut Cx, db: &Db, src: &[u8], dst: &[u8], from: bool, to: bool) -> CR<Option<Vec<u8>>> {
        let metas = self.lock_keys(cx, &[(db, src), (db, dst)]).await?;
        let Some(sm) = metas[0].clone() else { return Ok(None) };
        if sm.kind != TYPE_LIST {
            return fail(WRONGTYPE);
        }
        if let Some(d) = &metas[1]
            && d.kind != TYPE_LIST
        {
            return fail(WRONGTYPE);
        }
        let (mut v, after) = self.pop_locked(cx, db, src, sm, from, 1, false).await?;
        let v = v.pop().ok_or_else(super::transactions::changed)?;
        let mut dm = if src == dst {
            after
        } else {
            match metas[1].clone() {
                Some(d) => d,
                None => Meta::collection(TYPE_LIST, self.new_id(db).await?),
            }
        };
        let mut ops = self.push_ops(db, &mut dm, std::iter::once(&v[..]), to)?;
        ops.push(db::write_meta(db, dst, &dm)?);
        cx.write(ops, true).await?;
        self.touched(cx, db.index, dst, false);
        Ok(Some(v))
    }

    /// LMPOP/BLPOP/BRPOP: pops up to `count` from the first of `keys` that holds a list; the
    /// key and the elements, or None when all are empty. Every key is checked for its type
    /// first, as redis does.
    pub(super) async fn mpop(
        &self,
        cx: &mut Cx,
        db: &Db,
        keys: &[Vec<u8>],
        left: bool,
        count: i64,
    ) -> CR<Option<(Vec<u8>, Vec<Vec<u8>>)>> {
        for k in keys {
            if let Some(m) = self.probe_meta(cx, db, k, TYPE_LIST).await?
                && m.len > 0
            {
                // Lock and read again (another client may have emptied it meanwhile).
                if let Some(m) = self.list_meta(cx, db, k, true).await?
                    && m.len > 0
                {
                    let v = self.pop_locked(cx, db, k, m, left, count, true).await?.0;
                    return Ok(Some((k.clone(), v)));
                }
            }
        }
        Ok(None)
    }
}

/// LMPOP's and ZMPOP's arguments after the name: numkeys, keys, the side (LEFT/RIGHT or
/// MIN/MAX; true for LEFT/MIN) and COUNT.
pub(super) fn mpop_args(a: &[Vec<u8>], zset: bool) -> CR<(Vec<Vec<u8>>, bool, i64)> {
    let n = match parse_int(&a[1]) {
        Some(n) if n > 0 => n as usize,
        Some(_) => return fail("ERR numkeys should be greater than 0"),
        None => return fail(NOT_INT),
    };
    if n > a.len().saturating_sub(3) {
        return fail(SYNTAX);
    }
    let keys = a[2..2 + n].to_vec();
    let w = &a[2 + n];
    let left = if zset {
        if is(w, "min") {
            true
        } else if is(w, "max") {
            false
        } else {
            return fail(SYNTAX);
        }
    } else {
        side(w)?
    };
    let mut count = 1;
    let mut i = 3 + n;
    let mut seen = false;
    while i < a.len() {
        if is(&a[i], "count") && !seen && i + 1 < a.len() {
            count = match parse_int(&a[i + 1]) {
                Some(c) if c > 0 => c,
                _ => return fail("ERR count should be greater than 0"),
            };
            seen = true;
            i += 2;
        } else {
            return fail(SYNTAX);
        }
    }
    Ok((keys, left, count))
}

pub(super) fn bulk_array(out: &mut Vec<u8>, v: &[Vec<u8>]) {
    resp::array_len(out, v.len());
    v.iter().for_each(|e| resp::bulk(out, e));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_normalisation_is_redis_s() {
        assert_eq!(norm_range(0, -1, 3), Some((0, 2)));
        assert_eq!(norm_range(-100, 100, 3), Some((0, 2)));
        assert_eq!(norm_range(2, 1, 3), None);
        assert_eq!(norm_range(3, 5, 3), None);
        assert_eq!(norm_range(-1, -1, 3), Some((2, 2)));
        assert_eq!(norm_range(0, -4, 3), None);
    }
}
