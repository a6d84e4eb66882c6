//! Set commands. Members are rows of `set_members` under the key's `rondb_key`; the ordered index
//! `by_key` gives a set's members in byte order with one range of one partition, so a set is
//! read in O(its size) whatever else its partition holds. The key row counts the members and is
//! locked and rewritten by every writer (its change counter, as for hashes).
//!
//! Index scans read committed rows: inside EXEC the transaction's own member changes
//! (`Cx::fields`) are merged in. Random picks (SPOP, SRANDMEMBER) are uniform: sets of up to
//! `RANDOM_SCAN_MAX` members are read whole, on bigger ones a pick is a random rank found by one
//! seek of the counted index (`random_ranks`).

use super::groups::{Cmd, Done, checked, counted, pop_count};
use super::keys::{cursor_arg, keep_cursor, random_rng, scan_options};
use super::lists::{POSITIVE, bulk_array};
use super::{CR, Cx, Fail, NOT_INT, Pace, RErr, SYNTAX, WRONGTYPE, bump, fail, int_arg, is};
use crate::db::{self, Db, KEY_MAX, Meta, TYPE_SET};
use crate::resp::{self, parse_int};
use crate::{Server, Session};
use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use tern_client::{Bound, Index, KeyOp, OpResult, ScanSpec, TableHandle, Value};

/// The key row of a collection after a change: written (its change counter bumped), or deleted
/// when the collection is empty.
pub(super) fn coll_meta_op(db: &Db, key: &[u8], mut m: Meta) -> Result<KeyOp, tern_client::TernError> {
    if m.len == 0 {
        db.keys.delete(&[Value::Bytes(key.to_vec())])
    } else {
        bump(&mut m);
        db::write_meta(db, key, &m)
    }
}

/// Sets up to this size are read whole for a random pick.
const RANDOM_SCAN_MAX: u64 = 1024;
/// Random picks up to this many from a bigger collection are found by rank, one index seek each
/// (uniform, and O(log n) apiece); more are drawn from the collection read whole.
const RANDOM_PICKS_MAX: u64 = 4096;
/// Seeks by rank in flight at once.
const RANK_SEEKS_AT_ONCE: usize = 64;
const SSCAN_BATCH_MAX: i64 = 4096;

/// The ranks of `count` random members of a collection of `len`, to be found by one index seek
/// each: distinct for a non-negative count (as SRANDMEMBER, SPOP and ZRANDMEMBER with a positive
/// count), independent for a negative one. None when the collection is small enough to read
/// whole, or the count too big for seeks (more than RANDOM_PICKS_MAX, or a positive count of a
/// quarter of the collection or more, where distinct ranks would take long to draw).
pub(super) fn random_ranks(len: u64, count: i64) -> Option<Vec<u64>> {
    let n = count.unsigned_abs();
    if len <= RANDOM_SCAN_MAX || n > RANDOM_PICKS_MAX || (count >= 0 && n.saturating_mul(4) >= len) {
        return None;
    }
    let mut rng = random_rng();
    if count < 0 {
        return Some((0..n).map(|_| rng.below(len)).collect());
    }
    let mut ranks = HashSet::new();
    while (ranks.len() as u64) < n {
        ranks.insert(rng.below(len));
    }
    Some(ranks.into_iter().collect())
}

pub(super) fn check_member(m: &[u8]) -> CR {
    if m.len() > KEY_MAX {
        return fail(format!("ERR members are limited to {KEY_MAX} bytes"));
    }
    Ok(())
}

fn member_key(id: u64, m: &[u8]) -> [Value; 2] {
    [Value::UInt(id), Value::Bytes(m.to_vec())]
}

/// An index range over one collection's rows: `lo`/`hi` are raw bounds (encoded index columns,
/// optionally followed by primary-key bytes); None is the collection's own end.
pub(super) struct Range {
    pub lo: Option<Bound>,
    pub hi: Option<Bound>,
    pub desc: bool,
    pub limit: u64,
    /// Entries of the range (in its reading order) to leave out first, found by rank.
    pub offset: u64,
}

impl Range {
    pub fn all() -> Range {
        Range { lo: None, hi: None, desc: false, limit: 0, offset: 0 }
    }
}

