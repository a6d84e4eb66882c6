//! The same command sequences sent to a real redis-server and to Tern's Redis front end; replies
//! must be equal (after ordering where Redis leaves the order open, e.g. HGETALL and SCAN).

mod common;

use common::{Conn, Reply, start_node, start_peer, start_tern};
use std::time::Duration;
use tern_redis::RedisOptions;

/// Replies whose order Redis does not define, put in a canonical order.
fn canonical(cmd: &str, r: Reply) -> Reply {
    let name = cmd.split(' ').next().unwrap_or("").to_lowercase();
    match (name.as_str(), r) {
        ("hgetall" | "config", Reply::Array(Some(v))) => {
            let mut pairs: Vec<Vec<Reply>> = v.chunks(2).map(|c| c.to_vec()).collect();
            pairs.sort();
            Reply::Array(Some(pairs.concat()))
        }
        ("hgetall", Reply::Map(v)) => {
            let mut pairs: Vec<Vec<Reply>> = v.chunks(2).map(|c| c.to_vec()).collect();
            pairs.sort();
            Reply::Map(pairs.concat())
        }
        ("hkeys" | "hvals" | "keys", Reply::Array(Some(mut v))) => {
            v.sort();
            Reply::Array(Some(v))
        }
        (_, r) => r,
    }
}

fn compare(peer: &mut Conn, tern: &mut Conn, script: &[&str]) {
    for line in script {
        let want = canonical(line, peer.q(line));
        let got = canonical(line, tern.q(line));
        assert_eq!(got, want, "command `{line}`: Tern {got:?}, redis-server {want:?}");
    }
}

fn both(peer: &mut Conn, tern: &mut Conn, args: &[&[u8]]) -> Reply {
    let want = peer.cmd(args);
    let got = tern.cmd(args);
    let shown: Vec<String> = args.iter().map(|a| String::from_utf8_lossy(&a[..a.len().min(40)]).into()).collect();
    assert_eq!(got, want, "command {shown:?}");
    got
}

fn setup() -> (tempfile::TempDir, tern_runtime::DataNode, common::Peer, u16) {
    let (dir, node, addr) = start_node(512 << 20);
    let opts = RedisOptions::default();
    let port = start_tern(&addr, opts);
    (dir, node, start_peer(), port)
}

#[test]
fn strings_keys_and_errors_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "PING",
            "PING hello",
            "PING a b",
            "ECHO hi",
            "SELECT 1",
            "SET a 1",
            "GET a",
            "SELECT 0",
            "GET a",
            "SELECT 99",
            "SELECT x",
            "SELECT -1",
            "SET k v",
            "GET k",
            "GET missing",
            "SET k v2 NX",
            "SET k v3 XX",
            "GET k",
            "SET n1 v XX",
            "GET n1",
            "SET k v4 GET",
            "SET nk v GET",
            "SET nk2 v NX GET",
            "SET k v NX XX",
            "SET k v EX 0",
            "SET k v EX x",
            "SET k v PX -5",
            "SET k v EX 10 PX 100",
            "SET k v KEEPTTL EX 5",
            "SET k v FOO",
            "SET k v EX",
            "set k v ex 100",
            "TTL k",
            "SET k v2 KEEPTTL",
            "TTL k",
            "SET k v3",
            "TTL k",
            "SET k v3 PX 100000",
            "TTL k",
            "SET k v3 EXAT 1",
            "GET k",
            "EXISTS k",
            "SETNX k x",
            "SETNX k x2",
            "GET k",
            "SETNX k2",
            "GETDEL k",
            "GETDEL k",
            "INCR c",
            "INCR c",
            "INCRBY c 10",
            "DECR c",
            "DECRBY c 5",
            "GET c",
            "INCRBY c x",
            "INCRBY c 1.5",
            "SET s v3",
            "INCR s",
            "SET big 9223372036854775807",
            "INCR big",
            "INCRBY big -1",
            "SET small -9223372036854775808",
            "DECR small",
            "DECRBY c -9223372036854775808",
            "INCRBY c 9223372036854775808",
            "SET neg -5",
            "INCR neg",
            "SET z 007",
            "INCR z",
            "SET e \"\"",
            "SET plus +1",
            "INCR plus",
            "STRLEN s",
            "STRLEN missing",
            "APPEND s abc",
            "APPEND newk xyz",
            "GET s",
            "GET newk",
            "GETRANGE s 0 2",
            "GETRANGE s -3 -1",
            "GETRANGE s 5 1",
            "GETRANGE s 0 -1",
            "GETRANGE s -100 100",
            "GETRANGE missing 0 -1",
            "GETRANGE s x 1",
            "SETRANGE s 1 ZZ",
            "GET s",
            "SETRANGE sr 5 hi",
            "GET sr",
            "STRLEN sr",
            "SETRANGE sr -1 x",
            "SETRANGE sr x x",
            "MSET m1 a m2 b m3 c",
            "MGET m1 m2 nokey m3",
            "MSET m1",
            "MSET m1 a m2",
            "MSET m1 x m1 y",
            "GET m1",
            "MSETNX n1 a n2 b",
            "MSETNX n2 c n3 d",
            "MGET n1 n2 n3",
            "MSETNX n4 a n4 b",
            "GET n4",
            "MSETNX n5",
            "SETEX sx 100 v",
            "TTL sx",
            "SETEX sx 0 v",
            "SETEX sx x v",
            "PSETEX px 100000 v",
            "TTL px",
            "PSETEX px -1 v",
            "GETSET sx new",
            "GETSET nothing new",
            "TTL sx",
            "GETSET",
            "UNLINK n1 n2 nothing",
            "UNLINK",
            "DEL m1 m2 nokey",
            "EXISTS m1 m3 m3",
            "TYPE m3",
            "TYPE nokey",
            "EXPIRE m3 100",
            "TTL m3",
            "PTTL nokey",
            "PERSIST m3",
            "TTL m3",
            "PERSIST m3",
            "PERSIST nokey",
            "EXPIRE nokey 10",
            "EXPIRE m3 x",
            "EXPIRE m3 100 NX",
            "EXPIRE m3 100 NX",
            "EXPIRE m3 200 XX",
            "EXPIRE m3 50 GT",
            "EXPIRE m3 300 GT",
            "EXPIRE m3 50 LT",
            "TTL m3",
            "EXPIRE m3 10 NX XX",
            "EXPIRE m3 10 GT LT",
            "EXPIRE m3 10 FOO",
            "PEXPIRE m3 100000",
            "TTL m3",
            "EXPIREAT m3 1",
            "EXISTS m3",
            "SET q v",
            "PEXPIREAT q 1000",
            "GET q",
            "SET p v",
            "TTL p",
            "PTTL p",
            "TTL nokey",
            "EXPIRE p 9223372036854775807",
            "FOO a b",
            "FOO",
            "GET",
            "GET a b",
            "MGET",
            "DEL",
            "TTL",
            "INCR",
            "AUTH x",
            "HELLO 4",
            "HELLO x",
            "CLIENT SETNAME myname",
            "CLIENT GETNAME",
            "CLIENT SETNAME a\nb",
            "CLIENT FOO",
        ],
    );
    // Binary-safe keys and values, a value with spaces and an empty value.
    both(&mut p, &mut t, &[b"SET", b"bin\x00\xff", b"\x01\x02 \r\n\x00"]);
    both(&mut p, &mut t, &[b"GET", b"bin\x00\xff"]);
    both(&mut p, &mut t, &[b"SET", b"sp", b" 1"]);
    both(&mut p, &mut t, &[b"INCR", b"sp"]);
    both(&mut p, &mut t, &[b"SET", b"empty", b""]);
    both(&mut p, &mut t, &[b"GET", b"empty"]);
    both(&mut p, &mut t, &[b"STRLEN", b"empty"]);
    both(&mut p, &mut t, &[b"SETRANGE", b"nothing", b"0", b""]);
    both(&mut p, &mut t, &[b"EXISTS", b"nothing"]);
    both(&mut p, &mut t, &[b"DBSIZE"]);
    both(&mut p, &mut t, &[b"FLUSHDB"]);
    both(&mut p, &mut t, &[b"DBSIZE"]);
    both(&mut p, &mut t, &[b"GET", b"s"]);
    // QUIT answers +OK and closes.
    assert_eq!(both(&mut p, &mut t, &[b"QUIT"]), Reply::Simple("OK".into()));
    assert!(t.closed() && p.closed());
}

