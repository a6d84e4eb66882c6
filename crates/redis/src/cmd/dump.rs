//! DUMP and RESTORE in redis's RDB value format (`crate::rdb`), and OBJECT's answers about a
//! key's value.

use super::transactions::{CR, Cx};
use super::{Db, delete_key, fail, meta_of, set_col, update};
use crate::db::{self, Meta, TYPE_HASH, TYPE_LIST, TYPE_SET, TYPE_STRING, TYPE_ZSET};
use crate::rdb::{self, Refused};
use crate::{Server, resp};
use std::sync::Arc;

fn is(a: &[u8], w: &str) -> bool {
    a.eq_ignore_ascii_case(w.as_bytes())
}

impl Server {
    /// DUMP / RESTORE; false: not one of them.
    pub(super) async fn dump_command(
        &self,
        cx: &mut Cx,
        db: &Arc<Db>,
        name: &str,
        a: &[Vec<u8>],
        out: &mut Vec<u8>,
    ) -> CR<bool> {
        match name {
            "dump" => match self.value_of(cx, db, &a[1]).await? {
                Some(v) => resp::bulk(out, &rdb::dump(&v)),
                None => resp::null(out),
            },
            "restore" => {
                self.restore(cx, db, a).await?;
                resp::simple(out, "OK");
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// A key's value (None: no key).
    async fn value_of(&self, cx: &mut Cx, db: &Arc<Db>, key: &[u8]) -> CR<Option<rdb::Value>> {
        let Some(m) = self.read_meta(cx, db, key, false).await? else { return Ok(None) };
        Ok(Some(match m.kind {
            TYPE_STRING => {
                rdb::Value::String(self.assemble(cx, db, &m).await?.ok_or_else(super::transactions::changed)?)
            }
            TYPE_HASH => rdb::Value::Hash(self.hash_fields(cx, db, m.id, true).await?),
            TYPE_LIST => rdb::Value::List(self.list_elements(cx, db, &m, 0, m.len as i64 - 1).await?),
            TYPE_SET => rdb::Value::Set(self.set_members(cx, db, m.id).await?),
            TYPE_ZSET => rdb::Value::Zset(self.zall(cx, db, m.id).await?),
            _ => return fail("ERR unknown value type"),
        }))
    }

    /// RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f], checked in
    /// redis-server's order.
    async fn restore(&self, cx: &mut Cx, db: &Arc<Db>, a: &[Vec<u8>]) -> CR {
        let key = &a[1];
        let (mut replace, mut absttl) = (false, false);
        let (mut idle, mut freq) = (false, false);
        let mut i = 4;
        while i < a.len() {
            if is(&a[i], "replace") {
                replace = true;
            } else if is(&a[i], "absttl") {
                absttl = true;
            } else if is(&a[i], "idletime") && i + 1 < a.len() && !freq {
                i += 1;
                match resp::parse_int(&a[i]) {
                    Some(v) if v >= 0 => idle = true,
                    Some(_) => return fail("ERR Invalid IDLETIME value, must be >= 0"),
                    None => return fail(super::NOT_INT),
                }
            } else if is(&a[i], "freq") && i + 1 < a.len() && !idle {
                i += 1;
                match resp::parse_int(&a[i]) {
                    Some(v) if (0..=255).contains(&v) => freq = true,
                    Some(_) => return fail("ERR Invalid FREQ value, must be >= 0 and <= 255"),
                    None => return fail(super::NOT_INT),
                }
            } else {
                return fail(super::SYNTAX);
            }
            i += 1;
        }
        let old = self.read_meta(cx, db, key, true).await?;
        if old.is_some() && !replace {
            return fail("BUSYKEY Target key name already exists.");
        }
        let ttl = match resp::parse_int(&a[2]) {
            Some(t) if t >= 0 => t,
            Some(_) => return fail("ERR Invalid TTL value, must be >= 0"),
            None => return fail(super::NOT_INT),
        };
        let value = match rdb::restore(&a[3]) {
            Ok(v) => v,
            Err(Refused::Checksum) => return fail("ERR DUMP payload version or checksum are wrong"),
            Err(Refused::BadFormat) => return fail("ERR Bad data format"),
        };
        let empty = match &value {
            rdb::Value::String(_) => false,
            rdb::Value::List(v) | rdb::Value::Set(v) => v.is_empty(),
            rdb::Value::Zset(v) => v.is_empty(),
            rdb::Value::Hash(v) => v.is_empty(),
        };
        if empty {
            return fail("ERR Bad data format");
        }
        // The old value goes (its rows after the commit).
        let existed = old.is_some();
        if existed {
            let rs = cx.run(vec![delete_key(db, key)?]).await?;
            if let Some(m) = meta_of(db, rs.into_iter().next())? {
                cx.garbage(db, m);
            }
        }
        let at = (ttl != 0).then(|| if absttl { ttl } else { db::now_ms().saturating_add(ttl) });
        if at.is_some_and(|t| t <= db::now_ms()) {
            if existed {
                self.touched(cx, db.index, key, true);
            }
            return Ok(());
        }
        let string = matches!(value, rdb::Value::String(_));
        match value {
            rdb::Value::String(v) => self.put_string(cx, db, key, &v, at, true).await?,
            rdb::Value::Hash(pairs) => {
                let flat: Vec<Vec<u8>> = pairs.into_iter().flat_map(|(f, v)| [f, v]).collect();
                self.hset(cx, db, key, &flat, false).await?;
            }
            rdb::Value::List(v) => {
                self.push(cx, db, key, &v, false, false).await?;
            }
            rdb::Value::Set(v) => {
                for m in &v {
                    super::sets::check_member(m)?;
                }
                self.sadd(cx, db, key, &v).await?;
            }
            rdb::Value::Zset(mut v) => {
                for (m, _) in &v {
                    super::sets::check_member(m)?;
                }
                // A member named twice keeps its last score (as redis's loading does).
                v.reverse();
                let mut seen = std::collections::HashSet::new();
                v.retain(|(m, _)| seen.insert(m.clone()));
                let mut m = Meta::collection(TYPE_ZSET, self.new_id(db).await?);
                self.zwrite(cx, db, m.id, &v).await?;
                m.len = v.len() as u64;
                self.write_coll_meta(cx, db, key, m, true).await?;
            }
        }
        if let Some(t) = at
            && !string
        {
            cx.write(vec![update(db, key, vec![set_col(db::K_EXPIRY, db::expiry_value(Some(t)))])?], true).await?;
        }
        Ok(())
    }

    /// OBJECT ENCODING / FREQ / IDLETIME / REFCOUNT of a key (None: no key), answered as
    /// redis-server 7.0 would for a value of that type and size (Tern stores every type in
    /// tables; redis's encodings are what its thresholds would pick).
    pub(super) async fn object_of(&self, cx: &mut Cx, db: &Arc<Db>, sub: &str, key: &[u8]) -> CR<Option<Vec<u8>>> {
        let Some(m) = self.read_meta_quiet(cx, db, key, false).await? else { return Ok(None) };
        let int = |n: i64| {
            let mut o = Vec::new();
            resp::integer(&mut o, n);
            o
        };
        let simple = |s: &str| {
            let mut o = Vec::new();
            resp::bulk(&mut o, s.as_bytes());
            o
        };
        Ok(Some(match sub {
            "refcount" => {
                // redis shares the objects of small integers (0..10000).
                let shared = m.kind == TYPE_STRING
                    && m.parts == 0
                    && resp::parse_int(&m.start).is_some_and(|v| (0..10_000).contains(&v))
                    && resp::parse_int(&m.start).map(|v| v.to_string().into_bytes()) == Some(m.start.clone());
                int(if shared { i32::MAX as i64 } else { 1 })
            }
            "idletime" => int(0),
            "freq" => {
                let policy = self.config_value("maxmemory-policy");
                if !policy.contains("lfu") {
                    return fail(
                        "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
                    );
                }
                int(0)
            }
            _ => simple(self.encoding_of(cx, db, &m).await?),
        }))
    }

    /// The encoding redis-server 7.0 gives a value like this one (its default thresholds, or
    /// the ones CONFIG SET gave).
    async fn encoding_of(&self, cx: &mut Cx, db: &Arc<Db>, m: &Meta) -> CR<&'static str> {
        let limit = |name: &str, default: u64| self.config_value(name).parse::<u64>().unwrap_or(default);
        Ok(match m.kind {
            TYPE_STRING => {
                let v = self.assemble(cx, db, m).await?.unwrap_or_default();
                if v.len() <= 20 && resp::parse_int(&v).is_some_and(|i| i.to_string().as_bytes() == v) {
                    "int"
                } else if v.len() <= 44 {
                    "embstr"
                } else {
                    "raw"
                }
            }
            TYPE_LIST => "quicklist",
            TYPE_SET => {
                let n = limit("set-max-intset-entries", 512);
                if m.len > n {
                    "hashtable"
                } else {
                    let v = self.set_members(cx, db, m.id).await?;
                    if v.iter().all(|x| resp::parse_int(x).is_some_and(|i| i.to_string().as_bytes() == &x[..])) {
                        "intset"
                    } else {
                        "hashtable"
                    }
                }
            }
            TYPE_ZSET => {
                let (n, len) = (limit("zset-max-listpack-entries", 128), limit("zset-max-listpack-value", 64));
                if m.len > n {
                    "skiplist"
                } else if self.zall(cx, db, m.id).await?.iter().all(|(x, _)| x.len() as u64 <= len) {
                    "listpack"
                } else {
                    "skiplist"
                }
            }
            TYPE_HASH => {
                let (n, len) = (limit("hash-max-listpack-entries", 512), limit("hash-max-listpack-value", 64));
                if m.len > n {
                    "hashtable"
                } else if self
                    .hash_fields(cx, db, m.id, true)
                    .await?
                    .iter()
                    .all(|(f, v)| f.len() as u64 <= len && v.len() as u64 <= len)
                {
                    "listpack"
                } else {
                    "hashtable"
                }
            }
            _ => "unknown",
        })
    }
}
