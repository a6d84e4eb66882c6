//! DUMP/RESTORE (payloads crossing between Tern and redis-server both ways), OBJECT, CONFIG SET
//! of redis-server's other parameters, CLIENT REPLY, SAVE/BGSAVE/SHUTDOWN/SWAPDB and MONITOR,
//! against a real redis-server.

mod common;

use common::{Conn, Reply, start_node, start_peer, start_tern};
use std::time::{Duration, Instant};
use tern_redis::RedisOptions;

fn ok() -> Reply {
    Reply::Simple("OK".into())
}

/// The same commands on both; the replies must be equal (a line starting with `~` is sent but
/// its reply is not compared).
fn compare(peer: &mut Conn, tern: &mut Conn, script: &[&str]) {
    for line in script {
        let (l, check) = match line.strip_prefix('~') {
            Some(l) => (l, false),
            None => (*line, true),
        };
        let want = peer.q(l);
        let got = tern.q(l);
        if check {
            assert_eq!(got, want, "{l}: Tern {got:?}, redis-server {want:?}");
        }
    }
}

fn bulk(r: Reply) -> Vec<u8> {
    match r {
        Reply::Bulk(Some(b)) => b,
        r => panic!("not a bulk string: {r:?}"),
    }
}

/// Rows of each type, written on one side, dumped, restored on the other and read back.
const FILL: &[&str] = &[
    "SET str hello",
    "SET int 12345",
    "SET neg -7",
    "RPUSH list a b 3 -4 c",
    "SADD ints 1 2 3 -9",
    "SADD words x y z",
    "ZADD zs 1 a 2.5 b -3 c",
    "HSET h f1 v1 f2 22",
];
const READ: &[&str] = &[
    "GET str",
    "GET int",
    "GET neg",
    "GET big",
    "LRANGE list 0 -1",
    "SMEMBERS ints",
    "SMEMBERS words",
    "ZRANGE zs 0 -1 WITHSCORES",
    "HGETALL h",
    "TTL str",
];

fn sorted(r: Reply) -> Reply {
    match r {
        Reply::Array(Some(mut v)) => {
            v.sort_by_key(|x| format!("{x:?}"));
            Reply::Array(Some(v))
        }
        r => r,
    }
}

/// Fills `from`, moves every key to `to` by DUMP and RESTORE (the string with a TTL), and
/// checks `to` reads what `from` does.
fn cross(from: &mut Conn, to: &mut Conn) {
    assert_eq!(from.q("FLUSHALL"), ok());
    assert_eq!(to.q("FLUSHALL"), ok());
    for l in FILL {
        from.q(l);
    }
    let big = vec![b'x'; 5000];
    from.cmd(&[b"SET", b"big", &big]);
    for k in ["str", "int", "neg", "big", "list", "ints", "words", "zs", "h"] {
        let p = bulk(from.cmd(&[b"DUMP", k.as_bytes()]));
        let ttl: &[u8] = if k == "str" { b"100000" } else { b"0" };
        assert_eq!(to.cmd(&[b"RESTORE", k.as_bytes(), ttl, &p]), ok(), "RESTORE {k}");
    }
    for l in READ {
        let (a, b) = (sorted(from.q(l)), sorted(to.q(l)));
        if *l == "TTL str" {
            assert_eq!(a, Reply::Int(-1));
            assert!(matches!(b, Reply::Int(99 | 100)), "{b:?}");
        } else {
            assert_eq!(b, a, "{l}");
        }
    }
}