#[test]
fn hashes_and_wrong_types_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "HSET h f1 v1 f2 v2",
            "HSET h f1 x f3 y",
            "HSET h dup 1 dup 2",
            "HGET h dup",
            "HGET h f1",
            "HGET h nof",
            "HGET nokey f",
            "HMGET h f1 nof f3",
            "HMGET nokey a b",
            "HMSET h a 1 b 2",
            "HLEN h",
            "HLEN nokey",
            "HEXISTS h a",
            "HEXISTS h zz",
            "HEXISTS nokey a",
            "HDEL h a zz",
            "HDEL nokey a",
            "HLEN h",
            "HGETALL h",
            "HGETALL nokey",
            "HINCRBY h cnt 5",
            "HINCRBY h cnt -2",
            "HINCRBY h f1 1",
            "HINCRBY h cnt x",
            "HINCRBY h cnt 9223372036854775807",
            "HINCRBY newh c 3",
            "HGETALL newh",
            "HSET h f",
            "HMSET h f",
            "HSET h",
            "HGET h",
            "HDEL h f1 f2 f3 cnt b dup",
            "EXISTS h",
            "HLEN h",
            "TYPE newh",
            "HSET hh x 1",
            "GET hh",
            "SET hh str",
            "GET hh",
            "HGET hh x",
            "HSET hq a 1",
            "INCR hq",
            "DECRBY hq 2",
            "APPEND hq x",
            "STRLEN hq",
            "GETRANGE hq 0 1",
            "SETRANGE hq 0 x",
            "GETDEL hq",
            "SET hq v GET",
            "MGET hq hh",
            "HLEN hh",
            "HGETALL hh",
            "HINCRBY hh a 1",
            "HSET hh a 1",
            "TYPE hq",
            "EXPIRE hq 100",
            "TTL hq",
            "SET hq now-a-string",
            "TTL hq",
            "TYPE hq",
            "DEL hq hh newh",
            "DBSIZE",
        ],
    );
}

#[test]
fn scan_inline_protocol_and_protocol_errors_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    for i in 0..40 {
        both(&mut p, &mut t, &[b"SET", format!("s{i}").as_bytes(), b"v"]);
    }
    both(&mut p, &mut t, &[b"HSET", b"s-hash", b"f", b"v"]);
    let scan_all = |c: &mut Conn, extra: &[&str]| {
        let mut keys = Vec::new();
        let mut cursor = "0".to_string();
        for _ in 0..1000 {
            let mut args: Vec<&[u8]> = vec![b"SCAN", cursor.as_bytes()];
            args.extend(extra.iter().map(|s| s.as_bytes()));
            let Reply::Array(Some(v)) = c.cmd(&args) else { panic!("SCAN reply") };
            let Reply::Bulk(Some(next)) = &v[0] else { panic!("cursor") };
            let Reply::Array(Some(ks)) = &v[1] else { panic!("keys") };
            keys.extend(ks.iter().cloned());
            cursor = String::from_utf8(next.clone()).unwrap();
            if cursor == "0" {
                break;
            }
        }
        keys.sort();
        keys.dedup();
        keys
    };
    let keys = |c: &mut Conn, pattern: &str| {
        let Reply::Array(Some(mut v)) = c.cmd(&[b"KEYS", pattern.as_bytes()]) else { panic!("KEYS reply") };
        v.sort();
        v
    };
    for pattern in ["*", "s1?", "s[23]*", "nothing*", "s-*"] {
        assert_eq!(keys(&mut t, pattern), keys(&mut p, pattern), "KEYS {pattern}");
    }
    for extra in [&[][..], &["COUNT", "7"][..], &["MATCH", "s1*", "COUNT", "5"][..], &["TYPE", "hash"][..]] {
        assert_eq!(scan_all(&mut t, extra), scan_all(&mut p, extra), "SCAN {extra:?}");
    }
    compare(&mut p, &mut t, &["SCAN x", "SCAN 0 COUNT 0", "SCAN 0 MATCH", "SCAN 0 FOO bar"]);
    // Inline commands, with quoting.
    for raw in [&b"PING\r\n"[..], b"SET inl \"a b\\x41\"\r\n", b"GET inl\r\n", b"  \r\nECHO 'x y'\r\n"] {
        p.send_raw(raw);
        t.send_raw(raw);
        if raw.starts_with(b"  ") {
            // the blank line is skipped; ECHO answers.
        }
        assert_eq!(t.read(), p.read(), "inline {raw:?}");
    }
    // Protocol errors: the error text, then the connection closes.
    for raw in [&b"*1\r\n$x\r\n"[..], b"*abc\r\n", b"*1\r\nfoo\r\n", b"*1\r\n$600000000\r\n", b"SET a \"unbalanced\r\n"]
    {
        let (mut p2, mut t2) = (Conn::open(peer.port), Conn::open(port));
        p2.send_raw(raw);
        t2.send_raw(raw);
        assert_eq!(t2.read(), p2.read(), "protocol error for {raw:?}");
        assert!(t2.closed(), "Tern closes after {raw:?}");
    }
    // The server is still fine.
    assert_eq!(t.q("PING"), Reply::Simple("PONG".into()));
}

#[test]
fn large_values_and_expiry_timing_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    let big: Vec<u8> = (0..20_000_000u32).map(|i| (i % 251) as u8).collect();
    both(&mut p, &mut t, &[b"SET", b"big", &big]);
    let Reply::Bulk(Some(back)) = t.cmd(&[b"GET", b"big"]) else { panic!("GET big") };
    assert!(back == big, "20 MB value round trip");
    compare(
        &mut p,
        &mut t,
        &[
            "STRLEN big",
            "GETRANGE big 8000 8010",
            "GETRANGE big 262140 262150",
            "GETRANGE big -5 -1",
            "APPEND big tail",
            "STRLEN big",
            "GETRANGE big -8 -1",
            "SETRANGE big 8190 XYZ",
            "GETRANGE big 8185 8200",
            "MSET big2 x big3 y",
        ],
    );
    both(&mut p, &mut t, &[b"MSET", b"mbig", &big[..300_000], b"small", b"s"]);
    both(&mut p, &mut t, &[b"MGET", b"mbig", b"small", b"none"]);
    both(&mut p, &mut t, &[b"SET", b"big", b"now small"]);
    both(&mut p, &mut t, &[b"GET", b"big"]);
    // Expiry: gone at once when the time passes (no purge needed to hide it).
    compare(
        &mut p,
        &mut t,
        &["SET e1 v PX 1000", "SET e2 v EX 100", "HSET e3 f v", "PEXPIRE e3 1000", "GET e1", "HGET e3 f"],
    );
    std::thread::sleep(Duration::from_millis(1300));
    compare(
        &mut p,
        &mut t,
        &[
            "GET e1",
            "TTL e1",
            "EXISTS e1 e3",
            "HGET e3 f",
            "HLEN e3",
            "TYPE e3",
            "TTL e2",
            "SET e1 again",
            "GET e1",
            "TTL e1",
        ],
    );
}

