//! Keyspace notifications (`notify-keyspace-events`), as redis-server's (notify.c): an event is
//! published as `__keyspace@<db>__:<key>` with the event's name as the message (flag `K`) and as
//! `__keyevent@<db>__:<event>` with the key as the message (flag `E`), when its class's flag is
//! set.
//!
//! Two sources, one channel set:
//! * A Redis command's writes raise the events redis-server raises for that command
//!   (`events_of`), published as messages of `redis_pubsub.messages` in the command's own
//!   transaction, so they reach every API server's subscribers in commit order, with a *mark*
//!   per key the command wrote.
//! * Writes that did not come through a Redis command (SQL, REST, the native client) to the
//!   tables of a `redis_N` database are found in the change log by the API servers that have
//!   subscribers and raise generic events (`derived`): a key row written is `set` / `hset` /
//!   `rpush` / `sadd` / `zadd` by its type, a member row written or deleted the type's add or
//!   remove event, a key row deleted `del`, or `expired` when the data node's TTL purge deleted
//!   it. A key a Redis command marked in the same epoch raises none (its command's events
//!   stand).
//!
//! The setting is the cluster's (a row of `redis_pubsub.settings`): CONFIG SET on any API server
//! changes it for all, each reading it again every `REFRESH` (an API server that has not seen the
//! settings table yet looks for it less often, see `pubsub::LOOK_EVERY`).

use std::time::Duration;

/// How often an API server reads the cluster's setting again.
pub const REFRESH: Duration = Duration::from_millis(500);

pub const KEYSPACE: u32 = 1 << 0;
pub const KEYEVENT: u32 = 1 << 1;
pub const GENERIC: u32 = 1 << 2;
pub const STRING: u32 = 1 << 3;
pub const LIST: u32 = 1 << 4;
pub const SET: u32 = 1 << 5;
pub const HASH: u32 = 1 << 6;
pub const ZSET: u32 = 1 << 7;
pub const EXPIRED: u32 = 1 << 8;
pub const EVICTED: u32 = 1 << 9;
pub const STREAM: u32 = 1 << 10;
pub const KEY_MISS: u32 = 1 << 11;
pub const MODULE: u32 = 1 << 12;
pub const NEW: u32 = 1 << 13;
/// `A`: every class but key-miss and new-key events (redis's NOTIFY_ALL).
pub const ALL: u32 = GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// The letters of redis's classes, in the order redis prints them.
const LETTERS: [(u8, u32); 11] = [
    (b'g', GENERIC),
    (b'$', STRING),
    (b'l', LIST),
    (b's', SET),
    (b'h', HASH),
    (b'z', ZSET),
    (b'x', EXPIRED),
    (b'e', EVICTED),
    (b't', STREAM),
    (b'd', MODULE),
    (b'n', NEW),
];

/// redis-server's `keyspaceEventsStringToFlags` (None: a character that is no class).
pub fn parse_flags(s: &[u8]) -> Option<u32> {
    let mut f = 0;
    for &c in s {
        f |= match c {
            b'A' => ALL,
            b'K' => KEYSPACE,
            b'E' => KEYEVENT,
            b'm' => KEY_MISS,
            _ => LETTERS.iter().find(|(l, _)| *l == c)?.1,
        };
    }
    Some(f)
}

/// redis-server's `keyspaceEventsFlagsToString`.
pub fn flags_string(f: u32) -> String {
    let mut s = String::new();
    if f & ALL == ALL {
        // (A set `n` is not shown then, as redis-server does not show it.)
        s.push('A');
    } else {
        s.extend(LETTERS.iter().filter(|(_, b)| f & b != 0).map(|(l, _)| *l as char));
    }
    for (l, b) in [('K', KEYSPACE), ('E', KEYEVENT), ('m', KEY_MISS)] {
        if f & b != 0 {
            s.push(l);
        }
    }
    s
}

/// The setting as the cluster keeps it: `flags_string`, with the `n` that string leaves out
/// when it shows `A` (so every API server reads back the classes CONFIG SET set).
pub fn stored_string(f: u32) -> String {
    let mut s = flags_string(f);
    if f & ALL == ALL && f & NEW != 0 {
        s.push('n');
    }
    s
}

/// One event of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub class: u32,
    pub name: &'static str,
    pub db: u32,
    pub key: Vec<u8>,
}

/// The keyspace channel of a key (where its mark goes too).
pub fn keyspace_channel(db: u32, key: &[u8]) -> Vec<u8> {
    let mut c = format!("__keyspace@{db}__:").into_bytes();
    c.extend_from_slice(key);
    c
}