#[test]
fn dump_and_restore_cross_between_tern_and_redis() {
    let (_d, _n, addr) = start_node(256 << 20);
    let port = start_tern(&addr, RedisOptions::default());
    let peer = start_peer();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    // redis-server's compact encodings into Tern, Tern's payloads into redis-server.
    cross(&mut p, &mut t);
    cross(&mut t, &mut p);
    // A small string's payload is redis-server's, byte for byte.
    for c in [&mut p, &mut t] {
        c.q("SET k v");
        c.q("SET n 123");
    }
    for k in ["k", "n", "nosuch"] {
        assert_eq!(t.q(&format!("DUMP {k}")), p.q(&format!("DUMP {k}")), "DUMP {k}");
    }
    let payload = bulk(p.q("DUMP k"));
    let mut damaged = payload.clone();
    damaged[2] ^= 0x20;
    for (args, what) in [
        (vec![&b"RESTORE"[..], b"k", b"0", &payload], "BUSYKEY"),
        (vec![&b"RESTORE"[..], b"k2", b"-1", &payload], "negative TTL"),
        (vec![&b"RESTORE"[..], b"k2", b"x", &payload], "TTL not a number"),
        (vec![&b"RESTORE"[..], b"k2", b"0", &damaged], "checksum"),
        (vec![&b"RESTORE"[..], b"k2", b"0", b"garbage"], "short payload"),
        (vec![&b"RESTORE"[..], b"k2", b"0", &payload, b"FOO"], "syntax"),
        (vec![&b"RESTORE"[..], b"k2", b"0", &payload, b"IDLETIME", b"-1"], "idletime"),
        (vec![&b"RESTORE"[..], b"k2", b"0", &payload, b"FREQ", b"300"], "freq"),
        (vec![&b"RESTORE"[..], b"k", b"0", &payload, b"REPLACE"], "replace"),
        (vec![&b"RESTORE"[..], b"gone", b"1", &payload, b"ABSTTL"], "already expired"),
        (vec![&b"DUMP"[..]], "arity"),
    ] {
        assert_eq!(t.cmd(&args), p.cmd(&args), "{what}");
    }
    compare(&mut p, &mut t, &["EXISTS gone", "GET k"]);
}

#[test]
fn object_config_reply_and_server_commands_match_redis() {
    let (_d, _n, addr) = start_node(256 << 20);
    let port = start_tern(&addr, RedisOptions::default());
    let peer = start_peer();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    let long = "x".repeat(50);
    let script: Vec<String> = [
        "FLUSHALL",
        "SET s v",
        "SET n 123",
        "SET f 1.5",
        "RPUSH l a",
        "SADD si 1 2",
        "SADD ss a",
        "ZADD z 1 a",
        "HSET h a b",
        "OBJECT ENCODING s",
        "OBJECT ENCODING n",
        "OBJECT ENCODING f",
        "OBJECT ENCODING l",
        "OBJECT ENCODING si",
        "OBJECT ENCODING ss",
        "OBJECT ENCODING z",
        "OBJECT ENCODING h",
        "OBJECT ENCODING nosuch",
        "OBJECT REFCOUNT s",
        "OBJECT REFCOUNT n",
        "OBJECT IDLETIME nosuch",
        "OBJECT FREQ s",
        "OBJECT FOO s",
        "OBJECT",
        "OBJECT HELP",
        "TYPE z",
        // CONFIG SET of parameters with no Tern setting behind them: validated, stored, answered.
        "CONFIG SET hz 50",
        "CONFIG GET hz",
        "CONFIG SET hz abc",
        "CONFIG SET maxmemory 1gb",
        "CONFIG GET maxmemory",
        "CONFIG SET maxmemory lots",
        "CONFIG SET activerehashing maybe",
        "CONFIG SET activerehashing no",
        "CONFIG GET activerehashing",
        "CONFIG SET maxmemory-policy bogus",
        "CONFIG SET maxmemory-policy allkeys-lfu",
        "CONFIG GET maxmemory-policy",
        "~OBJECT FREQ s",
        "CONFIG SET maxmemory-policy noeviction",
        "CONFIG SET save abc",
        "CONFIG SET save 100 10",
        "CONFIG SET lua-time-limit 10",
        "CONFIG GET lua-time-limit",
        "CONFIG SET daemonize yes",
        "CONFIG SET dir /tmp",
        // (redis-server converts an encoding at a write: Tern's follows the thresholds at once,
        // so each is looked at after a write.)
        "CONFIG SET zset-max-ziplist-entries 1",
        "CONFIG GET zset-max-listpack-entries",
        "ZADD z 2 b",
        "OBJECT ENCODING z",
        "CONFIG SET hz 10 hz 11",
        "CONFIG SET set-max-intset-entries 1",
        "SADD si 3",
        "OBJECT ENCODING si",
        // CLIENT REPLY: OFF and SKIP send nothing; the replies after ON come again.
        "CLIENT REPLY FOO",
        "CLIENT REPLY ON",
        // Server commands and their inside-MULTI texts.
        "SAVE",
        "BGSAVE",
        "BGSAVE FOO",
        "MULTI",
        "SAVE",
        "SHUTDOWN",
        "SET x 1",
        "EXEC",
        "GET x",
        "SWAPDB 0 99",
        "SWAPDB a 1",
        "SHUTDOWN ABORT",
        "SHUTDOWN FOO",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("SET e {long}"), "OBJECT ENCODING e".into()])
    .collect();
    let script: Vec<&str> = script.iter().map(String::as_str).collect();
    compare(&mut p, &mut t, &script);
    // CLIENT REPLY OFF / SKIP: no reply until ON (the next reply read is ON's).
    for c in [&mut p, &mut t] {
        c.send(&[b"CLIENT", b"REPLY", b"OFF"]);
        c.send(&[b"SET", b"quiet", b"1"]);
        c.send(&[b"CLIENT", b"REPLY", b"SKIP"]);
        c.send(&[b"GET", b"quiet"]);
        c.send(&[b"CLIENT", b"REPLY", b"ON"]);
        assert_eq!(c.read(), ok());
        c.send(&[b"CLIENT", b"REPLY", b"SKIP"]);
        c.send(&[b"PING", b"a"]);
        assert_eq!(c.q("PING b"), Reply::bulk("b"));
        assert_eq!(c.q("GET quiet"), Reply::bulk("1"));
    }
    // Tern's own: SWAPDB is refused as in Redis Cluster; the rest of the cluster serves on.
    assert_eq!(t.q("SWAPDB 0 1"), Reply::Error("ERR SWAPDB is not allowed in cluster mode".into()));
    assert!(matches!(t.q("LASTSAVE"), Reply::Int(n) if n > 1_700_000_000));
}