#[test]
fn resp3_after_hello_3_matches_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    // HELLO 3 answers a map (server facts differ: compare its keys and the protocol).
    let shape = |r: Reply| match r {
        Reply::Map(v) => {
            let keys: Vec<Reply> = v.iter().step_by(2).cloned().collect();
            let proto = v.iter().position(|x| *x == Reply::bulk("proto")).map(|i| v[i + 1].clone());
            (keys, proto)
        }
        other => panic!("HELLO 3 answered {other:?}"),
    };
    assert_eq!(shape(t.q("HELLO 3")), shape(p.q("HELLO 3")));
    compare(
        &mut p,
        &mut t,
        &[
            "GET missing",
            "SET k v",
            "GET k",
            "MGET k missing",
            "HSET h a 1 b 2",
            "HGETALL h",
            "HGETALL missing",
            "HGET h zz",
            "HMGET h a zz",
            "SET k v2 GET",
            "SET new v NX GET",
            "GETDEL missing",
            "CLIENT GETNAME",
            "CONFIG GET save",
            "TTL k",
            "SCAN 0 MATCH nothing*",
            "INCR n",
            "FOO",
            "HELLO 4",
        ],
    );
    // INFO is a verbatim text string in RESP3.
    assert!(matches!(t.q("INFO keyspace"), Reply::Verbatim(v) if v.starts_with(b"txt:# Keyspace")));
    assert!(matches!(p.q("INFO keyspace"), Reply::Verbatim(v) if v.starts_with(b"txt:# Keyspace")));
    // Pipelined GETs (the merged path) answer RESP3 nulls too.
    for c in [&mut p, &mut t] {
        c.send_raw(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*2\r\n$3\r\nGET\r\n$2\r\nzz\r\n");
    }
    assert_eq!((t.read(), t.read()), (p.read(), p.read()));
    // Back to RESP2.
    assert_eq!(shape2(t.q("HELLO 2")), shape2(p.q("HELLO 2")));
    compare(&mut p, &mut t, &["GET missing", "HGETALL h"]);
}

fn shape2(r: Reply) -> usize {
    match r {
        Reply::Array(Some(v)) => v.len(),
        other => panic!("HELLO 2 answered {other:?}"),
    }
}

/// KEYS and SCAN MATCH with redis-server's glob quirks (`[a-]`, `[]`, trailing `\`, `[^...]`,
/// reversed ranges, high bytes), then seeded random patterns: the same keys come back. A pattern
/// of many stars against long keys answers promptly (a backtracking matcher never would).
/// Rerun a failure with `TERN_SEED=<n>`.
#[test]
fn glob_patterns_match_redis() {
    use tern_types::rng::Rng;
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    let mut names: Vec<Vec<u8>> = [
        "", "a", "b", "ab", "ba", "aab", "abc", "]", "^", "-", "\\", "*", "?", "[", "a]", "a-", "x\\", "z", "m", "A",
        "hello", "hallo", "hxllo", "h]llo", "a*b", "a?b",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    names.extend([b"\x80".to_vec(), b"\xff".to_vec(), b"a\x00b".to_vec()]);
    for k in &names {
        both(&mut p, &mut t, &[b"SET", k, b"v"]);
    }
    let keys = |c: &mut Conn, pattern: &[u8]| {
        let Reply::Array(Some(mut v)) = c.cmd(&[b"KEYS", pattern]) else { panic!("KEYS reply") };
        v.sort();
        v
    };
    let fixed: [&[u8]; 24] = [
        b"*",
        b"**",
        b"?",
        b"[a-]",
        b"[a-]x",
        b"[]",
        b"[]a]",
        b"[",
        b"[^",
        b"[^]",
        b"x\\",
        b"\\",
        b"[z-a]",
        b"[^a-c]*",
        b"[\\]]",
        b"[\\-]",
        b"a\\*b",
        b"h[^e]llo",
        b"[a-\xff]",
        b"[\x80-\xff]",
        b"a*",
        b"*b",
        b"?*",
        b"[]-a]",
    ];
    for pat in fixed {
        assert_eq!(keys(&mut t, pat), keys(&mut p, pat), "KEYS {:?}", String::from_utf8_lossy(pat));
    }
    let seed = tern_testkit::seed();
    println!("seed {seed} (rerun with TERN_SEED={seed})");
    let mut rng = Rng::new(seed);
    let alphabet = b"ab*?[]^-\\";
    for _ in 0..300 {
        let pat: Vec<u8> = (0..rng.below(7) + 1).map(|_| alphabet[rng.below(alphabet.len() as u64) as usize]).collect();
        assert_eq!(keys(&mut t, &pat), keys(&mut p, &pat), "KEYS {:?} (seed {seed})", String::from_utf8_lossy(&pat));
    }
    // SCAN MATCH uses the same matcher.
    let scan = |c: &mut Conn, pat: &[u8]| {
        let Reply::Array(Some(v)) = c.cmd(&[b"SCAN", b"0", b"MATCH", pat, b"COUNT", b"1000"]) else { panic!("SCAN") };
        let Reply::Array(Some(mut ks)) = v[1].clone() else { panic!("SCAN keys") };
        ks.sort();
        ks
    };
    for pat in [&b"[a-]*"[..], b"*\\", b"[^ab]"] {
        assert_eq!(scan(&mut t, pat), scan(&mut p, pat), "SCAN MATCH {:?}", String::from_utf8_lossy(pat));
    }
    // Long keys and a pattern of 25 stars: prompt, and the same answer (redis's recursion bound
    // of 1,000 star groups included).
    for i in 0..20u8 {
        let mut k = vec![b'a'; 2990];
        k.push(b'0' + i % 10);
        both(&mut p, &mut t, &[b"SET", &k, b"v"]);
    }
    let start = std::time::Instant::now();
    for pat in
        [b"a*".repeat(25), [b"a*".repeat(25), b"b".to_vec()].concat(), [b"a*".repeat(1001), b"5".to_vec()].concat()]
    {
        assert_eq!(keys(&mut t, &pat), keys(&mut p, &pat), "KEYS of {} bytes", pat.len());
    }
    assert!(start.elapsed() < Duration::from_secs(30), "KEYS with many stars took {:?}", start.elapsed());
}

#[test]
fn new_string_commands_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "SET g v",
            "GETEX g",
            "GETEX g EX 100",
            "TTL g",
            "GETEX g PX 200000",
            "TTL g",
            "GETEX g PERSIST",
            "TTL g",
            "GETEX g EXAT 99999999999",
            "TTL g",
            "GETEX g PXAT 1",
            "EXISTS g",
            "GETEX nokey EX 10",
            "GETEX nokey EX 0",
            "SET g v",
            "GETEX g EX 0",
            "GETEX g EX -1",
            "GETEX g EX x",
            "GETEX g EX 10 PX 10",
            "GETEX g PERSIST EX 10",
            "GETEX g FOO",
            "GETEX g EX",
            "HSET gh f v",
            "GETEX gh",
            "INCRBYFLOAT f 10.5",
            "INCRBYFLOAT f 0.1",
            "INCRBYFLOAT f -5",
            "SET f 1000",
            "INCRBYFLOAT f 0.1",
            "SET f 5.0e3",
            "INCRBYFLOAT f 2.0e2",
            "INCRBYFLOAT f 1e300",
            "INCRBYFLOAT f abc",
            "INCRBYFLOAT f inf",
            "INCRBYFLOAT f 1e5000",
            "INCRBYFLOAT f 0x10",
            "INCRBYFLOAT f2 -0",
            "INCRBYFLOAT f3 1e-30",
            "SET f4 abc",
            "INCRBYFLOAT f4 1",
            "INCRBYFLOAT gh 1",
            "SET f5 3 EX 100",
            "INCRBYFLOAT f5 1.5",
            "TTL f5",
            "SETBIT b 7 1",
            "SETBIT b 7 0",
            "SETBIT b 100 1",
            "GET b",
            "GETBIT b 100",
            "GETBIT b 101",
            "GETBIT b 100000",
            "GETBIT nokey 5",
            "SETBIT b -1 1",
            "SETBIT b x 1",
            "SETBIT b 4294967296 1",
            "SETBIT b 1 2",
            "SETBIT b 1 x",
            "GETBIT b -1",
            "SETBIT gh 1 1",
            "GETBIT gh 1",
            "SET bc foobar",
            "BITCOUNT bc",
            "BITCOUNT bc 0 0",
            "BITCOUNT bc 1 1",
            "BITCOUNT bc 1 1 BYTE",
            "BITCOUNT bc 5 30 BIT",
            "BITCOUNT bc -3 -1",
            "BITCOUNT bc -1 -3",
            "BITCOUNT bc 0 -1 BIT",
            "BITCOUNT bc 3 1",
            "BITCOUNT bc 0",
            "BITCOUNT bc 0 1 FOO",
            "BITCOUNT bc x 1",
            "BITCOUNT nokey",
            "BITCOUNT nokey 0 x",
            "BITCOUNT gh",
            "SET l1 ohmytext",
            "SET l2 mynewtext",
            "LCS l1 l2",
            "LCS l1 l2 LEN",
            "LCS l1 l2 IDX",
            "LCS l1 l2 IDX MINMATCHLEN 4",
            "LCS l1 l2 IDX MINMATCHLEN 4 WITHMATCHLEN",
            "LCS l1 l2 IDX WITHMATCHLEN",
            "LCS l1 l2 LEN IDX",
            "LCS l1 l2 FOO",
            "LCS l1 l2 MINMATCHLEN x",
            "LCS l1 nokey",
            "LCS nokey nokey2 IDX",
            "LCS l1 gh",
            "LCS l1",
        ],
    );
    // Values past the inline part (8,000 bytes) with the bit commands, LCS and INCRBYFLOAT.
    let big: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    both(&mut p, &mut t, &[b"SET", b"big", &big]);
    for args in [
        &[&b"GETBIT"[..], b"big", b"80000"][..],
        &[b"GETBIT", b"big", b"559999"],
        &[b"SETBIT", b"big", b"559999", b"1"],
        &[b"SETBIT", b"big", b"600000", b"1"],
        &[b"STRLEN", b"big"],
        &[b"BITCOUNT", b"big"],
        &[b"BITCOUNT", b"big", b"7000", b"9000"],
        &[b"BITCOUNT", b"big", b"64000", b"560000", b"BIT"],
        &[b"GETRANGE", b"big", b"69990", b"70010"],
        &[b"GETEX", b"big", b"EX", b"100"],
    ] {
        both(&mut p, &mut t, args);
    }
    let a: Vec<u8> = (0..9000u32).map(|i| b"abcd"[(i % 4) as usize]).collect();
    let b: Vec<u8> = (0..300u32).map(|i| b"xbdz"[(i % 4) as usize]).collect();
    both(&mut p, &mut t, &[b"SET", b"la", &a]);
    both(&mut p, &mut t, &[b"SET", b"lb", &b]);
    both(&mut p, &mut t, &[b"LCS", b"la", b"lb"]);
    both(&mut p, &mut t, &[b"LCS", b"la", b"lb", b"IDX", b"MINMATCHLEN", b"2", b"WITHMATCHLEN"]);
    let num = [b"1".repeat(8100), b".5".to_vec()].concat();
    both(&mut p, &mut t, &[b"SET", b"fbig", &num]);
    both(&mut p, &mut t, &[b"INCRBYFLOAT", b"fbig", b"1"]);
    let num = [b"1".repeat(4000), b".5".to_vec()].concat();
    both(&mut p, &mut t, &[b"SET", b"fbig", &num]);
    both(&mut p, &mut t, &[b"INCRBYFLOAT", b"fbig", b"1"]);
    // LCS's table is bounded by proto-max-bulk-len, as in redis.
    compare(&mut p, &mut t, &["CONFIG SET proto-max-bulk-len 1048576", "LCS la lb LEN"]);
}

