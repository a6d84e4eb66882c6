//! Sorted-set commands. Members are rows of `zset_members(rondb_key, member, score)`; a score is
//! found by primary key and every range (by rank from either end, by score, by lex when the
//! scores are equal, as redis assumes) is one range of the ordered index `by_score`, whose
//! entries sort as redis's skiplist does: score, then member bytes. Ranks, counts, rank ranges
//! and LIMIT offsets are found from the counted index's subtree counts (O(log n)).
//!
//! Scores are replied as redis 7.0 does (`%.17g`, `inf`, `-inf`; RESP3 doubles). Inside EXEC a
//! sorted set this transaction changed is read whole with the changes merged (`Cx::fields`,
//! scores as 8 bytes) and ranged in memory.

use super::groups::{Cmd, Done, pop_count};
use super::keys::{cursor_arg, keep_cursor, random_rng, scan_options};
use super::lists::mpop_args;
use super::sets::{Range, card_args, check_member, random_ranks};
use super::{CR, Cx, Fail, NOT_FLOAT, NOT_INT, RErr, SYNTAX, WRONGTYPE, bump, fail, int_arg, is, row_of};
use crate::db::{self, Db, Meta, TYPE_SET, TYPE_ZSET};
use crate::resp::{self, parse_int};
use crate::{Server, Session};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tern_client::{Bound, KeyOp, OpResult, ScanSpec, Value};

/// A member and its score.
pub(super) type Entry = (Vec<u8>, f64);

/// One ZADD's flags and (score, member) pairs.
struct Zadd {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
    pairs: Vec<(f64, Vec<u8>)>,
}

impl Zadd {
    fn parse(a: &[Vec<u8>]) -> Result<Zadd, RErr> {
        let mut z = Zadd { nx: false, xx: false, gt: false, lt: false, ch: false, incr: false, pairs: Vec::new() };
        let mut i = 2;
        while i < a.len() {
            let f = &a[i];
            let flag = if is(f, "nx") {
                &mut z.nx
            } else if is(f, "xx") {
                &mut z.xx
            } else if is(f, "gt") {
                &mut z.gt
            } else if is(f, "lt") {
                &mut z.lt
            } else if is(f, "ch") {
                &mut z.ch
            } else if is(f, "incr") {
                &mut z.incr
            } else {
                break;
            };
            *flag = true;
            i += 1;
        }
        let rest = &a[i..];
        let e = |s: &str| Err(RErr(s.into()));
        if rest.is_empty() || !rest.len().is_multiple_of(2) {
            return e(SYNTAX);
        }
        if z.nx && z.xx {
            return e("ERR XX and NX options at the same time are not compatible");
        }
        if (z.nx && (z.gt || z.lt)) || (z.gt && z.lt) {
            return e("ERR GT, LT, and/or NX options at the same time are not compatible");
        }
        if z.incr && rest.len() > 2 {
            return e("ERR INCR option supports a single increment-element pair");
        }
        for p in rest.chunks(2) {
            let Some(s) = parse_score(&p[0]) else { return e(NOT_FLOAT) };
            if let Err(Fail::Reply(r)) = check_member(&p[1]) {
                return Err(r);
            }
            z.pairs.push((s, p[1].clone()));
        }
        Ok(z)
    }

    /// Applies the pairs to `now` (each member's current score, None: absent), all or nothing:
    /// (added, changed, the last score set, the entries to write).
    #[allow(clippy::type_complexity)]
    fn apply(&self, now: &mut HashMap<Vec<u8>, Option<f64>>) -> Result<(i64, i64, Option<f64>, Vec<Entry>), RErr> {
        let (mut added, mut changed) = (0i64, 0i64);
        let mut writes: Vec<Entry> = Vec::new();
        let mut result = None;
        let mut mine: HashMap<&[u8], f64> = HashMap::new();
        for (s, x) in &self.pairs {
            let cur = mine.get(&x[..]).copied().or_else(|| now.get(x).copied().flatten());
            match cur {
                Some(c) => {
                    if self.nx {
                        continue;
                    }
                    let new = if self.incr { c + s } else { *s };
                    if new.is_nan() {
                        return Err(RErr("ERR resulting score is not a number (NaN)".into()));
                    }
                    if (self.gt && new <= c) || (self.lt && new >= c) {
                        continue;
                    }
                    result = Some(new);
                    if new != c {
                        changed += 1;
                        mine.insert(x, new);
                        writes.push((x.clone(), new));
                    }
                }
                None => {
                    if self.xx {
                        continue;
                    }
                    added += 1;
                    result = Some(*s);
                    mine.insert(x, *s);
                    writes.push((x.clone(), *s));
                }
            }
        }
        for (x, s) in mine {
            now.insert(x.to_vec(), Some(s));
        }
        Ok((added, changed, result, writes))
    }

    fn reply(&self, resp3: bool, added: i64, changed: i64, result: Option<f64>, wrote: Option<bool>) -> Done {
        let mut b = Vec::new();
        let mut o = Out { out: &mut b, resp3 };
        if self.incr {
            o.opt_score(result);
        } else {
            resp::integer(o.out, if self.ch { added + changed } else { added });
        }
        Done::ok(b, wrote)
    }
}

/// A score as redis 7.0 replies it: `%.17g`, with `inf` and `-inf`.
pub fn fmt_score(d: f64) -> String {
    if d.is_nan() {
        return "nan".into();
    }
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let e = format!("{d:.16e}");
    let (mant, exp) = e.split_once('e').expect("exponent form");
    let x: i32 = exp.parse().expect("exponent");
    let strip = |s: &str| -> String {
        if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s.to_string() }
    };
    if !(-4..17).contains(&x) {
        format!("{}e{}{:02}", strip(mant), if x < 0 { '-' } else { '+' }, x.abs())
    } else {
        strip(&format!("{:.*}", (16 - x) as usize, d))
    }
}

/// A score argument as redis's `strtod` check takes it (no spaces, no NaN, no overflow).
pub fn parse_score(a: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(a).ok()?;
    if s.is_empty()
        || s.starts_with(|c: char| c.is_ascii_whitespace())
        || s.ends_with(|c: char| c.is_ascii_whitespace())
    {
        return None;
    }
    let l = s.to_ascii_lowercase();
    let body = l.trim_start_matches(['+', '-']);
    if body == "inf" || body == "infinity" {
        return Some(if l.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY });
    }
    if l.contains("inf") || l.contains("nan") || l.contains('_') {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    if v.is_infinite() {
        return None; // ERANGE
    }
    if v == 0.0 && body.split(['e', 'E']).next().is_some_and(|m| m.bytes().any(|b| (b'1'..=b'9').contains(&b))) {
        return None; // underflow, ERANGE
    }
    Some(v)
}