impl Server {
    /// Rows (projected to `cols`) of one collection `id` in index order, within `r`.
    pub(super) async fn index_rows(
        &self,
        t: &TableHandle,
        index: &Index,
        id: u64,
        r: Range,
        cols: &[u16],
    ) -> CR<Vec<Vec<Value>>> {
        let own = t.index_bound(index, &[Value::UInt(id)], true)?;
        let mut spec = ScanSpec::table(t.id());
        spec.index = Some(index.id);
        spec.partition = Some(t.partition_of(&member_key(id, b""))?);
        spec.lo = Some(r.lo.unwrap_or_else(|| own.clone()));
        spec.hi = Some(r.hi.unwrap_or(own));
        spec.descending = r.desc;
        spec.ordered = true;
        spec.limit = r.limit;
        spec.offset = r.offset;
        spec.projection = Some(cols.to_vec());
        spec.batch_rows = if r.limit > 0 { r.limit.min(1024) as u32 } else { 1024 };
        let mut sc = self.client.scan(spec);
        let mut out = Vec::new();
        let mut pace = Pace::default();
        while let Some(rows) = sc.next_batch().await? {
            for row in rows {
                out.push(t.decode_projection(cols, &row)?);
            }
            pace.batch_done().await;
        }
        Ok(out)
    }

    /// How many rows of collection `id` lie in the index range `lo`..`hi` (raw bounds; None: the
    /// collection's end): the data node counts its ordered index, in O(log n).
    pub(super) async fn index_count(
        &self,
        t: &TableHandle,
        index: &Index,
        id: u64,
        lo: Option<Bound>,
        hi: Option<Bound>,
    ) -> CR<u64> {
        let own = t.index_bound(index, &[Value::UInt(id)], true)?;
        let mut spec = ScanSpec::table(t.id());
        spec.index = Some(index.id);
        spec.partition = Some(t.partition_of(&member_key(id, b""))?);
        spec.lo = Some(lo.unwrap_or_else(|| own.clone()));
        spec.hi = Some(hi.unwrap_or(own));
        let count = tern_agg::Aggregation { group_by: Vec::new(), aggs: vec![(tern_agg::AggOp::Count, None)] };
        spec.aggregate = Some(count.clone());
        let mut sc = self.client.scan(spec);
        let mut n = 0u64;
        while let Some(rows) = sc.next_batch().await? {
            for row in rows {
                let (_, accs) = tern_agg::decode_partial(&count, &row).map_err(|e| {
                    Fail::Reply(super::err(format!("ERR a count from the data node is damaged: {e:?}")))
                })?;
                if let Some(Value::Int(c)) = accs.first() {
                    n += u64::try_from(*c).unwrap_or(0);
                }
            }
        }
        Ok(n)
    }

    /// The rows (projected to `cols`) of collection `id` at each of `ranks` (0-based, in index
    /// order), in the order of `ranks`; a rank past the end (the collection shrank meanwhile)
    /// gives none.
    pub(super) async fn rows_at(
        &self,
        t: &TableHandle,
        index: &Index,
        id: u64,
        ranks: &[u64],
        cols: &[u16],
    ) -> CR<Vec<Vec<Value>>> {
        let mut out = Vec::with_capacity(ranks.len());
        for chunk in ranks.chunks(RANK_SEEKS_AT_ONCE) {
            let seeks = chunk
                .iter()
                .map(|&r| self.index_rows(t, index, id, Range { limit: 1, offset: r, ..Range::all() }, cols))
                .collect();
            for rows in crate::join_all(seeks).await {
                out.extend(rows?);
            }
        }
        Ok(out)
    }

    /// A key row that must be a set or absent.
    pub(super) async fn set_meta(&self, cx: &mut Cx, db: &Db, key: &[u8], lock: bool) -> CR<Option<Meta>> {
        match self.read_meta(cx, db, key, lock).await? {
            Some(m) if m.kind != TYPE_SET => fail(WRONGTYPE),
            m => Ok(m),
        }
    }