/// INCRBYFLOAT over many random operands: redis's x87 `long double` digits exactly.
#[test]
fn incrbyfloat_digits_match_redis() {
    use tern_types::rng::Rng;
    let seed = tern_testkit::seed();
    println!("seed {seed} (rerun with TERN_SEED={seed})");
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    let mut rng = Rng::new(seed);
    for i in 0..300 {
        let mant = rng.below(1_000_000_000);
        let frac = rng.below(1000);
        let exp = rng.below(40) as i64 - 20;
        let sign = if rng.chance(30) { "-" } else { "" };
        let v = match i % 3 {
            0 => format!("{sign}{mant}.{frac}"),
            1 => format!("{sign}{mant}e{exp}"),
            _ => format!("{sign}0.{frac:03}{mant}"),
        };
        both(&mut p, &mut t, &[b"INCRBYFLOAT", b"acc", v.as_bytes()]);
        if i % 50 == 0 {
            both(&mut p, &mut t, &[b"SET", b"acc", b"0"]);
        }
    }
}

#[test]
fn new_key_commands_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "SET a 1 EX 100",
            "RENAME a b",
            "GET a",
            "GET b",
            "TTL b",
            "RENAME nokey x",
            "RENAME b b",
            "RENAMENX b b",
            "SET c 2",
            "RENAMENX b c",
            "RENAMENX b d",
            "RENAME d c",
            "GET c",
            "HSET h f v g w",
            "RENAME h h2",
            "HGETALL h2",
            "TYPE h2",
            "COPY c c2",
            "GET c2",
            "COPY c c2",
            "COPY c c2 REPLACE",
            "COPY c c",
            "COPY nokey c3",
            "COPY c c3 DB 1",
            "SELECT 1",
            "GET c3",
            "SELECT 0",
            "COPY c c3 DB 99",
            "COPY c c3 DB x",
            "COPY c c3 FOO",
            "COPY h2 h3",
            "HGETALL h3",
            "HSET h3 z 1",
            "HLEN h2",
            "HLEN h3",
            "MOVE c 1",
            "EXISTS c",
            "SELECT 1",
            "GET c",
            "MOVE c 0",
            "SELECT 0",
            "GET c",
            "MOVE c 0",
            "MOVE nokey 1",
            "MOVE c 99",
            "MOVE c x",
            "SET c again",
            "SELECT 1",
            "SET c there",
            "SELECT 0",
            "MOVE c 1",
            "GET c",
            "MOVE h3 2",
            "SELECT 2",
            "HGETALL h3",
            "SELECT 0",
            "SET e v",
            "EXPIRETIME e",
            "PEXPIRETIME e",
            "EXPIRETIME nokey",
            "EXPIREAT e 4000000000",
            "EXPIRETIME e",
            "PEXPIRETIME e",
            "PEXPIREAT e 4000000000123",
            "PEXPIRETIME e",
            "EXPIRETIME e",
            "TYPE e",
            "RENAME",
            "COPY c",
            "MOVE c",
            "FLUSHDB",
            "RANDOMKEY",
            "SET only v",
            "RANDOMKEY",
            "FLUSHDB FOO",
            "FLUSHDB ASYNC",
            "DBSIZE",
        ],
    );
    // Big values move, copy and rename whole.
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    both(&mut p, &mut t, &[b"SET", b"big", &big]);
    for args in [
        &[&b"COPY"[..], b"big", b"big2"][..],
        &[b"RENAME", b"big", b"big3"],
        &[b"MOVE", b"big3", b"1"],
        &[b"GET", b"big2"],
        &[b"SELECT", b"1"],
        &[b"GET", b"big3"],
        &[b"STRLEN", b"big3"],
        &[b"COPY", b"big3", b"big4", b"DB", b"0"],
        &[b"SELECT", b"0"],
        &[b"GET", b"big4"],
        &[b"EXISTS", b"big", b"big2", b"big3", b"big4"],
    ] {
        both(&mut p, &mut t, args);
    }
    // MEMORY USAGE: an integer for a key, nil without one (the sizes differ).
    let shape = |r: Reply| match r {
        Reply::Int(n) => n > 0,
        Reply::Bulk(None) => false,
        other => panic!("MEMORY USAGE answered {other:?}"),
    };
    assert_eq!(shape(t.q("MEMORY USAGE big2")), shape(p.q("MEMORY USAGE big2")));
    assert_eq!(shape(t.q("MEMORY USAGE nokey")), shape(p.q("MEMORY USAGE nokey")));
    compare(&mut p, &mut t, &["MEMORY USAGE big2 SAMPLES x", "MEMORY USAGE big2 FOO", "MEMORY FOO"]);
}