/// A ZRANGEBYSCORE bound: the score and whether it is exclusive (`(`).
fn score_bound(a: &[u8]) -> CR<(f64, bool)> {
    let (excl, rest) = match a.first() {
        Some(b'(') => (true, &a[1..]),
        _ => (false, a),
    };
    match parse_score(rest) {
        Some(v) => Ok((v, excl)),
        None => fail("ERR min or max is not a float"),
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Lex {
    Min,
    Max,
    In(Vec<u8>),
    Ex(Vec<u8>),
}

fn lex_bound(a: &[u8]) -> CR<Lex> {
    match a.first() {
        Some(b'-') if a.len() == 1 => Ok(Lex::Min),
        Some(b'+') if a.len() == 1 => Ok(Lex::Max),
        Some(b'[') => Ok(Lex::In(a[1..].to_vec())),
        Some(b'(') => Ok(Lex::Ex(a[1..].to_vec())),
        _ => fail("ERR min or max not valid string range item"),
    }
}

fn lex_ge_min(m: &[u8], min: &Lex) -> bool {
    match min {
        Lex::Min => true,
        Lex::Max => false,
        Lex::In(v) => m >= &v[..],
        Lex::Ex(v) => m > &v[..],
    }
}

fn lex_le_max(m: &[u8], max: &Lex) -> bool {
    match max {
        Lex::Max => true,
        Lex::Min => false,
        Lex::In(v) => m <= &v[..],
        Lex::Ex(v) => m < &v[..],
    }
}

/// What a range command selects.
#[derive(Debug, Clone)]
enum Sel {
    Rank(i64, i64),
    Score((f64, bool), (f64, bool)),
    Lex(Lex, Lex),
}

/// A range request: the selection (always min before max, REV applied in the order), REV, and
/// LIMIT (offset, count; count < 0: all).
#[derive(Debug, Clone)]
struct Req {
    sel: Sel,
    rev: bool,
    offset: i64,
    count: i64,
}

fn cmp_entry(a: &Entry, b: &Entry) -> std::cmp::Ordering {
    a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0))
}

/// Reply writer for members with scores (RESP3 pairs and doubles when the session speaks it).
pub(super) struct Out<'a> {
    pub out: &'a mut Vec<u8>,
    pub resp3: bool,
}

impl Out<'_> {
    fn score(&mut self, d: f64) {
        if self.resp3 {
            self.out.push(b',');
            self.out.extend_from_slice(fmt_score(d).as_bytes());
            self.out.extend_from_slice(b"\r\n");
        } else {
            resp::bulk(self.out, fmt_score(d).as_bytes());
        }
    }

    fn opt_score(&mut self, d: Option<f64>) {
        match d {
            Some(d) => self.score(d),
            None => resp::null(self.out),
        }
    }

    /// Members, with their scores when `with` (RESP3: [member, score] pairs).
    fn entries(&mut self, v: &[Entry], with: bool) {
        if !with {
            resp::array_len(self.out, v.len());
            v.iter().for_each(|(m, _)| resp::bulk(self.out, m));
            return;
        }
        if self.resp3 {
            resp::array_len(self.out, v.len());
            for (m, s) in v {
                resp::array_len(self.out, 2);
                resp::bulk(self.out, m);
                self.score(*s);
            }
        } else {
            resp::array_len(self.out, v.len() * 2);
            for (m, s) in v {
                resp::bulk(self.out, m);
                self.score(*s);
            }
        }
    }
}

fn zkey(id: u64, m: &[u8]) -> [Value; 2] {
    [Value::UInt(id), Value::Bytes(m.to_vec())]
}

fn decode_entry(v: Vec<Value>) -> Entry {
    let mut it = v.into_iter();
    let m = db::bytes_of(it.next().unwrap_or(Value::Null));
    let s = match it.next() {
        Some(Value::Double(d)) => d,
        _ => 0.0,
    };
    (m, s)
}