/// MONITOR: every command another connection runs, as redis-server prints it (time and
/// client address aside), admin commands left out and passwords redacted.
#[test]
fn monitor_lines_match_redis() {
    let (_d, _n, addr) = start_node(256 << 20);
    let port = start_tern(&addr, RedisOptions::default());
    let peer = start_peer();
    let lines = |port: u16| -> Vec<String> {
        let mut m = Conn::open(port);
        assert_eq!(m.q("MONITOR"), ok());
        let mut c = Conn::open(port);
        c.cmd(&[b"SET", b"a b", b"x\"y\\z\n"]);
        c.cmd(&[b"SET", b"k", b"\x01\xff"]);
        c.q("SELECT 3");
        c.q("GET k");
        c.q("CONFIG GET hz");
        c.q("AUTH nobody secret");
        c.q("HELLO 2 AUTH default pw");
        c.q("ACL WHOAMI");
        // Queued commands show at EXEC (before it), discarded ones never.
        for l in ["MULTI", "SET t 1", "GET t", "EXEC", "MULTI", "SET u 1", "DISCARD"] {
            c.q(l);
        }
        c.q("PING last");
        let mut got = Vec::new();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            match m.read() {
                Reply::Simple(l) => {
                    // "<secs>.<usec> [<db> <addr>] args": the time and the address go.
                    let (head, args) = l.split_once("] ").unwrap();
                    let db = head.split_once('[').unwrap().1.split(' ').next().unwrap().to_string();
                    let done = args == "\"PING\" \"last\"";
                    got.push(format!("{db} {args}"));
                    if done {
                        break;
                    }
                }
                r => panic!("{r:?}"),
            }
        }
        got
    };
    let want = lines(peer.port);
    let got = lines(port);
    // redis-cli-style clients send COMMAND DOCS; this one does not, so both see the same.
    assert_eq!(got, want);
}