/// The messages (channel, payload) an event is published as under `flags`.
pub fn messages(flags: u32, ev: &Event) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v = Vec::new();
    if flags & ev.class == 0 {
        return v;
    }
    if flags & KEYSPACE != 0 {
        v.push((keyspace_channel(ev.db, &ev.key), ev.name.as_bytes().to_vec()));
    }
    if flags & KEYEVENT != 0 {
        v.push((format!("__keyevent@{}__:{}", ev.db, ev.name).into_bytes(), ev.key.clone()));
    }
    v
}

/// A key a command wrote: (database, key, whether the key is gone after the write).
pub type Touched = (u32, Vec<u8>, bool);

fn has_arg(a: &[Vec<u8>], from: usize, words: &[&str]) -> bool {
    a.iter().skip(from).any(|x| words.iter().any(|w| x.eq_ignore_ascii_case(w.as_bytes())))
}

fn left(a: &[u8]) -> bool {
    a.eq_ignore_ascii_case(b"left")
}

/// The (class, event) a command raises on the `i`-th key it wrote, as redis-server 7.0's
/// commands call `notifyKeyspaceEvent` (None: the command raises none, e.g. FLUSHDB).
fn event_for(cmd: &str, a: &[Vec<u8>], i: usize, gone: bool) -> Option<(u32, &'static str)> {
    let pop = |l: bool| if l { "lpop" } else { "rpop" };
    let push = |l: bool| if l { "lpush" } else { "rpush" };
    Some(match cmd {
        "set" | "setnx" | "setex" | "psetex" | "mset" | "msetnx" | "getset" => (STRING, "set"),
        "append" => (STRING, "append"),
        "setrange" => (STRING, "setrange"),
        "incr" | "decr" | "incrby" | "decrby" => (STRING, "incrby"),
        "incrbyfloat" => (STRING, "incrbyfloat"),
        "getdel" | "del" | "unlink" => (GENERIC, "del"),
        "getex" if gone => (GENERIC, "del"),
        "getex" if has_arg(a, 2, &["persist"]) => (GENERIC, "persist"),
        "getex" => (GENERIC, "expire"),
        "expire" | "pexpire" | "expireat" | "pexpireat" if gone => (GENERIC, "del"),
        "expire" | "pexpire" | "expireat" | "pexpireat" => (GENERIC, "expire"),
        "persist" => (GENERIC, "persist"),
        "rename" | "renamenx" => (GENERIC, if i == 0 { "rename_from" } else { "rename_to" }),
        "move" => (GENERIC, if i == 0 { "move_from" } else { "move_to" }),
        "copy" => (GENERIC, "copy_to"),
        "restore" if gone => (GENERIC, "del"),
        "restore" => (GENERIC, "restore"),
        "lpush" | "lpushx" => (LIST, "lpush"),
        "rpush" | "rpushx" => (LIST, "rpush"),
        "lpop" | "blpop" => (LIST, "lpop"),
        "rpop" | "brpop" => (LIST, "rpop"),
        "lmpop" | "blmpop" => {
            let numkeys = crate::resp::parse_int(a.get(if cmd == "blmpop" { 2 } else { 1 })?)? as usize;
            let dir = a.get(numkeys + if cmd == "blmpop" { 3 } else { 2 })?;
            (LIST, pop(left(dir)))
        }
        "linsert" => (LIST, "linsert"),
        "lset" => (LIST, "lset"),
        "lrem" => (LIST, "lrem"),
        "ltrim" => (LIST, "ltrim"),
        "rpoplpush" | "brpoplpush" => (LIST, if i == 0 { "rpop" } else { "lpush" }),
        "lmove" | "blmove" => (LIST, if i == 0 { pop(left(a.get(3)?)) } else { push(left(a.get(4)?)) }),
        "hset" | "hmset" | "hsetnx" => (HASH, "hset"),
        "hincrby" => (HASH, "hincrby"),
        "hincrbyfloat" => (HASH, "hincrbyfloat"),
        "hdel" => (HASH, "hdel"),
        "sadd" => (SET, "sadd"),
        "srem" => (SET, "srem"),
        "spop" => (SET, "spop"),
        "smove" => (SET, if i == 0 { "srem" } else { "sadd" }),
        "sinterstore" | "sunionstore" | "sdiffstore" | "zunionstore" | "zinterstore" | "zdiffstore" | "zrangestore"
            if gone =>
        {
            (GENERIC, "del")
        }
        "sinterstore" => (SET, "sinterstore"),
        "sunionstore" => (SET, "sunionstore"),
        "sdiffstore" => (SET, "sdiffstore"),
        "zadd" if has_arg(a, 2, &["incr"]) => (ZSET, "zincr"),
        "zadd" => (ZSET, "zadd"),
        "zincrby" => (ZSET, "zincr"),
        "zrem" => (ZSET, "zrem"),
        "zremrangebyscore" => (ZSET, "zremrangebyscore"),
        "zremrangebyrank" => (ZSET, "zremrangebyrank"),
        "zremrangebylex" => (ZSET, "zremrangebylex"),
        "zpopmin" | "bzpopmin" => (ZSET, "zpopmin"),
        "zpopmax" | "bzpopmax" => (ZSET, "zpopmax"),
        "zmpop" | "bzmpop" => {
            let numkeys = crate::resp::parse_int(a.get(if cmd == "bzmpop" { 2 } else { 1 })?)? as usize;
            let dir = a.get(numkeys + if cmd == "bzmpop" { 3 } else { 2 })?;
            (ZSET, if dir.eq_ignore_ascii_case(b"min") { "zpopmin" } else { "zpopmax" })
        }
        "zunionstore" => (ZSET, "zunionstore"),
        "zinterstore" => (ZSET, "zinterstore"),
        "zdiffstore" => (ZSET, "zdiffstore"),
        "zrangestore" => (ZSET, "zrangestore"),
        _ => return None,
    })
}