#[test]
fn new_hash_commands_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "HSETNX h f v",
            "HSETNX h f w",
            "HGET h f",
            "HSETNX h g w",
            "HSTRLEN h f",
            "HSTRLEN h nof",
            "HSTRLEN nokey f",
            "HKEYS h",
            "HVALS h",
            "HKEYS nokey",
            "HVALS nokey",
            "HINCRBYFLOAT h n 10.5",
            "HINCRBYFLOAT h n 0.1",
            "HINCRBYFLOAT h n -5",
            "HINCRBYFLOAT h f 1",
            "HINCRBYFLOAT h n abc",
            "HINCRBYFLOAT h n inf",
            "HSET h big 1000",
            "HINCRBYFLOAT h big 0.1",
            "HINCRBYFLOAT newh x 3",
            "HGETALL newh",
            "SET s v",
            "HSETNX s f v",
            "HSTRLEN s f",
            "HKEYS s",
            "HVALS s",
            "HINCRBYFLOAT s f 1",
            "HRANDFIELD s",
            "HSCAN s 0",
            "HRANDFIELD nokey",
            "HRANDFIELD nokey 5",
            "HRANDFIELD nokey -5 WITHVALUES",
            "HRANDFIELD h 0",
            "HRANDFIELD h x",
            "HRANDFIELD h 1 FOO",
            "HRANDFIELD h 1 WITHVALUES x",
            "HRANDFIELD h -9223372036854775807 WITHVALUES",
            "HSCAN nokey 0",
            "HSCAN h x",
            "HSCAN h 0 COUNT 0",
            "HSCAN h 0 MATCH",
            "HSCAN h 0 FOO bar",
            "HSCAN h 0 TYPE string",
        ],
    );
    // HRANDFIELD: the same shapes and sets, not the same random picks.
    for c in [&mut p, &mut t] {
        c.q("HSET r a 1 b 2 c 3 d 4 e 5");
    }
    let fields = |c: &mut Conn, cmd: &str| -> Vec<Reply> {
        let Reply::Array(Some(v)) = c.q(cmd) else { panic!("{cmd}") };
        v
    };
    for c in [&mut p, &mut t] {
        let one = c.q("HRANDFIELD r");
        assert!(matches!(&one, Reply::Bulk(Some(f)) if b"abcde".contains(&f[0])), "{one:?}");
        let mut three = fields(c, "HRANDFIELD r 3");
        three.sort();
        three.dedup();
        assert_eq!(three.len(), 3, "distinct fields");
        assert_eq!(fields(c, "HRANDFIELD r 10").len(), 5, "at most all fields");
        assert_eq!(fields(c, "HRANDFIELD r -10").len(), 10, "repeats allowed");
        let pairs = fields(c, "HRANDFIELD r -7 WITHVALUES");
        assert_eq!(pairs.len(), 14);
        for pair in pairs.chunks(2) {
            let (Reply::Bulk(Some(f)), Reply::Bulk(Some(v))) = (&pair[0], &pair[1]) else { panic!("{pair:?}") };
            assert_eq!(v[0] - b'0', f[0] - b'a' + 1, "value of its field");
        }
        let mut all = fields(c, "HRANDFIELD r 5 WITHVALUES");
        all.sort();
        assert_eq!(all.len(), 10);
    }
    // HSCAN: the union of the pages equals HGETALL (a hash of 300 fields spans pages in Tern).
    let mut args: Vec<Vec<u8>> = vec![b"HSET".to_vec(), b"many".to_vec()];
    for i in 0..300 {
        args.push(format!("f{i}").into_bytes());
        args.push(format!("v{i}").into_bytes());
    }
    let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
    both(&mut p, &mut t, &refs);
    let hscan_all = |c: &mut Conn, extra: &[&str]| {
        let mut pairs = Vec::new();
        let mut cursor = "0".to_string();
        for _ in 0..1000 {
            let mut a: Vec<&[u8]> = vec![b"HSCAN", b"many", cursor.as_bytes()];
            a.extend(extra.iter().map(|s| s.as_bytes()));
            let Reply::Array(Some(v)) = c.cmd(&a) else { panic!("HSCAN reply") };
            let Reply::Bulk(Some(next)) = &v[0] else { panic!("cursor") };
            let Reply::Array(Some(fv)) = &v[1] else { panic!("fields") };
            pairs.extend(fv.chunks(2).map(|c| c.to_vec()));
            cursor = String::from_utf8(next.clone()).unwrap();
            if cursor == "0" {
                break;
            }
        }
        pairs.sort();
        pairs.dedup();
        pairs
    };
    for extra in [&[][..], &["COUNT", "7"][..], &["MATCH", "f1*", "COUNT", "50"][..]] {
        assert_eq!(hscan_all(&mut t, extra), hscan_all(&mut p, extra), "HSCAN {extra:?}");
    }
    // RESP3: HRANDFIELD WITHVALUES answers [field, value] pairs.
    for c in [&mut p, &mut t] {
        c.q("HELLO 3");
    }
    let pairs = |c: &mut Conn| match c.q("HRANDFIELD r 2 WITHVALUES") {
        Reply::Array(Some(v)) => {
            v.iter().map(|x| matches!(x, Reply::Array(Some(p)) if p.len() == 2)).collect::<Vec<_>>()
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(pairs(&mut t), pairs(&mut p));
}

#[test]
fn server_commands_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "CONFIG GET maxclients",
            "CONFIG GET timeout",
            "CONFIG GET maxmemory",
            "CONFIG GET appendonly",
            "CONFIG GET databases",
            "CONFIG GET MAXMEM*",
            "CONFIG GET maxmemory-policy hz",
            "CONFIG SET maxclients 0",
            "CONFIG SET maxclients abc",
            "CONFIG SET timeout -1",
            "CONFIG SET foo 1",
            "CONFIG SET maxclients 5 maxclients 6",
            "CONFIG SET maxclients 10 timeout",
            "CONFIG SET proto-max-bulk-len 100",
            "CONFIG SET client-query-buffer-limit abc",
            "CONFIG SET maxclients 500 timeout 7",
            "CONFIG GET maxclients",
            "CONFIG GET timeout",
            "CONFIG SET maxclients 10000 timeout 0",
            "CONFIG SET client-query-buffer-limit 2mb",
            "CONFIG GET client-query-buffer-limit",
            "CONFIG SET client-query-buffer-limit 1gb",
            "CONFIG SET",
            "CONFIG GET",
            "CONFIG REWRITE",
            "CONFIG RESETSTAT",
            "CONFIG FOO",
            "CLIENT KILL 1.2.3.4:5",
            "CLIENT KILL ID 999999",
            "CLIENT KILL ID abc",
            "CLIENT KILL ADDR 1.2.3.4:5",
            "CLIENT KILL LADDR 1.2.3.4:5",
            "CLIENT KILL USER nobody",
            "CLIENT KILL USER default SKIPME yes",
            "CLIENT KILL SKIPME maybe",
            "CLIENT KILL TYPE foo",
            "CLIENT KILL TYPE master",
            "CLIENT KILL ID",
            "CLIENT NO-EVICT on",
            "CLIENT NO-EVICT off",
            "CLIENT NO-EVICT maybe",
            "CLIENT NO-EVICT",
            "CLIENT LIST TYPE foo",
            "CLIENT LIST ID abc",
            "CLIENT INFO x",
            "TIME x",
            "COMMAND INFO nosuchcommand",
            "COMMAND FOO",
        ],
    );
    // CONFIG GET * answers every parameter redis-server has.
    let names = |c: &mut Conn| {
        let Reply::Array(Some(v)) = c.q("CONFIG GET *") else { panic!("CONFIG GET") };
        let mut n: Vec<Reply> = v.into_iter().step_by(2).collect();
        n.sort();
        n
    };
    assert_eq!(names(&mut t), names(&mut p));
    // TIME: two integers as strings.
    let time = |c: &mut Conn| match c.q("TIME") {
        Reply::Array(Some(v)) if v.len() == 2 => {
            v.iter().all(|x| matches!(x, Reply::Bulk(Some(s)) if s.iter().all(u8::is_ascii_digit)))
        }
        other => panic!("TIME {other:?}"),
    };
    assert!(time(&mut t) && time(&mut p));
    // CLIENT LIST / INFO: the same fields in the same order.
    let fields = |r: Reply| -> Vec<String> {
        let Reply::Bulk(Some(text)) = r else { panic!("CLIENT reply {r:?}") };
        let line = String::from_utf8(text).unwrap();
        let first = line.lines().next().unwrap_or("").to_string();
        first.split(' ').map(|kv| kv.split('=').next().unwrap().to_string()).collect()
    };
    assert_eq!(fields(t.q("CLIENT INFO")), fields(p.q("CLIENT INFO")));
    assert_eq!(fields(t.q("CLIENT LIST")), fields(p.q("CLIENT LIST")));
    assert_eq!(fields(t.q("CLIENT LIST TYPE normal")), fields(p.q("CLIENT LIST TYPE normal")));
    // INFO: the sections and the fields clients read.
    let info = |c: &mut Conn, section: &str| {
        let Reply::Bulk(Some(text)) = c.q(&format!("INFO {section}")) else { panic!("INFO") };
        String::from_utf8(text).unwrap()
    };
    for (section, keys) in [
        ("memory", &["used_memory:", "used_memory_human:", "used_memory_rss:", "maxmemory:0", "mem_allocator:"][..]),
        ("cpu", &["used_cpu_sys:", "used_cpu_user:"]),
        (
            "stats",
            &["total_connections_received:", "total_commands_processed:", "rejected_connections:", "expired_keys:"],
        ),
        ("persistence", &["loading:0", "rdb_bgsave_in_progress:", "aof_enabled:0"]),
        ("clients", &["connected_clients:", "maxclients:"]),
        ("server", &["redis_version:", "process_id:", "tcp_port:", "uptime_in_seconds:"]),
    ] {
        let (a, b) = (info(&mut t, section), info(&mut p, section));
        for k in keys {
            assert!(a.contains(k), "Tern INFO {section} lacks {k}: {a}");
            assert!(b.contains(k), "redis INFO {section} lacks {k}");
        }
    }
    let headers = |s: String| s.lines().filter(|l| l.starts_with('#')).map(String::from).collect::<Vec<_>>();
    assert_eq!(headers(info(&mut t, "everything")), headers(info(&mut p, "everything")));
    assert_eq!(headers(info(&mut t, "")), headers(info(&mut p, "")));
    // commandstats: calls and time per command.
    for c in [&mut p, &mut t] {
        c.q("CONFIG RESETSTAT");
        c.q("SET k v");
        c.q("GET k");
        c.q("GET k");
        c.q("GET");
        c.q("HSET k f v");
    }
    let stats = |c: &mut Conn| {
        info(c, "commandstats")
            .lines()
            .filter(|l| l.starts_with("cmdstat_get:") || l.starts_with("cmdstat_hset:"))
            .map(|l| {
                let calls = l.split(['=', ',']).nth(1).unwrap().to_string();
                let failed = l.rsplit('=').next().unwrap().to_string();
                let rejected = l.split("rejected_calls=").nth(1).unwrap().split(',').next().unwrap().to_string();
                (l.split(':').next().unwrap().to_string(), calls, rejected, failed)
            })
            .collect::<std::collections::BTreeSet<_>>()
    };
    assert_eq!(stats(&mut t), stats(&mut p));
    assert!(info(&mut t, "commandstats").contains("usec_per_call="));
    let errs = |c: &mut Conn| {
        info(c, "errorstats").lines().filter(|l| l.starts_with("errorstat_")).map(String::from).collect::<Vec<_>>()
    };
    assert_eq!(errs(&mut t), errs(&mut p));
    // COMMAND INFO: redis 7's ten fields.
    let len = |r: Reply| match r {
        Reply::Array(Some(v)) => match &v[0] {
            Reply::Array(Some(e)) => e.len(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert_eq!(len(t.q("COMMAND INFO get")), len(p.q("COMMAND INFO get")));
}

/// CLIENT KILL closes the named connection (new and old forms); SKIPME.
#[test]
fn client_kill_closes_connections_like_redis() {
    let (_d, _n, peer, port) = setup();
    for port in [peer.port, port] {
        let mut me = Conn::open(port);
        let mut victim = Conn::open(port);
        let Reply::Int(id) = victim.q("CLIENT ID") else { panic!("CLIENT ID") };
        assert_eq!(me.q(&format!("CLIENT KILL ID {id}")), Reply::Int(1));
        assert!(victim.closed(), "killed by id");
        let mut victim = Conn::open(port);
        let Reply::Bulk(Some(info)) = victim.q("CLIENT INFO") else { panic!("CLIENT INFO") };
        let info = String::from_utf8(info).unwrap();
        let addr = info.split(' ').find_map(|f| f.strip_prefix("addr=")).unwrap().to_string();
        assert_eq!(me.q(&format!("CLIENT KILL {addr}")), Reply::Simple("OK".into()));
        assert!(victim.closed(), "killed by address (old form)");
        let Reply::Int(mine) = me.q("CLIENT ID") else { panic!("CLIENT ID") };
        assert_eq!(me.q(&format!("CLIENT KILL ID {mine}")), Reply::Int(0), "SKIPME yes by default");
        assert_eq!(me.q(&format!("CLIENT KILL ID {mine} SKIPME no")), Reply::Int(1));
        assert!(me.closed(), "killed itself after the reply");
    }
}

/// MULTI/EXEC/DISCARD/WATCH: queueing, errors at queue time (EXECABORT) and at run time (in the
/// EXEC array), nesting and misuse errors, WATCH conflicts (a write by anyone, an expiry, a
/// write of the same value), commands that read what earlier queued commands wrote.
#[test]
fn transactions_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "MULTI",
            "MULTI",
            "WATCH a",
            "SET a 1",
            "GET",
            "FOO",
            "EXEC",
            "EXEC",
            "DISCARD",
            "UNWATCH",
            "WATCH",
            "MULTI x",
            "DISCARD x",
            "MULTI",
            "EXEC",
            "MULTI",
            "SET a 1",
            "INCR a",
            "HSET a f v",
            "GET a",
            "EXEC",
            "MULTI",
            "MULTI",
            "SET n 1",
            "EXEC",
            "MULTI",
            "WATCH n",
            "SET n 2",
            "EXEC",
            "MULTI",
            "CLIENT FOO",
            "EXEC",
            "MULTI",
            "CONFIG GET",
            "EXEC",
            "MULTI",
            "CONFIG SET foo bar",
            "CLIENT LIST x",
            "PING",
            "ECHO hi",
            "EXEC",
            "MULTI",
            "SET e 1 EX 0",
            "INCRBY e x",
            "EXEC",
            "MULTI",
            "GET a b",
            "DISCARD",
            "GET a",
            "MULTI",
            "SET x 1",
            "DISCARD",
            "EXISTS x",
            "MULTI",
            "INCR c",
            "INCR c",
            "GET c",
            "HSET h f 1",
            "HGETALL h",
            "HSET h g 2",
            "HINCRBY h f 10",
            "HGETALL h",
            "HKEYS h",
            "HLEN h",
            "HDEL h f",
            "HGETALL h",
            "HRANDFIELD h 5 WITHVALUES",
            "DEL h",
            "HGETALL h",
            "EXEC",
            "MULTI",
            "SET r 1",
            "RENAME r r2",
            "GET r2",
            "HSET hc a 1",
            "COPY hc hc2",
            "HGETALL hc2",
            "SET m v",
            "MOVE m 1",
            "SELECT 1",
            "GET m",
            "SELECT 0",
            "APPEND r2 xyz",
            "GETRANGE r2 1 2",
            "SETBIT r2 0 1",
            "GET r2",
            "INCRBYFLOAT f 1.5",
            "GETDEL f",
            "EXISTS f",
            "EXEC",
            "MULTI",
            "SET fl 1",
            "FLUSHDB",
            "GET fl",
            "EXEC",
            "DBSIZE",
            "MULTI",
            "SELECT 1",
            "SET x y",
            "EXEC",
            "GET x",
            "SELECT 0",
            "EXEC x",
            "MULTI",
            "SET q 1",
            "EXEC x",
            "EXEC",
            "EXISTS q",
            "MULTI",
            "RESET",
            "EXEC",
        ],
    );
    // WATCH: writes by this connection or another (even of the same value) make EXEC null; a
    // write that changes nothing (NX on an existing key) does not; DISCARD and UNWATCH forget.
    let mut p2 = Conn::open(peer.port);
    let mut t2 = Conn::open(port);
    let mut watch = |before: &[&str], other: &[&str], expect_null: bool| {
        for (c, c2) in [(&mut p, &mut p2), (&mut t, &mut t2)] {
            for line in before {
                c.q(line);
            }
            for line in other {
                c2.q(line);
            }
            c.q("MULTI");
            c.q("GET w");
            let r = c.q("EXEC");
            assert_eq!(r == Reply::Array(None), expect_null, "{before:?} then {other:?}: EXEC answered {r:?}");
        }
    };
    watch(&["SET w 1", "WATCH w"], &["SET w 1"], true);
    watch(&["SET w 1", "WATCH w"], &["SET w 2"], true);
    watch(&["SET w 1", "WATCH w", "SET w 5"], &[], true);
    watch(&["SET w 1", "WATCH w"], &["SET w 2 NX"], false);
    watch(&["SET w 1", "WATCH w"], &["EXPIRE w 100"], true);
    watch(&["DEL w", "WATCH w"], &["SET w 1", "DEL w"], true);
    watch(&["SET w 1", "WATCH w"], &["SET other 1"], false);
    watch(&["SET w 1", "WATCH w", "UNWATCH"], &["SET w 2"], false);
    watch(&["DEL w", "HSET w f 1", "WATCH w"], &["HSET w f 2"], true);
    watch(&["DEL w", "HSET w f 1", "WATCH w"], &["HINCRBY w f 1"], true);
    watch(&["DEL w", "SET w 1", "WATCH w"], &["RENAME w w2"], true);
    watch(&["SET w 1", "WATCH w"], &["FLUSHDB"], true);
    watch(&["DEL w", "WATCH w"], &["FLUSHDB"], false);
    for c in [&mut p, &mut t] {
        c.q("SET w 1");
        c.q("WATCH w");
        c.q("MULTI");
        c.q("GET w");
        c.q("DISCARD");
        c.q("SET w 2");
        c.q("MULTI");
        c.q("GET w");
        assert_eq!(c.q("EXEC"), Reply::Array(Some(vec![Reply::bulk("2")])), "DISCARD unwatches");
    }
    // A watched key that expires before EXEC.
    for c in [&mut p, &mut t] {
        c.q("SET ew 1 PX 100");
        c.q("WATCH ew");
        c.q("MULTI");
        c.q("GET ew");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(t.q("EXEC"), p.q("EXEC"));
    // RESP3 inside EXEC: HELLO 3's map in the array, replies after it in RESP3.
    for c in [&mut p, &mut t] {
        c.q("MULTI");
        c.q("HELLO 3");
        c.q("HGETALL hc");
        c.q("GET nokey");
    }
    let shape = |r: Reply| match r {
        Reply::Array(Some(v)) => v.iter().map(std::mem::discriminant).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(shape(t.q("EXEC")), shape(p.q("EXEC")));
    // A watch conflict in RESP3 is a null.
    for c in [&mut p, &mut t] {
        c.q("WATCH w3");
        c.q("SET w3 1");
        c.q("MULTI");
        c.q("GET w3");
    }
    assert_eq!(t.q("EXEC"), p.q("EXEC"));
    // QUIT inside MULTI answers and closes.
    for c in [&mut p, &mut t] {
        c.q("HELLO 2");
    }
    compare(&mut p, &mut t, &["MULTI", "SET z 1"]);
    assert_eq!(both(&mut p, &mut t, &[b"QUIT"]), Reply::Simple("OK".into()));
    assert!(t.closed() && p.closed());
}

/// Users, passwords and permissions (issue 14): ACL SETUSER / GETUSER / LIST / USERS / DELUSER /
/// CAT / GENPASS and their errors, AUTH and HELLO AUTH, NOAUTH before AUTH once `requirepass` is
/// set, NOPERM for commands, subcommands and keys a user may not use (also inside MULTI and for
/// EXEC), RESET signing out, and a deleted user's connections closed — all as redis-server 7.0.
#[test]
fn auth_and_acl_match_redis() {
    let (_d, _n, peer, port) = setup();
    let (mut p, mut t) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut p,
        &mut t,
        &[
            "ACL LIST",
            "ACL GETUSER default",
            "ACL WHOAMI",
            "AUTH onlyone",
            "AUTH a b c",
            "AUTH default anything",
            "ACL SETUSER simple on >pw ~k* %R~r* +@all -@dangerous",
            "ACL GETUSER simple",
            "ACL LIST",
            // redis-server describes mixed rules by a best fit over categories and then single
            // commands in its dictionary's order; Tern keeps the order given, so only the
            // behaviour of this user is compared.
            "ACL SETUSER alice on >pw1 ~app:* %R~ro:* +@hash +get +set -hdel +config|get +multi +exec",
            "ACL GETUSER nosuch",
            "ACL SETUSER bob on foo",
            "ACL SETUSER bob +nosuch",
            "ACL SETUSER bob +@nosuch",
            "ACL SETUSER bob #zz",
            "ACL SETUSER bob allkeys ~x",
            "ACL SETUSER bob <nope",
            "ACL SETUSER bob %X~a",
            "ACL USERS",
            "ACL DELUSER default",
            "ACL DELUSER nosuch",
            "ACL CAT nosuch",
            "ACL GENPASS 0",
            "ACL GENPASS 5000",
            "ACL SAVE",
            "ACL SETUSER carol on nopass ~* +@read",
            "ACL GETUSER carol",
            "ACL SETUSER carol reset",
            "ACL GETUSER carol",
            "ACL SETUSER dave on >x >y <x ~a* ~b* allkeys &* +@all -@dangerous",
            "ACL GETUSER dave",
        ],
    );
    for (what, want) in [("ACL GENPASS", 64), ("ACL GENPASS 32", 8)] {
        let Reply::Bulk(Some(pw)) = t.q(what) else { panic!("{what}") };
        assert_eq!(pw.len(), want, "{what}");
    }
    let Reply::Array(Some(cats)) = t.q("ACL CAT") else { panic!("ACL CAT") };
    assert_eq!(Reply::Array(Some(cats)), p.q("ACL CAT"));
    let Reply::Array(Some(mut hash)) = t.q("ACL CAT hash") else { panic!("ACL CAT hash") };
    let Reply::Array(Some(mut want)) = p.q("ACL CAT hash") else { panic!("ACL CAT hash") };
    hash.sort();
    want.sort();
    assert_eq!(hash, want, "the hash category has the same commands");

    // A restricted user: its commands, subcommands and keys.
    let (mut pa, mut ta) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut pa,
        &mut ta,
        &[
            "AUTH alice bad",
            "AUTH nosuch pw1",
            "AUTH alice pw1",
            "GET app:1",
            "GET other",
            "GET ro:1",
            "SET ro:1 x",
            "SET app:1 x",
            "SET app:1 y GET",
            "HSET app:h f v",
            "HDEL app:h f",
            "MGET app:1 other",
            "PING",
            "ACL WHOAMI",
            "CLIENT ID",
            "CONFIG GET maxclients",
            "CONFIG SET maxclients 100",
            "SELECT 1",
            "EXEC",
            "MULTI",
            "GET app:1",
            "GET other",
            "EXEC",
        ],
    );
    // Pipelined GET and SET of a restricted user (Tern's merged path checks each): allowed and
    // denied keys mixed in one write.
    let pipeline: [&[&[u8]]; 6] = [
        &[b"SET", b"app:p1", b"v1"],
        &[b"SET", b"other", b"v"],
        &[b"GET", b"app:p1"],
        &[b"GET", b"other"],
        &[b"GET", b"ro:1"],
        &[b"SET", b"ro:1", b"w"],
    ];
    for a in pipeline {
        pa.send(a);
        ta.send(a);
    }
    for a in pipeline {
        assert_eq!(ta.read(), pa.read(), "pipelined {:?}", String::from_utf8_lossy(&a.concat()));
    }
    // A deleted user's connections close.
    compare(&mut p, &mut t, &["ACL DELUSER alice bob dave", "ACL LIST"]);
    assert!(pa.closed() && ta.closed(), "connections of a deleted user close");

    // requirepass: new connections must sign in; signed-in ones stay so.
    compare(&mut p, &mut t, &["CONFIG SET requirepass s3cret", "CONFIG GET requirepass", "ACL LIST", "PING"]);
    let (mut pn, mut tn) = (Conn::open(peer.port), Conn::open(port));
    compare(
        &mut pn,
        &mut tn,
        &[
            "GET x",
            "PING",
            "HELLO 3",
            "HELLO 3 AUTH",
            "HELLO 2 SETNAME x",
            "AUTH wrong",
            "MULTI",
            "EXEC",
            "RESET",
            "HELLO 2 AUTH default wrong",
        ],
    );
    for c in [&mut pn, &mut tn] {
        let Reply::Array(Some(hello)) = c.q("HELLO 2 AUTH default s3cret SETNAME me") else { panic!("HELLO AUTH") };
        assert_eq!(hello.len(), 14);
    }
    compare(&mut pn, &mut tn, &["ACL WHOAMI", "CLIENT GETNAME", "GET x", "RESET", "GET x", "AUTH s3cret", "GET x"]);
    both(&mut p, &mut t, &[b"CONFIG", b"SET", b"requirepass", b""]);
    let (mut pn, mut tn) = (Conn::open(peer.port), Conn::open(port));
    compare(&mut pn, &mut tn, &["GET x", "ACL LIST", "AUTH s3cret"]);
}