/// Parses ZRANGE-family options from `opts` into a request for `sel_args` (min, max).
#[allow(clippy::too_many_arguments)]
fn range_req(
    min: &[u8],
    max: &[u8],
    opts: &[Vec<u8>],
    mut by: u8, // b'r' rank, b's' score, b'l' lex
    mut rev: bool,
    allow_by: bool,
    allow_with: bool,
) -> CR<(Req, bool)> {
    let (mut with, mut limit) = (false, None);
    let mut i = 0;
    while i < opts.len() {
        let o = &opts[i];
        if allow_with && is(o, "withscores") {
            with = true;
        } else if is(o, "limit") && i + 2 < opts.len() {
            limit = Some((int_arg(&opts[i + 1])?, int_arg(&opts[i + 2])?));
            i += 2;
        } else if allow_by && is(o, "byscore") {
            by = b's';
        } else if allow_by && is(o, "bylex") {
            by = b'l';
        } else if allow_by && is(o, "rev") {
            rev = true;
        } else {
            return fail(SYNTAX);
        }
        i += 1;
    }
    if limit.is_some() && by == b'r' {
        return fail("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX");
    }
    if with && by == b'l' {
        return fail("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    // With REV the arguments come max first (except for ranks).
    let (lo, hi) = if rev && by != b'r' { (max, min) } else { (min, max) };
    let sel = match by {
        b'r' => Sel::Rank(int_arg(lo)?, int_arg(hi)?),
        b's' => Sel::Score(score_bound(lo)?, score_bound(hi)?),
        _ => Sel::Lex(lex_bound(lo)?, lex_bound(hi)?),
    };
    let (offset, count) = limit.unwrap_or((0, -1));
    Ok((Req { sel, rev, offset, count }, with))
}

/// Where a score or lex selection lies in a sorted set's index.
enum Bounds {
    /// Nothing can match.
    Empty,
    /// A lex range over members of different scores: redis leaves the answer unspecified, and
    /// it is found by filtering the set in order.
    Mixed,
    /// Raw index bounds (None: the set's end).
    Range(Option<Bound>, Option<Bound>),
}

/// numkeys key... [WEIGHTS w...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES] of ZUNION/ZINTER/ZDIFF
/// (and their STORE forms, `store`): keys, weights, aggregate and WITHSCORES.
type Agg = (Vec<Vec<u8>>, Vec<f64>, u8, bool);

fn combine_args(name: &str, a: &[Vec<u8>], store: bool) -> CR<Agg> {
    let n = match parse_int(&a[0]) {
        Some(n) if n > 0 => n as usize,
        Some(_) => return fail(format!("ERR at least 1 input key is needed for '{name}' command")),
        None => return fail(NOT_INT),
    };
    if n > a.len() - 1 {
        return fail(SYNTAX);
    }
    let keys = a[1..1 + n].to_vec();
    let diff = name.starts_with("zdiff");
    let (mut weights, mut agg, mut with) = (vec![1.0; n], b's', false);
    let mut i = 1 + n;
    while i < a.len() {
        if !diff && is(&a[i], "weights") && i + n < a.len() {
            for k in 0..n {
                weights[k] = match parse_score(&a[i + 1 + k]) {
                    Some(w) => w,
                    None => return fail("ERR weight value is not a float"),
                };
            }
            i += n + 1;
        } else if !diff && is(&a[i], "aggregate") && i + 1 < a.len() {
            agg = if is(&a[i + 1], "sum") {
                b's'
            } else if is(&a[i + 1], "min") {
                b'<'
            } else if is(&a[i + 1], "max") {
                b'>'
            } else {
                return fail(SYNTAX);
            };
            i += 2;
        } else if !store && is(&a[i], "withscores") {
            with = true;
            i += 1;
        } else {
            return fail(SYNTAX);
        }
    }
    Ok((keys, weights, agg, with))
}

fn aggregate(agg: u8, a: f64, b: f64) -> f64 {
    match agg {
        b'<' => a.min(b),
        b'>' => a.max(b),
        _ => {
            let s = a + b;
            if s.is_nan() { 0.0 } else { s }
        }
    }
}

impl Server {
    pub(super) async fn zset_meta(&self, cx: &mut Cx, db: &Db, key: &[u8], lock: bool) -> CR<Option<Meta>> {
        match self.read_meta(cx, db, key, lock).await? {
            Some(m) if m.kind != TYPE_ZSET => fail(WRONGTYPE),
            m => Ok(m),
        }
    }

    fn dirty(&self, cx: &Cx, db: &Db, id: u64) -> bool {
        cx.fields.contains_key(&(db.index, id))
    }

    /// Index rows of the sorted set `id` as entries.
    async fn zrows(&self, db: &Db, id: u64, r: Range) -> CR<Vec<Entry>> {
        Ok(self.index_rows(&db.zsets, &db.zset_index, id, r, &[1, 2]).await?.into_iter().map(decode_entry).collect())
    }

    /// The whole sorted set in order, with this transaction's changes merged.
    pub(super) async fn zall(&self, cx: &Cx, db: &Db, id: u64) -> CR<Vec<Entry>> {
        let mut v = self.zrows(db, id, Range::all()).await?;
        if let Some(changes) = cx.fields.get(&(db.index, id)) {
            let mut map: BTreeMap<Vec<u8>, f64> = v.into_iter().collect();
            for (m, s) in changes {
                match s {
                    Some(b) if b.len() == 8 => {
                        map.insert(m.clone(), f64::from_le_bytes(b[..8].try_into().expect("8 bytes")));
                    }
                    _ => {
                        map.remove(m);
                    }
                }
            }
            v = map.into_iter().collect();
            v.sort_by(cmp_entry);
        }
        Ok(v)
    }

    /// A raw index bound at (score, member) of the sorted set `id`.
    fn at(&self, db: &Db, id: u64, score: f64, member: Option<&[u8]>, inclusive: bool) -> CR<Bound> {
        let mut b = db.zsets.index_bound(&db.zset_index, &[Value::UInt(id), Value::Double(score)], inclusive)?;
        if let Some(m) = member {
            b.key.extend(db.zsets.key(&zkey(id, m))?);
        }
        Ok(b)
    }

    /// The entries a request selects, in its order.
    async fn zrange(&self, cx: &Cx, db: &Db, m: &Meta, q: &Req) -> CR<Vec<Entry>> {
        if q.offset < 0 {
            return Ok(Vec::new());
        }
        let take = |v: Vec<Entry>| -> Vec<Entry> {
            let it = v.into_iter().skip(q.offset as usize);
            if q.count < 0 { it.collect() } else { it.take(q.count as usize).collect() }
        };
        if self.dirty(cx, db, m.id) {
            let mut all = self.zall(cx, db, m.id).await?;
            if q.rev {
                all.reverse();
            }
            let len = all.len() as i64;
            let v: Vec<Entry> = match &q.sel {
                Sel::Rank(s, e) => match super::lists::norm_range(*s, *e, len) {
                    None => Vec::new(),
                    Some((s, e)) => all[s as usize..=e as usize].to_vec(),
                },
                Sel::Score(lo, hi) => all.into_iter().filter(|(_, s)| in_score(*s, *lo, *hi)).collect(),
                Sel::Lex(lo, hi) => all.into_iter().filter(|(x, _)| lex_ge_min(x, lo) && lex_le_max(x, hi)).collect(),
            };
            return Ok(if matches!(q.sel, Sel::Rank(..)) { v } else { take(v) });
        }
        // Offsets and rank ranges are found by rank in the data node's index, not read past.
        let (offset, limit) = (q.offset as u64, if q.count < 0 { 0 } else { q.count as u64 });
        match &q.sel {
            Sel::Rank(s, e) => {
                let Some((s, e)) = super::lists::norm_range(*s, *e, m.len as i64) else { return Ok(Vec::new()) };
                let r = Range { limit: (e - s + 1) as u64, offset: s as u64, desc: q.rev, ..Range::all() };
                self.zrows(db, m.id, r).await
            }
            Sel::Score(..) | Sel::Lex(..) => {
                if q.count == 0 {
                    return Ok(Vec::new());
                }
                match self.zbounds(db, m, &q.sel).await? {
                    Bounds::Empty => Ok(Vec::new()),
                    Bounds::Mixed => {
                        // Mixed scores: redis's answer is unspecified; filter the whole set in order.
                        let Sel::Lex(lo, hi) = &q.sel else { unreachable!("only a lex range mixes") };
                        let mut all = self.zrows(db, m.id, Range::all()).await?;
                        if q.rev {
                            all.reverse();
                        }
                        Ok(take(all.into_iter().filter(|(x, _)| lex_ge_min(x, lo) && lex_le_max(x, hi)).collect()))
                    }
                    Bounds::Range(lo, hi) => self.zrows(db, m.id, Range { lo, hi, desc: q.rev, limit, offset }).await,
                }
            }
        }
    }

    /// The index range of a score or lex selection of the sorted set `m` (committed rows).
    async fn zbounds(&self, db: &Db, m: &Meta, sel: &Sel) -> CR<Bounds> {
        match sel {
            Sel::Rank(..) => unreachable!("ranks need no bounds"),
            Sel::Score(lo, hi) => {
                if lo.0 > hi.0 || (lo.0 == hi.0 && (lo.1 || hi.1)) {
                    return Ok(Bounds::Empty);
                }
                Ok(Bounds::Range(
                    Some(self.at(db, m.id, lo.0, None, !lo.1)?),
                    Some(self.at(db, m.id, hi.0, None, !hi.1)?),
                ))
            }
            Sel::Lex(lo, hi) => {
                let first = self.zrows(db, m.id, Range { limit: 1, ..Range::all() }).await?;
                let last = self.zrows(db, m.id, Range { limit: 1, desc: true, ..Range::all() }).await?;
                let (Some(f), Some(l)) = (first.first(), last.first()) else { return Ok(Bounds::Empty) };
                if f.1 != l.1 {
                    return Ok(Bounds::Mixed);
                }
                let score = f.1;
                let bound = |b: &Lex| -> CR<Option<Bound>> {
                    Ok(match b {
                        Lex::Min | Lex::Max => None,
                        Lex::In(v) => Some(self.at(db, m.id, score, Some(v), true)?),
                        Lex::Ex(v) => Some(self.at(db, m.id, score, Some(v), false)?),
                    })
                };
                if *lo == Lex::Max || *hi == Lex::Min {
                    return Ok(Bounds::Empty);
                }
                Ok(Bounds::Range(bound(lo)?, bound(hi)?))
            }
        }
    }

    /// ZCOUNT/ZLEXCOUNT: the data node counts the index range, in O(log n).
    async fn zcount(&self, cx: &Cx, db: &Db, m: &Meta, sel: Sel) -> CR<u64> {
        if !self.dirty(cx, db, m.id) {
            match self.zbounds(db, m, &sel).await? {
                Bounds::Empty => return Ok(0),
                Bounds::Range(lo, hi) => return self.index_count(&db.zsets, &db.zset_index, m.id, lo, hi).await,
                Bounds::Mixed => {}
            }
        }
        Ok(self.zrange(cx, db, m, &Req { sel, rev: false, offset: 0, count: -1 }).await?.len() as u64)
    }

    /// Scores of members (None: not a member), reading by primary key.
    async fn scores(&self, cx: &mut Cx, db: &Db, id: u64, members: &[Vec<u8>]) -> CR<Vec<Option<f64>>> {
        let mut out = vec![None; members.len()];
        let mut ops = Vec::new();
        let mut idx = Vec::new();
        for (i, x) in members.iter().enumerate() {
            if x.len() <= db::KEY_MAX {
                ops.push(db.zsets.read_columns(&zkey(id, x), &[2])?);
                idx.push(i);
            }
        }
        for chunk_start in (0..ops.len()).step_by(1024) {
            let end = (chunk_start + 1024).min(ops.len());
            let rs = cx.run(ops[chunk_start..end].to_vec()).await?;
            for (k, r) in rs.into_iter().enumerate() {
                if let Some(b) = row_of(Some(r))?
                    && let Some(Value::Double(d)) = db.zsets.decode_projection(&[2], &b)?.into_iter().next()
                {
                    out[idx[chunk_start + k]] = Some(d);
                }
            }
        }
        Ok(out)
    }

    /// Writes entries into the locked sorted set `id` (new or changed scores).
    pub(super) async fn zwrite(&self, cx: &mut Cx, db: &Db, id: u64, v: &[Entry]) -> CR {
        let ops = self.zwrite_ops(cx, db, id, v)?;
        cx.write(ops, false).await?;
        Ok(())
    }

    /// The writes of entries `v` of the sorted set `id` (noted as this transaction's changes).
    fn zwrite_ops(&self, cx: &mut Cx, db: &Db, id: u64, v: &[Entry]) -> CR<Vec<KeyOp>> {
        let ops = v
            .iter()
            .map(|(x, s)| db.zsets.write(&[Value::UInt(id), Value::Bytes(x.clone()), Value::Double(*s)]))
            .collect::<Result<Vec<_>, _>>()?;
        let bytes: Vec<(Vec<u8>, Vec<u8>)> = v.iter().map(|(x, s)| (x.clone(), s.to_le_bytes().to_vec())).collect();
        self.note_fields(cx, db, id, bytes.iter().map(|(x, s)| (&x[..], Some(&s[..]))));
        Ok(ops)
    }

    /// Deletes members of the locked sorted set `m` (its count updated); how many were there.
    async fn zdelete(&self, cx: &mut Cx, db: &Db, m: &mut Meta, members: &[Vec<u8>]) -> CR<i64> {
        let mut removed = 0;
        for chunk in members.chunks(1024) {
            let mut ops = Vec::with_capacity(chunk.len());
            for x in chunk.iter().filter(|x| x.len() <= db::KEY_MAX) {
                let mut op = db.zsets.delete(&zkey(m.id, x))?;
                op.projection = Some(vec![1]);
                ops.push(op);
            }
            for r in cx.run(ops).await? {
                match r {
                    OpResult::Row(_) => removed += 1,
                    OpResult::Error(e) => return Err(Fail::Txn(e)),
                    _ => {}
                }
            }
        }
        self.note_fields(cx, db, m.id, members.iter().map(|x| (&x[..], None)));
        m.len = m.len.saturating_sub(removed as u64);
        Ok(removed)
    }

    /// The sorted-set commands; false when `name` is not one.
    pub(super) async fn zset_command(
        &self,
        cx: &mut Cx,
        sess: &mut Session,
        db: &Arc<Db>,
        name: &str,
        a: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> CR<bool> {
        let resp3 = sess.resp3;
        let mut o = Out { out, resp3 };
        if self.zset_removal(cx, db, name, a, &mut o).await?
            || self.zset_pop(cx, db, name, a, &mut o).await?
            || self.zset_combination(cx, db, name, a, &mut o).await?
        {
            return Ok(true);
        }
        match name {
            "zincrby" => {
                let args = vec![b"zadd".to_vec(), a[1].clone(), b"incr".to_vec(), a[2].clone(), a[3].clone()];
                let d = self.zadd_all(cx, db, &a[1], &[Cmd { a: &args, resp3 }]).await?.remove(0);
                self.finish_one(cx, db, &a[1], d, o.out)?;
            }
            "zcard" => resp::integer(o.out, self.zset_meta(cx, db, &a[1], false).await?.map_or(0, |m| m.len as i64)),
            "zscore" => {
                let s = match self.zset_meta(cx, db, &a[1], false).await? {
                    None => None,
                    Some(m) => self.scores(cx, db, m.id, &a[2..3]).await?[0],
                };
                o.opt_score(s);
            }
            "zmscore" => {
                let s = match self.zset_meta(cx, db, &a[1], false).await? {
                    None => vec![None; a.len() - 2],
                    Some(m) => self.scores(cx, db, m.id, &a[2..]).await?,
                };
                resp::array_len(o.out, s.len());
                s.into_iter().for_each(|s| o.opt_score(s));
            }
            "zcount" | "zlexcount" => {
                let sel = if name == "zcount" {
                    Sel::Score(score_bound(&a[2])?, score_bound(&a[3])?)
                } else {
                    Sel::Lex(lex_bound(&a[2])?, lex_bound(&a[3])?)
                };
                let n = match self.zset_meta(cx, db, &a[1], false).await? {
                    None => 0,
                    Some(m) => self.zcount(cx, db, &m, sel).await?,
                };
                resp::integer(o.out, n as i64);
            }
            "zrange" | "zrangebyscore" | "zrevrangebyscore" | "zrangebylex" | "zrevrangebylex" | "zrevrange" => {
                let (by, rev, allow_by, allow_with) = match name {
                    "zrange" => (b'r', false, true, true),
                    "zrangebyscore" => (b's', false, false, true),
                    "zrevrangebyscore" => (b's', true, false, true),
                    "zrangebylex" => (b'l', false, false, false),
                    "zrevrangebylex" => (b'l', true, false, false),
                    _ => (b'r', true, false, true),
                };
                if name == "zrevrange" && a.len() > 5 {
                    return fail(SYNTAX);
                }
                let (q, with) = range_req(&a[2], &a[3], &a[4..], by, rev, allow_by, allow_with)?;
                let v = match self.zset_meta(cx, db, &a[1], false).await? {
                    None => Vec::new(),
                    Some(m) => self.zrange(cx, db, &m, &q).await?,
                };
                o.entries(&v, with);
            }
            "zrangestore" => {
                let (q, _) = range_req(&a[3], &a[4], &a[5..], b'r', false, true, false)?;
                self.lock_keys(cx, &[(db, &a[1][..]), (db, &a[2][..])]).await?;
                let v = match self.zset_meta(cx, db, &a[2], false).await? {
                    None => Vec::new(),
                    Some(m) => self.zrange(cx, db, &m, &q).await?,
                };
                resp::integer(o.out, self.store_zset(cx, db, &a[1], v).await?);
            }
            "zrank" | "zrevrank" => {
                let r = match self.zset_meta(cx, db, &a[1], false).await? {
                    None => None,
                    Some(m) => self.rank(cx, db, &m, &a[2], name == "zrevrank").await?,
                };
                match r {
                    Some(r) => resp::integer(o.out, r),
                    None => resp::null(o.out),
                }
            }
            "zrandmember" => self.zrandmember(cx, db, a, &mut o).await?,
            "zscan" => self.zscan(cx, sess, db, a, &mut o).await?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// ZREM and the ZREMRANGEBY* commands; false when `name` is not one.
    async fn zset_removal(&self, cx: &mut Cx, db: &Arc<Db>, name: &str, a: &[Vec<u8>], o: &mut Out<'_>) -> CR<bool> {
        match name {
            "zrem" => {
                let n = match self.zset_meta(cx, db, &a[1], true).await? {
                    None => 0,
                    Some(mut m) => {
                        let n = self.zdelete(cx, db, &mut m, &a[2..]).await?;
                        if n > 0 {
                            self.write_coll_meta(cx, db, &a[1], m, true).await?;
                        }
                        n
                    }
                };
                resp::integer(o.out, n);
            }
            "zremrangebyrank" | "zremrangebyscore" | "zremrangebylex" => {
                let sel = match name {
                    "zremrangebyrank" => Sel::Rank(int_arg(&a[2])?, int_arg(&a[3])?),
                    "zremrangebyscore" => Sel::Score(score_bound(&a[2])?, score_bound(&a[3])?),
                    _ => Sel::Lex(lex_bound(&a[2])?, lex_bound(&a[3])?),
                };
                let n = match self.zset_meta(cx, db, &a[1], true).await? {
                    None => 0,
                    Some(mut m) => {
                        let v = self.zrange(cx, db, &m, &Req { sel, rev: false, offset: 0, count: -1 }).await?;
                        let members: Vec<Vec<u8>> = v.into_iter().map(|e| e.0).collect();
                        let n = self.zdelete(cx, db, &mut m, &members).await?;
                        if n > 0 {
                            self.write_coll_meta(cx, db, &a[1], m, true).await?;
                        }
                        n
                    }
                };
                resp::integer(o.out, n);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// The blocking pops (tried once here) and ZMPOP; false when `name` is not one.
    async fn zset_pop(&self, cx: &mut Cx, db: &Arc<Db>, name: &str, a: &[Vec<u8>], o: &mut Out<'_>) -> CR<bool> {
        match name {
            "bzpopmin" | "bzpopmax" => {
                super::blocking::timeout_arg(a.last().expect("arity"))?;
                let mut got = None;
                for k in &a[1..a.len() - 1] {
                    if self.probe_meta(cx, db, k, TYPE_ZSET).await?.is_some() {
                        let v = self.zpop(cx, db, k, name == "bzpopmin", 1).await?;
                        if let Some(e) = v.into_iter().next() {
                            got = Some((k.clone(), e));
                            break;
                        }
                    }
                }
                match got {
                    None => resp::null_array(o.out),
                    Some((k, (m, s))) => {
                        resp::array_len(o.out, 3);
                        resp::bulk(o.out, &k);
                        resp::bulk(o.out, &m);
                        o.score(s);
                    }
                }
            }
            "zmpop" | "bzmpop" => {
                let args = if name == "bzmpop" {
                    super::blocking::timeout_arg(&a[1])?;
                    &a[1..]
                } else {
                    a
                };
                let (keys, min, count) = mpop_args(args, true)?;
                let mut got = None;
                for k in &keys {
                    if self.probe_meta(cx, db, k, TYPE_ZSET).await?.is_some() {
                        let v = self.zpop(cx, db, k, min, count).await?;
                        if !v.is_empty() {
                            got = Some((k.clone(), v));
                            break;
                        }
                    }
                }
                match got {
                    None => resp::null_array(o.out),
                    Some((k, v)) => {
                        resp::array_len(o.out, 2);
                        resp::bulk(o.out, &k);
                        resp::array_len(o.out, v.len());
                        for (m, s) in &v {
                            resp::array_len(o.out, 2);
                            resp::bulk(o.out, m);
                            o.score(*s);
                        }
                    }
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// ZUNION, ZINTER, ZDIFF, their STORE forms and ZINTERCARD; false when `name` is not one.
    async fn zset_combination(
        &self,
        cx: &mut Cx,
        db: &Arc<Db>,
        name: &str,
        a: &[Vec<u8>],
        o: &mut Out<'_>,
    ) -> CR<bool> {
        match name {
            "zunion" | "zinter" | "zdiff" => {
                let (keys, w, agg, with) = combine_args(name, &a[1..], false)?;
                let v = self.zcombine(cx, db, name, &keys, &w, agg).await?;
                o.entries(&v, with);
            }
            "zunionstore" | "zinterstore" | "zdiffstore" => {
                let (keys, w, agg, _) = combine_args(name, &a[2..], true)?;
                let mut all = vec![a[1].clone()];
                all.extend(keys.iter().cloned());
                self.lock_keys(cx, &all.iter().map(|k| (&**db, &k[..])).collect::<Vec<_>>()).await?;
                let v = self.zcombine(cx, db, &name[..name.len() - 5], &keys, &w, agg).await?;
                resp::integer(o.out, self.store_zset(cx, db, &a[1], v).await?);
            }
            "zintercard" => {
                let (keys, limit) = card_args(a)?;
                let n = self.zcombine(cx, db, "zinter", &keys, &vec![1.0; keys.len()], b's').await?.len() as i64;
                resp::integer(o.out, if limit > 0 { n.min(limit) } else { n });
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// ZADDs (and ZINCRBYs as ZADD INCR) of one key in order (a group, `groups`): the key row is
    /// locked and the members' scores read once, the changed members written in one batch.
    pub(super) async fn zadd_all(&self, cx: &mut Cx, db: &Db, key: &[u8], cmds: &[Cmd<'_>]) -> CR<Vec<Done>> {
        let adds: Vec<Result<Zadd, RErr>> = cmds.iter().map(|c| Zadd::parse(c.a)).collect();
        let existing = self.zset_meta(cx, db, key, true).await?;
        let mut now: HashMap<Vec<u8>, Option<f64>> = HashMap::new();
        if let Some(m) = &existing {
            let mut members: Vec<Vec<u8>> =
                adds.iter().flatten().flat_map(|z| z.pairs.iter().map(|p| p.1.clone())).collect();
            members.sort_unstable();
            members.dedup();
            let cur = self.scores(cx, db, m.id, &members).await?;
            now.extend(members.into_iter().zip(cur));
        }
        let mut m = existing;
        let mut writes: Vec<Entry> = Vec::new();
        let mut done = Vec::with_capacity(cmds.len());
        for (z, c) in adds.into_iter().zip(cmds) {
            let z = match z {
                Ok(z) => z,
                Err(e) => {
                    done.push(Done::err(e));
                    continue;
                }
            };
            let set = match &mut m {
                Some(m) => m,
                None if z.xx => {
                    done.push(z.reply(c.resp3, 0, 0, None, None));
                    continue;
                }
                None => m.insert(Meta::collection(TYPE_ZSET, self.new_id(db).await?)),
            };
            match z.apply(&mut now) {
                Err(e) => done.push(Done::err(e)),
                Ok((added, changed, result, w)) => {
                    set.len += added as u64;
                    let wrote = (!w.is_empty()).then_some(false);
                    writes.extend(w);
                    done.push(z.reply(c.resp3, added, changed, result, wrote));
                }
            }
        }
        if let Some(m) = m.filter(|_| !writes.is_empty()) {
            let mut ops = self.zwrite_ops(cx, db, m.id, &writes)?;
            ops.push(super::sets::coll_meta_op(db, key, m)?);
            cx.write(ops, true).await?;
        }
        Ok(done)
    }

    /// ZRANK/ZREVRANK of a member: the entries before it.
    async fn rank(&self, cx: &mut Cx, db: &Db, m: &Meta, x: &[u8], rev: bool) -> CR<Option<i64>> {
        if self.dirty(cx, db, m.id) {
            let all = self.zall(cx, db, m.id).await?;
            let p = all.iter().position(|e| e.0 == x).map(|p| p as i64);
            return Ok(p.map(|p| if rev { all.len() as i64 - 1 - p } else { p }));
        }
        let Some(s) = self.scores(cx, db, m.id, &[x.to_vec()]).await?[0] else { return Ok(None) };
        let hi = self.at(db, m.id, s, Some(x), false)?;
        let r = self.index_count(&db.zsets, &db.zset_index, m.id, None, Some(hi)).await? as i64;
        Ok(Some(if rev { m.len as i64 - 1 - r } else { r }))
    }

    /// Pops up to `count` of the lowest (`min`) or highest entries of `key`.
    async fn zpop(&self, cx: &mut Cx, db: &Db, key: &[u8], min: bool, count: i64) -> CR<Vec<Entry>> {
        let (mut v, gone) = self.zpop_core(cx, db, key, min, &[count]).await?;
        let v = v.pop().unwrap_or_default();
        if !v.is_empty() {
            self.touched(cx, db.index, key, gone);
        }
        Ok(v)
    }

    /// ZPOPMINs (`min`) or ZPOPMAXs of one key in order (a group, `groups`).
    pub(super) async fn zpop_all(
        &self,
        cx: &mut Cx,
        db: &Db,
        key: &[u8],
        min: bool,
        cmds: &[Cmd<'_>],
    ) -> CR<Vec<Done>> {
        let counts: Vec<Result<Option<i64>, RErr>> = cmds.iter().map(|c| pop_count(c.a, NOT_INT)).collect();
        let wanted: Vec<i64> = counts.iter().flatten().map(|c| c.unwrap_or(1)).collect();
        let (popped, gone) = self.zpop_core(cx, db, key, min, &wanted).await?;
        let mut popped = popped.into_iter();
        let mut done = Vec::with_capacity(cmds.len());
        for (c, cmd) in counts.into_iter().zip(cmds) {
            let count = match c {
                Ok(c) => c,
                Err(e) => {
                    done.push(Done::err(e));
                    continue;
                }
            };
            let v = popped.next().unwrap_or_default();
            let mut b = Vec::new();
            let mut o = Out { out: &mut b, resp3: cmd.resp3 };
            if count.is_none() && cmd.resp3 {
                // One member: a flat [member, score] in RESP3 too.
                resp::array_len(o.out, v.len() * 2);
                for (m, s) in &v {
                    resp::bulk(o.out, m);
                    o.score(*s);
                }
            } else {
                o.entries(&v, true);
            }
            // The command that took the last entries took the key with them.
            let last = popped.as_slice().iter().all(|x| x.is_empty());
            done.push(Done::ok(b, (!v.is_empty()).then_some(gone && last)));
        }
        Ok(done)
    }

    /// Pops `counts[i]` entries for each in order from the lowest (`min`) or highest of `key`,
    /// in one range read and one batch of deletes: the entries of each, and whether the key
    /// is gone after them.
    async fn zpop_core(
        &self,
        cx: &mut Cx,
        db: &Db,
        key: &[u8],
        min: bool,
        counts: &[i64],
    ) -> CR<(Vec<Vec<Entry>>, bool)> {
        let total = counts.iter().fold(0i64, |a, c| a.saturating_add((*c).max(0)));
        let Some(mut m) = self.zset_meta(cx, db, key, true).await? else {
            return Ok((vec![Vec::new(); counts.len()], false));
        };
        if total == 0 {
            return Ok((vec![Vec::new(); counts.len()], false));
        }
        let q = Req { sel: Sel::Rank(0, total - 1), rev: !min, offset: 0, count: -1 };
        let v = self.zrange(cx, db, &m, &q).await?;
        // The entries and the key row in one batch (they are there: the key row is locked).
        let mut ops = Vec::with_capacity(v.len() + 1);
        for (x, _) in &v {
            ops.push(db.zsets.delete(&zkey(m.id, x))?);
        }
        self.note_fields(cx, db, m.id, v.iter().map(|(x, _)| (&x[..], None)));
        m.len -= v.len() as u64;
        let gone = m.len == 0;
        ops.push(super::sets::coll_meta_op(db, key, m)?);
        cx.write_found(ops, true).await?;
        let mut it = v.into_iter();
        let per = counts.iter().map(|c| it.by_ref().take((*c).max(0) as usize).collect()).collect();
        Ok((per, gone))
    }

    /// The entries of a key for ZUNION & co: a sorted set's, or a set's with score 1.
    async fn zinput(&self, cx: &mut Cx, db: &Db, key: &[u8]) -> CR<Option<Vec<Entry>>> {
        match self.read_meta(cx, db, key, false).await? {
            None => Ok(None),
            Some(m) if m.kind == TYPE_ZSET => Ok(Some(self.zall(cx, db, m.id).await?)),
            Some(m) if m.kind == TYPE_SET => {
                Ok(Some(self.set_members(cx, db, m.id).await?.into_iter().map(|x| (x, 1.0)).collect()))
            }
            Some(_) => fail(WRONGTYPE),
        }
    }

    async fn zcombine(&self, cx: &mut Cx, db: &Db, op: &str, keys: &[Vec<u8>], w: &[f64], agg: u8) -> CR<Vec<Entry>> {
        let mut inputs = Vec::new();
        for k in keys {
            inputs.push(self.zinput(cx, db, k).await?);
        }
        let weigh = |s: f64, w: f64| {
            let v = s * w;
            if v.is_nan() { 0.0 } else { v }
        };
        let mut acc: BTreeMap<Vec<u8>, f64> = BTreeMap::new();
        match op {
            "zunion" => {
                for (inp, &wt) in inputs.iter().zip(w) {
                    for (x, s) in inp.iter().flatten() {
                        let v = weigh(*s, wt);
                        acc.entry(x.clone()).and_modify(|c| *c = aggregate(agg, *c, v)).or_insert(v);
                    }
                }
            }
            "zinter" => {
                if inputs.iter().any(|i| i.is_none()) {
                    return Ok(Vec::new());
                }
                let maps: Vec<HashMap<&Vec<u8>, f64>> =
                    inputs.iter().map(|i| i.iter().flatten().map(|(x, s)| (x, *s)).collect()).collect();
                for (x, s) in inputs[0].iter().flatten() {
                    let mut v = weigh(*s, w[0]);
                    let mut all = true;
                    for (k, mp) in maps.iter().enumerate().skip(1) {
                        match mp.get(x) {
                            Some(s2) => v = aggregate(agg, v, weigh(*s2, w[k])),
                            None => {
                                all = false;
                                break;
                            }
                        }
                    }
                    if all {
                        acc.insert(x.clone(), v);
                    }
                }
            }
            _ => {
                let Some(first) = &inputs[0] else { return Ok(Vec::new()) };
                for (x, s) in first {
                    acc.insert(x.clone(), *s);
                }
                for inp in inputs.iter().skip(1).flatten() {
                    for (x, _) in inp {
                        acc.remove(x);
                    }
                }
            }
        }
        let mut v: Vec<Entry> = acc.into_iter().collect();
        v.sort_by(cmp_entry);
        Ok(v)
    }

    /// Replaces `dst` (locked) with a sorted set of `v` (deleted when empty); its size.
    async fn store_zset(&self, cx: &mut Cx, db: &Arc<Db>, dst: &[u8], v: Vec<Entry>) -> CR<i64> {
        let old = self.read_meta(cx, db, dst, true).await?;
        let mut m = Meta::collection(TYPE_ZSET, self.new_id(db).await?);
        self.zwrite(cx, db, m.id, &v).await?;
        m.len = v.len() as u64;
        // An empty result deletes the destination (when there is one: a delete of no row would
        // fail the transaction).
        let existed = old.is_some();
        let op = if m.len == 0 {
            existed.then(|| db.keys.delete(&[Value::Bytes(dst.to_vec())])).transpose()?
        } else {
            bump(&mut m);
            Some(db::write_meta(db, dst, &m)?)
        };
        cx.write(op.into_iter().collect(), true).await?;
        if let Some(o) = old {
            cx.garbage(db, o);
        }
        // An empty result where no key was raises nothing (redis's `dbDelete` found none).
        if existed || m.len > 0 {
            self.touched(cx, db.index, dst, m.len == 0);
        }
        Ok(m.len as i64)
    }

    /// ZRANDMEMBER key [count [WITHSCORES]].
    async fn zrandmember(&self, cx: &mut Cx, db: &Db, a: &[Vec<u8>], o: &mut Out<'_>) -> CR {
        let count = match a.get(2) {
            None => None,
            Some(c) => Some(int_arg(c)?),
        };
        let with = match a.len() {
            2 | 3 => false,
            4 if is(&a[3], "withscores") => true,
            _ => return fail(SYNTAX),
        };
        if count.is_some_and(|c| c < -(i64::MAX / 2) || (with && c.unsigned_abs() > (i64::MAX / 2) as u64)) {
            return fail("ERR value is out of range");
        }
        let mut rng = random_rng();
        let meta = self.zset_meta(cx, db, &a[1], false).await?;
        // A big set, not changed by this transaction: each pick is a random rank and one seek.
        if let Some(m) = &meta
            && !self.dirty(cx, db, m.id)
            && let Some(ranks) = random_ranks(m.len, count.unwrap_or(1))
        {
            let rows = self.rows_at(&db.zsets, &db.zset_index, m.id, &ranks, &[1, 2]).await?;
            let picked: Vec<Entry> = rows.into_iter().map(decode_entry).collect();
            match count {
                None => super::strings::bulk_or_null(o.out, picked.into_iter().next().map(|e| e.0)),
                Some(_) => o.entries(&picked, with),
            }
            return Ok(());
        }
        let all = match meta {
            None => Vec::new(),
            Some(m) => self.zall(cx, db, m.id).await?,
        };
        let Some(count) = count else {
            let x = (!all.is_empty()).then(|| all[rng.below(all.len() as u64) as usize].0.clone());
            super::strings::bulk_or_null(o.out, x);
            return Ok(());
        };
        let picked: Vec<Entry> = if count < 0 {
            if all.is_empty() {
                Vec::new()
            } else {
                let max = self.live.max_bulk.load(std::sync::atomic::Ordering::Relaxed) as u64;
                if count.unsigned_abs() > max / 4 {
                    return fail("ERR reply would exceed proto-max-bulk-len");
                }
                (0..count.unsigned_abs()).map(|_| all[rng.below(all.len() as u64) as usize].clone()).collect()
            }
        } else {
            let mut all = all;
            let n = (count as usize).min(all.len());
            for i in 0..n {
                let j = i + rng.below((all.len() - i) as u64) as usize;
                all.swap(i, j);
            }
            all.truncate(n);
            all
        };
        o.entries(&picked, with);
        Ok(())
    }

    /// ZSCAN key cursor [MATCH p] [COUNT n].
    async fn zscan(&self, cx: &mut Cx, sess: &mut Session, db: &Arc<Db>, a: &[Vec<u8>], o: &mut Out<'_>) -> CR {
        let cursor = cursor_arg(&a[2])?;
        let (pattern, count, _) = scan_options(&a[3..], false)?;
        let meta = self.zset_meta(cx, db, &a[1], false).await?;
        let mut found = Vec::new();
        let mut next = 0;
        if let Some(m) = meta {
            let scanner = if cursor == 0 {
                let own = db.zsets.index_bound(&db.zset_index, &[Value::UInt(m.id)], true)?;
                let mut spec = ScanSpec::table(db.zsets.id());
                spec.index = Some(db.zset_index.id);
                spec.partition = Some(db.zsets.partition_of(&zkey(m.id, b""))?);
                spec.lo = Some(own.clone());
                spec.hi = Some(own);
                spec.projection = Some(vec![1, 2]);
                spec.batch_rows = count.min(4096) as u32;
                Some(self.client.scan(spec))
            } else {
                sess.cursors.remove(&cursor).filter(|c| c.0 == db.index && c.1 == m.id).map(|c| c.2)
            };
            if let Some(mut sc) = scanner {
                for r in sc.next_batch().await?.unwrap_or_default() {
                    let e = decode_entry(db.zsets.decode_projection(&[1, 2], &r)?);
                    if pattern.as_ref().is_none_or(|p| p.matches(&e.0)) {
                        found.push(e);
                    }
                }
                if !sc.is_done() {
                    next = keep_cursor(sess, (db.index, m.id, sc));
                }
            }
        }
        resp::array_len(o.out, 2);
        resp::bulk(o.out, next.to_string().as_bytes());
        resp::array_len(o.out, found.len() * 2);
        for (x, s) in &found {
            resp::bulk(o.out, x);
            resp::bulk(o.out, fmt_score(*s).as_bytes());
        }
        Ok(())
    }
}

fn in_score(s: f64, lo: (f64, bool), hi: (f64, bool)) -> bool {
    (if lo.1 { s > lo.0 } else { s >= lo.0 }) && (if hi.1 { s < hi.0 } else { s <= hi.0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_format_as_redis_7_0() {
        assert_eq!(fmt_score(1.1), "1.1000000000000001");
        assert_eq!(fmt_score(2.0), "2");
        assert_eq!(fmt_score(1e20), "1e+20");
        assert_eq!(fmt_score(3.0e-5), "3.0000000000000001e-05");
        assert_eq!(fmt_score(f64::INFINITY), "inf");
        assert_eq!(fmt_score(-0.5), "-0.5");
        assert_eq!(fmt_score(0.0), "0");
        assert_eq!(fmt_score(123456789012345678.0), "1.2345678901234568e+17");
        assert_eq!(fmt_score(0.0001), "0.0001");
    }

    #[test]
    fn scores_parse_as_strtod() {
        assert_eq!(parse_score(b"1.5"), Some(1.5));
        assert_eq!(parse_score(b"+inf"), Some(f64::INFINITY));
        assert_eq!(parse_score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_score(b"nan"), None);
        assert_eq!(parse_score(b" 1"), None);
        assert_eq!(parse_score(b"1e400"), None);
        assert_eq!(parse_score(b"abc"), None);
        assert_eq!(parse_score(b".5"), Some(0.5));
    }
}