/// The events a Redis command raised on the keys it wrote (in the order it wrote them): its
/// own event, then `expire` for a SET with a time to live, then `del` for a collection it
/// emptied, as redis-server.
/// A list move raises its push's event before its pop's (redis's `lmoveGenericCommand`).
pub fn events_of(cmd: &str, a: &[Vec<u8>], touched: &[Touched]) -> Vec<Event> {
    let mut out = Vec::new();
    let mut order: Vec<usize> = (0..touched.len()).collect();
    if matches!(cmd, "lmove" | "blmove" | "rpoplpush" | "brpoplpush") {
        order.reverse();
    }
    for i in order {
        let (db, key, gone) = &touched[i];
        let Some((class, name)) = event_for(cmd, a, i, *gone) else { continue };
        let ev = |class, name| Event { class, name, db: *db, key: key.clone() };
        // One write of a key in several steps (RESTORE's) raises its event once.
        if out.last() == Some(&ev(class, name)) {
            continue;
        }
        out.push(ev(class, name));
        let ttl = match cmd {
            "setex" | "psetex" => true,
            "set" => has_arg(a, 3, &["ex", "px", "exat", "pxat"]),
            _ => false,
        };
        if ttl {
            out.push(ev(GENERIC, "expire"));
        }
        // A collection emptied (a generic event's key is gone by that event itself).
        if *gone && class & (LIST | SET | HASH | ZSET) != 0 {
            out.push(ev(GENERIC, "del"));
        }
    }
    out
}

/// The kinds of a `redis_N` table's rows, for events of writes that did not come through a
/// Redis command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Keys,
    StringParts,
    Fields,
    ListElements,
    SetMembers,
    ZsetMembers,
}

impl Part {
    pub fn of(table: &str) -> Option<Part> {
        Some(match table {
            "string_keys" => Part::Keys,
            "string_values" => Part::StringParts,
            "hset_keys" => Part::Fields,
            "list_values" => Part::ListElements,
            "set_members" => Part::SetMembers,
            "zset_members" => Part::ZsetMembers,
            _ => return None,
        })
    }
}