/// Redis over TLS (`tls-port`, certificates as redis-server takes them, client certificates
/// required by default): redis-cli --tls with a client certificate gets the same replies from
/// redis-server and Tern; without one, or in plain text on the TLS port, both refuse.
#[test]
fn tls_port_matches_redis_server() {
    let fixture = |name: &str| {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../rest/tests/tls")
            .join(name)
            .to_string_lossy()
            .into_owned()
    };
    let (cert, key, ca) = (fixture("server.pem"), fixture("server.key"), fixture("ca.pem"));
    let peer_tls = common::free_port().to_string();
    let peer = common::start_peer_with(&[
        "--tls-port",
        &peer_tls,
        "--tls-cert-file",
        &cert,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
    ]);
    let (_dir, _node, addr) = start_node(256 << 20);
    // A port picked free may be taken before the server binds it (another test's connection or
    // node): pick again, as `start_peer_with` does.
    let (tern_tls, plain) = (0..10)
        .find_map(|_| {
            let tern_tls = common::free_port();
            let opts = RedisOptions {
                tls: Some(tern_redis::RedisTls {
                    listen: format!("127.0.0.1:{tern_tls}").parse().unwrap(),
                    files: tern_client::tls::TlsFiles {
                        certificate_file: cert.clone(),
                        private_key_file: key.clone(),
                        root_ca_cert_file: Some(ca.clone()),
                        verify_client: true,
                        names: ["tls_cert_file", "tls_key_file", "tls_ca_cert_file"],
                    },
                }),
                ..Default::default()
            };
            match common::try_start_tern(&addr, opts) {
                Ok(plain) => Some((tern_tls, plain)),
                Err(e) if e.contains("already in use") => None,
                Err(e) => panic!("{e}"),
            }
        })
        .expect("a free TLS port in ten tries");
    let cli = |port: &str, args: &[&str], cmd: &[&str]| {
        let out = std::process::Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", port])
            .args(args)
            .args(cmd)
            .output()
            .expect("redis-cli (redis-tools) is needed");
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)).trim().to_string()
    };
    let client_cert = fixture("client.pem");
    let client_key = fixture("client.key");
    let with_cert = ["--tls", "--cacert", &ca, "--cert", &client_cert, "--key", &client_key];
    for cmd in [&["PING"][..], &["SET", "k", "v"], &["GET", "k"], &["APPEND", "k", "w"], &["GET", "k"]] {
        let want = cli(&peer_tls, &with_cert, cmd);
        let got = cli(&tern_tls.to_string(), &with_cert, cmd);
        assert_eq!(got, want, "{cmd:?}");
    }
    // The plain port serves the same data.
    assert_eq!(cli(&plain.to_string(), &[], &["GET", "k"]), "vw");
    // No client certificate: the handshake fails on both.
    let no_cert = ["--tls", "--cacert", &ca];
    for port in [peer_tls.clone(), tern_tls.to_string()] {
        let out = cli(&port, &no_cert, &["PING"]);
        assert_ne!(out, "PONG", "port {port}: {out}");
    }
    // Plain RESP on the TLS port gets no reply.
    for port in [peer_tls.parse::<u16>().unwrap(), tern_tls] {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        use std::io::{Read, Write};
        s.write_all(b"PING\r\n").unwrap();
        let mut b = [0u8; 64];
        let n = s.read(&mut b).unwrap_or(0);
        assert!(!b[..n].starts_with(b"+PONG"), "port {port} answered plain text on TLS");
    }
    drop(peer);
}