    /// A set's members in byte order, with this transaction's changes merged in.
    pub(super) async fn set_members(&self, cx: &Cx, db: &Db, id: u64) -> CR<Vec<Vec<u8>>> {
        let rows = self.index_rows(&db.sets, &db.set_index, id, Range::all(), &[1]).await?;
        let mut out: Vec<Vec<u8>> = rows.into_iter().map(|mut r| db::bytes_of(r.remove(0))).collect();
        if let Some(changes) = cx.fields.get(&(db.index, id)) {
            let mut all: BTreeSet<Vec<u8>> = out.into_iter().collect();
            for (f, v) in changes {
                if v.is_some() {
                    all.insert(f.clone());
                } else {
                    all.remove(f);
                }
            }
            out = all.into_iter().collect();
        }
        Ok(out)
    }

    /// The members of each key (missing: empty), checking every key is a set (WRONGTYPE).
    async fn sets_of(&self, cx: &mut Cx, db: &Db, keys: &[Vec<u8>]) -> CR<Vec<Vec<Vec<u8>>>> {
        let mut metas = Vec::new();
        for k in keys {
            metas.push(self.set_meta(cx, db, k, false).await?);
        }
        let mut out = Vec::new();
        for m in metas {
            out.push(match m {
                None => Vec::new(),
                Some(m) => self.set_members(cx, db, m.id).await?,
            });
        }
        Ok(out)
    }