/// The generic event of a write that did not come through a Redis command: to a row of `part`
/// of a key of `kind` (`db::TYPE_*`), a write (`put`) or a delete (`expired`: by the TTL purge).
pub fn derived(part: Part, kind: u8, put: bool, expired: bool) -> Option<(u32, &'static str)> {
    use crate::db::{TYPE_HASH, TYPE_LIST, TYPE_SET, TYPE_STRING, TYPE_ZSET};
    Some(match (part, put) {
        (Part::Keys, false) if expired => (EXPIRED, "expired"),
        (Part::Keys, false) => (GENERIC, "del"),
        (Part::Keys, true) => match kind {
            TYPE_STRING => (STRING, "set"),
            TYPE_HASH => (HASH, "hset"),
            TYPE_LIST => (LIST, "rpush"),
            TYPE_SET => (SET, "sadd"),
            TYPE_ZSET => (ZSET, "zadd"),
            _ => return None,
        },
        // A member row of an expired key goes with it (its key's `expired` stands).
        (_, false) if expired => return None,
        (Part::StringParts, true) => (STRING, "set"),
        (Part::StringParts, false) => return None,
        (Part::Fields, true) => (HASH, "hset"),
        (Part::Fields, false) => (HASH, "hdel"),
        (Part::ListElements, true) => (LIST, "lset"),
        (Part::ListElements, false) => (LIST, "lrem"),
        (Part::SetMembers, true) => (SET, "sadd"),
        (Part::SetMembers, false) => (SET, "srem"),
        (Part::ZsetMembers, true) => (ZSET, "zadd"),
        (Part::ZsetMembers, false) => (ZSET, "zrem"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn flags_round_trip_as_redis_prints_them() {
        assert_eq!(parse_flags(b"KEA").map(flags_string).as_deref(), Some("AKE"));
        assert_eq!(parse_flags(b"Elg$").map(flags_string).as_deref(), Some("g$lE"));
        assert_eq!(parse_flags(b"").map(flags_string).as_deref(), Some(""));
        assert_eq!(parse_flags(b"KA").map(flags_string).as_deref(), Some("AK"));
        assert_eq!(parse_flags(b"Kmn").map(flags_string).as_deref(), Some("nKm"));
        assert_eq!(parse_flags(b"KEAn").map(flags_string).as_deref(), Some("AKE"));
        // What the cluster keeps reads back whole.
        for f in [&b"KEAn"[..], b"KEAnm", b"Kmn", b"KEA", b""] {
            let flags = parse_flags(f).unwrap();
            assert_eq!(parse_flags(stored_string(flags).as_bytes()), Some(flags), "{f:?}");
        }
        assert_eq!(parse_flags(b"Kq"), None);
        assert_eq!(parse_flags(b"a"), None);
    }

    #[test]
    fn commands_raise_redis_s_events() {
        let t = |k: &str, gone| (0u32, k.as_bytes().to_vec(), gone);
        let names = |cmd: &str, args: &[&str], touched: &[Touched]| -> Vec<&'static str> {
            events_of(cmd, &a(args), touched).iter().map(|e| e.name).collect()
        };
        assert_eq!(names("set", &["set", "k", "v", "EX", "10"], &[t("k", false)]), ["set", "expire"]);
        assert_eq!(names("set", &["set", "k", "v"], &[t("k", false)]), ["set"]);
        assert_eq!(names("rpop", &["rpop", "l"], &[t("l", true)]), ["rpop", "del"]);
        assert_eq!(
            names("lmove", &["lmove", "a", "b", "LEFT", "RIGHT"], &[t("a", true), t("b", false)]),
            ["rpush", "lpop", "del"]
        );
        assert_eq!(
            names("rename", &["rename", "a", "b"], &[t("a", true), t("b", false)]),
            ["rename_from", "rename_to"]
        );
        assert_eq!(names("expire", &["expire", "k", "-1"], &[t("k", true)]), ["del"]);
        assert_eq!(names("zadd", &["zadd", "z", "INCR", "1", "m"], &[t("z", false)]), ["zincr"]);
        assert_eq!(names("lmpop", &["lmpop", "2", "a", "b", "RIGHT"], &[t("b", false)]), ["rpop"]);
        assert_eq!(names("bzmpop", &["bzmpop", "0", "1", "z", "MIN"], &[t("z", true)]), ["zpopmin", "del"]);
        assert_eq!(names("sinterstore", &["sinterstore", "d", "a"], &[t("d", true)]), ["del"]);
        assert!(names("flushdb", &["flushdb"], &[t("k", true)]).is_empty());
    }

    #[test]
    fn an_event_is_published_on_the_channels_its_flags_ask_for() {
        let ev = Event { class: LIST, name: "lpush", db: 3, key: b"q".to_vec() };
        let f = parse_flags(b"KEl").unwrap();
        assert_eq!(
            messages(f, &ev),
            vec![(b"__keyspace@3__:q".to_vec(), b"lpush".to_vec()), (b"__keyevent@3__:lpush".to_vec(), b"q".to_vec())]
        );
        assert!(messages(parse_flags(b"KE$").unwrap(), &ev).is_empty());
        assert!(messages(parse_flags(b"l").unwrap(), &ev).is_empty());
    }
}