    /// The set commands; false when `name` is not one.
    pub(super) async fn set_command(
        &self,
        cx: &mut Cx,
        sess: &mut Session,
        db: &Arc<Db>,
        name: &str,
        a: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> CR<bool> {
        match name {
            "srem" => resp::integer(out, self.srem(cx, db, &a[1], &a[2..]).await?),
            "scard" => resp::integer(out, self.set_meta(cx, db, &a[1], false).await?.map_or(0, |m| m.len as i64)),
            "smembers" => {
                let v = match self.set_meta(cx, db, &a[1], false).await? {
                    None => Vec::new(),
                    Some(m) => self.set_members(cx, db, m.id).await?,
                };
                bulk_array(out, &v);
            }
            "sismember" | "smismember" => {
                let got = self.is_member(cx, db, &a[1], &a[2..]).await?;
                if name == "sismember" {
                    resp::integer(out, got[0] as i64);
                } else {
                    resp::array_len(out, got.len());
                    got.iter().for_each(|g| resp::integer(out, *g as i64));
                }
            }
            "srandmember" => self.srandmember(cx, db, a, out).await?,
            "smove" => {
                check_member(&a[3])?;
                resp::integer(out, self.smove(cx, db, &a[1], &a[2], &a[3]).await? as i64);
            }
            "sinter" | "sunion" | "sdiff" => {
                let sets = self.sets_of(cx, db, &a[1..]).await?;
                bulk_array(out, &combine(name, sets));
            }
            "sinterstore" | "sunionstore" | "sdiffstore" => {
                let mut keys = vec![a[1].clone()];
                keys.extend_from_slice(&a[2..]);
                self.lock_keys(cx, &keys.iter().map(|k| (&**db, &k[..])).collect::<Vec<_>>()).await?;
                let sets = self.sets_of(cx, db, &a[2..]).await?;
                let v = combine(&name[..name.len() - 5], sets);
                resp::integer(out, self.store_set(cx, db, &a[1], &v).await?);
            }
            "sintercard" => {
                let (keys, limit) = card_args(a)?;
                let sets = self.sets_of(cx, db, &keys).await?;
                let n = combine("sinter", sets).len() as i64;
                resp::integer(out, if limit > 0 { n.min(limit) } else { n });
            }
            "sscan" => self.sscan(cx, sess, db, a, out).await?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    async fn set_for_write(&self, cx: &mut Cx, db: &Db, key: &[u8]) -> CR<Meta> {
        match self.set_meta(cx, db, key, true).await? {
            Some(m) => Ok(m),
            None => Ok(Meta::collection(TYPE_SET, self.new_id(db).await?)),
        }
    }

    /// Writes a collection's key row after a change (bumped), or deletes it when empty.
    pub(super) async fn write_coll_meta(&self, cx: &mut Cx, db: &Db, key: &[u8], m: Meta, last: bool) -> CR {
        let gone = m.len == 0;
        cx.write(vec![coll_meta_op(db, key, m)?], last).await?;
        self.touched(cx, db.index, key, gone);
        Ok(())
    }

    /// Adds members to the locked set `m` (updated): whether each was new (a member named twice
    /// is new once: the second write finds the first).
    async fn add_members(&self, cx: &mut Cx, db: &Db, m: &mut Meta, members: &[Vec<u8>]) -> CR<Vec<bool>> {
        let mut ops: Vec<KeyOp> = Vec::with_capacity(members.len());
        for x in members {
            let mut op = db.sets.write(&member_key(m.id, x))?;
            op.projection = Some(vec![1]);
            ops.push(op);
        }
        let mut new = Vec::with_capacity(members.len());
        for chunk in ops.chunks(1024) {
            new.extend(cx.write(chunk.to_vec(), false).await?.iter().map(|r| *r == OpResult::NotFound));
        }
        self.note_fields(cx, db, m.id, members.iter().map(|x| (&x[..], Some(&b""[..]))));
        m.len += new.iter().filter(|n| **n).count() as u64;
        Ok(new)
    }

    pub(super) async fn sadd(&self, cx: &mut Cx, db: &Db, key: &[u8], members: &[Vec<u8>]) -> CR<i64> {
        for x in members {
            check_member(x)?;
        }
        let added = self.sadd_core(cx, db, key, &[members]).await?[0];
        // Nothing new: the key is not modified (WATCH, keyspace events), as in redis.
        if added > 0 {
            self.touched(cx, db.index, key, false);
        }
        Ok(added)
    }

    /// SADDs of one key in order (a group, `groups`).
    pub(super) async fn sadd_all(&self, cx: &mut Cx, db: &Db, key: &[u8], cmds: &[Cmd<'_>]) -> CR<Vec<Done>> {
        let (slots, passed) = checked(cmds, check_member)?;
        let adds: Vec<&[Vec<u8>]> = passed.iter().map(|c| &c.a[2..]).collect();
        Ok(counted(slots, self.sadd_core(cx, db, key, &adds).await?))
    }

    /// Adds each list of members in order to the set `key` (one batch of member writes, one
    /// key row write): how many of each were new.
    async fn sadd_core(&self, cx: &mut Cx, db: &Db, key: &[u8], adds: &[&[Vec<u8>]]) -> CR<Vec<i64>> {
        if adds.is_empty() {
            return Ok(Vec::new());
        }
        let mut m = self.set_for_write(cx, db, key).await?;
        let all: Vec<Vec<u8>> = adds.iter().flat_map(|x| x.iter().cloned()).collect();
        let new = self.add_members(cx, db, &mut m, &all).await?;
        let mut it = new.into_iter();
        let added: Vec<i64> = adds.iter().map(|x| it.by_ref().take(x.len()).filter(|n| *n).count() as i64).collect();
        if added.iter().any(|n| *n > 0) {
            cx.write(vec![coll_meta_op(db, key, m)?], true).await?;
        }
        Ok(added)
    }

    /// Removes members from the locked set `m` (updated); how many were there.
    async fn remove_members(&self, cx: &mut Cx, db: &Db, m: &mut Meta, members: &[Vec<u8>]) -> CR<i64> {
        let mut removed = 0;
        for chunk in members.chunks(1024) {
            let mut ops = Vec::with_capacity(chunk.len());
            for x in chunk {
                let mut op = db.sets.delete(&member_key(m.id, x))?;
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

    async fn srem(&self, cx: &mut Cx, db: &Db, key: &[u8], members: &[Vec<u8>]) -> CR<i64> {
        let Some(mut m) = self.set_meta(cx, db, key, true).await? else { return Ok(0) };
        let valid: Vec<Vec<u8>> = members.iter().filter(|x| x.len() <= KEY_MAX).cloned().collect();
        let removed = self.remove_members(cx, db, &mut m, &valid).await?;
        if removed > 0 {
            self.write_coll_meta(cx, db, key, m, true).await?;
        }
        Ok(removed)
    }

    async fn is_member(&self, cx: &mut Cx, db: &Db, key: &[u8], members: &[Vec<u8>]) -> CR<Vec<bool>> {
        let Some(m) = self.set_meta(cx, db, key, false).await? else { return Ok(vec![false; members.len()]) };
        let mut out = vec![false; members.len()];
        let mut ops = Vec::new();
        let mut idx = Vec::new();
        for (i, x) in members.iter().enumerate() {
            if x.len() <= KEY_MAX {
                ops.push(db.sets.read_columns(&member_key(m.id, x), &[1])?);
                idx.push(i);
            }
        }
        for (i, r) in idx.into_iter().zip(cx.run(ops).await?) {
            out[i] = matches!(r, OpResult::Row(_));
        }
        Ok(out)
    }

    /// Up to `n` distinct random members of the set `m` (all of them when `n` >= its size).
    async fn random_members(&self, cx: &Cx, db: &Db, m: &Meta, n: u64) -> CR<Vec<Vec<u8>>> {
        let dirty = cx.fields.contains_key(&(db.index, m.id));
        let ranks = if dirty { None } else { random_ranks(m.len, i64::try_from(n).unwrap_or(i64::MAX)) };
        let Some(ranks) = ranks else {
            let mut rng = random_rng();
            let mut all = self.set_members(cx, db, m.id).await?;
            if n as usize >= all.len() {
                return Ok(all);
            }
            // A partial Fisher-Yates shuffle.
            for i in 0..n as usize {
                let j = i + rng.below((all.len() - i) as u64) as usize;
                all.swap(i, j);
            }
            all.truncate(n as usize);
            return Ok(all);
        };
        let rows = self.rows_at(&db.sets, &db.set_index, m.id, &ranks, &[1]).await?;
        let mut seen = HashSet::new();
        Ok(rows
            .into_iter()
            .map(|r| db::bytes_of(r.into_iter().next().unwrap_or(Value::Null)))
            .filter(|x| seen.insert(x.clone()))
            .collect())
    }

    /// SPOPs of one key in order (a group, `groups`): the members all take are picked at once.
    pub(super) async fn spop_all(&self, cx: &mut Cx, db: &Db, key: &[u8], cmds: &[Cmd<'_>]) -> CR<Vec<Done>> {
        let counts: Vec<Result<Option<u64>, RErr>> =
            cmds.iter().map(|c| Ok(pop_count(c.a, POSITIVE)?.map(|n| n as u64))).collect();
        let mut m = self.set_meta(cx, db, key, true).await?;
        let mut picked = Vec::new();
        if let Some(set) = &mut m {
            let want: u64 = counts.iter().flatten().map(|c| c.unwrap_or(1)).fold(0, u64::saturating_add);
            picked = self.random_members(cx, db, set, want.min(set.len)).await?;
        }
        let (mut at, wrote) = (0, !picked.is_empty());
        let mut done = Vec::with_capacity(cmds.len());
        for c in counts {
            let count = match c {
                Ok(c) => c,
                Err(e) => {
                    done.push(Done::err(e));
                    continue;
                }
            };
            let n = (count.unwrap_or(1) as usize).min(picked.len() - at);
            let mut b = Vec::new();
            match count {
                None if n == 0 => resp::null(&mut b),
                None => resp::bulk(&mut b, &picked[at]),
                Some(_) => bulk_array(&mut b, &picked[at..at + n]),
            }
            at += n;
            // The command that took the last picks emptied the set when they were all of it.
            let gone = at == picked.len() && m.as_ref().is_some_and(|s| s.len == picked.len() as u64);
            done.push(Done::ok(b, (n > 0).then_some(gone)));
        }
        if let Some(mut set) = m.filter(|_| wrote) {
            // The picks and the key row in one batch (the picks are there: the key row is locked).
            let mut ops = Vec::with_capacity(picked.len() + 1);
            for x in &picked {
                ops.push(db.sets.delete(&member_key(set.id, x))?);
            }
            self.note_fields(cx, db, set.id, picked.iter().map(|x| (&x[..], None)));
            set.len -= picked.len() as u64;
            ops.push(coll_meta_op(db, key, set)?);
            cx.write_found(ops, true).await?;
        }
        Ok(done)
    }

    /// SRANDMEMBER key [count]: distinct members for a positive count, repeats for a negative.
    async fn srandmember(&self, cx: &mut Cx, db: &Db, a: &[Vec<u8>], out: &mut Vec<u8>) -> CR {
        if a.len() > 3 {
            return fail(SYNTAX);
        }
        let count = match a.get(2) {
            None => None,
            Some(c) => {
                let n = int_arg(c)?;
                if n == i64::MIN {
                    return fail(
                        "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
                    );
                }
                Some(n)
            }
        };
        let m = self.set_meta(cx, db, &a[1], false).await?;
        let Some(count) = count else {
            let v = match m {
                None => None,
                Some(m) => self.random_members(cx, db, &m, 1).await?.into_iter().next(),
            };
            super::strings::bulk_or_null(out, v);
            return Ok(());
        };
        let Some(m) = m else {
            resp::array_len(out, 0);
            return Ok(());
        };
        if count >= 0 {
            let v = self.random_members(cx, db, &m, count as u64).await?;
            bulk_array(out, &v);
            return Ok(());
        }
        let max = self.live.max_bulk.load(std::sync::atomic::Ordering::Relaxed) as u64;
        if count.unsigned_abs() > max / 4 {
            return fail("ERR reply would exceed proto-max-bulk-len");
        }
        let n = count.unsigned_abs();
        if !cx.fields.contains_key(&(db.index, m.id))
            && let Some(ranks) = random_ranks(m.len, count)
        {
            let rows = self.rows_at(&db.sets, &db.set_index, m.id, &ranks, &[1]).await?;
            resp::array_len(out, rows.len());
            for r in rows {
                resp::bulk(out, &db::bytes_of(r.into_iter().next().unwrap_or(Value::Null)));
            }
            return Ok(());
        }
        let pool = self.random_members(cx, db, &m, m.len.min(RANDOM_SCAN_MAX.max(n))).await?;
        let mut rng = random_rng();
        let mut pace = Pace::default();
        resp::array_len(out, count.unsigned_abs() as usize);
        for _ in 0..count.unsigned_abs() {
            resp::bulk(out, &pool[rng.below(pool.len() as u64) as usize]);
            pace.charge(1).await;
        }
        Ok(())
    }

    /// SMOVE: true when the member moved (or, with `src == dst`, is there).
    async fn smove(&self, cx: &mut Cx, db: &Db, src: &[u8], dst: &[u8], x: &[u8]) -> CR<bool> {
        let metas = self.lock_keys(cx, &[(db, src), (db, dst)]).await?;
        let Some(mut sm) = metas[0].clone() else {
            if metas[1].as_ref().is_some_and(|d| d.kind != TYPE_SET) {
                return fail(WRONGTYPE);
            }
            return Ok(false);
        };
        if sm.kind != TYPE_SET || metas[1].as_ref().is_some_and(|d| d.kind != TYPE_SET) {
            return fail(WRONGTYPE);
        }
        if src == dst {
            return Ok(self.is_member(cx, db, src, &[x.to_vec()]).await?[0]);
        }
        if self.remove_members(cx, db, &mut sm, &[x.to_vec()]).await? == 0 {
            return Ok(false);
        }
        self.write_coll_meta(cx, db, src, sm, false).await?;
        let mut dm = match metas[1].clone() {
            Some(d) => d,
            None => Meta::collection(TYPE_SET, self.new_id(db).await?),
        };
        self.add_members(cx, db, &mut dm, &[x.to_vec()]).await?;
        self.write_coll_meta(cx, db, dst, dm, true).await?;
        Ok(true)
    }

    /// Replaces `dst` (locked) with a set of `members` (deleted when empty); its size.
    async fn store_set(&self, cx: &mut Cx, db: &Arc<Db>, dst: &[u8], members: &[Vec<u8>]) -> CR<i64> {
        let old = self.read_meta(cx, db, dst, true).await?;
        let mut m = Meta::collection(TYPE_SET, self.new_id(db).await?);
        self.add_members(cx, db, &mut m, members).await?;
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

    /// SSCAN key cursor [MATCH p] [COUNT n]: a cursor is an open index scan of the set.
    async fn sscan(&self, cx: &mut Cx, sess: &mut Session, db: &Arc<Db>, a: &[Vec<u8>], out: &mut Vec<u8>) -> CR {
        let cursor = cursor_arg(&a[2])?;
        let (pattern, count, _) = scan_options(&a[3..], false)?;
        let meta = self.set_meta(cx, db, &a[1], false).await?;
        let mut found = Vec::new();
        let mut next = 0;
        if let Some(m) = meta {
            let scanner = if cursor == 0 {
                let own = db.sets.index_bound(&db.set_index, &[Value::UInt(m.id)], true)?;
                let mut spec = ScanSpec::table(db.sets.id());
                spec.index = Some(db.set_index.id);
                spec.partition = Some(db.sets.partition_of(&member_key(m.id, b""))?);
                spec.lo = Some(own.clone());
                spec.hi = Some(own);
                spec.projection = Some(vec![1]);
                spec.batch_rows = count.min(SSCAN_BATCH_MAX) as u32;
                Some(self.client.scan(spec))
            } else {
                sess.cursors.remove(&cursor).filter(|c| c.0 == db.index && c.1 == m.id).map(|c| c.2)
            };
            if let Some(mut sc) = scanner {
                for r in sc.next_batch().await?.unwrap_or_default() {
                    let x = db::bytes_of(db.sets.decode_projection(&[1], &r)?.remove(0));
                    if pattern.as_ref().is_none_or(|p| p.matches(&x)) {
                        found.push(x);
                    }
                }
                if !sc.is_done() {
                    next = keep_cursor(sess, (db.index, m.id, sc));
                }
            }
        }
        resp::array_len(out, 2);
        resp::bulk(out, next.to_string().as_bytes());
        bulk_array(out, &found);
        Ok(())
    }
}

/// SINTERCARD/ZINTERCARD numkeys key... [LIMIT n]: the keys and the limit (0: none).
pub(super) fn card_args(a: &[Vec<u8>]) -> CR<(Vec<Vec<u8>>, i64)> {
    let n = match parse_int(&a[1]) {
        Some(n) if n > 0 => n as usize,
        Some(_) => return fail("ERR numkeys should be greater than 0"),
        None => return fail(NOT_INT),
    };
    if n > a.len() - 2 {
        return fail("ERR Number of keys can't be greater than number of args");
    }
    let keys = a[2..2 + n].to_vec();
    let mut limit = 0;
    let mut i = 2 + n;
    while i < a.len() {
        if is(&a[i], "limit") && i + 1 < a.len() {
            limit = match parse_int(&a[i + 1]) {
                Some(l) if l >= 0 => l,
                _ => return fail("ERR LIMIT can't be negative"),
            };
            i += 2;
        } else {
            return fail(SYNTAX);
        }
    }
    Ok((keys, limit))
}

/// SINTER/SUNION/SDIFF of member lists (each in byte order); the result in byte order.
fn combine(op: &str, sets: Vec<Vec<Vec<u8>>>) -> Vec<Vec<u8>> {
    let mut it = sets.into_iter();
    let first: BTreeSet<Vec<u8>> = it.next().unwrap_or_default().into_iter().collect();
    let r = match op {
        "sunion" => it.fold(first, |mut acc, s| {
            acc.extend(s);
            acc
        }),
        "sinter" => it.fold(first, |acc, s| {
            let s: HashSet<Vec<u8>> = s.into_iter().collect();
            acc.into_iter().filter(|x| s.contains(x)).collect()
        }),
        _ => it.fold(first, |mut acc, s| {
            for x in s {
                acc.remove(&x);
            }
            acc
        }),
    };
    r.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<Vec<u8>> {
        s.iter().map(|x| x.as_bytes().to_vec()).collect()
    }

    #[test]
    fn set_algebra() {
        assert_eq!(combine("sinter", vec![v(&["a", "b", "c"]), v(&["b", "c", "d"])]), v(&["b", "c"]));
        assert_eq!(combine("sunion", vec![v(&["a"]), v(&["c", "b"])]), v(&["a", "b", "c"]));
        assert_eq!(combine("sdiff", vec![v(&["a", "b", "c"]), v(&["b"]), v(&["c"])]), v(&["a"]));
        assert_eq!(combine("sinter", vec![v(&["a"]), vec![]]), Vec::<Vec<u8>>::new());
    }
}
